/* HTTP middleware, shaped like a typical web framework's (Django, say):
 * limit the authenticated user when there is one, else the IP address; refuse
 * with 429 when over; put the rate-limit headers on every answer. The
 * "requests" here come from argv so the example needs no HTTP server.
 *
 *   rlc-example-middleware [HOST:PORT] [N] [RULE]
 *
 * N requests by one user (default 7), limited inline to 5 per 5 minutes,
 * or by the server's rule RULE. A rule in shadow mode never refuses: the
 * middleware logs what it would have refused, so the rule can be tried on
 * real traffic before it is enforced. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rlc.h>

typedef struct http_request_s {
    const char *user_id; /* NULL when not logged in */
    const char *ip;
} http_request_t;

/* The middleware: decides, then writes the status line and headers it
 * would send. Returns the HTTP status. When rl-server cannot be asked the
 * client fails open (see main), so an outage of the limiter never takes
 * the site down with it. */
static int rate_limit(rlc_client_t *c, const http_request_t *r,
                      const char *rule)
{
    char key[128], headers[1024];
    rlc_result_t res;
    int status;

    if (r->user_id != NULL)
        snprintf(key, sizeof(key), "user:%s", r->user_id);
    else
        snprintf(key, sizeof(key), "ip:%s", r->ip);
    /* 5 requests per fixed 5-minute window, or the server's rule. */
    rlc_check_t req = {.key = key, .limit = 5, .window_s = 300};
    if (rule != NULL)
        req = (rlc_check_t){.key = key, .rule = rule};
    rlc_check(c, &req, &res);
    /* Shadow mode: allowed, but enforced it would have been a 429. Log it
     * (to the application's log; stderr here) and serve the request. */
    if (res.shadow_refused)
        fprintf(stderr,
                "rate limit (shadow): would refuse %s: used %llu of %llu "
                "per %u s\n",
                key, (unsigned long long)res.used,
                (unsigned long long)res.limit, (unsigned)res.window_s);

    status = rlc_http_status(&res);
    printf("HTTP/1.1 %d %s\r\n", status, rlc_http_reason(status));
    if (rlc_http_format(&res, "per-user", headers, sizeof(headers)) > 0)
        fputs(headers, stdout);
    if (res.flags & RLC_RESULT_FAILED_OPEN)
        printf("X-RateLimit-Note: limiter unavailable (%s)\r\n", res.error);
    printf("\r\n");
    return status;
}

int main(int argc, char **argv)
{
    rlc_options_t o;
    rlc_client_t *c;
    int i, n = argc > 2 ? atoi(argv[2]) : 7, refused = 0;
    const char *rule = argc > 3 ? argv[3] : NULL;
    int rc;

    rlc_options_init(&o);
    o.servers = argc > 1 ? argv[1] : "127.0.0.1:7390";
    o.fail_mode = RLC_FAIL_OPEN;
    o.request_timeout_ms = 50; /* a page must not wait on the limiter */
    rc = rlc_connect(&c, &o);
    if (rc != RLC_OK) {
        fprintf(stderr, "connect %s: %s\n", o.servers, rlc_strerror(rc));
        return 2;
    }
    http_request_t req = {.user_id = "u123", .ip = "203.0.113.7"};
    for (i = 0; i < n; i++)
        if (rate_limit(c, &req, rule) == 429)
            refused++;
    fprintf(stderr, "%d of %d requests refused\n", refused, n);
    rlc_free(c);
    return 0;
}
