/* Reading a policy file (file_in.c): the rules file and Envoy's
 * descriptor files, at start, on --check-config and on every reload.
 *
 * The path names whatever is there when it is read, and a reload reads
 * it while the server runs: something else may have been renamed over
 * it. Only a regular file is read. It is opened without blocking (a FIFO
 * opened for reading would otherwise wait for a writer, forever) and
 * checked with fstat on that descriptor, so what is checked is what is
 * read; its size is checked before memory is reserved for it. */
#ifndef RLS_POLICY_FILE_IN_H
#define RLS_POLICY_FILE_IN_H

#include <stddef.h>
#include <stdint.h>

/* What tells a file's versions apart without reading it: inode, size and
 * modification time (all 0 when it cannot be read). A save that replaces
 * the file by rename changes the inode even within one mtime tick; a
 * symbolic link is followed, so a link switched to another file (a
 * Kubernetes ConfigMap's ..data) changes it too. */
void rls_file_signature(const char *path, uint64_t sig[4]);

/* Reads the regular file at path, of at most max bytes. Returns 0 with
 * *buf (malloc'd, NUL-terminated, the caller frees it), *len and sig (of
 * what was read); RL_EINVAL with a reason in why (one line, starting
 * with what went wrong: "not a regular file (a FIFO)", "cannot read: no
 * such file", ...), also when the file changed while it was read;
 * RL_ENOMEM. Safe on any thread. */
int rls_file_read(const char *path, size_t max, char **buf, size_t *len,
                  uint64_t sig[4], char *why, size_t whylen);

#endif
