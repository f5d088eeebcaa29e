/* zerosim — the planner (see zerosim/plan.h). */
#include "zerosim/plan.h"
#include "plan_impl.h"
#include "zerosim/comm.h"
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

/* The ranks ZeRO partitions over: the data-parallel ones, times the
 * context-parallel size (Megatron's data-parallel group with context
 * parallelism, zerosim/mesh.h). */
static int zs_plan_zero_ranks(const zs_plan_input *in)
{
    return in->dp * (in->cfg.cp > 1 ? in->cfg.cp : 1);
}

/* The gradient bytes of a count with gradients of gs bytes where the
 * program holds them at ps bytes (zs_run_config_grad_dtype's size): the
 * fixed-point buffers (fixed of them) as they are, the others at gs a
 * gradient. A run stores gradients in that type (gs = ps: the count as it
 * is); --grad-precision asks what another size would take. */
static double zs_plan_grads_at(size_t bytes, size_t fixed, size_t gs, size_t ps)
{
    return (double)(fixed + (bytes - fixed) / ps * gs);
}

/* The model states and offload tiers of a count (zs_predict's, or a bare
 * parameter count's buffer table) into r, gradients at gs bytes. */
static void zs_plan_states_count(const size_t bytes[ZS_MEM_NCAT],
                                 const size_t tier_bytes[ZS_MEM_NTIERS][ZS_MEM_NCAT],
                                 size_t grad_fixed, size_t gs, size_t ps, zs_plan_result *r)
{
    for (int k = 0; k < ZS_MEM_NCAT; k++)
        r->bytes[k] = (double)bytes[k];
    r->bytes[ZS_MEM_GRADS] = zs_plan_grads_at(bytes[ZS_MEM_GRADS], grad_fixed, gs, ps);
    for (int t = 0; t < ZS_MEM_NTIERS; t++) {
        for (int k = 0; t != ZS_TIER_DEVICE && k < ZS_MEM_NCAT; k++)
            r->tier_bytes[t][k] = (double)tier_bytes[t][k];
        if (t != ZS_TIER_DEVICE)
            r->tier_bytes[t][ZS_MEM_GRADS] = zs_plan_grads_at(tier_bytes[t][ZS_MEM_GRADS], 0, gs, ps);
    }
}

/* A pipeline: every stage's program; the most loaded one decides (*pr). */
static int zs_plan_states_stages(const zs_plan_input *in, const zs_run_config *c,
                                 zs_plan_result *r, zs_prediction *pr)
{
    double best = -1.0;
    for (int s = 0; s < c->pp; s++) {
        zs_run_config cs = *c;
        zs_prediction ps_;
        ZS_TRY(zs_pp_stage_config(&cs, s));
        ZS_TRY(zs_predict(&cs, zs_plan_zero_ranks(in), &ps_));
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
    return 0;
}

/* A GPT in the zerosim convention: every category, tier and transfer as
 * its step program counts it (zs_predict; the most loaded pipeline stage). */
static int zs_plan_states_program(const zs_plan_input *in, const zs_run_config *c,
                                  zs_plan_result *r, zs_prediction *pr)
{
    size_t gs = zs_dtype_size(in->grad_precision);
    size_t held = zs_dtype_size(zs_run_config_grad_dtype(c)); /* the program's */
    if (c->pp > 1) {
        ZS_TRY(zs_plan_states_stages(in, c, r, pr));
    } else {
        ZS_TRY(zs_predict(c, zs_plan_zero_ranks(in), pr));
        r->device_params = pr->num_params + pr->expert_params;
    }
    r->cp = c->cp > 1 ? c->cp : 1;
    r->cp_ring_bytes = pr->cp_ring_bytes_per_step;
    r->cp_a2a_bytes = pr->cp_a2a_bytes_per_step;
    zs_plan_states_count(pr->bytes, pr->tier_bytes, pr->grad_fixed_bytes, gs, held, r);
    for (int k = 0; k < ZS_MEM_NCAT; k++)
        r->has[k] = pr->has[k];
    r->padded = pr->padded;
    r->shard = pr->shard;
    r->live_params = pr->live_params;
    r->d2h_bytes = pr->d2h_bytes_per_step + pr->d2h_bytes_per_applied_step;
    r->h2d_bytes = pr->h2d_bytes_per_step + pr->param_h2d_bytes_per_step;
    r->nvme_read_bytes = pr->nvme_read_bytes_per_step;
    r->nvme_write_bytes = pr->nvme_write_bytes_per_step;
    if (pr->tier_bytes[ZS_TIER_NVME][ZS_MEM_PARAMS]) /* the gathers read the file */
        r->nvme_read_bytes += pr->param_h2d_bytes_per_step;
    return 0;
}

/* A bare parameter count in the zerosim convention: one layout of Ψ
 * parameters (zs_step_shape_build_flat), its model states and offload
 * tiers from the shape's buffer table as a run places them, and stage 3's
 * live parameters the largest layer given. Without a program, the
 * transfers per step are closed forms over the table's shard. */
static void zs_plan_states_flat(const zs_plan_input *in, const zs_run_config *c,
                                zs_plan_result *r)
{
    static const zs_mem_category states[] = {ZS_MEM_PARAMS, ZS_MEM_GRADS, ZS_MEM_OPT_MASTER,
                                             ZS_MEM_OPT_M, ZS_MEM_OPT_V, ZS_MEM_COMPRESSION};
    size_t ps = zs_dtype_size(c->precision), gs = zs_dtype_size(in->grad_precision);
    size_t held = zs_dtype_size(zs_run_config_grad_dtype(c)); /* the program's */
    zs_step_shape sh;
    zs_step_shape_build_flat(c, r->num_params, in->dp, &sh);
    zs_step_program none = {0};
    zs_step_count cnt;
    zs_step_program_count(&sh, &none, &cnt);
    size_t modelled[ZS_MEM_NCAT] = {0}, S = sh.part.shard;
    for (size_t i = 0; i < sizeof states / sizeof states[0]; i++)
        modelled[states[i]] = cnt.peak[states[i]];
    r->padded = sh.part.padded;
    r->shard = S;
    r->live_params = c->stage == 3 ? in->largest_layer : 0;
    modelled[ZS_MEM_PARAMS] += ps * r->live_params;
    zs_plan_states_count(modelled, (const size_t(*)[ZS_MEM_NCAT])cnt.tier_peak,
                         cnt.grad_fixed_bytes, gs, held, r);
    zs_mem_tier opt_tier = sh.buf[ZS_BUF_M].tier, param_tier = sh.buf[ZS_BUF_PARAMS].tier;
    if (opt_tier != ZS_TIER_DEVICE) {
        /* the updated shard up; nvme: every optimizer state read and
         * written; offload_param: two passes of gathers per micro-batch
         * send this rank's part of everything up (from the file: read
         * first; the updated shard is written there from the host copy) */
        r->h2d_bytes = (double)(ps * S);
        if (opt_tier == ZS_TIER_NVME)
            r->nvme_read_bytes = r->nvme_write_bytes =
                (double)(sh.buf[ZS_BUF_MASTER].bytes + sh.buf[ZS_BUF_M].bytes +
                         sh.buf[ZS_BUF_V].bytes);
        if (param_tier != ZS_TIER_DEVICE) {
            double gathered = 2.0 * (double)c->grad_accum * (double)(ps * S);
            r->h2d_bytes = gathered;
            if (param_tier == ZS_TIER_NVME) {
                r->nvme_read_bytes += gathered;
                r->nvme_write_bytes += (double)(ps * S);
            }
        }
        double rounds = zs_step_reduce_once(c) || c->deterministic ? 1.0 : (double)c->grad_accum;
        r->d2h_bytes = rounds * (double)(gs * S);
    } else if (param_tier != ZS_TIER_DEVICE) {
        /* offload_param alone: the gathers as above, and the updated shard
         * down after the device's optimizer (nvme: then into the file) */
        r->h2d_bytes = 2.0 * (double)c->grad_accum * (double)(ps * S);
        r->d2h_bytes = (double)(ps * S);
        if (param_tier == ZS_TIER_NVME) {
            r->nvme_read_bytes = r->h2d_bytes;
            r->nvme_write_bytes = (double)(ps * S);
        }
    }
    zs_step_shape_free(&sh);
}

/* Model states of the zerosim convention. A GPT: the step program's count
 * (*pr, *have = 1); a bare parameter count: its buffer table. */
static int zs_plan_states_zerosim(const zs_plan_input *in, const zs_run_config *c,
                                  zs_plan_result *r, zs_prediction *pr, int *have)
{
    *have = in->has_arch;
    if (in->has_arch)
        return zs_plan_states_program(in, c, r, pr);
    zs_plan_states_flat(in, c, r);
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


/* What the collectives, compute and step time of one step read: the
 * configuration as planned and the step's sizes. */
typedef struct {
    zs_run_config c;
    zs_prediction pr;          /* the step program's count (have) */
    int have;
    int node_ranks;            /* devices of one node in the data-parallel group */
    int N, st, once, ndp;      /* ndp: the data-parallel collectives, before TP's */
    double GA, RA, Psi, Pp, p, g, rs_calls, ag_calls, gathered;
    double held;               /* the bytes of a gradient the program holds
                                  (zs_run_config_grad_dtype); g asks for others */
} zs_plan_step;

/* The plan's devices: dp x tp x cp x pp (the world a run of it takes). */
static int zs_plan_devices(const zs_plan_input *in)
{
    return in->dp * (in->cfg.tp > 1 ? in->cfg.tp : 1) * (in->cfg.pp > 1 ? in->cfg.pp : 1) *
           (in->cfg.cp > 1 ? in->cfg.cp : 1);
}

/* The nodes of ZeRO++ and of --hierarchical (WHAT names it): the world's
 * devices in whole nodes of devices_per_node (consecutive ranks, as
 * zerosim mesh lays them: tensor-parallel fastest), the run's ranks per
 * node, and K, the data-parallel group's devices in one node
 * (zs_mesh_dp_node_blocks: the dp group of tp rank 0; with --tp T the node
 * holds T such groups' blocks, each the same). That each tensor-parallel
 * group stays inside a node is the table's rule "plan:tp-node" (compat.c),
 * applied with the others after finalisation. */
static int zs_plan_node_blocks(const zs_plan_input *in, zs_run_config *c, int world,
                               const char *what, int *K)
{
    int dpn = in->devices_per_node, T = c->tp > 1 ? c->tp : 1, P = c->pp > 1 ? c->pp : 1;
    if (world > dpn && world % dpn) {
        if (T == 1)
            ZS_FAIL("%s needs the %d devices in whole nodes of %d: use a multiple of %d", what,
                    in->dp, dpn, dpn);
        ZS_FAIL("%s needs the %d devices (--dp %d x --tp %d) in whole nodes of %d: use a "
                "--dp that makes a multiple of %d", what, world, in->dp, T, dpn, dpn);
    }
    c->ranks_per_node = world < dpn ? world : dpn;
    *K = zs_mesh_dp_node_blocks(world, T, P, 0, 0, c->ranks_per_node);
    return 0;
}

/* The configuration a plan counts: the input's, validated and finalized
 * as a run would, with the planner's own rules. */
static int zs_plan_config(const zs_plan_input *in, zs_plan_result *r, zs_plan_step *ps)
{
    if (in->dp < 1)
        ZS_FAIL("--dp must be at least 1, got %d", in->dp);
    if (in->devices_per_node < 1)
        ZS_FAIL("devices per node must be at least 1, got %d", in->devices_per_node);
    long long devices = (long long)in->dp * (in->cfg.tp > 1 ? in->cfg.tp : 1) *
                        (in->cfg.pp > 1 ? in->cfg.pp : 1) * (in->cfg.cp > 1 ? in->cfg.cp : 1);
    if (devices > ZS_PLAN_DEVICES_MAX)
        ZS_FAIL("--dp %d x --tp %d x --pp %d is %lld devices; the planner takes at most %d",
                in->dp, in->cfg.tp > 1 ? in->cfg.tp : 1, in->cfg.pp > 1 ? in->cfg.pp : 1, devices,
                ZS_PLAN_DEVICES_MAX);
    if (!in->has_arch && in->num_params == 0)
        ZS_FAIL("no model: give --params COUNT or --arch gpt with its shape");
    zs_run_config c = in->cfg;
    if (!in->has_arch) {
        if (c.checkpoint_mode != ZS_CKPT_OFF)
            ZS_FAIL("activation checkpointing needs the model's shape: use --arch gpt");
        zs_run_config d; /* the shape is unused: keep the default, valid one */
        zs_run_config_defaults(&d);
        c.model = d.model;
    } else if (!zs_model_is_decoder(&c.model)) {
        ZS_FAIL("the planner's architectures are: gpt, llama");
    }
    if (in->grad_precision != ZS_DTYPE_F32 && in->grad_precision != ZS_DTYPE_BF16 &&
        in->grad_precision != ZS_DTYPE_F16)
        ZS_FAIL("gradient precision must be fp32, bf16 or fp16");
    if (!in->keep_batch)
        c.train_batch_size = 0;
    c.steps = c.steps > 0 ? c.steps : 1;
    if (c.tp > 1 && !in->has_arch)
        ZS_FAIL("tensor parallelism (--tp) needs the model's shape: use --arch gpt");
    if (c.cp > 1 && (!in->has_arch || in->convention != ZS_PLAN_ZEROSIM))
        ZS_FAIL("context parallelism (--cp) is planned in the zerosim convention for a GPT "
                "(--arch gpt), as a run counts it");
    if (in->sequence_parallel && in->convention == ZS_PLAN_ZEROSIM)
        c.sequence_parallel = 1; /* the run's own sharding and collectives */
    r->zeropp = c.stage == 3 && (c.quantized_weights || c.quantized_gradients ||
                                 c.hpz_partition_size > 1);
    int world = zs_plan_devices(in);
    int node_ranks = in->dp < in->devices_per_node ? in->dp : in->devices_per_node;
    if (r->zeropp) {
        if (in->convention != ZS_PLAN_ZEROSIM || !in->has_arch)
            ZS_FAIL("ZeRO++ (qwZ, hpZ, qgZ) is planned in the zerosim convention for a GPT "
                    "(--arch gpt or --config)");
        ZS_TRY(zs_plan_node_blocks(in, &c, world, "ZeRO++", &node_ranks)); /* qgZ's levels */
        if (c.hpz_partition_size > 1 && node_ranks % c.hpz_partition_size)
            ZS_FAIL("zero_hpz_partition_size %d must divide the %d devices per node (hpZ's "
                    "groups stay inside a node)", c.hpz_partition_size, node_ranks);
    } else if (c.hierarchical && c.tp > 1 && in->convention == ZS_PLAN_ZEROSIM) {
        ZS_TRY(zs_plan_node_blocks(in, &c, world, "--hierarchical", &node_ranks));
    } else if (c.stage == 3 && in->convention == ZS_PLAN_ZEROSIM && !c.hierarchical &&
               c.tp <= 1 && c.pp <= 1 && node_ranks < in->dp && in->dp % node_ranks == 0)
        c.ranks_per_node = node_ranks; /* the gathers' parts on each node's link */
    ZS_TRY(zs_run_config_finalize(&c, world));
    zs_compat_ctx cx = {.world = world, .scope = ZS_SCOPE_PLAN, .backend_host = 1,
                        .backend_has_tp = 1, /* the planner's own rules */
                        .plan_closed_form = in->convention != ZS_PLAN_ZEROSIM,
                        .devices_per_node = in->devices_per_node};
    ZS_TRY(zs_compat_apply(&c, &cx));
    if (in->convention != ZS_PLAN_ZEROSIM &&
        (c.compression.kind != ZS_COMP_NONE || c.deterministic))
        ZS_FAIL("--compression and --deterministic are modelled in the zerosim convention only");
    if (in->convention != ZS_PLAN_ZEROSIM && c.offload_optimizer != ZS_OFFLOAD_NONE)
        ZS_FAIL("--offload-optimizer is modelled in the zerosim convention only (for "
                "DeepSpeed's own figures see --deepspeed-estimate)");
    if (in->convention != ZS_PLAN_ZEROSIM && c.stage == 3 && c.offload_param != ZS_OFFLOAD_NONE)
        ZS_FAIL("--offload-param is modelled in the zerosim convention only (for DeepSpeed's "
                "own figures see --deepspeed-estimate)");
    ps->c = c;
    ps->node_ranks = node_ranks;
    return 0;
}

/* Memory: the model states (by convention), the activations, the totals
 * and whether they fit. */
static int zs_plan_memory(const zs_plan_input *in, zs_plan_result *r, zs_plan_step *ps)
{
    const zs_run_config *c = &ps->c;
    if (in->convention == ZS_PLAN_ZEROSIM)
        ZS_TRY(zs_plan_states_zerosim(in, c, r, &ps->pr, &ps->have));
    else
        ZS_TRY(zs_plan_states_closed(in, c, r));
    r->has[ZS_MEM_PARAMS] = r->has[ZS_MEM_GRADS] = 1;
    r->has[ZS_MEM_OPT_MASTER] = r->has[ZS_MEM_OPT_M] = r->has[ZS_MEM_OPT_V] = 1;
    r->has[ZS_MEM_COMPRESSION] = in->convention == ZS_PLAN_ZEROSIM;
    if (in->has_arch && c->pp > 1 && in->convention != ZS_PLAN_ZEROSIM)
        ZS_FAIL("--pp is planned in the zerosim convention only (each stage's step program)");
    if (c->pp > 1 && !in->has_arch)
        ZS_FAIL("--pp needs the model's shape: use --arch gpt");
    if (in->has_arch && c->pp > 1) { /* the stage's own, as zs_predict counted them */
        r->activations_modelled = 1;
        r->has[ZS_MEM_ACTIVATIONS] = r->has[ZS_MEM_CHECKPOINTS] = 1;
    } else if (in->has_arch) {
        r->activations_modelled = 1;
        r->bytes[ZS_MEM_ACTIVATIONS] = (double)zs_model_activation_bytes(&c->model, c->micro_batch);
        r->bytes[ZS_MEM_CHECKPOINTS] = (double)zs_model_checkpoint_bytes(&c->model, c->micro_batch);
        r->has[ZS_MEM_ACTIVATIONS] = r->has[ZS_MEM_CHECKPOINTS] = 1;
        if (in->convention == ZS_PLAN_MEGATRON)
            r->bytes[ZS_MEM_ACTIVATIONS] = zs_plan_megatron_activations(c, in->sequence_parallel);
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
    /* every device of a node holds its own shard's host bytes, its tensor-
     * and pipeline-parallel ranks included (with --pp each counted at the
     * most loaded stage's bytes: a bound) */
    int devices = zs_plan_devices(in);
    r->host_per_node = r->host_total * (double)(devices < in->devices_per_node ? devices
                                                                               : in->devices_per_node);
    r->host_fits = in->host_memory ? r->host_per_node <= (double)in->host_memory : -1;
    return 0;
}

/* The step's sizes the collectives and the compute read. */
static void zs_plan_step_sizes(const zs_plan_input *in, const zs_plan_result *r,
                               zs_plan_step *ps)
{
    const zs_run_config *c = &ps->c;
    ps->N = zs_plan_zero_ranks(in);
    ps->st = c->stage;
    ps->ndp = -1;
    ps->GA = c->grad_accum;
    ps->Psi = (double)r->num_params;
    ps->Pp = (double)r->padded;
    ps->p = (double)zs_dtype_size(c->precision);
    ps->g = (double)zs_dtype_size(in->grad_precision);
    ps->held = (double)zs_dtype_size(zs_run_config_grad_dtype(c));
    /* gradient reductions per step: one per micro-batch, or one (stages 0
     * and 1 with the step schedule) */
    ps->once = zs_step_reduce_once(c);
    ps->RA = ps->once ? 1.0 : ps->GA;
    ps->rs_calls = ps->RA * (double)zs_ceil_div(r->padded, c->reduce_bucket_size);
    ps->ag_calls = (double)zs_ceil_div(r->padded, c->allgather_bucket_size);
    /* stage 3 gathers per step (elements): the program's count, or two
     * passes over Ψ for a bare parameter count */
    ps->gathered = ps->have ? (double)ps->pr.ag_bytes_per_step / ps->p : 2.0 * ps->Psi * ps->GA;
}

/* The program's gradient reductions: compressed all-to-alls, qgZ's two
 * levels, or reduce-scatters; stage 3 overlaps a bucket's reduce-scatter
 * with the rest of the backward, and the last of each reduction round,
 * waited for when its backward has ended, does not hide (the program's
 * rounds of its calls); qgZ's and compression's all-to-alls complete when
 * called, so none hides. */
static void zs_plan_colls_reduce(zs_plan_result *r, const zs_plan_step *ps)
{
    const zs_run_config *c = &ps->c;
    const zs_prediction *pr = &ps->pr;
    int N = ps->N, K = ps->node_ranks, M = N / ps->node_ranks;
    int red0 = r->ncolls; /* the gradient reductions start here */
    if (c->compression.kind != ZS_COMP_NONE)
        zs_plan_add_coll(r, ZS_COLL_ALLTOALL, N > 1 ? pr->a2a_bytes_rank0 * N / (N - 1) : 0.0,
                         pr->rs_calls_per_step, N);
    else if (r->zeropp && c->quantized_gradients) { /* qgZ: inside, then across */
        if (K > 1)
            zs_plan_add_group(r, ZS_COLL_ALLTOALL, pr->qgz_intra_bytes_rank0 * K / (K - 1),
                              pr->qgz_calls_per_step, K, 1);
        if (M > 1)
            zs_plan_add_group(r, ZS_COLL_ALLTOALL, pr->qgz_inter_bytes_rank0 * M / (M - 1),
                              pr->qgz_calls_per_step, M, 2);
    } else
        zs_plan_add_coll(r, ZS_COLL_REDUCE_SCATTER,
                         (double)pr->rs_bytes_per_step * (c->deterministic ? 1.0 : ps->g / ps->held),
                         pr->rs_calls_per_step, N);
    double rounds = pr->reduce_rounds_per_step;
    for (int i = red0; ps->st == 3 && i < r->ncolls; i++)
        r->colls[i].exposed_frac =
            r->colls[i].kind == ZS_COLL_REDUCE_SCATTER && r->colls[i].calls > rounds
                ? rounds / r->colls[i].calls
                : 1.0;
}

/* The program's parameter gathers (hpZ's backward ones inside the node),
 * ZeRO++'s share across nodes, and the experts' collectives. */
static void zs_plan_colls_gather(zs_plan_result *r, const zs_plan_step *ps)
{
    const zs_run_config *c = &ps->c;
    const zs_prediction *pr = &ps->pr;
    int N = ps->N, M = N / ps->node_ranks;
    double hz = (double)pr->ag_hpz_bytes_per_step;
    if (r->zeropp && hz > 0) { /* hpZ: the backward gathers inside the node */
        zs_plan_add_coll(r, ZS_COLL_ALLGATHER, (double)pr->ag_bytes_per_step - hz,
                         pr->ag_calls_per_step - pr->ag_hpz_calls_per_step, N);
        if ((double)pr->ag_bytes_per_step - hz > 0) {
            r->colls[r->ncolls - 1].link_bytes = pr->ag_link_bytes_per_step;
            r->colls[r->ncolls - 1].fwd_only = 1; /* the forward's gathers */
        }
        zs_plan_add_group(r, ZS_COLL_ALLGATHER, hz, pr->ag_hpz_calls_per_step,
                          c->hpz_partition_size, 1);
    } else {
        zs_plan_add_coll(r, ZS_COLL_ALLGATHER,
                         (double)pr->ag_bytes_per_step * (ps->st == 0 ? ps->g / ps->held : 1.0),
                         pr->ag_calls_per_step, N);
        if (ps->st == 3 && pr->ag_bytes_per_step > 0)
            r->colls[r->ncolls - 1].link_bytes = pr->ag_link_bytes_per_step;
    }
    if (r->zeropp && M > 1) /* node 0's link: its last device's rings, qgZ's second level,
                             * for each of the node's T data-parallel groups (--tp T) */
        r->inter_node_bytes = (c->tp > 1 ? c->tp : 1) *
                              (zs_ring_bytes(pr->rs_bytes_per_step, N) +
                               zs_ring_bytes((size_t)((double)pr->ag_bytes_per_step - hz), N) +
                               pr->qgz_inter_bytes_node0);
    if (pr->ep_a2a_calls_per_step > 0) /* the experts' dispatch and combine, over ep */
        zs_plan_add_group(r, ZS_COLL_ALLTOALL, pr->ep_a2a_bytes_per_step * c->ep / (c->ep - 1.0),
                          pr->ep_a2a_calls_per_step, c->ep, c->ep <= ps->node_ranks ? 1 : 0);
    if (pr->edp_rs_calls_per_step + pr->edp_ag_calls_per_step > 0) {
        /* DeepSpeed's layout: the expert store over the edp group of
         * N / ep ranks (every ep-th rank: across nodes) */
        int E = N / c->ep;
        double f = (E - 1.0) / E;
        zs_plan_add_group(r, ZS_COLL_REDUCE_SCATTER, pr->edp_rs_bytes_per_step / f,
                          pr->edp_rs_calls_per_step, E, 0);
        zs_plan_add_group(r, ZS_COLL_ALLGATHER,
                          (pr->edp_ag_bytes_per_step + pr->edp_ag_bytes_per_applied_step) / f,
                          pr->edp_ag_calls_per_step, E, 0);
    }
}

/* The model's tensor-parallel collectives over the TP group of T ranks. */
static void zs_plan_colls_tp(zs_plan_result *r, const zs_plan_step *ps)
{
    const zs_prediction *pr = &ps->pr;
    int T = ps->c.tp, first = r->ncolls;
    if (pr->tp_allreduce_bytes_per_step > 0) {
        double full = pr->tp_allreduce_bytes_per_step * T / (2.0 * (T - 1));
        r->colls[r->ncolls++] = (zs_steptime_coll){.kind = ZS_COLL_ALLREDUCE, .bytes = full,
                                                   .calls = pr->tp_allreduce_calls_per_step,
                                                   .ranks = T};
        r->traffic_bytes += pr->tp_allreduce_bytes_per_step;
    }
    if (pr->tp_rs_bytes_per_step > 0) { /* sequence parallelism's pairs */
        double full = pr->tp_rs_bytes_per_step * T / (T - 1.0);
        double calls = pr->tp_pair_calls_per_step;
        r->colls[r->ncolls++] = (zs_steptime_coll){.kind = ZS_COLL_REDUCE_SCATTER,
                                                   .bytes = full, .calls = calls, .ranks = T};
        r->colls[r->ncolls++] = (zs_steptime_coll){.kind = ZS_COLL_ALLGATHER,
                                                   .bytes = full, .calls = calls, .ranks = T};
        r->traffic_bytes += pr->tp_rs_bytes_per_step + pr->tp_ag_bytes_per_step -
                            pr->tp_ckpt_ag_bytes_per_step;
    }
    if (pr->tp_ckpt_ag_calls_per_step > 0) { /* partitioned checkpoints' gathers */
        double full = pr->tp_ckpt_ag_bytes_per_step * T / (T - 1.0);
        r->colls[r->ncolls++] = (zs_steptime_coll){.kind = ZS_COLL_ALLGATHER, .bytes = full,
                                                   .calls = pr->tp_ckpt_ag_calls_per_step,
                                                   .ranks = T};
        r->traffic_bytes += pr->tp_ckpt_ag_bytes_per_step;
    }
    /* with ZeRO++ or --hierarchical the tensor-parallel groups are inside a
     * node (zs_plan_node_blocks): their rings use its link */
    for (int i = first; (r->zeropp || ps->c.hierarchical) && i < r->ncolls; i++)
        r->colls[i].link = 1;
}

/* A bare parameter count in the zerosim convention: one layout of Ψ,
 * buckets cut evenly; stage 3 gathers once per pass (the units are
 * unknown). */
static int zs_plan_colls_flat(zs_plan_result *r, const zs_plan_step *ps)
{
    const zs_run_config *c = &ps->c;
    int N = ps->N;
    if (c->compression.kind != ZS_COMP_NONE) {
        size_t B = c->reduce_bucket_size ? c->reduce_bucket_size : r->padded;
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
        double sent = zs_predict_alltoall_bytes(c, r->padded, N, 0, lo, hi, (int)nb);
        free(lo);
        free(hi);
        zs_plan_add_coll(r, ZS_COLL_ALLTOALL, N > 1 ? sent * N / (N - 1) : 0.0, ps->rs_calls, N);
    } else {
        zs_plan_add_coll(r, ZS_COLL_REDUCE_SCATTER,
                         ps->RA * ps->Pp * (c->deterministic ? 8.0 : ps->g), ps->rs_calls, N);
    }
    if (ps->st == 3)
        zs_plan_add_coll(r, ZS_COLL_ALLGATHER, ps->p * ps->gathered, ps->GA * 2.0, N);
    else
        zs_plan_add_coll(r, ZS_COLL_ALLGATHER, (ps->st == 0 ? ps->g : ps->p) * ps->Pp,
                         ps->ag_calls, N);
    return 0;
}

/* The paper's and Megatron's conventions. The paper: stages 0, 1 one
 * gradient allreduce (= reduce-scatter + allgather) per step (per
 * micro-batch with --grad-reduce micro-batch); 2: a reduce-scatter per
 * micro-batch and a parameter allgather; 3: also a parameter allgather per
 * pass (3Ψ in all). Megatron: an allreduce of gradients, or reduce-scatter
 * + allgather, once per step (per micro-batch with --grad-reduce
 * micro-batch). */
static void zs_plan_colls_closed(zs_plan_convention conv, zs_plan_result *r,
                                 const zs_plan_step *ps)
{
    int N = ps->N, st = ps->st;
    double RA = ps->RA, GA = ps->GA, g = ps->g, p = ps->p, Psi = ps->Psi;
    if (conv == ZS_PLAN_PAPER && st <= 1) {
        zs_plan_add_coll(r, ZS_COLL_ALLREDUCE, RA * g * Psi, RA * ps->ag_calls, N);
    } else if (conv == ZS_PLAN_PAPER) {
        zs_plan_add_coll(r, ZS_COLL_REDUCE_SCATTER, GA * g * Psi, ps->rs_calls, N);
        zs_plan_add_coll(r, ZS_COLL_ALLGATHER, st == 3 ? GA * 2.0 * p * Psi : p * Psi,
                         st == 3 ? GA * 2.0 : ps->ag_calls, N);
    } else if (st == 0) {
        zs_plan_add_coll(r, ZS_COLL_ALLREDUCE, RA * g * Psi, RA * ps->ag_calls, N);
    } else {
        zs_plan_add_coll(r, ZS_COLL_REDUCE_SCATTER, RA * g * Psi, RA * ps->ag_calls, N);
        zs_plan_add_coll(r, ZS_COLL_ALLGATHER, p * Psi, ps->ag_calls, N);
    }
}

/* 1-bit Adam's step after the freeze (onebit_freeze_step): the compressed
 * momentum's all-to-all and allgather of signs over the padded array
 * (zs_comm_onebit_sizes, as the run's ledger counts them) in place of the
 * gradient reduction and the parameter gather; the warm-up steps before it
 * are Adam's at stage 0 and hold the same memory. */
static void zs_plan_colls_onebit(zs_plan_result *r, const zs_plan_step *ps)
{
    int N = ps->N;
    zs_onebit_sizes ob;
    zs_comm_onebit_sizes(zs_comm_onebit_padded(r->padded, N), N, &ob);
    if (N < 2)
        return;
    zs_plan_add_coll(r, ZS_COLL_ALLTOALL, ob.alltoall_bytes * N / (N - 1.0), 1.0, N);
    zs_plan_add_coll(r, ZS_COLL_ALLGATHER, ob.allgather_bytes * N / (N - 1.0), 1.0, N);
}

/* The collectives of one step, by convention. */
static int zs_plan_colls(const zs_plan_input *in, zs_plan_result *r, zs_plan_step *ps)
{
    if (in->convention == ZS_PLAN_ZEROSIM && zs_optim_is_onebit(ps->c.optimizer)) {
        zs_plan_colls_onebit(r, ps); /* stage 0, no tp, pp or ep (compat.c) */
        ps->ndp = r->ncolls;
        return 0;
    }
    if (in->convention == ZS_PLAN_ZEROSIM && ps->have) { /* as a run makes them */
        zs_plan_colls_reduce(r, ps);
        zs_plan_colls_gather(r, ps);
        ps->ndp = r->ncolls;
        zs_plan_colls_tp(r, ps);
        return 0;
    }
    if (in->convention == ZS_PLAN_ZEROSIM)
        return zs_plan_colls_flat(r, ps);
    zs_plan_colls_closed(in->convention, r, ps);
    return 0;
}

/* The recomputed share of the forward (activation checkpointing): from the
 * program's count, of the forward's elements (the parameters' FLOPs and
 * conversions) and of its blocks (the per-block kernels); without a
 * program (the paper's and Megatron's conventions) every block's forward
 * again, as their published formulas count it (4/3 of the FLOPs). */
static void zs_plan_recompute(const zs_plan_input *in, zs_plan_result *r, const zs_plan_step *ps,
                              double *elems, double *blocks)
{
    const zs_run_config *c = &ps->c;
    const zs_prediction *pr = &ps->pr;
    *elems = *blocks = 0.0;
    if (!ps->have) {
        r->recompute = in->has_arch && c->model.ckpt_blocks > 0 &&
                       c->model.ckpt_blocks < c->model.n_layer;
        *elems = *blocks = r->recompute ? 1.0 : 0.0;
        return;
    }
    r->recompute = pr->recompute_units > 0;
    if (r->recompute && pr->forward_elems_per_step > 0)
        *elems = pr->recompute_elems_per_step / pr->forward_elems_per_step;
    if (r->recompute && pr->forward_blocks_per_step > 0)
        *blocks = pr->recompute_units / pr->forward_blocks_per_step;
}

/* The engine's other passes over parameter-sized fp32 arrays, as
 * zs_engine_step runs them: the full gradient zeroed per micro-batch
 * (stages 0, 1), the reduced part added into the shard per micro-batch,
 * the shard zeroed, and copied back (stage 0); a stage-3 gather copies this
 * rank's piece in; mixed precision converts each unit's parameters to fp32
 * for every pass over it (recomputed forwards: rec_elems of them). The step
 * schedule (stages 0, 1): the full gradient zeroed once (per micro-batch in
 * fixed point with accumulation, which converts and adds each
 * micro-batch's gradient), its part zeroed and the reduced part added
 * once. */
static double zs_plan_passes(const zs_plan_step *ps, double rec_elems)
{
    const zs_run_config *c = &ps->c;
    double GA = ps->GA, Pp = ps->Pp, N = ps->N, S = Pp / N, passes = GA * S + S;
    int fixacc = ps->once && c->deterministic && GA > 1;
    if (ps->once)
        passes = 2.0 * S + (fixacc ? GA * Pp : Pp);
    else if (ps->st <= 1)
        passes += GA * Pp;
    if (ps->st == 0 && !ps->once)
        passes += S;
    if (ps->st == 3)
        passes += ps->gathered / N;
    if (c->precision != ZS_DTYPE_F32)
        passes += GA * Pp * 2.0 + rec_elems;
    if (fixacc) /* to fixed point and added per micro-batch, reduced once, back */
        passes += 2.0 * GA * Pp + Pp + S;
    else if (c->deterministic) /* to fixed point, added, back */
        passes += ps->RA * Pp + ps->RA * S + S;
    return passes;
}

/* Compute: 6Ψ FLOPs per token for forward and backward, plus attention
 * 12·L·C·T per token (a GPT or a Llama), and the recomputed forwards (2 of 6 of
 * their share). A pipeline: the most loaded stage's share of the
 * parameters' compute, stretched by the bubble; tensor parallelism: the TP
 * shard's share (no bubble without a pipeline). The finer model of a GPT:
 * the GEMMs (12 C^2 per block, a Llama's zs_model_llama_token_work, and
 * the V x C head per token, forward and backward: 6 x) apart from the other kernels, each counted in the units
 * of its calibration. *fwd: the forward's share of the compute. */
static void zs_plan_compute_work(const zs_plan_input *in, zs_plan_result *r,
                                 const zs_plan_step *ps, double *gemm,
                                 double work[ZS_WORK_NKINDS], double *fwd)
{
    const zs_run_config *c = &ps->c;
    double rec_e, rec_b, GA = ps->GA, Psi = ps->Psi;
    zs_plan_recompute(in, r, ps, &rec_e, &rec_b);
    /* a device's tokens: with context parallelism its T / cp of each sample
     * (each still attending over the whole sequence's keys, below) */
    double seq = (in->has_arch ? c->model.seq_len : in->seq_len) / (c->cp > 1 ? c->cp : 1);
    r->tokens_per_step = (double)c->micro_batch * GA * seq;
    double per_token = 6.0 * Psi * (ps->have ? 1.0 + rec_e / 3.0 : 1.0), attn = 0.0;
    if (in->has_arch)
        attn = 12.0 * c->model.n_layer * (double)c->model.n_embd * c->model.seq_len;
    per_token += attn * (ps->have ? 1.0 + rec_b / 3.0 : 1.0);
    if (r->recompute && !ps->have)
        per_token *= 4.0 / 3.0;
    r->flops_per_step = r->tokens_per_step * per_token;
    double pp_scale = 1.0;
    if ((r->pp > 1 || c->tp > 1) && Psi > 0)
        pp_scale = (double)ps->pr.num_params / Psi / (1.0 - r->pp_bubble);
    r->flops_per_step *= pp_scale;
    r->traffic_bytes += r->pp_send_bytes + r->cp_ring_bytes + r->cp_a2a_bytes;
    *gemm = 0.0;
    memset(work, 0, ZS_WORK_NKINDS * sizeof work[0]);
    *fwd = ps->have ? 1.0 / (3.0 + rec_e) : r->recompute ? 0.25 : 1.0 / 3.0;
    if (!in->has_arch)
        return;
    double Lq = c->model.n_layer, C = c->model.n_embd, T = c->model.seq_len, V = c->model.vocab;
    double tok = r->tokens_per_step, rf = r->recompute && !ps->have ? 4.0 / 3.0 : 1.0;
    double rb = ps->have ? 1.0 + rec_b / 3.0 : rf; /* the blocks' kernels */
    /* the blocks' GEMM weights a token goes through, and the width of
     * their MLPs' element-wise activation */
    double blockw = 12.0 * Lq * C * C, act = 4.0 * C;
    if (c->model.kind == ZS_MODEL_LLAMA)
        zs_model_llama_token_work(&c->model, &blockw, &act);
    *gemm = rf * 6.0 * tok * (blockw * (ps->have ? rb : 1.0) + V * C);
    work[ZS_WORK_ATTENTION] = rb * tok * T * C * Lq;
    work[ZS_WORK_GELU] = rb * tok * act * Lq;
    work[ZS_WORK_BLOCK] = rb * tok * C * Lq;
    work[ZS_WORK_HEAD] = tok * V;
    work[ZS_WORK_GRADS] = GA * ps->Pp;
    work[ZS_WORK_PASS] =
        zs_plan_passes(ps, ps->have ? ps->pr.recompute_elems_per_step
                                    : r->recompute ? GA * ps->Pp : 0.0);
    if (ps->have) { /* ZeRO++'s codecs */
        work[ZS_WORK_QUANT] = ps->pr.quant_elems_per_step;
        work[ZS_WORK_PASS] += ps->pr.quant_pass_elems_per_step;
    }
    *gemm *= pp_scale;
    for (int k = 0; k < ZS_WORK_NKINDS; k++)
        work[k] *= pp_scale;
}

/* The step time: the links the collectives use (--hierarchical's two
 * levels, or the mesh's node map with --tp or --pp), then the estimate. */
/* LAMB's trust ratios: stages 1-3 all-gather each tensor's two sums of
 * squares over the data-parallel shards once per step (exec_lamb.c), one
 * small collective beside the program's. */
static double zs_plan_lamb_calls(const zs_run_config *c, int N)
{
    return c->optimizer == ZS_OPT_LAMB && c->stage >= 1 && N > 1 ? 1.0 : 0.0;
}

static int zs_plan_step_time(const zs_plan_input *in, zs_plan_result *r, const zs_plan_step *ps,
                             double gemm, const double work[ZS_WORK_NKINDS], double fwd)
{
    const zs_run_config *c = &ps->c;
    int zerosim = in->convention == ZS_PLAN_ZEROSIM, st = ps->st;
    if (c->hierarchical && zerosim)
        ZS_TRY(zs_plan_hierarchical(r, ps->N, ps->node_ranks));
    if (zerosim && ps->have && (c->tp > 1 || c->pp > 1) && c->ep <= 1 && !r->zeropp &&
        !r->hierarchical)
        ZS_TRY(zs_plan_mesh_inter(r, c, &ps->pr, ps->N, in->devices_per_node, ps->ndp));
    /* the engine's allgathers are MPI_Iallgatherv (linear in Open MPI's
     * libnbc): on a shared node link they are costed as such (steptime.h);
     * the two levels of --hierarchical are rings */
    for (int i = 0; zerosim && !c->hierarchical && i < r->ncolls; i++)
        if (r->colls[i].kind == ZS_COLL_ALLGATHER && r->colls[i].ranks == 0)
            r->colls[i].linear = 1;
    zs_steptime_input si = {.world = ps->N, .devices_per_node = in->devices_per_node,
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
                                       : zerosim && st == 3 && zs_step_overlap(c) &&
                                               !r->hierarchical
                                           ? 2
                                           : 0,
                            /* the loss, the overflow flag and the gradient
                             * norm: the program's small collectives (a
                             * bare parameter count has no program: every
                             * program has these three) */
                            .scalar_calls = (ps->have ? ps->pr.scalar_calls_per_step
                                             : zerosim ? 3.0
                                                       : 0.0) +
                                            zs_plan_lamb_calls(c, ps->N),
                            .fwd_compute_frac = fwd,
                            .optimizer_elems = st == 0 ? ps->Pp : ps->Pp / ps->N,
                            .gemm_flops_per_step = gemm,
                            .host_bytes = r->d2h_bytes + r->h2d_bytes,
                            .nvme_bytes = r->nvme_read_bytes + r->nvme_write_bytes,
                            .cal = in->cal};
    if (ps->have && ps->pr.cp_ring_sends_per_step > 0) { /* context parallelism's ring */
        int TC = (c->tp > 1 ? c->tp : 1) * c->cp, K = in->devices_per_node;
        si.ring_bytes = r->cp_ring_bytes;
        si.ring_sends = ps->pr.cp_ring_sends_per_step;
        /* a group holds cp ranks tp apart (Megatron's order tp-cp-dp-pp):
         * inside a node when nodes hold whole blocks of tp x cp ranks */
        si.ring_link = ps->N * (c->tp > 1 ? c->tp : 1) * (c->pp > 1 ? c->pp : 1) <= K || K % TC == 0 ? 1 : 2;
        r->cp_ring_sends = si.ring_sends;
        r->cp_ring_inter = si.ring_link == 2;
    }
    if (r->d2h_bytes > 0 && ps->c.offload_optimizer != ZS_OFFLOAD_NONE) { /* on the host */
        si.host_optimizer_elems = si.optimizer_elems;
        si.optimizer_elems = 0;
    }
    memcpy(si.work, work, sizeof si.work);
    return zs_steptime_estimate(&si, &r->time);
}

int zs_plan_compute(const zs_plan_input *in, zs_plan_result *r)
{
    memset(r, 0, sizeof *r);
    zs_plan_step *ps = calloc(1, sizeof *ps);
    if (!ps)
        ZS_FAIL("out of host memory planning");
    double gemm, work[ZS_WORK_NKINDS], fwd;
    int rc = zs_plan_config(in, r, ps);
    if (!rc) {
        r->num_params = in->has_arch ? zs_model_count_params(&ps->c.model) : in->num_params;
        rc = zs_plan_memory(in, r, ps);
    }
    if (!rc) {
        zs_plan_step_sizes(in, r, ps);
        rc = zs_plan_colls(in, r, ps);
    }
    if (!rc) {
        zs_plan_compute_work(in, r, ps, &gemm, work, &fwd);
        rc = zs_plan_step_time(in, r, ps, gemm, work, fwd);
    }
    free(ps);
    return rc;
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
