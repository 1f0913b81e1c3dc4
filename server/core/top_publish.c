/* Publishing the top offenders to Redis: see top_publish.h. */
#include "core/top_publish.h"

#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "base/log.h"
#include "rl_error.h"

static void on_written(void *data, void *reply)
{
    rls_top_pub_t *p = data;
    const redisReply *r = reply;

    p->pending--;
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        if (p->failures++ == 0)
            RLS_WARN("top offenders: Redis refused their key (rl-ctl top "
                     "will not see this instance's)",
                     " error=\"%s\"", r != NULL ? r->str : "no reply");
    }
}

static void on_timer(uv_timer_t *t)
{
    rls_top_pub_t *p = t->data;
    char(*names)[RL_RULE_MAX + 1] = NULL;
    char key[256 + RL_RULE_MAX + 160 + 8], ttl[24];
    uint64_t now, since;
    size_t n = 0, i;

    if (p->closed)
        return;
    if (p->pending > 0) {
        p->skipped++;
        return;
    }
    now = p->store->v->now_ms(p->store);
    if (rls_top_names(p->top, now, &names, &n) != RL_OK)
        return;
    snprintf(ttl, sizeof(ttl), "%d", RLS_TOP_TTL_MS);
    for (i = 0; i < n; i++) {
        rl_topk_sum_t s;
        const char *argv[5];
        size_t lens[5];
        if (rls_top_read(p->top, names[i], strlen(names[i]), now, p->top->k, &s,
                         &since) != RL_OK)
            break;
        rl_buf_reset(&p->buf);
        if (rl_topk_encode(&s, since, now, &p->buf) != RL_OK) {
            rl_topk_sum_free(&s);
            break;
        }
        rl_topk_sum_free(&s);
        snprintf(key, sizeof(key), "%stop:%s:%s", p->prefix, names[i],
                 p->instance);
        argv[0] = "SET";
        argv[1] = key;
        argv[2] = (const char *)rl_buf_rptr(&p->buf);
        argv[3] = "PX";
        argv[4] = ttl;
        lens[0] = 3;
        lens[1] = strlen(key);
        lens[2] = rl_buf_len(&p->buf);
        lens[3] = 2;
        lens[4] = strlen(ttl);
        /* The store copies the command before this returns. */
        if (p->store->v->command(p->store, 5, argv, lens, on_written, p) !=
            RL_OK)
            break; /* not connected: the next round */
        p->pending++;
        p->written++;
    }
    free(names);
}

void rls_top_pub_start(rls_top_pub_t *p, uv_loop_t *loop, rls_store_t *store,
                       rls_top_t *top, const char *prefix, const char *instance)
{
    int rc;

    memset(p, 0, sizeof(*p));
    if (top == NULL || store->v->command == NULL)
        return;
    p->store = store;
    p->top = top;
    snprintf(p->prefix, sizeof(p->prefix), "%s", prefix);
    snprintf(p->instance, sizeof(p->instance), "%s", instance);
    /* A rule's text: k entries of a 128-byte key and three numbers. */
    rl_buf_init(&p->buf, (size_t)top->k * (RL_TOPK_KEY_MAX + 80) + 128);
    if ((rc = uv_timer_init(loop, &p->timer)) != 0) {
        RLS_WARN("top offenders: no timer to publish them (rl-ctl top will "
                 "not see this instance's)",
                 " error=\"%s\"", uv_strerror(rc));
        rl_buf_free(&p->buf);
        return;
    }
    p->timer.data = p;
    p->started = 1;
    uv_timer_start(&p->timer, on_timer, RLS_TOP_PUBLISH_MS, RLS_TOP_PUBLISH_MS);
}

static void on_closed(uv_handle_t *h)
{
    rls_top_pub_t *p = h->data;

    rl_buf_free(&p->buf);
}

void rls_top_pub_close(rls_top_pub_t *p)
{
    if (!p->started || p->closed)
        return;
    p->closed = 1;
    uv_close((uv_handle_t *)&p->timer, on_closed);
}
