/* The decider's harness on a scripted clock (decider_fx.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "policy/rules.h"
#include "rl_error.h"
#include "store/memory.h"
#include "decider_fx.h"

static void c_submit(rls_store_t *s, rls_op_t *ops, size_t n, rls_store_cb cb,
                     void *data)
{
    dfx_store_t *w = (dfx_store_t *)s;
    w->inner->v->submit(w->inner, ops, n, cb, data);
}

static uint64_t c_now(rls_store_t *s)
{
    return ((dfx_store_t *)s)->now;
}

static int c_up(rls_store_t *s)
{
    dfx_store_t *w = (dfx_store_t *)s;
    return w->inner->v->up(w->inner);
}

static void c_inner_closed(void *arg)
{
    free(arg);
}

static void c_close(rls_store_t *s, void (*done)(void *), void *arg)
{
    dfx_store_t *w = (dfx_store_t *)s;
    (void)done;
    (void)arg;
    w->inner->v->close(w->inner, c_inner_closed, w);
}

/* Reservations and leases at the scripted time (x->now_ms is the
 * decider's clock reading). */
static void c_xop(rls_store_t *s, rls_reserve_op_t *x, rls_reserve_op_cb cb,
                  void *data)
{
    dfx_store_t *w = (dfx_store_t *)s;
    w->inner->v->xop(w->inner, x, cb, data);
}

static const rls_store_vtbl_t cvtbl = {.submit = c_submit,
                                       .now_ms = c_now,
                                       .up = c_up,
                                       .close = c_close,
                                       .xop = c_xop};

void dfx_open(dfx_t *x, const char *rules_yaml, uint64_t now_ms,
              const rls_decider_opts_t *o)
{
    rls_decider_opts_t opts;
    rls_policy_t *p = NULL;
    rls_diag_t dg;
    char err[200];

    memset(x, 0, sizeof(*x));
    assert_int_equal(uv_loop_init(&x->loop), 0);
    x->store = calloc(1, sizeof(*x->store));
    assert_non_null(x->store);
    x->store->base.v = &cvtbl;
    x->store->inner = rls_store_memory_new(&x->loop);
    assert_non_null(x->store->inner);
    x->store->now = now_ms;
    assert_int_equal(rls_policy_build_buf(NULL, 0, "t.yaml", rules_yaml,
                                          strlen(rules_yaml), 100, &p, &dg),
                     RL_OK);
    assert_int_equal(rls_runtime_init(&x->rt, p, 100), RL_OK);
    if (o != NULL)
        opts = *o;
    else
        rls_decider_opts_init(&opts);
    opts.store = &x->store->base;
    opts.rt = &x->rt;
    opts.prefix = "rl:";
    opts.prefix_len = 3;
    assert_int_equal(rls_decider_init(&x->d, &opts, err, sizeof(err)), RL_OK);
}

void dfx_close(dfx_t *x)
{
    assert_false(rls_decider_busy(&x->d));
    assert_int_equal(rls_decider_stats(&x->d)->replay_mismatch, 0);
    rls_decider_free(&x->d);
    assert_null(rls_decider_local(&x->d));
    rls_runtime_free(&x->rt);
    x->store->base.v->close(&x->store->base, NULL, NULL);
    uv_run(&x->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&x->loop), 0);
}
