/* zerosim — the CUDA backend (built with ./configure --with-cuda).
 *
 * The same table as the CPU backend (backend_impl.h): device memory from
 * cudaMalloc, sgemm through cuBLAS (no TF32), every other kernel our own.
 * Kernels follow the CPU backend's arithmetic, operation for operation and
 * in the same summation order, wherever that costs little: nvcc is run with
 * --fmad=false (as the CPU build uses -ffp-contract=off), and CUDA's fp32
 * division and square root are correctly rounded, so the elementwise
 * kernels, layernorm, the embedding, the bias gradient, the conversions,
 * fixed point and the optimizers give the CPU's bytes for the CPU's inputs.
 * They differ from the CPU where the libraries differ: cuBLAS's sgemm
 * (another summation order), the attention (the CPU's runs through OpenBLAS
 * GEMMs, whose order these loops do not follow), tanh in GELU and exp/log in
 * the softmaxes (the CPU has its own vectorisable exp and tanh), and sumsq
 * (a fixed-shape tree in double instead of index order). The Llama
 * family's kernels are in cuda_llama.cu. Every kernel is deterministic: no floating-point
 * atomics, and launch shapes that depend only on the sizes, so the same
 * calls give the same bytes on every run and in every ZeRO stage.
 *
 * Everything runs on the legacy default stream, so a copy to the host
 * (cudaMemcpy) waits for every kernel launched before it.
 *
 * With NCCL (HAVE_NCCL), the table also offers device collectives
 * (allgatherv as grouped broadcasts, reduce-scatterv as grouped reduces);
 * src/comm uses them only when asked (ZEROSIM_NCCL=1), else it stages
 * device buffers through host memory and MPI.
 */
#include "build-config.h"
#include "backend/backend_impl.h"
#include "backend/cuda_llama.h"
#include "backend/cuda_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#ifdef HAVE_NCCL
#include <nccl.h>
#endif

#define ZS_LN_EPS 1e-5f
#define ZS_CUBLAS(call)                                                             \
    do {                                                                            \
        cublasStatus_t zs_s_ = (call);                                              \
        if (zs_s_ != CUBLAS_STATUS_SUCCESS) {                                       \
            fprintf(stderr, "zerosim: %s:%d: cuBLAS error %d in %s\n", __FILE__,    \
                    __LINE__, (int)zs_s_, #call);                                   \
            abort();                                                                \
        }                                                                           \
    } while (0)

typedef struct {
    int device;
    cublasHandle_t blas;
    double *d_partials;          /* sumsq: one double per block */
    unsigned long long *d_count; /* count_nonfinite, to_fixed */
#ifdef HAVE_NCCL
    ncclComm_t nccl;
    int nccl_ready;
#endif
} zs_cuda_ctx;

/* ---------------------------------------------------------------------------
 * bf16 / fp16 on the device: the same bit manipulation as backend.c
 * ------------------------------------------------------------------------- */

__device__ static inline uint32_t d_f32_bits(float f) { return __float_as_uint(f); }
__device__ static inline float d_bits_f32(uint32_t u) { return __uint_as_float(u); }

__device__ static inline uint16_t d_f32_to_bf16(float f)
{
    uint32_t u = d_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

__device__ static inline float d_bf16_to_f32(uint16_t h) { return d_bits_f32((uint32_t)h << 16); }

__device__ static inline uint16_t d_f32_to_f16(float f)
{
    uint32_t u = d_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t exp = (u >> 23) & 0xffu;
    uint32_t mant = u & 0x7fffffu;
    if (exp == 0xffu)
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x0200u | (mant >> 13) : 0u));
    int e = (int)exp - 127;
    if (e > 15)
        return (uint16_t)(sign | 0x7c00u);
    if (e >= -14) {
        uint32_t h = ((uint32_t)(e + 15) << 10) | (mant >> 13);
        uint32_t rem = mant & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
            h++;
        return (uint16_t)(sign | h);
    }
    if (e < -25)
        return sign;
    uint32_t m24 = mant | 0x800000u;
    int shift = -e - 1;
    uint32_t q = m24 >> shift;
    uint32_t rem = m24 & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return (uint16_t)(sign | q);
}

__device__ static inline float d_f16_to_f32(uint16_t h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t exp = ((uint32_t)h >> 10) & 0x1fu;
    uint32_t mant = (uint32_t)h & 0x3ffu;
    if (exp == 0x1fu)
        return d_bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0)
            return d_bits_f32(sign);
        int e = -14;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            e--;
        }
        mant &= 0x3ffu;
        return d_bits_f32(sign | ((uint32_t)(e + 127) << 23) | (mant << 13));
    }
    return d_bits_f32(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

__device__ static inline float d_load(const void *x, int t, size_t i)
{
    if (t == ZS_DTYPE_BF16)
        return d_bf16_to_f32(((const uint16_t *)x)[i]);
    if (t == ZS_DTYPE_F16)
        return d_f16_to_f32(((const uint16_t *)x)[i]);
    return ((const float *)x)[i];
}

__device__ static inline void d_store(void *x, int t, size_t i, float f)
{
    if (t == ZS_DTYPE_BF16)
        ((uint16_t *)x)[i] = d_f32_to_bf16(f);
    else if (t == ZS_DTYPE_F16)
        ((uint16_t *)x)[i] = d_f32_to_f16(f);
    else
        ((float *)x)[i] = f;
}

/* ---------------------------------------------------------------------------
 * memory
 * ------------------------------------------------------------------------- */

/* Zero-filled; cudaMalloc aligns to 256 bytes. 0 bytes gives a unique block. */
static void *cuda_alloc(void *ctx, size_t bytes)
{
    (void)ctx;
    void *p = NULL;
    size_t b = bytes ? bytes : 64;
    if (cudaMalloc(&p, b) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky-free error state */
        return NULL;
    }
    ZS_CU(cudaMemset(p, 0, b));
    return p;
}

static void cuda_dealloc(void *ctx, void *ptr)
{
    (void)ctx;
    ZS_CU(cudaFree(ptr));
}

static void cuda_memset0(void *ctx, void *dst, size_t bytes)
{
    (void)ctx;
    ZS_CU(cudaMemset(dst, 0, bytes));
}

static void cuda_copy_h2d(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    ZS_CU(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

static void cuda_copy_d2h(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    ZS_CU(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

static void cuda_copy_d2d(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    ZS_CU(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}

/* ---------------------------------------------------------------------------
 * dense algebra
 * ------------------------------------------------------------------------- */

/* Row-major C = alpha*op(A)*op(B) + beta*C is column-major
 * C^T = alpha*op(B)^T*op(A)^T + beta*C^T: swap the operands. */
static void cuda_sgemm(void *ctx, int trans_a, int trans_b, int m, int n, int k,
                       float alpha, const float *a, int lda, const float *b, int ldb,
                       float beta, float *c, int ldc)
{
    zs_cuda_ctx *x = (zs_cuda_ctx *)ctx;
    ZS_CUBLAS(cublasSgemm(x->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                          trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, a, lda,
                          &beta, c, ldc));
}

/* ---------------------------------------------------------------------------
 * elementwise and layer kernels (the CPU's loops, one thread per output
 * element or per row/column where the CPU sums in order)
 * ------------------------------------------------------------------------- */

__global__ static void k_add_bias(float *out, const float *bias, size_t n, int oc)
{
    ZS_GRID_STRIDE(i, n) out[i] += bias[i % (size_t)oc];
}

/* one thread per column: rows summed in order 0..BT-1, as the CPU */
__global__ static void k_bias_backward(float *dbias, const float *dout, int bt, int oc)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= oc)
        return;
    float sum = 0.0f;
    for (int i = 0; i < bt; i++)
        sum += dout[(size_t)i * oc + o];
    dbias[o] += sum;
}

#define ZS_GELU_K 0.044715f
#define ZS_SQRT_2_OVER_PI 0.7978845608028654f

__global__ static void k_gelu_forward(float *out, const float *inp, size_t n)
{
    ZS_GRID_STRIDE(i, n)
    {
        float x = inp[i];
        float cube = ZS_GELU_K * x * x * x;
        out[i] = 0.5f * x * (1.0f + tanhf(ZS_SQRT_2_OVER_PI * (x + cube)));
    }
}

__global__ static void k_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    ZS_GRID_STRIDE(i, n)
    {
        float x = inp[i];
        float u = ZS_SQRT_2_OVER_PI * (x + ZS_GELU_K * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float du = ZS_SQRT_2_OVER_PI * (1.0f + 3.0f * ZS_GELU_K * x * x);
        float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * du;
        dinp[i] += grad * dout[i];
    }
}

__global__ static void k_relu_forward(float *out, const float *inp, size_t n)
{
    ZS_GRID_STRIDE(i, n) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

__global__ static void k_relu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    ZS_GRID_STRIDE(i, n) if (inp[i] > 0.0f) dinp[i] += dout[i];
}

/* one thread per row, the CPU's loop */
__global__ static void k_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                           const float *weight, const float *bias, int bt, int c)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= bt)
        return;
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

/* dinp: one thread per row */
__global__ static void k_layernorm_backward_rows(float *dinp, const float *dout, const float *inp,
                                                 const float *weight, const float *mean,
                                                 const float *rstd, int bt, int c)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= bt)
        return;
    const float *dy = dout + (size_t)i * c;
    const float *x = inp + (size_t)i * c;
    float *dx = dinp + (size_t)i * c;
    float m = mean[i], s = rstd[i];
    float g_mean = 0.0f, gn_mean = 0.0f;
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
        dx[j] += s * (gj - g_mean - nj * gn_mean);
    }
}

/* dweight, dbias: one thread per column, rows added in order as the CPU */
__global__ static void k_layernorm_backward_cols(float *dweight, float *dbias, const float *dout,
                                                 const float *inp, const float *mean,
                                                 const float *rstd, int bt, int c)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= c)
        return;
    float dw = dweight[j], db = dbias[j];
    for (int i = 0; i < bt; i++) {
        float dy = dout[(size_t)i * c + j];
        float nj = (inp[(size_t)i * c + j] - mean[i]) * rstd[i];
        db += dy;
        dw += nj * dy;
    }
    dweight[j] = dw;
    dbias[j] = db;
}

__global__ static void k_residual_forward(float *out, const float *a, const float *b, size_t n)
{
    ZS_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

__global__ static void k_axpy(float *y, float alpha, const float *x, size_t n)
{
    ZS_GRID_STRIDE(i, n) y[i] += alpha * x[i];
}

__global__ static void k_scale(float *x, float alpha, size_t n)
{
    ZS_GRID_STRIDE(i, n) x[i] *= alpha;
}

__global__ static void k_embedding_forward(float *out, const int32_t *tokens, const float *wte,
                                           const float *wpe, int t, int c, size_t n)
{
    ZS_GRID_STRIDE(i, n)
    {
        size_t row = i / (size_t)c;
        int j = (int)(i % (size_t)c);
        int ti = (int)(row % (size_t)t);
        out[i] = wte[(size_t)tokens[row] * c + j] + wpe[(size_t)ti * c + j];
    }
}

/* one thread per channel, rows in (b,t) order: repeated tokens sum in the
 * CPU's order */
__global__ static void k_embedding_backward(float *dwte, float *dwpe, const float *dout,
                                            const int32_t *tokens, int b, int t, int c)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= c)
        return;
    for (int bi = 0; bi < b; bi++)
        for (int ti = 0; ti < t; ti++) {
            size_t row = (size_t)bi * t + ti;
            float d = dout[row * c + j];
            dwte[(size_t)tokens[row] * c + j] += d;
            dwpe[(size_t)ti * c + j] += d;
        }
}

/* one thread per (b, t, h): the CPU's loop for one query row */
__global__ static void k_attention_forward(float *out, float *preatt, float *att, const float *qkv,
                                           int b, int t, int c, int nh)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= b * t * nh)
        return;
    int h = idx % nh, ti = (idx / nh) % t, bi = idx / (nh * t);
    int hs = c / nh, c3 = 3 * c;
    float scale = 1.0f / sqrtf((float)hs);
    const float *q = qkv + ((size_t)bi * t + ti) * c3 + h * hs;
    size_t arow = (((size_t)bi * nh + h) * t + ti) * t;
    float *pre = preatt + arow;
    float *a = att + arow;
    float maxval = -INFINITY;
    for (int t2 = 0; t2 <= ti; t2++) {
        const float *k = qkv + ((size_t)bi * t + t2) * c3 + c + h * hs;
        float dot = 0.0f;
        for (int j = 0; j < hs; j++)
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
    float *o = out + ((size_t)bi * t + ti) * c + h * hs;
    for (int j = 0; j < hs; j++)
        o[j] = 0.0f;
    for (int t2 = 0; t2 <= ti; t2++) {
        const float *v = qkv + ((size_t)bi * t + t2) * c3 + 2 * c + h * hs;
        float w = a[t2];
        for (int j = 0; j < hs; j++)
            o[j] += w * v[j];
    }
}

/* Attention backward, part 1, one thread per query row (b, t, h): datt,
 * dpreatt (the whole row, zero past the diagonal) and dq. The CPU adds into
 * dq only from its own row, so the order matches. */
__global__ static void k_attention_backward_rows(float *dqkv, float *dpreatt, float *datt,
                                                 const float *dout, const float *qkv,
                                                 const float *att, int b, int t, int c, int nh)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= b * t * nh)
        return;
    int h = idx % nh, ti = (idx / nh) % t, bi = idx / (nh * t);
    int hs = c / nh, c3 = 3 * c;
    float scale = 1.0f / sqrtf((float)hs);
    size_t arow = (((size_t)bi * nh + h) * t + ti) * t;
    const float *a = att + arow;
    float *da = datt + arow;
    float *dpre = dpreatt + arow;
    float *dq = dqkv + ((size_t)bi * t + ti) * c3 + h * hs;
    const float *dy = dout + ((size_t)bi * t + ti) * c + h * hs;
    for (int t2 = 0; t2 < t; t2++) {
        da[t2] = 0.0f;
        dpre[t2] = 0.0f;
    }
    for (int t2 = 0; t2 <= ti; t2++) {
        const float *v = qkv + ((size_t)bi * t + t2) * c3 + 2 * c + h * hs;
        float dot = 0.0f;
        for (int j = 0; j < hs; j++)
            dot += v[j] * dy[j];
        da[t2] += dot;
    }
    float adot = 0.0f;
    for (int t2 = 0; t2 <= ti; t2++)
        adot += a[t2] * da[t2];
    for (int t3 = 0; t3 <= ti; t3++)
        dpre[t3] += a[t3] * (da[t3] - adot);
    for (int t2 = 0; t2 <= ti; t2++) {
        const float *k = qkv + ((size_t)bi * t + t2) * c3 + c + h * hs;
        float g = dpre[t2] * scale;
        for (int j = 0; j < hs; j++)
            dq[j] += k[j] * g;
    }
}

/* Part 2, one thread per key row (b, t2, h): dk and dv receive the
 * contributions of query rows ti = t2..T-1 in ascending order, as the
 * CPU's outer loop over ti gives them. */
__global__ static void k_attention_backward_keys(float *dqkv, const float *dpreatt,
                                                 const float *dout, const float *qkv,
                                                 const float *att, int b, int t, int c, int nh)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= b * t * nh)
        return;
    int h = idx % nh, t2 = (idx / nh) % t, bi = idx / (nh * t);
    int hs = c / nh, c3 = 3 * c;
    float scale = 1.0f / sqrtf((float)hs);
    float *dk = dqkv + ((size_t)bi * t + t2) * c3 + c + h * hs;
    float *dv = dqkv + ((size_t)bi * t + t2) * c3 + 2 * c + h * hs;
    for (int ti = t2; ti < t; ti++) {
        size_t arow = (((size_t)bi * nh + h) * t + ti) * t;
        const float *dy = dout + ((size_t)bi * t + ti) * c + h * hs;
        const float *q = qkv + ((size_t)bi * t + ti) * c3 + h * hs;
        float w = att[arow + t2];
        for (int j = 0; j < hs; j++)
            dv[j] += w * dy[j];
        float g = dpreatt[arow + t2] * scale;
        for (int j = 0; j < hs; j++)
            dk[j] += q[j] * g;
    }
}

/* one thread per row */
__global__ static void k_softmax_xent_forward(float *losses, float *probs, const float *logits,
                                              const int32_t *targets, int bt, int v)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= bt)
        return;
    const float *z = logits + (size_t)i * v;
    float *p = probs + (size_t)i * v;
    float maxval = -INFINITY;
    for (int j = 0; j < v; j++)
        if (z[j] > maxval)
            maxval = z[j];
    float sum = 0.0f;
    for (int j = 0; j < v; j++) {
        p[j] = expf(z[j] - maxval);
        sum += p[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j < v; j++)
        p[j] *= inv;
    /* as cpu_xent.h: where p[target] underflowed, log(sum) + max - z[target] */
    float pt = p[targets[i]];
    losses[i] = pt > 0.0f ? -logf(pt) : logf(sum) + maxval - z[targets[i]];
}

__global__ static void k_softmax_xent_backward(float *dlogits, const float *probs,
                                               const int32_t *targets, float dloss, size_t n, int v)
{
    ZS_GRID_STRIDE(i, n)
    {
        size_t row = i / (size_t)v;
        int j = (int)(i % (size_t)v);
        float ind = (j == targets[row]) ? 1.0f : 0.0f;
        dlogits[i] = dloss * (probs[i] - ind);
    }
}

static void cuda_add_bias(void *ctx, float *out, const float *bias, int bt, int oc)
{
    (void)ctx;
    k_add_bias<<<ZS_1D((size_t)bt * oc)>>>(out, bias, (size_t)bt * oc, oc);
    ZS_CU_LAUNCHED();
}

static void cuda_bias_backward(void *ctx, float *dbias, const float *dout, int bt, int oc)
{
    (void)ctx;
    k_bias_backward<<<ZS_ROWS(oc)>>>(dbias, dout, bt, oc);
    ZS_CU_LAUNCHED();
}

static void cuda_gelu_forward(void *ctx, float *out, const float *inp, size_t n)
{
    (void)ctx;
    k_gelu_forward<<<ZS_1D(n)>>>(out, inp, n);
    ZS_CU_LAUNCHED();
}

static void cuda_gelu_backward(void *ctx, float *dinp, const float *inp, const float *dout, size_t n)
{
    (void)ctx;
    k_gelu_backward<<<ZS_1D(n)>>>(dinp, inp, dout, n);
    ZS_CU_LAUNCHED();
}

static void cuda_relu_forward(void *ctx, float *out, const float *inp, size_t n)
{
    (void)ctx;
    k_relu_forward<<<ZS_1D(n)>>>(out, inp, n);
    ZS_CU_LAUNCHED();
}

static void cuda_relu_backward(void *ctx, float *dinp, const float *inp, const float *dout, size_t n)
{
    (void)ctx;
    k_relu_backward<<<ZS_1D(n)>>>(dinp, inp, dout, n);
    ZS_CU_LAUNCHED();
}

static void cuda_layernorm_forward(void *ctx, float *out, float *mean, float *rstd,
                                   const float *inp, const float *weight, const float *bias,
                                   int bt, int c)
{
    (void)ctx;
    k_layernorm_forward<<<ZS_ROWS(bt)>>>(out, mean, rstd, inp, weight, bias, bt, c);
    ZS_CU_LAUNCHED();
}

static void cuda_layernorm_backward(void *ctx, float *dinp, float *dweight, float *dbias,
                                    const float *dout, const float *inp, const float *weight,
                                    const float *mean, const float *rstd, int bt, int c)
{
    (void)ctx;
    k_layernorm_backward_rows<<<ZS_ROWS(bt)>>>(dinp, dout, inp, weight, mean, rstd, bt, c);
    ZS_CU_LAUNCHED();
    k_layernorm_backward_cols<<<ZS_ROWS(c)>>>(dweight, dbias, dout, inp, mean, rstd, bt, c);
    ZS_CU_LAUNCHED();
}

static void cuda_residual_forward(void *ctx, float *out, const float *a, const float *b, size_t n)
{
    (void)ctx;
    k_residual_forward<<<ZS_1D(n)>>>(out, a, b, n);
    ZS_CU_LAUNCHED();
}

static void cuda_axpy(void *ctx, float *y, float alpha, const float *x, size_t n)
{
    (void)ctx;
    k_axpy<<<ZS_1D(n)>>>(y, alpha, x, n);
    ZS_CU_LAUNCHED();
}

static void cuda_scale(void *ctx, float *x, float alpha, size_t n)
{
    (void)ctx;
    k_scale<<<ZS_1D(n)>>>(x, alpha, n);
    ZS_CU_LAUNCHED();
}

static void cuda_embedding_forward(void *ctx, float *out, const int32_t *tokens,
                                   const float *wte, const float *wpe, int b, int t, int c)
{
    (void)ctx;
    size_t n = (size_t)b * t * c;
    k_embedding_forward<<<ZS_1D(n)>>>(out, tokens, wte, wpe, t, c, n);
    ZS_CU_LAUNCHED();
}

static void cuda_embedding_backward(void *ctx, float *dwte, float *dwpe, const float *dout,
                                    const int32_t *tokens, int b, int t, int c)
{
    (void)ctx;
    k_embedding_backward<<<ZS_ROWS(c)>>>(dwte, dwpe, dout, tokens, b, t, c);
    ZS_CU_LAUNCHED();
}

static void cuda_attention_forward(void *ctx, float *out, float *preatt, float *att,
                                   const float *qkv, int b, int t, int c, int nh)
{
    (void)ctx;
    k_attention_forward<<<ZS_ROWS(b * t * nh)>>>(out, preatt, att, qkv, b, t, c, nh);
    ZS_CU_LAUNCHED();
}

static void cuda_attention_backward(void *ctx, float *dqkv, float *dpreatt, float *datt,
                                    const float *dout, const float *qkv, const float *att,
                                    int b, int t, int c, int nh)
{
    (void)ctx;
    k_attention_backward_rows<<<ZS_ROWS(b * t * nh)>>>(dqkv, dpreatt, datt, dout, qkv, att, b, t,
                                                       c, nh);
    ZS_CU_LAUNCHED();
    k_attention_backward_keys<<<ZS_ROWS(b * t * nh)>>>(dqkv, dpreatt, dout, qkv, att, b, t, c, nh);
    ZS_CU_LAUNCHED();
}

static void cuda_softmax_xent_forward(void *ctx, float *losses, float *probs,
                                      const float *logits, const int32_t *targets, int bt, int v)
{
    (void)ctx;
    k_softmax_xent_forward<<<ZS_ROWS(bt)>>>(losses, probs, logits, targets, bt, v);
    ZS_CU_LAUNCHED();
}

static void cuda_softmax_xent_backward(void *ctx, float *dlogits, const float *probs,
                                       const int32_t *targets, float dloss, int bt, int v)
{
    (void)ctx;
    size_t n = (size_t)bt * v;
    k_softmax_xent_backward<<<ZS_1D(n)>>>(dlogits, probs, targets, dloss, n, v);
    ZS_CU_LAUNCHED();
}

/* ---------------------------------------------------------------------------
 * reductions: a fixed shape (ZS_RED_BLOCKS x ZS_CU_THREADS) whatever the
 * device, so the order of the double sums depends only on n
 * ------------------------------------------------------------------------- */

#define ZS_RED_BLOCKS 256

__global__ static void k_sumsq_partial(double *partials, const void *x, int t, size_t n)
{
    __shared__ double s[ZS_CU_THREADS];
    double acc = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)blockDim.x * gridDim.x) {
        double xi = (double)d_load(x, t, i);
        acc += xi * xi;
    }
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int w = ZS_CU_THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w)
            s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        partials[blockIdx.x] = s[0];
}

static double cuda_sumsq(void *ctx, const void *x, zs_dtype t, size_t n)
{
    zs_cuda_ctx *c = (zs_cuda_ctx *)ctx;
    k_sumsq_partial<<<ZS_RED_BLOCKS, ZS_CU_THREADS>>>(c->d_partials, x, (int)t, n);
    ZS_CU_LAUNCHED();
    double h[ZS_RED_BLOCKS];
    ZS_CU(cudaMemcpy(h, c->d_partials, sizeof h, cudaMemcpyDeviceToHost));
    double s = 0.0;
    for (int i = 0; i < ZS_RED_BLOCKS; i++)
        s += h[i];
    return s;
}

__global__ static void k_count_nonfinite(unsigned long long *count, const void *x, int t, size_t n)
{
    unsigned long long bad = 0;
    ZS_GRID_STRIDE(i, n)
    {
        if (t == ZS_DTYPE_F32) {
            uint32_t u = ((const uint32_t *)x)[i];
            bad += (u & 0x7f800000u) == 0x7f800000u;
        } else {
            uint16_t u = ((const uint16_t *)x)[i];
            uint16_t em = (t == ZS_DTYPE_BF16) ? 0x7f80u : 0x7c00u;
            bad += (u & em) == em;
        }
    }
    if (bad)
        atomicAdd(count, bad); /* integers: exact in any order */
}

static size_t cuda_count_nonfinite(void *ctx, const void *x, zs_dtype t, size_t n)
{
    zs_cuda_ctx *c = (zs_cuda_ctx *)ctx;
    ZS_CU(cudaMemset(c->d_count, 0, sizeof *c->d_count));
    k_count_nonfinite<<<ZS_1D(n)>>>(c->d_count, x, (int)t, n);
    ZS_CU_LAUNCHED();
    unsigned long long h = 0;
    ZS_CU(cudaMemcpy(&h, c->d_count, sizeof h, cudaMemcpyDeviceToHost));
    return (size_t)h;
}

/* ---------------------------------------------------------------------------
 * storage types and fixed point
 * ------------------------------------------------------------------------- */

__global__ static void k_convert_to_f32(float *dst, const void *src, int st, size_t n)
{
    ZS_GRID_STRIDE(i, n) dst[i] = d_load(src, st, i);
}

__global__ static void k_convert_from_f32(void *dst, int dt, const float *src, size_t n)
{
    ZS_GRID_STRIDE(i, n) d_store(dst, dt, i, src[i]);
}

__global__ static void k_accumulate_f32(void *dst, int dt, const float *src, size_t n)
{
    ZS_GRID_STRIDE(i, n) d_store(dst, dt, i, d_load(dst, dt, i) + src[i]);
}

__global__ static void k_add_typed(void *dst, const void *src, int t, size_t n)
{
    ZS_GRID_STRIDE(i, n) d_store(dst, t, i, d_load(dst, t, i) + d_load(src, t, i));
}

__global__ static void k_to_fixed(unsigned long long *count, int64_t *dst, const void *src, int t,
                                  size_t n, int frac_bits, int64_t limit)
{
    double scale = ldexp(1.0, frac_bits), lim = (double)limit;
    unsigned long long bad = 0;
    ZS_GRID_STRIDE(i, n)
    {
        double v = (double)d_load(src, t, i) * scale;
        if (!(fabs(v) < lim)) {
            dst[i] = 0;
            bad++;
        } else {
            dst[i] = (int64_t)rint(v); /* ties to even, as nearbyint on the CPU */
        }
    }
    if (bad)
        atomicAdd(count, bad);
}

__global__ static void k_add_i64(int64_t *dst, const int64_t *src, size_t n)
{
    ZS_GRID_STRIDE(i, n) dst[i] += src[i];
}

__global__ static void k_from_fixed(void *dst, int t, const int64_t *src, size_t n, int frac_bits)
{
    double scale = ldexp(1.0, -frac_bits);
    ZS_GRID_STRIDE(i, n) d_store(dst, t, i, (float)((double)src[i] * scale));
}

static void cuda_convert_to_f32(void *ctx, float *dst, const void *src, zs_dtype st, size_t n)
{
    (void)ctx;
    k_convert_to_f32<<<ZS_1D(n)>>>(dst, src, (int)st, n);
    ZS_CU_LAUNCHED();
}

static void cuda_convert_from_f32(void *ctx, void *dst, zs_dtype dt, const float *src, size_t n)
{
    (void)ctx;
    k_convert_from_f32<<<ZS_1D(n)>>>(dst, (int)dt, src, n);
    ZS_CU_LAUNCHED();
}

static void cuda_accumulate_f32(void *ctx, void *dst, zs_dtype dt, const float *src, size_t n)
{
    (void)ctx;
    k_accumulate_f32<<<ZS_1D(n)>>>(dst, (int)dt, src, n);
    ZS_CU_LAUNCHED();
}

static void cuda_add_typed(void *ctx, void *dst, const void *src, zs_dtype t, size_t n)
{
    (void)ctx;
    k_add_typed<<<ZS_1D(n)>>>(dst, src, (int)t, n);
    ZS_CU_LAUNCHED();
}

static size_t cuda_to_fixed(void *ctx, int64_t *dst, const void *src, zs_dtype t, size_t n,
                            int frac_bits, int64_t limit)
{
    zs_cuda_ctx *c = (zs_cuda_ctx *)ctx;
    ZS_CU(cudaMemset(c->d_count, 0, sizeof *c->d_count));
    k_to_fixed<<<ZS_1D(n)>>>(c->d_count, dst, src, (int)t, n, frac_bits, limit);
    ZS_CU_LAUNCHED();
    unsigned long long h = 0;
    ZS_CU(cudaMemcpy(&h, c->d_count, sizeof h, cudaMemcpyDeviceToHost));
    return (size_t)h;
}

static void cuda_add_i64(void *ctx, int64_t *dst, const int64_t *src, size_t n)
{
    (void)ctx;
    k_add_i64<<<ZS_1D(n)>>>(dst, src, n);
    ZS_CU_LAUNCHED();
}

static void cuda_from_fixed(void *ctx, void *dst, zs_dtype t, const int64_t *src, size_t n,
                            int frac_bits)
{
    (void)ctx;
    k_from_fixed<<<ZS_1D(n)>>>(dst, (int)t, src, n, frac_bits);
    ZS_CU_LAUNCHED();
}

/* ---------------------------------------------------------------------------
 * optimizer: the CPU's arithmetic, element by element
 * ------------------------------------------------------------------------- */

__global__ static void k_adamw(float *master, float *m, float *v, const void *grad, int gt,
                               void *param, int pt, size_t n, zs_optim_hparams h)
{
    float b1 = h.beta1, b2 = h.beta2;
    ZS_GRID_STRIDE(i, n)
    {
        float g = d_load(grad, gt, i) * h.grad_mul;
        if (h.l2 != 0.0f)
            g += h.l2 * master[i];
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        float mhat = mi / h.bias_corr1;
        float vhat = vi / h.bias_corr2;
        float p = master[i];
        p -= h.lr * (mhat / (sqrtf(vhat) + h.eps) + h.weight_decay * p);
        m[i] = mi;
        v[i] = vi;
        master[i] = p;
        if (param != NULL)
            d_store(param, pt, i, p);
    }
}

__global__ static void k_sgd(float *master, float *buf, const void *grad, int gt, void *param,
                             int pt, size_t n, zs_optim_hparams h)
{
    ZS_GRID_STRIDE(i, n)
    {
        float g = d_load(grad, gt, i) * h.grad_mul;
        float b = h.momentum * buf[i] + g;
        float p = master[i];
        p -= h.lr * h.weight_decay * p;
        p -= h.lr * b;
        buf[i] = b;
        master[i] = p;
        if (param != NULL)
            d_store(param, pt, i, p);
    }
}

static void cuda_adamw_step(void *ctx, float *master, float *m, float *v, const void *grad,
                            zs_dtype gt, void *param, zs_dtype pt, size_t n,
                            const zs_optim_hparams *h)
{
    (void)ctx;
    k_adamw<<<ZS_1D(n)>>>(master, m, v, grad, (int)gt, param, (int)pt, n, *h);
    ZS_CU_LAUNCHED();
}

static void cuda_sgd_step(void *ctx, float *master, float *buf, const void *grad, zs_dtype gt,
                          void *param, zs_dtype pt, size_t n, const zs_optim_hparams *h)
{
    (void)ctx;
    k_sgd<<<ZS_1D(n)>>>(master, buf, grad, (int)gt, param, (int)pt, n, *h);
    ZS_CU_LAUNCHED();
}

/* ---------------------------------------------------------------------------
 * device collectives (NCCL)
 * ------------------------------------------------------------------------- */

#ifdef HAVE_NCCL
static int cuda_coll_get_id(void *ctx, void *id)
{
    (void)ctx;
    ncclUniqueId u;
    if (ncclGetUniqueId(&u) != ncclSuccess)
        return -1;
    memcpy(id, &u, sizeof u);
    return 0;
}

static int cuda_coll_init(void *ctx, const void *id, int nranks, int rank, char *err, size_t errlen)
{
    zs_cuda_ctx *c = (zs_cuda_ctx *)ctx;
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclResult_t r = ncclCommInitRank(&c->nccl, nranks, u, rank);
    if (r != ncclSuccess) {
        snprintf(err, errlen, "ncclCommInitRank failed: %s (NCCL needs one GPU per rank)",
                 ncclGetErrorString(r));
        return -1;
    }
    c->nccl_ready = 1;
    return 0;
}

static ncclDataType_t zs_nccl_type(zs_coll_type t)
{
    switch (t) {
    case ZS_COLL_BF16: return ncclBfloat16;
    case ZS_COLL_F16: return ncclFloat16;
    case ZS_COLL_I64: return ncclInt64;
    case ZS_COLL_F32: break;
    }
    return ncclFloat32;
}

static size_t zs_coll_size(zs_coll_type t)
{
    return t == ZS_COLL_I64 ? 8 : t == ZS_COLL_F32 ? 4 : 2;
}

/* In-place allgatherv: rank q broadcasts its counts[q] elements at displs[q]. */
static int cuda_coll_allgatherv(void *ctx, void *buf, const int *counts, const int *displs,
                                zs_coll_type t, int nranks)
{
    zs_cuda_ctx *c = (zs_cuda_ctx *)ctx;
    size_t es = zs_coll_size(t);
    ncclResult_t r = ncclGroupStart();
    for (int q = 0; q < nranks && r == ncclSuccess; q++) {
        if (counts[q] == 0)
            continue;
        char *p = (char *)buf + (size_t)displs[q] * es;
        r = ncclBroadcast(p, p, (size_t)counts[q], zs_nccl_type(t), q, c->nccl, 0);
    }
    ncclResult_t r2 = ncclGroupEnd();
    if (r != ncclSuccess || r2 != ncclSuccess)
        return -1;
    ZS_CU(cudaStreamSynchronize(0));
    return 0;
}

/* Reduce-scatterv: rank q receives the sum of [off_q, off_q + counts[q]). */
static int cuda_coll_reduce_scatterv(void *ctx, const void *send, void *recv, const int *counts,
                                     zs_coll_type t, int nranks, int rank)
{
    zs_cuda_ctx *c = (zs_cuda_ctx *)ctx;
    size_t es = zs_coll_size(t), off = 0;
    ncclResult_t r = ncclGroupStart();
    for (int q = 0; q < nranks && r == ncclSuccess; q++) {
        if (counts[q] > 0)
            r = ncclReduce((const char *)send + off * es, q == rank ? recv : NULL,
                           (size_t)counts[q], zs_nccl_type(t), ncclSum, q, c->nccl, 0);
        off += (size_t)counts[q];
    }
    ncclResult_t r2 = ncclGroupEnd();
    if (r != ncclSuccess || r2 != ncclSuccess)
        return -1;
    ZS_CU(cudaStreamSynchronize(0));
    return 0;
}
#endif

/* ---------------------------------------------------------------------------
 * the table
 * ------------------------------------------------------------------------- */

static void cuda_release(void *ctx)
{
    zs_cuda_ctx *c = (zs_cuda_ctx *)ctx;
    if (c == NULL)
        return;
#ifdef HAVE_NCCL
    if (c->nccl_ready)
        ncclCommDestroy(c->nccl);
#endif
    cudaFree(c->d_partials);
    cudaFree(c->d_count);
    cublasDestroy(c->blas);
    free(c);
}

static const struct zs_backend_i zs_cuda_iface = {
    .name = "cuda",
    .host_accessible = 0,
    .release = cuda_release,
    .alloc = cuda_alloc,
    .dealloc = cuda_dealloc,
    .memset0 = cuda_memset0,
    .copy_h2d = cuda_copy_h2d,
    .copy_d2h = cuda_copy_d2h,
    .copy_d2d = cuda_copy_d2d,
    .sgemm = cuda_sgemm,
    .add_bias = cuda_add_bias,
    .bias_backward = cuda_bias_backward,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .relu_forward = cuda_relu_forward,
    .relu_backward = cuda_relu_backward,
    .layernorm_forward = cuda_layernorm_forward,
    .layernorm_backward = cuda_layernorm_backward,
    .residual_forward = cuda_residual_forward,
    .axpy = cuda_axpy,
    .scale = cuda_scale,
    .embedding_forward = cuda_embedding_forward,
    .embedding_backward = cuda_embedding_backward,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .ring_attention_forward = NULL, /* context parallelism: not on CUDA (compat.c) */
    .ring_attention_backward = NULL,
    .rmsnorm_forward = cuda_rmsnorm_forward,
    .rmsnorm_backward = cuda_rmsnorm_backward,
    .swiglu_forward = cuda_swiglu_forward,
    .swiglu_backward = cuda_swiglu_backward,
    .rope_forward = cuda_rope_forward,
    .rope_backward = cuda_rope_backward,
    .attention_gqa_forward = cuda_attention_gqa_forward,
    .attention_gqa_backward = cuda_attention_gqa_backward,
    .softmax_xent_forward = cuda_softmax_xent_forward,
    .softmax_xent_backward = cuda_softmax_xent_backward,
    /* tensor parallelism: no kernels yet (the engine refuses --tp above 1) */
    .vocab_embedding_forward = NULL,
    .vocab_embedding_backward = NULL,
    .xent_vocab_max = NULL,
    .xent_vocab_sums = NULL,
    .xent_vocab_finish = NULL,
    .xent_vocab_backward = NULL,
    .rows_absmax = NULL, /* the exact sums of slices are the portable backend's */
    .grid_add = NULL,
    .xent_slice_sums = NULL,
    .sumsq = cuda_sumsq,
    .count_nonfinite = cuda_count_nonfinite,
    .convert_to_f32 = cuda_convert_to_f32,
    .convert_from_f32 = cuda_convert_from_f32,
    .accumulate_f32 = cuda_accumulate_f32,
    .add_typed = cuda_add_typed,
    .to_fixed = cuda_to_fixed,
    .add_i64 = cuda_add_i64,
    .from_fixed = cuda_from_fixed,
    .adamw_step = cuda_adamw_step,
    .sgd_step = cuda_sgd_step,
#ifdef HAVE_NCCL
    .coll_id_bytes = sizeof(ncclUniqueId),
    .coll_get_id = cuda_coll_get_id,
    .coll_init = cuda_coll_init,
    .coll_allgatherv = cuda_coll_allgatherv,
    .coll_reduce_scatterv = cuda_coll_reduce_scatterv,
#endif
};

/* Pick GPU `device` modulo the number visible (several ranks may share one
 * GPU), create the cuBLAS handle. Fails with a reason when no GPU is usable. */
int zs_backend_cuda_init(struct zs_backend *be, int device, char *err, size_t errlen)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(err, errlen,
                 "--backend cuda: no usable GPU (%s); run on a machine with an NVIDIA GPU "
                 "and driver, or use --backend cpu",
                 e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device found");
        cudaGetLastError();
        return -1;
    }
    zs_cuda_ctx *c = (zs_cuda_ctx *)calloc(1, sizeof *c);
    if (c == NULL) {
        snprintf(err, errlen, "out of host memory creating the CUDA backend");
        return -1;
    }
    c->device = (device < 0 ? 0 : device) % count;
    if ((e = cudaSetDevice(c->device)) != cudaSuccess ||
        (e = cudaMalloc((void **)&c->d_partials, ZS_RED_BLOCKS * sizeof(double))) != cudaSuccess ||
        (e = cudaMalloc((void **)&c->d_count, sizeof *c->d_count)) != cudaSuccess) {
        snprintf(err, errlen, "--backend cuda: cannot use GPU %d: %s", c->device,
                 cudaGetErrorString(e));
        cudaFree(c->d_partials);
        free(c);
        return -1;
    }
    if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(c->blas, CUBLAS_PEDANTIC_MATH) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "--backend cuda: cuBLAS initialisation failed on GPU %d", c->device);
        cudaFree(c->d_partials);
        cudaFree(c->d_count);
        free(c);
        return -1;
    }
    be->iface = &zs_cuda_iface;
    be->ctx = c;
    return 0;
}
