/* The --rlqs-config reader (conf.h): one YAML document, loaded whole by
 * libyaml (a file of RLS_RLQS_FILE_MAX bytes at most) and walked at a
 * fixed depth, so aliases cannot make the walk long. Unknown keys are
 * errors: a misspelt limit must not pass silently. */
#include "rlqs/conf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "rl_error.h"

typedef struct {
    yaml_document_t *doc;
    char *err;
    size_t errlen;
} rd_t;

/* Says where and why: "line N: why" or "line N: why: arg". */
static int fail(rd_t *r, const yaml_node_t *n, const char *why, const char *arg)
{
    snprintf(r->err, r->errlen, "line %lu: %s%s%s",
             n != NULL ? (unsigned long)n->start_mark.line + 1 : 0UL, why,
             arg != NULL ? ": " : "", arg != NULL ? arg : "");
    return RL_EINVAL;
}

static const char *scalar(const yaml_node_t *n)
{
    return n != NULL && n->type == YAML_SCALAR_NODE
               ? (const char *)n->data.scalar.value
               : NULL;
}

static int get_str(rd_t *r, const yaml_node_t *n, char *dst, size_t cap,
                   const char *what)
{
    const char *s = scalar(n);

    if (s == NULL || n->data.scalar.length == 0 ||
        n->data.scalar.length >= cap ||
        memchr(s, '\0', n->data.scalar.length) != NULL)
        return fail(r, n, "a non-empty string, short enough", what);
    memcpy(dst, s, n->data.scalar.length + 1);
    return 0;
}

static int get_u64(rd_t *r, const yaml_node_t *n, uint64_t lo, uint64_t hi,
                   uint64_t *out, const char *what)
{
    const char *s = scalar(n);
    char *end;
    unsigned long long v;

    if (s == NULL || *s < '0' || *s > '9')
        return fail(r, n, "a whole number", what);
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return fail(r, n, "out of range", what);
    *out = v;
    return 0;
}

static int get_blanket(rd_t *r, const yaml_node_t *n, int *out,
                       const char *what)
{
    const char *s = scalar(n);

    if (s != NULL && strcmp(s, "allow_all") == 0)
        *out = RLS_RLQS_ALLOW_ALL;
    else if (s != NULL && strcmp(s, "deny_all") == 0)
        *out = RLS_RLQS_DENY_ALL;
    else
        return fail(r, n, "allow_all or deny_all", what);
    return 0;
}

static int get_unit(rd_t *r, const yaml_node_t *n, uint32_t *out)
{
    static const struct {
        const char *name;
        uint32_t s;
    } units[] = {{"second", 1}, {"minute", 60}, {"hour", 3600}, {"day", 86400}};
    const char *s = scalar(n);
    size_t i;

    for (i = 0; s != NULL && i < sizeof(units) / sizeof(units[0]); i++)
        if (strcmp(s, units[i].name) == 0) {
            *out = units[i].s;
            return 0;
        }
    return fail(r, n, "unit: second, minute, hour or day", NULL);
}

static int get_burst(rd_t *r, const yaml_node_t *n, double *out)
{
    const char *s = scalar(n);
    char *end;
    double v;

    if (s == NULL || *s == '\0')
        return fail(r, n, "burst: a number in (0, 1]", NULL);
    v = strtod(s, &end);
    if (*end != '\0' || !(v > 0.0 && v <= 1.0))
        return fail(r, n, "burst: a number in (0, 1]", NULL);
    *out = v;
    return 0;
}

static int read_match(rd_t *r, const yaml_node_t *m, rls_rlqs_rule_t *rule)
{
    yaml_node_pair_t *p;
    uint32_t i;

    if (m->type != YAML_MAPPING_NODE ||
        m->data.mapping.pairs.top == m->data.mapping.pairs.start)
        return fail(r, m, "match: a mapping of bucket-id keys to values", NULL);
    for (p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(r->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(r->doc, p->value);
        if (rule->nmatch == RLS_RLQS_MATCH_MAX)
            return fail(r, k, "match: at most 8 keys", NULL);
        if (get_str(r, k, rule->keys[rule->nmatch], RLS_RLQS_NAME_MAX + 1,
                    "match key") != 0 ||
            get_str(r, v, rule->vals[rule->nmatch], RLS_RLQS_VALUE_MAX + 1,
                    "match value") != 0)
            return RL_EINVAL;
        for (i = 0; i < rule->nmatch; i++)
            if (strcmp(rule->keys[i], rule->keys[rule->nmatch]) == 0)
                return fail(r, k, "match: a key given twice", rule->keys[i]);
        rule->nmatch++;
    }
    return 0;
}

static int read_rule(rd_t *r, const yaml_node_t *m, rls_rlqs_rule_t *rule)
{
    yaml_node_pair_t *p;
    uint64_t v;
    int rc = 0, have_limit = 0;

    rule->unit_s = 1;
    rule->floor = 1;
    rule->burst = 0.1;
    rule->ttl_s = 10;
    rule->fallback = RLS_RLQS_ALLOW_ALL;
    rule->abandon_s = 60;
    rule->stale_ms = 5000;
    if (m->type != YAML_MAPPING_NODE)
        return fail(r, m, "a bucket rule is a mapping", NULL);
    for (p = m->data.mapping.pairs.start;
         rc == 0 && p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(r->doc, p->key);
        yaml_node_t *vn = yaml_document_get_node(r->doc, p->value);
        const char *k = scalar(kn);
        if (k == NULL)
            rc = fail(r, kn, "a key must be a string", NULL);
        else if (strcmp(k, "name") == 0)
            rc = get_str(r, vn, rule->name, sizeof(rule->name), "name");
        else if (strcmp(k, "match") == 0)
            rc = read_match(r, vn, rule);
        else if (strcmp(k, "requests") == 0) {
            rc = get_u64(r, vn, 1, (uint64_t)1 << 53, &rule->limit, "requests");
            have_limit = 1;
        } else if (strcmp(k, "unit") == 0)
            rc = get_unit(r, vn, &rule->unit_s);
        else if (strcmp(k, "floor") == 0)
            rc = get_u64(r, vn, 0, (uint64_t)1 << 53, &rule->floor, "floor");
        else if (strcmp(k, "burst") == 0)
            rc = get_burst(r, vn, &rule->burst);
        else if (strcmp(k, "ttl_s") == 0) {
            rc = get_u64(r, vn, 1, 86400, &v, "ttl_s");
            rule->ttl_s = (uint32_t)v;
        } else if (strcmp(k, "fallback") == 0)
            rc = get_blanket(r, vn, &rule->fallback, "fallback");
        else if (strcmp(k, "abandon_s") == 0) {
            rc = get_u64(r, vn, 0, 86400 * 7, &v, "abandon_s");
            rule->abandon_s = (uint32_t)v;
        } else if (strcmp(k, "stale_ms") == 0) {
            rc = get_u64(r, vn, 100, 3600000, &v, "stale_ms");
            rule->stale_ms = (uint32_t)v;
        } else
            rc = fail(r, kn, "unknown key in a bucket rule", k);
    }
    if (rc != 0)
        return rc;
    if (rule->name[0] == '\0' || rule->nmatch == 0 || !have_limit)
        return fail(r, m, "a bucket rule needs name, match and requests", NULL);
    return 0;
}

static int read_doc(rd_t *r, rls_rlqs_conf_t *c)
{
    yaml_node_t *root = yaml_document_get_root_node(r->doc);
    yaml_node_pair_t *p;
    uint64_t v;
    int rc = 0;

    if (root == NULL || root->type != YAML_MAPPING_NODE)
        return fail(r, root, "the file is a mapping (domain, buckets...)",
                    NULL);
    for (p = root->data.mapping.pairs.start;
         rc == 0 && p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(r->doc, p->key);
        yaml_node_t *vn = yaml_document_get_node(r->doc, p->value);
        const char *k = scalar(kn);
        if (k == NULL) {
            rc = fail(r, kn, "a key must be a string", NULL);
        } else if (strcmp(k, "domain") == 0) {
            rc = get_str(r, vn, c->domain, sizeof(c->domain), "domain");
        } else if (strcmp(k, "unmatched") == 0) {
            rc = get_blanket(r, vn, &c->unmatched, "unmatched");
        } else if (strcmp(k, "unmatched_ttl_s") == 0) {
            rc = get_u64(r, vn, 1, 86400, &v, "unmatched_ttl_s");
            c->unmatched_ttl_s = (uint32_t)v;
        } else if (strcmp(k, "min_report_ms") == 0) {
            rc = get_u64(r, vn, 0, 60000, &v, "min_report_ms");
            c->min_report_ms = (uint32_t)v;
        } else if (strcmp(k, "buckets") == 0) {
            yaml_node_item_t *it;
            size_t n;
            if (vn == NULL || vn->type != YAML_SEQUENCE_NODE)
                return fail(r, vn, "buckets: a list of rules", NULL);
            n = (size_t)(vn->data.sequence.items.top -
                         vn->data.sequence.items.start);
            if (n > RLS_RLQS_RULES_MAX || c->rules != NULL)
                return fail(r, vn, "buckets: at most 256 rules, once", NULL);
            if (n > 0 && (c->rules = calloc(n, sizeof(*c->rules))) == NULL)
                return RL_ENOMEM;
            for (it = vn->data.sequence.items.start;
                 rc == 0 && it < vn->data.sequence.items.top; it++) {
                rc = read_rule(r, yaml_document_get_node(r->doc, *it),
                               &c->rules[c->nrules]);
                c->nrules++;
            }
        } else {
            rc = fail(r, kn, "unknown key", k);
        }
    }
    return rc;
}

int rls_rlqs_conf_parse(const char *buf, size_t len, rls_rlqs_conf_t **out,
                        char *err, size_t errlen)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    rls_rlqs_conf_t *c;
    rd_t r = {&doc, err, errlen};
    uint32_t i, j;
    int rc;

    *out = NULL;
    if (len > RLS_RLQS_FILE_MAX)
        return fail(&r, NULL, "file larger than 1 MiB", NULL);
    if ((c = calloc(1, sizeof(*c))) == NULL)
        return RL_ENOMEM;
    c->unmatched = RLS_RLQS_ALLOW_ALL;
    c->unmatched_ttl_s = 60;
    c->min_report_ms = 100;
    if (!yaml_parser_initialize(&parser)) {
        free(c);
        return RL_ENOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(err, errlen, "line %lu: bad YAML: %s",
                 (unsigned long)parser.problem_mark.line + 1,
                 parser.problem != NULL ? parser.problem : "?");
        rc = parser.error == YAML_MEMORY_ERROR ? RL_ENOMEM : RL_EINVAL;
        yaml_parser_delete(&parser);
        free(c);
        return rc;
    }
    rc = read_doc(&r, c);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    for (i = 0; rc == 0 && i < c->nrules; i++)
        for (j = 0; j < i; j++)
            if (strcmp(c->rules[i].name, c->rules[j].name) == 0) {
                snprintf(err, errlen, "bucket rule %s given twice",
                         c->rules[i].name);
                rc = RL_EINVAL;
                break;
            }
    if (rc != 0) {
        rls_rlqs_conf_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

int rls_rlqs_conf_load(const char *path, rls_rlqs_conf_t **out, char *err,
                       size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    size_t n;
    int rc;

    *out = NULL;
    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return RL_EINVAL;
    }
    if ((buf = malloc(RLS_RLQS_FILE_MAX + 1)) == NULL) {
        fclose(f);
        return RL_ENOMEM;
    }
    n = fread(buf, 1, RLS_RLQS_FILE_MAX + 1, f);
    fclose(f);
    rc = rls_rlqs_conf_parse(buf, n, out, err, errlen);
    free(buf);
    return rc;
}

void rls_rlqs_conf_free(rls_rlqs_conf_t *c)
{
    if (c == NULL)
        return;
    free(c->rules);
    free(c);
}

const rls_rlqs_rule_t *rls_rlqs_conf_match(const rls_rlqs_conf_t *c,
                                           const char *const *keys,
                                           const char *const *vals, size_t n)
{
    uint32_t i, j;
    size_t k;

    for (i = 0; i < c->nrules; i++) {
        const rls_rlqs_rule_t *r = &c->rules[i];
        for (j = 0; j < r->nmatch; j++) {
            for (k = 0; k < n && strcmp(keys[k], r->keys[j]) != 0; k++)
                ;
            if (k == n ||
                (strcmp(r->vals[j], "*") != 0 && strcmp(vals[k], r->vals[j])))
                break;
        }
        if (j == r->nmatch)
            return r;
    }
    return NULL;
}
