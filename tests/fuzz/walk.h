/* Replay drivers' corpus walk: a path that is a directory runs each file
 * in it (hidden ones skipped), any other path runs as one file. */
#ifndef RL_FUZZ_WALK_H
#define RL_FUZZ_WALK_H

/* Calls run(file) for path or each file under it, counting them in
 * *files; stops at the first run that returns non-zero and returns that. */
int rlf_walk(const char *path, int (*run)(const char *file), int *files);

#endif
