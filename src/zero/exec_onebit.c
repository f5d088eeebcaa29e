/* zerosim — the engine: 1-bit Adam after its freeze (see engine_impl.h;
 * Tang et al., arXiv 2102.02888, algorithm 1, as DeepSpeed's OnebitAdam in
 * deepspeed/runtime/fp16/onebit/adam.py runs it).
 *
 * For its first freeze_step applied steps 1-bit Adam is Adam without bias
 * correction in the ordinary stage-0 program (zs_optim_step). From then on
 * the engine runs the program of zs_step_program_build_onebit: the backward
 * keeps this rank's own gradient (no reduce-scatter, no allgather), then
 *
 *   LOCAL_NORM        the overflow flags agreed over the ranks (so that all
 *                     of them skip together); the norm of this rank's own
 *                     gradient, which DeepSpeed's fp16 optimizer clips with
 *                     once the backward no longer all-reduces; the loss
 *                     scaler (zs_engine_norm_finish)
 *   OPTIMIZER_ONEBIT  m = b1 m + (1 - b1) g, g this rank's gradient averaged
 *                     over its micro-batches (unscaled, clipped);
 *                     m = the compressed all-reduce of m
 *                     (zs_comm_onebit_allreduce: the same on every rank),
 *                     its worker and server errors in the residual buffer;
 *                     the momentum set back to 0 where the frozen variance
 *                     is 0 (every gradient of the element was exactly 0:
 *                     an input pixel that is always 0, the padding), which
 *                     1-bit signs cannot represent (DeepSpeed asks for
 *                     this mask, exp_avg_mask, from the user; without it
 *                     such an element moves by lr scale / eps);
 *                     w -= lr (m / (sqrt(v) + eps) + weight_decay w), v frozen
 *
 * The gradient buffer holds the sum over micro-batches of the gradient
 * times dloss (scale / (grad_accum x ranks), or with postscale scale /
 * (grad_accum x predivide)): times ranks x post_scale / scale it is this
 * rank's average.
 */
#include "zero/engine_impl.h"
#include "zerosim/error.h"

#include <math.h>

int zs_engine_exec_local_norm(zs_engine *e, const zs_step_op *o, int *stop)
{
    const zs_partition *p = &e->part;
    int flags = zs_backend_count_nonfinite(e->be, e->gfull, e->param_dtype, o->elems) > 0;
    /* 0/1 Adam's local steps exchange nothing, but with fp16 the ranks
     * still agree on overflow (one flag), so that all skip together */
    if (!e->zo_local || e->param_dtype == ZS_DTYPE_F16)
        ZS_TRY(zs_comm_allreduce_max_int(e->comm, &flags));
    e->overflow = flags != 0;
    if (e->overflow && e->param_dtype != ZS_DTYPE_F16)
        ZS_FAIL("gradients are not finite at step %d: lower --lr or enable gradient_clipping",
                e->step);
    double mul = (double)p->world * e->post_scale;
    double norm = INFINITY;
    if (!e->overflow)
        norm = sqrt(zs_backend_sumsq(e->be, e->gfull, e->param_dtype, o->elems)) * mul /
               e->scaler.scale;
    return zs_engine_norm_finish(e, norm, mul, stop);
}

int zs_engine_exec_optimizer_onebit(zs_engine *e, const zs_step_op *o, int *stop)
{
    if (e->zo_on)
        return zs_engine_exec_optimizer_zeroone(e, o, stop);
    const zs_partition *p = &e->part;
    size_t n = o->elems; /* the momentum, padded for the exchange */
    float *worker_error = e->residual, *server_error = e->residual ? e->residual + n : NULL;
    if (!e->phantom)
        zs_optim_onebit_momentum(&e->cfg, e->grad_mul, e->exp_avg, e->gfull, e->param_dtype,
                                 p->padded);
    ZS_TRY(zs_comm_onebit_allreduce(e->comm, e->exp_avg, n, worker_error, server_error, -1));
    if (e->phantom)
        return 0;
    for (size_t i = 0; i < p->padded; i++)
        if (e->exp_avg_sq[i] == 0.0f)
            e->exp_avg[i] = 0.0f;
    for (size_t i = p->padded; i < n; i++)
        e->exp_avg[i] = 0.0f;
    zs_optim_onebit_apply(&e->cfg, e->info->lr, e->master, e->exp_avg, e->exp_avg_sq,
                          e->mixed ? e->params : NULL, e->param_dtype, p->padded);
    return 0;
}
