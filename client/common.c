/* What both client APIs share: options and addresses, encoding a check,
 * filling a result, and backoff. */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_validate.h"
#include "rl_error.h"
#include "rl_frame.h"
#include "rl_parse.h"
#include "rl_window.h"
#include "rlc_int.h"

/* The public codes are the service's own codes under another prefix; keep
 * the two tables from drifting apart. */
#define RLC_SAME(name) _Static_assert(RLC_##name == RL_##name, #name)
RLC_SAME(OK);
RLC_SAME(EAGAIN);
RLC_SAME(ENOMEM);
RLC_SAME(EFULL);
RLC_SAME(EFRAMEFLAG);
RLC_SAME(EFRAMESIZE);
RLC_SAME(EDECODE);
RLC_SAME(EKEYEMPTY);
RLC_SAME(EKEYLONG);
RLC_SAME(EKEYNUL);
RLC_SAME(ENOLIMIT);
RLC_SAME(EWINDOW);
RLC_SAME(EWINDOWMAX);
RLC_SAME(ELIMITMAX);
RLC_SAME(ERULELONG);
RLC_SAME(ERULEBAD);
RLC_SAME(EBOTH);
RLC_SAME(ENORULE);
RLC_SAME(EINVAL);
RLC_SAME(ETIMEDOUT);
RLC_SAME(ECLOSED);
RLC_SAME(ECANCELED);
RLC_SAME(ESTORE);
RLC_SAME(EADDR);
RLC_SAME(EIO);
RLC_SAME(EBUSY);
RLC_SAME(ESHUTDOWN);
RLC_SAME(ELIMIT);
RLC_SAME(EINLINE);
RLC_SAME(ETLS);
RLC_SAME(ELEVELS);
RLC_SAME(ELEVELTWICE);
_Static_assert(RLC_LEVELS_MAX == RL_LEVELS_MAX, "levels max");
_Static_assert(RLC_KEY_MAX == RL_KEY_MAX, "key max");
_Static_assert(RLC_RULE_MAX == RL_RULE_MAX, "rule max");
_Static_assert(RLC_WINDOW_MAX_S == RL_WINDOW_MAX_S, "window max");
_Static_assert(RLC_CODE_OK == RL_CODE_OK && RLC_CODE_ERROR == RL_CODE_ERROR &&
                   RLC_CODE_OVER_LIMIT == RL_CODE_OVER_LIMIT,
               "codes");

_Static_assert(RLC_HANDLE_MAX == RL_HANDLE_MAX, "handle max");
_Static_assert(RLC_OP_CHECK == RL_OP_CHECK && RLC_OP_RESERVE == RL_OP_RESERVE &&
                   RLC_OP_SETTLE == RL_OP_SETTLE &&
                   RLC_OP_ACQUIRE == RL_OP_ACQUIRE &&
                   RLC_OP_RELEASE == RL_OP_RELEASE &&
                   RLC_OP_RENEW == RL_OP_RENEW,
               "ops");

const char *rlc_strerror(int code)
{
    /* The one code of the client's own, outside the service's table. */
    if (code == RLC_EHANDLE)
        return "handle is empty or longer than 512 bytes";
    return rl_strerror(code);
}

void rlc_options_init(rlc_options_t *o)
{
    if (o == NULL)
        return;
    memset(o, 0, sizeof(*o));
    o->connect_timeout_ms = 1000;
    o->request_timeout_ms = 1000;
    o->fail_mode = RLC_FAIL_CLOSED;
    o->reconnect_min_ms = 100;
    o->reconnect_max_ms = 5000;
    o->max_inflight = 16384;
    o->max_frame = RL_FRAME_MAX_DEFAULT;
}

int rlc_result_allowed(const rlc_result_t *r)
{
    return r != NULL && r->code == RLC_CODE_OK;
}

const char *rlc_code_name(int code)
{
    switch (code) {
    case RLC_CODE_OK:
        return "OK";
    case RLC_CODE_OVER_LIMIT:
        return "OVER_LIMIT";
    case RLC_CODE_ERROR:
        return "ERROR";
    default:
        return "UNKNOWN";
    }
}

/* Resolves one "HOST:PORT" and appends its addresses to cf. text is kept
 * (it points into cf->texts). */
static int add_server(rlc__conf_t *cf, const char *text)
{
    char host[300], port[8];
    struct addrinfo hints, *res = NULL, *ai;
    size_t n = 0;
    int rc, p;

    rc = rl_parse_hostport(text, host, sizeof(host), &p);
    if (rc != RL_OK)
        return rc;
    snprintf(port, sizeof(port), "%d", p);

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    if (getaddrinfo(host, port, &hints, &res) != 0 || res == NULL)
        return RLC_EADDR;
    for (ai = res; ai != NULL; ai = ai->ai_next)
        n++;
    rlc__addr_t *na = realloc(cf->addrs, (cf->naddr + n) * sizeof(*na));
    if (na == NULL) {
        freeaddrinfo(res);
        return RLC_ENOMEM;
    }
    cf->addrs = na;
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        rlc__addr_t *a = &cf->addrs[cf->naddr];
        if (ai->ai_addrlen > sizeof(a->sa))
            continue;
        memset(a, 0, sizeof(*a));
        a->text = text;
        memcpy(&a->sa, ai->ai_addr, ai->ai_addrlen);
        a->len = (socklen_t)ai->ai_addrlen;
        cf->naddr++;
    }
    freeaddrinfo(res);
    return RLC_OK;
}

int rlc__conf_init(rlc__conf_t *cf, const rlc_options_t *opts, char *why,
                   size_t whylen)
{
    char *p, *item;
    int rc;

    memset(cf, 0, sizeof(*cf));
    why[0] = '\0';
    if (opts == NULL || opts->servers == NULL)
        return RLC_EINVAL;
    cf->o = *opts;
    cf->o.servers = NULL;
    if (cf->o.connect_timeout_ms == 0 || cf->o.request_timeout_ms == 0 ||
        cf->o.reconnect_min_ms == 0 ||
        cf->o.reconnect_max_ms < cf->o.reconnect_min_ms ||
        cf->o.max_inflight == 0 || cf->o.max_inflight > (1u << 24) ||
        cf->o.max_frame < 64 ||
        (cf->o.fail_mode != RLC_FAIL_OPEN &&
         cf->o.fail_mode != RLC_FAIL_CLOSED))
        return RLC_EINVAL;

    /* The texts are split in place on commas and kept for rlc_server(). */
    cf->texts = strdup(opts->servers);
    if (cf->texts == NULL)
        return RLC_ENOMEM;
    for (p = cf->texts; p != NULL;) {
        item = p;
        p = strchr(p, ',');
        if (p != NULL)
            *p++ = '\0';
        while (*item == ' ')
            item++;
        size_t len = strlen(item);
        while (len > 0 && item[len - 1] == ' ')
            item[--len] = '\0';
        rc = add_server(cf, item);
        if (rc != RLC_OK)
            goto fail;
    }
    if (cf->naddr == 0) {
        rc = RLC_EADDR;
        goto fail;
    }
    rc = rlc__tls_new(opts, &cf->tls, why, whylen);
    if (rc != RLC_OK)
        goto fail;
    /* The caller's strings are not kept (the TLS files are loaded). */
    cf->o.tls_ca_file = cf->o.tls_cert_file = cf->o.tls_key_file = NULL;
    cf->o.tls_server_name = NULL;
    return RLC_OK;

fail:
    rlc__conf_free(cf);
    return rc;
}

void rlc__why_at(char *why, const char *addr, int status)
{
    char t[RLC__WHY_MAX];
    const char *what = why[0] != '\0' ? why : rlc_strerror(status);
    size_t a = strlen(addr), w = strlen(what), n = 0;

    /* "ADDR: what", cut to fit; plain copies, as both parts may be long. */
    if (a > RLC__WHY_MAX / 2)
        a = RLC__WHY_MAX / 2;
    memcpy(t, addr, a);
    n = a;
    memcpy(t + n, ": ", 2);
    n += 2;
    if (w > RLC__WHY_MAX - 1 - n)
        w = RLC__WHY_MAX - 1 - n;
    memcpy(t + n, what, w);
    n += w;
    t[n] = '\0';
    memcpy(why, t, n + 1);
}

void rlc__conf_free(rlc__conf_t *cf)
{
    rlc__tls_free(cf->tls);
    cf->tls = NULL;
    free(cf->addrs);
    free(cf->texts);
    cf->addrs = NULL;
    cf->texts = NULL;
    cf->naddr = 0;
}

/* rlc__encode with an op: CHECK, RESERVE and ACQUIRE carry the same
 * check. */
static int encode_op(rl_buf_t *out, const rlc_check_t *req, uint64_t id,
                     uint32_t op, uint32_t *window_s)
{
    rl_check_t c;
    int rc;

    /* Id 0 is the server's, for notices; an answer to it could not be
     * matched. Both callers number from 1. */
    if (req == NULL || id == 0)
        return RLC_EINVAL;
    memset(&c, 0, sizeof(c));
    c.id = id;
    c.key = req->key;
    c.key_len = req->key == NULL    ? 0
                : req->key_len != 0 ? req->key_len
                                    : strlen(req->key);
    c.cost = req->cost;
    c.limit = req->limit;
    c.window_s = req->window_s;
    if (req->nlevels > 0) {
        size_t i;
        if (req->levels == NULL)
            return RLC_EINVAL;
        /* One past the most is kept as a count: validation refuses it. */
        c.nlevels = req->nlevels > RL_LEVELS_MAX ? RL_LEVELS_MAX + 1
                                                 : (uint32_t)req->nlevels;
        for (i = 0; i < req->nlevels && i < RL_LEVELS_MAX; i++) {
            const rlc_level_t *l = &req->levels[i];
            rl_level_t *o = &c.levels[i];
            const char *nul;
            if (l->key == NULL || l->rule == NULL)
                return RLC_EINVAL;
            o->key = l->key;
            o->key_len = l->key_len != 0 ? l->key_len : strlen(l->key);
            nul = memchr(l->rule, '\0', RLC_RULE_MAX + 1);
            o->rule = l->rule;
            o->rule_len = nul ? (size_t)(nul - l->rule) : RLC_RULE_MAX + 1;
        }
    }
    if (req->rule != NULL) {
        /* A rule name can only be so long; do not scan past that. */
        const char *nul = memchr(req->rule, '\0', RLC_RULE_MAX + 1);
        c.rule = req->rule;
        c.rule_len = nul ? (size_t)(nul - req->rule) : RLC_RULE_MAX + 1;
    }
    rc = rl_check_validate(&c);
    if (rc != RL_OK)
        return rc;
    c.op = op;
    rc = rl_check_put(out, &c);
    if (rc != RL_OK)
        return rc;
    *window_s = c.window_s;
    return RLC_OK;
}

int rlc__encode(rl_buf_t *out, const rlc_check_t *req, uint64_t id,
                uint32_t *window_s)
{
    return encode_op(out, req, id, RL_OP_CHECK, window_s);
}

int rlc__op_has_handle(int op)
{
    return op == RLC_OP_SETTLE || op == RLC_OP_RELEASE || op == RLC_OP_RENEW;
}

int rlc__encode_x(rl_buf_t *out, const rlc_xop_t *req, uint64_t id,
                  uint32_t *window_s)
{
    rl_check_t c;
    int rc;

    if (req == NULL || id == 0 || req->op < RLC_OP_CHECK ||
        req->op > RLC_OP_RENEW)
        return RLC_EINVAL;
    if (!rlc__op_has_handle(req->op)) {
        return encode_op(out, &req->check, id, (uint32_t)req->op, window_s);
    }
    if (req->handle_len == 0 || req->handle_len > RLC_HANDLE_MAX)
        return RLC_EHANDLE;
    if (req->handle == NULL)
        return RLC_EINVAL;
    memset(&c, 0, sizeof(c));
    c.id = id;
    c.op = (uint32_t)req->op;
    c.handle = req->handle;
    c.handle_len = req->handle_len;
    c.actual = req->op == RLC_OP_SETTLE ? req->actual : 0;
    rc = rl_check_put(out, &c);
    if (rc != RL_OK)
        return rc;
    *window_s = 0;
    return RLC_OK;
}

void rlc__xresult_from(rlc_xresult_t *x, int op, const rl_result_t *r,
                       uint32_t window_s, uint64_t unix_ms)
{
    rlc__result_from(&x->r, r, window_s, unix_ms);
    x->op = op;
    x->failed_open = r->failed_open != 0;
    x->expires_at_ms = r->expires_at_ms;
    x->handle_len = 0;
    if (r->handle_len > RLC_HANDLE_MAX) {
        /* Bounded like everything from the network: a handle we could not
         * give back whole is no handle. */
        x->r.code = RLC_CODE_ERROR;
        snprintf(x->r.error, sizeof(x->r.error),
                 "server sent a handle of %zu bytes (over %d)", r->handle_len,
                 RLC_HANDLE_MAX);
        return;
    }
    if (r->handle_len)
        memcpy(x->handle, r->handle, r->handle_len);
    x->handle_len = r->handle_len;
}

void rlc__xresult_fail(rlc_xresult_t *x, int op, uint64_t id, int status,
                       int fail_mode, uint32_t window_s, uint64_t unix_ms)
{
    rlc__result_fail(&x->r, id, status,
                     rlc__op_has_handle(op) ? RLC_FAIL_CLOSED : fail_mode,
                     window_s, unix_ms);
    x->op = op;
    x->failed_open = 0;
    x->expires_at_ms = 0;
    x->handle_len = 0;
}

void rlc__result_from(rlc_result_t *res, const rl_result_t *r,
                      uint32_t window_s, uint64_t unix_ms)
{
    size_t n = r->error_len;

    res->code = r->code;
    res->status = RLC_OK;
    res->flags = 0;
    res->shadow_refused = r->shadow_refused != 0;
    /* The server knows which window decided; an older one says nothing. */
    res->window_s = r->window_s != 0 ? r->window_s : window_s;
    res->id = r->id;
    res->limit = r->limit;
    res->used = r->used;
    res->remaining = r->remaining;
    res->reset_after_ms = r->reset_after_ms;
    res->retry_after_ms = r->retry_after_ms;
    res->unix_ms = unix_ms;
    res->algorithm = r->algorithm;
    res->decided_at_ms = r->decided_at_ms;
    res->level = r->level;
    if (n >= RLC_ERROR_MAX)
        n = RLC_ERROR_MAX - 1;
    if (n)
        memcpy(res->error, r->error, n);
    res->error[n] = '\0';
}

void rlc__result_fail(rlc_result_t *res, uint64_t id, int status, int fail_mode,
                      uint32_t window_s, uint64_t unix_ms)
{
    /* Only a missing answer is decided by policy: a cancelled check was
     * abandoned by its caller and an invalid one was never a question. */
    int policy = status == RLC_ETIMEDOUT || status == RLC_ECLOSED ||
                 status == RLC_EIO || status == RLC_EFRAMEFLAG ||
                 status == RLC_EFRAMESIZE || status == RLC_EDECODE;

    memset(res, 0, offsetof(rlc_result_t, error));
    res->status = status;
    res->id = id;
    res->window_s = window_s;
    res->unix_ms = unix_ms;
    if (policy && fail_mode == RLC_FAIL_OPEN) {
        res->code = RLC_CODE_OK;
        res->flags = RLC_RESULT_FAILED_OPEN;
        snprintf(res->error, sizeof(res->error), "%s; failed open",
                 rlc_strerror(status));
    } else {
        res->code = RLC_CODE_ERROR;
        res->flags = policy ? RLC_RESULT_FAILED_CLOSED : 0;
        snprintf(res->error, sizeof(res->error), "%s%s", rlc_strerror(status),
                 policy ? "; failed closed" : "");
    }
}

uint32_t rlc__backoff(uint32_t cur, const rlc_options_t *o, unsigned *seed)
{
    uint64_t next = cur == 0 ? o->reconnect_min_ms : (uint64_t)cur * 2;

    if (next > o->reconnect_max_ms)
        next = o->reconnect_max_ms;
    if (next < o->reconnect_min_ms)
        next = o->reconnect_min_ms;
    /* Jitter keeps many clients that lost one server from returning to it
     * in lockstep. rand_r is enough: this is not about secrecy. */
    next += (uint64_t)rand_r(seed) % (next / 4 + 1);
    return next > UINT32_MAX ? UINT32_MAX : (uint32_t)next;
}
