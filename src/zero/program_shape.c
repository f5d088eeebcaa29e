/* zerosim — the step's shape (see zerosim/program.h): ranges over the
 * partition, the gradient buckets, stage 3's gathers, the model chunks and
 * the table of buffers. The expert layout's configurations are
 * program_ep.c's, the pipeline's cut and schedules program_pipe.c's. */
#include "zerosim/program.h"
#include "zerosim/comm.h"
#include "zerosim/compress.h"
#include "zerosim/error.h"
#include "zerosim/optim.h"

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

#define ZS_SETBUF(id, c, n) (b[id] = (zs_buf_spec){.cat = (c), .bytes = (n)})

int zs_step_shape_param_alone(const zs_step_shape *s)
{
    return s->stage == 3 && s->cfg.offload_param != ZS_OFFLOAD_NONE &&
           s->cfg.offload_optimizer == ZS_OFFLOAD_NONE;
}

/* offload_optimizer (ZeRO-Offload): the optimizer's states, the gradient
 * and parameter shards off the device (zs_step_shape_place_buffers). */
static void zs_shape_offload_buffers(zs_step_shape *s)
{
    int st = s->stage;
    size_t S = s->part.shard, ps = s->ps, gs = s->gs;
    zs_buf_spec *b = s->buf;
    /* offload_optimizer (ZeRO-Offload): the fp32 master (in fp32 runs too:
     * the device keeps the working copy), m and v live on the host, or in
     * files with the nvme tier; the host receives the reduced gradient
     * shard (in the gradients' type) and sends back the updated parameter
     * shard (in working precision) */
    zs_offload off = st >= 1 ? s->cfg.offload_optimizer : ZS_OFFLOAD_NONE;
    if (zs_step_shape_param_alone(s)) {
        /* offload_param alone: the parameter shard lives on the host (cpu)
         * or in the rank's swap file (nvme) and each gather sends this
         * rank's part up, as with the optimizer offloaded; the optimizer
         * stays on the device with an fp32 master (in fp32 runs too: the
         * shard it updates is not on the device), writes the updated shard
         * in working precision into a device copy (mixed precision; in fp32
         * the master is that copy), and sends it down after the step; with
         * nvme it lands in a host staging buffer (SWAP) and is written to
         * the file from there */
        ZS_SETBUF(ZS_BUF_MASTER, ZS_MEM_OPT_MASTER, S * 4);
        b[ZS_BUF_PARAMS].tier = ZS_TIER_HOST;
        ZS_SETBUF(ZS_BUF_HPARAM, ZS_MEM_PARAMS, s->mixed ? S * ps : 0);
        if (s->cfg.offload_param == ZS_OFFLOAD_NVME) {
            b[ZS_BUF_PARAMS].tier = ZS_TIER_NVME;
            ZS_SETBUF(ZS_BUF_SWAP, ZS_MEM_PARAMS, S * ps);
            b[ZS_BUF_SWAP].tier = ZS_TIER_HOST;
        }
    }
    if (off != ZS_OFFLOAD_NONE) {
        zs_mem_tier t = off == ZS_OFFLOAD_CPU ? ZS_TIER_HOST : ZS_TIER_NVME;
        ZS_SETBUF(ZS_BUF_MASTER, ZS_MEM_OPT_MASTER, S * 4);
        b[ZS_BUF_MASTER].tier = b[ZS_BUF_M].tier = b[ZS_BUF_V].tier = t;
        /* the reduced gradient shard accumulates on the host, each
         * bucket's part sent down as it is reduced (as DeepSpeed streams
         * them); with the step schedule the shard is gfull's part on the
         * device, copied down before the optimizer */
        if (s->reduce_step) {
            ZS_SETBUF(ZS_BUF_HGRAD, ZS_MEM_GRADS, S * gs);
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
            int states = 2 + zs_optim_has_variance(s->cfg.optimizer);
            ZS_SETBUF(ZS_BUF_SWAP, ZS_MEM_WORKSPACE, 2 * chunk * (size_t)states * 4);
            b[ZS_BUF_SWAP].tier = ZS_TIER_HOST;
        }
    }
}

/* Expert parallelism in DeepSpeed's layout: the experts' store
 * (zs_step_shape_place_buffers). */
static void zs_shape_expert_buffers(zs_step_shape *s)
{
    int st = s->stage;
    size_t ps = s->ps;
    zs_buf_spec *b = s->buf;
    /* expert parallelism in DeepSpeed's layout: the experts' store */
    if (s->xsplit) {
        size_t XP = s->xpadded, XS = s->xshard, xopt = st == 0 ? XP : XS;
        ZS_SETBUF(ZS_BUF_XPARAMS, ZS_MEM_PARAMS, (st == 3 ? XS : XP) * ps);
        /* stage 3: a MoE unit's experts, gathered over edp for its compute */
        ZS_SETBUF(ZS_BUF_XGATHER, ZS_MEM_PARAMS, st == 3 ? s->xgmax * ps : 0);
        ZS_SETBUF(ZS_BUF_XMASTER, ZS_MEM_OPT_MASTER, s->mixed ? xopt * 4 : 0);
        ZS_SETBUF(ZS_BUF_XM, ZS_MEM_OPT_M, xopt * 4);
        ZS_SETBUF(ZS_BUF_XV, ZS_MEM_OPT_V, zs_optim_has_variance(s->cfg.optimizer) ? xopt * 4 : 0);
        ZS_SETBUF(ZS_BUF_XGACC, ZS_MEM_GRADS, XP * (s->det ? 8 : ps));
        /* the reduced gradient (stage 0: all of it, gathered), unless edp
         * is one rank without deterministic mode: the accumulator then */
        ZS_SETBUF(ZS_BUF_XGRAD, ZS_MEM_GRADS,
                  s->det || s->xworld > 1 ? (st == 0 ? XP : XS) * ps : 0);
        ZS_SETBUF(ZS_BUF_XRECV, ZS_MEM_COMM_BUFFERS, s->det && s->xworld > 1 ? XS * 8 : 0);
        ZS_SETBUF(ZS_BUF_XTMP, ZS_MEM_WORKSPACE, s->det ? s->xpiece * (8 + ps) : 0);
        if (st >= 1 && s->cfg.offload_optimizer == ZS_OFFLOAD_CPU) {
            /* ZeRO-Offload of the experts' parameter groups, as of the
             * dense shard: the fp32 master (in fp32 runs too), m and v of
             * this rank's expert shard on the host, which receives the
             * reduced expert gradient shard and sends the updated shard
             * back up, both in working precision */
            ZS_SETBUF(ZS_BUF_XMASTER, ZS_MEM_OPT_MASTER, XS * 4);
            b[ZS_BUF_XMASTER].tier = b[ZS_BUF_XM].tier = b[ZS_BUF_XV].tier = ZS_TIER_HOST;
            ZS_SETBUF(ZS_BUF_XHGRAD, ZS_MEM_GRADS, XS * ps);
            ZS_SETBUF(ZS_BUF_XHPARAM, ZS_MEM_PARAMS, XS * ps);
            b[ZS_BUF_XHGRAD].tier = b[ZS_BUF_XHPARAM].tier = ZS_TIER_HOST;
        }
    }
}

/* The table of buffers (s->buf): what the engine allocates and the
 * counter sums. */
void zs_step_shape_place_buffers(zs_step_shape *s)
{
    const zs_partition *p = &s->part;
    int st = s->stage;
    size_t P = p->padded, S = p->shard, ps = s->ps, gs = s->gs;
    size_t opt = st == 0 ? P : S;
    zs_buf_spec *b = s->buf;
    ZS_SETBUF(ZS_BUF_PARAMS, ZS_MEM_PARAMS, (st == 3 ? S : P) * ps);
    ZS_SETBUF(ZS_BUF_MASTER, ZS_MEM_OPT_MASTER, s->mixed ? opt * 4 : 0);
    /* 1-bit Adam's momentum is exchanged padded: the padding stays 0 */
    ZS_SETBUF(ZS_BUF_M, ZS_MEM_OPT_M, (s->onebit_elems ? s->onebit_elems : opt) * 4);
    ZS_SETBUF(ZS_BUF_V, ZS_MEM_OPT_V, zs_optim_has_variance(s->cfg.optimizer) ? opt * 4 : 0);
    ZS_SETBUF(ZS_BUF_GFULL, ZS_MEM_GRADS, st <= 1 ? P * gs : 0);
    /* the step schedule reduces once, into GFULL's own part: no shard
     * accumulator, and in deterministic mode with accumulation the
     * micro-batches add up in fixed point (integer sums do not depend on
     * how they are grouped, so the bytes equal the micro-batch schedule's) */
    ZS_SETBUF(ZS_BUF_GSHARD, ZS_MEM_GRADS, s->reduce_step ? 0 : S * gs);
    ZS_SETBUF(ZS_BUF_GACC, ZS_MEM_GRADS, s->det && !s->reduce_step ? S * 8 : 0);
    ZS_SETBUF(ZS_BUF_GFIX, ZS_MEM_GRADS,
              s->det && s->reduce_step && s->cfg.grad_accum > 1 ? P * 8 : 0);
    ZS_SETBUF(ZS_BUF_FIXBUF, ZS_MEM_COMM_BUFFERS, s->det ? s->max_bucket * 8 : 0);
    ZS_SETBUF(ZS_BUF_RECV, ZS_MEM_COMM_BUFFERS, s->max_chunk * (s->det ? 8 : gs));
    /* 1-bit Adam's worker and server errors; 1-bit LAMB's too, and its
     * fresh variance, last momentum and coefficients (exec_onebit.c); 0/1
     * Adam's, and a third part of onebit_elems, the 1-bit gradient before
     * the freeze and the weights at the last sync after it (exec_zeroone.c) */
    size_t zo = s->cfg.optimizer == ZS_OPT_ZEROONEADAM ? s->onebit_elems : 0;
    ZS_SETBUF(ZS_BUF_RESIDUAL, ZS_MEM_COMPRESSION,
              s->onebit_elems ? (s->onebit_elems + s->onebit_elems / (size_t)p->world + zo) * 4 +
                                    s->onebit_lamb_extra
              : s->comp && s->cfg.error_feedback ? P * 4 : 0);
    ZS_SETBUF(ZS_BUF_CX, ZS_MEM_WORKSPACE, s->comp ? s->max_bucket * 4 : 0);
    ZS_SETBUF(ZS_BUF_CAPPROX, ZS_MEM_WORKSPACE, s->comp ? s->max_bucket * 4 : 0);
    ZS_SETBUF(ZS_BUF_CACC, ZS_MEM_WORKSPACE, s->comp ? s->max_chunk * 4 + 4 : 0);
    ZS_SETBUF(ZS_BUF_CSEND, ZS_MEM_COMM_BUFFERS, s->comp ? s->csend_bytes + 1 : 0);
    ZS_SETBUF(ZS_BUF_CRECV, ZS_MEM_COMM_BUFFERS, s->comp ? s->crecv_bytes + 1 : 0);
    /* the ring's two receive buffers (2 ranks receive straight into recv) */
    ZS_SETBUF(ZS_BUF_RING, ZS_MEM_COMM_BUFFERS,
              p->world > 2 ? 2 * s->max_chunk * (s->det ? 8 : gs) : 0);
    /* fp32 views of one unit: mixed precision converts, QAT fake-quantizes */
    ZS_SETBUF(ZS_BUF_STAGE_P, ZS_MEM_WORKSPACE,
              s->mixed || s->cfg.qat ? s->stage_elems * 4 : 0);
    ZS_SETBUF(ZS_BUF_STAGE_G, ZS_MEM_WORKSPACE, s->stage_elems * 4);
    ZS_SETBUF(ZS_BUF_TOKENS, ZS_MEM_WORKSPACE,
              zs_model_is_decoder(&s->cfg.model) ? s->tok_bytes : 0);
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
    zs_shape_offload_buffers(s);
    zs_shape_expert_buffers(s);
}
#undef ZS_SETBUF

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

/* The shape's flags from the configuration (zs_step_shape_build, and the
 * planner's bare parameter count: zs_step_shape_build_flat). */
void zs_step_shape_init(zs_step_shape *s, const zs_run_config *cfg)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->stage = cfg->stage;
    s->det = cfg->deterministic;
    s->pt = cfg->precision;
    s->ps = zs_dtype_size(s->pt);
    s->gt = zs_run_config_grad_dtype(cfg);
    s->gs = zs_dtype_size(s->gt);
    s->mixed = cfg->precision != ZS_DTYPE_F32;
    s->comp = cfg->compression.kind != ZS_COMP_NONE;
    s->reduce_step = zs_step_reduce_once(cfg);
    s->overlap = zs_step_overlap(cfg);
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
        if ((s->pp_rank == 0 || s->pp_rank == s->pp - 1) && zs_model_head_tied(mc))
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
    size_t ntok = zs_model_is_decoder(mc) ? (size_t)mb * (size_t)mc->seq_len : (size_t)mb;
    s->tok_bytes = ntok * sizeof(int32_t);
    s->x_bytes = mc->kind == ZS_MODEL_MLP ? (size_t)mb * (size_t)mc->input_dim * sizeof(float) : 0;
    if (zs_optim_is_onebit(cfg->optimizer) || cfg->optimizer == ZS_OPT_ZEROONEADAM)
        s->onebit_elems = zs_comm_onebit_padded(s->part.padded, world);
    if (cfg->optimizer == ZS_OPT_ONEBITLAMB)
        s->onebit_lamb_extra = zs_onebit_lamb_extra(s->part.padded, lay->n_entries);
    zs_step_shape_place_buffers(s);
    return 0;
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
