/* Tests of the models: parameter layouts and counts, whole-model gradients
 * against finite differences, the synthetic data's loss floor, token files
 * of both widths, and the next-token distribution sampling reads. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zerosim/backend.h"
#include "zerosim/data.h"
#include "zerosim/error.h"
#include "zerosim/layers.h"
#include "zerosim/mem.h"
#include "zerosim/model.h"

static zs_model_config gpt_cfg(int L, int C, int NH, int T, int V)
{
    zs_model_config c;
    memset(&c, 0, sizeof c);
    c.kind = ZS_MODEL_GPT;
    c.n_layer = L;
    c.n_embd = C;
    c.n_head = NH;
    c.seq_len = T;
    c.vocab = V;
    return c;
}

static zs_model_config llama_cfg(int L, int C, int NH, int KV, int F, int T, int V)
{
    zs_model_config c = gpt_cfg(L, C, NH, T, V);
    c.kind = ZS_MODEL_LLAMA;
    c.n_kv_head = KV;
    c.ffn_hidden = F;
    c.norm_eps = 1e-5;
    c.rope_theta = 10000.0;
    return c;
}

static zs_model_config mlp_cfg(int in, int classes, int nh, const int *w, zs_activation act)
{
    zs_model_config c;
    memset(&c, 0, sizeof c);
    c.kind = ZS_MODEL_MLP;
    c.input_dim = in;
    c.n_classes = classes;
    c.n_hidden = nh;
    for (int i = 0; i < nh; i++)
        c.widths[i] = w[i];
    c.act = act;
    return c;
}

/* GPT-2 small (124M): 12 layers, 768 hidden, 12 heads, 1024 positions,
 * 50257 tokens has 124,439,808 parameters (the published count of the
 * Hugging Face gpt2 checkpoint, with the head tied to the embedding). */
START_TEST(test_gpt2_small_count)
{
    zs_model_config c = gpt_cfg(12, 768, 12, 1024, 50257);
    ck_assert_uint_eq(zs_model_count_params(&c), 124439808ULL);
    zs_model *m;
    ck_assert_int_eq(zs_model_create(&c, &m), 0);
    ck_assert_uint_eq(zs_model_layout(m)->num_params, 124439808ULL);
    ck_assert_int_eq(zs_model_layout(m)->n_layers, 14);
    zs_model_destroy(m);
}
END_TEST

/* Entries tile the flat array in order; each layer's entries are contiguous. */
static void check_layout(const zs_model *m)
{
    const zs_layout *lay = zs_model_layout(m);
    size_t off = 0;
    int prev = 0;
    size_t *sum = calloc((size_t)lay->n_layers, sizeof(size_t));
    for (int i = 0; i < lay->n_entries; i++) {
        const zs_param_entry *e = &lay->entries[i];
        ck_assert_uint_eq(e->offset, off);
        ck_assert_int_ge(e->layer, prev);
        ck_assert_int_le(e->layer, prev + 1);
        if (sum[e->layer] == 0)
            ck_assert_uint_eq(lay->layer_offset[e->layer], e->offset);
        sum[e->layer] += e->numel;
        prev = e->layer;
        off += e->numel;
    }
    ck_assert_uint_eq(off, lay->num_params);
    for (int l = 0; l < lay->n_layers; l++)
        ck_assert_uint_eq(sum[l], lay->layer_numel[l]);
    free(sum);
}

START_TEST(test_layouts)
{
    zs_model *m;
    zs_model_config g = gpt_cfg(3, 32, 4, 16, 50);
    ck_assert_int_eq(zs_model_create(&g, &m), 0);
    check_layout(m);
    ck_assert_str_eq(zs_model_layout(m)->entries[0].name, "wte");
    ck_assert_uint_eq(zs_model_layout(m)->num_params, zs_model_count_params(&g));
    int ids[ZS_MAX_USES_PUBLIC];
    int n = zs_model_unit_uses(m, 4, ids, ZS_MAX_USES_PUBLIC); /* the head uses wte */
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(ids[2], 0);
    zs_model_destroy(m);

    const int w[3] = {17, 5, 9};
    zs_model_config c = mlp_cfg(7, 3, 3, w, ZS_ACT_RELU);
    ck_assert_int_eq(zs_model_create(&c, &m), 0);
    check_layout(m);
    /* 7->17->5->9->3 with biases */
    ck_assert_uint_eq(zs_model_layout(m)->num_params,
                      (size_t)(7 * 17 + 17 + 17 * 5 + 5 + 5 * 9 + 9 + 9 * 3 + 3));
    ck_assert_uint_eq(zs_model_count_params(&c), zs_model_layout(m)->num_params);
    zs_model_destroy(m);
}
END_TEST

START_TEST(test_config_validation)
{
    zs_model_config g = gpt_cfg(2, 30, 4, 8, 16); /* 4 does not divide 30 */
    ck_assert_int_ne(zs_model_config_validate(&g), 0);
    ck_assert_msg(strstr(zs_error_msg(), "model.heads") != NULL, "%s", zs_error_msg());
    g = gpt_cfg(0, 32, 4, 8, 16);
    ck_assert_int_ne(zs_model_config_validate(&g), 0);
    ck_assert_msg(strstr(zs_error_msg(), "model.layers") != NULL, "%s", zs_error_msg());
    const int w[1] = {0};
    zs_model_config c = mlp_cfg(4, 3, 1, w, ZS_ACT_RELU);
    ck_assert_int_ne(zs_model_config_validate(&c), 0);
    ck_assert_msg(strstr(zs_error_msg(), "model.widths[0]") != NULL, "%s", zs_error_msg());
}
END_TEST

/* ---- whole-model gradient against finite differences ---------------------- */

typedef struct {
    zs_backend_t be;
    zs_mem_t mem;
    zs_model *m;
    zs_acts *a;
    zs_batch batch;
    float **P, **G;
    float *params, *grads;
} harness;

static void harness_init(harness *h, const zs_model_config *c, int B)
{
    char err[256];
    memset(h, 0, sizeof *h);
    h->be = zs_backend_init("cpu", err, sizeof err);
    ck_assert_ptr_nonnull(h->be);
    h->mem = zs_mem_create(h->be, 0, 0);
    ck_assert_int_eq(zs_model_create(c, &h->m), 0);
    ck_assert_int_eq(zs_model_acts_create(h->m, h->mem, B, &h->a), 0);
    const zs_layout *lay = zs_model_layout(h->m);
    h->params = calloc(lay->num_params, sizeof(float));
    h->grads = calloc(lay->num_params, sizeof(float));
    h->P = calloc((size_t)lay->n_entries, sizeof(float *));
    h->G = calloc((size_t)lay->n_entries, sizeof(float *));
    for (int i = 0; i < lay->n_entries; i++) {
        h->P[i] = h->params + lay->entries[i].offset;
        h->G[i] = h->grads + lay->entries[i].offset;
    }
    zs_model_init_params(h->m, h->params, 42);
    /* perturb so that biases and LayerNorm weights are not at special values */
    uint64_t s = 99;
    for (size_t i = 0; i < lay->num_params; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        h->params[i] += 0.05f * ((float)(s >> 40) / (float)(1 << 24) - 0.5f);
    }
    zs_data *d;
    ck_assert_int_eq(zs_data_create(c, 7, &d), 0);
    size_t n = zs_model_is_decoder(c) ? (size_t)B * c->seq_len : (size_t)B;
    h->batch.b = B;
    h->batch.tokens = calloc(n, sizeof(int32_t));
    h->batch.targets = calloc(n, sizeof(int32_t));
    h->batch.x = calloc((size_t)B * (c->kind == ZS_MODEL_MLP ? c->input_dim : 1), sizeof(float));
    zs_data_fill(d, 0, B, h->batch.tokens, h->batch.targets, h->batch.x);
    zs_data_destroy(d);
}

static void harness_free(harness *h)
{
    zs_model_acts_destroy(h->a);
    zs_model_destroy(h->m);
    zs_mem_destroy(h->mem);
    zs_backend_release(h->be);
    free(h->params); free(h->grads); free(h->P); free(h->G);
    free(h->batch.tokens); free(h->batch.targets); free(h->batch.x);
}

static double harness_loss(harness *h)
{
    int U = zs_model_layout(h->m)->n_layers;
    for (int u = 0; u < U; u++)
        zs_model_forward_unit(h->m, h->be, u, h->P, h->a, &h->batch);
    return zs_model_loss(h->a, h->be);
}

static void harness_grad(harness *h)
{
    int U = zs_model_layout(h->m)->n_layers;
    memset(h->grads, 0, zs_model_layout(h->m)->num_params * sizeof(float));
    harness_loss(h);
    for (int u = U - 1; u >= 0; u--)
        zs_model_backward_unit(h->m, h->be, u, h->P, h->G, h->a, &h->batch, 1.0f);
}

/* For every entry, the coordinates with the largest analytic gradient and a
 * few random ones: central difference with step 1e-2 in fp32. Tolerance:
 * |fd - an| <= 0.05 * |an| + 2e-4 (the fp32 loss carries ~1e-6 of rounding,
 * divided by 2h gives ~1e-4 absolute noise). */
static void check_model_gradients(const zs_model_config *c, int B)
{
    harness h;
    harness_init(&h, c, B);
    harness_grad(&h);
    const zs_layout *lay = zs_model_layout(h.m);
    int checked = 0;
    for (int i = 0; i < lay->n_entries; i++) {
        const zs_param_entry *e = &lay->entries[i];
        size_t best = 0;
        for (size_t j = 1; j < e->numel; j++)
            if (fabsf(h.grads[e->offset + j]) > fabsf(h.grads[e->offset + best]))
                best = j;
        size_t picks[3] = {best, (e->numel * 7) / 13, e->numel - 1};
        for (int k = 0; k < 3; k++) {
            size_t idx = e->offset + picks[k];
            float an = h.grads[idx], orig = h.params[idx];
            const float step = 1e-2f;
            h.params[idx] = orig + step;
            double lp = harness_loss(&h);
            h.params[idx] = orig - step;
            double lm = harness_loss(&h);
            h.params[idx] = orig;
            double fd = (lp - lm) / (2.0 * step);
            ck_assert_msg(fabs(fd - an) <= 0.05 * fabs(an) + 2e-4,
                          "%s[%zu]: analytic %.6g, finite difference %.6g", e->name, picks[k],
                          (double)an, fd);
            checked++;
        }
    }
    ck_assert_int_eq(checked, 3 * lay->n_entries);
    harness_free(&h);
}

/* ---- mixture of experts ------------------------------------------------- */

/* A hash of every MoE block's routing in the harness's last forward. */
static uint64_t moe_routes(harness *h)
{
    uint64_t x = 0;
    zs_moe_stats st;
    for (int l = 0; l < zs_model_get_config(h->m)->n_layer; l++)
        if (zs_model_moe_stats(h->a, l, &st) == 0)
            x = x * 1000003u ^ st.route_hash;
    return x;
}

/* As check_model_gradients, for a MoE GPT: the objective is the mean loss
 * plus the aux coefficient times the sum of l_aux. A coordinate whose
 * perturbation changes any routing decision (the objective is not
 * differentiable there) is replaced by its neighbour; at most a fifth of
 * the picks may need that, and every entry is checked at 3 coordinates. */
static void check_moe_gradients(const zs_model_config *c, int B, int *dropped)
{
    harness h;
    harness_init(&h, c, B);
    harness_grad(&h);
    uint64_t base = moe_routes(&h);
    *dropped = 0;
    zs_moe_stats st;
    for (int l = 0; l < c->n_layer; l++)
        if (zs_model_moe_stats(h.a, l, &st) == 0)
            *dropped += st.dropped;
    const zs_layout *lay = zs_model_layout(h.m);
    int checked = 0, moved = 0;
    for (int i = 0; i < lay->n_entries; i++) {
        const zs_param_entry *e = &lay->entries[i];
        size_t best = 0;
        for (size_t j = 1; j < e->numel; j++)
            if (fabsf(h.grads[e->offset + j]) > fabsf(h.grads[e->offset + best]))
                best = j;
        size_t picks[3] = {best, (e->numel * 7) / 13, e->numel - 1};
        for (int k = 0; k < 3; k++) {
            for (int tries = 0; tries < 8; tries++) {
                size_t idx = e->offset + (picks[k] + (size_t)tries * 5) % e->numel;
                float an = h.grads[idx], orig = h.params[idx];
                const float step = 1e-2f;
                h.params[idx] = orig + step;
                double lp = harness_loss(&h);
                uint64_t rp = moe_routes(&h);
                h.params[idx] = orig - step;
                double lm = harness_loss(&h);
                uint64_t rm = moe_routes(&h);
                h.params[idx] = orig;
                if (rp != base || rm != base) {
                    moved++;
                    continue;
                }
                double fd = (lp - lm) / (2.0 * step);
                ck_assert_msg(fabs(fd - an) <= 0.05 * fabs(an) + 2e-4,
                              "%s[%zu]: analytic %.6g, finite difference %.6g", e->name,
                              idx - e->offset, (double)an, fd);
                checked++;
                break;
            }
        }
    }
    ck_assert_int_eq(checked, 3 * lay->n_entries);
    ck_assert_msg(moved <= checked / 5, "%d of %d picks changed the routing", moved, checked);
    harness_free(&h);
}

static zs_model_config moe_cfg(int E, int every, int k, double cf, int minc)
{
    zs_model_config c = gpt_cfg(2, 16, 2, 6, 11);
    c.moe_experts = E;
    c.moe_every = every;
    c.moe_top_k = k;
    c.moe_capacity_factor = cf;
    c.moe_min_capacity = minc;
    c.moe_aux_coeff = 0.1;
    return c;
}

/* Top-1, 4 experts in every block; capacity ceil(12/4 x 1) = 3 drops some of
 * the 12 tokens of a micro-batch of 2; router, dispatch, experts, combine
 * and l_aux all against finite differences. */
START_TEST(test_moe_top1_gradients)
{
    zs_model_config c = moe_cfg(4, 1, 1, 1.0, 0);
    int dropped;
    check_moe_gradients(&c, 2, &dropped);
    ck_assert_int_gt(dropped, 0);
}
END_TEST

/* Top-2 in the second block only, capacity 2 x ceil(12/3 x 0.5) = 4 drops
 * some second choices: the renormalised weights' gradient. */
START_TEST(test_moe_top2_gradients)
{
    zs_model_config c = moe_cfg(3, 2, 2, 0.5, 1);
    int dropped;
    check_moe_gradients(&c, 2, &dropped);
    ck_assert_int_gt(dropped, 0);
    zs_model_config none = moe_cfg(3, 2, 2, 4.0, 1); /* no drops */
    check_moe_gradients(&none, 2, &dropped);
    ck_assert_int_eq(dropped, 0);
}
END_TEST

/* Counts: a MoE block swaps the MLP (8C^2 + 5C) for a router (E C) and E
 * MLPs; the layout agrees with zs_model_count_params. */
START_TEST(test_moe_count)
{
    zs_model_config d = gpt_cfg(4, 32, 4, 16, 50), c = d;
    c.moe_experts = 8;
    c.moe_every = 2;
    c.moe_top_k = 1;
    c.moe_capacity_factor = 1.0;
    size_t mlp = 8 * 32 * 32 + 5 * 32;
    ck_assert_uint_eq(zs_model_count_params(&c),
                      zs_model_count_params(&d) + 2 * (8 * 32 + 7 * mlp));
    ck_assert_uint_eq(zs_model_count_expert_params(&c), 2 * 8 * mlp);
    zs_model *m;
    ck_assert_int_eq(zs_model_create(&c, &m), 0);
    check_layout(m);
    ck_assert_uint_eq(zs_model_layout(m)->num_params, zs_model_count_params(&c));
    zs_model_destroy(m);
    /* capacity: DeepSpeed's ceil(T / E x F), x 2 for top-2, min_capacity */
    ck_assert_int_eq(zs_moe_capacity(100, 8, 1, 1.0, 4), 13);
    ck_assert_int_eq(zs_moe_capacity(100, 8, 2, 1.0, 4), 25);
    ck_assert_int_eq(zs_moe_capacity(10, 8, 1, 1.0, 4), 4);
    ck_assert_int_eq(zs_moe_capacity(96, 8, 1, 1.25, 0), 15);
}
END_TEST

START_TEST(test_gpt_gradients)
{
    zs_model_config c = gpt_cfg(2, 16, 2, 6, 11);
    check_model_gradients(&c, 2);
}
END_TEST

/* The Llama family (src/model/llama.c): every entry of GQA (4 query heads
 * on 2 key/value heads, untied head), MHA with the head tied, MQA with
 * Qwen2's q, k and v biases, and Llama 3.1's rope scaling with eps 1e-6,
 * against finite differences as the GPT's. */
START_TEST(test_llama_gradients)
{
    zs_model_config gqa = llama_cfg(2, 16, 4, 2, 24, 6, 11);
    check_model_gradients(&gqa, 2);
    zs_model_config mha = llama_cfg(2, 16, 4, 4, 20, 6, 11);
    mha.tie_embeddings = 1;
    check_model_gradients(&mha, 2);
    zs_model_config mqa = llama_cfg(1, 24, 4, 1, 16, 7, 13);
    mqa.qkv_bias = 1;
    check_model_gradients(&mqa, 3);
    zs_model_config l31 = llama_cfg(2, 16, 2, 1, 24, 8, 11);
    l31.norm_eps = 1e-6;
    l31.rope_theta = 500000.0;
    l31.rope_scaling_factor = 8.0;
    l31.rope_low_freq_factor = 1.0;
    l31.rope_high_freq_factor = 4.0;
    l31.rope_original_max_pos = 4;
    check_model_gradients(&l31, 2);
}
END_TEST

/* Mixtral-style blocks (src/model/llama_moe.c): E SwiGLU experts behind a
 * top-k router with the chosen weights renormalised. Top-2 in every block
 * of a GQA model without drops (Mixtral's dropless routing); top-2 in the
 * second block only with a capacity that drops second choices; top-1
 * renormalised (a kept choice weighs 1: the router learns through l_aux
 * alone) with drops. Every entry against finite differences, as the GPT's
 * MoE. */
static zs_model_config mixtral_cfg(int E, int every, int k, double cf, int minc)
{
    zs_model_config c = llama_cfg(2, 16, 4, 2, 12, 6, 11);
    c.moe_experts = E;
    c.moe_every = every;
    c.moe_top_k = k;
    c.moe_capacity_factor = cf;
    c.moe_min_capacity = minc;
    c.moe_aux_coeff = 0.1;
    c.moe_renormalize = 1;
    return c;
}

/* The weights of Mixtral's routing (renorm): softmax over all E, the top k
 * kept, divided by their sum; top-1 weighs 1 and sends the router nothing
 * through the weight (only l_aux's gradient, 0 here). DeepSpeed's top-1
 * (renorm 0) weighs the gate. */
START_TEST(test_mixtral_routing)
{
    const float logits[2][4] = {{0.1f, 1.2f, -0.3f, 0.7f}, {2.0f, -1.0f, 0.5f, 0.4f}};
    for (int k = 1; k <= 2; k++)
        for (int renorm = 0; renorm <= 1; renorm++) {
            zs_moe_routing r;
            ck_assert_int_eq(zs_moe_routing_alloc(&r, 2, 4, k, 2, 3), 0);
            r.renorm = renorm;
            zs_moe_softmax(r.hgates, &logits[0][0], 2, 4);
            zs_moe_route(&r);
            for (int t = 0; t < 2; t++) {
                const float *g = r.hgates + 4 * t;
                double sum = 0.0, top = 0.0;
                for (int j = 0; j < 4; j++)
                    sum += g[j];
                ck_assert(fabs(sum - 1.0) < 1e-6);
                ck_assert_int_eq(r.expert[t], t == 0 ? 1 : 0);
                if (k == 2)
                    ck_assert_int_eq(r.expert[2 + t], t == 0 ? 3 : 2);
                for (int i = 0; i < k; i++)
                    top += g[r.expert[i * 2 + t]];
                for (int i = 0; i < k; i++) {
                    double gi = g[r.expert[i * 2 + t]], want = k == 1 && !renorm ? gi : gi / top;
                    ck_assert_msg(fabs(r.weight[i * 2 + t] - want) < 1e-6,
                                  "k %d renorm %d: %g, not %g", k, renorm,
                                  (double)r.weight[i * 2 + t], want);
                }
                r.dweight[t] = 0.5f; /* as if combine_backward had set it */
                if (k == 2)
                    r.dweight[2 + t] = -0.25f;
            }
            float dl[8];
            zs_moe_gate_backward(dl, &r, 0.0f);
            double mag = 0.0;
            for (int j = 0; j < 8; j++)
                mag += fabs(dl[j]);
            if (k == 1 && renorm)
                ck_assert(mag == 0.0);
            else
                ck_assert(mag > 1e-3);
            zs_moe_routing_free(&r);
        }
}
END_TEST

START_TEST(test_mixtral_gradients)
{
    int dropped;
    zs_model_config none = mixtral_cfg(3, 1, 2, 1.5, 0); /* Cap = the 12 tokens */
    check_moe_gradients(&none, 2, &dropped);
    ck_assert_int_eq(dropped, 0);
    zs_model_config drop = mixtral_cfg(3, 2, 2, 0.5, 1);
    check_moe_gradients(&drop, 2, &dropped);
    ck_assert_int_gt(dropped, 0);
    zs_model_config top1 = mixtral_cfg(3, 2, 1, 1.0, 0);
    check_moe_gradients(&top1, 2, &dropped);
    ck_assert_int_gt(dropped, 0);
}
END_TEST

START_TEST(test_mlp_gradients)
{
    const int w[2] = {12, 9};
    zs_model_config c = mlp_cfg(6, 4, 2, w, ZS_ACT_GELU);
    check_model_gradients(&c, 5);
}
END_TEST

/* Activation bytes from the formula equal what the model allocates. */
START_TEST(test_activation_bytes)
{
    harness h;
    zs_model_config c = gpt_cfg(2, 16, 2, 6, 11);
    harness_init(&h, &c, 3);
    zs_mem_stats s;
    zs_mem_get_stats(h.mem, &s);
    /* hand count for B=3, T=6, C=16, NH=2, V=11, L=2 (see gpt.c) */
    size_t BT = 18, C = 16, L = 2, V = 11, att = 3 * 2 * 6 * 6;
    size_t expect = 4 * (BT * C * (2 + 16 * L) + L * (4 * BT + att) + BT * (V + 3));
    ck_assert_uint_eq(zs_model_activation_bytes(&c, 3), expect);
    ck_assert_uint_eq(s.current[ZS_MEM_ACTIVATIONS], expect);
    harness_free(&h);
}
END_TEST

/* ---- data ---------------------------------------------------------------- */

/* The loss floor is the chain's entropy rate: the plug-in estimate of the
 * conditional entropy H(x_{t+1} | x_t) from 400k sampled transitions must
 * agree with it within 1%. */
START_TEST(test_markov_floor)
{
    zs_model_config c = gpt_cfg(1, 8, 1, 100, 16);
    zs_data *d;
    ck_assert_int_eq(zs_data_create(&c, 5, &d), 0);
    double floor = zs_data_loss_floor(d);
    ck_assert(floor > 0.1 && floor < log(16.0));
    enum { NSEQ = 4000 };
    int32_t tok[100], tgt[100];
    double counts[16][16];
    memset(counts, 0, sizeof counts);
    for (int s = 0; s < NSEQ; s++) {
        zs_data_fill(d, (uint64_t)s, 1, tok, tgt, NULL);
        for (int t = 0; t < 100; t++) {
            ck_assert(tok[t] >= 0 && tok[t] < 16);
            if (t > 0)
                ck_assert_int_eq(tok[t], tgt[t - 1]);
            counts[tok[t]][tgt[t]] += 1;
        }
    }
    double total = NSEQ * 100.0, H = 0.0;
    for (int i = 0; i < 16; i++) {
        double row = 0.0;
        for (int j = 0; j < 16; j++)
            row += counts[i][j];
        for (int j = 0; j < 16; j++)
            if (counts[i][j] > 0)
                H -= counts[i][j] / total * log(counts[i][j] / row);
    }
    ck_assert_msg(fabs(H - floor) < 0.01 * floor, "empirical %.5f vs floor %.5f", H, floor);
    zs_data_destroy(d);
}
END_TEST

/* Sample i depends on (seed, i) only: any way of dealing samples agrees. */
START_TEST(test_data_dealing)
{
    zs_model_config c = gpt_cfg(1, 8, 1, 10, 20);
    zs_data *d;
    ck_assert_int_eq(zs_data_create(&c, 9, &d), 0);
    int32_t a[80], at[80], b[30], bt[30];
    zs_data_fill(d, 0, 8, a, at, NULL);
    zs_data_fill(d, 5, 3, b, bt, NULL);
    ck_assert_mem_eq(a + 50, b, sizeof b);
    ck_assert_mem_eq(at + 50, bt, sizeof bt);
    zs_data_destroy(d);
}
END_TEST

/* A token file of n tokens i * 37 % mod, width 2 or 4, header word 3 =
 * byte_level, written here with stdio (not by zerosim); the path in path. */
static void write_tokens(char *path, int width, int n, uint32_t mod, int byte_level,
                         uint32_t bad_at, uint32_t bad)
{
    strcpy(path, "/tmp/check_model_tokXXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "wb");
    int32_t hdr[256] = {width == 4 ? 20240801 : 20240520, width == 4 ? 7 : 1, n, byte_level};
    fwrite(hdr, sizeof hdr, 1, f);
    for (int i = 0; i < n; i++) {
        uint32_t t = (uint32_t)i == bad_at ? bad : (uint32_t)i * 37u % mod;
        uint16_t t16 = (uint16_t)t;
        fwrite(width == 4 ? (void *)&t : (void *)&t16, (size_t)width, 1, f);
    }
    fclose(f);
}

/* The 32-bit file (llm.c's Llama 3 format) gives the samples of the 16-bit
 * file of the same tokens; the byte-level word is read; a token outside
 * the vocabulary (of the 32-bit width's range) is refused with its offset. */
START_TEST(test_token_files)
{
    zs_model_config c = gpt_cfg(1, 8, 1, 10, 300);
    char p16[64], p32[64], pbad[64], pbytes[64];
    write_tokens(p16, 2, 500, 300, 0, ~0u, 0);
    write_tokens(p32, 4, 500, 300, 0, ~0u, 0);
    write_tokens(pbad, 4, 500, 300, 0, 123, 70000);
    write_tokens(pbytes, 2, 500, 300, 1, ~0u, 0);
    zs_data *a, *b, *d;
    ck_assert_int_eq(zs_data_create_tokens(&c, 3, p16, &a), 0);
    ck_assert_int_eq(zs_data_create_tokens(&c, 3, p32, &b), 0);
    int32_t ta[40], ga[40], tb[40], gb[40];
    ck_assert_int_eq(zs_data_fill(a, 11, 4, ta, ga, NULL), 0);
    ck_assert_int_eq(zs_data_fill(b, 11, 4, tb, gb, NULL), 0);
    ck_assert_mem_eq(ta, tb, sizeof ta);
    ck_assert_mem_eq(ga, gb, sizeof ga);
    for (int s = 0; s < 4; s++) /* a window of the file: t * 37 % 300 in order */
        for (int t = 0; t + 1 < 10; t++)
            ck_assert_int_eq(ta[s * 10 + t + 1], ga[s * 10 + t]);
    ck_assert_int_eq(zs_data_tokens_are_bytes(a), 0);
    zs_data_destroy(a);
    zs_data_destroy(b);
    ck_assert_int_ne(zs_data_create_tokens(&c, 3, pbad, &d), 0);
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "token 70000 at offset 1516"));
    /* byte-level: tokens up to 299 with vocab 300 exceed the bytes' 256 */
    ck_assert_int_ne(zs_data_create_tokens(&c, 3, pbytes, &d), 0);
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "byte-level"));
    remove(pbytes);
    write_tokens(pbytes, 2, 500, 256, 1, ~0u, 0);
    ck_assert_int_eq(zs_data_create_tokens(&c, 3, pbytes, &d), 0);
    ck_assert_int_eq(zs_data_tokens_are_bytes(d), 1);
    zs_data_destroy(d);
    remove(p16);
    remove(p32);
    remove(pbad);
    remove(pbytes);
}
END_TEST

/* zs_model_next_probs after a GPT's forward: each row a distribution. */
START_TEST(test_next_probs)
{
    char err[256];
    zs_backend_t be = zs_backend_init("cpu", err, sizeof err);
    ck_assert_ptr_nonnull(be);
    zs_model_config c = gpt_cfg(1, 8, 2, 6, 11);
    zs_model *m;
    ck_assert_int_eq(zs_model_create(&c, &m), 0);
    zs_mem_t mem = zs_mem_create(be, 0, 0);
    size_t n = zs_model_count_params(&c);
    float *params = malloc(n * sizeof(float));
    zs_model_init_params(m, params, 4);
    const zs_layout *lay = zs_model_layout(m);
    float **P = calloc((size_t)lay->n_entries, sizeof *P);
    for (int i = 0; i < lay->n_entries; i++)
        P[i] = params + lay->entries[i].offset;
    zs_acts *acts;
    ck_assert_int_eq(zs_model_acts_create(m, mem, 1, &acts), 0);
    int32_t tok[6] = {1, 2, 3, 4, 5, 6}, tgt[6] = {2, 3, 4, 5, 6, 7};
    zs_batch batch = {.b = 1, .tokens = tok, .targets = tgt, .x = NULL};
    for (int u = 0; u < lay->n_layers; u++)
        zs_model_forward_unit(m, be, u, P, acts, &batch);
    float p[11];
    for (size_t r = 0; r < 6; r++) {
        ck_assert_int_eq(zs_model_next_probs(acts, be, r, p), 0);
        double sum = 0.0;
        for (int k = 0; k < 11; k++) {
            ck_assert(p[k] > 0.0f && p[k] < 1.0f);
            sum += p[k];
        }
        ck_assert(fabs(sum - 1.0) < 1e-5);
    }
    ck_assert_int_ne(zs_model_next_probs(acts, be, 6, p), 0);
    zs_model_acts_destroy(acts);
    free(P);
    free(params);
    zs_mem_destroy(mem);
    zs_model_destroy(m);
    zs_backend_release(be);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("model");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_gpt2_small_count);
    tcase_add_test(tc, test_layouts);
    tcase_add_test(tc, test_config_validation);
    tcase_add_test(tc, test_gpt_gradients);
    tcase_add_test(tc, test_mlp_gradients);
    tcase_add_test(tc, test_llama_gradients);
    tcase_add_test(tc, test_moe_top1_gradients);
    tcase_add_test(tc, test_moe_top2_gradients);
    tcase_add_test(tc, test_mixtral_routing);
    tcase_add_test(tc, test_mixtral_gradients);
    tcase_add_test(tc, test_moe_count);
    tcase_add_test(tc, test_activation_bytes);
    tcase_add_test(tc, test_markov_floor);
    tcase_add_test(tc, test_data_dealing);
    tcase_add_test(tc, test_token_files);
    tcase_add_test(tc, test_next_probs);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
