/* zerosim — ring attention's block kernels (context parallelism), for the
 * CPU backend and the portable one (ref.c takes the CPU's table): plain
 * loops in a fixed order, the baseline instruction set, zs_cpu_expf and no
 * logarithm, so that their bytes depend on the shapes alone.
 *
 * Context parallelism (Megatron-LM) cuts each sequence of T positions into
 * 2C chunks of S = T / 2C; a rank's queries (and its keys and values) are
 * two chunks, q_chunk0 and q_chunk1, 2S rows: row t is position
 * (t < S ? chunk0 : chunk1) * S + t mod S. A block is the attention of the
 * rank's queries to one rank's keys and values (its own, or those passed
 * around the ring), masked causally by those positions. The forward keeps,
 * per (row, head), the running maximum and the running sum of exponentials
 * (stats: [max, sum]) and the unnormalised output; the ring's last block
 * divides the output by the sum (online softmax: Milakov and Gimelshein;
 * Liu et al., Ring Attention). The backward recomputes each block's
 * probabilities from the saved statistics (as FlashAttention does).
 *
 * Layouts: q rows of the packed qkv (B, Tq, q_stride) (q at column 0; the
 * GPT's 3C); keys and values at kv (k at column 0, v at column KVC, the
 * nkv key/value heads' width: C for the GPT) with kv_stride floats per
 * row; out and dout (B, Tq, C); stats (B, Tq, NH, 2). Grouped-query
 * attention: query head h reads key/value head h / (NH / nkv); the loops
 * and their order are the same for every nkv, so the GPT's bytes do not
 * depend on the fields' defaults.
 */
#include "backend/backend_impl.h"
#include "backend/cpu_math.h"

#include <math.h>
#include <stddef.h>

static int ring_pos(int t, int s, int chunk0, int chunk1)
{
    return (t < s ? chunk0 : chunk1) * s + t % s;
}

/* q's row stride, the key/value heads' width KVC and the query heads per
 * key/value head, from the block's defaults (the GPT's: 3C, C, 1). */
static void ring_gqa(const zs_ring_block *blk, int *q_stride, int *kvc, int *group)
{
    int nkv = blk->nkv ? blk->nkv : blk->nh;
    *q_stride = blk->q_stride ? blk->q_stride : 3 * blk->c;
    *kvc = nkv * (blk->c / blk->nh);
    *group = blk->nh / nkv;
}

void zs_cpu_ring_attention_forward(void *ctx, float *out, float *stats, const float *qkv,
                                   const float *kv, int kv_stride, const zs_ring_block *blk)
{
    (void)ctx;
    int B = blk->b, tq = blk->tq, C = blk->c, NH = blk->nh, hs = C / NH, S = blk->chunk;
    int qs, kvc, g;
    ring_gqa(blk, &qs, &kvc, &g);
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < tq; t++) {
            int qp = ring_pos(t, S, blk->q_chunk0, blk->q_chunk1);
            const float *qrow = qkv + ((size_t)b * tq + t) * (size_t)qs;
            float *orow = out + ((size_t)b * tq + t) * C;
            float *st = stats + ((size_t)b * tq + t) * NH * 2;
            for (int h = 0; h < NH; h++) {
                const float *q = qrow + h * hs;
                float *o = orow + h * hs, *mx = st + 2 * h, *sum = st + 2 * h + 1;
                if (blk->first) {
                    *mx = -INFINITY;
                    *sum = 0.0f;
                    for (int i = 0; i < hs; i++)
                        o[i] = 0.0f;
                }
                for (int j = 0; j < blk->tk; j++) {
                    if (ring_pos(j, S, blk->k_chunk0, blk->k_chunk1) > qp)
                        continue;
                    const float *k = kv + ((size_t)b * blk->tk + j) * kv_stride + h / g * hs;
                    const float *v = k + kvc;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++)
                        s += q[i] * k[i];
                    s *= scale;
                    if (s > *mx) { /* a new maximum: rescale what was summed */
                        float corr = *mx == -INFINITY ? 0.0f : zs_cpu_expf(*mx - s);
                        *sum *= corr;
                        for (int i = 0; i < hs; i++)
                            o[i] *= corr;
                        *mx = s;
                    }
                    float p = zs_cpu_expf(s - *mx);
                    *sum += p;
                    for (int i = 0; i < hs; i++)
                        o[i] += p * v[i];
                }
                if (blk->last && *sum > 0.0f) {
                    float inv = 1.0f / *sum;
                    for (int i = 0; i < hs; i++)
                        o[i] *= inv;
                }
            }
        }
}

void zs_cpu_ring_attention_backward(void *ctx, float *dqkv, float *dkv, int dkv_stride,
                                    const float *dout, const float *out, const float *stats,
                                    const float *qkv, const float *kv, int kv_stride,
                                    const zs_ring_block *blk)
{
    (void)ctx;
    int B = blk->b, tq = blk->tq, C = blk->c, NH = blk->nh, hs = C / NH, S = blk->chunk;
    int qs, kvc, g;
    ring_gqa(blk, &qs, &kvc, &g);
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < tq; t++) {
            int qp = ring_pos(t, S, blk->q_chunk0, blk->q_chunk1);
            size_t row = (size_t)b * tq + t;
            const float *qrow = qkv + row * (size_t)qs;
            float *dqrow = dqkv + row * (size_t)qs;
            const float *st = stats + row * NH * 2;
            for (int h = 0; h < NH; h++) {
                const float *q = qrow + h * hs, *o = out + row * C + h * hs;
                const float *dout_h = dout + row * C + h * hs;
                float *dq = dqrow + h * hs, mx = st[2 * h], inv = 1.0f / st[2 * h + 1];
                float delta = 0.0f; /* rowsum(dout * out): the softmax's backward */
                for (int i = 0; i < hs; i++)
                    delta += dout_h[i] * o[i];
                for (int j = 0; j < blk->tk; j++) {
                    if (ring_pos(j, S, blk->k_chunk0, blk->k_chunk1) > qp)
                        continue;
                    const float *k = kv + ((size_t)b * blk->tk + j) * kv_stride + h / g * hs;
                    const float *v = k + kvc;
                    float *dk = dkv + ((size_t)b * blk->tk + j) * dkv_stride + h / g * hs;
                    float *dv = dk + kvc;
                    float s = 0.0f, dp = 0.0f;
                    for (int i = 0; i < hs; i++)
                        s += q[i] * k[i];
                    float p = zs_cpu_expf(s * scale - mx) * inv;
                    for (int i = 0; i < hs; i++) {
                        dv[i] += p * dout_h[i];
                        dp += dout_h[i] * v[i];
                    }
                    float ds = p * (dp - delta) * scale;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += ds * k[i];
                        dk[i] += ds * q[i];
                    }
                }
            }
        }
}
