/* zerosim — the training engine.
 *
 * The engine owns the flat parameter, gradient and optimizer arrays, drives
 * the model unit by unit over the micro-batches of a step, and takes the
 * optimizer step. It hands each unit fp32 views of the parameters and
 * gradients it uses: direct views when they are stored in fp32, converted
 * copies in a staging workspace (as large as the largest unit) when they are
 * stored in bf16 or fp16. The engine is where the ZeRO stage policy lives.
 */
#ifndef ZEROSIM_ZERO_H
#define ZEROSIM_ZERO_H

#include <stddef.h>
#include <stdint.h>
#include "zerosim/backend.h"
#include "zerosim/config.h"
#include "zerosim/mem.h"
#include "zerosim/model.h"
#include "zerosim/partition.h"

struct zs_comm;
struct zs_step_shape_s;
struct zs_step_program_s;

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zs_engine zs_engine;

typedef struct {
    float loss;        /* mean loss over the global batch of the step */
    float lr;          /* learning rate used */
    float grad_norm;   /* global gradient norm before clipping (unscaled) */
    float loss_scale;  /* loss scale in effect during the step */
    int skipped;       /* 1 when fp16 overflow made the step be skipped */
    double seconds;    /* wall time of the step on this rank */
    double recv_wait_s;/* pipeline: of it, the time spent waiting in receives
                          of activations and gradients (the bubble) */
    int compressed;    /* 1 when the gradients went compressed */
    int local_only;    /* 0/1 Adam: a local step (no communication; the loss
                          is this rank's own) */
} zs_step_info;

/* The partition of the flat layout: zerosim/partition.h. */

/* comm: the data-parallel group (zs_comm_self() for one rank without MPI).
 * Collective: every rank of comm must call it. */
int zs_engine_create(const zs_run_config *cfg, zs_backend_t be, zs_mem_t mem,
                     struct zs_comm *comm, zs_engine **out);
/* The same with a step shape built by the caller for these ranks
 * (zs_step_shape_build; NULL builds one), shared by engines of the same
 * configuration (a phantom run's simulated ranks); it must outlive e. */
int zs_engine_create_shared(const zs_run_config *cfg, zs_backend_t be, zs_mem_t mem,
                            struct zs_comm *comm, const struct zs_step_shape_s *shape,
                            zs_engine **out);
const zs_partition *zs_engine_partition(const zs_engine *e);
/* Tensor parallelism (cfg->model.tp > 1): the tensor-parallel group, whose
 * ledger context and backend the caller sets; before the first step. */
int zs_engine_set_tp(zs_engine *e, struct zs_comm *tp);
/* Expert parallelism (cfg->model.moe_ep > 1): the expert-parallel group
 * (its size moe_ep, this rank moe_ep_rank in it), over which the model
 * sends tokens to their experts, and the expert-data-parallel group (the
 * data-parallel ranks with the same moe_ep_rank, this rank's index there
 * its data-parallel rank / moe_ep); before the first step. Where
 * zs_step_ep_split says so (zerosim/program.h), DeepSpeed's layout: the
 * flat arrays hold the dense parameters, partitioned over the data-
 * parallel group, and an expert store holds this rank's E/moe_ep experts,
 * partitioned over edp, where the gradients of each source are turned
 * into fixed point apart (ZS_MOE_EP_BY_SOURCE) and reduced once per step.
 * Elsewhere the flat arrays keep the --ep 1 layout with every expert and
 * the model sends each source's expert gradients home (ZS_MOE_EP_HOME);
 * edp is then not used (NULL allowed). */
int zs_engine_set_ep(zs_engine *e, struct zs_comm *ep, struct zs_comm *edp);
/* Context parallelism (cfg.cp > 1): the context-parallel group, over which
 * the model's ring attention passes its messages (NULL without). */
int zs_engine_set_cp(zs_engine *e, struct zs_comm *cp);
/* 1 when the engine uses DeepSpeed's layout for the experts; the expert
 * store's padded elements then (0 otherwise). */
int zs_engine_ep_split(const zs_engine *e);
size_t zs_engine_expert_padded(const zs_engine *e);
/* Pipeline parallelism (cfg->pp > 1): the pipeline group and the world
 * (the global norm sums along all ranks in order); before the first step. */
int zs_engine_set_pp(zs_engine *e, struct zs_comm *pp, struct zs_comm *world);
/* The step's shape and the program the engine executes (zerosim/program.h). */
const struct zs_step_shape_s *zs_engine_shape(const zs_engine *e);
const struct zs_step_program_s *zs_engine_program(const zs_engine *e);
/* The most gathered parameters (elements) alive at once so far (stage 3). */
size_t zs_engine_live_params_peak(const zs_engine *e);
/* Stage 3's non-blocking gathers so far: seconds from each start to its
 * completion (*span_s), and of those the seconds spent waiting for them
 * (*wait_s): the rest ran behind compute. */
void zs_engine_overlap(const zs_engine *e, double *span_s, double *wait_s);

/* The trace (--trace): with it on, every step records the span of each op
 * that computes or waits (not the collectives themselves, which the comm
 * ledger records with their start times), on zs_clock()'s clock. */
typedef struct {
    int kind;          /* zs_step_op_kind */
    int unit, index;   /* as in the op */
    unsigned flags;    /* ZS_SOPF_* */
    int step;
    double start, seconds;
} zs_trace_span;
/* Start (on = 1) or stop recording; starting clears what was recorded.
 * Returns non-zero when out of host memory. */
int zs_engine_set_trace(zs_engine *e, int on);
const zs_trace_span *zs_engine_trace(const zs_engine *e, size_t *n);
void zs_engine_destroy(zs_engine *e);

/* Run step `step` (0-based): grad_accum micro-batches, then the optimizer. */
int zs_engine_step(zs_engine *e, int step, zs_step_info *info);
/* 0/1 Adam: 1 when the last step was a local step without a sync (the
 * ranks' weights differ until the next one: no checkpoint there), else 0. */
int zs_engine_zeroone_between_syncs(const zs_engine *e);

const zs_model *zs_engine_model(const zs_engine *e);
/* The layout of the flat arrays: the engine model's, or with --ep in --ep
 * 1's layout the whole model's, every expert's entries (zs_step_ep_configs). */
const zs_layout *zs_engine_layout(const zs_engine *e);
/* The activations of the engine's micro-batches (mixture of experts: their
 * routing statistics, zs_model_moe_stats); NULL before the first step. */
const zs_acts *zs_engine_acts(const zs_engine *e);
/* Mixture of experts: block l's routing in the step's last micro-batch
 * (zs_model_moe_stats, from the activations that held it); -1 when block
 * l is not a MoE block or another pipeline rank holds it. */
int zs_engine_moe_stats(const zs_engine *e, int l, zs_moe_stats *out);
size_t zs_engine_num_params(const zs_engine *e);
double zs_engine_loss_floor(const zs_engine *e);

/* Collective. Copy the fp32 parameters (the master weights under mixed
 * precision), in layout order, unpadded, into host on rank 0 (num_params
 * floats; host may be NULL on other ranks). */
int zs_engine_get_params(zs_engine *e, float *host);
/* Collective over the data- and tensor-parallel groups. The same in the
 * order of the tp = 1 model (zs_model_count_params floats, valid on the
 * rank that is rank 0 of both groups); without tensor parallelism the same
 * as zs_engine_get_params. */
int zs_engine_get_full_params(zs_engine *e, float *host);
/* Collective. Hex 64-bit XXH3 hash of those num_params * 4 bytes
 * (little-endian floats), valid on rank 0; with tensor parallelism, of the
 * full parameters in the tp = 1 order. */
int zs_engine_param_hash(zs_engine *e, char hex[17]);
/* The hash of any fp32 parameter vector, computed the same way. */
void zs_param_hash(const float *params, size_t n, char hex[17]);

/* ---- the state between steps (training checkpoints, weights in) ---------------
 *
 * What a run carries from one step to the next: the fp32 master weights
 * (the parameters themselves in an fp32 run), the optimizer's moments, the
 * error-feedback residual of gradient compression, and the counters below.
 * The working copy of the parameters (bf16/fp16) is always the master
 * rounded, so it is not state of its own. Flat indices are those of this
 * engine's layout (with tensor parallelism, this TP rank's shard). */
typedef enum {
    ZS_STATE_MASTER,      /* fp32 master weights */
    ZS_STATE_EXP_AVG,     /* AdamW's m, SGD's momentum buffer */
    ZS_STATE_EXP_AVG_SQ,  /* AdamW's v */
    ZS_STATE_RESIDUAL,    /* error feedback, this rank's own: gradient
                             compression's (Ψp) or 1-bit Adam's worker and
                             server errors (zs_engine_state_range's n) */
    ZS_STATE_N
} zs_state_kind;

/* 1 when this run keeps state k. */
int zs_engine_has_state(const zs_engine *e, zs_state_kind k);
/* The flat range this rank holds of state k: the partition's shard for the
 * master and moments in stages 1-3, everything ([0, Ψp)) in stage 0 and for
 * the residual. */
void zs_engine_state_range(const zs_engine *e, zs_state_kind k, size_t *lo, size_t *n);
/* The flat range of the master values this rank needs to load: its state
 * range, widened to every parameter it holds a working copy of (stages 1-2
 * hold all of them). */
void zs_engine_load_range(const zs_engine *e, zs_state_kind k, size_t *lo, size_t *n);
/* DeepSpeed's layout (zs_engine_ep_split), the expert store's states in
 * store elements (zs_engine_expert_padded of them, this rank's experts):
 * the range this rank keeps optimizer states of (all in stage 0, else its
 * shard over the expert-data-parallel group); its shard (what a checkpoint
 * file of this rank holds); the range to load (the master widened to the
 * working copy: all in stages 0-2); read and write as the dense states
 * below. Empty (n = 0) without DeepSpeed's layout. */
void zs_engine_expert_state_range(const zs_engine *e, size_t *lo, size_t *n);
void zs_engine_expert_shard(const zs_engine *e, size_t *lo, size_t *n);
void zs_engine_expert_load_range(const zs_engine *e, zs_state_kind k, size_t *lo, size_t *n);
int zs_engine_read_expert_state(zs_engine *e, zs_state_kind k, size_t lo, size_t n, float *host);
int zs_engine_write_expert_state(zs_engine *e, zs_state_kind k, size_t lo, size_t n,
                                 const float *host);
/* Copy elements [lo, lo + n) of state k (inside its state range) to host. */
int zs_engine_read_state(zs_engine *e, zs_state_kind k, size_t lo, size_t n, float *host);
/* Set elements [lo, lo + n) of state k from host, where this rank holds
 * them (parts outside its ranges are skipped); for the master also the
 * working copy, rounded. Padding (indices >= Ψ) must be given as 0. */
int zs_engine_write_state(zs_engine *e, zs_state_kind k, size_t lo, size_t n, const float *host);

typedef struct {
    int t;                /* optimizer steps taken (skipped steps do not count) */
    float loss_scale;     /* the fp16 loss scaler's state */
    int cur_hysteresis, good_steps, overflows;
} zs_engine_counters;
void zs_engine_get_counters(const zs_engine *e, zs_engine_counters *c);
void zs_engine_set_counters(zs_engine *e, const zs_engine_counters *c);

/* Not collective: set the parameters (master and working copy) from the
 * whole model's fp32 values in the tp = 1 layout order
 * (zs_model_count_params floats), which every rank passes; the moments and
 * the residual are left as they are (zero before the first step). */
int zs_engine_set_full_params(zs_engine *e, const float *full);

/* The data the engine feeds (NULL in a phantom run). */
struct zs_data;
const struct zs_data *zs_engine_data(const zs_engine *e);
/* Collective over the data- and tensor-parallel groups. After a step: the
 * gradient the optimizer got, before clipping, averaged over the global
 * batch and unscaled (loss_scale: the step's zs_step_info.loss_scale), in
 * fp32 in the tp = 1 layout order, unpadded, valid on the rank that is rank
 * 0 of both groups (zs_model_count_params floats). */
int zs_engine_get_full_grads(zs_engine *e, float loss_scale, float *full);

#ifdef __cplusplus
}
#endif
#endif
