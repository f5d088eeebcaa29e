/* zerosim — held-out loss of a model's parameters (see zerosim/eval.h). */
#include "zerosim/eval.h"
#include "zerosim/data.h"
#include "zerosim/error.h"
#include "zerosim/checkpoint.h"
#include "zerosim/zcfile.h"
#include "zerosim/mem.h"
#include "zerosim/quant.h"
#include "zerosim/quantfile.h"
#include "zerosim/weights.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include <math.h>
#include <stdlib.h>

/* Entry e of a quantized model in the ledger: its quantized tensor laid
 * out in one buffer of category quantized_weights, *t's arrays pointing
 * into it. */
static int zs_eval_hold_quant(zs_mem_t mem, const zs_quant_spec *q, const float *x, size_t rows,
                              size_t cols, zs_qtensor *t, void **buf)
{
    zs_qtensor tmp;
    ZS_TRY(zs_quant_tensor(q, x, rows, cols, &tmp));
    size_t bytes = zs_qtensor_bytes(&tmp);
    if (zs_mem_alloc(mem, ZS_MEM_QUANTIZED, bytes, buf)) {
        zs_qtensor_free(&tmp);
        return -1;
    }
    *t = tmp;
    char *p = *buf;
#define ZS_HOLD(field, n)                                                                   \
    do {                                                                                     \
        if (tmp.field) {                                                                     \
            memcpy(p, tmp.field, n);                                                         \
            t->field = (void *)p;                                                            \
            p += n;                                                                          \
        }                                                                                    \
    } while (0)
    ZS_HOLD(q, tmp.qbytes);
    ZS_HOLD(scale, tmp.ngroups * 4);
    ZS_HOLD(zero, tmp.ngroups);
    ZS_HOLD(scale_q, tmp.ngroups);
    ZS_HOLD(scale_scale, tmp.nsb * 4);
#undef ZS_HOLD
    zs_qtensor_free(&tmp);
    return 0;
}

/* The model's parameters in the ledger: fp32 entries (params) and, with q,
 * the linear weights quantized (quantized_weights) with one unit's
 * dequantized copy (workspace), as an inference would hold them. */
typedef struct {
    zs_mem_t mem;
    const zs_layout *lay;
    void **ebuf;                /* [n_entries] each entry's buffer */
    size_t *ebytes;
    zs_qtensor *qt;             /* [n_entries] (format NONE: fp32) */
    float *stage;               /* one unit's dequantized weights */
    size_t stage_elems;
} zs_eval_params;

static int zs_eval_params_load(zs_eval_params *ep, const zs_model *m, const float *params,
                               const zs_quant_spec *q)
{
    const zs_model_config *mc = zs_model_get_config(m);
    const zs_layout *lay = ep->lay;
    int n = lay->n_entries;
    ep->ebuf = calloc((size_t)n, sizeof *ep->ebuf);
    ep->ebytes = calloc((size_t)n, sizeof *ep->ebytes);
    ep->qt = calloc((size_t)n, sizeof *ep->qt);
    if (!ep->ebuf || !ep->ebytes || !ep->qt)
        ZS_FAIL("out of host memory for the held-out loss");
    for (int i = 0; i < n; i++) {
        const zs_param_entry *e = &lay->entries[i];
        size_t rows, cols;
        if (q && zs_quant_entry_matrix(mc, e, &rows, &cols)) {
            ZS_TRY(zs_eval_hold_quant(ep->mem, q, params + e->offset, rows, cols, &ep->qt[i],
                                      &ep->ebuf[i]));
            ep->ebytes[i] = zs_qtensor_bytes(&ep->qt[i]);
            continue;
        }
        ep->ebytes[i] = e->numel * 4;
        ZS_TRY(zs_mem_alloc(ep->mem, ZS_MEM_PARAMS, ep->ebytes[i], &ep->ebuf[i]));
        memcpy(ep->ebuf[i], params + e->offset, ep->ebytes[i]);
    }
    for (int u = 0; q && u < lay->n_layers; u++) { /* the largest unit's linear weights */
        int ids[ZS_MAX_USES_PUBLIC];
        int k = zs_model_unit_uses(m, u, ids, ZS_MAX_USES_PUBLIC);
        size_t elems = 0;
        for (int j = 0; j < k; j++)
            if (ep->qt[ids[j]].n)
                elems += ep->qt[ids[j]].n;
        if (elems > ep->stage_elems)
            ep->stage_elems = elems;
    }
    if (ep->stage_elems)
        ZS_TRY(zs_mem_alloc(ep->mem, ZS_MEM_WORKSPACE, ep->stage_elems * 4, (void **)&ep->stage));
    return 0;
}

/* P for unit u: fp32 entries in place, quantized ones dequantized into the stage. */
static void zs_eval_params_view(zs_eval_params *ep, const zs_model *m, int u, float **P)
{
    int ids[ZS_MAX_USES_PUBLIC];
    int k = zs_model_unit_uses(m, u, ids, ZS_MAX_USES_PUBLIC);
    size_t pos = 0;
    for (int j = 0; j < k; j++) {
        int i = ids[j];
        if (ep->qt[i].n) {
            zs_dequant_tensor(&ep->qt[i], ep->stage + pos);
            P[i] = ep->stage + pos;
            pos += ep->qt[i].n;
        } else {
            P[i] = ep->ebuf[i];
        }
    }
}

static void zs_eval_params_free(zs_eval_params *ep)
{
    for (int i = 0; ep->ebuf && i < ep->lay->n_entries; i++)
        zs_mem_free(ep->mem, ep->qt[i].n ? ZS_MEM_QUANTIZED : ZS_MEM_PARAMS, ep->ebuf[i],
                    ep->ebytes[i]);
    zs_mem_free(ep->mem, ZS_MEM_WORKSPACE, ep->stage, ep->stage_elems * 4);
    free(ep->ebuf);
    free(ep->ebytes);
    free(ep->qt); /* their arrays live in the ledger's buffers */
}

/* What one evaluation pass reads: the model, its parameters (q: held
 * quantized), the samples (split < 0: synthetic, from ZS_EVAL_FIRST_SAMPLE;
 * else a part of an image set) and the micro-batch. */
typedef struct {
    const zs_model_config *mc;
    const float *params;
    const zs_quant_spec *q;
    uint64_t seed;
    const zs_data *data;  /* an image set, or NULL: synthetic (created here) */
    int split;            /* zs_data_split, or -1 */
    uint64_t samples;
    int mb;
} zs_eval_req;

/* The buffers of one pass, in its own ledger. */
typedef struct {
    zs_backend_t be;
    zs_mem_t mem;
    zs_model *m;
    zs_acts *acts;
    void *dx, *dtok, *dtgt;
    size_t tb, xb;
    int32_t *htok, *htgt;
    float *hx, **P;
    zs_eval_params ep;
} zs_eval_bufs;

static int zs_eval_bufs_open(const zs_eval_req *rq, zs_eval_bufs *b)
{
    const zs_model_config *mc = rq->mc;
    int gpt = zs_model_is_decoder(mc), mb = rq->mb;
    char err[256];
    if (!(b->be = zs_backend_init("cpu", err, sizeof err)))
        ZS_FAIL("%s", err);
    b->mem = zs_mem_create(b->be, 0, 0);
    b->ep.mem = b->mem;
    size_t per = gpt ? (size_t)mc->seq_len : 1;
    b->tb = (size_t)mb * per * sizeof(int32_t);
    b->xb = gpt ? 0 : (size_t)mb * (size_t)mc->input_dim * sizeof(float);
    b->htok = malloc(b->tb + 1);
    b->htgt = malloc(b->tb + 1);
    b->hx = malloc(b->xb + 1);
    if (!b->mem || !b->htok || !b->htgt || !b->hx)
        ZS_FAIL("out of host memory for the held-out loss");
    ZS_TRY(zs_model_create(mc, &b->m));
    b->ep.lay = zs_model_layout(b->m);
    ZS_TRY(zs_eval_params_load(&b->ep, b->m, rq->params, rq->q));
    ZS_TRY(zs_mem_alloc(b->mem, ZS_MEM_WORKSPACE, b->tb, &b->dtgt));
    if (gpt)
        ZS_TRY(zs_mem_alloc(b->mem, ZS_MEM_WORKSPACE, b->tb, &b->dtok));
    else
        ZS_TRY(zs_mem_alloc(b->mem, ZS_MEM_WORKSPACE, b->xb, &b->dx));
    ZS_TRY(zs_model_acts_create(b->m, b->mem, mb, &b->acts));
    if (!(b->P = calloc((size_t)b->ep.lay->n_entries, sizeof *b->P)))
        ZS_FAIL("out of host memory for the held-out loss");
    return 0;
}

static void zs_eval_bufs_close(zs_eval_bufs *b, zs_mem_stats *stats)
{
    if (stats && b->mem)
        zs_mem_get_stats(b->mem, stats);
    free(b->P);
    zs_model_acts_destroy(b->acts);
    if (b->mem) {
        if (b->ep.lay)
            zs_eval_params_free(&b->ep);
        zs_mem_free(b->mem, ZS_MEM_WORKSPACE, b->dtok, b->tb);
        zs_mem_free(b->mem, ZS_MEM_WORKSPACE, b->dtgt, b->tb);
        zs_mem_free(b->mem, ZS_MEM_WORKSPACE, b->dx, b->xb);
        zs_mem_destroy(b->mem);
    }
    zs_model_destroy(b->m);
    if (b->be)
        zs_backend_release(b->be);
    free(b->htok);
    free(b->htgt);
    free(b->hx);
}

/* One pass over rq's samples: synthetic ones give the mean of the
 * micro-batches' losses (*accuracy NaN); a part of an image set the mean
 * of the samples' losses and the share classified right. */
static int zs_eval_pass(const zs_eval_req *rq, double *loss, double *accuracy, double *floor,
                        zs_mem_stats *stats)
{
    zs_eval_bufs b = {0};
    const zs_model_config *mc = rq->mc;
    int gpt = zs_model_is_decoder(mc), mb = rq->mb;
    zs_data *own = NULL;
    int rc = zs_eval_bufs_open(rq, &b);
    if (!rc && !rq->data)
        rc = zs_data_create(mc, rq->seed, &own);
    const zs_data *data = rq->data ? rq->data : own;
    double sum = 0.0;
    uint64_t batches = 0, right = 0;
    zs_batch batch = {.b = mb, .tokens = b.dtok, .targets = b.dtgt, .x = b.dx};
    for (uint64_t first = 0; !rc && first < rq->samples; first += (uint64_t)mb, batches++) {
        if (rq->split >= 0)
            zs_data_fill_split(data, (zs_data_split)rq->split, first, mb, b.htgt, b.hx);
        else if (first + (uint64_t)mb > rq->samples ||
                 (rc = zs_data_fill(data, ZS_EVAL_FIRST_SAMPLE + first, mb, b.htok, b.htgt,
                                    b.hx)))
            break;
        if (gpt)
            zs_backend_copy_h2d(b.be, b.dtok, b.htok, b.tb);
        else
            zs_backend_copy_h2d(b.be, b.dx, b.hx, b.xb);
        zs_backend_copy_h2d(b.be, b.dtgt, b.htgt, b.tb);
        for (int u = 0; u < b.ep.lay->n_layers; u++) {
            zs_eval_params_view(&b.ep, b.m, u, b.P);
            zs_model_forward_unit(b.m, b.be, u, b.P, b.acts, &batch);
        }
        if (rq->split < 0) {
            sum += zs_model_loss(b.acts, b.be);
            continue;
        }
        uint64_t left = rq->samples - first;
        int n = left < (uint64_t)mb ? (int)left : mb, correct;
        double part;
        if ((rc = zs_model_score(b.acts, b.be, b.htgt, n, &part, &correct)))
            break;
        sum += part;
        right += (uint64_t)correct;
    }
    *floor = data ? zs_data_loss_floor(data) : NAN;
    if (!rc && rq->split < 0) {
        *loss = sum / (double)batches;
        *accuracy = NAN;
    } else if (!rc) {
        *loss = sum / (double)rq->samples;
        *accuracy = (double)right / (double)rq->samples;
    }
    zs_data_destroy(own);
    zs_eval_bufs_close(&b, stats);
    return rc;
}

int zs_eval_loss(const zs_model_config *mc, uint64_t seed, const float *params,
                 const zs_quant_spec *q, int samples, int mb, double *loss, double *floor,
                 zs_mem_stats *stats)
{
    *loss = NAN;
    ZS_TRY(zs_model_check_runnable(mc));
    if (mb < 1 || samples < mb || samples % mb)
        ZS_FAIL("held-out samples (%d) must be a positive multiple of the micro-batch (%d)",
                samples, mb);
    zs_eval_req rq = {.mc = mc, .params = params, .q = q, .seed = seed, .split = -1,
                      .samples = (uint64_t)samples, .mb = mb};
    double accuracy;
    return zs_eval_pass(&rq, loss, &accuracy, floor, stats);
}

int zs_eval_split(const zs_model_config *mc, const zs_data *data, zs_data_split split,
                  const float *params, const zs_quant_spec *q, int mb, zs_eval_score *out,
                  zs_mem_stats *stats)
{
    out->loss = out->accuracy = NAN;
    out->samples = zs_data_split_size(data, split);
    if (mc->kind != ZS_MODEL_MLP || !out->samples)
        ZS_FAIL("accuracy is measured on the MLP's image sets (--data DIR|fashion-mnist)");
    if (mb < 1)
        ZS_FAIL("the micro-batch of an evaluation must be positive, got %d", mb);
    zs_eval_req rq = {.mc = mc, .params = params, .q = q, .data = data, .split = (int)split,
                      .samples = out->samples, .mb = mb};
    double floor;
    return zs_eval_pass(&rq, &out->loss, &out->accuracy, &floor, stats);
}

/* ---- sampling ------------------------------------------------------------------- */

/* The uniform draw in [0, 1) of sampled token k: SplitMix64 of (seed, k). */
static double zs_eval_sample_uniform(uint64_t seed, uint64_t k)
{
    uint64_t z = seed ^ (0x9e3779b97f4a7c15ULL * (k + 1));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

/* The token drawn from p[V] at temperature t with the draw u (w: V
 * doubles of scratch): see zs_eval_sample. The weights are taken relative
 * to the most probable token, so none overflows. */
static int32_t zs_eval_sample_pick(const float *p, int V, double t, double u, double *w)
{
    int best = 0;
    for (int k = 1; k < V; k++)
        if (p[k] > p[best])
            best = k;
    if (t <= 0.0 || !(p[best] > 0.0f))
        return best;
    double sum = 0.0, acc = 0.0;
    for (int k = 0; k < V; k++) {
        w[k] = p[k] > 0.0f ? exp(log((double)p[k] / (double)p[best]) / t) : 0.0;
        sum += w[k];
    }
    for (int k = 0; k < V; k++)
        if (w[k] > 0.0 && u * sum < (acc += w[k]))
            return k;
    return best; /* u * sum rounded past the last sum: the likeliest */
}

/* The context's last n (<= T) tokens as one sample (zeros after), and the
 * forward of every unit. */
static void zs_eval_sample_forward(zs_eval_bufs *b, const int32_t *ctx, int n, int T)
{
    for (int t = 0; t < T; t++) {
        b->htok[t] = t < n ? ctx[t] : 0;
        b->htgt[t] = 0;
    }
    zs_backend_copy_h2d(b->be, b->dtok, b->htok, b->tb);
    zs_backend_copy_h2d(b->be, b->dtgt, b->htgt, b->tb);
    zs_batch batch = {.b = 1, .tokens = b->dtok, .targets = b->dtgt, .x = NULL};
    for (int u = 0; u < b->ep.lay->n_layers; u++) {
        zs_eval_params_view(&b->ep, b->m, u, b->P);
        zs_model_forward_unit(b->m, b->be, u, b->P, b->acts, &batch);
    }
}

int zs_eval_sample(const zs_model_config *mc, const float *params, const zs_eval_sample_req *rq,
                   int32_t *out)
{
    if (!zs_model_is_decoder(mc))
        ZS_FAIL("the model is an MLP (a classifier of %d classes): sampling needs a GPT or "
                "Llama-family checkpoint", mc->n_classes);
    ZS_TRY(zs_model_check_runnable(mc));
    if (rq->n_prompt < 1 || rq->n_new < 1)
        ZS_FAIL("sampling needs a prompt of at least one token and at least one token to "
                "generate");
    for (int i = 0; i < rq->n_prompt; i++)
        if (rq->prompt[i] < 0 || rq->prompt[i] >= mc->vocab)
            ZS_FAIL("the prompt's token %d (position %d) is outside the model's vocabulary "
                    "of %d", (int)rq->prompt[i], i, mc->vocab);
    int T = mc->seq_len, V = mc->vocab;
    size_t n_ctx = (size_t)rq->n_prompt + (size_t)rq->n_new;
    int32_t *ctx = malloc(n_ctx * sizeof(int32_t));
    float *p = malloc((size_t)V * sizeof(float));
    double *w = malloc((size_t)V * sizeof(double));
    zs_eval_req er = {.mc = mc, .params = params, .split = -1, .mb = 1};
    zs_eval_bufs b = {0};
    int rc = !ctx || !p || !w ? zs_error_set("out of host memory for sampling") : 0;
    if (!rc)
        rc = zs_eval_bufs_open(&er, &b);
    size_t n = (size_t)rq->n_prompt;
    if (!rc)
        memcpy(ctx, rq->prompt, n * sizeof(int32_t));
    for (int k = 0; !rc && k < rq->n_new; k++) {
        int len = n < (size_t)T ? (int)n : T;
        zs_eval_sample_forward(&b, ctx + n - (size_t)len, len, T);
        if ((rc = zs_model_next_probs(b.acts, b.be, (size_t)len - 1, p)))
            break;
        out[k] = zs_eval_sample_pick(p, V, rq->temperature,
                                     zs_eval_sample_uniform(rq->seed, (uint64_t)k), w);
        ctx[n++] = out[k];
    }
    zs_eval_bufs_close(&b, NULL);
    free(ctx);
    free(p);
    free(w);
    return rc;
}

/* ---- a model from any file -------------------------------------------------------- */

void zs_model_src_free(zs_model_src *s)
{
    free(s->params);
    memset(s, 0, sizeof *s);
}

/* A Llama's weights file: the key/value heads from k_proj's rows; the
 * context, RoPE's theta and the norm's epsilon, which no tensor holds, from
 * the metadata zerosim writes (a file from elsewhere: export it once with
 * its config.json); a Mixtral's experts are not evaluated. */
static int zs_model_src_llama(const char *path, const char *opt, zs_model_config *mc)
{
    if (mc->moe_experts > 0)
        ZS_FAIL("%s %s holds Mixtral's experts (block_sparse_moe): this command evaluates "
                "dense models only; train or export it instead", opt, path);
    ZS_TRY(zs_weights_probe_heads(path, mc));
    if (!mc->seq_len || !(mc->rope_theta > 0.0) || !(mc->norm_eps > 0.0))
        ZS_FAIL("%s %s: the file does not say the Llama's %s (zerosim's metadata n_ctx, "
                "rope_theta, rms_norm_eps): write it once with zerosim export --init-from %s "
                "--hf-config config.json --out FILE", opt, path,
                !mc->seq_len ? "context" : !(mc->rope_theta > 0.0) ? "RoPE theta" : "norm epsilon",
                path);
    mc->moe_top_k = 1;
    return 0;
}

int zs_model_src_load(const char *path, const char *opt, int n_head, zs_model_src *s)
{
    memset(s, 0, sizeof *s);
    struct stat sb;
    if (stat(path, &sb) != 0)
        ZS_FAIL("%s %s: %s", opt, path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        s->kind = "checkpoint";
        s->has_seed = 1;
        return zs_ckpt_read_params(path, opt, &s->mc, &s->seed, &s->params, &s->n);
    }
    s->file_bytes = (uint64_t)sb.st_size;
    if (zs_qfile_is(path)) {
        zs_quant_spec q;
        zs_qfile_stats st;
        s->kind = "quantized";
        s->has_seed = 1;
        ZS_TRY(zs_qfile_read(path, &s->mc, &s->seed, &q, &s->params, &st));
        s->n = zs_model_count_params(&s->mc);
        return 0;
    }
    if (zs_dc_file_is(path)) {
        zs_dc_result r;
        s->kind = "compressed";
        s->has_seed = 1;
        ZS_TRY(zs_dc_read(path, &s->mc, &s->seed, &s->params, &r));
        zs_dc_result_free(&r);
        s->n = zs_model_count_params(&s->mc);
        return 0;
    }
    s->kind = "weights";
    ZS_TRY(zs_weights_probe(path, &s->mc));
    if (!s->mc.n_head)
        s->mc.n_head = n_head;
    if (!s->mc.n_head)
        ZS_FAIL("%s %s: the file does not say the number of heads: give --heads H", opt, path);
    if (s->mc.kind == ZS_MODEL_LLAMA)
        ZS_TRY(zs_model_src_llama(path, opt, &s->mc));
    ZS_TRY(zs_model_config_validate(&s->mc));
    s->n = zs_model_count_params(&s->mc);
    if (!(s->params = malloc(s->n * 4 + 1)))
        ZS_FAIL("out of host memory reading %s", path);
    if (zs_weights_read(path, &s->mc, s->params)) {
        zs_model_src_free(s);
        return -1;
    }
    return 0;
}
