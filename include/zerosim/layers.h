/* zerosim — layers as plain functions over arrays (llm.c style).
 *
 * Outputs first, then inputs, then dimensions. Backward functions take
 * d-prefixed gradients and accumulate (+=) into them. Every function computes
 * through the backend, so the same layer runs on any device. Dimension
 * letters are explained in zerosim/backend.h.
 */
#ifndef ZEROSIM_LAYERS_H
#define ZEROSIM_LAYERS_H

#include "zerosim/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Linear: out(BT,OC) = inp(BT,C) @ weight(OC,C)^T + bias(OC); bias may be NULL. */
void zs_linear_forward(zs_backend_t be, float *out, const float *inp, const float *weight,
                       const float *bias, int bt, int c, int oc);
/* dinp(BT,C) += dout @ weight; dweight(OC,C) += dout^T @ inp; dbias(OC) += colsum(dout).
 * dinp and dbias may be NULL when not needed. */
void zs_linear_backward(zs_backend_t be, float *dinp, float *dweight, float *dbias,
                        const float *dout, const float *inp, const float *weight,
                        int bt, int c, int oc);

#ifdef __cplusplus
}
#endif
#endif
