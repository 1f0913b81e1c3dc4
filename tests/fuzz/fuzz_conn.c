/* Fuzz target: the server's native connections and its batcher, end to end.
 *
 * The input is a script. Its first bytes choose a configuration (in-flight
 * and output caps, frame size, batch size, fail open or closed, connection
 * cap); the rest are commands: connect a client, queue a well-formed request
 * or raw bytes on it, write a chosen number of queued bytes (so frames arrive
 * in pieces), run one loop iteration, read responses, half-close, close
 * abruptly, answer a deferred store batch, change how the store answers,
 * shrink the server's socket buffers, tell everyone GOAWAY, close every
 * connection. Then a final phase flushes and half-closes every client,
 * answers every batch and steps the loop until everything has closed.
 *
 * How the bytes reach conn.c. The target drives the real code over a real
 * libuv loop, one uv_run(UV_RUN_NOWAIT) step at a time, with no seam in the
 * server: the "listener" is a uv_pipe_t on an abstract AF_UNIX socket, whose
 * connection callback calls rls_conns_accept as server.c's does. uv_accept
 * opens the accepted fd in whatever stream the caller hands it, so each
 * connection is conn.c's own uv_tcp_t over a Unix socket (uv_tcp_nodelay
 * fails on it, and conn.c ignores that result, as it does for TCP too).
 * A Unix socket rather than loopback TCP because delivery is synchronous:
 * bytes a client writes are readable at the next step, with no Nagle, no
 * delayed ACK and no autotuned buffers, so a run replays exactly, which
 * coverage-guided fuzzing needs; and its buffers can be made small, so
 * partial writes, uv_write, paused reads and --max-output overflows are all
 * reachable. Everything between the socket and the store is the server's
 * code, unchanged: accept and refusal, reads, framing, decoding, validation,
 * rule resolution against a policy runtime, the batcher's coalescing and
 * deciding, fail open/closed, shadow and off modes, responses,
 * flush, backpressure, GOAWAY, close. A seam that fed bytes past the socket
 * would miss the write path and the read pausing, and would touch conn.c,
 * which others are editing. The tick (a uv_check) is server.c's on_tick.
 *
 * The policy is real: a runtime (policy/runtime.h) over policy A (rules of
 * 1 to 3 windows, an override, one shadow, one off, one from a --rule
 * flag), with inline caps chosen by the input; commands reload policy B
 * (and back) and apply fleet switches while batches are in flight.
 * Requests name those rules, unknown ones, or carry inline limits.
 *
 * The store is a scripted fake (fuzz_conn_store.c, store/store.h's op
 * contract): it decides each op with rl_admit as the real stores do and
 * reports win[].before and admitted; it answers at once, defers to a
 * later command, fails whole batches with RL_ESTORE or RL_ETIMEDOUT,
 * fails single ops, reports real, zero, negative, near-INT64_MAX or
 * -INT64_MAX counts, gives callers a stored quota's windows (quota_win), or
 * lies about admitted, all chosen by input bytes.
 *
 * Invariants (abort on violation):
 *   - every response decodes; no response for an id never sent, and no id
 *     answered more often than it was sent;
 *   - until a reload or switches, no request to the shadow or off rule is
 *     refused, and a shadow_refused answer is OK;
 *   - unless the store lied, the batcher's replay agrees with it;
 *   - when no connection was cut (client close, refusal, overflow, forced
 *     close), every request with a decodable frame got exactly one response,
 *     and every undecodable payload or broken frame exactly one notice;
 *   - nothing hangs: the final phase must finish within a bounded number of
 *     steps without progress;
 *   - nothing leaks: every handle closes (uv_loop_close succeeds) and
 *     ASan/LSan see no leak. */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <uv.h>

#include "rl_admit.h"
#include "rl_buf.h"
#include "rl_error.h"
#include "rl_frame.h"
#include "rl_msg.h"
#include "rl_window.h"
#include "core/decide.h"
#include "base/log.h"
#include "native/conn.h"
#include "flags.h"
#include "server.h"
#include "policy/rules.h"
#include "policy/runtime.h"
#include "store/store.h"
#include "fuzz_conn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NCLI 4
#define NSLOT 8192           /* (client, id) pairs tracked */
#define STALL_MAX 400        /* final-phase steps without progress: a hang */
#define FINAL_MAX 200000     /* final-phase steps in all */

/* ---- the input ---- */

typedef struct {
    const uint8_t *p;
    size_t n, off;
} rd_t;

static unsigned u8(rd_t *r)
{
    return r->off < r->n ? r->p[r->off++] : 0;
}

static uint64_t uN(rd_t *r, int bytes)
{
    uint64_t v = 0;
    while (bytes-- > 0)
        v = (v << 8) | u8(r);
    return v;
}

/* ---- the clients and what they are owed ---- */

typedef struct {
    uint64_t id;
    uint32_t cli; /* client index + 1; 0: empty slot */
    uint32_t expected, got;
    int may_refuse; /* sent once under a rule or limit that can refuse */
} slot_t;

typedef struct {
    int fd;           /* -1 once closed */
    int used;
    int lossy;        /* cut by someone: only "at most once" holds */
    int shut_pending; /* half-close once the queue is written */
    int shut;         /* half-closed */
    int eof;          /* saw the server close */
    int broken;       /* our stream broke framing: later bytes not counted */
    rl_buf_t q;       /* queued, not yet written */
    rl_buf_t parse;   /* queued bytes not yet parsed into whole frames */
    rl_buf_t in;      /* received bytes not yet parsed */
    uint64_t expect0; /* decodable requests with id 0 */
    uint64_t notices; /* undecodable payloads and broken frames */
    uint64_t got0;    /* responses with id 0 */
} cli_t;

typedef struct {
    uv_loop_t loop;
    uv_pipe_t listener;
    uv_check_t tick;
    rls_flags_t cfg;
    fstore_t store;
    rls_runtime_t rt;
    rls_decider_t decider;
    rls_conns_t conns;
    cli_t cli[NCLI];
    size_t ncli;
    struct sockaddr_un addr;
    socklen_t addrlen;
    int lossy;             /* every connection cut (rls_conns_close) */
    uint64_t goaways;      /* rls_conns_goaway calls */
    uint64_t empties;      /* on_empty calls */
    int open_at_stop;      /* connections were open when stopping began */
    uint64_t progress;     /* bumps on anything that moved */
    int policy_changed;    /* a reload or switches: modes may differ */
    unsigned reloads;
    slot_t slot[NSLOT];
} harness_t;

static harness_t H;

static slot_t *slot_find(harness_t *h, uint32_t cli, uint64_t id, int add)
{
    uint64_t x = (id ^ ((uint64_t)cli << 56)) * UINT64_C(0x9e3779b97f4a7c15);
    size_t i = (size_t)(x >> 51) & (NSLOT - 1), k;

    for (k = 0; k < NSLOT; k++, i = (i + 1) & (NSLOT - 1)) {
        slot_t *s = &h->slot[i];
        if (s->cli == cli + 1 && s->id == id)
            return s;
        if (s->cli == 0) {
            if (!add)
                return NULL;
            s->cli = cli + 1;
            s->id = id;
            return s;
        }
    }
    FAIL("id table full");
}

/* Appends bytes to a client's queue and counts the requests they complete,
 * parsing the stream exactly as the server will. */
static void cli_queue(harness_t *h, uint32_t ci, const void *p, size_t n)
{
    cli_t *c = &h->cli[ci];
    rl_frame_t f;
    int rc;

    if (c->fd < 0 || c->shut_pending || n == 0)
        return;
    if (rl_buf_append(&c->q, p, n) != RL_OK ||
        rl_buf_append(&c->parse, p, n) != RL_OK)
        abort();
    while (!c->broken) {
        rc = rl_frame_decode(rl_buf_rptr(&c->parse), rl_buf_len(&c->parse),
                             h->cfg.max_frame, &f);
        if (rc == RL_EAGAIN)
            break;
        if (rc != RL_OK) {
            c->notices++;
            c->broken = 1;
            break;
        }
        rl_check_t q;
        if (rl_check_decode(f.payload, f.len, &q) != RL_OK)
            c->notices++;
        else if (q.id == 0)
            c->expect0++;
        else {
            slot_t *s = slot_find(h, ci, q.id, 1);
            s->expected++;
            /* Under the first policy, shadow and off never refuse. */
            if (!(q.rule_len == 8 && memcmp(q.rule, "shadowed", 8) == 0) &&
                !(q.rule_len == 4 && memcmp(q.rule, "dark", 4) == 0))
                s->may_refuse = 1;
        }
        rl_buf_consume(&c->parse, f.size);
    }
}

static void cli_close(harness_t *h, cli_t *c, int lossy)
{
    (void)h;
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    if (lossy)
        c->lossy = 1;
    c->eof = 1;
}

/* Writes up to max queued bytes. */
static void cli_write(harness_t *h, cli_t *c, size_t max)
{
    size_t n = rl_buf_len(&c->q);
    ssize_t w;

    if (c->fd < 0 || c->shut)
        return;
    if (n > max)
        n = max;
    if (n > 0) {
        w = send(c->fd, rl_buf_rptr(&c->q), n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            rl_buf_consume(&c->q, (size_t)w);
            h->progress++;
        } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            /* The server closed on us (broken frame, overflow): what is
             * still queued will never be read. */
            rl_buf_reset(&c->q);
        }
    }
    if (c->shut_pending && rl_buf_len(&c->q) == 0) {
        shutdown(c->fd, SHUT_WR);
        c->shut = 1;
        h->progress++;
    }
}

/* Reads and checks every response available. */
static void cli_read(harness_t *h, uint32_t ci)
{
    cli_t *c = &h->cli[ci];
    rl_frame_t f;
    rl_result_t r;
    uint8_t *w;
    ssize_t n;

    while (c->fd >= 0 && !c->eof) {
        if (rl_buf_reserve(&c->in, 65536, &w) != RL_OK)
            abort();
        n = recv(c->fd, w, 65536, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            c->eof = 1; /* EOF, or a reset after the last byte */
            h->progress++;
            break;
        }
        rl_buf_commit(&c->in, (size_t)n);
        h->progress++;
    }
    while (rl_buf_len(&c->in) > 0) {
        int rc = rl_frame_decode(rl_buf_rptr(&c->in), rl_buf_len(&c->in),
                                 1u << 20, &f);
        if (rc == RL_EAGAIN)
            break;
        if (rc != RL_OK)
            FAIL("server sent a broken frame: %s", rl_strerror(rc));
        if (rl_result_decode(f.payload, f.len, &r) != RL_OK)
            FAIL("server sent an undecodable response");
        if (r.code < RL_CODE_OK || r.code > RL_CODE_ERROR)
            FAIL("response code %d", (int)r.code);
        if (r.id == 0) {
            c->got0++;
            if (r.code != RL_CODE_ERROR && c->expect0 == 0)
                FAIL("a notice (id 0) that is not an ERROR");
            /* One per id-0 request, notice owed, GOAWAY or refusal. */
            if (c->got0 > c->expect0 + c->notices + h->goaways + 1)
                FAIL("more id-0 responses than could be owed");
        } else {
            slot_t *s = slot_find(h, ci, r.id, 0);
            if (s == NULL || s->got >= s->expected)
                FAIL("response for id %llu %s", (unsigned long long)r.id,
                     s == NULL ? "never sent" : "answered once too often");
            s->got++;
            if (r.code == RL_CODE_OVER_LIMIT && !s->may_refuse &&
                !h->policy_changed)
                FAIL("id %llu refused under a shadow or off rule",
                     (unsigned long long)r.id);
            if (r.shadow_refused && r.code != RL_CODE_OK)
                FAIL("id %llu shadow_refused but not OK",
                     (unsigned long long)r.id);
        }
        rl_buf_consume(&c->in, f.size);
    }
}

/* ---- the server side: listener and tick ---- */

static void on_tick(uv_check_t *t)
{
    harness_t *h = t->data;

    /* server.c's on_tick (no hold: no clock to read) */
    rls_conns_resume(&h->conns);
    rls_decider_tick(&h->decider, 0);
    rls_conns_flush(&h->conns);
}

static void on_connection(uv_stream_t *l, int status)
{
    harness_t *h = l->data;
    rls_conns_accept(&h->conns, l, status);
}

/* The set reports its last connection closed once it is stopping. */
static void on_empty(void *arg)
{
    harness_t *h = arg;

    if (!h->conns.stopping || !rls_list_empty(&h->conns.all))
        FAIL("on_empty while not stopping, or with connections open");
    h->empties++;
}

static void step(harness_t *h)
{
    uv_run(&h->loop, UV_RUN_NOWAIT);
}

static void cli_connect(harness_t *h)
{
    cli_t *c;
    uint64_t seen, refused;
    int fd, k;

    if (h->ncli == NCLI)
        return;
    c = &h->cli[h->ncli];
    memset(c, 0, sizeof(*c));
    c->used = 1;
    rl_buf_init(&c->q, 1 << 20);
    rl_buf_init(&c->parse, 1 << 20);
    rl_buf_init(&c->in, 16 << 20);
    h->ncli++;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        FAIL("socket: %s", strerror(errno));
    c->fd = fd;
    if (connect(fd, (struct sockaddr *)&h->addr, h->addrlen) != 0) {
        cli_close(h, c, 1);
        return;
    }
    refused = h->conns.stats.conns_refused;
    seen = h->conns.stats.conns_accepted + refused;
    for (k = 0; k < 8; k++) {
        step(h);
        if (h->conns.stats.conns_accepted + h->conns.stats.conns_refused !=
            seen)
            break;
    }
    /* Refused (one notice, then closed), or never accepted: nothing sent on
     * it is owed an answer. */
    if (k == 8 || h->conns.stats.conns_refused != refused)
        c->lossy = 1;
}

/* Makes every server-side socket's send buffer as small as the kernel
 * allows, so writes go partial and uv_write takes over. */
static void shrink_walk(uv_handle_t *hd, void *arg)
{
    uv_os_fd_t fd;
    int one = 1;

    (void)arg;
    if (hd->type == UV_TCP && !uv_is_closing(hd) && uv_fileno(hd, &fd) == 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &one, sizeof(one));
}

/* ---- commands ---- */

static const char *const keys[] = {"user:1", "user:2", "a",  "{x}:y",
                                   "\xc3\xa9", "k\0nul", "",  "ip:10.0.0.1"};
/* The rules of policy A (below), and names no policy has. */
static const char *const rules[] = {"api",  "burst",    "huge",
                                    "shadowed", "dark", "flagged",
                                    "nosuch", "bad rule"};

/* Queues `times` copies of one request (ids counting up from its own). */
static void cmd_request(harness_t *h, rd_t *r, unsigned times)
{
    uint32_t ci = u8(r) % NCLI;
    unsigned a = u8(r), b = u8(r);
    rl_check_t q;
    char key[RL_KEY_MAX + 2];
    uint8_t buf[1024];
    rl_buf_t out;

    if (ci >= h->ncli)
        return;
    memset(&q, 0, sizeof(q));
    q.id = (a & 0x80) ? uN(r, 8) : (uint64_t)(u8(r) % 64);
    switch (a & 7) {
    case 6: /* a long key, maybe over the maximum */
        memset(key, 'k', sizeof(key));
        q.key = key;
        q.key_len = RL_KEY_MAX - 1 + (b & 3);
        break;
    case 7: /* a few bytes of the input */
        q.key_len = u8(r) % 12;
        if (q.key_len > r->n - r->off)
            q.key_len = r->n - r->off;
        q.key = (const char *)r->p + r->off;
        r->off += q.key_len;
        break;
    default:
        q.key = keys[b & 7];
        q.key_len = (b & 7) == 5 ? 5 : strlen(q.key);
        break;
    }
    switch ((a >> 3) & 3) {
    case 0:
        q.cost = u8(r) % 4;
        break;
    case 1:
        q.cost = (uint32_t)uN(r, 4);
        break;
    default:
        q.cost = 1;
        break;
    }
    if ((a >> 5) & 1) {
        const char *name = rules[(b >> 3) & 7];
        q.rule = name;
        q.rule_len = strlen(name);
        if (b & 0x80) /* and an inline limit too: invalid */
            q.limit = 5;
    } else {
        switch ((b >> 3) & 3) {
        case 0:
            q.limit = 1 + u8(r) % 8;
            break;
        case 1:
            q.limit = uN(r, 8);
            break;
        default:
            q.limit = 100;
            break;
        }
        switch ((b >> 5) & 3) {
        case 0:
            q.window_s = 1 + u8(r) % 4;
            break;
        case 1:
            q.window_s = (uint32_t)uN(r, 4);
            break;
        default:
            q.window_s = 60;
            break;
        }
    }
    rl_buf_init(&out, sizeof(buf));
    while (times-- > 1 && rl_check_put(&out, &q) == RL_OK) {
        cli_queue(h, ci, rl_buf_rptr(&out), rl_buf_len(&out));
        rl_buf_reset(&out);
        if (q.id != 0)
            q.id++;
    }
    if (rl_check_put(&out, &q) == RL_OK) {
        /* Sometimes a declared length the frame does not hold, or a flag. */
        if ((a & 0x40) && rl_buf_len(&out) > 0) {
            uint8_t *p = rl_buf_rptr(&out);
            unsigned v = u8(r);
            p[v % rl_buf_len(&out)] ^= (uint8_t)(1u << ((v >> 5) & 7));
        }
        cli_queue(h, ci, rl_buf_rptr(&out), rl_buf_len(&out));
    }
    rl_buf_free(&out);
}

static void cmd_raw(harness_t *h, rd_t *r)
{
    uint32_t ci = u8(r) % NCLI;
    size_t n = u8(r);

    if (n > r->n - r->off)
        n = r->n - r->off;
    if (ci < h->ncli)
        cli_queue(h, ci, r->p + r->off, n);
    r->off += n;
}

/* Two policies, built once: A is in force at the start of every input,
 * B replaces it on a reload (and A B in turn). A has rules of 1 to 3
 * windows, a per-caller override, a rule at the largest limit and window,
 * one in shadow mode, one off, and one from a --rule flag; B drops some,
 * changes windows and modes, so batches in flight hold a policy no longer
 * in force. */
static const char policy_a[] =
    "rules:\n"
    "  api:\n"
    "    limits: [10/1m, 100/1h]\n"
    "    overrides:\n"
    "      \"user:1\": [3/1m]\n"
    "  burst:\n"
    "    limits: [1/1s, 3/1m, 10/1h]\n"
    "  huge:\n"
    "    limits: [9223372036854775807/366d]\n"
    "  shadowed:\n"
    "    limits: [2/1s, 5/1m]\n"
    "    mode: shadow\n"
    "  dark:\n"
    "    limits: [1/1s]\n"
    "    mode: off\n";
static const char policy_b[] =
    "rules:\n"
    "  api:\n"
    "    limits: [2/1s]\n"
    "  huge:\n"
    "    limits: [1/1s, 9223372036854775807/366d]\n"
    "    mode: shadow\n"
    "  shadowed:\n"
    "    limits: [1/1s]\n"
    "  dark:\n"
    "    limits: [5/1m]\n"
    "    mode: off\n";
static rls_policy_t *policies[2];

static rls_policy_t *policy(int which)
{
    static const char *const flags[] = {"flagged=4/1s,20/1m"};
    const char *text = which ? policy_b : policy_a;
    rls_diag_t d;

    if (policies[which] == NULL &&
        rls_policy_build_buf(flags, which ? 0 : 1, "fuzz.yaml", text,
                             strlen(text), 16, &policies[which],
                             &d) != RL_OK)
        FAIL("policy %c: %s", 'A' + which, d.n ? d.msg[0] : "no memory");
    return rls_policy_ref(policies[which]);
}

/* server.c's before_policy_change: the batch being filled goes first. */
static void before_change(void *arg)
{
    harness_t *h = arg;

    rls_decider_before_change(&h->decider);
}

/* Fleet-wide switches, as rl-ctl writes them and the server parses them:
 * 1 to 3 field/value pairs from small tables. */
static void cmd_switches(harness_t *h, rd_t *r)
{
    static const char *const fields[8] = {
        "global",     "mode:api",  "mode:burst",  "scale:api",
        "scale:huge", "mode:dark", "scale:burst", "version"};
    static const char *const values[8] = {"enforce", "shadow", "off",  "0.5",
                                          "1000",    "1e-9",   "2",    "x"};
    const char *f[3], *v[3];
    size_t fl[3], vl[3], n = 1 + u8(r) % 3, i, bad;
    rls_switches_t sw;

    for (i = 0; i < n; i++) {
        unsigned x = u8(r);
        f[i] = fields[x & 7];
        v[i] = values[(x >> 3) & 7];
        fl[i] = strlen(f[i]);
        vl[i] = strlen(v[i]);
    }
    if (rls_switches_parse(&sw, n, f, fl, v, vl, &bad) != RL_OK)
        abort();
    if (rls_runtime_set_switches(&h->rt, &sw) != RL_OK)
        abort();
    h->policy_changed = 1;
}

static void config(harness_t *h, rd_t *r)
{
    static const uint32_t inflight[] = {1, 2, 3, 4, 7, 16, 1024, 1};
    static const size_t output[] = {4096, 4096, 5000, 8192, 65536, 4u << 20};
    static const uint32_t frame[] = {64, 100, 600, 65536};
    static const size_t batch[] = {1, 2, 3, 5, 16, 1024, 1024, 1024};
    static const uint32_t maxconn[] = {1, 2, 3, 10000};
    static const uint32_t iwin[] = {0, 0, 60, 3600};
    static const uint64_t ilim[] = {0, 0, 100, INT64_MAX};
    unsigned a = u8(r), b = u8(r), c = u8(r), m = u8(r), nb = u8(r),
             sp = u8(r), d = u8(r);
    rls_flags_t *cfg = &h->cfg;
    rls_decider_opts_t o;
    char err[256];

    rls_flags_defaults(cfg);
    cfg->max_inflight = inflight[a & 7];
    cfg->max_output = output[(a >> 3) % 6];
    cfg->max_frame = frame[(a >> 6) & 3];
    cfg->fail_open = b & 1;
    cfg->max_connections = maxconn[(b >> 1) & 3];
    fs_modes(m, &h->store.mode, &h->store.style, &h->store.twist);
    /* A clock near a window boundary, and far along. */
    h->store.now = UINT64_C(1700000000000) + (c & 0x7f) * UINT64_C(997);
    if (c & 0x80)
        h->store.now = UINT64_C(1) << 52;
    /* The runtime as rls_server_start makes it, with the inline caps. */
    if (rls_runtime_init(&h->rt, policy(0), 16) != RL_OK)
        abort();
    h->rt.inline_mode = (d & 7) == 7 ? RLS_INLINE_DENY : RLS_INLINE_ALLOW;
    h->rt.max_inline_window = iwin[(d >> 3) & 3];
    h->rt.max_inline_limit = ilim[(d >> 5) & 3];
    h->rt.before_change = before_change;
    h->rt.arg = h;
    rls_decider_opts_init(&o);
    o.store = &h->store.base;
    o.rt = &h->rt;
    o.prefix = cfg->prefix;
    o.prefix_len = cfg->prefix_len;
    o.max_reqs = batch[nb & 7];
    o.grace_ms = cfg->grace_ms;
    o.fail_open = cfg->fail_open;
    o.spread_ms = sp & 1 ? 50000 : 0;
    /* Reservations and leases: signed handles, steps bounded in time. */
    o.reserve_ttl_ms = 60000;
    o.loop = &h->loop;
    o.xop_timeout_ms = 50;
    if (rls_decider_init(&h->decider, &o, err, sizeof(err)) != RL_OK)
        abort();
    rls_hkey_free(&h->decider.hkey);
    rls_hkey_from_text(&h->decider.hkey, "fuzz", 4);
}

static void run_script(harness_t *h, rd_t *r)
{
    while (r->off < r->n) {
        unsigned op = u8(r);
        cli_t *c;
        uint32_t ci;

        switch (op % 16) {
        case 0:
            cli_connect(h);
            break;
        case 1:
        case 2:
            cmd_request(h, r, 1);
            break;
        case 3: /* a burst: many requests for a few bytes */
            cmd_request(h, r, 1 + u8(r));
            break;
        case 4:
            cmd_raw(h, r);
            break;
        case 5: /* write a piece: 1..256 bytes, or all */
        case 6:
            ci = u8(r) % NCLI;
            if (ci < h->ncli)
                cli_write(h, &h->cli[ci], op & 0x10 ? SIZE_MAX : 1 + u8(r));
            break;
        case 7:
        case 8:
            step(h);
            break;
        case 9:
            for (ci = 0; ci < h->ncli; ci++)
                cli_read(h, ci);
            break;
        case 10: /* half-close once written */
            ci = u8(r) % NCLI;
            if (ci < h->ncli) {
                h->cli[ci].shut_pending = 1;
                cli_write(h, &h->cli[ci], 0);
            }
            break;
        case 11: /* answer a deferred batch */
            if (h->store.npend > 0) {
                int mode, style, twist;
                fs_modes(u8(r), &mode, &style, &twist);
                fs_release(&h->store, u8(r) % h->store.npend, mode, style,
                           twist);
            }
            break;
        case 12: { /* how the store answers from now on; the clock moves */
            fs_modes(u8(r), &h->store.mode, &h->store.style,
                     &h->store.twist);
            h->store.now += (uint64_t)u8(r) * 250;
            break;
        }
        case 13:
            if ((op >> 4) == 0) {
                /* The server's stop: refuse new connections, tell the open
                 * ones to go away, keep serving them. */
                if (!h->conns.stopping)
                    h->open_at_stop = !rls_list_empty(&h->conns.all);
                h->conns.stopping = 1;
                h->conns.draining = 0;
                rls_conns_goaway(&h->conns);
                h->goaways++;
            } else if ((op >> 4) == 1) {
                /* The stop's deadline: cut every connection. */
                rls_conns_close(&h->conns);
                h->lossy = 1;
            } else if ((op >> 4) == 3) {
                /* A reload: the other policy, between batches. */
                if (rls_runtime_set_policy(&h->rt,
                                           policy(++h->reloads % 2)) != RL_OK)
                    abort();
                h->policy_changed = 1;
            } else if ((op >> 4) == 4) {
                cmd_switches(h, r);
            } else {
                uv_walk(&h->loop, shrink_walk, NULL);
            }
            break;
        case 14: /* the client goes away without reading its answers */
            ci = u8(r) % NCLI;
            if (ci < h->ncli && h->cli[ci].fd >= 0) {
                c = &h->cli[ci];
                if (op & 0x10) {
                    struct linger lg = {1, 0}; /* and resets */
                    setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
                }
                cli_close(h, c, 1);
            }
            break;
        default: /* shrink a client's send buffer */
            ci = u8(r) % NCLI;
            if (ci < h->ncli && h->cli[ci].fd >= 0) {
                int v = 1;
                setsockopt(h->cli[ci].fd, SOL_SOCKET, SO_SNDBUF, &v,
                           sizeof(v));
            }
            break;
        }
    }
}

/* Everything still owed is delivered: clients write what they queued and
 * half-close, the store answers, the loop runs until every connection has
 * closed. No progress for STALL_MAX steps is a hang. */
static void finish(harness_t *h)
{
    uint64_t last = 0;
    unsigned stall = 0;
    size_t it, i;

    for (i = 0; i < h->ncli; i++)
        h->cli[i].shut_pending = 1;
    for (it = 0; it < FINAL_MAX; it++) {
        int done = 1;

        while (h->store.npend > 0) {
            fs_release(&h->store, 0, ST_NOW, h->store.style,
                       h->store.twist);
            h->progress++;
        }
        for (i = 0; i < h->ncli; i++)
            cli_write(h, &h->cli[i], SIZE_MAX);
        step(h);
        for (i = 0; i < h->ncli; i++) {
            cli_read(h, (uint32_t)i);
            if (!h->cli[i].eof)
                done = 0;
        }
        if (done && rls_list_empty(&h->conns.all) &&
            !rls_decider_busy(&h->decider) && h->store.npend == 0)
            break;
        if (h->progress != last) {
            last = h->progress;
            stall = 0;
        } else if (++stall > STALL_MAX) {
            FAIL("hang: no progress for %u steps (open=%llu inflight=%llu "
                 "store busy=%d)",
                 stall, (unsigned long long)h->conns.stats.conns_open,
                 (unsigned long long)h->conns.stats.inflight,
                 rls_decider_busy(&h->decider));
        }
    }
    if (it == FINAL_MAX)
        FAIL("hang: the final phase did not finish");
}

static void check_owed(harness_t *h)
{
    size_t i;

    if (h->open_at_stop && h->empties == 0)
        FAIL("a stopping set closed its last connection without on_empty");
    /* The store decided as rl_admit does; the batcher's replay of the same
     * counts must agree unless the script made the store lie. */
    if (!h->store.lied && rls_decider_stats(&h->decider)->replay_mismatch != 0)
        FAIL("batcher and an honest store disagree on admissions");
    if (h->conns.stats.inflight != 0)
        FAIL("%llu requests in flight after every connection closed",
             (unsigned long long)h->conns.stats.inflight);
    /* A connection closed over --max-output loses what it was owed. That
     * can happen to a client that reads (a burst answered in one iteration
     * can pass a small cap), and which connection it was is not known. */
    if (h->lossy || h->conns.stats.conns_overflow > 0)
        return;
    for (i = 0; i < NSLOT; i++) {
        slot_t *s = &h->slot[i];
        if (s->cli != 0 && !h->cli[s->cli - 1].lossy && s->got != s->expected)
            FAIL("id %llu sent %u times, answered %u times",
                 (unsigned long long)s->id, s->expected, s->got);
    }
    for (i = 0; i < h->ncli; i++) {
        cli_t *c = &h->cli[i];
        if (c->lossy)
            continue;
        if (rl_buf_len(&c->in) > 0)
            FAIL("client %zu: server closed in the middle of a response", i);
        if (c->got0 < c->expect0 + c->notices ||
            c->got0 > c->expect0 + c->notices + h->goaways)
            FAIL("client %zu: %llu id-0 responses for %llu id-0 requests, "
                 "%llu notices owed, %llu GOAWAYs",
                 i, (unsigned long long)c->got0,
                 (unsigned long long)c->expect0,
                 (unsigned long long)c->notices,
                 (unsigned long long)h->goaways);
    }
}

static int quiet_once, verbose;

/* FUZZ_CONN_VERBOSE=1: one line per input, to see what a seed reaches. */
static void summary(const harness_t *h)
{
    const rls_batch_stats_t *bs = rls_decider_stats(&h->decider);
    uint64_t sent = 0, got = 0;
    size_t i;

    for (i = 0; i < NSLOT; i++) {
        sent += h->slot[i].expected;
        got += h->slot[i].got;
    }
    fprintf(stderr,
            "fuzz_conn: clients=%zu sent=%llu answered=%llu accepted=%llu "
            "refused=%llu overflow=%llu ok=%llu over=%llu err=%llu "
            "rejected=%llu/%llu/%llu/%llu/%llu/%llu/%llu batches=%llu "
            "coalesced=%llu store_errors=%llu mismatch=%llu lossy=%d\n",
            h->ncli, (unsigned long long)sent, (unsigned long long)got,
            (unsigned long long)h->conns.stats.conns_accepted,
            (unsigned long long)h->conns.stats.conns_refused,
            (unsigned long long)h->conns.stats.conns_overflow,
            (unsigned long long)h->conns.stats.decisions[RL_CODE_OK],
            (unsigned long long)h->conns.stats.decisions[RL_CODE_OVER_LIMIT],
            (unsigned long long)h->conns.stats.decisions[RL_CODE_ERROR],
            (unsigned long long)h->conns.stats.rejected[0],
            (unsigned long long)h->conns.stats.rejected[1],
            (unsigned long long)h->conns.stats.rejected[2],
            (unsigned long long)h->conns.stats.rejected[3],
            (unsigned long long)h->conns.stats.rejected[4],
            (unsigned long long)h->conns.stats.rejected[5],
            (unsigned long long)h->conns.stats.rejected[6],
            (unsigned long long)bs->batches, (unsigned long long)bs->coalesced,
            (unsigned long long)bs->store_errors,
            (unsigned long long)bs->replay_mismatch, h->lossy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    harness_t *h = &H;
    rd_t r = {data, size, 0};
    rls_conns_opts_t co;
    int fd, rc;
    size_t i;

    if (!quiet_once) {
        /* As rl-server does: a peer gone is an error return, not a signal. */
        signal(SIGPIPE, SIG_IGN);
        rls_log_set_level("error");
        quiet_once = 1;
        verbose = getenv("FUZZ_CONN_VERBOSE") != NULL;
    }
    memset(h, 0, sizeof(*h));
    h->store.base.v = &fs_vtbl;
    config(h, &r);

    if (uv_loop_init(&h->loop) != 0)
        abort();
    /* The listener: an abstract Unix socket (no file to clean up). */
    memset(&h->addr, 0, sizeof(h->addr));
    h->addr.sun_family = AF_UNIX;
    rc = snprintf(h->addr.sun_path + 1, sizeof(h->addr.sun_path) - 1,
                  "rl-fuzz-conn-%ld", (long)getpid());
    h->addrlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                             (size_t)rc);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&h->addr, h->addrlen) != 0)
        FAIL("bind: %s", strerror(errno));
    uv_pipe_init(&h->loop, &h->listener, 0);
    h->listener.data = h;
    if (uv_pipe_open(&h->listener, fd) != 0 ||
        uv_listen((uv_stream_t *)&h->listener, 16, on_connection) != 0)
        FAIL("listen");
    rls_server_conns_opts(&h->cfg, &co);
    rls_conns_init(&h->conns, &h->loop, &co, &h->decider);
    h->conns.fe.on_empty = on_empty;
    h->conns.fe.arg = h;
    uv_check_init(&h->loop, &h->tick);
    h->tick.data = h;
    uv_check_start(&h->tick, on_tick);

    cli_connect(h);
    run_script(h, &r);
    finish(h);
    check_owed(h);
    if (verbose)
        summary(h);

    /* Tear down as server.c's close_all does; every handle must close. */
    rls_decider_free(&h->decider);
    rls_runtime_free(&h->rt);
    h->store.base.v->close(&h->store.base, NULL, NULL);
    uv_close((uv_handle_t *)&h->tick, NULL);
    uv_close((uv_handle_t *)&h->listener, NULL);
    rls_conns_free(&h->conns);
    for (i = 0; i < 16 && uv_loop_alive(&h->loop); i++)
        uv_run(&h->loop, UV_RUN_NOWAIT);
    if (uv_loop_close(&h->loop) != 0)
        FAIL("a handle is still open after every connection closed");
    for (i = 0; i < h->ncli; i++) {
        cli_close(h, &h->cli[i], 0);
        rl_buf_free(&h->cli[i].q);
        rl_buf_free(&h->cli[i].parse);
        rl_buf_free(&h->cli[i].in);
    }
    return 0;
}
