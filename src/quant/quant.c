/* zerosim — weight quantization (see zerosim/quant.h). */
#include "zerosim/quant.h"
#include "zerosim/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const float zs_nf4_levels[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};

static const char *const zs_quant_names[ZS_QUANT_NFORMATS] = {"none", "int8", "int8-zp", "nf4"};

int zs_quant_format_parse(const char *s, zs_quant_format *out)
{
    for (int f = 0; f < ZS_QUANT_NFORMATS; f++)
        if (s && !strcmp(s, zs_quant_names[f])) {
            *out = (zs_quant_format)f;
            return 0;
        }
    ZS_FAIL("unknown quantization format \"%s\": give int8, int8-zp or nf4", s ? s : "");
}

const char *zs_quant_format_name(zs_quant_format f)
{
    return f >= 0 && f < ZS_QUANT_NFORMATS ? zs_quant_names[f] : "?";
}

int zs_quant_spec_finalize(zs_quant_spec *s)
{
    if (s->format <= ZS_QUANT_NONE || s->format >= ZS_QUANT_NFORMATS)
        ZS_FAIL("no quantization format: give int8, int8-zp or nf4");
    if (s->per_channel && s->block)
        ZS_FAIL("--per-channel and --block %zu both say how to group the scales: give one",
                s->block);
    if (s->double_quant && s->format != ZS_QUANT_NF4)
        ZS_FAIL("--double-quant quantizes NF4's block scales: it needs --format nf4");
    if (s->format == ZS_QUANT_NF4 && !s->per_channel && !s->block)
        s->block = ZS_QUANT_NF4_BLOCK;
    if (s->block > ((size_t)1 << 30))
        ZS_FAIL("--block %zu is too large (at most 2^30 elements)", s->block);
    return 0;
}

void zs_quant_spec_describe(const zs_quant_spec *s, char *buf, size_t n)
{
    char g[48];
    if (s->per_channel)
        snprintf(g, sizeof g, "per channel");
    else if (s->block)
        snprintf(g, sizeof g, "blocks of %zu", s->block);
    else
        snprintf(g, sizeof g, "per tensor");
    snprintf(buf, n, "%s, %s%s", zs_quant_format_name(s->format), g,
             s->double_quant ? ", double quant" : "");
}

size_t zs_quant_group_size(const zs_quant_spec *s, size_t rows, size_t cols)
{
    size_t n = rows * cols;
    size_t g = s->per_channel ? cols : s->block ? s->block : n;
    return g < n ? g : n;
}

size_t zs_quant_ngroups(const zs_quant_spec *s, size_t rows, size_t cols)
{
    size_t n = rows * cols, g = zs_quant_group_size(s, rows, cols);
    return g ? (n + g - 1) / g : 0;
}

/* ---- one group ---------------------------------------------------------------- */

static float zs_absmax(const float *x, size_t n)
{
    float a = 0.0f;
    for (size_t i = 0; i < n; i++)
        if (fabsf(x[i]) > a)
            a = fabsf(x[i]);
    return a;
}

static int8_t zs_q_absmax(float x, float a)
{
    if (a == 0.0f)
        return 0;
    float r = roundf(x * (127.0f / a));
    return (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : r);
}
static float zs_dq_absmax(int8_t q, float a) { return (float)q * a / 127.0f; }

/* nd and zp of a group (lo <= 0 <= hi). */
static void zs_zp_params(const float *x, size_t n, float *nd, uint8_t *zp)
{
    float lo = 0.0f, hi = 0.0f;
    for (size_t i = 0; i < n; i++) {
        if (x[i] < lo)
            lo = x[i];
        if (x[i] > hi)
            hi = x[i];
    }
    if (hi == lo) { /* all zeros */
        *nd = 1.0f;
        *zp = 0;
        return;
    }
    *nd = 255.0f / (hi - lo);
    float z = roundf(-lo * *nd);
    *zp = (uint8_t)(z < 0.0f ? 0 : z > 255.0f ? 255 : z);
}
static int8_t zs_q_zp(float x, float nd, uint8_t zp)
{
    float r = roundf(nd * x + (float)zp) - 128.0f;
    return (int8_t)(r > 127.0f ? 127 : r < -128.0f ? -128 : r);
}
static float zs_dq_zp(int8_t q, float nd, uint8_t zp)
{
    return ((float)q + 128.0f - (float)zp) / nd;
}

uint8_t zs_quant_nf4_index(float v)
{
    /* the nearest level; at a midpoint, the lower one */
    uint8_t k = 0;
    while (k < 15 && v > 0.5f * (zs_nf4_levels[k] + zs_nf4_levels[k + 1]))
        k++;
    return k;
}
static uint8_t zs_q_nf4(float x, float a) { return a == 0.0f ? 7 : zs_quant_nf4_index(x / a); }
static float zs_dq_nf4(uint8_t q, float a) { return zs_nf4_levels[q & 15] * a; }

void zs_quant_absmax_i8(const float *x, size_t n, int8_t *q, float *absmax)
{
    float a = zs_absmax(x, n);
    for (size_t i = 0; i < n; i++)
        q[i] = zs_q_absmax(x[i], a);
    *absmax = a;
}

void zs_quant_zeropoint_i8(const float *x, size_t n, int8_t *q, float *nd, uint8_t *zp)
{
    zs_zp_params(x, n, nd, zp);
    for (size_t i = 0; i < n; i++)
        q[i] = zs_q_zp(x[i], *nd, *zp);
}

/* ---- tensors -------------------------------------------------------------------- */

void zs_qtensor_free(zs_qtensor *t)
{
    free(t->q);
    free(t->scale);
    free(t->zero);
    free(t->scale_q);
    free(t->scale_scale);
    memset(t, 0, sizeof *t);
}

size_t zs_qtensor_bytes(const zs_qtensor *t)
{
    size_t b = t->qbytes;
    if (t->spec.double_quant)
        b += t->ngroups + 4 * t->nsb + 4;
    else
        b += 4 * t->ngroups;
    if (t->spec.format == ZS_QUANT_INT8_ZP)
        b += t->ngroups;
    return b;
}

/* Double quantization of the block absmax values c[0..ng). */
static void zs_dq_scales(zs_qtensor *t, const float *c)
{
    double sum = 0.0;
    for (size_t g = 0; g < t->ngroups; g++)
        sum += c[g];
    t->scale_mean = (float)(sum / (double)t->ngroups);
    for (size_t b = 0; b < t->nsb; b++) {
        size_t lo = b * ZS_QUANT_DQ_BLOCK, hi = lo + ZS_QUANT_DQ_BLOCK;
        if (hi > t->ngroups)
            hi = t->ngroups;
        float a = 0.0f;
        for (size_t g = lo; g < hi; g++)
            if (fabsf(c[g] - t->scale_mean) > a)
                a = fabsf(c[g] - t->scale_mean);
        t->scale_scale[b] = a;
        for (size_t g = lo; g < hi; g++)
            t->scale_q[g] = zs_q_absmax(c[g] - t->scale_mean, a);
    }
}

/* The scale of group g as the decoder sees it. */
static float zs_group_scale(const zs_qtensor *t, size_t g)
{
    if (!t->spec.double_quant)
        return t->scale[g];
    return zs_dq_absmax(t->scale_q[g], t->scale_scale[g / ZS_QUANT_DQ_BLOCK]) + t->scale_mean;
}

int zs_quant_tensor(const zs_quant_spec *s, const float *x, size_t rows, size_t cols,
                    zs_qtensor *t)
{
    memset(t, 0, sizeof *t);
    t->spec = *s;
    t->rows = rows;
    t->cols = cols;
    t->n = rows * cols;
    t->group = zs_quant_group_size(s, rows, cols);
    t->ngroups = zs_quant_ngroups(s, rows, cols);
    int nf4 = s->format == ZS_QUANT_NF4;
    t->qbytes = nf4 ? (t->n + 1) / 2 : t->n;
    t->q = calloc(t->qbytes + 1, 1);
    float *c = malloc(t->ngroups * sizeof(float) + 1);
    int bad = !t->q || !c;
    if (s->format == ZS_QUANT_INT8_ZP)
        bad |= !(t->zero = malloc(t->ngroups + 1));
    if (s->double_quant) {
        t->nsb = (t->ngroups + ZS_QUANT_DQ_BLOCK - 1) / ZS_QUANT_DQ_BLOCK;
        bad |= !(t->scale_q = malloc(t->ngroups + 1)) ||
               !(t->scale_scale = malloc(t->nsb * sizeof(float) + 1));
    }
    if (bad) {
        free(c);
        zs_qtensor_free(t);
        ZS_FAIL("out of host memory quantizing %zu values", rows * cols);
    }
    for (size_t g = 0; g < t->ngroups; g++) {
        size_t lo = g * t->group, m = t->n - lo < t->group ? t->n - lo : t->group;
        if (s->format == ZS_QUANT_INT8_ZP)
            zs_zp_params(x + lo, m, &c[g], &t->zero[g]);
        else
            c[g] = zs_absmax(x + lo, m);
    }
    if (s->double_quant)
        zs_dq_scales(t, c);
    else
        t->scale = c, c = NULL;
    for (size_t g = 0; g < t->ngroups; g++) {
        size_t lo = g * t->group, m = t->n - lo < t->group ? t->n - lo : t->group;
        float a = zs_group_scale(t, g);
        for (size_t i = lo; i < lo + m; i++) {
            if (s->format == ZS_QUANT_INT8)
                t->q[i] = (uint8_t)zs_q_absmax(x[i], a);
            else if (s->format == ZS_QUANT_INT8_ZP)
                t->q[i] = (uint8_t)zs_q_zp(x[i], a, t->zero[g]);
            else
                t->q[i / 2] |= (uint8_t)(zs_q_nf4(x[i], a) << (4 * (i & 1)));
        }
    }
    free(c);
    return 0;
}

void zs_dequant_tensor(const zs_qtensor *t, float *out)
{
    for (size_t g = 0; g < t->ngroups; g++) {
        size_t lo = g * t->group, m = t->n - lo < t->group ? t->n - lo : t->group;
        float a = zs_group_scale(t, g);
        for (size_t i = lo; i < lo + m; i++) {
            if (t->spec.format == ZS_QUANT_INT8)
                out[i] = zs_dq_absmax((int8_t)t->q[i], a);
            else if (t->spec.format == ZS_QUANT_INT8_ZP)
                out[i] = zs_dq_zp((int8_t)t->q[i], a, t->zero[g]);
            else
                out[i] = zs_dq_nf4((uint8_t)(t->q[i / 2] >> (4 * (i & 1))), a);
        }
    }
}

size_t zs_quant_fake(const zs_quant_spec *s, const float *x, float *out, uint8_t *mask,
                     size_t rows, size_t cols)
{
    size_t n = rows * cols, group = zs_quant_group_size(s, rows, cols), clamped = 0;
    for (size_t lo = 0; lo < n; lo += group) {
        size_t m = n - lo < group ? n - lo : group;
        float a = 0.0f;
        uint8_t zp = 0;
        if (s->format == ZS_QUANT_INT8_ZP)
            zs_zp_params(x + lo, m, &a, &zp);
        else
            a = zs_absmax(x + lo, m);
        for (size_t i = lo; i < lo + m; i++) {
            float v = x[i], r;
            /* clamped: the rounded value before the clamp is outside the
             * integer range (NF4: |v| > a, which absmax never gives) */
            if (s->format == ZS_QUANT_INT8) {
                r = a == 0.0f ? 0.0f : roundf(v * (127.0f / a));
                out[i] = zs_dq_absmax(zs_q_absmax(v, a), a);
            } else if (s->format == ZS_QUANT_INT8_ZP) {
                r = roundf(a * v + (float)zp) - 128.0f;
                out[i] = zs_dq_zp(zs_q_zp(v, a, zp), a, zp);
            } else {
                r = fabsf(v) <= a ? 0.0f : 1000.0f;
                out[i] = zs_dq_nf4(zs_q_nf4(v, a), a);
            }
            int in = s->format == ZS_QUANT_INT8_ZP ? r >= -128.0f && r <= 127.0f
                                                    : r >= -127.0f && r <= 127.0f;
            if (mask)
                mask[i] = (uint8_t)in;
            clamped += !in;
        }
    }
    return clamped;
}

/* ---- sizes --------------------------------------------------------------------- */

static double zs_value_bits(const zs_quant_spec *s) { return s->format == ZS_QUANT_NF4 ? 4.0 : 8.0; }

double zs_quant_bits_per_param(const zs_quant_spec *s, size_t n, size_t group)
{
    if (!n)
        return 0.0;
    size_t ng = (n + group - 1) / group;
    double bits = s->format == ZS_QUANT_NF4 ? 4.0 * (double)((n + 1) / 2 * 2) : 8.0 * (double)n;
    if (s->double_quant)
        bits += 8.0 * (double)ng + 32.0 * (double)((ng + ZS_QUANT_DQ_BLOCK - 1) / ZS_QUANT_DQ_BLOCK)
                + 32.0;
    else
        bits += 32.0 * (double)ng;
    if (s->format == ZS_QUANT_INT8_ZP)
        bits += 8.0 * (double)ng;
    return bits / (double)n;
}

double zs_quant_bits_per_param_limit(const zs_quant_spec *s)
{
    double g = s->block ? (double)s->block : 0.0;
    if (!g) /* per tensor (or channel): the scales vanish for large tensors */
        return zs_value_bits(s);
    double b = zs_value_bits(s);
    if (s->double_quant)
        return b + 8.0 / g + 32.0 / (g * ZS_QUANT_DQ_BLOCK);
    return b + (s->format == ZS_QUANT_INT8_ZP ? 40.0 : 32.0) / g;
}

/* ---- which entries --------------------------------------------------------------- */

static int zs_q_ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

int zs_quant_entry_matrix(const zs_model_config *mc, const zs_param_entry *e, size_t *rows,
                          size_t *cols)
{
    size_t in;
    if (mc->kind == ZS_MODEL_MLP) {
        if (!zs_q_ends_with(e->name, ".w") || strncmp(e->name, "fc", 2))
            return 0;
        in = (size_t)(e->layer == 0 ? mc->input_dim : mc->widths[e->layer - 1]);
    } else if (mc->kind == ZS_MODEL_LLAMA) { /* the blocks' (out, in) linears, as the GPT's */
        static const char *const lin[] = {".q_proj.weight", ".k_proj.weight", ".v_proj.weight",
                                          ".o_proj.weight", ".gate_proj.weight",
                                          ".up_proj.weight"};
        in = 0;
        for (size_t k = 0; k < sizeof lin / sizeof lin[0] && !in; k++)
            if (zs_q_ends_with(e->name, lin[k]))
                in = (size_t)mc->n_embd;
        if (zs_q_ends_with(e->name, ".down_proj.weight"))
            in = (size_t)mc->ffn_hidden;
        if (!in)
            return 0;
    } else {
        if (zs_q_ends_with(e->name, ".attn.qkv.w") || zs_q_ends_with(e->name, ".attn.proj.w") ||
            zs_q_ends_with(e->name, ".mlp.fc.w"))
            in = (size_t)mc->n_embd;
        else if (zs_q_ends_with(e->name, ".mlp.proj.w"))
            in = 4 * (size_t)mc->n_embd;
        else
            return 0;
    }
    if (!in || e->numel % in)
        return 0;
    *cols = in;
    *rows = e->numel / in;
    return 1;
}

