/* zerosim — DeepSpeed-Ulysses (Jacobs et al., arXiv 2309.14509): the
 * context group's second attention (--cp U --cp-attention ulysses). Each
 * sample's T positions are cut into U contiguous shards of T / U (rank i
 * holds positions i T/U .. (i+1) T/U - 1: chunks 2i and 2i + 1 of
 * zs_model_cp_chunk); what is not attention is token-local, as with ring
 * attention. A block's attention is
 *   an all-to-all of q, k, v: from this rank's T/U positions of all its
 *     H' = n_head / tp heads to all T positions of H'/U heads (rank j gets
 *     heads j H'/U .. (j+1) H'/U - 1 of every rank's positions);
 *   the unsplit causal attention kernel on those heads (the same kernel,
 *     the same sums, as without the context group);
 *   an all-to-all of its output back from heads to positions.
 * The backward is the same in reverse: the output's gradient to heads, the
 * kernel's backward, the gradient of q, k, v back to positions.
 *
 * Bytes: each all-to-all moves B·(T/U)·p·C' floats per rank (p = 3 for
 * q, k, v, 1 for the output; C' = n_embd / tp), of which (U - 1)/U go to
 * other ranks: 4 (U - 1)/U · B (T/U) C' floats per forward or backward of
 * a block (zs_model_cp_a2a_bytes). With T and U grown together the bytes
 * per rank stay constant: the paper's claim (docs/parallelism.md).
 *
 * Layouts: a rank's qkv is B·(T/U) rows of [q | k | v], each C' wide, head
 * h at columns h·hs; the head-sharded form is B·T rows of [q | k | v] each
 * C'/U wide, the layout the attention kernel reads. The all-to-all's
 * buffers are peer-major: [peer][b][t][p·C'/U].
 */
#include "model_impl.h"
#include "zerosim/comm.h"
#include "zerosim/error.h"

#include <limits.h>
#include <stdlib.h>

double zs_model_cp_a2a_bytes(const zs_model_config *c, int b, int *calls)
{
    int U = zs_model_cp_size(c), P = c->tp > 1 ? c->tp : 1;
    *calls = 0;
    if (!zs_model_cp_ulysses(c) || !zs_model_is_decoder(c))
        return 0.0;
    *calls = 2;
    double per_peer = (double)b * (c->seq_len / U) * 4.0 * (c->n_embd / P) / U;
    return per_peer * (U - 1) * 4.0;
}

/* Exchange over the context group: peer q gets `chunk` floats at send +
 * q·chunk, and this rank's part from q lands at recv + q·chunk. */
static void ulysses_exchange(zs_model *m, zs_backend_t be, float *recv, const float *send,
                             size_t chunk, int unit)
{
    int U = m->cfg.cp;
    if (!m->cp) { /* no group (not a context run): nothing to exchange */
        zs_backend_copy_d2d(be, recv, send, (size_t)U * chunk * 4);
        return;
    }
    if ((size_t)U * chunk * 4 > (size_t)INT_MAX) {
        zs_error_set("Ulysses: the all-to-all of %zu bytes per rank is more than one MPI call "
                     "carries (2 GiB): use a smaller micro-batch or more ranks in --cp",
                     (size_t)U * chunk * 4);
        m->tp_failed = 1;
        return;
    }
    int *cnt = malloc(2 * (size_t)U * sizeof(int));
    if (!cnt) {
        zs_error_set("out of host memory for Ulysses' all-to-all of %d ranks", U);
        m->tp_failed = 1;
        return;
    }
    for (int q = 0; q < U; q++) {
        cnt[q] = (int)(chunk * 4);
        cnt[U + q] = (int)((size_t)q * chunk * 4);
    }
    if (zs_comm_alltoallv_bytes(m->cp, send, cnt, cnt + U, recv, cnt, cnt + U, unit))
        m->tp_failed = 1;
    free(cnt);
}

/* Positions to heads: src holds B·Tl rows of p parts of Cl (this rank's
 * positions, all its heads); dst gets B·T rows of p parts of Cl/U (every
 * position, this rank's share of the heads). */
static void ulysses_to_heads(zs_model *m, zs_backend_t be, float *dst, const float *src,
                             float *send, float *recv, int B, int p, int unit)
{
    const zs_model_config *c = &m->cfg;
    int U = c->cp, Tl = c->seq_len / U, Cl = c->n_embd / (c->tp > 1 ? c->tp : 1), Cu = Cl / U;
    size_t rows = (size_t)B * Tl, chunk = rows * (size_t)p * Cu;
    for (int j = 0; j < U; j++)
        for (size_t r = 0; r < rows; r++)
            for (int k = 0; k < p; k++)
                zs_backend_copy_d2d(be, send + j * chunk + (r * p + k) * Cu,
                                    src + r * p * Cl + (size_t)k * Cl + (size_t)j * Cu,
                                    (size_t)Cu * 4);
    ulysses_exchange(m, be, recv, send, chunk, unit);
    for (int i = 0; i < U; i++)
        for (int b = 0; b < B; b++)
            zs_backend_copy_d2d(be, dst + ((size_t)b * c->seq_len + (size_t)i * Tl) * p * Cu,
                                recv + i * chunk + (size_t)b * Tl * p * Cu,
                                (size_t)Tl * p * Cu * 4);
}

/* Heads to positions: the inverse of ulysses_to_heads. */
static void ulysses_to_positions(zs_model *m, zs_backend_t be, float *dst, const float *src,
                                 float *send, float *recv, int B, int p, int unit)
{
    const zs_model_config *c = &m->cfg;
    int U = c->cp, Tl = c->seq_len / U, Cl = c->n_embd / (c->tp > 1 ? c->tp : 1), Cu = Cl / U;
    size_t rows = (size_t)B * Tl, chunk = rows * (size_t)p * Cu;
    for (int j = 0; j < U; j++)
        for (int b = 0; b < B; b++)
            zs_backend_copy_d2d(be, send + j * chunk + (size_t)b * Tl * p * Cu,
                                src + ((size_t)b * c->seq_len + (size_t)j * Tl) * p * Cu,
                                (size_t)Tl * p * Cu * 4);
    ulysses_exchange(m, be, recv, send, chunk, unit);
    for (int i = 0; i < U; i++)
        for (size_t r = 0; r < rows; r++)
            for (int k = 0; k < p; k++)
                zs_backend_copy_d2d(be, dst + r * p * Cl + (size_t)k * Cl + (size_t)i * Cu,
                                    recv + i * chunk + (r * p + k) * Cu, (size_t)Cu * 4);
}

size_t zs_ulysses_scratch_floats(const zs_model_config *c, size_t B)
{
    size_t BTl = B * (size_t)(c->seq_len / zs_model_cp_size(c));
    size_t Cl = (size_t)c->n_embd / (size_t)(c->tp > 1 ? c->tp : 1);
    return 10 * BTl * Cl; /* dqkv and out by heads (4), send and receive (3 each) */
}

/* The scratch (zs_ulysses_scratch_floats from `s`): q, k, v's gradient by
 * heads (3 B·Tl·C'), the output or its gradient by heads (B·Tl·C'), the
 * all-to-all's send and receive buffers (3 B·Tl·C' each). */
typedef struct {
    float *dqkv, *out, *send, *recv;
} ulysses_bufs;

static ulysses_bufs ulysses_split(const zs_model_config *c, float *s, size_t B)
{
    size_t n = zs_ulysses_scratch_floats(c, B) / 10;
    return (ulysses_bufs){.dqkv = s, .out = s + 3 * n, .send = s + 4 * n, .recv = s + 7 * n};
}

void zs_ulysses_attention_forward(zs_model *m, zs_backend_t be, float *scratch, float *preatt,
                                  float *out, float *att, float *qkv_heads, const float *qkv,
                                  int B, int unit)
{
    const zs_model_config *c = &m->cfg;
    int U = c->cp, P = c->tp > 1 ? c->tp : 1;
    ulysses_bufs u = ulysses_split(c, scratch, (size_t)B);
    ulysses_to_heads(m, be, qkv_heads, qkv, u.send, u.recv, B, 3, unit);
    zs_backend_attention_forward(be, u.out, preatt, att, qkv_heads, B, c->seq_len,
                                 c->n_embd / P / U, c->n_head / P / U);
    ulysses_to_positions(m, be, out, u.out, u.send, u.recv, B, 1, unit);
}

void zs_ulysses_attention_backward(zs_model *m, zs_backend_t be, float *scratch, float *dpreatt,
                                   float *datt, float *dqkv, const float *dout, const float *att,
                                   const float *qkv_heads, int B, int unit)
{
    const zs_model_config *c = &m->cfg;
    int U = c->cp, P = c->tp > 1 ? c->tp : 1;
    size_t BT = (size_t)B * c->seq_len, Cu = (size_t)(c->n_embd / P / U);
    ulysses_bufs u = ulysses_split(c, scratch, (size_t)B);
    ulysses_to_heads(m, be, u.out, dout, u.send, u.recv, B, 1, unit);
    zs_backend_memset0(be, u.dqkv, BT * 3 * Cu * 4);
    zs_backend_attention_backward(be, u.dqkv, dpreatt, datt, u.out, qkv_heads, att, B,
                                  c->seq_len, (int)(c->n_embd / P / U), c->n_head / P / U);
    ulysses_to_positions(m, be, dqkv, u.dqkv, u.send, u.recv, B, 3, unit);
}
