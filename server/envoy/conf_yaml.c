/* envoy-ratelimit's descriptor files read into the tree (conf.c); see
 * conf.h.
 *
 * Read with libyaml's event parser, as rules.c reads the rules file, and
 * for the same reasons: a hostile file cannot cost memory beyond its size
 * (nesting past ENVOY_DEPTH_MAX, aliases and files over
 * RLS_RULES_FILE_MAX are refused), and every error keeps its line. */
#include "envoy/conf.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/conf_int.h"
#include "envoy/pbvalue.h"
#include "policy/file_in.h"
#include "rl_headers.h"
#include "policy/yaml_in.h"
#include "rl_error.h"
#include "rl_parse.h"
#include "rl_hash.h"
#include "base/util.h"

/* YAML nesting: each descriptor level is a sequence and a mapping, so
 * this allows about 30 levels of descriptors. */
#define ENVOY_DEPTH_MAX 64
#define ENVOY_NODES_MAX (1u << 20)

/* An error at line (0: none) of the file being read. */
#define DIAG(b, line, ...) rls_diag_add((b)->d, (b)->file, line, __VA_ARGS__)
/* What loads but is not done in full: said, and the file still loads. */
#define WARN(b, line, ...)                                                     \
    rls_diag_add(&(b)->c->warnings, (b)->file, line, __VA_ARGS__)

/* A copy that lives as long as the configuration. */
static const char *arena_copy(rls_envoy_builder_t *b, const char *s,
                              size_t len)
{
    const char *out = rls_arena_copy(&b->c->arena, s, len);

    if (out == NULL)
        b->nomem = 1;
    return out;
}

/* ------------------------------------------------------------------------ */
/* Events */

typedef struct yp_s {
    rls_envoy_builder_t *b;
    rls_yaml_in_t in;
    int *lines; /* per node, for duplicate errors */
    size_t lcap;
} yp_t;

static int key_is(const char *k, size_t kl, const char *want)
{
    return kl == strlen(want) && memcmp(k, want, kl) == 0;
}

/* Reads the next key of the mapping being walked into kbuf (cut to 31
 * bytes) and advances to its value. Returns 1, 0 at the mapping's end,
 * or RL_EINVAL. A key that is not a plain value (a YAML complex key) is
 * reported and skipped with its value. */
static int next_key(yp_t *y, char kbuf[32])
{
    const char *k;
    size_t kl;
    int rc = rls_yaml_in_next_key(&y->in, "a key must be a single value", NULL);

    if (rc <= 0)
        return rc;
    k = rls_yaml_in_str(&y->in, &kl);
    snprintf(kbuf, 32, "%.*s", (int)(kl < 31 ? kl : 31), k);
    if (rls_yaml_in_next(&y->in) != RL_OK)
        return RL_EINVAL;
    return 1;
}

/* A scalar value as a bool (YAML 1.1 words envoy-ratelimit's parser also
 * takes) into *out. Returns 0, or RL_EINVAL for any other word. */
static int parse_bool(const char *s, size_t n, int *out)
{
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "on"};
    static const char *const no[] = {"false", "False", "FALSE", "no", "off"};
    size_t i;

    for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (key_is(s, n, yes[i]) || key_is(s, n, no[i])) {
            *out = key_is(s, n, yes[i]);
            return RL_OK;
        }
    }
    return RL_EINVAL;
}

static int ieq(const char *s, size_t n, const char *w)
{
    size_t i;

    if (n != strlen(w))
        return 0;
    for (i = 0; i < n; i++)
        if (tolower((unsigned char)s[i]) != w[i])
            return 0;
    return 1;
}

/* Expects a scalar value for `what`; says so when it is not. */
static int want_scalar(yp_t *y, const char *what)
{
    if (rls_yaml_in_is_scalar(&y->in))
        return 1;
    DIAG(y->b, rls_yaml_in_line(&y->in), "'%s' must be a single value", what);
    rls_yaml_in_skip(&y->in);
    return 0;
}

/* The rest of a rate_limit mapping that says unlimited: true (unit and
 * requests_per_unit are meaningless then, and allowed). */
static int skip_rest(yp_t *y)
{
    for (;;) {
        if (rls_yaml_in_next(&y->in) != RL_OK)
            return RL_EINVAL;
        if (y->in.ev.type == YAML_MAPPING_END_EVENT)
            return RL_OK;
        /* the key (any shape), then its value */
        if (rls_yaml_in_skip(&y->in) != RL_OK ||
            rls_yaml_in_next(&y->in) != RL_OK ||
            rls_yaml_in_skip(&y->in) != RL_OK)
            return RL_EINVAL;
    }
}

/* The bounds of a rate_limit's algorithm (rls_limit_check), said at its
 * line, and what follows from them (a gcra's burst and interval).
 * requests_per_unit 0 refuses everything, whatever the algorithm, except
 * a gcra's, which is a rate and cannot be 0. */
static void check_limit(rls_envoy_builder_t *b, int line, rls_limit_t *lim)
{
    rls_limit_t l = *lim;
    const char *why;

    if (l.limit == 0 && l.algo == RL_ALGO_GCRA) {
        DIAG(b, line,
             "rate_limit (gcra): requests_per_unit must be at least "
             "1 (0 refuses everything: leave out the algorithm)");
        return;
    }
    if (l.limit == 0)
        l.limit = 1; /* what is checked of it then is the options */
    if (rls_limit_check(&l, &why) != RL_OK) {
        DIAG(b, line, "rate_limit (%s): %s", rls_algo_name(l.algo), why);
        return;
    }
    lim->burst = l.burst;
    lim->t_us = l.t_us;
}

/* Every key envoy-ratelimit's files know: it takes each of them at any
 * level and ignores the ones it does not read there. */
static int ref_key(const char *k)
{
    static const char *const keys[] = {"domain",
                                       "key",
                                       "value",
                                       "descriptors",
                                       "rate_limit",
                                       "unit",
                                       "requests_per_unit",
                                       "unlimited",
                                       "shadow_mode",
                                       "quota_mode",
                                       "name",
                                       "replaces",
                                       "detailed_metric",
                                       "value_to_metric",
                                       "share_threshold",
                                       "metadata"};
    size_t i;

    for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (strcmp(k, keys[i]) == 0)
            return 1;
    return 0;
}

/* replaces: a list of {name: NAME}; the current event is the value. The
 * names go to x->replaces, one after the other. */
static int parse_replaces(yp_t *y, rls_envoy_node_t *x)
{
    rls_envoy_builder_t *b = y->b;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    uint32_t n = 0;
    int rc = RL_OK;

    if (y->in.ev.type != YAML_SEQUENCE_START_EVENT) {
        DIAG(b, rls_yaml_in_line(&y->in),
             "'replaces' must be a list of {name: NAME}");
        return rls_yaml_in_skip(&y->in);
    }
    for (;;) {
        int have_name = 0, line;
        if (rls_yaml_in_next(&y->in) != RL_OK) {
            rc = RL_EINVAL;
            break;
        }
        if (y->in.ev.type == YAML_SEQUENCE_END_EVENT)
            break;
        line = rls_yaml_in_line(&y->in);
        if (y->in.ev.type != YAML_MAPPING_START_EVENT) {
            DIAG(b, line, "a 'replaces' entry must be {name: NAME}");
            if (rls_yaml_in_skip(&y->in) != RL_OK) {
                rc = RL_EINVAL;
                break;
            }
            continue;
        }
        for (;;) {
            char kbuf[32];
            const char *v;
            size_t vl;
            int k = next_key(y, kbuf);
            if (k < 0) {
                rc = RL_EINVAL;
                goto out;
            }
            if (k == 0)
                break;
            if (strcmp(kbuf, "name") != 0) {
                if (ref_key(kbuf))
                    WARN(b, rls_yaml_in_line(&y->in),
                         "'%s' has no meaning in replaces: ignored, as "
                         "envoy-ratelimit ignores it",
                         kbuf);
                else
                    DIAG(b, rls_yaml_in_line(&y->in),
                         "unknown key '%s' in replaces", kbuf);
                if (rls_yaml_in_skip(&y->in) != RL_OK) {
                    rc = RL_EINVAL;
                    goto out;
                }
                continue;
            }
            if (!want_scalar(y, "name"))
                continue;
            v = rls_yaml_in_str(&y->in, &vl);
            if (vl == 0 || memchr(v, '\0', vl) != NULL) {
                DIAG(b, rls_yaml_in_line(&y->in),
                     "a 'replaces' name must not be empty");
                have_name = 1; /* said once */
                continue;
            }
            if (len + vl + 1 > cap) {
                size_t ncap = (len + vl + 1) * 2;
                char *nb = realloc(buf, ncap);
                if (nb == NULL) {
                    b->nomem = 1;
                    rc = RL_ENOMEM;
                    goto out;
                }
                buf = nb;
                cap = ncap;
            }
            memcpy(buf + len, v, vl);
            buf[len + vl] = '\0';
            len += vl + 1;
            n++;
            have_name = 1;
        }
        if (!have_name)
            DIAG(b, line, "a 'replaces' entry needs 'name'");
    }
    if (rc == RL_OK && n > 0) {
        /* One copy: the arena adds a NUL after the last one's. */
        x->replaces = arena_copy(b, buf, len - 1);
        x->nreplaces = x->replaces != NULL ? n : 0;
    }
out:
    free(buf);
    return rc;
}

/* rate_limit: { unit, requests_per_unit, name, window, algorithm, burst,
 * phase } */
static int parse_rate_limit(yp_t *y, rls_envoy_node_t *x)
{
    rls_envoy_builder_t *b = y->b;
    int line = rls_yaml_in_line(&y->in), have_rpu = 0, have_unit = 0,
        have_window = 0;
    size_t errors = b->d->n + b->d->dropped;
    uint32_t i;

    if (y->in.ev.type != YAML_MAPPING_START_EVENT) {
        DIAG(b, line, "'rate_limit' must be a mapping");
        return rls_yaml_in_skip(&y->in);
    }
    for (;;) {
        size_t vl;
        const char *v;
        char kbuf[32];
        int rc;

        if ((rc = next_key(y, kbuf)) < 0)
            return RL_EINVAL;
        if (rc == 0)
            break;
        if (strcmp(kbuf, "unit") == 0) {
            if (!want_scalar(y, "unit"))
                continue;
            v = rls_yaml_in_str(&y->in, &vl);
            have_unit = 1;
            if (ieq(v, vl, "second")) {
                x->unit = 1;
                x->lim.window_s = 1;
            } else if (ieq(v, vl, "minute")) {
                x->unit = 2;
                x->lim.window_s = 60;
            } else if (ieq(v, vl, "hour")) {
                x->unit = 3;
                x->lim.window_s = 3600;
            } else if (ieq(v, vl, "day")) {
                x->unit = 4;
                x->lim.window_s = 86400;
            } else if (ieq(v, vl, "week")) {
                x->unit = RLS_ENVOY_WEEK;
                x->lim.window_s = 7 * 86400;
            } else if (ieq(v, vl, "month")) {
                x->unit = RLS_ENVOY_MONTH;
                x->lim.window_s = 30 * 86400;
            } else if (ieq(v, vl, "year")) {
                x->unit = RLS_ENVOY_YEAR;
                x->lim.window_s = 365 * 86400;
            } else {
                DIAG(b, rls_yaml_in_line(&y->in),
                     "unit '%.*s': use second, minute, hour, day, week, "
                     "month or year (or 'window: DURATION' for any other "
                     "length)",
                     (int)(vl > 32 ? 32 : vl), v);
            }
        } else if (strcmp(kbuf, "requests_per_unit") == 0) {
            uint64_t n;
            if (!want_scalar(y, "requests_per_unit"))
                continue;
            v = rls_yaml_in_str(&y->in, &vl);
            if (rl_parse_u64n(v, vl, 0, UINT32_MAX, &n) != RL_OK) {
                DIAG(b, rls_yaml_in_line(&y->in),
                     "requests_per_unit must be a whole number from 0 to "
                     "4294967295");
                have_rpu = 1; /* said once */
                continue;
            }
            x->lim.limit = n;
            have_rpu = 1;
        } else if (strcmp(kbuf, "name") == 0) {
            if (!want_scalar(y, "name"))
                continue;
            v = rls_yaml_in_str(&y->in, &vl);
            x->name = arena_copy(b, v, vl);
            x->name_len = vl;
        } else if (strcmp(kbuf, "window") == 0) {
            uint32_t secs;
            if (!want_scalar(y, "window"))
                continue;
            v = rls_yaml_in_str(&y->in, &vl);
            if (rls_duration_parse(v, vl, &secs) != RL_OK) {
                DIAG(b, rls_yaml_in_line(&y->in),
                     "window '%.*s': a duration like 90s, "
                     "15m, 2h or 7d, from 1 s to 366 d",
                     (int)(vl > 40 ? 40 : vl), v);
                continue;
            }
            have_window = 1;
            x->lim.window_s = secs;
        } else if (strcmp(kbuf, "algorithm") == 0) {
            const char *why;
            int a;
            if (!want_scalar(y, "algorithm"))
                continue;
            v = rls_yaml_in_str(&y->in, &vl);
            if ((a = rls_algo_parse(v, vl, &why)) < 0) {
                DIAG(b, rls_yaml_in_line(&y->in), "algorithm '%.*s': %s",
                     (int)(vl > 40 ? 40 : vl), v, why);
                continue;
            }
            x->lim.algo = (uint8_t)a;
            if (a == RL_ALGO_SLIDING_LOG && b->swl_line == 0)
                b->swl_line = rls_yaml_in_line(&y->in);
        } else if (strcmp(kbuf, "burst") == 0) {
            const char *why;
            if (!want_scalar(y, "burst"))
                continue;
            v = rls_yaml_in_str(&y->in, &vl);
            if (rls_burst_parse(v, vl, &x->lim.burst, &why) != RL_OK)
                DIAG(b, rls_yaml_in_line(&y->in), "burst '%.*s': %s",
                     (int)(vl > 40 ? 40 : vl), v, why);
        } else if (strcmp(kbuf, "phase") == 0) {
            int ph;
            if (!want_scalar(y, "phase"))
                continue;
            v = rls_yaml_in_str(&y->in, &vl);
            if ((ph = rls_phase_parse(v, vl)) < 0) {
                DIAG(b, rls_yaml_in_line(&y->in),
                     "phase must be aligned or per-caller");
                continue;
            }
            x->lim.phase = (uint8_t)ph;
        } else if (strcmp(kbuf, "unlimited") == 0) {
            /* envoy-ratelimit's README puts it here (its Example 5) as
             * well as beside rate_limit. */
            int t;
            if (!want_scalar(y, "unlimited"))
                continue;
            v = rls_yaml_in_str(&y->in, &vl);
            if (parse_bool(v, vl, &t) != RL_OK) {
                DIAG(b, rls_yaml_in_line(&y->in),
                     "'unlimited' must be true or false");
                continue;
            }
            if (t) {
                x->kind = RLS_ENVOY_UNLIMITED;
                return skip_rest(y);
            }
        } else if (strcmp(kbuf, "replaces") == 0) {
            if (parse_replaces(y, x) != RL_OK)
                return RL_EINVAL;
        } else if (ref_key(kbuf)) {
            WARN(b, rls_yaml_in_line(&y->in),
                 "'%s' has no meaning in rate_limit: ignored, as "
                 "envoy-ratelimit ignores it",
                 kbuf);
            if (rls_yaml_in_skip(&y->in) != RL_OK)
                return RL_EINVAL;
        } else {
            DIAG(b, rls_yaml_in_line(&y->in), "unknown key '%s' in rate_limit",
                 kbuf);
            rls_yaml_in_skip(&y->in);
        }
    }
    if (have_window) {
        /* The unit Envoy is told is the window's when it is one. */
        x->unit = rls_envoy_unit_of(x->lim.window_s);
        if (have_unit)
            DIAG(b, line, "rate_limit: give 'unit' or 'window', not both");
    } else if (!have_unit) {
        DIAG(b, line, "rate_limit needs 'unit' (or 'window')");
    }
    /* Without requests_per_unit the limit is 0, which refuses
     * everything: envoy-ratelimit's reading. */
    (void)have_rpu;
    if (x->name != NULL) {
        const char *r = x->replaces;
        for (i = 0; i < x->nreplaces; i++, r += strlen(r) + 1)
            if (strcmp(r, x->name) == 0)
                DIAG(b, line,
                     "rate_limit: replaces names this limit itself ('%s')",
                     x->name);
    }
    /* The algorithm's bounds, once the rest is known to be right. */
    if (b->d->n + b->d->dropped == errors)
        check_limit(b, line, &x->lim);
    x->kind = RLS_ENVOY_LIMIT;
    return RL_OK;
}

/* ------------------------------------------------------------------------ */
/* metadata: any YAML, kept as a google.protobuf.Struct's bytes, as
 * envoy-ratelimit turns it into one (structpb.NewStruct) to return it. */

typedef Google__Protobuf__Value gvalue_t;

/* A plain scalar as YAML 1.1 (envoy-ratelimit's parser) types it: null,
 * a bool, a number, else a string. */
static int meta_number(const char *s, size_t n, double *out)
{
    char buf[64];
    size_t i = 0, digits = 0;

    if (n == 0 || n >= sizeof(buf))
        return 0;
    if (s[i] == '-' || s[i] == '+')
        i++;
    while (i < n && isdigit((unsigned char)s[i]))
        i++, digits++;
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && isdigit((unsigned char)s[i]))
            i++, digits++;
    }
    if (digits == 0)
        return 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t e0;
        i++;
        if (i < n && (s[i] == '-' || s[i] == '+'))
            i++;
        e0 = i;
        while (i < n && isdigit((unsigned char)s[i]))
            i++;
        if (i == e0)
            return 0;
    }
    if (i != n)
        return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    *out = strtod(buf, NULL);
    return 1;
}

/* A scalar's text copied into the pool, as a string value. */
static gvalue_t *meta_string(rls_pbv_t *pb, const char *s, size_t n)
{
    char *c = rls_pbv_strdup(pb, s, n);

    return c != NULL ? rls_pbv_string(pb, c) : NULL;
}

/* The value whose first event is current, built in pb (envoy/pbvalue.h).
 * Returns NULL on a parse error (said) or out of memory (b->nomem). */
static gvalue_t *meta_value(yp_t *y, rls_pbv_t *pb)
{
    yaml_event_type_t t = y->in.ev.type;
    gvalue_t *v;

    if (t == YAML_MAPPING_START_EVENT) {
        if ((v = rls_pbv_struct(pb)) == NULL)
            goto nomem;
        for (;;) {
            const char *k;
            char *key;
            size_t kl;
            gvalue_t *fv;
            int rc = rls_yaml_in_next_key(
                &y->in, "a metadata key must be a single value", NULL);
            if (rc < 0)
                return NULL;
            if (rc == 0)
                break;
            k = rls_yaml_in_str(&y->in, &kl);
            if ((key = rls_pbv_strdup(pb, k, kl)) == NULL)
                goto nomem;
            if (rls_yaml_in_next(&y->in) != RL_OK ||
                (fv = meta_value(y, pb)) == NULL)
                return NULL;
            rls_pbv_set(pb, v->struct_value, key, fv);
            if (pb->nomem)
                goto nomem;
        }
    } else if (t == YAML_SEQUENCE_START_EVENT) {
        if ((v = rls_pbv_list(pb)) == NULL)
            goto nomem;
        for (;;) {
            gvalue_t *item;
            if (rls_yaml_in_next(&y->in) != RL_OK)
                return NULL;
            if (y->in.ev.type == YAML_SEQUENCE_END_EVENT)
                break;
            if ((item = meta_value(y, pb)) == NULL)
                return NULL;
            rls_pbv_push(pb, v->list_value, item);
            if (pb->nomem)
                goto nomem;
        }
    } else if (t == YAML_SCALAR_EVENT) {
        size_t n;
        const char *s = rls_yaml_in_str(&y->in, &n);
        int bv;
        double d;
        if (!y->in.ev.data.scalar.plain_implicit)
            v = meta_string(pb, s, n);
        else if (rls_yaml_in_is_null(&y->in))
            v = rls_pbv_null(pb);
        else if (parse_bool(s, n, &bv) == RL_OK)
            v = rls_pbv_bool(pb, bv);
        else if (meta_number(s, n, &d))
            v = rls_pbv_number(pb, d);
        else
            v = meta_string(pb, s, n);
        if (v == NULL)
            goto nomem;
    } else {
        DIAG(y->b, rls_yaml_in_line(&y->in), "metadata: not a YAML value");
        return NULL;
    }
    return v;
nomem:
    y->b->nomem = 1;
    return NULL;
}

/* metadata: a mapping, packed into the node. The current event is its
 * first. Returns RL_OK, or RL_EINVAL when the walk cannot go on. */
static int parse_metadata(yp_t *y, rls_envoy_node_t *x)
{
    rls_envoy_builder_t *b = y->b;
    int line = rls_yaml_in_line(&y->in);
    rls_pbv_t pb;
    gvalue_t *v;
    uint8_t *buf;
    size_t n;

    if (y->in.ev.type != YAML_MAPPING_START_EVENT) {
        if (!rls_yaml_in_is_null(&y->in))
            DIAG(b, line, "'metadata' must be a mapping");
        return rls_yaml_in_skip(&y->in);
    }
    /* Either way the walk stopped inside the mapping: it cannot go on. */
    rls_pbv_init(&pb);
    if ((v = meta_value(y, &pb)) == NULL) {
        rls_pbv_free(&pb);
        return RL_EINVAL;
    }
    n = google__protobuf__struct__get_packed_size(v->struct_value);
    if (v->struct_value->n_fields > 0 && (buf = malloc(n ? n : 1)) != NULL) {
        google__protobuf__struct__pack(v->struct_value, buf);
        x->metadata = (const uint8_t *)arena_copy(b, (const char *)buf, n);
        x->metadata_len = x->metadata != NULL ? n : 0;
        free(buf);
    } else if (v->struct_value->n_fields > 0) {
        b->nomem = 1;
    }
    rls_pbv_free(&pb);
    return RL_OK;
}

static rls_envoy_node_t *node_new(yp_t *y)
{
    rls_envoy_conf_t *c = y->b->c;

    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        rls_envoy_node_t *v;
        int *l;
        if (cap > ENVOY_NODES_MAX)
            return NULL;
        if ((v = realloc(c->nodes, cap * sizeof(*v))) == NULL) {
            y->b->nomem = 1;
            return NULL;
        }
        c->nodes = v;
        if ((l = realloc(y->lines, cap * sizeof(*l))) == NULL) {
            y->b->nomem = 1;
            return NULL;
        }
        y->lines = l;
        c->cap = cap;
    }
    memset(&c->nodes[c->n], 0, sizeof(c->nodes[0]));
    /* A parse cut short (broken YAML) leaves nodes without their key;
     * the index still hashes them. */
    c->nodes[c->n].key = "";
    c->nodes[c->n].index = (uint32_t)c->n;
    y->lines[c->n] = rls_yaml_in_line(&y->in);
    return &c->nodes[c->n++];
}

static int parse_descriptors(yp_t *y, uint32_t domain, uint32_t parent);

/* One descriptor mapping; the current event is its MAPPING_START. */
static int parse_descriptor(yp_t *y, uint32_t domain, uint32_t parent)
{
    rls_envoy_builder_t *b = y->b;
    int line = rls_yaml_in_line(&y->in), have_key = 0, unlimited = 0;
    rls_envoy_node_t *x;
    uint32_t self;

    if ((x = node_new(y)) == NULL) {
        if (!b->nomem)
            DIAG(b, line, "more than %u descriptors", ENVOY_NODES_MAX);
        y->in.broken = 1;
        return RL_EINVAL;
    }
    x->domain = domain;
    x->parent = parent;
    self = x->index + 1;
    for (;;) {
        const char *v;
        size_t vl;
        char kbuf[32];
        int rc;

        if ((rc = next_key(y, kbuf)) < 0)
            return RL_EINVAL;
        if (rc == 0)
            break;
        /* node_new in a nested list may move the array. */
        x = &b->c->nodes[self - 1];
        if (strcmp(kbuf, "key") == 0) {
            if (!want_scalar(y, "key"))
                continue;
            v = rls_yaml_in_str(&y->in, &vl);
            if (vl == 0) {
                DIAG(b, rls_yaml_in_line(&y->in),
                     "descriptor key must not be empty");
                continue;
            }
            x->key = arena_copy(b, v, vl);
            x->key_len = vl;
            have_key = 1;
        } else if (strcmp(kbuf, "value") == 0) {
            if (!want_scalar(y, "value"))
                continue;
            v = rls_yaml_in_str(&y->in, &vl);
            x->value = arena_copy(b, v, vl);
            x->value_len = vl;
            /* A '*' anywhere is a wildcard, as in envoy-ratelimit. */
            x->wildcard = memchr(v, '*', vl) != NULL;
        } else if (strcmp(kbuf, "rate_limit") == 0) {
            if (parse_rate_limit(y, x) != RL_OK)
                return RL_EINVAL;
        } else if (strcmp(kbuf, "rule") == 0) {
            if (!want_scalar(y, "rule"))
                continue;
            v = rls_yaml_in_str(&y->in, &vl);
            if (!rls_rule_name_ok(v, vl)) {
                DIAG(b, rls_yaml_in_line(&y->in),
                     "rule: 1 to %d bytes of "
                     "[A-Za-z0-9_.:-]",
                     RL_RULE_MAX);
                continue;
            }
            x->rule = arena_copy(b, v, vl);
            x->rule_len = vl;
        } else if (strcmp(kbuf, "unlimited") == 0 ||
                   strcmp(kbuf, "charge_only") == 0 ||
                   strcmp(kbuf, "shadow_mode") == 0 ||
                   strcmp(kbuf, "quota_mode") == 0 ||
                   strcmp(kbuf, "share_threshold") == 0 ||
                   strcmp(kbuf, "value_to_metric") == 0 ||
                   strcmp(kbuf, "detailed_metric") == 0) {
            int t;
            if (!want_scalar(y, kbuf))
                continue;
            v = rls_yaml_in_str(&y->in, &vl);
            if (parse_bool(v, vl, &t) != RL_OK) {
                DIAG(b, rls_yaml_in_line(&y->in), "'%s' must be true or false",
                     kbuf);
                continue;
            }
            if (strcmp(kbuf, "unlimited") == 0)
                unlimited = t;
            else if (strcmp(kbuf, "shadow_mode") == 0)
                x->shadow = t;
            else if (strcmp(kbuf, "charge_only") == 0)
                x->charge = t;
            else if (strcmp(kbuf, "quota_mode") == 0)
                x->quota = t;
            else if (strcmp(kbuf, "share_threshold") == 0)
                x->share_threshold = t;
            else if (strcmp(kbuf, "value_to_metric") == 0)
                x->value_to_metric = t;
            else
                x->detailed_metric = t;
        } else if (strcmp(kbuf, "metadata") == 0) {
            if (parse_metadata(y, x) != RL_OK)
                return RL_EINVAL;
        } else if (strcmp(kbuf, "descriptors") == 0) {
            if (parse_descriptors(y, domain, self) != RL_OK)
                return RL_EINVAL;
        } else if (ref_key(kbuf)) {
            WARN(b, rls_yaml_in_line(&y->in),
                 "'%s' has no meaning in a descriptor: ignored, as "
                 "envoy-ratelimit ignores it",
                 kbuf);
            if (rls_yaml_in_skip(&y->in) != RL_OK)
                return RL_EINVAL;
        } else {
            DIAG(b, rls_yaml_in_line(&y->in),
                 "unknown key '%s' in a descriptor", kbuf);
            if (rls_yaml_in_skip(&y->in) != RL_OK)
                return RL_EINVAL;
        }
    }
    x = &b->c->nodes[self - 1];
    if (!have_key) {
        DIAG(b, line, "descriptor without 'key'");
        x->key = "";
    }
    if (x->key == NULL)
        x->key = ""; /* out of memory, reported */
    if (unlimited && x->kind == RLS_ENVOY_LIMIT) {
        /* envoy-ratelimit reads `unlimited` inside rate_limit only: beside
         * one it is ignored there, so here too, and said. */
        WARN(b, line,
             "'unlimited' beside 'rate_limit' is ignored (as envoy-ratelimit "
             "ignores it): key '%s' keeps its rate_limit",
             x->key);
        unlimited = 0;
    }
    if (x->kind == RLS_ENVOY_UNLIMITED)
        unlimited = 1;
    if ((x->kind == RLS_ENVOY_LIMIT) + unlimited + (x->rule != NULL) > 1)
        DIAG(b, line,
             "a descriptor takes one of 'rate_limit', "
             "'unlimited: true' and 'rule'");
    if (unlimited)
        x->kind = RLS_ENVOY_UNLIMITED;
    else if (x->rule != NULL)
        x->kind = RLS_ENVOY_RULE;
    if (x->share_threshold && !x->wildcard)
        DIAG(b, line,
             "share_threshold needs a wildcard value (one with '*'); "
             "key '%s' has %s",
             x->key, x->value != NULL ? "none" : "no value");
    return RL_OK;
}

static int parse_descriptors(yp_t *y, uint32_t domain, uint32_t parent)
{
    if (y->in.ev.type != YAML_SEQUENCE_START_EVENT) {
        DIAG(y->b, rls_yaml_in_line(&y->in), "'descriptors' must be a list");
        return rls_yaml_in_skip(&y->in);
    }
    for (;;) {
        if (rls_yaml_in_next(&y->in) != RL_OK)
            return RL_EINVAL;
        if (y->in.ev.type == YAML_SEQUENCE_END_EVENT)
            return RL_OK;
        if (y->in.ev.type != YAML_MAPPING_START_EVENT) {
            DIAG(y->b, rls_yaml_in_line(&y->in),
                 "a descriptor must be a mapping");
            if (rls_yaml_in_skip(&y->in) != RL_OK)
                return RL_EINVAL;
            continue;
        }
        if (parse_descriptor(y, domain, parent) != RL_OK)
            return RL_EINVAL;
    }
}

static void stats_name(rls_envoy_domain_t *d)
{
    size_t i, n = 0;

    memcpy(d->stats_name, "envoy:", 6);
    n = 6;
    for (i = 0; i < d->name_len && n < RL_RULE_MAX; i++) {
        unsigned char ch = (unsigned char)d->name[i];
        d->stats_name[n++] =
            (isalnum(ch) || ch == '_' || ch == '.' || ch == ':' || ch == '-')
                ? (char)ch
                : '_';
    }
    d->stats_name[n] = '\0';
}

/* One file: a mapping with domain, descriptors, rate_limit_headers. */
static int parse_file(yp_t *y)
{
    rls_envoy_builder_t *b = y->b;
    rls_envoy_conf_t *c = b->c;
    rls_envoy_domain_t dom;
    uint32_t di = (uint32_t)c->nd;
    int have_domain = 0, line, counting_line = 0;

    memset(&dom, 0, sizeof(dom));
    do {
        if (rls_yaml_in_next(&y->in) != RL_OK)
            return RL_EINVAL;
    } while (y->in.ev.type == YAML_STREAM_START_EVENT ||
             y->in.ev.type == YAML_DOCUMENT_START_EVENT);
    if (y->in.ev.type == YAML_STREAM_END_EVENT) {
        DIAG(b, 1, "empty file: expected 'domain' and 'descriptors'");
        return RL_OK;
    }
    if (y->in.ev.type != YAML_MAPPING_START_EVENT) {
        DIAG(b, rls_yaml_in_line(&y->in),
             "expected a mapping with 'domain' and "
             "'descriptors'");
        return RL_OK;
    }
    line = rls_yaml_in_line(&y->in);
    /* The domain's slot is reserved first: descriptors name it by index. */
    if (c->nd == c->dcap) {
        size_t cap = c->dcap ? c->dcap * 2 : 4;
        rls_envoy_domain_t *v = realloc(c->domains, cap * sizeof(*v));
        if (v == NULL) {
            b->nomem = 1;
            return RL_ENOMEM;
        }
        c->domains = v;
        c->dcap = cap;
    }
    memset(&c->domains[c->nd], 0, sizeof(c->domains[0]));
    c->nd++;
    for (;;) {
        const char *v;
        size_t vl;
        char kbuf[32];
        int rc;

        if ((rc = next_key(y, kbuf)) < 0)
            return RL_EINVAL;
        if (rc == 0)
            break;
        if (strcmp(kbuf, "domain") == 0) {
            if (!want_scalar(y, "domain"))
                continue;
            v = rls_yaml_in_str(&y->in, &vl);
            if (vl == 0) {
                DIAG(b, rls_yaml_in_line(&y->in), "domain must not be empty");
                continue;
            }
            dom.name = arena_copy(b, v, vl);
            dom.name_len = vl;
            have_domain = 1;
        } else if (strcmp(kbuf, "rate_limit_headers") == 0) {
            if (!want_scalar(y, kbuf))
                continue;
            v = rls_yaml_in_str(&y->in, &vl);
            if (key_is(v, vl, "none"))
                dom.headers = 0;
            else if (key_is(v, vl, "x"))
                dom.headers = RL_HDR_X | RL_HDR_RETRY;
            else if (key_is(v, vl, "draft"))
                dom.headers = RL_HDR_IETF | RL_HDR_RETRY;
            else if (key_is(v, vl, "all"))
                dom.headers = RL_HDR_ALL;
            else if (key_is(v, vl, "envoy"))
                dom.headers = RLS_ENVOY_HDR_REF;
            else
                DIAG(b, rls_yaml_in_line(&y->in),
                     "rate_limit_headers: none, x, draft, all or envoy");
            dom.headers_set = 1;
        } else if (strcmp(kbuf, "counting") == 0) {
            if (!want_scalar(y, kbuf))
                continue;
            v = rls_yaml_in_str(&y->in, &vl);
            if (key_is(v, vl, "envoy"))
                dom.counting = RLS_ENVOY_COUNT_ENVOY;
            else if (key_is(v, vl, "envoy-stop"))
                dom.counting = RLS_ENVOY_COUNT_STOP;
            else if (key_is(v, vl, "native"))
                dom.counting = RLS_ENVOY_COUNT_NATIVE;
            else
                DIAG(b, rls_yaml_in_line(&y->in),
                     "counting: envoy, envoy-stop or native");
            counting_line = rls_yaml_in_line(&y->in);
        } else if (strcmp(kbuf, "all_or_nothing") == 0) {
            if (!want_scalar(y, kbuf))
                continue;
            v = rls_yaml_in_str(&y->in, &vl);
            if (parse_bool(v, vl, &dom.all_or_nothing) != RL_OK)
                DIAG(b, rls_yaml_in_line(&y->in),
                     "all_or_nothing: true or false");
        } else if (strcmp(kbuf, "descriptors") == 0) {
            if (parse_descriptors(y, di, 0) != RL_OK)
                return RL_EINVAL;
        } else if (ref_key(kbuf)) {
            WARN(b, rls_yaml_in_line(&y->in),
                 "'%s' has no meaning at the top of a file: ignored, as "
                 "envoy-ratelimit ignores it",
                 kbuf);
            if (rls_yaml_in_skip(&y->in) != RL_OK)
                return RL_EINVAL;
        } else {
            DIAG(b, rls_yaml_in_line(&y->in), "unknown key '%s'", kbuf);
            if (rls_yaml_in_skip(&y->in) != RL_OK)
                return RL_EINVAL;
        }
    }
    if (!have_domain) {
        DIAG(b, line, "no 'domain'");
        dom.name = "";
    } else if (dom.name != NULL &&
               rls_envoy_conf_domain(c, dom.name, dom.name_len) != NULL) {
        DIAG(b, line, "domain '%s' is already defined by another file",
             dom.name);
    }
    if (dom.name == NULL)
        dom.name = "";
    /* A sliding window's log holds at most its limit's entries; counted
     * past the limit it would grow with every call. */
    if (b->swl_line != 0 &&
        rls_envoy_conf_counting(&dom) != RLS_ENVOY_COUNT_NATIVE)
        DIAG(b, b->swl_line,
             "algorithm sliding-window cannot be counted envoy-ratelimit's "
             "way (increment, then compare: its log is bounded by the "
             "limit)%s: give this file 'counting: native', or use "
             "sliding-window-counter",
             counting_line ? "" : " (the --envoy-counting default)");
    b->swl_line = 0;
    stats_name(&dom);
    c->domains[di] = dom;
    /* Anything after the mapping (a second document) is an error. */
    if (rls_yaml_in_next(&y->in) != RL_OK)
        return RL_EINVAL;
    if (y->in.ev.type == YAML_DOCUMENT_END_EVENT &&
        rls_yaml_in_next(&y->in) != RL_OK)
        return RL_EINVAL;
    if (y->in.ev.type != YAML_STREAM_END_EVENT)
        DIAG(b, rls_yaml_in_line(&y->in), "one document per file");
    return RL_OK;
}

static int parse_buf(rls_envoy_builder_t *b, const char *buf, size_t len,
                     int **lines)
{
    yp_t y;

    memset(&y, 0, sizeof(y));
    y.b = b;
    y.lines = *lines;
    y.lcap = 0;
    if (rls_yaml_in_open(&y.in, buf, len, ENVOY_DEPTH_MAX, b->d, b->file) !=
        RL_OK) {
        b->nomem = 1;
        return RL_ENOMEM;
    }
    parse_file(&y);
    if (y.in.nomem)
        b->nomem = 1;
    rls_yaml_in_close(&y.in);
    *lines = y.lines;
    return RL_OK;
}

/* ------------------------------------------------------------------------ */
/* The build */

int rls_envoy_conf_build(const char *const *names, const char *const *bufs,
                         const size_t *lens, size_t n, rls_envoy_conf_t **out,
                         rls_diag_t *diag_out)
{
    rls_envoy_builder_t b;
    int *lines = NULL;
    size_t i;

    *out = NULL;
    memset(diag_out, 0, sizeof(*diag_out));
    memset(&b, 0, sizeof(b));
    b.d = diag_out;
    if ((b.c = rls_envoy_conf_new()) == NULL)
        return RL_ENOMEM;
    for (i = 0; i < n && !b.nomem; i++) {
        uint64_t sig[4];
        char *buf, why[128];
        size_t got;
        int rc;

        b.file = names[i];
        if (bufs != NULL) {
            if (lens[i] > RLS_RULES_FILE_MAX)
                DIAG(&b, 1, "file larger than %u bytes", RLS_RULES_FILE_MAX);
            else
                parse_buf(&b, bufs[i], lens[i], &lines);
            continue;
        }
        rc = rls_file_read(names[i], RLS_RULES_FILE_MAX, &buf, &got, sig, why,
                           sizeof(why));
        if (rc == RL_ENOMEM) {
            b.nomem = 1;
            break;
        }
        if (rc != RL_OK) {
            DIAG(&b, 0, "%s", why);
            continue;
        }
        parse_buf(&b, buf, got, &lines);
        free(buf);
    }
    return rls_envoy_conf_finish(&b, lines, out);
}

int rls_envoy_conf_build_buf(const char *name, const char *buf, size_t len,
                             rls_envoy_conf_t **out, rls_diag_t *diag_out)
{
    return rls_envoy_conf_build(&name, &buf, &len, 1, out, diag_out);
}
