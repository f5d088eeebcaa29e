/* MPI tests of the comm layer, run under mpiexec with several ranks
 * (tests/test_comm.sh): reduce-scatter against a reference sum for uneven
 * and zero counts, messages longer than one ring segment, each element
 * type, with the ring and with MPI_Reduce_scatter; allgatherv in place.
 * Check runs without fork (CK_NOFORK) as Open MPI advises; failures are
 * combined across ranks so every rank exits with the same code. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "zerosim/backend.h"
#include "zerosim/comm.h"
#include "zerosim/mesh.h"
#include "mpi_suite.h"

static zs_comm_t comm;

/* Counts per rank for pattern k: uneven, some zero, some > one segment;
 * pattern 4 (fp32 through the ring only) has more segments than the ring
 * keeps in flight at once. */
static void make_counts(int k, int N, int *counts)
{
    static const int pat[5][8] = {
        {5, 0, 7, 3, 1, 2, 9, 4},
        {0, 0, 11, 0, 0, 1, 0, 0},
        {300000, 1, 0, 200001, 7, 131073, 5, 2},
        {1, 1, 1, 1, 1, 1, 1, 1},
        {600001, 0, 3, 524289, 1, 2, 0, 9},
    };
    for (int q = 0; q < N; q++)
        counts[q] = pat[k][q % 8];
}

/* Value that rank q contributes at element i (exact in every type). */
static double contrib(size_t i, int q) { return (double)((i * 7 + (size_t)q * 3) % 64) - 20.0; }

static void check_rs(int k, zs_comm_type t, int ring)
{
    int N = zs_comm_size(comm), me = zs_comm_rank(comm);
    int counts[64];
    make_counts(k, N, counts);
    size_t tot = 0, maxc = 0, disp = 0;
    for (int q = 0; q < N; q++) {
        if (q < me)
            disp += (size_t)counts[q];
        tot += (size_t)counts[q];
        if ((size_t)counts[q] > maxc)
            maxc = (size_t)counts[q];
    }
    size_t es = zs_comm_type_size(t);
    char *send = malloc(tot * es + 8), *recv = malloc((size_t)counts[me] * es + 8);
    void *scratch = malloc(2 * maxc * es + 8);
    for (size_t i = 0; i < tot; i++) {
        double v = contrib(i, me);
        switch (t) {
        case ZS_CT_F32: ((float *)send)[i] = (float)v; break;
        case ZS_CT_BF16: ((uint16_t *)send)[i] = zs_f32_to_bf16((float)v); break;
        case ZS_CT_F16: ((uint16_t *)send)[i] = zs_f32_to_f16((float)v); break;
        case ZS_CT_I64: ((int64_t *)send)[i] = (int64_t)v; break;
        default: ((double *)send)[i] = v; break;
        }
    }
    zs_comm_set_scratch(comm, ring ? scratch : NULL, ring ? 2 * maxc * es + 8 : 0);
    ck_assert_int_eq(zs_comm_reduce_scatter(comm, send, recv, counts, t, 0), 0);
    for (int i = 0; i < counts[me]; i++) {
        double want = 0.0, got;
        for (int q = 0; q < N; q++)
            want += contrib(disp + (size_t)i, q);
        switch (t) {
        case ZS_CT_F32: got = ((float *)recv)[i]; break;
        case ZS_CT_BF16: got = zs_bf16_to_f32(((uint16_t *)recv)[i]); break;
        case ZS_CT_F16: got = zs_f16_to_f32(((uint16_t *)recv)[i]); break;
        case ZS_CT_I64: got = (double)((int64_t *)recv)[i]; break;
        default: got = ((double *)recv)[i]; break;
        }
        /* small integers: every partial sum is exact in every type */
        ck_assert_msg(got == want, "pattern %d type %d ring %d rank %d element %d: %g != %g", k,
                      (int)t, ring, me, i, got, want);
    }
    zs_comm_set_scratch(comm, NULL, 0);
    free(send);
    free(recv);
    free(scratch);
}

START_TEST(test_reduce_scatter)
{
    static const zs_comm_type types[] = {ZS_CT_F32, ZS_CT_BF16, ZS_CT_F16, ZS_CT_I64, ZS_CT_F64};
    for (int k = 0; k < 4; k++)
        for (int ti = 0; ti < 5; ti++)
            for (int ring = 0; ring < 2; ring++)
                check_rs(k, types[ti], ring);
    check_rs(4, ZS_CT_F32, 1);
}
END_TEST

START_TEST(test_allgatherv)
{
    int N = zs_comm_size(comm), me = zs_comm_rank(comm);
    for (int k = 0; k < 4; k++) {
        int counts[64], displs[64];
        make_counts(k, N, counts);
        size_t tot = 0;
        for (int q = 0; q < N; q++) {
            displs[q] = (int)tot;
            tot += (size_t)counts[q];
        }
        float *buf = calloc(tot + 1, sizeof(float));
        for (int i = 0; i < counts[me]; i++)
            buf[displs[me] + i] = (float)(me * 1000 + i % 997);
        ck_assert_int_eq(zs_comm_allgatherv_inplace(comm, buf, counts, displs, ZS_CT_F32, 0), 0);
        for (int q = 0; q < N; q++)
            for (int i = 0; i < counts[q]; i++)
                ck_assert_float_eq(buf[displs[q] + i], (float)(q * 1000 + i % 997));
        free(buf);
    }
}
END_TEST

/* Every collective call is recorded once, with its op and element count. */
START_TEST(test_ledger)
{
    int N = zs_comm_size(comm);
    zs_comm_clear_records(comm);
    zs_comm_set_context(comm, ZS_PHASE_BACKWARD, 3);
    int counts[64];
    make_counts(0, N, counts);
    size_t tot = 0;
    for (int q = 0; q < N; q++)
        tot += (size_t)counts[q];
    float *a = calloc(tot + 1, sizeof(float)), *b = calloc(tot + 1, sizeof(float));
    ck_assert_int_eq(zs_comm_reduce_scatter(comm, a, b, counts, ZS_CT_F32, 5), 0);
    size_t n;
    const zs_comm_record *r = zs_comm_records(comm, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(r[0].op, ZS_OP_REDUCE_SCATTER);
    ck_assert_int_eq(r[0].phase, ZS_PHASE_BACKWARD);
    ck_assert_int_eq(r[0].step, 3);
    ck_assert_int_eq(r[0].layer, 5);
    ck_assert_uint_eq(r[0].elems, tot);
    ck_assert_uint_eq(r[0].elem_size, 4);
    free(a);
    free(b);
}
END_TEST

/* Rank q's input to round r of the 1-bit all-reduce, element i. */
static float onebit_input(size_t i, int q, int r)
{
    return (float)((double)((i * 37 + (size_t)q * 11 + (size_t)r * 5) % 23) - 11.3) * 0.01f;
}

/* 1-bit Adam's compressed all-reduce (arXiv 2102.02888, section 4) against
 * a reference in double written here from the paper's description: three
 * rounds, so that the worker and server errors carry; its ledger: one
 * all-to-all and one allgather of (N - 1) n / (8 N) bytes each (32 times
 * fewer than an fp32 all-reduce of the same n), the scales as scalars. */
START_TEST(test_onebit)
{
    int N = zs_comm_size(comm), me = zs_comm_rank(comm);
    size_t n = 8 * (size_t)N * 37, c = n / (size_t)N;
    float *x = calloc(n, sizeof(float)), *we = calloc(n, sizeof(float));
    float *se = calloc(c, sizeof(float));
    double *rwe = calloc(n * (size_t)N, sizeof(double)), *rse = calloc(n, sizeof(double));
    double *rx = calloc(n * (size_t)N, sizeof(double)), *out = calloc(n, sizeof(double));
    double *ws = calloc((size_t)N, sizeof(double));
    for (int r = 0; r < 3; r++) {
        for (size_t i = 0; i < n; i++)
            x[i] = onebit_input(i, me, r);
        zs_comm_clear_records(comm);
        ck_assert_int_eq(zs_comm_onebit_allreduce(comm, x, n, we, se, 7), 0);
        /* the reference: every rank's worker, every server */
        for (int q = 0; q < N; q++) {
            double *v = rx + (size_t)q * n, ss = 0.0;
            for (size_t i = 0; i < n; i++) {
                v[i] = (double)onebit_input(i, q, r) + rwe[(size_t)q * n + i];
                ss += v[i] * v[i];
            }
            ws[q] = sqrt(ss / (double)n);
            for (size_t i = 0; i < n; i++)
                rwe[(size_t)q * n + i] = v[i] - (v[i] >= 0 ? ws[q] : -ws[q]);
        }
        for (int j = 0; j < N; j++) {
            double ss = 0.0;
            for (size_t i = j * c; i < (size_t)(j + 1) * c; i++) {
                double a = 0.0;
                for (int q = 0; q < N; q++)
                    a += rx[(size_t)q * n + i] >= 0 ? ws[q] : -ws[q];
                out[i] = a / N + rse[i];
                ss += out[i] * out[i];
            }
            double t = sqrt(ss / (double)c);
            for (size_t i = j * c; i < (size_t)(j + 1) * c; i++) {
                double a = out[i];
                out[i] = a >= 0 ? t : -t;
                rse[i] = a - out[i];
            }
        }
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(fabs((double)x[i] - out[i]) <= 1e-5 * fabs(out[i]) + 1e-7,
                          "round %d rank %d element %zu: %.9g, reference %.9g", r, me, i,
                          (double)x[i], out[i]);
        for (size_t i = 0; i < c; i++) /* this rank's server error */
            ck_assert(fabs((double)se[i] - rse[(size_t)me * c + i]) <= 1e-5);
    }
    size_t nr;
    const zs_comm_record *rec = zs_comm_records(comm, &nr);
    double a2a = 0.0, ag = 0.0, sc = 0.0;
    for (size_t k = 0; k < nr; k++) {
        if (rec[k].op == ZS_OP_ALLTOALL)
            a2a += rec[k].wire_bytes;
        else if (rec[k].op == ZS_OP_ALLGATHER)
            ag += rec[k].wire_bytes;
        else if (rec[k].op == ZS_OP_SCALARS)
            sc += (double)(rec[k].elems * rec[k].elem_size);
        ck_assert_int_eq(rec[k].layer, rec[k].op == ZS_OP_SCALARS ? -1 : 7);
    }
    ck_assert_uint_eq(nr, 4);
    double signs = (double)(N - 1) * (double)n / (8.0 * N); /* by hand */
    ck_assert(a2a == signs && ag == signs && sc == 8.0 * N);
    zs_onebit_sizes sz;
    zs_comm_onebit_sizes(n, N, &sz);
    ck_assert(sz.alltoall_bytes == a2a && sz.allgather_bytes == ag && sz.scalar_bytes == sc);
    zs_comm_clear_records(comm);
    ck_assert_int_eq(zs_comm_allreduce_sum(comm, x, n, ZS_CT_F32, 7), 0);
    rec = zs_comm_records(comm, &nr);
    ck_assert(N == 1 || rec[0].wire_bytes == 32.0 * (a2a + ag));
    ck_assert_int_ne(zs_comm_onebit_allreduce(comm, x, n - 4, we, se, 7), 0);
    free(x), free(we), free(se), free(rwe), free(rse), free(rx), free(out), free(ws);
}
END_TEST

/* Split into pairs (ranks 2k, 2k+1; a lone last rank alone): the group's
 * allreduce sums only its members, its records land in the world's ledger
 * tagged with its group, and its wire bytes use its own size. */
START_TEST(test_split)
{
    int N = zs_comm_size(comm), me = zs_comm_rank(comm);
    int color = me / 2, size = (me / 2 * 2 + 1 < N) ? 2 : 1, rank = me % 2;
    zs_comm_t sub;
    ck_assert_int_eq(zs_comm_split(comm, color, me, size, rank, ZS_GROUP_TP, &sub), 0);
    ck_assert_int_eq(zs_comm_size(sub), size);
    ck_assert_int_eq(zs_comm_rank(sub), rank);
    ck_assert_int_eq(zs_comm_get_group(sub), ZS_GROUP_TP);
    zs_comm_clear_records(comm);
    zs_comm_set_context(comm, ZS_PHASE_FORWARD, 7);
    float v[3] = {(float)me, 1.0f, 2.0f * (float)me};
    ck_assert_int_eq(zs_comm_allreduce_sum(sub, v, 3, ZS_CT_F32, 2), 0);
    float lo = (float)(me / 2 * 2), want = size == 2 ? 2 * lo + 1 : lo;
    ck_assert_float_eq(v[0], want);
    ck_assert_float_eq(v[1], (float)size);
    ck_assert_float_eq(v[2], 2 * want);
    size_t n;
    const zs_comm_record *r = zs_comm_records(comm, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(r[0].group, ZS_GROUP_TP);
    ck_assert_int_eq(r[0].phase, ZS_PHASE_FORWARD);
    ck_assert_int_eq(r[0].step, 7);
    ck_assert(r[0].wire_bytes == 2.0 * 12.0 * (size - 1) / size);
    /* a wrong expectation is an error, not a silent mismatch */
    zs_comm_t bad = NULL;
    ck_assert_int_ne(zs_comm_split(comm, 0, me, N + 1, 0, ZS_GROUP_DP, &bad), 0);
    ck_assert_ptr_null(bad);
    zs_comm_free(sub);
    zs_comm_clear_records(comm);
}
END_TEST

/* A mesh of tp 2 (when the world is even): each group's communicator has
 * its size and this rank's coordinate, and an allreduce over it sums
 * exactly its members (Megatron's rank order). */
START_TEST(test_mesh)
{
    int N = zs_comm_size(comm), me = zs_comm_rank(comm);
    int tp = N % 2 == 0 ? 2 : 1;
    zs_mesh *m;
    ck_assert_int_eq(zs_mesh_create(comm, tp, 1, &m), 0);
    zs_mesh_coord c = zs_mesh_self(m);
    ck_assert_int_eq(c.tp, me % tp);
    ck_assert_int_eq(c.dp, me / tp);
    static const zs_comm_group axes[] = {ZS_GROUP_TP, ZS_GROUP_DP, ZS_GROUP_PP};
    for (int i = 0; i < 3; i++) {
        zs_comm_t g = zs_mesh_comm(m, axes[i]);
        int size = zs_mesh_group_size(N, tp, 1, axes[i]);
        ck_assert_int_eq(zs_comm_size(g), size);
        int ranks[64], idx = zs_mesh_group_index(N, tp, 1, axes[i], me);
        zs_mesh_group_ranks(N, tp, 1, axes[i], idx, ranks);
        double v = (double)(me * me + 1), want = 0;
        for (int k = 0; k < size; k++)
            want += (double)(ranks[k] * ranks[k] + 1);
        ck_assert_int_eq(zs_comm_allreduce_sum(g, &v, 1, ZS_CT_F64, -1), 0);
        ck_assert(v == want);
    }
    zs_mesh_free(m);
    zs_mesh *bad = NULL;
    ck_assert_int_ne(zs_mesh_create(comm, N + 1, 1, &bad), 0);
    ck_assert_ptr_null(bad);
    zs_comm_clear_records(comm);
}
END_TEST

int main(int argc, char **argv)
{
    if (zs_comm_init(&argc, &argv, &comm))
        return 1;
    Suite *s = suite_create("comm");
    TCase *tc = tcase_create("collectives");
    tcase_add_test(tc, test_reduce_scatter);
    tcase_add_test(tc, test_allgatherv);
    tcase_add_test(tc, test_ledger);
    tcase_add_test(tc, test_onebit);
    tcase_add_test(tc, test_split);
    tcase_add_test(tc, test_mesh);
    suite_add_tcase(s, tc);
    return zs_test_run_mpi_suite(s, comm);
}
