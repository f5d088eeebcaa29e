/* zerosim — the device backend.
 *
 * A backend is an opaque handle over a table of function pointers
 * (src/backend/backend_impl.h). Everything above this layer computes through
 * these wrappers and never includes cblas.h or a CUDA header, so a new backend
 * implements the table and nothing above it changes.
 *
 * Pointers passed to kernels are device pointers obtained from
 * zs_backend_alloc (for the CPU backend, ordinary host memory). Kernels compute
 * in fp32. Storage in bf16/fp16 is handled by the conversion kernels and by
 * the optimizer kernel, which reads and writes typed buffers.
 *
 * Dimension letters used in shape comments:
 *   B batch (micro-batch size), T sequence length, C channels (hidden size),
 *   NH attention heads, V vocabulary, OC output channels, N element count.
 * Layout is row-major; (B,T,C) means C varies fastest.
 */
#ifndef ZEROSIM_BACKEND_H
#define ZEROSIM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zs_backend *zs_backend_t;

/* Storage types. Kernels compute in fp32; these say how a buffer is stored. */
typedef enum {
    ZS_DTYPE_F32 = 0,
    ZS_DTYPE_BF16 = 1,
    ZS_DTYPE_F16 = 2
} zs_dtype;

size_t zs_dtype_size(zs_dtype t);
const char *zs_dtype_name(zs_dtype t);

/* Create a backend by name ("cpu", or "cuda" in a build configured with
 * CUDA). Returns NULL and writes a one-line reason into err when the name is
 * unknown, not compiled into this build, or the device is unavailable. */
zs_backend_t zs_backend_init(const char *name, char *err, size_t errlen);
/* The same on device number `device` (a training rank passes its local
 * rank; the CUDA backend takes GPU device % visible GPUs, so several ranks
 * may share one GPU). */
zs_backend_t zs_backend_init_device(const char *name, int device, char *err, size_t errlen);
void zs_backend_release(zs_backend_t be);
/* The phantom backend of phantom runs: allocations are accounted by the
 * caller but get addresses that no memory backs, kernels do nothing, copies
 * to the host write zeros and reductions return 0. Not selectable by name:
 * its addresses must never reach MPI or BLAS. NULL on failure (message in
 * err). */
zs_backend_t zs_backend_init_phantom(char *err, size_t errlen);
/* 1 when be is a phantom backend: its buffers hold nothing. */
int zs_backend_is_phantom(zs_backend_t be);
const char *zs_backend_name(zs_backend_t be);
/* Comma-separated list of the backends compiled into this build. */
const char *zs_backend_list(void);
/* 1 when the backend's buffers are host memory that host code may read and
 * write directly (cpu); 0 when they must go through zs_backend_copy_* (cuda). */
int zs_backend_host_accessible(zs_backend_t be);

/* Element types of the device collectives below. */
typedef enum {
    ZS_COLL_F32 = 0, ZS_COLL_BF16, ZS_COLL_F16, ZS_COLL_I64
} zs_coll_type;

/* Device collectives (NCCL in a CUDA build that found it), for src/comm
 * only. zs_backend_coll_id_bytes is 0 when the backend has none. Each
 * returns 0, or non-zero with a message (zerosim/error.h). */
size_t zs_backend_coll_id_bytes(zs_backend_t be);
int zs_backend_coll_get_id(zs_backend_t be, void *id);
int zs_backend_coll_init(zs_backend_t be, const void *id, int nranks, int rank);
int zs_backend_coll_allgatherv(zs_backend_t be, void *buf, const int *counts, const int *displs,
                               zs_coll_type t, int nranks);
int zs_backend_coll_reduce_scatterv(zs_backend_t be, const void *send, void *recv,
                                    const int *counts, zs_coll_type t, int nranks, int rank);

/* Raw device memory. Callers outside src/mem go through the accounting
 * allocator (zerosim/mem.h) instead. alloc returns NULL on failure. */
void *zs_backend_alloc(zs_backend_t be, size_t bytes);
void zs_backend_free(zs_backend_t be, void *ptr);
void zs_backend_memset0(zs_backend_t be, void *dst, size_t bytes);
void zs_backend_copy_h2d(zs_backend_t be, void *dst, const void *src, size_t bytes);
void zs_backend_copy_d2h(zs_backend_t be, void *dst, const void *src, size_t bytes);
void zs_backend_copy_d2d(zs_backend_t be, void *dst, const void *src, size_t bytes);

/* C(m,n) = alpha * op(A) * op(B) + beta * C, row-major, op = transpose when
 * trans_a / trans_b is non-zero. */
void zs_backend_sgemm(zs_backend_t be, int trans_a, int trans_b, int m, int n, int k,
                      float alpha, const float *a, int lda, const float *b, int ldb,
                      float beta, float *c, int ldc);

/* out(BT,OC) += bias(OC) broadcast over rows. */
void zs_backend_add_bias(zs_backend_t be, float *out, const float *bias, int bt, int oc);
/* dbias(OC) += column sums of dout(BT,OC). */
void zs_backend_bias_backward(zs_backend_t be, float *dbias, const float *dout, int bt, int oc);

/* GELU (tanh approximation, as GPT-2). out(N) = gelu(inp(N)). */
void zs_backend_gelu_forward(zs_backend_t be, float *out, const float *inp, size_t n);
/* dinp(N) += gelu'(inp) * dout */
void zs_backend_gelu_backward(zs_backend_t be, float *dinp, const float *inp, const float *dout, size_t n);
void zs_backend_relu_forward(zs_backend_t be, float *out, const float *inp, size_t n);
/* dinp(N) += (inp > 0) * dout */
void zs_backend_relu_backward(zs_backend_t be, float *dinp, const float *inp, const float *dout, size_t n);

/* LayerNorm over the last dimension, eps = 1e-5.
 * out(BT,C), mean(BT), rstd(BT), inp(BT,C), weight(C), bias(C). */
void zs_backend_layernorm_forward(zs_backend_t be, float *out, float *mean, float *rstd,
                                  const float *inp, const float *weight, const float *bias,
                                  int bt, int c);
/* dinp, dweight, dbias accumulate (+=). */
void zs_backend_layernorm_backward(zs_backend_t be, float *dinp, float *dweight, float *dbias,
                                   const float *dout, const float *inp, const float *weight,
                                   const float *mean, const float *rstd, int bt, int c);

/* out(N) = a(N) + b(N). */
void zs_backend_residual_forward(zs_backend_t be, float *out, const float *a, const float *b, size_t n);
/* y(N) += alpha * x(N). Used for residual backward and accumulation. */
void zs_backend_axpy(zs_backend_t be, float *y, float alpha, const float *x, size_t n);
/* x(N) *= alpha */
void zs_backend_scale(zs_backend_t be, float *x, float alpha, size_t n);

/* Token + position embedding. out(B,T,C) = wte[tokens[b,t]] + wpe[t].
 * tokens(B,T) int32 on the device, wte(V,C), wpe(maxT,C). */
void zs_backend_embedding_forward(zs_backend_t be, float *out, const int32_t *tokens,
                                  const float *wte, const float *wpe, int b, int t, int c);
/* dwte, dwpe accumulate. */
void zs_backend_embedding_backward(zs_backend_t be, float *dwte, float *dwpe, const float *dout,
                                   const int32_t *tokens, int b, int t, int c);

/* Causal multi-head self-attention over packed qkv(B,T,3C) (q, k, v each C
 * wide, heads of C/NH channels). out(B,T,C); preatt and att (B,NH,T,T) are
 * saved for backward (att holds the softmax, zero above the diagonal). */
void zs_backend_attention_forward(zs_backend_t be, float *out, float *preatt, float *att,
                                  const float *qkv, int b, int t, int c, int nh);
/* dqkv accumulates; dpreatt and datt are scratch of (B,NH,T,T) that the
 * kernel overwrites. */
void zs_backend_attention_backward(zs_backend_t be, float *dqkv, float *dpreatt, float *datt,
                                   const float *dout, const float *qkv, const float *att,
                                   int b, int t, int c, int nh);

/* Ring attention's blocks (context parallelism, src/backend/cpu_ring.c):
 * this rank's B x tq query rows against tk rows of one rank's keys and
 * values, C (= NH heads) wide; each sequence cut into chunks of `chunk`
 * positions, the queries' rows being chunks q_chunk0 then q_chunk1, the
 * keys' k_chunk0 then k_chunk1; a key is seen where its position is at
 * most the query's. first: the ring's first block (the forward starts its
 * running statistics); last: the ring's last (the forward normalises).
 * Grouped-query attention (the Llama family): nkv key/value heads of C/NH
 * floats (nh a multiple of nkv; query head h attends to key/value head
 * h / (nh / nkv)), q rows q_stride floats apart; 0 in either means the
 * GPT's: nkv = nh, q_stride = 3C. */
typedef struct {
    int b, tq, tk, c, nh, chunk;
    int q_chunk0, q_chunk1, k_chunk0, k_chunk1;
    int first, last;
    int nkv, q_stride;
} zs_ring_block;
/* out(B,tq,C) and stats(B,tq,NH,2) ([max, sum] per row and head)
 * accumulate one block; q from qkv(B,tq,q_stride) (columns 0..C-1); k and v
 * at kv (k at column 0, v at column KVC = nkv * C/NH, kv_stride floats per
 * row). OPTIONAL in a backend's table:
 * zerosim/compat.h refuses --cp where it is missing. */
void zs_backend_ring_attention_forward(zs_backend_t be, float *out, float *stats,
                                       const float *qkv, const float *kv, int kv_stride,
                                       const zs_ring_block *blk);
/* One block's backward from the forward's out and stats: dqkv's q columns
 * (rows of q_stride) and dkv (dk at column 0, dv at column KVC, dkv_stride
 * floats per row)
 * accumulate. */
void zs_backend_ring_attention_backward(zs_backend_t be, float *dqkv, float *dkv, int dkv_stride,
                                        const float *dout, const float *out, const float *stats,
                                        const float *qkv, const float *kv, int kv_stride,
                                        const zs_ring_block *blk);

/* ---- the Llama family's kernels (docs/numerics.md, "Llama kernels") ----
 * Extra dimension letters: F the MLP's intermediate size, NKV key/value
 * heads, HD the head size, P rows of a rotary table. */

/* RMSNorm over the last dimension: rstd(BT) = 1 / sqrt(mean(x^2) + eps),
 * out = (x * rstd) * weight. out(BT,C), rstd(BT) saved for backward,
 * inp(BT,C), weight(C). eps: 1e-5 (Llama 2/3) or 1e-6 (Mistral, Qwen2). */
void zs_backend_rmsnorm_forward(zs_backend_t be, float *out, float *rstd, const float *inp,
                                const float *weight, int bt, int c, float eps);
/* dinp(BT,C) and dweight(C) accumulate (+=). */
void zs_backend_rmsnorm_backward(zs_backend_t be, float *dinp, float *dweight, const float *dout,
                                 const float *inp, const float *weight, const float *rstd,
                                 int bt, int c);

/* SwiGLU over gate and up packed in one buffer, as one GEMM with the fused
 * weight [gate; up] writes them: inp(BT,2F) holds gate in columns [0,F) and
 * up in [F,2F) of each row (under tensor parallelism F is the rank's share
 * and the rank's fused weight is its gate rows then its up rows).
 * out(BT,F) = silu(gate) * up, silu(x) = x / (1 + e^-x). */
void zs_backend_swiglu_forward(zs_backend_t be, float *out, const float *inp, int bt, int f);
/* dinp(BT,2F) accumulates: dgate += dout * up * silu'(gate) in columns
 * [0,F), dup += dout * silu(gate) in [F,2F) (as GELU's backward, +=). */
void zs_backend_swiglu_backward(zs_backend_t be, float *dinp, const float *inp, const float *dout,
                                int bt, int f);

/* Rotary position embedding (Hugging Face's Llama convention: rotate_half,
 * the pairs (i, i + HD/2) of each head). table(P,HD) from zs_rope_table_fill,
 * P = table_rows: row r holds cos of its HD/2 angles then their sin. x holds
 * B*T rows of row_stride floats; the first nheads heads of HD floats of each
 * row are rotated in place, row (b,t) by table row pos0 + t (pos0 + T <= P,
 * checked): with
 * a table from position 0, pos0 is the absolute position of the sequence's
 * first token (a sequence- or context-parallel rank's offset). q alone:
 * nheads NH, row_stride NH*HD; q and k of a packed qkv (NH+2NKV heads a
 * row, q then k then v): nheads NH+NKV, row_stride (NH+2NKV)*HD. */
void zs_backend_rope_forward(zs_backend_t be, float *x, const float *table, int table_rows,
                             int b, int t, int nheads, int hd, int row_stride, int pos0);
/* The inverse rotation of the gradient, in place: dx holds dL/d(rotated x)
 * on entry and dL/dx on return (apply it to gradients of the rotated values
 * only). Same arguments as the forward. */
void zs_backend_rope_backward(zs_backend_t be, float *dx, const float *table, int table_rows,
                              int b, int t, int nheads, int hd, int row_stride, int pos0);

/* Causal grouped-query attention over packed qkv(B,T,(NH+2NKV)*HD): each row
 * holds NH query heads, then NKV key heads, then NKV value heads, HD floats
 * each; query head h uses key/value head h / (NH/NKV) (NH % NKV == 0; NKV 1
 * is MQA, NKV == NH is MHA, where layout and bytes are those of
 * zs_backend_attention_forward with C = NH*HD). out(B,T,NH*HD); preatt and
 * att (B,NH,T,T) saved as there (att the softmax, zero above the diagonal);
 * scale 1/sqrt(HD). */
void zs_backend_attention_gqa_forward(zs_backend_t be, float *out, float *preatt, float *att,
                                      const float *qkv, int b, int t, int nh, int nkv, int hd);
/* dqkv(B,T,(NH+2NKV)*HD) accumulates (dk, dv of a key/value head summed over
 * the query heads that share it, in head order); dpreatt and datt are
 * scratch of (B,NH,T,T) that the kernel overwrites. */
void zs_backend_attention_gqa_backward(zs_backend_t be, float *dqkv, float *dpreatt, float *datt,
                                       const float *dout, const float *qkv, const float *att,
                                       int b, int t, int nh, int nkv, int hd);

/* The rotary table's frequencies: inv_freq_i = theta^(-2i/HD), i < HD/2;
 * with llama3_scaling (Llama 3.1's rope_scaling, rope_type "llama3") the
 * long wavelengths are divided by factor and the band between
 * original_max_position / high_freq_factor and / low_freq_factor is
 * interpolated, as Hugging Face's _compute_llama3_parameters does. */
typedef struct {
    double theta;                 /* rope_theta: 10000 (Llama 2), 500000 (Llama 3) */
    int llama3_scaling;           /* 1: apply the four fields below */
    double factor;                /* 8 for Llama 3.1 */
    double low_freq_factor;       /* 1 */
    double high_freq_factor;      /* 4 */
    double original_max_position; /* original_max_position_embeddings, 8192 */
} zs_rope_params;

/* Host function: table(npos,HD) for positions first_pos .. first_pos+npos-1,
 * row r = cos((first_pos + r) * inv_freq_i) for i < HD/2, then the sin of
 * the same angles; frequencies, angles, cos and sin computed in double and
 * each entry rounded once to float, so every backend gets the same table
 * (upload it with zs_backend_copy_h2d). Returns 0, or -1 with a message
 * (zerosim/error.h) naming the bad parameter (HD odd or not positive, theta
 * not positive, a scaling field out of range). */
int zs_rope_table_fill(float *table, int first_pos, int npos, int hd, const zs_rope_params *p);

/* Softmax cross-entropy. probs(BT,V) = softmax(logits(BT,V)),
 * losses(BT) = -log probs[target]. */
void zs_backend_softmax_xent_forward(zs_backend_t be, float *losses, float *probs,
                                     const float *logits, const int32_t *targets, int bt, int v);
/* dlogits(BT,V) = dloss * (probs - onehot(target)) (overwrites). */
void zs_backend_softmax_xent_backward(zs_backend_t be, float *dlogits, const float *probs,
                                      const int32_t *targets, float dloss, int bt, int v);

/* Tensor parallelism (the kernels of zerosim/backend_impl.h's tensor-
 * parallel group; 1 when this backend has them). */
int zs_backend_has_tp(zs_backend_t be);
void zs_backend_vocab_embedding_forward(zs_backend_t be, float *out, const int32_t *tokens,
                                        const float *wte, int v0, int vn, const float *wpe,
                                        int b, int t, int c);
void zs_backend_vocab_embedding_backward(zs_backend_t be, float *dwte, float *dwpe,
                                         const float *dout, const int32_t *tokens, int v0,
                                         int vn, int b, int t, int c);
void zs_backend_xent_vocab_max(zs_backend_t be, float *rowmax, const float *logits, int bt, int v);
void zs_backend_xent_vocab_sums(zs_backend_t be, float *sums, const float *logits,
                                const float *rowmax, const int32_t *targets, int v0, int bt, int v);
void zs_backend_xent_vocab_finish(zs_backend_t be, float *losses, float *probs,
                                  const float *logits, const float *rowmax, const float *sums,
                                  int bt, int v);
void zs_backend_xent_vocab_backward(zs_backend_t be, float *dlogits, const float *probs,
                                    const int32_t *targets, int v0, float dloss, int bt, int v);

/* Exact sums of slices (the portable backend's; backend_impl.h states
 * each): non-zero when this backend has them. */
int zs_backend_has_exact_sums(zs_backend_t be);
void zs_backend_rows_absmax(zs_backend_t be, float *rowmax, const float *x, int rows, int n);
void zs_backend_grid_add(zs_backend_t be, float *out, const float *x, const float *rowmax,
                         int rows, int n, int slices);
void zs_backend_xent_slice_sums(zs_backend_t be, float *sums, const float *logits,
                                const float *rowmax, int bt, int ld, int j0, int vn);

/* Sum of squares of a typed buffer, accumulated in double in index order. */
double zs_backend_sumsq(zs_backend_t be, const void *x, zs_dtype t, size_t n);
/* Number of non-finite (inf or NaN) elements of a typed buffer. */
size_t zs_backend_count_nonfinite(zs_backend_t be, const void *x, zs_dtype t, size_t n);

/* Conversions between fp32 and storage types, round to nearest even.
 * dst and src may not overlap. When dt == F32 these are copies. */
void zs_backend_convert_to_f32(zs_backend_t be, float *dst, const void *src, zs_dtype st, size_t n);
void zs_backend_convert_from_f32(zs_backend_t be, void *dst, zs_dtype dt, const float *src, size_t n);
/* dst(N, typed) += src(N, fp32); the sum is computed in fp32 and rounded once. */
void zs_backend_accumulate_f32(zs_backend_t be, void *dst, zs_dtype dt, const float *src, size_t n);

/* dst(N, typed) = round(float(dst) + float(src)); both stored as t. */
void zs_backend_add_typed(zs_backend_t be, void *dst, const void *src, zs_dtype t, size_t n);

/* Fixed point, for reductions whose result must not depend on the order of
 * summation (deterministic mode): dst[i] = round-half-even(src[i] * 2^frac_bits)
 * as int64. An element that is not finite or whose magnitude after scaling is
 * not below limit is stored as 0 and counted; returns that count. */
size_t zs_backend_to_fixed(zs_backend_t be, int64_t *dst, const void *src, zs_dtype t, size_t n,
                           int frac_bits, int64_t limit);
/* dst(N) += src(N), int64. */
void zs_backend_add_i64(zs_backend_t be, int64_t *dst, const int64_t *src, size_t n);
/* dst(N, typed) = round((double)src[i] * 2^-frac_bits). */
void zs_backend_from_fixed(zs_backend_t be, void *dst, zs_dtype t, const int64_t *src, size_t n,
                           int frac_bits);

/* Optimizer hyper-parameters for one step of one range. */
typedef struct {
    float lr;
    float beta1, beta2, eps;
    float weight_decay;
    float momentum;      /* SGD */
    float grad_mul;      /* every gradient is multiplied by this first
                            (1/loss_scale times the clipping coefficient) */
    float bias_corr1;    /* 1 - beta1^t, or 1 without bias correction */
    float bias_corr2;    /* 1 - beta2^t, or 1 without bias correction */
    float l2;            /* Adam with L2 regularization (DeepSpeed's
                            adam_w_mode false): l2 * master is added to the
                            gradient before m and v; 0 otherwise */
} zs_optim_hparams;

/* AdamW over n elements (Adam with L2 when h->l2 != 0): master, m, v fp32; grad typed (gt); the updated
 * master is written to param (typed, pt) as well. param may be NULL. */
void zs_backend_adamw_step(zs_backend_t be, float *master, float *m, float *v,
                           const void *grad, zs_dtype gt, void *param, zs_dtype pt,
                           size_t n, const zs_optim_hparams *h);
/* SGD with momentum (PyTorch convention: buf = momentum*buf + g; p -= lr*buf),
 * decoupled weight decay p -= lr*wd*p. */
void zs_backend_sgd_step(zs_backend_t be, float *master, float *buf,
                         const void *grad, zs_dtype gt, void *param, zs_dtype pt,
                         size_t n, const zs_optim_hparams *h);

/* The instruction set that the CPU backend's kernels run in: "sse2", "avx2"
 * or "avx512" (the widest the CPU has, or ZEROSIM_CPU_KERNELS); all three
 * give the same bytes. Set by the CPU backend's init; "sse2" before. */
const char *zs_backend_cpu_kernels(void);

/* Host-side conversions (used by tests and the report). */
uint16_t zs_f32_to_bf16(float f);
float zs_bf16_to_f32(uint16_t h);
uint16_t zs_f32_to_f16(float f);
float zs_f16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif
