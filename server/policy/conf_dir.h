/* --envoy-config DIR's listing (conf_dir.c; built by envoy/dir.c): a directory of descriptor files, as
 * envoy-ratelimit's runtime loader reads RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/
 * RUNTIME_APPDIRECTORY, a mounted ConfigMap most often.
 *
 * Every regular file directly in it whose name ends in .yaml or .yml is
 * one domain's file, read in the order of their names (envoy-ratelimit
 * reads every file, whatever its name, and descends into subdirectories;
 * here other names and subdirectories are passed over, which also keeps a
 * ConfigMap's ..data and ..TIMESTAMP directories from being read twice).
 * Files whose name starts with '.' are read too unless
 * --envoy-config-ignore-dotfiles (RUNTIME_IGNOREDOTFILES). A name that is
 * a symbolic link is followed (a ConfigMap's keys are links through
 * ..data); one that leads nowhere is passed over, as envoy-ratelimit
 * passes over a file it cannot read. */
#ifndef RLS_POLICY_CONF_DIR_H
#define RLS_POLICY_CONF_DIR_H

#include <stddef.h>
#include <stdint.h>


/* Entries of one directory looked at, at most (more: an error). */
#define RLS_ENVOY_DIR_ENTRIES_MAX 4096
/* Files of all the paths together, at most. */
#define RLS_ENVOY_DIR_FILES_MAX 1024

/* Whether files whose name starts with '.' are passed over (process-wide:
 * set once at start, before any load). */
void rls_envoy_dir_set_ignore_dot(int on);

/* The descriptor files of dir, sorted, each malloc'd "dir/name", into
 * *files (malloc'd; free with rls_envoy_dir_free), their number in *n.
 * Returns 0; RL_EINVAL with why (cannot be read, too many entries);
 * RL_ENOMEM. Safe on any thread. */
int rls_envoy_dir_list(const char *dir, char ***files, size_t *n, char *why,
                       size_t whylen);

void rls_envoy_dir_free(char **files, size_t n);

/* rls_file_signature, but for a directory one that changes when its set
 * of descriptor files or any of them changes: the directory's inode, a
 * hash of each file's name and signature, their number. */
void rls_path_signature(const char *path, uint64_t sig[4]);

#endif
