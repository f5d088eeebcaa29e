/* zerosim — context parallelism (Megatron-LM's): each sample's T positions
 * cut into 2C chunks of S = T / 2C, rank i of the context-parallel group
 * holding chunks i and 2C - 1 - i (so that every rank has the same share of
 * the causal mask's work), and the attention as ring attention: the keys and
 * values of each rank passed around the ring with point-to-point messages,
 * each rank attending to the blocks its positions see, merged with an online
 * softmax (the block kernels are the backend's, zerosim/backend.h). What is
 * not attention (LayerNorm, MLP, embeddings, loss) is token-local: each rank
 * works on its own positions.
 *
 * The messages, per block and micro-batch, of B·(T/C)·2C' floats each (keys
 * and values of this rank's positions, C' = C / tp): forward C - 1 sends
 * (and as many receives), the keys and values going once around; backward
 * C - 1 sends of the keys and values and C - 1 of their gradients, which
 * follow them round and come home (zs_model_cp_ring_bytes counts them).
 */
#include "model_impl.h"
#include "zerosim/comm.h"
#include "zerosim/error.h"

#include <stdlib.h>
#include <string.h>

#define ZS_RING_TAG 7300 /* + the ring step: the context group's own tags */

int zs_model_cp_size(const zs_model_config *c) { return c->cp > 1 ? c->cp : 1; }

int zs_model_cp_ulysses(const zs_model_config *c)
{
    return zs_model_cp_size(c) > 1 && c->cp_attention == ZS_CP_ULYSSES;
}

int zs_model_cp_chunk(const zs_model_config *c, int rank, int k)
{
    int C = zs_model_cp_size(c);
    if (zs_model_cp_ulysses(c)) /* contiguous: the all-to-all keeps the order */
        return 2 * rank + k;
    return k == 0 ? rank : 2 * C - 1 - rank;
}

int zs_model_cp_local_tokens(const zs_model_config *c, int32_t *tokens, int b)
{
    int C = zs_model_cp_size(c), T = c->seq_len, S = T / (2 * C), Tl = 2 * S;
    if (C == 1 || !tokens)
        return 0;
    int32_t *row = malloc((size_t)T * sizeof(int32_t));
    if (!row)
        ZS_FAIL("out of host memory taking this rank's chunks of %d positions", T);
    for (int s = 0; s < b; s++) {
        memcpy(row, tokens + (size_t)s * T, (size_t)T * sizeof(int32_t));
        for (int k = 0; k < 2; k++)
            memcpy(tokens + (size_t)s * Tl + (size_t)k * S,
                   row + (size_t)zs_model_cp_chunk(c, c->cp_rank, k) * S,
                   (size_t)S * sizeof(int32_t));
    }
    free(row);
    return 0;
}

double zs_model_cp_ring_bytes(const zs_model_config *c, int b, int backward, int *sends)
{
    int C = zs_model_cp_size(c);
    *sends = 0;
    if (C == 1 || !zs_model_is_decoder(c) || zs_model_cp_ulysses(c))
        return 0.0;
    *sends = (backward ? 2 : 1) * (C - 1);
    return *sends * (double)zs_ring_kv_floats(c, b) * 4.0;
}

size_t zs_ring_kv_floats(const zs_model_config *c, int b)
{
    int C = zs_model_cp_size(c), P = c->tp > 1 ? c->tp : 1;
    return (size_t)b * (size_t)(c->seq_len / C) * 2 * (size_t)(c->n_embd / P);
}

/* The block of this rank's queries against the keys of context rank src. */
static zs_ring_block ring_block(const zs_model_config *c, int B, int src, int first, int last)
{
    int C = zs_model_cp_size(c), P = c->tp > 1 ? c->tp : 1, S = c->seq_len / (2 * C);
    return (zs_ring_block){.b = B, .tq = 2 * S, .tk = 2 * S, .c = c->n_embd / P,
                           .nh = c->n_head / P, .chunk = S,
                           .q_chunk0 = zs_model_cp_chunk(c, c->cp_rank, 0),
                           .q_chunk1 = zs_model_cp_chunk(c, c->cp_rank, 1),
                           .k_chunk0 = zs_model_cp_chunk(c, src, 0),
                           .k_chunk1 = zs_model_cp_chunk(c, src, 1), .first = first,
                           .last = last};
}

/* Send n floats of `send` to the next rank of the ring and receive as many
 * from the previous one into `recv`. */
static void ring_pass(zs_model *m, const float *send, float *recv, size_t n, int step, int unit)
{
    int C = m->cfg.cp, r = m->cfg.cp_rank;
    void *req = NULL;
    if (!m->cp)
        return;
    if (zs_comm_isend(m->cp, (r + 1) % C, send, n, ZS_CT_F32, ZS_RING_TAG + step, unit, &req) ||
        zs_comm_recv(m->cp, (r + C - 1) % C, recv, n, ZS_CT_F32, ZS_RING_TAG + step, unit) ||
        zs_comm_wait(m->cp, &req))
        m->tp_failed = 1;
}

/* The keys and values of this rank's rows of qkv (B·Tl rows of 3C'), packed
 * into kv (rows of 2C'). */
static void ring_pack(zs_backend_t be, float *kv, const float *qkv, size_t rows, int Cl)
{
    for (size_t i = 0; i < rows; i++)
        zs_backend_copy_d2d(be, kv + i * 2 * (size_t)Cl, qkv + i * 3 * (size_t)Cl + Cl,
                            2 * (size_t)Cl * 4);
}

void zs_ring_attention_forward(zs_model *m, zs_backend_t be, float *ring, float *out,
                               float *stats, const float *qkv, int B, int unit)
{
    const zs_model_config *c = &m->cfg;
    int C = c->cp, r = c->cp_rank, Cl = c->n_embd / (c->tp > 1 ? c->tp : 1);
    size_t n = zs_ring_kv_floats(c, B), rows = n / (2 * (size_t)Cl);
    float *cur = ring, *nxt = ring + n;
    zs_ring_block own = ring_block(c, B, r, 1, C == 1);
    zs_backend_ring_attention_forward(be, out, stats, qkv, qkv + Cl, 3 * Cl, &own);
    ring_pack(be, cur, qkv, rows, Cl);
    for (int s = 1; s < C; s++) {
        ring_pass(m, cur, nxt, n, s, unit);
        float *t = cur;
        cur = nxt;
        nxt = t;
        zs_ring_block blk = ring_block(c, B, (r + C - s) % C, 0, s == C - 1);
        zs_backend_ring_attention_forward(be, out, stats, qkv, cur, 2 * Cl, &blk);
    }
}

void zs_ring_attention_backward(zs_model *m, zs_backend_t be, float *ring, float *dqkv,
                                const float *dout, const float *out, const float *stats,
                                const float *qkv, int B, int unit)
{
    const zs_model_config *c = &m->cfg;
    int C = c->cp, r = c->cp_rank, Cl = c->n_embd / (c->tp > 1 ? c->tp : 1);
    size_t n = zs_ring_kv_floats(c, B), rows = n / (2 * (size_t)Cl);
    float *kv = ring, *kv_next = ring + n, *dkv = ring + 2 * n, *dkv_next = ring + 3 * n;
    zs_ring_block own = ring_block(c, B, r, 1, 1);
    zs_backend_ring_attention_backward(be, dqkv, dqkv + Cl, 3 * Cl, dout, out, stats, qkv,
                                       qkv + Cl, 3 * Cl, &own);
    ring_pack(be, kv, qkv, rows, Cl);
    /* step s holds the keys and values of rank r - s with the gradients
     * that ranks r - s + 1 .. r - 1 added to them; after the last step the
     * gradients go one more hop, home */
    for (int s = 1; s < C; s++) {
        ring_pass(m, kv, kv_next, n, s, unit);
        if (s > 1)
            ring_pass(m, dkv, dkv_next, n, C + s, unit);
        else
            zs_backend_memset0(be, dkv_next, n * 4);
        float *t = kv;
        kv = kv_next;
        kv_next = t;
        t = dkv;
        dkv = dkv_next;
        dkv_next = t;
        zs_ring_block blk = ring_block(c, B, (r + C - s) % C, 0, 1);
        zs_backend_ring_attention_backward(be, dqkv, dkv, 2 * Cl, dout, out, stats, qkv, kv,
                                           2 * Cl, &blk);
    }
    if (C == 1)
        return;
    ring_pass(m, dkv, dkv_next, n, 2 * C, unit);
    for (size_t i = 0; i < rows; i++)
        zs_backend_axpy(be, dqkv + i * 3 * (size_t)Cl + Cl, 1.0f, dkv_next + i * 2 * (size_t)Cl,
                        2 * (size_t)Cl);
}
