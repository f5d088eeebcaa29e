/* zerosim — the CPU backend.
 *
 * Device memory is host memory. sgemm goes to OpenBLAS with one thread (so a
 * rank's results do not depend on the machine's core count); every other
 * kernel is a plain loop in llm.c style: outputs, then inputs, then
 * dimensions; backward kernels accumulate (+=) unless the header says they
 * overwrite. No OpenMP, no data-dependent ordering: results are deterministic.
 * This is the only file of zerosim that includes cblas.h.
 */
#include "backend/backend_impl.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

/* OpenBLAS extension; declared here in case the cblas.h found is not
 * OpenBLAS's own (a compatible redeclaration otherwise). */
void openblas_set_num_threads(int);

#define ZS_CPU_ALIGN 64
#define ZS_LN_EPS 1e-5f

#include "backend/cpu_isa.h"
#include "backend/cpu_llama.h"
#include "backend/cpu_math.h"
#include "backend/cpu_attention.h"
#include "backend/cpu_xent.h"

/* ---- instruction sets -------------------------------------------------------
 * (cpu_isa.h: each kernel in SSE2, AVX2 and AVX-512F, with the same bytes) */
int zs_cpu_isa = ZS_CPU_SSE2;
static const char *const cpu_isa_names[] = { "sse2", "avx2", "avx512" };

/* Whether this CPU (and its OS) runs instruction set isa. */
static int cpu_isa_supported(int isa)
{
#if ZS_CPU_HAVE_ISAS
    __builtin_cpu_init();
    if (isa == ZS_CPU_AVX512)
        return __builtin_cpu_supports("avx512f");
    if (isa == ZS_CPU_AVX2)
        return __builtin_cpu_supports("avx2");
#endif
    return isa == ZS_CPU_SSE2;
}

/* cpu_isa from ZEROSIM_CPU_KERNELS (auto when unset); 0, or -1 with err. */
static int cpu_isa_choose(char *err, size_t errlen)
{
    const char *want = getenv("ZEROSIM_CPU_KERNELS");
    if (want == NULL || *want == '\0' || strcmp(want, "auto") == 0) {
        zs_cpu_isa = cpu_isa_supported(ZS_CPU_AVX512) ? ZS_CPU_AVX512
                  : cpu_isa_supported(ZS_CPU_AVX2) ? ZS_CPU_AVX2
                                                   : ZS_CPU_SSE2;
        return 0;
    }
    for (int isa = ZS_CPU_SSE2; isa <= ZS_CPU_AVX512; isa++) {
        if (strcmp(want, cpu_isa_names[isa]) != 0)
            continue;
        if (!cpu_isa_supported(isa)) {
            snprintf(err, errlen,
                     "ZEROSIM_CPU_KERNELS=%s: this CPU (or this build) does not run %s; use auto, "
                     "or an instruction set it has",
                     want, want);
            return -1;
        }
        zs_cpu_isa = isa;
        return 0;
    }
    snprintf(err, errlen, "ZEROSIM_CPU_KERNELS=%s: must be auto, sse2, avx2 or avx512", want);
    return -1;
}

/* The instruction set that the CPU backend's kernels run in ("sse2", "avx2"
 * or "avx512"). */
const char *zs_backend_cpu_kernels(void)
{
    return cpu_isa_names[zs_cpu_isa];
}

/* ---- tensor parallelism ---------------------------------------------------- */

ZS_CPU_BODY cpu_vocab_embedding_forward_body(void *ctx, float *out, const int32_t *tokens,
                                             const float *wte, int v0, int vn, const float *wpe,
                                             int b, int t, int c)
{
    (void)ctx;
    for (int bi = 0; bi < b; bi++)
        for (int ti = 0; ti < t; ti++) {
            size_t row = (size_t)bi * t + ti;
            float *o = out + row * c;
            int tok = tokens[row] - v0;
            const float *pe = wpe ? wpe + (size_t)ti * c : NULL;
            if (tok >= 0 && tok < vn) {
                const float *te = wte + (size_t)tok * c;
                for (int j = 0; j < c; j++)
                    o[j] = pe ? te[j] + pe[j] : te[j];
            } else {
                for (int j = 0; j < c; j++)
                    o[j] = pe ? pe[j] : 0.0f;
            }
        }
}
ZS_CPU_KERNEL(cpu_vocab_embedding_forward, (void *ctx, float *out, const int32_t *tokens,
               const float *wte, int v0, int vn, const float *wpe, int b, int t, int c),
              (ctx, out, tokens, wte, v0, vn, wpe, b, t, c))

ZS_CPU_BODY cpu_vocab_embedding_backward_body(void *ctx, float *dwte, float *dwpe,
                                              const float *dout, const int32_t *tokens, int v0,
                                              int vn, int b, int t, int c)
{
    (void)ctx;
    for (int bi = 0; bi < b; bi++)
        for (int ti = 0; ti < t; ti++) {
            size_t row = (size_t)bi * t + ti;
            const float *d = dout + row * c;
            int tok = tokens[row] - v0;
            if (tok >= 0 && tok < vn) {
                float *dte = dwte + (size_t)tok * c;
                for (int j = 0; j < c; j++)
                    dte[j] += d[j];
            }
            if (dwpe) {
                float *dpe = dwpe + (size_t)ti * c;
                for (int j = 0; j < c; j++)
                    dpe[j] += d[j];
            }
        }
}
ZS_CPU_KERNEL(cpu_vocab_embedding_backward, (void *ctx, float *dwte, float *dwpe, const float *dout,
               const int32_t *tokens, int v0, int vn, int b, int t, int c),
              (ctx, dwte, dwpe, dout, tokens, v0, vn, b, t, c))

ZS_CPU_BODY cpu_xent_vocab_max_body(void *ctx, float *rowmax, const float *logits, int bt, int v)
{
    (void)ctx;
    for (int i = 0; i < bt; i++) {
        const float *z = logits + (size_t)i * v;
        float m = -INFINITY;
        for (int j = 0; j < v; j++)
            if (z[j] > m)
                m = z[j];
        rowmax[i] = m;
    }
}
ZS_CPU_KERNEL(cpu_xent_vocab_max, (void *ctx, float *rowmax, const float *logits, int bt, int v),
              (ctx, rowmax, logits, bt, v))

ZS_CPU_BODY cpu_xent_vocab_sums_body(void *ctx, float *sums, const float *logits,
                                     const float *rowmax, const int32_t *targets, int v0, int bt,
                                     int v)
{
    (void)ctx;
    for (int i = 0; i < bt; i++) {
        const float *z = logits + (size_t)i * v;
        float s = 0.0f;
        for (int j = 0; j < v; j++)
            s += zs_cpu_expf(z[j] - rowmax[i]);
        sums[i] = s;
        int tg = targets[i] - v0;
        sums[bt + i] = tg >= 0 && tg < v ? z[tg] : 0.0f;
    }
}
ZS_CPU_KERNEL(cpu_xent_vocab_sums, (void *ctx, float *sums, const float *logits,
               const float *rowmax, const int32_t *targets, int v0, int bt, int v),
              (ctx, sums, logits, rowmax, targets, v0, bt, v))

ZS_CPU_BODY cpu_xent_vocab_finish_body(void *ctx, float *losses, float *probs, const float *logits,
                                       const float *rowmax, const float *sums, int bt, int v)
{
    (void)ctx;
    zs_xent_vocab_finish_rows(logf, losses, probs, logits, rowmax, sums, bt, v);
}
ZS_CPU_KERNEL(cpu_xent_vocab_finish, (void *ctx, float *losses, float *probs, const float *logits,
               const float *rowmax, const float *sums, int bt, int v),
              (ctx, losses, probs, logits, rowmax, sums, bt, v))

ZS_CPU_BODY cpu_xent_vocab_backward_body(void *ctx, float *dlogits, const float *probs,
                                         const int32_t *targets, int v0, float dloss, int bt, int v)
{
    (void)ctx;
    for (int i = 0; i < bt; i++) {
        const float *p = probs + (size_t)i * v;
        float *d = dlogits + (size_t)i * v;
        int tg = targets[i] - v0;
        for (int j = 0; j < v; j++)
            d[j] = dloss * (p[j] - (j == tg ? 1.0f : 0.0f));
    }
}
ZS_CPU_KERNEL(cpu_xent_vocab_backward, (void *ctx, float *dlogits, const float *probs,
               const int32_t *targets, int v0, float dloss, int bt, int v),
              (ctx, dlogits, probs, targets, v0, dloss, bt, v))

/* ---------------------------------------------------------------------------
 * memory
 * ------------------------------------------------------------------------- */

/* 64-byte aligned, zero-filled; size rounded up to the alignment (as
 * aligned_alloc requires), 0 bytes gives a unique minimal block. */
static void *cpu_alloc(void *ctx, size_t bytes)
{
    (void)ctx;
    size_t rounded = (bytes + ZS_CPU_ALIGN - 1) / ZS_CPU_ALIGN * ZS_CPU_ALIGN;
    if (rounded == 0)
        rounded = ZS_CPU_ALIGN;
    if (rounded < bytes) /* overflow */
        return NULL;
    void *p = aligned_alloc(ZS_CPU_ALIGN, rounded);
    if (p != NULL)
        memset(p, 0, rounded);
    return p;
}

static void cpu_dealloc(void *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
}

static void cpu_memset0(void *ctx, void *dst, size_t bytes)
{
    (void)ctx;
    memset(dst, 0, bytes);
}

/* Host and device are the same memory: every copy is a memcpy. */
static void cpu_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    memcpy(dst, src, bytes);
}

/* ---------------------------------------------------------------------------
 * dense algebra
 * ------------------------------------------------------------------------- */

/* Row-major C(m,n) = alpha*op(A)(m,k) @ op(B)(k,n) + beta*C via OpenBLAS. */
static void cpu_sgemm(void *ctx, int trans_a, int trans_b, int m, int n, int k,
                      float alpha, const float *a, int lda, const float *b, int ldb,
                      float beta, float *c, int ldc)
{
    (void)ctx;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
                beta, c, ldc);
}

/* ---------------------------------------------------------------------------
 * elementwise and layer kernels
 * ------------------------------------------------------------------------- */

/* out is (BT,OC), bias is (OC) */
ZS_CPU_BODY cpu_add_bias_body(void *ctx, float *out, const float *bias, int bt, int oc)
{
    (void)ctx;
    for (int i = 0; i < bt; i++) {
        float *out_i = out + (size_t)i * oc;
        for (int o = 0; o < oc; o++)
            out_i[o] += bias[o];
    }
}
ZS_CPU_KERNEL(cpu_add_bias, (void *ctx, float *out, const float *bias, int bt, int oc),
              (ctx, out, bias, bt, oc))

/* dbias is (OC), dout is (BT,OC); rows summed in order 0..BT-1 from 0, then
 * added to dbias. The loop runs over a row at a time (the sums of all
 * columns advance together, so the compiler vectorises across columns);
 * each column's order is still rows 0..BT-1. */
ZS_CPU_BODY cpu_bias_backward_body(void *ctx, float *dbias, const float *dout, int bt, int oc)
{
    (void)ctx;
    enum { CHUNK = 256 };
    float sum[CHUNK];
    for (int o0 = 0; o0 < oc; o0 += CHUNK) {
        int n = oc - o0 < CHUNK ? oc - o0 : CHUNK;
        for (int o = 0; o < n; o++)
            sum[o] = 0.0f;
        for (int i = 0; i < bt; i++) {
            const float *d = dout + (size_t)i * oc + o0;
            for (int o = 0; o < n; o++)
                sum[o] += d[o];
        }
        for (int o = 0; o < n; o++)
            dbias[o0 + o] += sum[o];
    }
}
ZS_CPU_KERNEL(cpu_bias_backward, (void *ctx, float *dbias, const float *dout, int bt, int oc),
              (ctx, dbias, dout, bt, oc))

#define ZS_GELU_K 0.044715f
#define ZS_SQRT_2_OVER_PI 0.7978845608028654f /* sqrt(2/pi) */

/* out, inp are (N); gelu(x) = 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) */
ZS_CPU_BODY cpu_gelu_forward_body(void *ctx, float *out, const float *inp, size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cube = ZS_GELU_K * x * x * x;
        out[i] = 0.5f * x * (1.0f + zs_cpu_tanhf(ZS_SQRT_2_OVER_PI * (x + cube)));
    }
}
ZS_CPU_KERNEL(cpu_gelu_forward, (void *ctx, float *out, const float *inp, size_t n),
              (ctx, out, inp, n))

/* dinp, inp, dout are (N); dinp += gelu'(inp) * dout */
ZS_CPU_BODY cpu_gelu_backward_body(void *ctx, float *dinp, const float *inp, const float *dout,
                                   size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = ZS_SQRT_2_OVER_PI * (x + ZS_GELU_K * x * x * x);
        float th = zs_cpu_tanhf(u);
        float sech2 = 1.0f - th * th; /* d tanh(u) / du */
        float du = ZS_SQRT_2_OVER_PI * (1.0f + 3.0f * ZS_GELU_K * x * x);
        float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * du;
        dinp[i] += grad * dout[i];
    }
}
ZS_CPU_KERNEL(cpu_gelu_backward, (void *ctx, float *dinp, const float *inp, const float *dout,
               size_t n),
              (ctx, dinp, inp, dout, n))

/* out, inp are (N) */
ZS_CPU_BODY cpu_relu_forward_body(void *ctx, float *out, const float *inp, size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}
ZS_CPU_KERNEL(cpu_relu_forward, (void *ctx, float *out, const float *inp, size_t n),
              (ctx, out, inp, n))

/* dinp, inp, dout are (N) */
ZS_CPU_BODY cpu_relu_backward_body(void *ctx, float *dinp, const float *inp, const float *dout,
                                   size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        if (inp[i] > 0.0f)
            dinp[i] += dout[i];
}
ZS_CPU_KERNEL(cpu_relu_backward, (void *ctx, float *dinp, const float *inp, const float *dout,
               size_t n),
              (ctx, dinp, inp, dout, n))

/* out, inp are (BT,C); mean, rstd are (BT); weight, bias are (C).
 * Biased variance and eps 1e-5, as GPT-2 / PyTorch LayerNorm. */
ZS_CPU_BODY cpu_layernorm_forward_body(void *ctx, float *out, float *mean, float *rstd,
                                       const float *inp, const float *weight, const float *bias,
                                       int bt, int c)
{
    (void)ctx;
    for (int i = 0; i < bt; i++) {
        const float *x = inp + (size_t)i * c;
        float *y = out + (size_t)i * c;
        float m = 0.0f;
        for (int j = 0; j < c; j++)
            m += x[j];
        m /= (float)c;
        float var = 0.0f;
        for (int j = 0; j < c; j++) {
            float d = x[j] - m;
            var += d * d;
        }
        var /= (float)c;
        float s = 1.0f / sqrtf(var + ZS_LN_EPS);
        for (int j = 0; j < c; j++)
            y[j] = s * (x[j] - m) * weight[j] + bias[j];
        mean[i] = m;
        rstd[i] = s;
    }
}
ZS_CPU_KERNEL(cpu_layernorm_forward, (void *ctx, float *out, float *mean, float *rstd,
               const float *inp, const float *weight, const float *bias, int bt, int c),
              (ctx, out, mean, rstd, inp, weight, bias, bt, c))

/* dinp, dout, inp are (BT,C); dweight, dbias, weight are (C); mean, rstd (BT).
 * With n = (x - mean) * rstd and g = dout * weight:
 * dx = rstd * (g - mean(g) - n * mean(g * n)). */
ZS_CPU_BODY cpu_layernorm_backward_body(void *ctx, float *dinp, float *dweight, float *dbias,
                                        const float *dout, const float *inp, const float *weight,
                                        const float *mean, const float *rstd, int bt, int c)
{
    (void)ctx;
    for (int i = 0; i < bt; i++) {
        const float *dy = dout + (size_t)i * c;
        const float *x = inp + (size_t)i * c;
        float *dx = dinp + (size_t)i * c;
        float m = mean[i];
        float s = rstd[i];
        float g_mean = 0.0f;  /* mean of g */
        float gn_mean = 0.0f; /* mean of g * n */
        for (int j = 0; j < c; j++) {
            float nj = (x[j] - m) * s;
            float gj = weight[j] * dy[j];
            g_mean += gj;
            gn_mean += gj * nj;
        }
        g_mean /= (float)c;
        gn_mean /= (float)c;
        for (int j = 0; j < c; j++) {
            float nj = (x[j] - m) * s;
            float gj = weight[j] * dy[j];
            dbias[j] += dy[j];
            dweight[j] += nj * dy[j];
            dx[j] += s * (gj - g_mean - nj * gn_mean);
        }
    }
}
ZS_CPU_KERNEL(cpu_layernorm_backward, (void *ctx, float *dinp, float *dweight, float *dbias,
               const float *dout, const float *inp, const float *weight, const float *mean,
               const float *rstd, int bt, int c),
              (ctx, dinp, dweight, dbias, dout, inp, weight, mean, rstd, bt, c))

/* out, a, b are (N); out may alias a or b */
ZS_CPU_BODY cpu_residual_forward_body(void *ctx, float *out, const float *a, const float *b,
                                      size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}
ZS_CPU_KERNEL(cpu_residual_forward, (void *ctx, float *out, const float *a, const float *b,
               size_t n),
              (ctx, out, a, b, n))

/* y, x are (N) */
ZS_CPU_BODY cpu_axpy_body(void *ctx, float *y, float alpha, const float *x, size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        y[i] += alpha * x[i];
}
ZS_CPU_KERNEL(cpu_axpy, (void *ctx, float *y, float alpha, const float *x, size_t n),
              (ctx, y, alpha, x, n))

/* x is (N) */
ZS_CPU_BODY cpu_scale_body(void *ctx, float *x, float alpha, size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        x[i] *= alpha;
}
ZS_CPU_KERNEL(cpu_scale, (void *ctx, float *x, float alpha, size_t n),
              (ctx, x, alpha, n))

/* out is (B,T,C); tokens (B,T); wte (V,C); wpe (maxT,C) */
static void cpu_embedding_forward(void *ctx, float *out, const int32_t *tokens,
                                  const float *wte, const float *wpe, int b, int t, int c)
{
    (void)ctx;
    for (int bi = 0; bi < b; bi++) {
        for (int ti = 0; ti < t; ti++) {
            size_t row = (size_t)bi * t + ti;
            float *o = out + row * c;
            const float *te = wte + (size_t)tokens[row] * c;
            const float *pe = wpe + (size_t)ti * c;
            for (int j = 0; j < c; j++)
                o[j] = te[j] + pe[j];
        }
    }
}

/* dwte (V,C), dwpe (maxT,C) accumulate; dout (B,T,C); tokens (B,T).
 * Rows are visited in (b,t) order, so repeated tokens sum in a fixed order. */
static void cpu_embedding_backward(void *ctx, float *dwte, float *dwpe, const float *dout,
                                   const int32_t *tokens, int b, int t, int c)
{
    (void)ctx;
    for (int bi = 0; bi < b; bi++) {
        for (int ti = 0; ti < t; ti++) {
            size_t row = (size_t)bi * t + ti;
            const float *d = dout + row * c;
            float *dte = dwte + (size_t)tokens[row] * c;
            float *dpe = dwpe + (size_t)ti * c;
            for (int j = 0; j < c; j++) {
                dte[j] += d[j];
                dpe[j] += d[j];
            }
        }
    }
}

/* Attention (cpu_attention.h) with OpenBLAS's GEMM. */
ZS_CPU_BODY cpu_attention_gqa_forward_body(void *ctx, float *out, float *preatt, float *att,
                                           const float *qkv, int b, int t, int nh, int nkv,
                                           int hs)
{
    zs_attention_gqa_forward_with(cpu_sgemm, ctx, out, preatt, att, qkv, b, t, nh, nkv, hs);
}
ZS_CPU_KERNEL(cpu_attention_gqa_forward, (void *ctx, float *out, float *preatt, float *att,
               const float *qkv, int b, int t, int nh, int nkv, int hd),
              (ctx, out, preatt, att, qkv, b, t, nh, nkv, hd))

/* Multi-head attention over qkv (B,T,3C): the grouped kernel with NKV = NH. */
ZS_CPU_BODY cpu_attention_forward_body(void *ctx, float *out, float *preatt, float *att,
                                       const float *qkv, int b, int t, int c, int nh)
{
    cpu_attention_gqa_forward_body(ctx, out, preatt, att, qkv, b, t, nh, nh, c / nh);
}
ZS_CPU_KERNEL(cpu_attention_forward, (void *ctx, float *out, float *preatt, float *att,
               const float *qkv, int b, int t, int c, int nh),
              (ctx, out, preatt, att, qkv, b, t, c, nh))

ZS_CPU_BODY cpu_attention_gqa_backward_body(void *ctx, float *dqkv, float *dpreatt, float *datt,
                                            const float *dout, const float *qkv,
                                            const float *att, int b, int t, int nh, int nkv,
                                            int hs)
{
    zs_attention_gqa_backward_with(cpu_sgemm, ctx, dqkv, dpreatt, datt, dout, qkv, att, b, t, nh,
                                   nkv, hs);
}
ZS_CPU_KERNEL(cpu_attention_gqa_backward, (void *ctx, float *dqkv, float *dpreatt, float *datt,
               const float *dout, const float *qkv, const float *att, int b, int t, int nh,
               int nkv, int hd),
              (ctx, dqkv, dpreatt, datt, dout, qkv, att, b, t, nh, nkv, hd))

/* Multi-head attention backward: the grouped kernel with NKV = NH. */
ZS_CPU_BODY cpu_attention_backward_body(void *ctx, float *dqkv, float *dpreatt, float *datt,
                                        const float *dout, const float *qkv, const float *att,
                                        int b, int t, int c, int nh)
{
    cpu_attention_gqa_backward_body(ctx, dqkv, dpreatt, datt, dout, qkv, att, b, t, nh, nh,
                                    c / nh);
}
ZS_CPU_KERNEL(cpu_attention_backward, (void *ctx, float *dqkv, float *dpreatt, float *datt,
               const float *dout, const float *qkv, const float *att, int b, int t, int c, int nh),
              (ctx, dqkv, dpreatt, datt, dout, qkv, att, b, t, c, nh))

/* losses (BT); probs, logits (BT,V); targets (BT) (cpu_xent.h) */
ZS_CPU_BODY cpu_softmax_xent_forward_body(void *ctx, float *losses, float *probs,
                                          const float *logits, const int32_t *targets, int bt,
                                          int v)
{
    (void)ctx;
    zs_xent_softmax_forward_rows(logf, losses, probs, logits, targets, bt, v);
}
ZS_CPU_KERNEL(cpu_softmax_xent_forward, (void *ctx, float *losses, float *probs,
               const float *logits, const int32_t *targets, int bt, int v),
              (ctx, losses, probs, logits, targets, bt, v))

/* dlogits, probs (BT,V); targets (BT); overwrites dlogits */
ZS_CPU_BODY cpu_softmax_xent_backward_body(void *ctx, float *dlogits, const float *probs,
                                           const int32_t *targets, float dloss, int bt, int v)
{
    (void)ctx;
    for (int i = 0; i < bt; i++) {
        const float *p = probs + (size_t)i * v;
        float *d = dlogits + (size_t)i * v;
        for (int j = 0; j < v; j++) {
            float ind = (j == targets[i]) ? 1.0f : 0.0f;
            d[j] = dloss * (p[j] - ind);
        }
    }
}
ZS_CPU_KERNEL(cpu_softmax_xent_backward, (void *ctx, float *dlogits, const float *probs,
               const int32_t *targets, float dloss, int bt, int v),
              (ctx, dlogits, probs, targets, dloss, bt, v))

/* ---------------------------------------------------------------------------
 * typed loads and stores
 * ------------------------------------------------------------------------- */

/* Element i of a typed buffer as fp32. */
static inline float cpu_load(const void *x, zs_dtype t, size_t i)
{
    switch (t) {
    case ZS_DTYPE_BF16: return zs_bf16_to_f32(((const uint16_t *)x)[i]);
    case ZS_DTYPE_F16: return zs_f16_to_f32(((const uint16_t *)x)[i]);
    case ZS_DTYPE_F32: break;
    }
    return ((const float *)x)[i];
}

/* Store f, rounded to nearest even, as element i of a typed buffer. */
static inline void cpu_store(void *x, zs_dtype t, size_t i, float f)
{
    switch (t) {
    case ZS_DTYPE_BF16: ((uint16_t *)x)[i] = zs_f32_to_bf16(f); return;
    case ZS_DTYPE_F16: ((uint16_t *)x)[i] = zs_f32_to_f16(f); return;
    case ZS_DTYPE_F32: break;
    }
    ((float *)x)[i] = f;
}

/* x (N, typed); double accumulation in index order */
static double cpu_sumsq(void *ctx, const void *x, zs_dtype t, size_t n)
{
    (void)ctx;
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        double xi = (double)cpu_load(x, t, i);
        s += xi * xi;
    }
    return s;
}

/* x (N, typed); counts elements whose exponent bits are all ones */
static size_t cpu_count_nonfinite(void *ctx, const void *x, zs_dtype t, size_t n)
{
    (void)ctx;
    size_t bad = 0;
    if (t == ZS_DTYPE_F32) {
        const uint32_t *u = x;
        for (size_t i = 0; i < n; i++)
            bad += (u[i] & 0x7f800000u) == 0x7f800000u;
    } else {
        const uint16_t *u = x;
        uint16_t em = (t == ZS_DTYPE_BF16) ? 0x7f80u : 0x7c00u; /* exponent mask */
        for (size_t i = 0; i < n; i++)
            bad += (u[i] & em) == em;
    }
    return bad;
}

/* dst (N, fp32) = src (N, st) */
ZS_CPU_BODY cpu_convert_to_f32_body(void *ctx, float *dst, const void *src, zs_dtype st, size_t n)
{
    (void)ctx;
    if (st == ZS_DTYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    for (size_t i = 0; i < n; i++)
        dst[i] = cpu_load(src, st, i);
}
ZS_CPU_KERNEL(cpu_convert_to_f32, (void *ctx, float *dst, const void *src, zs_dtype st, size_t n),
              (ctx, dst, src, st, n))

/* dst (N, dt) = src (N, fp32) */
ZS_CPU_BODY cpu_convert_from_f32_body(void *ctx, void *dst, zs_dtype dt, const float *src, size_t n)
{
    (void)ctx;
    if (dt == ZS_DTYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    for (size_t i = 0; i < n; i++)
        cpu_store(dst, dt, i, src[i]);
}
ZS_CPU_KERNEL(cpu_convert_from_f32, (void *ctx, void *dst, zs_dtype dt, const float *src, size_t n),
              (ctx, dst, dt, src, n))

/* dst (N, dt) = round(float(dst) + src (N, fp32)) */
ZS_CPU_BODY cpu_accumulate_f32_body(void *ctx, void *dst, zs_dtype dt, const float *src, size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        cpu_store(dst, dt, i, cpu_load(dst, dt, i) + src[i]);
}
ZS_CPU_KERNEL(cpu_accumulate_f32, (void *ctx, void *dst, zs_dtype dt, const float *src, size_t n),
              (ctx, dst, dt, src, n))

/* dst (N, t) = round(float(dst) + float(src)) */
ZS_CPU_BODY cpu_add_typed_body(void *ctx, void *dst, const void *src, zs_dtype t, size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        cpu_store(dst, t, i, cpu_load(dst, t, i) + cpu_load(src, t, i));
}
ZS_CPU_KERNEL(cpu_add_typed, (void *ctx, void *dst, const void *src, zs_dtype t, size_t n),
              (ctx, dst, src, t, n))

/* dst (N, int64) = rint(src (N, t) * 2^frac_bits); out-of-range -> 0, counted */
static size_t cpu_to_fixed(void *ctx, int64_t *dst, const void *src, zs_dtype t, size_t n,
                           int frac_bits, int64_t limit)
{
    (void)ctx;
    double scale = ldexp(1.0, frac_bits), lim = (double)limit;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double v = (double)cpu_load(src, t, i) * scale; /* exact: a power of two */
        if (!(fabs(v) < lim)) { /* also catches NaN */
            dst[i] = 0;
            bad++;
            continue;
        }
        dst[i] = (int64_t)nearbyint(v);
    }
    return bad;
}

/* dst (N) += src (N), int64 */
ZS_CPU_BODY cpu_add_i64_body(void *ctx, int64_t *dst, const int64_t *src, size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}
ZS_CPU_KERNEL(cpu_add_i64, (void *ctx, int64_t *dst, const int64_t *src, size_t n),
              (ctx, dst, src, n))

/* dst (N, t) = round(float((double)src * 2^-frac_bits)) */
static void cpu_from_fixed(void *ctx, void *dst, zs_dtype t, const int64_t *src, size_t n,
                           int frac_bits)
{
    (void)ctx;
    double scale = ldexp(1.0, -frac_bits);
    for (size_t i = 0; i < n; i++)
        cpu_store(dst, t, i, (float)((double)src[i] * scale));
}

/* ---------------------------------------------------------------------------
 * optimizer
 * ------------------------------------------------------------------------- */

/* One element of AdamW (the formula below): updates *master, *m, *v from the
 * gradient element grad; returns the new master value. */
static inline float cpu_adamw_one(const zs_optim_hparams *h, float grad, float *master, float *m,
                                  float *v)
{
    float b1 = h->beta1, b2 = h->beta2;
    float g = grad * h->grad_mul;
    if (h->l2 != 0.0f)
        g += h->l2 * *master;
    float mi = b1 * *m + (1.0f - b1) * g;
    float vi = b2 * *v + (1.0f - b2) * g * g;
    float mhat = mi / h->bias_corr1;
    float vhat = vi / h->bias_corr2;
    float p = *master;
    p -= h->lr * (mhat / (sqrtf(vhat) + h->eps) + h->weight_decay * p);
    *m = mi;
    *v = vi;
    *master = p;
    return p;
}

/* cpu_adamw_one over fp32 arrays that do not overlap, with the L2 term and
 * the parameter store decided by constants (each call site inlines its own
 * loop without branches): the same operations in the same order. */
static inline __attribute__((always_inline)) void
cpu_adamw_f32(const zs_optim_hparams *h, const float *restrict gf, float *restrict ma,
              float *restrict ms, float *restrict vs, float *restrict pf, size_t n, int use_l2,
              int store)
{
    const float b1 = h->beta1, b2 = h->beta2, gm = h->grad_mul, l2 = h->l2;
    const float c1 = h->bias_corr1, c2 = h->bias_corr2, lr = h->lr, eps = h->eps;
    const float wd = h->weight_decay;
    for (size_t i = 0; i < n; i++) {
        float g = gf[i] * gm;
        if (use_l2)
            g += l2 * ma[i];
        float mi = b1 * ms[i] + (1.0f - b1) * g;
        float vi = b2 * vs[i] + (1.0f - b2) * g * g;
        float mhat = mi / c1;
        float vhat = vi / c2;
        float p = ma[i];
        p -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p);
        ms[i] = mi;
        vs[i] = vi;
        ma[i] = p;
        if (store)
            pf[i] = p;
    }
}

/* master, m, v (N, fp32); grad (N, gt); param (N, pt) or NULL.
 *   g = grad * grad_mul (+ l2*master for Adam with L2)
 *   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g
 *   master -= lr * (m/bias_corr1 / (sqrt(v/bias_corr2) + eps) + wd*master)
 * all in fp32, in this order; then param = round(master). */
ZS_CPU_BODY cpu_adamw_step_body(void *ctx, float *master, float *m, float *v, const void *grad,
                                zs_dtype gt, void *param, zs_dtype pt, size_t n,
                                const zs_optim_hparams *h)
{
    (void)ctx;
    if (gt == ZS_DTYPE_F32 && (param == NULL || pt == ZS_DTYPE_F32)) {
        /* fp32: plain arrays, the constants in locals and the two choices
         * taken outside the loop, so that the compiler vectorises it */
        if (h->l2 != 0.0f)
            param ? cpu_adamw_f32(h, grad, master, m, v, param, n, 1, 1)
                  : cpu_adamw_f32(h, grad, master, m, v, NULL, n, 1, 0);
        else
            param ? cpu_adamw_f32(h, grad, master, m, v, param, n, 0, 1)
                  : cpu_adamw_f32(h, grad, master, m, v, NULL, n, 0, 0);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float p = cpu_adamw_one(h, cpu_load(grad, gt, i), &master[i], &m[i], &v[i]);
        if (param != NULL)
            cpu_store(param, pt, i, p);
    }
}
ZS_CPU_KERNEL(cpu_adamw_step, (void *ctx, float *master, float *m, float *v, const void *grad,
               zs_dtype gt, void *param, zs_dtype pt, size_t n, const zs_optim_hparams *h),
              (ctx, master, m, v, grad, gt, param, pt, n, h))

/* master, buf (N, fp32); grad (N, gt); param (N, pt) or NULL.
 *   g = grad * grad_mul;  buf = momentum*buf + g
 *   master -= lr*wd*master  (decoupled decay, on the pre-step value)
 *   master -= lr*buf
 * then param = round(master). */
ZS_CPU_BODY cpu_sgd_step_body(void *ctx, float *master, float *buf, const void *grad, zs_dtype gt,
                              void *param, zs_dtype pt, size_t n, const zs_optim_hparams *h)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++) {
        float g = cpu_load(grad, gt, i) * h->grad_mul;
        float b = h->momentum * buf[i] + g;
        float p = master[i];
        p -= h->lr * h->weight_decay * p;
        p -= h->lr * b;
        buf[i] = b;
        master[i] = p;
        if (param != NULL)
            cpu_store(param, pt, i, p);
    }
}
ZS_CPU_KERNEL(cpu_sgd_step, (void *ctx, float *master, float *buf, const void *grad, zs_dtype gt,
               void *param, zs_dtype pt, size_t n, const zs_optim_hparams *h),
              (ctx, master, buf, grad, gt, param, pt, n, h))

/* ---------------------------------------------------------------------------
 * the table
 * ------------------------------------------------------------------------- */

static const struct zs_backend_i zs_cpu_iface = {
    .name = "cpu",
    .host_accessible = 1,
    .release = NULL,
    .alloc = cpu_alloc,
    .dealloc = cpu_dealloc,
    .memset0 = cpu_memset0,
    .copy_h2d = cpu_copy,
    .copy_d2h = cpu_copy,
    .copy_d2d = cpu_copy,
    .sgemm = cpu_sgemm,
    .add_bias = cpu_add_bias,
    .bias_backward = cpu_bias_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .relu_forward = cpu_relu_forward,
    .relu_backward = cpu_relu_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .residual_forward = cpu_residual_forward,
    .axpy = cpu_axpy,
    .scale = cpu_scale,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .ring_attention_forward = zs_cpu_ring_attention_forward,
    .ring_attention_backward = zs_cpu_ring_attention_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .attention_gqa_forward = cpu_attention_gqa_forward,
    .attention_gqa_backward = cpu_attention_gqa_backward,
    .softmax_xent_forward = cpu_softmax_xent_forward,
    .softmax_xent_backward = cpu_softmax_xent_backward,
    .vocab_embedding_forward = cpu_vocab_embedding_forward,
    .vocab_embedding_backward = cpu_vocab_embedding_backward,
    .xent_vocab_max = cpu_xent_vocab_max,
    .xent_vocab_sums = cpu_xent_vocab_sums,
    .xent_vocab_finish = cpu_xent_vocab_finish,
    .xent_vocab_backward = cpu_xent_vocab_backward,
    .sumsq = cpu_sumsq,
    .count_nonfinite = cpu_count_nonfinite,
    .convert_to_f32 = cpu_convert_to_f32,
    .convert_from_f32 = cpu_convert_from_f32,
    .accumulate_f32 = cpu_accumulate_f32,
    .add_typed = cpu_add_typed,
    .to_fixed = cpu_to_fixed,
    .add_i64 = cpu_add_i64,
    .from_fixed = cpu_from_fixed,
    .adamw_step = cpu_adamw_step,
    .sgd_step = cpu_sgd_step,
};

/* "cpu-staged", for tests only (not listed by zs_backend_list): the CPU
 * backend declaring that host code may not touch its memory, as CUDA's. It
 * runs the paths that a GPU run takes above this layer (comm staging device
 * buffers through host copies, the refusals) on machines without a GPU; its
 * results must equal the CPU's byte for byte. */
int zs_backend_cpu_staged_init(struct zs_backend *be, int device, char *err, size_t errlen)
{
    static struct zs_backend_i staged;
    if (zs_backend_cpu_init(be, device, err, errlen) != 0)
        return -1;
    staged = zs_cpu_iface;
    staged.name = "cpu-staged";
    staged.host_accessible = 0;
    be->iface = &staged;
    return 0;
}

/* The CPU backend has no state; it pins OpenBLAS to one thread. */
int zs_backend_cpu_init(struct zs_backend *be, int device, char *err, size_t errlen)
{
    (void)device;
    if (cpu_isa_choose(err, errlen) != 0)
        return -1;
    openblas_set_num_threads(1);
    be->iface = &zs_cpu_iface;
    be->ctx = NULL;
    return 0;
}
