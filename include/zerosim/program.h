/* zerosim — the step as a program.
 *
 * One description of what a rank does in one training step, built from
 * shapes alone: the model's layout, the run configuration and the number of
 * data-parallel ranks. Three users read it:
 *
 *   the engine (src/zero/engine.c) allocates the buffers of the shape's
 *     table and executes the ops one after the other;
 *   a phantom run executes the same ops on a backend without storage;
 *   the predictions (src/predict) count the ops and the table: memory peaks
 *     per category, calls and bytes per collective, recomputed units.
 *
 * so that a plan, a phantom run and a real run agree by construction. What
 * checks the program itself are the tests against published formulas and
 * hand counts (tests/test_accounting.sh, tests/test_plan.sh).
 *
 * A shape is the same on every rank: the partition of rank 0 (every shard
 * has the same size), the gradient buckets, stage 3's gather ranges, the
 * allgather pieces and the table of buffers. What differs between ranks is
 * only which part of a range each owns, computed in O(1) from the partition
 * (zs_step_counts, zs_range_max_part, zs_step_alltoall_bytes), so that a
 * shape for 16,384 ranks costs no more than one for 2.
 */
#ifndef ZEROSIM_PROGRAM_H
#define ZEROSIM_PROGRAM_H

#include <stddef.h>
#include <stdio.h>
#include "zerosim/comm.h"
#include "zerosim/config.h"
#include "zerosim/mem.h"
#include "zerosim/model.h"
#include "zerosim/partition.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every buffer the engine allocates, by role. */
typedef enum {
    ZS_BUF_PARAMS = 0,   /* stored parameters: full (stages 0-2) or shard (3) */
    ZS_BUF_MASTER,       /* fp32 master weights (mixed precision) */
    ZS_BUF_M, ZS_BUF_V,  /* optimizer moments */
    ZS_BUF_GFULL,        /* stages 0, 1: the full gradient */
    ZS_BUF_GSHARD,       /* the reduced gradient shard (not with the step
                            schedule: the shard is then its part of GFULL) */
    ZS_BUF_GACC,         /* deterministic: int64 shard accumulator (not with
                            the step schedule) */
    ZS_BUF_GFIX,         /* deterministic, step schedule, grad_accum > 1: the
                            full gradient accumulated in int64 fixed point */
    ZS_BUF_FIXBUF,       /* deterministic: one bucket in fixed point */
    ZS_BUF_RECV,         /* this rank's part of one bucket */
    ZS_BUF_RESIDUAL,     /* error feedback: gradient compression's (Ψp), or
                            1-bit Adam's worker error (onebit_elems) then
                            its server error (onebit_elems / N) */
    ZS_BUF_CX, ZS_BUF_CAPPROX, ZS_BUF_CACC,  /* compression workspaces */
    ZS_BUF_CSEND, ZS_BUF_CRECV,              /* compressed bytes out and in */
    ZS_BUF_RING,         /* ring reduce-scatter scratch (more than 2 ranks) */
    ZS_BUF_STAGE_P, ZS_BUF_STAGE_G,          /* fp32 staging of one unit */
    ZS_BUF_TOKENS, ZS_BUF_TARGETS, ZS_BUF_X, /* one micro-batch */
    ZS_BUF_ACTS,         /* the model's saved activations */
    ZS_BUF_CKPT,         /* activation checkpoints */
    ZS_BUF_SCRATCH,      /* the model's backward scratch */
    ZS_BUF_INIT,         /* transient: initialisation staging (freed) */
    ZS_BUF_HGRAD,        /* offload: the reduced gradient shard on the host */
    ZS_BUF_HPARAM,       /* offload: the updated parameter shard on the host */
    ZS_BUF_SWAP,         /* offload to nvme: the optimizer's double buffers;
                            offload_param nvme alone: the shard's host
                            staging on its way to the file */
    ZS_BUF_TIED,         /* pipeline, last stage: the copy of the tied token
                            embedding its head reads (working precision) */
    ZS_BUF_TIED_GRAD,    /* pipeline, first and last stage: the head's
                            gradient of it for one micro-batch (fp32), as
                            sent and as received */
    ZS_BUF_HPZ,          /* ZeRO++ hpZ (stage 3): the secondary partition,
                            padded / K parameters in working precision */
    /* expert parallelism in DeepSpeed's layout (zs_step_ep_split): the
     * experts' store, partitioned over the expert-data-parallel group */
    ZS_BUF_XPARAMS,      /* this rank's experts, all of them (stages 0-2) or
                            its shard (stage 3) */
    ZS_BUF_XGATHER,      /* stage 3: one unit's experts, gathered over edp */
    ZS_BUF_XMASTER,      /* their fp32 master (mixed precision, or
                            offload_optimizer cpu on the host): stage 0
                            full, else the shard */
    ZS_BUF_XM, ZS_BUF_XV,/* their optimizer moments, as the master */
    ZS_BUF_XGACC,        /* their gradients of the step, accumulated: in
                            int64 fixed point, each source apart
                            (deterministic), else in working precision */
    ZS_BUF_XGRAD,        /* deterministic: the reduced gradient (stage 0
                            full, else the shard) */
    ZS_BUF_XRECV,        /* deterministic, edp > 1: the reduce-scatter's part */
    ZS_BUF_XTMP,         /* deterministic: one piece of a source's gradients
                            in working precision and in fixed point */
    ZS_BUF_XHGRAD,       /* offload_optimizer cpu: the experts' reduced
                            gradient shard on the host (working precision) */
    ZS_BUF_XHPARAM,      /* offload_optimizer cpu: their updated shard on the
                            host (working precision) */
    ZS_BUF_N
} zs_buf_id;

typedef struct {
    zs_mem_category cat;
    size_t bytes;        /* 0: not allocated in this configuration */
    zs_mem_tier tier;    /* device, or host and nvme with offload */
} zs_buf_spec;

/* offload_optimizer nvme: the optimizer streams its states through the
 * swap buffers in pieces of this many elements (two pieces of each state:
 * one is read while the other is updated). */
#define ZS_SWAP_CHUNK ((size_t)1 << 18)

/* Initialisation writes the parameters through pieces of this many
 * elements (ZS_BUF_INIT holds one in fp32 under mixed precision). */
#define ZS_INIT_CHUNK ((size_t)1 << 18)

typedef struct {
    size_t lo, hi;       /* flat range of the padded layout */
    int unit;            /* buckets: reduced after this unit's backward */
} zs_step_range;

typedef struct zs_step_shape_s {
    zs_partition part;   /* of rank 0 */
    int stage, det, mixed, comp;
    int overlap;         /* overlap_comm: a bucket's reduce-scatter runs
                            behind the backward of the next units, one
                            bucket in flight at a time */
    int reduce_step;     /* stages 0, 1 with grad_reduce step: the full
                            gradient accumulates over the micro-batches and is
                            reduced once, after the last one's backward */
    zs_dtype pt;
    size_t ps;           /* bytes of a stored parameter */
    zs_dtype gt;         /* the gradients' type (zs_run_config_grad_dtype):
                            stored, accumulated and reduced in it */
    size_t gs;           /* bytes of a stored gradient */
    int U;               /* units */
    size_t *unit_lo, *unit_n;  /* [U] each unit's own flat range */
    zs_step_range *buckets;
    int nbuckets;
    size_t max_bucket, max_chunk;
    /* stage 3: unit u gathers granges[gfirst[u] .. gfirst[u] + gn[u]) */
    zs_step_range *granges;
    int *gfirst, *gn;
    size_t *gelems;      /* [U] elements unit u gathers */
    size_t ag_piece;     /* stages 0-2: allgather pieces of this many */
    int npieces;
    size_t stage_elems;  /* fp32 staging: the largest unit */
    size_t tok_bytes, x_bytes;
    size_t csend_bytes, crecv_bytes;
    size_t onebit_elems; /* 1-bit Adam and LAMB: the momentum's elements,
                            padded for its exchange (zs_comm_onebit_padded);
                            else 0 */
    size_t onebit_lamb_extra; /* 1-bit LAMB: what its residual buffer holds
                            beyond the two errors (zs_onebit_lamb_extra);
                            else 0 */
    zs_buf_spec buf[ZS_BUF_N];
    zs_run_config cfg;
    /* pipeline (cfg.pp > 1; else pp = 1, the whole model): the shape of
     * stage pp_rank, units ufirst .. ulast (its first chunk's first, its
     * last chunk's last); its flat arrays hold its chunks' ranges of the
     * global layout (below), unit_lo the offset of each unit it holds in
     * them. The GPT's head (last stage) also reads the tied token
     * embedding (tied_elems, at global offset 0), kept as a copy of the
     * first stage's; both of those stages have tied_elems set. */
    int pp, pp_rank, ufirst, ulast;
    size_t tied_elems;
    size_t io_elems;     /* one boundary activation (fp32 elements) */
    int slots;           /* activations kept: micro-batches in flight (the
                            sum over the chunks) */
    int tied_bufs;       /* last rank, interleaved: buffers for the head's
                            gradients of the tied embedding in flight
                            (zs_pp_interleaved_tied_bufs); else 1 */
    /* the rank's model chunks (v with the interleaved schedule, else 1):
     * chunk c holds units [cfirst[c], clast[c]] (virtual stage c·P +
     * pp_rank), global layout offsets [cglo[c], cglo[c] + cn[c]) at
     * clo[c] in the rank's flat arrays (the chunks one after the other,
     * the padding after the last); uchunk[u] is unit u's chunk, -1 when
     * another rank holds it; cslots[c] the chunk's activation slots */
    int nchunks;
    int *cfirst, *clast, *uchunk, *cslots;
    size_t *clo, *cglo, *cn;
    /* expert parallelism in DeepSpeed's layout (zs_step_ep_split): the
     * model's expert entries (layout.num_expert elements, after the dense
     * ones) live in an expert store padded to xpadded, a multiple of the
     * expert-data-parallel size xworld (times ZS_DET_BLOCK in deterministic
     * mode); each rank of an edp group owns xshard of it */
    int xsplit, xworld;
    size_t xnum, xpadded, xshard, xpiece;
    size_t *xulo, *xun;  /* [U] unit u's experts: [xulo, xulo + xun) of the store */
    size_t xgmax;        /* the most of one unit */
} zs_step_shape;

/* The flat-array offset of layout entry `id` on this rank (*lo), or 0
 * when the rank does not hold the entry's unit (the last pipeline stage's
 * copy of the tied embedding) or the entry is not in the flat arrays (an
 * expert entry of DeepSpeed's layout); 1 when it does. */
int zs_step_entry_local(const zs_step_shape *s, const zs_layout *lay, int id, size_t *lo);
/* The global layout offset of the rank's flat-array offset `local` (below
 * part.num_params) and how many elements from there stay in its chunk. */
size_t zs_step_local_global(const zs_step_shape *s, size_t local, size_t *run);

/* Whether a run with expert parallelism (cfg->model.moe_ep > 1) over world
 * data-parallel ranks uses DeepSpeed's layout (each rank's arrays hold the
 * dense parameters and its E/P experts; the experts' gradients reduced and
 * their states partitioned over the expert-data-parallel group), which is
 * byte-identical to --ep 1 only where zerosim can sum each expert's
 * gradients in --ep 1's way: deterministic mode (each source's gradients
 * turned into fixed point apart: integer sums in any order), or 2 ranks in
 * fp32 (one addition, and without the step schedule's grouping). Stages
 * 0-3, without offload, compression or ZeRO++ (the global norm of a MoE
 * model is an exact sum: the same for any layout).
 * With --ep-layout deepspeed (cfg->ep_layout) the order of the sums does
 * not decide: DeepSpeed's layout wherever the engine has it, the experts'
 * gradients summed over edp as floats where zs_step_ep_exact is 0.
 * Returns 1, or 0 with the first reason in *why (NULL allowed): the
 * engine then keeps --ep 1's layout and sends the gradients home. The
 * condition is zs_compat_ep_split_why's (zerosim/compat.h), which the
 * compatibility table also asks where --ep-layout deepspeed must refuse. */
int zs_step_ep_split(const zs_run_config *cfg, int world, const char **why);
/* Expert parallelism: the configuration a step shape is built from (its
 * model's buffers: the gradients sent home, or kept by source in
 * DeepSpeed's layout) and the model configuration that lays out the flat
 * arrays (--ep 1's, or the computing model's with its experts after the
 * dense entries); the run's own without expert parallelism. */
void zs_step_ep_configs(const zs_run_config *cfg, int world, zs_run_config *shape_cfg,
                        zs_model_config *layout);
/* The expert store's collectives in one step (zs_step_ep_split): over the
 * expert-data-parallel group, the reduce-scatter of the gradients (fixed
 * point in deterministic mode, else the working precision) and the allgather of the gradients (stage 0) or of the updated
 * parameters (stages 1, 2; stage 3 keeps its shard); bytes per rank (ring
 * volume) and calls. */
void zs_step_expert_traffic(const zs_step_shape *s, double *rs_bytes, int *rs_calls,
                            double *ag_bytes, int *ag_calls);
/* Stage 3: the allgathers over edp of a MoE unit's experts before each of
 * its forwards (recomputed ones included) and backwards in program p;
 * bytes per rank (ring volume) and calls per step. */
struct zs_step_program_s;
void zs_step_expert_gathers(const zs_step_shape *s, const struct zs_step_program_s *p,
                            double *bytes, int *calls);

/* Pipeline: set cfg->model's stage fields (pp_on, pp_stage, pp_first,
 * pp_last) for stage `stage` of cfg->pp, the embeddings on the first
 * stage, the final LayerNorm and head on the last, the blocks split by
 * cfg->pp_partition as DeepSpeed's partition_method: "uniform" by count
 * (the first L mod P stages one block more), "parameters" balanced by the
 * parameters each unit computes with (the least largest stage; the head
 * counts the tied embedding it multiplies by). 0, or non-zero with a
 * message (P more than the blocks). */
int zs_pp_stage_config(zs_run_config *cfg, int stage);
/* The interleaved schedule: chunk `chunk`'s model configuration on the
 * rank cfg->model is the stage of (zs_pp_stage_config): virtual stage
 * chunk·P + pp_stage of a P·v-stage uniform pipeline. */
int zs_pp_chunk_model(const zs_run_config *cfg, int chunk, zs_model_config *out);
/* The non-interleaved schedules' warm-up forwards of stage `rank`
 * (Megatron-LM: min(P - rank - 1, m); GPipe: all m). */
int zs_pp_warmup(zs_pp_schedule sched, int P, int rank, int m);
/* The interleaved schedule's warm-up forwards of rank `rank` with v model
 * chunks a rank (Megatron-LM's forward_backward_pipelining_with_interleaving):
 * all m·v when m = P, else min(2(P - rank - 1) + (v - 1)P, m·v). */
int zs_pp_interleaved_warmup(int P, int v, int rank, int m);
/* The ideal bubble fraction of a step: (P - 1)/(v·m + P - 1), v = 1 but
 * for the interleaved schedule (Narayanan et al.). */
double zs_pp_ideal_bubble(int P, int v, int m);
/* The interleaved schedule's messages run between the P ranks as the
 * engine runs them (receives wait for their send; sends do not wait, but
 * an activation slot is written only after its sends were received, and
 * the last rank reuses one of its k buffers of the head's gradient of the
 * tied embedding only after rank 0 received what it held): the least k
 * for which every rank finishes, or -1 when none of 1..m does (a
 * deadlock whatever the buffers). */
int zs_pp_interleaved_tied_bufs(int P, int v, int m);

/* One step of a pipeline schedule on one rank: the forward or backward of
 * micro-batch `micro` on the rank's model chunk `chunk` (0 unless
 * interleaved; chunk c of rank r is virtual stage c·P + r). */
typedef struct {
    int backward;
    int chunk;
    int micro;
} zs_pp_item;
/* The 2·m·v items of rank `rank`'s schedule in order (v = 1 for GPipe and
 * 1F1B): its warm-up forwards, then one forward and one backward at a time,
 * then the remaining backwards. The interleaved schedule takes its k-th
 * forward from chunk (k mod P·v) / P, micro-batch (k / P·v)·P + k mod P,
 * and its k-th backward from the chunks in reverse (m must be a multiple
 * of P). `out` holds 2·m·v items. Returns the count. */
int zs_pp_schedule_items(zs_pp_schedule sched, int P, int v, int rank, int m, zs_pp_item *out);

/* Build the shape of cfg's step (model m, built from cfg->model) on `world`
 * data-parallel ranks. Returns 0, or non-zero with a one-line message. */
int zs_step_shape_build(const zs_run_config *cfg, const zs_model *m, int world,
                        zs_step_shape *s);
/* A shape's flags from cfg (the rest zeroed): cfg, stage, det, pt, ps,
 * gt, gs, mixed, comp, reduce_step, overlap. */
void zs_step_shape_init(zs_step_shape *s, const zs_run_config *cfg);
/* The buffer table (s->buf) of a shape whose partition, flags (stage,
 * det, mixed, comp, reduce_step), ps, gs, cfg and sizes are set: every buffer's
 * category, tier (offload) and bytes. zs_step_shape_build calls it; the
 * planner's bare parameter count (zs_step_shape_build_flat) too. */
void zs_step_shape_place_buffers(zs_step_shape *s);
/* Stage 3 with offload_param (cpu or nvme) and the optimizer on the
 * device: the parameter shard on the host or in the swap file, the
 * device's optimizer output sent down after each applied step
 * (ZS_SOP_DOWNLOAD_PARAMS; nvme: then written to the file). */
int zs_step_shape_param_alone(const zs_step_shape *s);
/* The shape of a bare parameter count: one layout of num_params elements
 * on `world` data-parallel ranks, without a model (no units, buckets,
 * gathers or activations): the partition and the buffer table of the
 * model states and of offload, as a run of cfg would place them. Free
 * with zs_step_shape_free. */
void zs_step_shape_build_flat(const zs_run_config *cfg, size_t num_params, int world,
                              zs_step_shape *s);
/* What a run refuses and a plan still counts: a collective larger than one
 * MPI call (counts are ints). 0, or non-zero with a message that says which
 * setting to change. */
int zs_step_shape_check_run(const zs_step_shape *s);
/* Stage 3: the units that gather more than stage3_max_live_parameters
 * (gathered alone, as DeepSpeed does), and the first of them in *first
 * (-1 when none). 0 in other stages. */
int zs_step_shape_units_over_bound(const zs_step_shape *s, int *first);
void zs_step_shape_free(zs_step_shape *s);

/* The elements of [lo, hi) that each rank owns, and where each part starts
 * relative to lo (displs may be NULL). O(world). */
void zs_step_counts(const zs_step_shape *s, size_t lo, size_t hi, int *counts, int *displs);
/* qwZ: the encoded bytes of unit u's forward gathers, every rank's part
 * of each of its ranges in int8 blocks (zs_comm_q8_bytes), as the
 * collective allocates and sends them; 0 when out of host memory. */
size_t zs_step_q8_unit_bytes(const zs_step_shape *s, int u);
/* The largest part of [lo, hi) that any one rank owns. O(1). */
size_t zs_range_max_part(const zs_partition *p, size_t lo, size_t hi);
/* Bytes rank q sends to the other ranks in the compressed exchange of
 * bucket k (one micro-batch). O(1). */
double zs_step_alltoall_bytes(const zs_step_shape *s, int k, int q);
/* The compressed size of a part of n elements (the codec's closed form). */
double zs_comp_part_bytes(const zs_comp_spec *c, size_t n);

/* ---- the ops ------------------------------------------------------------ */

typedef enum {
    ZS_SOP_BEGIN = 0,    /* zero the gradient shard accumulator */
    ZS_SOP_LOAD,         /* load micro-batch `micro` */
    ZS_SOP_GATHER,       /* stage 3: start gathering unit's ranges */
    ZS_SOP_WAIT,         /* stage 3: wait for unit's gather */
    ZS_SOP_FORWARD,      /* forward of unit */
    ZS_SOP_RELEASE,      /* stage 3: free unit's gathered ranges */
    ZS_SOP_LOSS,         /* keep the micro-batch's loss */
    ZS_SOP_ZERO_GRADS,   /* stages 0, 1: zero the full gradient */
    ZS_SOP_BUCKET_ALLOC, /* stages 2, 3: bucket `index` gets its buffer */
    ZS_SOP_BACKWARD,     /* backward of unit, gradients added to storage */
    ZS_SOP_ACCUM_FIXED,  /* deterministic, step schedule, grad_accum > 1:
                            bucket `index` of the micro-batch's gradient in
                            fixed point, added into the int64 accumulator */
    ZS_SOP_REDUCE,       /* bucket `index`: reduce-scatter (or compressed
                            all-to-all) and add this rank's part; with
                            ZS_SOPF_ASYNC only started (overlap_comm) */
    ZS_SOP_REDUCE_WAIT,  /* overlap_comm: bucket `index`'s reduce-scatter
                            finished, its part added, its buffer freed */
    ZS_SOP_LOSS_SUM,     /* the step's loss over the ranks */
    ZS_SOP_CHECK,        /* overflow flags over the ranks */
    ZS_SOP_NORM,         /* global norm, loss scaler; an overflow ends the
                            step here */
    ZS_SOP_PUT_SHARD,    /* stage 0: the reduced shard into the full gradient
                            (not with the step schedule: it is there) */
    ZS_SOP_OPTIMIZER_FULL,   /* stage 0: the optimizer on the whole array,
                                from the allgathered full gradient */
    ZS_SOP_OPTIMIZER_SHARD,  /* stages 1-3: the optimizer on this rank's
                                shard, on the device */
    ZS_SOP_OPTIMIZER_HOST,   /* offload_optimizer cpu: on the host's shard
                                (ZeRO-Offload's CPU step) */
    ZS_SOP_OPTIMIZER_SWAPPED,/* offload_optimizer nvme: on the host, its
                                states streamed through the swap file */
    ZS_SOP_ALLGATHER,    /* piece `index` of the full array: stage 0 the
                            gradients, stages 1, 2 the parameters */
    ZS_SOP_OFFLOAD_GRADS,/* offload: the reduced gradient shard to the host */
    ZS_SOP_UPLOAD_PARAMS,/* offload: the updated parameter shard to the device */
    ZS_SOP_RECV_ACT,     /* pipeline: the stage's input for micro-batch `micro`
                            from the previous stage */
    ZS_SOP_SEND_ACT,     /* pipeline: its output to the next stage */
    ZS_SOP_RECV_GRAD,    /* pipeline: the gradient of its output, from the next */
    ZS_SOP_SEND_GRAD,    /* pipeline: the gradient of its input, to the previous */
    ZS_SOP_TIED_SEND,    /* pipeline, last stage: the head's gradient of the
                            tied embedding (fp32) to the first stage */
    ZS_SOP_TIED_RECV,    /* pipeline, first stage: that gradient, added into
                            the embedding's as the whole model adds it */
    ZS_SOP_TIED_SYNC,    /* pipeline: the updated embedding, first stage to
                            the last stage's copy */
    ZS_SOP_LOCAL_NORM,   /* 1-bit Adam after the freeze: overflow flags over
                            the ranks, the norm of this rank's own gradient,
                            loss scaler; an overflow ends the step here */
    ZS_SOP_OPTIMIZER_ONEBIT, /* 1-bit Adam after the freeze: the momentum
                            from the local gradient, its compressed
                            all-reduce, the step with the variance frozen */
    ZS_SOP_DOWNLOAD_PARAMS, /* offload_param alone: the shard the device's
                            optimizer updated, to the host's parameters
                            (nvme: staged on the host, into the file) */
    ZS_SOP_NKINDS
} zs_step_op_kind;

#define ZS_SOPF_PREFETCH  1u  /* GATHER: ahead of the unit that uses it */
#define ZS_SOPF_RECOMPUTE 2u  /* FORWARD/GATHER: activation checkpointing */
#define ZS_SOPF_APPLIED   4u  /* runs only when the step is not skipped */
#define ZS_SOPF_ASYNC     8u  /* REDUCE: started here, finished at its
                                 REDUCE_WAIT; the backward goes on meanwhile */

typedef struct {
    zs_step_op_kind kind;
    int micro;           /* micro-batch, -1 in the optimizer's part */
    int chunk;           /* the rank's model chunk (interleaved; else 0) */
    int unit;            /* -1 when none */
    int index;           /* bucket or piece, -1 when none */
    unsigned flags;
    zs_comm_phase phase;
    zs_comm_group group; /* of its collective or message */
    size_t elems;        /* elements it computes on or moves */
} zs_step_op;

typedef struct zs_step_program_s {
    zs_step_op *ops;
    size_t n, cap;
} zs_step_program;

/* The ops of one step of rank `rank` (the same for every data-parallel rank
 * today; the pipeline's schedules will differ per rank). */
int zs_step_program_build(const zs_step_shape *s, const zs_model *m, int rank,
                          zs_step_program *p);
/* 1-bit Adam (stage 0) after its freeze_step: the steps' program, in which
 * the backward keeps this rank's gradient (accumulated over the
 * micro-batches in the full gradient, no reduction), then LOCAL_NORM and
 * OPTIMIZER_ONEBIT. */
int zs_step_program_build_onebit(const zs_step_shape *s, const zs_model *m, int rank,
                                 zs_step_program *p);
void zs_step_program_free(zs_step_program *p);
const char *zs_step_op_name(zs_step_op_kind k);
/* One op a line, with its sizes, group and the buffers it touches. */
void zs_step_program_print(const zs_step_shape *s, const zs_step_program *p, FILE *f);

/* What a program does, counted. */
typedef struct {
    size_t peak[ZS_MEM_NCAT];    /* per category: the buffer table plus the
                                    dynamic buffers (gathered ranges,
                                    buckets) at their most */
    size_t live_params;          /* stage 3: most gathered elements at once */
    size_t gathered_elems;       /* stage 3: elements gathered per step */
    size_t gathered_applied_elems; /* of which only in applied steps (the
                                      first pipeline stage's tied embedding) */
    double gather_applied_calls;
    double gather_calls;         /* stage 3: allgather calls per step */
    double rs_calls, rs_bytes;   /* per dense step (full-buffer bytes) */
    double ag_calls, ag_bytes;   /* stages 0-2 per applied step, full bytes */
    double recompute_units;      /* forward passes recomputed per step */
    double ckpt_gathers;         /* of those, the ones that all-gather their partitioned
                                    checkpoint first (zs_model_ckpt_gathers) */
    size_t grad_fixed_bytes;     /* of peak[ZS_MEM_GRADS]: the buffers in
                                    int64 fixed point (deterministic); the
                                    rest hold working-precision gradients */
    /* pipeline: point-to-point messages per step and their bytes (sends,
     * receives), and the most micro-batches forwarded and not yet
     * backwarded at once (the activations the schedule keeps) */
    double p2p_send_calls, p2p_send_bytes, p2p_recv_calls, p2p_recv_bytes;
    double tied_sync_bytes;      /* per applied step (sent or received) */
    int in_flight;
    /* offload: the host and nvme tiers per category, and the bytes moved
     * between device and host and to and from files, per step or per
     * applied step */
    size_t tier_peak[ZS_MEM_NTIERS][ZS_MEM_NCAT];
    double d2h_bytes;            /* every step: reduced gradients sent down */
    double d2h_applied_bytes, h2d_bytes, nvme_read_bytes, nvme_write_bytes; /* applied steps */
} zs_step_count;

void zs_step_program_count(const zs_step_shape *s, const zs_step_program *p, zs_step_count *c);
/* Stage 3: the bytes of rank q's own parts of every range the program
 * gathers in a step (what offload_param sends from host to device). */
double zs_step_gather_own_bytes(const zs_step_shape *s, const zs_step_program *p, int q);

#ifdef __cplusplus
}
#endif
#endif
