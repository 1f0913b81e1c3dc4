/* Replay drivers' corpus walk: a path that is a directory runs each file
 * in it (hidden ones skipped), any other path runs as one file. */
#ifndef RL_FUZZ_WALK_H
#define RL_FUZZ_WALK_H

#include <stddef.h>

/* Calls run(file) for path or each file under it, counting them in
 * *files; stops at the first run that returns non-zero and returns that. */
int rlf_walk(const char *path, int (*run)(const char *file), int *files);

/* Reads at most cap bytes of path into buf, their count in *n. Returns 0,
 * or 1 (said on stderr) when it cannot be opened. */
int rlf_read(const char *path, unsigned char *buf, size_t cap, size_t *n);

/* Applies `edits` random edits to buf[1 .. n) (byte 0 is left alone: the
 * drivers use it to pick a mode): flip a bit, set a byte from alphabet,
 * delete a byte, or insert a copy while n stays below cap, drawing from
 * rnd (rlf_rand, or a driver's own repeatable generator).
 * Returns the new length. */
size_t rlf_mutate(unsigned char *buf, size_t n, size_t cap, size_t edits,
                  const char *alphabet, unsigned (*rnd)(void));

/* The drivers' generator: a fixed-seed LCG, so every replay run makes
 * the same inputs. */
unsigned rlf_rand(void);

#endif
