/* A directory of descriptor files, listed and signed; see conf_dir.h. */
#include "policy/conf_dir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "policy/file_in.h"
#include "rl_error.h"

static int ignore_dot;

void rls_envoy_dir_set_ignore_dot(int on)
{
    ignore_dot = on != 0;
}

/* Whether a directory entry is one that is read: its name. */
static int wanted(const char *name)
{
    size_t n = strlen(name);

    if (name[0] == '.' && (ignore_dot || strcmp(name, ".") == 0 ||
                           strcmp(name, "..") == 0))
        return 0;
    return (n > 5 && strcmp(name + n - 5, ".yaml") == 0) ||
           (n > 4 && strcmp(name + n - 4, ".yml") == 0);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void rls_envoy_dir_free(char **files, size_t n)
{
    size_t i;

    for (i = 0; files != NULL && i < n; i++)
        free(files[i]);
    free(files);
}

int rls_envoy_dir_list(const char *dir, char ***files, size_t *n, char *why,
                       size_t whylen)
{
    struct dirent *de;
    struct stat st;
    size_t cap = 0, seen = 0, dlen = strlen(dir);
    char **v = NULL;
    DIR *d;

    *files = NULL;
    *n = 0;
    if ((d = opendir(dir)) == NULL) {
        snprintf(why, whylen, "cannot read the directory: %s",
                 errno == ENOENT ? "no such directory" : strerror(errno));
        return RL_EINVAL;
    }
    while ((de = readdir(d)) != NULL) {
        char *p;

        if (++seen > RLS_ENVOY_DIR_ENTRIES_MAX) {
            snprintf(why, whylen, "more than %d entries in the directory",
                     RLS_ENVOY_DIR_ENTRIES_MAX);
            goto fail;
        }
        if (!wanted(de->d_name))
            continue;
        if ((p = malloc(dlen + strlen(de->d_name) + 2)) == NULL)
            goto nomem;
        sprintf(p, "%s%s%s", dir, dlen > 0 && dir[dlen - 1] == '/' ? "" : "/",
                de->d_name);
        /* Through links; a link to nothing, a directory, a FIFO: passed
         * over. */
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(p);
            continue;
        }
        if (*n == RLS_ENVOY_DIR_FILES_MAX) {
            free(p);
            snprintf(why, whylen, "more than %d descriptor files",
                     RLS_ENVOY_DIR_FILES_MAX);
            goto fail;
        }
        if (*n == cap) {
            char **nv;
            cap = cap ? 2 * cap : 16;
            if ((nv = realloc(v, cap * sizeof(*v))) == NULL) {
                free(p);
                goto nomem;
            }
            v = nv;
        }
        v[(*n)++] = p;
    }
    closedir(d);
    if (*n > 1)
        qsort(v, *n, sizeof(*v), by_name);
    *files = v;
    return RL_OK;
nomem:
    closedir(d);
    rls_envoy_dir_free(v, *n);
    *n = 0;
    return RL_ENOMEM;
fail:
    closedir(d);
    rls_envoy_dir_free(v, *n);
    *n = 0;
    return RL_EINVAL;
}

/* FNV-1a, 64 bits, over len bytes. */
static uint64_t fnv(uint64_t h, const void *p, size_t len)
{
    const unsigned char *b = p;
    size_t i;

    for (i = 0; i < len; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

void rls_path_signature(const char *path, uint64_t sig[4])
{
    struct stat st;
    char **files = NULL, why[128];
    uint64_t h = 0xcbf29ce484222325ull, fs[4];
    size_t n = 0, i;
    int rc;

    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        rls_file_signature(path, sig);
        return;
    }
    rc = rls_envoy_dir_list(path, &files, &n, why, sizeof(why));
    for (i = 0; i < n; i++) {
        h = fnv(h, files[i], strlen(files[i]) + 1);
        rls_file_signature(files[i], fs);
        h = fnv(h, fs, sizeof(fs));
    }
    rls_envoy_dir_free(files, n);
    sig[0] = (uint64_t)st.st_ino | 1; /* never 0: 0 is "missing" */
    sig[1] = h;
    sig[2] = (uint64_t)n;
    sig[3] = rc == RL_OK ? 1 : 2; /* an unreadable directory differs */
}
