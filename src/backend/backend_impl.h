/* zerosim — the backend table (internal to src/backend/).
 *
 * A backend fills one `static const struct zs_backend_i` with designated
 * initializers and a constructor that sets `iface` and `ctx` of a
 * struct zs_backend. The public wrappers in backend.c check arguments and
 * dispatch through this table; they are the only callers of its members.
 *
 * Every member receives the backend's ctx first, then the arguments of the
 * matching zs_backend_* wrapper in the same order (see zerosim/backend.h for
 * shapes and semantics). Members marked REQUIRED must be non-NULL. Members
 * marked OPTIONAL may be NULL; the wrapper then uses the fallback stated here.
 * Kernels may assume the wrapper has already checked the cheap preconditions
 * (non-NULL pointers where data is touched, non-negative dimensions).
 */
#ifndef ZEROSIM_BACKEND_IMPL_H
#define ZEROSIM_BACKEND_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "zerosim/backend.h"

struct zs_backend_i {
    /* REQUIRED. Short name, as accepted by zs_backend_init ("cpu"). */
    const char *name;

    /* 1 when the backend's device pointers are host pointers that host code
     * (MPI, the compression codecs) may read and write directly: the CPU
     * backend. 0 for a device with its own memory (CUDA): buffers then reach
     * the host only through copy_d2h / copy_h2d. */
    int host_accessible;

    /* OPTIONAL. Release ctx. NULL: nothing to release. The wrapper frees the
     * struct zs_backend itself afterwards. */
    void (*release)(void *ctx);

    /* ---- memory ---------------------------------------------------------- */

    /* REQUIRED. Device allocation of `bytes` bytes, zero-filled, aligned to at
     * least 64 bytes. NULL on failure. bytes == 0 may return NULL or a unique
     * pointer; the wrapper passes 0 through. */
    void *(*alloc)(void *ctx, size_t bytes);
    /* REQUIRED. Free a pointer from alloc; the wrapper filters out NULL.
     * (Named dealloc so that a free() macro of a debugging allocator cannot
     * expand here.) */
    void (*dealloc)(void *ctx, void *ptr);
    /* OPTIONAL. Zero `bytes` bytes of device memory. NULL: the wrapper copies
     * from a zeroed host buffer with copy_h2d. */
    void (*memset0)(void *ctx, void *dst, size_t bytes);
    /* REQUIRED. Host to device copy; synchronous (src may be reused on return). */
    void (*copy_h2d)(void *ctx, void *dst, const void *src, size_t bytes);
    /* REQUIRED. Device to host copy; synchronous (dst is valid on return). */
    void (*copy_d2h)(void *ctx, void *dst, const void *src, size_t bytes);
    /* OPTIONAL. Device to device copy. NULL: the wrapper stages through a host
     * buffer with copy_d2h then copy_h2d. */
    void (*copy_d2d)(void *ctx, void *dst, const void *src, size_t bytes);

    /* ---- dense algebra --------------------------------------------------- */

    /* REQUIRED. Row-major C = alpha*op(A)*op(B) + beta*C. The wrapper never
     * calls it with m == 0 or n == 0, and it has checked the leading
     * dimensions. k == 0 must give C = beta*C. */
    void (*sgemm)(void *ctx, int trans_a, int trans_b, int m, int n, int k,
                  float alpha, const float *a, int lda, const float *b, int ldb,
                  float beta, float *c, int ldc);

    /* ---- elementwise and layer kernels (fp32) ---------------------------- */

    /* REQUIRED. out(BT,OC) += bias(OC). */
    void (*add_bias)(void *ctx, float *out, const float *bias, int bt, int oc);
    /* REQUIRED. dbias(OC) += column sums of dout(BT,OC). */
    void (*bias_backward)(void *ctx, float *dbias, const float *dout, int bt, int oc);
    /* REQUIRED. out(N) = gelu(inp(N)), tanh approximation. */
    void (*gelu_forward)(void *ctx, float *out, const float *inp, size_t n);
    /* REQUIRED. dinp(N) += gelu'(inp) * dout. */
    void (*gelu_backward)(void *ctx, float *dinp, const float *inp, const float *dout, size_t n);
    /* REQUIRED. out(N) = max(inp, 0). */
    void (*relu_forward)(void *ctx, float *out, const float *inp, size_t n);
    /* REQUIRED. dinp(N) += (inp > 0) * dout. */
    void (*relu_backward)(void *ctx, float *dinp, const float *inp, const float *dout, size_t n);
    /* REQUIRED. LayerNorm over C, eps 1e-5, biased variance; saves mean, rstd. */
    void (*layernorm_forward)(void *ctx, float *out, float *mean, float *rstd,
                              const float *inp, const float *weight, const float *bias,
                              int bt, int c);
    /* REQUIRED. dinp, dweight, dbias accumulate. */
    void (*layernorm_backward)(void *ctx, float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight,
                               const float *mean, const float *rstd, int bt, int c);
    /* REQUIRED. out(N) = a(N) + b(N); out may alias a or b. */
    void (*residual_forward)(void *ctx, float *out, const float *a, const float *b, size_t n);
    /* REQUIRED. y(N) += alpha * x(N). */
    void (*axpy)(void *ctx, float *y, float alpha, const float *x, size_t n);
    /* REQUIRED. x(N) *= alpha. */
    void (*scale)(void *ctx, float *x, float alpha, size_t n);
    /* REQUIRED. out(B,T,C) = wte[tokens[b,t]] + wpe[t]. */
    void (*embedding_forward)(void *ctx, float *out, const int32_t *tokens,
                              const float *wte, const float *wpe, int b, int t, int c);
    /* REQUIRED. dwte, dwpe accumulate. */
    void (*embedding_backward)(void *ctx, float *dwte, float *dwpe, const float *dout,
                               const int32_t *tokens, int b, int t, int c);
    /* REQUIRED. Causal multi-head attention over qkv(B,T,3C); saves preatt and
     * att (B,NH,T,T), zero above the diagonal. */
    void (*attention_forward)(void *ctx, float *out, float *preatt, float *att,
                              const float *qkv, int b, int t, int c, int nh);
    /* REQUIRED. dqkv accumulates; dpreatt and datt are overwritten scratch. */
    void (*attention_backward)(void *ctx, float *dqkv, float *dpreatt, float *datt,
                               const float *dout, const float *qkv, const float *att,
                               int b, int t, int c, int nh);
    /* OPTIONAL. Ring attention's blocks (zerosim/backend.h; cpu_ring.c). */
    void (*ring_attention_forward)(void *ctx, float *out, float *stats, const float *qkv,
                                   const float *kv, int kv_stride, const zs_ring_block *blk);
    void (*ring_attention_backward)(void *ctx, float *dqkv, float *dkv, int dkv_stride,
                                    const float *dout, const float *out, const float *stats,
                                    const float *qkv, const float *kv, int kv_stride,
                                    const zs_ring_block *blk);
    /* REQUIRED. RMSNorm over C: rstd = 1/sqrt(mean(x^2) + eps), out =
     * (x * rstd) * weight; saves rstd. */
    void (*rmsnorm_forward)(void *ctx, float *out, float *rstd, const float *inp,
                            const float *weight, int bt, int c, float eps);
    /* REQUIRED. dinp, dweight accumulate. */
    void (*rmsnorm_backward)(void *ctx, float *dinp, float *dweight, const float *dout,
                             const float *inp, const float *weight, const float *rstd, int bt,
                             int c);
    /* REQUIRED. out(BT,F) = silu(gate) * up over inp(BT,2F) = [gate | up] rows. */
    void (*swiglu_forward)(void *ctx, float *out, const float *inp, int bt, int f);
    /* REQUIRED. dinp(BT,2F) accumulates [dgate | dup]. */
    void (*swiglu_backward)(void *ctx, float *dinp, const float *inp, const float *dout, int bt,
                            int f);
    /* REQUIRED. Rotates the first nheads heads of each of the B*T rows of x
     * (row_stride floats apart) in place by table rows pos0 .. pos0+T-1. */
    void (*rope_forward)(void *ctx, float *x, const float *table, int b, int t, int nheads,
                         int hd, int row_stride, int pos0);
    /* REQUIRED. The inverse rotation, in place on the gradient. */
    void (*rope_backward)(void *ctx, float *dx, const float *table, int b, int t, int nheads,
                          int hd, int row_stride, int pos0);
    /* REQUIRED. Causal grouped-query attention over qkv(B,T,(NH+2NKV)*HD);
     * saves preatt and att (B,NH,T,T). */
    void (*attention_gqa_forward)(void *ctx, float *out, float *preatt, float *att,
                                  const float *qkv, int b, int t, int nh, int nkv, int hd);
    /* REQUIRED. dqkv accumulates; dpreatt and datt are overwritten scratch. */
    void (*attention_gqa_backward)(void *ctx, float *dqkv, float *dpreatt, float *datt,
                                   const float *dout, const float *qkv, const float *att, int b,
                                   int t, int nh, int nkv, int hd);
    /* REQUIRED. probs(BT,V) = softmax(logits); losses(BT) = -log probs[target]. */
    void (*softmax_xent_forward)(void *ctx, float *losses, float *probs,
                                 const float *logits, const int32_t *targets, int bt, int v);
    /* REQUIRED. dlogits(BT,V) = dloss * (probs - onehot(target)), overwrites. */
    void (*softmax_xent_backward)(void *ctx, float *dlogits, const float *probs,
                                  const int32_t *targets, float dloss, int bt, int v);

    /* ---- tensor parallelism (OPTIONAL as a group: a backend without them
     * cannot run --tp above 1; see zs_backend_has_tp) -------------------- */
    /* out(B,T,C) = wte[tokens - v0] where v0 <= token < v0 + vn, else 0;
     * plus wpe[t] when wpe is not NULL. wte holds rows v0 .. v0+vn-1. */
    void (*vocab_embedding_forward)(void *ctx, float *out, const int32_t *tokens,
                                    const float *wte, int v0, int vn, const float *wpe,
                                    int b, int t, int c);
    /* dwte (rows v0..) and, when not NULL, dwpe accumulate. */
    void (*vocab_embedding_backward)(void *ctx, float *dwte, float *dwpe, const float *dout,
                                     const int32_t *tokens, int v0, int vn, int b, int t, int c);
    /* rowmax(BT) = max over the V local logits of each row. */
    void (*xent_vocab_max)(void *ctx, float *rowmax, const float *logits, int bt, int v);
    /* sums[i] = sum_j exp(logits[i,j] - rowmax[i]); sums[BT + i] = the
     * target's logit when this rank holds it (v0 <= target < v0 + V), else 0. */
    void (*xent_vocab_sums)(void *ctx, float *sums, const float *logits, const float *rowmax,
                            const int32_t *targets, int v0, int bt, int v);
    /* With the group's max and sums: probs = exp(logits - rowmax) / sums[i],
     * losses[i] = log(sums[i]) + rowmax[i] - sums[BT + i]. */
    void (*xent_vocab_finish)(void *ctx, float *losses, float *probs, const float *logits,
                              const float *rowmax, const float *sums, int bt, int v);
    /* dlogits = dloss * (probs - onehot(target - v0)), overwrites. */
    void (*xent_vocab_backward)(void *ctx, float *dlogits, const float *probs,
                                const int32_t *targets, int v0, float dloss, int bt, int v);

    /* ---- exact sums of slices (OPTIONAL as a group: the portable
     * backend's; see zs_backend_has_exact_sums and docs/portable.md) ------ */
    /* rowmax[i] = max(rowmax[i], max_j |x[i,j]|), x (rows, n). */
    void (*rows_absmax)(void *ctx, float *rowmax, const float *x, int rows, int n);
    /* out(rows, n) += x rounded to row i's grid, nearest, ties to even:
     * the power of two g_i = 2^(e_i + ceil(log2 slices) - 24), rowmax[i]
     * < 2^e_i, at least 2^-149. Slices values of magnitude at most
     * rowmax[i] so rounded are integer multiples of g_i summing to at most
     * 2^24 g_i: their float sum is exact in any order. A row whose rowmax
     * is 0 or not finite is added as it is. */
    void (*grid_add)(void *ctx, float *out, const float *x, const float *rowmax, int rows,
                     int n, int slices);
    /* sums[i] = sum over j in [j0, j0 + vn) of exp(logits[i * ld + j] -
     * rowmax[i]), in index order from 0 (xent_vocab_sums over a slice). */
    void (*xent_slice_sums)(void *ctx, float *sums, const float *logits, const float *rowmax,
                            int bt, int ld, int j0, int vn);

    /* ---- reductions ------------------------------------------------------ */

    /* OPTIONAL. Sum of squares of a typed buffer in double, index order.
     * NULL: the wrapper copies the buffer to the host and sums there. */
    double (*sumsq)(void *ctx, const void *x, zs_dtype t, size_t n);
    /* OPTIONAL. Number of inf/NaN elements of a typed buffer.
     * NULL: the wrapper copies the buffer to the host and counts there. */
    size_t (*count_nonfinite)(void *ctx, const void *x, zs_dtype t, size_t n);

    /* ---- storage types --------------------------------------------------- */

    /* REQUIRED. dst(N) fp32 = src(N) stored as st. */
    void (*convert_to_f32)(void *ctx, float *dst, const void *src, zs_dtype st, size_t n);
    /* REQUIRED. dst(N) stored as dt = round-to-nearest-even(src(N)). */
    void (*convert_from_f32)(void *ctx, void *dst, zs_dtype dt, const float *src, size_t n);
    /* REQUIRED. dst(N, typed) = round(float(dst) + src), one rounding. */
    void (*accumulate_f32)(void *ctx, void *dst, zs_dtype dt, const float *src, size_t n);

    /* REQUIRED. dst(N, typed) = round(float(dst) + float(src)), one rounding. */
    void (*add_typed)(void *ctx, void *dst, const void *src, zs_dtype t, size_t n);

    /* ---- fixed point (deterministic reductions) ------------------------- */

    /* REQUIRED. dst(N) int64 = rint(src * 2^frac_bits) (ties to even); an
     * element not finite or with |scaled| >= limit is stored as 0 and
     * counted; returns the count. */
    size_t (*to_fixed)(void *ctx, int64_t *dst, const void *src, zs_dtype t, size_t n,
                       int frac_bits, int64_t limit);
    /* REQUIRED. dst(N) += src(N), int64. */
    void (*add_i64)(void *ctx, int64_t *dst, const int64_t *src, size_t n);
    /* REQUIRED. dst(N, typed) = round(float((double)src * 2^-frac_bits)). */
    void (*from_fixed)(void *ctx, void *dst, zs_dtype t, const int64_t *src, size_t n,
                       int frac_bits);

    /* ---- optimizer ------------------------------------------------------- */

    /* REQUIRED. AdamW over n elements (see backend.c / cpu.c for the exact
     * arithmetic, which every backend must reproduce). param may be NULL. */
    void (*adamw_step)(void *ctx, float *master, float *m, float *v,
                       const void *grad, zs_dtype gt, void *param, zs_dtype pt,
                       size_t n, const zs_optim_hparams *h);
    /* REQUIRED. SGD with momentum and decoupled weight decay. param may be NULL. */
    void (*sgd_step)(void *ctx, float *master, float *buf,
                     const void *grad, zs_dtype gt, void *param, zs_dtype pt,
                     size_t n, const zs_optim_hparams *h);

    /* ---- device collectives (all OPTIONAL, all or none) ------------------
     * Collectives on device buffers without MPI (NCCL). src/comm uses them
     * when the user asks (ZEROSIM_NCCL=1) and they exist; otherwise it stages
     * device buffers through host memory. Each returns 0 or non-zero. */

    /* Bytes of the id that rank 0 creates and every rank receives. */
    size_t coll_id_bytes;
    /* Create the id (rank 0 only). */
    int (*coll_get_id)(void *ctx, void *id);
    /* Join the group of nranks; writes a one-line reason on failure. */
    int (*coll_init)(void *ctx, const void *id, int nranks, int rank, char *err, size_t errlen);
    /* In-place allgatherv of elements of type t (zs_comm_allgatherv_inplace). */
    int (*coll_allgatherv)(void *ctx, void *buf, const int *counts, const int *displs,
                           zs_coll_type t, int nranks);
    /* Sum of send[0, total) over ranks; rank q gets its counts[q] elements. */
    int (*coll_reduce_scatterv)(void *ctx, const void *send, void *recv, const int *counts,
                                zs_coll_type t, int nranks, int rank);
};

/* A backend instance: its table and its private state. */
struct zs_backend {
    const struct zs_backend_i *iface;
    void *ctx;
};

/* cpu_ring.c: ring attention's blocks, the CPU's (and so the portable
 * backend's) table members. */
void zs_cpu_ring_attention_forward(void *ctx, float *out, float *stats, const float *qkv,
                                   const float *kv, int kv_stride, const zs_ring_block *blk);
void zs_cpu_ring_attention_backward(void *ctx, float *dqkv, float *dkv, int dkv_stride,
                                    const float *dout, const float *out, const float *stats,
                                    const float *qkv, const float *kv, int kv_stride,
                                    const zs_ring_block *blk);

/* Constructors: set be->iface and be->ctx for the device numbered `device`
 * (the rank's local rank; a backend without devices ignores it). Return 0,
 * or non-zero after writing a one-line reason into err. */
int zs_backend_cpu_init(struct zs_backend *be, int device, char *err, size_t errlen);
/* ref.c: the portable backend, whose floating-point order depends only on
 * the shapes (the CPU's table with its own GEMM, attention and logarithm). */
int zs_backend_ref_init(struct zs_backend *be, int device, char *err, size_t errlen);
/* cpu.c: the CPU backend with host_accessible = 0, for tests (unlisted). */
int zs_backend_cpu_staged_init(struct zs_backend *be, int device, char *err, size_t errlen);
/* cuda.cu, only in builds configured with CUDA: the module zerosim_cuda.so,
 * which backend.c loads with dlopen and looks this symbol up in. */
#ifdef __cplusplus
extern "C"
#endif
int zs_backend_cuda_init(struct zs_backend *be, int device, char *err, size_t errlen);

/* Constructor of the phantom backend (phantom.c), which has no storage and
 * does no work; not in the registry (see zs_backend_init_phantom). */
int zs_backend_phantom_init(struct zs_backend *be, char *err, size_t errlen);

#endif
