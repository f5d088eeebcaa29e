/* zerosim — the model interface: validation, layouts, dispatch to the GPT's
 * and the MLP's operations. */
#include "model_impl.h"
#include "zerosim/comm.h"
#include "zerosim/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- configuration ----------------------------------------------------------- */

/* The model table: one row of operations per family. */
static const zs_model_ops *zs_model_ops_for(zs_model_kind k)
{
    return k == ZS_MODEL_GPT ? &zs_gpt_ops : k == ZS_MODEL_LLAMA ? &zs_llama_ops : &zs_mlp_ops;
}

int zs_model_is_decoder(const zs_model_config *c)
{
    return c->kind == ZS_MODEL_GPT || c->kind == ZS_MODEL_LLAMA;
}

const char *zs_model_kind_name(zs_model_kind k)
{
    return k == ZS_MODEL_GPT ? "gpt" : k == ZS_MODEL_LLAMA ? "llama" : "mlp";
}

int zs_model_head_tied(const zs_model_config *c)
{
    return c->kind == ZS_MODEL_GPT || (c->kind == ZS_MODEL_LLAMA && c->tie_embeddings);
}

int zs_model_check_phantom(const zs_model_config *c)
{
    const zs_model_ops *ops = zs_model_ops_for(c->kind);
    if (!ops->forward_unit && (c->tp > 1 || c->moe_ep > 1))
        ZS_FAIL("%s: the %s collectives come from its forward, not built yet: use zerosim "
                "plan, or --%s 1", zs_model_kind_name(c->kind),
                c->tp > 1 ? "tensor-parallel" : "expert-parallel", c->tp > 1 ? "tp" : "ep");
    return 0;
}

int zs_model_check_runnable(const zs_model_config *c)
{
    const zs_model_ops *ops = zs_model_ops_for(c->kind);
    if (!ops->forward_unit || !ops->backward_unit)
        ZS_FAIL("%s: real runs not built yet (its forward and backward are missing): use "
                "--phantom or zerosim plan", zs_model_kind_name(c->kind));
    return 0;
}

/* The mixture-of-experts fields of a decoder (the GPT, the Llama family). */
static int zs_model_moe_validate(const zs_model_config *c)
{
    if (c->moe_experts < 0 || c->moe_experts > 4096)
        ZS_FAIL("--moe-experts (moe.num_experts) must be between 0 and 4096, got %d",
                c->moe_experts);
    if (c->moe_experts == 0) {
        if (c->moe_ep > 1)
            ZS_FAIL("expert parallelism (--ep %d) needs experts: give --moe-experts", c->moe_ep);
        return 0;
    }
    if (c->moe_experts < 2)
        ZS_FAIL("--moe-experts (moe.num_experts) must be 2 or more for a mixture of experts "
                "(0: none), got %d", c->moe_experts);
    if (c->moe_every < 1 || c->moe_every > c->n_layer)
        ZS_FAIL("--moe-every (moe.expert_interval) must be between 1 and model.layers (%d), "
                "got %d", c->n_layer, c->moe_every);
    if (c->moe_top_k != 1 && c->moe_top_k != 2)
        ZS_FAIL("--moe-top-k (moe.k) must be 1 or 2, got %d", c->moe_top_k);
    if (!(c->moe_capacity_factor > 0.0) || c->moe_capacity_factor > 1e6)
        ZS_FAIL("--capacity-factor (moe.capacity_factor) must be a number > 0, got %g",
                c->moe_capacity_factor);
    if (c->moe_min_capacity < 0 || c->moe_min_capacity > 1 << 24)
        ZS_FAIL("--min-capacity (moe.min_capacity) must be between 0 and 16777216, got %d",
                c->moe_min_capacity);
    if (!(c->moe_aux_coeff >= 0.0) || c->moe_aux_coeff > 1e6)
        ZS_FAIL("--aux-loss-coeff (moe.loss_coeff) must be a number >= 0, got %g",
                c->moe_aux_coeff);
    int Ep = c->moe_ep > 1 ? c->moe_ep : 1;
    if (Ep > 256)
        ZS_FAIL("expert-parallel groups of more than 256 ranks are not supported (--ep %d)", Ep);
    if (c->moe_experts % Ep)
        ZS_FAIL("--moe-experts (%d) must be divisible by the expert-parallel size (--ep %d): "
                "each rank of the group holds the same number of experts", c->moe_experts, Ep);
    if (Ep > 1 && (c->moe_ep_rank < 0 || c->moe_ep_rank >= Ep))
        ZS_FAIL("expert-parallel rank %d is not a rank of a group of %d", c->moe_ep_rank, Ep);
    return 0;
}

/* The Llama family's own fields (the decoder's common ones are checked with
 * the GPT's). */
static int zs_model_llama_validate(const zs_model_config *c)
{
    int T = c->tp > 1 ? c->tp : 1, KV = c->n_kv_head;
    if (c->ffn_hidden < 1 || c->ffn_hidden > 1 << 22)
        ZS_FAIL("model.ffn_hidden (--ffn-hidden, intermediate_size) must be between 1 and "
                "4194304, got %d", c->ffn_hidden);
    if (KV < 1 || KV > c->n_head || c->n_head % KV)
        ZS_FAIL("model.kv_heads (--kv-heads, num_key_value_heads) must be between 1 and "
                "model.heads (%d) and divide it, got %d", c->n_head, KV);
    if (!(c->norm_eps > 0.0) || c->norm_eps > 1.0)
        ZS_FAIL("model.norm_eps (--norm-eps, rms_norm_eps) must be a number in (0, 1], got %g",
                c->norm_eps);
    if (!(c->rope_theta >= 1.0) || c->rope_theta > 1e12)
        ZS_FAIL("model.rope_theta (--rope-theta) must be a number between 1 and 1e12, got %g",
                c->rope_theta);
    if (c->rope_scaling_factor != 0.0 &&
        (!(c->rope_scaling_factor >= 1.0) || c->rope_scaling_factor > 1e6 ||
         !(c->rope_low_freq_factor > 0.0) || !(c->rope_high_freq_factor > c->rope_low_freq_factor) ||
         c->rope_original_max_pos < 1))
        ZS_FAIL("model.rope_scaling (llama3) needs factor >= 1, 0 < low_freq_factor < "
                "high_freq_factor and original_max_position_embeddings >= 1, got factor %g, "
                "low %g, high %g, original %d", c->rope_scaling_factor, c->rope_low_freq_factor,
                c->rope_high_freq_factor, c->rope_original_max_pos);
    if (KV % T && T % KV)
        ZS_FAIL("model.kv_heads (%d) and the tensor-parallel size (--tp %d): the key/value "
                "heads are split when they divide by it and replicated when it divides by "
                "them; neither holds", KV, T);
    if (c->ffn_hidden % T)
        ZS_FAIL("model.ffn_hidden (%d) must be divisible by the tensor-parallel size (--tp %d): "
                "gate, up and down are split along it", c->ffn_hidden, T);
    if (c->sliding_window > 0 && c->sliding_window < c->seq_len)
        ZS_FAIL("model.sliding_window (%d, sliding_window) is shorter than model.seq (%d): "
                "sliding-window attention is not modelled: use --seq %d or less",
                c->sliding_window, c->seq_len, c->sliding_window);
    if ((c->n_embd / c->n_head) % 2)
        ZS_FAIL("model.hidden / model.heads (%d) must be even: RoPE rotates pairs of a head's "
                "dimensions", c->n_embd / c->n_head);
    return 0;
}

int zs_model_config_validate(const zs_model_config *c)
{
    if (c->kind == ZS_MODEL_LLAMA)
        ZS_TRY(zs_model_llama_validate(c));
    if (zs_model_is_decoder(c)) {
        if (c->n_layer < 1 || c->n_layer > 4096)
            ZS_FAIL("model.layers must be between 1 and 4096, got %d", c->n_layer);
        if (c->n_embd < 1 || c->n_embd > 1 << 20)
            ZS_FAIL("model.hidden must be between 1 and 1048576, got %d", c->n_embd);
        if (c->n_head < 1 || c->n_embd % c->n_head)
            ZS_FAIL("model.heads (%d) must be positive and divide model.hidden (%d)",
                    c->n_head, c->n_embd);
        if (c->seq_len < 1 || c->seq_len > 1 << 20)
            ZS_FAIL("model.seq must be between 1 and 1048576, got %d", c->seq_len);
        if (c->vocab < 2 || c->vocab > 1 << 20)
            ZS_FAIL("model.vocab must be between 2 and 1048576, got %d", c->vocab);
        if (c->ckpt_blocks < 0)
            ZS_FAIL("activation checkpointing: blocks per segment must be positive, got %d",
                    c->ckpt_blocks);
        int T = c->tp > 1 ? c->tp : 1;
        if (T > 1 && (c->tp_rank < 0 || c->tp_rank >= T))
            ZS_FAIL("tensor-parallel rank %d is not a rank of a group of %d", c->tp_rank, T);
        if (c->n_head % T)
            ZS_FAIL("model.heads (%d) must be divisible by the tensor-parallel size (--tp %d): "
                    "attention is split by heads", c->n_head, T);
        if (c->vocab % T)
            ZS_FAIL("model.vocab (%d) must be divisible by the tensor-parallel size (--tp %d): "
                    "the embedding is split by vocabulary rows", c->vocab, T);
        if (c->kind == ZS_MODEL_GPT && (4 * c->n_embd) % T)
            ZS_FAIL("4 x model.hidden (%d) must be divisible by the tensor-parallel size (--tp %d): "
                    "the MLP is split along its 4C inner width", 4 * c->n_embd, T);
        if (c->sequence_parallel && T < 2)
            ZS_FAIL("sequence parallelism (--sequence-parallel) splits the sequence over the "
                    "tensor-parallel group: it needs --tp 2 or more");
        if (c->sequence_parallel && c->seq_len % T)
            ZS_FAIL("model.seq (%d) must be divisible by the tensor-parallel size (--tp %d) with "
                    "sequence parallelism", c->seq_len, T);
        if (c->sequence_parallel && zs_decoder_seq_rank(c) % (size_t)T)
            ZS_FAIL("model.seq (%d) must be divisible by the context-parallel size times the "
                    "tensor-parallel size (--cp %d x --tp %d) with sequence parallelism: each "
                    "rank's chunk of the sequence is split over the tensor-parallel group",
                    c->seq_len, zs_model_cp_size(c), T);
        if (T > 64)
            ZS_FAIL("tensor-parallel groups of more than 64 ranks are not supported (--tp %d)", T);
        ZS_TRY(zs_model_moe_validate(c));
    } else if (c->kind == ZS_MODEL_MLP) {
        if (c->moe_experts > 0)
            ZS_FAIL("a mixture of experts (--moe-experts) is implemented for the decoders: use "
                    "--model gpt or llama");
        if (c->tp > 1)
            ZS_FAIL("tensor parallelism is implemented for the GPT: use --tp 1 with --model mlp");
        if (c->ckpt_blocks > 0)
            ZS_FAIL("activation checkpointing is implemented for the GPT only: use "
                    "--checkpoint-activations off with --model mlp");
        if (c->input_dim < 1 || c->input_dim > 1 << 20)
            ZS_FAIL("model.input_dim must be between 1 and 1048576, got %d", c->input_dim);
        if (c->n_classes < 2 || c->n_classes > 1 << 20)
            ZS_FAIL("model.classes must be between 2 and 1048576, got %d", c->n_classes);
        if (c->n_hidden < 0 || c->n_hidden > ZS_MLP_MAX_HIDDEN)
            ZS_FAIL("model.layers (hidden layers of the MLP) must be between 0 and %d, got %d",
                    ZS_MLP_MAX_HIDDEN, c->n_hidden);
        for (int i = 0; i < c->n_hidden; i++)
            if (c->widths[i] < 1 || c->widths[i] > 1 << 20)
                ZS_FAIL("model.widths[%d] must be between 1 and 1048576, got %d", i, c->widths[i]);
        if (c->act != ZS_ACT_RELU && c->act != ZS_ACT_GELU)
            ZS_FAIL("model.activation must be \"relu\" or \"gelu\"");
    } else {
        ZS_FAIL("model.type must be \"gpt\", \"llama\" or \"mlp\"");
    }
    return 0;
}

size_t zs_model_count_params(const zs_model_config *c)
{
    size_t n = 0;
    if (c->kind == ZS_MODEL_LLAMA)
        return zs_llama_count_params(c);
    if (c->kind == ZS_MODEL_GPT) {
        size_t C = (size_t)c->n_embd, V = (size_t)c->vocab, T = (size_t)c->seq_len;
        size_t block = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (4 * C * C + 4 * C) +
                       (4 * C * C + C);
        n = V * C + T * C + (size_t)c->n_layer * block + 2 * C;
        if (c->moe_experts > 0 && c->moe_every > 0) { /* MoE blocks: router + E MLPs */
            size_t mlp = (4 * C * C + 4 * C) + (4 * C * C + C);
            size_t nm = (size_t)(c->n_layer / c->moe_every);
            n = n - nm * mlp + nm * (size_t)c->moe_experts * C + zs_model_count_expert_params(c);
        }
    } else {
        size_t in = (size_t)c->input_dim;
        for (int i = 0; i <= c->n_hidden; i++) {
            size_t out = i < c->n_hidden ? (size_t)c->widths[i] : (size_t)c->n_classes;
            n += out * in + out;
            in = out;
        }
    }
    return n;
}

size_t zs_model_count_expert_params(const zs_model_config *c)
{
    if (c->kind == ZS_MODEL_LLAMA)
        return zs_llama_count_expert_params(c);
    if (c->kind != ZS_MODEL_GPT || c->moe_experts <= 0 || c->moe_every <= 0)
        return 0;
    size_t C = (size_t)c->n_embd, mlp = (4 * C * C + 4 * C) + (4 * C * C + C);
    return (size_t)(c->n_layer / c->moe_every) * (size_t)c->moe_experts * mlp;
}

int zs_model_create(const zs_model_config *c, zs_model **out)
{
    *out = NULL;
    ZS_TRY(zs_model_config_validate(c));
    zs_model *m = calloc(1, sizeof *m);
    if (!m)
        ZS_FAIL("out of host memory creating the model");
    m->cfg = *c;
    m->ops = zs_model_ops_for(c->kind);
    zs_layout *lay = &m->layout;
    if (m->ops->build_layout(c, lay)) {
        zs_model_destroy(m);
        return -1;
    }
    lay->layer_offset = calloc((size_t)lay->n_layers, sizeof(size_t));
    lay->layer_numel = calloc((size_t)lay->n_layers, sizeof(size_t));
    m->uses = calloc((size_t)lay->n_layers, sizeof *m->uses);
    m->uses_count = calloc((size_t)lay->n_layers, sizeof(int));
    if (!lay->layer_offset || !lay->layer_numel || !m->uses || !m->uses_count) {
        zs_model_destroy(m);
        ZS_FAIL("out of host memory creating the model");
    }
    size_t off = 0;
    int prev = -1;
    /* moe_ep_split: the expert entries go after all others */
    int split = zs_model_is_decoder(c) && c->moe_ep > 1 && c->moe_ep_split;
    for (int i = 0; i < lay->n_entries; i++) {
        zs_param_entry *e = &lay->entries[i];
        m->uses[e->layer][m->uses_count[e->layer]++] = i;
        if (split && zs_model_entry_is_expert(c, i))
            continue;
        if (e->layer != prev) {
            lay->layer_offset[e->layer] = off;
            prev = e->layer;
        }
        e->offset = off;
        off += e->numel;
        lay->layer_numel[e->layer] += e->numel;
    }
    lay->num_params = off;
    for (int i = 0; split && i < lay->n_entries; i++)
        if (zs_model_entry_is_expert(c, i)) {
            lay->entries[i].offset = off;
            off += lay->entries[i].numel;
        }
    lay->num_expert = off - lay->num_params;
    /* tensor parallelism: where each entry starts in the tp = 1 layout */
    m->full_offset = calloc((size_t)lay->n_entries, sizeof(size_t));
    if (!m->full_offset) {
        zs_model_destroy(m);
        ZS_FAIL("out of host memory creating the model");
    }
    if (c->tp > 1) {
        zs_model_config one = *c;
        one.tp = 1;
        one.tp_rank = 0;
        zs_layout full = {0};
        if (m->ops->build_layout(&one, &full)) {
            free(full.entries);
            zs_model_destroy(m);
            return -1;
        }
        size_t fo = 0;
        for (int i = 0; i < full.n_entries && i < lay->n_entries; i++) {
            m->full_offset[i] = fo;
            fo += full.entries[i].numel;
        }
        free(full.entries);
    } else {
        for (int i = 0; i < lay->n_entries; i++)
            m->full_offset[i] = lay->entries[i].offset;
    }
    if (zs_model_head_tied(c)) /* the head uses the tied token embedding (entry 0) */
        m->uses[lay->n_layers - 1][m->uses_count[lay->n_layers - 1]++] = 0;
    *out = m;
    return 0;
}

void zs_model_destroy(zs_model *m)
{
    if (!m)
        return;
    zs_layout_free(&m->layout);
    free(m->uses);
    free(m->uses_count);
    free(m->full_offset);
    free(m);
}

const zs_layout *zs_model_layout(const zs_model *m) { return &m->layout; }

const zs_model_config *zs_model_get_config(const zs_model *m) { return &m->cfg; }

int zs_model_unit_uses(const zs_model *m, int l, int *ids, int max)
{
    int n = m->uses_count[l];
    for (int i = 0; i < n && i < max; i++)
        ids[i] = m->uses[l][i];
    return n;
}

size_t zs_model_unit_elems(const zs_model *m, int l)
{
    size_t s = 0;
    for (int i = 0; i < m->uses_count[l]; i++)
        s += m->layout.entries[m->uses[l][i]].numel;
    return s;
}

void zs_model_init_params(const zs_model *m, float *params, uint64_t seed)
{
    for (int i = 0; i < m->layout.n_entries; i++)
        m->ops->init_range(m, i, 0, m->layout.entries[i].numel, params + m->layout.entries[i].offset,
                           seed);
}

void zs_model_init_slice(const zs_model *m, size_t lo, size_t hi, float *out, uint64_t seed)
{
    const zs_layout *lay = &m->layout;
    for (size_t k = lo; k < hi; k++) /* padding beyond the parameters is 0 */
        if (k >= lay->num_params + lay->num_expert)
            out[k - lo] = 0.0f;
    for (int i = 0; i < lay->n_entries; i++) {
        const zs_param_entry *e = &lay->entries[i];
        size_t a = e->offset > lo ? e->offset : lo;
        size_t b = e->offset + e->numel < hi ? e->offset + e->numel : hi;
        if (a < b)
            m->ops->init_range(m, i, a - e->offset, b - a, out + (a - lo), seed);
    }
}

size_t zs_model_activation_bytes(const zs_model_config *c, int b)
{
    return zs_model_ops_for(c->kind)->activation_bytes(c, b);
}

size_t zs_model_scratch_bytes(const zs_model_config *c, int b)
{
    return zs_model_ops_for(c->kind)->scratch_bytes(c, b);
}

size_t zs_model_checkpoint_bytes(const zs_model_config *c, int b)
{
    const zs_model_ops *ops = zs_model_ops_for(c->kind);
    return ops->checkpoint_bytes ? ops->checkpoint_bytes(c, b) : 0;
}

size_t zs_model_shared_activation_bytes(const zs_model_config *c, int b)
{
    const zs_model_ops *ops = zs_model_ops_for(c->kind);
    return ops->shared_activation_bytes ? ops->shared_activation_bytes(c, b) : 0;
}

/* Blocks per segment: all of them without checkpointing. */
static int zs_model_seg_blocks(const zs_model_config *c)
{
    if (!zs_model_is_decoder(c) || c->ckpt_blocks <= 0 || c->ckpt_blocks >= c->n_layer)
        return zs_model_is_decoder(c) ? c->n_layer : 1;
    return c->ckpt_blocks;
}

int zs_model_ckpt_gathers(const zs_model_config *c, int u, int ufirst)
{
    return zs_model_is_decoder(c) && zs_decoder_ckpt_gathers(c, u, ufirst);
}

void zs_model_acts_set_recompute(zs_acts *a, int recompute) { a->recompute = recompute; }

int zs_model_segments(const zs_model_config *c)
{
    if (!zs_model_is_decoder(c))
        return 1;
    int k = zs_model_seg_blocks(c);
    return (c->n_layer + k - 1) / k;
}

void zs_model_segment_units(const zs_model_config *c, int s, int *first, int *last)
{
    int k = zs_model_seg_blocks(c);
    *first = 1 + s * k;
    *last = (s + 1) * k < c->n_layer ? (s + 1) * k : c->n_layer;
}

/* A MoE decoder's router on the host: the routing tables of one block's
 * pass and each block's statistics, of every set of activations (a
 * pipeline stage's slots too: each micro-batch in flight its own). */
static int zs_model_acts_routing_create(zs_acts *a)
{
    const zs_model_config *c = &a->m->cfg;
    if (!zs_model_is_decoder(c) || c->moe_experts <= 0)
        return 0;
    int n = a->b * c->seq_len;
    a->moe = calloc(1, sizeof *a->moe);
    a->moe_stats = calloc((size_t)c->n_layer, sizeof *a->moe_stats);
    a->moe_laux = calloc((size_t)c->n_layer, sizeof *a->moe_laux);
    if (!a->moe || !a->moe_stats || !a->moe_laux ||
        zs_moe_routing_alloc(a->moe, n, c->moe_experts, c->moe_top_k,
                             zs_moe_capacity(n, c->moe_experts, c->moe_top_k,
                                             c->moe_capacity_factor, c->moe_min_capacity),
                             c->n_embd))
        ZS_FAIL("out of host memory creating the mixture of experts' routing tables");
    a->moe->renorm = c->moe_renormalize;
    return 0;
}

int zs_model_acts_create(const zs_model *m, zs_mem_t mem, int b, zs_acts **out)
{
    *out = NULL;
    zs_acts *a = calloc(1, sizeof *a);
    if (!a)
        ZS_FAIL("out of host memory creating activations");
    a->m = m;
    a->mem = mem;
    a->b = b;
    size_t own = m->ops->activation_bytes(&m->cfg, b);
    a->saved_bytes = own + zs_model_shared_activation_bytes(&m->cfg, b);
    a->scratch_bytes = m->ops->scratch_bytes(&m->cfg, b);
    a->ckpt_bytes = zs_model_checkpoint_bytes(&m->cfg, b);
    if (zs_mem_alloc(mem, ZS_MEM_ACTIVATIONS, a->saved_bytes, (void **)&a->saved) ||
        zs_mem_alloc(mem, ZS_MEM_CHECKPOINTS, a->ckpt_bytes, (void **)&a->ckpt) ||
        zs_mem_alloc(mem, ZS_MEM_WORKSPACE, a->scratch_bytes, (void **)&a->scratch)) {
        zs_model_acts_destroy(a);
        return -1;
    }
    if (a->saved_bytes > own) /* the shared working slots follow slot 0's own */
        a->work = (float *)((char *)a->saved + own);
    m->ops->bind_acts(a);
    if (!a->view_arrays) { /* both models bind their views through one array */
        zs_model_acts_destroy(a);
        ZS_FAIL("out of host memory creating activation views");
    }
    if (zs_model_acts_routing_create(a)) {
        zs_model_acts_destroy(a);
        return -1;
    }
    *out = a;
    return 0;
}

int zs_model_acts_create_slot(const zs_model *m, zs_mem_t mem, int b, const zs_acts *share,
                              zs_acts **out)
{
    *out = NULL;
    zs_acts *a = calloc(1, sizeof *a);
    if (!a)
        ZS_FAIL("out of host memory creating activations");
    a->m = m;
    a->mem = mem;
    a->b = b;
    a->saved_bytes = m->ops->activation_bytes(&m->cfg, b);
    a->scratch = share->scratch; /* not this slot's: scratch_bytes stays 0 */
    a->shared_scratch = 1;
    a->work = share->work;
    a->ckpt_bytes = zs_model_checkpoint_bytes(&m->cfg, b); /* a pipeline stage's: per slot */
    if (zs_mem_alloc(mem, ZS_MEM_ACTIVATIONS, a->saved_bytes, (void **)&a->saved) ||
        zs_mem_alloc(mem, ZS_MEM_CHECKPOINTS, a->ckpt_bytes, (void **)&a->ckpt)) {
        zs_model_acts_destroy(a);
        return -1;
    }
    m->ops->bind_acts(a);
    if (!a->view_arrays) {
        zs_model_acts_destroy(a);
        ZS_FAIL("out of host memory creating activation views");
    }
    if (zs_model_acts_routing_create(a)) {
        zs_model_acts_destroy(a);
        return -1;
    }
    *out = a;
    return 0;
}

float *zs_model_unit_output(zs_acts *a, int l, size_t *n)
{
    const zs_model_config *c = &a->m->cfg;
    *n = zs_model_boundary_elems(c, a->b);
    return l == 0 ? a->encoded : a->res3[l - 1];
}

float *zs_model_input_grad(zs_acts *a, size_t *n)
{
    *n = zs_model_boundary_elems(&a->m->cfg, a->b);
    return a->s_dres;
}

size_t zs_model_boundary_elems(const zs_model_config *c, int b)
{
    /* this rank's positions: T, over cp, over tp with sequence parallelism */
    return (size_t)b * zs_decoder_seq_local(c) * (size_t)c->n_embd;
}

void zs_model_acts_destroy(zs_acts *a)
{
    if (!a)
        return;
    zs_mem_free(a->mem, ZS_MEM_ACTIVATIONS, a->saved, a->saved_bytes);
    if (!a->shared_scratch)
        zs_mem_free(a->mem, ZS_MEM_WORKSPACE, a->scratch, a->scratch_bytes);
    zs_mem_free(a->mem, ZS_MEM_CHECKPOINTS, a->ckpt, a->ckpt_bytes);
    free(a->view_arrays);
    if (a->moe && a->moe->expert)
        zs_moe_routing_free(a->moe);
    free(a->moe);
    free(a->moe_stats);
    free(a->moe_laux);
    free(a);
}

/* A family without a forward (zs_model_check_runnable) runs phantom only:
 * its units compute nothing there. */
void zs_model_forward_unit(zs_model *m, zs_backend_t be, int l, float *const *P, zs_acts *a,
                           const zs_batch *batch)
{
    if (m->ops->forward_unit)
        m->ops->forward_unit(m, be, l, P, a, batch);
}

void zs_model_backward_unit(zs_model *m, zs_backend_t be, int l, float *const *P,
                            float *const *G, zs_acts *a, const zs_batch *batch, float dloss)
{
    if (m->ops->backward_unit)
        m->ops->backward_unit(m, be, l, P, G, a, batch, dloss);
}

double zs_model_token_loss(const zs_acts *a, zs_backend_t be)
{
    if (!a->m->ops->forward_unit)
        return 0.0; /* phantom only: no loss was computed */
    float *h = malloc(a->n_losses * sizeof(float));
    if (!h)
        return NAN;
    zs_backend_copy_d2h(be, h, a->losses, a->n_losses * sizeof(float));
    double s = 0.0;
    for (size_t i = 0; i < a->n_losses; i++)
        s += h[i];
    free(h);
    return s / (double)a->n_losses;
}

float zs_model_loss(const zs_acts *a, zs_backend_t be)
{
    if (!a->m->ops->forward_unit)
        return 0.0f; /* phantom only: no loss was computed */
    return (float)(zs_model_token_loss(a, be) + a->moe_aux);
}

int zs_model_score(const zs_acts *a, zs_backend_t be, const int32_t *targets, int n,
                   double *loss_sum, int *correct)
{
    int K = a->m->cfg.n_classes;
    float *loss = malloc((size_t)n * sizeof(float) + 1);
    float *probs = malloc((size_t)n * (size_t)K * sizeof(float) + 1);
    if (!loss || !probs) {
        free(loss);
        free(probs);
        ZS_FAIL("out of host memory scoring %d samples", n);
    }
    zs_backend_copy_d2h(be, loss, a->losses, (size_t)n * sizeof(float));
    zs_backend_copy_d2h(be, probs, a->probs, (size_t)n * (size_t)K * sizeof(float));
    double sum = 0.0;
    int right = 0;
    for (int s = 0; s < n; s++) {
        const float *p = probs + (size_t)s * K;
        int best = 0;
        for (int k = 1; k < K; k++)
            if (p[k] > p[best])
                best = k;
        right += best == targets[s];
        sum += loss[s];
    }
    free(loss);
    free(probs);
    *loss_sum = sum;
    *correct = right;
    return 0;
}

int zs_model_next_probs(const zs_acts *a, zs_backend_t be, size_t r, float *out)
{
    const zs_model_config *c = &a->m->cfg;
    if (!zs_model_is_decoder(c) || !a->m->ops->forward_unit || c->tp > 1)
        ZS_FAIL("the next-token distribution is a decoder's, at tp = 1, after a forward");
    if (r >= a->n_losses)
        ZS_FAIL("row %zu of a micro-batch of %zu positions", r, a->n_losses);
    zs_backend_copy_d2h(be, out, a->probs + r * (size_t)c->vocab, (size_t)c->vocab * sizeof(float));
    return 0;
}

double zs_model_aux_loss(const zs_acts *a) { return a->moe_aux; }

int zs_model_moe_stats(const zs_acts *a, int l, zs_moe_stats *out)
{
    if (!a->moe_stats || l < 0 || l >= a->m->cfg.n_layer ||
        !zs_model_block_is_moe(&a->m->cfg, l))
        return -1;
    *out = a->moe_stats[l];
    return 0;
}

int zs_model_set_ep_comm(zs_model *m, struct zs_comm *ep)
{
    int P = m->cfg.moe_ep > 1 ? m->cfg.moe_ep : 1;
    if (ep && (zs_comm_size(ep) != P || (P > 1 && zs_comm_rank(ep) != m->cfg.moe_ep_rank)))
        ZS_FAIL("the expert-parallel communicator has rank %d of %d where the model expects %d "
                "of %d", zs_comm_rank(ep), zs_comm_size(ep), m->cfg.moe_ep_rank, P);
    m->ep = ep;
    return 0;
}

int zs_model_set_cp_comm(zs_model *m, struct zs_comm *cp)
{
    int C = m->cfg.cp > 1 ? m->cfg.cp : 1;
    if (C > 1 && (!cp || zs_comm_size(cp) != C || zs_comm_rank(cp) != m->cfg.cp_rank))
        ZS_FAIL("the context-parallel communicator is not of %d ranks with this rank at %d", C,
                m->cfg.cp_rank);
    m->cp = C > 1 ? cp : NULL;
    return 0;
}

/* ---- tensor parallelism --------------------------------------------------- */

int zs_model_set_tp_comm(zs_model *m, struct zs_comm *tp)
{
    int T = m->cfg.tp > 1 ? m->cfg.tp : 1;
    if (tp && (zs_comm_size(tp) != T || (T > 1 && zs_comm_rank(tp) != m->cfg.tp_rank)))
        ZS_FAIL("the tensor-parallel communicator has rank %d of %d where the model expects %d "
                "of %d", zs_comm_rank(tp), zs_comm_size(tp), m->cfg.tp_rank, T);
    m->tp = tp;
    return 0;
}

/* The entry holding flat element `local`, or -1. */
static int zs_model_entry_of(const zs_model *m, size_t local)
{
    const zs_layout *lay = &m->layout;
    int lo = 0, hi = lay->n_entries - 1;
    if (local >= lay->num_params)
        return -1;
    while (lo < hi) { /* the last entry whose offset <= local */
        int mid = lo + (hi - lo + 1) / 2;
        if (lay->entries[mid].offset <= local)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

size_t zs_model_tp_global_offset(const zs_model *m, size_t local, size_t *run)
{
    int i = zs_model_entry_of(m, local);
    if (i < 0) {
        if (run)
            *run = 0;
        return SIZE_MAX;
    }
    const zs_param_entry *e = &m->layout.entries[i];
    size_t j = local - e->offset;
    if (m->cfg.tp <= 1 || !m->ops->tp_global) {
        if (run)
            *run = e->numel - j;
        return local;
    }
    size_t g = m->ops->tp_global(&m->cfg, i, j);
    if (run) {
        size_t n = 1;
        while (j + n < e->numel && m->ops->tp_global(&m->cfg, i, j + n) == g + n)
            n++;
        *run = n;
    }
    return m->full_offset[i] + g;
}

int zs_model_tp_replicated(const zs_model *m, size_t local)
{
    int i = zs_model_entry_of(m, local);
    if (i < 0 || m->cfg.tp <= 1 || !m->ops->tp_replicated)
        return i >= 0;
    return m->ops->tp_replicated(&m->cfg, i);
}

int zs_model_tp_failed(zs_model *m)
{
    int f = m->tp_failed;
    m->tp_failed = 0;
    return f;
}
