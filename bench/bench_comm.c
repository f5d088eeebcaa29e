/* zerosim — collective bandwidth benchmark (OSU / nccl-tests style).
 *
 * For each message size S (bytes of fp32 gradients), on every rank:
 * the engine's reduce-scatter and allgather (zs_comm, as the ZeRO engine
 * calls them) and MPI_Allreduce on the same S bytes. Warm-up iterations are
 * skipped, a barrier separates iterations, the slowest rank's time counts.
 * Bus bandwidth as nccl-tests defines it: algbw = S/t; busbw = algbw *
 * (N-1)/N for reduce-scatter and allgather, * 2(N-1)/N for allreduce.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zerosim/comm.h"
#include "zerosim/error.h"

#define WARMUP 3
#define ITERS 20

/* Median of n doubles (sorts them). */
static double median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t;
        }
    return v[n / 2];
}

/* Seconds of the last ledger record, as the slowest rank saw it. */
static double last_seconds(zs_comm_t c)
{
    size_t n;
    const zs_comm_record *r = zs_comm_records(c, &n);
    double mine = n ? r[n - 1].seconds : 0.0, all[1024];
    int N = zs_comm_size(c);
    zs_comm_allgather_small(c, &mine, all, 1, ZS_CT_F64);
    double m = 0.0;
    for (int i = 0; i < N && i < 1024; i++)
        if (all[i] > m)
            m = all[i];
    return m;
}

int main(int argc, char **argv)
{
    zs_comm_t c;
    if (zs_comm_init(&argc, &argv, &c)) {
        fprintf(stderr, "bench_comm: %s\n", zs_error_msg());
        return 1;
    }
    int N = zs_comm_size(c), me = zs_comm_rank(c);
    if (argc == 3 && !strcmp(argv[1], "--allreduce-bytes")) {
        /* MPI_Allreduce alone on one size: the reference for a run's
         * tensor-parallel all-reduces (bench/bench_zero.sh) */
        size_t n = (size_t)strtoull(argv[2], NULL, 10) / 4;
        float *a = calloc(n + 1, sizeof(float));
        double t[ITERS];
        for (int it = 0; it < WARMUP + ITERS; it++) {
            zs_comm_barrier(c);
            zs_comm_allreduce_sum(c, a, n, ZS_CT_F32, 0);
            if (it >= WARMUP)
                t[it - WARMUP] = last_seconds(c);
            zs_comm_clear_records(c);
        }
        double busbw = (double)n * 4 / median(t, ITERS) * 2 * (N - 1) / N;
        if (me == 0)
            printf("%.6e\n", busbw);
        free(a);
        zs_comm_finalize(c);
        return 0;
    }
    if (me == 0) {
        printf("# collective bandwidth, %d ranks, fp32, median of %d after %d warm-up\n", N, ITERS,
               WARMUP);
        printf("# %12s %12s %12s %12s %10s %10s\n", "bytes", "rs_busbw", "ag_busbw",
               "ar_busbw", "rs/ar", "ag/ar");
    }
    int *counts = calloc((size_t)N, sizeof(int)), *displs = calloc((size_t)N, sizeof(int));
    size_t maxbytes = (size_t)64 << 20;
    void *scratch = malloc(2 * maxbytes / (size_t)N + 64);
    zs_comm_set_scratch(c, scratch, 2 * maxbytes / (size_t)N + 64);
    if (me == 0)
        printf("# reduce-scatter: %s\n", zs_comm_uses_ring(c)
                                              ? "the engine's ring (MPI_Isend/MPI_Irecv, 4 segments in flight)"
                                              : "MPI_Reduce_scatter");
    for (size_t bytes = 1 << 16; bytes <= maxbytes; bytes *= 4) {
        size_t n = bytes / 4 / (size_t)N * (size_t)N;
        float *a = calloc(n, sizeof(float)), *b = calloc(n / (size_t)N, sizeof(float));
        for (size_t i = 0; i < n; i++)
            a[i] = (float)(i % 7);
        for (int q = 0; q < N; q++) {
            counts[q] = (int)(n / (size_t)N);
            displs[q] = q * counts[q];
        }
        double t[3][ITERS];
        for (int it = 0; it < WARMUP + ITERS; it++) {
            double s[3];
            zs_comm_barrier(c);
            zs_comm_reduce_scatter(c, a, b, counts, ZS_CT_F32, 0);
            s[0] = last_seconds(c);
            zs_comm_barrier(c);
            zs_comm_allgatherv_inplace(c, a, counts, displs, ZS_CT_F32, 0);
            s[1] = last_seconds(c);
            zs_comm_barrier(c);
            zs_comm_allreduce_sum(c, a, n, ZS_CT_F32, 0);
            s[2] = last_seconds(c);
            if (it >= WARMUP)
                for (int k = 0; k < 3; k++)
                    t[k][it - WARMUP] = s[k];
            zs_comm_clear_records(c);
        }
        double S = (double)n * 4, f = (double)(N - 1) / N;
        double rs = S / median(t[0], ITERS) * f, ag = S / median(t[1], ITERS) * f,
               ar = S / median(t[2], ITERS) * 2 * f;
        if (me == 0)
            printf("  %12zu %12.3e %12.3e %12.3e %10.2f %10.2f\n", n * 4, rs, ag, ar, rs / ar,
                   ag / ar);
        free(a);
        free(b);
    }
    free(counts);
    free(displs);
    zs_comm_set_scratch(c, NULL, 0);
    free(scratch);
    zs_comm_finalize(c);
    return 0;
}
