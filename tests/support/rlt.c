#include "rlt.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rl_error.h"
#include "rl_frame.h"
#include "rl_buf.h"
#include <sys/time.h>

void rlt_nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* The ports a test may reserve: below the system's ephemeral range (where
 * every outgoing connection of every process draws its local port), or
 * above it when there is no room below. */
static void port_range(int *lo, int *hi)
{
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    int elo = 32768, ehi = 60999;

    if (f != NULL) {
        if (fscanf(f, "%d %d", &elo, &ehi) != 2) {
            elo = 32768;
            ehi = 60999;
        }
        fclose(f);
    }
    if (elo - 1 >= 15000 + 1000) {
        *lo = 15000;
        *hi = elo - 1;
    } else {
        *lo = ehi + 1;
        *hi = 65535;
    }
}

/* 1 when nothing is bound to 127.0.0.1:port right now (bound as a server
 * binds, with SO_REUSEADDR, so a closed connection's TIME_WAIT does not
 * count). */
static int bindable(int port)
{
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, ok;

    if (fd < 0)
        return 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

int rlt_port_reserve(void)
{
    static unsigned seed;
    const char *dir = getenv("RLT_PORT_DIR");
    char path[512];
    int lo, hi, attempt;

    if (dir == NULL || dir[0] == '\0')
        dir = "/tmp/rlt-ports";
    /* Shared by every user's tests on this machine: anyone may add a lock
     * file (the sticky bit keeps them from removing another's). */
    if (mkdir(dir, 01777) == 0)
        chmod(dir, 01777);
    if (seed == 0)
        seed = (unsigned)getpid() ^ (unsigned)rl_mono_ms();
    port_range(&lo, &hi);
    for (attempt = 0; attempt < 4096; attempt++) {
        int port = lo + (int)(rand_r(&seed) % (unsigned)(hi - lo + 1)), fd;

        snprintf(path, sizeof(path), "%s/%d", dir, port);
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0)
            continue;
        /* Held until this process exits (the descriptor is never closed):
         * no other process gets the port meanwhile, and this one cannot
         * lock the same file twice, so it never hands a port out again. */
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            close(fd);
            continue;
        }
        if (!bindable(port))
            continue; /* used outside the tests: keep it locked, skip it */
        return port;
    }
    return RL_EIO;
}

static int try_connect(int port)
{
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0), ok;

    if (fd < 0)
        return 0;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

int rlt_wait_port(int port, int timeout_ms)
{
    uint64_t deadline = rl_mono_ms() + (uint64_t)timeout_ms;

    while (!try_connect(port)) {
        if (rl_mono_ms() >= deadline)
            return 0;
        rlt_nap_ms(5);
    }
    return 1;
}

pid_t rlt_spawn(char *const argv[])
{
    pid_t parent = getpid(), pid = fork();

    if (pid < 0)
        return RL_EIO;
    if (pid == 0) {
        /* Dies with the test: a test that hangs is killed by ctest's
         * timeout, which leaves it no chance to stop what it started. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(127);
        if (getenv("RLT_VERBOSE") == NULL) {
            int fd = open("/dev/null", O_WRONLY);
            if (fd >= 0) {
                dup2(fd, STDOUT_FILENO);
                close(fd);
            }
        }
        execvp(argv[0], argv);
        fprintf(stderr, "rlt_spawn: exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

int rlt_run(char *const argv[], const char *out_path, const char *err_path,
            int timeout_ms, uint64_t *ms)
{
    uint64_t start = rlt_mono_ms(), deadline = start + (uint64_t)timeout_ms;
    int status;
    pid_t pid = fork();

    if (pid == 0) {
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0)
            _exit(126);
        dup2(o, STDOUT_FILENO);
        dup2(e, STDERR_FILENO);
        execv(argv[0], argv);
        _exit(127);
    }
    if (pid < 0)
        return RL_EIO;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) {
            if (ms != NULL)
                *ms = rlt_mono_ms() - start;
            return WIFEXITED(status) ? WEXITSTATUS(status) : RL_EIO;
        }
        if (r < 0 || rlt_mono_ms() > deadline) {
            rlt_stop(pid, SIGKILL, 1000);
            return RL_EIO;
        }
        rlt_nap_ms(5);
    }
}

char *rlt_slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    size_t n;

    if (f == NULL)
        return NULL;
    buf = calloc(1, 1 << 20);
    if (buf != NULL) {
        n = fread(buf, 1, (1 << 20) - 1, f);
        buf[n] = '\0';
    }
    fclose(f);
    return buf;
}

int rlt_stop(pid_t pid, int sig, int timeout_ms)
{
    uint64_t deadline = rl_mono_ms() + (uint64_t)timeout_ms;
    int status;

    if (pid <= 0)
        return RL_EIO;
    kill(pid, sig);
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return status;
        if (r < 0)
            return RL_EIO;
        if (rl_mono_ms() >= deadline) {
            kill(pid, SIGKILL);
            return waitpid(pid, &status, 0) == pid ? status : RL_EIO;
        }
        rlt_nap_ms(2);
    }
}

redisContext *rlt_redis_connect(const rlt_redis_t *r)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);

    if (c == NULL)
        return NULL;
    if (c->err) {
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

/* 1 when the redis-server answering on r->port is the one we started: a
 * port freed by a killed server may be taken by another test's server, and
 * a PING alone would not tell them apart. A server started with requirepass
 * answers NOAUTH; that counts while our own process is still alive. */
static int answers_ping(const rlt_redis_t *r)
{
    redisContext *c = rlt_redis_connect(r);
    redisReply *rep;
    const char *pid;
    int ok = 0, status;

    if (c == NULL)
        return 0;
    rep = redisCommand(c, "INFO server");
    if (rep != NULL && rep->type == REDIS_REPLY_STRING &&
        (pid = strstr(rep->str, "process_id:")) != NULL)
        ok = atol(pid + 11) == (long)r->pid;
    else if (rep != NULL && rep->type == REDIS_REPLY_ERROR &&
             strncmp(rep->str, "NOAUTH", 6) == 0)
        ok = waitpid(r->pid, &status, WNOHANG) == 0;
    if (rep)
        freeReplyObject(rep);
    redisFree(c);
    return ok;
}

/* Launches redis-server on r->port in r->dir, with extra arguments (may be
 * NULL), and waits until it answers. With RLT_REDIS_MODULE set in the
 * environment, it loads that module (the ratelimit module: the tests of
 * the Redis store then run against RL.BATCH instead of the script).
 * Returns 0, or RL_EIO if it exited (port taken) or never answered within
 * 10 s. */
static int launch(rlt_redis_t *r, char *const extra[])
{
    char port[16], log[192];
    char *argv[64] = {"redis-server", "--port", port, "--bind", "127.0.0.1",
                      "--dir", r->dir, "--save", "", "--appendonly", "no",
                      "--daemonize", "no", "--loglevel", "warning",
                      "--logfile", log};
    size_t n = 17, i;
    uint64_t deadline = rl_mono_ms() + 10000;
    const char *module = getenv("RLT_REDIS_MODULE");
    int status;

    if (module != NULL && module[0] != '\0') {
        argv[n++] = "--loadmodule";
        argv[n++] = (char *)module;
        /* MODULE UNLOAD from the test (Redis 7 refuses it otherwise). */
        argv[n++] = "--enable-module-command";
        argv[n++] = "local";
    }
    for (i = 0; extra != NULL && extra[i] != NULL; i++) {
        if (n + 1 >= sizeof(argv) / sizeof(argv[0]))
            return RL_EIO;
        argv[n++] = extra[i];
    }
    argv[n] = NULL;
    snprintf(port, sizeof(port), "%d", r->port);
    snprintf(log, sizeof(log), "%s/redis.log", r->dir);
    r->pid = rlt_spawn(argv);
    if (r->pid < 0)
        return RL_EIO;
    while (!answers_ping(r)) {
        int gone = waitpid(r->pid, &status, WNOHANG) == r->pid;
        if (gone || rl_mono_ms() >= deadline) {
            fprintf(stderr, "rlt: redis-server on port %d %s; its log:\n",
                    r->port, gone ? "exited" : "never answered");
            rlt_tail(log, 10);
            if (!gone)
                rlt_stop(r->pid, SIGKILL, 1000);
            r->pid = -1;
            return RL_EIO;
        }
        rlt_nap_ms(5);
    }
    return 0;
}

int rlt_redis_start_with(rlt_redis_t *r, char *const extra[])
{
    int attempt;

    memset(r, 0, sizeof(*r));
    r->pid = -1;
    snprintf(r->dir, sizeof(r->dir), "/tmp/rlt-redis-XXXXXX");
    if (mkdtemp(r->dir) == NULL)
        return RL_EIO;
    /* The port is reserved for this process, but something outside the
     * tests may hold it: one more try on another port. */
    for (attempt = 0; attempt < 2; attempt++) {
        r->port = rlt_port_reserve();
        if (r->port > 0 && launch(r, extra) == 0)
            return 0;
    }
    rmdir(r->dir);
    r->dir[0] = '\0';
    return RL_EIO;
}

int rlt_redis_start(rlt_redis_t *r)
{
    return rlt_redis_start_with(r, NULL);
}

int rlt_redis_restart_with(rlt_redis_t *r, char *const extra[])
{
    uint64_t deadline = rl_mono_ms() + 10000;

    /* The old socket may linger briefly; keep trying the same port. */
    while (launch(r, extra) != 0) {
        if (rl_mono_ms() >= deadline)
            return RL_EIO;
        rlt_nap_ms(20);
    }
    return 0;
}

int rlt_redis_restart(rlt_redis_t *r)
{
    return rlt_redis_restart_with(r, NULL);
}

void rlt_redis_kill(rlt_redis_t *r)
{
    if (r->pid > 0)
        rlt_stop(r->pid, SIGKILL, 5000);
    r->pid = -1;
}

void rlt_redis_stop(rlt_redis_t *r)
{
    char path[192];

    if (r->pid > 0)
        rlt_stop(r->pid, SIGTERM, 5000);
    r->pid = -1;
    if (r->dir[0]) {
        /* Persistence is off, but remove anything redis may have left. */
        snprintf(path, sizeof(path), "%s/dump.rdb", r->dir);
        unlink(path);
        snprintf(path, sizeof(path), "%s/redis.log", r->dir);
        unlink(path);
        rmdir(r->dir);
        r->dir[0] = '\0';
    }
}

void rlt_redis_pause(rlt_redis_t *r, int paused)
{
    if (r->pid > 0)
        kill(r->pid, paused ? SIGSTOP : SIGCONT);
}

void rlt_rmtree(const char *dir)
{
    char cmd[256];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

void rlt_tail(const char *path, int lines)
{
    char buf[8192];
    FILE *f = fopen(path, "r");
    size_t n, start;
    long at;
    int seen = 0;

    if (f == NULL)
        return;
    fseek(f, 0, SEEK_END);
    at = ftell(f);
    at = at > (long)sizeof(buf) - 1 ? at - (long)sizeof(buf) + 1 : 0;
    fseek(f, at, SEEK_SET);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    start = n > 0 && buf[n - 1] == '\n' ? n - 1 : n;
    while (start > 0 && !(buf[start - 1] == '\n' && ++seen == lines))
        start--;
    fputs(buf + start, stderr);
}

/* Reads "FLAG HOST:PORT" lines of a --port-file into s. Returns 0 once the
 * file is there and names the native listener, RL_EAGAIN before. */
static int read_ports(rlt_server_t *s, const char *path)
{
    char line[512], flag[32], addr[300];
    FILE *f = fopen(path, "r");
    int got = 0;

    if (f == NULL)
        return RL_EAGAIN;
    while (fgets(line, sizeof(line), f) != NULL) {
        char *colon;
        int port;
        if (sscanf(line, "%31s %299s", flag, addr) != 2 ||
            (colon = strrchr(addr, ':')) == NULL)
            continue;
        port = atoi(colon + 1);
        if (strcmp(flag, "listen") == 0) {
            s->port = port;
            snprintf(s->addr, sizeof(s->addr), "127.0.0.1:%d", port);
            got = 1;
        } else if (strcmp(flag, "metrics") == 0) {
            s->mport = port;
            snprintf(s->maddr, sizeof(s->maddr), "127.0.0.1:%d", port);
        } else if (strcmp(flag, "grpc") == 0) {
            s->gport = port;
        } else if (strcmp(flag, "http") == 0) {
            s->hport = port;
        }
    }
    fclose(f);
    return got ? RL_OK : RL_EAGAIN;
}

/* $RLT_SERVER_ARGS, words split at spaces, after every rl-server's own
 * arguments: how a suite runs again under other flags (--threads 2).
 * Returns 0, or RL_EINVAL when they do not fit in max. */
static int extra_args(const char *bin, char **args, size_t *n, size_t max)
{
    static char words[512];
    const char *env = getenv("RLT_SERVER_ARGS"), *base = strrchr(bin, '/');
    char *p, *save = NULL;

    base = base != NULL ? base + 1 : bin;
    if (env == NULL || strcmp(base, "rl-server") != 0)
        return RL_OK;
    if (strlen(env) >= sizeof(words))
        return RL_EINVAL;
    strcpy(words, env);
    for (p = strtok_r(words, " ", &save); p != NULL;
         p = strtok_r(NULL, " ", &save)) {
        if (*n >= max)
            return RL_EINVAL;
        args[(*n)++] = p;
    }
    return RL_OK;
}

int rlt_spawn_listening(rlt_server_t *s, char *const argv[], int timeout_ms)
{
    char *args[80], dir[64], path[96];
    uint64_t deadline = rl_mono_ms() + (uint64_t)timeout_ms;
    size_t n = 0;
    int status, rc = RL_EIO;

    s->pid = -1;
    while (argv[n] != NULL) {
        if (n + 3 >= sizeof(args) / sizeof(args[0]))
            return RL_EINVAL;
        args[n] = argv[n];
        n++;
    }
    if ((rc = extra_args(argv[0], args, &n,
                         sizeof(args) / sizeof(args[0]) - 3)) != RL_OK)
        return rc;
    rc = RL_EIO;
    snprintf(dir, sizeof(dir), "/tmp/rlt-srv-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return RL_EIO;
    snprintf(path, sizeof(path), "%s/ports", dir);
    args[n++] = "--port-file";
    args[n++] = path;
    args[n] = NULL;
    if ((s->pid = rlt_spawn(args)) < 0) {
        rmdir(dir);
        return RL_EIO;
    }
    for (;;) {
        if (read_ports(s, path) == RL_OK) {
            rc = RL_OK;
            break;
        }
        /* A server that exits fails the start at once; its stderr, the
         * test's own, shows why just above. */
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            fprintf(stderr, "rlt: %s exited (%s %d) before listening\n",
                    argv[0], WIFEXITED(status) ? "status" : "signal",
                    WIFEXITED(status) ? WEXITSTATUS(status)
                                      : WTERMSIG(status));
            s->pid = -1;
            break;
        }
        if (rl_mono_ms() >= deadline) {
            fprintf(stderr, "rlt: %s not listening after %d ms\n", argv[0],
                    timeout_ms);
            rlt_stop(s->pid, SIGKILL, 1000);
            s->pid = -1;
            break;
        }
        rlt_nap_ms(2);
    }
    unlink(path);
    rmdir(dir);
    return rc;
}

/* rlt_server_start, with --metrics too when metrics. */
static int server_start(rlt_server_t *s, const char *bin, int port, int metrics,
                        char *const extra[])
{
    char *argv[64], laddr[32];
    size_t n, i;
    int attempt;

    memset(s, 0, sizeof(*s));
    s->pid = -1;
    snprintf(laddr, sizeof(laddr), "127.0.0.1:%d", port);
    argv[0] = (char *)bin;
    argv[1] = "--listen";
    argv[2] = laddr;
    n = 3;
    if (metrics) {
        argv[n++] = "--metrics";
        argv[n++] = "127.0.0.1:0";
    }
    for (i = 0; extra != NULL && extra[i] != NULL; i++) {
        if (n + 1 >= sizeof(argv) / sizeof(argv[0]))
            return RL_EINVAL;
        argv[n++] = extra[i];
    }
    argv[n] = NULL;
    /* Port 0: the server binds what the system gives and says which. A
     * fixed port (a restart where the last server was) may need a moment
     * to be free again. */
    for (attempt = 0; attempt < (port ? 5 : 1); attempt++) {
        if (attempt > 0)
            rlt_nap_ms(100);
        if (rlt_spawn_listening(s, argv, 10000) == RL_OK)
            return RL_OK;
    }
    return RL_EIO;
}

int rlt_server_start(rlt_server_t *s, const char *bin, int port,
                     char *const extra[])
{
    return server_start(s, bin, port, 0, extra);
}

int rlt_server_start_metrics(rlt_server_t *s, const char *bin,
                             char *const extra[])
{
    return server_start(s, bin, 0, 1, extra);
}

int rlt_server_stop(rlt_server_t *s)
{
    int st = rlt_stop(s->pid, SIGTERM, 5000);

    s->pid = -1;
    return st;
}

void rlt_server_kill(rlt_server_t *s)
{
    if (s->pid > 0)
        rlt_stop(s->pid, SIGKILL, 5000);
    s->pid = -1;
}

const char *rlt_log_level(const char *dflt)
{
    const char *v = getenv("RLT_SERVER_LOG");

    return v != NULL ? v : dflt;
}

int rlt_dial(int port)
{
    struct sockaddr_in sa;
    struct timeval tv = {5, 0};
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0)
        return RL_EIO;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return RL_EIO;
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

int rlt_send_all(int fd, const void *p, size_t n)
{
    const char *s = p;

    while (n > 0) {
        ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return RL_EIO;
        s += k;
        n -= (size_t)k;
    }
    return RL_OK;
}

int rlt_http_request(int port, const char *method, const char *path,
                     const char *token, char *body, size_t len)
{
    static char buf[1 << 20];
    char req[768];
    size_t got = 0;
    int fd = rlt_dial(port);
    char *sep;

    if (fd < 0)
        return RL_EIO;
    snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\n%s%s%s%s\r\n", method, path,
             token ? "Authorization: Bearer " : "", token ? token : "",
             token ? "\r\n" : "",
             strcmp(method, "POST") == 0 ? "Content-Length: 0\r\n" : "");
    if (rlt_send_all(fd, req, strlen(req)) != RL_OK) {
        close(fd);
        return RL_EIO;
    }
    for (;;) {
        ssize_t k = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    close(fd);
    buf[got] = '\0';
    if ((sep = strstr(buf, "\r\n\r\n")) == NULL || got < 12)
        return RL_EIO;
    snprintf(body, len, "%s", sep + 4);
    return atoi(buf + 9);
}

int rlt_http_get(int port, const char *path, char *body, size_t len)
{
    return rlt_http_request(port, "GET", path, NULL, body, len);
}

long long rlt_sample(const char *page, const char *name)
{
    size_t n = strlen(name);
    const char *p = page;

    while ((p = strstr(p, name)) != NULL) {
        if ((p == page || p[-1] == '\n') && p[n] == ' ')
            return strtoll(p + n + 1, NULL, 10);
        p += n;
    }
    return -1;
}

long long rlt_metric(int port, const char *name)
{
    static char page[1 << 18];

    if (rlt_http_get(port, "/metrics", page, sizeof(page)) != 200)
        return -1;
    return rlt_sample(page, name);
}

rl_check_t rlt_check(uint64_t id, const char *key, uint64_t limit,
                     uint32_t window_s, uint32_t cost)
{
    rl_check_t q;

    memset(&q, 0, sizeof(q));
    q.id = id;
    q.key = key;
    q.key_len = strlen(key);
    q.limit = limit;
    q.window_s = window_s;
    q.cost = cost;
    return q;
}

int rlt_exchange(int fd, const rl_check_t *checks, size_t n,
                 rlt_result_t *out)
{
    rl_buf_t b, in;
    size_t i, got = 0;
    int rc = RL_OK;

    rl_buf_init(&b, 1 << 26);
    rl_buf_init(&in, 1 << 26);
    for (i = 0; i < n && rc == RL_OK; i++)
        rc = rl_check_put(&b, &checks[i]);
    if (rc == RL_OK)
        rc = rlt_send_all(fd, rl_buf_rptr(&b), rl_buf_len(&b));
    while (rc == RL_OK && got < n) {
        rl_result_t r;
        uint8_t *w;
        ssize_t k;

        rc = rl_result_take(&in, 1 << 20, &r);
        if (rc == RL_OK) {
            rlt_result_t *o = &out[got++];
            o->r = r;
            snprintf(o->err, sizeof(o->err), "%.*s", (int)r.error_len,
                     r.error ? r.error : "");
            o->r.error = o->err;
            o->r.error_len = strlen(o->err);
            continue;
        }
        if (rc != RL_EAGAIN)
            break;
        rc = rl_buf_reserve(&in, 65536, &w);
        if (rc != RL_OK)
            break;
        k = recv(fd, w, rl_buf_avail(&in), 0);
        if (k <= 0) {
            rc = RL_EIO;
            break;
        }
        rl_buf_commit(&in, (size_t)k);
    }
    rl_buf_free(&b);
    rl_buf_free(&in);
    return rc;
}

int rlt_ask(int port, const rl_check_t *q, rlt_result_t *out)
{
    int fd = rlt_dial(port), rc;

    if (fd < 0)
        return fd;
    rc = rlt_exchange(fd, q, 1, out);
    close(fd);
    return rc;
}
