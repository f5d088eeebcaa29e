/* Tests of the GPT-2 weight formats (src/io/weights.c) against expectations
 * written from the formats themselves, not from the code under test:
 * Hugging Face's names land on zerosim's layout entries, Conv1D weights are
 * transposed, and an llm.c .bin holds each value at the byte offset that
 * train_gpt2.c's fill_in_parameter_sizes order gives it. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zerosim/model.h"
#include "zerosim/weights.h"

static zs_model_config gpt(void)
{
    zs_model_config c;
    memset(&c, 0, sizeof c);
    c.kind = ZS_MODEL_GPT;
    c.n_layer = 3;
    c.n_embd = 8;
    c.n_head = 2;
    c.seq_len = 5;
    c.vocab = 11;
    return c;
}

/* zerosim's entry name of Hugging Face's tensor name, by hand */
static void zs_name_of(const char *hf, char *out, size_t n)
{
    static const char *const map[][2] = {
        {"ln_1.weight", "ln1.w"}, {"ln_1.bias", "ln1.b"},
        {"attn.c_attn.weight", "attn.qkv.w"}, {"attn.c_attn.bias", "attn.qkv.b"},
        {"attn.c_proj.weight", "attn.proj.w"}, {"attn.c_proj.bias", "attn.proj.b"},
        {"ln_2.weight", "ln2.w"}, {"ln_2.bias", "ln2.b"},
        {"mlp.c_fc.weight", "mlp.fc.w"}, {"mlp.c_fc.bias", "mlp.fc.b"},
        {"mlp.c_proj.weight", "mlp.proj.w"}, {"mlp.c_proj.bias", "mlp.proj.b"},
    };
    int l, k = 0;
    if (sscanf(hf, "h.%d.%n", &l, &k) == 1 && k) {
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
            if (!strcmp(hf + k, map[i][0])) {
                snprintf(out, n, "h%d.%s", l, map[i][1]);
                return;
            }
    }
    snprintf(out, n, "%s", !strcmp(hf, "wte.weight") ? "wte" : !strcmp(hf, "wpe.weight") ? "wpe"
                          : !strcmp(hf, "ln_f.weight") ? "lnf.w" : !strcmp(hf, "ln_f.bias") ? "lnf.b"
                                                                                         : "?");
}

START_TEST(test_names_on_the_layout)
{
    zs_model_config c = gpt();
    zs_model *m;
    ck_assert_int_eq(zs_model_create(&c, &m), 0);
    const zs_layout *lay = zs_model_layout(m);
    zs_gpt_tensor *t;
    int n;
    ck_assert_int_eq(zs_gpt_tensors(&c, &t, &n), 0);
    ck_assert_int_eq(n, lay->n_entries);
    size_t C = 8;
    for (int i = 0; i < n; i++) {
        char want[64];
        zs_name_of(t[i].name, want, sizeof want);
        ck_assert_str_eq(lay->entries[i].name, want);
        ck_assert_uint_eq(t[i].offset, lay->entries[i].offset);
        ck_assert_uint_eq(t[i].numel, lay->entries[i].numel);
        uint64_t prod = 1;
        for (int d = 0; d < t[i].ndim; d++)
            prod *= t[i].shape[d];
        ck_assert_uint_eq(prod, t[i].numel);
    }
    /* Conv1D shapes (in, out) */
    ck_assert_str_eq(t[2 + 2].name, "h.0.attn.c_attn.weight");
    ck_assert_uint_eq(t[2 + 2].shape[0], C);
    ck_assert_uint_eq(t[2 + 2].shape[1], 3 * C);
    ck_assert_int_eq(t[2 + 2].transpose, 1);
    ck_assert_str_eq(t[2 + 10].name, "h.0.mlp.c_proj.weight");
    ck_assert_uint_eq(t[2 + 10].shape[0], 4 * C);
    ck_assert_uint_eq(t[2 + 10].shape[1], C);
    ck_assert_str_eq(t[0].name, "wte.weight");
    ck_assert_uint_eq(t[0].shape[0], 11);
    ck_assert_int_eq(t[0].transpose, 0);
    free(t);
    zs_model_destroy(m);
}
END_TEST

START_TEST(test_conv1d_transpose)
{
    zs_model_config c = gpt();
    size_t total = zs_model_count_params(&c);
    float *p = malloc(total * sizeof(float)), *q = calloc(total, sizeof(float));
    for (size_t i = 0; i < total; i++)
        p[i] = (float)i;
    zs_gpt_tensor *t;
    int n;
    ck_assert_int_eq(zs_gpt_tensors(&c, &t, &n), 0);
    const zs_gpt_tensor *fc = &t[2 + 12 + 8]; /* h.1.mlp.c_fc.weight: zerosim (4C, C) */
    ck_assert_str_eq(fc->name, "h.1.mlp.c_fc.weight");
    float *out = malloc(fc->numel * sizeof(float));
    zs_gpt_tensor_get(fc, p, out);
    /* file element [i][o] (in i < C, out o < 4C) = zerosim's row o, column i */
    for (size_t i = 0; i < 8; i++)
        for (size_t o = 0; o < 32; o++)
            ck_assert_float_eq(out[i * 32 + o], p[fc->offset + o * 8 + i]);
    for (int k = 0; k < n; k++) { /* put inverts get */
        float *buf = malloc(t[k].numel * sizeof(float));
        zs_gpt_tensor_get(&t[k], p, buf);
        zs_gpt_tensor_put(&t[k], buf, q);
        free(buf);
    }
    ck_assert_int_eq(memcmp(p, q, total * sizeof(float)), 0);
    free(out);
    free(t);
    free(p);
    free(q);
}
END_TEST

/* llm.c's order: the 16 tensors of all layers, wte padded to 128 rows */
START_TEST(test_llmc_offsets)
{
    zs_model_config c = gpt();
    size_t total = zs_model_count_params(&c), C = 8, L = 3, V = 11, Vp = 128, T = 5;
    float *p = malloc(total * sizeof(float));
    for (size_t i = 0; i < total; i++)
        p[i] = (float)i + 0.5f;
    char dir[] = "/tmp/zs_check_weights.XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.bin", dir);
    ck_assert_int_eq(zs_weights_write(path, ZS_WEIGHTS_LLMC, &c, p), 0);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    const size_t sizes[16] = {Vp * C, T * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C,
                              L * C, L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C,
                              C, C};
    size_t sum = 0;
    for (int i = 0; i < 16; i++)
        sum += sizes[i];
    ck_assert_int_eq(bytes, (long)(1024 + 4 * sum));
    int32_t hdr[8];
    fseek(f, 0, SEEK_SET);
    ck_assert_int_eq((int)fread(hdr, 4, 8, f), 8);
    const int32_t want[8] = {20240326, 3, 5, 11, 3, 2, 8, 128};
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(hdr[i], want[i]);
    /* value at element e of llm.c tensor k: the offset of k, then e */
    size_t start[16];
    start[0] = 0;
    for (int i = 1; i < 16; i++)
        start[i] = start[i - 1] + sizes[i - 1];
    zs_model *m;
    ck_assert_int_eq(zs_model_create(&c, &m), 0);
    const zs_layout *lay = zs_model_layout(m);
    /* checks: wte row 10 col 3, a pad row (0), wpe, and in block 2 the qkv
     * weight (tensor 4), the fc bias (11) and the fc proj weight (12); lnfb */
    struct { int k; size_t e; float v; } chk[] = {
        {0, 10 * C + 3, p[10 * C + 3]},
        {0, 11 * C + 1, 0.0f},
        {1, 4 * C + 7, p[V * C + 4 * C + 7]},
        {4, 2 * 3 * C * C + 5 * C + 6, p[lay->entries[2 + 2 * 12 + 2].offset + 5 * C + 6]},
        {11, 2 * 4 * C + 30, p[lay->entries[2 + 2 * 12 + 9].offset + 30]},
        {12, 1 * C * 4 * C + 3 * 4 * C + 17, p[lay->entries[2 + 1 * 12 + 10].offset + 3 * 4 * C + 17]},
        {15, 7, p[total - 1]},
    };
    for (size_t i = 0; i < sizeof chk / sizeof chk[0]; i++) {
        float v;
        fseek(f, (long)(1024 + 4 * (start[chk[i].k] + chk[i].e)), SEEK_SET);
        ck_assert_int_eq((int)fread(&v, 4, 1, f), 1);
        ck_assert_float_eq(v, chk[i].v);
    }
    fclose(f);
    /* and back */
    zs_model_config got;
    ck_assert_int_eq(zs_weights_probe(path, &got), 0);
    ck_assert_int_eq(got.n_layer, 3);
    ck_assert_int_eq(got.n_head, 2);
    float *q = calloc(total, sizeof(float));
    ck_assert_int_eq(zs_weights_read(path, &c, q), 0);
    ck_assert_int_eq(memcmp(p, q, total * sizeof(float)), 0);
    unlink(path);
    rmdir(dir);
    zs_model_destroy(m);
    free(p);
    free(q);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("weights");
    TCase *tc = tcase_create("formats");
    tcase_add_test(tc, test_names_on_the_layout);
    tcase_add_test(tc, test_conv1d_transpose);
    tcase_add_test(tc, test_llmc_offsets);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
