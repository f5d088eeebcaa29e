/* zerosim — the phantom backend: memory without storage, kernels without work.
 *
 * A phantom run (zerosim train --phantom) drives the real engine for ranks
 * that do not exist here. Its allocations are accounted by src/mem like any
 * other, but this backend hands out addresses that no page backs: each
 * allocation gets its own 64-byte-aligned range of a counter that starts far
 * above ordinary host mappings, and nothing ever dereferences it. Kernels
 * return at once; a copy to the host writes zeros (host buffers are real);
 * reductions return 0. A stray dereference of a phantom address faults at
 * once instead of reading something plausible.
 *
 * It is not in the registry (a phantom address handed to MPI or BLAS would
 * crash): only zs_backend_init_phantom creates one. */
#include "backend/backend_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uintptr_t next;   /* the next address handed out */
} zs_phantom_ctx;

/* 2^44: above where Linux puts the program and its heap, below the mmap
 * area; a phantom run of a very large model may run past it, harmlessly,
 * since the addresses are never used. */
#define ZS_PHANTOM_BASE ((uintptr_t)1 << 44)

static void zs_phantom_release(void *ctx) { free(ctx); }

static void *zs_phantom_alloc(void *ctx, size_t bytes)
{
    zs_phantom_ctx *c = ctx;
    void *p = (void *)c->next;
    /* a gap of 64 bytes keeps every allocation, even of 0 bytes, unique */
    c->next += ((bytes + 63) & ~(uintptr_t)63) + 64;
    return p;
}

/* Every kernel: no work. The casts to void keep -Wextra quiet. */
#define ZS_UNUSED4(a, b, c, d) ((void)(a), (void)(b), (void)(c), (void)(d))

static void zs_phantom_dealloc(void *ctx, void *ptr) { (void)ctx; (void)ptr; }
static void zs_phantom_memset0(void *ctx, void *dst, size_t bytes)
{
    (void)ctx; (void)dst; (void)bytes;
}
static void zs_phantom_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    ZS_UNUSED4(ctx, dst, src, bytes);
}
static void zs_phantom_copy_d2h(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx; (void)src;
    memset(dst, 0, bytes); /* the host buffer is real: leave it defined */
}
static void zs_phantom_sgemm(void *ctx, int ta, int tb, int m, int n, int k, float alpha,
                             const float *a, int lda, const float *b, int ldb, float beta,
                             float *c, int ldc)
{
    ZS_UNUSED4(ctx, ta, tb, m); ZS_UNUSED4(n, k, alpha, a); ZS_UNUSED4(lda, b, ldb, beta);
    (void)c; (void)ldc;
}
static void zs_phantom_bias(void *ctx, float *x, const float *y, int bt, int oc)
{
    ZS_UNUSED4(ctx, x, y, bt); (void)oc;
}
static void zs_phantom_unary(void *ctx, float *out, const float *inp, size_t n)
{
    ZS_UNUSED4(ctx, out, inp, n);
}
static void zs_phantom_binary(void *ctx, float *out, const float *a, const float *b, size_t n)
{
    ZS_UNUSED4(ctx, out, a, b); (void)n;
}
static void zs_phantom_ln_fwd(void *ctx, float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int bt, int c)
{
    ZS_UNUSED4(ctx, out, mean, rstd); ZS_UNUSED4(inp, w, b, bt); (void)c;
}
static void zs_phantom_ln_bwd(void *ctx, float *dinp, float *dw, float *db, const float *dout,
                              const float *inp, const float *w, const float *mean,
                              const float *rstd, int bt, int c)
{
    ZS_UNUSED4(ctx, dinp, dw, db); ZS_UNUSED4(dout, inp, w, mean); ZS_UNUSED4(rstd, bt, c, 0);
}
static void zs_phantom_axpy(void *ctx, float *y, float alpha, const float *x, size_t n)
{
    ZS_UNUSED4(ctx, y, alpha, x); (void)n;
}
static void zs_phantom_scale(void *ctx, float *x, float alpha, size_t n)
{
    ZS_UNUSED4(ctx, x, alpha, n);
}
static void zs_phantom_emb_fwd(void *ctx, float *out, const int32_t *tok, const float *wte,
                               const float *wpe, int b, int t, int c)
{
    ZS_UNUSED4(ctx, out, tok, wte); ZS_UNUSED4(wpe, b, t, c);
}
static void zs_phantom_emb_bwd(void *ctx, float *dwte, float *dwpe, const float *dout,
                               const int32_t *tok, int b, int t, int c)
{
    ZS_UNUSED4(ctx, dwte, dwpe, dout); ZS_UNUSED4(tok, b, t, c);
}
static void zs_phantom_att_fwd(void *ctx, float *out, float *preatt, float *att, const float *qkv,
                               int b, int t, int c, int nh)
{
    ZS_UNUSED4(ctx, out, preatt, att); ZS_UNUSED4(qkv, b, t, c); (void)nh;
}
static void zs_phantom_att_bwd(void *ctx, float *dqkv, float *dpreatt, float *datt,
                               const float *dout, const float *qkv, const float *att, int b,
                               int t, int c, int nh)
{
    ZS_UNUSED4(ctx, dqkv, dpreatt, datt); ZS_UNUSED4(dout, qkv, att, b); ZS_UNUSED4(t, c, nh, 0);
}
static void zs_phantom_ring_fwd(void *ctx, float *out, float *stats, const float *qkv,
                                const float *kv, int kv_stride, const zs_ring_block *blk)
{
    ZS_UNUSED4(ctx, out, stats, qkv); ZS_UNUSED4(kv, kv_stride, blk, 0);
}
static void zs_phantom_ring_bwd(void *ctx, float *dqkv, float *dkv, int dkv_stride,
                                const float *dout, const float *out, const float *stats,
                                const float *qkv, const float *kv, int kv_stride,
                                const zs_ring_block *blk)
{
    ZS_UNUSED4(ctx, dqkv, dkv, dkv_stride); ZS_UNUSED4(dout, out, stats, qkv);
    ZS_UNUSED4(kv, kv_stride, blk, 0);
}
static void zs_phantom_rms_fwd(void *ctx, float *out, float *rstd, const float *inp,
                               const float *w, int bt, int c, float eps)
{
    ZS_UNUSED4(ctx, out, rstd, inp); ZS_UNUSED4(w, bt, c, eps);
}
static void zs_phantom_rms_bwd(void *ctx, float *dinp, float *dw, const float *dout,
                               const float *inp, const float *w, const float *rstd, int bt, int c)
{
    ZS_UNUSED4(ctx, dinp, dw, dout); ZS_UNUSED4(inp, w, rstd, bt); (void)c;
}
static void zs_phantom_swiglu_fwd(void *ctx, float *out, const float *inp, int bt, int f)
{
    ZS_UNUSED4(ctx, out, inp, bt); (void)f;
}
static void zs_phantom_swiglu_bwd(void *ctx, float *dinp, const float *inp, const float *dout,
                                  int bt, int f)
{
    ZS_UNUSED4(ctx, dinp, inp, dout); (void)bt; (void)f;
}
static void zs_phantom_rope(void *ctx, float *x, const float *table, int b, int t, int nheads,
                            int hd, int row_stride, int pos0)
{
    ZS_UNUSED4(ctx, x, table, b); ZS_UNUSED4(t, nheads, hd, row_stride); (void)pos0;
}
static void zs_phantom_gqa_fwd(void *ctx, float *out, float *preatt, float *att, const float *qkv,
                               int b, int t, int nh, int nkv, int hd)
{
    ZS_UNUSED4(ctx, out, preatt, att); ZS_UNUSED4(qkv, b, t, nh); (void)nkv; (void)hd;
}
static void zs_phantom_gqa_bwd(void *ctx, float *dqkv, float *dpreatt, float *datt,
                               const float *dout, const float *qkv, const float *att, int b,
                               int t, int nh, int nkv, int hd)
{
    ZS_UNUSED4(ctx, dqkv, dpreatt, datt); ZS_UNUSED4(dout, qkv, att, b);
    ZS_UNUSED4(t, nh, nkv, hd);
}
static void zs_phantom_vemb_fwd(void *ctx, float *out, const int32_t *tok, const float *wte,
                                int v0, int vn, const float *wpe, int b, int t, int c)
{
    ZS_UNUSED4(ctx, out, tok, wte); ZS_UNUSED4(v0, vn, wpe, b); ZS_UNUSED4(t, c, 0, 0);
}
static void zs_phantom_vemb_bwd(void *ctx, float *dwte, float *dwpe, const float *dout,
                                const int32_t *tok, int v0, int vn, int b, int t, int c)
{
    ZS_UNUSED4(ctx, dwte, dwpe, dout); ZS_UNUSED4(tok, v0, vn, b); ZS_UNUSED4(t, c, 0, 0);
}
static void zs_phantom_xv_max(void *ctx, float *rowmax, const float *logits, int bt, int v)
{
    ZS_UNUSED4(ctx, rowmax, logits, bt); (void)v;
}
static void zs_phantom_xv_sums(void *ctx, float *sums, const float *logits, const float *rowmax,
                               const int32_t *targets, int v0, int bt, int v)
{
    ZS_UNUSED4(ctx, sums, logits, rowmax); ZS_UNUSED4(targets, v0, bt, v);
}
static void zs_phantom_xv_finish(void *ctx, float *losses, float *probs, const float *logits,
                                 const float *rowmax, const float *sums, int bt, int v)
{
    ZS_UNUSED4(ctx, losses, probs, logits); ZS_UNUSED4(rowmax, sums, bt, v);
}
static void zs_phantom_xv_bwd(void *ctx, float *dlogits, const float *probs,
                              const int32_t *targets, int v0, float dloss, int bt, int v)
{
    ZS_UNUSED4(ctx, dlogits, probs, targets); ZS_UNUSED4(v0, dloss, bt, v);
}

static void zs_phantom_xent_fwd(void *ctx, float *losses, float *probs, const float *logits,
                                const int32_t *targets, int bt, int v)
{
    ZS_UNUSED4(ctx, losses, probs, logits); ZS_UNUSED4(targets, bt, v, 0);
}
static void zs_phantom_xent_bwd(void *ctx, float *dlogits, const float *probs,
                                const int32_t *targets, float dloss, int bt, int v)
{
    ZS_UNUSED4(ctx, dlogits, probs, targets); ZS_UNUSED4(dloss, bt, v, 0);
}
static double zs_phantom_sumsq(void *ctx, const void *x, zs_dtype t, size_t n)
{
    ZS_UNUSED4(ctx, x, t, n);
    return 0.0;
}
static size_t zs_phantom_nonfinite(void *ctx, const void *x, zs_dtype t, size_t n)
{
    ZS_UNUSED4(ctx, x, t, n);
    return 0;
}
static void zs_phantom_to_f32(void *ctx, float *dst, const void *src, zs_dtype st, size_t n)
{
    ZS_UNUSED4(ctx, dst, src, st); (void)n;
}
static void zs_phantom_from_f32(void *ctx, void *dst, zs_dtype dt, const float *src, size_t n)
{
    ZS_UNUSED4(ctx, dst, dt, src); (void)n;
}
static void zs_phantom_typed(void *ctx, void *dst, const void *src, zs_dtype t, size_t n)
{
    ZS_UNUSED4(ctx, dst, src, t); (void)n;
}
static size_t zs_phantom_to_fixed(void *ctx, int64_t *dst, const void *src, zs_dtype t, size_t n,
                                  int frac_bits, int64_t limit)
{
    ZS_UNUSED4(ctx, dst, src, t); ZS_UNUSED4(n, frac_bits, limit, 0);
    return 0;
}
static void zs_phantom_add_i64(void *ctx, int64_t *dst, const int64_t *src, size_t n)
{
    ZS_UNUSED4(ctx, dst, src, n);
}
static void zs_phantom_from_fixed(void *ctx, void *dst, zs_dtype t, const int64_t *src, size_t n,
                                  int frac_bits)
{
    ZS_UNUSED4(ctx, dst, t, src); (void)n; (void)frac_bits;
}
static void zs_phantom_adamw(void *ctx, float *master, float *m, float *v, const void *grad,
                             zs_dtype gt, void *param, zs_dtype pt, size_t n,
                             const zs_optim_hparams *h)
{
    ZS_UNUSED4(ctx, master, m, v); ZS_UNUSED4(grad, gt, param, pt); (void)n; (void)h;
}
static void zs_phantom_sgd(void *ctx, float *master, float *buf, const void *grad, zs_dtype gt,
                           void *param, zs_dtype pt, size_t n, const zs_optim_hparams *h)
{
    ZS_UNUSED4(ctx, master, buf, grad); ZS_UNUSED4(gt, param, pt, n); (void)h;
}

static const struct zs_backend_i zs_phantom_iface = {
    .name = "phantom",
    .host_accessible = 0, /* its addresses hold nothing */
    .release = zs_phantom_release,
    .alloc = zs_phantom_alloc,
    .dealloc = zs_phantom_dealloc,
    .memset0 = zs_phantom_memset0,
    .copy_h2d = zs_phantom_copy,
    .copy_d2h = zs_phantom_copy_d2h,
    .copy_d2d = zs_phantom_copy,
    .sgemm = zs_phantom_sgemm,
    .add_bias = zs_phantom_bias,
    .bias_backward = zs_phantom_bias,
    .gelu_forward = zs_phantom_unary,
    .gelu_backward = zs_phantom_binary,
    .relu_forward = zs_phantom_unary,
    .relu_backward = zs_phantom_binary,
    .layernorm_forward = zs_phantom_ln_fwd,
    .layernorm_backward = zs_phantom_ln_bwd,
    .residual_forward = zs_phantom_binary,
    .axpy = zs_phantom_axpy,
    .scale = zs_phantom_scale,
    .embedding_forward = zs_phantom_emb_fwd,
    .embedding_backward = zs_phantom_emb_bwd,
    .attention_forward = zs_phantom_att_fwd,
    .attention_backward = zs_phantom_att_bwd,
    .ring_attention_forward = zs_phantom_ring_fwd,
    .ring_attention_backward = zs_phantom_ring_bwd,
    .rmsnorm_forward = zs_phantom_rms_fwd,
    .rmsnorm_backward = zs_phantom_rms_bwd,
    .swiglu_forward = zs_phantom_swiglu_fwd,
    .swiglu_backward = zs_phantom_swiglu_bwd,
    .rope_forward = zs_phantom_rope,
    .rope_backward = zs_phantom_rope,
    .attention_gqa_forward = zs_phantom_gqa_fwd,
    .attention_gqa_backward = zs_phantom_gqa_bwd,
    .softmax_xent_forward = zs_phantom_xent_fwd,
    .softmax_xent_backward = zs_phantom_xent_bwd,
    .vocab_embedding_forward = zs_phantom_vemb_fwd,
    .vocab_embedding_backward = zs_phantom_vemb_bwd,
    .xent_vocab_max = zs_phantom_xv_max,
    .xent_vocab_sums = zs_phantom_xv_sums,
    .xent_vocab_finish = zs_phantom_xv_finish,
    .xent_vocab_backward = zs_phantom_xv_bwd,
    .sumsq = zs_phantom_sumsq,
    .count_nonfinite = zs_phantom_nonfinite,
    .convert_to_f32 = zs_phantom_to_f32,
    .convert_from_f32 = zs_phantom_from_f32,
    .accumulate_f32 = zs_phantom_from_f32,
    .add_typed = zs_phantom_typed,
    .to_fixed = zs_phantom_to_fixed,
    .add_i64 = zs_phantom_add_i64,
    .from_fixed = zs_phantom_from_fixed,
    .adamw_step = zs_phantom_adamw,
    .sgd_step = zs_phantom_sgd,
};

int zs_backend_phantom_init(struct zs_backend *be, char *err, size_t errlen)
{
    zs_phantom_ctx *c = calloc(1, sizeof *c);
    if (c == NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "out of host memory creating the phantom backend");
        return -1;
    }
    c->next = ZS_PHANTOM_BASE;
    be->iface = &zs_phantom_iface;
    be->ctx = c;
    return 0;
}

int zs_backend_is_phantom(zs_backend_t be)
{
    return be != NULL && be->iface == &zs_phantom_iface;
}
