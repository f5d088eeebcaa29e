/* Tests of the gradient compression codecs (include/zerosim/compress.h).
 *
 * Dimension letters: n = elements, k = elements kept by top-k.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zerosim/compress.h"
#include "zerosim/error.h"

/* ---- helpers ---- */

/* Check's ck_assert records its location on every call, even when it passes,
 * which costs a write per element in the loops below; these only act on
 * failure. */
#define EXPECT(cond, ...) do { if (!(cond)) ck_abort_msg(__VA_ARGS__); } while (0)
#define EXPECT1(cond) do { if (!(cond)) ck_abort_msg("failed: %s", #cond); } while (0)

static const size_t sizes[] = {0, 1, 255, 256, 257, 1000};
#define NSIZES (sizeof sizes / sizeof sizes[0])

/* A deterministic generator (xorshift64*), seeded per test. */
static uint64_t rng_state;
static void rng_seed(uint64_t s) { rng_state = s * 2654435761u + 0x9e3779b97f4a7c15ull; }
static uint64_t rng_u64(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}
/* Uniform in [-1, 1). */
static float rng_f(void) { return (float)((double)(rng_u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

/* x(n) uniform in [-amp, amp). */
static void fill_uniform(float *x, size_t n, float amp)
{
    for (size_t i = 0; i < n; i++)
        x[i] = amp * rng_f();
}

/* Allocate or fail the test. */
static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* Bit-identical float arrays? Returns the first differing index, or n. */
static size_t first_diff(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
            return i;
    return n;
}

static zs_comp_spec spec_of(const char *text)
{
    zs_comp_spec s;
    EXPECT(zs_comp_parse(text, &s) == 0, "%s: %s", text, zs_error_msg());
    return s;
}

/* Load a little-endian uint32 / fp32 from an unaligned buffer. */
static uint32_t load_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static float load_f32(const unsigned char *p)
{
    uint32_t u = load_u32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Reference top-k: sort indices by |x| descending, then index ascending. */
static const float *ref_x;
static int ref_cmp(const void *a, const void *b)
{
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    float ai = fabsf(ref_x[i]), aj = fabsf(ref_x[j]);
    if (ai != aj)
        return ai > aj ? -1 : 1;
    return i < j ? -1 : i > j;
}
static int u32_cmp(const void *a, const void *b)
{
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    return i < j ? -1 : i > j;
}
/* idx(k) = the indices of the reference top-k of x(n), increasing. */
static void ref_topk(const float *x, size_t n, size_t k, uint32_t *idx)
{
    uint32_t *all = xmalloc(n * sizeof *all);
    for (size_t i = 0; i < n; i++)
        all[i] = (uint32_t)i;
    ref_x = x;
    qsort(all, n, sizeof *all, ref_cmp);
    memcpy(idx, all, k * sizeof *idx);
    qsort(idx, k, sizeof *idx, u32_cmp);
    free(all);
}

/* Compress x(n) with s, check the top-k output against the reference. */
static void check_topk_against_ref(const zs_comp_spec *s, const float *x, size_t n)
{
    size_t k = zs_comp_topk_k(s, n);
    unsigned char *out = xmalloc(zs_comp_bytes(s, n));
    float *approx = xmalloc(n * sizeof *approx);
    uint32_t *want = xmalloc(k * sizeof *want);
    zs_comp_compress(s, x, n, out, approx);
    ref_topk(x, n, k, want);
    size_t nonzero_slots = 0;
    for (size_t j = 0; j < k; j++) {
        uint32_t i = load_u32(out + 4 * j);
        EXPECT(i == want[j], "n=%zu k=%zu slot %zu: index %u, want %u", n, k, j, i, want[j]);
        float v = load_f32(out + 4 * k + 4 * j);
        EXPECT(memcmp(&v, &x[i], 4) == 0, "value of index %u", i);
        EXPECT1(approx[i] == x[i]);
    }
    /* the other elements decode to +0 */
    for (size_t i = 0, j = 0; i < n; i++) {
        if (j < k && want[j] == i) {
            j++;
            continue;
        }
        EXPECT(approx[i] == 0.0f && !signbit(approx[i]), "approx[%zu] = %g", i, approx[i]);
        nonzero_slots++;
    }
    ck_assert_uint_eq(nonzero_slots, n - k);
    free(out);
    free(approx);
    free(want);
}

/* ---- parsing, names, sizes ---- */

START_TEST(test_parse_accepts)
{
    zs_comp_spec s;
    ck_assert_int_eq(zs_comp_parse("none", &s), 0);
    ck_assert_int_eq(s.kind, ZS_COMP_NONE);
    ck_assert_int_eq(zs_comp_parse("int8", &s), 0);
    ck_assert_int_eq(s.kind, ZS_COMP_INT8);
    ck_assert_int_eq(zs_comp_parse("sign", &s), 0);
    ck_assert_int_eq(s.kind, ZS_COMP_SIGN);
    ck_assert_int_eq(zs_comp_parse("topk:0.01", &s), 0);
    ck_assert_int_eq(s.kind, ZS_COMP_TOPK);
    EXPECT1(s.topk_fraction == 0.01);
    ck_assert_int_eq(zs_comp_parse("topk:1", &s), 0);
    EXPECT1(s.topk_fraction == 1.0);
    ck_assert_int_eq(zs_comp_parse("topk:1e-3", &s), 0);
    EXPECT1(s.topk_fraction == 1e-3);
    ck_assert_int_eq(zs_comp_parse("topk:.5", &s), 0);
    EXPECT1(s.topk_fraction == 0.5);
}
END_TEST

START_TEST(test_parse_rejects)
{
    static const char *const bad[] = {
        "", "topk", "topk:", "topk:0", "topk:-0.1", "topk:1.5", "topk:nan", "topk:inf",
        "topk: 0.1", "topk:0.01x", "topk:+0.5", "INT8", "int8 ", " sign", "fp16", "top-k:0.1",
        "topk:0.5\nint8", "qsgd\tbits",
    };
    for (size_t t = 0; t < sizeof bad / sizeof bad[0]; t++) {
        zs_comp_spec s = {ZS_COMP_SIGN, 0.25};
        zs_error_clear();
        EXPECT(zs_comp_parse(bad[t], &s) != 0, "accepted \"%s\"", bad[t]);
        const char *m = zs_error_msg();
        EXPECT(strchr(m, '\n') == NULL && strchr(m, '\t') == NULL, "not one line: %s", m);
        EXPECT(strstr(m, "none") && strstr(m, "int8") && strstr(m, "sign") &&
                      strstr(m, "topk:"), "accepted forms missing: %s", m);
        /* the bad text is named (control characters shown as '?') */
        char shown[64];
        size_t i = 0;
        for (; bad[t][i] && i < sizeof shown - 1; i++)
            shown[i] = (bad[t][i] == '\n' || bad[t][i] == '\t') ? '?' : bad[t][i];
        shown[i] = '\0';
        char quoted[80];
        snprintf(quoted, sizeof quoted, "\"%s\"", shown);
        EXPECT(strstr(m, quoted) != NULL, "bad text %s not named: %s", quoted, m);
        /* *out is left unchanged */
        ck_assert_int_eq(s.kind, ZS_COMP_SIGN);
        EXPECT1(s.topk_fraction == 0.25);
    }
    zs_comp_spec s;
    zs_error_clear();
    ck_assert_int_ne(zs_comp_parse(NULL, &s), 0);
    ck_assert_str_ne(zs_error_msg(), "");
}
END_TEST

START_TEST(test_name_roundtrip)
{
    static const char *const texts[] = {"none", "int8", "sign", "topk:0.01", "topk:1", "topk:0.5",
                                        "topk:0.001", "topk:0.1234567891234"};
    char buf[64];
    for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++) {
        zs_comp_spec s = spec_of(texts[t]);
        ck_assert_str_eq(zs_comp_name(&s, buf, sizeof buf), texts[t]);
        zs_comp_spec back = spec_of(buf);
        ck_assert_int_eq(back.kind, s.kind);
        if (s.kind == ZS_COMP_TOPK)
            EXPECT1(back.topk_fraction == s.topk_fraction);
    }
    zs_comp_spec e = spec_of("topk:1e-3");
    ck_assert_str_eq(zs_comp_name(&e, buf, sizeof buf), "topk:0.001");
    /* truncation keeps the buffer terminated */
    char small[5];
    zs_comp_spec q = spec_of("topk:0.25");
    ck_assert_str_eq(zs_comp_name(&q, small, sizeof small), "topk");
}
END_TEST

START_TEST(test_topk_k)
{
    zs_comp_spec s = spec_of("topk:0.01");
    static const size_t want[NSIZES] = {0, 1, 3, 3, 3, 10};
    for (size_t t = 0; t < NSIZES; t++)
        ck_assert_uint_eq(zs_comp_topk_k(&s, sizes[t]), want[t]);
    ck_assert_uint_eq(zs_comp_topk_k(&s, 100), 1);
    ck_assert_uint_eq(zs_comp_topk_k(&s, 101), 2);
    ck_assert_uint_eq(zs_comp_topk_k(&s, 1000000), 10000);
    /* decimal fractions whose double is slightly above the decimal */
    zs_comp_spec s7 = spec_of("topk:0.07");
    ck_assert_uint_eq(zs_comp_topk_k(&s7, 100), 7);
    ck_assert_uint_eq(zs_comp_topk_k(&s7, 101), 8);
    zs_comp_spec s3 = spec_of("topk:0.3");
    ck_assert_uint_eq(zs_comp_topk_k(&s3, 10), 3);
    zs_comp_spec s1 = spec_of("topk:1");
    ck_assert_uint_eq(zs_comp_topk_k(&s1, 257), 257);
    zs_comp_spec tiny = spec_of("topk:1e-9");
    ck_assert_uint_eq(zs_comp_topk_k(&tiny, 1000), 1);
}
END_TEST

START_TEST(test_bytes)
{
    zs_comp_spec none = spec_of("none"), topk = spec_of("topk:0.01");
    zs_comp_spec int8 = spec_of("int8"), sign = spec_of("sign");
    /* n = 0, 1, 255, 256, 257, 1000 */
    static const size_t w_none[NSIZES] = {0, 4, 1020, 1024, 1028, 4000};
    static const size_t w_topk[NSIZES] = {0, 8, 24, 24, 24, 80};
    static const size_t w_int8[NSIZES] = {0, 5, 259, 260, 265, 1016};
    static const size_t w_sign[NSIZES] = {0, 5, 36, 36, 41, 141};
    for (size_t t = 0; t < NSIZES; t++) {
        ck_assert_uint_eq(zs_comp_bytes(&none, sizes[t]), w_none[t]);
        ck_assert_uint_eq(zs_comp_bytes(&topk, sizes[t]), w_topk[t]);
        ck_assert_uint_eq(zs_comp_bytes(&int8, sizes[t]), w_int8[t]);
        ck_assert_uint_eq(zs_comp_bytes(&sign, sizes[t]), w_sign[t]);
    }
}
END_TEST

/* ---- round trip and layout ---- */

START_TEST(test_roundtrip_bitexact)
{
    static const char *const texts[] = {"none", "topk:0.01", "topk:0.3", "topk:1", "int8", "sign"};
    rng_seed(1);
    for (size_t c = 0; c < sizeof texts / sizeof texts[0]; c++) {
        zs_comp_spec s = spec_of(texts[c]);
        for (size_t t = 0; t < NSIZES + 1; t++) {
            size_t n = t < NSIZES ? sizes[t] : 4099;
            size_t bytes = zs_comp_bytes(&s, n);
            float *x = xmalloc(n * sizeof *x), *approx = xmalloc(n * sizeof *x);
            float *acc = xmalloc(n * sizeof *x), *base = xmalloc(n * sizeof *x);
            unsigned char *out = xmalloc(bytes + 1);
            fill_uniform(x, n, 3.0f);
            if (n > 10) {            /* zeros, negative zeros, an all-zero block */
                x[3] = 0.0f;
                x[4] = -0.0f;
                if (n > 600)
                    for (size_t i = 256; i < 512; i++)
                        x[i] = (i & 1) ? -0.0f : 0.0f;
            }
            out[bytes] = 0xa5;       /* guard byte: the codec writes exactly `bytes` */
            zs_comp_compress(&s, x, n, out, approx);
            ck_assert_uint_eq(out[bytes], 0xa5);
            /* into zeros: exactly approx */
            memset(acc, 0, n * sizeof *acc);
            zs_comp_decompress_add(&s, out, n, acc);
            size_t d = first_diff(acc, approx, n);
            EXPECT(d == n, "%s n=%zu: element %zu decodes to %a, approx %a",
                          texts[c], n, d, (double)acc[d], (double)approx[d]);
            /* into a non-zero accumulator: base + approx, one fp32 add each */
            fill_uniform(base, n, 10.0f);
            memcpy(acc, base, n * sizeof *acc);
            zs_comp_decompress_add(&s, out, n, acc);
            for (size_t i = 0; i < n; i++) {
                float want = base[i] + approx[i];
                EXPECT(memcmp(&acc[i], &want, 4) == 0, "%s n=%zu i=%zu", texts[c], n, i);
            }
            free(x);
            free(approx);
            free(acc);
            free(base);
            free(out);
        }
    }
}
END_TEST

START_TEST(test_layouts)
{
    /* int8: scale first, then the int8 values (round half away from zero) */
    float x[10] = {127.0f, -63.5f, 0.5f, -0.5f, 1.49f, 0.0f, -127.0f, 2.5f, -2.5f, 64.0f};
    float approx[10];
    zs_comp_spec s8 = spec_of("int8");
    unsigned char o8[4 + 10];
    zs_comp_compress(&s8, x, 10, o8, approx);
    EXPECT1(load_f32(o8) == 1.0f);
    static const signed char q[10] = {127, -64, 1, -1, 1, 0, -127, 3, -3, 64};
    for (int i = 0; i < 10; i++) {
        ck_assert_int_eq((signed char)o8[4 + i], q[i]);
        EXPECT1(approx[i] == (float)q[i]);
    }
    /* sign: scale first, then bits LSB first */
    zs_comp_spec ss = spec_of("sign");
    float y[10] = {1.0f, -2.0f, 3.0f, -0.0f, -4.0f, 0.0f, 5.0f, -6.0f, -7.0f, 8.0f};
    unsigned char os[4 + 2];
    zs_comp_compress(&ss, y, 10, os, approx);
    EXPECT1(load_f32(os) == 3.6f);   /* 36 / 10, rounded once */
    ck_assert_uint_eq(os[4], 0x6d);    /* bits 0..7: 1 0 1 1 0 1 1 0 */
    ck_assert_uint_eq(os[5], 0x02);    /* bits 8..9: 0 1, high bits 0 */
    /* topk: indices increasing, then values */
    zs_comp_spec st = spec_of("topk:0.3");
    float z[10] = {0.1f, -9.0f, 0.2f, 3.0f, -0.3f, 0.4f, 8.0f, 0.5f, -0.6f, 0.7f};
    unsigned char ot[24];
    zs_comp_compress(&st, z, 10, ot, approx);
    ck_assert_uint_eq(load_u32(ot + 0), 1);
    ck_assert_uint_eq(load_u32(ot + 4), 3);
    ck_assert_uint_eq(load_u32(ot + 8), 6);
    EXPECT1(load_f32(ot + 12) == -9.0f);
    EXPECT1(load_f32(ot + 16) == 3.0f);
    EXPECT1(load_f32(ot + 20) == 8.0f);
    /* unaligned buffers work */
    unsigned char big[1 + 24];
    zs_comp_compress(&st, z, 10, big + 1, approx);
    EXPECT1(memcmp(big + 1, ot, 24) == 0);
    float acc[10] = {0};
    zs_comp_decompress_add(&st, big + 1, 10, acc);
    EXPECT1(acc[1] == -9.0f && acc[3] == 3.0f && acc[6] == 8.0f && acc[0] == 0.0f);
}
END_TEST

/* ---- top-k ---- */

START_TEST(test_topk_reference)
{
    static const char *const texts[] = {"topk:0.01", "topk:0.1", "topk:0.5", "topk:0.999", "topk:1"};
    rng_seed(2);
    size_t n = 3001;
    float *x = xmalloc(n * sizeof *x);
    for (size_t c = 0; c < sizeof texts / sizeof texts[0]; c++) {
        zs_comp_spec s = spec_of(texts[c]);
        /* distinct random values */
        fill_uniform(x, n, 1.0f);
        check_topk_against_ref(&s, x, n);
        /* heavy ties: small integers of both signs (|-3| ties with |3|) */
        for (size_t i = 0; i < n; i++)
            x[i] = (float)((int)(rng_u64() % 7) - 3);
        check_topk_against_ref(&s, x, n);
        /* all equal magnitudes: the lowest indices win */
        for (size_t i = 0; i < n; i++)
            x[i] = (i % 3) ? 0.5f : -0.5f;
        check_topk_against_ref(&s, x, n);
        /* all zeros, signed */
        for (size_t i = 0; i < n; i++)
            x[i] = (i & 1) ? -0.0f : 0.0f;
        check_topk_against_ref(&s, x, n);
        /* magnitudes spanning exponents, subnormals, sorted both ways */
        for (size_t i = 0; i < n; i++)
            x[i] = ldexpf(1.0f + (float)(i % 5) / 8.0f, (int)(i % 300) - 150);
        check_topk_against_ref(&s, x, n);
        for (size_t i = 0; i < n; i++)
            x[i] = (float)i;
        check_topk_against_ref(&s, x, n);
        for (size_t i = 0; i < n; i++)
            x[i] = -(float)(n - i);
        check_topk_against_ref(&s, x, n);
    }
    /* small sizes */
    for (size_t t = 0; t < NSIZES; t++) {
        zs_comp_spec s = spec_of("topk:0.01");
        fill_uniform(x, sizes[t], 1.0f);
        check_topk_against_ref(&s, x, sizes[t]);
    }
    free(x);
}
END_TEST

START_TEST(test_topk_ties_lower_index)
{
    zs_comp_spec s = spec_of("topk:0.5");
    float x[8] = {1.0f, -2.0f, 2.0f, -1.0f, 2.0f, -2.0f, 1.0f, 0.5f};
    unsigned char out[32];
    float approx[8];
    zs_comp_compress(&s, x, 8, out, approx);
    /* four of magnitude 2 at indices 1, 2, 4, 5: all kept */
    static const uint32_t want[4] = {1, 2, 4, 5};
    for (int j = 0; j < 4; j++)
        ck_assert_uint_eq(load_u32(out + 4 * j), want[j]);
    /* six of magnitude 2, keep four: 0, 1, 2, 3 by index */
    float y[8] = {2.0f, -2.0f, 2.0f, -2.0f, 2.0f, -2.0f, 1.0f, 0.5f};
    zs_comp_compress(&s, y, 8, out, approx);
    for (uint32_t j = 0; j < 4; j++)
        ck_assert_uint_eq(load_u32(out + 4 * j), j);
    EXPECT1(approx[4] == 0.0f && approx[5] == 0.0f);
}
END_TEST

START_TEST(test_topk_large)
{
    /* n in the millions runs in linear time; checked against the reference */
    size_t n = (size_t)1 << 21;
    zs_comp_spec s = spec_of("topk:0.001");
    rng_seed(3);
    float *x = xmalloc(n * sizeof *x);
    fill_uniform(x, n, 1.0f);
    for (size_t i = 0; i < n; i += 97)   /* some ties near the top */
        x[i] = 0.9995f;
    check_topk_against_ref(&s, x, n);
    free(x);
}
END_TEST

/* ---- int8 ---- */

START_TEST(test_int8_error)
{
    zs_comp_spec s = spec_of("int8");
    rng_seed(4);
    size_t n = 1000;
    float *x = xmalloc(n * sizeof *x), *approx = xmalloc(n * sizeof *x);
    unsigned char *out = xmalloc(zs_comp_bytes(&s, n));
    static const float amps[] = {1e-30f, 1e-3f, 1.0f, 7.5f, 1e20f};
    for (size_t a = 0; a < sizeof amps / sizeof amps[0]; a++) {
        fill_uniform(x, n, amps[a]);
        zs_comp_compress(&s, x, n, out, approx);
        for (size_t b = 0; b * 256 < n; b++) {
            float scale = load_f32(out + 4 * b);
            float mx = 0.0f;
            for (size_t i = b * 256; i < n && i < (b + 1) * 256; i++)
                mx = fabsf(x[i]) > mx ? fabsf(x[i]) : mx;
            EXPECT1(scale == mx / 127.0f);
            for (size_t i = b * 256; i < n && i < (b + 1) * 256; i++) {
                double err = fabs((double)x[i] - (double)approx[i]);
                /* scale/2, plus the rounding of x/scale and of scale*q */
                double bound = (double)scale * (0.5 + 1e-5);
                EXPECT(err <= bound, "amp %g i=%zu: x %a approx %a scale %a", (double)amps[a],
                              i, (double)x[i], (double)approx[i], (double)scale);
                signed char q = (signed char)out[4 * 4 + i];
                EXPECT1(q != -128);
                EXPECT1(approx[i] == scale * (float)q);
            }
        }
    }
    /* multiples of the scale are exact (scales 2^-10 and 0.375, exact in fp32) */
    static const float scales[] = {0x1p-10f, 0.375f};
    for (size_t c = 0; c < 2; c++) {
        float sc = scales[c];
        for (size_t i = 0; i < n; i++)
            x[i] = sc * (float)((int)(rng_u64() % 255) - 127);
        for (size_t b = 0; b * 256 < n; b++)     /* each block reaches 127*scale */
            x[b * 256 + 7] = (b & 1) ? -127.0f * sc : 127.0f * sc;
        zs_comp_compress(&s, x, n, out, approx);
        for (size_t b = 0; b * 256 < n; b++)
            EXPECT1(load_f32(out + 4 * b) == sc);
        size_t d = first_diff(x, approx, n);
        EXPECT(d == n, "scale %g: x[%zu] = %a decodes to %a", (double)sc, d, (double)x[d],
                      (double)approx[d]);
    }
    /* a zero block: scale 0 and all zeros */
    memset(x, 0, n * sizeof *x);
    x[300] = 1.0f;
    zs_comp_compress(&s, x, n, out, approx);
    EXPECT1(load_f32(out) == 0.0f);
    for (size_t i = 0; i < 256; i++)
        EXPECT1((signed char)out[16 + i] == 0 && approx[i] == 0.0f);
    EXPECT1(approx[300] == 1.0f);
    free(x);
    free(approx);
    free(out);
}
END_TEST

/* ---- sign ---- */

START_TEST(test_sign_scale_and_signs)
{
    zs_comp_spec s = spec_of("sign");
    rng_seed(5);
    size_t n = 1000;
    float *x = xmalloc(n * sizeof *x), *approx = xmalloc(n * sizeof *x);
    unsigned char *out = xmalloc(zs_comp_bytes(&s, n));
    fill_uniform(x, n, 2.0f);
    for (size_t i = 512; i < 768; i++)   /* block 2 is all zeros */
        x[i] = 0.0f;
    x[5] = -0.0f;
    zs_comp_compress(&s, x, n, out, approx);
    for (size_t b = 0; b * 256 < n; b++) {
        size_t lo = b * 256, hi = lo + 256 < n ? lo + 256 : n;
        double sum = 0.0, sum_approx = 0.0;
        for (size_t i = lo; i < hi; i++)
            sum += fabs((double)x[i]);
        float want = (float)(sum / (double)(hi - lo));
        float scale = load_f32(out + 4 * b);
        EXPECT(scale == want, "block %zu: scale %a, mean |x| %a", b, (double)scale, (double)want);
        for (size_t i = lo; i < hi; i++) {
            EXPECT1(fabsf(approx[i]) == scale);
            if (scale > 0.0f)
                EXPECT((x[i] >= 0.0f) == (approx[i] > 0.0f), "i=%zu", i);
            sum_approx += fabs((double)approx[i]);
        }
        /* the block keeps its mean magnitude */
        EXPECT1(fabs(sum_approx - sum) <= 1e-6 * sum + 1e-30);
        if (b == 2)
            EXPECT1(scale == 0.0f);
    }
    EXPECT1(approx[5] > 0.0f);   /* -0.0 counts as non-negative */
    free(x);
    free(approx);
    free(out);
}
END_TEST

/* ---- error feedback ---- */

/* Run `rounds` of error feedback on a stationary x(n): v = x + e, transmit
 * approx(v), e = v - approx. Return max |e| over the second half of the
 * rounds in *emax, and max_i |mean transmitted_i - x_i| at the end. */
static double run_error_feedback(const zs_comp_spec *s, const float *x, size_t n, int rounds,
                                 double *emax)
{
    float *e = xmalloc(n * sizeof *e), *v = xmalloc(n * sizeof *v), *ap = xmalloc(n * sizeof *ap);
    float *acc = xmalloc(n * sizeof *acc);
    double *sent = xmalloc(n * sizeof *sent);
    unsigned char *out = xmalloc(zs_comp_bytes(s, n));
    memset(e, 0, n * sizeof *e);
    memset(sent, 0, n * sizeof *sent);
    *emax = 0.0;
    for (int r = 0; r < rounds; r++) {
        for (size_t i = 0; i < n; i++)
            v[i] = x[i] + e[i];
        zs_comp_compress(s, v, n, out, ap);
        memset(acc, 0, n * sizeof *acc);
        zs_comp_decompress_add(s, out, n, acc);   /* what the receiver gets */
        for (size_t i = 0; i < n; i++) {
            sent[i] += acc[i];
            e[i] = v[i] - ap[i];
            if (r >= rounds / 2 && fabsf(e[i]) > *emax)
                *emax = fabsf(e[i]);
        }
    }
    double dev = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(sent[i] / rounds - (double)x[i]);
        dev = d > dev ? d : dev;
    }
    free(e);
    free(v);
    free(ap);
    free(acc);
    free(sent);
    free(out);
    return dev;
}

START_TEST(test_error_feedback)
{
    size_t n = 1000;
    rng_seed(6);
    float *x = xmalloc(n * sizeof *x);
    fill_uniform(x, n, 1.0f);
    float xmax = 0.0f;
    double xsum = 0.0;
    for (size_t i = 0; i < n; i++) {
        xmax = fabsf(x[i]) > xmax ? fabsf(x[i]) : xmax;
        xsum += fabs((double)x[i]);
    }
    int rounds = 2000;
    double emax, dev;
    /* top-k 1%: k = 10. In steady state element i is sent whenever its
     * residual passes a threshold t with sum_i |x_i| / t = k picks a round,
     * so |e| stays below about sum|x| / k; allow twice that. */
    zs_comp_spec tk = spec_of("topk:0.01");
    dev = run_error_feedback(&tk, x, n, rounds, &emax);
    double bound = 2.0 * xsum / 10.0 + xmax;
    EXPECT(emax <= bound, "top-k residual %g exceeds %g", emax, bound);
    EXPECT(dev <= bound / rounds * 1.01 + 1e-6, "top-k mean deviation %g", dev);
    /* int8: the residual stays within half a scale step, roughly */
    zs_comp_spec i8 = spec_of("int8");
    dev = run_error_feedback(&i8, x, n, rounds, &emax);
    EXPECT(emax <= xmax / 127.0 * 2.0, "int8 residual %g", emax);
    EXPECT(dev <= 1e-3, "int8 mean deviation %g", dev);
    /* sign: no uniform bound (the residual creeps up slowly, far below the
     * linear growth of no feedback); the mean transmitted converges */
    zs_comp_spec sg = spec_of("sign");
    dev = run_error_feedback(&sg, x, n, rounds, &emax);
    EXPECT(emax <= 0.05 * rounds * xmax, "sign residual %g", emax);
    EXPECT(dev <= 0.05 * xmax, "sign mean deviation %g", dev);
    free(x);
}
END_TEST

/* ---- determinism ---- */

START_TEST(test_determinism)
{
    static const char *const texts[] = {"none", "topk:0.01", "topk:0.37", "int8", "sign"};
    size_t n = 5000;
    rng_seed(7);
    float *x = xmalloc(n * sizeof *x), *a1 = xmalloc(n * sizeof *x), *a2 = xmalloc(n * sizeof *x);
    fill_uniform(x, n, 4.0f);
    for (size_t i = 0; i < n; i += 13)
        x[i] = 1.5f;                     /* ties */
    for (size_t c = 0; c < sizeof texts / sizeof texts[0]; c++) {
        zs_comp_spec s = spec_of(texts[c]);
        size_t bytes = zs_comp_bytes(&s, n);
        unsigned char *o1 = xmalloc(bytes), *o2 = xmalloc(bytes);
        memset(o1, 0x11, bytes);
        memset(o2, 0xee, bytes);         /* different garbage before */
        zs_comp_compress(&s, x, n, o1, a1);
        zs_comp_compress(&s, x, n, o2, a2);
        EXPECT(memcmp(o1, o2, bytes) == 0, "%s: bytes differ", texts[c]);
        ck_assert_uint_eq(first_diff(a1, a2, n), n);
        free(o1);
        free(o2);
    }
    free(x);
    free(a1);
    free(a2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("compress");
    TCase *tp = tcase_create("parse");
    tcase_add_test(tp, test_parse_accepts);
    tcase_add_test(tp, test_parse_rejects);
    tcase_add_test(tp, test_name_roundtrip);
    tcase_add_test(tp, test_topk_k);
    tcase_add_test(tp, test_bytes);
    suite_add_tcase(s, tp);
    TCase *tc = tcase_create("codecs");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_roundtrip_bitexact);
    tcase_add_test(tc, test_layouts);
    tcase_add_test(tc, test_topk_reference);
    tcase_add_test(tc, test_topk_ties_lower_index);
    tcase_add_test(tc, test_topk_large);
    tcase_add_test(tc, test_int8_error);
    tcase_add_test(tc, test_sign_scale_and_signs);
    tcase_add_test(tc, test_error_feedback);
    tcase_add_test(tc, test_determinism);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
