/* rl-server's flags table (flags.c), walked row by row through
 * rls_flags_info: every flag is in --help and --help names no flag the
 * parser does not know; a flag that takes a value refuses to go without
 * one, and one that takes none refuses one; a bounded flag takes its
 * bounds into its field and refuses one past either, naming itself and
 * its range; a choice takes each of its choices and refuses others. A row
 * whose name, field, size, bounds or kind is wrong fails here. */
#define _GNU_SOURCE /* open_memstream */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "flags.h"
#include "rl_error.h"

#define ARGS_MAX 16

static rls_flags_t cfg;
static char err[512];
static FILE *quiet; /* --help and --version print here */

/* Parses "rl-server", the flag's context (below), then args. */
static int parse_with(const char *name, const char *const *args)
{
    /* What a flag needs beside it to be taken alone (the checks across
     * flags); the files named are not read while parsing. */
    static const struct {
        const char *name;
        const char *args[9];
    } ctx[] = {
        {"--redis-sentinel-agree",
         {"--redis-sentinel",
          "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,127.0.0.1:4,127.0.0.1:5,"
          "127.0.0.1:6,127.0.0.1:7,127.0.0.1:8,127.0.0.1:9,127.0.0.1:10,"
          "127.0.0.1:11,127.0.0.1:12,127.0.0.1:13,127.0.0.1:14,"
          "127.0.0.1:15,127.0.0.1:16",
          "--redis-sentinel-master", "m"}},
        {"--envoy-xds-backoff-ms", {"--envoy-xds-backoff-max-ms", "3600000"}},
        {"--envoy-xds-backoff-max-ms", {"--envoy-xds-backoff-ms", "1"}},
        {"--fail-local", {"--redis", "127.0.0.1:6379"}},
        {"--redis-tls-insecure", {"--redis", "127.0.0.1:6379"}},
        {"--tls-client-ca-recheck",
         {"--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-client-ca",
          "ca.pem", "--grpc", "127.0.0.1:0"}},
    };
    char *argv[2 * ARGS_MAX];
    int argc = 0;
    size_t k, j;

    argv[argc++] = "rl-server";
    for (k = 0; k < sizeof(ctx) / sizeof(ctx[0]); k++)
        if (strcmp(ctx[k].name, name) == 0)
            for (j = 0; j < 9 && ctx[k].args[j] != NULL; j++)
                argv[argc++] = (char *)ctx[k].args[j];
    for (j = 0; args[j] != NULL; j++)
        argv[argc++] = (char *)args[j];
    argv[argc] = NULL;
    rls_flags_defaults(&cfg);
    err[0] = '\0';
    if (quiet == NULL)
        assert_non_null(quiet = fopen("/dev/null", "w"));
    return rls_flags_parse(&cfg, argc, argv, quiet, err, sizeof(err));
}

static int parse1(const char *name, const char *val)
{
    const char *args[] = {name, val, NULL};
    return parse_with(name, args);
}

static uint64_t field_u64(const rls_flag_info_t *f)
{
    uint32_t v32;
    uint64_t v;

    if (f->size == 4) {
        memcpy(&v32, (char *)&cfg + f->off, 4);
        return v32;
    }
    assert_int_equal(f->size, 8);
    memcpy(&v, (char *)&cfg + f->off, 8);
    return v;
}

static int field_int(const rls_flag_info_t *f)
{
    int v;

    memcpy(&v, (char *)&cfg + f->off, sizeof(v));
    return v;
}

static double field_double(const rls_flag_info_t *f)
{
    double v;

    memcpy(&v, (char *)&cfg + f->off, sizeof(v));
    return v;
}

static char *help_text(void)
{
    char *text = NULL;
    size_t n = 0;
    FILE *out = open_memstream(&text, &n);
    char *argv[] = {"rl-server", "--help", NULL};

    assert_non_null(out);
    rls_flags_defaults(&cfg);
    assert_int_equal(rls_flags_parse(&cfg, 2, argv, out, err, sizeof(err)),
                     RL_OK);
    fclose(out);
    assert_true(cfg.info_only);
    return text;
}

static int name_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-';
}

static void test_help_lists_every_flag(void **state)
{
    char *text = help_text(), *p;
    rls_flag_info_t f;
    size_t i, n = 0, named = 0;

    (void)state;
    for (i = 0; rls_flags_info(i, &f); i++, n++) {
        size_t len = strlen(f.name);
        int found = 0;
        for (p = text; !found && (p = strstr(p, f.name)) != NULL; p += len)
            found = (p == text || !name_char(p[-1])) && !name_char(p[len]);
        if (!found)
            fail_msg("%s is not in --help", f.name);
    }
    assert_true(n >= 90);
    /* The other way: each --name in the text is a flag the parser knows
     * ("--redis-tls-*" stands for several). */
    for (p = text; (p = strstr(p, "--")) != NULL; p += 2) {
        char name[64];
        size_t len = 2;
        while (name_char(p[len]) && len < sizeof(name) - 1)
            len++;
        if (p[len] == '*' || (p > text && name_char(p[-1])))
            continue;
        memcpy(name, p, len);
        name[len] = '\0';
        if (parse1(name, NULL) != RL_OK &&
            strstr(err, "unknown option") != NULL)
            fail_msg("--help names %s, which the parser does not know", name);
        named++;
    }
    assert_true(named > n);
    free(text);
}

static void test_values_needed_or_refused(void **state)
{
    rls_flag_info_t f;
    char want[128], arg[128];
    size_t i;

    (void)state;
    for (i = 0; rls_flags_info(i, &f); i++) {
        if (strcmp(f.name, "--help") == 0 || strcmp(f.name, "--version") == 0)
            continue;
        if (f.takes_value) {
            assert_int_equal(parse1(f.name, NULL), RL_EINVAL);
            snprintf(want, sizeof(want), "%s needs a value", f.name);
        } else {
            snprintf(arg, sizeof(arg), "%s=1", f.name);
            assert_int_equal(parse1(arg, NULL), RL_EINVAL);
            snprintf(want, sizeof(want), "%s takes no value", f.name);
        }
        if (strcmp(err, want) != 0)
            fail_msg("%s: \"%s\", not \"%s\"", f.name, err, want);
    }
}

/* v refused, with a message naming the flag and its range. */
static void refused(const rls_flag_info_t *f, const char *v, const char *what)
{
    char prefix[96], range[96];

    if (parse1(f->name, v) != RL_EINVAL)
        fail_msg("%s accepted '%s'", f->name, v);
    snprintf(prefix, sizeof(prefix), "%s: expected %s", f->name, what);
    snprintf(range, sizeof(range), " from %llu to %llu",
             (unsigned long long)f->min, (unsigned long long)f->max);
    if (strncmp(err, prefix, strlen(prefix)) != 0 ||
        (f->kind != RLS_FLAG_RATIO && strstr(err, range) == NULL))
        fail_msg("%s '%s': unclear refusal \"%s\"", f->name, v, err);
}

static void accepted(const rls_flag_info_t *f, const char *v)
{
    if (parse1(f->name, v) != RL_OK)
        fail_msg("%s '%s' refused: %s", f->name, v, err);
}

static void test_bounds(void **state)
{
    rls_flag_info_t f;
    char v[32];
    size_t i, nnum = 0;

    (void)state;
    for (i = 0; rls_flags_info(i, &f); i++) {
        const char *what = f.kind == RLS_FLAG_BYTES ? "bytes" : "a number";
        if (f.kind != RLS_FLAG_NUM && f.kind != RLS_FLAG_BYTES)
            continue;
        nnum++;
        assert_true(f.min <= f.max);
        snprintf(v, sizeof(v), "%llu", (unsigned long long)f.min);
        accepted(&f, v);
        assert_true(field_u64(&f) == f.min);
        snprintf(v, sizeof(v), "%llu", (unsigned long long)f.max);
        accepted(&f, v);
        if (field_u64(&f) != f.max)
            fail_msg("%s %s: the field holds %llu", f.name, v,
                     (unsigned long long)field_u64(&f));
        if (f.min > 0) {
            snprintf(v, sizeof(v), "%llu", (unsigned long long)f.min - 1);
            refused(&f, v, what);
        }
        if (f.max < UINT64_MAX) {
            snprintf(v, sizeof(v), "%llu", (unsigned long long)f.max + 1);
            refused(&f, v, what);
        }
        refused(&f, "x", what);
        refused(&f, "", what);
        refused(&f, "-1", what);
        if (f.kind == RLS_FLAG_BYTES && f.max % 1024 == 0) {
            snprintf(v, sizeof(v), "%lluk", (unsigned long long)f.max >> 10);
            accepted(&f, v);
            assert_true(field_u64(&f) == f.max);
            snprintf(v, sizeof(v), "%lluk",
                     ((unsigned long long)f.max >> 10) + 1);
            refused(&f, v, what);
        }
    }
    assert_true(nnum >= 30);
}

static void test_ratios(void **state)
{
    rls_flag_info_t f;
    size_t i, n = 0;

    (void)state;
    for (i = 0; rls_flags_info(i, &f); i++) {
        if (f.kind != RLS_FLAG_RATIO)
            continue;
        n++;
        accepted(&f, "1");
        assert_true(field_double(&f) == 1.0);
        accepted(&f, "0.25");
        assert_true(field_double(&f) == 0.25);
        if (f.min == 1) {
            refused(&f, "0", "a number above 0, up to 1");
        } else {
            accepted(&f, "0");
            assert_true(field_double(&f) == 0.0);
            refused(&f, "-0.5", "a number from 0 to 1");
        }
        refused(&f, "1.5", "a number");
        refused(&f, "nan", "a number");
        refused(&f, "0.5x", "a number");
    }
    assert_int_equal(n, 3);
}

static void test_choices_and_switches(void **state)
{
    rls_flag_info_t f;
    char choice[32];
    size_t i, nchoice = 0, nset = 0;

    (void)state;
    for (i = 0; rls_flags_info(i, &f); i++) {
        if (f.kind == RLS_FLAG_SET) {
            const char *args[] = {f.name, NULL};
            nset++;
            /* A switch changes its field, unless --help says it is the
             * default. */
            rls_flags_defaults(&cfg);
            if ((field_int(&f) == (int)f.min) !=
                (f.help != NULL && strstr(f.help, "(default)") != NULL))
                fail_msg("%s: the default and --help disagree", f.name);
            if (parse_with(f.name, args) != RL_OK)
                fail_msg("%s alone refused: %s", f.name, err);
            assert_int_equal(field_int(&f), (int)f.min);
        }
        if (f.kind == RLS_FLAG_CHOICE) {
            const char *p = f.choices;
            int k = 0;
            nchoice++;
            while (*p != '\0') {
                size_t len = strcspn(p, "|");
                snprintf(choice, sizeof(choice), "%.*s", (int)len, p);
                accepted(&f, choice);
                assert_int_equal(field_int(&f), (int)f.min + k++);
                p += p[len] == '|' ? len + 1 : len;
            }
            /* The choice --help calls the default is the default. */
            rls_flags_defaults(&cfg);
            k = field_int(&f) - (int)f.min;
            for (p = f.choices; k > 0 && *p != '\0'; k--)
                p += strcspn(p, "|") + (p[strcspn(p, "|")] == '|');
            snprintf(choice, sizeof(choice), "%.*s (default",
                     (int)strcspn(p, "|"), p);
            if (k != 0 || *p == '\0' || strstr(f.help, choice) == NULL)
                fail_msg("%s: the default is not the choice --help says",
                         f.name);
            assert_int_equal(parse1(f.name, "bogus"), RL_EINVAL);
            for (p = f.choices; *p != '\0';) {
                size_t len = strcspn(p, "|");
                snprintf(choice, sizeof(choice), " %.*s", (int)len, p);
                if (strstr(err, choice) == NULL)
                    fail_msg("%s: refusal \"%s\" does not list%s", f.name, err,
                             choice);
                p += p[len] == '|' ? len + 1 : len;
            }
        }
    }
    assert_int_equal(nchoice, 3);
    assert_int_equal(nset, 14);
}

/* The default a row's help states ("default N", N maybe over a line's
 * end): 1 with it in *v (a byte count's suffix applied), else 0. */
static int stated_default(const rls_flag_info_t *f, double *v)
{
    const char *p = f->help != NULL ? strstr(f->help, "default") : NULL;
    char *end;

    if (p == NULL)
        return 0;
    p += 7;
    while (*p == ' ' || *p == '\n')
        p++;
    if (*p < '0' || *p > '9')
        return 0;
    *v = strtod(p, &end);
    if (f->kind == RLS_FLAG_BYTES && strchr("kmg", *end) != NULL && *end)
        *v *= *end == 'k' ? 1024.0 : *end == 'm' ? 1048576.0 : 1073741824.0;
    return 1;
}

static void test_defaults_as_stated(void **state)
{
    rls_flag_info_t f;
    double v;
    size_t i, n = 0;

    (void)state;
    for (i = 0; rls_flags_info(i, &f); i++) {
        if ((f.kind != RLS_FLAG_NUM && f.kind != RLS_FLAG_BYTES &&
             f.kind != RLS_FLAG_RATIO) ||
            !stated_default(&f, &v))
            continue;
        n++;
        rls_flags_defaults(&cfg);
        if ((f.kind == RLS_FLAG_RATIO ? field_double(&f)
                                      : (double)field_u64(&f)) != v)
            fail_msg("%s: --help says default %g, the default is not", f.name,
                     v);
    }
    assert_true(n >= 30);
}

/* README.md's flags table ($RLT_README): each flag is in the first
 * column of a row. */
static void test_readme_lists_every_flag(void **state)
{
    const char *path = getenv("RLT_README");
    char *first = calloc(1, 1 << 16), line[4096], *p;
    size_t used = 0;
    rls_flag_info_t f;
    int in_table = 0;
    FILE *in;

    (void)state;
    assert_non_null(first);
    if (path == NULL) {
        free(first);
        skip();
    }
    assert_non_null(in = fopen(path, "r"));
    while (fgets(line, sizeof(line), in) != NULL) {
        if (strncmp(line, "| flag | default | meaning |", 27) == 0)
            in_table = 1;
        else if (in_table && line[0] != '|')
            break;
        else if (in_table) {
            /* The first column ends at the first '|' not escaped. */
            for (p = line + 1; *p != '\0' && (*p != '|' || p[-1] == '\\'); p++)
                ;
            if (used + (size_t)(p - line) + 2 < (1 << 16)) {
                memcpy(first + used, line, (size_t)(p - line));
                used += (size_t)(p - line);
                first[used++] = '\n';
            }
        }
    }
    fclose(in);
    assert_true(in_table);
    for (size_t i = 0; rls_flags_info(i, &f); i++) {
        size_t len = strlen(f.name);
        int found = 0;
        for (p = first; !found && (p = strstr(p, f.name)) != NULL; p += len)
            found = !name_char(p[-1]) && !name_char(p[len]);
        if (!found)
            fail_msg("%s is not in README.md's flags table", f.name);
    }
    free(first);
}

static void test_unknown(void **state)
{
    (void)state;
    assert_int_equal(parse1("--no-such-flag", NULL), RL_EINVAL);
    assert_string_equal(err, "unknown option '--no-such-flag' (see --help)");
    assert_int_equal(parse1("--listen=", NULL), RL_EINVAL);
    assert_non_null(strstr(err, "--listen: expected"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_lists_every_flag),
        cmocka_unit_test(test_values_needed_or_refused),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_ratios),
        cmocka_unit_test(test_choices_and_switches),
        cmocka_unit_test(test_defaults_as_stated),
        cmocka_unit_test(test_readme_lists_every_flag),
        cmocka_unit_test(test_unknown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
