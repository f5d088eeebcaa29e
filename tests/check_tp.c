/* Tensor parallelism under MPI (tests/test_tp.sh runs it at 2 and 4 ranks):
 *  - every tensor-parallel layer's backward against central differences of
 *    the loss, across the ranks of the group: for elements of each sharded
 *    entry (QKV weight and bias, attention projection, MLP weights and
 *    first bias, token embedding) and of replicated ones (LayerNorm,
 *    position embedding, the row-parallel biases);
 *  - 20 steps of a GPT at TP = N (and TP 2 x DP 2 at 4 ranks) against the
 *    same GPT at TP = 1 from the same initial values on the same batches:
 *    the largest relative differences of the losses and of the parameters
 *    (gathered in the tp = 1 order), printed and held to a tolerance;
 *  - the size checks (heads, vocabulary, 4C not divisible by T).
 * Check runs without fork (CK_NOFORK); failures are agreed across ranks. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zerosim/backend.h"
#include "zerosim/comm.h"
#include "zerosim/config.h"
#include "zerosim/error.h"
#include "zerosim/mem.h"
#include "zerosim/mesh.h"
#include "zerosim/model.h"
#include "zerosim/zero.h"
#include "mpi_suite.h"

static zs_comm_t world;

static zs_model_config tiny(int tp, int rank)
{
    zs_model_config c;
    memset(&c, 0, sizeof c);
    c.kind = ZS_MODEL_GPT;
    c.n_layer = 2;
    c.n_embd = 16;
    c.n_head = 4;
    c.seq_len = 8;
    c.vocab = 12;
    c.tp = tp;
    c.tp_rank = rank;
    return c;
}

typedef struct {
    zs_model *m;
    zs_acts *a;
    zs_batch batch;
    float *params, *grads;
    float **P, **G;
} fd_model;

/* The mean loss of one micro-batch of B = 2 (forward of every unit). */
static double fd_loss(fd_model *f, zs_backend_t be)
{
    const zs_layout *lay = zs_model_layout(f->m);
    for (int i = 0; i < lay->n_entries; i++)
        f->P[i] = f->params + lay->entries[i].offset;
    for (int u = 0; u < lay->n_layers; u++)
        zs_model_forward_unit(f->m, be, u, f->P, f->a, &f->batch);
    return zs_model_loss(f->a, be);
}

START_TEST(test_finite_differences)
{
    int N = zs_comm_size(world), me = zs_comm_rank(world);
    if (_i == 1 && N == 1)
        return; /* sequence parallelism needs a group */
    char err[256];
    zs_backend_t be = zs_backend_init("cpu", err, sizeof err);
    zs_mem_t mem = zs_mem_create(be, 0, me);
    zs_model_config mc = tiny(N, me);
    mc.sequence_parallel = _i == 1;
    fd_model f;
    memset(&f, 0, sizeof f);
    ck_assert_msg(zs_model_create(&mc, &f.m) == 0, "%s", zs_error_msg());
    ck_assert_int_eq(zs_model_set_tp_comm(f.m, N > 1 ? world : NULL), 0);
    ck_assert_int_eq(zs_model_acts_create(f.m, mem, 2, &f.a), 0);
    const zs_layout *lay = zs_model_layout(f.m);
    size_t n = lay->num_params;
    f.params = malloc(n * sizeof(float));
    f.grads = calloc(n, sizeof(float));
    f.P = calloc((size_t)lay->n_entries, sizeof(float *));
    f.G = calloc((size_t)lay->n_entries, sizeof(float *));
    zs_model_init_params(f.m, f.params, 7);
    int32_t tok[16] = {1, 5, 7, 11, 0, 3, 9, 2, 4, 10, 6, 8, 2, 2, 7, 0};
    int32_t tgt[16] = {5, 7, 11, 0, 3, 9, 2, 4, 10, 6, 8, 1, 2, 7, 0, 1};
    f.batch = (zs_batch){.b = 2, .tokens = tok, .targets = tgt};
    /* the gradient of the mean loss */
    fd_loss(&f, be);
    for (int i = 0; i < lay->n_entries; i++)
        f.G[i] = f.grads + lay->entries[i].offset;
    for (int u = lay->n_layers - 1; u >= 0; u--)
        zs_model_backward_unit(f.m, be, u, f.P, f.G, f.a, &f.batch, 1.0f);
    /* entries: wte, wpe, then per block ln1.w ln1.b qkv.w qkv.b proj.w
     * proj.b ln2.w ln2.b fc.w fc.b fcproj.w fcproj.b */
    static const int entries[] = {0, 1, 2, 4, 5, 6, 7, 10, 11, 12, 13, 16, 19};
    int checked = 0;
    double worst = 0;
    for (size_t k = 0; k < sizeof entries / sizeof entries[0]; k++) {
        const zs_param_entry *pe = &lay->entries[entries[k]];
        int repl = zs_model_tp_replicated(f.m, pe->offset);
        for (int probe = 0; probe < 3; probe++) {
            size_t j = pe->offset + (size_t)(probe * 7 + 3) % pe->numel;
            /* a sharded element belongs to one rank: perturb it there; a
             * replicated one is the same parameter on every rank */
            for (int owner = 0; owner < (repl ? 1 : N); owner++) {
                int mine = repl || owner == me;
                const double h = 2e-3;
                float keep = f.params[j];
                if (mine)
                    f.params[j] = keep + (float)h;
                double lp = fd_loss(&f, be);
                if (mine)
                    f.params[j] = keep - (float)h;
                double lm = fd_loss(&f, be);
                f.params[j] = keep;
                double fd = (lp - lm) / (2 * h);
                /* the owner's gradient, shared so every rank checks it */
                double g = mine ? f.grads[j] : 0.0, gall[64];
                ck_assert_int_eq(zs_comm_allgather_small(world, &g, gall, 1, ZS_CT_F64), 0);
                double an = gall[repl ? 0 : owner];
                double d = fabs(an - fd) / fmax(1e-2, fabs(fd));
                if (d > worst)
                    worst = d;
                ck_assert_msg(d < 2e-2, "%s[%zu] (TP rank %d): backward %.6g, differences %.6g",
                              pe->name, j - pe->offset, owner, an, fd);
                checked++;
            }
        }
    }
    if (me == 0)
        printf("finite differences at TP %d%s: %d elements, largest relative difference %.3g\n",
               N, mc.sequence_parallel ? " with sequence parallelism" : "", checked, worst);
    zs_model_acts_destroy(f.a);
    zs_model_destroy(f.m);
    free(f.params);
    free(f.grads);
    free(f.P);
    free(f.G);
    zs_mem_destroy(mem);
    zs_backend_release(be);
}
END_TEST

static int sp_on; /* the runs of compare() use sequence parallelism */

static zs_run_config gpt_run(void)
{
    zs_run_config c;
    zs_run_config_defaults(&c);
    c.model.kind = ZS_MODEL_GPT;
    c.model.n_layer = 2;
    c.model.n_embd = 32;
    c.model.n_head = 4;
    c.model.seq_len = 16;
    c.model.vocab = 64;
    c.micro_batch = 2;
    c.grad_accum = 2;
    c.steps = 20;
    c.warmup_steps = 0;
    return c;
}

/* Run cfg for its steps over the world split as tp x dp; the losses, and
 * the full parameters in tp = 1 order on rank 0. */
static void run_mesh(zs_run_config c, int tp, int stage, float *losses, float *params)
{
    int N = zs_comm_size(world), me = zs_comm_rank(world);
    c.tp = tp;
    c.sequence_parallel = sp_on;
    c.stage = stage;
    ck_assert_msg(zs_run_config_finalize(&c, N) == 0, "%s", zs_error_msg());
    zs_mesh *mesh;
    ck_assert_int_eq(zs_mesh_create(world, tp, 1, &mesh), 0);
    c.model.tp_rank = zs_mesh_self(mesh).tp;
    char err[256];
    zs_backend_t be = zs_backend_init("cpu", err, sizeof err);
    zs_mem_t mem = zs_mem_create(be, 0, me);
    zs_engine *e;
    ck_assert_msg(zs_engine_create(&c, be, mem, zs_mesh_comm(mesh, ZS_GROUP_DP), &e) == 0, "%s",
                  zs_error_msg());
    ck_assert_int_eq(zs_engine_set_tp(e, zs_mesh_comm(mesh, ZS_GROUP_TP)), 0);
    for (int s = 0; s < c.steps; s++) {
        zs_step_info info;
        ck_assert_int_eq(zs_engine_step(e, s, &info), 0);
        losses[s] = info.loss;
    }
    ck_assert_int_eq(zs_engine_get_full_params(e, params), 0);
    zs_engine_destroy(e);
    zs_mem_destroy(mem);
    zs_backend_release(be);
    zs_mesh_free(mesh);
}

/* TP = T against TP = 1 on the same data-parallel size (the same global
 * batch): the largest relative differences after 20 fp32 steps. */
static void compare(int tp, int stage)
{
    int N = zs_comm_size(world), me = zs_comm_rank(world);
    zs_run_config c = gpt_run();
    size_t n = zs_model_count_params(&c.model);
    float *pa = calloc(n, sizeof(float)), *pb = calloc(n, sizeof(float));
    float la[20], lb[20];
    /* TP = 1 on the data-parallel group alone: the world split as tp x dp
     * with every TP group running the same TP = 1 model is the same as
     * running data parallelism over N / tp ranks; emulate it with a split */
    zs_comm_t dp1;
    int D = N / tp;
    ck_assert_int_eq(zs_comm_split(world, me % tp, me / tp, D, me / tp, ZS_GROUP_DP, &dp1), 0);
    {
        zs_run_config c1 = c;
        c1.stage = stage;
        ck_assert_int_eq(zs_run_config_finalize(&c1, D), 0);
        char err[256];
        zs_backend_t be = zs_backend_init("cpu", err, sizeof err);
        zs_mem_t mem = zs_mem_create(be, 0, me);
        zs_engine *e;
        ck_assert_msg(zs_engine_create(&c1, be, mem, dp1, &e) == 0, "%s", zs_error_msg());
        for (int s = 0; s < c1.steps; s++) {
            zs_step_info info;
            ck_assert_int_eq(zs_engine_step(e, s, &info), 0);
            la[s] = info.loss;
        }
        ck_assert_int_eq(zs_engine_get_params(e, pa), 0);
        zs_engine_destroy(e);
        zs_mem_destroy(mem);
        zs_backend_release(be);
    }
    zs_comm_free(dp1);
    run_mesh(c, tp, stage, lb, pb);
    if (me == 0) {
        double dl = 0, dp = 0, pmax = 0;
        for (int s = 0; s < 20; s++)
            dl = fmax(dl, fabs((double)la[s] - lb[s]) / fabs((double)la[s]));
        for (size_t i = 0; i < n; i++)
            pmax = fmax(pmax, fabs((double)pa[i]));
        for (size_t i = 0; i < n; i++)
            dp = fmax(dp, fabs((double)pa[i] - pb[i]));
        printf("TP %d x DP %d%s, stage %d, 20 fp32 steps against TP 1: losses differ by at most "
               "%.3g (relative), parameters by %.3g (of the largest |parameter|, %.3g)\n", tp, D,
               sp_on ? " with SP" : "", stage, dl, dp / pmax, pmax);
        ck_assert_msg(dl < 1e-5, "losses differ by %.3g", dl);
        ck_assert_msg(dp / pmax < 1e-4, "parameters differ by %.3g", dp / pmax);
        ck_assert_msg(dp > 0, "TP = T gave the same bytes as TP = 1: the sums were not split");
    }
    free(pa);
    free(pb);
}

START_TEST(test_tp_equals_tp1)
{
    int N = zs_comm_size(world);
    if (N == 1)
        return; /* nothing to split */
    compare(N, 0);
    if (N == 4) {
        compare(2, 1);
        compare(2, 3);
    }
    sp_on = 1;
    compare(N, 2);
    if (N == 4)
        compare(2, 3);
    sp_on = 0;
}
END_TEST

START_TEST(test_sizes)
{
    zs_model_config c = tiny(3, 0); /* 4 heads, vocab 12, 4C 64 */
    ck_assert_int_ne(zs_model_config_validate(&c), 0);
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "heads"));
    c = tiny(8, 0); /* heads 4 */
    ck_assert_int_ne(zs_model_config_validate(&c), 0);
    c = tiny(4, 0);
    c.vocab = 14;
    ck_assert_int_ne(zs_model_config_validate(&c), 0);
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "vocab"));
    c = tiny(4, 0);
    ck_assert_int_eq(zs_model_config_validate(&c), 0);
    c.sequence_parallel = 1;
    c.seq_len = 6; /* not divisible by 4 */
    ck_assert_int_ne(zs_model_config_validate(&c), 0);
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "model.seq"));
}
END_TEST

int main(int argc, char **argv)
{
    if (zs_comm_init(&argc, &argv, &world))
        return 1;
    Suite *s = suite_create("tp");
    TCase *tc = tcase_create("tensor parallelism");
    tcase_add_test(tc, test_sizes);
    tcase_add_loop_test(tc, test_finite_differences, 0, 2);
    tcase_add_test(tc, test_tp_equals_tp1);
    suite_add_tcase(s, tc);
    return zs_test_run_mpi_suite(s, world);
}
