/* Reloads in process, on a real libuv loop (server/policy/rules_reload.c,
 * envoy/reload.c, rebuild.c, watch.c): the parse runs off the loop, so the
 * policy in force keeps answering, whole, while a rebuild is held on its
 * thread by the rebuild's test hook; requests for a rebuild while
 * one runs coalesce into one more; a server that stops while a rebuild is
 * under way neither crashes nor leaks (run under ASan in CI). The watch
 * (settling, ConfigMaps, non-regular files) is tested end to end in
 * e2e/e2e_policy_reload.c and e2e/reload_race.py.
 *
 * The hook waits on a semaphore with a deadline, so a rebuild made on the
 * loop thread (which would hold the loop too) fails the test instead of
 * hanging it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <errno.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "envoy/reload.h"
#include "policy/rules_reload.h"
#include "rl_error.h"
#include "rlt_fx.h"

/* How long the hook holds a rebuild, at most. */
#define HOLD_MAX_S 5
/* Loop turns that must pass, each checking the policy in force, while a
 * rebuild is held. */
#define TURNS_HELD 20

typedef struct fx_s {
    uv_loop_t loop;
    rls_runtime_t rt;
    rls_rules_reload_t r;
    uv_timer_t tick;
    char dir[64], path[128];
    sem_t go;
    atomic_int held;      /* the hook is holding a rebuild */
    atomic_int hooks;     /* rebuilds that reached the hook */
    atomic_int timed_out; /* the hook gave up waiting */
    int turns_held;       /* loop turns seen while held */
    int wrong;            /* turns that saw a policy not whole */
    int phase;
    int close_while_held; /* the test: stop while the rebuild is held */
    int asks_while_held;  /* the test: ask this many more times */
} fx_t;

static fx_t *the_fx;

/* On the rebuild's thread: hold until the loop has turned enough. */
static void hook(rls_rebuild_t *rb)
{
    fx_t *f = the_fx;
    struct timespec ts;

    (void)rb;
    atomic_fetch_add(&f->hooks, 1);
    if (atomic_load(&f->hooks) > 1)
        return; /* hold the first only */
    atomic_store(&f->held, 1);
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += HOLD_MAX_S;
    while (sem_timedwait(&f->go, &ts) != 0)
        if (errno != EINTR) {
            atomic_store(&f->timed_out, 1);
            break;
        }
    atomic_store(&f->held, 0);
}

/* The limits rule r resolves to now. */
static void limits_now(fx_t *f, uint64_t *limit, uint32_t *window)
{
    rls_spec_t spec;

    assert_int_equal(rls_runtime_resolve(&f->rt, "r", 1, "k", 1, &spec), RL_OK);
    *limit = spec.limits.w[0].limit;
    *window = spec.limits.w[0].window_s;
}

static void on_tick(uv_timer_t *t)
{
    fx_t *f = t->data;
    uint64_t limit;
    uint32_t window;
    int i;

    if (f->phase == 0) {
        /* Ask for a rebuild, as SIGHUP does. */
        assert_int_equal(rls_rules_reload_now(&f->r), 0);
        f->phase = 1;
        return;
    }
    if (f->phase == 1 && atomic_load(&f->timed_out)) {
        /* The rebuild held the loop itself: fail, not hang. */
        rls_rules_reload_close(&f->r);
        uv_close((uv_handle_t *)&f->tick, NULL);
        return;
    }
    if (f->phase == 1) {
        if (!atomic_load(&f->held))
            return;
        limits_now(f, &limit, &window);
        /* The old policy, whole: never a mix, never nothing. */
        if (!(limit == 7 && window == 3600))
            f->wrong++;
        if (++f->turns_held < TURNS_HELD)
            return;
        for (i = 0; i < f->asks_while_held; i++)
            assert_int_equal(rls_rules_reload_now(&f->r), 0);
        f->phase = 2;
        if (f->close_while_held) {
            rls_rules_reload_close(&f->r);
            uv_close((uv_handle_t *)&f->tick, NULL);
        }
        sem_post(&f->go);
        return;
    }
    /* phase 2: wait for the new policy (and any rebuild after it). */
    if (f->rt.generation < 2 || f->r.rl.rebuild.running)
        return;
    rls_rules_reload_close(&f->r);
    uv_close((uv_handle_t *)&f->tick, NULL);
}

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    rls_policy_t *p = NULL;
    rls_diag_t d;

    assert_non_null(f);
    snprintf(f->dir, sizeof(f->dir), "/tmp/rlt-reload-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof(f->path), "%s/rules.yaml", f->dir);
    rlt_fx_write_file(f->path, "rules:\n  r:\n    limits: [7/1h]\n");
    assert_int_equal(rls_policy_build(NULL, 0, f->path, 10, &p, &d), RL_OK);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    assert_int_equal(rls_runtime_init(&f->rt, p, 10), RL_OK);
    assert_int_equal(sem_init(&f->go, 0, 0), 0);
    rls_log_set_level("error");
    the_fx = f;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;

    rls_runtime_free(&f->rt);
    sem_destroy(&f->go);
    rlt_rmtree(f->dir);
    free(f);
    the_fx = NULL;
    return 0;
}

/* Runs the loop through the phases with the reloader watching f->path. */
static void run(fx_t *f, uint64_t settle_ms)
{
    assert_int_equal(rls_rules_reload_start(&f->r, &f->loop, &f->rt, f->path,
                                            NULL, 0, 10, settle_ms),
                     0);
    f->r.rl.rebuild.hook = hook;
    uv_timer_init(&f->loop, &f->tick);
    f->tick.data = f;
    uv_timer_start(&f->tick, on_tick, 1, 1);
    assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&f->loop), 0);
}

/* While the new file parses on the worker, the loop goes on answering
 * under the old policy; then the new one is swapped in. */
static void test_parse_off_loop(void **state)
{
    fx_t *f = *state;
    uint64_t limit;
    uint32_t window;

    rlt_fx_write_file(f->path, "rules:\n  r:\n    limits: [13/2h]\n");
    run(f, 60000);
    assert_int_equal(atomic_load(&f->timed_out), 0);
    assert_int_equal(f->turns_held, TURNS_HELD);
    assert_int_equal(f->wrong, 0);
    assert_int_equal(f->rt.generation, 2);
    assert_int_equal(f->r.rl.stats.reloads, 1);
    assert_int_equal(f->r.rl.stats.failures, 0);
    limits_now(f, &limit, &window);
    assert_int_equal(limit, 13);
    assert_int_equal(window, 7200);
}

/* Asked five times while one runs: one more rebuild, not five. */
static void test_coalesce(void **state)
{
    fx_t *f = *state;

    rlt_fx_write_file(f->path, "rules:\n  r:\n    limits: [13/2h]\n");
    f->asks_while_held = 5;
    run(f, 60000);
    assert_int_equal(atomic_load(&f->timed_out), 0);
    assert_int_equal(atomic_load(&f->hooks), 2);
    assert_int_equal(f->r.rl.stats.reloads, 2);
    assert_int_equal(f->rt.generation, 3);
}

/* Stopped while the rebuild is held: the loop ends once it is done, what
 * it built is dropped (ASan sees a leak otherwise), nothing is swapped
 * in. */
static void test_close_during_rebuild(void **state)
{
    fx_t *f = *state;

    rlt_fx_write_file(f->path, "rules:\n  r:\n    limits: [13/2h]\n");
    f->close_while_held = 1;
    run(f, 60000);
    assert_int_equal(atomic_load(&f->timed_out), 0);
    assert_int_equal(f->rt.generation, 1);
    assert_int_equal(f->r.rl.stats.reloads, 0);
    assert_int_equal(f->r.rl.stats.failures, 0);
}

/* ---- the Envoy reloader on the same parts ---- */

static int installs;

static void install(void *arg, rls_envoy_conf_t *c)
{
    (void)arg;
    installs++;
    rls_envoy_conf_unref(c);
}

typedef struct {
    rls_envoy_reload_t r;
    uv_timer_t tick;
    int phase;
} envoy_fx_t;

static void on_envoy_tick(uv_timer_t *t)
{
    envoy_fx_t *e = t->data;
    fx_t *f = the_fx;

    if (e->phase == 0) {
        assert_int_equal(rls_envoy_reload_now(&e->r), 0);
        e->phase = 1;
        return;
    }
    if (!atomic_load(&f->held) && !atomic_load(&f->timed_out))
        return;
    /* Stop with the rebuild held, then let it finish. */
    rls_envoy_reload_close(&e->r);
    uv_close((uv_handle_t *)&e->tick, NULL);
    sem_post(&f->go);
}

static void test_envoy_close_during_rebuild(void **state)
{
    fx_t *f = *state;
    static envoy_fx_t e;
    char path[160];
    const char *paths[1] = {path};

    snprintf(path, sizeof(path), "%s/envoy.yaml", f->dir);
    rlt_fx_write_file(path,
                      "domain: d\ndescriptors:\n  - key: k\n"
                      "    rate_limit: {unit: second, requests_per_unit: 1}\n");
    memset(&e, 0, sizeof(e));
    installs = 0;
    assert_int_equal(
        rls_envoy_reload_start(&e.r, &f->loop, paths, 1, 60000, install, NULL),
        0);
    e.r.rl.rebuild.hook = hook;
    uv_timer_init(&f->loop, &e.tick);
    e.tick.data = &e;
    uv_timer_start(&e.tick, on_envoy_tick, 1, 1);
    assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    assert_int_equal(atomic_load(&f->timed_out), 0);
    assert_int_equal(installs, 0);
    assert_null(e.r.rl.sigs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_parse_off_loop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_coalesce, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_during_rebuild, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_envoy_close_during_rebuild, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
