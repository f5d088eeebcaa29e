/* zerosim — the portable backend ("ref").
 *
 * Every kernel's floating-point operations, and their order, depend on
 * nothing but the shapes: not on the CPU, its vector width, the BLAS, the C
 * library or the number of threads. A deterministic run (--deterministic)
 * on this backend therefore writes the same bytes on every machine that
 * does IEEE binary32/binary64 arithmetic with round-to-nearest (docs/
 * portable.md says exactly what is and is not guaranteed).
 *
 * It is the CPU backend's table with every kernel that is not already
 * portable replaced:
 *   - sgemm: ref_sgemm below, no BLAS (the order is stated there);
 *   - attention (GPT and grouped-query, forward and backward): the same tile
 *     code as the CPU's (cpu_attention.h) over ref_sgemm;
 *   - the exact sums of slices that tensor parallelism's sums use in a
 *     deterministic run (rows_absmax, grid_add, xent_slice_sums: below);
 *   - softmax_xent_forward, xent_vocab_finish: the CPU's loops
 *     (cpu_xent.h), with the project's logarithm (ref_math.h) in place of
 *     libm's logf.
 * The CPU's other kernels (LayerNorm, RMSNorm, GELU, SwiGLU, RoPE, the
 * embeddings, the optimizers, the conversions, the fixed-point sums) are
 * plain loops in a fixed order with the project's exp and tanh
 * (cpu_math.h) and only correctly rounded libm calls (sqrt, nearbyint,
 * ldexp); tests/check_kernels proves their SSE2, AVX2 and AVX-512 copies
 * give the same bytes. Nothing may fuse a multiply and an add: the whole
 * build compiles with -ffp-contract=off (configure.ac), and
 * tests/check_ref recomputes ref_sgemm's order with each product stored
 * through a volatile (so never fused) and compares the bytes.
 */
#include "backend/backend_impl.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_isa.h"
#include "backend/cpu_math.h"
#include "backend/cpu_attention.h"
#include "backend/cpu_xent.h"
#include "backend/ref_math.h"

#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "the ref backend needs float arithmetic evaluated in float (FLT_EVAL_METHOD 0)"
#endif

/* ---- GEMM ------------------------------------------------------------------
 * C(m,n) = alpha * S + beta * C (beta == 0: alpha * S, C not read), where
 * for each element, with a_k = op(A)[i][k] and b_k = op(B)[k][j]:
 *   P_q = (((0 + a_{64q} b_{64q}) + a_{64q+1} b_{64q+1}) + ...) over the
 *         q-th block of 64 values of k (the last one may be shorter),
 *   S   = ((0 + P_0) + P_1) + ... + P_{last}.
 * Each product is rounded, then added: no fused multiply-add. The code
 * computes REF_MR x REF_NR outputs at once, vectorised across the REF_NR
 * columns only (GCC/Clang vector extensions: the same IEEE operation in
 * each lane), so the width of the machine's vectors changes how many
 * outputs advance together, never an output's sums. Operands are packed
 * (op(B) in panels of REF_NR columns, op(A) in tiles of REF_MR rows, zero
 * padded) so that the inner loop reads contiguous memory. */
#define REF_KB 64  /* the reduction block: part of the result's definition */
#define REF_MR 6   /* rows per tile; speed only */
#define REF_NR 16  /* columns per panel (one vector); speed only */
#define REF_MC 96  /* rows of op(A) packed at a time; speed only */
#define REF_NC 128 /* columns of op(B) packed at a time; speed only */

typedef float ref_vec __attribute__((vector_size(REF_NR * sizeof(float))));

/* The backend's state: the GEMM's packing buffers (grown on demand). */
typedef struct {
    float *pack_a; /* REF_MC x K of op(A), in tiles of REF_MR rows */
    size_t pack_a_floats;
    float *pack_b; /* K x REF_NC of op(B), in panels of REF_NR columns */
    size_t pack_b_floats;
} ref_ctx;

/* buf with room for `floats` floats, 64-byte aligned; aborts when the host
 * is out of memory (a kernel cannot return an error). */
static float *ref_scratch(float **buf, size_t *have, size_t floats)
{
    if (floats <= *have)
        return *buf;
    free(*buf);
    size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    *buf = aligned_alloc(64, bytes);
    if (*buf == NULL) {
        fprintf(stderr, "zerosim: ref backend: out of host memory for GEMM packing (%zu bytes)\n",
                bytes);
        abort();
    }
    *have = floats;
    return *buf;
}

/* acc(MR,NR) = S of one tile over k values: ap is k x REF_MR (a tile of
 * op(A), row r of the tile at ap[kk * REF_MR + r]), bp is k x REF_NR. */
static inline __attribute__((always_inline)) void
ref_gemm_tile(float *restrict acc, const float *restrict ap, const float *restrict bp, int k)
{
    ref_vec s[REF_MR];
    for (int r = 0; r < REF_MR; r++)
        s[r] = (ref_vec){ 0 };
    for (int k0 = 0; k0 < k; k0 += REF_KB) {
        int k1 = k0 + REF_KB < k ? k0 + REF_KB : k;
        ref_vec p0 = { 0 }, p1 = { 0 }, p2 = { 0 }, p3 = { 0 }, p4 = { 0 }, p5 = { 0 };
        for (int kk = k0; kk < k1; kk++) {
            ref_vec bv = *(const ref_vec *)(bp + (size_t)kk * REF_NR);
            const float *a = ap + (size_t)kk * REF_MR;
            p0 += a[0] * bv;
            p1 += a[1] * bv;
            p2 += a[2] * bv;
            p3 += a[3] * bv;
            p4 += a[4] * bv;
            p5 += a[5] * bv;
        }
        s[0] += p0;
        s[1] += p1;
        s[2] += p2;
        s[3] += p3;
        s[4] += p4;
        s[5] += p5;
    }
    for (int r = 0; r < REF_MR; r++)
        memcpy(acc + r * REF_NR, &s[r], sizeof s[r]);
}

/* Pack op(B)[0:k, j0:j0+nc] into panels of REF_NR columns (zero padded). */
static inline __attribute__((always_inline)) void
ref_pack_b(float *restrict dst, int trans_b, const float *b, int ldb, int k, int j0, int nc)
{
    for (int p = 0; p < nc; p += REF_NR) {
        float *panel = dst + (size_t)p * k;
        int w = nc - p < REF_NR ? nc - p : REF_NR;
        for (int kk = 0; kk < k; kk++) {
            float *row = panel + (size_t)kk * REF_NR;
            for (int jj = 0; jj < w; jj++) {
                size_t j = (size_t)(j0 + p + jj);
                row[jj] = trans_b ? b[j * ldb + kk] : b[(size_t)kk * ldb + j];
            }
            for (int jj = w; jj < REF_NR; jj++)
                row[jj] = 0.0f;
        }
    }
}

/* Pack op(A)[i0:i0+mc, 0:k] into tiles of REF_MR rows (zero padded). */
static inline __attribute__((always_inline)) void
ref_pack_a(float *restrict dst, int trans_a, const float *a, int lda, int k, int i0, int mc)
{
    for (int t = 0; t < mc; t += REF_MR) {
        float *tile = dst + (size_t)t * k;
        int h = mc - t < REF_MR ? mc - t : REF_MR;
        for (int kk = 0; kk < k; kk++) {
            float *col = tile + (size_t)kk * REF_MR;
            for (int r = 0; r < h; r++) {
                size_t i = (size_t)(i0 + t + r);
                col[r] = trans_a ? a[(size_t)kk * lda + i] : a[i * lda + kk];
            }
            for (int r = h; r < REF_MR; r++)
                col[r] = 0.0f;
        }
    }
}

ZS_CPU_BODY ref_sgemm_body(void *ctx, int trans_a, int trans_b, int m, int n, int k, float alpha,
                           const float *a, int lda, const float *b, int ldb, float beta, float *c,
                           int ldc)
{
    ref_ctx *rc = ctx;
    size_t kz = k > 0 ? (size_t)k : 1;
    int mc_pad = (REF_MC + REF_MR - 1) / REF_MR * REF_MR;
    float *pb = ref_scratch(&rc->pack_b, &rc->pack_b_floats, kz * REF_NC);
    float *pa = ref_scratch(&rc->pack_a, &rc->pack_a_floats, kz * (size_t)mc_pad);
    float acc[REF_MR * REF_NR] __attribute__((aligned(64)));
    for (int jc = 0; jc < n; jc += REF_NC) {
        int nc = n - jc < REF_NC ? n - jc : REF_NC;
        ref_pack_b(pb, trans_b, b, ldb, k, jc, nc);
        for (int ic = 0; ic < m; ic += REF_MC) {
            int mc = m - ic < REF_MC ? m - ic : REF_MC;
            ref_pack_a(pa, trans_a, a, lda, k, ic, mc);
            for (int p = 0; p < nc; p += REF_NR) {
                int w = nc - p < REF_NR ? nc - p : REF_NR;
                for (int t = 0; t < mc; t += REF_MR) {
                    int h = mc - t < REF_MR ? mc - t : REF_MR;
                    ref_gemm_tile(acc, pa + (size_t)t * k, pb + (size_t)p * k, k);
                    for (int r = 0; r < h; r++) {
                        float *crow = c + (size_t)(ic + t + r) * ldc + jc + p;
                        const float *srow = acc + r * REF_NR;
                        if (beta == 0.0f)
                            for (int jj = 0; jj < w; jj++)
                                crow[jj] = alpha * srow[jj];
                        else
                            for (int jj = 0; jj < w; jj++)
                                crow[jj] = alpha * srow[jj] + beta * crow[jj];
                    }
                }
            }
        }
    }
}
ZS_CPU_KERNEL(ref_sgemm, (void *ctx, int trans_a, int trans_b, int m, int n, int k, float alpha,
               const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc),
              (ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))

/* ---- attention: cpu_attention.h's tiles over ref_sgemm -------------------- */

static void ref_attention_gqa_forward(void *ctx, float *out, float *preatt, float *att,
                                      const float *qkv, int b, int t, int nh, int nkv, int hd)
{
    zs_attention_gqa_forward_with(ref_sgemm, ctx, out, preatt, att, qkv, b, t, nh, nkv, hd);
}

static void ref_attention_forward(void *ctx, float *out, float *preatt, float *att,
                                  const float *qkv, int b, int t, int c, int nh)
{
    zs_attention_gqa_forward_with(ref_sgemm, ctx, out, preatt, att, qkv, b, t, nh, nh, c / nh);
}

static void ref_attention_gqa_backward(void *ctx, float *dqkv, float *dpreatt, float *datt,
                                       const float *dout, const float *qkv, const float *att,
                                       int b, int t, int nh, int nkv, int hd)
{
    zs_attention_gqa_backward_with(ref_sgemm, ctx, dqkv, dpreatt, datt, dout, qkv, att, b, t, nh,
                                   nkv, hd);
}

static void ref_attention_backward(void *ctx, float *dqkv, float *dpreatt, float *datt,
                                   const float *dout, const float *qkv, const float *att, int b,
                                   int t, int c, int nh)
{
    zs_attention_gqa_backward_with(ref_sgemm, ctx, dqkv, dpreatt, datt, dout, qkv, att, b, t, nh,
                                   nh, c / nh);
}

/* ---- the loss: cpu_xent.h's loops with zs_ref_logf ------------------------ */

/* losses (BT); probs, logits (BT,V); targets (BT) (cpu_xent.h) */
ZS_CPU_BODY ref_softmax_xent_forward_body(void *ctx, float *losses, float *probs,
                                          const float *logits, const int32_t *targets, int bt,
                                          int v)
{
    (void)ctx;
    zs_xent_softmax_forward_rows(zs_ref_logf, losses, probs, logits, targets, bt, v);
}
ZS_CPU_KERNEL(ref_softmax_xent_forward, (void *ctx, float *losses, float *probs,
               const float *logits, const int32_t *targets, int bt, int v),
              (ctx, losses, probs, logits, targets, bt, v))

/* The vocabulary-parallel loss's last pass (see backend_impl.h). */
ZS_CPU_BODY ref_xent_vocab_finish_body(void *ctx, float *losses, float *probs, const float *logits,
                                       const float *rowmax, const float *sums, int bt, int v)
{
    (void)ctx;
    zs_xent_vocab_finish_rows(zs_ref_logf, losses, probs, logits, rowmax, sums, bt, v);
}
ZS_CPU_KERNEL(ref_xent_vocab_finish, (void *ctx, float *losses, float *probs, const float *logits,
               const float *rowmax, const float *sums, int bt, int v),
              (ctx, losses, probs, logits, rowmax, sums, bt, v))

/* ---- exact sums of slices (backend_impl.h; docs/portable.md) --------------
 * Tensor parallelism splits a reduction between ranks; with deterministic
 * sums the model cuts it into fixed slices, computes each slice's result
 * with ref_sgemm (or the loss's sums), and adds the slices on a grid of
 * their row on which float addition is exact, so the result is the same
 * whichever rank computed which slice and in whatever order the group's
 * sum adds them. Plain loops in index order; the rounding is one double
 * addition of a power-of-two multiple (round to nearest, ties to even)
 * and its exact subtraction. */

static void ref_rows_absmax(void *ctx, float *rowmax, const float *x, int rows, int n)
{
    (void)ctx;
    for (int i = 0; i < rows; i++) {
        const float *row = x + (size_t)i * n;
        float m = rowmax[i];
        for (int j = 0; j < n; j++) {
            float v = fabsf(row[j]);
            if (v > m || v != v) /* a NaN stays */
                m = v;
        }
        rowmax[i] = m;
    }
}

static void ref_grid_add(void *ctx, float *out, const float *x, const float *rowmax, int rows,
                         int n, int slices)
{
    (void)ctx;
    int lg = 0;
    while ((1 << lg) < slices)
        lg++;
    for (int i = 0; i < rows; i++) {
        float *o = out + (size_t)i * n;
        const float *row = x + (size_t)i * n;
        float m = rowmax[i];
        if (!(m > 0.0f) || !isfinite(m)) {
            for (int j = 0; j < n; j++)
                o[j] += row[j];
            continue;
        }
        int e;
        (void)frexpf(m, &e); /* m < 2^e */
        int ge = e + lg - 24;
        if (ge < -149)
            ge = -149;
        /* v + 1.5 2^(ge+52) - 1.5 2^(ge+52) in double rounds v (|v| <
         * 2^(ge+24) here) to a multiple of 2^ge, to nearest, ties to even:
         * nearbyint(v 2^-ge) 2^ge, without a call */
        double shift = ldexp(1.5, ge + 52);
        for (int j = 0; j < n; j++) {
            double up = (double)row[j] + shift;
            o[j] += (float)(up - shift);
        }
    }
}

static void ref_xent_slice_sums(void *ctx, float *sums, const float *logits, const float *rowmax,
                                int bt, int ld, int j0, int vn)
{
    (void)ctx;
    for (int i = 0; i < bt; i++) {
        const float *z = logits + (size_t)i * ld + j0;
        float s = 0.0f;
        for (int j = 0; j < vn; j++)
            s += zs_cpu_expf(z[j] - rowmax[i]);
        sums[i] = s;
    }
}

/* ---- the table -------------------------------------------------------------- */

static void ref_release(void *ctx)
{
    ref_ctx *rc = ctx;
    if (rc == NULL)
        return;
    free(rc->pack_a);
    free(rc->pack_b);
    free(rc);
}

/* The CPU backend's table (which chooses the instruction set its kernels
 * and ref_sgemm run in: the same bytes in each) with the kernels above. */
int zs_backend_ref_init(struct zs_backend *be, int device, char *err, size_t errlen)
{
    static struct zs_backend_i ref_iface;
    if (zs_backend_cpu_init(be, device, err, errlen) != 0)
        return -1;
    ref_ctx *rc = calloc(1, sizeof *rc);
    if (rc == NULL) {
        snprintf(err, errlen, "out of host memory creating the ref backend");
        return -1;
    }
    ref_iface = *be->iface;
    ref_iface.name = "ref";
    ref_iface.release = ref_release;
    ref_iface.sgemm = ref_sgemm;
    ref_iface.attention_forward = ref_attention_forward;
    ref_iface.attention_backward = ref_attention_backward;
    ref_iface.attention_gqa_forward = ref_attention_gqa_forward;
    ref_iface.attention_gqa_backward = ref_attention_gqa_backward;
    ref_iface.softmax_xent_forward = ref_softmax_xent_forward;
    ref_iface.xent_vocab_finish = ref_xent_vocab_finish;
    ref_iface.rows_absmax = ref_rows_absmax;
    ref_iface.grid_add = ref_grid_add;
    ref_iface.xent_slice_sums = ref_xent_slice_sums;
    be->iface = &ref_iface;
    be->ctx = rc;
    return 0;
}
