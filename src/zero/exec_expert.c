/* zerosim — the engine: DeepSpeed's layout of the experts (see
 * engine_impl.h, zs_step_ep_split).
 *
 * The expert store holds this rank's experts, partitioned over the
 * expert-data-parallel group (edp): stage 3 gathers a unit's experts over
 * edp before its forward and backward; the experts' gradients of the step
 * are accumulated (in deterministic mode each source's apart, in fixed
 * point), reduce-scattered over edp once per step, and the optimizer
 * updates this rank's part of the store.
 */
#include "zero/engine_impl.h"
#include "zerosim/error.h"

#include <limits.h>
#include <stdlib.h>

/* DeepSpeed's layout: store elements [off, off + n) of the master (n at
 * most ZS_INIT_CHUNK) from host: the working copy where this rank holds
 * it (all of its experts, stage 3 its shard over edp), rounded through
 * tmp (the init staging buffer) in mixed precision, and the master's part
 * (which aliases the working copy in fp32). */
void zs_engine_put_xmaster(zs_engine *e, size_t off, size_t n, const float *buf, void *tmp)
{
    const zs_step_shape *s = e->shape;
    size_t xlo = e->stage == 0 ? 0 : (size_t)e->xrank * s->xshard;
    size_t xn = e->stage == 0 ? s->xpadded : s->xshard;
    /* the stored part: all of it, or stage 3's shard [xlo, xlo + xn) */
    size_t a = off > xlo ? off : xlo, b = off + n < xlo + xn ? off + n : xlo + xn;
    size_t plo = e->stage == 3 ? a : off, pn = e->stage == 3 ? (b > a ? b - a : 0) : n;
    size_t pat = e->stage == 3 ? plo - xlo : off; /* where in xparams */
    if (pn == 0)
        return; /* stage 3: none of this piece is in the shard */
    if (!e->mixed) {
        zs_backend_copy_h2d(e->be, (float *)e->xparams + pat, buf + (plo - off), pn * 4);
        if (e->xhparam && a < b) /* offload: the host's master apart */
            zs_backend_copy_h2d(e->be, e->xmaster + (a - xlo), buf + (a - off), (b - a) * 4);
        return;
    }
    zs_backend_copy_h2d(e->be, tmp, buf + (plo - off), pn * 4);
    zs_backend_convert_from_f32(e->be, (char *)e->xparams + pat * e->param_elsize, e->param_dtype,
                                tmp, pn);
    if (a < b)
        zs_backend_copy_h2d(e->be, e->xmaster + (a - xlo), buf + (a - off), (b - a) * 4);
}

/* DeepSpeed's layout at stage 3: unit u's experts, [lo, lo + n) of the
 * store, gathered over edp (every member's part of the range) into
 * xgather before its forward or backward; blocking. */
int zs_engine_gather_experts(zs_engine *e, int u)
{
    const zs_step_shape *s = e->shape;
    if (!e->xsplit || e->stage != 3 || s->xun[u] == 0)
        return 0;
    size_t lo = s->xulo[u], n = s->xun[u], XS = s->xshard;
    int M = s->xworld, me = e->xrank, rc = 0;
    int *cnt = calloc((size_t)M, sizeof(int)), *dsp = calloc((size_t)M, sizeof(int));
    if (!cnt || !dsp || me >= M) {
        free(cnt);
        free(dsp);
        ZS_FAIL("out of host memory gathering a unit's experts");
    }
    for (int q = 0; q < M; q++) {
        size_t a = (size_t)q * XS > lo ? (size_t)q * XS : lo;
        size_t b = (size_t)(q + 1) * XS < lo + n ? (size_t)(q + 1) * XS : lo + n;
        cnt[q] = b > a ? (int)(b - a) : 0;
        dsp[q] = b > a ? (int)(a - lo) : 0;
    }
    if (cnt[me]) { /* this rank's part in place */
        size_t at = lo + (size_t)dsp[me] - (size_t)me * XS; /* in its shard */
        zs_backend_copy_d2d(e->be, (char *)e->xgather + (size_t)dsp[me] * e->param_elsize,
                            (const char *)e->xparams + at * e->param_elsize,
                            (size_t)cnt[me] * e->param_elsize);
    }
    if (M > 1)
        rc = zs_comm_allgatherv_inplace(e->edp, e->xgather, cnt, dsp, e->comm_dtype, u);
    free(cnt);
    free(dsp);
    e->xgather_unit = u;
    e->xgather_lo = lo;
    return rc;
}

/* DeepSpeed's layout, deterministic mode: unit u's expert gradients, the
 * store's [xlo, xlo + n), from each source apart, as --ep 1 commits them on
 * the source (stored in working precision from zero, then turned into
 * fixed point), added into the step's fixed-point accumulator: integer sums
 * in any order give --ep 1's reduction's bytes. */
int zs_engine_commit_experts(zs_engine *e, size_t xlo, size_t n, const zs_acts *a)
{
    size_t chunk, piece = e->shape->xpiece;
    const float *src = zs_model_moe_source_grads(e->model, a, &chunk);
    if (chunk != n || (!src && !e->phantom))
        ZS_FAIL("internal: a MoE block's gradients by source are %zu floats, its experts %zu",
                chunk, n);
    int64_t *fix = e->xtmp;
    void *wp = (char *)e->xtmp + piece * 8;
    for (int q = 0; q < e->ep_size; q++)
        for (size_t off = 0; off < n; off += piece) {
            size_t k = n - off < piece ? n - off : piece;
            zs_backend_memset0(e->be, wp, k * e->param_elsize);
            zs_backend_accumulate_f32(e->be, wp, e->param_dtype,
                                      src ? src + (size_t)q * chunk + off : NULL, k);
            e->fix_overflows +=
                zs_backend_to_fixed(e->be, fix, wp, e->param_dtype, k, e->frac_bits, e->fix_limit);
            zs_backend_add_i64(e->be, (int64_t *)e->xgacc + xlo + off, fix, k);
        }
    return 0;
}

/* DeepSpeed's layout: 1 when the experts' reduced gradient has a buffer of
 * its own (the shape's ZS_BUF_XGRAD: deterministic mode, or an edp group
 * of more than one rank), 0 when the step's accumulator is it. */
static int zs_engine_xgrad_apart(const zs_engine *e)
{
    return e->shape->buf[ZS_BUF_XGRAD].bytes > 0;
}

/* DeepSpeed's layout: this rank's shard of the experts' reduced gradient. */
void *zs_engine_xgrad_shard(const zs_engine *e)
{
    if (!zs_engine_xgrad_apart(e))
        return e->xgacc;
    return (char *)e->xgrad +
           (e->stage == 0 ? (size_t)e->xrank * e->shape->xshard : 0) * e->param_elsize;
}

/* Counts and displacements of the expert store's parts over edp. */
static int zs_engine_xcounts(const zs_engine *e, int **cnt, int **dsp)
{
    int M = e->shape->xworld;
    *cnt = malloc((size_t)M * sizeof(int));
    *dsp = malloc((size_t)M * sizeof(int));
    if (!*cnt || !*dsp || e->shape->xpadded > (size_t)INT_MAX) {
        free(*cnt);
        free(*dsp);
        ZS_FAIL("the expert store (%zu elements) is too large for one MPI call",
                e->shape->xpadded);
    }
    for (int q = 0; q < M; q++) {
        (*cnt)[q] = (int)e->shape->xshard;
        (*dsp)[q] = (int)((size_t)q * e->shape->xshard);
    }
    return 0;
}

/* DeepSpeed's layout, after the last backward: the experts' gradients of
 * the step reduce-scattered over edp into this rank's shard, in
 * deterministic mode as fixed point turned back into working precision,
 * else (--ep-layout deepspeed beyond what is exact) as floats; stage 0
 * then gathers the shards (every rank updates all of its experts). */
int zs_engine_reduce_experts(zs_engine *e)
{
    const zs_step_shape *s = e->shape;
    if (!zs_engine_xgrad_apart(e))
        return 0; /* the accumulator is the gradient */
    int *cnt, *dsp, rc = 0;
    ZS_TRY(zs_engine_xcounts(e, &cnt, &dsp));
    if (!e->det) {
        rc = zs_comm_reduce_scatter(e->edp, e->xgacc, zs_engine_xgrad_shard(e), cnt, e->comm_dtype,
                                    0);
    } else {
        const int64_t *sum = (const int64_t *)e->xgacc; /* edp of one: all of it */
        if (s->xworld > 1) {
            rc = zs_comm_reduce_scatter(e->edp, e->xgacc, e->xrecv, cnt, ZS_CT_I64, 0);
            sum = e->xrecv;
        }
        if (!rc)
            zs_backend_from_fixed(e->be, zs_engine_xgrad_shard(e), e->param_dtype, sum, s->xshard,
                                  e->frac_bits);
    }
    if (!rc && e->stage == 0 && s->xworld > 1)
        rc = zs_comm_allgatherv_inplace(e->edp, e->xgrad, cnt, dsp, e->comm_dtype, 0);
    free(cnt);
    free(dsp);
    return rc;
}

/* DeepSpeed's layout with offload_optimizer cpu (stages 1-3), as
 * ZeRO-Offload does the dense shard: the experts' reduced gradient shard
 * down to the host, the host's step over its master, m and v into the
 * host's copy of the shard in working precision, and that copy up into
 * pshard, this rank's part of the store on the device. */
static int zs_engine_step_experts_host(zs_engine *e, void *pshard)
{
    size_t n = e->shape->xshard, bytes = n * e->param_elsize;
    double t0 = zs_clock();
    if (!e->phantom)
        zs_backend_copy_d2h(e->be, e->xhgrad, zs_engine_xgrad_shard(e), bytes);
    zs_comm_record_transfer(e->comm, ZS_OP_D2H, bytes, zs_clock() - t0);
    zs_optim_step(e->be, &e->cfg, e->opt_steps, e->info->lr, e->grad_mul, e->xmaster,
                  e->xexp_avg, e->xexp_avg_sq, e->xhgrad, e->param_dtype, e->xhparam,
                  e->param_dtype, 0, n);
    t0 = zs_clock();
    if (!e->phantom)
        zs_backend_copy_h2d(e->be, pshard, e->xhparam, bytes);
    zs_comm_record_transfer(e->comm, ZS_OP_H2D, bytes, zs_clock() - t0);
    return 0;
}

/* DeepSpeed's layout: the optimizer over the experts (stage 0: all of this
 * rank's; else its shard, then the updated shards gathered over edp). */
int zs_engine_step_experts(zs_engine *e)
{
    const zs_step_shape *s = e->shape;
    const zs_run_config *c = &e->cfg;
    if (e->stage == 0) {
        zs_optim_step(e->be, c, e->opt_steps, e->info->lr, e->grad_mul, e->xmaster, e->xexp_avg,
                      e->xexp_avg_sq, zs_engine_xgrad_apart(e) ? e->xgrad : e->xgacc,
                      e->param_dtype, e->mixed ? e->xparams : NULL, e->param_dtype, 0, s->xpadded);
        return 0;
    }
    /* stages 1, 2: this rank's part of all of its experts; 3: its shard */
    void *pshard = (char *)e->xparams +
                   (e->stage == 3 ? 0 : (size_t)e->xrank * s->xshard) * e->param_elsize;
    if (e->xhparam)
        ZS_TRY(zs_engine_step_experts_host(e, pshard));
    else
        zs_optim_step(e->be, c, e->opt_steps, e->info->lr, e->grad_mul, e->xmaster, e->xexp_avg,
                      e->xexp_avg_sq, zs_engine_xgrad_shard(e), e->param_dtype,
                      e->mixed ? pshard : NULL, e->param_dtype, 0, s->xshard);
    if (s->xworld <= 1 || e->stage == 3)
        return 0;
    int *cnt, *dsp;
    ZS_TRY(zs_engine_xcounts(e, &cnt, &dsp));
    int rc = zs_comm_allgatherv_inplace(e->edp, e->xparams, cnt, dsp, e->comm_dtype, 0);
    free(cnt);
    free(dsp);
    return rc;
}
