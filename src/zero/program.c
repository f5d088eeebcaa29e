/* zerosim — the step as a program (see zerosim/program.h). */
#include "zerosim/program.h"
#include "zerosim/compress.h"
#include "zerosim/error.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- ranges over the partition ------------------------------------------ */

/* The owners of [lo, hi): ranks a..b; the first and last parts' sizes (the
 * ranks between own a whole shard each). Returns 0 for an empty range. */
static int zs_range_owners(const zs_partition *p, size_t lo, size_t hi, size_t *a, size_t *b,
                           size_t *first, size_t *last)
{
    if (hi <= lo)
        return 0;
    size_t S = p->shard;
    *a = lo / S;
    *b = (hi - 1) / S;
    if (*a == *b) {
        *first = *last = hi - lo;
    } else {
        *first = (*a + 1) * S - lo;
        *last = hi - *b * S;
    }
    return 1;
}

size_t zs_range_max_part(const zs_partition *p, size_t lo, size_t hi)
{
    size_t a, b, f, l;
    if (!zs_range_owners(p, lo, hi, &a, &b, &f, &l))
        return 0;
    size_t m = f > l ? f : l;
    return b > a + 1 && p->shard > m ? p->shard : m;
}

/* Sum over the ranks of fn(part of rank q), in O(1). */
static double zs_range_sum(const zs_partition *p, size_t lo, size_t hi,
                           double (*fn)(const zs_comp_spec *, size_t), const zs_comp_spec *cs)
{
    size_t a, b, f, l, N = (size_t)p->world;
    if (!zs_range_owners(p, lo, hi, &a, &b, &f, &l))
        return (double)N * fn(cs, 0);
    double s = fn(cs, f);
    if (b > a) {
        s += fn(cs, l);
        s += (double)(b - a - 1) * fn(cs, p->shard);
    }
    return s + (double)(N - (b - a + 1)) * fn(cs, 0);
}

/* The part of [lo, hi) that rank q owns, O(1). */
static size_t zs_range_part(const zs_partition *p, int q, size_t lo, size_t hi)
{
    size_t beg;
    return zs_partition_overlap(p, q, lo, hi, &beg);
}

void zs_step_counts(const zs_step_shape *s, size_t lo, size_t hi, int *counts, int *displs)
{
    for (int q = 0; q < s->part.world; q++) {
        size_t beg, n = zs_partition_overlap(&s->part, q, lo, hi, &beg);
        counts[q] = (int)n;
        if (displs)
            displs[q] = n ? (int)(beg - lo) : 0;
    }
}

double zs_comp_part_bytes(const zs_comp_spec *s, size_t n)
{
    double blocks = (double)((n + 255) / 256);
    switch (s->kind) {
    case ZS_COMP_TOPK: /* k by the codec's rule: ceil(f*n), within [1, n] */
        return 8.0 * (double)zs_comp_topk_k(s, n);
    case ZS_COMP_INT8: return (double)n + 4.0 * blocks;
    case ZS_COMP_SIGN: return (double)((n + 7) / 8) + 4.0 * blocks;
    default: return 4.0 * (double)n;
    }
}

static double zs_codec_bytes(const zs_comp_spec *s, size_t n) { return (double)zs_comp_bytes(s, n); }

double zs_step_alltoall_bytes(const zs_step_shape *s, int k, int q)
{
    const zs_step_range *b = &s->buckets[k];
    const zs_comp_spec *cs = &s->cfg.compression;
    double all = zs_range_sum(&s->part, b->lo, b->hi, zs_comp_part_bytes, cs);
    return all - zs_comp_part_bytes(cs, zs_range_part(&s->part, q, b->lo, b->hi));
}

/* ---- the shape ----------------------------------------------------------- */

static int zs_check_int(size_t n, const char *what)
{
    if (n > (size_t)INT_MAX)
        ZS_FAIL("%s of %zu elements is more than one MPI call can carry (%d): lower "
                "reduce_bucket_size / allgather_bucket_size or use more ranks", what, n, INT_MAX);
    return 0;
}

static int zs_range_push(zs_step_range **v, int *n, int *cap, zs_step_range r)
{
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 16;
        zs_step_range *t = realloc(*v, (size_t)nc * sizeof *t);
        if (!t)
            ZS_FAIL("out of host memory planning the step");
        *v = t;
        *cap = nc;
    }
    (*v)[(*n)++] = r;
    return 0;
}

/* Cut [0, Ψp) into buckets from the end, at unit boundaries where possible:
 * a bucket is closed when the next unit would overflow it, and a unit
 * larger than a bucket is cut into pieces from its end. A bucket is ready
 * once the lowest unit overlapping it has run its backward. */
static int zs_shape_buckets(zs_step_shape *s)
{
    size_t B = s->cfg.reduce_bucket_size ? s->cfg.reduce_bucket_size : s->part.padded;
    int cap = 0;
    /* chunk by chunk from the last (the interleaved schedule's chunks run
     * their backwards apart, so no bucket spans two); the padding goes
     * with the last chunk's last unit */
    for (int c = s->nchunks - 1; c >= 0; c--) {
        int ul = s->clast[c];
        size_t hi = c + 1 < s->nchunks ? s->clo[c + 1] : s->part.padded;
        size_t lo = hi; /* the open bucket is [lo, hi) */
        int ready = ul;
        for (int u = ul; u >= s->cfirst[c]; u--) {
            size_t uo = s->unit_lo[u];
            size_t un = (u == ul ? (c + 1 < s->nchunks ? s->clo[c + 1] : s->part.padded)
                                 : s->unit_lo[u + 1]) - uo;
            if (lo < hi && (hi - lo) + un > B) {
                ZS_TRY(zs_range_push(&s->buckets, &s->nbuckets, &cap,
                                     (zs_step_range){.lo = lo, .hi = hi, .unit = ready}));
                hi = lo;
            }
            lo = uo;
            ready = u;
            while (hi - lo > B) {
                ZS_TRY(zs_range_push(&s->buckets, &s->nbuckets, &cap,
                                     (zs_step_range){.lo = hi - B, .hi = hi, .unit = u}));
                hi -= B;
            }
        }
        if (hi > lo)
            ZS_TRY(zs_range_push(&s->buckets, &s->nbuckets, &cap,
                                 (zs_step_range){.lo = lo, .hi = hi, .unit = ready}));
    }
    for (int i = 0; i < s->nbuckets; i++) {
        const zs_step_range *b = &s->buckets[i];
        if (b->hi - b->lo > s->max_bucket)
            s->max_bucket = b->hi - b->lo;
        size_t mp = zs_range_max_part(&s->part, b->lo, b->hi);
        if (mp > s->max_chunk)
            s->max_chunk = mp;
        if (s->comp) {
            const zs_comp_spec *cs = &s->cfg.compression;
            size_t sb = (size_t)zs_range_sum(&s->part, b->lo, b->hi, zs_codec_bytes, cs);
            size_t rb = (size_t)s->part.world * zs_comp_bytes(cs, mp);
            if (sb > s->csend_bytes)
                s->csend_bytes = sb;
            if (rb > s->crecv_bytes)
                s->crecv_bytes = rb;
        }
    }
    return 0;
}

/* Stage 3: the ranges each unit gathers: its own range, then the entries it
 * borrows from other units (the GPT head's tied token embedding). */
static int zs_shape_gathers(zs_step_shape *s, const zs_model *m)
{
    const zs_layout *lay = zs_model_layout(m);
    int cap = 0, n = 0;
    s->gfirst = calloc((size_t)s->U, sizeof(int));
    s->gn = calloc((size_t)s->U, sizeof(int));
    s->gelems = calloc((size_t)s->U, sizeof(size_t));
    if (!s->gfirst || !s->gn || !s->gelems)
        ZS_FAIL("out of host memory planning parameter gathers");
    for (int u = 0; u < s->U; u++) {
        s->gfirst[u] = n;
        if (s->uchunk[u] < 0)
            continue; /* another pipeline stage's unit */
        size_t lo = s->unit_lo[u], hi = lo + s->unit_n[u];
        ZS_TRY(zs_range_push(&s->granges, &n, &cap, (zs_step_range){.lo = lo, .hi = hi, .unit = u}));
        int ids[ZS_MAX_USES_PUBLIC];
        int k = zs_model_unit_uses(m, u, ids, ZS_MAX_USES_PUBLIC);
        for (int i = 0; i < k; i++) {
            const zs_param_entry *pe = &lay->entries[ids[i]];
            /* ranges are the rank's offsets; an entry it does not hold is
             * the last pipeline stage's own copy of the tied embedding */
            size_t elo;
            if (pe->layer != u && zs_step_entry_local(s, lay, ids[i], &elo))
                ZS_TRY(zs_range_push(&s->granges, &n, &cap,
                                     (zs_step_range){.lo = elo, .hi = elo + pe->numel,
                                                     .unit = u}));
        }
        s->gn[u] = n - s->gfirst[u];
        for (int i = s->gfirst[u]; i < n; i++)
            s->gelems[u] += s->granges[i].hi - s->granges[i].lo;
    }
    return 0;
}

void zs_step_shape_place_buffers(zs_step_shape *s)
{
    const zs_partition *p = &s->part;
    int st = s->stage;
    size_t P = p->padded, S = p->shard, ps = s->ps;
    size_t opt = st == 0 ? P : S;
    zs_buf_spec *b = s->buf;
#define ZS_SETBUF(id, c, n) (b[id] = (zs_buf_spec){.cat = (c), .bytes = (n)})
    ZS_SETBUF(ZS_BUF_PARAMS, ZS_MEM_PARAMS, (st == 3 ? S : P) * ps);
    ZS_SETBUF(ZS_BUF_MASTER, ZS_MEM_OPT_MASTER, s->mixed ? opt * 4 : 0);
    ZS_SETBUF(ZS_BUF_M, ZS_MEM_OPT_M, opt * 4);
    ZS_SETBUF(ZS_BUF_V, ZS_MEM_OPT_V, s->cfg.optimizer == ZS_OPT_ADAMW ? opt * 4 : 0);
    ZS_SETBUF(ZS_BUF_GFULL, ZS_MEM_GRADS, st <= 1 ? P * ps : 0);
    /* the step schedule reduces once, into GFULL's own part: no shard
     * accumulator, and in deterministic mode with accumulation the
     * micro-batches add up in fixed point (integer sums do not depend on
     * how they are grouped, so the bytes equal the micro-batch schedule's) */
    ZS_SETBUF(ZS_BUF_GSHARD, ZS_MEM_GRADS, s->reduce_step ? 0 : S * ps);
    ZS_SETBUF(ZS_BUF_GACC, ZS_MEM_GRADS, s->det && !s->reduce_step ? S * 8 : 0);
    ZS_SETBUF(ZS_BUF_GFIX, ZS_MEM_GRADS,
              s->det && s->reduce_step && s->cfg.grad_accum > 1 ? P * 8 : 0);
    ZS_SETBUF(ZS_BUF_FIXBUF, ZS_MEM_COMM_BUFFERS, s->det ? s->max_bucket * 8 : 0);
    ZS_SETBUF(ZS_BUF_RECV, ZS_MEM_COMM_BUFFERS, s->max_chunk * (s->det ? 8 : ps));
    ZS_SETBUF(ZS_BUF_RESIDUAL, ZS_MEM_COMPRESSION, s->comp && s->cfg.error_feedback ? P * 4 : 0);
    ZS_SETBUF(ZS_BUF_CX, ZS_MEM_WORKSPACE, s->comp ? s->max_bucket * 4 : 0);
    ZS_SETBUF(ZS_BUF_CAPPROX, ZS_MEM_WORKSPACE, s->comp ? s->max_bucket * 4 : 0);
    ZS_SETBUF(ZS_BUF_CACC, ZS_MEM_WORKSPACE, s->comp ? s->max_chunk * 4 + 4 : 0);
    ZS_SETBUF(ZS_BUF_CSEND, ZS_MEM_COMM_BUFFERS, s->comp ? s->csend_bytes + 1 : 0);
    ZS_SETBUF(ZS_BUF_CRECV, ZS_MEM_COMM_BUFFERS, s->comp ? s->crecv_bytes + 1 : 0);
    /* the ring's two receive buffers (2 ranks receive straight into recv) */
    ZS_SETBUF(ZS_BUF_RING, ZS_MEM_COMM_BUFFERS,
              p->world > 2 ? 2 * s->max_chunk * (s->det ? 8 : ps) : 0);
    /* fp32 views of one unit: mixed precision converts, QAT fake-quantizes */
    ZS_SETBUF(ZS_BUF_STAGE_P, ZS_MEM_WORKSPACE,
              s->mixed || s->cfg.qat ? s->stage_elems * 4 : 0);
    ZS_SETBUF(ZS_BUF_STAGE_G, ZS_MEM_WORKSPACE, s->stage_elems * 4);
    ZS_SETBUF(ZS_BUF_TOKENS, ZS_MEM_WORKSPACE,
              s->cfg.model.kind == ZS_MODEL_GPT ? s->tok_bytes : 0);
    ZS_SETBUF(ZS_BUF_TARGETS, ZS_MEM_WORKSPACE, s->tok_bytes);
    ZS_SETBUF(ZS_BUF_X, ZS_MEM_WORKSPACE, s->x_bytes);
    int mb = s->cfg.micro_batch;
    /* each chunk's slots; the working slots and the scratch are shared by
     * the chunks: the largest (the chunk with the head) */
    size_t acts = 0, ckpt = 0, shared = 0, scratch = 0;
    for (int c = 0; c < s->nchunks; c++) {
        zs_model_config cm = s->cfg.model;
        if (s->nchunks > 1 && zs_pp_chunk_model(&s->cfg, c, &cm))
            continue; /* unreachable: the chunks were built from it */
        size_t sh = zs_model_shared_activation_bytes(&cm, mb), sc = zs_model_scratch_bytes(&cm, mb);
        acts += (size_t)s->cslots[c] * zs_model_activation_bytes(&cm, mb);
        ckpt += (size_t)s->cslots[c] * zs_model_checkpoint_bytes(&cm, mb);
        shared = sh > shared ? sh : shared;
        scratch = sc > scratch ? sc : scratch;
    }
    ZS_SETBUF(ZS_BUF_ACTS, ZS_MEM_ACTIVATIONS, acts + shared);
    ZS_SETBUF(ZS_BUF_TIED, ZS_MEM_PARAMS, s->pp_rank == s->pp - 1 ? s->tied_elems * ps : 0);
    /* the interleaved schedule's last rank keeps tied_bufs of them in
     * flight: the first rank takes each only at its embedding's backward,
     * after messages that the last rank sends later */
    ZS_SETBUF(ZS_BUF_TIED_GRAD, ZS_MEM_COMM_BUFFERS, s->tied_elems * 4 * (size_t)s->tied_bufs);
    /* hpZ: this rank's 1/K of the parameters, refreshed by each forward
     * gather, read by the backward gathers inside its secondary group */
    ZS_SETBUF(ZS_BUF_HPZ, ZS_MEM_PARAMS,
              st == 3 && s->cfg.hpz_partition_size > 1
                  ? P / (size_t)s->cfg.hpz_partition_size * ps : 0);
    /* a pipeline stage keeps the checkpoints of each micro-batch in flight */
    ZS_SETBUF(ZS_BUF_CKPT, ZS_MEM_CHECKPOINTS, ckpt);
    ZS_SETBUF(ZS_BUF_SCRATCH, ZS_MEM_WORKSPACE, scratch);
    ZS_SETBUF(ZS_BUF_INIT, ZS_MEM_WORKSPACE, s->mixed ? ZS_INIT_CHUNK * 4 : 0);
    /* offload_optimizer (ZeRO-Offload): the fp32 master (in fp32 runs too:
     * the device keeps the working copy), m and v live on the host, or in
     * files with the nvme tier; the host receives the reduced gradient
     * shard and sends back the updated parameter shard, each in working
     * precision */
    zs_offload off = st >= 1 ? s->cfg.offload_optimizer : ZS_OFFLOAD_NONE;
    if (off != ZS_OFFLOAD_NONE) {
        zs_mem_tier t = off == ZS_OFFLOAD_CPU ? ZS_TIER_HOST : ZS_TIER_NVME;
        ZS_SETBUF(ZS_BUF_MASTER, ZS_MEM_OPT_MASTER, S * 4);
        b[ZS_BUF_MASTER].tier = b[ZS_BUF_M].tier = b[ZS_BUF_V].tier = t;
        /* the reduced gradient shard accumulates on the host, each
         * bucket's part sent down as it is reduced (as DeepSpeed streams
         * them); with the step schedule the shard is gfull's part on the
         * device, copied down before the optimizer */
        if (s->reduce_step) {
            ZS_SETBUF(ZS_BUF_HGRAD, ZS_MEM_GRADS, S * ps);
            b[ZS_BUF_HGRAD].tier = ZS_TIER_HOST;
        } else {
            b[ZS_BUF_GSHARD].tier = ZS_TIER_HOST;
        }
        if (st == 3 && s->cfg.offload_param == ZS_OFFLOAD_NVME) {
            /* the shard in the file; the updated shard is written there
             * from the host, and each gather reads this rank's part */
            b[ZS_BUF_PARAMS].tier = ZS_TIER_NVME;
            ZS_SETBUF(ZS_BUF_HPARAM, ZS_MEM_PARAMS, S * ps);
            b[ZS_BUF_HPARAM].tier = ZS_TIER_HOST;
        } else if (st == 3 && s->cfg.offload_param == ZS_OFFLOAD_CPU) {
            /* offload_param: the parameter shard itself lives on the host,
             * the optimizer updates it there, and each gather sends this
             * rank's part of the range up */
            b[ZS_BUF_PARAMS].tier = ZS_TIER_HOST;
        } else {
            ZS_SETBUF(ZS_BUF_HPARAM, ZS_MEM_PARAMS, S * ps);
            b[ZS_BUF_HPARAM].tier = ZS_TIER_HOST;
        }
        if (off == ZS_OFFLOAD_NVME) {
            size_t chunk = S < ZS_SWAP_CHUNK ? S : ZS_SWAP_CHUNK;
            int states = 2 + (s->cfg.optimizer == ZS_OPT_ADAMW);
            ZS_SETBUF(ZS_BUF_SWAP, ZS_MEM_WORKSPACE, 2 * chunk * (size_t)states * 4);
            b[ZS_BUF_SWAP].tier = ZS_TIER_HOST;
        }
    }
    /* expert parallelism in DeepSpeed's layout: the experts' store */
    if (s->xsplit) {
        size_t XP = s->xpadded, XS = s->xshard, xopt = st == 0 ? XP : XS;
        ZS_SETBUF(ZS_BUF_XPARAMS, ZS_MEM_PARAMS, (st == 3 ? XS : XP) * ps);
        /* stage 3: a MoE unit's experts, gathered over edp for its compute */
        ZS_SETBUF(ZS_BUF_XGATHER, ZS_MEM_PARAMS, st == 3 ? s->xgmax * ps : 0);
        ZS_SETBUF(ZS_BUF_XMASTER, ZS_MEM_OPT_MASTER, s->mixed ? xopt * 4 : 0);
        ZS_SETBUF(ZS_BUF_XM, ZS_MEM_OPT_M, xopt * 4);
        ZS_SETBUF(ZS_BUF_XV, ZS_MEM_OPT_V, s->cfg.optimizer == ZS_OPT_ADAMW ? xopt * 4 : 0);
        ZS_SETBUF(ZS_BUF_XGACC, ZS_MEM_GRADS, XP * (s->det ? 8 : ps));
        /* the reduced gradient (stage 0: all of it, gathered), unless edp
         * is one rank without deterministic mode: the accumulator then */
        ZS_SETBUF(ZS_BUF_XGRAD, ZS_MEM_GRADS,
                  s->det || s->xworld > 1 ? (st == 0 ? XP : XS) * ps : 0);
        ZS_SETBUF(ZS_BUF_XRECV, ZS_MEM_COMM_BUFFERS, s->det && s->xworld > 1 ? XS * 8 : 0);
        ZS_SETBUF(ZS_BUF_XTMP, ZS_MEM_WORKSPACE, s->det ? s->xpiece * (8 + ps) : 0);
    }
#undef ZS_SETBUF
}

int zs_step_ep_exact(const zs_run_config *cfg, int world)
{
    if (cfg->deterministic)
        return 1;
    return world == 2 && cfg->precision == ZS_DTYPE_F32 &&
           !(zs_step_reduce_once(cfg) && cfg->grad_accum > 1);
}

int zs_step_ep_split(const zs_run_config *cfg, int world, const char **why)
{
    const char *w = NULL;
    int ep = cfg->model.moe_ep;
    if (ep <= 1)
        w = "no expert parallelism";
    else if (cfg->offload_optimizer != ZS_OFFLOAD_NONE || cfg->offload_param != ZS_OFFLOAD_NONE)
        w = "offload";
    else if (cfg->compression.kind != ZS_COMP_NONE)
        w = "gradient compression";
    else if (cfg->hpz_partition_size > 1 || cfg->quantized_weights || cfg->quantized_gradients)
        w = "ZeRO++";
    else if (cfg->pp > 1 || cfg->model.tp > 1)
        w = "pipeline or tensor parallelism";
    else if (cfg->ep_layout != ZS_EP_LAYOUT_DEEPSPEED && !zs_step_ep_exact(cfg, world))
        w = "more than 2 ranks, bf16/fp16 or the step schedule's accumulation without "
            "--deterministic (floats summed over edp are not --ep 1's order)";
    if (why)
        *why = w;
    return w == NULL;
}

int zs_step_ep_check(const zs_run_config *cfg, int world)
{
    const char *why = NULL;
    if (cfg->ep_layout == ZS_EP_LAYOUT_DEEPSPEED && cfg->model.moe_ep > 1 &&
        !zs_step_ep_split(cfg, world, &why))
        ZS_FAIL("--ep-layout deepspeed (moe.ep_layout): DeepSpeed's layout is not implemented "
                "with %s; run without it or with --ep-layout auto", why);
    return 0;
}

void zs_step_ep_configs(const zs_run_config *cfg, int world, zs_run_config *shape_cfg,
                        zs_model_config *layout)
{
    *shape_cfg = *cfg;
    *layout = cfg->model;
    if (cfg->model.moe_ep <= 1)
        return;
    if (zs_step_ep_split(cfg, world, NULL)) {
        /* each source's gradients apart where the reduction must give
         * --ep 1's bytes; else the model's one sum over the sources */
        shape_cfg->model.moe_ep_home = zs_step_ep_exact(cfg, world) ? ZS_MOE_EP_BY_SOURCE : 0;
        shape_cfg->model.moe_ep_split = 1;
        *layout = shape_cfg->model;
        return;
    }
    shape_cfg->model.moe_ep_home = ZS_MOE_EP_HOME;
    layout->moe_ep = 1;
    layout->moe_ep_rank = 0;
}

void zs_step_expert_gathers(const zs_step_shape *s, const zs_step_program *p, double *bytes,
                            int *calls)
{
    *bytes = 0.0;
    *calls = 0;
    if (!s->xsplit || s->stage != 3 || s->xworld <= 1)
        return;
    double ring = (s->xworld - 1.0) / s->xworld;
    for (size_t i = 0; i < p->n; i++) {
        const zs_step_op *o = &p->ops[i];
        if ((o->kind != ZS_SOP_FORWARD && o->kind != ZS_SOP_BACKWARD) || o->unit < 0 ||
            o->unit >= s->U || s->xun[o->unit] == 0)
            continue;
        *bytes += ring * (double)s->xun[o->unit] * (double)s->ps;
        (*calls)++;
    }
}

void zs_step_expert_traffic(const zs_step_shape *s, double *rs_bytes, int *rs_calls,
                            double *ag_bytes, int *ag_calls)
{
    *rs_bytes = *ag_bytes = 0.0;
    *rs_calls = *ag_calls = 0;
    if (!s->xsplit || s->xworld <= 1)
        return; /* one rank per edp group: nothing to exchange */
    double M = s->xworld, ring = (M - 1.0) / M;
    *rs_calls = 1; /* fixed point, or floats (--ep-layout deepspeed) */
    *rs_bytes = ring * (double)s->xpadded * (s->det ? 8.0 : (double)s->ps);
    if (s->stage == 3)
        return; /* no parameters to bring back: the gathers (zs_step_expert_gathers) */
    *ag_calls = 1;
    *ag_bytes = ring * (double)s->xpadded * (double)s->ps;
}

/* The rank's model chunks and their activation slots: one chunk (the
 * whole model, or the pipeline stage's units) unless interleaved. */
static int zs_shape_chunks(zs_step_shape *s, const zs_run_config *cfg, const zs_layout *lay)
{
    int il = s->pp > 1 && cfg->pp_schedule == ZS_PP_INTERLEAVED && cfg->virtual_stages > 1;
    int v = il ? cfg->virtual_stages : 1, m = cfg->grad_accum;
    s->nchunks = v;
    s->cfirst = calloc((size_t)v, sizeof(int));
    s->clast = calloc((size_t)v, sizeof(int));
    s->cslots = calloc((size_t)v, sizeof(int));
    s->clo = calloc((size_t)v, sizeof(size_t));
    s->cglo = calloc((size_t)v, sizeof(size_t));
    s->cn = calloc((size_t)v, sizeof(size_t));
    s->uchunk = malloc((size_t)s->U * sizeof(int));
    s->unit_lo = calloc((size_t)s->U, sizeof(size_t));
    s->unit_n = calloc((size_t)s->U, sizeof(size_t));
    if (!s->cfirst || !s->clast || !s->cslots || !s->clo || !s->cglo || !s->cn || !s->uchunk ||
        !s->unit_lo || !s->unit_n)
        ZS_FAIL("out of host memory planning the step");
    for (int c = 0; c < v; c++) {
        zs_model_config cm = cfg->model;
        if (il)
            ZS_TRY(zs_pp_chunk_model(cfg, c, &cm));
        s->cfirst[c] = s->pp > 1 ? cm.pp_first : 0;
        s->clast[c] = s->pp > 1 ? cm.pp_last : s->U - 1;
        s->cglo[c] = lay->layer_offset[s->cfirst[c]];
        s->cn[c] = lay->layer_offset[s->clast[c]] + lay->layer_numel[s->clast[c]] - s->cglo[c];
        s->clo[c] = c ? s->clo[c - 1] + s->cn[c - 1] : 0;
    }
    s->ufirst = s->cfirst[0];
    s->ulast = s->clast[v - 1];
    for (int u = 0; u < s->U; u++)
        s->uchunk[u] = -1;
    for (int c = 0; c < v; c++)
        for (int u = s->cfirst[c]; u <= s->clast[c]; u++)
            s->uchunk[u] = c;
    s->tied_bufs = 1;
    if (s->pp <= 1) {
        s->cslots[0] = s->slots = 1;
        return 0;
    }
    if (il && s->pp_rank == s->pp - 1 &&
        (s->tied_bufs = zs_pp_interleaved_tied_bufs(s->pp, v, m)) < 1)
        ZS_FAIL("internal: the interleaved schedule's messages deadlock at --pp %d "
                "--virtual-stages %d with %d micro-batches", s->pp, v, m);
    /* the most micro-batches of each chunk forwarded and not yet backwarded */
    zs_pp_item *items = malloc(2 * (size_t)m * (size_t)v * sizeof *items);
    int *live = calloc((size_t)v, sizeof(int));
    if (!items || !live) {
        free(items);
        free(live);
        ZS_FAIL("out of host memory planning the pipeline's schedule");
    }
    int n = zs_pp_schedule_items(cfg->pp_schedule, s->pp, v, s->pp_rank, m, items);
    s->slots = 0;
    for (int i = 0; i < n; i++) {
        int c = items[i].chunk;
        live[c] += items[i].backward ? -1 : 1;
        if (live[c] > s->cslots[c])
            s->cslots[c] = live[c];
    }
    for (int c = 0; c < v; c++)
        s->slots += s->cslots[c];
    free(items);
    free(live);
    return 0;
}

size_t zs_step_local_global(const zs_step_shape *s, size_t local, size_t *run)
{
    int c = 0;
    while (c + 1 < s->nchunks && local >= s->clo[c + 1])
        c++;
    *run = s->clo[c] + s->cn[c] > local ? s->clo[c] + s->cn[c] - local : 0;
    return s->cglo[c] + (local - s->clo[c]);
}

int zs_step_entry_local(const zs_step_shape *s, const zs_layout *lay, int id, size_t *lo)
{
    const zs_param_entry *pe = &lay->entries[id];
    /* an expert entry of DeepSpeed's layout is in the expert store */
    if (pe->layer < 0 || pe->layer >= s->U || s->uchunk[pe->layer] < 0 ||
        pe->offset >= lay->num_params)
        return 0;
    *lo = s->unit_lo[pe->layer] + (pe->offset - lay->layer_offset[pe->layer]);
    return 1;
}

int zs_step_shape_build(const zs_run_config *cfg, const zs_model *m, int world,
                        zs_step_shape *s)
{
    zs_step_shape_init(s, cfg);
    if (s->stage < 0 || s->stage > 3)
        ZS_FAIL("ZeRO stage must be 0, 1, 2 or 3, got %d", s->stage);
    const zs_layout *lay = zs_model_layout(m);
    s->U = lay->n_layers;
    s->pp = 1;
    s->ufirst = 0;
    s->ulast = s->U - 1;
    s->slots = 1;
    size_t total = lay->num_params;
    if (cfg->pp > 1) {
        const zs_model_config *mc = &cfg->model;
        if (!mc->pp_on || mc->pp_first < 0 || mc->pp_last >= s->U || mc->pp_first > mc->pp_last)
            ZS_FAIL("internal: a pipeline stage's shape needs its units (zs_pp_stage_config)");
        s->pp = cfg->pp;
        s->pp_rank = mc->pp_stage;
        if (s->pp_rank == 0 || s->pp_rank == s->pp - 1)
            s->tied_elems = lay->entries[0].numel;
        s->io_elems = zs_model_boundary_elems(mc, cfg->micro_batch);
    }
    if (zs_shape_chunks(s, cfg, lay)) {
        zs_step_shape_free(s);
        return -1;
    }
    total = 0;
    for (int c = 0; c < s->nchunks; c++)
        total += s->cn[c];
    zs_partition_make(&s->part, total, world, 0, s->det);
    if (lay->num_expert > 0) { /* DeepSpeed's layout: the expert store */
        int ep = cfg->model.moe_ep;
        if (!cfg->model.moe_ep_split || ep <= 1 || world % ep)
            return zs_error_set("internal: an expert store without expert parallelism over "
                                "%d ranks", world);
        size_t q = (size_t)(world / ep) * (s->det ? ZS_DET_BLOCK : 1);
        s->xsplit = 1;
        s->xworld = world / ep;
        s->xnum = lay->num_expert;
        s->xpadded = (s->xnum + q - 1) / q * q;
        s->xshard = s->xpadded / (size_t)s->xworld;
        s->xpiece = s->xnum < ZS_INIT_CHUNK ? s->xnum : ZS_INIT_CHUNK;
        /* each unit's experts: one range of the store */
        s->xulo = calloc((size_t)s->U, sizeof(size_t));
        s->xun = calloc((size_t)s->U, sizeof(size_t));
        if (!s->xulo || !s->xun) {
            zs_step_shape_free(s);
            ZS_FAIL("out of host memory planning the step");
        }
        for (int i = lay->n_entries - 1; i >= 0; i--) {
            const zs_param_entry *pe = &lay->entries[i];
            if (pe->offset < lay->num_params || pe->layer < 0 || pe->layer >= s->U)
                continue;
            s->xulo[pe->layer] = pe->offset - lay->num_params;
            s->xun[pe->layer] += pe->numel;
            if (s->xun[pe->layer] > s->xgmax)
                s->xgmax = s->xun[pe->layer];
        }
    }
    for (int u = 0; u < s->U; u++) {
        int c = s->uchunk[u];
        if (c < 0)
            continue;
        s->unit_lo[u] = s->clo[c] + lay->layer_offset[u] - s->cglo[c];
        s->unit_n[u] = lay->layer_numel[u];
        size_t e = zs_model_unit_elems(m, u);
        if (e > s->stage_elems)
            s->stage_elems = e;
    }
    int rc = zs_shape_buckets(s);
    if (!rc && s->stage == 3)
        rc = zs_shape_gathers(s, m);
    if (!rc && s->stage < 3) {
        s->ag_piece = cfg->allgather_bucket_size && cfg->allgather_bucket_size < s->part.padded
                          ? cfg->allgather_bucket_size : s->part.padded;
        s->npieces = (int)((s->part.padded + s->ag_piece - 1) / s->ag_piece);
    }
    if (rc) {
        zs_step_shape_free(s);
        return rc;
    }
    const zs_model_config *mc = &cfg->model;
    int mb = cfg->micro_batch;
    size_t ntok = mc->kind == ZS_MODEL_GPT ? (size_t)mb * (size_t)mc->seq_len : (size_t)mb;
    s->tok_bytes = ntok * sizeof(int32_t);
    s->x_bytes = mc->kind == ZS_MODEL_MLP ? (size_t)mb * (size_t)mc->input_dim * sizeof(float) : 0;
    zs_step_shape_place_buffers(s);
    return 0;
}

int zs_step_reduce_once(const zs_run_config *cfg)
{
    return cfg->stage <= 1 && cfg->grad_reduce == ZS_GRAD_REDUCE_STEP;
}

int zs_step_shape_units_over_bound(const zs_step_shape *s, int *first)
{
    int n = 0;
    *first = -1;
    for (int u = 0; s->stage == 3 && u < s->U; u++)
        if (s->gelems[u] > s->cfg.stage3_max_live_parameters) {
            if (n++ == 0)
                *first = u;
        }
    return n;
}

int zs_step_shape_check_run(const zs_step_shape *s)
{
    for (int i = 0; i < s->nbuckets; i++)
        ZS_TRY(zs_check_int(s->buckets[i].hi - s->buckets[i].lo, "a gradient bucket"));
    for (int u = 0; s->stage == 3 && u < s->U; u++)
        for (int i = s->gfirst[u]; i < s->gfirst[u] + s->gn[u]; i++)
            ZS_TRY(zs_check_int(s->granges[i].hi - s->granges[i].lo, "a parameter gather"));
    if (s->stage < 3)
        ZS_TRY(zs_check_int(s->ag_piece, "a parameter allgather"));
    if (s->comp && (s->csend_bytes > (size_t)INT_MAX || s->crecv_bytes > (size_t)INT_MAX))
        ZS_FAIL("a compressed bucket exceeds what one MPI call can carry: lower reduce_bucket_size");
    return 0;
}

void zs_step_shape_free(zs_step_shape *s)
{
    free(s->unit_lo);
    free(s->unit_n);
    free(s->cfirst);
    free(s->clast);
    free(s->uchunk);
    free(s->cslots);
    free(s->clo);
    free(s->cglo);
    free(s->cn);
    free(s->buckets);
    free(s->granges);
    free(s->gfirst);
    free(s->gn);
    free(s->gelems);
    free(s->xulo);
    free(s->xun);
    memset(s, 0, sizeof *s);
}

/* ---- building the program ------------------------------------------------ */

static const char *const zs_sop_names[ZS_SOP_NKINDS] = {
    [ZS_SOP_BEGIN] = "begin",
    [ZS_SOP_LOAD] = "load",
    [ZS_SOP_GATHER] = "gather",
    [ZS_SOP_WAIT] = "wait",
    [ZS_SOP_FORWARD] = "forward",
    [ZS_SOP_RELEASE] = "release",
    [ZS_SOP_LOSS] = "loss",
    [ZS_SOP_ZERO_GRADS] = "zero_grads",
    [ZS_SOP_BUCKET_ALLOC] = "bucket_alloc",
    [ZS_SOP_BACKWARD] = "backward",
    [ZS_SOP_ACCUM_FIXED] = "accum_fixed",
    [ZS_SOP_REDUCE] = "reduce",
    [ZS_SOP_REDUCE_WAIT] = "reduce_wait",
    [ZS_SOP_LOSS_SUM] = "loss_sum",
    [ZS_SOP_CHECK] = "check",
    [ZS_SOP_NORM] = "norm",
    [ZS_SOP_PUT_SHARD] = "put_shard",
    [ZS_SOP_OPTIMIZER_FULL] = "optimizer_full",
    [ZS_SOP_OPTIMIZER_SHARD] = "optimizer_shard",
    [ZS_SOP_OPTIMIZER_HOST] = "optimizer_host",
    [ZS_SOP_OPTIMIZER_SWAPPED] = "optimizer_swapped",
    [ZS_SOP_OFFLOAD_GRADS] = "offload_grads",
    [ZS_SOP_UPLOAD_PARAMS] = "upload_params",
    [ZS_SOP_ALLGATHER] = "allgather",
    [ZS_SOP_RECV_ACT] = "recv_act",
    [ZS_SOP_SEND_ACT] = "send_act",
    [ZS_SOP_RECV_GRAD] = "recv_grad",
    [ZS_SOP_SEND_GRAD] = "send_grad",
    [ZS_SOP_TIED_SEND] = "tied_send",
    [ZS_SOP_TIED_RECV] = "tied_recv",
    [ZS_SOP_TIED_SYNC] = "tied_sync",
};

/* "parameters": the blocks of each stage, [*lo, *hi] (1-based units), as
 * the greedy cut under the least bottleneck X for which it is feasible: a
 * stage closes before block u when u would take it over X, or when the
 * blocks left are as many as the stages left. w[u]: unit u's weight. */
static int zs_pp_cut(const size_t *w, int L, int P, size_t X, int *first_block)
{
    int U = L + 2, parts = 0;
    size_t cur = 0;
    for (int u = 0; u < U; u++) {
        int block = u >= 1 && u <= L, can_cut = u >= 2 && u <= L; /* never the head alone */
        int left_blocks = L - u + 1, left_parts = P - parts - 1;
        if (w[u] > X)
            return -1;
        if (can_cut && parts + 1 < P && (cur + w[u] > X || left_blocks == left_parts)) {
            if (first_block)
                first_block[++parts] = u;
            else
                parts++;
            cur = 0;
        } else if (cur + w[u] > X) {
            return -1; /* a part over X that cannot be cut */
        }
        cur += w[u];
        (void)block;
    }
    return parts + 1 == P ? 0 : -1;
}

int zs_pp_stage_config(zs_run_config *cfg, int stage)
{
    zs_model_config *mc = &cfg->model;
    int L = mc->n_layer, P = cfg->pp;
    if (mc->kind != ZS_MODEL_GPT)
        ZS_FAIL("pipeline parallelism cuts the GPT's blocks into stages: use --model gpt");
    if (P < 1 || P > L)
        ZS_FAIL("--pp %d is more pipeline stages than the model's %d blocks: every stage needs "
                "at least one block", P, L);
    if (stage < 0 || stage >= P)
        ZS_FAIL("internal: pipeline stage %d of %d", stage, P);
    if (cfg->pp_schedule == ZS_PP_INTERLEAVED && cfg->virtual_stages > 1 && P > 1) {
        zs_model_config first; /* the rank's first chunk: virtual stage `stage` */
        mc->pp_stage = stage;
        ZS_TRY(zs_pp_chunk_model(cfg, 0, &first));
        *mc = first;
        return 0;
    }
    int b0, b1; /* 0-based blocks of the stage */
    if (cfg->pp_partition == ZS_PP_PARAMETERS && P > 1) {
        zs_model_config whole = *mc;
        whole.pp_on = 0;
        zs_model *m;
        ZS_TRY(zs_model_create(&whole, &m));
        size_t *w = malloc((size_t)(L + 2) * sizeof *w), lo = 0, hi = 0;
        int *first = malloc((size_t)(P + 1) * sizeof *first);
        if (!w || !first) {
            free(w);
            free(first);
            zs_model_destroy(m);
            ZS_FAIL("out of host memory partitioning the pipeline");
        }
        for (int u = 0; u < L + 2; u++) {
            w[u] = zs_model_unit_elems(m, u);
            hi += w[u];
            if (w[u] > lo)
                lo = w[u];
        }
        zs_model_destroy(m);
        while (lo < hi) { /* the least X the cut reaches P stages under */
            size_t mid = lo + (hi - lo) / 2;
            if (zs_pp_cut(w, L, P, mid, NULL) == 0)
                hi = mid;
            else
                lo = mid + 1;
        }
        first[0] = 1;
        int rc = zs_pp_cut(w, L, P, lo, first);
        first[P] = L + 1;
        b0 = first[stage] - 1;
        b1 = first[stage + 1] - 2;
        free(w);
        free(first);
        if (rc)
            ZS_FAIL("internal: no balanced pipeline partition of %d blocks into %d stages", L, P);
    } else {
        int q = L / P, r = L % P; /* the first r stages hold q + 1 blocks */
        b0 = stage * q + (stage < r ? stage : r);
        b1 = b0 + q + (stage < r) - 1;
    }
    mc->pp_on = P > 1;
    mc->pp_stage = stage;
    mc->pp_first = stage == 0 ? 0 : b0 + 1;
    mc->pp_last = stage == P - 1 ? L + 1 : b1 + 1;
    return 0;
}

int zs_pp_chunk_model(const zs_run_config *cfg, int chunk, zs_model_config *out)
{
    zs_run_config v = *cfg; /* a uniform pipeline of P·v stages */
    int P = cfg->pp, rank = cfg->model.pp_stage;
    v.pp = P * cfg->virtual_stages;
    v.pp_schedule = ZS_PP_1F1B;
    v.pp_partition = ZS_PP_UNIFORM;
    v.virtual_stages = 1;
    if (chunk < 0 || chunk >= cfg->virtual_stages)
        ZS_FAIL("internal: model chunk %d of %d", chunk, cfg->virtual_stages);
    ZS_TRY(zs_pp_stage_config(&v, chunk * P + rank));
    *out = v.model;
    out->pp_stage = rank;
    return 0;
}

/* ---- the interleaved schedule's messages, simulated ---------------------- */

enum { ZS_SIM_RECV, ZS_SIM_SEND, ZS_SIM_WAIT_SLOT, ZS_SIM_WAIT_TIED };
enum { ZS_SIM_ACT, ZS_SIM_GRAD, ZS_SIM_TIED };

typedef struct {
    int kind, ch, arg; /* arg: the slot (WAIT_SLOT, SEND), micro-batch (WAIT_TIED) */
} zs_sim_ev;

typedef struct {
    int P, v, m, k;
    zs_sim_ev **ev;    /* [P] each rank's events */
    int *nev, *pc;     /* [P] */
    int *posted, *got; /* [channel] sends posted, receives done */
    int **pch, **pidx, **pslot, *npend; /* [P][..] each rank's pending sends */
} zs_sim;

static int zs_sim_ch(const zs_sim *x, int from, int to, int tag)
{
    return (from * x->P + to) * 3 + tag;
}

/* Rank r's events of its schedule, in the engine's order of ops. */
static int zs_sim_events(zs_sim *x, int r, const zs_pp_item *it, int n, const int *slot0,
                         const int *cslots)
{
    int P = x->P, PV = x->P * x->v, prev = (r + P - 1) % P, next = (r + 1) % P, e = 0;
    zs_sim_ev *ev = x->ev[r];
#define ZS_EV(k, c, a) (ev[e++] = (zs_sim_ev){.kind = (k), .ch = (c), .arg = (a)})
    for (int i = 0; i < n; i++) {
        int c = it[i].chunk, a = it[i].micro, vs = c * P + r;
        int slot = slot0[c] + a % cslots[c];
        if (!it[i].backward) { /* recv_act, forward, send_act */
            ZS_EV(ZS_SIM_WAIT_SLOT, -1, slot);
            if (vs > 0)
                ZS_EV(ZS_SIM_RECV, zs_sim_ch(x, prev, r, ZS_SIM_ACT), 0);
            if (vs < PV - 1)
                ZS_EV(ZS_SIM_SEND, zs_sim_ch(x, r, next, ZS_SIM_ACT), slot);
            continue;
        }
        if (vs < PV - 1) /* recv_grad, backward, [tied], send_grad */
            ZS_EV(ZS_SIM_RECV, zs_sim_ch(x, next, r, ZS_SIM_GRAD), 0);
        ZS_EV(ZS_SIM_WAIT_SLOT, -1, slot);
        if (vs == PV - 1) {
            ZS_EV(ZS_SIM_WAIT_TIED, zs_sim_ch(x, r, 0, ZS_SIM_TIED), a);
            ZS_EV(ZS_SIM_SEND, zs_sim_ch(x, r, 0, ZS_SIM_TIED), -1);
        }
        if (vs == 0)
            ZS_EV(ZS_SIM_RECV, zs_sim_ch(x, P - 1, 0, ZS_SIM_TIED), 0);
        if (vs > 0)
            ZS_EV(ZS_SIM_SEND, zs_sim_ch(x, r, prev, ZS_SIM_GRAD), slot);
    }
#undef ZS_EV
    return e;
}

/* One event of rank r, if it can run now: 1, else 0. */
static int zs_sim_step(zs_sim *x, int r)
{
    const zs_sim_ev *ev = &x->ev[r][x->pc[r]];
    int n = x->npend[r], k = 0;
    switch (ev->kind) {
    case ZS_SIM_RECV:
        if (x->posted[ev->ch] <= x->got[ev->ch])
            return 0;
        x->got[ev->ch]++;
        break;
    case ZS_SIM_SEND:
        x->pch[r][n] = ev->ch;
        x->pidx[r][n] = x->posted[ev->ch]++;
        x->pslot[r][n] = ev->arg;
        x->npend[r]++;
        break;
    case ZS_SIM_WAIT_TIED: /* the k-th last send on the channel was received */
        if (ev->arg >= x->k && x->got[ev->ch] <= ev->arg - x->k)
            return 0;
        break;
    case ZS_SIM_WAIT_SLOT:
        for (int i = 0; i < n; i++)
            if (x->pslot[r][i] == ev->arg && x->got[x->pch[r][i]] <= x->pidx[r][i])
                return 0;
        for (int i = 0; i < n; i++) /* the ones received: done */
            if (x->got[x->pch[r][i]] <= x->pidx[r][i]) {
                x->pch[r][k] = x->pch[r][i];
                x->pidx[r][k] = x->pidx[r][i];
                x->pslot[r][k++] = x->pslot[r][i];
            }
        x->npend[r] = k;
        break;
    }
    x->pc[r]++;
    return 1;
}

/* 1 when every rank finishes with k tied buffers, 0 when they deadlock,
 * -1 out of memory. */
static int zs_sim_run(int P, int v, int m, int k)
{
    int n = 2 * m * v, ok = -1;
    zs_sim x = {.P = P, .v = v, .m = m, .k = k};
    zs_pp_item *it = malloc((size_t)n * sizeof *it);
    int *live = calloc((size_t)v, sizeof(int)), *cslots = calloc((size_t)v, sizeof(int));
    int *slot0 = calloc((size_t)v, sizeof(int));
    x.ev = calloc((size_t)P, sizeof *x.ev);
    x.pch = calloc((size_t)P, sizeof *x.pch);
    x.pidx = calloc((size_t)P, sizeof *x.pidx);
    x.pslot = calloc((size_t)P, sizeof *x.pslot);
    x.nev = calloc((size_t)P, sizeof(int));
    x.pc = calloc((size_t)P, sizeof(int));
    x.npend = calloc((size_t)P, sizeof(int));
    x.posted = calloc((size_t)P * P * 3, sizeof(int));
    x.got = calloc((size_t)P * P * 3, sizeof(int));
    if (!it || !live || !cslots || !slot0 || !x.ev || !x.pch || !x.pidx || !x.pslot || !x.nev ||
        !x.pc || !x.npend || !x.posted || !x.got)
        goto out;
    for (int r = 0; r < P; r++) {
        x.ev[r] = malloc((size_t)(5 * n) * sizeof(zs_sim_ev));
        x.pch[r] = malloc((size_t)(2 * n) * sizeof(int));
        x.pidx[r] = malloc((size_t)(2 * n) * sizeof(int));
        x.pslot[r] = malloc((size_t)(2 * n) * sizeof(int));
        if (!x.ev[r] || !x.pch[r] || !x.pidx[r] || !x.pslot[r])
            goto out;
        zs_pp_schedule_items(ZS_PP_INTERLEAVED, P, v, r, m, it);
        memset(live, 0, (size_t)v * sizeof(int)); /* the slots, as zs_shape_chunks counts them */
        memset(cslots, 0, (size_t)v * sizeof(int));
        for (int i = 0; i < n; i++) {
            int c = it[i].chunk;
            live[c] += it[i].backward ? -1 : 1;
            cslots[c] = live[c] > cslots[c] ? live[c] : cslots[c];
        }
        for (int c = 1; c < v; c++)
            slot0[c] = slot0[c - 1] + cslots[c - 1];
        x.nev[r] = zs_sim_events(&x, r, it, n, slot0, cslots);
    }
    for (int moved = 1; moved;) {
        moved = 0;
        for (int r = 0; r < P; r++)
            while (x.pc[r] < x.nev[r] && zs_sim_step(&x, r))
                moved = 1;
    }
    ok = 1;
    for (int r = 0; r < P; r++)
        if (x.pc[r] < x.nev[r])
            ok = 0;
out:
    for (int r = 0; x.ev && r < P; r++) {
        free(x.ev[r]);
        free(x.pch ? x.pch[r] : NULL);
        free(x.pidx ? x.pidx[r] : NULL);
        free(x.pslot ? x.pslot[r] : NULL);
    }
    free(x.ev);
    free(x.pch);
    free(x.pidx);
    free(x.pslot);
    free(x.nev);
    free(x.pc);
    free(x.npend);
    free(x.posted);
    free(x.got);
    free(it);
    free(live);
    free(cslots);
    free(slot0);
    return ok;
}

int zs_pp_interleaved_tied_bufs(int P, int v, int m)
{
    if (zs_sim_run(P, v, m, m) != 1)
        return -1;
    int lo = 1, hi = m; /* more buffers never make a rank wait longer */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, ok = zs_sim_run(P, v, m, mid);
        if (ok < 0)
            return -1;
        if (ok)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

double zs_pp_ideal_bubble(int P, int v, int m)
{
    return (double)(P - 1) / ((double)v * m + P - 1);
}

int zs_pp_warmup(zs_pp_schedule sched, int P, int rank, int m)
{
    if (sched == ZS_PP_GPIPE)
        return m;
    int w = P - rank - 1;
    return w < m ? w : m;
}

int zs_pp_interleaved_warmup(int P, int v, int rank, int m)
{
    int total = m * v, w = 2 * (P - rank - 1) + (v - 1) * P;
    if (m == P) /* Megatron-LM: all warm-up when the micro-batches are P */
        return total;
    return w < total ? w : total;
}

/* The interleaved schedule's k-th forward (or backward) item. */
static zs_pp_item zs_pp_interleaved_item(int P, int v, int k, int backward)
{
    int group = k / (P * v), in_group = k % (P * v), chunk = in_group / P;
    return (zs_pp_item){.backward = backward, .chunk = backward ? v - 1 - chunk : chunk,
                        .micro = group * P + in_group % P};
}

int zs_pp_schedule_items(zs_pp_schedule sched, int P, int v, int rank, int m, zs_pp_item *out)
{
    int il = sched == ZS_PP_INTERLEAVED, total = il ? m * v : m, n = 0;
    int w = il ? zs_pp_interleaved_warmup(P, v, rank, m)
               : P > 1 ? zs_pp_warmup(sched, P, rank, m) : 0;
#define ZS_ITEM(k, bw)                                                                        \
    (out[n++] = il ? zs_pp_interleaved_item(P, v, (k), (bw))                                  \
                   : (zs_pp_item){.backward = (bw), .chunk = 0, .micro = (k)})
    for (int k = 0; k < w; k++)
        ZS_ITEM(k, 0);
    for (int i = 0; i < total - w; i++) {
        ZS_ITEM(w + i, 0);
        ZS_ITEM(i, 1);
    }
    for (int i = total - w; i < total; i++)
        ZS_ITEM(i, 1);
#undef ZS_ITEM
    return n;
}

const char *zs_step_op_name(zs_step_op_kind k) { return k < ZS_SOP_NKINDS ? zs_sop_names[k] : "?"; }

typedef struct {              /* the builder's state */
    const zs_step_shape *s;
    const zs_model *m;
    zs_step_program *p;
    int micro;
    int chunk;                /* the model chunk of the ops emitted */
    zs_comm_phase phase;
    char *live;               /* [U] stage 3: unit gathered */
    size_t nlive;             /* elements gathered */
    char *touched;            /* [nbuckets] bucket has its buffer */
    int pending;              /* overlap: the bucket in flight, or -1 */
    int fwd_micro;            /* the micro-batch whose forward ran last, with no
                                 backward since; or -1 */
    int fwd_chunk;            /* and its chunk */
    int fail;
} zs_builder;

static void zs_emit(zs_builder *b, zs_step_op_kind k, int unit, int index, unsigned flags,
                    size_t elems)
{
    zs_step_program *p = b->p;
    if (b->fail)
        return;
    if (p->n == p->cap) {
        size_t nc = p->cap ? 2 * p->cap : 256;
        zs_step_op *t = realloc(p->ops, nc * sizeof *t);
        if (!t) {
            b->fail = 1;
            return;
        }
        p->ops = t;
        p->cap = nc;
    }
    p->ops[p->n++] = (zs_step_op){.kind = k, .micro = b->micro, .chunk = b->chunk,
                                  .unit = unit, .index = index,
                                  .flags = flags, .phase = b->phase, .group = ZS_GROUP_DP,
                                  .elems = elems};
}

/* A pipeline message: in the pp group. */
static void zs_emit_pp(zs_builder *b, zs_step_op_kind k, int unit, unsigned flags, size_t elems)
{
    zs_emit(b, k, unit, -1, flags, elems);
    if (!b->fail)
        b->p->ops[b->p->n - 1].group = ZS_GROUP_PP;
}

static void zs_b_gather_start(zs_builder *b, int u, unsigned flags)
{
    if (b->live[u])
        return;
    b->live[u] = 1;
    b->nlive += b->s->gelems[u];
    zs_emit(b, ZS_SOP_GATHER, u, -1, flags, b->s->gelems[u]);
}

/* Gather u (unless prefetched) and prefetch `next` when it fits under
 * stage3_max_live_parameters and stage3_prefetch_bucket_size. */
static void zs_b_gather_unit(zs_builder *b, int u, int next, unsigned flags)
{
    const zs_step_shape *s = b->s;
    zs_b_gather_start(b, u, flags);
    if (next >= 0 && next < s->U && !b->live[next] &&
        s->gelems[next] <= s->cfg.stage3_prefetch_bucket_size &&
        b->nlive + s->gelems[next] <= s->cfg.stage3_max_live_parameters)
        zs_b_gather_start(b, next, flags | ZS_SOPF_PREFETCH);
    zs_emit(b, ZS_SOP_WAIT, u, -1, flags, s->gelems[u]);
}

static void zs_b_release(zs_builder *b, int u)
{
    if (!b->live[u])
        return;
    b->live[u] = 0;
    b->nlive -= b->s->gelems[u];
    zs_emit(b, ZS_SOP_RELEASE, u, -1, 0, b->s->gelems[u]);
}

static void zs_b_forward_units(zs_builder *b, int first, int last, unsigned flags)
{
    const zs_step_shape *s = b->s;
    for (int u = first; u <= last; u++) {
        if (s->stage == 3)
            zs_b_gather_unit(b, u, u < last ? u + 1 : -1, flags);
        zs_emit(b, ZS_SOP_FORWARD, u, -1, flags, zs_model_unit_elems(b->m, u));
        if (s->stage == 3)
            zs_b_release(b, u);
    }
}

/* Activation checkpointing: when unit u ends a segment that is recomputed
 * before its backward (every segment but the last), its first unit; else -1.
 * A pipeline stage recomputes every segment's part in the stage, the last
 * one too (the micro-batches in flight share the blocks' activations). */
static int zs_recomputed_first(const zs_step_shape *s, int c, int u)
{
    const zs_model_config *mc = &s->cfg.model;
    int nseg = zs_model_segments(mc);
    if (s->pp > 1) {
        int L = mc->n_layer, uf = s->cfirst[c], ul = s->clast[c];
        int u0 = uf > 1 ? uf : 1, u1 = ul < L ? ul : L;
        for (int sg = 0; nseg > 1 && u >= u0 && u <= u1 && sg < nseg; sg++) {
            int first, last;
            zs_model_segment_units(mc, sg, &first, &last);
            if (u >= first && u <= last)
                return u == last || u == u1 ? (first > u0 ? first : u0) : -1;
        }
        return -1;
    }
    for (int sg = 0; sg < nseg - 1; sg++) {
        int first, last;
        zs_model_segment_units(mc, sg, &first, &last);
        if (u == last)
            return first;
    }
    return -1;
}

/* Stages 2, 3: the buckets unit u's backward writes into for the first
 * time in this micro-batch get their buffers, in the order it writes them. */
static void zs_b_bucket_allocs(zs_builder *b, int u)
{
    const zs_step_shape *s = b->s;
    const zs_layout *lay = zs_model_layout(b->m);
    int ids[ZS_MAX_USES_PUBLIC];
    int n = zs_model_unit_uses(b->m, u, ids, ZS_MAX_USES_PUBLIC);
    for (int i = 0; i < n; i++) {
        const zs_param_entry *pe = &lay->entries[ids[i]];
        size_t lo;
        if (!zs_step_entry_local(s, lay, ids[i], &lo))
            continue; /* the last stage's copy of the tied embedding */
        size_t hi = lo + pe->numel;
        for (int k = 0; k < s->nbuckets; k++) {
            const zs_step_range *bk = &s->buckets[k];
            if (b->touched[k] || (hi < bk->hi ? hi : bk->hi) <= (lo > bk->lo ? lo : bk->lo))
                continue;
            b->touched[k] = 1;
            zs_emit(b, ZS_SOP_BUCKET_ALLOC, u, k, 0, bk->hi - bk->lo);
        }
    }
}

/* overlap_comm: the bucket in flight finished (before another starts, and
 * at the end of a micro-batch's backward). */
static void zs_b_reduce_wait(zs_builder *b)
{
    if (b->pending < 0)
        return;
    const zs_step_range *bk = &b->s->buckets[b->pending];
    zs_emit(b, ZS_SOP_REDUCE_WAIT, bk->unit, b->pending, 0, bk->hi - bk->lo);
    b->pending = -1;
}

static void zs_b_reduce(zs_builder *b, int k, int async)
{
    const zs_step_range *bk = &b->s->buckets[k];
    if (b->s->stage >= 2 && !b->touched[k]) /* padding only: zeros */
        zs_emit(b, ZS_SOP_BUCKET_ALLOC, bk->unit, k, 0, bk->hi - bk->lo);
    zs_b_reduce_wait(b);
    zs_emit(b, ZS_SOP_REDUCE, bk->unit, k, async ? ZS_SOPF_ASYNC : 0, bk->hi - bk->lo);
    if (async)
        b->pending = k;
    b->touched[k] = 0;
}

/* Forward of micro-batch a on this stage: load it (the first stage needs
 * the tokens, the last the targets), its input from the previous stage,
 * the units, the loss on the last stage, its output to the next. */
static void zs_b_forward_micro(zs_builder *b, int c, int a)
{
    const zs_step_shape *s = b->s;
    int first = s->pp_rank == 0 && c == 0, last = s->pp_rank == s->pp - 1 && c == s->nchunks - 1;
    b->fwd_micro = a;
    b->fwd_chunk = c;
    b->micro = a;
    b->chunk = c;
    b->phase = ZS_PHASE_FORWARD;
    if (first || last)
        zs_emit(b, ZS_SOP_LOAD, -1, -1, 0, (size_t)s->cfg.micro_batch);
    if (!first)
        zs_emit_pp(b, ZS_SOP_RECV_ACT, s->cfirst[c], 0, s->io_elems);
    zs_b_forward_units(b, s->cfirst[c], s->clast[c], 0);
    if (last)
        zs_emit(b, ZS_SOP_LOSS, -1, -1, 0, 1);
    else
        zs_emit_pp(b, ZS_SOP_SEND_ACT, s->clast[c], 0, s->io_elems);
}

/* Backward of micro-batch a on this stage, and its gradient reduction. */
static void zs_b_backward_micro(zs_builder *b, int c, int a)
{
    const zs_step_shape *s = b->s;
    int st = s->stage, GA = s->cfg.grad_accum, once = s->reduce_step;
    int fixacc = once && s->det && GA > 1;
    int pipe = s->pp > 1, first = s->pp_rank == 0 && c == 0;
    int last = s->pp_rank == s->pp - 1 && c == s->nchunks - 1;
    int uf = s->cfirst[c], ul = s->clast[c];
    b->micro = a;
    b->chunk = c;
    b->phase = ZS_PHASE_BACKWARD;
    /* in a pipeline another micro-batch may have been loaded since */
    if (pipe && (first || last))
        zs_emit(b, ZS_SOP_LOAD, -1, -1, 0, (size_t)s->cfg.micro_batch);
    /* the chunk's part of the full gradient (all of it with one chunk;
     * the padding with the last) */
    if (st <= 1 && (!once || fixacc || a == 0))
        zs_emit(b, ZS_SOP_ZERO_GRADS, -1, c, 0,
                (c + 1 < s->nchunks ? s->clo[c + 1] : s->part.padded) - s->clo[c]);
    /* buckets reduced inside the backward, as each is ready: stages 2 and
     * 3, and stages 0 and 1 with overlap_comm (in the reducing
     * micro-batches; not when fixed point accumulates locally) */
    int inside = st >= 2 || (s->overlap && !fixacc && (!once || a == GA - 1));
    /* a pipeline stage whose last forward was this micro-batch's, with no
     * backward since (the last stage under 1F1B), still holds its last
     * segment's activations in the working slots: not recomputed */
    int fresh = pipe && b->fwd_micro == a && b->fwd_chunk == c, L = s->cfg.model.n_layer;
    int ublock = ul < L ? ul : L; /* the chunk's last block */
    b->fwd_micro = -1;
    if (!last)
        zs_emit_pp(b, ZS_SOP_RECV_GRAD, ul, 0, s->io_elems);
    for (int u = ul; u >= uf; u--) {
        int rfirst = fresh && u == ublock ? -1 : zs_recomputed_first(s, c, u);
        if (rfirst >= 0)
            zs_b_forward_units(b, rfirst, u, ZS_SOPF_RECOMPUTE);
        /* no prefetch of a unit whose segment is recomputed first */
        int rnext = fresh && u - 1 == ublock ? -1 : zs_recomputed_first(s, c, u - 1);
        if (st == 3)
            zs_b_gather_unit(b, u, rnext >= 0 ? -1 : u - 1, 0);
        if (st >= 2)
            zs_b_bucket_allocs(b, u);
        if (pipe && u == 0)
            zs_emit_pp(b, ZS_SOP_TIED_RECV, 0, 0, s->tied_elems);
        zs_emit(b, ZS_SOP_BACKWARD, u, -1, 0, zs_model_unit_elems(b->m, u));
        if (pipe && last && u == s->U - 1)
            zs_emit_pp(b, ZS_SOP_TIED_SEND, u, 0, s->tied_elems);
        if (pipe && !first && u == uf)
            zs_emit_pp(b, ZS_SOP_SEND_GRAD, u, 0, s->io_elems);
        if (st == 3)
            zs_b_release(b, u);
        if (inside)
            for (int k = 0; k < s->nbuckets; k++)
                if (s->buckets[k].unit == u)
                    zs_b_reduce(b, k, s->overlap);
    }
    zs_b_reduce_wait(b);
    for (int k = 0; fixacc && k < s->nbuckets; k++)
        if (s->uchunk[s->buckets[k].unit] == c)
            zs_emit(b, ZS_SOP_ACCUM_FIXED, s->buckets[k].unit, k, 0,
                    s->buckets[k].hi - s->buckets[k].lo);
    if (!inside && st <= 1 && (!once || a == GA - 1))
        for (int k = 0; k < s->nbuckets; k++)
            if (s->uchunk[s->buckets[k].unit] == c)
                zs_b_reduce(b, k, 0);
}

/* Where the optimizer runs: on the host with offload_optimizer (its states
 * in files with nvme, as the shape placed the master), else on the device,
 * on the whole array in stage 0 and on the shard in stages 1-3. */
static zs_step_op_kind zs_step_optimizer_kind(const zs_step_shape *s)
{
    if (s->buf[ZS_BUF_MASTER].bytes > 0 && s->buf[ZS_BUF_MASTER].tier == ZS_TIER_NVME)
        return ZS_SOP_OPTIMIZER_SWAPPED;
    if (s->buf[ZS_BUF_MASTER].bytes > 0 && s->buf[ZS_BUF_MASTER].tier == ZS_TIER_HOST)
        return ZS_SOP_OPTIMIZER_HOST;
    return s->stage == 0 ? ZS_SOP_OPTIMIZER_FULL : ZS_SOP_OPTIMIZER_SHARD;
}

int zs_step_program_build(const zs_step_shape *s, const zs_model *m, int rank,
                          zs_step_program *p)
{
    (void)rank; /* the shape is this rank's pipeline stage's */
    memset(p, 0, sizeof *p);
    zs_builder b = {.s = s, .m = m, .p = p, .micro = -1, .pending = -1, .fwd_micro = -1,
                    .fwd_chunk = -1};
    b.live = calloc((size_t)s->U, 1);
    b.touched = calloc((size_t)s->nbuckets + 1, 1);
    if (!b.live || !b.touched) {
        free(b.live);
        free(b.touched);
        ZS_FAIL("out of host memory building the step program");
    }
    int st = s->stage;
    int GA = s->cfg.grad_accum, once = s->reduce_step;
    /* the step schedule in fixed point: each micro-batch's gradient is
     * converted and added into GFIX, so the full gradient holds one
     * micro-batch at a time, as in the micro-batch schedule */
    int fixacc = once && s->det && GA > 1;
    b.phase = ZS_PHASE_FORWARD;
    zs_emit(&b, ZS_SOP_BEGIN, -1, -1, 0, once ? (fixacc ? s->part.padded : 0) : s->part.shard);
    /* the schedule: without a pipeline each micro-batch's forward then its
     * backward; GPipe all forwards then all backwards; 1F1B (Megatron-LM's
     * forward_backward_pipelining_without_interleaving) w warm-up forwards,
     * then one forward and one backward at a time, then the last w
     * backwards */
    zs_pp_item *items = malloc(2 * (size_t)GA * (size_t)s->nchunks * sizeof *items);
    if (!items)
        b.fail = 1;
    zs_pp_schedule sched = s->pp > 1 ? s->cfg.pp_schedule : ZS_PP_1F1B;
    int nitems =
        items ? zs_pp_schedule_items(sched, s->pp, s->nchunks, s->pp_rank, GA, items) : 0;
    for (int i = 0; i < nitems; i++) {
        if (items[i].backward)
            zs_b_backward_micro(&b, items[i].chunk, items[i].micro);
        else
            zs_b_forward_micro(&b, items[i].chunk, items[i].micro);
    }
    free(items);
    b.micro = -1;
    b.chunk = 0;
    b.phase = ZS_PHASE_STEP;
    zs_emit(&b, ZS_SOP_LOSS_SUM, -1, -1, 0, (size_t)s->cfg.grad_accum);
    zs_emit(&b, ZS_SOP_CHECK, -1, -1, 0, s->part.shard);
    zs_emit(&b, ZS_SOP_NORM, -1, -1, 0, s->part.shard);
    if (st == 0) {
        if (!once)
            zs_emit(&b, ZS_SOP_PUT_SHARD, -1, -1, ZS_SOPF_APPLIED, s->part.shard);
        for (int i = 0; i < s->npieces; i++)
            zs_emit(&b, ZS_SOP_ALLGATHER, -1, i, ZS_SOPF_APPLIED,
                    i + 1 < s->npieces ? s->ag_piece
                                       : s->part.padded - (size_t)i * s->ag_piece);
    }
    if (s->buf[ZS_BUF_HGRAD].bytes > 0)
        zs_emit(&b, ZS_SOP_OFFLOAD_GRADS, -1, -1, ZS_SOPF_APPLIED, s->part.shard);
    zs_emit(&b, zs_step_optimizer_kind(s), -1, -1, ZS_SOPF_APPLIED,
            st == 0 ? s->part.padded : s->part.shard);
    if (s->buf[ZS_BUF_HPARAM].bytes > 0)
        zs_emit(&b, ZS_SOP_UPLOAD_PARAMS, -1, -1, ZS_SOPF_APPLIED, s->part.shard);
    if (st == 1 || st == 2)
        for (int i = 0; i < s->npieces; i++)
            zs_emit(&b, ZS_SOP_ALLGATHER, -1, i, ZS_SOPF_APPLIED,
                    i + 1 < s->npieces ? s->ag_piece
                                       : s->part.padded - (size_t)i * s->ag_piece);
    /* the first stage sends its updated embedding to the last; stage 3
     * gathers it first (unit 0: the token and position embeddings) */
    int gather_tied = s->pp > 1 && s->tied_elems && s->pp_rank == 0 && st == 3;
    if (gather_tied)
        zs_b_gather_unit(&b, 0, -1, ZS_SOPF_APPLIED);
    if (s->pp > 1 && s->tied_elems)
        zs_emit_pp(&b, ZS_SOP_TIED_SYNC, 0, ZS_SOPF_APPLIED, s->tied_elems);
    if (gather_tied)
        zs_b_release(&b, 0);
    free(b.live);
    free(b.touched);
    if (b.fail) {
        zs_step_program_free(p);
        ZS_FAIL("out of host memory building the step program");
    }
    return 0;
}

void zs_step_program_free(zs_step_program *p)
{
    free(p->ops);
    memset(p, 0, sizeof *p);
}

/* ---- counting ------------------------------------------------------------ */

double zs_step_gather_own_bytes(const zs_step_shape *s, const zs_step_program *p, int q)
{
    double b = 0;
    for (size_t i = 0; s->stage == 3 && i < p->n; i++) {
        const zs_step_op *o = &p->ops[i];
        if (o->kind != ZS_SOP_GATHER)
            continue;
        for (int k = s->gfirst[o->unit]; k < s->gfirst[o->unit] + s->gn[o->unit]; k++) {
            size_t beg;
            b += (double)zs_partition_overlap(&s->part, q, s->granges[k].lo, s->granges[k].hi,
                                              &beg) * (double)s->ps;
        }
    }
    return b;
}

/* qwZ: the encoded bytes of unit u's forward gathers, every rank's part
 * of each range (zs_comm_q8_bytes), as the collective allocates them. */
static size_t zs_step_q8_unit_bytes(const zs_step_shape *s, int u)
{
    int N = s->part.world;
    int *cnt = malloc((size_t)N * sizeof(int));
    size_t b = 0;
    for (int g = s->gfirst[u]; cnt && g < s->gfirst[u] + s->gn[u]; g++) {
        zs_step_counts(s, s->granges[g].lo, s->granges[g].hi, cnt, NULL);
        for (int r = 0; r < N; r++)
            b += zs_comm_q8_bytes((size_t)cnt[r]);
    }
    free(cnt);
    return b;
}

/* The data-parallel group's node size as the run finds it (zerosim/comm.h:
 * K when its W members are nodes of K consecutive members, else 0), its
 * ranks laid out as zerosim mesh lays them (tensor-parallel fastest, then
 * data, then pipeline: zerosim/mesh.h), this shape's pipeline stage and
 * tensor-parallel rank 0, --ranks-per-node world ranks to a node (0: one
 * node, as on one host). */
static int zs_dp_node_blocks(const zs_step_shape *s, int W)
{
    long R = s->cfg.ranks_per_node, T = s->cfg.tp > 1 ? s->cfg.tp : 1;
    long base = T * (long)W * (s->pp > 1 ? s->pp_rank : 0);
    if (R <= 0)
        return W;
#define ZS_DP_NODE(d) ((base + T * (long)(d)) / R)
    int K = 0;
    for (int d = 0; d < W; d++)
        K += ZS_DP_NODE(d) == ZS_DP_NODE(0);
    if (W % K)
        return 0;
    for (int d = 0; d < W; d++)
        if (ZS_DP_NODE(d) != ZS_DP_NODE(d - d % K) || (d >= K && ZS_DP_NODE(d) == ZS_DP_NODE(d - K)))
            return 0;
#undef ZS_DP_NODE
    return K;
}

void zs_step_program_count(const zs_step_shape *s, const zs_step_program *p, zs_step_count *c)
{
    memset(c, 0, sizeof *c);
    size_t stat[ZS_MEM_NCAT] = {0};
    for (int i = 0; i < ZS_BUF_N; i++) {
        if (i == ZS_BUF_INIT)
            continue;
        if (s->buf[i].tier == ZS_TIER_DEVICE)
            stat[s->buf[i].cat] += s->buf[i].bytes;
        if (s->buf[i].tier == ZS_TIER_DEVICE && (i == ZS_BUF_GACC || i == ZS_BUF_GFIX ||
                                                 (i == ZS_BUF_XGACC && s->det)))
            c->grad_fixed_bytes += s->buf[i].bytes; /* int64 fixed point */
        if (s->buf[i].tier != ZS_TIER_DEVICE) /* allocated once, before the first step */
            c->tier_peak[s->buf[i].tier][s->buf[i].cat] += s->buf[i].bytes;
    }
    memcpy(c->peak, stat, sizeof stat);
    /* initialisation: its staging buffer comes after every other one */
    c->peak[s->buf[ZS_BUF_INIT].cat] += s->buf[ZS_BUF_INIT].bytes;

    size_t live = 0, bucket_bytes = 0, gp = 0, gb = 0, qtmp = 0;
    int fwd = 0, bwd = 0;
    double ps = (double)s->ps;
    int qwz = s->stage == 3 && s->cfg.quantized_weights;
    /* a reduce-scatter's own temporaries (zerosim/comm.h), counted in
     * comm_buffers while it runs (it completes on return): over the
     * data-parallel group of W ranks in nodes of K (zs_dp_node_blocks).
     * qgZ: an fp32 copy of the bucket, the node sums of the largest
     * column (the parts mK + i of one local index i on every node m), the
     * first all-to-all's encoded send (every part) and receive (K times the
     * largest column's encoded bytes); then the node sums, the largest
     * part in fp32 and the second all-to-all's send (the largest column's
     * encoded bytes) and receive (M times the largest encoded part).
     * --hierarchical (K and M above 1): the node sums of the largest
     * column; the ring's scratch is the registered one (ZS_BUF_RING) */
    int W = s->part.world, K = zs_dp_node_blocks(s, W);
    int qgz = !s->comp && K > 0 && s->stage == 3 && s->cfg.quantized_gradients;
    int hier = !s->comp && !qgz && s->cfg.hierarchical && K > 1 && K < W;
    int *rcnt = qgz || hier ? malloc((size_t)W * sizeof(int)) : NULL;
    if (!rcnt)
        qgz = hier = 0;
    for (size_t i = 0; i < p->n; i++) {
        const zs_step_op *o = &p->ops[i];
        /* qwZ: a forward gather's encoded parts live in comm_buffers from
         * its start to its wait */
        if (qwz && o->phase == ZS_PHASE_FORWARD &&
            (o->kind == ZS_SOP_GATHER || o->kind == ZS_SOP_WAIT)) {
            size_t q = zs_step_q8_unit_bytes(s, o->unit);
            qtmp = o->kind == ZS_SOP_GATHER ? qtmp + q : qtmp - q;
            if (bucket_bytes + qtmp > gb)
                gb = bucket_bytes + qtmp;
        }
        switch (o->kind) {
        case ZS_SOP_GATHER:
            live += o->elems;
            if (live > c->live_params)
                c->live_params = live;
            c->gathered_elems += o->elems;
            if (o->flags & ZS_SOPF_APPLIED) {
                c->gathered_applied_elems += o->elems;
                c->gather_applied_calls += s->gn[o->unit];
            }
            c->gather_calls += s->gn[o->unit];
            break;
        case ZS_SOP_RELEASE:
            live -= o->elems;
            break;
        case ZS_SOP_FORWARD:
            if (o->flags & ZS_SOPF_RECOMPUTE)
                c->recompute_units += 1;
            else if (o->unit == s->cfirst[o->chunk] && ++fwd - bwd > c->in_flight)
                c->in_flight = fwd - bwd; /* (chunk, micro-batch) pairs */
            break;
        case ZS_SOP_BACKWARD:
            if (o->unit == s->cfirst[o->chunk])
                bwd++;
            break;
        case ZS_SOP_SEND_ACT:
        case ZS_SOP_SEND_GRAD:
        case ZS_SOP_TIED_SEND:
            c->p2p_send_calls += 1;
            c->p2p_send_bytes += 4.0 * (double)o->elems;
            break;
        case ZS_SOP_RECV_ACT:
        case ZS_SOP_RECV_GRAD:
        case ZS_SOP_TIED_RECV:
            c->p2p_recv_calls += 1;
            c->p2p_recv_bytes += 4.0 * (double)o->elems;
            break;
        case ZS_SOP_TIED_SYNC:
            c->tied_sync_bytes += (double)o->elems * ps;
            break;
        case ZS_SOP_BUCKET_ALLOC:
            bucket_bytes += o->elems * s->ps;
            if (bucket_bytes + qtmp > gb)
                gb = bucket_bytes + qtmp;
            break;
        case ZS_SOP_REDUCE:
            c->rs_calls += 1;
            c->rs_bytes += (double)o->elems * (s->det ? 8.0 : ps);
            if (qgz || hier) {
                const zs_step_range *bk = &s->buckets[o->index];
                zs_step_counts(s, bk->lo, bk->hi, rcnt, NULL);
                int M = W / K;
                size_t col = 0, col4 = 0, maxc = 0, maxq4 = 0, all4 = 0, tmp;
                for (int li = 0; li < K; li++) {
                    size_t n = 0, n4 = 0;
                    for (int m = 0; m < M; m++) {
                        n += (size_t)rcnt[m * K + li];
                        n4 += zs_comm_q4_bytes((size_t)rcnt[m * K + li]);
                    }
                    col = n > col ? n : col;
                    col4 = n4 > col4 ? n4 : col4;
                }
                for (int q = 0; q < W; q++) {
                    size_t q4 = zs_comm_q4_bytes((size_t)rcnt[q]);
                    all4 += q4;
                    maxq4 = q4 > maxq4 ? q4 : maxq4;
                    maxc = (size_t)rcnt[q] > maxc ? (size_t)rcnt[q] : maxc;
                }
                if (qgz) {
                    size_t first = (o->elems + col) * 4 + all4 + (size_t)K * col4;
                    size_t second = (col + maxc) * 4 + col4 + (size_t)M * maxq4;
                    tmp = first > second ? first : second;
                } else {
                    tmp = col * (s->det ? 8 : s->ps);
                }
                if (bucket_bytes + qtmp + tmp > gb)
                    gb = bucket_bytes + qtmp + tmp;
            }
            if (s->stage >= 2 && !(o->flags & ZS_SOPF_ASYNC))
                bucket_bytes -= o->elems * s->ps;
            break;
        case ZS_SOP_REDUCE_WAIT: /* the buffer lived until now */
            if (s->stage >= 2)
                bucket_bytes -= o->elems * s->ps;
            break;
        case ZS_SOP_ALLGATHER:
            c->ag_calls += 1;
            c->ag_bytes += (double)o->elems * ps;
            break;
        case ZS_SOP_OFFLOAD_GRADS:
            c->d2h_applied_bytes += (double)o->elems * ps;
            break;
        case ZS_SOP_UPLOAD_PARAMS: /* to the device, or into the file */
            if (s->buf[ZS_BUF_PARAMS].tier == ZS_TIER_NVME)
                c->nvme_write_bytes += (double)o->elems * ps;
            else
                c->h2d_bytes += (double)o->elems * ps;
            break;
        case ZS_SOP_OPTIMIZER_SWAPPED: { /* every state read and written */
            double b = (double)(s->buf[ZS_BUF_MASTER].bytes + s->buf[ZS_BUF_M].bytes +
                                s->buf[ZS_BUF_V].bytes);
            c->nvme_read_bytes += b;
            c->nvme_write_bytes += b;
            break;
        }
        default:
            break;
        }
        if (live * s->ps > gp)
            gp = live * s->ps;
    }
    c->peak[ZS_MEM_PARAMS] += gp;
    free(rcnt);
    c->peak[ZS_MEM_COMM_BUFFERS] += gb;
    /* offload, the shard on the host: every reduction round (all buckets of
     * a micro-batch, or of the step) sends this rank's part of each bucket
     * down, S elements in all; in fixed point the shard goes down once per
     * step, converted */
    if (s->buf[ZS_BUF_GSHARD].tier == ZS_TIER_HOST && s->buf[ZS_BUF_GSHARD].bytes > 0)
        c->d2h_bytes = s->det ? (double)s->buf[ZS_BUF_GSHARD].bytes
                              : c->rs_calls / (s->nbuckets ? s->nbuckets : 1) *
                                    (double)s->buf[ZS_BUF_GSHARD].bytes;
}

/* ---- printing ------------------------------------------------------------ */

void zs_step_program_print(const zs_step_shape *s, const zs_step_program *p, FILE *f)
{
    const char *pt = zs_dtype_name(s->pt);
    fprintf(f, "# step program: stage %d, %d ranks, %zu parameters (%zu padded, shard %zu), "
               "%d units, %d buckets, %zu ops%s\n",
            s->stage, s->part.world, s->part.num_params, s->part.padded, s->part.shard, s->U,
            s->nbuckets, p->n, s->reduce_step ? ", gradients reduced once per step" : "");
    if (s->pp > 1 && s->nchunks > 1) {
        fprintf(f, "# pipeline rank %d of %d (interleaved, %d chunks): warm-up %d, %d activation "
                   "slots;",
                s->pp_rank, s->pp, s->nchunks,
                zs_pp_interleaved_warmup(s->pp, s->nchunks, s->pp_rank, s->cfg.grad_accum),
                s->slots);
        for (int c = 0; c < s->nchunks; c++)
            fprintf(f, " chunk %d (virtual stage %d): units %d..%d, %d slot%s%s", c,
                    c * s->pp + s->pp_rank, s->cfirst[c], s->clast[c], s->cslots[c],
                    s->cslots[c] == 1 ? "" : "s", c + 1 < s->nchunks ? ";" : "\n");
    } else if (s->pp > 1) {
        fprintf(f, "# pipeline stage %d of %d (%s, %s): units %d..%d, warm-up %d, %d activation "
                   "slot%s\n",
                s->pp_rank, s->pp, zs_pp_schedule_name(s->cfg.pp_schedule),
                zs_pp_partition_name(s->cfg.pp_partition), s->ufirst, s->ulast,
                zs_pp_warmup(s->cfg.pp_schedule, s->pp, s->pp_rank, s->cfg.grad_accum), s->slots,
                s->slots == 1 ? "" : "s");
    }
    for (size_t i = 0; i < p->n; i++) {
        const zs_step_op *o = &p->ops[i];
        fprintf(f, "%5zu %-8s", i, zs_comm_phase_name(o->phase));
        if (o->micro >= 0 && s->nchunks > 1)
            fprintf(f, " c%d mb %-3d", o->chunk, o->micro);
        else if (o->micro >= 0)
            fprintf(f, " mb %-3d", o->micro);
        else
            fprintf(f, " %-6s", "");
        fprintf(f, " %-12s", zs_step_op_name(o->kind));
        switch (o->kind) {
        case ZS_SOP_GATHER:
            fprintf(f, " unit %d: allgather %d range%s, %zu %s elements (%s)%s%s", o->unit,
                    s->gn[o->unit], s->gn[o->unit] == 1 ? "" : "s", o->elems, pt,
                    zs_comm_group_name(o->group),
                    o->flags & ZS_SOPF_PREFETCH ? ", prefetch" : "",
                    o->flags & ZS_SOPF_RECOMPUTE ? ", for recompute" : "");
            break;
        case ZS_SOP_WAIT:
        case ZS_SOP_RELEASE:
            fprintf(f, " unit %d: %zu gathered params", o->unit, o->elems);
            break;
        case ZS_SOP_FORWARD:
        case ZS_SOP_BACKWARD:
            fprintf(f, " unit %d (%zu params)%s", o->unit, o->elems,
                    o->flags & ZS_SOPF_RECOMPUTE ? " recompute" : "");
            break;
        case ZS_SOP_BUCKET_ALLOC:
            fprintf(f, " bucket %d: %zu %s elements (comm_buffers)", o->index, o->elems, pt);
            break;
        case ZS_SOP_ACCUM_FIXED:
            fprintf(f, " bucket %d [%zu, %zu): %zu elements into int64, added locally",
                    o->index, s->buckets[o->index].lo, s->buckets[o->index].hi, o->elems);
            break;
        case ZS_SOP_REDUCE:
            fprintf(f, " bucket %d [%zu, %zu): %s %zu %s elements (%s)%s", o->index,
                    s->buckets[o->index].lo, s->buckets[o->index].hi,
                    s->comp ? "reduce_scatter or compressed alltoall" : "reduce_scatter",
                    o->elems, s->det ? "int64" : pt, zs_comm_group_name(o->group),
                    o->flags & ZS_SOPF_ASYNC ? ", started (overlap_comm)" : "");
            break;
        case ZS_SOP_REDUCE_WAIT:
            fprintf(f, " bucket %d: its reduce_scatter finished%s", o->index,
                    s->stage >= 2 ? ", buffer freed" : "");
            break;
        case ZS_SOP_ALLGATHER:
            fprintf(f, " piece %d: %zu %s elements of the %s (%s)", o->index, o->elems, pt,
                    s->stage == 0 ? "gradients" : "parameters", zs_comm_group_name(o->group));
            break;
        case ZS_SOP_OPTIMIZER_FULL:
        case ZS_SOP_OPTIMIZER_SHARD:
        case ZS_SOP_OPTIMIZER_HOST:
        case ZS_SOP_OPTIMIZER_SWAPPED:
            fprintf(f, " %s on %zu elements", s->cfg.optimizer == ZS_OPT_ADAMW ? "adamw" : "sgd", o->elems);
            break;
        case ZS_SOP_LOAD:
            fprintf(f, " %zu samples", o->elems);
            break;
        case ZS_SOP_LOSS_SUM:
        case ZS_SOP_CHECK:
        case ZS_SOP_NORM:
            fprintf(f, " scalars over the ranks (%s)", zs_comm_group_name(o->group));
            break;
        case ZS_SOP_RECV_ACT:
        case ZS_SOP_SEND_ACT:
        case ZS_SOP_RECV_GRAD:
        case ZS_SOP_SEND_GRAD:
            fprintf(f, " unit %d: %zu fp32 elements %s pipeline stage %d (%s)", o->unit, o->elems,
                    o->kind == ZS_SOP_RECV_ACT || o->kind == ZS_SOP_RECV_GRAD ? "from" : "to",
                    (s->pp_rank + s->pp +
                     (o->kind == ZS_SOP_SEND_ACT || o->kind == ZS_SOP_RECV_GRAD ? 1 : -1)) %
                        s->pp,
                    zs_comm_group_name(o->group));
            break;
        case ZS_SOP_TIED_SEND:
        case ZS_SOP_TIED_RECV:
            fprintf(f, " tied embedding gradient: %zu fp32 elements %s stage %d (%s)", o->elems,
                    o->kind == ZS_SOP_TIED_SEND ? "to" : "from",
                    o->kind == ZS_SOP_TIED_SEND ? 0 : s->pp - 1, zs_comm_group_name(o->group));
            break;
        case ZS_SOP_TIED_SYNC:
            fprintf(f, " tied embedding: %zu %s elements %s stage %d (%s)", o->elems, pt,
                    s->pp_rank == 0 ? "to" : "from", s->pp_rank == 0 ? s->pp - 1 : 0,
                    zs_comm_group_name(o->group));
            break;
        default:
            fprintf(f, " %zu elements", o->elems);
            break;
        }
        fprintf(f, "%s\n", o->flags & ZS_SOPF_APPLIED ? "  [skipped on overflow]" : "");
    }
}
