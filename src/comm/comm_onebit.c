/* zerosim — 1-bit Adam's error-compensated compressed all-reduce (see
 * zerosim/comm.h; Tang et al., arXiv 2102.02888, section 4, and
 * DeepSpeed's compressed_allreduce).
 *
 * Dimension letters: n = elements (a multiple of 8 N), N = ranks,
 * c = n / N elements of each rank's chunk, cb = c / 8 bytes of its signs.
 *
 *   worker:  x += worker_error; s = ||x|| / sqrt(n); signs of x (0 counts
 *            as +); worker_error = x - s sign(x); chunk j of the signs to
 *            rank j (all-to-all), every rank's s to all (scalars)
 *   server:  rank j averages its chunk over the ranks,
 *            a = (1/N) sum_q s_q sign_q (q in rank order), a += server_error;
 *            t = ||a|| / sqrt(c); server_error = a - t sign(a)
 *   gather:  every server's signs (allgather) and t (scalars); chunk j of
 *            the result is t_j sign_j
 *
 * The ledger gets one all-to-all and one allgather of bytes, (N - 1) cb
 * wire bytes each (zs_comm_onebit_sizes), and two allgathers of N scales
 * as scalars.
 */
#include "comm/comm_impl.h"
#include "zerosim/error.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void zs_comm_onebit_sizes(size_t n, int N, zs_onebit_sizes *s)
{
    double cb = N > 0 ? (double)(n / (size_t)N) / 8.0 : 0.0;
    s->alltoall_bytes = (double)(N - 1) * cb;
    s->allgather_bytes = (double)(N - 1) * cb;
    s->scalar_bytes = 2.0 * 4.0 * (double)N;
}

size_t zs_comm_onebit_padded(size_t n, int N)
{
    size_t q = 8 * (size_t)(N > 0 ? N : 1);
    return n ? (n + q - 1) / q * q : q;
}

/* The signs of x[0, n) into bits (1: >= 0), element i at bit i % 8 of
 * byte i / 8; x -= s sign(x) as the error left behind, into err. */
static void onebit_compress(const float *x, size_t n, float s, unsigned char *bits, float *err)
{
    memset(bits, 0, n / 8);
    for (size_t i = 0; i < n; i++) {
        int pos = x[i] >= 0.0f;
        bits[i / 8] |= (unsigned char)(pos << (i % 8));
        err[i] = x[i] - (pos ? s : -s);
    }
}

/* ||x|| / sqrt(n), summed in double in order. */
static float onebit_scale(const float *x, size_t n)
{
    double q = 0.0;
    for (size_t i = 0; i < n; i++)
        q += (double)x[i] * (double)x[i];
    return n ? (float)sqrt(q / (double)n) : 0.0f;
}

static int onebit_bit(const unsigned char *bits, size_t i) { return bits[i / 8] >> (i % 8) & 1; }

/* One byte exchange, recorded as op (all-to-all or allgather) with
 * (N - 1) cb wire bytes: chunk j of send to rank j (all-to-all) or
 * this rank's cb bytes to everyone (allgather). */
static int onebit_exchange(zs_comm_t c, zs_comm_op op, const unsigned char *send,
                           unsigned char *recv, size_t cb, int layer)
{
    int N = c->size;
    zs_comm_record rec = zs_comm_rec(c, op, layer, cb * (size_t)N, ZS_CT_NTYPES);
    rec.elem_size = 1;
    rec.wire_bytes = (double)(N - 1) * (double)cb;
    rec.inter_bytes = 0.0;
    for (int q = 0; q < N; q++)
        if (c->node_of && c->node_of[q] != c->node_of[c->rank])
            rec.inter_bytes += (double)cb;
    rec.inter_api_bytes = rec.inter_bytes;
    if (c->phantom || N == 1) {
        if (!c->phantom)
            memcpy(recv, send, cb);
        zs_comm_record_add(c, &rec);
        return 0;
    }
    double t0 = zs_mpi_wtime();
    MPI_Request req;
    long long seq = zs_comm_enter(c);
    int rc = op == ZS_OP_ALLTOALL
                 ? MPI_Ialltoall(send, (int)cb, MPI_BYTE, recv, (int)cb, MPI_BYTE, c->comm, &req)
                 : MPI_Iallgather(send, (int)cb, MPI_BYTE, recv, (int)cb, MPI_BYTE, c->comm, &req);
    if (rc == MPI_SUCCESS && zs_comm_finish(c, 1, &req, seq, "1-bit exchange"))
        return -1;
    rec.seconds = zs_mpi_wtime() - t0;
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, op == ZS_OP_ALLTOALL ? "MPI_Alltoall" : "MPI_Allgather");
    zs_comm_record_add(c, &rec);
    return 0;
}

/* The server stage on this rank's chunk: recv holds every rank's signs of
 * it (rank q's cb bytes at q cb), ws every rank's worker scale; the
 * average, with the server error added, compressed into bits and *t. */
static void onebit_serve(int N, size_t chunk, const unsigned char *recv, const float *ws,
                         float *avg, float *server_error, unsigned char *bits, float *t)
{
    size_t cb = chunk / 8;
    for (size_t i = 0; i < chunk; i++) {
        float a = 0.0f;
        for (int q = 0; q < N; q++)
            a += onebit_bit(recv + (size_t)q * cb, i) ? ws[q] : -ws[q];
        avg[i] = a / (float)N + server_error[i];
    }
    *t = onebit_scale(avg, chunk);
    onebit_compress(avg, chunk, *t, bits, server_error);
}

int zs_comm_onebit_allreduce(zs_comm_t c, float *x, size_t n, float *worker_error,
                             float *server_error, int layer)
{
    int N = c->size;
    if (n % (8 * (size_t)N))
        ZS_FAIL("1-bit all-reduce of %zu elements over %d ranks: pad it to a multiple of 8 x "
                "ranks (%zu)", n, N, 8 * (size_t)N);
    size_t chunk = n / (size_t)N, cb = chunk / 8;
    unsigned char *bits = malloc(n / 8 + 1), *recv = malloc(n / 8 + 1);
    float *ws = malloc((size_t)N * sizeof(float)), *ts = malloc((size_t)N * sizeof(float));
    float *avg = malloc((chunk ? chunk : 1) * sizeof(float));
    int rc = 0;
    if (!bits || !recv || !ws || !ts || !avg) {
        rc = zs_error_set("out of host memory for a 1-bit all-reduce of %zu elements", n);
        goto done;
    }
    float s = 0.0f, t = 0.0f;
    if (!c->phantom) {
        for (size_t i = 0; i < n; i++)
            x[i] += worker_error[i];
        s = onebit_scale(x, n);
        onebit_compress(x, n, s, bits, worker_error);
    }
    rc = onebit_exchange(c, ZS_OP_ALLTOALL, bits, recv, cb, layer);
    if (!rc)
        rc = zs_comm_allgather_small(c, &s, ws, 1, ZS_CT_F32);
    if (rc)
        goto done;
    if (!c->phantom)
        onebit_serve(N, chunk, recv, ws, avg, server_error, bits, &t);
    rc = onebit_exchange(c, ZS_OP_ALLGATHER, bits, recv, cb, layer);
    if (!rc)
        rc = zs_comm_allgather_small(c, &t, ts, 1, ZS_CT_F32);
    if (rc || c->phantom)
        goto done;
    for (int j = 0; j < N; j++)
        for (size_t i = 0; i < chunk; i++)
            x[(size_t)j * chunk + i] = onebit_bit(recv + (size_t)j * cb, i) ? ts[j] : -ts[j];
done:
    free(bits);
    free(recv);
    free(ws);
    free(ts);
    free(avg);
    return rc;
}
