/* zerosim — multi-layer perceptron classifier with configurable depth and
 * widths: H hidden layers (linear + ReLU or GELU), then a linear output layer
 * and softmax cross-entropy. Unit i is linear layer i.
 *
 * Activation memory saved for backward per micro-batch of B samples, in
 * floats (4 bytes each): per hidden layer i the pre-activation h_i and the
 * activation a_i (2*B*w_i), then probs (B*classes) and losses (B):
 *   total = 4 * (sum_i 2*B*w_i + B*classes + B) bytes.
 */
#include "model_impl.h"
#include "zerosim/error.h"
#include "zerosim/layers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int mlp_width(const zs_model_config *c, int i) /* output width of unit i */
{
    return i < c->n_hidden ? c->widths[i] : c->n_classes;
}

static int mlp_in(const zs_model_config *c, int i) /* input width of unit i */
{
    return i == 0 ? c->input_dim : c->widths[i - 1];
}

static int mlp_build_layout(const zs_model_config *c, zs_layout *lay)
{
    char name[48];
    for (int i = 0; i <= c->n_hidden; i++) {
        size_t in = (size_t)mlp_in(c, i), out = (size_t)mlp_width(c, i);
        snprintf(name, sizeof name, "fc%d.w", i);
        ZS_TRY(zs_layout_add(lay, name, out * in, i));
        snprintf(name, sizeof name, "fc%d.b", i);
        ZS_TRY(zs_layout_add(lay, name, out, i));
    }
    return 0;
}

/* Weights U(-sqrt(3/fan_in), sqrt(3/fan_in)) (variance 1/fan_in), biases 0.
 * Value j of an entry is the j-th number of the entry's stream. */
static void mlp_init_range(const zs_model *m, int i, size_t first, size_t n, float *out,
                           uint64_t seed)
{
    const zs_param_entry *e = &m->layout.entries[i];
    uint64_t st = zs_rng_mix(seed, (uint64_t)i + 1) + first * 0x9e3779b97f4a7c15ULL;
    double bound = sqrt(3.0 / (double)mlp_in(&m->cfg, e->layer));
    for (size_t j = 0; j < n; j++)
        out[j] = (i % 2) ? 0.0f : (float)(bound * (2.0 * zs_rng_uniform(&st) - 1.0));
}

static size_t mlp_activation_bytes(const zs_model_config *c, int b)
{
    size_t n = 0, B = (size_t)b;
    for (int i = 0; i < c->n_hidden; i++)
        n += 2 * B * (size_t)c->widths[i];
    return 4 * (n + B * (size_t)c->n_classes + B);
}

static int mlp_max_width(const zs_model_config *c)
{
    int w = c->input_dim > c->n_classes ? c->input_dim : c->n_classes;
    for (int i = 0; i < c->n_hidden; i++)
        if (c->widths[i] > w)
            w = c->widths[i];
    return w;
}

/* Scratch: logits/d-output, d-input and d-pre-activation, B*maxw each. */
static size_t mlp_scratch_bytes(const zs_model_config *c, int b)
{
    return 4 * 3 * (size_t)b * (size_t)mlp_max_width(c);
}

static void mlp_bind_acts(zs_acts *a)
{
    const zs_model_config *c = &a->m->cfg;
    size_t B = (size_t)a->b, H = (size_t)c->n_hidden;
    float **arr = calloc(2 * H + 2, sizeof(float *));
    a->view_arrays = arr;
    if (!arr)
        return;
    a->h = arr;
    a->a = arr + H + 1;
    float *p = a->saved;
    for (size_t i = 0; i < H; i++) {
        a->h[i] = p; p += B * (size_t)c->widths[i];
        a->a[i] = p; p += B * (size_t)c->widths[i];
    }
    a->probs = p; p += B * (size_t)c->n_classes;
    a->losses = p;
    a->n_losses = B;
    size_t mw = B * (size_t)mlp_max_width(c);
    a->s_d0 = a->scratch;
    a->s_d1 = a->scratch + mw;
    a->s_dh = a->scratch + 2 * mw;
}

static void mlp_forward_unit(zs_model *m, zs_backend_t be, int u, float *const *P, zs_acts *a,
                             const zs_batch *batch)
{
    const zs_model_config *c = &m->cfg;
    int B = batch->b, in = mlp_in(c, u), out = mlp_width(c, u);
    const float *x = u == 0 ? batch->x : a->a[u - 1];
    if (u < c->n_hidden) {
        zs_linear_forward(be, a->h[u], x, P[2 * u], P[2 * u + 1], B, in, out);
        if (c->act == ZS_ACT_RELU)
            zs_backend_relu_forward(be, a->a[u], a->h[u], (size_t)B * out);
        else
            zs_backend_gelu_forward(be, a->a[u], a->h[u], (size_t)B * out);
        return;
    }
    zs_linear_forward(be, a->s_d0, x, P[2 * u], P[2 * u + 1], B, in, out);
    zs_backend_softmax_xent_forward(be, a->losses, a->probs, a->s_d0, batch->targets, B, out);
}

/* s_d0 holds d(output of unit u) on entry and d(input) on exit. */
static void mlp_backward_unit(zs_model *m, zs_backend_t be, int u, float *const *P,
                              float *const *G, zs_acts *a, const zs_batch *batch, float dloss)
{
    const zs_model_config *c = &m->cfg;
    int B = batch->b, in = mlp_in(c, u), out = mlp_width(c, u);
    const float *x = u == 0 ? batch->x : a->a[u - 1];
    const float *dpre; /* gradient w.r.t. the linear layer's output */
    if (u == c->n_hidden) {
        zs_backend_softmax_xent_backward(be, a->s_d0, a->probs, batch->targets,
                                         dloss / (float)B, B, out);
        dpre = a->s_d0;
    } else {
        zs_backend_memset0(be, a->s_dh, (size_t)B * out * 4);
        if (c->act == ZS_ACT_RELU)
            zs_backend_relu_backward(be, a->s_dh, a->h[u], a->s_d0, (size_t)B * out);
        else
            zs_backend_gelu_backward(be, a->s_dh, a->h[u], a->s_d0, (size_t)B * out);
        dpre = a->s_dh;
    }
    float *dinp = NULL;
    if (u > 0) {
        dinp = a->s_d1;
        zs_backend_memset0(be, dinp, (size_t)B * in * 4);
    }
    zs_linear_backward(be, dinp, G[2 * u], G[2 * u + 1], dpre, x, P[2 * u], B, in, out);
    if (u > 0) { /* swap so that s_d0 holds d(input) */
        float *t = a->s_d0;
        a->s_d0 = a->s_d1;
        a->s_d1 = t;
    }
}

const zs_model_ops zs_mlp_ops = {
    .build_layout = mlp_build_layout,
    .init_range = mlp_init_range,
    .activation_bytes = mlp_activation_bytes,
    .scratch_bytes = mlp_scratch_bytes,
    .bind_acts = mlp_bind_acts,
    .forward_unit = mlp_forward_unit,
    .backward_unit = mlp_backward_unit,
};
