/* zerosim — the DeepSpeed key schema's optimizer and scheduler sections:
 * each optimizer type's and scheduler type's table of params (Adam, AdamW,
 * SGD, Lamb, the 1-bit optimizers; WarmupLR, WarmupDecayLR,
 * WarmupCosineLR) and the handlers of keys that need more than a table
 * entry. The rest of the schema is deepspeed_keys.c's. */
#include "config_impl.h"
#include "zerosim/config.h"
#include "zerosim/error.h"

#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* optimizer                                                                 */

/* optimizer.params.betas: [beta1, beta2], each in [0, 1). */
static int opt_betas(loader *ld, const char *path, const json_t *v)
{
    if (!json_is_array(v) || json_array_size(v) != 2)
        return zs_ds_bad_value(ld, path, v, "an array of two numbers [beta1, beta2]");
    float *dst[2] = {&ld->c.beta1, &ld->c.beta2};
    for (size_t i = 0; i < 2; i++) {
        char sub[128];
        double d;
        long long ll;
        snprintf(sub, sizeof sub, "%s[%zu]", path, i);
        ZS_TRY(zs_ds_read_number(ld, sub, json_array_get(v, i), &R_BETA, &d, &ll));
        *dst[i] = (float)d;
    }
    return 0;
}

/* optimizer.params.torch_adam: true selects torch.optim.AdamW in DeepSpeed,
 * whose weight_decay defaults to 0.01 (FusedAdam's to 0). The update is the
 * same, so only that default changes. */
static int opt_torch_adam(loader *ld, const char *path, const json_t *v)
{
    int on = 1;
    ZS_TRY(zs_ds_read_bool(ld, path, v, &on));
    if (on)
        ld->c.weight_decay = 0.01f;
    return 0;
}

/* optimizer.params.adam_w_mode: DeepSpeed's "Adam" with adam_w_mode false is
 * Adam with L2 regularization (weight_decay * w added to the gradient);
 * "AdamW" is always decoupled (DeepSpeed forces adam_w_mode on for it). */
static int opt_adam_w_mode(loader *ld, const char *path, const json_t *v)
{
    int on = 1;
    ZS_TRY(zs_ds_read_bool(ld, path, v, &on));
    ld->c.adam_l2 = !on && !ld->opt_is_adamw;
    return 0;
}

/* optimizer.params.bias_correction: false leaves m and v uncorrected. */
static int opt_bias_correction(loader *ld, const char *path, const json_t *v)
{
    int on = 1;
    ZS_TRY(zs_ds_read_bool(ld, path, v, &on));
    ld->c.adam_no_bias_correction = !on;
    return 0;
}

static const field adam_params[] = {
    A_FLOAT("lr", lr, R_POS, ZS_AUTO_LR),
    A_FUNC("betas", opt_betas, ZS_AUTO_BETAS),
    A_FLOAT("eps", eps, R_POS, ZS_AUTO_EPS),
    F_FUNC("torch_adam", opt_torch_adam),
    A_FLOAT("weight_decay", weight_decay, R_NONNEG, ZS_AUTO_WEIGHT_DECAY),
    F_FUNC("adam_w_mode", opt_adam_w_mode),
    F_FUNC("bias_correction", opt_bias_correction),
    F_UNMOD("amsgrad", OFF_FALSE, "AMSGrad's running maximum of v", "set it to false"),
    F_NONE("fused", JT_BOOL),
    F_NONE("foreach", JT_BOOL),
    F_NONE("capturable", JT_BOOL),
    F_NONE("set_grad_none", JT_BOOL),
};
static const field sgd_params[] = {
    A_FLOAT("lr", lr, R_POS, ZS_AUTO_LR),
    F_FLOAT("momentum", momentum, R_NONNEG),
    A_FLOAT("weight_decay", weight_decay, R_NONNEG, ZS_AUTO_WEIGHT_DECAY),
    F_UNMOD("dampening", OFF_AT_MOST_1, "SGD's momentum dampening", "remove it (0)"),
    F_UNMOD("nesterov", OFF_FALSE, "Nesterov momentum", "set it to false"),
    F_NONE("foreach", JT_BOOL),
    F_NONE("maximize", JT_BOOL),
};
/* optimizer.params.max_grad_norm (LAMB, 1-bit Adam): the optimizer's own
 * clipping, off at 0. */
static int opt_lamb_max_grad_norm(loader *ld, const char *path, const json_t *v)
{
    double d;
    long long ll;
    ZS_TRY(zs_ds_read_number(ld, path, v, &R_NONNEG, &d, &ll));
    if (d > 0)
        return zs_config_fail("%s: \"%s\" %g: the optimizer's own gradient clipping is not "
                              "modelled: set it to 0 and use \"gradient_clipping\"",
                              ld->name, path, d);
    return 0;
}

/* DeepSpeed's FusedLamb (deepspeed/ops/lamb): Adam's moments, then the
 * update scaled per parameter tensor by the trust ratio ||w|| / ||u||
 * clamped to [min_coeff, max_coeff]. */
static const field lamb_params[] = {
    A_FLOAT("lr", lr, R_POS, ZS_AUTO_LR),
    A_FUNC("betas", opt_betas, ZS_AUTO_BETAS),
    A_FLOAT("eps", eps, R_POS, ZS_AUTO_EPS),
    A_FLOAT("weight_decay", weight_decay, R_NONNEG, ZS_AUTO_WEIGHT_DECAY),
    F_FUNC("bias_correction", opt_bias_correction),
    F_FLOAT("max_coeff", lamb_max_coeff, R_POS),
    F_FLOAT("min_coeff", lamb_min_coeff, R_NONNEG),
    F_FUNC("max_grad_norm", opt_lamb_max_grad_norm),
    F_UNMOD("eps_inside_sqrt", OFF_FALSE, "eps inside the square root (FusedLamb's mode 0)",
            "set it to false"),
    F_UNMOD("amsgrad", OFF_FALSE, "AMSGrad's running maximum of v", "set it to false"),
};
/* The keys DeepSpeed's three 1-bit optimizers share: Adam's
 * hyperparameters first, then the ones zerosim reads and ignores
 * (bias_correction is taken and not used; cuda_aware and comm_backend_name
 * choose how the exchange reaches the network, which zerosim's MPI
 * collectives do) and the ones it refuses. */
#define ONEBIT_HEAD_FIELDS                                                                   \
    A_FLOAT("lr", lr, R_POS, ZS_AUTO_LR), A_FUNC("betas", opt_betas, ZS_AUTO_BETAS),         \
        A_FLOAT("eps", eps, R_POS, ZS_AUTO_EPS),                                             \
        A_FLOAT("weight_decay", weight_decay, R_NONNEG, ZS_AUTO_WEIGHT_DECAY)
#define ONEBIT_TAIL_FIELDS                                                                   \
    F_NONE("bias_correction", JT_BOOL), F_NONE("cuda_aware", JT_BOOL),                       \
        F_NONE("comm_backend_name", JT_STRING),                                              \
        F_FUNC("max_grad_norm", opt_lamb_max_grad_norm),                                     \
        F_UNMOD("eps_inside_sqrt", OFF_FALSE, "eps inside the square root",                  \
                "set it to false"),                                                          \
        F_UNMOD("amsgrad", OFF_FALSE, "AMSGrad's running maximum of v", "set it to false")
/* DeepSpeed's OnebitAdam (deepspeed/runtime/fp16/onebit/adam.py): Adam
 * without bias correction (its step takes bias_correction and does not use
 * it) for freeze_step steps, then the variance frozen and the momentum
 * exchanged 1-bit compressed; cuda_aware and comm_backend_name choose how
 * its exchange reaches the network, which zerosim's MPI collectives do. */
static const field onebit_adam_params[] = {
    ONEBIT_HEAD_FIELDS,
    F_INT("freeze_step", onebit_freeze_step, R_NONNEG_INT),
    ONEBIT_TAIL_FIELDS,
};
/* DeepSpeed's OnebitLamb (deepspeed/runtime/fp16/onebit/lamb.py): LAMB
 * without bias correction for freeze_step steps, then 1-bit Adam's
 * compressed momentum, the frozen variance and the trust ratio's running
 * average (coeff_beta) scaled by a bounded factor (factor_max, factor_min,
 * factor_threshold). */
static const field onebit_lamb_params[] = {
    ONEBIT_HEAD_FIELDS,
    F_INT("freeze_step", onebit_freeze_step, R_NONNEG_INT),
    F_FLOAT("max_coeff", lamb_max_coeff, R_POS),
    F_FLOAT("min_coeff", lamb_min_coeff, R_NONNEG),
    F_FLOAT("coeff_beta", onebit_coeff_beta, R_NONNEG),
    F_FLOAT("factor_max", onebit_factor_max, R_POS),
    F_FLOAT("factor_min", onebit_factor_min, R_POS),
    F_FLOAT("factor_threshold", onebit_factor_threshold, R_NONNEG),
    ONEBIT_TAIL_FIELDS,
};
/* DeepSpeed's ZeroOneAdam (deepspeed/runtime/fp16/onebit/zoadam.py): the
 * variance updated at exponentially spaced steps until var_freeze_step,
 * then local steps with 1-bit syncs (src/optim/zeroone.c); bias_correction
 * is taken and not used, as in OnebitAdam. */
static const field zeroone_adam_params[] = {
    ONEBIT_HEAD_FIELDS,
    F_INT("var_freeze_step", onebit_freeze_step, R_NONNEG_INT),
    F_INT("var_update_scaler", zo_var_update_scaler, R_POS_INT),
    F_INT("local_step_scaler", zo_local_step_scaler, R_POS_INT),
    F_INT("local_step_clipper", zo_local_step_clipper, R_POS_INT),
    ONEBIT_TAIL_FIELDS,
};
static const field_table adam_table = TABLE(adam_params);
static const field_table onebit_lamb_table = TABLE(onebit_lamb_params);
static const field_table zeroone_adam_table = TABLE(zeroone_adam_params);
static const field_table onebit_adam_table = TABLE(onebit_adam_params);
static const field_table lamb_table = TABLE(lamb_params);
static const field_table sgd_table = TABLE(sgd_params);

/* The keys of the optimizer and scheduler sections themselves. */
static const field typed_section[] = {F_FUNC("type", zs_ds_skip), F_FUNC("params", zs_ds_skip)};
static const field_table typed_table = TABLE(typed_section);

/* Read the "type" string a typed section requires. */
static int section_type(const loader *ld, const char *path, const json_t *obj, const char *choices,
                        const char **type)
{
    char sub[128];
    zs_ds_join(sub, sizeof sub, path, "type");
    const json_t *v = json_object_get(obj, "type");
    if (!v)
        return zs_config_fail("%s: \"%s\" is required: one of %s", ld->name, sub, choices);
    return zs_ds_read_string(ld, sub, v, choices, type);
}

/* DeepSpeed's optimizers (deepspeed/runtime/config.py) that zerosim does not
 * model, and why. */
static const struct {
    const char *name;
    const char *why;
} unmodelled_optimizers[] = {
    {"Adagrad", "use Adam or AdamW"},
    {"Lion", "use Adam or AdamW"},
    {"MuAdam", "muP's width-scaled learning rates are not modelled; use Adam"},
    {"MuAdamW", "muP's width-scaled learning rates are not modelled; use AdamW"},
    {"MuSGD", "muP's width-scaled learning rates are not modelled; use SGD"},
    {"Adam8bit", "8-bit optimizer states are not modelled; use Adam"},
    {"AdamW8bit", "8-bit optimizer states are not modelled; use AdamW"},
};

/* optimizer: {type, params}. Adam and AdamW (DeepSpeed's Adam is AdamW by
 * default) start from FusedAdam's defaults, SGD from torch.optim.SGD's.
 * DeepSpeed matches the type case-insensitively. */
int zs_ds_load_optimizer(loader *ld, const char *path, const json_t *v)
{
    static const char choices[] =
        "\"Adam\", \"AdamW\", \"Lamb\", \"OneBitAdam\", \"OneBitLamb\", \"ZeroOneAdam\" or \"SGD\"";
    const char *type = NULL;
    if (!json_is_object(v))
        return zs_ds_bad_value(ld, path, v, "an object");
    ZS_TRY(zs_ds_check_keys(ld, path, v, &typed_table, ""));
    ZS_TRY(section_type(ld, path, v, choices, &type));

    zs_run_config *c = &ld->c;
    const field_table *params;
    for (size_t k = 0; k < sizeof unmodelled_optimizers / sizeof unmodelled_optimizers[0]; k++)
        if (zs_ds_equal_nocase(type, unmodelled_optimizers[k].name))
            return zs_config_fail("%s: \"%s.type\": %s is a DeepSpeed optimizer zerosim does not "
                                  "model yet: %s", ld->name, path, unmodelled_optimizers[k].name,
                                  unmodelled_optimizers[k].why);
    c->adam_l2 = 0;
    c->adam_no_bias_correction = 0;
    if (zs_ds_equal_nocase(type, "adam") || zs_ds_equal_nocase(type, "adamw")) {
        ld->opt_is_adamw = zs_ds_equal_nocase(type, "adamw");
        c->optimizer = ZS_OPT_ADAMW;
        c->lr = 1e-3f;
        c->beta1 = 0.9f;
        c->beta2 = 0.999f;
        c->eps = 1e-8f;
        c->weight_decay = 0.0f;
        params = &adam_table;
    } else if (zs_ds_equal_nocase(type, "lamb")) {
        c->optimizer = ZS_OPT_LAMB;
        c->lr = 1e-3f;
        c->beta1 = 0.9f;
        c->beta2 = 0.999f;
        c->eps = 1e-8f;
        c->weight_decay = 0.0f;
        c->lamb_max_coeff = 10.0f;
        c->lamb_min_coeff = 0.01f;
        params = &lamb_table;
    } else if (zs_ds_equal_nocase(type, "onebitadam")) {
        c->optimizer = ZS_OPT_ONEBITADAM;
        c->lr = 1e-3f;
        c->beta1 = 0.9f;
        c->beta2 = 0.999f;
        c->eps = 1e-8f;
        c->weight_decay = 0.0f;
        c->onebit_freeze_step = 100000;
        params = &onebit_adam_table;
    } else if (zs_ds_equal_nocase(type, "onebitlamb")) {
        c->optimizer = ZS_OPT_ONEBITLAMB;
        c->lr = 1e-3f;
        c->beta1 = 0.9f;
        c->beta2 = 0.999f;
        c->eps = 1e-8f;
        c->weight_decay = 0.0f;
        c->onebit_freeze_step = 100000;
        c->lamb_max_coeff = 10.0f;
        c->lamb_min_coeff = 0.01f;
        c->onebit_coeff_beta = 0.9f;
        c->onebit_factor_max = 4.0f;
        c->onebit_factor_min = 0.5f;
        c->onebit_factor_threshold = 0.1f;
        params = &onebit_lamb_table;
    } else if (zs_ds_equal_nocase(type, "zerooneadam")) {
        c->optimizer = ZS_OPT_ZEROONEADAM;
        c->lr = 1e-3f;
        c->beta1 = 0.9f;
        c->beta2 = 0.999f;
        c->eps = 1e-8f;
        c->weight_decay = 0.0f;
        c->onebit_freeze_step = 100000;
        c->zo_var_update_scaler = 16;
        c->zo_local_step_scaler = 32678;
        c->zo_local_step_clipper = 16;
        params = &zeroone_adam_table;
    } else if (zs_ds_equal_nocase(type, "sgd")) {
        c->optimizer = ZS_OPT_SGD;
        c->lr = 1e-3f;
        c->momentum = 0.0f;
        c->weight_decay = 0.0f;
        params = &sgd_table;
    } else {
        return zs_config_fail("%s: \"%s.type\" must be %s, got \"%.64s\"", ld->name, path, choices,
                              type);
    }

    const json_t *p = json_object_get(v, "params");
    if (!p)
        return 0;
    char sub[128], note[96];
    zs_ds_join(sub, sizeof sub, path, "params");
    snprintf(note, sizeof note, " for optimizer type \"%.32s\"", type);
    return zs_ds_apply_object(ld, sub, p, params, note);
}

/* ------------------------------------------------------------------------ */
/* scheduler                                                                 */

/* scheduler.params.warmup_type: "linear" or "log". */
static int sched_warmup_type(loader *ld, const char *path, const json_t *v)
{
    const char *s = NULL;
    ZS_TRY(zs_ds_read_string(ld, path, v, "\"linear\" or \"log\"", &s));
    if (strcmp(s, "linear") == 0)
        ld->c.warmup_linear = 1;
    else if (strcmp(s, "log") == 0)
        ld->c.warmup_linear = 0;
    else
        return zs_config_fail("%s: \"%s\" must be \"linear\" or \"log\", got \"%.64s\"", ld->name,
                              path, s);
    return 0;
}

/* scheduler.params.warmup_min_lr: kept until the maximum is known. */
static int sched_min_lr(loader *ld, const char *path, const json_t *v)
{
    long long ll;
    return zs_ds_read_number(ld, path, v, &R_NONNEG, &ld->warmup_min_lr, &ll);
}

/* scheduler.params.warmup_max_lr: the learning rate after warm-up. */
static int sched_max_lr(loader *ld, const char *path, const json_t *v)
{
    double d;
    long long ll;
    ZS_TRY(zs_ds_read_number(ld, path, v, &R_POS, &d, &ll));
    ld->c.lr = (float)d;
    return 0;
}

/* scheduler.params.last_batch_iteration: only -1 (start from the beginning). */
static int sched_last_iter(loader *ld, const char *path, const json_t *v)
{
    double d;
    long long ll;
    ZS_TRY(zs_ds_read_number(ld, path, v, &R_ANY_INT, &d, &ll));
    if (ll != -1)
        return zs_config_fail("%s: \"%s\" must be -1: zerosim always starts the schedule from the "
                              "beginning, got %lld",
                              ld->name, path, ll);
    return 0;
}

/* warmup_num_steps and total_num_steps: counts as large as DeepSpeed takes */
#define F_WARMUP_STEPS \
    { .key = "warmup_num_steps", .kind = FK_COUNT, .off = OFF(warmup_steps, int), \
      .rule = &R_COUNT, .autobit = ZS_AUTO_WARMUP_STEPS }
#define F_TOTAL_STEPS \
    { .key = "total_num_steps", .kind = FK_COUNT, .off = OFF(total_steps, int), \
      .rule = &R_COUNT, .autobit = ZS_AUTO_TOTAL_STEPS }

static const field warmup_params[] = {
    A_FUNC("warmup_min_lr", sched_min_lr, ZS_AUTO_WARMUP_MIN_LR),
    A_FUNC("warmup_max_lr", sched_max_lr, ZS_AUTO_WARMUP_MAX_LR),
    F_WARMUP_STEPS,
    F_FUNC("warmup_type", sched_warmup_type),
    F_FUNC("last_batch_iteration", sched_last_iter),
};
static const field warmup_decay_params[] = {
    F_TOTAL_STEPS,
    A_FUNC("warmup_min_lr", sched_min_lr, ZS_AUTO_WARMUP_MIN_LR),
    A_FUNC("warmup_max_lr", sched_max_lr, ZS_AUTO_WARMUP_MAX_LR),
    F_WARMUP_STEPS,
    F_FUNC("warmup_type", sched_warmup_type),
    F_FUNC("last_batch_iteration", sched_last_iter),
};
static const field warmup_cosine_params[] = {
    F_TOTAL_STEPS,
    F_FLOAT("warmup_min_ratio", warmup_min_ratio, R_FRACTION),
    F_WARMUP_STEPS,
    F_FLOAT("cos_min_ratio", cos_min_ratio, R_FRACTION),
    F_FUNC("warmup_type", sched_warmup_type),
    F_FUNC("last_batch_iteration", sched_last_iter),
};

/* DeepSpeed's schedulers and the defaults of their parameters
 * (deepspeed/runtime/lr_schedules.py). */
static const struct {
    const char *name;
    zs_sched_kind kind;
    field_table params;
    float max_lr;            /* warmup_max_lr default; 0 = the optimizer's lr */
    float cos_min_ratio;     /* final fraction of lr */
    int uses_min_lr;         /* warmup_min_lr / warmup_max_lr give warmup_min_ratio */
} schedulers[] = {
    {"WarmupLR", ZS_SCHED_WARMUP, TABLE(warmup_params), 0.0f, 1.0f, 1},
    {"WarmupDecayLR", ZS_SCHED_WARMUP_DECAY, TABLE(warmup_decay_params), 1e-3f, 0.0f, 1},
    {"WarmupCosineLR", ZS_SCHED_WARMUP_COSINE, TABLE(warmup_cosine_params), 0.0f, 1e-4f, 0},
};

/* scheduler: {type, params}. The type's DeepSpeed defaults: warm up for 1000
 * steps from 0, logarithmically; total_num_steps (required by DeepSpeed for
 * the decaying ones) defaults to the run's steps. */
int zs_ds_load_scheduler(loader *ld, const char *path, const json_t *v)
{
    static const char choices[] = "\"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\"";
    const char *type = NULL;
    if (!json_is_object(v))
        return zs_ds_bad_value(ld, path, v, "an object");
    ZS_TRY(zs_ds_check_keys(ld, path, v, &typed_table, ""));
    ZS_TRY(section_type(ld, path, v, choices, &type));

    size_t k = 0, n = sizeof schedulers / sizeof schedulers[0];
    while (k < n && strcmp(schedulers[k].name, type) != 0)
        k++;
    if (k == n && (!strcmp(type, "OneCycle") || !strcmp(type, "LRRangeTest")))
        return zs_config_fail("%s: \"%s.type\": %s is a DeepSpeed scheduler zerosim does not "
                              "model yet: use WarmupLR, WarmupDecayLR or WarmupCosineLR", ld->name,
                              path, type);
    if (k == n)
        return zs_config_fail("%s: \"%s.type\" must be %s (the names are case-sensitive), got "
                              "\"%.64s\"", ld->name, path, choices, type);

    zs_run_config *c = &ld->c;
    ld->lr_before_sched = c->lr;
    c->scheduler = schedulers[k].kind;
    c->warmup_steps = 1000;
    c->warmup_linear = 0;
    c->total_steps = 0;
    c->warmup_min_ratio = 0.0f;
    c->cos_min_ratio = schedulers[k].cos_min_ratio;
    if (schedulers[k].max_lr > 0)
        c->lr = schedulers[k].max_lr;
    ld->warmup_min_lr = 0.0;

    const json_t *p = json_object_get(v, "params");
    if (p) {
        char sub[128], note[96];
        zs_ds_join(sub, sizeof sub, path, "params");
        snprintf(note, sizeof note, " for scheduler type \"%s\"", type);
        ZS_TRY(zs_ds_apply_object(ld, sub, p, &schedulers[k].params, note));
    }
    if (schedulers[k].uses_min_lr) {
        if (ld->warmup_min_lr > c->lr)
            return zs_config_fail("%s: \"%s.params.warmup_min_lr\" (%g) must not exceed the "
                                  "learning rate after warm-up (%g)", ld->name, path,
                                  ld->warmup_min_lr, (double)c->lr);
        c->warmup_min_ratio = c->lr > 0 ? (float)(ld->warmup_min_lr / c->lr) : 0.0f;
    }
    return 0;
}


const zs_ds_section *zs_ds_optim_sections(size_t *n)
{
    static const zs_ds_section sections[] = {
        {"optimizer", &typed_table},
        {"optimizer.params (Adam, AdamW)", &adam_table},
        {"optimizer.params (SGD)", &sgd_table},
        {"optimizer.params (OneBitAdam)", &onebit_adam_table},
        {"optimizer.params (ZeroOneAdam)", &zeroone_adam_table},
        {"scheduler", &typed_table},
        {"scheduler.params (WarmupLR)", &schedulers[0].params},
        {"scheduler.params (WarmupDecayLR)", &schedulers[1].params},
        {"scheduler.params (WarmupCosineLR)", &schedulers[2].params},
    };
    *n = sizeof sections / sizeof sections[0];
    return sections;
}
