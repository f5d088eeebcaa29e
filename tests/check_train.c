/* Tests of single-rank training: convergence to the known loss floor,
 * reproducibility, mixed precision and loss scaling, accumulation,
 * schedules and the simulated device capacity. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "zerosim/config.h"
#include "zerosim/error.h"
#include "zerosim/optim.h"
#include "zerosim/train.h"
#include "zerosim/zero.h"

static zs_run_config small_gpt(void)
{
    zs_run_config c;
    zs_run_config_defaults(&c);
    c.model.kind = ZS_MODEL_GPT;
    c.model.n_layer = 2;
    c.model.n_embd = 32;
    c.model.n_head = 4;
    c.model.seq_len = 16;
    c.model.vocab = 32;
    c.steps = 30;
    c.micro_batch = 4;
    c.grad_accum = 1;
    return c;
}

static void run(zs_run_config *c, zs_train_result *r)
{
    ck_assert_msg(zs_run_config_finalize(c, 1) == 0, "%s", zs_error_msg());
    zs_train_options o = {.backend = "cpu"};
    zs_comm_t self = zs_comm_self();
    ck_assert_msg(zs_train(c, &o, self, r) == 0, "%s", zs_error_msg());
    zs_comm_finalize(self);
}

static double mean_last(const zs_train_result *r, int n)
{
    double s = 0.0;
    for (int i = r->steps - n; i < r->steps; i++)
        s += r->info[i].loss;
    return s / n;
}

/* The default small GPT's loss comes within 5% of the Markov chain's entropy
 * rate (the best any model can do) after 600 steps: mean of the last 20
 * steps' losses (measured here: about 4% above the floor). */
START_TEST(test_gpt_reaches_floor)
{
    zs_run_config c;
    zs_run_config_defaults(&c);
    c.steps = 600;
    zs_train_result r;
    run(&c, &r);
    double last = mean_last(&r, 20);
    ck_assert_msg(r.loss_floor > 0.5, "floor %.4f", r.loss_floor);
    ck_assert_msg(r.info[0].loss > 1.5 * r.loss_floor, "first loss %.4f floor %.4f",
                  (double)r.info[0].loss, r.loss_floor);
    ck_assert_msg(last < 1.05 * r.loss_floor, "final loss %.4f, floor %.4f", last, r.loss_floor);
    ck_assert_msg(last > 0.95 * r.loss_floor, "final loss %.4f is below the floor %.4f: the "
                  "floor or the loss is wrong", last, r.loss_floor);
    zs_train_result_free(&r);
}
END_TEST

/* Same seed, same bytes; another seed, other bytes. */
START_TEST(test_reproducible)
{
    static const zs_dtype types[] = {ZS_DTYPE_F32, ZS_DTYPE_BF16, ZS_DTYPE_F16};
    zs_run_config c = small_gpt();
    c.precision = types[_i];
    zs_train_result a, b, d;
    run(&c, &a);
    c = small_gpt();
    c.precision = types[_i];
    run(&c, &b);
    ck_assert_str_eq(a.param_hash, b.param_hash);
    for (int s = 0; s < a.steps; s++)
        ck_assert_float_eq(a.info[s].loss, b.info[s].loss);
    c = small_gpt();
    c.precision = types[_i];
    c.seed = 99;
    run(&c, &d);
    ck_assert_str_ne(a.param_hash, d.param_hash);
    /* it learns in every precision */
    ck_assert_msg(mean_last(&a, 5) < 0.9 * a.info[0].loss, "%s: %.4f -> %.4f",
                  zs_dtype_name(types[_i]), (double)a.info[0].loss, mean_last(&a, 5));
    zs_train_result_free(&a);
    zs_train_result_free(&b);
    zs_train_result_free(&d);
}
END_TEST

/* Mixed precision stores what it says: 2-byte params and grads, 4-byte
 * master, m and v; fp32 has no separate master. Stage 0 on one rank keeps
 * the full gradient buffer and the reduced shard (here: all of it). */
START_TEST(test_mixed_precision_bytes)
{
    zs_run_config c = small_gpt();
    c.steps = 1;
    c.precision = ZS_DTYPE_BF16;
    zs_train_result r;
    run(&c, &r);
    size_t psi = r.num_params;
    ck_assert_uint_eq(r.mem.peak[ZS_MEM_PARAMS], 2 * psi);
    ck_assert_uint_eq(r.mem.peak[ZS_MEM_GRADS], 2 * psi + 2 * psi);
    ck_assert_uint_eq(r.mem.peak[ZS_MEM_OPT_MASTER], 4 * psi);
    ck_assert_uint_eq(r.mem.peak[ZS_MEM_OPT_M], 4 * psi);
    ck_assert_uint_eq(r.mem.peak[ZS_MEM_OPT_V], 4 * psi);
    zs_train_result_free(&r);
    c = small_gpt();
    c.steps = 1;
    run(&c, &r);
    ck_assert_uint_eq(r.mem.peak[ZS_MEM_PARAMS], 4 * psi);
    ck_assert_uint_eq(r.mem.peak[ZS_MEM_OPT_MASTER], 0);
    zs_train_result_free(&r);
}
END_TEST

/* fp16 dynamic loss scaling: a start scale of 2^30 overflows fp16 gradients;
 * steps are skipped and the scale halved (hysteresis 1) until they fit; after
 * loss_scale_window good steps the scale doubles again. */
START_TEST(test_fp16_loss_scaling)
{
    zs_run_config c = small_gpt();
    c.precision = ZS_DTYPE_F16;
    c.initial_scale_power = 30;
    c.hysteresis = 1;
    c.loss_scale_window = 5;
    c.steps = 40;
    zs_train_result r;
    run(&c, &r);
    ck_assert_msg(r.info[0].skipped, "the first step must overflow at scale 2^30");
    int first_good = -1;
    for (int s = 0; s < r.steps; s++)
        if (!r.info[s].skipped) {
            first_good = s;
            break;
        }
    ck_assert_int_gt(first_good, 0);
    for (int s = 1; s <= first_good; s++) /* halved after each overflow */
        ck_assert_float_eq(r.info[s].loss_scale, r.info[s - 1].loss_scale / 2);
    /* raised again after 5 good steps in a row */
    int raised = 0;
    for (int s = first_good + 1; s < r.steps; s++)
        if (r.info[s].loss_scale > r.info[s - 1].loss_scale)
            raised = 1;
    ck_assert_msg(raised, "the loss scale never rose again");
    ck_assert_msg(mean_last(&r, 5) < 0.9 * r.info[0].loss, "fp16 did not learn");
    zs_train_result_free(&r);
}
END_TEST

/* Accumulating 4 micro-batches of 2 equals one micro-batch of 8 (the same
 * samples) up to fp32 summation order. */
START_TEST(test_grad_accumulation)
{
    zs_run_config c = small_gpt();
    c.micro_batch = 8;
    c.grad_accum = 1;
    c.steps = 5;
    c.grad_clip = 0;
    zs_train_result a, b;
    run(&c, &a);
    c = small_gpt();
    c.micro_batch = 2;
    c.grad_accum = 4;
    c.steps = 5;
    c.grad_clip = 0;
    run(&c, &b);
    for (int s = 0; s < 5; s++)
        ck_assert_msg(fabsf(a.info[s].loss - b.info[s].loss) < 1e-4f * a.info[s].loss,
                      "step %d: %.7f vs %.7f", s, (double)a.info[s].loss, (double)b.info[s].loss);
    ck_assert_float_eq_tol(a.info[0].grad_norm, b.info[0].grad_norm, 1e-4 * a.info[0].grad_norm);
    zs_train_result_free(&a);
    zs_train_result_free(&b);
}
END_TEST

/* Euclidean distance between two parameter vectors, in double. */
static double dist(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s);
}

/* Global-norm clipping: one plain SGD step (no momentum, no decay) moves the
 * parameters by exactly lr * min(norm, clip) (DeepSpeed's coefficient
 * clip / (norm + 1e-6)); checked to 1e-3 relative, the fp32 rounding of the
 * update being far smaller. */
START_TEST(test_grad_clipping)
{
    const float clips[2] = {0.0f, 0.01f};
    zs_run_config c = small_gpt();
    c.optimizer = ZS_OPT_SGD;
    c.momentum = 0.0f;
    c.weight_decay = 0.0f;
    c.scheduler = ZS_SCHED_CONSTANT;
    c.lr = 0.5f;
    c.grad_clip = clips[_i];
    ck_assert_int_eq(zs_run_config_finalize(&c, 1), 0);
    char err[256];
    zs_backend_t be = zs_backend_init("cpu", err, sizeof err);
    zs_mem_t mem = zs_mem_create(be, 0, 0);
    zs_engine *e;
    zs_comm_t self = zs_comm_self();
    ck_assert_msg(zs_engine_create(&c, be, mem, self, &e) == 0, "%s", zs_error_msg());
    size_t n = zs_engine_num_params(e);
    float *p0 = malloc(n * sizeof(float)), *p1 = malloc(n * sizeof(float));
    ck_assert_int_eq(zs_engine_get_params(e, p0), 0);
    zs_step_info info;
    ck_assert_int_eq(zs_engine_step(e, 0, &info), 0);
    ck_assert_int_eq(zs_engine_get_params(e, p1), 0);
    double norm = info.grad_norm;
    double expect = c.grad_clip > 0 && norm > c.grad_clip ? c.lr * c.grad_clip * norm / (norm + 1e-6)
                                                           : c.lr * norm;
    ck_assert_msg(c.grad_clip == 0 || norm > 10 * c.grad_clip, "norm %.4g too small to clip", norm);
    double moved = dist(p0, p1, n);
    /* the streamed hash equals the hash of the whole vector */
    char h1[17], h2[17];
    ck_assert_int_eq(zs_engine_param_hash(e, h1), 0);
    zs_param_hash(p1, n, h2);
    ck_assert_str_eq(h1, h2);
    ck_assert_msg(fabs(moved - expect) <= 1e-3 * expect, "clip %g: moved %.6g, expected %.6g",
                  (double)c.grad_clip, moved, expect);
    free(p0);
    free(p1);
    zs_engine_destroy(e);
    zs_mem_destroy(mem);
    zs_backend_release(be);
    zs_comm_finalize(self);
}
END_TEST

/* The MLP learns its teacher (floor 0) with AdamW and with SGD. */
START_TEST(test_mlp_learns)
{
    zs_run_config c;
    zs_run_config_defaults(&c);
    c.model.kind = ZS_MODEL_MLP;
    c.steps = 200;
    c.micro_batch = 32;
    c.optimizer = _i ? ZS_OPT_SGD : ZS_OPT_ADAMW;
    c.lr = _i ? 0.1f : 3e-3f;
    zs_train_result r;
    run(&c, &r);
    ck_assert_msg(mean_last(&r, 10) < 0.5 * r.info[0].loss, "%s: %.4f -> %.4f",
                  _i ? "sgd" : "adamw", (double)r.info[0].loss, mean_last(&r, 10));
    zs_train_result_free(&r);
}
END_TEST

/* Warm-up then cosine decay, DeepSpeed's WarmupCosineLR with linear warm-up. */
START_TEST(test_schedule)
{
    zs_run_config c;
    zs_run_config_defaults(&c);
    c.lr = 1.0f;
    c.scheduler = ZS_SCHED_WARMUP_COSINE;
    c.warmup_steps = 10;
    c.warmup_linear = 1;
    c.warmup_min_ratio = 0.0f;
    c.cos_min_ratio = 0.1f;
    c.steps = 110;
    c.total_steps = 110;
    ck_assert_float_eq_tol(zs_lr_at(&c, 0), 0.0f, 1e-7);
    ck_assert_float_eq_tol(zs_lr_at(&c, 5), 0.5f, 1e-6);
    ck_assert_float_eq_tol(zs_lr_at(&c, 10), 1.0f, 1e-6);
    ck_assert_float_eq_tol(zs_lr_at(&c, 60), 0.55f, 1e-6); /* halfway: 0.1 + 0.9 * 0.5 */
    ck_assert_float_eq_tol(zs_lr_at(&c, 110), 0.1f, 1e-6);
    for (int s = 11; s <= 110; s++)
        ck_assert(zs_lr_at(&c, s) <= zs_lr_at(&c, s - 1));
}
END_TEST

/* A model that does not fit the simulated device fails with a clear message. */
START_TEST(test_device_memory)
{
    zs_run_config c = small_gpt();
    ck_assert_int_eq(zs_run_config_finalize(&c, 1), 0);
    zs_train_options o = {.backend = "cpu", .device_memory = 100000};
    zs_train_result r;
    zs_comm_t self = zs_comm_self();
    ck_assert_int_ne(zs_train(&c, &o, self, &r), 0);
    ck_assert_msg(strstr(zs_error_msg(), "out of memory on rank 0") != NULL, "%s", zs_error_msg());
    zs_train_result_free(&r);
    o.backend = "tpu";
    ck_assert_int_ne(zs_train(&c, &o, self, &r), 0);
    ck_assert_msg(strstr(zs_error_msg(), "tpu") != NULL, "%s", zs_error_msg());
    zs_train_result_free(&r);
    zs_comm_finalize(self);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("train");
    TCase *tc = tcase_create("train");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_gpt_reaches_floor);
    tcase_add_loop_test(tc, test_reproducible, 0, 3);
    tcase_add_test(tc, test_mixed_precision_bytes);
    tcase_add_test(tc, test_fp16_loss_scaling);
    tcase_add_test(tc, test_grad_accumulation);
    tcase_add_loop_test(tc, test_grad_clipping, 0, 2);
    tcase_add_loop_test(tc, test_mlp_learns, 0, 2);
    tcase_add_test(tc, test_schedule);
    tcase_add_test(tc, test_device_memory);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
