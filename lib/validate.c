#include "rl_validate.h"

#include <stdint.h>
#include <string.h>

#include "rl_error.h"
#include "rl_window.h"

static int rule_byte_ok(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == ':' ||
           ch == '-';
}

static int key_check(const char *key, size_t len)
{
    if (len == 0)
        return RL_EKEYEMPTY;
    if (len > RL_KEY_MAX)
        return RL_EKEYLONG;
    if (memchr(key, '\0', len) != NULL)
        return RL_EKEYNUL;
    return RL_OK;
}

static int rule_check(const char *rule, size_t len)
{
    size_t i;

    if (len > RL_RULE_MAX)
        return RL_ERULELONG;
    for (i = 0; i < len; i++)
        if (!rule_byte_ok((unsigned char)rule[i]))
            return RL_ERULEBAD;
    return RL_OK;
}

/* A request of levels: 1 to RL_LEVELS_MAX of them, each a valid key and a
 * rule, no (key, rule) twice, a plain check with nothing of its own. */
static int levels_check(const rl_check_t *c)
{
    uint32_t i, j;
    int rc;

    if (c->nlevels > RL_LEVELS_MAX || c->key_len != 0 || c->rule_len != 0 ||
        c->limit != 0 || c->window_s != 0 || c->op != RL_OP_CHECK)
        return RL_ELEVELS;
    for (i = 0; i < c->nlevels; i++) {
        const rl_level_t *l = &c->levels[i];
        if ((rc = key_check(l->key, l->key_len)) != RL_OK)
            return rc;
        if (l->rule_len == 0)
            return RL_ELEVELS;
        if ((rc = rule_check(l->rule, l->rule_len)) != RL_OK)
            return rc;
        for (j = 0; j < i; j++)
            if (c->levels[j].key_len == l->key_len &&
                c->levels[j].rule_len == l->rule_len &&
                memcmp(c->levels[j].key, l->key, l->key_len) == 0 &&
                memcmp(c->levels[j].rule, l->rule, l->rule_len) == 0)
                return RL_ELEVELTWICE;
    }
    return RL_OK;
}

int rl_check_validate(rl_check_t *c)
{
    int rc;

    if (c->nlevels > 0) {
        if ((rc = levels_check(c)) != RL_OK)
            return rc;
        if (c->cost == 0)
            c->cost = 1;
        return RL_OK;
    }
    if ((rc = key_check(c->key, c->key_len)) != RL_OK)
        return rc;

    if (c->rule_len > 0) {
        if ((rc = rule_check(c->rule, c->rule_len)) != RL_OK)
            return rc;
        if (c->limit != 0 || c->window_s != 0)
            return RL_EBOTH;
    } else {
        if (c->limit == 0 && c->window_s == 0)
            return RL_ENOLIMIT;
        if (c->limit == 0)
            return RL_ELIMIT;
        if (c->window_s == 0)
            return RL_EWINDOW;
        if (c->window_s > RL_WINDOW_MAX_S)
            return RL_EWINDOWMAX;
        if (c->limit > INT64_MAX)
            return RL_ELIMITMAX;
    }

    if (c->cost == 0)
        c->cost = 1;
    return RL_OK;
}
