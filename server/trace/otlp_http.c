/* The OTLP/HTTP exporter's client; see otlp_http.h. */
#include "trace/otlp_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rl_parse.h"

static int url_fail(char *err, size_t errlen, const char *what, const char *url)
{
    snprintf(err, errlen, "%s, got '%s'", what, url);
    return RL_EINVAL;
}

int rls_otlp_url_parse(const char *url, char *host, size_t hostlen, char *port,
                       size_t portlen, char *path, size_t pathlen, char *err,
                       size_t errlen)
{
    const char *p = url, *h, *he, *slash;
    size_t n;

    if (strncmp(p, "https://", 8) == 0)
        return url_fail(err, errlen,
                        "expected an http:// endpoint (OTLP over https is "
                        "not supported: put a collector beside it)",
                        url);
    if (strncmp(p, "http://", 7) != 0)
        return url_fail(err, errlen, "expected http://HOST[:PORT][/PATH]", url);
    p += 7;
    slash = strchr(p, '/');
    he = slash != NULL ? slash : p + strlen(p);
    h = p;
    if (*h == '[') {
        const char *rb = memchr(h, ']', (size_t)(he - h));
        if (rb == NULL)
            return url_fail(err, errlen, "an IPv6 host needs its ']'", url);
        n = (size_t)(rb - h - 1);
        if (n == 0 || n >= hostlen)
            return url_fail(err, errlen, "expected a host", url);
        memcpy(host, h + 1, n);
        host[n] = '\0';
        p = rb + 1;
    } else {
        const char *colon = memchr(h, ':', (size_t)(he - h));
        const char *end = colon != NULL ? colon : he;
        n = (size_t)(end - h);
        if (n == 0 || n >= hostlen)
            return url_fail(err, errlen, "expected a host", url);
        memcpy(host, h, n);
        host[n] = '\0';
        p = end;
    }
    if (p < he && *p == ':') {
        uint64_t v;
        n = (size_t)(he - p - 1);
        if (rl_parse_u64n(p + 1, n, 1, 65535, &v) != 0)
            return url_fail(err, errlen, "expected a port in 1..65535", url);
        snprintf(port, portlen, "%llu", (unsigned long long)v);
    } else if (p != he) {
        return url_fail(err, errlen, "expected http://HOST[:PORT][/PATH]", url);
    } else {
        snprintf(port, portlen, "4318");
    }
    if (slash == NULL || slash[1] == '\0') {
        snprintf(path, pathlen, "%s", RLS_OTLP_TRACES_PATH);
    } else {
        if (strlen(slash) >= pathlen || strpbrk(slash, " \r\n\t") != NULL)
            return url_fail(err, errlen,
                            "expected a path without spaces "
                            "(up to 512 bytes)",
                            url);
        snprintf(path, pathlen, "%s", slash);
    }
    return RL_OK;
}

int rls_otlp_http_init(rls_otlp_http_t *h, uv_loop_t *loop, const char *url,
                       uint64_t timeout_ms, char *err, size_t errlen)
{
    int rc;

    memset(h, 0, sizeof(*h));
    if ((rc = rls_otlp_url_parse(url, h->host, sizeof(h->host), h->port,
                                 sizeof(h->port), h->path, sizeof(h->path), err,
                                 errlen)) != RL_OK)
        return rc;
    h->loop = loop;
    h->timeout_ms = timeout_ms;
    if ((rc = uv_timer_init(loop, &h->timer)) != 0) {
        snprintf(err, errlen, "trace exporter: %s", uv_strerror(rc));
        return RL_EIO;
    }
    h->timer.data = h;
    h->timer_on = 1;
    return RL_OK;
}

static void on_tcp_closed(uv_handle_t *hd)
{
    rls_otlp_http_t *h = hd->data;

    h->tcp_on = 0;
}

/* Ends the post under way with status: done fires, the connection goes. */
static void finish(rls_otlp_http_t *h, int status)
{
    rls_otlp_done_fn done = h->done;

    if (!h->busy)
        return;
    h->busy = 0;
    if (h->timer_on)
        uv_timer_stop(&h->timer);
    if (h->tcp_on && !uv_is_closing((uv_handle_t *)&h->tcp))
        uv_close((uv_handle_t *)&h->tcp, on_tcp_closed);
    if (h->gai_on)
        (void)uv_cancel((uv_req_t *)&h->gai); /* else its callback idles */
    h->done = NULL;
    done(h->arg, status);
}

static void on_timer(uv_timer_t *t)
{
    rls_otlp_http_t *h = t->data;

    finish(h, RL_ETIMEDOUT);
}

static void on_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *b)
{
    rls_otlp_http_t *h = hd->data;

    (void)suggested;
    *b = uv_buf_init(h->rbuf, sizeof(h->rbuf));
}

/* The status of "HTTP/1.x NNN ..." once its line is whole: 100..599, 0
 * while incomplete, -1 when it is not one. */
static int status_of(const char *s, size_t n)
{
    const char *eol = memchr(s, '\n', n);
    int code;

    if (eol == NULL)
        return n >= sizeof(((rls_otlp_http_t *)0)->resp) - 1 ? -1 : 0;
    if (eol - s < 12 || memcmp(s, "HTTP/1.", 7) != 0 || s[8] != ' ' ||
        s[9] < '1' || s[9] > '5' || s[10] < '0' || s[10] > '9' || s[11] < '0' ||
        s[11] > '9')
        return -1;
    code = (s[9] - '0') * 100 + (s[10] - '0') * 10 + (s[11] - '0');
    return code;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    rls_otlp_http_t *h = st->data;
    int code;

    if (!h->busy)
        return;
    if (nread < 0) {
        finish(h, RL_EIO); /* closed before a status line */
        return;
    }
    if (nread == 0)
        return;
    {
        size_t room = sizeof(h->resp) - 1 - h->resp_len;
        size_t k = (size_t)nread < room ? (size_t)nread : room;
        memcpy(h->resp + h->resp_len, b->base, k);
        h->resp_len += k;
    }
    code = status_of(h->resp, h->resp_len);
    if (code < 0)
        finish(h, RL_EIO);
    else if (code >= 200) /* a 1xx is not the answer: read on */
        finish(h, code);
    else if (code > 0) {
        /* 100 Continue and the like: drop that line, wait for the next. */
        const char *eol = memchr(h->resp, '\n', h->resp_len);
        size_t used = (size_t)(eol - h->resp) + 1;
        memmove(h->resp, h->resp + used, h->resp_len - used);
        h->resp_len -= used;
    }
}

static void on_write(uv_write_t *w, int status)
{
    rls_otlp_http_t *h = w->data;

    if (status < 0)
        finish(h, RL_EIO);
}

static void on_connect(uv_connect_t *c, int status)
{
    rls_otlp_http_t *h = c->data;

    if (!h->busy)
        return;
    if (status < 0 ||
        uv_read_start((uv_stream_t *)&h->tcp, on_alloc, on_read) != 0 ||
        uv_write(&h->wr, (uv_stream_t *)&h->tcp, h->bufs, 2, on_write) != 0)
        finish(h, RL_EIO);
}

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res)
{
    rls_otlp_http_t *h = g->data;

    h->gai_on = 0;
    if (!h->busy) {
        uv_freeaddrinfo(res);
        return;
    }
    if (status < 0 || res == NULL || uv_tcp_init(h->loop, &h->tcp) != 0) {
        uv_freeaddrinfo(res);
        finish(h, RL_EIO);
        return;
    }
    h->tcp.data = h;
    h->tcp_on = 1;
    h->conn.data = h;
    if (uv_tcp_connect(&h->conn, &h->tcp, res->ai_addr, on_connect) != 0) {
        uv_freeaddrinfo(res);
        finish(h, RL_EIO);
        return;
    }
    uv_freeaddrinfo(res);
}

int rls_otlp_http_post(rls_otlp_http_t *h, const void *body, size_t len,
                       rls_otlp_done_fn done, void *arg)
{
    struct addrinfo hints;
    int n, bracket = strchr(h->host, ':') != NULL;

    if (h->busy || h->gai_on || h->tcp_on || !h->timer_on)
        return RL_EBUSY;
    n = snprintf(h->head, sizeof(h->head),
                 "POST %s HTTP/1.1\r\n"
                 "Host: %s%s%s:%s\r\n"
                 "Content-Type: application/x-protobuf\r\n"
                 "Content-Length: %zu\r\n"
                 "Connection: close\r\n"
                 "User-Agent: rl-server\r\n\r\n",
                 h->path, bracket ? "[" : "", h->host, bracket ? "]" : "",
                 h->port, len);
    h->bufs[0] = uv_buf_init(h->head, (unsigned)n);
    h->bufs[1] = uv_buf_init((char *)(uintptr_t)body, (unsigned)len);
    h->resp_len = 0;
    h->done = done;
    h->arg = arg;
    h->busy = 1;
    h->gen++;
    h->wr.data = h;
    h->gai.data = h;
    uv_timer_start(&h->timer, on_timer, h->timeout_ms, 0);
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (uv_getaddrinfo(h->loop, &h->gai, on_resolved, h->host, h->port,
                       &hints) != 0)
        uv_timer_start(&h->timer, on_timer, 0, 0); /* fails from the loop */
    else
        h->gai_on = 1;
    return RL_OK;
}

void rls_otlp_http_close(rls_otlp_http_t *h)
{
    if (h->loop == NULL)
        return;
    finish(h, RL_ESHUTDOWN);
    if (h->timer_on) {
        h->timer_on = 0;
        uv_close((uv_handle_t *)&h->timer, NULL);
    }
}
