/* --keep-awake: one spinning thread per CPU at SCHED_IDLE priority, for
 * the length of the run.
 *
 * On a virtual machine whose idle vCPUs halt (guest halt polling off, as
 * on the Firecracker VMs this project is benchmarked on), every wakeup of
 * a process on an idle vCPU is a VM exit and a trip through the host's
 * scheduler: 100 us to several ms, whatever the process does. A request
 * crosses four such wakeups (rl-bench, rl-server, Redis, rl-server), so
 * at moderate load the latency tail measures the host, not the service.
 * Threads of the SCHED_IDLE class run only when nothing else wants the
 * CPU and are preempted at once when something does, so they keep the
 * vCPUs from halting without taking time from the processes measured: a
 * model of a host that is not idle, or of one with halt polling on. It
 * changes the machine, not the service, and a report must say it was
 * used. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rl_error.h"
#include "rlb.h"

#define MAX_SPINNERS 256

static pthread_t spinners[MAX_SPINNERS];
static int nspinners;
static int stop_flag, setup_failed, ready;

static void *spin(void *arg)
{
    struct sched_param sp;

    (void)arg;
    /* glibc's thread attributes take only the POSIX policies, so the
     * thread moves itself to SCHED_IDLE first thing; if it cannot, it
     * ends rather than compete at normal priority. */
    memset(&sp, 0, sizeof(sp));
    if (sched_setscheduler(0, SCHED_IDLE, &sp) != 0) {
        __atomic_store_n(&setup_failed, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&ready, 1, __ATOMIC_RELEASE);
        return NULL;
    }
    __atomic_fetch_add(&ready, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&stop_flag, __ATOMIC_RELAXED))
        ;
    return NULL;
}

int rlb_awake_start(void)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    pthread_attr_t attr;
    long i;

    stop_flag = 0;
    setup_failed = 0;
    ready = 0;
    nspinners = 0;
    if (ncpu < 1)
        ncpu = 1;
    if (ncpu > MAX_SPINNERS)
        ncpu = MAX_SPINNERS;
    for (i = 0; i < ncpu; i++) {
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET((int)i, &set);
        if (pthread_attr_init(&attr) != 0)
            break;
        if (pthread_attr_setaffinity_np(&attr, sizeof(set), &set) != 0 ||
            pthread_create(&spinners[nspinners], &attr, spin, NULL) != 0) {
            pthread_attr_destroy(&attr);
            fprintf(stderr, "rl-bench: --keep-awake: cannot start an idle-"
                            "priority thread\n");
            rlb_awake_stop();
            return RL_EIO;
        }
        pthread_attr_destroy(&attr);
        nspinners++;
    }
    /* Each thread says whether it got its class before the run starts. */
    while (__atomic_load_n(&ready, __ATOMIC_ACQUIRE) < nspinners)
        sched_yield();
    if (setup_failed) {
        fprintf(stderr, "rl-bench: --keep-awake: cannot switch a thread to "
                        "SCHED_IDLE\n");
        rlb_awake_stop();
        return RL_EIO;
    }
    return 0;
}

void rlb_awake_stop(void)
{
    int i;

    __atomic_store_n(&stop_flag, 1, __ATOMIC_RELAXED);
    for (i = 0; i < nspinners; i++)
        pthread_join(spinners[i], NULL);
    nspinners = 0;
}
