/* zerosim — the options of `zerosim train` and `zerosim export`: the usage
 * text, the option table, and zs_train_setup, which parses them, loads the
 * --config file, applies the command line over it and checks the outputs
 * before a rank starts training. Only main.c's caller prints the run.
 */
#include "build-config.h"
#include "train_cmd.h"
#include "usage.h"
#include "zerosim/config.h"
#include "zerosim/error.h"
#include "zerosim/eval.h"
#include "zerosim/mem.h"
#include "zerosim/model.h"
#include "zerosim/quant.h"
#include "zerosim/quantfile.h"
#include "zerosim/report.h"
#include "zerosim/weights.h"
#include "zerosim/zcfile.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
    OPT_MODEL = 256, OPT_LAYERS, OPT_HIDDEN, OPT_HEADS, OPT_SEQ, OPT_VOCAB, OPT_WIDTHS,
    OPT_INPUT_DIM, OPT_CLASSES, OPT_ACTIVATION, OPT_STEPS, OPT_MICRO_BATCH, OPT_GRAD_ACCUM,
    OPT_TRAIN_BATCH, OPT_OPTIMIZER, OPT_LR, OPT_WARMUP, OPT_MIN_LR_RATIO, OPT_WEIGHT_DECAY,
    OPT_MOMENTUM, OPT_GRAD_CLIP, OPT_PRECISION, OPT_GRAD_ACCUM_DTYPE, OPT_LOSS_SCALE, OPT_SEED, OPT_STAGE,
    OPT_CONFIG, OPT_BACKEND, OPT_DEVICE_MEMORY, OPT_REPORT, OPT_PRINT_EVERY, OPT_QUIET,
    OPT_SILENT,
    OPT_HELP, OPT_VERSION, OPT_DETERMINISTIC, OPT_EXACT_SLICES, OPT_CSV, OPT_CKPT, OPT_COMP, OPT_NO_EF, OPT_COMP_WARMUP,
    OPT_PHANTOM, OPT_WORLD_SIZE, OPT_PRINT_PROGRAM, OPT_TP, OPT_CP, OPT_CP_ATTENTION, OPT_PP, OPT_SP, OPT_RPN, OPT_HIER, OPT_QWZ, OPT_HPZ, OPT_QGZ,
    OPT_GRAD_REDUCE, OPT_OVERLAP_COMM,
    OPT_COLL_TIMEOUT, OPT_PRINT_CONFIG, OPT_TRACE, OPT_SAVE_DIR, OPT_SAVE_EVERY, OPT_RESUME,
    OPT_OFFLOAD_OPT, OPT_OFFLOAD_PARAM, OPT_NVME_PATH, OPT_HOST_MEMORY,
    OPT_INIT_FROM, OPT_EXPORT, OPT_FORMAT, OPT_OUT, OPT_DATA, OPT_VAL_DATA, OPT_VAL_EVERY,
    OPT_DUMP_DIR, OPT_DUMP_STEPS, OPT_FROM, OPT_QAT,
    OPT_MOE_EXPERTS, OPT_MOE_EVERY, OPT_MOE_TOP_K, OPT_CAPACITY_FACTOR, OPT_MIN_CAPACITY,
    OPT_AUX_LOSS_COEFF, OPT_EP, OPT_EP_LAYOUT, OPT_PP_SCHEDULE, OPT_PP_PARTITION, OPT_VIRTUAL_STAGES,
    OPT_REPORT_PER_RANK,
    OPT_FFN_HIDDEN, OPT_KV_HEADS, OPT_ROPE_THETA, OPT_NORM_EPS, OPT_TIE_EMB, OPT_QKV_BIAS,
    OPT_HF_CONFIG, OPT_SHARD_SIZE, OPT_FREEZE_STEP, OPT_VAR_UPDATE_SCALER,
    OPT_LOCAL_STEP_SCALER, OPT_LOCAL_STEP_CLIPPER,
    OPT_LAST
};

static const struct option zs_long_options[] = {
    {"model", required_argument, NULL, OPT_MODEL},
    {"layers", required_argument, NULL, OPT_LAYERS},
    {"hidden", required_argument, NULL, OPT_HIDDEN},
    {"heads", required_argument, NULL, OPT_HEADS},
    {"seq", required_argument, NULL, OPT_SEQ},
    {"vocab", required_argument, NULL, OPT_VOCAB},
    {"widths", required_argument, NULL, OPT_WIDTHS},
    {"input-dim", required_argument, NULL, OPT_INPUT_DIM},
    {"classes", required_argument, NULL, OPT_CLASSES},
    {"activation", required_argument, NULL, OPT_ACTIVATION},
    {"steps", required_argument, NULL, OPT_STEPS},
    {"micro-batch", required_argument, NULL, OPT_MICRO_BATCH},
    {"grad-accum", required_argument, NULL, OPT_GRAD_ACCUM},
    {"train-batch-size", required_argument, NULL, OPT_TRAIN_BATCH},
    {"optimizer", required_argument, NULL, OPT_OPTIMIZER},
    {"lr", required_argument, NULL, OPT_LR},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"min-lr-ratio", required_argument, NULL, OPT_MIN_LR_RATIO},
    {"weight-decay", required_argument, NULL, OPT_WEIGHT_DECAY},
    {"freeze-step", required_argument, NULL, OPT_FREEZE_STEP},
    {"var-update-scaler", required_argument, NULL, OPT_VAR_UPDATE_SCALER},
    {"local-step-scaler", required_argument, NULL, OPT_LOCAL_STEP_SCALER},
    {"local-step-clipper", required_argument, NULL, OPT_LOCAL_STEP_CLIPPER},
    {"momentum", required_argument, NULL, OPT_MOMENTUM},
    {"grad-clip", required_argument, NULL, OPT_GRAD_CLIP},
    {"precision", required_argument, NULL, OPT_PRECISION},
    {"grad-accum-dtype", required_argument, NULL, OPT_GRAD_ACCUM_DTYPE},
    {"loss-scale", required_argument, NULL, OPT_LOSS_SCALE},
    {"seed", required_argument, NULL, OPT_SEED},
    {"stage", required_argument, NULL, OPT_STAGE},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"device-memory", required_argument, NULL, OPT_DEVICE_MEMORY},
    {"report", required_argument, NULL, OPT_REPORT},
    {"report-per-rank", no_argument, NULL, OPT_REPORT_PER_RANK},
    {"print-every", required_argument, NULL, OPT_PRINT_EVERY},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"silent", no_argument, NULL, OPT_SILENT},
    {"deterministic", no_argument, NULL, OPT_DETERMINISTIC},
    {"exact-slices", required_argument, NULL, OPT_EXACT_SLICES},
    {"qat", required_argument, NULL, OPT_QAT},
    {"csv", required_argument, NULL, OPT_CSV},
    {"phantom", no_argument, NULL, OPT_PHANTOM},
    {"world-size", required_argument, NULL, OPT_WORLD_SIZE},
    {"checkpoint-activations", required_argument, NULL, OPT_CKPT},
    {"compression", required_argument, NULL, OPT_COMP},
    {"no-error-feedback", no_argument, NULL, OPT_NO_EF},
    {"compression-warmup", required_argument, NULL, OPT_COMP_WARMUP},
    {"print-program", no_argument, NULL, OPT_PRINT_PROGRAM},
    {"print-config", no_argument, NULL, OPT_PRINT_CONFIG},
    {"trace", required_argument, NULL, OPT_TRACE},
    {"save-dir", required_argument, NULL, OPT_SAVE_DIR},
    {"save-every", required_argument, NULL, OPT_SAVE_EVERY},
    {"resume", required_argument, NULL, OPT_RESUME},
    {"offload-optimizer", required_argument, NULL, OPT_OFFLOAD_OPT},
    {"offload-param", required_argument, NULL, OPT_OFFLOAD_PARAM},
    {"nvme-path", required_argument, NULL, OPT_NVME_PATH},
    {"host-memory", required_argument, NULL, OPT_HOST_MEMORY},
    {"tp", required_argument, NULL, OPT_TP},
    {"cp", required_argument, NULL, OPT_CP},
    {"cp-attention", required_argument, NULL, OPT_CP_ATTENTION},
    {"pp", required_argument, NULL, OPT_PP},
    {"pp-schedule", required_argument, NULL, OPT_PP_SCHEDULE},
    {"pp-partition", required_argument, NULL, OPT_PP_PARTITION},
    {"virtual-stages", required_argument, NULL, OPT_VIRTUAL_STAGES},
    {"sequence-parallel", no_argument, NULL, OPT_SP},
    {"ranks-per-node", required_argument, NULL, OPT_RPN},
    {"hierarchical", no_argument, NULL, OPT_HIER},
    {"quantized-weights", no_argument, NULL, OPT_QWZ},
    {"hpz-partition-size", required_argument, NULL, OPT_HPZ},
    {"quantized-gradients", no_argument, NULL, OPT_QGZ},
    {"grad-reduce", required_argument, NULL, OPT_GRAD_REDUCE},
    {"overlap-comm", required_argument, NULL, OPT_OVERLAP_COMM},
    {"collective-timeout", required_argument, NULL, OPT_COLL_TIMEOUT},
    {"init-from", required_argument, NULL, OPT_INIT_FROM},
    {"export", required_argument, NULL, OPT_EXPORT},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"shard-size", required_argument, NULL, OPT_SHARD_SIZE},
    {"out", required_argument, NULL, OPT_OUT},
    {"data", required_argument, NULL, OPT_DATA},
    {"val-data", required_argument, NULL, OPT_VAL_DATA},
    {"val-every", required_argument, NULL, OPT_VAL_EVERY},
    {"dump-dir", required_argument, NULL, OPT_DUMP_DIR},
    {"dump-steps", required_argument, NULL, OPT_DUMP_STEPS},
    {"from", required_argument, NULL, OPT_FROM},
    {"moe-experts", required_argument, NULL, OPT_MOE_EXPERTS},
    {"moe-every", required_argument, NULL, OPT_MOE_EVERY},
    {"moe-top-k", required_argument, NULL, OPT_MOE_TOP_K},
    {"capacity-factor", required_argument, NULL, OPT_CAPACITY_FACTOR},
    {"min-capacity", required_argument, NULL, OPT_MIN_CAPACITY},
    {"aux-loss-coeff", required_argument, NULL, OPT_AUX_LOSS_COEFF},
    {"ep", required_argument, NULL, OPT_EP},
    {"ep-layout", required_argument, NULL, OPT_EP_LAYOUT},
    {"ffn-hidden", required_argument, NULL, OPT_FFN_HIDDEN},
    {"kv-heads", required_argument, NULL, OPT_KV_HEADS},
    {"rope-theta", required_argument, NULL, OPT_ROPE_THETA},
    {"norm-eps", required_argument, NULL, OPT_NORM_EPS},
    {"tie-embeddings", no_argument, NULL, OPT_TIE_EMB},
    {"qkv-bias", no_argument, NULL, OPT_QKV_BIAS},
    {"hf-config", required_argument, NULL, OPT_HF_CONFIG},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

/* Option values as given, indexed by option id; applied after --config. */
typedef struct {
    const char *val[OPT_LAST];
} zs_cli;

/* The long name of option id, when it has one. */
static int zs_opt_name_is(int id, const char **name)
{
    for (const struct option *o = zs_long_options; o->name; o++)
        if (o->val == id) {
            *name = o->name;
            return 1;
        }
    return 0;
}

static int zs_parse_int(int id, const char *s, long lo, long hi, long *out)
{
    const char *name = "?";
    zs_opt_name_is(id, &name);
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        ZS_FAIL("--%s must be an integer between %ld and %ld, got \"%s\"", name, lo, hi, s);
    *out = v;
    return 0;
}

static int zs_parse_float(int id, const char *s, double lo, double hi, float *out)
{
    const char *name = "?";
    zs_opt_name_is(id, &name);
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || v < lo || v > hi)
        ZS_FAIL("--%s must be a number between %g and %g, got \"%s\"", name, lo, hi, s);
    *out = (float)v;
    return 0;
}

/* The option handlers of zs_cli_apply's table: each parses one option's
 * value s onto c, or fails with one line. */
static int zs_cli_set_model(const char *s, zs_run_config *c)
{
    if (!strcmp(s, "gpt"))
        c->model.kind = ZS_MODEL_GPT;
    else if (!strcmp(s, "mlp"))
        c->model.kind = ZS_MODEL_MLP;
    else if (!strcmp(s, "llama"))
        c->model.kind = ZS_MODEL_LLAMA;
    else
        ZS_FAIL("--model must be \"mlp\", \"gpt\" or \"llama\", got \"%s\"", s);
    return 0;
}

/* --layers: after --model, whose kind bounds it */
static int zs_cli_set_layers(const char *s, zs_run_config *c)
{
    zs_model_config *mc = &c->model;
    long v = 0;
    ZS_TRY(zs_parse_int(OPT_LAYERS, s, 0, ZS_BOUND_LAYERS_MAX, &v));
    if (zs_model_is_decoder(mc) && v < 1)
        ZS_FAIL("--layers must be at least 1 for the %s, got \"%s\"",
                mc->kind == ZS_MODEL_GPT ? "GPT" : "Llama", s);
    if (v > ZS_MLP_MAX_HIDDEN && mc->kind == ZS_MODEL_MLP)
        ZS_FAIL("--layers must be at most %d for the MLP, got \"%s\"", ZS_MLP_MAX_HIDDEN, s);
    mc->n_layer = (int)v;
    mc->n_hidden = v > ZS_MLP_MAX_HIDDEN ? ZS_MLP_MAX_HIDDEN : (int)v;
    return 0;
}

static int zs_cli_set_hidden(const char *s, zs_run_config *c)
{
    long v = 0;
    ZS_TRY(zs_parse_int(OPT_HIDDEN, s, 1, ZS_BOUND_HIDDEN_MAX, &v));
    c->model.n_embd = (int)v;
    for (int i = 0; i < ZS_MLP_MAX_HIDDEN; i++)
        c->model.widths[i] = (int)v;
    return 0;
}

/* --widths: after --layers and --hidden, which it overrides */
static int zs_cli_set_widths(const char *s, zs_run_config *c)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long w = strtol(p, &end, 10);
        if (end == p || errno || w < 1 || w > ZS_BOUND_HIDDEN_MAX || (*end && *end != ',') ||
            n >= ZS_MLP_MAX_HIDDEN)
            ZS_FAIL("--widths must be up to %d comma-separated positive integers, got \"%s\"",
                    ZS_MLP_MAX_HIDDEN, s);
        c->model.widths[n++] = (int)w;
        p = *end ? end + 1 : end;
    }
    c->model.n_hidden = n;
    return 0;
}

static int zs_cli_set_qat(const char *s, zs_run_config *c)
{
    zs_quant_format qf;
    if (zs_quant_format_parse(s, &qf) || qf == ZS_QUANT_INT8_ZP)
        ZS_FAIL("--qat takes none, int8 or nf4 (absmax formats), got \"%s\"", s);
    c->qat = (int)qf;
    return 0;
}

static int zs_cli_set_compression(const char *s, zs_run_config *c)
{
    return zs_comp_parse(s, &c->compression) ? -1 : 0;
}

static int zs_cli_set_cp_attention(const char *s, zs_run_config *c)
{
    if (zs_cp_attention_parse(s, &c->cp_attention))
        ZS_FAIL("--cp-attention must be ring or ulysses, got \"%s\"", s);
    return 0;
}

static int zs_cli_set_pp_schedule(const char *s, zs_run_config *c)
{
    if (zs_pp_schedule_parse(s, &c->pp_schedule))
        ZS_FAIL("--pp-schedule must be gpipe, 1f1b or interleaved, got \"%s\"", s);
    return 0;
}

static int zs_cli_set_pp_partition(const char *s, zs_run_config *c)
{
    if (zs_pp_partition_parse(s, &c->pp_partition))
        ZS_FAIL("--pp-partition must be uniform or parameters, got \"%s\"", s);
    return 0;
}

static int zs_cli_set_offload_optimizer(const char *s, zs_run_config *c)
{
    if (zs_offload_parse(s, &c->offload_optimizer))
        ZS_FAIL("--offload-optimizer must be none, cpu or nvme, got \"%s\"", s);
    return 0;
}

static int zs_cli_set_offload_param(const char *s, zs_run_config *c)
{
    if (zs_offload_parse(s, &c->offload_param))
        ZS_FAIL("--offload-param must be none, cpu or nvme, got \"%s\"", s);
    return 0;
}

static int zs_cli_set_nvme_path(const char *s, zs_run_config *c)
{
    if (!*s || strlen(s) >= sizeof c->nvme_path)
        ZS_FAIL("--nvme-path needs a folder (at most %zu characters)", sizeof c->nvme_path - 1);
    snprintf(c->nvme_path, sizeof c->nvme_path, "%s", s);
    return 0;
}

static int zs_cli_set_ep_layout(const char *s, zs_run_config *c)
{
    if (zs_ep_layout_parse(s, &c->ep_layout))
        ZS_FAIL("--ep-layout must be \"auto\" or \"deepspeed\", got \"%s\"", s);
    return 0;
}

static int zs_cli_set_grad_reduce(const char *s, zs_run_config *c)
{
    if (zs_grad_reduce_parse(s, &c->grad_reduce))
        ZS_FAIL("--grad-reduce must be \"micro-batch\" or \"step\", got \"%s\"", s);
    return 0;
}

static int zs_cli_set_overlap_comm(const char *s, zs_run_config *c)
{
    if (strcmp(s, "on") && strcmp(s, "off"))
        ZS_FAIL("--overlap-comm must be \"on\" or \"off\", got \"%s\"", s);
    c->overlap_comm = strcmp(s, "on") == 0;
    return 0;
}

/* the seconds parsed as a float, as the other real options */
static int zs_cli_set_collective_timeout(const char *s, zs_run_config *c)
{
    float f = 0.0f;
    ZS_TRY(zs_parse_float(OPT_COLL_TIMEOUT, s, 1e-3, 1e9, &f));
    c->collective_timeout = f;
    return 0;
}

static int zs_cli_set_checkpoint_activations(const char *s, zs_run_config *c)
{
    if (!strcmp(s, "off")) {
        c->checkpoint_mode = ZS_CKPT_OFF;
    } else if (!strcmp(s, "sqrt")) {
        c->checkpoint_mode = ZS_CKPT_SQRT;
    } else if (!strncmp(s, "every:", 6)) {
        char *end;
        errno = 0;
        long k = strtol(s + 6, &end, 10);
        if (end == s + 6 || *end || errno || k < 1 || k > ZS_BOUND_CKPT_EVERY_MAX)
            ZS_FAIL("--checkpoint-activations every:K needs K between 1 and %d, got \"%s\"",
                    ZS_BOUND_CKPT_EVERY_MAX, s);
        c->checkpoint_mode = ZS_CKPT_EVERY;
        c->checkpoint_value = (int)k;
    } else {
        ZS_FAIL("--checkpoint-activations must be off, every:K or sqrt, got \"%s\"", s);
    }
    return 0;
}

static int zs_cli_set_seed(const char *s, zs_run_config *c)
{
    long v = 0;
    ZS_TRY(zs_parse_int(OPT_SEED, s, 0, LONG_MAX, &v));
    c->seed = (uint64_t)v;
    return 0;
}

static int zs_cli_set_optimizer(const char *s, zs_run_config *c)
{
    if (zs_optim_parse(s, &c->optimizer))
        ZS_FAIL("--optimizer must be \"adamw\", \"sgd\", \"lamb\", \"onebitadam\" or "
                "\"onebitlamb\" or \"zerooneadam\", got \"%s\"", s);
    return 0;
}

static int zs_cli_set_precision(const char *s, zs_run_config *c)
{
    if (!strcmp(s, "fp32"))
        c->precision = ZS_DTYPE_F32;
    else if (!strcmp(s, "bf16"))
        c->precision = ZS_DTYPE_BF16;
    else if (!strcmp(s, "fp16"))
        c->precision = ZS_DTYPE_F16;
    else
        ZS_FAIL("--precision must be fp32, bf16 or fp16, got \"%s\"", s);
    return 0;
}

/* data_types.grad_accum_dtype: finalize (compat.c) accepts fp32 and the
 * working precision. */
static int zs_cli_set_grad_accum_dtype(const char *s, zs_run_config *c)
{
    if (!strcmp(s, "fp32"))
        c->grad_accum_dtype = ZS_DTYPE_F32;
    else if (!strcmp(s, "bf16"))
        c->grad_accum_dtype = ZS_DTYPE_BF16;
    else if (!strcmp(s, "fp16"))
        c->grad_accum_dtype = ZS_DTYPE_F16;
    else
        ZS_FAIL("--grad-accum-dtype must be fp32, bf16 or fp16, got \"%s\"", s);
    return 0;
}

static int zs_cli_set_activation(const char *s, zs_run_config *c)
{
    if (!strcmp(s, "relu"))
        c->model.act = ZS_ACT_RELU;
    else if (!strcmp(s, "gelu"))
        c->model.act = ZS_ACT_GELU;
    else
        ZS_FAIL("--activation must be \"relu\" or \"gelu\", got \"%s\"", s);
    return 0;
}

/* How zs_cli_apply sets one option's value onto its field. */
typedef enum {
    ZS_CLI_INT,    /* an int field, an integer in [lo, hi] */
    ZS_CLI_FLOAT,  /* a float field, a number in [lo, hi] */
    ZS_CLI_DOUBLE, /* a double field: checked as a float in [lo, hi], kept as given */
    ZS_CLI_FLAG,   /* an int field set to lo (a flag without a value) */
    ZS_CLI_FUNC,   /* set: its own parsing and message */
} zs_cli_set_kind;

typedef struct {
    int id;
    zs_cli_set_kind kind;
    double lo, hi;
    size_t off; /* the field in zs_run_config (not with ZS_CLI_FUNC) */
    int (*set)(const char *s, zs_run_config *c);
} zs_cli_setter;

#define ZS_CLI_FIELD(kind, id, lo, hi, field) {id, kind, lo, hi, offsetof(zs_run_config, field), NULL}
#define ZS_CLI_SET(id, fn) {id, ZS_CLI_FUNC, 0, 0, 0, fn}

/* Every option zs_cli_apply sets, in the order it checks them (the first
 * bad one names itself). */
static const zs_cli_setter zs_cli_setters[] = {
    ZS_CLI_SET(OPT_MODEL, zs_cli_set_model),
    ZS_CLI_SET(OPT_LAYERS, zs_cli_set_layers),
    ZS_CLI_SET(OPT_HIDDEN, zs_cli_set_hidden),
    ZS_CLI_SET(OPT_WIDTHS, zs_cli_set_widths),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_HEADS, 1, ZS_BOUND_HEADS_MAX, model.n_head),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_SEQ, 1, ZS_BOUND_SEQ_MAX, model.seq_len),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_VOCAB, ZS_BOUND_VOCAB_MIN, ZS_BOUND_VOCAB_MAX, model.vocab),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_INPUT_DIM, 1, 1 << 20, model.input_dim),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_CLASSES, 2, 1 << 20, model.n_classes),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_STEPS, 1, 100000000, steps),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_MICRO_BATCH, 1, ZS_BOUND_BATCH_MAX, micro_batch),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_GRAD_ACCUM, 1, ZS_BOUND_BATCH_MAX, grad_accum),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_TRAIN_BATCH, 1, INT_MAX, train_batch_size),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_WARMUP, 0, 100000000, warmup_steps),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_FREEZE_STEP, 0, 100000000, onebit_freeze_step),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_VAR_UPDATE_SCALER, 1, 100000000, zo_var_update_scaler),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_LOCAL_STEP_SCALER, 1, 100000000, zo_local_step_scaler),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_LOCAL_STEP_CLIPPER, 1, 100000000, zo_local_step_clipper),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_STAGE, 0, 3, stage),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_MOE_EXPERTS, 0, ZS_BOUND_MOE_EXPERTS_MAX, model.moe_experts),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_MOE_EVERY, 1, ZS_BOUND_MOE_EVERY_MAX, model.moe_every),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_MOE_TOP_K, 1, ZS_BOUND_MOE_TOP_K_MAX, model.moe_top_k),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_MIN_CAPACITY, 0, 1 << 24, model.moe_min_capacity),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_EP, 1, ZS_BOUND_EP_MAX, ep),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_VIRTUAL_STAGES, 1, ZS_BOUND_VIRTUAL_STAGES_MAX, virtual_stages),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_FFN_HIDDEN, 1, 1 << 22, model.ffn_hidden),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_KV_HEADS, 1, ZS_BOUND_HEADS_MAX, model.n_kv_head),
    ZS_CLI_FIELD(ZS_CLI_DOUBLE, OPT_ROPE_THETA, 1, 1e12, model.rope_theta),
    ZS_CLI_FIELD(ZS_CLI_DOUBLE, OPT_NORM_EPS, 1e-12, 1, model.norm_eps),
    ZS_CLI_FIELD(ZS_CLI_FLAG, OPT_TIE_EMB, 1, 0, model.tie_embeddings),
    ZS_CLI_FIELD(ZS_CLI_FLAG, OPT_QKV_BIAS, 1, 0, model.qkv_bias),
    ZS_CLI_FIELD(ZS_CLI_FLOAT, OPT_LR, 1e-12, 1e3, lr),
    ZS_CLI_FIELD(ZS_CLI_FLOAT, OPT_MIN_LR_RATIO, 0, 1, cos_min_ratio),
    ZS_CLI_FIELD(ZS_CLI_FLOAT, OPT_WEIGHT_DECAY, 0, 1e3, weight_decay),
    ZS_CLI_FIELD(ZS_CLI_FLOAT, OPT_MOMENTUM, 0, 0.999999, momentum),
    ZS_CLI_FIELD(ZS_CLI_FLOAT, OPT_GRAD_CLIP, 0, 1e30, grad_clip),
    ZS_CLI_FIELD(ZS_CLI_FLOAT, OPT_LOSS_SCALE, 0, 6.5e4, static_loss_scale),
    ZS_CLI_FIELD(ZS_CLI_DOUBLE, OPT_CAPACITY_FACTOR, 1e-6, 1e6, model.moe_capacity_factor),
    ZS_CLI_FIELD(ZS_CLI_DOUBLE, OPT_AUX_LOSS_COEFF, 0, 1e6, model.moe_aux_coeff),
    ZS_CLI_FIELD(ZS_CLI_FLAG, OPT_DETERMINISTIC, 1, 0, deterministic),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_EXACT_SLICES, 1, ZS_EXACT_SLICES_MAX, exact_slices),
    ZS_CLI_SET(OPT_QAT, zs_cli_set_qat),
    ZS_CLI_SET(OPT_COMP, zs_cli_set_compression),
    ZS_CLI_FIELD(ZS_CLI_FLAG, OPT_NO_EF, 0, 0, error_feedback),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_TP, 1, ZS_BOUND_TP_MAX, tp),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_CP, 1, ZS_BOUND_CP_MAX, cp),
    ZS_CLI_SET(OPT_CP_ATTENTION, zs_cli_set_cp_attention),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_PP, 1, ZS_BOUND_PP_MAX, pp),
    ZS_CLI_FIELD(ZS_CLI_FLAG, OPT_SP, 1, 0, sequence_parallel),
    ZS_CLI_SET(OPT_PP_SCHEDULE, zs_cli_set_pp_schedule),
    ZS_CLI_SET(OPT_PP_PARTITION, zs_cli_set_pp_partition),
    ZS_CLI_FIELD(ZS_CLI_FLAG, OPT_HIER, 1, 0, hierarchical),
    ZS_CLI_FIELD(ZS_CLI_FLAG, OPT_QWZ, 1, 0, quantized_weights),
    ZS_CLI_FIELD(ZS_CLI_FLAG, OPT_QGZ, 1, 0, quantized_gradients),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_HPZ, 1, ZS_BOUND_RANKS_MAX, hpz_partition_size),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_RPN, 1, ZS_BOUND_RANKS_MAX, ranks_per_node),
    ZS_CLI_SET(OPT_OFFLOAD_OPT, zs_cli_set_offload_optimizer),
    ZS_CLI_SET(OPT_OFFLOAD_PARAM, zs_cli_set_offload_param),
    ZS_CLI_SET(OPT_NVME_PATH, zs_cli_set_nvme_path),
    ZS_CLI_SET(OPT_EP_LAYOUT, zs_cli_set_ep_layout),
    ZS_CLI_SET(OPT_GRAD_REDUCE, zs_cli_set_grad_reduce),
    ZS_CLI_SET(OPT_OVERLAP_COMM, zs_cli_set_overlap_comm),
    ZS_CLI_SET(OPT_COLL_TIMEOUT, zs_cli_set_collective_timeout),
    ZS_CLI_FIELD(ZS_CLI_INT, OPT_COMP_WARMUP, 0, 100000000, compression_warmup),
    ZS_CLI_SET(OPT_CKPT, zs_cli_set_checkpoint_activations),
    ZS_CLI_SET(OPT_SEED, zs_cli_set_seed),
    ZS_CLI_SET(OPT_OPTIMIZER, zs_cli_set_optimizer),
    ZS_CLI_SET(OPT_PRECISION, zs_cli_set_precision),
    ZS_CLI_SET(OPT_GRAD_ACCUM_DTYPE, zs_cli_set_grad_accum_dtype),
    ZS_CLI_SET(OPT_ACTIVATION, zs_cli_set_activation),
};

#undef ZS_CLI_FIELD
#undef ZS_CLI_SET

static int zs_cli_set_one(const zs_cli_setter *e, const char *s, zs_run_config *c)
{
    void *field = (char *)c + e->off;
    long v = 0;
    float f = 0.0f;
    switch (e->kind) {
    case ZS_CLI_INT:
        ZS_TRY(zs_parse_int(e->id, s, (long)e->lo, (long)e->hi, &v));
        *(int *)field = (int)v;
        return 0;
    case ZS_CLI_FLOAT:
        ZS_TRY(zs_parse_float(e->id, s, e->lo, e->hi, &f));
        *(float *)field = f;
        return 0;
    case ZS_CLI_DOUBLE:
        ZS_TRY(zs_parse_float(e->id, s, e->lo, e->hi, &f));
        *(double *)field = strtod(s, NULL); /* the double as given */
        return 0;
    case ZS_CLI_FLAG:
        *(int *)field = (int)e->lo;
        return 0;
    case ZS_CLI_FUNC:
        break;
    }
    return e->set(s, c);
}

/* Apply the command-line options onto c (after defaults and --config). */
static int zs_cli_apply(const zs_cli *cli, zs_run_config *c, int had_config)
{
    for (size_t i = 0; i < sizeof zs_cli_setters / sizeof zs_cli_setters[0]; i++) {
        const char *s = cli->val[zs_cli_setters[i].id];
        if (s)
            ZS_TRY(zs_cli_set_one(&zs_cli_setters[i], s, c));
    }
    if (cli->val[OPT_WARMUP] || cli->val[OPT_MIN_LR_RATIO])
        if (c->scheduler == ZS_SCHED_CONSTANT)
            c->scheduler = ZS_SCHED_WARMUP_COSINE;
    /* A batch option given here wins over the file's train_batch_size: when
     * both micro-batch and grad-accum are then known, the global batch is
     * derived from them again. */
    if (had_config && (cli->val[OPT_MICRO_BATCH] || cli->val[OPT_GRAD_ACCUM]) &&
        !cli->val[OPT_TRAIN_BATCH] && c->micro_batch > 0 && c->grad_accum > 0)
        c->train_batch_size = 0;
    return 0;
}

/* --init-from's shapes: a field of zs_model_config, its option, whether
 * the file's value is only a default (soft: the Llama's context, which no
 * tensor holds) and whether 0 is a value (flag: the biases, the tied head;
 * else 0 is what the file does not say). */
typedef struct {
    int id;
    const char *what;
    size_t off;
    int soft, flag;
} zs_init_field;

static const zs_init_field zs_init_gpt[] = {
    {OPT_LAYERS, "layers", offsetof(zs_model_config, n_layer), 0, 0},
    {OPT_HIDDEN, "hidden", offsetof(zs_model_config, n_embd), 0, 0},
    {OPT_HEADS, "heads", offsetof(zs_model_config, n_head), 0, 0},
    {OPT_SEQ, "seq", offsetof(zs_model_config, seq_len), 0, 0},
    {OPT_VOCAB, "vocab", offsetof(zs_model_config, vocab), 0, 0},
    {0, NULL, 0, 0, 0},
};
static const zs_init_field zs_init_llama[] = {
    {OPT_LAYERS, "layers", offsetof(zs_model_config, n_layer), 0, 0},
    {OPT_HIDDEN, "hidden", offsetof(zs_model_config, n_embd), 0, 0},
    {OPT_VOCAB, "vocab", offsetof(zs_model_config, vocab), 0, 0},
    {OPT_FFN_HIDDEN, "ffn-hidden", offsetof(zs_model_config, ffn_hidden), 0, 0},
    {OPT_QKV_BIAS, "qkv-bias", offsetof(zs_model_config, qkv_bias), 0, 1},
    {OPT_TIE_EMB, "tie-embeddings", offsetof(zs_model_config, tie_embeddings), 0, 1},
    {OPT_HEADS, "heads", offsetof(zs_model_config, n_head), 0, 0},
    {OPT_KV_HEADS, "kv-heads", offsetof(zs_model_config, n_kv_head), 0, 0},
    {OPT_MOE_EXPERTS, "moe-experts", offsetof(zs_model_config, moe_experts), 0, 1},
    {OPT_MOE_EVERY, "moe-every", offsetof(zs_model_config, moe_every), 0, 0},
    {OPT_SEQ, "seq", offsetof(zs_model_config, seq_len), 1, 0},
    {0, NULL, 0, 0, 0},
};

/* Where a shape came from other than the file, for the error line. */
static const char *zs_init_source(const zs_cli *cli, int by_cli)
{
    return by_cli ? "the command line"
           : cli->val[OPT_HF_CONFIG] ? "--hf-config" : "the --config file";
}

static int zs_cli_init_from_gpt(const zs_cli *cli, const zs_run_config *from_config,
                                zs_run_config *c, const zs_model_config *f);

/* --init-from a quantized (.zq) or Deep Compression (.zc) file: the model,
 * a GPT or an MLP, is the file's (its weights dequantized or decoded when
 * the run starts: zs_oracle_init_from). A kind or an MLP shape the command
 * line gave must agree with it; a GPT's shapes as for weights files. */
static int zs_cli_init_from_model_file(const zs_cli *cli, const zs_run_config *from_config,
                                       zs_run_config *c, const char *path)
{
    zs_model_src src;
    ZS_TRY(zs_model_src_load(path, "--init-from", 0, &src));
    zs_model_config f = src.mc;
    const char *kind = src.kind;
    zs_model_src_free(&src);
    if ((cli->val[OPT_MODEL] || from_config->model.kind != ZS_MODEL_GPT) &&
        c->model.kind != f.kind)
        ZS_FAIL("--init-from %s holds %s %s, but the run's model is %s: drop --model", path,
                kind, zs_model_kind_name(f.kind), zs_model_kind_name(c->model.kind));
    c->model.kind = f.kind;
    if (f.kind != ZS_MODEL_MLP)
        return zs_cli_init_from_gpt(cli, from_config, c, &f);
    int widths_differ = f.n_hidden != c->model.n_hidden;
    for (int i = 0; i < f.n_hidden && !widths_differ; i++)
        widths_differ = f.widths[i] != c->model.widths[i];
    if ((cli->val[OPT_INPUT_DIM] && c->model.input_dim != f.input_dim) ||
        (cli->val[OPT_CLASSES] && c->model.n_classes != f.n_classes) ||
        (cli->val[OPT_WIDTHS] && widths_differ) ||
        (cli->val[OPT_ACTIVATION] && c->model.act != f.act))
        ZS_FAIL("--init-from %s holds an MLP of other shapes or activation than the command "
                "line gives: drop --input-dim, --classes, --widths and --activation", path);
    c->model.input_dim = f.input_dim;
    c->model.n_classes = f.n_classes;
    c->model.n_hidden = f.n_hidden;
    memcpy(c->model.widths, f.widths, sizeof f.widths);
    c->model.act = f.act;
    return 0;
}

/* --init-from: the model's family and shapes are the file's. A shape the
 * command line or a config file (what it set differs from the defaults)
 * gave must agree with the file; a Llama's rope theta, norm eps and
 * context are the file's metadata's where nothing else gives them. */
static int zs_cli_init_from(const zs_cli *cli, const zs_run_config *from_config,
                            zs_run_config *c)
{
    const char *path = cli->val[OPT_INIT_FROM];
    if (zs_qfile_is(path) || zs_dc_file_is(path))
        return zs_cli_init_from_model_file(cli, from_config, c, path);
    if (c->model.kind == ZS_MODEL_MLP)
        ZS_FAIL("--init-from %s: weight files hold the GPT and the Llama family; drop --model "
                "mlp", path);
    zs_model_config f;
    ZS_TRY(zs_weights_probe(path, &f));
    return zs_cli_init_from_gpt(cli, from_config, c, &f);
}

/* A Mixtral file's router (which no tensor holds): its top-k and
 * renormalisation from the metadata zerosim writes, where neither the
 * command line nor a config file gives them; a file without them (as
 * transformers writes one) needs --moe-top-k or its config.json. */
static int zs_cli_init_from_router(const zs_cli *cli, const zs_run_config *from_config,
                                   zs_run_config *c, const zs_model_config *f)
{
    if (f->moe_experts <= 0)
        return 0;
    zs_run_config def;
    zs_run_config_defaults(&def);
    int given = cli->val[OPT_MOE_TOP_K] || cli->val[OPT_HF_CONFIG] ||
                from_config->model.moe_top_k != def.model.moe_top_k;
    if (given)
        return 0;
    if (!f->moe_top_k)
        ZS_FAIL("--init-from %s: the file does not say the router's top-k (no moe_top_k in "
                "its metadata): give --moe-top-k, or the checkpoint's config.json with "
                "--hf-config", cli->val[OPT_INIT_FROM]);
    c->model.moe_top_k = f->moe_top_k;
    if (from_config->model.moe_renormalize == def.model.moe_renormalize)
        c->model.moe_renormalize = f->moe_renormalize;
    return 0;
}

/* A GPT's shapes from f, the file's: those the command line or the config
 * gave must agree. */
static int zs_cli_init_from_gpt(const zs_cli *cli, const zs_run_config *from_config,
                                zs_run_config *c, const zs_model_config *fp)
{
    const char *path = cli->val[OPT_INIT_FROM];
    zs_model_config f = *fp;
    zs_run_config def;
    zs_run_config_defaults(&def);
    if (f.kind != c->model.kind) {
        if (cli->val[OPT_MODEL] || from_config->model.kind != def.model.kind)
            ZS_FAIL("--init-from %s holds a %s, but %s gives --model %s: drop it", path,
                    zs_model_kind_name(f.kind), zs_init_source(cli, cli->val[OPT_MODEL] != NULL),
                    zs_model_kind_name(c->model.kind));
        c->model.kind = f.kind;
    }
    const zs_init_field *sh = f.kind == ZS_MODEL_LLAMA ? zs_init_llama : zs_init_gpt;
    for (size_t i = 0; sh[i].what; i++) {
#define ZS_FIELD(cfgp) (*(int *)((char *)&(cfgp)->model + sh[i].off))
        int file = *(int *)((char *)&f + sh[i].off), have = ZS_FIELD(c);
        int by_cli = cli->val[sh[i].id] != NULL;
        /* --hf-config gives every shape; --config those it changes */
        int by_config = cli->val[OPT_HF_CONFIG] || ZS_FIELD(from_config) != ZS_FIELD(&def);
#undef ZS_FIELD
        if (sh[i].id == OPT_KV_HEADS && file == 0)
            continue; /* from the heads, below */
        if (file == 0 && sh[i].id == OPT_HEADS) { /* the file does not say it */
            if (!by_cli && !by_config)
                ZS_FAIL("--init-from %s: the file does not say the number of heads (no n_head "
                        "in its metadata): give --heads%s", path, f.kind == ZS_MODEL_LLAMA
                        ? " and --kv-heads, or the checkpoint's config.json with --hf-config"
                        : "");
            continue;
        }
        if ((file == 0 && !sh[i].flag) || (sh[i].soft && (by_cli || by_config)))
            continue;
        if ((by_cli || by_config) && have != file)
            ZS_FAIL("--init-from %s holds a %s with %s %d, but %s gives %d: drop the %s",
                    path, f.kind == ZS_MODEL_LLAMA ? "Llama" : "GPT", sh[i].what, file,
                    zs_init_source(cli, by_cli), have, by_cli ? "option" : "key");
        *(int *)((char *)&c->model + sh[i].off) = file;
    }
    if (c->model.n_embd % c->model.n_head)
        ZS_FAIL("--init-from %s: --heads %d does not divide the file's hidden size %d", path,
                c->model.n_head, c->model.n_embd);
    if (f.kind != ZS_MODEL_LLAMA)
        return 0;
    zs_model_config kv = c->model; /* the key/value heads k_proj's rows hold */
    kv.n_kv_head = 0;
    ZS_TRY(zs_weights_probe_heads(path, &kv));
    if (c->model.n_kv_head && c->model.n_kv_head != kv.n_kv_head)
        ZS_FAIL("--init-from %s holds a Llama with kv-heads %d (k_proj's rows, %d heads), but "
                "%s gives %d: drop the %s", path, kv.n_kv_head, c->model.n_head,
                zs_init_source(cli, cli->val[OPT_KV_HEADS] != NULL), c->model.n_kv_head,
                cli->val[OPT_KV_HEADS] ? "option" : "key");
    c->model.n_kv_head = kv.n_kv_head;
    int hf = cli->val[OPT_HF_CONFIG] != NULL;
    if (f.rope_theta > 0.0 && !cli->val[OPT_ROPE_THETA] && !hf &&
        from_config->model.rope_theta == def.model.rope_theta)
        c->model.rope_theta = f.rope_theta;
    if (f.norm_eps > 0.0 && !cli->val[OPT_NORM_EPS] && !hf &&
        from_config->model.norm_eps == def.model.norm_eps)
        c->model.norm_eps = f.norm_eps;
    return zs_cli_init_from_router(cli, from_config, c, &f);
}

/* zerosim export --from DIR: what the checkpoint's manifest says of the run
 * (the model's shapes, precision, optimizer, global batch and seed) for the
 * options the command line does not give, so that --resume's loader, which
 * checks them, accepts it; the steps one past the save (none are taken).
 * The manifest is the one zs_ckpt_check found and checked (its checksum
 * first), or one line. */
static int zs_cli_from_checkpoint(const zs_cli *cli, zs_run_config *c)
{
    char path[4200];
    ZS_TRY(zs_ckpt_check(cli->val[OPT_FROM], "--from", path, sizeof path));
    json_t *m = json_load_file(path, 0, NULL);
    if (!m)
        return 0;
    static const struct { int id; const char *key; size_t off; } ints[] = {
        {OPT_LAYERS, "n_layer", offsetof(zs_model_config, n_layer)},
        {OPT_HIDDEN, "n_embd", offsetof(zs_model_config, n_embd)},
        {OPT_HEADS, "n_head", offsetof(zs_model_config, n_head)},
        {OPT_SEQ, "seq_len", offsetof(zs_model_config, seq_len)},
        {OPT_VOCAB, "vocab", offsetof(zs_model_config, vocab)},
    };
    json_t *model = json_object_get(m, "model"), *v;
    const char *kind = json_string_value(json_object_get(model, "kind"));
    if (kind && !cli->val[OPT_MODEL])
        c->model.kind = !strcmp(kind, "mlp") ? ZS_MODEL_MLP : ZS_MODEL_GPT;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (!cli->val[ints[i].id] && json_is_integer(v = json_object_get(model, ints[i].key)))
            *(int *)((char *)&c->model + ints[i].off) = (int)json_integer_value(v);
    const char *prec = json_string_value(json_object_get(m, "precision"));
    if (prec && !cli->val[OPT_PRECISION])
        c->precision = !strcmp(prec, "bf16") ? ZS_DTYPE_BF16
                     : !strcmp(prec, "fp16") ? ZS_DTYPE_F16 : ZS_DTYPE_F32;
    const char *opt = json_string_value(json_object_get(m, "optimizer"));
    if (opt && !cli->val[OPT_OPTIMIZER])
        c->optimizer = zs_optim_parse(opt, &c->optimizer) ? ZS_OPT_ADAMW : c->optimizer;
    if (json_is_integer(v = json_object_get(m, "train_batch_size")) && !cli->val[OPT_TRAIN_BATCH] &&
        !cli->val[OPT_MICRO_BATCH] && !cli->val[OPT_GRAD_ACCUM]) {
        c->train_batch_size = (int)json_integer_value(v);
        c->micro_batch = c->grad_accum = 0;
    }
    if (json_is_integer(v = json_object_get(json_object_get(m, "data"), "seed")) &&
        !cli->val[OPT_SEED])
        c->seed = (uint64_t)json_integer_value(v);
    if (json_is_integer(v = json_object_get(m, "steps")) && json_integer_value(v) < INT_MAX)
        c->steps = (int)json_integer_value(v) + 1;
    json_decref(m);
    return 0;
}

/* "0,1,5-7": ascending 1-based steps (0 = before step 1) into out. */
#define ZS_MAX_DUMP_STEPS 4096
static int zs_dump_steps_buf[ZS_MAX_DUMP_STEPS];

static int zs_parse_steps(const char *s, int steps, int *out, int *n)
{
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long a = strtol(p, &end, 10), b = a;
        if (end != p && *end == '-') {
            const char *q = end + 1;
            b = strtol(q, &end, 10);
            if (end == q)
                b = -1;
        }
        if (end == p || errno || a < 0 || b < a || (*end && *end != ','))
            ZS_FAIL("--dump-steps must be steps or ranges like 0,1,5-7 in increasing order, "
                    "got \"%s\"", s);
        if (b > steps)
            ZS_FAIL("--dump-steps: step %ld is after the last step (--steps %d)", b, steps);
        for (long k = a; k <= b; k++) {
            if (*n >= ZS_MAX_DUMP_STEPS || (*n > 0 && out[*n - 1] >= k))
                ZS_FAIL("--dump-steps must list at most %d steps in increasing order, got "
                        "\"%s\"", ZS_MAX_DUMP_STEPS, s);
            out[(*n)++] = (int)k;
        }
        p = *end ? end + 1 : end;
    }
    return 0;
}

/* The options of weights, data and dumps, after finalize; export_cmd: the
 * export command (build, load, write; no step). */
static int zs_cli_outputs(const zs_cli *cli, zs_run_config *c, zs_train_options *o, int rank,
                          int export_cmd)
{
    const char *s;
    int gpt = zs_model_is_decoder(&c->model); /* a Llama's real run is refused before */
    static const int gpt_only[] = {OPT_INIT_FROM, OPT_EXPORT, OPT_OUT, OPT_VAL_DATA,
                                   OPT_DUMP_DIR};
    if (cli->val[OPT_DATA] && cli->val[OPT_PHANTOM])
        ZS_FAIL("--data needs a real run: a phantom run computes no values");
    const char *name = "?";
    /* a quantized or compressed file holds an MLP as well as a GPT */
    int model_file = cli->val[OPT_INIT_FROM] && (zs_qfile_is(cli->val[OPT_INIT_FROM]) ||
                                                 zs_dc_file_is(cli->val[OPT_INIT_FROM]));
    for (size_t i = 0; i < sizeof gpt_only / sizeof gpt_only[0]; i++)
        if (cli->val[gpt_only[i]] && (!gpt || cli->val[OPT_PHANTOM]) &&
            !(gpt_only[i] == OPT_INIT_FROM && model_file && !cli->val[OPT_PHANTOM])) {
            zs_opt_name_is(gpt_only[i], &name);
            if (!gpt)
                ZS_FAIL("--%s is for the GPT (GPT-2's tensor names, token files): the MLP has "
                        "none", name);
            ZS_FAIL("--%s needs a real run: a phantom run computes no values", name);
        }
    o->init_from = cli->val[OPT_INIT_FROM];
    c->data_file = cli->val[OPT_DATA];
    o->val_data = cli->val[OPT_VAL_DATA];
    if (cli->val[OPT_VAL_EVERY] && !o->val_data && (gpt || !c->data_file))
        ZS_FAIL("--val-every needs --val-data FILE (the GPT's held-out tokens) or --data "
                "DIR|fashion-mnist (the MLP's image set)");
    /* the GPT's held-out tokens every --print-every steps; the MLP's image
     * set (its held-out and test images, whole) after the last step only */
    o->val_every = gpt || !c->data_file ? o->print_every : c->steps;
    long v;
    if ((s = cli->val[OPT_VAL_EVERY])) {
        ZS_TRY(zs_parse_int(OPT_VAL_EVERY, s, 1, INT_MAX, &v));
        o->val_every = (int)v;
    }
    const char *out = export_cmd ? cli->val[OPT_OUT] : cli->val[OPT_EXPORT];
    if (export_cmd && cli->val[OPT_EXPORT])
        ZS_FAIL("zerosim export writes --out FILE (--export is train's)");
    if (!export_cmd && cli->val[OPT_OUT])
        ZS_FAIL("--out is zerosim export's; zerosim train writes its weights with --export FILE");
    if (export_cmd && !out)
        ZS_FAIL("zerosim export needs --out FILE (.safetensors or .bin)");
    if (export_cmd && (cli->val[OPT_STEPS] || cli->val[OPT_VAL_DATA]))
        ZS_FAIL("zerosim export takes no step: drop --%s",
                cli->val[OPT_STEPS] ? "steps" : "val-data");
    if (cli->val[OPT_FORMAT] && !out)
        ZS_FAIL("--format is the format of --export FILE (or export's --out FILE)");
    if (out) {
        zs_weights_format f;
        if (cli->val[OPT_FORMAT])
            ZS_TRY(zs_weights_format_parse(cli->val[OPT_FORMAT], &f));
        else
            ZS_TRY(zs_weights_format_of(out, &f));
        o->export_path = out;
        o->export_format = (int)f;
    }
    if (cli->val[OPT_SHARD_SIZE]) {
        size_t bytes;
        if (!out)
            ZS_FAIL("--shard-size splits --export FILE (or export's --out FILE) into shards");
        if (zs_parse_size(cli->val[OPT_SHARD_SIZE], &bytes) || bytes < 1)
            ZS_FAIL("--shard-size must be a size in bytes such as 5GB or 200MB, got \"%s\"",
                    cli->val[OPT_SHARD_SIZE]);
        o->export_shard_bytes = (uint64_t)bytes;
    }
    /* what the writer would refuse after training, refused now */
    if (out && o->export_format == ZS_WEIGHTS_LLMC && o->export_shard_bytes)
        ZS_FAIL("%s: --shard-size splits safetensors checkpoints; llm.c's .bin is one file", out);
    if (out && o->export_format == ZS_WEIGHTS_LLMC && c->model.kind == ZS_MODEL_LLAMA)
        ZS_FAIL("%s: llm.c's .bin holds GPT-2 models only: write the Llama as .safetensors", out);
    if (out && c->model.kind == ZS_MODEL_GPT && c->model.moe_experts > 0)
        ZS_FAIL("%s: weight files hold dense GPT-2 models only: a mixture of experts "
                "(--moe-experts %d) has no GPT-2 tensor names; use training checkpoints "
                "(--save-dir)", out, c->model.moe_experts);
    o->no_steps = export_cmd;
    if (cli->val[OPT_FROM] && !export_cmd)
        ZS_FAIL("--from is zerosim export's; zerosim train starts from a checkpoint with --resume");
    if (cli->val[OPT_FROM] && cli->val[OPT_RESUME])
        ZS_FAIL("--from and --resume name the same thing: give one");
    if (cli->val[OPT_FROM])
        o->resume = cli->val[OPT_FROM];
    if (o->init_from && o->resume)
        ZS_FAIL("--init-from %s and a checkpoint (%s) both give the parameters: give one",
                o->init_from, o->resume);
    if (!cli->val[OPT_DUMP_DIR] != !cli->val[OPT_DUMP_STEPS])
        ZS_FAIL("--dump-dir DIR and --dump-steps LIST go together");
    if ((s = cli->val[OPT_DUMP_STEPS])) {
        int n;
        ZS_TRY(zs_parse_steps(s, export_cmd ? 0 : c->steps, zs_dump_steps_buf, &n));
        o->dump_steps = zs_dump_steps_buf;
        o->n_dump_steps = n;
        o->dump_dir = cli->val[OPT_DUMP_DIR];
        struct stat st;
        if (rank == 0 && stat(o->dump_dir, &st) != 0 && mkdir(o->dump_dir, 0777) != 0)
            ZS_FAIL("cannot create the --dump-dir %s: %s", o->dump_dir, strerror(errno));
        if (rank == 0 && (stat(o->dump_dir, &st) != 0 || !S_ISDIR(st.st_mode)))
            ZS_FAIL("--dump-dir %s is not a directory", o->dump_dir);
    }
    return 0;
}

/* nvme_path: an existing folder this process can write into. */
static int zs_check_nvme_path(const char *dir)
{
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        ZS_FAIL("nvme_path %s is not a folder: create it, or give another with --nvme-path", dir);
    if (access(dir, W_OK | X_OK) != 0)
        ZS_FAIL("nvme_path %s: cannot write into it: %s", dir, strerror(errno));
    return 0;
}

/* --save-dir: a writable folder, or one that can be made in a writable
 * folder. */
static int zs_check_save_dir(const char *dir)
{
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            ZS_FAIL("--save-dir %s is a file, not a folder: give a folder to save into", dir);
        if (access(dir, W_OK | X_OK) != 0)
            ZS_FAIL("--save-dir %s: cannot write into it: %s", dir, strerror(errno));
        return 0;
    }
    char parent[4096];
    const char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(parent, sizeof parent, ".");
    else if (slash == dir)
        snprintf(parent, sizeof parent, "/");
    else
        snprintf(parent, sizeof parent, "%.*s", (int)(slash - dir), dir);
    if (stat(parent, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(parent, W_OK | X_OK) != 0)
        ZS_FAIL("--save-dir %s: its parent folder %s does not exist or is not writable: create "
                "it first", dir, parent);
    return 0;
}

/* zs_train_setup's failure after a ZS_FAIL: the line on rank 0, exit 1. */
static int zs_train_setup_failed(FILE *err)
{
    if (err)
        fprintf(err, "zerosim: %s\n", zs_error_msg());
    return 1;
}

/* getopt over argv into cli (--quiet and --silent straight into o): 0, -1
 * after --help, 2 after one line on err. */
static int zs_train_read_args(int argc, char **argv, int rank, FILE *err, zs_cli *cli,
                              zs_train_options *o)
{
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", zs_long_options, NULL)) != -1) {
        if (ch == '?' || ch == ':') {
            const char *arg = argv[optind - 1];
            int is_long = arg[0] == '-' && arg[1] == '-';
            int known_long = 0;
            for (const struct option *lo = zs_long_options; is_long && lo->name; lo++)
                if (lo->val == optopt && optopt >= OPT_MODEL)
                    known_long = lo->has_arg == required_argument ? 1 : 2;
            if (!err)
                ;
            else if (known_long == 1)
                fprintf(err, "zerosim: option %s needs a value (see zerosim --help)\n", arg);
            else if (known_long == 2)
                fprintf(err, "zerosim: option %s takes no value (see zerosim --help)\n", arg);
            else
                fprintf(err, "zerosim: unknown option %s (see zerosim --help)\n", arg);
            return 2;
        }
        if (ch == 'h' || ch == OPT_HELP) {
            if (rank == 0) /* argv[0] is the command: train or export */
                fputs(argv[0] && !strcmp(argv[0], "export") ? zs_export_usage : zs_usage, stdout);
            return -1; /* done, exit 0 */
        }
        if (ch == OPT_QUIET) {
            o->quiet = 1;
            continue;
        }
        if (ch == OPT_SILENT) {
            o->log = NULL;
            continue;
        }
        if (ch == OPT_REPORT_PER_RANK) { /* rows per rank, not per class */
            o->report_rows = ZS_REPORT_ROWS_PER_RANK;
            continue;
        }
        cli->val[ch] = optarg ? optarg : "1";
    }
    if (optind < argc) {
        if (err)
            fprintf(err, "zerosim: unexpected argument \"%s\" (see zerosim --help)\n", argv[optind]);
        return 2;
    }
    return 0;
}

/* --phantom's refusals: it runs alone, and records, saves and computes
 * nothing. 0, or 2 after one line on err. */
static int zs_train_check_phantom(const zs_cli *cli, int world, FILE *err)
{
    const char *why = NULL;
    if (!cli->val[OPT_WORLD_SIZE])
        why = "--phantom needs --world-size N, the number of ranks to simulate";
    else if (world > 1)
        why = "--phantom simulates the ranks itself: run it without mpirun";
    else if (cli->val[OPT_TRACE])
        why = "--trace records real time, and a phantom run spends none computing or sending: "
              "drop --trace";
    else if (cli->val[OPT_SAVE_DIR])
        why = "--phantom holds no values to save or load: drop --save-dir";
    else if (cli->val[OPT_RESUME])
        why = "--phantom holds no values to save or load: drop --resume";
    else if (cli->val[OPT_BACKEND])
        why = "--phantom computes nothing, on no backend: drop --backend (the bytes it reports "
              "do not depend on the device)";
    if (!why)
        return 0;
    if (err)
        fprintf(err, "zerosim: %s\n", why);
    return 2;
}

/* The runs with no ranks: --print-program and --print-config (both set
 * *print_program: 1 or 2) and --phantom, on *phantom_world simulated ranks
 * (--world-size N). 0, or an exit code after one line on err. */
static int zs_train_read_mode(zs_cli *cli, int world, FILE *err, int *phantom_world,
                              int *print_program)
{
    if (cli->val[OPT_PRINT_CONFIG])
        cli->val[OPT_PRINT_PROGRAM] = "config"; /* the same: no ranks, --world-size N */
    if (cli->val[OPT_WORLD_SIZE] && !cli->val[OPT_PHANTOM] && !cli->val[OPT_PRINT_PROGRAM]) {
        if (err)
            fprintf(err, "zerosim: --world-size is for phantom runs (add --phantom); a real run "
                    "takes its size from mpirun -np\n");
        return 2;
    }
    long v = 1;
    if (cli->val[OPT_PRINT_PROGRAM]) {
        if (world > 1) {
            if (err)
                fprintf(err, "zerosim: --%s runs no ranks: run it without mpirun, "
                        "with --world-size N\n",
                        cli->val[OPT_PRINT_CONFIG] ? "print-config" : "print-program");
            return 2;
        }
        if (cli->val[OPT_WORLD_SIZE] &&
            zs_parse_int(OPT_WORLD_SIZE, cli->val[OPT_WORLD_SIZE], 1, ZS_BOUND_RANKS_MAX, &v))
            return zs_train_setup_failed(err);
        *phantom_world = (int)v;
        *print_program = cli->val[OPT_PRINT_CONFIG] ? 2 : 1;
    } else if (cli->val[OPT_PHANTOM]) {
        int rc = zs_train_check_phantom(cli, world, err);
        if (rc)
            return rc;
        if (zs_parse_int(OPT_WORLD_SIZE, cli->val[OPT_WORLD_SIZE], 1, ZS_BOUND_RANKS_MAX, &v))
            return zs_train_setup_failed(err);
        *phantom_world = (int)v;
    }
    return 0;
}

/* --hf-config: the file's keys that change nothing, listed on start-up */
static char zs_hf_ignored[1024];

/* The run's configuration: defaults, --config, the command line, the
 * weights' or checkpoint's shapes, then finalize for `world` ranks. */
static int zs_train_configure(const zs_cli *cli, int is_export, int phantom_run, int world,
                              zs_run_config *cfg)
{
    zs_run_config_defaults(cfg);
    if (phantom_run) /* the second step is the steady state */
        cfg->steps = 2;
    if (cli->val[OPT_CONFIG])
        ZS_TRY(zs_config_load_file(cli->val[OPT_CONFIG], cfg));
    if (cli->val[OPT_HF_CONFIG]) /* the model of a Hugging Face config.json */
        ZS_TRY(zs_hf_config_load(cli->val[OPT_HF_CONFIG], &cfg->model, zs_hf_ignored,
                                 sizeof zs_hf_ignored));
    zs_run_config from_config = *cfg;
    ZS_TRY(zs_cli_apply(cli, cfg, cli->val[OPT_CONFIG] != NULL));
    if (cli->val[OPT_INIT_FROM])
        ZS_TRY(zs_cli_init_from(cli, &from_config, cfg));
    /* the manifest checked (its checksum first) before any field of it is taken */
    if (cli->val[OPT_FROM] && is_export)
        ZS_TRY(zs_cli_from_checkpoint(cli, cfg));
    /* export takes no step: without batch options its engine holds the
     * activations of one sample, not the default micro-batch's */
    if (is_export && !cli->val[OPT_FROM] && !cli->val[OPT_CONFIG] &&
        !cli->val[OPT_MICRO_BATCH] && !cli->val[OPT_GRAD_ACCUM] && !cli->val[OPT_TRAIN_BATCH])
        cfg->micro_batch = 1;
    return zs_run_config_finalize(cfg, world);
}

/* The options of the run itself (memory sizes, backend, progress lines,
 * checkpoints), after finalize. 0, or an exit code after one line on err. */
static int zs_train_read_run_options(const zs_cli *cli, const zs_run_config *cfg, int rank,
                                     FILE *err, zs_train_options *o)
{
    long v;
    if (cli->val[OPT_HOST_MEMORY] && zs_parse_size(cli->val[OPT_HOST_MEMORY], &o->host_memory)) {
        if (err)
            fprintf(err, "zerosim: --host-memory: %s\n", zs_error_msg());
        return 1;
    }
    if ((cfg->offload_optimizer == ZS_OFFLOAD_NVME || cfg->offload_param == ZS_OFFLOAD_NVME) &&
        rank == 0 &&
        zs_check_nvme_path(cfg->nvme_path)) /* now, not after the engine is built */
        return zs_train_setup_failed(err);
    if (cli->val[OPT_DEVICE_MEMORY] && zs_parse_size(cli->val[OPT_DEVICE_MEMORY], &o->device_memory)) {
        if (err)
            fprintf(err, "zerosim: --device-memory: %s\n", zs_error_msg());
        return 1;
    }
    if (cli->val[OPT_BACKEND])
        o->backend = cli->val[OPT_BACKEND];
    if (cli->val[OPT_PRINT_EVERY]) {
        if (zs_parse_int(OPT_PRINT_EVERY, cli->val[OPT_PRINT_EVERY], 1, INT_MAX, &v))
            return zs_train_setup_failed(err);
        o->print_every = (int)v;
    } else if (cfg->steps_per_print > 0) { /* the config's steps_per_print */
        o->print_every = cfg->steps_per_print;
    }
    if (cli->val[OPT_SAVE_EVERY]) {
        if (!cli->val[OPT_SAVE_DIR]) {
            if (err)
                fprintf(err, "zerosim: --save-every needs --save-dir DIR, where to save\n");
            return 2;
        }
        if (zs_parse_int(OPT_SAVE_EVERY, cli->val[OPT_SAVE_EVERY], 1, INT_MAX, &v))
            return zs_train_setup_failed(err);
        o->save_every = (int)v;
    }
    o->save_dir = cli->val[OPT_SAVE_DIR];
    o->resume = cli->val[OPT_RESUME];
    if (o->save_dir && rank == 0 && zs_check_save_dir(o->save_dir)) /* now, not after training */
        return zs_train_setup_failed(err);
    return 0;
}

int zs_train_setup(int argc, char **argv, int rank, int world, zs_run_config *cfg,
                   zs_train_options *o, const char **report, const char **csv,
                   const char **trace, int *phantom_world, int *print_program)
{
    *phantom_world = 0;
    *print_program = 0;
    zs_cli cli;
    memset(&cli, 0, sizeof cli);
    FILE *err = rank == 0 ? stderr : NULL;
    int rc = zs_train_read_args(argc, argv, rank, err, &cli, o);
    if (!rc)
        rc = zs_train_read_mode(&cli, world, err, phantom_world, print_program);
    if (rc)
        return rc;
    if (*phantom_world)
        world = *phantom_world;
    int is_export = argv[0] && !strcmp(argv[0], "export");
    if (zs_train_configure(&cli, is_export, *phantom_world && !*print_program, world, cfg))
        return zs_train_setup_failed(err);
    if (!*phantom_world && !*print_program && zs_model_check_runnable(&cfg->model))
        return zs_train_setup_failed(err);
    if (*phantom_world && !*print_program && zs_model_check_phantom(&cfg->model))
        return zs_train_setup_failed(err);
    if ((rc = zs_train_read_run_options(&cli, cfg, rank, err, o)))
        return rc;
    if (rank == 0 && zs_hf_ignored[0] && o->log)
        fprintf(o->log, "zerosim: %s: ignored (no effect on memory, traffic or arithmetic): %s\n",
                cli.val[OPT_HF_CONFIG], zs_hf_ignored);
    if (zs_cli_outputs(&cli, cfg, o, rank, is_export))
        return zs_train_setup_failed(err);
    *report = cli.val[OPT_REPORT];
    *trace = cli.val[OPT_TRACE];
    o->trace = *trace != NULL;
    *csv = cli.val[OPT_CSV];
    if (*csv && rank == 0 && zs_report_prepare_dir(*csv)) /* now, not after training */
        return zs_train_setup_failed(err);
    return 0;
}

