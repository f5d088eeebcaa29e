/* zerosim — the Llama family's weights under Hugging Face's names
 * (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM; see
 * zerosim/weights.h and docs/file-formats.md).
 *
 * The names and shapes are the model's layout's (src/model/llama.c names
 * each entry as Hugging Face does and keeps Linear weights as (out, in),
 * as torch.nn.Linear does), so a file's tensor is a layout entry, copied
 * without transposition. RoPE needs no permutation of q_proj and k_proj
 * rows either: zerosim rotates dimension i of a head with i + D/2
 * (Hugging Face's rotate_half), not adjacent pairs (Meta's original
 * checkpoints, which Hugging Face's conversion script permutes).
 *
 * Shapes come from the tensors (vocabulary and hidden size from the
 * embedding, the blocks present, F from gate_proj, key/value heads times
 * head size from k_proj, biases and an untied head from their presence);
 * the number of heads, which no tensor says, from the metadata zerosim
 * writes, or from --heads or --hf-config (the checkpoint's config.json).
 */
#include "weights_impl.h"
#include "zerosim/config.h"
#include "zerosim/error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZS_LLAMA_EMB "model.embed_tokens.weight"

int zs_llama_st_meta(const zs_model_config *mc, char v[][32], const char **meta)
{
    static const char *const ints[] = {"n_layer", "n_head", "n_kv_head", "n_embd",
                                       "intermediate_size", "n_ctx", "vocab_size"};
    const int vals[] = {mc->n_layer, mc->n_head, mc->n_kv_head > 0 ? mc->n_kv_head : mc->n_head,
                        mc->n_embd, mc->ffn_hidden, mc->seq_len, mc->vocab};
    int k = 0;
    meta[k++] = "format";
    meta[k++] = "pt";
    meta[k++] = "producer";
    meta[k++] = "zerosim";
    meta[k++] = "model";
    meta[k++] = "llama";
    for (int i = 0; i < 7; i++) {
        snprintf(v[i], 32, "%d", vals[i]);
        meta[k++] = ints[i];
        meta[k++] = v[i];
    }
    snprintf(v[7], 32, "%.17g", mc->rope_theta);
    snprintf(v[8], 32, "%.17g", mc->norm_eps);
    meta[k++] = "rope_theta";
    meta[k++] = v[7];
    meta[k++] = "rms_norm_eps";
    meta[k++] = v[8];
    if (mc->moe_experts > 0) { /* the router's arithmetic, which no tensor says */
        snprintf(v[9], 32, "%d", mc->moe_top_k);
        snprintf(v[10], 32, "%d", mc->moe_renormalize ? 1 : 0);
        meta[k++] = "moe_top_k";
        meta[k++] = v[9];
        meta[k++] = "moe_renormalize";
        meta[k++] = v[10];
    }
    return k / 2;
}

/* A metadata integer in lo..hi (0 when absent). */
static int zs_llama_meta_int(const zs_st_set *s, const char *path, const char *key, long lo,
                             long hi, int *out)
{
    const char *text = zs_st_set_meta(s, key);
    *out = 0;
    if (!text)
        return 0;
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < lo || v > hi)
        ZS_FAIL("%s: metadata %s must be an integer between %ld and %ld", path, key, lo, hi);
    *out = (int)v;
    return 0;
}

/* A positive metadata number (0 when absent). */
static int zs_llama_meta_real(const zs_st_set *s, const char *path, const char *key, double *out)
{
    const char *text = zs_st_set_meta(s, key);
    *out = 0.0;
    if (!text)
        return 0;
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || !isfinite(v) || !(v > 0.0))
        ZS_FAIL("%s: metadata %s must be a positive number", path, key);
    *out = v;
    return 0;
}

/* Tensor name's rows (and columns), which must be there with ndim dims. */
static int zs_llama_dims(const zs_st_set *s, const char *path, const char *name, int ndim,
                         uint64_t *rows, uint64_t *cols)
{
    int i = zs_st_set_find(s, name);
    if (i < 0)
        ZS_FAIL("%s: missing tensor %s (a Llama-family checkpoint has it)", path, name);
    const zs_st_tensor *t = zs_st_set_tensor(s, i);
    if (t->ndim != ndim)
        ZS_FAIL("%s: tensor %s has %d dimensions, a Llama's has %d", zs_st_set_file_path(s, i),
                name, t->ndim, ndim);
    *rows = t->shape[0];
    if (cols)
        *cols = t->shape[1];
    return 0;
}

int zs_llama_st_kv_heads(const zs_st_set *s, const char *path, zs_model_config *mc)
{
    uint64_t kv_rows, C;
    ZS_TRY(zs_llama_dims(s, path, "model.layers.0.self_attn.k_proj.weight", 2, &kv_rows, &C));
    uint64_t D = mc->n_head > 0 ? (uint64_t)mc->n_embd / (uint64_t)mc->n_head : 0;
    if (!D || kv_rows % D || kv_rows / D < 1 || (uint64_t)mc->n_head % (kv_rows / D))
        ZS_FAIL("%s: model.layers.0.self_attn.k_proj.weight has %llu rows, not a divisor of "
                "the %d heads times the head size %llu: give the checkpoint's --heads (or its "
                "config.json with --hf-config)", path, (unsigned long long)kv_rows, mc->n_head,
                (unsigned long long)D);
    mc->n_kv_head = (int)(kv_rows / D);
    return 0;
}

/* Mixtral's experts (MixtralForCausalLM): the first block with a router
 * (block_sparse_moe.gate.weight, (E, C)) is block moe_every - 1 and E its
 * rows; none: a dense model. Which blocks hold experts beyond it, and each
 * expert's tensors, zs_llama_st_check checks against the model. */
static int zs_llama_st_experts(const zs_st_set *s, const char *path, zs_model_config *mc)
{
    char name[96];
    for (int l = 0; l < mc->n_layer; l++) {
        snprintf(name, sizeof name, "model.layers.%d.block_sparse_moe.gate.weight", l);
        if (zs_st_set_find(s, name) < 0)
            continue;
        uint64_t E, C;
        ZS_TRY(zs_llama_dims(s, path, name, 2, &E, &C));
        if (E < 2 || E > ZS_BOUND_MOE_EXPERTS_MAX)
            ZS_FAIL("%s: %s has %llu rows (experts): zerosim builds 2 to %d", path, name,
                    (unsigned long long)E, ZS_BOUND_MOE_EXPERTS_MAX);
        mc->moe_experts = (int)E;
        mc->moe_every = l + 1;
        return 0;
    }
    return 0;
}

/* The shapes of the tensors; the heads from the metadata, else 0. */
static int zs_llama_st_shapes(const zs_st_set *s, const char *path, zs_model_config *mc,
                              uint64_t *kv_rows)
{
    uint64_t V, C, F, C2;
    ZS_TRY(zs_llama_dims(s, path, ZS_LLAMA_EMB, 2, &V, &C));
    memset(mc, 0, sizeof *mc);
    mc->kind = ZS_MODEL_LLAMA;
    ZS_TRY(zs_weights_pos_int(path, "the vocabulary (" ZS_LLAMA_EMB "'s rows)", V, &mc->vocab));
    ZS_TRY(zs_weights_pos_int(path, "the hidden size (" ZS_LLAMA_EMB "'s columns)", C,
                              &mc->n_embd));
    char name[80];
    int L = 0;
    for (; L <= 4096; L++) {
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", L);
        if (zs_st_set_find(s, name) < 0)
            break;
    }
    if (L < 1 || L > 4096)
        ZS_FAIL("%s: %s blocks (model.layers.N.input_layernorm.weight): zerosim builds 1 to "
                "4096", path, L ? "more than 4096" : "no");
    mc->n_layer = L;
    ZS_TRY(zs_llama_st_experts(s, path, mc));
    if (mc->moe_every == 1)
        ZS_TRY(zs_llama_dims(s, path, "model.layers.0.block_sparse_moe.experts.0.w1.weight", 2,
                             &F, &C2));
    else
        ZS_TRY(zs_llama_dims(s, path, "model.layers.0.mlp.gate_proj.weight", 2, &F, &C2));
    ZS_TRY(zs_weights_pos_int(path, "the intermediate size (gate_proj's or w1's rows)", F,
                              &mc->ffn_hidden));
    ZS_TRY(zs_llama_dims(s, path, "model.layers.0.self_attn.k_proj.weight", 2, kv_rows, &C2));
    if (!*kv_rows || C % *kv_rows)
        ZS_FAIL("%s: model.layers.0.self_attn.k_proj.weight has %llu rows, which do not divide "
                "the hidden size %llu (key/value heads divide the heads)", path,
                (unsigned long long)*kv_rows, (unsigned long long)C);
    mc->qkv_bias = zs_st_set_find(s, "model.layers.0.self_attn.q_proj.bias") >= 0;
    mc->tie_embeddings = zs_st_set_find(s, "lm_head.weight") < 0;
    ZS_TRY(zs_llama_meta_int(s, path, "n_head", 1, (long)C, &mc->n_head));
    ZS_TRY(zs_llama_meta_int(s, path, "n_kv_head", 1, (long)C, &mc->n_kv_head));
    ZS_TRY(zs_llama_meta_int(s, path, "n_ctx", 1, 1L << 20, &mc->seq_len));
    ZS_TRY(zs_llama_meta_real(s, path, "rope_theta", &mc->rope_theta));
    ZS_TRY(zs_llama_meta_real(s, path, "rms_norm_eps", &mc->norm_eps));
    if (mc->moe_experts) {
        ZS_TRY(zs_llama_meta_int(s, path, "moe_top_k", 1, 2, &mc->moe_top_k));
        ZS_TRY(zs_llama_meta_int(s, path, "moe_renormalize", 0, 1, &mc->moe_renormalize));
    }
    if (mc->n_head && C % (uint64_t)mc->n_head)
        ZS_FAIL("%s: metadata n_head %d does not divide the hidden size %llu", path, mc->n_head,
                (unsigned long long)C);
    if (mc->n_kv_head && !mc->n_head)
        ZS_FAIL("%s: metadata n_kv_head without n_head", path);
    if (mc->n_head) {
        int kv = mc->n_kv_head;
        mc->n_kv_head = 0;
        ZS_TRY(zs_llama_st_kv_heads(s, path, mc));
        if (kv && kv != mc->n_kv_head)
            ZS_FAIL("%s: metadata n_kv_head %d, but k_proj's %llu rows hold %d heads of %d",
                    path, kv, (unsigned long long)*kv_rows, mc->n_kv_head,
                    mc->n_embd / mc->n_head);
    }
    return 0;
}

int zs_llama_st_probe(const zs_st_set *s, const char *path, zs_model_config *mc)
{
    uint64_t kv_rows;
    ZS_TRY(zs_llama_st_shapes(s, path, mc, &kv_rows));
    /* every tensor checked now, with heads that give the same shapes when
     * the file does not say them: heads of k_proj's rows, one of them for
     * keys and values */
    zs_model_config any = *mc;
    if (!any.n_head) {
        any.n_head = (int)((uint64_t)mc->n_embd / kv_rows);
        any.n_kv_head = 1;
    }
    any.seq_len = any.seq_len ? any.seq_len : 1;
    any.rope_theta = any.rope_theta > 0.0 ? any.rope_theta : 10000.0;
    any.norm_eps = any.norm_eps > 0.0 ? any.norm_eps : 1e-5;
    return zs_llama_st_check(s, path, &any);
}

/* What a Hugging Face Llama file may hold beside the model: the rotary
 * inverse frequencies older versions saved (a buffer zerosim computes). */
static int zs_llama_ignorable(const char *name)
{
    int l, k = 0;
    return sscanf(name, "model.layers.%d.self_attn.rotary_emb.inv_freq%n", &l, &k) == 1 && k &&
           name[k] == '\0';
}

int zs_llama_st_check(const zs_st_set *s, const char *path, const zs_model_config *mc)
{
    zs_gpt_tensor *t;
    int n;
    ZS_TRY(zs_gpt_tensors(mc, &t, &n));
    unsigned char *taken = calloc((size_t)s->n + 1, 1);
    int rc = taken ? 0 : zs_error_set("out of host memory reading %s", path);
    char model[160];
    snprintf(model, sizeof model, "the Llama (C=%d, %d heads, %d key/value heads, F=%d, V=%d)",
             mc->n_embd, mc->n_head, mc->n_kv_head > 0 ? mc->n_kv_head : mc->n_head,
             mc->ffn_hidden, mc->vocab);
    for (int i = 0; i < n && !rc; i++) {
        int k = zs_st_set_find(s, t[i].name);
        if (k < 0) {
            rc = zs_error_set("%s: missing tensor %s (a Llama of %d blocks%s%s)", path,
                              t[i].name, mc->n_layer, mc->qkv_bias ? ", q/k/v biases" : "",
                              mc->tie_embeddings ? ", head tied" : ", head untied");
            break;
        }
        taken[k] = 1;
        rc = zs_weights_check_shape(zs_st_set_file_path(s, k), zs_st_set_tensor(s, k), &t[i],
                                    model);
    }
    for (int j = 0; j < s->n && !rc; j++) {
        const char *nm = zs_st_set_tensor(s, j)->name;
        if (taken[j] || zs_llama_ignorable(nm))
            continue;
        rc = zs_error_set("%s: tensor %s is not part of a Llama of %d blocks%s%s as zerosim "
                          "builds it", zs_st_set_file_path(s, j), nm, mc->n_layer,
                          mc->qkv_bias ? ", q/k/v biases" : ", no biases",
                          mc->tie_embeddings ? ", head tied" : ", head untied");
    }
    free(taken);
    free(t);
    return rc;
}
