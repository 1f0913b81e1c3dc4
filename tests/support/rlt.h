/* Test support: free loopback ports, a private redis-server per test, child
 * processes stopped by pid, and waits on conditions with a deadline (never
 * sleep-and-hope). Everything binds to 127.0.0.1 only. */
#ifndef RLT_H
#define RLT_H

#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "rl_clock.h"

typedef struct rlt_redis_s {
    pid_t pid;
    int port;
    char dir[128]; /* private working directory, removed by stop */
} rlt_redis_t;

/* Milliseconds on the monotonic clock. */
static inline uint64_t rlt_mono_ms(void)
{
    return rl_mono_ms();
}

/* A TCP port on 127.0.0.1 for a server that cannot say which port it
 * bound (redis-server...) or for a port where nothing must listen: free
 * now, outside the system's ephemeral range (so no outgoing connection of
 * any process takes it), and reserved for this process until it exits: a
 * lock file in $RLT_PORT_DIR (default /tmp/rlt-ports) keeps every other
 * test process from getting it, and this one never gets it twice. Our own
 * servers listen on port 0 and report the port instead (see
 * rlt_server_start). Returns the port or RL_EIO. */
int rlt_port_reserve(void);

/* Sleeps ms milliseconds (for polls between deadline checks). */
void rlt_nap_ms(int ms);

/* Removes the directory and all it holds (rm -rf); says so on stderr when
 * it cannot. */
void rlt_rmtree(const char *dir);

/* Copies the last `lines` lines of the file at path to stderr. */
void rlt_tail(const char *path, int lines);

/* Returns 1 once a TCP connect to 127.0.0.1:port succeeds, 0 after
 * timeout_ms. */
int rlt_wait_port(int port, int timeout_ms);

/* Starts redis-server on a free loopback port with persistence off, in a new
 * temporary directory, and waits until it answers PING. Returns 0 or
 * RL_EIO. */
int rlt_redis_start(rlt_redis_t *r);

/* Starts redis-server again on r->port and r->dir (after rlt_redis_kill).
 * Returns 0 or RL_EIO. */
int rlt_redis_restart(rlt_redis_t *r);

/* SIGKILLs the server and reaps it; r->dir is kept for a restart. */
void rlt_redis_kill(rlt_redis_t *r);

/* Stops the server by pid (SIGTERM, then SIGKILL after 5 s), reaps it and
 * removes its directory. Safe to call twice. */
void rlt_redis_stop(rlt_redis_t *r);

/* A blocking hiredis connection to the test server (1 s timeout), or NULL. */
redisContext *rlt_redis_connect(const rlt_redis_t *r);

/* fork+exec argv (argv[0] looked up in PATH if it has no '/'); the child's
 * stdout goes to /dev/null unless RLT_VERBOSE is set, stderr is kept.
 * Returns the pid, or RL_EIO when fork fails. */
pid_t rlt_spawn(char *const argv[]);

/* Sends sig to pid and waits up to timeout_ms for it to exit; SIGKILLs it
 * after that. Returns its exit status as from waitpid (use WIFEXITED etc.),
 * or RL_EIO (no such child). */
int rlt_stop(pid_t pid, int sig, int timeout_ms);

/* Runs argv (argv[0] a path) to its end, stdout to out_path and stderr to
 * err_path (created or truncated), killing it after timeout_ms. Returns
 * its exit status, or RL_EIO when it did not exit normally in time; *ms
 * (may be NULL) gets how long it ran. */
int rlt_run(char *const argv[], const char *out_path, const char *err_path,
            int timeout_ms, uint64_t *ms);

/* The whole of a small file (up to 1 MiB), NUL-terminated, in memory the
 * caller frees; NULL when it cannot be read. */
char *rlt_slurp(const char *path);

/* Like rlt_redis_start, with extra redis-server arguments appended to the
 * usual ones, e.g. {"--requirepass", "pw", NULL}. The server counts as up
 * once it answers anything (an error such as NOAUTH included). */
int rlt_redis_start_with(rlt_redis_t *r, char *const extra[]);

/* Like rlt_redis_restart, with the same extra arguments as the start. */
int rlt_redis_restart_with(rlt_redis_t *r, char *const extra[]);

/* Pauses (SIGSTOP) or resumes (SIGCONT) the server; its sockets stay open
 * and unanswered meanwhile, as for a Redis stuck in a slow command. */
void rlt_redis_pause(rlt_redis_t *r, int paused);

/* An rl-server started by rlt_server_start. */
typedef struct rlt_server_s {
    pid_t pid;
    int port;
    char addr[32]; /* "127.0.0.1:PORT", for --listen and for clients */
    int mport;     /* --metrics' port, when it listens */
    char maddr[32]; /* and its "127.0.0.1:PORT" */
    int gport;     /* --grpc's port, when it listens */
    int hport;     /* --http's port, when it listens */
} rlt_server_t;

/* Starts argv (NULL-terminated; a server of ours that takes --port-file,
 * its listeners on port 0 or fixed ones) with --port-file added, and waits
 * up to timeout_ms until the file names the ports bound: s->pid, s->port
 * and s->addr (--listen), s->mport and s->maddr, s->gport, s->hport (when
 * those listen). A server that exits first fails the start at once.
 * Returns 0, RL_EINVAL (too many arguments) or RL_EIO. */
int rlt_spawn_listening(rlt_server_t *s, char *const argv[], int timeout_ms);

/* Starts the rl-server at bin with --listen 127.0.0.1:port (0: any port,
 * as rlt_spawn_listening reports it) and the extra arguments (NULL-
 * terminated, may be NULL; other listeners given port 0 are reported the
 * same way). A fixed port is tried again after a moment, five times in
 * all, for a restart where the last server was. Returns 0, RL_EINVAL (too
 * many arguments) or RL_EIO. */
int rlt_server_start(rlt_server_t *s, const char *bin, int port,
                     char *const extra[]);

/* Like rlt_server_start on port 0, with --metrics 127.0.0.1:0 too. */
int rlt_server_start_metrics(rlt_server_t *s, const char *bin,
                             char *const extra[]);

/* Stops it by pid (SIGTERM, then SIGKILL after 5 s) and reaps it. Returns
 * what rlt_stop returns. */
int rlt_server_stop(rlt_server_t *s);

/* SIGKILLs it (if running) and reaps it, for a teardown. Safe to call
 * twice. */
void rlt_server_kill(rlt_server_t *s);

/* The --log-level for a test's servers: $RLT_SERVER_LOG, else dflt. */
const char *rlt_log_level(const char *dflt);

/* ---- talking to a server ---- */

#include "rl_msg.h"

/* A blocking TCP connection to 127.0.0.1:port with TCP_NODELAY and 5 s
 * receive and send timeouts, or RL_EIO. */
int rlt_dial(int port);

/* Writes all n bytes (MSG_NOSIGNAL). Returns 0 or RL_EIO. */
int rlt_send_all(int fd, const void *p, size_t n);

/* GET path from the HTTP listener on port (HTTP/1.0, so the server closes
 * after it). Returns the status (body NUL-terminated in body, cut at len),
 * or RL_EIO. */
int rlt_http_get(int port, const char *path, char *body, size_t len);

/* The same with another method (a POST has an empty body) and, unless
 * token is NULL, "Authorization: Bearer TOKEN". */
int rlt_http_request(int port, const char *method, const char *path,
                     const char *token, char *body, size_t len);

/* The value of the sample "name value" (name with its labels, as printed)
 * in a Prometheus page; -1 when absent. */
long long rlt_sample(const char *page, const char *name);

/* The sample `name` on the /metrics page of the listener on port; -1 when
 * the page cannot be read or has no such sample. */
long long rlt_metric(int port, const char *name);

/* A check with an inline limit (no rule). */
rl_check_t rlt_check(uint64_t id, const char *key, uint64_t limit,
                     uint32_t window_s, uint32_t cost);

/* One answer, its error text copied out. */
typedef struct rlt_result_s {
    rl_result_t r; /* r.error points into err */
    char err[200];
} rlt_result_t;

/* Sends the n checks in one write on fd and reads n answers into out (by
 * position of arrival; match them by r.id). Returns 0, or RL_EIO (the
 * connection failed or timed out), RL_EDECODE. */
int rlt_exchange(int fd, const rl_check_t *checks, size_t n,
                 rlt_result_t *out);

/* One check on a fresh connection to port: rlt_dial, rlt_exchange, close.
 * Returns what they return. */
int rlt_ask(int port, const rl_check_t *q, rlt_result_t *out);

#endif
