/* The --grpc tests' fixture (grpc_fx.h). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "grpc_fx.h"

#ifndef RL_SERVER_BIN
#error "RL_SERVER_BIN must name the rl-server binary"
#endif
#ifndef RL_FIXTURES
#error "RL_FIXTURES must name tests/server/e2e/envoy"
#endif

/* The server every test shares, and its well-behaved client. */
static rlt_fx_t group;
int port, mport;
h2r_t good;
static int32_t good_id = 1;

void on_done(void *arg, int32_t id, int grpc, int http, uint32_t rst)
{
    ends_t *e = arg;

    if (id <= 0 || id >= MAXS)
        return;
    if (grpc == -1 && http == 0) {
        /* RST_STREAM; after an answer (a stream the client had not
         * finished) it keeps the answer. */
        e->reset[id] = 1;
        e->rst[id] = rst;
        if (e->done[id])
            return;
    }
    e->grpc[id] = grpc;
    e->http[id] = http;
    if (!e->done[id]) {
        e->done[id] = 1;
        e->ndone++;
    }
}

/* Pumps c until stream id ended, the connection ended, or 5 s. */
int wait_stream(h2r_t *c, ends_t *e, int32_t id)
{
    uint64_t end = rlt_mono_ms() + 5000;

    while (!e->done[id] && rlt_mono_ms() < end)
        if (h2r_pump(c, 50) != 0)
            break;
    return e->done[id];
}

/* Pumps c until the server closed it (end of file) or 5 s. */
int wait_eof(h2r_t *c)
{
    uint64_t end = rlt_mono_ms() + 5000;

    while (!c->eof && rlt_mono_ms() < end)
        h2r_pump(c, 50);
    return c->eof;
}

static ends_t good_ends;

/* Connects the good client afresh. */
static void good_connect(void)
{
    if (good.def != NULL)
        h2r_close(&good);
    memset(&good_ends, 0, sizeof(good_ends));
    assert_int_equal(h2r_connect(&good, port, 0), 0);
    good.on_done = on_done;
    good.arg = &good_ends;
    good_id = 1;
}

/* The well-behaved client: one call on its long-lived connection. */
void good_call(void)
{
    const char *kv[] = {"database", "unlisted"};
    size_t n;
    uint8_t *m = h2r_rls_request("mongo_cps", kv, 1, 0, &n);
    int32_t id;
    int tries;

    assert_non_null(m);
    h2r_pump(&good, 0);
    for (tries = 0; tries < 2; tries++) {
        if (good.goaway > 0 || good.eof) {
            /* Only --idle-timeout may end the good client's connection,
             * and it does so with NO_ERROR: reconnect. */
            assert_int_equal(good.goaway_code, NGHTTP2_NO_ERROR);
            good_connect();
        }
        id = good_id;
        good_id += 2;
        assert_int_equal(h2r_grpc(&good, id, H2R_PATH, m, n, 0), 0);
        if (wait_stream(&good, &good_ends, id))
            break;
        /* The idle timeout's GOAWAY crossed the call (the server ignores
         * what comes after it): once more, on a new connection. */
        assert_true(good.goaway > 0 || good.eof);
    }
    free(m);
    assert_true(good_ends.done[id]);
    assert_int_equal(good_ends.grpc[id], 0);
}

int grpc_setup(void **state)
{
    (void)state;
    rlt_fx_init(&group);
    rlt_fx_start(&group, 0, "--grpc-max-streams", "8", "--idle-timeout", "1",
                 "--max-connections", "6", "--frame-timeout-ms", "500",
                 "--max-partial-bytes", "150000", NULL);
    port = group.srv[0].gport;
    mport = group.srv[0].mport;
    memset(&good_ends, 0, sizeof(good_ends));
    if (h2r_connect(&good, port, 0) != 0)
        return -1;
    good.on_done = on_done;
    good.arg = &good_ends;
    return 0;
}

int grpc_teardown(void **state)
{
    (void)state;
    if (good.def != NULL)
        h2r_close(&good);
    rlt_fx_release(&group);
    return 0;
}

conn_t *dial(int raw)
{
    conn_t *k = calloc(1, sizeof(*k));

    assert_non_null(k);
    assert_int_equal(h2r_connect(&k->c, port, raw), 0);
    k->c.on_done = on_done;
    k->c.arg = &k->e;
    return k;
}

void hang_up(conn_t *k)
{
    h2r_close(&k->c);
    free(k);
}

/* Pumps k until the server's SETTINGS came and our ACK went out: after
 * this nothing the client queues on its own can cut into a header block
 * the test leaves open. */
void ready(conn_t *k)
{
    uint64_t end = rlt_mono_ms() + 5000;

    while ((k->c.settings == 0 || k->c.out_len > 0) && !k->c.eof &&
           rlt_mono_ms() < end)
        h2r_pump(&k->c, 50);
    assert_true(k->c.settings > 0);
    assert_int_equal(k->c.out_len, 0);
}

/* Queues a valid call (answered OK by the store) on stream id. */
void call(conn_t *k, int32_t id)
{
    const char *kv[] = {"database", "unlisted"};
    size_t n;
    uint8_t *m = h2r_rls_request("mongo_cps", kv, 1, 0, &n);

    assert_non_null(m);
    assert_int_equal(h2r_grpc(&k->c, id, H2R_PATH, m, n, 0), 0);
    free(m);
}

/* Opens a connection to the port of another server. */
conn_t *dial_to(int p)
{
    conn_t *k = calloc(1, sizeof(*k));

    assert_non_null(k);
    assert_int_equal(h2r_connect(&k->c, p, 0), 0);
    k->c.on_done = on_done;
    k->c.arg = &k->e;
    return k;
}

/* The shared server, after all a program's cases, exits 0 on SIGTERM
 * (under ASan: with nothing leaked or touched after its free). */
void test_stop_clean(void **state)
{
    int st;

    (void)state;
    good_call();
    st = rlt_stop(group.srv[0].pid, SIGTERM, 10000);
    group.srv[0].pid = -1;
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

int statsd_fd = -1;

void grpc_init(void)
{
    /* Every server: --grpc with the mongo_cps descriptors, --metrics,
     * --statsd to this program's UDP socket. */
    static char fix[512], sd[64];
    static char *args[] = {"--grpc",
                           "127.0.0.1:0",
                           "--envoy-config",
                           fix,
                           "--statsd",
                           sd,
                           "--statsd-flush-ms",
                           "50",
                           NULL};
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);

    signal(SIGPIPE, SIG_IGN);
    snprintf(fix, sizeof(fix), "%s/mongo_cps.yaml", RL_FIXTURES);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    statsd_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(statsd_fd >= 0);
    assert_int_equal(bind(statsd_fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(statsd_fd, (struct sockaddr *)&a, &alen), 0);
    snprintf(sd, sizeof(sd), "127.0.0.1:%d", ntohs(a.sin_port));
    rlt_fx_use(&(rlt_fx_conf_t){
        .bin = RL_SERVER_BIN, .log_level = "warn", .args = args, .metrics = 1});
    /* RLT_FILTER=test_name (a glob) runs only matching tests. */
    if (getenv("RLT_FILTER") != NULL)
        cmocka_set_test_filter(getenv("RLT_FILTER"));
}
