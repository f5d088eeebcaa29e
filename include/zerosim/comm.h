/* zerosim — communication: the only layer that talks to MPI.
 *
 * Collectives over a communicator, each call recorded once in the comm
 * ledger (op, phase, layer or bucket, elements, element size, bytes,
 * seconds). bf16 and fp16 sums use MPI operations of our own (each pairwise
 * sum computed in fp32 and rounded once), so gradients travel in the
 * precision they are stored in.
 */
#ifndef ZEROSIM_COMM_H
#define ZEROSIM_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "zerosim/backend.h"
#include "zerosim/mem.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zs_comm *zs_comm_t;

typedef enum {
    ZS_CT_F32 = 0, ZS_CT_BF16, ZS_CT_F16, ZS_CT_I64, ZS_CT_F64, ZS_CT_U64, ZS_CT_INT,
    ZS_CT_NTYPES
} zs_comm_type;

typedef enum {
    ZS_PHASE_SETUP = 0, ZS_PHASE_FORWARD, ZS_PHASE_BACKWARD, ZS_PHASE_STEP,
    ZS_PHASE_REPORT,           /* gathering results for the report, not training */
    ZS_PHASE_NPHASES
} zs_comm_phase;

typedef enum {
    ZS_OP_REDUCE_SCATTER = 0,  /* gradients */
    ZS_OP_ALLGATHER,           /* parameters (or stage 0's gradients) */
    ZS_OP_ALLREDUCE,
    ZS_OP_SCALARS,             /* per-rank scalars: norm partials, losses, flags */
    ZS_OP_GATHER,              /* to rank 0, for the report */
    ZS_OP_ALLTOALL,            /* compressed gradients */
    ZS_OP_D2H,                 /* offload: device to host copies */
    ZS_OP_H2D,                 /* offload: host to device copies */
    ZS_OP_NVME_READ,           /* offload to nvme: file reads */
    ZS_OP_NVME_WRITE,          /* offload to nvme: file writes */
    ZS_OP_SEND,                /* pipeline: point-to-point sends (activations,
                                  their gradients, the tied embedding's) */
    ZS_OP_RECV,                /* pipeline: the matching receives (their
                                  seconds: the time spent waiting) */
    ZS_OP_NOPS
} zs_comm_op;

/* The parallel axis a communicator spans (Megatron-LM's names): data,
 * tensor, pipeline, expert. The world communicator is the dp group until a
 * mesh splits it. */
typedef enum {
    ZS_GROUP_DP = 0, ZS_GROUP_TP, ZS_GROUP_PP, ZS_GROUP_EP,
    ZS_GROUP_EDP,        /* expert-data-parallel: the experts' reduction */
    ZS_GROUP_CP,         /* context-parallel: the ring attention's messages */
    ZS_GROUP_NGROUPS
} zs_comm_group;

const char *zs_comm_op_name(zs_comm_op op);
/* Seconds on a monotonic clock (CLOCK_MONOTONIC), the one the ledger's start
 * times and the engine's trace use. */
double zs_clock(void);
const char *zs_comm_group_name(zs_comm_group g);
const char *zs_comm_phase_name(zs_comm_phase p);
size_t zs_comm_type_size(zs_comm_type t);

/* One record per collective call. */
typedef struct {
    zs_comm_op op;
    zs_comm_phase phase;
    zs_comm_group group; /* the communicator's axis */
    int layer;           /* unit or bucket index, -1 when none */
    int step;            /* the training step, -1 outside steps */
    size_t elems;        /* elements of the full (gathered / unreduced) buffer */
    size_t elem_size;
    double wire_bytes;   /* this rank's traffic: (N-1)/N of the buffer for
                            reduce-scatter and allgather (the ring volume),
                            twice that for allreduce, what it sends to others
                            for all-to-all */
    /* of which crosses a node boundary: for the ring collectives
     * (everything but all-to-all and transfers) all of wire_bytes when the
     * next rank of the ring (rank + 1 mod N, the one this rank sends to) is
     * on another node, else 0; for all-to-all the bytes sent to ranks on
     * other nodes; 0 for transfers */
    double inter_bytes;
    double inter_api_bytes;  /* the same as full-buffer bytes (elems x size
                                when the ring crosses, all-to-all: inter) */
    double seconds;
    double start;        /* when it began, on zs_clock()'s clock */
} zs_comm_record;

/* Initialise MPI (once per process) and return the world communicator.
 * MPI_Init and the set-up collectives here have a deadline: the start-up
 * timeout (zs_comm_set_startup_timeout, default 600 s; at least 10 s),
 * which is also the world's collective timeout until zs_comm_set_timeout
 * (without the 10 s floor). Past it, a
 * watchdog thread prints "zerosim: rank R: stopped during start-up: ..."
 * naming the ranks of this node whose process is stopped or gone, and ends
 * the process (mpirun then stops the others). */
int zs_comm_init(int *argc, char ***argv, zs_comm_t *world);
/* Set before zs_comm_init (from the command line: MPI is not yet there to
 * read a configuration); seconds > 0, others ignored. */
void zs_comm_set_startup_timeout(double seconds);
/* The world size the launcher gave this process, read from its environment
 * before (or without) MPI_Init: Open MPI's OMPI_COMM_WORLD_SIZE, or PMI's
 * PMI_SIZE (MPICH's mpiexec, hydra); 0 when neither is set (not started by
 * mpiexec). */
int zs_comm_launcher_size(void);
/* A communicator of one rank that never calls MPI (library use, tests). */
zs_comm_t zs_comm_self(void);
/* A simulated rank `rank` of `size` for phantom runs: every call is
 * recorded in the ledger exactly as a real one would be (same op, phase,
 * bytes; 0 seconds) and nothing is sent or received; data buffers are not
 * touched, except that small host gathers (zs_comm_allgather_small) return
 * zeros for the other ranks. No MPI. Release with zs_comm_finalize. NULL on
 * bad arguments or no memory. */
zs_comm_t zs_comm_phantom(int size, int rank);
int zs_comm_is_phantom(zs_comm_t c);
/* Finalise MPI (and free the communicator). A real world's shutdown (the
 * board's MPI_Win_free, MPI_Finalize) has the collective timeout (at least
 * 10 s) for a deadline: past it the rank prints "zerosim: rank R: stopped at
 * shutdown: ..." naming the ranks of its node that are stopped or gone,
 * and exits with status 1. */
void zs_comm_finalize(zs_comm_t world);
/* Terminate every rank of the job with this exit code, after one line on
 * stderr: "zerosim: rank R: stopped at step S (phase): " and the last error
 * (zs_error_msg). */
void zs_comm_abort(zs_comm_t c, int code);
/* The same with `why` for the error: print the line, leave `why` where the
 * other ranks of this node find it for their own line, abort the job. */
void zs_comm_stop(zs_comm_t c, const char *why) __attribute__((noreturn));
/* Faults. Every wait on other ranks gives up after `seconds` (default 600):
 * the rank prints one line naming the step and the ranks that did not
 * arrive, and aborts the job. A rank stopped by mpirun's SIGTERM (another
 * rank was lost) prints one line naming the lost rank and the step. The set
 * applies to c's whole tree (the world and its splits). */
void zs_comm_set_timeout(zs_comm_t c, double seconds);
double zs_comm_timeout(zs_comm_t c);

/* A sub-communicator of c (MPI_Comm_split with color and key) spanning the
 * axis `group`, in which this rank is expected to be `rank` of `size`
 * (a mesh knows both; a mismatch is an error). A phantom or self c gives a
 * phantom (or self) communicator of that size and rank without MPI.
 * Collective over c for real MPI. Its calls are recorded in c's ledger
 * (the records and sums of the root communicator), tagged with `group`;
 * its wire bytes are computed over its own size. Free with zs_comm_free
 * before c is finalised. */
int zs_comm_split(zs_comm_t c, int color, int key, int size, int rank, zs_comm_group group,
                  zs_comm_t *out);
void zs_comm_free(zs_comm_t sub);
zs_comm_group zs_comm_get_group(zs_comm_t c);
/* Retag a communicator (the world is dp by default). */
void zs_comm_set_group(zs_comm_t c, zs_comm_group g);

int zs_comm_rank(zs_comm_t c);
int zs_comm_size(zs_comm_t c);
/* Rank on this node (for picking a device); 0 when unknown. */
int zs_comm_local_rank(zs_comm_t c);

/* Nodes. The world knows the node of each rank: by default the nodes MPI
 * reports (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED, numbered in the
 * order of their lowest rank; a phantom or self world is one node);
 * zs_comm_set_ranks_per_node(world, K) declares ranks [jK, (j+1)K) node j
 * instead (K must divide the size; 0 goes back to MPI's). Call it before
 * splitting: a split takes its members' nodes from the world's map when it
 * is made (real MPI: from its group; phantom: zs_comm_set_world_ranks).
 * Every ledger record splits its bytes into intra- and inter-node
 * (zs_comm_record.inter_bytes). */
int zs_comm_set_ranks_per_node(zs_comm_t world, int k);
/* K when the group's members are nodes of K consecutive members each (K
 * dividing its size), else 0, from the node map: the shape two-level
 * collectives need (zs_mesh_dp_node_blocks computes it from the rank
 * equation; a run checks that the two agree). */
int zs_comm_node_blocks(zs_comm_t c);
/* The world ranks of a split's members, in its rank order (a phantom split
 * cannot ask MPI); recomputes its nodes. No effect on a world. */
int zs_comm_set_world_ranks(zs_comm_t sub, const int *world_ranks);
/* The node of rank `rank` of c (0 when nodes are unknown). */
int zs_comm_node_of(zs_comm_t c, int rank);
/* 1 when this rank's ring neighbour (rank + 1 mod size) is on another node. */
int zs_comm_ring_crosses(zs_comm_t c);
/* Two-level reduce-scatter and allgather on c (--hierarchical): c's ranks
 * must make M nodes of K consecutive ranks each. Reduce-scatter: inside the
 * node (a ring per node block of K chunks, the node's sum of the chunks of
 * its local index on every node), then across the M nodes (a ring among the
 * ranks of one local index). Allgather: across, then inside. Per call and
 * rank, of a full buffer of S bytes: (K-1)/K S inside the node and
 * (M-1)/N S across (the flat ring's last rank of each node sends (N-1)/N S
 * across); (N-1)/N S in all, as the flat ring. The allgather is the same
 * bytes as the flat one; the reduce-scatter sums in another order (the same
 * bytes where sums are exact: deterministic mode). The allgather completes
 * on return (no prefetch overlap). Where K or M is 1 the flat algorithms
 * run (one level is the whole). Collective over c (it splits c); on = 0
 * goes back to flat. A phantom c only records. */
int zs_comm_set_hierarchical(zs_comm_t c, int on);
int zs_comm_hierarchical(zs_comm_t c);
/* ZeRO++ qwZ (zero_quantized_weights): allgathers of fp32/bf16/fp16 made
 * in the forward phase send each rank's part in int8 blocks of 256 with an
 * fp32 scale each (max |x| / 127), zs_comm_q8_bytes(n) bytes for n
 * elements, and every rank decodes every part (its own too) into the
 * buffer: lossy, the same parameters on every rank. Recorded as an
 * allgather of the encoded bytes (elem_size 1). Host buffers only. */
int zs_comm_set_quantized_weights(zs_comm_t c, int on);
size_t zs_comm_q8_bytes(size_t n);
/* ZeRO++ hpZ (zero_hpz_partition_size K > 1): c's secondary group, the K
 * consecutive ranks of c that hold this rank (they must be on one node:
 * a one-line error otherwise); K <= 1 removes it. Collective over c (it
 * splits c). zs_comm_hpz: that group, or NULL. Its calls are recorded in
 * c's ledger, in c's group, with the secondary group's ring volume. */
int zs_comm_set_hpz(zs_comm_t c, int K);
zs_comm_t zs_comm_hpz(zs_comm_t c);
/* ZeRO++ qgZ (zero_quantized_gradients): every reduce-scatter of
 * fp32/bf16/fp16 on c becomes two all-to-alls of 4-bit blocks of 256 with
 * an fp32 scale each (max |x| / 7; zs_comm_q4_bytes(n) bytes for n
 * elements): inside the node (M nodes of K consecutive ranks; local rank i
 * gets the parts of ranks mK + i and sums the node's K contributions),
 * then across (the M ranks of local index i; each sums the M node sums of
 * its own part). Lossy. Recorded as two all-to-alls of the encoded bytes
 * (the second one's bytes cross nodes, the first one's do not), no
 * reduce-scatter. Completes on return. Host buffers only. Collective over c. */
int zs_comm_set_quantized_gradients(zs_comm_t c, int on);
/* qgZ on c: the ranks per node K of its two levels; 0 when off. */
int zs_comm_qgz_ranks_per_node(zs_comm_t c);
size_t zs_comm_q4_bytes(size_t n);
/* qgZ's sizes for one reduce-scatter of N parts (counts[r] elements for
 * rank r) over nodes of K consecutive ranks (K divides N; M = N / K nodes):
 * the one home of these numbers, for the collective itself, the step
 * program's counter and the predictions. A column is the parts mK + i of
 * one local index i on every node m. */
typedef struct {
    size_t total;   /* elements of the buffer */
    size_t col;     /* the largest column's elements */
    size_t col4;    /* the largest column's encoded bytes */
    size_t maxc;    /* the largest part's elements */
    size_t maxq4;   /* the largest part's encoded bytes */
    size_t all4;    /* every part's encoded bytes */
    size_t tmp_peak; /* the most bytes of temporaries alive at once: the
                        fp32 copy, the node sums and the first all-to-all's
                        buffers, or the node sums, the result and the
                        second's */
} zs_qgz_sizes;
void zs_comm_qgz_sizes(const int *counts, int N, int K, zs_qgz_sizes *out);
/* What rank q sends through the two all-to-alls (bytes; *inter those
 * that cross to another node) and the elements it encodes and decodes
 * (*coded: every part encoded, its column decoded from each of the K
 * local ranks, the column's node sums encoded, its own part decoded from
 * each of the M nodes) and converts (*passes: the fp32 copy and the
 * result). */
double zs_comm_qgz_rank_bytes(const int *counts, int N, int K, int q, double *inter,
                              double *coded, double *passes);
/* The block codecs' cost, for zerosim bench: n fp32 elements of x encoded
 * in int8 blocks into enc (zs_comm_q8_bytes(n) bytes) and decoded into
 * out, then encoded in 4-bit blocks and decoded, added into out: 4n
 * elements encoded or decoded. */
void zs_comm_quant_passes(const float *x, size_t n, unsigned char *enc, float *out);

/* Ledger context for the following calls. */
void zs_comm_set_context(zs_comm_t c, zs_comm_phase phase, int step);
/* The individual records since the last clear, the first ZS_COMM_KEEP of
 * them (later calls still count in the sums below). */
#define ZS_COMM_KEEP ((size_t)1 << 16)
const zs_comm_record *zs_comm_records(zs_comm_t c, size_t *n);
void zs_comm_clear_records(zs_comm_t c);

/* Every call since the start, summed per group, op, phase and message size
 * (the full buffer's bytes): bounded memory however long the run. */
typedef struct {
    zs_comm_group group;
    zs_comm_op op;
    zs_comm_phase phase;
    size_t msg_bytes;
    double calls, bytes, wire_bytes, seconds;
    double inter_bytes, inter_api_bytes; /* of which across nodes (the records') */
} zs_comm_sum_row;
const zs_comm_sum_row *zs_comm_sums(zs_comm_t c, size_t *n);

/* The backend whose memory the buffers of reduce-scatter, allgather(v),
 * allreduce_sum and alltoallv live in (NULL or a host-accessible backend:
 * plain host memory). For a backend whose memory the host cannot touch
 * (cuda), MPI never sees a device pointer: those calls copy the buffers to
 * host staging buffers (host memory, not counted by the device accounting),
 * run the same host algorithm, and copy the result back; or, with the
 * environment variable ZEROSIM_NCCL=1 and a backend with device collectives
 * (CUDA built with NCCL; one GPU per rank), use those. Either way the ledger
 * records the same ops and bytes. Collective when ZEROSIM_NCCL=1 (the
 * NCCL id is broadcast with MPI, outside the ledger). The scalar calls
 * (allgather_small, allreduce_max_int, gather_root, send_to_root) always take
 * host buffers. Set it back to NULL before releasing the backend. */
int zs_comm_set_backend(zs_comm_t c, zs_backend_t be);
/* The accounting allocator the collectives' own temporaries are counted in
 * (category comm_buffers; a phantom run's too, without storage): qwZ's
 * encoded parts, from the start of each forward gather to its wait; the
 * two-level (hierarchical) reduce-scatter's node sums (the parts of this
 * rank's local index on every node, sized for the largest such column of
 * any local index, so that every rank holds the same) and, where the
 * registered ring scratch is smaller than 2 * max(counts) elements, a
 * scratch of that size, for the call; qgZ's fp32 copy of the buffer, node
 * sums, result and encoded all-to-all buffers, for the call (sizes in
 * src/comm/comm_zeropp.c, zs_comm_qgz). NULL (the default): host memory outside
 * the accounting. Staged (device buffers), the hierarchical
 * reduce-scatter's node sums are counted on the device and computed in a
 * host temporary outside the accounting, like the staging copies. Not
 * owned. */
void zs_comm_set_mem(zs_comm_t c, zs_mem_t mem);

/* Reduce-scatter (sum) of the range [0, total) of send, where rank r
 * receives counts[r] elements starting at sum of counts before r into recv.
 * Elements are summed in the same order for the same N and counts.
 *
 * Algorithm: a ring of MPI_Sendrecv steps (each rank sends (N-1)/N of the
 * bytes, the ring volume) on 2 ranks, or on more when a scratch buffer of
 * 2 * max(counts) elements has been registered with zs_comm_set_scratch;
 * else MPI_Reduce_scatter.
 * Open MPI 4.1's MPI_Reduce_scatter measured 0.2-0.6x the bus bandwidth of
 * MPI_Allreduce here (bench/bench_zero.sh); the ring reaches it. The
 * environment variable ZEROSIM_REDUCE_SCATTER=mpi selects MPI_Reduce_scatter. */
int zs_comm_reduce_scatter(zs_comm_t c, const void *send, void *recv, const int *counts,
                           zs_comm_type t, int layer);
/* Non-blocking reduce-scatter (the engine's overlap_comm): the same sums as
 * zs_comm_reduce_scatter. The ring is driven by zs_comm_test, which moves
 * it on as far as the arrived messages allow and returns at once, and
 * finished by zs_comm_wait; send and recv stay in use until then. Where
 * the ring does not apply (one rank, device buffers, MPI_Reduce_scatter)
 * it completes before it returns. One at a time per communicator: another
 * reduce-scatter on c before the wait is an internal error. The ledger
 * records it at the wait, its seconds from the start to the moment a test
 * or the wait saw it complete. */
int zs_comm_ireduce_scatter(zs_comm_t c, const void *send, void *recv, const int *counts,
                            zs_comm_type t, int layer, void **request);
/* Progress on a pending non-blocking call (reduce-scatter or allgather);
 * never waits. NULL: nothing. */
int zs_comm_test(zs_comm_t c, void **request);
/* All-to-all of bytes: send + sdispl[q] holds scount[q] bytes for rank q;
 * recv + rdispl[q] receives rcount[q] bytes from q. Recorded as
 * "alltoall" with the bytes sent to the other ranks. */
int zs_comm_alltoallv_bytes(zs_comm_t c, const void *send, const int *scount, const int *sdispl,
                            void *recv, const int *rcount, const int *rdispl, int layer);

/* Register scratch memory (from the accounting allocator) for the ring
 * reduce-scatter; NULL unregisters. */
void zs_comm_set_scratch(zs_comm_t c, void *buf, size_t bytes);
/* 1 when reduce-scatter uses the ring, 0 when MPI_Reduce_scatter. */
int zs_comm_uses_ring(zs_comm_t c);

/* In-place allgather: rank r's counts[r] elements already sit at
 * buf + displs[r]; afterwards every rank holds all of them. */
int zs_comm_allgatherv_inplace(zs_comm_t c, void *buf, const int *counts, const int *displs,
                               zs_comm_type t, int layer);
/* Non-blocking variant for prefetch; wait with zs_comm_wait. */
int zs_comm_iallgatherv_inplace(zs_comm_t c, void *buf, const int *counts, const int *displs,
                                zs_comm_type t, int layer, void **request);
int zs_comm_wait(zs_comm_t c, void **request);
/* In-place sum over ranks of n elements (MPI_Allreduce; for benchmarks and
 * comparisons: the engine itself reduce-scatters). */
int zs_comm_allreduce_sum(zs_comm_t c, void *buf, size_t n, zs_comm_type t, int layer);
/* Scalars: gather count values per rank, in rank order, to all ranks
 * (recorded as the op "scalars", apart from model-state traffic). */
int zs_comm_allgather_small(zs_comm_t c, const void *send, void *recv, int count, zs_comm_type t);
/* In-place elementwise maximum over ranks of n fp32 values (tensor
 * parallelism's vocab-parallel softmax), recorded as an allreduce. */
int zs_comm_allreduce_max_f32(zs_comm_t c, float *buf, size_t n, int layer);
/* 1-bit Adam's error-compensated compressed all-reduce (comm_onebit.c;
 * arXiv 2102.02888): x (n fp32, n a multiple of 8 x ranks) becomes the
 * same compressed average on every rank. Each rank compresses x +
 * worker_error (n) to signs and one scale, keeping the error; rank j
 * averages chunk j (n / ranks elements) of every rank's signs, adds
 * server_error (n / ranks) and compresses again, keeping that error; the
 * chunks' signs and scales are all-gathered. Recorded: an all-to-all and
 * an allgather of bytes, (ranks - 1) n / (8 ranks) wire bytes each, and
 * two allgathers of one fp32 scale per rank as scalars. */
int zs_comm_onebit_allreduce(zs_comm_t c, float *x, size_t n, float *worker_error,
                             float *server_error, int layer);
/* The bytes one rank sends in zs_comm_onebit_allreduce of n elements over
 * N ranks: the signs' all-to-all and allgather (wire bytes) and the
 * scales (8 N bytes gathered, scalars). */
typedef struct {
    double alltoall_bytes, allgather_bytes, scalar_bytes;
} zs_onebit_sizes;
void zs_comm_onebit_sizes(size_t n, int N, zs_onebit_sizes *s);
/* The elements an array of n takes in zs_comm_onebit_allreduce over N
 * ranks: n rounded up to a multiple of 8 N (at least 8 N). */
size_t zs_comm_onebit_padded(size_t n, int N);
/* Integer maximum over ranks (used for error and overflow flags). */
int zs_comm_allreduce_max_int(zs_comm_t c, int *v);
/* Gather count elements from every rank, in rank order, to rank 0. */
int zs_comm_gather_root(zs_comm_t c, const void *send, int count, void *recv, zs_comm_type t);
/* Record a transfer that is not a collective (offload: ZS_OP_D2H, H2D,
 * NVME_READ, NVME_WRITE) of `bytes` that just ended after `seconds`, in
 * the ledger's current phase and step; its wire bytes are its bytes. */
void zs_comm_record_transfer(zs_comm_t c, zs_comm_op op, size_t bytes, double seconds);
/* Point to point, for the report: rank `from` sends count elements to rank
 * 0 (recorded as op "gather", one record on each of the two ranks). Every
 * other rank does nothing. */
int zs_comm_send_to_root(zs_comm_t c, int from, void *buf, int count, zs_comm_type t);
/* Point to point (the pipeline's activations and gradients): send count
 * elements of buf to rank `peer` of c with `tag`, non-blocking; buf must
 * stay unchanged until zs_comm_wait(c, request) returns. Recorded as
 * "send" (wire bytes: the bytes) when it completes. */
int zs_comm_isend(zs_comm_t c, int peer, const void *buf, size_t count, zs_comm_type t, int tag,
                  int layer, void **request);
/* Receive count elements from rank `peer` of c with `tag` into buf,
 * waiting (polled, under the collective timeout); recorded as "recv" with
 * the bytes and the seconds it waited. */
int zs_comm_recv(zs_comm_t c, int peer, void *buf, size_t count, zs_comm_type t, int tag,
                 int layer);
/* A few doubles to (or from) rank `peer` of c, blocking (a chain of
 * partial sums), recorded as "scalars". */
int zs_comm_send_small(zs_comm_t c, int peer, const double *v, int n);
int zs_comm_recv_small(zs_comm_t c, int peer, double *v, int n);
/* After a local failure or success, agree whether any rank failed, waiting
 * at most timeout_s. *any = 0 when none failed, else 1 + the lowest failing
 * rank. Returns non-zero when the ranks could not agree in time (some rank
 * is stuck elsewhere: the caller should abort the job). */
int zs_comm_agree(zs_comm_t c, int failed, double timeout_s, int *any);
int zs_comm_barrier(zs_comm_t c);

#ifdef __cplusplus
}
#endif
#endif
