/* The load loop: N async librlc clients on one libuv loop.
 *
 * Closed loop: each connection keeps --inflight checks outstanding; every
 * answer sends the next one from inside its callback, and librlc packs the
 * checks submitted in one loop iteration into one write.
 *
 * Open loop: check i is due at its scheduled time, whatever the server does:
 * start + i / rate (--arrivals each), or after exponential gaps of mean
 * 1 / rate (poisson). A timerfd (libuv's timers count whole milliseconds,
 * too coarse for 50,000 checks a second) wakes the loop when the next
 * check is due, so each is written at its own time, one request per
 * write, as independent clients send them; with --arrivals grouped it
 * wakes every few tens of microseconds and sends every check that has
 * fallen due, several per write. Latency runs from the scheduled
 * time, not from the send, so a server that falls behind shows its queueing
 * in the percentiles instead of quietly slowing the generator down (the
 * "coordinated omission" that closed loops suffer). Checks that could not
 * even be sent because every request slot was taken stay due, and are
 * counted as unsent if the run ends first.
 *
 * Replay (--replay): the checks are the log's lines, each due at its time
 * after the first line's over --replay-speed, sent as the open loop sends
 * them (or, at speed 0, as the closed loop does). The run ends when the
 * log does. A check due when every slot is taken waits for one; how late
 * each check went out is measured, so the report shows whether the
 * generator kept up with the log.
 *
 * Phases: warmup (audited, not measured), measure, drain (nothing new is
 * sent; answers still count), done. Which checks are measured is decided by
 * when each was sent (or scheduled), so the boundaries are sharp. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <uv.h>

#include "rl_clock.h"
#include "rl_error.h"
#include "rl_window.h"
#include "rlb.h"
#include "rlc.h"

#define NIL UINT32_MAX
#define HIST_HIGHEST_NS (UINT64_C(1) << 40) /* about 18 minutes */
#define HIST_SUB_BITS 8
#define DRAIN_EXTRA_MS 500 /* beyond the request timeout */
#define TICK_MS 100        /* phase changes, give-up check */

enum { PH_WARMUP, PH_MEASURE, PH_DRAIN, PH_DONE };

struct bench_s;

/* One check in flight: what the answer needs to be accounted. With --op
 * reserve or acquire the slot stays taken from the RESERVE or ACQUIRE
 * through the hold to the SETTLE's or RELEASE's answer (follow), with the
 * handle kept in h, grown once to the longest seen. */
typedef struct req_s {
    uint64_t due_ns;  /* scheduled (open loop) or sent (closed loop) */
    uint64_t sent_ns; /* handed to librlc */
    struct conn_s *conn;
    uint32_t key;
    uint32_t next;    /* free list */
    uint8_t follow;   /* the settle or release is the one in flight */
    uint8_t measured; /* the first request was measured */
    uint64_t lease;   /* the lease audit's id (0: none) */
    uint64_t actual;  /* the settle's actual cost */
    uint8_t *h;
    size_t hlen, hcap;
} req_t;

typedef struct conn_s {
    struct bench_s *b;
    rlc_async_t *c;
    req_t *reqs; /* nreqs slots, allocated once */
    /* --hold-ms: a timer per slot for the hold (NULL without a hold),
     * initialized when the run starts (timers_on) and closed by finish */
    uv_timer_t *timers;
    int timers_on;
    uint32_t nreqs, free_head, inflight;
    uint32_t server; /* --fleet: index into res->servers */
    int connected;
    char key[RLC_KEY_MAX + 1]; /* the prefix, then the digits */
    size_t prefix_len;
    /* --levels: the check's two levels and their keys (rlb.h) */
    rlc_level_t lv[2];
    char lkey[2][RLC_KEY_MAX + 1];
} conn_t;

typedef struct bench_s {
    const rlb_opts_t *o;
    rlb_result_t *res;
    uv_loop_t loop;
    conn_t *conns;
    uint32_t nconns;
    rlb_keys_t keys;
    rlb_audit_t audit;
    rlb_audit_t org_audit; /* --levels: the organisation level's */
    rlb_rng_t xrng; /* holds, crashes and settle actuals */
    int phase;

    uint64_t start_ns;   /* load began */
    uint64_t measure_ns; /* measurement began */
    uint64_t end_ns;     /* measurement ended (0: not yet) */
    uint64_t drain_deadline_ns;
    uint64_t first_send_ns;
    uint64_t sent_total; /* warmup included, for --requests */
    uint64_t inflight;   /* over all connections */
    int capped;          /* --requests reached */

    /* open loop */
    double interval_ns;
    uint64_t seq;      /* next check to send */
    double due_off_ns; /* when it is due, in ns after start_ns */
    uint64_t rng;      /* poisson: xorshift64 state */
    uint32_t rr;       /* next connection to try */
    /* --replay: the log's next request, read ahead (rq_have) so that its
     * time is known before it is due; rq_end: the log has no more;
     * rq_waited: it found every slot taken (counted once). */
    rlb_replay_req_t rq;
    int rq_have, rq_end, rq_waited;
    int tfd;
    uv_poll_t tpoll;

    uv_timer_t tick, phase_timer, progress, finisher;
    uv_signal_t sigint;
    int nconnected, ever_connected, sigints;
    uint64_t down_since_ns;
    int told_tls; /* a TLS failure's reason was printed */
    uint64_t last_decisions;
    int progress_shown;

    /* --timeline-csv: latencies of the answers received in the current
     * 100 ms slot of the measured run */
    rl_hist_t tl;
    uint64_t tl_slot; /* slots since measure_ns of the row being filled */
} bench_t;

#define TIMELINE_SLOT_NS 100000000ULL

static void finish(bench_t *b, const char *early);

/* ---- keys and checks ------------------------------------------------- */

static void on_result(rlc_async_t *cl, const rlc_result_t *res, void *arg);
static void on_xresult(rlc_async_t *cl, const rlc_xresult_t *res, void *arg);

/* May more checks be sent? */
static int sending(const bench_t *b)
{
    return b->phase <= PH_MEASURE && !b->capped;
}

static void on_finisher(uv_timer_t *t);

/* When the measurement ends by the clock: measure_ns + --duration, or
 * never for a replay without --duration (the log's end ends it). */
static uint64_t cap_end(const bench_t *b)
{
    if (b->o->replay_path != NULL && !b->o->have_duration)
        return UINT64_MAX;
    return b->measure_ns + (uint64_t)(b->o->duration_s * 1e9);
}

/* --replay, open loop: when the loaded request is due. A log's times
 * over a small speed could overflow: clamped to some 280 years. */
static uint64_t replay_due(const bench_t *b)
{
    double off = (double)b->rq.off_ms * 1e6 / b->o->replay_speed;

    return b->start_ns +
           (off < 9e18 ? (uint64_t)off : UINT64_C(9000000000000000000));
}

/* --replay: loads the log's next request unless one is loaded. Returns 1
 * when one is, 0 at the log's end. */
static int replay_peek(bench_t *b)
{
    if (!b->rq_have && !b->rq_end) {
        if (rlb_replay_next(b->o->replay, &b->rq) == 1) {
            b->rq_have = 1;
            b->rq_waited = 0;
        } else {
            b->rq_end = 1;
        }
    }
    return b->rq_have;
}

/* Stops sending; the measurement ends at end_ns (0: at the last answer,
 * for a run cut short by --requests). The run finishes once every answer
 * is in, or at the drain deadline. Only sets state and timers, so it may be
 * called from inside librlc's callbacks. */
static void start_drain(bench_t *b, uint64_t end_ns)
{
    uint64_t now = uv_hrtime();

    if (b->phase >= PH_DRAIN)
        return;
    if (b->phase == PH_WARMUP)
        b->measure_ns = now; /* cut short in warmup: nothing measured */
    b->phase = PH_DRAIN;
    b->end_ns = end_ns;
    uv_timer_stop(&b->phase_timer);
    b->drain_deadline_ns =
        now +
        ((uint64_t)b->o->timeout_ms + b->o->hold_ms + DRAIN_EXTRA_MS) * 1000000;
    if (b->inflight == 0)
        uv_timer_start(&b->finisher, on_finisher, 0, 0);
}

/* --levels: the two levels of user i's check (rlb.h), in c's buffers:
 * level 1 the tenant's, level 2 the user's. */
static const rlc_level_t *set_levels(conn_t *c, uint32_t i)
{
    const rlb_opts_t *o = c->b->o;
    uint32_t t = i % o->tenants;
    size_t n = 0, k;

    c->lkey[0][n++] = '{';
    memcpy(c->lkey[0] + n, o->key_prefix, c->prefix_len);
    n += c->prefix_len;
    c->lkey[0][n++] = 't';
    n += rl_put_u64(c->lkey[0] + n, t);
    c->lkey[0][n++] = '}';
    memcpy(c->lkey[1], c->lkey[0], n);
    memcpy(c->lkey[0] + n, "org", 3);
    c->lv[0].key = c->lkey[0];
    c->lv[0].key_len = n + 3;
    c->lv[0].rule = o->org_rule;
    k = n;
    c->lkey[1][k++] = 'u';
    k += rl_put_u64(c->lkey[1] + k, i);
    c->lv[1].key = c->lkey[1];
    c->lv[1].key_len = k;
    c->lv[1].rule = o->rule;
    return c->lv;
}

/* Sends one check on c, due at due_ns. Returns 0, or the librlc error
 * (RLC_EBUSY when every slot is taken) with nothing sent. */
static int send_check(conn_t *c, uint64_t due_ns, uint64_t now_ns)
{
    bench_t *b = c->b;
    const rlb_opts_t *o = b->o;
    rlc_check_t q;
    uint32_t i;
    req_t *r;
    int rc;

    if (c->free_head == NIL)
        return RLC_EBUSY;
    i = c->free_head;
    r = &c->reqs[i];
again:
    memset(&q, 0, sizeof(q));
    if (o->replay != NULL) {
        if (!replay_peek(b)) {
            /* Closed loop: the log is done, and so is the run once the
             * answers are in. */
            start_drain(b, 0);
            return RLC_ECANCELED;
        }
        r->key = 0; /* no audit: the log's callers are not numbered */
        q.key = b->rq.key;
        q.key_len = b->rq.key_len;
        q.cost = b->rq.cost;
    } else {
        r->key = rlb_keys_pick(&b->keys);
        q.key = c->key;
        q.key_len = c->prefix_len + rl_put_u64(c->key + c->prefix_len, r->key);
        q.cost = o->cost;
    }
    if (o->tenants > 0 && o->replay == NULL) {
        /* The user's level and its tenant's, under one {tenant} tag. */
        q.key = NULL;
        q.key_len = 0;
        q.levels = set_levels(c, r->key);
        q.nlevels = 2;
    } else if (o->rule != NULL) {
        q.rule = o->rule;
    } else {
        q.limit = o->limit;
        q.window_s = o->window_s;
    }
    r->due_ns = due_ns;
    r->sent_ns = now_ns;
    if (o->op == RLB_OP_CHECK) {
        rc = rlc_async_check(c->c, &q, on_result, r);
    } else {
        rlc_xop_t x;
        memset(&x, 0, sizeof(x));
        x.op = o->op == RLB_OP_RESERVE ? RLC_OP_RESERVE : RLC_OP_ACQUIRE;
        x.check = q;
        r->follow = 0;
        r->lease = 0;
        rc = rlc_async_xop(c->c, &x, on_xresult, r);
    }
    if (rc != RLC_OK && o->replay != NULL && rc != RLC_EBUSY) {
        /* Refused before sending (not for want of a slot): trying again
         * would be refused again, so the line is passed over, counted. */
        b->rq_have = 0;
        if (due_ns >= b->measure_ns)
            b->res->st.other_errors++;
        /* Closed loop: the next line takes its place, or the loop would
         * run one short. Open loop: the next line has a time of its own,
         * which the caller reads. */
        if (!rlb_open_loop(o))
            goto again;
    }
    if (rc != RLC_OK)
        return rc;
    if (o->replay != NULL) {
        b->rq_have = 0;
        if (rlb_open_loop(o) && due_ns >= b->measure_ns)
            rl_hist_record(&b->res->st.late_ns, now_ns - due_ns);
    }
    c->free_head = r->next;
    c->inflight++;
    b->inflight++;
    b->sent_total++;
    if (b->first_send_ns == 0)
        b->first_send_ns = now_ns;
    if (due_ns >= b->measure_ns)
        b->res->st.sent++;
    if (o->requests && b->sent_total >= o->requests && !b->capped) {
        b->capped = 1;
        start_drain(b, 0);
    }
    return 0;
}

/* Writes the rows of every slot before the one `now_ns` falls in, empty
 * ones too (a stall shows as a row with no answers), and starts that slot. */
static void timeline_advance(bench_t *b, uint64_t now_ns)
{
    uint64_t slot;

    if (now_ns < b->measure_ns)
        return;
    slot = (now_ns - b->measure_ns) / TIMELINE_SLOT_NS;
    if (b->tl_slot == UINT64_MAX) {
        b->tl_slot = slot;
        return;
    }
    for (; b->tl_slot < slot; b->tl_slot++) {
        fprintf(b->o->timeline, "%.1f,%llu,%.1f,%.1f,%.1f\n",
                (double)(b->tl_slot * TIMELINE_SLOT_NS) / 1e9,
                (unsigned long long)b->tl.total,
                (double)rl_hist_percentile(&b->tl, 50) / 1e3,
                (double)rl_hist_percentile(&b->tl, 99) / 1e3,
                (double)b->tl.max / 1e3);
        rl_hist_reset(&b->tl);
    }
}

/* Hands a decided answer to the audit; admitted unless refused or
 * shadow-refused. */
static void audit(bench_t *b, const req_t *r, const rlc_result_t *res,
                  int not_shadow, uint64_t now_ns)
{
    rlb_answer_t x;

    x.key = r->key;
    x.admitted = res->code == RLC_CODE_OK && not_shadow;
    x.limit = res->limit;
    x.window_s = res->window_s;
    x.algorithm = res->algorithm;
    x.reset_after_ms = res->reset_after_ms;
    x.decided_at_ms = res->decided_at_ms;
    x.sent_ms = (double)r->sent_ns / 1e6;
    x.recv_ms = (double)now_ns / 1e6;
    if (b->o->tenants > 0) {
        /* Levels: an admission counts in both levels' windows; a refusal
         * only in the refusing level's (it says nothing of the other's
         * room). The answer describes the deciding level's window: each
         * audit is given its own. */
        uint32_t lv = res->level <= 2 ? res->level : 0;
        x.window_s = b->o->window_s;
        x.algorithm = RL_ALGO_FIXED;
        if (!x.admitted)
            b->res->level_refused[lv]++;
        if (x.admitted || lv == 2) {
            x.limit = b->o->limit;
            rlb_audit_add(&b->audit, &x);
        }
        if (x.admitted || lv == 1) {
            x.key = r->key % b->o->tenants;
            x.limit = b->o->org_limit;
            rlb_audit_add(&b->org_audit, &x);
        }
        return;
    }
    rlb_audit_add(&b->audit, &x);
}

static void record(bench_t *b, const req_t *r, const rlc_result_t *res,
                   uint64_t now_ns)
{
    rlb_stats_t *st = &b->res->st;
    int measured =
        r->due_ns >= b->measure_ns && (b->end_ns == 0 || r->due_ns < b->end_ns);
    int decided = res->status == RLC_OK && (res->code == RLC_CODE_OK ||
                                            res->code == RLC_CODE_OVER_LIMIT);
    int bypassed = decided && res->code == RLC_CODE_OK && res->error[0];
    /* Allowed, but by a rule in shadow mode that refused: it consumed no
     * quota, so the audit counts it as not admitted. */
    int shadow = decided && res->code == RLC_CODE_OK && res->shadow_refused;

    if (b->o->audit && decided && b->o->op == RLB_OP_CHECK) {
        if (bypassed)
            b->audit.failed_open++;
        else
            audit(b, r, res, !shadow, now_ns);
    }
    if (!measured)
        return;
    if (b->o->fleet) {
        rlb_server_stats_t *sv = &b->res->servers[r->conn->server];
        /* The same split as the totals below, so that they add up. */
        if (res->status == RLC_OK && res->code == RLC_CODE_OK)
            sv->allowed++;
        else if (res->status == RLC_OK && res->code == RLC_CODE_OVER_LIMIT)
            sv->denied++;
        else
            sv->errors++;
    }
    if (res->status == RLC_OK) {
        rl_hist_record(&st->lat_ns, now_ns - r->due_ns);
        if (b->o->timeline != NULL) {
            timeline_advance(b, now_ns);
            rl_hist_record(&b->tl, now_ns - r->due_ns);
        }
        if (res->code == RLC_CODE_OK) {
            st->allowed++;
            st->failed_open += bypassed;
            st->shadow_refused += shadow;
        } else if (res->code == RLC_CODE_OVER_LIMIT) {
            st->denied++;
        } else {
            st->server_errors++;
        }
    } else if (res->status == RLC_ETIMEDOUT) {
        st->timeouts++;
    } else if (res->status == RLC_ECLOSED || res->status == RLC_ECANCELED ||
               res->status == RLC_EIO) {
        st->closed++;
    } else {
        st->other_errors++;
    }
}

static void on_result(rlc_async_t *cl, const rlc_result_t *res, void *arg)
{
    req_t *r = arg;
    conn_t *c = r->conn;
    bench_t *b = c->b;
    uint64_t now = uv_hrtime();

    (void)cl;
    record(b, r, res, now);
    r->next = c->free_head;
    c->free_head = (uint32_t)(r - c->reqs);
    c->inflight--;
    b->inflight--;

    if (!rlb_open_loop(b->o) && sending(b) && b->phase != PH_DONE)
        send_check(c, now, now);
    if (b->phase == PH_DRAIN && b->inflight == 0)
        uv_timer_start(&b->finisher, on_finisher, 0, 0);
}

/* ---- reservations and leases ------------------------------------------ */

/* A uniform draw in [0, 1). */
static double draw(bench_t *b)
{
    return (double)(rlb_rng_next(&b->xrng) >> 11) * 0x1p-53;
}

/* The slot is free again: the closed loop sends the next request from it,
 * and a drain ends with the last one. */
static void slot_done(bench_t *b, req_t *r, uint64_t now)
{
    conn_t *c = r->conn;

    r->next = c->free_head;
    c->free_head = (uint32_t)(r - c->reqs);
    c->inflight--;
    b->inflight--;
    if (!rlb_open_loop(b->o) && sending(b) && b->phase != PH_DONE)
        send_check(c, now, now);
    if (b->phase == PH_DRAIN && b->inflight == 0)
        uv_timer_start(&b->finisher, on_finisher, 0, 0);
}

/* Sends the settle or release of the handle the slot holds. When it cannot
 * be sent, it counts as an error and the slot is free. */
static void send_follow(bench_t *b, req_t *r)
{
    rlc_xop_t x;
    int rc = RLC_ECANCELED;

    if (b->phase == PH_DONE)
        return; /* the clients are gone; finish frees nothing more */
    memset(&x, 0, sizeof(x));
    x.op = b->o->op == RLB_OP_RESERVE ? RLC_OP_SETTLE : RLC_OP_RELEASE;
    x.handle = r->h;
    x.handle_len = r->hlen;
    x.actual = r->actual;
    r->follow = 1;
    if (r->measured)
        b->res->st.follow_sent++;
    if (r->conn->c != NULL)
        rc = rlc_async_xop(r->conn->c, &x, on_xresult, r);
    if (rc != RLC_OK) {
        if (r->measured)
            b->res->st.follow_errors++;
        if (b->o->audit && b->o->op == RLB_OP_ACQUIRE)
            rlb_lease_end(&b->res->lease, r->key, r->lease, 0);
        slot_done(b, r, uv_hrtime());
    }
}

static void on_hold(uv_timer_t *t)
{
    req_t *r = t->data;

    send_follow(r->conn->b, r);
}

/* An allowed RESERVE or ACQUIRE: keeps its handle, then settles or
 * releases it after the hold, or (a crash) lets the lease end by itself.
 * Returns 1 when the slot stays taken. */
static int follow_up(bench_t *b, req_t *r, const rlc_xresult_t *x)
{
    const rlb_opts_t *o = b->o;
    uint64_t hold = 0;

    if (o->op == RLB_OP_ACQUIRE && o->crash > 0 && draw(b) < o->crash) {
        if (r->measured)
            b->res->st.crashed++;
        if (o->audit)
            rlb_lease_end(&b->res->lease, r->key, r->lease, 0);
        return 0;
    }
    if (x->handle_len > r->hcap) {
        uint8_t *h = realloc(r->h, x->handle_len);
        if (h == NULL) {
            if (r->measured)
                b->res->st.follow_errors++;
            if (o->audit && o->op == RLB_OP_ACQUIRE)
                rlb_lease_end(&b->res->lease, r->key, r->lease, 0);
            return 0;
        }
        r->h = h;
        r->hcap = x->handle_len;
    }
    memcpy(r->h, x->handle, x->handle_len);
    r->hlen = x->handle_len;
    if (o->op == RLB_OP_RESERVE) {
        uint32_t cost = o->cost ? o->cost : 1;
        r->actual = o->settle_fixed ? o->settle_actual
                                    : (uint64_t)(draw(b) * (2.0 * cost + 1));
        hold = o->hold_ms;
    } else if (o->hold_ms > 0) {
        hold = (uint64_t)(draw(b) * (o->hold_ms + 1));
    }
    if (hold > 0 && r->conn->timers != NULL) {
        uv_timer_t *t = &r->conn->timers[r - r->conn->reqs];
        t->data = r;
        r->follow = 1;
        uv_timer_start(t, on_hold, hold, 0);
        return 1;
    }
    /* From inside librlc's callback: it takes new requests there. */
    send_follow(b, r);
    return 1;
}

static void on_xresult(rlc_async_t *cl, const rlc_xresult_t *x, void *arg)
{
    req_t *r = arg;
    bench_t *b = r->conn->b;
    const rlb_opts_t *o = b->o;
    rlb_stats_t *st = &b->res->st;
    uint64_t now = uv_hrtime();
    int answered = x->r.status == RLC_OK;
    int ok = answered && x->r.code == RLC_CODE_OK;

    (void)cl;
    if (o->audit && o->op == RLB_OP_ACQUIRE && answered &&
        x->r.decided_at_ms != 0)
        rlb_lease_time(&b->res->lease, x->r.decided_at_ms);
    if (r->follow) {
        /* A settle answered OK moved the counter by actual - cost; one
         * refused left the estimate; one unanswered may have done either. */
        if (o->audit && o->op == RLB_OP_RESERVE && ok)
            rlb_ledger_add(&b->res->ledger, r->key,
                           (int64_t)r->actual -
                               (int64_t)(o->cost ? o->cost : 1));
        else if (o->audit && o->op == RLB_OP_RESERVE && !answered)
            rlb_ledger_unknown(&b->res->ledger, r->key);
        if (r->measured) {
            if (ok) {
                st->follow_ok++;
                if (o->op == RLB_OP_RESERVE) {
                    uint64_t cost = o->cost ? o->cost : 1;
                    if (r->actual < cost)
                        st->refunded += cost - r->actual;
                    else
                        st->excess += r->actual - cost;
                }
            } else {
                st->follow_errors++;
            }
        }
        if (o->audit && o->op == RLB_OP_ACQUIRE)
            rlb_lease_end(&b->res->lease, r->key, r->lease,
                          ok ? x->r.decided_at_ms : 0);
        slot_done(b, r, now);
        return;
    }
    r->measured =
        r->due_ns >= b->measure_ns && (b->end_ns == 0 || r->due_ns < b->end_ns);
    /* record() reads a failed-open answer from error[0], as the server
     * says it for checks; an xop says it in its own field. */
    if (x->failed_open && !x->r.error[0]) {
        rlc_result_t rr = x->r;
        snprintf(rr.error, sizeof(rr.error), "failed open");
        record(b, r, &rr, now);
    } else {
        record(b, r, &x->r, now);
    }
    if (o->audit && o->op == RLB_OP_RESERVE) {
        /* Allowed with a handle: the estimate was charged. Failed open,
         * shadow-refused or refused: nothing was. No answer, or an error
         * (a store step that timed out may still have run): unknown. */
        if (ok && x->handle_len > 0 && !x->failed_open && !x->r.shadow_refused)
            rlb_ledger_add(&b->res->ledger, r->key, o->cost ? o->cost : 1);
        else if (!answered || x->r.code == RLC_CODE_ERROR ||
                 (ok && x->handle_len == 0 && !x->failed_open &&
                  !x->r.shadow_refused))
            rlb_ledger_unknown(&b->res->ledger, r->key);
    }
    if (ok && x->handle_len > 0 && !x->failed_open && !x->r.shadow_refused &&
        b->phase != PH_DONE) {
        /* A grant without the store's times (an older server) cannot be
         * placed: counted apart. */
        if (o->audit && o->op == RLB_OP_ACQUIRE && x->r.decided_at_ms == 0)
            b->res->lease.unstamped++;
        else if (o->audit && o->op == RLB_OP_ACQUIRE)
            r->lease = rlb_lease_grant_rtt(
                &b->res->lease, r->key, x->r.decided_at_ms, x->expires_at_ms,
                x->r.limit, (now - r->sent_ns + 999999) / 1000000 + 1);
        if (follow_up(b, r, x))
            return;
    }
    slot_done(b, r, now);
}

/* ---- open loop --------------------------------------------------------- */

/* The schedule moves to the check after seq. */
static void schedule_next(bench_t *b)
{
    b->seq++;
    if (b->o->arrivals == RLB_ARRIVE_POISSON) {
        /* An exponential gap, from a uniform draw in (0, 1]. */
        double u = (double)((rl_xorshift64(&b->rng) >> 11) + 1) * 0x1p-53;
        b->due_off_ns += -log(u) * b->interval_ns;
    } else {
        b->due_off_ns = (double)b->seq * b->interval_ns;
    }
}

/* Wakes the loop at abs_ns on the monotonic clock (uv_hrtime's). */
static void arm_at(bench_t *b, uint64_t abs_ns)
{
    struct itimerspec its;

    memset(&its, 0, sizeof(its));
    its.it_value.tv_sec = (time_t)(abs_ns / 1000000000);
    its.it_value.tv_nsec = (long)(abs_ns % 1000000000);
    timerfd_settime(b->tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

/* Checks due within the measurement that were never sent: the schedule
 * from the next unsent check up to the end, those due after the
 * measurement began. */
static uint64_t unsent(bench_t *b)
{
    double start = (double)(b->measure_ns - b->start_ns);
    double end = (double)(b->end_ns - b->start_ns);
    uint64_t n = 0;

    if (b->o->arrivals != RLB_ARRIVE_POISSON) {
        /* Indices count from start_ns in steps of interval_ns. */
        double first = ceil(start / b->interval_ns);
        double last = ceil(end / b->interval_ns);
        double from = (double)b->seq > first ? (double)b->seq : first;
        return last > from ? (uint64_t)(last - from) : 0;
    }
    while (b->due_off_ns < end) {
        n += b->due_off_ns >= start;
        schedule_next(b);
    }
    return n;
}

static void on_tfd(uv_poll_t *h, int status, int events)
{
    bench_t *b = h->data;
    uint64_t expirations, now, due;
    uint32_t tries;

    (void)status;
    (void)events;
    if (read(b->tfd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
        return;
    now = uv_hrtime();
    while (sending(b)) {
        if (b->o->replay != NULL) {
            if (!replay_peek(b)) {
                /* The log's last request is out: the measurement ends
                 * with it. */
                start_drain(b, now + 1);
                break;
            }
            due = replay_due(b);
        } else {
            due = b->start_ns + (uint64_t)b->due_off_ns;
        }
        if (due > now) {
            if (b->o->arrivals != RLB_ARRIVE_GROUPED)
                arm_at(b, due);
            break;
        }
        if (b->phase == PH_MEASURE && due >= cap_end(b)) {
            /* The schedule, not a timer, ends an open-loop run: every
             * check due inside it has then been sent or counted. */
            start_drain(b, cap_end(b));
            break;
        }
        for (tries = 0; tries < b->nconns; tries++) {
            conn_t *c = &b->conns[b->rr];
            int rc;
            b->rr = (b->rr + 1) % b->nconns;
            rc = send_check(c, due, now);
            /* A replayed line refused for itself was passed over: the
             * next one is due at its own time. */
            if (rc == 0 || (b->o->replay != NULL && rc != RLC_EBUSY))
                break;
        }
        if (tries == b->nconns) {
            /* Every slot busy: stays due, tried again shortly. */
            if (b->o->replay != NULL && !b->rq_waited) {
                b->rq_waited = 1;
                if (due >= b->measure_ns)
                    b->res->st.slot_waits++;
            }
            if (b->o->arrivals != RLB_ARRIVE_GROUPED)
                arm_at(b, now + 100000);
            break;
        }
        if (b->o->replay == NULL)
            schedule_next(b);
    }
    /* A server so slow that no slot is free keeps the schedule above
     * from reaching its end; the clock ends the run then, once all that
     * could be sent was, and what fell due and was never sent is counted
     * as unsent. */
    if (b->phase == PH_MEASURE && now >= cap_end(b))
        start_drain(b, cap_end(b));
}

static int open_loop_start(bench_t *b)
{
    struct itimerspec its;
    double tick_ns = 20 * b->interval_ns;

    /* By default about 20 checks per wakeup, within 100 us..1 ms. Every
     * tick costs a wakeup and a write here and a read, a store round trip
     * and a write in rl-server, so a finer tick buys little delay and
     * costs much CPU, and a worse p99 too (BENCHMARKS.md, "Figures behind
     * the code's choices"). The tick's own delay (up
     * to one tick) is inside the measured latency, which counts from the
     * schedule. --tick-us overrides. */
    if (tick_ns < 100000)
        tick_ns = 100000;
    if (tick_ns > 1000000)
        tick_ns = 1000000;
    if (b->o->tick_us > 0)
        tick_ns = b->o->tick_us * 1000;
    b->rng = b->o->seed * UINT64_C(0x9e3779b97f4a7c15) + 1;
    b->due_off_ns = 0;
    b->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (b->tfd < 0)
        return RL_EIO;
    memset(&its, 0, sizeof(its));
    if (b->o->arrivals == RLB_ARRIVE_GROUPED) {
        its.it_interval.tv_nsec = (long)tick_ns;
        its.it_value.tv_nsec = (long)tick_ns;
    } else {
        its.it_value.tv_nsec = 1; /* at once: the first check is due */
    }
    if (timerfd_settime(b->tfd, 0, &its, NULL) != 0 ||
        uv_poll_init(&b->loop, &b->tpoll, b->tfd) != 0) {
        close(b->tfd);
        b->tfd = -1;
        return RL_EIO;
    }
    b->tpoll.data = b;
    uv_poll_start(&b->tpoll, UV_READABLE, on_tfd);
    return 0;
}

/* ---- timers, state, signals -------------------------------------------- */

static void on_state(rlc_async_t *cl, int connected, int status, void *arg)
{
    conn_t *c = arg;
    bench_t *b = c->b;

    /* A TLS failure will not mend by retrying: say why, once. */
    if (!connected && status == RLC_ETLS && !b->told_tls) {
        b->told_tls = 1;
        fprintf(stderr, "rl-bench: %s\n", rlc_async_last_error(cl));
    }
    if (connected && !c->connected) {
        c->connected = 1;
        b->nconnected++;
        b->ever_connected = 1;
    } else if (!connected && c->connected) {
        c->connected = 0;
        b->res->st.disconnects++;
        if (--b->nconnected == 0)
            b->down_since_ns = uv_hrtime();
    }
}

/* Warmup over, then measurement over. */
static void on_phase(uv_timer_t *t)
{
    bench_t *b = t->data;

    if (b->phase == PH_WARMUP) {
        b->phase = PH_MEASURE;
        if (!rlb_open_loop(b->o))
            b->measure_ns = uv_hrtime();
        if (cap_end(b) != UINT64_MAX)
            uv_timer_start(&b->phase_timer, on_phase,
                           (uint64_t)(b->o->duration_s * 1000 + 0.5), 0);
    } else if (b->phase == PH_MEASURE && !rlb_open_loop(b->o)) {
        start_drain(b, cap_end(b));
    }
}

static void on_tick(uv_timer_t *t)
{
    bench_t *b = t->data;
    uint64_t now = uv_hrtime();

    if (b->phase == PH_DRAIN && now >= b->drain_deadline_ns) {
        finish(b, NULL);
        return;
    }
    if (b->phase <= PH_MEASURE && b->nconnected == 0 &&
        now - b->down_since_ns >= (uint64_t)(b->o->down_s * 1e9))
        finish(b, b->ever_connected ? "the server went away"
                                    : "no server reachable");
}

static void on_finisher(uv_timer_t *t)
{
    finish(t->data, NULL);
}

static void on_progress(uv_timer_t *t)
{
    bench_t *b = t->data;
    const rlb_stats_t *s = &b->res->st;
    uint64_t now = uv_hrtime(), d = s->allowed + s->denied;
    char line[256];

    if (b->phase == PH_WARMUP) {
        fprintf(stderr, "\r%6.1fs  warming up, %u of %u connected\033[K",
                (double)(now - b->start_ns) / 1e9, (unsigned)b->nconnected,
                (unsigned)b->nconns);
    } else {
        rlb_progress_line(line, sizeof(line),
                          (double)(now - b->measure_ns) / 1e9,
                          (double)(d - b->last_decisions), s);
        fprintf(stderr, "\r%s\033[K", line);
    }
    b->last_decisions = d;
    b->progress_shown = 1;
}

static void on_sigint(uv_signal_t *h, int signum)
{
    bench_t *b = h->data;

    (void)signum;
    if (b->sigints++ > 0) {
        finish(b, "interrupted");
        return;
    }
    b->res->ended_early = 1;
    b->res->end_reason = "interrupted";
    start_drain(b, uv_hrtime());
}

/* The timerfd is closed only once libuv has let go of it. */
static void on_tpoll_closed(uv_handle_t *h)
{
    bench_t *b = h->data;

    close(b->tfd);
    b->tfd = -1;
}

/* Closes the hold timers (each slot's), once. */
static void timers_close(bench_t *b)
{
    uint32_t i, j;

    for (i = 0; i < b->nconns; i++) {
        conn_t *c = &b->conns[i];
        if (!c->timers_on)
            continue;
        for (j = 0; j < c->nreqs; j++)
            uv_close((uv_handle_t *)&c->timers[j], NULL);
        c->timers_on = 0;
    }
}

/* Ends the run: no more sending, every client freed (checks still in
 * flight are answered with RLC_ECANCELED at once), every handle closed, so
 * that uv_run returns. */
static void finish(bench_t *b, const char *early)
{
    uint64_t now = uv_hrtime();
    uint32_t i;

    if (b->phase == PH_DONE)
        return;
    if (b->phase == PH_WARMUP)
        b->measure_ns = now;
    if (b->end_ns == 0)
        b->end_ns = now;
    b->phase = PH_DONE;
    if (early != NULL) {
        b->res->ended_early = 1;
        b->res->end_reason = early;
    }
    if (b->o->replay != NULL) {
        /* Open loop: the request read ahead and never sent, if it fell due
         * within the measurement (the server went away, or no slot freed
         * in time); one past --duration was never due. The lines after it
         * were not read: the summary says the log was not replayed to its
         * end. */
        if (b->rq_have && !b->capped && rlb_open_loop(b->o) &&
            replay_due(b) >= b->measure_ns && replay_due(b) < b->end_ns)
            b->res->st.unsent++;
        b->res->replay_complete =
            b->rq_end && !b->rq_have && !b->capped && !b->res->ended_early;
    }
    if (rlb_open_loop(b->o) && b->tfd >= 0) {
        if (!b->capped && b->o->replay == NULL)
            b->res->st.unsent = unsent(b);
        uv_close((uv_handle_t *)&b->tpoll, on_tpoll_closed);
    }
    for (i = 0; i < b->nconns; i++) {
        rlc_async_free(b->conns[i].c);
        b->conns[i].c = NULL;
    }
    timers_close(b);
    uv_close((uv_handle_t *)&b->tick, NULL);
    uv_close((uv_handle_t *)&b->phase_timer, NULL);
    uv_close((uv_handle_t *)&b->progress, NULL);
    uv_close((uv_handle_t *)&b->finisher, NULL);
    uv_close((uv_handle_t *)&b->sigint, NULL);
}

/* ---- setup ------------------------------------------------------------ */

/* --fleet: res->servers from the comma-separated list, blanks around each
 * entry trimmed as librlc does. Returns 0 or RL_ENOMEM. */
static int fleet_init(bench_t *b)
{
    const char *p = b->o->server;
    rlb_result_t *res = b->res;

    res->servers = calloc(b->o->nservers, sizeof(*res->servers));
    if (res->servers == NULL)
        return RL_ENOMEM;
    for (res->nservers = 0; res->nservers < b->o->nservers;) {
        size_t len = strcspn(p, ",");
        const char *next = p + len + (p[len] == ',');
        while (len > 0 && *p == ' ') {
            p++;
            len--;
        }
        while (len > 0 && p[len - 1] == ' ')
            len--;
        res->servers[res->nservers].addr = strndup(p, len);
        if (res->servers[res->nservers].addr == NULL)
            return RL_ENOMEM;
        res->nservers++;
        p = next;
    }
    return 0;
}

static int conns_init(bench_t *b)
{
    const rlb_opts_t *o = b->o;
    rlc_options_t ro;
    uint32_t i, j, slots;
    int rc;

    if (o->rate > 0) {
        /* Room for every check of a full timeout at this rate, and half
         * as much again: slots run out only when the server is far
         * behind, and then the schedule (not the slot count) decides. */
        double per_conn = o->rate / o->connections * o->timeout_ms / 1000 * 1.5;
        slots = per_conn < 1024      ? 1024
                : per_conn > 1048576 ? 1048576
                                     : (uint32_t)per_conn;
    } else {
        slots = o->inflight;
    }
    b->conns = calloc(o->connections, sizeof(*b->conns));
    if (b->conns == NULL)
        return RL_ENOMEM;
    b->nconns = o->connections;
    if (o->fleet && (rc = fleet_init(b)) != 0)
        return rc;
    rlc_options_init(&ro);
    ro.servers = o->server;
    ro.request_timeout_ms = o->timeout_ms;
    ro.connect_timeout_ms = o->timeout_ms < 1000 ? o->timeout_ms : 1000;
    /* A load balancer in front: come back quickly when it drops us. */
    ro.reconnect_min_ms = 50;
    ro.reconnect_max_ms = 500;
    ro.max_inflight = slots;
    rlb_opts_tls(o, &ro);
    for (i = 0; i < b->nconns; i++) {
        conn_t *c = &b->conns[i];
        c->b = b;
        c->nreqs = slots;
        c->reqs = calloc(slots, sizeof(*c->reqs));
        if (c->reqs == NULL)
            return RL_ENOMEM;
        for (j = 0; j < slots; j++) {
            c->reqs[j].conn = c;
            c->reqs[j].next = j + 1 < slots ? j + 1 : NIL;
        }
        c->free_head = 0;
        if (o->op != RLB_OP_CHECK && o->hold_ms > 0) {
            c->timers = calloc(slots, sizeof(*c->timers));
            if (c->timers == NULL)
                return RL_ENOMEM;
            for (j = 0; j < slots; j++)
                uv_timer_init(&b->loop, &c->timers[j]);
            c->timers_on = 1;
        }
        c->prefix_len = strlen(o->key_prefix);
        memcpy(c->key, o->key_prefix, c->prefix_len);
        if (o->fleet) {
            /* Pinned to one server: a failover would move its share to
             * another and make the per-server counts lie. */
            c->server = i % b->res->nservers;
            ro.servers = b->res->servers[c->server].addr;
            b->res->servers[c->server].connections++;
        }
        rc = rlc_async_new(&c->c, (struct uv_loop_s *)&b->loop, &ro);
        if (rc != RLC_OK) {
            fprintf(stderr, "rl-bench: --server '%s': %s\n", ro.servers,
                    rlc_strerror(rc));
            return rc == RLC_ENOMEM ? RL_ENOMEM
                   : rc == RLC_ETLS ? RL_ETLS
                                    : RL_EADDR;
        }
        rlc_async_on_state(c->c, on_state, c);
    }
    return 0;
}

/* Frees the clients and closes the timers; the memory goes in
 * conns_release, once the loop has run the close callbacks. */
static void conns_free(bench_t *b)
{
    uint32_t i;

    for (i = 0; i < b->nconns; i++) {
        rlc_async_free(b->conns[i].c);
        b->conns[i].c = NULL;
    }
    timers_close(b);
}

static void conns_release(bench_t *b)
{
    uint32_t i, j;

    for (i = 0; i < b->nconns; i++) {
        conn_t *c = &b->conns[i];
        for (j = 0; c->reqs != NULL && j < c->nreqs; j++)
            free(c->reqs[j].h);
        free(c->reqs);
        free(c->timers);
    }
    free(b->conns);
}

void rlb_result_free(rlb_result_t *r)
{
    uint32_t i;

    if (r == NULL)
        return;
    for (i = 0; i < r->nservers; i++)
        free(r->servers[i].addr);
    free(r->servers);
    r->servers = NULL;
    r->nservers = 0;
    rlb_audit_report_free(&r->audit);
    rlb_audit_report_free(&r->org_audit);
    rl_hist_free(&r->st.lat_ns);
    rl_hist_free(&r->st.late_ns);
    rlb_lease_free(&r->lease);
    rlb_ledger_free(&r->ledger);
}

/* The audit's windows a run is expected to see: every key in every window
 * its phases span, and one more for the grid's offset. */
static uint64_t audit_expect(const rlb_opts_t *o)
{
    double span = o->warmup_s + o->duration_s;

    if (o->window_s == 0 || span <= 0)
        return o->keys;
    return (uint64_t)o->keys * (uint64_t)(ceil(span / o->window_s) + 1);
}

/* The audit of the limit the options name. Returns 0 or rlb_audit_init's
 * error. */
static int audit_init(rlb_audit_t *a, const rlb_opts_t *o)
{
    rlb_audit_conf_t c;

    rlb_audit_conf_init(&c);
    c.algo = o->algo;
    c.limit = o->rule != NULL ? o->limit : 0;
    c.window_s = o->window_s;
    c.burst = o->burst;
    c.per_caller = o->per_caller;
    c.key_prefix = o->key_prefix;
    c.cost = o->cost;
    c.margin_ms = o->margin_ms;
    /* A gcra's or sliding window's state is per key. */
    c.expect = o->algo == RL_ALGO_FIXED ? audit_expect(o) : o->keys;
    return rlb_audit_init(a, &c);
}

/* --levels: the organisation level's audit, a key per tenant. */
static int org_audit_init(rlb_audit_t *a, const rlb_opts_t *o)
{
    rlb_audit_conf_t c;

    rlb_audit_conf_init(&c);
    c.limit = o->org_limit;
    c.window_s = o->window_s;
    c.key_prefix = o->key_prefix;
    c.cost = o->cost;
    c.expect = audit_expect(o) / (o->keys / o->tenants);
    return rlb_audit_init(a, &c);
}

int rlb_run(const rlb_opts_t *o, rlb_result_t *res)
{
    bench_t b;
    uint32_t i, j;
    int rc;

    memset(res, 0, sizeof(*res));
    memset(&b, 0, sizeof(b));
    b.o = o;
    b.res = res;
    b.tfd = -1;
    if (uv_loop_init(&b.loop) != 0)
        return RL_EIO;
    b.tl_slot = UINT64_MAX;
    rlb_rng_seed(&b.xrng, o->seed ^ UINT64_C(0x5851f42d4c957f2d));
    if (o->timeline != NULL)
        fprintf(o->timeline, "t_s,answers,p50_us,p99_us,max_us\n");
    if ((rc = rl_hist_init(&res->st.lat_ns, HIST_SUB_BITS, HIST_HIGHEST_NS)) !=
            0 ||
        (rc = rl_hist_init(&res->st.late_ns, HIST_SUB_BITS, HIST_HIGHEST_NS)) !=
            0 ||
        (rc = rl_hist_init(&b.tl, HIST_SUB_BITS, HIST_HIGHEST_NS)) != 0 ||
        (rc = rlb_keys_init(&b.keys, o)) != 0 ||
        (o->audit && o->op == RLB_OP_CHECK &&
         (rc = audit_init(&b.audit, o)) != 0) ||
        (o->audit && o->tenants > 0 &&
         (rc = org_audit_init(&b.org_audit, o)) != 0) ||
        (o->audit && o->op == RLB_OP_ACQUIRE &&
         (rc = rlb_lease_init(&res->lease, o->keys, o->lease_limit,
                              RLB_LEASE_SKEW_MS,
                              (uint64_t)o->timeout_ms + 1000)) != 0) ||
        (rc = conns_init(&b)) != 0) {
        if (rc == RL_ENOMEM)
            fprintf(stderr, "rl-bench: out of memory\n");
        goto out;
    }
    if (o->audit && o->op == RLB_OP_RESERVE &&
        (rc = rlb_ledger_open(&res->ledger, o)) != 0) {
        if (rc == RL_ENOMEM)
            fprintf(stderr, "rl-bench: out of memory\n");
        else
            fprintf(stderr,
                    "rl-bench: --audit: the first check of every "
                    "key failed: %s\n",
                    res->ledger.why);
        goto out;
    }

    uv_timer_init(&b.loop, &b.tick);
    uv_timer_init(&b.loop, &b.phase_timer);
    uv_timer_init(&b.loop, &b.progress);
    uv_timer_init(&b.loop, &b.finisher);
    uv_signal_init(&b.loop, &b.sigint);
    b.tick.data = b.phase_timer.data = b.progress.data = &b;
    b.finisher.data = b.sigint.data = &b;
    uv_signal_start(&b.sigint, on_sigint, SIGINT);

    b.start_ns = b.down_since_ns = uv_hrtime();
    b.phase = o->warmup_s > 0 ? PH_WARMUP : PH_MEASURE;
    /* An open loop's warmup ends on its schedule, so that a late timer
     * moves no check across the boundary; a closed loop's when its timer
     * fires. */
    if (b.phase == PH_MEASURE)
        b.measure_ns = b.start_ns;
    else if (rlb_open_loop(o))
        b.measure_ns = b.start_ns + (uint64_t)(o->warmup_s * 1e9);
    else
        b.measure_ns = UINT64_MAX;
    uv_timer_start(&b.tick, on_tick, TICK_MS, TICK_MS);
    if (b.phase == PH_WARMUP || cap_end(&b) != UINT64_MAX)
        uv_timer_start(
            &b.phase_timer, on_phase,
            (uint64_t)((b.phase == PH_WARMUP ? o->warmup_s : o->duration_s) *
                           1000 +
                       0.5),
            0);
    if (o->progress)
        uv_timer_start(&b.progress, on_progress, 1000, 1000);

    if (rlb_open_loop(o)) {
        /* A replay's times come from its log; the interval only sizes a
         * grouped tick, which a replay does not use. */
        b.interval_ns = o->rate > 0 ? 1e9 / o->rate : 1e6;
        if ((rc = open_loop_start(&b)) != 0) {
            fprintf(stderr, "rl-bench: timerfd: %s\n", strerror(errno));
            finish(&b, "setup failed");
            uv_run(&b.loop, UV_RUN_DEFAULT);
            goto out;
        }
    } else {
        /* Checks queue in librlc until the connection is up. */
        for (i = 0; i < b.nconns && sending(&b); i++)
            for (j = 0; j < o->inflight && sending(&b); j++)
                send_check(&b.conns[i], b.start_ns, b.start_ns);
    }

    if (o->keep_awake && rlb_awake_start() != 0) {
        finish(&b, "setup failed");
        uv_run(&b.loop, UV_RUN_DEFAULT);
        rc = RL_EIO;
        goto out;
    }
    uv_run(&b.loop, UV_RUN_DEFAULT);
    if (o->keep_awake)
        rlb_awake_stop();
    if (b.progress_shown)
        fputc('\n', stderr);

    if (o->timeline != NULL && b.tl_slot != UINT64_MAX)
        timeline_advance(&b, b.measure_ns + (b.tl_slot + 1) * TIMELINE_SLOT_NS);
    res->sent_total = b.sent_total;
    if (o->replay != NULL) {
        res->replay = *rlb_replay_stats(o->replay);
        if (res->replay.read_error)
            res->replay_complete = 0;
    }
    res->seconds = (double)(b.end_ns - b.measure_ns) / 1e9;
    if (res->seconds < 0)
        res->seconds = 0;
    if (o->audit && o->op == RLB_OP_RESERVE) {
        res->ledger_audited = 1;
        if (rlb_ledger_close(&res->ledger, o) != 0)
            fprintf(stderr,
                    "rl-bench: --audit: the last check of every "
                    "key failed: %s\n",
                    res->ledger.why);
    } else if (o->audit && o->op == RLB_OP_ACQUIRE) {
        rlb_lease_flush(&res->lease);
        res->lease_audited = 1;
    } else if (o->audit && o->op == RLB_OP_CHECK) {
        res->audited = 1;
        rc = rlb_audit_report(&b.audit, (double)b.start_ns / 1e6,
                              (double)b.first_send_ns / 1e6, &res->audit);
        if (rc == 0 && o->tenants > 0)
            rc = rlb_audit_report(&b.org_audit, (double)b.start_ns / 1e6,
                                  (double)b.first_send_ns / 1e6,
                                  &res->org_audit);
        if (rc != 0)
            fprintf(stderr, "rl-bench: out of memory for the audit\n");
    }
    rc = 0;
out:
    conns_free(&b);
    uv_run(&b.loop, UV_RUN_DEFAULT); /* close callbacks */
    conns_release(&b);
    if (uv_loop_close(&b.loop) != 0)
        fprintf(stderr, "rl-bench: loop not closed cleanly\n");
    rlb_keys_free(&b.keys);
    rlb_audit_free(&b.audit);
    rlb_audit_free(&b.org_audit);
    rl_hist_free(&b.tl);
    return rc;
}
