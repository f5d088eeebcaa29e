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
#include "zerosim/compress.h"
#include "zerosim/config.h"
#include "zerosim/error.h"
#include "zerosim/quant.h"
#include "zerosim/plan.h"
#include "zerosim/report.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
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
    "  --grad-precision fp32|bf16|fp16  gradients (as --precision)\n"
    "  --optimizer adamw|sgd    (adamw)\n"
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
    "                           table for --stage 2 or 3, --params, --largest-layer,\n"
    "                           --nodes, --gpus-per-node, --buffer-factor X (1.5);\n"
    "                           --offload-optimizer cpu|none, --offload-param cpu|none,\n"
    "                           --zero-init 0|1 keep only the matching rows\n";

enum {
    P_PARAMS = 256, P_ARCH, P_LAYERS, P_HIDDEN, P_HEADS, P_VOCAB, P_SEQ, P_LARGEST, P_DP,
    P_DPN, P_NODES, P_DEVMEM, P_FLOPS, P_BW_INTRA, P_LAT_INTRA, P_BW_INTER, P_LAT_INTER,
    P_CALIB, P_OVERLAP, P_STAGE, P_PRECISION, P_GRAD_PRECISION, P_OPTIMIZER, P_MICRO,
    P_ACCUM, P_CKPT, P_COMP, P_NO_EF, P_DET, P_CONVENTION, P_MAX_MODEL, P_JSON, P_CSV,
    P_DS, P_BUFFER, P_OFF_OPT, P_OFF_PARAM, P_ZERO_INIT, P_HOSTMEM, P_BW_HOST, P_BW_NVME,
    P_HOST_OPT, P_HELP, P_CONFIG, P_TP, P_SP,
    P_GRAD_REDUCE, P_OVERLAP_COMM,
    P_MOE_EXPERTS, P_MOE_EVERY, P_MOE_TOP_K, P_CAPACITY_FACTOR, P_EP, P_EP_LAYOUT,
    P_PP, P_PP_SCHEDULE, P_PP_PARTITION, P_VIRTUAL_STAGES,
    P_WFORMAT, P_WDQ, P_QWZ, P_HPZ, P_QGZ, P_BW_LINK, P_HIER, P_LAST
};

static const struct option zs_plan_options[] = {
    {"params", required_argument, NULL, P_PARAMS},
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

/* The model: a bare parameter count, or a GPT's shape (options or --config). */
static int zs_plan_apply_model(zs_plan_cli *cl)
{
    const char *const *v = cl->val;
    zs_plan_input *in = &cl->in;
    zs_run_config *c = &in->cfg;
    double x;
    if (v[P_PARAMS] && v[P_ARCH])
        ZS_FAIL("give --params or --arch, not both");
    if (v[P_PARAMS] && v[P_CONFIG])
        ZS_FAIL("give --params or --config, not both (the config describes a GPT)");
    if (v[P_CONFIG]) { /* the run's configuration, as zerosim train reads it */
        zs_run_config_defaults(c);
        ZS_TRY(zs_config_load_file(v[P_CONFIG], c));
        if (c->model.kind != ZS_MODEL_GPT)
            ZS_FAIL("%s: the planner's architectures are: gpt", v[P_CONFIG]);
        in->keep_batch = 1;
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
    } else if (v[P_ARCH] || v[P_CONFIG]) {
        if (v[P_ARCH] && strcmp(v[P_ARCH], "gpt"))
            ZS_FAIL("--arch must be \"gpt\", got \"%s\"", v[P_ARCH]);
        in->has_arch = 1;
        c->model.kind = ZS_MODEL_GPT;
        static const struct { int id, lo, hi; size_t off; } dims[] = {
            {P_LAYERS, 1, ZS_BOUND_LAYERS_MAX, offsetof(zs_model_config, n_layer)},
            {P_HIDDEN, 1, ZS_BOUND_HIDDEN_MAX, offsetof(zs_model_config, n_embd)},
            {P_HEADS, 1, ZS_BOUND_HEADS_MAX, offsetof(zs_model_config, n_head)},
            {P_VOCAB, ZS_BOUND_VOCAB_MIN, ZS_BOUND_VOCAB_MAX, offsetof(zs_model_config, vocab)},
            {P_SEQ, 1, ZS_BOUND_SEQ_MAX, offsetof(zs_model_config, seq_len)},
        };
        for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
            if (!v[dims[i].id] && v[P_CONFIG])
                continue; /* the config's */
            if (!v[dims[i].id])
                ZS_FAIL("--arch gpt needs --layers, --hidden, --heads, --vocab and --seq: "
                        "--%s is missing", zs_plan_opt_name(dims[i].id));
            ZS_TRY(zs_plan_int(dims[i].id, v[dims[i].id], dims[i].lo, dims[i].hi,
                               (int *)((char *)&c->model + dims[i].off)));
        }
        if (c->model.n_embd % c->model.n_head)
            ZS_FAIL("--heads (%d) must divide --hidden (%d)", c->model.n_head, c->model.n_embd);
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
        ZS_TRY(zs_plan_list(P_DP, v[P_DP], 1, 1 << 24, cl->dps, &cl->ndp));
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
    in->grad_precision = c->precision;
    if (v[P_GRAD_PRECISION])
        ZS_TRY(zs_plan_dtype(P_GRAD_PRECISION, v[P_GRAD_PRECISION], &in->grad_precision));
    if (v[P_OPTIMIZER]) {
        if (!strcmp(v[P_OPTIMIZER], "adamw") || !strcmp(v[P_OPTIMIZER], "adam"))
            c->optimizer = ZS_OPT_ADAMW;
        else if (!strcmp(v[P_OPTIMIZER], "sgd"))
            c->optimizer = ZS_OPT_SGD;
        else
            ZS_FAIL("--optimizer must be adamw or sgd, got \"%s\"", v[P_OPTIMIZER]);
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

/* ---- output ---------------------------------------------------------------- */

static double gb(double bytes) { return bytes / 1e9; }

static void zs_plan_human_size(char *buf, size_t n, double count)
{
    if (count >= 1e12)
        snprintf(buf, n, "%.3gT", count / 1e12);
    else if (count >= 1e9)
        snprintf(buf, n, "%.3gB", count / 1e9);
    else if (count >= 1e6)
        snprintf(buf, n, "%.3gM", count / 1e6);
    else
        snprintf(buf, n, "%.0f", count);
}

/* The ring factor (N-1)/N of a group of N ranks (0 for one). */
static double zs_plan_ring(int n) { return n > 1 ? (n - 1.0) / n : 0.0; }

static void zs_plan_print_one(FILE *f, const zs_plan_cli *cl, const zs_plan_input *in,
                              const zs_plan_result *r, int want_max, size_t max_params,
                              int max_layers)
{
    const zs_run_config *c = &in->cfg;
    char h[32];
    zs_plan_human_size(h, sizeof h, (double)r->num_params);
    fprintf(f, "model: %zu parameters (%s)", r->num_params, h);
    if (in->has_arch)
        fprintf(f, ", GPT: %d layers, hidden %d, %d heads, vocab %d, seq %d", c->model.n_layer,
                c->model.n_embd, c->model.n_head, c->model.vocab, c->model.seq_len);
    if (in->has_arch && c->model.moe_experts > 0) {
        size_t ex = zs_model_count_expert_params(&c->model);
        fprintf(f, "; mixture of experts: %d experts in %d of %d blocks, top-%d, %zu dense + %zu "
                "expert parameters", c->model.moe_experts, c->model.n_layer / c->model.moe_every,
                c->model.n_layer, c->model.moe_top_k, r->num_params - ex, ex);
    }
    if (in->convention == ZS_PLAN_ZEROSIM)
        fprintf(f, "; padded to %zu, shard %zu", r->padded, r->shard);
    fprintf(f, "\nsetup: ZeRO stage %d, %s parameters, %s gradients, %s, micro-batch %d x "
            "grad-accum %d%s, convention %s\n", c->stage, zs_dtype_name(c->precision),
            zs_dtype_name(in->grad_precision), c->optimizer == ZS_OPT_ADAMW ? "AdamW" : "SGD",
            c->micro_batch, c->grad_accum,
            c->stage <= 1 && c->grad_reduce == ZS_GRAD_REDUCE_STEP ? ", gradients reduced once per step" : "",
            zs_plan_convention_name(in->convention));
    if (c->pp > 1)
        fprintf(f, "cluster: %d data-parallel x %d tensor-parallel x %d pipeline = %d devices, "
                   "%d per node", in->dp, c->tp, c->pp, in->dp * c->tp * c->pp,
                in->devices_per_node);
    else if (c->tp > 1)
        fprintf(f, "cluster: %d data-parallel x %d tensor-parallel = %d devices, %d per node",
                in->dp, c->tp, in->dp * c->tp, in->devices_per_node);
    else
        fprintf(f, "cluster: %d device%s, %d per node", in->dp, in->dp == 1 ? "" : "s",
                in->devices_per_node);
    if (in->device_memory)
        fprintf(f, ", %.2f GB (%.2f GiB) each", gb((double)in->device_memory),
                (double)in->device_memory / 1073741824.0);
    if ((c->tp > 1 || c->pp > 1) && r->device_params)
        fprintf(f, "\nparameters per device: at most %zu (%.2f GB in %s), the TP shard of %s",
                r->device_params, gb((double)r->device_params * zs_dtype_size(c->precision)),
                zs_dtype_name(c->precision), c->pp > 1 ? "a stage's units" : "the model");
    fprintf(f, "\n\nmemory per device     %20s %12s\n", "bytes", "GB");
    for (int k = 0; k < ZS_MEM_NCAT; k++) {
        const char *name = zs_mem_category_name((zs_mem_category)k);
        if (k == ZS_MEM_QUANTIZED && !(r->has[k] && r->bytes[k] > 0))
            continue; /* training holds none; inference with quantized weights only */
        if (r->has[k])
            fprintf(f, "  %-19s %20.0f %12.3f\n", name, r->bytes[k], gb(r->bytes[k]));
        else if (k == ZS_MEM_ACTIVATIONS || k == ZS_MEM_CHECKPOINTS)
            fprintf(f, "  %-19s %33s\n", name, "not modelled (give --arch gpt)");
        else
            fprintf(f, "  %-19s %33s\n", name, "not modelled");
    }
    fprintf(f, "  %-19s %20.0f %12.3f\n", "total", r->total, gb(r->total));
    if (in->convention == ZS_PLAN_ZEROSIM && c->stage == 3)
        fprintf(f, "  (stage 3 holds %zu live gathered parameters%s)\n", r->live_params,
                in->has_arch ? "" : in->largest_layer ? ": --largest-layer"
                                                      : ": give --largest-layer to count them");
    if (r->pp > 1) {
        int il = c->pp_schedule == ZS_PP_INTERLEAVED;
        if (il)
            fprintf(f, "pipeline: %d stages (interleaved, %d model chunks a rank); the table is "
                       "stage %d's, the most loaded; totals by stage (GB):",
                    r->pp, c->virtual_stages, r->pp_stage);
        else
            fprintf(f, "pipeline: %d stages (%s, %s); the table is stage %d's, the most loaded; "
                       "totals by stage (GB):", r->pp, zs_pp_schedule_name(c->pp_schedule),
                    zs_pp_partition_name(c->pp_partition), r->pp_stage);
        for (int s = 0; s < r->pp && s < ZS_PLAN_PP_SHOWN; s++)
            fprintf(f, " %.3f", gb(r->pp_stage_total[s]));
        fprintf(f, "%s\n  parameters per device by stage:", r->pp > ZS_PLAN_PP_SHOWN ? " ..." : "");
        for (int s = 0; s < r->pp && s < ZS_PLAN_PP_SHOWN; s++)
            fprintf(f, " %zu", r->pp_stage_params[s]);
        fprintf(f, "%s\n  point to point per step: %.0f bytes sent, %.0f received; ideal bubble "
                   "(P-1)/(%sm+P-1) = %.3f (in the step time's compute)\n",
                r->pp > ZS_PLAN_PP_SHOWN ? " ..." : "", r->pp_send_bytes, r->pp_recv_bytes,
                il ? "v*" : "", r->pp_bubble);
    }
    if (r->fits == 1)
        fprintf(f, "fits: yes, %.3f GB of %.3f GB (%.3f GB free)\n", gb(r->total),
                gb((double)in->device_memory), gb((double)in->device_memory - r->total));
    else if (r->fits == 0)
        fprintf(f, "does not fit: needs %.3f GB, device has %.3f GB (short by %.3f GB)\n",
                gb(r->total), gb((double)in->device_memory),
                gb(r->total - (double)in->device_memory));
    else
        fprintf(f, "fits: unknown (give --device-memory SIZE)\n");
    if (want_max) {
        zs_plan_human_size(h, sizeof h, (double)max_params);
        if (in->has_arch)
            fprintf(f, "largest model that fits: %d layers, %zu parameters (%s)\n", max_layers,
                    max_params, h);
        else
            fprintf(f, "largest model that fits: %zu parameters (%s)\n", max_params, h);
    }
    if (r->host_total > 0 || r->nvme_total > 0) {
        for (int t = ZS_TIER_HOST; t < ZS_MEM_NTIERS; t++) {
            double tot = t == ZS_TIER_HOST ? r->host_total : r->nvme_total;
            if (tot <= 0)
                continue;
            fprintf(f, "\n%s memory per device (offload) %9s %12s\n",
                    t == ZS_TIER_HOST ? "host" : "nvme", "bytes", "GB");
            for (int k = 0; k < ZS_MEM_NCAT; k++)
                if (r->tier_bytes[t][k] > 0)
                    fprintf(f, "  %-19s %20.0f %12.3f\n", zs_mem_category_name((zs_mem_category)k),
                            r->tier_bytes[t][k], gb(r->tier_bytes[t][k]));
            fprintf(f, "  %-19s %20.0f %12.3f\n", "total", tot, gb(tot));
        }
        fprintf(f, "host memory per node: %.3f GB (%d devices)", gb(r->host_per_node),
                in->dp < in->devices_per_node ? in->dp : in->devices_per_node);
        if (r->host_fits == 1)
            fprintf(f, "; fits the node's %.3f GB\n", gb((double)in->host_memory));
        else if (r->host_fits == 0)
            fprintf(f, "; does not fit the node's %.3f GB (short by %.3f GB)\n",
                    gb((double)in->host_memory), gb(r->host_per_node - (double)in->host_memory));
        else
            fprintf(f, "; fits: unknown (give --host-memory SIZE per node)\n");
        fprintf(f, "offload traffic per device per step: device to host %.0f bytes, host to "
                "device %.0f bytes", r->d2h_bytes, r->h2d_bytes);
        if (r->nvme_read_bytes > 0)
            fprintf(f, ", nvme read %.0f bytes, written %.0f bytes", r->nvme_read_bytes,
                    r->nvme_write_bytes);
        fprintf(f, "\n");
    }
    fprintf(f, "\ntraffic per device per step (ring volume):");
    for (int i = 0; i < r->ncolls; i++)
        fprintf(f, " %s%s %.3f GB (%.0f call%s)%s", zs_coll_kind_name(r->colls[i].kind),
                r->colls[i].link == 1   ? " inside nodes"
                : r->colls[i].link == 2 ? " across nodes"
                                        : "",
                gb((r->colls[i].kind == ZS_COLL_ALLREDUCE ? 2.0 : 1.0) * r->colls[i].bytes *
                   zs_plan_ring(r->colls[i].ranks > 0 ? r->colls[i].ranks : in->dp)),
                r->colls[i].calls, r->colls[i].calls == 1 ? "" : "s",
                i + 1 < r->ncolls ? "," : "");
    fprintf(f, "%s; total %.0f bytes (%.3f GB)\n", r->ncolls ? "" : " none", r->traffic_bytes,
            gb(r->traffic_bytes));
    if (r->zeropp) /* the ledger's count, node by node */
        fprintf(f, "  inter-node (ZeRO++%s%s%s): %.0f bytes per step cross each node's link "
                "(node 0: its %d devices' sends to other nodes)\n",
                in->cfg.quantized_weights ? " qwZ" : "",
                in->cfg.hpz_partition_size > 1 ? " hpZ" : "",
                in->cfg.quantized_gradients ? " qgZ" : "", r->inter_node_bytes,
                in->dp < in->devices_per_node ? in->dp : in->devices_per_node);
    else if (r->mesh_inter)
        fprintf(f, "  inter-node (tp %d x dp %d x pp %d as zerosim mesh lays them, %d per node; "
                "the most loaded stage's devices): the DP ring crosses on %.0f%% of them, the TP "
                "ring on %.0f%%, the pipeline peers on %.0f%%: %.0f bytes per device per step "
                "across (DP %.0f, TP %.0f, PP %.0f), %.0f intra-node\n",
                c->tp > 1 ? c->tp : 1, in->dp, c->pp > 1 ? c->pp : 1, in->devices_per_node,
                100 * r->inter_frac[0], 100 * r->inter_frac[1], 100 * r->inter_frac[2],
                r->inter_node_bytes, r->inter_part[0], r->inter_part[1], r->inter_part[2],
                r->traffic_bytes - r->inter_node_bytes);
    else if (r->hierarchical) /* the ledger's count for the two levels */
        fprintf(f, "  inter-node (hierarchical, %d per node, %d nodes): every device sends "
                "(M-1)/N of each reduce-scatter and allgather across, %.0f bytes per step, and "
                "%.0f intra-node\n", in->devices_per_node, in->dp / in->devices_per_node,
                r->inter_node_bytes, r->traffic_bytes - r->inter_node_bytes);
    else if (in->dp > in->devices_per_node && r->traffic_bytes > 0) /* the ring model of the ledger */
        fprintf(f, "  inter-node (flat ring, %d per node): the last device of each node sends all "
                "of its %.0f bytes across, the others none: %.0f bytes per device on average, "
                "%.0f intra-node\n", in->devices_per_node, r->traffic_bytes,
                r->traffic_bytes / in->devices_per_node,
                r->traffic_bytes - r->traffic_bytes / in->devices_per_node);
    else if (r->traffic_bytes > 0)
        fprintf(f, "  inter-node: none (the %d devices fit in one node)\n", in->dp);
    const zs_steptime_result *t = &r->time;
    fprintf(f, "step time: compute %.4g s + communication %.4g s", t->compute_s, t->comm_s);
    if (t->scalars_s > 0)
        fprintf(f, " + small collectives %.4g s", t->scalars_s);
    if (t->optimizer_s > 0)
        fprintf(f, " + optimizer %.4g s", t->optimizer_s);
    fprintf(f, " = %.4g s", t->total_s);
    if (t->overlapped && in->overlap)
        fprintf(f, " (overlapped: the larger of the first two)");
    else if (t->overlapped)
        fprintf(f, " (stage 3 with overlap_comm: %.4g s of the communication behind compute)",
                t->comm_hidden_s);
    fputc('\n', f);
    if (t->overlapped && !in->overlap)
        fprintf(f, "  overlap: compute hides the gathers and the reduce-scatters (with a model's "
                "step program: with hpZ the forward's gathers behind the forward's compute "
                "alone; never a micro-batch's last bucket nor an all-to-all)%s\n",
                in->cal.intra_copies_use_cores ? " nor the copies inside a node, which the "
                                                 "ranks' cores make" : "");
    if (t->scalars_s > 0)
        fprintf(f, "  small collectives: the loss, the overflow flag and the gradient norm, 3 per "
                "step at alpha %.3g s each\n", t->alpha_s);
    if (r->d2h_bytes > 0)
        fprintf(f, "  offload: %.4g s in the step (copies at %.4g B/s%s%s), not overlapped\n",
                t->offload_s, in->cal.host_bandwidth,
                r->nvme_read_bytes > 0 ? ", files at the nvme rate" : "",
                in->cal.host_optimizer_elems_per_s > 0
                    ? ", the host optimizer at --host-optimizer-rate"
                    : "; the host optimizer's time is left out: give --host-optimizer-rate");
    if (t->kernels_modelled) {
        static const char *const what[ZS_WORK_NKINDS] = {
            "attention", "GELU", "rest of the blocks", "head", "gradients", "other passes",
            "block quantization"};
        double gemm_s = t->compute_s;
        for (int k = 0; k < ZS_WORK_NKINDS; k++)
            gemm_s -= t->work_s[k];
        fprintf(f, "  compute (kernels as calibrated): GEMMs %.4g s", gemm_s);
        for (int k = 0; k < ZS_WORK_NKINDS; k++)
            if (k != ZS_WORK_QUANT || t->work_s[k] > 0) /* ZeRO++ alone has codecs */
                fprintf(f, ", %s %.4g s", what[k], t->work_s[k]);
        fputc('\n', f);
    }
    if (r->flops_per_step > 0)
        fprintf(f, "  compute: %.4g FLOP per device per step (%.0f tokens x %s%s) at %.4g FLOP/s\n",
                r->flops_per_step, r->tokens_per_step,
                in->has_arch ? (r->recompute ? "(8 Psi + 16 L C T), with recompute"
                                                         : "(6 Psi + 12 L C T)")
                             : "6 Psi",
                r->pp > 1   ? " x the stage's share of Psi / (1 - bubble)"
                : c->tp > 1  ? " x the TP shard's share of Psi"
                             : "",
                in->cal.gemm_flops);
    else
        fprintf(f, "  compute: not modelled (give --seq with --params, or --arch gpt)\n");
    fprintf(f, "  communication: %s link, alpha %.3g s, beta %.4g bytes/s; ring collective "
            "(N-1) alpha + (N-1)/N S/beta per call\n", t->inter_node ? "inter-node" : "intra-node",
            t->alpha_s, t->beta);
    if (t->inter_node && in->cal.inter_link_bandwidth > 0)
        fprintf(f, "  node link: %.4g bytes/s shared by the node's ranks that cross it at once "
                "(s): beta = link / s (flat ring s = 1, a group between nodes s = %d)\n",
                in->cal.inter_link_bandwidth,
                in->devices_per_node < in->dp ? in->devices_per_node : in->dp);
    (void)cl;
}

static json_t *zs_json_bytes(double v)
{
    if (v == floor(v) && fabs(v) < 9007199254740992.0)
        return json_integer((json_int_t)v);
    return json_real(v);
}

static json_t *zs_plan_json(const zs_plan_input *in, const zs_plan_result *r, int want_max,
                            size_t max_params, int max_layers)
{
    const zs_run_config *c = &in->cfg;
    json_t *o = json_object();
    json_object_set_new(o, "params", json_integer((json_int_t)r->num_params));
    json_object_set_new(o, "padded_params", json_integer((json_int_t)r->padded));
    json_object_set_new(o, "dp", json_integer(in->dp));
    json_object_set_new(o, "tp", json_integer(in->cfg.tp > 1 ? in->cfg.tp : 1));
    json_object_set_new(o, "pp", json_integer(r->pp > 1 ? r->pp : 1));
    if (r->device_params)
        json_object_set_new(o, "params_per_device", json_integer((json_int_t)r->device_params));
    if (r->pp > 1) {
        json_t *st = json_array(), *sp = json_array();
        for (int s = 0; s < r->pp && s < ZS_PLAN_PP_SHOWN; s++) {
            json_array_append_new(st, zs_json_bytes(r->pp_stage_total[s]));
            json_array_append_new(sp, json_integer((json_int_t)r->pp_stage_params[s]));
        }
        json_object_set_new(o, "pipeline", json_pack(
            "{s:s, s:s, s:i, s:o, s:o, s:o, s:o, s:f}", "schedule",
            zs_pp_schedule_name(c->pp_schedule), "partition", zs_pp_partition_name(c->pp_partition),
            "most_loaded_stage", r->pp_stage, "stage_totals", st, "stage_params", sp,
            "p2p_send_bytes_per_step", zs_json_bytes(r->pp_send_bytes),
            "p2p_recv_bytes_per_step", zs_json_bytes(r->pp_recv_bytes), "ideal_bubble",
            r->pp_bubble));
    }
    json_object_set_new(o, "stage", json_integer(c->stage));
    json_object_set_new(o, "convention", json_string(zs_plan_convention_name(in->convention)));
    json_object_set_new(o, "grad_reduce", json_string(zs_grad_reduce_name(c->grad_reduce)));
    json_object_set_new(o, "precision", json_string(zs_dtype_name(c->precision)));
    json_object_set_new(o, "grad_precision", json_string(zs_dtype_name(in->grad_precision)));
    json_t *b = json_object();
    json_object_set_new(b, "params", zs_json_bytes(r->params));
    json_object_set_new(b, "grads", zs_json_bytes(r->grads));
    json_object_set_new(b, "optimizer", zs_json_bytes(r->optimizer));
    json_object_set_new(b, "activations", zs_json_bytes(r->activations));
    json_object_set_new(b, "total", zs_json_bytes(r->total));
    json_object_set_new(o, "bytes_per_device", b);
    json_t *cat = json_object();
    for (int k = 0; k < ZS_MEM_NCAT; k++)
        if (k != ZS_MEM_QUANTIZED || (r->has[k] && r->bytes[k] > 0))
            json_object_set_new(cat, zs_mem_category_name((zs_mem_category)k),
                                r->has[k] ? zs_json_bytes(r->bytes[k]) : json_null());
    json_object_set_new(o, "bytes_per_category", cat);
    json_object_set_new(o, "activations_modelled", json_boolean(r->activations_modelled));
    if (in->convention == ZS_PLAN_ZEROSIM && c->stage == 3)
        json_object_set_new(o, "live_params", json_integer((json_int_t)r->live_params));
    json_object_set_new(o, "traffic_bytes_per_step", zs_json_bytes(round(r->traffic_bytes)));
    if (r->zeropp)
        json_object_set_new(o, "inter_node_bytes_per_node_per_step",
                            zs_json_bytes(round(r->inter_node_bytes)));
    if (r->hierarchical || r->mesh_inter)
        json_object_set_new(o, "inter_node_bytes_per_device_per_step",
                            zs_json_bytes(round(r->inter_node_bytes)));
    if (r->mesh_inter) {
        static const char *const axis[] = {"dp", "tp", "pp"};
        json_t *parts = json_object(), *fr = json_object();
        for (int a = 0; a < 3; a++) {
            json_object_set_new(parts, axis[a], json_real(r->inter_part[a]));
            json_object_set_new(fr, axis[a], json_real(r->inter_frac[a]));
        }
        json_object_set_new(o, "inter_node_bytes_by_group", parts);
        json_object_set_new(o, "inter_node_share_by_group", fr);
    }
    json_object_set_new(o, "hierarchical", json_boolean(r->hierarchical));
    json_t *cs = json_array();
    for (int i = 0; i < r->ncolls; i++) {
        json_t *e = json_object();
        json_object_set_new(e, "op", json_string(zs_coll_kind_name(r->colls[i].kind)));
        json_object_set_new(e, "full_bytes", zs_json_bytes(r->colls[i].bytes));
        json_object_set_new(e, "calls", json_real(r->colls[i].calls));
        /* its group and link: "world" (between nodes when the ranks span
         * nodes), "node" (inside one), "nodes" (one rank per node) */
        static const char *const links[] = {"world", "node", "nodes"};
        int lk = r->colls[i].link;
        json_object_set_new(e, "ranks", json_integer(r->colls[i].ranks > 0 ? r->colls[i].ranks
                                                                            : in->dp));
        json_object_set_new(e, "link", json_string(lk >= 0 && lk <= 2 ? links[lk] : "?"));
        /* a linear allgather's busiest node-link direction, over its calls
         * (zs_steptime_coll.link_bytes); absent: equal parts */
        if (r->colls[i].link_bytes > 0)
            json_object_set_new(e, "link_bytes", zs_json_bytes(r->colls[i].link_bytes));
        json_array_append_new(cs, e);
    }
    json_object_set_new(o, "collectives", cs);
    json_object_set_new(o, "device_memory", in->device_memory
                                                ? json_integer((json_int_t)in->device_memory)
                                                : json_null());
    json_object_set_new(o, "fits", r->fits < 0 ? json_null() : json_boolean(r->fits));
    if (r->host_total > 0 || r->nvme_total > 0) {
        json_t *off = json_object(), *tiers = json_object();
        for (int t = ZS_TIER_HOST; t < ZS_MEM_NTIERS; t++) {
            json_t *tc = json_object();
            for (int k = 0; k < ZS_MEM_NCAT; k++)
                if (r->tier_bytes[t][k] > 0)
                    json_object_set_new(tc, zs_mem_category_name((zs_mem_category)k),
                                        zs_json_bytes(r->tier_bytes[t][k]));
            json_object_set_new(tiers, zs_mem_tier_name((zs_mem_tier)t), tc);
        }
        json_object_set_new(off, "device", json_string(zs_offload_name(c->offload_optimizer)));
        json_object_set_new(off, "bytes_per_device", tiers);
        json_object_set_new(off, "host_bytes_per_node", zs_json_bytes(r->host_per_node));
        json_object_set_new(off, "host_fits",
                            r->host_fits < 0 ? json_null() : json_boolean(r->host_fits));
        json_object_set_new(off, "d2h_bytes_per_step", zs_json_bytes(r->d2h_bytes));
        json_object_set_new(off, "h2d_bytes_per_step", zs_json_bytes(r->h2d_bytes));
        json_object_set_new(off, "nvme_read_bytes_per_step", zs_json_bytes(r->nvme_read_bytes));
        json_object_set_new(off, "nvme_write_bytes_per_step", zs_json_bytes(r->nvme_write_bytes));
        json_object_set_new(off, "offload_s", json_real(r->time.offload_s));
        json_object_set_new(o, "offload_optimizer", off);
    }
    if (want_max) {
        json_object_set_new(o, "max_params", json_integer((json_int_t)max_params));
        if (in->has_arch)
            json_object_set_new(o, "max_layers", json_integer(max_layers));
    }
    json_t *t = json_object();
    json_object_set_new(t, "compute_s", json_real(r->time.compute_s));
    json_object_set_new(t, "comm_s", json_real(r->time.comm_s));
    json_object_set_new(t, "scalars_s", json_real(r->time.scalars_s));
    json_object_set_new(t, "overlapped", json_boolean(r->time.overlapped));
    json_object_set_new(t, "comm_exposed_s", json_real(r->time.comm_exposed_s));
    json_object_set_new(t, "comm_hidden_s", json_real(r->time.comm_hidden_s));
    json_object_set_new(t, "optimizer_s", json_real(r->time.optimizer_s));
    json_object_set_new(t, "total_s", json_real(r->time.total_s));
    json_object_set_new(t, "flops_per_step", json_real(r->flops_per_step));
    if (r->time.kernels_modelled) { /* seconds per step of each kernel class */
        json_t *w = json_object();
        for (int k = 0; k < ZS_WORK_NKINDS; k++)
            json_object_set_new(w, zs_work_kind_name((zs_work_kind)k),
                                json_real(r->time.work_s[k]));
        json_object_set_new(t, "kernels_s", w);
    }
    json_object_set_new(t, "gemm_flops", json_real(in->cal.gemm_flops));
    json_object_set_new(t, "alpha_s", json_real(r->time.alpha_s));
    json_object_set_new(t, "beta_bytes_per_s", json_real(r->time.beta));
    json_object_set_new(t, "inter_node", json_boolean(r->time.inter_node));
    if (in->cal.inter_link_bandwidth > 0)
        json_object_set_new(t, "inter_link_bandwidth", json_real(in->cal.inter_link_bandwidth));
    json_object_set_new(o, "step_time", t);
    return o;
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
    double largest = in->has_arch ? (double)zs_plan_gpt_largest_layer(&in->cfg.model)
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

/* --weight-format: the bytes of the weights an inference holds, from the
 * formula of zs_quant_bits_per_param_limit (the scales of large tensors). */
static int zs_plan_weights(FILE *f, const zs_plan_cli *cl, size_t psi)
{
    zs_quant_spec q = {0};
    ZS_TRY(zs_quant_format_parse(cl->val[P_WFORMAT], &q.format));
    if (q.format == ZS_QUANT_NONE)
        ZS_FAIL("--weight-format takes int8, int8-zp or nf4");
    q.double_quant = cl->val[P_WDQ] != NULL;
    ZS_TRY(zs_quant_spec_finalize(&q));
    const zs_model_config *m = &cl->in.cfg.model;
    if (cl->in.has_arch && m->moe_experts > 0)
        ZS_FAIL("--weight-format counts dense GPTs only, not --moe-experts %d yet",
                m->moe_experts);
    double lin = cl->in.has_arch ? 12.0 * m->n_layer * (double)m->n_embd * m->n_embd : (double)psi;
    double bits = zs_quant_bits_per_param_limit(&q), other = (double)psi - lin;
    double qb = lin * bits / 8.0, ob = 4.0 * other;
    char d[96];
    zs_quant_spec_describe(&q, d, sizeof d);
    fprintf(f, "\nweights held for inference (%s)  %20s %12s\n", d, "bytes", "GB");
    fprintf(f, "  %-19s %20.0f %12.3f   (%.0f %s x %.4f bits)\n", "quantized_weights", qb,
            gb(qb), lin, cl->in.has_arch ? "linear weights" : "parameters", bits);
    if (other > 0)
        fprintf(f, "  %-19s %20.0f %12.3f   (%.0f embeddings, biases, LayerNorms in fp32)\n",
                "params", ob, gb(ob), other);
    fprintf(f, "  %-19s %20.0f %12.3f   (fp32: %.3f GB, %.1fx)\n", "total", qb + ob, gb(qb + ob),
            gb(4.0 * (double)psi), 4.0 * (double)psi / (qb + ob));
    return 0;
}

int zs_cmd_plan(int argc, char **argv)
{
    zs_plan_cli cl;
    memset(&cl, 0, sizeof cl);
    zs_plan_input_defaults(&cl.in);
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
            return 0;
        }
        cl.val[ch] = optarg ? optarg : "1";
    }
    if (optind < argc) {
        fprintf(stderr, "zerosim plan: unexpected argument \"%s\" (see zerosim plan --help)\n",
                argv[optind]);
        return 2;
    }
    if (zs_plan_apply(&cl)) {
        fprintf(stderr, "zerosim plan: %s\n", zs_error_msg());
        return 1;
    }
    if (cl.val[P_DS]) {
        if (zs_plan_deepspeed(stdout, &cl)) {
            fprintf(stderr, "zerosim plan: %s\n", zs_error_msg());
            return 1;
        }
        return 0;
    }
    int want_max = cl.val[P_MAX_MODEL] != NULL, as_json = cl.val[P_JSON] != NULL;
    const char *csv = cl.val[P_CSV];
    int nplans = cl.nstage * cl.ndp, rc = 0;
    zs_plan_input *ins = calloc((size_t)nplans, sizeof *ins);
    zs_plan_result *rs = calloc((size_t)nplans, sizeof *rs);
    size_t *maxp = calloc((size_t)nplans, sizeof *maxp);
    int *maxl = calloc((size_t)nplans, sizeof *maxl);
    if (!ins || !rs || !maxp || !maxl) {
        fprintf(stderr, "zerosim plan: out of host memory\n");
        rc = 1;
        goto done;
    }
    for (int s = 0; s < cl.nstage; s++)
        for (int d = 0; d < cl.ndp; d++) {
            int i = s * cl.ndp + d;
            ins[i] = cl.in;
            ins[i].cfg.stage = cl.stages[s];
            ins[i].dp = cl.dps[d];
            if (zs_plan_compute(&ins[i], &rs[i]) ||
                (want_max && zs_plan_max_model(&ins[i], &maxp[i], &maxl[i]))) {
                fprintf(stderr, "zerosim plan: stage %d, N = %d: %s\n", cl.stages[s], cl.dps[d],
                        zs_error_msg());
                rc = 1;
                goto done;
            }
        }
    if (csv) {
        /* the table in memory, then written as every output is: at a
         * temporary name created exclusively, renamed (never through a
         * symlink; zs_report_write_text) */
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f) {
            fprintf(stderr, "zerosim plan: out of memory for %s\n", csv);
            rc = 1;
            goto done;
        }
        fprintf(f, "# zerosim plan: bytes per device and per step; convention %s; %zu parameters\n"
                "# stage dp params grads optimizer activations total traffic step_s fits max_params\n",
                zs_plan_convention_name(cl.in.convention), rs[0].num_params);
        for (int i = 0; i < nplans; i++)
            fprintf(f, "%d %d %.0f %.0f %.0f %.0f %.0f %.0f %.6g %d %zu\n", ins[i].cfg.stage,
                    ins[i].dp, rs[i].params, rs[i].grads, rs[i].optimizer, rs[i].activations,
                    rs[i].total, rs[i].traffic_bytes, rs[i].time.total_s, rs[i].fits, maxp[i]);
        int bad = fclose(f) != 0 || !text;
        if (!bad && !strcmp(csv, "-"))
            bad = fwrite(text, 1, len, stdout) != len;
        else if (!bad && zs_report_write_text(csv, text, len)) {
            fprintf(stderr, "zerosim plan: %s\n", zs_error_msg());
            free(text);
            rc = 1;
            goto done;
        }
        free(text);
        if (bad) {
            fprintf(stderr, "zerosim plan: cannot write %s: %s\n", csv, strerror(errno));
            rc = 1;
            goto done;
        }
        if (!strcmp(csv, "-"))
            goto done;
    }
    if (as_json) {
        json_t *o;
        if (nplans == 1) {
            o = zs_plan_json(&ins[0], &rs[0], want_max, maxp[0], maxl[0]);
        } else {
            o = json_object();
            json_t *a = json_array();
            for (int i = 0; i < nplans; i++)
                json_array_append_new(a, zs_plan_json(&ins[i], &rs[i], want_max, maxp[i], maxl[i]));
            json_object_set_new(o, "plans", a);
        }
        char *txt = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
        json_decref(o);
        if (!txt) {
            fprintf(stderr, "zerosim plan: out of host memory writing JSON\n");
            rc = 1;
            goto done;
        }
        puts(txt);
        free(txt);
    } else if (nplans == 1) {
        zs_plan_print_one(stdout, &cl, &ins[0], &rs[0], want_max, maxp[0], maxl[0]);
        if (cl.val[P_WFORMAT] && zs_plan_weights(stdout, &cl, rs[0].num_params)) {
            fprintf(stderr, "zerosim plan: %s\n", zs_error_msg());
            rc = 1;
            goto done;
        }
    } else {
        char h[32];
        zs_plan_human_size(h, sizeof h, (double)rs[0].num_params);
        printf("%zu parameters (%s), %s parameters, %s gradients, convention %s; GB = 1e9 bytes "
               "per device\n", rs[0].num_params, h, zs_dtype_name(cl.in.cfg.precision),
               zs_dtype_name(cl.in.grad_precision), zs_plan_convention_name(cl.in.convention));
        printf("%5s %6s %11s %11s %11s %11s %11s %12s %11s %5s%s\n", "stage", "N", "params",
               "grads", "optimizer", "activations", "total", "traffic/step", "step_s", "fits",
               want_max ? "   max_params" : "");
        for (int i = 0; i < nplans; i++) {
            char act[32] = "-";
            if (rs[i].activations_modelled)
                snprintf(act, sizeof act, "%.3f", gb(rs[i].activations));
            printf("%5d %6d %11.3f %11.3f %11.3f %11s %11.3f %12.3f %11.4g %5s", ins[i].cfg.stage,
                   ins[i].dp, gb(rs[i].params), gb(rs[i].grads), gb(rs[i].optimizer), act,
                   gb(rs[i].total),
                   gb(rs[i].traffic_bytes), rs[i].time.total_s,
                   rs[i].fits < 0 ? "?" : rs[i].fits ? "yes" : "no");
            if (want_max) {
                zs_plan_human_size(h, sizeof h, (double)maxp[i]);
                printf(" %12s", h);
            }
            printf("\n");
        }
        printf("activations: %s; step time: %.4g FLOP/s, alpha/beta %.3g s / %.4g B/s inside a "
               "node, %.3g s / %.4g B/s between nodes, %d devices per node\n",
               rs[0].activations_modelled ? "included" : "not modelled (give --arch gpt)",
               cl.in.cal.gemm_flops, cl.in.cal.intra_latency_s, cl.in.cal.intra_bandwidth,
               cl.in.cal.inter_latency_s, cl.in.cal.inter_bandwidth, cl.in.devices_per_node);
    }
done:
    free(ins);
    free(rs);
    free(maxp);
    free(maxl);
    return rc;
}
