/* zerosim — mixture of experts: DeepSpeed's TopKGate (softmax router, top-1
 * or top-2 choice, capacity, load-balancing loss), dispatch into the
 * experts' buffers and combine out of them (see zerosim/layers.h); and
 * the expert layout: which GPT blocks are MoE blocks and which entries are
 * the experts' (see zerosim/model.h and model_impl.h); and the steps of a
 * MoE block that the GPT and the Llama family share: the router, the
 * expert-parallel all-to-all, the statistics, the aux term and the
 * experts' gradients sent home (model_impl.h). */
#include "model_impl.h"
#include "zerosim/comm.h"
#include "zerosim/error.h"
#include "zerosim/layers.h"
#include "zerosim/model.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int zs_moe_capacity(int n, int experts, int top_k, double factor, int min_capacity)
{
    if (experts < 1)
        return 0;
    double f = factor * (top_k == 2 ? 2.0 : 1.0);
    double c = ceil((double)n / (double)experts * f);
    int cap = c > 1e9 ? 1000000000 : (int)c;
    return cap < min_capacity ? min_capacity : cap;
}

int zs_moe_routing_alloc(zs_moe_routing *r, int n, int e, int k, int cap, int c)
{
    memset(r, 0, sizeof *r);
    r->n = n;
    r->e = e;
    r->k = k;
    r->cap = cap;
    r->c = c;
    size_t kn = (size_t)k * (size_t)n, ne = (size_t)n * (size_t)e;
    r->expert = calloc(kn, sizeof(int));
    r->slot = calloc(kn, sizeof(int));
    r->weight = calloc(kn, sizeof(float));
    r->dweight = calloc(kn, sizeof(float));
    r->ce = calloc((size_t)e, sizeof(float));
    r->routed = calloc((size_t)e, sizeof(int));
    r->kept = calloc((size_t)e, sizeof(int));
    r->hgates = calloc(ne, sizeof(float));
    r->hbuf = calloc(ne, sizeof(float));
    r->row = calloc(2 * (size_t)c, sizeof(float));
    if (!r->expert || !r->slot || !r->weight || !r->dweight || !r->ce || !r->routed ||
        !r->kept || !r->hgates || !r->hbuf || !r->row) {
        zs_moe_routing_free(r);
        return -1;
    }
    return 0;
}

void zs_moe_routing_free(zs_moe_routing *r)
{
    free(r->expert);
    free(r->slot);
    free(r->weight);
    free(r->dweight);
    free(r->ce);
    free(r->routed);
    free(r->kept);
    free(r->hgates);
    free(r->hbuf);
    free(r->row);
    memset(r, 0, sizeof *r);
}

/* gates(N,E), logits(N,E) */
void zs_moe_softmax(float *gates, const float *logits, int n, int e)
{
    for (int t = 0; t < n; t++) {
        const float *x = logits + (size_t)t * e;
        float *g = gates + (size_t)t * e;
        float mx = x[0];
        for (int j = 1; j < e; j++)
            if (x[j] > mx)
                mx = x[j];
        double s = 0.0;
        for (int j = 0; j < e; j++) {
            g[j] = expf(x[j] - mx);
            s += g[j];
        }
        for (int j = 0; j < e; j++)
            g[j] = (float)(g[j] / s);
    }
}

/* The largest gate of row g other than `skip` (-1: none); ties: lowest. */
static int zs_moe_argmax(const float *g, int e, int skip)
{
    int best = -1;
    for (int j = 0; j < e; j++)
        if (j != skip && (best < 0 || g[j] > g[best]))
            best = j;
    return best;
}

void zs_moe_route(zs_moe_routing *r)
{
    int n = r->n, E = r->e, K = r->k;
    for (int j = 0; j < E; j++) {
        r->routed[j] = 0;
        r->kept[j] = 0;
    }
    r->dropped = 0;
    for (int k = 0; k < K; k++) {
        /* choice k of every token, slots in token order after the choices
         * before it (r->routed counts them) */
        for (int t = 0; t < n; t++) {
            const float *g = r->hgates + (size_t)t * E;
            int x = zs_moe_argmax(g, E, k == 0 ? -1 : r->expert[t]);
            size_t i = (size_t)k * n + t;
            r->expert[i] = x;
            int loc = r->routed[x]++;
            r->slot[i] = loc < r->cap ? loc : -1;
            if (r->slot[i] >= 0)
                r->kept[x]++;
            else
                r->dropped++;
        }
        if (k == 0)
            for (int j = 0; j < E; j++)
                r->ce[j] = (float)r->routed[j] / (float)n;
    }
    /* l_aux = E * sum_e mean(gates_e) * mean(mask1_e) */
    double la = 0.0;
    for (int j = 0; j < E; j++) {
        double me = 0.0;
        for (int t = 0; t < n; t++)
            me += r->hgates[(size_t)t * E + j];
        la += me / n * r->ce[j];
    }
    r->l_aux = la * E;
    for (int t = 0; t < n; t++) {
        const float *g = r->hgates + (size_t)t * E;
        if (K == 1) {
            r->weight[t] = r->slot[t] < 0 ? 0.0f : r->renorm ? 1.0f : g[r->expert[t]];
            continue;
        }
        float g1 = r->slot[t] >= 0 ? g[r->expert[t]] : 0.0f;
        float g2 = r->slot[n + t] >= 0 ? g[r->expert[n + t]] : 0.0f;
        float d = g1 + g2;
        if (d < FLT_EPSILON)
            d = FLT_EPSILON;
        r->weight[t] = g1 / d;
        r->weight[n + t] = g2 / d;
    }
}

/* Row of expert buffer for choice i (slot >= 0). */
static size_t zs_moe_row(const zs_moe_routing *r, size_t i)
{
    return ((size_t)r->expert[i] * (size_t)r->cap + (size_t)r->slot[i]) * (size_t)r->c;
}

void zs_moe_dispatch_forward(zs_backend_t be, float *xe, const float *x, const zs_moe_routing *r)
{
    size_t C = (size_t)r->c;
    zs_backend_memset0(be, xe, (size_t)r->e * r->cap * C * 4);
    for (int t = 0; t < r->n; t++)
        for (int k = 0; k < r->k; k++) {
            size_t i = (size_t)k * r->n + t;
            if (r->slot[i] >= 0)
                zs_backend_copy_d2d(be, xe + zs_moe_row(r, i), x + t * C, C * 4);
        }
}

void zs_moe_dispatch_backward(zs_backend_t be, float *dx, const float *dxe,
                              const zs_moe_routing *r)
{
    size_t C = (size_t)r->c;
    for (int t = 0; t < r->n; t++)
        for (int k = 0; k < r->k; k++) {
            size_t i = (size_t)k * r->n + t;
            if (r->slot[i] >= 0)
                zs_backend_axpy(be, dx + t * C, 1.0f, dxe + zs_moe_row(r, i), C);
        }
}

void zs_moe_combine_forward(zs_backend_t be, float *y, const float *ye, const zs_moe_routing *r)
{
    size_t C = (size_t)r->c;
    zs_backend_memset0(be, y, (size_t)r->n * C * 4);
    for (int t = 0; t < r->n; t++)
        for (int k = 0; k < r->k; k++) {
            size_t i = (size_t)k * r->n + t;
            if (r->slot[i] >= 0)
                zs_backend_axpy(be, y + t * C, r->weight[i], ye + zs_moe_row(r, i), C);
        }
}

void zs_moe_combine_backward(zs_backend_t be, float *dye, const float *dy, const float *ye,
                             zs_moe_routing *r)
{
    size_t C = (size_t)r->c;
    zs_backend_memset0(be, dye, (size_t)r->e * r->cap * C * 4);
    for (int t = 0; t < r->n; t++)
        for (int k = 0; k < r->k; k++) {
            size_t i = (size_t)k * r->n + t;
            r->dweight[i] = 0.0f;
            if (r->slot[i] < 0)
                continue;
            zs_backend_axpy(be, dye + zs_moe_row(r, i), r->weight[i], dy + t * C, C);
            zs_backend_copy_d2h(be, r->row, dy + t * C, C * 4);
            zs_backend_copy_d2h(be, r->row + C, ye + zs_moe_row(r, i), C * 4);
            double s = 0.0;
            for (size_t j = 0; j < C; j++)
                s += (double)r->row[j] * r->row[C + j];
            r->dweight[i] = (float)s;
        }
}

void zs_moe_gate_backward(float *dlogits, const zs_moe_routing *r, float aux_grad)
{
    int n = r->n, E = r->e;
    for (int t = 0; t < n; t++) {
        const float *g = r->hgates + (size_t)t * E;
        float *dg = dlogits + (size_t)t * E; /* d gates first, in place */
        for (int j = 0; j < E; j++) /* d l_aux / d gates[t][j] = E ce[j] / n */
            dg[j] = aux_grad * (float)E * r->ce[j] / (float)n;
        if (r->k == 1) {
            if (r->slot[t] >= 0 && !r->renorm) /* renormalised: the weight is 1 */
                dg[r->expert[t]] += r->dweight[t];
        } else {
            int k1 = r->slot[t] >= 0, k2 = r->slot[n + t] >= 0;
            float g1 = k1 ? g[r->expert[t]] : 0.0f, g2 = k2 ? g[r->expert[n + t]] : 0.0f;
            float d = g1 + g2, w1 = r->dweight[t], w2 = r->dweight[n + t];
            float d1, d2; /* d objective / d g1, g2 through w = g / d */
            if (d >= FLT_EPSILON) {
                d1 = g2 * (w1 - w2) / (d * d);
                d2 = g1 * (w2 - w1) / (d * d);
            } else {
                d1 = w1 / FLT_EPSILON;
                d2 = w2 / FLT_EPSILON;
            }
            if (k1)
                dg[r->expert[t]] += d1;
            if (k2)
                dg[r->expert[n + t]] += d2;
        }
        /* softmax: dlogits = g * (dg - sum_j g_j dg_j) */
        double s = 0.0;
        for (int j = 0; j < E; j++)
            s += (double)g[j] * dg[j];
        for (int j = 0; j < E; j++)
            dg[j] = g[j] * (dg[j] - (float)s);
    }
}

/* ---- the expert layout: where a GPT's MoE blocks and experts sit -------------- */

int zs_model_block_is_moe(const zs_model_config *c, int l)
{
    return c->moe_experts > 0 && c->moe_every > 0 && (l + 1) % c->moe_every == 0;
}

int zs_moe_block_first_entry(const zs_model_config *c, int l)
{
    int nmoe = c->moe_experts > 0 && c->moe_every > 0 ? l / c->moe_every : 0;
    return 2 + l * B_NENT + nmoe * (M_NENT - B_NENT);
}

int zs_moe_entry_block(const zs_model_config *c, int i, int *k)
{
    int L = c->n_layer;
    *k = -1;
    if (i < 2 || i >= zs_moe_block_first_entry(c, L))
        return -1;
    int lo = 0, hi = L - 1;
    while (lo < hi) { /* the last block whose base <= i */
        int mid = lo + (hi - lo + 1) / 2;
        if (zs_moe_block_first_entry(c, mid) <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    int p = i - zs_moe_block_first_entry(c, lo);
    *k = zs_model_block_is_moe(c, lo) && p > B_LN2B ? M_GATEW + (p - B_LN2B - 1) : p;
    return lo;
}

int zs_model_entry_is_expert(const zs_model_config *c, int i)
{
    int k;
    if (c->kind == ZS_MODEL_LLAMA)
        return zs_llama_entry_is_expert(c, i);
    return c->kind == ZS_MODEL_GPT && zs_moe_entry_block(c, i, &k) >= 0 && k > M_GATEW;
}

/* ---- a MoE block's steps that the GPT and the Llama family share ------------- */

/* the most ranks of an expert-parallel group (the all-to-alls' count arrays) */
#define ZS_MOE_MAX_EP 256

void zs_moe_alltoall(zs_model *m, zs_backend_t be, float *recv, const float *send, size_t ecc,
                     int unit)
{
    int Ep = m->cfg.moe_ep > 1 ? m->cfg.moe_ep : 1;
    if (Ep == 1 || !m->ep) {
        zs_backend_copy_d2d(be, recv, send, ecc * 4);
        return;
    }
    int cnt[ZS_MOE_MAX_EP], dis[ZS_MOE_MAX_EP];
    size_t chunk = ecc / (size_t)Ep * 4;
    if (Ep > ZS_MOE_MAX_EP || (size_t)Ep * chunk > (size_t)INT_MAX) {
        zs_error_set("expert parallelism: the all-to-all of %zu bytes per rank is more than one "
                     "MPI call carries (2 GiB): use a larger --ep or a smaller micro-batch",
                     (size_t)Ep * chunk);
        m->tp_failed = 1;
        return;
    }
    for (int q = 0; q < Ep; q++) {
        cnt[q] = (int)chunk;
        dis[q] = (int)((size_t)q * chunk);
    }
    if (zs_comm_alltoallv_bytes(m->ep, send, cnt, dis, recv, cnt, dis, unit))
        m->tp_failed = 1;
}

void zs_moe_route_block(zs_model *m, zs_backend_t be, zs_acts *a, int l, const float *router,
                        int BT, int forward)
{
    const zs_model_config *c = &m->cfg;
    int C = c->n_embd, E = c->moe_experts;
    zs_moe_routing *r = a->moe;
    size_t ne = (size_t)BT * E;
    if (forward) {
        zs_linear_forward(be, a->s_gl, a->ln2[l], router, NULL, BT, C, E);
        zs_backend_copy_d2h(be, r->hbuf, a->s_gl, ne * 4);
        zs_moe_softmax(r->hgates, r->hbuf, BT, E);
        zs_backend_copy_h2d(be, a->m_gates[l], r->hgates, ne * 4);
    } else {
        zs_backend_copy_d2h(be, r->hgates, a->m_gates[l], ne * 4);
    }
    zs_moe_route(r);
}

void zs_moe_keep_stats(zs_acts *a, int l)
{
    const zs_moe_routing *r = a->moe;
    zs_moe_stats *st = &a->moe_stats[l];
    st->experts = r->e;
    st->capacity = r->cap;
    st->tokens = r->n;
    st->dropped = r->dropped;
    st->l_aux = r->l_aux;
    a->moe_laux[l] = r->l_aux;
    for (int j = 0; j < r->e && j < 256; j++) {
        st->routed[j] = r->routed[j];
        st->kept[j] = r->kept[j];
    }
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (size_t i = 0; i < (size_t)r->k * r->n; i++)
        h = zs_rng_mix(h, (uint64_t)(uint32_t)r->expert[i] << 32 | (uint32_t)r->slot[i]);
    st->route_hash = h;
}

double zs_model_moe_aux_term(const zs_model_config *c, const double *l_aux)
{
    double aux = 0.0;
    for (int l = 0; l < c->n_layer; l++)
        if (zs_model_block_is_moe(c, l))
            aux += c->moe_aux_coeff * l_aux[l];
    return aux;
}

void zs_moe_sum_aux(zs_acts *a) { a->moe_aux = zs_model_moe_aux_term(&a->m->cfg, a->moe_laux); }

void zs_moe_grads_home(zs_model *m, zs_backend_t be, zs_acts *a, int l, float *const *dst,
                       const size_t *part, int nparts)
{
    const zs_model_config *c = &m->cfg;
    int Ep = c->moe_ep > 1 ? c->moe_ep : 1;
    size_t chunk = 0;
    for (int k = 0; k < nparts; k++)
        chunk += part[k];
    if (c->moe_ep_home == ZS_MOE_EP_BY_SOURCE) {
        /* the sources' gradients kept (zs_model_moe_source_grads), and
         * added into the gradients in source order */
        for (int q = 0; q < Ep; q++) {
            const float *src = a->s_gsrc + (size_t)q * chunk;
            for (int k = 0; k < nparts; src += part[k], k++)
                zs_backend_axpy(be, dst[k], 1.0f, src, part[k]);
        }
        return;
    }
    /* each source's chunk home; from owner o come its experts' gradients
     * from this rank's tokens: experts o El .. o El + El - 1 of each entry */
    int cnt[ZS_MOE_MAX_EP], dis[ZS_MOE_MAX_EP];
    if (Ep > ZS_MOE_MAX_EP || (size_t)Ep * chunk * 4 > (size_t)INT_MAX) {
        zs_error_set("expert parallelism: the experts' gradients, %zu bytes per rank, are more "
                     "than one MPI all-to-all carries (2 GiB): use a larger --ep",
                     (size_t)Ep * chunk * 4);
        m->tp_failed = 1;
        return;
    }
    for (int q = 0; q < Ep; q++) {
        cnt[q] = (int)(chunk * 4);
        dis[q] = (int)((size_t)q * chunk * 4);
    }
    if (m->ep && zs_comm_alltoallv_bytes(m->ep, a->s_gsrc, cnt, dis, a->s_grecv, cnt, dis, l + 1))
        m->tp_failed = 1;
    if (!m->ep)
        zs_backend_copy_d2d(be, a->s_grecv, a->s_gsrc, (size_t)Ep * chunk * 4);
    for (int o = 0; o < Ep; o++) {
        const float *src = a->s_grecv + (size_t)o * chunk;
        for (int k = 0; k < nparts; src += part[k], k++)
            zs_backend_axpy(be, dst[k] + (size_t)o * part[k], 1.0f, src, part[k]);
    }
}
