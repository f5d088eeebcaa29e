/* zerosim — the portable backend ("ref", src/backend/ref.c).
 *
 *  - ref's GEMM against a scalar implementation of its stated order (each
 *    product through a volatile, so never fused): the same bytes; and
 *    against float64 within the error bound of that order;
 *  - attention and the loss against float64 within stated tolerances;
 *  - the project's logarithm (ref_math.h) against long double: within 1 ulp;
 *  - every kernel of the table in each instruction set this CPU runs (SSE2,
 *    AVX2, AVX-512): the same bytes;
 *  - the per-kernel hashes against tests/ref_kernel_hashes.txt (recorded
 *    with this binary on the first machine, x86-64): a machine or build
 *    that computes other bytes fails here naming the first kernel that
 *    differs. `check_ref --print-kernel-hashes` prints the list.
 * Inputs come from an integer generator scaled by powers of two (no libm).
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zerosim/backend.h"

#include "backend/ref_math.h" /* white-box: the logarithm's accuracy */

/* The ref backend in instruction set isa (NULL: the default); NULL, with
 * the reason in err, when it cannot start (also outside a test). */
static zs_backend_t ref_try_open(const char *isa, char *err, size_t errlen)
{
    if (isa != NULL)
        setenv("ZEROSIM_CPU_KERNELS", isa, 1);
    zs_backend_t be = zs_backend_init("ref", err, errlen);
    if (isa != NULL)
        unsetenv("ZEROSIM_CPU_KERNELS");
    return be;
}

/* The same in a test: NULL only when this CPU lacks the set. */
static zs_backend_t ref_open(const char *isa)
{
    char err[256];
    zs_backend_t be = ref_try_open(isa, err, sizeof err);
    if (be == NULL && isa != NULL && strstr(err, "does not run") != NULL)
        return NULL;
    ck_assert_msg(be != NULL, "ref backend: %s", err);
    ck_assert_str_eq(zs_backend_name(be), "ref");
    return be;
}

/* values in [-1, 1) with 23 bits, from xorshift64 (exact on every machine) */
static uint64_t rng_state;
static float rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((int32_t)(rng_state >> 40) - (1 << 23)) * (1.0f / (1 << 23));
}
static void fill(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = rnd();
}

/* ---- GEMM: the stated order, bytes and float64 ------------------------------ */

static float op_at(const float *x, int trans, int ld, int i, int k)
{
    return trans ? x[(size_t)k * ld + i] : x[(size_t)i * ld + k];
}

/* ref.c's order written as scalar code: blocks of 64 from 0, summed in order
 * from 0; each product rounded through a volatile */
static float order_dot(const float *a, int ta, int lda, const float *b, int tb, int ldb, int i,
                       int j, int k)
{
    float s = 0.0f;
    for (int k0 = 0; k0 < k; k0 += 64) {
        float p = 0.0f;
        for (int kk = k0; kk < k0 + 64 && kk < k; kk++) {
            volatile float prod = op_at(a, ta, lda, i, kk) * op_at(b, !tb, ldb, j, kk);
            p = p + prod;
        }
        s = s + p;
    }
    return s;
}

static const int gemm_shapes[][3] = { { 1, 1, 0 },   { 1, 1, 1 },    { 5, 7, 63 },
                                      { 6, 16, 64 }, { 7, 17, 65 },  { 13, 33, 130 },
                                      { 97, 129, 200 }, { 200, 40, 777 } };
#define N_GEMM (int)(sizeof gemm_shapes / sizeof gemm_shapes[0])

START_TEST(test_ref_sgemm_order_and_error)
{
    int m = gemm_shapes[_i / 4][0], n = gemm_shapes[_i / 4][1], k = gemm_shapes[_i / 4][2];
    int ta = _i & 1, tb = (_i >> 1) & 1;
    zs_backend_t be = ref_open(NULL);
    int lda = ta ? m + 3 : k + 3, ldb = tb ? k + 2 : n + 2, ldc = n + 1;
    size_t na = (size_t)(ta ? k : m) * lda + 1, nb = (size_t)(tb ? n : k) * ldb + 1;
    size_t nc = (size_t)m * ldc;
    float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4), *c0 = malloc(nc * 4);
    ck_assert(a && b && c && c0);
    rng_state = 88172645463325252ull + (uint64_t)_i;
    fill(a, na);
    fill(b, nb);
    fill(c0, nc);
    const float ab[3][2] = { { 1.0f, 0.0f }, { 0.5f, 1.0f }, { -1.25f, 0.75f } };
    for (int v = 0; v < 3; v++) {
        float alpha = ab[v][0], beta = ab[v][1];
        memcpy(c, c0, nc * 4);
        zs_backend_sgemm(be, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                float s = order_dot(a, ta, lda, b, tb, ldb, i, j, k);
                float c_old = c0[(size_t)i * ldc + j];
                float want = beta == 0.0f ? alpha * s : alpha * s + beta * c_old;
                float got = c[(size_t)i * ldc + j];
                ck_assert_msg(memcmp(&got, &want, 4) == 0,
                              "m%d n%d k%d ta%d tb%d alpha %g beta %g: C[%d][%d] = %a, the stated "
                              "order gives %a",
                              m, n, k, ta, tb, alpha, beta, i, j, got, want);
                /* float64, and the bound of the order: (64 + k/64 + 2) eps sum|ab| */
                double exact = 0.0, mag = 0.0;
                for (int kk = 0; kk < k; kk++) {
                    double pr = (double)op_at(a, ta, lda, i, kk) * op_at(b, !tb, ldb, j, kk);
                    exact += pr;
                    mag += fabs(pr);
                }
                exact = alpha * exact + beta * c_old;
                double bound = (66.0 + k / 64) * 0x1p-24 * (fabs(alpha) * mag + fabs(beta * c_old))
                             + 0x1p-24 * fabs(exact);
                double err = fabs(got - exact);
                ck_assert_msg(err <= bound, "C[%d][%d] off float64 by %g > %g", i, j, err, bound);
            }
    }
    free(a);
    free(b);
    free(c);
    free(c0);
    zs_backend_release(be);
}
END_TEST

/* ---- attention and the loss against float64 -------------------------------- */

START_TEST(test_ref_attention_float64)
{
    enum { B = 2, T = 37, NH = 4, NKV = 2, HD = 8, ROW = (NH + 2 * NKV) * HD };
    zs_backend_t be = ref_open(NULL);
    static float qkv[B * T * ROW], out[B * T * NH * HD], pre[B * NH * T * T], att[B * NH * T * T];
    rng_state = 7;
    fill(qkv, sizeof qkv / 4);
    zs_backend_attention_gqa_forward(be, out, pre, att, qkv, B, T, NH, NKV, HD);
    double worst = 0.0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const float *q = qkv + ((size_t)b * T + i) * ROW + h * HD;
                double s[T], mx = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    const float *kj = qkv + ((size_t)b * T + j) * ROW + NH * HD + (h / 2) * HD;
                    double d = 0.0;
                    for (int e = 0; e < HD; e++)
                        d += (double)q[e] * kj[e];
                    s[j] = d / sqrt((double)HD);
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int j = 0; j <= i; j++)
                    sum += s[j] = exp(s[j] - mx);
                for (int e = 0; e < HD; e++) {
                    double o = 0.0;
                    for (int j = 0; j <= i; j++)
                        o += s[j] / sum * qkv[((size_t)b * T + j) * ROW + (NH + NKV) * HD
                                              + (h / 2) * HD + e];
                    double d = fabs(o - out[((size_t)b * T + i) * NH * HD + h * HD + e]);
                    worst = d > worst ? d : worst;
                }
            }
    printf("ref attention: max |out - float64| %.2e (tolerance 1e-6)\n", worst);
    ck_assert_msg(worst <= 1e-6, "attention off float64 by %g", worst);
    zs_backend_release(be);
}
END_TEST

START_TEST(test_ref_softmax_xent_float64)
{
    enum { BT = 9, V = 301 };
    zs_backend_t be = ref_open(NULL);
    static float logits[BT * V], probs[BT * V], losses[BT];
    int32_t tg[BT];
    rng_state = 99;
    for (int i = 0; i < BT * V; i++)
        logits[i] = rnd() * 16.0f;
    for (int i = 0; i < BT; i++)
        tg[i] = (i * 97) % V;
    zs_backend_softmax_xent_forward(be, losses, probs, logits, tg, BT, V);
    for (int i = 0; i < BT; i++) {
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j < V; j++)
            mx = logits[i * V + j] > mx ? logits[i * V + j] : mx;
        for (int j = 0; j < V; j++)
            sum += exp((double)logits[i * V + j] - mx);
        double want = log(sum) + mx - logits[i * V + tg[i]];
        ck_assert_msg(fabs(losses[i] - want) <= 4e-6 * fabs(want) + 1e-6,
                      "row %d: loss %.9g, float64 %.9g", i, losses[i], want);
        for (int j = 0; j < V; j++) {
            double p = exp((double)logits[i * V + j] - mx) / sum;
            ck_assert_msg(fabs(probs[i * V + j] - p) <= 4e-6 * p + 1e-12, "prob %d,%d", i, j);
        }
    }
    zs_backend_release(be);
}
END_TEST

/* ---- the logarithm against long double --------------------------------------- */

static double ulps_off(float got, long double exact)
{
    int e;
    frexpl(exact, &e); /* |exact| in [2^(e-1), 2^e) */
    long double ulp = ldexpl(1.0L, (e - 24 > -149 ? e - 24 : -149));
    return (double)(fabsl((long double)got - exact) / ulp);
}

START_TEST(test_ref_logf_ulps)
{
    double worst = 0.0;
    float worst_x = 0.0f;
    /* every 2^8-th float from the smallest subnormal to the largest finite */
    for (uint32_t u = 1; u < 0x7f800000u; u += 251) {
        float x;
        memcpy(&x, &u, 4);
        if (x == 1.0f)
            continue;
        double d = ulps_off(zs_ref_logf(x), logl((long double)x));
        if (d > worst) {
            worst = d;
            worst_x = x;
        }
    }
    /* and densely near 1, where log is smallest */
    for (int i = -(1 << 20); i <= (1 << 20); i++) {
        float x = 1.0f + (float)i * 0x1p-21f;
        if (x == 1.0f)
            continue;
        double d = ulps_off(zs_ref_logf(x), logl((long double)x));
        if (d > worst) {
            worst = d;
            worst_x = x;
        }
    }
    printf("ref logf: max error %.3f ulp (at %a) against long double\n", worst, worst_x);
    ck_assert_msg(worst <= 1.0, "zs_ref_logf off by %.3f ulp at %a", worst, worst_x);
    ck_assert(zs_ref_logf(1.0f) == 0.0f);
    ck_assert(isinf(zs_ref_logf(0.0f)) && zs_ref_logf(0.0f) < 0);
    ck_assert(isinf(zs_ref_logf(-0.0f)) && zs_ref_logf(-0.0f) < 0);
    ck_assert(isinf(zs_ref_logf(INFINITY)) && zs_ref_logf(INFINITY) > 0);
    ck_assert(isnan(zs_ref_logf(-1.0f)) && isnan(zs_ref_logf(NAN)));
}
END_TEST

/* ---- every kernel's bytes: per instruction set, and as recorded -------------- */

#define RK_MAX 64
typedef struct {
    int n;
    char name[RK_MAX][32];
    uint64_t hash[RK_MAX];
} kernel_hashes;

/* FNV-1a over the bytes of one or more outputs */
static uint64_t fnv(uint64_t h, const void *p, size_t bytes)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}
#define FNV0 0xcbf29ce484222325ull

static void rk_add(kernel_hashes *kh, const char *name, uint64_t h)
{
    if (kh->n >= RK_MAX) {
        fprintf(stderr, "check_ref: more than %d kernels: raise RK_MAX\n", RK_MAX);
        abort();
    }
    snprintf(kh->name[kh->n], sizeof kh->name[0], "%s", name);
    kh->hash[kh->n++] = h;
}
#define RK1(name, p1, b1) rk_add(kh, name, fnv(FNV0, p1, b1))
#define RK2(name, p1, b1, p2, b2) rk_add(kh, name, fnv(fnv(FNV0, p1, b1), p2, b2))
#define RK3(name, p1, b1, p2, b2, p3, b3) \
    rk_add(kh, name, fnv(fnv(fnv(FNV0, p1, b1), p2, b2), p3, b3))

enum { HB = 2, HT = 12, HC = 16, HNH = 4, HNKV = 2, HHD = 4, HV = 40, HN = HB * HT * HC,
       HBT = HB * HT, HTT = HB * HNH * HT * HT, HROW = (HNH + 2 * HNKV) * HHD };

/* The dense and layer kernels on fixed inputs. */
static void rk_layers(zs_backend_t be, kernel_hashes *kh)
{
    static float a[4096], b[4096], c[4096], x[HN], y[HN], z[HN], g[HN], w[HC], bias[HC];
    static float mean[HBT], rstd[HBT], dw[HC], db[HC], wte[HV * HC], wpe[HT * HC];
    static float qkv[HBT * 3 * HC], dqkv[HBT * 3 * HC], o[HN], pre[HTT], att[HTT];
    static float dpre[HTT], datt[HTT], gq[HBT * HROW], dgq[HBT * HROW], go[HBT * HNH * HHD];
    static float tab[HT * HHD], sw[HBT * 2 * HC], dsw[HBT * 2 * HC];
    int32_t tok[HBT];
    rng_state = 0x5eed;
    fill(a, 4096);
    fill(b, 4096);
    for (int i = 0; i < HBT; i++)
        tok[i] = (int32_t)((i * 7 + 3) % HV);
    const char *gn[4] = { "sgemm_nn", "sgemm_nt", "sgemm_tn", "sgemm_tt" };
    for (int v = 0; v < 4; v++) {
        fill(c, 4096);
        zs_backend_sgemm(be, v >> 1, v & 1, 20, 24, 130, 0.5f, a, v >> 1 ? 20 : 130, b,
                         v & 1 ? 130 : 24, 1.0f, c, 24);
        RK1(gn[v], c, 20 * 24 * 4);
    }
    fill(x, HN), fill(g, HN), fill(w, HC), fill(bias, HC);
    memcpy(y, x, sizeof y);
    zs_backend_add_bias(be, y, bias, HBT, HC);
    RK1("add_bias", y, sizeof y);
    memset(db, 0, sizeof db);
    zs_backend_bias_backward(be, db, g, HBT, HC);
    RK1("bias_backward", db, sizeof db);
    zs_backend_gelu_forward(be, y, x, HN);
    RK1("gelu_forward", y, sizeof y);
    memcpy(z, g, sizeof z);
    zs_backend_gelu_backward(be, z, x, g, HN);
    RK1("gelu_backward", z, sizeof z);
    zs_backend_relu_forward(be, y, x, HN);
    memcpy(z, g, sizeof z);
    zs_backend_relu_backward(be, z, x, g, HN);
    RK2("relu", y, sizeof y, z, sizeof z);
    zs_backend_layernorm_forward(be, y, mean, rstd, x, w, bias, HBT, HC);
    RK3("layernorm_forward", y, sizeof y, mean, sizeof mean, rstd, sizeof rstd);
    memset(z, 0, sizeof z), memset(dw, 0, sizeof dw), memset(db, 0, sizeof db);
    zs_backend_layernorm_backward(be, z, dw, db, g, x, w, mean, rstd, HBT, HC);
    RK3("layernorm_backward", z, sizeof z, dw, sizeof dw, db, sizeof db);
    zs_backend_residual_forward(be, y, x, g, HN);
    zs_backend_axpy(be, y, 0.3f, x, HN);
    zs_backend_scale(be, y, -1.7f, HN);
    RK1("residual_axpy_scale", y, sizeof y);
    fill(wte, HV * HC), fill(wpe, HT * HC);
    zs_backend_embedding_forward(be, y, tok, wte, wpe, HB, HT, HC);
    RK1("embedding_forward", y, sizeof y);
    zs_backend_embedding_backward(be, wte, wpe, g, tok, HB, HT, HC);
    RK2("embedding_backward", wte, sizeof wte, wpe, sizeof wpe);
    fill(qkv, sizeof qkv / 4), fill(o, HN), memset(dqkv, 0, sizeof dqkv);
    zs_backend_attention_forward(be, y, pre, att, qkv, HB, HT, HC, HNH);
    RK3("attention_forward", y, sizeof y, pre, sizeof pre, att, sizeof att);
    zs_backend_attention_backward(be, dqkv, dpre, datt, o, qkv, att, HB, HT, HC, HNH);
    RK3("attention_backward", dqkv, sizeof dqkv, dpre, sizeof dpre, datt, sizeof datt);
    zs_backend_rmsnorm_forward(be, y, rstd, x, w, HBT, HC, 1e-5f);
    RK2("rmsnorm_forward", y, sizeof y, rstd, sizeof rstd);
    memset(z, 0, sizeof z), memset(dw, 0, sizeof dw);
    zs_backend_rmsnorm_backward(be, z, dw, g, x, w, rstd, HBT, HC);
    RK2("rmsnorm_backward", z, sizeof z, dw, sizeof dw);
    fill(sw, sizeof sw / 4), memset(dsw, 0, sizeof dsw);
    zs_backend_swiglu_forward(be, y, sw, HBT, HC);
    RK1("swiglu_forward", y, sizeof y);
    zs_backend_swiglu_backward(be, dsw, sw, g, HBT, HC);
    RK1("swiglu_backward", dsw, sizeof dsw);
    fill(tab, sizeof tab / 4); /* any table: the kernel's arithmetic is what is hashed */
    fill(gq, sizeof gq / 4);
    zs_backend_rope_forward(be, gq, tab, HT, HB, HT, HNH + HNKV, HHD, HROW, 0);
    RK1("rope_forward", gq, sizeof gq);
    zs_backend_rope_backward(be, gq, tab, HT, HB, HT, HNH + HNKV, HHD, HROW, 0);
    RK1("rope_backward", gq, sizeof gq);
    fill(go, sizeof go / 4), memset(dgq, 0, sizeof dgq);
    zs_backend_attention_gqa_forward(be, go, pre, att, gq, HB, HT, HNH, HNKV, HHD);
    RK3("attention_gqa_forward", go, sizeof go, pre, sizeof pre, att, sizeof att);
    zs_backend_attention_gqa_backward(be, dgq, dpre, datt, go, gq, att, HB, HT, HNH, HNKV, HHD);
    RK3("attention_gqa_backward", dgq, sizeof dgq, dpre, sizeof dpre, datt, sizeof datt);
}

/* The loss, the vocabulary-parallel kernels, the storage types, the
 * fixed-point sums and the optimizers on fixed inputs. */
static void rk_rest(zs_backend_t be, kernel_hashes *kh)
{
    static float lg[HBT * HV], pr[HBT * HV], dl[HBT * HV], loss[HBT], mx[HBT], sums[2 * HBT];
    static float x[HN], y[HN], ma[HN], m[HN], v[HN], wte[HV * HC], out[HN];
    static uint16_t h16[HN], p16[HN];
    static int64_t fx[HN], fy[HN];
    int32_t tg[HBT];
    rng_state = 0xfeed;
    for (int i = 0; i < HBT * HV; i++)
        lg[i] = rnd() * 8.0f;
    for (int i = 0; i < HBT; i++)
        tg[i] = (int32_t)((i * 11 + 5) % HV);
    zs_backend_softmax_xent_forward(be, loss, pr, lg, tg, HBT, HV);
    RK2("softmax_xent_forward", loss, sizeof loss, pr, sizeof pr);
    zs_backend_softmax_xent_backward(be, dl, pr, tg, 1.0f / HBT, HBT, HV);
    RK1("softmax_xent_backward", dl, sizeof dl);
    fill(wte, HV * HC);
    zs_backend_vocab_embedding_forward(be, out, tg, wte, 8, 20, NULL, HB, HT, HC);
    zs_backend_vocab_embedding_backward(be, wte, NULL, out, tg, 8, 20, HB, HT, HC);
    RK2("vocab_embedding", out, sizeof out, wte, sizeof wte);
    zs_backend_xent_vocab_max(be, mx, lg, HBT, HV);
    zs_backend_xent_vocab_sums(be, sums, lg, mx, tg, 0, HBT, HV);
    zs_backend_xent_vocab_finish(be, loss, pr, lg, mx, sums, HBT, HV);
    zs_backend_xent_vocab_backward(be, dl, pr, tg, 0, 0.25f, HBT, HV);
    RK3("xent_vocab", sums, sizeof sums, loss, sizeof loss, dl, sizeof dl);
    memset(pr, 0, sizeof pr);
    zs_backend_xent_slice_sums(be, sums, lg, mx, HBT, HV, 3, HV - 5);
    zs_backend_rows_absmax(be, mx, lg, HBT, HV);
    zs_backend_grid_add(be, pr, lg, mx, HBT, HV, 3);
    RK2("exact_slices", sums, sizeof sums, pr, sizeof pr);
    fill(x, HN), fill(y, HN);
    double ss = zs_backend_sumsq(be, x, ZS_DTYPE_F32, HN);
    size_t nf = zs_backend_count_nonfinite(be, x, ZS_DTYPE_F32, HN);
    RK2("sumsq_count_nonfinite", &ss, sizeof ss, &nf, sizeof nf);
    zs_backend_convert_from_f32(be, h16, ZS_DTYPE_BF16, x, HN);
    zs_backend_convert_from_f32(be, p16, ZS_DTYPE_F16, x, HN);
    zs_backend_convert_to_f32(be, out, p16, ZS_DTYPE_F16, HN);
    RK3("convert", h16, sizeof h16, p16, sizeof p16, out, sizeof out);
    zs_backend_accumulate_f32(be, h16, ZS_DTYPE_BF16, y, HN);
    zs_backend_add_typed(be, p16, p16, ZS_DTYPE_F16, HN);
    RK2("accumulate_add_typed", h16, sizeof h16, p16, sizeof p16);
    size_t bad = zs_backend_to_fixed(be, fx, x, ZS_DTYPE_F32, HN, 40, (int64_t)1 << 62);
    zs_backend_to_fixed(be, fy, y, ZS_DTYPE_F32, HN, 40, (int64_t)1 << 62);
    zs_backend_add_i64(be, fx, fy, HN);
    zs_backend_from_fixed(be, out, ZS_DTYPE_F32, fx, HN, 40);
    RK2("fixed_point", out, sizeof out, &bad, sizeof bad);
    zs_optim_hparams h = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                           .weight_decay = 0.1f, .momentum = 0.9f, .grad_mul = 0.5f,
                           .bias_corr1 = 0.1f, .bias_corr2 = 0.05f, .l2 = 0.0f };
    fill(ma, HN), memset(m, 0, sizeof m), memset(v, 0, sizeof v);
    zs_backend_adamw_step(be, ma, m, v, y, ZS_DTYPE_F32, out, ZS_DTYPE_F32, HN, &h);
    h.l2 = 0.01f;
    zs_backend_adamw_step(be, ma, m, v, h16, ZS_DTYPE_BF16, p16, ZS_DTYPE_BF16, HN, &h);
    RK3("adamw_step", ma, sizeof ma, m, sizeof m, v, sizeof v);
    zs_backend_sgd_step(be, ma, m, y, ZS_DTYPE_F32, p16, ZS_DTYPE_F16, HN, &h);
    RK2("sgd_step", ma, sizeof ma, p16, sizeof p16);
}

/* ---- exact sums of slices: any order, the same bytes, within the bound ---- */

/* S slices of (R, N) values whose magnitudes differ by up to 2^20 between
 * slices and rows, their rows' maxima, then sums of the rounded slices in
 * two orders and as two partial sums added both ways: the same bytes, and
 * within S g / 2 of the float64 sum, g the row's grid. */
START_TEST(test_ref_exact_slices_any_order)
{
    enum { S = 4, R = 9, N = 33 };
    static float x[S][R * N], mx[R], o1[R * N], o2[R * N], h1[R * N], h2[R * N];
    zs_backend_t be = ref_open(NULL);
    ck_assert(zs_backend_has_exact_sums(be));
    rng_state = 0x5eed;
    for (int s = 0; s < S; s++)
        for (int i = 0; i < R * N; i++)
            x[s][i] = ldexpf(rnd(), (s * 7 + i / N * 3) % 21 - 10);
    for (int j = 0; j < N; j++)
        x[2][4 * N + j] = 0.0f; /* a row of zeros in one slice */
    memset(mx, 0, sizeof mx);
    for (int s = 0; s < S; s++)
        zs_backend_rows_absmax(be, mx, x[s], R, N);
    static const int ord[2][S] = { { 0, 1, 2, 3 }, { 3, 1, 0, 2 } };
    memset(o1, 0, sizeof o1), memset(o2, 0, sizeof o2);
    for (int s = 0; s < S; s++) {
        zs_backend_grid_add(be, o1, x[ord[0][s]], mx, R, N, S);
        zs_backend_grid_add(be, o2, x[ord[1][s]], mx, R, N, S);
    }
    ck_assert_msg(memcmp(o1, o2, sizeof o1) == 0, "two orders give other bytes");
    memset(h1, 0, sizeof h1), memset(h2, 0, sizeof h2);
    zs_backend_grid_add(be, h1, x[0], mx, R, N, S);
    zs_backend_grid_add(be, h1, x[1], mx, R, N, S);
    zs_backend_grid_add(be, h2, x[2], mx, R, N, S);
    zs_backend_grid_add(be, h2, x[3], mx, R, N, S);
    for (int i = 0; i < R * N; i++) {
        float ab = h1[i] + h2[i], ba = h2[i] + h1[i];
        ck_assert_msg(memcmp(&ab, &o1[i], 4) == 0 && memcmp(&ba, &o1[i], 4) == 0,
                      "element %d: partial sums added give %a, %a, not %a", i, (double)ab,
                      (double)ba, (double)o1[i]);
        int e;
        frexp((double)mx[i / N], &e);
        double g = ldexp(1.0, e + 2 - 24), want = 0.0;
        for (int s = 0; s < S; s++)
            want += (double)x[s][i];
        ck_assert_msg(fabs((double)o1[i] - want) <= S * g / 2,
                      "element %d: %a, float64 %a, more than S g / 2 apart", i, (double)o1[i],
                      want);
    }
    zs_backend_release(be);
}
END_TEST

/* 0 and the list in kh, or -1 (with the reason in err) when the backend
 * cannot start in that instruction set. */
static int ref_kernel_hashes(const char *isa, kernel_hashes *kh, char *err, size_t errlen)
{
    zs_backend_t be = ref_try_open(isa, err, errlen);
    if (be == NULL)
        return -1;
    kh->n = 0;
    rk_layers(be, kh);
    rk_rest(be, kh);
    zs_backend_release(be);
    return 0;
}

START_TEST(test_ref_isas_same_bytes)
{
    kernel_hashes base, got;
    char err[256];
    ck_assert_msg(ref_kernel_hashes("sse2", &base, err, sizeof err) == 0, "%s", err);
    const char *isas[] = { "avx2", "avx512" };
    for (int s = 0; s < 2; s++) {
        if (ref_kernel_hashes(isas[s], &got, err, sizeof err) != 0) {
            ck_assert_msg(strstr(err, "does not run") != NULL, "%s", err);
            printf("ref kernels: %s not on this CPU, not compared\n", isas[s]);
            continue;
        }
        for (int i = 0; i < base.n; i++)
            ck_assert_msg(got.hash[i] == base.hash[i], "ref kernel %s: %s differs from sse2",
                          base.name[i], isas[s]);
        printf("ref kernels: %s gives the same bytes as sse2 in all %d\n", isas[s], base.n);
    }
}
END_TEST

/* The list as `name hash` lines, in the order computed; 0. */
static int ref_kernel_hashes_print(FILE *out)
{
    kernel_hashes kh;
    char err[256];
    if (ref_kernel_hashes(NULL, &kh, err, sizeof err) != 0) {
        fprintf(stderr, "check_ref: %s\n", err);
        return 1;
    }
    for (int i = 0; i < kh.n; i++)
        fprintf(out, "%s %016llx\n", kh.name[i], (unsigned long long)kh.hash[i]);
    return 0;
}

START_TEST(test_ref_kernel_hashes_recorded)
{
    const char *dir = getenv("srcdir");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/ref_kernel_hashes.txt", dir ? dir : ".");
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s (run from the source tree, or set srcdir)", path);
    kernel_hashes kh;
    char err2[256];
    ck_assert_msg(ref_kernel_hashes(NULL, &kh, err2, sizeof err2) == 0, "%s", err2);
    char line[256];
    int i = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        char name[64];
        unsigned long long want;
        if (line[0] == '#' || sscanf(line, "%63s %llx", name, &want) != 2)
            continue;
        ck_assert_msg(i < kh.n, "%s lists more kernels than check_ref computes", path);
        ck_assert_msg(strcmp(name, kh.name[i]) == 0, "%s: line for %s where %s is expected", path,
                      name, kh.name[i]);
        ck_assert_msg(kh.hash[i] == want,
                      "first kernel whose bytes differ from the recorded ones: %s (%016llx, "
                      "recorded %016llx)",
                      name, (unsigned long long)kh.hash[i], want);
        i++;
    }
    fclose(f);
    ck_assert_msg(i == kh.n, "%s lists %d kernels, check_ref computes %d", path, i, kh.n);
}
END_TEST

/* ---- suite ------------------------------------------------------------------- */

static Suite *ref_suite(void)
{
    Suite *s = suite_create("ref");
    TCase *tc = tcase_create("numerics");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_ref_sgemm_order_and_error, 0, 4 * N_GEMM);
    tcase_add_test(tc, test_ref_attention_float64);
    tcase_add_test(tc, test_ref_softmax_xent_float64);
    tcase_add_test(tc, test_ref_logf_ulps);
    tcase_add_test(tc, test_ref_exact_slices_any_order);
    suite_add_tcase(s, tc);
    tc = tcase_create("bytes");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_ref_isas_same_bytes);
    tcase_add_test(tc, test_ref_kernel_hashes_recorded);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--print-kernel-hashes") == 0)
        return ref_kernel_hashes_print(stdout);
    if (argc > 1) {
        fprintf(stderr, "usage: check_ref [--print-kernel-hashes]\n");
        return 2;
    }
    SRunner *sr = srunner_create(ref_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed > 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
