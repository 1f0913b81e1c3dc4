/* The lease keeper: a thread with its own blocking client renews a lease
 * on a cadence until rlc_lease_done stops it and releases the lease.
 *
 * The thread sleeps on a condition variable (monotonic clock) so that
 * rlc_lease_done wakes it at once instead of waiting out a tick. A renewal
 * is a blocking call on the keeper's own client, whose request timeout
 * bounds how long rlc_lease_done can wait for the thread. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rlc_int.h"

struct rlc_lease_s {
    rlc_client_t *c; /* used by the thread, then by rlc_lease_done */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done; /* under mu: rlc_lease_done asked the thread to stop */

    uint32_t every_ms; /* fixed cadence, or 0: a third of the lease */
    uint64_t lease_ms; /* the lease's length as last granted */
    uint64_t end_mono; /* the lease's end on the local monotonic clock */
    uint64_t first;    /* the first renewal, monotonic */
    rlc_lease_cb on_lost;
    void *arg;

    atomic_int lost; /* 0, or why the lease was lost */
    atomic_uint_fast64_t expires_at;
    atomic_uint renewals;
    rlc_xresult_t fail; /* the failing renewal, once lost */
    size_t handle_len;
    uint8_t handle[RLC_HANDLE_MAX];
};

/* The lease's length from a grant: on the store's clock when the server
 * said when it decided, else against the local wall clock. 0: unknown. */
static uint64_t lease_len(const rlc_xresult_t *x)
{
    uint64_t from = x->r.decided_at_ms != 0 ? x->r.decided_at_ms : x->r.unix_ms;

    return x->expires_at_ms > from ? x->expires_at_ms - from : 0;
}

static uint64_t period(const rlc_lease_t *k)
{
    uint64_t p = k->every_ms != 0 ? k->every_ms : k->lease_ms / 3;

    return p != 0 ? p : 1;
}

/* Waits until the monotonic time `until` (ms) or until asked to stop.
 * Returns 1 when asked to stop. */
static int nap_until(rlc_lease_t *k, uint64_t until)
{
    struct timespec ts;
    int done;

    ts.tv_sec = (time_t)(until / 1000);
    ts.tv_nsec = (long)(until % 1000) * 1000000L;
    pthread_mutex_lock(&k->mu);
    while (!k->done && rl_mono_ms() < until)
        if (pthread_cond_timedwait(&k->cv, &k->mu, &ts) != 0 &&
            rl_mono_ms() >= until)
            break;
    done = k->done;
    pthread_mutex_unlock(&k->mu);
    return done;
}

static void lose(rlc_lease_t *k, const rlc_xresult_t *x, int why)
{
    k->fail = *x;
    atomic_store(&k->lost, why);
    if (k->on_lost != NULL)
        k->on_lost(k, x, k->arg);
}

static void *keep(void *arg)
{
    rlc_lease_t *k = arg;
    uint64_t next = k->first;
    rlc_xresult_t x;

    while (!nap_until(k, next)) {
        uint64_t sent = rl_mono_ms();
        int rc = rlc_renew(k->c, k->handle, k->handle_len, &x);

        if (rc == RLC_OK && x.r.code == RLC_CODE_OK) {
            uint64_t len = lease_len(&x);
            if (len != 0)
                k->lease_ms = len;
            /* Counted from when the renewal left: the server's clock
             * started the new term no earlier than that. */
            k->end_mono = sent + k->lease_ms;
            atomic_store(&k->expires_at, x.expires_at_ms);
            atomic_fetch_add(&k->renewals, 1);
            next = sent + period(k);
            continue;
        }
        if (rc == RLC_OK) {
            /* The server answered: the lease is gone. */
            lose(k, &x, RLC_ECANCELED);
            return NULL;
        }
        /* No answer: the lease may still be there until its end. */
        if (rl_mono_ms() >= k->end_mono) {
            lose(k, &x, RLC_ETIMEDOUT);
            return NULL;
        }
        next = rl_mono_ms() + period(k);
        if (next > k->end_mono)
            next = k->end_mono;
    }
    return NULL;
}

int rlc_lease_keep(rlc_lease_t **out, const rlc_options_t *opts,
                   const rlc_xresult_t *acquired, uint32_t every_ms,
                   rlc_lease_cb on_lost, void *arg)
{
    pthread_condattr_t ca;
    rlc_lease_t *k;
    int rc;

    if (out == NULL)
        return RLC_EINVAL;
    *out = NULL;
    if (opts == NULL || acquired == NULL || acquired->op != RLC_OP_ACQUIRE ||
        acquired->r.code != RLC_CODE_OK || acquired->handle_len == 0 ||
        acquired->handle_len > RLC_HANDLE_MAX)
        return RLC_EINVAL;
    if (every_ms == 0 && lease_len(acquired) == 0)
        return RLC_EINVAL;
    k = calloc(1, sizeof(*k));
    if (k == NULL)
        return RLC_ENOMEM;
    k->every_ms = every_ms;
    k->lease_ms = lease_len(acquired);
    if (k->lease_ms == 0)
        k->lease_ms = (uint64_t)every_ms * 3;
    /* The lease began when it was granted, not now: time spent since the
     * result came in counts against its first term. */
    uint64_t now_unix = rl_unix_ms(), age = 0;
    if (now_unix > acquired->r.unix_ms)
        age = now_unix - acquired->r.unix_ms;
    k->end_mono =
        rl_mono_ms() + k->lease_ms - (age < k->lease_ms ? age : k->lease_ms);
    k->first = rl_mono_ms() + period(k) - (age < period(k) ? age : period(k));
    k->on_lost = on_lost;
    k->arg = arg;
    atomic_init(&k->lost, 0);
    atomic_init(&k->expires_at, acquired->expires_at_ms);
    atomic_init(&k->renewals, 0);
    k->handle_len = acquired->handle_len;
    memcpy(k->handle, acquired->handle, acquired->handle_len);

    rc = rlc_connect(&k->c, opts);
    if (rc != RLC_OK) {
        free(k);
        return rc;
    }
    if (pthread_mutex_init(&k->mu, NULL) != 0) {
        rc = RLC_ENOMEM;
        goto fail_client;
    }
    if (pthread_condattr_init(&ca) != 0) {
        rc = RLC_ENOMEM;
        goto fail_mutex;
    }
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rc = pthread_cond_init(&k->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        rc = RLC_ENOMEM;
        goto fail_mutex;
    }
    if (pthread_create(&k->thread, NULL, keep, k) != 0) {
        rc = RLC_ENOMEM;
        goto fail_cond;
    }
    *out = k;
    return RLC_OK;

fail_cond:
    pthread_cond_destroy(&k->cv);
fail_mutex:
    pthread_mutex_destroy(&k->mu);
fail_client:
    rlc_free(k->c);
    free(k);
    return rc;
}

int rlc_lease_lost(const rlc_lease_t *k)
{
    return k == NULL ? RLC_EINVAL : atomic_load(&k->lost);
}

uint64_t rlc_lease_expires_at(const rlc_lease_t *k)
{
    return k == NULL ? 0 : atomic_load(&k->expires_at);
}

unsigned rlc_lease_renewals(const rlc_lease_t *k)
{
    return k == NULL ? 0 : atomic_load(&k->renewals);
}

int rlc_lease_done(rlc_lease_t *k, rlc_xresult_t *res)
{
    rlc_xresult_t x;
    int rc;

    if (k == NULL)
        return RLC_EINVAL;
    pthread_mutex_lock(&k->mu);
    k->done = 1;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
    pthread_join(k->thread, NULL);

    rc = atomic_load(&k->lost);
    if (rc != 0)
        x = k->fail;
    else
        rc = rlc_release(k->c, k->handle, k->handle_len, &x);
    if (res != NULL)
        *res = x;
    rlc_free(k->c);
    pthread_cond_destroy(&k->cv);
    pthread_mutex_destroy(&k->mu);
    free(k);
    return rc;
}
