/* Building a new policy off the loop; see rebuild.h. */
#include "policy/rebuild.h"

#include <string.h>

#include "rl_error.h"

static void on_work(uv_work_t *req)
{
    rls_rebuild_t *rb = req->data;

    if (rb->hook != NULL)
        rb->hook(rb);
    rb->work(rb);
}

static int queue(rls_rebuild_t *rb);

static void after_work(uv_work_t *req, int status)
{
    rls_rebuild_t *rb = req->data;

    /* UV_ECANCELED cannot happen (nothing cancels), and work ran whole
     * otherwise: done discards or installs what it made. */
    (void)status;
    rb->running = 0;
    rb->done(rb, rb->closing);
    if (rb->again && !rb->closing) {
        rb->again = 0;
        queue(rb);
    }
}

static int queue(rls_rebuild_t *rb)
{
    int rc;

    rb->start(rb);
    rb->running = 1;
    if ((rc = uv_queue_work(rb->loop, &rb->req, on_work, after_work)) != 0) {
        /* Only for bad arguments; undo what start prepared. */
        rb->running = 0;
        rb->done(rb, 1);
    }
    return rc;
}

void rls_rebuild_init(rls_rebuild_t *rb, uv_loop_t *loop,
                      void (*start)(rls_rebuild_t *rb),
                      void (*work)(rls_rebuild_t *rb),
                      void (*done)(rls_rebuild_t *rb, int closing),
                      void *arg)
{
    memset(rb, 0, sizeof(*rb));
    rb->loop = loop;
    rb->start = start;
    rb->work = work;
    rb->done = done;
    rb->arg = arg;
    rb->req.data = rb;
}

int rls_rebuild_request(rls_rebuild_t *rb)
{
    if (rb->closing)
        return 0;
    if (rb->running) {
        rb->again = 1;
        return 0;
    }
    return queue(rb);
}

void rls_rebuild_close(rls_rebuild_t *rb)
{
    rb->closing = 1;
    rb->again = 0;
}
