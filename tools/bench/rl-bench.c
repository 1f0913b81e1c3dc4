/* rl-bench: load generator and correctness audit for rl-server.
 *
 *   rl-bench --server HOST:PORT [--connections N] [--duration S]
 *            [--inflight N | --rate R] [--keys N --dist D] [--audit]
 *            [--json FILE] [--hist-csv FILE] [--plot FILE.png] ...
 *
 * See rl-bench --help (opts.c) for every option, run.c for how load is
 * generated and measured, audit.c for the audit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rl_error.h"
#include "rlb.h"

int main(int argc, char **argv)
{
    rlb_opts_t o;
    rlb_result_t r;
    int rc, status = RLB_EXIT_OK;

    rc = rlb_opts_parse(argc, argv, &o);
    if (rc != 0)
        return rc;
    if (o.seed == 0) {
        /* A fresh sequence per run unless asked to repeat one. */
        o.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    }
    rc = rlb_run(&o, &r);
    if (rc != 0) {
        status = rc == RL_ENOMEM ? RLB_EXIT_OUTPUT : RLB_EXIT_USAGE;
        goto out;
    }
    rlb_print_summary(stdout, &o, &r);
    fflush(stdout);
    if (o.json != NULL && rlb_write_json(o.json, &o, &r) != 0)
        status = RLB_EXIT_OUTPUT;
    if (o.csv != NULL && rlb_write_csv(o.csv, &r.st.lat_ns) != 0)
        status = RLB_EXIT_OUTPUT;
    if (o.plot_path != NULL && rlb_plot(o.plot_path, &o, &r.st.lat_ns) != 0)
        status = RLB_EXIT_OUTPUT;
    /* The most serious outcome decides the status: a broken limit first,
     * then a run the server cut short. */
    if (r.ended_early && r.end_reason != NULL &&
        strcmp(r.end_reason, "interrupted") != 0)
        status = RLB_EXIT_SERVER;
    if (r.ledger_audited && !r.ledger.done)
        status = RLB_EXIT_SERVER; /* the last check could not be made */
    /* --levels: a level that refused with room left in its window (by
     * the admissions seen) was charged by something else: a refused
     * check, as a client deciding its levels one by one does. */
    if (r.audited && o.tenants > 0 &&
        (r.org_audit.over_limit > 0 || r.audit.checked != r.audit.exact ||
         r.org_audit.checked != r.org_audit.exact))
        status = RLB_EXIT_AUDIT;
    if ((r.audited && r.audit.over_limit > 0) ||
        (r.lease_audited && r.lease.over > 0) ||
        (r.ledger_audited && r.ledger.mismatched > 0))
        status = RLB_EXIT_AUDIT;
    /* A log that could not be read to its end is a bad input, as one that
     * cannot be opened is. */
    if (status == RLB_EXIT_OK && r.replay.read_error)
        status = RLB_EXIT_USAGE;
out:
    if (o.json != NULL && fclose(o.json) != 0 && status == RLB_EXIT_OK)
        status = RLB_EXIT_OUTPUT;
    if (o.csv != NULL && fclose(o.csv) != 0 && status == RLB_EXIT_OK)
        status = RLB_EXIT_OUTPUT;
    if (o.timeline != NULL && (ferror(o.timeline) | fclose(o.timeline)) &&
        status == RLB_EXIT_OK) {
        fprintf(stderr, "rl-bench: writing --timeline-csv failed\n");
        status = RLB_EXIT_OUTPUT;
    }
    rlb_replay_close(o.replay);
    rlb_result_free(&r);
    return status;
}
