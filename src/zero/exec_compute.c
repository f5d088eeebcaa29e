/* zerosim — the engine: micro-batches and the compute of a unit (see
 * engine_impl.h): the batch loaded, each unit's fp32 views of the
 * parameters it uses (direct, or converted into the staging workspace;
 * --qat's fake quantization), its forward and backward on the model, and
 * its gradients committed into the stored gradient.
 */
#include "zero/engine_impl.h"
#include "zerosim/error.h"
#include "zerosim/mesh.h"

#include <stdint.h>

static int zs_engine_load_batch(zs_engine *e, uint64_t first)
{
    int mb = e->cfg.micro_batch;
    if (e->data)
        ZS_TRY(zs_data_fill(e->data, first, mb, e->h_tokens, e->h_targets, e->h_x));
    if (e->data && e->cfg.cp > 1) { /* context parallelism: this rank's chunks */
        ZS_TRY(zs_model_cp_local_tokens(zs_model_get_config(e->model), e->h_tokens, mb));
        ZS_TRY(zs_model_cp_local_tokens(zs_model_get_config(e->model), e->h_targets, mb));
    }
    if (e->batch.tokens)
        zs_backend_copy_h2d(e->be, e->batch.tokens, e->h_tokens, e->shape->tok_bytes);
    zs_backend_copy_h2d(e->be, e->batch.targets, e->h_targets, e->shape->tok_bytes);
    if (e->batch.x)
        zs_backend_copy_h2d(e->be, e->batch.x, e->h_x, e->shape->x_bytes);
    return 0;
}

/* ---- views --------------------------------------------------------------- */

/* The part of entry id that the computing model uses: all of it, or with
 * expert parallelism this rank's experts of a stacked expert entry (the
 * ep_rank-th of ep_size equal slices); its first element in *first. */
static size_t zs_engine_slice(const zs_engine *e, int id, size_t *first)
{
    size_t n = e->clay->entries[id].numel;
    *first = n < e->lay->entries[id].numel ? (size_t)e->ep_rank * n : 0;
    return n;
}

/* unit_params[id] for every entry unit u uses; with grads, unit_grads[id] =
 * zeroed staging. */
static void zs_engine_view_unit(zs_engine *e, int u, int want_grads)
{
    int ids[ZS_MAX_USES_PUBLIC];
    int n = zs_model_unit_uses(e->model, u, ids, ZS_MAX_USES_PUBLIC);
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        const zs_param_entry *pe = &e->lay->entries[ids[i]];
        size_t so, numel = zs_engine_slice(e, ids[i], &so);
        const void *src = (const char *)zs_engine_entry_params(e, u, ids[i]) + so * e->param_elsize;
        size_t rows, cols;
        int fake = e->qat.format != ZS_QUANT_NONE &&
                   zs_quant_entry_matrix(&e->cfg.model, pe, &rows, &cols);
        if (e->mixed || fake) {
            zs_backend_convert_to_f32(e->be, e->stage_p + pos, src, e->param_dtype, numel);
            e->unit_params[ids[i]] = e->stage_p + pos;
            /* QAT: forward and backward see the weights quantized and
             * dequantized; their gradient goes to the fp32 master weights
             * unchanged (the straight-through estimator: absmax never
             * clamps, so every element is inside the range) */
            if (fake && !e->phantom)
                zs_quant_fake(&e->qat, e->stage_p + pos, e->stage_p + pos, NULL, rows, cols);
        } else {
            e->unit_params[ids[i]] = (float *)src;
        }
        if (want_grads) { /* every expert's (moe_ep_home) */
            e->unit_grads[ids[i]] = e->stage_g + pos;
            zs_backend_memset0(e->be, e->stage_g + pos, pe->numel * 4);
        }
        pos += pe->numel;
    }
}

/* ---- gradients ----------------------------------------------------------- */

/* Add unit u's staged fp32 gradients into the stored gradient: the full
 * buffer (stages 0, 1) or the bucket buffers covering each entry (2, 3),
 * which the program gave their buffers before this unit's backward. */
/* Add fp32 gradients src of entry id into the stored gradient. */
int zs_engine_commit_entry(zs_engine *e, int id, const float *src)
{
    const zs_param_entry *pe = &e->lay->entries[id];
    size_t lo = 0;
    if (!zs_step_entry_local(e->shape, e->lay, id, &lo))
        ZS_FAIL("internal: a gradient of an entry this rank does not hold (%d)", id);
    size_t hi = lo + pe->numel;
    if (e->stage <= 1) {
        zs_backend_accumulate_f32(e->be, (char *)e->gfull + lo * e->grad_elsize, e->grad_dtype,
                                  src, pe->numel);
        return 0;
    }
    for (int k = 0; k < e->shape->nbuckets; k++) {
        const zs_step_range *b = &e->shape->buckets[k];
        size_t s = lo > b->lo ? lo : b->lo, t = hi < b->hi ? hi : b->hi;
        if (t <= s)
            continue;
        if (!e->bucket_buf[k])
            ZS_FAIL("internal: bucket %d written before the program gave it a buffer", k);
        zs_backend_accumulate_f32(e->be, (char *)e->bucket_buf[k] + (s - b->lo) * e->grad_elsize,
                                  e->grad_dtype, src + (s - lo), t - s);
    }
    return 0;
}

static int zs_engine_commit_grads(zs_engine *e, int u, const zs_acts *a)
{
    int ids[ZS_MAX_USES_PUBLIC];
    int n = zs_model_unit_uses(e->model, u, ids, ZS_MAX_USES_PUBLIC);
    size_t xlo = SIZE_MAX, xn = 0;
    for (int i = 0; i < n; i++) {
        const zs_param_entry *pe = &e->lay->entries[ids[i]];
        if (e->xsplit && pe->offset >= e->xbase) { /* an expert entry: the store */
            size_t at = pe->offset - e->xbase;
            xlo = at < xlo ? at : xlo;
            xn += pe->numel;
            /* without deterministic mode: the model's sum over the
             * sources, added into the step's gradient (reduced over edp
             * after the last backward where edp has more than one rank) */
            if (!e->det)
                zs_backend_accumulate_f32(e->be, (char *)e->xgacc + at * e->param_elsize,
                                          e->param_dtype, e->unit_grads[ids[i]], pe->numel);
            continue;
        }
        /* the last stage's tied copy: its gradient goes to the first stage */
        size_t lo;
        if (!zs_step_entry_local(e->shape, e->lay, ids[i], &lo))
            continue;
        ZS_TRY(zs_engine_commit_entry(e, ids[i], e->unit_grads[ids[i]]));
    }
    if (xn && e->det)
        ZS_TRY(zs_engine_commit_experts(e, xlo, xn, a));
    return 0;
}

/* ---- executors ------------------------------------------------------------- */

/* Micro-batch j = a*N + rank of the step holds samples j*MB .. j*MB+MB-1.
 * With context parallelism N and rank are the pure data-parallel ones (the
 * combined group's size and member over cp): a context group's ranks load
 * the same samples and take their chunks. */
int zs_engine_exec_load(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    const zs_run_config *c = &e->cfg;
    int cp_rank, data_rank, N = e->part.world / (c->cp > 1 ? c->cp : 1);
    zs_mesh_cp_split(e->part.rank, c->cp, &cp_rank, &data_rank);
    (void)cp_rank; /* the model knows its chunks (cfg.model.cp_rank) */
    uint64_t global = (uint64_t)c->micro_batch * (uint64_t)c->grad_accum * (uint64_t)N;
    uint64_t j = (uint64_t)o->micro * (uint64_t)N + (uint64_t)data_rank;
    return zs_engine_load_batch(e, (uint64_t)e->step * global + j * (uint64_t)c->micro_batch);
}

int zs_engine_exec_forward(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    int u = o->unit;
    zs_model *m = e->cmodel[e->shape->uchunk[u]];
    ZS_TRY(zs_engine_gather_experts(e, u));
    zs_engine_view_unit(e, u, 0);
    zs_model_acts_set_recompute(zs_engine_slot(e, o), (o->flags & ZS_SOPF_RECOMPUTE) != 0);
    zs_model_forward_unit(m, e->be, u, e->unit_params, zs_engine_slot(e, o), &e->batch);
    if (e->pp_laux)
        zs_engine_pp_keep_aux(e, o);
    return zs_model_tp_failed(m) ? -1 : 0;
}

/* With a pipeline of MoE blocks the last stage keeps the token loss: the
 * step's loss adds every stage's aux terms to it (zs_engine_pp_aux_loss). */
int zs_engine_exec_loss(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    if (e->pp_token_loss)
        e->pp_token_loss[o->micro] = zs_model_token_loss(zs_engine_slot(e, o), e->be);
    else
        e->loss_local[o->micro] = zs_model_loss(zs_engine_slot(e, o), e->be);
    return 0;
}

int zs_engine_exec_backward(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    int u = o->unit;
    zs_model *m = e->cmodel[e->shape->uchunk[u]];
    ZS_TRY(zs_engine_gather_experts(e, u));
    zs_engine_view_unit(e, u, 1);
    zs_model_backward_unit(m, e->be, u, e->unit_params, e->unit_grads, zs_engine_slot(e, o),
                           &e->batch, e->dloss);
    if (zs_model_tp_failed(m))
        return -1;
    return zs_engine_commit_grads(e, u, zs_engine_slot(e, o));
}
