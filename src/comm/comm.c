/* zerosim — communication over MPI: init and finalize, communicators (self,
 * phantom, split, free), the node map, the ledger of records and sums, staging
 * of device buffers. The collectives are in comm_coll.c, faults in
 * comm_fault.c (see comm_impl.h for the whole layer). */
#include "comm_impl.h"
#include "zerosim/backend.h"
#include "zerosim/comm.h"
#include "zerosim/error.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const zs_op_names[ZS_OP_NOPS] = {
    [ZS_OP_REDUCE_SCATTER] = "reduce_scatter",
    [ZS_OP_ALLGATHER] = "allgather",
    [ZS_OP_ALLREDUCE] = "allreduce",
    [ZS_OP_SCALARS] = "scalars",
    [ZS_OP_GATHER] = "gather",
    [ZS_OP_ALLTOALL] = "alltoall",
    [ZS_OP_D2H] = "d2h",
    [ZS_OP_H2D] = "h2d",
    [ZS_OP_NVME_READ] = "nvme_read",
    [ZS_OP_NVME_WRITE] = "nvme_write",
    [ZS_OP_SEND] = "send",
    [ZS_OP_RECV] = "recv",
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
    [ZS_GROUP_EDP] = "edp",
    [ZS_GROUP_CP] = "cp",
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

MPI_Datatype zs_mpi_type(zs_comm_type t)
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
void zs_sum_bf16(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = zs_f32_to_bf16(zs_bf16_to_f32(a[i]) + zs_bf16_to_f32(b[i]));
}

void zs_sum_f16(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = zs_f32_to_f16(zs_f16_to_f32(a[i]) + zs_f16_to_f32(b[i]));
}

MPI_Op zs_sum_op(zs_comm_t c, zs_comm_type t)
{
    if (t == ZS_CT_BF16)
        return c->op_sum_bf16;
    if (t == ZS_CT_F16)
        return c->op_sum_f16;
    return MPI_SUM;
}

int zs_mpi_fail(int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    ZS_FAIL("MPI error in %s: %s", what, msg);
}

/* The world's node map from MPI: the nodes MPI_Comm_split_type(SHARED)
 * reports, numbered in the order of their lowest world rank. Set-up
 * traffic (one int per rank), outside the ledger. */
static int zs_comm_nodes_from_mpi(zs_comm_t c)
{
    int lead = c->rank; /* the lowest world rank on this node */
    if (c->node != MPI_COMM_NULL)
        MPI_Allreduce(&c->rank, &lead, 1, MPI_INT, MPI_MIN, c->node);
    int *all = malloc((size_t)c->size * sizeof(int));
    free(c->node_world); /* a map made before (zs_comm_set_ranks_per_node) */
    free(c->node_of);
    c->node_world = malloc((size_t)c->size * sizeof(int));
    c->node_of = malloc((size_t)c->size * sizeof(int));
    if (!all || !c->node_world || !c->node_of) {
        free(all);
        ZS_FAIL("out of host memory for the node map of %d ranks", c->size);
    }
    if (MPI_Allgather(&lead, 1, MPI_INT, all, 1, MPI_INT, c->comm) != MPI_SUCCESS) {
        free(all);
        ZS_FAIL("MPI_Allgather of the node map failed");
    }
    int nodes = 0;
    for (int q = 0; q < c->size; q++) {
        if (all[q] == q) /* a node's lowest rank numbers it */
            all[q] = -1 - nodes++;
        c->node_world[q] = -1 - all[all[q] >= 0 ? all[q] : q];
    }
    memcpy(c->node_of, c->node_world, (size_t)c->size * sizeof(int));
    free(all);
    return 0;
}

/* The world after MPI_Init: its communicators, the node map, the board.
 * Every call here waits for every rank (under the start-up watchdog). */
static int zs_comm_world_open(zs_comm_t c)
{
    c->ledger = c;
    c->comm = MPI_COMM_WORLD;
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    zs_comm_startup_mpi(c->rank);
    MPI_Comm_dup(c->comm, &c->agree_comm);
    c->node = MPI_COMM_NULL;
    if (MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &c->node) ==
        MPI_SUCCESS)
        MPI_Comm_rank(c->node, &c->local_rank);
    else
        c->node = MPI_COMM_NULL;
    ZS_TRY(zs_comm_nodes_from_mpi(c));
    c->timeout_s = zs_comm_startup_timeout();
    c->counter = ZS_BOARD_WORLD;
    zs_comm_stall_parse(c);
    zs_board_open(c);
    return 0;
}

int zs_comm_launcher_size(void)
{
    const char *names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *v = getenv(names[i]);
        char *end;
        long n = v && *v ? strtol(v, &end, 10) : 0;
        if (n > 0 && n < INT_MAX && !*end)
            return (int)n;
    }
    return 0;
}

int zs_comm_init(int *argc, char ***argv, zs_comm_t *world)
{
    *world = NULL;
    int inited = 0;
    zs_comm_startup_begin(); /* a deadline for MPI_Init and the set-up below */
    MPI_Initialized(&inited);
    if (!inited && MPI_Init(argc, argv) != MPI_SUCCESS) {
        zs_comm_edge_end();
        ZS_FAIL("MPI_Init failed: check the MPI installation (Open MPI or MPICH: mpiexec "
                "--version names it)");
    }
    zs_comm_t c = calloc(1, sizeof *c);
    int rc = c ? zs_comm_world_open(c) : zs_error_set("out of host memory creating the "
                                                          "communicator");
    zs_comm_edge_end();
    if (rc) {
        free(c);
        return rc;
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
        zs_comm_hier_free(c);
        free(c->h_send);
        free(c->h_recv);
        free(c->h_scratch);
    }
    if (c && c->comm == MPI_COMM_NULL) { /* a self communicator: MPI was never used */
        free(c->rec);
        free(c->sum);
        free(c->node_of);
        free(c->node_world);
        free(c->world_of);
        free(c);
        return;
    }
    if (c) {
        zs_comm_shutdown_begin(c); /* a deadline for the calls below */
        zs_board_close(c);
        if (c->node != MPI_COMM_NULL)
            MPI_Comm_free(&c->node);
        MPI_Comm_free(&c->agree_comm);
        MPI_Op_free(&c->op_sum_bf16);
        MPI_Op_free(&c->op_sum_f16);
        free(c->rec);
        free(c->sum);
        free(c->node_of);
        free(c->node_world);
        free(c);
    }
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin)
        MPI_Finalize();
    zs_comm_edge_end(); /* shutdown is over: the watchdog disarmed */
}

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

/* A split's nodes: the world's map through world_of (none known: NULL,
 * one node). */
static void zs_comm_nodes_derive(zs_comm_t s)
{
    const int *w = s->ledger->node_world;
    free(s->node_of);
    s->node_of = NULL;
    if (!w || !s->world_of)
        return;
    s->node_of = malloc((size_t)s->size * sizeof(int));
    for (int i = 0; s->node_of && i < s->size; i++)
        s->node_of[i] = w[s->world_of[i]];
}

int zs_comm_set_world_ranks(zs_comm_t sub, const int *world_ranks)
{
    if (sub->ledger == sub)
        return 0;
    if (!sub->world_of) {
        sub->world_of = malloc((size_t)sub->size * sizeof(int));
        if (!sub->world_of)
            ZS_FAIL("out of host memory for a %s group's ranks", zs_comm_group_name(sub->group));
        memcpy(sub->world_of, world_ranks, (size_t)sub->size * sizeof(int));
    }
    zs_comm_nodes_derive(sub);
    return 0;
}

int zs_comm_set_ranks_per_node(zs_comm_t world, int k)
{
    zs_comm_t c = world->ledger;
    if (k < 0 || k > c->size || (k > 0 && c->size % k != 0))
        ZS_FAIL("--ranks-per-node %d must divide the %d ranks (K consecutive ranks make a node)",
                k, c->size);
    if (k == 0) { /* back to MPI's nodes; a phantom or self world is one node */
        if (c->comm != MPI_COMM_NULL)
            return zs_comm_nodes_from_mpi(c);
        free(c->node_world);
        free(c->node_of);
        c->node_world = c->node_of = NULL;
        return 0;
    }
    int *nw = malloc((size_t)c->size * sizeof(int)), *no = malloc((size_t)c->size * sizeof(int));
    if (!nw || !no) {
        free(nw);
        free(no);
        ZS_FAIL("out of host memory for the node map of %d ranks", c->size);
    }
    for (int q = 0; q < c->size; q++)
        nw[q] = no[q] = q / k;
    free(c->node_world);
    free(c->node_of);
    c->node_world = nw;
    c->node_of = no;
    return 0;
}

int zs_comm_node_of(zs_comm_t c, int rank)
{
    return c->node_of && rank >= 0 && rank < c->size ? c->node_of[rank] : 0;
}

int zs_comm_ring_crosses(zs_comm_t c)
{
    return c->node_of && c->size > 1 &&
           c->node_of[c->rank] != c->node_of[(c->rank + 1) % c->size];
}

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
    s->counter = 1 + (int)group;
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
        s->world_of = malloc((size_t)n * sizeof(int));
        int *mine = malloc((size_t)n * sizeof(int));
        MPI_Group g, wg;
        if (s->world_of && mine && MPI_Comm_group(s->comm, &g) == MPI_SUCCESS) {
            MPI_Comm_group(MPI_COMM_WORLD, &wg);
            for (int i = 0; i < n; i++)
                mine[i] = i;
            MPI_Group_translate_ranks(g, n, mine, wg, s->world_of);
            MPI_Group_free(&g);
            MPI_Group_free(&wg);
        } else {
            free(s->world_of); /* the diagnosis of a timeout is then vaguer */
            s->world_of = NULL;
        }
        free(mine);
        if (r != rank || n != size) { /* world_of holds n ranks, not size */
            zs_comm_free(s);
            ZS_FAIL("the %s group has rank %d of %d where the mesh expects %d of %d",
                    zs_comm_group_name(group), r, n, rank, size);
        }
        zs_comm_nodes_derive(s);
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
    zs_comm_hier_free(s);
    zs_comm_zpp_free(s);
    if (s->comm != MPI_COMM_NULL) {
        MPI_Comm_free(&s->agree_comm);
        MPI_Comm_free(&s->comm);
        MPI_Op_free(&s->op_sum_bf16);
        MPI_Op_free(&s->op_sum_f16);
    }
    free(s->h_send);
    free(s->h_recv);
    free(s->h_scratch);
    free(s->world_of);
    free(s->node_of);
    free(s);
}

zs_comm_group zs_comm_get_group(zs_comm_t c) { return c->group; }
void zs_comm_set_group(zs_comm_t c, zs_comm_group g) { c->group = g; }

void zs_comm_set_context(zs_comm_t c, zs_comm_phase phase, int step)
{
    c->ledger->phase = phase;
    c->ledger->step = step;
    if (!c->phantom && c->ledger->comm != MPI_COMM_NULL)
        zs_comm_board_set_where(step, (int)phase);
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
    c->sum[i].inter_bytes += r->inter_bytes;
    c->sum[i].inter_api_bytes += r->inter_api_bytes;
    c->sum[i].seconds += r->seconds;
}

double zs_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Called as the call completes: its start is now minus its duration. */
void zs_comm_record_add(zs_comm_t c, const zs_comm_record *r)
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

zs_comm_record zs_comm_rec(zs_comm_t c, zs_comm_op op, int layer, size_t elems,
                                  zs_comm_type t)
{
    zs_comm_record r = {.op = op, .phase = c->ledger->phase, .group = c->group, .layer = layer,
                        .step = c->ledger->step,
                        .elems = elems, .elem_size = zs_comm_type_size(t)};
    double full = (double)elems * (double)r.elem_size, N = c->size;
    r.wire_bytes = op == ZS_OP_GATHER || op == ZS_OP_SEND || op == ZS_OP_RECV
                       ? full : full * (N - 1) / N;
    if (op == ZS_OP_ALLREDUCE)
        r.wire_bytes *= 2;
    if (c->hier && c->hier_m > 1 && c->hier_k > 1 &&
        (op == ZS_OP_REDUCE_SCATTER || op == ZS_OP_ALLGATHER)) {
        /* two levels: (K-1)/K of the buffer inside the node, then (M-1)/M
         * of its K-th part across: (M-1)/N of it */
        r.inter_bytes = full * (double)(c->hier_m - 1) / N;
        r.inter_api_bytes = r.inter_bytes;
    } else if (zs_comm_ring_crosses(c)) { /* the ring model: this rank's sends cross */
        r.inter_bytes = r.wire_bytes;
        r.inter_api_bytes = full;
    }
    return r;
}

void zs_comm_record_transfer(zs_comm_t c, zs_comm_op op, size_t bytes, double seconds)
{
    zs_comm_record r = {.op = op, .phase = c->ledger->phase, .group = c->group, .layer = -1,
                        .step = c->ledger->step, .elems = bytes, .elem_size = 1,
                        .wire_bytes = (double)bytes, .seconds = seconds};
    zs_comm_record_add(c, &r);
}

/* Grow a host staging buffer to at least `bytes`. */
int zs_comm_grow(void **buf, size_t *cap, size_t bytes)
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
    MPI_Request breq;
    long long seq = zs_comm_enter(c);
    int mrc = MPI_Ibcast(id, (int)idb, MPI_BYTE, 0, c->comm, &breq);
    if (mrc == MPI_SUCCESS)
        mrc = zs_comm_finish(c, 1, &breq, seq, "broadcast of the NCCL id") ? MPI_ERR_OTHER
                                                                           : MPI_SUCCESS;
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
int zs_comm_coll_type(zs_comm_type t)
{
    switch (t) {
    case ZS_CT_F32: return ZS_COLL_F32;
    case ZS_CT_BF16: return ZS_COLL_BF16;
    case ZS_CT_F16: return ZS_COLL_F16;
    case ZS_CT_I64: return ZS_COLL_I64;
    default: return -1;
    }
}

void zs_comm_set_mem(zs_comm_t c, zs_mem_t mem) { c->mem = mem; }
