/* The test helpers' ports and waits (rlt.c): a reserved port is outside
 * the ephemeral range, never handed twice, and never to two processes at
 * once; a server of ours reports the ports it bound; a server that exits
 * fails its start at once instead of at the deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <sys/wait.h>
#include <unistd.h>

#include "rl_error.h"
#include "rlt.h"

#ifndef RL_SERVER_BIN
#error "RL_SERVER_BIN must name the rl-server binary"
#endif

static int ephemeral(int port)
{
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    int lo = 32768, hi = 60999;

    if (f != NULL) {
        assert_int_equal(fscanf(f, "%d %d", &lo, &hi), 2);
        fclose(f);
    }
    return port >= lo && port <= hi;
}

/* 200 reservations: all distinct, none in the ephemeral range. */
static void test_reserve_distinct(void **state)
{
    static int got[200];
    int i, j;

    (void)state;
    for (i = 0; i < 200; i++) {
        got[i] = rlt_port_reserve();
        assert_true(got[i] > 0);
        assert_false(ephemeral(got[i]));
        for (j = 0; j < i; j++)
            assert_int_not_equal(got[i], got[j]);
    }
}

/* A port this process holds is not handed to another process: a child
 * reserving many ports never gets one of the parent's, and tells it
 * through its exit status. */
static void test_reserve_across_processes(void **state)
{
    static int mine[100];
    int i, status;
    pid_t pid;

    (void)state;
    for (i = 0; i < 100; i++)
        assert_true((mine[i] = rlt_port_reserve()) > 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int k, p, clash = 0;
        for (k = 0; k < 500; k++) {
            p = rlt_port_reserve();
            for (i = 0; i < 100; i++)
                clash |= p == mine[i];
            clash |= p <= 0;
        }
        _exit(clash);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* Every listener on port 0: the port file names each, and each accepts
 * connections. */
static void test_port_file(void **state)
{
    char *argv[] = {RL_SERVER_BIN, "--listen", "127.0.0.1:0", "--metrics",
                    "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--http",
                    "127.0.0.1:0", "--log-level", "warn", NULL};
    rlt_server_t s;

    (void)state;
    assert_int_equal(rlt_spawn_listening(&s, argv, 10000), 0);
    assert_true(s.port > 0 && s.mport > 0 && s.gport > 0 && s.hport > 0);
    assert_true(rlt_wait_port(s.port, 1000));
    assert_true(rlt_wait_port(s.mport, 1000));
    assert_true(rlt_wait_port(s.gport, 1000));
    assert_true(rlt_wait_port(s.hport, 1000));
    assert_int_equal(rlt_server_stop(&s), 0);
}

/* A server that exits before it listens fails the start at once, long
 * before the 20 s deadline. */
static void test_exit_fails_at_once(void **state)
{
    char *argv[] = {RL_SERVER_BIN, "--listen", "127.0.0.1:0", "--rule",
                    "broken", NULL};
    rlt_server_t s;
    uint64_t t0 = rlt_mono_ms();

    (void)state;
    assert_int_equal(rlt_spawn_listening(&s, argv, 20000), RL_EIO);
    assert_int_equal(s.pid, -1);
    assert_true(rlt_mono_ms() - t0 < 10000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_distinct),
        cmocka_unit_test(test_reserve_across_processes),
        cmocka_unit_test(test_port_file),
        cmocka_unit_test(test_exit_fails_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
