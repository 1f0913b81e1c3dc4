/* HTTP/1.x request heads, for the server's HTTP listeners (http_server.c).
 *
 * Debian 12 packages no maintained HTTP parser (llhttp is not packaged, and
 * the libhttp-parser-dev it does ship is the archived, unmaintained
 * nodejs/http-parser), and the listener needs very little: GET or HEAD of a
 * path, no bodies. So this is a small parser in the picohttpparser mould:
 * it does no I/O, keeps no state between calls, copies nothing (the request
 * points into the caller's buffer), and is strict: anything it does not
 * understand is an error, never a guess.
 *
 * Limits, checked before anything is reserved:
 *   - request line plus headers plus the blank line: RLS_HTTP_HEAD_MAX bytes;
 *   - at most RLS_HTTP_HEADERS_MAX header lines;
 *   - a request body only with a Content-Length (digits only, one line),
 *     reported in content_length for the listener to read or refuse (its
 *     own cap, rls_http_server_set_max_body); any Transfer-Encoding is
 *     refused (te set), since a body without a length could not be
 *     measured before it is read. */
#ifndef RLS_NET_HTTP_H
#define RLS_NET_HTTP_H

#include <stddef.h>
#include <stdint.h>

#define RLS_HTTP_HEAD_MAX 8192
#define RLS_HTTP_HEADERS_MAX 64
#define RLS_HTTP_METHOD_MAX 16

typedef struct rls_http_req_s {
    const char *method; /* points into the caller's buffer; not terminated */
    size_t method_len;
    const char *target; /* request-target as sent, query string included */
    size_t target_len;
    int minor;      /* 0 for HTTP/1.0, 1 for HTTP/1.1 */
    int keep_alive; /* the client lets the connection stay open */
    size_t nheaders;
    size_t head_len; /* bytes of the head, blank line included */
    const char *head; /* the buffer parsed: the head starts here */
    /* Bytes up to the end of the request line, 0 while it has not ended.
     * Also set when the parse fails, so that a head over the limit can be
     * told apart: 0 (the request line alone is too long: 414) or not (the
     * header lines are: 431). */
    size_t line_len;
    /* Content-Length (saturated at UINT64_MAX), 0 when absent. */
    uint64_t content_length;
    int te; /* the parse failed on a Transfer-Encoding header */
    /* The body, set by the listener before the route runs (rls_http_parse
     * leaves them NULL and 0): content_length bytes, valid until the
     * route returns. */
    const char *body;
    size_t body_len;
} rls_http_req_t;

/* Parses one request head at the start of buf[0, len).
 *
 * Returns RL_OK with *req filled (its pointers into buf) when a whole,
 * valid head is there; the request ends at buf + req->head_len and any bytes
 * after it belong to the next (pipelined) request. Returns RL_EAGAIN when
 * everything so far is a valid prefix of a head and more bytes are needed;
 * RL_EFULL when no head ends within RLS_HTTP_HEAD_MAX bytes; RL_EINVAL when
 * the bytes cannot be the start of a valid head (bad method, target or
 * version, a header line without a colon, a control byte, a bare CR, a
 * folded header, too many headers, a bad Content-Length, a
 * Transfer-Encoding). With
 * too many headers, req->nheaders is RLS_HTTP_HEADERS_MAX.
 *
 * Never reads buf[len] or beyond, and never more than RLS_HTTP_HEAD_MAX
 * bytes. Up to 4 empty lines before the request line are skipped, as RFC
 * 9112 section 2.2 asks of servers; they count in head_len. */
int rls_http_parse(const char *buf, size_t len, rls_http_req_t *req);

/* Finds the first header line named `lower` (a lower-case field name) in a
 * head rls_http_parse accepted. Returns 1 with *v, *vlen set to its value,
 * white space around it trimmed (pointing into the head), or 0 when the
 * head has no such line. */
int rls_http_header(const rls_http_req_t *req, const char *lower,
                    const char **v, size_t *vlen);

/* Every header line named `lower`, in order: *pos is NULL for the first
 * call and is moved past each line found. Returns 1 with *v, *vlen as
 * rls_http_header sets them, 0 when there is no more. */
int rls_http_header_next(const rls_http_req_t *req, const char *lower,
                         const char **pos, const char **v, size_t *vlen);

/* The path of a request-target: the bytes before any '?'. */
size_t rls_http_path_len(const rls_http_req_t *req);

#endif
