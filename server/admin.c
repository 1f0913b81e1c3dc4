/* The --metrics listener: see admin.h. */
#include "admin.h"

#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "net/stream.h"
#include "rl_error.h"
#include "base/util.h"

static int path_is(const rls_http_req_t *q, size_t plen, const char *p)
{
    return plen == strlen(p) && memcmp(q->target, p, plen) == 0;
}

static int method_is(const rls_http_req_t *q, const char *name)
{
    return q->method_len == strlen(name) &&
           memcmp(q->method, name, q->method_len) == 0;
}

/* GET (or HEAD) /metrics and /healthz; another method on them is 405, any
 * other path 404. */
static void on_request(void *arg, const rls_http_req_t *q,
                       rls_http_reply_t *r)
{
    static _Thread_local char body[128];
    rls_admin_t *a = arg;
    size_t plen = rls_http_path_len(q);
    int rc;

    if (!path_is(q, plen, "/metrics") && !path_is(q, plen, "/healthz"))
        return; /* 404 */
    if (!method_is(q, "HEAD") && !method_is(q, "GET")) {
        rls_http_reply_text(r, 405, "Method Not Allowed",
                            "method not allowed\n");
        r->extra = "Allow: GET, HEAD\r\n";
        return;
    }
    if (path_is(q, plen, "/healthz")) {
        const char *why = "stopped";
        int ok = a->health(a->arg, &why);

        snprintf(body, sizeof(body), "%s\n", why);
        rls_http_reply_text(r, ok ? 200 : 503,
                            ok ? "OK" : "Service Unavailable", body);
        return;
    }
    rl_buf_reset(&a->buf);
    if ((rc = a->page(a->arg, &a->buf)) != RL_OK) {
        RLS_ERROR("cannot render /metrics", " err=\"%s\"", rl_strerror(rc));
        rls_http_reply_text(r, 500, "Internal Server Error",
                            "internal error\n");
        r->close = 1;
        return;
    }
    rls_http_reply_text(r, 200, "OK", "");
    r->ctype = "text/plain; version=0.0.4; charset=utf-8";
    r->body = rl_buf_rptr(&a->buf);
    r->body_len = rl_buf_len(&a->buf);
}

static const rls_frontend_ops_t admin_ops;

int rls_admin_start(rls_admin_t *a, uv_loop_t *loop, const char *host,
                    int port, int (*page)(void *arg, rl_buf_t *out),
                    int (*health)(void *arg, const char **why), void *arg,
                    char *err, size_t errlen)
{
    int rc;

    memset(a, 0, sizeof(*a));
    a->fe.ops = &admin_ops;
    a->fe.host = host;
    a->page = page;
    a->health = health;
    a->arg = arg;
    if ((rc = rls_http_server_start(&a->http, loop, host, port, on_request,
                                    a)) != 0) {
        snprintf(err, errlen, "--metrics: cannot listen on %s:%d: %s", host,
                 port, uv_strerror(rc));
        return rc == UV_ENOMEM ? RL_ENOMEM : RL_EADDR;
    }
    rl_buf_init(&a->buf, RLS_HTTP_OUT_MAX);
    a->fe.port = rls_http_server_port(a->http);
    return RL_OK;
}

/* ---- the front end -------------------------------------------------- */

static rls_admin_t *admin_of(const rls_frontend_t *fe)
{
    return RLS_CONTAINER_OF(fe, rls_admin_t, fe);
}

static void fe_free(rls_frontend_t *fe)
{
    rls_admin_t *a = admin_of(fe);

    rls_http_server_close(a->http);
    a->http = NULL;
    rl_buf_free(&a->buf);
}

static int fe_metrics(const rls_frontend_t *fe, rl_buf_t *out)
{
    const rls_admin_t *a = admin_of(fe);
    const rls_http_stats_t *h;

    if (a->http == NULL)
        return RL_OK;
    h = rls_http_server_stats(a->http);
    {
        const rls_stream_metric_t m[] = {
            RLS_METRIC_ONE("rl_http_connections_evicted_total", "counter",
                           "--metrics connections closed to make room for "
                           "a new one while the listener was full.",
                           h->evicted),
            RLS_METRIC_ONE("rl_http_connections_refused_total", "counter",
                           "--metrics connections answered 503: the "
                           "listener was full and none could give way.",
                           h->refused),
            RLS_METRIC_ONE("rl_http_connections_timed_out_total", "counter",
                           "--metrics connections closed at the header "
                           "deadline or the idle limit.",
                           h->timed_out),
        };

        return rls_stream_metrics(out, m, sizeof(m) / sizeof(m[0]));
    }
}

/* Nothing but free: the pages stay up through the stop (/healthz says
 * so), and a scrape is owed nothing the stop must wait for. */
static const rls_frontend_ops_t admin_ops = {
    .flag = "metrics",
    .free = fe_free,
    .metrics = fe_metrics,
};

rls_frontend_t *rls_admin_frontend(rls_admin_t *a)
{
    return &a->fe;
}
