/* The HTTP/1.x request-head parser of the metrics listener (see http.h
 * for why it is ours and what it accepts).
 *
 * Grammar (RFC 9112), as far as a GET of /metrics needs it:
 *   head         = *4( CRLF ) request-line *( field-line ) CRLF
 *   request-line = method SP request-target SP "HTTP/1." ( "0" / "1" ) CRLF
 *   field-line   = token ":" OWS *( VCHAR / obs-text / SP / HTAB ) CRLF
 * where CRLF may also be a bare LF (RFC 9112 section 2.2 lets a server
 * accept one) but a CR must always be followed by LF. Everything is checked
 * byte by byte against the bound `n`, so no read ever passes the input or
 * the head limit. */
#include "net/http.h"

#include <string.h>

#include "rl_error.h"

/* RFC 9110 tchar: the bytes of a method or a header name. */
static int is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
        (c >= '0' && c <= '9'))
        return 1;
    return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* A request-target byte: visible ASCII. */
static int is_target(unsigned char c)
{
    return c > 0x20 && c < 0x7f;
}

/* A header value byte: visible ASCII, obs-text, SP or HTAB; never another
 * control byte (NUL, a bare CR, DEL...). */
static int is_value(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static int lower_eq(const char *a, size_t alen, const char *lower)
{
    size_t i, n = strlen(lower);

    if (alen != n)
        return 0;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)a[i];
        if (c >= 'A' && c <= 'Z')
            c = (unsigned char)(c - 'A' + 'a');
        if (c != (unsigned char)lower[i])
            return 0;
    }
    return 1;
}

/* Consumes a line end at b[*i]. Returns RL_OK, RL_EAGAIN when the input
 * stops first, or RL_EINVAL for anything else (a bare CR included). */
static int eol(const char *b, size_t n, size_t *i)
{
    if (*i >= n)
        return RL_EAGAIN;
    if (b[*i] == '\n') {
        (*i)++;
        return RL_OK;
    }
    if (b[*i] != '\r')
        return RL_EINVAL;
    if (*i + 1 >= n)
        return RL_EAGAIN;
    if (b[*i + 1] != '\n')
        return RL_EINVAL;
    *i += 2;
    return RL_OK;
}

/* What running out of input means: wait for more while under the limit,
 * else the head is too big. */
static int more(size_t len)
{
    return len >= RLS_HTTP_HEAD_MAX ? RL_EFULL : RL_EAGAIN;
}

typedef struct conn_flags_s {
    int close, keep_alive;
    int have_len; /* a Content-Length was seen */
    uint64_t len;
    int te;
} conn_flags_t;

/* Applies one header. Only the few that change how the listener must
 * behave are looked at; the rest are checked for syntax and ignored. */
static int header(const char *name, size_t nlen, const char *v, size_t vlen,
                  conn_flags_t *cf)
{
    size_t i, start, end, comma;

    if (lower_eq(name, nlen, "content-length")) {
        /* Digits only (a list such as "0, 0" is refused too), and only
         * once: two lengths could be read two ways (RFC 9112 6.3). */
        if (vlen == 0 || cf->have_len)
            return RL_EINVAL;
        cf->have_len = 1;
        for (i = 0; i < vlen; i++) {
            if (v[i] < '0' || v[i] > '9')
                return RL_EINVAL;
            cf->len = cf->len > (UINT64_MAX - 9) / 10
                          ? UINT64_MAX
                          : cf->len * 10 + (uint64_t)(v[i] - '0');
        }
        return RL_OK;
    }
    if (lower_eq(name, nlen, "transfer-encoding")) {
        cf->te = 1;
        return RL_EINVAL;
    }
    if (lower_eq(name, nlen, "connection")) {
        /* A comma-separated list of options. */
        for (start = 0; start <= vlen; start = comma + 1) {
            comma = start;
            while (comma < vlen && v[comma] != ',')
                comma++;
            end = comma;
            while (start < end && (v[start] == ' ' || v[start] == '\t'))
                start++;
            while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t'))
                end--;
            if (lower_eq(v + start, end - start, "close"))
                cf->close = 1;
            else if (lower_eq(v + start, end - start, "keep-alive"))
                cf->keep_alive = 1;
        }
    }
    return RL_OK;
}

int rls_http_parse(const char *buf, size_t len, rls_http_req_t *req)
{
    static const char ver[] = "HTTP/1.";
    const unsigned char *b = (const unsigned char *)buf;
    size_t n = len < RLS_HTTP_HEAD_MAX ? len : RLS_HTTP_HEAD_MAX;
    size_t i = 0, start, k, skipped;
    conn_flags_t cf = {0, 0, 0, 0, 0};
    int rc;

    memset(req, 0, sizeof(*req));
    req->head = buf;

    /* Stray line ends before the request line (left by a client after an
     * earlier request) are skipped, a few at most. */
    for (skipped = 0; skipped < 4 && i < n && (b[i] == '\r' || b[i] == '\n');
         skipped++) {
        if ((rc = eol(buf, n, &i)) != RL_OK)
            return rc == RL_EAGAIN ? more(len) : rc;
    }

    /* method SP */
    start = i;
    while (i < n && is_tchar(b[i])) {
        if (++i - start > RLS_HTTP_METHOD_MAX)
            return RL_EINVAL;
    }
    if (i >= n)
        return more(len);
    if (i == start || b[i] != ' ')
        return RL_EINVAL;
    req->method = buf + start;
    req->method_len = i - start;
    i++;

    /* request-target SP */
    start = i;
    while (i < n && is_target(b[i]))
        i++;
    if (i >= n)
        return more(len);
    if (i == start || b[i] != ' ')
        return RL_EINVAL;
    req->target = buf + start;
    req->target_len = i - start;
    i++;

    /* "HTTP/1.0" or "HTTP/1.1", then the line end */
    for (k = 0; k < sizeof(ver) - 1; k++, i++) {
        if (i >= n)
            return more(len);
        if (b[i] != (unsigned char)ver[k])
            return RL_EINVAL;
    }
    if (i >= n)
        return more(len);
    if (b[i] != '0' && b[i] != '1')
        return RL_EINVAL;
    req->minor = b[i] - '0';
    i++;
    if ((rc = eol(buf, n, &i)) != RL_OK)
        return rc == RL_EAGAIN ? more(len) : rc;
    req->line_len = i;

    /* field lines, up to the blank line */
    for (;;) {
        size_t name, nlen, vstart, vend;

        if (i >= n)
            return more(len);
        if (b[i] == '\r' || b[i] == '\n') {
            if ((rc = eol(buf, n, &i)) != RL_OK)
                return rc == RL_EAGAIN ? more(len) : rc;
            break;
        }
        /* A line starting with white space would continue the previous
         * one (obsolete line folding): refused, as RFC 9112 allows. */
        if (req->nheaders == RLS_HTTP_HEADERS_MAX || b[i] == ' ' ||
            b[i] == '\t')
            return RL_EINVAL;
        name = i;
        while (i < n && is_tchar(b[i]))
            i++;
        if (i >= n)
            return more(len);
        /* No colon, or white space before it (RFC 9112 5.1: reject). */
        if (i == name || b[i] != ':')
            return RL_EINVAL;
        nlen = i - name;
        i++;
        while (i < n && (b[i] == ' ' || b[i] == '\t'))
            i++;
        vstart = i;
        while (i < n && is_value(b[i]))
            i++;
        if (i >= n)
            return more(len);
        vend = i;
        while (vend > vstart && (b[vend - 1] == ' ' || b[vend - 1] == '\t'))
            vend--;
        if ((rc = eol(buf, n, &i)) != RL_OK)
            return rc == RL_EAGAIN ? more(len) : rc;
        if ((rc = header(buf + name, nlen, buf + vstart, vend - vstart, &cf)) !=
            RL_OK) {
            req->te = cf.te;
            return rc;
        }
        req->nheaders++;
    }

    /* HTTP/1.1 keeps the connection unless told otherwise; 1.0 closes it
     * unless asked to keep it. */
    req->keep_alive = cf.close ? 0 : req->minor == 1 ? 1 : cf.keep_alive;
    req->head_len = i;
    req->content_length = cf.len;
    return RL_OK;
}

int rls_http_header(const rls_http_req_t *req, const char *lower,
                    const char **v, size_t *vlen)
{
    const char *pos = NULL;

    return rls_http_header_next(req, lower, &pos, v, vlen);
}

int rls_http_header_next(const rls_http_req_t *req, const char *lower,
                         const char **pos, const char **v, size_t *vlen)
{
    const char *b = req->head, *end = req->head + req->head_len;
    const char *p = *pos != NULL ? *pos : b + req->line_len;
    const char *nl, *colon, *vs, *ve;

    /* The head was validated: every line ends in LF, every field line has
     * a colon right after its name, and the blank line comes last. */
    while (p < end && *p != '\r' && *p != '\n') {
        nl = memchr(p, '\n', (size_t)(end - p));
        if (nl == NULL)
            return 0;
        colon = memchr(p, ':', (size_t)(nl - p));
        if (colon != NULL && lower_eq(p, (size_t)(colon - p), lower)) {
            vs = colon + 1;
            ve = nl;
            if (ve > vs && ve[-1] == '\r')
                ve--;
            while (vs < ve && (*vs == ' ' || *vs == '\t'))
                vs++;
            while (ve > vs && (ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            *v = vs;
            *vlen = (size_t)(ve - vs);
            *pos = nl + 1;
            return 1;
        }
        p = nl + 1;
    }
    return 0;
}

size_t rls_http_path_len(const rls_http_req_t *req)
{
    const char *q = memchr(req->target, '?', req->target_len);

    return q == NULL ? req->target_len : (size_t)(q - req->target);
}
