/* Building a new policy off the loop; see rebuild.h. */
#include "policy/rebuild.h"

#include <errno.h>
#include <string.h>
#include <sys/resource.h>

#include "rl_error.h"

/* The rebuild's thread: lower priority than the loop's (on Linux a
 * thread's nice value is its own), so that on a busy machine the parse
 * takes what the loop leaves, not half of it. */
#define REBUILD_NICE 10 /* more than the loop's */

static void thread_main(void *arg)
{
    rls_rebuild_t *rb = arg;

    int nice;

    /* Best effort: a thread may always lower its own priority. */
    errno = 0;
    nice = getpriority(PRIO_PROCESS, 0);
    if (errno == 0)
        (void)setpriority(PRIO_PROCESS, 0,
                          nice + REBUILD_NICE > 19 ? 19
                                                   : nice + REBUILD_NICE);
    if (rb->hook != NULL)
        rb->hook(rb);
    rb->work(rb);
    uv_async_send(&rb->async);
}

static int start_thread(rls_rebuild_t *rb);

/* On the loop: the thread is done (or about to return). */
static void on_async(uv_async_t *a)
{
    rls_rebuild_t *rb = a->data;

    if (!rb->running)
        return;
    uv_thread_join(&rb->thread);
    rb->running = 0;
    uv_unref((uv_handle_t *)&rb->async);
    rb->done(rb, rb->closing);
    if (rb->closing) {
        uv_close((uv_handle_t *)&rb->async, NULL);
        return;
    }
    if (rb->again) {
        rb->again = 0;
        start_thread(rb);
    }
}

static int start_thread(rls_rebuild_t *rb)
{
    int rc;

    rb->start(rb);
    rb->running = 1;
    /* Keeps the loop running until the rebuild is done, a stop too. */
    uv_ref((uv_handle_t *)&rb->async);
    if ((rc = uv_thread_create(&rb->thread, thread_main, rb)) != 0) {
        rb->running = 0;
        uv_unref((uv_handle_t *)&rb->async);
        rb->done(rb, 1);
        return rc == UV_ENOMEM || rc == UV_EAGAIN ? RL_ENOMEM : RL_EIO;
    }
    return RL_OK;
}

int rls_rebuild_init(rls_rebuild_t *rb, uv_loop_t *loop,
                     void (*start)(rls_rebuild_t *rb),
                     void (*work)(rls_rebuild_t *rb),
                     void (*done)(rls_rebuild_t *rb, int closing), void *arg)
{
    int rc;

    memset(rb, 0, sizeof(*rb));
    rb->loop = loop;
    rb->start = start;
    rb->work = work;
    rb->done = done;
    rb->arg = arg;
    if ((rc = uv_async_init(loop, &rb->async, on_async)) != 0)
        return rc == UV_ENOMEM ? RL_ENOMEM : RL_EIO;
    rb->async.data = rb;
    /* Idle, it must not keep the loop alive. */
    uv_unref((uv_handle_t *)&rb->async);
    rb->inited = 1;
    return 0;
}

int rls_rebuild_request(rls_rebuild_t *rb)
{
    if (!rb->inited || rb->closing)
        return 0;
    if (rb->running) {
        rb->again = 1;
        return 0;
    }
    return start_thread(rb);
}

void rls_rebuild_close(rls_rebuild_t *rb)
{
    if (!rb->inited || rb->closing)
        return;
    rb->closing = 1;
    rb->again = 0;
    /* A thread under way still sends: the handle closes once it is done
     * (on_async). */
    if (!rb->running)
        uv_close((uv_handle_t *)&rb->async, NULL);
}
