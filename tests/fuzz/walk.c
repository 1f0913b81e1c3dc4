#include "walk.h"

#include <dirent.h>
#include <stdio.h>

int rlf_walk(const char *path, int (*run)(const char *file), int *files)
{
    char sub[4096];
    struct dirent *e;
    DIR *d = opendir(path);
    int rc = 0;

    if (d == NULL) {
        (*files)++;
        return run(path);
    }
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
        (*files)++;
        rc = run(sub);
    }
    closedir(d);
    return rc;
}
