/* zerosim — the engine's private header (not installed).
 *
 * The engine's state (struct zs_engine) and the helpers its files share.
 * The files, each with the state it owns:
 *
 *   engine.c         create, free, the step loop and the dispatch table
 *   exec_compute.c   micro-batches, forward/backward of a unit, its views
 *                    and the gradients it commits
 *   exec_gather.c    stage 3: gather, wait, release; hpZ's secondary copy
 *   exec_reduce.c    buckets, reduce-scatter, the compressed exchange,
 *                    fixed point, the allgathers of stages 0-2
 *   exec_norm.c      the step's loss, overflow check, global norm (TP,
 *                    pipeline and exact sums of squares)
 *   exec_optimizer.c the optimizer on the device (full array or shard) and
 *                    on the host
 *   exec_lamb.c      LAMB: the trust ratios' sums across the shards
 *   exec_onebit.c    1-bit Adam after its freeze: the local norm, the
 *                    momentum's compressed all-reduce, the frozen step
 *   offload.c        the swap file, the swapped optimizer, gradients down
 *                    and parameters up
 *   exec_pipe.c      the pipeline's messages
 *   exec_expert.c    DeepSpeed's layout of the experts: their store
 *   engine_hash.c    results: parameters, hashes, gradients out
 *   engine_state.c   the state between steps (master, moments, counters)
 *
 * zs_engine_exec looks each op's executor up in a table indexed by its
 * kind (zs_step_op_kind): the step-program builder decides which kind, so
 * an executor does what its op says.
 */
#ifndef ZEROSIM_ENGINE_IMPL_H
#define ZEROSIM_ENGINE_IMPL_H

#include "zerosim/zero.h"
#include "zerosim/comm.h"
#include "zerosim/data.h"
#include "zerosim/optim.h"
#include "zerosim/program.h"
#include "zerosim/quant.h"

#include <stddef.h>
#include <stdint.h>

struct zs_engine {
    zs_run_config cfg;
    zs_backend_t be;
    int phantom;                /* a phantom backend: buffers hold nothing */
    zs_mem_t mem;
    zs_comm_t comm;             /* the data-parallel group */
    zs_comm_t tp_comm;          /* the tensor-parallel group, NULL without */
    int tp_size, tp_rank;
    zs_partition part;          /* this rank's */
    zs_step_shape own_shape;    /* when not shared */
    const zs_step_shape *shape; /* what a step allocates and does */
    zs_step_program prog;
    zs_step_program prog_onebit; /* 1-bit Adam: the program after the freeze
                                    (zs_step_program_build_onebit); else empty */
    int grads_local;            /* the last step ran prog_onebit: gfull holds
                                   this rank's own gradient, gshard nothing */
    /* 0/1 Adam (exec_zeroone.c): the schedule after the applied steps, the
     * one after this step, this step's kind, whether the variance freezes
     * after it, and the learning rates summed since the last sync */
    zs_zeroone_sched zo_sched, zo_next;
    zs_zeroone_kind zo_kind;
    int zo_on, zo_freezes, zo_local;
    double zo_lrs;
    int stage, det;
    zs_model *model;            /* the model that computes (with expert
                                   parallelism: this rank's experts only) */
    /* expert parallelism (cfg.model.moe_ep > 1): the flat arrays keep the
     * --ep 1 layout (every expert), laid out by fmodel; the model computes
     * this rank's experts, a slice of each stacked expert entry
     * (zs_engine_slice), and sends each expert's gradients from each
     * source's tokens back to the source (moe_ep_home), so the gradient
     * views cover every expert and hold --ep 1's bytes */
    zs_model *fmodel;
    const zs_layout *clay;      /* the computing model's layout */
    int ep_size, ep_rank;
    /* DeepSpeed's layout (shape->xsplit, zs_step_ep_split): the flat arrays
     * hold the dense entries only (the computing model's layout puts its
     * experts after num_params); the expert store holds this rank's
     * experts, element i of it the layout's num_params + i, partitioned
     * over the expert-data-parallel group edp (this rank xrank of it);
     * fmodel only gives the --ep 1 order of the hash */
    int xsplit, xrank;
    zs_comm_t edp;
    size_t xbase;
    void *xgather;              /* stage 3: unit xgather_unit's experts, from
                                   xgather_lo */
    int xgather_unit;
    size_t xgather_lo;
    void *xparams, *xgacc, *xgrad, *xrecv, *xtmp;
    float *xmaster, *xexp_avg, *xexp_avg_sq;
    void *xhgrad, *xhparam;     /* offload_optimizer cpu: the experts' gradient
                                   and updated shards on the host (else NULL) */
    zs_data *data;
    const zs_layout *lay;
    int nunits;                 /* units */
    zs_dtype param_dtype;       /* storage type of the parameters */
    size_t param_elsize;        /* its size */
    zs_dtype grad_dtype;        /* of the gradients: stored, accumulated over
                                   the micro-batches and reduced in it
                                   (zs_run_config_grad_dtype) */
    size_t grad_elsize;         /* its size */
    int mixed;
    zs_comm_type comm_dtype;    /* comm type of the parameters */
    zs_comm_type grad_comm_dtype; /* of the gradients */

    void *buf[ZS_BUF_N];        /* the shape's buffers; NULL when 0 bytes */
    /* model states; "full" arrays have Ψp elements, shards S */
    void *params;               /* stages 0-2 full, stage 3 shard */
    void *params_shard;         /* this rank's shard of them (stages 1-3) */
    float *master, *exp_avg, *exp_avg_sq; /* stage 0 full, else shard; master
                                   aliases the params when !mixed */
    void *gfull;                /* stages 0, 1: full gradient buffer */
    void *gshard;               /* reduced gradient shard (grad_dtype); with
                                   the step schedule, this rank's part of gfull */
    int64_t *gacc;              /* deterministic: fixed-point shard accumulator */
    int64_t *gfix;              /* deterministic, step schedule, grad_accum > 1:
                                   the full gradient accumulated in fixed point */
    int reduce_once;            /* the step schedule: one reduction per step */
    void *recv;                 /* this rank's part of one bucket (grad_dtype
                                   or int64) */
    int64_t *fixbuf;            /* deterministic: one bucket in fixed point */
    int frac_bits;
    int64_t fix_limit;
    size_t fix_overflows;
    void **bucket_buf;          /* stages 2, 3: [nbuckets] full-size while alive */
    int *counts, *displs;       /* [N] one call's parts */

    /* stage 3, per gather range (shape->granges) */
    void **gather_buf, **gather_req;
    int **gather_counts, **gather_displs; /* kept while a non-blocking gather runs */
    size_t live_params, live_params_peak;
    double *gather_start_s;     /* [nunits] when each unit's gather started */
    double nb_span_s, nb_wait_s;/* the non-blocking gathers and reduce-scatters:
                                   start to done, and the part spent waiting
                                   for them or driving them */
    void *rs_req;               /* overlap_comm: the reduce-scatter in flight */
    int rs_bucket;              /* its bucket, or -1 */
    double rs_t0;               /* when it started */
    int rs_async;               /* it goes on behind the next ops */
    int gather_last;            /* stage 3: the latest gather range started */
    /* ZeRO++ hpZ: the secondary group (K ranks of a node), this rank's
     * part of the secondary partition: padded / K parameters from
     * hpz_shard_lo */
    zs_comm_t hpz;
    zs_comm_t *gather_comm;     /* [ranges] the group each gather runs in */
    int hpz_k;
    size_t hpz_shard_n, hpz_shard_lo;
    void *hpz_shard;
    int tracing;                /* record op spans (zs_engine_set_trace) */
    zs_trace_span *spans;
    size_t nspans, capspans;

    float *stage_p, *stage_g;   /* fp32 staging for one unit */
    zs_quant_spec qat;          /* --qat: the fake quantization of the linear
                                   weights (format NONE: off) */
    float **unit_params, **unit_grads; /* [n_entries] the fp32 views of the
                                   unit being computed (zs_engine_view_unit) */

    zs_acts *acts;              /* slot 0 (the only one without a pipeline) */
    zs_acts **slots;            /* [nslots] pipeline: one per micro-batch in flight,
                                   chunk by chunk (slot0[c]: chunk c's first) */
    int nslots;
    int *slot0;
    zs_model **cmodel;          /* [nchunks] the interleaved schedule's model
                                   chunks (cmodel[0] is model) */
    zs_batch batch;

    /* pipeline (cfg.pp > 1): this stage's groups (its flat arrays' ranges
     * of the whole layout are the shape's chunks), the tied embedding's
     * copy (last stage) and the head's gradient of it (first stage), and
     * the sends not yet complete */
    zs_comm_t pp_comm, world;
    int pp_size, pp_rank;
    void *tied;
    float *tied_grad;
    void **sends;
    int *send_slot;             /* [nsends] interleaved: the slot each sends from */
    int nsends, capsends;
    void *tied_req;             /* last stage: the tied gradient's send */
    double recv_wait_s;         /* seconds spent in the step's receives */
    int32_t *h_tokens, *h_targets;
    float *h_x;

    /* gradient compression: replaces the reduce-scatter of each bucket */
    int comp_on, comp_now;
    float *residual;            /* error feedback, Ψp fp32 (category compression) */
    float *cx, *capprox, *cacc; /* fp32 workspaces: a bucket, its approximation,
                                   this rank's part */
    char *csend, *crecv;        /* compressed bytes out and in */
    int *scount, *sdispl, *rcount, *rdispl;

    size_t norm_block;          /* elements per norm block */
    double *norm_local, *norm_all;
    float *loss_local, *loss_all;
    /* a pipeline with experts (zs_engine_pp_aux_loss): each micro-batch's
     * l_aux of this stage's MoE blocks [GA][L] (0 for the others' blocks),
     * every stage's [P][GA][L], and the last stage's mean token losses [GA] */
    double *pp_laux, *pp_laux_all, *pp_token_loss;

    zs_loss_scaler scaler;
    int opt_steps;              /* optimizer steps taken */

    /* offload_optimizer: master, m and v on the host tier (cpu) or in a
     * file per rank (nvme: master, m, v one after the other, shard floats
     * each), read and written through the swap buffers */
    zs_offload offload;
    int sep_master;             /* the master is not the parameters themselves */
    void *hgrad, *hparam;       /* host: gradient shard in, parameter shard out */
    int param_host;             /* offload_param: the parameter shard on the host */
    void *param_out;            /* the device optimizer's updated working copy
                                   (mixed precision; NULL in fp32) */
    int param_nvme;             /* offload_param nvme: the shard in the swap file,
                                   after the optimizer's states */
    int grad_shard_on_host;     /* the reduced shard lives on the host: each
                                   reduced part is sent down as it comes */
    int swap_fd;
    char swap_path[1200];
    /* the step being executed */
    int step, overflow;
    float dloss;                /* d objective / d micro-batch loss */
    double post_scale;          /* the factor applied after the sum over ranks
                                   (DeepSpeed's postscale: f/N), with the
                                   unscaling; 1 otherwise */
    float grad_mul;             /* the optimizer's gradient multiplier */
    zs_step_info *info;
};

/* An op's executor: 0, or non-zero with the error set. *stop = 1 ends the
 * step (an overflow skips it). */
typedef int (*zs_engine_exec_fn)(zs_engine *e, const zs_step_op *o, int *stop);

/* ---- executors (one per op kind; engine.c's table) ---- */
/* exec_compute.c */
int zs_engine_exec_load(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_forward(zs_engine *e, const zs_step_op *o, int *stop);
/* A pipeline with experts (exec_pipe.c): after the forward of op o, its
 * block's l_aux for its micro-batch when it is a MoE block; at the step's
 * loss, every stage's l_aux gathered over the pipeline group and each
 * micro-batch's loss on the last stage, its token loss plus the aux term
 * summed in block order (byte for byte the loss without a pipeline). */
void zs_engine_pp_keep_aux(zs_engine *e, const zs_step_op *o);
int zs_engine_pp_aux_loss(zs_engine *e);
int zs_engine_exec_loss(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_backward(zs_engine *e, const zs_step_op *o, int *stop);
/* exec_gather.c */
int zs_engine_exec_gather(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_wait(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_release(zs_engine *e, const zs_step_op *o, int *stop);
/* exec_reduce.c */
int zs_engine_exec_begin(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_zero_grads(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_bucket_alloc(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_accum_fixed(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_reduce(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_reduce_wait(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_put_shard(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_allgather(zs_engine *e, const zs_step_op *o, int *stop);
/* exec_norm.c */
int zs_engine_exec_loss_sum(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_check(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_norm(zs_engine *e, const zs_step_op *o, int *stop);
/* exec_optimizer.c */
int zs_engine_exec_optimizer_full(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_optimizer_shard(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_optimizer_host(zs_engine *e, const zs_step_op *o, int *stop);
/* exec_lamb.c: LAMB over this rank's arrays, which hold flat elements
 * [base, base + n) (master, m, v fp32; grad and param typed; param NULL
 * when the master is the parameters) */
int zs_engine_lamb_step(zs_engine *e, size_t base, size_t n, float *master, float *m, float *v,
                        const void *grad, void *param);
/* exec_onebit.c */
int zs_engine_exec_local_norm(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_optimizer_onebit(zs_engine *e, const zs_step_op *o, int *stop);
/* the exchanged momentum (or 0/1 Adam's x) set to 0 where v is 0 and in
 * the padding up to n: what 1-bit signs cannot represent */
void zs_engine_onebit_mask(const zs_engine *e, float *x, size_t n);
/* 1-bit LAMB's exact steps (zs_engine_lamb_step): the trust ratios' running
 * averages and, at the last exact step, the fresh variance's start */
void zs_engine_onebit_lamb_warmup(zs_engine *e, const float *ratio, const float *v);
/* exec_zeroone.c: 0/1 Adam. begin: this step's kind (the schedule rebuilt
 * after a resume); the optimizer op of prog_onebit in its steps; end: after
 * an applied step, the schedule advanced and, at the freeze, the errors set
 * to 0 and the sync point to the weights. */
zs_zeroone_kind zs_engine_zeroone_begin(zs_engine *e);
int zs_engine_exec_optimizer_zeroone(zs_engine *e, const zs_step_op *o, int *stop);
void zs_engine_zeroone_end(zs_engine *e);
/* exec_norm.c: the loss scaler, clipping and the optimizer's gradient
 * multiplier from the step's norm (unscaled; INFINITY on overflow) and the
 * factor that makes the stored gradient the averaged one (before the
 * unscaling); 1 in *skip when the step is skipped */
int zs_engine_norm_finish(zs_engine *e, double norm, double mul, int *skip);
/* offload.c */
int zs_engine_exec_optimizer_swapped(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_offload_grads(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_upload_params(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_download_params(zs_engine *e, const zs_step_op *o, int *stop);
/* exec_pipe.c */
int zs_engine_exec_recv_act(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_send_act(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_recv_grad(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_send_grad(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_tied_send(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_tied_recv(zs_engine *e, const zs_step_op *o, int *stop);
int zs_engine_exec_tied_sync(zs_engine *e, const zs_step_op *o, int *stop);

/* ---- helpers shared between the engine's files ---- */
/* exec_compute.c: add fp32 gradients src of entry id into the stored
 * gradient (the full buffer, or the bucket buffers covering it). */
int zs_engine_commit_entry(zs_engine *e, int id, const float *src);
/* exec_gather.c: typed pointer to entry id's parameters as unit u sees
 * them; free unit u's gathered ranges (after waiting for them). */
const void *zs_engine_entry_params(const zs_engine *e, int u, int id);
void zs_engine_gather_release(zs_engine *e, int u);
/* exec_reduce.c: move the non-blocking collectives on, between ops. */
int zs_engine_progress(zs_engine *e);
/* exec_norm.c: one bf16 or fp16 value (host bits) as a float. */
float zs_engine_half_to_f32(uint16_t h, zs_dtype t);
/* offload.c: the swap file (offload nvme); state k's elements [i, i + n)
 * (0 master, 1 m, 2 v) to (write) or from it; n working-precision
 * parameters of the shard at element i; the master's elements [i, i + n)
 * of this rank's range, in memory or in the swap file. */
int zs_engine_swap_open(zs_engine *e);
int zs_engine_swap_io(zs_engine *e, int write, int k, size_t i, size_t n, float *buf);
int zs_engine_swap_params(zs_engine *e, int write, size_t i, size_t n, void *buf);
int zs_engine_master_write(zs_engine *e, size_t i, size_t n, const float *host);
int zs_engine_master_read(zs_engine *e, size_t i, size_t n, float *host);
/* exec_pipe.c: the activation slot of op o; complete the pending sends
 * (all of them, or those from one slot). */
int zs_engine_slot_index(const zs_engine *e, const zs_step_op *o);
zs_acts *zs_engine_slot(zs_engine *e, const zs_step_op *o);
int zs_engine_wait_sends(zs_engine *e);
int zs_engine_wait_slot(zs_engine *e, int slot);
/* exec_expert.c: DeepSpeed's layout */
void zs_engine_put_xmaster(zs_engine *e, size_t off, size_t n, const float *buf, void *tmp);
int zs_engine_gather_experts(zs_engine *e, int u);
int zs_engine_commit_experts(zs_engine *e, size_t xlo, size_t n, const zs_acts *a);
void *zs_engine_xgrad_shard(const zs_engine *e);
int zs_engine_reduce_experts(zs_engine *e);
int zs_engine_step_experts(zs_engine *e);
/* engine_hash.c: T shards of n elements into the tp = 1 order */
int zs_engine_tp_unshard(const zs_engine *e, const float *all, size_t n, float *full);

#endif
