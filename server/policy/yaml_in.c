#include "policy/yaml_in.h"

#include <stdio.h>
#include <string.h>

#include "rl_error.h"

int rls_yaml_in_open(rls_yaml_in_t *y, const char *buf, size_t len,
                     int depth_max, rls_yaml_stop_fn on_stop, void *arg)
{
    memset(y, 0, sizeof(*y));
    y->on_stop = on_stop;
    y->arg = arg;
    if (!yaml_parser_initialize(&y->parser))
        return RL_ENOMEM;
    yaml_parser_set_input_string(&y->parser, (const unsigned char *)buf, len);
    y->depth_max = depth_max;
    return RL_OK;
}

void rls_yaml_in_close(rls_yaml_in_t *y)
{
    if (y->have)
        yaml_event_delete(&y->ev);
    y->have = 0;
    yaml_parser_delete(&y->parser);
}

int rls_yaml_in_line(const rls_yaml_in_t *y)
{
    return (int)y->ev.start_mark.line + 1;
}

/* Stops the walk, saying why (once: a stopped walk says nothing more). */
static int stop(rls_yaml_in_t *y, int line, const char *why, int nomem)
{
    y->broken = 1;
    y->on_stop(y->arg, line, why, nomem);
    return RL_EINVAL;
}

int rls_yaml_in_next(rls_yaml_in_t *y)
{
    char why[160];

    if (y->broken)
        return RL_EINVAL;
    if (y->have)
        yaml_event_delete(&y->ev);
    y->have = 0;
    if (!yaml_parser_parse(&y->parser, &y->ev)) {
        snprintf(why, sizeof(why), "not valid YAML: %s%s%s",
                 y->parser.problem ? y->parser.problem : "parse error",
                 y->parser.context ? " " : "",
                 y->parser.context ? y->parser.context : "");
        return stop(y, (int)(y->parser.problem_mark.line + 1), why,
                    y->parser.error == YAML_MEMORY_ERROR);
    }
    y->have = 1;
    switch (y->ev.type) {
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT:
        if (++y->depth > y->depth_max) {
            snprintf(why, sizeof(why), "nested deeper than %d levels",
                     y->depth_max);
            return stop(y, rls_yaml_in_line(y), why, 0);
        }
        break;
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        y->depth--;
        break;
    case YAML_ALIAS_EVENT:
        return stop(y, rls_yaml_in_line(y),
                    "aliases (*name) are not supported", 0);
    case YAML_NO_EVENT:
        /* Past the end: a walk that lost its place must stop (libyaml
         * hands out empty events forever). Nothing to say: the walk
         * reported what it expected before. */
        y->broken = 1;
        return RL_EINVAL;
    default:
        break;
    }
    return RL_OK;
}

int rls_yaml_in_skip(rls_yaml_in_t *y)
{
    int depth = y->depth;

    if (y->ev.type != YAML_SEQUENCE_START_EVENT &&
        y->ev.type != YAML_MAPPING_START_EVENT)
        return RL_OK;
    while (y->depth >= depth)
        if (rls_yaml_in_next(y) != RL_OK)
            return RL_EINVAL;
    return RL_OK;
}
