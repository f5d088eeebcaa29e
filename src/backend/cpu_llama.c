/* zerosim — the CPU backend's kernels of the Llama family: RMSNorm, SwiGLU
 * and the rotary embedding (grouped-query attention runs through BLAS and
 * lives in cpu.c). Plain loops in llm.c style, each compiled for SSE2, AVX2
 * and AVX-512F with the same bytes (cpu_isa.h); silu's exponential is the
 * backend's own (cpu_math.h), so the bytes do not depend on libm. Backward
 * kernels accumulate (+=), except the rotary one, which rotates the gradient
 * in place. docs/numerics.md ("Llama kernels") states the conventions.
 */
#include "backend/backend_impl.h"

#include <math.h>
#include <stddef.h>

#include "backend/cpu_isa.h"
#include "backend/cpu_llama.h"
#include "backend/cpu_math.h"

/* ---- RMSNorm -------------------------------------------------------------- */

/* out, inp (BT,C); rstd (BT); weight (C). The sum of squares in double in
 * index order (each square exact), rstd = 1 / sqrt(sum / C + eps) in double
 * rounded once to float, then out = (x * rstd) * w in float, the order of
 * Hugging Face's LlamaRMSNorm. A float sum of C = 8192 squares would carry
 * an error near 1e-5 of rstd; in double it is below 1e-12, and the double
 * operations are IEEE on every backend (the CUDA kernel gives these bytes). */
ZS_CPU_BODY cpu_rmsnorm_forward_body(void *ctx, float *out, float *rstd, const float *inp,
                                     const float *weight, int bt, int c, float eps)
{
    (void)ctx;
    for (int i = 0; i < bt; i++) {
        const float *x = inp + (size_t)i * c;
        float *y = out + (size_t)i * c;
        double ss = 0.0;
        for (int j = 0; j < c; j++)
            ss += (double)x[j] * x[j];
        float s = (float)(1.0 / sqrt(ss / c + (double)eps));
        for (int j = 0; j < c; j++)
            y[j] = x[j] * s * weight[j];
        rstd[i] = s;
    }
}
ZS_CPU_KERNEL_EXTERN(cpu_rmsnorm_forward, (void *ctx, float *out, float *rstd, const float *inp,
                      const float *weight, int bt, int c, float eps),
                     (ctx, out, rstd, inp, weight, bt, c, eps))

/* dinp, dout, inp (BT,C) and dweight, weight (C) accumulate; rstd (BT).
 * With n = x * rstd and g = weight * dout (in float):
 *   dx = rstd * (g - n * mean(g * n)),  dweight += n * dout,
 * the mean of the float products g * n summed in double in index order. */
ZS_CPU_BODY cpu_rmsnorm_backward_body(void *ctx, float *dinp, float *dweight, const float *dout,
                                      const float *inp, const float *weight, const float *rstd,
                                      int bt, int c)
{
    (void)ctx;
    for (int i = 0; i < bt; i++) {
        const float *dy = dout + (size_t)i * c;
        const float *x = inp + (size_t)i * c;
        float *dx = dinp + (size_t)i * c;
        float s = rstd[i];
        double gn_sum = 0.0;
        for (int j = 0; j < c; j++)
            gn_sum += (double)(weight[j] * dy[j] * (x[j] * s));
        float gn_mean = (float)(gn_sum / c); /* mean of g * n */
        for (int j = 0; j < c; j++) {
            float nj = x[j] * s;
            float gj = weight[j] * dy[j];
            dweight[j] += nj * dy[j];
            dx[j] += s * (gj - nj * gn_mean);
        }
    }
}
ZS_CPU_KERNEL_EXTERN(cpu_rmsnorm_backward, (void *ctx, float *dinp, float *dweight,
                      const float *dout, const float *inp, const float *weight, const float *rstd,
                      int bt, int c),
                     (ctx, dinp, dweight, dout, inp, weight, rstd, bt, c))

/* ---- SwiGLU ----------------------------------------------------------------- */

/* sigmoid(x) = 1 / (1 + e^-x) with the backend's exp: e^-x is infinity below
 * x = -88.7 (sigmoid 0) and 0 above 87.3 (sigmoid 1), never NaN. */
static inline __attribute__((always_inline)) float cpu_sigmoid(float x)
{
    return 1.0f / (1.0f + zs_cpu_expf(-x));
}

/* out (BT,F); inp (BT,2F) = [gate | up] rows. out = (gate * sigmoid(gate)) * up. */
ZS_CPU_BODY cpu_swiglu_forward_body(void *ctx, float *out, const float *inp, int bt, int f)
{
    (void)ctx;
    for (int i = 0; i < bt; i++) {
        const float *gate = inp + (size_t)i * 2 * f, *up = gate + f;
        float *y = out + (size_t)i * f;
        for (int j = 0; j < f; j++) {
            float g = gate[j];
            y[j] = g * cpu_sigmoid(g) * up[j];
        }
    }
}
ZS_CPU_KERNEL_EXTERN(cpu_swiglu_forward, (void *ctx, float *out, const float *inp, int bt, int f),
                     (ctx, out, inp, bt, f))

/* dinp, inp (BT,2F); dout (BT,F). With s = sigmoid(gate):
 *   dgate += (dout * up) * (s * (1 + gate * (1 - s))),  dup += dout * (gate * s). */
ZS_CPU_BODY cpu_swiglu_backward_body(void *ctx, float *dinp, const float *inp, const float *dout,
                                     int bt, int f)
{
    (void)ctx;
    for (int i = 0; i < bt; i++) {
        const float *gate = inp + (size_t)i * 2 * f, *up = gate + f;
        float *dgate = dinp + (size_t)i * 2 * f, *dup = dgate + f;
        const float *dy = dout + (size_t)i * f;
        for (int j = 0; j < f; j++) {
            float g = gate[j];
            float s = cpu_sigmoid(g);
            float dsilu = s * (1.0f + g * (1.0f - s));
            dgate[j] += dy[j] * up[j] * dsilu;
            dup[j] += dy[j] * (g * s);
        }
    }
}
ZS_CPU_KERNEL_EXTERN(cpu_swiglu_backward, (void *ctx, float *dinp, const float *inp,
                      const float *dout, int bt, int f),
                     (ctx, dinp, inp, dout, bt, f))

/* ---- rotary embedding ---------------------------------------------------- */

/* x: B*T rows of row_stride floats, the first nheads heads of hd rotated in
 * place; table (P,hd) = [cos | sin] rows, row pos0 + t for token t. With
 * h = hd/2, a = x[i], b = x[i + h] (Hugging Face's rotate_half pairs):
 *   forward:  x[i] = a cos - b sin,  x[i + h] = b cos + a sin
 *   backward: x[i] = a cos + b sin,  x[i + h] = b cos - a sin (the inverse). */
ZS_CPU_BODY cpu_rope_rotate_body(float *x, const float *table, int b, int t, int nheads, int hd,
                                 int row_stride, int pos0, float sign)
{
    int half = hd / 2;
    for (int bi = 0; bi < b; bi++)
        for (int ti = 0; ti < t; ti++) {
            const float *cs = table + (size_t)(pos0 + ti) * hd, *sn = cs + half;
            float *row = x + ((size_t)bi * t + ti) * row_stride;
            for (int hh = 0; hh < nheads; hh++) {
                float *lo = row + (size_t)hh * hd, *hi = lo + half;
                for (int i = 0; i < half; i++) {
                    float a = lo[i], bv = hi[i], sv = sign * sn[i];
                    lo[i] = a * cs[i] - bv * sv;
                    hi[i] = bv * cs[i] + a * sv;
                }
            }
        }
}

ZS_CPU_BODY cpu_rope_forward_body(void *ctx, float *x, const float *table, int b, int t,
                                  int nheads, int hd, int row_stride, int pos0)
{
    (void)ctx;
    cpu_rope_rotate_body(x, table, b, t, nheads, hd, row_stride, pos0, 1.0f);
}
ZS_CPU_KERNEL_EXTERN(cpu_rope_forward, (void *ctx, float *x, const float *table, int b, int t,
                      int nheads, int hd, int row_stride, int pos0),
                     (ctx, x, table, b, t, nheads, hd, row_stride, pos0))

ZS_CPU_BODY cpu_rope_backward_body(void *ctx, float *dx, const float *table, int b, int t,
                                   int nheads, int hd, int row_stride, int pos0)
{
    (void)ctx;
    cpu_rope_rotate_body(dx, table, b, t, nheads, hd, row_stride, pos0, -1.0f);
}
ZS_CPU_KERNEL_EXTERN(cpu_rope_backward, (void *ctx, float *dx, const float *table, int b, int t,
                      int nheads, int hd, int row_stride, int pos0),
                     (ctx, dx, table, b, t, nheads, hd, row_stride, pos0))
