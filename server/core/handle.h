/* Reservation and lease handles (DESIGN.md, "Reservations and leases").
 *
 * A handle is what RESERVE and ACQUIRE return and SETTLE, RELEASE and
 * RENEW take back, possibly on another instance. It carries everything
 * the settlement needs (whose counters, which windows it was charged to,
 * the estimate, when it ends) and an HMAC-SHA256 tag (16 bytes) under a
 * secret every instance of a fleet shares (rls_hkey_t), so a client can
 * neither forge one nor change what it says; the store keeps only what
 * makes a settlement happen once (the caller's settled set) and the leases
 * themselves.
 *
 * Layout, integers big-endian: version 2 (1 is read too: see
 * rls_handle_t.version), kind ('R' or 'L'), flags, ns,
 * id 8, expires_at_ms 8, decided_at_ms 8, estimate 4, nwin 1, per window
 * (algo 1, phased 1, window_s 4, index 8, t_us 8), rule_len 1, rule,
 * key_len 2, key, tag 16. At most RL_HANDLE_MAX bytes. */
#ifndef RLS_HANDLE_H
#define RLS_HANDLE_H

#include <stddef.h>
#include <stdint.h>

#include "rl_admit.h"
#include "rl_msg.h"

#define RLS_HANDLE_RESERVATION 'R'
#define RLS_HANDLE_LEASE 'L'

/* Nothing was charged for it (mode off, a shadow refusal, fail-open): its
 * settlement or release changes nothing and succeeds. */
#define RLS_HANDLE_UNCHARGED 1

typedef struct rls_hwin_s {
    uint8_t algo;
    uint8_t phased;
    uint32_t window_s;
    uint64_t index;
    uint64_t t_us;
} rls_hwin_t;

typedef struct rls_handle_s {
    uint8_t version; /* decoded: 1, a handle of an instance that settled
                        through a marker per reservation, which its
                        settlement must also find absent; 2 otherwise */
    uint8_t kind;    /* RLS_HANDLE_* */
    uint8_t flags; /* RLS_HANDLE_UNCHARGED */
    uint8_t ns;    /* 0: a rule's; else decide.h's RLS_NS_* */
    uint64_t id;
    uint64_t expires_at_ms; /* a reservation's end; 0 for a lease */
    uint64_t decided_at_ms;
    uint32_t estimate;
    uint32_t nwin;
    rls_hwin_t win[RL_ADMIT_WINDOWS_MAX];
    const char *rule; /* decoded: point into the handle's bytes */
    size_t rule_len;
    const char *key;
    size_t key_len;
} rls_handle_t;

/* The secret handles are signed with: the fleet's file, or this
 * instance's own (never one kept in the store: server.c). */
typedef struct rls_hkey_s {
    uint8_t k[32];
    int set;   /* 0 until loaded: handles are refused until then */
    void *mac; /* OpenSSL's HMAC-SHA256 keyed with k, reused per tag */
} rls_hkey_t;

/* Frees what the setters below hold; k is unset after. */
void rls_hkey_free(rls_hkey_t *k);

/* Encodes h into out (RL_HANDLE_MAX bytes), as version 2 unless h is a
 * decoded version 1, and returns its length, or 0
 * when it would not fit (a key and rule too long together; cannot happen
 * within RL_KEY_MAX and RL_RULE_MAX). */
size_t rls_handle_encode(const rls_handle_t *h, const rls_hkey_t *k,
                         uint8_t *out);

/* Decodes p[0..n) into *h, its strings pointing into p. Returns 0, or
 * RL_EINVAL when it is malformed or its tag is not this secret's (forged,
 * changed, or from another fleet), with *why saying which. */
int rls_handle_decode(const uint8_t *p, size_t n, const rls_hkey_t *k,
                      rls_handle_t *h, const char **why);

/* Sets k from a file's bytes (SHA-256 of them; at least 16 bytes), e.g.
 * --handle-secret-file. Returns 0, or RL_EINVAL with err set. */
int rls_hkey_from_file(rls_hkey_t *k, const char *path, char *err,
                       size_t errlen);

/* Sets k from 32 fresh random bytes (an instance without
 * --handle-secret-file), or from text (SHA-256 of it; the fuzzers' fixed
 * secrets). Return 0 or RL_EINVAL. */
int rls_hkey_random(rls_hkey_t *k);
void rls_hkey_from_text(rls_hkey_t *k, const char *s, size_t n);
/* Sets k to from's secret, with a MAC of its own (--threads: every loop
 * signs with the first loop's secret, each on its own thread). */
void rls_hkey_copy(rls_hkey_t *k, const rls_hkey_t *from);

/* A fresh random 64-bit id (never 0). */
uint64_t rls_handle_new_id(void);

#endif
