/* The policy: building it from --rule flags and a YAML file, and looking
 * rules and overrides up (see rules.h).
 *
 * The file is read with libyaml's event parser, not its document loader:
 * the loader builds a node per value of any shape and depth, so a hostile
 * file of nested brackets would cost memory far beyond its size. Events let
 * this code accept exactly the shape it knows, refuse nesting beyond
 * RLS_RULES_DEPTH_MAX and aliases (which could expand a small file into a
 * huge one), and keep a line number for every message. Errors do not stop
 * the parse unless the YAML itself is broken, so one run reports them all. */
#include "policy/rules.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/file_in.h"
#include "policy/yaml_in.h"
#include "rl_error.h"
#include "rl_parse.h"
#include "rl_hash.h"
#include "rl_window.h"
#include "base/util.h"

struct rls_policy_s {
    unsigned refs;
    rls_rule_t *rules;
    size_t n, cap;
    uint32_t *index; /* open-addressed by name hash: rule index + 1 */
    uint32_t mask;
    rl_hash_key_t hash_key;
    rls_arena_t arena; /* names and keys */
    /* The rules file as read (rls_file_signature's fields); 0s without
     * one. */
    uint64_t file_sig[4];
};

static void policy_free(rls_policy_t *p)
{
    size_t i;

    if (p == NULL)
        return;
    for (i = 0; i < p->n; i++)
    {
        free(p->rules[i].overrides);
        free(p->rules[i].override_index);
    }
    free(p->rules);
    free(p->index);
    rls_arena_free(&p->arena);
    free(p);
}

/* Atomic: with --threads every loop's runtime holds the one policy the
 * first loop built, and drops it on its own thread. */
rls_policy_t *rls_policy_ref(rls_policy_t *p)
{
    __atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
    return p;
}

void rls_policy_unref(rls_policy_t *p)
{
    if (p != NULL && __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) == 0)
        policy_free(p);
}

rls_policy_t *rls_policy_release(rls_policy_t *p)
{
    if (p == NULL || __atomic_load_n(&p->refs, __ATOMIC_ACQUIRE) == 1)
        return p;
    rls_policy_unref(p);
    return NULL;
}

size_t rls_policy_count(const rls_policy_t *p)
{
    return p->n;
}

const rls_rule_t *rls_policy_rule_at(const rls_policy_t *p, size_t i)
{
    return i < p->n ? &p->rules[i] : NULL;
}

const rls_rule_t *rls_policy_find(const rls_policy_t *p, const char *name,
                                  size_t len)
{
    uint32_t pos, v;

    if (p == NULL || p->index == NULL)
        return NULL;
    pos = (uint32_t)rl_hash(&p->hash_key, name, len) & p->mask;
    for (;; pos = (pos + 1) & p->mask) {
        if ((v = p->index[pos]) == 0)
            return NULL;
        if (p->rules[v - 1].name_len == len &&
            memcmp(p->rules[v - 1].name, name, len) == 0)
            return &p->rules[v - 1];
    }
}

const rls_limits_t *rls_rule_limits(const rls_rule_t *r, const char *key,
                                    size_t key_len)
{
    /* The index is at most half full, so a probe ends on an empty slot. */
    uint32_t pos, tag;
    uint64_t h, v;

    if (r->noverrides == 0)
        return &r->limits;
    h = rl_hash(r->hash_key, key, key_len);
    tag = (uint32_t)(h >> 32);
    for (pos = (uint32_t)h & r->overrides_mask;
         (v = r->override_index[pos]) != 0;
         pos = (pos + 1) & r->overrides_mask) {
        const rls_override_t *o;
        if ((uint32_t)(v >> 32) != tag)
            continue;
        o = &r->overrides[(uint32_t)v - 1];
        if (o->key_len == key_len && memcmp(o->key, key, key_len) == 0)
            return &o->limits;
    }
    return &r->limits;
}

const char *rls_mode_name(int mode)
{
    switch (mode) {
    case RLS_MODE_ENFORCE: return "enforce";
    case RLS_MODE_SHADOW: return "shadow";
    case RLS_MODE_OFF: return "off";
    }
    return "unknown";
}

int rls_mode_parse(const char *s, size_t len)
{
    int m;

    for (m = 0; m < RLS_MODE_MAX; m++)
        if (strlen(rls_mode_name(m)) == len &&
            memcmp(rls_mode_name(m), s, len) == 0)
            return m;
    return RL_EINVAL;
}

/* ------------------------------------------------------------------------ */
/* Building */

typedef struct builder_s {
    rls_policy_t *p;
    rls_diag_t *diag;
    const char *file; /* for messages */
    size_t max_rules;
    int nomem;
    /* the rule being read, and its overrides until the rule is done, with
     * the line of each (for a key given twice) and their index as the
     * rule will have it (rls_rule_t's override_index), which finds a key
     * given twice in O(1): both move to the rule when it is done */
    rls_override_t *ovr;
    int *ovr_line;
    size_t novr, ovr_cap, line_cap;
    uint64_t *oidx;
    size_t oidx_cap;
    /* every rule name seen, valid or not, to report a second definition
     * even when the first had errors: open-addressed, at most half full */
    struct seen_s {
        const char *name;
        size_t len;
        int line; /* 0: a --rule flag */
    } *seen;
    size_t nseen, seen_cap;
    uint64_t probes; /* key comparisons, for rls_rules_key_probes */
} builder_t;

static _Atomic uint64_t key_probes;

uint64_t rls_rules_key_probes(void)
{
    return atomic_load_explicit(&key_probes, memory_order_relaxed);
}

/* Records a rule name defined at line; returns 1 if it was seen before
 * (*first: where), 0 if new, or RL_ENOMEM. */
static int seen_add(builder_t *b, const char *name, size_t len, int line,
                    int *first)
{
    uint32_t pos, mask;
    size_t i;

    if (2 * (b->nseen + 1) > b->seen_cap) {
        size_t cap = b->seen_cap ? 2 * b->seen_cap : 64;
        struct seen_s *t = calloc(cap, sizeof(*t));
        if (t == NULL)
            return RL_ENOMEM;
        for (i = 0; i < b->seen_cap; i++) {
            if (b->seen[i].name == NULL)
                continue;
            pos = (uint32_t)rl_hash(&b->p->hash_key, b->seen[i].name,
                                    b->seen[i].len) &
                  (uint32_t)(cap - 1);
            while (t[pos].name != NULL)
                pos = (pos + 1) & (uint32_t)(cap - 1);
            t[pos] = b->seen[i];
        }
        free(b->seen);
        b->seen = t;
        b->seen_cap = cap;
    }
    mask = (uint32_t)(b->seen_cap - 1);
    for (pos = (uint32_t)rl_hash(&b->p->hash_key, name, len) & mask;
         b->seen[pos].name != NULL; pos = (pos + 1) & mask)
        if (++b->probes, b->seen[pos].len == len &&
                             memcmp(b->seen[pos].name, name, len) == 0) {
            *first = b->seen[pos].line;
            return 1;
        }
    if ((b->seen[pos].name = rls_arena_copy(&b->p->arena, name, len)) == NULL)
        return RL_ENOMEM;
    b->seen[pos].len = len;
    b->seen[pos].line = line;
    b->nseen++;
    return 0;
}

/* An error at line (0: none) of the file being read. */
#define DIAG(b, line, ...) rls_diag_add((b)->diag, (b)->file, line, __VA_ARGS__)

/* Adds a limit to a set; returns 0 or a reason. Kept sorted by window
 * length, then algorithm: the store keys a limit by the two, so one rule
 * cannot hold the same pair twice. */
static const char *limits_add(rls_limits_t *ls, const rls_limit_t *l)
{
    uint32_t i, j;

    if (ls->n == RLS_WINDOWS_MAX)
        return "more than 8 windows";
    for (i = 0; i < ls->n &&
                (ls->w[i].window_s < l->window_s ||
                 (ls->w[i].window_s == l->window_s && ls->w[i].algo < l->algo));
         i++)
        ;
    if (i < ls->n && ls->w[i].window_s == l->window_s &&
        ls->w[i].algo == l->algo)
        return "two limits with the same window length and algorithm";
    for (j = ls->n; j > i; j--)
        ls->w[j] = ls->w[j - 1];
    ls->w[i] = *l;
    ls->n++;
    return NULL;
}

int rls_rule_name_ok(const char *s, size_t len)
{
    rl_check_t probe;

    memset(&probe, 0, sizeof(probe));
    probe.key = "k";
    probe.key_len = 1;
    probe.rule = s;
    probe.rule_len = len;
    return len > 0 && rl_check_validate(&probe) == RL_OK;
}

static rls_rule_t *rule_new(builder_t *b, const char *name, size_t len,
                            int line)
{
    rls_policy_t *p = b->p;
    rls_rule_t *r;
    int first = 0;

    if (!rls_rule_name_ok(name, len)) {
        DIAG(b, line, "bad rule name '%.*s': 1-%d bytes of [A-Za-z0-9_.:-]",
             (int)(len > 64 ? 64 : len), name, RL_RULE_MAX);
        return NULL;
    }
    switch (seen_add(b, name, len, line, &first)) {
    case 0:
        break;
    case 1:
        if (first > 0)
            DIAG(b, line, "rule '%.*s' is defined twice (first at line %d)",
                 (int)len, name, first);
        else
            DIAG(b, line, "rule '%.*s' is defined twice (first by --rule)",
                 (int)len, name);
        return NULL;
    default:
        b->nomem = 1;
        return NULL;
    }
    if (p->n == b->max_rules) {
        DIAG(b, line, "more than %zu rules (--max-rules)", b->max_rules);
        return NULL;
    }
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 16;
        rls_rule_t *nr = realloc(p->rules, cap * sizeof(*nr));
        if (nr == NULL) {
            b->nomem = 1;
            return NULL;
        }
        p->rules = nr;
        p->cap = cap;
    }
    r = &p->rules[p->n];
    memset(r, 0, sizeof(*r));
    if ((r->name = rls_arena_copy(&p->arena, name, len)) == NULL) {
        b->nomem = 1;
        return NULL;
    }
    r->name_len = len;
    r->line = line;
    r->index = (uint32_t)p->n;
    r->hash_key = &p->hash_key;
    return r;
}

/* Makes a rule count: indexes its name. */
static int rule_commit(builder_t *b)
{
    rls_policy_t *p = b->p;
    rls_rule_t *r = &p->rules[p->n];
    uint32_t pos;

    /* The name index is rebuilt when it would pass half full. */
    if (p->index == NULL || 2 * (p->n + 1) > (size_t)p->mask + 1) {
        size_t slots = 64, i;
        uint32_t *idx;

        while (slots < 4 * (p->n + 1))
            slots <<= 1;
        if ((idx = calloc(slots, sizeof(*idx))) == NULL) {
            b->nomem = 1;
            return RL_ENOMEM;
        }
        free(p->index);
        p->index = idx;
        p->mask = (uint32_t)(slots - 1);
        for (i = 0; i < p->n; i++) {
            pos = (uint32_t)rl_hash(&p->hash_key, p->rules[i].name,
                                    p->rules[i].name_len) &
                  p->mask;
            while (p->index[pos] != 0)
                pos = (pos + 1) & p->mask;
            p->index[pos] = (uint32_t)i + 1;
        }
    }
    pos = (uint32_t)rl_hash(&p->hash_key, r->name, r->name_len) & p->mask;
    while (p->index[pos] != 0)
        pos = (pos + 1) & p->mask;
    p->index[pos] = (uint32_t)p->n + 1;
    p->n++;
    return RL_OK;
}

/* Gives the collected overrides and their index to the rule. */
static void overrides_commit(builder_t *b, rls_rule_t *r)
{
    rls_override_t *fit;

    if (b->novr == 0)
        return;
    /* The array grew by doubling: give back the rest (or keep it all). */
    fit = realloc(b->ovr, b->novr * sizeof(*fit));
    r->overrides = fit != NULL ? fit : b->ovr;
    r->override_index = b->oidx;
    r->overrides_mask = (uint32_t)(b->oidx_cap - 1);
    r->noverrides = (uint32_t)b->novr;
    b->ovr = NULL;
    b->ovr_cap = 0;
    b->oidx = NULL;
    b->oidx_cap = 0;
    b->novr = 0;
}

/* Finds key in the overrides so far: returns the slot of their index where
 * it is (*found 1) or where it would go (*found 0). */
static size_t oset_find(builder_t *b, const char *key, size_t len,
                        uint64_t h, int *found)
{
    size_t mask = b->oidx_cap - 1, pos;
    uint32_t tag = (uint32_t)(h >> 32);
    uint64_t v;

    *found = 0;
    for (pos = (size_t)h & mask; (v = b->oidx[pos]) != 0;
         pos = (pos + 1) & mask) {
        const rls_override_t *o;

        b->probes++;
        if ((uint32_t)(v >> 32) != tag)
            continue;
        o = &b->ovr[(uint32_t)v - 1];
        if (o->key_len == len && memcmp(o->key, key, len) == 0) {
            *found = 1;
            break;
        }
    }
    return pos;
}

/* Makes room in the index for one more key. Returns 0 or RL_ENOMEM. */
static int oset_reserve(builder_t *b)
{
    size_t cap, i, pos;
    uint64_t *t;
    int found;

    if (2 * (b->novr + 1) <= b->oidx_cap)
        return RL_OK;
    cap = b->oidx_cap ? 2 * b->oidx_cap : 8;
    if ((t = calloc(cap, sizeof(*t))) == NULL)
        return RL_ENOMEM;
    free(b->oidx);
    b->oidx = t;
    b->oidx_cap = cap;
    for (i = 0; i < b->novr; i++) {
        pos = oset_find(b, b->ovr[i].key, b->ovr[i].key_len, b->ovr[i].hash,
                        &found);
        b->oidx[pos] = (b->ovr[i].hash & UINT64_C(0xffffffff00000000)) |
                       (uint32_t)(i + 1);
    }
    return RL_OK;
}

static int override_add(builder_t *b, const char *key, size_t len,
                        const rls_limits_t *ls, int line)
{
    rls_override_t *o;
    uint64_t h;
    size_t pos;
    int found;

    if (len == 0 || len > RL_KEY_MAX || memchr(key, '\0', len) != NULL) {
        DIAG(b, line,
             "override key a client could not send: 1-%d bytes, no NUL",
             RL_KEY_MAX);
        return RL_EINVAL;
    }
    if (b->novr == b->ovr_cap) {
        size_t cap = b->ovr_cap ? 2 * b->ovr_cap : 16;
        rls_override_t *n = realloc(b->ovr, cap * sizeof(*n));
        if (n == NULL) {
            b->nomem = 1;
            return RL_ENOMEM;
        }
        b->ovr = n;
        b->ovr_cap = cap;
    }
    if (b->novr == b->line_cap) {
        size_t cap = b->line_cap ? 2 * b->line_cap : 16;
        int *nl = realloc(b->ovr_line, cap * sizeof(*nl));
        if (nl == NULL) {
            b->nomem = 1;
            return RL_ENOMEM;
        }
        b->ovr_line = nl;
        b->line_cap = cap;
    }
    if (oset_reserve(b) != RL_OK) {
        b->nomem = 1;
        return RL_ENOMEM;
    }
    h = rl_hash(&b->p->hash_key, key, len);
    pos = oset_find(b, key, len, h, &found);
    if (found) {
        DIAG(b, line, "override for '%.*s' given twice (first at line %d)",
             (int)(len > 64 ? 64 : len), key,
             b->ovr_line[(uint32_t)b->oidx[pos] - 1]);
        return RL_EINVAL;
    }
    o = &b->ovr[b->novr];
    if ((o->key = rls_arena_copy(&b->p->arena, key, len)) == NULL) {
        b->nomem = 1;
        return RL_ENOMEM;
    }
    o->key_len = len;
    o->hash = h;
    o->limits = *ls;
    b->ovr_line[b->novr] = line;
    b->novr++;
    b->oidx[pos] = (h & UINT64_C(0xffffffff00000000)) | (uint32_t)b->novr;
    return RL_OK;
}

/* "NAME=LIMIT[,LIMIT...]", each LIMIT "N/DUR[:OPTION...]" */
static void add_flag(builder_t *b, const char *s)
{
    const char *eq = strchr(s, '='), *p, *end;
    rls_limits_t ls;
    rls_rule_t *r;

    if (eq == NULL) {
        DIAG(b, 0,
             "expected NAME=LIMIT/DURATION[:OPTION...][,LIMIT/DURATION...],"
             " got '%s'",
             s);
        return;
    }
    memset(&ls, 0, sizeof(ls));
    for (p = eq + 1;; p = end + 1) {
        const char *why, *err;
        rls_limit_t l;

        end = strchr(p, ',');
        if (end == NULL)
            end = p + strlen(p);
        if (rls_limit_parse(p, (size_t)(end - p), &l, &why) != RL_OK) {
            DIAG(b, 0, "bad limit in '%s': %s", s, why);
            return;
        }
        if ((err = limits_add(&ls, &l)) != NULL) {
            DIAG(b, 0, "'%s': %s", s, err);
            return;
        }
        if (*end == '\0')
            break;
    }
    if ((r = rule_new(b, s, (size_t)(eq - s), 0)) == NULL)
        return;
    r->limits = ls;
    r->mode = RLS_MODE_ENFORCE;
    rule_commit(b);
}

/* ------------------------------------------------------------------------ */
/* The YAML file, event by event */

typedef struct yp_s {
    builder_t *b;
    rls_yaml_in_t in;
} yp_t;

/* The current scalar's bytes and length. */
static const char *sval(const yp_t *y)
{
    size_t n;

    return rls_yaml_in_str(&y->in, &n);
}

static size_t slen(const yp_t *y)
{
    size_t n;

    rls_yaml_in_str(&y->in, &n);
    return n;
}

/* The keys of a limit's map. */
enum { LK_LIMIT, LK_RATE, LK_ALGO, LK_BURST, LK_PHASE, LK_MAX };
static const char *const limit_keys[LK_MAX] = {"limit", "rate", "algorithm",
                                               "burst", "phase"};
static const char not_a_key[] =
    "a limit's keys are limit, rate, algorithm, burst, phase";

/* A limit as a map (see rules.h); the current event is its MAPPING_START.
 * Returns 0, with *valid set when *out is a limit (else every error was
 * reported), or RL_EINVAL when the parse cannot go on. */
static int read_limit_map(yp_t *y, rls_limit_t *out, int *valid)
{
    builder_t *b = y->b;
    int line = rls_yaml_in_line(&y->in), ok = 1, have[LK_MAX] = {0}, rc, k, v;
    char rate[40] = ""; /* N/DURATION, for messages */
    const char *why;

    memset(out, 0, sizeof(*out));
    while ((rc = rls_yaml_in_next_key(&y->in, not_a_key, &ok)) > 0) {
        for (k = 0; k < LK_MAX && !rls_yaml_in_is(&y->in, limit_keys[k]); k++)
            ;
        if (k == LK_MAX)
            DIAG(b, rls_yaml_in_line(&y->in),
                 "unknown key '%.*s' in a limit (limit, rate, algorithm, "
                 "burst, phase)",
                 (int)(slen(y) > 40 ? 40 : slen(y)), sval(y));
        if (rls_yaml_in_next(&y->in) != RL_OK)
            return RL_EINVAL;
        if (k < LK_MAX)
            have[k] = 1;
        if (k == LK_MAX || !rls_yaml_in_is_scalar(&y->in)) {
            if (k < LK_MAX)
                DIAG(b, rls_yaml_in_line(&y->in), "'%s' must be a single value",
                     limit_keys[k]);
            ok = 0;
            if (rls_yaml_in_skip(&y->in) != RL_OK)
                return RL_EINVAL;
            continue;
        }
        switch (k) {
        case LK_LIMIT:
        case LK_RATE:
            /* One place for each option: the map's keys, not a suffix. */
            if (memchr(sval(y), ':', slen(y)) != NULL) {
                DIAG(b, rls_yaml_in_line(&y->in),
                     "bad %s '%.*s': in a map, give the algorithm, burst and "
                     "phase as keys",
                     limit_keys[k], (int)(slen(y) > 40 ? 40 : slen(y)),
                     sval(y));
                ok = 0;
            } else if (rls_rate_parse(sval(y), slen(y), out, &why) != RL_OK) {
                DIAG(b, rls_yaml_in_line(&y->in), "bad %s '%.*s': %s",
                     limit_keys[k], (int)(slen(y) > 40 ? 40 : slen(y)), sval(y),
                     why);
                ok = 0;
            } else {
                snprintf(rate, sizeof(rate), "%.*s", (int)slen(y), sval(y));
            }
            break;
        case LK_ALGO:
            if ((v = rls_algo_parse(sval(y), slen(y), &why)) < 0) {
                DIAG(b, rls_yaml_in_line(&y->in), "algorithm '%.*s': %s",
                     (int)(slen(y) > 40 ? 40 : slen(y)), sval(y), why);
                ok = 0;
            } else {
                out->algo = (uint8_t)v;
            }
            break;
        case LK_BURST:
            if (rls_burst_parse(sval(y), slen(y), &out->burst, &why) != RL_OK) {
                DIAG(b, rls_yaml_in_line(&y->in), "burst '%.*s': %s",
                     (int)(slen(y) > 40 ? 40 : slen(y)), sval(y), why);
                ok = 0;
            }
            break;
        case LK_PHASE:
            if ((v = rls_phase_parse(sval(y), slen(y))) < 0) {
                DIAG(b, rls_yaml_in_line(&y->in),
                     "phase must be aligned or per-caller");
                ok = 0;
            } else {
                out->phase = (uint8_t)v;
            }
            break;
        }
    }
    if (rc < 0)
        return rc;
    if (have[LK_LIMIT] && have[LK_RATE]) {
        DIAG(b, line, "a limit takes 'limit' or 'rate', not both");
        ok = 0;
    } else if (!have[LK_LIMIT] && !have[LK_RATE]) {
        DIAG(b, line, "a limit needs 'limit: N/DURATION' (or 'rate:')");
        ok = 0;
    }
    if (ok && rls_limit_check(out, &why) != RL_OK) {
        DIAG(b, line, "bad limit '%s' (%s): %s", rate, rls_algo_name(out->algo),
             why);
        ok = 0;
    }
    *valid = ok;
    return RL_OK;
}

/* One limit: a scalar N/DURATION[:OPTION...] or a map, added to ls.
 * Returns 0, or a negative RL_E* when the parse cannot go on; *ok is
 * cleared when an error was reported and the parse can go on. */
static int read_limit(yp_t *y, rls_limits_t *ls, int *ok)
{
    int line = rls_yaml_in_line(&y->in), valid = 1;
    const char *why, *err;
    rls_limit_t l;

    if (y->in.ev.type == YAML_MAPPING_START_EVENT) {
        if (read_limit_map(y, &l, &valid) != RL_OK)
            return RL_EINVAL;
    } else if (!rls_yaml_in_is_scalar(&y->in)) {
        DIAG(y->b, line,
             "a limit must be N/DURATION[:OPTION...] or a map like "
             "{limit: 100/1m, algorithm: sliding-window-counter}");
        valid = 0;
        if (rls_yaml_in_skip(&y->in) != RL_OK)
            return RL_EINVAL;
    } else if (rls_limit_parse(sval(y), slen(y), &l, &why) != RL_OK) {
        DIAG(y->b, line, "bad limit '%.*s': %s",
             (int)(slen(y) > 64 ? 64 : slen(y)), sval(y), why);
        valid = 0;
    }
    if (valid && (err = limits_add(ls, &l)) != NULL) {
        DIAG(y->b, line, "%s", err);
        valid = 0;
    }
    *ok &= valid;
    return RL_OK;
}

/* A limits value: one limit (scalar or map) or a sequence of them.
 * Returns 0, or a negative RL_E* when the parse cannot go on; *valid is
 * cleared when an error was reported and the parse can go on. */
static int read_limits(yp_t *y, rls_limits_t *ls, int *valid)
{
    int ok = 1;

    memset(ls, 0, sizeof(*ls));
    if (y->in.ev.type != YAML_SEQUENCE_START_EVENT) {
        if (read_limit(y, ls, &ok) != RL_OK)
            return RL_EINVAL;
    } else {
        for (;;) {
            if (rls_yaml_in_next(&y->in) != RL_OK)
                return RL_EINVAL;
            if (y->in.ev.type == YAML_SEQUENCE_END_EVENT)
                break;
            if (read_limit(y, ls, &ok) != RL_OK)
                return RL_EINVAL;
        }
    }
    if (ok && ls->n == 0) {
        DIAG(y->b, rls_yaml_in_line(&y->in), "no limits given");
        ok = 0;
    }
    *valid = ok;
    return RL_OK;
}

static int read_overrides(yp_t *y)
{
    int rc;

    if (rls_yaml_in_is_null(&y->in))
        return RL_OK;
    if (y->in.ev.type != YAML_MAPPING_START_EVENT) {
        DIAG(y->b, rls_yaml_in_line(&y->in),
             "overrides must map caller keys to limits");
        return rls_yaml_in_skip(&y->in);
    }
    rls_yaml_in_own_keys(&y->in); /* override_add: lines and a hash set */
    while ((rc = rls_yaml_in_next_key(
                &y->in, "an override's key must be a string", NULL)) > 0) {
        char key[RL_KEY_MAX + 1];
        size_t klen;
        int line = rls_yaml_in_line(&y->in), valid;
        rls_limits_t ls;

        /* Too long to be a key: still reported by override_add. */
        klen = slen(y) <= RL_KEY_MAX ? slen(y) : RL_KEY_MAX + 1;
        memcpy(key, sval(y), klen <= RL_KEY_MAX ? klen : RL_KEY_MAX);
        if (rls_yaml_in_next(&y->in) != RL_OK)
            return RL_EINVAL;
        if ((rc = read_limits(y, &ls, &valid)) < 0)
            return rc;
        if (valid)
            override_add(y->b, key, klen, &ls, line);
    }
    return rc;
}

static int read_rule(yp_t *y, const char *name, size_t name_len, int line)
{
    builder_t *b = y->b;
    rls_rule_t *r = rule_new(b, name, name_len, line);
    rls_rule_t scratch;
    int have_limits = 0, ok = r != NULL, rc;
    uint64_t conc_n = 0;
    uint32_t lease_s = 0;

    /* A bad name is reported and its body still checked. */
    if (r == NULL) {
        memset(&scratch, 0, sizeof(scratch));
        r = &scratch;
    }
    /* A rule left with errors keeps its overrides' index: empty it. */
    b->novr = 0;
    free(b->oidx);
    b->oidx = NULL;
    b->oidx_cap = 0;
    if (y->in.ev.type != YAML_MAPPING_START_EVENT) {
        DIAG(b, rls_yaml_in_line(&y->in),
             "rule '%.*s' must be a map with limits", (int)name_len, name);
        return rls_yaml_in_skip(&y->in);
    }
    while ((rc = rls_yaml_in_next_key(
                &y->in, "a rule's keys are limits, mode, overrides", &ok)) >
           0) {
        if (rls_yaml_in_is(&y->in, "limits")) {
            int valid;
            if (rls_yaml_in_next(&y->in) != RL_OK ||
                read_limits(y, &r->limits, &valid) != RL_OK)
                return RL_EINVAL;
            have_limits = 1;
            ok &= valid;
        } else if (rls_yaml_in_is(&y->in, "mode")) {
            if (rls_yaml_in_next(&y->in) != RL_OK)
                return RL_EINVAL;
            if (!rls_yaml_in_is_scalar(&y->in) ||
                (r->mode = rls_mode_parse(sval(y), slen(y))) < 0) {
                DIAG(b, rls_yaml_in_line(&y->in),
                     "mode must be enforce, shadow or off");
                ok = 0;
                if (rls_yaml_in_skip(&y->in) != RL_OK)
                    return RL_EINVAL;
            }
        } else if (rls_yaml_in_is(&y->in, "overrides")) {
            size_t before = b->diag->n + b->diag->dropped;
            if (rls_yaml_in_next(&y->in) != RL_OK || read_overrides(y) != RL_OK)
                return RL_EINVAL;
            ok &= b->diag->n + b->diag->dropped == before;
        } else if (rls_yaml_in_is(&y->in, "description")) {
            if (rls_yaml_in_next(&y->in) != RL_OK ||
                rls_yaml_in_skip(&y->in) != RL_OK)
                return RL_EINVAL;
        } else if (rls_yaml_in_is(&y->in, "concurrency") ||
                   rls_yaml_in_is(&y->in, "lease")) {
            int conc = rls_yaml_in_is(&y->in, "concurrency");
            uint64_t v = 0;
            uint32_t d = 0;

            if (rls_yaml_in_next(&y->in) != RL_OK)
                return RL_EINVAL;
            if (!rls_yaml_in_is_scalar(&y->in) ||
                (conc ? rl_parse_u64n(sval(y), slen(y), 1, RLS_CONCURRENCY_MAX,
                                      &v)
                      : rls_duration_parse(sval(y), slen(y), &d)) != RL_OK) {
                DIAG(b, rls_yaml_in_line(&y->in),
                     conc ? "concurrency must be a whole number of leases "
                            "from 1 to 1000000"
                          : "lease must be a duration such as 30s or 5m");
                ok = 0;
                if (rls_yaml_in_skip(&y->in) != RL_OK)
                    return RL_EINVAL;
            } else if (conc) {
                conc_n = v;
            } else {
                lease_s = d;
            }
        } else {
            DIAG(b, rls_yaml_in_line(&y->in),
                 "unknown key '%.*s' in rule '%.*s' (limits, concurrency, "
                 "lease, mode, overrides, description)",
                 (int)(slen(y) > 40 ? 40 : slen(y)), sval(y), (int)name_len,
                 name);
            ok = 0;
            if (rls_yaml_in_next(&y->in) != RL_OK ||
                rls_yaml_in_skip(&y->in) != RL_OK)
                return RL_EINVAL;
        }
    }
    if (rc < 0)
        return rc;
    if (conc_n > 0 && have_limits) {
        DIAG(b, line,
             "rule '%.*s' has both limits and concurrency: a rule limits a "
             "rate or what is in flight, not both",
             (int)name_len, name);
        ok = 0;
    } else if (conc_n > 0 && b->novr > 0) {
        DIAG(b, line,
             "rule '%.*s' limits concurrency: overrides are not "
             "supported there",
             (int)name_len, name);
        ok = 0;
    } else if (conc_n > 0) {
        memset(&r->limits, 0, sizeof(r->limits));
        r->limits.n = 1;
        r->limits.w[0].limit = conc_n;
        r->limits.w[0].window_s = lease_s ? lease_s : RLS_LEASE_DEFAULT_S;
        r->concurrency = 1;
    } else if (lease_s > 0) {
        DIAG(b, line, "rule '%.*s' has a lease but no concurrency",
             (int)name_len, name);
        ok = 0;
    } else if (!have_limits) {
        DIAG(b, line, "rule '%.*s' has no limits", (int)name_len, name);
        ok = 0;
    }
    if (ok && r != &scratch && !b->nomem) {
        if (rule_commit(b) != RL_OK)
            return RL_ENOMEM;
        overrides_commit(b, r);
    }
    return RL_OK;
}

static int read_rules(yp_t *y)
{
    int rc;

    if (rls_yaml_in_is_null(&y->in))
        return RL_OK;
    if (y->in.ev.type != YAML_MAPPING_START_EVENT) {
        DIAG(y->b, rls_yaml_in_line(&y->in),
             "rules must map rule names to rules");
        return rls_yaml_in_skip(&y->in);
    }
    rls_yaml_in_own_keys(&y->in); /* rule_new: "defined twice" */
    while ((rc = rls_yaml_in_next_key(&y->in, "a rule's name must be a string",
                                      NULL)) > 0) {
        char name[RL_RULE_MAX + 1];
        size_t len;
        int line = rls_yaml_in_line(&y->in);

        /* A name too long is cut here and refused by rule_new. */
        len = slen(y) <= RL_RULE_MAX ? slen(y) : RL_RULE_MAX + 1;
        memcpy(name, sval(y), len <= RL_RULE_MAX ? len : RL_RULE_MAX);
        name[len <= RL_RULE_MAX ? len : RL_RULE_MAX] = '\0';
        if (rls_yaml_in_next(&y->in) != RL_OK ||
            read_rule(y, name, len, line) != RL_OK)
            return RL_EINVAL;
        if (y->b->nomem)
            return RL_ENOMEM;
    }
    return rc;
}

static void read_file(builder_t *b, const char *buf, size_t len)
{
    yp_t y;
    int seen_rules = 0;

    memset(&y, 0, sizeof(y));
    y.b = b;
    if (rls_yaml_in_open(&y.in, buf, len, RLS_RULES_DEPTH_MAX, b->diag,
                         b->file) != RL_OK) {
        b->nomem = 1;
        return;
    }
    if (rls_yaml_in_next(&y.in) != RL_OK) /* STREAM_START */
        goto done;
    if (rls_yaml_in_next(&y.in) != RL_OK)
        goto done;
    if (y.in.ev.type == YAML_STREAM_END_EVENT) {
        DIAG(b, 1, "empty file: expected a map with 'rules'");
        goto done;
    }
    if (rls_yaml_in_next(&y.in) != RL_OK) /* after DOCUMENT_START */
        goto done;
    if (y.in.ev.type != YAML_MAPPING_START_EVENT) {
        DIAG(b, rls_yaml_in_line(&y.in), "expected a map with 'rules'");
        goto done;
    }
    for (;;) {
        if (rls_yaml_in_next(&y.in) != RL_OK)
            goto done;
        if (y.in.ev.type == YAML_MAPPING_END_EVENT)
            break;
        if (rls_yaml_in_is_scalar(&y.in) && rls_yaml_in_is(&y.in, "rules")) {
            seen_rules = 1; /* twice: told by the walk */
            if (rls_yaml_in_next(&y.in) != RL_OK || read_rules(&y) != RL_OK)
                goto done;
        } else {
            DIAG(b, rls_yaml_in_line(&y.in),
                 "unknown key%s%.*s%s at the top (rules)",
                 rls_yaml_in_is_scalar(&y.in) ? " '" : "",
                 rls_yaml_in_is_scalar(&y.in)
                     ? (int)(slen(&y) > 40 ? 40 : slen(&y))
                     : 0,
                 rls_yaml_in_is_scalar(&y.in) ? sval(&y) : "",
                 rls_yaml_in_is_scalar(&y.in) ? "'" : "");
            if (rls_yaml_in_skip(&y.in) != RL_OK ||
                rls_yaml_in_next(&y.in) != RL_OK ||
                rls_yaml_in_skip(&y.in) != RL_OK)
                goto done;
        }
    }
    if (!seen_rules)
        DIAG(b, rls_yaml_in_line(&y.in), "no 'rules' map");
    /* One document only: a second one would be silently ignored. */
    if (rls_yaml_in_next(&y.in) != RL_OK || rls_yaml_in_next(&y.in) != RL_OK)
        goto done;
    if (y.in.ev.type != YAML_STREAM_END_EVENT)
        DIAG(b, rls_yaml_in_line(&y.in), "more than one YAML document");
done:
    if (y.in.nomem)
        b->nomem = 1;
    rls_yaml_in_close(&y.in);
}

static int build(const char *const *flags, size_t nflags, const char *name,
                 const char *buf, size_t len, size_t max_rules,
                 rls_policy_t **out, rls_diag_t *d)
{
    builder_t b;
    size_t i;

    *out = NULL;
    memset(&b, 0, sizeof(b));
    b.diag = d;
    b.max_rules = max_rules;
    if ((b.p = calloc(1, sizeof(*b.p))) == NULL)
        return RL_ENOMEM;
    b.p->refs = 1;
    rls_random_key(&b.p->hash_key);
    b.file = "--rule";
    for (i = 0; i < nflags && !b.nomem; i++)
        add_flag(&b, flags[i]);
    if (name != NULL && !b.nomem) {
        b.file = name;
        read_file(&b, buf, len);
    }
    free(b.ovr);
    free(b.ovr_line);
    free(b.oidx);
    free(b.seen);
    atomic_fetch_add_explicit(&key_probes, b.probes, memory_order_relaxed);
    if (b.nomem) {
        policy_free(b.p);
        return RL_ENOMEM;
    }
    if (d->n > 0) {
        policy_free(b.p);
        return RL_EINVAL;
    }
    *out = b.p;
    return RL_OK;
}

int rls_policy_build_buf(const char *const *flags, size_t nflags,
                         const char *name, const char *buf, size_t len,
                         size_t max_rules, rls_policy_t **out,
                         rls_diag_t *diag)
{
    memset(diag, 0, sizeof(*diag));
    return build(flags, nflags, name, buf, len, max_rules, out, diag);
}

int rls_policy_build(const char *const *flags, size_t nflags,
                     const char *path, size_t max_rules, rls_policy_t **out,
                     rls_diag_t *diag)
{
    uint64_t sig[4] = {0, 0, 0, 0};
    char *buf = NULL, why[128];
    size_t len = 0;
    int rc;

    memset(diag, 0, sizeof(*diag));
    *out = NULL;
    if (path != NULL) {
        rc = rls_file_read(path, RLS_RULES_FILE_MAX, &buf, &len, sig, why,
                           sizeof(why));
        if (rc == RL_EINVAL) {
            snprintf(diag->msg[0], sizeof(diag->msg[0]), "%s: %s", path,
                     why);
            diag->n = 1;
        }
        if (rc != RL_OK)
            return rc;
    }
    rc = build(flags, nflags, path, buf, len, max_rules, out, diag);
    free(buf);
    if (rc == RL_OK)
        memcpy((*out)->file_sig, sig, sizeof(sig));
    return rc;
}

void rls_policy_file_signature(const rls_policy_t *p, uint64_t sig[4])
{
    memcpy(sig, p->file_sig, sizeof(p->file_sig));
}
