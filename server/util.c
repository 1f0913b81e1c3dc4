#include "rls_util.h"

#include "rls_hist.h"

#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void rls_random_key(rl_hash_key_t *k)
{
    FILE *f = fopen("/dev/urandom", "rb");

    if (f != NULL) {
        size_t n = fread(k, sizeof(*k), 1, f);
        fclose(f);
        if (n == 1)
            return;
    }
    k->k0 = rls_realtime_ms() * UINT64_C(0x9e3779b97f4a7c15);
    k->k1 = (uint64_t)getpid() * UINT64_C(0xbf58476d1ce4e5b9);
}

int rls_listen(uv_tcp_t *tcp, const char *host, int port, int backlog,
               uv_connection_cb cb)
{
    struct addrinfo hints, *ai;
    char service[8];
    int rc;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(service, sizeof(service), "%d", port);
    if (getaddrinfo(host, service, &hints, &ai) != 0)
        return UV_EAI_NONAME;
    rc = uv_tcp_bind(tcp, ai->ai_addr, 0);
    freeaddrinfo(ai);
    if (rc != 0)
        return rc;
    /* Errors such as EADDRINUSE surface at listen on Linux. */
    return uv_listen((uv_stream_t *)tcp, backlog, cb);
}

uint64_t rls_realtime_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

const uint64_t rls_rtt_bounds_us[12] = {50,   100,   250,   500,   1000,  2500,
                                        5000, 10000, 25000, 50000, 100000,
                                        250000};
const uint64_t rls_batch_bounds[11] = {1,  2,   4,   8,   16,  32,
                                       64, 128, 256, 512, 1024};
