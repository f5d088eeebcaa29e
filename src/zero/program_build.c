/* zerosim — building the step program (see zerosim/program.h): the builder
 * alone decides checkpointing, overlap and the order each pipeline
 * schedule gives the ops. */
#include "zerosim/program.h"
#include "zerosim/error.h"

#include <stdlib.h>
#include <string.h>

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
    [ZS_SOP_DOWNLOAD_PARAMS] = "download_params",
    [ZS_SOP_ALLGATHER] = "allgather",
    [ZS_SOP_RECV_ACT] = "recv_act",
    [ZS_SOP_SEND_ACT] = "send_act",
    [ZS_SOP_RECV_GRAD] = "recv_grad",
    [ZS_SOP_SEND_GRAD] = "send_grad",
    [ZS_SOP_TIED_SEND] = "tied_send",
    [ZS_SOP_TIED_RECV] = "tied_recv",
    [ZS_SOP_TIED_SYNC] = "tied_sync",
    [ZS_SOP_LOCAL_NORM] = "local_norm",
    [ZS_SOP_OPTIMIZER_ONEBIT] = "optimizer_onebit",
};

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
    int local;                /* 1-bit Adam after the freeze: the gradient
                                 stays this rank's, summed over the
                                 micro-batches in the full gradient */
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
    if (b->local) { /* as the step schedule without fixed point: zeroed once */
        once = 1;
        fixacc = 0;
    }
    if (st <= 1 && (!once || fixacc || a == 0))
        zs_emit(b, ZS_SOP_ZERO_GRADS, -1, c, 0,
                (c + 1 < s->nchunks ? s->clo[c + 1] : s->part.padded) - s->clo[c]);
    /* buckets reduced inside the backward, as each is ready: stages 2 and
     * 3, and stages 0 and 1 with overlap_comm (in the reducing
     * micro-batches; not when fixed point accumulates locally) */
    int inside = !b->local && (st >= 2 || (s->overlap && !fixacc && (!once || a == GA - 1)));
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
        if (pipe && u == 0 && s->tied_elems)
            zs_emit_pp(b, ZS_SOP_TIED_RECV, 0, 0, s->tied_elems);
        zs_emit(b, ZS_SOP_BACKWARD, u, -1, 0, zs_model_unit_elems(b->m, u));
        if (pipe && last && u == s->U - 1 && s->tied_elems)
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
    if (!inside && !b->local && st <= 1 && (!once || a == GA - 1))
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

/* The step's ops after the backward in 1-bit Adam's program: the loss, the
 * local norm and the compressed optimizer on the whole padded array. */
static void zs_b_onebit_step(zs_builder *b)
{
    const zs_step_shape *s = b->s;
    zs_emit(b, ZS_SOP_LOSS_SUM, -1, -1, 0, (size_t)s->cfg.grad_accum);
    zs_emit(b, ZS_SOP_LOCAL_NORM, -1, -1, 0, s->part.padded);
    zs_emit(b, ZS_SOP_OPTIMIZER_ONEBIT, -1, -1, ZS_SOPF_APPLIED, s->onebit_elems);
}

static int zs_program_build(const zs_step_shape *s, const zs_model *m, int local,
                            zs_step_program *p)
{
    memset(p, 0, sizeof *p);
    zs_builder b = {.s = s, .m = m, .p = p, .micro = -1, .pending = -1, .fwd_micro = -1,
                    .fwd_chunk = -1, .local = local};
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
    if (local) {
        zs_b_onebit_step(&b);
        goto built;
    }
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
    if (s->buf[ZS_BUF_HPARAM].bytes > 0 && s->buf[ZS_BUF_HPARAM].tier != ZS_TIER_DEVICE)
        zs_emit(&b, ZS_SOP_UPLOAD_PARAMS, -1, -1, ZS_SOPF_APPLIED, s->part.shard);
    else if (zs_step_shape_param_alone(s))
        zs_emit(&b, ZS_SOP_DOWNLOAD_PARAMS, -1, -1, ZS_SOPF_APPLIED, s->part.shard);
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
built:
    free(b.live);
    free(b.touched);
    if (b.fail) {
        zs_step_program_free(p);
        ZS_FAIL("out of host memory building the step program");
    }
    return 0;
}

int zs_step_program_build(const zs_step_shape *s, const zs_model *m, int rank,
                          zs_step_program *p)
{
    (void)rank; /* the shape is this rank's pipeline stage's */
    return zs_program_build(s, m, 0, p);
}

int zs_step_program_build_onebit(const zs_step_shape *s, const zs_model *m, int rank,
                                 zs_step_program *p)
{
    (void)rank;
    if (s->stage != 0 || s->pp > 1 || !s->onebit_elems)
        ZS_FAIL("internal: 1-bit Adam's program is built for stage 0 without a pipeline");
    return zs_program_build(s, m, 1, p);
}

void zs_step_program_free(zs_step_program *p)
{
    free(p->ops);
    memset(p, 0, sizeof *p);
}
