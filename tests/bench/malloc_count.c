/* malloc_count: an LD_PRELOAD allocation counter for a running process.
 *
 * Interposes malloc, calloc, realloc, free and the aligned allocators of
 * glibc (which exports its own allocator under __libc_* names, so no dlsym
 * is needed) and counts calls. SIGUSR2 appends one line to the file named
 * by RL_MALLOC_COUNT_FILE:
 *
 *   allocs=N frees=M live=L
 *
 * allocs counts every call that may allocate (realloc included: it may
 * move the block); live is blocks currently allocated (a realloc of an
 * existing block leaves it unchanged), which tells a leak from churn.
 *
 * so a script can read the counts before and after a load and divide by
 * the decisions made in between (tests/bench/allocs.sh). The handler only
 * formats integers and calls write(2): both async-signal-safe. Counters
 * are atomic because libuv's thread pool may allocate too. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t m);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern void __libc_free(void *p);

static unsigned long long n_alloc, n_free;
static long long n_live;
static int out_fd = -1;

static void count_alloc(void)
{
    __atomic_fetch_add(&n_alloc, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&n_live, 1, __ATOMIC_RELAXED);
}

void *malloc(size_t n)
{
    count_alloc();
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    count_alloc();
    return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
    void *q;

    __atomic_fetch_add(&n_alloc, 1, __ATOMIC_RELAXED);
    q = __libc_realloc(p, n);
    if (p == NULL && q != NULL)
        __atomic_fetch_add(&n_live, 1, __ATOMIC_RELAXED);
    else if (p != NULL && n == 0)
        __atomic_fetch_sub(&n_live, 1, __ATOMIC_RELAXED);
    return q;
}

void free(void *p)
{
    if (p != NULL) {
        __atomic_fetch_add(&n_free, 1, __ATOMIC_RELAXED);
        __atomic_fetch_sub(&n_live, 1, __ATOMIC_RELAXED);
    }
    __libc_free(p);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    void *p;

    count_alloc();
    p = __libc_memalign(align, n);
    if (p == NULL)
        return ENOMEM;
    *out = p;
    return 0;
}

void *aligned_alloc(size_t align, size_t n)
{
    count_alloc();
    return __libc_memalign(align, n);
}

void *memalign(size_t align, size_t n)
{
    count_alloc();
    return __libc_memalign(align, n);
}

static char *put_ull(char *p, unsigned long long v)
{
    char tmp[24];
    int n = 0;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0)
        *p++ = tmp[--n];
    return p;
}

static void on_usr2(int sig)
{
    char line[80], *p = line;
    int saved = errno;

    (void)sig;
    memcpy(p, "allocs=", 7);
    p = put_ull(p + 7, __atomic_load_n(&n_alloc, __ATOMIC_RELAXED));
    memcpy(p, " frees=", 7);
    p = put_ull(p + 7, __atomic_load_n(&n_free, __ATOMIC_RELAXED));
    memcpy(p, " live=", 6);
    p = put_ull(p + 6,
                (unsigned long long)__atomic_load_n(&n_live, __ATOMIC_RELAXED));
    *p++ = '\n';
    if (out_fd >= 0 && write(out_fd, line, (size_t)(p - line)) < 0)
        errno = saved;
    errno = saved;
}

__attribute__((constructor)) static void init(void)
{
    const char *path = getenv("RL_MALLOC_COUNT_FILE");
    struct sigaction sa;

    if (path == NULL)
        return;
    out_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr2;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, NULL);
}
