/* The smallest useful program: one decision, then a batch of three in one
 * round trip.
 *
 *   rlc-example-blocking [HOST:PORT]     (default 127.0.0.1:7390) */
#include <inttypes.h>
#include <stdio.h>

#include <rlc.h>

int main(int argc, char **argv)
{
    rlc_options_t o;
    rlc_client_t *c;
    rlc_result_t res, batch[3];
    int rc, i;

    rlc_options_init(&o);
    o.servers = argc > 1 ? argv[1] : "127.0.0.1:7390";
    rc = rlc_connect(&c, &o);
    if (rc != RLC_OK) {
        fprintf(stderr, "connect %s: %s\n", o.servers, rlc_strerror(rc));
        return 2;
    }

    /* 5 hits per 60 s for this caller. */
    rlc_check_t one = {.key = "user:example", .limit = 5, .window_s = 60};
    rc = rlc_check(c, &one, &res);
    printf("%s used=%" PRIu64 " remaining=%" PRIu64 " (%s)\n",
           rlc_code_name(res.code), res.used, res.remaining,
           rc == RLC_OK ? "answered" : rlc_strerror(rc));

    /* Three callers at once: one write, one wait. */
    rlc_check_t many[3] = {
        {.key = "user:alice", .limit = 100, .window_s = 60},
        {.key = "user:bob", .limit = 100, .window_s = 60},
        {.key = "ip:203.0.113.7", .limit = 1000, .window_s = 300, .cost = 2},
    };
    rc = rlc_check_batch(c, many, 3, batch);
    for (i = 0; i < 3; i++)
        printf("%-16s %s used=%" PRIu64 "\n", many[i].key,
               rlc_code_name(batch[i].code), batch[i].used);

    rlc_free(c);
    return rc == RLC_OK ? 0 : 2;
}
