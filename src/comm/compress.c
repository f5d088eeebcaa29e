/* zerosim — gradient compression codecs (see include/zerosim/compress.h).
 *
 * Dimension letters: n = elements, k = elements kept by top-k,
 * nb = ceil(n / ZS_COMP_BLOCK) scale blocks.
 */
#include "zerosim/compress.h"
#include "zerosim/error.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- little-endian byte access (buffers have no alignment) ---- */

/* Store v at p as 4 little-endian bytes. */
static inline void zs_put_u32(unsigned char *p, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8),
                          (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    memcpy(p, b, 4);
}

/* Load 4 little-endian bytes at p. */
static inline uint32_t zs_get_u32(const unsigned char *p)
{
    unsigned char b[4];
    memcpy(b, p, 4);
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* Store the fp32 bits of v at p, little-endian. */
static inline void zs_put_f32(unsigned char *p, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    zs_put_u32(p, u);
}

/* Load an fp32 stored little-endian at p. */
static inline float zs_get_f32(const unsigned char *p)
{
    uint32_t u = zs_get_u32(p);
    float v;
    memcpy(&v, &u, 4);
    return v;
}

/* Number of scale blocks for n elements. */
static inline size_t zs_nblocks(size_t n) { return (n + ZS_COMP_BLOCK - 1) / ZS_COMP_BLOCK; }

/* ---- parsing and names ---- */

/* Copy at most 60 characters of s into buf for an error message, replacing
 * control and non-ASCII bytes by '?' so the message stays one line. */
static void zs_comp_quote(const char *s, char *buf, size_t len)
{
    size_t i = 0;
    for (; s[i] && i < 60 && i + 4 < len; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (s[i] && i + 4 < len) {
        memcpy(buf + i, "...", 3);
        i += 3;
    }
    buf[i] = '\0';
}

int zs_comp_parse(const char *s, zs_comp_spec *out)
{
    static const char accepted[] = "accepted: none, int8, sign, topk:F with 0 < F <= 1 (e.g. topk:0.01)";
    if (!s)
        ZS_FAIL("gradient compression: no codec given; %s", accepted);
    zs_comp_spec r = {ZS_COMP_NONE, 1.0};
    if (strcmp(s, "none") == 0) {
        r.kind = ZS_COMP_NONE;
    } else if (strcmp(s, "int8") == 0) {
        r.kind = ZS_COMP_INT8;
    } else if (strcmp(s, "sign") == 0) {
        r.kind = ZS_COMP_SIGN;
    } else if (strncmp(s, "topk:", 5) == 0) {
        const char *f = s + 5;
        char *end = NULL;
        double v = 0.0;
        int ok = (f[0] >= '0' && f[0] <= '9') || f[0] == '.';   /* no sign, space, "inf" */
        if (ok) {
            v = strtod(f, &end);
            ok = end != f && *end == '\0' && isfinite(v) && v > 0.0 && v <= 1.0;
        }
        if (!ok) {
            char q[80];
            zs_comp_quote(s, q, sizeof q);
            ZS_FAIL("gradient compression \"%s\": the top-k fraction must be a number in (0,1]; %s",
                    q, accepted);
        }
        r.kind = ZS_COMP_TOPK;
        r.topk_fraction = v;
    } else {
        char q[80];
        zs_comp_quote(s, q, sizeof q);
        ZS_FAIL("gradient compression \"%s\" not understood; %s", q, accepted);
    }
    *out = r;
    return 0;
}

const char *zs_comp_name(const zs_comp_spec *s, char *buf, size_t len)
{
    if (!buf || len == 0)
        return buf;
    switch (s ? s->kind : (zs_comp_kind)-1) {
    case ZS_COMP_NONE: snprintf(buf, len, "none"); break;
    case ZS_COMP_INT8: snprintf(buf, len, "int8"); break;
    case ZS_COMP_SIGN: snprintf(buf, len, "sign"); break;
    case ZS_COMP_TOPK: {
        /* the shortest %g that reads back as the same double */
        char t[40];
        for (int p = 1; p <= 17; p++) {
            snprintf(t, sizeof t, "%.*g", p, s->topk_fraction);
            if (strtod(t, NULL) == s->topk_fraction)
                break;
        }
        snprintf(buf, len, "topk:%s", t);
        break;
    }
    default: snprintf(buf, len, "?"); break;
    }
    return buf;
}

/* ---- sizes ---- */

size_t zs_comp_topk_k(const zs_comp_spec *s, size_t n)
{
    if (n == 0)
        return 0;
    double t = s->topk_fraction * (double)n;
    double r = nearbyint(t);
    double k = (fabs(t - r) <= 1e-12 * t) ? r : ceil(t);
    if (!(k >= 1.0))                 /* also catches NaN */
        return 1;
    if (k >= (double)n)
        return n;
    return (size_t)k;
}

size_t zs_comp_bytes(const zs_comp_spec *s, size_t n)
{
    switch (s->kind) {
    case ZS_COMP_TOPK: return zs_comp_topk_k(s, n) * 8;
    case ZS_COMP_INT8: return n + 4 * zs_nblocks(n);
    case ZS_COMP_SIGN: return (n + 7) / 8 + 4 * zs_nblocks(n);
    case ZS_COMP_NONE:
    default: return 4 * n;
    }
}

/* ---- top-k ---- */

/* Magnitude key: the bits of |v| as an integer. For non-negative floats the
 * integer order is the numeric order (+0 and -0 share key 0), and |NaN| keys
 * rank above +inf, so the order is total and needs no float compares. */
static inline uint32_t zs_mag_key(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return u & 0x7fffffffu;
}

/* Radix select: the key M of the k-th largest magnitude of x(n) (1 <= k <= n)
 * and, in *take_eq, how many elements with key == M belong to the top k
 * (those with the lowest indices). Three counting passes over 11, 10 and 10
 * bits of the 31-bit key; scratch is one 2048-bin histogram on the stack. */
static uint32_t zs_topk_threshold(const float *x, size_t n, size_t k, size_t *take_eq)
{
    static const int shift[3] = {20, 10, 0};
    static const int width[3] = {11, 10, 10};
    size_t counts[1u << 11];
    uint32_t prefix = 0, mask = 0;   /* the high key bits fixed so far */
    size_t need = k;                 /* still to pick among keys matching prefix */
    for (int pass = 0; pass < 3; pass++) {
        uint32_t nbins = 1u << width[pass];
        memset(counts, 0, nbins * sizeof counts[0]);
        for (size_t i = 0; i < n; i++) {
            uint32_t key = zs_mag_key(x[i]);
            if ((key & mask) == prefix)
                counts[(key >> shift[pass]) & (nbins - 1)]++;
        }
        uint32_t b = nbins - 1;
        while (counts[b] < need) {   /* walk down from the largest digit */
            need -= counts[b];
            b--;                     /* cannot pass 0: the bins hold >= need */
        }
        prefix |= b << shift[pass];
        mask |= (nbins - 1) << shift[pass];
    }
    *take_eq = need;
    return prefix;
}

/* Top-k compress: out = k uint32 indices then k fp32 values, increasing index. */
static void zs_topk_compress(const zs_comp_spec *s, const float *x, size_t n,
                             unsigned char *out, float *approx)
{
    size_t k = zs_comp_topk_k(s, n);
    if (k == 0)
        return;
    unsigned char *oi = out, *ov = out + 4 * k;
    uint32_t m = 0;         /* keep keys > m, and the first eq_left keys == m */
    size_t eq_left = n;     /* k == n: keep everything */
    if (k < n)
        m = zs_topk_threshold(x, n, k, &eq_left);
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t key = zs_mag_key(x[i]);
        int keep = key > m || (key == m && eq_left > 0);
        if (keep) {
            if (key == m)
                eq_left--;
            zs_put_u32(oi + 4 * j, (uint32_t)i);
            zs_put_f32(ov + 4 * j, x[i]);
            j++;
            approx[i] = 0.0f + x[i];
        } else {
            approx[i] = 0.0f;
        }
    }
}

/* Top-k decompress: acc[idx] += value for each pair, in the listed order. */
static void zs_topk_decompress_add(const zs_comp_spec *s, const unsigned char *in, size_t n,
                                   float *acc)
{
    size_t k = zs_comp_topk_k(s, n);
    const unsigned char *ii = in, *iv = in + 4 * k;
    for (size_t j = 0; j < k; j++) {
        uint32_t i = zs_get_u32(ii + 4 * j);
        if (i < n)
            acc[i] += zs_get_f32(iv + 4 * j);
    }
}

/* ---- int8 ---- */

/* int8 compress: out = nb fp32 scales, then n int8 values. */
static void zs_int8_compress(const float *x, size_t n, unsigned char *out, float *approx)
{
    size_t nb = zs_nblocks(n);
    unsigned char *os = out, *oq = out + 4 * nb;
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * ZS_COMP_BLOCK, hi = lo + ZS_COMP_BLOCK < n ? lo + ZS_COMP_BLOCK : n;
        float mx = 0.0f;
        for (size_t i = lo; i < hi; i++) {
            float a = fabsf(x[i]);
            if (a > mx)              /* NaN never wins */
                mx = a;
        }
        float scale = mx / 127.0f;
        zs_put_f32(os + 4 * b, scale);
        for (size_t i = lo; i < hi; i++) {
            int q = 0;
            if (scale != 0.0f) {
                float r = roundf(x[i] / scale);   /* half away from zero */
                q = r > 127.0f ? 127 : r < -127.0f ? -127 : (r == r ? (int)r : 0);
            }
            int8_t qb = (int8_t)q;
            memcpy(oq + i, &qb, 1);
            approx[i] = 0.0f + scale * (float)q;
        }
    }
}

/* int8 decompress: acc[i] += scale[i/256] * q[i]. */
static void zs_int8_decompress_add(const unsigned char *in, size_t n, float *acc)
{
    size_t nb = zs_nblocks(n);
    const unsigned char *is = in, *iq = in + 4 * nb;
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * ZS_COMP_BLOCK, hi = lo + ZS_COMP_BLOCK < n ? lo + ZS_COMP_BLOCK : n;
        float scale = zs_get_f32(is + 4 * b);
        for (size_t i = lo; i < hi; i++) {
            int8_t qb;
            memcpy(&qb, iq + i, 1);
            acc[i] += scale * (float)qb;
        }
    }
}

/* ---- sign ---- */

/* sign compress: out = nb fp32 scales (mean |x|), then ceil(n/8) bytes of bits. */
static void zs_sign_compress(const float *x, size_t n, unsigned char *out, float *approx)
{
    size_t nb = zs_nblocks(n);
    unsigned char *os = out, *ob = out + 4 * nb;
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * ZS_COMP_BLOCK, hi = lo + ZS_COMP_BLOCK < n ? lo + ZS_COMP_BLOCK : n;
        double sum = 0.0;
        for (size_t i = lo; i < hi; i++)
            sum += fabsf(x[i]);
        float scale = (float)(sum / (double)(hi - lo));
        zs_put_f32(os + 4 * b, scale);
        /* ZS_COMP_BLOCK is a multiple of 8: a block starts on a byte */
        unsigned char byte = 0;
        for (size_t i = lo; i < hi; i++) {
            int bit = x[i] >= 0.0f;
            byte |= (unsigned char)(bit << (i & 7));
            approx[i] = 0.0f + (bit ? scale : -scale);
            if ((i & 7) == 7 || i + 1 == hi) {
                ob[i >> 3] = byte;
                byte = 0;
            }
        }
    }
}

/* sign decompress: acc[i] += bit ? +scale : -scale. */
static void zs_sign_decompress_add(const unsigned char *in, size_t n, float *acc)
{
    size_t nb = zs_nblocks(n);
    const unsigned char *is = in, *ib = in + 4 * nb;
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * ZS_COMP_BLOCK, hi = lo + ZS_COMP_BLOCK < n ? lo + ZS_COMP_BLOCK : n;
        uint32_t su = zs_get_u32(is + 4 * b);
        for (size_t i = lo; i < hi; i++) {
            /* bit 0 flips the sign bit of scale: exactly -scale, no branch */
            uint32_t neg = (uint32_t)(~ib[i >> 3] >> (i & 7) & 1) << 31;
            uint32_t vu = su ^ neg;
            float v;
            memcpy(&v, &vu, 4);
            acc[i] += v;
        }
    }
}

/* ---- dispatch ---- */

void zs_comp_compress(const zs_comp_spec *s, const float *x, size_t n, void *out, float *approx)
{
    unsigned char *o = out;
    switch (s->kind) {
    case ZS_COMP_TOPK: zs_topk_compress(s, x, n, o, approx); break;
    case ZS_COMP_INT8: zs_int8_compress(x, n, o, approx); break;
    case ZS_COMP_SIGN: zs_sign_compress(x, n, o, approx); break;
    case ZS_COMP_NONE:
    default:
        for (size_t i = 0; i < n; i++) {
            zs_put_f32(o + 4 * i, x[i]);
            approx[i] = 0.0f + x[i];
        }
        break;
    }
}

void zs_comp_decompress_add(const zs_comp_spec *s, const void *in, size_t n, float *acc)
{
    const unsigned char *p = in;
    switch (s->kind) {
    case ZS_COMP_TOPK: zs_topk_decompress_add(s, p, n, acc); break;
    case ZS_COMP_INT8: zs_int8_decompress_add(p, n, acc); break;
    case ZS_COMP_SIGN: zs_sign_decompress_add(p, n, acc); break;
    case ZS_COMP_NONE:
    default:
        for (size_t i = 0; i < n; i++)
            acc[i] += zs_get_f32(p + 4 * i);
        break;
    }
}
