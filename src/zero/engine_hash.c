/* zerosim — the engine: results (see engine_impl.h): the parameters
 * gathered to rank 0, their hash in the order of the whole model (tp = 1,
 * --ep 1, the pipeline's stages one after the other), and the step's
 * gradient.
 */
#include "zero/engine_impl.h"
#include "zerosim/error.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

int zs_engine_get_params(zs_engine *e, float *host)
{
    const zs_partition *p = &e->part;
    zs_comm_set_context(e->comm, ZS_PHASE_REPORT, -1);
    int rc = 0;
    if (e->stage == 0) { /* every rank holds all of it */
        if (p->rank == 0)
            zs_backend_copy_d2h(e->be, host, e->master, p->num_params * 4);
        return 0;
    }
    float *shard = malloc(p->shard * sizeof(float));
    float *all = p->rank == 0 ? malloc(p->padded * sizeof(float)) : NULL;
    if (!shard || (p->rank == 0 && !all)) {
        rc = zs_error_set("out of host memory gathering %zu parameters", p->padded);
    } else {
        rc = zs_engine_master_read(e, 0, p->shard, shard);
        if (!rc)
            rc = zs_comm_gather_root(e->comm, shard, (int)p->shard, all, ZS_CT_F32);
        if (!rc && p->rank == 0)
            memcpy(host, all, p->num_params * sizeof(float));
    }
    free(shard);
    free(all);
    return rc;
}

void zs_param_hash(const float *params, size_t n, char hex[17])
{
    XXH64_hash_t h = XXH3_64bits(params, n * sizeof(float));
    snprintf(hex, 17, "%016llx", (unsigned long long)h);
}

/* Collective. The hash streams the parameters through a small host buffer,
 * shard after shard in rank order, so hashing never holds a second copy of
 * the model (which would show in the peak RSS and not in the accounting). */
#define ZS_HASH_CHUNK ((size_t)1 << 18)

/* Tensor parallelism: T shards of n elements each, one after the other in
 * all (TP rank order), into full in the tp = 1 layout order; replicated
 * elements from TP rank 0. */
int zs_engine_tp_unshard(const zs_engine *e, const float *all, size_t n, float *full)
{
    size_t total = zs_model_count_params(&e->cfg.model);
    zs_model_config mc = e->cfg.model;
    int rc = 0;
    for (int q = 0; q < e->tp_size && !rc; q++) {
        zs_model *mq;
        mc.tp_rank = q;
        if ((rc = zs_model_create(&mc, &mq)))
            break;
        for (size_t j = 0; j < n;) {
            size_t run, g = zs_model_tp_global_offset(mq, j, &run);
            if (run == 0 || g == SIZE_MAX || g + run > total) {
                rc = zs_error_set("internal: shard element %zu of TP rank %d maps outside the "
                                  "model", j, q);
                break;
            }
            if (q == 0 || !zs_model_tp_replicated(mq, j))
                memcpy(full + g, all + (size_t)q * n + j, run * sizeof(float));
            j += run;
        }
        zs_model_destroy(mq);
    }
    return rc;
}

/* DeepSpeed's layout: the whole model in --ep 1 order (fmodel's layout),
 * on data-parallel rank 0 into full: the dense entries as gathered without
 * experts, and each expert entry the classes' slices one after the other;
 * data-parallel rank r holds part r / P of class r % P's store (P = ep). */
static int zs_engine_get_ep1_params(zs_engine *e, float *full)
{
    const zs_partition *p = &e->part;
    const zs_step_shape *s = e->shape;
    const zs_layout *flay = zs_model_layout(e->fmodel);
    int N = p->world, P = e->ep_size, lead = p->rank == 0;
    size_t XS = s->xshard;
    float *dense = lead ? malloc(p->padded * sizeof(float) + 1) : NULL;
    float *mine = malloc(XS * sizeof(float) + 1);
    float *all = lead ? malloc((size_t)N * XS * sizeof(float) + 1) : NULL;
    int rc = 0;
    if (!mine || (lead && (!dense || !all)))
        rc = zs_error_set("out of host memory gathering the parameters");
    if (!rc)
        rc = zs_engine_get_params(e, dense);
    if (!rc) { /* the master's part: stage 0 holds the whole store */
        const float *m = e->xmaster + (e->stage == 0 ? (size_t)e->xrank * XS : 0);
        zs_backend_copy_d2h(e->be, mine, m, XS * 4);
        if ((size_t)N * XS > (size_t)INT_MAX)
            rc = zs_error_set("the expert stores (%zu elements) are too large to gather",
                              (size_t)N * XS);
        else
            rc = zs_comm_gather_root(e->comm, mine, (int)XS, all, ZS_CT_F32);
    }
    for (int i = 0; lead && !rc && i < flay->n_entries; i++) {
        const zs_param_entry *ce = &e->lay->entries[i], *fe = &flay->entries[i];
        if (ce->offset < e->xbase) {
            memcpy(full + fe->offset, dense + ce->offset, ce->numel * sizeof(float));
            continue;
        }
        for (int k = 0; k < P; k++)
            for (size_t t = 0; t < ce->numel; t++) {
                size_t j = ce->offset - e->xbase + t; /* in class k's store */
                full[fe->offset + (size_t)k * ce->numel + t] =
                    all[((j / XS) * (size_t)P + (size_t)k) * XS + j % XS];
            }
    }
    free(dense);
    free(mine);
    free(all);
    return rc;
}

/* Tensor parallelism: the parameters in the order of the tp = 1 model.
 * Data-parallel rank 0 of each TP rank gathers its TP shard, TP rank 0 of
 * those gathers them all and puts each element where the tp = 1 layout has
 * it (replicated parameters from TP rank 0). */
int zs_engine_get_full_params(zs_engine *e, float *full)
{
    if (e->xsplit)
        return zs_engine_get_ep1_params(e, full);
    if (!e->tp_comm)
        return zs_engine_get_params(e, full);
    const zs_partition *p = &e->part;
    size_t n = p->num_params;
    int T = e->tp_size, lead = p->rank == 0;
    float *mine = lead ? malloc(n * sizeof(float) + 1) : NULL;
    float *all = lead && e->tp_rank == 0 ? malloc((size_t)T * n * sizeof(float) + 1) : NULL;
    int rc = 0;
    if ((lead && !mine) || (lead && e->tp_rank == 0 && !all))
        rc = zs_error_set("out of host memory gathering the parameters");
    if (!rc)
        rc = zs_engine_get_params(e, mine);
    if (!rc && lead) {
        zs_comm_set_context(e->tp_comm, ZS_PHASE_REPORT, -1);
        if (n > (size_t)INT_MAX)
            rc =
                zs_error_set("a tensor-parallel shard of %zu parameters is too large to gather", n);
        else
            rc = zs_comm_gather_root(e->tp_comm, mine, (int)n, all, ZS_CT_F32);
    }
    if (!rc && all)
        rc = zs_engine_tp_unshard(e, all, n, full);
    free(mine);
    free(all);
    return rc;
}

/* The hash of a tensor-parallel run, over the tp = 1 order, so that runs of
 * any tensor-parallel size hash comparably; unlike the plain hash, world
 * rank 0 holds the whole model once in host memory. */
static int zs_engine_param_hash_tp(zs_engine *e, char hex[17])
{
    int root = e->part.rank == 0 && e->tp_rank == 0;
    size_t total = zs_model_count_params(&e->cfg.model);
    float *full = root ? malloc(total * sizeof(float) + 1) : NULL;
    if (root && !full)
        return zs_error_set("out of host memory hashing %zu parameters", total);
    int rc = zs_engine_get_full_params(e, full);
    if (!rc && root)
        zs_param_hash(full, total, hex);
    free(full);
    return rc;
}

/* 3D: the hash of the tp = 1 order, as zs_engine_param_hash_tp's. World
 * rank 0 collects every rank's part [lo, hi) of its stage (at the stage's
 * base in its TP rank's layout: every T-th world rank holds the next range
 * of that layout), then puts the TP shards into the tp = 1 order; like the
 * TP hash it holds the whole model once in host memory. */
static int zs_engine_hash_3d(zs_engine *e, size_t lo0, size_t hi0, char hex[17])
{
    int wr = zs_comm_rank(e->world), W = zs_comm_size(e->world), T = e->tp_size;
    size_t n = e->lay->num_params, total = zs_model_count_params(&e->cfg.model);
    float *buf = malloc(ZS_HASH_CHUNK * sizeof(float));
    float *all = wr == 0 ? calloc((size_t)T * n + 1, sizeof(float)) : NULL;
    float *full = wr == 0 ? malloc(total * sizeof(float) + 1) : NULL;
    int rc = 0;
    if (!buf || (wr == 0 && (!all || !full)))
        rc = zs_error_set("out of host memory hashing %zu parameters", total);
    const zs_step_shape *s = e->shape;
    for (int i = 0; i < W * s->nchunks && !rc; i++) {
        int q = i % W, c = i / W; /* each rank's part of chunk c */
        size_t lo = s->clo[c] > lo0 ? s->clo[c] : lo0;
        size_t hi = s->clo[c] + s->cn[c] < hi0 ? s->clo[c] + s->cn[c] : hi0;
        uint64_t part[2] = {s->cglo[c] + (lo - s->clo[c]),
                            hi > lo ? hi - lo : 0}; /* where, how many */
        if (q > 0)
            rc = zs_comm_send_to_root(e->world, q, part, 2, ZS_CT_U64);
        if (!rc && part[0] + part[1] > n)
            rc = zs_error_set("internal: rank %d's parameters [%llu, +%llu) are outside its "
                              "tensor-parallel shard of %zu", q, (unsigned long long)part[0],
                              (unsigned long long)part[1], n);
        for (uint64_t off = 0; off < part[1] && !rc; off += ZS_HASH_CHUNK) {
            size_t k = part[1] - off < ZS_HASH_CHUNK ? (size_t)(part[1] - off) : ZS_HASH_CHUNK;
            if (wr == q)
                rc = zs_engine_master_read(e, lo - lo0 + (size_t)off, k, buf);
            if (!rc)
                rc = zs_comm_send_to_root(e->world, q, buf, (int)k, ZS_CT_F32);
            if (!rc && all)
                memcpy(all + (size_t)(q % T) * n + part[0] + off, buf, k * sizeof(float));
        }
    }
    if (!rc && all)
        rc = zs_engine_tp_unshard(e, all, n, full);
    if (!rc && full)
        zs_param_hash(full, total, hex);
    free(buf);
    free(all);
    free(full);
    return rc;
}

/* The check that the last pipeline stage's copy of the tied embedding is
 * the first stage's, byte for byte, for each TP rank q (its own rows of
 * the vocabulary): world rank 0 compares them. */
static int zs_engine_check_tied(zs_engine *e)
{
    const zs_partition *p = &e->part;
    int wr = zs_comm_rank(e->world), D = p->world, T = e->tp_size;
    size_t tb = e->shape->tied_elems * e->param_elsize;
    char *copy = malloc(tb + 1), *own = malloc(tb + 1);
    int rc = 0;
    if (!copy || !own)
        rc = zs_error_set("out of host memory comparing the tied embedding's copies");
    for (int q = 0; q < T && !rc; q++) {
        int holder = q + T * D * (e->pp_size - 1); /* data-parallel rank 0 of the last stage */
        if (wr == holder)
            zs_backend_copy_d2h(e->be, copy, e->tied, tb);
        rc = zs_comm_send_to_root(e->world, holder, copy, (int)e->shape->tied_elems, e->comm_dtype);
        /* the first stage's: data-parallel rank 0 holds it (stage 3: each
         * data-parallel rank its part) */
        for (int d = 0; d < (e->stage == 3 ? D : 1) && !rc; d++) {
            size_t beg = 0, k = e->stage == 3
                                    ? zs_partition_overlap(p, d, 0, e->shape->tied_elems, &beg)
                                    : e->shape->tied_elems;
            int src = q + T * d;
            if (!k || (wr != 0 && wr != src))
                continue;
            if (src == 0 && e->param_nvme) /* offload_param nvme: the shard is in the file */
                rc = zs_engine_swap_params(e, 0, 0, k, own);
            else if (src == 0)
                zs_backend_copy_d2h(e->be, own, e->params, k * e->param_elsize);
            else if (wr == src && e->param_nvme) { /* stage 3: its shard starts at beg */
                rc = zs_engine_swap_params(e, 0, 0, k, own);
                if (!rc)
                    rc = zs_comm_send_to_root(e->world, src, own, (int)k, e->comm_dtype);
            } else if (wr == src)
                rc = zs_comm_send_to_root(e->world, src, e->params, (int)k, e->comm_dtype);
            else
                rc = zs_comm_send_to_root(e->world, src, own + beg * e->param_elsize, (int)k,
                                          e->comm_dtype);
        }
        if (!rc && wr == 0 && memcmp(own, copy, tb) != 0)
            rc = zs_error_set("internal: the last pipeline stage's copy of the tied token "
                              "embedding differs from the first stage's (tensor-parallel rank "
                              "%d)", q);
    }
    free(copy);
    free(own);
    return rc;
}

/* Pipeline: the hash over the stages' parameters one after the other (the
 * whole model's order), streamed to world rank 0 rank by rank in world
 * order (with tensor parallelism, zs_engine_hash_3d); and the check that
 * the last stage's copy of the tied embedding is the first stage's. */
static int zs_engine_param_hash_pp(zs_engine *e, char hex[17])
{
    const zs_partition *p = &e->part;
    int wr = zs_comm_rank(e->world), W = zs_comm_size(e->world);
    zs_comm_set_context(e->world, ZS_PHASE_REPORT, -1);
    /* this rank's part: its shard (stage 0: data-parallel rank 0 all of it) */
    size_t lo = e->stage == 0 ? 0 : p->shard_begin;
    size_t hi = e->stage == 0 ? (p->rank == 0 ? p->num_params : 0) : lo + p->shard;
    if (hi > p->num_params)
        hi = p->num_params;
    if (e->tp_comm) {
        ZS_TRY(zs_engine_hash_3d(e, lo, hi, hex));
        return zs_engine_check_tied(e);
    }
    float *buf = malloc(ZS_HASH_CHUNK * sizeof(float));
    XXH3_state_t *st = wr == 0 ? XXH3_createState() : NULL;
    int rc = 0;
    if (!buf || (wr == 0 && !st))
        rc = zs_error_set("out of host memory hashing the parameters");
    if (st)
        XXH3_64bits_reset(st);
    const zs_step_shape *s = e->shape;
    for (int i = 0; i < W * s->nchunks && !rc; i++) {
        int q = i % W, c = i / W; /* each rank's part of chunk c, in the model's order */
        size_t a = s->clo[c] > lo ? s->clo[c] : lo;
        size_t b = s->clo[c] + s->cn[c] < hi ? s->clo[c] + s->cn[c] : hi;
        uint64_t cnt = b > a ? b - a : 0;
        if (q > 0)
            rc = zs_comm_send_to_root(e->world, q, &cnt, 1, ZS_CT_U64);
        for (uint64_t off = 0; off < cnt && !rc; off += ZS_HASH_CHUNK) {
            size_t n = cnt - off < ZS_HASH_CHUNK ? (size_t)(cnt - off) : ZS_HASH_CHUNK;
            if (wr == q)
                rc = zs_engine_master_read(e, a - lo + (size_t)off, n, buf);
            if (!rc)
                rc = zs_comm_send_to_root(e->world, q, buf, (int)n, ZS_CT_F32);
            if (!rc && st)
                XXH3_64bits_update(st, buf, n * sizeof(float));
        }
    }
    if (!rc && st)
        snprintf(hex, 17, "%016llx", (unsigned long long)XXH3_64bits_digest(st));
    if (st)
        XXH3_freeState(st);
    free(buf);
    return rc ? rc : zs_engine_check_tied(e);
}

int zs_engine_param_hash(zs_engine *e, char hex[17])
{
    if (e->pp_comm && !e->phantom) {
        zs_comm_set_context(e->comm, ZS_PHASE_REPORT, -1);
        hex[0] = '\0';
        return zs_engine_param_hash_pp(e, hex);
    }
    if (e->tp_comm && !e->phantom) {
        zs_comm_set_context(e->comm, ZS_PHASE_REPORT, -1);
        hex[0] = '\0';
        return zs_engine_param_hash_tp(e, hex);
    }
    if (e->xsplit && !e->phantom) { /* over the --ep 1 order, on rank 0 */
        zs_comm_set_context(e->comm, ZS_PHASE_REPORT, -1);
        hex[0] = '\0';
        size_t total = zs_model_layout(e->fmodel)->num_params;
        float *full = e->part.rank == 0 ? malloc(total * sizeof(float) + 1) : NULL;
        if (e->part.rank == 0 && !full)
            ZS_FAIL("out of host memory hashing %zu parameters", total);
        int rc = zs_engine_get_ep1_params(e, full);
        if (!rc && full)
            zs_param_hash(full, total, hex);
        free(full);
        return rc;
    }
    const zs_partition *p = &e->part;
    zs_comm_set_context(e->comm, ZS_PHASE_REPORT, -1);
    hex[0] = '\0';
    if (e->phantom) /* no parameters to hash; the hash stays empty */
        return 0;
    float *buf = malloc(ZS_HASH_CHUNK * sizeof(float));
    XXH3_state_t *st = p->rank == 0 ? XXH3_createState() : NULL;
    int rc = 0;
    if (!buf || (p->rank == 0 && !st))
        rc = zs_error_set("out of host memory hashing the parameters");
    if (st)
        XXH3_64bits_reset(st);
    /* stage 0: rank 0 holds everything; otherwise rank q holds [qS, qS+S) */
    int owners = e->stage == 0 ? 1 : p->world;
    size_t span = e->stage == 0 ? p->padded : p->shard;
    for (int q = 0; q < owners && !rc; q++) {
        size_t base = (size_t)q * span;
        for (size_t off = 0; off < span && base + off < p->num_params && !rc;
             off += ZS_HASH_CHUNK) {
            size_t n = span - off < ZS_HASH_CHUNK ? span - off : ZS_HASH_CHUNK;
            if (base + off + n > p->num_params) /* leave the padding out */
                n = p->num_params - base - off;
            if (p->rank == q)
                rc = zs_engine_master_read(e, off, n, buf);
            if (!rc)
                rc = zs_comm_send_to_root(e->comm, q, buf, (int)n, ZS_CT_F32);
            if (!rc && st)
                XXH3_64bits_update(st, buf, n * sizeof(float));
        }
    }
    if (!rc && st)
        snprintf(hex, 17, "%016llx", (unsigned long long)XXH3_64bits_digest(st));
    if (st)
        XXH3_freeState(st);
    free(buf);
    return rc;
}

/* ---- dumps: the step's gradient ------------------------------------------------ */


int zs_engine_get_full_grads(zs_engine *e, float loss_scale, float *full)
{
    const zs_partition *p = &e->part;
    const zs_run_config *c = &e->cfg;
    /* the reduced shard holds grad x loss scale / post (zs_engine_norm) */
    double post = c->grad_scaling == ZS_GRAD_POSTSCALE ? c->grad_predivide / p->world : 1.0;
    double mul = post / (double)loss_scale;
    int lead = p->rank == 0, root = lead && e->tp_rank == 0;
    /* 1-bit Adam after its freeze: the gradient is each rank's own (on one
     * rank, the whole of it, summed with dloss scale / grad_accum) */
    const void *grad = e->gshard;
    if (e->grads_local && p->world > 1)
        ZS_FAIL("the gradients of a step after 1-bit Adam's freeze are each rank's own, not "
                "one array: dump them on one rank, or only the steps up to freeze_step");
    if (e->grads_local)
        grad = e->gfull;
    size_t n = p->num_params;
    float *shard = malloc(p->shard * sizeof(float) + 1);
    void *raw = malloc(p->shard * e->grad_elsize + 1);
    float *mine = lead ? malloc(p->padded * sizeof(float)) : NULL;
    float *all = root && e->tp_comm ? malloc((size_t)e->tp_size * n * sizeof(float) + 1) : NULL;
    int rc = 0;
    if (!shard || !raw || (lead && !mine) || (root && e->tp_comm && !all))
        rc = zs_error_set("out of host memory gathering %zu gradients", p->padded);
    if (!rc) {
        zs_comm_set_context(e->comm, ZS_PHASE_REPORT, -1);
        zs_backend_copy_d2h(e->be, raw, grad, p->shard * e->grad_elsize);
        for (size_t i = 0; i < p->shard; i++) {
            float g = e->grad_dtype == ZS_DTYPE_F32
                          ? ((const float *)raw)[i]
                          : zs_engine_half_to_f32(((const uint16_t *)raw)[i], e->grad_dtype);
            shard[i] = (float)((double)g * mul);
        }
        rc = zs_comm_gather_root(e->comm, shard, (int)p->shard, mine, ZS_CT_F32);
    }
    if (!rc && lead && !e->tp_comm)
        memcpy(full, mine, n * sizeof(float));
    if (!rc && lead && e->tp_comm) { /* as zs_engine_get_full_params: into the tp = 1 order */
        zs_comm_set_context(e->tp_comm, ZS_PHASE_REPORT, -1);
        rc = zs_comm_gather_root(e->tp_comm, mine, (int)n, all, ZS_CT_F32);
        if (!rc && root)
            rc = zs_engine_tp_unshard(e, all, n, full);
    }
    free(shard);
    free(raw);
    free(mine);
    free(all);
    return rc;
}
