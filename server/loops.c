/* --threads N: the loops beside the first, and what passes between them
 * (see loops.h).
 *
 * Every other loop has a queue of messages and a uv_async to wake it;
 * the first loop posts (a connection to serve, a policy, switches, an
 * Envoy tree, the switches read, stop, render your page) and the loop
 * acts on them in order, on its own thread. The queue's mutex is taken
 * per message, never on the request path. The only state read across
 * threads without a message is each loop's count of open connections
 * (an atomic), which the hand-off compares. */
#include "loops.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/prom.h"
#include "base/prom_merge.h"
#include "net/tls.h"
#include "rl_error.h"

/* How long a scrape waits for another loop's page. */
#define RENDER_WAIT_MS 1000

enum {
    MSG_ADOPT,    /* serve fd on the loop's front end `listener` */
    MSG_POLICY,   /* install policy (a reference) */
    MSG_SWITCHES, /* install sw (owned) */
    MSG_ENVOY,    /* install conf (a reference) */
    MSG_READY,    /* the first loop has read the switches */
    MSG_TLS,      /* install ctx (a reference) as the listeners' TLS */
    MSG_STOP,     /* stop as the first loop does */
    MSG_RENDER    /* render the loop's page into its `page` */
};

typedef struct msg_s {
    struct msg_s *next;
    int kind;
    int listener;
    int fd;
    rls_policy_t *policy;
    rls_switches_t sw;
    rls_envoy_conf_t *conf;
    struct ssl_ctx_st *ctx; /* MSG_TLS's, with its certificate's */
    int64_t not_after;      /* notAfter */
    uint64_t seq;           /* MSG_RENDER's */
} msg_t;

typedef struct worker_s {
    rls_loops_t *all;
    unsigned index; /* 1 .. n - 1 */
    uv_loop_t loop;
    uv_async_t wake;
    pthread_t thread;
    pthread_mutex_t mu; /* the queue and the render's hand-back */
    pthread_cond_t cond;
    msg_t *head, *tail;
    rls_server_t srv;
    int loop_made, wake_made, srv_started, thread_started;
    int ended; /* its uv_run returned (under mu) */
    /* The page a MSG_RENDER asked for: written by the loop, read by the
     * first once render_done reaches the scrape's seq (under mu). */
    rl_buf_t page;
    uint64_t render_done;
    int render_rc;
} worker_t;

/* A listener's hand-off, its set's handoff_arg. */
typedef struct handoff_s {
    rls_loops_t *l;
    int listener;
} handoff_t;

struct rls_loops_s {
    rls_server_t *first;
    unsigned n;
    worker_t *w; /* loops 1 .. n - 1 are w[0 .. n - 2] */
    /* Per listener and loop: the open connections (counted by
     * net/stream.c), those handed over and not yet adopted (atomics),
     * and the loop's share of the listener's cap. */
    unsigned streams[RLS_LISTENERS][RLS_LOOPS_MAX];
    unsigned pending[RLS_LISTENERS][RLS_LOOPS_MAX];
    unsigned cap[RLS_LISTENERS][RLS_LOOPS_MAX];
    /* Per loop: 1 while its store is up, as its last tick saw, 0 while
     * not, -1 once the loop has ended (atomics). */
    int up[RLS_LOOPS_MAX];
    /* Per loop: 1 while an operator told it to take no new connection
     * (--admin's POST /v1/loops/pause), 0 else; on the first loop's
     * thread alone, as the hand-off is. */
    int paused[RLS_LOOPS_MAX];
    handoff_t ho[RLS_LISTENERS];
    /* The first loop's alone: */
    uint64_t handed[RLS_LOOPS_MAX]; /* connections given to each loop */
    uint64_t render_timeouts;
    uint64_t render_seq;
    uint64_t generation; /* the policy the others were last given */
    unsigned next;       /* where the next tie-break starts */
};

/* ---- messages ------------------------------------------------------- */

static void msg_free(msg_t *m)
{
    if (m->kind == MSG_ADOPT && m->fd >= 0)
        close(m->fd);
    rls_policy_unref(m->policy);
    rls_envoy_conf_unref(m->conf);
    rls_tls_ctx_unref(m->ctx);
    rls_switches_free(&m->sw);
    free(m);
}

static void post(worker_t *w, msg_t *m)
{
    pthread_mutex_lock(&w->mu);
    if (w->ended) {
        /* Its loop is gone: the message is dropped (an fd closed). */
        pthread_mutex_unlock(&w->mu);
        msg_free(m);
        return;
    }
    m->next = NULL;
    if (w->tail != NULL)
        w->tail->next = m;
    else
        w->head = m;
    w->tail = m;
    pthread_mutex_unlock(&w->mu);
    uv_async_send(&w->wake);
}

static msg_t *msg_new(int kind)
{
    msg_t *m = calloc(1, sizeof(*m));

    if (m != NULL) {
        m->kind = kind;
        m->fd = -1;
    }
    return m;
}

/* The first loop posts kind to every other loop (no payload). */
static void post_all(rls_loops_t *l, int kind)
{
    unsigned i;
    msg_t *m;

    for (i = 0; i + 1 < l->n; i++) {
        if ((m = msg_new(kind)) == NULL) {
            RLS_ERROR("out of memory telling another loop", " loop=%u", i + 1);
            continue;
        }
        post(&l->w[i], m);
    }
}

static void render(worker_t *w, uint64_t seq)
{
    int rc = RL_OK;

    rl_buf_reset(&w->page);
    if (!w->srv.closed)
        rc = rls_server_metrics_loop(&w->srv, &w->page);
    pthread_mutex_lock(&w->mu);
    w->render_done = seq;
    w->render_rc = rc;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->mu);
}

/* On another loop: what the first posted, in order. */
static void on_wake(uv_async_t *a)
{
    worker_t *w = a->data;
    rls_server_t *s = &w->srv;
    msg_t *m, *next;

    pthread_mutex_lock(&w->mu);
    m = w->head;
    w->head = w->tail = NULL;
    pthread_mutex_unlock(&w->mu);
    for (; m != NULL; m = next) {
        next = m->next;
        switch (m->kind) {
        case MSG_ADOPT:
            /* Counted in the loop's streams first, then no longer
             * pending: the hand-off never sees it in neither. */
            if (!s->closed && s->fe[m->listener] != NULL) {
                s->fe[m->listener]->ops->adopt(s->fe[m->listener], m->fd);
                m->fd = -1;
            }
            __atomic_sub_fetch(&w->all->pending[m->listener][w->index], 1,
                               __ATOMIC_RELAXED);
            break;
        case MSG_POLICY:
            if (!s->closed)
                rls_runtime_set_policy(&s->rt, m->policy); /* takes it */
            else
                rls_policy_unref(m->policy);
            m->policy = NULL;
            break;
        case MSG_SWITCHES:
            if (!s->closed)
                rls_runtime_set_switches(&s->rt, &m->sw); /* takes it */
            break;
        case MSG_ENVOY:
            if (!s->closed && s->grpc != NULL) {
                rls_grpc_set_conf(s->grpc, m->conf); /* takes it */
                m->conf = NULL;
            }
            break;
        case MSG_READY:
            s->sw_ready = 1;
            break;
        case MSG_TLS:
            if (!s->closed && s->tls != NULL) {
                rls_tls_install(s->tls, m->ctx, m->not_after); /* takes it */
                m->ctx = NULL;
            }
            break;
        case MSG_STOP:
            rls_server_stop(s);
            break;
        case MSG_RENDER:
            render(w, m->seq);
            break;
        }
        msg_free(m);
    }
}

/* ---- the first loop's hooks ----------------------------------------- */

static void hook_stop(void *arg)
{
    post_all(arg, MSG_STOP);
}

static void hook_ready(void *arg)
{
    post_all(arg, MSG_READY);
}

static void hook_changed(void *arg, const rls_runtime_t *rt)
{
    rls_loops_t *l = arg;
    unsigned i;
    msg_t *m;
    int policy = rt->generation != l->generation;

    l->generation = rt->generation;
    for (i = 0; i + 1 < l->n; i++) {
        if ((m = msg_new(policy ? MSG_POLICY : MSG_SWITCHES)) == NULL ||
            (!policy && rls_switches_copy(&m->sw, &rt->sw) != RL_OK)) {
            free(m);
            RLS_ERROR("out of memory handing a new policy to another loop; "
                      "it keeps the old one",
                      " loop=%u", i + 1);
            continue;
        }
        if (policy)
            m->policy = rls_policy_ref(rt->policy);
        post(&l->w[i], m);
    }
}

static void hook_tls(void *arg, rls_tls_t *tls)
{
    rls_loops_t *l = arg;
    unsigned i;
    msg_t *m;

    for (i = 0; i + 1 < l->n; i++) {
        if ((m = msg_new(MSG_TLS)) == NULL) {
            RLS_ERROR("out of memory handing new certificates to another "
                      "loop; it keeps the old ones",
                      " loop=%u", i + 1);
            continue;
        }
        m->ctx = rls_tls_ctx_ref(tls, &m->not_after);
        post(&l->w[i], m);
    }
}

static void hook_envoy_conf(void *arg, rls_envoy_conf_t *conf)
{
    rls_loops_t *l = arg;
    unsigned i;
    msg_t *m;

    for (i = 0; i + 1 < l->n; i++) {
        if ((m = msg_new(MSG_ENVOY)) == NULL) {
            RLS_ERROR("out of memory handing an Envoy configuration to "
                      "another loop; it keeps the old one",
                      " loop=%u", i + 1);
            continue;
        }
        m->conf = conf != NULL ? rls_envoy_conf_ref(conf) : NULL;
        post(&l->w[i], m);
    }
}

/* The gauges that are each loop's own, summed over the loops; the other
 * gauges (the store's, the policy's) are the first loop's. */
static int sum_gauge(const char *name, size_t len)
{
    static const char *const per_loop[] = {
        "rl_requests_inflight",        "rl_connections_open",
        "rl_connections_input_bytes",  "rl_grpc_connections_open",
        "rl_grpc_health_watches_open", "rl_grpc_output_bytes",
        "rl_grpc_input_bytes",         "rl_tls_handshakes_in_progress",
        "rl_refusal_cache_entries",
    };
    size_t i;

    for (i = 0; i < sizeof(per_loop) / sizeof(per_loop[0]); i++)
        if (strlen(per_loop[i]) == len && memcmp(per_loop[i], name, len) == 0)
            return 1;
    return 0;
}

/* Waits until w has rendered scrape seq, or the deadline. Returns 1 when
 * its page is there. */
static int await_page(worker_t *w, uint64_t seq, const struct timespec *until)
{
    int ok;

    pthread_mutex_lock(&w->mu);
    while (w->render_done < seq && !w->ended)
        if (pthread_cond_timedwait(&w->cond, &w->mu, until) == ETIMEDOUT)
            break;
    ok = w->render_done >= seq && w->render_rc == RL_OK;
    pthread_mutex_unlock(&w->mu);
    return ok;
}

int rls_loops_metrics(rls_loops_t *l, rl_buf_t *out)
{
    const char *pages[RLS_LOOPS_MAX];
    size_t lens[RLS_LOOPS_MAX], np = 0;
    unsigned asked[RLS_LOOPS_MAX] = {0};
    struct timespec until;
    rl_buf_t own;
    unsigned i;
    msg_t *m;
    int rc;

    l->render_seq++;
    for (i = 0; i + 1 < l->n; i++)
        if ((m = msg_new(MSG_RENDER)) != NULL) {
            m->seq = l->render_seq;
            post(&l->w[i], m);
            asked[i] = 1;
        }
    /* The first loop's page while the others render theirs. */
    rl_buf_init(&own, out->max);
    if ((rc = rls_server_metrics_loop(l->first, &own)) != RL_OK) {
        rl_buf_free(&own);
        return rc;
    }
    pages[np] = (const char *)rl_buf_rptr(&own);
    lens[np++] = rl_buf_len(&own);
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += RENDER_WAIT_MS / 1000;
    for (i = 0; i + 1 < l->n; i++) {
        if (asked[i] && await_page(&l->w[i], l->render_seq, &until)) {
            pages[np] = (const char *)rl_buf_rptr(&l->w[i].page);
            lens[np++] = rl_buf_len(&l->w[i].page);
        } else {
            l->render_timeouts++;
        }
    }
    rc = rls_prom_merge(pages, lens, np, sum_gauge, out);
    rl_buf_free(&own);
    if (rc != RL_OK)
        return rc;
    if ((rc = rls_prom_counter(out, "rl_loop_render_timeouts_total",
                               "Scrapes that left out a loop of --threads "
                               "which did not render its page in time.",
                               l->render_timeouts)) != RL_OK)
        return rc;
    rc = rl_buf_printf(out,
                       "# HELP rl_loop_connections Connections each loop of "
                       "--threads serves (its listeners' handed-off ones).\n"
                       "# TYPE rl_loop_connections gauge\n");
    for (i = 0; rc == RL_OK && i < l->n; i++) {
        unsigned open = 0;
        int k;
        for (k = 0; k < RLS_LISTENERS; k++)
            open += __atomic_load_n(&l->streams[k][i], __ATOMIC_RELAXED);
        rc = rl_buf_printf(out, "rl_loop_connections{loop=\"%u\"} %u\n", i,
                           open);
    }
    if (rc == RL_OK)
        rc = rl_buf_printf(out, "# HELP rl_loop_cpu_seconds_total CPU time "
                                "each loop's thread has used.\n"
                                "# TYPE rl_loop_cpu_seconds_total counter\n");
    for (i = 0; rc == RL_OK && i < l->n; i++) {
        clockid_t cid = CLOCK_THREAD_CPUTIME_ID; /* the first's: this one */
        struct timespec ts;
        if ((i > 0 && pthread_getcpuclockid(l->w[i - 1].thread, &cid) != 0) ||
            clock_gettime(cid, &ts) != 0)
            continue;
        rc = rl_buf_printf(out,
                           "rl_loop_cpu_seconds_total{loop=\"%u\"} "
                           "%llu.%06llu\n",
                           i, (unsigned long long)ts.tv_sec,
                           (unsigned long long)(ts.tv_nsec / 1000));
    }
    rc = rc != RL_OK
             ? rc
             : rl_buf_printf(out, "# HELP rl_loop_connections_handed_total "
                                  "Connections the first loop's listeners "
                                  "gave each loop of --threads.\n"
                                  "# TYPE rl_loop_connections_handed_total "
                                  "counter\n");
    for (i = 0; rc == RL_OK && i < l->n; i++)
        rc = rl_buf_printf(out,
                           "rl_loop_connections_handed_total{loop=\"%u\"} "
                           "%llu\n",
                           i, (unsigned long long)l->handed[i]);
    if (rc == RL_OK)
        rc = rl_buf_printf(out, "# HELP rl_loop_paused 1 while the loop takes "
                                "no new connection (an operator paused it).\n"
                                "# TYPE rl_loop_paused gauge\n");
    for (i = 0; rc == RL_OK && i < l->n; i++)
        rc = rl_buf_printf(out, "rl_loop_paused{loop=\"%u\"} %d\n", i,
                           l->paused[i]);
    return rc;
}

int rls_loops_info(rls_loops_t *l, unsigned i, rls_admin_loop_t *out)
{
    int k;

    if (i >= l->n)
        return RL_EINVAL;
    memset(out, 0, sizeof(*out));
    out->index = i;
    out->up = __atomic_load_n(&l->up[i], __ATOMIC_RELAXED);
    out->paused = l->paused[i];
    out->counted = 1;
    for (k = 0; k < RLS_LISTENERS; k++)
        out->connections +=
            __atomic_load_n(&l->streams[k][i], __ATOMIC_RELAXED);
    out->handed = l->handed[i];
    return RL_OK;
}

int rls_loops_pause(rls_loops_t *l, unsigned i, int on)
{
    if (i >= l->n)
        return RL_EINVAL;
    l->paused[i] = on != 0;
    return RL_OK;
}

static int hook_loop_info(void *arg, unsigned i, rls_admin_loop_t *out)
{
    return rls_loops_info(arg, i, out);
}

static int hook_loop_pause(void *arg, unsigned i, int on)
{
    return rls_loops_pause(arg, i, on);
}

static int hook_metrics(void *arg, rl_buf_t *out)
{
    return rls_loops_metrics(arg, out);
}

/* ---- the hand-off --------------------------------------------------- */

static void free_handle(uv_handle_t *h)
{
    free(h);
}

/* The room loop i has left on listener k: its share of the cap less its
 * connections (adopted or on their way). */
static long room_of(rls_loops_t *l, int k, unsigned i)
{
    return (long)l->cap[k][i] -
           (long)__atomic_load_n(&l->streams[k][i], __ATOMIC_RELAXED) -
           (long)__atomic_load_n(&l->pending[k][i], __ATOMIC_RELAXED);
}

/* A new connection on the first loop's listener: to a loop whose store
 * is up (unless none is: a loop whose Redis connection is not up yet, or
 * lost, would answer by the fail mode what another loop decides), the
 * one an operator has not paused, the one with the most room left under
 * its share of the cap (the fewest connections when the shares are
 * equal), ties taken in turn (every loop paused: as if none were); when
 * none has room,
 * that loop refuses it or makes room as the listener's rule says, and
 * the process holds the cap --max-connections names. Returns 0 when the
 * first loop takes it, 1 when it went elsewhere (or was lost: accept
 * failed). */
static int handoff(void *arg, uv_stream_t *listener)
{
    handoff_t *h = arg;
    rls_loops_t *l = h->l;
    unsigned start = l->next++ % l->n, best = 0, i, k;
    long room, most = 0;
    int fd, dup_fd, up, best_up = -1;
    int free_, best_free = -1; /* not paused */
    uv_tcp_t *t;
    msg_t *m;

    for (k = 0; k < l->n; k++) {
        i = (start + k) % l->n;
        if ((up = __atomic_load_n(&l->up[i], __ATOMIC_RELAXED)) < 0)
            continue; /* ended: its stop is over (the first never is) */
        room = room_of(l, h->listener, i);
        free_ = l->paused[i] == 0;
        if (up > best_up ||
            (up == best_up &&
             (free_ > best_free || (free_ == best_free && room > most)))) {
            best_up = up;
            best_free = free_;
            most = room;
            best = i;
        }
    }
    if (best == 0 || (m = msg_new(MSG_ADOPT)) == NULL) {
        l->handed[0]++;
        return 0;
    }
    /* The connection leaves this loop as a descriptor of its own: the
     * handle that accepted it closes here. */
    if ((t = malloc(sizeof(*t))) == NULL) {
        free(m);
        l->handed[0]++;
        return 0;
    }
    uv_tcp_init(l->first->loop, t);
    if (uv_accept(listener, (uv_stream_t *)t) != 0 ||
        uv_fileno((uv_handle_t *)t, &fd) != 0 ||
        (dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        uv_close((uv_handle_t *)t, free_handle);
        free(m);
        RLS_WARN("cannot hand a connection to another loop; closed", NULL);
        return 1;
    }
    uv_close((uv_handle_t *)t, free_handle);
    m->listener = h->listener;
    m->fd = dup_fd;
    l->handed[best]++;
    __atomic_add_fetch(&l->pending[h->listener][best], 1, __ATOMIC_RELAXED);
    post(&l->w[best - 1], m);
    return 1;
}

/* ---- start and join ------------------------------------------------- */

static void *worker_main(void *arg)
{
    worker_t *w = arg;

    rls_log_set_loop(w->index);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    /* No connection is handed to it any more. */
    __atomic_store_n(&w->all->up[w->index], -1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&w->mu);
    w->ended = 1;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Loop `loop`'s share of a cap of the process (0: none): cap over the
 * loops, the first loops one more where it does not divide. */
static uint64_t share(uint64_t cap, unsigned n, unsigned loop)
{
    return cap == 0 ? 0 : cap / n + (loop < cap % n ? 1 : 0);
}

/* Hooks listener i of server s into the hand-off: its set counts the
 * loop's streams and holds the loop's share of the connection cap, and
 * the first loop's offers its connections. (The input cap,
 * --max-partial-bytes, stays each loop's whole: shared, it would refuse
 * one client's request that fits.) */
static void hook_listener(rls_loops_t *l, rls_server_t *s, unsigned loop, int i)
{
    rls_streams_t *set;

    if (s->fe[i] == NULL || s->fe[i]->ops->adopt == NULL ||
        s->fe[i]->ops->streams == NULL ||
        (set = s->fe[i]->ops->streams(s->fe[i])) == NULL)
        return;
    set->opts.max_conns_all = set->opts.max_conns;
    set->opts.max_conns = (uint32_t)share(set->opts.max_conns, l->n, loop);
    l->cap[i][loop] = set->opts.max_conns;
    set->loop_streams = &l->streams[i][loop];
    if (loop == 0) {
        l->ho[i].l = l;
        l->ho[i].listener = i;
        set->handoff = handoff;
        set->handoff_arg = &l->ho[i];
    }
}

/* Frees what is left of the workers after their threads ended (or were
 * never started). */
static void free_workers(rls_loops_t *l, unsigned made)
{
    unsigned i;
    msg_t *m, *next;

    for (i = 0; i < made; i++) {
        worker_t *w = &l->w[i];
        if (w->thread_started)
            pthread_join(w->thread, NULL);
        if (w->srv_started && !w->thread_started) {
            /* Started, never run: stopped here, on this thread. */
            rls_server_stop(&w->srv);
            uv_run(&w->loop, UV_RUN_DEFAULT);
        }
        if (w->srv_started)
            rls_server_free(&w->srv);
        if (w->wake_made)
            uv_close((uv_handle_t *)&w->wake, NULL);
        if (w->loop_made) {
            uv_run(&w->loop, UV_RUN_DEFAULT);
            if (uv_loop_close(&w->loop) != 0)
                RLS_WARN("handles left open at a loop's exit", " loop=%u",
                         w->index);
        }
        for (m = w->head; m != NULL; m = next) {
            next = m->next;
            msg_free(m);
        }
        rl_buf_free(&w->page);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cond);
    }
    free(l->w);
    free(l);
}

int rls_loops_start(rls_loops_t **out, rls_server_t *first, unsigned n,
                    rls_loops_store_fn new_store, void *arg, char *err,
                    size_t errlen)
{
    rls_loops_t *l;
    unsigned i, made = 0;
    int k, rc = RL_OK;

    *out = NULL;
    if (n < 2 || n > RLS_LOOPS_MAX) {
        snprintf(err, errlen, "--threads: between 1 and %d", RLS_LOOPS_MAX);
        return RL_EINVAL;
    }
    if ((l = calloc(1, sizeof(*l))) == NULL ||
        (l->w = calloc(n - 1, sizeof(*l->w))) == NULL) {
        free(l);
        snprintf(err, errlen, "out of memory");
        return RL_ENOMEM;
    }
    l->first = first;
    l->n = n;
    l->generation = first->rt.generation;
    for (i = 0; i + 1 < n && rc == RL_OK; i++, made++) {
        worker_t *w = &l->w[i];
        rls_store_t *store;

        w->all = l;
        w->index = i + 1;
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cond, NULL);
        rl_buf_init(&w->page, (size_t)64 << 20);
        if (uv_loop_init(&w->loop) != 0) {
            snprintf(err, errlen, "cannot create event loop %u", i + 1);
            rc = RL_EIO;
            break;
        }
        w->loop_made = 1;
        if (uv_async_init(&w->loop, &w->wake, on_wake) != 0) {
            snprintf(err, errlen, "cannot create loop %u's wake-up", i + 1);
            rc = RL_EIO;
            break;
        }
        w->wake_made = 1;
        w->wake.data = w;
        /* The wake-up never keeps the loop alive: a loop ends when its
         * server has stopped. */
        uv_unref((uv_handle_t *)&w->wake);
        if ((store = new_store(&w->loop, arg)) == NULL) {
            snprintf(err, errlen, "out of memory");
            rc = RL_ENOMEM;
            break;
        }
        if ((rc = rls_server_start_loop(&w->srv, &w->loop, first, store, err,
                                        errlen)) != RL_OK) {
            store->v->close(store, NULL, NULL);
            break;
        }
        w->srv_started = 1;
    }
    if (rc != RL_OK) {
        free_workers(l, made + (made < n - 1 ? 1 : 0));
        return rc;
    }
    for (k = 0; k < RLS_LISTENERS; k++) {
        hook_listener(l, first, 0, k);
        for (i = 0; i + 1 < n; i++)
            hook_listener(l, &l->w[i].srv, i + 1, k);
    }
    /* Each loop says so from its ticks on; until its first, what its
     * store says now (the memory store is up at once, a Redis store once
     * connected). */
    first->store_up_out = &l->up[0];
    l->up[0] = first->store_up_last = first->store->v->up(first->store) != 0;
    for (i = 0; i + 1 < n; i++) {
        rls_server_t *ws = &l->w[i].srv;
        ws->store_up_out = &l->up[i + 1];
        l->up[i + 1] = ws->store_up_last = ws->store->v->up(ws->store) != 0;
    }
    first->hooks.stop = hook_stop;
    first->hooks.changed = hook_changed;
    first->hooks.envoy_conf = hook_envoy_conf;
    first->hooks.ready = hook_ready;
    first->hooks.tls = hook_tls;
    first->hooks.metrics = hook_metrics;
    first->hooks.loop_info = hook_loop_info;
    first->hooks.loop_pause = hook_loop_pause;
    first->hooks.arg = l;
    for (i = 0; i + 1 < n; i++) {
        worker_t *w = &l->w[i];
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            snprintf(err, errlen, "cannot start loop %u's thread", i + 1);
            memset(&first->hooks, 0, sizeof(first->hooks));
            for (k = 0; k < (int)i; k++) {
                msg_t *m = msg_new(MSG_STOP);
                if (m != NULL)
                    post(&l->w[k], m);
            }
            free_workers(l, n - 1);
            return RL_EIO;
        }
        w->thread_started = 1;
    }
    *out = l;
    return RL_OK;
}

void rls_loops_join(rls_loops_t *l)
{
    if (l != NULL)
        free_workers(l, l->n - 1);
}
