/* zerosim — the JSON report. */
#include "build-config.h"
#include "zerosim/report.h"
#include "zerosim/error.h"
#include "zerosim/optim.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

size_t zs_report_peak_rss(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (size_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}

/* A float as a JSON number, or null when it is not finite. */
static json_t *zs_json_real(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *zs_report_memory(const zs_train_result *r)
{
    json_t *list = json_array();
    for (int q = 0; q < r->world_size; q++) {
        json_t *cats = json_object();
        for (int c = 0; c < ZS_MEM_NCAT; c++)
            json_object_set_new(cats, zs_mem_category_name((zs_mem_category)c),
                                json_pack("{s:I}", "peak_bytes", (json_int_t)r->peaks[q][c]));
        json_t *rank = json_pack("{s:i, s:o, s:I}", "rank", q, "categories", cats,
                                 "total_peak_bytes", (json_int_t)r->total_peaks[q]);
        if (q == 0)
            json_object_set_new(rank, "peak_rss_bytes", json_integer((json_int_t)zs_report_peak_rss()));
        json_array_append_new(list, rank);
    }
    return list;
}

int zs_report_write_json(const char *path, const zs_run_config *cfg, const zs_train_result *r)
{
    json_t *losses = json_array(), *lrs = json_array(), *norms = json_array(),
           *scales = json_array(), *skipped = json_array(), *secs = json_array();
    for (int s = 0; s < r->steps; s++) {
        json_array_append_new(losses, zs_json_real(r->info[s].loss));
        json_array_append_new(lrs, zs_json_real(r->info[s].lr));
        json_array_append_new(norms, zs_json_real(r->info[s].grad_norm));
        json_array_append_new(scales, zs_json_real(r->info[s].loss_scale));
        json_array_append_new(skipped, json_boolean(r->info[s].skipped));
        json_array_append_new(secs, zs_json_real(r->info[s].seconds));
    }
    const zs_model_config *mc = &cfg->model;
    json_t *model;
    if (mc->kind == ZS_MODEL_GPT) {
        model = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i}", "type", "gpt", "layers", mc->n_layer,
                          "hidden", mc->n_embd, "heads", mc->n_head, "seq", mc->seq_len,
                          "vocab", mc->vocab);
    } else {
        json_t *w = json_array();
        for (int i = 0; i < mc->n_hidden; i++)
            json_array_append_new(w, json_integer(mc->widths[i]));
        model = json_pack("{s:s, s:i, s:i, s:o, s:s}", "type", "mlp", "input_dim", mc->input_dim,
                          "classes", mc->n_classes, "widths", w, "activation",
                          mc->act == ZS_ACT_RELU ? "relu" : "gelu");
    }
    json_t *root = json_pack(
        "{s:s, s:I, s:i, s:i, s:s, s:i, s:o, s:s, s:s, s:o}",
        "zerosim_version", PACKAGE_VERSION,
        "num_params", (json_int_t)r->num_params,
        "world_size", r->world_size,
        "stage", cfg->stage,
        "precision", zs_dtype_name(cfg->precision),
        "steps", r->steps,
        "losses", losses,
        "param_hash", r->param_hash,
        "param_hash_algorithm", "XXH3_64bits of the fp32 parameters (master weights under mixed "
                                "precision) in layout order, unpadded, little-endian",
        "model", model);
    json_object_set_new(root, "micro_batch", json_integer(cfg->micro_batch));
    json_object_set_new(root, "grad_accum", json_integer(cfg->grad_accum));
    json_object_set_new(root, "train_batch_size", json_integer(cfg->train_batch_size));
    json_object_set_new(root, "seed", json_integer((json_int_t)cfg->seed));
    json_object_set_new(root, "optimizer", json_string(cfg->optimizer == ZS_OPT_ADAMW ? "adamw" : "sgd"));
    json_object_set_new(root, "optimizer_state_bytes_per_param",
                        json_integer(zs_optim_state_bytes(cfg->optimizer, cfg->precision)));
    json_object_set_new(root, "lrs", lrs);
    json_object_set_new(root, "grad_norms", norms);
    json_object_set_new(root, "loss_scales", scales);
    json_object_set_new(root, "skipped_steps", skipped);
    json_object_set_new(root, "step_seconds", secs);
    json_object_set_new(root, "loss_floor", zs_json_real(r->loss_floor));
    json_object_set_new(root, "seconds", zs_json_real(r->seconds));
    json_object_set_new(root, "memory", zs_report_memory(r));
    json_object_set_new(root, "deterministic", json_boolean(cfg->deterministic));
    json_object_set_new(root, "padded_params", json_integer((json_int_t)r->padded_params));
    if (cfg->stage == 3)
        json_object_set_new(root, "live_params_peak", json_integer((json_int_t)r->live_params_peak));
    if (r->hashes) {
        json_t *h = json_array();
        for (int s = 0; s < r->steps; s++)
            json_array_append_new(h, json_string(r->hashes[s]));
        json_object_set_new(root, "param_hashes", h);
    }

    char tmp[4096];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof tmp) {
        json_decref(root);
        ZS_FAIL("report path too long: %s", path);
    }
    int rc = json_dump_file(root, tmp, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
    json_decref(root);
    if (rc != 0) {
        int err = errno;
        unlink(tmp);
        ZS_FAIL("cannot write report %s: %s; check that the directory exists and is writable",
                path, strerror(err ? err : EIO));
    }
    if (rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        ZS_FAIL("cannot write report %s: %s", path, strerror(err));
    }
    return 0;
}
