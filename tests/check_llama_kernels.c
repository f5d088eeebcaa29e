/* zerosim — the Llama family's kernels against float64 references.
 *
 * RMSNorm, SwiGLU, the rotary embedding and grouped-query attention: each
 * forward against a float64 reference written here (never the kernel), each
 * backward against central finite differences of that float64 forward
 * (L = sum(dout * out), step 1e-5 in double, so the difference itself is
 * good to about 1e-9), and the rotary table against long double. The
 * tolerances (normalized error, max|got - ref| / max|ref|):
 *   1e-6  forwards (fp32 roundings over sums of at most 37 terms, or
 *         RMSNorm's in double; measured at most 1.6e-7 on the CPU)
 *   5e-6  backwards against finite differences (measured at most 5.5e-7)
 *   0.5 ulp of float (+ 1e-12 relative) each rotary table entry
 * (ZS_TEST_VERBOSE=1 prints each normalized error.)
 * The grouped kernel with NKV == NH gives the multi-head kernel's bytes.
 * The instruction sets' bytes are compared in tests/check_kernels
 * (test_cpu_isas_same_bytes), with the other kernels.
 *
 * The backend under test is "cpu", or the one named by $ZS_TEST_BACKEND.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zerosim/backend.h"
#include "zerosim/error.h"

#define FWD_TOL 1e-6
#define BWD_TOL 5e-6
#define FD_STEP 1e-5

/* ---------------------------------------------------------------------------
 * fixture: one backend per test, every buffer freed in teardown
 * ------------------------------------------------------------------------- */

static zs_backend_t be;

#define MAX_BUFS 128
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
    n_host_bufs = n_dev_bufs = 0;
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

/* Device copy of n floats of host memory (zeroed when src is NULL). */
static float *dnew(const float *src, size_t n)
{
    ck_assert(n_dev_bufs < MAX_BUFS);
    float *p = zs_backend_alloc(be, n * sizeof(float));
    ck_assert(p != NULL);
    dev_bufs[n_dev_bufs++] = p;
    if (src != NULL)
        zs_backend_copy_h2d(be, p, src, n * sizeof(float));
    else
        zs_backend_memset0(be, p, n * sizeof(float));
    return p;
}

/* Host copy of n floats of device memory. */
static float *down(const float *dev, size_t n)
{
    float *h = hnew(n * sizeof(float));
    zs_backend_copy_d2h(be, h, dev, n * sizeof(float));
    return h;
}

static double *hnew_double(size_t n) { return hnew(n * sizeof(double)); }

/* ---------------------------------------------------------------------------
 * random numbers (splitmix64), errors, finite differences
 * ------------------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* n floats uniform in [-scale, scale), on the host, freed in teardown */
static float *hrand(size_t n, float scale)
{
    float *x = hnew(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = scale * (float)((double)(rng_next() >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    return x;
}

/* max|a - b| / max|b| (b's maximum floored at 1e-30); NaN in a counts as
 * infinite error. */
static double norm_err(const float *a, const double *b, size_t n)
{
    double emax = 0.0, bmax = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        emax = isnan(e) ? INFINITY : (e > emax ? e : emax);
        bmax = fabs(b[i]) > bmax ? fabs(b[i]) : bmax;
    }
    return emax / bmax;
}

#define CHECK_ERR(got, ref, n, tol, what)                                                          \
    do {                                                                                           \
        double e_ = norm_err((got), (ref), (n));                                                   \
        if (getenv("ZS_TEST_VERBOSE") != NULL)                                                     \
            printf("%s: normalized error %.3g\n", (what), e_);                                     \
        ck_assert_msg(e_ <= (tol), "%s: normalized error %.3g above %.3g", (what), e_, (tol));     \
    } while (0)

/* A float64 loss of the input vector x (n values), for finite differences. */
typedef double (*loss_fn)(const double *x, const void *arg);

/* grad(n) = central differences of loss at x (x restored on return). */
static void fd_grad(double *grad, double *x, size_t n, loss_fn loss, const void *arg)
{
    for (size_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + FD_STEP;
        double up = loss(x, arg);
        x[i] = keep - FD_STEP;
        double dn = loss(x, arg);
        x[i] = keep;
        grad[i] = (up - dn) / (2.0 * FD_STEP);
    }
}

static double *to_double(const float *x, size_t n)
{
    double *d = hnew_double(n);
    for (size_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

/* after - before: what an accumulating kernel added (in float, so within
 * an ulp of before's elements, which are at most 0.5 here) */
static float *added(const float *after, const float *before, size_t n)
{
    float *d = hnew(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        d[i] = after[i] - before[i];
    return d;
}

/* ---------------------------------------------------------------------------
 * RMSNorm
 * ------------------------------------------------------------------------- */

/* out(bt,c) = x / sqrt(mean(x^2) + eps) * w; rstd(bt) */
static void ref_rmsnorm(double *out, double *rstd, const double *x, const double *w, int bt, int c,
                        double eps)
{
    for (int i = 0; i < bt; i++) {
        double ss = 0.0;
        for (int j = 0; j < c; j++)
            ss += x[(size_t)i * c + j] * x[(size_t)i * c + j];
        double s = 1.0 / sqrt(ss / c + eps);
        for (int j = 0; j < c; j++)
            out[(size_t)i * c + j] = x[(size_t)i * c + j] * s * w[j];
        if (rstd)
            rstd[i] = s;
    }
}

struct rms_case { int bt, c; float eps; const double *dout; };

/* x = [inp (bt*c) | weight (c)] */
static double rms_loss(const double *x, const void *arg)
{
    const struct rms_case *k = arg;
    size_t n = (size_t)k->bt * k->c;
    double *out = malloc(n * sizeof(double)), l = 0.0;
    ck_assert(out != NULL);
    ref_rmsnorm(out, NULL, x, x + n, k->bt, k->c, k->eps);
    for (size_t i = 0; i < n; i++)
        l += k->dout[i] * out[i];
    free(out);
    return l;
}

/* Loop index: shape and eps (1e-5, 1e-6; rows of tiny values where eps
 * dominates; a row of Llama's 4096). */
START_TEST(test_rmsnorm)
{
    static const struct { int bt, c; float eps, scale; } cases[] = {
        { 5, 17, 1e-5f, 1.0f }, { 3, 64, 1e-6f, 2.0f }, { 4, 9, 1e-5f, 1e-3f },
        { 2, 4096, 1e-5f, 1.0f }, /* Llama's width: the sum of squares in double */
    };
    int bt = cases[_i].bt, c = cases[_i].c;
    float eps = cases[_i].eps;
    size_t n = (size_t)bt * c;
    rng_state = 100 + _i;
    float *x = hrand(n, cases[_i].scale), *w = hrand(c, 1.0f), *dy = hrand(n, 1.0f);
    float *dx0 = hrand(n, 0.5f), *dw0 = hrand(c, 0.5f);
    for (int j = 0; j < c; j++)
        w[j] += 1.0f;
    float *d_out = dnew(NULL, n), *d_rstd = dnew(NULL, bt), *d_x = dnew(x, n), *d_w = dnew(w, c);
    float *d_dy = dnew(dy, n), *d_dx = dnew(dx0, n), *d_dw = dnew(dw0, c);
    zs_backend_rmsnorm_forward(be, d_out, d_rstd, d_x, d_w, bt, c, eps);
    zs_backend_rmsnorm_backward(be, d_dx, d_dw, d_dy, d_x, d_w, d_rstd, bt, c);

    double *xw = hnew_double(n + c), *out = hnew_double(n), *rstd = hnew_double(bt);
    for (size_t i = 0; i < n; i++)
        xw[i] = x[i];
    for (int j = 0; j < c; j++)
        xw[n + j] = w[j];
    ref_rmsnorm(out, rstd, xw, xw + n, bt, c, eps);
    CHECK_ERR(down(d_out, n), out, n, FWD_TOL, "rmsnorm out");
    CHECK_ERR(down(d_rstd, bt), rstd, bt, FWD_TOL, "rmsnorm rstd");

    struct rms_case k = { bt, c, eps, to_double(dy, n) };
    double *g = hnew_double(n + c);
    fd_grad(g, xw, n + c, rms_loss, &k);
    CHECK_ERR(added(down(d_dx, n), dx0, n), g, n, BWD_TOL, "rmsnorm dinp");
    CHECK_ERR(added(down(d_dw, c), dw0, c), g + n, c, BWD_TOL, "rmsnorm dweight");
}
END_TEST

/* ---------------------------------------------------------------------------
 * SwiGLU
 * ------------------------------------------------------------------------- */

/* out(bt,f) = gate / (1 + e^-gate) * up over inp(bt,2f) = [gate | up] rows */
static void ref_swiglu(double *out, const double *inp, int bt, int f)
{
    for (int i = 0; i < bt; i++)
        for (int j = 0; j < f; j++) {
            double g = inp[(size_t)i * 2 * f + j], u = inp[(size_t)i * 2 * f + f + j];
            out[(size_t)i * f + j] = g / (1.0 + exp(-g)) * u;
        }
}

struct swiglu_case { int bt, f; const double *dout; };

static double swiglu_loss(const double *x, const void *arg)
{
    const struct swiglu_case *k = arg;
    size_t n = (size_t)k->bt * k->f;
    double *out = malloc(n * sizeof(double)), l = 0.0;
    ck_assert(out != NULL);
    ref_swiglu(out, x, k->bt, k->f);
    for (size_t i = 0; i < n; i++)
        l += k->dout[i] * out[i];
    free(out);
    return l;
}

/* Loop index 0: ordinary values; 1: gates out to +-100, where e^-gate
 * overflows or vanishes (silu must be 0 or the gate, never NaN). */
START_TEST(test_swiglu)
{
    int bt = 6, f = 37;
    size_t n = (size_t)bt * f;
    rng_state = 200 + _i;
    float *inp = hrand(2 * n, 4.0f), *dy = hrand(n, 1.0f), *dx0 = hrand(2 * n, 0.5f);
    if (_i == 1)
        for (int i = 0; i < bt; i++)
            for (int j = 0; j < f; j += 3)
                inp[(size_t)i * 2 * f + j] *= 25.0f; /* gates in [-100, 100) */
    float *d_inp = dnew(inp, 2 * n), *d_out = dnew(NULL, n), *d_dy = dnew(dy, n);
    float *d_dx = dnew(dx0, 2 * n);
    zs_backend_swiglu_forward(be, d_out, d_inp, bt, f);
    zs_backend_swiglu_backward(be, d_dx, d_inp, d_dy, bt, f);

    double *x = to_double(inp, 2 * n), *out = hnew_double(n), *g = hnew_double(2 * n);
    ref_swiglu(out, x, bt, f);
    CHECK_ERR(down(d_out, n), out, n, FWD_TOL, "swiglu out");
    struct swiglu_case k = { bt, f, to_double(dy, n) };
    fd_grad(g, x, 2 * n, swiglu_loss, &k);
    CHECK_ERR(added(down(d_dx, 2 * n), dx0, 2 * n), g, 2 * n, BWD_TOL, "swiglu dinp");
}
END_TEST

/* ---------------------------------------------------------------------------
 * rotary embedding
 * ------------------------------------------------------------------------- */

static const zs_rope_params rope_llama2 = { .theta = 10000.0 };
static const zs_rope_params rope_llama31 = { .theta = 500000.0, .llama3_scaling = 1,
                                             .factor = 8.0, .low_freq_factor = 1.0,
                                             .high_freq_factor = 4.0,
                                             .original_max_position = 8192.0 };

/* The frequency of pair i of a head of hd, in long double, written from
 * Llama 3.1's published rule (not from rope_table.c): wavelength 2 pi / f
 * below 8192/4 keeps f, above 8192/1 takes f/8, between them
 * (1 - s) f/8 + s f with s = (8192/wavelength - 1) / (4 - 1). */
static long double ref_inv_freq(int i, int hd, const zs_rope_params *p)
{
    long double f = powl((long double)p->theta, -2.0L * i / hd);
    if (!p->llama3_scaling)
        return f;
    long double wl = 2.0L * 3.14159265358979323846264338327950288L / f;
    long double lo = p->original_max_position / p->low_freq_factor;
    long double hi = p->original_max_position / p->high_freq_factor;
    if (wl < hi)
        return f;
    if (wl > lo)
        return f / p->factor;
    long double s = (p->original_max_position / wl - p->low_freq_factor)
                    / (p->high_freq_factor - p->low_freq_factor);
    return (1.0L - s) * f / p->factor + s * f;
}

/* |got - want| within half an ulp of float at want (and 1e-12 relative, for
 * long double's own error). */
static int within_half_ulp(float got, long double want)
{
    int e;
    frexpl(want, &e);
    long double ulp = ldexpl(1.0L, e - 24);
    if (fabsl(want) < FLT_MIN)
        ulp = ldexpl(1.0L, -149);
    return fabsl((long double)got - want) <= 0.5L * ulp + 1e-12L * fabsl(want);
}

/* The table: each entry the rounded cos or sin of the long double angle; a
 * hand-computed entry; Llama 3.1's three bands; the offset of the first
 * position; the refusals. */
START_TEST(test_rope_table)
{
    const zs_rope_params *ps[2] = { &rope_llama2, &rope_llama31 };
    int hd = 128, npos = 300;
    float *tab = hnew((size_t)npos * hd * sizeof(float));
    for (int pi = 0; pi < 2; pi++) {
        int first = pi == 0 ? 0 : 8000; /* the second straddles 8192 */
        ck_assert_int_eq(zs_rope_table_fill(tab, first, npos, hd, ps[pi]), 0);
        for (int r = 0; r < npos; r++)
            for (int i = 0; i < hd / 2; i++) {
                long double a = (long double)(first + r) * ref_inv_freq(i, hd, ps[pi]);
                float c = tab[(size_t)r * hd + i], s = tab[(size_t)r * hd + hd / 2 + i];
                ck_assert_msg(within_half_ulp(c, cosl(a)) && within_half_ulp(s, sinl(a)),
                              "table %d row %d pair %d: %.9g %.9g, want %.12Lg %.12Lg", pi, r, i,
                              (double)c, (double)s, cosl(a), sinl(a));
            }
    }
    /* by hand: theta 10^4, hd 4, position 1, pair 1: angle 10^4^(-1/2) = 0.01 */
    float small[3 * 4];
    ck_assert_int_eq(zs_rope_table_fill(small, 0, 3, 4, &rope_llama2), 0);
    ck_assert(small[4 + 1] == (float)0.99995000041666528);  /* cos 0.01 */
    ck_assert(small[4 + 3] == (float)0.0099998333341666645); /* sin 0.01 */
    ck_assert(small[0] == 1.0f && small[2] == 0.0f && small[4] == (float)0.54030230586813977);
    /* Llama 3.1's bands at hd 128: pair 0 (wavelength 6.3) keeps its
     * frequency, pair 63 (wavelength 2.6e6) is divided by 8 */
    ck_assert_int_eq(zs_rope_table_fill(tab, 1, 1, hd, &rope_llama31), 0);
    ck_assert(tab[hd / 2] == (float)sin(1.0));
    ck_assert(tab[hd / 2 + 63] == (float)sin(pow(500000.0, -126.0 / 128.0) / 8.0));
    /* the first position only shifts the rows */
    float *t0 = hnew((size_t)40 * hd * sizeof(float)), *t1 = hnew((size_t)30 * hd * sizeof(float));
    ck_assert_int_eq(zs_rope_table_fill(t0, 0, 40, hd, &rope_llama31), 0);
    ck_assert_int_eq(zs_rope_table_fill(t1, 10, 30, hd, &rope_llama31), 0);
    ck_assert_mem_eq(t0 + (size_t)10 * hd, t1, (size_t)30 * hd * sizeof(float));
    /* refusals, one line each */
    zs_rope_params bad = rope_llama31;
    ck_assert_int_ne(zs_rope_table_fill(tab, 0, 1, 7, &rope_llama2), 0);
    ck_assert_msg(strstr(zs_error_msg(), "head size 7") != NULL, "%s", zs_error_msg());
    bad.high_freq_factor = 1.0;
    ck_assert_int_ne(zs_rope_table_fill(tab, 0, 1, hd, &bad), 0);
    ck_assert_msg(strstr(zs_error_msg(), "low_freq_factor") != NULL, "%s", zs_error_msg());
    bad = rope_llama2;
    bad.theta = 0.0;
    ck_assert_int_ne(zs_rope_table_fill(tab, 0, 1, hd, &bad), 0);
    ck_assert_msg(strstr(zs_error_msg(), "rope_theta") != NULL, "%s", zs_error_msg());
}
END_TEST

struct rope_case {
    int b, t, nheads, hd, stride, pos0;
    const zs_rope_params *p;
    const double *dout;
};

/* x rows of stride, the first nheads heads rotated by absolute position
 * pos0 + t in Hugging Face's rotate_half pairing:
 * (x_i, x_{i+h}) -> (x_i cos - x_{i+h} sin, x_{i+h} cos + x_i sin). */
static void ref_rope(double *out, const double *x, const struct rope_case *k)
{
    size_t n = (size_t)k->b * k->t * k->stride;
    int h = k->hd / 2;
    memcpy(out, x, n * sizeof(double));
    for (int bi = 0; bi < k->b; bi++)
        for (int ti = 0; ti < k->t; ti++)
            for (int hh = 0; hh < k->nheads; hh++) {
                size_t o = ((size_t)bi * k->t + ti) * k->stride + (size_t)hh * k->hd;
                for (int i = 0; i < h; i++) {
                    double a = (double)((long double)(k->pos0 + ti) * ref_inv_freq(i, k->hd, k->p));
                    double c = cos(a), s = sin(a);
                    out[o + i] = x[o + i] * c - x[o + h + i] * s;
                    out[o + h + i] = x[o + h + i] * c + x[o + i] * s;
                }
            }
}

static double rope_loss(const double *x, const void *arg)
{
    const struct rope_case *k = arg;
    size_t n = (size_t)k->b * k->t * k->stride;
    double *out = malloc(n * sizeof(double)), l = 0.0;
    ck_assert(out != NULL);
    ref_rope(out, x, k);
    for (size_t i = 0; i < n; i++)
        l += k->dout[i] * out[i];
    free(out);
    return l;
}

/* Loop index 0: q and k of a packed GQA qkv (NH 4, NKV 2, HD 8: 6 heads
 * rotated, the 2 value heads untouched), Llama 2's table from position 0
 * and the sequence at absolute position 5; 1: q alone, Llama 3.1's scaled
 * table, positions from 9000 (a table starting there, pos0 0). */
START_TEST(test_rope)
{
    int b = 2, t = 7, hd = 8, nh = 4, nkv = 2;
    struct rope_case k = { b, t, nh + nkv, hd, (nh + 2 * nkv) * hd, 5, &rope_llama2, NULL };
    int tab_first = 0; /* the table's first position: row r is position tab_first + r */
    if (_i == 1) {
        k.nheads = nh, k.stride = nh * hd, k.p = &rope_llama31, k.pos0 = 9000;
        tab_first = 9000;
    }
    size_t tab_rows = (size_t)(k.pos0 - tab_first + t + 3); /* reaching past the last token */
    size_t n = (size_t)b * t * k.stride;
    rng_state = 300 + _i;
    float *x = hrand(n, 1.0f), *dy = hrand(n, 1.0f);
    float *tab = hnew(tab_rows * hd * sizeof(float));
    ck_assert_int_eq(zs_rope_table_fill(tab, tab_first, (int)tab_rows, hd, k.p), 0);
    float *d_tab = dnew(tab, tab_rows * hd), *d_x = dnew(x, n), *d_dy = dnew(dy, n);
    int kernel_pos0 = k.pos0 - tab_first;
    zs_backend_rope_forward(be, d_x, d_tab, (int)tab_rows, b, t, k.nheads, hd, k.stride, kernel_pos0);
    zs_backend_rope_backward(be, d_dy, d_tab, (int)tab_rows, b, t, k.nheads, hd, k.stride, kernel_pos0);

    double *xd = to_double(x, n), *out = hnew_double(n), *g = hnew_double(n);
    ref_rope(out, xd, &k);
    float *got = down(d_x, n);
    CHECK_ERR(got, out, n, FWD_TOL, "rope forward");
    for (int r = 0; r < b * t; r++) /* what is not rotated keeps its bytes */
        ck_assert_mem_eq(got + (size_t)r * k.stride + (size_t)k.nheads * hd,
                         x + (size_t)r * k.stride + (size_t)k.nheads * hd,
                         (size_t)(k.stride - k.nheads * hd) * sizeof(float));
    k.dout = to_double(dy, n);
    fd_grad(g, xd, n, rope_loss, &k);
    CHECK_ERR(down(d_dy, n), g, n, BWD_TOL, "rope backward");
}
END_TEST

/* A sequence that runs past the table's last row is a programming error
 * that the wrapper stops (abort with the failed check), not a read past the
 * buffer. */
START_TEST(test_rope_past_table)
{
    float tab[4 * 8], x[2 * 8] = { 0 };
    ck_assert_int_eq(zs_rope_table_fill(tab, 0, 4, 8, &rope_llama2), 0);
    float *d_tab = dnew(tab, 4 * 8), *d_x = dnew(x, 2 * 8);
    zs_backend_rope_forward(be, d_x, d_tab, 4, 1, 2, 1, 8, 8, 2); /* rows 2, 3: fine */
    zs_backend_rope_forward(be, d_x, d_tab, 4, 1, 2, 1, 8, 8, 3); /* row 4 */
}
END_TEST

/* ---------------------------------------------------------------------------
 * grouped-query attention
 * ------------------------------------------------------------------------- */

struct gqa_case { int b, t, nh, nkv, hd; const double *dout; };

/* out(b,t,nh*hd), att(b,nh,t,t) or NULL: causal softmax(q.k / sqrt(hd)) v,
 * query head h reading key/value head h / (nh/nkv) of qkv(b,t,(nh+2nkv)hd) */
static void ref_gqa(double *out, double *att, const double *qkv, const struct gqa_case *k)
{
    int row = (k->nh + 2 * k->nkv) * k->hd, cq = k->nh * k->hd, group = k->nh / k->nkv;
    double *p = malloc((size_t)k->t * sizeof(double));
    ck_assert(p != NULL);
    for (int bi = 0; bi < k->b; bi++)
        for (int h = 0; h < k->nh; h++)
            for (int i = 0; i < k->t; i++) {
                const double *q = qkv + ((size_t)bi * k->t + i) * row + h * k->hd;
                size_t kvo = (size_t)cq + (size_t)(h / group) * k->hd;
                double m = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    const double *kk = qkv + ((size_t)bi * k->t + j) * row + kvo;
                    double dot = 0.0;
                    for (int d = 0; d < k->hd; d++)
                        dot += q[d] * kk[d];
                    p[j] = dot / sqrt((double)k->hd);
                    m = p[j] > m ? p[j] : m;
                }
                for (int j = 0; j <= i; j++)
                    sum += (p[j] = exp(p[j] - m));
                double *o = out + ((size_t)bi * k->t + i) * cq + h * k->hd;
                for (int d = 0; d < k->hd; d++)
                    o[d] = 0.0;
                for (int j = 0; j < k->t; j++) {
                    double a = j <= i ? p[j] / sum : 0.0;
                    if (att)
                        att[(((size_t)bi * k->nh + h) * k->t + i) * k->t + j] = a;
                    if (j > i)
                        continue;
                    const double *v = qkv + ((size_t)bi * k->t + j) * row + kvo + k->nkv * k->hd;
                    for (int d = 0; d < k->hd; d++)
                        o[d] += a * v[d];
                }
            }
    free(p);
}

static double gqa_loss(const double *x, const void *arg)
{
    const struct gqa_case *k = arg;
    size_t n = (size_t)k->b * k->t * k->nh * k->hd;
    double *out = malloc(n * sizeof(double)), l = 0.0;
    ck_assert(out != NULL);
    ref_gqa(out, NULL, x, k);
    for (size_t i = 0; i < n; i++)
        l += k->dout[i] * out[i];
    free(out);
    return l;
}

/* Loop index: (NH, NKV, HD, T): GQA, MQA, MHA; T 37 crosses the CPU's
 * 32-row tiles (finite differences on the shorter ones only). */
static const struct { int nh, nkv, hd, t; } gqa_cases[] = {
    { 4, 2, 8, 9 }, { 4, 1, 6, 7 }, { 3, 3, 4, 6 }, { 6, 2, 8, 37 }, { 8, 1, 4, 37 },
};

START_TEST(test_gqa)
{
    struct gqa_case k = { 2, gqa_cases[_i].t, gqa_cases[_i].nh, gqa_cases[_i].nkv,
                          gqa_cases[_i].hd, NULL };
    int row = (k.nh + 2 * k.nkv) * k.hd, cq = k.nh * k.hd;
    size_t nqkv = (size_t)k.b * k.t * row, nout = (size_t)k.b * k.t * cq;
    size_t natt = (size_t)k.b * k.nh * k.t * k.t;
    rng_state = 400 + _i;
    float *qkv = hrand(nqkv, 1.5f), *dy = hrand(nout, 1.0f), *dqkv0 = hrand(nqkv, 0.5f);
    float *d_qkv = dnew(qkv, nqkv), *d_out = dnew(NULL, nout), *d_pre = dnew(NULL, natt);
    float *d_att = dnew(NULL, natt), *d_dy = dnew(dy, nout), *d_dqkv = dnew(dqkv0, nqkv);
    float *d_dpre = dnew(NULL, natt), *d_datt = dnew(NULL, natt);
    zs_backend_attention_gqa_forward(be, d_out, d_pre, d_att, d_qkv, k.b, k.t, k.nh, k.nkv, k.hd);
    zs_backend_attention_gqa_backward(be, d_dqkv, d_dpre, d_datt, d_dy, d_qkv, d_att, k.b, k.t,
                                      k.nh, k.nkv, k.hd);
    double *x = to_double(qkv, nqkv), *out = hnew_double(nout), *att = hnew_double(natt);
    ref_gqa(out, att, x, &k);
    CHECK_ERR(down(d_out, nout), out, nout, FWD_TOL, "gqa out");
    CHECK_ERR(down(d_att, natt), att, natt, FWD_TOL, "gqa att");
    if (k.t > 16)
        return; /* finite differences cost O(n^2 T): on the short cases */
    double *g = hnew_double(nqkv);
    k.dout = to_double(dy, nout);
    fd_grad(g, x, nqkv, gqa_loss, &k);
    CHECK_ERR(added(down(d_dqkv, nqkv), dqkv0, nqkv), g, nqkv, BWD_TOL, "gqa dqkv");
}
END_TEST

/* NKV == NH: the grouped kernels give the multi-head kernels' bytes (the
 * layouts agree: (B,T,3C) with C = NH*HD). */
START_TEST(test_gqa_is_mha)
{
    int b = 2, t = 37, nh = 3, hd = 8, c = nh * hd;
    size_t nqkv = (size_t)b * t * 3 * c, nout = (size_t)b * t * c, natt = (size_t)b * nh * t * t;
    rng_state = 500;
    float *qkv = hrand(nqkv, 1.0f), *dy = hrand(nout, 1.0f);
    float *d_qkv = dnew(qkv, nqkv), *d_dy = dnew(dy, nout);
    float *res[2][5];
    for (int gqa = 0; gqa < 2; gqa++) {
        float *out = dnew(NULL, nout), *pre = dnew(NULL, natt), *att = dnew(NULL, natt);
        float *dqkv = dnew(NULL, nqkv), *dpre = dnew(NULL, natt), *datt = dnew(NULL, natt);
        if (gqa) {
            zs_backend_attention_gqa_forward(be, out, pre, att, d_qkv, b, t, nh, nh, hd);
            zs_backend_attention_gqa_backward(be, dqkv, dpre, datt, d_dy, d_qkv, att, b, t, nh,
                                              nh, hd);
        } else {
            zs_backend_attention_forward(be, out, pre, att, d_qkv, b, t, c, nh);
            zs_backend_attention_backward(be, dqkv, dpre, datt, d_dy, d_qkv, att, b, t, c, nh);
        }
        res[gqa][0] = down(out, nout), res[gqa][1] = down(pre, natt);
        res[gqa][2] = down(att, natt), res[gqa][3] = down(dqkv, nqkv);
        res[gqa][4] = down(dpre, natt);
    }
    const char *what[5] = { "out", "preatt", "att", "dqkv", "dpreatt" };
    size_t len[5] = { nout, natt, natt, nqkv, natt };
    for (int i = 0; i < 5; i++)
        ck_assert_msg(memcmp(res[0][i], res[1][i], len[i] * sizeof(float)) == 0,
                      "%s: grouped kernel with NKV == NH differs from the multi-head kernel",
                      what[i]);
}
END_TEST

/* ---------------------------------------------------------------------------
 * suite
 * ------------------------------------------------------------------------- */

static Suite *llama_kernels_suite(void)
{
    Suite *s = suite_create("llama_kernels");
    TCase *tc = tcase_create("llama");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_rmsnorm, 0, 4);
    tcase_add_loop_test(tc, test_swiglu, 0, 2);
    tcase_add_test(tc, test_rope_table);
    tcase_add_loop_test(tc, test_rope, 0, 2);
    tcase_add_test_raise_signal(tc, test_rope_past_table, SIGABRT);
    tcase_add_loop_test(tc, test_gqa, 0, (int)(sizeof gqa_cases / sizeof gqa_cases[0]));
    tcase_add_test(tc, test_gqa_is_mha);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(llama_kernels_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed > 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
