/* zerosim — causal (grouped-query) attention over row tiles, written once
 * for the CPU backend (cpu.c, whose GEMM is OpenBLAS) and the portable
 * backend (ref.c, whose GEMM is its own fixed-order one): each body takes
 * the GEMM to call, with the arguments of struct zs_backend_i's sgemm
 * member (ctx first). Everything else (the softmax loops, the causal
 * zeroing, the tile order) is the same code in both; included by those two
 * files only, after cpu_isa.h and cpu_math.h.
 */
#ifndef ZEROSIM_CPU_ATTENTION_H
#define ZEROSIM_CPU_ATTENTION_H

/* A row-major GEMM as the table's sgemm member. */
typedef void (*zs_attention_gemm_fn)(void *ctx, int trans_a, int trans_b, int m, int n, int k,
                                     float alpha, const float *a, int lda, const float *b,
                                     int ldb, float beta, float *c, int ldc);

/* Attention through a GEMM. Each (sample, head) is a few GEMMs over row
 * tiles of ZS_ATT_TILE query rows: a tile [r0, r1) needs keys 0..r1-1 only
 * (the causal mask), so the GEMMs skip the blocks above the diagonal that
 * the mask would discard, and what a tile computes above the diagonal is
 * zeroed. Every element is one dot product of the GEMM over the head size (or a
 * sum over tiles in tile order), so the result of a sample does not depend
 * on how many samples share the call. */
#define ZS_ATT_TILE 32

/* Grouped-query attention. out is (B,T,NH*HD); preatt, att are (B,NH,T,T);
 * qkv is (B,T,(NH+2NKV)*HD): NH query heads, NKV key heads, NKV value heads.
 * Query head h uses key/value head h / (NH/NKV); with NKV == NH it is the
 * multi-head attention of a packed (B,T,3C) qkv. preatt = q.k / sqrt(HD),
 * att = its causal softmax (0 above the diagonal). */
ZS_CPU_BODY zs_attention_gqa_forward_with(zs_attention_gemm_fn gemm, void *ctx, float *out,
                                          float *preatt, float *att, const float *qkv, int b,
                                          int t, int nh, int nkv, int hs)
{
    int cq = nh * hs, ckv = nkv * hs, row = cq + 2 * ckv, group = nh / nkv;
    float scale = 1.0f / sqrtf((float)hs);
    for (int bi = 0; bi < b; bi++) {
        for (int h = 0; h < nh; h++) {
            const float *q = qkv + (size_t)bi * t * row + h * hs;
            const float *k = qkv + (size_t)bi * t * row + cq + (h / group) * hs, *v = k + ckv;
            size_t hoff = ((size_t)bi * nh + h) * t * t;
            float *pre = preatt + hoff, *a = att + hoff;
            float *o = out + (size_t)bi * t * cq + h * hs;
            for (int r0 = 0; r0 < t; r0 += ZS_ATT_TILE) {
                int r1 = r0 + ZS_ATT_TILE < t ? r0 + ZS_ATT_TILE : t;
                /* pre[r0:r1, 0:r1] = scale * q[r0:r1] k[0:r1]^T */
                gemm(ctx, 0, 1, r1 - r0, r1, hs, scale,
                            q + (size_t)r0 * row, row, k, row, 0.0f, pre + (size_t)r0 * t, t);
                for (int i = r0; i < r1; i++) {
                    float *pi = pre + (size_t)i * t, *ai = a + (size_t)i * t;
                    float maxval = -INFINITY;
                    for (int j = 0; j <= i; j++)
                        maxval = pi[j] > maxval ? pi[j] : maxval;
                    float sum = 0.0f;
                    for (int j = 0; j <= i; j++) {
                        ai[j] = zs_cpu_expf(pi[j] - maxval);
                        sum += ai[j];
                    }
                    float inv = 1.0f / sum;
                    for (int j = 0; j <= i; j++)
                        ai[j] *= inv;
                    for (int j = i + 1; j < t; j++)
                        pi[j] = ai[j] = 0.0f;
                }
                /* out[r0:r1] = att[r0:r1, 0:r1] v[0:r1] */
                gemm(ctx, 0, 0, r1 - r0, hs, r1, 1.0f,
                            a + (size_t)r0 * t, t, v, row, 0.0f, o + (size_t)r0 * cq, cq);
            }
        }
    }
}
/* dqkv (B,T,(NH+2NKV)*HD) accumulates; dpreatt, datt (B,NH,T,T) are scratch,
 * overwritten (0 above the diagonal); dout (B,T,NH*HD); qkv as the forward's;
 * att (B,NH,T,T) from the forward pass. Per (sample, head) and row tile
 * [r0, r1):
 *   datt = dout v^T, dv += att^T dout,
 *   dpre = att * (datt - rowsum(att * datt)),
 *   dq += scale dpre k, dk += scale dpre^T q;
 * the query heads of a group add into their key/value head's dk and dv in
 * head order. */
ZS_CPU_BODY zs_attention_gqa_backward_with(zs_attention_gemm_fn gemm, void *ctx, float *dqkv,
                                           float *dpreatt, float *datt, const float *dout,
                                           const float *qkv, const float *att, int b, int t,
                                           int nh, int nkv, int hs)
{
    int cq = nh * hs, ckv = nkv * hs, row = cq + 2 * ckv, group = nh / nkv;
    float scale = 1.0f / sqrtf((float)hs);
    for (int bi = 0; bi < b; bi++) {
        for (int h = 0; h < nh; h++) {
            size_t base = (size_t)bi * t * row, kvoff = (size_t)cq + (size_t)(h / group) * hs;
            const float *q = qkv + base + h * hs;
            const float *k = qkv + base + kvoff, *v = k + ckv;
            float *dq = dqkv + base + h * hs;
            float *dk = dqkv + base + kvoff, *dv = dk + ckv;
            const float *dy = dout + (size_t)bi * t * cq + h * hs;
            size_t hoff = ((size_t)bi * nh + h) * t * t;
            const float *a = att + hoff;
            float *da = datt + hoff, *dpre = dpreatt + hoff;
            for (int r0 = 0; r0 < t; r0 += ZS_ATT_TILE) {
                int r1 = r0 + ZS_ATT_TILE < t ? r0 + ZS_ATT_TILE : t, m = r1 - r0;
                const float *at = a + (size_t)r0 * t;
                float *dat = da + (size_t)r0 * t, *dpt = dpre + (size_t)r0 * t;
                gemm(ctx, 0, 1, m, r1, hs, 1.0f,
                            dy + (size_t)r0 * cq, cq, v, row, 0.0f, dat, t);
                gemm(ctx, 1, 0, r1, hs, m, 1.0f, at, t,
                            dy + (size_t)r0 * cq, cq, 1.0f, dv, row);
                for (int i = r0; i < r1; i++) {
                    const float *ai = a + (size_t)i * t;
                    float *dai = da + (size_t)i * t, *dpi = dpre + (size_t)i * t;
                    float adot = 0.0f;
                    for (int j = 0; j <= i; j++)
                        adot += ai[j] * dai[j];
                    for (int j = 0; j <= i; j++)
                        dpi[j] = ai[j] * (dai[j] - adot);
                    for (int j = i + 1; j < t; j++)
                        dpi[j] = dai[j] = 0.0f;
                }
                gemm(ctx, 0, 0, m, hs, r1, scale, dpt, t,
                            k, row, 1.0f, dq + (size_t)r0 * row, row);
                gemm(ctx, 1, 0, r1, hs, m, scale, dpt, t,
                            q + (size_t)r0 * row, row, 1.0f, dk, row);
            }
        }
    }
}
#endif
