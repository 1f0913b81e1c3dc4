/* Placeholder until the metrics listener lands (issue 6): --metrics is
 * refused rather than silently ignored. */
#include "rls_server.h"

int rls_metrics_start(rls_server_t *s)
{
    (void)s;
    return UV_ENOSYS;
}

void rls_metrics_close(rls_server_t *s)
{
    (void)s;
}
