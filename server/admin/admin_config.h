/* The configuration in force, for the admin listener's /v1/config
 * (admin_config.c; admin_api.h). */
#ifndef RLS_ADMIN_CONFIG_H
#define RLS_ADMIN_CONFIG_H

#include "admin/admin_state.h"
#include "rl_buf.h"

/* Appends the configuration in force as v shows it (the parts of
 * `parts`, RLS_ADMIN_PART_*, 0: all) to out as JSON. Returns 0 or the
 * buffer's error (RL_EFULL: over its cap). */
int rls_admin_config(const rls_admin_view_t *v, unsigned parts, rl_buf_t *out);

#endif
