/* zerosim — the engine: the state between steps (see zerosim/zero.h and
 * engine_impl.h): the ranges of the master and moments this rank holds,
 * reading and writing them (in memory or in the swap file), the expert
 * store's states in DeepSpeed's layout, the counters, and the parameters
 * set from a whole model.
 */
#include "zero/engine_impl.h"
#include "zerosim/error.h"

#include <stdlib.h>
#include <string.h>

static size_t zs_clip(size_t lo, size_t n, size_t base, size_t len, size_t *a, size_t *b);

/* DeepSpeed's layout: the store elements this rank keeps optimizer states
 * of (master, moments): all of its experts in stage 0, else its shard over
 * edp. */
void zs_engine_expert_state_range(const zs_engine *e, size_t *lo, size_t *n)
{
    *lo = e->xsplit && e->stage != 0 ? (size_t)e->xrank * e->shape->xshard : 0;
    *n = !e->xsplit ? 0 : e->stage == 0 ? e->shape->xpadded : e->shape->xshard;
}

void zs_engine_expert_shard(const zs_engine *e, size_t *lo, size_t *n)
{
    *lo = e->xsplit ? (size_t)e->xrank * e->shape->xshard : 0;
    *n = e->xsplit ? e->shape->xshard : 0;
}

void zs_engine_expert_load_range(const zs_engine *e, zs_state_kind k, size_t *lo, size_t *n)
{
    zs_engine_expert_state_range(e, lo, n);
    if (e->xsplit && k == ZS_STATE_MASTER && (e->stage == 1 || e->stage == 2)) {
        *lo = 0; /* the working copy holds all of them */
        *n = e->shape->xpadded;
    }
}

static float *zs_engine_xstate_ptr(zs_engine *e, zs_state_kind k)
{
    return k == ZS_STATE_MASTER ? e->xmaster : k == ZS_STATE_EXP_AVG ? e->xexp_avg
         : k == ZS_STATE_EXP_AVG_SQ ? e->xexp_avg_sq : NULL;
}

int zs_engine_read_expert_state(zs_engine *e, zs_state_kind k, size_t lo, size_t n, float *host)
{
    size_t base, len;
    zs_engine_expert_state_range(e, &base, &len);
    if (k == ZS_STATE_RESIDUAL || !zs_engine_has_state(e, k) || lo < base || n > len ||
        lo - base > len - n)
        ZS_FAIL("internal: expert state %d elements [%zu, %zu) are not this rank's", (int)k, lo,
                lo + n);
    if (!e->phantom)
        zs_backend_copy_d2h(e->be, host, zs_engine_xstate_ptr(e, k) + (lo - base), n * 4);
    return 0;
}

int zs_engine_write_expert_state(zs_engine *e, zs_state_kind k, size_t lo, size_t n,
                                 const float *host)
{
    if (k == ZS_STATE_RESIDUAL || !zs_engine_has_state(e, k) || !e->xsplit ||
        lo > e->shape->xpadded || n > e->shape->xpadded - lo)
        ZS_FAIL("internal: expert state %d elements [%zu, %zu) are outside the store", (int)k,
                lo, lo + n);
    if (e->phantom)
        return 0;
    if (k != ZS_STATE_MASTER) {
        size_t base, len, a, b;
        zs_engine_expert_state_range(e, &base, &len);
        if (zs_clip(lo, n, base, len, &a, &b))
            zs_backend_copy_h2d(e->be, zs_engine_xstate_ptr(e, k) + (a - base), host + (a - lo),
                                (b - a) * 4);
        return 0;
    }
    /* the master and the working copy, rounded through the init staging
     * buffer a piece at a time */
    const zs_buf_spec *ib = &e->shape->buf[ZS_BUF_INIT];
    void *tmp = NULL;
    if (ib->bytes && zs_mem_alloc(e->mem, ib->cat, ib->bytes, &tmp))
        ZS_FAIL("cannot stage the expert parameters being loaded: %s", zs_error_msg());
    for (size_t off = 0; off < n; off += ZS_INIT_CHUNK) {
        size_t m = n - off < ZS_INIT_CHUNK ? n - off : ZS_INIT_CHUNK;
        zs_engine_put_xmaster(e, lo + off, m, host + off, tmp);
    }
    if (tmp)
        zs_mem_free(e->mem, ib->cat, tmp, ib->bytes);
    return 0;
}

int zs_engine_has_state(const zs_engine *e, zs_state_kind k)
{
    switch (k) {
    case ZS_STATE_MASTER: return 1;
    case ZS_STATE_EXP_AVG: return e->shape->buf[ZS_BUF_M].bytes > 0;
    case ZS_STATE_EXP_AVG_SQ: return e->shape->buf[ZS_BUF_V].bytes > 0;
    case ZS_STATE_RESIDUAL: return e->shape->buf[ZS_BUF_RESIDUAL].bytes > 0;
    default: return 0;
    }
}

void zs_engine_state_range(const zs_engine *e, zs_state_kind k, size_t *lo, size_t *n)
{
    const zs_partition *p = &e->part;
    if (k == ZS_STATE_RESIDUAL) { /* this rank's own, whole */
        *lo = 0;
        *n = e->shape->buf[ZS_BUF_RESIDUAL].bytes / 4;
    } else if (e->stage == 0) {
        *lo = 0;
        *n = p->padded;
    } else {
        *lo = p->shard_begin;
        *n = p->shard;
    }
}

void zs_engine_load_range(const zs_engine *e, zs_state_kind k, size_t *lo, size_t *n)
{
    zs_engine_state_range(e, k, lo, n);
    if (k == ZS_STATE_MASTER && (e->stage == 1 || e->stage == 2)) {
        *lo = 0;
        *n = e->part.padded;
    }
}

/* Where state k's element lo lives (NULL when the run has none). */
static float *zs_engine_state_ptr(zs_engine *e, zs_state_kind k, size_t lo)
{
    size_t base, n;
    zs_engine_state_range(e, k, &base, &n);
    float *a = k == ZS_STATE_MASTER ? e->master : k == ZS_STATE_EXP_AVG ? e->exp_avg
             : k == ZS_STATE_EXP_AVG_SQ ? e->exp_avg_sq : e->residual;
    return a ? a + (lo - base) : NULL;
}

int zs_engine_read_state(zs_engine *e, zs_state_kind k, size_t lo, size_t n, float *host)
{
    size_t base, len;
    zs_engine_state_range(e, k, &base, &len);
    if (!zs_engine_has_state(e, k) || lo < base || n > len || lo - base > len - n)
        ZS_FAIL("internal: state %d elements [%zu, %zu) are not this rank's", (int)k, lo, lo + n);
    if (e->phantom)
        return 0;
    if (e->offload == ZS_OFFLOAD_NVME && k != ZS_STATE_RESIDUAL) /* in the swap file */
        return zs_engine_swap_io(e, 0, (int)k, lo - base, n, host);
    zs_backend_copy_d2h(e->be, host, zs_engine_state_ptr(e, k, lo), n * 4);
    return 0;
}

/* The part of [lo, lo + n) inside [base, base + len): its start, or n when none. */
static size_t zs_clip(size_t lo, size_t n, size_t base, size_t len, size_t *a, size_t *b)
{
    *a = lo > base ? lo : base;
    *b = lo + n < base + len ? lo + n : base + len;
    return *a < *b;
}

int zs_engine_write_state(zs_engine *e, zs_state_kind k, size_t lo, size_t n, const float *host)
{
    const zs_partition *p = &e->part;
    size_t base, len, a, b;
    zs_engine_state_range(e, k, &base, &len);
    size_t limit = k == ZS_STATE_RESIDUAL ? len : p->padded;
    if (!zs_engine_has_state(e, k) || lo > limit || n > limit - lo)
        ZS_FAIL("internal: state %d elements [%zu, %zu) are outside the layout", (int)k, lo,
                lo + n);
    if (e->phantom)
        return 0;
    if (k != ZS_STATE_MASTER || e->sep_master) {
        if (zs_clip(lo, n, base, len, &a, &b)) {
            if (e->offload == ZS_OFFLOAD_NVME && k != ZS_STATE_RESIDUAL)
                ZS_TRY(zs_engine_swap_io(e, 1, (int)k, a - base, b - a, (float *)host + (a - lo)));
            else
                zs_backend_copy_h2d(e->be, zs_engine_state_ptr(e, k, a), host + (a - lo),
                                    (b - a) * 4);
        }
    }
    if (k != ZS_STATE_MASTER)
        return 0;
    /* the working copy: everything in stages 0-2, the shard in stage 3 */
    size_t plo = e->stage == 3 ? p->shard_begin : 0, plen = e->stage == 3 ? p->shard : p->padded;
    if (!zs_clip(lo, n, plo, plen, &a, &b))
        return 0;
    if (e->param_nvme) { /* rounded on the host, then into the file */
        zs_backend_convert_from_f32(e->be, e->hparam, e->param_dtype, host + (a - lo), b - a);
        return zs_engine_swap_params(e, 1, a - plo, b - a, e->hparam);
    }
    char *dst = (char *)e->params + (a - plo) * e->param_elsize;
    if (!e->mixed) {
        zs_backend_copy_h2d(e->be, dst, host + (a - lo), (b - a) * 4);
        return 0;
    }
    /* rounded through the init staging buffer, a piece at a time */
    const zs_buf_spec *ib = &e->shape->buf[ZS_BUF_INIT];
    size_t chunk = ib->bytes / 4;
    void *tmp = NULL;
    if (chunk == 0 || zs_mem_alloc(e->mem, ib->cat, ib->bytes, &tmp))
        ZS_FAIL("cannot stage the parameters being loaded: %s", zs_error_msg());
    for (size_t i = a; i < b; i += chunk) {
        size_t m = b - i < chunk ? b - i : chunk;
        zs_backend_copy_h2d(e->be, tmp, host + (i - lo), m * 4);
        zs_backend_convert_from_f32(e->be, dst + (i - a) * e->param_elsize, e->param_dtype, tmp, m);
    }
    zs_mem_free(e->mem, ib->cat, tmp, ib->bytes);
    return 0;
}

void zs_engine_get_counters(const zs_engine *e, zs_engine_counters *c)
{
    c->t = e->opt_steps;
    c->loss_scale = e->scaler.scale;
    c->cur_hysteresis = e->scaler.cur_hysteresis;
    c->good_steps = e->scaler.good_steps;
    c->overflows = e->scaler.overflows;
}

void zs_engine_set_counters(zs_engine *e, const zs_engine_counters *c)
{
    e->opt_steps = c->t;
    e->scaler.scale = c->loss_scale;
    e->scaler.cur_hysteresis = c->cur_hysteresis;
    e->scaler.good_steps = c->good_steps;
    e->scaler.overflows = c->overflows;
}

/* The master's range of the flat arrays from src: the tp = 1 model's
 * order through lm's tensor-parallel map, or (lm NULL) src in the flat
 * order itself. */
static int zs_engine_set_flat_params(zs_engine *e, const zs_model *lm, const float *src,
                                     size_t total)
{
    const zs_partition *p = &e->part;
    size_t lo, n;
    zs_engine_load_range(e, ZS_STATE_MASTER, &lo, &n);
    float *buf = malloc(ZS_INIT_CHUNK * sizeof(float));
    if (!buf)
        ZS_FAIL("out of host memory setting the parameters");
    int rc = 0;
    for (size_t off = lo; off < lo + n && !rc; off += ZS_INIT_CHUNK) {
        size_t m = lo + n - off < ZS_INIT_CHUNK ? lo + n - off : ZS_INIT_CHUNK;
        for (size_t j = 0; j < m;) {
            size_t g = off + j;
            if (g >= p->num_params) { /* the padding */
                buf[j++] = 0.0f;
                continue;
            }
            size_t run = p->num_params - g, at = g;
            if (lm)
                at = zs_model_tp_global_offset(lm, g, &run);
            if (run > m - j)
                run = m - j;
            if (run == 0 || at == SIZE_MAX || at + run > total) {
                rc = zs_error_set("internal: parameter %zu maps outside the model", g);
                break;
            }
            memcpy(buf + j, src + at, run * sizeof(float));
            j += run;
        }
        if (!rc)
            rc = zs_engine_write_state(e, ZS_STATE_MASTER, off, m, buf);
    }
    free(buf);
    return rc;
}

/* DeepSpeed's layout (the inverse of zs_engine_get_ep1_params): the dense
 * entries from full (the --ep 1 order) into their places before xbase, and
 * each expert entry's slice of this rank's class (rank % ep) into the
 * class's expert store. */
static int zs_engine_set_ep1_params(zs_engine *e, const float *full)
{
    const zs_layout *flay = zs_model_layout(e->fmodel);
    size_t nd = e->part.num_params, XP = e->shape->xpadded;
    size_t k = (size_t)(zs_comm_rank(e->comm) % e->ep_size);
    float *dense = malloc(nd * sizeof(float) + 1), *store = calloc(XP + 1, sizeof(float));
    int rc = dense && store ? 0 : zs_error_set("out of host memory setting the parameters");
    for (int i = 0; !rc && i < flay->n_entries; i++) {
        const zs_param_entry *ce = &e->lay->entries[i], *fe = &flay->entries[i];
        if (ce->offset < e->xbase)
            memcpy(dense + ce->offset, full + fe->offset, ce->numel * sizeof(float));
        else
            memcpy(store + (ce->offset - e->xbase), full + fe->offset + k * ce->numel,
                   ce->numel * sizeof(float));
    }
    if (!rc)
        rc = zs_engine_set_flat_params(e, NULL, dense, nd);
    if (!rc)
        rc = zs_engine_write_expert_state(e, ZS_STATE_MASTER, 0, XP, store);
    free(dense);
    free(store);
    return rc;
}

int zs_engine_set_full_params(zs_engine *e, const float *full)
{
    if (e->xsplit)
        return zs_engine_set_ep1_params(e, full);
    /* --ep 1's layout under expert parallelism: the flat arrays are the
     * whole model's (fmodel), as zs_engine_init draws them */
    const zs_model *lm = e->fmodel ? e->fmodel : e->model;
    return zs_engine_set_flat_params(e, lm, full, zs_model_count_params(&e->cfg.model));
}
