#include "inproc.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

static void on_stop(uv_async_t *a)
{
    inproc_t *f = a->data;

    rls_server_stop(&f->srv);
    uv_close((uv_handle_t *)a, NULL);
}

static void *loop_main(void *arg)
{
    inproc_t *f = arg;

    uv_run(&f->loop, UV_RUN_DEFAULT);
    return NULL;
}

void inproc_run(inproc_t *f)
{
    assert_int_equal(uv_async_init(&f->loop, &f->stop, on_stop), 0);
    f->stop.data = f;
    assert_int_equal(pthread_create(&f->thread, NULL, loop_main, f), 0);
    f->running = 1;
}

void inproc_stop(inproc_t *f)
{
    if (!f->running)
        return;
    f->running = 0;
    uv_async_send(&f->stop);
    pthread_join(f->thread, NULL);
    rls_server_free(&f->srv);
    assert_int_equal(uv_loop_close(&f->loop), 0);
}

int inproc_setup(void **state)
{
    inproc_t *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return -1;
    *state = f;
    return 0;
}

int inproc_teardown(void **state)
{
    inproc_t *f = *state;

    inproc_stop(f);
    if (f->redis.pid > 0)
        rlt_redis_stop(&f->redis);
    free(f);
    return 0;
}
