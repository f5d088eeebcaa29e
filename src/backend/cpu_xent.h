/* zerosim — the loss's row loops, written once for the CPU backend (cpu.c,
 * whose logarithm is the C library's logf) and the portable backend
 * (ref.c, whose logarithm is zs_ref_logf, ref_math.h): each body takes the
 * logarithm to call, and is otherwise the same code in both. Included by
 * those two files only, after cpu_isa.h and cpu_math.h.
 */
#ifndef ZEROSIM_CPU_XENT_H
#define ZEROSIM_CPU_XENT_H

/* A float logarithm: logf, or zs_ref_logf. */
typedef float (*zs_xent_log_fn)(float);

/* The softmax cross-entropy. losses (BT); probs, logits (BT,V); targets
 * (BT): the row's max, then p = exp(z - max) with the sum in index order,
 * p *= 1/sum, loss = -log p[target]; where p[target] underflowed to 0 (its
 * logit more than about 87 below the row's largest), the same loss as
 * log(sum) + max - z[target], which does not (not inf). */
ZS_CPU_BODY zs_xent_softmax_forward_rows(zs_xent_log_fn log_fn, float *losses, float *probs,
                                         const float *logits, const int32_t *targets, int bt,
                                         int v)
{
    for (int i = 0; i < bt; i++) {
        const float *z = logits + (size_t)i * v;
        float *p = probs + (size_t)i * v;
        float maxval = -INFINITY;
        for (int j = 0; j < v; j++)
            if (z[j] > maxval)
                maxval = z[j];
        float sum = 0.0f;
        for (int j = 0; j < v; j++) {
            p[j] = zs_cpu_expf(z[j] - maxval);
            sum += p[j];
        }
        float inv = 1.0f / sum;
        for (int j = 0; j < v; j++)
            p[j] *= inv;
        float pt = p[targets[i]];
        losses[i] = pt > 0.0f ? -log_fn(pt) : log_fn(sum) + maxval - z[targets[i]];
    }
}

/* The vocabulary-parallel loss's last pass (backend_impl.h's
 * xent_vocab_finish): p = exp(z - rowmax) / sum, loss = log(sum) + rowmax
 * - the target's logit (sums[bt + i]). */
ZS_CPU_BODY zs_xent_vocab_finish_rows(zs_xent_log_fn log_fn, float *losses, float *probs,
                                      const float *logits, const float *rowmax, const float *sums,
                                      int bt, int v)
{
    for (int i = 0; i < bt; i++) {
        const float *z = logits + (size_t)i * v;
        float *p = probs + (size_t)i * v;
        float inv = 1.0f / sums[i];
        for (int j = 0; j < v; j++)
            p[j] = zs_cpu_expf(z[j] - rowmax[i]) * inv;
        losses[i] = log_fn(sums[i]) + rowmax[i] - sums[bt + i];
    }
}

#endif
