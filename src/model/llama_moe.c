/* zerosim — the Llama family's Mixtral blocks: the MLP of a block is E
 * SwiGLU experts behind a softmax router that sends each token to its top-k
 * experts (Mixtral: 8 experts, top 2, the chosen k weights renormalised
 * to sum to 1), with the GPT's capacity, dispatch, combine, load-balancing
 * loss and expert parallelism (src/model/moe.c); only the expert's body
 * differs: gate and up (F, C) into packed rows [gate | up] of 2F, SiLU(gate)
 * * up, down (C, F), as a dense block's MLP (src/model/llama.c).
 *
 * Tensor parallelism over P ranks (Megatron-LM's and DeepSpeed-MoE's
 * expert tensor parallelism, as the GPT's experts, src/model/gpt.c): each
 * expert is split as the dense MLP is, gate and up by rows (this rank's
 * Fl = F/P of them, column-parallel), down by columns (row-parallel), so
 * an expert's output on this rank is its part of a sum over the group; the
 * router is replicated. Every rank of the group holds the same tokens
 * (ln2 is whole on each), routes them the same way and combines its part
 * of the experts' outputs; llama.c sums the combined rows over the group
 * with the dense MLP's collective. In the backward the combine weights'
 * gradients (dot products with those parts) are summed over the group, so
 * that the router gets the same gradient on every rank, and the router's
 * input gradient is added on TP rank 0 alone (the experts', a part on each
 * rank, are summed over the group after this, by the RMSNorm's backward).
 *
 * Dimensions: BT tokens of hidden C, E experts of intermediate size F
 * (Fl = F/P on this rank), capacity Cap (zs_moe_capacity), expert-parallel
 * size Ep, El = E/Ep experts on this rank (E without expert parallelism).
 *
 * The views (llama.c binds them, its comment counts them): a->m_gates[l]
 * (BT, E) the router's probabilities; a->m_xin[l] (Ep, El, Cap, C) the
 * experts' input by source; a->m_fch[l] (Ep, El, Cap, 2Fl) gate and up;
 * a->m_gelu[l] (Ep, El, Cap, Fl) the SwiGLU; a->m_out[l] (E, Cap, C) the
 * experts' output back in expert order. Scratch: s_gl (BT, E), s_me1 and
 * s_me2 (E, Cap, C), s_dfch (Cap, 2Fl) and s_dfch_gelu (Cap, Fl) for one
 * expert's rows at a time, s_gsrc and s_grecv with moe_ep_home. */
#include "model_impl.h"
#include "zerosim/layers.h"

/* Experts this rank holds. */
static int llama_moe_local(const zs_model_config *c)
{
    return c->moe_ep > 1 ? c->moe_experts / c->moe_ep : c->moe_experts;
}

/* Each expert's intermediate size on this rank: F/P with tensor
 * parallelism. */
static int llama_moe_ffn_local(const zs_model_config *c)
{
    return c->ffn_hidden / (c->tp > 1 ? c->tp : 1);
}

/* Whether each source's expert gradients are kept apart (moe_ep_home). */
static int llama_moe_home(const zs_model_config *c)
{
    return c->moe_ep > 1 && c->moe_ep_home != 0;
}

/* The experts over their buffers: source q's rows of expert j through
 * expert j alone, so that every source's rows get the arithmetic they get
 * without expert parallelism. w: router, gate, up, down (this rank's F =
 * Fl rows or columns of each expert with tensor parallelism; out then
 * holds this rank's part of each output row). */
static void llama_experts_forward(zs_model *m, zs_backend_t be, int l, const float *const *w,
                                  zs_acts *a, float *out, int cap)
{
    const zs_model_config *c = &m->cfg;
    int C = c->n_embd, F = llama_moe_ffn_local(c), Ep = c->moe_ep > 1 ? c->moe_ep : 1;
    int El = llama_moe_local(c);
    size_t rc = (size_t)cap * C, rf = (size_t)cap * F, FC = (size_t)F * C;
    for (int q = 0; q < Ep; q++)
        for (int j = 0; j < El; j++) {
            size_t row = (size_t)q * El + j;
            const float *x = a->m_xin[l] + row * rc;
            float *h = a->m_fch[l] + row * 2 * rf, *sw = a->m_gelu[l] + row * rf;
            zs_backend_sgemm(be, 0, 1, cap, F, C, 1.0f, x, C, w[1] + j * FC, C, 0.0f, h, 2 * F);
            zs_backend_sgemm(be, 0, 1, cap, F, C, 1.0f, x, C, w[2] + j * FC, C, 0.0f, h + F,
                             2 * F);
            zs_backend_swiglu_forward(be, sw, h, cap, F);
            zs_linear_forward(be, out + row * rc, sw, w[3] + j * FC, NULL, cap, F, C);
        }
}

/* dout (Ep, El, Cap, C) -> din (same; with tensor parallelism this rank's
 * part of the sum over the group); the experts' gradients added into g (or,
 * with moe_ep_home, into each source's chunk of s_gsrc, laid out as the
 * stacked entries: gate (El F C), up (El F C), down (El C F), F = Fl). */
static void llama_experts_backward(zs_model *m, zs_backend_t be, int l, const float *const *w,
                                   float *const *g, zs_acts *a, float *din, const float *dout,
                                   int cap)
{
    const zs_model_config *c = &m->cfg;
    int C = c->n_embd, F = llama_moe_ffn_local(c), Ep = c->moe_ep > 1 ? c->moe_ep : 1;
    int El = llama_moe_local(c), home = llama_moe_home(c);
    size_t rc = (size_t)cap * C, rf = (size_t)cap * F, FC = (size_t)F * C;
    size_t chunk = (size_t)El * 3 * FC;
    zs_backend_memset0(be, din, (size_t)Ep * El * rc * 4);
    if (home)
        zs_backend_memset0(be, a->s_gsrc, (size_t)Ep * chunk * 4);
    for (int q = 0; q < Ep; q++) {
        float *gg = g[1], *gu = g[2], *gd = g[3];
        if (home) {
            gg = a->s_gsrc + (size_t)q * chunk;
            gu = gg + (size_t)El * FC;
            gd = gu + (size_t)El * FC;
        }
        for (int j = 0; j < El; j++) {
            size_t row = (size_t)q * El + j;
            const float *x = a->m_xin[l] + row * rc, *h = a->m_fch[l] + row * 2 * rf;
            float *dx = din + row * rc, *dsw = a->s_dfch_gelu, *dh = a->s_dfch;
            zs_backend_memset0(be, dsw, rf * 4);
            zs_linear_backward(be, dsw, gd + j * FC, NULL, dout + row * rc,
                               a->m_gelu[l] + row * rf, w[3] + j * FC, cap, F, C);
            zs_backend_memset0(be, dh, 2 * rf * 4);
            zs_backend_swiglu_backward(be, dh, h, dsw, cap, F);
            /* gate, then up: dx += dh W, dW += dh^T x over the packed rows */
            for (int k = 0; k < 2; k++) {
                const float *wk = w[1 + k] + j * FC;
                float *gk = (k == 0 ? gg : gu) + j * FC;
                zs_backend_sgemm(be, 0, 0, cap, C, F, 1.0f, dh + k * F, 2 * F, wk, C, 1.0f, dx, C);
                zs_backend_sgemm(be, 1, 0, F, C, cap, 1.0f, dh + k * F, 2 * F, x, C, 1.0f, gk, C);
            }
        }
    }
    if (!home)
        return;
    float *dst[3] = {g[1], g[2], g[3]};
    const size_t part[3] = {(size_t)El * FC, (size_t)El * FC, (size_t)El * FC};
    zs_moe_grads_home(m, be, a, l, dst, part, 3);
}

void zs_llama_moe_forward(zs_model *m, zs_backend_t be, int l, const float *const *w,
                          zs_acts *a, float *out, int B, int u)
{
    const zs_model_config *c = &m->cfg;
    int BT = B * c->seq_len, cap = a->moe->cap, ep = c->moe_ep > 1;
    size_t ecc = (size_t)c->moe_experts * cap * c->n_embd;
    zs_moe_route_block(m, be, a, l, w[0], BT, 1);
    zs_moe_keep_stats(a, l);
    zs_moe_dispatch_forward(be, ep ? a->s_me1 : a->m_xin[l], a->ln2[l], a->moe);
    if (ep)
        zs_moe_alltoall(m, be, a->m_xin[l], a->s_me1, ecc, u);
    llama_experts_forward(m, be, l, w, a, ep ? a->s_me1 : a->m_out[l], cap);
    if (ep)
        zs_moe_alltoall(m, be, a->m_out[l], a->s_me1, ecc, u);
    zs_moe_combine_forward(be, out, a->m_out[l], a->moe);
}

void zs_llama_moe_backward(zs_model *m, zs_backend_t be, int l, const float *const *w,
                           float *const *g, zs_acts *a, float *dln2, const float *dout, int B,
                           int u, float dloss)
{
    const zs_model_config *c = &m->cfg;
    int BT = B * c->seq_len, C = c->n_embd, E = c->moe_experts, cap = a->moe->cap;
    int ep = c->moe_ep > 1, tp = c->tp > 1, r = tp ? c->tp_rank : 0;
    size_t ecc = (size_t)E * cap * C;
    zs_moe_route_block(m, be, a, l, w[0], BT, 0);
    /* combine: d the experts' outputs (s_me1), d the combine weights (host) */
    zs_moe_combine_backward(be, a->s_me1, dout, a->m_out[l], a->moe);
    if (tp) { /* the combine weights' gradients over the group, through s_gl */
        size_t kn = (size_t)a->moe->k * (size_t)BT;
        zs_backend_copy_h2d(be, a->s_gl, a->moe->dweight, kn * 4);
        zs_decoder_tp_sum(m, a->s_gl, kn, u);
        zs_backend_copy_d2h(be, a->moe->dweight, a->s_gl, kn * 4);
    }
    if (ep)
        zs_moe_alltoall(m, be, a->s_me2, a->s_me1, ecc, u);
    float *dexp = ep ? a->s_me2 : a->s_me1, *din = ep ? a->s_me1 : a->s_me2;
    llama_experts_backward(m, be, l, w, g, a, din, dexp, cap);
    if (ep)
        zs_moe_alltoall(m, be, a->s_me2, a->s_me1, ecc, u);
    zs_backend_memset0(be, dln2, (size_t)BT * C * 4);
    zs_moe_dispatch_backward(be, dln2, a->s_me2, a->moe);
    /* the router: through the combine weights, the softmax and l_aux */
    zs_moe_gate_backward(a->moe->hbuf, a->moe, (float)(c->moe_aux_coeff * dloss));
    zs_backend_copy_h2d(be, a->s_gl, a->moe->hbuf, (size_t)BT * E * 4);
    zs_linear_backward(be, r == 0 ? dln2 : NULL, g[0], NULL, a->s_gl, a->ln2[l], w[0], BT, C,
                       E);
}

const float *zs_llama_moe_source_grads(const zs_model *m, const zs_acts *a, size_t *chunk)
{
    const zs_model_config *c = &m->cfg;
    *chunk = 0;
    if (c->moe_ep_home != ZS_MOE_EP_BY_SOURCE || !llama_moe_home(c) || c->moe_experts <= 0 ||
        c->moe_every <= 0 || c->n_layer / c->moe_every == 0)
        return NULL;
    *chunk = (size_t)llama_moe_local(c) * 3 * (size_t)llama_moe_ffn_local(c) * (size_t)c->n_embd;
    return a->s_gsrc;
}
