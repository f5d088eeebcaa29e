/* zerosim — the engine: 0/1 Adam (see engine_impl.h; Lu et al., arXiv
 * 2202.06009, algorithm 1, as DeepSpeed's ZeroOneAdam in
 * deepspeed/runtime/fp16/onebit/zoadam.py runs it; the schedule is
 * src/optim/zeroone.c's).
 *
 * EXACT steps run the ordinary stage-0 program: the gradient reduce-
 * scattered and all-gathered, Adam without bias correction (zs_optim_step).
 * The others run prog_onebit (this rank's own gradient, LOCAL_NORM, then
 * OPTIMIZER_ONEBIT, which lands here):
 *
 *   GRAD_ONEBIT  x = the gradient (unscaled, clipped), exchanged by
 *                zs_comm_onebit_allreduce with the worker and server
 *                errors; x = 0 where v is 0 (as 1-bit Adam's mask) and in
 *                the padding; m = b1 m + (1 - b1) x; w -= lr (m / (sqrt(v) +
 *                eps) + weight_decay w), v unchanged
 *   LOCAL        m = b1 m + (1 - b1) g from this rank's gradient; the same
 *                update of w; lrs += lr. No communication: the loss is
 *                this rank's own, and only with fp16 are the overflow
 *                flags agreed (one int), so that all ranks skip together
 *   SYNC         a LOCAL step, then x = (w - w_sync) (sqrt(v) + eps), the
 *                update since the last sync (DeepSpeed's
 *                momentum_accumulator times the denominator), exchanged
 *                1-bit; x = 0 where v is 0; w = w_sync + x / (sqrt(v) +
 *                eps); w_sync = w; m = -x / lrs; lrs = 0
 *
 * DeepSpeed recovers the sync point as w - momentum_accumulator, which
 * rounds differently on each rank; zerosim keeps w_sync, so after a sync
 * every rank holds the same bytes. The residual buffer holds the worker
 * error (n), the server error (n / N) and a third part of n floats: the
 * 1-bit gradient before the freeze, w_sync after it. SYNC uses m as the
 * exchange's array (m is replaced after it).
 */
#include "zero/engine_impl.h"
#include "zerosim/error.h"

#include <string.h>

zs_zeroone_kind zs_engine_zeroone_begin(zs_engine *e)
{
    if (e->zo_sched.t != (long)e->opt_steps + 1) /* resumed */
        zs_zeroone_sched_at(&e->cfg, e->opt_steps, &e->zo_sched);
    e->zo_next = e->zo_sched;
    e->zo_kind = zs_zeroone_sched_next(&e->cfg, &e->zo_next, &e->zo_freezes);
    e->zo_local = e->zo_kind == ZS_ZO_LOCAL;
    return e->zo_kind;
}

int zs_engine_exec_optimizer_zeroone(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    const zs_run_config *c = &e->cfg;
    size_t n = o->elems, P = e->part.padded;
    float *worker_error = e->residual, *server_error = e->residual ? e->residual + n : NULL;
    float *aux = e->residual ? server_error + n / (size_t)e->part.world : NULL;
    float lr = e->info->lr;
    void *param = e->mixed ? e->params : NULL;
    if (e->zo_kind == ZS_ZO_GRAD_ONEBIT) {
        if (!e->phantom)
            zs_optim_zeroone_load(e->grad_mul, aux, e->gfull, e->param_dtype, P);
        ZS_TRY(zs_comm_onebit_allreduce(e->comm, aux, n, worker_error, server_error, -1));
        if (e->phantom)
            return 0;
        zs_engine_onebit_mask(e, aux, n);
        zs_optim_onebit_momentum(c, 1.0f, e->exp_avg, aux, ZS_DTYPE_F32, P);
        zs_optim_onebit_apply(c, lr, e->master, e->exp_avg, e->exp_avg_sq, param, e->param_dtype,
                              P);
        return 0;
    }
    if (e->zo_kind != ZS_ZO_LOCAL && e->zo_kind != ZS_ZO_SYNC)
        ZS_FAIL("internal: 0/1 Adam's exact step ran the 1-bit program");
    e->zo_lrs += lr; /* DeepSpeed's state['lrs'] */
    if (!e->phantom) {
        zs_optim_onebit_momentum(c, e->grad_mul, e->exp_avg, e->gfull, e->param_dtype, P);
        zs_optim_onebit_apply(c, lr, e->master, e->exp_avg, e->exp_avg_sq, param, e->param_dtype,
                              P);
    }
    if (e->zo_kind == ZS_ZO_LOCAL)
        return 0;
    float *x = e->exp_avg;
    if (!e->phantom) {
        zs_optim_zeroone_delta(c, x, e->master, aux, e->exp_avg_sq, P);
        memset(x + P, 0, (n - P) * sizeof *x);
    }
    ZS_TRY(zs_comm_onebit_allreduce(e->comm, x, n, worker_error, server_error, -1));
    if (!e->phantom) {
        zs_engine_onebit_mask(e, x, n);
        zs_optim_zeroone_sync(c, e->zo_lrs, e->master, aux, e->exp_avg, x, e->exp_avg_sq, param,
                              e->param_dtype, P);
    }
    e->zo_lrs = 0.0;
    return 0;
}

void zs_engine_zeroone_end(zs_engine *e)
{
    e->zo_sched = e->zo_next;
    if (!e->zo_freezes || e->phantom)
        return;
    /* DeepSpeed's reinitial_error_buffer: the errors were the gradient's,
     * from now on they are the accumulated update's */
    size_t n = e->shape->onebit_elems, N = (size_t)e->part.world;
    memset(e->residual, 0, (n + n / N) * sizeof(float));
    float *aux = e->residual + n + n / N;
    memcpy(aux, e->master, e->part.padded * sizeof(float));
    memset(aux + e->part.padded, 0, (n - e->part.padded) * sizeof(float));
}

int zs_engine_zeroone_between_syncs(const zs_engine *e)
{
    return e->zo_on && e->zo_kind == ZS_ZO_LOCAL;
}
