/* The top offenders, for the admin listener's /v1/top (admin_top.c;
 * admin_api.h): this instance's, every loop's merged (core/top.h). */
#ifndef RLS_ADMIN_TOP_H
#define RLS_ADMIN_TOP_H

#include "admin/admin_api_parse.h"
#include "admin/admin_state.h"
#include "rl_buf.h"

/* Appends the answer to q (a /v1/top request: one rule's callers, or
 * every rule with refusals; JSON, text or the summary's text) to out.
 * v->top must not be NULL. Returns 0, RL_ENOMEM, or the buffer's error
 * (RL_EFULL: over its cap). */
int rls_admin_top(const rls_admin_view_t *v, const rls_admin_req_t *q,
                  rl_buf_t *out);

#endif
