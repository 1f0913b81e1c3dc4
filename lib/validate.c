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

int rl_check_validate(rl_check_t *c)
{
    size_t i;

    if (c->key_len == 0)
        return RL_EKEYEMPTY;
    if (c->key_len > RL_KEY_MAX)
        return RL_EKEYLONG;
    if (memchr(c->key, '\0', c->key_len) != NULL)
        return RL_EKEYNUL;

    if (c->rule_len > 0) {
        if (c->rule_len > RL_RULE_MAX)
            return RL_ERULELONG;
        for (i = 0; i < c->rule_len; i++)
            if (!rule_byte_ok((unsigned char)c->rule[i]))
                return RL_ERULEBAD;
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
