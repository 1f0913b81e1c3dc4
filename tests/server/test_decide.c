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
#include "store/store.h"
#include "decider_fx.h"

/* An hour boundary: every window of these tests starts here. */
#define B UINT64_C(1700002800000)

/* ---- the harness ---- */

#define NASK 64

typedef struct {
    dfx_t dx;          /* the decider on the memory store (decider_fx.h) */
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

/* Opens f with the decider set up from o (the store, the runtime and the
 * prefix are the fixture's). */
static void fx_open_with(fx_t *f, const rls_decider_opts_t *o)
{
    memset(f, 0, sizeof(*f));
    f->next = 1;
    dfx_open(&f->dx, rules_yaml, B + 1000, o);
    assert_true(f->dx.d.hkey.set);
}

static void fx_open(fx_t *f)
{
    rls_decider_opts_t o;

    rls_decider_opts_init(&o);
    o.reserve_ttl_ms = 60000;
    fx_open_with(f, &o);
}

static void fx_close(fx_t *f)
{
    dfx_close(&f->dx);
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
    int rc = rls_decide(&f->dx.d, a, respond, f, &w);

    rls_decider_flush_now(&f->dx.d);
    uv_run(&f->dx.loop, UV_RUN_NOWAIT);
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
    return rls_runtime_stats(&f->dx.rt, rule, strlen(rule));
}

/* rl-ctl's global kill switch, on (RLS_MODE_OFF) or off (-1). */
static void global_mode(fx_t *f, int mode)
{
    rls_switches_t sw;

    memset(&sw, 0, sizeof(sw));
    sw.version = f->dx.rt.sw.version + 1;
    sw.global_mode = mode;
    assert_int_equal(rls_runtime_set_switches(&f->dx.rt, &sw), RL_OK);
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
    f.dx.store->now = B + 60000;
    r = decided(&f, ask(&f, RL_OP_CHECK, "u1", "api", 0, 0, 1));
    assert_int_equal(r->code, RL_CODE_OK);
    assert_int_equal(r->remaining, 2);
    assert_int_equal(stats(&f, "api")->allowed, 5);
    assert_int_equal(stats(&f, "api")->refused, 1);
    assert_int_equal(rls_decider_stats(&f.dx.d)->requests, 6);
    fx_close(&f);
}

/* A native request of two levels (k1 under r1, k2 under r2). */
static rls_ask_t ask_levels(fx_t *f, const char *k1, const char *r1,
                            const char *k2, const char *r2)
{
    rls_ask_t a = ask(f, RL_OP_CHECK, NULL, NULL, 0, 0, 1);

    a.q.nlevels = 2;
    a.q.levels[0] = (rl_level_t){k1, strlen(k1), r1, strlen(r1)};
    a.q.levels[1] = (rl_level_t){k2, strlen(k2), r2, strlen(r2)};
    return a;
}

/* Levels through the decider: a level in mode off is left out; one in
 * shadow makes the group's refusal a shadow one, which charges nothing
 * anywhere; on a Redis Cluster (one_slot) levels must share a hash slot,
 * which one {tenant} at the start of every key gives. */
static void test_levels(void **state)
{
    fx_t f;
    const rl_result_t *r;
    rls_decider_opts_t o;
    rls_ask_t a;
    const char *why;
    int i;

    (void)state;
    fx_open(&f);
    /* killed (off) is left out: api decides, three times, then refuses. */
    for (i = 0; i < 3; i++) {
        r = decided(&f, ask_levels(&f, "t", "killed", "u", "api"));
        assert_int_equal(r->code, RL_CODE_OK);
        assert_int_equal(r->level, 2);
    }
    r = decided(&f, ask_levels(&f, "t", "killed", "u", "api"));
    assert_int_equal(r->code, RL_CODE_OVER_LIMIT);
    assert_int_equal(r->level, 2);
    /* quiet (shadow, 1 a minute) refuses its second: allowed, marked, and
     * api's count of v stays at what the allowed first one spent. */
    r = decided(&f, ask_levels(&f, "q", "quiet", "v", "api"));
    assert_int_equal(r->code, RL_CODE_OK);
    r = decided(&f, ask_levels(&f, "q", "quiet", "v", "api"));
    assert_int_equal(r->code, RL_CODE_OK);
    assert_int_equal(r->shadow_refused, 1);
    assert_int_equal(r->level, 1);
    r = decided(&f, ask(&f, RL_OP_CHECK, "v", "api", 0, 0, 1));
    assert_int_equal(r->remaining, 1); /* 3 - the first - this one */
    assert_int_equal(stats(&f, "quiet")->shadow_refused, 1);
    /* A concurrency rule cannot be a level; nothing is queued. */
    a = ask_levels(&f, "t", "one", "u", "api");
    assert_int_equal(run(&f, &a, &why), RL_EINVAL);
    assert_non_null(strstr(why, "concurrency"));
    fx_close(&f);

    rls_decider_opts_init(&o);
    o.one_slot = 1;
    fx_open_with(&f, &o);
    a = ask_levels(&f, "org:acme", "api", "user:1", "tok");
    assert_int_equal(run(&f, &a, &why), RL_EINVAL);
    assert_non_null(strstr(why, "hash slots"));
    r = decided(&f, ask_levels(&f, "{acme}org", "api", "{acme}user:1", "tok"));
    assert_int_equal(r->code, RL_CODE_OK);
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
    assert_int_equal(rls_decider_stats(&f.dx.d)->requests, 0);
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
    assert_int_equal(f.dx.rt.inline_stats.allowed, 1);
    assert_int_equal(f.dx.rt.inline_stats.refused, 1);
    /* A limit of 0 in the native protocol is invalid, not "refuse all". */
    a = ask(&f, RL_OP_CHECK, "i1", NULL, 0, 60, 1);
    assert_int_equal(run(&f, &a, &why), RL_ELIMIT);
    /* The operator's caps. */
    f.dx.rt.max_inline_limit = 100;
    f.dx.rt.max_inline_window = 3600;
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
    f.dx.rt.inline_mode = RLS_INLINE_DENY;
    a = ask(&f, RL_OP_CHECK, "i2", NULL, 10, 60, 1);
    assert_int_equal(run(&f, &a, &why), RL_EINLINE);
    assert_int_equal(f.dx.rt.inline_stats.allowed, 3);
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
    assert_int_equal(f.dx.rt.inline_stats.refused, 1);
    assert_int_equal(f.dx.rt.inline_stats.shadow_refused, 1);
    assert_int_equal(rls_decider_stats(&f.dx.d)->batches, 0);
    assert_int_equal(rls_decider_stats(&f.dx.d)->requests, 0);
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
    assert_int_equal(rls_decider_stats(&f.dx.d)->requests, 0);
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
    f.dx.store->now = B + 1000 + 60000;
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
    f.dx.store->now = B + 3000;
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

/* The program's side of decide.h, all server.c calls besides rls_decide:
 * the hold it reads and drops, the tick that sends the filling batch, the
 * refusal cache a policy change forgets, the counters and the share of
 * decisions its pages read, and no --fail-local unless given. */
static void test_loop_side(void **state)
{
    fx_t f;
    rls_decider_opts_t o;
    rls_ask_t a;
    uint64_t decided_n, failed;
    const char *why = NULL;
    int i;

    (void)state;
    rls_decider_opts_init(&o);
    o.hold_ns = 300000;
    o.refusal_cache = 16;
    fx_open_with(&f, &o);
    assert_int_equal(rls_decider_hold_ns(&f.dx.d), 300000);
    rls_decider_set_hold_ns(&f.dx.d, 0);
    assert_int_equal(rls_decider_hold_ns(&f.dx.d), 0);
    assert_null(rls_decider_local(&f.dx.d));
    /* Without a hold a tick sends the filling batch at once. */
    a = ask(&f, RL_OP_CHECK, "c", "api", 0, 0, 1);
    assert_int_equal(rls_decide(&f.dx.d, &a, respond, &f, &why), RL_OK);
    assert_int_equal(f.answers[a.q.id], 0);
    assert_int_equal(rls_decider_tick(&f.dx.d, 0), 0);
    uv_run(&f.dx.loop, UV_RUN_NOWAIT);
    assert_int_equal(f.answers[a.q.id], 1);
    assert_int_equal(f.res[a.q.id].code, RL_CODE_OK);
    assert_false(rls_decider_busy(&f.dx.d));
    for (i = 0; i < 2; i++)
        assert_int_equal(
            decided(&f, ask(&f, RL_OP_CHECK, "c", "api", 0, 0, 1))->code,
            RL_CODE_OK);
    /* The third of 3/1m filled the window, and the cache learnt it from
     * the store's answer... */
    assert_int_equal(rls_decider_stats(&f.dx.d)->batches, 3);
    assert_int_equal(rls_decider_refusal_stats(&f.dx.d)->hits, 0);
    assert_true(rls_decider_refusal_stats(&f.dx.d)->inserts >= 1);
    /* ...so the fourth is refused without the store... */
    assert_int_equal(
        decided(&f, ask(&f, RL_OP_CHECK, "c", "api", 0, 0, 1))->code,
        RL_CODE_OVER_LIMIT);
    assert_int_equal(rls_decider_refusal_stats(&f.dx.d)->hits, 1);
    assert_int_equal(rls_decider_stats(&f.dx.d)->batches, 3);
    /* ...until a policy change: the fifth goes to the store again. */
    rls_decider_before_change(&f.dx.d);
    assert_int_equal(
        decided(&f, ask(&f, RL_OP_CHECK, "c", "api", 0, 0, 1))->code,
        RL_CODE_OVER_LIMIT);
    assert_int_equal(rls_decider_refusal_stats(&f.dx.d)->hits, 1);
    assert_int_equal(rls_decider_stats(&f.dx.d)->batches, 4);
    assert_int_equal(rls_decider_stats(&f.dx.d)->requests, 5);
    /* /healthz's share: the four the store decided, none failed. */
    rls_decider_share(&f.dx.d, uv_hrtime() / 1000000000, &decided_n, &failed);
    assert_int_equal(decided_n, 4);
    assert_int_equal(failed, 0);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_rule),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_levels),
        cmocka_unit_test(test_inline_and_caps),
        cmocka_unit_test(test_limit_zero),
        cmocka_unit_test(test_shadow),
        cmocka_unit_test(test_mode_off),
        cmocka_unit_test(test_counting_and_charge),
        cmocka_unit_test(test_reserve_settle),
        cmocka_unit_test(test_leases),
        cmocka_unit_test(test_loop_side),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
