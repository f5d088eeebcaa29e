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
 *
 * With grad_reduce step (DeepSpeed's schedule), stages 0 and 1 instead add
 * every micro-batch's gradient into the full gradient buffer and reduce-
 * scatter its buckets once, after the last micro-batch's backward, into the
 * buffer's own part (the gradient shard is then a view of it: no shard
 * accumulator). Float sums are then grouped differently from the micro-
 * batch schedule (and from stages 2 and 3) when grad_accum > 1; in
 * deterministic mode each micro-batch is converted to fixed point and added
 * into an int64 copy of the full gradient, and integer sums do not depend on
 * the grouping: the bytes equal the micro-batch schedule's.
 *
 * This file: create, free, the step loop and the dispatch table from op
 * kind to executor (engine_impl.h lists the executors' files).
 */
#include "zero/engine_impl.h"
#include "zerosim/compat.h"
#include "zerosim/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- set-up ------------------------------------------------------------- */

/* The buffers of the shape's table, each in its category. */
static int zs_engine_alloc_buffers(zs_engine *e)
{
    for (int i = 0; i < ZS_BUF_N; i++) {
        const zs_buf_spec *b = &e->shape->buf[i];
        if (i == ZS_BUF_INIT || i == ZS_BUF_ACTS || i == ZS_BUF_CKPT || i == ZS_BUF_SCRATCH ||
            b->bytes == 0)
            continue; /* transient, or the model's own (zs_model_acts_create) */
        ZS_TRY(zs_mem_alloc_tier(e->mem, b->tier, b->cat, b->bytes, &e->buf[i]));
    }
    const zs_partition *p = &e->part;
    int st = e->stage;
    e->params = e->buf[ZS_BUF_PARAMS];
    e->params_shard = !e->params ? NULL
                                 : (char *)e->params +
                                       (st == 1 || st == 2 ? p->shard_begin * e->param_elsize : 0);
    /* fp32: the optimizer updates the parameters themselves, unless they
     * are offloaded (then the host keeps an fp32 master, as DeepSpeed's) */
    e->master = e->sep_master ? e->buf[ZS_BUF_MASTER]
                              : (float *)e->params + (st == 1 || st == 2 ? p->shard_begin : 0);
    e->param_host = e->shape->buf[ZS_BUF_PARAMS].tier == ZS_TIER_HOST;
    e->param_nvme = e->shape->buf[ZS_BUF_PARAMS].tier == ZS_TIER_NVME;
    /* the optimizer writes the updated shard into hparam: with
     * offload_param, the host's shard itself (nothing goes up after it) */
    e->hparam = e->param_host ? e->buf[ZS_BUF_PARAMS]
                : e->param_nvme && zs_step_shape_param_alone(e->shape)
                    ? e->buf[ZS_BUF_SWAP] /* offload_param nvme alone: the staging */
                    : e->buf[ZS_BUF_HPARAM];
    /* where the device's optimizer writes the updated working copy: the
     * shard itself, or with offload_param alone the device copy that goes
     * down after the step (fp32: none, the master is sent) */
    e->param_out = !e->mixed ? NULL
                   : zs_step_shape_param_alone(e->shape) ? e->buf[ZS_BUF_HPARAM]
                                                         : e->params_shard;
    e->exp_avg = e->buf[ZS_BUF_M];
    e->exp_avg_sq = e->buf[ZS_BUF_V];
    e->gfull = e->buf[ZS_BUF_GFULL];
    e->reduce_once = e->shape->reduce_step;
    /* the step schedule reduces into gfull's own part, which the norm, the
     * optimizer and stage 0's allgather then read in place */
    e->gshard = e->reduce_once ? (char *)e->gfull + p->shard_begin * e->grad_elsize
                               : e->buf[ZS_BUF_GSHARD];
    e->gacc = e->buf[ZS_BUF_GACC];
    e->gfix = e->buf[ZS_BUF_GFIX];
    e->fixbuf = e->buf[ZS_BUF_FIXBUF];
    e->recv = e->buf[ZS_BUF_RECV];
    e->residual = e->buf[ZS_BUF_RESIDUAL];
    e->zo_on = e->cfg.optimizer == ZS_OPT_ZEROONEADAM;
    zs_zeroone_sched_init(&e->zo_sched);
    e->cx = e->buf[ZS_BUF_CX];
    e->capprox = e->buf[ZS_BUF_CAPPROX];
    e->cacc = e->buf[ZS_BUF_CACC];
    e->csend = e->buf[ZS_BUF_CSEND];
    e->crecv = e->buf[ZS_BUF_CRECV];
    e->stage_p = e->buf[ZS_BUF_STAGE_P];
    e->stage_g = e->buf[ZS_BUF_STAGE_G];
    e->batch.tokens = e->buf[ZS_BUF_TOKENS];
    e->batch.targets = e->buf[ZS_BUF_TARGETS];
    e->batch.x = e->buf[ZS_BUF_X];
    e->tied = e->buf[ZS_BUF_TIED];
    e->tied_grad = e->buf[ZS_BUF_TIED_GRAD];
    e->hpz_shard = e->buf[ZS_BUF_HPZ];
    e->xparams = e->buf[ZS_BUF_XPARAMS];
    e->xmaster = e->shape->buf[ZS_BUF_XMASTER].bytes ? e->buf[ZS_BUF_XMASTER]
                 : e->shape->stage == 0 || e->shape->stage == 3
                     ? e->xparams /* all of them, or stage 3's shard */
                     : (float *)e->xparams + (size_t)e->xrank * e->shape->xshard;
    e->xgather = e->buf[ZS_BUF_XGATHER];
    e->xexp_avg = e->buf[ZS_BUF_XM];
    e->xexp_avg_sq = e->buf[ZS_BUF_XV];
    e->xgacc = e->buf[ZS_BUF_XGACC];
    e->xgrad = e->buf[ZS_BUF_XGRAD];
    e->xrecv = e->buf[ZS_BUF_XRECV];
    e->xtmp = e->buf[ZS_BUF_XTMP];
    e->xhgrad = e->buf[ZS_BUF_XHGRAD];
    e->xhparam = e->buf[ZS_BUF_XHPARAM];
    e->xbase = e->lay->num_params;
    if (e->buf[ZS_BUF_RING])
        zs_comm_set_scratch(e->comm, e->buf[ZS_BUF_RING], e->shape->buf[ZS_BUF_RING].bytes);
    /* offload: the host's gradient shard is the reduced shard itself, or
     * (the step schedule) a copy of gfull's part */
    e->grad_shard_on_host =
        e->offload != ZS_OFFLOAD_NONE && e->shape->buf[ZS_BUF_GSHARD].tier == ZS_TIER_HOST;
    e->hgrad = e->grad_shard_on_host ? e->gshard : e->buf[ZS_BUF_HGRAD];
    return 0;
}

/* Initial parameters: the same fp32 values on every rank; each writes what
 * its stage holds, through a small host buffer (no host copy of the model). */
static int zs_engine_init_params(zs_engine *e)
{
    const zs_partition *p = &e->part;
    const zs_buf_spec *ib = &e->shape->buf[ZS_BUF_INIT];
    size_t chunk = ZS_INIT_CHUNK;
    float *buf = malloc(chunk * sizeof(float));
    void *tmp = NULL;
    if (!buf)
        ZS_FAIL("out of host memory initialising the parameters");
    if (ib->bytes && zs_mem_alloc(e->mem, ib->cat, ib->bytes, &tmp)) {
        free(buf);
        return -1;
    }
    size_t params_elems = e->stage == 3 ? p->shard : p->padded;
    size_t opt_elems = e->stage == 0 ? p->padded : p->shard;
    /* master / optimizer view: [mlo, mlo+opt_elems); working copy: [plo, plo+params_elems) */
    size_t mlo = e->stage == 0 ? 0 : p->shard_begin, plo = e->stage == 3 ? p->shard_begin : 0;
    /* a phantom run has nothing to fill: only the staging buffer above is
     * allocated, so that the workspace peak is what a real run's is */
    for (size_t off = 0; off < params_elems && !e->phantom; off += chunk) {
        size_t n = params_elems - off < chunk ? params_elems - off : chunk;
        size_t g = plo + off; /* index of this piece in the (stage's) flat array */
        /* a pipeline stage's part of the layout starts at base; its padding is 0 */
        size_t valid = p->num_params > g ? (p->num_params - g < n ? p->num_params - g : n) : 0;
        for (size_t d = 0, run; d < valid; d += run) { /* chunk by chunk */
            size_t at = zs_step_local_global(e->shape, g + d, &run);
            run = run < valid - d ? run : valid - d;
            zs_model_init_slice(e->fmodel && !e->xsplit ? e->fmodel : e->model, at, at + run,
                                buf + d, e->cfg.seed);
        }
        memset(buf + valid, 0, (n - valid) * sizeof(float));
        int rc0 = 0;
        if (e->param_nvme && !e->mixed) {
            rc0 = zs_engine_swap_params(e, 1, off, n, buf);
        } else if (e->param_nvme) { /* rounded on the host, then written */
            zs_backend_copy_h2d(e->be, tmp, buf, n * 4);
            zs_backend_convert_from_f32(e->be, e->hparam, e->param_dtype, tmp, n);
            rc0 = zs_engine_swap_params(e, 1, off, n, e->hparam);
        } else if (!e->mixed) {
            zs_backend_copy_h2d(e->be, (float *)e->params + off, buf, n * 4);
        } else {
            zs_backend_copy_h2d(e->be, tmp, buf, n * 4);
            zs_backend_convert_from_f32(e->be, (char *)e->params + off * e->param_elsize,
                                        e->param_dtype, tmp, n);
        }
        if (rc0) {
            free(buf);
            if (tmp)
                zs_mem_free(e->mem, ib->cat, tmp, ib->bytes);
            return -1;
        }
        if (!e->sep_master)
            continue;
        /* the part of this piece that the master holds */
        size_t a = g > mlo ? g : mlo, b = g + n < mlo + opt_elems ? g + n : mlo + opt_elems;
        if (a < b && zs_engine_master_write(e, a - mlo, b - a, buf + (a - g))) {
            free(buf);
            if (tmp)
                zs_mem_free(e->mem, ib->cat, tmp, ib->bytes);
            return -1;
        }
    }
    /* DeepSpeed's layout: the expert store, drawn where the whole model
     * draws it (the computing model lays it out after num_params), and the
     * master's part of it */
    const zs_step_shape *s = e->shape;
    for (size_t off = 0; e->xsplit && off < s->xpadded && !e->phantom; off += chunk) {
        size_t n = s->xpadded - off < chunk ? s->xpadded - off : chunk;
        size_t valid = s->xnum > off ? (s->xnum - off < n ? s->xnum - off : n) : 0;
        zs_model_init_slice(e->model, e->xbase + off, e->xbase + off + valid, buf, e->cfg.seed);
        memset(buf + valid, 0, (n - valid) * sizeof(float));
        zs_engine_put_xmaster(e, off, n, buf, tmp);
    }
    /* the last pipeline stage's copy of the tied embedding: the same values
     * the first stage draws for it */
    for (size_t off = 0; e->tied && off < e->shape->tied_elems && !e->phantom; off += chunk) {
        size_t n = e->shape->tied_elems - off < chunk ? e->shape->tied_elems - off : chunk;
        zs_model_init_slice(e->model, off, off + n, buf, e->cfg.seed);
        if (!e->mixed) {
            zs_backend_copy_h2d(e->be, (float *)e->tied + off, buf, n * 4);
        } else {
            zs_backend_copy_h2d(e->be, tmp, buf, n * 4);
            zs_backend_convert_from_f32(e->be, (char *)e->tied + off * e->param_elsize,
                                        e->param_dtype, tmp, n);
        }
    }
    if (tmp)
        zs_mem_free(e->mem, ib->cat, tmp, ib->bytes);
    free(buf);
    return 0;
}

int zs_engine_create(const zs_run_config *cfg, zs_backend_t be, zs_mem_t mem, zs_comm_t comm,
                     zs_engine **out)
{
    return zs_engine_create_shared(cfg, be, mem, comm, NULL, out);
}

static zs_comm_type zs_engine_comm_type(zs_dtype t)
{
    return t == ZS_DTYPE_F32 ? ZS_CT_F32 : t == ZS_DTYPE_BF16 ? ZS_CT_BF16 : ZS_CT_F16;
}

/* The configuration's own fields, after zerosim/compat.h's rules for what
 * the backend cannot run. */
static int zs_engine_create_config(zs_engine *e, const zs_run_config *cfg)
{
    zs_backend_t be = e->be;
    e->stage = cfg->stage;
    e->det = cfg->deterministic;
    e->param_dtype = cfg->precision;
    e->param_elsize = zs_dtype_size(e->param_dtype);
    e->mixed = cfg->precision != ZS_DTYPE_F32;
    e->comp_on = cfg->compression.kind != ZS_COMP_NONE;
    e->offload = cfg->stage >= 1 ? cfg->offload_optimizer : ZS_OFFLOAD_NONE;
    /* offload_param alone: the optimizer on the device, the shard it
     * updates on the host (zs_step_shape_param_alone) */
    int param_alone = cfg->stage == 3 && cfg->offload_param != ZS_OFFLOAD_NONE &&
                      e->offload == ZS_OFFLOAD_NONE;
    e->sep_master = e->mixed || e->offload != ZS_OFFLOAD_NONE || param_alone;
    e->swap_fd = -1;
    /* what this backend cannot run (zerosim/compat.h; a phantom run computes
     * nothing on it) */
    if (!e->phantom)
        ZS_TRY(zs_compat_check_device(cfg, zs_comm_size(e->comm), zs_backend_name(be),
                                      zs_backend_host_accessible(be), zs_backend_has_tp(be),
                                      zs_backend_has_exact_sums(be)));
    e->comm_dtype = zs_engine_comm_type(e->param_dtype);
    e->grad_dtype = zs_run_config_grad_dtype(cfg);
    e->grad_elsize = zs_dtype_size(e->grad_dtype);
    e->grad_comm_dtype = zs_engine_comm_type(e->grad_dtype);
    if (e->stage < 0 || e->stage > 3)
        ZS_FAIL("ZeRO stage must be 0, 1, 2 or 3, got %d", e->stage);
    if (cfg->qat) {
        e->qat.format = (zs_quant_format)cfg->qat;
        ZS_TRY(zs_quant_spec_finalize(&e->qat));
    }
    e->tp_size = cfg->model.tp > 1 ? cfg->model.tp : 1;
    e->tp_rank = e->tp_size > 1 ? cfg->model.tp_rank : 0;
    return 0;
}

/* The models, the data, the layout, the shape (built, or the caller's),
 * the partition and the program; scfg gets the shape's configuration. */
static int zs_engine_create_layout(zs_engine *e, const zs_run_config *cfg,
                                   const zs_step_shape *shape, zs_run_config *scfg)
{
    zs_comm_t comm = e->comm;
    /* expert parallelism: the engine's own configuration and layout are
     * --ep 1's; the computing model is this rank's */
    e->ep_size = cfg->model.moe_ep > 1 ? cfg->model.moe_ep : 1;
    e->ep_rank = e->ep_size > 1 ? cfg->model.moe_ep_rank : 0;
    e->xsplit = e->ep_size > 1 && zs_step_ep_split(cfg, zs_comm_size(comm), NULL);
    e->xrank = zs_comm_rank(comm) / e->ep_size;
    e->cfg.model.moe_ep = 1;
    e->cfg.model.moe_ep_rank = 0;
    /* the shape: ep's buffers, the layout (zs_step_ep_configs) */
    zs_model_config lay_cfg;
    zs_step_ep_configs(cfg, zs_comm_size(comm), scfg, &lay_cfg);
    zs_model_config cm = scfg->model; /* the computing model */
    /* a phantom run feeds no data (building the GPT's Markov chain would be
     * most of its time) */
    if (zs_model_create(&cm, &e->model) ||
        (e->ep_size > 1 && zs_model_create(&e->cfg.model, &e->fmodel)) ||
        (!e->phantom &&
         (cfg->data_file ? zs_data_create_file(&cfg->model, cfg->seed, cfg->data_file, &e->data)
                         : zs_data_create(&cfg->model, cfg->seed, &e->data))))
        return -1;
    /* lays out the flat arrays */
    zs_model *lm = e->fmodel && !e->xsplit ? e->fmodel : e->model;
    e->lay = zs_model_layout(lm);
    e->clay = zs_model_layout(e->model);
    e->nunits = e->lay->n_layers;
    int N = zs_comm_size(comm);
    if (shape) {
        e->shape = shape;
    } else {
        ZS_TRY(zs_step_shape_build(scfg, lm, N, &e->own_shape));
        e->shape = &e->own_shape;
    }
    /* a pipeline stage's arrays hold its part of the layout only */
    zs_partition_make(&e->part, e->shape->part.num_params, N, zs_comm_rank(comm), e->det);
    e->pp_size = e->shape->pp;
    e->pp_rank = e->shape->pp_rank;
    if (e->stage == 3 && cfg->hpz_partition_size > 1) {
        e->hpz = zs_comm_hpz(comm);
        if (!e->hpz || zs_comm_size(e->hpz) != cfg->hpz_partition_size)
            ZS_FAIL("internal: zero_hpz_partition_size %d without its secondary group "
                    "(zs_comm_set_hpz on the data-parallel group)", cfg->hpz_partition_size);
        e->hpz_k = cfg->hpz_partition_size;
        e->hpz_shard_n = e->shape->part.padded / (size_t)e->hpz_k;
        e->hpz_shard_lo = (size_t)zs_comm_rank(e->hpz) * e->hpz_shard_n;
    }
    ZS_TRY(zs_step_shape_check_run(e->shape));
    ZS_TRY(zs_step_program_build(e->shape, lm, e->part.rank, &e->prog));
    if (e->shape->onebit_elems)
        ZS_TRY(zs_step_program_build_onebit(e->shape, lm, e->part.rank, &e->prog_onebit));
    /* fixed point: fp16 gradients are exact with 24 fractional bits; fp32
     * and bf16 keep 40. The limit keeps the sum of all micro-batches of a
     * step below 2^62. */
    e->frac_bits = e->grad_dtype == ZS_DTYPE_F16 ? 24 : 40;
    e->fix_limit = (int64_t)((((uint64_t)1) << 62) / ((uint64_t)cfg->grad_accum * (uint64_t)N));
    return 0;
}

/* The host arrays of the gathers, buckets, views and the compressed
 * exchange. */
static int zs_engine_create_arrays(zs_engine *e)
{
    int N = e->part.world, U = e->nunits, nb = e->shape->nbuckets;
    int ng = e->stage == 3 ? e->shape->gfirst[U - 1] + e->shape->gn[U - 1] : 0;
    e->bucket_buf = calloc((size_t)nb + 1, sizeof(void *));
    e->counts = calloc((size_t)N, sizeof(int));
    e->displs = calloc((size_t)N, sizeof(int));
    e->gather_start_s = calloc((size_t)U + 1, sizeof(double));
    e->rs_bucket = e->gather_last = -1;
    e->gather_buf = calloc((size_t)ng + 1, sizeof(void *));
    e->gather_req = calloc((size_t)ng + 1, sizeof(void *));
    e->gather_counts = calloc((size_t)ng + 1, sizeof(int *));
    e->gather_displs = calloc((size_t)ng + 1, sizeof(int *));
    e->gather_comm = calloc((size_t)ng + 1, sizeof(zs_comm_t));
    e->unit_params = calloc((size_t)e->lay->n_entries, sizeof(float *));
    e->unit_grads = calloc((size_t)e->lay->n_entries, sizeof(float *));
    if (!e->gather_start_s || !e->bucket_buf || !e->counts || !e->displs || !e->gather_buf ||
        !e->gather_req || !e->gather_counts || !e->gather_displs || !e->gather_comm ||
        !e->unit_params || !e->unit_grads)
        ZS_FAIL("out of host memory creating the engine");
    if (e->comp_on) {
        e->scount = calloc((size_t)N, sizeof(int));
        e->sdispl = calloc((size_t)N, sizeof(int));
        e->rcount = calloc((size_t)N, sizeof(int));
        e->rdispl = calloc((size_t)N, sizeof(int));
        if (!e->scount || !e->sdispl || !e->rcount || !e->rdispl)
            ZS_FAIL("out of host memory for the compressed exchange");
    }
    return 0;
}

/* Activations (a slot per micro-batch in flight, chunk by chunk), the
 * model chunks, the micro-batch, the norm blocks and the losses. */
static int zs_engine_create_slots(zs_engine *e, const zs_run_config *scfg)
{
    const zs_run_config *cfg = &e->cfg;
    int N = e->part.world, mb = cfg->micro_batch, nc = e->shape->nchunks;
    e->nslots = e->shape->slots;
    e->slots = calloc((size_t)e->nslots, sizeof *e->slots);
    e->slot0 = calloc((size_t)nc, sizeof *e->slot0);
    e->cmodel = calloc((size_t)nc, sizeof *e->cmodel);
    if (!e->slots || !e->slot0 || !e->cmodel)
        ZS_FAIL("out of host memory creating the engine");
    e->cmodel[0] = e->model;
    for (int c = 1; c < nc; c++) {
        zs_model_config cc;
        if (zs_pp_chunk_model(scfg, c, &cc) || zs_model_create(&cc, &e->cmodel[c]))
            return -1;
    }
    for (int c = 1; c < nc; c++)
        e->slot0[c] = e->slot0[c - 1] + e->shape->cslots[c - 1];
    /* the last chunk's first slot owns the scratch and the working slots
     * (the largest: it has the head), the others share them */
    int own = e->slot0[nc - 1];
    ZS_TRY(zs_model_acts_create(e->cmodel[nc - 1], e->mem, mb, &e->acts));
    e->slots[own] = e->acts;
    for (int c = 0; c < nc; c++)
        for (int i = e->slot0[c]; i < e->slot0[c] + e->shape->cslots[c]; i++)
            if (i != own &&
                zs_model_acts_create_slot(e->cmodel[c], e->mem, mb, e->acts, &e->slots[i]))
                return -1;
    e->batch.b = mb;
    size_t ntok = e->shape->tok_bytes / sizeof(int32_t);
    e->h_tokens = calloc(ntok, sizeof(int32_t));
    e->h_targets = calloc(ntok, sizeof(int32_t));
    e->h_x = calloc(e->shape->x_bytes / sizeof(float) + 1, sizeof(float));
    /* norm blocks: one per rank, or ZS_DET_BLOCK elements in deterministic mode */
    e->norm_block = e->det ? ZS_DET_BLOCK : e->part.shard;
    size_t nblk = e->part.shard / e->norm_block;
    e->norm_local = calloc(nblk, sizeof(double));
    e->norm_all = calloc(nblk * (size_t)N, sizeof(double));
    e->loss_local = calloc((size_t)cfg->grad_accum, sizeof(float));
    e->loss_all = calloc((size_t)cfg->grad_accum * (size_t)N, sizeof(float));
    if (!e->h_tokens || !e->h_targets || !e->h_x || !e->norm_local || !e->norm_all ||
        !e->loss_local || !e->loss_all)
        ZS_FAIL("out of host memory creating the engine");
    if (e->pp_size > 1 && cfg->model.moe_experts > 0) {
        size_t gl = (size_t)cfg->grad_accum * (size_t)cfg->model.n_layer;
        e->pp_laux = calloc(gl, sizeof(double));
        e->pp_laux_all = calloc(gl * (size_t)e->pp_size, sizeof(double));
        e->pp_token_loss = calloc((size_t)cfg->grad_accum, sizeof(double));
        if (!e->pp_laux || !e->pp_laux_all || !e->pp_token_loss)
            ZS_FAIL("out of host memory for the pipeline's aux losses");
    }
    return 0;
}

int zs_engine_create_shared(const zs_run_config *cfg, zs_backend_t be, zs_mem_t mem,
                            zs_comm_t comm, const zs_step_shape *shape, zs_engine **out)
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
    zs_run_config scfg;
    if (zs_engine_create_config(e, cfg) || zs_engine_create_layout(e, cfg, shape, &scfg) ||
        zs_engine_alloc_buffers(e) || zs_engine_swap_open(e))
        goto fail;
    /* the collectives' temporaries in the ledger: qwZ's parts, the two-level
     * reduce-scatter's node sums, qgZ's buffers (zerosim/comm.h) */
    zs_comm_set_mem(comm, mem);
    if (zs_engine_create_arrays(e) || zs_engine_create_slots(e, &scfg) ||
        zs_engine_init_params(e))
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
    if (e->shape && e->stage == 3 && e->gather_buf)
        for (int u = 0; u < e->nunits; u++)
            zs_engine_gather_release(e, u);
    if (e->shape && e->bucket_buf)
        for (int k = 0; k < e->shape->nbuckets; k++)
            zs_mem_free(mem, ZS_MEM_COMM_BUFFERS, e->bucket_buf[k],
                        (e->shape->buckets[k].hi - e->shape->buckets[k].lo) * e->grad_elsize);
    if (e->comm && e->buf[ZS_BUF_RING])
        zs_comm_set_scratch(e->comm, NULL, 0);
    if (e->comm)
        zs_comm_set_mem(e->comm, NULL);
    for (int i = 0; e->shape && i < ZS_BUF_N; i++)
        if (e->buf[i])
            zs_mem_free_tier(mem, e->shape->buf[i].tier, e->shape->buf[i].cat, e->buf[i],
                             e->shape->buf[i].bytes);
    if (e->swap_fd >= 0) { /* the nvme tier's file goes with the run */
        close(e->swap_fd);
        unlink(e->swap_path);
    }
    free(e->spans);
    free(e->bucket_buf);
    free(e->counts);
    free(e->displs);
    free(e->gather_start_s);
    free(e->gather_buf);
    free(e->gather_req);
    free(e->gather_counts);
    free(e->gather_displs);
    free(e->gather_comm);
    free(e->scount);
    free(e->sdispl);
    free(e->rcount);
    free(e->rdispl);
    for (int i = 0; e->slots && i < e->nslots; i++)
        if (e->slots[i] != e->acts)
            zs_model_acts_destroy(e->slots[i]);
    free(e->slots);
    free(e->slot0);
    zs_model_acts_destroy(e->acts);
    for (int i = 0; i < e->nsends; i++) /* after an error: let them finish */
        zs_comm_wait(e->pp_comm, &e->sends[i]);
    free(e->sends);
    free(e->send_slot);
    if (e->tied_req)
        zs_comm_wait(e->pp_comm, &e->tied_req);
    free(e->unit_params);
    free(e->unit_grads);
    free(e->h_tokens);
    free(e->h_targets);
    free(e->h_x);
    free(e->norm_local);
    free(e->norm_all);
    free(e->loss_local);
    free(e->loss_all);
    free(e->pp_laux);
    free(e->pp_laux_all);
    free(e->pp_token_loss);
    zs_step_program_free(&e->prog);
    zs_step_program_free(&e->prog_onebit);
    /* the chunks' models before the shape that counts them (e->shape may
     * be e->own_shape, which zs_step_shape_free clears) */
    for (int c = 1; e->cmodel && e->shape && c < e->shape->nchunks; c++)
        zs_model_destroy(e->cmodel[c]);
    free(e->cmodel);
    zs_step_shape_free(&e->own_shape);
    zs_data_destroy(e->data);
    zs_model_destroy(e->model);
    zs_model_destroy(e->fmodel);
    free(e);
}

/* ---- dispatch ------------------------------------------------------------- */

/* The executor of each op kind (DeepSpeed's _INSTRUCTION_MAP in
 * runtime/pipe/engine.py): the builder chose the kind, the executor does
 * what it says. */
static const zs_engine_exec_fn zs_engine_executors[ZS_SOP_NKINDS] = {
    [ZS_SOP_BEGIN] = zs_engine_exec_begin,
    [ZS_SOP_LOAD] = zs_engine_exec_load,
    [ZS_SOP_GATHER] = zs_engine_exec_gather,
    [ZS_SOP_WAIT] = zs_engine_exec_wait,
    [ZS_SOP_FORWARD] = zs_engine_exec_forward,
    [ZS_SOP_RELEASE] = zs_engine_exec_release,
    [ZS_SOP_LOSS] = zs_engine_exec_loss,
    [ZS_SOP_ZERO_GRADS] = zs_engine_exec_zero_grads,
    [ZS_SOP_BUCKET_ALLOC] = zs_engine_exec_bucket_alloc,
    [ZS_SOP_BACKWARD] = zs_engine_exec_backward,
    [ZS_SOP_ACCUM_FIXED] = zs_engine_exec_accum_fixed,
    [ZS_SOP_REDUCE] = zs_engine_exec_reduce,
    [ZS_SOP_REDUCE_WAIT] = zs_engine_exec_reduce_wait,
    [ZS_SOP_LOSS_SUM] = zs_engine_exec_loss_sum,
    [ZS_SOP_CHECK] = zs_engine_exec_check,
    [ZS_SOP_NORM] = zs_engine_exec_norm,
    [ZS_SOP_PUT_SHARD] = zs_engine_exec_put_shard,
    [ZS_SOP_OPTIMIZER_FULL] = zs_engine_exec_optimizer_full,
    [ZS_SOP_OPTIMIZER_SHARD] = zs_engine_exec_optimizer_shard,
    [ZS_SOP_OPTIMIZER_HOST] = zs_engine_exec_optimizer_host,
    [ZS_SOP_OPTIMIZER_SWAPPED] = zs_engine_exec_optimizer_swapped,
    [ZS_SOP_ALLGATHER] = zs_engine_exec_allgather,
    [ZS_SOP_OFFLOAD_GRADS] = zs_engine_exec_offload_grads,
    [ZS_SOP_UPLOAD_PARAMS] = zs_engine_exec_upload_params,
    [ZS_SOP_DOWNLOAD_PARAMS] = zs_engine_exec_download_params,
    [ZS_SOP_RECV_ACT] = zs_engine_exec_recv_act,
    [ZS_SOP_SEND_ACT] = zs_engine_exec_send_act,
    [ZS_SOP_RECV_GRAD] = zs_engine_exec_recv_grad,
    [ZS_SOP_SEND_GRAD] = zs_engine_exec_send_grad,
    [ZS_SOP_TIED_SEND] = zs_engine_exec_tied_send,
    [ZS_SOP_TIED_RECV] = zs_engine_exec_tied_recv,
    [ZS_SOP_TIED_SYNC] = zs_engine_exec_tied_sync,
    [ZS_SOP_LOCAL_NORM] = zs_engine_exec_local_norm,
    [ZS_SOP_OPTIMIZER_ONEBIT] = zs_engine_exec_optimizer_onebit,
};

/* Execute one op of the step program. *stop = 1 ends the step (skipped). */
static int zs_engine_exec(zs_engine *e, const zs_step_op *o, int *stop)
{
    zs_engine_exec_fn fn =
        (unsigned)o->kind < ZS_SOP_NKINDS ? zs_engine_executors[o->kind] : NULL;
    if (!fn)
        ZS_FAIL("internal: step op %d has no executor", (int)o->kind);
    return fn(e, o, stop);
}

int zs_engine_step(zs_engine *e, int step, zs_step_info *info)
{
    const zs_run_config *c = &e->cfg;
    int N = e->part.world, GA = c->grad_accum;
    float scale = e->scaler.scale;
    memset(info, 0, sizeof *info);
    e->step = step;
    e->info = info;
    e->overflow = 0;
    e->recv_wait_s = 0.0;
    /* the average over ranks: divided before the sum (zerosim's way, and
     * DeepSpeed's prescale_gradients: folded into the loss gradient), or by
     * gradient_predivide_factor f before and N/f after (DeepSpeed's
     * postscale, with the unscaling in zs_engine_norm) */
    e->post_scale = 1.0;
    if (c->grad_scaling == ZS_GRAD_POSTSCALE) {
        e->dloss = (float)(scale / ((double)GA * c->grad_predivide));
        e->post_scale = c->grad_predivide / N;
    } else {
        e->dloss = scale / (float)(GA * N);
    }
    e->comp_now = e->comp_on && step >= c->compression_warmup;
    /* 1-bit Adam: its own program once freeze_step steps have been applied;
     * 0/1 Adam: in the steps its schedule does not make exact */
    const zs_step_program *prog =
        e->prog_onebit.n && e->opt_steps >= c->onebit_freeze_step ? &e->prog_onebit : &e->prog;
    if (e->zo_on)
        prog = zs_engine_zeroone_begin(e) == ZS_ZO_EXACT ? &e->prog : &e->prog_onebit;
    e->grads_local = prog == &e->prog_onebit;
    info->compressed = e->comp_now || e->grads_local;
    info->local_only = e->zo_local;
    info->loss_scale = scale;
    info->lr = zs_lr_at(c, step);
    /* the comm context and the memory phase follow the ops' phases */
    zs_comm_phase cur = ZS_PHASE_NPHASES;
    static const zs_mem_phase mem_phase[ZS_PHASE_NPHASES] = {
        [ZS_PHASE_SETUP] = ZS_MEM_PHASE_SETUP, [ZS_PHASE_FORWARD] = ZS_MEM_PHASE_FORWARD,
        [ZS_PHASE_BACKWARD] = ZS_MEM_PHASE_BACKWARD, [ZS_PHASE_STEP] = ZS_MEM_PHASE_STEP,
        [ZS_PHASE_REPORT] = ZS_MEM_PHASE_STEP};
    for (size_t i = 0; i < prog->n; i++) {
        const zs_step_op *o = &prog->ops[i];
        if (o->phase != cur) {
            cur = o->phase;
            zs_comm_set_context(e->comm, cur, step);
            zs_mem_set_phase(e->mem, mem_phase[cur]);
        }
        int stop = 0;
        /* the collectives' own time is the ledger's; the trace keeps the
         * ops that compute or wait */
        int traced = e->tracing && o->kind != ZS_SOP_GATHER && o->kind != ZS_SOP_REDUCE &&
                     o->kind != ZS_SOP_ALLGATHER && o->kind != ZS_SOP_LOSS_SUM &&
                     o->kind != ZS_SOP_RELEASE && o->kind != ZS_SOP_BUCKET_ALLOC;
        double t0 = traced ? zs_clock() : 0.0;
        /* interleaved: only the sends from the slot this op writes */
        if (e->nsends && e->shape->nchunks > 1 &&
            (o->kind == ZS_SOP_FORWARD || o->kind == ZS_SOP_BACKWARD ||
             o->kind == ZS_SOP_RECV_ACT || o->kind == ZS_SOP_SEND_GRAD))
            ZS_TRY(zs_engine_wait_slot(e, zs_engine_slot_index(e, o)));
        else if (e->nsends && (o->kind == ZS_SOP_FORWARD || o->kind == ZS_SOP_BACKWARD))
            ZS_TRY(zs_engine_wait_sends(e)); /* they may send from what this writes */
        ZS_TRY(zs_engine_exec(e, o, &stop));
        ZS_TRY(zs_engine_progress(e));
        if (traced) {
            if (e->nspans == e->capspans) {
                size_t cap = e->capspans ? 2 * e->capspans : 256;
                zs_trace_span *p = realloc(e->spans, cap * sizeof *p);
                if (!p)
                    ZS_FAIL("out of host memory for the trace (%zu op spans)", e->nspans);
                e->spans = p;
                e->capspans = cap;
            }
            e->spans[e->nspans++] = (zs_trace_span){.kind = o->kind, .unit = o->unit,
                                                    .index = o->index, .flags = o->flags,
                                                    .step = step, .start = t0,
                                                    .seconds = zs_clock() - t0};
        }
        if (stop)
            break;
    }
    ZS_TRY(zs_engine_wait_sends(e));
    if (e->tied_req)
        ZS_TRY(zs_comm_wait(e->pp_comm, &e->tied_req));
    info->recv_wait_s = e->recv_wait_s;
    if (e->zo_on && !info->skipped)
        zs_engine_zeroone_end(e);
    return 0;
}

/* ---- results ---------------------------------------------------------------- */

const zs_model *zs_engine_model(const zs_engine *e) { return e->model; }
const zs_layout *zs_engine_layout(const zs_engine *e) { return e->lay; }
size_t zs_engine_num_params(const zs_engine *e)
{
    return e->part.num_params + (e->xsplit ? e->shape->xnum * (size_t)e->ep_size : 0);
}
double zs_engine_loss_floor(const zs_engine *e)
{
    return e->data ? zs_data_loss_floor(e->data) : NAN;
}
const zs_partition *zs_engine_partition(const zs_engine *e) { return &e->part; }
const zs_step_shape *zs_engine_shape(const zs_engine *e) { return e->shape; }

int zs_engine_set_tp(zs_engine *e, zs_comm_t tp)
{
    if (e->tp_size > 1 && !tp)
        ZS_FAIL("tensor parallelism (--tp %d) needs its communicator", e->tp_size);
    for (int c = 0; c < e->shape->nchunks; c++)
        ZS_TRY(zs_model_set_tp_comm(e->cmodel[c], e->tp_size > 1 ? tp : NULL));
    e->tp_comm = e->tp_size > 1 ? tp : NULL;
    return 0;
}
const zs_step_program *zs_engine_program(const zs_engine *e) { return &e->prog; }

int zs_engine_set_cp(zs_engine *e, zs_comm_t cp)
{
    if (e->cfg.cp > 1 && !cp)
        ZS_FAIL("context parallelism (--cp %d) needs its communicator", e->cfg.cp);
    for (int c = 0; c < e->shape->nchunks; c++)
        ZS_TRY(zs_model_set_cp_comm(e->cmodel[c], cp));
    return 0;
}

int zs_engine_ep_split(const zs_engine *e) { return e->xsplit; }
size_t zs_engine_expert_padded(const zs_engine *e) { return e->xsplit ? e->shape->xpadded : 0; }

int zs_engine_set_ep(zs_engine *e, zs_comm_t ep, zs_comm_t edp)
{
    if (e->ep_size > 1 && !ep)
        ZS_FAIL("expert parallelism (--ep %d) needs its communicator", e->ep_size);
    if (e->xsplit &&
        (!edp || zs_comm_size(edp) != e->shape->xworld || zs_comm_rank(edp) != e->xrank))
        ZS_FAIL("internal: expert parallelism's expert-data-parallel group is not of %d ranks "
                "with this rank at %d", e->shape->xworld, e->xrank);
    e->edp = edp;
    return zs_model_set_ep_comm(e->model, e->ep_size > 1 ? ep : NULL);
}

int zs_engine_set_pp(zs_engine *e, zs_comm_t pp, zs_comm_t world)
{
    if (e->pp_size > 1 && (!pp || !world || zs_comm_size(pp) != e->pp_size))
        ZS_FAIL("pipeline parallelism (--pp %d) needs its communicators", e->pp_size);
    e->pp_comm = e->pp_size > 1 ? pp : NULL;
    e->world = e->pp_size > 1 ? world : NULL;
    return 0;
}


int zs_engine_set_trace(zs_engine *e, int on)
{
    e->tracing = on;
    if (on)
        e->nspans = 0;
    return 0;
}

const zs_trace_span *zs_engine_trace(const zs_engine *e, size_t *n)
{
    *n = e->nspans;
    return e->spans;
}

const zs_acts *zs_engine_acts(const zs_engine *e) { return e->acts; }

int zs_engine_moe_stats(const zs_engine *e, int l, zs_moe_stats *out)
{
    const zs_step_shape *s = e->shape;
    int u = l + 1, last = e->cfg.grad_accum - 1;
    if (!e->slots || u < 1 || u >= s->U || s->uchunk[u] < 0)
        return -1;
    int c = s->uchunk[u];
    return zs_model_moe_stats(e->slots[e->slot0[c] + last % s->cslots[c]], l, out);
}
const zs_data *zs_engine_data(const zs_engine *e) { return e->data; }
