/* Tests of the step program (zerosim/program.h), without MPI:
 *  - what the program counts equals the closed forms of predict.h (model
 *    states, activations, checkpoints, residual, reduce-scatter and
 *    allgather bytes) over a matrix of stages, precisions (bf16 with fp32
 *    gradient accumulation too), rank counts,
 *    deterministic mode, checkpointing, accumulation and bucket sizes;
 *  - hand counts: one reduce per bucket and micro-batch (per step for
 *    stages 0 and 1 with grad_reduce step); stage 3 gathers
 *    each unit once per pass (the head's tied embedding on its own), plus
 *    the recomputed units; buckets cut from the last unit backwards;
 *  - the ops are well formed: every forward and backward of stage 3 runs
 *    on a waited-for gather, every gather is released, no bucket is reduced
 *    twice in a micro-batch, the live parameters stay under the bound;
 *  - the O(1) per-rank parts equal a rank-by-rank count. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zerosim/config.h"
#include "zerosim/mesh.h"
#include "zerosim/model.h"
#include "zerosim/predict.h"
#include "zerosim/program.h"

static zs_run_config gpt(int L, int C, int NH, int T, int V)
{
    zs_run_config c;
    zs_run_config_defaults(&c);
    c.model.kind = ZS_MODEL_GPT;
    c.model.n_layer = L;
    c.model.n_embd = C;
    c.model.n_head = NH;
    c.model.seq_len = T;
    c.model.vocab = V;
    c.micro_batch = 2;
    c.grad_accum = 1;
    c.steps = 1;
    c.warmup_steps = 0;
    c.train_batch_size = 0;
    return c;
}

typedef struct {
    zs_model *m;
    zs_step_shape s;
    zs_step_program p;
    zs_step_count c;
} built;

static void build(zs_run_config *c, int N, built *b)
{
    ck_assert_int_eq(zs_run_config_finalize(c, N), 0);
    ck_assert_int_eq(zs_model_create(&c->model, &b->m), 0);
    ck_assert_int_eq(zs_step_shape_build(c, b->m, N, &b->s), 0);
    ck_assert_int_eq(zs_step_program_build(&b->s, b->m, 0, &b->p), 0);
    zs_step_program_count(&b->s, &b->p, &b->c);
}

static void unbuild(built *b)
{
    zs_step_program_free(&b->p);
    zs_step_shape_free(&b->s);
    zs_model_destroy(b->m);
}

START_TEST(test_counts_equal_closed_forms)
{
    static const int Ns[] = {1, 2, 3, 5, 8};
    /* the fourth: bf16 with fp32 gradient accumulation */
    static const zs_dtype prec[] = {ZS_DTYPE_F32, ZS_DTYPE_BF16, ZS_DTYPE_F16, ZS_DTYPE_BF16};
    static const int gacc[] = {-1, -1, -1, ZS_DTYPE_F32};
    int cases = 0;
    for (int ni = 0; ni < 5; ni++)
        for (int st = 0; st <= 3; st++)
            for (int pi = 0; pi < 4; pi++)
                for (int v = 0; v < 6; v++) {
                    zs_run_config c = gpt(3, 24, 4, 12, 31);
                    c.stage = st;
                    c.precision = prec[pi];
                    c.grad_accum_dtype = gacc[pi];
                    c.deterministic = (v == 1 || v == 5) && pi != 2;
                    c.grad_accum = v == 2 || v == 4 ? 3 : v == 5 ? 2 : 1;
                    /* DeepSpeed's schedule: stages 0, 1 reduce once per step */
                    if (v >= 4)
                        c.grad_reduce = ZS_GRAD_REDUCE_STEP;
                    if (v == 3) {
                        c.checkpoint_mode = ZS_CKPT_EVERY;
                        c.checkpoint_value = 1;
                        c.reduce_bucket_size = 1000;
                        c.allgather_bucket_size = 1500;
                        c.stage3_max_live_parameters = 20000;
                        c.stage3_prefetch_bucket_size = 8000;
                    }
                    int N = Ns[ni];
                    built b;
                    build(&c, N, &b);
                    zs_prediction cf;
                    ck_assert_int_eq(zs_predict_closed(&c, N, &cf), 0);
                    static const zs_mem_category cats[] = {
                        ZS_MEM_PARAMS, ZS_MEM_GRADS, ZS_MEM_OPT_MASTER, ZS_MEM_OPT_M,
                        ZS_MEM_OPT_V, ZS_MEM_ACTIVATIONS, ZS_MEM_CHECKPOINTS, ZS_MEM_COMPRESSION};
                    for (size_t k = 0; k < sizeof cats / sizeof cats[0]; k++)
                        ck_assert_msg(b.c.peak[cats[k]] == cf.bytes[cats[k]],
                                      "N=%d stage %d prec %d variant %d: %s program %zu closed %zu",
                                      N, st, pi, v, zs_mem_category_name(cats[k]),
                                      b.c.peak[cats[k]], cf.bytes[cats[k]]);
                    ck_assert_msg((size_t)b.c.rs_bytes == cf.rs_bytes_per_step,
                                  "N=%d stage %d: reduce-scatter %g vs %zu", N, st, b.c.rs_bytes,
                                  cf.rs_bytes_per_step);
                    size_t ag = st == 3 ? b.c.gathered_elems * b.s.ps : (size_t)b.c.ag_bytes;
                    ck_assert_msg(ag == cf.ag_bytes_per_step, "N=%d stage %d: allgather %zu vs %zu",
                                  N, st, ag, cf.ag_bytes_per_step);
                    ck_assert_uint_eq(b.c.live_params, cf.live_params);
                    unbuild(&b);
                    cases++;
                }
    ck_assert_int_eq(cases, 5 * 4 * 4 * 6);
}
END_TEST

/* A GPT of L blocks has U = L + 2 units; unit U-1 (final LayerNorm and the
 * tied head) gathers its own range and the token embedding: U + 1 gather
 * calls per pass. With checkpointing every block, blocks 1..L-1 are
 * recomputed before their backward (the last segment's activations are
 * still there). */
START_TEST(test_hand_counts)
{
    int L = 4, U = L + 2;
    for (int ck = 0; ck <= 1; ck++)
        for (int GA = 1; GA <= 2; GA++) {
            zs_run_config c = gpt(L, 16, 2, 8, 20);
            c.stage = 3;
            c.grad_accum = GA;
            c.reduce_bucket_size = 700;
            if (ck) {
                c.checkpoint_mode = ZS_CKPT_EVERY;
                c.checkpoint_value = 1;
            }
            built b;
            build(&c, 4, &b);
            int recompute = ck ? L - 1 : 0;
            ck_assert_int_eq((int)b.c.recompute_units, GA * recompute);
            ck_assert_int_eq((int)b.c.gather_calls, GA * (2 * (U + 1) + recompute));
            ck_assert_int_eq((int)b.c.rs_calls, GA * b.s.nbuckets);
            /* buckets: cut from the end, contiguous, covering [0, padded) */
            size_t hi = b.s.part.padded;
            for (int k = 0; k < b.s.nbuckets; k++) {
                ck_assert_uint_eq(b.s.buckets[k].hi, hi);
                ck_assert(b.s.buckets[k].hi - b.s.buckets[k].lo <= 700);
                hi = b.s.buckets[k].lo;
            }
            ck_assert_uint_eq(hi, 0);
            unbuild(&b);
        }
}
END_TEST

START_TEST(test_ops_well_formed)
{
    /* a bound of 5000 is smaller than a block (7224): DeepSpeed gathers such
     * a unit anyway, alone, and so does the program */
    for (int st = 0; st <= 3; st++)
        for (int ck = 0; ck <= 3; ck++) {
            zs_run_config c = gpt(3, 24, 4, 12, 31);
            c.stage = st;
            c.grad_accum = 2;
            c.reduce_bucket_size = 900;
            c.stage3_max_live_parameters = ck >= 2 ? 5000 : 16000;
            c.stage3_prefetch_bucket_size = 9000;
            if (ck % 2) {
                c.checkpoint_mode = ZS_CKPT_EVERY;
                c.checkpoint_value = 1;
            }
            built b;
            build(&c, 3, &b);
            int U = b.s.U;
            if (st == 3) {
                int first, over = zs_step_shape_units_over_bound(&b.s, &first);
                ck_assert_int_eq(over, ck >= 2 ? 3 : 0); /* the 3 blocks */
                ck_assert_int_eq(first, ck >= 2 ? 1 : -1);
            }
            char *live = calloc((size_t)U, 1), *waited = calloc((size_t)U, 1);
            int *reduced = calloc((size_t)b.s.nbuckets, sizeof(int));
            int *alloc = calloc((size_t)b.s.nbuckets, sizeof(int));
            size_t nlive = 0;
            int fwd = 0, bwd = 0, opt = 0, skipped_tail = 0;
            for (size_t i = 0; i < b.p.n; i++) {
                const zs_step_op *o = &b.p.ops[i];
                switch (o->kind) {
                case ZS_SOP_GATHER:
                    ck_assert_int_eq(st, 3);
                    ck_assert(!live[o->unit]);
                    live[o->unit] = 1;
                    nlive += b.s.gelems[o->unit];
                    /* a prefetch stays under the bound; a unit alone may not */
                    if (o->flags & ZS_SOPF_PREFETCH)
                        ck_assert(nlive <= c.stage3_max_live_parameters);
                    /* a unit over the bound is the only one live */
                    for (int w = 0; w < U; w++)
                        if (live[w] && b.s.gelems[w] > c.stage3_max_live_parameters)
                            ck_assert_uint_eq(nlive, b.s.gelems[w]);
                    break;
                case ZS_SOP_WAIT:
                    ck_assert(live[o->unit]);
                    waited[o->unit] = 1;
                    break;
                case ZS_SOP_FORWARD:
                case ZS_SOP_BACKWARD:
                    if (st == 3)
                        ck_assert_msg(live[o->unit] && waited[o->unit], "op %zu: unit %d not gathered",
                                      i, o->unit);
                    if (o->kind == ZS_SOP_FORWARD && !(o->flags & ZS_SOPF_RECOMPUTE))
                        fwd++;
                    if (o->kind == ZS_SOP_BACKWARD)
                        bwd++;
                    break;
                case ZS_SOP_RELEASE:
                    ck_assert(live[o->unit]);
                    live[o->unit] = waited[o->unit] = 0;
                    nlive -= b.s.gelems[o->unit];
                    break;
                case ZS_SOP_BUCKET_ALLOC:
                    ck_assert_int_ge(st, 2);
                    ck_assert_int_eq(alloc[o->index], 0);
                    alloc[o->index] = 1;
                    break;
                case ZS_SOP_REDUCE:
                    ck_assert_int_eq(reduced[o->index], o->micro);
                    reduced[o->index]++;
                    if (st >= 2) {
                        ck_assert_int_eq(alloc[o->index], 1);
                        alloc[o->index] = 0;
                    }
                    break;
                case ZS_SOP_OPTIMIZER_FULL: /* stage 0: the whole array */
                    ck_assert_int_eq(st, 0);
                    ck_assert_uint_eq(o->elems, b.s.part.padded);
                    opt++;
                    break;
                case ZS_SOP_OPTIMIZER_SHARD:
                    ck_assert_int_ge(st, 1);
                    ck_assert_uint_eq(o->elems, b.s.part.shard);
                    opt++;
                    break;
                default: break;
                }
                if (o->kind == ZS_SOP_NORM)
                    skipped_tail = 1;
                else if (skipped_tail)
                    ck_assert(o->flags & ZS_SOPF_APPLIED);
            }
            for (int u = 0; u < U; u++)
                ck_assert(!live[u]);
            for (int k = 0; k < b.s.nbuckets; k++)
                ck_assert_int_eq(reduced[k], 2);
            ck_assert_int_eq(fwd, 2 * U);
            ck_assert_int_eq(bwd, 2 * U);
            ck_assert_int_eq(opt, 1);
            free(live);
            free(waited);
            free(reduced);
            free(alloc);
            unbuild(&b);
        }
}
END_TEST

/* The step schedule (grad_reduce step) of stages 0 and 1, by hand: the full
 * gradient zeroed once (per micro-batch in fixed point, which converts each
 * micro-batch's buckets and adds them locally), every bucket reduced once,
 * after the last micro-batch's backward; no reduced shard (grads = Ψp·p,
 * plus Ψp·8 of int64 in fixed point), one Ψp-sized reduce-scatter a step. */
/* The builder chooses the optimizer's kind: on the host with
 * offload_optimizer cpu, streamed through the swap file with nvme, on the
 * device otherwise (stage 0's whole array, or the shard); one a step. */
START_TEST(test_optimizer_kinds)
{
    for (int st = 0; st <= 3; st++)
        for (int off = 0; off <= (st == 0 ? 0 : 2); off++) { /* stage 0 refuses offload */
            zs_run_config c = gpt(2, 24, 4, 12, 31);
            c.stage = st;
            c.offload_optimizer = off == 0 ? ZS_OFFLOAD_NONE
                                  : off == 1 ? ZS_OFFLOAD_CPU : ZS_OFFLOAD_NVME;
            if (off == 2) /* the folder of the files (the program only names it) */
                snprintf(c.nvme_path, sizeof c.nvme_path, "/tmp");
            built b;
            build(&c, 2, &b);
            zs_step_op_kind want = st == 0 ? ZS_SOP_OPTIMIZER_FULL
                                   : off == 1 ? ZS_SOP_OPTIMIZER_HOST
                                   : off == 2 ? ZS_SOP_OPTIMIZER_SWAPPED
                                              : ZS_SOP_OPTIMIZER_SHARD;
            int n = 0;
            for (size_t i = 0; i < b.p.n; i++) {
                zs_step_op_kind k = b.p.ops[i].kind;
                if (k == ZS_SOP_OPTIMIZER_FULL || k == ZS_SOP_OPTIMIZER_SHARD ||
                    k == ZS_SOP_OPTIMIZER_HOST || k == ZS_SOP_OPTIMIZER_SWAPPED) {
                    ck_assert_int_eq(k, want);
                    n++;
                }
            }
            ck_assert_int_eq(n, 1);
            ck_assert_str_eq(zs_step_op_name(want),
                             st == 0 ? "optimizer_full" : off == 1 ? "optimizer_host"
                             : off == 2 ? "optimizer_swapped" : "optimizer_shard");
            unbuild(&b);
        }
}
END_TEST

START_TEST(test_step_schedule)
{
    for (int st = 0; st <= 1; st++)
        for (int det = 0; det <= 1; det++) {
            zs_run_config c = gpt(4, 16, 2, 8, 20);
            c.stage = st;
            c.grad_accum = 3;
            c.reduce_bucket_size = 700;
            c.deterministic = det;
            c.grad_reduce = ZS_GRAD_REDUCE_STEP;
            built b;
            build(&c, 4, &b);
            int zero = 0, reduces = 0, accum = 0, put = 0, bwd = 0;
            for (size_t i = 0; i < b.p.n; i++) {
                const zs_step_op *o = &b.p.ops[i];
                if (o->kind == ZS_SOP_ZERO_GRADS)
                    zero++;
                if (o->kind == ZS_SOP_ACCUM_FIXED)
                    accum++;
                if (o->kind == ZS_SOP_PUT_SHARD)
                    put++;
                if (o->kind == ZS_SOP_BACKWARD)
                    bwd++;
                if (o->kind == ZS_SOP_REDUCE) {
                    reduces++;
                    ck_assert_int_eq(o->micro, 2);
                    ck_assert_int_eq(bwd, 3 * b.s.U); /* after every backward */
                }
            }
            ck_assert_int_gt(b.s.nbuckets, 1);
            ck_assert_int_eq(reduces, b.s.nbuckets);
            ck_assert_int_eq(zero, det ? 3 : 1);
            ck_assert_int_eq(accum, det ? 3 * b.s.nbuckets : 0);
            ck_assert_int_eq(put, 0);
            size_t P = b.s.part.padded;
            ck_assert_uint_eq(b.c.peak[ZS_MEM_GRADS], 4 * P + (det ? 8 * P : 0));
            ck_assert_uint_eq((size_t)b.c.rs_bytes, P * (det ? 8 : 4));
            unbuild(&b);
            /* stages 2 and 3 take the option and reduce every micro-batch */
            c = gpt(4, 16, 2, 8, 20);
            c.stage = st + 2;
            c.grad_accum = 3;
            c.grad_reduce = ZS_GRAD_REDUCE_STEP;
            build(&c, 4, &b);
            ck_assert_int_eq((int)b.c.rs_calls, 3 * b.s.nbuckets);
            unbuild(&b);
        }
}
END_TEST

/* O(1) parts against a rank-by-rank count, for uneven ranges and N. */
START_TEST(test_parts)
{
    zs_run_config c = gpt(2, 16, 2, 8, 20);
    c.stage = 2;
    c.reduce_bucket_size = 333;
    c.compression.kind = ZS_COMP_TOPK;
    c.compression.topk_fraction = 0.1;
    static const int Ns[] = {1, 2, 3, 7, 16, 61};
    for (int ni = 0; ni < 6; ni++) {
        int N = Ns[ni];
        zs_run_config cn = c; /* finalize resolves the batch for one N */
        built b;
        build(&cn, N, &b);
        int *counts = calloc((size_t)N, sizeof(int));
        for (int k = 0; k < b.s.nbuckets; k++) {
            const zs_step_range *r = &b.s.buckets[k];
            zs_step_counts(&b.s, r->lo, r->hi, counts, NULL);
            size_t mx = 0, tot = 0;
            double all = 0;
            for (int q = 0; q < N; q++) {
                tot += (size_t)counts[q];
                if ((size_t)counts[q] > mx)
                    mx = (size_t)counts[q];
                all += zs_comp_part_bytes(&c.compression, (size_t)counts[q]);
            }
            ck_assert_uint_eq(tot, r->hi - r->lo);
            ck_assert_uint_eq(zs_range_max_part(&b.s.part, r->lo, r->hi), mx);
            for (int q = 0; q < N; q++)
                ck_assert(zs_step_alltoall_bytes(&b.s, k, q) ==
                          all - zs_comp_part_bytes(&c.compression, (size_t)counts[q]));
        }
        free(counts);
        unbuild(&b);
    }
}
END_TEST

/* The pipeline schedules' order (zs_pp_schedule_items): the interleaved
 * one of P = 2, v = 2, m = 4 written out by hand from Megatron-LM's
 * forward_backward_pipelining_with_interleaving (warm-ups 2(P - r - 1) +
 * (v - 1)P = 4 and 2; forward k on chunk (k mod 4) / 2, micro-batch
 * (k / 4)·2 + k mod 2; backwards over the chunks in reverse); its warm-ups
 * at P = 4, v = 2 (10 8 6 4, all 16 when m = P); the buffers its tied
 * gradients need (zs_pp_interleaved_tied_bufs); and for every schedule
 * and shape, each (chunk, micro-batch) runs its forward once and its
 * backward once, after its forward. */
/* The data-parallel group's nodes from the rank equation, worked by hand:
 * tp fastest, then dp, then pp (zerosim/mesh.h); nodes of R world ranks. */
START_TEST(test_dp_node_blocks)
{
    ck_assert_int_eq(zs_mesh_dp_node_blocks(16, 1, 1, 0, 0, 4), 4);  /* 0-3 | 4-7 ... */
    ck_assert_int_eq(zs_mesh_dp_node_blocks(16, 1, 1, 0, 0, 0), 16); /* one node */
    ck_assert_int_eq(zs_mesh_dp_node_blocks(16, 2, 1, 0, 0, 4), 2);  /* 0,2 | 4,6 ... */
    ck_assert_int_eq(zs_mesh_dp_node_blocks(16, 2, 1, 1, 0, 4), 2);  /* 1,3 | 5,7 ... */
    ck_assert_int_eq(zs_mesh_dp_node_blocks(16, 4, 1, 0, 0, 2), 1);  /* 0 | 4 | 8 | 12 */
    ck_assert_int_eq(zs_mesh_dp_node_blocks(12, 2, 1, 0, 0, 6), 3);  /* 0,2,4 | 6,8,10 */
    /* 0,2 | 4 | 6,8 | 10: nodes of 3 ranks cut the group unevenly */
    ck_assert_int_eq(zs_mesh_dp_node_blocks(12, 2, 1, 0, 0, 3), 0);
    /* pipeline stage 1 of 2 with tp 2: ranks 8,10,12,14 on nodes of 4 */
    ck_assert_int_eq(zs_mesh_dp_node_blocks(16, 2, 2, 0, 1, 4), 2);
    ck_assert_int_eq(zs_mesh_dp_node_blocks(16, 2, 2, 0, 1, 16), 4);
}
END_TEST

START_TEST(test_pp_schedules)
{
    /* F/B, chunk, micro-batch */
    static const char *const hand[2] = {
        "F00 F01 F10 F11 F02 B10 F03 B11 F12 B00 F13 B01 B12 B13 B02 B03 ",
        "F00 F01 F10 B10 F11 B11 F02 B00 F03 B01 F12 B12 F13 B13 B02 B03 "};
    zs_pp_item it[64];
    for (int r = 0; r < 2; r++) {
        char got[256] = "";
        int n = zs_pp_schedule_items(ZS_PP_INTERLEAVED, 2, 2, r, 4, it);
        ck_assert_int_eq(n, 16);
        for (int i = 0; i < n; i++) {
            char t[8];
            snprintf(t, sizeof t, "%c%d%d ", it[i].backward ? 'B' : 'F', it[i].chunk, it[i].micro);
            strcat(got, t);
        }
        ck_assert_str_eq(got, hand[r]);
    }
    /* the last rank's buffers for the head's gradients of the tied
     * embedding: with one, rank 1 (P = 2, v = 2, m = 4) waits at B11's
     * tied send for rank 0 to take micro-batch 0's, which rank 0 does at
     * B00, after its B11, which needs the gradient that rank 1's B11 sends
     * after that wait: a deadlock; two suffice. In general P (not m) */
    ck_assert_int_eq(zs_pp_interleaved_tied_bufs(2, 2, 4), 2);
    ck_assert_int_eq(zs_pp_interleaved_tied_bufs(2, 4, 8), 2);
    ck_assert_int_eq(zs_pp_interleaved_tied_bufs(4, 2, 8), 4);
    ck_assert_int_eq(zs_pp_interleaved_tied_bufs(16, 2, 64), 16);
    static const int w4[4] = {10, 8, 6, 4};
    for (int r = 0; r < 4; r++) {
        ck_assert_int_eq(zs_pp_interleaved_warmup(4, 2, r, 8), w4[r]);
        ck_assert_int_eq(zs_pp_interleaved_warmup(4, 2, r, 4), 8);
        ck_assert_int_eq(zs_pp_warmup(ZS_PP_1F1B, 4, r, 6), 3 - r);
    }
    static const struct { zs_pp_schedule s; int P, v, m; } shapes[] = {
        {ZS_PP_GPIPE, 4, 1, 6}, {ZS_PP_1F1B, 4, 1, 6}, {ZS_PP_1F1B, 4, 1, 2},
        {ZS_PP_INTERLEAVED, 2, 3, 4}, {ZS_PP_INTERLEAVED, 4, 2, 8}, {ZS_PP_INTERLEAVED, 4, 2, 4},
        {ZS_PP_INTERLEAVED, 3, 4, 6}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int P = shapes[k].P, v = shapes[k].v, m = shapes[k].m;
        for (int r = 0; r < P; r++) {
            int n = zs_pp_schedule_items(shapes[k].s, P, v, r, m, it);
            int seen[64] = {0}; /* [chunk·m + micro]: 1 forward, 2 and backward */
            ck_assert_int_eq(n, 2 * m * v);
            for (int i = 0; i < n; i++) {
                int *x = &seen[it[i].chunk * m + it[i].micro];
                ck_assert(it[i].chunk >= 0 && it[i].chunk < v && it[i].micro >= 0 &&
                          it[i].micro < m);
                ck_assert_int_eq(*x, it[i].backward ? 1 : 0);
                *x += 1;
            }
        }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("program");
    TCase *tc = tcase_create("program");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_counts_equal_closed_forms);
    tcase_add_test(tc, test_hand_counts);
    tcase_add_test(tc, test_ops_well_formed);
    tcase_add_test(tc, test_optimizer_kinds);
    tcase_add_test(tc, test_step_schedule);
    tcase_add_test(tc, test_parts);
    tcase_add_test(tc, test_pp_schedules);
    tcase_add_test(tc, test_dp_node_blocks);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
