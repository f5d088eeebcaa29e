/* Tests of weight quantization (src/quant/quant.c, src/io/quantfile.c)
 * against values worked out by hand or published: the absmax and zero-point
 * vectors of Dettmers' LLM.int8() write-up, bitsandbytes' 16 NF4 levels,
 * QLoRA's 4.127 bits per parameter and ~33.5 GB for 65B parameters. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zerosim/deepcomp.h"
#include "zerosim/error.h"
#include "zerosim/huffman.h"
#include "zerosim/io.h"
#include "zerosim/quant.h"
#include "zerosim/quantfile.h"

static const float ref_x[8] = {1.2f, -0.5f, -4.3f, 1.2f, -3.1f, 0.8f, 2.4f, 5.4f};

START_TEST(test_absmax_reference)
{
    static const int8_t want[8] = {28, -12, -101, 28, -73, 19, 56, 127};
    int8_t q[8];
    float a;
    zs_quant_absmax_i8(ref_x, 8, q, &a);
    ck_assert_float_eq(a, 5.4f);
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(q[i], want[i]);
}
END_TEST

START_TEST(test_zeropoint_reference)
{
    static const int8_t want[8] = {17, -28, -128, 17, -96, 6, 48, 127};
    int8_t q[8];
    float nd;
    uint8_t zp;
    zs_quant_zeropoint_i8(ref_x, 8, q, &nd, &zp);
    ck_assert_float_eq_tol(nd, 255.0f / 9.7f, 1e-5f);
    ck_assert_int_eq(zp, 113); /* round(4.3 * 255 / 9.7) = round(113.04) */
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(q[i], want[i]);
}
END_TEST

START_TEST(test_nf4_levels)
{
    /* the table, four decimals */
    static const double want[16] = {-1, -0.6962, -0.5251, -0.3949, -0.2844, -0.1848, -0.0911, 0,
                                    0.0796, 0.1609, 0.2461, 0.3379, 0.4407, 0.5626, 0.7230, 1};
    for (int k = 0; k < 16; k++) {
        ck_assert_double_eq_tol(zs_nf4_levels[k], want[k], 0.5e-4);
        ck_assert_int_eq(zs_quant_nf4_index(zs_nf4_levels[k]), k);
    }
    /* between two levels: the nearer one */
    ck_assert_int_eq(zs_quant_nf4_index(0.05f), 8);  /* 0.0796 - 0.05 < 0.05 */
    ck_assert_int_eq(zs_quant_nf4_index(0.03f), 7);
    ck_assert_int_eq(zs_quant_nf4_index(-0.9f), 0);
    ck_assert_int_eq(zs_quant_nf4_index(0.9f), 15);
    /* a block of the levels times 2.5 is stored exactly (absmax 2.5) */
    float x[16], y[16];
    for (int k = 0; k < 16; k++)
        x[k] = 2.5f * zs_nf4_levels[k];
    zs_quant_spec s = {.format = ZS_QUANT_NF4};
    ck_assert_int_eq(zs_quant_spec_finalize(&s), 0);
    ck_assert_uint_eq(s.block, 64);
    zs_qtensor t;
    ck_assert_int_eq(zs_quant_tensor(&s, x, 1, 16, &t), 0);
    ck_assert_uint_eq(t.qbytes, 8);
    ck_assert_uint_eq(t.q[0], 0x10);  /* indices 0 (low nibble) and 1 */
    ck_assert_uint_eq(t.q[7], 0xfe);  /* indices 14 and 15 */
    zs_dequant_tensor(&t, y);
    for (int k = 0; k < 16; k++)
        ck_assert_float_eq(y[k], x[k]);
    zs_qtensor_free(&t);
}
END_TEST

START_TEST(test_bits_per_param)
{
    zs_quant_spec s = {.format = ZS_QUANT_NF4, .double_quant = 1};
    ck_assert_int_eq(zs_quant_spec_finalize(&s), 0);
    double b = zs_quant_bits_per_param_limit(&s);
    ck_assert_double_eq_tol(b, 4.127, 0.0005);
    ck_assert_double_eq_tol(b, 4.0 + 8.0 / 64 + 32.0 / (64 * 256), 1e-12);
    double gb = 65e9 * b / 8 / 1e9; /* QLoRA: about 33.5 GB for 65B */
    ck_assert(gb > 33.45 && gb < 33.55);
    /* an exact count approaches the formula: 64 * 256 * 1000 weights */
    size_t n = (size_t)64 * 256 * 1000;
    ck_assert_double_eq_tol(zs_quant_bits_per_param(&s, n, 64), b, 1e-5);
    zs_quant_spec nod = {.format = ZS_QUANT_NF4};
    ck_assert_int_eq(zs_quant_spec_finalize(&nod), 0);
    ck_assert_double_eq_tol(zs_quant_bits_per_param_limit(&nod), 4.5, 1e-12);
    /* and the bytes of a quantized tensor agree with the per-parameter count */
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    zs_qtensor t;
    ck_assert_int_eq(zs_quant_tensor(&s, x, 256, n / 256, &t), 0);
    ck_assert_uint_eq(zs_qtensor_bytes(&t) * 8,
                      (size_t)llround(zs_quant_bits_per_param(&s, n, 64) * (double)n));
    ck_assert_uint_eq(zs_qtensor_bytes(&t), n / 2 + n / 64 + 4 * (n / 64 / 256) + 4);
    zs_qtensor_free(&t);
    free(x);
}
END_TEST

START_TEST(test_groups)
{
    const float x[4] = {1.0f, -2.0f, 100.0f, 50.0f};
    zs_quant_spec pc = {.format = ZS_QUANT_INT8, .per_channel = 1};
    zs_quant_spec pt = {.format = ZS_QUANT_INT8};
    zs_quant_spec bl = {.format = ZS_QUANT_INT8, .block = 3};
    ck_assert_int_eq(zs_quant_spec_finalize(&pc), 0);
    ck_assert_int_eq(zs_quant_spec_finalize(&pt), 0);
    ck_assert_int_eq(zs_quant_spec_finalize(&bl), 0);
    zs_qtensor t;
    ck_assert_int_eq(zs_quant_tensor(&pc, x, 2, 2, &t), 0); /* rows (1, -2) and (100, 50) */
    ck_assert_uint_eq(t.ngroups, 2);
    ck_assert_int_eq((int8_t)t.q[0], 64);  /* round(63.5) away from zero */
    ck_assert_int_eq((int8_t)t.q[1], -127);
    ck_assert_int_eq((int8_t)t.q[2], 127);
    ck_assert_int_eq((int8_t)t.q[3], 64);
    zs_qtensor_free(&t);
    ck_assert_int_eq(zs_quant_tensor(&pt, x, 2, 2, &t), 0);
    ck_assert_uint_eq(t.ngroups, 1);
    ck_assert_int_eq((int8_t)t.q[0], 1);   /* 1.27 */
    ck_assert_int_eq((int8_t)t.q[1], -3);  /* -2.54 */
    zs_qtensor_free(&t);
    ck_assert_int_eq(zs_quant_tensor(&bl, x, 2, 2, &t), 0); /* (1, -2, 100) and (50) */
    ck_assert_uint_eq(t.ngroups, 2);
    ck_assert_float_eq(t.scale[0], 100.0f);
    ck_assert_float_eq(t.scale[1], 50.0f);
    ck_assert_int_eq((int8_t)t.q[3], 127);
    zs_qtensor_free(&t);
    /* wrong combinations are refused */
    zs_quant_spec bad = {.format = ZS_QUANT_INT8, .per_channel = 1, .block = 8};
    ck_assert_int_ne(zs_quant_spec_finalize(&bad), 0);
    zs_quant_spec bad2 = {.format = ZS_QUANT_INT8, .double_quant = 1};
    ck_assert_int_ne(zs_quant_spec_finalize(&bad2), 0);
    zs_quant_format f;
    ck_assert_int_ne(zs_quant_format_parse("int4", &f), 0);
}
END_TEST

/* fake quantization = quantize then dequantize, bit for bit; absmax never
 * clamps, zero points only past half a step */
START_TEST(test_fake_matches)
{
    const zs_quant_spec specs[] = {
        {ZS_QUANT_INT8, 0, 0, 0}, {ZS_QUANT_INT8, 0, 1, 0}, {ZS_QUANT_INT8, 7, 0, 0},
        {ZS_QUANT_INT8_ZP, 0, 0, 0}, {ZS_QUANT_INT8_ZP, 0, 1, 0}, {ZS_QUANT_NF4, 64, 0, 0},
        {ZS_QUANT_NF4, 0, 1, 0}, {ZS_QUANT_NF4, 5, 0, 0},
    };
    size_t rows = 13, cols = 37, n = rows * cols;
    float *x = malloc(n * 4), *a = malloc(n * 4), *b = malloc(n * 4);
    uint8_t *mask = malloc(n);
    uint64_t st = 42;
    for (size_t i = 0; i < n; i++) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((double)(st >> 11) / 9007199254740992.0 - 0.3) * (i % 5 ? 1.0f : 7.0f);
    }
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        zs_quant_spec s = specs[k];
        ck_assert_int_eq(zs_quant_spec_finalize(&s), 0);
        zs_qtensor t;
        ck_assert_int_eq(zs_quant_tensor(&s, x, rows, cols, &t), 0);
        zs_dequant_tensor(&t, a);
        size_t clamped = zs_quant_fake(&s, x, b, mask, rows, cols);
        ck_assert_int_eq(memcmp(a, b, n * 4), 0);
        if (s.format != ZS_QUANT_INT8_ZP)
            ck_assert_uint_eq(clamped, 0);
        size_t ones = 0;
        for (size_t i = 0; i < n; i++)
            ones += mask[i];
        ck_assert_uint_eq(ones + clamped, n);
        /* the error is at most half a step of the group (int8: absmax/254) */
        for (size_t i = 0; i < n && s.format == ZS_QUANT_INT8; i++) {
            size_t g = i / t.group;
            ck_assert(fabsf(a[i] - x[i]) <= t.scale[g] / 254.0f * 1.0001f);
        }
        /* in place gives the same */
        memcpy(b, x, n * 4);
        zs_quant_fake(&s, b, b, NULL, rows, cols);
        ck_assert_int_eq(memcmp(a, b, n * 4), 0);
        zs_qtensor_free(&t);
    }
    free(x);
    free(a);
    free(b);
    free(mask);
}
END_TEST

START_TEST(test_double_quant_scales)
{
    size_t n = 64 * 600; /* 600 blocks: 3 blocks of scales, the last short */
    float *x = malloc(n * 4), *y = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        x[i] = sinf((float)i * 0.37f) * (1.0f + (float)(i / 64) * 0.01f);
    zs_quant_spec s = {.format = ZS_QUANT_NF4, .double_quant = 1};
    ck_assert_int_eq(zs_quant_spec_finalize(&s), 0);
    zs_qtensor t;
    ck_assert_int_eq(zs_quant_tensor(&s, x, 1, n, &t), 0);
    ck_assert_uint_eq(t.ngroups, 600);
    ck_assert_uint_eq(t.nsb, 3);
    zs_dequant_tensor(&t, y);
    /* every value within its block's largest NF4 gap (0.2 of the absmax),
     * the absmax itself off by at most half an int8 step of its scales */
    for (size_t g = 0; g < 600; g++) {
        float amax = 0;
        for (size_t i = g * 64; i < g * 64 + 64; i++)
            amax = fmaxf(amax, fabsf(x[i]));
        float step = t.scale_scale[g / 256] / 127.0f;
        for (size_t i = g * 64; i < g * 64 + 64; i++)
            ck_assert(fabsf(y[i] - x[i]) <= 0.15f * amax + step);
    }
    zs_qtensor_free(&t);
    free(x);
    free(y);
}
END_TEST

static zs_model_config mlp(void)
{
    zs_model_config c;
    memset(&c, 0, sizeof c);
    c.kind = ZS_MODEL_MLP;
    c.input_dim = 20;
    c.n_classes = 5;
    c.n_hidden = 2;
    c.widths[0] = 24;
    c.widths[1] = 16;
    return c;
}

START_TEST(test_file_roundtrip)
{
    static const zs_quant_spec specs[] = {
        {ZS_QUANT_INT8, 0, 1, 0}, {ZS_QUANT_INT8_ZP, 16, 0, 0}, {ZS_QUANT_NF4, 64, 0, 1}};
    zs_model_config c = mlp();
    size_t n = zs_model_count_params(&c);
    float *p = malloc(n * 4), *dq = malloc(n * 4), *mem = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        p[i] = cosf((float)i) * 0.3f;
    char dir[] = "/tmp/zs_quant_XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/q.safetensors", dir);
    for (size_t k = 0; k < 3; k++) {
        zs_quant_spec s = specs[k];
        ck_assert_int_eq(zs_quant_spec_finalize(&s), 0);
        zs_qfile_stats st, st2, st3;
        ck_assert_int_eq(zs_qfile_write(path, &c, 77, &s, p, dq, &st), 0);
        ck_assert_int_eq(zs_quant_model(&c, &s, p, mem, &st3), 0);
        ck_assert_int_eq(memcmp(dq, mem, n * 4), 0);
        /* three weights of 20x24, 24x16, 16x5: quantized; the biases not */
        ck_assert_uint_eq(st.quantized_params, 20 * 24 + 24 * 16 + 16 * 5);
        ck_assert_uint_eq(st.other_params, 24 + 16 + 5);
        ck_assert_int_eq(zs_qfile_is(path), 1);
        zs_model_config c2;
        uint64_t seed;
        zs_quant_spec s2;
        float *back;
        ck_assert_int_eq(zs_qfile_read(path, &c2, &seed, &s2, &back, &st2), 0);
        ck_assert_uint_eq(seed, 77);
        ck_assert_int_eq(c2.kind, ZS_MODEL_MLP);
        ck_assert_int_eq(c2.widths[1], 16);
        ck_assert_int_eq(s2.format, s.format);
        ck_assert_uint_eq(s2.block, s.block);
        ck_assert_int_eq(s2.double_quant, s.double_quant);
        ck_assert_uint_eq(st2.quantized_bytes, st.quantized_bytes);
        ck_assert_int_eq(memcmp(back, dq, n * 4), 0);
        free(back);
    }
    /* a damaged file: cut short, then a byte of the header changed */
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_int_eq(truncate(path, sb.st_size - 10), 0);
    zs_model_config c2;
    uint64_t seed;
    zs_quant_spec s2;
    float *back = NULL;
    zs_qfile_stats st2;
    ck_assert_int_ne(zs_qfile_read(path, &c2, &seed, &s2, &back, &st2), 0);
    ck_assert_ptr_null(back);
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), path));
    ck_assert_ptr_null(strchr(zs_error_msg(), '\n'));
    /* a safetensors file that is not a quantized model */
    zs_st_writer w;
    uint64_t shape[1] = {3};
    float three[3] = {1, 2, 3};
    ck_assert_int_eq(zs_st_writer_open(&w, path), 0);
    ck_assert_int_eq(zs_st_writer_add(&w, "x", ZS_ST_F32, 1, shape), 0);
    ck_assert_int_eq(zs_st_writer_data(&w, three, sizeof three), 0);
    ck_assert_int_eq(zs_st_writer_commit(&w, NULL), 0);
    ck_assert_int_eq(zs_qfile_is(path), 0);
    ck_assert_int_ne(zs_qfile_read(path, &c2, &seed, &s2, &back, &st2), 0);
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "not a zerosim quantized file"));
    /* metadata naming a model of 2^30 parameters over 12 bytes of tensors:
     * refused before its 4 GiB are allocated */
    zs_model_config big = mlp();
    big.input_dim = 1 << 15;
    big.widths[0] = 1 << 15;
    char *model = zs_model_config_json(&big);
    ck_assert_ptr_nonnull(model);
    ck_assert_int_eq(zs_st_writer_open(&w, path), 0);
    static const char *const meta[] = {"format", "zerosim-quantized", "version", "1", "seed",
                                       "1", "quant", "nf4", "block", "64", "per_channel", "0",
                                       "double_quant", "0"};
    for (int i = 0; i < 14; i += 2)
        ck_assert_int_eq(zs_st_writer_meta(&w, meta[i], meta[i + 1]), 0);
    ck_assert_int_eq(zs_st_writer_meta(&w, "model", model), 0);
    free(model);
    ck_assert_int_eq(zs_st_writer_add(&w, "x", ZS_ST_F32, 1, shape), 0);
    ck_assert_int_eq(zs_st_writer_data(&w, three, sizeof three), 0);
    ck_assert_int_eq(zs_st_writer_commit(&w, NULL), 0);
    ck_assert_int_ne(zs_qfile_read(path, &c2, &seed, &s2, &back, &st2), 0);
    ck_assert_msg(strstr(zs_error_msg(), "more than its 12 bytes of tensors hold") != NULL, "%s",
                  zs_error_msg());
    unlink(path);
    rmdir(dir);
    free(p);
    free(dq);
    free(mem);
}
END_TEST


/* CLRS's example: frequencies 45 13 12 16 9 5 get lengths 1 3 3 3 4 4 */
START_TEST(test_huffman)
{
    const uint64_t f[6] = {45, 13, 12, 16, 9, 5};
    uint8_t len[6];
    ck_assert_int_eq(zs_huff_lengths(f, 6, len), 0);
    const uint8_t want[6] = {1, 3, 3, 3, 4, 4};
    for (int i = 0; i < 6; i++)
        ck_assert_uint_eq(len[i], want[i]);
    ck_assert_uint_eq(zs_huff_bits(f, len, 6), 224); /* CLRS: 224,000 bits per 100,000 */
    zs_huff h;
    ck_assert_int_eq(zs_huff_build(&h, len, 6), 0);
    zs_bitw w = {0};
    const int msg[10] = {0, 5, 4, 3, 2, 1, 0, 0, 5, 3};
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(zs_huff_put(&w, &h, msg[i]), 0);
    ck_assert_uint_eq(w.nbits, 1 + 4 + 4 + 3 + 3 + 3 + 1 + 1 + 4 + 3);
    zs_bitr r = {w.buf, w.nbits, 0};
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(zs_huff_get(&r, &h), msg[i]);
    ck_assert_int_eq(zs_huff_get(&r, &h), -1); /* the stream ends */
    zs_huff_free(&h);
    zs_bitw_free(&w);
    /* lengths of no prefix code are refused */
    const uint8_t bad[3] = {1, 1, 1};
    ck_assert_int_ne(zs_huff_build(&h, bad, 3), 0);
    /* a skewed alphabet stays within the length limit */
    uint64_t fib[40];
    fib[0] = fib[1] = 1;
    for (int i = 2; i < 40; i++)
        fib[i] = fib[i - 1] + fib[i - 2];
    uint8_t l40[40];
    ck_assert_int_eq(zs_huff_lengths(fib, 40, l40), 0);
    for (int i = 0; i < 40; i++)
        ck_assert(l40[i] >= 1 && l40[i] <= ZS_HUFF_MAX_LEN);
    ck_assert_int_eq(zs_huff_build(&h, l40, 40), 0);
    zs_huff_free(&h);
}
END_TEST

/* Deep Compression end to end on a small MLP: the file decodes to exactly
 * the pruned, shared weights; each layer keeps its fraction and at most
 * 2^b distinct values. */
START_TEST(test_deep_compression)
{
    zs_model_config c = mlp();
    size_t n = zs_model_count_params(&c);
    float *p = malloc(n * 4);
    zs_model *m;
    ck_assert_int_eq(zs_model_create(&c, &m), 0);
    zs_model_init_params(m, p, 5);
    zs_dc_options o;
    zs_dc_options_default(&o);
    o.sparsity = 0.75;
    o.prune_rounds = 2;
    o.retrain_steps = 5;
    o.finetune_steps = 5;
    o.bits = 3;
    o.index_bits = 2; /* short gaps: fillers are needed */
    o.micro_batch = 8;
    o.eval_samples = 16;
    char dir[] = "/tmp/zs_dc_XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/c.safetensors", dir);
    zs_dc_result r, r2;
    ck_assert_int_eq(zs_dc_compress(&c, p, &o, path, &r), 0);
    ck_assert_int_eq(zs_dc_file_is(path), 1);
    zs_model_config c2;
    uint64_t seed;
    float *q;
    ck_assert_int_eq(zs_dc_read(path, &c2, &seed, &q, &r2), 0);
    ck_assert_int_eq(memcmp(p, q, n * 4), 0);
    ck_assert_str_eq(r.param_hash, r2.param_hash);
    ck_assert_int_eq(r.nlayers, 3);
    const zs_layout *lay = zs_model_layout(m);
    int fillers = 0;
    for (int l = 0; l < 3; l++) {
        const zs_param_entry *e = &lay->entries[2 * l]; /* fcL.w */
        size_t zeros = 0;
        float vals[64];
        int nv = 0;
        for (size_t i = e->offset; i < e->offset + e->numel; i++) {
            if (q[i] == 0.0f) {
                zeros++;
                continue;
            }
            int k = 0;
            while (k < nv && vals[k] != q[i])
                k++;
            if (k == nv && nv < 64)
                vals[nv++] = q[i];
        }
        ck_assert_uint_ge(zeros, (size_t)(0.75 * (double)e->numel));
        ck_assert_int_le(nv, 8);
        ck_assert_uint_eq(r.layers[l].nonzeros, r2.layers[l].nonzeros);
        ck_assert_uint_eq(r.layers[l].nonzeros + zeros, e->numel);
        ck_assert_uint_eq(r.layers[l].idx_bits, r2.layers[l].idx_bits);
        fillers += r.layers[l].entries > r.layers[l].nonzeros;
    }
    ck_assert_int_gt(fillers, 0);
    /* bad options: one line naming them */
    zs_dc_options b = o;
    b.sparsity = 1.0;
    ck_assert_int_ne(zs_dc_options_check(&b), 0);
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "--sparsity"));
    b = o;
    b.bits = 17;
    ck_assert_int_ne(zs_dc_options_check(&b), 0);
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "--bits"));
    free(q);
    zs_dc_result_free(&r);
    zs_dc_result_free(&r2);
    unlink(path);
    rmdir(dir);
    zs_model_destroy(m);
    free(p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("quant");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_absmax_reference);
    tcase_add_test(tc, test_zeropoint_reference);
    tcase_add_test(tc, test_nf4_levels);
    tcase_add_test(tc, test_bits_per_param);
    tcase_add_test(tc, test_groups);
    tcase_add_test(tc, test_fake_matches);
    tcase_add_test(tc, test_double_quant_scales);
    tcase_add_test(tc, test_file_roundtrip);
    tcase_add_test(tc, test_huffman);
    tcase_add_test(tc, test_deep_compression);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
