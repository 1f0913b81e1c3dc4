/* The fleet's handle secret, kept in the store; see hsecret.h. */
#include "hsecret.h"

#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <openssl/rand.h>

#include "log.h"
#include "rl_error.h"

#define EVERY_MS 1000

static void send_set(rls_hsecret_t *h);

static void on_timer(uv_timer_t *t)
{
    send_set((rls_hsecret_t *)t->data);
}

/* The next round, a second from now (a retry, or the next check). */
static void again(rls_hsecret_t *h)
{
    if (!h->closed)
        uv_timer_start(&h->timer, on_timer, EVERY_MS, 0);
}

static void on_get(void *data, void *reply)
{
    rls_hsecret_t *h = data;
    const redisReply *r = reply;

    h->waiting = 0;
    if (h->closed)
        return;
    if (r != NULL && r->type == REDIS_REPLY_STRING && r->len >= 32 &&
        r->len < sizeof(h->cur) &&
        (!h->loaded || r->len != h->cur_len ||
         memcmp(r->str, h->cur, r->len) != 0)) {
        /* The fleet's, first or changed (the store lost its copy and
         * another instance's proposal got there first). */
        memcpy(h->cur, r->str, r->len);
        h->cur[r->len] = '\0';
        h->cur_len = r->len;
        rls_hkey_from_text(h->out, r->str, r->len);
        if (h->loaded)
            RLS_WARN("handle secret changed in the store; adopted", " key=%s",
                     h->key);
        else
            RLS_INFO("handle secret loaded", " key=%s", h->key);
        h->loaded = 1;
    }
    again(h);
}

static void on_set(void *data, void *reply)
{
    rls_hsecret_t *h = data;
    const redisReply *r = reply;
    const char *argv[2] = {"GET", h->key};
    size_t lens[2] = {3, strlen(h->key)};

    h->waiting = 0;
    if (h->closed)
        return;
    /* OK (ours) or nil (another instance's was there first): read it. */
    if (r == NULL || r->type == REDIS_REPLY_ERROR ||
        h->store->v->command(h->store, 2, argv, lens, on_get, h) != RL_OK) {
        again(h);
        return;
    }
    h->waiting = 1;
}

static void send_set(rls_hsecret_t *h)
{
    const char *argv[4] = {"SET", h->key, h->cur, "NX"};
    size_t lens[4] = {3, strlen(h->key), h->cur_len, 2};

    if (h->closed || h->waiting)
        return;
    if (h->store->v->command(h->store, 4, argv, lens, on_set, h) != RL_OK) {
        again(h);
        return;
    }
    h->waiting = 1;
}

int rls_hsecret_start(rls_hsecret_t *h, uv_loop_t *loop, rls_store_t *store,
                      const char *prefix, size_t prefix_len, rls_hkey_t *out)
{
    uint8_t raw[32];
    size_t i;

    memset(h, 0, sizeof(*h));
    if (RAND_bytes(raw, (int)sizeof(raw)) != 1)
        return RL_EINVAL;
    for (i = 0; i < sizeof(raw); i++)
        snprintf(h->cur + 2 * i, 3, "%02x", raw[i]);
    h->cur_len = 2 * sizeof(raw);
    snprintf(h->key, sizeof(h->key), "%.*shandle-secret", (int)prefix_len,
             prefix);
    h->store = store;
    h->out = out;
    uv_timer_init(loop, &h->timer);
    uv_unref((uv_handle_t *)&h->timer);
    h->timer.data = h;
    h->started = 1;
    send_set(h);
    return RL_OK;
}

void rls_hsecret_close(rls_hsecret_t *h)
{
    if (!h->started)
        return;
    h->started = 0;
    h->closed = 1;
    uv_close((uv_handle_t *)&h->timer, NULL);
}
