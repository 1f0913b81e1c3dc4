/* Validation of a CheckRequest, shared by the server (which answers an
 * invalid request with ERROR and its reason) and the client library (which
 * refuses to send one). */
#ifndef RL_VALIDATE_H
#define RL_VALIDATE_H

#include "rl_msg.h"

/* Documented maxima. */
#define RL_KEY_MAX 512
#define RL_RULE_MAX 128

/* Checks c against the request rules (DESIGN.md, "Messages" and "Bad
 * input") and normalises it: a cost of 0 is read as 1. Returns 0, or the
 * first rule broken as an RL_E* code whose rl_strerror() text is the
 * message to send back:
 *   key empty, longer than RL_KEY_MAX bytes, or holding a NUL byte;
 *   a rule name over RL_RULE_MAX bytes or outside [A-Za-z0-9_.:-];
 *   both a rule and an inline limit/window; neither;
 *   limit 0 or window_seconds 0 in an inline limit; window_seconds over
 *   RL_WINDOW_MAX_S; limit over INT64_MAX;
 *   with levels (c->nlevels > 0): more than RL_LEVELS_MAX, a key, rule,
 *   limit or window_seconds of the request's own, an op other than CHECK,
 *   a level without a rule (RL_ELEVELS), a level's key or rule broken as
 *   above, the same key and rule twice (RL_ELEVELTWICE).
 * Whether a named rule exists is for the server to say (RL_ENORULE). */
int rl_check_validate(rl_check_t *c);

#endif
