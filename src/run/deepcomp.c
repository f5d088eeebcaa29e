/* zerosim — Deep Compression: prune, share, Huffman-code (see
 * zerosim/deepcomp.h). One process, the cpu backend: the model's own
 * forward and backward over host arrays, Adam written here (it updates
 * masked weights and per-cluster centroids, which the engine's optimizer
 * does not know). */
#include "zerosim/deepcomp.h"
#include "zerosim/data.h"
#include "zerosim/error.h"
#include "zerosim/eval.h"
#include "zerosim/huffman.h"
#include "zerosim/quant.h"
#include "zerosim/zcfile.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DC_SAMPLE_BASE ((uint64_t)1 << 39) /* the training samples: past any run's, before eval's */

void zs_dc_options_default(zs_dc_options *o)
{
    memset(o, 0, sizeof *o);
    o->sparsity = 0.92;
    o->prune_rounds = 3;
    o->retrain_steps = 300;
    o->bits = 5;
    o->index_bits = 5;
    o->kmeans_iters = 30;
    o->finetune_steps = 300;
    o->micro_batch = 32;
    o->lr = 1e-3f;
    o->eval_samples = 1024;
    o->seed = 1234;
}

int zs_dc_options_check(const zs_dc_options *o)
{
    if (!(o->sparsity >= 0.0 && o->sparsity < 1.0))
        ZS_FAIL("--sparsity must be in [0, 1) (the fraction of each layer's weights pruned), "
                "got %g", o->sparsity);
    if (o->n_layer_sparsity < 0 || o->n_layer_sparsity > ZS_DC_MAX_LAYERS)
        ZS_FAIL("--sparsity lists at most %d fractions", ZS_DC_MAX_LAYERS);
    for (int l = 0; l < o->n_layer_sparsity; l++)
        if (!(o->layer_sparsity[l] >= 0.0 && o->layer_sparsity[l] < 1.0))
            ZS_FAIL("--sparsity: fraction %d must be in [0, 1), got %g", l + 1,
                    o->layer_sparsity[l]);
    if (o->bits < 1 || o->bits > 16)
        ZS_FAIL("--bits must be 1 to 16 (2^bits shared weights per layer), got %d", o->bits);
    if (o->index_bits < 1 || o->index_bits > 16)
        ZS_FAIL("--index-bits must be 1 to 16, got %d", o->index_bits);
    if (o->prune_rounds < 1 || o->retrain_steps < 0 || o->finetune_steps < 0 ||
        o->kmeans_iters < 0)
        ZS_FAIL("--prune-rounds must be >= 1 and the step counts >= 0");
    if (o->micro_batch < 1 || !(o->lr > 0.0f) || !isfinite(o->lr))
        ZS_FAIL("--micro-batch must be >= 1 and --lr > 0");
    if (o->eval_samples < 0 || (o->eval_samples && o->eval_samples % o->micro_batch))
        ZS_FAIL("--samples (%d) must be a multiple of --micro-batch (%d)", o->eval_samples,
                o->micro_batch);
    return 0;
}

/* ---- training over host arrays ---------------------------------------------- */

typedef struct {
    const zs_model_config *mc;
    const zs_dc_options *o;
    zs_backend_t be;
    zs_mem_t mem;
    zs_model *m;
    const zs_layout *lay;
    zs_data *data;
    zs_acts *acts;
    float **P, **G;
    float *grad, *am, *av;        /* [n] */
    int32_t *tok, *tgt;
    float *x;
    size_t n;
    int t;                        /* Adam's step */
    /* the linear weights: which entries, their mask and clusters */
    int *lin;                     /* [nlin] entry ids */
    int nlin;
    uint8_t *mask;                /* [n] 1 = kept (every non-linear element 1) */
    uint16_t *idx;                /* [n] cluster of a kept linear weight */
    float *cb, *cm, *cv, *cg;     /* [nlin * K] codebooks, Adam's moments, gradients */
    int K;
    uint64_t sample;
} zs_dc;

static void zs_dc_free(zs_dc *d)
{
    zs_model_acts_destroy(d->acts);
    zs_data_destroy(d->data);
    zs_model_destroy(d->m);
    if (d->mem)
        zs_mem_destroy(d->mem);
    if (d->be)
        zs_backend_release(d->be);
    free(d->P), free(d->G), free(d->grad), free(d->am), free(d->av);
    free(d->tok), free(d->tgt), free(d->x), free(d->lin), free(d->mask), free(d->idx);
    free(d->cb), free(d->cm), free(d->cv), free(d->cg);
}

static int zs_dc_init(zs_dc *d, const zs_model_config *mc, const zs_dc_options *o)
{
    memset(d, 0, sizeof *d);
    d->mc = mc;
    d->o = o;
    char err[256];
    if (!(d->be = zs_backend_init("cpu", err, sizeof err)))
        ZS_FAIL("%s", err);
    if (!zs_backend_host_accessible(d->be))
        ZS_FAIL("internal: the cpu backend's memory is not host memory");
    d->mem = zs_mem_create(d->be, 0, 0);
    ZS_TRY(zs_model_create(mc, &d->m));
    if (o->data)
        ZS_TRY(zs_data_create_images(mc, o->seed, o->data, &d->data));
    else
        ZS_TRY(zs_data_create(mc, o->seed, &d->data));
    ZS_TRY(zs_model_acts_create(d->m, d->mem, o->micro_batch, &d->acts));
    d->lay = zs_model_layout(d->m);
    d->n = d->lay->num_params;
    size_t B = (size_t)o->micro_batch, T = mc->kind != ZS_MODEL_MLP ? (size_t)mc->seq_len : 1;
    d->P = calloc((size_t)d->lay->n_entries, sizeof *d->P);
    d->G = calloc((size_t)d->lay->n_entries, sizeof *d->G);
    d->grad = calloc(d->n + 1, 4);
    d->am = calloc(d->n + 1, 4);
    d->av = calloc(d->n + 1, 4);
    d->tok = calloc(B * T + 1, 4);
    d->tgt = calloc(B * T + 1, 4);
    d->x = calloc(B * (size_t)(mc->kind == ZS_MODEL_MLP ? mc->input_dim : 1) + 1, 4);
    d->lin = calloc((size_t)d->lay->n_entries + 1, sizeof *d->lin);
    d->mask = malloc(d->n + 1);
    d->idx = calloc(d->n + 1, sizeof *d->idx);
    if (!d->mem || !d->P || !d->G || !d->grad || !d->am || !d->av || !d->tok || !d->tgt ||
        !d->x || !d->lin || !d->mask || !d->idx)
        ZS_FAIL("out of host memory for zerosim compress");
    memset(d->mask, 1, d->n);
    for (int i = 0; i < d->lay->n_entries; i++) {
        size_t r, c;
        d->G[i] = d->grad + d->lay->entries[i].offset;
        if (zs_quant_entry_matrix(mc, &d->lay->entries[i], &r, &c))
            d->lin[d->nlin++] = i;
    }
    if (!d->nlin)
        ZS_FAIL("the model has no linear weights to compress");
    if (o->n_layer_sparsity && o->n_layer_sparsity != d->nlin)
        ZS_FAIL("--sparsity lists %d fractions, but the model has %d linear weights (%s first): "
                "give one per linear weight, or one for all", o->n_layer_sparsity, d->nlin,
                d->lay->entries[d->lin[0]].name);
    return 0;
}

/* Gradient of one micro-batch's mean loss at params into d->grad. */
static float zs_dc_grad(zs_dc *d, float *params)
{
    int B = d->o->micro_batch;
    zs_data_fill(d->data, DC_SAMPLE_BASE + d->sample, B, d->tok, d->tgt, d->x);
    d->sample += (uint64_t)B;
    zs_batch batch = {.b = B, .tokens = d->tok, .targets = d->tgt, .x = d->x};
    for (int i = 0; i < d->lay->n_entries; i++)
        d->P[i] = params + d->lay->entries[i].offset;
    memset(d->grad, 0, d->n * 4);
    for (int u = 0; u < d->lay->n_layers; u++)
        zs_model_forward_unit(d->m, d->be, u, d->P, d->acts, &batch);
    float loss = zs_model_loss(d->acts, d->be);
    for (int u = d->lay->n_layers - 1; u >= 0; u--)
        zs_model_backward_unit(d->m, d->be, u, d->P, d->G, d->acts, &batch, 1.0f);
    return loss;
}

static void zs_adam(float *w, const float *g, float *m, float *v, size_t n, float lr, int t)
{
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        w[i] -= lr * (m[i] / c1) / (sqrtf(v[i] / c2) + eps);
    }
}

/* The shared weights: every kept linear weight = its centroid, pruned 0. */
static void zs_dc_apply_codebook(zs_dc *d, float *params)
{
    for (int l = 0; l < d->nlin; l++) {
        const zs_param_entry *e = &d->lay->entries[d->lin[l]];
        const float *cb = d->cb + (size_t)l * (size_t)d->K;
        for (size_t i = e->offset; i < e->offset + e->numel; i++)
            params[i] = d->mask[i] ? cb[d->idx[i]] : 0.0f;
    }
}

/* steps of Adam: pruned weights stay 0; with shared weights, the linear
 * weights move only through their centroids (gradient summed per cluster). */
static void zs_dc_train(zs_dc *d, float *params, int steps, int shared)
{
    for (int s = 0; s < steps; s++) {
        zs_dc_grad(d, params);
        d->t++;
        for (size_t i = 0; i < d->n; i++)
            if (!d->mask[i])
                d->grad[i] = 0.0f;
        if (shared) {
            memset(d->cg, 0, (size_t)d->nlin * (size_t)d->K * 4);
            for (int l = 0; l < d->nlin; l++) {
                const zs_param_entry *e = &d->lay->entries[d->lin[l]];
                float *cg = d->cg + (size_t)l * (size_t)d->K;
                for (size_t i = e->offset; i < e->offset + e->numel; i++) {
                    if (d->mask[i])
                        cg[d->idx[i]] += d->grad[i];
                    d->grad[i] = 0.0f; /* not updated on their own */
                }
            }
            zs_adam(d->cb, d->cg, d->cm, d->cv, (size_t)d->nlin * (size_t)d->K, d->o->lr, d->t);
        }
        zs_adam(params, d->grad, d->am, d->av, d->n, d->o->lr, d->t);
        if (shared)
            zs_dc_apply_codebook(d, params);
        else
            for (size_t i = 0; i < d->n; i++)
                if (!d->mask[i])
                    params[i] = 0.0f;
    }
}

/* ---- pruning and k-means ------------------------------------------------------- */

typedef struct {
    float a;
    size_t i;
} zs_mag;

static int zs_mag_cmp(const void *x, const void *y)
{
    const zs_mag *p = x, *q = y;
    if (p->a != q->a)
        return p->a < q->a ? -1 : 1;
    return p->i < q->i ? -1 : p->i > q->i;
}

/* The fraction of linear weight l pruned at the end. */
static double zs_dc_layer_sparsity(const zs_dc_options *o, int l)
{
    return o->n_layer_sparsity ? o->layer_sparsity[l] : o->sparsity;
}

/* The fraction of linear weight l pruned after round k of the rounds. */
static double zs_dc_round_sparsity(const zs_dc_options *o, int l, int k)
{
    double f = (double)k / (double)o->prune_rounds, s = zs_dc_layer_sparsity(o, l);
    return o->prune_geometric ? 1.0 - pow(1.0 - s, f) : s * f;
}

/* Prune the smallest-magnitude fraction of each linear weight that round
 * k of the rounds reaches (ties in index order). */
static int zs_dc_prune(zs_dc *d, float *params, int k)
{
    for (int l = 0; l < d->nlin; l++) {
        const zs_param_entry *e = &d->lay->entries[d->lin[l]];
        double s = zs_dc_round_sparsity(d->o, l, k);
        zs_mag *v = malloc(e->numel * sizeof *v + 1);
        if (!v)
            ZS_FAIL("out of host memory pruning %s", e->name);
        for (size_t k = 0; k < e->numel; k++)
            v[k] = (zs_mag){fabsf(params[e->offset + k]), e->offset + k};
        qsort(v, e->numel, sizeof *v, zs_mag_cmp);
        size_t cut = (size_t)floor(s * (double)e->numel);
        for (size_t k = 0; k < cut; k++) {
            d->mask[v[k].i] = 0;
            params[v[k].i] = 0.0f;
        }
        free(v);
    }
    return 0;
}

/* Index of the centroid nearest v among the sorted c[0..K) (ties low). */
static int zs_nearest(const float *c, int K, float v)
{
    int lo = 0, hi = K - 1;
    while (lo < hi) { /* the first centroid whose upper midpoint is >= v */
        int mid = (lo + hi) / 2;
        if (v > 0.5f * (c[mid] + c[mid + 1]))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* k-means of layer l's kept weights: linear initialisation between their
 * min and max, Lloyd's iterations in one dimension. */
static void zs_dc_kmeans(zs_dc *d, const float *params, int l)
{
    const zs_param_entry *e = &d->lay->entries[d->lin[l]];
    float *c = d->cb + (size_t)l * (size_t)d->K;
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = e->offset; i < e->offset + e->numel; i++)
        if (d->mask[i]) {
            lo = fminf(lo, params[i]);
            hi = fmaxf(hi, params[i]);
        }
    if (!(lo <= hi))
        lo = hi = 0.0f;
    for (int k = 0; k < d->K; k++)
        c[k] = d->K == 1 ? 0.5f * (lo + hi) : lo + (hi - lo) * (float)k / (float)(d->K - 1);
    double *sum = calloc((size_t)d->K, sizeof *sum);
    size_t *cnt = calloc((size_t)d->K, sizeof *cnt);
    for (int it = 0; it <= d->o->kmeans_iters && sum && cnt; it++) {
        int moved = 0;
        for (size_t i = e->offset; i < e->offset + e->numel; i++)
            if (d->mask[i]) {
                uint16_t a = (uint16_t)zs_nearest(c, d->K, params[i]);
                moved |= it == 0 || a != d->idx[i];
                d->idx[i] = a;
            }
        if (!moved || it == d->o->kmeans_iters)
            break;
        memset(sum, 0, (size_t)d->K * sizeof *sum);
        memset(cnt, 0, (size_t)d->K * sizeof *cnt);
        for (size_t i = e->offset; i < e->offset + e->numel; i++)
            if (d->mask[i]) {
                sum[d->idx[i]] += params[i];
                cnt[d->idx[i]]++;
            }
        for (int k = 0; k < d->K; k++) /* an empty cluster keeps its place */
            if (cnt[k])
                c[k] = (float)(sum[k] / (double)cnt[k]);
    }
    free(sum);
    free(cnt);
}

/* ---- Huffman coding and the file ---------------------------------------------- */

/* Layer l's entries (nonzeros and fillers) as symbols: idx (cluster, or K
 * for a filler) and gap - 1. Counts into the frequencies; with streams,
 * encodes. */
typedef struct {
    uint64_t *fi, *fg;   /* [K + 1], [2^r] */
    uint8_t *li, *lg;
    zs_bitw wi, wg;
    uint64_t entries, nonzeros;
} zs_dc_code;

static int zs_dc_walk(const zs_dc *d, int l, zs_dc_code *c, const zs_huff *hi, const zs_huff *hg)
{
    const zs_param_entry *e = &d->lay->entries[d->lin[l]];
    size_t R = (size_t)1 << d->o->index_bits;
    long long prev = -1;
    for (size_t k = 0; k < e->numel; k++) {
        size_t i = e->offset + k;
        if (!d->mask[i])
            continue;
        while ((size_t)((long long)k - prev) > R) { /* a filler entry */
            prev += (long long)R;
            if (hi) {
                ZS_TRY(zs_huff_put(&c->wi, hi, d->K));
                ZS_TRY(zs_huff_put(&c->wg, hg, (int)R - 1));
            } else {
                c->fi[d->K]++;
                c->fg[R - 1]++;
                c->entries++;
            }
        }
        int g = (int)((long long)k - prev) - 1;
        prev = (long long)k;
        if (hi) {
            ZS_TRY(zs_huff_put(&c->wi, hi, d->idx[i]));
            ZS_TRY(zs_huff_put(&c->wg, hg, g));
        } else {
            c->fi[d->idx[i]]++;
            c->fg[g]++;
            c->entries++;
            c->nonzeros++;
        }
    }
    return 0;
}

static int zs_dc_code_layer(const zs_dc *d, int l, zs_dc_code *c)
{
    int R = 1 << d->o->index_bits;
    memset(c, 0, sizeof *c);
    c->fi = calloc((size_t)d->K + 1, sizeof *c->fi);
    c->fg = calloc((size_t)R, sizeof *c->fg);
    c->li = calloc((size_t)d->K + 1, 1);
    c->lg = calloc((size_t)R, 1);
    if (!c->fi || !c->fg || !c->li || !c->lg)
        ZS_FAIL("out of host memory coding a layer");
    ZS_TRY(zs_dc_walk(d, l, c, NULL, NULL));
    ZS_TRY(zs_huff_lengths(c->fi, d->K + 1, c->li));
    ZS_TRY(zs_huff_lengths(c->fg, R, c->lg));
    zs_huff hi, hg;
    ZS_TRY(zs_huff_build(&hi, c->li, d->K + 1));
    int rc = zs_huff_build(&hg, c->lg, R);
    if (!rc)
        rc = zs_dc_walk(d, l, c, &hi, &hg);
    zs_huff_free(&hi);
    if (!rc)
        zs_huff_free(&hg);
    return rc;
}

static void zs_dc_code_free(zs_dc_code *c)
{
    free(c->fi), free(c->fg), free(c->li), free(c->lg);
    zs_bitw_free(&c->wi);
    zs_bitw_free(&c->wg);
}

/* The file: the coded linear weights and every other entry as it is. */
static int zs_dc_write_file(const zs_dc *d, const float *params, const zs_dc_code *codes,
                            const char *path, zs_dc_result *r)
{
    zs_dc_coded *coded = d->nlin > 0 ? calloc((size_t)d->nlin, sizeof *coded) : NULL;
    if (!coded)
        ZS_FAIL("out of host memory writing %s", path);
    for (int l = 0; l < d->nlin; l++) {
        const zs_dc_code *c = &codes[l];
        coded[l] = (zs_dc_coded){
            .codebook = d->cb + (size_t)l * (size_t)d->K,
            .idx_lengths = c->li, .gap_lengths = c->lg,
            .idx_code = c->wi.buf, .gap_code = c->wg.buf,
            .idx_nbits = c->wi.nbits, .gap_nbits = c->wg.nbits,
            .entries = c->entries, .nonzeros = c->nonzeros};
    }
    const zs_dc_file f = {.mc = d->mc, .layout = d->lay, .seed = d->o->seed,
                          .bits = d->o->bits, .index_bits = d->o->index_bits,
                          .params = params, .coded_entries = d->lin, .coded = coded,
                          .ncoded = d->nlin};
    int rc = zs_dc_write(path, &f, r);
    free(coded);
    return rc;
}

/* The held-out loss; with an image set, the test images' loss and, in
 * *accuracy, their accuracy (else NaN). */
static double zs_dc_eval(const zs_dc *d, const float *params, double *accuracy)
{
    double loss = NAN, floor;
    *accuracy = NAN;
    if (d->o->data) {
        zs_eval_score sc;
        if (zs_eval_split(d->mc, d->data, ZS_DATA_TEST, params, NULL, 500, &sc, NULL))
            return NAN;
        *accuracy = sc.accuracy;
        return sc.loss;
    }
    if (d->o->eval_samples &&
        zs_eval_loss(d->mc, d->o->seed, params, NULL, d->o->eval_samples, d->o->micro_batch, &loss,
                     &floor, NULL))
        return NAN;
    return loss;
}

/* The line after pruning round k: the fractions pruned, the loss (and
 * accuracy). One fraction for all layers prints as it did. */
static void zs_dc_log_round(const zs_dc *d, const float *params, int k)
{
    const zs_dc_options *o = d->o;
    double acc, loss = zs_dc_eval(d, params, &acc);
    if (!o->n_layer_sparsity)
        fprintf(o->log, "pruned to %.4f of each linear weight", zs_dc_round_sparsity(o, 0, k));
    else
        for (int l = 0; l < d->nlin; l++)
            fprintf(o->log, "%s%.4f", l ? "," : "pruned to ", zs_dc_round_sparsity(o, l, k));
    fprintf(o->log, "%s, retrained %d steps: %s loss %.6f", o->n_layer_sparsity ?
            " of the linear weights" : "", o->retrain_steps, o->data ? "test" : "held-out",
            loss);
    if (!isnan(acc))
        fprintf(o->log, ", accuracy %.2f%%", 100.0 * acc);
    fprintf(o->log, "\n");
    fflush(o->log); /* a round takes minutes: show it when it ends */
}

int zs_dc_compress(const zs_model_config *mc, float *params, const zs_dc_options *o,
                   const char *path, zs_dc_result *r)
{
    memset(r, 0, sizeof *r);
    for (int i = 0; i < 4; i++)
        r->accuracy[i] = NAN;
    ZS_TRY(zs_dc_options_check(o));
    zs_dc d;
    zs_dc_code *codes = NULL;
    int rc = zs_dc_init(&d, mc, o);
    if (!rc) {
        d.K = 1 << o->bits;
        size_t nc = (size_t)d.nlin * (size_t)d.K;
        d.cb = calloc(nc, 4), d.cm = calloc(nc, 4), d.cv = calloc(nc, 4), d.cg = calloc(nc, 4);
        codes = calloc((size_t)d.nlin, sizeof *codes);
        r->layers = calloc((size_t)d.nlin, sizeof *r->layers);
        if (!d.cb || !d.cm || !d.cv || !d.cg || !codes || !r->layers)
            rc = zs_error_set("out of host memory for zerosim compress");
    }
    if (!rc) {
        r->nlayers = d.nlin;
        r->dense_bytes = 4 * (uint64_t)d.n;
        r->loss[0] = zs_dc_eval(&d, params, &r->accuracy[0]);
    }
    /* 1. iterative pruning with retraining */
    for (int k = 1; k <= o->prune_rounds && !rc; k++) {
        rc = zs_dc_prune(&d, params, k);
        if (!rc)
            zs_dc_train(&d, params, o->retrain_steps, 0);
        if (!rc && o->log)
            zs_dc_log_round(&d, params, k);
    }
    if (!rc)
        r->loss[1] = zs_dc_eval(&d, params, &r->accuracy[1]);
    /* 2. weight sharing, then centroid fine-tuning */
    for (int l = 0; l < d.nlin && !rc; l++)
        zs_dc_kmeans(&d, params, l);
    if (!rc) {
        zs_dc_apply_codebook(&d, params);
        r->loss[2] = zs_dc_eval(&d, params, &r->accuracy[2]);
        memset(d.am, 0, d.n * 4); /* a fresh Adam for the fine-tuning */
        memset(d.av, 0, d.n * 4);
        d.t = 0;
        zs_dc_train(&d, params, o->finetune_steps, 1);
        r->loss[3] = zs_dc_eval(&d, params, &r->accuracy[3]);
    }
    /* 3. Huffman coding, and the file */
    for (int l = 0; l < d.nlin && !rc; l++) {
        const zs_param_entry *e = &d.lay->entries[d.lin[l]];
        rc = zs_dc_code_layer(&d, l, &codes[l]);
        zs_dc_layer *y = &r->layers[l];
        snprintf(y->name, sizeof y->name, "%s", e->name);
        y->numel = e->numel;
        y->nonzeros = codes[l].nonzeros;
        y->entries = codes[l].entries;
        y->idx_bits = codes[l].wi.nbits;
        y->gap_bits = codes[l].wg.nbits;
        y->codebook_bits = 32 * (uint64_t)d.K;
        y->table_bits = 8 * ((uint64_t)d.K + 1 + ((uint64_t)1 << o->index_bits) + 16);
    }
    if (!rc)
        rc = zs_dc_write_file(&d, params, codes, path, r);
    if (!rc)
        zs_dc_hash(params, d.n, r->param_hash);
    for (int l = 0; codes && l < d.nlin; l++)
        zs_dc_code_free(&codes[l]);
    free(codes);
    zs_dc_free(&d);
    if (rc)
        zs_dc_result_free(r);
    return rc;
}
