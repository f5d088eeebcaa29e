/* zerosim — Hugging Face's config.json as a model (--hf-config FILE).
 *
 * Architectures: LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM,
 * Qwen2ForCausalLM (the Llama family, src/model/llama.c) and
 * GPT2LMHeadModel (the GPT). Every key that changes memory, traffic or
 * arithmetic is mapped onto the model's fields; a value zerosim cannot
 * model (another activation, biases Llama does not have, a sliding window,
 * rope scaling other than llama3, dropout) is one line naming the key; the
 * other keys (token ids, dtype, versions, initialisation, generation
 * settings, keys unknown to zerosim) change none of them and are listed as
 * ignored. model.seq is the context length (max_position_embeddings,
 * n_positions; a sliding window shorter than it bounds it); --seq
 * overrides it where the family allows (the GPT's positions are
 * parameters).
 */
#include "zerosim/config.h"
#include "zerosim/error.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *path;
    json_t *root;
    const char *const *used; /* the keys read, NULL-terminated */
} zs_hf_file;

/* An integer key; def < 0: required. */
static int zs_hf_int(const zs_hf_file *f, const char *key, long def, long lo, long hi, int *out)
{
    json_t *v = json_object_get(f->root, key);
    if (!v || json_is_null(v)) {
        if (def < 0)
            ZS_FAIL("%s: the key \"%s\" is missing", f->path, key);
        *out = (int)def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        ZS_FAIL("%s: \"%s\" must be an integer between %ld and %ld", f->path, key, lo, hi);
    *out = (int)json_integer_value(v);
    return 0;
}

static int zs_hf_real(const zs_hf_file *f, const char *key, double def, double *out)
{
    json_t *v = json_object_get(f->root, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        ZS_FAIL("%s: \"%s\" must be a number", f->path, key);
    *out = json_number_value(v);
    return 0;
}

static int zs_hf_bool(const zs_hf_file *f, const char *key, int def, int *out)
{
    json_t *v = json_object_get(f->root, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v))
        ZS_FAIL("%s: \"%s\" must be true or false", f->path, key);
    *out = json_is_true(v);
    return 0;
}

/* A key that must hold one value (or be absent) for zerosim to model it. */
static int zs_hf_only(const zs_hf_file *f, const char *key, double want, const char *why)
{
    double x;
    ZS_TRY(zs_hf_real(f, key, want, &x));
    if (x != want)
        ZS_FAIL("%s: \"%s\" %g is not modelled (%s)", f->path, key, x, why);
    return 0;
}

static int zs_hf_act(const zs_hf_file *f, const char *key, const char *a, const char *b)
{
    const char *s = json_string_value(json_object_get(f->root, key));
    if (s && strcmp(s, a) && (!b || strcmp(s, b)))
        ZS_FAIL("%s: \"%s\" \"%s\" is not modelled: the family's is \"%s\"", f->path, key, s, a);
    return 0;
}

/* Llama 3.1's rope_scaling (null: none). */
static int zs_hf_rope_scaling(const zs_hf_file *f, zs_model_config *m)
{
    json_t *rs = json_object_get(f->root, "rope_scaling");
    if (!rs || json_is_null(rs))
        return 0;
    const char *t = json_string_value(json_object_get(rs, "rope_type"));
    if (!t)
        t = json_string_value(json_object_get(rs, "type"));
    if (!json_is_object(rs) || !t || strcmp(t, "llama3"))
        ZS_FAIL("%s: \"rope_scaling\" of type \"%s\" is not modelled (llama3 is)", f->path,
                t ? t : "?");
    zs_hf_file sub = {f->path, rs, NULL};
    ZS_TRY(zs_hf_real(&sub, "factor", 0.0, &m->rope_scaling_factor));
    ZS_TRY(zs_hf_real(&sub, "low_freq_factor", 0.0, &m->rope_low_freq_factor));
    ZS_TRY(zs_hf_real(&sub, "high_freq_factor", 0.0, &m->rope_high_freq_factor));
    ZS_TRY(zs_hf_int(&sub, "original_max_position_embeddings", -1, 1, 1 << 24,
                     &m->rope_original_max_pos));
    return 0;
}

static const char *const zs_hf_llama_keys[] = {
    "architectures", "model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "vocab_size", "max_position_embeddings",
    "rms_norm_eps", "rope_theta", "rope_scaling", "tie_word_embeddings", "attention_bias",
    "mlp_bias", "hidden_act", "head_dim", "sliding_window", "use_sliding_window",
    "num_local_experts", "num_experts_per_tok", "router_aux_loss_coef", "attention_dropout",
    "pretraining_tp", "router_jitter_noise", NULL};

/* LlamaForCausalLM and its relatives: kind 0 Llama, 1 Mistral, 2 Mixtral,
 * 3 Qwen2. */
static int zs_hf_llama(const zs_hf_file *f, int kind, zs_model_config *m)
{
    m->kind = ZS_MODEL_LLAMA;
    int maxpos, window = 0, use_window = 1, head_dim = 0;
    ZS_TRY(zs_hf_int(f, "hidden_size", -1, 1, 1 << 20, &m->n_embd));
    ZS_TRY(zs_hf_int(f, "intermediate_size", -1, 1, 1 << 22, &m->ffn_hidden));
    ZS_TRY(zs_hf_int(f, "num_hidden_layers", -1, 1, 4096, &m->n_layer));
    ZS_TRY(zs_hf_int(f, "num_attention_heads", -1, 1, 1 << 16, &m->n_head));
    ZS_TRY(zs_hf_int(f, "num_key_value_heads", m->n_head, 1, 1 << 16, &m->n_kv_head));
    ZS_TRY(zs_hf_int(f, "vocab_size", -1, 2, 1 << 20, &m->vocab));
    ZS_TRY(zs_hf_int(f, "max_position_embeddings", -1, 1, 1 << 24, &maxpos));
    ZS_TRY(zs_hf_real(f, "rms_norm_eps", 1e-6, &m->norm_eps));
    ZS_TRY(zs_hf_real(f, "rope_theta", 10000.0, &m->rope_theta));
    ZS_TRY(zs_hf_rope_scaling(f, m));
    ZS_TRY(zs_hf_bool(f, "tie_word_embeddings", 0, &m->tie_embeddings));
    ZS_TRY(zs_hf_int(f, "head_dim", 0, 0, 1 << 16, &head_dim));
    if (head_dim && head_dim * m->n_head != m->n_embd)
        ZS_FAIL("%s: \"head_dim\" %d is not hidden_size / num_attention_heads (%d): not "
                "modelled", f->path, head_dim, m->n_embd / (m->n_head ? m->n_head : 1));
    if (m->n_head < 1 || m->n_embd % m->n_head)
        ZS_FAIL("%s: \"num_attention_heads\" (%d) must divide \"hidden_size\" (%d)", f->path,
                m->n_head, m->n_embd);
    if (m->n_kv_head > m->n_head || m->n_head % m->n_kv_head)
        ZS_FAIL("%s: \"num_key_value_heads\" (%d) must divide \"num_attention_heads\" (%d)",
                f->path, m->n_kv_head, m->n_head);
    ZS_TRY(zs_hf_act(f, "hidden_act", "silu", NULL));
    ZS_TRY(zs_hf_only(f, "attention_dropout", 0.0, "zerosim has no dropout"));
    ZS_TRY(zs_hf_only(f, "pretraining_tp", 1.0, "a slicing of the linear layers"));
    ZS_TRY(zs_hf_only(f, "router_jitter_noise", 0.0, "zerosim's router has no noise"));
    int bias = 0;
    ZS_TRY(zs_hf_bool(f, "attention_bias", 0, &bias));
    if (bias)
        ZS_FAIL("%s: \"attention_bias\" true (biases of q, k, v and o) is not modelled: Qwen2's "
                "q, k and v biases are", f->path);
    ZS_TRY(zs_hf_bool(f, "mlp_bias", 0, &bias));
    if (bias)
        ZS_FAIL("%s: \"mlp_bias\" true is not modelled", f->path);
    m->qkv_bias = kind == 3;
    ZS_TRY(zs_hf_bool(f, "use_sliding_window", kind != 3, &use_window));
    ZS_TRY(zs_hf_int(f, "sliding_window", 0, 0, 1 << 30, &window));
    m->seq_len = maxpos;
    if (use_window && window > 0 && window < maxpos)
        m->seq_len = window; /* longer sequences would attend through a window */
    m->sliding_window = use_window ? window : 0;
    m->moe_experts = 0;
    if (kind == 2) { /* Mixtral: every block's MLP is E experts, top-k renormalised */
        ZS_TRY(zs_hf_int(f, "num_local_experts", -1, 2, 4096, &m->moe_experts));
        ZS_TRY(zs_hf_int(f, "num_experts_per_tok", -1, 1, 2, &m->moe_top_k));
        ZS_TRY(zs_hf_real(f, "router_aux_loss_coef", 0.001, &m->moe_aux_coeff));
        m->moe_every = 1;
        m->moe_renormalize = 1;
        /* dropless: every expert's capacity is every token, Cap = n */
        m->moe_capacity_factor = (double)m->moe_experts / m->moe_top_k;
        m->moe_min_capacity = 0;
    }
    return 0;
}

static const char *const zs_hf_gpt2_keys[] = {
    "architectures", "model_type", "n_embd", "n_layer", "n_head", "vocab_size", "n_positions",
    "n_ctx", "n_inner", "activation_function", "layer_norm_epsilon", "tie_word_embeddings",
    "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", NULL};

static int zs_hf_gpt2(const zs_hf_file *f, zs_model_config *m)
{
    m->kind = ZS_MODEL_GPT;
    int inner = 0, tied = 1, flag = 0;
    ZS_TRY(zs_hf_int(f, "n_embd", -1, 1, 1 << 20, &m->n_embd));
    ZS_TRY(zs_hf_int(f, "n_layer", -1, 1, 4096, &m->n_layer));
    ZS_TRY(zs_hf_int(f, "n_head", -1, 1, 1 << 16, &m->n_head));
    ZS_TRY(zs_hf_int(f, "vocab_size", -1, 2, 1 << 20, &m->vocab));
    ZS_TRY(zs_hf_int(f, "n_positions", -1, 1, 1 << 20, &m->seq_len));
    ZS_TRY(zs_hf_int(f, "n_inner", 0, 0, 1 << 22, &inner));
    if (inner && inner != 4 * m->n_embd)
        ZS_FAIL("%s: \"n_inner\" %d is not 4 x n_embd: not modelled", f->path, inner);
    ZS_TRY(zs_hf_act(f, "activation_function", "gelu_new", "gelu_pytorch_tanh"));
    ZS_TRY(zs_hf_only(f, "layer_norm_epsilon", 1e-5, "the GPT's LayerNorm epsilon is 1e-5"));
    ZS_TRY(zs_hf_bool(f, "tie_word_embeddings", 1, &tied));
    if (!tied)
        ZS_FAIL("%s: \"tie_word_embeddings\" false is not modelled for GPT-2 (its head is the "
                "embedding)", f->path);
    ZS_TRY(zs_hf_bool(f, "scale_attn_weights", 1, &flag));
    if (!flag)
        ZS_FAIL("%s: \"scale_attn_weights\" false is not modelled", f->path);
    ZS_TRY(zs_hf_bool(f, "scale_attn_by_inverse_layer_idx", 0, &flag));
    if (flag)
        ZS_FAIL("%s: \"scale_attn_by_inverse_layer_idx\" true is not modelled", f->path);
    return 0;
}

/* The keys of the file not in used, ", "-separated, into out. */
static void zs_hf_ignored(const zs_hf_file *f, char *out, size_t n)
{
    const char *key;
    json_t *v;
    size_t len = 0;
    out[0] = '\0';
    json_object_foreach(f->root, key, v) {
        int known = 0;
        for (const char *const *u = f->used; *u && !known; u++)
            known = !strcmp(*u, key);
        if (known || len + strlen(key) + 3 >= n)
            continue;
        len += (size_t)snprintf(out + len, n - len, "%s%s", len ? ", " : "", key);
    }
}

int zs_hf_config_load(const char *path, zs_model_config *m, char *ignored, size_t n)
{
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        ZS_FAIL("%s: not a JSON file (line %d, column %d: %s)", path, je.line, je.column,
                je.text);
    zs_hf_file f = {path, root, NULL};
    json_t *arch = json_object_get(root, "architectures");
    const char *a = json_string_value(json_array_get(arch, 0));
    static const char *const names[] = {"LlamaForCausalLM", "MistralForCausalLM",
                                        "MixtralForCausalLM", "Qwen2ForCausalLM",
                                        "GPT2LMHeadModel"};
    int kind = -1;
    for (int i = 0; a && i < 5; i++)
        if (!strcmp(a, names[i]))
            kind = i;
    int rc = 0;
    if (!json_is_object(root) || json_array_size(arch) != 1 || kind < 0) {
        zs_error_set("%s: architecture \"%s\" is not modelled: zerosim reads LlamaForCausalLM, "
                     "MistralForCausalLM, MixtralForCausalLM, Qwen2ForCausalLM and "
                     "GPT2LMHeadModel", path, a ? a : "(none: no \"architectures\" list of one)");
        rc = -1;
    } else if (kind == 4) {
        f.used = zs_hf_gpt2_keys;
        rc = zs_hf_gpt2(&f, m);
    } else {
        f.used = zs_hf_llama_keys;
        rc = zs_hf_llama(&f, kind, m);
    }
    if (!rc && ignored)
        zs_hf_ignored(&f, ignored, n);
    json_decref(root);
    return rc;
}
