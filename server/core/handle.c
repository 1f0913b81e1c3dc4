/* Reservation and lease handles; see handle.h. */
#include "core/handle.h"

#include <stdio.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "rl_error.h"
#include "rl_validate.h"

/* Version 2: settled once through the caller's settled set (store.h's
 * RLS_XOP_SETTLE); version 1's were settled through a marker per
 * reservation. Both are read; only 2 is written, so that an instance of
 * before the settled set refuses the handles of one after it (its
 * marker check would not see their settlement). */
#define VERSION 2
#define VERSION_MARKER 1
#define TAG 16
#define WIN_BYTES 22
/* version, kind, flags, ns, id, expires, decided, estimate, nwin */
#define HEAD 33

static uint8_t *put64(uint8_t *p, uint64_t v)
{
    int i;

    for (i = 7; i >= 0; i--)
        *p++ = (uint8_t)(v >> (i * 8));
    return p;
}

static uint8_t *put32(uint8_t *p, uint32_t v)
{
    *p++ = (uint8_t)(v >> 24);
    *p++ = (uint8_t)(v >> 16);
    *p++ = (uint8_t)(v >> 8);
    *p++ = (uint8_t)v;
    return p;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    int i;

    for (i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

static void tag(const rls_hkey_t *k, const uint8_t *p, size_t n,
                uint8_t out[TAG])
{
    uint8_t md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    size_t mlen = 0;
    EVP_MAC_CTX *c = k->mac;

    /* The keyed context again (a NULL key reuses its key): no algorithm
     * look-up per handle, which HMAC() does each time. */
    if (c != NULL && EVP_MAC_init(c, NULL, 0, NULL) == 1 &&
        EVP_MAC_update(c, p, n) == 1 &&
        EVP_MAC_final(c, md, &mlen, sizeof(md)) == 1 && mlen >= TAG) {
        memcpy(out, md, TAG);
        return;
    }
    HMAC(EVP_sha256(), k->k, (int)sizeof(k->k), p, n, md, &len);
    memcpy(out, md, TAG);
}

/* Keys k's reusable context; without one, tags take the slow path. */
static void mac_init(rls_hkey_t *k)
{
    static EVP_MAC *hmac;
    OSSL_PARAM params[2];
    EVP_MAC_CTX *c;

    if (k->mac != NULL) {
        EVP_MAC_CTX_free(k->mac);
        k->mac = NULL;
    }
    if (hmac == NULL && (hmac = EVP_MAC_fetch(NULL, "HMAC", NULL)) == NULL)
        return;
    if ((c = EVP_MAC_CTX_new(hmac)) == NULL)
        return;
    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
                                                 (char *)"SHA256", 0);
    params[1] = OSSL_PARAM_construct_end();
    if (EVP_MAC_init(c, k->k, sizeof(k->k), params) != 1) {
        EVP_MAC_CTX_free(c);
        return;
    }
    k->mac = c;
}

void rls_hkey_free(rls_hkey_t *k)
{
    EVP_MAC_CTX_free(k->mac);
    k->mac = NULL;
    k->set = 0;
}

size_t rls_handle_encode(const rls_handle_t *h, const rls_hkey_t *k,
                         uint8_t *out)
{
    uint8_t *p = out;
    uint32_t i;
    size_t n = HEAD + (size_t)h->nwin * WIN_BYTES + 1 + h->rule_len + 2 +
               h->key_len + TAG;

    if (n > RL_HANDLE_MAX || h->nwin > RL_ADMIT_WINDOWS_MAX ||
        h->rule_len > 255 || h->key_len > 65535)
        return 0;
    /* A decoded version 1 handle encodes back as it came (the fuzzer's
     * round trip); every handle this service issues is version 2. */
    *p++ = h->version == VERSION_MARKER ? VERSION_MARKER : VERSION;
    *p++ = h->kind;
    *p++ = h->flags;
    *p++ = h->ns;
    p = put64(p, h->id);
    p = put64(p, h->expires_at_ms);
    p = put64(p, h->decided_at_ms);
    p = put32(p, h->estimate);
    *p++ = (uint8_t)h->nwin;
    for (i = 0; i < h->nwin; i++) {
        *p++ = h->win[i].algo;
        *p++ = h->win[i].phased;
        p = put32(p, h->win[i].window_s);
        p = put64(p, h->win[i].index);
        p = put64(p, h->win[i].t_us);
    }
    *p++ = (uint8_t)h->rule_len;
    if (h->rule_len > 0)
        memcpy(p, h->rule, h->rule_len);
    p += h->rule_len;
    *p++ = (uint8_t)(h->key_len >> 8);
    *p++ = (uint8_t)h->key_len;
    memcpy(p, h->key, h->key_len);
    p += h->key_len;
    tag(k, out, (size_t)(p - out), p);
    p += TAG;
    return (size_t)(p - out);
}

int rls_handle_decode(const uint8_t *p, size_t n, const rls_hkey_t *k,
                      rls_handle_t *h, const char **why)
{
    uint8_t want[TAG];
    size_t off, need;
    uint32_t i;

    memset(h, 0, sizeof(*h));
    *why = "handle is malformed";
    if (n < HEAD + 1 + 2 + TAG || n > RL_HANDLE_MAX ||
        (p[0] != VERSION && p[0] != VERSION_MARKER))
        return RL_EINVAL;
    /* The tag first: nothing a client wrote is read before it is known
     * to be ours. */
    tag(k, p, n - TAG, want);
    if (CRYPTO_memcmp(want, p + n - TAG, TAG) != 0) {
        *why = "handle is not one this service issued (forged, changed, "
               "or from another fleet's secret)";
        return RL_EINVAL;
    }
    h->version = p[0];
    h->kind = p[1];
    h->flags = p[2];
    h->ns = p[3];
    h->id = get64(p + 4);
    h->expires_at_ms = get64(p + 12);
    h->decided_at_ms = get64(p + 20);
    h->estimate = get32(p + 28);
    h->nwin = p[32];
    off = HEAD;
    if (h->nwin > RL_ADMIT_WINDOWS_MAX ||
        (h->kind != RLS_HANDLE_RESERVATION && h->kind != RLS_HANDLE_LEASE))
        return RL_EINVAL;
    need = off + (size_t)h->nwin * WIN_BYTES + 1;
    if (need > n - TAG)
        return RL_EINVAL;
    for (i = 0; i < h->nwin; i++) {
        const uint8_t *w = p + off + (size_t)i * WIN_BYTES;
        h->win[i].algo = w[0];
        h->win[i].phased = w[1];
        h->win[i].window_s = get32(w + 2);
        h->win[i].index = get64(w + 6);
        h->win[i].t_us = get64(w + 14);
        if (h->win[i].algo >= RL_ALGO_MAX || h->win[i].window_s == 0)
            return RL_EINVAL;
    }
    off = need - 1;
    h->rule_len = p[off++];
    if (off + h->rule_len + 2 > n - TAG)
        return RL_EINVAL;
    h->rule = (const char *)p + off;
    off += h->rule_len;
    h->key_len = (size_t)p[off] << 8 | p[off + 1];
    off += 2;
    if (off + h->key_len != n - TAG || h->key_len == 0 ||
        h->key_len > RL_KEY_MAX || h->rule_len > RL_RULE_MAX)
        return RL_EINVAL;
    h->key = (const char *)p + off;
    *why = NULL;
    return RL_OK;
}

int rls_hkey_from_file(rls_hkey_t *k, const char *path, char *err,
                       size_t errlen)
{
    uint8_t buf[4096];
    FILE *f = fopen(path, "rb");
    size_t n;

    if (f == NULL) {
        snprintf(err, errlen, "--handle-secret-file: cannot read '%s'", path);
        return RL_EINVAL;
    }
    n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    if (n < 16) {
        snprintf(err, errlen,
                 "--handle-secret-file: '%s' holds %zu bytes; a secret "
                 "needs at least 16 (e.g. openssl rand -hex 32)",
                 path, n);
        return RL_EINVAL;
    }
    SHA256(buf, n, k->k);
    OPENSSL_cleanse(buf, sizeof(buf));
    mac_init(k);
    k->set = 1;
    return RL_OK;
}

int rls_hkey_random(rls_hkey_t *k)
{
    if (RAND_bytes(k->k, (int)sizeof(k->k)) != 1)
        return RL_EINVAL;
    mac_init(k);
    k->set = 1;
    return RL_OK;
}

void rls_hkey_copy(rls_hkey_t *k, const rls_hkey_t *from)
{
    memcpy(k->k, from->k, sizeof(k->k));
    mac_init(k);
    k->set = from->set;
}

void rls_hkey_from_text(rls_hkey_t *k, const char *s, size_t n)
{
    SHA256((const uint8_t *)s, n, k->k);
    mac_init(k);
    k->set = 1;
}

uint64_t rls_handle_new_id(void)
{
    /* Ids need only be unique per caller (the handle's tag is what a
     * client cannot forge): splitmix64 over a counter drawn at random once
     * per process, a bijection, so a process never repeats one, and two
     * processes collide with odds of about 2^-64 per pair of ids; each
     * thread (a loop of --threads) draws its own, as a process does. */
    static _Thread_local uint64_t state;
    static _Thread_local int seeded;
    uint64_t z;

    if (!seeded) {
        if (RAND_bytes((uint8_t *)&state, (int)sizeof(state)) != 1)
            state = (uint64_t)(uintptr_t)&state ^ 0x9e3779b97f4a7c15u;
        seeded = 1;
    }
    do {
        z = (state += 0x9e3779b97f4a7c15u);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
        z ^= z >> 31;
    } while (z == 0);
    return z;
}
