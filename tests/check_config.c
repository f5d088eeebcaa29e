/* zerosim — tests of the run configuration: defaults, the DeepSpeed-style
 * JSON loader (accepted keys, rejected keys, types, messages) and the batch
 * arithmetic of zs_run_config_finalize. */
#define _POSIX_C_SOURCE 200809L /* mkstemp */

#include "zerosim/config.h"
#include "zerosim/optim.h"

#include <limits.h>
#include "zerosim/error.h"

#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The configuration each test starts from (the defaults). */
static zs_run_config cfg;

/* Fixture: fresh defaults and no recorded error. */
static void setup(void)
{
    zs_run_config_defaults(&cfg);
    zs_error_clear();
}

/* Load a JSON text onto cfg under the name "test.json". */
static int load(const char *json)
{
    return zs_config_load_string(json, "test.json", &cfg);
}

/* A message is one line, or (several problems of a file) a first line
 * "NAME: N problems, one per line:" and one line per problem. */
static int one_line_each(const char *m)
{
    return strchr(m, '\n') == NULL || strstr(m, " problems, one per line:\n  ") != NULL;
}

/* rc must be a failure whose message contains substr. */
#define ck_assert_error(rc, substr)                                                            \
    do {                                                                                       \
        int rc_ = (rc);                                                                        \
        const char *m_ = zs_error_msg();                                                       \
        ck_assert_msg(rc_ != 0, "expected a failure mentioning '%s'", (substr));               \
        ck_assert_msg(strstr(m_, (substr)) != NULL, "message '%s' lacks '%s'", m_, (substr));  \
        ck_assert_msg(one_line_each(m_), "message is not one line per problem: '%s'", m_);     \
    } while (0)

/* rc must be success. */
#define ck_assert_ok(rc)                                                                       \
    do {                                                                                       \
        int rc_ = (rc);                                                                        \
        ck_assert_msg(rc_ == 0, "unexpected failure: %s", zs_error_msg());                     \
    } while (0)

/* Every field of a equals the one of b. */
static void assert_config_eq(const zs_run_config *a, const zs_run_config *b)
{
    ck_assert_int_eq(a->model.kind, b->model.kind);
    ck_assert_int_eq(a->model.n_layer, b->model.n_layer);
    ck_assert_int_eq(a->model.n_embd, b->model.n_embd);
    ck_assert_int_eq(a->model.n_head, b->model.n_head);
    ck_assert_int_eq(a->model.seq_len, b->model.seq_len);
    ck_assert_int_eq(a->model.vocab, b->model.vocab);
    ck_assert_int_eq(a->model.input_dim, b->model.input_dim);
    ck_assert_int_eq(a->model.n_classes, b->model.n_classes);
    ck_assert_int_eq(a->model.n_hidden, b->model.n_hidden);
    for (int i = 0; i < ZS_MLP_MAX_HIDDEN; i++)
        ck_assert_int_eq(a->model.widths[i], b->model.widths[i]);
    ck_assert_int_eq(a->model.act, b->model.act);
    ck_assert_int_eq(a->steps, b->steps);
    ck_assert_int_eq(a->train_batch_size, b->train_batch_size);
    ck_assert_int_eq(a->micro_batch, b->micro_batch);
    ck_assert_int_eq(a->grad_accum, b->grad_accum);
    ck_assert_uint_eq(a->seed, b->seed);
    ck_assert_int_eq(a->steps_per_print, b->steps_per_print);
    ck_assert_int_eq(a->precision, b->precision);
    ck_assert_int_eq(a->optimizer, b->optimizer);
    ck_assert_float_eq(a->lr, b->lr);
    ck_assert_float_eq(a->beta1, b->beta1);
    ck_assert_float_eq(a->beta2, b->beta2);
    ck_assert_float_eq(a->eps, b->eps);
    ck_assert_float_eq(a->weight_decay, b->weight_decay);
    ck_assert_float_eq(a->momentum, b->momentum);
    ck_assert_int_eq(a->scheduler, b->scheduler);
    ck_assert_int_eq(a->warmup_steps, b->warmup_steps);
    ck_assert_int_eq(a->total_steps, b->total_steps);
    ck_assert_float_eq(a->warmup_min_ratio, b->warmup_min_ratio);
    ck_assert_float_eq(a->cos_min_ratio, b->cos_min_ratio);
    ck_assert_int_eq(a->warmup_linear, b->warmup_linear);
    ck_assert_float_eq(a->grad_clip, b->grad_clip);
    ck_assert_float_eq(a->static_loss_scale, b->static_loss_scale);
    ck_assert_int_eq(a->initial_scale_power, b->initial_scale_power);
    ck_assert_int_eq(a->loss_scale_window, b->loss_scale_window);
    ck_assert_int_eq(a->hysteresis, b->hysteresis);
    ck_assert_float_eq(a->min_loss_scale, b->min_loss_scale);
    ck_assert_int_eq(a->stage, b->stage);
    ck_assert_uint_eq(a->reduce_bucket_size, b->reduce_bucket_size);
    ck_assert_uint_eq(a->allgather_bucket_size, b->allgather_bucket_size);
    ck_assert_uint_eq(a->stage3_max_live_parameters, b->stage3_max_live_parameters);
    ck_assert_uint_eq(a->stage3_prefetch_bucket_size, b->stage3_prefetch_bucket_size);
}

/* Path of an example config: $srcdir/examples/configs/NAME, or one level up
 * when srcdir is the tests directory. */
static void example_path(char *buf, size_t n, const char *name)
{
    const char *srcdir = getenv("srcdir");
    if (!srcdir || !srcdir[0])
        srcdir = ".";
    snprintf(buf, n, "%s/examples/configs/%s", srcdir, name);
    if (access(buf, R_OK) != 0)
        snprintf(buf, n, "%s/../examples/configs/%s", srcdir, name);
}

/* Write text to a new temporary file; its name goes to path. */
static void write_temp(char *path, size_t n, const char *text)
{
    const char *dir = getenv("TMPDIR");
    snprintf(path, n, "%s/zerosim_check_config_XXXXXX", dir && dir[0] ? dir : "/tmp");
    int fd = mkstemp(path);
    ck_assert_msg(fd >= 0, "mkstemp failed");
    FILE *fp = fdopen(fd, "w");
    ck_assert_ptr_nonnull(fp);
    fputs(text, fp);
    fclose(fp);
}

/* ------------------------------------------------------------------------ */
/* Defaults                                                                  */

START_TEST(test_defaults)
{
    const zs_run_config *c = &cfg;
    ck_assert_int_eq(c->model.kind, ZS_MODEL_GPT);
    ck_assert_int_eq(c->model.n_layer, 2);
    ck_assert_int_eq(c->model.n_embd, 64);
    ck_assert_int_eq(c->model.n_head, 4);
    ck_assert_int_eq(c->model.seq_len, 32);
    ck_assert_int_eq(c->model.vocab, 64);
    ck_assert_int_eq(c->model.input_dim, 32);
    ck_assert_int_eq(c->model.n_classes, 8);
    ck_assert_int_eq(c->model.n_hidden, 2);
    for (int i = 0; i < ZS_MLP_MAX_HIDDEN; i++)
        ck_assert_int_eq(c->model.widths[i], 64);
    ck_assert_int_eq(c->model.act, ZS_ACT_RELU);
    ck_assert_int_eq(c->steps, 100);
    ck_assert_int_eq(c->train_batch_size, 0);
    ck_assert_int_eq(c->micro_batch, 0);
    ck_assert_int_eq(c->grad_accum, 0);
    ck_assert_uint_eq(c->seed, 1234);
    ck_assert_int_eq(c->steps_per_print, 10);
    ck_assert_int_eq(c->precision, ZS_DTYPE_F32);
    ck_assert_int_eq(c->optimizer, ZS_OPT_ADAMW);
    ck_assert_float_eq(c->lr, 3e-3f);
    ck_assert_float_eq(c->beta1, 0.9f);
    ck_assert_float_eq(c->beta2, 0.95f);
    ck_assert_float_eq(c->eps, 1e-8f);
    ck_assert_float_eq(c->weight_decay, 0.0f);
    ck_assert_float_eq(c->momentum, 0.9f);
    ck_assert_int_eq(c->scheduler, ZS_SCHED_WARMUP_COSINE);
    ck_assert_int_eq(c->warmup_steps, 10);
    ck_assert_int_eq(c->total_steps, 0);
    ck_assert_float_eq(c->warmup_min_ratio, 0.0f);
    ck_assert_float_eq(c->cos_min_ratio, 0.1f);
    ck_assert_int_eq(c->warmup_linear, 1);
    ck_assert_float_eq(c->grad_clip, 1.0f);
    ck_assert_float_eq(c->static_loss_scale, 0.0f);
    ck_assert_int_eq(c->initial_scale_power, 16);
    ck_assert_int_eq(c->loss_scale_window, 1000);
    ck_assert_int_eq(c->hysteresis, 2);
    ck_assert_float_eq(c->min_loss_scale, 1.0f);
    ck_assert_int_eq(c->stage, 0);
    ck_assert_uint_eq(c->reduce_bucket_size, 500000000u);
    ck_assert_uint_eq(c->allgather_bucket_size, 500000000u);
    ck_assert_uint_eq(c->stage3_max_live_parameters, 1000000000u);
    ck_assert_uint_eq(c->stage3_prefetch_bucket_size, 50000000u);
}
END_TEST

START_TEST(test_defaults_finalize)
{
    ck_assert_ok(zs_run_config_finalize(&cfg, 4));
    ck_assert_int_eq(cfg.micro_batch, 8);
    ck_assert_int_eq(cfg.grad_accum, 1);
    ck_assert_int_eq(cfg.train_batch_size, 32);
    ck_assert_int_eq(cfg.total_steps, 100);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Loading valid files                                                       */

/* The kind of file people write for DeepSpeed, plus the zerosim sections;
 * every value differs from the default so that each assignment shows. */
static const char realistic[] =
    "{\n"
    "  \"train_batch_size\": 64,\n"
    "  \"train_micro_batch_size_per_gpu\": 8,\n"
    "  \"gradient_accumulation_steps\": 2,\n"
    "  \"steps_per_print\": 50,\n"
    "  \"gradient_clipping\": 0.5,\n"
    "  \"wall_clock_breakdown\": false,\n"
    "  \"seed\": 7,\n"
    "  \"optimizer\": {\n"
    "    \"type\": \"AdamW\",\n"
    "    \"params\": {\"lr\": 6e-4, \"betas\": [0.8, 0.99], \"eps\": 1e-6, \"weight_decay\": 0.1}\n"
    "  },\n"
    "  \"scheduler\": {\n"
    "    \"type\": \"WarmupCosineLR\",\n"
    "    \"params\": {\"total_num_steps\": 5000, \"warmup_min_ratio\": 0.01,\n"
    "               \"warmup_num_steps\": 200, \"cos_min_ratio\": 0.05, \"warmup_type\": \"linear\"}\n"
    "  },\n"
    "  \"fp16\": {\n"
    "    \"enabled\": true, \"loss_scale\": 0, \"initial_scale_power\": 12,\n"
    "    \"loss_scale_window\": 500, \"hysteresis\": 3, \"min_loss_scale\": 0.5,\n"
    "    \"consecutive_hysteresis\": false, \"auto_cast\": false\n"
    "  },\n"
    "  \"zero_optimization\": {\n"
    "    \"stage\": 2,\n"
    "    \"allgather_partitions\": true,\n"
    "    \"allgather_bucket_size\": 2e8,\n"
    "    \"overlap_comm\": true,\n"
    "    \"reduce_scatter\": true,\n"
    "    \"reduce_bucket_size\": 5e8,\n"
    "    \"contiguous_gradients\": true,\n"
    "    \"stage3_max_live_parameters\": 3e9,\n"
    "    \"stage3_prefetch_bucket_size\": 4e7\n"
    "  },\n"
    "  \"model\": {\"type\": \"gpt\", \"layers\": 4, \"hidden\": 128, \"heads\": 8,\n"
    "            \"seq\": 64, \"vocab\": 256},\n"
    "  \"zerosim\": {\"steps\": 300}\n"
    "}\n";

START_TEST(test_realistic_config)
{
    zs_run_config want;
    zs_run_config_defaults(&want);
    want.train_batch_size = 64;
    want.micro_batch = 8;
    want.grad_accum = 2;
    want.steps_per_print = 50;
    want.grad_clip = 0.5f;
    want.seed = 7;
    want.optimizer = ZS_OPT_ADAMW;
    want.lr = 6e-4f;
    want.beta1 = 0.8f;
    want.beta2 = 0.99f;
    want.eps = 1e-6f;
    want.weight_decay = 0.1f;
    want.scheduler = ZS_SCHED_WARMUP_COSINE;
    want.total_steps = 5000;
    want.warmup_min_ratio = 0.01f;
    want.warmup_steps = 200;
    want.cos_min_ratio = 0.05f;
    want.warmup_linear = 1;
    want.precision = ZS_DTYPE_F16;
    want.static_loss_scale = 0.0f;
    want.initial_scale_power = 12;
    want.loss_scale_window = 500;
    want.hysteresis = 3;
    want.min_loss_scale = 0.5f;
    want.stage = 2;
    want.allgather_bucket_size = 200000000;
    want.reduce_bucket_size = 500000000;
    want.stage3_max_live_parameters = 3000000000u;
    want.stage3_prefetch_bucket_size = 40000000;
    want.model.kind = ZS_MODEL_GPT;
    want.model.n_layer = 4;
    want.model.n_embd = 128;
    want.model.n_head = 8;
    want.model.seq_len = 64;
    want.model.vocab = 256;
    want.steps = 300;

    ck_assert_ok(load(realistic));
    assert_config_eq(&cfg, &want);

    /* 64 = 8 * 2 * 4 ranks. */
    ck_assert_ok(zs_run_config_finalize(&cfg, 4));
    assert_config_eq(&cfg, &want);
    ck_assert_error(zs_run_config_finalize(&cfg, 2), "world size (2)");
}
END_TEST

START_TEST(test_load_file)
{
    char path[512];
    write_temp(path, sizeof path, realistic);
    zs_run_config from_string;
    zs_run_config_defaults(&from_string);
    ck_assert_ok(zs_config_load_string(realistic, "x", &from_string));
    ck_assert_ok(zs_config_load_file(path, &cfg));
    assert_config_eq(&cfg, &from_string);
    unlink(path);
}
END_TEST

/* Each layer overrides only what it names. */
START_TEST(test_layers_override)
{
    ck_assert_ok(load("{\"train_batch_size\": 16, \"seed\": 5}"));
    ck_assert_ok(load("{\"seed\": 6, \"zero_optimization\": {\"stage\": 1}}"));
    ck_assert_int_eq(cfg.train_batch_size, 16);
    ck_assert_uint_eq(cfg.seed, 6);
    ck_assert_int_eq(cfg.stage, 1);
    ck_assert_float_eq(cfg.lr, 3e-3f);
}
END_TEST

/* A failed load leaves the configuration as it was. */
START_TEST(test_failed_load_changes_nothing)
{
    zs_run_config before = cfg;
    ck_assert_error(load("{\"train_batch_size\": 16, \"optimizer\": {\"type\": \"SGD\"},"
                         " \"zero_optimization\": {\"stage\": 9}}"),
                    "zero_optimization.stage");
    assert_config_eq(&cfg, &before);
}
END_TEST

/* An empty object, and every accepted key that has no effect in zerosim. */
START_TEST(test_accepted_without_effect)
{
    zs_run_config before = cfg;
    ck_assert_ok(load("{}"));
    ck_assert_ok(load("{\"wall_clock_breakdown\": true,"
                      " \"fp16\": {\"enabled\": false, \"consecutive_hysteresis\": false,"
                      "          \"auto_cast\": false},"
                      " \"bf16\": {\"enabled\": false},"
                      " \"zero_optimization\": {\"overlap_comm\": false,"
                      "   \"contiguous_gradients\": true, \"reduce_scatter\": true,"
                      "   \"allgather_partitions\": true}}"));
    assert_config_eq(&cfg, &before);
}
END_TEST

/* Optimizer type names, case-insensitive, and the kind they select. */
static const struct {
    const char *type;
    zs_optim_kind kind;
} optimizer_types[] = {
    {"Adam", ZS_OPT_ADAMW}, {"adam", ZS_OPT_ADAMW}, {"AdamW", ZS_OPT_ADAMW},
    {"ADAMW", ZS_OPT_ADAMW}, {"SGD", ZS_OPT_SGD},   {"sgd", ZS_OPT_SGD},
    {"Lamb", ZS_OPT_LAMB},   {"LAMB", ZS_OPT_LAMB},
};

START_TEST(test_optimizer_types)
{
    char json[256];
    snprintf(json, sizeof json, "{\"optimizer\": {\"type\": \"%s\", \"params\": {\"lr\": 0.25}}}",
             optimizer_types[_i].type);
    ck_assert_ok(load(json));
    ck_assert_int_eq(cfg.optimizer, optimizer_types[_i].kind);
    ck_assert_float_eq(cfg.lr, 0.25f);
}
END_TEST

/* A typed optimizer section starts from DeepSpeed's defaults for the type. */
START_TEST(test_optimizer_defaults)
{
    ck_assert_ok(load("{\"optimizer\": {\"type\": \"Adam\"}}"));
    ck_assert_int_eq(cfg.optimizer, ZS_OPT_ADAMW);
    ck_assert_float_eq(cfg.lr, 1e-3f);
    ck_assert_float_eq(cfg.beta1, 0.9f);
    ck_assert_float_eq(cfg.beta2, 0.999f);
    ck_assert_float_eq(cfg.eps, 1e-8f);
    ck_assert_float_eq(cfg.weight_decay, 0.0f);

    setup();
    ck_assert_ok(load("{\"optimizer\": {\"type\": \"Lamb\", \"params\": {\"max_coeff\": 0.3}}}"));
    ck_assert_int_eq(cfg.optimizer, ZS_OPT_LAMB);
    ck_assert_float_eq(cfg.lr, 1e-3f);
    ck_assert_float_eq(cfg.beta2, 0.999f);
    ck_assert_float_eq(cfg.lamb_max_coeff, 0.3f);
    ck_assert_float_eq(cfg.lamb_min_coeff, 0.01f);

    setup();
    ck_assert_ok(load("{\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.1}}}"));
    ck_assert_int_eq(cfg.optimizer, ZS_OPT_SGD);
    ck_assert_float_eq(cfg.lr, 0.1f);
    ck_assert_float_eq(cfg.momentum, 0.0f);
    ck_assert_float_eq(cfg.weight_decay, 0.0f);

    setup();
    ck_assert_ok(load("{\"optimizer\": {\"type\": \"SGD\", \"params\": "
                      "{\"lr\": 0.05, \"momentum\": 0.8, \"weight_decay\": 1e-4}}}"));
    ck_assert_float_eq(cfg.lr, 0.05f);
    ck_assert_float_eq(cfg.momentum, 0.8f);
    ck_assert_float_eq(cfg.weight_decay, 1e-4f);
}
END_TEST

/* torch_adam, adam_w_mode and the defaults they imply. */
START_TEST(test_optimizer_flags)
{
    /* torch.optim.AdamW's weight_decay default is 0.01 ... */
    ck_assert_ok(load("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"torch_adam\": true}}}"));
    ck_assert_float_eq(cfg.weight_decay, 0.01f);
    /* ... unless given, wherever it stands in the object. */
    ck_assert_ok(load("{\"optimizer\": {\"type\": \"AdamW\", \"params\": "
                      "{\"weight_decay\": 0.05, \"torch_adam\": true}}}"));
    ck_assert_float_eq(cfg.weight_decay, 0.05f);
    /* AdamW ignores adam_w_mode, as DeepSpeed does; Adam with true is AdamW. */
    ck_assert_ok(load("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"adam_w_mode\": false}}}"));
    ck_assert_ok(load("{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"adam_w_mode\": true}}}"));
    ck_assert_int_eq(cfg.optimizer, ZS_OPT_ADAMW);
    ck_assert_int_eq(cfg.adam_l2, 0);
    /* Adam with false is Adam with L2 regularization */
    ck_assert_ok(load("{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"adam_w_mode\": false}}}"));
    ck_assert_int_eq(cfg.adam_l2, 1);
    ck_assert_ok(load("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"adam_w_mode\": false}}}"));
    ck_assert_int_eq(cfg.adam_l2, 0);
    /* bias_correction false */
    ck_assert_ok(load("{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"bias_correction\": false}}}"));
    ck_assert_int_eq(cfg.adam_no_bias_correction, 1);
    ck_assert_ok(load("{\"optimizer\": {\"type\": \"Adam\"}}"));
    ck_assert_int_eq(cfg.adam_no_bias_correction, 0);
}
END_TEST

START_TEST(test_scheduler_warmup_lr)
{
    ck_assert_ok(load("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}},"
                      " \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0.001,"
                      "   \"warmup_max_lr\": 0.02, \"warmup_num_steps\": 50}}}"));
    ck_assert_int_eq(cfg.scheduler, ZS_SCHED_WARMUP);
    ck_assert_float_eq(cfg.lr, 0.02f);
    ck_assert_float_eq_tol(cfg.warmup_min_ratio, 0.05f, 1e-7f);
    ck_assert_int_eq(cfg.warmup_steps, 50);
    ck_assert_int_eq(cfg.warmup_linear, 0); /* DeepSpeed's default: log */
    ck_assert_int_eq(cfg.total_steps, 0);

    /* Without warmup_max_lr, WarmupLR keeps the optimizer's lr. */
    setup();
    ck_assert_ok(load("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}},"
                      " \"scheduler\": {\"type\": \"WarmupLR\"}}"));
    ck_assert_float_eq(cfg.lr, 0.01f);
    ck_assert_float_eq(cfg.warmup_min_ratio, 0.0f);
    ck_assert_int_eq(cfg.warmup_steps, 1000);
    ck_assert_int_eq(cfg.warmup_linear, 0);
}
END_TEST

START_TEST(test_scheduler_warmup_decay)
{
    ck_assert_ok(load("{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
                      "{\"total_num_steps\": 400, \"warmup_type\": \"linear\"}}}"));
    ck_assert_int_eq(cfg.scheduler, ZS_SCHED_WARMUP_DECAY);
    ck_assert_float_eq(cfg.lr, 1e-3f); /* DeepSpeed's warmup_max_lr default */
    ck_assert_float_eq(cfg.cos_min_ratio, 0.0f);
    ck_assert_float_eq(cfg.warmup_min_ratio, 0.0f);
    ck_assert_int_eq(cfg.total_steps, 400);
    ck_assert_int_eq(cfg.warmup_steps, 1000);
    ck_assert_int_eq(cfg.warmup_linear, 1);
}
END_TEST

START_TEST(test_scheduler_warmup_cosine)
{
    ck_assert_ok(load("{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": "
                      "{\"total_num_steps\": 100}}}"));
    ck_assert_int_eq(cfg.scheduler, ZS_SCHED_WARMUP_COSINE);
    ck_assert_float_eq(cfg.lr, 3e-3f); /* the optimizer's lr */
    ck_assert_float_eq(cfg.cos_min_ratio, 1e-4f);
    ck_assert_float_eq(cfg.warmup_min_ratio, 0.0f);
    ck_assert_int_eq(cfg.warmup_steps, 1000);
    ck_assert_int_eq(cfg.warmup_linear, 0);
    ck_assert_int_eq(cfg.total_steps, 100);
}
END_TEST

/* warmup_max_lr overrides the optimizer's lr whatever the order of keys. */
START_TEST(test_scheduler_before_optimizer)
{
    ck_assert_ok(load("{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_max_lr\": 0.5,"
                      "   \"warmup_min_lr\": 0.25}},"
                      " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.1}}}"));
    ck_assert_int_eq(cfg.optimizer, ZS_OPT_SGD);
    ck_assert_float_eq(cfg.lr, 0.5f);
    ck_assert_float_eq(cfg.warmup_min_ratio, 0.5f);
}
END_TEST

START_TEST(test_precision)
{
    ck_assert_ok(load("{\"fp16\": {\"enabled\": true}}"));
    ck_assert_int_eq(cfg.precision, ZS_DTYPE_F16);
    setup();
    ck_assert_ok(load("{\"bf16\": {\"enabled\": true}, \"fp16\": {\"enabled\": false}}"));
    ck_assert_int_eq(cfg.precision, ZS_DTYPE_BF16);
    setup();
    ck_assert_ok(load("{\"bf16\": {\"enabled\": false}, \"fp16\": {\"enabled\": false,"
                      " \"loss_scale\": 128}}"));
    ck_assert_int_eq(cfg.precision, ZS_DTYPE_F32);
    ck_assert_float_eq(cfg.static_loss_scale, 128.0f);
    ck_assert_error(load("{\"fp16\": {\"enabled\": true}, \"bf16\": {\"enabled\": true}}"),
                    "\"fp16.enabled\" and \"bf16.enabled\" are both true");
}
END_TEST

/* Bucket sizes written as reals, as DeepSpeed files often do. */
START_TEST(test_zero_sizes)
{
    ck_assert_ok(load("{\"zero_optimization\": {\"stage\": 3, \"reduce_bucket_size\": 5e8,"
                      " \"allgather_bucket_size\": 123456789, \"stage3_max_live_parameters\": 1e10,"
                      " \"stage3_prefetch_bucket_size\": 0}}"));
    ck_assert_int_eq(cfg.stage, 3);
    ck_assert_uint_eq(cfg.reduce_bucket_size, 500000000u);
    ck_assert_uint_eq(cfg.allgather_bucket_size, 123456789u);
    ck_assert_uint_eq(cfg.stage3_max_live_parameters, 10000000000u);
    ck_assert_uint_eq(cfg.stage3_prefetch_bucket_size, 0u);
    /* Whole reals are integers everywhere. */
    ck_assert_ok(load("{\"train_batch_size\": 32.0, \"zero_optimization\": {\"stage\": 1.0}}"));
    ck_assert_int_eq(cfg.train_batch_size, 32);
    ck_assert_int_eq(cfg.stage, 1);
}
END_TEST

START_TEST(test_model_gpt)
{
    ck_assert_ok(load("{\"model\": {\"type\": \"GPT\", \"layers\": 3, \"hidden\": 96,"
                      " \"heads\": 6, \"seq\": 16, \"vocab\": 50}}"));
    ck_assert_int_eq(cfg.model.kind, ZS_MODEL_GPT);
    ck_assert_int_eq(cfg.model.n_layer, 3);
    ck_assert_int_eq(cfg.model.n_embd, 96);
    ck_assert_int_eq(cfg.model.n_head, 6);
    ck_assert_int_eq(cfg.model.seq_len, 16);
    ck_assert_int_eq(cfg.model.vocab, 50);
}
END_TEST

START_TEST(test_model_mlp)
{
    ck_assert_ok(load("{\"model\": {\"type\": \"mlp\", \"layers\": 3, \"hidden\": 40,"
                      " \"input_dim\": 10, \"classes\": 4, \"activation\": \"GELU\"}}"));
    ck_assert_int_eq(cfg.model.kind, ZS_MODEL_MLP);
    ck_assert_int_eq(cfg.model.n_hidden, 3);
    for (int i = 0; i < ZS_MLP_MAX_HIDDEN; i++)
        ck_assert_int_eq(cfg.model.widths[i], 40);
    ck_assert_int_eq(cfg.model.input_dim, 10);
    ck_assert_int_eq(cfg.model.n_classes, 4);
    ck_assert_int_eq(cfg.model.act, ZS_ACT_GELU);

    ck_assert_ok(load("{\"model\": {\"type\": \"mlp\", \"widths\": [7, 5, 3],"
                      " \"activation\": \"relu\"}}"));
    ck_assert_int_eq(cfg.model.n_hidden, 3);
    ck_assert_int_eq(cfg.model.widths[0], 7);
    ck_assert_int_eq(cfg.model.widths[1], 5);
    ck_assert_int_eq(cfg.model.widths[2], 3);
    ck_assert_int_eq(cfg.model.act, ZS_ACT_RELU);

    /* The kind persists from an earlier layer; no hidden layers at all. */
    ck_assert_ok(load("{\"model\": {\"widths\": []}}"));
    ck_assert_int_eq(cfg.model.kind, ZS_MODEL_MLP);
    ck_assert_int_eq(cfg.model.n_hidden, 0);
}
END_TEST

START_TEST(test_example_gpt)
{
    char path[1024];
    example_path(path, sizeof path, "gpt_small_fp16_zero2.json");
    ck_assert_ok(zs_config_load_file(path, &cfg));
    ck_assert_int_eq(cfg.model.kind, ZS_MODEL_GPT);
    ck_assert_int_eq(cfg.model.n_layer, 2);
    ck_assert_int_eq(cfg.model.n_embd, 64);
    ck_assert_int_eq(cfg.model.n_head, 4);
    ck_assert_int_eq(cfg.model.seq_len, 32);
    ck_assert_int_eq(cfg.model.vocab, 64);
    ck_assert_int_eq(cfg.precision, ZS_DTYPE_F16);
    ck_assert_int_eq(cfg.stage, 2);
    ck_assert_int_eq(cfg.optimizer, ZS_OPT_ADAMW);
    ck_assert_int_eq(cfg.scheduler, ZS_SCHED_WARMUP_COSINE);
    ck_assert_uint_eq(cfg.reduce_bucket_size, 500000000u);

    /* The global batch is fixed; 1, 2, 4 and 8 ranks split it. */
    static const int worlds[] = {1, 2, 4, 8};
    zs_run_config loaded = cfg;
    for (size_t i = 0; i < sizeof worlds / sizeof worlds[0]; i++) {
        cfg = loaded;
        ck_assert_ok(zs_run_config_finalize(&cfg, worlds[i]));
        ck_assert_int_eq(cfg.train_batch_size, 32);
        ck_assert_int_eq(cfg.micro_batch, 4);
        ck_assert_int_eq(cfg.grad_accum, 8 / worlds[i]);
    }
    cfg = loaded;
    ck_assert_error(zs_run_config_finalize(&cfg, 3), "not divisible");
}
END_TEST

START_TEST(test_example_mlp)
{
    char path[1024];
    example_path(path, sizeof path, "mlp_adamw.json");
    ck_assert_ok(zs_config_load_file(path, &cfg));
    ck_assert_int_eq(cfg.model.kind, ZS_MODEL_MLP);
    ck_assert_int_eq(cfg.model.n_hidden, 2);
    ck_assert_int_eq(cfg.model.widths[0], 128);
    ck_assert_int_eq(cfg.model.widths[1], 64);
    ck_assert_int_eq(cfg.model.act, ZS_ACT_GELU);
    ck_assert_int_eq(cfg.optimizer, ZS_OPT_ADAMW);
    ck_assert_int_eq(cfg.scheduler, ZS_SCHED_WARMUP_DECAY);
    ck_assert_int_eq(cfg.precision, ZS_DTYPE_F32);
    ck_assert_int_eq(cfg.stage, 3);
    ck_assert_uint_eq(cfg.seed, 42);
    ck_assert_ok(zs_run_config_finalize(&cfg, 3));
    ck_assert_int_eq(cfg.train_batch_size, 16 * 2 * 3);
    ck_assert_int_eq(cfg.total_steps, 300);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Rejected files                                                            */

START_TEST(test_malformed_json)
{
    /* The stray comma is on line 3, column 11. */
    ck_assert_error(load("{\n  \"train_batch_size\": 8,\n  \"seed\": ,\n}\n"),
                    "test.json:3:11: malformed JSON");
    ck_assert_error(load("{\"seed\": 1,}"), "test.json:1:");
    ck_assert_error(load("{\"seed\": 1"), "malformed JSON");
    ck_assert_error(load(""), "test.json:1:0: malformed JSON");

    char path[512];
    write_temp(path, sizeof path, "{\n\n    \"steps_per_print\": 1 2\n}\n");
    int rc = zs_config_load_file(path, &cfg);
    char want[600];
    snprintf(want, sizeof want, "%s:3:", path);
    ck_assert_error(rc, want);
    ck_assert_error(rc, "malformed JSON");
    unlink(path);
}
END_TEST

START_TEST(test_duplicates_and_top_level)
{
    ck_assert_error(load("{\"seed\": 1, \"seed\": 2}"), "duplicate");
    ck_assert_error(load("[]"), "test.json: the top level must be a JSON object, got array");
    ck_assert_error(load("42"), "the top level must be a JSON object, got 42");
    ck_assert_error(load("null"), "got null");
    ck_assert_error(load("\"{}\""), "got string");
}
END_TEST

START_TEST(test_missing_file)
{
    ck_assert_error(zs_config_load_file("/nonexistent/zerosim.json", &cfg),
                    "/nonexistent/zerosim.json: cannot open: No such file or directory");
    ck_assert_error(zs_config_load_file(".", &cfg), ".: cannot read: Is a directory");
}
END_TEST

/* A JSON text and a piece of the message it must produce. */
typedef struct {
    const char *json;
    const char *want;
} bad_case;

static const bad_case unknown_keys[] = {
    {"{\"train_batch_sise\": 8}", "unknown key \"train_batch_sise\"; check the spelling: did you "
                                  "mean \"train_batch_size\"?"},
    {"{\"zero_optimization\": {\"stag\": 2}}",
     "test.json: unknown key \"zero_optimization.stag\"; check the spelling"},
    {"{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 0.3}}}",
     "offload_optimizer.ratio below 1 (partial offload, ZeRO-Offload++'s Twin-Flow) is a "
     "DeepSpeed feature zerosim does not model yet"},
    {"{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"gpu\"}}}",
     "offload_optimizer.device must be \"none\", \"cpu\" or \"nvme\""},
    {"{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"cpu\", \"pin\": true}}}",
     "unknown key zero_optimization.offload_optimizer.pin"},
    {"{\"flops_profiler\": {\"enabled\": true}, \"flop_profiler\": {}}",
     "unknown key \"flop_profiler\"; check the spelling: did you mean \"flops_profiler\"?"},
    {"{\"optimizer\": {\"type\": \"AdamW\", \"parms\": {}}}", "unknown key \"optimizer.parms\""},
    {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"momentum\": 0.9}}}",
     "unknown key \"optimizer.params.momentum\" for optimizer type \"AdamW\""},
    {"{\"optimizer\": {\"type\": \"SGD\", \"params\": {\"betas\": [0.9, 0.99]}}}",
     "unknown key \"optimizer.params.betas\" for optimizer type \"SGD\""},
    {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"max_grad_norm\": 1.0}}}",
     "unknown key \"optimizer.params.max_grad_norm\""},
    {"{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"cos_min_ratio\": 0.1}}}",
     "unknown key \"scheduler.params.cos_min_ratio\" for scheduler type \"WarmupLR\""},
    {"{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"warmup_max_lr\": 0.1}}}",
     "unknown key \"scheduler.params.warmup_max_lr\" for scheduler type \"WarmupCosineLR\""},
    {"{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"total_num_steps\": 10}}}",
     "unknown key \"scheduler.params.total_num_steps\""},
    {"{\"fp16\": {\"enabled\": true, \"fp16_master_weights_and_grads\": true}}",
     "\"fp16.fp16_master_weights_and_grads\" is a DeepSpeed feature zerosim does not model yet"},
    {"{\"bf16\": {\"enable\": true}}", "did you mean \"bf16.enabled\"?"},
    {"{\"model\": {\"type\": \"mlp\", \"heads\": 4}}",
     "unknown key \"model.heads\" for model type \"mlp\""},
    {"{\"model\": {\"widths\": [8]}}", "unknown key \"model.widths\" for model type \"gpt\""},
    {"{\"zerosim\": {\"step\": 10}}", "did you mean \"zerosim.steps\"?"},
};

START_TEST(test_unknown_keys)
{
    ck_assert_error(load(unknown_keys[_i].json), unknown_keys[_i].want);
}
END_TEST

static const bad_case wrong_values[] = {
    /* top level */
    {"{\"train_batch_size\": \"32\"}",
     "test.json: \"train_batch_size\" must be a positive integer, got string"},
    {"{\"train_batch_size\": -3}", "\"train_batch_size\" must be a positive integer, got -3"},
    {"{\"train_batch_size\": 0}", "\"train_batch_size\" must be a positive integer, got 0"},
    {"{\"train_batch_size\": 2.5}", "\"train_batch_size\" must be a positive integer, got 2.5"},
    {"{\"train_batch_size\": 1e12}", "\"train_batch_size\" must be a positive integer, got 1e+12"},
    {"{\"train_batch_size\": 9223372036854775807}", "\"train_batch_size\" must be a positive"},
    {"{\"train_batch_size\": true}", "\"train_batch_size\" must be a positive integer, got boolean"},
    {"{\"train_batch_size\": null}", "\"train_batch_size\" must be a positive integer, got null"},
    {"{\"train_micro_batch_size_per_gpu\": {}}", "\"train_micro_batch_size_per_gpu\" must be"},
    {"{\"gradient_accumulation_steps\": [1]}",
     "\"gradient_accumulation_steps\" must be a positive integer, got array"},
    {"{\"steps_per_print\": 0}", "\"steps_per_print\" must be a positive integer"},
    {"{\"gradient_clipping\": -1}", "\"gradient_clipping\" must be a number >= 0, got -1"},
    {"{\"seed\": \"auto\"}", "Hugging Face"},
    {"{\"seed\": -1}", "\"seed\" must be a non-negative integer, got -1"},
    {"{\"wall_clock_breakdown\": 1}", "\"wall_clock_breakdown\" must be true or false, got 1"},
    /* optimizer */
    {"{\"optimizer\": []}", "\"optimizer\" must be an object, got array"},
    {"{\"optimizer\": {\"params\": {\"lr\": 1}}}", "\"optimizer.type\" is required"},
    {"{\"optimizer\": {\"type\": 3}}",
     "\"optimizer.type\" must be \"Adam\", \"AdamW\", \"Lamb\", \"OneBitAdam\", \"OneBitLamb\", \"ZeroOneAdam\" or"},
    {"{\"optimizer\": {\"type\": \"Lion\"}}",
     "\"optimizer.type\": Lion is a DeepSpeed optimizer zerosim does not model yet"},
    {"{\"optimizer\": {\"type\": \"Lamb\", \"params\": {\"eps_inside_sqrt\": true}}}",
     "eps_inside_sqrt"},
    {"{\"optimizer\": {\"type\": \"Lamb\", \"params\": {\"max_grad_norm\": 1}}}",
     "use \"gradient_clipping\""},
    {"{\"optimizer\": {\"type\": \"RMSprop\"}}", "got \"RMSprop\""},
    {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": []}}",
     "\"optimizer.params\" must be an object, got array"},
    {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"1e-3\"}}}",
     "\"optimizer.params.lr\" must be a number > 0, got string"},
    {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0}}}",
     "\"optimizer.params.lr\" must be a number > 0, got 0"},
    {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e300}}}",
     "\"optimizer.params.lr\" must be a number > 0, got 1e+300"},
    {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [0.9]}}}",
     "\"optimizer.params.betas\" must be an array of two numbers"},
    {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": {\"b1\": 0.9}}}}",
     "\"optimizer.params.betas\" must be an array of two numbers [beta1, beta2], got object"},
    {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [0.9, 1.0]}}}",
     "\"optimizer.params.betas[1]\" must be a number >= 0 and < 1, got 1"},
    {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [null, 0.9]}}}",
     "\"optimizer.params.betas[0]\" must be a number >= 0 and < 1, got null"},
    {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"eps\": -1e-8}}}",
     "\"optimizer.params.eps\" must be a number > 0"},
    {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"weight_decay\": -0.1}}}",
     "\"optimizer.params.weight_decay\" must be a number >= 0"},
    {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"torch_adam\": \"no\"}}}",
     "\"optimizer.params.torch_adam\" must be true or false, got string"},
    {"{\"optimizer\": {\"type\": \"SGD\", \"params\": {\"momentum\": -0.9}}}",
     "\"optimizer.params.momentum\" must be a number >= 0"},
    /* scheduler */
    {"{\"scheduler\": {\"type\": \"warmuplr\"}}", "case-sensitive"},
    {"{\"scheduler\": {\"type\": \"OneCycle\"}}",
     "\"scheduler.type\": OneCycle is a DeepSpeed scheduler zerosim does not model yet"},
    {"{\"scheduler\": {\"type\": \"Cyclic\"}}",
     "\"scheduler.type\" must be \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\""},
    {"{\"scheduler\": {\"params\": {}}}", "\"scheduler.type\" is required"},
    {"{\"scheduler\": \"WarmupLR\"}", "\"scheduler\" must be an object, got string"},
    {"{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_type\": \"cosine\"}}}",
     "\"scheduler.params.warmup_type\" must be \"linear\" or \"log\", got \"cosine\""},
    {"{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_num_steps\": 0}}}",
     "\"scheduler.params.warmup_num_steps\" must be a positive integer, got 0"},
    {"{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"last_batch_iteration\": 5}}}",
     "\"scheduler.params.last_batch_iteration\" must be -1"},
    {"{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0.1,"
     " \"warmup_max_lr\": 0.01}}}",
     "\"scheduler.params.warmup_min_lr\" (0.1) must not exceed"},
    {"{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_max_lr\": 0}}}",
     "\"scheduler.params.warmup_max_lr\" must be a number > 0, got 0"},
    {"{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"cos_min_ratio\": 2}}}",
     "\"scheduler.params.cos_min_ratio\" must be a number from 0 to 1, got 2"},
    {"{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": -5}}}",
     "\"scheduler.params.total_num_steps\" must be a positive integer, got -5"},
    /* fp16, bf16 */
    {"{\"fp16\": []}", "\"fp16\" must be an object, got array"},
    {"{\"fp16\": {\"enabled\": \"true\"}}", "\"fp16.enabled\" must be true or false, got string"},
    {"{\"fp16\": {\"loss_scale\": \"auto\"}}", "\"auto\" is filled in by the Hugging Face Trainer"},
    {"{\"fp16\": {\"auto_cast\": 1}}", "\"fp16.auto_cast\" must be true or false"},
    {"{\"fp16\": {\"initial_scale_power\": 200}}",
     "\"fp16.initial_scale_power\" must be an integer from 0 to 127, got 200"},
    {"{\"fp16\": {\"min_loss_scale\": 0}}", "\"fp16.min_loss_scale\" must be a number > 0"},
    {"{\"fp16\": {\"loss_scale\": -1}}", "\"fp16.loss_scale\" must be a number >= 0"},
    {"{\"fp16\": {\"hysteresis\": 0}}", "\"fp16.hysteresis\" must be a positive integer"},
    /* zero_optimization */
    {"{\"zero_optimization\": {\"stage\": 4}}", "zero_optimization.stage must be 0, 1, 2 or 3, got 4"},
    {"{\"zero_optimization\": {\"stage\": -1}}", "zero_optimization.stage must be 0, 1, 2 or 3"},
    {"{\"zero_optimization\": {\"stage\": \"2\"}}",
     "zero_optimization.stage must be 0, 1, 2 or 3, got string"},
    {"{\"zero_optimization\": {\"stage\": 2.5}}", "zero_optimization.stage must be 0, 1, 2 or 3"},
    {"{\"zero_optimization\": {\"reduce_bucket_size\": 0.55}}",
     "\"zero_optimization.reduce_bucket_size\" must be a non-negative integer, got 0.55"},
    {"{\"zero_optimization\": {\"allgather_bucket_size\": -5e8}}",
     "\"zero_optimization.allgather_bucket_size\" must be a non-negative integer"},
    {"{\"zero_optimization\": {\"stage3_max_live_parameters\": 1e30}}",
     "\"zero_optimization.stage3_max_live_parameters\" must be a non-negative integer"},
    {"{\"zero_optimization\": {\"overlap_comm\": \"yes\"}}",
     "\"zero_optimization.overlap_comm\" must be true or false"},
    {"{\"zero_optimization\": 2}", "\"zero_optimization\" must be an object, got 2"},
    /* model, zerosim */
    {"{\"model\": {\"type\": \"cnn\"}}", "\"model.type\" must be \"gpt\", \"llama\" or \"mlp\", got \"cnn\""},
    {"{\"model\": {\"type\": 1}}", "\"model.type\" must be \"gpt\", \"llama\" or \"mlp\", got 1"},
    {"{\"model\": {\"heads\": 0}}", "\"model.heads\" must be a positive integer, got 0"},
    {"{\"model\": {\"type\": \"mlp\", \"layers\": 65}}",
     "\"model.layers\" must be an integer from 0 to 64, got 65"},
    {"{\"model\": {\"type\": \"mlp\", \"widths\": [64, -1]}}",
     "\"model.widths[1]\" must be a positive integer, got -1"},
    {"{\"model\": {\"type\": \"mlp\", \"widths\": 64}}", "\"model.widths\" must be an array"},
    {"{\"model\": {\"type\": \"mlp\", \"widths\": [8], \"hidden\": 8}}",
     "give one or the other"},
    {"{\"model\": {\"type\": \"mlp\", \"activation\": \"tanh\"}}",
     "\"model.activation\" must be \"relu\" or \"gelu\", got \"tanh\""},
    {"{\"model\": []}", "\"model\" must be an object, got array"},
    {"{\"zerosim\": {\"steps\": 0}}", "\"zerosim.steps\" must be a positive integer, got 0"},
    {"{\"zerosim\": 5}", "\"zerosim\" must be an object, got 5"},
};

START_TEST(test_wrong_values)
{
    ck_assert_error(load(wrong_values[_i].json), wrong_values[_i].want);
}
END_TEST

START_TEST(test_widths_too_long)
{
    char json[1024] = "{\"model\": {\"type\": \"mlp\", \"widths\": [";
    for (int i = 0; i <= ZS_MLP_MAX_HIDDEN; i++)
        strcat(json, i ? ", 4" : "4");
    strcat(json, "]}}");
    ck_assert_error(load(json), "\"model.widths\" must be an array of at most 64 positive integers");
    /* Exactly the maximum is fine. */
    strcpy(strrchr(json, ','), "]}}");
    ck_assert_ok(load(json));
    ck_assert_int_eq(cfg.model.n_hidden, ZS_MLP_MAX_HIDDEN);
}
END_TEST

/* Messages stay one line whatever the keys and strings contain. */
START_TEST(test_messages_one_line)
{
    ck_assert_error(load("{\"a\\nb\": 1}"), "unknown key \"a?b\"");
    ck_assert_error(load("{\"optimizer\": {\"type\": \"x\\ny\"}}"), "got \"x?y\"");
    ck_assert_error(load("{\"seed\": \"a\nb\"}"), "malformed JSON");
    ck_assert_error(zs_config_load_string("[", "bad\nname", &cfg), "bad?name:1:");
}
END_TEST

/* Odd inputs fail cleanly, and random damage to a valid file never crashes
 * the loader (run under AddressSanitizer to make this test count). */
START_TEST(test_no_crash)
{
    static const char *odd[] = {
        "{\"optimizer\": null}", "{\"optimizer\": {\"type\": null}}",
        "{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": null}}",
        "{\"model\": {\"type\": \"mlp\", \"widths\": [[1]]}}",
        "{\"fp16\": {\"enabled\": {}}}", "{\"train_batch_size\": -1e308}",
        "{\"seed\": 1e19}", "{\"seed\": 18446744073709551616}",
        "{\"\": 1}", "{\"zero_optimization\": {\"\": {}}}",
        "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [1e400, 0]}}}",
        "\xff\xfe", "{\"\\u0000\": 1}",
    };
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        zs_error_clear();
        int rc = load(odd[i]);
        ck_assert_msg(rc != 0, "accepted: %s", odd[i]);
        ck_assert_msg(zs_error_msg()[0] != '\0', "no message for: %s", odd[i]);
        ck_assert(one_line_each(zs_error_msg()));
    }

    size_t n = strlen(realistic);
    char *text = malloc(n + 1);
    ck_assert_ptr_nonnull(text);
    static const char alphabet[] = "{}[]\",:-.e0129 aZ\\";
    unsigned long long rng = 0x9e3779b97f4a7c15ull;
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(text, realistic, n + 1);
        for (int k = 0; k < 3; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(rng >> 33) % n;
            text[at] = alphabet[(rng >> 20) % (sizeof alphabet - 1)];
        }
        setup();
        if (load(text) != 0) {
            ck_assert_msg(zs_error_msg()[0] != '\0', "no message for: %s", text);
            ck_assert(one_line_each(zs_error_msg()));
        } else {
            (void)zs_run_config_finalize(&cfg, 1 + iter % 8);
        }
    }
    free(text);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Batch arithmetic                                                          */

/* Given train_batch_size, micro batch and accumulation (0 = not given) and a
 * world size, what finalize resolves them to. */
static const struct {
    int tb, mb, ga, world;
    int want_tb, want_mb, want_ga;
} batch_rules[] = {
    {32, 4, 2, 4, 32, 4, 2}, /* all three, consistent */
    {32, 4, 0, 2, 32, 4, 4}, /* TB, MB -> GA */
    {32, 0, 2, 2, 32, 8, 2}, /* TB, GA -> MB */
    {0, 4, 2, 3, 24, 4, 2},  /* MB, GA -> TB */
    {32, 0, 0, 4, 32, 8, 1}, /* TB -> GA 1, MB */
    {7, 0, 0, 1, 7, 7, 1},
    {0, 4, 0, 2, 8, 4, 1},   /* MB -> GA 1 */
    {0, 0, 3, 2, 48, 8, 3},  /* GA -> MB 8 */
    {0, 0, 0, 1, 8, 8, 1},   /* nothing -> MB 8, GA 1 */
    {0, 0, 0, 4, 32, 8, 1},
};

START_TEST(test_batch_rules)
{
    cfg.train_batch_size = batch_rules[_i].tb;
    cfg.micro_batch = batch_rules[_i].mb;
    cfg.grad_accum = batch_rules[_i].ga;
    ck_assert_ok(zs_run_config_finalize(&cfg, batch_rules[_i].world));
    ck_assert_int_eq(cfg.train_batch_size, batch_rules[_i].want_tb);
    ck_assert_int_eq(cfg.micro_batch, batch_rules[_i].want_mb);
    ck_assert_int_eq(cfg.grad_accum, batch_rules[_i].want_ga);
}
END_TEST

/* The same rules reached through the JSON keys. */
START_TEST(test_batch_from_json)
{
    ck_assert_ok(load("{\"train_batch_size\": 48, \"gradient_accumulation_steps\": 3}"));
    ck_assert_ok(zs_run_config_finalize(&cfg, 2));
    ck_assert_int_eq(cfg.micro_batch, 8);
}
END_TEST

static const struct {
    int tb, mb, ga, world;
    const char *want;
} batch_errors[] = {
    {32, 4, 2, 2,
     "train_batch_size (32) must equal train_micro_batch_size_per_gpu (4) * "
     "gradient_accumulation_steps (2) * world size (2) = 16"},
    {30, 4, 0, 2,
     "train_batch_size (30) is not divisible by train_micro_batch_size_per_gpu (4) * "
     "world size (2) = 8"},
    {30, 0, 4, 2,
     "train_batch_size (30) is not divisible by gradient_accumulation_steps (4) * "
     "world size (2) = 8"},
    {5, 0, 0, 2, "train_batch_size (5) is not divisible by the world size (2)"},
    {4, 8, 0, 1, "train_batch_size (4) is not divisible by train_micro_batch_size_per_gpu (8)"},
    {-1, 0, 0, 1, "must be positive"},
    {0, -4, 0, 1, "must be positive"},
    {0, 65536, 65536, 1, "is too large"},
    {0, 0, 0, 0, "world size must be at least 1, got 0"},
};

START_TEST(test_batch_errors)
{
    cfg.train_batch_size = batch_errors[_i].tb;
    cfg.micro_batch = batch_errors[_i].mb;
    cfg.grad_accum = batch_errors[_i].ga;
    ck_assert_error(zs_run_config_finalize(&cfg, batch_errors[_i].world), batch_errors[_i].want);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Other checks of finalize                                                  */

/* Set one field (by offset; int or float) to a bad value; the message. */
static const struct {
    size_t off;
    int is_int;
    double value;
    const char *want;
} finalize_errors[] = {
    {offsetof(zs_run_config, steps), 1, 0, "steps (zerosim.steps) must be > 0, got 0"},
    {offsetof(zs_run_config, lr), 0, 0, "optimizer.params.lr must be > 0"},
    {offsetof(zs_run_config, lr), 0, NAN, "optimizer.params.lr must be > 0"},
    {offsetof(zs_run_config, lr), 0, INFINITY, "optimizer.params.lr must be > 0"},
    {offsetof(zs_run_config, beta1), 0, 1.0, "optimizer.params.betas[0] (beta1) must be >= 0 and < 1"},
    {offsetof(zs_run_config, beta2), 0, -0.1, "optimizer.params.betas[1] (beta2) must be >= 0"},
    {offsetof(zs_run_config, eps), 0, 0, "optimizer.params.eps must be > 0"},
    {offsetof(zs_run_config, weight_decay), 0, -0.5, "optimizer.params.weight_decay must be >= 0"},
    {offsetof(zs_run_config, momentum), 0, -1, "optimizer.params.momentum must be >= 0"},
    {offsetof(zs_run_config, warmup_steps), 1, -1, "warmup_num_steps"},
    {offsetof(zs_run_config, total_steps), 1, -5, "total_num_steps"},
    {offsetof(zs_run_config, cos_min_ratio), 0, 1.5, "scheduler.params.cos_min_ratio must be from 0 to 1"},
    {offsetof(zs_run_config, warmup_min_ratio), 0, -0.1, "scheduler.params.warmup_min_ratio"},
    {offsetof(zs_run_config, grad_clip), 0, -1, "gradient_clipping must be >= 0"},
    {offsetof(zs_run_config, stage), 1, 4, "zero_optimization.stage must be 0, 1, 2 or 3, got 4"},
    {offsetof(zs_run_config, stage), 1, -1, "zero_optimization.stage must be 0, 1, 2 or 3"},
    {offsetof(zs_run_config, min_loss_scale), 0, 0, "fp16.min_loss_scale must be > 0"},
    {offsetof(zs_run_config, loss_scale_window), 1, 0, "fp16.loss_scale_window must be > 0"},
    {offsetof(zs_run_config, hysteresis), 1, 0, "fp16.hysteresis must be > 0"},
    {offsetof(zs_run_config, initial_scale_power), 1, 300, "fp16.initial_scale_power"},
};

START_TEST(test_finalize_errors)
{
    char *base = (char *)&cfg;
    if (finalize_errors[_i].is_int)
        *(int *)(base + finalize_errors[_i].off) = (int)finalize_errors[_i].value;
    else
        *(float *)(base + finalize_errors[_i].off) = (float)finalize_errors[_i].value;
    ck_assert_error(zs_run_config_finalize(&cfg, 1), finalize_errors[_i].want);
}
END_TEST

START_TEST(test_finalize_total_steps)
{
    cfg.steps = 40;
    ck_assert_ok(zs_run_config_finalize(&cfg, 1));
    ck_assert_int_eq(cfg.total_steps, 40);
    setup();
    cfg.total_steps = 500;
    ck_assert_ok(zs_run_config_finalize(&cfg, 1));
    ck_assert_int_eq(cfg.total_steps, 500);
}
END_TEST

/* finalize ends with the model's own checks. */
START_TEST(test_finalize_validates_model)
{
    cfg.model.n_head = 3; /* does not divide n_embd = 64 */
    int rc = zs_run_config_finalize(&cfg, 1);
    ck_assert_int_ne(rc, 0);
    ck_assert_str_ne(zs_error_msg(), "");
}
END_TEST

/* ------------------------------------------------------------------------ */

#define N(a) ((int)(sizeof a / sizeof a[0]))

/* ------------------------------------------------------------------------ */
/* DeepSpeed's schema: every problem at once, "auto", no-effect and
 * unmodelled keys                                                           */

/* Three problems of three kinds in one file: all of them are reported. */
START_TEST(test_every_problem)
{
    zs_run_config before = cfg;
    int rc = load("{\"train_batch_sise\": 8, \"steps_per_print\": \"often\","
                  " \"zero_optimization\": {\"stage\": 3,"
                  "   \"offload_param\": {\"device\": \"cpu\", \"ratio\": 0.5}}}");
    ck_assert_error(rc, "test.json: 3 problems, one per line:");
    ck_assert_error(rc, "did you mean \"train_batch_size\"?");
    ck_assert_error(rc, "\"steps_per_print\" must be a positive integer, got string");
    ck_assert_error(rc, "zero_optimization.offload_param.ratio below 1 (partial offload, "
                        "ZeRO-Offload++'s Twin-Flow) is a DeepSpeed feature zerosim does not model");
    assert_config_eq(&cfg, &before);
}
END_TEST

/* The Hugging Face Trainer's "auto", resolved from zerosim's options and the
 * model (hidden 64: reduce_bucket_size 64^2 = 4096, prefetch 0.9 * 4096 =
 * 3686.4 -> 3686). */
START_TEST(test_auto)
{
    ck_assert_ok(load("{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": \"auto\","
                      " \"gradient_accumulation_steps\": \"auto\", \"gradient_clipping\": \"auto\","
                      " \"fp16\": {\"enabled\": \"auto\"}, \"bf16\": {\"enabled\": \"auto\"},"
                      " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\","
                      "   \"betas\": \"auto\", \"eps\": \"auto\", \"weight_decay\": \"auto\"}},"
                      " \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {"
                      "   \"warmup_min_lr\": \"auto\", \"warmup_max_lr\": \"auto\","
                      "   \"warmup_num_steps\": \"auto\", \"total_num_steps\": \"auto\"}},"
                      " \"zero_optimization\": {\"stage\": 3, \"reduce_bucket_size\": \"auto\","
                      "   \"stage3_prefetch_bucket_size\": \"auto\","
                      "   \"stage3_param_persistence_threshold\": \"auto\","
                      "   \"stage3_gather_16bit_weights_on_model_save\": \"auto\"}}"));
    /* what the command line would set */
    cfg.micro_batch = 4;
    cfg.grad_accum = 2;
    cfg.steps = 50;
    ck_assert_ok(zs_run_config_finalize(&cfg, 3));
    ck_assert_int_eq(cfg.train_batch_size, 24);
    ck_assert_float_eq(cfg.lr, 3e-3f);    /* zerosim's default */
    ck_assert_float_eq(cfg.beta2, 0.95f);
    ck_assert_float_eq(cfg.grad_clip, 1.0f);
    ck_assert_int_eq(cfg.warmup_steps, 10);
    ck_assert_int_eq(cfg.total_steps, 50);
    ck_assert_float_eq(cfg.warmup_min_ratio, 0.0f);
    ck_assert_int_eq(cfg.precision, ZS_DTYPE_F32);
    ck_assert_uint_eq(cfg.reduce_bucket_size, 4096);
    ck_assert_uint_eq(cfg.stage3_prefetch_bucket_size, 3686);
    char buf[2048];
    zs_run_config_describe_auto(&cfg, buf, sizeof buf);
    ck_assert_ptr_nonnull(strstr(buf, "train_batch_size=24, "));
    ck_assert_ptr_nonnull(strstr(buf, "optimizer.params.betas=[0.9, 0.95]"));
    ck_assert_ptr_nonnull(strstr(buf, "zero_optimization.reduce_bucket_size=4096"));
    ck_assert_ptr_nonnull(strstr(buf, "stage3_param_persistence_threshold=640 (not modelled)"));
    ck_assert_ptr_nonnull(strstr(cfg.noeffect, "stage3_gather_16bit_weights_on_model_save"));
    /* "auto" where the Trainer does not fill it in stays an error */
    setup();
    ck_assert_error(load("{\"zero_optimization\": {\"stage\": \"auto\"}}"),
                    "zero_optimization.stage must be 0, 1, 2 or 3, got string");
}
END_TEST

/* Keys with no effect in a simulator are accepted and listed. */
START_TEST(test_no_effect_listed)
{
    ck_assert_ok(load("{\"_comment\": \"x\", \"tensorboard\": {\"enabled\": true},"
                      " \"autotuning\": {\"enabled\": false}, \"comms_logger\": {\"enabled\": true},"
                      " \"zero_allow_untested_optimizer\": true, \"compile\": {\"disable\": false},"
                      " \"zero_optimization\": {\"stage\": 2, \"sub_group_size\": 1e14}}"));
    ck_assert_str_eq(cfg.noeffect, "_comment, zero_optimization.sub_group_size, "
                                   "zero_allow_untested_optimizer, tensorboard, autotuning, "
                                   "comms_logger, compile");
    ck_assert_int_eq(cfg.stage, 2);
    /* fp16.auto_cast casts the inputs, which zerosim's models take as token
     * ids or compute on in fp32 either way: accepted and listed */
    setup();
    ck_assert_ok(load("{\"fp16\": {\"enabled\": true, \"auto_cast\": true}}"));
    ck_assert_str_eq(cfg.noeffect, "fp16.auto_cast");
    setup();
    ck_assert_error(load("{\"tensorboard\": true}"), "\"tensorboard\" must be an object");
}
END_TEST

/* A feature zerosim does not model is accepted only when it is off. */
START_TEST(test_unmodelled_off)
{
    ck_assert_ok(load("{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"none\"},"
                      "   \"offload_param\": null, \"cpu_offload\": false,"
                      "   \"zero_hpz_partition_size\": 1, \"zero_quantized_weights\": false},"
                      " \"amp\": {\"enabled\": false}, \"sparse_gradients\": false,"
                      " \"compression_training\": {\"weight_quantization\": {\"shared_parameters\":"
                      "   {\"enabled\": false}}}}"));
    setup();
    ck_assert_error(load("{\"compression_training\": {\"weight_quantization\": {"
                         "\"shared_parameters\": {\"enabled\": true}}}}"),
                    "\"compression_training.weight_quantization\" is a DeepSpeed feature zerosim "
                    "does not model yet");
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "--qat int8|nf4"));
    /* compression_training: each enabled section named, with what instead */
    setup();
    ck_assert_error(load("{\"compression_training\": {\"activation_quantization\": {"
                         "\"shared_parameters\": {\"enabled\": true}}, \"layer_reduction\": "
                         "{\"enabled\": true}, \"sparse_pruning\": {\"shared_parameters\": "
                         "{\"enabled\": false}}}}"),
                    "2 problems, one per line");
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "\"compression_training.activation_quantization"
                                                 "\" is a DeepSpeed feature"));
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "\"compression_training.layer_reduction\" is a "
                                                 "DeepSpeed feature"));
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "(--layers)"));
    ck_assert_ptr_null(strstr(zs_error_msg(), "sparse_pruning"));
    setup();
    ck_assert_error(load("{\"compression_training\": {\"channel_pruning\": {"
                         "\"shared_parameters\": {\"enabled\": true}}}}"),
                    "zerosim compress --sparsity S");
    setup();
    ck_assert_error(load("{\"compression_training\": {\"weight_pruning\": {}}}"),
                    "unknown key");
    ck_assert_error(load("{\"zero_optimization\": {\"zero_quantized_nontrainable_weights\": "
                         "true}}"), "ZeRO++ quantized weights");
    /* ZeRO++'s hpZ and qgZ are modelled: read into the configuration */
    setup();
    ck_assert_ok(load("{\"zero_optimization\": {\"stage\": 3, \"zero_hpz_partition_size\": 8, "
                      "\"zero_quantized_gradients\": true}}"));
    ck_assert_int_eq(cfg.hpz_partition_size, 8);
    ck_assert_int_eq(cfg.quantized_gradients, 1);
    ck_assert_error(load("{\"zero_optimization\": {\"offload_param\": {\"device\": \"cpu\", "
                         "\"ratio\": 0.5}}}"), "Twin-Flow) is a DeepSpeed feature zerosim does not "
                    "model yet: remove it or set it to 1");
    /* 0/1 Adam is modelled: its four keys read, 0 refused */
    setup();
    ck_assert_ok(load("{\"optimizer\": {\"type\": \"ZeroOneAdam\", \"params\": {"
                      "\"var_freeze_step\": 12500, \"var_update_scaler\": 8, "
                      "\"local_step_scaler\": 1000, \"local_step_clipper\": 4, "
                      "\"cuda_aware\": false, \"comm_backend_name\": \"nccl\"}}}"));
    ck_assert_int_eq(cfg.optimizer, ZS_OPT_ZEROONEADAM);
    ck_assert_int_eq(cfg.onebit_freeze_step, 12500);
    ck_assert_int_eq(cfg.zo_var_update_scaler, 8);
    ck_assert_int_eq(cfg.zo_local_step_scaler, 1000);
    ck_assert_int_eq(cfg.zo_local_step_clipper, 4);
    setup();
    ck_assert_ok(load("{\"optimizer\": {\"type\": \"ZeroOneAdam\", \"params\": {}}}"));
    ck_assert_int_eq(cfg.zo_local_step_scaler, 32678);
    ck_assert_int_eq(cfg.zo_local_step_clipper, 16);
    ck_assert_error(load("{\"optimizer\": {\"type\": \"ZeroOneAdam\", \"params\": {"
                         "\"local_step_clipper\": 0}}}"), "local_step_clipper");
    /* 1-bit Adam is modelled: its keys read, its transport's keys of no effect */
    setup();
    ck_assert_ok(load("{\"optimizer\": {\"type\": \"OnebitAdam\", \"params\": {\"lr\": 4e-4, "
                      "\"freeze_step\": 23000, \"bias_correction\": false, \"cuda_aware\": "
                      "false, \"comm_backend_name\": \"nccl\", \"weight_decay\": 0.01}}}"));
    ck_assert_int_eq(cfg.optimizer, ZS_OPT_ONEBITADAM);
    ck_assert_int_eq(cfg.onebit_freeze_step, 23000);
    ck_assert_float_eq_tol(cfg.weight_decay, 0.01f, 1e-9f);
    ck_assert_error(load("{\"optimizer\": {\"type\": \"OneBitAdam\", \"params\": "
                         "{\"freeze_step\": -1}}}"), "freeze_step");
}
END_TEST

/* offload_optimizer: DeepSpeed's section and its deprecated boolean. */
START_TEST(test_offload_optimizer)
{
    ck_assert_ok(load("{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": "
                      "{\"device\": \"nvme\", \"nvme_path\": \"/local_nvme\", "
                      "\"pin_memory\": true, \"buffer_count\": 4, \"ratio\": 1}}}"));
    ck_assert_int_eq(cfg.offload_optimizer, ZS_OFFLOAD_NVME);
    ck_assert_str_eq(cfg.nvme_path, "/local_nvme");
    ck_assert_ptr_nonnull(strstr(cfg.noeffect, "zero_optimization.offload_optimizer.pin_memory"));
    setup();
    ck_assert_ok(load("{\"zero_optimization\": {\"stage\": 1, \"cpu_offload\": true}}"));
    ck_assert_int_eq(cfg.offload_optimizer, ZS_OFFLOAD_CPU);
    setup();
    ck_assert_ok(load("{\"zero_optimization\": {\"stage\": 3, \"cpu_offload_param\": true, "
                      "\"offload_optimizer\": {\"device\": \"cpu\"}}}"));
    ck_assert_int_eq(cfg.offload_param, ZS_OFFLOAD_CPU);
    ck_assert_int_eq(zs_run_config_finalize(&cfg, 1), 0);
    /* parameter offload alone: cpu and nvme run (the optimizer on the
     * device) */
    cfg.offload_optimizer = ZS_OFFLOAD_NONE;
    ck_assert_int_eq(zs_run_config_finalize(&cfg, 1), 0);
    cfg.offload_param = ZS_OFFLOAD_NVME;
    snprintf(cfg.nvme_path, sizeof cfg.nvme_path, "/local_nvme");
    ck_assert_int_eq(zs_run_config_finalize(&cfg, 1), 0);
    cfg.offload_param = ZS_OFFLOAD_CPU;
    /* below stage 3, DeepSpeed does not read offload_param: no effect */
    cfg.offload_optimizer = ZS_OFFLOAD_CPU;
    cfg.stage = 2;
    ck_assert_int_eq(zs_run_config_finalize(&cfg, 1), 0);
    ck_assert_int_eq(cfg.offload_param, ZS_OFFLOAD_NONE);
    ck_assert_ptr_nonnull(strstr(cfg.noeffect, "zero_optimization.offload_param (stage 2)"));
    setup();
    ck_assert_ok(load("{\"zero_optimization\": {\"stage\": 1, \"cpu_offload\": true}}"));
    /* stage 0 cannot offload; nvme needs its path */
    cfg.stage = 0;
    ck_assert_int_ne(zs_run_config_finalize(&cfg, 1), 0);
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "needs ZeRO stage 1, 2 or 3"));
    setup();
    ck_assert_ok(load("{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": "
                      "{\"device\": \"nvme\"}}}"));
    ck_assert_int_ne(zs_run_config_finalize(&cfg, 1), 0);
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "needs nvme_path"));
}
END_TEST

/* An optimizer without a scheduler: a constant learning rate (DeepSpeed). */
START_TEST(test_optimizer_without_scheduler)
{
    ck_assert_ok(load("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}}}"));
    ck_assert_ok(zs_run_config_finalize(&cfg, 1));
    ck_assert_int_eq(cfg.scheduler, ZS_SCHED_CONSTANT);
    ck_assert_float_eq(zs_lr_at(&cfg, 0), 0.01f);
    ck_assert_float_eq(zs_lr_at(&cfg, 99), 0.01f);
    /* with a scheduler, step 0 is the warm-up's start */
    setup();
    ck_assert_ok(load("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}},"
                      " \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_type\": \"linear\"}}}"));
    ck_assert_ok(zs_run_config_finalize(&cfg, 1));
    ck_assert_float_eq(zs_lr_at(&cfg, 0), 0.0f);
}
END_TEST

/* DeepSpeed takes counts as large as a Python int: "never" in practice. */
START_TEST(test_large_counts)
{
    ck_assert_ok(load("{\"steps_per_print\": 20000000000000000, \"fp16\": {\"loss_scale_window\": 1e12},"
                      " \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"total_num_steps\": 1e15}}}"));
    ck_assert_int_eq(cfg.steps_per_print, INT_MAX);
    ck_assert_int_eq(cfg.loss_scale_window, INT_MAX);
    ck_assert_int_eq(cfg.total_steps, INT_MAX);
    ck_assert_error(load("{\"steps_per_print\": 1e30}"), "must be a positive integer");
}
END_TEST

/* prescale_gradients, gradient_predivide_factor, communication and
 * accumulation data types, the bfloat16 alias. */
START_TEST(test_gradient_scaling_keys)
{
    ck_assert_int_eq(cfg.grad_scaling, ZS_GRAD_IN_LOSS);
    ck_assert_ok(load("{\"prescale_gradients\": true}"));
    ck_assert_int_eq(cfg.grad_scaling, ZS_GRAD_PRESCALE);
    setup();
    ck_assert_ok(load("{\"prescale_gradients\": false}"));
    ck_assert_int_eq(cfg.grad_scaling, ZS_GRAD_POSTSCALE);
    ck_assert(cfg.grad_predivide == 1.0);
    setup();
    ck_assert_ok(load("{\"gradient_predivide_factor\": 2}"));
    ck_assert_int_eq(cfg.grad_scaling, ZS_GRAD_POSTSCALE);
    ck_assert(cfg.grad_predivide == 2.0);
    ck_assert_error(load("{\"gradient_predivide_factor\": 0}"), "must be a number > 0");

    setup();
    ck_assert_ok(load("{\"communication_data_type\": \"fp16\", \"fp16\": {\"enabled\": true},"
                      " \"data_types\": {\"grad_accum_dtype\": \"fp16\"}}"));
    ck_assert_ok(zs_run_config_finalize(&cfg, 1));
    setup();
    ck_assert_ok(load("{\"communication_data_type\": \"fp32\", \"bf16\": {\"enabled\": true}}"));
    ck_assert_error(zs_run_config_finalize(&cfg, 1),
                    "communication_data_type \"fp32\" with gradients accumulated in bf16 is not "
                    "modelled");
    /* fp32 accumulation with bf16 (DeepSpeed's BF16_Optimizer), and fp32
     * on the wire with it; the working precision named is the default */
    setup();
    ck_assert_ok(load("{\"bf16\": {\"enabled\": true}, \"data_types\": {\"grad_accum_dtype\": "
                      "\"fp32\"}, \"communication_data_type\": \"fp32\"}"));
    ck_assert_int_eq(cfg.grad_accum_dtype, ZS_DTYPE_F32);
    ck_assert_ok(zs_run_config_finalize(&cfg, 1));
    ck_assert_int_eq(zs_run_config_grad_dtype(&cfg), ZS_DTYPE_F32);
    setup();
    ck_assert_ok(load("{\"bf16\": {\"enabled\": true}, \"data_types\": {\"grad_accum_dtype\": "
                      "\"bf16\"}}"));
    ck_assert_ok(zs_run_config_finalize(&cfg, 1));
    ck_assert_int_eq(zs_run_config_grad_dtype(&cfg), ZS_DTYPE_BF16);
    setup();
    ck_assert_int_eq(zs_run_config_grad_dtype(&cfg), cfg.precision); /* not given */
    ck_assert_ok(load("{\"bf16\": {\"enabled\": true}, \"data_types\": {\"grad_accum_dtype\": "
                      "\"fp32\"}, \"communication_data_type\": \"bf16\"}"));
    ck_assert_error(zs_run_config_finalize(&cfg, 1),
                    "communication_data_type \"bf16\" with gradients accumulated in fp32");
    setup();
    ck_assert_ok(load("{\"bf16\": {\"enabled\": true}, \"data_types\": {\"grad_accum_dtype\": "
                      "\"fp16\"}}"));
    ck_assert_error(zs_run_config_finalize(&cfg, 1),
                    "data_types.grad_accum_dtype \"fp16\" with bf16 training is not modelled");
    setup();
    ck_assert_ok(load("{\"fp16\": {\"enabled\": true}, \"data_types\": {\"grad_accum_dtype\": "
                      "\"fp32\"}}"));
    ck_assert_error(zs_run_config_finalize(&cfg, 1), "with fp16 training is not modelled");
    setup();
    ck_assert_error(load("{\"data_types\": {\"grad_accum_dtype\": \"fp8\"}}"),
                    "\"fp32\", \"fp16\", \"bf16\" or null");

    setup();
    ck_assert_ok(load("{\"bfloat16\": {\"enabled\": true}}"));
    ck_assert_int_eq(cfg.precision, ZS_DTYPE_BF16);
    ck_assert_error(load("{\"bfloat16\": {\"enabled\": true}, \"bf16\": {\"enabled\": true}}"),
                    "keep one");
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");

    TCase *tc = tcase_create("defaults");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_defaults_finalize);
    suite_add_tcase(s, tc);

    tc = tcase_create("load");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_realistic_config);
    tcase_add_test(tc, test_load_file);
    tcase_add_test(tc, test_layers_override);
    tcase_add_test(tc, test_failed_load_changes_nothing);
    tcase_add_test(tc, test_accepted_without_effect);
    tcase_add_loop_test(tc, test_optimizer_types, 0, N(optimizer_types));
    tcase_add_test(tc, test_optimizer_defaults);
    tcase_add_test(tc, test_optimizer_flags);
    tcase_add_test(tc, test_scheduler_warmup_lr);
    tcase_add_test(tc, test_scheduler_warmup_decay);
    tcase_add_test(tc, test_scheduler_warmup_cosine);
    tcase_add_test(tc, test_scheduler_before_optimizer);
    tcase_add_test(tc, test_precision);
    tcase_add_test(tc, test_zero_sizes);
    tcase_add_test(tc, test_model_gpt);
    tcase_add_test(tc, test_model_mlp);
    tcase_add_test(tc, test_example_gpt);
    tcase_add_test(tc, test_example_mlp);
    tcase_add_test(tc, test_every_problem);
    tcase_add_test(tc, test_auto);
    tcase_add_test(tc, test_no_effect_listed);
    tcase_add_test(tc, test_unmodelled_off);
    tcase_add_test(tc, test_optimizer_without_scheduler);
    tcase_add_test(tc, test_offload_optimizer);
    tcase_add_test(tc, test_large_counts);
    tcase_add_test(tc, test_gradient_scaling_keys);
    suite_add_tcase(s, tc);

    tc = tcase_create("reject");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_malformed_json);
    tcase_add_test(tc, test_duplicates_and_top_level);
    tcase_add_test(tc, test_missing_file);
    tcase_add_loop_test(tc, test_unknown_keys, 0, N(unknown_keys));
    tcase_add_loop_test(tc, test_wrong_values, 0, N(wrong_values));
    tcase_add_test(tc, test_widths_too_long);
    tcase_add_test(tc, test_messages_one_line);
    tcase_add_test(tc, test_no_crash);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("finalize");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_loop_test(tc, test_batch_rules, 0, N(batch_rules));
    tcase_add_test(tc, test_batch_from_json);
    tcase_add_loop_test(tc, test_batch_errors, 0, N(batch_errors));
    tcase_add_loop_test(tc, test_finalize_errors, 0, N(finalize_errors));
    tcase_add_test(tc, test_finalize_total_steps);
    tcase_add_test(tc, test_finalize_validates_model);
    suite_add_tcase(s, tc);

    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(config_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
