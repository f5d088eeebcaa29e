/* zerosim — step-time estimate: an alpha-beta model of each collective plus
 * compute at a stated FLOP rate.
 *
 * A collective on N ranks over a full buffer of S bytes, one call, takes
 *   reduce-scatter, allgather:  (N-1) α + (N-1)/N · S / β      (ring)
 *   allreduce:                 2(N-1) α + 2(N-1)/N · S / β     (ring: RS + AG)
 *   all-to-all:                 (N-1) α + (N-1)/N · S / β      (pairwise)
 * where α (seconds) and β (bytes/s per device) are those of the links inside
 * a node when all N ranks fit in one node (N <= devices per node) and those
 * between nodes otherwise: a ring that crosses nodes runs at the pace of its
 * slowest link. A collective given as (total bytes over `calls` calls) pays
 * α per step of every call and β on the total.
 *
 * Between nodes, β is per device: inter_bandwidth, each device with a link
 * of its own (the defaults: a NIC per GPU). When the calibration gives
 * inter_link_bandwidth L, the bytes/s a node's link carries for all its
 * ranks together, the link is shared instead: a collective in which s of a
 * node's ranks send across at once gets L/s per sender. The flat ring has
 * s = 1 (only the last rank of a node sends to the next node, and has the
 * link to itself); a group between nodes (link 2: qgZ's second level, one
 * group per local index, all at once) has s = the ranks of a node.
 *
 * A linear allgather (zs_steptime_coll.linear: Open MPI's MPI_Iallgatherv,
 * every rank's part sent to every other rank at once) over a shared node
 * link of L bytes/s with K ranks per node costs α + K(N-K)/N · S / L per
 * call: the link carries each of the node's K parts to the N-K ranks on
 * other nodes (S for 2 nodes of 2, where the ring's crossing rank sends
 * 3/4 S).
 *
 * Compute is flops_per_step / gemm_flops, plus optimizer_elems /
 * optimizer_elems_per_s when the optimizer's rate is given. The step's
 * small collectives (scalar_calls) cost α each. Without overlap the step
 * time is compute + communication + scalars + optimizer; with overlap it
 * is max(compute, communication) + scalars + optimizer (the optimizer step
 * follows the last reduction and the scalars). Overlap as the links allow
 * (overlap 2, stage 3's overlap_comm) hides only what can move while the
 * cores compute: when the calibration says the copies inside a node are
 * made by the ranks' own cores (intra_copies_use_cores: CPU ranks over
 * shared memory, which is what zerosim bench measures), the collectives
 * inside a node add to compute and only those across a network link hide,
 * max(compute, inter-node communication) + intra-node communication.
 *
 * The model is small on purpose: it is meant to be tuned against measured
 * runs (`zerosim bench` writes the calibration file read here).
 */
#ifndef ZEROSIM_STEPTIME_H
#define ZEROSIM_STEPTIME_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    ZS_COLL_REDUCE_SCATTER = 0,
    ZS_COLL_ALLGATHER,
    ZS_COLL_ALLREDUCE,
    ZS_COLL_ALLTOALL,
    ZS_COLL_NKINDS
} zs_coll_kind;

/* "reduce_scatter", "allgather", "allreduce", "alltoall" */
const char *zs_coll_kind_name(zs_coll_kind k);

/* One kind of collective in a step: full-buffer bytes summed over its calls
 * (for all-to-all: the bytes one rank sends times N/(N-1), so that the
 * (N-1)/N factor gives back what it sends), and the number of calls per
 * step. */
typedef struct {
    zs_coll_kind kind;
    double bytes;     /* full-buffer bytes, summed over the calls of a step */
    double calls;     /* calls per step (each pays the latency term) */
    int rings;        /* rings run one after another in each call, each
                         paying the latency term (the two-level
                         reduce-scatter's inner level: one per node block);
                         0: one */
    int ranks;        /* the group's ranks; 0: the world's N */
    int link;         /* 0: the world's link (inter-node when it spans
                         nodes), 1: inside a node, 2: between nodes */
    int senders;      /* how many of a node's ranks send across the link at
                         once; 0: by link (a ring over the world: 1, a
                         group between nodes: the ranks of a node) */
    int linear;       /* 1: every rank sends its part straight to every
                         other rank, all at once (the engine's allgather is
                         MPI_Iallgatherv, linear in Open MPI's libnbc). Over
                         a node link shared by K ranks (inter_link_bandwidth)
                         the link carries the node's parts to the other
                         nodes, K(N-K)/N of S, and the call pays one α;
                         elsewhere it is costed as the ring */
    double link_bytes; /* linear over a node link: the bytes of the busiest
                          link direction, summed over the calls, where the
                          parts are not equal (zerosim's stage 3 gathers a
                          unit's part of each rank's flat shard:
                          zs_prediction.ag_link_bytes_per_step); 0: equal
                          parts, K(N-K)/N of S */
    /* stage 3 with overlap_comm (zs_steptime_input.overlap 2): what compute
     * can hide of this collective's time. fwd_only: it runs in the forward
     * phase alone (hpZ's forward gathers: the backward's stay inside the
     * node), so only the forward's compute hides it; exposed_frac: the part
     * no compute hides (the reduce of the step's last bucket, which starts
     * when the backward has ended) */
    int fwd_only;
    double exposed_frac;
} zs_steptime_coll;

/* The kernels of a GPT that are not GEMMs, by how their time scales; a
 * CPU spends about half of a small GPT's step in them. */
typedef enum {
    ZS_WORK_ATTENTION = 0,  /* causal attention, forward + backward: B T^2 C per layer */
    ZS_WORK_GELU,           /* GELU forward + backward: elements, B T 4C per layer */
    ZS_WORK_BLOCK,          /* the rest of a block (layernorms, biases, residuals,
                               zeroing), forward + backward: B T C per layer */
    ZS_WORK_HEAD,           /* softmax cross-entropy, forward + backward: B T V */
    ZS_WORK_GRADS,          /* zeroing and accumulating gradients: parameters per
                               micro-batch */
    ZS_WORK_PASS,           /* the engine's other passes over parameter-sized
                               fp32 arrays (zero, copy, add, convert):
                               elements */
    ZS_WORK_QUANT,          /* ZeRO++ block quantization (qwZ's int8, qgZ's
                               4-bit): elements encoded or decoded */
    ZS_WORK_NKINDS
} zs_work_kind;

/* "attention", "gelu", "block_elementwise", "head", "grads", "memory_pass",
 * "quantize" */
const char *zs_work_kind_name(zs_work_kind k);

/* Machine constants: what `zerosim bench` measures. */
typedef struct {
    double gemm_flops;        /* FLOP/s per device */
    double intra_latency_s;   /* α inside a node */
    double intra_bandwidth;   /* β inside a node, bytes/s per device */
    double inter_latency_s;   /* α between nodes */
    double inter_bandwidth;   /* β between nodes, bytes/s per device */
    double inter_link_bandwidth; /* bytes/s of one node's link, all its ranks
                                    together (0: not given, each device has
                                    inter_bandwidth of its own) */
    /* Optional refinements (0 = not given). zerosim bench measures each
     * collective on its own: inside one node these replace α and β for
     * that kind. The optimizer's rate (elements per second of AdamW on one
     * device) adds optimizer_elems / rate to the step. */
    double coll_latency_s[ZS_COLL_NKINDS];
    double coll_bandwidth[ZS_COLL_NKINDS];
    int coll_fits_span_nodes; /* 1: those fits were made over ranks on more
                                 than one node (a bench file with "nodes" >
                                 1): they are not a node's inside, so a group
                                 inside a node uses the intra-node α and β */
    double optimizer_elems_per_s;
    int intra_copies_use_cores; /* 1: a collective inside a node is memory
                                   copies made by the ranks' own cores (CPU
                                   ranks over shared memory, as zerosim bench
                                   measures them), so it cannot run behind
                                   their compute; 0: it can (a GPU's copy
                                   engines, NVLink) */
    /* Seconds per unit of each kind of non-GEMM work (0 = not given). When
     * every one is given and the input counts the work, compute is
     * gemm_flops_per_step at the GEMM rate plus the work at these rates. */
    double work_s[ZS_WORK_NKINDS];
    /* Offload (0 = not given): bytes/s of device-host copies (a PCIe-like
     * link) and of the nvme files (read and write), and the host
     * optimizer's elements per second. */
    double host_bandwidth, nvme_bandwidth, host_optimizer_elems_per_s;
} zs_steptime_calib;

typedef struct {
    int world;                      /* N, data-parallel ranks */
    int devices_per_node;
    const zs_steptime_coll *colls;  /* the collectives of one step */
    int ncolls;
    double flops_per_step;          /* per device: every FLOP at the GEMM rate */
    /* the finer model (used when the calibration gives work_s): the GEMMs'
     * FLOPs alone, and the other work per device per step */
    double gemm_flops_per_step;
    double work[ZS_WORK_NKINDS];
    double optimizer_elems;         /* optimizer elements per device per step */
    double scalar_calls;            /* small collectives over the world per step
                                       (the loss, the overflow flag, the
                                       gradient norm): one α of the world's
                                       link each, after the backward, never
                                       hidden */
    int overlap;                    /* 0: communication after compute; 1: all
                                       of it hides behind compute (the best
                                       case); 2: what the links and the
                                       phases allow hides (see
                                       intra_copies_use_cores and
                                       zs_steptime_coll.fwd_only) */
    double fwd_compute_frac;        /* the forward's share of compute (1/3,
                                       1/4 with recomputation); 0: 1/3 */
    /* offload: bytes per device per step between device and host, and to
     * and from files; the host optimizer's elements (the device's
     * optimizer_elems are then 0). Serial with the rest of the step. */
    double host_bytes, nvme_bytes, host_optimizer_elems;
    /* context parallelism's ring (point-to-point): per device per step the
     * messages a rank sends (ring_sends, each ring_bytes / ring_sends, all
     * ranks of the group sending at once) over ring_link (1: inside a
     * node; 2: between nodes). Each costs α + bytes/β of its link; it joins
     * comm_s and is hidden only by overlap 1: zerosim's ring waits for
     * each message before the block that reads it (src/model/ring_attention.c),
     * where Megatron-LM's (Transformer Engine's) sends the next block while
     * it computes this one. */
    double ring_bytes, ring_sends;
    int ring_link;
    zs_steptime_calib cal;
} zs_steptime_input;

typedef struct {
    double compute_s;               /* the FLOPs at the GEMM rate (and the
                                       non-GEMM work, when modelled) */
    double work_s[ZS_WORK_NKINDS];  /* of which the non-GEMM work */
    int kernels_modelled;           /* 1: the finer compute model was used */
    double optimizer_s;             /* 0 unless optimizer_elems_per_s is given */
    double offload_s;               /* the transfers at host_bandwidth and
                                       nvme_bandwidth and the host optimizer
                                       (each 0 unless its rate is given) */
    double comm_s;                  /* sum over the collectives */
    double comm_inter_s;            /* of which over links between nodes */
    double comm_hidden_s;           /* of comm_s, what runs behind compute */
    double comm_exposed_s;          /* of comm_s, the rest: all of it without
                                       overlap; with stage 3's, at least the
                                       intra-node part when the cores make
                                       those copies and the last bucket's
                                       reduce */
    double scalars_s;               /* the small collectives (scalar_calls α) */
    int overlapped;                 /* 1: compute and communication overlapped */
    double coll_s[ZS_COLL_NKINDS];  /* per kind */
    double ring_s;                  /* context parallelism's ring (in comm_s) */
    double total_s;
    double alpha_s, beta;           /* the link constants used (beta: per
                                       device, as inter_bandwidth) */
    int inter_node;                 /* 1 when the inter-node link was used */
} zs_steptime_result;

/* A stated default machine: 312e12 FLOP/s (A100 dense bf16), 8 devices per
 * node, 5 us and 150e9 B/s inside a node, 10 us and 25e9 B/s between nodes,
 * 25e9 B/s between device and host (PCIe 4.0 x16), 3e9 B/s to and from an
 * NVMe drive; no host optimizer rate (its time is left out unless given). */
void zs_steptime_defaults(zs_steptime_calib *c);

/* Estimate one step. Returns 0, or non-zero with a message (N < 1, a rate
 * that is not positive). */
int zs_steptime_estimate(const zs_steptime_input *in, zs_steptime_result *out);

/* Read a calibration JSON object with any of the keys "gemm_flops",
 * "intra_latency_s", "intra_bandwidth", "inter_latency_s",
 * "inter_bandwidth", "inter_link_bandwidth", "optimizer_elems_per_s", "host_bandwidth",
 * "nvme_bandwidth", "host_optimizer_elems_per_s" (numbers) and
 * "reduce_scatter", "allgather" (objects with "latency_s" and "bandwidth"),
 * "work_s" (an object with "attention", "gelu", "block_elementwise", "head",
 * "grads", "memory_pass": all of them when it is there);
 * keys that are missing keep the value in *c, other keys are ignored. A file
 * of zerosim bench with more than one node ("nodes") but no
 * "inter_link_bandwidth" is refused (an older bench: measure again).
 * Returns 0 or non-zero with a message naming the file and the key. */
int zs_steptime_load_calibration(const char *path, zs_steptime_calib *c);

#ifdef __cplusplus
}
#endif
#endif
