/* zerosim — GPT-2-style decoder: pre-LayerNorm blocks with biases, learned
 * positions, output head tied to the token embedding.
 *
 * Units: 0 = token and position embeddings, 1..L = transformer blocks,
 * L+1 = final LayerNorm and the tied head with softmax cross-entropy.
 *
 * Activation memory saved for backward per micro-batch of B sequences, in
 * floats (4 bytes each), with BT = B*T:
 *   encoded                                   BT*C
 *   per block: ln1, atty, res2, ln2, res3     5*BT*C
 *              qkv                            3*BT*C
 *              fch, fch_gelu                  8*BT*C
 *              ln1/ln2 mean and rstd          4*BT
 *              att (softmax)                  B*NH*T*T
 *   final: lnf                                BT*C
 *          lnf mean and rstd                  2*BT
 *          probs                              BT*V
 *          losses                             BT
 * total = 4 * (BT*C*(2 + 16L) + L*(4*BT + B*NH*T*T) + BT*(V + 3)) bytes.
 *
 * With activation checkpointing in segments of K blocks, only K blocks'
 * activations exist at a time (block l uses slot l mod K; the engine
 * recomputes a segment before its backward), and the output of the last
 * block of every segment but the final one is kept as the next segment's
 * checkpoint (category checkpoints, BT*C floats each). L becomes K above.
 */
#include "model_impl.h"
#include "zerosim/comm.h"
#include "zerosim/error.h"
#include "zerosim/layers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Experts this rank holds (all of them without expert parallelism). */
static int gpt_local_experts(const zs_model_config *c)
{
    return c->moe_ep > 1 ? c->moe_experts / c->moe_ep : c->moe_experts;
}

/* Capacity of a MoE block for micro-batches of b sequences. */
static int gpt_moe_cap(const zs_model_config *c, int b)
{
    return zs_moe_capacity(b * c->seq_len, c->moe_experts, c->moe_top_k,
                           c->moe_capacity_factor, c->moe_min_capacity);
}

/* MoE blocks of the model, or of its pipeline stage. */
static int gpt_n_moe(const zs_model_config *c) { return zs_decoder_stage_moe_blocks(c); }

/* The tensor-parallel size (1 without). */
static int gpt_tp(const zs_model_config *c) { return c->tp > 1 ? c->tp : 1; }
/* Sequence parallelism: the sequence positions each rank keeps outside the
 * tensor-parallel regions (T without). */
static int gpt_sp(const zs_model_config *c) { return c->tp > 1 && c->sequence_parallel; }
static size_t gpt_seq_local(const zs_model_config *c)
{
    return zs_decoder_seq_rank(c) / (size_t)(gpt_sp(c) ? c->tp : 1);
}

static int gpt_build_layout(const zs_model_config *c, zs_layout *lay)
{
    size_t C = (size_t)c->n_embd, V = (size_t)c->vocab, T = (size_t)c->seq_len;
    size_t P = (size_t)gpt_tp(c); /* column-, row- and vocab-parallel entries hold 1/P */
    char name[48];
    ZS_TRY(zs_layout_add(lay, "wte", V / P * C, 0));
    ZS_TRY(zs_layout_add(lay, "wpe", T * C, 0));
    for (int l = 0; l < c->n_layer; l++) {
        static const char *const nm[B_NENT] = {
            "ln1.w", "ln1.b", "attn.qkv.w", "attn.qkv.b", "attn.proj.w", "attn.proj.b",
            "ln2.w", "ln2.b", "mlp.fc.w", "mlp.fc.b", "mlp.proj.w", "mlp.proj.b"};
        const size_t n[B_NENT] = {C, C, 3 * C * C / P, 3 * C / P, C * C / P, C,
                                  C, C, 4 * C * C / P, 4 * C / P, 4 * C * C / P, C};
        int moe = zs_model_block_is_moe(c, l);
        for (int k = 0; k < (moe ? B_LN2B + 1 : B_NENT); k++) {
            snprintf(name, sizeof name, "h%d.%s", l, nm[k]);
            ZS_TRY(zs_layout_add(lay, name, n[k], l + 1));
        }
        if (!moe)
            continue;
        static const char *const mn[M_KIND_END - M_GATEW] = {
            "moe.gate.w", "moe.experts.fc.w", "moe.experts.fc.b", "moe.experts.proj.w",
            "moe.experts.proj.b"};
        /* with tensor parallelism each expert's MLP is split as the dense
         * MLP is: fc by rows (4C/P of them), proj by columns; the router
         * and proj's bias are replicated */
        size_t E = (size_t)c->moe_experts, El = (size_t)gpt_local_experts(c);
        const size_t mnum[M_KIND_END - M_GATEW] = {E * C, El * 4 * C * C / P, El * 4 * C / P,
                                                   El * 4 * C * C / P, El * C};
        for (int k = 0; k < M_KIND_END - M_GATEW; k++) {
            snprintf(name, sizeof name, "h%d.%s", l, mn[k]);
            ZS_TRY(zs_layout_add(lay, name, mnum[k], l + 1));
        }
    }
    ZS_TRY(zs_layout_add(lay, "lnf.w", C, c->n_layer + 1));
    ZS_TRY(zs_layout_add(lay, "lnf.b", C, c->n_layer + 1));
    return 0;
}

/* Entry index of entry k of block l (0-based block); MoE kinds M_* in MoE
 * blocks. */
static int blk(const zs_model_config *c, int l, int k)
{
    return zs_moe_block_first_entry(c, l) + (k >= M_GATEW ? B_LN2B + 1 + (k - M_GATEW) : k);
}

/* Tensor parallelism: element j of entry i of rank tp_rank's shard as an
 * element of the same entry at tp = 1. Column-parallel weights (QKV by
 * heads: q, k and v rows of this rank's heads; the MLP's first linear) hold
 * whole rows, row-parallel weights (the projections) a range of columns of
 * every row, the embedding a range of rows; a MoE block's stacked experts
 * each as the dense MLP (expert e of the shard is expert e of the entry). */
static size_t gpt_tp_global(const zs_model_config *c, int i, size_t j)
{
    size_t P = (size_t)gpt_tp(c), r = (size_t)(c->tp > 1 ? c->tp_rank : 0);
    size_t C = (size_t)c->n_embd, Cl = C / P, Fl = 4 * C / P;
    int L = c->n_layer;
    if (P == 1)
        return j;
    if (i == 0) /* wte: rows r*V/P .. */
        return r * ((size_t)c->vocab / P) * C + j;
    int kind;
    if (zs_moe_entry_block(c, i, &kind) < 0)
        return j;
    (void)L;
    switch (kind) {
    case B_QKVW: { /* (3C, C): local row lr = part * Cl + within */
        size_t lr = j / C, col = j % C;
        return ((lr / Cl) * C + r * Cl + lr % Cl) * C + col;
    }
    case B_QKVB: return (j / Cl) * C + r * Cl + j % Cl;
    case B_PROJW: return (j / Cl) * C + r * Cl + j % Cl;        /* (C, C): columns */
    case B_FCW: return r * Fl * C + j;                           /* (4C, C): rows */
    case B_FCB: return r * Fl + j;
    case B_FCPW: return (j / Fl) * 4 * C + r * Fl + j % Fl;     /* (C, 4C): columns */
    case M_FCW: return (j / (Fl * C)) * 4 * C * C + r * Fl * C + j % (Fl * C);
    case M_FCB: return (j / Fl) * 4 * C + r * Fl + j % Fl;
    case M_FCPW: { /* (E, C, 4C): columns of each expert */
        size_t e = j / (C * Fl), w = j % (C * Fl);
        return e * 4 * C * C + (w / Fl) * 4 * C + r * Fl + w % Fl;
    }
    default: return j;                                           /* replicated */
    }
}

static int gpt_tp_replicated(const zs_model_config *c, int i)
{
    int k;
    if (i == 0)
        return 0;
    if (zs_moe_entry_block(c, i, &k) < 0)
        return 1;
    return !(k == B_QKVW || k == B_QKVB || k == B_PROJW || k == B_FCW || k == B_FCB ||
             k == B_FCPW || k == M_FCW || k == M_FCB || k == M_FCPW);
}

/* Elements [first, first+n) of entry i, into out. Value j of an entry is
 * drawn from the (2j)-th and (2j+1)-th numbers of the entry's stream, so any
 * range can be generated on its own; a tensor-parallel shard draws each of
 * its elements where the tp = 1 model draws it. */
static void gpt_init_range(const zs_model *m, int i, size_t first, size_t n, float *out,
                           uint64_t seed)
{
    const zs_layout *lay = &m->layout;
    int L = m->cfg.n_layer, k;
    int in_block = zs_moe_entry_block(&m->cfg, i, &k) >= 0;
    int is_ln_w = (in_block && (k == B_LN1W || k == B_LN2W)) || i == lay->n_entries - 2;
    int is_bias = (in_block && (k == B_LN1B || k == B_QKVB || k == B_PROJB || k == B_LN2B ||
                                k == B_FCB || k == B_FCPB || k == M_FCB || k == M_FCPB)) ||
                  i == lay->n_entries - 1;
    double std = in_block && (k == B_PROJW || k == B_FCPW || k == M_FCPW) ? 0.02 / sqrt(2.0 * L)
                                                                          : 0.02;
    uint64_t base = zs_rng_mix(seed, (uint64_t)i + 1);
    /* expert parallelism: this rank's experts are a slice of each stacked
     * expert entry, drawn where the whole entry draws them (an entry's
     * tensor-parallel shard holds 1/P of each expert) */
    size_t ep_first = 0;
    if (in_block && k > M_GATEW && m->cfg.moe_ep > 1)
        ep_first = (size_t)m->cfg.moe_ep_rank * lay->entries[i].numel *
                   (gpt_tp_replicated(&m->cfg, i) ? 1 : (size_t)gpt_tp(&m->cfg));
    if (gpt_tp(&m->cfg) > 1) {
        for (size_t j = 0; j < n; j++) {
            size_t g = ep_first + gpt_tp_global(&m->cfg, i, first + j);
            uint64_t st = base + 2 * g * 0x9e3779b97f4a7c15ULL;
            out[j] = is_ln_w ? 1.0f : is_bias ? 0.0f : (float)(std * zs_rng_normal(&st));
        }
        return;
    }
    uint64_t st = base + 2 * (ep_first + first) * 0x9e3779b97f4a7c15ULL;
    for (size_t j = 0; j < n; j++)
        out[j] = is_ln_w ? 1.0f : is_bias ? 0.0f : (float)(std * zs_rng_normal(&st));
}

/* Pipeline: the blocks [*b0, *b1] (0-based) of the stage's units, and
 * whether it has the head; the whole model without a pipeline. */
static void gpt_stage(const zs_model_config *c, int *b0, int *b1, int *head)
{
    zs_decoder_stage(c, b0, b1, head);
}

/* Blocks whose activations exist at once: K with checkpointing, else L. */
static int gpt_slots(const zs_model_config *c) { return zs_decoder_slots(c); }

/* A pipeline stage with activation checkpointing: each micro-batch in
 * flight keeps its input (encoded), its last block's output, the head's
 * activations on the last stage and, as checkpoints, the output of every
 * block of the stage that ends a segment (but the stage's last block);
 * the blocks' own activations live in min(K, blocks of the stage) working
 * slots shared by the micro-batches (block l uses slot (l - b0) mod K), and
 * every segment of the stage is recomputed before its backward. */
static int gpt_pp_ckpt(const zs_model_config *c) { return zs_decoder_pp_ckpt(c); }

/* Context parallelism: each block keeps, in place of the attention's
 * probabilities (B·NH/P·T² floats), the ring's statistics, a maximum and a
 * sum per row and head (2·B·NH/P·T/cp); the scratch holds, in place of
 * preatt and datt, the ring's four messages (zs_ring_kv_floats each: keys
 * and values, and their gradients, as sent and as received). */
/* Ulysses: each block keeps the unsplit kernel's probabilities of this
 * rank's heads over all T positions (B·NH/(P·U)·T²), and the scratch holds
 * that kernel's preatt and datt and the all-to-alls' buffers
 * (zs_ulysses_scratch_floats). */
static size_t gpt_att_floats(const zs_model_config *c, size_t B)
{
    size_t NH = (size_t)c->n_head / (size_t)gpt_tp(c), T = zs_decoder_seq_rank(c);
    if (zs_model_cp_ulysses(c)) {
        size_t U = (size_t)zs_model_cp_size(c), Tf = (size_t)c->seq_len;
        return B * (NH / U) * Tf * Tf;
    }
    return zs_model_cp_size(c) > 1 ? 2 * B * NH * T : B * NH * T * T;
}

static size_t gpt_att_scratch_floats(const zs_model_config *c, size_t B)
{
    if (zs_model_cp_ulysses(c))
        return 2 * gpt_att_floats(c, B) + zs_ulysses_scratch_floats(c, B);
    return zs_model_cp_size(c) > 1 ? 4 * zs_ring_kv_floats(c, (int)B) : 2 * gpt_att_floats(c, B);
}

/* The exact sums of slices' scratch (s_xtmp): a slice's product (BT rows
 * of C), or the LayerNorm backward's per-slice (dw, db) with their maxima
 * and sum, (2 S + 4) C for S = tp_exact_slices slices at most */
static size_t gpt_exact_tmp_floats(const zs_model_config *c, size_t BT)
{
    size_t ln = 2 * (size_t)c->tp_exact_slices + 4;
    return (BT > ln ? BT : ln) * (size_t)c->n_embd;
}

/* With tensor parallelism (P ranks) the attention's and the MLP's inner
 * activations (qkv, atty, fch, fch_gelu, att) and the logits hold 1/P:
 * BT·C·(2 + L·(4 + 12/P)) + L·(4·BT + B·NH/P·T²) + BT·(V/P + 3). */
/* With sequence parallelism as well, the residual stream (encoded, res2,
 * res3) and the LayerNorm statistics hold T/P positions, while the
 * LayerNorm outputs are kept gathered (all T positions) for the linear
 * layers' backward: BTl·C + L·(2·BT·C + 2·BTl·C + 12·BT·C/P + 4·BTl +
 * B·NH/P·T²) + BT·C + 2·BTl + BT·(V/P + 1), BTl = B·T/P. */
static size_t gpt_block_floats(const zs_model_config *c, int b)
{
    size_t B = (size_t)b, T = zs_decoder_seq_rank(c), C = (size_t)c->n_embd, P = (size_t)gpt_tp(c);
    size_t BT = B * T, BTl = B * gpt_seq_local(c);
    return gpt_sp(c) ? 2 * BT * C + 2 * BTl * C + 12 * BT * C / P + 4 * BTl + gpt_att_floats(c, B)
                     : 4 * BT * C + 12 * BT * C / P + 4 * BT + gpt_att_floats(c, B);
}

/* Mixture of experts: a MoE block keeps, instead of fch and fch_gelu
 * (8·BT·C/P), the gates (BT·E) and the expert buffers: input and output
 * (E·Cap·C each, Cap the capacity) and the experts' inner activations
 * (E·Cap·4C/P twice: with tensor parallelism each rank's 4C/P columns of
 * every expert); with expert parallelism the same sizes (the all-to-all
 * brings Ep sources' Cap rows of each of E/Ep experts). With activation
 * checkpointing these are per slot (gpt_slot_kinds), not per block. */
static size_t gpt_moe_act_floats(const zs_model_config *c, int b)
{
    size_t BT = (size_t)b * c->seq_len, C = (size_t)c->n_embd, E = (size_t)c->moe_experts;
    size_t ec = E * (size_t)gpt_moe_cap(c, b), ecc = ec * C;
    return BT * E + 2 * ecc + 8 * ec * (C / (size_t)gpt_tp(c));
}

/* One block's activations that hold blocks of the kinds `kinds` (bit 1: a
 * dense block, its fch and fch_gelu, 4·BT·C/P each; bit 2: a MoE block,
 * its gates and expert buffers): a pipeline stage's block, or a working
 * slot of its checkpointed segments. In gpt_bind_block's order. */
static size_t gpt_slot_floats(const zs_model_config *c, int b, int kinds)
{
    size_t BT = (size_t)b * zs_decoder_seq_rank(c), C = (size_t)c->n_embd, P = (size_t)gpt_tp(c);
    size_t f = gpt_block_floats(c, b);
    if (!(kinds & 1))
        f -= 8 * BT * C / P;
    return f + ((kinds & 2) ? gpt_moe_act_floats(c, b) : 0);
}

static size_t gpt_activation_floats(const zs_model_config *c, int b)
{
    size_t B = (size_t)b, T = zs_decoder_seq_rank(c), C = (size_t)c->n_embd, P = (size_t)gpt_tp(c);
    size_t V = (size_t)c->vocab, L = (size_t)gpt_slots(c);
    size_t BT = B * T, BTl = B * gpt_seq_local(c);
    if (c->pp_on) { /* a pipeline stage: its input, its blocks, the head if it has it */
        int b0, b1, head;
        gpt_stage(c, &b0, &b1, &head);
        size_t headf = head ? BT * C + 2 * BTl + BT * (V / P + 1) : 0;
        if (gpt_pp_ckpt(c)) /* its input and last output; the blocks' are shared */
            return 2 * BTl * C + headf;
        size_t f = BTl * C + headf;
        for (int l = b0; l <= b1; l++)
            f += gpt_slot_floats(c, b, zs_model_block_is_moe(c, l) ? 2 : 1);
        return f;
    }
    if (gpt_sp(c))
        return BTl * C + L * (2 * BT * C + 2 * BTl * C + 12 * BT * C / P + 4 * BTl +
                              gpt_att_floats(c, B)) + BT * C + 2 * BTl + BT * (V / P + 1);
    return BT * C * 2 + L * (4 * BT * C + 12 * BT * C / P) + L * (4 * BT + gpt_att_floats(c, B)) +
           BT * (V / P + 3);
}


double zs_model_moe_alltoall_bytes(const zs_model_config *c, int b, int *calls)
{
    *calls = 0; /* the Llama family's experts exchange the same (E, Cap, C) buffers */
    if (!zs_model_is_decoder(c) || gpt_n_moe(c) == 0 || c->moe_ep <= 1)
        return 0.0;
    *calls = 4 * gpt_n_moe(c);
    double Ep = c->moe_ep, ecc = (double)c->moe_experts * gpt_moe_cap(c, b) * c->n_embd;
    return *calls * (Ep - 1.0) / Ep * ecc * 4.0;
}

/* Activation slot s (0 <= s < K, gpt_slots) holds blocks s, s + K, s + 2K,
 * ... (without checkpointing K = L: block s alone). What the slot must hold:
 * bit 1 when one of its blocks is dense (fch, fch_gelu), bit 2 when one is
 * a MoE block (the gates and expert buffers); both when K is not a multiple
 * of moe.expert_interval. */
static int gpt_slot_kinds(const zs_model_config *c, int s)
{
    return zs_decoder_block_kinds(c, s, c->n_layer - 1, gpt_slots(c));
}

/* The kinds of the blocks [b0, b1] together: what each working slot of a
 * checkpointed pipeline stage holds (its blocks take turns in them). */
static int gpt_range_kinds(const zs_model_config *c, int b0, int b1)
{
    return zs_decoder_block_kinds(c, b0, b1, 1);
}

/* A pipeline stage with checkpointing: the working slots of its blocks,
 * shared by the micro-batches in flight (0 otherwise). */
static size_t gpt_shared_activation_bytes(const zs_model_config *c, int b)
{
    if (!gpt_pp_ckpt(c))
        return 0;
    int b0, b1, head, K = gpt_slots(c);
    gpt_stage(c, &b0, &b1, &head);
    size_t nw = (size_t)(b1 - b0 + 1 < K ? b1 - b0 + 1 : K);
    return 4 * nw * gpt_slot_floats(c, b, gpt_range_kinds(c, b0, b1));
}

static size_t gpt_activation_bytes(const zs_model_config *c, int b)
{
    size_t f = gpt_activation_floats(c, b), BTC = (size_t)b * zs_decoder_seq_rank(c) * c->n_embd;
    BTC /= (size_t)gpt_tp(c); /* fch and fch_gelu hold this rank's 4C/P columns */
    if (gpt_n_moe(c) == 0 || c->pp_on)
        return 4 * f;
    for (int s = 0; s < gpt_slots(c); s++) {
        int k = gpt_slot_kinds(c, s);
        if (!(k & 1)) /* counted in f: a slot without a dense block has no fch, fch_gelu */
            f -= 8 * BTC;
        if (k & 2)
            f += gpt_moe_act_floats(c, b);
    }
    return 4 * f;
}

/* Scratch: tmp, dres (BT*C each), datty (BT*C/P), dqkv (3BT*C/P), dfch,
 * dfch_gelu (4BT*C/P each), preatt and datt (B*NH/P*T*T each),
 * logits/dlogits (BT*V/P); with tensor parallelism also the loss's row
 * maxima and sums (3BT). */
/* The floats of one expert's parameters on this rank: fc.w and proj.w
 * (4C/P x C each), fc.b (4C/P), proj.b (C). */
static size_t gpt_expert_floats(const zs_model_config *c)
{
    size_t C = (size_t)c->n_embd, Fl = 4 * C / (size_t)gpt_tp(c);
    return 2 * Fl * C + Fl + C;
}

/* Expert parallelism with moe_ep_home: the floats of the experts' gradients
 * by source, s_gsrc (every expert's parameters, E (8C^2 + 5C): Ep sources
 * times this rank's E/Ep experts), and of what comes home, s_grecv (the
 * same; ZS_MOE_EP_HOME only); 0 without. */
static size_t gpt_home_floats(const zs_model_config *c)
{
    if (c->moe_ep <= 1 || !c->moe_ep_home || gpt_n_moe(c) == 0)
        return 0;
    return (size_t)c->moe_experts * gpt_expert_floats(c);
}

static size_t gpt_recv_floats(const zs_model_config *c)
{
    return c->moe_ep_home == ZS_MOE_EP_HOME ? gpt_home_floats(c) : 0;
}

double zs_model_moe_home_bytes(const zs_model_config *c)
{
    if (c->kind == ZS_MODEL_LLAMA)
        return zs_llama_moe_home_bytes(c);
    double n = (double)gpt_recv_floats(c);
    return n > 0 ? n * 4.0 * (c->moe_ep - 1.0) / c->moe_ep : 0.0;
}

const float *zs_model_moe_source_grads(const zs_model *m, const zs_acts *a, size_t *chunk)
{
    const zs_model_config *c = &m->cfg;
    if (c->kind == ZS_MODEL_LLAMA)
        return zs_llama_moe_source_grads(m, a, chunk);
    *chunk = 0;
    if (c->moe_ep_home != ZS_MOE_EP_BY_SOURCE || gpt_home_floats(c) == 0)
        return NULL;
    *chunk = (size_t)gpt_local_experts(c) * gpt_expert_floats(c);
    return a->s_gsrc;
}

static size_t gpt_scratch_bytes(const zs_model_config *c, int b)
{
    size_t B = (size_t)b, T = zs_decoder_seq_rank(c), C = (size_t)c->n_embd, P = (size_t)gpt_tp(c);
    size_t V = (size_t)c->vocab, BT = B * T;
    size_t sp = gpt_sp(c) ? 2 * BT * C + B * gpt_seq_local(c) * C : 0; /* perm, dfull, loc */
    /* mixture of experts: dfch and dfch_gelu as large as an expert buffer's
     * inner activations (E·Cap·4C/P) when that is more, two (E,Cap,C)
     * buffers and the router's logits (BT·E) */
    size_t moe = 0;
    if (gpt_n_moe(c) > 0) {
        size_t ec = (size_t)c->moe_experts * (size_t)gpt_moe_cap(c, b), ecc = ec * C;
        size_t ecl = ec * (C / P), btcl = BT * (C / P);
        moe = 2 * ecc + BT * (size_t)c->moe_experts + (ecl > btcl ? 8 * (ecl - btcl) : 0) +
              gpt_home_floats(c) + gpt_recv_floats(c); /* the experts' gradients by
                                                           source, and home */
    }
    int b0, b1, head; /* a pipeline stage without the head has no logits */
    gpt_stage(c, &b0, &b1, &head);
    /* exact sums of slices: a slice's result and its rows' maxima, and the
     * vocab-parallel loss's maxima and sums without tensor parallelism */
    size_t exact = zs_decoder_exact(c) ? gpt_exact_tmp_floats(c, BT) + BT : 0;
    return 4 * (BT * C * 2 + 12 * BT * C / P + gpt_att_scratch_floats(c, B) +
                (head ? BT * V / P : 0) + (P > 1 || exact ? 3 * BT : 0) + sp + moe + exact);
}

static void gpt_bind_scratch(zs_acts *a, int head, size_t ecc);

/* Block l's views at p for blocks of the kinds `kinds` (gpt_slot_floats):
 * the 13 views of sizes sz (fch and fch_gelu only with a dense block), then
 * a MoE block's gates (BT·E) and expert buffers (ecc = E·Cap·C: input,
 * 4 ecc / P inner twice, each rank's columns, output); returns the end. */
static float *gpt_bind_block(zs_acts *a, float ***const *views, const size_t *sz, int l,
                             float *p, int kinds, size_t ecc)
{
    for (int k = 0; k < 13; k++) {
        if (!(kinds & 1) && (k == 10 || k == 11)) /* fch, fch_gelu: dense blocks' */
            continue;
        (*views[k])[l] = p;
        p += sz[k];
    }
    if (!(kinds & 2))
        return p;
    a->m_gates[l] = p; p += (size_t)a->b * zs_decoder_seq_rank(&a->m->cfg) * a->m->cfg.moe_experts;
    a->m_xin[l] = p; p += ecc;
    size_t P = (size_t)gpt_tp(&a->m->cfg); /* each rank's 4C/P columns of every expert */
    a->m_fch[l] = p; p += 4 * (ecc / P);
    a->m_gelu[l] = p; p += 4 * (ecc / P);
    a->m_out[l] = p; p += ecc;
    return p;
}

static void gpt_bind_acts(zs_acts *a)
{
    const zs_model_config *c = &a->m->cfg;
    size_t B = (size_t)a->b, T = zs_decoder_seq_rank(c), C = (size_t)c->n_embd, P = (size_t)gpt_tp(c);
    size_t V = (size_t)c->vocab / P, BT = B * T, Cl = C / P;
    int L = c->n_layer;
    float **arr = calloc((size_t)L * 18, sizeof(float *));
    a->view_arrays = arr;
    if (!arr)
        return;
    int nmoe = gpt_n_moe(c), E = c->moe_experts, cap = nmoe ? gpt_moe_cap(c, (int)B) : 0;
    a->m_gates = arr + (size_t)L * 13;
    a->m_xin = arr + (size_t)L * 14;
    a->m_fch = arr + (size_t)L * 15;
    a->m_gelu = arr + (size_t)L * 16;
    a->m_out = arr + (size_t)L * 17;
    size_t ecc = (size_t)E * (size_t)cap * C;
    float ***views[13] = {&a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->qkv, &a->atty, &a->att,
                          &a->res2, &a->ln2, &a->ln2_mean, &a->ln2_rstd, &a->fch,
                          &a->fch_gelu, &a->res3};
    size_t BTl = B * gpt_seq_local(c); /* positions of the residual stream */
    const size_t sz[13] = {BT * C, BTl, BTl, 3 * BT * Cl, BT * Cl, gpt_att_floats(c, B),
                           BTl * C, BT * C, BTl, BTl, 4 * BT * Cl, 4 * BT * Cl, BTl * C};
    for (int k = 0; k < 13; k++)
        *views[k] = arr + (size_t)k * (size_t)L;
    float *p = a->saved;
    a->encoded = p; p += BTl * C;
    int b0, b1, head;
    gpt_stage(c, &b0, &b1, &head);
    if (gpt_pp_ckpt(c)) { /* working slots, checkpoints and the last output */
        int K = gpt_slots(c), nw = b1 - b0 + 1 < K ? b1 - b0 + 1 : K;
        int kinds = gpt_range_kinds(c, b0, b1);
        float *last = p;
        p += BTl * C;
        for (int j = 0; j < nw; j++) {
            float *w = a->work + (size_t)j * gpt_slot_floats(c, (int)B, kinds);
            for (int l = b0 + j; l <= b1; l += K)
                gpt_bind_block(a, views, sz, l, w, kinds, ecc);
        }
        zs_decoder_bind_checkpoints(a);
        a->res3[b1] = last;
        if (b0 >= 1)
            a->res3[b0 - 1] = a->encoded;
    } else if (c->pp_on) { /* the stage's blocks, each its own slot; its input is encoded */
        for (int l = b0; l <= b1; l++)
            p = gpt_bind_block(a, views, sz, l, p, zs_model_block_is_moe(c, l) ? 2 : 1, ecc);
        if (b0 >= 1)
            a->res3[b0 - 1] = a->encoded;
    } else {
        int K = gpt_slots(c);
        for (int l = 0; l < K; l++) { /* slot l (gpt_slot_kinds: what its blocks need) */
            p = gpt_bind_block(a, views, sz, l, p, nmoe ? gpt_slot_kinds(c, l) : 1, ecc);
        }
        for (int l = K; l < L; l++) { /* block l uses slot l mod K */
            for (int k = 0; k < 13; k++)
                (*views[k])[l] = (*views[k])[l % K];
            if (nmoe) {
                a->m_gates[l] = a->m_gates[l % K];
                a->m_xin[l] = a->m_xin[l % K];
                a->m_fch[l] = a->m_fch[l % K];
                a->m_gelu[l] = a->m_gelu[l % K];
                a->m_out[l] = a->m_out[l % K];
            }
        }
        zs_decoder_bind_checkpoints(a);
    }
    a->n_losses = BT;
    if (head) {
        a->lnf = p; p += BT * C;
        a->lnf_mean = p; p += BTl;
        a->lnf_rstd = p; p += BTl;
        a->probs = p; p += BT * V;
        a->losses = p; p += BT;
    }
    gpt_bind_scratch(a, head, nmoe ? ecc : 0);
}

/* The scratch's views (a->scratch, gpt_scratch_bytes): temporaries of one
 * unit's pass, reused by every block; head: this stage computes the loss;
 * ecc: a MoE block's expert rows (E x capacity x C), 0 without experts. */
static void gpt_bind_scratch(zs_acts *a, int head, size_t ecc)
{
    const zs_model_config *c = &a->m->cfg;
    size_t B = (size_t)a->b, T = zs_decoder_seq_rank(c), C = (size_t)c->n_embd, P = (size_t)gpt_tp(c);
    size_t NH = (size_t)c->n_head / P, V = (size_t)c->vocab / P, BT = B * T, Cl = C / P;
    size_t BTl = B * gpt_seq_local(c);
    float *s = a->scratch;
    a->s_tmp = s; s += BT * C;
    a->s_dres = s; s += BT * C;
    a->s_datty = s; s += BT * Cl;
    a->s_dqkv = s; s += 3 * BT * Cl;
    size_t dfch = 4 * BT * Cl > 4 * (ecc / P) ? 4 * BT * Cl : 4 * (ecc / P);
    a->s_dfch = s; s += dfch;
    a->s_dfch_gelu = s; s += dfch;
    a->s_ulysses = NULL;
    if (zs_model_cp_ulysses(c)) { /* the kernel's preatt, datt; the all-to-alls' buffers */
        a->s_preatt = s; s += gpt_att_floats(c, B);
        a->s_datt = s; s += gpt_att_floats(c, B);
        a->s_ulysses = s; s += zs_ulysses_scratch_floats(c, B);
    } else if (zs_model_cp_size(c) > 1) { /* the ring's messages: keys and values, their gradients */
        a->s_preatt = a->s_datt = s;
        s += gpt_att_scratch_floats(c, B);
    } else {
        a->s_preatt = s; s += B * NH * T * T;
        a->s_datt = s; s += B * NH * T * T;
    }
    if (head) {
        a->s_logits = s;
        s += BT * V;
    }
    if (P > 1 || zs_decoder_exact(c)) {
        a->s_rowmax = s; s += BT;
        a->s_sums = s; s += 2 * BT;
    }
    if (zs_decoder_exact(c)) {
        a->s_xtmp = s; s += gpt_exact_tmp_floats(c, BT);
        a->s_xmax = s; s += BT;
    }
    if (gpt_sp(c)) {
        a->s_perm = s; s += BT * C;
        a->s_dfull = s; s += BT * C;
        a->s_loc = s; s += BTl * C;
    }
    if (gpt_n_moe(c)) {
        a->s_me1 = s; s += ecc;
        a->s_me2 = s; s += ecc;
        a->s_gsrc = s; s += gpt_home_floats(c);
        a->s_grecv = s; s += gpt_recv_floats(c);
        a->s_gl = s;
    }
}

/* A LayerNorm whose output feeds a column-parallel linear: with sequence
 * parallelism over this rank's positions, then all-gathered (Megatron's g
 * of Korthikanti et al.); else over all of them. */
static void gpt_ln_in(zs_model *m, zs_backend_t be, zs_acts *a, float *out, float *mean,
                      float *rstd, const float *inp, const float *w, const float *bias, int B,
                      int unit)
{
    const zs_model_config *c = &m->cfg;
    int C = c->n_embd;
    if (!gpt_sp(c)) {
        zs_backend_layernorm_forward(be, out, mean, rstd, inp, w, bias,
                                     B * (int)zs_decoder_seq_rank(c), C);
        return;
    }
    zs_backend_layernorm_forward(be, a->s_loc, mean, rstd, inp, w, bias,
                                 B * (int)gpt_seq_local(c), C);
    zs_decoder_sp_gather(m, be, out, a->s_loc, a->s_perm, B, unit);
}

/* A row-parallel linear's output summed over the group (Megatron's g):
 * inp (BT, Kl) times w (C, Kl) transposed, plus the bias once; with
 * sequence parallelism reduce-scattered to this rank's positions. Plain:
 * the bias added on TP rank 0 before the sum; with exact sums of slices,
 * the slices' exact sum, then the bias on every rank after it. Returns
 * where the sum is (a->s_tmp, or a->s_loc). */
static const float *gpt_row_linear(zs_model *m, zs_backend_t be, zs_acts *a, const float *inp,
                                   const float *w, const float *bias, int B, int Kl, int unit)
{
    const zs_model_config *c = &m->cfg;
    int C = c->n_embd, BT = B * (int)zs_decoder_seq_rank(c);
    if (!zs_decoder_exact(c)) {
        int bias_here = gpt_tp(c) == 1 || c->tp_rank == 0;
        zs_linear_forward(be, a->s_tmp, inp, w, bias_here ? bias : NULL, BT, Kl, C);
        return zs_decoder_row_sum(m, be, a, a->s_tmp, B, unit);
    }
    zs_decoder_exact_gemm(m, be, a, a->s_tmp, 1, BT, C, Kl * gpt_tp(c), 1, inp, Kl, w, Kl, unit);
    zs_decoder_row_sum(m, be, a, a->s_tmp, B, unit);
    float *sum = gpt_sp(c) ? a->s_loc : a->s_tmp;
    zs_backend_add_bias(be, sum, bias, B * (int)gpt_seq_local(c), C);
    return sum;
}

/* A column-parallel linear's backward: its parameters' gradients added,
 * and dinp (BT, C, zeroed by the caller) this rank's part of the input's
 * gradient, which gpt_ln_in_backward sums over the group: dout (BT, OCl)
 * times w (OCl, C), whose OCl is nseg segments (a QKV's q, k, v) of the
 * whole model's OC / T; with exact sums of slices, as an exact sum. */
static void gpt_col_backward(zs_model *m, zs_backend_t be, zs_acts *a, float *dinp, float *dw,
                             float *db, const float *dout, const float *inp, const float *w,
                             int BT, int OCl, int nseg, int unit)
{
    const zs_model_config *c = &m->cfg;
    int C = c->n_embd;
    if (!zs_decoder_exact(c)) {
        zs_linear_backward(be, dinp, dw, db, dout, inp, w, BT, C, OCl);
        return;
    }
    zs_linear_backward(be, NULL, dw, db, dout, inp, w, BT, C, OCl);
    zs_decoder_exact_gemm(m, be, a, dinp, 0, BT, C, OCl * gpt_tp(c), nseg, dout, OCl, w, C, unit);
}

/* ---- mixture of experts ------------------------------------------------------ */

static void gpt_ln_in_backward(zs_model *m, zs_backend_t be, zs_acts *a, float *dres,
                               float *dw, float *db, float *dfull, const float *inp,
                               const float *w, const float *mean, const float *rstd, int B,
                               int unit);

/* The experts' MLPs over their buffers: in (Ep sources, E/Ep experts, Cap,
 * C) (without expert parallelism: (E, Cap, C)), one linear per source and
 * expert, so that each source's rows go through the arithmetic they get
 * without expert parallelism. With tensor parallelism (P ranks) each
 * expert is split as the dense MLP is: fc column-parallel (this rank's
 * Fl = 4C/P of its columns), proj row-parallel, so out holds this rank's
 * part of each output row, its bias added on TP rank 0 alone. */
static void gpt_experts_forward(zs_model *m, zs_backend_t be, int l, float *const *P, zs_acts *a,
                                float *out, int cap)
{
    const zs_model_config *c = &m->cfg;
    int C = c->n_embd, Ep = c->moe_ep > 1 ? c->moe_ep : 1, El = gpt_local_experts(c);
    int Fl = 4 * C / gpt_tp(c), bias_here = gpt_tp(c) == 1 || c->tp_rank == 0;
    size_t rc = (size_t)cap * C, rf = (size_t)cap * Fl, FC = (size_t)Fl * C;
    for (int q = 0; q < Ep; q++)
        for (int j = 0; j < El; j++) {
            size_t blkrow = (size_t)q * El + j;
            const float *x = a->m_xin[l] + blkrow * rc;
            float *h = a->m_fch[l] + blkrow * rf, *g = a->m_gelu[l] + blkrow * rf;
            zs_linear_forward(be, h, x, P[blk(c, l, M_FCW)] + (size_t)j * FC,
                              P[blk(c, l, M_FCB)] + (size_t)j * Fl, cap, C, Fl);
            zs_backend_gelu_forward(be, g, h, rf);
            zs_linear_forward(be, out + blkrow * rc, g, P[blk(c, l, M_FCPW)] + (size_t)j * FC,
                              bias_here ? P[blk(c, l, M_FCPB)] + (size_t)j * C : NULL, cap, Fl,
                              C);
        }
}

/* dout (Ep, E/Ep, Cap, C) -> din (same), parameter gradients added; with
 * tensor parallelism din is this rank's part of the sum over the group (a
 * column-parallel linear's input gradient). */
static void gpt_experts_backward(zs_model *m, zs_backend_t be, int l, float *const *P,
                                 float *const *G, zs_acts *a, float *din, const float *dout,
                                 int cap)
{
    const zs_model_config *c = &m->cfg;
    int C = c->n_embd, Ep = c->moe_ep > 1 ? c->moe_ep : 1, El = gpt_local_experts(c);
    int Fl = 4 * C / gpt_tp(c);
    size_t rc = (size_t)cap * C, rf = (size_t)cap * Fl, FC = (size_t)Fl * C;
    int home = gpt_home_floats(c) > 0;
    /* with moe_ep_home, source q's gradients of this rank's experts go to
     * its chunk of s_gsrc, laid out as the stacked entries: fc.w (El Fl C),
     * fc.b (El Fl), proj.w (El C Fl), proj.b (El C) */
    size_t chunk = (size_t)El * gpt_expert_floats(c);
    zs_backend_memset0(be, din, (size_t)Ep * El * rc * 4);
    if (home)
        zs_backend_memset0(be, a->s_gsrc, (size_t)Ep * chunk * 4);
    for (int q = 0; q < Ep; q++) {
        float *gfw = G[blk(c, l, M_FCW)], *gfb = G[blk(c, l, M_FCB)];
        float *gpw = G[blk(c, l, M_FCPW)], *gpb = G[blk(c, l, M_FCPB)];
        if (home) {
            gfw = a->s_gsrc + (size_t)q * chunk;
            gfb = gfw + (size_t)El * FC;
            gpw = gfb + (size_t)El * Fl;
            gpb = gpw + (size_t)El * FC;
        }
        for (int j = 0; j < El; j++) {
            size_t blkrow = (size_t)q * El + j;
            float *dg = a->s_dfch_gelu, *dh = a->s_dfch;
            zs_backend_memset0(be, dg, rf * 4);
            zs_linear_backward(be, dg, gpw + (size_t)j * FC, gpb + (size_t)j * C,
                               dout + blkrow * rc, a->m_gelu[l] + blkrow * rf,
                               P[blk(c, l, M_FCPW)] + (size_t)j * FC, cap, Fl, C);
            zs_backend_memset0(be, dh, rf * 4);
            zs_backend_gelu_backward(be, dh, a->m_fch[l] + blkrow * rf, dg, rf);
            zs_linear_backward(be, din + blkrow * rc, gfw + (size_t)j * FC,
                               gfb + (size_t)j * Fl, dh, a->m_xin[l] + blkrow * rc,
                               P[blk(c, l, M_FCW)] + (size_t)j * FC, cap, C, Fl);
        }
    }
    if (!home)
        return;
    float *dst[4] = {G[blk(c, l, M_FCW)], G[blk(c, l, M_FCB)], G[blk(c, l, M_FCPW)],
                     G[blk(c, l, M_FCPB)]};
    const size_t part[4] = {(size_t)El * FC, (size_t)El * Fl, (size_t)El * FC, (size_t)El * C};
    zs_moe_grads_home(m, be, a, l, dst, part, 4);
}

/* MoE block l's MLP: res3 = res2 + combine(experts(dispatch(ln2))). With
 * tensor parallelism every rank of the group routes the same tokens (ln2
 * is whole on each) the same way, combines its part of the experts'
 * outputs, and the combined rows are summed over the group as the dense
 * MLP's are (Megatron's g: all-reduce, or with sequence parallelism
 * reduce-scatter to this rank's positions). */
static void gpt_moe_forward(zs_model *m, zs_backend_t be, int l, float *const *P, zs_acts *a,
                            int B, int u)
{
    const zs_model_config *c = &m->cfg;
    int BT = B * c->seq_len, BTl = B * (int)gpt_seq_local(c), C = c->n_embd, cap = a->moe->cap;
    size_t ecc = (size_t)c->moe_experts * cap * C;
    zs_moe_route_block(m, be, a, l, P[blk(c, l, M_GATEW)], BT, 1);
    zs_moe_keep_stats(a, l);
    int ep = c->moe_ep > 1;
    zs_moe_dispatch_forward(be, ep ? a->s_me1 : a->m_xin[l], a->ln2[l], a->moe);
    if (ep)
        zs_moe_alltoall(m, be, a->m_xin[l], a->s_me1, ecc, u);
    gpt_experts_forward(m, be, l, P, a, ep ? a->s_me1 : a->m_out[l], cap);
    if (ep)
        zs_moe_alltoall(m, be, a->m_out[l], a->s_me1, ecc, u);
    zs_moe_combine_forward(be, a->s_tmp, a->m_out[l], a->moe);
    const float *sum = zs_decoder_row_sum(m, be, a, a->s_tmp, B, u);
    zs_backend_residual_forward(be, a->res3[l], a->res2[l], sum, (size_t)BTl * C);
}

/* Its backward: dres holds d res3; adds the gradient through ln2 into it.
 * With tensor parallelism the combine weights' gradients (a dot product
 * with the experts' outputs, of which each rank holds a part) are summed
 * over the group, so that the router, replicated, gets the same gradient
 * on every rank; the router's input gradient is added on TP rank 0 alone,
 * since the experts' (a part on each rank) are summed over the group
 * after it. */
static void gpt_moe_backward(zs_model *m, zs_backend_t be, int l, float *const *P,
                             float *const *G, zs_acts *a, float *dres, int B, int u, float dloss)
{
    const zs_model_config *c = &m->cfg;
    int BT = B * c->seq_len, C = c->n_embd, E = c->moe_experts, cap = a->moe->cap;
    size_t ecc = (size_t)E * cap * C;
    int ep = c->moe_ep > 1, TP = gpt_tp(c), r = TP > 1 ? c->tp_rank : 0;
    zs_moe_route_block(m, be, a, l, P[blk(c, l, M_GATEW)], BT, 0);
    /* combine: d expert outputs (in s_me1) and d combine weights (host) */
    const float *dy = zs_decoder_dout_full(m, be, a, dres, B, u);
    zs_moe_combine_backward(be, a->s_me1, dy, a->m_out[l], a->moe);
    if (TP > 1) { /* the combine weights' gradients over the group, through s_gl */
        size_t kn = (size_t)a->moe->k * (size_t)BT;
        zs_backend_copy_h2d(be, a->s_gl, a->moe->dweight, kn * 4);
        zs_decoder_tp_sum(m, a->s_gl, kn, u);
        zs_backend_copy_d2h(be, a->moe->dweight, a->s_gl, kn * 4);
    }
    if (ep)
        zs_moe_alltoall(m, be, a->s_me2, a->s_me1, ecc, u);
    /* experts: d their inputs into s_me1 (s_me2 with expert parallelism) */
    float *dout = ep ? a->s_me2 : a->s_me1, *din = ep ? a->s_me1 : a->s_me2;
    gpt_experts_backward(m, be, l, P, G, a, din, dout, cap);
    if (ep)
        zs_moe_alltoall(m, be, a->s_me2, a->s_me1, ecc, u);
    zs_backend_memset0(be, a->s_tmp, (size_t)BT * C * 4);
    zs_moe_dispatch_backward(be, a->s_tmp, a->s_me2, a->moe);
    /* the router: through the combine weights, the softmax and l_aux */
    zs_moe_gate_backward(a->moe->hbuf, a->moe, (float)(c->moe_aux_coeff * dloss));
    zs_backend_copy_h2d(be, a->s_gl, a->moe->hbuf, (size_t)BT * E * 4);
    zs_linear_backward(be, r == 0 ? a->s_tmp : NULL, G[blk(c, l, M_GATEW)], NULL, a->s_gl,
                       a->ln2[l], P[blk(c, l, M_GATEW)], BT, C, E);
    gpt_ln_in_backward(m, be, a, dres, G[blk(c, l, B_LN2W)], G[blk(c, l, B_LN2B)], a->s_tmp,
                       a->res2[l], P[blk(c, l, B_LN2W)], a->ln2_mean[l], a->ln2_rstd[l], B, u);
}

/* The embeddings of this rank's positions: all T of each sample, or with
 * context parallelism its two chunks (the tokens already this rank's,
 * zs_model_cp_local_tokens), each at its original positions. wv: the
 * vocab-parallel rows [first, first + V) (V < vocab), else the whole
 * table; wpe NULL: no positions (a vocab-parallel rank but the first). */
static void gpt_embed(const zs_model_config *c, zs_backend_t be, float *out,
                      const int32_t *tokens, const float *wte, const float *wpe, int first,
                      int V, int B)
{
    int C = c->n_embd, cp = zs_model_cp_size(c), T = (int)zs_decoder_seq_rank(c), S = T / 2;
    int vocab_parallel = V < c->vocab;
    for (int b = 0; b < (cp > 1 ? B : 1); b++)
        for (int k = 0; k < (cp > 1 ? 2 : 1); k++) {
            int n = cp > 1 ? 1 : B, t = cp > 1 ? S : T;
            size_t row = cp > 1 ? (size_t)b * T + (size_t)k * S : 0;
            const float *pos = wpe && cp > 1
                                   ? wpe + (size_t)zs_model_cp_chunk(c, c->cp_rank, k) * S * C
                                   : wpe;
            if (vocab_parallel)
                zs_backend_vocab_embedding_forward(be, out + row * C, tokens + row, wte, first, V,
                                                   pos, n, t, C);
            else
                zs_backend_embedding_forward(be, out + row * C, tokens + row, wte, pos, n, t, C);
        }
}

/* Its backward: dwte (or its vocab-parallel rows) and dwpe accumulate. */
static void gpt_embed_backward(const zs_model_config *c, zs_backend_t be, float *dwte,
                               float *dwpe, const float *dout, const int32_t *tokens, int first,
                               int V, int B)
{
    int C = c->n_embd, cp = zs_model_cp_size(c), T = (int)zs_decoder_seq_rank(c), S = T / 2;
    for (int b = 0; b < (cp > 1 ? B : 1); b++)
        for (int k = 0; k < (cp > 1 ? 2 : 1); k++) {
            int n = cp > 1 ? 1 : B, t = cp > 1 ? S : T;
            size_t row = cp > 1 ? (size_t)b * T + (size_t)k * S : 0;
            float *pos = cp > 1 ? dwpe + (size_t)zs_model_cp_chunk(c, c->cp_rank, k) * S * C
                                : dwpe;
            if (V < c->vocab)
                zs_backend_vocab_embedding_backward(be, dwte, pos, dout + row * C, tokens + row,
                                                    first, V, n, t, C);
            else
                zs_backend_embedding_backward(be, dwte, pos, dout + row * C, tokens + row, n, t,
                                              C);
        }
}

static void gpt_forward_unit(zs_model *m, zs_backend_t be, int u, float *const *P, zs_acts *a,
                             const zs_batch *batch)
{
    const zs_model_config *c = &m->cfg;
    int B = batch->b, T = (int)zs_decoder_seq_rank(c), C = c->n_embd, L = c->n_layer;
    int TP = gpt_tp(c), r = TP > 1 ? c->tp_rank : 0;
    int NH = c->n_head / TP, V = c->vocab / TP, Cl = C / TP;
    int BT = B * T, BTl = B * (int)gpt_seq_local(c);
    /* the row-parallel biases are added once: on TP rank 0, before the sum */
    int bias_here = r == 0;
    if (u == 0) {
        if (TP == 1) {
            gpt_embed(c, be, a->encoded, batch->tokens, P[0], P[1], 0, V, B);
            return;
        }
        /* vocab-parallel: each rank its rows (zeros elsewhere), positions on
         * rank 0, then the sum over the group */
        float *e = gpt_sp(c) ? a->s_tmp : a->encoded;
        gpt_embed(c, be, e, batch->tokens, P[0], bias_here ? P[1] : NULL, r * V, V, B);
        const float *sum = zs_decoder_row_sum(m, be, a, e, B, u);
        if (sum != a->encoded)
            zs_backend_copy_d2d(be, a->encoded, sum, (size_t)BTl * C * 4);
        return;
    }
    if (u <= L) {
        int l = u - 1;
        zs_decoder_ckpt_gather(m, be, a, l, u);
        const float *inp = zs_decoder_block_input(a, l);
        gpt_ln_in(m, be, a, a->ln1[l], a->ln1_mean[l], a->ln1_rstd[l], inp, P[blk(c, l, B_LN1W)],
                  P[blk(c, l, B_LN1B)], B, u);
        /* f: identity; QKV column-parallel (this rank's heads) */
        if (zs_model_cp_ulysses(c)) { /* Ulysses: qkv[l] keeps q, k, v by heads */
            zs_linear_forward(be, a->s_dqkv, a->ln1[l], P[blk(c, l, B_QKVW)],
                              P[blk(c, l, B_QKVB)], BT, C, 3 * Cl);
            zs_ulysses_attention_forward(m, be, a->s_ulysses, a->s_preatt, a->atty[l], a->att[l],
                                         a->qkv[l], a->s_dqkv, B, u);
        } else {
            zs_linear_forward(be, a->qkv[l], a->ln1[l], P[blk(c, l, B_QKVW)],
                              P[blk(c, l, B_QKVB)], BT, C, 3 * Cl);
            if (zs_model_cp_size(c) > 1) /* ring attention: att[l] holds its statistics */
                zs_ring_attention_forward(m, be, a->s_preatt, a->atty[l], a->att[l], a->qkv[l],
                                          B, u);
            else
                zs_backend_attention_forward(be, a->atty[l], a->s_preatt, a->att[l], a->qkv[l],
                                             B, T, Cl, NH);
        }
        /* row-parallel output projection, then g: the sum */
        const float *att_out = gpt_row_linear(m, be, a, a->atty[l], P[blk(c, l, B_PROJW)],
                                              P[blk(c, l, B_PROJB)], B, Cl, u);
        zs_backend_residual_forward(be, a->res2[l], inp, att_out, (size_t)BTl * C);
        gpt_ln_in(m, be, a, a->ln2[l], a->ln2_mean[l], a->ln2_rstd[l], a->res2[l],
                  P[blk(c, l, B_LN2W)], P[blk(c, l, B_LN2B)], B, u);
        if (zs_model_block_is_moe(c, l)) {
            gpt_moe_forward(m, be, l, P, a, B, u);
        } else {
            zs_linear_forward(be, a->fch[l], a->ln2[l], P[blk(c, l, B_FCW)], P[blk(c, l, B_FCB)],
                              BT, C, 4 * Cl);
            zs_backend_gelu_forward(be, a->fch_gelu[l], a->fch[l], (size_t)BT * 4 * Cl);
            const float *mlp_out = gpt_row_linear(m, be, a, a->fch_gelu[l], P[blk(c, l, B_FCPW)],
                                                  P[blk(c, l, B_FCPB)], B, 4 * Cl, u);
            zs_backend_residual_forward(be, a->res3[l], a->res2[l], mlp_out, (size_t)BTl * C);
        }
        zs_decoder_ckpt_keep(be, a, l);
        return;
    }
    /* the objective's aux term: of each MoE block's latest forward, summed
     * here (a recomputed block's forward rewrites its own l_aux; the head's
     * forward is never recomputed) */
    zs_moe_sum_aux(a);
    int lnw = zs_moe_block_first_entry(c, L);
    gpt_ln_in(m, be, a, a->lnf, a->lnf_mean, a->lnf_rstd, a->res3[L - 1], P[lnw], P[lnw + 1], B,
              u);
    zs_linear_forward(be, a->s_logits, a->lnf, P[0], NULL, BT, C, V);
    zs_decoder_head_loss(m, be, a, batch->targets, BT, V, r, u);
}

/* The LayerNorm's backward over this rank's positions (B, Tl, C) with
 * exact sums of slices: the positions cut into the same slices on every
 * layout (of T / S positions of each sequence), each slice's parameter
 * gradients summed apart, rounded per element to the grid of its largest
 * slice value over the group and added (exact), summed over the group
 * with sequence parallelism (exact), then added into dw and db. */
static void gpt_ln_backward_exact(zs_model *m, zs_backend_t be, zs_acts *a, float *dres,
                                  float *dw, float *db, const float *dout, const float *inp,
                                  const float *w, const float *mean, const float *rstd, int B,
                                  int unit)
{
    const zs_model_config *c = &m->cfg;
    int C = c->n_embd, T = c->seq_len, P = gpt_sp(c) ? gpt_tp(c) : 1, Tl = T / P;
    int S = zs_decoder_exact_slices(c, T, P);
    int per = S / P, ts = T / S;
    /* s_xtmp: per slices' (dw, db), their maxima, their sum (2C each) */
    float *part = a->s_xtmp, *mx = part + (size_t)per * 2 * C, *sum = mx + 2 * C;
    zs_backend_memset0(be, part, (size_t)per * 2 * C * 4);
    zs_backend_memset0(be, mx, (size_t)2 * C * 4);
    for (int q = 0; q < per; q++) {
        float *pw = part + (size_t)q * 2 * C;
        for (int b = 0; b < B; b++) {
            size_t row = (size_t)b * Tl + (size_t)q * ts;
            zs_backend_layernorm_backward(be, dres + row * C, pw, pw + C, dout + row * C,
                                          inp + row * C, w, mean + row, rstd + row, ts, C);
        }
        zs_backend_rows_absmax(be, mx, pw, 2 * C, 1);
    }
    if (P > 1 && m->tp && zs_comm_allreduce_max_f32(m->tp, mx, (size_t)2 * C, unit))
        m->tp_failed = 1;
    zs_backend_memset0(be, sum, (size_t)2 * C * 4);
    for (int q = 0; q < per; q++)
        zs_backend_grid_add(be, sum, part + (size_t)q * 2 * C, mx, 2 * C, 1, S);
    if (P > 1) {
        zs_decoder_tp_sum(m, sum, (size_t)C, unit);
        zs_decoder_tp_sum(m, sum + C, (size_t)C, unit);
    }
    zs_backend_axpy(be, dw, 1.0f, sum, (size_t)C);
    zs_backend_axpy(be, db, 1.0f, sum + C, (size_t)C);
}

/* The backward of gpt_ln_in: dfull (B, T, C) is the gradient of the
 * gathered output, partial over the group (a column-parallel linear's
 * input gradient). It is summed (all-reduce), or with sequence parallelism
 * reduce-scattered to this rank's positions; then the LayerNorm's backward
 * adds into dres. With sequence parallelism the LayerNorm's parameter
 * gradients cover this rank's positions only: summed over the group. */
static void gpt_ln_in_backward(zs_model *m, zs_backend_t be, zs_acts *a, float *dres,
                               float *dw, float *db, float *dfull, const float *inp,
                               const float *w, const float *mean, const float *rstd, int B,
                               int unit)
{
    const zs_model_config *c = &m->cfg;
    int C = c->n_embd;
    const float *d = zs_decoder_row_sum(m, be, a, dfull, B, unit);
    if (zs_decoder_exact(c)) {
        gpt_ln_backward_exact(m, be, a, dres, dw, db, d, inp, w, mean, rstd, B, unit);
        return;
    }
    zs_backend_layernorm_backward(be, dres, dw, db, d, inp, w, mean, rstd,
                                  B * (int)gpt_seq_local(c), C);
    if (gpt_sp(c)) {
        zs_decoder_tp_sum(m, dw, (size_t)C, unit);
        zs_decoder_tp_sum(m, db, (size_t)C, unit);
    }
}

static void gpt_backward_unit(zs_model *m, zs_backend_t be, int u, float *const *P,
                              float *const *G, zs_acts *a, const zs_batch *batch, float dloss)
{
    const zs_model_config *c = &m->cfg;
    int B = batch->b, T = (int)zs_decoder_seq_rank(c), C = c->n_embd, L = c->n_layer;
    int TP = gpt_tp(c), r = TP > 1 ? c->tp_rank : 0;
    int NH = c->n_head / TP, V = c->vocab / TP, Cl = C / TP;
    int BT = B * T, BTl = B * (int)gpt_seq_local(c);
    size_t btc = (size_t)BT * C, btcl = (size_t)BT * Cl;
    if (u == L + 1) {
        int lnw = zs_moe_block_first_entry(c, L);
        /* the objective is dloss * mean over BT positions of the loss */
        if (TP == 1)
            zs_backend_softmax_xent_backward(be, a->s_logits, a->probs, batch->targets,
                                             dloss / (float)BT, BT, V);
        else
            zs_backend_xent_vocab_backward(be, a->s_logits, a->probs, batch->targets, r * V,
                                           dloss / (float)BT, BT, V);
        zs_backend_memset0(be, a->s_tmp, btc * 4);
        gpt_col_backward(m, be, a, a->s_tmp, G[0], NULL, a->s_logits, a->lnf, P[0], BT, V, 1, u);
        /* the head is column-parallel in the vocabulary: its input gradient
         * is summed over the group */
        zs_backend_memset0(be, a->s_dres, (size_t)BTl * C * 4);
        gpt_ln_in_backward(m, be, a, a->s_dres, G[lnw], G[lnw + 1], a->s_tmp, a->res3[L - 1],
                           P[lnw], a->lnf_mean, a->lnf_rstd, B, u);
        return;
    }
    if (u >= 1) {
        int l = u - 1;
        const float *inp = zs_decoder_block_input(a, l);
        float *dres = a->s_dres; /* d(res3) on entry, d(inp) on exit */
        /* MLP branch: res3 = res2 + proj(gelu(fc(ln2(res2)))); g's backward
         * is the identity, every rank holds all of dres */
        const float *dout;
        if (zs_model_block_is_moe(c, l)) {
            gpt_moe_backward(m, be, l, P, G, a, dres, B, u, dloss);
        } else {
            dout = zs_decoder_dout_full(m, be, a, dres, B, u);
            zs_backend_memset0(be, a->s_dfch_gelu, btcl * 16);
            zs_linear_backward(be, a->s_dfch_gelu, G[blk(c, l, B_FCPW)], G[blk(c, l, B_FCPB)], dout,
                               a->fch_gelu[l], P[blk(c, l, B_FCPW)], BT, 4 * Cl, C);
            zs_backend_memset0(be, a->s_dfch, btcl * 16);
            zs_backend_gelu_backward(be, a->s_dfch, a->fch[l], a->s_dfch_gelu, btcl * 4);
            zs_backend_memset0(be, a->s_tmp, btc * 4);
            gpt_col_backward(m, be, a, a->s_tmp, G[blk(c, l, B_FCW)], G[blk(c, l, B_FCB)],
                             a->s_dfch, a->ln2[l], P[blk(c, l, B_FCW)], BT, 4 * Cl, 1, u);
            gpt_ln_in_backward(m, be, a, dres, G[blk(c, l, B_LN2W)], G[blk(c, l, B_LN2B)], a->s_tmp,
                               a->res2[l], P[blk(c, l, B_LN2W)], a->ln2_mean[l], a->ln2_rstd[l], B, u);
        }
        /* attention branch: res2 = inp + proj(attn(qkv(ln1(inp)))) */
        dout = zs_decoder_dout_full(m, be, a, dres, B, u);
        zs_backend_memset0(be, a->s_datty, btcl * 4);
        zs_linear_backward(be, a->s_datty, G[blk(c, l, B_PROJW)], G[blk(c, l, B_PROJB)], dout,
                           a->atty[l], P[blk(c, l, B_PROJW)], BT, Cl, C);
        zs_backend_memset0(be, a->s_dqkv, btcl * 12);
        if (zs_model_cp_ulysses(c))
            zs_ulysses_attention_backward(m, be, a->s_ulysses, a->s_preatt, a->s_datt, a->s_dqkv,
                                          a->s_datty, a->att[l], a->qkv[l], B, u);
        else if (zs_model_cp_size(c) > 1)
            zs_ring_attention_backward(m, be, a->s_preatt, a->s_dqkv, a->s_datty, a->atty[l],
                                       a->att[l], a->qkv[l], B, u);
        else
            zs_backend_attention_backward(be, a->s_dqkv, a->s_preatt, a->s_datt, a->s_datty,
                                          a->qkv[l], a->att[l], B, T, Cl, NH);
        zs_backend_memset0(be, a->s_tmp, btc * 4);
        gpt_col_backward(m, be, a, a->s_tmp, G[blk(c, l, B_QKVW)], G[blk(c, l, B_QKVB)],
                         a->s_dqkv, a->ln1[l], P[blk(c, l, B_QKVW)], BT, 3 * Cl, 3, u);
        gpt_ln_in_backward(m, be, a, dres, G[blk(c, l, B_LN1W)], G[blk(c, l, B_LN1B)], a->s_tmp, inp,
                           P[blk(c, l, B_LN1W)], a->ln1_mean[l], a->ln1_rstd[l], B, u);
        return;
    }
    const float *dout = zs_decoder_dout_full(m, be, a, a->s_dres, B, u);
    gpt_embed_backward(c, be, G[0], G[1], dout, batch->tokens, r * V, V, B);
}

const zs_model_ops zs_gpt_ops = {
    .build_layout = gpt_build_layout,
    .init_range = gpt_init_range,
    .activation_bytes = gpt_activation_bytes,
    .scratch_bytes = gpt_scratch_bytes,
    .checkpoint_bytes = zs_decoder_checkpoint_bytes,
    .shared_activation_bytes = gpt_shared_activation_bytes,
    .bind_acts = gpt_bind_acts,
    .forward_unit = gpt_forward_unit,
    .backward_unit = gpt_backward_unit,
    .tp_global = gpt_tp_global,
    .tp_replicated = gpt_tp_replicated,
};
