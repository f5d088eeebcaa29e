/* zerosim — how a non-blocking collective makes progress behind compute.
 *
 * The overlap of issue "Speed" needs a pending collective (a bucket's
 * reduce-scatter, stage 3's prefetched allgather) to move while the rank
 * computes. MPI moves it only inside MPI calls, unless a thread calls into
 * MPI on its own. This benchmark measures, on this machine, the three ways:
 *
 *   none    start the collective, compute, then wait: it moves only in the
 *           wait (the exposed time is nearly the whole collective);
 *   test    MPI_Test between compute kernels, as the engine does between
 *           the ops of its step program (zs_comm_test);
 *   thread  a communication thread (MPI_THREAD_MULTIPLE) that calls
 *           MPI_Test every POLL_US microseconds while the main thread
 *           computes.
 *
 * Each rank computes K GEMMs of 256 x 256 x 256 (the "kernels") while an
 * MPI_Iallgather of S bytes in total runs; per mode the median over ITERS
 * interleaved rounds of the slowest rank's time. Printed: compute alone, the
 * collective alone, and per mode the time of both together and the exposed
 * communication (together minus compute alone) as a fraction of the
 * collective alone: 0 is a perfect overlap, 1 none.
 *
 *     mpirun -np 2 bench/bench_progress [S_MiB [K]]   (defaults 16 and 24)
 */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

void openblas_set_num_threads(int);

#define ITERS 15
#define GEMM 256
#define POLL_US 50

static float *ga, *gb, *gc;

static void kernel(void)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, GEMM, GEMM, GEMM, 1.0f, ga, GEMM, gb,
                GEMM, 0.0f, gc, GEMM);
}

struct poller {
    MPI_Request *req;
    volatile int stop;
};

/* the communication thread: MPI_Test until the request completes or the
 * main thread says stop, sleeping POLL_US between calls */
static void *poll_main(void *arg)
{
    struct poller *p = arg;
    struct timespec ts = { 0, POLL_US * 1000L };
    int done = 0;
    while (!done && !p->stop) {
        MPI_Test(p->req, &done, MPI_STATUS_IGNORE);
        if (!done)
            nanosleep(&ts, NULL);
    }
    return NULL;
}

static double median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return v[n / 2];
}

/* One repetition of mode (0 compute alone, 1 collective alone, 2 none,
 * 3 test, 4 thread): the slowest rank's seconds. */
static double run(int mode, int k, float *send, float *recv, int count)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_Request req = MPI_REQUEST_NULL;
    if (mode >= 1)
        MPI_Iallgather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, MPI_COMM_WORLD, &req);
    struct poller p = { &req, 0 };
    pthread_t th;
    if (mode == 4 && pthread_create(&th, NULL, poll_main, &p) != 0) {
        fprintf(stderr, "bench_progress: pthread_create failed\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (mode != 1)
        for (int i = 0; i < k; i++) {
            kernel();
            if (mode == 3) {
                int done;
                MPI_Test(&req, &done, MPI_STATUS_IGNORE);
            }
        }
    if (mode == 4) {
        p.stop = 1;
        pthread_join(th, NULL);
    }
    if (mode >= 1)
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    double mine = MPI_Wtime() - t0, all;
    MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return all;
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int n, me;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    double mib = argc > 1 ? atof(argv[1]) : 16.0;
    int k = argc > 2 ? atoi(argv[2]) : 24;
    if (mib <= 0.0 || k <= 0) {
        if (me == 0)
            fprintf(stderr, "usage: bench_progress [S_MiB > 0 [K > 0]]\n");
        MPI_Finalize();
        return 2;
    }
    openblas_set_num_threads(1);
    int count = (int)(mib * 1048576.0 / 4.0 / n);
    float *send = calloc((size_t)count, sizeof(float));
    float *recv = calloc((size_t)count * n, sizeof(float));
    ga = calloc(GEMM * GEMM, sizeof(float));
    gb = calloc(GEMM * GEMM, sizeof(float));
    gc = calloc(GEMM * GEMM, sizeof(float));
    if (!send || !recv || !ga || !gb || !gc) {
        fprintf(stderr, "bench_progress: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int i = 0; i < GEMM * GEMM; i++)
        ga[i] = gb[i] = 1e-3f * (float)(i % 97);
    /* the modes interleaved, ITERS rounds after one to warm up, so that a
     * slow stretch of a shared machine falls on all of them alike */
    int modes = provided >= MPI_THREAD_MULTIPLE ? 5 : 4;
    static double t[5][ITERS];
    for (int it = 0; it <= ITERS; it++)
        for (int m = 0; m < modes; m++) {
            double s = run(m, k, send, recv, count);
            if (it > 0)
                t[m][it - 1] = s;
        }
    double med[5] = { 0 };
    for (int m = 0; m < modes; m++)
        med[m] = median(t[m], ITERS);
    double comp = med[0], coll = med[1];
    double both[3] = { med[2], med[3], modes == 5 ? med[4] : -1.0 };
    if (me == 0) {
        printf("# %d ranks, allgather of %.1f MiB behind %d GEMMs of %d^3; median of %d\n", n, mib,
               k, GEMM, ITERS);
        printf("# compute alone %.4f s, allgather alone %.4f s\n", comp, coll);
        printf("# %-8s %10s %10s %14s\n", "progress", "both_s", "exposed_s", "exposed/alone");
        const char *names[] = { "none", "test", "thread" };
        for (int m = 0; m < 3; m++) {
            if (both[m] < 0.0) {
                printf("  %-8s (MPI_THREAD_MULTIPLE not provided: %d)\n", names[m], provided);
                continue;
            }
            printf("  %-8s %10.4f %10.4f %14.2f\n", names[m], both[m], both[m] - comp,
                   (both[m] - comp) / coll);
        }
    }
    free(send);
    free(recv);
    free(ga);
    free(gb);
    free(gc);
    MPI_Finalize();
    return 0;
}
