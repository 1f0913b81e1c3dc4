/* envoy-ratelimit's debug listener: see debug_http.h. */
#include "envoy/debug_http.h"

#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "envoy/dump.h"
#include "rl_error.h"
#include "base/util.h"

static int path_is(const rls_http_req_t *q, size_t plen, const char *p)
{
    return plen == strlen(p) && memcmp(q->target, p, plen) == 0;
}

static void on_request(void *arg, const rls_http_req_t *q,
                       rls_http_reply_t *r)
{
    rls_dhttp_t *d = arg;
    size_t plen = rls_http_path_len(q);
    int rc;

    if (path_is(q, plen, "/")) {
        rls_http_reply_text(r, 200, "OK",
                            "/rlconfig: print out the currently loaded "
                            "configuration for debugging\n");
        return;
    }
    if (!path_is(q, plen, "/rlconfig")) {
        rls_http_reply_text(r, 404, "Not Found", "404 page not found\n");
        return;
    }
    rl_buf_reset(&d->buf);
    /* The page must fit the HTTP server's response cap, with room. */
    if ((rc = rls_envoy_dump(d->ctx->conf, &d->buf,
                             RLS_HTTP_OUT_MAX - 65536)) != RL_OK) {
        RLS_ERROR("cannot render /rlconfig", " err=\"%s\"", rl_strerror(rc));
        rls_http_reply_text(r, 500, "Internal Server Error",
                            "internal error\n");
        return;
    }
    rls_http_reply_text(r, 200, "OK", "");
    r->body = rl_buf_rptr(&d->buf);
    r->body_len = rl_buf_len(&d->buf);
}

static const rls_frontend_ops_t dhttp_ops;

int rls_dhttp_start(rls_dhttp_t *d, uv_loop_t *loop, const char *host,
                    int port, rls_envoy_ctx_t *ctx, char *err, size_t errlen)
{
    int rc;

    memset(d, 0, sizeof(*d));
    d->fe.ops = &dhttp_ops;
    d->fe.host = host;
    d->ctx = ctx;
    if ((rc = rls_http_server_start(&d->http, loop, host, port, on_request,
                                    d)) != 0) {
        snprintf(err, errlen, "--debug-http: cannot listen on %s:%d: %s",
                 host, port, uv_strerror(rc));
        return rc == UV_ENOMEM ? RL_ENOMEM : RL_EADDR;
    }
    rls_http_server_set_tls(d->http, NULL, "debug-http");
    rl_buf_init(&d->buf, RLS_HTTP_OUT_MAX);
    d->fe.port = rls_http_server_port(d->http);
    d->fe.plain = rls_http_server_plain_stats(d->http);
    return RL_OK;
}

static void fe_free(rls_frontend_t *fe)
{
    rls_dhttp_t *d = RLS_CONTAINER_OF(fe, rls_dhttp_t, fe);

    rls_http_server_close(d->http);
    d->http = NULL;
    rl_buf_free(&d->buf);
}

/* Nothing but free: it serves through the stop, as --metrics does, and
 * owes nobody anything the stop must wait for. */
static const rls_frontend_ops_t dhttp_ops = {
    .flag = "debug-http",
    .free = fe_free,
};

rls_frontend_t *rls_dhttp_frontend(rls_dhttp_t *d)
{
    return &d->fe;
}
