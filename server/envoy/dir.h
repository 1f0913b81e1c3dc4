/* --envoy-config paths (files and directories, policy/conf_dir.h) built
 * into one descriptor tree. */
#ifndef RLS_ENVOY_DIR_H
#define RLS_ENVOY_DIR_H

#include <stddef.h>

#include "envoy/conf.h"
#include "policy/conf_dir.h"
#include "policy/loader.h"

/* Which of paths are directories now, into isdir (npaths bytes, 1 for a
 * directory): what a path is when the server starts is what it stays. */
void rls_envoy_dir_kinds(const char *const *paths, size_t npaths,
                         unsigned char *isdir);

/* rls_envoy_conf_build over paths, those with isdir[i] directories (each
 * replaced by its files; an empty directory adds none); isdir NULL: as
 * rls_envoy_dir_kinds says now. A path given as a file that has become a
 * directory is an error, as before ("not a regular file"). Same
 * returns. */
int rls_envoy_conf_build_paths(const char *const *paths, size_t npaths,
                               const unsigned char *isdir,
                               rls_envoy_conf_t **out, rls_diag_t *diag);

#endif
