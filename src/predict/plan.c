/* zerosim — the planner (see zerosim/plan.h). */
#include "zerosim/plan.h"
#include "zerosim/compat.h"
#include "zerosim/error.h"
#include "zerosim/mesh.h"
#include "zerosim/model.h"
#include "zerosim/predict.h"
#include "zerosim/program.h"
#include "zerosim/zero.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *zs_plan_convention_name(zs_plan_convention c)
{
    switch (c) {
    case ZS_PLAN_ZEROSIM: return "zerosim";
    case ZS_PLAN_PAPER: return "paper";
    case ZS_PLAN_MEGATRON: return "megatron";
    }
    return "?";
}

void zs_plan_input_defaults(zs_plan_input *in)
{
    memset(in, 0, sizeof *in);
    zs_run_config_defaults(&in->cfg);
    in->cfg.micro_batch = 1;
    in->cfg.grad_accum = 1;
    in->grad_precision = in->cfg.precision;
    in->convention = ZS_PLAN_ZEROSIM;
    in->dp = 1;
    in->devices_per_node = 8;
    zs_steptime_defaults(&in->cal);
}

static size_t zs_ceil_div(size_t a, size_t b) { return b ? (a + b - 1) / b : 1; }

/* The gradient bytes of the zerosim convention with gradients of gs bytes
 * (predict.h's formula): the full gradient and the reduced shard (stages 0,
 * 1), or the shard (2, 3); the int64 shard of deterministic mode; with the
 * step schedule the full gradient only, and in deterministic mode with
 * accumulation its int64 accumulator. */
static size_t zs_plan_grad_bytes(const zs_run_config *c, size_t gs, size_t P, size_t S)
{
    if (zs_step_reduce_once(c))
        return gs * P + (c->deterministic && c->grad_accum > 1 ? 8 * P : 0);
    return (c->stage <= 1 ? gs * P + gs * S : gs * S) + (c->deterministic ? 8 * S : 0);
}

double zs_plan_megatron_activations(const zs_run_config *c, int sequence_parallel)
{
    double s = c->model.seq_len, b = c->micro_batch, h = c->model.n_embd, a = c->model.n_head;
    double t = c->tp > 1 ? c->tp : 1, L = c->model.n_layer;
    double per;
    if (t > 1 && sequence_parallel)
        per = s * b * h / t * (34.0 + 5.0 * a * s / h);
    else if (t > 1)
        per = s * b * h * (10.0 + 24.0 / t + 5.0 * a * s / (h * t));
    else
        per = s * b * h * (34.0 + 5.0 * a * s / h);
    return L * per;
}

/* Model states of the paper's and Megatron's conventions. */
static int zs_plan_states_closed(const zs_plan_input *in, const zs_run_config *c,
                                 zs_plan_result *r)
{
    /* a tensor-parallel device holds about 1/t of the parameters */
    double P = (double)r->num_params / (c->tp > 1 ? c->tp : 1), N = in->dp;
    double p = (double)zs_dtype_size(c->precision), g = (double)zs_dtype_size(in->grad_precision);
    int mixed = c->precision != ZS_DTYPE_F32, st = c->stage;
    double master = mixed ? 4.0 : 0.0, m = 4.0, v = c->optimizer == ZS_OPT_ADAMW ? 4.0 : 0.0;
    double gcopy = 0.0; /* Megatron: fp32 main gradients in the optimizer when g < 4 */
    if (in->convention == ZS_PLAN_MEGATRON) {
        if (st > 1)
            ZS_FAIL("the megatron convention has stage 0 (plain optimizer) and stage 1 (the "
                    "distributed optimizer) only: use --stage 0 or 1, or --convention paper");
        gcopy = g < 4 ? 4.0 : 0.0;
    }
    double os = st >= 1 ? 1.0 / N : 1.0;          /* optimizer shard */
    double gs = st >= 2 ? 1.0 / N : 1.0;          /* gradient shard */
    double ps = st >= 3 ? 1.0 / N : 1.0;          /* parameter shard */
    r->bytes[ZS_MEM_PARAMS] = p * P * ps;
    r->bytes[ZS_MEM_GRADS] = g * P * gs;
    r->bytes[ZS_MEM_OPT_MASTER] = (master + gcopy) * P * os;
    r->bytes[ZS_MEM_OPT_M] = m * P * os;
    r->bytes[ZS_MEM_OPT_V] = v * P * os;
    r->padded = r->num_params;
    r->shard = (size_t)(P / N);
    return 0;
}

/* Model states of the zerosim convention. A GPT: every category as its step
 * program counts it (zs_predict), and the program's collectives in *pr
 * (*have = 1); a bare parameter count: the closed forms of predict.h over
 * one layout of Ψ parameters. */
static int zs_plan_states_zerosim(const zs_plan_input *in, const zs_run_config *c,
                                  zs_plan_result *r, zs_prediction *pr, int *have)
{
    size_t ps = zs_dtype_size(c->precision), gs = zs_dtype_size(in->grad_precision);
    int st = c->stage;
    *have = 0;
    if (in->has_arch && c->pp > 1) { /* every stage; the most loaded one decides */
        double best = -1.0;
        for (int s = 0; s < c->pp; s++) {
            zs_run_config cs = *c;
            zs_prediction ps_;
            ZS_TRY(zs_pp_stage_config(&cs, s));
            ZS_TRY(zs_predict(&cs, in->dp, &ps_));
            double tot = 0.0;
            for (int k = 0; k < ZS_MEM_NCAT; k++)
                tot += ps_.has[k] ? (double)ps_.bytes[k] : 0.0;
            if (s < ZS_PLAN_PP_SHOWN) {
                r->pp_stage_total[s] = tot;
                r->pp_stage_params[s] = ps_.num_params;
            }
            if (ps_.num_params > r->device_params)
                r->device_params = ps_.num_params;
            if (tot > best) {
                best = tot;
                *pr = ps_;
                r->pp_stage = s;
            }
        }
        r->pp = c->pp;
        r->pp_send_bytes = pr->p2p_send_bytes_per_step + pr->tied_send_bytes_per_applied_step;
        r->pp_recv_bytes = pr->p2p_recv_bytes_per_step + pr->tied_recv_bytes_per_applied_step;
        r->pp_bubble = zs_pp_ideal_bubble(
            c->pp, c->pp_schedule == ZS_PP_INTERLEAVED ? c->virtual_stages : 1, c->grad_accum);
    } else if (in->has_arch) {
        ZS_TRY(zs_predict(c, in->dp, pr));
        r->device_params = pr->num_params + pr->expert_params;
    }
    if (in->has_arch) {
        *have = 1;
        for (int k = 0; k < ZS_MEM_NCAT; k++) {
            r->bytes[k] = (double)pr->bytes[k];
            r->has[k] = pr->has[k];
        }
        r->padded = pr->padded;
        r->shard = pr->shard;
        r->live_params = pr->live_params;
        for (int t = 0; t < ZS_MEM_NTIERS; t++)
            for (int k = 0; k < ZS_MEM_NCAT; k++)
                r->tier_bytes[t][k] = (double)pr->tier_bytes[t][k];
        r->d2h_bytes = pr->d2h_bytes_per_step + pr->d2h_bytes_per_applied_step;
        r->h2d_bytes = pr->h2d_bytes_per_step + pr->param_h2d_bytes_per_step;
        r->nvme_read_bytes = pr->nvme_read_bytes_per_step;
        r->nvme_write_bytes = pr->nvme_write_bytes_per_step;
        if (pr->tier_bytes[ZS_TIER_NVME][ZS_MEM_PARAMS]) /* the gathers read the file */
            r->nvme_read_bytes += pr->param_h2d_bytes_per_step;
        if (gs != ps) /* the same formula with the gradient's own size */
            r->bytes[ZS_MEM_GRADS] = (double)zs_plan_grad_bytes(c, gs, pr->padded, pr->shard);
        return 0;
    }
    zs_partition part;
    zs_partition_make(&part, r->num_params, in->dp, 0, c->deterministic);
    size_t P = part.padded, S = part.shard, opt = st == 0 ? P : S;
    int mixed = c->precision != ZS_DTYPE_F32;
    r->padded = P;
    r->shard = S;
    r->live_params = st == 3 ? in->largest_layer : 0;
    r->bytes[ZS_MEM_PARAMS] = (double)(st == 3 ? ps * S + ps * r->live_params : ps * P);
    r->bytes[ZS_MEM_GRADS] = (double)zs_plan_grad_bytes(c, gs, P, S);
    r->bytes[ZS_MEM_OPT_MASTER] = mixed ? 4.0 * (double)opt : 0.0;
    r->bytes[ZS_MEM_OPT_M] = 4.0 * (double)opt;
    r->bytes[ZS_MEM_OPT_V] = c->optimizer == ZS_OPT_ADAMW ? 4.0 * (double)opt : 0.0;
    r->bytes[ZS_MEM_COMPRESSION] =
        c->compression.kind != ZS_COMP_NONE && c->error_feedback ? 4.0 * (double)P : 0.0;
    zs_offload off = st >= 1 ? c->offload_optimizer : ZS_OFFLOAD_NONE;
    if (off != ZS_OFFLOAD_NONE) { /* as zs_step_shape_build places them */
        int t = off == ZS_OFFLOAD_CPU ? ZS_TIER_HOST : ZS_TIER_NVME;
        double states = 2.0 + (c->optimizer == ZS_OPT_ADAMW);
        r->tier_bytes[t][ZS_MEM_OPT_MASTER] = 4.0 * (double)S;
        r->tier_bytes[t][ZS_MEM_OPT_M] = r->bytes[ZS_MEM_OPT_M];
        r->tier_bytes[t][ZS_MEM_OPT_V] = r->bytes[ZS_MEM_OPT_V];
        r->bytes[ZS_MEM_OPT_MASTER] = r->bytes[ZS_MEM_OPT_M] = r->bytes[ZS_MEM_OPT_V] = 0.0;
        /* the reduced gradient shard lives on the host (the step schedule
         * keeps the full gradient on the device and copies the shard) */
        r->tier_bytes[ZS_TIER_HOST][ZS_MEM_GRADS] = (double)(gs * S);
        if (!zs_step_reduce_once(c))
            r->bytes[ZS_MEM_GRADS] -= (double)(gs * S);
        r->tier_bytes[ZS_TIER_HOST][ZS_MEM_PARAMS] = (double)(ps * S);
        double chunk = (double)(S < ZS_SWAP_CHUNK ? S : ZS_SWAP_CHUNK);
        if (off == ZS_OFFLOAD_NVME) {
            r->tier_bytes[ZS_TIER_HOST][ZS_MEM_WORKSPACE] = 2.0 * chunk * states * 4.0;
            r->nvme_read_bytes = r->nvme_write_bytes = 4.0 * (double)S * states;
        }
        r->h2d_bytes = (double)(ps * S);
        if (st == 3 && c->offload_param != ZS_OFFLOAD_NONE) {
            /* the shard on the host or in a file; two passes of gathers
             * per micro-batch send this rank's part of everything up (from
             * the file: read first; the updated shard is written there
             * from the host copy) */
            int pt = c->offload_param == ZS_OFFLOAD_CPU ? ZS_TIER_HOST : ZS_TIER_NVME;
            r->tier_bytes[pt][ZS_MEM_PARAMS] = (double)(ps * S);
            if (pt == ZS_TIER_HOST)
                r->tier_bytes[ZS_TIER_HOST][ZS_MEM_PARAMS] = (double)(ps * S);
            r->bytes[ZS_MEM_PARAMS] -= (double)(ps * S);
            double gathered = 2.0 * (double)c->grad_accum * (double)(ps * S);
            r->h2d_bytes = gathered;
            if (pt == ZS_TIER_NVME) {
                r->nvme_read_bytes += gathered;
                r->nvme_write_bytes += (double)(ps * S);
            }
        }
        double rounds = zs_step_reduce_once(c) || c->deterministic ? 1.0 : (double)c->grad_accum;
        r->d2h_bytes = rounds * (double)(gs * S);
    }
    return 0;
}

static void zs_plan_add_coll(zs_plan_result *r, zs_coll_kind k, double bytes, double calls,
                             int N)
{
    if (bytes <= 0.0)
        return;
    r->colls[r->ncolls++] = (zs_steptime_coll){.kind = k, .bytes = bytes, .calls = calls};
    double f = N > 1 ? (double)(N - 1) / N : 0.0;
    r->traffic_bytes += (k == ZS_COLL_ALLREDUCE ? 2.0 : 1.0) * f * bytes;
}

/* A collective of `ranks` ranks on its own link (zs_steptime_coll.link). */
static void zs_plan_add_group(zs_plan_result *r, zs_coll_kind k, double bytes, double calls,
                              int ranks, int link)
{
    if (bytes <= 0.0 || ranks < 2)
        return;
    r->colls[r->ncolls++] = (zs_steptime_coll){.kind = k, .bytes = bytes, .calls = calls,
                                               .ranks = ranks, .link = link};
    r->traffic_bytes += (double)(ranks - 1) / ranks * bytes;
}

/* --hierarchical (zs_comm_set_hierarchical): the data-parallel
 * reduce-scatters and allgathers over the N devices become two rings, inside
 * each node of K over the whole buffer S, then across the M nodes among one
 * local index over S/K: (K-1)/K S + (M-1)/N S per device and call, the
 * flat ring's (N-1)/N S, so the traffic stays; (M-1)/N S crosses. The
 * inner reduce-scatter is M rings (one per node block of K chunks), and
 * neither level overlaps compute (both complete when called). */
static int zs_plan_hierarchical(zs_plan_result *r, int N, int K)
{
    /* with --tp, --pp, --ep or ZeRO++: refused by zerosim/compat.h's rules */
    if (N % K)
        ZS_FAIL("--hierarchical needs the %d devices in whole nodes of %d: use a multiple of %d",
                N, K, K);
    int M = N / K;
    if (K < 2 || M < 2) /* one level is the whole: the flat rings run */
        return 0;
    zs_steptime_coll flat[3 * ZS_COLL_NKINDS];
    int n = r->ncolls;
    memcpy(flat, r->colls, (size_t)n * sizeof flat[0]);
    r->ncolls = 0;
    r->hierarchical = 1;
    for (int i = 0; i < n; i++) {
        const zs_steptime_coll *k = &flat[i];
        if ((k->kind != ZS_COLL_REDUCE_SCATTER && k->kind != ZS_COLL_ALLGATHER) || k->ranks ||
            k->link) {
            r->colls[r->ncolls++] = *k;
            continue;
        }
        /* the reduce-scatter's inner level is one ring per node block, M
         * of them: M (K-1) latencies a call */
        r->colls[r->ncolls++] =
            (zs_steptime_coll){.kind = k->kind, .bytes = k->bytes, .calls = k->calls,
                               .rings = k->kind == ZS_COLL_REDUCE_SCATTER ? M : 1,
                               .ranks = K, .link = 1};
        r->colls[r->ncolls++] = (zs_steptime_coll){.kind = k->kind, .bytes = k->bytes / K,
                                                   .calls = k->calls, .ranks = M, .link = 2};
        r->inter_node_bytes += (M - 1.0) / N * k->bytes;
    }
    return 0;
}

/* TP and PP beside data parallelism: which of the most loaded stage's
 * devices send across nodes, with the ranks laid out as zerosim mesh lays
 * them (tensor-parallel fastest, then data, then pipeline) and K
 * consecutive ranks a node. A device's ring in a group crosses when its
 * next member (the one it sends to) is on another node, and then all of
 * that ring's volume crosses, as the ledger counts it; a pipeline device's
 * sends cross in the share of its neighbouring stages' peers (the one
 * before and the one after) on other nodes. The collectives (the first
 * ndp of r->colls data-parallel, the rest tensor-parallel) get the link
 * their rings use. */
static int zs_plan_mesh_inter(zs_plan_result *r, const zs_run_config *c, const zs_prediction *pr,
                              int D, int K, int ndp)
{
    int T = c->tp > 1 ? c->tp : 1, P = c->pp > 1 ? c->pp : 1, W = T * D * P;
    int s = P > 1 ? r->pp_stage : 0, first = s * T * D, n = T * D;
    unsigned char *cross = calloc((size_t)W, 1);
    int *m = malloc((size_t)W * sizeof *m);
    if (!cross || !m) {
        free(cross);
        free(m);
        ZS_FAIL("out of host memory for the node map of %d devices", W);
    }
    static const zs_comm_group axes[] = {ZS_GROUP_DP, ZS_GROUP_TP};
    for (int a = 0; a < 2; a++)
        for (int k = 0; k < zs_mesh_ngroups(W, T, P, axes[a]); k++) {
            int g = zs_mesh_group_ranks(W, T, P, axes[a], k, m);
            for (int i = 0; i < g; i++)
                if (m[(i + 1) % g] / K != m[i] / K)
                    cross[m[i]] |= (unsigned char)(1u << a);
        }
    double dp = 0, tp = 0, pp = 0, peers = 0;
    for (int q = first; q < first + n; q++) {
        dp += cross[q] & 1;
        tp += cross[q] >> 1 & 1;
        if (s > 0)
            peers++, pp += (q - n) / K != q / K;
        if (s < P - 1)
            peers++, pp += (q + n) / K != q / K;
    }
    free(cross);
    free(m);
    r->mesh_inter = 1;
    r->inter_frac[0] = dp / n;
    r->inter_frac[1] = tp / n;
    r->inter_frac[2] = peers > 0 ? pp / peers : 0.0;
    r->inter_part[0] = r->inter_frac[0] * (zs_ring_bytes(pr->rs_bytes_per_step, D) +
                                           zs_ring_bytes(pr->ag_bytes_per_step, D));
    r->inter_part[1] = r->inter_frac[1] * (pr->tp_allreduce_bytes_per_step +
                                           pr->tp_rs_bytes_per_step + pr->tp_ag_bytes_per_step);
    r->inter_part[2] = r->inter_frac[2] * r->pp_send_bytes;
    r->inter_node_bytes = r->inter_part[0] + r->inter_part[1] + r->inter_part[2];
    /* the step time: each group's collectives on its own link, across
     * nodes where any of the stage's rings crosses (a ring runs at its
     * slowest link), else inside the node */
    for (int i = 0; i < r->ncolls; i++) {
        int tpc = ndp >= 0 && i >= ndp;
        if (r->colls[i].link == 0)
            r->colls[i].link = r->inter_frac[tpc ? 1 : 0] > 0 ? 2 : 1;
    }
    return 0;
}

int zs_plan_compute(const zs_plan_input *in, zs_plan_result *r)
{
    memset(r, 0, sizeof *r);
    if (in->dp < 1)
        ZS_FAIL("--dp must be at least 1, got %d", in->dp);
    if (in->devices_per_node < 1)
        ZS_FAIL("devices per node must be at least 1, got %d", in->devices_per_node);
    if (!in->has_arch && in->num_params == 0)
        ZS_FAIL("no model: give --params COUNT or --arch gpt with its shape");
    zs_run_config c = in->cfg;
    if (!in->has_arch) {
        if (c.checkpoint_mode != ZS_CKPT_OFF)
            ZS_FAIL("activation checkpointing needs the model's shape: use --arch gpt");
        zs_run_config d; /* the shape is unused: keep the default, valid one */
        zs_run_config_defaults(&d);
        c.model = d.model;
    } else if (c.model.kind != ZS_MODEL_GPT) {
        ZS_FAIL("the planner's architectures are: gpt");
    }
    if (in->grad_precision != ZS_DTYPE_F32 && in->grad_precision != ZS_DTYPE_BF16 &&
        in->grad_precision != ZS_DTYPE_F16)
        ZS_FAIL("gradient precision must be fp32, bf16 or fp16");
    if (!in->keep_batch)
        c.train_batch_size = 0;
    c.steps = c.steps > 0 ? c.steps : 1;
    if (c.tp > 1 && !in->has_arch)
        ZS_FAIL("tensor parallelism (--tp) needs the model's shape: use --arch gpt");
    if (in->sequence_parallel && in->convention == ZS_PLAN_ZEROSIM)
        c.sequence_parallel = 1; /* the run's own sharding and collectives */
    r->zeropp = c.stage == 3 && (c.quantized_weights || c.quantized_gradients ||
                                 c.hpz_partition_size > 1);
    int node_ranks = in->dp < in->devices_per_node ? in->dp : in->devices_per_node;
    if (r->zeropp) {
        if (in->convention != ZS_PLAN_ZEROSIM || !in->has_arch)
            ZS_FAIL("ZeRO++ (qwZ, hpZ, qgZ) is planned in the zerosim convention for a GPT "
                    "(--arch gpt or --config)");
        if (in->dp % node_ranks)
            ZS_FAIL("ZeRO++ needs the %d devices in whole nodes of %d: use a multiple of %d",
                    in->dp, in->devices_per_node, in->devices_per_node);
        if (c.hpz_partition_size > 1 && node_ranks % c.hpz_partition_size)
            ZS_FAIL("zero_hpz_partition_size %d must divide the %d devices per node (hpZ's "
                    "groups stay inside a node)", c.hpz_partition_size, node_ranks);
        c.ranks_per_node = node_ranks; /* qgZ's two levels */
    } else if (c.stage == 3 && in->convention == ZS_PLAN_ZEROSIM && !c.hierarchical &&
               c.tp <= 1 && c.pp <= 1 && node_ranks < in->dp && in->dp % node_ranks == 0)
        c.ranks_per_node = node_ranks; /* the gathers' parts on each node's link */
    int world = in->dp * (c.tp > 1 ? c.tp : 1) * (c.pp > 1 ? c.pp : 1);
    ZS_TRY(zs_run_config_finalize(&c, world));
    zs_compat_ctx cx = {world, ZS_SCOPE_PLAN, NULL, 1, 1}; /* the planner's own rules */
    ZS_TRY(zs_compat_apply(&c, &cx));
    if (in->convention != ZS_PLAN_ZEROSIM &&
        (c.compression.kind != ZS_COMP_NONE || c.deterministic))
        ZS_FAIL("--compression and --deterministic are modelled in the zerosim convention only");
    if (in->convention != ZS_PLAN_ZEROSIM && c.offload_optimizer != ZS_OFFLOAD_NONE)
        ZS_FAIL("--offload-optimizer is modelled in the zerosim convention only (for "
                "DeepSpeed's own figures see --deepspeed-estimate)");
    r->num_params = in->has_arch ? zs_model_count_params(&c.model) : in->num_params;

    zs_prediction pr;
    int have = 0;
    if (in->convention == ZS_PLAN_ZEROSIM)
        ZS_TRY(zs_plan_states_zerosim(in, &c, r, &pr, &have));
    else
        ZS_TRY(zs_plan_states_closed(in, &c, r));
    r->has[ZS_MEM_PARAMS] = r->has[ZS_MEM_GRADS] = 1;
    r->has[ZS_MEM_OPT_MASTER] = r->has[ZS_MEM_OPT_M] = r->has[ZS_MEM_OPT_V] = 1;
    r->has[ZS_MEM_COMPRESSION] = in->convention == ZS_PLAN_ZEROSIM;
    if (in->has_arch && c.pp > 1 && in->convention != ZS_PLAN_ZEROSIM)
        ZS_FAIL("--pp is planned in the zerosim convention only (each stage's step program)");
    if (c.pp > 1 && !in->has_arch)
        ZS_FAIL("--pp needs the model's shape: use --arch gpt");
    if (in->has_arch && c.pp > 1) { /* the stage's own, as zs_predict counted them */
        r->activations_modelled = 1;
        r->has[ZS_MEM_ACTIVATIONS] = r->has[ZS_MEM_CHECKPOINTS] = 1;
    } else if (in->has_arch) {
        r->activations_modelled = 1;
        r->bytes[ZS_MEM_ACTIVATIONS] = (double)zs_model_activation_bytes(&c.model, c.micro_batch);
        r->bytes[ZS_MEM_CHECKPOINTS] = (double)zs_model_checkpoint_bytes(&c.model, c.micro_batch);
        r->has[ZS_MEM_ACTIVATIONS] = r->has[ZS_MEM_CHECKPOINTS] = 1;
        if (in->convention == ZS_PLAN_MEGATRON)
            r->bytes[ZS_MEM_ACTIVATIONS] = zs_plan_megatron_activations(&c, in->sequence_parallel);
        if (in->convention == ZS_PLAN_MEGATRON)
            r->bytes[ZS_MEM_CHECKPOINTS] = 0.0;
    }
    r->params = r->bytes[ZS_MEM_PARAMS];
    r->grads = r->bytes[ZS_MEM_GRADS];
    r->optimizer = r->bytes[ZS_MEM_OPT_MASTER] + r->bytes[ZS_MEM_OPT_M] + r->bytes[ZS_MEM_OPT_V];
    r->activations = r->bytes[ZS_MEM_ACTIVATIONS] + r->bytes[ZS_MEM_CHECKPOINTS];
    for (int k = 0; k < ZS_MEM_NCAT; k++)
        if (r->has[k])
            r->total += r->bytes[k];
    r->fits = in->device_memory ? r->total <= (double)in->device_memory : -1;
    for (int k = 0; k < ZS_MEM_NCAT; k++) {
        r->host_total += r->tier_bytes[ZS_TIER_HOST][k];
        r->nvme_total += r->tier_bytes[ZS_TIER_NVME][k];
    }
    r->host_per_node = r->host_total * (in->dp < in->devices_per_node ? in->dp : in->devices_per_node);
    r->host_fits = in->host_memory ? r->host_per_node <= (double)in->host_memory : -1;

    /* traffic: the collectives of one step */
    int N = in->dp, st = c.stage, ndp = -1; /* ndp: the data-parallel collectives, before TP's */
    double GA = c.grad_accum, Psi = (double)r->num_params, Pp = (double)r->padded;
    double p = (double)zs_dtype_size(c.precision), g = (double)zs_dtype_size(in->grad_precision);
    /* gradient reductions per step: one per micro-batch, or one (stages 0
     * and 1 with the step schedule) */
    int once = zs_step_reduce_once(&c);
    double RA = once ? 1.0 : GA;
    double rs_calls = RA * (double)zs_ceil_div(r->padded, c.reduce_bucket_size);
    double ag_calls = (double)zs_ceil_div(r->padded, c.allgather_bucket_size);
    /* stage 3 gathers per step (elements): the program's count, or two
     * passes over Ψ for a bare parameter count */
    double gathered = have ? (double)pr.ag_bytes_per_step / p : 2.0 * Psi * GA;
    if (in->convention == ZS_PLAN_ZEROSIM && have) {
        /* the step program's collectives, as a run makes them */
        int K = node_ranks, M = N / node_ranks;
        double hz = (double)pr.ag_hpz_bytes_per_step;
        int red0 = r->ncolls; /* the gradient reductions start here */
        if (c.compression.kind != ZS_COMP_NONE)
            zs_plan_add_coll(r, ZS_COLL_ALLTOALL,
                             N > 1 ? pr.a2a_bytes_rank0 * N / (N - 1) : 0.0,
                             pr.rs_calls_per_step, N);
        else if (r->zeropp && c.quantized_gradients) { /* qgZ: inside, then across */
            if (K > 1)
                zs_plan_add_group(r, ZS_COLL_ALLTOALL, pr.qgz_intra_bytes_rank0 * K / (K - 1),
                                  pr.qgz_calls_per_step, K, 1);
            if (M > 1)
                zs_plan_add_group(r, ZS_COLL_ALLTOALL, pr.qgz_inter_bytes_rank0 * M / (M - 1),
                                  pr.qgz_calls_per_step, M, 2);
        } else
            zs_plan_add_coll(r, ZS_COLL_REDUCE_SCATTER,
                             (double)pr.rs_bytes_per_step * (c.deterministic ? 1.0 : g / p),
                             pr.rs_calls_per_step, N);
        /* stage 3 overlaps a bucket's reduce-scatter with the rest of the
         * backward: the last of each micro-batch, waited for when its
         * backward has ended, does not hide (RA of the calls); qgZ's and
         * compression's all-to-alls complete when called, so none hides */
        for (int i = red0; st == 3 && i < r->ncolls; i++)
            r->colls[i].exposed_frac =
                r->colls[i].kind == ZS_COLL_REDUCE_SCATTER && r->colls[i].calls > RA
                    ? RA / r->colls[i].calls
                    : 1.0;
        if (r->zeropp && hz > 0) { /* hpZ: the backward gathers inside the node */
            zs_plan_add_coll(r, ZS_COLL_ALLGATHER, (double)pr.ag_bytes_per_step - hz,
                             pr.ag_calls_per_step - pr.ag_hpz_calls_per_step, N);
            if ((double)pr.ag_bytes_per_step - hz > 0) {
                r->colls[r->ncolls - 1].link_bytes = pr.ag_link_bytes_per_step;
                r->colls[r->ncolls - 1].fwd_only = 1; /* the forward's gathers */
            }
            zs_plan_add_group(r, ZS_COLL_ALLGATHER, hz, pr.ag_hpz_calls_per_step,
                              c.hpz_partition_size, 1);
        } else {
            zs_plan_add_coll(r, ZS_COLL_ALLGATHER,
                             (double)pr.ag_bytes_per_step * (st == 0 ? g / p : 1.0),
                             pr.ag_calls_per_step, N);
            if (st == 3 && pr.ag_bytes_per_step > 0)
                r->colls[r->ncolls - 1].link_bytes = pr.ag_link_bytes_per_step;
        }
        if (r->zeropp && M > 1) /* node 0's link: its last device's rings, qgZ's second level */
            r->inter_node_bytes =
                zs_ring_bytes(pr.rs_bytes_per_step, N) +
                zs_ring_bytes((size_t)((double)pr.ag_bytes_per_step - hz), N) +
                pr.qgz_inter_bytes_node0;
        if (pr.ep_a2a_calls_per_step > 0) /* the experts' dispatch and combine, over ep */
            zs_plan_add_group(r, ZS_COLL_ALLTOALL,
                              pr.ep_a2a_bytes_per_step * c.ep / (c.ep - 1.0),
                              pr.ep_a2a_calls_per_step, c.ep, c.ep <= node_ranks ? 1 : 0);
        if (pr.edp_rs_calls_per_step + pr.edp_ag_calls_per_step > 0) {
            /* DeepSpeed's layout: the expert store over the edp group of
             * N / ep ranks (every ep-th rank: across nodes) */
            int M = N / c.ep;
            double f = (M - 1.0) / M;
            zs_plan_add_group(r, ZS_COLL_REDUCE_SCATTER, pr.edp_rs_bytes_per_step / f,
                              pr.edp_rs_calls_per_step, M, 0);
            zs_plan_add_group(r, ZS_COLL_ALLGATHER,
                              (pr.edp_ag_bytes_per_step + pr.edp_ag_bytes_per_applied_step) / f,
                              pr.edp_ag_calls_per_step, M, 0);
        }
        ndp = r->ncolls;
        if (pr.tp_allreduce_bytes_per_step > 0) { /* over the TP group of T ranks */
            int T = c.tp;
            double full = pr.tp_allreduce_bytes_per_step * T / (2.0 * (T - 1));
            r->colls[r->ncolls++] = (zs_steptime_coll){.kind = ZS_COLL_ALLREDUCE, .bytes = full,
                                                       .calls = pr.tp_allreduce_calls_per_step,
                                                       .ranks = T};
            r->traffic_bytes += pr.tp_allreduce_bytes_per_step;
        }
        if (pr.tp_rs_bytes_per_step > 0) { /* sequence parallelism's pairs */
            int T = c.tp;
            double full = pr.tp_rs_bytes_per_step * T / (T - 1.0);
            double calls = pr.tp_pair_calls_per_step;
            r->colls[r->ncolls++] = (zs_steptime_coll){.kind = ZS_COLL_REDUCE_SCATTER,
                                                       .bytes = full, .calls = calls, .ranks = T};
            r->colls[r->ncolls++] = (zs_steptime_coll){.kind = ZS_COLL_ALLGATHER,
                                                       .bytes = full, .calls = calls, .ranks = T};
            r->traffic_bytes += pr.tp_rs_bytes_per_step + pr.tp_ag_bytes_per_step;
        }
    } else if (in->convention == ZS_PLAN_ZEROSIM) {
        /* a bare parameter count: one layout of Ψ, buckets cut evenly */
        if (c.compression.kind != ZS_COMP_NONE) {
            size_t B = c.reduce_bucket_size ? c.reduce_bucket_size : r->padded;
            size_t nb = zs_ceil_div(r->padded, B);
            size_t *lo = malloc(nb * sizeof *lo), *hi = malloc(nb * sizeof *hi);
            if (!lo || !hi) {
                free(lo);
                free(hi);
                ZS_FAIL("out of host memory planning");
            }
            for (size_t i = 0; i < nb; i++) {
                lo[i] = i * B;
                hi[i] = i + 1 == nb ? r->padded : (i + 1) * B;
            }
            double sent = zs_predict_alltoall_bytes(&c, r->padded, N, 0, lo, hi, (int)nb);
            free(lo);
            free(hi);
            zs_plan_add_coll(r, ZS_COLL_ALLTOALL, N > 1 ? sent * N / (N - 1) : 0.0, rs_calls, N);
        } else {
            zs_plan_add_coll(r, ZS_COLL_REDUCE_SCATTER, RA * Pp * (c.deterministic ? 8.0 : g),
                             rs_calls, N);
        }
        if (st == 3) /* one call per pass: the units are unknown */
            zs_plan_add_coll(r, ZS_COLL_ALLGATHER, p * gathered, GA * 2.0, N);
        else
            zs_plan_add_coll(r, ZS_COLL_ALLGATHER, (st == 0 ? g : p) * Pp, ag_calls, N);
    } else if (in->convention == ZS_PLAN_PAPER) {
        /* stages 0, 1: one gradient allreduce (= reduce-scatter + allgather)
         * per step (per micro-batch with --grad-reduce micro-batch); 2: a
         * reduce-scatter per micro-batch and a parameter allgather; 3: also
         * a parameter allgather per pass (3Ψ in all) */
        if (st <= 1) {
            zs_plan_add_coll(r, ZS_COLL_ALLREDUCE, RA * g * Psi, RA * ag_calls, N);
        } else {
            zs_plan_add_coll(r, ZS_COLL_REDUCE_SCATTER, GA * g * Psi, rs_calls, N);
            zs_plan_add_coll(r, ZS_COLL_ALLGATHER, st == 3 ? GA * 2.0 * p * Psi : p * Psi,
                             st == 3 ? GA * 2.0 : ag_calls, N);
        }
    } else { /* megatron: allreduce of gradients, or reduce-scatter + allgather,
              * once per step (per micro-batch with --grad-reduce micro-batch) */
        if (st == 0) {
            zs_plan_add_coll(r, ZS_COLL_ALLREDUCE, RA * g * Psi, RA * ag_calls, N);
        } else {
            zs_plan_add_coll(r, ZS_COLL_REDUCE_SCATTER, RA * g * Psi, RA * ag_calls, N);
            zs_plan_add_coll(r, ZS_COLL_ALLGATHER, p * Psi, ag_calls, N);
        }
    }

    /* compute: 6Ψ FLOPs per token for forward and backward, plus attention
     * 12·L·C·T per token (a GPT); one more forward (8Ψ + 16·L·C·T) with
     * activation checkpointing */
    double seq = in->has_arch ? c.model.seq_len : in->seq_len;
    r->tokens_per_step = (double)c.micro_batch * GA * seq;
    double per_token = 6.0 * Psi;
    if (in->has_arch)
        per_token += 12.0 * c.model.n_layer * (double)c.model.n_embd * c.model.seq_len;
    r->recompute = in->has_arch && c.model.ckpt_blocks > 0 && c.model.ckpt_blocks < c.model.n_layer;
    if (r->recompute)
        per_token *= 4.0 / 3.0;
    r->flops_per_step = r->tokens_per_step * per_token;
    /* a pipeline: the most loaded stage's share of the parameters'
     * compute, stretched by the bubble; tensor parallelism: the TP shard's
     * share (no bubble without a pipeline) */
    double pp_scale = 1.0;
    if ((r->pp > 1 || c.tp > 1) && Psi > 0)
        pp_scale = (double)pr.num_params / Psi / (1.0 - r->pp_bubble);
    r->flops_per_step *= pp_scale;
    r->traffic_bytes += r->pp_send_bytes;
    /* the finer model of a GPT: the GEMMs (12 C^2 per block and the V x C
     * head per token, forward and backward: 6 x) apart from the other
     * kernels, each counted in the units of its calibration */
    double gemm = 0, work[ZS_WORK_NKINDS] = {0};
    if (in->has_arch) {
        double Lq = c.model.n_layer, C = c.model.n_embd, T = c.model.seq_len, V = c.model.vocab;
        double tok = r->tokens_per_step, rf = r->recompute ? 4.0 / 3.0 : 1.0;
        gemm = rf * 6.0 * tok * (12.0 * Lq * C * C + V * C);
        work[ZS_WORK_ATTENTION] = rf * tok * T * C * Lq;
        work[ZS_WORK_GELU] = rf * tok * 4.0 * C * Lq;
        work[ZS_WORK_BLOCK] = rf * tok * C * Lq;
        work[ZS_WORK_HEAD] = tok * V;
        work[ZS_WORK_GRADS] = GA * Pp;
        /* the engine's other passes over parameter-sized fp32 arrays, as
         * zs_engine_step runs them: the full gradient zeroed per
         * micro-batch (stages 0, 1), the reduced part added into the shard
         * per micro-batch, the shard zeroed, and copied back (stage 0); a
         * stage-3 gather copies this rank's piece in; mixed precision
         * converts each unit's parameters to fp32 for every pass over it.
         * The step schedule (stages 0, 1): the full gradient zeroed once
         * (per micro-batch in fixed point with accumulation, which converts
         * and adds each micro-batch's gradient), its part zeroed and the
         * reduced part added once */
        double S = Pp / N, passes = GA * S + S;
        int fixacc = once && c.deterministic && GA > 1;
        if (once)
            passes = 2.0 * S + (fixacc ? GA * Pp : Pp);
        else if (st <= 1)
            passes += GA * Pp;
        if (st == 0 && !once)
            passes += S;
        if (st == 3)
            passes += gathered / N;
        if (c.precision != ZS_DTYPE_F32)
            passes += GA * Pp * (r->recompute ? 3.0 : 2.0);
        if (fixacc) /* to fixed point and added per micro-batch, reduced once, back */
            passes += 2.0 * GA * Pp + Pp + S;
        else if (c.deterministic) /* to fixed point, added, back */
            passes += RA * Pp + RA * S + S;
        work[ZS_WORK_PASS] = passes;
        if (have && in->convention == ZS_PLAN_ZEROSIM) { /* ZeRO++'s codecs */
            work[ZS_WORK_QUANT] = pr.quant_elems_per_step;
            work[ZS_WORK_PASS] += pr.quant_pass_elems_per_step;
        }
    }
    if (c.hierarchical && in->convention == ZS_PLAN_ZEROSIM)
        ZS_TRY(zs_plan_hierarchical(r, N, node_ranks));
    if (in->convention == ZS_PLAN_ZEROSIM && have && (c.tp > 1 || c.pp > 1) && c.ep <= 1 &&
        !r->zeropp && !r->hierarchical)
        ZS_TRY(zs_plan_mesh_inter(r, &c, &pr, N, in->devices_per_node, ndp));
    /* the engine's allgathers are MPI_Iallgatherv (linear in Open MPI's
     * libnbc): on a shared node link they are costed as such (steptime.h);
     * the two levels of --hierarchical are rings */
    for (int i = 0; in->convention == ZS_PLAN_ZEROSIM && !c.hierarchical && i < r->ncolls; i++)
        if (r->colls[i].kind == ZS_COLL_ALLGATHER && r->colls[i].ranks == 0)
            r->colls[i].linear = 1;
    zs_steptime_input si = {.world = N, .devices_per_node = in->devices_per_node,
                            .colls = r->colls, .ncolls = r->ncolls,
                            .flops_per_step = r->flops_per_step,
                            /* --overlap (all of it hides); or stage 3
                             * with overlap_comm (its default): each unit's
                             * gather is prefetched behind the previous
                             * unit's compute and the reduce-scatters run
                             * behind the backward, as far as the links
                             * allow (steptime.h); the two-level
                             * collectives complete when called */
                            .overlap = in->overlap ? 1
                                       : in->convention == ZS_PLAN_ZEROSIM && st == 3 &&
                                               zs_step_overlap(&c) && !r->hierarchical
                                           ? 2
                                           : 0,
                            /* the loss, the overflow flag and the gradient
                             * norm: three small collectives per step */
                            .scalar_calls = in->convention == ZS_PLAN_ZEROSIM ? 3.0 : 0.0,
                            /* forward 2 of 6 FLOPs a token; recomputed
                             * blocks run their forward again in the
                             * backward (2 of 8) */
                            .fwd_compute_frac = r->recompute ? 0.25 : 1.0 / 3.0,
                            .optimizer_elems = st == 0 ? Pp : Pp / N,
                            .gemm_flops_per_step = gemm,
                            .host_bytes = r->d2h_bytes + r->h2d_bytes,
                            .nvme_bytes = r->nvme_read_bytes + r->nvme_write_bytes,
                            .cal = in->cal};
    if (r->d2h_bytes > 0) { /* the optimizer runs on the host */
        si.host_optimizer_elems = si.optimizer_elems;
        si.optimizer_elems = 0;
    }
    si.gemm_flops_per_step *= pp_scale;
    for (int k = 0; k < ZS_WORK_NKINDS; k++)
        work[k] *= pp_scale;
    memcpy(si.work, work, sizeof work);
    ZS_TRY(zs_steptime_estimate(&si, &r->time));
    return 0;
}

int zs_plan_max_model(const zs_plan_input *in, size_t *max_params, int *layers)
{
    *max_params = 0;
    *layers = 0;
    if (!in->device_memory)
        ZS_FAIL("--max-model needs --device-memory SIZE");
    zs_plan_input t = *in;
    zs_plan_result r;
    if (in->has_arch) { /* the most blocks that fit, at the given width */
        int lo = 0, hi = 4096;
        while (lo < hi) {
            int mid = lo + (hi - lo + 1) / 2;
            t.cfg.model.n_layer = mid;
            ZS_TRY(zs_plan_compute(&t, &r));
            if (r.fits == 1)
                lo = mid;
            else
                hi = mid - 1;
        }
        if (lo > 0) {
            t.cfg.model.n_layer = lo;
            *max_params = zs_model_count_params(&t.cfg.model);
        }
        *layers = lo;
        return 0;
    }
    /* Ψ: total bytes grow with Ψ; search [0, 2^52] */
    size_t lo = 0, hi = (size_t)1 << 52;
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        t.num_params = mid;
        ZS_TRY(zs_plan_compute(&t, &r));
        if (r.fits == 1)
            lo = mid;
        else
            hi = mid - 1;
    }
    *max_params = lo;
    return 0;
}

int zs_plan_deepspeed_rows(int stage, double total, double largest, int gpn, int nodes,
                           double bf, zs_ds_estimate_row rows[6])
{
    if (stage != 2 && stage != 3)
        return zs_error_set("DeepSpeed's estimators exist for ZeRO stages 2 and 3, not %d: "
                            "use --stage 2 or --stage 3", stage);
    if (gpn < 1 || nodes < 1 || !(total > 0) || !(bf > 0) || largest < 0)
        return zs_error_set("the DeepSpeed estimate needs parameters > 0, at least one node "
                            "and one GPU per node, and a positive buffer factor");
    double G = (double)nodes * gpn;
    int n = 0;
    if (stage == 2) {
        /* DeepSpeed's current stage_1_and_2.py (read at v0.19.6):
         * offload: GPU 2Ψ (16-bit params), CPU Ψ·max(4·gpus, 16)·factor;
         * none:    GPU 2Ψ + int(18Ψ/gpus) (16-bit grads 2, fp32 grads 4,
         *          fp32 params 4, moments 8 per parameter, partitioned),
         *          CPU Ψ·4·gpus_per_node·factor. (Before, 4Ψ + int(16Ψ/gpus):
         *          the figure its documentation page still shows.) */
        for (int off = 1; off >= 0; off--) {
            zs_ds_estimate_row *w = &rows[n++];
            *w = (zs_ds_estimate_row){.offload_optimizer = off};
            if (off) {
                w->gpu_bytes = 2 * total;
                w->cpu_bytes = total * fmax(4 * G, 16) * bf;
            } else {
                w->gpu_bytes = 2 * total + trunc(18 * total / G);
                w->cpu_bytes = total * 4 * gpn * bf;
            }
            w->cpu_bytes = trunc(w->cpu_bytes);
            w->gpu_bytes = trunc(w->gpu_bytes);
        }
        return n;
    }
    /* stage 3: the largest layer gathered (4 bytes a parameter: fp16 value
     * and gradient) plus, per option, the share of 18 (everything), 2 (fp16
     * parameters) or 0 bytes a parameter left on the GPU; the CPU holds 18
     * or 16 bytes a parameter per node, or the fp32 model at start-up */
    double llm = 4 * largest, gf = 1.0 / nodes;
    for (int oo = 1; oo >= 0; oo--)
        for (int op = 1; op >= 0; op--) {
            if (!oo && op)
                continue;
            for (int zi = 1; zi >= 0; zi--) {
                zs_ds_estimate_row *w = &rows[n++];
                *w = (zs_ds_estimate_row){.offload_optimizer = oo, .offload_param = op,
                                          .zero_init = zi};
                if (oo && op) {
                    w->gpu_bytes = llm;
                    w->cpu_bytes = zi ? total * 18 * gf * bf : total * fmax(4.0 * gpn, 18 * gf) * bf;
                } else if (oo) {
                    w->gpu_bytes = llm + trunc(2 * total / G);
                    w->cpu_bytes = zi ? total * 16 * gf * bf : total * fmax(4.0 * gpn, 16 * gf) * bf;
                } else {
                    w->gpu_bytes = llm + trunc(18 * total / G);
                    w->cpu_bytes = zi ? largest * 4 * gpn * bf : total * 4 * gpn * bf;
                }
                w->cpu_bytes = trunc(w->cpu_bytes);
                w->gpu_bytes = trunc(w->gpu_bytes);
            }
        }
    return n;
}

size_t zs_plan_gpt_largest_layer(const zs_model_config *c)
{
    size_t C = (size_t)c->n_embd, V = (size_t)c->vocab, T = (size_t)c->seq_len;
    size_t cand[] = {V * C, T * C, 3 * C * C + 3 * C, C * C + C, 4 * C * C + 4 * C,
                     4 * C * C + C, 2 * C};
    size_t m = 0;
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++)
        if (cand[i] > m)
            m = cand[i];
    return m;
}
