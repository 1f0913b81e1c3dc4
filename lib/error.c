#include "rl_error.h"

const char *rl_strerror(int code)
{
    switch (code) {
#define RL_ERRNO_CASE(name, value, text)                                      \
    case RL_##name:                                                           \
        return text;
        RL_ERRNO_MAP(RL_ERRNO_CASE)
#undef RL_ERRNO_CASE
    }
    return "unknown error";
}
