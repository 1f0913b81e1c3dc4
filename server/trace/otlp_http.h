/* The OTLP/HTTP exporter's client (otlp_http.c): one POST at a time of an
 * ExportTraceServiceRequest to the collector, on libuv, with a deadline
 * over the whole exchange (resolve, connect, write, status line). A
 * connection per export ("Connection: close"): an export goes every few
 * seconds at most, so a kept connection would save little and need its
 * own life (idle close, the server's close, a half-read answer).
 *
 * Only http://: https is refused when the endpoint is parsed. */
#ifndef RLS_OTLP_HTTP_H
#define RLS_OTLP_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#define RLS_OTLP_HOST_MAX 255
#define RLS_OTLP_PATH_MAX 512
/* The default path of OTLP/HTTP traces, when the endpoint names none. */
#define RLS_OTLP_TRACES_PATH "/v1/traces"

/* Called once per post: the HTTP status (200..599) of the answer, or a
 * negative RL_E* code (RL_ETIMEDOUT, RL_EIO: unreachable or cut,
 * RL_ESHUTDOWN: closed first). */
typedef void (*rls_otlp_done_fn)(void *arg, int status);

typedef struct rls_otlp_http_s {
    uv_loop_t *loop;
    char host[RLS_OTLP_HOST_MAX + 1];
    char port[8];
    char path[RLS_OTLP_PATH_MAX + 1];
    uint64_t timeout_ms;
    uv_getaddrinfo_t gai;
    uv_tcp_t tcp;
    uv_connect_t conn;
    uv_write_t wr;
    uv_timer_t timer;
    uv_buf_t bufs[2]; /* the request's head, its body */
    char head[RLS_OTLP_HOST_MAX + RLS_OTLP_PATH_MAX + 256];
    char resp[256];  /* the answer's first bytes: its status line */
    char rbuf[1024]; /* read into, then copied to resp */
    size_t resp_len;
    rls_otlp_done_fn done;
    void *arg;
    uint64_t gen;      /* the post under way; callbacks of older ones idle */
    unsigned busy : 1; /* a post is under way */
    unsigned gai_on : 1;
    unsigned tcp_on : 1; /* tcp initialised, not yet closed */
    unsigned timer_on : 1;
} rls_otlp_http_t;

/* Parses url ("http://HOST[:PORT][/PATH]"; port 4318 and path /v1/traces
 * when not given; [IPV6] in brackets) into host, port and path. Returns 0
 * or RL_EINVAL with a one-line reason in err. Pure: for flags too. */
int rls_otlp_url_parse(const char *url, char *host, size_t hostlen, char *port,
                       size_t portlen, char *path, size_t pathlen, char *err,
                       size_t errlen);

/* Sets h up on loop for url. Returns 0, or RL_EINVAL (err), or RL_EIO. */
int rls_otlp_http_init(rls_otlp_http_t *h, uv_loop_t *loop, const char *url,
                       uint64_t timeout_ms, char *err, size_t errlen);

/* Posts body[0, len) (application/x-protobuf), which must stay valid until
 * done(arg, status) fires: once, never before this returns. Returns 0, or
 * RL_EBUSY while a post is under way (done not called). */
int rls_otlp_http_post(rls_otlp_http_t *h, const void *body, size_t len,
                       rls_otlp_done_fn done, void *arg);

/* Abandons a post under way (done(arg, RL_ESHUTDOWN) fires now) and closes
 * the handles; they finish closing with the loop's run, and h must stay
 * valid until then. Safe on a zeroed h. */
void rls_otlp_http_close(rls_otlp_http_t *h);

#endif
