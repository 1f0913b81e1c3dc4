/* --envoy-config DIR built into one tree; see dir.h. */
#include "envoy/dir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "policy/conf_dir.h"
#include "policy/file_in.h"
#include "rl_error.h"

void rls_envoy_dir_kinds(const char *const *paths, size_t npaths,
                         unsigned char *isdir)
{
    struct stat st;
    size_t i;

    for (i = 0; i < npaths; i++)
        isdir[i] = stat(paths[i], &st) == 0 && S_ISDIR(st.st_mode);
}

int rls_envoy_conf_build_paths(const char *const *paths, size_t npaths,
                               const unsigned char *isdir_in,
                               rls_envoy_conf_t **out, rls_diag_t *diag)
{
    const char **all = NULL;
    char ***lists = NULL, why[160];
    size_t *counts = NULL, i, k, total = 0;
    unsigned char *isdir = NULL;
    int rc = RL_ENOMEM;

    *out = NULL;
    memset(diag, 0, sizeof(*diag));
    lists = calloc(npaths ? npaths : 1, sizeof(*lists));
    counts = calloc(npaths ? npaths : 1, sizeof(*counts));
    isdir = calloc(npaths ? npaths : 1, 1);
    if (lists == NULL || counts == NULL || isdir == NULL)
        goto out;
    if (isdir_in != NULL)
        memcpy(isdir, isdir_in, npaths);
    else
        rls_envoy_dir_kinds(paths, npaths, isdir);
    for (i = 0; i < npaths; i++) {
        if (!isdir[i]) {
            total++;
            continue;
        }
        rc = rls_envoy_dir_list(paths[i], &lists[i], &counts[i], why,
                                sizeof(why));
        if (rc == RL_EINVAL) {
            rls_diag_add(diag, paths[i], 0, "%s", why);
            goto out;
        }
        if (rc != RL_OK)
            goto out;
        total += counts[i];
    }
    rc = RL_ENOMEM;
    if (total > RLS_ENVOY_DIR_FILES_MAX) {
        rls_diag_add(diag, paths[0], 0, "more than %d descriptor files",
                     RLS_ENVOY_DIR_FILES_MAX);
        rc = RL_EINVAL;
        goto out;
    }
    if ((all = calloc(total ? total : 1, sizeof(*all))) == NULL)
        goto out;
    for (i = 0, total = 0; i < npaths; i++) {
        if (!isdir[i]) {
            all[total++] = paths[i];
            continue;
        }
        for (k = 0; k < counts[i]; k++)
            all[total++] = lists[i][k];
    }
    rc = rls_envoy_conf_build(all, NULL, NULL, total, out, diag);
out:
    for (i = 0; lists != NULL && i < npaths; i++)
        rls_envoy_dir_free(lists[i], counts[i]);
    free(lists);
    free(counts);
    free(isdir);
    free(all);
    return rc;
}
