/* zerosim — the engine: the optimizer on the device and on the host (see
 * engine_impl.h; the swapped one, which streams its states through the
 * swap file, is in offload.c).
 *
 * The step-program builder chooses the kind: OPTIMIZER_FULL (stage 0:
 * every rank updates the whole array from the allgathered gradient),
 * OPTIMIZER_SHARD (stages 1-3: this rank's shard), OPTIMIZER_HOST
 * (offload_optimizer cpu: ZeRO-Offload's CPU step on the host's shard).
 * With DeepSpeed's layout of the experts, each of them also updates the
 * expert store (zs_engine_step_experts; on the host with offload). LAMB, whose trust
 * ratio needs each tensor's whole sums, takes its own path
 * (zs_engine_lamb_step, exec_lamb.c) from each of them.
 */
#include "zero/engine_impl.h"
#include "zerosim/error.h"

/* Stage 0: the whole array, from the full gradient. */
int zs_engine_exec_optimizer_full(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    if (zs_optim_is_lamb(e->cfg.optimizer))
        return zs_engine_lamb_step(e, 0, o->elems, e->master, e->exp_avg, e->exp_avg_sq,
                                   e->gfull, e->mixed ? e->params : NULL);
    zs_optim_step(e->be, &e->cfg, e->opt_steps, e->info->lr, e->grad_mul, e->master, e->exp_avg,
                  e->exp_avg_sq, e->gfull, e->grad_dtype, e->mixed ? e->params : NULL,
                  e->param_dtype, 0, o->elems);
    return e->xsplit ? zs_engine_step_experts(e) : 0;
}

/* Stages 1-3: this rank's shard, from the reduced gradient shard; the
 * working copy of the shard is where the parameters keep it (stages 1, 2:
 * at its place in the full array). */
int zs_engine_exec_optimizer_shard(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    if (zs_optim_is_lamb(e->cfg.optimizer))
        return zs_engine_lamb_step(e, e->part.shard_begin, o->elems, e->master, e->exp_avg,
                                   e->exp_avg_sq, e->gshard, e->param_out);
    zs_optim_step(e->be, &e->cfg, e->opt_steps, e->info->lr, e->grad_mul, e->master, e->exp_avg,
                  e->exp_avg_sq, e->gshard, e->grad_dtype, e->param_out, e->param_dtype, 0,
                  o->elems);
    return e->xsplit ? zs_engine_step_experts(e) : 0;
}

/* offload_optimizer cpu: ZeRO-Offload's CPU step, from the host's gradient
 * shard into the host's parameter shard. */
int zs_engine_exec_optimizer_host(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    if (zs_optim_is_lamb(e->cfg.optimizer))
        return zs_engine_lamb_step(e, e->part.shard_begin, o->elems, e->master, e->exp_avg,
                                   e->exp_avg_sq, e->hgrad, e->hparam);
    zs_optim_step(e->be, &e->cfg, e->opt_steps, e->info->lr, e->grad_mul, e->master, e->exp_avg,
                  e->exp_avg_sq, e->hgrad, e->grad_dtype, e->hparam, e->param_dtype, 0,
                  o->elems);
    return e->xsplit ? zs_engine_step_experts(e) : 0;
}
