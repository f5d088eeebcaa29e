/* zerosim — ZeRO++ in comm: qwZ (forward allgathers in int8 blocks), hpZ (a
 * secondary group inside a node) and qgZ (the reduce-scatter as a two-level
 * all-to-all of 4-bit blocks). */
#include "comm_impl.h"
#include "zerosim/backend.h"
#include "zerosim/comm.h"
#include "zerosim/error.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- block quantization (ZeRO++ qwZ), kept here in comm ---------------
 * A part of n elements becomes ceil(n/256) fp32 scales (max |x| / 127 of
 * each block of 256) followed by n int8 values round(x / scale). */
#define ZS_QBLOCK 256

size_t zs_comm_q8_bytes(size_t n) { return n + 4 * ((n + ZS_QBLOCK - 1) / ZS_QBLOCK); }

static float zs_q_load(const void *x, size_t i, zs_comm_type t)
{
    if (t == ZS_CT_BF16)
        return zs_bf16_to_f32(((const uint16_t *)x)[i]);
    if (t == ZS_CT_F16)
        return zs_f16_to_f32(((const uint16_t *)x)[i]);
    return ((const float *)x)[i];
}

static void zs_q_store(void *x, size_t i, zs_comm_type t, float v)
{
    if (t == ZS_CT_BF16)
        ((uint16_t *)x)[i] = zs_f32_to_bf16(v);
    else if (t == ZS_CT_F16)
        ((uint16_t *)x)[i] = zs_f32_to_f16(v);
    else
        ((float *)x)[i] = v;
}

static void zs_q8_encode(const void *x, size_t n, zs_comm_type t, unsigned char *out)
{
    size_t nb = (n + ZS_QBLOCK - 1) / ZS_QBLOCK;
    float *scale = (float *)(void *)out;
    signed char *q = (signed char *)out + 4 * nb;
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * ZS_QBLOCK, hi = lo + ZS_QBLOCK < n ? lo + ZS_QBLOCK : n;
        float m = 0.0f;
        for (size_t i = lo; i < hi; i++) {
            float a = fabsf(zs_q_load(x, i, t));
            m = a > m ? a : m;
        }
        float sc = m / 127.0f;
        memcpy(&scale[b], &sc, sizeof sc);
        for (size_t i = lo; i < hi; i++) {
            float v = sc > 0.0f ? zs_q_load(x, i, t) / sc : 0.0f;
            long r = lrintf(v);
            q[i] = (signed char)(r > 127 ? 127 : r < -127 ? -127 : r);
        }
    }
}

void zs_q8_decode(const unsigned char *in, size_t n, zs_comm_type t, void *x)
{
    size_t nb = (n + ZS_QBLOCK - 1) / ZS_QBLOCK;
    const signed char *q = (const signed char *)in + 4 * nb;
    for (size_t b = 0; b < nb; b++) {
        float sc;
        memcpy(&sc, in + 4 * b, sizeof sc);
        size_t lo = b * ZS_QBLOCK, hi = lo + ZS_QBLOCK < n ? lo + ZS_QBLOCK : n;
        for (size_t i = lo; i < hi; i++)
            zs_q_store(x, i, t, (float)q[i] * sc);
    }
}

int zs_comm_set_quantized_weights(zs_comm_t c, int on)
{
    if (on && c->staged)
        ZS_FAIL("zero_quantized_weights (qwZ) runs on host buffers only: use --backend cpu");
    c->qwz = on != 0;
    return 0;
}

/* qwZ's encoded parts: back to the allocator they came from. */
void zs_comm_qbuf_free(zs_comm_pending *p)
{
    if (p->qmem)
        zs_mem_free(p->qmem, ZS_MEM_COMM_BUFFERS, p->qbuf, p->qbytes);
    else
        free(p->qbuf);
    p->qbuf = NULL;
    p->qmem = NULL;
}

/* qwZ: each rank's part in int8 blocks (zs_comm_q8_bytes of its count),
 * gathered as bytes; every part, this rank's too, is decoded into buf on
 * wait, so that every rank computes with the same parameters. Recorded as
 * an allgather of the encoded bytes. The encoded buffer is counted in
 * comm_buffers of c's allocator (zs_comm_set_mem) from here to the wait;
 * without one it is host memory outside the accounting. */
int zs_comm_iallgather_q8(zs_comm_t c, void *buf, const int *counts, const int *displs,
                                 zs_comm_type t, int layer, zs_comm_pending *p, void **request)
{
    int N = c->size;
    size_t qtotal = 0;
    for (int r = 0; r < N; r++)
        qtotal += zs_comm_q8_bytes((size_t)counts[r]);
    p->r = zs_comm_rec(c, ZS_OP_ALLGATHER, layer, qtotal, ZS_CT_NTYPES);
    p->r.elem_size = 1;
    { /* the record's bytes, as zs_comm_rec computes them, over bytes */
        zs_comm_record q = zs_comm_rec(c, ZS_OP_ALLGATHER, layer, qtotal, ZS_CT_F32);
        p->r.wire_bytes = q.wire_bytes / 4;
        p->r.inter_bytes = q.inter_bytes / 4;
        p->r.inter_api_bytes = q.inter_api_bytes / 4;
    }
    if (qtotal > (size_t)INT_MAX && N > 1 && !c->phantom) {
        free(p);
        ZS_FAIL("a quantized allgather of %zu bytes is more than one MPI call can carry", qtotal);
    }
    /* the encoded parts: counted in comm_buffers until the wait (a phantom
     * run counts them too, without storage) */
    if (c->mem) {
        if (zs_mem_alloc(c->mem, ZS_MEM_COMM_BUFFERS, qtotal, &p->qbuf)) {
            free(p);
            return -1;
        }
        p->qmem = c->mem;
        p->qbytes = qtotal;
    }
    if (N == 1 || c->phantom) {
        p->req = MPI_REQUEST_NULL;
        *request = p;
        return 0;
    }
    p->t0 = zs_mpi_wtime();
    p->seq = zs_comm_enter(c);
    if (!p->qmem)
        p->qbuf = malloc(qtotal + 1);
    p->qcounts = malloc((size_t)N * 4 * sizeof(int));
    if (!p->qbuf || !p->qcounts) {
        zs_comm_qbuf_free(p);
        free(p->qcounts);
        free(p);
        ZS_FAIL("out of host memory for a quantized allgather of %zu bytes", qtotal);
    }
    p->qdispls = p->qcounts + N;
    p->ecounts = p->qcounts + 2 * N;
    p->edispls = p->qcounts + 3 * N;
    size_t off = 0;
    for (int r = 0; r < N; r++) {
        p->qcounts[r] = (int)zs_comm_q8_bytes((size_t)counts[r]);
        p->qdispls[r] = (int)off;
        p->ecounts[r] = counts[r];
        p->edispls[r] = displs[r];
        off += (size_t)p->qcounts[r];
    }
    p->qdst = buf;
    p->qt = t;
    size_t es = zs_comm_type_size(t);
    zs_q8_encode((const char *)buf + (size_t)displs[c->rank] * es, (size_t)counts[c->rank], t,
                 (unsigned char *)p->qbuf + p->qdispls[c->rank]);
    int rc;
    if (c->hier_node) {
        rc = zs_comm_hier_allgather_dt(c, p->qbuf, p->qcounts, p->qdispls, MPI_BYTE);
        p->req = MPI_REQUEST_NULL;
    } else {
        rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p->qbuf, p->qcounts, p->qdispls,
                             MPI_BYTE, c->comm, &p->req);
        rc = rc == MPI_SUCCESS ? 0 : zs_mpi_fail(rc, "MPI_Iallgatherv of quantized parameters");
    }
    if (rc) {
        zs_comm_qbuf_free(p);
        free(p->qcounts);
        free(p);
        return rc;
    }
    *request = p;
    return 0;
}

/* ---- ZeRO++ hpZ and qgZ -------------------------------------------------- */

void zs_comm_zpp_free(zs_comm_t c)
{
    zs_comm_free(c->hpz);
    zs_comm_free(c->qg_node);
    zs_comm_free(c->qg_cross);
    c->hpz = c->qg_node = c->qg_cross = NULL;
    c->qgz = 0;
}

/* sub's world ranks: c's ranks first, first + stride, ... (a phantom split
 * cannot ask MPI), so that its nodes are known. */
static int zs_comm_sub_nodes(zs_comm_t c, zs_comm_t sub, int first, int stride)
{
    if (sub->world_of)
        return 0;
    int *w = malloc((size_t)sub->size * sizeof(int));
    if (!w)
        ZS_FAIL("out of host memory for a %s group's ranks", zs_comm_group_name(c->group));
    for (int t = 0; t < sub->size; t++) {
        int q = first + t * stride;
        w[t] = c->world_of ? c->world_of[q] : q;
    }
    int rc = zs_comm_set_world_ranks(sub, w);
    free(w);
    return rc;
}

int zs_comm_set_hpz(zs_comm_t c, int K)
{
    zs_comm_free(c->hpz);
    c->hpz = NULL;
    if (K <= 1)
        return 0;
    int N = c->size;
    if (N % K)
        ZS_FAIL("zero_hpz_partition_size %d must divide the %d ranks of the %s group: use a "
                "divisor of %d", K, N, zs_comm_group_name(c->group), N);
    for (int q = 0; q < N; q++)
        if (zs_comm_node_of(c, q) != zs_comm_node_of(c, q - q % K))
            ZS_FAIL("zero_hpz_partition_size %d: ranks %d-%d of the %s group are not on one node, "
                    "and hpZ's secondary groups must stay inside a node: use a divisor of the "
                    "ranks per node", K, q - q % K, q - q % K + K - 1,
                    zs_comm_group_name(c->group));
    int me = c->rank;
    ZS_TRY(zs_comm_split(c, me / K, me % K, K, me % K, c->group, &c->hpz));
    int rc = zs_comm_sub_nodes(c, c->hpz, me - me % K, 1);
    if (rc) {
        zs_comm_free(c->hpz);
        c->hpz = NULL;
    }
    return rc;
}

zs_comm_t zs_comm_hpz(zs_comm_t c) { return c->hpz; }

int zs_comm_qgz_ranks_per_node(zs_comm_t c) { return c->qgz ? c->qg_k : 0; }

int zs_comm_set_quantized_gradients(zs_comm_t c, int on)
{
    zs_comm_free(c->qg_node);
    zs_comm_free(c->qg_cross);
    c->qg_node = c->qg_cross = NULL;
    c->qgz = 0;
    if (!on)
        return 0;
    if (c->staged)
        ZS_FAIL("zero_quantized_gradients (qgZ) runs on host buffers only: use --backend cpu");
    int N = c->size, K = zs_comm_node_blocks(c);
    if (!K)
        ZS_FAIL("zero_quantized_gradients (qgZ) needs the %s group's %d ranks in nodes of equal "
                "size, each of consecutive ranks (--ranks-per-node K, K dividing the group)",
                zs_comm_group_name(c->group), N);
    int i = c->rank % K, j = c->rank / K, M = N / K;
    int rc = zs_comm_split(c, j, i, K, i, c->group, &c->qg_node);
    if (!rc)
        rc = zs_comm_sub_nodes(c, c->qg_node, j * K, 1);
    if (!rc)
        rc = zs_comm_split(c, N + i, j, M, j, c->group, &c->qg_cross);
    if (!rc)
        rc = zs_comm_sub_nodes(c, c->qg_cross, i, K);
    if (rc) {
        zs_comm_free(c->qg_node);
        zs_comm_free(c->qg_cross);
        c->qg_node = c->qg_cross = NULL;
        return rc;
    }
    c->qgz = 1;
    c->qg_k = K;
    c->qg_m = M;
    return 0;
}

/* 4-bit blocks: a part of n elements becomes ceil(n/256) fp32 scales
 * (max |x| / 7 of each block; NaN for a block holding an inf or NaN, so
 * that the loss scaler still sees the overflow) followed by ceil(n/2)
 * bytes, two signed nibbles round(x / scale) in [-7, 7] each, the first in
 * the low half. */
size_t zs_comm_q4_bytes(size_t n) { return (n + 1) / 2 + 4 * ((n + ZS_QBLOCK - 1) / ZS_QBLOCK); }

static void zs_q4_encode(const float *x, size_t n, unsigned char *out)
{
    size_t nb = (n + ZS_QBLOCK - 1) / ZS_QBLOCK;
    unsigned char *q = out + 4 * nb;
    memset(q, 0, (n + 1) / 2);
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * ZS_QBLOCK, hi = lo + ZS_QBLOCK < n ? lo + ZS_QBLOCK : n;
        float m = 0.0f;
        int bad = 0; /* an inf or NaN (an fp16 overflow) stays one after decoding */
        for (size_t i = lo; i < hi; i++) {
            m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
            bad |= !isfinite(x[i]);
        }
        float sc = bad ? NAN : m / 7.0f;
        memcpy(out + 4 * b, &sc, sizeof sc);
        for (size_t i = lo; i < hi; i++) {
            long r = sc > 0.0f ? lrintf(x[i] / sc) : 0;
            r = r > 7 ? 7 : r < -7 ? -7 : r;
            q[i / 2] |= (unsigned char)(((unsigned)r & 0xFu) << (4 * (i & 1)));
        }
    }
}

/* acc[i] += the decoded value i */
static void zs_q4_decode_add(const unsigned char *in, size_t n, float *acc)
{
    size_t nb = (n + ZS_QBLOCK - 1) / ZS_QBLOCK;
    const unsigned char *q = in + 4 * nb;
    for (size_t b = 0; b < nb; b++) {
        float sc;
        memcpy(&sc, in + 4 * b, sizeof sc);
        size_t lo = b * ZS_QBLOCK, hi = lo + ZS_QBLOCK < n ? lo + ZS_QBLOCK : n;
        for (size_t i = lo; i < hi; i++) {
            int v = (q[i / 2] >> (4 * (i & 1))) & 0xF;
            acc[i] += (float)(v >= 8 ? v - 16 : v) * sc;
        }
    }
}

void zs_comm_quant_passes(const float *x, size_t n, unsigned char *enc, float *out)
{
    zs_q8_encode(x, n, ZS_CT_F32, enc);
    zs_q8_decode(enc, n, ZS_CT_F32, out);
    zs_q4_encode(x, n, enc);
    zs_q4_decode_add(enc, n, out);
}

/* A collective's temporary of `bytes`: counted in comm_buffers of c's
 * allocator (zs_comm_set_mem) where it has one (a phantom's without
 * storage), else host memory (none for a phantom). */
static int zs_comm_tmp_alloc(zs_comm_t c, size_t bytes, void **out, const char *what)
{
    if (c->mem)
        return zs_mem_alloc(c->mem, ZS_MEM_COMM_BUFFERS, bytes, out);
    *out = NULL;
    if (c->phantom)
        return 0;
    *out = malloc(bytes + 1);
    if (!*out)
        ZS_FAIL("out of host memory for %s (%zu bytes)", what, bytes);
    return 0;
}

static void zs_comm_tmp_free(zs_comm_t c, void *p, size_t bytes)
{
    if (c->mem)
        zs_mem_free(c->mem, ZS_MEM_COMM_BUFFERS, p, bytes);
    else
        free(p);
}

/* One level of qgZ on sub (S ranks): to each member d, the parts
 * seg[d][0..P) (ne[d][p] elements each, fp32, in `src` at off[d][p]) in
 * 4-bit blocks; from each member, this member's parts, decoded and added in
 * member order into acc (P parts of my_ne[p] elements at my_off[p]).
 * Recorded as an all-to-all of the encoded bytes on sub (phantom: only
 * recorded; the buffers are not touched). The encoded send and receive
 * buffers are temporaries of c (zs_comm_tmp_alloc) of sbytes and rbytes,
 * at least what this rank sends and receives. */
static int zs_qgz_level(zs_comm_t c, zs_comm_t sub, int P, const float *src, const size_t *ne,
                        const size_t *off, const size_t *my_ne, const size_t *my_off, float *acc,
                        int layer, size_t sbytes, size_t rbytes)
{
    int S = sub->size, rc = 0;
    int *sc = calloc(4 * (size_t)S, sizeof(int));
    if (!sc)
        ZS_FAIL("out of host memory for qgZ's all-to-all");
    int *sd = sc + S, *rcn = sc + 2 * S, *rd = sc + 3 * S;
    size_t st = 0, rt = 0, mine = 0;
    for (int p = 0; p < P; p++)
        mine += zs_comm_q4_bytes(my_ne[p]);
    for (int d = 0; d < S; d++) {
        size_t b = 0;
        for (int p = 0; p < P; p++)
            b += zs_comm_q4_bytes(ne[(size_t)d * P + p]);
        sc[d] = (int)b;
        sd[d] = (int)st;
        rcn[d] = (int)mine;
        rd[d] = (int)rt;
        st += b;
        rt += mine;
    }
    if (st > (size_t)INT_MAX || rt > (size_t)INT_MAX) {
        free(sc);
        ZS_FAIL("a qgZ all-to-all of %zu bytes is more than one MPI call can carry",
                st > rt ? st : rt);
    }
    if (st > sbytes || rt > rbytes) {
        free(sc);
        ZS_FAIL("internal: qgZ's all-to-all needs %zu and %zu bytes, has %zu and %zu", st, rt,
                sbytes, rbytes);
    }
    void *sv = NULL, *rv = NULL;
    rc = zs_comm_tmp_alloc(c, sbytes, &sv, "qgZ's all-to-all");
    if (!rc)
        rc = zs_comm_tmp_alloc(c, rbytes, &rv, "qgZ's all-to-all");
    if (!rc && sub->phantom)
        rc = zs_comm_alltoallv_bytes(sub, NULL, sc, sd, NULL, rcn, rd, layer);
    else if (!rc) {
        unsigned char *sb = sv, *rb = rv;
        for (int d = 0; d < S; d++) {
            unsigned char *o = sb + sd[d];
            for (int p = 0; p < P; p++) {
                size_t n = ne[(size_t)d * P + p];
                zs_q4_encode(src + off[(size_t)d * P + p], n, o);
                o += zs_comm_q4_bytes(n);
            }
        }
        rc = zs_comm_alltoallv_bytes(sub, sb, sc, sd, rb, rcn, rd, layer);
        for (int d = 0; !rc && d < S; d++) { /* in member order */
            const unsigned char *in = rb + rd[d];
            for (int p = 0; p < P; p++) {
                zs_q4_decode_add(in, my_ne[p], acc + my_off[p]);
                in += zs_comm_q4_bytes(my_ne[p]);
            }
        }
    }
    zs_comm_tmp_free(c, rv, rbytes);
    zs_comm_tmp_free(c, sv, sbytes);
    free(sc);
    return rc;
}

/* qgZ's reduce-scatter of a buffer of N parts (counts[r] elements for rank
 * r, one after the other) over M nodes of K consecutive ranks; rank r =
 * jK + i. Inside the node: to local rank i' the parts of ranks mK + i'
 * (every m) in 4-bit blocks; this rank sums, in local order, what it gets:
 * the node's sum of the parts of its local index on every node. Across:
 * to node m the node sum of part mK + i in 4-bit blocks; this rank sums,
 * in node order, the M node sums of its own part, into recv (type t).
 * Its temporaries (zs_comm_tmp_alloc: comm_buffers where c has an
 * allocator), sized alike on every rank (col: the largest column
 * sum_m counts[mK + i'] of any local index i', col4 its largest sum of
 * encoded sizes, maxc the largest part): the fp32 copy of the buffer
 * (total elements) and the node sums (col) through the first level, with
 * its send buffer (every part encoded) and receive buffer (K * col4
 * bytes); then the node sums, the result (maxc) and the second level's
 * send (col4) and receive (M times the largest encoded part) buffers. */
void zs_comm_qgz_sizes(const int *counts, int N, int K, zs_qgz_sizes *out)
{
    int M = N / K;
    memset(out, 0, sizeof *out);
    for (int r = 0; r < N; r++) {
        size_t q4 = zs_comm_q4_bytes((size_t)counts[r]);
        out->total += (size_t)counts[r];
        out->all4 += q4;
        out->maxc = (size_t)counts[r] > out->maxc ? (size_t)counts[r] : out->maxc;
        out->maxq4 = q4 > out->maxq4 ? q4 : out->maxq4;
    }
    for (int d = 0; d < K; d++) { /* the column of local index d */
        size_t n = 0, n4 = 0;
        for (int m = 0; m < M; m++) {
            n += (size_t)counts[m * K + d];
            n4 += zs_comm_q4_bytes((size_t)counts[m * K + d]);
        }
        out->col = n > out->col ? n : out->col;
        out->col4 = n4 > out->col4 ? n4 : out->col4;
    }
    size_t first = (out->total + out->col) * sizeof(float) + out->all4 + (size_t)K * out->col4;
    size_t second = (out->col + out->maxc) * sizeof(float) + out->col4 + (size_t)M * out->maxq4;
    out->tmp_peak = first > second ? first : second;
}

double zs_comm_qgz_rank_bytes(const int *counts, int N, int K, int q, double *inter,
                              double *coded, double *passes)
{
    int M = N / K, i = q % K, j = q / K;
    double all = 0.0, across = 0.0, total = 0.0, col = 0.0;
    for (int r = 0; r < N; r++)
        total += counts[r];
    for (int d = 0; d < K; d++) /* inside the node: to local d, parts mK + d */
        for (int m = 0; d != i && m < M; m++)
            all += (double)zs_comm_q4_bytes((size_t)counts[m * K + d]);
    for (int m = 0; m < M; m++) { /* across: to node m, the node sum of part mK + i */
        col += counts[m * K + i];
        if (m != j)
            across += (double)zs_comm_q4_bytes((size_t)counts[m * K + i]);
    }
    *inter = across;
    *coded = total + K * col + col + M * (double)counts[q];
    *passes = total + counts[q];
    return all + across;
}

int zs_comm_qgz(zs_comm_t c, const void *send, void *recv, const int *counts,
                       zs_comm_type t, int layer)
{
    int N = c->size, K = c->qg_k, M = c->qg_m, i = c->rank % K;
    size_t total = zs_comm_total(c, counts), mineall = 0;
    size_t *displ = malloc((size_t)N * sizeof(size_t));
    size_t *ne = malloc(((size_t)K * M + 2 * (size_t)M + (size_t)K * M) * sizeof(size_t));
    if (!displ || !ne) {
        free(displ);
        free(ne);
        ZS_FAIL("out of host memory for qgZ");
    }
    size_t *off = ne + (size_t)K * M, *my_ne = off + (size_t)K * M, *my_off = my_ne + M;
    zs_qgz_sizes z;
    zs_comm_qgz_sizes(counts, N, K, &z);
    size_t at = 0, col = z.col, col4 = z.col4, maxc = z.maxc, maxq4 = z.maxq4, all4 = z.all4;
    for (int r = 0; r < N; r++) {
        displ[r] = at;
        at += (size_t)counts[r];
    }
    for (int d = 0; d < K; d++) /* inside: to local d, parts mK + d */
        for (int m = 0; m < M; m++) {
            ne[(size_t)d * M + m] = (size_t)counts[m * K + d];
            off[(size_t)d * M + m] = displ[m * K + d];
        }
    for (int m = 0; m < M; m++) {
        my_ne[m] = (size_t)counts[m * K + i];
        my_off[m] = mineall;
        mineall += my_ne[m];
    }
    void *xv = NULL, *av = NULL, *fv = NULL;
    size_t xb = total * sizeof(float), ab = col * sizeof(float), fb = maxc * sizeof(float);
    int rc = zs_comm_tmp_alloc(c, xb, &xv, "qgZ's reduction");
    if (!rc)
        rc = zs_comm_tmp_alloc(c, ab, &av, "qgZ's reduction");
    float *x = xv, *acc = av;
    if (!rc && !c->phantom) {
        if (ab)
            memset(acc, 0, ab);
        for (size_t e = 0; e < total; e++)
            x[e] = zs_q_load(send, e, t);
    }
    if (!rc)
        rc = zs_qgz_level(c, c->qg_node, M, x, ne, off, my_ne, my_off, acc, layer, all4,
                          (size_t)K * col4);
    zs_comm_tmp_free(c, xv, xb);
    if (!rc)
        rc = zs_comm_tmp_alloc(c, fb, &fv, "qgZ's reduction");
    float *fin = fv;
    if (!rc) { /* across: to node m, the node sum of part mK + i */
        size_t one = (size_t)counts[c->rank], zero = 0;
        if (!c->phantom && fb)
            memset(fin, 0, fb);
        rc = zs_qgz_level(c, c->qg_cross, 1, acc, my_ne, my_off, &one, &zero, fin, layer, col4,
                          (size_t)M * maxq4);
    }
    for (size_t e = 0; !rc && !c->phantom && e < (size_t)counts[c->rank]; e++)
        zs_q_store(recv, e, t, fin[e]);
    zs_comm_tmp_free(c, fv, fb);
    zs_comm_tmp_free(c, av, ab);
    free(displ);
    free(ne);
    return rc;
}
