/* zerosim — layers over the backend: linear (llm.c's matmul_forward /
 * matmul_backward expressed as three sgemm calls and a bias kernel). */
#include "zerosim/layers.h"

/* out is (BT,OC), inp is (BT,C), weight is (OC,C), bias is (OC) or NULL.
 * out = inp @ weight^T + bias */
void zs_linear_forward(zs_backend_t be, float *out, const float *inp, const float *weight,
                       const float *bias, int bt, int c, int oc)
{
    /* out(BT,OC) = inp(BT,C) @ weight(OC,C)^T */
    zs_backend_sgemm(be, 0, 1, bt, oc, c, 1.0f, inp, c, weight, c, 0.0f, out, oc);
    if (bias != NULL)
        zs_backend_add_bias(be, out, bias, bt, oc);
}

/* dinp is (BT,C) or NULL, dweight is (OC,C), dbias is (OC) or NULL,
 * dout is (BT,OC), inp is (BT,C), weight is (OC,C). All gradients accumulate. */
void zs_linear_backward(zs_backend_t be, float *dinp, float *dweight, float *dbias,
                        const float *dout, const float *inp, const float *weight,
                        int bt, int c, int oc)
{
    /* dinp(BT,C) += dout(BT,OC) @ weight(OC,C) */
    if (dinp != NULL)
        zs_backend_sgemm(be, 0, 0, bt, c, oc, 1.0f, dout, oc, weight, c, 1.0f, dinp, c);
    /* dweight(OC,C) += dout(BT,OC)^T @ inp(BT,C) */
    zs_backend_sgemm(be, 1, 0, oc, c, bt, 1.0f, dout, oc, inp, c, 1.0f, dweight, c);
    if (dbias != NULL)
        zs_backend_bias_backward(be, dbias, dout, bt, oc);
}
