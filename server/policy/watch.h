/* Watching policy files for changes (watch.c): the rules file (rules_reload.c)
 * and the --envoy-config files (envoy/reload.c) alike.
 *
 * Each file's directory is watched, not the file: editors and config
 * managers replace a file by renaming a new one over it, and Kubernetes
 * updates a mounted ConfigMap by switching the `..data` symbolic link
 * the file's path goes through; a watch on the old inode, or one that
 * heard only events named after the file, sees neither. So any event in
 * the directory is a reason to look: the file's signature (inode, size,
 * mtime, through any links; file_in.h) says whether it changed.
 *
 * A changed file is acted on only once it has settled: its signature
 * unchanged for settle_ms (a burst of events is first debounced). A file
 * written in place is read whole, not as the half written so far, unless
 * its writer pauses longer than that; writing aside and renaming over is
 * the safe way (said in the docs). A file gone (mid-rename) is left
 * alone: whatever is in force stays. */
#ifndef RLS_POLICY_WATCH_H
#define RLS_POLICY_WATCH_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

/* A burst of events is looked at once it has been quiet this long. */
#define RLS_WATCH_DEBOUNCE_MS 50

typedef struct rls_watch_s rls_watch_t;

/* The files changed and have settled; sigs[i] is file i's signature (also
 * what rls_watch_seen records). Called on the loop. */
typedef void (*rls_watch_fn)(void *arg, const uint64_t (*sigs)[4]);

typedef struct rls_watch_dir_s {
    uv_fs_event_t ev;
    rls_watch_t *w;
    size_t i;    /* the file it is the directory of */
    char *dir;
    int started; /* the handle is initialized (and closes) */
} rls_watch_dir_t;

struct rls_watch_s {
    uv_loop_t *loop;
    const char *const *paths;
    size_t n;
    uint64_t settle_ms;
    rls_watch_fn on_change;
    void *arg;
    uv_timer_t timer;
    rls_watch_dir_t *dirs; /* one per file */
    uint64_t (*seen)[4];   /* per file: the version last acted on */
    uint64_t (*cand)[4];   /* per file: the version settling */
    uint64_t cand_since;   /* loop time when cand was last seen change */
    int settling;
    int open;   /* handles not closed yet (the timer and the dirs) */
    int closed; /* rls_watch_close was called */
    void (*on_closed)(void *arg);
    void *closed_arg;
};

/* Starts watching n files (paths must outlive w). seen (may be NULL: not
 * read yet) is the signature of each file as last read: the files are
 * compared with it once at once, so a change made before the watch began
 * is acted on too. Returns 0, or RL_ENOMEM (nothing started; nothing to
 * close). A directory that cannot be watched is logged as a warning, and
 * the others are still watched. */
int rls_watch_start(rls_watch_t *w, uv_loop_t *loop,
                    const char *const *paths, size_t n,
                    const uint64_t (*seen)[4], uint64_t settle_ms,
                    rls_watch_fn on_change, void *arg);

/* The files were read (on SIGHUP, say) as of sigs: those versions are not
 * acted on again. */
void rls_watch_seen(rls_watch_t *w, const uint64_t (*sigs)[4]);

/* Closes the handles; on_closed(arg) (may be NULL) is called once they
 * are, and w's memory is then the caller's again. Idempotent. */
void rls_watch_close(rls_watch_t *w, void (*on_closed)(void *arg),
                     void *arg);

#endif
