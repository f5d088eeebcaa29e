/* zerosim — the comm layer's internals (private to src/comm/).
 *
 * comm.c        init, communicators (create, split, free), nodes, the ledger
 * comm_fault.c  faults: the board, the collective timeout, the watchdog
 *               (of blocking calls, start-up and shutdown)
 * comm_ring.c   the ring reduce-scatter and the two-level collectives
 * comm_coll.c   the collectives (reduce-scatter, allgather, allreduce, ...)
 * comm_p2p.c    point-to-point messages
 * comm_zeropp.c ZeRO++: qwZ's int8 blocks, hpZ, qgZ's 4-bit all-to-all
 *
 * Only these files include mpi.h. The functions declared here are hidden
 * in the library (not part of its interface).
 */
#ifndef ZEROSIM_COMM_IMPL_H
#define ZEROSIM_COMM_IMPL_H

#include <mpi.h>
#include <stddef.h>

#include "zerosim/backend.h"
#include "zerosim/comm.h"
#include "zerosim/mem.h"

/* MPI_Wtime where MPI is up, else 0 (a phantom or self communicator, which
 * records 0 seconds): MPICH aborts on MPI_Wtime before MPI_Init, where Open
 * MPI answers. MPI_Initialized and MPI_Finalized may be called any time. */
static inline double zs_mpi_wtime(void)
{
    int up = 0, down = 0;
    MPI_Initialized(&up);
    if (up)
        MPI_Finalized(&down);
    return up && !down ? MPI_Wtime() : 0.0;
}

/* MPI_Testall without the statuses. MPICH defines MPI_STATUSES_IGNORE as
 * (MPI_Status *)1, which gcc 12's -Wstringop-overflow takes for an array of
 * no statuses where MPI_Testall's prototype (MPI_Status []) wants n of them;
 * the call is the standard's way to ignore them, so that warning is off for
 * this call alone. */
static inline int zs_mpi_testall(int n, MPI_Request *req, int *flag)
{
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
    return MPI_Testall(n, req, flag, MPI_STATUSES_IGNORE);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
}

/* Counters of collectives entered, one per kind of communicator: the world,
 * each group of the mesh, and the agreement (zs_comm_agree). */
#define ZS_BOARD_WORLD 0
#define ZS_BOARD_AGREE (ZS_GROUP_NGROUPS + 1)
#define ZS_BOARD_COUNTERS (ZS_GROUP_NGROUPS + 2)

struct zs_comm {
    struct zs_comm *ledger;  /* where records, sums and the phase context
                                live: itself, or the root of a split */
    zs_comm_group group;
    MPI_Comm comm;
    MPI_Comm agree_comm;     /* a duplicate, so that agreeing after a failure
                                never matches a collective of the training */
    int rank, size, local_rank;
    zs_comm_phase phase;
    int step;
    zs_comm_record *rec;
    size_t nrec, caprec;
    zs_comm_sum_row *sum;
    size_t nsum, capsum;
    MPI_Op op_sum_bf16, op_sum_f16;
    void *scratch;           /* ring reduce-scatter: two receive buffers */
    size_t scratch_bytes;
    int force_mpi_rs;        /* ZEROSIM_REDUCE_SCATTER=mpi */
    int rs_pending;          /* a non-blocking reduce-scatter is in flight */
    int phantom;             /* a simulated rank: record every call, move
                                nothing (zs_comm_phantom) */
    /* Buffers of a backend whose memory the host cannot touch (CUDA): MPI
     * never sees a device pointer. Either the backend's device collectives
     * (NCCL, when ZEROSIM_NCCL=1) or a copy to host buffers, the host
     * algorithm, and a copy back. Host staging buffers grow as needed and
     * are host memory, outside the accounting of device memory. */
    zs_backend_t be;
    /* Faults (see "Faults" below): this communicator's counter on the
     * board, the world rank of each of its ranks (NULL: it is the world),
     * and the collectives entered on it. The world's own fields: the
     * deadline of a collective, collectives entered on any communicator,
     * the test hook's stall point, and the board's window. */
    int counter;
    int *world_of;
    /* Nodes: the node of each of this communicator's ranks (NULL: all on
     * one node), from the world's map (node_world, [world size]: MPI's
     * shared-memory nodes, or --ranks-per-node) through world_of. */
    int *node_of;
    int *node_world;         /* the world's only */
    /* Two-level collectives (zs_comm_set_hierarchical): M nodes of K
     * consecutive ranks; the node's ranks (hier_node, K) and the ranks of
     * this local index on every node (hier_cross, M); NULL for a phantom,
     * or where one level is trivial (K or M is 1: the flat ring moves the
     * same bytes). The reduce-scatter's temporary (and its ring scratch
     * where the registered one is too small) are counted in comm_buffers
     * of `mem` for the call (hier_use, hier_scr: set by
     * zs_comm_hier_counted); without `mem`, or staged (the host algorithm
     * over host copies), a host temporary outside the accounting like the
     * staging buffers (hier_tmp). */
    int hier, hier_k, hier_m;
    struct zs_comm *hier_node, *hier_cross;
    void *hier_tmp;
    size_t hier_tmp_cap;
    void *hier_use, *hier_scr;
    int hier_in;             /* inside zs_comm_hier_counted */
    int qwz;                 /* ZeRO++ qwZ: forward allgathers in int8 blocks */
    zs_mem_t mem;            /* qwZ's encoded parts are counted here (NULL: not) */
    /* ZeRO++ hpZ: the secondary group, K consecutive ranks inside a node
     * (zs_comm_set_hpz); NULL: off */
    struct zs_comm *hpz;
    /* ZeRO++ qgZ: the reduce-scatter as a two-level all-to-all of 4-bit
     * blocks: the node's K ranks (qg_node), then the M ranks of this local
     * index (qg_cross), both made even where one has a single rank */
    int qgz, qg_k, qg_m;
    struct zs_comm *qg_node, *qg_cross;
    long long seq, agree_seq;
    double timeout_s;
    long long ncoll;
    int stall_rank, stall_step;
    long long stall_coll;
    MPI_Comm node;
    MPI_Win board_win;
    int staged;              /* be is set and not host-accessible */
    int use_coll;            /* staged, and the backend's collectives in use */
    void *h_send, *h_recv, *h_scratch;
    size_t h_send_cap, h_recv_cap, h_scratch_cap;
};

typedef struct {   /* a pending non-blocking call */
    MPI_Request req;
    zs_comm_record r;
    long long seq;           /* zs_comm_enter's count */
    double t0;
    void *dev;               /* staged: the device buffer to fill on wait */
    void *host;              /* its host copy, and its bytes */
    size_t host_bytes;
    /* qwZ: the parts in int8 blocks (qbuf), to dequantize on wait into dst
     * (n ranks' counts and displacements, elements of type qt) */
    void *qbuf, *qdst;
    zs_mem_t qmem;           /* qbuf counted in it (comm_buffers, qbytes), or NULL */
    size_t qbytes;
    int *qcounts, *qdispls, *ecounts, *edispls;
    zs_comm_type qt;
    struct zs_ring *ring;    /* a reduce-scatter's ring, or NULL */
    const char *what;        /* the collective, for the timeout's line */
    double t1;               /* when it was seen complete; 0: not yet */
    int to_dev;              /* staged: copy host to dev on wait */
    int p2p;                 /* a point-to-point send (zs_comm_isend) */
    int norec;               /* recorded by the calls it made (qgZ) */
} zs_comm_pending;

/* Elements per ring message: a received piece is summed while it is still in
 * cache (bench/bench_zero.sh: 128Ki fp32 elements did as well as whole
 * chunks at 2 ranks and better than 8Ki). */
#define ZS_RING_SEGMENT ((size_t)131072)
/* Segments of a step in flight at once in each direction. One at a time,
 * the link waited a round trip per segment (Open MPI's rendezvous for each
 * message, then the sum) and a 50 Mbit/s TCP link between emulated nodes
 * carried 3.3-3.9 MB/s of a ring step's 1.67 MB where four in flight carry
 * 5.9 (docs/cluster.md); through shared memory the window changes nothing
 * measurable. */
#define ZS_RING_WINDOW 4

/* Ring reduce-scatter: at step s, rank r passes the partial sum of chunk
 * (r-s-1) mod N to rank r+1 and adds its own part of chunk (r-s-2) mod N to
 * what it receives from rank r-1; after N-1 steps it holds chunk r. The
 * partial sum of chunk j starts at rank j+1 and travels the ring in order.
 * Each step goes in segments, so that a received piece is summed while it
 * is still in cache, up to ZS_RING_WINDOW of them posted at once; the
 * neighbours' segment counts match in each direction, and MPI matches a
 * pair's messages of one tag in the order they were posted. A step starts
 * when the previous one has ended, all its sends included: its receive
 * buffer is the one the step before last sent from.
 *
 * The ring is a state machine: zs_ring_start posts the first segments'
 * messages, zs_ring_advance moves it on as far as the arrived messages
 * allow. The blocking call drives it in a loop; the engine drives a
 * bucket's reduction between the kernels of the backward (overlap_comm).
 * The sums are the same either way: each element's additions follow the
 * ring's order, whenever they happen. */
typedef struct zs_ring {
    int N, r;
    zs_comm_type t;
    size_t es;
    const char *send;
    char *recv, *buf[2];
    size_t *displ, *count; /* N offsets and N counts */
    int s;                 /* ring step, 0 .. N-2 */
    size_t gp, gs, ng;     /* the step's next segment to post, to sum; its segments */
    size_t ns, nr;         /* elements the step sends and receives */
    const char *out, *own;
    char *in;
    MPI_Request rq[2 * ZS_RING_WINDOW]; /* segment g's pair at 2 * (g % window) */
    int done;
} zs_ring;

#pragma GCC visibility push(hidden)

/* comm.c */
MPI_Datatype zs_mpi_type(zs_comm_type t);
void zs_sum_bf16(void *in, void *inout, int *len, MPI_Datatype *dt);
void zs_sum_f16(void *in, void *inout, int *len, MPI_Datatype *dt);
MPI_Op zs_sum_op(zs_comm_t c, zs_comm_type t);
int zs_mpi_fail(int rc, const char *what);
void zs_comm_record_add(zs_comm_t c, const zs_comm_record *r);
zs_comm_record zs_comm_rec(zs_comm_t c, zs_comm_op op, int layer, size_t elems, zs_comm_type t);
int zs_comm_grow(void **buf, size_t *cap, size_t bytes);
int zs_comm_coll_type(zs_comm_type t);

/* comm_fault.c */
void zs_board_open(zs_comm_t w);
void zs_board_close(zs_comm_t w);
void zs_comm_board_set_where(int step, int phase);
void zs_comm_stall_parse(zs_comm_t w);
long long zs_comm_enter(zs_comm_t c);
int zs_comm_finish(zs_comm_t c, int n, MPI_Request *req, long long seq, const char *what);
/* A wait's deadline that does not count the time this process was stopped. */
typedef struct {
    double start, last; /* MPI_Wtime: the wait's start (moved by stops), the last reading */
    double limit_s;
} zs_deadline;
void zs_deadline_start(zs_deadline *d, double limit_s);
int zs_deadline_passed(zs_deadline *d);
void zs_comm_timed_out(zs_comm_t c, int counter, const char *what, long long my_seq)
    __attribute__((noreturn));
int zs_comm_watchdog_running(void);
void zs_guard_begin(zs_comm_t c, long long seq, const char *what);
void zs_guard_end(void);
/* Start-up and shutdown under the watchdog (zs_comm_init, zs_comm_finalize):
 * past the deadline the rank prints one line naming the ranks of its node
 * that are stopped or gone, and exits. */
double zs_comm_startup_timeout(void);
void zs_comm_startup_begin(void);
void zs_comm_startup_mpi(int rank);
void zs_comm_edge_end(void);
void zs_comm_shutdown_begin(zs_comm_t w);

/* comm_ring.c */
void zs_comm_hier_free(zs_comm_t c);
int zs_ring_start(zs_comm_t c, const void *send, void *recv, const int *counts, zs_comm_type t,
                  void *scratch, zs_ring **out);
int zs_ring_advance(zs_comm_t c, zs_ring *R);
int zs_ring_finish(zs_comm_t c, zs_ring *R, long long seq);
void zs_ring_free(zs_ring *R);
int zs_comm_ring_fits(zs_comm_t c, const int *counts, zs_comm_type t, const void *scratch,
                      size_t scratch_bytes);
int zs_comm_reduce_scatter_run(zs_comm_t c, const void *send, void *recv, const int *counts,
                               zs_comm_type t, size_t total);
int zs_comm_hier_allgather_dt(zs_comm_t c, void *buf, const int *counts, const int *displs,
                              MPI_Datatype dt);
int zs_comm_hier_allgather(zs_comm_t c, void *buf, const int *counts, const int *displs,
                           zs_comm_type t);

/* comm_coll.c */
size_t zs_comm_total(zs_comm_t c, const int *counts);

/* comm_zeropp.c */
void zs_comm_zpp_free(zs_comm_t c);
void zs_q8_decode(const unsigned char *in, size_t n, zs_comm_type t, void *x);
int zs_comm_iallgather_q8(zs_comm_t c, void *buf, const int *counts, const int *displs,
                          zs_comm_type t, int layer, zs_comm_pending *p, void **request);
void zs_comm_qbuf_free(zs_comm_pending *p);
int zs_comm_qgz(zs_comm_t c, const void *send, void *recv, const int *counts, zs_comm_type t,
                int layer);

#pragma GCC visibility pop

#endif
