/* zerosim — the engine: gradient buckets and their reduction (see
 * engine_impl.h).
 *
 * Each bucket's gradient is reduce-scattered (in int64 fixed point in
 * deterministic mode, or exchanged compressed) and this rank's part added
 * into its gradient shard; with overlap_comm the reduce-scatter runs
 * behind the next units' backward. Stages 0-2's allgathers of the full
 * array's pieces are here too.
 */
#include "zero/engine_impl.h"
#include "zerosim/compress.h"
#include "zerosim/error.h"

/* The compressed exchange of bucket k (in place of its reduce-scatter):
 * x = the bucket's gradient (+ the error-feedback residual); the part that
 * rank q owns is compressed and sent to q (all-to-all); what was not sent
 * stays in the residual; every rank decompresses the parts it receives and
 * sums them in rank order, then adds the sum into its shard. */
static int zs_engine_exchange_compressed(zs_engine *e, int k, const void *src, size_t rbegin,
                                         size_t rcount)
{
    const zs_step_range *b = &e->shape->buckets[k];
    const zs_comp_spec *cs = &e->cfg.compression;
    int N = e->part.world;
    size_t n = b->hi - b->lo;
    zs_backend_convert_to_f32(e->be, e->cx, src, e->grad_dtype, n);
    /* the residual is kept unscaled, so a change of the fp16 loss scale
     * does not change what it means */
    float scale = e->scaler.scale;
    if (e->residual)
        zs_backend_axpy(e->be, e->cx, scale, e->residual + b->lo, n);
    size_t part = 0, soff = 0;
    for (int q = 0; q < N; q++) {
        size_t cnt = (size_t)e->counts[q], nb = zs_comp_bytes(cs, cnt);
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
    size_t rb = zs_comp_bytes(cs, rcount);
    for (int q = 0; q < N; q++) {
        e->rcount[q] = (int)rb;
        e->rdispl[q] = (int)((size_t)q * rb);
    }
    ZS_TRY(zs_comm_alltoallv_bytes(e->comm, e->csend, e->scount, e->sdispl, e->crecv, e->rcount,
                                   e->rdispl, k));
    zs_backend_memset0(e->be, e->cacc, rcount * 4);
    for (int q = 0; q < N && !e->phantom; q++)
        zs_comp_decompress_add(cs, e->crecv + (size_t)q * rb, rcount, e->cacc);
    size_t off = rbegin - e->part.shard_begin;
    if (e->reduce_once) /* the shard is gfull's part: it held this rank's own gradient */
        zs_backend_memset0(e->be, (char *)e->gshard + off * e->grad_elsize,
                           rcount * e->grad_elsize);
    zs_backend_accumulate_f32(e->be, (char *)e->gshard + off * e->grad_elsize, e->grad_dtype,
                              e->cacc, rcount);
    if (e->grad_shard_on_host) /* this part went down to the host's shard */
        zs_comm_record_transfer(e->comm, ZS_OP_D2H, rcount * e->grad_elsize, 0.0);
    return 0;
}

/* Reduce-scatter bucket k and add this rank's part into the shard
 * accumulator: zs_engine_reduce_start starts it (the compressed exchange
 * runs whole there), zs_engine_reduce_finish waits and adds. Without
 * overlap_comm one follows the other; with it the backward goes on between
 * them, and the engine drives the ring between ops (zs_engine_step).
 * With the step schedule the shard is gfull's own part, which held this
 * rank's local gradient: it is zeroed and the reduced part added (zero
 * plus the sum, as the micro-batch schedule's first addition, so that one
 * micro-batch gives the same bytes under both schedules); in fixed point
 * the reduced part is converted back straight into it. */
static int zs_engine_reduce_start(zs_engine *e, int k, int async)
{
    const zs_step_range *b = &e->shape->buckets[k];
    size_t n = b->hi - b->lo;
    const void *src =
        e->stage <= 1 ? (const char *)e->gfull + b->lo * e->grad_elsize : e->bucket_buf[k];
    zs_step_counts(e->shape, b->lo, b->hi, e->counts, NULL);
    e->rs_bucket = k;
    e->rs_async = async;
    if (e->comp_now) {
        size_t rbegin, rcount = zs_partition_overlap(&e->part, e->part.rank, b->lo, b->hi,
                                                     &rbegin);
        return zs_engine_exchange_compressed(e, k, src, rbegin, rcount);
    }
    const void *send = src;
    zs_comm_type ct = e->grad_comm_dtype;
    if (e->det) {
        if (!e->gfix)
            e->fix_overflows += zs_backend_to_fixed(e->be, e->fixbuf, src, e->grad_dtype, n,
                                                    e->frac_bits, e->fix_limit);
        send = e->gfix ? (const void *)(e->gfix + b->lo) : (const void *)e->fixbuf;
        ct = ZS_CT_I64;
    }
    e->rs_t0 = zs_clock();
    ZS_TRY(zs_comm_ireduce_scatter(e->comm, send, e->recv, e->counts, ct, k, &e->rs_req));
    if (async) /* starting it is not hidden */
        e->nb_wait_s += zs_clock() - e->rs_t0;
    return 0;
}

static int zs_engine_reduce_finish(zs_engine *e)
{
    int k = e->rs_bucket;
    if (k < 0)
        return 0;
    const zs_step_range *b = &e->shape->buckets[k];
    size_t rbegin, rcount = zs_partition_overlap(&e->part, e->part.rank, b->lo, b->hi, &rbegin);
    size_t off = rbegin - e->part.shard_begin;
    e->rs_bucket = -1;
    if (!e->comp_now) {
        double t0 = zs_clock();
        ZS_TRY(zs_comm_wait(e->comm, &e->rs_req));
        double t1 = zs_clock();
        if (e->rs_async) { /* a blocking one hides nothing: not counted */
            e->nb_wait_s += t1 - t0;
            e->nb_span_s += t1 - e->rs_t0;
        }
        if (e->det) {
            if (e->reduce_once)
                zs_backend_from_fixed(e->be, (char *)e->gshard + off * e->grad_elsize,
                                      e->grad_dtype, e->recv, rcount, e->frac_bits);
            else
                zs_backend_add_i64(e->be, e->gacc + off, e->recv, rcount);
        } else {
            if (e->reduce_once)
                zs_backend_memset0(e->be, (char *)e->gshard + off * e->grad_elsize,
                                   rcount * e->grad_elsize);
            double t2 = zs_clock();
            zs_backend_add_typed(e->be, (char *)e->gshard + off * e->grad_elsize, e->recv,
                                 e->grad_dtype, rcount);
            if (e->grad_shard_on_host) /* the reduced part, added into the host's shard */
                zs_comm_record_transfer(e->comm, ZS_OP_D2H, rcount * e->grad_elsize,
                                        zs_clock() - t2);
        }
    }
    if (e->stage >= 2) {
        zs_mem_free(e->mem, ZS_MEM_COMM_BUFFERS, e->bucket_buf[k],
                    (b->hi - b->lo) * e->grad_elsize);
        e->bucket_buf[k] = NULL;
    }
    return 0;
}

/* Between ops: move the non-blocking collectives on. The reduce-scatter in
 * flight (overlap_comm) is driven by this thread, which does its sums; a
 * test of the latest prefetched gather lets MPI's progress engine move every
 * pending gather (Open MPI progresses non-blocking collectives only inside
 * MPI calls). The time it takes here is not hidden. */
int zs_engine_progress(zs_engine *e)
{
    if (e->phantom || (!e->rs_req && (e->gather_last < 0 || !e->gather_req[e->gather_last])))
        return 0;
    double t0 = zs_clock();
    int rc = e->rs_req
                 ? zs_comm_test(e->comm, &e->rs_req)
                 : zs_comm_test(e->gather_comm[e->gather_last] ? e->gather_comm[e->gather_last]
                                                               : e->comm,
                                &e->gather_req[e->gather_last]);
    e->nb_wait_s += zs_clock() - t0;
    return rc;
}

/* Allgather piece i of a full array whose shard this rank holds at its
 * place (pieces of allgather_bucket_size elements), of elements of elsize
 * bytes sent as ct. */
static int zs_engine_allgather_piece(zs_engine *e, void *full, size_t elsize, zs_comm_type ct,
                                     int i)
{
    size_t lo = (size_t)i * e->shape->ag_piece;
    size_t hi = lo + e->shape->ag_piece < e->part.padded ? lo + e->shape->ag_piece : e->part.padded;
    zs_step_counts(e->shape, lo, hi, e->counts, e->displs);
    return zs_comm_allgatherv_inplace(e->comm, (char *)full + lo * elsize, e->counts, e->displs,
                                      ct, i);
}

/* ---- executors ------------------------------------------------------------- */

/* Zero the step's gradient accumulators. */
int zs_engine_exec_begin(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)o;
    (void)stop;
    const zs_partition *p = &e->part;
    if (e->gacc)
        zs_backend_memset0(e->be, e->gacc, p->shard * 8);
    if (e->gfix)
        zs_backend_memset0(e->be, e->gfix, p->padded * 8);
    if (!e->reduce_once) /* the step schedule's shard is part of gfull */
        zs_backend_memset0(e->be, e->gshard, p->shard * e->grad_elsize);
    if (e->xgacc)
        zs_backend_memset0(e->be, e->xgacc, e->shape->buf[ZS_BUF_XGACC].bytes);
    e->fix_overflows = 0;
    return 0;
}

/* Chunk `index`'s part of the full gradient (all of it with one chunk). */
int zs_engine_exec_zero_grads(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    zs_backend_memset0(e->be, (char *)e->gfull + e->shape->clo[o->index] * e->grad_elsize,
                       o->elems * e->grad_elsize);
    return 0;
}

int zs_engine_exec_bucket_alloc(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    const zs_step_range *b = &e->shape->buckets[o->index];
    if (e->bucket_buf[o->index])
        return 0;
    return zs_mem_alloc(e->mem, ZS_MEM_COMM_BUFFERS, (b->hi - b->lo) * e->grad_elsize,
                        &e->bucket_buf[o->index]);
}

/* This micro-batch's bucket, added in fixed point. */
int zs_engine_exec_accum_fixed(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    const zs_step_range *b = &e->shape->buckets[o->index];
    size_t n = b->hi - b->lo;
    e->fix_overflows +=
        zs_backend_to_fixed(e->be, e->fixbuf, (char *)e->gfull + b->lo * e->grad_elsize,
                            e->grad_dtype, n, e->frac_bits, e->fix_limit);
    zs_backend_add_i64(e->be, e->gfix + b->lo, e->fixbuf, n);
    return 0;
}

int zs_engine_exec_reduce(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    int async = (o->flags & ZS_SOPF_ASYNC) != 0;
    ZS_TRY(zs_engine_reduce_start(e, o->index, async));
    return async ? 0 : zs_engine_reduce_finish(e);
}

int zs_engine_exec_reduce_wait(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)o;
    (void)stop;
    return zs_engine_reduce_finish(e);
}

/* Every rank gets every reduced gradient. */
int zs_engine_exec_put_shard(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)o;
    (void)stop;
    const zs_partition *p = &e->part;
    zs_backend_copy_d2d(e->be, (char *)e->gfull + p->shard_begin * e->grad_elsize, e->gshard,
                        p->shard * e->grad_elsize);
    return 0;
}

/* Piece `index` of the full gradient (stage 0) or parameters (1, 2). */
int zs_engine_exec_allgather(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    if (e->stage == 0)
        return zs_engine_allgather_piece(e, e->gfull, e->grad_elsize, e->grad_comm_dtype,
                                         o->index);
    return zs_engine_allgather_piece(e, e->params, e->param_elsize, e->comm_dtype, o->index);
}
