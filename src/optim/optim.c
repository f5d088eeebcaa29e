/* zerosim — optimizers, schedules and loss scaling. */
#include "zerosim/optim.h"

#include <math.h>
#include <stdint.h>

int zs_optim_state_bytes(zs_optim_kind k, zs_dtype precision)
{
    int b = zs_optim_has_variance(k) ? 8 : 4;
    return b + (precision == ZS_DTYPE_F32 ? 0 : 4);
}

float zs_lr_at(const zs_run_config *c, int step)
{
    double lr = c->lr;
    if (c->scheduler == ZS_SCHED_CONSTANT)
        return (float)lr;
    int warm = c->warmup_steps;
    int total = c->total_steps > 0 ? c->total_steps : c->steps;
    if (step < warm) {
        /* DeepSpeed's warm-up: linear, or "log" = log(step+1)/log(warmup) */
        double frac = c->warmup_linear ? (double)step / warm
                                       : (warm > 1 ? log((double)step + 1) / log((double)warm) : 1.0);
        return (float)(lr * (c->warmup_min_ratio + (1.0 - c->warmup_min_ratio) * frac));
    }
    if (c->scheduler == ZS_SCHED_WARMUP)
        return (float)lr;
    double span = total > warm ? (double)(total - warm) : 1.0;
    double prog = (double)(step - warm) / span;
    if (prog > 1.0)
        prog = 1.0;
    if (c->scheduler == ZS_SCHED_WARMUP_DECAY)
        return (float)(lr * (1.0 - prog));
    double cosf_ = 0.5 * (1.0 + cos(3.141592653589793 * prog));
    return (float)(lr * (c->cos_min_ratio + (1.0 - c->cos_min_ratio) * cosf_));
}

void zs_optim_step(zs_backend_t be, const zs_run_config *c, int t, float lr, float grad_mul,
                   float *master, float *m, float *v, const void *grad, zs_dtype gt,
                   void *param, zs_dtype pt, size_t off, size_t len)
{
    /* 1-bit Adam's exact steps are Adam's without bias correction
     * (DeepSpeed's OnebitAdam takes bias_correction and does not use it) */
    int onebit = c->optimizer == ZS_OPT_ONEBITADAM || c->optimizer == ZS_OPT_ZEROONEADAM;
    int adam = c->optimizer == ZS_OPT_ADAMW || onebit;
    int no_bc = c->adam_no_bias_correction || onebit;
    zs_optim_hparams h = {
        .lr = lr,
        .beta1 = c->beta1,
        .beta2 = c->beta2,
        .eps = c->eps,
        .weight_decay = c->adam_l2 && c->optimizer == ZS_OPT_ADAMW ? 0.0f : c->weight_decay,
        .momentum = c->momentum,
        .grad_mul = grad_mul,
        .bias_corr1 = no_bc ? 1.0f : (float)(1.0 - pow(c->beta1, t)),
        .bias_corr2 = no_bc ? 1.0f : (float)(1.0 - pow(c->beta2, t)),
        .l2 = c->adam_l2 && c->optimizer == ZS_OPT_ADAMW ? c->weight_decay : 0.0f,
    };
    size_t gs = zs_dtype_size(gt), ps = zs_dtype_size(pt);
    const void *g = (const char *)grad + off * gs;
    void *p = param ? (char *)param + off * ps : NULL;
    if (adam)
        zs_backend_adamw_step(be, master + off, m + off, v + off, g, gt, p, pt, len, &h);
    else
        zs_backend_sgd_step(be, master + off, m + off, g, gt, p, pt, len, &h);
}

/* ---- LAMB (zerosim/optim.h) ---- */

static float lamb_load(const void *x, zs_dtype t, size_t i)
{
    if (t == ZS_DTYPE_F32)
        return ((const float *)x)[i];
    uint16_t h = ((const uint16_t *)x)[i];
    return t == ZS_DTYPE_BF16 ? zs_bf16_to_f32(h) : zs_f16_to_f32(h);
}

static void lamb_store(void *x, zs_dtype t, size_t i, float f)
{
    if (t == ZS_DTYPE_F32)
        ((float *)x)[i] = f;
    else
        ((uint16_t *)x)[i] = t == ZS_DTYPE_BF16 ? zs_f32_to_bf16(f) : zs_f32_to_f16(f);
}

/* The update of one element before the trust ratio (FusedLamb's mode 1:
 * eps outside the square root). */
static inline float lamb_update(const zs_run_config *c, float w, float m, float v)
{
    return m / (sqrtf(v) + c->eps) + c->weight_decay * w;
}

void zs_optim_lamb_moments(const zs_run_config *c, float grad_mul, float *m, float *v,
                           const void *grad, zs_dtype gt, size_t n)
{
    float b1 = c->beta1, b2 = c->beta2;
    for (size_t i = 0; i < n; i++) {
        float g = lamb_load(grad, gt, i) * grad_mul;
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
    }
}

void zs_optim_lamb_sumsq(const zs_run_config *c, const float *w, const float *m, const float *v,
                         size_t n, double *w_sq, double *u_sq)
{
    double ws = 0.0, us = 0.0;
    for (size_t i = 0; i < n; i++) {
        double u = (double)lamb_update(c, w[i], m[i], v[i]);
        ws += (double)w[i] * (double)w[i];
        us += u * u;
    }
    *w_sq = ws;
    *u_sq = us;
}

float zs_optim_lamb_ratio(const zs_run_config *c, double w_sq, double u_sq)
{
    if (w_sq == 0.0 || u_sq == 0.0)
        return 1.0f;
    double r = sqrt(w_sq) / sqrt(u_sq);
    if (r > c->lamb_max_coeff)
        r = c->lamb_max_coeff;
    if (r < c->lamb_min_coeff)
        r = c->lamb_min_coeff;
    return (float)r;
}

void zs_optim_lamb_apply(const zs_run_config *c, int t, float lr, float ratio, float *w,
                         const float *m, const float *v, void *param, zs_dtype pt, size_t n)
{
    double step = lr;
    /* 1-bit LAMB's exact steps: no bias correction (OnebitLamb takes
     * bias_correction and does not use it) */
    if (!c->adam_no_bias_correction && c->optimizer != ZS_OPT_ONEBITLAMB)
        step = lr * sqrt(1.0 - pow(c->beta2, t)) / (1.0 - pow(c->beta1, t));
    float scale = (float)step * ratio;
    for (size_t i = 0; i < n; i++) {
        float p = w[i] - scale * lamb_update(c, w[i], m[i], v[i]);
        w[i] = p;
        if (param)
            lamb_store(param, pt, i, p);
    }
}

void zs_loss_scaler_init(zs_loss_scaler *s, const zs_run_config *c)
{
    s->dynamic = c->precision == ZS_DTYPE_F16 && c->static_loss_scale == 0.0f;
    if (c->precision != ZS_DTYPE_F16)
        s->scale = 1.0f;
    else if (!s->dynamic)
        s->scale = c->static_loss_scale;
    else
        s->scale = ldexpf(1.0f, c->initial_scale_power);
    s->window = c->loss_scale_window;
    s->hysteresis = c->hysteresis;
    s->cur_hysteresis = c->hysteresis;
    s->min_scale = c->min_loss_scale;
    s->good_steps = 0;
    s->overflows = 0;
}

int zs_loss_scaler_update(zs_loss_scaler *s, int overflow)
{
    if (overflow)
        s->overflows++;
    if (!s->dynamic)
        return overflow;
    if (overflow) {
        if (s->cur_hysteresis > 1) {
            s->cur_hysteresis--;
        } else {
            s->scale = s->scale / 2.0f < s->min_scale ? s->min_scale : s->scale / 2.0f;
        }
        s->good_steps = 0;
        return 1;
    }
    s->good_steps++;
    if (s->window > 0 && s->good_steps % s->window == 0) {
        s->scale *= 2.0f;
        s->cur_hysteresis = s->hysteresis;
    }
    return 0;
}

/* ---- 1-bit Adam after the freeze (zerosim/optim.h) ---- */

void zs_optim_onebit_momentum(const zs_run_config *c, float grad_mul, float *m, const void *grad,
                              zs_dtype gt, size_t n)
{
    float b1 = c->beta1;
    for (size_t i = 0; i < n; i++) {
        float g = lamb_load(grad, gt, i) * grad_mul;
        m[i] = b1 * m[i] + (1.0f - b1) * g;
    }
}

void zs_optim_onebit_apply(const zs_run_config *c, float lr, float *w, const float *m,
                           const float *v, void *param, zs_dtype pt, size_t n)
{
    float eps = c->eps, wd = c->weight_decay;
    for (size_t i = 0; i < n; i++) {
        float p = w[i];
        p -= lr * (m[i] / (sqrtf(v[i]) + eps) + wd * p);
        w[i] = p;
        if (param)
            lamb_store(param, pt, i, p);
    }
}

/* ---- 1-bit LAMB after the freeze (zerosim/optim.h) ---- */

double zs_optim_onebit_lamb_factor(const zs_run_config *c, zs_onebit_lamb_tensor *t,
                                   const float *w, const float *m, const float *m_last,
                                   const float *v, float *v_fresh, size_t n)
{
    float b1 = c->beta1, b2 = c->beta2, eps = c->eps, wd = c->weight_decay;
    double pre_sq = 0.0, upd_sq = 0.0, factor = 0.0;
    for (size_t i = 0; i < n; i++) {
        float g = (m[i] - b1 * m_last[i]) / (1.0f - b1);
        v_fresh[i] = b2 * v_fresh[i] + (1.0f - b2) * g * g;
        float denom = sqrtf(v[i]) + eps;
        float pre = m[i] / denom, u = pre + wd * w[i];
        pre_sq += (double)pre * pre;
        upd_sq += (double)u * u;
        double r = (double)denom / ((double)sqrtf(v_fresh[i]) + (double)eps);
        if (i == 0 || r > factor)
            factor = r;
    }
    if (wd > 0.0f) { /* a zero update leaves the factor as it is */
        double ratio = upd_sq > 0.0 ? sqrt(pre_sq) / sqrt(upd_sq) : 1.0;
        if (ratio > 1.0)
            ratio = 1.0;
        factor = factor * ratio + (1.0 - ratio);
    }
    if (factor > c->onebit_factor_max)
        factor = c->onebit_factor_max;
    if (factor < c->onebit_factor_min)
        factor = c->onebit_factor_min;
    double hi = t->last_factor * (1.0 + c->onebit_factor_threshold);
    double lo = t->last_factor * (1.0 - c->onebit_factor_threshold);
    if (factor > hi)
        factor = hi;
    if (factor < lo)
        factor = lo;
    t->last_factor = factor;
    return factor;
}

void zs_optim_onebit_lamb_apply(const zs_run_config *c, float lr, double coeff, float *w,
                                const float *m, const float *v, void *param, zs_dtype pt,
                                size_t n)
{
    float scale = (float)(lr * coeff), eps = c->eps, wd = c->weight_decay;
    for (size_t i = 0; i < n; i++) {
        float p = w[i] - scale * (m[i] / (sqrtf(v[i]) + eps) + wd * w[i]);
        w[i] = p;
        if (param)
            lamb_store(param, pt, i, p);
    }
}

/* ---- 0/1 Adam's element-wise parts (zerosim/optim.h) ---- */

void zs_optim_zeroone_load(float grad_mul, float *x, const void *grad, zs_dtype gt, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = lamb_load(grad, gt, i) * grad_mul;
}

void zs_optim_zeroone_delta(const zs_run_config *c, float *x, const float *w, const float *w_sync,
                            const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (w[i] - w_sync[i]) * (sqrtf(v[i]) + c->eps);
}

void zs_optim_zeroone_sync(const zs_run_config *c, double lrs, float *w, float *w_sync, float *m,
                           const float *x, const float *v, void *param, zs_dtype pt, size_t n)
{
    float inv = lrs > 0.0 ? (float)(1.0 / lrs) : 0.0f;
    for (size_t i = 0; i < n; i++) {
        float p = w_sync[i] + x[i] / (sqrtf(v[i]) + c->eps);
        w[i] = p;
        w_sync[i] = p;
        m[i] = -x[i] * inv;
        if (param)
            lamb_store(param, pt, i, p);
    }
}
