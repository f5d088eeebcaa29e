/* zerosim — communication over MPI (the only file that includes mpi.h). */
#include "zerosim/comm.h"
#include "zerosim/backend.h"
#include "zerosim/error.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    int phantom;             /* a simulated rank: record every call, move
                                nothing (zs_comm_phantom) */
    /* Buffers of a backend whose memory the host cannot touch (CUDA): MPI
     * never sees a device pointer. Either the backend's device collectives
     * (NCCL, when ZEROSIM_NCCL=1) or a copy to host buffers, the host
     * algorithm, and a copy back. Host staging buffers grow as needed and
     * are host memory, outside the accounting of device memory. */
    zs_backend_t be;
    int staged;              /* be is set and not host-accessible */
    int use_coll;            /* staged, and the backend's collectives in use */
    void *h_send, *h_recv, *h_scratch;
    size_t h_send_cap, h_recv_cap, h_scratch_cap;
};

typedef struct {   /* a pending non-blocking call */
    MPI_Request req;
    zs_comm_record r;
    double t0;
    void *dev;               /* staged: the device buffer to fill on wait */
    void *host;              /* its host copy, and its bytes */
    size_t host_bytes;
} zs_comm_pending;

static const char *const zs_op_names[ZS_OP_NOPS] = {
    [ZS_OP_REDUCE_SCATTER] = "reduce_scatter",
    [ZS_OP_ALLGATHER] = "allgather",
    [ZS_OP_ALLREDUCE] = "allreduce",
    [ZS_OP_SCALARS] = "scalars",
    [ZS_OP_GATHER] = "gather",
    [ZS_OP_ALLTOALL] = "alltoall",
};
static const char *const zs_phase_names[ZS_PHASE_NPHASES] = {
    [ZS_PHASE_SETUP] = "setup",
    [ZS_PHASE_FORWARD] = "forward",
    [ZS_PHASE_BACKWARD] = "backward",
    [ZS_PHASE_STEP] = "step",
    [ZS_PHASE_REPORT] = "report",
};

static const char *const zs_group_names[ZS_GROUP_NGROUPS] = {
    [ZS_GROUP_DP] = "dp",
    [ZS_GROUP_TP] = "tp",
    [ZS_GROUP_PP] = "pp",
    [ZS_GROUP_EP] = "ep",
};

const char *zs_comm_group_name(zs_comm_group g)
{
    return g < ZS_GROUP_NGROUPS ? zs_group_names[g] : "?";
}

const char *zs_comm_op_name(zs_comm_op op) { return op < ZS_OP_NOPS ? zs_op_names[op] : "?"; }
const char *zs_comm_phase_name(zs_comm_phase p)
{
    return p < ZS_PHASE_NPHASES ? zs_phase_names[p] : "?";
}

size_t zs_comm_type_size(zs_comm_type t)
{
    static const size_t sz[ZS_CT_NTYPES] = {4, 2, 2, 8, 8, 8, sizeof(int)};
    return t < ZS_CT_NTYPES ? sz[t] : 0;
}

static MPI_Datatype zs_mpi_type(zs_comm_type t)
{
    switch (t) {
    case ZS_CT_F32: return MPI_FLOAT;
    case ZS_CT_BF16:
    case ZS_CT_F16: return MPI_UINT16_T;
    case ZS_CT_I64: return MPI_INT64_T;
    case ZS_CT_F64: return MPI_DOUBLE;
    case ZS_CT_U64: return MPI_UINT64_T;
    default: return MPI_INT;
    }
}

/* Sums of 16-bit floats: each pairwise sum in fp32, rounded once. */
static void zs_sum_bf16(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = zs_f32_to_bf16(zs_bf16_to_f32(a[i]) + zs_bf16_to_f32(b[i]));
}

static void zs_sum_f16(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = zs_f32_to_f16(zs_f16_to_f32(a[i]) + zs_f16_to_f32(b[i]));
}

static MPI_Op zs_sum_op(zs_comm_t c, zs_comm_type t)
{
    if (t == ZS_CT_BF16)
        return c->op_sum_bf16;
    if (t == ZS_CT_F16)
        return c->op_sum_f16;
    return MPI_SUM;
}

static int zs_mpi_fail(int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    ZS_FAIL("MPI error in %s: %s", what, msg);
}

int zs_comm_init(int *argc, char ***argv, zs_comm_t *world)
{
    *world = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init(argc, argv) != MPI_SUCCESS)
        ZS_FAIL("MPI_Init failed: check the Open MPI installation (package openmpi-bin)");
    zs_comm_t c = calloc(1, sizeof *c);
    if (!c)
        ZS_FAIL("out of host memory creating the communicator");
    c->ledger = c;
    c->comm = MPI_COMM_WORLD;
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_dup(c->comm, &c->agree_comm);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    MPI_Comm node;
    if (MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_rank(node, &c->local_rank);
        MPI_Comm_free(&node);
    }
    const char *rs = getenv("ZEROSIM_REDUCE_SCATTER");
    c->force_mpi_rs = rs && strcmp(rs, "mpi") == 0;
    MPI_Op_create(zs_sum_bf16, 1, &c->op_sum_bf16);
    MPI_Op_create(zs_sum_f16, 1, &c->op_sum_f16);
    c->step = -1;
    *world = c;
    return 0;
}

void zs_comm_finalize(zs_comm_t c)
{
    if (c) {
        free(c->h_send);
        free(c->h_recv);
        free(c->h_scratch);
    }
    if (c && c->comm == MPI_COMM_NULL) { /* a self communicator: MPI was never used */
        free(c->rec);
        free(c->sum);
        free(c);
        return;
    }
    if (c) {
        MPI_Comm_free(&c->agree_comm);
        MPI_Op_free(&c->op_sum_bf16);
        MPI_Op_free(&c->op_sum_f16);
        free(c->rec);
        free(c->sum);
        free(c);
    }
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin)
        MPI_Finalize();
}

void zs_comm_abort(zs_comm_t c, int code) { MPI_Abort(c ? c->comm : MPI_COMM_WORLD, code); }

zs_comm_t zs_comm_self(void)
{
    zs_comm_t c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->ledger = c;
    c->comm = MPI_COMM_NULL;
    c->size = 1;
    c->step = -1;
    return c;
}

zs_comm_t zs_comm_phantom(int size, int rank)
{
    if (size < 1 || rank < 0 || rank >= size)
        return NULL;
    zs_comm_t c = zs_comm_self();
    if (!c)
        return NULL;
    c->size = size;
    c->rank = rank;
    c->phantom = 1;
    const char *rs = getenv("ZEROSIM_REDUCE_SCATTER"); /* as a real rank would */
    c->force_mpi_rs = rs && strcmp(rs, "mpi") == 0;
    return c;
}

int zs_comm_is_phantom(zs_comm_t c) { return c->phantom; }

int zs_comm_rank(zs_comm_t c) { return c->rank; }
int zs_comm_size(zs_comm_t c) { return c->size; }
int zs_comm_local_rank(zs_comm_t c) { return c->local_rank; }

int zs_comm_split(zs_comm_t c, int color, int key, int size, int rank, zs_comm_group group,
                  zs_comm_t *out)
{
    *out = NULL;
    if (size < 1 || rank < 0 || rank >= size)
        ZS_FAIL("communicator split: rank %d of %d is not a rank of a group", rank, size);
    zs_comm_t s = calloc(1, sizeof *s);
    if (!s)
        ZS_FAIL("out of host memory creating a %s communicator", zs_comm_group_name(group));
    s->ledger = c->ledger;
    s->group = group;
    s->force_mpi_rs = c->force_mpi_rs;
    s->phantom = c->phantom;
    s->local_rank = c->local_rank;
    s->comm = MPI_COMM_NULL;
    s->agree_comm = MPI_COMM_NULL;
    s->size = size;
    s->rank = rank;
    if (c->comm != MPI_COMM_NULL) {
        int rc = MPI_Comm_split(c->comm, color, key, &s->comm);
        if (rc != MPI_SUCCESS) {
            free(s);
            return zs_mpi_fail(rc, "MPI_Comm_split");
        }
        int r = -1, n = 0;
        MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
        MPI_Comm_rank(s->comm, &r);
        MPI_Comm_size(s->comm, &n);
        MPI_Comm_dup(s->comm, &s->agree_comm);
        MPI_Op_create(zs_sum_bf16, 1, &s->op_sum_bf16);
        MPI_Op_create(zs_sum_f16, 1, &s->op_sum_f16);
        if (r != rank || n != size) {
            zs_comm_free(s);
            ZS_FAIL("the %s group has rank %d of %d where the mesh expects %d of %d",
                    zs_comm_group_name(group), r, n, rank, size);
        }
    } else if (size > 1 && !c->phantom) {
        free(s);
        ZS_FAIL("a %s group of %d ranks needs MPI (this communicator is a single rank)",
                zs_comm_group_name(group), size);
    }
    *out = s;
    return 0;
}

void zs_comm_free(zs_comm_t s)
{
    if (!s || s->ledger == s)
        return;
    if (s->comm != MPI_COMM_NULL) {
        MPI_Comm_free(&s->agree_comm);
        MPI_Comm_free(&s->comm);
        MPI_Op_free(&s->op_sum_bf16);
        MPI_Op_free(&s->op_sum_f16);
    }
    free(s->h_send);
    free(s->h_recv);
    free(s->h_scratch);
    free(s);
}

zs_comm_group zs_comm_get_group(zs_comm_t c) { return c->group; }
void zs_comm_set_group(zs_comm_t c, zs_comm_group g) { c->group = g; }

void zs_comm_set_context(zs_comm_t c, zs_comm_phase phase, int step)
{
    c->ledger->phase = phase;
    c->ledger->step = step;
}

const zs_comm_record *zs_comm_records(zs_comm_t c, size_t *n)
{
    *n = c->ledger->nrec;
    return c->ledger->rec;
}

void zs_comm_clear_records(zs_comm_t c) { c->ledger->nrec = 0; }

const zs_comm_sum_row *zs_comm_sums(zs_comm_t c, size_t *n)
{
    *n = c->ledger->nsum;
    return c->ledger->sum;
}

/* Add r to its (group, op, phase, message size) row. */
static void zs_comm_sum_add(zs_comm_t c, const zs_comm_record *r)
{
    size_t bytes = r->elems * r->elem_size, i;
    for (i = 0; i < c->nsum; i++)
        if (c->sum[i].op == r->op && c->sum[i].phase == r->phase &&
            c->sum[i].msg_bytes == bytes && c->sum[i].group == r->group)
            break;
    if (i == c->nsum) {
        if (c->nsum == c->capsum) {
            size_t cap = c->capsum ? 2 * c->capsum : 64;
            zs_comm_sum_row *p = realloc(c->sum, cap * sizeof *p);
            if (!p) { /* cannot happen quietly: the sums would be wrong */
                fprintf(stderr, "zerosim: out of host memory in the comm ledger\n");
                abort();
            }
            c->sum = p;
            c->capsum = cap;
        }
        c->sum[i] = (zs_comm_sum_row){.group = r->group, .op = r->op, .phase = r->phase,
                                      .msg_bytes = bytes};
        c->nsum++;
    }
    c->sum[i].calls += 1;
    c->sum[i].bytes += (double)bytes;
    c->sum[i].wire_bytes += r->wire_bytes;
    c->sum[i].seconds += r->seconds;
}

double zs_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Called as the call completes: its start is now minus its duration. */
static void zs_comm_record_add(zs_comm_t c, const zs_comm_record *r)
{
    c = c->ledger;
    zs_comm_sum_add(c, r);
    if (c->nrec >= ZS_COMM_KEEP)
        return;
    if (c->nrec == c->caprec) {
        size_t cap = c->caprec ? 2 * c->caprec : 1024;
        zs_comm_record *p = realloc(c->rec, cap * sizeof *p);
        if (!p)
            return; /* the ledger stays short rather than the run failing */
        c->rec = p;
        c->caprec = cap;
    }
    c->rec[c->nrec] = *r;
    c->rec[c->nrec].start = zs_clock() - r->seconds;
    c->nrec++;
}

static zs_comm_record zs_comm_rec(zs_comm_t c, zs_comm_op op, int layer, size_t elems,
                                  zs_comm_type t)
{
    zs_comm_record r = {.op = op, .phase = c->ledger->phase, .group = c->group, .layer = layer,
                        .step = c->ledger->step,
                        .elems = elems, .elem_size = zs_comm_type_size(t)};
    double full = (double)elems * (double)r.elem_size, N = c->size;
    r.wire_bytes = op == ZS_OP_GATHER ? full : full * (N - 1) / N;
    if (op == ZS_OP_ALLREDUCE)
        r.wire_bytes *= 2;
    return r;
}

void zs_comm_set_scratch(zs_comm_t c, void *buf, size_t bytes)
{
    c->scratch = buf;
    c->scratch_bytes = buf ? bytes : 0;
}

int zs_comm_uses_ring(zs_comm_t c)
{
    return !c->force_mpi_rs && (c->size == 2 || c->scratch != NULL);
}

/* Grow a host staging buffer to at least `bytes`. */
static int zs_comm_grow(void **buf, size_t *cap, size_t bytes)
{
    if (bytes <= *cap)
        return 0;
    void *p = realloc(*buf, bytes);
    if (!p)
        ZS_FAIL("out of host memory staging %zu bytes of device memory for MPI", bytes);
    *buf = p;
    *cap = bytes;
    return 0;
}

int zs_comm_set_backend(zs_comm_t c, zs_backend_t be)
{
    c->be = be;
    c->staged = be != NULL && !zs_backend_host_accessible(be);
    c->use_coll = 0;
    const char *env = getenv("ZEROSIM_NCCL");
    if (!c->staged || !env || strcmp(env, "1") != 0 || c->size == 1)
        return 0;
    size_t idb = zs_backend_coll_id_bytes(be);
    if (idb == 0)
        ZS_FAIL("ZEROSIM_NCCL=1: the %s backend of this build has no device collectives "
                "(configure did not find NCCL); unset ZEROSIM_NCCL to stage through MPI",
                zs_backend_name(be));
    char *id = calloc(1, idb);
    if (!id)
        ZS_FAIL("out of host memory for the device-collective id");
    int rc = c->rank == 0 ? zs_backend_coll_get_id(be, id) : 0;
    /* set-up, not training traffic: not in the ledger, so that the ledger is
     * the same with and without NCCL */
    int mrc = MPI_Bcast(id, (int)idb, MPI_BYTE, 0, c->comm);
    if (!rc && mrc != MPI_SUCCESS)
        rc = zs_mpi_fail(mrc, "MPI_Bcast of the NCCL id");
    if (!rc)
        rc = zs_backend_coll_init(be, id, c->size, c->rank);
    free(id);
    if (!rc)
        c->use_coll = 1;
    return rc;
}

/* The device collectives' type for t, or -1 when they have none. */
static int zs_comm_coll_type(zs_comm_type t)
{
    switch (t) {
    case ZS_CT_F32: return ZS_COLL_F32;
    case ZS_CT_BF16: return ZS_COLL_BF16;
    case ZS_CT_F16: return ZS_COLL_F16;
    case ZS_CT_I64: return ZS_COLL_I64;
    default: return -1;
    }
}

/* acc(N) += own(N), fp32. GCC's -O2 does not vectorize this loop (its cheap
 * cost model) and the scalar loop made the ring reduce-scatter 2x slower
 * than the transfer itself; ask for the vectorizer here. Results do not
 * change: each element is one IEEE addition either way. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#endif
static void zs_comm_add_f32(float *restrict a, const float *restrict b, int n)
{
    for (int i = 0; i < n; i++)
        a[i] = a[i] + b[i];
}

/* acc(N) = acc + own, in the element type (16-bit floats through fp32). */
static void zs_comm_add(void *acc, const void *own, int n, zs_comm_type t)
{
    switch (t) {
    case ZS_CT_F32:
        zs_comm_add_f32(acc, own, n);
        break;
    case ZS_CT_BF16: {
        int len = n;
        zs_sum_bf16((void *)own, acc, &len, NULL);
        break;
    }
    case ZS_CT_F16: {
        int len = n;
        zs_sum_f16((void *)own, acc, &len, NULL);
        break;
    }
    case ZS_CT_I64: {
        int64_t *a = acc;
        const int64_t *b = own;
        for (int i = 0; i < n; i++)
            a[i] += b[i];
        break;
    }
    case ZS_CT_F64: {
        double *a = acc;
        const double *b = own;
        for (int i = 0; i < n; i++)
            a[i] = a[i] + b[i];
        break;
    }
    default: {
        uint64_t *a = acc;
        const uint64_t *b = own;
        for (int i = 0; i < n; i++)
            a[i] += b[i];
    }
    }
}

/* Elements per ring message: a received piece is summed while it is still in
 * cache (bench/bench_zero.sh: 128Ki fp32 elements did as well as whole
 * chunks at 2 ranks and better than 8Ki). */
#define ZS_RING_SEGMENT ((size_t)131072)

/* Ring reduce-scatter: at step s, rank r passes the partial sum of chunk
 * (r-s-1) mod N to rank r+1 and adds its own part of chunk (r-s-2) mod N to
 * what it receives from rank r-1; after N-1 steps it holds chunk r. The
 * partial sum of chunk j starts at rank j+1 and travels the ring in order. */
static int zs_comm_ring_reduce_scatter(zs_comm_t c, const void *send, void *recv,
                                       const int *counts, zs_comm_type t, void *scratch)
{
    int N = c->size, r = c->rank;
    size_t es = zs_comm_type_size(t);
    size_t *displ = malloc((size_t)N * sizeof(size_t));
    if (!displ)
        ZS_FAIL("out of host memory in reduce-scatter");
    size_t maxc = 0, off = 0;
    for (int q = 0; q < N; q++) {
        displ[q] = off;
        off += (size_t)counts[q];
        if ((size_t)counts[q] > maxc)
            maxc = (size_t)counts[q];
    }
    char *buf[2] = {scratch, (char *)scratch + maxc * es};
    int next = (r + 1) % N, prev = (r + N - 1) % N;
    const char *out = (const char *)send + displ[prev] * es; /* step 0 sends own data */
    int rc = MPI_SUCCESS;
    for (int s = 0; s < N - 1 && rc == MPI_SUCCESS; s++) {
        int sc = ((r - s - 1) % N + N) % N, rcv = ((r - s - 2) % N + N) % N;
        char *in = s == N - 2 ? recv : buf[s % 2];
        const char *own = (const char *)send + displ[rcv] * es;
        /* in segments, so that each received piece is summed while in cache;
         * the neighbours' segment counts match ours in each direction */
        size_t ns = (size_t)counts[sc], nr = (size_t)counts[rcv];
        size_t gs = (ns + ZS_RING_SEGMENT - 1) / ZS_RING_SEGMENT;
        size_t gr = (nr + ZS_RING_SEGMENT - 1) / ZS_RING_SEGMENT;
        for (size_t g = 0; g < gs || g < gr; g++) {
            size_t so = g * ZS_RING_SEGMENT;
            MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
            size_t rn = g < gr ? (nr - so < ZS_RING_SEGMENT ? nr - so : ZS_RING_SEGMENT) : 0;
            if (g < gr)
                rc = MPI_Irecv(in + so * es, (int)rn, zs_mpi_type(t), prev, 7001, c->comm, &req[0]);
            if (rc == MPI_SUCCESS && g < gs) {
                size_t sn = ns - so < ZS_RING_SEGMENT ? ns - so : ZS_RING_SEGMENT;
                rc = MPI_Isend(out + so * es, (int)sn, zs_mpi_type(t), next, 7001, c->comm, &req[1]);
            }
            if (rc == MPI_SUCCESS)
                rc = MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
            if (rc != MPI_SUCCESS)
                break;
            if (rn)
                zs_comm_add(in + so * es, own + so * es, (int)rn, t);
        }
        out = in;
    }
    free(displ);
    return rc == MPI_SUCCESS ? 0 : zs_mpi_fail(rc, "ring reduce-scatter");
}

/* The host algorithm of zs_comm_reduce_scatter on host buffers, with the
 * ring's scratch `scratch` (NULL: none registered). Not recorded. */
static int zs_comm_reduce_scatter_host(zs_comm_t c, const void *send, void *recv,
                                       const int *counts, zs_comm_type t, void *scratch,
                                       size_t scratch_bytes)
{
    size_t maxc = 0;
    for (int r = 0; r < c->size; r++)
        if ((size_t)counts[r] > maxc)
            maxc = (size_t)counts[r];
    /* two ranks receive straight into recv; more need the scratch */
    if (!c->force_mpi_rs &&
        (c->size == 2 || (scratch && 2 * maxc * zs_comm_type_size(t) <= scratch_bytes))) {
        return zs_comm_ring_reduce_scatter(c, send, recv, counts, t, scratch);
    }
    int rc = MPI_Reduce_scatter(send, recv, counts, zs_mpi_type(t), zs_sum_op(c, t), c->comm);
    return rc == MPI_SUCCESS ? 0 : zs_mpi_fail(rc, "MPI_Reduce_scatter");
}

/* Staged (device buffers): the backend's collectives, or host copies of
 * send and recv through the same host algorithm, so the sums and the choice
 * of algorithm are those of a host run. */
static int zs_comm_reduce_scatter_staged(zs_comm_t c, const void *send, void *recv,
                                         const int *counts, zs_comm_type t, size_t total)
{
    if (c->use_coll && zs_comm_coll_type(t) >= 0)
        return zs_backend_coll_reduce_scatterv(c->be, send, recv, counts,
                                               (zs_coll_type)zs_comm_coll_type(t), c->size,
                                               c->rank);
    size_t es = zs_comm_type_size(t), mine = (size_t)counts[c->rank] * es;
    ZS_TRY(zs_comm_grow(&c->h_send, &c->h_send_cap, total * es + 1));
    ZS_TRY(zs_comm_grow(&c->h_recv, &c->h_recv_cap, mine + 1));
    if (c->scratch)
        ZS_TRY(zs_comm_grow(&c->h_scratch, &c->h_scratch_cap, c->scratch_bytes + 1));
    zs_backend_copy_d2h(c->be, c->h_send, send, total * es);
    ZS_TRY(zs_comm_reduce_scatter_host(c, c->h_send, c->h_recv, counts, t,
                                       c->scratch ? c->h_scratch : NULL, c->scratch_bytes));
    zs_backend_copy_h2d(c->be, recv, c->h_recv, mine);
    return 0;
}

int zs_comm_reduce_scatter(zs_comm_t c, const void *send, void *recv, const int *counts,
                           zs_comm_type t, int layer)
{
    size_t total = 0;
    for (int r = 0; r < c->size; r++)
        total += (size_t)counts[r];
    zs_comm_record rec = zs_comm_rec(c, ZS_OP_REDUCE_SCATTER, layer, total, t);
    if (c->phantom) {
        zs_comm_record_add(c, &rec);
        return 0;
    }
    if (c->size == 1) {
        if (c->staged)
            zs_backend_copy_d2d(c->be, recv, send, total * zs_comm_type_size(t));
        else
            memmove(recv, send, total * zs_comm_type_size(t));
        zs_comm_record_add(c, &rec);
        return 0;
    }
    double t0 = MPI_Wtime();
    if (c->staged)
        ZS_TRY(zs_comm_reduce_scatter_staged(c, send, recv, counts, t, total));
    else
        ZS_TRY(zs_comm_reduce_scatter_host(c, send, recv, counts, t, c->scratch,
                                           c->scratch_bytes));
    rec.seconds = MPI_Wtime() - t0;
    zs_comm_record_add(c, &rec);
    return 0;
}

int zs_comm_allgatherv_inplace(zs_comm_t c, void *buf, const int *counts, const int *displs,
                               zs_comm_type t, int layer)
{
    void *req = NULL;
    ZS_TRY(zs_comm_iallgatherv_inplace(c, buf, counts, displs, t, layer, &req));
    return zs_comm_wait(c, &req);
}

int zs_comm_iallgatherv_inplace(zs_comm_t c, void *buf, const int *counts, const int *displs,
                                zs_comm_type t, int layer, void **request)
{
    *request = NULL;
    zs_comm_pending *p = calloc(1, sizeof *p);
    if (!p)
        ZS_FAIL("out of host memory for a pending allgather");
    size_t total = 0;
    for (int r = 0; r < c->size; r++)
        total += (size_t)counts[r];
    p->r = zs_comm_rec(c, ZS_OP_ALLGATHER, layer, total, t);
    if (c->size == 1 || c->phantom) { /* nothing to exchange: completes at once */
        p->req = MPI_REQUEST_NULL;
        *request = p;
        return 0;
    }
    p->t0 = MPI_Wtime();
    void *mbuf = buf;
    if (c->staged) {
        if (c->use_coll && zs_comm_coll_type(t) >= 0) { /* complete on return */
            int rc = zs_backend_coll_allgatherv(c->be, buf, counts, displs,
                                                (zs_coll_type)zs_comm_coll_type(t), c->size);
            if (rc) {
                free(p);
                return rc;
            }
            p->req = MPI_REQUEST_NULL;
            *request = p;
            return 0;
        }
        /* a host copy of the whole span per request (prefetches overlap),
         * this rank's part copied in; the rest comes back on wait */
        size_t es = zs_comm_type_size(t), span = 0;
        for (int r = 0; r < c->size; r++)
            if (counts[r] && (size_t)displs[r] + (size_t)counts[r] > span)
                span = (size_t)displs[r] + (size_t)counts[r];
        p->dev = buf;
        p->host_bytes = span * es;
        p->host = malloc(p->host_bytes + 1);
        if (!p->host) {
            free(p);
            ZS_FAIL("out of host memory staging an allgather of %zu bytes", span * es);
        }
        size_t mine = (size_t)displs[c->rank] * es;
        zs_backend_copy_d2h(c->be, (char *)p->host + mine, (const char *)buf + mine,
                            (size_t)counts[c->rank] * es);
        mbuf = p->host;
    }
    int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, mbuf, counts, displs,
                             zs_mpi_type(t), c->comm, &p->req);
    if (rc != MPI_SUCCESS) {
        free(p->host);
        free(p);
        return zs_mpi_fail(rc, "MPI_Iallgatherv");
    }
    *request = p;
    return 0;
}

int zs_comm_wait(zs_comm_t c, void **request)
{
    zs_comm_pending *p = *request;
    if (!p)
        return 0;
    int rc = MPI_SUCCESS;
    if (c->size > 1 && !c->phantom) {
        rc = MPI_Wait(&p->req, MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS && p->host)
            zs_backend_copy_h2d(c->be, p->dev, p->host, p->host_bytes);
        p->r.seconds = MPI_Wtime() - p->t0;
    }
    zs_comm_record r = p->r;
    free(p->host);
    free(p);
    *request = NULL;
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, "MPI_Wait");
    zs_comm_record_add(c, &r);
    return 0;
}

/* In-place MPI_Allreduce with op (staged through host memory for a device
 * backend), recorded as an allreduce. */
static int zs_comm_allreduce_op(zs_comm_t c, void *buf, size_t n, zs_comm_type t, MPI_Op op,
                                int layer)
{
    zs_comm_record rec = zs_comm_rec(c, ZS_OP_ALLREDUCE, layer, n, t);
    if (n > (size_t)INT_MAX)
        ZS_FAIL("allreduce of %zu elements is more than one MPI call can carry", n);
    if (c->size == 1 || c->phantom) {
        zs_comm_record_add(c, &rec);
        return 0;
    }
    double t0 = MPI_Wtime();
    size_t bytes = n * zs_comm_type_size(t);
    void *mbuf = buf;
    if (c->staged) {
        ZS_TRY(zs_comm_grow(&c->h_send, &c->h_send_cap, bytes + 1));
        zs_backend_copy_d2h(c->be, c->h_send, buf, bytes);
        mbuf = c->h_send;
    }
    int rc = MPI_Allreduce(MPI_IN_PLACE, mbuf, (int)n, zs_mpi_type(t), op, c->comm);
    if (rc == MPI_SUCCESS && c->staged)
        zs_backend_copy_h2d(c->be, buf, c->h_send, bytes);
    rec.seconds = MPI_Wtime() - t0;
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, "MPI_Allreduce");
    zs_comm_record_add(c, &rec);
    return 0;
}

int zs_comm_allreduce_sum(zs_comm_t c, void *buf, size_t n, zs_comm_type t, int layer)
{
    return zs_comm_allreduce_op(c, buf, n, t, zs_sum_op(c, t), layer);
}

int zs_comm_allreduce_max_f32(zs_comm_t c, float *buf, size_t n, int layer)
{
    return zs_comm_allreduce_op(c, buf, n, ZS_CT_F32, MPI_MAX, layer);
}

int zs_comm_allgather_small(zs_comm_t c, const void *send, void *recv, int count, zs_comm_type t)
{
    zs_comm_record rec = zs_comm_rec(c, ZS_OP_SCALARS, -1, (size_t)count * (size_t)c->size, t);
    if (c->phantom) { /* host scalars: the simulated others contribute zeros */
        size_t n = (size_t)count * zs_comm_type_size(t);
        memset(recv, 0, n * (size_t)c->size);
        memcpy((char *)recv + (size_t)c->rank * n, send, n);
        zs_comm_record_add(c, &rec);
        return 0;
    }
    if (c->size == 1) {
        memmove(recv, send, (size_t)count * zs_comm_type_size(t));
        zs_comm_record_add(c, &rec);
        return 0;
    }
    double t0 = MPI_Wtime();
    int rc = MPI_Allgather(send, count, zs_mpi_type(t), recv, count, zs_mpi_type(t), c->comm);
    rec.seconds = MPI_Wtime() - t0;
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, "MPI_Allgather");
    zs_comm_record_add(c, &rec);
    return 0;
}

int zs_comm_allreduce_max_int(zs_comm_t c, int *v)
{
    zs_comm_record rec = zs_comm_rec(c, ZS_OP_SCALARS, -1, (size_t)c->size, ZS_CT_INT);
    if (c->size == 1 || c->phantom) {
        zs_comm_record_add(c, &rec);
        return 0;
    }
    double t0 = MPI_Wtime();
    int rc = MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_INT, MPI_MAX, c->comm);
    rec.seconds = MPI_Wtime() - t0;
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, "MPI_Allreduce");
    zs_comm_record_add(c, &rec);
    return 0;
}

int zs_comm_gather_root(zs_comm_t c, const void *send, int count, void *recv, zs_comm_type t)
{
    zs_comm_record rec = zs_comm_rec(c, ZS_OP_GATHER, -1, (size_t)count * (size_t)c->size, t);
    if (c->phantom) {
        zs_comm_record_add(c, &rec);
        return 0;
    }
    if (c->size == 1) {
        memmove(recv, send, (size_t)count * zs_comm_type_size(t));
        zs_comm_record_add(c, &rec);
        return 0;
    }
    double t0 = MPI_Wtime();
    int rc = MPI_Gather(send, count, zs_mpi_type(t), recv, count, zs_mpi_type(t), 0, c->comm);
    rec.seconds = MPI_Wtime() - t0;
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, "MPI_Gather");
    zs_comm_record_add(c, &rec);
    return 0;
}

int zs_comm_alltoallv_bytes(zs_comm_t c, const void *send, const int *scount, const int *sdispl,
                            void *recv, const int *rcount, const int *rdispl, int layer)
{
    size_t total = 0, others = 0;
    for (int q = 0; q < c->size; q++) {
        total += (size_t)scount[q];
        if (q != c->rank)
            others += (size_t)scount[q];
    }
    zs_comm_record rec = zs_comm_rec(c, ZS_OP_ALLTOALL, layer, total, ZS_CT_NTYPES);
    rec.elem_size = 1;
    rec.wire_bytes = (double)others;
    if (c->phantom) {
        zs_comm_record_add(c, &rec);
        return 0;
    }
    if (c->size == 1) {
        if (c->staged)
            zs_backend_copy_d2d(c->be, (char *)recv + rdispl[0], (const char *)send + sdispl[0],
                                (size_t)scount[0]);
        else
            memmove((char *)recv + rdispl[0], (const char *)send + sdispl[0], (size_t)scount[0]);
        zs_comm_record_add(c, &rec);
        return 0;
    }
    double t0 = MPI_Wtime();
    const void *msend = send;
    void *mrecv = recv;
    size_t sspan = 0, rspan = 0;
    if (c->staged) { /* whole spans through host buffers */
        for (int q = 0; q < c->size; q++) {
            if ((size_t)sdispl[q] + (size_t)scount[q] > sspan)
                sspan = (size_t)sdispl[q] + (size_t)scount[q];
            if ((size_t)rdispl[q] + (size_t)rcount[q] > rspan)
                rspan = (size_t)rdispl[q] + (size_t)rcount[q];
        }
        ZS_TRY(zs_comm_grow(&c->h_send, &c->h_send_cap, sspan + 1));
        ZS_TRY(zs_comm_grow(&c->h_recv, &c->h_recv_cap, rspan + 1));
        zs_backend_copy_d2h(c->be, c->h_send, send, sspan);
        msend = c->h_send;
        mrecv = c->h_recv;
    }
    int rc = MPI_Alltoallv(msend, scount, sdispl, MPI_BYTE, mrecv, rcount, rdispl, MPI_BYTE,
                           c->comm);
    if (rc == MPI_SUCCESS && c->staged)
        zs_backend_copy_h2d(c->be, recv, c->h_recv, rspan);
    rec.seconds = MPI_Wtime() - t0;
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, "MPI_Alltoallv");
    zs_comm_record_add(c, &rec);
    return 0;
}

int zs_comm_send_to_root(zs_comm_t c, int from, void *buf, int count, zs_comm_type t)
{
    if (from == 0 || (c->rank != 0 && c->rank != from))
        return 0;
    zs_comm_record rec = zs_comm_rec(c, ZS_OP_GATHER, -1, (size_t)count, t);
    if (c->phantom) {
        zs_comm_record_add(c, &rec);
        return 0;
    }
    double t0 = MPI_Wtime();
    int rc = c->rank == from
                 ? MPI_Send(buf, count, zs_mpi_type(t), 0, 7002, c->comm)
                 : MPI_Recv(buf, count, zs_mpi_type(t), from, 7002, c->comm, MPI_STATUS_IGNORE);
    rec.seconds = MPI_Wtime() - t0;
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, "MPI_Send/MPI_Recv");
    zs_comm_record_add(c, &rec);
    return 0;
}

int zs_comm_agree(zs_comm_t c, int failed, double timeout_s, int *any)
{
    *any = failed;
    if (c->size == 1 || c->phantom)
        return 0;
    MPI_Request req;
    int in = failed ? c->size - c->rank : 0, out = 0; /* the lowest failing rank wins */
    if (MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_MAX, c->agree_comm, &req) != MPI_SUCCESS)
        return -1;
    double t0 = MPI_Wtime();
    int done = 0;
    while (!done) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done && MPI_Wtime() - t0 > timeout_s)
            return -1;
    }
    *any = out ? c->size - out + 1 : 0; /* 1 + lowest failing rank, 0 when none */
    return 0;
}

int zs_comm_barrier(zs_comm_t c)
{
    if (c->size == 1 || c->phantom)
        return 0;
    int rc = MPI_Barrier(c->comm);
    return rc == MPI_SUCCESS ? 0 : zs_mpi_fail(rc, "MPI_Barrier");
}
