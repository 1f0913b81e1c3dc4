/* Small helpers of the server: a random hash key, the wall clock. */
#include "base/util.h"

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
    k->k0 = rl_unix_ms() * UINT64_C(0x9e3779b97f4a7c15);
    k->k1 = (uint64_t)getpid() * UINT64_C(0xbf58476d1ce4e5b9);
}
