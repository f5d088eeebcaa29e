/* zerosim — the Llama family's decoder (Llama 2/3, Mistral, Qwen2, Mixtral):
 * pre-RMSNorm blocks without biases (Qwen2: q, k and v biases), rotary
 * position embeddings, grouped-query attention, a SwiGLU MLP (or, with
 * moe_experts, E SwiGLU experts behind a top-k router), an output head of
 * its own (tied to the embedding with tie_embeddings).
 *
 * This file holds the family's shapes: its parameter layout under Hugging
 * Face's names, the parameter count, the initialisation, the tensor-
 * parallel split of each tensor and the activation closed form; and the
 * forward and backward of blocks (the order of calls of
 * docs/numerics.md, "In a block"), with tensor and sequence parallelism;
 * a Mixtral block's experts are llama_moe.c's (expert and tensor
 * parallelism as the GPT's experts). The forward makes the
 * collectives the planner counts as the GPT makes them (zs_predict_tp,
 * src/predict/predict.c), through the GPT's helpers (src/model/decoder.c):
 * the vocab-parallel embedding's all-reduce, Megatron's f and g around
 * attention and the MLP (two all-reduces of BT*C forward, two backward per
 * block), the head's backward and the vocab-parallel loss's maxima and
 * sums; with sequence parallelism all-gather and reduce-scatter pairs and
 * the RMSNorm weights' gradients all-reduced (C per norm); with replicated
 * key/value heads one all-reduce per block backward of every head's k and
 * v gradients (zs_llama_kv_grad_floats: a rank adds its share into its
 * head's slot, the sum over the group completes each head's).
 *
 * Units: 0 = the token embedding, 1..L = the blocks, L+1 = the final
 * RMSNorm and the head (with softmax cross-entropy).
 *
 * Dimensions: B sequences of T positions (BT = B*T), hidden C, NH query
 * heads of D = C/NH, KV key/value heads, intermediate F, vocabulary V;
 * with tensor parallelism over P ranks a rank holds NHl = NH/P query heads,
 * KVl key/value heads (KV/P, or 1 when P > KV: below), Fl = F/P of the MLP
 * and V/P of the vocabulary; with sequence parallelism the residual stream
 * holds BTl = B*T/P positions (BTl = BT without).
 *
 * Activations saved for backward, in floats, in the order a block's views
 * are laid out (the forward binds exactly these):
 *   encoded (the embedding's output)           BTl*C
 *   per block:
 *     ln1      input RMSNorm's output            BT*C   (gathered with SP)
 *     ln1_rstd its reciprocal RMS                BTl
 *     q        queries after RoPE                BT*NHl*D
 *     k        keys after RoPE                   BT*KVl*D
 *     v        values                            BT*KVl*D
 *     att      attention probabilities           B*NHl*T*T
 *     atty     attention output (o_proj's input) BT*NHl*D
 *     res2     residual after attention          BTl*C
 *     ln2      post-attention RMSNorm's output   BT*C
 *     ln2_rstd its reciprocal RMS                BTl
 *     gate     gate_proj's output (before SiLU)  BT*Fl
 *     up       up_proj's output                  BT*Fl
 *     swiglu   SiLU(gate) * up (down's input)    BT*Fl
 *     res3     the block's output                BTl*C
 *   a Mixtral block, in place of gate, up, swiglu: the router's
 *     probabilities BT*E, the experts' input E*Cap*C, their gate, up and
 *     SwiGLU E*Cap*Fl each, their output E*Cap*C (Cap the capacity)
 *   head: lnf BT*C, lnf_rstd BTl, probs BT*V/P, losses BT
 * q, k and v are one packed buffer (rows of (NHl + 2 KVl) D, the fused
 * QKV GEMM's output, q and k rotated in place), gate and up one (rows
 * [gate | up] of 2 Fl): the fused GEMMs run as one GEMM per weight entry
 * into the packed rows. Without tensor or sequence parallelism:
 *   4 * (2*BT*C + L*(4*BT*C + 2*BT + 2*BT*C + 2*BT*KV*D + B*NH*T*T + 3*BT*F)
 *        + BT*(V + 2)) bytes.
 * With activation checkpointing in segments of K blocks, K slots replace
 * the L blocks (block l uses slot l mod K) and the output of every
 * segment's last block but the final one is a checkpoint (BTl*C floats;
 * zs_decoder_checkpoint_bytes), as the GPT's.
 *
 * Scratch (category workspace): the rotary table T*D (cos and sin of
 * positions 0..T-1, zs_rope_table_fill, filled when the activations are
 * created); the backward's, one block at a time: tmp and dres
 * BT*C each, datty, dq BT*NHl*D each, dk, dv BT*KVl*D each, dgate, dup,
 * dswiglu BT*Fl each, preatt and datt B*NHl*T*T each, the logits BT*V/P on
 * the head's stage; with tensor parallelism the loss's row maxima and sums
 * 3*BT; with sequence parallelism perm, dfull (BT*C each) and loc (BTl*C);
 * a Mixtral model two (E,Cap,C) buffers, the router's logits BT*E, the
 * experts' inner gradients beyond the dense ones (3*(E*Cap*Fl - BT*Fl)
 * when positive) and with moe_ep_home the experts' gradients by source.
 *
 * Tensor parallelism (Megatron-LM): q_proj, k_proj, v_proj (and their
 * biases) column-parallel by heads, o_proj row-parallel; gate_proj and
 * up_proj column-parallel by rows of F, down_proj row-parallel; the
 * embedding and an untied lm_head vocab-parallel by rows; the RMSNorm
 * weights replicated; a Mixtral block's experts each split as the dense
 * MLP is (w1 and w3, gate and up, by rows of F; w2, down, by columns),
 * its router replicated. Key/value heads: split when KV divides by P (a rank
 * holds KV/P of them, those its NH/P query heads use); when P divides by KV
 * and P > KV, replicated: each rank holds the one key/value head its query
 * heads use (head r*KV/P), a copy on each of the P/KV ranks of its group
 * (vLLM's way; Megatron-LM requires KV % P == 0). Neither: refused.
 *
 * Context parallelism (--cp C, src/model/ring_attention.c, as the
 * GPT's): a rank holds T/C positions of each sequence, chunks i and
 * 2C - 1 - i of 2C, so every T above is T/C, the rotary table holds the
 * rows of those positions (not contiguous: zs_rope_table_fill twice, at
 * each chunk's first position) and the attention is the ring's: the keys
 * and values of this rank's KVl key/value heads (2·B·T/C·KVl·D floats a
 * message) go round the context group, each query head attending to its
 * key/value group; att keeps the ring's statistics (2·B·NHl·T/C) in place
 * of the probabilities and the scratch the ring's four messages in place
 * of preatt and datt.
 *
 * Initialisation (Hugging Face's LlamaPreTrainedModel): every linear and
 * the embedding N(0, 0.02) (no residual scaling), biases 0, RMSNorm weights
 * 1; element j of an entry drawn where the GPT draws it (its own stream
 * from the seed and the entry's index), so a shard draws what the tp = 1
 * model draws there.
 */
#include "model_impl.h"
#include "zerosim/comm.h"
#include "zerosim/error.h"
#include "zerosim/layers.h"
#include "zerosim/mem.h"

#include <stdio.h>
#include <stdlib.h>

/* A block's entry kinds, in layout order (the biases with qkv_bias only;
 * gate, up, down in a dense block, router and the stacked experts in a
 * Mixtral block). */
enum {
    LK_IN_NORM, LK_Q_W, LK_Q_B, LK_K_W, LK_K_B, LK_V_W, LK_V_B, LK_O_W, LK_POST_NORM,
    LK_GATE_W, LK_UP_W, LK_DOWN_W, LK_ROUTER, LK_X_GATE, LK_X_UP, LK_X_DOWN, LK_NKINDS
};

static const char *const llama_kind_names[LK_NKINDS] = {
    "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.q_proj.bias",
    "self_attn.k_proj.weight", "self_attn.k_proj.bias", "self_attn.v_proj.weight",
    "self_attn.v_proj.bias", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
    "block_sparse_moe.gate.weight", "block_sparse_moe.experts.w1.weight",
    "block_sparse_moe.experts.w3.weight", "block_sparse_moe.experts.w2.weight"};

static int llama_tp(const zs_model_config *c) { return c->tp > 1 ? c->tp : 1; }
static int llama_sp(const zs_model_config *c) { return c->tp > 1 && c->sequence_parallel; }
static int llama_kv(const zs_model_config *c) { return c->n_kv_head > 0 ? c->n_kv_head : c->n_head; }
static size_t llama_head_dim(const zs_model_config *c) { return (size_t)(c->n_embd / c->n_head); }

/* Key/value heads a rank holds: KV/P, or 1 when they are replicated. */
static size_t llama_kv_local(const zs_model_config *c)
{
    int P = llama_tp(c), KV = llama_kv(c);
    return KV % P == 0 ? (size_t)(KV / P) : 1;
}

/* Positions of a sequence on this rank: T, or T/C with context
 * parallelism (the rank's two chunks, src/model/ring_attention.c). */
static size_t llama_seq(const zs_model_config *c) { return zs_decoder_seq_rank(c); }

/* A block's saved attention floats: the probabilities B·NHl·T², or with
 * context parallelism the ring's statistics (a maximum and a sum per row
 * and query head, 2·B·NHl·T/C); and the backward's scratch for them
 * (preatt and datt, or the ring's four messages, zs_ring_kv_floats each). */
static size_t llama_att_floats(const zs_model_config *c, size_t B)
{
    size_t NHl = (size_t)c->n_head / (size_t)llama_tp(c), T = llama_seq(c);
    return zs_model_cp_size(c) > 1 ? 2 * B * NHl * T : B * NHl * T * T;
}

static size_t llama_att_scratch_floats(const zs_model_config *c, size_t B)
{
    return zs_model_cp_size(c) > 1 ? 4 * zs_ring_kv_floats(c, (int)B) : 2 * llama_att_floats(c, B);
}

/* Replicated key/value heads (tp > KV): the floats of every head's k and v
 * gradients (weights and biases), summed over the tensor-parallel group
 * in each block's backward; 0 when they are split. */
size_t zs_llama_kv_grad_floats(const zs_model_config *c)
{
    int P = c->tp > 1 ? c->tp : 1, KV = c->n_kv_head > 0 ? c->n_kv_head : c->n_head;
    if (P <= KV)
        return 0;
    size_t C = (size_t)c->n_embd, D = (size_t)(c->n_embd / c->n_head);
    return (size_t)KV * 2 * (D * C + (c->qkv_bias ? D : 0));
}

static int llama_n_moe(const zs_model_config *c) { return zs_decoder_stage_moe_blocks(c); }

static int llama_local_experts(const zs_model_config *c)
{
    return c->moe_ep > 1 ? c->moe_experts / c->moe_ep : c->moe_experts;
}

static int llama_moe_cap(const zs_model_config *c, int b)
{
    return zs_moe_capacity(b * c->seq_len, c->moe_experts, c->moe_top_k, c->moe_capacity_factor,
                           c->moe_min_capacity);
}

/* The kinds of block l's entries into k[]; their count. */
static int llama_block_kinds(const zs_model_config *c, int l, int *k)
{
    int n = 0;
    for (int x = LK_IN_NORM; x <= LK_POST_NORM; x++)
        if (c->qkv_bias || (x != LK_Q_B && x != LK_K_B && x != LK_V_B))
            k[n++] = x;
    int first = zs_model_block_is_moe(c, l) ? LK_ROUTER : LK_GATE_W;
    int last = zs_model_block_is_moe(c, l) ? LK_X_DOWN : LK_DOWN_W;
    for (int x = first; x <= last; x++)
        k[n++] = x;
    return n;
}

/* Entries of a dense block; a Mixtral block has one more. */
static int llama_dense_entries(const zs_model_config *c) { return 9 + 3 * (c->qkv_bias != 0); }

/* Entry index of block l's first entry (l = L: the final norm). */
static int llama_block_first(const zs_model_config *c, int l)
{
    int nmoe = c->moe_experts > 0 && c->moe_every > 0 ? l / c->moe_every : 0;
    return 1 + l * llama_dense_entries(c) + nmoe;
}

/* The block of entry i (-1 outside the blocks) and its kind in *kind. */
static int llama_entry_block(const zs_model_config *c, int i, int *kind)
{
    int L = c->n_layer;
    *kind = -1;
    if (i < 1 || i >= llama_block_first(c, L))
        return -1;
    int lo = 0, hi = L - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (llama_block_first(c, mid) <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    int k[LK_NKINDS];
    llama_block_kinds(c, lo, k);
    *kind = k[i - llama_block_first(c, lo)];
    return lo;
}

int zs_llama_entry_is_expert(const zs_model_config *c, int i)
{
    int k;
    return llama_entry_block(c, i, &k) >= 0 && k >= LK_X_GATE;
}

/* Elements of one entry of kind k on this rank. */
static size_t llama_kind_numel(const zs_model_config *c, int k)
{
    size_t C = (size_t)c->n_embd, D = llama_head_dim(c), P = (size_t)llama_tp(c);
    size_t Ql = (size_t)c->n_head / P * D, KVl = llama_kv_local(c) * D;
    size_t Fl = (size_t)c->ffn_hidden / P, El = (size_t)llama_local_experts(c);
    switch (k) {
    case LK_IN_NORM: case LK_POST_NORM: return C;
    case LK_Q_W: return Ql * C;
    case LK_Q_B: return Ql;
    case LK_K_W: case LK_V_W: return KVl * C;
    case LK_K_B: case LK_V_B: return KVl;
    case LK_O_W: return C * Ql;
    case LK_GATE_W: case LK_UP_W: case LK_DOWN_W: return Fl * C;
    case LK_ROUTER: return (size_t)c->moe_experts * C;
    default: return El * Fl * C; /* the stacked experts: (El, Fl, C) or (El, C, Fl) */
    }
}

static int llama_build_layout(const zs_model_config *c, zs_layout *lay)
{
    size_t C = (size_t)c->n_embd, V = (size_t)c->vocab, P = (size_t)llama_tp(c);
    char name[64];
    ZS_TRY(zs_layout_add(lay, "model.embed_tokens.weight", V / P * C, 0));
    for (int l = 0; l < c->n_layer; l++) {
        int k[LK_NKINDS], n = llama_block_kinds(c, l, k);
        for (int j = 0; j < n; j++) {
            snprintf(name, sizeof name, "model.layers.%d.%s", l, llama_kind_names[k[j]]);
            ZS_TRY(zs_layout_add(lay, name, llama_kind_numel(c, k[j]), l + 1));
        }
    }
    ZS_TRY(zs_layout_add(lay, "model.norm.weight", C, c->n_layer + 1));
    if (!c->tie_embeddings)
        ZS_TRY(zs_layout_add(lay, "lm_head.weight", V / P * C, c->n_layer + 1));
    return 0;
}

size_t zs_llama_count_params(const zs_model_config *c)
{
    zs_model_config one = *c;
    one.tp = 1;
    one.moe_ep = 1;
    size_t C = (size_t)c->n_embd, V = (size_t)c->vocab, n = V * C * (c->tie_embeddings ? 1 : 2) + C;
    for (int l = 0; l < c->n_layer; l++) {
        int k[LK_NKINDS], m = llama_block_kinds(&one, l, k);
        for (int j = 0; j < m; j++)
            n += llama_kind_numel(&one, k[j]);
    }
    return n;
}

size_t zs_llama_count_expert_params(const zs_model_config *c)
{
    return (size_t)llama_n_moe(c) * (size_t)c->moe_experts * 3 * (size_t)c->ffn_hidden *
           (size_t)c->n_embd;
}

void zs_model_llama_token_work(const zs_model_config *c, double *gemm_weights, double *act_width)
{
    double C = c->n_embd, D = (double)llama_head_dim(c), F = c->ffn_hidden;
    double attn = 2.0 * C * C + 2.0 * llama_kv(c) * D * C, w = 0.0, a = 0.0;
    for (int l = 0; l < c->n_layer; l++) {
        int moe = zs_model_block_is_moe(c, l);
        double k = moe ? c->moe_top_k : 1.0;
        w += attn + k * 3.0 * F * C + (moe ? (double)c->moe_experts * C : 0.0);
        a += k * F;
    }
    *gemm_weights = w;
    *act_width = c->n_layer > 0 ? a / c->n_layer : 0.0;
}

size_t zs_model_llama_entry_cols(const zs_model_config *c, int i)
{
    size_t C = (size_t)c->n_embd;
    int kind, b = llama_entry_block(c, i, &kind);
    if (b < 0) /* the embedding, model.norm, lm_head */
        return i == llama_block_first(c, c->n_layer) ? 0 : C;
    switch (kind) {
    case LK_O_W: return (size_t)c->n_head * llama_head_dim(c);
    case LK_DOWN_W: return (size_t)c->ffn_hidden;
    case LK_Q_W: case LK_K_W: case LK_V_W: case LK_GATE_W: case LK_UP_W: case LK_ROUTER:
        return C;
    default: return 0; /* norms, biases (the stacked experts have no 2-D shape) */
    }
}

/* Element j of entry i of rank tp_rank's shard as an element of the same
 * entry at tp = 1 (see the file's comment for the split). */
static size_t llama_tp_global(const zs_model_config *c, int i, size_t j)
{
    size_t P = (size_t)llama_tp(c), r = (size_t)(c->tp > 1 ? c->tp_rank : 0);
    size_t C = (size_t)c->n_embd, D = llama_head_dim(c), V = (size_t)c->vocab;
    size_t Ql = (size_t)c->n_head / P * D, Fl = (size_t)c->ffn_hidden / P;
    size_t KV = (size_t)llama_kv(c), KVl = llama_kv_local(c);
    /* the first key/value head this rank holds */
    size_t kv0 = KV % P == 0 ? r * KVl : r / (P / KV);
    if (P == 1)
        return j;
    int kind, b = llama_entry_block(c, i, &kind);
    if (i == 0 || (b < 0 && !c->tie_embeddings && i == llama_block_first(c, c->n_layer) + 1))
        return r * (V / P) * C + j; /* embedding, lm_head: rows */
    if (b < 0)
        return j;
    switch (kind) {
    case LK_Q_W: return r * Ql * C + j;
    case LK_Q_B: return r * Ql + j;
    case LK_K_W: case LK_V_W: return kv0 * D * C + j;
    case LK_K_B: case LK_V_B: return kv0 * D + j;
    case LK_O_W: return (j / Ql) * (Ql * P) + r * Ql + j % Ql;           /* (C, NH*D) */
    case LK_GATE_W: case LK_UP_W: return r * Fl * C + j;                 /* (F, C) */
    case LK_DOWN_W: return (j / Fl) * (Fl * P) + r * Fl + j % Fl;        /* (C, F) */
    case LK_X_GATE: case LK_X_UP: /* (E, F, C): rows of each expert */
        return (j / (Fl * C)) * Fl * P * C + r * Fl * C + j % (Fl * C);
    case LK_X_DOWN: { /* (E, C, F): columns of each expert */
        size_t e = j / (C * Fl), w = j % (C * Fl);
        return e * C * Fl * P + (w / Fl) * (Fl * P) + r * Fl + w % Fl;
    }
    default: return j;                                                   /* replicated */
    }
}

/* Whether this rank's copy of entry i duplicates a lower TP rank's: the
 * RMSNorm weights and a Mixtral block's router on every rank but 0,
 * replicated key/value heads on every rank of a copy group but its first. */
static int llama_tp_replicated(const zs_model_config *c, int i)
{
    int P = llama_tp(c), KV = llama_kv(c), kind;
    if (llama_entry_block(c, i, &kind) < 0)
        return i == llama_block_first(c, c->n_layer); /* model.norm */
    if (kind == LK_IN_NORM || kind == LK_POST_NORM || kind == LK_ROUTER)
        return 1;
    if (KV % P && (kind == LK_K_W || kind == LK_K_B || kind == LK_V_W || kind == LK_V_B))
        return c->tp_rank % (P / KV) != 0;
    return 0;
}

static void llama_init_range(const zs_model *m, int i, size_t first, size_t n, float *out,
                             uint64_t seed)
{
    const zs_model_config *c = &m->cfg;
    int kind, in_block = llama_entry_block(c, i, &kind) >= 0;
    int is_norm = (in_block && (kind == LK_IN_NORM || kind == LK_POST_NORM)) ||
                  i == llama_block_first(c, c->n_layer);
    int is_bias = in_block && (kind == LK_Q_B || kind == LK_K_B || kind == LK_V_B);
    uint64_t base = zs_rng_mix(seed, (uint64_t)i + 1);
    /* expert parallelism: this rank's experts are a slice of each stacked
     * expert entry (its tensor-parallel shard 1/P of each expert) */
    size_t ep_first = 0;
    if (in_block && kind >= LK_X_GATE && c->moe_ep > 1)
        ep_first = (size_t)c->moe_ep_rank * m->layout.entries[i].numel * (size_t)llama_tp(c);
    for (size_t j = 0; j < n; j++) {
        size_t g = ep_first + (llama_tp(c) > 1 ? llama_tp_global(c, i, first + j) : first + j);
        uint64_t st = base + 2 * g * 0x9e3779b97f4a7c15ULL;
        out[j] = is_norm ? 1.0f : is_bias ? 0.0f : (float)(0.02 * zs_rng_normal(&st));
    }
}

/* ---- activations ------------------------------------------------------------- */

/* The sizes of a block's saved views, in floats, in layout order (the
 * file's comment); a Mixtral block's expert views follow in moe[6]. */
enum { LA_LN1, LA_LN1_RSTD, LA_Q, LA_K, LA_V, LA_ATT, LA_ATTY, LA_RES2, LA_LN2, LA_LN2_RSTD,
       LA_GATE, LA_UP, LA_SWIGLU, LA_RES3, LA_N };

static void llama_block_sizes(const zs_model_config *c, int b, size_t sz[LA_N], size_t moe[6])
{
    size_t B = (size_t)b, T = llama_seq(c), C = (size_t)c->n_embd, P = (size_t)llama_tp(c);
    size_t D = llama_head_dim(c), NHl = (size_t)c->n_head / P, KVl = llama_kv_local(c);
    size_t BT = B * T, BTl = B * zs_decoder_seq_local(c), Fl = (size_t)c->ffn_hidden / P;
    const size_t s[LA_N] = {BT * C,  BTl,     BT * NHl * D, BT * KVl * D, BT * KVl * D,
                            llama_att_floats(c, B),  BT * NHl * D, BTl * C,      BT * C,
                            BTl,     BT * Fl, BT * Fl,      BT * Fl,      BTl * C};
    for (int k = 0; k < LA_N; k++)
        sz[k] = s[k];
    size_t E = (size_t)c->moe_experts, cap = llama_n_moe(c) ? (size_t)llama_moe_cap(c, b) : 0;
    const size_t m[6] = {BT * E, E * cap * C, E * cap * Fl, E * cap * Fl, E * cap * Fl,
                         E * cap * C};
    for (int k = 0; k < 6; k++)
        moe[k] = m[k];
}

/* Floats of a block slot: kinds bit 1 a dense block's MLP, bit 2 a
 * Mixtral block's experts. */
static size_t llama_slot_floats(const zs_model_config *c, int b, int kinds)
{
    size_t sz[LA_N], moe[6], f = 0;
    llama_block_sizes(c, b, sz, moe);
    for (int k = 0; k < LA_N; k++)
        if ((kinds & 1) || (k != LA_GATE && k != LA_UP && k != LA_SWIGLU))
            f += sz[k];
    for (int k = 0; (kinds & 2) && k < 6; k++)
        f += moe[k];
    return f;
}

/* What slot s must hold (as the GPT's gpt_slot_kinds). */
static int llama_slot_kinds(const zs_model_config *c, int s)
{
    return zs_decoder_block_kinds(c, s, c->n_layer - 1, zs_decoder_slots(c));
}

/* The kinds of the blocks [b0, b1] together. */
static int llama_range_kinds(const zs_model_config *c, int b0, int b1)
{
    return zs_decoder_block_kinds(c, b0, b1, 1);
}

static size_t llama_head_floats(const zs_model_config *c, int b)
{
    size_t BT = (size_t)b * llama_seq(c), BTl = (size_t)b * zs_decoder_seq_local(c);
    return BT * (size_t)c->n_embd + BTl + BT * ((size_t)c->vocab / (size_t)llama_tp(c)) + BT;
}

static size_t llama_activation_bytes(const zs_model_config *c, int b)
{
    size_t BTlC = (size_t)b * zs_decoder_seq_local(c) * (size_t)c->n_embd, f = BTlC;
    int b0, b1, head;
    zs_decoder_stage(c, &b0, &b1, &head);
    if (head)
        f += llama_head_floats(c, b);
    if (zs_decoder_pp_ckpt(c)) /* its input and last output; the blocks' are shared */
        return 4 * (f + BTlC);
    if (c->pp_on) {
        for (int l = b0; l <= b1; l++)
            f += llama_slot_floats(c, b, zs_model_block_is_moe(c, l) ? 2 : 1);
        return 4 * f;
    }
    for (int s = 0; s < zs_decoder_slots(c); s++)
        f += llama_slot_floats(c, b, llama_slot_kinds(c, s));
    return 4 * f;
}

/* A pipeline stage with checkpointing: its working slots, shared by the
 * micro-batches in flight (each sized for the stage's blocks' kinds). */
static size_t llama_shared_activation_bytes(const zs_model_config *c, int b)
{
    if (!zs_decoder_pp_ckpt(c))
        return 0;
    int b0, b1, head, K = zs_decoder_slots(c);
    zs_decoder_stage(c, &b0, &b1, &head);
    size_t nw = (size_t)(b1 - b0 + 1 < K ? b1 - b0 + 1 : K);
    return 4 * nw * llama_slot_floats(c, b, llama_range_kinds(c, b0, b1));
}

/* The floats of E experts' gate, up and down on this rank (Fl = F/P of
 * each expert's intermediate size). */
static size_t llama_experts_floats(const zs_model_config *c)
{
    return (size_t)c->moe_experts * 3 * ((size_t)c->ffn_hidden / (size_t)llama_tp(c)) *
           (size_t)c->n_embd;
}

/* The experts' gradients by source (moe_ep_home), and what comes home. */
static size_t llama_home_floats(const zs_model_config *c)
{
    if (c->moe_ep <= 1 || !c->moe_ep_home || llama_n_moe(c) == 0)
        return 0;
    size_t n = llama_experts_floats(c);
    return n + (c->moe_ep_home == ZS_MOE_EP_HOME ? n : 0);
}

double zs_llama_moe_home_bytes(const zs_model_config *c)
{
    if (c->moe_ep <= 1 || c->moe_ep_home != ZS_MOE_EP_HOME || llama_n_moe(c) == 0)
        return 0.0;
    double n = (double)llama_experts_floats(c);
    return n * 4.0 * (c->moe_ep - 1.0) / c->moe_ep;
}

static size_t llama_scratch_bytes(const zs_model_config *c, int b)
{
    size_t B = (size_t)b, T = llama_seq(c), C = (size_t)c->n_embd, P = (size_t)llama_tp(c);
    size_t D = llama_head_dim(c), NHl = (size_t)c->n_head / P, KVl = llama_kv_local(c);
    size_t BT = B * T, Fl = (size_t)c->ffn_hidden / P, V = (size_t)c->vocab;
    size_t f = T * D + 2 * BT * C + 2 * BT * NHl * D + 2 * BT * KVl * D + 3 * BT * Fl +
               llama_att_scratch_floats(c, B);
    int b0, b1, head;
    zs_decoder_stage(c, &b0, &b1, &head);
    if (head)
        f += BT * V / P;
    if (P > 1)
        f += 3 * BT;
    f += zs_llama_kv_grad_floats(c);
    if (llama_sp(c))
        f += 2 * BT * C + B * zs_decoder_seq_local(c) * C;
    if (llama_n_moe(c) > 0) {
        size_t E = (size_t)c->moe_experts, cap = (size_t)llama_moe_cap(c, b);
        size_t ecf = E * cap * Fl;
        f += 2 * E * cap * C + BT * E + (ecf > BT * Fl ? 3 * (ecf - BT * Fl) : 0) +
             llama_home_floats(c);
    }
    return 4 * f;
}

/* Views of block l at base (a slot holding the views of kinds, bit 1 a
 * dense block's MLP), in the order of the file's comment: qkv is q, k and v
 * packed (rows of (NHl + 2 KVl) D), fch gate and up packed (rows [gate |
 * up] of 2 Fl), fch_gelu the SwiGLU. */
static void llama_bind_block(zs_acts *a, int l, float *base, int kinds)
{
    size_t sz[LA_N], moe[6];
    llama_block_sizes(&a->m->cfg, a->b, sz, moe);
    float **at[LA_N] = {&a->ln1[l], &a->ln1_rstd[l], &a->qkv[l], NULL, NULL, &a->att[l],
                        &a->atty[l], &a->res2[l], &a->ln2[l], &a->ln2_rstd[l], &a->fch[l],
                        NULL, &a->fch_gelu[l], &a->res3[l]};
    for (int k = 0; k < LA_N; k++) {
        if (!(kinds & 1) && (k == LA_GATE || k == LA_UP || k == LA_SWIGLU))
            continue;
        if (at[k])
            *at[k] = base;
        base += sz[k];
    }
    if (!(kinds & 2))
        return;
    /* the experts' views: gates, input, [gate | up] (moe[2] + moe[3] floats
     * in packed rows of 2F), SwiGLU, output */
    float **mv[6] = {&a->m_gates[l], &a->m_xin[l], &a->m_fch[l], NULL, &a->m_gelu[l],
                     &a->m_out[l]};
    for (int k = 0; k < 6; k++) {
        if (mv[k])
            *mv[k] = base;
        base += moe[k];
    }
}

/* The rotary table (T rows from position 0; with context parallelism T/C
 * rows, those of the rank's two chunks at their positions in the sequence,
 * which are not contiguous) into a->s_rope; 0, or -1 when host memory ran
 * out. A phantom backend's table holds nothing. */
static int llama_fill_rope(zs_acts *a)
{
    const zs_model_config *c = &a->m->cfg;
    zs_backend_t be = zs_mem_backend(a->mem);
    if (!a->s_rope || zs_backend_is_phantom(be))
        return 0;
    int T = (int)llama_seq(c), D = (int)llama_head_dim(c), cp = zs_model_cp_size(c) > 1;
    zs_rope_params rp = {c->rope_theta, c->rope_scaling_factor != 0.0, c->rope_scaling_factor,
                         c->rope_low_freq_factor, c->rope_high_freq_factor,
                         (double)c->rope_original_max_pos};
    float *h = malloc((size_t)T * (size_t)D * sizeof(float));
    int S = T / 2;
    if (!h || (cp ? zs_rope_table_fill(h, zs_model_cp_chunk(c, c->cp_rank, 0) * S, S, D, &rp) ||
                        zs_rope_table_fill(h + (size_t)S * D,
                                           zs_model_cp_chunk(c, c->cp_rank, 1) * S, S, D, &rp)
                  : zs_rope_table_fill(h, 0, T, D, &rp))) {
        free(h);
        return -1;
    }
    zs_backend_copy_h2d(be, a->s_rope, h, (size_t)T * (size_t)D * sizeof(float));
    free(h);
    return 0;
}

/* The scratch views, as llama_scratch_bytes counts them (the rotary table
 * first; the MLP's inner gradients as wide as the experts' when those are
 * more). */
static void llama_bind_scratch(zs_acts *a, int head)
{
    const zs_model_config *c = &a->m->cfg;
    size_t B = (size_t)a->b, BT = B * llama_seq(c), C = (size_t)c->n_embd;
    size_t BTl = B * zs_decoder_seq_local(c), P = (size_t)llama_tp(c);
    size_t D = llama_head_dim(c), NHl = (size_t)c->n_head / P, KVl = llama_kv_local(c);
    size_t Fl = (size_t)c->ffn_hidden / P;
    size_t E = (size_t)c->moe_experts, cap = llama_n_moe(c) ? (size_t)llama_moe_cap(c, a->b) : 0;
    size_t ecf = E * cap * Fl, fw = ecf > BT * Fl ? ecf : BT * Fl;
    float *s = a->scratch;
    a->s_rope = s;
    s += llama_seq(c) * D;
    a->s_tmp = s;
    s += BT * C;
    a->s_dres = s;
    s += BT * C;
    a->s_datty = s;
    s += BT * NHl * D;
    a->s_dqkv = s;
    s += BT * (NHl + 2 * KVl) * D;
    a->s_dfch = s; /* d [gate | up] */
    s += 2 * fw;
    a->s_dfch_gelu = s; /* d SwiGLU */
    s += fw;
    if (zs_model_cp_size(c) > 1) { /* the ring's messages: keys and values, their gradients */
        a->s_preatt = a->s_datt = s;
        s += llama_att_scratch_floats(c, B);
    } else {
        a->s_preatt = s;
        s += llama_att_floats(c, B);
        a->s_datt = s;
        s += llama_att_floats(c, B);
    }
    if (head) {
        a->s_logits = s;
        s += BT * ((size_t)c->vocab / P);
    }
    if (P > 1) {
        a->s_rowmax = s;
        s += BT;
        a->s_sums = s;
        s += 2 * BT;
    }
    a->s_kvgrad = s;
    s += zs_llama_kv_grad_floats(c);
    if (zs_decoder_sp(c)) {
        a->s_perm = s;
        s += BT * C;
        a->s_dfull = s;
        s += BT * C;
        a->s_loc = s;
        s += BTl * C;
    }
    if (llama_n_moe(c) > 0) { /* two (E, Cap, C), the router's logits, by source */
        a->s_me1 = s;
        s += E * cap * C;
        a->s_me2 = s;
        s += E * cap * C;
        a->s_gl = s;
        s += BT * E;
        a->s_gsrc = s; /* E experts' gate, up and down, then s_grecv as much */
        a->s_grecv = s + (llama_home_floats(c) ? llama_experts_floats(c) : 0);
    }
}

/* Carve the views: the saved blocks as llama_activation_bytes counts them
 * (checkpointing's slots and checkpoints as the GPT's), the scratch as
 * llama_scratch_bytes does (the rotary table first). */
static void llama_bind_acts(zs_acts *a)
{
    const zs_model_config *c = &a->m->cfg;
    int L = c->n_layer, b = a->b, b0, b1, head, K = zs_decoder_slots(c);
    size_t B = (size_t)b, BT = B * llama_seq(c), C = (size_t)c->n_embd;
    size_t BTl = B * zs_decoder_seq_local(c), BTlC = BTl * C, P = (size_t)llama_tp(c);
    float **arr = calloc((size_t)L * 16, sizeof(float *));
    if (!arr)
        return;
    float ***views[16] = {&a->ln1,  &a->ln1_rstd, &a->qkv,     &a->att,    &a->atty,
                          &a->res2, &a->ln2,      &a->ln2_rstd, &a->fch,   &a->fch_gelu,
                          &a->res3, &a->m_gates,  &a->m_xin,   &a->m_fch,  &a->m_gelu,
                          &a->m_out};
    for (int k = 0; k < 16; k++)
        *views[k] = arr + (size_t)k * (size_t)L;
    zs_decoder_stage(c, &b0, &b1, &head);
    float *p = a->saved;
    a->encoded = p;
    p += BTlC;
    if (zs_decoder_pp_ckpt(c)) { /* the last output; the blocks' in the shared slots */
        int kinds = llama_range_kinds(c, b0, b1);
        size_t w = llama_slot_floats(c, b, kinds);
        float *last = p;
        p += BTlC;
        for (int l = b0; a->work && l <= b1; l++)
            llama_bind_block(a, l, a->work + (size_t)((l - b0) % K) * w, kinds);
        zs_decoder_bind_checkpoints(a);
        a->res3[b1] = last;
    } else if (c->pp_on) {
        for (int l = b0; l <= b1; l++) {
            int kinds = zs_model_block_is_moe(c, l) ? 2 : 1;
            llama_bind_block(a, l, p, kinds);
            p += llama_slot_floats(c, b, kinds);
        }
    } else {
        for (int s = 0; s < K; s++) {
            int kinds = llama_slot_kinds(c, s);
            for (int l = s; l < L; l += K)
                llama_bind_block(a, l, p, kinds);
            p += llama_slot_floats(c, b, kinds);
        }
        zs_decoder_bind_checkpoints(a);
    }
    if (b0 >= 1)
        a->res3[b0 - 1] = a->encoded;
    a->n_losses = BT;
    if (head) { /* lnf, lnf_rstd, probs, losses */
        a->lnf = p;
        p += BT * C;
        a->lnf_rstd = p;
        p += BTl;
        a->probs = p;
        p += BT * ((size_t)c->vocab / P);
        a->losses = p;
    }
    if (a->scratch)
        llama_bind_scratch(a, head);
    if (llama_fill_rope(a)) {
        free(arr);
        return;
    }
    a->view_arrays = arr;
}

/* ---- forward and backward (dense blocks) ---------------------------------------- */

/* Entry of kind k in block l. */
static int llama_entry(const zs_model_config *c, int l, int kind)
{
    int k[LK_NKINDS], n = llama_block_kinds(c, l, k);
    for (int j = 0; j < n; j++)
        if (k[j] == kind)
            return llama_block_first(c, l) + j;
    return -1;
}

/* The head's weight: lm_head, or the tied embedding. */
static int llama_head_entry(const zs_model_config *c)
{
    return c->tie_embeddings ? 0 : llama_block_first(c, c->n_layer) + 1;
}

/* A Mixtral block's router, gate, up and down parameters (or gradients). */
static void llama_moe_entries(const zs_model_config *c, int l, float *const *P, float **w)
{
    static const int kinds[4] = {LK_ROUTER, LK_X_GATE, LK_X_UP, LK_X_DOWN};
    for (int k = 0; k < 4; k++)
        w[k] = P[llama_entry(c, l, kinds[k])];
}

/* out(BT, n) of a packed row of ldo floats = inp(BT, k) W(n, k)^T + bias:
 * one part of a fused GEMM whose weights are separate entries. */
static void llama_part_forward(zs_backend_t be, float *out, int ldo, const float *inp,
                               const float *w, const float *bias, int bt, int k, int n)
{
    zs_backend_sgemm(be, 0, 1, bt, n, k, 1.0f, inp, k, w, k, 0.0f, out, ldo);
    for (int r = 0; bias && r < bt; r++)
        zs_backend_axpy(be, out + (size_t)r * ldo, 1.0f, bias, (size_t)n);
}

/* Its backward: dinp(BT, k) += dout W, dw += dout^T inp, dbias += the
 * column sums of dout (rows in order); dout rows of ldo floats. */
static void llama_part_backward(zs_backend_t be, float *dinp, float *dw, float *dbias,
                                const float *dout, int ldo, const float *inp, const float *w,
                                int bt, int k, int n)
{
    zs_backend_sgemm(be, 0, 0, bt, k, n, 1.0f, dout, ldo, w, k, 1.0f, dinp, k);
    zs_backend_sgemm(be, 1, 0, n, k, bt, 1.0f, dout, ldo, inp, k, 1.0f, dw, k);
    for (int r = 0; dbias && r < bt; r++)
        zs_backend_axpy(be, dbias, 1.0f, dout + (size_t)r * ldo, (size_t)n);
}

/* The shapes of a block on this rank. */
typedef struct {
    int B, T, C, D, NH, KV, F, BT, QKV;
} llama_dims;

static llama_dims llama_dims_of(const zs_model_config *c, int B)
{
    llama_dims d;
    d.B = B;
    d.T = (int)llama_seq(c);
    d.C = c->n_embd;
    d.D = (int)llama_head_dim(c);
    d.NH = c->n_head / llama_tp(c);
    d.KV = (int)llama_kv_local(c);
    d.F = c->ffn_hidden / llama_tp(c);
    d.BT = B * d.T;
    d.QKV = (d.NH + 2 * d.KV) * d.D;
    return d;
}

/* An RMSNorm whose output feeds a column-parallel linear: with sequence
 * parallelism over this rank's positions (rstd BTl), then all-gathered;
 * else over all of them. */
static void llama_norm_in(zs_model *m, zs_backend_t be, zs_acts *a, float *out, float *rstd,
                          const float *inp, const float *w, int B, int u)
{
    const zs_model_config *c = &m->cfg;
    int C = c->n_embd, BTl = B * (int)zs_decoder_seq_local(c);
    if (!zs_decoder_sp(c)) {
        zs_backend_rmsnorm_forward(be, out, rstd, inp, w, BTl, C, (float)c->norm_eps);
        return;
    }
    zs_backend_rmsnorm_forward(be, a->s_loc, rstd, inp, w, BTl, C, (float)c->norm_eps);
    zs_decoder_sp_gather(m, be, out, a->s_loc, a->s_perm, B, u);
}

/* Its backward: dfull (B, T, C), the gradient of the gathered output
 * partial over the group, is summed (or reduce-scattered to this rank's
 * positions), then the RMSNorm's backward adds into dres; with sequence
 * parallelism the weight's gradient covers this rank's positions only and
 * is summed over the group (C floats). */
static void llama_norm_in_backward(zs_model *m, zs_backend_t be, zs_acts *a, float *dres,
                                   float *dw, float *dfull, const float *inp, const float *w,
                                   const float *rstd, int B, int u)
{
    const zs_model_config *c = &m->cfg;
    int C = c->n_embd;
    const float *d = zs_decoder_row_sum(m, be, a, dfull, B, u);
    zs_backend_rmsnorm_backward(be, dres, dw, d, inp, w, rstd, B * (int)zs_decoder_seq_local(c),
                                C);
    if (zs_decoder_sp(c))
        zs_decoder_tp_sum(m, dw, (size_t)C, u);
}

static void llama_block_forward(zs_model *m, zs_backend_t be, int l, float *const *P, zs_acts *a,
                                int B, int u)
{
    const zs_model_config *c = &m->cfg;
    llama_dims d = llama_dims_of(c, B);
    size_t btlc = (size_t)B * zs_decoder_seq_local(c) * (size_t)d.C;
    const float *inp = zs_decoder_block_input(a, l);
    llama_norm_in(m, be, a, a->ln1[l], a->ln1_rstd[l], inp, P[llama_entry(c, l, LK_IN_NORM)], B,
                  u);
    /* the fused QKV GEMM, part by part into the packed rows */
    int q_b = llama_entry(c, l, LK_Q_B), k_b = llama_entry(c, l, LK_K_B);
    int v_b = llama_entry(c, l, LK_V_B), qn = d.NH * d.D, kn = d.KV * d.D;
    llama_part_forward(be, a->qkv[l], d.QKV, a->ln1[l], P[llama_entry(c, l, LK_Q_W)],
                       q_b >= 0 ? P[q_b] : NULL, d.BT, d.C, qn);
    llama_part_forward(be, a->qkv[l] + qn, d.QKV, a->ln1[l], P[llama_entry(c, l, LK_K_W)],
                       k_b >= 0 ? P[k_b] : NULL, d.BT, d.C, kn);
    llama_part_forward(be, a->qkv[l] + qn + kn, d.QKV, a->ln1[l], P[llama_entry(c, l, LK_V_W)],
                       v_b >= 0 ? P[v_b] : NULL, d.BT, d.C, kn);
    zs_backend_rope_forward(be, a->qkv[l], a->s_rope, d.T, d.B, d.T, d.NH + d.KV, d.D, d.QKV, 0);
    if (zs_model_cp_size(c) > 1) /* ring attention: att[l] holds its statistics */
        zs_ring_attention_forward(m, be, a->s_preatt, a->atty[l], a->att[l], a->qkv[l], B, u);
    else
        zs_backend_attention_gqa_forward(be, a->atty[l], a->s_preatt, a->att[l], a->qkv[l], d.B,
                                         d.T, d.NH, d.KV, d.D);
    /* o_proj row-parallel, then g: the sum over the group */
    zs_linear_forward(be, a->s_tmp, a->atty[l], P[llama_entry(c, l, LK_O_W)], NULL, d.BT, qn,
                      d.C);
    const float *att_out = zs_decoder_row_sum(m, be, a, a->s_tmp, B, u);
    zs_backend_residual_forward(be, a->res2[l], inp, att_out, btlc);
    llama_norm_in(m, be, a, a->ln2[l], a->ln2_rstd[l], a->res2[l],
                  P[llama_entry(c, l, LK_POST_NORM)], B, u);
    if (zs_model_block_is_moe(c, l)) { /* the experts, summed over the group as the MLP */
        float *w[4];
        llama_moe_entries(c, l, P, w);
        zs_llama_moe_forward(m, be, l, (const float *const *)w, a, a->s_tmp, B, u);
        const float *moe_out = zs_decoder_row_sum(m, be, a, a->s_tmp, B, u);
        zs_backend_residual_forward(be, a->res3[l], a->res2[l], moe_out, btlc);
        return;
    }
    /* the fused gate/up GEMM: rows [gate | up] */
    llama_part_forward(be, a->fch[l], 2 * d.F, a->ln2[l], P[llama_entry(c, l, LK_GATE_W)], NULL,
                       d.BT, d.C, d.F);
    llama_part_forward(be, a->fch[l] + d.F, 2 * d.F, a->ln2[l], P[llama_entry(c, l, LK_UP_W)],
                       NULL, d.BT, d.C, d.F);
    zs_backend_swiglu_forward(be, a->fch_gelu[l], a->fch[l], d.BT, d.F);
    zs_linear_forward(be, a->s_tmp, a->fch_gelu[l], P[llama_entry(c, l, LK_DOWN_W)], NULL, d.BT,
                      d.F, d.C);
    const float *mlp_out = zs_decoder_row_sum(m, be, a, a->s_tmp, B, u);
    zs_backend_residual_forward(be, a->res3[l], a->res2[l], mlp_out, btlc);
}

/* A dense block's MLP backward: from dout (BT, C), the gradient of down's
 * output (whole on every rank), d ln2 into a->s_tmp (partial over the
 * tensor-parallel group), gate's, up's and down's gradients added. */
static void llama_mlp_backward(zs_model *m, zs_backend_t be, int l, float *const *P,
                               float *const *G, zs_acts *a, const float *dout, int B)
{
    const zs_model_config *c = &m->cfg;
    llama_dims d = llama_dims_of(c, B);
    size_t btc = (size_t)d.BT * d.C, btf = (size_t)d.BT * d.F;
    int e_down = llama_entry(c, l, LK_DOWN_W), e_gate = llama_entry(c, l, LK_GATE_W);
    int e_up = llama_entry(c, l, LK_UP_W);
    zs_backend_memset0(be, a->s_dfch_gelu, btf * 4);
    zs_linear_backward(be, a->s_dfch_gelu, G[e_down], NULL, dout, a->fch_gelu[l], P[e_down],
                       d.BT, d.F, d.C);
    zs_backend_memset0(be, a->s_dfch, 2 * btf * 4);
    zs_backend_swiglu_backward(be, a->s_dfch, a->fch[l], a->s_dfch_gelu, d.BT, d.F);
    zs_backend_memset0(be, a->s_tmp, btc * 4);
    llama_part_backward(be, a->s_tmp, G[e_gate], NULL, a->s_dfch, 2 * d.F, a->ln2[l], P[e_gate],
                        d.BT, d.C, d.F);
    llama_part_backward(be, a->s_tmp, G[e_up], NULL, a->s_dfch + d.F, 2 * d.F, a->ln2[l],
                        P[e_up], d.BT, d.C, d.F);
}

/* A Mixtral block's experts backward: d ln2 into a->s_tmp (partial over
 * the tensor-parallel group, as the dense MLP's). */
static void llama_moe_backward(zs_model *m, zs_backend_t be, int l, float *const *P,
                               float *const *G, zs_acts *a, const float *dout, int B, int u,
                               float dloss)
{
    float *w[4], *g[4];
    llama_moe_entries(&m->cfg, l, P, w);
    llama_moe_entries(&m->cfg, l, G, g);
    zs_llama_moe_backward(m, be, l, (const float *const *)w, g, a, a->s_tmp, dout, B, u, dloss);
}

/* dres holds d res3 on entry, d of the block's input on return. */
static void llama_block_backward(zs_model *m, zs_backend_t be, int l, float *const *P,
                                 float *const *G, zs_acts *a, int B, int u, float dloss)
{
    const zs_model_config *c = &m->cfg;
    llama_dims d = llama_dims_of(c, B);
    size_t btc = (size_t)d.BT * d.C;
    float *dres = a->s_dres;
    const float *inp = zs_decoder_block_input(a, l);
    /* MLP: res3 = res2 + down(swiglu(gate_up(ln2(res2)))) */
    int e_n2 = llama_entry(c, l, LK_POST_NORM);
    /* g's backward is the identity: every rank holds all of d res3 (with
     * sequence parallelism gathered) */
    const float *dout = zs_decoder_dout_full(m, be, a, dres, B, u);
    if (zs_model_block_is_moe(c, l))
        llama_moe_backward(m, be, l, P, G, a, dout, B, u, dloss);
    else
        llama_mlp_backward(m, be, l, P, G, a, dout, B);
    llama_norm_in_backward(m, be, a, dres, G[e_n2], a->s_tmp, a->res2[l], P[e_n2],
                           a->ln2_rstd[l], B, u);
    /* attention: res2 = inp + o(attn(rope(qkv(ln1(inp))))) */
    int e_o = llama_entry(c, l, LK_O_W), qn = d.NH * d.D, kn = d.KV * d.D;
    dout = zs_decoder_dout_full(m, be, a, dres, B, u);
    zs_backend_memset0(be, a->s_datty, (size_t)d.BT * qn * 4);
    zs_linear_backward(be, a->s_datty, G[e_o], NULL, dout, a->atty[l], P[e_o], d.BT, qn, d.C);
    zs_backend_memset0(be, a->s_dqkv, (size_t)d.BT * d.QKV * 4);
    if (zs_model_cp_size(c) > 1)
        zs_ring_attention_backward(m, be, a->s_preatt, a->s_dqkv, a->s_datty, a->atty[l],
                                   a->att[l], a->qkv[l], B, u);
    else
        zs_backend_attention_gqa_backward(be, a->s_dqkv, a->s_preatt, a->s_datt, a->s_datty,
                                          a->qkv[l], a->att[l], d.B, d.T, d.NH, d.KV, d.D);
    zs_backend_rope_backward(be, a->s_dqkv, a->s_rope, d.T, d.B, d.T, d.NH + d.KV, d.D, d.QKV, 0);
    zs_backend_memset0(be, a->s_tmp, btc * 4);
    static const int parts[3][2] = {{LK_Q_W, LK_Q_B}, {LK_K_W, LK_K_B}, {LK_V_W, LK_V_B}};
    const int off[3] = {0, qn, qn + kn}, width[3] = {qn, kn, kn};
    /* replicated key/value heads: this rank's share of its head's k and v
     * gradients into the head's slot of s_kvgrad, summed over the group
     * (each slot then holds the sum over the head's copies), added below */
    size_t kvf = zs_llama_kv_grad_floats(c), slot = 0;
    float *mine = NULL;
    if (kvf) {
        int KV = llama_kv(c), Pg = llama_tp(c);
        slot = kvf / (size_t)KV;
        mine = a->s_kvgrad + (size_t)(c->tp_rank / (Pg / KV)) * slot;
        zs_backend_memset0(be, a->s_kvgrad, kvf * 4);
    }
    for (int j = 0; j < 3; j++) {
        int w = llama_entry(c, l, parts[j][0]), bb = llama_entry(c, l, parts[j][1]);
        float *gw = G[w], *gb = bb >= 0 ? G[bb] : NULL;
        if (mine && j > 0) { /* k, v: weight (kn, C) then bias (kn) */
            size_t part = (size_t)kn * d.C + (gb ? (size_t)kn : 0);
            gw = mine + (size_t)(j - 1) * part;
            gb = gb ? gw + (size_t)kn * d.C : NULL;
        }
        llama_part_backward(be, a->s_tmp, gw, gb, a->s_dqkv + off[j], d.QKV, a->ln1[l], P[w],
                            d.BT, d.C, width[j]);
    }
    if (mine) {
        zs_decoder_tp_sum(m, a->s_kvgrad, kvf, u);
        for (int j = 1; j < 3; j++) {
            int w = llama_entry(c, l, parts[j][0]), bb = llama_entry(c, l, parts[j][1]);
            size_t part = (size_t)kn * d.C + (bb >= 0 ? (size_t)kn : 0);
            const float *src = mine + (size_t)(j - 1) * part;
            zs_backend_axpy(be, G[w], 1.0f, src, (size_t)kn * d.C);
            if (bb >= 0)
                zs_backend_axpy(be, G[bb], 1.0f, src + (size_t)kn * d.C, (size_t)kn);
        }
    }
    int e_n1 = llama_entry(c, l, LK_IN_NORM);
    llama_norm_in_backward(m, be, a, dres, G[e_n1], a->s_tmp, inp, P[e_n1], a->ln1_rstd[l], B,
                           u);
}

/* Unit u's forward: the embedding (no positions; vocab-parallel with
 * tensor parallelism), block u - 1, or the final norm, the head and the
 * loss (vocab-parallel: the GPT's). A Mixtral block's experts are
 * llama_moe.c's. */
static void llama_forward_unit(zs_model *m, zs_backend_t be, int u, float *const *P, zs_acts *a,
                               const zs_batch *batch)
{
    const zs_model_config *c = &m->cfg;
    int B = batch->b, T = (int)llama_seq(c), C = c->n_embd, L = c->n_layer, BT = B * T;
    int TP = llama_tp(c), r = TP > 1 ? c->tp_rank : 0, V = c->vocab / TP;
    if (u == 0) { /* each rank its rows (zeros elsewhere), then the sum */
        float *e = zs_decoder_sp(c) ? a->s_tmp : a->encoded;
        zs_backend_vocab_embedding_forward(be, e, batch->tokens, P[0], r * V, V, NULL, B, T, C);
        if (TP == 1)
            return;
        const float *sum = zs_decoder_row_sum(m, be, a, e, B, u);
        if (sum != a->encoded)
            zs_backend_copy_d2d(be, a->encoded, sum,
                                (size_t)B * zs_decoder_seq_local(c) * (size_t)C * 4);
        return;
    }
    if (u <= L) {
        zs_decoder_ckpt_gather(m, be, a, u - 1, u);
        llama_block_forward(m, be, u - 1, P, a, B, u);
        zs_decoder_ckpt_keep(be, a, u - 1);
        return;
    }
    /* the objective's aux term, of each Mixtral block's latest forward */
    if (llama_n_moe(c) > 0)
        zs_moe_sum_aux(a);
    int nw = llama_block_first(c, L);
    llama_norm_in(m, be, a, a->lnf, a->lnf_rstd, a->res3[L - 1], P[nw], B, u);
    zs_linear_forward(be, a->s_logits, a->lnf, P[llama_head_entry(c)], NULL, BT, C, V);
    zs_decoder_head_loss(m, be, a, batch->targets, BT, V, r, u);
}

static void llama_backward_unit(zs_model *m, zs_backend_t be, int u, float *const *P,
                                float *const *G, zs_acts *a, const zs_batch *batch, float dloss)
{
    const zs_model_config *c = &m->cfg;
    int B = batch->b, T = (int)llama_seq(c), C = c->n_embd, L = c->n_layer, BT = B * T;
    int TP = llama_tp(c), r = TP > 1 ? c->tp_rank : 0, V = c->vocab / TP;
    if (u == L + 1) {
        int nw = llama_block_first(c, L), h = llama_head_entry(c);
        /* the objective is dloss * the mean over BT positions of the loss */
        if (TP == 1)
            zs_backend_softmax_xent_backward(be, a->s_logits, a->probs, batch->targets,
                                             dloss / (float)BT, BT, V);
        else
            zs_backend_xent_vocab_backward(be, a->s_logits, a->probs, batch->targets, r * V,
                                           dloss / (float)BT, BT, V);
        zs_backend_memset0(be, a->s_tmp, (size_t)BT * C * 4);
        zs_linear_backward(be, a->s_tmp, G[h], NULL, a->s_logits, a->lnf, P[h], BT, C, V);
        zs_backend_memset0(be, a->s_dres, (size_t)B * zs_decoder_seq_local(c) * (size_t)C * 4);
        llama_norm_in_backward(m, be, a, a->s_dres, G[nw], a->s_tmp, a->res3[L - 1], P[nw],
                               a->lnf_rstd, B, u);
        return;
    }
    if (u >= 1) {
        llama_block_backward(m, be, u - 1, P, G, a, B, u, dloss);
        return;
    }
    const float *dout = zs_decoder_dout_full(m, be, a, a->s_dres, B, u);
    zs_backend_vocab_embedding_backward(be, G[0], NULL, dout, batch->tokens, r * V, V, B, T, C);
}

const zs_model_ops zs_llama_ops = {
    .build_layout = llama_build_layout,
    .init_range = llama_init_range,
    .activation_bytes = llama_activation_bytes,
    .scratch_bytes = llama_scratch_bytes,
    .checkpoint_bytes = zs_decoder_checkpoint_bytes,
    .shared_activation_bytes = llama_shared_activation_bytes,
    .bind_acts = llama_bind_acts,
    .forward_unit = llama_forward_unit,
    .backward_unit = llama_backward_unit,
    .tp_global = llama_tp_global,
    .tp_replicated = llama_tp_replicated,
};
