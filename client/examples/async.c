/* The async API on a libuv loop: 1000 checks in flight on one connection,
 * answered in whatever order the server likes, each callback exactly once.
 *
 *   rlc-example-async [HOST:PORT]     (default 127.0.0.1:7390) */
#include <inttypes.h>
#include <stdio.h>

#include <rlc.h>
#include <uv.h>

#define N 1000

typedef struct stats_s {
    int done, allowed, denied, failed;
} stats_t;

static void on_result(rlc_async_t *c, const rlc_result_t *res, void *arg)
{
    stats_t *st = arg;

    if (res->status != RLC_OK)
        st->failed++;
    else if (res->code == RLC_CODE_OK)
        st->allowed++;
    else
        st->denied++;
    /* The last answer ends the program: freeing the client closes its
     * handles, and uv_run returns once they are closed. */
    if (++st->done == N)
        rlc_async_free(c);
}

static void on_state(rlc_async_t *c, int connected, int status, void *arg)
{
    (void)arg;
    fprintf(stderr, "%s %s%s%s\n", rlc_async_server(c),
            connected ? "connected" : "disconnected", status ? ": " : "",
            status ? rlc_strerror(status) : "");
}

int main(int argc, char **argv)
{
    uv_loop_t loop;
    rlc_options_t o;
    rlc_async_t *c;
    stats_t st = {0};
    char key[32];
    int i, rc;

    uv_loop_init(&loop);
    rlc_options_init(&o);
    o.servers = argc > 1 ? argv[1] : "127.0.0.1:7390";
    rc = rlc_async_new(&c, &loop, &o);
    if (rc != RLC_OK) {
        fprintf(stderr, "rlc_async_new: %s\n", rlc_strerror(rc));
        return 2;
    }
    rlc_async_on_state(c, on_state, NULL);

    /* Checks may be submitted before the connection is up; they leave
     * together, in one write, as soon as it is. Ten callers, 50 hits each
     * allowed per minute, 100 hits each: half are refused. */
    for (i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "example:async:%d", i % 10);
        rlc_check_t req = {.key = key, .limit = 50, .window_s = 60};
        rc = rlc_async_check(c, &req, on_result, &st);
        if (rc != RLC_OK) {
            fprintf(stderr, "rlc_async_check: %s\n", rlc_strerror(rc));
            break;
        }
    }
    if (i < N)
        rlc_async_free(c);

    uv_run(&loop, UV_RUN_DEFAULT);
    printf("done=%d allowed=%d denied=%d failed=%d\n", st.done, st.allowed,
           st.denied, st.failed);
    rc = uv_loop_close(&loop);
    return rc == 0 && st.failed == 0 && st.done == N ? 0 : 2;
}
