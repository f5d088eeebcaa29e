/* zerosim — which features combine (see zerosim/compat.h).
 *
 * Every rule about a combination of features is a row of `rules` below: the
 * features, the scope that asks, refuse or adjust, the check that writes the
 * one line, and for a refusal the anchor that refuses it too or why zerosim
 * cannot model it. Finalisation (training and phantom runs), the planner
 * and the engine (a backend's capabilities) go through this table; no other
 * file refuses a combination. Checks of one option's own value, and splits
 * that do not divide (ranks into groups, blocks into stages), stay where the
 * option is read.
 */
#include "zerosim/compat.h"
#include "zerosim/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A row: the features it relates, who asks, refuse or adjust, the check
 * (1 when the rule applies to c: a refusal writes its one line into msg,
 * an adjustment changes c and writes what it did) and the reason: for a
 * refusal the anchor (DeepSpeed, Megatron-LM) that refuses it too, or why
 * zerosim cannot model it; for an adjustment whose rule it follows. */
typedef struct {
    const char *id;          /* short and stable: "pp+mlp" */
    const char *features;    /* the features it relates, space-separated */
    unsigned scope;          /* ZS_SCOPE_* bits */
    zs_compat_action action;
    int (*check)(zs_run_config *c, const zs_compat_ctx *x, char *msg, size_t n);
    const char *why;
} zs_compat_rule;

#define RULE(name) static int name(zs_run_config *c, const zs_compat_ctx *x, char *msg, size_t n)
#define SAY(...) (snprintf(msg, n, __VA_ARGS__), 1)
#define UNUSED_CTX (void)x

static int zeropp_on(const zs_run_config *c)
{
    return c->quantized_weights || c->quantized_gradients || c->hpz_partition_size > 1;
}

/* ---- ZeRO++ ------------------------------------------------------------- */

RULE(qwz_stage)
{
    UNUSED_CTX;
    return c->quantized_weights && c->stage != 3 &&
           SAY("zero_optimization.zero_quantized_weights (--quantized-weights, ZeRO++ qwZ) "
               "quantizes stage 3's parameter gathers: use --stage 3");
}

RULE(qwz_det)
{
    UNUSED_CTX;
    return c->quantized_weights && c->deterministic &&
           SAY("zero_optimization.zero_quantized_weights (--quantized-weights) is lossy "
               "and deterministic mode promises exact results: drop one of them");
}

RULE(hpz_stage)
{
    UNUSED_CTX;
    return c->hpz_partition_size > 1 && c->stage != 3 &&
           SAY("zero_optimization.zero_hpz_partition_size %d (--hpz-partition-size, ZeRO++ "
               "hpZ) partitions stage 3's parameters a second time: use --stage 3, or 1",
               c->hpz_partition_size);
}

RULE(hpz_offload_param)
{
    UNUSED_CTX;
    return c->hpz_partition_size > 1 && c->offload_param != ZS_OFFLOAD_NONE && c->stage == 3 &&
           SAY("zero_optimization.zero_hpz_partition_size with offload_param is not "
               "modelled: drop one of them");
}

RULE(qgz_stage)
{
    UNUSED_CTX;
    return c->quantized_gradients && c->stage != 3 &&
           SAY("zero_optimization.zero_quantized_gradients (--quantized-gradients, ZeRO++ "
               "qgZ) replaces stage 3's gradient reduce-scatter: use --stage 3");
}

RULE(qgz_det)
{
    UNUSED_CTX;
    return c->quantized_gradients && c->deterministic &&
           SAY("zero_optimization.zero_quantized_gradients (--quantized-gradients) is lossy "
               "and deterministic mode promises exact results: drop one of them");
}

RULE(qgz_compression)
{
    UNUSED_CTX;
    return c->quantized_gradients && c->compression.kind != ZS_COMP_NONE &&
           SAY("zero_optimization.zero_quantized_gradients and gradient compression both "
               "replace the reduce-scatter: drop one of them");
}

/* qgZ replaces the reduce-scatter, hierarchical or not; the parameter
 * gathers stay two-level. Nothing changes: the line says what runs. */
RULE(qgz_hierarchical)
{
    UNUSED_CTX;
    return c->quantized_gradients && c->hierarchical && c->stage == 3 &&
           SAY("--hierarchical with --quantized-gradients: the gradient reductions are qgZ's "
               "two-level all-to-alls, the parameter gathers two-level allgathers");
}

/* ---- offload ------------------------------------------------------------ */

RULE(offload_stage0)
{
    UNUSED_CTX;
    return c->offload_optimizer != ZS_OFFLOAD_NONE && c->stage == 0 &&
           SAY("offload_optimizer (--offload-optimizer %s) needs ZeRO stage 1, 2 or 3, as "
               "DeepSpeed's does: use --stage 1 or higher",
               zs_offload_name(c->offload_optimizer));
}

/* DeepSpeed reads offload_param in stage 3 only: dropped below it, and
 * listed with the keys of no effect as before. */
RULE(offload_param_stage)
{
    UNUSED_CTX;
    if (c->offload_param == ZS_OFFLOAD_NONE || c->stage == 3)
        return 0;
    size_t len = strlen(c->noeffect);
    if (len + 64 < sizeof c->noeffect)
        snprintf(c->noeffect + len, sizeof c->noeffect - len,
                 "%szero_optimization.offload_param (stage %d)", len ? ", " : "", c->stage);
    c->offload_param = ZS_OFFLOAD_NONE;
    return SAY("offload_param is read in stage 3 only: dropped at stage %d", c->stage);
}

/* ---- tensor and sequence parallelism, the model ----------------------- */

RULE(sp_tp)
{
    UNUSED_CTX;
    return c->sequence_parallel && c->tp < 2 &&
           SAY("sequence parallelism (--sequence-parallel) splits the sequence over the "
               "tensor-parallel group: it needs --tp 2 or more");
}

RULE(tp_model)
{
    UNUSED_CTX;
    return c->tp > 1 && !zs_model_is_decoder(&c->model) &&
           SAY("tensor parallelism (--tp %d) is implemented for the decoders: use --model gpt "
               "or llama, or --tp 1", c->tp);
}

/* partition_activations shards the checkpoints over the tensor-parallel
 * group (src/model/decoder.c), each the same on every rank of the group. */
RULE(partition_activations_sp)
{
    UNUSED_CTX;
    return c->partition_activations && c->tp > 1 && c->sequence_parallel &&
           SAY("activation_checkpointing.partition_activations with --sequence-parallel: "
               "sequence parallelism already splits the checkpoints over the tensor-parallel "
               "group (each rank its positions): set it to false, or drop "
               "--sequence-parallel");
}

RULE(qat_tp)
{
    UNUSED_CTX;
    return c->qat && c->tp > 1 &&
           SAY("quantization-aware training (--qat) works with --tp 1: its scales are "
               "per whole tensor or block of the tp = 1 layout");
}

/* ---- experts ------------------------------------------------------------ */

RULE(ep_moe)
{
    UNUSED_CTX;
    return c->ep > 1 && c->model.moe_experts == 0 &&
           SAY("expert parallelism (--ep %d) needs a mixture of experts: give "
               "--moe-experts (moe.num_experts)", c->ep);
}

RULE(ep_layout_ep)
{
    UNUSED_CTX;
    return c->ep_layout == ZS_EP_LAYOUT_DEEPSPEED && c->ep <= 1 &&
           SAY("moe.ep_layout (--ep-layout) \"deepspeed\" lays out expert parallelism: it "
               "needs --ep 2 or more (moe.ep_size)");
}

/* ---- context parallelism (--cp) ----------------------------------------- */

RULE(cp_world)
{
    if (c->cp <= 1 || x->world < 1 || x->world % (c->tp * c->cp * c->pp) == 0)
        return 0;
    return SAY("%d ranks do not divide into tensor-parallel groups of %d (--tp) times "
               "context-parallel groups of %d (--cp) times %d pipeline stages (--pp): use a "
               "number of ranks that %d divides", x->world, c->tp, c->cp, c->pp,
               c->tp * c->cp * c->pp);
}

RULE(cp_seq)
{
    UNUSED_CTX;
    return c->cp > 1 && c->model.kind != ZS_MODEL_MLP && c->model.seq_len % (2 * c->cp) &&
           SAY(c->cp_attention == ZS_CP_ULYSSES
                   ? "context parallelism (--cp %d) cuts each sequence into 2 x %d = %d equal "
                     "chunks (Ulysses: rank i holds chunks 2i and 2i + 1 of 0 .. %d): the "
                     "sequence length %d is not a multiple of %d; use --seq a multiple of %d, "
                     "or another --cp"
                   : "context parallelism (--cp %d) cuts each sequence into 2 x %d = %d equal "
                     "chunks (rank i holds chunks i and %d - i): the sequence length %d is not "
                     "a multiple of %d; use --seq a multiple of %d, or another --cp",
               c->cp, c->cp, 2 * c->cp, 2 * c->cp - 1, c->model.seq_len, 2 * c->cp, 2 * c->cp);
}

RULE(cp_model)
{
    UNUSED_CTX;
    return c->cp > 1 && c->model.kind != ZS_MODEL_GPT && c->model.kind != ZS_MODEL_LLAMA &&
           SAY("context parallelism (--cp %d) splits a decoder's sequence (ring attention): "
               "use --model gpt or llama, or --cp 1", c->cp);
}

RULE(cp_moe)
{
    UNUSED_CTX;
    return c->cp > 1 && c->model.moe_experts > 0 &&
           SAY("context parallelism (--cp %d) with a mixture of experts is not implemented yet "
               "(an expert's capacity counts a whole sample's tokens): drop --moe-experts or use "
               "--cp 1", c->cp);
}

/* DeepSpeed-Ulysses (--cp U --cp-attention ulysses, "sequence_parallel_size"):
 * each rank runs the attention on n_head / (tp U) whole heads. */
RULE(ulysses_heads)
{
    UNUSED_CTX;
    int TU = c->tp * c->cp;
    return c->cp > 1 && c->cp_attention == ZS_CP_ULYSSES && c->model.n_head % TU &&
           SAY("Ulysses (--cp-attention ulysses, --cp %d) gives each rank n_head / (tp x cp) "
               "whole heads: %d heads do not divide by %d x %d = %d; use --heads a multiple "
               "of %d, or a --cp that divides %d / %d", c->cp, c->model.n_head, c->tp, c->cp,
               TU, TU, c->model.n_head, c->tp);
}

RULE(ulysses_model)
{
    UNUSED_CTX;
    return c->cp > 1 && c->cp_attention == ZS_CP_ULYSSES && c->model.kind != ZS_MODEL_GPT &&
           SAY("Ulysses (--cp-attention ulysses, --cp %d) is implemented for the GPT (the Llama "
               "family's grouped-query heads not yet): use --model gpt, or --cp-attention ring",
               c->cp);
}

/* DeepSpeed's layout asked for (--ep-layout deepspeed) where it is not
 * implemented: zs_compat_ep_split_why, for the configuration as
 * finalisation leaves it (it sets the model's ep and tp after this table).
 * A world that does not split into tp x pp x ep is finalisation's to refuse. */
RULE(ep_layout_deepspeed)
{
    int groups = c->tp * c->pp;
    if (c->ep_layout != ZS_EP_LAYOUT_DEEPSPEED || c->ep <= 1 || groups < 1 ||
        x->world % groups || (x->world / groups) % c->ep)
        return 0;
    zs_run_config f = *c;
    f.model.moe_ep = c->ep;
    f.model.tp = c->tp;
    const char *why = zs_compat_ep_split_why(&f, x->world / groups);
    return why && SAY("--ep-layout deepspeed (moe.ep_layout): DeepSpeed's layout is not "
                      "implemented with %s; run without it or with --ep-layout auto", why);
}

int zs_step_ep_exact(const zs_run_config *cfg, int world)
{
    if (cfg->deterministic)
        return 1;
    return world == 2 && cfg->precision == ZS_DTYPE_F32 &&
           !(zs_step_reduce_once(cfg) && cfg->grad_accum > 1);
}

const char *zs_compat_ep_split_why(const zs_run_config *cfg, int world)
{
    if (cfg->model.moe_ep <= 1)
        return "no expert parallelism";
    if (cfg->offload_optimizer != ZS_OFFLOAD_NONE || cfg->offload_param != ZS_OFFLOAD_NONE) {
        if (cfg->ep_layout != ZS_EP_LAYOUT_DEEPSPEED)
            return "offload";
        /* DeepSpeed's layout offloads the experts' optimizer to the host
         * as the dense shard's (exec_expert.c); not yet their parameters,
         * nor the swap file */
        if (cfg->offload_param != ZS_OFFLOAD_NONE || cfg->offload_optimizer != ZS_OFFLOAD_CPU)
            return "offload_param or offload_optimizer nvme (offload_optimizer cpu runs)";
    }
    if (cfg->compression.kind != ZS_COMP_NONE)
        return "gradient compression";
    if (cfg->hpz_partition_size > 1 || cfg->quantized_weights || cfg->quantized_gradients)
        return "ZeRO++";
    if (cfg->pp > 1 || cfg->model.tp > 1)
        return "pipeline or tensor parallelism";
    if (cfg->ep_layout != ZS_EP_LAYOUT_DEEPSPEED && !zs_step_ep_exact(cfg, world))
        return "more than 2 ranks, bf16/fp16 or the step schedule's accumulation without "
               "--deterministic (floats summed over edp are not --ep 1's order)";
    return NULL;
}

/* ---- precision and gradient compression --------------------------------- */

/* fp32 accumulation where zerosim has no fp32 form of the gradient path:
 * under fp16 the loss scaler finds an overflow in the fp16 gradient of a
 * micro-batch, and zerosim's backward computes in fp32 and rounds only
 * when it stores, so an fp32 store would never overflow (DeepSpeed
 * accumulates in fp32 with bf16 only: its BF16_Optimizer); the expert
 * store and the gradients sent home (--ep), the 1-bit optimizers'
 * momentum exchange and qgZ's quantized reduction keep the working
 * precision. NULL where it runs. */
static const char *grad_accum_fp32_unmodelled(const zs_run_config *c)
{
    if (zs_run_config_grad_dtype(c) != ZS_DTYPE_F32 || c->precision == ZS_DTYPE_F32)
        return NULL;
    if (c->precision == ZS_DTYPE_F16)
        return "fp16 training is not modelled (the loss scaler finds overflows in the fp16 "
               "gradients): use bf16 training (--precision bf16), or accumulate in fp16";
    if (c->ep > 1)
        return "expert parallelism (--ep) is not modelled yet: drop one of them";
    if (zs_optim_is_onebit(c->optimizer) || c->optimizer == ZS_OPT_ZEROONEADAM)
        return "a 1-bit optimizer is not modelled yet: drop one of them";
    if (c->quantized_gradients && c->stage == 3)
        return "ZeRO++ qgZ (--quantized-gradients) is not modelled yet: drop one of them";
    return NULL;
}

RULE(dtype_precision)
{
    UNUSED_CTX;
    zs_dtype g = zs_run_config_grad_dtype(c);
    const char *what = grad_accum_fp32_unmodelled(c);
    if (c->grad_accum_dtype >= 0 && g != ZS_DTYPE_F32 && g != c->precision)
        return SAY("data_types.grad_accum_dtype \"%s\" with %s training is not modelled "
                   "(zerosim accumulates gradients in fp32 or the working precision): set it "
                   "to \"fp32\" or \"%s\" (--grad-accum-dtype)",
                   zs_dtype_name(g), zs_dtype_name(c->precision), zs_dtype_name(c->precision));
    if (what)
        return SAY("data_types.grad_accum_dtype \"fp32\" (--grad-accum-dtype fp32) with %s", what);
    if (c->comm_dtype >= 0 && c->comm_dtype != (int)g)
        return SAY("communication_data_type \"%s\" with gradients accumulated in %s is not "
                   "modelled (zerosim reduces gradients in the type they accumulate in): "
                   "remove it or set it to \"%s\"",
                   zs_dtype_name((zs_dtype)c->comm_dtype), zs_dtype_name(g), zs_dtype_name(g));
    return 0;
}

RULE(compression_stage0)
{
    UNUSED_CTX;
    return c->compression.kind != ZS_COMP_NONE && c->stage == 0 &&
           SAY("gradient compression works with ZeRO stages 1, 2 and 3: set "
               "zero_optimization.stage (--stage) to 1, 2 or 3, or turn compression off");
}

RULE(compression_det)
{
    UNUSED_CTX;
    return c->compression.kind != ZS_COMP_NONE && c->deterministic &&
           SAY("gradient compression and deterministic mode cannot be combined: compressed "
               "sums are deterministic only for a fixed number of ranks");
}

/* overlap_comm on with the step schedule in deterministic mode over more
 * than one micro-batch: each micro-batch's gradient is added into the int64
 * copy of the full gradient, reduced once after the last backward (the
 * builder's fixacc), so nothing hides. Nothing changes: the line says so. */
RULE(overlap_step)
{
    UNUSED_CTX;
    return c->overlap_comm == 1 && c->stage <= 1 && c->grad_reduce == ZS_GRAD_REDUCE_STEP &&
           c->deterministic && c->grad_accum > 1 &&
           SAY("--overlap-comm on with --grad-reduce step and --deterministic: the fixed-point "
               "gradient is reduced once, after the last backward, with nothing left to hide "
               "behind");
}

/* ---- the pipeline ------------------------------------------------------- */

RULE(pp_model)
{
    UNUSED_CTX;
    return c->pp > 1 && !zs_model_is_decoder(&c->model) &&
           SAY("pipeline parallelism (--pp %d) cuts a decoder's blocks into stages: use "
               "--model gpt or llama, or --pp 1", c->pp);
}

RULE(pp_zeropp)
{
    UNUSED_CTX;
    return c->pp > 1 && c->stage == 3 && zeropp_on(c) &&
           SAY("ZeRO++ (zero_quantized_weights, zero_quantized_gradients, "
               "zero_hpz_partition_size) with --pp %d is not supported yet: turn them off or "
               "use --pp 1", c->pp);
}

/* ---- LAMB --------------------------------------------------------------- */

/* The trust ratio needs each tensor's whole sums: the data-parallel shards'
 * parts are all-gathered (exec_lamb.c); the tensor-parallel and pipeline
 * groups', and the expert store's, are not. */
RULE(lamb_parallel)
{
    UNUSED_CTX;
    const char *what = c->tp > 1 ? "--tp" : c->pp > 1 ? "--pp" : c->ep > 1 ? "--ep" : NULL;
    return c->optimizer == ZS_OPT_LAMB && what &&
           SAY("LAMB (optimizer \"Lamb\") with %s above 1 is not implemented (its trust "
               "ratio sums each tensor over the data-parallel shards only): use %s 1, or Adam",
               what, what);
}

RULE(lamb_nvme)
{
    UNUSED_CTX;
    return c->optimizer == ZS_OPT_LAMB && c->offload_optimizer == ZS_OFFLOAD_NVME &&
           SAY("LAMB (optimizer \"Lamb\") with offload_optimizer nvme is not implemented (the "
               "trust ratio needs a second pass over the swapped states): use "
               "--offload-optimizer cpu or none");
}

/* The zerosim convention counts LAMB's states (master, m, v) and its trust
 * ratio's sums from the step program, as a run does; the published closed
 * forms (ZeRO's K = 12, Megatron's) are Adam's. */
RULE(plan_lamb)
{
    return x->plan_closed_form && c->optimizer == ZS_OPT_LAMB &&
           SAY("the paper's and Megatron's conventions count Adam's states: plan LAMB "
               "(optimizer \"Lamb\") with --convention zerosim, which counts its states and "
               "trust-ratio sums as a run does");
}

/* ---- 1-bit Adam and 1-bit LAMB ------------------------------------------- */


/* After the freeze every rank keeps its own gradient and the momentum is
 * exchanged whole (exec_onebit.c): DeepSpeed's 1-bit optimizers run without
 * ZeRO's partitioning, and so does zerosim's. */
/* The rows onebitadam+* hold for 1-bit Adam and 1-bit LAMB, the rows
 * zerooneadam+* for 0/1 Adam: the same conditions, each family its rows. */
static int onebit_like(const zs_run_config *c, int zeroone)
{
    return zeroone ? c->optimizer == ZS_OPT_ZEROONEADAM : zs_optim_is_onebit(c->optimizer);
}

static const char *onebit_name(const zs_run_config *c)
{
    return c->optimizer == ZS_OPT_ZEROONEADAM   ? "0/1 Adam (optimizer \"ZeroOneAdam\")"
           : c->optimizer == ZS_OPT_ONEBITLAMB ? "1-bit LAMB (optimizer \"OneBitLamb\")"
                                               : "1-bit Adam (optimizer \"OneBitAdam\")";
}

static int onebit_stage_if(zs_run_config *c, char *msg, size_t n, int zeroone)
{
    return onebit_like(c, zeroone) && c->stage != 0 &&
           SAY("%s runs with ZeRO stage 0 only, as in DeepSpeed (its compressed all-reduce "
               "of the whole momentum replaces the gradient reduction that ZeRO partitions): "
               "use --stage 0, or %s with stage %d", onebit_name(c),
               c->optimizer == ZS_OPT_ONEBITLAMB ? "LAMB" : "Adam", c->stage);
}

RULE(onebit_stage) { UNUSED_CTX; return onebit_stage_if(c, msg, n, 0); }
RULE(zeroone_stage) { UNUSED_CTX; return onebit_stage_if(c, msg, n, 1); }


static int onebit_parallel_if(zs_run_config *c, char *msg, size_t n, int zeroone)
{
    const char *what = c->tp > 1 ? "--tp above 1" : c->pp > 1 ? "--pp above 1"
                     : c->ep > 1 ? "--ep above 1" : c->model.moe_experts > 0 ? "experts (--moe)"
                     : c->offload_optimizer != ZS_OFFLOAD_NONE ? "offload_optimizer"
                     : c->compression.kind != ZS_COMP_NONE ? "gradient compression"
                     : c->hierarchical ? "--hierarchical" : NULL;
    return onebit_like(c, zeroone) && what &&
           SAY("%s with %s is not implemented (its momentum exchange covers the "
               "data-parallel group's flat array only): drop %s, or use %s", onebit_name(c),
               what, what, c->optimizer == ZS_OPT_ONEBITLAMB ? "LAMB" : "Adam");
}

RULE(onebit_parallel) { UNUSED_CTX; return onebit_parallel_if(c, msg, n, 0); }
RULE(zeroone_parallel) { UNUSED_CTX; return onebit_parallel_if(c, msg, n, 1); }

/* The zerosim convention counts 1-bit Adam's momentum, variance, error
 * buffers and compressed exchange from the step program, as a run does. */
RULE(plan_onebit)
{
    return x->plan_closed_form && zs_optim_is_onebit(c->optimizer) &&
           SAY("the paper's and Megatron's conventions count Adam's states: plan %s with "
               "--convention zerosim, which counts its error buffers and compressed exchange as "
               "a run does", onebit_name(c));
}

/* 0/1 Adam's steps differ by kind (exact, 1-bit, local, sync): the planner
 * has no schedule for them. */
RULE(plan_zeroone)
{
    UNUSED_CTX;
    return c->optimizer == ZS_OPT_ZEROONEADAM &&
           SAY("the planner has no schedule for 0/1 Adam (optimizer \"ZeroOneAdam\"), whose "
               "steps are exact, 1-bit, local or syncs: plan it as --optimizer onebitadam for "
               "a step that exchanges, or measure it with zerosim train --phantom");
}

static int device_onebit_if(zs_run_config *c, const zs_compat_ctx *x, char *msg, size_t n,
                            int zeroone)
{
    return !x->backend_host && onebit_like(c, zeroone) &&
           SAY("%s is not supported with --backend %s yet (its compressed exchange runs on "
               "host memory): use --backend cpu", onebit_name(c), x->backend);
}

RULE(device_onebit) { return device_onebit_if(c, x, msg, n, 0); }
RULE(device_zeroone) { return device_onebit_if(c, x, msg, n, 1); }

/* ---- the planner -------------------------------------------------------- */

RULE(plan_hierarchical)
{
    UNUSED_CTX;
    return c->hierarchical &&
           (c->pp > 1 || c->ep > 1 || (c->stage == 3 && zeropp_on(c))) &&
           SAY("--hierarchical is planned without --pp, --ep and ZeRO++ (qwZ, hpZ, qgZ): "
               "drop --hierarchical or those, or measure it with zerosim train --phantom");
}

/* The planner's node link model (ZeRO++'s two levels, --hierarchical) counts
 * one tensor-parallel group's rings per node, so each group must fit in a
 * node of x->devices_per_node: --tp divides it (zs_mesh_rank_of puts
 * tensor-parallel ranks fastest). A run sends the rings across the node map
 * as they fall; the planner has no model of a group split between nodes. */
RULE(plan_tp_node)
{
    int T = c->tp > 1 ? c->tp : 1, dpn = x->devices_per_node;
    int zeropp = c->stage == 3 && zeropp_on(c);
    int node_model = zeropp || (c->hierarchical && !x->plan_closed_form);
    return node_model && T > 1 && dpn > 0 && x->world > dpn && dpn % T &&
           SAY("%s with --tp %d is planned with each tensor-parallel group inside a node of "
               "%d devices: use a --tp that divides %d, or measure it with zerosim train "
               "--phantom", zeropp ? "ZeRO++" : "--hierarchical", T, dpn, dpn);
}

/* ---- a backend whose memory the host cannot read ----------------------- */

RULE(device_offload)
{
    if (!x->backend_host && c->stage == 3 && c->offload_param != ZS_OFFLOAD_NONE &&
        c->offload_optimizer == ZS_OFFLOAD_NONE)
        return SAY("offload_param is not supported with --backend %s yet (the parameter "
                   "shard is written on host memory): use --backend cpu", x->backend);
    return !x->backend_host && c->stage >= 1 && c->offload_optimizer != ZS_OFFLOAD_NONE &&
           SAY("offload_optimizer is not supported with --backend %s yet (the host "
               "optimizer runs on host memory): use --backend cpu", x->backend);
}

RULE(device_compression)
{
    return !x->backend_host && c->compression.kind != ZS_COMP_NONE &&
           SAY("--compression is not supported with --backend %s (its codecs run on "
               "host memory): use --backend cpu, or --compression none", x->backend);
}

RULE(device_qat)
{
    return !x->backend_host && c->qat &&
           SAY("--qat is not supported with --backend %s yet (its fake quantization "
               "runs on host memory): use --backend cpu", x->backend);
}

RULE(device_tp)
{
    return c->model.tp > 1 && !x->backend_has_tp &&
           SAY("tensor parallelism (--tp %d) has no kernels on the %s backend yet: use "
               "--backend cpu, or --tp 1", c->model.tp, x->backend);
}

/* The portable backend's exact sums of slices (deterministic mode) cover
 * the dense layers' tensor-parallel sums; an expert's are plain sums. */
RULE(device_moe_tp)
{
    return c->model.tp > 1 && c->model.moe_experts > 0 && c->model.tp_exact_slices > 0 &&
           SAY("a mixture of experts with --tp %d on --backend %s in deterministic mode is not "
               "implemented yet (the experts' tensor-parallel sums are not exact sums of "
               "slices): drop --deterministic, or use --backend cpu", c->model.tp, x->backend);
}

RULE(device_cp)
{
    return c->cp > 1 && !x->backend_host &&
           SAY("context parallelism (--cp %d) has no ring-attention kernels on the %s backend "
               "yet: use --backend cpu or ref", c->cp, x->backend);
}

RULE(device_lamb)
{
    return !x->backend_host && c->optimizer == ZS_OPT_LAMB &&
           SAY("LAMB (optimizer \"Lamb\") is not supported with --backend %s yet (its step "
               "runs on host memory): use --backend cpu", x->backend);
}

RULE(device_pp)
{
    return !x->backend_host && c->pp > 1 &&
           SAY("pipeline parallelism (--pp %d) is not supported with --backend %s yet: "
               "use --backend cpu", c->pp, x->backend);
}

/* ---- exact sums of slices (--exact-slices, docs/portable.md) ----------- */

RULE(exact_slices_run)
{
    UNUSED_CTX;
    return c->exact_slices > 0 &&
           (!c->deterministic || c->model.kind != ZS_MODEL_GPT || c->cp > 1) &&
           SAY("--exact-slices (zerosim.exact_slices) %d: the exact sums of slices are the "
               "GPT's with --deterministic and no --cp: add --deterministic, or drop it",
               c->exact_slices);
}

RULE(device_exact_slices)
{
    return c->exact_slices > 0 && !x->backend_exact_sums &&
           SAY("--exact-slices (zerosim.exact_slices) %d: --backend %s has no exact sums of "
               "slices: use --backend ref, or drop it", c->exact_slices, x->backend);
}

#define REFUSE ZS_COMPAT_REFUSE
#define ADJUST ZS_COMPAT_ADJUST
#define RUN ZS_SCOPE_RUN
#define DEVICE ZS_SCOPE_DEVICE

static const zs_compat_rule rules[] = {
    {"qwz+stage", "qwZ stage", RUN, REFUSE, qwz_stage,
     "DeepSpeed reads zero_quantized_weights in stage 3 only"},
    {"qwz+deterministic", "qwZ deterministic", RUN, REFUSE, qwz_det,
     "qwZ rounds the gathered parameters; deterministic mode promises exact sums"},
    {"hpz+stage", "hpZ stage", RUN, REFUSE, hpz_stage,
     "DeepSpeed reads zero_hpz_partition_size in stage 3 only"},
    {"hpz+offload-param", "hpZ offload-param", RUN, REFUSE, hpz_offload_param,
     "a secondary partition of parameters that live off the device: not modelled"},
    {"qgz+stage", "qgZ stage", RUN, REFUSE, qgz_stage,
     "DeepSpeed reads zero_quantized_gradients in stage 3 only"},
    {"qgz+deterministic", "qgZ deterministic", RUN, REFUSE, qgz_det,
     "qgZ rounds the gradients; deterministic mode promises exact sums"},
    {"qgz+compression", "qgZ compression", RUN, REFUSE, qgz_compression,
     "both replace the same reduce-scatter"},
    {"qgz+hierarchical", "qgZ hierarchical", RUN, ADJUST, qgz_hierarchical,
     "ZeRO++'s qgZ is its own two-level reduction"},
    {"offload+stage0", "offload stage", RUN, REFUSE, offload_stage0,
     "DeepSpeed offloads the optimizer from stage 1 up"},
    {"offload-param+stage", "offload-param stage", RUN, ADJUST, offload_param_stage,
     "DeepSpeed reads offload_param in stage 3 only"},
    {"sp+tp", "sp tp", RUN, REFUSE, sp_tp,
     "Megatron-LM's sequence parallelism lives in the tensor-parallel group"},
    {"tp+mlp", "tp model", RUN, REFUSE, tp_model,
     "zerosim splits the decoders' layers only (Megatron-LM's split)"},
    {"partition-activations+sp", "ckpt sp", RUN, REFUSE, partition_activations_sp,
     "sequence parallelism's checkpoints are each rank's own positions: nothing replicated "
     "to partition"},
    {"qat+tp", "qat tp", RUN, REFUSE, qat_tp,
     "the fake quantization's scales are of the tp = 1 tensors"},
    {"ep+moe", "ep moe", RUN, REFUSE, ep_moe, "experts are what expert parallelism deals out"},
    {"ep-layout+ep", "ep-layout ep", RUN, REFUSE, ep_layout_ep,
     "the layout is of expert parallelism"},
    {"dtype+precision", "dtype precision ep onebit qgZ", RUN, REFUSE, dtype_precision,
     "zerosim accumulates and reduces gradients in the working precision, or in fp32 with bf16 "
     "(DeepSpeed's BF16_Optimizer) where the gradient path has an fp32 form (not yet --ep, the "
     "1-bit optimizers, qgZ)"},
    {"compression+stage0", "compression stage", RUN, REFUSE, compression_stage0,
     "the codecs replace the reduce-scatter of a gradient shard"},
    {"compression+deterministic", "compression deterministic", RUN, REFUSE, compression_det,
     "compressed sums are exact for a fixed number of ranks only"},
    {"overlap+step", "overlap grad-reduce deterministic", RUN, ADJUST, overlap_step,
     "the fixed-point accumulator is reduced once per step"},
    {"pp+mlp", "pp model", RUN, REFUSE, pp_model, "the pipeline cuts a decoder's blocks"},
    {"pp+zeropp", "pp qwZ hpZ qgZ", RUN, REFUSE, pp_zeropp,
     "DeepSpeed's pipeline engine runs ZeRO stage 0 and 1 only"},
    /* last of the run's rules: the others refuse first, as before it was one */
    {"ep-layout+deepspeed", "ep-layout offload compression qwZ hpZ qgZ", RUN, REFUSE,
     ep_layout_deepspeed,
     "DeepSpeed's layout of the experts' store runs with offload_optimizer cpu (ZeRO-Offload of "
     "the expert groups), not yet offload_param or nvme; ZeRO++ is stage 3's, which DeepSpeed's "
     "engine asserts MoE does not run with; zerosim's codecs compress the dense shard's "
     "reduce-scatter, not the experts' edp sum"},
    {"plan:hierarchical", "hierarchical pp ep qwZ hpZ qgZ", ZS_SCOPE_PLAN, REFUSE,
     plan_hierarchical, "the planner's node model; zerosim train runs it"},
    {"device+offload", "backend offload", DEVICE, REFUSE, device_offload,
     "the host optimizer reads host memory"},
    {"device+compression", "backend compression", DEVICE, REFUSE, device_compression,
     "the codecs read host memory"},
    {"device+qat", "backend qat", DEVICE, REFUSE, device_qat,
     "the fake quantization reads host memory"},
    {"device+tp", "backend tp", DEVICE, REFUSE, device_tp,
     "the backend has no tensor-parallel kernels"},
    {"device+pp", "backend pp", DEVICE, REFUSE, device_pp,
     "the pipeline's messages are staged through host memory"},
    /* the optimizers' rules, after the matrix's features' */
    {"lamb+parallel", "lamb tp pp ep", RUN, REFUSE, lamb_parallel,
     "not implemented yet: the trust ratio's sums over the tp, pp and expert groups "
     "(DeepSpeed's FusedLamb sums the tensor it is given)"},
    {"lamb+nvme", "lamb offload", RUN, REFUSE, lamb_nvme,
     "not implemented yet: a second pass over the swapped states"},
    {"plan:lamb", "lamb convention", ZS_SCOPE_PLAN, REFUSE, plan_lamb,
     "the published closed forms (ZeRO's K = 12, Megatron's) are Adam's; the zerosim "
     "convention plans it"},
    {"device+lamb", "backend lamb", DEVICE, REFUSE, device_lamb,
     "LAMB's step reads host memory"},
    /* context parallelism's rules, after the older ones (their numbers stay) */
    {"cp+world", "cp tp pp", RUN, REFUSE, cp_world,
     "Megatron-LM's RankGenerator needs tp x cp x pp to divide the world"},
    {"cp+seq", "cp seq", RUN, REFUSE, cp_seq,
     "Megatron-LM's load balancing cuts the sequence into 2 cp chunks"},
    {"cp+model", "cp model", RUN, REFUSE, cp_model,
     "ring attention splits a decoder's sequence (GPT, Llama): the MLP has none"},
    {"cp+moe", "cp moe", RUN, REFUSE, cp_moe,
     "not implemented yet (Megatron-LM runs it): the router, its capacity and aux term over "
     "a context chunk's tokens"},
    {"device+cp", "backend cp", DEVICE, REFUSE, device_cp,
     "the ring attention's kernels are the CPU's and the portable backend's"},
    {"onebitadam+stage", "onebitadam stage", RUN, REFUSE, onebit_stage,
     "DeepSpeed's 1-bit optimizers do not combine with ZeRO (stage 0 only)"},
    {"onebitadam+parallel", "onebitadam tp pp ep moe offload compression hierarchical", RUN, REFUSE,
     onebit_parallel, "not implemented yet: the momentum exchange over the flat array only"},
    {"plan:onebitadam", "onebitadam convention", ZS_SCOPE_PLAN, REFUSE, plan_onebit,
     "the published closed forms have no error buffers; the zerosim convention plans it"},
    {"device+onebitadam", "backend onebitadam", DEVICE, REFUSE, device_onebit,
     "the compressed exchange reads host memory"},
    /* DeepSpeed-Ulysses over the context axis, after the older ones */
    {"ulysses+heads", "cp heads tp", RUN, REFUSE, ulysses_heads,
     "each rank attends with whole heads: n_head / (tp x cp) of them"},
    {"ulysses+model", "cp model", RUN, REFUSE, ulysses_model,
     "the all-to-all attention is implemented for the GPT's multi-head attention"},
    {"plan:tp-node", "tp qwZ hpZ qgZ hierarchical", ZS_SCOPE_PLAN, REFUSE, plan_tp_node,
     "the planner's node link model counts one tensor-parallel group's rings per node; "
     "zerosim train runs it"},
    {"zerooneadam+stage", "zerooneadam stage", RUN, REFUSE, zeroone_stage,
     "DeepSpeed's 1-bit optimizers do not combine with ZeRO (stage 0 only)"},
    {"zerooneadam+parallel", "zerooneadam tp pp ep moe offload compression hierarchical", RUN,
     REFUSE, zeroone_parallel, "not implemented yet: the exchanges over the flat array only"},
    {"plan:zerooneadam", "zerooneadam", ZS_SCOPE_PLAN, REFUSE, plan_zeroone,
     "the planner has no 0/1 Adam schedule"},
    {"device+zerooneadam", "backend zerooneadam", DEVICE, REFUSE, device_zeroone,
     "the compressed exchange reads host memory"},
    /* the portable backend's exact sums of slices */
    {"exact-slices", "exact-slices deterministic model cp", ZS_SCOPE_TRAIN, REFUSE,
     exact_slices_run,
     "the slices cut the GPT's tensor-parallel sums; the ring attention's rows are the "
     "whole sequence's"},
    {"device+exact-slices", "backend exact-slices", DEVICE, REFUSE, device_exact_slices,
     "only the portable backend sums in fixed slices"},
    {"device+moe-tp", "moe tp deterministic", DEVICE, REFUSE, device_moe_tp,
     "not implemented yet: the portable backend's (ref) exact sums of slices in "
     "deterministic mode are the dense layers'; the experts' tensor-parallel sums are plain"},
};

int zs_compat_apply(zs_run_config *c, const zs_compat_ctx *x)
{
    char msg[512];
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        const zs_compat_rule *r = &rules[i];
        if (!(r->scope & x->scope) || !r->check(c, x, msg, sizeof msg))
            continue;
        if (r->action == ZS_COMPAT_REFUSE)
            return zs_error_set("%s", msg);
        size_t len = strlen(c->adjusted);
        if (!strstr(c->adjusted, msg) && len + strlen(msg) + 3 < sizeof c->adjusted)
            snprintf(c->adjusted + len, sizeof c->adjusted - len, "%s%s", len ? "; " : "", msg);
    }
    return 0;
}

int zs_compat_check_device(const zs_run_config *cfg, int world, const char *backend,
                           int backend_host, int backend_has_tp, int backend_exact_sums)
{
    zs_run_config c = *cfg;
    zs_compat_ctx x = {.world = world, .scope = ZS_SCOPE_DEVICE, .backend = backend,
                       .backend_host = backend_host, .backend_has_tp = backend_has_tp,
                       .backend_exact_sums = backend_exact_sums};
    return zs_compat_apply(&c, &x);
}

/* ---- the matrix ------------------------------------------------------------ */

static void f_stage0(zs_run_config *c) { c->stage = 0; }
static void f_stage1(zs_run_config *c) { c->stage = 1; }
static void f_stage2(zs_run_config *c) { c->stage = 2; }
static void f_tp(zs_run_config *c) { c->tp = 2; }
static void f_sp(zs_run_config *c) { c->tp = 2; c->sequence_parallel = 1; }
static void f_pp(zs_run_config *c) { c->pp = 2; }
static void f_moe(zs_run_config *c) { c->model.moe_experts = 4; }
static void f_ep(zs_run_config *c) { c->model.moe_experts = 4; c->ep = 2; }
static void f_offload(zs_run_config *c) { c->offload_optimizer = ZS_OFFLOAD_CPU; }
static void f_offload_param(zs_run_config *c)
{
    c->offload_optimizer = ZS_OFFLOAD_CPU;
    c->offload_param = ZS_OFFLOAD_CPU;
}
static void f_qwz(zs_run_config *c) { c->quantized_weights = 1; }
static void f_hpz(zs_run_config *c) { c->hpz_partition_size = 2; }
static void f_qgz(zs_run_config *c) { c->quantized_gradients = 1; }
static void f_compression(zs_run_config *c)
{
    c->compression.kind = ZS_COMP_TOPK;
    c->compression.topk_fraction = 0.1;
}
static void f_ckpt(zs_run_config *c) { c->checkpoint_mode = ZS_CKPT_EVERY; c->checkpoint_value = 1; }
static void f_overlap_off(zs_run_config *c) { c->overlap_comm = 0; }
static void f_overlap_on(zs_run_config *c) { c->overlap_comm = 1; }
static void f_det(zs_run_config *c) { c->deterministic = 1; }
static void f_bf16(zs_run_config *c) { c->precision = ZS_DTYPE_BF16; }
static void f_fp16(zs_run_config *c) { c->precision = ZS_DTYPE_F16; }
static void f_step(zs_run_config *c) { c->grad_reduce = ZS_GRAD_REDUCE_STEP; }
static void f_hier(zs_run_config *c) { c->hierarchical = 1; }

/* The main features of the matrix: a name, the options that turn it on
 * (zerosim train and zerosim plan take the same), and the setting itself. */
typedef struct {
    const char *name;
    const char *args;
    void (*set)(zs_run_config *c);
} zs_compat_feature;

static const zs_compat_feature features[] = {
    {"stage0", "--stage 0", f_stage0},
    {"stage1", "--stage 1", f_stage1},
    {"stage2", "--stage 2", f_stage2},
    {"tp", "--tp 2", f_tp},
    {"sp", "--tp 2 --sequence-parallel", f_sp},
    {"pp", "--pp 2", f_pp},
    {"moe", "--moe-experts 4", f_moe},
    {"ep", "--moe-experts 4 --ep 2", f_ep},
    {"offload", "--offload-optimizer cpu", f_offload},
    {"offload-param", "--offload-optimizer cpu --offload-param cpu", f_offload_param},
    {"qwZ", "--quantized-weights", f_qwz},
    {"hpZ", "--hpz-partition-size 2", f_hpz},
    {"qgZ", "--quantized-gradients", f_qgz},
    {"compression", "--compression topk:0.1", f_compression},
    {"ckpt", "--checkpoint-activations every:1", f_ckpt},
    {"overlap-off", "--overlap-comm off", f_overlap_off},
    {"overlap-on", "--overlap-comm on", f_overlap_on},
    {"deterministic", "--deterministic", f_det},
    {"bf16", "--precision bf16", f_bf16},
    {"fp16", "--precision fp16", f_fp16},
    {"grad-reduce-step", "--grad-reduce step", f_step},
    {"hierarchical", "--hierarchical", f_hier},
};

/* The matrix's base: a stage-3 GPT of 4 blocks on 8 ranks in nodes of 4,
 * micro-batch 2 x 2; the options that give it (train, plan). */
enum { ZS_COMPAT_BASE_WORLD = 8 };
static const char zs_compat_base_train_args[] =
    "--stage 3 --layers 4 --hidden 64 --heads 4 --seq 32 --vocab 64 --micro-batch 2 "
    "--grad-accum 2 --ranks-per-node 4";
static const char zs_compat_base_plan_args[] =
    "--arch gpt --stage 3 --layers 4 --hidden 64 --heads 4 --seq 32 --vocab 64 "
    "--micro-batch 2 --grad-accum 2 --devices-per-node 4";

static void zs_compat_base(zs_run_config *c)
{
    zs_run_config_defaults(c);
    c->stage = 3;
    c->model.kind = ZS_MODEL_GPT;
    c->model.n_layer = 4;
    c->model.n_embd = 64;
    c->model.n_head = 4;
    c->model.seq_len = 32;
    c->model.vocab = 64;
    c->micro_batch = 2;
    c->grad_accum = 2;
    c->ranks_per_node = 4;
}

/* The rule that decides the pair (a, b) for scope, as a cell: "." accepted,
 * "R<n>" refused by rule n, "A<n>" adjusted by rule n (the first that
 * applies). */
static void cell(int a, int b, unsigned scope, char *out, size_t n)
{
    zs_run_config c;
    zs_compat_base(&c);
    features[a].set(&c);
    features[b].set(&c);
    zs_compat_ctx x = {.world = ZS_COMPAT_BASE_WORLD, .scope = scope, .backend_host = 1,
                       .backend_has_tp = 1, .devices_per_node = c.ranks_per_node};
    char msg[512];
    int first = -1, i;
    /* the first refusal, else the first adjustment */
    for (i = 0; i < (int)(sizeof rules / sizeof rules[0]); i++) {
        if (!(rules[i].scope & scope) || !rules[i].check(&c, &x, msg, sizeof msg))
            continue;
        if (rules[i].action == ZS_COMPAT_REFUSE) {
            snprintf(out, n, "R%d", i + 1);
            return;
        }
        if (first < 0)
            first = i;
    }
    if (first >= 0)
        snprintf(out, n, "A%d", first + 1);
    else
        snprintf(out, n, ".");
}

static const char *scope_name(unsigned s)
{
    if (s == ZS_SCOPE_RUN)
        return "train, phantom, plan";
    if (s == ZS_SCOPE_DEVICE)
        return "the engine, by backend";
    if (s == ZS_SCOPE_PLAN)
        return "plan only";
    return "train";
}

void zs_compat_print(FILE *f)
{
    size_t nr = sizeof rules / sizeof rules[0], nf = sizeof features / sizeof features[0];
    fprintf(f, "rules (src/config/compat.c), in the order they are tried:\n");
    for (size_t i = 0; i < nr; i++)
        fprintf(f, "%2zu %-6s %-26s %-26s %s\n   %s\n", i + 1,
                rules[i].action == ZS_COMPAT_REFUSE ? "refuse" : "adjust", rules[i].id,
                rules[i].features, scope_name(rules[i].scope), rules[i].why);
    fprintf(f, "\nbase train: --world-size %d %s\nbase plan: %s\n", ZS_COMPAT_BASE_WORLD,
            zs_compat_base_train_args, zs_compat_base_plan_args);
    fprintf(f, "\nfeatures (on a stage-3 GPT of 4 blocks, 8 ranks in nodes of 4):\n");
    for (size_t a = 0; a < nf; a++)
        fprintf(f, "%2zu %-17s %s\n", a + 1, features[a].name, features[a].args);
    fprintf(f, "\npairs: . runs, R<n> refused by rule n, A<n> adjusted by rule n, P<n> "
               "refused by the planner's rule n (zerosim train runs it)\n    ");
    for (size_t b = 0; b < nf; b++)
        fprintf(f, "%4zu", b + 1);
    fputc('\n', f);
    for (size_t a = 0; a < nf; a++) {
        fprintf(f, "%2zu  ", a + 1);
        for (size_t b = 0; b < nf; b++) {
            char s[16], p[16];
            cell((int)a, (int)b, ZS_SCOPE_TRAIN, s, sizeof s);
            cell((int)a, (int)b, ZS_SCOPE_PLAN, p, sizeof p);
            if (p[0] == 'R' && s[0] != 'R')
                p[0] = 'P';
            fprintf(f, "%4s", s[0] == 'R' ? s : p);
        }
        fputc('\n', f);
    }
}
