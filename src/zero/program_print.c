/* zerosim — printing the step program (see zerosim/program.h):
 * zerosim train --print-program. */
#include "zerosim/program.h"

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
            fprintf(f, " %s on %zu elements", zs_optim_name(s->cfg.optimizer), o->elems);
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
