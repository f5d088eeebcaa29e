/* zerosim — the DeepSpeed key schema: a table of fields per JSON object
 * (see deepspeed.c for how the loader reads them), the handlers of keys that
 * need more than a table entry, and zs_config_print_keys (`zerosim
 * config-keys`). The optimizer and scheduler sections are
 * deepspeed_optim.c's. */
#include "config_impl.h"
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

const num_rule R_POS_INT = {1, INT_MAX, 0, 0, 1, "a positive integer"};
static const num_rule R_EXACT_SLICES = {1, ZS_EXACT_SLICES_MAX, 0, 0, 1, "an integer from 1 to 64"};
const num_rule R_BIG_INT = {0, INTEGRAL_MAX, 0, 0, 1, "a non-negative integer"};
static const num_rule R_SCALE_POWER = {0, MAX_SCALE_POWER, 0, 0, 1,
                                       "an integer from 0 to " XSTR(MAX_SCALE_POWER)};
static const num_rule R_MLP_LAYERS = {0, ZS_MLP_MAX_HIDDEN, 0, 0, 1,
                                      "an integer from 0 to " XSTR(ZS_MLP_MAX_HIDDEN)};
static const num_rule R_STAGE = {0, 3, 0, 0, 1, "0, 1, 2 or 3"};
const num_rule R_ANY_INT = {-INTEGRAL_MAX, INTEGRAL_MAX, 0, 0, 1, "an integer"};
const num_rule R_POS = {0, FLT_MAX, 1, 0, 0, "a number > 0"};
const num_rule R_NONNEG = {0, FLT_MAX, 0, 0, 0, "a number >= 0"};
const num_rule R_FRACTION = {0, 1, 0, 0, 0, "a number from 0 to 1"};
const num_rule R_BETA = {0, 1, 0, 1, 0, "a number >= 0 and < 1"};
const num_rule R_NONNEG_INT = {0, INT_MAX, 0, 0, 1, "a non-negative integer"};
/* A count that may be as large as DeepSpeed takes (a Python int); values
 * above INT_MAX mean "never" in practice and are stored as INT_MAX. */
const num_rule R_COUNT = {1, INTEGRAL_MAX, 0, 0, 1, "a positive integer"};

/* ------------------------------------------------------------------------ */
/* fp16, bf16, zero_optimization, zerosim                                    */

/* fp16.enabled */
static int fp16_enabled(loader *ld, const char *path, const json_t *v)
{
    return zs_ds_read_bool(ld, path, v, &ld->fp16_enabled);
}

/* bf16.enabled */
static int bf16_enabled(loader *ld, const char *path, const json_t *v)
{
    return zs_ds_read_bool(ld, path, v, &ld->bf16_enabled);
}

/* zero_optimization.overlap_comm: true or false. */
static int zero_overlap_comm(loader *ld, const char *path, const json_t *v)
{
    int on = 0;
    ZS_TRY(zs_ds_read_bool(ld, path, v, &on));
    ld->c.overlap_comm = on != 0;
    return 0;
}

/* zero_optimization.stage, with the message users look for. */
static int zero_stage(loader *ld, const char *path, const json_t *v)
{
    double d;
    long long ll;
    if (!json_is_number(v) || zs_ds_read_number(ld, path, v, &R_STAGE, &d, &ll)) {
        char got[64];
        zs_ds_describe(v, got, sizeof got);
        return zs_config_fail("%s: %s must be 0, 1, 2 or 3, got %s", ld->name, path, got);
    }
    ld->c.stage = (int)ll;
    return 0;
}

/* zero_optimization.offload_optimizer / offload_param: null, or an object
 * (DeepSpeed's DeepSpeedZeroOffloadOptimizerConfig and ..ParamConfig). */
/* The keys of an offload section that tune the transfers, not what moves. */
static const char *const offload_noeffect_keys[] = {
    "pin_memory", "buffer_count", "buffer_size", "max_in_cpu", "fast_init", "pipeline_read",
    "pipeline_write", "pipeline",
};
static int offload_noeffect(const char *key)
{
    for (size_t i = 0; i < sizeof offload_noeffect_keys / sizeof offload_noeffect_keys[0]; i++)
        if (!strcmp(key, offload_noeffect_keys[i]))
            return 1;
    return 0;
}

static int zero_offload(loader *ld, const char *path, const json_t *v)
{
    int param = strstr(path, "offload_param") != NULL;
    zs_offload *dst = param ? &ld->c.offload_param : &ld->c.offload_optimizer;
    if (json_is_null(v)) {
        *dst = ZS_OFFLOAD_NONE;
        return 0;
    }
    if (!json_is_object(v))
        return zs_config_fail("%s: %s must be an object such as {\"device\": \"cpu\"}, or null",
                              ld->name, path);

    const char *key;
    json_t *x;
    char sub[512];
    json_object_foreach((json_t *)v, key, x) {
        snprintf(sub, sizeof sub, "%s.%s", path, key);
        if (!strcmp(key, "device")) {
            if (json_is_null(x)) {
                *dst = ZS_OFFLOAD_NONE;
            } else if (!json_is_string(x) || zs_offload_parse(json_string_value(x), dst)) {
                return zs_config_fail("%s: %s must be \"none\", \"cpu\" or \"nvme\"", ld->name,
                                      sub);
            }
        } else if (!strcmp(key, "nvme_path")) {
            if (json_is_null(x))
                continue;
            if (!json_is_string(x) || strlen(json_string_value(x)) >= sizeof ld->c.nvme_path)
                return zs_config_fail("%s: %s must be a path (a string)", ld->name, sub);
            snprintf(ld->c.nvme_path, sizeof ld->c.nvme_path, "%s", json_string_value(x));
        } else if (!strcmp(key, "ratio")) {
            if (!json_is_number(x) || json_number_value(x) != 1.0)
                return zs_config_fail("%s: %s below 1 (partial offload, ZeRO-Offload++'s "
                                      "Twin-Flow) is a DeepSpeed feature zerosim does not model "
                                      "yet: remove it or set it to 1", ld->name, sub);
        } else if (offload_noeffect(key)) {
            zs_ds_note_noeffect(ld, sub); /* tuning of the transfers, not what moves */
        } else {
            return zs_config_fail("%s: unknown key %s (offload sections take device, nvme_path, "
                                  "pin_memory, buffer_count, buffer_size, max_in_cpu, fast_init, "
                                  "ratio, pipeline_read, pipeline_write)", ld->name, sub);
        }
    }
    return 0;
}

/* cpu_offload / cpu_offload_param: the deprecated booleans for device cpu. */
static int zero_cpu_offload(loader *ld, const char *path, const json_t *v)
{
    if (!json_is_boolean(v))
        return zs_config_fail("%s: %s must be true or false", ld->name, path);
    int param = strstr(path, "cpu_offload_param") != NULL;
    if (json_is_true(v))
        *(param ? &ld->c.offload_param : &ld->c.offload_optimizer) = ZS_OFFLOAD_CPU;
    return 0;
}

static const field fp16_fields[] = {
    A_FUNC("enabled", fp16_enabled, ZS_AUTO_FP16),
    F_FLOAT("loss_scale", static_loss_scale, R_NONNEG),
    F_INT("initial_scale_power", initial_scale_power, R_SCALE_POWER),
    F_COUNT("loss_scale_window", loss_scale_window),
    F_COUNT("hysteresis", hysteresis),
    F_FLOAT("min_loss_scale", min_loss_scale, R_POS),
    F_UNMOD("consecutive_hysteresis", OFF_FALSE,
            "hysteresis restored after every step without overflow", "set it to false"),
    /* auto_cast casts floating-point inputs to fp16 in the engine instead of
     * the user's script: the GPT's inputs are token ids (not cast), and
     * zerosim's fp16 keeps parameters and gradients in fp16 and computes
     * activations in fp32 either way, so nothing it models changes */
    F_NONE("auto_cast", JT_BOOL),
    F_UNMOD("fp16_master_weights_and_grads", OFF_FALSE, "fp16 master weights",
            "set it to false (zerosim keeps fp32 master weights)"),
};
static const field bf16_fields[] = {
    A_FUNC("enabled", bf16_enabled, ZS_AUTO_BF16),
    F_NONE("immediate_grad_update", JT_BOOL),
    F_NONE("check_grad_overflow", JT_BOOL),
    /* fp16's loss-scaling keys, which DeepSpeed ignores under bf16 (its own
     * tests write them) */
    F_NONE("loss_scale", JT_NUMBER),
    F_NONE("initial_scale_power", JT_NUMBER),
    F_NONE("loss_scale_window", JT_NUMBER),
    F_NONE("hysteresis", JT_NUMBER),
    F_NONE("consecutive_hysteresis", JT_BOOL),
    F_NONE("min_loss_scale", JT_NUMBER),
};

#define ZEROPP "remove it, or turn it off (ZeRO++'s qwZ, hpZ and qgZ are modelled: " \
               "zero_quantized_weights, zero_hpz_partition_size, zero_quantized_gradients)"
/* zero_optimization: DeepSpeed's DeepSpeedZeroConfig, with its aliases
 * (stage3_prefetch_bucket_size = prefetch_bucket_size, ...). */
/* ZeRO++ qwZ: zero_optimization.zero_quantized_weights. */
static int zero_quantized_weights(loader *ld, const char *path, const json_t *v)
{
    return zs_ds_read_bool(ld, path, v, &ld->c.quantized_weights);
}

/* ZeRO++ qgZ: zero_optimization.zero_quantized_gradients. */
static int zero_quantized_gradients(loader *ld, const char *path, const json_t *v)
{
    return zs_ds_read_bool(ld, path, v, &ld->c.quantized_gradients);
}

static const field zero_fields[] = {
    F_FUNC("stage", zero_stage),
    A_SIZE("reduce_bucket_size", reduce_bucket_size, ZS_AUTO_REDUCE_BUCKET),
    F_SIZE("allgather_bucket_size", allgather_bucket_size),
    F_SIZE("stage3_max_live_parameters", stage3_max_live_parameters),
    F_SIZE("max_live_parameters", stage3_max_live_parameters),
    A_SIZE("stage3_prefetch_bucket_size", stage3_prefetch_bucket_size, ZS_AUTO_PREFETCH),
    A_SIZE("prefetch_bucket_size", stage3_prefetch_bucket_size, ZS_AUTO_PREFETCH),
    /* timing, memory layout and saving: no effect on what zerosim computes,
     * holds or sends */
    F_FUNC("overlap_comm", zero_overlap_comm),
    F_NONE("contiguous_gradients", JT_BOOL),
    F_NONE("load_from_fp32_weights", JT_BOOL),
    F_NONE("elastic_checkpoint", JT_BOOL),
    F_NONE("ignore_unused_parameters", JT_BOOL),
    F_NONE("round_robin_gradients", JT_BOOL),
    F_NONE("use_multi_rank_bucket_allreduce", JT_BOOL),
    F_NONE("memory_efficient_linear", JT_BOOL),
    F_NONE("override_module_apply", JT_BOOL),
    F_NONE("pipeline_loading_checkpoint", JT_BOOL),
    F_NONE("log_trace_cache_warnings", JT_BOOL),
    F_NONE("grad_hooks", JT_BOOL),
    F_NONE("cpu_offload_use_pin_memory", JT_BOOL),
    F_NONE("stage3_gather_16bit_weights_on_model_save", JT_BOOL),
    F_NONE("gather_16bit_weights_on_model_save", JT_BOOL),
    F_NONE("stage3_gather_fp16_weights_on_model_save", JT_BOOL),
    /* stage-3 tuning zerosim does not model: it partitions every parameter
     * (persistence threshold 0), keeps no parameter for reuse (reuse
     * distance 0), runs the optimizer over the whole shard (one sub-group)
     * and makes one unit per block */
    F_NONE("sub_group_size", JT_NUMBER),
    {.key = "stage3_param_persistence_threshold", .kind = FK_NOEFFECT, .type = JT_NUMBER,
     .autobit = ZS_AUTO_PERSISTENCE},
    {.key = "param_persistence_threshold", .kind = FK_NOEFFECT, .type = JT_NUMBER,
     .autobit = ZS_AUTO_PERSISTENCE},
    F_NONE("stage3_model_persistence_threshold", JT_NUMBER),
    F_NONE("model_persistence_threshold", JT_NUMBER),
    F_NONE("stage3_max_reuse_distance", JT_NUMBER),
    F_NONE("max_reuse_distance", JT_NUMBER),
    F_NONE("stage3_module_granularity_threshold", JT_NUMBER),
    F_NONE("module_granularity_threshold", JT_NUMBER),
    /* real features zerosim does not model yet */
    F_UNMOD("reduce_scatter", OFF_TRUE, "reducing gradients with all-reduce instead of "
            "reduce-scatter", "set it to true or remove it"),
    F_UNMOD("allgather_partitions", OFF_TRUE, "gathering parameters by broadcasts instead of "
            "all-gather", "set it to true or remove it"),
    F_UNMOD("stage3_use_all_reduce_for_fetch_params", OFF_FALSE,
            "fetching stage-3 parameters with all-reduce", "set it to false"),
    F_UNMOD("use_all_reduce_for_fetch_params", OFF_FALSE,
            "fetching stage-3 parameters with all-reduce", "set it to false"),
    F_FUNC("offload_optimizer", zero_offload),
    F_FUNC("offload_param", zero_offload),
    F_FUNC("cpu_offload", zero_cpu_offload),
    F_FUNC("cpu_offload_param", zero_cpu_offload),
    F_INT("zero_hpz_partition_size", hpz_partition_size, R_POS_INT),
    F_FUNC("zero_quantized_weights", zero_quantized_weights),
    F_UNMOD("zero_quantized_nontrainable_weights", OFF_FALSE, "ZeRO++ quantized weights", ZEROPP),
    F_FUNC("zero_quantized_gradients", zero_quantized_gradients),
    F_UNMOD("zeropp_loco_param", OFF_NULL, "ZeRO++ LoCo error feedback", ZEROPP),
    F_UNMOD("mics_shard_size", OFF_NEG, "MiCS sharding", "remove it"),
    F_UNMOD("mics_hierarchical_params_gather", OFF_FALSE, "MiCS hierarchical gathers",
            "set it to false"),
    F_UNMOD("legacy_stage1", OFF_FALSE, "the legacy stage-1 implementation", "set it to false"),
};
/* zerosim.deterministic: order-independent (fixed-point) gradient reduction. */
static int zerosim_deterministic(loader *ld, const char *path, const json_t *v)
{
    return zs_ds_read_bool(ld, path, v, &ld->c.deterministic);
}

/* activation_checkpointing: the section turns checkpointing on (about
 * sqrt(L) segments unless number_checkpoints says how many). */
static int ckpt_number(loader *ld, const char *path, const json_t *v)
{
    double n;
    long long ll;
    ZS_TRY(zs_ds_read_number(ld, path, v, &R_POS_INT, &n, &ll));
    ld->c.checkpoint_mode = ZS_CKPT_SEGMENTS;
    ld->c.checkpoint_value = (int)ll;
    return 0;
}

/* activation_checkpointing.partition_activations: shards the checkpoints
 * over the tensor-parallel group; with --tp 1 there is nothing to shard and
 * it has no effect (finalize takes it off the list of keys of no effect
 * when it shards: --tp > 1 with checkpointing). */
static int ckpt_partition(loader *ld, const char *path, const json_t *v)
{
    ZS_TRY(zs_ds_read_bool(ld, path, v, &ld->c.partition_activations));
    zs_ds_note_noeffect(ld, path);
    return 0;
}

static const field ckpt_fields[] = {
    F_FUNC("number_checkpoints", ckpt_number),
    F_FUNC("partition_activations", ckpt_partition),
    F_UNMOD("cpu_checkpointing", OFF_FALSE, "keeping checkpointed activations in host memory",
            "set it to false"),
    F_NONE("contiguous_memory_optimization", JT_BOOL),
    F_NONE("synchronize_checkpoint_boundary", JT_BOOL),
    F_NONE("profile", JT_BOOL),
};
static const field_table ckpt_table = TABLE(ckpt_fields);

static int load_ckpt(loader *ld, const char *path, const json_t *v)
{
    if (json_is_object(v) && ld->c.checkpoint_mode == ZS_CKPT_OFF)
        ld->c.checkpoint_mode = ZS_CKPT_SQRT;
    return zs_ds_apply_object(ld, path, v, &ckpt_table, "");
}

/* gradient_compression.method */
static int comp_method(loader *ld, const char *path, const json_t *v)
{
    const char *m = "";
    ZS_TRY(zs_ds_read_string(ld, path, v, "\"none\", \"topk\", \"int8\" or \"sign\"", &m));
    double frac = ld->c.compression.topk_fraction > 0 ? ld->c.compression.topk_fraction : 0.01;
    if (!strcmp(m, "topk"))
        ld->c.compression = (zs_comp_spec){.kind = ZS_COMP_TOPK, .topk_fraction = frac};
    else if (!strcmp(m, "int8"))
        ld->c.compression = (zs_comp_spec){.kind = ZS_COMP_INT8, .topk_fraction = frac};
    else if (!strcmp(m, "sign"))
        ld->c.compression = (zs_comp_spec){.kind = ZS_COMP_SIGN, .topk_fraction = frac};
    else if (!strcmp(m, "none"))
        ld->c.compression = (zs_comp_spec){.kind = ZS_COMP_NONE, .topk_fraction = frac};
    else
        return zs_ds_bad_value(ld, path, v, "\"none\", \"topk\", \"int8\" or \"sign\"");
    return 0;
}

static int comp_fraction(loader *ld, const char *path, const json_t *v)
{
    double f;
    long long ll;
    static const num_rule r = {0, 1, 1, 0, 0, "a number > 0 and <= 1"};
    ZS_TRY(zs_ds_read_number(ld, path, v, &r, &f, &ll));
    ld->c.compression.topk_fraction = f;
    return 0;
}

static int comp_ef(loader *ld, const char *path, const json_t *v)
{
    return zs_ds_read_bool(ld, path, v, &ld->c.error_feedback);
}

static const field comp_fields[] = {
    F_FUNC("method", comp_method),
    F_FUNC("topk_fraction", comp_fraction),
    F_FUNC("error_feedback", comp_ef),
    F_INT("warmup_steps", compression_warmup, R_NONNEG_INT),
};
static const field_table comp_table = TABLE(comp_fields);

/* zerosim.sequence_parallel: Korthikanti et al.'s sequence parallelism. */
static int zerosim_hierarchical(loader *ld, const char *path, const json_t *v)
{
    return zs_ds_read_bool(ld, path, v, &ld->c.hierarchical);
}

static int zerosim_sequence_parallel(loader *ld, const char *path, const json_t *v)
{
    return zs_ds_read_bool(ld, path, v, &ld->c.sequence_parallel);
}

/* zerosim.qat: "none", "int8" or "nf4". */
static int zerosim_qat(loader *ld, const char *path, const json_t *v)
{
    const char *s = NULL;
    zs_quant_format f;
    ZS_TRY(zs_ds_read_string(ld, path, v, "\"none\", \"int8\" or \"nf4\"", &s));
    if (zs_quant_format_parse(s, &f) || f == ZS_QUANT_INT8_ZP)
        return zs_ds_bad_value(ld, path, v, "\"none\", \"int8\" or \"nf4\"");
    ld->c.qat = (int)f;
    return 0;
}

/* zerosim.grad_reduce: "micro-batch" or "step". */
static int zerosim_grad_reduce(loader *ld, const char *path, const json_t *v)
{
    const char *s = NULL;
    ZS_TRY(zs_ds_read_string(ld, path, v, "\"micro-batch\" or \"step\"", &s));
    if (zs_grad_reduce_parse(s, &ld->c.grad_reduce))
        return zs_ds_bad_value(ld, path, v, "\"micro-batch\" or \"step\"");
    return 0;
}

/* zerosim.collective_timeout: seconds, > 0. */
static int zerosim_collective_timeout(loader *ld, const char *path, const json_t *v)
{
    long long ll;
    return zs_ds_read_number(ld, path, v, &R_POS, &ld->c.collective_timeout, &ll);
}

static const field zerosim_fields[] = {
    F_INT("steps", steps, R_POS_INT),
    F_FUNC("deterministic", zerosim_deterministic),
    F_INT("exact_slices", exact_slices, R_EXACT_SLICES),
    F_FUNC("sequence_parallel", zerosim_sequence_parallel),
    F_FUNC("hierarchical_collectives", zerosim_hierarchical),
    F_FUNC("grad_reduce", zerosim_grad_reduce),
    F_FUNC("collective_timeout", zerosim_collective_timeout),
    F_FUNC("qat", zerosim_qat),
};
/* moe (a zerosim section, keys named after the arguments of DeepSpeed's
 * deepspeed.moe.layer.MoE and Megatron-DeepSpeed's options): num_experts,
 * ep_size, k, capacity_factor, min_capacity, expert_interval, loss_coeff. */
static int moe_capacity_factor(loader *ld, const char *path, const json_t *v)
{
    long long ll;
    return zs_ds_read_number(ld, path, v, &R_POS, &ld->c.model.moe_capacity_factor, &ll);
}

static int moe_loss_coeff(loader *ld, const char *path, const json_t *v)
{
    long long ll;
    return zs_ds_read_number(ld, path, v, &R_NONNEG, &ld->c.model.moe_aux_coeff, &ll);
}

/* moe.ep_layout (zerosim's): "auto" or "deepspeed". */
static int moe_ep_layout(loader *ld, const char *path, const json_t *v)
{
    const char *s = NULL;
    ZS_TRY(zs_ds_read_string(ld, path, v, "\"auto\" or \"deepspeed\"", &s));
    if (zs_ep_layout_parse(s, &ld->c.ep_layout))
        return zs_config_fail("%s: \"%s\" must be \"auto\" or \"deepspeed\", got \"%.64s\"",
                              ld->name, path, s);
    return 0;
}

static const field moe_fields[] = {
    F_INT("num_experts", model.moe_experts, R_NONNEG_INT),
    F_INT("ep_size", ep, R_POS_INT),
    F_FUNC("ep_layout", moe_ep_layout),
    F_INT("k", model.moe_top_k, R_POS_INT),
    F_FUNC("capacity_factor", moe_capacity_factor),
    F_INT("min_capacity", model.moe_min_capacity, R_NONNEG_INT),
    F_INT("expert_interval", model.moe_every, R_POS_INT),
    F_FUNC("loss_coeff", moe_loss_coeff),
};
static const field_table moe_table = TABLE(moe_fields);

/* DeepSpeed's tensor_parallel section: the tensor-parallel size. */
static const field tp_fields[] = {
    F_INT("autotp_size", tp, R_POS_INT),
};
static const field_table tp_table = TABLE(tp_fields);
static const field_table fp16_table = TABLE(fp16_fields);
static const field_table bf16_table = TABLE(bf16_fields);
static const field_table zero_table = TABLE(zero_fields);
static const field_table zerosim_table = TABLE(zerosim_fields);

/* ------------------------------------------------------------------------ */
/* model (zerosim extension)                                                 */

/* model.layers of an MLP: the number of hidden layers. */
static int mlp_layers(loader *ld, const char *path, const json_t *v)
{
    double d;
    long long ll;
    ZS_TRY(zs_ds_read_number(ld, path, v, &R_MLP_LAYERS, &d, &ll));
    ld->c.model.n_hidden = (int)ll;
    return 0;
}

/* model.hidden of an MLP: the width of every hidden layer. */
static int mlp_hidden(loader *ld, const char *path, const json_t *v)
{
    double d;
    long long ll;
    ZS_TRY(zs_ds_read_number(ld, path, v, &R_POS_INT, &d, &ll));
    for (int i = 0; i < ZS_MLP_MAX_HIDDEN; i++)
        ld->c.model.widths[i] = (int)ll;
    return 0;
}

/* model.widths: one positive width per hidden layer. */
static int mlp_widths(loader *ld, const char *path, const json_t *v)
{
    if (!json_is_array(v) || json_array_size(v) > ZS_MLP_MAX_HIDDEN)
        return zs_ds_bad_value(ld, path, v,
                               "an array of at most " XSTR(ZS_MLP_MAX_HIDDEN) " positive integers");
    int n = (int)json_array_size(v);
    for (int i = 0; i < n; i++) {
        char sub[128];
        double d;
        long long ll;
        snprintf(sub, sizeof sub, "%s[%d]", path, i);
        ZS_TRY(zs_ds_read_number(ld, sub, json_array_get(v, (size_t)i), &R_POS_INT, &d, &ll));
        ld->c.model.widths[i] = (int)ll;
    }
    ld->c.model.n_hidden = n;
    return 0;
}

/* model.activation: "relu" or "gelu". */
static int mlp_activation(loader *ld, const char *path, const json_t *v)
{
    const char *s = NULL;
    ZS_TRY(zs_ds_read_string(ld, path, v, "\"relu\" or \"gelu\"", &s));
    if (zs_ds_equal_nocase(s, "relu"))
        ld->c.model.act = ZS_ACT_RELU;
    else if (zs_ds_equal_nocase(s, "gelu"))
        ld->c.model.act = ZS_ACT_GELU;
    else
        return zs_config_fail("%s: \"%s\" must be \"relu\" or \"gelu\", got \"%.64s\"", ld->name,
                              path, s);
    return 0;
}

static const field gpt_fields[] = {
    F_FUNC("type", zs_ds_skip),
    F_INT("layers", model.n_layer, R_POS_INT),
    F_INT("hidden", model.n_embd, R_POS_INT),
    F_INT("heads", model.n_head, R_POS_INT),
    F_INT("seq", model.seq_len, R_POS_INT),
    F_INT("vocab", model.vocab, R_POS_INT),
};
static const field mlp_fields[] = {
    F_FUNC("type", zs_ds_skip),
    F_FUNC("layers", mlp_layers),
    F_FUNC("hidden", mlp_hidden),
    F_INT("input_dim", model.input_dim, R_POS_INT),
    F_INT("classes", model.n_classes, R_POS_INT),
    F_FUNC("widths", mlp_widths),
    F_FUNC("activation", mlp_activation),
};
/* The Llama family's reals and flags (model type "llama"). */
static int llama_rope_theta(loader *ld, const char *path, const json_t *v)
{
    long long ll;
    return zs_ds_read_number(ld, path, v, &R_POS, &ld->c.model.rope_theta, &ll);
}

static int llama_norm_eps(loader *ld, const char *path, const json_t *v)
{
    long long ll;
    return zs_ds_read_number(ld, path, v, &R_POS, &ld->c.model.norm_eps, &ll);
}

static int llama_tie(loader *ld, const char *path, const json_t *v)
{
    return zs_ds_read_bool(ld, path, v, &ld->c.model.tie_embeddings);
}

static int llama_qkv_bias(loader *ld, const char *path, const json_t *v)
{
    return zs_ds_read_bool(ld, path, v, &ld->c.model.qkv_bias);
}

static const field llama_fields[] = {
    F_FUNC("type", zs_ds_skip),
    F_INT("layers", model.n_layer, R_POS_INT),
    F_INT("hidden", model.n_embd, R_POS_INT),
    F_INT("heads", model.n_head, R_POS_INT),
    F_INT("seq", model.seq_len, R_POS_INT),
    F_INT("vocab", model.vocab, R_POS_INT),
    F_INT("ffn_hidden", model.ffn_hidden, R_POS_INT),
    F_INT("kv_heads", model.n_kv_head, R_POS_INT),
    F_FUNC("rope_theta", llama_rope_theta),
    F_FUNC("norm_eps", llama_norm_eps),
    F_FUNC("tie_embeddings", llama_tie),
    F_FUNC("qkv_bias", llama_qkv_bias),
};
static const field_table gpt_table = TABLE(gpt_fields);
static const field_table mlp_table = TABLE(mlp_fields);
static const field_table llama_table = TABLE(llama_fields);

/* model: "type" picks the kind (default: the current one) and with it the
 * keys that apply. */
static int load_model(loader *ld, const char *path, const json_t *v)
{
    if (!json_is_object(v))
        return zs_ds_bad_value(ld, path, v, "an object");
    const json_t *t = json_object_get(v, "type");
    if (t) {
        char sub[128];
        const char *s = NULL;
        zs_ds_join(sub, sizeof sub, path, "type");
        ZS_TRY(zs_ds_read_string(ld, sub, t, "\"gpt\", \"llama\" or \"mlp\"", &s));
        if (zs_ds_equal_nocase(s, "gpt"))
            ld->c.model.kind = ZS_MODEL_GPT;
        else if (zs_ds_equal_nocase(s, "mlp"))
            ld->c.model.kind = ZS_MODEL_MLP;
        else if (zs_ds_equal_nocase(s, "llama"))
            ld->c.model.kind = ZS_MODEL_LLAMA;
        else
            return zs_config_fail("%s: \"%s\" must be \"gpt\", \"llama\" or \"mlp\", got "
                                  "\"%.64s\"", ld->name, sub, s);
    }
    if (ld->c.model.kind == ZS_MODEL_LLAMA)
        return zs_ds_apply_object(ld, path, v, &llama_table, " for model type \"llama\"");
    if (ld->c.model.kind == ZS_MODEL_GPT)
        return zs_ds_apply_object(ld, path, v, &gpt_table, " for model type \"gpt\"");
    if (json_object_get(v, "widths") &&
        (json_object_get(v, "layers") || json_object_get(v, "hidden")))
        return zs_config_fail("%s: \"%s.widths\" and \"%s.layers\"/\"%s.hidden\" both describe "
                              "the hidden layers of the MLP: give one or the other", ld->name, path,
                              path, path);
    return zs_ds_apply_object(ld, path, v, &mlp_table, " for model type \"mlp\"");
}

/* ------------------------------------------------------------------------ */
/* The file                                                                  */

/* prescale_gradients: divide by the data-parallel size before the sum. */
static int top_prescale(loader *ld, const char *path, const json_t *v)
{
    int on = 1;
    ZS_TRY(zs_ds_read_bool(ld, path, v, &on));
    ld->c.grad_scaling = on ? ZS_GRAD_PRESCALE : ZS_GRAD_POSTSCALE;
    return 0;
}

/* sequence_parallel_size: DeepSpeed-Ulysses' group (arXiv 2309.14509), the
 * context-parallel axis with the all-to-all attention (--cp U
 * --cp-attention ulysses); 1 leaves the mesh as it is. */
static int top_sequence_parallel_size(loader *ld, const char *path, const json_t *v)
{
    double n;
    long long ll;
    ZS_TRY(zs_ds_read_number(ld, path, v, &R_POS_INT, &n, &ll));
    if (ll > ZS_BOUND_CP_MAX)
        return zs_config_fail("%s: %s is %lld, more than the %d ranks a sequence-parallel group "
                              "may have here: use %d or less", ld->name, path, ll,
                              ZS_BOUND_CP_MAX, ZS_BOUND_CP_MAX);
    if (ll > 1) {
        ld->c.cp = (int)ll;
        ld->c.cp_attention = ZS_CP_ULYSSES;
    }
    return 0;
}

/* gradient_predivide_factor: divide by f before the sum, by N/f after. */
static int top_predivide(loader *ld, const char *path, const json_t *v)
{
    long long ll;
    ZS_TRY(zs_ds_read_number(ld, path, v, &R_POS, &ld->c.grad_predivide, &ll));
    if (ld->c.grad_scaling == ZS_GRAD_IN_LOSS)
        ld->c.grad_scaling = ZS_GRAD_POSTSCALE;
    return 0;
}

/* A data type name ("fp32", "fp16", "bf16" and DeepSpeed's spellings), or
 * null; *out = -1 for null. */
static int read_dtype(loader *ld, const char *path, const json_t *v, int *out)
{
    static const struct { const char *name; zs_dtype t; } names[] = {
        {"fp32", ZS_DTYPE_F32}, {"float32", ZS_DTYPE_F32}, {"float", ZS_DTYPE_F32},
        {"fp16", ZS_DTYPE_F16}, {"float16", ZS_DTYPE_F16}, {"half", ZS_DTYPE_F16},
        {"bf16", ZS_DTYPE_BF16}, {"bfloat16", ZS_DTYPE_BF16},
    };
    static const char expect[] = "\"fp32\", \"fp16\", \"bf16\" or null";
    const char *s = NULL;
    if (json_is_null(v)) {
        *out = -1;
        return 0;
    }
    ZS_TRY(zs_ds_read_string(ld, path, v, expect, &s));
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (zs_ds_equal_nocase(s, names[i].name)) {
            *out = (int)names[i].t;
            return 0;
        }
    return zs_ds_bad_value(ld, path, v, expect);
}

/* communication_data_type: finalize checks it names the working precision. */
static int top_comm_dtype(loader *ld, const char *path, const json_t *v)
{
    return read_dtype(ld, path, v, &ld->c.comm_dtype);
}

/* data_types.grad_accum_dtype: the same check. */
static int grad_accum_dtype(loader *ld, const char *path, const json_t *v)
{
    return read_dtype(ld, path, v, &ld->c.grad_accum_dtype);
}
/* compression_training (DeepSpeed Compression): each section on its own,
 * accepted while disabled, refused when enabled with what zerosim has
 * instead. zerosim's QAT (--qat int8|nf4: absmax per tensor over 127
 * levels, or NF4 blocks of 64) is not DeepSpeed's quantizer (bit schedule
 * from start_bits to target_bits, quantize_groups, symmetric/asymmetric,
 * stochastic rounding), and its pruning is Deep Compression after
 * training (zerosim compress), not a mask during training: neither is
 * mapped silently. */
#define COMP_PRUNE_INSTEAD "remove it (zerosim prunes single weights after training: zerosim " \
                           "compress --sparsity S, docs/quantization.md)"
static const field comp_training_fields[] = {
    F_UNMOD("weight_quantization", OFF_DISABLED,
            "DeepSpeed's weight quantization during training (its bit schedule, groups and "
            "rounding)",
            "remove it, and use zerosim's QAT: --qat int8|nf4, or \"zerosim\": {\"qat\": "
            "\"int8\"} (docs/quantization.md)"),
    F_UNMOD("activation_quantization", OFF_DISABLED, "activation quantization",
            "remove it (zerosim's QAT quantizes the linear weights only)"),
    F_UNMOD("sparse_pruning", OFF_DISABLED, "sparse pruning during training",
            COMP_PRUNE_INSTEAD),
    F_UNMOD("row_pruning", OFF_DISABLED, "row pruning", COMP_PRUNE_INSTEAD),
    F_UNMOD("head_pruning", OFF_DISABLED, "attention head pruning", COMP_PRUNE_INSTEAD),
    F_UNMOD("channel_pruning", OFF_DISABLED, "channel pruning", COMP_PRUNE_INSTEAD),
    F_UNMOD("layer_reduction", OFF_DISABLED, "layer reduction (a student with fewer layers)",
            "remove it, and train the smaller model itself (--layers)"),
};
static const field_table comp_training_table = TABLE(comp_training_fields);

static const field data_types_fields[] = {
    F_FUNC("grad_accum_dtype", grad_accum_dtype),
};
static const field_table data_types_table = TABLE(data_types_fields);

#define OFF_SECTION "remove it, or set \"enabled\": false"
static const field top_fields[] = {
    A_INT("train_batch_size", train_batch_size, R_POS_INT, ZS_AUTO_TRAIN_BATCH),
    A_INT("train_micro_batch_size_per_gpu", micro_batch, R_POS_INT, ZS_AUTO_MICRO_BATCH),
    A_INT("gradient_accumulation_steps", grad_accum, R_POS_INT, ZS_AUTO_GRAD_ACCUM),
    F_COUNT("steps_per_print", steps_per_print),
    A_FLOAT("gradient_clipping", grad_clip, R_NONNEG, ZS_AUTO_GRAD_CLIP),
    F_FUNC("prescale_gradients", top_prescale),
    F_FUNC("gradient_predivide_factor", top_predivide),
    F_FUNC("communication_data_type", top_comm_dtype),
    F_FUNC("sequence_parallel_size", top_sequence_parallel_size),
    F_SECTION("data_types", data_types_table),
    F_U64("seed", seed),
    F_FUNC("optimizer", zs_ds_load_optimizer),
    F_FUNC("scheduler", zs_ds_load_scheduler),
    F_SECTION("fp16", fp16_table),
    F_SECTION("bf16", bf16_table),
    F_SECTION("bfloat16", bf16_table), /* DeepSpeed's older name */
    F_SECTION("zero_optimization", zero_table),
    F_FUNC("model", load_model),
    F_SECTION("zerosim", zerosim_table),
    F_FUNC("activation_checkpointing", load_ckpt),
    F_SECTION("gradient_compression", comp_table),
    F_SECTION("tensor_parallel", tp_table),
    F_SECTION("moe", moe_table),
    /* logging, monitoring, profiling, tuning, compilation, I/O tuning and
     * checkpoint-saving options: nothing a simulator computes depends on them */
    F_NONE("wall_clock_breakdown", JT_BOOL),
    F_NONE("memory_breakdown", JT_BOOL),
    F_NONE("dump_state", JT_BOOL),
    F_NONE("zero_allow_untested_optimizer", JT_BOOL),
    F_NONE("zero_force_ds_cpu_optimizer", JT_BOOL),
    F_NONE("disable_allgather", JT_BOOL),
    F_NONE("dataloader_drop_last", JT_BOOL),
    F_NONE("graph_harvesting", JT_BOOL),
    F_NONE("use_data_before_expert_parallelism", JT_BOOL),
    F_NONE("seq_parallel_communication_data_type", JT_STRING),
    F_NONE("vocabulary_size", JT_NUMBER),
    F_NONE("tensorboard", JT_OBJECT),
    F_NONE("wandb", JT_OBJECT),
    F_NONE("comet", JT_OBJECT),
    F_NONE("csv_monitor", JT_OBJECT),
    F_NONE("monitor_config", JT_OBJECT),
    F_NONE("flops_profiler", JT_OBJECT),
    F_NONE("autotuning", JT_OBJECT),
    F_NONE("comms_logger", JT_OBJECT),
    F_NONE("comms_config", JT_OBJECT),
    F_NONE("compile", JT_OBJECT),
    F_NONE("aio", JT_OBJECT),
    F_NONE("checkpoint", JT_OBJECT),
    F_NONE("nebula", JT_OBJECT),
    F_NONE("timers", JT_OBJECT),
    /* real features zerosim does not model yet */
    F_UNMOD("sparse_gradients", OFF_FALSE, "sparse embedding gradients", "set it to false"),
    F_UNMOD("amp", OFF_DISABLED, "NVIDIA Apex AMP", "use \"fp16\" or \"bf16\" instead"),
    F_UNMOD("torch_autocast", OFF_DISABLED, "torch.autocast mixed precision",
            "use \"fp16\" or \"bf16\" instead"),
    F_UNMOD("sparse_attention", OFF_NULL, "block-sparse attention",
            "remove it (zerosim's GPT uses dense causal attention)"),
    F_UNMOD("elasticity", OFF_DISABLED, "elastic training", OFF_SECTION),
    F_UNMOD("eigenvalue", OFF_DISABLED, "eigenvalue computation for quantization", OFF_SECTION),
    F_UNMOD("progressive_layer_drop", OFF_DISABLED, "progressive layer dropping", OFF_SECTION),
    F_UNMOD("curriculum_learning", OFF_DISABLED, "curriculum learning", OFF_SECTION),
    F_UNMOD("data_efficiency", OFF_DISABLED, "data sampling and routing", OFF_SECTION),
    F_SECTION("compression_training", comp_training_table),
    F_UNMOD("quantize_training", OFF_DISABLED, "MoQ quantized training", OFF_SECTION),
    F_UNMOD("weight_quantization", OFF_DISABLED, "weight quantization", OFF_SECTION),
    F_UNMOD("hybrid_engine", OFF_DISABLED, "the RLHF hybrid engine", OFF_SECTION),
    F_UNMOD("pipeline", OFF_NULL, "DeepSpeed's pipeline engine settings",
            "remove it (zerosim's pipeline parallelism is --pp and --pp-schedule)"),
};
const field_table zs_ds_top_table = TABLE(top_fields);

/* One line per key the loader knows, for docs/configuration.md: its path, its
 * kind, and for an unmodelled feature what it is and what to do instead. */
static void print_table(FILE *f, const char *path, const field_table *t)
{
    for (size_t i = 0; i < t->n; i++) {
        const field *x = &t->f[i];
        char p[256];
        zs_ds_join(p, sizeof p, path, x->key);
        switch (x->kind) {
        case FK_SECTION:
            print_table(f, p, x->sub);
            continue;
        case FK_NOEFFECT:
            fprintf(f, "%s: no effect%s\n", p, x->autobit ? " (\"auto\" accepted)" : "");
            continue;
        case FK_UNMODELLED:
            fprintf(f, "%s: not modelled (%s; %s)\n", p, x->what, x->instead);
            continue;
        default:
            fprintf(f, "%s: used%s\n", p, x->autobit ? " (\"auto\" accepted)" : "");
        }
    }
}

void zs_config_print_keys(FILE *f)
{
    /* the sections read by functions rather than by a table of their own */
    static const zs_ds_section more[] = {
        {"activation_checkpointing", &ckpt_table},
        {"model (gpt)", &gpt_table},
        {"model (mlp)", &mlp_table},
        {"model (llama)", &llama_table},
    };
    print_table(f, "", &zs_ds_top_table);
    size_t nopt;
    const zs_ds_section *opt = zs_ds_optim_sections(&nopt);
    for (size_t i = 0; i < nopt; i++)
        print_table(f, opt[i].path, opt[i].t);
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        print_table(f, more[i].path, more[i].t);
    static const char *const offload[] = {"zero_optimization.offload_optimizer",
                                          "zero_optimization.offload_param"};
    for (int k = 0; k < 2; k++) {
        fprintf(f, "%s.device: used\n%s.nvme_path: used\n", offload[k], offload[k]);
        fprintf(f, "%s.ratio: not modelled below 1 (partial offload; remove it or set it to 1)\n",
                offload[k]);
        for (size_t i = 0; i < sizeof offload_noeffect_keys / sizeof offload_noeffect_keys[0]; i++)
            fprintf(f, "%s.%s: no effect\n", offload[k], offload_noeffect_keys[i]);
    }
}
