/* zerosim — the command-line program.
 *
 *   zerosim train [options]     train a model (see --help)
 *   zerosim --help | --version
 *
 * Options are applied after the --config file, so they override it. Only
 * main() prints errors and exits.
 */
#include "build-config.h"
#include "cli/bench.h"
#include "zerosim/backend.h"
#include "zerosim/checkpoint.h"
#include "zerosim/comm.h"
#include "zerosim/config.h"
#include "zerosim/compat.h"
#include "zerosim/error.h"
#include "zerosim/mem.h"
#include "zerosim/model.h"
#include "zerosim/program.h"
#include "zerosim/report.h"
#include "zerosim/train.h"
#include "zerosim/weights.h"
#include "compare_cmd.h"
#include "quant_cmd.h"
#include "deepcomp_cmd.h"
#include "zerosim/quant.h"
#include "plan_cmd.h"
#include "mesh_cmd.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const zs_usage =
    "usage: zerosim train [options]\n"
    "       mpirun -np N zerosim train [options]\n"
    "       zerosim plan [options]   memory, traffic and step time of a model and\n"
    "                                cluster, without MPI (see zerosim plan --help)\n"
    "       mpirun -np N zerosim bench [--out FILE]   (calibrate the planner)\n"
    "       zerosim mesh --world N --tp T --pp P [--json]   the groups of a mesh\n"
    "       [mpirun -np N] zerosim export --out FILE [train's options]\n"
    "                                the parameters before step 1 (the seed's, or\n"
    "                                --init-from FILE's, or --from CKPT's) as GPT-2\n"
    "                                weights (--from takes the model, batch and seed\n"
    "                                from the checkpoint)\n"
    "       zerosim compare A B [--rtol X --atol Y --prefix P]   two dumps or weight\n"
    "                                files, tensor by tensor (zerosim compare --help)\n"
    "       zerosim quantize --from CKPT|FILE --format int8|int8-zp|nf4 --out FILE\n"
    "                                post-training quantization (zerosim quantize --help)\n"
    "       zerosim eval --from CKPT|FILE [--formats]   held-out loss and bytes\n"
    "       zerosim compress --from CKPT|FILE --out FILE   Deep Compression: prune,\n"
    "                                share, Huffman-code (zerosim compress --help);\n"
    "                                zerosim decompress --from FILE reads it back\n"
    "       zerosim config-keys      every DeepSpeed configuration key zerosim reads,\n"
    "                                and whether it is used, has no effect or is refused\n"
    "       zerosim --help | --version\n"
    "\n"
    "Train a model with ZeRO-style data parallelism on CPUs and report every byte.\n"
    "Each MPI rank is one data-parallel device.\n"
    "\n"
    "model:\n"
    "  --model mlp|gpt          model kind (default gpt)\n"
    "  --layers N               GPT blocks, or MLP hidden layers (default 2)\n"
    "  --hidden N               GPT hidden size, or width of every MLP hidden layer (64)\n"
    "  --heads N                GPT attention heads (4)\n"
    "  --seq N                  GPT sequence length (32)\n"
    "  --vocab N                GPT vocabulary (64)\n"
    "  --widths A,B,...         MLP hidden widths (overrides --layers/--hidden)\n"
    "  --input-dim N            MLP input size (32)\n"
    "  --classes N              MLP classes (8)\n"
    "  --activation relu|gelu   MLP activation (relu)\n"
    "training:\n"
    "  --steps N                optimizer steps (100)\n"
    "  --micro-batch N          samples per micro-batch per rank (8)\n"
    "  --grad-accum N           micro-batches per step per rank (1)\n"
    "  --train-batch-size N     global batch = micro-batch x grad-accum x ranks\n"
    "  --optimizer adamw|sgd    optimizer (adamw)\n"
    "  --lr X                   peak learning rate (3e-3)\n"
    "  --warmup N               warm-up steps before cosine decay (10)\n"
    "  --min-lr-ratio X         final learning rate as a fraction of --lr (0.1)\n"
    "  --weight-decay X         decoupled weight decay (0)\n"
    "  --momentum X             SGD momentum (0.9)\n"
    "  --grad-clip X            clip the global gradient norm to X, 0 = off (1.0)\n"
    "  --precision fp32|bf16|fp16  storage of parameters and gradients (fp32);\n"
    "                           bf16/fp16 keep fp32 master weights, m and v\n"
    "  --loss-scale X           fp16 static loss scale, 0 = dynamic (0)\n"
    "  --seed N                 seed of data and initialisation (1234)\n"
    "  --stage 0|1|2|3          ZeRO stage (0)\n"
    "  --checkpoint-activations off|every:K|sqrt\n"
    "                           keep only segment inputs and recompute (GPT; off)\n"
    "  --compression none|topk:F|int8|sign\n"
    "                           compress gradients in place of the reduce-scatter\n"
    "                           (stages 1-3; error feedback on by default)\n"
    "  --no-error-feedback      drop what compression did not send\n"
    "  --compression-warmup N   dense steps before compression starts (0)\n"
    "  --grad-reduce micro-batch|step\n"
    "                           stages 0-1: reduce gradients after every micro-batch\n"
    "                           (micro-batch, the default; stages stay bit-identical)\n"
    "                           or accumulate them locally and reduce once per step\n"
    "                           (step, DeepSpeed's schedule); stages 2-3 reduce every\n"
    "                           micro-batch either way (accepted, no effect)\n"
    "  --overlap-comm on|off    a bucket's reduce-scatter runs behind the backward\n"
    "                           of the next units (overlap_comm; on in stage 3,\n"
    "                           off below)\n"
    "  --offload-optimizer none|cpu|nvme\n"
    "                           ZeRO-Offload (stages 1-3): fp32 master, m and v and\n"
    "                           the optimizer step on the host, or in files under\n"
    "                           --nvme-path DIR (offload_optimizer; none)\n"
    "  --offload-param none|cpu|nvme  stage 3 with --offload-optimizer: the\n"
    "                           parameter shard on the host or in a file too\n"
    "                           (ZeRO-Infinity)\n"
    "  --deterministic          sum gradients as fixed-point integers: the same bytes\n"
    "                           for any number of ranks with the same global batch\n"
    "  --qat int8|nf4           quantization-aware training: the linear weights enter\n"
    "                           forward and backward fake-quantized (int8 absmax per\n"
    "                           tensor, nf4 blocks of 64); fp32 master weights\n"
    "                           (zerosim.qat; docs/quantization.md)\n"
    "  --config FILE            DeepSpeed-style JSON configuration\n"
    "mesh (ranks = tp x dp x pp, Megatron-LM's order; see zerosim mesh):\n"
    "  --tp T                   tensor-parallel size (1; tensor_parallel.autotp_size)\n"
    "  --pp P                   pipeline stages (1): the GPT's blocks cut into P\n"
    "                           contiguous stages (see docs/pipeline.md)\n"
    "  --pp-schedule gpipe|1f1b|interleaved  the pipeline's schedule (1f1b);\n"
    "                           micro-batches per step = gradient_accumulation_steps\n"
    "  --virtual-stages v       model chunks per pipeline rank (1; v >= 2 with\n"
    "                           interleaved: chunk c of rank r is stage c*P + r)\n"
    "  --pp-partition uniform|parameters  blocks per stage by count, or balanced\n"
    "                           by parameters (DeepSpeed's partition_method; uniform)\n"
    "  --sequence-parallel      shard LayerNorm and residual activations along the\n"
    "                           sequence in the tensor-parallel group (--tp 2 or more)\n"
    "  --ranks-per-node K       K consecutive ranks make a node (default: the nodes\n"
    "                           MPI reports; a phantom run: one node); the ledger\n"
    "                           splits traffic into intra- and inter-node bytes\n"
    "  --hierarchical           two-level reduce-scatter and allgather: inside each\n"
    "                           node, then across nodes (zerosim.hierarchical_collectives)\n"
    "  --quantized-weights      ZeRO++ qwZ (stage 3): forward parameter gathers sent as\n"
    "                           int8 blocks of 256 with a scale each, lossy\n"
    "                           (zero_optimization.zero_quantized_weights)\n"
    "  --hpz-partition-size K   ZeRO++ hpZ (stage 3): a secondary copy of the parameters\n"
    "                           over K ranks of a node; backward gathers stay inside it\n"
    "                           (zero_optimization.zero_hpz_partition_size)\n"
    "  --quantized-gradients    ZeRO++ qgZ (stage 3): gradients reduced by a two-level\n"
    "                           all-to-all of 4-bit blocks, lossy\n"
    "                           (zero_optimization.zero_quantized_gradients)\n"
    "mixture of experts (docs/moe.md; the config's \"moe\" section):\n"
    "  --moe-experts E          experts per MoE block (0: a dense model)\n"
    "  --moe-every K            every K-th block is a MoE block (1)\n"
    "  --moe-top-k 1|2          experts per token (1)\n"
    "  --capacity-factor F      capacity ceil(tokens / E x F) (x2 for top-2) (1)\n"
    "  --min-capacity C         at least C tokens per expert (4)\n"
    "  --aux-loss-coeff A       weight of the load-balancing loss (0.01)\n"
    "  --ep P                   expert-parallel size: experts dealt over groups of\n"
    "                           P data-parallel ranks (1)\n"
    "  --ep-layout auto|deepspeed  auto: byte-identical to --ep 1, the experts' states\n"
    "                           over the expert-data-parallel group where the sums'\n"
    "                           order allows (deterministic mode, or 2 ranks in fp32);\n"
    "                           deepspeed: there always (auto)\n"
    "run:\n"
    "  --backend cpu|cuda       compute backend (cpu); cuda in builds configured with\n"
    "                           CUDA (see --version), each rank on GPU (local rank)\n"
    "  --device-memory SIZE     simulated device memory per rank, e.g. 512MiB, 2GB\n"
    "  --host-memory SIZE       simulated host memory per rank (the offload tier)\n"
    "  --report FILE            write a JSON report\n"
    "  --csv DIR                write the report as #-headed columns (for gnuplot)\n"
    "  --print-every N          progress line every N steps (the config's\n"
    "                           steps_per_print, 10)\n"
    "  --quiet                  no progress lines (the step lines and the \"saved\"\n"
    "                           lines); the start-up line, the summary and the tables\n"
    "                           still print\n"
    "  --silent                 print nothing but errors (--report, --csv and\n"
    "                           --trace still write)\n"
    "  --trace FILE             write a Chrome trace of every rank's steps (ops and\n"
    "                           collectives; chrome://tracing or ui.perfetto.dev)\n"
    "  --collective-timeout S   seconds a rank waits in one collective for a lost\n"
    "                           or stopped rank before the run stops (600)\n"
    "checkpoints (sharded: each rank writes its shard; see docs/checkpoints.md):\n"
    "  --save-dir DIR           save the training state into DIR/global_stepK after\n"
    "                           the last step (and every --save-every steps);\n"
    "                           DIR/latest names the newest\n"
    "  --save-every K           also save after every K steps\n"
    "  --resume DIR             start from a checkpoint (DIR/latest, or a\n"
    "                           global_stepK folder): --steps counts from the start\n"
    "                           of training; any ZeRO stage and any number of ranks\n"
    "                           with the same global batch\n"
    "weights, data and dumps (the GPT; formats in docs/file-formats.md):\n"
    "  --init-from FILE         start from GPT-2 weights: Hugging Face's safetensors\n"
    "                           names (.safetensors) or llm.c's gpt2 .bin; the shapes\n"
    "                           are the file's (--heads only when a safetensors file\n"
    "                           has no n_head metadata)\n"
    "  --export FILE            write the fp32 parameters after the last step, as\n"
    "                           .safetensors or .bin (llm.c)\n"
    "  --format safetensors|bin the format of --export / export's --out when its name\n"
    "                           does not say it\n"
    "  --data FILE              train on tokens in llm.c's format (uint16 after a\n"
    "                           256-int header): sample i is the window of seq + 1\n"
    "                           tokens at a start drawn from (seed, i); default the\n"
    "                           synthetic Markov chain\n"
    "  --val-data FILE          held-out tokens: the loss of samples 0 .. global\n"
    "                           batch - 1 under the fp32 parameters, every\n"
    "                           --val-every steps and after the last, in the log\n"
    "                           lines and the report's val_loss\n"
    "  --val-every K            steps between held-out losses (--print-every)\n"
    "  --dump-dir DIR           with --dump-steps LIST (e.g. 0,1,5-7; 0 = before\n"
    "  --dump-steps LIST        step 1): DIR/step_NNNNNN.safetensors per listed step:\n"
    "                           the global batch's tokens and targets, lr, loss,\n"
    "                           grad_norm, the gradient before clipping (grad.*) and\n"
    "                           the parameters after the step (param.*), fp32, full,\n"
    "                           in Hugging Face's GPT-2 names\n"
    "phantom runs (no mpirun):\n"
    "  --phantom                run the engine for simulated ranks without storage,\n"
    "                           arithmetic or traffic; memory and traffic are exact\n"
    "  --world-size N           number of simulated ranks (with --phantom or\n"
    "                           --print-program); a phantom run defaults to --steps 2\n"
    "  --print-program          print the step program of rank 0 on --world-size N\n"
    "                           ranks (default 1), one op a line, and exit\n"
    "  --print-config           print the resolved configuration as JSON for\n"
    "                           --world-size N ranks (default 1): what each \"auto\"\n"
    "                           became, the keys with no effect; and exit\n";

enum {
    OPT_MODEL = 256, OPT_LAYERS, OPT_HIDDEN, OPT_HEADS, OPT_SEQ, OPT_VOCAB, OPT_WIDTHS,
    OPT_INPUT_DIM, OPT_CLASSES, OPT_ACTIVATION, OPT_STEPS, OPT_MICRO_BATCH, OPT_GRAD_ACCUM,
    OPT_TRAIN_BATCH, OPT_OPTIMIZER, OPT_LR, OPT_WARMUP, OPT_MIN_LR_RATIO, OPT_WEIGHT_DECAY,
    OPT_MOMENTUM, OPT_GRAD_CLIP, OPT_PRECISION, OPT_LOSS_SCALE, OPT_SEED, OPT_STAGE,
    OPT_CONFIG, OPT_BACKEND, OPT_DEVICE_MEMORY, OPT_REPORT, OPT_PRINT_EVERY, OPT_QUIET,
    OPT_SILENT,
    OPT_HELP, OPT_VERSION, OPT_DETERMINISTIC, OPT_CSV, OPT_CKPT, OPT_COMP, OPT_NO_EF, OPT_COMP_WARMUP,
    OPT_PHANTOM, OPT_WORLD_SIZE, OPT_PRINT_PROGRAM, OPT_TP, OPT_PP, OPT_SP, OPT_RPN, OPT_HIER, OPT_QWZ, OPT_HPZ, OPT_QGZ,
    OPT_GRAD_REDUCE, OPT_OVERLAP_COMM,
    OPT_COLL_TIMEOUT, OPT_PRINT_CONFIG, OPT_TRACE, OPT_SAVE_DIR, OPT_SAVE_EVERY, OPT_RESUME,
    OPT_OFFLOAD_OPT, OPT_OFFLOAD_PARAM, OPT_NVME_PATH, OPT_HOST_MEMORY,
    OPT_INIT_FROM, OPT_EXPORT, OPT_FORMAT, OPT_OUT, OPT_DATA, OPT_VAL_DATA, OPT_VAL_EVERY,
    OPT_DUMP_DIR, OPT_DUMP_STEPS, OPT_FROM, OPT_QAT,
    OPT_MOE_EXPERTS, OPT_MOE_EVERY, OPT_MOE_TOP_K, OPT_CAPACITY_FACTOR, OPT_MIN_CAPACITY,
    OPT_AUX_LOSS_COEFF, OPT_EP, OPT_EP_LAYOUT, OPT_PP_SCHEDULE, OPT_PP_PARTITION, OPT_VIRTUAL_STAGES,
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
    {"momentum", required_argument, NULL, OPT_MOMENTUM},
    {"grad-clip", required_argument, NULL, OPT_GRAD_CLIP},
    {"precision", required_argument, NULL, OPT_PRECISION},
    {"loss-scale", required_argument, NULL, OPT_LOSS_SCALE},
    {"seed", required_argument, NULL, OPT_SEED},
    {"stage", required_argument, NULL, OPT_STAGE},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"device-memory", required_argument, NULL, OPT_DEVICE_MEMORY},
    {"report", required_argument, NULL, OPT_REPORT},
    {"print-every", required_argument, NULL, OPT_PRINT_EVERY},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"silent", no_argument, NULL, OPT_SILENT},
    {"deterministic", no_argument, NULL, OPT_DETERMINISTIC},
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
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

/* Option values as given, indexed by option id; applied after --config. */
typedef struct {
    const char *val[OPT_LAST];
} zs_cli;

/* With --ep: which of the engine's two layouts the run took, and why
 * (zs_step_ep_split, zerosim/program.h). */
static void zs_print_ep_layout(FILE *f, const zs_run_config *cfg, int world)
{
    if (cfg->ep <= 1)
        return;
    int T = cfg->tp > 1 ? cfg->tp : 1, P = cfg->pp > 1 ? cfg->pp : 1, D = world / (T * P);
    const char *why = NULL;
    if (zs_step_ep_split(cfg, D, &why))
        fprintf(f, "expert parallelism --ep %d: DeepSpeed's layout, each rank the dense "
                "parameters and %d of %d experts per MoE block, their states over "
                "expert-data-parallel groups of %d%s\n", cfg->ep,
                cfg->model.moe_experts / cfg->ep, cfg->model.moe_experts, D / cfg->ep,
                zs_step_ep_exact(cfg, D) ? ""
                                         : " (--ep-layout deepspeed: the experts' gradients "
                                           "summed over edp as floats, not in --ep 1's order: "
                                           "close to --ep 1, not byte-identical)");
    else
        fprintf(f, "expert parallelism --ep %d: --ep 1's layout, every expert's states on "
                "every rank and the expert gradients sent home (DeepSpeed's layout: not with "
                "%s)\n", cfg->ep, why);
}

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

/* Apply the command-line options onto c (after defaults and --config). */
static int zs_cli_apply(const zs_cli *cli, zs_run_config *c, int had_config)
{
    long v = 0;
    float f = 0.0f;
    const char *s;
    zs_model_config *mc = &c->model;
    if ((s = cli->val[OPT_MODEL])) {
        if (!strcmp(s, "gpt"))
            mc->kind = ZS_MODEL_GPT;
        else if (!strcmp(s, "mlp"))
            mc->kind = ZS_MODEL_MLP;
        else
            ZS_FAIL("--model must be \"mlp\" or \"gpt\", got \"%s\"", s);
    }
    if ((s = cli->val[OPT_LAYERS])) {
        ZS_TRY(zs_parse_int(OPT_LAYERS, s, 0, ZS_BOUND_LAYERS_MAX, &v));
        if (mc->kind == ZS_MODEL_GPT && v < 1)
            ZS_FAIL("--layers must be at least 1 for the GPT, got \"%s\"", s);
        if (v > ZS_MLP_MAX_HIDDEN && mc->kind == ZS_MODEL_MLP)
            ZS_FAIL("--layers must be at most %d for the MLP, got \"%s\"", ZS_MLP_MAX_HIDDEN, s);
        mc->n_layer = (int)v;
        mc->n_hidden = v > ZS_MLP_MAX_HIDDEN ? ZS_MLP_MAX_HIDDEN : (int)v;
    }
    if ((s = cli->val[OPT_HIDDEN])) {
        ZS_TRY(zs_parse_int(OPT_HIDDEN, s, 1, ZS_BOUND_HIDDEN_MAX, &v));
        mc->n_embd = (int)v;
        for (int i = 0; i < ZS_MLP_MAX_HIDDEN; i++)
            mc->widths[i] = (int)v;
    }
    if ((s = cli->val[OPT_WIDTHS])) {
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
            mc->widths[n++] = (int)w;
            p = *end ? end + 1 : end;
        }
        mc->n_hidden = n;
    }
    static const struct { int id; long lo, hi; size_t off; } ints[] = {
        {OPT_HEADS, 1, ZS_BOUND_HEADS_MAX, offsetof(zs_run_config, model.n_head)},
        {OPT_SEQ, 1, ZS_BOUND_SEQ_MAX, offsetof(zs_run_config, model.seq_len)},
        {OPT_VOCAB, ZS_BOUND_VOCAB_MIN, ZS_BOUND_VOCAB_MAX, offsetof(zs_run_config, model.vocab)},
        {OPT_INPUT_DIM, 1, 1 << 20, offsetof(zs_run_config, model.input_dim)},
        {OPT_CLASSES, 2, 1 << 20, offsetof(zs_run_config, model.n_classes)},
        {OPT_STEPS, 1, 100000000, offsetof(zs_run_config, steps)},
        {OPT_MICRO_BATCH, 1, ZS_BOUND_BATCH_MAX, offsetof(zs_run_config, micro_batch)},
        {OPT_GRAD_ACCUM, 1, ZS_BOUND_BATCH_MAX, offsetof(zs_run_config, grad_accum)},
        {OPT_TRAIN_BATCH, 1, INT_MAX, offsetof(zs_run_config, train_batch_size)},
        {OPT_WARMUP, 0, 100000000, offsetof(zs_run_config, warmup_steps)},
        {OPT_STAGE, 0, 3, offsetof(zs_run_config, stage)},
        {OPT_MOE_EXPERTS, 0, ZS_BOUND_MOE_EXPERTS_MAX, offsetof(zs_run_config, model.moe_experts)},
        {OPT_MOE_EVERY, 1, ZS_BOUND_MOE_EVERY_MAX, offsetof(zs_run_config, model.moe_every)},
        {OPT_MOE_TOP_K, 1, ZS_BOUND_MOE_TOP_K_MAX, offsetof(zs_run_config, model.moe_top_k)},
        {OPT_MIN_CAPACITY, 0, 1 << 24, offsetof(zs_run_config, model.moe_min_capacity)},
        {OPT_EP, 1, ZS_BOUND_EP_MAX, offsetof(zs_run_config, ep)},
        {OPT_VIRTUAL_STAGES, 1, ZS_BOUND_VIRTUAL_STAGES_MAX, offsetof(zs_run_config, virtual_stages)},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if ((s = cli->val[ints[i].id])) {
            ZS_TRY(zs_parse_int(ints[i].id, s, ints[i].lo, ints[i].hi, &v));
            *(int *)((char *)c + ints[i].off) = (int)v;
        }
    static const struct { int id; double lo, hi; size_t off; } reals[] = {
        {OPT_LR, 1e-12, 1e3, offsetof(zs_run_config, lr)},
        {OPT_MIN_LR_RATIO, 0, 1, offsetof(zs_run_config, cos_min_ratio)},
        {OPT_WEIGHT_DECAY, 0, 1e3, offsetof(zs_run_config, weight_decay)},
        {OPT_MOMENTUM, 0, 0.999999, offsetof(zs_run_config, momentum)},
        {OPT_GRAD_CLIP, 0, 1e30, offsetof(zs_run_config, grad_clip)},
        {OPT_LOSS_SCALE, 0, 6.5e4, offsetof(zs_run_config, static_loss_scale)},
    };
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++)
        if ((s = cli->val[reals[i].id])) {
            ZS_TRY(zs_parse_float(reals[i].id, s, reals[i].lo, reals[i].hi, &f));
            *(float *)((char *)c + reals[i].off) = f;
        }
    if (cli->val[OPT_WARMUP] || cli->val[OPT_MIN_LR_RATIO])
        if (c->scheduler == ZS_SCHED_CONSTANT)
            c->scheduler = ZS_SCHED_WARMUP_COSINE;
    if ((s = cli->val[OPT_CAPACITY_FACTOR])) {
        ZS_TRY(zs_parse_float(OPT_CAPACITY_FACTOR, s, 1e-6, 1e6, &f));
        c->model.moe_capacity_factor = strtod(s, NULL); /* the double as given */
    }
    if ((s = cli->val[OPT_AUX_LOSS_COEFF])) {
        ZS_TRY(zs_parse_float(OPT_AUX_LOSS_COEFF, s, 0, 1e6, &f));
        c->model.moe_aux_coeff = strtod(s, NULL);
    }
    if (cli->val[OPT_DETERMINISTIC])
        c->deterministic = 1;
    if ((s = cli->val[OPT_QAT])) {
        zs_quant_format qf;
        if (zs_quant_format_parse(s, &qf) || qf == ZS_QUANT_INT8_ZP)
            ZS_FAIL("--qat takes none, int8 or nf4 (absmax formats), got \"%s\"", s);
        c->qat = (int)qf;
    }
    if ((s = cli->val[OPT_COMP]) && zs_comp_parse(s, &c->compression))
        return -1;
    if (cli->val[OPT_NO_EF])
        c->error_feedback = 0;
    if ((s = cli->val[OPT_TP])) {
        ZS_TRY(zs_parse_int(OPT_TP, s, 1, ZS_BOUND_TP_MAX, &v));
        c->tp = (int)v;
    }
    if ((s = cli->val[OPT_PP])) {
        ZS_TRY(zs_parse_int(OPT_PP, s, 1, ZS_BOUND_PP_MAX, &v));
        c->pp = (int)v;
    }
    if (cli->val[OPT_SP])
        c->sequence_parallel = 1;
    if ((s = cli->val[OPT_PP_SCHEDULE]) && zs_pp_schedule_parse(s, &c->pp_schedule))
        ZS_FAIL("--pp-schedule must be gpipe, 1f1b or interleaved, got \"%s\"", s);
    if ((s = cli->val[OPT_PP_PARTITION]) && zs_pp_partition_parse(s, &c->pp_partition))
        ZS_FAIL("--pp-partition must be uniform or parameters, got \"%s\"", s);
    if (cli->val[OPT_HIER])
        c->hierarchical = 1;
    if (cli->val[OPT_QWZ])
        c->quantized_weights = 1;
    if (cli->val[OPT_QGZ])
        c->quantized_gradients = 1;
    if ((s = cli->val[OPT_HPZ])) {
        ZS_TRY(zs_parse_int(OPT_HPZ, s, 1, ZS_BOUND_RANKS_MAX, &v));
        c->hpz_partition_size = (int)v;
    }
    if ((s = cli->val[OPT_RPN])) {
        ZS_TRY(zs_parse_int(OPT_RPN, s, 1, ZS_BOUND_RANKS_MAX, &v));
        c->ranks_per_node = (int)v;
    }
    if ((s = cli->val[OPT_OFFLOAD_OPT]) && zs_offload_parse(s, &c->offload_optimizer))
        ZS_FAIL("--offload-optimizer must be none, cpu or nvme, got \"%s\"", s);
    if ((s = cli->val[OPT_OFFLOAD_PARAM]) && zs_offload_parse(s, &c->offload_param))
        ZS_FAIL("--offload-param must be none, cpu or nvme, got \"%s\"", s);
    if ((s = cli->val[OPT_NVME_PATH])) {
        if (!*s || strlen(s) >= sizeof c->nvme_path)
            ZS_FAIL("--nvme-path needs a folder (at most %zu characters)", sizeof c->nvme_path - 1);
        snprintf(c->nvme_path, sizeof c->nvme_path, "%s", s);
    }
    if ((s = cli->val[OPT_EP_LAYOUT]) && zs_ep_layout_parse(s, &c->ep_layout))
        ZS_FAIL("--ep-layout must be \"auto\" or \"deepspeed\", got \"%s\"", s);
    if ((s = cli->val[OPT_GRAD_REDUCE]) && zs_grad_reduce_parse(s, &c->grad_reduce))
        ZS_FAIL("--grad-reduce must be \"micro-batch\" or \"step\", got \"%s\"", s);
    if ((s = cli->val[OPT_OVERLAP_COMM])) {
        if (strcmp(s, "on") && strcmp(s, "off"))
            ZS_FAIL("--overlap-comm must be \"on\" or \"off\", got \"%s\"", s);
        c->overlap_comm = strcmp(s, "on") == 0;
    }
    if ((s = cli->val[OPT_COLL_TIMEOUT])) {
        ZS_TRY(zs_parse_float(OPT_COLL_TIMEOUT, s, 1e-3, 1e9, &f));
        c->collective_timeout = f;
    }
    if ((s = cli->val[OPT_COMP_WARMUP])) {
        ZS_TRY(zs_parse_int(OPT_COMP_WARMUP, s, 0, 100000000, &v));
        c->compression_warmup = (int)v;
    }
    if ((s = cli->val[OPT_CKPT])) {
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
    }
    if ((s = cli->val[OPT_SEED])) {
        ZS_TRY(zs_parse_int(OPT_SEED, s, 0, LONG_MAX, &v));
        c->seed = (uint64_t)v;
    }
    if ((s = cli->val[OPT_OPTIMIZER])) {
        if (!strcmp(s, "adamw") || !strcmp(s, "adam"))
            c->optimizer = ZS_OPT_ADAMW;
        else if (!strcmp(s, "sgd"))
            c->optimizer = ZS_OPT_SGD;
        else
            ZS_FAIL("--optimizer must be \"adamw\" or \"sgd\", got \"%s\"", s);
    }
    if ((s = cli->val[OPT_PRECISION])) {
        if (!strcmp(s, "fp32"))
            c->precision = ZS_DTYPE_F32;
        else if (!strcmp(s, "bf16"))
            c->precision = ZS_DTYPE_BF16;
        else if (!strcmp(s, "fp16"))
            c->precision = ZS_DTYPE_F16;
        else
            ZS_FAIL("--precision must be fp32, bf16 or fp16, got \"%s\"", s);
    }
    if ((s = cli->val[OPT_ACTIVATION])) {
        if (!strcmp(s, "relu"))
            mc->act = ZS_ACT_RELU;
        else if (!strcmp(s, "gelu"))
            mc->act = ZS_ACT_GELU;
        else
            ZS_FAIL("--activation must be \"relu\" or \"gelu\", got \"%s\"", s);
    }
    /* A batch option given here wins over the file's train_batch_size: when
     * both micro-batch and grad-accum are then known, the global batch is
     * derived from them again. */
    if (had_config && (cli->val[OPT_MICRO_BATCH] || cli->val[OPT_GRAD_ACCUM]) &&
        !cli->val[OPT_TRAIN_BATCH] && c->micro_batch > 0 && c->grad_accum > 0)
        c->train_batch_size = 0;
    return 0;
}

/* --init-from: the GPT's shapes are the file's. A shape the command line
 * or the --config file (what it set differs from the defaults) gave must
 * agree with the file. */
static int zs_cli_init_from(const zs_cli *cli, const zs_run_config *from_config,
                            zs_run_config *c)
{
    const char *path = cli->val[OPT_INIT_FROM];
    if (c->model.kind != ZS_MODEL_GPT)
        ZS_FAIL("--init-from %s: weight files hold GPTs; drop --model mlp", path);
    zs_model_config f;
    ZS_TRY(zs_weights_probe(path, &f));
    zs_run_config def;
    zs_run_config_defaults(&def);
    static const struct { int id; const char *what; size_t off; } sh[] = {
        {OPT_LAYERS, "layers", offsetof(zs_model_config, n_layer)},
        {OPT_HIDDEN, "hidden", offsetof(zs_model_config, n_embd)},
        {OPT_HEADS, "heads", offsetof(zs_model_config, n_head)},
        {OPT_SEQ, "seq", offsetof(zs_model_config, seq_len)},
        {OPT_VOCAB, "vocab", offsetof(zs_model_config, vocab)},
    };
    for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
#define ZS_FIELD(cfgp) (*(int *)((char *)&(cfgp)->model + sh[i].off))
        int file = *(int *)((char *)&f + sh[i].off), have = ZS_FIELD(c);
        int by_cli = cli->val[sh[i].id] != NULL;
        int by_config = ZS_FIELD(from_config) != ZS_FIELD(&def);
#undef ZS_FIELD
        if (file == 0) { /* the number of heads, when the file does not say it */
            if (!by_cli && !by_config)
                ZS_FAIL("--init-from %s: the file does not say the number of heads (no n_head "
                        "in its metadata): give --heads", path);
            continue;
        }
        if ((by_cli || by_config) && have != file)
            ZS_FAIL("--init-from %s holds a GPT with %s %d, but %s gives %d: drop the %s",
                    path, sh[i].what, file, by_cli ? "the command line" : "the --config file",
                    have, by_cli ? "option" : "key");
        *(int *)((char *)&c->model + sh[i].off) = file;
    }
    if (c->model.n_embd % c->model.n_head)
        ZS_FAIL("--init-from %s: --heads %d does not divide the file's hidden size %d", path,
                c->model.n_head, c->model.n_embd);
    return 0;
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
        c->optimizer = !strcmp(opt, "sgd") ? ZS_OPT_SGD : ZS_OPT_ADAMW;
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
    int gpt = c->model.kind == ZS_MODEL_GPT;
    static const int gpt_only[] = {OPT_INIT_FROM, OPT_EXPORT, OPT_OUT, OPT_DATA, OPT_VAL_DATA,
                                   OPT_DUMP_DIR};
    const char *name = "?";
    for (size_t i = 0; i < sizeof gpt_only / sizeof gpt_only[0]; i++)
        if (cli->val[gpt_only[i]] && (!gpt || cli->val[OPT_PHANTOM])) {
            zs_opt_name_is(gpt_only[i], &name);
            if (!gpt)
                ZS_FAIL("--%s is for the GPT (GPT-2's tensor names, token files): the MLP has "
                        "none", name);
            ZS_FAIL("--%s needs a real run: a phantom run computes no values", name);
        }
    o->init_from = cli->val[OPT_INIT_FROM];
    c->data_file = cli->val[OPT_DATA];
    o->val_data = cli->val[OPT_VAL_DATA];
    if (cli->val[OPT_VAL_EVERY] && !o->val_data)
        ZS_FAIL("--val-every needs --val-data FILE, the held-out tokens");
    o->val_every = o->print_every;
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

/* Parse, configure and validate; 0 to train, else an exit code (after
 * printing, on rank 0 only, one line). */
/* Parse the train options. *phantom_world is set to the simulated world
 * size of a phantom run, else 0. */
static int zs_train_setup(int argc, char **argv, int rank, int world, zs_run_config *cfg,
                          zs_train_options *o, const char **report, const char **csv,
                          const char **trace, int *phantom_world, int *print_program)
{
    *phantom_world = 0;
    *print_program = 0;
    zs_cli cli;
    memset(&cli, 0, sizeof cli);
    FILE *err = rank == 0 ? stderr : NULL;
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
            if (rank == 0)
                fputs(zs_usage, stdout);
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
        cli.val[ch] = optarg ? optarg : "1";
    }
    if (optind < argc) {
        if (err)
            fprintf(err, "zerosim: unexpected argument \"%s\" (see zerosim --help)\n", argv[optind]);
        return 2;
    }
    if (cli.val[OPT_PRINT_CONFIG])
        cli.val[OPT_PRINT_PROGRAM] = "config"; /* the same: no ranks, --world-size N */
    if (cli.val[OPT_WORLD_SIZE] && !cli.val[OPT_PHANTOM] && !cli.val[OPT_PRINT_PROGRAM]) {
        if (err)
            fprintf(err, "zerosim: --world-size is for phantom runs (add --phantom); a real run "
                    "takes its size from mpirun -np\n");
        return 2;
    }
    if (cli.val[OPT_PRINT_PROGRAM]) {
        long v = 1;
        if (world > 1) {
            if (err)
                fprintf(err, "zerosim: --%s runs no ranks: run it without mpirun, "
                        "with --world-size N\n",
                        cli.val[OPT_PRINT_CONFIG] ? "print-config" : "print-program");
            return 2;
        }
        if (cli.val[OPT_WORLD_SIZE] &&
            zs_parse_int(OPT_WORLD_SIZE, cli.val[OPT_WORLD_SIZE], 1, ZS_BOUND_RANKS_MAX, &v))
            goto fail;
        world = *phantom_world = (int)v;
        *print_program = cli.val[OPT_PRINT_CONFIG] ? 2 : 1;
    } else if (cli.val[OPT_PHANTOM]) {
        long v;
        if (!cli.val[OPT_WORLD_SIZE]) {
            if (err)
                fprintf(err, "zerosim: --phantom needs --world-size N, the number of ranks to "
                        "simulate\n");
            return 2;
        }
        if (world > 1) {
            if (err)
                fprintf(err, "zerosim: --phantom simulates the ranks itself: run it without "
                        "mpirun\n");
            return 2;
        }
        if (cli.val[OPT_TRACE]) {
            if (err)
                fprintf(err, "zerosim: --trace records real time, and a phantom run spends none "
                        "computing or sending: drop --trace\n");
            return 2;
        }
        if (cli.val[OPT_SAVE_DIR] || cli.val[OPT_RESUME]) {
            if (err)
                fprintf(err, "zerosim: --phantom holds no values to save or load: drop %s\n",
                        cli.val[OPT_SAVE_DIR] ? "--save-dir" : "--resume");
            return 2;
        }
        if (cli.val[OPT_BACKEND]) {
            if (err)
                fprintf(err, "zerosim: --phantom computes nothing, on no backend: drop --backend "
                        "(the bytes it reports do not depend on the device)\n");
            return 2;
        }
        if (zs_parse_int(OPT_WORLD_SIZE, cli.val[OPT_WORLD_SIZE], 1, ZS_BOUND_RANKS_MAX, &v))
            goto fail;
        world = *phantom_world = (int)v;
    }
    zs_run_config_defaults(cfg);
    if (*phantom_world && !*print_program) /* the second step is the steady state */
        cfg->steps = 2;
    if (cli.val[OPT_CONFIG] && zs_config_load_file(cli.val[OPT_CONFIG], cfg))
        goto fail;
    zs_run_config from_config = *cfg;
    if (zs_cli_apply(&cli, cfg, cli.val[OPT_CONFIG] != NULL))
        goto fail;
    if (cli.val[OPT_INIT_FROM] && zs_cli_init_from(&cli, &from_config, cfg))
        goto fail;
    /* the manifest checked (its checksum first) before any field of it is taken */
    if (cli.val[OPT_FROM] && argv[0] && !strcmp(argv[0], "export") &&
        zs_cli_from_checkpoint(&cli, cfg))
        goto fail;
    /* export takes no step: without batch options its engine holds the
     * activations of one sample, not the default micro-batch's */
    if (argv[0] && !strcmp(argv[0], "export") && !cli.val[OPT_FROM] && !cli.val[OPT_CONFIG] &&
        !cli.val[OPT_MICRO_BATCH] && !cli.val[OPT_GRAD_ACCUM] && !cli.val[OPT_TRAIN_BATCH])
        cfg->micro_batch = 1;
    if (zs_run_config_finalize(cfg, world))
        goto fail;
    if (cli.val[OPT_HOST_MEMORY] && zs_parse_size(cli.val[OPT_HOST_MEMORY], &o->host_memory)) {
        if (err)
            fprintf(err, "zerosim: --host-memory: %s\n", zs_error_msg());
        return 1;
    }
    if ((cfg->offload_optimizer == ZS_OFFLOAD_NVME || cfg->offload_param == ZS_OFFLOAD_NVME) &&
        rank == 0 &&
        zs_check_nvme_path(cfg->nvme_path)) /* now, not after the engine is built */
        goto fail;
    if (cli.val[OPT_DEVICE_MEMORY] && zs_parse_size(cli.val[OPT_DEVICE_MEMORY], &o->device_memory)) {
        if (err)
            fprintf(err, "zerosim: --device-memory: %s\n", zs_error_msg());
        return 1;
    }
    if (cli.val[OPT_BACKEND])
        o->backend = cli.val[OPT_BACKEND];
    if (cli.val[OPT_PRINT_EVERY]) {
        long v;
        if (zs_parse_int(OPT_PRINT_EVERY, cli.val[OPT_PRINT_EVERY], 1, INT_MAX, &v))
            goto fail;
        o->print_every = (int)v;
    } else if (cfg->steps_per_print > 0) { /* the config's steps_per_print */
        o->print_every = cfg->steps_per_print;
    }
    if (cli.val[OPT_SAVE_EVERY]) {
        long v;
        if (!cli.val[OPT_SAVE_DIR]) {
            if (err)
                fprintf(err, "zerosim: --save-every needs --save-dir DIR, where to save\n");
            return 2;
        }
        if (zs_parse_int(OPT_SAVE_EVERY, cli.val[OPT_SAVE_EVERY], 1, INT_MAX, &v))
            goto fail;
        o->save_every = (int)v;
    }
    o->save_dir = cli.val[OPT_SAVE_DIR];
    o->resume = cli.val[OPT_RESUME];
    if (o->save_dir && rank == 0 && zs_check_save_dir(o->save_dir)) /* now, not after training */
        goto fail;
    if (zs_cli_outputs(&cli, cfg, o, rank, argv[0] && !strcmp(argv[0], "export")))
        goto fail;
    *report = cli.val[OPT_REPORT];
    *trace = cli.val[OPT_TRACE];
    o->trace = *trace != NULL;
    *csv = cli.val[OPT_CSV];
    if (*csv && rank == 0 && zs_report_prepare_dir(*csv)) /* now, not after training */
        goto fail;
    return 0;
fail:
    if (err)
        fprintf(err, "zerosim: %s\n", zs_error_msg());
    return 1;
}

/* Whether the arguments ask for a phantom run or the step program (getopt's
 * unambiguous abbreviations included), which must not start MPI. */
static int zs_wants_phantom(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        size_t n = strlen(argv[i]);
        if (!strcmp(argv[i], "--"))
            break;
        if (n >= 4 && !strncmp(argv[i], "--phantom", n))
            return 1;
        if (n >= 4 && !strncmp(argv[i], "--print-program", n))
            return 1;
        if (n >= 9 && !strncmp(argv[i], "--print-config", n))
            return 1;
    }
    return 0;
}

/* The step program of rank 0 of cfg on `world` ranks, one op a line. */
static int zs_print_program_one(const zs_run_config *cfg, int world, FILE *f)
{
    zs_model *m;
    ZS_TRY(zs_model_create(&cfg->model, &m));
    zs_step_shape s;
    zs_step_program p;
    int rc = zs_step_shape_build(cfg, m, world, &s);
    if (!rc) {
        rc = zs_step_program_build(&s, m, 0, &p);
        if (!rc) {
            zs_step_program_print(&s, &p, f);
            zs_step_program_free(&p);
        }
        zs_step_shape_free(&s);
    }
    zs_model_destroy(m);
    return rc;
}

static int zs_print_program(const zs_run_config *cfg, int world, FILE *f)
{
    if (cfg->pp > 1) { /* each pipeline stage runs its own program */
        for (int st = 0; st < cfg->pp; st++) {
            zs_run_config c = *cfg; /* over the stage's data-parallel ranks */
            ZS_TRY(zs_pp_stage_config(&c, st));
            ZS_TRY(zs_print_program_one(&c, world / (cfg->pp * (cfg->tp > 1 ? cfg->tp : 1)), f));
        }
        return 0;
    }
    return zs_print_program_one(cfg, world, f);
}

static int zs_print_notices_stage(const zs_run_config *cfg, int dp_world, FILE *f);

/* Rank 0's notices before training: stage-3 units larger than
 * stage3_max_live_parameters, which are gathered alone. */
static int zs_print_notices(const zs_run_config *cfg, int dp_world, FILE *f)
{
    if (cfg->stage != 3)
        return 0;
    int rc = 0;
    for (int st = 0; st < (cfg->pp > 1 ? cfg->pp : 1) && !rc; st++) {
        zs_run_config c = *cfg; /* a pipeline: each stage's units */
        if (cfg->pp > 1 && (rc = zs_pp_stage_config(&c, st)))
            break;
        rc = zs_print_notices_stage(&c, dp_world, f);
    }
    return rc;
}

static int zs_print_notices_stage(const zs_run_config *cfg, int dp_world, FILE *f)
{
    zs_model *m;
    ZS_TRY(zs_model_create(&cfg->model, &m));
    zs_step_shape s;
    int rc = zs_step_shape_build(cfg, m, dp_world, &s);
    if (!rc) {
        int first, n = zs_step_shape_units_over_bound(&s, &first);
        if (n > 0) {
            char name[64]; /* the GPT's units: embeddings, blocks, head */
            if (cfg->model.kind != ZS_MODEL_GPT)
                snprintf(name, sizeof name, "layer %d", first);
            else if (first == 0 || first == s.U - 1)
                snprintf(name, sizeof name, "%s", first == 0 ? "embeddings" : "head");
            else
                snprintf(name, sizeof name, "block %d", first - 1);
            fprintf(f, "stage 3: unit '%s' holds %zu parameters, more than "
                    "stage3_max_live_parameters (%zu): it is gathered alone, as DeepSpeed does",
                    name, s.gelems[first], cfg->stage3_max_live_parameters);
            if (n > 1)
                fprintf(f, " (and so are %d more units of the %d)", n - 1, s.U);
            fputc('\n', f);
        }
        zs_step_shape_free(&s);
    }
    zs_model_destroy(m);
    return rc;
}

static int zs_cmd_train(int argc, char **argv)
{
    zs_comm_t comm;
    int phantom = zs_wants_phantom(argc, argv);
    if (phantom) {
        comm = zs_comm_self();
        if (!comm) {
            fprintf(stderr, "zerosim: out of host memory\n");
            return 1;
        }
    } else if (zs_comm_init(NULL, NULL, &comm)) {
        fprintf(stderr, "zerosim: %s\n", zs_error_msg());
        return 1;
    }
    int rank = zs_comm_rank(comm), world = zs_comm_size(comm);
    if (phantom) { /* started by mpirun anyway? setup refuses it */
        const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
        if (ws && atoi(ws) > 1)
            world = atoi(ws);
    }
    zs_train_options o = {.backend = "cpu", .log = stdout, .print_every = 10};
    zs_run_config cfg;
    const char *report = NULL, *csv = NULL, *trace = NULL;
    int phantom_world = 0, print_program = 0;
    int rc = zs_train_setup(argc, argv, rank, world, &cfg, &o, &report, &csv, &trace,
                            &phantom_world, &print_program);
    if (phantom_world)
        world = phantom_world;
    int setup_failed = 0; /* some checks run on rank 0 only: agree */
    if (!phantom && world > 1 && zs_comm_agree(comm, rc > 0, 60.0, &setup_failed))
        zs_comm_abort(comm, 1);
    if (!rc && setup_failed)
        rc = 1;
    if (rc) {
        zs_comm_finalize(comm);
        return rc < 0 ? 0 : rc;
    }
    if (print_program == 2) {
        char *text = zs_run_config_json(&cfg);
        if (text)
            printf("%s\n", text);
        else
            fprintf(stderr, "zerosim: out of host memory\n");
        free(text);
        zs_comm_finalize(comm);
        return text ? 0 : 1;
    }
    if (print_program) {
        rc = zs_print_program(&cfg, world, stdout);
        if (rc)
            fprintf(stderr, "zerosim: %s\n", zs_error_msg());
        zs_comm_finalize(comm);
        return rc ? 1 : 0;
    }
    o.hash_every_step = report != NULL;
    if (rank == 0 && o.log && cfg.auto_mask) {
        char buf[2048];
        fprintf(o.log, "config: \"auto\" became %s\n",
                zs_run_config_describe_auto(&cfg, buf, sizeof buf));
    }
    if (rank == 0 && o.log && cfg.noeffect[0])
        fprintf(o.log, "config: accepted with no effect in zerosim: %s\n", cfg.noeffect);
    if (rank == 0 && o.log && cfg.adjusted[0])
        fprintf(o.log, "config: adjusted: %s\n", cfg.adjusted);
    if (rank == 0 && o.log && !o.no_steps) {
        const char *reduce = "";
        if (cfg.grad_reduce == ZS_GRAD_REDUCE_STEP)
            reduce = cfg.stage <= 1 ? ", gradients reduced once per step (--grad-reduce step)"
                                    : ", --grad-reduce step (no effect in stages 2-3: they "
                                      "reduce every micro-batch)";
        char offl[160] = "";
        if (cfg.offload_optimizer == ZS_OFFLOAD_CPU)
            snprintf(offl, sizeof offl, ", optimizer offloaded to the host");
        else if (cfg.offload_optimizer == ZS_OFFLOAD_NVME)
            snprintf(offl, sizeof offl, ", optimizer offloaded to files in %.100s", cfg.nvme_path);
        fprintf(o.log, "zerosim %s: %s model, %s, ZeRO stage %d on %d %srank%s%s, micro-batch %d x "
                "grad-accum %d x %d%s%s%s, %d steps\n",
                PACKAGE_VERSION, cfg.model.kind == ZS_MODEL_GPT ? "gpt" : "mlp",
                zs_dtype_name(cfg.precision), cfg.stage, world, phantom ? "simulated " : "",
                world == 1 ? "" : "s",
                cfg.deterministic ? " (deterministic)" : "", cfg.micro_batch, cfg.grad_accum,
                world / (cfg.tp * cfg.pp), cfg.tp * cfg.pp > 1 ? " data-parallel" : "", reduce,
                offl, cfg.steps);
        if (zs_print_notices(&cfg, world / (cfg.tp * cfg.pp), o.log))
            fprintf(stderr, "zerosim: %s\n", zs_error_msg()); /* the run says it again */
    }
    zs_train_result r;
    rc = phantom ? zs_train_phantom(&cfg, &o, world, &r) : zs_train(&cfg, &o, comm, &r);
    if (!rc && rank == 0 && o.no_steps) { /* zerosim export */
        if (o.log)
            fprintf(o.log, "wrote %s (%s): a GPT of %d blocks, hidden %d, %d heads, seq %d, "
                    "vocab %d; %zu parameters, param_hash %s\n", o.export_path,
                    zs_weights_format_name((zs_weights_format)o.export_format), cfg.model.n_layer,
                    cfg.model.n_embd, cfg.model.n_head, cfg.model.seq_len, cfg.model.vocab,
                    zs_model_count_params(&cfg.model), r.param_hash);
    } else if (!rc && rank == 0) {
        if (o.log && phantom) {
            fprintf(o.log, "phantom run: %zu parameters%s (padded %zu%s) on %d simulated "
                    "ranks, %.2f s; nothing was stored, computed or sent, so there are no "
                    "losses and no param_hash; memory and traffic below are what a real run "
                    "records\n", r.num_params, cfg.tp > 1 ? " on each tensor-parallel rank" : "",
                    r.padded_params, cfg.pp > 1 ? " on pipeline stage 0" : "", world, r.seconds);
            fprintf(o.log, "peak accounted memory on rank 0: %zu bytes; peak host memory of "
                    "this process: %zu bytes\n", r.mem.total_peak, zs_report_peak_rss());
            zs_print_ep_layout(o.log, &cfg, world);
        } else if (o.log) {
            int k = r.steps < 10 ? r.steps : 10;
            double last = 0.0;
            for (int i = r.steps - k; i < r.steps; i++)
                last += r.info[i].loss / k;
            if (cfg.tp > 1)
                fprintf(o.log, "model %zu parameters, %zu on each of the %d tensor-parallel "
                        "ranks (below)\n", zs_model_count_params(&cfg.model), r.num_params,
                        cfg.tp);
            if (isnan(r.loss_floor)) /* real tokens: no known floor */
                fprintf(o.log, "parameters %zu (padded %zu), mean loss of the last %d steps "
                        "%.4f, loss floor unknown (real data), %.2f s\n", r.num_params,
                        r.padded_params, k, last, r.seconds);
            else
                fprintf(o.log, "parameters %zu (padded %zu), mean loss of the last %d steps "
                        "%.4f, loss floor %.4f (%+.1f%%), %.2f s\n", r.num_params,
                        r.padded_params, k, last, r.loss_floor,
                        r.loss_floor > 0 ? 100.0 * (last - r.loss_floor) / r.loss_floor : 0.0,
                        r.seconds);
            if (r.val_loss && r.steps > 0 && !isnan(r.val_loss[r.steps - 1]))
                fprintf(o.log, "held-out loss %.4f after step %d (%s, samples 0..%d, the fp32 "
                        "parameters)\n", r.val_loss[r.steps - 1], r.steps, o.val_data,
                        cfg.train_batch_size - 1);
            if (o.export_path)
                fprintf(o.log, "wrote %s (%s)\n", o.export_path,
                        zs_weights_format_name((zs_weights_format)o.export_format));
            fprintf(o.log, "param_hash %s, peak accounted memory on rank 0: %zu bytes\n",
                    r.param_hash, r.mem.total_peak);
            zs_print_ep_layout(o.log, &cfg, world);
            for (int i = 0; i < r.moe_n; i++) { /* routing, rank 0's last micro-batch */
                const zs_moe_stats *st = &r.moe[i];
                fprintf(o.log, "moe block %d: %d tokens, capacity %d, routed", r.moe_block[i],
                        st->tokens, st->capacity);
                for (int j = 0; j < st->experts && j < 256; j++)
                    fprintf(o.log, "%s%d", j ? "," : " ", st->routed[j]);
                fprintf(o.log, ", dropped %d, l_aux %.4f\n", st->dropped, st->l_aux);
            }
        }
        if (o.log)
            zs_report_print(o.log, &cfg, &r);
        /* the JSON last: a run whose outputs failed leaves no report */
        if ((trace && zs_report_write_trace(trace, &r)) ||
            (csv && zs_report_write_csv(csv, &cfg, &r)) ||
            (report && zs_report_write_json(report, &cfg, &r))) {
            fprintf(stderr, "zerosim: %s\n", zs_error_msg());
            rc = 1;
        }
    } else if (rc && r.error_rank) {
        fprintf(stderr, "zerosim: %s\n", zs_error_msg());
    }
    /* the report's outcome decides every rank's exit code */
    int any = 0;
    if (zs_comm_agree(comm, rc != 0, 60.0, &any))
        zs_comm_abort(comm, 1);
    zs_train_result_free(&r);
    zs_comm_finalize(comm);
    return any ? 1 : 0;
}

/* fuzz/fuzz_train_args.c includes this file, without main, to reach the
 * option parsing (zs_train_setup) without MPI. */
#ifndef ZS_CLI_NO_MAIN
int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(zs_usage, stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(zs_usage, stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("zerosim %s (backends: %s)\n", PACKAGE_VERSION, zs_backend_list());
        return 0;
    }
    if (!strcmp(argv[1], "train") || !strcmp(argv[1], "export"))
        return zs_cmd_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "compare"))
        return zs_cmd_compare(argc - 1, argv + 1);
    if (!strcmp(argv[1], "quantize"))
        return zs_cmd_quantize(argc - 1, argv + 1);
    if (!strcmp(argv[1], "eval"))
        return zs_cmd_eval(argc - 1, argv + 1);
    if (!strcmp(argv[1], "compress"))
        return zs_cmd_compress(argc - 1, argv + 1);
    if (!strcmp(argv[1], "decompress"))
        return zs_cmd_decompress(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench"))
        return zs_cmd_bench(argc - 1, argv + 1);
    if (!strcmp(argv[1], "plan"))
        return zs_cmd_plan(argc - 1, argv + 1);
    if (!strcmp(argv[1], "mesh"))
        return zs_cmd_mesh(argc - 1, argv + 1);
    if (!strcmp(argv[1], "config-keys")) {
        if (argc == 2) {
            zs_config_print_keys(stdout);
            return 0;
        }
        if (argc == 3 && !strcmp(argv[2], "--combinations")) {
            zs_compat_print(stdout);
            return 0;
        }
        if (argc == 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
            printf("usage: zerosim config-keys [--combinations]\n\n"
                   "Every DeepSpeed configuration key zerosim reads, one a line, and whether it\n"
                   "is used, has no effect or is not modelled (with what to do instead).\n"
                   "--combinations: the rules about combinations of features (refused or\n"
                   "adjusted, with the reason) and the matrix of every pair of the main\n"
                   "features (docs/configuration.md).\n");
            return 0;
        }
        fprintf(stderr, "zerosim: config-keys takes --combinations or --help, got \"%s\"\n",
                argv[2]);
        return 2;
    }
    fprintf(stderr, "zerosim: unknown command \"%s\" (commands: train, export, compare, quantize, eval, compress, decompress, plan, mesh, bench, config-keys; see zerosim --help)\n",
            argv[1]);
    return 2;
}
#endif
