/* zerosim — layer gradient tests: every backward against finite differences.
 *
 * For each layer there is a naive forward in DOUBLE precision here. With a
 * fixed random R, the scalar objective is L = sum(out * R); its gradient with
 * respect to every input and weight is taken by central differences in double
 * (step FD_H) and compared with the fp32 analytic backward of the backend,
 * called with dout = R. The fp32 forward is compared with the double forward
 * too, and each backward is called twice to check that it accumulates.
 *
 * Tolerances (normalized error = max|a - b| / (max|b| + 1e-8)):
 *   FWD_TOL  1e-5  fp32 forward against the double forward;
 *   GRAD_TOL 1e-4  fp32 backward against double central differences (the
 *                  differences themselves are accurate to ~1e-9 here);
 *   ACC_TOL  1e-6  second backward call against twice the first.
 *
 * Dimension letters as in zerosim/backend.h. The backend under test is "cpu",
 * or the one named by $ZS_TEST_BACKEND.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zerosim/backend.h"
#include "zerosim/layers.h"

#define FWD_TOL 1e-5
#define GRAD_TOL 1e-4
#define ACC_TOL 1e-6
#define FD_H 1e-6

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

/* Host copy of n floats of device memory, freed in teardown. */
static float *down(const float *dev, size_t n)
{
    float *h = hnew(n * sizeof(float));
    zs_backend_copy_d2h(be, h, dev, n * sizeof(float));
    return h;
}

/* ---------------------------------------------------------------------------
 * deterministic random numbers (xorshift64*)
 * ------------------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

/* uniform in [-1, 1), exactly representable in fp32 */
static float rng_uniform(void)
{
    return (float)((double)(rng_next() >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

/* n random floats of [-scale, scale) + shift, on the host (freed in teardown) */
static float *rand_floats(size_t n, float scale, float shift)
{
    float *x = hnew(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = shift + scale * rng_uniform();
    return x;
}

/* double copy of a float array (freed in teardown) */
static double *to_double(const float *x, size_t n)
{
    double *d = hnew(n * sizeof(double));
    for (size_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

/* ---------------------------------------------------------------------------
 * comparisons and finite differences
 * ------------------------------------------------------------------------- */

/* Normalized error max|a - b| / (max|b| + 1e-8); NaN counts as infinite. */
static double norm_err(const float *a, const double *b, size_t n)
{
    double emax = 0.0, bmax = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (isnan(e))
            e = INFINITY;
        if (e > emax)
            emax = e;
        if (fabs(b[i]) > bmax)
            bmax = fabs(b[i]);
    }
    return emax / (bmax + 1e-8);
}

static void check_err(const float *a, const double *b, size_t n, double tol, const char *what)
{
    double e = norm_err(a, b, n);
    ck_assert_msg(e < tol, "%s: normalized error max|a-b|/(max|b|+1e-8) = %.3g, tolerance %.0e",
                  what, e, tol);
}

/* The second of two accumulating backward calls (from zero) must hold twice
 * the first, within ACC_TOL. */
static void check_doubled(const float *once, const float *twice, size_t n, const char *what)
{
    double *ref = hnew(n * sizeof(double));
    for (size_t i = 0; i < n; i++)
        ref[i] = 2.0 * (double)once[i];
    double e = norm_err(twice, ref, n);
    ck_assert_msg(e < ACC_TOL, "%s does not accumulate: two calls give %.3g x 2 error, "
                  "tolerance %.0e", what, e, ACC_TOL);
}

/* A layer's double forward and the objective L = sum(out * r). */
typedef struct {
    void (*forward)(const void *st, double *out); /* out is (nout) */
    const void *st;                               /* the layer's inputs */
    size_t nout;
    const double *r; /* (nout) fixed random weights */
    double *out;     /* (nout) scratch */
} objective;

static double objective_eval(const objective *o)
{
    o->forward(o->st, o->out);
    double l = 0.0;
    for (size_t i = 0; i < o->nout; i++)
        l += o->out[i] * o->r[i];
    return l;
}

/* g(N) = dL/dx by central differences, perturbing x(N) (which the objective
 * reads) in place and restoring it. */
static double *fd_grad(const objective *o, double *x, size_t n)
{
    double *g = hnew(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        double xi = x[i];
        x[i] = xi + FD_H;
        double lp = objective_eval(o);
        x[i] = xi - FD_H;
        double lm = objective_eval(o);
        x[i] = xi;
        g[i] = (lp - lm) / (2.0 * FD_H);
    }
    return g;
}

/* ---------------------------------------------------------------------------
 * double-precision reference layers (outputs, inputs, dimensions)
 * ------------------------------------------------------------------------- */

/* out(BT,OC) = inp(BT,C) @ w(OC,C)^T + b(OC) */
static void ref_linear(double *out, const double *inp, const double *w, const double *b,
                       int bt, int c, int oc)
{
    for (int i = 0; i < bt; i++)
        for (int o = 0; o < oc; o++) {
            double s = b != NULL ? b[o] : 0.0;
            for (int j = 0; j < c; j++)
                s += inp[i * c + j] * w[o * c + j];
            out[i * oc + o] = s;
        }
}

/* out(N) = gelu(inp(N)), tanh approximation */
static void ref_gelu(double *out, const double *inp, size_t n)
{
    const double k = sqrt(2.0 / 3.14159265358979323846);
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        out[i] = 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
    }
}

/* out(N) = max(inp(N), 0) */
static void ref_relu(double *out, const double *inp, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = inp[i] > 0.0 ? inp[i] : 0.0;
}

/* out(BT,C) = layernorm(inp(BT,C)) * w(C) + b(C), biased variance, eps 1e-5 */
static void ref_layernorm(double *out, const double *inp, const double *w, const double *b,
                          int bt, int c)
{
    for (int i = 0; i < bt; i++) {
        const double *x = inp + i * c;
        double m = 0.0, v = 0.0;
        for (int j = 0; j < c; j++)
            m += x[j];
        m /= c;
        for (int j = 0; j < c; j++)
            v += (x[j] - m) * (x[j] - m);
        v /= c;
        double s = 1.0 / sqrt(v + 1e-5);
        for (int j = 0; j < c; j++)
            out[i * c + j] = (x[j] - m) * s * w[j] + b[j];
    }
}

/* out(B,T,C) = wte[tokens[b,t]] + wpe[t] */
static void ref_embedding(double *out, const int32_t *tokens, const double *wte,
                          const double *wpe, int b, int t, int c)
{
    for (int i = 0; i < b * t; i++)
        for (int j = 0; j < c; j++)
            out[i * c + j] = wte[tokens[i] * c + j] + wpe[(i % t) * c + j];
}

/* out(B,T,C) = causal multi-head attention over qkv(B,T,3C) */
static void ref_attention(double *out, const double *qkv, int b, int t, int c, int nh)
{
    int hs = c / nh;
    double scale = 1.0 / sqrt((double)hs);
    double *w = malloc((size_t)t * sizeof(double));
    ck_assert(w != NULL);
    for (int bi = 0; bi < b; bi++)
        for (int ti = 0; ti < t; ti++)
            for (int h = 0; h < nh; h++) {
                const double *q = qkv + (bi * t + ti) * 3 * c + h * hs;
                double mx = -INFINITY, sum = 0.0;
                for (int t2 = 0; t2 <= ti; t2++) {
                    const double *k = qkv + (bi * t + t2) * 3 * c + c + h * hs;
                    double s = 0.0;
                    for (int j = 0; j < hs; j++)
                        s += q[j] * k[j];
                    w[t2] = s * scale;
                    if (w[t2] > mx)
                        mx = w[t2];
                }
                for (int t2 = 0; t2 <= ti; t2++) {
                    w[t2] = exp(w[t2] - mx);
                    sum += w[t2];
                }
                double *o = out + (bi * t + ti) * c + h * hs;
                for (int j = 0; j < hs; j++) {
                    double s = 0.0;
                    for (int t2 = 0; t2 <= ti; t2++)
                        s += w[t2] / sum * qkv[(bi * t + t2) * 3 * c + 2 * c + h * hs + j];
                    o[j] = s;
                }
            }
    free(w);
}

/* losses(BT) = -log softmax(logits(BT,V))[target] */
static void ref_softmax_xent(double *losses, const double *logits, const int32_t *targets,
                             int bt, int v)
{
    for (int i = 0; i < bt; i++) {
        const double *z = logits + i * v;
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j < v; j++)
            if (z[j] > mx)
                mx = z[j];
        for (int j = 0; j < v; j++)
            sum += exp(z[j] - mx);
        losses[i] = -(z[targets[i]] - mx - log(sum));
    }
}

/* ---------------------------------------------------------------------------
 * linear
 * ------------------------------------------------------------------------- */

typedef struct {
    double *inp, *w, *b; /* (BT,C), (OC,C), (OC) */
    int bt, c, oc;
} linear_st;

static void linear_fwd(const void *p, double *out)
{
    const linear_st *s = p;
    ref_linear(out, s->inp, s->w, s->b, s->bt, s->c, s->oc);
}

START_TEST(test_linear_grad)
{
    int bt = 6, c = 5, oc = 7;
    size_t ni = (size_t)bt * c, nw = (size_t)oc * c, no = (size_t)bt * oc;
    rng_state = 0x1234567u;
    float *inp = rand_floats(ni, 1.0f, 0.0f), *w = rand_floats(nw, 0.5f, 0.0f);
    float *b = rand_floats(oc, 0.5f, 0.0f), *r = rand_floats(no, 1.0f, 0.0f);
    linear_st st = { to_double(inp, ni), to_double(w, nw), to_double(b, oc), bt, c, oc };
    objective o = { linear_fwd, &st, no, to_double(r, no), hnew(no * sizeof(double)) };

    float *d_inp = dnew(inp, ni * 4), *d_w = dnew(w, nw * 4), *d_b = dnew(b, oc * 4);
    float *d_out = dnew(NULL, no * 4), *d_r = dnew(r, no * 4);
    float *d_dinp = dnew(NULL, ni * 4), *d_dw = dnew(NULL, nw * 4), *d_db = dnew(NULL, oc * 4);
    zs_linear_forward(be, d_out, d_inp, d_w, d_b, bt, c, oc);
    linear_fwd(&st, o.out);
    check_err(down(d_out, no), o.out, no, FWD_TOL, "linear forward");

    zs_linear_backward(be, d_dinp, d_dw, d_db, d_r, d_inp, d_w, bt, c, oc);
    float *g_inp = down(d_dinp, ni), *g_w = down(d_dw, nw), *g_b = down(d_db, oc);
    check_err(g_inp, fd_grad(&o, st.inp, ni), ni, GRAD_TOL, "linear dinp");
    check_err(g_w, fd_grad(&o, st.w, nw), nw, GRAD_TOL, "linear dweight");
    check_err(g_b, fd_grad(&o, st.b, oc), oc, GRAD_TOL, "linear dbias");

    zs_linear_backward(be, d_dinp, d_dw, d_db, d_r, d_inp, d_w, bt, c, oc);
    check_doubled(g_inp, down(d_dinp, ni), ni, "linear dinp");
    check_doubled(g_w, down(d_dw, nw), nw, "linear dweight");
    check_doubled(g_b, down(d_db, oc), oc, "linear dbias");
}
END_TEST

/* ---------------------------------------------------------------------------
 * gelu and relu (loop index 0: gelu, 1: relu)
 * ------------------------------------------------------------------------- */

typedef struct {
    double *inp;
    size_t n;
    int relu;
} act_st;

static void act_fwd(const void *p, double *out)
{
    const act_st *s = p;
    if (s->relu)
        ref_relu(out, s->inp, s->n);
    else
        ref_gelu(out, s->inp, s->n);
}

START_TEST(test_activation_grad)
{
    int relu = _i;
    size_t n = 41;
    rng_state = 0xabcdefu + (uint64_t)_i;
    float *inp = rand_floats(n, 3.0f, 0.0f), *r = rand_floats(n, 1.0f, 0.0f);
    for (size_t i = 0; i < n; i++) /* keep relu's kink out of reach of FD_H */
        if (fabsf(inp[i]) < 1e-3f)
            inp[i] = 0.5f;
    act_st st = { to_double(inp, n), n, relu };
    objective o = { act_fwd, &st, n, to_double(r, n), hnew(n * sizeof(double)) };
    const char *name = relu ? "relu" : "gelu";
    char what[64];

    float *d_inp = dnew(inp, n * 4), *d_out = dnew(NULL, n * 4), *d_r = dnew(r, n * 4);
    float *d_dinp = dnew(NULL, n * 4);
    if (relu)
        zs_backend_relu_forward(be, d_out, d_inp, n);
    else
        zs_backend_gelu_forward(be, d_out, d_inp, n);
    act_fwd(&st, o.out);
    snprintf(what, sizeof what, "%s forward", name);
    check_err(down(d_out, n), o.out, n, FWD_TOL, what);

    for (int call = 0; call < 2; call++) {
        if (relu)
            zs_backend_relu_backward(be, d_dinp, d_inp, d_r, n);
        else
            zs_backend_gelu_backward(be, d_dinp, d_inp, d_r, n);
    }
    float *twice = down(d_dinp, n);
    zs_backend_memset0(be, d_dinp, n * 4);
    if (relu)
        zs_backend_relu_backward(be, d_dinp, d_inp, d_r, n);
    else
        zs_backend_gelu_backward(be, d_dinp, d_inp, d_r, n);
    float *once = down(d_dinp, n);
    snprintf(what, sizeof what, "%s dinp", name);
    check_err(once, fd_grad(&o, st.inp, n), n, GRAD_TOL, what);
    check_doubled(once, twice, n, what);
}
END_TEST

/* ---------------------------------------------------------------------------
 * layernorm
 * ------------------------------------------------------------------------- */

typedef struct {
    double *inp, *w, *b; /* (BT,C), (C), (C) */
    int bt, c;
} ln_st;

static void ln_fwd(const void *p, double *out)
{
    const ln_st *s = p;
    ref_layernorm(out, s->inp, s->w, s->b, s->bt, s->c);
}

START_TEST(test_layernorm_grad)
{
    int bt = 5, c = 9;
    size_t n = (size_t)bt * c;
    rng_state = 0x5151u;
    float *inp = rand_floats(n, 2.0f, 0.3f), *w = rand_floats(c, 0.5f, 1.0f);
    float *b = rand_floats(c, 0.5f, 0.0f), *r = rand_floats(n, 1.0f, 0.0f);
    ln_st st = { to_double(inp, n), to_double(w, c), to_double(b, c), bt, c };
    objective o = { ln_fwd, &st, n, to_double(r, n), hnew(n * sizeof(double)) };

    float *d_inp = dnew(inp, n * 4), *d_w = dnew(w, c * 4), *d_b = dnew(b, c * 4);
    float *d_out = dnew(NULL, n * 4), *d_r = dnew(r, n * 4);
    float *d_mean = dnew(NULL, bt * 4), *d_rstd = dnew(NULL, bt * 4);
    float *d_dinp = dnew(NULL, n * 4), *d_dw = dnew(NULL, c * 4), *d_db = dnew(NULL, c * 4);
    zs_backend_layernorm_forward(be, d_out, d_mean, d_rstd, d_inp, d_w, d_b, bt, c);
    ln_fwd(&st, o.out);
    check_err(down(d_out, n), o.out, n, FWD_TOL, "layernorm forward");

    /* saved statistics: mean and 1/sqrt(biased var + 1e-5) */
    float *mean = down(d_mean, bt), *rstd = down(d_rstd, bt);
    for (int i = 0; i < bt; i++) {
        double m = 0.0, v = 0.0;
        for (int j = 0; j < c; j++)
            m += st.inp[i * c + j];
        m /= c;
        for (int j = 0; j < c; j++)
            v += (st.inp[i * c + j] - m) * (st.inp[i * c + j] - m);
        v /= c;
        ck_assert_double_eq_tol(mean[i], m, 1e-6);
        ck_assert_double_eq_tol(rstd[i], 1.0 / sqrt(v + 1e-5), 1e-5 / sqrt(v + 1e-5));
    }

    zs_backend_layernorm_backward(be, d_dinp, d_dw, d_db, d_r, d_inp, d_w, d_mean, d_rstd, bt, c);
    float *g_inp = down(d_dinp, n), *g_w = down(d_dw, c), *g_b = down(d_db, c);
    check_err(g_inp, fd_grad(&o, st.inp, n), n, GRAD_TOL, "layernorm dinp");
    check_err(g_w, fd_grad(&o, st.w, c), c, GRAD_TOL, "layernorm dweight");
    check_err(g_b, fd_grad(&o, st.b, c), c, GRAD_TOL, "layernorm dbias");

    zs_backend_layernorm_backward(be, d_dinp, d_dw, d_db, d_r, d_inp, d_w, d_mean, d_rstd, bt, c);
    check_doubled(g_inp, down(d_dinp, n), n, "layernorm dinp");
    check_doubled(g_w, down(d_dw, c), c, "layernorm dweight");
    check_doubled(g_b, down(d_db, c), c, "layernorm dbias");
}
END_TEST

/* ---------------------------------------------------------------------------
 * residual: out = a + b; backward is axpy(da, 1, dout) and axpy(db, 1, dout)
 * ------------------------------------------------------------------------- */

typedef struct {
    double *a, *b;
    size_t n;
} res_st;

static void res_fwd(const void *p, double *out)
{
    const res_st *s = p;
    for (size_t i = 0; i < s->n; i++)
        out[i] = s->a[i] + s->b[i];
}

START_TEST(test_residual_grad)
{
    size_t n = 23;
    rng_state = 0x7777u;
    float *a = rand_floats(n, 1.0f, 0.0f), *b = rand_floats(n, 1.0f, 0.0f);
    float *r = rand_floats(n, 1.0f, 0.0f);
    res_st st = { to_double(a, n), to_double(b, n), n };
    objective o = { res_fwd, &st, n, to_double(r, n), hnew(n * sizeof(double)) };

    float *d_a = dnew(a, n * 4), *d_b = dnew(b, n * 4), *d_out = dnew(NULL, n * 4);
    float *d_r = dnew(r, n * 4), *d_da = dnew(NULL, n * 4), *d_db = dnew(NULL, n * 4);
    zs_backend_residual_forward(be, d_out, d_a, d_b, n);
    res_fwd(&st, o.out);
    check_err(down(d_out, n), o.out, n, FWD_TOL, "residual forward");

    zs_backend_axpy(be, d_da, 1.0f, d_r, n);
    zs_backend_axpy(be, d_db, 1.0f, d_r, n);
    float *g_a = down(d_da, n), *g_b = down(d_db, n);
    check_err(g_a, fd_grad(&o, st.a, n), n, GRAD_TOL, "residual da");
    check_err(g_b, fd_grad(&o, st.b, n), n, GRAD_TOL, "residual db");
    zs_backend_axpy(be, d_da, 1.0f, d_r, n);
    check_doubled(g_a, down(d_da, n), n, "residual da");
}
END_TEST

/* ---------------------------------------------------------------------------
 * embedding (gradients of the two tables; tokens repeat)
 * ------------------------------------------------------------------------- */

typedef struct {
    const int32_t *tokens; /* (B,T) */
    double *wte, *wpe;     /* (V,C), (maxT,C) */
    int b, t, c;
} emb_st;

static void emb_fwd(const void *p, double *out)
{
    const emb_st *s = p;
    ref_embedding(out, s->tokens, s->wte, s->wpe, s->b, s->t, s->c);
}

START_TEST(test_embedding_grad)
{
    int b = 2, t = 4, c = 5, v = 7, maxt = 6;
    size_t no = (size_t)b * t * c, nte = (size_t)v * c, npe = (size_t)maxt * c;
    int32_t tokens[8] = { 3, 0, 3, 6, 1, 3, 0, 2 }; /* repeats, and row 4/5 unused */
    rng_state = 0xe11bu;
    float *wte = rand_floats(nte, 1.0f, 0.0f), *wpe = rand_floats(npe, 1.0f, 0.0f);
    float *r = rand_floats(no, 1.0f, 0.0f);
    emb_st st = { tokens, to_double(wte, nte), to_double(wpe, npe), b, t, c };
    objective o = { emb_fwd, &st, no, to_double(r, no), hnew(no * sizeof(double)) };

    int32_t *d_tok = dnew(tokens, sizeof tokens);
    float *d_wte = dnew(wte, nte * 4), *d_wpe = dnew(wpe, npe * 4);
    float *d_out = dnew(NULL, no * 4), *d_r = dnew(r, no * 4);
    float *d_dwte = dnew(NULL, nte * 4), *d_dwpe = dnew(NULL, npe * 4);
    zs_backend_embedding_forward(be, d_out, d_tok, d_wte, d_wpe, b, t, c);
    emb_fwd(&st, o.out);
    check_err(down(d_out, no), o.out, no, FWD_TOL, "embedding forward");

    zs_backend_embedding_backward(be, d_dwte, d_dwpe, d_r, d_tok, b, t, c);
    float *g_te = down(d_dwte, nte), *g_pe = down(d_dwpe, npe);
    check_err(g_te, fd_grad(&o, st.wte, nte), nte, GRAD_TOL, "embedding dwte");
    check_err(g_pe, fd_grad(&o, st.wpe, npe), npe, GRAD_TOL, "embedding dwpe");
    zs_backend_embedding_backward(be, d_dwte, d_dwpe, d_r, d_tok, b, t, c);
    check_doubled(g_te, down(d_dwte, nte), nte, "embedding dwte");
    check_doubled(g_pe, down(d_dwpe, npe), npe, "embedding dwpe");
}
END_TEST

/* ---------------------------------------------------------------------------
 * attention
 * ------------------------------------------------------------------------- */

typedef struct {
    double *qkv; /* (B,T,3C) */
    int b, t, c, nh;
} attn_st;

static void attn_fwd(const void *p, double *out)
{
    const attn_st *s = p;
    ref_attention(out, s->qkv, s->b, s->t, s->c, s->nh);
}

/* Loop index 0: B=2 T=5 C=8 NH=2; 1: B=1 T=7 C=6 NH=3; 2: B=1 T=1 C=4 NH=1. */
START_TEST(test_attention_grad)
{
    static const int dims[3][4] = { { 2, 5, 8, 2 }, { 1, 7, 6, 3 }, { 1, 1, 4, 1 } };
    int b = dims[_i][0], t = dims[_i][1], c = dims[_i][2], nh = dims[_i][3];
    size_t nq = (size_t)b * t * 3 * c, no = (size_t)b * t * c, na = (size_t)b * nh * t * t;
    rng_state = 0xa77eu + (uint64_t)_i;
    float *qkv = rand_floats(nq, 1.5f, 0.0f), *r = rand_floats(no, 1.0f, 0.0f);
    attn_st st = { to_double(qkv, nq), b, t, c, nh };
    objective o = { attn_fwd, &st, no, to_double(r, no), hnew(no * sizeof(double)) };

    float *d_qkv = dnew(qkv, nq * 4), *d_out = dnew(NULL, no * 4), *d_r = dnew(r, no * 4);
    float *d_pre = dnew(NULL, na * 4), *d_att = dnew(NULL, na * 4);
    float *d_dqkv = dnew(NULL, nq * 4);
    /* scratch starts as garbage: the kernel must overwrite it */
    float *junk = rand_floats(na, 100.0f, 0.0f);
    float *d_dpre = dnew(junk, na * 4), *d_datt = dnew(junk, na * 4);
    zs_backend_attention_forward(be, d_out, d_pre, d_att, d_qkv, b, t, c, nh);
    attn_fwd(&st, o.out);
    check_err(down(d_out, no), o.out, no, FWD_TOL, "attention forward");

    /* att rows are softmaxes: sum to 1, zero above the diagonal */
    float *att = down(d_att, na);
    for (int row = 0; row < b * nh * t; row++) {
        int ti = row % t;
        double s = 0.0;
        for (int t2 = 0; t2 < t; t2++) {
            float a = att[(size_t)row * t + t2];
            if (t2 > ti)
                ck_assert_msg(a == 0.0f, "att above the diagonal is %g", (double)a);
            s += a;
        }
        ck_assert_double_eq_tol(s, 1.0, 1e-6);
    }

    zs_backend_attention_backward(be, d_dqkv, d_dpre, d_datt, d_r, d_qkv, d_att, b, t, c, nh);
    float *g = down(d_dqkv, nq);
    check_err(g, fd_grad(&o, st.qkv, nq), nq, GRAD_TOL, "attention dqkv");
    zs_backend_attention_backward(be, d_dqkv, d_dpre, d_datt, d_r, d_qkv, d_att, b, t, c, nh);
    check_doubled(g, down(d_dqkv, nq), nq, "attention dqkv");
}
END_TEST

/* ---------------------------------------------------------------------------
 * softmax cross-entropy: L = dloss * sum(losses); dlogits is OVERWRITTEN
 * (the header's contract), so a second call gives the same values.
 * ------------------------------------------------------------------------- */

typedef struct {
    double *logits; /* (BT,V) */
    const int32_t *targets;
    int bt, v;
} xent_st;

static void xent_fwd(const void *p, double *out)
{
    const xent_st *s = p;
    ref_softmax_xent(out, s->logits, s->targets, s->bt, s->v);
}

START_TEST(test_softmax_xent_grad)
{
    int bt = 6, v = 11;
    size_t n = (size_t)bt * v;
    int32_t targets[6] = { 0, 10, 3, 3, 7, 1 };
    float dloss = 0.37f;
    rng_state = 0x3e07u;
    float *logits = rand_floats(n, 4.0f, 0.0f);
    logits[5] = 40.0f; /* a large logit: the max subtraction must keep it finite */
    double *r = hnew(bt * sizeof(double));
    for (int i = 0; i < bt; i++)
        r[i] = dloss;
    xent_st st = { to_double(logits, n), targets, bt, v };
    objective o = { xent_fwd, &st, (size_t)bt, r, hnew(bt * sizeof(double)) };

    int32_t *d_tg = dnew(targets, sizeof targets);
    float *d_logits = dnew(logits, n * 4), *d_probs = dnew(NULL, n * 4);
    float *d_losses = dnew(NULL, bt * 4), *d_dlogits = dnew(rand_floats(n, 9.0f, 0.0f), n * 4);
    zs_backend_softmax_xent_forward(be, d_losses, d_probs, d_logits, d_tg, bt, v);
    xent_fwd(&st, o.out);
    check_err(down(d_losses, bt), o.out, bt, FWD_TOL, "softmax xent forward (losses)");
    float *probs = down(d_probs, n);
    for (int i = 0; i < bt; i++) {
        double s = 0.0;
        for (int j = 0; j < v; j++)
            s += probs[i * v + j];
        ck_assert_double_eq_tol(s, 1.0, 1e-6);
    }

    zs_backend_softmax_xent_backward(be, d_dlogits, d_probs, d_tg, dloss, bt, v);
    float *g = down(d_dlogits, n);
    check_err(g, fd_grad(&o, st.logits, n), n, GRAD_TOL, "softmax xent dlogits");
    zs_backend_softmax_xent_backward(be, d_dlogits, d_probs, d_tg, dloss, bt, v);
    ck_assert_mem_eq(g, down(d_dlogits, n), n * sizeof(float));
}
END_TEST

/* ---------------------------------------------------------------------------
 * composition: x -> linear(C->H) -> gelu -> layernorm(H)
 * ------------------------------------------------------------------------- */

typedef struct {
    double *x, *w, *b, *lw, *lb; /* (BT,C), (H,C), (H), (H), (H) */
    double *h1, *h2;             /* scratch (BT,H) */
    int bt, c, h;
} comp_st;

static void comp_fwd(const void *p, double *out)
{
    const comp_st *s = p;
    size_t n = (size_t)s->bt * s->h;
    ref_linear(s->h1, s->x, s->w, s->b, s->bt, s->c, s->h);
    ref_gelu(s->h2, s->h1, n);
    ref_layernorm(out, s->h2, s->lw, s->lb, s->bt, s->h);
}

START_TEST(test_composition_grad)
{
    int bt = 4, c = 6, h = 10;
    size_t nx = (size_t)bt * c, nw = (size_t)h * c, nh = (size_t)bt * h;
    rng_state = 0xc0de5u;
    float *x = rand_floats(nx, 1.0f, 0.0f), *w = rand_floats(nw, 0.7f, 0.0f);
    float *b = rand_floats(h, 0.3f, 0.0f), *lw = rand_floats(h, 0.5f, 1.0f);
    float *lb = rand_floats(h, 0.5f, 0.0f), *r = rand_floats(nh, 1.0f, 0.0f);
    comp_st st = { to_double(x, nx), to_double(w, nw), to_double(b, h), to_double(lw, h),
                   to_double(lb, h), hnew(nh * sizeof(double)), hnew(nh * sizeof(double)),
                   bt, c, h };
    objective o = { comp_fwd, &st, nh, to_double(r, nh), hnew(nh * sizeof(double)) };

    float *d_x = dnew(x, nx * 4), *d_w = dnew(w, nw * 4), *d_b = dnew(b, h * 4);
    float *d_lw = dnew(lw, h * 4), *d_lb = dnew(lb, h * 4), *d_r = dnew(r, nh * 4);
    float *d_h1 = dnew(NULL, nh * 4), *d_h2 = dnew(NULL, nh * 4), *d_out = dnew(NULL, nh * 4);
    float *d_mean = dnew(NULL, bt * 4), *d_rstd = dnew(NULL, bt * 4);
    float *d_dx = dnew(NULL, nx * 4), *d_dw = dnew(NULL, nw * 4), *d_db = dnew(NULL, h * 4);
    float *d_dlw = dnew(NULL, h * 4), *d_dlb = dnew(NULL, h * 4);
    float *d_dh1 = dnew(NULL, nh * 4), *d_dh2 = dnew(NULL, nh * 4);

    zs_linear_forward(be, d_h1, d_x, d_w, d_b, bt, c, h);
    zs_backend_gelu_forward(be, d_h2, d_h1, nh);
    zs_backend_layernorm_forward(be, d_out, d_mean, d_rstd, d_h2, d_lw, d_lb, bt, h);
    comp_fwd(&st, o.out);
    check_err(down(d_out, nh), o.out, nh, FWD_TOL, "composition forward");

    /* backward, twice: the activation gradients are zeroed each pass, the
     * parameter and input gradients accumulate */
    float *g_x = NULL, *g_w = NULL, *g_b = NULL, *g_lw = NULL, *g_lb = NULL;
    for (int pass = 0; pass < 2; pass++) {
        zs_backend_memset0(be, d_dh1, nh * 4);
        zs_backend_memset0(be, d_dh2, nh * 4);
        zs_backend_layernorm_backward(be, d_dh2, d_dlw, d_dlb, d_r, d_h2, d_lw, d_mean, d_rstd,
                                      bt, h);
        zs_backend_gelu_backward(be, d_dh1, d_h1, d_dh2, nh);
        zs_linear_backward(be, d_dx, d_dw, d_db, d_dh1, d_x, d_w, bt, c, h);
        if (pass == 0) {
            g_x = down(d_dx, nx);
            g_w = down(d_dw, nw);
            g_b = down(d_db, h);
            g_lw = down(d_dlw, h);
            g_lb = down(d_dlb, h);
        }
    }
    check_err(g_x, fd_grad(&o, st.x, nx), nx, GRAD_TOL, "composition dx");
    check_err(g_w, fd_grad(&o, st.w, nw), nw, GRAD_TOL, "composition dweight");
    check_err(g_b, fd_grad(&o, st.b, h), h, GRAD_TOL, "composition dbias");
    check_err(g_lw, fd_grad(&o, st.lw, h), h, GRAD_TOL, "composition layernorm dweight");
    check_err(g_lb, fd_grad(&o, st.lb, h), h, GRAD_TOL, "composition layernorm dbias");
    check_doubled(g_x, down(d_dx, nx), nx, "composition dx");
    check_doubled(g_w, down(d_dw, nw), nw, "composition dweight");
    check_doubled(g_b, down(d_db, h), h, "composition dbias");
    check_doubled(g_lw, down(d_dlw, h), h, "composition layernorm dweight");
    check_doubled(g_lb, down(d_dlb, h), h, "composition layernorm dbias");
}

/* ---------------------------------------------------------------------------
 * mixture of experts (loop index 0: top-1, 1: top-2): router, dispatch,
 * experts (one linear each), combine and the load-balancing loss. The
 * objective is sum(y * r) + A * l_aux: l_aux is the forward's last output
 * with r = A. The double reference routes by the rules of zerosim/layers.h.
 * ------------------------------------------------------------------------- */

typedef struct {
    double *x, *wg, *w, *b;   /* (N,C), (E,C), (E,C,C), (E,C) */
    int n, c, e, k, cap;
    int *dropped;             /* choices the reference dropped */
} moe_st;

static void moe_fwd(const void *p, double *out)
{
    const moe_st *s = p;
    int N = s->n, C = s->c, E = s->e;
    double g[64 * 8], ce[8] = {0}, me[8] = {0};
    int cnt[8] = {0}, ch[2][64];
    ck_assert(N <= 64 && E <= 8);
    for (int t = 0; t < N; t++) { /* softmax of the router's logits */
        double mx = -1e300, z = 0.0, lg[8];
        for (int j = 0; j < E; j++) {
            lg[j] = 0.0;
            for (int i = 0; i < C; i++)
                lg[j] += s->x[t * C + i] * s->wg[j * C + i];
            mx = lg[j] > mx ? lg[j] : mx;
        }
        for (int j = 0; j < E; j++)
            z += g[t * E + j] = exp(lg[j] - mx);
        for (int j = 0; j < E; j++) {
            g[t * E + j] /= z;
            me[j] += g[t * E + j] / N;
        }
    }
    int slot[2][64];
    *s->dropped = 0;
    for (int k = 0; k < s->k; k++)
        for (int t = 0; t < N; t++) {
            int best = -1;
            for (int j = 0; j < E; j++)
                if ((k == 0 || j != ch[0][t]) && (best < 0 || g[t * E + j] > g[t * E + best]))
                    best = j;
            ch[k][t] = best;
            int loc = cnt[best]++;
            slot[k][t] = loc < s->cap ? loc : -1;
            *s->dropped += slot[k][t] < 0;
            if (k == 0)
                ce[best] += 1.0 / N;
        }
    double laux = 0.0;
    for (int j = 0; j < E; j++)
        laux += me[j] * ce[j];
    out[N * C] = laux * E;
    for (int t = 0; t < N; t++) {
        double w[2] = {0, 0};
        for (int k = 0; k < s->k; k++)
            w[k] = slot[k][t] >= 0 ? g[t * E + ch[k][t]] : 0.0;
        if (s->k == 2) {
            double d = w[0] + w[1] < 1.1920929e-07 ? 1.1920929e-07 : w[0] + w[1];
            w[0] /= d;
            w[1] /= d;
        }
        for (int o = 0; o < C; o++) {
            double y = 0.0;
            for (int k = 0; k < s->k; k++) {
                if (slot[k][t] < 0)
                    continue;
                int e = ch[k][t];
                double v = s->b[e * C + o];
                for (int i = 0; i < C; i++)
                    v += s->w[(e * C + o) * C + i] * s->x[t * C + i];
                y += w[k] * v;
            }
            out[t * C + o] = y;
        }
    }
}

START_TEST(test_moe_grad)
{
    int N = 10, C = 4, E = 3, K = _i + 1;
    /* capacities 3 and 4: 9 slots for 10 first choices, 12 for 20 choices */
    int cap = zs_moe_capacity(N, E, K, K == 1 ? 0.8 : 0.6, 0);
    const float A = 0.3f;
    size_t nx = (size_t)N * C, nwg = (size_t)E * C, nw = (size_t)E * C * C, nb = (size_t)E * C;
    size_t no = nx + 1, ecc = (size_t)E * cap * C;
    rng_state = 0xabcdef12u + (uint64_t)K;
    float *x = rand_floats(nx, 1.0f, 0.0f), *wg = rand_floats(nwg, 1.0f, 0.0f);
    float *w = rand_floats(nw, 0.5f, 0.0f), *b = rand_floats(nb, 0.5f, 0.0f);
    float *r = rand_floats(no, 1.0f, 0.0f);
    r[nx] = A;
    int dropped = 0;
    moe_st st = {to_double(x, nx), to_double(wg, nwg), to_double(w, nw), to_double(b, nb),
                 N, C, E, K, cap, &dropped};
    objective o = {moe_fwd, &st, no, to_double(r, no), hnew(no * sizeof(double))};
    moe_fwd(&st, o.out);
    ck_assert_int_gt(dropped, 0); /* the capacity drops some choices */

    zs_moe_routing rt;
    ck_assert_int_eq(zs_moe_routing_alloc(&rt, N, E, K, cap, C), 0);
    float *d_x = dnew(x, nx * 4), *d_wg = dnew(wg, nwg * 4), *d_w = dnew(w, nw * 4);
    float *d_b = dnew(b, nb * 4), *d_r = dnew(r, nx * 4), *d_lg = dnew(NULL, (size_t)N * E * 4);
    float *d_xe = dnew(NULL, ecc * 4), *d_ye = dnew(NULL, ecc * 4), *d_y = dnew(NULL, nx * 4);
    zs_linear_forward(be, d_lg, d_x, d_wg, NULL, N, C, E);
    zs_backend_copy_d2h(be, rt.hbuf, d_lg, (size_t)N * E * 4);
    zs_moe_softmax(rt.hgates, rt.hbuf, N, E);
    zs_moe_route(&rt);
    ck_assert_int_eq(rt.dropped, dropped);
    ck_assert_msg(fabs(rt.l_aux - o.out[nx]) < 1e-5, "l_aux %.7f, reference %.7f", rt.l_aux,
                  o.out[nx]);
    zs_moe_dispatch_forward(be, d_xe, d_x, &rt);
    for (int e = 0; e < E; e++)
        zs_linear_forward(be, d_ye + (size_t)e * cap * C, d_xe + (size_t)e * cap * C,
                          d_w + (size_t)e * C * C, d_b + (size_t)e * C, cap, C, C);
    zs_moe_combine_forward(be, d_y, d_ye, &rt);
    check_err(down(d_y, nx), o.out, nx, FWD_TOL, "moe forward");

    float *d_dye = dnew(NULL, ecc * 4), *d_dxe = dnew(NULL, ecc * 4), *d_dx = dnew(NULL, nx * 4);
    float *d_dwg = dnew(NULL, nwg * 4), *d_dw = dnew(NULL, nw * 4), *d_db = dnew(NULL, nb * 4);
    zs_moe_combine_backward(be, d_dye, d_r, d_ye, &rt);
    for (int e = 0; e < E; e++)
        zs_linear_backward(be, d_dxe + (size_t)e * cap * C, d_dw + (size_t)e * C * C,
                           d_db + (size_t)e * C, d_dye + (size_t)e * cap * C,
                           d_xe + (size_t)e * cap * C, d_w + (size_t)e * C * C, cap, C, C);
    zs_moe_dispatch_backward(be, d_dx, d_dxe, &rt);
    zs_moe_gate_backward(rt.hbuf, &rt, A);
    float *d_dlg = dnew(rt.hbuf, (size_t)N * E * 4);
    zs_linear_backward(be, d_dx, d_dwg, NULL, d_dlg, d_x, d_wg, N, C, E);
    check_err(down(d_dx, nx), fd_grad(&o, st.x, nx), nx, GRAD_TOL, "moe dx");
    check_err(down(d_dwg, nwg), fd_grad(&o, st.wg, nwg), nwg, GRAD_TOL, "moe d router");
    check_err(down(d_dw, nw), fd_grad(&o, st.w, nw), nw, GRAD_TOL, "moe d expert weights");
    check_err(down(d_db, nb), fd_grad(&o, st.b, nb), nb, GRAD_TOL, "moe d expert biases");
    zs_moe_routing_free(&rt);
}
END_TEST

END_TEST

/* ---------------------------------------------------------------------------
 * suite
 * ------------------------------------------------------------------------- */

static Suite *layers_suite(void)
{
    Suite *s = suite_create("layers");
    TCase *tc = tcase_create("gradients");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_linear_grad);
    tcase_add_loop_test(tc, test_activation_grad, 0, 2);
    tcase_add_test(tc, test_layernorm_grad);
    tcase_add_test(tc, test_residual_grad);
    tcase_add_test(tc, test_embedding_grad);
    tcase_add_loop_test(tc, test_attention_grad, 0, 3);
    tcase_add_test(tc, test_softmax_xent_grad);
    tcase_add_test(tc, test_composition_grad);
    tcase_add_loop_test(tc, test_moe_grad, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(layers_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed > 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
