/* zerosim — zs_run_config_finalize: the batch arithmetic, the checks of
 * single options (ranges, the float checks) and of splits that must divide,
 * in the order that decides which message a user sees first. Every rule
 * about a combination of features is zerosim/compat.h's, applied first. */
#include "config_impl.h"
#include "zerosim/compat.h"
#include "zerosim/config.h"
#include "zerosim/error.h"
#include "zerosim/quant.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Micro-batch size used when neither train_batch_size nor
 * train_micro_batch_size_per_gpu is given. */
#define DEFAULT_MICRO_BATCH 8

/* ------------------------------------------------------------------------ */
/* Finalize                                                                  */

/* Resolve train_batch_size = micro_batch * grad_accum * world (DeepSpeed's
 * rules: any two determine the third; all three must agree). */
static int resolve_batch(zs_run_config *c, int world)
{
    const char *ws = c->tp * c->pp * c->cp > 1 ? "data-parallel size" : "world size";
    long long tb = c->train_batch_size, mb = c->micro_batch, ga = c->grad_accum, w = world;

    if (tb < 0 || mb < 0 || ga < 0)
        return zs_config_fail("train_batch_size (%lld), train_micro_batch_size_per_gpu (%lld) and "
                              "gradient_accumulation_steps (%lld) must be positive (0 = not given)",
                              tb, mb, ga);
    if (tb && mb && ga) {
        if (tb != mb * ga * w)
            return zs_config_fail("train_batch_size (%lld) must equal "
                                  "train_micro_batch_size_per_gpu (%lld) * "
                                  "gradient_accumulation_steps (%lld) * %s (%lld) = %lld: fix one "
                                  "of them, or give only two", tb, mb, ga, ws, w, mb * ga * w);
    } else if (tb && mb) {
        if (tb % (mb * w))
            return zs_config_fail("train_batch_size (%lld) is not divisible by "
                                  "train_micro_batch_size_per_gpu (%lld) * %s (%lld) = %lld, so "
                                  "gradient_accumulation_steps would not be a whole number",
                                  tb, mb, ws, w, mb * w);
        ga = tb / (mb * w);
    } else if (tb && ga) {
        if (tb % (ga * w))
            return zs_config_fail("train_batch_size (%lld) is not divisible by "
                                  "gradient_accumulation_steps (%lld) * %s (%lld) = %lld, so "
                                  "train_micro_batch_size_per_gpu would not be a whole number", tb,
                                  ga, ws, w, ga * w);
        mb = tb / (ga * w);
    } else if (tb) {
        if (tb % w)
            return zs_config_fail("train_batch_size (%lld) is not divisible by the %s (%lld): "
                                  "give a multiple of it, or set train_micro_batch_size_per_gpu",
                                  tb, ws, w);
        ga = 1;
        mb = tb / w;
    } else {
        if (!mb)
            mb = DEFAULT_MICRO_BATCH;
        if (!ga)
            ga = 1;
        tb = mb * ga * w;
    }
    /* Each factor is below 2^31, so the product fits in 64 bits. */
    if (tb > INT_MAX)
        return zs_config_fail("train_batch_size = train_micro_batch_size_per_gpu (%lld) * "
                              "gradient_accumulation_steps (%lld) * %s (%lld) = %lld is too large",
                              mb, ga, ws, w, tb);
    c->train_batch_size = (int)tb;
    c->micro_batch = (int)mb;
    c->grad_accum = (int)ga;
    return 0;
}

/* A float check for zs_run_config_finalize: the key, the value, whether it
 * is allowed, and the requirement. Comparisons are written so NaN fails. */
typedef struct {
    const char *key;
    double value;
    int ok;
    const char *need;
} float_check;

/* The interleaved schedule (--pp-schedule interleaved --virtual-stages v),
 * as Megatron-LM's forward_backward_pipelining_with_interleaving asks it:
 * v >= 2 chunks of equal blocks per rank, m a multiple of P. */
static int check_interleaved(const zs_run_config *c)
{
    int v = c->virtual_stages, P = c->pp, L = c->model.n_layer, m = c->grad_accum;
    if (v < 1)
        return zs_config_fail("--virtual-stages must be at least 1, got %d", v);
    if (c->pp_schedule != ZS_PP_INTERLEAVED) {
        if (v > 1)
            return zs_config_fail("--virtual-stages %d is for the interleaved schedule: add "
                                  "--pp-schedule interleaved or drop --virtual-stages", v);
        return 0;
    }
    if (P < 2)
        return zs_config_fail("--pp-schedule interleaved needs --pp of at least 2, got %d", P);
    if (v < 2)
        return zs_config_fail("--pp-schedule interleaved needs --virtual-stages of at least 2 "
                              "(model chunks per pipeline rank), got %d", v);
    if (c->pp_partition != ZS_PP_UNIFORM)
        return zs_config_fail("--pp-schedule interleaved cuts the blocks uniformly: drop "
                              "--pp-partition %s", zs_pp_partition_name(c->pp_partition));
    if (L % P != 0 || (L / P) % v != 0)
        return zs_config_fail("--virtual-stages %d does not divide the blocks per pipeline rank "
                              "(%d blocks over --pp %d): every one of the %d chunks needs the "
                              "same number of blocks", v, L, P, P * v);
    if (m % P != 0)
        return zs_config_fail("--pp-schedule interleaved needs the micro-batches (--grad-accum, "
                              "%d) to be a multiple of --pp %d, as Megatron-LM requires", m, P);
    return 0;
}

/* What the pipeline (--pp > 1) supports; one line saying why otherwise. */
static int check_pipeline(const zs_run_config *c)
{
    if (c->pp <= 1)
        return check_interleaved(c);
    /* the pipeline's combinations are zerosim/compat.h's */
    if (c->pp > c->model.n_layer)
        return zs_config_fail("--pp %d is more pipeline stages than the model's %d blocks "
                              "(model.layers): every stage needs at least one block", c->pp,
                              c->model.n_layer);
    return check_interleaved(c);
}

/* The mesh: the world, --tp and --pp, --ranks-per-node. */
static int finalize_mesh(zs_run_config *c, int world_size)
{
    if (world_size < 1)
        return zs_config_fail("world size must be at least 1, got %d", world_size);
    if (c->tp < 1 || c->pp < 1)
        return zs_config_fail("tensor_parallel.autotp_size (--tp) and --pp must be at least 1, "
                              "got %d and %d", c->tp, c->pp);
    if (c->ranks_per_node < 0 || (c->ranks_per_node > 0 && world_size % c->ranks_per_node))
        return zs_config_fail("--ranks-per-node %d must divide the %d ranks (K consecutive ranks "
                              "make a node): use a divisor of %d", c->ranks_per_node, world_size,
                              world_size);
    return 0;
}

/* ZeRO++ (qwZ, hpZ, qgZ): hpZ's groups must divide the data-parallel group. */
static int finalize_zeropp(zs_run_config *c, int world_size)
{
    /* a split: hpZ's groups in the data-parallel group */
    if (c->hpz_partition_size > 1 && (world_size / (c->tp * c->pp)) % c->hpz_partition_size)
        return zs_config_fail("zero_optimization.zero_hpz_partition_size %d must divide the %d "
                              "data-parallel ranks: use a divisor of %d (the ranks per node)",
                              c->hpz_partition_size, world_size / (c->tp * c->pp),
                              world_size / (c->tp * c->pp));
    return 0;
}

/* Offload: the stage it needs, offload_param's pairing with
 * offload_optimizer, and the NVMe folder. */
static int finalize_offload(zs_run_config *c)
{
    if (c->offload_param == ZS_OFFLOAD_NVME && !c->nvme_path[0])
        return zs_config_fail("offload_param \"device\": \"nvme\" needs nvme_path (--nvme-path "
                              "DIR), the folder for the parameters' files");
    if (c->offload_optimizer == ZS_OFFLOAD_NVME && !c->nvme_path[0])
        return zs_config_fail("offload_optimizer \"device\": \"nvme\" needs nvme_path "
                              "(--nvme-path DIR), the folder for the optimizer's files");
    return 0;
}

/* Tensor, sequence and expert parallelism over the mesh, then the batch
 * arithmetic over the data-parallel size. */
static int finalize_parallel(zs_run_config *c, int world_size)
{
    if (world_size % (c->tp * c->pp))
        return zs_config_fail("%d ranks do not divide into tensor-parallel groups of %d (--tp) "
                              "times %d pipeline stages (--pp): use a number of ranks that %d "
                              "divides", world_size, c->tp, c->pp, c->tp * c->pp);
    c->model.tp = c->tp;
    c->model.sequence_parallel = c->sequence_parallel;
    c->model.cp = c->cp;
    c->model.cp_attention = c->cp_attention;
    if (c->ep < 1)
        return zs_config_fail("moe.ep_size (--ep) must be at least 1, got %d", c->ep);
    if (c->ep > ZS_BOUND_EP_MAX)
        return zs_config_fail("moe.ep_size (--ep) %d is more than the %d ranks an expert-parallel "
                              "group may have here: use --ep %d or less",
                              c->ep, ZS_BOUND_EP_MAX, ZS_BOUND_EP_MAX);
    /* a split: expert-parallel groups in the data-parallel group */
    if (c->ep > 1 && (world_size / (c->tp * c->pp)) % c->ep)
        return zs_config_fail("the expert-parallel size (--ep %d) must divide the data-parallel "
                              "size (%d ranks / (tp %d x pp %d))", c->ep,
                              world_size / (c->tp * c->pp), c->tp, c->pp);
    c->model.moe_ep = c->ep;
    /* the batch over the pure data-parallel size: a context-parallel group
     * computes one micro-batch together */
    ZS_TRY(resolve_batch(c, world_size / (c->tp * c->pp * c->cp)));
    return 0;
}

/* Single options: steps, the timeout, the schedule, the stage, the
 * optimizer, the precision, the loss scaler, and the float checks. */
static int finalize_numbers(zs_run_config *c)
{
    if (c->steps <= 0)
        return zs_config_fail("steps (zerosim.steps) must be > 0, got %d: set a positive number "
                              "of steps", c->steps);
    if (!(c->collective_timeout > 0) || !isfinite(c->collective_timeout))
        return zs_config_fail("zerosim.collective_timeout (--collective-timeout) must be a number "
                              "of seconds > 0, got %g", c->collective_timeout);
    if (c->steps_per_print < 0)
        return zs_config_fail("steps_per_print must be >= 0, got %d", c->steps_per_print);
    if (c->total_steps < 0)
        return zs_config_fail("total_num_steps (scheduler.params.total_num_steps) must be > 0, "
                              "got %d", c->total_steps);
    if (c->total_steps == 0)
        c->total_steps = c->steps;
    if (c->warmup_steps < 0)
        return zs_config_fail("warmup_num_steps (scheduler.params.warmup_num_steps) must be >= 0, "
                              "got %d", c->warmup_steps);
    if (c->stage < 0 || c->stage > 3)
        return zs_config_fail("zero_optimization.stage must be 0, 1, 2 or 3, got %d", c->stage);
    if (c->optimizer != ZS_OPT_ADAMW && c->optimizer != ZS_OPT_SGD &&
        c->optimizer != ZS_OPT_LAMB && !zs_optim_is_onebit(c->optimizer) &&
        c->optimizer != ZS_OPT_ZEROONEADAM)
        return zs_config_fail("optimizer.type is invalid (%d): use AdamW, SGD, Lamb, OneBitAdam, "
                              "OneBitLamb or ZeroOneAdam", (int)c->optimizer);
    if (c->optimizer == ZS_OPT_ONEBITLAMB &&
        (c->onebit_coeff_beta >= 1.0f || c->onebit_factor_min > c->onebit_factor_max ||
         c->onebit_factor_threshold >= 1.0f))
        return zs_config_fail("optimizer.params of OneBitLamb: need coeff_beta < 1 (got %g), "
                              "factor_min <= factor_max (got %g, %g) and factor_threshold < 1 "
                              "(got %g)", (double)c->onebit_coeff_beta,
                              (double)c->onebit_factor_min, (double)c->onebit_factor_max,
                              (double)c->onebit_factor_threshold);
    if (c->onebit_freeze_step < 0)
        return zs_config_fail("optimizer.params.freeze_step (--freeze-step) must be >= 0, got %d",
                              c->onebit_freeze_step);
    if (c->zo_var_update_scaler < 1 || c->zo_local_step_scaler < 1 || c->zo_local_step_clipper < 1)
        return zs_config_fail("optimizer.params var_update_scaler, local_step_scaler and "
                              "local_step_clipper must be >= 1, got %d, %d and %d",
                              c->zo_var_update_scaler, c->zo_local_step_scaler,
                              c->zo_local_step_clipper);
    if ((int)c->scheduler < ZS_SCHED_CONSTANT || c->scheduler > ZS_SCHED_WARMUP_COSINE)
        return zs_config_fail("scheduler.type is invalid (%d)", (int)c->scheduler);
    if (c->precision != ZS_DTYPE_F32 && c->precision != ZS_DTYPE_BF16 &&
        c->precision != ZS_DTYPE_F16)
        return zs_config_fail("precision is invalid (%d): use fp32, bf16 or fp16",
                              (int)c->precision);
    if (c->initial_scale_power < 0 || c->initial_scale_power > MAX_SCALE_POWER)
        return zs_config_fail("fp16.initial_scale_power must be from 0 to %d, got %d",
                              MAX_SCALE_POWER, c->initial_scale_power);
    if (c->loss_scale_window <= 0)
        return zs_config_fail("fp16.loss_scale_window must be > 0, got %d", c->loss_scale_window);
    if (c->hysteresis <= 0)
        return zs_config_fail("fp16.hysteresis must be > 0, got %d", c->hysteresis);

    const float_check checks[] = {
        {"optimizer.params.lr", c->lr, c->lr > 0 && isfinite(c->lr),
         "> 0: set a positive learning rate"},
        {"optimizer.params.betas[0] (beta1)", c->beta1, c->beta1 >= 0 && c->beta1 < 1,
         ">= 0 and < 1"},
        {"optimizer.params.betas[1] (beta2)", c->beta2, c->beta2 >= 0 && c->beta2 < 1,
         ">= 0 and < 1"},
        {"optimizer.params.eps", c->eps, c->eps > 0 && isfinite(c->eps), "> 0"},
        {"optimizer.params.weight_decay", c->weight_decay,
         c->weight_decay >= 0 && isfinite(c->weight_decay), ">= 0 (0 = off)"},
        {"optimizer.params.momentum", c->momentum, c->momentum >= 0 && isfinite(c->momentum),
         ">= 0"},
        {"scheduler.params.warmup_min_ratio", c->warmup_min_ratio,
         c->warmup_min_ratio >= 0 && c->warmup_min_ratio <= 1, "from 0 to 1"},
        {"scheduler.params.cos_min_ratio", c->cos_min_ratio,
         c->cos_min_ratio >= 0 && c->cos_min_ratio <= 1, "from 0 to 1"},
        {"gradient_clipping", c->grad_clip, c->grad_clip >= 0 && isfinite(c->grad_clip),
         ">= 0 (0 = off)"},
        {"fp16.loss_scale", c->static_loss_scale,
         c->static_loss_scale >= 0 && isfinite(c->static_loss_scale), ">= 0 (0 = dynamic)"},
        {"fp16.min_loss_scale", c->min_loss_scale,
         c->min_loss_scale > 0 && isfinite(c->min_loss_scale), "> 0"},
        {"optimizer.params.min_coeff (LAMB)", c->lamb_min_coeff,
         c->lamb_min_coeff >= 0 && c->lamb_min_coeff <= c->lamb_max_coeff,
         ">= 0 and <= max_coeff"},
        {"optimizer.params.max_coeff (LAMB)", c->lamb_max_coeff,
         c->lamb_max_coeff > 0 && isfinite(c->lamb_max_coeff), "> 0"},
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++)
        if (!checks[i].ok)
            return zs_config_fail("%s must be %s, got %g", checks[i].key, checks[i].need,
                                  checks[i].value);
    return 0;
}

/* "auto" bucket sizes, activation partitioning, the reduction and
 * accumulation dtypes, gradient_predivide_factor. */
static int finalize_precision(zs_run_config *c)
{
    /* "auto" bucket sizes, as the Hugging Face Trainer sets them from the
     * model's hidden size */
    double h = c->model.n_embd;
    if (c->auto_mask & ZS_AUTO_REDUCE_BUCKET)
        c->reduce_bucket_size = (size_t)(h * h);
    if (c->auto_mask & ZS_AUTO_PREFETCH)
        c->stage3_prefetch_bucket_size = (size_t)(0.9 * h * h);
    if (!(c->grad_predivide > 0) || !isfinite(c->grad_predivide))
        return zs_config_fail("gradient_predivide_factor must be > 0, got %g", c->grad_predivide);
    return 0;
}

/* Take key off list, the keys of no effect (", "-separated), if there. */
static void drop_noeffect(char *list, const char *key)
{
    size_t k = strlen(key);
    for (char *p = list; (p = strstr(p, key)) != NULL; p += k) {
        if ((p != list && p[-1] != ' ') || (p[k] != '\0' && p[k] != ','))
            continue;
        char *from = p + k, *to = p;
        if (*from == ',') /* ", " after it goes with it */
            from += 2;
        else if (p != list) /* the last: the ", " before it */
            to = p - 2;
        memmove(to, from, strlen(from) + 1);
        return;
    }
}

/* Compression, QAT, activation checkpointing, the pipeline, the model. */
static int finalize_features(zs_run_config *c)
{
    if (c->model.kind == ZS_MODEL_LLAMA) { /* the Llama family's unset sizes */
        if (c->model.n_kv_head == 0)
            c->model.n_kv_head = c->model.n_head; /* multi-head attention */
        if (c->model.ffn_hidden == 0)
            c->model.ffn_hidden = 4 * c->model.n_embd;
    }
    if (zs_model_is_decoder(&c->model) || c->checkpoint_mode != ZS_CKPT_OFF) {
        int L = c->model.n_layer > 0 ? c->model.n_layer : 1, k = 0;
        if (c->checkpoint_mode == ZS_CKPT_EVERY)
            k = c->checkpoint_value;
        else if (c->checkpoint_mode == ZS_CKPT_SEGMENTS)
            k = (L + c->checkpoint_value - 1) / c->checkpoint_value;
        else if (c->checkpoint_mode == ZS_CKPT_SQRT) {
            int nseg = (int)lround(sqrt((double)L));
            k = (L + (nseg > 0 ? nseg : 1) - 1) / (nseg > 0 ? nseg : 1);
        }
        if (c->checkpoint_mode != ZS_CKPT_OFF && k < 1)
            return zs_config_fail("activation checkpointing needs at least one block per segment");
        c->model.ckpt_blocks = k;
    }
    /* partition_activations shards the checkpoints with --tp > 1 and
     * segments to checkpoint (src/model/decoder.c): then it has an effect */
    c->model.ckpt_partition = c->partition_activations;
    if (c->partition_activations && c->tp > 1 && c->model.ckpt_blocks > 0 &&
        c->model.ckpt_blocks < c->model.n_layer)
        drop_noeffect(c->noeffect, "activation_checkpointing.partition_activations");
    ZS_TRY(check_pipeline(c));
    return zs_model_config_validate(&c->model);
}

/* The phases run in this order, and the checks inside each in theirs: the
 * first failing check decides the message a user sees. */
int zs_run_config_finalize(zs_run_config *c, int world_size)
{
    ZS_TRY(finalize_mesh(c, world_size));
    /* every rule about combinations of features (zerosim/compat.h) */
    zs_compat_ctx cx = {.world = world_size, .scope = ZS_SCOPE_TRAIN, .backend_host = 1,
                        .backend_has_tp = 1};
    ZS_TRY(zs_compat_apply(c, &cx));
    ZS_TRY(finalize_zeropp(c, world_size));
    ZS_TRY(finalize_offload(c));
    ZS_TRY(finalize_parallel(c, world_size));
    ZS_TRY(finalize_numbers(c));
    ZS_TRY(finalize_precision(c));
    return finalize_features(c);
}
