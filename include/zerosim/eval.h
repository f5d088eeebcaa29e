/* zerosim — a model's loss on held-out synthetic data, without a run.
 *
 * Held-out samples are drawn from the run's synthetic task (the same seed:
 * the GPT's Markov chain, the MLP's teacher) at sample indices from
 * ZS_EVAL_FIRST_SAMPLE on, which no training run reaches (a run of S steps
 * of global batch G uses samples 0 .. S G - 1), so the loss is on data the
 * model never saw. One process, the cpu backend, one BLAS thread.
 */
#ifndef ZEROSIM_EVAL_H
#define ZEROSIM_EVAL_H

#include <stdint.h>
#include "zerosim/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZS_EVAL_FIRST_SAMPLE ((uint64_t)1 << 40)

/* The mean loss of `samples` held-out samples (a multiple of mb, the
 * micro-batch) under params (zs_model_count_params floats, the layout's
 * order) in *loss, and the task's loss floor in *floor. Its buffers are
 * accounted in their own ledger: model parameters (category params),
 * activations, data (workspace); *bytes (may be NULL) gets its peak. */
int zs_eval_loss(const zs_model_config *mc, uint64_t seed, const float *params, int samples,
                 int mb, double *loss, double *floor, size_t *bytes);

#ifdef __cplusplus
}
#endif
#endif
