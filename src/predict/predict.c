/* zerosim — closed-form predictions (see zerosim/predict.h). */
#include "zerosim/predict.h"
#include "zerosim/comm.h"
#include "zerosim/error.h"
#include "zerosim/mesh.h"
#include "zerosim/model.h"
#include "zerosim/program.h"
#include "zerosim/zero.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double zs_ring_bytes(size_t full_bytes, int world)
{
    return world > 1 ? (double)full_bytes * (double)(world - 1) / (double)world : 0.0;
}

/* The most elements alive at once when unit after unit is gathered, the
 * next one (in the pass's direction) prefetched when it fits. */
static size_t zs_live_peak(const size_t *g, int U, size_t bound, size_t prefetch)
{
    size_t peak = 0;
    for (int dir = 1; dir >= -1; dir -= 2) {
        int first = dir > 0 ? 0 : U - 1;
        for (int k = 0, u = first; k < U; k++, u += dir) {
            size_t live = g[u]; /* the previous unit was released after use */
            int nx = u + dir;
            if (nx >= 0 && nx < U && g[nx] <= prefetch && live + g[nx] <= bound)
                live += g[nx];
            if (live > peak)
                peak = live;
        }
    }
    return peak;
}

int zs_predict_closed(const zs_run_config *cfg, int world, zs_prediction *p)
{
    memset(p, 0, sizeof *p);
    zs_model *m;
    ZS_TRY(zs_model_create(&cfg->model, &m));
    const zs_layout *lay = zs_model_layout(m);
    zs_partition part;
    zs_partition_make(&part, lay->num_params, world, 0, cfg->deterministic);
    p->num_params = part.num_params;
    p->padded = part.padded;
    p->shard = part.shard;
    size_t P = part.padded, S = part.shard;
    size_t ps = zs_dtype_size(cfg->precision), gs = zs_dtype_size(zs_run_config_grad_dtype(cfg));
    int mixed = cfg->precision != ZS_DTYPE_F32, st = cfg->stage;
    size_t opt = st == 0 ? P : S;

    /* stage 3: gathered parameters */
    int U = lay->n_layers;
    size_t *g = calloc((size_t)U, sizeof(size_t));
    if (!g) {
        zs_model_destroy(m);
        ZS_FAIL("out of host memory predicting");
    }
    for (int u = 0; u < U; u++) {
        g[u] = zs_model_unit_elems(m, u);
        p->gathered_per_pass += g[u];
    }
    if (st == 3)
        p->live_params = zs_live_peak(g, U, cfg->stage3_max_live_parameters,
                                      cfg->stage3_prefetch_bucket_size);
    free(g);

    p->bytes[ZS_MEM_PARAMS] = st == 3 ? ps * S + ps * p->live_params : ps * P;
    if (st == 3 && cfg->hpz_partition_size > 1) /* hpZ's secondary partition */
        p->bytes[ZS_MEM_PARAMS] += ps * (P / (size_t)cfg->hpz_partition_size);
    size_t GA = (size_t)cfg->grad_accum;
    if (zs_step_reduce_once(cfg)) /* the step schedule: no reduced shard; fixed
                                     point accumulates the full gradient */
        p->bytes[ZS_MEM_GRADS] = gs * P + (cfg->deterministic && GA > 1 ? 8 * P : 0);
    else
        p->bytes[ZS_MEM_GRADS] =
            (st <= 1 ? gs * P + gs * S : gs * S) + (cfg->deterministic ? 8 * S : 0);
    p->bytes[ZS_MEM_OPT_MASTER] = mixed ? 4 * opt : 0;
    p->bytes[ZS_MEM_OPT_M] = 4 * opt;
    p->bytes[ZS_MEM_OPT_V] = zs_optim_has_variance(cfg->optimizer) ? 4 * opt : 0;
    p->bytes[ZS_MEM_ACTIVATIONS] = zs_model_activation_bytes(&cfg->model, cfg->micro_batch);
    p->bytes[ZS_MEM_CHECKPOINTS] = zs_model_checkpoint_bytes(&cfg->model, cfg->micro_batch);
    p->has[ZS_MEM_PARAMS] = p->has[ZS_MEM_GRADS] = 1;
    p->has[ZS_MEM_OPT_MASTER] = p->has[ZS_MEM_OPT_M] = p->has[ZS_MEM_OPT_V] = 1;
    p->has[ZS_MEM_ACTIVATIONS] = p->has[ZS_MEM_CHECKPOINTS] = 1;
    /* error feedback keeps an fp32 residual of the whole padded gradient */
    p->bytes[ZS_MEM_COMPRESSION] =
        cfg->compression.kind != ZS_COMP_NONE && cfg->error_feedback ? 4 * P : 0;
    p->has[ZS_MEM_COMPRESSION] = 1;

    p->rs_bytes_per_step = (zs_step_reduce_once(cfg) ? 1 : GA) * P * (cfg->deterministic ? 8 : gs);
    if (st == 3) {
        /* each micro-batch: a forward and a backward pass of gathers, plus
         * the recomputed segments' units again (activation checkpointing) */
        size_t recompute = 0;
        int nseg = zs_model_segments(&cfg->model);
        for (int sg = 0; sg < nseg - 1; sg++) {
            int first, last;
            zs_model_segment_units(&cfg->model, sg, &first, &last);
            for (int u = first; u <= last; u++)
                recompute += zs_model_unit_elems(m, u);
        }
        p->ag_bytes_per_step = GA * ps * (2 * p->gathered_per_pass + recompute);
        p->ag_bytes_per_skipped_step = p->ag_bytes_per_step;
    } else {
        p->ag_bytes_per_step = (st == 0 ? gs : ps) * P; /* stage 0: the gradients */
        p->ag_bytes_per_skipped_step = 0;
    }
    zs_model_destroy(m);
    return 0;
}

double zs_predict_alltoall_bytes(const zs_run_config *cfg, size_t num_params, int world,
                                 int rank, const size_t *lo, const size_t *hi, int nbuckets)
{
    zs_partition part;
    zs_partition_make(&part, num_params, world, rank, cfg->deterministic);
    /* Only the ranks whose shards meet a bucket get a part of it; every
     * other rank gets an empty part (whose bytes, zs_comp_part_bytes(0),
     * are counted in one go). Visiting every (bucket, rank) pair made
     * `zerosim plan --max-model --compression` on 641 ranks take 36 s
     * (found by fuzz/fuzz_plan_args.c). The terms are whole numbers of
     * bytes, so the order of the sum does not change it. */
    double bytes = 0.0, empty = zs_comp_part_bytes(&cfg->compression, 0);
    size_t shard = part.shard ? part.shard : 1;
    for (int i = 0; i < nbuckets; i++) {
        long qa = 0, qb = -1; /* the ranks that meet [lo, hi) */
        if (hi[i] > lo[i] && lo[i] / shard < (size_t)world) {
            qa = (long)(lo[i] / shard);
            qb = (long)((hi[i] - 1) / shard);
            if (qb > world - 1)
                qb = world - 1;
        }
        for (long q = qa; q <= qb; q++) {
            size_t beg, n = zs_partition_overlap(&part, (int)q, lo[i], hi[i], &beg);
            if (q != rank)
                bytes += zs_comp_part_bytes(&cfg->compression, n);
        }
        long others = world - (qb - qa + 1) - (rank < qa || rank > qb ? 1 : 0);
        bytes += empty * (double)others;
    }
    return bytes * (zs_step_reduce_once(cfg) ? 1 : cfg->grad_accum);
}

/* zs_prediction.ag_link_bytes_per_step. Each gather call's parts (its
 * range's overlap with every rank's shard) load every node's link, out
 * (its ranks' parts to the N-K ranks elsewhere) and in (the others' parts
 * to its K ranks), each direction at the link's rate. The engine keeps two
 * gathers in flight (a unit's and the next one's, posted in program
 * order): call i starts when call i-2 has ended, each direction carries
 * the calls' loads in order, and a call ends when all of its loads have
 * gone. The step's gathers end after as many bytes of one direction's time
 * as this gives, between the largest direction's sum (perfect overlap) and
 * the sum of each call's largest load (none). */
static int zs_predict_gather_link(const zs_step_shape *sh, const zs_step_program *prog,
                                  const zs_run_config *cfg, int world, int K, zs_prediction *p)
{
    int M = world / K;
    int *cnt = malloc(2 * (size_t)world * sizeof(int));
    double *busy = calloc(2 * (size_t)M, sizeof(double)), *load = malloc(2 * (size_t)M * sizeof(double));
    if (!cnt || !busy || !load) {
        free(cnt);
        free(busy);
        free(load);
        ZS_FAIL("out of host memory predicting %d ranks", world);
    }
    double end[2] = {0.0, 0.0}; /* the last two calls' ends, end[i % 2] */
    size_t calls = 0;
    for (size_t i = 0; i < prog->n; i++) {
        const zs_step_op *o = &prog->ops[i];
        if (o->kind != ZS_SOP_GATHER ||
            (cfg->hpz_partition_size > 1 && o->phase != ZS_PHASE_FORWARD))
            continue;
        int q8 = cfg->quantized_weights && o->phase == ZS_PHASE_FORWARD;
        for (int g = sh->gfirst[o->unit]; g < sh->gfirst[o->unit] + sh->gn[o->unit]; g++) {
            zs_step_counts(sh, sh->granges[g].lo, sh->granges[g].hi, cnt, cnt + world);
            double total = 0.0;
            for (int m = 0; m < M; m++) {
                double mine = 0.0;
                for (int q = m * K; q < (m + 1) * K; q++)
                    mine += q8 ? (double)zs_comm_q8_bytes((size_t)cnt[q]) : (double)cnt[q] * sh->ps;
                load[2 * m] = mine * (world - K);
                load[2 * m + 1] = mine; /* its ranks' parts; in: the others', below */
                total += mine;
            }
            double start = calls >= 2 ? end[calls % 2] : 0.0, fin = start;
            for (int m = 0; m < M; m++) {
                load[2 * m + 1] = (total - load[2 * m + 1]) * K;
                for (int d = 0; d < 2; d++) {
                    double *b = &busy[2 * m + d];
                    *b = fmax(*b, start) + load[2 * m + d];
                    fin = fmax(fin, *b);
                }
            }
            end[calls % 2] = fin;
            calls++;
        }
    }
    free(cnt);
    free(busy);
    free(load);
    p->ag_link_bytes_per_step = fmax(end[0], end[1]); /* call i + 2 ends after call i */
    return 0;
}

/* Expert parallelism: the model's all-to-alls in one step of program prog
 * (units 1..L are the GPT's blocks): two per forward or backward of a MoE
 * block, each zs_model_moe_alltoall_bytes / its calls, and with
 * moe_ep_home one more per backward (zs_model_moe_home_bytes). */
static void zs_predict_ep(const zs_model_config *mc, int b, const zs_step_program *prog,
                          zs_prediction *p)
{
    int calls;
    double bytes = zs_model_moe_alltoall_bytes(mc, b, &calls);
    if (calls == 0)
        return;
    for (size_t i = 0; i < prog->n; i++) {
        const zs_step_op *o = &prog->ops[i];
        if ((o->kind != ZS_SOP_FORWARD && o->kind != ZS_SOP_BACKWARD) || o->unit < 1 ||
            o->unit > mc->n_layer || !zs_model_block_is_moe(mc, o->unit - 1))
            continue;
        p->ep_a2a_calls_per_step += 2;
        p->ep_a2a_bytes_per_step += 2.0 * bytes / calls;
        if (o->kind == ZS_SOP_BACKWARD && mc->moe_ep_home == ZS_MOE_EP_HOME) { /* home */
            p->ep_a2a_calls_per_step += 1;
            p->ep_a2a_bytes_per_step += zs_model_moe_home_bytes(mc);
        }
    }
}

/* Context parallelism: the ring attention's messages in one step of program
 * prog, per forward (recomputed ones included) and backward of each block
 * (units 1..L), as zs_model_cp_ring_bytes counts them; with Ulysses its
 * all-to-alls, as zs_model_cp_a2a_bytes counts them. */
static void zs_predict_cp(const zs_model_config *mc, int b, const zs_step_program *prog,
                          zs_prediction *p)
{
    for (size_t i = 0; i < prog->n; i++) {
        const zs_step_op *o = &prog->ops[i];
        int sends;
        if ((o->kind != ZS_SOP_FORWARD && o->kind != ZS_SOP_BACKWARD) || o->unit < 1 ||
            o->unit > mc->n_layer)
            continue;
        p->cp_ring_bytes_per_step +=
            zs_model_cp_ring_bytes(mc, b, o->kind == ZS_SOP_BACKWARD, &sends);
        p->cp_ring_sends_per_step += sends;
        int calls; /* Ulysses: its two all-to-alls instead of the ring */
        p->cp_a2a_bytes_per_step += zs_model_cp_a2a_bytes(mc, b, &calls);
        p->cp_a2a_calls_per_step += calls;
    }
}

/* The step-time model's counts of program prog (zs_prediction): its small
 * collectives, its reduction rounds and its forwards. Units 1..L are the
 * GPT's blocks. */
static int zs_predict_step_ops(const zs_step_program *prog, const zs_model_config *mc,
                               zs_prediction *p)
{
    int top = 0; /* the micro-batches whose buckets are reduced, each once */
    for (size_t i = 0; i < prog->n; i++)
        if (prog->ops[i].micro + 2 > top)
            top = prog->ops[i].micro + 2;
    unsigned char *reduced = calloc((size_t)top, 1);
    if (!reduced)
        ZS_FAIL("out of host memory predicting");
    for (size_t i = 0; i < prog->n; i++) {
        const zs_step_op *o = &prog->ops[i];
        switch (o->kind) {
        case ZS_SOP_LOSS_SUM:
        case ZS_SOP_CHECK:
        case ZS_SOP_NORM:
            p->scalar_calls_per_step += 1;
            break;
        case ZS_SOP_REDUCE:
            if (!reduced[o->micro + 1])
                p->reduce_rounds_per_step += 1;
            reduced[o->micro + 1] = 1;
            break;
        case ZS_SOP_FORWARD:
            if (o->flags & ZS_SOPF_RECOMPUTE) {
                p->recompute_elems_per_step += (double)o->elems;
                break;
            }
            p->forward_elems_per_step += (double)o->elems;
            if (zs_model_is_decoder(mc) && o->unit >= 1 && o->unit <= mc->n_layer)
                p->forward_blocks_per_step += 1;
            break;
        default:
            break;
        }
    }
    free(reduced);
    return 0;
}

/* The step program's counts into p: the memory peaks by category and
 * tier, the offload's transfers, the pipeline's sends, the reduce-scatters. */
static void zs_predict_counts(const zs_step_shape *sh, const zs_step_program *prog,
                              const zs_model *m, const zs_step_count *c, zs_prediction *p)
{
    p->num_params = sh->part.num_params;
    p->padded = sh->part.padded;
    p->shard = sh->part.shard;
    for (int k = 0; k < ZS_MEM_NCAT; k++) {
        p->bytes[k] = c->peak[k];
        p->has[k] = 1;
    }
    p->live_params = c->live_params;
    memcpy(p->tier_bytes, c->tier_peak, sizeof p->tier_bytes);
    p->d2h_bytes_per_step = c->d2h_bytes;
    p->d2h_bytes_per_applied_step = c->d2h_applied_bytes;
    p->h2d_bytes_per_step = c->h2d_bytes;
    p->nvme_read_bytes_per_step = c->nvme_read_bytes;
    p->nvme_write_bytes_per_step = c->nvme_write_bytes;
    if (sh->buf[ZS_BUF_PARAMS].tier != ZS_TIER_DEVICE) /* offload_param: rank 0's gathers */
        p->param_h2d_bytes_per_step = zs_step_gather_own_bytes(sh, prog, 0);
    for (int u = 0; u < sh->U; u++)
        p->gathered_per_pass += zs_model_unit_elems(m, u);
    p->p2p_send_bytes_per_step = c->p2p_send_bytes;
    p->p2p_recv_bytes_per_step = c->p2p_recv_bytes;
    if (sh->pp > 1 && sh->pp_rank == 0)
        p->tied_send_bytes_per_applied_step = c->tied_sync_bytes;
    else if (sh->pp > 1)
        p->tied_recv_bytes_per_applied_step = c->tied_sync_bytes;
    p->act_slots = sh->slots;
    p->in_flight = c->in_flight;
    p->rs_bytes_per_step = (size_t)c->rs_bytes;
    p->rs_calls_per_step = c->rs_calls;
}

/* The node size of the shape's data-parallel group (zerosim/mesh.h): the
 * same K the shape's counter and the run's communicator find. world is the
 * data-parallel group's; the rank equation takes the whole mesh's, world x
 * tp x pp (as program_count.c passes it: with --tp above the data-parallel
 * size the group's ranks were 0 and K divided by zero). */
static int zs_predict_dp_node_blocks(const zs_run_config *cfg, int world, const zs_step_shape *sh)
{
    int T = cfg->tp > 1 ? cfg->tp : 1, P = cfg->pp > 1 ? cfg->pp : 1;
    return zs_mesh_dp_node_blocks(world * T * P, T, P, 0, P > 1 ? sh->pp_rank : 0,
                                  cfg->ranks_per_node);
}

/* ZeRO++ in stage 3: qgZ's all-to-alls in place of the reduce-scatters,
 * the elements the codecs quantize, hpZ's secondary gathers. */
static int zs_predict_zeropp(const zs_run_config *cfg, int world, const zs_step_shape *sh,
                             const zs_step_program *prog, const zs_step_count *c,
                             zs_prediction *p)
{
    if (sh->stage == 3 && cfg->quantized_gradients) /* qgZ: all-to-alls instead */
        p->qgz_calls_per_step = c->rs_calls, p->rs_bytes_per_step = 0, p->rs_calls_per_step = 0;
    if (sh->stage == 3 && cfg->quantized_gradients) {
        int K = zs_predict_dp_node_blocks(cfg, world, sh);
        for (int q = 0; q < K; q++) {
            double inter, all = zs_predict_qgz_bytes(sh, prog, K, q, &inter);
            if (q == 0)
                p->qgz_intra_bytes_rank0 = all - inter, p->qgz_inter_bytes_rank0 = inter;
            p->qgz_inter_bytes_node0 += inter;
        }
    }
    if (sh->stage == 3 && (cfg->quantized_weights || cfg->quantized_gradients)) {
        int K = zs_predict_dp_node_blocks(cfg, world, sh);
        p->quant_elems_per_step =
            zs_predict_quant_elems(sh, prog, cfg->quantized_weights, cfg->quantized_gradients,
                                   K, &p->quant_pass_elems_per_step);
        if (p->quant_elems_per_step < 0)
            ZS_FAIL("out of host memory predicting %d ranks", world);
    }
    if (sh->stage == 3 && cfg->hpz_partition_size > 1)
        for (size_t i = 0; i < prog->n; i++)
            if (prog->ops[i].kind == ZS_SOP_GATHER && prog->ops[i].phase != ZS_PHASE_FORWARD) {
                p->ag_hpz_bytes_per_step += prog->ops[i].elems * sh->ps;
                p->ag_hpz_calls_per_step += sh->gn[prog->ops[i].unit];
            }
    return 0;
}

/* The allgathers' bytes and calls per step (and per skipped step): stage
 * 3's gathers, with qwZ the forward's in int8 blocks; stages 0-2's
 * allgathers of the updated parameters. */
static int zs_predict_gathers(int world, int qwz, const zs_step_shape *sh,
                              const zs_step_program *prog, const zs_step_count *c,
                              zs_prediction *p)
{
    if (sh->stage == 3 && qwz) {
        /* qwZ: the forward phase's gathers send each rank's part in int8
         * blocks (zs_comm_q8_bytes), the others the stored precision */
        double q = 0.0;
        size_t fwd = 0;
        for (size_t i = 0; i < prog->n; i++) {
            const zs_step_op *o = &prog->ops[i];
            if (o->kind != ZS_SOP_GATHER || o->phase != ZS_PHASE_FORWARD)
                continue;
            fwd += o->elems;
            size_t b = zs_step_q8_unit_bytes(sh, o->unit);
            if (!b && o->elems)
                ZS_FAIL("out of host memory predicting %d ranks", world);
            q += (double)b;
        }
        p->ag_bytes_per_step = p->ag_bytes_per_skipped_step =
            (c->gathered_elems - fwd) * sh->ps + (size_t)q;
        p->ag_calls_per_step = p->ag_calls_per_skipped_step = c->gather_calls;
    } else if (sh->stage == 3) {
        p->ag_bytes_per_step = c->gathered_elems * sh->ps;
        p->ag_bytes_per_skipped_step = (c->gathered_elems - c->gathered_applied_elems) * sh->ps;
        p->ag_calls_per_step = c->gather_calls;
        p->ag_calls_per_skipped_step = c->gather_calls - c->gather_applied_calls;
    } else {
        p->ag_bytes_per_step = (size_t)c->ag_bytes;
        p->ag_calls_per_step = c->ag_calls;
    }
    return 0;
}

/* Tensor parallelism of a decoder: the all-reduces (with sequence
 * parallelism, the all-gather and reduce-scatter pairs) of this pipeline
 * stage's units. The GPT's forward makes them; the Llama family's has the
 * same pattern (a vocab-parallel embedding and head, Megatron's f and g
 * around attention and the MLP), its norms RMSNorms without biases: C of
 * norm weights per norm where the GPT's LayerNorms have 2C. */
static void zs_predict_tp(const zs_run_config *cfg, const zs_step_shape *sh,
                          const zs_step_count *c, zs_prediction *p)
{
    int T = cfg->model.tp > 1 ? cfg->model.tp : 1;
    if (T > 1 && zs_model_is_decoder(&cfg->model)) {
        double norm = cfg->model.kind == ZS_MODEL_LLAMA ? 1.0 : 2.0; /* per norm, x C */
        /* this rank's positions: T, or T / cp with context parallelism */
        double BT = (double)cfg->micro_batch * cfg->model.seq_len / zs_model_cp_size(&cfg->model),
               C = cfg->model.n_embd;
        /* this pipeline stage's share (the whole model without one): the
         * embedding's all-reduce on the first stage, four per block, the
         * head's backward and the loss's on the last */
        double first = sh->uchunk[0] >= 0, last = sh->uchunk[sh->U - 1] >= 0, L = -first - last;
        for (int k = 0; k < sh->nchunks; k++) /* the rank's units (its chunks') */
            L += (double)(sh->clast[k] - sh->cfirst[k] + 1);
        double rec = c->recompute_units / (double)cfg->grad_accum; /* blocks per micro-batch */
        double GA = cfg->grad_accum, ring = (double)(T - 1) / T;
        if (cfg->model.sequence_parallel) {
            /* all-gather + reduce-scatter pairs in place of the all-reduces;
             * the loss's maxima and sums and the LayerNorms' gradients
             * (their positions are split) are all-reduced */
            double pairs = BT * C * (first + last + 4.0 * L + 2.0 * rec);
            p->tp_rs_bytes_per_step = GA * 4.0 * pairs * ring;
            p->tp_ag_bytes_per_step = GA * 4.0 * pairs * ring;
            double ar = 3.0 * BT * last + norm * C * (2.0 * L + last);
            p->tp_allreduce_bytes_per_step = GA * 4.0 * ar * 2.0 * ring;
            p->tp_pair_calls_per_step = GA * (first + last + 4.0 * L + 2.0 * rec);
            p->tp_allreduce_calls_per_step = GA * (4.0 * L + 4.0 * last);
        } else {
            double floats = BT * C * (first + last + 4.0 * L + 2.0 * rec) + 3.0 * BT * last;
            p->tp_allreduce_bytes_per_step = GA * 4.0 * floats * 2.0 * ring;
            p->tp_allreduce_calls_per_step = GA * (first + 3.0 * last + 4.0 * L + 2.0 * rec);
        }
        /* exact sums of slices (the GPT on the portable backend, deterministic):
         * the maxima of the slices' rows (BT floats) of each row-parallel
         * linear (two per block, forward and recomputed) and each column-
         * parallel one's input gradient (two per block and the head), and
         * of the loss's sums; with sequence parallelism also each
         * LayerNorm's parameter gradients' (2C floats, two per block and
         * the final one) */
        if (cfg->model.tp_exact_slices > 0) {
            double calls = 4.0 * L + 2.0 * rec + 2.0 * last, floats = BT * calls;
            if (cfg->model.sequence_parallel) {
                calls += 2.0 * L + last;
                floats += 2.0 * C * (2.0 * L + last);
            }
            p->tp_allreduce_bytes_per_step += GA * 4.0 * floats * 2.0 * ring;
            p->tp_allreduce_calls_per_step += GA * calls;
        }
        /* partitioned checkpoints: a recomputed segment's input gathered */
        p->tp_ckpt_ag_calls_per_step = c->ckpt_gathers;
        p->tp_ckpt_ag_bytes_per_step = c->ckpt_gathers * 4.0 *
            (double)zs_model_boundary_elems(&cfg->model, cfg->micro_batch) * ring;
        p->tp_ag_bytes_per_step += p->tp_ckpt_ag_bytes_per_step;
        /* a decoder's MoE blocks (src/model/gpt.c, llama_moe.c): the combine weights'
         * gradients (top-k of BT floats) summed over the group in each
         * backward (the experts' outputs are summed as the dense MLP's) */
        double moe = 0.0;
        for (int k = 0; k < sh->nchunks; k++)
            for (int u = sh->cfirst[k]; u <= sh->clast[k]; u++)
                moe += u >= 1 && u <= cfg->model.n_layer &&
                       zs_model_block_is_moe(&cfg->model, u - 1);
        if (moe > 0) {
            double kbt = cfg->model.moe_top_k * BT; /* the weights of one micro-batch */
            p->tp_allreduce_bytes_per_step += GA * 4.0 * kbt * moe * 2.0 * ring;
            p->tp_allreduce_calls_per_step += GA * moe;
        }
        /* a Llama's replicated key/value heads: their gradients' sum per block */
        double kv = cfg->model.kind == ZS_MODEL_LLAMA ? (double)zs_llama_kv_grad_floats(&cfg->model)
                                                      : 0.0;
        if (kv > 0) {
            p->tp_allreduce_bytes_per_step += GA * 4.0 * kv * L * 2.0 * ring;
            p->tp_allreduce_calls_per_step += GA * L;
        }
    }
}

/* DeepSpeed's expert layout (the expert store over edp) and the
 * compressed gradients' all-to-alls of rank 0. */
static void zs_predict_experts(const zs_step_shape *sh, const zs_step_program *prog,
                               zs_prediction *p)
{
    if (sh->xsplit) { /* DeepSpeed's layout: the expert store over edp */
        double ag;
        zs_step_expert_traffic(sh, &p->edp_rs_bytes_per_step, &p->edp_rs_calls_per_step, &ag,
                               &p->edp_ag_calls_per_step);
        if (sh->stage == 0)
            p->edp_ag_bytes_per_step = ag;
        else
            p->edp_ag_bytes_per_applied_step = ag;
        double gb; /* stage 3: the units' gathers */
        int gc;
        zs_step_expert_gathers(sh, prog, &gb, &gc);
        p->edp_ag_bytes_per_step += gb;
        p->edp_ag_calls_per_step += gc;
        p->expert_params = sh->xnum;
    }
    if (sh->onebit_elems) { /* 1-bit Adam after the freeze */
        zs_onebit_sizes ob;
        zs_comm_onebit_sizes(sh->onebit_elems, sh->part.world, &ob);
        p->onebit_a2a_bytes_per_step = ob.alltoall_bytes;
        p->onebit_ag_bytes_per_step = ob.allgather_bytes;
    }
    for (size_t i = 0; sh->comp && i < prog->n; i++) /* one exchange per reduce op */
        if (prog->ops[i].kind == ZS_SOP_REDUCE)
            p->a2a_bytes_rank0 += zs_step_alltoall_bytes(sh, prog->ops[i].index, 0);
}

/* zs_predict's sections over the built shape and program (sc: the
 * configuration the shape was built from, whose model has the experts). */
static int zs_predict_program(const zs_run_config *cfg, const zs_run_config *sc, int world,
                              int micro_batch, const zs_model *m, const zs_step_shape *sh,
                              const zs_step_program *prog, zs_prediction *p)
{
    zs_step_count c;
    zs_step_program_count(sh, prog, &c);
    zs_predict_counts(sh, prog, m, &c, p);
    ZS_TRY(zs_predict_zeropp(cfg, world, sh, prog, &c, p));
    p->recompute_units = c.recompute_units;
    p->grad_fixed_bytes = c.grad_fixed_bytes;
    if (zs_predict_step_ops(prog, &cfg->model, p))
        return -1;
    ZS_TRY(zs_predict_gathers(world, cfg->quantized_weights, sh, prog, &c, p));
    int K = cfg->ranks_per_node;
    if (sh->stage == 3 && K > 1 && K < world && world % K == 0 && !cfg->hierarchical &&
        cfg->model.tp <= 1 && cfg->pp <= 1)
        if (zs_predict_gather_link(sh, prog, cfg, world, K, p))
            return -1;
    zs_predict_tp(cfg, sh, &c, p);
    zs_predict_ep(&sc->model, micro_batch, prog, p);
    zs_predict_cp(&sc->model, micro_batch, prog, p);
    zs_predict_experts(sh, prog, p);
    return 0;
}

/* The model, step shape and program zs_predict counts for ecfg on world
 * data-parallel ranks: *cfg the --ep 1 configuration (expert parallelism:
 * the engine's arrays keep the --ep 1 layout, zerosim/zero.h,
 * zs_engine_set_ep; the model's all-to-alls are added in zs_predict_ep),
 * *sc the shape's. On failure nothing is left to free. */
static int zs_predict_build(const zs_run_config *ecfg, int world, zs_run_config *cfg,
                            zs_run_config *sc, zs_model **m, zs_step_shape *sh,
                            zs_step_program *prog)
{
    *cfg = *ecfg;
    zs_step_ep_configs(ecfg, world, sc, &cfg->model);
    ZS_TRY(zs_model_create(&cfg->model, m));
    if (zs_step_shape_build(sc, *m, world, sh)) {
        zs_model_destroy(*m);
        return -1;
    }
    if (zs_step_program_build(sh, *m, 0, prog)) {
        zs_step_shape_free(sh);
        zs_model_destroy(*m);
        return -1;
    }
    return 0;
}

int zs_predict(const zs_run_config *ecfg, int world, zs_prediction *p)
{
    memset(p, 0, sizeof *p);
    zs_run_config cfg, sc;
    zs_model *m;
    zs_step_shape sh;
    zs_step_program prog;
    ZS_TRY(zs_predict_build(ecfg, world, &cfg, &sc, &m, &sh, &prog));
    int rc = zs_predict_program(&cfg, &sc, world, ecfg->micro_batch, m, &sh, &prog, p);
    zs_step_program_free(&prog);
    zs_step_shape_free(&sh);
    zs_model_destroy(m);
    return rc;
}

int zs_predict_param_h2d_bytes(const zs_run_config *ecfg, int world, double *bytes)
{
    zs_run_config cfg, sc;
    zs_model *m;
    zs_step_shape sh;
    zs_step_program prog;
    ZS_TRY(zs_predict_build(ecfg, world, &cfg, &sc, &m, &sh, &prog));
    for (int q = 0; q < world; q++)
        bytes[q] = zs_step_gather_own_bytes(&sh, &prog, q);
    zs_step_program_free(&prog);
    zs_step_shape_free(&sh);
    zs_model_destroy(m);
    return 0;
}

double zs_predict_quant_elems(const struct zs_step_shape_s *s, const struct zs_step_program_s *p,
                              int qwz, int qgz, int K, double *passes)
{
    int N = s->part.world;
    double n = 0.0;
    *passes = 0.0;
    int *cnt = malloc((size_t)N * sizeof(int));
    if (!cnt)
        return -1.0;
    for (size_t o = 0; o < p->n; o++) {
        const zs_step_op *op = &p->ops[o];
        if (qwz && op->kind == ZS_SOP_GATHER && op->phase == ZS_PHASE_FORWARD)
            for (int g = s->gfirst[op->unit]; g < s->gfirst[op->unit] + s->gn[op->unit]; g++) {
                zs_step_counts(s, s->granges[g].lo, s->granges[g].hi, cnt, NULL);
                n += cnt[0]; /* this rank's part encoded */
                for (int r = 0; r < N; r++)
                    n += cnt[r]; /* every part decoded */
            }
        if (!qgz || K < 1 || op->kind != ZS_SOP_REDUCE)
            continue;
        const zs_step_range *b = &s->buckets[op->index];
        zs_step_counts(s, b->lo, b->hi, cnt, NULL);
        double inter, coded, pass; /* rank 0's */
        zs_comm_qgz_rank_bytes(cnt, N, K, 0, &inter, &coded, &pass);
        n += coded;
        *passes += pass;
    }
    free(cnt);
    return n;
}

double zs_predict_qgz_bytes(const struct zs_step_shape_s *s, const struct zs_step_program_s *p,
                            int K, int q, double *inter)
{
    int N = s->part.world;
    double all = 0.0, across = 0.0;
    int *cnt = malloc((size_t)N * sizeof(int));
    if (!cnt) {
        *inter = -1.0;
        return -1.0;
    }
    for (size_t o = 0; o < p->n; o++) {
        if (p->ops[o].kind != ZS_SOP_REDUCE)
            continue;
        const zs_step_range *b = &s->buckets[p->ops[o].index];
        zs_step_counts(s, b->lo, b->hi, cnt, NULL);
        double x, coded, pass;
        all += zs_comm_qgz_rank_bytes(cnt, N, K, q, &x, &coded, &pass) - x;
        across += x;
    }
    free(cnt);
    *inter = across;
    return all + across;
}
