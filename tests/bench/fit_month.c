/* A synthetic month of access logs for rl-fit's speed (tests/bench/
 * fit_month.sh): combined-format lines on stdout, in time order, one
 * second of the month after another.
 *
 *   fit_month [USERS [REQUESTS [DAYS]]]   (default 1000000 30000000 30)
 *
 * Callers are drawn with a heavy tail (caller floor(U x r^3), r uniform:
 * caller 0 makes about 1 % of all requests, most others a few dozen in the
 * month); even callers are logged in (user "u<id>"), odd ones have only an
 * address; one in ten sits behind one of 100 shared proxy addresses. The
 * rate follows the day (between 0.5 and 1.5 of the mean), and one request
 * in 100,000 starts a burst of 50 to 500 from its caller in that second.
 * Fixed seed: every run writes the same log. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t next(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1du;
}

static double uniform(void)
{
    return (double)(next() >> 11) / 9007199254740992.0;
}

static void line(const char *when, uint64_t u)
{
    unsigned a = (unsigned)(u * 2654435761u);

    if (u % 10 == 3)
        printf("10.200.0.%u", (unsigned)(u / 10 % 100));
    else
        printf("10.%u.%u.%u", a >> 24, (a >> 16) & 255, (a >> 8) & 255);
    if (u % 2 == 0)
        printf(" - u%llu [%s] \"GET /api/v1/items?page=2 HTTP/1.1\" 200 "
               "512 \"-\" \"client/1.0\"\n",
               (unsigned long long)u, when);
    else
        printf(" - - [%s] \"GET /api/v1/items?page=2 HTTP/1.1\" 200 512 "
               "\"-\" \"client/1.0\"\n",
               when);
}

int main(int argc, char **argv)
{
    uint64_t users = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    uint64_t total = argc > 2 ? strtoull(argv[2], NULL, 10) : 30000000;
    uint64_t days = argc > 3 ? strtoull(argv[3], NULL, 10) : 30;
    uint64_t secs = days * 86400, s, k, j, b;
    const time_t t0 = 1793491200; /* 2026-11-01T00:00:00Z */
    double mean, carry = 0;
    char when[64];

    if (users == 0 || secs == 0)
        return 2;
    mean = (double)total / (double)secs;
    setvbuf(stdout, NULL, _IOFBF, 1 << 20);
    for (s = 0; s < secs; s++) {
        time_t t = t0 + (time_t)s;
        struct tm tm;
        double want = mean * (1 + 0.5 * sin(6.283185307179586 *
                                            (double)(s % 86400) / 86400.0)) +
                      carry;
        uint64_t n = (uint64_t)want;

        carry = want - (double)n;
        gmtime_r(&t, &tm);
        strftime(when, sizeof(when), "%d/%b/%Y:%H:%M:%S +0000", &tm);
        for (k = 0; k < n; k++) {
            double r = uniform();
            uint64_t u = (uint64_t)((double)users * r * r * r);
            line(when, u);
            if (next() % 100000 == 0)
                for (b = 50 + next() % 451, j = 0; j < b; j++)
                    line(when, u);
        }
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
