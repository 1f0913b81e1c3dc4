/* The reservation ledger: each key's counter, read by a plain check before
 * and after the run, must have moved by what the answers say (rlb.h). The
 * checks go on a blocking client of their own, in batches, outside the
 * measured run. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rlb.h"
#include "rlc.h"

#define LEDGER_BATCH 256

/* One check of every key on a fresh client; calls seen(l, key, result)
 * for each answered one, marks the others unknown. Returns 0 or RL_EIO
 * with l->why set. */
static int check_all(rlb_ledger_t *l, const rlb_opts_t *o, int last)
{
    rlc_options_t ro;
    rlc_client_t *c = NULL;
    rlc_check_t q[LEDGER_BATCH];
    rlc_result_t res[LEDGER_BATCH];
    char keys[LEDGER_BATCH][RLC_KEY_MAX + 1];
    uint32_t k, i, n;
    int rc;

    rlc_options_init(&ro);
    ro.servers = o->server;
    ro.request_timeout_ms = o->timeout_ms < 5000 ? 5000 : o->timeout_ms;
    rlb_opts_tls(o, &ro);
    rc = rlc_connect_why(&c, &ro, l->why, sizeof(l->why));
    if (rc != RLC_OK) {
        if (l->why[0] == '\0')
            snprintf(l->why, sizeof(l->why), "%s", rlc_strerror(rc));
        return RL_EIO;
    }
    for (k = 0; k < l->nkeys; k += n) {
        n = l->nkeys - k < LEDGER_BATCH ? l->nkeys - k : LEDGER_BATCH;
        memset(q, 0, sizeof(q));
        for (i = 0; i < n; i++) {
            snprintf(keys[i], sizeof(keys[i]), "%s%" PRIu32, o->key_prefix,
                     k + i);
            q[i].key = keys[i];
            q[i].cost = 1;
            if (o->rule != NULL) {
                q[i].rule = o->rule;
            } else {
                q[i].limit = o->limit;
                q[i].window_s = o->window_s;
            }
        }
        rlc_check_batch(c, q, n, res);
        for (i = 0; i < n; i++) {
            const rlc_result_t *r = &res[i];
            uint32_t key = k + i;
            uint64_t wend = r->decided_at_ms + r->reset_after_ms;
            if (r->status != RLC_OK || r->error[0] ||
                (r->code != RLC_CODE_OK && r->code != RLC_CODE_OVER_LIMIT)) {
                l->skip[key] |= 1;
                continue;
            }
            if (r->code == RLC_CODE_OVER_LIMIT) {
                l->skip[key] |= 2;
                continue;
            }
            if (!last) {
                l->used[key] = r->used;
                l->wend[key] = wend;
                continue;
            }
            if (l->skip[key])
                continue;
            /* A window that ended between the checks: a fresh counter. A
             * few ms apart is the instances' clock estimates. */
            if (wend > l->wend[key] + 50 || wend + 50 < l->wend[key]) {
                l->rolled++;
                continue;
            }
            l->checked++;
            if ((int64_t)r->used != (int64_t)l->used[key] + l->delta[key] + 1) {
                if (l->mismatched++ == 0) {
                    l->first_key = key;
                    l->first_want = (int64_t)l->used[key] + l->delta[key] + 1;
                    l->first_got = (int64_t)r->used;
                }
            }
        }
    }
    rlc_free(c);
    return 0;
}

int rlb_ledger_open(rlb_ledger_t *l, const rlb_opts_t *o)
{
    memset(l, 0, sizeof(*l));
    l->nkeys = o->keys;
    l->delta = calloc(l->nkeys, sizeof(*l->delta));
    l->used = calloc(l->nkeys, sizeof(*l->used));
    l->wend = calloc(l->nkeys, sizeof(*l->wend));
    l->skip = calloc(l->nkeys, sizeof(*l->skip));
    if (l->delta == NULL || l->used == NULL || l->wend == NULL ||
        l->skip == NULL)
        return RL_ENOMEM;
    return check_all(l, o, 0);
}

void rlb_ledger_add(rlb_ledger_t *l, uint32_t key, int64_t d)
{
    if (l->delta != NULL && key < l->nkeys)
        l->delta[key] += d;
}

void rlb_ledger_unknown(rlb_ledger_t *l, uint32_t key)
{
    if (l->skip != NULL && key < l->nkeys)
        l->skip[key] |= 4;
}

int rlb_ledger_close(rlb_ledger_t *l, const rlb_opts_t *o)
{
    uint32_t k;
    int rc;

    if (l->delta == NULL)
        return RL_EIO;
    rc = check_all(l, o, 1);
    for (k = 0; k < l->nkeys; k++) {
        l->unknown += (l->skip[k] & 5) != 0;
        l->full += l->skip[k] == 2;
    }
    l->done = rc == 0;
    return rc;
}

void rlb_ledger_free(rlb_ledger_t *l)
{
    if (l == NULL)
        return;
    free(l->delta);
    free(l->used);
    free(l->wend);
    free(l->skip);
    l->delta = NULL;
    l->used = l->wend = NULL;
    l->skip = NULL;
}
