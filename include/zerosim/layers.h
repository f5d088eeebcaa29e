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

/* ---- mixture of experts: DeepSpeed's TopKGate, dispatch and combine ----------
 *
 * N tokens of width C, E experts, top-k routing (k = 1 or 2), capacity Cap
 * tokens per expert. The router's softmax, the choice of experts and the
 * slots are computed on the host (the gates are N x E floats); dispatch and
 * combine move rows on the device. Expert buffers are (E, Cap, C): row c of
 * expert e holds the token routed to slot c of e, zero when none.
 *
 * Routing, as DeepSpeed's top1gating/top2gating without noise and with
 * tokens in order (use_rts off, no gumbel sampling): choice 1 is the
 * expert of largest gate (ties: the lowest index), choice 2 the largest
 * among the others; slots are given in token order, first choices before
 * second choices (a token's second choice gets slot count1[e] + its rank
 * among second choices of e); a choice whose slot is >= Cap is dropped.
 * Combine weights: top-1 the gate itself; top-2 the two kept gates
 * divided by their sum (at least FLT_EPSILON). The load-balancing loss
 * l_aux = E * sum_e mean_t(gates[t][e]) * mean_t(first choice of t is e),
 * counted before dropping (uniform routing gives 1). */
/* The capacity (tokens per expert) for n tokens: DeepSpeed's
 * ceil(n / E * factor), factor doubled for top-2, at least min_capacity. */
int zs_moe_capacity(int n, int experts, int top_k, double factor, int min_capacity);

typedef struct {
    int n, e, k, cap, c;
    int renorm;       /* top-1: 1 weighs a kept choice 1 (Mixtral's top-k
                         renormalised), 0 by its gate (DeepSpeed's); top-2
                         renormalises the kept gates either way */
    int *expert;      /* [k][n] chosen expert */
    int *slot;        /* [k][n] slot in the expert's buffer, -1: dropped */
    float *weight;    /* [k][n] combine weight (0 when dropped) */
    float *ce;        /* [e] fraction of tokens whose first choice is e */
    int *routed;      /* [e] choices made for e (before dropping) */
    int *kept;        /* [e] slots filled */
    double l_aux;
    int dropped;      /* choices dropped */
    /* host workspaces */
    float *hgates;    /* (n, e) */
    float *hbuf;      /* (n, e) logits in, gradients out */
    float *dweight;   /* [k][n] gradient of the combine weights */
    float *row;       /* 2C floats */
} zs_moe_routing;

int zs_moe_routing_alloc(zs_moe_routing *r, int n, int e, int k, int cap, int c);
void zs_moe_routing_free(zs_moe_routing *r);
/* gates(N,E) = softmax over each row of logits(N,E); host arrays. */
void zs_moe_softmax(float *gates, const float *logits, int n, int e);
/* The routing of r->hgates (r->n x r->e gates). */
void zs_moe_route(zs_moe_routing *r);
/* xe(E,Cap,C) = the tokens of x(N,C) in their slots, zeros elsewhere. */
void zs_moe_dispatch_forward(zs_backend_t be, float *xe, const float *x, const zs_moe_routing *r);
/* dx(N,C) += each token's slots' rows of dxe(E,Cap,C), choice 1 then 2. */
void zs_moe_dispatch_backward(zs_backend_t be, float *dx, const float *dxe,
                              const zs_moe_routing *r);
/* y(N,C) = sum over a token's kept choices of weight x its slot's row of ye. */
void zs_moe_combine_forward(zs_backend_t be, float *y, const float *ye, const zs_moe_routing *r);
/* dye(E,Cap,C) = weight x dy at each kept slot, zeros elsewhere; r->dweight
 * = the gradient of each combine weight (dy . its slot's row of ye). */
void zs_moe_combine_backward(zs_backend_t be, float *dye, const float *dy, const float *ye,
                             zs_moe_routing *r);
/* dlogits(N,E) (host, =) from r->dweight through the combine weights and
 * the softmax, plus aux_grad x the gradient of l_aux (aux_grad: the
 * coefficient of l_aux in the objective). */
void zs_moe_gate_backward(float *dlogits, const zs_moe_routing *r, float aux_grad);

#ifdef __cplusplus
}
#endif
#endif
