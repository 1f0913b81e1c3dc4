/* The admin listener: see admin_api.h. This file routes, checks tokens
 * and writes the answers that need no store; admin_usage.c reads and
 * resets, admin_config.c dumps the configuration. */
#include "admin/admin_api.h"

#include <stdio.h>
#include <string.h>

#include "admin/admin_config.h"
#include "admin/admin_top.h"
#include "admin/admin_usage.h"
#include "base/log.h"
#include "base/util.h"
#include "net/stream.h"
#include "rl_error.h"

static const char index_text[] =
    "GET  /v1/usage?rule=R&key=K                one caller's usage under a "
    "rule\n"
    "GET  /v1/usage?domain=D&entry=K=V[&...]    ... under an Envoy "
    "descriptor\n"
    "POST /v1/usage/reset?rule=R&key=K          clear it "
    "(&leases=1: leases too; a token)\n"
    "POST /v1/usage/reset?domain=D&entry=K=V    ... an Envoy descriptor's\n"
    "GET  /v1/config[?part=rules,switches,envoy] the configuration in "
    "force\n"
    "GET  /v1/loops                             the loops of --threads\n"
    "POST /v1/loops/pause?loop=N                loop N takes no new "
    "connection (a token)\n"
    "POST /v1/loops/resume?loop=N               and takes them again\n"
    "GET  /v1/top[?rule=R]                      the callers refused most "
    "(R: a rule, envoy:DOMAIN, (inline))\n"
    "(&format=text on /v1/usage and /v1/top: for people)\n";

static const char *reason_of(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 413:
        return "Content Too Large";
    case 503:
        return "Service Unavailable";
    default:
        return "Internal Server Error";
    }
}

/* Answers status with a->buf's JSON as the body. */
static void reply_json(rls_admin_api_t *a, rls_http_reply_t *r, int status)
{
    rls_http_reply_text(r, status, reason_of(status), "");
    r->ctype = "application/json";
    r->body = rl_buf_rptr(&a->buf);
    r->body_len = rl_buf_len(&a->buf);
}

/* An error answer: {"error": why, "status": N}, in a->buf. */
static void reply_error(rls_admin_api_t *a, rls_http_reply_t *r, int status,
                        const char *why)
{
    rl_buf_reset(&a->buf);
    if (RLS_BUF_LIT(&a->buf, "{\"error\":") != RL_OK ||
        rls_admin_json_str(&a->buf, why, strlen(why)) != RL_OK ||
        rl_buf_printf(&a->buf, ",\"status\":%d}\n", status) != RL_OK) {
        rls_http_reply_text(r, 500, "Internal Server Error",
                            "internal error\n");
        return;
    }
    reply_json(a, r, status);
}

/* A write's token: 0 with *name its name, or the status answered. */
static int authorize(rls_admin_api_t *a, const rls_http_req_t *q,
                     rls_http_reply_t *r, const char **name)
{
    const char *v = NULL;
    size_t vl = 0;
    int i;

    if (!a->has_tokens) {
        a->st.stats.forbidden++;
        reply_error(a, r, 403,
                    "writes are off: rl-server was started without "
                    "--admin-token-file");
        return 403;
    }
    if (!rls_http_header(q, "authorization", &v, &vl))
        v = NULL;
    if ((i = rls_admin_tokens_check(&a->tokens, v, vl)) == -2) {
        a->st.stats.unauthorized++;
        reply_error(a, r, 401,
                    "a write (and off loopback, any request) needs "
                    "Authorization: Bearer TOKEN, a token of "
                    "--admin-token-file");
        r->extra = "WWW-Authenticate: Bearer realm=\"rl-server admin\"\r\n";
        return 401;
    }
    if (i < 0) {
        a->st.stats.forbidden++;
        reply_error(a, r, 403, "the token is not one of --admin-token-file");
        return 403;
    }
    *name = a->tokens.t[i].name;
    return 0;
}

/* GET /v1/loops's answer, in a->buf: every loop's state. */
static int loops_json(rls_admin_api_t *a)
{
    const rls_admin_view_t *v = &a->st.v;
    rls_admin_loop_t lp;
    unsigned i;
    int rc = RLS_BUF_LIT(&a->buf, "{\"loops\":[");

    for (i = 0; rc == RL_OK && v->loop(v->arg, i, &lp) == RL_OK; i++) {
        rc = rl_buf_printf(&a->buf,
                           "%s{\"loop\":%u,\"store_up\":%s,\"ended\":%s,"
                           "\"paused\":%s",
                           i ? "," : "", i, lp.up > 0 ? "true" : "false",
                           lp.up < 0 ? "true" : "false",
                           lp.paused ? "true" : "false");
        if (rc == RL_OK && lp.counted)
            rc = rl_buf_printf(&a->buf, ",\"connections\":%u,\"handed\":%llu",
                               lp.connections, (unsigned long long)lp.handed);
        if (rc == RL_OK)
            rc = RLS_BUF_LIT(&a->buf, "}");
    }
    return rc == RL_OK ? rl_buf_printf(&a->buf, "],\"threads\":%u}\n", i) : rc;
}

/* POST /v1/loops/pause and /resume: tells the loop, logs who asked, and
 * answers as GET /v1/loops. */
static void loop_pause(rls_admin_api_t *a, const rls_admin_req_t *req,
                       const char *who, rls_http_reply_t *r)
{
    const rls_admin_view_t *v = &a->st.v;
    int on = req->route == RLS_ADMIN_LOOP_PAUSE, rc;
    char why[96];

    rc = v->loop_pause(v->arg, (unsigned)req->loop, on);
    if (rc == RL_EBUSY) {
        reply_error(a, r, 409,
                    "one loop (--threads 1): there is no other to take its "
                    "new connections");
        return;
    }
    if (rc != RL_OK) {
        snprintf(why, sizeof(why), "no loop %d (GET /v1/loops lists them)",
                 req->loop);
        reply_error(a, r, 404, why);
        return;
    }
    a->st.stats.pauses++;
    RLS_INFO(on ? "admin: loop paused: it takes no new connection"
                : "admin: loop resumed: it takes new connections",
             " by=%s paused_loop=%d", who, req->loop);
    rl_buf_reset(&a->buf);
    if (loops_json(a) != RL_OK) {
        reply_error(a, r, 500, "out of memory");
        return;
    }
    reply_json(a, r, 200);
}

static void on_request(void *arg, const rls_http_req_t *q, rls_http_reply_t *r)
{
    static _Thread_local rls_admin_req_t req;
    rls_admin_api_t *a = arg;
    const char *why = "", *allow = NULL, *name = "-";
    char who[160], peer[64];
    int status, rc;

    status = rls_admin_parse(q->method, q->method_len, q->target, q->target_len,
                             &req, &why, &allow);
    if (status != 0) {
        reply_error(a, r, status, why);
        r->extra = allow;
        return;
    }
    if ((req.write || a->reads_need_token) && authorize(a, q, r, &name) != 0)
        return;
    if (a->stopping) {
        reply_error(a, r, 503, "stopping");
        r->close = 1;
        return;
    }
    rls_http_conn_peer(r->conn, peer, sizeof(peer));
    snprintf(who, sizeof(who), "%s@%s", name, peer);
    switch (req.route) {
    case RLS_ADMIN_INDEX:
        rls_http_reply_text(r, 200, "OK", index_text);
        return;
    case RLS_ADMIN_LOOPS:
        rl_buf_reset(&a->buf);
        if (loops_json(a) != RL_OK) {
            reply_error(a, r, 500, "out of memory");
            return;
        }
        reply_json(a, r, 200);
        return;
    case RLS_ADMIN_LOOP_PAUSE:
    case RLS_ADMIN_LOOP_RESUME:
        loop_pause(a, &req, who, r);
        return;
    case RLS_ADMIN_CONFIG:
        rl_buf_reset(&a->buf);
        if ((rc = rls_admin_config(&a->st.v, req.parts, &a->buf)) == RL_EFULL) {
            a->st.stats.too_large++;
            reply_error(a, r, 413,
                        "the configuration is over the answer's cap (4 "
                        "MiB): ask for a part (?part=rules, switches or "
                        "envoy)");
            return;
        }
        if (rc != RL_OK) {
            reply_error(a, r, 500, "out of memory");
            return;
        }
        reply_json(a, r, 200);
        return;
    case RLS_ADMIN_TOP:
        if (a->st.v.top == NULL) {
            reply_error(a, r, 404,
                        "top offenders are off (rl-server --top-k 0)");
            return;
        }
        rl_buf_reset(&a->buf);
        if ((rc = rls_admin_top(&a->st.v, &req, &a->buf)) != RL_OK) {
            if (rc == RL_EFULL)
                a->st.stats.too_large++;
            reply_error(a, r, rc == RL_EFULL ? 413 : 500,
                        rc == RL_EFULL ? "over the answer's cap: ask for a rule"
                                       : "out of memory");
            return;
        }
        a->st.stats.top_reads++;
        rls_http_reply_text(r, 200, "OK", "");
        r->ctype = req.text || req.summary ? "text/plain; charset=utf-8"
                                           : "application/json";
        r->body = rl_buf_rptr(&a->buf);
        r->body_len = rl_buf_len(&a->buf);
        return;
    default:
        if ((status = rls_admin_usage_start(&a->st, &req, who, r->conn,
                                            &why)) != 0) {
            reply_error(a, r, status, why);
            return;
        }
        r->pending = 1;
    }
}

static const rls_frontend_ops_t admin_api_ops;

int rls_admin_api_start(rls_admin_api_t *a, const rls_admin_view_t *v,
                        uv_loop_t *loop, const char *host, int port,
                        const char *token_file, char *err, size_t errlen)
{
    int rc;

    memset(a, 0, sizeof(*a));
    a->fe.ops = &admin_api_ops;
    a->fe.host = host;
    a->st.v = *v;
    a->reads_need_token = !rls_admin_loopback(host);
    if (token_file != NULL) {
        if ((rc = rls_admin_tokens_load(token_file, &a->tokens, err, errlen)) !=
            RL_OK)
            return rc;
        a->has_tokens = 1;
    }
    if ((rc = rls_http_server_start(&a->http, loop, host, port, on_request,
                                    a)) != 0) {
        snprintf(err, errlen, "--admin: cannot listen on %s:%d: %s", host, port,
                 uv_strerror(rc));
        return rc == UV_ENOMEM ? RL_ENOMEM : RL_EADDR;
    }
    rls_http_server_set_tls(a->http, NULL, "admin");
    rl_buf_init(&a->buf, RLS_ADMIN_OUT_MAX);
    a->fe.port = rls_http_server_port(a->http);
    a->fe.plain = rls_http_server_plain_stats(a->http);
    return RL_OK;
}

/* ---- the front end -------------------------------------------------- */

static rls_admin_api_t *api_of(const rls_frontend_t *fe)
{
    return RLS_CONTAINER_OF(fe, rls_admin_api_t, fe);
}

static void on_http_empty(void *arg)
{
    rls_admin_api_t *a = arg;

    if (a->st.jobs == 0 && a->fe.on_empty != NULL)
        a->fe.on_empty(a->fe.arg);
}

/* The listener closes and every request under way is answered with
 * Connection: close; the store steps it started finish first (busy). */
static size_t fe_goaway(rls_frontend_t *fe)
{
    rls_admin_api_t *a = api_of(fe);

    a->stopping = 1;
    if (a->http == NULL)
        return 0;
    rls_http_server_on_empty(a->http, on_http_empty, a);
    rls_http_server_stop(a->http);
    return rls_http_server_live(a->http);
}

static int fe_busy(const rls_frontend_t *fe)
{
    const rls_admin_api_t *a = api_of(fe);

    return a->st.jobs > 0 || (a->http != NULL && rls_http_server_live(a->http));
}

static void fe_free(rls_frontend_t *fe)
{
    rls_admin_api_t *a = api_of(fe);

    rls_http_server_close(a->http);
    a->http = NULL;
    rl_buf_free(&a->buf);
}

static int fe_metrics(const rls_frontend_t *fe, rl_buf_t *out)
{
    const rls_admin_api_t *a = api_of(fe);
    const rls_stream_metric_t m[] = {
        RLS_METRIC_ONE("rl_admin_usage_reads_total", "counter",
                       "--admin usage reads answered.", a->st.stats.reads),
        RLS_METRIC_ONE("rl_admin_top_reads_total", "counter",
                       "--admin top-offenders reads answered.",
                       a->st.stats.top_reads),
        RLS_METRIC_ONE("rl_admin_resets_total", "counter",
                       "--admin resets of a caller's usage done.",
                       a->st.stats.resets),
        RLS_METRIC_ONE("rl_admin_loop_pauses_total", "counter",
                       "--admin pauses and resumes of a loop done.",
                       a->st.stats.pauses),
        RLS_METRIC_ONE("rl_admin_reset_keys_total", "counter",
                       "Store keys those resets cleared.", a->st.stats.cleared),
        RLS_METRIC_ONE("rl_admin_unauthorized_total", "counter",
                       "--admin writes without a Bearer token (401).",
                       a->st.stats.unauthorized),
        RLS_METRIC_ONE("rl_admin_forbidden_total", "counter",
                       "--admin writes with a wrong token, or with no "
                       "--admin-token-file (403).",
                       a->st.stats.forbidden),
        RLS_METRIC_ONE("rl_admin_too_large_total", "counter",
                       "--admin answers over the cap (413).",
                       a->st.stats.too_large),
        RLS_METRIC_ONE("rl_admin_store_errors_total", "counter",
                       "--admin reads and resets the store failed (503).",
                       a->st.stats.store_errors),
    };

    if (a->http == NULL)
        return RL_OK;
    return rls_stream_metrics(out, m, sizeof(m) / sizeof(m[0]));
}

/* No adopt: served by the first loop of --threads alone, like
 * --metrics. No drain: it answers while the load balancer notices
 * /healthz. */
static const rls_frontend_ops_t admin_api_ops = {
    .flag = "admin",
    .goaway = fe_goaway,
    .busy = fe_busy,
    .close_all = fe_free,
    .free = fe_free,
    .metrics = fe_metrics,
};

rls_frontend_t *rls_admin_api_frontend(rls_admin_api_t *a)
{
    return &a->fe;
}
