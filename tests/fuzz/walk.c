#include "walk.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>

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

size_t rlf_mutate(unsigned char *buf, size_t n, size_t cap, size_t edits,
                  const char *alphabet, unsigned (*rnd)(void))
{
    size_t k, na = strlen(alphabet);

    for (k = 0; k < edits && n > 1; k++) {
        size_t at = 1 + rnd() % (n - 1);
        switch (rnd() % 4) {
        case 0:
            buf[at] ^= (unsigned char)(1u << (rnd() % 8));
            break;
        case 1:
            buf[at] = (unsigned char)alphabet[rnd() % na];
            break;
        case 2:
            memmove(buf + at, buf + at + 1, n - at - 1);
            n--;
            break;
        default:
            if (n < cap) {
                memmove(buf + at + 1, buf + at, n - at);
                n++;
            }
        }
    }
    return n;
}

int rlf_read(const char *path, unsigned char *buf, size_t cap, size_t *n)
{
    FILE *f = fopen(path, "rb");

    if (f == NULL) {
        perror(path);
        return 1;
    }
    *n = fread(buf, 1, cap, f);
    fclose(f);
    return 0;
}

unsigned rlf_rand(void)
{
    static unsigned seed = 20261123;

    seed = seed * 1103515245u + 12345u;
    return seed >> 8;
}
