/* Running a Check suite on every rank of an MPI job (check_comm, check_tp,
 * check_ep).
 *
 * Check runs the tests in this process (CK_NOFORK: the ranks share MPI).
 * A failed assertion ends that test on that rank alone, so the others can
 * wait in a collective that rank never enters. Here each rank's failures
 * are printed with its rank (rank 0 prints Check's usual report), the
 * ranks agree on whether any failed, and a rank whose agreement times out
 * stops the whole job with one line instead of leaving it hung. */
#ifndef ZEROSIM_TESTS_MPI_SUITE_H
#define ZEROSIM_TESTS_MPI_SUITE_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "zerosim/comm.h"

/* Run s on every rank of world, then finalize MPI; returns the exit status
 * (EXIT_FAILURE when any rank failed a test). */
static inline int zs_test_run_mpi_suite(Suite *s, zs_comm_t world)
{
    int me = zs_comm_rank(world);
    /* a rank left in a collective by another's failed test (one that the
     * agreement below cannot reach: the failing rank is itself stuck in a
     * later test) stops the job after this; no wait in these suites comes
     * near it */
    zs_comm_set_timeout(world, 120.0);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, me == 0 ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr);
    if (me != 0 && failed) {
        TestResult **tr = srunner_failures(sr);
        for (int i = 0; i < failed; i++) {
            fprintf(stderr, "rank %d: %s:%d: %s: %s\n", me, tr_lfile(tr[i]), tr_lno(tr[i]),
                    tr_tcname(tr[i]), tr_msg(tr[i]));
        }
        free(tr);
        fflush(stderr);
    }
    srunner_free(sr);
    int any = 0;
    if (zs_comm_agree(world, failed != 0, 30.0, &any)) {
        char why[160];
        snprintf(why, sizeof why,
                 "a test failed on rank %d, and the other ranks did not finish theirs "
                 "(left waiting in a collective that rank never entered)", me);
        zs_comm_stop(world, why);
    }
    zs_comm_finalize(world);
    return any ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
