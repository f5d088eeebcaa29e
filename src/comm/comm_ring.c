/* zerosim — the ring reduce-scatter (a state machine the engine can drive
 * between kernels) and the two-level (hierarchical) reduce-scatter and
 * allgather over nodes of K consecutive ranks. */
#include "comm_impl.h"
#include "zerosim/backend.h"
#include "zerosim/comm.h"
#include "zerosim/error.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void zs_comm_hier_free(zs_comm_t c)
{
    zs_comm_free(c->hier_node);
    zs_comm_free(c->hier_cross);
    c->hier_node = c->hier_cross = NULL;
    free(c->hier_tmp);
    c->hier_tmp = NULL;
    c->hier_tmp_cap = 0;
    c->hier = 0;
}

/* K when the group's ranks are nodes of K consecutive ranks each (K
 * dividing the group), else 0: the shape two-level collectives need. */
int zs_comm_node_blocks(zs_comm_t c)
{
    int N = c->size, K = 0;
    for (int q = 0; q < N; q++)
        K += zs_comm_node_of(c, q) == zs_comm_node_of(c, 0);
    int regular = N % K == 0;
    for (int q = 0; q < N && regular; q++) /* blocks of K, a node each */
        regular = zs_comm_node_of(c, q) == zs_comm_node_of(c, q - q % K) &&
                  (q < K || zs_comm_node_of(c, q) != zs_comm_node_of(c, q - K));
    return regular ? K : 0;
}

int zs_comm_set_hierarchical(zs_comm_t c, int on)
{
    zs_comm_hier_free(c);
    if (!on)
        return 0;
    int N = c->size, K = zs_comm_node_blocks(c);
    if (!K)
        ZS_FAIL("hierarchical collectives need the %s group's %d ranks in nodes of equal size, "
                "each of consecutive ranks (--ranks-per-node K, K dividing the group)",
                zs_comm_group_name(c->group), N);
    c->hier = 1;
    c->hier_k = K;
    c->hier_m = N / K;
    if (c->phantom || c->comm == MPI_COMM_NULL || K == 1 || K == N)
        return 0; /* nothing moves, or one level is trivial: the flat ring */
    int i = c->rank % K, j = c->rank / K;
    int rc = zs_comm_split(c, j, i, K, i, c->group, &c->hier_node);
    if (!rc)
        rc = zs_comm_split(c, i, j, c->hier_m, j, c->group, &c->hier_cross);
    if (rc) {
        zs_comm_hier_free(c);
        return rc;
    }
    c->hier = 1;
    return 0;
}

int zs_comm_hierarchical(zs_comm_t c) { return c->hier; }

void zs_comm_set_scratch(zs_comm_t c, void *buf, size_t bytes)
{
    c->scratch = buf;
    c->scratch_bytes = buf ? bytes : 0;
}

int zs_comm_uses_ring(zs_comm_t c)
{
    return !c->force_mpi_rs && (c->size == 2 || c->scratch != NULL);
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

static size_t zs_ring_seg(size_t n, size_t g)
{
    size_t so = g * ZS_RING_SEGMENT;
    return so >= n ? 0 : (n - so < ZS_RING_SEGMENT ? n - so : ZS_RING_SEGMENT);
}

/* Post segment R->gp of the step into the window's free slot. */
static int zs_ring_post(zs_comm_t c, zs_ring *R)
{
    int N = R->N, r = R->r;
    size_t g = R->gp++, so = g * ZS_RING_SEGMENT, sn = zs_ring_seg(R->ns, g),
           rn = zs_ring_seg(R->nr, g);
    MPI_Request *q = &R->rq[2 * (g % ZS_RING_WINDOW)];
    q[0] = q[1] = MPI_REQUEST_NULL;
    int rc = MPI_SUCCESS;
    if (rn)
        rc = MPI_Irecv(R->in + so * R->es, (int)rn, zs_mpi_type(R->t), (r + N - 1) % N, 7001,
                       c->comm, &q[0]);
    if (rc == MPI_SUCCESS && sn)
        rc = MPI_Isend(R->out + so * R->es, (int)sn, zs_mpi_type(R->t), (r + 1) % N, 7001,
                       c->comm, &q[1]);
    return rc == MPI_SUCCESS ? 0 : zs_mpi_fail(rc, "ring reduce-scatter");
}

/* Start step R->s: its buffers, and its first segments posted (one, maybe
 * empty, where the step has nothing to move). */
static int zs_ring_step(zs_comm_t c, zs_ring *R)
{
    int N = R->N, r = R->r, s = R->s;
    int sc = ((r - s - 1) % N + N) % N, rcv = ((r - s - 2) % N + N) % N;
    R->in = s == N - 2 ? R->recv : R->buf[s % 2];
    R->own = R->send + R->displ[rcv] * R->es;
    R->ns = R->count[sc];
    R->nr = R->count[rcv];
    size_t n = R->ns > R->nr ? R->ns : R->nr;
    R->ng = n ? (n + ZS_RING_SEGMENT - 1) / ZS_RING_SEGMENT : 1;
    R->gp = R->gs = 0;
    for (int i = 0; i < 2 * ZS_RING_WINDOW; i++)
        R->rq[i] = MPI_REQUEST_NULL;
    while (R->gp < R->ng && R->gp < ZS_RING_WINDOW)
        ZS_TRY(zs_ring_post(c, R));
    return 0;
}

void zs_ring_free(zs_ring *R)
{
    if (R)
        free(R->displ);
    free(R);
}

/* A ring over send/recv with the scratch (2 * max(counts) elements; N = 2
 * needs none), its first segment posted. */
int zs_ring_start(zs_comm_t c, const void *send, void *recv, const int *counts,
                         zs_comm_type t, void *scratch, zs_ring **out)
{
    int N = c->size;
    zs_ring *R = calloc(1, sizeof *R);
    size_t *d = malloc(2 * (size_t)N * sizeof *d);
    if (!R || !d) {
        free(R);
        free(d);
        ZS_FAIL("out of host memory in reduce-scatter");
    }
    size_t maxc = 0, off = 0;
    for (int q = 0; q < N; q++) {
        d[q] = off;
        d[N + q] = (size_t)counts[q];
        off += (size_t)counts[q];
        if ((size_t)counts[q] > maxc)
            maxc = (size_t)counts[q];
    }
    *R = (zs_ring){.N = N, .r = c->rank, .t = t, .es = zs_comm_type_size(t), .send = send,
                   .recv = recv, .displ = d, .count = d + N};
    R->buf[0] = scratch;
    R->buf[1] = scratch ? (char *)scratch + maxc * R->es : NULL;
    R->out = R->send + d[(c->rank + N - 1) % N] * R->es; /* step 0 sends own data */
    if (zs_ring_step(c, R)) {
        zs_ring_free(R);
        return -1;
    }
    *out = R;
    return 0;
}

/* Move the ring on while its messages have arrived; R->done at the end. */
int zs_ring_advance(zs_comm_t c, zs_ring *R)
{
    while (!R->done) {
        MPI_Request *q = &R->rq[2 * (R->gs % ZS_RING_WINDOW)];
        int flag = 0, rc = zs_mpi_testall(2, q, &flag);
        if (rc != MPI_SUCCESS)
            return zs_mpi_fail(rc, "ring reduce-scatter");
        if (!flag)
            return 0;
        size_t so = R->gs * ZS_RING_SEGMENT, rn = zs_ring_seg(R->nr, R->gs);
        if (rn)
            zs_comm_add(R->in + so * R->es, R->own + so * R->es, (int)rn, R->t);
        R->gs++;
        if (R->gp < R->ng)
            ZS_TRY(zs_ring_post(c, R));
        if (R->gs == R->ng) {
            R->out = R->in; /* the next step passes on what this one summed */
            if (++R->s == R->N - 1) {
                R->done = 1;
                return 0;
            }
            ZS_TRY(zs_ring_step(c, R));
        }
    }
    return 0;
}

/* Drive R to its end, at most the collective timeout (the clock read every
 * 64 polls, as zs_comm_finish). */
int zs_ring_finish(zs_comm_t c, zs_ring *R, long long seq)
{
    zs_deadline d;
    zs_deadline_start(&d, c->ledger->timeout_s);
    for (unsigned long i = 1;; i++) {
        ZS_TRY(zs_ring_advance(c, R));
        if (R->done)
            return 0;
        if ((i & 63) == 0 && zs_deadline_passed(&d))
            zs_comm_timed_out(c, c->counter, "reduce-scatter", seq);
    }
}

/* The largest of c's counts. */
static size_t zs_comm_max_count(zs_comm_t c, const int *counts)
{
    size_t maxc = 0;
    for (int r = 0; r < c->size; r++)
        if ((size_t)counts[r] > maxc)
            maxc = (size_t)counts[r];
    return maxc;
}

/* 1 when scratch holds a ring's two buffers of maxc elements of es bytes. */
static int zs_comm_scratch_holds(const void *scratch, size_t scratch_bytes, size_t maxc, size_t es)
{
    return scratch && 2 * maxc * es <= scratch_bytes;
}

/* 1 when the host algorithm on c is the ring (with the scratch given). */
int zs_comm_ring_fits(zs_comm_t c, const int *counts, zs_comm_type t, const void *scratch,
                             size_t scratch_bytes)
{
    /* two ranks receive straight into recv; more need the scratch */
    return !c->force_mpi_rs &&
           (c->size == 2 || zs_comm_scratch_holds(scratch, scratch_bytes,
                                                  zs_comm_max_count(c, counts),
                                                  zs_comm_type_size(t)));
}

static int zs_comm_reduce_scatter_host(zs_comm_t c, const void *send, void *recv,
                                       const int *counts, zs_comm_type t, void *scratch,
                                       size_t scratch_bytes);

/* Two-level reduce-scatter on host buffers (M nodes of K ranks, chunk q of
 * the buffer for rank q): inside the node, one ring per node block m of
 * chunks [mK, mK+K) leaves local rank i the node's sum of chunk mK+i, in
 * a temporary; then a ring across the M ranks of local index i sums those
 * into chunk jK+i for node j. Per element: the node's sum in ring order,
 * then the nodes' in ring order (the flat ring's order differs: equal
 * bytes where sums are exact, as in deterministic mode's integers). */
static int zs_comm_hier_reduce_scatter(zs_comm_t c, const void *send, void *recv,
                                       const int *counts, zs_comm_type t, void *scratch,
                                       size_t scratch_bytes)
{
    int K = c->hier_k, M = c->hier_m, i = c->rank % K;
    size_t es = zs_comm_type_size(t), mine = 0, maxc = zs_comm_max_count(c, counts), off = 0;
    int *cnt = malloc((size_t)M * sizeof(int));
    if (!cnt)
        ZS_FAIL("out of host memory in a hierarchical reduce-scatter");
    for (int m = 0; m < M; m++) {
        cnt[m] = counts[m * K + i];
        mine += (size_t)cnt[m];
    }
    char *tmp, *scr;
    if (c->hier_in && !c->staged) { /* counted (zs_comm_hier_counted) */
        tmp = c->hier_use;
        scr = zs_comm_scratch_holds(scratch, scratch_bytes, maxc, es) ? scratch : c->hier_scr;
    } else { /* the temporary, and the rings' scratch, outside the accounting */
        if (zs_comm_grow(&c->hier_tmp, &c->hier_tmp_cap, (mine + 2 * maxc) * es + 1)) {
            free(cnt);
            return -1;
        }
        tmp = c->hier_tmp;
        scr = tmp + mine * es;
    }
    int rc = 0;
    size_t pos = 0;
    for (int m = 0; m < M && !rc; m++) { /* inside the node, block by block */
        rc = zs_comm_reduce_scatter_host(c->hier_node, (const char *)send + off * es,
                                         tmp + pos * es, counts + (size_t)m * K, t, scr,
                                         2 * maxc * es);
        for (int q = 0; q < K; q++)
            off += (size_t)counts[m * K + q];
        pos += (size_t)cnt[m];
    }
    if (!rc) /* across the nodes */
        rc = zs_comm_reduce_scatter_host(c->hier_cross, tmp, recv, cnt, t, scr, 2 * maxc * es);
    free(cnt);
    return rc;
}

/* Two-level in-place allgather on a host buffer: across the nodes, the M
 * ranks of local index i exchange their chunks (jK+i for node j); then
 * inside the node, one allgather per node block m of chunks [mK, mK+K).
 * Pure copies: the same bytes as the flat one. Blocking. */
int zs_comm_hier_allgather_dt(zs_comm_t c, void *buf, const int *counts,
                                     const int *displs, MPI_Datatype dt)
{
    int K = c->hier_k, M = c->hier_m, i = c->rank % K;
    int *cnt = malloc((size_t)M * 2 * sizeof(int));
    MPI_Request *req = malloc((size_t)(M > 1 ? M : 1) * sizeof(MPI_Request));
    if (!cnt || !req) {
        free(cnt);
        free(req);
        ZS_FAIL("out of host memory in a hierarchical allgather");
    }
    for (int m = 0; m < M; m++) {
        cnt[m] = counts[m * K + i];
        cnt[M + m] = displs[m * K + i];
    }
    int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cnt, cnt + M, dt,
                             c->hier_cross->comm, &req[0]);
    if (rc == MPI_SUCCESS && zs_comm_finish(c->hier_cross, 1, req, c->seq, "allgather")) {
        free(cnt);
        free(req);
        return -1;
    }
    for (int m = 0; m < M && rc == MPI_SUCCESS; m++)
        rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts + (size_t)m * K,
                             displs + (size_t)m * K, dt, c->hier_node->comm, &req[m]);
    if (rc == MPI_SUCCESS && zs_comm_finish(c->hier_node, M, req, c->seq, "allgather")) {
        free(cnt);
        free(req);
        return -1;
    }
    free(cnt);
    free(req);
    return rc == MPI_SUCCESS ? 0 : zs_mpi_fail(rc, "hierarchical MPI_Iallgatherv");
}

int zs_comm_hier_allgather(zs_comm_t c, void *buf, const int *counts, const int *displs,
                                  zs_comm_type t)
{
    return zs_comm_hier_allgather_dt(c, buf, counts, displs, zs_mpi_type(t));
}

/* The host algorithm of zs_comm_reduce_scatter on host buffers, with the
 * ring's scratch `scratch` (NULL: none registered). Not recorded. */
static int zs_comm_reduce_scatter_host(zs_comm_t c, const void *send, void *recv,
                                       const int *counts, zs_comm_type t, void *scratch,
                                       size_t scratch_bytes)
{
    if (c->hier_node)
        return zs_comm_hier_reduce_scatter(c, send, recv, counts, t, scratch, scratch_bytes);
    if (zs_comm_ring_fits(c, counts, t, scratch, scratch_bytes)) {
        zs_ring *R;
        ZS_TRY(zs_ring_start(c, send, recv, counts, t, scratch, &R));
        int rc = zs_ring_finish(c, R, c->seq);
        zs_ring_free(R);
        return rc;
    }
    MPI_Request req;
    int rc = MPI_Ireduce_scatter(send, recv, counts, zs_mpi_type(t), zs_sum_op(c, t), c->comm,
                                 &req);
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, "MPI_Ireduce_scatter");
    return zs_comm_finish(c, 1, &req, c->seq, "reduce-scatter");
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

/* zs_comm_reduce_scatter's exchange, not recorded: a copy on one rank,
 * staged through the host for device buffers, else the host algorithm. */
int zs_comm_reduce_scatter_run(zs_comm_t c, const void *send, void *recv,
                                      const int *counts, zs_comm_type t, size_t total);

/* The two-level reduce-scatter's temporaries, counted in comm_buffers of
 * c's allocator (zs_comm_set_mem) from its start to its end, a phantom's
 * too (without storage): the node sums of this rank's column (the parts
 * mK + i of its local index i on every node m), sized for the largest
 * column of any local index so that every rank holds the same; and, where
 * the registered ring scratch is smaller than 2 * max(counts) elements,
 * a scratch of that size. Without an allocator: zs_comm_reduce_scatter_run. */
static int zs_comm_hier_counted(zs_comm_t c, const void *send, void *recv, const int *counts,
                                zs_comm_type t, size_t total)
{
    int K = c->hier_k, M = c->hier_m;
    size_t es = zs_comm_type_size(t), col = 0, maxc = zs_comm_max_count(c, counts);
    for (int i = 0; i < K; i++) {
        size_t n = 0;
        for (int m = 0; m < M; m++)
            n += (size_t)counts[m * K + i];
        if (n > col)
            col = n;
    }
    /* zs_comm_hier_reduce_scatter takes the registered scratch when it holds the ring */
    size_t tb = col * es, sb = 0;
    if (!zs_comm_scratch_holds(c->scratch, c->scratch_bytes, maxc, es))
        sb = 2 * maxc * es;
    void *tmp = NULL, *scr = NULL;
    ZS_TRY(zs_mem_alloc(c->mem, ZS_MEM_COMM_BUFFERS, tb, &tmp));
    int rc = zs_mem_alloc(c->mem, ZS_MEM_COMM_BUFFERS, sb, &scr);
    if (!rc) {
        c->hier_use = tmp;
        c->hier_scr = scr;
        c->hier_in = 1;
        rc = zs_comm_reduce_scatter_run(c, send, recv, counts, t, total);
        c->hier_in = 0;
        c->hier_use = c->hier_scr = NULL;
    }
    zs_mem_free(c->mem, ZS_MEM_COMM_BUFFERS, scr, sb);
    zs_mem_free(c->mem, ZS_MEM_COMM_BUFFERS, tmp, tb);
    return rc;
}

int zs_comm_reduce_scatter_run(zs_comm_t c, const void *send, void *recv,
                                      const int *counts, zs_comm_type t, size_t total)
{
    if (c->mem && c->hier && c->hier_k > 1 && c->hier_m > 1 && !c->hier_in)
        return zs_comm_hier_counted(c, send, recv, counts, t, total);
    if (c->phantom)
        return 0;
    if (c->size == 1) {
        if (c->staged)
            zs_backend_copy_d2d(c->be, recv, send, total * zs_comm_type_size(t));
        else
            memmove(recv, send, total * zs_comm_type_size(t));
        return 0;
    }
    zs_comm_enter(c);
    if (c->staged)
        return zs_comm_reduce_scatter_staged(c, send, recv, counts, t, total);
    return zs_comm_reduce_scatter_host(c, send, recv, counts, t, c->scratch, c->scratch_bytes);
}
