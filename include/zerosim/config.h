/* zerosim — run configuration.
 *
 * A run is configured by defaults, then a DeepSpeed-style JSON file
 * (--config), then command-line options, each overriding the one before.
 * Validation that needs the world size (batch arithmetic) happens once all
 * three are applied.
 */
#ifndef ZEROSIM_CONFIG_H
#define ZEROSIM_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "zerosim/backend.h"
#include "zerosim/compress.h"
#include "zerosim/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bounds of the options that `zerosim train` (src/cli/main.c), `zerosim plan`
 * (src/cli/plan_cmd.c) and zs_run_config_finalize share: one home for each
 * option's smallest and largest value, so that the commands agree. */
#define ZS_BOUND_LAYERS_MAX 4096        /* --layers (the MLP's: ZS_MLP_MAX_HIDDEN) */
#define ZS_BOUND_HIDDEN_MAX (1 << 20)   /* --hidden, --widths */
#define ZS_BOUND_HEADS_MAX (1 << 16)    /* --heads */
#define ZS_BOUND_VOCAB_MIN 2            /* --vocab */
#define ZS_BOUND_VOCAB_MAX (1 << 20)
#define ZS_BOUND_SEQ_MAX (1 << 20)      /* --seq of a model */
#define ZS_BOUND_PLAN_SEQ_MAX (1 << 24) /* plan --params --seq: a count, no model built */
#define ZS_BOUND_BATCH_MAX (1 << 20)    /* --micro-batch, --grad-accum */
#define ZS_BOUND_TP_MAX (1 << 16)       /* --tp */
#define ZS_BOUND_PP_MAX (1 << 16)       /* --pp */
#define ZS_BOUND_CP_MAX (1 << 12)       /* --cp */
#define ZS_BOUND_RANKS_MAX (1 << 20)    /* ranks: --world-size, --ranks-per-node, hpZ, nodes */
#define ZS_BOUND_MOE_EXPERTS_MAX 4096   /* --moe-experts (0: no mixture of experts) */
#define ZS_BOUND_MOE_EVERY_MAX 4096     /* --moe-every */
#define ZS_BOUND_MOE_TOP_K_MAX 2        /* --moe-top-k */
#define ZS_BOUND_EP_MAX 256             /* --ep, moe.ep_size: an expert-parallel group's ranks */
#define ZS_BOUND_VIRTUAL_STAGES_MAX 4096 /* --virtual-stages */
#define ZS_BOUND_CKPT_EVERY_MAX 4096    /* --checkpoint-activations every:K */

/* The optimizers: AdamW (and Adam with L2), SGD with momentum, and LAMB
 * (DeepSpeed's "Lamb": Adam's moments, a layer-wise trust ratio). */
/* ZS_OPT_ONEBITADAM: DeepSpeed's OneBitAdam (Tang et al., arXiv 2102.02888):
 * Adam without bias correction for onebit_freeze_step applied steps, then
 * the variance frozen and the momentum exchanged 1-bit compressed.
 * ZS_OPT_ONEBITLAMB: DeepSpeed's OneBitLamb (Li et al., arXiv 2104.06069):
 * LAMB without bias correction for onebit_freeze_step applied steps, its
 * trust ratios averaged; then the same compressed momentum, the variance
 * frozen, and the averaged ratio scaled by a factor from a fresh variance
 * (docs/onebit.md). */
typedef enum {
    ZS_OPT_ADAMW = 0,
    ZS_OPT_SGD = 1,
    ZS_OPT_LAMB = 2,
    ZS_OPT_ONEBITADAM = 3,
    ZS_OPT_ONEBITLAMB = 4,
    /* DeepSpeed's ZeroOneAdam (Lu et al., arXiv 2202.06009): the variance
     * updated at exponentially spaced steps (1-bit gradients between them)
     * until onebit_freeze_step, then local steps with a 1-bit sync of the
     * accumulated update at intervals (src/optim/zeroone.c) */
    ZS_OPT_ZEROONEADAM = 5
} zs_optim_kind;
/* 1 for the 1-bit optimizers (a compressed momentum after a freeze). */
static inline int zs_optim_is_onebit(zs_optim_kind k)
{
    return k == ZS_OPT_ONEBITADAM || k == ZS_OPT_ONEBITLAMB;
}
/* 1 for the optimizers with LAMB's layer-wise trust ratio. */
static inline int zs_optim_is_lamb(zs_optim_kind k)
{
    return k == ZS_OPT_LAMB || k == ZS_OPT_ONEBITLAMB;
}
/* 1 when the optimizer keeps Adam's second moment v (AdamW, LAMB). */
static inline int zs_optim_has_variance(zs_optim_kind k) { return k != ZS_OPT_SGD; }
typedef enum {
    ZS_SCHED_CONSTANT = 0,    /* no scheduler section */
    ZS_SCHED_WARMUP = 1,      /* DeepSpeed WarmupLR: warm up, then constant */
    ZS_SCHED_WARMUP_DECAY = 2,/* DeepSpeed WarmupDecayLR: warm up, then linear decay */
    ZS_SCHED_WARMUP_COSINE = 3/* DeepSpeed WarmupCosineLR: warm up, then cosine decay */
} zs_sched_kind;

/* When stages 0 and 1 reduce gradients (zerosim.grad_reduce, --grad-reduce):
 * after every micro-batch (zerosim's default, bit-identical across stages),
 * or once per step after local accumulation (DeepSpeed's schedule). */
typedef enum { ZS_GRAD_REDUCE_MICRO = 0, ZS_GRAD_REDUCE_STEP = 1 } zs_grad_reduce;

/* Which layout expert parallelism takes (--ep-layout, "moe.ep_layout"):
 * auto keeps every run byte-identical to --ep 1, taking DeepSpeed's layout
 * (experts partitioned over the expert-data-parallel group) where the
 * reduction's order allows it and --ep 1's elsewhere; deepspeed takes
 * DeepSpeed's layout wherever the engine has it, byte-identical to --ep 1
 * only where auto would have taken it too (zs_step_ep_split). */
typedef enum { ZS_EP_LAYOUT_AUTO = 0, ZS_EP_LAYOUT_DEEPSPEED = 1 } zs_ep_layout;

/* Pipeline schedules (--pp-schedule): GPipe (all forwards, then all
 * backwards), 1F1B (PipeDream-Flush, Megatron-LM's default). */
typedef enum { ZS_PP_GPIPE = 0, ZS_PP_1F1B = 1, ZS_PP_INTERLEAVED = 2 } zs_pp_schedule;
/* How the blocks are cut into stages (--pp-partition, DeepSpeed's
 * PipelineModule partition_method names). */
typedef enum { ZS_PP_UNIFORM = 0, ZS_PP_PARAMETERS = 1 } zs_pp_partition;

/* How the gradient average over the data-parallel ranks is scaled:
 * zerosim's own way folds 1/(grad_accum x N) into the loss gradient;
 * DeepSpeed's prescale_gradients divides the gradients by N before the sum;
 * its default (postscale) divides by gradient_predivide_factor f before the
 * sum and by N/f after. A config that names either key gets DeepSpeed's
 * arithmetic (the loss gradient is then divided by grad_accum only). */
typedef enum {
    ZS_GRAD_IN_LOSS = 0,
    ZS_GRAD_PRESCALE = 1,
    ZS_GRAD_POSTSCALE = 2
} zs_grad_scaling;

/* Keys given as "auto" (the Hugging Face Trainer's placeholder), one bit
 * each in zs_run_config.auto_mask. */
enum {
    ZS_AUTO_TRAIN_BATCH = 1u << 0,
    ZS_AUTO_MICRO_BATCH = 1u << 1,
    ZS_AUTO_GRAD_ACCUM = 1u << 2,
    ZS_AUTO_GRAD_CLIP = 1u << 3,
    ZS_AUTO_LR = 1u << 4,
    ZS_AUTO_BETAS = 1u << 5,
    ZS_AUTO_EPS = 1u << 6,
    ZS_AUTO_WEIGHT_DECAY = 1u << 7,
    ZS_AUTO_WARMUP_MIN_LR = 1u << 8,
    ZS_AUTO_WARMUP_MAX_LR = 1u << 9,
    ZS_AUTO_WARMUP_STEPS = 1u << 10,
    ZS_AUTO_TOTAL_STEPS = 1u << 11,
    ZS_AUTO_FP16 = 1u << 12,
    ZS_AUTO_BF16 = 1u << 13,
    ZS_AUTO_REDUCE_BUCKET = 1u << 14,
    ZS_AUTO_PREFETCH = 1u << 15,
    ZS_AUTO_PERSISTENCE = 1u << 16,
    ZS_AUTO_COUNT = 17
};

/* ZeRO-Offload / ZeRO-Infinity: where a state lives off the device. */
typedef enum { ZS_OFFLOAD_NONE = 0, ZS_OFFLOAD_CPU = 1, ZS_OFFLOAD_NVME = 2 } zs_offload;
/* "adamw", "sgd", "lamb"; parse takes those and "adam" (-1: none of them). */
const char *zs_optim_name(zs_optim_kind k);
int zs_optim_parse(const char *s, zs_optim_kind *out);
const char *zs_offload_name(zs_offload o);  /* "none", "cpu", "nvme" */
int zs_offload_parse(const char *s, zs_offload *out);

typedef enum {
    ZS_CKPT_OFF = 0,
    ZS_CKPT_EVERY = 1,     /* segments of checkpoint_value blocks */
    ZS_CKPT_SQRT = 2,      /* about sqrt(L) segments (Chen et al. 2016) */
    ZS_CKPT_SEGMENTS = 3   /* checkpoint_value segments (number_checkpoints) */
} zs_ckpt_mode;

typedef struct {
    zs_model_config model;

    int steps;
    int train_batch_size;    /* 0 = not given: micro_batch * grad_accum * world */
    int micro_batch;         /* train_micro_batch_size_per_gpu, 0 = not given */
    int grad_accum;          /* gradient_accumulation_steps, 0 = not given */
    uint64_t seed;
    int steps_per_print;

    zs_dtype precision;      /* storage of parameters and gradients */

    zs_optim_kind optimizer;
    float lr, beta1, beta2, eps, weight_decay, momentum;
    int adam_l2;                 /* Adam with L2 regularization instead of
                                    decoupled decay (adam_w_mode false) */
    int adam_no_bias_correction; /* optimizer.params.bias_correction false */
    float lamb_max_coeff, lamb_min_coeff; /* LAMB: the trust ratio's bounds
                                 (optimizer.params.max_coeff, min_coeff) */
    int onebit_freeze_step;  /* 1-bit Adam and LAMB: exact steps before the
                                variance freezes (optimizer.params.freeze_step);
                                0/1 Adam: var_freeze_step */
    /* 1-bit LAMB (optimizer.params): the trust ratio's running average's
     * coeff_beta, and the bounds of the factor that scales it after the
     * freeze (factor_max, factor_min, and factor_threshold: its most
     * relative change from one step to the next) */
    float onebit_coeff_beta, onebit_factor_max, onebit_factor_min, onebit_factor_threshold;
    int zo_var_update_scaler;  /* 0/1 Adam: variance updates before their
                                  interval doubles (var_update_scaler) */
    int zo_local_step_scaler;  /* 0/1 Adam: steps before the local-step
                                  interval doubles (local_step_scaler) */
    int zo_local_step_clipper; /* 0/1 Adam: the largest local-step interval
                                  (local_step_clipper) */

    zs_sched_kind scheduler;
    int warmup_steps;
    int total_steps;         /* schedule length; 0 = steps */
    float warmup_min_ratio;  /* lr at step 0 of warm-up, as a fraction of lr */
    float cos_min_ratio;     /* final lr of the decay, as a fraction of lr */
    int warmup_linear;       /* 1 linear warm-up, 0 DeepSpeed's "log" */

    float grad_clip;         /* gradient_clipping; 0 = off */

    /* prescale_gradients / gradient_predivide_factor */
    zs_grad_scaling grad_scaling;
    double grad_predivide;   /* f of ZS_GRAD_POSTSCALE (1 = divide after) */
    /* communication_data_type, data_types.grad_accum_dtype
     * (--grad-accum-dtype): a zs_dtype, or -1 when not given. The
     * gradients are stored, accumulated over the micro-batches and reduced
     * in zs_run_config_grad_dtype: fp32, or the working precision;
     * communication_data_type must name that type (compat.c) */
    int comm_dtype, grad_accum_dtype;

    /* fp16 dynamic loss scaling (DeepSpeed's fp16 section) */
    float static_loss_scale; /* "loss_scale": 0 = dynamic */
    int initial_scale_power;
    int loss_scale_window;
    int hysteresis;
    float min_loss_scale;

    /* zero_optimization */
    int stage;
    size_t reduce_bucket_size;
    size_t allgather_bucket_size;
    size_t stage3_max_live_parameters;
    size_t stage3_prefetch_bucket_size;

    /* offload_optimizer / offload_param ("device": "cpu" or "nvme") and
     * their nvme_path; --offload-optimizer, --offload-param, --nvme-path */
    zs_offload offload_optimizer, offload_param;
    char nvme_path[1024];

    /* zerosim.deterministic: gradients are summed across ranks and
     * micro-batches as fixed-point integers, so the result does not depend
     * on the number of ranks or the MPI algorithm (see zerosim/zero.h). */
    int deterministic;

    /* zerosim.exact_slices / --exact-slices S: with --backend ref
     * --deterministic, the number of fixed slices each tensor-parallel sum
     * is cut into (docs/portable.md): every TP size that divides S gives
     * the same bytes. 0 = ZS_TP_EXACT_SLICES (4). */
    int exact_slices;

    /* zerosim.qat / --qat: quantization-aware training; 0 = off, else the
     * zs_quant_format (int8 or nf4, zerosim/quant.h) whose fake-quantized
     * linear weights the forward and backward use (docs/quantization.md) */
    int qat;

    /* activation checkpointing (--checkpoint-activations, the
     * "activation_checkpointing" section); finalize turns it into
     * model.ckpt_blocks */
    zs_ckpt_mode checkpoint_mode;
    int checkpoint_value;
    int partition_activations; /* activation_checkpointing.partition_activations */

    /* gradient compression (--compression, the "gradient_compression"
     * section): replaces the dense reduce-scatter after warm-up steps */
    zs_comp_spec compression;
    int error_feedback;        /* keep what was not sent (default on) */
    int compression_warmup;    /* dense steps before compression starts */

    /* the process mesh (zerosim/mesh.h): N = tp x dp x pp ranks; --tp and
     * "tensor_parallel.autotp_size", --pp (1 until the pipeline exists),
     * --sequence-parallel and "zerosim.sequence_parallel". finalize copies
     * tp and sequence_parallel into the model's configuration. */
    int tp, pp;
    int sequence_parallel;
    /* --cp C: context parallelism (Megatron-LM's, zerosim/mesh.h): each
     * sample's sequence split over C ranks (2C chunks, rank i holding
     * chunks i and 2C-1-i), attention as ring attention; ZeRO runs over
     * the combined data-and-context group. 1: none.
     * --cp-attention ulysses (or DeepSpeed's "sequence_parallel_size": U,
     * which sets cp U): the same axis, the attention by DeepSpeed-Ulysses'
     * all-to-alls (cp_attention: ZS_CP_RING or ZS_CP_ULYSSES, model.h). */
    int cp;
    int cp_attention;
    zs_pp_schedule pp_schedule; /* --pp-schedule (1f1b) */
    int virtual_stages;           /* --virtual-stages: model chunks per rank (1) */
    zs_pp_partition pp_partition; /* --pp-partition (uniform) */
    /* --ranks-per-node K: K consecutive ranks make a node (0: the nodes MPI
     * reports; a phantom run is then one node); must divide the world */
    int ranks_per_node;
    /* --hierarchical, "zerosim.hierarchical_collectives": two-level
     * reduce-scatter and allgather over the data-parallel group (inside the
     * node, then across; zerosim/comm.h) */
    int hierarchical;
    /* ZeRO++ (stage 3): zero_optimization.zero_quantized_weights /
     * --quantized-weights (qwZ: the forward gathers in int8 blocks) */
    int quantized_weights;
    /* ZeRO++ hpZ: zero_optimization.zero_hpz_partition_size /
     * --hpz-partition-size K (K > 1: a secondary copy of the stage-3
     * parameters partitioned over K consecutive data-parallel ranks inside
     * a node, from which the backward gathers read; 0 or 1: off) */
    int hpz_partition_size;
    /* ZeRO++ qgZ: zero_optimization.zero_quantized_gradients /
     * --quantized-gradients (stage 3's gradient reduce-scatter replaced by
     * a two-level all-to-all of 4-bit blocks, inside the node then across) */
    int quantized_gradients;
    /* expert parallelism (--ep, "moe.ep_size"): experts dealt over groups of
     * ep data-parallel ranks (docs/moe.md); finalize copies it into
     * model.moe_ep. The MoE model's own fields are in model.moe_*. */
    int ep;
    zs_ep_layout ep_layout;

    /* zerosim.grad_reduce / --grad-reduce (stages 0 and 1) */
    zs_grad_reduce grad_reduce;

    /* zero_optimization.overlap_comm / --overlap-comm: 1, a bucket's
     * reduce-scatter runs behind the backward of the next units; 0, each is
     * finished where it starts; -1 (the default), on in stage 3 and off
     * below, as DeepSpeed's defaults. zs_step_overlap resolves it. */
    int overlap_comm;

    /* zerosim.collective_timeout / --collective-timeout: seconds a rank
     * waits in one collective before it gives up on a lost or stopped rank */
    double collective_timeout;

    /* --data: a token file in llm.c's format the GPT trains on (zerosim/
     * data.h), NULL for the synthetic data; not part of the JSON schema,
     * the string must outlive the run */
    const char *data_file;

    /* what the JSON file said that zerosim reports back: the keys given as
     * "auto" (ZS_AUTO_* bits; zs_run_config_describe_auto says what each
     * became) and the keys accepted with no effect (comma-separated) */
    unsigned auto_mask;
    char noeffect[1024];
    /* what the rules of zerosim/compat.h adjusted, "; "-separated: printed
     * on start-up and written in the report */
    char adjusted[1024];
} zs_run_config;

/* The defaults: a small GPT that trains in seconds on one core. */
void zs_run_config_defaults(zs_run_config *c);

/* Apply a DeepSpeed-style JSON file onto c. Returns 0, or non-zero with one
 * line naming the file and what is wrong: malformed JSON (line and column),
 * an unknown key, a wrong type or value. */
int zs_config_load_file(const char *path, zs_run_config *c);
/* Apply a Hugging Face config.json (src/config/hfconfig.c) onto the model
 * m: its architecture (LlamaForCausalLM, MistralForCausalLM,
 * MixtralForCausalLM, Qwen2ForCausalLM, GPT2LMHeadModel) and every key
 * that changes memory, traffic or arithmetic. 0, or non-zero with one line
 * naming the file and the key (malformed JSON, an unknown architecture, a
 * missing key, a value zerosim cannot model). ignored (n bytes, may be
 * NULL) gets the file's keys that change nothing, ", "-separated. */
int zs_hf_config_load(const char *path, zs_model_config *m, char *ignored, size_t n);
/* Same for a JSON text (for tests); name is used in messages. */
int zs_config_load_string(const char *text, const char *name, zs_run_config *c);
/* Print every key the loader knows, one a line: "path: used", "path: no
 * effect" or "path: not modelled (what; instead)" (zerosim config-keys). */
void zs_config_print_keys(FILE *f);

/* Resolve and check the batch arithmetic for world_size ranks (DeepSpeed's
 * rules: any two of train_batch_size, micro_batch, grad_accum determine the
 * third; all three must agree; the batch is split over the data-parallel
 * size N / (tp x pp)), then the other fields. Fills in missing
 * batch fields. Returns 0 or non-zero with a message naming the key. */
int zs_run_config_finalize(zs_run_config *c, int world_size);

/* The resolved configuration as JSON text (DeepSpeed's key names where they
 * exist, plus "auto": what each "auto" became, and "no_effect": the keys
 * accepted with no effect); malloc'd, NULL when out of memory. */
char *zs_run_config_json(const zs_run_config *c);

/* "key=value, ..." for every key the file gave as "auto", with the value it
 * became (after finalize); "" when none. Returns buf. */
const char *zs_run_config_describe_auto(const zs_run_config *c, char *buf, size_t n);

/* "micro-batch" or "step" into *out; non-zero for anything else. */
int zs_grad_reduce_parse(const char *s, zs_grad_reduce *out);
int zs_pp_schedule_parse(const char *s, zs_pp_schedule *out);
/* --cp-attention: "ring" (ZS_CP_RING) or "ulysses" (ZS_CP_ULYSSES) into
 * *out; non-zero for anything else. */
int zs_cp_attention_parse(const char *s, int *out);
/* "auto" or "deepspeed" into *out; non-zero for anything else. */
int zs_ep_layout_parse(const char *s, zs_ep_layout *out);
const char *zs_ep_layout_name(zs_ep_layout l);
const char *zs_pp_schedule_name(zs_pp_schedule s);
int zs_pp_partition_parse(const char *s, zs_pp_partition *out);
const char *zs_pp_partition_name(zs_pp_partition p);
/* 1 when cfg's reduce-scatters overlap the backward (overlap_comm, its
 * default resolved), else 0. */
int zs_step_overlap(const zs_run_config *cfg);
/* 1 when cfg reduces gradients once per step (stages 0 and 1 with
 * grad_reduce step), else 0: each micro-batch is reduced. */
int zs_step_reduce_once(const zs_run_config *cfg);
/* The type gradients are stored, accumulated and reduced in:
 * data_types.grad_accum_dtype where given, else the working precision. */
zs_dtype zs_run_config_grad_dtype(const zs_run_config *cfg);
const char *zs_grad_reduce_name(zs_grad_reduce g);

#ifdef __cplusplus
}
#endif
#endif
