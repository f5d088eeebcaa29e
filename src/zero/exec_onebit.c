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
#include <string.h>

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

/* x = 0 where the variance is 0 (the element's gradient was 0 in every
 * variance update: 1-bit signs cannot say 0) and in the padding [padded, n). */
void zs_engine_onebit_mask(const zs_engine *e, float *x, size_t n)
{
    size_t padded = e->part.padded;
    for (size_t i = 0; i < padded; i++)
        if (e->exp_avg_sq[i] == 0.0f)
            x[i] = 0.0f;
    for (size_t i = padded; i < n; i++)
        x[i] = 0.0f;
}

/* 1-bit LAMB's state after the two errors in the residual buffer
 * (zs_onebit_lamb_extra): the fresh variance, the last momentum (padded
 * floats each), one zs_onebit_lamb_tensor per layout entry. */
static void onebit_lamb_state(zs_engine *e, float **v_fresh, float **m_last,
                              zs_onebit_lamb_tensor **tensors)
{
    size_t n = e->shape->onebit_elems, P = e->part.padded;
    *v_fresh = e->residual + n + n / (size_t)e->part.world;
    *m_last = *v_fresh + P;
    *tensors = (zs_onebit_lamb_tensor *)(void *)(*m_last + P);
}

void zs_engine_onebit_lamb_warmup(zs_engine *e, const float *ratio, const float *v)
{
    const zs_run_config *c = &e->cfg;
    float *v_fresh, *m_last;
    zs_onebit_lamb_tensor *t;
    onebit_lamb_state(e, &v_fresh, &m_last, &t);
    double beta = c->onebit_coeff_beta;
    for (int k = 0; k < e->lay->n_entries; k++)
        if (ratio[k] != 1.0f) /* as OnebitLamb: a ratio of 1 (a zero norm) is left out */
            t[k].coeff = beta * t[k].coeff + (1.0 - beta) * (double)ratio[k];
    if (e->opt_steps == c->onebit_freeze_step) /* the last exact step */
        memcpy(v_fresh, v, e->part.padded * sizeof(float));
}

/* The momentum's scaling coefficients, at the first compressed step, from
 * the momentum the exact steps left: each tensor's root mean square, and
 * the mean of those over the tensors divided by the tensor's own (a tensor
 * whose momentum is 0 keeps 1, where OnebitLamb would divide by 0). */
static void onebit_lamb_scaling(zs_engine *e, const float *m, zs_onebit_lamb_tensor *t)
{
    int E = e->lay->n_entries;
    double total = 0.0;
    for (int k = 0; k < E; k++) {
        const zs_param_entry *pe = &e->lay->entries[k];
        double sq = 0.0;
        for (size_t i = 0; i < pe->numel; i++)
            sq += (double)m[pe->offset + i] * m[pe->offset + i];
        t[k].scaling = pe->numel ? sqrt(sq) / sqrt((double)pe->numel) : 0.0;
        total += t[k].scaling;
        t[k].last_factor = 1.0;
    }
    double united = E ? total / E : 0.0;
    for (int k = 0; k < E; k++)
        t[k].scaling = t[k].scaling > 0.0 ? united / t[k].scaling : 1.0;
}

/* Each tensor's momentum times (or divided by) its scaling coefficient. */
static void onebit_lamb_scale(zs_engine *e, float *m, const zs_onebit_lamb_tensor *t, int divide)
{
    for (int k = 0; k < e->lay->n_entries; k++) {
        const zs_param_entry *pe = &e->lay->entries[k];
        float s = (float)(divide ? 1.0 / t[k].scaling : t[k].scaling);
        for (size_t i = 0; i < pe->numel; i++)
            m[pe->offset + i] *= s;
    }
}

/* 1-bit LAMB after the freeze (zerosim/optim.h): the scaled momentum
 * exchanged as 1-bit Adam's, then per tensor the factor and the update. */
static int onebit_lamb_step(zs_engine *e, const zs_step_op *o)
{
    const zs_run_config *c = &e->cfg;
    const zs_partition *p = &e->part;
    size_t n = o->elems;
    float *worker_error = e->residual, *server_error = e->residual ? e->residual + n : NULL;
    float *v_fresh = NULL, *m_last = NULL;
    zs_onebit_lamb_tensor *t = NULL;
    if (!e->phantom) {
        onebit_lamb_state(e, &v_fresh, &m_last, &t);
        if (e->opt_steps == c->onebit_freeze_step + 1) /* the first compressed step */
            onebit_lamb_scaling(e, e->exp_avg, t);
        memcpy(m_last, e->exp_avg, p->padded * sizeof(float));
        zs_optim_onebit_momentum(c, e->grad_mul, e->exp_avg, e->gfull, e->param_dtype,
                                 p->padded);
        onebit_lamb_scale(e, e->exp_avg, t, 0);
    }
    ZS_TRY(zs_comm_onebit_allreduce(e->comm, e->exp_avg, n, worker_error, server_error, -1));
    if (e->phantom)
        return 0;
    onebit_lamb_scale(e, e->exp_avg, t, 1);
    zs_engine_onebit_mask(e, e->exp_avg, n);
    for (int k = 0; k < e->lay->n_entries; k++) {
        const zs_param_entry *pe = &e->lay->entries[k];
        size_t off = pe->offset;
        double factor = zs_optim_onebit_lamb_factor(c, &t[k], e->master + off, e->exp_avg + off,
                                                    m_last + off, e->exp_avg_sq + off,
                                                    v_fresh + off, pe->numel);
        zs_optim_onebit_lamb_apply(c, e->info->lr, t[k].coeff * factor, e->master + off,
                                   e->exp_avg + off, e->exp_avg_sq + off,
                                   e->mixed ? (char *)e->params + off * e->param_elsize : NULL,
                                   e->param_dtype, pe->numel);
    }
    return 0;
}

int zs_engine_exec_optimizer_onebit(zs_engine *e, const zs_step_op *o, int *stop)
{
    if (e->zo_on)
        return zs_engine_exec_optimizer_zeroone(e, o, stop);
    (void)stop;
    if (e->cfg.optimizer == ZS_OPT_ONEBITLAMB)
        return onebit_lamb_step(e, o);
    const zs_partition *p = &e->part;
    size_t n = o->elems; /* the momentum, padded for the exchange */
    float *worker_error = e->residual, *server_error = e->residual ? e->residual + n : NULL;
    if (!e->phantom)
        zs_optim_onebit_momentum(&e->cfg, e->grad_mul, e->exp_avg, e->gfull, e->param_dtype,
                                 p->padded);
    ZS_TRY(zs_comm_onebit_allreduce(e->comm, e->exp_avg, n, worker_error, server_error, -1));
    if (e->phantom)
        return 0;
    zs_engine_onebit_mask(e, e->exp_avg, n);
    zs_optim_onebit_apply(&e->cfg, e->info->lr, e->master, e->exp_avg, e->exp_avg_sq,
                          e->mixed ? e->params : NULL, e->param_dtype, p->padded);
    return 0;
}
