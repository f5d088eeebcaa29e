/* zerosim — the `plan` command: per-device memory, traffic, fit and step
 * time for a model and cluster, from zerosim/plan.h. No MPI: it runs as a
 * plain program. Prints for people, or JSON (--json), or #-headed columns
 * (--csv FILE) for gnuplot; --deepspeed-estimate prints DeepSpeed's
 * estimate_zero{2,3}_model_states_mem_needs_all_cold table instead.
 *
 * Exit status: 0 when the plan was computed (whether or not it fits: see
 * "fits"), 1 for an impossible model or setup, 2 for a bad option.
 */
#include "plan_cmd.h"
#include "plan_cmd_impl.h"
#include "zerosim/compress.h"
#include "zerosim/config.h"
#include "zerosim/error.h"
#include "zerosim/plan.h"
#include "zerosim/report.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const zs_plan_usage =
    "usage: zerosim plan --params COUNT | --arch gpt --layers L --hidden C --heads H\n"
    "                    --vocab V --seq T   [cluster] [setup] [output]\n"
    "\n"
    "Per-device memory by category, traffic per step, whether it fits and a step-time\n"
    "estimate, from the closed forms that real zerosim runs are measured against.\n"
    "Runs without MPI. Sizes: bytes, or a number with KB/MB/GB/TB (1e3..) or\n"
    "KiB/MiB/GiB/TiB (2^10..). Lists (--dp, --stage) sweep and print one table.\n"
    "\n"
    "model:\n"
    "  --config FILE            the JSON configuration of zerosim train (its model,\n"
    "                           batch, stage, precision, bucket and live-parameter\n"
    "                           sizes, checkpointing, compression); flags override it\n"
    "  --params COUNT           parameters, plain or e notation (7.5e9)\n"
    "  --arch gpt               a GPT of --layers, --hidden, --heads, --vocab, --seq\n"
    "  --arch llama             a Llama of the same and --ffn-hidden F (4C), --kv-heads\n"
    "                           K (--heads), --tie-embeddings, --qkv-bias (Qwen2)\n"
    "  --hf-config FILE         the model of a Hugging Face config.json (Llama,\n"
    "                           Mistral, Mixtral, Qwen2, GPT-2); --seq overrides its\n"
    "                           context length\n"
    "  --largest-layer COUNT    parameters of the largest layer (stage 3's live gather;\n"
    "                           DeepSpeed's estimate); --params only\n"
    "  --seq T                  with --params: tokens per sample, for the FLOPs\n"
    "  --moe-experts E          with --arch gpt: E experts in every --moe-every K-th\n"
    "                           block (1), --moe-top-k 1|2, --capacity-factor F\n"
    "                           (docs/moe.md); the count splits dense and expert\n"
    "  --ep P                   with --moe-experts: experts dealt over expert-parallel\n"
    "                           groups of P devices; adds their all-to-alls (states in\n"
    "                           the layout zerosim train takes: docs/moe.md)\n"
    "  --ep-layout auto|deepspeed  as zerosim train's (auto)\n"
    "cluster:\n"
    "  --dp N[,N...]            data-parallel devices (1)\n"
    "  --tp T                   tensor-parallel devices per data-parallel rank (1;\n"
    "                           --arch gpt); the cluster has dp x tp devices\n"
    "  --pp P                   pipeline stages (1; --arch gpt, zerosim convention):\n"
    "                           memory of every stage, the most loaded decides the\n"
    "                           fit; --pp-schedule gpipe|1f1b, --pp-partition\n"
    "                           uniform|parameters as zerosim train's\n"
    "  --virtual-stages v       with --pp-schedule interleaved: model chunks per\n"
    "                           pipeline rank (chunk c of rank r is stage c*P + r)\n"
    "  --sequence-parallel      with --tp: sequence parallelism (megatron convention:\n"
    "                           Korthikanti et al.'s activations sbh/t (34 + 5as/h))\n"
    "  --cp C                   context parallelism: each sequence split over C\n"
    "                           devices (ring attention); --dp counts data-parallel\n"
    "                           ranks, ZeRO partitions over dp x C (zerosim convention)\n"
    "  --cp-attention ring|ulysses  with --cp: ring attention (ring) or\n"
    "                           DeepSpeed-Ulysses' all-to-alls of the heads\n"
    "  --devices-per-node N     devices per node (8); aliases --gpus-per-node,\n"
    "                           --ranks-per-node\n"
    "  --nodes N                nodes (--dp defaults to nodes x devices per node)\n"
    "  --device-memory SIZE     memory per device, e.g. 32GB, 80GiB, 80e9\n"
    "  --flops RATE             FLOP/s per device (312e12)\n"
    "  --bw-intra B --lat-intra S   bytes/s and seconds inside a node (150e9, 5e-6)\n"
    "  --bw-inter B --lat-inter S   bytes/s and seconds between nodes (25e9, 10e-6)\n"
    "  --bw-link B              bytes/s of a node's link shared by its devices (not\n"
    "                           set: each device has --bw-inter of its own); a\n"
    "                           collective with s of a node's ranks crossing at\n"
    "                           once gets B/s each (flat ring: s = 1)\n"
    "  --calibration FILE       JSON from zerosim bench: gemm_flops, intra_latency_s,\n"
    "                           intra_bandwidth, inter_latency_s, inter_bandwidth,\n"
    "                           inter_link_bandwidth\n"
    "                           (the flags above override the file)\n"
    "  --overlap                step time: communication hides wholly behind\n"
    "                           compute (the best case; --overlap-comm is what the\n"
    "                           engine does and the memory it costs)\n"
    "setup:\n"
    "  --stage S[,S...]         ZeRO stage 0-3 (0)\n"
    "  --precision fp32|bf16|fp16   parameters (fp32); bf16/fp16 add an fp32 master\n"
    "  --grad-accum-dtype fp32|bf16|fp16  gradients accumulated and reduced in fp32\n"
    "                           or the working precision, as a run does (--precision)\n"
    "  --grad-precision fp32|bf16|fp16  gradient memory at another size (as\n"
    "                           --grad-accum-dtype)\n"
    "  --optimizer adamw|sgd|lamb|onebitadam  (adamw; onebitadam: a step after its\n"
    "                           freeze, stage 0)\n"
    "  --micro-batch N --grad-accum N   samples per micro-batch, micro-batches per step\n"
    "  --checkpoint-activations off|every:K|sqrt   (--arch gpt)\n"
    "  --compression none|topk:F|int8|sign   --no-error-feedback   --deterministic\n"
    "  --hierarchical           two-level reduce-scatter and allgather, inside each\n"
    "                           node then across nodes, as zerosim train --hierarchical\n"
    "                           (zerosim.hierarchical_collectives): both levels'\n"
    "                           traffic and time\n"
    "  --quantized-weights --hpz-partition-size K --quantized-gradients   ZeRO++ (stage\n"
    "                           3, a GPT): qwZ, hpZ, qgZ as zerosim train runs them;\n"
    "                           the bytes across each node's link per step\n"
    "  --grad-reduce micro-batch|step   stages 0-1: gradients reduced after every\n"
    "                           micro-batch, or once per step after accumulating\n"
    "                           them (DeepSpeed's schedule); no effect in stages 2-3.\n"
    "                           Default: the config's, else micro-batch; step with\n"
    "                           --convention paper or megatron\n"
    "  --overlap-comm on|off    reduce-scatters behind the backward: a bucket's\n"
    "                           buffer lives until its reduction ends (default:\n"
    "                           the config's, else on in stage 3)\n"
    "  --convention zerosim|paper|megatron   whose bytes (zerosim: what a zerosim run\n"
    "                           measures; paper: ZeRO paper; megatron: Megatron-LM's\n"
    "                           distributed optimizer, stage 1 = distributed)\n"
    "output:\n"
    "  --max-model              also the largest model that fits --device-memory\n"
    "  --weight-format F        also the bytes of the weights held for inference in\n"
    "                           int8 (per tensor), int8-zp or nf4 (blocks of 64; with\n"
    "                           --double-quant, 8-bit scales): the linear weights of\n"
    "                           --arch gpt (every parameter without it) quantized, the\n"
    "                           rest fp32 (docs/quantization.md)\n"
    "  --json                   one JSON object (a sweep: {\"plans\": [...]})\n"
    "  --csv FILE               #-headed columns, one row per (stage, N); - = stdout\n"
    "offload (ZeRO-Offload; the zerosim convention):\n"
    "  --offload-optimizer none|cpu|nvme  master, m, v and the optimizer step on the\n"
    "                           host or in files: device, host and nvme bytes, the\n"
    "                           host's per node, the transfers, their time\n"
    "  --offload-param none|cpu|nvme  stage 3: the parameter shard off the device\n"
    "  --host-memory SIZE       host memory per node, for the host tier's fit\n"
    "  --bw-host B --bw-nvme B  bytes/s device<->host (25e9) and to files (3e9)\n"
    "  --host-optimizer-rate R  host optimizer elements/s (not given: left out)\n"
    "  --deepspeed-estimate     DeepSpeed's estimate_zero{2,3}_model_states_mem_needs\n"
    "                           table for --stage 2 or 3, --params and --largest-layer\n"
    "                           (or a model: --arch, --hf-config), --nodes,\n"
    "                           --gpus-per-node, --buffer-factor X (1.5);\n"
    "                           --offload-optimizer cpu|none, --offload-param cpu|none,\n"
    "                           --zero-init 0|1 keep only the matching rows\n";

enum {
    P_PARAMS = 256, P_ARCH, P_LAYERS, P_HIDDEN, P_HEADS, P_VOCAB, P_SEQ, P_LARGEST, P_DP,
    P_DPN, P_NODES, P_DEVMEM, P_FLOPS, P_BW_INTRA, P_LAT_INTRA, P_BW_INTER, P_LAT_INTER,
    P_CALIB, P_OVERLAP, P_STAGE, P_PRECISION, P_GRAD_PRECISION, P_GRAD_ACCUM_DTYPE, P_OPTIMIZER, P_MICRO,
    P_ACCUM, P_CKPT, P_COMP, P_NO_EF, P_DET, P_CONVENTION, P_MAX_MODEL, P_JSON, P_CSV,
    P_DS, P_BUFFER, P_OFF_OPT, P_OFF_PARAM, P_ZERO_INIT, P_HOSTMEM, P_BW_HOST, P_BW_NVME,
    P_HOST_OPT, P_HELP, P_CONFIG, P_TP, P_SP, P_CP, P_CP_ATTENTION,
    P_GRAD_REDUCE, P_OVERLAP_COMM,
    P_MOE_EXPERTS, P_MOE_EVERY, P_MOE_TOP_K, P_CAPACITY_FACTOR, P_EP, P_EP_LAYOUT,
    P_PP, P_PP_SCHEDULE, P_PP_PARTITION, P_VIRTUAL_STAGES,
    P_WFORMAT, P_WDQ, P_QWZ, P_HPZ, P_QGZ, P_BW_LINK, P_HIER,
    P_HF_CONFIG, P_FFN_HIDDEN, P_KV_HEADS, P_TIE_EMB, P_QKV_BIAS, P_LAST
};

static const struct option zs_plan_options[] = {
    {"params", required_argument, NULL, P_PARAMS},
    {"hf-config", required_argument, NULL, P_HF_CONFIG},
    {"ffn-hidden", required_argument, NULL, P_FFN_HIDDEN},
    {"kv-heads", required_argument, NULL, P_KV_HEADS},
    {"tie-embeddings", no_argument, NULL, P_TIE_EMB},
    {"qkv-bias", no_argument, NULL, P_QKV_BIAS},
    {"weight-format", required_argument, NULL, P_WFORMAT},
    {"double-quant", no_argument, NULL, P_WDQ},
    {"arch", required_argument, NULL, P_ARCH},
    {"layers", required_argument, NULL, P_LAYERS},
    {"hidden", required_argument, NULL, P_HIDDEN},
    {"heads", required_argument, NULL, P_HEADS},
    {"vocab", required_argument, NULL, P_VOCAB},
    {"seq", required_argument, NULL, P_SEQ},
    {"largest-layer", required_argument, NULL, P_LARGEST},
    {"moe-experts", required_argument, NULL, P_MOE_EXPERTS},
    {"moe-every", required_argument, NULL, P_MOE_EVERY},
    {"moe-top-k", required_argument, NULL, P_MOE_TOP_K},
    {"capacity-factor", required_argument, NULL, P_CAPACITY_FACTOR},
    {"ep", required_argument, NULL, P_EP},
    {"ep-layout", required_argument, NULL, P_EP_LAYOUT},
    {"dp", required_argument, NULL, P_DP},
    {"devices-per-node", required_argument, NULL, P_DPN},
    {"gpus-per-node", required_argument, NULL, P_DPN},
    {"ranks-per-node", required_argument, NULL, P_DPN},
    {"nodes", required_argument, NULL, P_NODES},
    {"device-memory", required_argument, NULL, P_DEVMEM},
    {"flops", required_argument, NULL, P_FLOPS},
    {"bw-intra", required_argument, NULL, P_BW_INTRA},
    {"lat-intra", required_argument, NULL, P_LAT_INTRA},
    {"bw-inter", required_argument, NULL, P_BW_INTER},
    {"bw-link", required_argument, NULL, P_BW_LINK},
    {"lat-inter", required_argument, NULL, P_LAT_INTER},
    {"calibration", required_argument, NULL, P_CALIB},
    {"overlap", no_argument, NULL, P_OVERLAP},
    {"stage", required_argument, NULL, P_STAGE},
    {"precision", required_argument, NULL, P_PRECISION},
    {"grad-precision", required_argument, NULL, P_GRAD_PRECISION},
    {"grad-accum-dtype", required_argument, NULL, P_GRAD_ACCUM_DTYPE},
    {"optimizer", required_argument, NULL, P_OPTIMIZER},
    {"micro-batch", required_argument, NULL, P_MICRO},
    {"grad-accum", required_argument, NULL, P_ACCUM},
    {"checkpoint-activations", required_argument, NULL, P_CKPT},
    {"compression", required_argument, NULL, P_COMP},
    {"quantized-weights", no_argument, NULL, P_QWZ},
    {"hierarchical", no_argument, NULL, P_HIER},
    {"hpz-partition-size", required_argument, NULL, P_HPZ},
    {"quantized-gradients", no_argument, NULL, P_QGZ},
    {"no-error-feedback", no_argument, NULL, P_NO_EF},
    {"deterministic", no_argument, NULL, P_DET},
    {"convention", required_argument, NULL, P_CONVENTION},
    {"max-model", no_argument, NULL, P_MAX_MODEL},
    {"json", no_argument, NULL, P_JSON},
    {"csv", required_argument, NULL, P_CSV},
    {"deepspeed-estimate", no_argument, NULL, P_DS},
    {"buffer-factor", required_argument, NULL, P_BUFFER},
    {"offload-optimizer", required_argument, NULL, P_OFF_OPT},
    {"host-memory", required_argument, NULL, P_HOSTMEM},
    {"bw-host", required_argument, NULL, P_BW_HOST},
    {"bw-nvme", required_argument, NULL, P_BW_NVME},
    {"host-optimizer-rate", required_argument, NULL, P_HOST_OPT},
    {"offload-param", required_argument, NULL, P_OFF_PARAM},
    {"zero-init", required_argument, NULL, P_ZERO_INIT},
    {"help", no_argument, NULL, P_HELP},
    {"config", required_argument, NULL, P_CONFIG},
    {"tp", required_argument, NULL, P_TP},
    {"sequence-parallel", no_argument, NULL, P_SP},
    {"cp", required_argument, NULL, P_CP},
    {"cp-attention", required_argument, NULL, P_CP_ATTENTION},
    {"grad-reduce", required_argument, NULL, P_GRAD_REDUCE},
    {"overlap-comm", required_argument, NULL, P_OVERLAP_COMM},
    {"pp", required_argument, NULL, P_PP},
    {"pp-schedule", required_argument, NULL, P_PP_SCHEDULE},
    {"pp-partition", required_argument, NULL, P_PP_PARTITION},
    {"virtual-stages", required_argument, NULL, P_VIRTUAL_STAGES},
    {NULL, 0, NULL, 0},
};

#define ZS_PLAN_MAX_LIST 64

typedef struct {
    const char *val[P_LAST];
    zs_plan_input in;
    int dps[ZS_PLAN_MAX_LIST], ndp;
    int stages[ZS_PLAN_MAX_LIST], nstage;
    int nodes;
} zs_plan_cli;

static const char *zs_plan_opt_name(int id)
{
    for (const struct option *o = zs_plan_options; o->name; o++)
        if (o->val == id)
            return o->name;
    return "?";
}

/* A whole number from plain or e notation ("7.5e9"), within [lo, hi]. */
static int zs_plan_count(int id, const char *s, double lo, double hi, double *out)
{
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || v != floor(v) || v < lo || v > hi)
        ZS_FAIL("--%s must be a whole number from %.0f to %.0f (plain or e notation, e.g. "
                "7.5e9), got \"%s\"", zs_plan_opt_name(id), lo, hi, s);
    *out = v;
    return 0;
}

static int zs_plan_int(int id, const char *s, int lo, int hi, int *out)
{
    double v;
    ZS_TRY(zs_plan_count(id, s, lo, hi, &v));
    *out = (int)v;
    return 0;
}

static int zs_plan_real(int id, const char *s, double *out, int zero_ok)
{
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || v < 0 || (!zero_ok && v == 0))
        ZS_FAIL("--%s must be a %s number (e notation allowed), got \"%s\"", zs_plan_opt_name(id),
                zero_ok ? "non-negative" : "positive", s);
    *out = v;
    return 0;
}

/* "1,4,16": at most ZS_PLAN_MAX_LIST integers in [lo, hi]. */
static int zs_plan_list(int id, const char *s, int lo, int hi, int *out, int *n)
{
    *n = 0;
    const char *p = s;
    do {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < lo || v > hi || (*end && *end != ',') ||
            *n >= ZS_PLAN_MAX_LIST) {
            char eg[32]; /* an example within the range */
            if (hi - lo <= 16)
                snprintf(eg, sizeof eg, "%d,%d", lo, hi);
            else
                snprintf(eg, sizeof eg, "%d,%d,%d", lo, lo * 4, lo * 16);
            ZS_FAIL("--%s must be a comma-separated list of up to %d integers from %d to %d "
                    "(e.g. %s), got \"%s\"", zs_plan_opt_name(id), ZS_PLAN_MAX_LIST, lo, hi, eg, s);
        }
        out[(*n)++] = (int)v;
        p = *end ? end + 1 : end;
    } while (*p);
    if (p > s && p[-1] == ',')
        ZS_FAIL("--%s has an empty item: \"%s\"", zs_plan_opt_name(id), s);
    return 0;
}

static int zs_plan_dtype(int id, const char *s, zs_dtype *out)
{
    if (!strcmp(s, "fp32"))
        *out = ZS_DTYPE_F32;
    else if (!strcmp(s, "bf16"))
        *out = ZS_DTYPE_BF16;
    else if (!strcmp(s, "fp16"))
        *out = ZS_DTYPE_F16;
    else
        ZS_FAIL("--%s must be fp32, bf16 or fp16, got \"%s\"", zs_plan_opt_name(id), s);
    return 0;
}

/* --hf-config: the file's keys that change nothing, listed on stderr once
 * the plan is computed (stdout is the plan, or its JSON) */
static char zs_plan_hf_ignored[1024];

/* The model: a bare parameter count, or a decoder's shape (options,
 * --config or --hf-config). */
static int zs_plan_apply_model(zs_plan_cli *cl)
{
    const char *const *v = cl->val;
    zs_plan_input *in = &cl->in;
    zs_run_config *c = &in->cfg;
    double x;
    if (v[P_PARAMS] && v[P_ARCH])
        ZS_FAIL("give --params or --arch, not both");
    if (v[P_HF_CONFIG] && (v[P_PARAMS] || v[P_ARCH]))
        ZS_FAIL("--hf-config gives the model: drop --%s", v[P_PARAMS] ? "params" : "arch");
    if (v[P_PARAMS] && v[P_CONFIG])
        ZS_FAIL("give --params or --config, not both (the config describes a GPT)");
    if (v[P_CONFIG]) { /* the run's configuration, as zerosim train reads it */
        zs_run_config_defaults(c);
        ZS_TRY(zs_config_load_file(v[P_CONFIG], c));
        if (!zs_model_is_decoder(&c->model))
            ZS_FAIL("%s: the planner's architectures are: gpt, llama", v[P_CONFIG]);
        in->keep_batch = 1;
    }
    if (v[P_HF_CONFIG]) { /* a Hugging Face config.json: the model's shape */
        if (!v[P_CONFIG]) { /* the run's defaults, and the planner's batch */
            zs_run_config_defaults(c);
            c->micro_batch = c->grad_accum = 1;
        }
        ZS_TRY(zs_hf_config_load(v[P_HF_CONFIG], &c->model, zs_plan_hf_ignored,
                                 sizeof zs_plan_hf_ignored));
    }
    if (v[P_PARAMS]) {
        ZS_TRY(zs_plan_count(P_PARAMS, v[P_PARAMS], 1, 4503599627370496.0, &x));
        in->num_params = (size_t)x;
        static const int arch_only[] = {P_LAYERS, P_HIDDEN, P_HEADS, P_VOCAB};
        for (size_t i = 0; i < sizeof arch_only / sizeof arch_only[0]; i++)
            if (v[arch_only[i]])
                ZS_FAIL("--%s describes a GPT: use it with --arch gpt, not --params",
                        zs_plan_opt_name(arch_only[i]));
        if (v[P_SEQ])
            ZS_TRY(zs_plan_int(P_SEQ, v[P_SEQ], 1, ZS_BOUND_PLAN_SEQ_MAX, &in->seq_len));
    } else if (v[P_ARCH] || v[P_CONFIG] || v[P_HF_CONFIG]) {
        if (v[P_ARCH] && strcmp(v[P_ARCH], "gpt") && strcmp(v[P_ARCH], "llama"))
            ZS_FAIL("--arch must be \"gpt\" or \"llama\", got \"%s\"", v[P_ARCH]);
        in->has_arch = 1;
        if (v[P_ARCH])
            c->model.kind = strcmp(v[P_ARCH], "llama") ? ZS_MODEL_GPT : ZS_MODEL_LLAMA;
        static const struct { int id, lo, hi; size_t off; } dims[] = {
            {P_LAYERS, 1, ZS_BOUND_LAYERS_MAX, offsetof(zs_model_config, n_layer)},
            {P_HIDDEN, 1, ZS_BOUND_HIDDEN_MAX, offsetof(zs_model_config, n_embd)},
            {P_HEADS, 1, ZS_BOUND_HEADS_MAX, offsetof(zs_model_config, n_head)},
            {P_VOCAB, ZS_BOUND_VOCAB_MIN, ZS_BOUND_VOCAB_MAX, offsetof(zs_model_config, vocab)},
            {P_SEQ, 1, ZS_BOUND_SEQ_MAX, offsetof(zs_model_config, seq_len)},
        };
        for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
            if (!v[dims[i].id] && (v[P_CONFIG] || v[P_HF_CONFIG]))
                continue; /* the config's */
            if (!v[dims[i].id])
                ZS_FAIL("--arch gpt needs --layers, --hidden, --heads, --vocab and --seq: "
                        "--%s is missing", zs_plan_opt_name(dims[i].id));
            ZS_TRY(zs_plan_int(dims[i].id, v[dims[i].id], dims[i].lo, dims[i].hi,
                               (int *)((char *)&c->model + dims[i].off)));
        }
        if (c->model.n_embd % c->model.n_head)
            ZS_FAIL("--heads (%d) must divide --hidden (%d)", c->model.n_head, c->model.n_embd);
        if (v[P_FFN_HIDDEN])
            ZS_TRY(zs_plan_int(P_FFN_HIDDEN, v[P_FFN_HIDDEN], 1, 1 << 22, &c->model.ffn_hidden));
        if (v[P_KV_HEADS])
            ZS_TRY(zs_plan_int(P_KV_HEADS, v[P_KV_HEADS], 1, ZS_BOUND_HEADS_MAX,
                               &c->model.n_kv_head));
        if (c->model.kind == ZS_MODEL_LLAMA && !c->model.ffn_hidden)
            c->model.ffn_hidden = 4 * c->model.n_embd; /* the defaults the count takes */
        if (c->model.kind == ZS_MODEL_LLAMA && !c->model.n_kv_head)
            c->model.n_kv_head = c->model.n_head;
        if (v[P_TIE_EMB])
            c->model.tie_embeddings = 1;
        if (v[P_QKV_BIAS])
            c->model.qkv_bias = 1;
        if ((v[P_FFN_HIDDEN] || v[P_KV_HEADS] || v[P_TIE_EMB] || v[P_QKV_BIAS]) &&
            c->model.kind != ZS_MODEL_LLAMA)
            ZS_FAIL("--ffn-hidden, --kv-heads, --tie-embeddings and --qkv-bias describe a "
                    "Llama: use them with --arch llama");
        if (v[P_MOE_EXPERTS])
            ZS_TRY(zs_plan_int(P_MOE_EXPERTS, v[P_MOE_EXPERTS], 0, ZS_BOUND_MOE_EXPERTS_MAX,
                               &c->model.moe_experts));
        if (v[P_MOE_EVERY])
            ZS_TRY(zs_plan_int(P_MOE_EVERY, v[P_MOE_EVERY], 1, ZS_BOUND_MOE_EVERY_MAX,
                               &c->model.moe_every));
        if (v[P_MOE_TOP_K])
            ZS_TRY(zs_plan_int(P_MOE_TOP_K, v[P_MOE_TOP_K], 1, ZS_BOUND_MOE_TOP_K_MAX,
                               &c->model.moe_top_k));
        if (v[P_CAPACITY_FACTOR])
            ZS_TRY(zs_plan_real(P_CAPACITY_FACTOR, v[P_CAPACITY_FACTOR],
                                &c->model.moe_capacity_factor, 0));
        if (v[P_EP])
            ZS_TRY(zs_plan_int(P_EP, v[P_EP], 1, ZS_BOUND_EP_MAX, &c->ep));
        if (v[P_EP_LAYOUT] && zs_ep_layout_parse(v[P_EP_LAYOUT], &c->ep_layout))
            ZS_FAIL("--ep-layout must be \"auto\" or \"deepspeed\", got \"%s\"", v[P_EP_LAYOUT]);
    } else if (!v[P_HELP]) {
        ZS_FAIL("no model: give --params COUNT, or --arch gpt with --layers, --hidden, --heads, "
                "--vocab and --seq");
    }
    if (!in->has_arch && (v[P_MOE_EXPERTS] || v[P_MOE_EVERY] || v[P_MOE_TOP_K] ||
                          v[P_CAPACITY_FACTOR] || v[P_EP] || v[P_EP_LAYOUT]))
        ZS_FAIL("--moe-experts and its options describe a GPT: use them with --arch gpt");
    if (v[P_LARGEST]) {
        if (in->has_arch)
            ZS_FAIL("--largest-layer is for --params; a GPT's layers are known");
        ZS_TRY(zs_plan_count(P_LARGEST, v[P_LARGEST], 0, 4503599627370496.0, &x));
        in->largest_layer = (size_t)x;
    }
    return 0;
}

/* The cluster: stages, devices, memory, offload and the calibration. */
static int zs_plan_apply_cluster(zs_plan_cli *cl)
{
    const char *const *v = cl->val;
    zs_plan_input *in = &cl->in;
    zs_run_config *c = &in->cfg;
    if (v[P_STAGE])
        ZS_TRY(zs_plan_list(P_STAGE, v[P_STAGE], 0, 3, cl->stages, &cl->nstage));
    else
        cl->stages[0] = v[P_CONFIG] ? c->stage : 0, cl->nstage = 1;
    if (v[P_DPN])
        ZS_TRY(zs_plan_int(P_DPN, v[P_DPN], 1, ZS_BOUND_RANKS_MAX, &in->devices_per_node));
    cl->nodes = 0;
    if (v[P_NODES])
        ZS_TRY(zs_plan_int(P_NODES, v[P_NODES], 1, ZS_BOUND_RANKS_MAX, &cl->nodes));
    if (v[P_DP])
        ZS_TRY(zs_plan_list(P_DP, v[P_DP], 1, ZS_PLAN_DEVICES_MAX, cl->dps, &cl->ndp));
    else if (cl->nodes && (long long)cl->nodes * in->devices_per_node > ZS_PLAN_DEVICES_MAX)
        ZS_FAIL("--nodes %d x --devices-per-node %d is %lld devices; the planner takes at "
                "most %d (give fewer nodes, or --dp)", cl->nodes, in->devices_per_node,
                (long long)cl->nodes * in->devices_per_node, ZS_PLAN_DEVICES_MAX);
    else
        cl->dps[0] = cl->nodes ? cl->nodes * in->devices_per_node : 1, cl->ndp = 1;
    if (v[P_DEVMEM] && zs_parse_size(v[P_DEVMEM], &in->device_memory)) {
        /* the message is formatted from a copy: formatting the error buffer
         * into itself is undefined (it printed the option twice) */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zs_error_msg());
        ZS_FAIL("--device-memory: %s", msg);
    }
    if (v[P_HOSTMEM] && zs_parse_size(v[P_HOSTMEM], &in->host_memory)) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zs_error_msg());
        ZS_FAIL("--host-memory: %s", msg);
    }
    /* offload: --deepspeed-estimate reads the same options as row filters */
    if (v[P_OFF_OPT] && !v[P_DS]) {
        if (zs_offload_parse(v[P_OFF_OPT], &c->offload_optimizer))
            ZS_FAIL("--offload-optimizer must be none, cpu or nvme, got \"%s\"", v[P_OFF_OPT]);
        if (c->offload_optimizer == ZS_OFFLOAD_NVME && !c->nvme_path[0])
            snprintf(c->nvme_path, sizeof c->nvme_path, "(planned)"); /* no files are made */
    }
    if (v[P_OFF_PARAM] && !v[P_DS] && zs_offload_parse(v[P_OFF_PARAM], &c->offload_param))
        ZS_FAIL("--offload-param must be none, cpu or nvme, got \"%s\"", v[P_OFF_PARAM]);
    if (c->offload_param == ZS_OFFLOAD_NVME && !c->nvme_path[0]) /* alone, too */
        snprintf(c->nvme_path, sizeof c->nvme_path, "(planned)");
    if (v[P_CALIB])
        ZS_TRY(zs_steptime_load_calibration(v[P_CALIB], &in->cal));
    static const struct { int id; size_t off; int zero_ok; } reals[] = {
        {P_FLOPS, offsetof(zs_steptime_calib, gemm_flops), 0},
        {P_BW_INTRA, offsetof(zs_steptime_calib, intra_bandwidth), 0},
        {P_LAT_INTRA, offsetof(zs_steptime_calib, intra_latency_s), 1},
        {P_BW_INTER, offsetof(zs_steptime_calib, inter_bandwidth), 0},
        {P_BW_LINK, offsetof(zs_steptime_calib, inter_link_bandwidth), 0},
        {P_LAT_INTER, offsetof(zs_steptime_calib, inter_latency_s), 1},
        {P_BW_HOST, offsetof(zs_steptime_calib, host_bandwidth), 0},
        {P_BW_NVME, offsetof(zs_steptime_calib, nvme_bandwidth), 0},
        {P_HOST_OPT, offsetof(zs_steptime_calib, host_optimizer_elems_per_s), 0},
    };
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++)
        if (v[reals[i].id])
            ZS_TRY(zs_plan_real(reals[i].id, v[reals[i].id],
                                (double *)((char *)&in->cal + reals[i].off), reals[i].zero_ok));
    return 0;
}

/* The run's settings: precision, optimizer, batch, checkpointing,
 * parallelism, ZeRO++, compression and the convention. */
static int zs_plan_apply_run(zs_plan_cli *cl)
{
    const char *const *v = cl->val;
    zs_plan_input *in = &cl->in;
    zs_run_config *c = &in->cfg;
    in->overlap = v[P_OVERLAP] != NULL;
    if (v[P_PRECISION])
        ZS_TRY(zs_plan_dtype(P_PRECISION, v[P_PRECISION], &c->precision));
    if (v[P_GRAD_ACCUM_DTYPE]) {
        zs_dtype g;
        ZS_TRY(zs_plan_dtype(P_GRAD_ACCUM_DTYPE, v[P_GRAD_ACCUM_DTYPE], &g));
        c->grad_accum_dtype = (int)g;
    }
    in->grad_precision = zs_run_config_grad_dtype(c);
    if (v[P_GRAD_PRECISION])
        ZS_TRY(zs_plan_dtype(P_GRAD_PRECISION, v[P_GRAD_PRECISION], &in->grad_precision));
    if (v[P_OPTIMIZER]) {
        if (zs_optim_parse(v[P_OPTIMIZER], &c->optimizer))
            ZS_FAIL("--optimizer must be adamw, sgd, lamb or onebitadam, got \"%s\"",
                    v[P_OPTIMIZER]);
    }
    if (v[P_MICRO])
        ZS_TRY(zs_plan_int(P_MICRO, v[P_MICRO], 1, ZS_BOUND_BATCH_MAX, &c->micro_batch));
    if (v[P_ACCUM])
        ZS_TRY(zs_plan_int(P_ACCUM, v[P_ACCUM], 1, ZS_BOUND_BATCH_MAX, &c->grad_accum));
    if (v[P_CKPT]) {
        const char *s = v[P_CKPT];
        if (!strcmp(s, "off")) {
            c->checkpoint_mode = ZS_CKPT_OFF;
        } else if (!strcmp(s, "sqrt")) {
            c->checkpoint_mode = ZS_CKPT_SQRT;
        } else if (!strncmp(s, "every:", 6)) {
            c->checkpoint_mode = ZS_CKPT_EVERY;
            ZS_TRY(zs_plan_int(P_CKPT, s + 6, 1, ZS_BOUND_CKPT_EVERY_MAX, &c->checkpoint_value));
        } else {
            ZS_FAIL("--checkpoint-activations must be off, every:K or sqrt, got \"%s\"", s);
        }
    }
    if (v[P_TP])
        ZS_TRY(zs_plan_int(P_TP, v[P_TP], 1, ZS_BOUND_TP_MAX, &c->tp));
    if (v[P_PP])
        ZS_TRY(zs_plan_int(P_PP, v[P_PP], 1, ZS_BOUND_PP_MAX, &c->pp));
    if (v[P_CP])
        ZS_TRY(zs_plan_int(P_CP, v[P_CP], 1, ZS_BOUND_CP_MAX, &c->cp));
    if (v[P_CP_ATTENTION] && zs_cp_attention_parse(v[P_CP_ATTENTION], &c->cp_attention))
        ZS_FAIL("--cp-attention must be ring or ulysses, got \"%s\"", v[P_CP_ATTENTION]);
    if (v[P_VIRTUAL_STAGES])
        ZS_TRY(zs_plan_int(P_VIRTUAL_STAGES, v[P_VIRTUAL_STAGES], 1, ZS_BOUND_VIRTUAL_STAGES_MAX,
                           &c->virtual_stages));
    if (v[P_PP_SCHEDULE] && zs_pp_schedule_parse(v[P_PP_SCHEDULE], &c->pp_schedule))
        ZS_FAIL("--pp-schedule must be gpipe, 1f1b or interleaved, got \"%s\"", v[P_PP_SCHEDULE]);
    if (v[P_PP_PARTITION] && zs_pp_partition_parse(v[P_PP_PARTITION], &c->pp_partition))
        ZS_FAIL("--pp-partition must be uniform or parameters, got \"%s\"", v[P_PP_PARTITION]);
    in->sequence_parallel = v[P_SP] != NULL;
    if (v[P_COMP] && zs_comp_parse(v[P_COMP], &c->compression))
        return -1;
    if (v[P_QWZ])
        c->quantized_weights = 1;
    if (v[P_HIER])
        c->hierarchical = 1;
    if (v[P_QGZ])
        c->quantized_gradients = 1;
    if (v[P_HPZ])
        ZS_TRY(zs_plan_int(P_HPZ, v[P_HPZ], 1, ZS_BOUND_RANKS_MAX, &c->hpz_partition_size));
    if (v[P_NO_EF])
        c->error_feedback = 0;
    if (v[P_DET])
        c->deterministic = 1;
    if (v[P_CONVENTION]) {
        const char *s = v[P_CONVENTION];
        if (!strcmp(s, "zerosim"))
            in->convention = ZS_PLAN_ZEROSIM;
        else if (!strcmp(s, "paper"))
            in->convention = ZS_PLAN_PAPER;
        else if (!strcmp(s, "megatron"))
            in->convention = ZS_PLAN_MEGATRON;
        else
            ZS_FAIL("--convention must be zerosim, paper or megatron, got \"%s\"", s);
        /* the paper's and Megatron's stages 0 and 1 reduce once per step */
        if (in->convention != ZS_PLAN_ZEROSIM)
            c->grad_reduce = ZS_GRAD_REDUCE_STEP;
    }
    if (v[P_GRAD_REDUCE] && zs_grad_reduce_parse(v[P_GRAD_REDUCE], &c->grad_reduce))
        ZS_FAIL("--grad-reduce must be micro-batch or step, got \"%s\"", v[P_GRAD_REDUCE]);
    if (v[P_OVERLAP_COMM]) {
        if (strcmp(v[P_OVERLAP_COMM], "on") && strcmp(v[P_OVERLAP_COMM], "off"))
            ZS_FAIL("--overlap-comm must be on or off, got \"%s\"", v[P_OVERLAP_COMM]);
        c->overlap_comm = strcmp(v[P_OVERLAP_COMM], "on") == 0;
    }
    return 0;
}

static int zs_plan_apply(zs_plan_cli *cl)
{
    ZS_TRY(zs_plan_apply_model(cl));
    ZS_TRY(zs_plan_apply_cluster(cl));
    return zs_plan_apply_run(cl);
}

/* DeepSpeed's table, in its own format (sizes in GiB, printed "GB"). */
static int zs_plan_deepspeed(FILE *f, const zs_plan_cli *cl)
{
    const zs_plan_input *in = &cl->in;
    const char *const *v = cl->val;
    if (cl->nstage != 1 || cl->ndp != 1)
        ZS_FAIL("--deepspeed-estimate takes one --stage (2 or 3) and no --dp list");
    double total = in->has_arch ? (double)zs_model_count_params(&in->cfg.model)
                                : (double)in->num_params;
    double largest = in->has_arch ? (double)zs_plan_largest_layer(&in->cfg.model)
                                  : (double)in->largest_layer;
    int gpn = v[P_DPN] ? in->devices_per_node : 1;
    int nodes = cl->nodes ? cl->nodes : 1;
    if (v[P_DP] && !cl->nodes)
        nodes = (cl->dps[0] + gpn - 1) / gpn;
    double bf = 1.5;
    if (v[P_BUFFER])
        ZS_TRY(zs_plan_real(P_BUFFER, v[P_BUFFER], &bf, 0));
    int want_oo = -1, want_op = -1, want_zi = -1;
    if (v[P_OFF_OPT]) {
        if (strcmp(v[P_OFF_OPT], "cpu") && strcmp(v[P_OFF_OPT], "none"))
            ZS_FAIL("--offload-optimizer must be cpu or none, got \"%s\"", v[P_OFF_OPT]);
        want_oo = !strcmp(v[P_OFF_OPT], "cpu");
    }
    if (v[P_OFF_PARAM]) {
        if (strcmp(v[P_OFF_PARAM], "cpu") && strcmp(v[P_OFF_PARAM], "none"))
            ZS_FAIL("--offload-param must be cpu or none, got \"%s\"", v[P_OFF_PARAM]);
        want_op = !strcmp(v[P_OFF_PARAM], "cpu");
    }
    if (v[P_ZERO_INIT]) {
        if (strcmp(v[P_ZERO_INIT], "0") && strcmp(v[P_ZERO_INIT], "1"))
            ZS_FAIL("--zero-init must be 0 or 1, got \"%s\"", v[P_ZERO_INIT]);
        want_zi = v[P_ZERO_INIT][0] == '1';
    }
    int st = cl->stages[0];
    if (st == 2 && (want_op >= 0 || want_zi >= 0))
        ZS_FAIL("DeepSpeed's ZeRO-2 estimate has --offload-optimizer only");
    zs_ds_estimate_row rows[6];
    int n = zs_plan_deepspeed_rows(st, total, largest, gpn, nodes, bf, rows);
    if (n < 0)
        return -1;
    fprintf(f, "Estimated memory needed for params, optim states and gradients for a:\n"
            "HW: Setup with %d %s, %d %s per node.\n", nodes, nodes > 1 ? "nodes" : "node", gpn,
            gpn > 1 ? "GPUs" : "GPU");
    if (st == 2)
        fprintf(f, "SW: Model with %.0fM total params.\n", trunc(total / 1e6));
    else
        fprintf(f, "SW: Model with %.0fM total params, %.0fM largest layer params.\n",
                trunc(total / 1e6), trunc(largest / 1e6));
    fprintf(f, "  per CPU  |  per GPU |   Options\n");
    for (int i = 0; i < n; i++) {
        const zs_ds_estimate_row *w = &rows[i];
        if ((want_oo >= 0 && w->offload_optimizer != want_oo) ||
            (want_op >= 0 && w->offload_param != want_op) ||
            (want_zi >= 0 && w->zero_init != want_zi))
            continue;
        /* DeepSpeed returns int(cpu_mem), int(gpu_mem) and prints them / 2^30 */
        fprintf(f, " %7.2fGB | %6.2fGB | ", trunc(w->cpu_bytes) / 1073741824.0,
                trunc(w->gpu_bytes) / 1073741824.0);
        if (st == 2)
            fprintf(f, "offload_optimizer=%s\n", w->offload_optimizer ? "cpu " : "none");
        else
            fprintf(f, "offload_param=%s, offload_optimizer=%s, zero_init=%d\n",
                    w->offload_param ? "cpu " : "none", w->offload_optimizer ? "cpu " : "none",
                    w->zero_init);
    }
    return 0;
}

/* The options of argv into cl. 0, or the exit code: 2 for a bad option,
 * 1 for a bad model or setup, -1 after --help. */
static int zs_plan_parse_args(zs_plan_cli *cl, int argc, char **argv)
{
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", zs_plan_options, NULL)) != -1) {
        if (ch == '?' || ch == ':') {
            const char *arg = argv[optind - 1];
            int needs = 0;
            for (const struct option *o = zs_plan_options; o->name; o++)
                if (o->val == optopt && optopt >= P_PARAMS)
                    needs = o->has_arg == required_argument ? 1 : 2;
            if (needs == 1)
                fprintf(stderr, "zerosim plan: option %s needs a value (see zerosim plan --help)\n", arg);
            else if (needs == 2)
                fprintf(stderr, "zerosim plan: option %s takes no value (see zerosim plan --help)\n", arg);
            else
                fprintf(stderr, "zerosim plan: unknown option %s (see zerosim plan --help)\n", arg);
            return 2;
        }
        if (ch == 'h' || ch == P_HELP) {
            fputs(zs_plan_usage, stdout);
            return -1;
        }
        cl->val[ch] = optarg ? optarg : "1";
    }
    if (optind < argc) {
        fprintf(stderr, "zerosim plan: unexpected argument \"%s\" (see zerosim plan --help)\n",
                argv[optind]);
        return 2;
    }
    if (zs_plan_apply(cl)) {
        fprintf(stderr, "zerosim plan: %s\n", zs_error_msg());
        return 1;
    }
    return 0;
}

/* The plans of a sweep: every (stage, N), stage-major. */
typedef struct {
    int nplans;
    zs_plan_input *ins;
    zs_plan_result *rs;
    size_t *max_params;
    int *max_layers;
} zs_plan_sweep;

/* Computes every plan of cl (with want_max, the largest model of each).
 * 0, or 1 after one line on stderr. */
static int zs_plan_sweep_compute(zs_plan_sweep *sw, const zs_plan_cli *cl, int want_max)
{
    sw->nplans = cl->nstage * cl->ndp;
    sw->ins = calloc((size_t)sw->nplans, sizeof *sw->ins);
    sw->rs = calloc((size_t)sw->nplans, sizeof *sw->rs);
    sw->max_params = calloc((size_t)sw->nplans, sizeof *sw->max_params);
    sw->max_layers = calloc((size_t)sw->nplans, sizeof *sw->max_layers);
    if (!sw->ins || !sw->rs || !sw->max_params || !sw->max_layers) {
        fprintf(stderr, "zerosim plan: out of host memory\n");
        return 1;
    }
    for (int s = 0; s < cl->nstage; s++)
        for (int d = 0; d < cl->ndp; d++) {
            int i = s * cl->ndp + d;
            sw->ins[i] = cl->in;
            sw->ins[i].cfg.stage = cl->stages[s];
            sw->ins[i].dp = cl->dps[d];
            if (zs_plan_compute(&sw->ins[i], &sw->rs[i]) ||
                (want_max &&
                 zs_plan_max_model(&sw->ins[i], &sw->max_params[i], &sw->max_layers[i]))) {
                fprintf(stderr, "zerosim plan: stage %d, N = %d: %s\n", cl->stages[s],
                        cl->dps[d], zs_error_msg());
                return 1;
            }
        }
    return 0;
}

static void zs_plan_sweep_free(zs_plan_sweep *sw)
{
    free(sw->ins);
    free(sw->rs);
    free(sw->max_params);
    free(sw->max_layers);
}

/* --csv FILE: the table in memory, then written as every output is: at a
 * temporary name created exclusively, renamed (never through a symlink;
 * zs_report_write_text); "-" writes stdout. 0, or 1 after one line on
 * stderr. */
static int zs_plan_write_csv(const char *csv, const zs_plan_cli *cl, const zs_plan_sweep *sw)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        fprintf(stderr, "zerosim plan: out of memory for %s\n", csv);
        return 1;
    }
    fprintf(f, "# zerosim plan: bytes per device and per step; convention %s; %zu parameters\n"
            "# stage dp params grads optimizer activations total traffic step_s fits max_params\n",
            zs_plan_convention_name(cl->in.convention), sw->rs[0].num_params);
    for (int i = 0; i < sw->nplans; i++) {
        const zs_plan_result *r = &sw->rs[i];
        fprintf(f, "%d %d %.0f %.0f %.0f %.0f %.0f %.0f %.6g %d %zu\n", sw->ins[i].cfg.stage,
                sw->ins[i].dp, r->params, r->grads, r->optimizer, r->activations, r->total,
                r->traffic_bytes, r->time.total_s, r->fits, sw->max_params[i]);
    }
    int bad = fclose(f) != 0 || !text;
    if (!bad && !strcmp(csv, "-"))
        bad = fwrite(text, 1, len, stdout) != len;
    else if (!bad && zs_report_write_text(csv, text, len)) {
        fprintf(stderr, "zerosim plan: %s\n", zs_error_msg());
        free(text);
        return 1;
    }
    free(text);
    if (bad) {
        fprintf(stderr, "zerosim plan: cannot write %s: %s\n", csv, strerror(errno));
        return 1;
    }
    return 0;
}

/* The plans on stdout: JSON, one plan's text (and --weight-format), or a
 * sweep's table. 0, or 1 after one line on stderr. */
static int zs_plan_print(const zs_plan_cli *cl, const zs_plan_sweep *sw, int want_max)
{
    if (cl->val[P_JSON]) {
        if (zs_plan_print_json(stdout, sw->nplans, sw->ins, sw->rs, want_max, sw->max_params,
                               sw->max_layers)) {
            fprintf(stderr, "zerosim plan: %s\n", zs_error_msg());
            return 1;
        }
    } else if (sw->nplans == 1) {
        zs_plan_print_text(stdout, &sw->ins[0], &sw->rs[0], want_max, sw->max_params[0],
                           sw->max_layers[0]);
        if (cl->val[P_WFORMAT] &&
            zs_plan_print_weights(stdout, &cl->in, cl->val[P_WFORMAT], cl->val[P_WDQ] != NULL,
                                  sw->rs[0].num_params)) {
            fprintf(stderr, "zerosim plan: %s\n", zs_error_msg());
            return 1;
        }
    } else {
        zs_plan_print_sweep(stdout, &cl->in, sw->nplans, sw->ins, sw->rs, want_max,
                            sw->max_params);
    }
    return 0;
}

int zs_cmd_plan(int argc, char **argv)
{
    zs_plan_cli cl;
    memset(&cl, 0, sizeof cl);
    zs_plan_input_defaults(&cl.in);
    int rc = zs_plan_parse_args(&cl, argc, argv);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (cl.val[P_DS]) {
        if (zs_plan_deepspeed(stdout, &cl)) {
            fprintf(stderr, "zerosim plan: %s\n", zs_error_msg());
            return 1;
        }
        return 0;
    }
    int want_max = cl.val[P_MAX_MODEL] != NULL;
    const char *csv = cl.val[P_CSV];
    zs_plan_sweep sw = {0};
    rc = zs_plan_sweep_compute(&sw, &cl, want_max);
    if (!rc && csv)
        rc = zs_plan_write_csv(csv, &cl, &sw);
    if (!rc && !(csv && !strcmp(csv, "-")))
        rc = zs_plan_print(&cl, &sw, want_max);
    if (!rc && zs_plan_hf_ignored[0])
        fprintf(stderr, "zerosim: %s: ignored (no effect on memory, traffic or arithmetic): %s\n",
                cl.val[P_HF_CONFIG], zs_plan_hf_ignored);
    zs_plan_sweep_free(&sw);
    return rc;
}
