/* envoy-ratelimit's HTTP listener: see envoy_http.h.
 *
 * A /json call lives in its connection's memory (the HTTP server's
 * per-connection context, kept while an answer is owed): the JSON is
 * turned into the RateLimitRequest's wire form and started as a gRPC
 * call is (rls_envoy_start); when its last descriptor is answered the
 * response is encoded as the gRPC one is (rls_envoy_encode), turned into
 * JSON, the call freed, and the answer given. */
#include "envoy/http.h"

#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "envoy/json.h"
#include "net/stream.h"
#include "rl_error.h"
#include "base/util.h"

/* One connection's call. */
typedef struct ecall_s {
    rls_envoy_call_t call;
    rls_ehttp_t *e;
    rls_http_conn_t *conn;
    int err;         /* a gRPC status from the start, answered once the
                        descriptors already queued have come back */
    const char *why; /* ... and its reason (static) */
} ecall_t;

static int path_is(const rls_http_req_t *q, size_t plen, const char *p)
{
    return plen == strlen(p) && memcmp(q->target, p, plen) == 0;
}

/* 400 with the reason, as envoy-ratelimit answers a bad body or a
 * request its service refuses ("Bad Request"), the reason after it. */
static void bad_request(rls_ehttp_t *e, rls_http_reply_t *r, const char *why)
{
    snprintf(e->text, sizeof(e->text), "Bad Request: %s\n", why);
    rls_http_reply_text(r, 400, "Bad Request", e->text);
}

/* The answer of a call that ended well (start's status OK), into *r. */
static void reply_call(rls_ehttp_t *e, const rls_envoy_call_t *call,
                       rls_http_reply_t *r)
{
    int code, rc;

    rl_buf_reset(&e->wire);
    rl_buf_reset(&e->json);
    if ((rc = rls_envoy_encode(call, &e->wire)) != RL_OK ||
        (rc = rls_envoy_json_response(rl_buf_rptr(&e->wire) + 5,
                                      rl_buf_len(&e->wire) - 5, &e->json,
                                      &code)) != RL_OK) {
        RLS_WARN("envoy-http: cannot encode a /json answer", " err=\"%s\"",
                 rl_strerror(rc));
        e->stats.json_failed++;
        rls_http_reply_text(r, 500, "Internal Server Error",
                            "Internal Server Error\n");
        return;
    }
    /* envoy-ratelimit's statuses: 429 for OVER_LIMIT, 500 for an
     * UNKNOWN overall code (never given here), else 200. */
    if (code == 2) {
        rls_http_reply_text(r, 429, "Too Many Requests", "");
        e->stats.json_over++;
    } else if (code == 0) {
        rls_http_reply_text(r, 500, "Internal Server Error", "");
        e->stats.json_failed++;
    } else {
        rls_http_reply_text(r, 200, "OK", "");
        e->stats.json_ok++;
    }
    r->ctype = "application/json";
    r->body = rl_buf_rptr(&e->json);
    r->body_len = rl_buf_len(&e->json);
}

/* A start that failed: the status into *r. */
static void reply_error(rls_ehttp_t *e, int status, const char *why,
                        rls_http_reply_t *r)
{
    if (status == RLS_GRPC_RESOURCE_EXHAUSTED) {
        e->stats.json_failed++;
        rls_http_reply_text(r, 503, "Service Unavailable", "out of memory\n");
        return;
    }
    e->stats.json_refused++;
    bad_request(e, r, why != NULL ? why : "refused");
}

/* The last descriptor of a pending call was answered. */
static void on_call_done(rls_envoy_call_t *call)
{
    ecall_t *ec = RLS_CONTAINER_OF(call, ecall_t, call);
    rls_http_reply_t r;

    if (ec->err != 0)
        reply_error(ec->e, ec->err, ec->why, &r);
    else
        reply_call(ec->e, call, &r);
    rls_envoy_call_free(call);
    rls_http_answer(ec->conn, &r);
}

static void json_call(rls_ehttp_t *e, const rls_http_req_t *q,
                      rls_http_reply_t *r)
{
    ecall_t *ec = rls_http_conn_ctx(r->conn);
    const char *why = NULL;
    char err[256];
    int rc;

    rl_buf_reset(&e->wire);
    if ((rc = rls_envoy_json_request(q->body != NULL ? q->body : "",
                                     q->body_len, &e->wire, err,
                                     sizeof(err))) != RL_OK) {
        if (rc != RL_EINVAL) {
            e->stats.json_failed++;
            rls_http_reply_text(r, 503, "Service Unavailable",
                                "out of memory\n");
            return;
        }
        e->stats.json_bad_json++;
        RLS_DEBUG("envoy-http: bad /json body", " err=\"%s\"", err);
        bad_request(e, r, err);
        return;
    }
    memset(ec, 0, sizeof(*ec));
    ec->e = e;
    ec->conn = r->conn;
    ec->call.done = on_call_done;
    /* --trace-otlp: the POST's traceparent, as --grpc's metadata. */
    if (e->ctx->decider->tracer != NULL) {
        const char *pos = NULL, *v;
        size_t vlen;
        unsigned seen = 0;
        while (rls_http_header_next(q, "traceparent", &pos, &v, &vlen))
            rls_traceparent_take(&ec->call.parent, &seen, v, vlen);
    }
    rc = rls_envoy_start(&ec->call, e->ctx, rl_buf_rptr(&e->wire),
                         rl_buf_len(&e->wire), &why);
    if (ec->call.pending > 0) {
        /* Answered from on_call_done, the error too: what was queued
         * must come back before the call can go. */
        ec->err = rc;
        ec->why = why;
        r->pending = 1;
        return;
    }
    if (rc != RLS_GRPC_OK)
        reply_error(e, rc, why, r);
    else
        reply_call(e, &ec->call, r);
    rls_envoy_call_free(&ec->call);
}

/* /healthcheck and /json, any method, as the reference's router routes
 * them; another path is its router's 404. */
static void on_request(void *arg, const rls_http_req_t *q,
                       rls_http_reply_t *r)
{
    rls_ehttp_t *e = arg;
    size_t plen = rls_http_path_len(q);

    if (path_is(q, plen, "/healthcheck")) {
        const char *why = "stopped";
        if (e->takes_work(e->arg, &why)) {
            e->stats.health_ok++;
            rls_http_reply_text(r, 200, "OK", "OK");
        } else {
            e->stats.health_fail++;
            RLS_DEBUG("envoy-http: /healthcheck 500", " why=\"%s\"", why);
            rls_http_reply_text(r, 500, "Internal Server Error", "");
        }
        return;
    }
    if (path_is(q, plen, "/json")) {
        json_call(e, q, r);
        return;
    }
    rls_http_reply_text(r, 404, "Not Found", "404 page not found\n");
}

static const rls_frontend_ops_t ehttp_ops;

int rls_ehttp_start(rls_ehttp_t *e, uv_loop_t *loop, const char *host,
                    int port, rls_envoy_ctx_t *ctx, size_t max_body,
                    int (*takes_work)(void *arg, const char **why), void *arg,
                    char *err, size_t errlen)
{
    int rc;

    memset(e, 0, sizeof(*e));
    e->fe.ops = &ehttp_ops;
    e->fe.host = host;
    e->ctx = ctx;
    e->takes_work = takes_work;
    e->arg = arg;
    if ((rc = rls_http_server_start(&e->http, loop, host, port, on_request,
                                    e)) != 0) {
        snprintf(err, errlen, "--envoy-http: cannot listen on %s:%d: %s",
                 host, port, uv_strerror(rc));
        return rc == UV_ENOMEM ? RL_ENOMEM : RL_EADDR;
    }
    rls_http_server_set_limits(e->http, RLS_EHTTP_IDLE_MS, RLS_EHTTP_CONNS_MAX);
    rls_http_server_set_ctx_size(e->http, sizeof(ecall_t));
    rls_http_server_set_max_body(e->http, max_body);
    rls_http_server_set_tls(e->http, NULL, "envoy-http");
    /* A response holds every descriptor's status: about 150 bytes each
     * in JSON, 1,024 of them at most, with headers and metadata. */
    rl_buf_init(&e->wire, RLS_HTTP_OUT_MAX);
    rl_buf_init(&e->json, RLS_HTTP_OUT_MAX);
    e->fe.port = rls_http_server_port(e->http);
    e->fe.plain = rls_http_server_plain_stats(e->http);
    return RL_OK;
}

/* ---- the front end -------------------------------------------------- */

static rls_ehttp_t *ehttp_of(const rls_frontend_t *fe)
{
    return RLS_CONTAINER_OF(fe, rls_ehttp_t, fe);
}

static void on_http_empty(void *arg)
{
    rls_ehttp_t *e = arg;

    if (e->fe.on_empty != NULL)
        e->fe.on_empty(e->fe.arg);
}

/* The listener closes, connections between requests close, a request
 * under way is answered with Connection: close. */
static size_t fe_goaway(rls_frontend_t *fe)
{
    rls_ehttp_t *e = ehttp_of(fe);

    if (e->http == NULL)
        return 0;
    rls_http_server_on_empty(e->http, on_http_empty, e);
    rls_http_server_stop(e->http);
    return rls_http_server_live(e->http);
}

static int fe_busy(const rls_frontend_t *fe)
{
    const rls_ehttp_t *e = ehttp_of(fe);

    return e->http != NULL && rls_http_server_live(e->http) > 0;
}

/* Closes the listener and every connection; answers owed are dropped
 * when they come (the buffers stay until free). */
static void fe_close_all(rls_frontend_t *fe)
{
    rls_ehttp_t *e = ehttp_of(fe);

    rls_http_server_close(e->http);
    e->http = NULL;
}

static void fe_free(rls_frontend_t *fe)
{
    rls_ehttp_t *e = ehttp_of(fe);

    fe_close_all(fe);
    rl_buf_free(&e->wire);
    rl_buf_free(&e->json);
}

static int fe_metrics(const rls_frontend_t *fe, rl_buf_t *out)
{
    static const char *const results[] = {
        "path=\"/json\",result=\"ok\"",
        "path=\"/json\",result=\"over_limit\"",
        "path=\"/json\",result=\"bad_json\"",
        "path=\"/json\",result=\"refused\"",
        "path=\"/json\",result=\"failed\"",
        "path=\"/healthcheck\",result=\"healthy\"",
        "path=\"/healthcheck\",result=\"unhealthy\""};
    const rls_ehttp_t *e = ehttp_of(fe);
    const uint64_t v[] = {e->stats.json_ok,       e->stats.json_over,
                          e->stats.json_bad_json, e->stats.json_refused,
                          e->stats.json_failed,   e->stats.health_ok,
                          e->stats.health_fail};
    const rls_stream_metric_t m = {
        "rl_envoy_http_requests_total", "counter",
        "--envoy-http requests: /json by result (ok 200, over_limit 429, "
        "bad_json and refused 400, failed 5xx), /healthcheck by answer "
        "(healthy 200, unhealthy 500).",
        v, NULL, results, 0, sizeof(v) / sizeof(v[0])};

    return rls_stream_metrics(out, &m, 1);
}

/* No resume or flush: an answer is written when it comes. No drain: it
 * keeps answering (/healthcheck says 500) while the load balancer
 * notices. */
static const rls_frontend_ops_t ehttp_ops = {
    .flag = "envoy-http",
    .goaway = fe_goaway,
    .busy = fe_busy,
    .close_all = fe_close_all,
    .free = fe_free,
    .metrics = fe_metrics,
};

rls_frontend_t *rls_ehttp_frontend(rls_ehttp_t *e)
{
    return &e->fe;
}
