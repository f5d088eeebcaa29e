/* Expert parallelism in the model under MPI (tests/test_moe.sh runs it at 2
 * and 4 ranks): a MoE GPT whose experts are dealt over the world (ep = N,
 * each rank E/N experts, tokens dispatched and combined with two all-to-
 * alls forward and two backward per MoE block) against the same GPT with
 * every expert on every rank (ep = 1), each rank on its own batch, from the
 * same seed, top-1 and top-2 with a capacity that drops tokens:
 *  - the initial expert parameters of a rank are its slice of the full ones;
 *  - each rank's loss (with l_aux) is byte-identical;
 *  - each rank's dense gradients are byte-identical;
 *  - the gradients of a rank's experts are byte-identical to the sum, in
 *    rank order, of every rank's gradients of those experts at ep = 1
 *    (what a data-parallel reduction of the ep = 1 model adds up);
 *  - with the gradients kept by source (ZS_MOE_EP_BY_SOURCE), source q's
 *    block of a rank's experts is byte-identical to rank q's ep = 1
 *    gradients of those experts, in every MoE block (so a reduction over
 *    the expert-data-parallel group that takes each source separately, in
 *    fixed point or in ep = 1's order, can give ep = 1's bytes), the
 *    gradients are those of the default mode, and no all-to-all is added.
 * Check runs without fork (CK_NOFORK); failures are agreed across ranks. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zerosim/backend.h"
#include "zerosim/comm.h"
#include "zerosim/data.h"
#include "zerosim/error.h"
#include "zerosim/mem.h"
#include "zerosim/model.h"
#include "mpi_suite.h"

static zs_comm_t world;

typedef struct {
    zs_model *m;
    zs_acts *a;
    float *params, *grads, **P, **G;
    float *src[8];  /* ZS_MOE_EP_BY_SOURCE: each block's source blocks */
    size_t chunk;   /* floats of one source's block */
    double loss;
} ep_model;

static zs_model_config moe_gpt(int k, int ep, int rank)
{
    zs_model_config c;
    memset(&c, 0, sizeof c);
    c.kind = ZS_MODEL_GPT;
    c.n_layer = 2;
    c.n_embd = 16;
    c.n_head = 2;
    c.seq_len = 6;
    c.vocab = 11;
    c.moe_experts = 4;
    c.moe_every = 1;
    c.moe_top_k = k;
    c.moe_capacity_factor = k == 1 ? 0.75 : 0.5; /* drops some choices */
    c.moe_min_capacity = 1;
    c.moe_aux_coeff = 0.1;
    c.moe_ep = ep;
    c.moe_ep_rank = rank;
    return c;
}

/* Build, initialise (seed 42), run forward and backward on batch. */
static void ep_run(ep_model *f, const zs_model_config *c, zs_backend_t be, zs_mem_t mem,
                   zs_batch *batch, zs_comm_t ep)
{
    ck_assert_msg(zs_model_create(c, &f->m) == 0, "%s", zs_error_msg());
    ck_assert_int_eq(zs_model_set_ep_comm(f->m, ep), 0);
    ck_assert_int_eq(zs_model_acts_create(f->m, mem, batch->b, &f->a), 0);
    const zs_layout *lay = zs_model_layout(f->m);
    f->params = calloc(lay->num_params, sizeof(float));
    f->grads = calloc(lay->num_params, sizeof(float));
    f->P = calloc((size_t)lay->n_entries, sizeof(float *));
    f->G = calloc((size_t)lay->n_entries, sizeof(float *));
    for (int i = 0; i < lay->n_entries; i++) {
        f->P[i] = f->params + lay->entries[i].offset;
        f->G[i] = f->grads + lay->entries[i].offset;
    }
    zs_model_init_params(f->m, f->params, 42);
    for (int u = 0; u < lay->n_layers; u++)
        zs_model_forward_unit(f->m, be, u, f->P, f->a, batch);
    f->loss = zs_model_loss(f->a, be);
    for (int u = lay->n_layers - 1; u >= 0; u--) {
        zs_model_backward_unit(f->m, be, u, f->P, f->G, f->a, batch, 1.0f);
        /* units 1..L are the blocks; with every block MoE each one's
         * source blocks are there until the next block's backward */
        size_t chunk;
        const float *s = zs_model_moe_source_grads(f->m, f->a, &chunk);
        ck_assert_int_eq(s != NULL, c->moe_ep > 1 && c->moe_ep_home == ZS_MOE_EP_BY_SOURCE);
        if (s && u >= 1 && u <= c->n_layer && u - 1 < 8) {
            size_t n = chunk * (size_t)c->moe_ep;
            f->chunk = chunk;
            f->src[u - 1] = malloc(n * sizeof(float));
            memcpy(f->src[u - 1], s, n * sizeof(float));
        }
    }
    ck_assert_int_eq(zs_model_tp_failed(f->m), 0);
}

static void ep_free(ep_model *f)
{
    zs_model_acts_destroy(f->a);
    zs_model_destroy(f->m);
    free(f->params);
    free(f->grads);
    free(f->P);
    free(f->G);
    for (int i = 0; i < 8; i++)
        free(f->src[i]);
}

START_TEST(test_ep_equals_ep1)
{
    int N = zs_comm_size(world), me = zs_comm_rank(world), k = _i + 1;
    char err[256];
    zs_backend_t be = zs_backend_init("cpu", err, sizeof err);
    ck_assert_ptr_nonnull(be);
    zs_mem_t mem = zs_mem_create(be, 0, me);
    zs_model_config full = moe_gpt(k, 1, 0), ep = moe_gpt(k, N, me);
    zs_data *d;
    ck_assert_int_eq(zs_data_create(&full, 7, &d), 0);
    int B = 2;
    zs_batch batch = {.b = B};
    batch.tokens = calloc((size_t)B * full.seq_len, sizeof(int32_t));
    batch.targets = calloc((size_t)B * full.seq_len, sizeof(int32_t));
    zs_data_fill(d, (uint64_t)me * B, B, batch.tokens, batch.targets, NULL);
    zs_data_destroy(d);

    ep_model a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    ep_run(&a, &full, be, mem, &batch, NULL);
    zs_comm_clear_records(world);
    ep_run(&b, &ep, be, mem, &batch, N > 1 ? world : NULL);
    /* the all-to-alls in the ledger against zs_model_moe_alltoall_bytes and
     * a hand count: 2 MoE blocks x 4 calls; 12 tokens, capacity
     * ceil(12 / 4 x 0.75) = 3 (top-1) or ceil(12 / 4 x 2 x 0.5) = 3 (top-2),
     * an (E, Cap, C) buffer of 4 x 3 x 16 x 4 = 768 bytes, of which each
     * rank sends (N - 1) / N */
    size_t nrec;
    const zs_comm_record *rec = zs_comm_records(world, &nrec);
    double sent = 0.0;
    int a2a = 0, calls;
    for (size_t i = 0; i < nrec; i++)
        if (rec[i].op == ZS_OP_ALLTOALL) {
            sent += rec[i].wire_bytes;
            a2a++;
        }
    double pred = zs_model_moe_alltoall_bytes(&ep, B, &calls);
    ck_assert_int_eq(a2a, N > 1 ? 8 : 0);
    ck_assert_int_eq(calls, N > 1 ? 8 : 0);
    ck_assert_msg(sent == pred && pred == 8.0 * (N - 1) * 768.0 / N,
                  "rank %d: all-to-all bytes %.0f, predicted %.0f, by hand %.0f", me, sent, pred,
                  8.0 * (N - 1) * 768.0 / N);
    ck_assert_msg(memcmp(&a.loss, &b.loss, sizeof a.loss) == 0, "rank %d loss %.9g vs %.9g", me,
                  a.loss, b.loss);
    zs_moe_stats st;
    int dropped = 0;
    for (int l = 0; l < full.n_layer; l++)
        if (zs_model_moe_stats(a.a, l, &st) == 0)
            dropped += st.dropped;
    ck_assert_int_gt(dropped, 0);

    const zs_layout *la = zs_model_layout(a.m), *lb = zs_model_layout(b.m);
    ck_assert_int_eq(la->n_entries, lb->n_entries);
    int experts = 0;
    for (int i = 0; i < la->n_entries; i++) {
        const zs_param_entry *ea = &la->entries[i], *eb = &lb->entries[i];
        if (!strstr(ea->name, "moe.experts")) {
            ck_assert_uint_eq(ea->numel, eb->numel);
            ck_assert_msg(memcmp(a.grads + ea->offset, b.grads + eb->offset, ea->numel * 4) == 0,
                          "rank %d: dense gradient %s differs", me, ea->name);
            continue;
        }
        experts++;
        ck_assert_uint_eq(ea->numel, eb->numel * (size_t)N);
        size_t n = eb->numel, at = (size_t)me * n; /* this rank's slice */
        ck_assert_msg(memcmp(a.params + ea->offset + at, b.params + eb->offset, n * 4) == 0,
                      "rank %d: initial %s is not its slice", me, ea->name);
        /* every rank's ep = 1 gradient of the entry, summed in rank order */
        float *all = malloc(ea->numel * (size_t)N * 4), *sum = calloc(n, 4);
        ck_assert_int_eq(zs_comm_allgather_small(world, a.grads + ea->offset, all,
                                                 (int)ea->numel, ZS_CT_F32), 0);
        for (int q = 0; q < N; q++)
            for (size_t j = 0; j < n; j++)
                sum[j] = sum[j] + all[(size_t)q * ea->numel + at + j];
        size_t bad = 0;
        for (size_t j = 0; j < n; j++)
            bad += memcmp(&sum[j], b.grads + eb->offset + j, 4) != 0;
        ck_assert_msg(bad == 0, "rank %d: %zu of %zu elements of %s differ from the sum", me,
                      bad, n, ea->name);
        free(all);
        free(sum);
    }
    ck_assert_int_eq(experts, 4 * full.n_layer);

    /* the gradients kept by source */
    ep_model s;
    memset(&s, 0, sizeof s);
    zs_model_config bys = ep;
    bys.moe_ep_home = ZS_MOE_EP_BY_SOURCE;
    zs_comm_clear_records(world);
    ep_run(&s, &bys, be, mem, &batch, N > 1 ? world : NULL);
    rec = zs_comm_records(world, &nrec);
    a2a = 0;
    for (size_t i = 0; i < nrec; i++)
        a2a += rec[i].op == ZS_OP_ALLTOALL;
    ck_assert_int_eq(a2a, N > 1 ? 8 : 0);
    ck_assert_msg(memcmp(&s.loss, &b.loss, sizeof s.loss) == 0, "rank %d: by-source loss", me);
    ck_assert_msg(memcmp(s.grads, b.grads, lb->num_params * 4) == 0,
                  "rank %d: the by-source gradients differ from the default mode's", me);
    int blocks = 0;
    for (int l = 0; l < full.n_layer && N > 1; l++) {
        /* source q's block: this rank's slices of fc.w, fc.b, proj.w,
         * proj.b, against rank q's ep = 1 gradients of them */
        ck_assert_ptr_nonnull(s.src[l]);
        size_t pos = 0;
        for (int i = 0; i < la->n_entries; i++) {
            const zs_param_entry *ea = &la->entries[i], *eb = &lb->entries[i];
            int blk;
            if (!strstr(ea->name, "moe.experts") || sscanf(ea->name, "h%d.", &blk) != 1 ||
                blk != l)
                continue;
            size_t n = eb->numel, at = (size_t)me * n;
            float *all = malloc(ea->numel * (size_t)N * 4);
            ck_assert_int_eq(zs_comm_allgather_small(world, a.grads + ea->offset, all,
                                                     (int)ea->numel, ZS_CT_F32), 0);
            for (int q = 0; q < N; q++)
                ck_assert_msg(memcmp(s.src[l] + (size_t)q * s.chunk + pos,
                                     all + (size_t)q * ea->numel + at, n * 4) == 0,
                              "rank %d: block %d, %s: source %d's gradients are not its ep = 1 "
                              "gradients", me, l, ea->name, q);
            free(all);
            pos += n;
            blocks++;
        }
        ck_assert_uint_eq(pos, s.chunk);
    }
    ck_assert_int_eq(blocks, N > 1 ? 4 * full.n_layer : 0);
    ep_free(&s);
    ep_free(&a);
    ep_free(&b);
    free(batch.tokens);
    free(batch.targets);
    zs_mem_destroy(mem);
    zs_backend_release(be);
}
END_TEST

int main(int argc, char **argv)
{
    if (zs_comm_init(&argc, &argv, &world))
        return 1;
    Suite *s = suite_create("ep");
    TCase *tc = tcase_create("expert parallelism");
    tcase_add_loop_test(tc, test_ep_equals_ep1, 0, 2);
    suite_add_tcase(s, tc);
    return zs_test_run_mpi_suite(s, world);
}
