/* zerosim — the CUDA backend's kernels of the Llama family: RMSNorm, SwiGLU,
 * the rotary embedding and grouped-query attention (built with
 * ./configure --with-cuda, into the module zerosim_cuda.so with cuda.cu).
 *
 * As in cuda.cu, each kernel does the CPU backend's operations in the CPU's
 * order where that costs little (nvcc runs with --fmad=false; division and
 * square root are correctly rounded): RMSNorm and the rotary embedding give
 * the CPU's bytes for the CPU's inputs (the rotary table comes from the host,
 * zs_rope_table_fill). SwiGLU differs by the device's expf (the CPU has its
 * own exp), the attention by the order of the CPU's OpenBLAS GEMMs (tests/
 * oracle_kernels.c states the tolerances). No floating-point atomics:
 * every sum has one thread and a fixed order, so results are deterministic.
 */
#include "backend/backend_impl.h"
#include "backend/cuda_llama.h"
#include "backend/cuda_util.h"

#include <math.h>

/* ---- RMSNorm -------------------------------------------------------------- */

/* one thread per row, the CPU's loop (sums in double, as the CPU's) */
__global__ static void k_rmsnorm_forward(float *out, float *rstd, const float *inp,
                                         const float *weight, int bt, int c, float eps)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= bt)
        return;
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

/* dinp: one thread per row */
__global__ static void k_rmsnorm_backward_rows(float *dinp, const float *dout, const float *inp,
                                               const float *weight, const float *rstd, int bt,
                                               int c)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= bt)
        return;
    const float *dy = dout + (size_t)i * c;
    const float *x = inp + (size_t)i * c;
    float *dx = dinp + (size_t)i * c;
    float s = rstd[i];
    double gn_sum = 0.0;
    for (int j = 0; j < c; j++)
        gn_sum += (double)(weight[j] * dy[j] * (x[j] * s));
    float gn_mean = (float)(gn_sum / c);
    for (int j = 0; j < c; j++) {
        float nj = x[j] * s;
        float gj = weight[j] * dy[j];
        dx[j] += s * (gj - nj * gn_mean);
    }
}

/* dweight: one thread per column, rows added in order 0..BT-1 as the CPU */
__global__ static void k_rmsnorm_backward_cols(float *dweight, const float *dout,
                                               const float *inp, const float *rstd, int bt,
                                               int c)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= c)
        return;
    float dw = dweight[j];
    for (int i = 0; i < bt; i++) {
        size_t at = (size_t)i * c + j;
        dw += inp[at] * rstd[i] * dout[at];
    }
    dweight[j] = dw;
}

void cuda_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *inp,
                          const float *weight, int bt, int c, float eps)
{
    (void)ctx;
    k_rmsnorm_forward<<<ZS_ROWS(bt)>>>(out, rstd, inp, weight, bt, c, eps);
    ZS_CU_LAUNCHED();
}

void cuda_rmsnorm_backward(void *ctx, float *dinp, float *dweight, const float *dout,
                           const float *inp, const float *weight, const float *rstd, int bt,
                           int c)
{
    (void)ctx;
    k_rmsnorm_backward_rows<<<ZS_ROWS(bt)>>>(dinp, dout, inp, weight, rstd, bt, c);
    ZS_CU_LAUNCHED();
    k_rmsnorm_backward_cols<<<ZS_ROWS(c)>>>(dweight, dout, inp, rstd, bt, c);
    ZS_CU_LAUNCHED();
}

/* ---- SwiGLU ----------------------------------------------------------------- */

__device__ static inline float d_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* out(BT,F) = gate * sigmoid(gate) * up; inp(BT,2F) = [gate | up] rows */
__global__ static void k_swiglu_forward(float *out, const float *inp, size_t n, int f)
{
    ZS_GRID_STRIDE(i, n)
    {
        size_t row = i / (size_t)f, j = i % (size_t)f;
        float g = inp[row * 2 * f + j], u = inp[row * 2 * f + f + j];
        out[i] = g * d_sigmoid(g) * u;
    }
}

__global__ static void k_swiglu_backward(float *dinp, const float *inp, const float *dout,
                                         size_t n, int f)
{
    ZS_GRID_STRIDE(i, n)
    {
        size_t row = i / (size_t)f, j = i % (size_t)f;
        size_t gi = row * 2 * f + j, ui = gi + f;
        float g = inp[gi], u = inp[ui];
        float s = d_sigmoid(g);
        float dsilu = s * (1.0f + g * (1.0f - s));
        dinp[gi] += dout[i] * u * dsilu;
        dinp[ui] += dout[i] * (g * s);
    }
}

void cuda_swiglu_forward(void *ctx, float *out, const float *inp, int bt, int f)
{
    (void)ctx;
    size_t n = (size_t)bt * f;
    k_swiglu_forward<<<ZS_1D(n)>>>(out, inp, n, f);
    ZS_CU_LAUNCHED();
}

void cuda_swiglu_backward(void *ctx, float *dinp, const float *inp, const float *dout, int bt,
                          int f)
{
    (void)ctx;
    size_t n = (size_t)bt * f;
    k_swiglu_backward<<<ZS_1D(n)>>>(dinp, inp, dout, n, f);
    ZS_CU_LAUNCHED();
}

/* ---- rotary embedding ---------------------------------------------------- */

/* one thread per pair (b, t, head, i < HD/2): the CPU's arithmetic; sign +1
 * rotates forward, -1 backward (the inverse) */
__global__ static void k_rope_rotate(float *x, const float *table, int t, int nheads, int hd,
                                     int row_stride, int pos0, size_t n, float sign)
{
    int half = hd / 2;
    ZS_GRID_STRIDE(p, n)
    {
        int i = (int)(p % (size_t)half);
        size_t head = p / (size_t)half;
        int hh = (int)(head % (size_t)nheads);
        size_t row = head / (size_t)nheads; /* b * T + t */
        int ti = (int)(row % (size_t)t);
        const float *cs = table + (size_t)(pos0 + ti) * hd;
        float *lo = x + row * row_stride + (size_t)hh * hd;
        float a = lo[i], bv = lo[half + i], sv = sign * cs[half + i];
        lo[i] = a * cs[i] - bv * sv;
        lo[half + i] = bv * cs[i] + a * sv;
    }
}

void cuda_rope_forward(void *ctx, float *x, const float *table, int b, int t, int nheads, int hd,
                       int row_stride, int pos0)
{
    (void)ctx;
    size_t n = (size_t)b * t * nheads * (hd / 2);
    k_rope_rotate<<<ZS_1D(n)>>>(x, table, t, nheads, hd, row_stride, pos0, n, 1.0f);
    ZS_CU_LAUNCHED();
}

void cuda_rope_backward(void *ctx, float *dx, const float *table, int b, int t, int nheads, int hd,
                        int row_stride, int pos0)
{
    (void)ctx;
    size_t n = (size_t)b * t * nheads * (hd / 2);
    k_rope_rotate<<<ZS_1D(n)>>>(dx, table, t, nheads, hd, row_stride, pos0, n, -1.0f);
    ZS_CU_LAUNCHED();
}

/* ---- grouped-query attention ------------------------------------------------
 * qkv(B,T,(NH+2NKV)*HD): query heads, then key heads, then value heads; query
 * head h reads key/value head h / (NH/NKV). The loops of cuda.cu's
 * multi-head kernels with that mapping (NKV == NH gives their bytes). */

/* one thread per (b, t, h): one query row */
__global__ static void k_gqa_forward(float *out, float *preatt, float *att, const float *qkv,
                                     int b, int t, int nh, int nkv, int hd)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= b * t * nh)
        return;
    int h = idx % nh, ti = (idx / nh) % t, bi = idx / (nh * t);
    int cq = nh * hd, row = cq + 2 * nkv * hd;
    size_t kvo = (size_t)cq + (size_t)(h / (nh / nkv)) * hd, vo = kvo + (size_t)nkv * hd;
    float scale = 1.0f / sqrtf((float)hd);
    const float *q = qkv + ((size_t)bi * t + ti) * row + h * hd;
    size_t arow = (((size_t)bi * nh + h) * t + ti) * t;
    float *pre = preatt + arow, *a = att + arow;
    float maxval = -INFINITY;
    for (int t2 = 0; t2 <= ti; t2++) {
        const float *k = qkv + ((size_t)bi * t + t2) * row + kvo;
        float dot = 0.0f;
        for (int j = 0; j < hd; j++)
            dot += q[j] * k[j];
        dot *= scale;
        pre[t2] = dot;
        if (dot > maxval)
            maxval = dot;
    }
    float sum = 0.0f;
    for (int t2 = 0; t2 <= ti; t2++) {
        float e = expf(pre[t2] - maxval);
        a[t2] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (int t2 = 0; t2 < t; t2++) {
        if (t2 <= ti) {
            a[t2] *= inv;
        } else {
            a[t2] = 0.0f;
            pre[t2] = 0.0f;
        }
    }
    float *o = out + ((size_t)bi * t + ti) * cq + h * hd;
    for (int j = 0; j < hd; j++)
        o[j] = 0.0f;
    for (int t2 = 0; t2 <= ti; t2++) {
        const float *v = qkv + ((size_t)bi * t + t2) * row + vo;
        float w = a[t2];
        for (int j = 0; j < hd; j++)
            o[j] += w * v[j];
    }
}

/* Backward, part 1, one thread per query row (b, t, h): datt, dpreatt (the
 * whole row, zero past the diagonal) and dq. */
__global__ static void k_gqa_backward_rows(float *dqkv, float *dpreatt, float *datt,
                                           const float *dout, const float *qkv, const float *att,
                                           int b, int t, int nh, int nkv, int hd)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= b * t * nh)
        return;
    int h = idx % nh, ti = (idx / nh) % t, bi = idx / (nh * t);
    int cq = nh * hd, row = cq + 2 * nkv * hd;
    size_t kvo = (size_t)cq + (size_t)(h / (nh / nkv)) * hd, vo = kvo + (size_t)nkv * hd;
    float scale = 1.0f / sqrtf((float)hd);
    size_t arow = (((size_t)bi * nh + h) * t + ti) * t;
    const float *a = att + arow;
    float *da = datt + arow, *dpre = dpreatt + arow;
    float *dq = dqkv + ((size_t)bi * t + ti) * row + h * hd;
    const float *dy = dout + ((size_t)bi * t + ti) * cq + h * hd;
    for (int t2 = 0; t2 < t; t2++) {
        da[t2] = 0.0f;
        dpre[t2] = 0.0f;
    }
    for (int t2 = 0; t2 <= ti; t2++) {
        const float *v = qkv + ((size_t)bi * t + t2) * row + vo;
        float dot = 0.0f;
        for (int j = 0; j < hd; j++)
            dot += v[j] * dy[j];
        da[t2] += dot;
    }
    float adot = 0.0f;
    for (int t2 = 0; t2 <= ti; t2++)
        adot += a[t2] * da[t2];
    for (int t3 = 0; t3 <= ti; t3++)
        dpre[t3] += a[t3] * (da[t3] - adot);
    for (int t2 = 0; t2 <= ti; t2++) {
        const float *k = qkv + ((size_t)bi * t + t2) * row + kvo;
        float g = dpre[t2] * scale;
        for (int j = 0; j < hd; j++)
            dq[j] += k[j] * g;
    }
}

/* Part 2, one thread per key row (b, t2, key/value head): dk and dv receive
 * the query heads of the group in head order, each over query rows
 * ti = t2..T-1 in ascending order. */
__global__ static void k_gqa_backward_keys(float *dqkv, const float *dpreatt, const float *dout,
                                           const float *qkv, const float *att, int b, int t,
                                           int nh, int nkv, int hd)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= b * t * nkv)
        return;
    int kvh = idx % nkv, t2 = (idx / nkv) % t, bi = idx / (nkv * t);
    int cq = nh * hd, row = cq + 2 * nkv * hd, group = nh / nkv;
    float scale = 1.0f / sqrtf((float)hd);
    float *dk = dqkv + ((size_t)bi * t + t2) * row + cq + (size_t)kvh * hd;
    float *dv = dk + (size_t)nkv * hd;
    for (int h = kvh * group; h < (kvh + 1) * group; h++)
        for (int ti = t2; ti < t; ti++) {
            size_t arow = (((size_t)bi * nh + h) * t + ti) * t;
            const float *dy = dout + ((size_t)bi * t + ti) * cq + h * hd;
            const float *q = qkv + ((size_t)bi * t + ti) * row + h * hd;
            float w = att[arow + t2];
            for (int j = 0; j < hd; j++)
                dv[j] += w * dy[j];
            float g = dpreatt[arow + t2] * scale;
            for (int j = 0; j < hd; j++)
                dk[j] += q[j] * g;
        }
}

void cuda_attention_gqa_forward(void *ctx, float *out, float *preatt, float *att,
                                const float *qkv, int b, int t, int nh, int nkv, int hd)
{
    (void)ctx;
    k_gqa_forward<<<ZS_ROWS(b * t * nh)>>>(out, preatt, att, qkv, b, t, nh, nkv, hd);
    ZS_CU_LAUNCHED();
}

void cuda_attention_gqa_backward(void *ctx, float *dqkv, float *dpreatt, float *datt,
                                 const float *dout, const float *qkv, const float *att, int b,
                                 int t, int nh, int nkv, int hd)
{
    (void)ctx;
    k_gqa_backward_rows<<<ZS_ROWS(b * t * nh)>>>(dqkv, dpreatt, datt, dout, qkv, att, b, t, nh,
                                                 nkv, hd);
    ZS_CU_LAUNCHED();
    k_gqa_backward_keys<<<ZS_ROWS(b * t * nkv)>>>(dqkv, dpreatt, dout, qkv, att, b, t, nh, nkv,
                                                  hd);
    ZS_CU_LAUNCHED();
}
