/* zerosim — the ZeRO engine (see zerosim/zero.h).
 *
 * Partition: the flat layout is padded to Ψp (a multiple of N) and rank r
 * owns [r*S, (r+1)*S), S = Ψp/N.
 *
 * Gradient buckets: [0, Ψp) is cut into ranges of at most reduce_bucket_size
 * elements, walking the units from the last one (backward order); a bucket
 * is ready once the lowest unit overlapping it has run its backward.
 *
 * One step, every stage:
 *   zero the gradient shard accumulator
 *   for each micro-batch:
 *     forward:  for unit u: [stage 3: allgather u's parameters] -> compute
 *               -> [stage 3: release]
 *     backward: for unit u reversed: [stage 3: allgather] -> compute fp32
 *               gradients in a staging workspace -> add them into the
 *               full-size gradient buffer (stages 0, 1) or the bucket buffers
 *               (stages 2, 3) -> [stage 3: release]; stages 2, 3 reduce-
 *               scatter each bucket as soon as it is ready and free it;
 *               stages 0, 1 reduce-scatter the same buckets after backward
 *     each bucket's reduced part is added into the shard accumulator
 *   step: overflow flag and global norm (per-block sums, summed in a fixed
 *         order on every rank) -> clip coefficient -> optimizer on the shard
 *         (stages 1-3) or on everything after allgathering the gradient
 *         shards (stage 0) -> stages 1, 2: allgather the updated parameters
 *
 * Because every stage reduces the same buckets per micro-batch with the same
 * calls, and accumulates the reduced parts in the same order, stages 0-3
 * give byte-identical parameters for a fixed N (the invariant "bit-exact
 * stages"). In deterministic mode each micro-batch's gradient is turned into
 * int64 fixed point before the reduction, so every sum is exact and the
 * result does not depend on N or on how MPI orders the sum.
 */
#include "zerosim/zero.h"
#include "zerosim/comm.h"
#include "zerosim/compress.h"
#include "zerosim/data.h"
#include "zerosim/error.h"
#include "zerosim/optim.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct {
    size_t lo, hi;      /* flat range */
    int ready_unit;     /* reduce after this unit's backward */
    int *counts;        /* [N] elements of the range each rank owns */
    size_t rbegin;      /* this rank's part: first element and count */
    size_t rcount;
    void *buf;          /* stages 2, 3: full-size buffer while alive */
} zs_bucket;

typedef struct {        /* a flat range that a unit gathers (stage 3) */
    size_t lo, hi;
    int *counts, *displs;
} zs_range;

typedef struct {
    zs_range r[ZS_MAX_USES_PUBLIC];
    int n;
    size_t elems;
    void *buf[ZS_MAX_USES_PUBLIC];   /* gathered buffers, NULL when released */
    void *req[ZS_MAX_USES_PUBLIC];   /* pending prefetch */
    int live;
} zs_unit_gather;

struct zs_engine {
    zs_run_config cfg;
    zs_backend_t be;
    int phantom;                /* a phantom backend: buffers hold nothing */
    zs_mem_t mem;
    zs_comm_t comm;
    zs_partition part;
    int stage, det;
    zs_model *model;
    zs_data *data;
    const zs_layout *lay;
    int U;                      /* units */
    zs_dtype pt;                /* storage type of params and grads */
    size_t ps;                  /* its size */
    int mixed;
    zs_comm_type ct;            /* comm type of gradients and params */

    /* model states; "full" arrays have Ψp elements, shards S */
    void *params;               /* stages 0-2 full, stage 3 shard */
    size_t params_elems;
    float *master, *m, *v;      /* stage 0 full, else shard; master aliases
                                   the params when !mixed */
    size_t opt_elems;
    void *gfull;                /* stages 0, 1: full gradient buffer */
    void *gshard;               /* reduced gradient shard (pt) */
    int64_t *gacc;              /* deterministic: fixed-point shard accumulator */

    zs_bucket *buckets;
    int nbuckets;
    size_t max_bucket, max_rcount;
    size_t max_chunk;           /* largest part of a bucket any rank owns */
    void *ring;                 /* ring reduce-scatter scratch: 2 * max_chunk */
    size_t ring_bytes;
    void *recv;                 /* this rank's part of one bucket (pt or int64) */
    int64_t *fixbuf;            /* deterministic: one bucket in fixed point */
    int frac_bits;
    int64_t fix_limit;
    size_t fix_overflows;

    zs_unit_gather *gath;       /* stage 3, per unit */
    size_t live, live_peak;

    float *stage_p, *stage_g;   /* fp32 staging for one unit */
    size_t stage_elems;
    float **P, **G;

    zs_acts *acts;
    zs_batch batch;
    size_t tok_bytes, x_bytes;
    int32_t *h_tokens, *h_targets;
    float *h_x;

    /* gradient compression: replaces the reduce-scatter of each bucket */
    int comp_on, comp_now;
    float *residual;            /* error feedback, Ψp fp32 (category compression) */
    float *cx, *capprox, *cacc; /* fp32 workspaces: a bucket, its approximation,
                                   this rank's part */
    char *csend, *crecv;        /* compressed bytes out and in */
    size_t csend_bytes, crecv_bytes;
    int *scount, *sdispl, *rcount, *rdispl;

    size_t norm_block;          /* elements per norm block */
    double *norm_local, *norm_all;
    float *loss_local, *loss_all;

    zs_loss_scaler scaler;
    int t;
};

/* ---- partition --------------------------------------------------------- */

void zs_partition_make(zs_partition *p, size_t num_params, int world, int rank, int deterministic)
{
    size_t q = (size_t)world * (deterministic ? ZS_DET_BLOCK : 1);
    p->world = world;
    p->rank = rank;
    p->num_params = num_params;
    p->padded = (num_params + q - 1) / q * q;
    if (p->padded == 0)
        p->padded = q;
    p->shard = p->padded / (size_t)world;
    p->shard_begin = (size_t)rank * p->shard;
}

size_t zs_partition_overlap(const zs_partition *p, int q, size_t lo, size_t hi, size_t *begin)
{
    size_t a = (size_t)q * p->shard, b = a + p->shard;
    size_t s = lo > a ? lo : a, e = hi < b ? hi : b;
    *begin = s;
    return e > s ? e - s : 0;
}

/* ---- set-up ------------------------------------------------------------- */

static int zs_engine_check_int(size_t n, const char *what)
{
    if (n > (size_t)INT_MAX)
        ZS_FAIL("%s of %zu elements is more than one MPI call can carry (%d): lower "
                "reduce_bucket_size / allgather_bucket_size or use more ranks", what, n, INT_MAX);
    return 0;
}

/* Cut [0, Ψp) into buckets from the end, at unit boundaries where possible. */
static int zs_engine_make_buckets(zs_engine *e)
{
    size_t B = e->cfg.reduce_bucket_size ? e->cfg.reduce_bucket_size : e->part.padded;
    int cap = 16, n = 0;
    zs_bucket *bk = calloc((size_t)cap, sizeof *bk);
    if (!bk)
        ZS_FAIL("out of host memory planning gradient buckets");
    size_t hi = e->part.padded; /* the open bucket is [lo, hi) */
    size_t lo = hi;
    int ready = e->U - 1;
    for (int u = e->U - 1; u >= 0; u--) {
        size_t uo = e->lay->layer_offset[u];
        size_t un = (u == e->U - 1 ? e->part.padded : e->lay->layer_offset[u + 1]) - uo;
        /* close the open bucket when this unit would overflow it */
        if (lo < hi && (hi - lo) + un > B) {
            if (n == cap) {
                cap *= 2;
                zs_bucket *t = realloc(bk, (size_t)cap * sizeof *bk);
                if (!t) { free(bk); ZS_FAIL("out of host memory planning gradient buckets"); }
                bk = t;
            }
            bk[n++] = (zs_bucket){.lo = lo, .hi = hi, .ready_unit = ready};
            hi = lo;
        }
        lo = uo;
        ready = u;
        while (hi - lo > B) { /* a unit larger than a bucket: cut pieces from its end */
            if (n == cap) {
                cap *= 2;
                zs_bucket *t = realloc(bk, (size_t)cap * sizeof *bk);
                if (!t) { free(bk); ZS_FAIL("out of host memory planning gradient buckets"); }
                bk = t;
            }
            bk[n++] = (zs_bucket){.lo = hi - B, .hi = hi, .ready_unit = u};
            hi -= B;
        }
    }
    if (hi > lo) {
        if (n == cap) {
            zs_bucket *t = realloc(bk, (size_t)(cap + 1) * sizeof *bk);
            if (!t) { free(bk); ZS_FAIL("out of host memory planning gradient buckets"); }
            bk = t;
        }
        bk[n++] = (zs_bucket){.lo = lo, .hi = hi, .ready_unit = ready};
    }
    e->buckets = bk;
    e->nbuckets = n;
    int N = e->part.world;
    for (int i = 0; i < n; i++) {
        zs_bucket *b = &bk[i];
        ZS_TRY(zs_engine_check_int(b->hi - b->lo, "a gradient bucket"));
        b->counts = calloc((size_t)N, sizeof(int));
        if (!b->counts)
            ZS_FAIL("out of host memory planning gradient buckets");
        for (int q = 0; q < N; q++) {
            size_t beg;
            b->counts[q] = (int)zs_partition_overlap(&e->part, q, b->lo, b->hi, &beg);
            if (q == e->part.rank) {
                b->rbegin = beg;
                b->rcount = (size_t)b->counts[q];
            }
        }
        if (b->hi - b->lo > e->max_bucket)
            e->max_bucket = b->hi - b->lo;
        if (b->rcount > e->max_rcount)
            e->max_rcount = b->rcount;
        for (int q = 0; q < N; q++)
            if ((size_t)b->counts[q] > e->max_chunk)
                e->max_chunk = (size_t)b->counts[q];
    }
    return 0;
}

static int zs_range_init(zs_engine *e, zs_range *r, size_t lo, size_t hi)
{
    int N = e->part.world;
    r->lo = lo;
    r->hi = hi;
    r->counts = calloc((size_t)N, sizeof(int));
    r->displs = calloc((size_t)N, sizeof(int));
    if (!r->counts || !r->displs)
        ZS_FAIL("out of host memory planning parameter gathers");
    ZS_TRY(zs_engine_check_int(hi - lo, "a parameter gather"));
    for (int q = 0; q < N; q++) {
        size_t beg;
        r->counts[q] = (int)zs_partition_overlap(&e->part, q, lo, hi, &beg);
        r->displs[q] = r->counts[q] ? (int)(beg - lo) : 0;
    }
    return 0;
}

/* Stage 3: the ranges each unit gathers: its own range, then borrowed entries. */
static int zs_engine_plan_gathers(zs_engine *e)
{
    e->gath = calloc((size_t)e->U, sizeof *e->gath);
    if (!e->gath)
        ZS_FAIL("out of host memory planning parameter gathers");
    for (int u = 0; u < e->U; u++) {
        zs_unit_gather *g = &e->gath[u];
        size_t lo = e->lay->layer_offset[u], hi = lo + e->lay->layer_numel[u];
        ZS_TRY(zs_range_init(e, &g->r[g->n++], lo, hi));
        int ids[ZS_MAX_USES_PUBLIC];
        int n = zs_model_unit_uses(e->model, u, ids, ZS_MAX_USES_PUBLIC);
        for (int i = 0; i < n; i++) {
            const zs_param_entry *pe = &e->lay->entries[ids[i]];
            if (pe->layer == u)
                continue;
            ZS_TRY(zs_range_init(e, &g->r[g->n++], pe->offset, pe->offset + pe->numel));
        }
        for (int i = 0; i < g->n; i++)
            g->elems += g->r[i].hi - g->r[i].lo;
        if (g->elems > e->cfg.stage3_max_live_parameters)
            ZS_FAIL("stage3_max_live_parameters (%zu) is smaller than unit %d, which needs %zu "
                    "gathered parameters at once: raise it to at least %zu",
                    e->cfg.stage3_max_live_parameters, u, g->elems, g->elems);
    }
    return 0;
}

#define ZS_ALLOC(cat, bytes, ptr) zs_mem_alloc(e->mem, cat, bytes, (void **)(ptr))

static int zs_engine_alloc_states(zs_engine *e)
{
    const zs_partition *p = &e->part;
    int st = e->stage;
    e->params_elems = st == 3 ? p->shard : p->padded;
    e->opt_elems = st == 0 ? p->padded : p->shard;
    ZS_TRY(ZS_ALLOC(ZS_MEM_PARAMS, e->params_elems * e->ps, &e->params));
    if (e->mixed) {
        ZS_TRY(ZS_ALLOC(ZS_MEM_OPT_MASTER, e->opt_elems * 4, &e->master));
    } else {
        /* fp32: the optimizer updates the parameters themselves */
        e->master = (float *)e->params + (st == 1 || st == 2 ? p->shard_begin : 0);
    }
    ZS_TRY(ZS_ALLOC(ZS_MEM_OPT_M, e->opt_elems * 4, &e->m));
    if (e->cfg.optimizer == ZS_OPT_ADAMW)
        ZS_TRY(ZS_ALLOC(ZS_MEM_OPT_V, e->opt_elems * 4, &e->v));
    if (st <= 1)
        ZS_TRY(ZS_ALLOC(ZS_MEM_GRADS, p->padded * e->ps, &e->gfull));
    ZS_TRY(ZS_ALLOC(ZS_MEM_GRADS, p->shard * e->ps, &e->gshard));
    if (e->det) {
        ZS_TRY(ZS_ALLOC(ZS_MEM_GRADS, p->shard * 8, &e->gacc));
        ZS_TRY(ZS_ALLOC(ZS_MEM_COMM_BUFFERS, e->max_bucket * 8, &e->fixbuf));
        ZS_TRY(ZS_ALLOC(ZS_MEM_COMM_BUFFERS, e->max_chunk * 8, &e->recv));
    } else {
        ZS_TRY(ZS_ALLOC(ZS_MEM_COMM_BUFFERS, e->max_chunk * e->ps, &e->recv));
    }
    if (e->comp_on) {
        int N = p->world;
        for (int k = 0; k < e->nbuckets; k++) {
            const zs_bucket *b = &e->buckets[k];
            size_t sb = 0;
            for (int q = 0; q < N; q++)
                sb += zs_comp_bytes(&e->cfg.compression, (size_t)b->counts[q]);
            if (sb > e->csend_bytes)
                e->csend_bytes = sb;
            for (int q = 0; q < N; q++) { /* the same size on every rank */
                size_t rb = (size_t)N * zs_comp_bytes(&e->cfg.compression, (size_t)b->counts[q]);
                if (rb > e->crecv_bytes)
                    e->crecv_bytes = rb;
            }
        }
        if (e->csend_bytes > (size_t)INT_MAX || e->crecv_bytes > (size_t)INT_MAX)
            ZS_FAIL("a compressed bucket exceeds what one MPI call can carry: lower reduce_bucket_size");
        if (e->cfg.error_feedback)
            ZS_TRY(ZS_ALLOC(ZS_MEM_COMPRESSION, p->padded * 4, &e->residual));
        ZS_TRY(ZS_ALLOC(ZS_MEM_WORKSPACE, e->max_bucket * 4, &e->cx));
        ZS_TRY(ZS_ALLOC(ZS_MEM_WORKSPACE, e->max_bucket * 4, &e->capprox));
        ZS_TRY(ZS_ALLOC(ZS_MEM_WORKSPACE, e->max_chunk * 4 + 4, &e->cacc));
        ZS_TRY(ZS_ALLOC(ZS_MEM_COMM_BUFFERS, e->csend_bytes + 1, &e->csend));
        ZS_TRY(ZS_ALLOC(ZS_MEM_COMM_BUFFERS, e->crecv_bytes + 1, &e->crecv));
        e->scount = calloc((size_t)N, sizeof(int));
        e->sdispl = calloc((size_t)N, sizeof(int));
        e->rcount = calloc((size_t)N, sizeof(int));
        e->rdispl = calloc((size_t)N, sizeof(int));
        if (!e->scount || !e->sdispl || !e->rcount || !e->rdispl)
            ZS_FAIL("out of host memory for the compressed exchange");
    }
    if (p->world > 2) { /* the ring's two receive buffers (2 ranks receive straight into recv) */
        e->ring_bytes = 2 * e->max_chunk * (e->det ? 8 : e->ps);
        ZS_TRY(ZS_ALLOC(ZS_MEM_COMM_BUFFERS, e->ring_bytes, &e->ring));
        zs_comm_set_scratch(e->comm, e->ring, e->ring_bytes);
    }
    return 0;
}

/* Initial parameters: the same fp32 values on every rank; each writes what
 * its stage holds, through a small host buffer (no host copy of the model). */
#define ZS_INIT_CHUNK ((size_t)1 << 18)
static int zs_engine_init_params(zs_engine *e)
{
    const zs_partition *p = &e->part;
    float *buf = malloc(ZS_INIT_CHUNK * sizeof(float)), *tmp = NULL;
    if (!buf)
        ZS_FAIL("out of host memory initialising the parameters");
    if (e->mixed && ZS_ALLOC(ZS_MEM_WORKSPACE, ZS_INIT_CHUNK * 4, &tmp)) {
        free(buf);
        return -1;
    }
    /* master / optimizer view: [mlo, mlo+opt_elems); working copy: [plo, plo+params_elems) */
    size_t mlo = e->stage == 0 ? 0 : p->shard_begin, plo = e->stage == 3 ? p->shard_begin : 0;
    /* a phantom run has nothing to fill: only the staging buffer above is
     * allocated, so that the workspace peak is what a real run's is */
    for (size_t off = 0; off < e->params_elems && !e->phantom; off += ZS_INIT_CHUNK) {
        size_t n = e->params_elems - off < ZS_INIT_CHUNK ? e->params_elems - off : ZS_INIT_CHUNK;
        size_t g = plo + off; /* global index of this piece */
        zs_model_init_slice(e->model, g, g + n, buf, e->cfg.seed);
        if (!e->mixed) {
            zs_backend_copy_h2d(e->be, (float *)e->params + off, buf, n * 4);
            continue;
        }
        zs_backend_copy_h2d(e->be, tmp, buf, n * 4);
        zs_backend_convert_from_f32(e->be, (char *)e->params + off * e->ps, e->pt, tmp, n);
        /* the part of this piece that the master holds */
        size_t a = g > mlo ? g : mlo, b = g + n < mlo + e->opt_elems ? g + n : mlo + e->opt_elems;
        if (a < b)
            zs_backend_copy_h2d(e->be, e->master + (a - mlo), buf + (a - g), (b - a) * 4);
    }
    if (tmp)
        zs_mem_free(e->mem, ZS_MEM_WORKSPACE, tmp, ZS_INIT_CHUNK * 4);
    free(buf);
    return 0;
}

int zs_engine_create(const zs_run_config *cfg, zs_backend_t be, zs_mem_t mem, zs_comm_t comm,
                     zs_engine **out)
{
    *out = NULL;
    zs_engine *e = calloc(1, sizeof *e);
    if (!e)
        ZS_FAIL("out of host memory creating the engine");
    e->cfg = *cfg;
    e->be = be;
    e->phantom = zs_backend_is_phantom(be);
    e->mem = mem;
    e->comm = comm;
    e->stage = cfg->stage;
    e->det = cfg->deterministic;
    e->pt = cfg->precision;
    e->ps = zs_dtype_size(e->pt);
    e->mixed = cfg->precision != ZS_DTYPE_F32;
    e->comp_on = cfg->compression.kind != ZS_COMP_NONE;
    e->ct = e->pt == ZS_DTYPE_F32 ? ZS_CT_F32 : e->pt == ZS_DTYPE_BF16 ? ZS_CT_BF16 : ZS_CT_F16;
    if (e->stage < 0 || e->stage > 3) {
        zs_error_set("ZeRO stage must be 0, 1, 2 or 3, got %d", e->stage);
        goto fail;
    }
    if (e->comp_on && !zs_backend_host_accessible(be) && !e->phantom) {
        /* the codecs (src/comm/compress.c) read and write host memory (a
         * phantom run skips them: the compressed sizes do not depend on the
         * values) */
        zs_error_set("--compression is not supported with --backend %s (its codecs run on "
                     "host memory): use --backend cpu, or --compression none",
                     zs_backend_name(be));
        goto fail;
    }
    /* a phantom run feeds no data (building the GPT's Markov chain would be
     * most of its time) */
    if (zs_model_create(&cfg->model, &e->model) ||
        (!e->phantom && zs_data_create(&cfg->model, cfg->seed, &e->data)))
        goto fail;
    e->lay = zs_model_layout(e->model);
    e->U = e->lay->n_layers;
    int N = zs_comm_size(comm);
    zs_partition_make(&e->part, e->lay->num_params, N, zs_comm_rank(comm), e->det);
    if (zs_engine_make_buckets(e))
        goto fail;
    if (e->stage == 3 && zs_engine_plan_gathers(e))
        goto fail;
    if (e->stage == 1 || e->stage == 2 || e->stage == 0)
        if (zs_engine_check_int(e->cfg.allgather_bucket_size &&
                                        e->cfg.allgather_bucket_size < e->part.padded
                                    ? e->cfg.allgather_bucket_size : e->part.padded,
                                "a parameter allgather"))
            goto fail;

    /* fixed point: fp16 values are exact with 24 fractional bits; fp32 and
     * bf16 keep 40. The limit keeps the sum of all micro-batches of a step
     * below 2^62. */
    e->frac_bits = e->pt == ZS_DTYPE_F16 ? 24 : 40;
    e->fix_limit = (int64_t)((((uint64_t)1) << 62) / ((uint64_t)cfg->grad_accum * (uint64_t)N));

    if (zs_engine_alloc_states(e))
        goto fail;

    /* fp32 views and staging */
    e->P = calloc((size_t)e->lay->n_entries, sizeof(float *));
    e->G = calloc((size_t)e->lay->n_entries, sizeof(float *));
    if (!e->P || !e->G) {
        zs_error_set("out of host memory creating the engine");
        goto fail;
    }
    for (int u = 0; u < e->U; u++) {
        size_t s = zs_model_unit_elems(e->model, u);
        if (s > e->stage_elems)
            e->stage_elems = s;
    }
    if ((e->mixed && ZS_ALLOC(ZS_MEM_WORKSPACE, e->stage_elems * 4, &e->stage_p)) ||
        ZS_ALLOC(ZS_MEM_WORKSPACE, e->stage_elems * 4, &e->stage_g))
        goto fail;

    /* activations and the micro-batch */
    int mb = cfg->micro_batch;
    if (zs_model_acts_create(e->model, mem, mb, &e->acts))
        goto fail;
    const zs_model_config *mc = &cfg->model;
    size_t ntok = mc->kind == ZS_MODEL_GPT ? (size_t)mb * mc->seq_len : (size_t)mb;
    e->tok_bytes = ntok * sizeof(int32_t);
    e->x_bytes = mc->kind == ZS_MODEL_MLP ? (size_t)mb * mc->input_dim * sizeof(float) : 0;
    e->batch.b = mb;
    if ((mc->kind == ZS_MODEL_GPT && ZS_ALLOC(ZS_MEM_WORKSPACE, e->tok_bytes, &e->batch.tokens)) ||
        ZS_ALLOC(ZS_MEM_WORKSPACE, e->tok_bytes, &e->batch.targets) ||
        ZS_ALLOC(ZS_MEM_WORKSPACE, e->x_bytes, &e->batch.x))
        goto fail;
    e->h_tokens = calloc(ntok, sizeof(int32_t));
    e->h_targets = calloc(ntok, sizeof(int32_t));
    e->h_x = calloc(e->x_bytes / sizeof(float) + 1, sizeof(float));

    /* norm blocks: one per rank, or ZS_DET_BLOCK elements in deterministic mode */
    e->norm_block = e->det ? ZS_DET_BLOCK : e->part.shard;
    size_t nblk = e->part.shard / e->norm_block;
    e->norm_local = calloc(nblk, sizeof(double));
    e->norm_all = calloc(nblk * (size_t)N, sizeof(double));
    e->loss_local = calloc((size_t)cfg->grad_accum, sizeof(float));
    e->loss_all = calloc((size_t)cfg->grad_accum * (size_t)N, sizeof(float));
    if (!e->h_tokens || !e->h_targets || !e->h_x || !e->norm_local || !e->norm_all ||
        !e->loss_local || !e->loss_all) {
        zs_error_set("out of host memory creating the engine");
        goto fail;
    }
    if (zs_engine_init_params(e))
        goto fail;
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
    const zs_partition *p = &e->part;
    zs_mem_free(mem, ZS_MEM_PARAMS, e->params, e->params_elems * e->ps);
    if (e->mixed)
        zs_mem_free(mem, ZS_MEM_OPT_MASTER, e->master, e->opt_elems * 4);
    zs_mem_free(mem, ZS_MEM_OPT_M, e->m, e->opt_elems * 4);
    zs_mem_free(mem, ZS_MEM_OPT_V, e->v, e->opt_elems * 4);
    zs_mem_free(mem, ZS_MEM_GRADS, e->gfull, p->padded * e->ps);
    zs_mem_free(mem, ZS_MEM_GRADS, e->gshard, p->shard * e->ps);
    zs_mem_free(mem, ZS_MEM_GRADS, e->gacc, p->shard * 8);
    zs_mem_free(mem, ZS_MEM_COMM_BUFFERS, e->fixbuf, e->max_bucket * 8);
    zs_mem_free(mem, ZS_MEM_COMM_BUFFERS, e->recv, e->max_chunk * (e->det ? 8 : e->ps));
    if (e->comm)
        zs_comm_set_scratch(e->comm, NULL, 0);
    zs_mem_free(mem, ZS_MEM_COMM_BUFFERS, e->ring, e->ring_bytes);
    zs_mem_free(mem, ZS_MEM_COMPRESSION, e->residual, p->padded * 4);
    zs_mem_free(mem, ZS_MEM_WORKSPACE, e->cx, e->max_bucket * 4);
    zs_mem_free(mem, ZS_MEM_WORKSPACE, e->capprox, e->max_bucket * 4);
    zs_mem_free(mem, ZS_MEM_WORKSPACE, e->cacc, e->max_chunk * 4 + 4);
    zs_mem_free(mem, ZS_MEM_COMM_BUFFERS, e->csend, e->csend_bytes + 1);
    zs_mem_free(mem, ZS_MEM_COMM_BUFFERS, e->crecv, e->crecv_bytes + 1);
    free(e->scount);
    free(e->sdispl);
    free(e->rcount);
    free(e->rdispl);
    for (int i = 0; i < e->nbuckets; i++) {
        zs_bucket *b = &e->buckets[i];
        zs_mem_free(mem, ZS_MEM_COMM_BUFFERS, b->buf, (b->hi - b->lo) * e->ps);
        free(b->counts);
    }
    free(e->buckets);
    if (e->gath) {
        for (int u = 0; u < e->U; u++) {
            zs_unit_gather *g = &e->gath[u];
            for (int i = 0; i < g->n; i++) {
                zs_comm_wait(e->comm, &g->req[i]);
                zs_mem_free(mem, ZS_MEM_PARAMS, g->buf[i], (g->r[i].hi - g->r[i].lo) * e->ps);
                free(g->r[i].counts);
                free(g->r[i].displs);
            }
        }
        free(e->gath);
    }
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
    free(e->norm_local);
    free(e->norm_all);
    free(e->loss_local);
    free(e->loss_all);
    zs_data_destroy(e->data);
    zs_model_destroy(e->model);
    free(e);
}

/* ---- stage 3: gathering parameters ------------------------------------- */

/* Start gathering unit u's parameters (non-blocking). */
static int zs_gather_start(zs_engine *e, int u)
{
    zs_unit_gather *g = &e->gath[u];
    if (g->live)
        return 0;
    const zs_partition *p = &e->part;
    for (int i = 0; i < g->n; i++) {
        zs_range *r = &g->r[i];
        size_t n = r->hi - r->lo;
        ZS_TRY(ZS_ALLOC(ZS_MEM_PARAMS, n * e->ps, &g->buf[i]));
        int me = p->rank;
        if (r->counts[me]) /* put this rank's part in place */
            zs_backend_copy_d2d(e->be, (char *)g->buf[i] + (size_t)r->displs[me] * e->ps,
                                (char *)e->params + (r->lo + (size_t)r->displs[me] - p->shard_begin) * e->ps,
                                (size_t)r->counts[me] * e->ps);
        ZS_TRY(zs_comm_iallgatherv_inplace(e->comm, g->buf[i], r->counts, r->displs, e->ct, u,
                                           &g->req[i]));
    }
    g->live = 1;
    e->live += g->elems;
    if (e->live > e->live_peak)
        e->live_peak = e->live;
    return 0;
}

static int zs_gather_wait(zs_engine *e, int u)
{
    zs_unit_gather *g = &e->gath[u];
    for (int i = 0; i < g->n; i++)
        ZS_TRY(zs_comm_wait(e->comm, &g->req[i]));
    return 0;
}

static void zs_gather_release(zs_engine *e, int u)
{
    zs_unit_gather *g = &e->gath[u];
    if (!g->live)
        return;
    for (int i = 0; i < g->n; i++) {
        zs_mem_free(e->mem, ZS_MEM_PARAMS, g->buf[i], (g->r[i].hi - g->r[i].lo) * e->ps);
        g->buf[i] = NULL;
    }
    g->live = 0;
    e->live -= g->elems;
}

/* Gather unit u (if not prefetched) and prefetch unit `next` when it fits
 * under stage3_max_live_parameters and stage3_prefetch_bucket_size. */
static int zs_gather_unit(zs_engine *e, int u, int next)
{
    ZS_TRY(zs_gather_start(e, u));
    if (next >= 0 && next < e->U && !e->gath[next].live &&
        e->gath[next].elems <= e->cfg.stage3_prefetch_bucket_size &&
        e->live + e->gath[next].elems <= e->cfg.stage3_max_live_parameters)
        ZS_TRY(zs_gather_start(e, next));
    return zs_gather_wait(e, u);
}

/* Typed pointer to entry id's parameters: the full array (stages 0-2) or
 * the gathered range that holds it (stage 3). */
static const void *zs_entry_params(const zs_engine *e, int u, int id)
{
    const zs_param_entry *pe = &e->lay->entries[id];
    if (e->stage < 3)
        return (const char *)e->params + pe->offset * e->ps;
    const zs_unit_gather *g = &e->gath[u];
    for (int i = 0; i < g->n; i++)
        if (pe->offset >= g->r[i].lo && pe->offset + pe->numel <= g->r[i].hi)
            return (const char *)g->buf[i] + (pe->offset - g->r[i].lo) * e->ps;
    return NULL; /* unreachable: every used entry is in a gathered range */
}

/* ---- views --------------------------------------------------------------- */

/* P[id] for every entry unit u uses; with grads, G[id] = zeroed staging. */
static void zs_engine_view_unit(zs_engine *e, int u, int want_grads)
{
    int ids[ZS_MAX_USES_PUBLIC];
    int n = zs_model_unit_uses(e->model, u, ids, ZS_MAX_USES_PUBLIC);
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        const zs_param_entry *pe = &e->lay->entries[ids[i]];
        const void *src = zs_entry_params(e, u, ids[i]);
        if (e->mixed) {
            zs_backend_convert_to_f32(e->be, e->stage_p + pos, src, e->pt, pe->numel);
            e->P[ids[i]] = e->stage_p + pos;
        } else {
            e->P[ids[i]] = (float *)src;
        }
        if (want_grads) {
            e->G[ids[i]] = e->stage_g + pos;
            zs_backend_memset0(e->be, e->stage_g + pos, pe->numel * 4);
        }
        pos += pe->numel;
    }
}

/* ---- gradients ----------------------------------------------------------- */

static int zs_bucket_ensure(zs_engine *e, zs_bucket *b)
{
    if (!b->buf)
        ZS_TRY(ZS_ALLOC(ZS_MEM_COMM_BUFFERS, (b->hi - b->lo) * e->ps, &b->buf));
    return 0;
}

/* Add unit u's staged fp32 gradients into the stored gradient: the full
 * buffer (stages 0, 1) or the bucket buffers covering each entry (2, 3). */
static int zs_engine_commit_grads(zs_engine *e, int u)
{
    int ids[ZS_MAX_USES_PUBLIC];
    int n = zs_model_unit_uses(e->model, u, ids, ZS_MAX_USES_PUBLIC);
    for (int i = 0; i < n; i++) {
        const zs_param_entry *pe = &e->lay->entries[ids[i]];
        const float *src = e->G[ids[i]];
        if (e->stage <= 1) {
            zs_backend_accumulate_f32(e->be, (char *)e->gfull + pe->offset * e->ps, e->pt, src,
                                      pe->numel);
            continue;
        }
        size_t lo = pe->offset, hi = pe->offset + pe->numel;
        for (int k = 0; k < e->nbuckets; k++) {
            zs_bucket *b = &e->buckets[k];
            size_t s = lo > b->lo ? lo : b->lo, t = hi < b->hi ? hi : b->hi;
            if (t <= s)
                continue;
            ZS_TRY(zs_bucket_ensure(e, b));
            zs_backend_accumulate_f32(e->be, (char *)b->buf + (s - b->lo) * e->ps, e->pt,
                                      src + (s - lo), t - s);
        }
    }
    return 0;
}

/* The compressed exchange of bucket k (in place of its reduce-scatter):
 * x = the bucket's gradient (+ the error-feedback residual); the part that
 * rank q owns is compressed and sent to q (all-to-all); what was not sent
 * stays in the residual; every rank decompresses the parts it receives and
 * sums them in rank order, then adds the sum into its shard. */
static int zs_engine_exchange_compressed(zs_engine *e, int k, const void *src)
{
    zs_bucket *b = &e->buckets[k];
    const zs_comp_spec *cs = &e->cfg.compression;
    int N = e->part.world;
    size_t n = b->hi - b->lo;
    zs_backend_convert_to_f32(e->be, e->cx, src, e->pt, n);
    /* the residual is kept unscaled, so a change of the fp16 loss scale
     * does not change what it means */
    float scale = e->scaler.scale;
    if (e->residual)
        zs_backend_axpy(e->be, e->cx, scale, e->residual + b->lo, n);
    size_t part = 0, soff = 0;
    for (int q = 0; q < N; q++) {
        size_t cnt = (size_t)b->counts[q], nb = zs_comp_bytes(cs, cnt);
        /* host codecs: the CPU backend's buffers are host memory; the sizes
         * do not depend on the values, so a phantom run skips the codec */
        if (!e->phantom)
            zs_comp_compress(cs, e->cx + part, cnt, e->csend + soff, e->capprox + part);
        e->scount[q] = (int)nb;
        e->sdispl[q] = (int)soff;
        soff += nb;
        part += cnt;
    }
    if (e->residual) { /* residual = x - what the receivers will see */
        zs_backend_copy_d2d(e->be, e->residual + b->lo, e->cx, n * 4);
        zs_backend_axpy(e->be, e->residual + b->lo, -1.0f, e->capprox, n);
        zs_backend_scale(e->be, e->residual + b->lo, 1.0f / scale, n);
    }
    size_t rb = zs_comp_bytes(cs, b->rcount);
    for (int q = 0; q < N; q++) {
        e->rcount[q] = (int)rb;
        e->rdispl[q] = (int)((size_t)q * rb);
    }
    ZS_TRY(zs_comm_alltoallv_bytes(e->comm, e->csend, e->scount, e->sdispl, e->crecv, e->rcount,
                                   e->rdispl, k));
    zs_backend_memset0(e->be, e->cacc, b->rcount * 4);
    for (int q = 0; q < N && !e->phantom; q++)
        zs_comp_decompress_add(cs, e->crecv + (size_t)q * rb, b->rcount, e->cacc);
    size_t off = b->rbegin - e->part.shard_begin;
    zs_backend_accumulate_f32(e->be, (char *)e->gshard + off * e->ps, e->pt, e->cacc, b->rcount);
    return 0;
}

/* Reduce-scatter bucket k and add this rank's part into the shard
 * accumulator. */
static int zs_engine_reduce_bucket(zs_engine *e, int k)
{
    zs_bucket *b = &e->buckets[k];
    size_t n = b->hi - b->lo;
    const void *src;
    if (e->stage <= 1) {
        src = (const char *)e->gfull + b->lo * e->ps;
    } else {
        ZS_TRY(zs_bucket_ensure(e, b)); /* a bucket of padding only gets zeros */
        src = b->buf;
    }
    size_t off = b->rbegin - e->part.shard_begin;
    if (e->comp_now) {
        ZS_TRY(zs_engine_exchange_compressed(e, k, src));
    } else if (e->det) {
        e->fix_overflows += zs_backend_to_fixed(e->be, e->fixbuf, src, e->pt, n, e->frac_bits,
                                                e->fix_limit);
        ZS_TRY(zs_comm_reduce_scatter(e->comm, e->fixbuf, e->recv, b->counts, ZS_CT_I64, k));
        zs_backend_add_i64(e->be, e->gacc + off, e->recv, b->rcount);
    } else {
        ZS_TRY(zs_comm_reduce_scatter(e->comm, src, e->recv, b->counts, e->ct, k));
        zs_backend_add_typed(e->be, (char *)e->gshard + off * e->ps, e->recv, e->pt, b->rcount);
    }
    if (e->stage >= 2) {
        zs_mem_free(e->mem, ZS_MEM_COMM_BUFFERS, b->buf, n * e->ps);
        b->buf = NULL;
    }
    return 0;
}

/* Allgather [0, Ψp) of a full array whose shard this rank holds at its place,
 * in pieces of allgather_bucket_size elements. */
static int zs_engine_allgather_full(zs_engine *e, void *full)
{
    size_t B = e->cfg.allgather_bucket_size ? e->cfg.allgather_bucket_size : e->part.padded;
    int N = e->part.world;
    int *counts = calloc((size_t)N, sizeof(int)), *displs = calloc((size_t)N, sizeof(int));
    if (!counts || !displs) {
        free(counts);
        free(displs);
        ZS_FAIL("out of host memory for an allgather");
    }
    int rc = 0, piece = 0;
    for (size_t lo = 0; lo < e->part.padded && !rc; lo += B, piece++) {
        size_t hi = lo + B < e->part.padded ? lo + B : e->part.padded;
        for (int q = 0; q < N; q++) {
            size_t beg;
            counts[q] = (int)zs_partition_overlap(&e->part, q, lo, hi, &beg);
            displs[q] = counts[q] ? (int)(beg - lo) : 0;
        }
        rc = zs_comm_allgatherv_inplace(e->comm, (char *)full + lo * e->ps, counts, displs, e->ct,
                                        piece);
    }
    free(counts);
    free(displs);
    return rc;
}

/* ---- the step -------------------------------------------------------------- */

static void zs_engine_load_batch(zs_engine *e, uint64_t first)
{
    int mb = e->cfg.micro_batch;
    if (e->data)
        zs_data_fill(e->data, first, mb, e->h_tokens, e->h_targets, e->h_x);
    if (e->batch.tokens)
        zs_backend_copy_h2d(e->be, e->batch.tokens, e->h_tokens, e->tok_bytes);
    zs_backend_copy_h2d(e->be, e->batch.targets, e->h_targets, e->tok_bytes);
    if (e->batch.x)
        zs_backend_copy_h2d(e->be, e->batch.x, e->h_x, e->x_bytes);
}

/* Forward of units first..last (stage 3: each gathered, the next one of the
 * range prefetched, released after use). */
static int zs_engine_forward_units(zs_engine *e, int first, int last)
{
    for (int u = first; u <= last; u++) {
        if (e->stage == 3)
            ZS_TRY(zs_gather_unit(e, u, u < last ? u + 1 : -1));
        zs_engine_view_unit(e, u, 0);
        zs_model_forward_unit(e->model, e->be, u, e->P, e->acts, &e->batch);
        if (e->stage == 3)
            zs_gather_release(e, u);
    }
    return 0;
}

/* Activation checkpointing: when unit u ends a segment that is recomputed
 * before its backward (every segment but the last), its first unit; else -1. */
static int zs_engine_recomputed_first(const zs_engine *e, int u)
{
    int nseg = zs_model_segments(&e->cfg.model);
    for (int sg = 0; sg < nseg - 1; sg++) {
        int first, last;
        zs_model_segment_units(&e->cfg.model, sg, &first, &last);
        if (u == last)
            return first;
    }
    return -1;
}

static int zs_engine_micro_batch(zs_engine *e, int step, int a, float dloss)
{
    const zs_run_config *c = &e->cfg;
    int N = e->part.world, U = e->U;
    uint64_t global = (uint64_t)c->micro_batch * (uint64_t)c->grad_accum * (uint64_t)N;
    /* micro-batch j = a*N + rank of the step holds samples j*MB .. j*MB+MB-1 */
    uint64_t j = (uint64_t)a * (uint64_t)N + (uint64_t)e->part.rank;
    zs_engine_load_batch(e, (uint64_t)step * global + j * (uint64_t)c->micro_batch);

    zs_comm_set_context(e->comm, ZS_PHASE_FORWARD, step);
    zs_mem_set_phase(e->mem, ZS_MEM_PHASE_FORWARD);
    ZS_TRY(zs_engine_forward_units(e, 0, U - 1));
    e->loss_local[a] = zs_model_loss(e->acts, e->be);

    zs_comm_set_context(e->comm, ZS_PHASE_BACKWARD, step);
    zs_mem_set_phase(e->mem, ZS_MEM_PHASE_BACKWARD);
    if (e->stage <= 1)
        zs_backend_memset0(e->be, e->gfull, e->part.padded * e->ps);
    for (int u = U - 1; u >= 0; u--) {
        /* activation checkpointing: before the backward of a segment (all
         * but the last, whose activations are still there), recompute its
         * forward from its checkpoint */
        int first = zs_engine_recomputed_first(e, u);
        if (first >= 0)
            ZS_TRY(zs_engine_forward_units(e, first, u));
        /* no prefetch of a unit whose segment is recomputed first */
        if (e->stage == 3)
            ZS_TRY(zs_gather_unit(e, u, zs_engine_recomputed_first(e, u - 1) >= 0 ? -1 : u - 1));
        zs_engine_view_unit(e, u, 1);
        zs_model_backward_unit(e->model, e->be, u, e->P, e->G, e->acts, &e->batch, dloss);
        ZS_TRY(zs_engine_commit_grads(e, u));
        if (e->stage == 3)
            zs_gather_release(e, u);
        if (e->stage >= 2)
            for (int k = 0; k < e->nbuckets; k++)
                if (e->buckets[k].ready_unit == u)
                    ZS_TRY(zs_engine_reduce_bucket(e, k));
    }
    if (e->stage <= 1)
        for (int k = 0; k < e->nbuckets; k++)
            ZS_TRY(zs_engine_reduce_bucket(e, k));
    return 0;
}

int zs_engine_step(zs_engine *e, int step, zs_step_info *info)
{
    const zs_run_config *c = &e->cfg;
    const zs_partition *p = &e->part;
    int N = p->world, GA = c->grad_accum;
    float scale = e->scaler.scale;
    float dloss = scale / (float)(GA * N);

    if (e->det)
        zs_backend_memset0(e->be, e->gacc, p->shard * 8);
    zs_backend_memset0(e->be, e->gshard, p->shard * e->ps);
    e->fix_overflows = 0;
    e->comp_now = e->comp_on && step >= c->compression_warmup;
    info->compressed = e->comp_now;
    for (int a = 0; a < GA; a++)
        ZS_TRY(zs_engine_micro_batch(e, step, a, dloss));

    zs_comm_set_context(e->comm, ZS_PHASE_STEP, step);
    zs_mem_set_phase(e->mem, ZS_MEM_PHASE_STEP);
    /* the loss of the step: micro-batch losses summed in global order */
    ZS_TRY(zs_comm_allgather_small(e->comm, e->loss_local, e->loss_all, GA, ZS_CT_F32));
    double loss = 0.0;
    for (int a = 0; a < GA; a++)
        for (int r = 0; r < N; r++)
            loss += e->loss_all[(size_t)r * GA + a];
    info->loss = (float)(loss / (GA * N));
    info->loss_scale = scale;
    info->lr = zs_lr_at(c, step);
    info->skipped = 0;

    if (e->det)
        zs_backend_from_fixed(e->be, e->gshard, e->pt, e->gacc, p->shard, e->frac_bits);
    /* overflow: fixed-point range, or inf/NaN in the reduced gradients */
    int flags = (e->fix_overflows > 0) | (zs_backend_count_nonfinite(e->be, e->gshard, e->pt,
                                                                      p->shard) > 0) << 1;
    ZS_TRY(zs_comm_allreduce_max_int(e->comm, &flags));
    int overflow = flags != 0;
    if (overflow && e->pt != ZS_DTYPE_F16) {
        if (flags & 1)
            ZS_FAIL("deterministic reduction overflow at step %d: a gradient element reached "
                    "2^%d / (grad_accum x ranks); lower --lr, enable gradient_clipping, or turn "
                    "off --deterministic", step, 62 - e->frac_bits);
        ZS_FAIL("gradients are not finite at step %d: lower --lr or enable gradient_clipping",
                step);
    }

    /* global norm: block sums in double, summed in block order everywhere */
    double sumsq = 0.0;
    if (!overflow) {
        size_t nblk = p->shard / e->norm_block;
        for (size_t i = 0; i < nblk; i++)
            e->norm_local[i] = zs_backend_sumsq(
                e->be, (const char *)e->gshard + i * e->norm_block * e->ps, e->pt, e->norm_block);
        ZS_TRY(zs_comm_allgather_small(e->comm, e->norm_local, e->norm_all, (int)nblk, ZS_CT_F64));
        for (size_t i = 0; i < nblk * (size_t)N; i++)
            sumsq += e->norm_all[i];
    }
    double norm = overflow ? INFINITY : sqrt(sumsq) / scale;
    info->grad_norm = (float)norm;
    if (zs_loss_scaler_update(&e->scaler, overflow)) {
        info->skipped = 1;
        /* what this step left in the error-feedback residual holds the
         * overflow: start it again from zero */
        if (e->residual && e->comp_now)
            zs_backend_memset0(e->be, e->residual, e->part.padded * 4);
        return 0;
    }
    double coef = 1.0;
    if (c->grad_clip > 0.0f) {
        double cc = c->grad_clip / (norm + 1e-6);
        if (cc < 1.0)
            coef = cc;
    }
    e->t++;
    float mul = (float)(coef / scale);
    if (e->stage == 0) {
        /* every rank gets every reduced gradient, then updates everything */
        zs_backend_copy_d2d(e->be, (char *)e->gfull + p->shard_begin * e->ps, e->gshard,
                            p->shard * e->ps);
        ZS_TRY(zs_engine_allgather_full(e, e->gfull));
        zs_optim_step(e->be, c, e->t, info->lr, mul, e->master, e->m, e->v, e->gfull, e->pt,
                      e->mixed ? e->params : NULL, e->pt, 0, p->padded);
        return 0;
    }
    void *pshard = (char *)e->params + (e->stage == 3 ? 0 : p->shard_begin * e->ps);
    zs_optim_step(e->be, c, e->t, info->lr, mul, e->master, e->m, e->v, e->gshard, e->pt,
                  e->mixed ? pshard : NULL, e->pt, 0, p->shard);
    if (e->stage <= 2)
        ZS_TRY(zs_engine_allgather_full(e, e->params));
    return 0;
}

/* ---- results ---------------------------------------------------------------- */

const zs_model *zs_engine_model(const zs_engine *e) { return e->model; }
size_t zs_engine_num_params(const zs_engine *e) { return e->part.num_params; }
double zs_engine_loss_floor(const zs_engine *e)
{
    return e->data ? zs_data_loss_floor(e->data) : NAN;
}
const zs_partition *zs_engine_partition(const zs_engine *e) { return &e->part; }
size_t zs_engine_live_params_peak(const zs_engine *e) { return e->live_peak; }

int zs_engine_buckets(const zs_engine *e, size_t *lo, size_t *hi, int max)
{
    for (int i = 0; i < e->nbuckets && i < max; i++) {
        lo[i] = e->buckets[i].lo;
        hi[i] = e->buckets[i].hi;
    }
    return e->nbuckets;
}

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
    const float *mine = e->master; /* the shard (aliases the params when fp32) */
    float *shard = malloc(p->shard * sizeof(float));
    float *all = p->rank == 0 ? malloc(p->padded * sizeof(float)) : NULL;
    if (!shard || (p->rank == 0 && !all)) {
        rc = zs_error_set("out of host memory gathering %zu parameters", p->padded);
    } else {
        zs_backend_copy_d2h(e->be, shard, mine, p->shard * 4);
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
int zs_engine_param_hash(zs_engine *e, char hex[17])
{
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
        for (size_t off = 0; off < span && base + off < p->num_params && !rc; off += ZS_HASH_CHUNK) {
            size_t n = span - off < ZS_HASH_CHUNK ? span - off : ZS_HASH_CHUNK;
            if (base + off + n > p->num_params) /* leave the padding out */
                n = p->num_params - base - off;
            if (p->rank == q)
                zs_backend_copy_d2h(e->be, buf, e->master + off, n * 4);
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
