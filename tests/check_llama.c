/* Tests of the Llama family's shapes (src/model/llama.c): the published
 * parameter counts, Hugging Face's names, the tensor-parallel split (every
 * element of the tp = 1 model held once, drawn where tp = 1 draws it), the
 * activation closed form, the validation's one-line refusals, and that
 * what the forward does not build (experts, replicated key/value heads)
 * is refused. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "zerosim/error.h"
#include "zerosim/model.h"

static zs_model_config llama_cfg(int L, int C, int NH, int KV, int F, int V, int T)
{
    zs_model_config c;
    memset(&c, 0, sizeof c);
    c.kind = ZS_MODEL_LLAMA;
    c.n_layer = L;
    c.n_embd = C;
    c.n_head = NH;
    c.n_kv_head = KV;
    c.ffn_hidden = F;
    c.vocab = V;
    c.seq_len = T;
    c.norm_eps = 1e-5;
    c.rope_theta = 10000.0;
    return c;
}

/* The counts Hugging Face's checkpoints report (the sum of every tensor in
 * their safetensors), as literals. */
START_TEST(test_published_counts)
{
    zs_model_config l2 = llama_cfg(32, 4096, 32, 32, 11008, 32000, 4096);
    ck_assert_uint_eq(zs_model_count_params(&l2), 6738415616ULL);
    zs_model_config l3 = llama_cfg(32, 4096, 32, 8, 14336, 128256, 8192);
    ck_assert_uint_eq(zs_model_count_params(&l3), 8030261248ULL);
    zs_model_config q2 = llama_cfg(28, 3584, 28, 4, 18944, 152064, 4096);
    q2.qkv_bias = 1;
    ck_assert_uint_eq(zs_model_count_params(&q2), 7615616512ULL);
    zs_model_config mx = llama_cfg(32, 4096, 32, 8, 14336, 32000, 4096);
    mx.moe_experts = 8;
    mx.moe_every = 1;
    mx.moe_top_k = 2;
    mx.moe_capacity_factor = 4.0;
    ck_assert_uint_eq(zs_model_count_params(&mx), 46702792704ULL);
    /* 32 blocks x 8 experts x 3 matrices of 14336 x 4096 */
    ck_assert_uint_eq(zs_model_count_expert_params(&mx), 45097156608ULL);
}
END_TEST

/* The layout: Hugging Face's names in order, the units, and its size the
 * count, tied or not, with Qwen2's biases and Mixtral's experts. */
START_TEST(test_layout_names)
{
    zs_model_config c = llama_cfg(2, 16, 4, 2, 24, 40, 8);
    c.qkv_bias = 1;
    zs_model *m;
    ck_assert_int_eq(zs_model_create(&c, &m), 0);
    const zs_layout *lay = zs_model_layout(m);
    ck_assert_str_eq(lay->entries[0].name, "model.embed_tokens.weight");
    ck_assert_str_eq(lay->entries[1].name, "model.layers.0.input_layernorm.weight");
    ck_assert_str_eq(lay->entries[2].name, "model.layers.0.self_attn.q_proj.weight");
    ck_assert_str_eq(lay->entries[3].name, "model.layers.0.self_attn.q_proj.bias");
    ck_assert_str_eq(lay->entries[12].name, "model.layers.0.mlp.down_proj.weight");
    ck_assert_str_eq(lay->entries[13].name, "model.layers.1.input_layernorm.weight");
    ck_assert_str_eq(lay->entries[lay->n_entries - 2].name, "model.norm.weight");
    ck_assert_str_eq(lay->entries[lay->n_entries - 1].name, "lm_head.weight");
    ck_assert_int_eq(lay->n_layers, 4);
    ck_assert_int_eq(lay->entries[lay->n_entries - 1].layer, 3);
    /* k_proj (KV*D, C): 2 heads of 4 */
    ck_assert_uint_eq(lay->entries[4].numel, 2 * 4 * 16);
    ck_assert_uint_eq(lay->num_params, zs_model_count_params(&c));
    zs_model_destroy(m);
    c.tie_embeddings = 1;
    c.moe_experts = 4;
    c.moe_every = 2;
    c.moe_top_k = 2;
    c.moe_capacity_factor = 1.0;
    ck_assert_int_eq(zs_model_create(&c, &m), 0);
    lay = zs_model_layout(m);
    ck_assert_str_eq(lay->entries[lay->n_entries - 1].name, "model.norm.weight");
    ck_assert_str_eq(lay->entries[lay->n_entries - 2].name,
                     "model.layers.1.block_sparse_moe.experts.w2.weight");
    ck_assert_str_eq(lay->entries[lay->n_entries - 5].name,
                     "model.layers.1.block_sparse_moe.gate.weight");
    ck_assert_uint_eq(lay->num_params, zs_model_count_params(&c));
    /* block 1 alone is a Mixtral block: 4 experts of gate, up and down */
    ck_assert_uint_eq(zs_model_count_expert_params(&c), 4 * 3 * 24 * 16);
    int ids[ZS_MAX_USES_PUBLIC];
    int n = zs_model_unit_uses(m, 3, ids, ZS_MAX_USES_PUBLIC);
    ck_assert_int_eq(n, 2); /* model.norm and the tied embedding */
    ck_assert_int_eq(ids[1], 0);
    zs_model_destroy(m);
    /* the longest name of a 126-block model fits */
    zs_model_config big = llama_cfg(126, 16, 4, 2, 24, 40, 8);
    big.moe_experts = 2;
    big.moe_every = 1;
    big.moe_top_k = 1;
    big.moe_capacity_factor = 1.0;
    ck_assert_int_eq(zs_model_create(&big, &m), 0);
    lay = zs_model_layout(m);
    ck_assert_str_eq(lay->entries[lay->n_entries - 3].name, /* before norm, lm_head */
                     "model.layers.125.block_sparse_moe.experts.w2.weight");
    zs_model_destroy(m);
}
END_TEST

/* Tensor parallelism over P ranks: every element of the tp = 1 layout is
 * held by exactly one rank as a non-duplicate, and each shard is
 * initialised with the values tp = 1 has there. KV = 4 with P = 2 and 4
 * splits the key/value heads; KV = 2 with P = 4 replicates them. With
 * experts (the third column: every second block a Mixtral block of 4
 * experts) each expert is split as the dense MLP, the router
 * replicated. */
START_TEST(test_tp_split)
{
    static const int cases[][3] = {{4, 2, 0}, {4, 4, 0}, {2, 4, 0}, {1, 4, 0},
                                   {4, 2, 1}, {2, 4, 1}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        int KV = cases[t][0], P = cases[t][1];
        zs_model_config c = llama_cfg(2, 32, 8, KV, 24, 40, 8);
        c.qkv_bias = 1;
        if (cases[t][2]) {
            c.moe_experts = 4;
            c.moe_every = 2;
            c.moe_top_k = 2;
            c.moe_capacity_factor = 1.0;
        }
        zs_model *one;
        ck_assert_int_eq(zs_model_create(&c, &one), 0);
        size_t N = zs_model_layout(one)->num_params;
        float *full = malloc(N * sizeof(float));
        int *held = calloc(N, sizeof(int));
        zs_model_init_params(one, full, 7);
        for (int r = 0; r < P; r++) {
            zs_model_config s = c;
            s.tp = P;
            s.tp_rank = r;
            zs_model *m;
            ck_assert_int_eq(zs_model_create(&s, &m), 0);
            size_t n = zs_model_layout(m)->num_params;
            float *part = malloc(n * sizeof(float));
            zs_model_init_params(m, part, 7);
            for (size_t j = 0; j < n; j++) {
                size_t g = zs_model_tp_global_offset(m, j, NULL);
                ck_assert_uint_lt(g, N);
                ck_assert_msg(part[j] == full[g], "KV %d P %d rank %d element %zu", KV, P, r, j);
                if (r == 0 || !zs_model_tp_replicated(m, j))
                    held[g]++;
            }
            free(part);
            zs_model_destroy(m);
        }
        for (size_t g = 0; g < N; g++)
            ck_assert_msg(held[g] == 1, "KV %d P %d: element %zu held %d times", KV, P, g,
                          held[g]);
        free(full);
        free(held);
        zs_model_destroy(one);
    }
}
END_TEST

/* The closed form of src/model/llama.c's comment, without TP or SP:
 * 4 (2 BT C + L (4 BT C + 2 BT + 2 BT C + 2 BT KV D + B NH T^2 + 3 BT F)
 * + BT (V + 2)); with checkpointing every block, one slot and L - 1
 * checkpoints of BT C. */
START_TEST(test_activation_bytes)
{
    size_t B = 3, T = 8, C = 16, NH = 4, KV = 2, D = 4, F = 24, V = 40, L = 5, BT = B * T;
    zs_model_config c = llama_cfg((int)L, (int)C, (int)NH, (int)KV, (int)F, (int)V, (int)T);
    size_t block = 4 * BT * C + 2 * BT + 2 * BT * C + 2 * BT * KV * D + B * NH * T * T + 3 * BT * F;
    ck_assert_uint_eq(zs_model_activation_bytes(&c, (int)B),
                      4 * (2 * BT * C + L * block + BT * (V + 2)));
    ck_assert_uint_eq(zs_model_checkpoint_bytes(&c, (int)B), 0);
    c.ckpt_blocks = 1;
    ck_assert_uint_eq(zs_model_activation_bytes(&c, (int)B),
                      4 * (2 * BT * C + block + BT * (V + 2)));
    ck_assert_uint_eq(zs_model_checkpoint_bytes(&c, (int)B), 4 * (L - 1) * BT * C);
}
END_TEST

START_TEST(test_validation)
{
    zs_model_config c = llama_cfg(2, 32, 8, 3, 24, 40, 8);
    ck_assert_int_ne(zs_model_config_validate(&c), 0);
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "model.kv_heads"));
    c.n_kv_head = 2;
    c.tp = 3;
    c.vocab = 42;
    ck_assert_int_ne(zs_model_config_validate(&c), 0);
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "neither holds"));
    c = llama_cfg(2, 32, 8, 2, 0, 40, 8);
    ck_assert_int_ne(zs_model_config_validate(&c), 0);
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "model.ffn_hidden"));
    c = llama_cfg(2, 32, 8, 2, 24, 40, 16);
    c.sliding_window = 8;
    ck_assert_int_ne(zs_model_config_validate(&c), 0);
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "model.sliding_window"));
    c.sliding_window = 16;
    ck_assert_int_eq(zs_model_config_validate(&c), 0);
    /* dense blocks run, with TP splitting or replicating the key/value
     * heads; experts run (src/model/llama_moe.c), with TP too (each
     * expert split as the dense MLP) */
    ck_assert_int_eq(zs_model_check_runnable(&c), 0);
    ck_assert_int_eq(zs_model_check_phantom(&c), 0);
    c.tp = 2;
    ck_assert_int_eq(zs_model_check_runnable(&c), 0);
    ck_assert_int_eq(zs_model_check_phantom(&c), 0);
    c.moe_experts = 4;
    c.moe_every = 1;
    c.moe_top_k = 2;
    c.moe_capacity_factor = 1.0;
    ck_assert_int_eq(zs_model_config_validate(&c), 0);
    ck_assert_int_eq(zs_model_check_runnable(&c), 0);
    ck_assert_int_eq(zs_model_check_phantom(&c), 0);
    c.tp = 1;
    ck_assert_int_eq(zs_model_config_validate(&c), 0);
    ck_assert_int_eq(zs_model_check_runnable(&c), 0);
    ck_assert_int_eq(zs_model_check_phantom(&c), 0);
    c.moe_experts = 0;
    c.tp = 4; /* 2 key/value heads, each on 2 ranks */
    ck_assert_int_eq(zs_model_check_runnable(&c), 0);
    ck_assert_int_eq(zs_model_check_phantom(&c), 0);
    ck_assert_uint_eq(zs_llama_kv_grad_floats(&c), 2 * 2 * (4 * 32));
    c.tp = 2;
    ck_assert_uint_eq(zs_llama_kv_grad_floats(&c), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("llama");
    TCase *tc = tcase_create("shapes");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_published_counts);
    tcase_add_test(tc, test_layout_names);
    tcase_add_test(tc, test_tp_split);
    tcase_add_test(tc, test_activation_bytes);
    tcase_add_test(tc, test_validation);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
