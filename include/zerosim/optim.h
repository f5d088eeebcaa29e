/* zerosim — optimizers over a range, learning-rate schedules, loss scaling.
 *
 * The optimizer updates elements [off, off+len) of the flat arrays, so ZeRO
 * stages 1-3 run the same loop on a shard that stage 0 runs on everything.
 */
#ifndef ZEROSIM_OPTIM_H
#define ZEROSIM_OPTIM_H

#include <stddef.h>
#include "zerosim/backend.h"
#include "zerosim/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of optimizer state per parameter (the ZeRO paper's K): AdamW 8
 * (m, v) or SGD 4 (momentum), plus 4 for the fp32 master copy when the
 * parameters are stored in bf16/fp16. */
int zs_optim_state_bytes(zs_optim_kind k, zs_dtype precision);

/* Learning rate for 0-based step `step` under the configured schedule. */
float zs_lr_at(const zs_run_config *c, int step);

/* One optimizer step over [off, off+len). master/m/v are fp32 arrays indexed
 * from the start of the flat layout; grad and param typed likewise; param may
 * be NULL (fp32 runs update the parameters in place as the master). t is the
 * 1-based count of steps taken (skipped steps do not count). */
void zs_optim_step(zs_backend_t be, const zs_run_config *c, int t, float lr, float grad_mul,
                   float *master, float *m, float *v, const void *grad, zs_dtype gt,
                   void *param, zs_dtype pt, size_t off, size_t len);

/* LAMB as DeepSpeed's FusedLamb computes it (deepspeed/ops/csrc/lamb), for
 * one parameter tensor split into ranges (a ZeRO shard may hold part of
 * it), in three passes over each range:
 *   moments:  g = grad * grad_mul; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2
 *   sumsq:    the range's sums of w^2 and u^2 in double, in order from 0,
 *             u = m / (sqrt(v) + eps) + weight_decay * w (the update
 *             before bias correction, as FusedLamb's)
 *   apply:    w -= step * ratio * u, step = lr sqrt(1 - b2^t) / (1 - b1^t)
 *             (lr without bias correction); param = round(w) when given
 * ratio = zs_optim_lamb_ratio of the tensor's whole sums: ||w|| / ||u||
 * clamped to [min_coeff, max_coeff], or 1 when either norm is 0. */
void zs_optim_lamb_moments(const zs_run_config *c, float grad_mul, float *m, float *v,
                           const void *grad, zs_dtype gt, size_t n);
void zs_optim_lamb_sumsq(const zs_run_config *c, const float *w, const float *m, const float *v,
                         size_t n, double *w_sq, double *u_sq);
float zs_optim_lamb_ratio(const zs_run_config *c, double w_sq, double u_sq);
void zs_optim_lamb_apply(const zs_run_config *c, int t, float lr, float ratio, float *w,
                         const float *m, const float *v, void *param, zs_dtype pt, size_t n);

/* 1-bit Adam after its freeze (DeepSpeed's OnebitAdam, Tang et al., arXiv
 * 2102.02888), the two halves around the momentum's compressed all-reduce:
 *   momentum: m = b1 m + (1 - b1) grad * grad_mul (this rank's gradient)
 *   apply:    w -= lr (m / (sqrt(v) + eps) + weight_decay w), v frozen,
 *             no bias correction (as its exact steps, zs_optim_step);
 *             param = round(w) when given. */
void zs_optim_onebit_momentum(const zs_run_config *c, float grad_mul, float *m, const void *grad,
                              zs_dtype gt, size_t n);
void zs_optim_onebit_apply(const zs_run_config *c, float lr, float *w, const float *m,
                           const float *v, void *param, zs_dtype pt, size_t n);

/* 1-bit LAMB (DeepSpeed's OnebitLamb, Li et al., arXiv 2104.06069). Its
 * exact steps are LAMB's without bias correction (zs_optim_lamb_*); each
 * tensor's trust ratio r, where it is not 1, enters a running average
 * coeff = coeff_beta coeff + (1 - coeff_beta) r, and at the last exact step
 * the fresh variance starts as a copy of v. After the freeze, per tensor,
 * around the compressed all-reduce of the momentum (scaled by the tensor's
 * scaling coefficient while it is exchanged):
 *   g' = (m - b1 m_last) / (1 - b1)        the gradient the momentum implies
 *   v_fresh = b2 v_fresh + (1 - b2) g'^2   (v itself stays frozen)
 *   u = m / (sqrt(v) + eps) + weight_decay w
 *   factor = max over the tensor of (sqrt(v) + eps) / (sqrt(v_fresh) + eps),
 *            moved toward 1 by ||m / (sqrt(v) + eps)|| / ||u|| when there is
 *            weight decay, clamped to [factor_min, factor_max] and to within
 *            factor_threshold of the last step's factor
 *   w -= lr coeff factor u
 * zs_optim_onebit_lamb_factor computes the factor (updating v_fresh and the
 * tensor's last factor); zs_optim_onebit_lamb_apply the update. */
typedef struct {
    double coeff;       /* the trust ratio's running average (lamb_coeff_freeze) */
    double last_factor; /* the factor of the last compressed step (1 before) */
    double scaling;     /* the momentum's scaling coefficient while exchanged */
} zs_onebit_lamb_tensor;
/* The bytes 1-bit LAMB keeps beyond 1-bit Adam's errors, for `padded`
 * elements and `tensors` tensors: the fresh variance and the last
 * momentum (padded floats each) and one zs_onebit_lamb_tensor per tensor. */
static inline size_t zs_onebit_lamb_extra(size_t padded, int tensors)
{
    return 2 * padded * sizeof(float) + (size_t)tensors * sizeof(zs_onebit_lamb_tensor);
}
double zs_optim_onebit_lamb_factor(const zs_run_config *c, zs_onebit_lamb_tensor *t,
                                   const float *w, const float *m, const float *m_last,
                                   const float *v, float *v_fresh, size_t n);
void zs_optim_onebit_lamb_apply(const zs_run_config *c, float lr, double coeff, float *w,
                                const float *m, const float *v, void *param, zs_dtype pt,
                                size_t n);
/* 0/1 Adam (DeepSpeed's ZeroOneAdam; src/optim/zeroone.c): what step t
 * does. EXACT: the gradient all-reduced, m and v updated (Adam without
 * bias correction, zs_optim_step); GRAD_ONEBIT: the gradient exchanged
 * 1-bit, m updated, v not; LOCAL: this rank's gradient, no communication;
 * SYNC: a local step, then the update accumulated since the last sync
 * exchanged 1-bit. */
typedef enum { ZS_ZO_EXACT, ZS_ZO_GRAD_ONEBIT, ZS_ZO_LOCAL, ZS_ZO_SYNC } zs_zeroone_kind;
typedef struct {
    long t;             /* DeepSpeed's state['step'] of the last step (1: none) */
    int var_interval;   /* the variance is updated when t is a multiple */
    int var_counter;    /* variance updates at this interval */
    int local_interval; /* after the freeze: a sync when t is a multiple */
    int local_counter;  /* steps at this local interval */
} zs_zeroone_sched;
void zs_zeroone_sched_init(zs_zeroone_sched *s);
/* The next step's kind, advancing s; *freezes = 1 when the variance
 * freezes after it (the errors start again from 0, the sync point is set). */
zs_zeroone_kind zs_zeroone_sched_next(const zs_run_config *c, zs_zeroone_sched *s, int *freezes);
/* The schedule after `applied` steps. */
void zs_zeroone_sched_at(const zs_run_config *c, long applied, zs_zeroone_sched *s);
const char *zs_zeroone_kind_name(zs_zeroone_kind k);
/* 0/1 Adam's element-wise parts (exec_zeroone.c calls them):
 *   load:  x = grad * grad_mul as fp32, the 1-bit exchange's input;
 *   delta: x = (w - w_sync) (sqrt(v) + eps), the update since the sync;
 *   sync:  w = w_sync + x / (sqrt(v) + eps); w_sync = w; m = -x / lrs;
 *          param = round(w) when given. */
void zs_optim_zeroone_load(float grad_mul, float *x, const void *grad, zs_dtype gt, size_t n);
void zs_optim_zeroone_delta(const zs_run_config *c, float *x, const float *w, const float *w_sync,
                            const float *v, size_t n);
void zs_optim_zeroone_sync(const zs_run_config *c, double lrs, float *w, float *w_sync, float *m,
                           const float *x, const float *v, void *param, zs_dtype pt, size_t n);

/* fp16 dynamic loss scaling in DeepSpeed's manner: start at
 * 2^initial_scale_power; on overflow skip the step and, once the hysteresis
 * budget is spent, halve the scale (not below min_loss_scale); after
 * loss_scale_window steps without overflow, double it. A static scale
 * (loss_scale > 0) never changes. */
typedef struct {
    float scale;
    int dynamic;
    int window, hysteresis, cur_hysteresis;
    float min_scale;
    int good_steps;
    int overflows;    /* steps skipped so far */
} zs_loss_scaler;

void zs_loss_scaler_init(zs_loss_scaler *s, const zs_run_config *c);
/* Record whether this step overflowed; returns 1 when the step must be skipped. */
int zs_loss_scaler_update(zs_loss_scaler *s, int overflow);

#ifdef __cplusplus
}
#endif
#endif
