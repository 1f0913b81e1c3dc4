/* Reading a policy file; see file_in.h. */
#include "policy/file_in.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rl_error.h"

static void sig_of(const struct stat *st, uint64_t sig[4])
{
    sig[0] = (uint64_t)st->st_ino;
    sig[1] = (uint64_t)st->st_size;
    sig[2] = (uint64_t)st->st_mtim.tv_sec;
    sig[3] = (uint64_t)st->st_mtim.tv_nsec;
}

void rls_file_signature(const char *path, uint64_t sig[4])
{
    struct stat st;

    memset(sig, 0, 4 * sizeof(sig[0]));
    if (stat(path, &st) == 0)
        sig_of(&st, sig);
}

static const char *kind(mode_t m)
{
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISSOCK(m) ? "a socket"
           : S_ISCHR(m) || S_ISBLK(m) ? "a device"
                                      : "neither file nor directory";
}

int rls_file_read(const char *path, size_t max, char **buf, size_t *len,
                  uint64_t sig[4], char *why, size_t whylen)
{
    struct stat st, after;
    size_t got = 0;
    char *b = NULL;
    int fd, rc = RL_EINVAL;

    *buf = NULL;
    *len = 0;
    memset(sig, 0, 4 * sizeof(sig[0]));
    fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        /* Opening a socket fails with ENXIO: still "not a regular file". */
        snprintf(why, whylen, "%s",
                 errno == ENOENT || errno == ENOTDIR
                     ? "cannot read: no such file"
                 : errno == EACCES || errno == EPERM
                     ? "cannot read: permission denied"
                 : errno == ENXIO ? "not a regular file (a socket)"
                                  : "cannot read");
        return RL_EINVAL;
    }
    if (fstat(fd, &st) != 0) {
        snprintf(why, whylen, "cannot read");
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, whylen, "not a regular file (%s)", kind(st.st_mode));
        goto fail;
    }
    if ((uint64_t)st.st_size > max) {
        snprintf(why, whylen, "not a regular file of at most %zu MiB",
                 max >> 20);
        goto fail;
    }
    if ((b = malloc((size_t)st.st_size + 1)) == NULL) {
        rc = RL_ENOMEM;
        goto fail;
    }
    /* Up to the size checked, even if the file grows meanwhile. */
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, b + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(why, whylen, "cannot read");
            goto fail;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    /* Written to while read: what was read may be half of one version
     * and half of the next. */
    if (fstat(fd, &after) != 0 || got != (size_t)st.st_size ||
        after.st_size != st.st_size ||
        after.st_mtim.tv_sec != st.st_mtim.tv_sec ||
        after.st_mtim.tv_nsec != st.st_mtim.tv_nsec) {
        snprintf(why, whylen, "changed while it was read");
        goto fail;
    }
    close(fd);
    b[got] = '\0';
    sig_of(&st, sig);
    *buf = b;
    *len = got;
    return RL_OK;

fail:
    free(b);
    close(fd);
    return rc;
}
