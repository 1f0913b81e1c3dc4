/* Small OpenSSL helpers the two TLS sides share (ossl.h). */
#include "base/ossl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>

#include "rl_error.h"

int rls_ossl_no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)u;
    return 0;
}

const char *rls_ossl_reason(const char *dflt)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e != 0 ? ERR_reason_error_string(e) : NULL;

    return r != NULL ? r : dflt;
}

int rls_ossl_readable(const char *flag, const char *path, char *err,
                      size_t errlen)
{
    FILE *f = fopen(path, "r");

    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot read '%s': %s", flag, path,
                 strerror(errno));
        return RL_EINVAL;
    }
    fclose(f);
    return 0;
}
