/* zerosim — closed-form predictions of memory and traffic per rank.
 *
 * Notation: Ψ parameters, Ψp padded to the partition, N ranks, S = Ψp/N,
 * p bytes per stored parameter or gradient (4 fp32, 2 bf16/fp16), K
 * optimizer bytes per parameter (8 AdamW, 4 SGD, plus 4 for the fp32 master
 * under mixed precision). The ZeRO paper's per-rank model states,
 * (2+2+K)Ψ, 4Ψ+KΨ/N, 2Ψ+(2+K)Ψ/N and (4+K)Ψ/N for p = 2, become, exactly
 * as zerosim allocates them:
 *
 *   stage | params          | grads          | optimizer
 *   0     | p Ψp            | p Ψp + p S     | K Ψp
 *   1     | p Ψp            | p Ψp + p S     | K S
 *   2     | p Ψp            | p S            | K S
 *   3     | p S + p L       | p S            | K S
 *
 * where L is the most gathered parameters alive at once under the stage-3
 * schedule (each unit gathered before use, the next one prefetched when it
 * fits under stage3_max_live_parameters and stage3_prefetch_bucket_size),
 * and the extra p S of stages 0 and 1 is the reduced gradient shard every
 * stage accumulates into. Deterministic mode adds 8 S of int64 gradients.
 * With grad_reduce step (DeepSpeed's schedule), stages 0 and 1 accumulate
 * the full gradient locally and reduce it once per step into its own part:
 * grads are p Ψp, plus 8 Ψp of int64 accumulator in deterministic mode
 * with grad_accum > 1.
 *
 * Traffic per rank per step, in the ring-volume convention ((N-1)/N of the
 * bytes of the full buffer for reduce-scatter and allgather):
 *   reduce-scatter: grad_accum x Ψp x (p, or 8 in deterministic mode);
 *                   once per step (not grad_accum times) for stages 0 and
 *                   1 with grad_reduce step
 *   allgather:      stages 0-2: p Ψp once per step that is not skipped
 *                   (stage 0 gathers gradients, 1 and 2 parameters);
 *                   stage 3: grad_accum x 2 x p x G, G = sum over units of
 *                   the parameters each gathers (Ψ, plus the tied token
 *                   embedding once more for the GPT's output head).
 */
#ifndef ZEROSIM_PREDICT_H
#define ZEROSIM_PREDICT_H

#include <stddef.h>
#include "zerosim/config.h"
#include "zerosim/mem.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    size_t num_params, padded, shard;
    size_t bytes[ZS_MEM_NCAT];   /* predicted peak per category; 0 = none */
    int has[ZS_MEM_NCAT];        /* 1 where a prediction exists */
    size_t live_params;          /* stage 3: L */
    size_t gathered_per_pass;    /* stage 3: G */
    /* traffic per step, full-buffer bytes (multiply by (N-1)/N for ring) */
    size_t rs_bytes_per_step;
    size_t ag_bytes_per_step;    /* for a step that is not skipped */
    size_t ag_bytes_per_skipped_step;
    /* stage 3 with ranks_per_node K (1 < K < N, whole nodes), neither
     * hierarchical nor tp/pp: the engine's gathers are linear
     * (MPI_Iallgatherv) and a unit's parts are its overlaps with each
     * rank's shard, often one or two ranks' alone. Per gather call, the
     * busiest direction of any node's link: max over nodes of its ranks'
     * parts times the N-K ranks elsewhere (out), or the other ranks' parts
     * times K (in); summed over the step's calls, bytes (qwZ's forward
     * parts encoded; hpZ's backward gathers stay inside a node). 0:
     * not computed */
    double ag_link_bytes_per_step;
    /* ZeRO++ hpZ (zs_predict): the part of ag_bytes_per_step gathered in
     * the backward phase, inside the secondary group of
     * zero_hpz_partition_size ranks (its ring: (K-1)/K of each buffer) */
    size_t ag_hpz_bytes_per_step;
    double ag_hpz_calls_per_step;
    /* ZeRO++ qgZ (zs_predict): rank 0's encoded bytes per step sent inside
     * its node and across, and across summed over node 0's ranks (nodes of
     * cfg->ranks_per_node ranks, all of them one node when 0) */
    double qgz_intra_bytes_rank0, qgz_inter_bytes_rank0, qgz_inter_bytes_node0;
    double qgz_calls_per_step;   /* reduce ops, each two all-to-alls */
    /* qwZ and qgZ (zs_predict): rank 0's elements encoded or decoded per
     * step (zs_comm.h's block codecs): qwZ encodes its part of each forward
     * gather and decodes every part; qgZ, per reduce of a bucket, encodes
     * every part and decodes its column from the node's K ranks, then
     * encodes the column's node sums and decodes the M node sums of its
     * own part. Its fp32 copy of each bucket (and the result's conversion)
     * are in quant_pass_elems_per_step */
    double quant_elems_per_step, quant_pass_elems_per_step;
    /* zs_predict only: calls per step, recomputed unit forwards per step,
     * and rank 0's compressed all-to-all bytes per compressed step */
    double rs_calls_per_step, ag_calls_per_step, ag_calls_per_skipped_step;
    double recompute_units;
    double a2a_bytes_rank0;
    /* zs_predict only, 1-bit Adam: rank 0's wire bytes per applied step
     * after the freeze (whose program has no reduce-scatter and no
     * allgather of the gradient): the signs' all-to-all and allgather of
     * the momentum's compressed all-reduce (zs_comm_onebit_sizes); 0
     * otherwise */
    double onebit_a2a_bytes_per_step, onebit_ag_bytes_per_step;
    /* zs_predict only, for the step-time model: the program's small
     * collectives over the world per step (the loss's sum, the overflow
     * flags, the gradient norm), its gradient reduction rounds (the
     * micro-batches whose buckets are reduced: one with the step schedule),
     * and its units' forwards per step, the first of each (elements and
     * the GPT's blocks) and the recomputed ones (elements) */
    double scalar_calls_per_step, reduce_rounds_per_step;
    double forward_elems_per_step, forward_blocks_per_step, recompute_elems_per_step;
    /* of bytes[ZS_MEM_GRADS]: the buffers in int64 fixed point (the rest
     * hold working-precision gradients) */
    size_t grad_fixed_bytes;
    /* tensor parallelism: the model's all-reduces over the TP group per
     * step, this rank's ring traffic 2(T-1)/T of each buffer: per micro-
     * batch the embedding's BT·C and the head's BT·C, 2·BT·C forward and
     * backward per block (each recomputed block 2·BT·C more), and the
     * vocab-parallel loss's maxima and sums (3·BT), fp32 */
    double tp_allreduce_bytes_per_step;
    /* sequence parallelism: the all-gathers and reduce-scatters over the TP
     * group that replace the all-reduces of B·T·C, (T-1)/T of each: per
     * micro-batch B·T·C·(2 + 4L) of each (2·B·T·C more per recomputed
     * block); the all-reduces are then the loss's 3·B·T and the LayerNorm
     * gradients' C·(4L + 2) */
    double tp_rs_bytes_per_step, tp_ag_bytes_per_step;
    /* the calls per step of those all-reduces and of those pairs (each a
     * reduce-scatter and an all-gather). With a pipeline (cfg.model's
     * stage) all of these are the stage's: the embedding's on the first,
     * the head's and the loss's on the last, the stage's blocks' */
    double tp_allreduce_calls_per_step, tp_pair_calls_per_step;
    /* partitioned activation checkpoints (model.ckpt_partition): the
     * all-gathers over the TP group of the checkpoints' slices before each
     * recompute that reads one, (T-1)/T of each whole checkpoint (B·T·C);
     * included in tp_ag_bytes_per_step, and their calls */
    double tp_ckpt_ag_bytes_per_step, tp_ckpt_ag_calls_per_step;
    /* offload (zs_predict only): the host and nvme tiers per category, and
     * the bytes moved per applied step: device to host (the gradient
     * shard), host to device (the parameter shard), read from and written
     * to the nvme files (every optimizer state, once each way) */
    size_t tier_bytes[ZS_MEM_NTIERS][ZS_MEM_NCAT];
    double d2h_bytes_per_step;          /* every step (gradients as reduced) */
    double d2h_bytes_per_applied_step, h2d_bytes_per_step; /* applied steps */
    double nvme_read_bytes_per_step, nvme_write_bytes_per_step;
    double param_h2d_bytes_per_step;    /* offload_param: rank 0's gathers' own parts */
    /* pipeline (cfg.pp > 1; cfg.model holds the stage, zs_pp_stage_config):
     * the stage's point-to-point bytes per step (activations, their
     * gradients, the tied embedding's gradient) sent and received, the
     * tied embedding's update per applied step (first stage sends, last
     * receives), the activation slots and the most micro-batches in flight
     * the program has */
    double p2p_send_bytes_per_step, p2p_recv_bytes_per_step;
    double tied_send_bytes_per_applied_step, tied_recv_bytes_per_applied_step;
    int act_slots, in_flight;
    /* expert parallelism (moe.ep_size > 1): the model's all-to-alls over
     * the expert-parallel group per step, this rank's wire bytes: two per
     * forward (recomputed ones included) and two per backward of each MoE
     * block and micro-batch (zs_model_moe_alltoall_bytes per call) */
    double ep_a2a_bytes_per_step, ep_a2a_calls_per_step;
    /* expert parallelism in DeepSpeed's layout (zs_step_ep_split): the
     * expert store's collectives over the expert-data-parallel group, this
     * rank's wire bytes (zs_step_expert_traffic): the reduce-scatter every
     * step, the allgather every step (stage 0: the gradients) or every
     * applied step (stages 1, 2: the updated parameters) */
    double edp_rs_bytes_per_step, edp_ag_bytes_per_step, edp_ag_bytes_per_applied_step;
    int edp_rs_calls_per_step, edp_ag_calls_per_step;
    /* the experts' parameters of this rank's store (0 without one) */
    size_t expert_params;
    /* context parallelism (--cp): ring attention's point-to-point bytes per
     * step that this rank sends (and as many it receives) over the context
     * group, and its messages: per block and micro-batch, each forward
     * (recomputed ones included) C - 1 of this rank's keys and values, each
     * backward 2 (C - 1), keys and values and their gradients
     * (zs_model_cp_ring_bytes) */
    double cp_ring_bytes_per_step, cp_ring_sends_per_step;
    /* DeepSpeed-Ulysses (--cp-attention ulysses): the all-to-alls' bytes
     * per step that this rank sends to the other ranks of the context
     * group, and their calls: two per forward (recomputed ones included)
     * and two per backward of each block and micro-batch
     * (zs_model_cp_a2a_bytes) */
    double cp_a2a_bytes_per_step, cp_a2a_calls_per_step;
} zs_prediction;

/* Predict for cfg (finalized) on `world` ranks by counting the step
 * program (zerosim/program.h): every category, comm_buffers and workspace
 * included, and every collective. Returns 0 or non-zero with a message (an
 * impossible model). */
int zs_predict(const zs_run_config *cfg, int world, zs_prediction *p);
/* offload_param: the bytes each of the `world` data-parallel ranks sends
 * up from its parameter shard per step (its own part of every stage-3
 * gather of cfg's step program; with a pipeline, cfg.model's stage,
 * zs_pp_stage_config), into bytes[0..world-1]. Returns 0 or non-zero with
 * a message. */
int zs_predict_param_h2d_bytes(const zs_run_config *cfg, int world, double *bytes);
/* The closed forms above, computed without the program: model states,
 * activations, checkpoints, compression residual, reduce-scatter and
 * allgather bytes (comm_buffers and workspace have none: has = 0). The tests
 * hold the program's counts to them. */
int zs_predict_closed(const zs_run_config *cfg, int world, zs_prediction *p);

/* Compressed gradient exchange (Ψ = num_params): bytes rank `rank` sends to the other ranks
 * per step (all-to-all), for gradient buckets [lo[i], hi[i]): for each
 * bucket and each other rank q, the compressed size of q's part of n
 * elements: top-k 8*ceil(f*n) (a 4-byte index and a 4-byte value each),
 * int8 n + 4*ceil(n/256), sign ceil(n/8) + 4*ceil(n/256); times grad_accum (once for
 * stage 1 with grad_reduce step). */
double zs_predict_alltoall_bytes(const zs_run_config *cfg, size_t num_params, int world,
                                 int rank, const size_t *lo, const size_t *hi, int nbuckets);

/* Ring-volume bytes of a collective over an S-byte buffer on N ranks. */
/* ZeRO++ qgZ: the encoded bytes data-parallel rank q sends to other ranks
 * in one step's two-level all-to-alls (M nodes of K ranks; zs_comm.h), and
 * in *inter the part sent to other nodes (the second level). */
struct zs_step_shape_s;
struct zs_step_program_s;
double zs_predict_qgz_bytes(const struct zs_step_shape_s *s, const struct zs_step_program_s *p,
                            int K, int q, double *inter);
/* ZeRO++: rank 0's codec elements per step and qgZ's fp32 passes
 * (zs_prediction.quant_elems_per_step); -1 when out of memory */
double zs_predict_quant_elems(const struct zs_step_shape_s *s, const struct zs_step_program_s *p,
                              int qwz, int qgz, int K, double *passes);
double zs_ring_bytes(size_t full_bytes, int world);

#ifdef __cplusplus
}
#endif
#endif
