/* The decider (core/decide.h) on the memory store, on a scripted clock:
 * every op (CHECK, RESERVE, SETTLE, ACQUIRE, RELEASE, RENEW), mode off,
 * a limit of 0, the caps on inline limits, shadow mode, envoy-ratelimit's
 * counting and charges. Each ask gets exactly one answer or an error and
 * none, and the rule's counters say what was decided. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <uv.h>

#include "core/decide.h"
#include "policy/rules.h"
#include "policy/runtime.h"
#include "rl_error.h"
#include "store/memory.h"
#include "store/store.h"

/* An hour boundary: every window of these tests starts here. */
#define B UINT64_C(1700002800000)

/* ---- the memory store on a scripted clock ---- */

typedef struct {
    rls_store_t base;
    rls_store_t *inner;
    uint64_t now;
} cstore_t;

static void c_submit(rls_store_t *s, rls_op_t *ops, size_t n, rls_store_cb cb,
                     void *data)
{
    cstore_t *w = (cstore_t *)s;
    w->inner->v->submit(w->inner, ops, n, cb, data);
}

static uint64_t c_now(rls_store_t *s)
{
    return ((cstore_t *)s)->now;
}

static int c_up(rls_store_t *s)
{
    cstore_t *w = (cstore_t *)s;
    return w->inner->v->up(w->inner);
}

static void c_inner_closed(void *arg)
{
    free(arg);
}

static void c_close(rls_store_t *s, void (*done)(void *), void *arg)
{
    cstore_t *w = (cstore_t *)s;
    (void)done;
    (void)arg;
    w->inner->v->close(w->inner, c_inner_closed, w);
}

/* Reservations and leases at the scripted time (x->now_ms is the
 * decider's clock reading). */
static void c_xop(rls_store_t *s, rls_xop_t *x, rls_xop_cb cb, void *data)
{
    cstore_t *w = (cstore_t *)s;
    w->inner->v->xop(w->inner, x, cb, data);
}

static const rls_store_vtbl_t cvtbl = {.submit = c_submit,
                                       .now_ms = c_now,
                                       .up = c_up,
                                       .close = c_close,
                                       .xop = c_xop};

/* ---- the harness ---- */

#define NASK 64

typedef struct {
    uv_loop_t loop;
    cstore_t *store;
    rls_runtime_t rt;
    rls_decider_t d;
    int answers[NASK]; /* answers per ask id */
    rl_result_t res[NASK];
    char err[NASK][200];
    uint8_t handle[NASK][RL_HANDLE_MAX];
    uint64_t next; /* the next ask's id */
} fx_t;

static void respond(void *owner, const rl_result_t *r)
{
    fx_t *f = owner;

    assert_true(r->id > 0 && r->id < NASK);
    f->answers[r->id]++;
    f->res[r->id] = *r;
    f->res[r->id].error = NULL;
    f->res[r->id].handle = NULL;
    snprintf(f->err[r->id], sizeof(f->err[0]), "%.*s", (int)r->error_len,
             r->error ? r->error : "");
    assert_true(r->handle_len <= RL_HANDLE_MAX);
    if (r->handle_len > 0)
        memcpy(f->handle[r->id], r->handle, r->handle_len);
}

static const char rules_yaml[] = "rules:\n"
                                 "  api:\n"
                                 "    limits: [3/1m]\n"
                                 "  quiet:\n"
                                 "    limits: [1/1m]\n"
                                 "    mode: shadow\n"
                                 "  killed:\n"
                                 "    limits: [1/1m]\n"
                                 "    mode: off\n"
                                 "  tok:\n"
                                 "    limits: [10/1h]\n"
                                 "  one:\n"
                                 "    concurrency: 1\n"
                                 "    lease: 10s\n"
                                 "  shy:\n"
                                 "    concurrency: 1\n"
                                 "    lease: 10s\n"
                                 "    mode: shadow\n";

static void fx_open(fx_t *f)
{
    rls_decider_opts_t o;
    rls_policy_t *p = NULL;
    rls_diag_t dg;
    char err[200];

    memset(f, 0, sizeof(*f));
    f->next = 1;
    assert_int_equal(uv_loop_init(&f->loop), 0);
    f->store = calloc(1, sizeof(*f->store));
    assert_non_null(f->store);
    f->store->base.v = &cvtbl;
    f->store->inner = rls_store_memory_new(&f->loop);
    assert_non_null(f->store->inner);
    f->store->now = B + 1000;
    assert_int_equal(rls_policy_build_buf(NULL, 0, "t.yaml", rules_yaml,
                                          strlen(rules_yaml), 100, &p, &dg),
                     RL_OK);
    assert_int_equal(rls_runtime_init(&f->rt, p, 100), RL_OK);
    rls_decider_opts_init(&o);
    o.store = &f->store->base;
    o.rt = &f->rt;
    o.prefix = "rl:";
    o.prefix_len = 3;
    o.reserve_ttl_ms = 60000;
    assert_int_equal(rls_decider_init(&f->d, &o, err, sizeof(err)), RL_OK);
    assert_true(f->d.hkey.set);
}

static void fx_close(fx_t *f)
{
    assert_int_equal(f->d.batcher.in_flight, 0);
    assert_int_equal(f->d.batcher.stats.replay_mismatch, 0);
    rls_decider_free(&f->d);
    rls_runtime_free(&f->rt);
    f->store->base.v->close(&f->store->base, NULL, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
}

/* A native request: a rule, or (rule NULL) an inline limit. */
static rls_ask_t ask(fx_t *f, uint32_t op, const char *key, const char *rule,
                     uint64_t limit, uint32_t window_s, uint32_t cost)
{
    rls_ask_t a;

    memset(&a, 0, sizeof(a));
    a.q.id = f->next++;
    assert_true(a.q.id < NASK);
    a.q.op = op;
    a.q.key = key;
    a.q.key_len = key ? strlen(key) : 0;
    a.q.rule = rule;
    a.q.rule_len = rule ? strlen(rule) : 0;
    a.q.limit = limit;
    a.q.window_s = window_s;
    a.q.cost = cost;
    a.from_request = 1;
    a.ns = RLS_NS_INLINE;
    return a;
}

/* Decides a and sends the batch; returns rls_decide's result, the answer
 * (if any) in f->res[id]. Exactly one answer when it returns 0, none
 * otherwise. */
static int run(fx_t *f, rls_ask_t *a, const char **why)
{
    uint64_t id = a->q.id;
    const char *w = NULL;
    int rc = rls_decide(&f->d, a, respond, f, &w);

    rls_batcher_flush_now(&f->d.batcher);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(f->answers[id], rc == RL_OK ? 1 : 0);
    if (rc != RL_OK)
        assert_non_null(w);
    if (why != NULL)
        *why = w;
    return rc;
}

/* Decides a, which must be answered: returns its answer. */
static const rl_result_t *decided(fx_t *f, rls_ask_t a)
{
    uint64_t id = a.q.id;

    assert_int_equal(run(f, &a, NULL), RL_OK);
    return &f->res[id];
}

static const rls_rule_stats_t *stats(fx_t *f, const char *rule)
{
    return rls_runtime_stats(&f->rt, rule, strlen(rule));
}

/* rl-ctl's global kill switch, on (RLS_MODE_OFF) or off (-1). */
static void global_mode(fx_t *f, int mode)
{
    rls_switches_t sw;

    memset(&sw, 0, sizeof(sw));
    sw.version = f->rt.sw.version + 1;
    sw.global_mode = mode;
    assert_int_equal(rls_runtime_set_switches(&f->rt, &sw), RL_OK);
}

/* ---- the tests ---- */

static void test_check_rule(void **state)
{
    fx_t f;
    const rl_result_t *r;
    int i;

    (void)state;
    fx_open(&f);
    for (i = 0; i < 3; i++) {
        r = decided(&f, ask(&f, RL_OP_CHECK, "u1", "api", 0, 0, 1));
        assert_int_equal(r->code, RL_CODE_OK);
        assert_int_equal(r->limit, 3);
        assert_int_equal(r->remaining, 2 - i);
        assert_int_equal(r->reset_after_ms, 59000);
        assert_int_equal(r->decided_at_ms, B + 1000);
    }
    r = decided(&f, ask(&f, RL_OP_CHECK, "u1", "api", 0, 0, 1));
    assert_int_equal(r->code, RL_CODE_OVER_LIMIT);
    assert_int_equal(r->remaining, 0);
    assert_int_equal(r->retry_after_ms, 59000);
    assert_int_equal(r->shadow_refused, 0);
    /* Another caller has its own counter; a cost of 0 is read as 1. */
    r = decided(&f, ask(&f, RL_OP_CHECK, "u2", "api", 0, 0, 0));
    assert_int_equal(r->code, RL_CODE_OK);
    assert_int_equal(r->remaining, 2);
    /* The next window has room again. */
    f.store->now = B + 60000;
    r = decided(&f, ask(&f, RL_OP_CHECK, "u1", "api", 0, 0, 1));
    assert_int_equal(r->code, RL_CODE_OK);
    assert_int_equal(r->remaining, 2);
    assert_int_equal(stats(&f, "api")->allowed, 5);
    assert_int_equal(stats(&f, "api")->refused, 1);
    assert_int_equal(f.d.batcher.stats.requests, 6);
    fx_close(&f);
}

static void test_invalid(void **state)
{
    fx_t f;
    rls_ask_t a;
    const char *why;

    (void)state;
    fx_open(&f);
    a = ask(&f, RL_OP_CHECK, NULL, "api", 0, 0, 1);
    assert_int_equal(run(&f, &a, &why), RL_EKEYEMPTY);
    a = ask(&f, RL_OP_CHECK, "u", "nope", 0, 0, 1);
    assert_int_equal(run(&f, &a, &why), RL_ENORULE);
    assert_string_equal(why, "unknown rule 'nope'");
    a = ask(&f, RL_OP_CHECK, "u", "api", 5, 60, 1);
    assert_int_equal(run(&f, &a, &why), RL_EBOTH);
    a = ask(&f, 9, "u", "api", 0, 0, 1);
    assert_int_equal(run(&f, &a, &why), RL_EINVAL);
    assert_string_equal(why, "unknown op 9 (this server knows 0-5)");
    /* ACQUIRE needs a concurrency rule; a concurrency rule an ACQUIRE. */
    a = ask(&f, RL_OP_ACQUIRE, "u", "api", 0, 0, 1);
    assert_int_equal(run(&f, &a, &why), RL_EINVAL);
    a = ask(&f, RL_OP_CHECK, "u", "one", 0, 0, 1);
    assert_int_equal(run(&f, &a, &why), RL_EINVAL);
    assert_string_equal(why, "rule 'one' limits concurrency: ACQUIRE a lease");
    /* Nothing reached the batcher. */
    assert_int_equal(f.d.batcher.stats.requests, 0);
    fx_close(&f);
}

static void test_inline_and_caps(void **state)
{
    fx_t f;
    rls_ask_t a;
    const rl_result_t *r;
    const char *why;

    (void)state;
    fx_open(&f);
    r = decided(&f, ask(&f, RL_OP_CHECK, "i1", NULL, 2, 60, 1));
    assert_int_equal(r->code, RL_CODE_OK);
    assert_int_equal(r->remaining, 1);
    r = decided(&f, ask(&f, RL_OP_CHECK, "i1", NULL, 2, 60, 2));
    assert_int_equal(r->code, RL_CODE_OVER_LIMIT);
    assert_int_equal(r->remaining, 1);
    assert_int_equal(r->window_s, 60);
    assert_int_equal(f.rt.inline_stats.allowed, 1);
    assert_int_equal(f.rt.inline_stats.refused, 1);
    /* A limit of 0 in the native protocol is invalid, not "refuse all". */
    a = ask(&f, RL_OP_CHECK, "i1", NULL, 0, 60, 1);
    assert_int_equal(run(&f, &a, &why), RL_ELIMIT);
    /* The operator's caps. */
    f.rt.max_inline_limit = 100;
    f.rt.max_inline_window = 3600;
    a = ask(&f, RL_OP_CHECK, "i2", NULL, 101, 60, 1);
    assert_int_equal(run(&f, &a, &why), RL_EINLINE);
    assert_string_equal(why, "limit is over this server's --max-inline-limit");
    a = ask(&f, RL_OP_CHECK, "i2", NULL, 100, 3601, 1);
    assert_int_equal(run(&f, &a, &why), RL_EINLINE);
    r = decided(&f, ask(&f, RL_OP_CHECK, "i2", NULL, 100, 3600, 1));
    assert_int_equal(r->code, RL_CODE_OK);
    assert_int_equal(r->remaining, 99);
    /* Limits from the operator's file are not the request's: no caps. */
    a = ask(&f, RL_OP_CHECK, "i3", NULL, 1000, 60, 1);
    a.from_request = 0;
    assert_int_equal(decided(&f, a)->remaining, 999);
    f.rt.inline_mode = RLS_INLINE_DENY;
    a = ask(&f, RL_OP_CHECK, "i2", NULL, 10, 60, 1);
    assert_int_equal(run(&f, &a, &why), RL_EINLINE);
    assert_int_equal(f.rt.inline_stats.allowed, 3);
    fx_close(&f);
}

/* Envoy's limit of 0 refuses everything, answered without the store. */
static void test_limit_zero(void **state)
{
    fx_t f;
    rls_ask_t a;
    const rl_result_t *r;

    (void)state;
    fx_open(&f);
    a = ask(&f, RL_OP_CHECK, "e1", NULL, 0, 60, 1);
    a.ns = RLS_NS_ENVOY;
    a.from_request = 0;
    r = decided(&f, a);
    assert_int_equal(r->code, RL_CODE_OVER_LIMIT);
    assert_int_equal(r->retry_after_ms, 59000);
    assert_int_equal(r->reset_after_ms, 59000);
    assert_int_equal(r->window_s, 60);
    /* In shadow mode: OK, and said so. */
    a = ask(&f, RL_OP_CHECK, "e1", NULL, 0, 60, 1);
    a.ns = RLS_NS_ENVOY;
    a.shadow = 1;
    r = decided(&f, a);
    assert_int_equal(r->code, RL_CODE_OK);
    assert_int_equal(r->retry_after_ms, 0);
    assert_int_equal(r->shadow_refused, 1);
    assert_int_equal(f.rt.inline_stats.refused, 1);
    assert_int_equal(f.rt.inline_stats.shadow_refused, 1);
    assert_int_equal(f.d.batcher.stats.batches, 0);
    assert_int_equal(f.d.batcher.stats.requests, 0);
    fx_close(&f);
}

static void test_shadow(void **state)
{
    fx_t f;
    rls_ask_t a;
    const rl_result_t *r;

    (void)state;
    fx_open(&f);
    r = decided(&f, ask(&f, RL_OP_CHECK, "s", "quiet", 0, 0, 1));
    assert_int_equal(r->code, RL_CODE_OK);
    assert_int_equal(r->shadow_refused, 0);
    r = decided(&f, ask(&f, RL_OP_CHECK, "s", "quiet", 0, 0, 1));
    assert_int_equal(r->code, RL_CODE_OK);
    assert_int_equal(r->shadow_refused, 1);
    assert_int_equal(r->retry_after_ms, 0);
    assert_int_equal(r->remaining, 0);
    assert_int_equal(stats(&f, "quiet")->allowed, 1);
    assert_int_equal(stats(&f, "quiet")->shadow_refused, 1);
    assert_int_equal(stats(&f, "quiet")->refused, 0);
    /* The ask's own shadow flag over an enforcing rule. */
    a = ask(&f, RL_OP_CHECK, "s2", "api", 0, 0, 3);
    assert_int_equal(decided(&f, a)->code, RL_CODE_OK);
    a = ask(&f, RL_OP_CHECK, "s2", "api", 0, 0, 1);
    a.shadow = 1;
    r = decided(&f, a);
    assert_int_equal(r->code, RL_CODE_OK);
    assert_int_equal(r->shadow_refused, 1);
    /* Without it, the same refusal refuses. */
    r = decided(&f, ask(&f, RL_OP_CHECK, "s2", "api", 0, 0, 1));
    assert_int_equal(r->code, RL_CODE_OVER_LIMIT);
    assert_int_equal(stats(&f, "api")->shadow_refused, 1);
    assert_int_equal(stats(&f, "api")->refused, 1);
    fx_close(&f);
}

static void test_mode_off(void **state)
{
    fx_t f;
    const rl_result_t *r;
    int i;

    (void)state;
    fx_open(&f);
    /* A rule in mode off: allowed, nothing counted, no store. */
    for (i = 0; i < 3; i++) {
        r = decided(&f, ask(&f, RL_OP_CHECK, "k", "killed", 0, 0, 1));
        assert_int_equal(r->code, RL_CODE_OK);
        assert_int_equal(r->shadow_refused, 0);
    }
    assert_int_equal(stats(&f, "killed")->uncounted, 3);
    assert_int_equal(stats(&f, "killed")->allowed, 0);
    /* The global kill switch: the same for every rule and inline limit. */
    global_mode(&f, RLS_MODE_OFF);
    for (i = 0; i < 5; i++) {
        r = decided(&f, ask(&f, RL_OP_CHECK, "k", "api", 0, 0, 1));
        assert_int_equal(r->code, RL_CODE_OK);
        r = decided(&f, ask(&f, RL_OP_CHECK, "k", NULL, 1, 60, 1));
        assert_int_equal(r->code, RL_CODE_OK);
    }
    assert_int_equal(f.d.batcher.stats.requests, 0);
    /* Switched back: nothing was spent meanwhile. */
    global_mode(&f, -1);
    r = decided(&f, ask(&f, RL_OP_CHECK, "k", "api", 0, 0, 1));
    assert_int_equal(r->code, RL_CODE_OK);
    assert_int_equal(r->remaining, 2);
    fx_close(&f);
}

/* envoy-ratelimit's counting (increment, then compare), its reads, and a
 * charge (counted past the limit, answered OK). */
static void test_counting_and_charge(void **state)
{
    fx_t f;
    rls_ask_t a;
    const rl_result_t *r;
    int i;
    static const int codes[] = {RL_CODE_OK, RL_CODE_OK, RL_CODE_OVER_LIMIT};

    (void)state;
    fx_open(&f);
    for (i = 0; i < 3; i++) {
        a = ask(&f, RL_OP_CHECK, "c", NULL, 2, 60, 1);
        a.ns = RLS_NS_ENVOY;
        a.counting = RLS_COUNT_ENVOY;
        r = decided(&f, a);
        assert_int_equal(r->code, codes[i]);
    }
    /* A read (cost 0) sees the three counted. */
    a = ask(&f, RL_OP_CHECK, "c", NULL, 2, 60, 0);
    a.ns = RLS_NS_ENVOY;
    a.counting = RLS_COUNT_PEEK;
    r = decided(&f, a);
    assert_int_equal(r->code, RL_CODE_OVER_LIMIT);
    assert_int_equal(r->used, 3);
    /* A charge of 5 on a rule of 3: OK, and the window is spent. */
    a = ask(&f, RL_OP_CHECK, "ch", "api", 0, 0, 5);
    a.charge = 1;
    assert_int_equal(decided(&f, a)->code, RL_CODE_OK);
    r = decided(&f, ask(&f, RL_OP_CHECK, "ch", "api", 0, 0, 1));
    assert_int_equal(r->code, RL_CODE_OVER_LIMIT);
    fx_close(&f);
}

static rls_ask_t with_handle(fx_t *f, uint32_t op, uint64_t of, uint64_t n)
{
    rls_ask_t a = ask(f, op, NULL, NULL, 0, 0, 0);

    a.q.handle = f->handle[of];
    a.q.handle_len = f->res[of].handle_len;
    a.q.actual = n;
    return a;
}

static void test_reserve_settle(void **state)
{
    fx_t f;
    rls_ask_t a;
    const rl_result_t *r;
    const char *why;
    uint64_t id;

    (void)state;
    fx_open(&f);
    a = ask(&f, RL_OP_RESERVE, "t", "tok", 0, 0, 6);
    id = a.q.id;
    r = decided(&f, a);
    assert_int_equal(r->code, RL_CODE_OK);
    assert_int_equal(r->remaining, 4);
    assert_true(r->handle_len > 0);
    assert_int_equal(r->expires_at_ms, B + 1000 + 60000);
    /* The estimate is spent until settled. */
    r = decided(&f, ask(&f, RL_OP_CHECK, "t", "tok", 0, 0, 5));
    assert_int_equal(r->code, RL_CODE_OVER_LIMIT);
    r = decided(&f, with_handle(&f, RL_OP_SETTLE, id, 2));
    assert_int_equal(r->code, RL_CODE_OK);
    assert_int_equal(r->decided_at_ms, B + 1000);
    /* 2 used: 8 left. */
    r = decided(&f, ask(&f, RL_OP_CHECK, "t", "tok", 0, 0, 5));
    assert_int_equal(r->code, RL_CODE_OK);
    assert_int_equal(r->remaining, 3);
    /* Once only. */
    r = decided(&f, with_handle(&f, RL_OP_SETTLE, id, 2));
    assert_int_equal(r->code, RL_CODE_ERROR);
    assert_non_null(strstr(f.err[f.next - 1], "already settled"));
    assert_int_equal(stats(&f, "tok")->settled, 1);
    assert_int_equal(stats(&f, "tok")->refunded, 4);
    assert_int_equal(stats(&f, "tok")->xop_errors, 1);
    /* A lease's handle does not settle; garbage is no handle. */
    a = with_handle(&f, RL_OP_SETTLE, id, 1);
    a.q.handle_len = 3;
    assert_int_equal(run(&f, &a, &why), RL_EINVAL);
    a = ask(&f, RL_OP_SETTLE, NULL, NULL, 0, 0, 0);
    assert_int_equal(run(&f, &a, &why), RL_EINVAL);
    assert_string_equal(why,
                        "this op needs the handle RESERVE or ACQUIRE returned");
    /* Past its time a reservation cannot be settled. */
    a = ask(&f, RL_OP_RESERVE, "t2", "tok", 0, 0, 1);
    id = a.q.id;
    assert_int_equal(decided(&f, a)->code, RL_CODE_OK);
    f.store->now = B + 1000 + 60000;
    a = with_handle(&f, RL_OP_SETTLE, id, 1);
    assert_int_equal(run(&f, &a, &why), RL_EINVAL);
    assert_string_equal(why, "reservation expired: its estimate stays charged");
    /* A RESERVE under the kill switch: a handle that charges nothing, and
     * whose settlement changes nothing. */
    global_mode(&f, RLS_MODE_OFF);
    a = ask(&f, RL_OP_RESERVE, "t3", "tok", 0, 0, 7);
    id = a.q.id;
    r = decided(&f, a);
    assert_int_equal(r->code, RL_CODE_OK);
    assert_true(r->handle_len > 0);
    global_mode(&f, -1);
    assert_int_equal(decided(&f, with_handle(&f, RL_OP_SETTLE, id, 1))->code,
                     RL_CODE_OK);
    r = decided(&f, ask(&f, RL_OP_CHECK, "t3", "tok", 0, 0, 10));
    assert_int_equal(r->code, RL_CODE_OK);
    assert_int_equal(stats(&f, "tok")->settled, 1);
    fx_close(&f);
}

static void test_leases(void **state)
{
    fx_t f;
    rls_ask_t a;
    const rl_result_t *r;
    const char *why;
    uint64_t id, id2;

    (void)state;
    fx_open(&f);
    a = ask(&f, RL_OP_ACQUIRE, "l", "one", 0, 0, 1);
    id = a.q.id;
    r = decided(&f, a);
    assert_int_equal(r->code, RL_CODE_OK);
    assert_int_equal(r->limit, 1);
    assert_int_equal(r->remaining, 0);
    assert_int_equal(r->expires_at_ms, B + 1000 + 10000);
    assert_true(r->handle_len > 0);
    r = decided(&f, ask(&f, RL_OP_ACQUIRE, "l", "one", 0, 0, 1));
    assert_int_equal(r->code, RL_CODE_OVER_LIMIT);
    assert_int_equal(r->retry_after_ms, 10000);
    /* A reservation's handle does not release. */
    f.store->now = B + 3000;
    r = decided(&f, with_handle(&f, RL_OP_RENEW, id, 0));
    assert_int_equal(r->code, RL_CODE_OK);
    assert_int_equal(r->expires_at_ms, B + 3000 + 10000);
    r = decided(&f, with_handle(&f, RL_OP_RELEASE, id, 0));
    assert_int_equal(r->code, RL_CODE_OK);
    r = decided(&f, with_handle(&f, RL_OP_RELEASE, id, 0));
    assert_int_equal(r->code, RL_CODE_ERROR);
    assert_non_null(strstr(f.err[f.next - 1], "lease not held"));
    r = decided(&f, ask(&f, RL_OP_ACQUIRE, "l", "one", 0, 0, 1));
    assert_int_equal(r->code, RL_CODE_OK);
    assert_int_equal(stats(&f, "one")->allowed, 2);
    assert_int_equal(stats(&f, "one")->refused, 1);
    assert_int_equal(stats(&f, "one")->renewed, 1);
    assert_int_equal(stats(&f, "one")->released, 1);
    /* A RESERVE's handle is not a lease's. */
    a = ask(&f, RL_OP_RESERVE, "l", "tok", 0, 0, 1);
    id2 = a.q.id;
    assert_int_equal(decided(&f, a)->code, RL_CODE_OK);
    a = with_handle(&f, RL_OP_RELEASE, id2, 0);
    assert_int_equal(run(&f, &a, &why), RL_EINVAL);
    /* Shadow mode: the refused lease is OK, and releases nothing. */
    a = ask(&f, RL_OP_ACQUIRE, "l", "shy", 0, 0, 1);
    assert_int_equal(decided(&f, a)->code, RL_CODE_OK);
    a = ask(&f, RL_OP_ACQUIRE, "l", "shy", 0, 0, 1);
    id = a.q.id;
    r = decided(&f, a);
    assert_int_equal(r->code, RL_CODE_OK);
    assert_int_equal(r->shadow_refused, 1);
    assert_int_equal(r->retry_after_ms, 0);
    assert_int_equal(r->reset_after_ms, 0);
    assert_true(r->handle_len > 0);
    assert_int_equal(stats(&f, "shy")->shadow_refused, 1);
    assert_int_equal(decided(&f, with_handle(&f, RL_OP_RELEASE, id, 0))->code,
                     RL_CODE_OK);
    assert_int_equal(stats(&f, "shy")->released, 0);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_rule),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_inline_and_caps),
        cmocka_unit_test(test_limit_zero),
        cmocka_unit_test(test_shadow),
        cmocka_unit_test(test_mode_off),
        cmocka_unit_test(test_counting_and_charge),
        cmocka_unit_test(test_reserve_settle),
        cmocka_unit_test(test_leases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
