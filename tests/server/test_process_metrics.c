/* process_* metrics (server/process_metrics.c): the values follow what
 * this process does (descriptors it opens, CPU it burns) and agree with
 * what it reads of itself elsewhere (/proc/self/status, getrlimit,
 * /proc/stat's boot time); the page holds each family once, with the
 * types and names client_golang gives them. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "process_metrics.h"
#include "rl_buf.h"

/* A "Name:   N kB" field of /proc/self/status, in bytes. */
static unsigned long long status_bytes(const char *field)
{
    char line[256];
    unsigned long long v = 0;
    size_t n = strlen(field);
    FILE *f = fopen("/proc/self/status", "r");

    assert_non_null(f);
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, field, n) == 0 && line[n] == ':')
            v = strtoull(line + n + 1, NULL, 10) * 1024;
    fclose(f);
    return v;
}

static void values(void **state)
{
    rls_process_t a, b;
    struct rlimit rl;
    int p[2], d;
    unsigned long long rss;

    (void)state;
    assert_int_equal(rls_process_read(&a), 0);
    assert_int_equal(pipe(p), 0);
    assert_true((d = dup(p[0])) >= 0);
    assert_int_equal(rls_process_read(&b), 0);
    /* Three more descriptors, nothing else opened between. */
    assert_int_equal(b.open_fds, a.open_fds + 3);
    close(p[0]);
    close(p[1]);
    close(d);
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    assert_int_equal(b.max_fds, (unsigned long long)rl.rlim_cur);
    assert_int_equal(getrlimit(RLIMIT_AS, &rl), 0);
    assert_int_equal(b.max_vsize, rl.rlim_cur == RLIM_INFINITY
                                      ? UINT64_MAX
                                      : (unsigned long long)rl.rlim_cur);
    /* The same numbers the kernel shows in status (vsize in bytes there
     * in kB; RSS moves a little between the two reads). */
    assert_int_equal(b.vsize / 1024, status_bytes("VmSize") / 1024);
    rss = status_bytes("VmRSS");
    assert_true(b.rss_bytes > rss / 2 && b.rss_bytes < rss * 2);
    /* Started after boot, before now. */
    assert_true(b.start_time_seconds > 1e9);
    assert_true(b.start_time_seconds <= (double)time(NULL) + 1);
}

static void cpu(void **state)
{
    rls_process_t a, b;
    volatile uint64_t x = 1;
    time_t end = time(NULL) + 20;
    int i;

    (void)state;
    assert_int_equal(rls_process_read(&a), 0);
    /* Burn until the counter moves (a clock tick), with a deadline. */
    do {
        for (i = 0; i < 1000000; i++)
            x = x * 6364136223846793005ULL + 1;
        assert_int_equal(rls_process_read(&b), 0);
    } while (b.cpu_seconds == a.cpu_seconds && time(NULL) < end);
    assert_true(b.cpu_seconds > a.cpu_seconds);
}

static int count_of(const char *page, const char *what)
{
    int n = 0;

    for (; (page = strstr(page, what)) != NULL; page += strlen(what))
        n++;
    return n;
}

static void page(void **state)
{
    static const char *const fam[][2] = {
        {"process_cpu_seconds_total", "counter"},
        {"process_max_fds", "gauge"},
        {"process_open_fds", "gauge"},
        {"process_resident_memory_bytes", "gauge"},
        {"process_start_time_seconds", "gauge"},
        {"process_virtual_memory_bytes", "gauge"},
        {"process_virtual_memory_max_bytes", "gauge"},
        {"go_memstats_gc_cpu_fraction", "gauge"}};
    rl_buf_t b;
    char line[128];
    const char *text;
    size_t i;

    (void)state;
    rl_buf_init(&b, 1 << 16);
    assert_int_equal(rls_process_metrics(&b), 0);
    assert_int_equal(rl_buf_append(&b, "", 1), 0);
    text = (const char *)rl_buf_rptr(&b);
    for (i = 0; i < sizeof(fam) / sizeof(fam[0]); i++) {
        snprintf(line, sizeof(line), "# TYPE %s %s\n", fam[i][0], fam[i][1]);
        assert_int_equal(count_of(text, line), 1);
        snprintf(line, sizeof(line), "\n%s ", fam[i][0]);
        assert_int_equal(count_of(text, line), 1);
    }
    assert_non_null(strstr(text, "\ngo_memstats_gc_cpu_fraction 0\n"));
    /* A full buffer is the buffer's error, not a partial success. */
    rl_buf_free(&b);
    rl_buf_init(&b, 64);
    assert_int_not_equal(rls_process_metrics(&b), 0);
    rl_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(values),
        cmocka_unit_test(cpu),
        cmocka_unit_test(page),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
