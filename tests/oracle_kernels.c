/* zerosim — every kernel of a backend against the CPU backend (the oracle).
 *
 * The backend under test is $ZS_TEST_BACKEND (default "cuda"). Each kernel
 * gets the same seeded inputs on both backends; the outputs are compared by
 * normalized error, ||out - ref||_2 / ||ref||_2 (as ggml's backend tests
 * do), against a stated tolerance:
 *   0      kernels that the CUDA backend computes in the CPU's order with the
 *          CPU's roundings (elementwise, layernorm, embedding, bias gradient,
 *          conversions, fixed point, optimizers): bytes must match
 *   1e-5   sgemm (cuBLAS sums in another order)
 *   1e-5   GELU, softmax, cross-entropy, attention forward (the device's
 *          tanhf / expf / logf differ from the CPU's own by a few ulp)
 *   1e-5   attention backward (the CPU computes it through OpenBLAS GEMMs,
 *          whose summation order the device's loops do not follow)
 *   1e-12  sumsq (a fixed tree of double sums instead of index order),
 *          relative error
 * The Llama family's kernels: RMSNorm and the rotary embedding 0 (the CPU's
 * order; the rotary table is the host's); SwiGLU 1e-5 (the device's expf);
 * grouped-query attention 1e-5 as the multi-head one, and on the device
 * itself NKV == NH gives the multi-head kernels' bytes.
 * One line per kernel; exit 0 when all pass, 1 when any fails, 77 (skip)
 * with a line saying why when the backend is not in this build or has no
 * device here.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zerosim/backend.h"

static zs_backend_t ref, dut;
static int fails, passes;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float urand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *hrand(size_t n, float scale)
{
    float *h = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++)
        h[i] = urand() * scale;
    return h;
}

/* A device copy of host data on backend be. */
static void *up(zs_backend_t be, const void *h, size_t bytes)
{
    void *d = zs_backend_alloc(be, bytes);
    if (!d) {
        fprintf(stderr, "oracle_kernels: %s: allocation of %zu bytes failed\n",
                zs_backend_name(be), bytes);
        exit(1);
    }
    zs_backend_copy_h2d(be, d, h, bytes);
    return d;
}

static void *down(zs_backend_t be, const void *d, size_t bytes)
{
    void *h = malloc(bytes + 1);
    zs_backend_copy_d2h(be, h, d, bytes);
    return h;
}

/* A buffer present on both backends with the same contents. */
typedef struct {
    void *r, *d;
    size_t bytes;
} pair;

static pair pnew(const void *h, size_t bytes)
{
    return (pair){up(ref, h, bytes), up(dut, h, bytes), bytes};
}

static pair prand(size_t n, float scale)
{
    float *h = hrand(n, scale);
    pair p = pnew(h, n * sizeof(float));
    free(h);
    return p;
}

static void pfree(pair *p)
{
    zs_backend_free(ref, p->r);
    zs_backend_free(dut, p->d);
}

/* Compare a pair of fp32 buffers; report under `name`. */
static void check_f32(const char *name, const pair *p, double tol)
{
    size_t n = p->bytes / sizeof(float);
    float *a = down(ref, p->r, p->bytes), *b = down(dut, p->d, p->bytes);
    double num = 0.0, den = 0.0;
    int nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)b[i] - (double)a[i];
        if (!isfinite(b[i]) != !isfinite(a[i]))
            nonfinite = 1;
        if (isfinite(a[i]) && isfinite(b[i])) {
            num += d * d;
            den += (double)a[i] * a[i];
        }
    }
    double err = den > 0 ? sqrt(num / den) : sqrt(num);
    int same = memcmp(a, b, p->bytes) == 0;
    int ok = !nonfinite && (tol == 0 ? same : err <= tol);
    printf("%-5s %-34s nerr %.3e  tol %.0e%s\n", ok ? "ok" : "FAIL", name, err, tol,
           same ? "  (bytes equal)" : "");
    ok ? passes++ : fails++;
    free(a);
    free(b);
}

/* Compare raw bytes (typed storage, integers). */
static void check_bytes(const char *name, const pair *p)
{
    void *a = down(ref, p->r, p->bytes), *b = down(dut, p->d, p->bytes);
    size_t diff = 0;
    for (size_t i = 0; i < p->bytes; i++)
        diff += ((unsigned char *)a)[i] != ((unsigned char *)b)[i];
    printf("%-5s %-34s %zu of %zu bytes differ  tol 0\n", diff ? "FAIL" : "ok", name, diff,
           p->bytes);
    diff ? fails++ : passes++;
    free(a);
    free(b);
}

static void check_scalar(const char *name, double r, double d, double tol)
{
    double err = r != 0 ? fabs(d - r) / fabs(r) : fabs(d);
    int ok = tol == 0 ? d == r : err <= tol;
    printf("%-5s %-34s rel %.3e  tol %.0e\n", ok ? "ok" : "FAIL", name, err, tol);
    ok ? passes++ : fails++;
}



static void test_sgemm(void)
{
    const int m = 37, n = 53, k = 71;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            pair a = prand((size_t)m * k, 1), b = prand((size_t)k * n, 1);
            pair c = prand((size_t)m * n, 1);
            int lda = ta ? m : k, ldb = tb ? k : n;
            zs_backend_sgemm(ref, ta, tb, m, n, k, 0.7f, a.r, lda, b.r, ldb, 0.3f, c.r, n);
            zs_backend_sgemm(dut, ta, tb, m, n, k, 0.7f, a.d, lda, b.d, ldb, 0.3f, c.d, n);
            char name[64];
            snprintf(name, sizeof name, "sgemm %c%c", ta ? 'T' : 'N', tb ? 'T' : 'N');
            check_f32(name, &c, 1e-5);
            pfree(&a);
            pfree(&b);
            pfree(&c);
        }
}

static void test_elementwise(void)
{
    const int bt = 24, oc = 40;
    const size_t n = (size_t)bt * oc;
    pair out = prand(n, 1), bias = prand((size_t)oc, 1);
    zs_backend_add_bias(ref, out.r, bias.r, bt, oc);
    zs_backend_add_bias(dut, out.d, bias.d, bt, oc);
    check_f32("add_bias", &out, 0);
    zs_backend_bias_backward(ref, bias.r, out.r, bt, oc);
    zs_backend_bias_backward(dut, bias.d, out.d, bt, oc);
    check_f32("bias_backward", &bias, 0);

    pair inp = prand(n, 3), y = prand(n, 1), dinp = prand(n, 1), dout = prand(n, 1);
    zs_backend_gelu_forward(ref, y.r, inp.r, n);
    zs_backend_gelu_forward(dut, y.d, inp.d, n);
    check_f32("gelu_forward", &y, 1e-5);
    zs_backend_gelu_backward(ref, dinp.r, inp.r, dout.r, n);
    zs_backend_gelu_backward(dut, dinp.d, inp.d, dout.d, n);
    check_f32("gelu_backward", &dinp, 1e-5);
    zs_backend_relu_forward(ref, y.r, inp.r, n);
    zs_backend_relu_forward(dut, y.d, inp.d, n);
    check_f32("relu_forward", &y, 0);
    zs_backend_relu_backward(ref, dinp.r, inp.r, dout.r, n);
    zs_backend_relu_backward(dut, dinp.d, inp.d, dout.d, n);
    check_f32("relu_backward", &dinp, 0);
    zs_backend_residual_forward(ref, y.r, inp.r, dout.r, n);
    zs_backend_residual_forward(dut, y.d, inp.d, dout.d, n);
    check_f32("residual_forward", &y, 0);
    zs_backend_axpy(ref, y.r, -0.37f, inp.r, n);
    zs_backend_axpy(dut, y.d, -0.37f, inp.d, n);
    check_f32("axpy", &y, 0);
    zs_backend_scale(ref, y.r, 1.7f, n);
    zs_backend_scale(dut, y.d, 1.7f, n);
    check_f32("scale", &y, 0);
    pair *ps[] = {&out, &bias, &inp, &y, &dinp, &dout};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        pfree(ps[i]);
}

static void test_layernorm(void)
{
    const int bt = 33, c = 48;
    const size_t n = (size_t)bt * c;
    pair out = prand(n, 1), mean = prand((size_t)bt, 1), rstd = prand((size_t)bt, 1);
    pair inp = prand(n, 2), w = prand((size_t)c, 1), b = prand((size_t)c, 1);
    zs_backend_layernorm_forward(ref, out.r, mean.r, rstd.r, inp.r, w.r, b.r, bt, c);
    zs_backend_layernorm_forward(dut, out.d, mean.d, rstd.d, inp.d, w.d, b.d, bt, c);
    check_f32("layernorm_forward out", &out, 0);
    check_f32("layernorm_forward mean", &mean, 0);
    check_f32("layernorm_forward rstd", &rstd, 0);
    pair dinp = prand(n, 1), dw = prand((size_t)c, 1), db = prand((size_t)c, 1);
    pair dout = prand(n, 1);
    zs_backend_layernorm_backward(ref, dinp.r, dw.r, db.r, dout.r, inp.r, w.r, mean.r, rstd.r,
                                  bt, c);
    zs_backend_layernorm_backward(dut, dinp.d, dw.d, db.d, dout.d, inp.d, w.d, mean.d, rstd.d,
                                  bt, c);
    check_f32("layernorm_backward dinp", &dinp, 0);
    check_f32("layernorm_backward dweight", &dw, 0);
    check_f32("layernorm_backward dbias", &db, 0);
    pair *ps[] = {&out, &mean, &rstd, &inp, &w, &b, &dinp, &dw, &db, &dout};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        pfree(ps[i]);
}

static void test_embedding_attention_xent(void)
{
    const int B = 3, T = 17, C = 32, NH = 4, V = 29;
    int32_t tok[3 * 17];
    for (int i = 0; i < B * T; i++)
        {
        urand();
        tok[i] = (int32_t)(rng % (uint64_t)V);
    }
    pair tokens = pnew(tok, sizeof tok);
    pair wte = prand((size_t)V * C, 1), wpe = prand((size_t)T * C, 1);
    pair out = prand((size_t)B * T * C, 1);
    zs_backend_embedding_forward(ref, out.r, tokens.r, wte.r, wpe.r, B, T, C);
    zs_backend_embedding_forward(dut, out.d, tokens.d, wte.d, wpe.d, B, T, C);
    check_f32("embedding_forward", &out, 0);
    zs_backend_embedding_backward(ref, wte.r, wpe.r, out.r, tokens.r, B, T, C);
    zs_backend_embedding_backward(dut, wte.d, wpe.d, out.d, tokens.d, B, T, C);
    check_f32("embedding_backward dwte", &wte, 0);
    check_f32("embedding_backward dwpe", &wpe, 0);

    size_t natt = (size_t)B * NH * T * T;
    pair qkv = prand((size_t)B * T * 3 * C, 1), pre = prand(natt, 1), att = prand(natt, 1);
    zs_backend_attention_forward(ref, out.r, pre.r, att.r, qkv.r, B, T, C, NH);
    zs_backend_attention_forward(dut, out.d, pre.d, att.d, qkv.d, B, T, C, NH);
    check_f32("attention_forward out", &out, 1e-5);
    check_f32("attention_forward preatt", &pre, 0);
    check_f32("attention_forward att", &att, 1e-5);
    /* the backward from the same saved softmax on both */
    float *hatt = down(ref, att.r, att.bytes);
    zs_backend_copy_h2d(dut, att.d, hatt, att.bytes);
    free(hatt);
    pair dqkv = prand((size_t)B * T * 3 * C, 1), dpre = prand(natt, 1), datt = prand(natt, 1);
    pair dout = prand((size_t)B * T * C, 1);
    zs_backend_attention_backward(ref, dqkv.r, dpre.r, datt.r, dout.r, qkv.r, att.r, B, T, C, NH);
    zs_backend_attention_backward(dut, dqkv.d, dpre.d, datt.d, dout.d, qkv.d, att.d, B, T, C, NH);
    check_f32("attention_backward dqkv", &dqkv, 1e-5);
    check_f32("attention_backward dpreatt", &dpre, 1e-5);
    check_f32("attention_backward datt", &datt, 1e-5);

    const int bt = B * T;
    pair logits = prand((size_t)bt * V, 4), probs = prand((size_t)bt * V, 1);
    pair losses = prand((size_t)bt, 1);
    zs_backend_softmax_xent_forward(ref, losses.r, probs.r, logits.r, tokens.r, bt, V);
    zs_backend_softmax_xent_forward(dut, losses.d, probs.d, logits.d, tokens.d, bt, V);
    check_f32("softmax_xent_forward losses", &losses, 1e-5);
    check_f32("softmax_xent_forward probs", &probs, 1e-5);
    float *hp = down(ref, probs.r, probs.bytes);
    zs_backend_copy_h2d(dut, probs.d, hp, probs.bytes);
    free(hp);
    zs_backend_softmax_xent_backward(ref, logits.r, probs.r, tokens.r, 0.25f, bt, V);
    zs_backend_softmax_xent_backward(dut, logits.d, probs.d, tokens.d, 0.25f, bt, V);
    check_f32("softmax_xent_backward", &logits, 0);
    pair *ps[] = {&tokens, &wte, &wpe, &out, &qkv, &pre, &att, &dqkv, &dpre, &datt, &dout,
                  &logits, &probs, &losses};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        pfree(ps[i]);
}

static const char *const tname[] = {"f32", "bf16", "f16"};

/* A typed buffer of n random values (stored as t) with a few inf/NaN. */
static pair ptyped(zs_dtype t, size_t n, float scale, int specials)
{
    float *h = hrand(n, scale);
    if (specials) {
        h[n / 3] = INFINITY;
        h[n / 2] = NAN;
    }
    void *s = malloc(n * 4 + 1);
    for (size_t i = 0; i < n; i++) {
        if (t == ZS_DTYPE_F32)
            ((float *)s)[i] = h[i];
        else if (t == ZS_DTYPE_BF16)
            ((uint16_t *)s)[i] = zs_f32_to_bf16(h[i]);
        else
            ((uint16_t *)s)[i] = zs_f32_to_f16(h[i]);
    }
    pair p = pnew(s, n * zs_dtype_size(t));
    free(h);
    free(s);
    return p;
}

static void test_typed(void)
{
    const size_t n = 100003; /* more than one grid of threads, odd */
    char name[64];
    for (int ti = 0; ti < 3; ti++) {
        zs_dtype t = (zs_dtype)ti;
        pair x = ptyped(t, n, 3, 0);
        snprintf(name, sizeof name, "sumsq %s", tname[ti]);
        check_scalar(name, zs_backend_sumsq(ref, x.r, t, n), zs_backend_sumsq(dut, x.d, t, n), 1e-12);
        pair xs = ptyped(t, n, 3, 1);
        snprintf(name, sizeof name, "count_nonfinite %s", tname[ti]);
        check_scalar(name, (double)zs_backend_count_nonfinite(ref, xs.r, t, n),
                     (double)zs_backend_count_nonfinite(dut, xs.d, t, n), 0);
        /* conversions: random fp32, including values past fp16's range */
        pair f = prand(n, ti == 2 ? 70000.0f : 3.0f), s = ptyped(t, n, 1, 0);
        zs_backend_convert_from_f32(ref, s.r, t, f.r, n);
        zs_backend_convert_from_f32(dut, s.d, t, f.d, n);
        snprintf(name, sizeof name, "convert_from_f32 %s", tname[ti]);
        check_bytes(name, &s);
        zs_backend_convert_to_f32(ref, f.r, s.r, t, n);
        zs_backend_convert_to_f32(dut, f.d, s.d, t, n);
        snprintf(name, sizeof name, "convert_to_f32 %s", tname[ti]);
        check_f32(name, &f, 0);
        pair g = prand(n, 0.01f);
        zs_backend_accumulate_f32(ref, s.r, t, g.r, n);
        zs_backend_accumulate_f32(dut, s.d, t, g.d, n);
        snprintf(name, sizeof name, "accumulate_f32 %s", tname[ti]);
        check_bytes(name, &s);
        zs_backend_add_typed(ref, s.r, x.r, t, n);
        zs_backend_add_typed(dut, s.d, x.d, t, n);
        snprintf(name, sizeof name, "add_typed %s", tname[ti]);
        check_bytes(name, &s);
        /* fixed point, with a limit that some elements pass */
        int64_t *z = calloc(n, 8);
        pair fx = pnew(z, n * 8), acc = pnew(z, n * 8);
        free(z);
        int fb = ti == 2 ? 24 : 40;
        int64_t lim = (int64_t)1 << (fb + 1);
        size_t br = zs_backend_to_fixed(ref, fx.r, xs.r, t, n, fb, lim);
        size_t bd = zs_backend_to_fixed(dut, fx.d, xs.d, t, n, fb, lim);
        snprintf(name, sizeof name, "to_fixed %s count", tname[ti]);
        check_scalar(name, (double)br, (double)bd, 0);
        snprintf(name, sizeof name, "to_fixed %s", tname[ti]);
        check_bytes(name, &fx);
        zs_backend_add_i64(ref, acc.r, fx.r, n);
        zs_backend_add_i64(dut, acc.d, fx.d, n);
        zs_backend_add_i64(ref, acc.r, fx.r, n);
        zs_backend_add_i64(dut, acc.d, fx.d, n);
        check_bytes("add_i64", &acc);
        zs_backend_from_fixed(ref, s.r, t, acc.r, n, fb);
        zs_backend_from_fixed(dut, s.d, t, acc.d, n, fb);
        snprintf(name, sizeof name, "from_fixed %s", tname[ti]);
        check_bytes(name, &s);
        pair *ps[] = {&x, &xs, &f, &s, &g, &fx, &acc};
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
            pfree(ps[i]);
    }
}

static void test_optim(void)
{
    const size_t n = 50001;
    char name[64];
    zs_optim_hparams h = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                          .weight_decay = 0.1f, .momentum = 0.9f, .grad_mul = 0.5f,
                          .bias_corr1 = 1.0f - 0.9f * 0.9f, .bias_corr2 = 1.0f - 0.95f * 0.95f};
    for (int ti = 0; ti < 3; ti++) {
        zs_dtype t = (zs_dtype)ti;
        pair master = prand(n, 1), m = prand(n, 0.01f), v = prand(n, 0.01f);
        /* v must be non-negative: square it on the host */
        float *hv = down(ref, v.r, v.bytes);
        for (size_t i = 0; i < n; i++)
            hv[i] *= hv[i];
        zs_backend_copy_h2d(ref, v.r, hv, v.bytes);
        zs_backend_copy_h2d(dut, v.d, hv, v.bytes);
        free(hv);
        pair g = ptyped(t, n, 0.1f, 0), p = ptyped(t, n, 1, 0);
        for (int step = 0; step < 3; step++) {
            zs_backend_adamw_step(ref, master.r, m.r, v.r, g.r, t, p.r, t, n, &h);
            zs_backend_adamw_step(dut, master.d, m.d, v.d, g.d, t, p.d, t, n, &h);
        }
        snprintf(name, sizeof name, "adamw_step %s master", tname[ti]);
        check_f32(name, &master, 0);
        snprintf(name, sizeof name, "adamw_step %s m, v", tname[ti]);
        check_f32(name, &m, 0);
        check_f32(name, &v, 0);
        snprintf(name, sizeof name, "adamw_step %s param", tname[ti]);
        check_bytes(name, &p);
        for (int step = 0; step < 3; step++) {
            zs_backend_sgd_step(ref, master.r, m.r, g.r, t, p.r, t, n, &h);
            zs_backend_sgd_step(dut, master.d, m.d, g.d, t, p.d, t, n, &h);
        }
        snprintf(name, sizeof name, "sgd_step %s master, buf", tname[ti]);
        check_f32(name, &master, 0);
        check_f32(name, &m, 0);
        snprintf(name, sizeof name, "sgd_step %s param", tname[ti]);
        check_bytes(name, &p);
        pair *ps[] = {&master, &m, &v, &g, &p};
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
            pfree(ps[i]);
    }
}

/* the rows of a GQA qkv (NH query, NKV key, NKV value heads of HD) */
static void test_gqa(int b, int t, int nh, int nkv, int hd)
{
    size_t nqkv = (size_t)b * t * (nh + 2 * nkv) * hd, nout = (size_t)b * t * nh * hd;
    size_t natt = (size_t)b * nh * t * t;
    pair qkv = prand(nqkv, 1), out = prand(nout, 1), pre = prand(natt, 1), att = prand(natt, 1);
    zs_backend_attention_gqa_forward(ref, out.r, pre.r, att.r, qkv.r, b, t, nh, nkv, hd);
    zs_backend_attention_gqa_forward(dut, out.d, pre.d, att.d, qkv.d, b, t, nh, nkv, hd);
    char name[64];
    snprintf(name, sizeof name, "attention_gqa %d/%d forward out", nh, nkv);
    check_f32(name, &out, 1e-5);
    snprintf(name, sizeof name, "attention_gqa %d/%d forward att", nh, nkv);
    check_f32(name, &att, 1e-5);
    float *hatt = down(ref, att.r, att.bytes); /* the backward from the same softmax */
    zs_backend_copy_h2d(dut, att.d, hatt, att.bytes);
    free(hatt);
    pair dqkv = prand(nqkv, 1), dpre = prand(natt, 1), datt = prand(natt, 1);
    pair dout = prand(nout, 1);
    zs_backend_attention_gqa_backward(ref, dqkv.r, dpre.r, datt.r, dout.r, qkv.r, att.r, b, t, nh,
                                      nkv, hd);
    zs_backend_attention_gqa_backward(dut, dqkv.d, dpre.d, datt.d, dout.d, qkv.d, att.d, b, t, nh,
                                      nkv, hd);
    snprintf(name, sizeof name, "attention_gqa %d/%d backward dqkv", nh, nkv);
    check_f32(name, &dqkv, 1e-5);
    pair *ps[] = {&qkv, &out, &pre, &att, &dqkv, &dpre, &datt, &dout};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        pfree(ps[i]);
}

/* On the device under test alone: the grouped kernels with NKV == NH and
 * the multi-head kernels give the same bytes. */
static void test_gqa_is_mha(void)
{
    const int B = 2, T = 19, NH = 4, HD = 8, C = NH * HD;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *hqkv = hrand(nqkv, 1), *hdy = hrand(nout, 1);
    void *bufs[2][4];
    for (int g = 0; g < 2; g++) {
        float *qkv = up(dut, hqkv, nqkv * 4), *dy = up(dut, hdy, nout * 4);
        float *zero = calloc(nqkv > natt ? nqkv : natt, sizeof(float));
        float *out = up(dut, zero, nout * 4), *pre = up(dut, zero, natt * 4);
        float *att = up(dut, zero, natt * 4), *dqkv = up(dut, zero, nqkv * 4);
        float *dpre = up(dut, zero, natt * 4), *datt = up(dut, zero, natt * 4);
        if (g) {
            zs_backend_attention_gqa_forward(dut, out, pre, att, qkv, B, T, NH, NH, HD);
            zs_backend_attention_gqa_backward(dut, dqkv, dpre, datt, dy, qkv, att, B, T, NH, NH,
                                              HD);
        } else {
            zs_backend_attention_forward(dut, out, pre, att, qkv, B, T, C, NH);
            zs_backend_attention_backward(dut, dqkv, dpre, datt, dy, qkv, att, B, T, C, NH);
        }
        bufs[g][0] = down(dut, out, nout * 4), bufs[g][1] = down(dut, att, natt * 4);
        bufs[g][2] = down(dut, dqkv, nqkv * 4), bufs[g][3] = down(dut, dpre, natt * 4);
        float *ds[] = {qkv, dy, out, pre, att, dqkv, dpre, datt};
        for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++)
            zs_backend_free(dut, ds[i]);
        free(zero);
    }
    size_t len[4] = {nout * 4, natt * 4, nqkv * 4, natt * 4};
    int same = 1;
    for (int i = 0; i < 4; i++) {
        same &= memcmp(bufs[0][i], bufs[1][i], len[i]) == 0;
        free(bufs[0][i]);
        free(bufs[1][i]);
    }
    printf("%-5s %-34s bytes %s\n", same ? "ok" : "FAIL", "attention_gqa NKV=NH vs MHA",
           same ? "equal" : "differ");
    same ? passes++ : fails++;
    free(hqkv);
    free(hdy);
}

static void test_llama(void)
{
    const int bt = 21, c = 40, f = 37, B = 3, T = 7, NH = 4, NKV = 2, HD = 8, POS0 = 5;
    pair inp = prand((size_t)bt * c, 2), w = prand((size_t)c, 1), out = prand((size_t)bt * c, 1);
    pair rstd = prand((size_t)bt, 1), dinp = prand((size_t)bt * c, 1), dw = prand((size_t)c, 1);
    pair dout = prand((size_t)bt * c, 1);
    zs_backend_rmsnorm_forward(ref, out.r, rstd.r, inp.r, w.r, bt, c, 1e-5f);
    zs_backend_rmsnorm_forward(dut, out.d, rstd.d, inp.d, w.d, bt, c, 1e-5f);
    check_f32("rmsnorm_forward out", &out, 0);
    check_f32("rmsnorm_forward rstd", &rstd, 0);
    zs_backend_rmsnorm_backward(ref, dinp.r, dw.r, dout.r, inp.r, w.r, rstd.r, bt, c);
    zs_backend_rmsnorm_backward(dut, dinp.d, dw.d, dout.d, inp.d, w.d, rstd.d, bt, c);
    check_f32("rmsnorm_backward dinp", &dinp, 0);
    check_f32("rmsnorm_backward dweight", &dw, 0);

    pair gu = prand((size_t)bt * 2 * f, 6), y = prand((size_t)bt * f, 1);
    pair dgu = prand((size_t)bt * 2 * f, 1), dy = prand((size_t)bt * f, 1);
    zs_backend_swiglu_forward(ref, y.r, gu.r, bt, f);
    zs_backend_swiglu_forward(dut, y.d, gu.d, bt, f);
    check_f32("swiglu_forward", &y, 1e-5);
    zs_backend_swiglu_backward(ref, dgu.r, gu.r, dy.r, bt, f);
    zs_backend_swiglu_backward(dut, dgu.d, gu.d, dy.d, bt, f);
    check_f32("swiglu_backward", &dgu, 1e-5);

    float tab[(T + POS0) * HD];
    zs_rope_params rp = {.theta = 500000.0, .llama3_scaling = 1, .factor = 8.0,
                         .low_freq_factor = 1.0, .high_freq_factor = 4.0,
                         .original_max_position = 8.0};
    if (zs_rope_table_fill(tab, 0, T + POS0, HD, &rp) != 0) {
        printf("FAIL  rope table\n");
        fails++;
        return;
    }
    int row = (NH + 2 * NKV) * HD;
    pair table = pnew(tab, sizeof tab), qkv = prand((size_t)B * T * row, 1);
    zs_backend_rope_forward(ref, qkv.r, table.r, T + POS0, B, T, NH + NKV, HD, row, POS0);
    zs_backend_rope_forward(dut, qkv.d, table.d, T + POS0, B, T, NH + NKV, HD, row, POS0);
    check_f32("rope_forward", &qkv, 0);
    zs_backend_rope_backward(ref, qkv.r, table.r, T + POS0, B, T, NH + NKV, HD, row, POS0);
    zs_backend_rope_backward(dut, qkv.d, table.d, T + POS0, B, T, NH + NKV, HD, row, POS0);
    check_f32("rope_backward", &qkv, 0);

    test_gqa(3, 17, 4, 2, 8);
    test_gqa(2, 40, 6, 1, 16);
    test_gqa(2, 9, 3, 3, 8);
    test_gqa_is_mha();
    pair *ps[] = {&inp, &w, &out, &rstd, &dinp, &dw, &dout, &gu, &y, &dgu, &dy, &table, &qkv};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        pfree(ps[i]);
}

int main(void)
{
    const char *name = getenv("ZS_TEST_BACKEND");
    if (!name || !*name)
        name = "cuda";
    char err[512];
    ref = zs_backend_init("cpu", err, sizeof err);
    if (!ref) {
        fprintf(stderr, "oracle_kernels: cpu backend: %s\n", err);
        return 1;
    }
    dut = zs_backend_init(name, err, sizeof err);
    if (!dut) {
        printf("SKIP: backend '%s' not available here: %s\n", name, err);
        zs_backend_release(ref);
        return 77;
    }
    printf("# %s against cpu: normalized error ||out-ref|| / ||ref||\n", name);
    test_sgemm();
    test_elementwise();
    test_layernorm();
    test_embedding_attention_xent();
    test_typed();
    test_optim();
    test_llama();
    printf("# %d passed, %d failed\n", passes, fails);
    zs_backend_release(dut);
    zs_backend_release(ref);
    return fails ? 1 : 0;
}
