/* Error codes shared by lib/, server/ and client/.
 *
 * Functions return 0 (RL_OK) on success and a negative RL_E* code otherwise.
 * "Need more bytes" (RL_EAGAIN) is a status of its own, not a failure: an
 * incremental decoder returns it and resumes when more input arrives. */
#ifndef RL_ERROR_H
#define RL_ERROR_H

#define RL_ERRNO_MAP(X)                                                        \
    X(OK, 0, "success")                                                        \
    X(EAGAIN, -1, "need more bytes")                                           \
    X(ENOMEM, -2, "out of memory")                                             \
    X(EFULL, -3, "buffer is at its size cap")                                  \
    X(EFRAMEFLAG, -4, "frame flag byte is not 0 (compression unsupported)")    \
    X(EFRAMESIZE, -5, "frame length exceeds the configured maximum")           \
    X(EDECODE, -6, "payload is not a valid protobuf message")                  \
    X(EKEYEMPTY, -7, "key is empty")                                           \
    X(EKEYLONG, -8, "key is longer than 512 bytes")                            \
    X(EKEYNUL, -9, "key contains a NUL byte")                                  \
    X(ENOLIMIT, -10, "request has neither limit and window_seconds nor rule")  \
    X(EWINDOW, -11, "window_seconds must be > 0 when limit is set")            \
    X(EWINDOWMAX, -12, "window_seconds exceeds the maximum of 31622400")       \
    X(ELIMITMAX, -13, "limit exceeds 2^63-1 (counters are signed 64-bit)")     \
    X(ERULELONG, -14, "rule name is longer than 128 bytes")                    \
    X(ERULEBAD, -15, "rule name contains a byte outside [A-Za-z0-9_.:-]")      \
    X(EBOTH, -16, "set either limit/window_seconds or rule, not both")         \
    X(ENORULE, -17, "unknown rule")                                            \
    X(EINVAL, -18, "invalid argument")                                         \
    X(ETIMEDOUT, -19, "timed out")                                             \
    X(ECLOSED, -20, "connection closed")                                       \
    X(ECANCELED, -21, "canceled")                                              \
    X(ESTORE, -22, "store unavailable")                                        \
    X(EADDR, -23, "invalid address")                                           \
    X(EIO, -24, "I/O error")                                                   \
    X(EBUSY, -25, "too many requests in flight")                               \
    X(ESHUTDOWN, -26, "server is shutting down")                               \
    X(ELIMIT, -27, "limit must be > 0 when window_seconds is set")             \
    X(EINLINE, -28, "the request's own limit is refused by this server")       \
    X(ETLS, -29, "TLS failed (certificate, server name or handshake)")         \
    X(ELEVELS, -30,                                                            \
      "levels: 1 to 8, each a key and a rule, a CHECK with no "                \
      "key, rule, limit or window_seconds of its own")                         \
    X(ELEVELTWICE, -31, "levels: the same key and rule twice")

enum {
#define RL_ERRNO_ENUM(name, value, text) RL_##name = (value),
    RL_ERRNO_MAP(RL_ERRNO_ENUM)
#undef RL_ERRNO_ENUM
};

/* Returns a static, human-readable description of an RL_* code; never NULL.
 * Unknown codes give "unknown error". */
const char *rl_strerror(int code);

#endif
