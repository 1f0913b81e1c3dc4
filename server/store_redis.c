/* Redis store (work in progress): every batch fails with RL_ESTORE until the
 * hiredis implementation lands. It exists now so that rl-server links. */
#include <stdlib.h>
#include <time.h>

#include "rl_error.h"
#include "rls_store.h"

typedef struct {
    rls_store_t base;
    uv_loop_t *loop;
    uv_idle_t close_h;
    void (*done)(void *);
    void *done_arg;
} redis_store_t;

static void st_submit(rls_store_t *s, rls_op_t *ops, size_t n,
                      rls_store_cb cb, void *data)
{
    size_t i;

    s->stats.batches++;
    s->stats.ops += n;
    s->stats.errors++;
    for (i = 0; i < n; i++)
        ops[i].err = RL_ESTORE;
    cb(data, ops, n, RL_ESTORE);
}

static uint64_t st_now_ms(rls_store_t *s)
{
    struct timespec ts;

    (void)s;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int st_up(rls_store_t *s)
{
    (void)s;
    return 0;
}

static void on_closed(uv_handle_t *h)
{
    redis_store_t *r = h->data;
    void (*done)(void *) = r->done;
    void *arg = r->done_arg;

    free(r);
    if (done)
        done(arg);
}

static void st_close(rls_store_t *s, void (*done)(void *arg), void *arg)
{
    redis_store_t *r = (redis_store_t *)s;

    r->done = done;
    r->done_arg = arg;
    uv_close((uv_handle_t *)&r->close_h, on_closed);
}

static const rls_store_vtbl_t vtbl = {st_submit, st_now_ms, st_up, st_close};

rls_store_t *rls_store_redis_new(uv_loop_t *loop, const rls_redis_opts_t *opts)
{
    redis_store_t *r = calloc(1, sizeof(*r));

    (void)opts;
    if (r == NULL)
        return NULL;
    r->base.v = &vtbl;
    r->loop = loop;
    uv_idle_init(loop, &r->close_h);
    r->close_h.data = r;
    return &r->base;
}
