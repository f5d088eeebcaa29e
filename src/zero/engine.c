/* zerosim — the training engine (see zerosim/zero.h).
 *
 * One step:
 *   for each micro-batch a of grad_accum:
 *     forward:  for unit u: view params(u) in fp32 -> forward
 *     backward: for unit u reversed: view params(u), zero fp32 grads(u)
 *               -> backward -> accumulate into the stored gradients
 *   step: overflow check (fp16) -> global norm -> clip -> optimizer -> zero grads
 */
#include "zerosim/zero.h"
#include "zerosim/data.h"
#include "zerosim/error.h"
#include "zerosim/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct zs_engine {
    zs_run_config cfg;
    zs_backend_t be;
    zs_mem_t mem;
    int world, rank;
    zs_model *model;
    zs_data *data;
    const zs_layout *lay;
    size_t psi;                 /* number of parameters */
    zs_dtype pt;                /* storage type of params and grads */
    int mixed;                  /* 1 when pt is bf16/fp16: fp32 master exists */

    void *params, *grads;       /* psi elements of pt */
    float *master, *m, *v;      /* fp32; master == params when !mixed */
    size_t pbytes, gbytes;

    float *stage_p, *stage_g;   /* fp32 staging for one unit (mixed only) */
    size_t stage_elems;
    float **P, **G;             /* fp32 views per entry */

    zs_acts *acts;
    zs_batch batch;             /* device buffers */
    size_t tok_bytes, x_bytes;
    int32_t *h_tokens, *h_targets;
    float *h_x;

    zs_loss_scaler scaler;
    int t;                      /* optimizer steps taken */
};

static size_t zs_unit_elems(const zs_model *m, int u)
{
    int ids[ZS_MAX_USES_PUBLIC];
    int n = zs_model_unit_uses(m, u, ids, ZS_MAX_USES_PUBLIC);
    size_t s = 0;
    for (int i = 0; i < n; i++)
        s += zs_model_layout(m)->entries[ids[i]].numel;
    return s;
}

int zs_engine_create(const zs_run_config *cfg, zs_backend_t be, zs_mem_t mem, int world_size,
                     int rank, zs_engine **out)
{
    *out = NULL;
    zs_engine *e = calloc(1, sizeof *e);
    if (!e)
        ZS_FAIL("out of host memory creating the engine");
    e->cfg = *cfg;
    e->be = be;
    e->mem = mem;
    e->world = world_size;
    e->rank = rank;
    e->pt = cfg->precision;
    e->mixed = cfg->precision != ZS_DTYPE_F32;
    if (zs_model_create(&cfg->model, &e->model) || zs_data_create(&cfg->model, cfg->seed, &e->data))
        goto fail;
    e->lay = zs_model_layout(e->model);
    e->psi = e->lay->num_params;
    size_t ps = zs_dtype_size(e->pt);
    e->pbytes = e->psi * ps;
    e->gbytes = e->psi * ps;

    /* model states */
    if (zs_mem_alloc(mem, ZS_MEM_PARAMS, e->pbytes, &e->params) ||
        zs_mem_alloc(mem, ZS_MEM_GRADS, e->gbytes, &e->grads))
        goto fail;
    if (e->mixed) {
        if (zs_mem_alloc(mem, ZS_MEM_OPT_MASTER, e->psi * 4, (void **)&e->master))
            goto fail;
    } else {
        e->master = e->params;
    }
    if (zs_mem_alloc(mem, ZS_MEM_OPT_M, e->psi * 4, (void **)&e->m))
        goto fail;
    if (cfg->optimizer == ZS_OPT_ADAMW && zs_mem_alloc(mem, ZS_MEM_OPT_V, e->psi * 4, (void **)&e->v))
        goto fail;

    /* fp32 views and, under mixed precision, the staging workspace */
    e->P = calloc((size_t)e->lay->n_entries, sizeof(float *));
    e->G = calloc((size_t)e->lay->n_entries, sizeof(float *));
    if (!e->P || !e->G) {
        zs_error_set("out of host memory creating the engine");
        goto fail;
    }
    if (e->mixed) {
        for (int u = 0; u < e->lay->n_layers; u++) {
            size_t s = zs_unit_elems(e->model, u);
            if (s > e->stage_elems)
                e->stage_elems = s;
        }
        if (zs_mem_alloc(mem, ZS_MEM_WORKSPACE, e->stage_elems * 4, (void **)&e->stage_p) ||
            zs_mem_alloc(mem, ZS_MEM_WORKSPACE, e->stage_elems * 4, (void **)&e->stage_g))
            goto fail;
    }

    /* activations and the micro-batch buffers */
    int mb = cfg->micro_batch;
    if (zs_model_acts_create(e->model, mem, mb, &e->acts))
        goto fail;
    const zs_model_config *mc = &cfg->model;
    size_t ntok = mc->kind == ZS_MODEL_GPT ? (size_t)mb * mc->seq_len : (size_t)mb;
    e->tok_bytes = ntok * sizeof(int32_t);
    e->x_bytes = mc->kind == ZS_MODEL_MLP ? (size_t)mb * mc->input_dim * sizeof(float) : 0;
    e->batch.b = mb;
    if ((mc->kind == ZS_MODEL_GPT &&
         zs_mem_alloc(mem, ZS_MEM_WORKSPACE, e->tok_bytes, (void **)&e->batch.tokens)) ||
        zs_mem_alloc(mem, ZS_MEM_WORKSPACE, e->tok_bytes, (void **)&e->batch.targets) ||
        zs_mem_alloc(mem, ZS_MEM_WORKSPACE, e->x_bytes, (void **)&e->batch.x))
        goto fail;
    e->h_tokens = calloc(ntok, sizeof(int32_t));
    e->h_targets = calloc(ntok, sizeof(int32_t));
    e->h_x = calloc(e->x_bytes / sizeof(float) + 1, sizeof(float));
    if (!e->h_tokens || !e->h_targets || !e->h_x) {
        zs_error_set("out of host memory creating the data buffers");
        goto fail;
    }

    /* initial parameters: the same fp32 vector on every rank */
    float *init = malloc(e->psi * sizeof(float));
    if (!init) {
        zs_error_set("out of host memory initialising %zu parameters", e->psi);
        goto fail;
    }
    zs_model_init_params(e->model, init, cfg->seed);
    zs_backend_copy_h2d(be, e->master, init, e->psi * 4);
    free(init);
    if (e->mixed)
        zs_backend_convert_from_f32(be, e->params, e->pt, e->master, e->psi);

    zs_loss_scaler_init(&e->scaler, cfg);
    *out = e;
    return 0;
fail:
    zs_engine_destroy(e);
    return -1;
}

void zs_engine_destroy(zs_engine *e)
{
    if (!e)
        return;
    zs_mem_t mem = e->mem;
    zs_mem_free(mem, ZS_MEM_PARAMS, e->params, e->pbytes);
    zs_mem_free(mem, ZS_MEM_GRADS, e->grads, e->gbytes);
    if (e->mixed)
        zs_mem_free(mem, ZS_MEM_OPT_MASTER, e->master, e->psi * 4);
    zs_mem_free(mem, ZS_MEM_OPT_M, e->m, e->psi * 4);
    zs_mem_free(mem, ZS_MEM_OPT_V, e->v, e->psi * 4);
    zs_mem_free(mem, ZS_MEM_WORKSPACE, e->stage_p, e->stage_elems * 4);
    zs_mem_free(mem, ZS_MEM_WORKSPACE, e->stage_g, e->stage_elems * 4);
    zs_mem_free(mem, ZS_MEM_WORKSPACE, e->batch.tokens, e->tok_bytes);
    zs_mem_free(mem, ZS_MEM_WORKSPACE, e->batch.targets, e->tok_bytes);
    zs_mem_free(mem, ZS_MEM_WORKSPACE, e->batch.x, e->x_bytes);
    zs_model_acts_destroy(e->acts);
    free(e->P);
    free(e->G);
    free(e->h_tokens);
    free(e->h_targets);
    free(e->h_x);
    zs_data_destroy(e->data);
    zs_model_destroy(e->model);
    free(e);
}

/* Point P[e] at fp32 values of every entry unit u uses; with want_grads also
 * point G[e] at zeroed fp32 accumulators (mixed) or the gradients (fp32). */
static void zs_engine_view_unit(zs_engine *e, int u, int want_grads)
{
    int ids[ZS_MAX_USES_PUBLIC];
    int n = zs_model_unit_uses(e->model, u, ids, ZS_MAX_USES_PUBLIC);
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        const zs_param_entry *pe = &e->lay->entries[ids[i]];
        if (!e->mixed) {
            e->P[ids[i]] = (float *)e->params + pe->offset;
            if (want_grads)
                e->G[ids[i]] = (float *)e->grads + pe->offset;
            continue;
        }
        e->P[ids[i]] = e->stage_p + pos;
        zs_backend_convert_to_f32(e->be, e->stage_p + pos,
                                  (const char *)e->params + pe->offset * zs_dtype_size(e->pt),
                                  e->pt, pe->numel);
        if (want_grads) {
            e->G[ids[i]] = e->stage_g + pos;
            zs_backend_memset0(e->be, e->stage_g + pos, pe->numel * 4);
        }
        pos += pe->numel;
    }
}

/* Mixed precision: add unit u's fp32 gradients into the stored gradients. */
static void zs_engine_commit_grads(zs_engine *e, int u)
{
    if (!e->mixed)
        return;
    int ids[ZS_MAX_USES_PUBLIC];
    int n = zs_model_unit_uses(e->model, u, ids, ZS_MAX_USES_PUBLIC);
    for (int i = 0; i < n; i++) {
        const zs_param_entry *pe = &e->lay->entries[ids[i]];
        zs_backend_accumulate_f32(e->be, (char *)e->grads + pe->offset * zs_dtype_size(e->pt),
                                  e->pt, e->G[ids[i]], pe->numel);
    }
}

/* Load micro-batch `first`.. into the device buffers. */
static void zs_engine_load_batch(zs_engine *e, uint64_t first)
{
    int mb = e->cfg.micro_batch;
    zs_data_fill(e->data, first, mb, e->h_tokens, e->h_targets, e->h_x);
    if (e->batch.tokens)
        zs_backend_copy_h2d(e->be, e->batch.tokens, e->h_tokens, e->tok_bytes);
    zs_backend_copy_h2d(e->be, e->batch.targets, e->h_targets, e->tok_bytes);
    if (e->batch.x)
        zs_backend_copy_h2d(e->be, e->batch.x, e->h_x, e->x_bytes);
}

int zs_engine_step(zs_engine *e, int step, zs_step_info *info)
{
    const zs_run_config *c = &e->cfg;
    int U = e->lay->n_layers, GA = c->grad_accum, MB = c->micro_batch, W = e->world;
    uint64_t global = (uint64_t)MB * (uint64_t)GA * (uint64_t)W;
    float scale = e->scaler.scale;
    float dloss = scale / (float)(GA * W);
    double loss_sum = 0.0;

    for (int a = 0; a < GA; a++) {
        /* micro-batch j = a*W + rank of the step holds samples j*MB .. j*MB+MB-1 */
        uint64_t j = (uint64_t)a * (uint64_t)W + (uint64_t)e->rank;
        zs_engine_load_batch(e, (uint64_t)step * global + j * (uint64_t)MB);
        for (int u = 0; u < U; u++) {
            zs_engine_view_unit(e, u, 0);
            zs_model_forward_unit(e->model, e->be, u, e->P, e->acts, &e->batch);
        }
        float l = zs_model_loss(e->acts, e->be);
        if (!isfinite(l))
            ZS_FAIL("loss is not finite (%g) at step %d: lower --lr or enable gradient_clipping",
                    (double)l, step);
        loss_sum += l;
        for (int u = U - 1; u >= 0; u--) {
            zs_engine_view_unit(e, u, 1);
            zs_model_backward_unit(e->model, e->be, u, e->P, e->G, e->acts, &e->batch, dloss);
            zs_engine_commit_grads(e, u);
        }
    }

    info->loss = (float)(loss_sum / GA);
    info->loss_scale = scale;
    info->lr = zs_lr_at(c, step);
    info->skipped = 0;

    int overflow = 0;
    if (e->pt == ZS_DTYPE_F16)
        overflow = zs_backend_count_nonfinite(e->be, e->grads, e->pt, e->psi) > 0;
    double sumsq = overflow ? INFINITY : zs_backend_sumsq(e->be, e->grads, e->pt, e->psi);
    double norm = sqrt(sumsq) / scale;
    info->grad_norm = (float)norm;
    if (zs_loss_scaler_update(&e->scaler, overflow)) {
        info->skipped = 1;
    } else {
        if (!isfinite(norm))
            ZS_FAIL("gradient norm is not finite at step %d: lower --lr or use fp16 loss scaling",
                    step);
        double coef = 1.0;
        if (c->grad_clip > 0.0f) {
            double cc = c->grad_clip / (norm + 1e-6);
            if (cc < 1.0)
                coef = cc;
        }
        e->t++;
        zs_optim_step(e->be, c, e->t, info->lr, (float)(coef / scale), e->master, e->m, e->v,
                      e->grads, e->pt, e->mixed ? e->params : NULL, e->pt, 0, e->psi);
    }
    zs_backend_memset0(e->be, e->grads, e->gbytes);
    return 0;
}

const zs_model *zs_engine_model(const zs_engine *e) { return e->model; }

size_t zs_engine_num_params(const zs_engine *e) { return e->psi; }

double zs_engine_loss_floor(const zs_engine *e) { return zs_data_loss_floor(e->data); }

void zs_engine_get_params(const zs_engine *e, float *host)
{
    zs_backend_copy_d2h(e->be, host, e->master, e->psi * 4);
}

void zs_param_hash(const float *params, size_t n, char hex[17])
{
    XXH64_hash_t h = XXH3_64bits(params, n * sizeof(float));
    snprintf(hex, 17, "%016llx", (unsigned long long)h);
}

void zs_engine_param_hash(const zs_engine *e, char hex[17])
{
    float *h = malloc(e->psi * sizeof(float));
    if (!h) {
        snprintf(hex, 17, "%s", "unavailable");
        return;
    }
    zs_engine_get_params(e, h);
    zs_param_hash(h, e->psi, hex);
    free(h);
}
