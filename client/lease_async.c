/* The lease keeper on an async client's loop: a timer renews the lease
 * through the client, and rlc_async_lease_done releases it.
 *
 * At most one request of the keeper is in flight at a time (a renewal or
 * the release). A done that comes while a renewal is in flight waits for
 * its answer, then releases (unless that answer lost the lease). The
 * keeper's memory goes in its timer's close callback, after the done
 * callback has returned. */
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "rlc_int.h"

struct rlc_async_lease_s {
    uv_timer_t timer;
    rlc_async_t *c;
    uint32_t every_ms;
    uint64_t lease_ms;
    uint64_t end;  /* the lease's end, loop time */
    uint64_t sent; /* when the renewal in flight was submitted */
    int inflight;  /* a renewal or the release is in flight */
    int stopping;  /* rlc_async_lease_done was called */
    int lost;      /* 0, or why the lease was lost */
    int finished;  /* the done callback has fired */
    uint64_t expires_at;
    unsigned renewals;
    rlc_async_lease_cb on_lost, on_done;
    void *lost_arg, *done_arg;
    rlc_xresult_t last; /* the failing renewal, or the release's answer */
    size_t handle_len;
    uint8_t handle[RLC_HANDLE_MAX];
};

static void on_renewed(rlc_async_t *c, const rlc_xresult_t *res, void *arg);
static void on_released(rlc_async_t *c, const rlc_xresult_t *res, void *arg);
static void on_tick(uv_timer_t *t);

static uint64_t lease_len(const rlc_xresult_t *x)
{
    uint64_t from = x->r.decided_at_ms != 0 ? x->r.decided_at_ms : x->r.unix_ms;

    return x->expires_at_ms > from ? x->expires_at_ms - from : 0;
}

static uint64_t period(const rlc_async_lease_t *k)
{
    uint64_t p = k->every_ms != 0 ? k->every_ms : k->lease_ms / 3;

    return p != 0 ? p : 1;
}

static void on_closed(uv_handle_t *h)
{
    free(h->data);
}

/* Fires the done callback once, then lets the keeper go. */
static void finish(rlc_async_lease_t *k)
{
    if (k->finished)
        return;
    k->finished = 1;
    uv_timer_stop(&k->timer);
    if (k->on_done != NULL)
        k->on_done(k, &k->last, k->done_arg);
    uv_close((uv_handle_t *)&k->timer, on_closed);
}

static void lose(rlc_async_lease_t *k, const rlc_xresult_t *x, int why)
{
    k->last = *x;
    k->lost = why;
    uv_timer_stop(&k->timer);
    if (k->on_lost != NULL && !k->stopping)
        k->on_lost(k, x, k->lost_arg);
}

static void tick_at(rlc_async_lease_t *k, uint64_t at)
{
    uint64_t now = uv_now(k->timer.loop);

    uv_timer_start(&k->timer, on_tick, at > now ? at - now : 0, 0);
}

static void release(rlc_async_lease_t *k)
{
    int rc = rlc_async_release(k->c, k->handle, k->handle_len, on_released, k);

    if (rc == RLC_OK) {
        k->inflight = 1;
        return;
    }
    /* Not even submitted (the client is closing, or full): the done
     * callback says so, from the loop (on_tick finishes a stopping
     * keeper). */
    rlc__xresult_fail(&k->last, RLC_OP_RELEASE, 0, rc, RLC_FAIL_CLOSED, 0,
                      rl_unix_ms());
    tick_at(k, 0);
}

static void on_released(rlc_async_t *c, const rlc_xresult_t *res, void *arg)
{
    rlc_async_lease_t *k = arg;

    (void)c;
    k->inflight = 0;
    k->last = *res;
    finish(k);
}

/* A renewal that got no answer, or could not be submitted. */
static void missed(rlc_async_lease_t *k, const rlc_xresult_t *x)
{
    uint64_t now = uv_now(k->timer.loop), next;

    if (now >= k->end) {
        lose(k, x, RLC_ETIMEDOUT);
        return;
    }
    next = now + period(k);
    tick_at(k, next < k->end ? next : k->end);
}

static void on_tick(uv_timer_t *t)
{
    rlc_async_lease_t *k = t->data;
    int rc;

    if (k->stopping) {
        /* A done with nothing to release (lost) fires from here, never
         * inside rlc_async_lease_done. */
        finish(k);
        return;
    }
    k->sent = uv_now(t->loop);
    rc = rlc_async_renew(k->c, k->handle, k->handle_len, on_renewed, k);
    if (rc == RLC_OK) {
        k->inflight = 1;
        return;
    }
    rlc_xresult_t x;
    rlc__xresult_fail(&x, RLC_OP_RENEW, 0, rc, RLC_FAIL_CLOSED, 0,
                      rl_unix_ms());
    missed(k, &x);
}

static void on_renewed(rlc_async_t *c, const rlc_xresult_t *res, void *arg)
{
    rlc_async_lease_t *k = arg;
    /* on_lost may call rlc_async_lease_done: that one goes on by itself. */
    int stopping = k->stopping;

    (void)c;
    k->inflight = 0;
    if (res->r.status == RLC_OK && res->r.code == RLC_CODE_OK) {
        uint64_t len = lease_len(res);
        if (len != 0)
            k->lease_ms = len;
        k->end = k->sent + k->lease_ms;
        k->expires_at = res->expires_at_ms;
        k->renewals++;
        if (k->stopping)
            release(k);
        else
            tick_at(k, k->sent + period(k));
        return;
    }
    if (res->r.status == RLC_OK)
        lose(k, res, RLC_ECANCELED);
    else if (res->r.status == RLC_ECANCELED)
        lose(k, res, RLC_ECANCELED); /* the client is being freed */
    else if (!stopping)
        missed(k, res);
    if (stopping) {
        if (k->lost)
            finish(k);
        else
            release(k);
    }
}

int rlc_async_lease_keep(rlc_async_lease_t **out, rlc_async_t *c,
                         const rlc_xresult_t *acquired, uint32_t every_ms,
                         rlc_async_lease_cb on_lost, void *arg)
{
    rlc_async_lease_t *k;
    uv_loop_t *loop;

    if (out == NULL)
        return RLC_EINVAL;
    *out = NULL;
    if (c == NULL || acquired == NULL || acquired->op != RLC_OP_ACQUIRE ||
        acquired->r.code != RLC_CODE_OK || acquired->handle_len == 0 ||
        acquired->handle_len > RLC_HANDLE_MAX ||
        (every_ms == 0 && lease_len(acquired) == 0))
        return RLC_EINVAL;
    loop = rlc__async_loop(c);
    k = calloc(1, sizeof(*k));
    if (k == NULL)
        return RLC_ENOMEM;
    uv_timer_init(loop, &k->timer);
    k->timer.data = k;
    k->c = c;
    k->every_ms = every_ms;
    k->lease_ms = lease_len(acquired);
    if (k->lease_ms == 0)
        k->lease_ms = (uint64_t)every_ms * 3;
    uv_update_time(loop);
    /* The lease began when it was granted: time spent since the result
     * came in counts against its first term. */
    uint64_t now_unix = rl_unix_ms(), age = 0;
    if (now_unix > acquired->r.unix_ms)
        age = now_unix - acquired->r.unix_ms;
    k->end =
        uv_now(loop) + k->lease_ms - (age < k->lease_ms ? age : k->lease_ms);
    k->expires_at = acquired->expires_at_ms;
    k->on_lost = on_lost;
    k->lost_arg = arg;
    k->handle_len = acquired->handle_len;
    memcpy(k->handle, acquired->handle, acquired->handle_len);
    tick_at(k, uv_now(loop) + period(k) - (age < period(k) ? age : period(k)));
    *out = k;
    return RLC_OK;
}

int rlc_async_lease_lost(const rlc_async_lease_t *k)
{
    return k == NULL ? RLC_EINVAL : k->lost;
}

uint64_t rlc_async_lease_expires_at(const rlc_async_lease_t *k)
{
    return k == NULL ? 0 : k->expires_at;
}

unsigned rlc_async_lease_renewals(const rlc_async_lease_t *k)
{
    return k == NULL ? 0 : k->renewals;
}

int rlc_async_lease_done(rlc_async_lease_t *k, rlc_async_lease_cb done,
                         void *arg)
{
    if (k == NULL)
        return RLC_EINVAL;
    if (k->stopping)
        return RLC_EINVAL; /* once only */
    k->stopping = 1;
    k->on_done = done;
    k->done_arg = arg;
    uv_timer_stop(&k->timer);
    if (k->inflight)
        return RLC_OK; /* on_renewed goes on from there */
    if (k->lost) {
        tick_at(k, 0);
        return RLC_OK;
    }
    release(k);
    return RLC_OK;
}
