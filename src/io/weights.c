/* zerosim — GPT weights as Hugging Face safetensors and llm.c .bin files
 * (see zerosim/weights.h). */
#include "zerosim/weights.h"
#include "zerosim/error.h"
#include "weights_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ZS_LLMC_MAGIC 20240326
#define ZS_LLMC_VERSION 3
#define ZS_LLMC_HEADER_INTS 256

int zs_weights_format_parse(const char *s, zs_weights_format *out)
{
    if (!strcmp(s, "safetensors"))
        *out = ZS_WEIGHTS_SAFETENSORS;
    else if (!strcmp(s, "bin") || !strcmp(s, "llmc"))
        *out = ZS_WEIGHTS_LLMC;
    else
        ZS_FAIL("--format must be \"safetensors\" or \"bin\" (llm.c's), got \"%s\"", s);
    return 0;
}

static int zs_ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

int zs_weights_format_of(const char *path, zs_weights_format *out)
{
    if (zs_ends_with(path, ".safetensors"))
        *out = ZS_WEIGHTS_SAFETENSORS;
    else if (zs_ends_with(path, ".bin"))
        *out = ZS_WEIGHTS_LLMC;
    else
        ZS_FAIL("%s: cannot tell the format from the name (.safetensors or .bin, llm.c's): "
                "rename it or give --format", path);
    return 0;
}

const char *zs_weights_format_name(zs_weights_format f)
{
    return f == ZS_WEIGHTS_LLMC ? "llm.c bin" : "safetensors";
}

/* ---- the tensors ------------------------------------------------------------- */

/* Hugging Face's name of block entry k (zerosim's order: ln1 w, b, qkv w, b,
 * proj w, b, ln2 w, b, fc w, b, fc proj w, b) and its shape in units of C:
 * rows and columns of zerosim's matrix (cols 0: a vector of rows x C). */
static const struct {
    const char *name;
    int rows, cols; /* multiples of C */
    int transpose;
} zs_block_tensors[12] = {
    {"ln_1.weight", 1, 0, 0},        {"ln_1.bias", 1, 0, 0},
    {"attn.c_attn.weight", 3, 1, 1}, {"attn.c_attn.bias", 3, 0, 0},
    {"attn.c_proj.weight", 1, 1, 1}, {"attn.c_proj.bias", 1, 0, 0},
    {"ln_2.weight", 1, 0, 0},        {"ln_2.bias", 1, 0, 0},
    {"mlp.c_fc.weight", 4, 1, 1},    {"mlp.c_fc.bias", 4, 0, 0},
    {"mlp.c_proj.weight", 1, 4, 1},  {"mlp.c_proj.bias", 1, 0, 0},
};

/* A matrix (rows, cols) of zerosim's layout at *off (cols 0: a vector of
 * rows), and its shape in the file. */
static void zs_gpt_tensor_add(zs_gpt_tensor *x, const char *name, size_t rows, size_t cols,
                              int transpose, size_t *off)
{
    snprintf(x->name, sizeof x->name, "%s", name);
    x->rows = rows;
    x->cols = cols ? cols : 1;
    x->transpose = transpose;
    x->numel = x->rows * x->cols;
    x->offset = *off;
    *off += x->numel;
    if (!cols) {
        x->ndim = 1;
        x->shape[0] = rows;
    } else if (transpose) {
        x->ndim = 2;
        x->shape[0] = cols;
        x->shape[1] = rows;
    } else {
        x->ndim = 2;
        x->shape[0] = rows;
        x->shape[1] = cols;
    }
}

/* A Llama's tensors: its layout's entries, already in Hugging Face's names
 * and (out, in) shapes; a Mixtral block's stacked experts as Hugging Face
 * names them, one tensor per expert (block_sparse_moe.experts.{e}.w1: gate
 * (F, C), w3: up (F, C), w2: down (C, F)), expert e the e-th slice of the
 * stacked entry. */
static int zs_llama_tensors(const zs_model_config *mc, zs_gpt_tensor **out, int *n)
{
    zs_model_config one = *mc;
    one.tp = one.tp_rank = 0;
    one.sequence_parallel = 0;
    one.ckpt_blocks = 0;
    one.pp_on = 0;
    one.moe_ep = 1;
    one.moe_ep_rank = 0;
    one.moe_ep_split = 0;
    if (one.moe_experts > 0) { /* the router's arithmetic changes no tensor */
        one.moe_top_k = one.moe_top_k > 0 ? one.moe_top_k : 1;
        one.moe_capacity_factor = one.moe_capacity_factor > 0.0 ? one.moe_capacity_factor : 1.0;
    }
    zs_model *m;
    ZS_TRY(zs_model_create(&one, &m));
    const zs_layout *lay = zs_model_layout(m);
    int E = mc->moe_experts > 0 ? mc->moe_experts : 1, cnt = 0;
    for (int i = 0; i < lay->n_entries; i++)
        cnt += zs_model_entry_is_expert(&one, i) ? E : 1;
    zs_gpt_tensor *t = calloc((size_t)cnt, sizeof *t);
    if (!t) {
        zs_model_destroy(m);
        ZS_FAIL("out of host memory listing %d tensors", cnt);
    }
    size_t off = 0, C = (size_t)mc->n_embd, F = (size_t)mc->ffn_hidden;
    int k = 0;
    for (int i = 0; i < lay->n_entries; i++) {
        const zs_param_entry *e = &lay->entries[i];
        const char *x = strstr(e->name, ".experts.");
        if (!zs_model_entry_is_expert(&one, i) || !x) {
            size_t cols = zs_model_llama_entry_cols(&one, i);
            zs_gpt_tensor_add(&t[k++], e->name, cols ? e->numel / cols : e->numel, cols, 0,
                              &off);
            continue;
        }
        int down = strstr(x, ".w2.") != NULL, stem = (int)(x - e->name) + 9; /* ".experts." */
        char name[sizeof t->name];
        for (int j = 0; j < E; j++) { /* "...experts." "{j}." "w1.weight" */
            snprintf(name, sizeof name, "%.*s%d.%s", stem, e->name, j, e->name + stem);
            zs_gpt_tensor_add(&t[k++], name, down ? C : F, down ? F : C, 0, &off);
        }
    }
    *n = cnt;
    *out = t;
    zs_model_destroy(m);
    return 0;
}

int zs_gpt_tensors(const zs_model_config *mc, zs_gpt_tensor **out, int *n)
{
    *out = NULL;
    *n = 0;
    if (mc->kind == ZS_MODEL_LLAMA)
        return zs_llama_tensors(mc, out, n);
    if (mc->kind != ZS_MODEL_GPT)
        ZS_FAIL("weight files hold GPT models only (GPT-2's tensor names); the MLP has none");
    if (mc->moe_experts > 0)
        ZS_FAIL("weight files hold dense GPT-2 models only: a mixture of experts (--moe-experts "
                "%d) has no GPT-2 tensor names; use training checkpoints (--save-dir)",
                mc->moe_experts);
    size_t C = (size_t)mc->n_embd, V = (size_t)mc->vocab, T = (size_t)mc->seq_len;
    int L = mc->n_layer, cnt = 4 + 12 * L;
    zs_gpt_tensor *t = calloc((size_t)cnt, sizeof *t);
    if (!t)
        ZS_FAIL("out of host memory listing %d tensors", cnt);
    size_t off = 0;
    int i = 0;
    zs_gpt_tensor_add(&t[i++], "wte.weight", V, C, 0, &off);
    zs_gpt_tensor_add(&t[i++], "wpe.weight", T, C, 0, &off);
    char name[64];
    for (int l = 0; l < L; l++)
        for (int k = 0; k < 12; k++) {
            snprintf(name, sizeof name, "h.%d.%s", l, zs_block_tensors[k].name);
            zs_gpt_tensor_add(&t[i++], name, (size_t)zs_block_tensors[k].rows * C,
                              (size_t)zs_block_tensors[k].cols * C, zs_block_tensors[k].transpose,
                              &off);
        }
    zs_gpt_tensor_add(&t[i++], "ln_f.weight", C, 0, 0, &off);
    zs_gpt_tensor_add(&t[i++], "ln_f.bias", C, 0, 0, &off);
    zs_model_config one = *mc;
    one.tp = one.tp_rank = 0;
    if (off != zs_model_count_params(&one)) {
        free(t);
        ZS_FAIL("internal: GPT-2's tensors hold %zu parameters, zerosim's layout %zu", off,
                zs_model_count_params(&one));
    }
    *out = t;
    *n = cnt;
    return 0;
}

void zs_gpt_tensor_get(const zs_gpt_tensor *t, const float *params, float *out)
{
    const float *src = params + t->offset;
    if (!t->transpose) {
        memcpy(out, src, t->numel * sizeof(float));
        return;
    }
    for (size_t r = 0; r < t->rows; r++) /* out is (cols, rows) */
        for (size_t c = 0; c < t->cols; c++)
            out[c * t->rows + r] = src[r * t->cols + c];
}

void zs_gpt_tensor_put(const zs_gpt_tensor *t, const float *in, float *params)
{
    float *dst = params + t->offset;
    if (!t->transpose) {
        memcpy(dst, in, t->numel * sizeof(float));
        return;
    }
    for (size_t r = 0; r < t->rows; r++)
        for (size_t c = 0; c < t->cols; c++)
            dst[r * t->cols + c] = in[c * t->rows + r];
}

int zs_gpt_st_declare(zs_st_writer *w, const char *prefix, const zs_model_config *mc)
{
    zs_gpt_tensor *t;
    int n;
    ZS_TRY(zs_gpt_tensors(mc, &t, &n));
    int rc = 0;
    char name[192];
    for (int i = 0; i < n && !rc; i++) {
        snprintf(name, sizeof name, "%s%s", prefix, t[i].name);
        rc = zs_st_writer_add(w, name, ZS_ST_F32, t[i].ndim, t[i].shape);
    }
    free(t);
    return rc;
}

int zs_gpt_st_data(zs_st_writer *w, const zs_model_config *mc, const float *params)
{
    zs_gpt_tensor *t;
    int n;
    ZS_TRY(zs_gpt_tensors(mc, &t, &n));
    size_t most = 0;
    for (int i = 0; i < n; i++)
        most = t[i].transpose && t[i].numel > most ? t[i].numel : most;
    float *buf = malloc((most ? most : 1) * sizeof(float));
    int rc = buf ? 0 : zs_error_set("out of host memory writing %s", w->f.path);
    for (int i = 0; i < n && !rc; i++) {
        if (!t[i].transpose) {
            rc = zs_st_writer_data(w, params + t[i].offset, t[i].numel * sizeof(float));
            continue;
        }
        zs_gpt_tensor_get(&t[i], params, buf);
        rc = zs_st_writer_data(w, buf, t[i].numel * sizeof(float));
    }
    free(buf);
    free(t);
    return rc;
}

/* ---- safetensors ----------------------------------------------------------------- */

/* The tensors' data for zs_st_write_sharded: tensor i of the list, in the
 * file's layout. */
typedef struct {
    const zs_gpt_tensor *t;
    const float *params;
    float *buf; /* the largest transposed tensor */
} zs_st_out;

static int zs_st_out_data(void *ctx, int i, zs_st_writer *w)
{
    const zs_st_out *o = ctx;
    const zs_gpt_tensor *t = &o->t[i];
    if (!t->transpose)
        return zs_st_writer_data(w, o->params + t->offset, t->numel * sizeof(float));
    zs_gpt_tensor_get(t, o->params, o->buf);
    return zs_st_writer_data(w, o->buf, t->numel * sizeof(float));
}

/* The GPT's metadata: the shapes the tensors do not say (the heads). */
static int zs_st_meta_gpt(const zs_model_config *mc, char v[][32], const char **meta)
{
    static const char *const keys[5] = {"n_layer", "n_head", "n_embd", "n_ctx", "vocab_size"};
    const int vals[5] = {mc->n_layer, mc->n_head, mc->n_embd, mc->seq_len, mc->vocab};
    meta[0] = "format";
    meta[1] = "pt";
    meta[2] = "producer";
    meta[3] = "zerosim";
    for (int i = 0; i < 5; i++) {
        snprintf(v[i], 32, "%d", vals[i]);
        meta[4 + 2 * i] = keys[i];
        meta[5 + 2 * i] = v[i];
    }
    return 7;
}

static int zs_st_write_model(const char *path, uint64_t shard_bytes, const zs_model_config *mc,
                             const float *params)
{
    zs_gpt_tensor *t;
    int n;
    ZS_TRY(zs_gpt_tensors(mc, &t, &n));
    size_t most = 0;
    for (int i = 0; i < n; i++)
        most = t[i].transpose && t[i].numel > most ? t[i].numel : most;
    zs_st_tensor *decl = calloc((size_t)n + 1, sizeof *decl);
    zs_st_out out = {t, params, malloc((most ? most : 1) * sizeof(float))};
    int rc = decl && out.buf ? 0 : zs_error_set("out of host memory writing %s", path);
    for (int i = 0; i < n && !rc; i++) {
        snprintf(decl[i].name, sizeof decl[i].name, "%s", t[i].name);
        decl[i].dtype = ZS_ST_F32;
        decl[i].ndim = t[i].ndim;
        decl[i].shape[0] = t[i].shape[0];
        decl[i].shape[1] = t[i].shape[1];
    }
    char v[ZS_WEIGHTS_META_MAX][32];
    const char *meta[2 * ZS_WEIGHTS_META_MAX];
    int nmeta = mc->kind == ZS_MODEL_LLAMA ? zs_llama_st_meta(mc, v, meta)
                                           : zs_st_meta_gpt(mc, v, meta);
    if (!rc)
        rc = zs_st_write_sharded(path, shard_bytes, decl, n, meta, nmeta, zs_st_out_data, &out,
                                 NULL);
    free(out.buf);
    free(decl);
    free(t);
    return rc;
}

/* The tensor named name in s, with or without Hugging Face's "transformer."
 * prefix (GPT2LMHeadModel's own files have it, gpt2's model.safetensors not). */
static int zs_st_find_gpt(const zs_st_set *s, const char *name)
{
    int i = zs_st_set_find(s, name);
    if (i >= 0)
        return i;
    char full[128];
    if (strlen(name) + 12 >= sizeof full) /* no tensor has a name that long */
        return -1;
    memcpy(full, "transformer.", 12);
    memcpy(full + 12, name, strlen(name) + 1);
    return zs_st_set_find(s, full);
}

/* Tensors a GPT-2 file may hold that zerosim does not use: the attention's
 * causal-mask buffers, and the head tied to wte. */
static int zs_st_ignorable(const char *name)
{
    if (!strncmp(name, "transformer.", 12))
        name += 12;
    int l, k = 0;
    if (sscanf(name, "h.%d.attn.bias%n", &l, &k) == 1 && k && name[k] == '\0')
        return 1;
    k = 0;
    if (sscanf(name, "h.%d.attn.masked_bias%n", &l, &k) == 1 && k && name[k] == '\0')
        return 1;
    return !strcmp(name, "lm_head.weight");
}

static int zs_st_dim(const char *path, const zs_st_tensor *t, int want_ndim, uint64_t *a,
                     uint64_t *b)
{
    if (t->ndim != want_ndim)
        ZS_FAIL("%s: tensor %s has %d dimensions, GPT-2's has %d", path, t->name, t->ndim,
                want_ndim);
    *a = t->shape[0];
    if (b)
        *b = t->shape[1];
    return 0;
}

int zs_weights_pos_int(const char *path, const char *what, uint64_t v, int *out)
{
    if (v < 1 || v > (1u << 20))
        ZS_FAIL("%s: %s is %llu, outside 1..%d", path, what, (unsigned long long)v, 1 << 20);
    *out = (int)v;
    return 0;
}

/* Shapes from the tensors (wte, wpe, the blocks present) and the metadata. */
static int zs_st_probe(const zs_st_set *s, const char *path, zs_model_config *mc)
{
    int iwte = zs_st_find_gpt(s, "wte.weight"), iwpe = zs_st_find_gpt(s, "wpe.weight");
    if (iwte < 0 || iwpe < 0)
        ZS_FAIL("%s: no tensor %s: neither a GPT-2 nor a Llama-family checkpoint in Hugging "
                "Face's names", path, iwte >= 0 ? "wpe.weight" : "wte.weight (nor "
                "model.embed_tokens.weight)");
    const zs_st_tensor *wte = zs_st_set_tensor(s, iwte), *wpe = zs_st_set_tensor(s, iwpe);
    uint64_t V = 0, C = 0, T = 0, C2 = 0;
    ZS_TRY(zs_st_dim(path, wte, 2, &V, &C));
    ZS_TRY(zs_st_dim(path, wpe, 2, &T, &C2));
    if (C2 != C)
        ZS_FAIL("%s: wpe.weight is [%llu, %llu] but wte.weight has %llu columns", path,
                (unsigned long long)T, (unsigned long long)C2, (unsigned long long)C);
    memset(mc, 0, sizeof *mc);
    mc->kind = ZS_MODEL_GPT;
    ZS_TRY(zs_weights_pos_int(path, "the vocabulary (wte.weight's rows)", V, &mc->vocab));
    ZS_TRY(zs_weights_pos_int(path, "the hidden size (wte.weight's columns)", C, &mc->n_embd));
    ZS_TRY(zs_weights_pos_int(path, "the sequence length (wpe.weight's rows)", T, &mc->seq_len));
    int L = 0;
    char name[64];
    for (;; L++) {
        snprintf(name, sizeof name, "h.%d.ln_1.weight", L);
        if (zs_st_find_gpt(s, name) < 0)
            break;
    }
    if (L < 1)
        ZS_FAIL("%s: no block h.0 (h.0.ln_1.weight): not a GPT-2 checkpoint", path);
    mc->n_layer = L;
    const char *nh = zs_st_set_meta(s, "n_head");
    if (nh) {
        char *end;
        errno = 0;
        long v = strtol(nh, &end, 10);
        if (end == nh || *end || errno || v < 1 || v > (long)C || C % (uint64_t)v)
            ZS_FAIL("%s: metadata n_head \"%s\" must be a positive divisor of the hidden size "
                    "%llu", path, nh, (unsigned long long)C);
        mc->n_head = (int)v;
    }
    return 0;
}

int zs_weights_check_shape(const char *path, const zs_st_tensor *s, const zs_gpt_tensor *t,
                           const char *model)
{
    if (s->dtype != ZS_ST_F32)
        ZS_FAIL("%s: tensor %s is %s; zerosim reads F32 weights (convert the file to float32)",
                path, s->name, zs_st_dtype_name(s->dtype));
    int same = s->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++)
        same = s->shape[d] == t->shape[d];
    if (same)
        return 0;
    char want[64], got[96] = "";
    if (t->ndim == 1)
        snprintf(want, sizeof want, "[%llu]", (unsigned long long)t->shape[0]);
    else
        snprintf(want, sizeof want, "[%llu, %llu]", (unsigned long long)t->shape[0],
                 (unsigned long long)t->shape[1]);
    size_t k = 0;
    for (int d = 0; d < s->ndim && k + 24 < sizeof got; d++)
        k += (size_t)snprintf(got + k, sizeof got - k, "%s%llu", d ? ", " : "",
                              (unsigned long long)s->shape[d]);
    ZS_FAIL("%s: tensor %s has shape [%s], %s has %s", path, s->name, got, model, want);
}

/* Every tensor of mc present, F32, in its shape; no tensor zerosim would
 * not know. */
static int zs_st_check_gpt(const zs_st_set *f, const char *path, const zs_model_config *mc)
{
    /* A file of fewer tensors than the model's lacks one among the model's
     * first f->n + 1 (wte, wpe and the blocks in order): only those are
     * listed, so that a file of a million blocks' first tensors costs no
     * list of twelve million */
    zs_model_config part = *mc;
    int whole = (uint64_t)12 * (uint64_t)mc->n_layer + 4 <= (uint64_t)f->n;
    if (!whole)
        part.n_layer = f->n / 12 + 1;
    zs_gpt_tensor *t;
    int n;
    ZS_TRY(zs_gpt_tensors(&part, &t, &n));
    if (!whole)
        n -= 2; /* the part's ln_f is not where the model has it */
    /* which of the file's tensors the model takes: each looked up once */
    unsigned char *taken = calloc((size_t)f->n + 1, 1);
    int rc = taken ? 0 : zs_error_set("out of host memory reading %s", path);
    char model[96];
    snprintf(model, sizeof model, "GPT-2 (C=%d, V=%d, T=%d)", mc->n_embd, mc->vocab, mc->seq_len);
    for (int i = 0; i < n && !rc; i++) {
        int s = zs_st_find_gpt(f, t[i].name);
        if (s < 0) {
            rc = zs_error_set("%s: missing tensor %s (GPT-2 with %d blocks)", path, t[i].name,
                              mc->n_layer);
            break;
        }
        taken[s] = 1;
        rc = zs_weights_check_shape(zs_st_set_file_path(f, s), zs_st_set_tensor(f, s), &t[i],
                                    model);
    }
    if (!whole && !rc)
        rc = zs_error_set("internal: %s: %d tensors, the model needs %d, but none is missing",
                          path, f->n, 12 * mc->n_layer + 4);
    /* anything else: a mask buffer or the tied head, or another model (a
     * name the model has, under the other prefix, is known too) */
    for (int j = 0; j < f->n && !rc; j++) {
        const char *nm = zs_st_set_tensor(f, j)->name;
        const char *bare = strncmp(nm, "transformer.", 12) ? nm : nm + 12;
        int same = taken[j] || !strncmp(bare, "transformer.", 12) ? -1 : zs_st_find_gpt(f, bare);
        int known = taken[j] || zs_st_ignorable(nm) || (same >= 0 && taken[same]);
        if (!known)
            rc = zs_error_set("%s: tensor %s is not part of a GPT-2 with %d blocks as zerosim "
                              "builds it", zs_st_set_file_path(f, j), nm, mc->n_layer);
    }
    free(taken);
    free(t);
    return rc;
}

/* The tensors of mc (checked first) from the set into params. */
static int zs_st_read_model(const zs_st_set *s, const char *path, const zs_model_config *mc,
                            float *params)
{
    int llama = mc->kind == ZS_MODEL_LLAMA;
    int rc = llama ? zs_llama_st_check(s, path, mc) : zs_st_check_gpt(s, path, mc);
    zs_gpt_tensor *t = NULL;
    int n = 0;
    if (!rc)
        rc = zs_gpt_tensors(mc, &t, &n);
    size_t most = 0;
    for (int i = 0; i < n; i++)
        most = t[i].transpose && t[i].numel > most ? t[i].numel : most;
    float *buf = rc ? NULL : malloc((most ? most : 1) * sizeof(float));
    if (!rc && !buf)
        rc = zs_error_set("out of host memory reading %s", path);
    for (int i = 0; i < n && !rc; i++) {
        int k = llama ? zs_st_set_find(s, t[i].name) : zs_st_find_gpt(s, t[i].name);
        float *dst = t[i].transpose ? buf : params + t[i].offset;
        rc = zs_st_set_read(s, k, 0, dst, t[i].numel * sizeof(float));
        if (!rc && t[i].transpose)
            zs_gpt_tensor_put(&t[i], buf, params);
    }
    free(buf);
    free(t);
    return rc;
}

/* ---- llm.c ---------------------------------------------------------------------- */

static size_t zs_llmc_vp(int V) { return ((size_t)V + 127) / 128 * 128; }

static int zs_llmc_write(const char *path, const zs_model_config *mc, const float *params)
{
    zs_gpt_tensor *t;
    int n;
    ZS_TRY(zs_gpt_tensors(mc, &t, &n));
    int32_t hdr[ZS_LLMC_HEADER_INTS] = {0};
    size_t C = (size_t)mc->n_embd, Vp = zs_llmc_vp(mc->vocab);
    int L = mc->n_layer;
    hdr[0] = ZS_LLMC_MAGIC;
    hdr[1] = ZS_LLMC_VERSION;
    hdr[2] = mc->seq_len;
    hdr[3] = mc->vocab;
    hdr[4] = L;
    hdr[5] = mc->n_head;
    hdr[6] = mc->n_embd;
    hdr[7] = (int32_t)Vp;
    zs_afile a;
    int rc = zs_afile_open(&a, path);
    if (rc) {
        free(t);
        return rc;
    }
    rc = zs_afile_write(&a, hdr, sizeof hdr);
    if (!rc) /* wte, then its pad rows */
        rc = zs_afile_write(&a, params + t[0].offset, t[0].numel * sizeof(float));
    float zero[256] = {0};
    for (size_t k = 0, pad = (Vp - (size_t)mc->vocab) * C; k < pad && !rc; k += 256)
        rc = zs_afile_write(&a, zero, (pad - k < 256 ? pad - k : 256) * sizeof(float));
    if (!rc)
        rc = zs_afile_write(&a, params + t[1].offset, t[1].numel * sizeof(float));
    /* llm.c's tensors 2..13 are the block entries in zerosim's order, each
     * of all blocks, in zerosim's (out, in) rows */
    for (int k = 0; k < 12 && !rc; k++)
        for (int l = 0; l < L && !rc; l++) {
            const zs_gpt_tensor *x = &t[2 + 12 * l + k];
            rc = zs_afile_write(&a, params + x->offset, x->numel * sizeof(float));
        }
    for (int i = n - 2; i < n && !rc; i++)
        rc = zs_afile_write(&a, params + t[i].offset, t[i].numel * sizeof(float));
    free(t);
    if (rc) {
        zs_afile_abort(&a);
        return rc;
    }
    return zs_afile_commit(&a, NULL);
}

/* The header, checked; the file's size in *bytes. */
static int zs_llmc_header(const char *path, int fd, zs_model_config *mc, size_t *vp,
                          uint64_t *bytes)
{
    struct stat st;
    if (fstat(fd, &st))
        ZS_FAIL("%s: %s", path, strerror(errno));
    *bytes = (uint64_t)st.st_size;
    int32_t hdr[ZS_LLMC_HEADER_INTS];
    if (*bytes < sizeof hdr)
        ZS_FAIL("%s: truncated: %llu bytes, shorter than llm.c's header of %zu", path,
                (unsigned long long)*bytes, sizeof hdr);
    ssize_t got = pread(fd, hdr, sizeof hdr, 0);
    if (got != (ssize_t)sizeof hdr)
        ZS_FAIL("%s: cannot read the header: %s", path, got < 0 ? strerror(errno) : "short read");
    if (hdr[0] != ZS_LLMC_MAGIC)
        ZS_FAIL("%s: bad magic %d at offset 0 (llm.c's model files start with %d)", path,
                (int)hdr[0], ZS_LLMC_MAGIC);
    if (hdr[1] != ZS_LLMC_VERSION)
        ZS_FAIL("%s: version %d at offset 4; zerosim reads version %d (fp32)%s", path,
                (int)hdr[1], ZS_LLMC_VERSION,
                hdr[1] == 5 ? ": version 5 holds bf16 weights, export them as fp32" : "");
    static const char *const what[6] = {"maxT", "vocab size", "layers", "heads", "channels",
                                        "padded vocab size"};
    for (int i = 2; i < 8; i++)
        if (hdr[i] < 1 || hdr[i] > (1 << 20))
            ZS_FAIL("%s: header int %d (%s, offset %d) is %d, outside 1..%d", path, i,
                    what[i - 2], 4 * i, (int)hdr[i], 1 << 20);
    if (hdr[7] < hdr[3])
        ZS_FAIL("%s: padded vocab size %d is less than the vocab size %d", path, (int)hdr[7],
                (int)hdr[3]);
    if (hdr[6] % hdr[5])
        ZS_FAIL("%s: %d heads do not divide %d channels", path, (int)hdr[5], (int)hdr[6]);
    memset(mc, 0, sizeof *mc);
    mc->kind = ZS_MODEL_GPT;
    mc->seq_len = hdr[2];
    mc->vocab = hdr[3];
    mc->n_layer = hdr[4];
    mc->n_head = hdr[5];
    mc->n_embd = hdr[6];
    *vp = (size_t)hdr[7];
    /* the size the header implies, overflow-checked: the ints are each at
     * most 2^20, and 12 L C^2 alone nearly fills 64 bits */
    uint64_t C = (uint64_t)mc->n_embd, padded_wte, n, want;
    if (__builtin_mul_overflow((uint64_t)*vp, C, &padded_wte) ||
        __builtin_add_overflow(padded_wte, (uint64_t)zs_model_count_params(mc) -
                                               (uint64_t)mc->vocab * C, &n) ||
        __builtin_mul_overflow(n, (uint64_t)4, &want) ||
        __builtin_add_overflow(want, (uint64_t)sizeof hdr, &want))
        ZS_FAIL("%s: the header's GPT (L=%d, C=%d, V=%d padded to %zu, T=%d) has more bytes "
                "than 64 bits count: not a model file", path, mc->n_layer, mc->n_embd,
                mc->vocab, *vp, mc->seq_len);
    if (*bytes != want)
        ZS_FAIL("%s: %s: %llu bytes, the header's GPT (L=%d, C=%d, V=%d padded to %zu, "
                "T=%d) needs %llu", path, *bytes < want ? "truncated" : "longer than its model",
                (unsigned long long)*bytes, mc->n_layer, mc->n_embd, mc->vocab, *vp,
                mc->seq_len, (unsigned long long)want);
    return 0;
}

static int zs_pread_all(const char *path, int fd, void *dst, size_t n, uint64_t off)
{
    char *p = dst;
    while (n > 0) {
        size_t part = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t got = pread(fd, p, part, (off_t)off);
        if (got <= 0)
            ZS_FAIL("%s: cannot read %zu bytes at offset %llu: %s", path, part,
                    (unsigned long long)off, got < 0 ? strerror(errno) : "end of file");
        p += got;
        n -= (size_t)got;
        off += (uint64_t)got;
    }
    return 0;
}

static int zs_llmc_read(const char *path, const zs_model_config *mc, float *params)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        ZS_FAIL("%s: %s", path, strerror(errno));
    zs_model_config fm;
    size_t vp;
    uint64_t bytes;
    int rc = zs_llmc_header(path, fd, &fm, &vp, &bytes);
    if (!rc && (fm.n_layer != mc->n_layer || fm.n_embd != mc->n_embd || fm.vocab != mc->vocab ||
                fm.seq_len != mc->seq_len || fm.n_head != mc->n_head))
        rc = zs_error_set("%s: the file's GPT differs from the model being loaded", path);
    zs_gpt_tensor *t = NULL;
    int n = 0;
    if (!rc)
        rc = zs_gpt_tensors(mc, &t, &n);
    uint64_t off = 4 * ZS_LLMC_HEADER_INTS;
    size_t C = (size_t)mc->n_embd;
    if (!rc) {
        rc = zs_pread_all(path, fd, params + t[0].offset, t[0].numel * 4, off);
        off += 4 * (uint64_t)vp * C; /* the pad rows are skipped */
    }
    if (!rc) {
        rc = zs_pread_all(path, fd, params + t[1].offset, t[1].numel * 4, off);
        off += 4 * (uint64_t)t[1].numel;
    }
    for (int k = 0; k < 12 && !rc; k++)
        for (int l = 0; l < mc->n_layer && !rc; l++) {
            const zs_gpt_tensor *x = &t[2 + 12 * l + k];
            rc = zs_pread_all(path, fd, params + x->offset, x->numel * 4, off);
            off += 4 * (uint64_t)x->numel;
        }
    for (int i = n - 2; i < n && !rc; i++) {
        rc = zs_pread_all(path, fd, params + t[i].offset, t[i].numel * 4, off);
        off += 4 * (uint64_t)t[i].numel;
    }
    free(t);
    close(fd);
    return rc;
}

/* ---- either ------------------------------------------------------------------------ */

/* The format of an existing file: its first bytes (llm.c's magic), else
 * safetensors (one file, a sharded checkpoint's index, or a folder). */
static int zs_weights_sniff(const char *path, zs_weights_format *f)
{
    struct stat sb;
    *f = ZS_WEIGHTS_SAFETENSORS;
    if (zs_ends_with(path, ".index.json") || (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)))
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        ZS_FAIL("%s: %s", path, strerror(errno));
    int32_t magic = 0;
    ssize_t got = read(fd, &magic, sizeof magic);
    close(fd);
    if (got < 0)
        ZS_FAIL("%s: %s", path, strerror(errno));
    *f = got == (ssize_t)sizeof magic && magic == ZS_LLMC_MAGIC ? ZS_WEIGHTS_LLMC
                                                                 : ZS_WEIGHTS_SAFETENSORS;
    if (*f == ZS_WEIGHTS_SAFETENSORS && zs_ends_with(path, ".bin"))
        *f = ZS_WEIGHTS_LLMC; /* then its magic is named wrong */
    return 0;
}

/* The family of a safetensors set: the Llama family's embedding's name. */
static int zs_st_is_llama(const zs_st_set *s)
{
    return zs_st_set_find(s, "model.embed_tokens.weight") >= 0;
}

int zs_weights_probe(const char *path, zs_model_config *mc)
{
    zs_weights_format f;
    ZS_TRY(zs_weights_sniff(path, &f));
    if (f == ZS_WEIGHTS_LLMC) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            ZS_FAIL("%s: %s", path, strerror(errno));
        size_t vp;
        uint64_t bytes;
        int rc = zs_llmc_header(path, fd, mc, &vp, &bytes);
        close(fd);
        return rc;
    }
    zs_st_set s;
    ZS_TRY(zs_st_set_open(&s, path));
    int rc;
    if (zs_st_is_llama(&s)) {
        rc = zs_llama_st_probe(&s, path, mc);
    } else {
        rc = zs_st_probe(&s, path, mc);
        if (!rc) { /* the rest checked now, with any n_head that divides C */
            zs_model_config any = *mc;
            if (!any.n_head)
                any.n_head = 1;
            rc = zs_st_check_gpt(&s, path, &any);
        }
    }
    zs_st_set_close(&s);
    return rc;
}

int zs_weights_probe_heads(const char *path, zs_model_config *mc)
{
    if (mc->kind != ZS_MODEL_LLAMA || mc->n_kv_head > 0)
        return 0;
    zs_st_set s;
    ZS_TRY(zs_st_set_open(&s, path));
    int rc = zs_llama_st_kv_heads(&s, path, mc);
    zs_st_set_close(&s);
    return rc;
}

int zs_weights_read(const char *path, const zs_model_config *mc, float *params)
{
    zs_weights_format f;
    ZS_TRY(zs_weights_sniff(path, &f));
    if (f == ZS_WEIGHTS_LLMC)
        return zs_llmc_read(path, mc, params);
    zs_st_set s;
    ZS_TRY(zs_st_set_open(&s, path));
    int rc = 0;
    if (mc->kind == ZS_MODEL_GPT && zs_st_is_llama(&s))
        rc = zs_error_set("%s holds a Llama-family model (model.embed_tokens.weight), not a "
                          "GPT-2: give --model llama", path);
    if (!rc)
        rc = zs_st_read_model(&s, path, mc, params);
    zs_st_set_close(&s);
    return rc;
}

int zs_weights_write_sharded(const char *path, zs_weights_format f, const zs_model_config *mc,
                             const float *params, uint64_t shard_bytes)
{
    if (mc->kind != ZS_MODEL_GPT && mc->kind != ZS_MODEL_LLAMA)
        ZS_FAIL("%s: weight files hold the GPT and the Llama family (Hugging Face's names); "
                "the MLP has none", path);
    if (f == ZS_WEIGHTS_LLMC && mc->kind == ZS_MODEL_LLAMA)
        ZS_FAIL("%s: llm.c's .bin holds GPT-2 models only: write the Llama as .safetensors", path);
    if (f == ZS_WEIGHTS_LLMC && shard_bytes)
        ZS_FAIL("%s: --shard-size splits safetensors checkpoints; llm.c's .bin is one file", path);
    return f == ZS_WEIGHTS_LLMC ? zs_llmc_write(path, mc, params)
                                : zs_st_write_model(path, shard_bytes, mc, params);
}

int zs_weights_write(const char *path, zs_weights_format f, const zs_model_config *mc,
                     const float *params)
{
    return zs_weights_write_sharded(path, f, mc, params, 0);
}
