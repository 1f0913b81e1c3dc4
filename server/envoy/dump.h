/* The Envoy descriptors in force as text (envoy_dump.c), in the form of
 * envoy-ratelimit's Dump() (src/config/config_impl.go), which its debug
 * listener serves at /rlconfig: one line per descriptor with a
 * rate_limit,
 *
 *   <domain>.<key>[_<value>][.<key>[_<value>]...]: unit=<UNIT>
 *   requests_per_unit=<N>, shadow_mode: <bool>, quota_mode: <bool>
 *
 * (one line), in the files' order (the reference's follows Go's map
 * order). What only this server has follows on the same line as
 * ", name: value" pairs, so a line of a file the reference reads is the
 * reference's line: ", limit: 10/1s:gcra:burst=20" for a window or an
 * algorithm of ours, ", unlimited: true", ", charge_only: true",
 * ", rule: NAME". */
#ifndef RLS_POLICY_ENVOY_DUMP_H
#define RLS_POLICY_ENVOY_DUMP_H

#include <stddef.h>

#include "envoy/conf.h"
#include "rl_buf.h"

/* Appends the dump of c (NULL: nothing, as the reference writes nothing
 * before a configuration is loaded) to out, at most max bytes of it: past
 * that, one line "# truncated: N more limits". Returns 0 or the buffer's
 * RL_ENOMEM / RL_EFULL. */
int rls_envoy_dump(const rls_envoy_conf_t *c, rl_buf_t *out, size_t max);

#endif
