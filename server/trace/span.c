/* A span's outcome names: see span.h. */
#include "trace/span.h"

const char *rls_trace_outcome_name(int outcome)
{
    static const char *const names[RLS_TRACE_OUTS] = {
        "ok",          "over_limit", "shadow_refused",
        "failed_open", "error",      "refused"};

    return outcome >= 0 && outcome < RLS_TRACE_OUTS ? names[outcome] : "";
}
