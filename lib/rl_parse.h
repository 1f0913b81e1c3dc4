/* Parsing of the numbers and addresses operators type: flags of rl-server,
 * rl-check and rl-bench, and the server list of librlc. One parser, so that
 * every tool accepts the same spellings. */
#ifndef RL_PARSE_H
#define RL_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* How an address is written, for messages: a bare IPv6 address such as
 * "::1:7390" is refused, since it cannot be told where the port begins. */
#define RL_HOSTPORT_HELP "HOST:PORT or [IPV6]:PORT"

/* Parses a whole decimal number (digits only: no sign, no space, nothing
 * after) in [min, max] into *out. Returns 0 or RL_EINVAL (*out untouched). */
int rl_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* The same for the len bytes at s, which need no NUL (a YAML scalar, a
 * query parameter). Work is linear in len. */
int rl_parse_u64n(const char *s, size_t len, uint64_t min, uint64_t max,
                  uint64_t *out);

/* Parses "HOST:PORT" or "[HOST]:PORT" (an IPv6 address in brackets) with a
 * port in 1..65535. HOST (without brackets) is copied NUL-terminated into
 * host, which holds hostlen bytes. A HOST with a ':' outside brackets, an
 * empty HOST or one that does not fit, and a bad port are refused. Returns
 * 0 or RL_EADDR (host and *port untouched). */
int rl_parse_hostport(const char *s, char *host, size_t hostlen, int *port);

/* rl_parse_hostport for an address to listen on: port 0 is allowed too,
 * and asks the system for any free port. */
int rl_parse_listen(const char *s, char *host, size_t hostlen, int *port);

/* One hexadecimal digit's value (either case), or -1: for %XX escapes,
 * JSON's \uXXXX and hex-written handles. */
static inline int rl_hex_digit(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

#endif
