/* zerosim — the run configuration: defaults, the names of its enums (and
 * their parsers), "auto" values described, and the configuration as JSON.
 * The DeepSpeed JSON loader is deepspeed.c (its key schema
 * deepspeed_keys.c); zs_run_config_finalize is finalize.c. */
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

void zs_run_config_defaults(zs_run_config *c)
{
    memset(c, 0, sizeof *c);

    c->model.kind = ZS_MODEL_GPT;
    c->model.n_layer = 2;
    c->model.n_embd = 64;
    c->model.n_head = 4;
    c->model.seq_len = 32;
    c->model.vocab = 64;
    c->model.input_dim = 32;
    c->model.n_classes = 8;
    c->model.n_hidden = 2;
    for (int i = 0; i < ZS_MLP_MAX_HIDDEN; i++)
        c->model.widths[i] = 64;
    c->model.act = ZS_ACT_RELU;

    c->steps = 100;
    c->compression = (zs_comp_spec){.kind = ZS_COMP_NONE, .topk_fraction = 0.01};
    c->error_feedback = 1;
    c->compression_warmup = 0;
    c->train_batch_size = 0;
    c->micro_batch = 0;
    c->grad_accum = 0;
    c->seed = 1234;
    c->steps_per_print = 10;

    c->precision = ZS_DTYPE_F32;
    c->tp = c->pp = 1;
    c->cp = 1;
    c->pp_schedule = ZS_PP_1F1B;
    c->virtual_stages = 1;
    c->ep = 1;
    /* mixture of experts, off (moe_experts 0); DeepSpeed's MoE layer's
     * defaults: top-1, capacity factor 1, min_capacity 4; the aux loss
     * coefficient of DeepSpeed's examples (0.01); every block */
    c->model.moe_every = 1;
    c->model.moe_top_k = 1;
    c->model.moe_capacity_factor = 1.0;
    c->model.moe_min_capacity = 4;
    c->model.moe_aux_coeff = 0.01;
    c->model.norm_eps = 1e-5;      /* the Llama family's (the GPT ignores them) */
    c->model.rope_theta = 10000.0;

    c->optimizer = ZS_OPT_ADAMW;
    c->lr = 3e-3f;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->weight_decay = 0.0f;
    c->momentum = 0.9f;
    c->lamb_max_coeff = 10.0f; /* DeepSpeed's FusedLamb */
    c->lamb_min_coeff = 0.01f;
    c->onebit_freeze_step = 100000; /* DeepSpeed's OnebitAdam */
    c->onebit_coeff_beta = 0.9f;     /* DeepSpeed's OnebitLamb */
    c->onebit_factor_max = 4.0f;
    c->onebit_factor_min = 0.5f;
    c->onebit_factor_threshold = 0.1f;
    c->zo_var_update_scaler = 16;   /* DeepSpeed's ZeroOneAdam */
    c->zo_local_step_scaler = 32678;
    c->zo_local_step_clipper = 16;

    c->scheduler = ZS_SCHED_WARMUP_COSINE;
    c->warmup_steps = 10;
    c->total_steps = 0;
    c->warmup_min_ratio = 0.0f;
    c->cos_min_ratio = 0.1f;
    c->warmup_linear = 1;

    c->grad_clip = 1.0f;

    c->static_loss_scale = 0.0f;
    c->initial_scale_power = 16;
    c->loss_scale_window = 1000;
    c->hysteresis = 2;
    c->min_loss_scale = 1.0f;

    c->stage = 0;
    c->reduce_bucket_size = 500000000;
    c->allgather_bucket_size = 500000000;
    c->stage3_max_live_parameters = 1000000000;
    c->stage3_prefetch_bucket_size = 50000000;
    c->grad_reduce = ZS_GRAD_REDUCE_MICRO;
    c->overlap_comm = -1;
    c->grad_scaling = ZS_GRAD_IN_LOSS;
    c->grad_predivide = 1.0;
    c->comm_dtype = c->grad_accum_dtype = -1;
    c->collective_timeout = 600.0;
}

int zs_step_overlap(const zs_run_config *cfg)
{
    return cfg->overlap_comm < 0 ? cfg->stage == 3 : cfg->overlap_comm != 0;
}

int zs_step_reduce_once(const zs_run_config *cfg)
{
    return cfg->stage <= 1 && cfg->grad_reduce == ZS_GRAD_REDUCE_STEP;
}

zs_dtype zs_run_config_grad_dtype(const zs_run_config *cfg)
{
    return cfg->grad_accum_dtype >= 0 ? (zs_dtype)cfg->grad_accum_dtype : cfg->precision;
}

const char *zs_optim_name(zs_optim_kind k)
{
    return k == ZS_OPT_SGD ? "sgd" : k == ZS_OPT_LAMB ? "lamb"
         : k == ZS_OPT_ONEBITADAM ? "onebitadam" : k == ZS_OPT_ONEBITLAMB ? "onebitlamb"
         : k == ZS_OPT_ZEROONEADAM ? "zerooneadam" : "adamw";
}

int zs_optim_parse(const char *s, zs_optim_kind *out)
{
    if (!strcmp(s, "adamw") || !strcmp(s, "adam"))
        *out = ZS_OPT_ADAMW;
    else if (!strcmp(s, "sgd"))
        *out = ZS_OPT_SGD;
    else if (!strcmp(s, "lamb"))
        *out = ZS_OPT_LAMB;
    else if (!strcmp(s, "onebitadam"))
        *out = ZS_OPT_ONEBITADAM;
    else if (!strcmp(s, "onebitlamb"))
        *out = ZS_OPT_ONEBITLAMB;
    else if (!strcmp(s, "zerooneadam"))
        *out = ZS_OPT_ZEROONEADAM;
    else
        return -1;
    return 0;
}

const char *zs_offload_name(zs_offload o)
{
    return o == ZS_OFFLOAD_CPU ? "cpu" : o == ZS_OFFLOAD_NVME ? "nvme" : "none";
}

int zs_offload_parse(const char *s, zs_offload *out)
{
    if (!strcmp(s, "none"))
        *out = ZS_OFFLOAD_NONE;
    else if (!strcmp(s, "cpu"))
        *out = ZS_OFFLOAD_CPU;
    else if (!strcmp(s, "nvme"))
        *out = ZS_OFFLOAD_NVME;
    else
        return -1;
    return 0;
}

/* The keys that may be "auto", in ZS_AUTO_* bit order. */
static const char *const auto_keys[ZS_AUTO_COUNT] = {
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "gradient_clipping", "optimizer.params.lr", "optimizer.params.betas",
    "optimizer.params.eps", "optimizer.params.weight_decay", "scheduler.params.warmup_min_lr",
    "scheduler.params.warmup_max_lr", "scheduler.params.warmup_num_steps",
    "scheduler.params.total_num_steps", "fp16.enabled", "bf16.enabled",
    "zero_optimization.reduce_bucket_size", "zero_optimization.stage3_prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold",
};

/* What the "auto" of bit i became, as text. */
static void auto_value(const zs_run_config *c, int i, char *v, size_t n)
{
    switch (i) {
    case 0: snprintf(v, n, "%d", c->train_batch_size); break;
    case 1: snprintf(v, n, "%d", c->micro_batch); break;
    case 2: snprintf(v, n, "%d", c->grad_accum); break;
    case 3: snprintf(v, n, "%g", (double)c->grad_clip); break;
    case 4: snprintf(v, n, "%g", (double)c->lr); break;
    case 5: snprintf(v, n, "[%g, %g]", (double)c->beta1, (double)c->beta2); break;
    case 6: snprintf(v, n, "%g", (double)c->eps); break;
    case 7: snprintf(v, n, "%g", (double)c->weight_decay); break;
    case 8: snprintf(v, n, "%g", (double)(c->warmup_min_ratio * c->lr)); break;
    case 9: snprintf(v, n, "%g", (double)c->lr); break;
    case 10: snprintf(v, n, "%d", c->warmup_steps); break;
    case 11: snprintf(v, n, "%d", c->total_steps); break;
    case 12: snprintf(v, n, "%s", c->precision == ZS_DTYPE_F16 ? "true" : "false"); break;
    case 13: snprintf(v, n, "%s", c->precision == ZS_DTYPE_BF16 ? "true" : "false"); break;
    case 14: snprintf(v, n, "%zu", c->reduce_bucket_size); break;
    case 15: snprintf(v, n, "%zu", c->stage3_prefetch_bucket_size); break;
    default: snprintf(v, n, "%lld (not modelled)", 10LL * c->model.n_embd); break;
    }
}

const char *zs_run_config_describe_auto(const zs_run_config *c, char *buf, size_t n)
{
    size_t len = 0;
    if (n)
        buf[0] = '\0';
    for (int i = 0; i < ZS_AUTO_COUNT && len < n; i++)
        if (c->auto_mask & (1u << i)) {
            char v[64];
            auto_value(c, i, v, sizeof v);
            len += (size_t)snprintf(buf + len, n - len, "%s%s=%s", len ? ", " : "", auto_keys[i],
                                    v);
        }
    return buf;
}

/* A float as the shortest decimal that reads back as it (7 digits), so that
 * 0.001f prints as 0.001 and not 0.00100000005. */
static double f7(float x)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.7g", (double)x);
    return strtod(buf, NULL);
}

char *zs_run_config_json(const zs_run_config *c)
{
    static const char *const sched[] = {"constant", "WarmupLR", "WarmupDecayLR",
                                        "WarmupCosineLR"};
    static const char *const scaling[] = {"in_loss", "prescale", "postscale"};
    json_t *betas = json_pack("[f, f]", f7(c->beta1), f7(c->beta2));
    json_t *opt = json_pack("{s:s, s:f, s:o, s:f, s:f, s:f, s:b, s:b}", "type",
                            c->optimizer == ZS_OPT_ADAMW ? "AdamW"
                            : c->optimizer == ZS_OPT_LAMB ? "Lamb"
                            : c->optimizer == ZS_OPT_ONEBITADAM ? "OneBitAdam"
                            : c->optimizer == ZS_OPT_ONEBITLAMB ? "OneBitLamb"
                            : c->optimizer == ZS_OPT_ZEROONEADAM ? "ZeroOneAdam" : "SGD", "lr",
                            f7(c->lr),
                            "betas", betas, "eps", f7(c->eps), "weight_decay",
                            f7(c->weight_decay), "momentum", f7(c->momentum),
                            "adam_w_mode", !c->adam_l2, "bias_correction",
                            !c->adam_no_bias_correction);
    if (zs_optim_is_lamb(c->optimizer)) {
        json_object_set_new(opt, "max_coeff", json_real(f7(c->lamb_max_coeff)));
        json_object_set_new(opt, "min_coeff", json_real(f7(c->lamb_min_coeff)));
    }
    if (zs_optim_is_onebit(c->optimizer))
        json_object_set_new(opt, "freeze_step", json_integer(c->onebit_freeze_step));
    if (c->optimizer == ZS_OPT_ONEBITLAMB) {
        json_object_set_new(opt, "coeff_beta", json_real(f7(c->onebit_coeff_beta)));
        json_object_set_new(opt, "factor_max", json_real(f7(c->onebit_factor_max)));
        json_object_set_new(opt, "factor_min", json_real(f7(c->onebit_factor_min)));
        json_object_set_new(opt, "factor_threshold", json_real(f7(c->onebit_factor_threshold)));
    }
    if (c->optimizer == ZS_OPT_ZEROONEADAM) {
        json_object_set_new(opt, "var_freeze_step", json_integer(c->onebit_freeze_step));
        json_object_set_new(opt, "var_update_scaler", json_integer(c->zo_var_update_scaler));
        json_object_set_new(opt, "local_step_scaler", json_integer(c->zo_local_step_scaler));
        json_object_set_new(opt, "local_step_clipper", json_integer(c->zo_local_step_clipper));
    }
    json_t *sch = json_pack("{s:s, s:i, s:i, s:f, s:f, s:s}", "type",
                            sched[(int)c->scheduler & 3], "warmup_num_steps", c->warmup_steps,
                            "total_num_steps", c->total_steps, "warmup_min_ratio",
                            f7(c->warmup_min_ratio), "cos_min_ratio", f7(c->cos_min_ratio),
                            "warmup_type", c->warmup_linear ? "linear" : "log");
    json_t *fp16 = json_pack("{s:f, s:i, s:i, s:i, s:f}", "loss_scale",
                             f7(c->static_loss_scale), "initial_scale_power",
                             c->initial_scale_power, "loss_scale_window", c->loss_scale_window,
                             "hysteresis", c->hysteresis, "min_loss_scale",
                             f7(c->min_loss_scale));
    json_t *zero = json_pack("{s:i, s:I, s:I, s:I, s:I, s:s}", "stage", c->stage,
                             "reduce_bucket_size", (json_int_t)c->reduce_bucket_size,
                             "allgather_bucket_size", (json_int_t)c->allgather_bucket_size,
                             "stage3_max_live_parameters",
                             (json_int_t)c->stage3_max_live_parameters,
                             "stage3_prefetch_bucket_size",
                             (json_int_t)c->stage3_prefetch_bucket_size, "grad_reduce",
                             zs_grad_reduce_name(c->grad_reduce));
    if (zero && c->offload_optimizer != ZS_OFFLOAD_NONE)
        json_object_set_new(zero, "offload_optimizer",
                            c->offload_optimizer == ZS_OFFLOAD_NVME
                                ? json_pack("{s:s, s:s}", "device", "nvme", "nvme_path",
                                            c->nvme_path)
                                : json_pack("{s:s}", "device", "cpu"));
    json_t *autos = json_object();
    for (int i = 0; i < ZS_AUTO_COUNT; i++)
        if (c->auto_mask & (1u << i)) {
            char v[64];
            auto_value(c, i, v, sizeof v);
            json_object_set_new(autos, auto_keys[i], json_string(v));
        }
    json_t *none = json_array();
    char list[sizeof c->noeffect];
    snprintf(list, sizeof list, "%s", c->noeffect);
    for (char *tok = strtok(list, ", "); tok; tok = strtok(NULL, ", "))
        json_array_append_new(none, json_string(tok));
    json_t *root = json_pack(
        "{s:i, s:i, s:i, s:i, s:i, s:f, s:s, s:o, s:o, s:o, s:o, s:s, s:f, s:b, s:i, s:i, s:b, "
        "s:o, s:o}",
        "train_batch_size", c->train_batch_size, "train_micro_batch_size_per_gpu", c->micro_batch,
        "gradient_accumulation_steps", c->grad_accum, "steps", c->steps, "steps_per_print",
        c->steps_per_print, "gradient_clipping", f7(c->grad_clip), "precision",
        zs_dtype_name(c->precision), "optimizer", opt, "scheduler", sch, "fp16", fp16,
        "zero_optimization", zero, "gradient_scaling", scaling[(int)c->grad_scaling % 3],
        "gradient_predivide_factor", c->grad_predivide, "deterministic", c->deterministic, "tp",
        c->tp, "pp", c->pp, "sequence_parallel", c->sequence_parallel, "auto", autos,
        "no_effect", none);
    if (root && c->cp > 1) /* context parallelism (written only when on) */
        json_object_set_new(root, "cp", json_integer(c->cp));
    if (root && c->cp > 1 && c->cp_attention == ZS_CP_ULYSSES)
        json_object_set_new(root, "cp_attention", json_string("ulysses"));
    if (root && c->adjusted[0]) /* what zerosim/compat.h's rules adjusted */
        json_object_set_new(root, "adjusted", json_string(c->adjusted));
    if (root && c->model.moe_experts > 0) /* the moe section, as the file gives it */
        json_object_set_new(
            root, "moe",
            json_pack("{s:i, s:i, s:i, s:f, s:i, s:i, s:f}", "num_experts", c->model.moe_experts,
                      "ep_size", c->ep, "k", c->model.moe_top_k, "capacity_factor",
                      c->model.moe_capacity_factor, "min_capacity", c->model.moe_min_capacity,
                      "expert_interval", c->model.moe_every, "loss_coeff",
                      c->model.moe_aux_coeff));
    if (root && c->model.moe_experts > 0 && c->ep_layout != ZS_EP_LAYOUT_AUTO)
        json_object_set_new(json_object_get(root, "moe"), "ep_layout",
                            json_string(zs_ep_layout_name(c->ep_layout)));
    if (root && zs_run_config_grad_dtype(c) != c->precision) /* only when it differs */
        json_object_set_new(root, "data_types",
                            json_pack("{s:s}", "grad_accum_dtype",
                                      zs_dtype_name(zs_run_config_grad_dtype(c))));
    if (root && c->qat) /* only when on: the printed configurations stay as they were */
        json_object_set_new(root, "qat", json_string(zs_quant_format_name((zs_quant_format)c->qat)));
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(root);
    return text;
}

int zs_cp_attention_parse(const char *s, int *out)
{
    if (!strcmp(s, "ring"))
        *out = ZS_CP_RING;
    else if (!strcmp(s, "ulysses"))
        *out = ZS_CP_ULYSSES;
    else
        return -1;
    return 0;
}

int zs_pp_schedule_parse(const char *s, zs_pp_schedule *out)
{
    if (!strcmp(s, "gpipe"))
        *out = ZS_PP_GPIPE;
    else if (!strcmp(s, "1f1b"))
        *out = ZS_PP_1F1B;
    else if (!strcmp(s, "interleaved"))
        *out = ZS_PP_INTERLEAVED;
    else
        return -1;
    return 0;
}

const char *zs_pp_schedule_name(zs_pp_schedule s)
{
    return s == ZS_PP_GPIPE ? "gpipe" : s == ZS_PP_INTERLEAVED ? "interleaved" : "1f1b";
}

int zs_pp_partition_parse(const char *s, zs_pp_partition *out)
{
    if (!strcmp(s, "uniform"))
        *out = ZS_PP_UNIFORM;
    else if (!strcmp(s, "parameters"))
        *out = ZS_PP_PARAMETERS;
    else
        return -1;
    return 0;
}

const char *zs_pp_partition_name(zs_pp_partition p)
{
    return p == ZS_PP_PARAMETERS ? "parameters" : "uniform";
}

int zs_grad_reduce_parse(const char *s, zs_grad_reduce *out)
{
    if (!strcmp(s, "micro-batch"))
        *out = ZS_GRAD_REDUCE_MICRO;
    else if (!strcmp(s, "step"))
        *out = ZS_GRAD_REDUCE_STEP;
    else
        return -1;
    return 0;
}

const char *zs_grad_reduce_name(zs_grad_reduce g)
{
    return g == ZS_GRAD_REDUCE_STEP ? "step" : "micro-batch";
}

int zs_ep_layout_parse(const char *s, zs_ep_layout *out)
{
    if (!strcmp(s, "auto"))
        *out = ZS_EP_LAYOUT_AUTO;
    else if (!strcmp(s, "deepspeed"))
        *out = ZS_EP_LAYOUT_DEEPSPEED;
    else
        return -1;
    return 0;
}

const char *zs_ep_layout_name(zs_ep_layout l)
{
    return l == ZS_EP_LAYOUT_DEEPSPEED ? "deepspeed" : "auto";
}
