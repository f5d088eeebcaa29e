/* zerosim — the planner: per-device memory, traffic and step time of a model
 * and cluster that need not exist here, from the same closed forms that real
 * runs are measured against (zerosim/predict.h).
 *
 * Conventions (which bytes a device is said to hold; Ψ parameters, N ranks,
 * p bytes per parameter, g per gradient, K optimizer bytes per parameter:
 * 8 AdamW or 4 SGD, plus 4 for the fp32 master copy when p < 4):
 *
 *   ZS_PLAN_ZEROSIM  what a zerosim run allocates and measures (predict.h):
 *                    padding to the partition, the extra reduced gradient
 *                    shard of stages 0 and 1, stage 3's live gathered
 *                    parameters L. A GPT (has_arch) goes through zs_predict
 *                    itself; a bare parameter count is one layout of Ψ
 *                    parameters padded to N, with L = largest_layer (0 when
 *                    not given) and no activations.
 *   ZS_PLAN_PAPER    the ZeRO paper (Rajbhandari et al. 2020, section 5):
 *                    stage 0 (p+g+K)Ψ, 1 (p+g)Ψ + KΨ/N, 2 pΨ + (g+K)Ψ/N,
 *                    3 (p+g+K)Ψ/N; no padding, no L.
 *   ZS_PLAN_MEGATRON Megatron-LM's distributed-optimizer table: parameters
 *                    pΨ and gradients gΨ always whole; the optimizer holds
 *                    the fp32 master (when p < 4), the moments, and an fp32
 *                    copy of the gradients when g < 4; stage 1 (the
 *                    distributed optimizer) divides the optimizer by N.
 *                    Stages 2 and 3 do not exist in this convention.
 *
 * Traffic per device per step is the ring volume ((N-1)/N of each full
 * buffer; all-to-all: the bytes a rank sends).
 */
#ifndef ZEROSIM_PLAN_H
#define ZEROSIM_PLAN_H

#include <stddef.h>
#include "zerosim/config.h"
#include "zerosim/mem.h"
#include "zerosim/steptime.h"

/* The most devices a plan takes (--dp, --nodes x --devices-per-node, and
 * dp x tp x pp): 2^24, so that every count of devices stays an int. */
#define ZS_PLAN_DEVICES_MAX (1 << 24)

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ZS_PLAN_ZEROSIM = 0, ZS_PLAN_PAPER = 1, ZS_PLAN_MEGATRON = 2 } zs_plan_convention;

#define ZS_PLAN_PP_SHOWN 64

/* "zerosim", "paper", "megatron" */
const char *zs_plan_convention_name(zs_plan_convention c);

typedef struct {
    /* stage, precision, optimizer, micro_batch, grad_accum, checkpointing,
     * compression, deterministic, bucket sizes; with has_arch, the GPT in
     * cfg.model. zs_plan_compute finalizes a copy for dp ranks. */
    zs_run_config cfg;
    int has_arch;
    size_t num_params;        /* Ψ when !has_arch */
    size_t largest_layer;     /* !has_arch: stage 3's live gathered parameters */
    int seq_len;              /* !has_arch: tokens per sample, for FLOPs (0 = unknown) */
    zs_dtype grad_precision;  /* gradients (the real runs keep cfg.precision) */
    int sequence_parallel;    /* megatron convention: Korthikanti et al.'s SP */
    int keep_batch;           /* cfg's batch sizes as a run reads them (a config
                                 file): train_batch_size is resolved for each N;
                                 else micro_batch x grad_accum per device */
    zs_plan_convention convention;
    int dp;                   /* N: data-parallel devices (cfg.tp: tensor-parallel
                                 ones per data-parallel rank; N x tp in all) */
    int devices_per_node;
    size_t device_memory;     /* bytes per device; 0 = not given */
    size_t host_memory;       /* offload: host bytes per node; 0 = not given */
    zs_steptime_calib cal;
    int overlap;              /* step time: communication overlaps compute */
} zs_plan_input;

/* Defaults: the run defaults (zs_run_config_defaults) with micro-batch 1
 * and grad-accum 1, GPT off, Ψ = 0,
 * zerosim convention, N = 1, 8 devices per node, no device memory, the
 * default machine (zs_steptime_defaults). */
void zs_plan_input_defaults(zs_plan_input *in);

typedef struct {
    size_t num_params;        /* Ψ */
    size_t padded, shard;     /* Ψp and S = Ψp/N (zerosim convention; else Ψ and Ψ/N) */
    size_t live_params;       /* stage 3: L (zerosim convention) */
    double bytes[ZS_MEM_NCAT];/* per device, per category of a real run */
    int has[ZS_MEM_NCAT];     /* 1 where the category is modelled */
    /* the groups of the report: optimizer = master + m + v, activations =
     * activations + checkpoints; total = every modelled category */
    double params, grads, optimizer, activations, total;
    int activations_modelled; /* 0 for a bare parameter count */
    zs_steptime_coll colls[3 * ZS_COLL_NKINDS]; /* data-parallel ones, then tensor-parallel */
    int ncolls;
    double traffic_bytes;     /* per device per step, ring volume */
    /* ZeRO++ on (qwZ, hpZ or qgZ; zerosim convention, a GPT): the bytes
     * crossing node 0's link per step, summed over its devices, as the
     * ledger counts them (flat rings: the node's last device sends its
     * (N-1)/N of each buffer across; hpZ's backward gathers and qgZ's
     * first level stay inside; qgZ's second level crosses) */
    int zeropp;
    /* --hierarchical with more than one node of more than one device: each
     * data-parallel reduce-scatter and allgather as two groups, the node's
     * K devices (link 1) then the M nodes (link 2, S/K each); then
     * inter_node_bytes is per device: (M-1)/N of each buffer, as the
     * ledger counts it for every rank */
    int hierarchical;
    /* --tp or --pp (zerosim convention, a GPT, without --ep, ZeRO++ or
     * --hierarchical): the most loaded stage's devices laid out as zerosim
     * mesh lays them, K to a node. inter_frac: the share of them whose
     * data-parallel ring, tensor-parallel ring (each sends to its next
     * member) and pipeline peers (the stages before and after) are on
     * another node; inter_part: the bytes per device and step that cross
     * for each (the ring volume, or the point-to-point sends, times the
     * share); inter_node_bytes is then their sum, per device */
    int mesh_inter;
    double inter_frac[3], inter_part[3];
    double inter_node_bytes;
    double flops_per_step;    /* per device; 0 = not modelled */
    double tokens_per_step;   /* per device */
    int recompute;            /* 1: checkpointing adds a forward to the FLOPs */
    zs_steptime_result time;
    int fits;                 /* 1 fits, 0 does not, -1 no device memory given */
    /* offload (cfg.offload_optimizer): bytes per device in the host and
     * nvme tiers by category, their totals, the host's per node, whether
     * that fits host_memory (-1 not given), and the bytes moved per device
     * per step: device to host and back, read from and written to files */
    double tier_bytes[ZS_MEM_NTIERS][ZS_MEM_NCAT];
    double host_total, nvme_total, host_per_node;
    int host_fits;
    double d2h_bytes, h2d_bytes, nvme_read_bytes, nvme_write_bytes;
    /* pipeline (cfg.pp > 1; zerosim convention, a GPT): every stage is
     * predicted from its own step program; bytes[] and fits are those of
     * the most loaded stage (pp_stage), whose point-to-point bytes per step
     * (sent; received) count in traffic_bytes. The step time's compute is
     * that stage's share of the FLOPs times (m + P - 1)/m, the ideal
     * bubble's stretch (the messages' own time is not modelled). */
    int pp, pp_stage;
    double pp_stage_total[ZS_PLAN_PP_SHOWN]; /* the first ZS_PLAN_PP_SHOWN stages */
    /* the parameters each stage's devices hold (their TP shard of the
     * stage's units, without padding or the last stage's tied copy) */
    size_t pp_stage_params[ZS_PLAN_PP_SHOWN];
    /* a GPT in the zerosim convention: the most parameters one device holds
     * (its TP shard of its stage's units; the whole TP shard without a
     * pipeline), without padding; 0 when not planned */
    size_t device_params;
    double pp_send_bytes, pp_recv_bytes;
    double pp_bubble;             /* (P - 1)/(m + P - 1) */
    /* context parallelism (--cp): its size, and the ring attention's point-
     * to-point bytes per step one device sends (as many it receives) */
    int cp;
    double cp_ring_bytes;
    /* with Ulysses (--cp-attention ulysses) in place of the ring: its
     * all-to-alls' bytes per step one device sends to the others */
    double cp_a2a_bytes;
} zs_plan_result;

/* Plan one (model, stage, N). Returns 0, or non-zero with a one-line message
 * (an impossible shape or setup). A model that does not fit is not an error:
 * fits = 0. */
int zs_plan_compute(const zs_plan_input *in, zs_plan_result *out);

/* The largest model whose total fits in device_memory under the setup:
 * without has_arch, the largest Ψ (*layers = 0); with has_arch, the most GPT
 * blocks (up to 4096) at the given width, *max_params their Ψ. Returns 0 (with
 * *max_params = 0 when not even the smallest fits), or non-zero with a
 * message (no device memory given, an impossible setup). */
int zs_plan_max_model(const zs_plan_input *in, size_t *max_params, int *layers);

/* DeepSpeed's estimate_zero{2,3}_model_states_mem_needs for one option row:
 * bytes per CPU and per GPU (stage 2 uses only offload_optimizer). */
typedef struct {
    int offload_optimizer, offload_param, zero_init;
    double cpu_bytes, gpu_bytes;
} zs_ds_estimate_row;

/* All rows of estimate_zero{2,3}_model_states_mem_needs_all_cold, in
 * DeepSpeed's order (stage 2: 2 rows; stage 3: 6). Returns the row count,
 * or -1 with a message (stage not 2 or 3, a zero count). */
int zs_plan_deepspeed_rows(int stage, double total_params, double largest_layer_params,
                           int gpus_per_node, int nodes, double buffer_factor,
                           zs_ds_estimate_row rows[6]);

/* Korthikanti et al. (arXiv 2205.05198), activation bytes of the L layers
 * of cfg's GPT (their counting: 2-byte activations, 1-byte dropout masks):
 * per layer sbh(34 + 5as/h) without parallelism, sbh(10 + 24/t + 5as/(ht))
 * with tensor parallelism t = cfg->tp, sbh/t (34 + 5as/h) with sequence
 * parallelism too (s sequence, b micro-batch, h hidden, a heads). */
double zs_plan_megatron_activations(const zs_run_config *cfg, int sequence_parallel);
/* The largest single module of a GPT (what DeepSpeed's estimator calls the
 * largest layer): a weight with its bias, or an embedding. */
size_t zs_plan_gpt_largest_layer(const zs_model_config *c);
/* The same for the Llama family: the largest of the embedding and the
 * lm_head (V x C), q_proj, k_proj, v_proj, o_proj, gate, up and down
 * projections (an expert's too), the router and an RMSNorm. */
size_t zs_plan_llama_largest_layer(const zs_model_config *c);
/* The largest layer of c's family (GPT or Llama). */
size_t zs_plan_largest_layer(const zs_model_config *c);

#ifdef __cplusplus
}
#endif
#endif
