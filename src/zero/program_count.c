/* zerosim — counting the step program (see zerosim/program.h): memory peaks
 * per category, calls and bytes per collective. */
#include "zerosim/mesh.h"
#include "zerosim/program.h"

#include <stdlib.h>
#include <string.h>

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

size_t zs_step_q8_unit_bytes(const zs_step_shape *s, int u)
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

/* The data-parallel group's node size (zerosim/mesh.h's rank equation):
 * this shape's pipeline stage and tensor-parallel rank 0, --ranks-per-node
 * world ranks to a node (0: one node, as on one host). */
static int zs_dp_node_blocks(const zs_step_shape *s, int W)
{
    int T = s->cfg.tp > 1 ? s->cfg.tp : 1, P = s->pp > 1 ? s->pp : 1;
    return zs_mesh_dp_node_blocks(W * T * P, T, P, 0, P > 1 ? s->pp_rank : 0,
                                  s->cfg.ranks_per_node);
}

/* The traffic of op o that no other op's count depends on: pipeline
 * messages, the stage 0-2 allgathers, the offload's transfers and the
 * swapped optimizer's file traffic (zs_step_program_count). */
static void zs_count_transfers(const zs_step_shape *s, const zs_step_op *o, zs_step_count *c)
{
    double ps = (double)s->ps;
    switch (o->kind) {
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
    case ZS_SOP_ALLGATHER: /* stage 0 the gradients, stages 1, 2 the parameters */
        c->ag_calls += 1;
        c->ag_bytes += (double)o->elems * (s->stage == 0 ? (double)s->gs : ps);
        break;
    case ZS_SOP_OFFLOAD_GRADS:
        c->d2h_applied_bytes += (double)o->elems * (double)s->gs;
        break;
    case ZS_SOP_DOWNLOAD_PARAMS: /* and with offload_param nvme into the file */
        c->d2h_applied_bytes += (double)o->elems * ps;
        if (s->buf[ZS_BUF_PARAMS].tier == ZS_TIER_NVME)
            c->nvme_write_bytes += (double)o->elems * ps;
        break;
    case ZS_SOP_UPLOAD_PARAMS: /* to the device, or into the file */
        if (s->buf[ZS_BUF_PARAMS].tier == ZS_TIER_NVME)
            c->nvme_write_bytes += (double)o->elems * ps;
        else
            c->h2d_bytes += (double)o->elems * ps;
        break;
    case ZS_SOP_OPTIMIZER_HOST: /* the experts' shard down and up (exec_expert.c) */
        c->d2h_applied_bytes += (double)s->buf[ZS_BUF_XHGRAD].bytes;
        c->h2d_bytes += (double)s->buf[ZS_BUF_XHPARAM].bytes;
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
}

/* qgZ or --hierarchical: the reduce-scatter's own temporaries for bucket
 * o->index over W ranks in nodes of K (zs_step_program_count's comment);
 * rcnt: W ints of scratch. */
static size_t zs_count_reduce_temps(const zs_step_shape *s, const zs_step_op *o, int W, int K,
                                    int qgz, int *rcnt)
{
    const zs_step_range *bk = &s->buckets[o->index];
    zs_step_counts(s, bk->lo, bk->hi, rcnt, NULL);
    zs_qgz_sizes z; /* the columns --hierarchical sums are qgZ's too */
    zs_comm_qgz_sizes(rcnt, W, K, &z);
    return qgz ? z.tmp_peak : z.col * (s->det ? 8 : s->gs);
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
    double gs = (double)s->gs;
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
        zs_count_transfers(s, o, c);
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
            if (o->flags & ZS_SOPF_RECOMPUTE) {
                c->recompute_units += 1;
                c->ckpt_gathers += zs_model_ckpt_gathers(&s->cfg.model, o->unit,
                                                         s->cfirst[o->chunk]);
            } else if (o->unit == s->cfirst[o->chunk] && ++fwd - bwd > c->in_flight)
                c->in_flight = fwd - bwd; /* (chunk, micro-batch) pairs */
            break;
        case ZS_SOP_BACKWARD:
            if (o->unit == s->cfirst[o->chunk])
                bwd++;
            break;
        case ZS_SOP_BUCKET_ALLOC:
            bucket_bytes += o->elems * s->gs;
            if (bucket_bytes + qtmp > gb)
                gb = bucket_bytes + qtmp;
            break;
        case ZS_SOP_REDUCE:
            c->rs_calls += 1;
            c->rs_bytes += (double)o->elems * (s->det ? 8.0 : gs);
            if (qgz || hier) {
                size_t tmp = zs_count_reduce_temps(s, o, W, K, qgz, rcnt);
                if (bucket_bytes + qtmp + tmp > gb)
                    gb = bucket_bytes + qtmp + tmp;
            }
            if (s->stage >= 2 && !(o->flags & ZS_SOPF_ASYNC))
                bucket_bytes -= o->elems * s->gs;
            break;
        case ZS_SOP_REDUCE_WAIT: /* the buffer lived until now */
            if (s->stage >= 2)
                bucket_bytes -= o->elems * s->gs;
            break;
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
