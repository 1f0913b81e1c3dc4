/* Small OpenSSL helpers the two TLS sides share: the client under the
 * Redis transport (store/redis_tls.c) and the server under our listeners
 * (net/tls.c). */
#ifndef RLS_OSSL_H
#define RLS_OSSL_H

#include <stddef.h>

/* A passphrase callback that gives none: a key file protected by one fails
 * to load instead of OpenSSL prompting on the terminal of a daemon. */
int rls_ossl_no_passphrase(char *buf, int size, int rwflag, void *u);

/* OpenSSL's reason for the last failure on this thread, or dflt. */
const char *rls_ossl_reason(const char *dflt);

/* 0 when path can be opened for reading; else RL_EINVAL with "FLAG:
 * cannot read 'PATH': why" in err. */
int rls_ossl_readable(const char *flag, const char *path, char *err,
                      size_t errlen);

#endif
