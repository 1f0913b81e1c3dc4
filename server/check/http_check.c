/* The HTTP check endpoint (see check.h): a route on an HTTP listener of its
 * own that turns GET /check into a request to the batcher and answers when
 * the batcher does.
 *
 * Each connection carries one check at a time (http_server.c reads the
 * next request only once this one is answered), so its per-connection
 * context holds what the answer needs: the status to refuse with and the
 * rule's name for RateLimit-Policy. The batcher's owner is the connection
 * itself; http_server keeps its memory until the answer comes, even if the
 * client has gone. */
#include "check/http_check.h"

#include <stdio.h>
#include <string.h>

#include "core/decide.h"
#include "base/log.h"
#include "net/stream.h"
#include "rl_clock.h"
#include "rl_headers.h"
#include "rl_error.h"
#include "base/util.h"

/* What a connection's answer needs, in its http_server context. */
typedef struct check_ctx_s {
    rls_check_t *k;
    int deny_status;
    uint32_t op; /* RL_OP_* */
    size_t rule_len;
    char rule[RL_RULE_MAX];
    /* A check of levels: their rules, the deciding one's named in the
     * answer's headers as a check's rule is. */
    uint32_t nlevels;
    uint8_t lrule_len[RL_LEVELS_MAX];
    char lrule[RL_LEVELS_MAX][RL_RULE_MAX];
} check_ctx_t;

/* Fills *rep with the answer to decision r for a check of `rule` refused
 * with deny_status. The headers go to k->extra, valid until the next
 * answer. */
static void decision(rls_check_t *k, const rl_result_t *r, const char *rule,
                     size_t rule_len, int deny_status, rls_http_reply_t *rep)
{
    static _Thread_local char body[256];

    rl_hdr_t h[RL_HDR_MAX];
    int n, i;

    k->extra_len = 0;
    k->extra[0] = '\0';
    /* The headers librlc and Envoy answers carry too (lib/rl_headers.h). */
    n = rl_headers(r, rl_unix_ms(), rule, rule_len, RL_HDR_ALL, h, RL_HDR_MAX);
    for (i = 0; i < n; i++) {
        int w = snprintf(k->extra + k->extra_len,
                         sizeof(k->extra) - k->extra_len, "%s: %s\r\n",
                         h[i].name, h[i].value);
        if (w < 0 || (size_t)w >= sizeof(k->extra) - k->extra_len) {
            k->extra[k->extra_len] = '\0'; /* cannot happen: ample room */
            break;
        }
        k->extra_len += (size_t)w;
    }
    if (r->level > 0 && sizeof(k->extra) - k->extra_len > 40)
        /* A check of levels: the one that refused, or when allowed the
         * one with the least room left (1-based, as the query gave
         * them). */
        k->extra_len += (size_t)snprintf(k->extra + k->extra_len,
                                         sizeof(k->extra) - k->extra_len,
                                         "X-RateLimit-Level: %u\r\n", r->level);
    if (r->handle_len > 0 &&
        sizeof(k->extra) - k->extra_len > 2 * r->handle_len + 80) {
        /* Reservations and leases: what settle, release and renew take. */
        size_t j;
        k->extra_len += (size_t)snprintf(k->extra + k->extra_len,
                                         sizeof(k->extra) - k->extra_len,
                                         "X-RateLimit-Handle: ");
        for (j = 0; j < r->handle_len; j++)
            k->extra_len += (size_t)snprintf(k->extra + k->extra_len,
                                             sizeof(k->extra) - k->extra_len,
                                             "%02x", r->handle[j]);
        k->extra_len += (size_t)snprintf(k->extra + k->extra_len,
                                         sizeof(k->extra) - k->extra_len,
                                         "\r\nX-RateLimit-Expires-At: %llu\r\n",
                                         (unsigned long long)r->expires_at_ms);
    }
    switch (r->code) {
    case RL_CODE_OK:
        rls_http_reply_text(rep, 200, "OK",
                            r->shadow_refused ? "allowed (shadow mode: "
                                                "enforce would refuse)\n"
                                              : "allowed\n");
        break;
    case RL_CODE_OVER_LIMIT:
        if (deny_status == 403)
            rls_http_reply_text(rep, 403, "Forbidden", "over limit\n");
        else
            rls_http_reply_text(rep, 429, "Too Many Requests", "over limit\n");
        break;
    default:
        snprintf(body, sizeof(body), "%.*s\n",
                 r->error_len > 200 ? 200 : (int)r->error_len,
                 r->error != NULL ? r->error : "");
        rls_http_reply_text(rep, 503, "Service Unavailable", body);
        break;
    }
    rep->extra = k->extra;
}

/* The answer to a settle, release or renew: 200, 409 when the handle's
 * reservation was settled already or its lease is no longer held, 503
 * when the store could not answer (nothing changed: try again). */
static void handled(rls_check_t *k, uint32_t op, const rl_result_t *r,
                    rls_http_reply_t *rep)
{
    static _Thread_local char body[256];

    k->extra_len = 0;
    k->extra[0] = '\0';
    if (r->code == RL_CODE_OK) {
        if (op == RL_OP_RENEW)
            k->extra_len = (size_t)snprintf(
                k->extra, sizeof(k->extra), "X-RateLimit-Expires-At: %llu\r\n",
                (unsigned long long)r->expires_at_ms);
        rls_http_reply_text(rep, 200, "OK",
                            op == RL_OP_SETTLE    ? "settled\n"
                            : op == RL_OP_RELEASE ? "released\n"
                                                  : "renewed\n");
        rep->extra = k->extra;
        return;
    }
    snprintf(body, sizeof(body), "%.*s\n",
             r->error_len > 200 ? 200 : (int)r->error_len,
             r->error != NULL ? r->error : "");
    if (r->error_len >= 6 && memcmp(r->error, "store ", 6) == 0)
        rls_http_reply_text(rep, 503, "Service Unavailable", body);
    else
        rls_http_reply_text(rep, 409, "Conflict", body);
}

/* The batcher's answer to one check: owner is the connection. */
static void on_decided(void *owner, const rl_result_t *r)
{
    rls_http_conn_t *c = owner;
    check_ctx_t *x = rls_http_conn_ctx(c);
    rls_http_reply_t rep;

    x->k->pending--;
    if (x->op == RL_OP_SETTLE || x->op == RL_OP_RELEASE || x->op == RL_OP_RENEW)
        handled(x->k, x->op, r, &rep);
    else if (r->level > 0 && r->level <= x->nlevels)
        decision(x->k, r, x->lrule[r->level - 1], x->lrule_len[r->level - 1],
                 x->deny_status, &rep);
    else
        decision(x->k, r, x->rule, x->rule_len, x->deny_status, &rep);
    rls_http_answer(c, &rep);
}

static int method_is(const rls_http_req_t *q, const char *name)
{
    return q->method_len == strlen(name) &&
           memcmp(q->method, name, q->method_len) == 0;
}

static const char *const reason_names[RLS_CHECK_REASONS] = {
    [RLS_CHECK_BAD_QUERY] = "bad_query",
    [RLS_CHECK_NO_RULE] = "no_rule",
    [RLS_CHECK_NO_KEY] = "no_key",
    [RLS_CHECK_BAD_KEY] = "bad_key",
    [RLS_CHECK_UNKNOWN_RULE] = "unknown_rule"};

const char *rls_check_reason_name(int reason)
{
    return reason >= 0 && reason < RLS_CHECK_REASONS ? reason_names[reason]
                                                     : "other";
}

/* A check refused before a decision. Most are the proxy's configuration
 * (no key header set, a rule that does not exist), which is none of the
 * client's business: the client gets a plain 400, and the operator the
 * reason in the log (at most a line a second) and in the metrics. */
static void bad(rls_check_t *k, rls_http_reply_t *r, int reason,
                const char *why)
{
    static _Thread_local char body[RL_RULE_MAX + 96];
    uint64_t now = uv_now(k->loop);

    k->rejected[reason]++;
    if (now >= k->log_next_ms) {
        RLS_WARN("check refused before a decision",
                 " reason=%s detail=\"%s\" not_logged=%llu",
                 reason_names[reason], why,
                 (unsigned long long)k->log_suppressed);
        k->log_next_ms = now + 1000;
        k->log_suppressed = 0;
    } else {
        k->log_suppressed++;
    }
    if (k->opts.error_details)
        snprintf(body, sizeof(body), "%s\n", why);
    else
        snprintf(body, sizeof(body), "bad request\n");
    rls_http_reply_text(r, 400, "Bad Request", body);
}

static void on_request(void *arg, const rls_http_req_t *q, rls_http_reply_t *r)
{
    rls_check_t *k = arg;
    size_t plen = rls_http_path_len(q);
    rls_check_query_t cq;
    check_ctx_t *x;
    rls_ask_t a;
    rls_traceparent_t tp;
    const char *why = NULL;
    uint32_t i;

    uint32_t path_op = RL_OP_CHECK;

    if (plen == 7 && memcmp(q->target, "/settle", 7) == 0)
        path_op = RL_OP_SETTLE;
    else if (plen == 8 && memcmp(q->target, "/release", 8) == 0)
        path_op = RL_OP_RELEASE;
    else if (plen == 6 && memcmp(q->target, "/renew", 6) == 0)
        path_op = RL_OP_RENEW;
    else if (plen != 6 || memcmp(q->target, "/check", 6) != 0) {
        rls_http_reply_text(r, 404, "Not Found",
                            "not found: this listener serves GET /check "
                            "and POST /settle, /release, /renew\n");
        return;
    }
    if (path_op == RL_OP_CHECK && !method_is(q, "GET") &&
        !method_is(q, "HEAD")) {
        rls_http_reply_text(r, 405, "Method Not Allowed",
                            "method not allowed\n");
        r->extra = "Allow: GET, HEAD\r\n";
        return;
    }
    if (path_op != RL_OP_CHECK && !method_is(q, "POST")) {
        rls_http_reply_text(r, 405, "Method Not Allowed",
                            "method not allowed\n");
        r->extra = "Allow: POST\r\n";
        return;
    }
    if (q->target_len > RLS_CHECK_TARGET_MAX) {
        rls_http_reply_text(r, 414, "URI Too Long", "target over 4 KiB\n");
        return;
    }
    /* The query is read straight into the ask's check. */
    memset(&a, 0, sizeof(a));
    a.q.id = 1;
    if (rls_check_query(q, &k->opts, path_op, &a.q, &cq, &why) != RL_OK) {
        if (path_op != RL_OP_CHECK) {
            /* The backend's request, not the proxy's configuration: the
             * reason always goes back. */
            static char body[320];
            k->rejected[RLS_CHECK_BAD_QUERY]++;
            snprintf(body, sizeof(body), "%s\n", why);
            rls_http_reply_text(r, 400, "Bad Request", body);
            return;
        }
        bad(k, r, cq.reason, why);
        return;
    }
    /* --trace-otlp: the caller's traceparent, as the proxy passed it on
     * (read only during rls_decide, which copies the ids). */
    if (k->decider->tracer != NULL) {
        const char *pos = NULL, *v;
        size_t vlen;
        unsigned seen = 0;
        memset(&tp, 0, sizeof(tp));
        while (rls_http_header_next(q, "traceparent", &pos, &v, &vlen))
            rls_traceparent_take(&tp, &seen, v, vlen);
        a.parent = &tp;
    }
    x = rls_http_conn_ctx(r->conn);
    x->k = k;
    x->op = a.q.op;
    x->deny_status = cq.deny_status;
    memcpy(x->rule, a.q.rule, a.q.rule_len);
    x->rule_len = a.q.rule_len;
    x->nlevels = a.q.nlevels;
    for (i = 0; i < a.q.nlevels; i++) {
        /* rls_check_query bounds each rule to RL_RULE_MAX bytes. */
        memcpy(x->lrule[i], a.q.levels[i].rule, a.q.levels[i].rule_len);
        x->lrule_len[i] = (uint8_t)a.q.levels[i].rule_len;
    }
    /* Pending from here: the answer may come before rls_decide returns
     * (a kill switch, a refusal known without the store). */
    k->pending++;
    r->pending = 1;
    switch (rls_decide(k->decider, &a, on_decided, r->conn, &why)) {
    case RL_OK:
        return;
    case RL_ENOMEM:
        k->pending--;
        r->pending = 0;
        rls_http_reply_text(r, 503, "Service Unavailable", "out of memory\n");
        return;
    case RL_ENORULE:
        k->pending--;
        r->pending = 0;
        bad(k, r, RLS_CHECK_UNKNOWN_RULE, why);
        return;
    default:
        k->pending--;
        r->pending = 0;
        if (a.q.op == RL_OP_SETTLE || a.q.op == RL_OP_RELEASE ||
            a.q.op == RL_OP_RENEW) {
            /* The backend's handle, not the proxy's configuration: the
             * reason always goes back. */
            static char body[320];
            k->rejected[RLS_CHECK_BAD_QUERY]++;
            snprintf(body, sizeof(body), "%s\n", why);
            rls_http_reply_text(r, 400, "Bad Request", body);
        } else {
            bad(k, r, RLS_CHECK_BAD_KEY, why);
        }
    }
}

static const rls_frontend_ops_t check_ops;

int rls_check_start(rls_check_t *k, uv_loop_t *loop, const char *host, int port,
                    rls_decider_t *d, const rls_check_opts_t *o, char *err,
                    size_t errlen)
{
    int rc;

    memset(k, 0, sizeof(*k));
    k->fe.ops = &check_ops;
    k->fe.host = host;
    k->loop = loop;
    k->decider = d;
    k->opts = *o;
    rc = rls_http_server_start(&k->http, loop, host, port, on_request, k);
    if (rc != 0) {
        snprintf(err, errlen, "--http: cannot listen on %s:%d: %s", host,
                 port, uv_strerror(rc));
        return rc == UV_ENOMEM ? RL_ENOMEM : RL_EADDR;
    }
    rls_http_server_set_limits(k->http, RLS_CHECK_IDLE_MS, RLS_CHECK_CONNS_MAX);
    rls_http_server_set_ctx_size(k->http, sizeof(check_ctx_t));
    k->fe.port = port >= 0 ? rls_http_server_port(k->http) : 0;
    return RL_OK;
}

const rls_http_stats_t *rls_check_stats(const rls_check_t *k)
{
    return k->http != NULL ? rls_http_server_stats(k->http) : NULL;
}

/* ---- the front end -------------------------------------------------- */

static rls_check_t *check_of(const rls_frontend_t *fe)
{
    return RLS_CONTAINER_OF(fe, rls_check_t, fe);
}

static void on_http_empty(void *arg)
{
    rls_check_t *k = arg;

    if (k->fe.on_empty != NULL)
        k->fe.on_empty(k->fe.arg);
}

/* The listener closes, connections between checks close, and a check
 * under way is answered with Connection: close. */
static size_t fe_goaway(rls_frontend_t *fe)
{
    rls_check_t *k = check_of(fe);

    if (k->http == NULL)
        return 0;
    rls_http_server_on_empty(k->http, on_http_empty, k);
    rls_http_server_stop(k->http);
    return rls_http_server_live(k->http);
}

static int fe_busy(const rls_frontend_t *fe)
{
    const rls_check_t *k = check_of(fe);

    return k->pending > 0 ||
           (k->http != NULL && rls_http_server_live(k->http) > 0);
}

/* Closes the listener and every connection; answers owed are dropped when
 * they come. */
static void fe_close(rls_frontend_t *fe)
{
    rls_check_t *k = check_of(fe);

    rls_http_server_close(k->http);
    k->http = NULL;
}

/* Responses by status, the 400s by reason, and its connections. */
static int fe_metrics(const rls_frontend_t *fe, rl_buf_t *out)
{
    /* By rls_http_status_slot: the statuses listed, then the rest. */
    static const char *const codes[RLS_HTTP_NSTATUS] = {
#define CODE_NAME(code) #code,
        RLS_HTTP_STATUSES(CODE_NAME)
#undef CODE_NAME
        "other"};
    const rls_check_t *k = check_of(fe);
    const rls_http_stats_t *h = rls_check_stats(k);

    if (h == NULL)
        return RL_OK;
    {
        const rls_stream_metric_t m[] = {
            {"rl_check_requests_total", "counter",
             "--http responses by status: 200 allowed, 429 or 403 refused, "
             "400/404/405/414/431 bad requests, 503 store failed with "
             "--fail-closed; code=\"other\" for the rest.",
             h->status, "code", codes, 0, RLS_HTTP_NSTATUS},
            {"rl_check_rejected_total", "counter",
             "--http checks answered 400 before a decision, by reason: "
             "bad_query, no_rule, no_key (no key= and no usable key "
             "header), bad_key, unknown_rule. Most are the proxy's "
             "configuration; the log has the detail.",
             k->rejected, "reason", reason_names, 0, RLS_CHECK_REASONS},
            RLS_METRIC_ONE("rl_check_connections_accepted_total", "counter",
                           "--http connections accepted.", h->accepted),
            RLS_METRIC_ONE("rl_check_connections_evicted_total", "counter",
                           "--http connections closed to make room for a "
                           "new one while the listener was full.",
                           h->evicted),
            RLS_METRIC_ONE("rl_check_connections_refused_total", "counter",
                           "--http connections answered 503: the listener "
                           "was full and none could give way.",
                           h->refused),
            RLS_METRIC_ONE("rl_check_connections_timed_out_total", "counter",
                           "--http connections closed at the header "
                           "deadline or the idle limit.",
                           h->timed_out),
        };

        return rls_stream_metrics(out, m, sizeof(m) / sizeof(m[0]));
    }
}

static void fe_adopt(rls_frontend_t *fe, int fd)
{
    rls_http_server_adopt(check_of(fe)->http, fd);
}

static rls_streams_t *fe_streams(rls_frontend_t *fe)
{
    return rls_http_server_streams(check_of(fe)->http);
}

/* No resume or flush: an answer is written when it comes. No drain: it
 * keeps answering while the load balancer notices /healthz. */
static const rls_frontend_ops_t check_ops = {
    .flag = "http",
    .goaway = fe_goaway,
    .busy = fe_busy,
    .close_all = fe_close,
    .free = fe_close,
    .metrics = fe_metrics,
    .adopt = fe_adopt,
    .streams = fe_streams,
};

rls_frontend_t *rls_check_frontend(rls_check_t *k)
{
    return &k->fe;
}
