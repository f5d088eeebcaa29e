/* zerosim — kernel tests: every fast backend kernel against a naive reference.
 *
 * sgemm and linear against triple loops in double, the fp32 <-> bf16/fp16
 * conversions (exhaustively where the type is 16 bits, by property on random
 * fp32 inputs otherwise), the optimizer kernels against a scalar double
 * reference, and the reductions and typed accumulation.
 *
 * The backend under test is "cpu", or the one named by $ZS_TEST_BACKEND.
 * Buffers are moved to and from the device with the copy kernels, so the same
 * tests run on any backend.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zerosim/backend.h"
#include "zerosim/layers.h"

#include "backend/backend_impl.h" /* white-box: the optional-member fallbacks */
#include "backend/cpu_math.h"     /* white-box: the CPU's exp and tanh */

/* ---------------------------------------------------------------------------
 * fixture: one backend per test, and every buffer freed in teardown
 * ------------------------------------------------------------------------- */

static zs_backend_t be;

#define MAX_BUFS 256
static void *host_bufs[MAX_BUFS];
static int n_host_bufs;
static void *dev_bufs[MAX_BUFS];
static int n_dev_bufs;

static void setup(void)
{
    const char *name = getenv("ZS_TEST_BACKEND");
    char err[256];
    be = zs_backend_init(name != NULL ? name : "cpu", err, sizeof err);
    ck_assert_msg(be != NULL, "backend init failed: %s", err);
    n_host_bufs = 0;
    n_dev_bufs = 0;
}

static void teardown(void)
{
    for (int i = 0; i < n_host_bufs; i++)
        free(host_bufs[i]);
    for (int i = 0; i < n_dev_bufs; i++)
        zs_backend_free(be, dev_bufs[i]);
    zs_backend_release(be);
    be = NULL;
}

/* Zeroed host memory, freed in teardown. */
static void *hnew(size_t bytes)
{
    ck_assert(n_host_bufs < MAX_BUFS);
    void *p = calloc(1, bytes > 0 ? bytes : 1);
    ck_assert(p != NULL);
    host_bufs[n_host_bufs++] = p;
    return p;
}

/* Device copy of host memory (zeroed when src is NULL), freed in teardown. */
static void *dnew(const void *src, size_t bytes)
{
    ck_assert(n_dev_bufs < MAX_BUFS);
    void *p = zs_backend_alloc(be, bytes);
    ck_assert(p != NULL);
    dev_bufs[n_dev_bufs++] = p;
    if (src != NULL)
        zs_backend_copy_h2d(be, p, src, bytes);
    return p;
}

/* Host copy of device memory, freed in teardown. */
static void *down(const void *dev, size_t bytes)
{
    void *h = hnew(bytes);
    zs_backend_copy_d2h(be, h, dev, bytes);
    return h;
}

/* ---------------------------------------------------------------------------
 * deterministic random numbers (splitmix64)
 * ------------------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [-1, 1) */
static float rng_uniform(void)
{
    return (float)((double)(rng_next() >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static void rng_fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = scale * rng_uniform();
}

/* ck_assert_msg without Check's per-call bookkeeping (a write to the
 * runner for every passing assertion), for loops over 10^5 elements. */
#define CHECK_FAST(cond, ...)            \
    do {                                 \
        if (!(cond))                     \
            ck_abort_msg(__VA_ARGS__);   \
    } while (0)

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---------------------------------------------------------------------------
 * backend basics
 * ------------------------------------------------------------------------- */

START_TEST(test_backend_init)
{
    char err[256] = "untouched";
    ck_assert_str_eq(zs_backend_name(be), getenv("ZS_TEST_BACKEND") ? getenv("ZS_TEST_BACKEND") : "cpu");
    ck_assert_ptr_nonnull(strstr(zs_backend_list(), "cpu"));
    zs_backend_t bad = zs_backend_init("tpu9000", err, sizeof err);
    ck_assert_ptr_null(bad);
    ck_assert_msg(strstr(err, "tpu9000") != NULL && strstr(err, zs_backend_list()) != NULL,
                  "error should name the backend and the available ones: '%s'", err);
    ck_assert_ptr_null(strchr(err, '\n'));
    ck_assert_ptr_null(zs_backend_init(NULL, err, sizeof err));
    ck_assert_uint_eq(zs_dtype_size(ZS_DTYPE_F32), 4);
    ck_assert_uint_eq(zs_dtype_size(ZS_DTYPE_BF16), 2);
    ck_assert_uint_eq(zs_dtype_size(ZS_DTYPE_F16), 2);
    ck_assert_str_eq(zs_dtype_name(ZS_DTYPE_F32), "fp32");
    ck_assert_str_eq(zs_dtype_name(ZS_DTYPE_BF16), "bf16");
    ck_assert_str_eq(zs_dtype_name(ZS_DTYPE_F16), "fp16");
}
END_TEST

/* A target whose logit is far below the row's largest: its probability
 * underflows to 0 in float, and the loss must still be the finite
 * log-sum-exp value (log(1 + e^-300) + 300 ~ 300), on the CPU and the
 * portable backend, not inf. */
START_TEST(test_xent_underflow_finite)
{
    const char *names[] = {"cpu", "ref"};
    for (int k = 0; k < 2; k++) {
        char err[256];
        zs_backend_t b = zs_backend_init(names[k], err, sizeof err);
        ck_assert_msg(b != NULL, "%s", err);
        float logits[4] = {100.0f, -200.0f, 0.0f, 1.0f}, probs[4], loss;
        int32_t tgt = 1;
        zs_backend_softmax_xent_forward(b, &loss, probs, logits, &tgt, 1, 4);
        ck_assert_msg(isfinite(loss) && fabsf(loss - 300.0f) < 1e-3f,
                      "%s: loss %g for a target 300 below the row's largest", names[k],
                      (double)loss);
        tgt = 0; /* the ordinary case: -log p */
        zs_backend_softmax_xent_forward(b, &loss, probs, logits, &tgt, 1, 4);
        ck_assert_msg(fabsf(loss) < 1e-6f, "%s: loss %g for the likeliest target", names[k],
                      (double)loss);
        zs_backend_release(b);
    }
}
END_TEST

START_TEST(test_backend_memory)
{
    /* alloc: zero-filled; copies round-trip; memset0 zeroes */
    size_t n = 1001;
    unsigned char *d = dnew(NULL, n);
    unsigned char *h = down(d, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_uint_eq(h[i], 0);
    unsigned char *src = hnew(n);
    for (size_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 7 + 3);
    zs_backend_copy_h2d(be, d, src, n);
    unsigned char *d2 = dnew(NULL, n);
    zs_backend_copy_d2d(be, d2, d, n);
    unsigned char *back = down(d2, n);
    ck_assert_mem_eq(back, src, n);
    zs_backend_memset0(be, d2, n);
    back = down(d2, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_uint_eq(back[i], 0);
    /* zero-byte operations are no-ops; free(NULL) is allowed */
    zs_backend_copy_h2d(be, d, src, 0);
    zs_backend_free(be, NULL);
}
END_TEST

START_TEST(test_cpu_alloc_aligned)
{
    if (strcmp(zs_backend_name(be), "cpu") != 0)
        return; /* device pointers of other backends are not host addresses */
    for (size_t bytes = 1; bytes < 5000; bytes = bytes * 3 + 1) {
        void *p = dnew(NULL, bytes);
        ck_assert_uint_eq((uintptr_t)p % 64, 0);
    }
}
END_TEST

/* The wrappers' fallbacks for the OPTIONAL table members (memset0, copy_d2d,
 * sumsq, count_nonfinite) give the same results as the members themselves:
 * run them on a copy of the table with those members set to NULL. */
START_TEST(test_optional_fallbacks)
{
    struct zs_backend_i tbl = *be->iface;
    tbl.release = NULL;
    tbl.memset0 = NULL;
    tbl.copy_d2d = NULL;
    tbl.sumsq = NULL;
    tbl.count_nonfinite = NULL;
    struct zs_backend bare = { &tbl, be->ctx };

    size_t n = 97;
    float x[97];
    for (size_t i = 0; i < n; i++)
        x[i] = (float)i * 0.25f - 7.0f;
    x[5] = INFINITY;
    x[50] = NAN;
    for (int t = 0; t < 3; t++) {
        size_t es = zs_dtype_size((zs_dtype)t);
        void *dt = dnew(NULL, n * es);
        float *dx = dnew(x, sizeof x);
        zs_backend_convert_from_f32(be, dt, (zs_dtype)t, dx, n);
        ck_assert_uint_eq(zs_backend_count_nonfinite(&bare, dt, (zs_dtype)t, n),
                          zs_backend_count_nonfinite(be, dt, (zs_dtype)t, n));
        ck_assert_uint_eq(zs_backend_count_nonfinite(&bare, dt, (zs_dtype)t, n), 2);
        ck_assert(zs_backend_sumsq(&bare, dt, (zs_dtype)t, 5) == zs_backend_sumsq(be, dt, (zs_dtype)t, 5));
    }
    float *a = dnew(x, sizeof x), *b = dnew(NULL, sizeof x);
    zs_backend_copy_d2d(&bare, b, a, sizeof x);
    ck_assert_mem_eq(down(b, sizeof x), x, sizeof x);
    zs_backend_memset0(&bare, b, sizeof x);
    float *z = down(b, sizeof x);
    for (size_t i = 0; i < n; i++)
        ck_assert_uint_eq(f2u(z[i]), 0);
}
END_TEST

/* ---------------------------------------------------------------------------
 * sgemm against a naive triple loop
 * ------------------------------------------------------------------------- */

/* Naive reference: C(m,n) = alpha*op(A)*op(B) + beta*C in double, row-major.
 * absref receives |alpha|*|op(A)|*|op(B)| + |beta*C|, the scale of the
 * rounding error bound. */
static void ref_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                      const float *b, int ldb, float beta, const float *c, int ldc,
                      double *ref, double *absref)
{
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double s = 0.0, sa = 0.0;
            for (int p = 0; p < k; p++) {
                double av = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                double bv = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                s += av * bv;
                sa += fabs(av * bv);
            }
            double c0 = c[(size_t)i * ldc + j];
            ref[(size_t)i * n + j] = (double)alpha * s + (double)beta * c0;
            absref[(size_t)i * n + j] = fabs((double)alpha) * sa + fabs((double)beta * c0);
        }
    }
}

/* (m, n, k) shapes of the sweep; each is run with all four transposes */
static const int gemm_shapes[][3] = {
    { 7, 5, 3 }, { 33, 17, 65 }, { 1, 1, 1 }, { 1, 9, 4 }, { 64, 48, 40 }, { 5, 3, 129 },
};
#define N_GEMM_SHAPES ((int)(sizeof gemm_shapes / sizeof gemm_shapes[0]))

/* Loop index: shape * 4 + transposes. Leading dimensions are padded by 3 so
 * that lda != the logical width is exercised too.
 * Tolerance: the classic bound |fl(C) - C| <= gamma_k * |alpha||A||B| + ...,
 * gamma_k ~ k*u (u = FLT_EPSILON/2); we allow (k+4)*FLT_EPSILON elementwise,
 * twice the bound with room for alpha and beta, plus 1e-30 absolute. */
START_TEST(test_sgemm_sweep)
{
    int shape = _i / 4, ta = (_i >> 1) & 1, tb = _i & 1;
    int m = gemm_shapes[shape][0], n = gemm_shapes[shape][1], k = gemm_shapes[shape][2];
    int pad = 3;
    int ar = ta ? k : m, ac = ta ? m : k; /* stored shape of A */
    int br = tb ? n : k, bc = tb ? k : n; /* stored shape of B */
    int lda = ac + pad, ldb = bc + pad, ldc = n + pad;
    float alpha = 0.75f, beta = -0.5f;
    rng_state = 1000u + (uint64_t)_i;
    float *a = hnew(sizeof(float) * ar * lda);
    float *b = hnew(sizeof(float) * br * ldb);
    float *c = hnew(sizeof(float) * m * ldc);
    rng_fill(a, (size_t)ar * lda, 1.0f);
    rng_fill(b, (size_t)br * ldb, 1.0f);
    rng_fill(c, (size_t)m * ldc, 1.0f);
    double *ref = hnew(sizeof(double) * m * n);
    double *absref = hnew(sizeof(double) * m * n);
    ref_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ref, absref);

    float *da = dnew(a, sizeof(float) * ar * lda);
    float *db = dnew(b, sizeof(float) * br * ldb);
    float *dc = dnew(c, sizeof(float) * m * ldc);
    zs_backend_sgemm(be, ta, tb, m, n, k, alpha, da, lda, db, ldb, beta, dc, ldc);
    float *got = down(dc, sizeof(float) * m * ldc);
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double r = ref[(size_t)i * n + j];
            double tol = (k + 4) * (double)FLT_EPSILON * absref[(size_t)i * n + j] + 1e-30;
            double e = fabs((double)got[(size_t)i * ldc + j] - r);
            ck_assert_msg(e <= tol, "sgemm ta=%d tb=%d %dx%dx%d: C[%d,%d]=%.9g ref %.9g, "
                          "error %.3g > tolerance %.3g", ta, tb, m, n, k, i, j,
                          (double)got[(size_t)i * ldc + j], r, e, tol);
        }
        /* the padding columns of C are untouched */
        for (int j = n; j < ldc; j++)
            ck_assert(f2u(got[(size_t)i * ldc + j]) == f2u(c[(size_t)i * ldc + j]));
    }
}
END_TEST

/* k == 0 leaves C = beta*C; m == 0 or n == 0 touches nothing. */
START_TEST(test_sgemm_degenerate)
{
    float c[6] = { 1, 2, 3, 4, 5, 6 };
    float dummy[1] = { 0 };
    float *dc = dnew(c, sizeof c);
    float *dd = dnew(dummy, sizeof dummy);
    zs_backend_sgemm(be, 0, 0, 2, 3, 0, 1.0f, dd, 1, dd, 3, 2.0f, dc, 3);
    float *got = down(dc, sizeof c);
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(got[i], 2.0f * c[i]);
    zs_backend_sgemm(be, 0, 0, 0, 3, 4, 1.0f, dd, 4, dd, 3, 0.0f, dc, 3);
    zs_backend_sgemm(be, 1, 1, 2, 0, 4, 1.0f, dd, 2, dd, 4, 0.0f, dc, 1);
    got = down(dc, sizeof c);
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(got[i], 2.0f * c[i]);
}
END_TEST

/* ---------------------------------------------------------------------------
 * linear layer against naive loops
 * ------------------------------------------------------------------------- */

/* Normalized error max|a - b| / (max|b| + 1e-8) of float a against double b. */
static double norm_err(const float *a, const double *b, size_t n)
{
    double emax = 0.0, bmax = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (e > emax || isnan(e))
            emax = isnan(e) ? INFINITY : e;
        if (fabs(b[i]) > bmax)
            bmax = fabs(b[i]);
    }
    return emax / (bmax + 1e-8);
}

/* Tolerance of the linear tests: normalized error < 1e-5 (fp32 has 6e-8
 * epsilon; the reductions here are at most 13 terms deep). */
#define LINEAR_TOL 1e-5

/* Loop index 0: with bias; 1: without bias (and without dinp/dbias). */
START_TEST(test_linear_naive)
{
    int bt = 6, c = 13, oc = 9;
    int with_bias = (_i == 0);
    rng_state = 77;
    float *inp = hnew(sizeof(float) * bt * c);
    float *w = hnew(sizeof(float) * oc * c);
    float *bias = hnew(sizeof(float) * oc);
    float *dout = hnew(sizeof(float) * bt * oc);
    rng_fill(inp, (size_t)bt * c, 1.0f);
    rng_fill(w, (size_t)oc * c, 0.5f);
    rng_fill(bias, oc, 1.0f);
    rng_fill(dout, (size_t)bt * oc, 1.0f);

    /* naive double forward and backward; gradients start from 0.25 to see += */
    double *ref_out = hnew(sizeof(double) * bt * oc);
    double *ref_dinp = hnew(sizeof(double) * bt * c);
    double *ref_dw = hnew(sizeof(double) * oc * c);
    double *ref_db = hnew(sizeof(double) * oc);
    for (int i = 0; i < bt; i++)
        for (int o = 0; o < oc; o++) {
            double s = with_bias ? bias[o] : 0.0;
            for (int j = 0; j < c; j++)
                s += (double)inp[i * c + j] * w[o * c + j];
            ref_out[i * oc + o] = s;
        }
    for (int i = 0; i < bt; i++)
        for (int j = 0; j < c; j++) {
            double s = 0.25;
            for (int o = 0; o < oc; o++)
                s += (double)dout[i * oc + o] * w[o * c + j];
            ref_dinp[i * c + j] = s;
        }
    for (int o = 0; o < oc; o++) {
        for (int j = 0; j < c; j++) {
            double s = 0.25;
            for (int i = 0; i < bt; i++)
                s += (double)dout[i * oc + o] * inp[i * c + j];
            ref_dw[o * c + j] = s;
        }
        double s = 0.25;
        for (int i = 0; i < bt; i++)
            s += dout[i * oc + o];
        ref_db[o] = s;
    }

    float *quarter = hnew(sizeof(float) * bt * c * oc);
    for (int i = 0; i < bt * c * oc; i++)
        quarter[i] = 0.25f;
    float *d_inp = dnew(inp, sizeof(float) * bt * c);
    float *d_w = dnew(w, sizeof(float) * oc * c);
    float *d_b = dnew(bias, sizeof(float) * oc);
    float *d_out = dnew(NULL, sizeof(float) * bt * oc);
    float *d_dout = dnew(dout, sizeof(float) * bt * oc);
    float *d_dinp = dnew(quarter, sizeof(float) * bt * c);
    float *d_dw = dnew(quarter, sizeof(float) * oc * c);
    float *d_db = dnew(quarter, sizeof(float) * oc);

    zs_linear_forward(be, d_out, d_inp, d_w, with_bias ? d_b : NULL, bt, c, oc);
    zs_linear_backward(be, with_bias ? d_dinp : NULL, d_dw, with_bias ? d_db : NULL, d_dout,
                       d_inp, d_w, bt, c, oc);
    double e = norm_err(down(d_out, sizeof(float) * bt * oc), ref_out, (size_t)bt * oc);
    ck_assert_msg(e < LINEAR_TOL, "linear forward: normalized error %.3g >= %.0e", e, LINEAR_TOL);
    e = norm_err(down(d_dw, sizeof(float) * oc * c), ref_dw, (size_t)oc * c);
    ck_assert_msg(e < LINEAR_TOL, "linear dweight: normalized error %.3g >= %.0e", e, LINEAR_TOL);
    float *dinp_h = down(d_dinp, sizeof(float) * bt * c);
    float *db_h = down(d_db, sizeof(float) * oc);
    if (with_bias) {
        e = norm_err(dinp_h, ref_dinp, (size_t)bt * c);
        ck_assert_msg(e < LINEAR_TOL, "linear dinp: normalized error %.3g >= %.0e", e, LINEAR_TOL);
        e = norm_err(db_h, ref_db, oc);
        ck_assert_msg(e < LINEAR_TOL, "linear dbias: normalized error %.3g >= %.0e", e, LINEAR_TOL);
    } else {
        /* not passed: left alone */
        for (int i = 0; i < bt * c; i++)
            ck_assert_float_eq(dinp_h[i], 0.25f);
        for (int i = 0; i < oc; i++)
            ck_assert_float_eq(db_h[i], 0.25f);
    }
}
END_TEST

/* ---------------------------------------------------------------------------
 * simple elementwise kernels (exact results)
 * ------------------------------------------------------------------------- */

START_TEST(test_elementwise_exact)
{
    int bt = 3, oc = 4;
    size_t n = (size_t)bt * oc;
    float x[12], y[12], bias[4];
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)i - 5.5f;
        y[i] = 0.5f * (float)i;
    }
    for (int o = 0; o < oc; o++)
        bias[o] = (float)(o + 1);
    float *dx = dnew(x, sizeof x), *dy = dnew(y, sizeof y), *db = dnew(bias, sizeof bias);
    float *dout = dnew(NULL, sizeof x);

    zs_backend_residual_forward(be, dout, dx, dy, n);
    float *h = down(dout, sizeof x);
    for (size_t i = 0; i < n; i++)
        ck_assert_float_eq(h[i], x[i] + y[i]);

    zs_backend_add_bias(be, dout, db, bt, oc);
    h = down(dout, sizeof x);
    for (size_t i = 0; i < n; i++)
        ck_assert_float_eq(h[i], x[i] + y[i] + bias[i % oc]);

    zs_backend_bias_backward(be, db, dx, bt, oc); /* db += colsum(x) */
    h = down(db, sizeof bias);
    for (int o = 0; o < oc; o++)
        ck_assert_float_eq(h[o], bias[o] + x[o] + x[o + 4] + x[o + 8]);

    zs_backend_axpy(be, dy, -2.0f, dx, n);
    h = down(dy, sizeof y);
    for (size_t i = 0; i < n; i++)
        ck_assert_float_eq(h[i], y[i] - 2.0f * x[i]);

    zs_backend_scale(be, dx, 0.5f, n);
    h = down(dx, sizeof x);
    for (size_t i = 0; i < n; i++)
        ck_assert_float_eq(h[i], 0.5f * x[i]);

    zs_backend_copy_h2d(be, dx, x, sizeof x);
    zs_backend_relu_forward(be, dout, dx, n);
    h = down(dout, sizeof x);
    for (size_t i = 0; i < n; i++)
        ck_assert_float_eq(h[i], x[i] > 0 ? x[i] : 0.0f);

    /* gelu at a few points, against the formula in double (tolerance 1e-6) */
    float gx[5] = { -3.0f, -1.0f, 0.0f, 1.0f, 2.5f };
    float *dgx = dnew(gx, sizeof gx), *dgy = dnew(NULL, sizeof gx);
    zs_backend_gelu_forward(be, dgy, dgx, 5);
    h = down(dgy, sizeof gx);
    for (int i = 0; i < 5; i++) {
        double v = gx[i];
        double ref = 0.5 * v * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (v + 0.044715 * v * v * v)));
        ck_assert_double_eq_tol(h[i], ref, 1e-6);
    }
}
END_TEST

/* ---------------------------------------------------------------------------
 * conversions
 * ------------------------------------------------------------------------- */

/* Every bf16 pattern: exact widening, and narrowing back gives the pattern
 * (NaN stays NaN, sign kept). */
START_TEST(test_bf16_exhaustive_roundtrip)
{
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = zs_bf16_to_f32((uint16_t)h);
        CHECK_FAST(f2u(f) == h << 16, "bf16 %04x widened wrongly", h);
        uint16_t back = zs_f32_to_bf16(f);
        if (isnan(f)) {
            CHECK_FAST((back & 0x7f80u) == 0x7f80u && (back & 0x7fu) != 0 &&
                          (back & 0x8000u) == (h & 0x8000u), "bf16 NaN %04x -> %04x", h, back);
        } else {
            CHECK_FAST(back == h, "bf16 %04x -> %g -> %04x", h, (double)f, back);
        }
    }
}
END_TEST

/* Every fp16 pattern: widening matches (1024 + m) * 2^(e-25) (or m * 2^-24
 * for subnormals) computed with ldexp, and narrowing back gives the pattern. */
START_TEST(test_f16_exhaustive_roundtrip)
{
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = zs_f16_to_f32((uint16_t)h);
        uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
        double sign = (h & 0x8000u) ? -1.0 : 1.0;
        if (e == 0x1f) {
            if (m == 0)
                CHECK_FAST(isinf(f) && (f < 0) == (sign < 0), "f16 %04x should be inf", h);
            else
                CHECK_FAST(isnan(f) && (signbit(f) != 0) == (sign < 0), "f16 %04x should be NaN", h);
        } else {
            double ref = e == 0 ? ldexp((double)m, -24) : ldexp(1024.0 + m, (int)e - 25);
            CHECK_FAST((double)f == sign * ref && (signbit(f) != 0) == (sign < 0),
                          "f16 %04x -> %.9g, expected %.9g", h, (double)f, sign * ref);
        }
        uint16_t back = zs_f32_to_f16(f);
        if (isnan(f))
            CHECK_FAST((back & 0x7c00u) == 0x7c00u && (back & 0x3ffu) != 0 &&
                          (back & 0x8000u) == (h & 0x8000u), "f16 NaN %04x -> %04x", h, back);
        else
            CHECK_FAST(back == h, "f16 %04x -> %.9g -> %04x", h, (double)f, back);
    }
}
END_TEST

struct cvt_case {
    uint32_t f32;   /* input bits */
    uint16_t want;  /* expected output bits */
    const char *what;
};

/* Hand-picked fp32 -> bf16 cases: ties to even, overflow, inf/NaN, subnormals. */
static const struct cvt_case bf16_cases[] = {
    { 0x3f800000u, 0x3f80u, "1.0 exact" },
    { 0x3f808000u, 0x3f80u, "1 + 2^-8: tie, down to even" },
    { 0x3f818000u, 0x3f82u, "1 + 3*2^-8: tie, up to even" },
    { 0x3f808001u, 0x3f81u, "just above a tie: up" },
    { 0x3f807fffu, 0x3f80u, "just below a tie: down" },
    { 0xbf808000u, 0xbf80u, "-(1 + 2^-8): tie, down to even" },
    { 0x7f7fffffu, 0x7f80u, "FLT_MAX rounds to inf" },
    { 0x7f7f7fffu, 0x7f7fu, "just below the top tie stays finite" },
    { 0x7f800000u, 0x7f80u, "+inf" },
    { 0xff800000u, 0xff80u, "-inf" },
    { 0x7fc00000u, 0x7fc0u, "quiet NaN" },
    { 0x00000001u, 0x0000u, "smallest fp32 subnormal rounds to 0" },
    { 0x00010000u, 0x0001u, "bf16 subnormal exact" },
    { 0x00018000u, 0x0002u, "subnormal tie, up to even" },
    { 0x80008000u, 0x8000u, "negative subnormal tie, down to -0" },
    { 0x80000000u, 0x8000u, "-0" },
};

/* Hand-picked fp32 -> fp16 cases. */
static const struct cvt_case f16_cases[] = {
    { 0x3f800000u, 0x3c00u, "1.0 exact" },
    { 0x3f801000u, 0x3c00u, "1 + 2^-11: tie, down to even" },
    { 0x3f803000u, 0x3c02u, "1 + 3*2^-11: tie, up to even" },
    { 0x3f801001u, 0x3c01u, "just above a tie: up" },
    { 0x3f800fffu, 0x3c00u, "just below a tie: down" },
    { 0x477fe000u, 0x7bffu, "65504 = max fp16" },
    { 0x477fefffu, 0x7bffu, "just below 65520 stays finite" },
    { 0x477ff000u, 0x7c00u, "65520: tie, rounds to even = inf" },
    { 0x49742400u, 0x7c00u, "1e6 overflows to inf" },
    { 0xc9742400u, 0xfc00u, "-1e6 overflows to -inf" },
    { 0x7f7fffffu, 0x7c00u, "FLT_MAX overflows to inf" },
    { 0x7f800000u, 0x7c00u, "+inf" },
    { 0xff800000u, 0xfc00u, "-inf" },
    { 0x33800000u, 0x0001u, "2^-24 = smallest subnormal" },
    { 0x33000000u, 0x0000u, "2^-25: tie, down to 0" },
    { 0x33000001u, 0x0001u, "just above 2^-25: up" },
    { 0x33c00000u, 0x0002u, "3*2^-25: tie, up to even 2" },
    { 0x387fc000u, 0x03ffu, "largest subnormal" },
    { 0x387fe000u, 0x0400u, "tie between largest subnormal and 2^-14: up to even" },
    { 0x38800000u, 0x0400u, "2^-14 = smallest normal" },
    { 0xb3800000u, 0x8001u, "-2^-24" },
    { 0x2edbe6ffu, 0x0000u, "1e-10 underflows to 0" },
    { 0xaedbe6ffu, 0x8000u, "-1e-10 underflows to -0" },
    { 0x00000001u, 0x0000u, "fp32 subnormal underflows to 0" },
    { 0x80000000u, 0x8000u, "-0" },
};

START_TEST(test_convert_cases)
{
    for (size_t i = 0; i < sizeof bf16_cases / sizeof bf16_cases[0]; i++) {
        uint16_t got = zs_f32_to_bf16(u2f(bf16_cases[i].f32));
        CHECK_FAST(got == bf16_cases[i].want, "bf16 %s: %08x -> %04x, expected %04x",
                      bf16_cases[i].what, bf16_cases[i].f32, got, bf16_cases[i].want);
    }
    for (size_t i = 0; i < sizeof f16_cases / sizeof f16_cases[0]; i++) {
        uint16_t got = zs_f32_to_f16(u2f(f16_cases[i].f32));
        CHECK_FAST(got == f16_cases[i].want, "f16 %s: %08x -> %04x, expected %04x",
                      f16_cases[i].what, f16_cases[i].f32, got, f16_cases[i].want);
    }
    /* NaNs whose payload sits only in the low bits must stay NaN */
    uint32_t nans[3] = { 0x7f800001u, 0xff800001u, 0x7fbfffffu };
    for (int i = 0; i < 3; i++) {
        ck_assert(isnan(zs_bf16_to_f32(zs_f32_to_bf16(u2f(nans[i])))));
        ck_assert(isnan(zs_f16_to_f32(zs_f32_to_f16(u2f(nans[i])))));
        ck_assert_uint_eq(zs_f32_to_bf16(u2f(nans[i])) & 0x8000u, (nans[i] >> 16) & 0x8000u);
        ck_assert_uint_eq(zs_f32_to_f16(u2f(nans[i])) & 0x8000u, (nans[i] >> 16) & 0x8000u);
    }
}
END_TEST

/* Random fp32 inputs: the result is a nearest representable value, and ties
 * go to the even pattern. Neighbours are h-1 and h+1 within one sign. Loop
 * index 0: bf16; 1: fp16 (inputs drawn within the fp16 finite range). */
START_TEST(test_convert_nearest_property)
{
    int is_f16 = _i;
    rng_state = 4242u + (uint64_t)_i;
    for (int it = 0; it < 200000; it++) {
        uint32_t u = (uint32_t)rng_next();
        if (is_f16) {
            /* exponent in [2^-26, 2^15]: subnormals, normals and the top binade */
            uint32_t exp = 127 - 26 + (uint32_t)(rng_next() % 42);
            u = (u & 0x807fffffu) | (exp << 23);
        } else if (((u >> 23) & 0xffu) == 0xffu) {
            continue;
        }
        float f = u2f(u);
        uint16_t h = is_f16 ? zs_f32_to_f16(f) : zs_f32_to_bf16(f);
        double x = fabs((double)f);
        uint16_t mag = h & 0x7fffu;
        uint16_t top = is_f16 ? 0x7c00u : 0x7f80u; /* inf */
        double got = fabs(is_f16 ? (double)zs_f16_to_f32(h) : (double)zs_bf16_to_f32(h));
        CHECK_FAST((h & 0x8000u) == ((u >> 16) & 0x8000u), "sign lost for %08x", u);
        if (mag == top) {
            /* overflowed: the largest finite must be strictly worse or a tie
             * lost to even (the largest finite has an odd mantissa) */
            uint16_t mx = (uint16_t)(top - 1);
            double fmax = is_f16 ? zs_f16_to_f32(mx) : zs_bf16_to_f32(mx);
            double ulp = is_f16 ? 32.0 : ldexp(1.0, 127 - 7);
            CHECK_FAST(x >= fmax + ulp / 2, "%08x overflowed too early", u);
            continue;
        }
        CHECK_FAST(mag < top, "finite %08x became inf/NaN", u);
        double err = fabs(got - x);
        if (mag > 0) {
            double lo = is_f16 ? zs_f16_to_f32((uint16_t)(mag - 1)) : zs_bf16_to_f32((uint16_t)(mag - 1));
            double elo = fabs(lo - x);
            CHECK_FAST(err < elo || (err == elo && !(mag & 1u)),
                          "%08x -> %04x: lower neighbour is nearer or the even tie", u, h);
        }
        if (mag + 1 < top) {
            double hi = is_f16 ? zs_f16_to_f32((uint16_t)(mag + 1)) : zs_bf16_to_f32((uint16_t)(mag + 1));
            double ehi = fabs(hi - x);
            CHECK_FAST(err < ehi || (err == ehi && !(mag & 1u)),
                          "%08x -> %04x: upper neighbour is nearer or the even tie", u, h);
        }
    }
}
END_TEST

/* The device conversion kernels agree with the host functions bit for bit;
 * F32 is a copy. Loop index: dtype. */
START_TEST(test_convert_kernels)
{
    zs_dtype t = (zs_dtype)_i;
    size_t n = 1027;
    size_t es = zs_dtype_size(t);
    rng_state = 99;
    float *x = hnew(sizeof(float) * n);
    rng_fill(x, n, 3.0f);
    x[0] = INFINITY;
    x[1] = -INFINITY;
    x[2] = NAN;
    x[3] = 1e6f;
    x[4] = 1e-7f;
    float *dx = dnew(x, sizeof(float) * n);
    void *dt = dnew(NULL, es * n);
    float *dback = dnew(NULL, sizeof(float) * n);
    zs_backend_convert_from_f32(be, dt, t, dx, n);
    zs_backend_convert_to_f32(be, dback, dt, t, n);
    unsigned char *typed = down(dt, es * n);
    float *back = down(dback, sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        uint16_t h16;
        float want;
        switch (t) {
        case ZS_DTYPE_BF16:
            memcpy(&h16, typed + 2 * i, 2);
            ck_assert_uint_eq(h16, zs_f32_to_bf16(x[i]));
            want = zs_bf16_to_f32(h16);
            break;
        case ZS_DTYPE_F16:
            memcpy(&h16, typed + 2 * i, 2);
            ck_assert_uint_eq(h16, zs_f32_to_f16(x[i]));
            want = zs_f16_to_f32(h16);
            break;
        default:
            want = x[i];
            break;
        }
        ck_assert_msg(f2u(back[i]) == f2u(want), "%s element %zu: %08x, expected %08x",
                      zs_dtype_name(t), i, f2u(back[i]), f2u(want));
    }
}
END_TEST

/* ---------------------------------------------------------------------------
 * reductions and typed accumulation
 * ------------------------------------------------------------------------- */

/* Fill a typed host buffer from fp32 values with the host conversions. */
static void host_store(void *dst, zs_dtype t, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (t == ZS_DTYPE_F32) {
            ((float *)dst)[i] = src[i];
        } else {
            uint16_t h = t == ZS_DTYPE_BF16 ? zs_f32_to_bf16(src[i]) : zs_f32_to_f16(src[i]);
            ((uint16_t *)dst)[i] = h;
        }
    }
}

static float host_load(const void *src, zs_dtype t, size_t i)
{
    if (t == ZS_DTYPE_F32)
        return ((const float *)src)[i];
    uint16_t h = ((const uint16_t *)src)[i];
    return t == ZS_DTYPE_BF16 ? zs_bf16_to_f32(h) : zs_f16_to_f32(h);
}

/* count_nonfinite counts exactly the inf/NaN elements (the largest finite
 * value of each type is not counted); sumsq is the double sum in index order
 * (compared for equality). Loop index: dtype. */
START_TEST(test_count_nonfinite_sumsq)
{
    zs_dtype t = (zs_dtype)_i;
    size_t n = 501;
    size_t es = zs_dtype_size(t);
    rng_state = 5;
    float *x = hnew(sizeof(float) * n);
    rng_fill(x, n, 2.0f);
    float *typed = hnew(es * n);
    host_store(typed, t, x, n);
    void *dx = dnew(typed, es * n);

    double ref = 0.0;
    for (size_t i = 0; i < n; i++) {
        double v = host_load(typed, t, i);
        ref += v * v;
    }
    ck_assert_uint_eq(zs_backend_count_nonfinite(be, dx, t, n), 0);
    ck_assert_msg(zs_backend_sumsq(be, dx, t, n) == ref, "sumsq %.17g != %.17g",
                  zs_backend_sumsq(be, dx, t, n), ref);
    ck_assert(zs_backend_sumsq(be, dx, t, 0) == 0.0);

    float maxfin = t == ZS_DTYPE_F32 ? FLT_MAX : t == ZS_DTYPE_BF16 ? zs_bf16_to_f32(0x7f7fu) : 65504.0f;
    x[0] = maxfin;
    x[1] = -maxfin;
    x[10] = INFINITY;
    x[20] = -INFINITY;
    x[30] = NAN;
    x[n - 1] = -NAN;
    host_store(typed, t, x, n);
    zs_backend_copy_h2d(be, dx, typed, es * n);
    ck_assert_uint_eq(zs_backend_count_nonfinite(be, dx, t, n), 4);
    ck_assert_uint_eq(zs_backend_count_nonfinite(be, dx, t, n - 1), 3);
    ck_assert_uint_eq(zs_backend_count_nonfinite(be, dx, t, 10), 0);
    ck_assert(!isfinite(zs_backend_sumsq(be, dx, t, n)));
}
END_TEST

/* dst = round(float(dst) + src), bit for bit against the host functions.
 * Loop index: dtype. */
START_TEST(test_accumulate_f32)
{
    zs_dtype t = (zs_dtype)_i;
    size_t n = 777;
    size_t es = zs_dtype_size(t);
    rng_state = 31;
    float *x = hnew(sizeof(float) * n);
    float *s = hnew(sizeof(float) * n);
    rng_fill(x, n, 4.0f);
    rng_fill(s, n, 0.01f);
    s[0] = 1e-3f;   /* below half an ulp of x[0] in bf16: dst unchanged */
    x[0] = 256.0f;
    float *typed = hnew(es * n);
    host_store(typed, t, x, n);
    void *dd = dnew(typed, es * n);
    float *ds = dnew(s, sizeof(float) * n);
    zs_backend_accumulate_f32(be, dd, t, ds, n);
    zs_backend_accumulate_f32(be, dd, t, ds, n);
    unsigned char *got = down(dd, es * n);
    for (size_t i = 0; i < n; i++) {
        float want = host_load(typed, t, i) + s[i];
        float tmp[1] = { want };
        unsigned char w[4];
        host_store(w, t, tmp, 1);
        want = host_load(w, t, 0) + s[i];
        tmp[0] = want;
        host_store(w, t, tmp, 1);
        ck_assert_msg(memcmp(got + i * es, w, es) == 0, "%s accumulate element %zu differs",
                      zs_dtype_name(t), i);
    }
    if (t == ZS_DTYPE_BF16)
        ck_assert_float_eq(host_load(got, t, 0), 256.0f);
}
END_TEST

/* ---------------------------------------------------------------------------
 * optimizer kernels against a scalar double reference
 * ------------------------------------------------------------------------- */

/* Tolerance for the optimizer: after OPT_STEPS steps every master, m, v and
 * momentum element is within 1e-6 * (|ref| + 1) of the double reference, 1
 * being the scale of the weights and gradients here (m and the momentum are
 * sums of terms of either sign, so a purely relative bound would not hold
 * where they cancel). fp32 rounding of a handful of operations per step stays
 * far below. The reference consumes the same typed gradients (converted
 * exactly to double). */
#define OPT_TOL 1e-6
#define OPT_STEPS 5

static void check_close(const float *got, const double *ref, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        double tol = OPT_TOL * (fabs(ref[i]) + 1.0);
        ck_assert_msg(fabs((double)got[i] - ref[i]) <= tol,
                      "%s[%zu] = %.9g, reference %.9g, tolerance %.3g", what, i,
                      (double)got[i], ref[i], tol);
    }
}

/* Loop index: gt * 3 + pt, all nine combinations of gradient and parameter
 * storage types; odd steps pass param == NULL. */
/* The CPU's own exp and tanh against double precision, in ulps of the
 * correctly rounded result, over 2^22 evenly spaced points of each range
 * (every 2^8-th float of exp's, a finer walk of tanh's core): exp on
 * [-87.3, 88.7] within 1.5 ulp, tanh on [-10, 10] within 2 ulp (README:
 * "Kernels" states the measured maxima). */
static double ulps_off(float got, double want)
{
    if (want == 0.0)
        return got == 0.0f ? 0.0 : 1e9;
    int e;
    frexp(want, &e);
    double ulp = ldexp(1.0, e - 24);
    if (fabs(want) < FLT_MIN)
        ulp = ldexp(1.0, -149);
    return fabs((double)got - want) / ulp;
}

START_TEST(test_cpu_exp_tanh_ulps)
{
    double worst_exp = 0.0, worst_tanh = 0.0;
    float at_exp = 0.0f, at_tanh = 0.0f;
    const int n = 1 << 22;
    for (int i = 0; i <= n; i++) {
        float x = -87.3f + (float)((88.7 + 87.3) * i / n);
        double u = ulps_off(zs_cpu_expf(x), exp((double)x));
        if (u > worst_exp) {
            worst_exp = u;
            at_exp = x;
        }
        float y = -10.0f + (float)(20.0 * i / n);
        u = ulps_off(zs_cpu_tanhf(y), tanh((double)y));
        if (u > worst_tanh) {
            worst_tanh = u;
            at_tanh = y;
        }
    }
    printf("cpu exp: at most %.3f ulp (at %.9g); tanh: at most %.3f ulp (at %.9g)\n", worst_exp,
           (double)at_exp, worst_tanh, (double)at_tanh);
    ck_assert_msg(worst_exp <= 1.5, "exp is %.3f ulp off at %.9g", worst_exp, (double)at_exp);
    ck_assert_msg(worst_tanh <= 2.0, "tanh is %.3f ulp off at %.9g", worst_tanh, (double)at_tanh);
    /* the ends: 0 below the normal range, infinity above, exact at 0 */
    ck_assert(zs_cpu_expf(-100.0f) == 0.0f && zs_cpu_expf(-INFINITY) == 0.0f);
    ck_assert(isinf(zs_cpu_expf(100.0f)) && zs_cpu_expf(0.0f) == 1.0f);
    ck_assert(zs_cpu_tanhf(0.0f) == 0.0f && zs_cpu_tanhf(20.0f) == 1.0f &&
              zs_cpu_tanhf(-20.0f) == -1.0f);
}
END_TEST

/* _i 0-8: AdamW over every (gradient, parameter) type pair; 9-17: the same
 * pairs as Adam with L2 regularization and without bias correction
 * (DeepSpeed's adam_w_mode false, bias_correction false). */
START_TEST(test_adamw_reference)
{
    int l2_mode = _i >= 9;
    zs_dtype gt = (zs_dtype)(_i % 9 / 3), pt = (zs_dtype)(_i % 3);
    size_t n = 203;
    rng_state = 600u + (uint64_t)_i;
    float *master = hnew(sizeof(float) * n);
    rng_fill(master, n, 1.0f);
    double *rm = hnew(sizeof(double) * n), *rv = hnew(sizeof(double) * n);
    double *rp = hnew(sizeof(double) * n);
    for (size_t i = 0; i < n; i++)
        rp[i] = master[i];
    float *d_master = dnew(master, sizeof(float) * n);
    float *d_m = dnew(NULL, sizeof(float) * n);
    float *d_v = dnew(NULL, sizeof(float) * n);
    void *d_param = dnew(NULL, zs_dtype_size(pt) * n);
    void *d_grad = dnew(NULL, zs_dtype_size(gt) * n);
    float *g32 = hnew(sizeof(float) * n);
    void *gtyped = hnew(zs_dtype_size(gt) * n);

    zs_optim_hparams h = { .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                           .weight_decay = 0.1f, .momentum = 0.0f, .grad_mul = 0.5f };
    if (l2_mode) {
        h.l2 = h.weight_decay;
        h.weight_decay = 0.0f;
    }
    for (int step = 1; step <= OPT_STEPS; step++) {
        h.bias_corr1 = l2_mode ? 1.0f : 1.0f - powf(h.beta1, (float)step);
        h.bias_corr2 = l2_mode ? 1.0f : 1.0f - powf(h.beta2, (float)step);
        rng_fill(g32, n, 2.0f);
        g32[0] = 0.0f;
        host_store(gtyped, gt, g32, n);
        zs_backend_copy_h2d(be, d_grad, gtyped, zs_dtype_size(gt) * n);
        zs_backend_adamw_step(be, d_master, d_m, d_v, d_grad, gt, (step & 1) ? d_param : NULL,
                              pt, n, &h);
        for (size_t i = 0; i < n; i++) {
            double g = (double)host_load(gtyped, gt, i) * h.grad_mul + h.l2 * rp[i];
            rm[i] = h.beta1 * rm[i] + (1.0 - h.beta1) * g;
            rv[i] = h.beta2 * rv[i] + (1.0 - h.beta2) * g * g;
            double mhat = rm[i] / h.bias_corr1, vhat = rv[i] / h.bias_corr2;
            rp[i] -= h.lr * (mhat / (sqrt(vhat) + h.eps) + h.weight_decay * rp[i]);
        }
        float *got_master = down(d_master, sizeof(float) * n);
        check_close(got_master, rp, n, "adamw master");
        check_close(down(d_m, sizeof(float) * n), rm, n, "adamw m");
        check_close(down(d_v, sizeof(float) * n), rv, n, "adamw v");
        if (step & 1) {
            /* param is the master rounded to pt, bit for bit */
            unsigned char *got_param = down(d_param, zs_dtype_size(pt) * n);
            unsigned char *want = hnew(zs_dtype_size(pt) * n);
            host_store(want, pt, got_master, n);
            ck_assert_msg(memcmp(got_param, want, zs_dtype_size(pt) * n) == 0,
                          "adamw param (%s) is not the rounded master", zs_dtype_name(pt));
        }
    }
}
END_TEST

/* SGD with momentum and decoupled weight decay; loop index as for AdamW. */
START_TEST(test_sgd_reference)
{
    zs_dtype gt = (zs_dtype)(_i / 3), pt = (zs_dtype)(_i % 3);
    size_t n = 203;
    rng_state = 700u + (uint64_t)_i;
    float *master = hnew(sizeof(float) * n);
    rng_fill(master, n, 1.0f);
    double *rb = hnew(sizeof(double) * n), *rp = hnew(sizeof(double) * n);
    for (size_t i = 0; i < n; i++)
        rp[i] = master[i];
    float *d_master = dnew(master, sizeof(float) * n);
    float *d_buf = dnew(NULL, sizeof(float) * n);
    void *d_param = dnew(NULL, zs_dtype_size(pt) * n);
    void *d_grad = dnew(NULL, zs_dtype_size(gt) * n);
    float *g32 = hnew(sizeof(float) * n);
    void *gtyped = hnew(zs_dtype_size(gt) * n);

    zs_optim_hparams h = { .lr = 5e-2f, .weight_decay = 0.01f, .momentum = 0.9f,
                           .grad_mul = 0.25f, .bias_corr1 = 1.0f, .bias_corr2 = 1.0f };
    for (int step = 1; step <= OPT_STEPS; step++) {
        rng_fill(g32, n, 2.0f);
        host_store(gtyped, gt, g32, n);
        zs_backend_copy_h2d(be, d_grad, gtyped, zs_dtype_size(gt) * n);
        zs_backend_sgd_step(be, d_master, d_buf, d_grad, gt, (step & 1) ? d_param : NULL, pt,
                            n, &h);
        for (size_t i = 0; i < n; i++) {
            double g = (double)host_load(gtyped, gt, i) * h.grad_mul;
            rb[i] = h.momentum * rb[i] + g;
            rp[i] -= (double)h.lr * h.weight_decay * rp[i];
            rp[i] -= h.lr * rb[i];
        }
        float *got_master = down(d_master, sizeof(float) * n);
        check_close(got_master, rp, n, "sgd master");
        check_close(down(d_buf, sizeof(float) * n), rb, n, "sgd momentum");
        if (step & 1) {
            unsigned char *got_param = down(d_param, zs_dtype_size(pt) * n);
            unsigned char *want = hnew(zs_dtype_size(pt) * n);
            host_store(want, pt, got_master, n);
            ck_assert_msg(memcmp(got_param, want, zs_dtype_size(pt) * n) == 0,
                          "sgd param (%s) is not the rounded master", zs_dtype_name(pt));
        }
    }
}
END_TEST

/* Two runs of the same AdamW steps give identical bits (determinism). */
START_TEST(test_adamw_deterministic)
{
    size_t n = 4099;
    rng_state = 11;
    float *init = hnew(sizeof(float) * n), *grad = hnew(sizeof(float) * n);
    rng_fill(init, n, 1.0f);
    rng_fill(grad, n, 1.0f);
    zs_optim_hparams h = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                           .weight_decay = 0.0f, .grad_mul = 1.0f, .bias_corr1 = 0.1f,
                           .bias_corr2 = 0.05f };
    float *res[2];
    for (int r = 0; r < 2; r++) {
        float *dm = dnew(init, sizeof(float) * n), *m = dnew(NULL, sizeof(float) * n);
        float *v = dnew(NULL, sizeof(float) * n), *g = dnew(grad, sizeof(float) * n);
        for (int s = 0; s < 3; s++)
            zs_backend_adamw_step(be, dm, m, v, g, ZS_DTYPE_F32, NULL, ZS_DTYPE_F32, n, &h);
        res[r] = down(dm, sizeof(float) * n);
    }
    ck_assert_mem_eq(res[0], res[1], sizeof(float) * n);
}
END_TEST

/* The CPU backend's kernels in each instruction set this CPU has (sse2,
 * avx2, avx512; ZEROSIM_CPU_KERNELS) give the same bytes: every kernel
 * compiled per set runs on the same inputs (lengths that leave vector
 * tails) and its outputs are compared with the baseline's byte for byte. */
#define ISA_N 2003 /* element-wise length (at least B·T·C): no vector width divides it */
#define ISA_B 2
#define ISA_T 37
#define ISA_C 24
#define ISA_NH 3
#define ISA_V 45

/* Runs the kernels in instruction set isa; their outputs, concatenated,
 * into out (bytes returned), or 0 when this CPU lacks the set. */
static size_t isa_run(const char *isa, unsigned char *out, size_t cap)
{
    char err[256];
    setenv("ZEROSIM_CPU_KERNELS", isa, 1);
    zs_backend_t b = zs_backend_init("cpu", err, sizeof err);
    unsetenv("ZEROSIM_CPU_KERNELS");
    if (b == NULL) {
        ck_assert_msg(strstr(err, "does not run") != NULL, "%s: %s", isa, err);
        return 0;
    }
    ck_assert_str_eq(zs_backend_cpu_kernels(), isa);
    size_t used = 0;
#define KEEP(ptr, bytes)                                                                           \
    do {                                                                                           \
        ck_assert(used + (bytes) <= cap);                                                          \
        memcpy(out + used, (ptr), (bytes));                                                        \
        used += (bytes);                                                                           \
    } while (0)
    enum { N = ISA_N, BT = ISA_B * ISA_T, C3 = 3 * ISA_C, TT = ISA_B * ISA_NH * ISA_T * ISA_T };
    static float x[N], y[N], z[N], w[N], g[N], m[N], v[N], ma[N];
    static float qkv[BT * C3], dqkv[BT * C3], att[TT], pre[TT], datt[TT], dpre[TT], o[BT * ISA_C];
    static float logits[BT * ISA_V], probs[BT * ISA_V], dlog[BT * ISA_V], losses[BT];
    static float mean[BT], rstd[BT], sums[2 * BT], lnw[ISA_C], lnb[ISA_C], dw[ISA_C], db[ISA_C];
    static uint16_t h16[N];
    static int32_t tgt[BT];
    srand(11);
    for (int i = 0; i < N; i++) {
        x[i] = 8.0f * (float)rand() / (float)RAND_MAX - 4.0f;
        z[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        g[i] = 0.01f * ((float)rand() / (float)RAND_MAX - 0.5f);
        ma[i] = z[i];
        m[i] = v[i] = 0.0f;
        y[i] = w[i] = 0.0f;
    }
    for (int i = 0; i < BT * C3; i++)
        qkv[i] = (float)rand() / (float)RAND_MAX - 0.5f, dqkv[i] = 0.0f;
    for (int i = 0; i < BT * ISA_V; i++)
        logits[i] = 4.0f * (float)rand() / (float)RAND_MAX - 2.0f;
    for (int i = 0; i < BT; i++)
        tgt[i] = rand() % ISA_V;
    for (int i = 0; i < ISA_C; i++)
        lnw[i] = 1.0f + 0.1f * (float)i, lnb[i] = 0.01f * (float)i, dw[i] = db[i] = 0.0f;

    zs_backend_gelu_forward(b, y, x, N);
    KEEP(y, sizeof y);
    zs_backend_gelu_backward(b, w, x, z, N);
    KEEP(w, sizeof w);
    zs_backend_relu_backward(b, w, x, z, N);
    KEEP(w, sizeof w);
    zs_backend_residual_forward(b, y, x, z, N);
    zs_backend_axpy(b, y, 0.3f, z, N);
    zs_backend_scale(b, y, 1.7f, N);
    KEEP(y, sizeof y);
    /* layernorm over (BT = N / C rows of) x */
    zs_backend_layernorm_forward(b, y, mean, rstd, x, lnw, lnb, BT, ISA_C);
    KEEP(y, BT * ISA_C * sizeof(float));
    KEEP(mean, sizeof mean);
    KEEP(rstd, sizeof rstd);
    zs_backend_layernorm_backward(b, w, dw, db, z, x, lnw, mean, rstd, BT, ISA_C);
    KEEP(w, BT * ISA_C * sizeof(float));
    KEEP(dw, sizeof dw);
    KEEP(db, sizeof db);
    zs_backend_add_bias(b, y, lnw, BT, ISA_C);
    zs_backend_bias_backward(b, db, z, BT, ISA_C);
    KEEP(y, BT * ISA_C * sizeof(float));
    KEEP(db, sizeof db);
    zs_backend_attention_forward(b, o, pre, att, qkv, ISA_B, ISA_T, ISA_C, ISA_NH);
    KEEP(o, sizeof o);
    KEEP(att, sizeof att);
    zs_backend_attention_backward(b, dqkv, dpre, datt, o, qkv, att, ISA_B, ISA_T, ISA_C, ISA_NH);
    KEEP(dqkv, sizeof dqkv);
    /* the Llama family's: RMSNorm over x, SwiGLU over x as (BT, 2 * C/2)
     * rows, the rotary embedding and grouped-query attention (NH 3, NKV 1,
     * HD 8) over qkv's rows as (NH + 2NKV) * HD = 40 wide */
    zs_backend_rmsnorm_forward(b, y, rstd, x, lnw, BT, ISA_C, 1e-5f);
    KEEP(y, BT * ISA_C * sizeof(float));
    KEEP(rstd, sizeof rstd);
    zs_backend_rmsnorm_backward(b, w, dw, z, x, lnw, rstd, BT, ISA_C);
    KEEP(w, BT * ISA_C * sizeof(float));
    KEEP(dw, sizeof dw);
    zs_backend_swiglu_forward(b, y, x, BT, ISA_C / 2);
    KEEP(y, BT * ISA_C / 2 * sizeof(float));
    zs_backend_swiglu_backward(b, w, x, z, BT, ISA_C / 2);
    KEEP(w, BT * ISA_C * sizeof(float));
    {
        enum { HD = 8, NKV = 1, ROW = (ISA_NH + 2 * NKV) * HD, POS0 = 3 };
        static float rope[(ISA_T + POS0) * HD], gqkv[ISA_B * ISA_T * ROW];
        static float dgqkv[ISA_B * ISA_T * ROW];
        zs_rope_params rp = { .theta = 500000.0, .llama3_scaling = 1, .factor = 8.0,
                              .low_freq_factor = 1.0, .high_freq_factor = 4.0,
                              .original_max_position = 16.0 };
        ck_assert_int_eq(zs_rope_table_fill(rope, 0, ISA_T + POS0, HD, &rp), 0);
        for (int i = 0; i < ISA_B * ISA_T; i++)
            memcpy(gqkv + (size_t)i * ROW, qkv + (size_t)i * C3, ROW * sizeof(float));
        zs_backend_rope_forward(b, gqkv, rope, ISA_T + POS0, ISA_B, ISA_T, ISA_NH + NKV, HD, ROW, POS0);
        KEEP(gqkv, sizeof gqkv);
        zs_backend_attention_gqa_forward(b, o, pre, att, gqkv, ISA_B, ISA_T, ISA_NH, NKV, HD);
        KEEP(o, sizeof o);
        KEEP(att, sizeof att);
        memset(dgqkv, 0, sizeof dgqkv);
        zs_backend_attention_gqa_backward(b, dgqkv, dpre, datt, o, gqkv, att, ISA_B, ISA_T,
                                          ISA_NH, NKV, HD);
        zs_backend_rope_backward(b, dgqkv, rope, ISA_T + POS0, ISA_B, ISA_T, ISA_NH + NKV, HD, ROW, POS0);
        KEEP(dgqkv, sizeof dgqkv);
    }
    zs_backend_softmax_xent_forward(b, losses, probs, logits, tgt, BT, ISA_V);
    zs_backend_softmax_xent_backward(b, dlog, probs, tgt, 0.25f, BT, ISA_V);
    KEEP(losses, sizeof losses);
    KEEP(dlog, sizeof dlog);
    zs_backend_xent_vocab_max(b, mean, logits, BT, ISA_V);
    zs_backend_xent_vocab_sums(b, sums, logits, mean, tgt, 0, BT, ISA_V);
    zs_backend_xent_vocab_finish(b, losses, probs, logits, mean, sums, BT, ISA_V);
    zs_backend_xent_vocab_backward(b, dlog, probs, tgt, 0, 0.25f, BT, ISA_V);
    KEEP(losses, sizeof losses);
    KEEP(dlog, sizeof dlog);
    zs_backend_convert_from_f32(b, h16, ZS_DTYPE_BF16, x, N);
    zs_backend_accumulate_f32(b, h16, ZS_DTYPE_BF16, z, N);
    zs_backend_add_typed(b, h16, h16, ZS_DTYPE_BF16, N);
    zs_backend_convert_to_f32(b, y, h16, ZS_DTYPE_BF16, N);
    KEEP(y, sizeof y);
    zs_optim_hparams h = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                           .weight_decay = 0.1f, .grad_mul = 0.5f, .bias_corr1 = 0.1f,
                           .bias_corr2 = 0.05f };
    for (int step = 0; step < 3; step++) {
        zs_backend_adamw_step(b, ma, m, v, g, ZS_DTYPE_F32, y, ZS_DTYPE_F32, N, &h);
        zs_backend_adamw_step(b, ma, m, v, h16, ZS_DTYPE_BF16, h16, ZS_DTYPE_BF16, N, &h);
    }
    KEEP(ma, sizeof ma);
    KEEP(m, sizeof m);
    KEEP(v, sizeof v);
    KEEP(h16, sizeof h16);
#undef KEEP
    zs_backend_release(b);
    return used;
}

START_TEST(test_cpu_isas_same_bytes)
{
    const char *name = getenv("ZS_TEST_BACKEND");
    if (name != NULL && strcmp(name, "cpu") != 0)
        return; /* the CPU backend's own instruction sets */
    enum { CAP = 1 << 20 };
    unsigned char *ref = malloc(CAP), *got = malloc(CAP);
    ck_assert(ref != NULL && got != NULL);
    size_t nref = isa_run("sse2", ref, CAP);
    ck_assert_msg(nref > 0, "the baseline set did not run");
    int ran = 0;
    const char *isas[] = { "avx2", "avx512" };
    for (int i = 0; i < 2; i++) {
        size_t n = isa_run(isas[i], got, CAP);
        if (n == 0) {
            printf("cpu kernels: %s not on this CPU, not compared\n", isas[i]);
            continue;
        }
        ck_assert_uint_eq(n, nref);
        size_t at = 0;
        while (at < n && ref[at] == got[at])
            at++;
        ck_assert_msg(at == n, "%s differs from sse2 at output byte %zu", isas[i], at);
        printf("cpu kernels: %s gives the same %zu bytes as sse2\n", isas[i], n);
        ran++;
    }
    /* an unknown set is refused with a line that names the choices */
    char err[256];
    setenv("ZEROSIM_CPU_KERNELS", "avx9", 1);
    zs_backend_t bad = zs_backend_init("cpu", err, sizeof err);
    unsetenv("ZEROSIM_CPU_KERNELS");
    ck_assert_ptr_null(bad);
    ck_assert_msg(strstr(err, "auto, sse2, avx2 or avx512") != NULL, "%s", err);
    free(ref);
    free(got);
    (void)ran;
}
END_TEST

/* ---------------------------------------------------------------------------
 * suite
 * ------------------------------------------------------------------------- */

static Suite *kernels_suite(void)
{
    Suite *s = suite_create("kernels");
    TCase *tc;

    tc = tcase_create("backend");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_backend_init);
    tcase_add_test(tc, test_backend_memory);
    tcase_add_test(tc, test_cpu_alloc_aligned);
    tcase_add_test(tc, test_optional_fallbacks);
    suite_add_tcase(s, tc);

    tc = tcase_create("sgemm");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_sgemm_sweep, 0, 4 * N_GEMM_SHAPES);
    tcase_add_test(tc, test_sgemm_degenerate);
    tcase_add_loop_test(tc, test_linear_naive, 0, 2);
    tcase_add_test(tc, test_elementwise_exact);
    suite_add_tcase(s, tc);

    tc = tcase_create("convert");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_bf16_exhaustive_roundtrip);
    tcase_add_test(tc, test_f16_exhaustive_roundtrip);
    tcase_add_test(tc, test_convert_cases);
    tcase_add_loop_test(tc, test_convert_nearest_property, 0, 2);
    tcase_add_loop_test(tc, test_convert_kernels, 0, 3);
    tcase_add_loop_test(tc, test_count_nonfinite_sumsq, 0, 3);
    tcase_add_loop_test(tc, test_accumulate_f32, 0, 3);
    suite_add_tcase(s, tc);

    tc = tcase_create("optim");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_adamw_reference, 0, 18);
    tcase_add_test(tc, test_cpu_exp_tanh_ulps);
    tcase_add_loop_test(tc, test_sgd_reference, 0, 9);
    tcase_add_test(tc, test_adamw_deterministic);
    tcase_add_test(tc, test_xent_underflow_finite);
    tcase_add_test(tc, test_cpu_isas_same_bytes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(kernels_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed > 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
