/* zerosim — weights in and out, the held-out loss and the per-step dumps
 * of a run (see oracle.h). */
#include "run/oracle.h"
#include "zerosim/data.h"
#include "zerosim/error.h"
#include "zerosim/eval.h"
#include "zerosim/io.h"
#include "zerosim/model.h"
#include "zerosim/quantfile.h"
#include "zerosim/weights.h"
#include "zerosim/zcfile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole model's parameter count, and a tp = 1 copy of its shapes. */
static zs_model_config zs_oracle_full_model(const zs_run_config *cfg, size_t *total)
{
    zs_model_config mc = cfg->model;
    mc.tp = mc.tp_rank = 0;
    mc.sequence_parallel = 0;
    mc.ckpt_blocks = 0;
    *total = zs_model_count_params(&mc);
    return mc;
}

/* A quantized or compressed file: its weights dequantized or decoded
 * (zs_model_src_load), which must be the run's model's. */
static int zs_oracle_init_from_model_file(zs_engine *e, const zs_run_config *cfg,
                                          const char *path)
{
    size_t total;
    zs_model_config mc = zs_oracle_full_model(cfg, &total);
    zs_model_src src;
    ZS_TRY(zs_model_src_load(path, "--init-from", mc.n_head, &src));
    int rc = src.mc.kind != mc.kind || src.n != total
                 ? zs_error_set("--init-from %s: %zu parameters of a%s %s, where the run's model "
                                "has %zu", path, src.n, src.mc.kind == ZS_MODEL_MLP ? "n" : "",
                                zs_model_kind_name(src.mc.kind), total)
                 : 0;
    if (!rc)
        rc = zs_engine_set_full_params(e, src.params);
    zs_model_src_free(&src);
    return rc;
}

int zs_oracle_init_from(zs_engine *e, const zs_run_config *cfg, const char *path)
{
    if (zs_qfile_is(path) || zs_dc_file_is(path))
        return zs_oracle_init_from_model_file(e, cfg, path);
    size_t total;
    zs_model_config mc = zs_oracle_full_model(cfg, &total);
    float *full = malloc(total * sizeof(float) + 1);
    if (!full)
        ZS_FAIL("out of host memory reading %s (%zu parameters)", path, total);
    int rc = zs_weights_read(path, &mc, full);
    if (!rc)
        rc = zs_engine_set_full_params(e, full);
    free(full);
    return rc;
}

int zs_oracle_export(zs_engine *e, const zs_run_config *cfg, const char *path, int format,
                     uint64_t shard_bytes, int world_rank)
{
    size_t total;
    zs_model_config mc = zs_oracle_full_model(cfg, &total);
    float *full = world_rank == 0 ? malloc(total * sizeof(float) + 1) : NULL;
    int rc = world_rank == 0 && !full
                 ? zs_error_set("out of host memory gathering %zu parameters", total) : 0;
    int grc = zs_engine_get_full_params(e, full); /* every rank takes part */
    if (!rc)
        rc = grc;
    if (!rc && world_rank == 0)
        rc = zs_weights_write_sharded(path, (zs_weights_format)format, &mc, full, shard_bytes);
    free(full);
    return rc;
}

/* ---- dumps ------------------------------------------------------------------------ */

static int zs_oracle_scalar(zs_st_writer *w, const char *name)
{
    return zs_st_writer_add(w, name, ZS_ST_F32, 0, NULL);
}

/* Rank 0: the file of one step from what was gathered (grads NULL for the
 * initial state, and then no tokens either). */
static int zs_oracle_dump_write(const zs_run_config *cfg, const zs_model_config *mc,
                                const char *path, int step, const zs_step_info *info,
                                const int32_t *tok, const int32_t *tgt, int G,
                                const float *grads, const float *params)
{
    zs_st_writer w;
    ZS_TRY(zs_st_writer_open(&w, path));
    char v[64];
    int rc = zs_st_writer_meta(&w, "producer", "zerosim");
    snprintf(v, sizeof v, "%d", step);
    if (!rc)
        rc = zs_st_writer_meta(&w, "step", v);
    if (!rc)
        rc = zs_st_writer_meta(&w, "names", mc->kind == ZS_MODEL_LLAMA
                                                ? "huggingface-llama (param./grad. prefixes)"
                                                : "huggingface-gpt2 (param./grad. prefixes)");
    snprintf(v, sizeof v, "%d", cfg->stage);
    if (!rc)
        rc = zs_st_writer_meta(&w, "zero_stage", v);
    if (!rc)
        rc = zs_st_writer_meta(&w, "precision", zs_dtype_name(cfg->precision));
    uint64_t bt[2] = {(uint64_t)G, (uint64_t)mc->seq_len};
    if (grads) {
        if (!rc)
            rc = zs_st_writer_add(&w, "tokens", ZS_ST_I32, 2, bt);
        if (!rc)
            rc = zs_st_writer_add(&w, "targets", ZS_ST_I32, 2, bt);
        static const char *const sc[4] = {"lr", "loss", "grad_norm", "loss_scale"};
        for (int i = 0; i < 4 && !rc; i++)
            rc = zs_oracle_scalar(&w, sc[i]);
        if (!rc)
            rc = zs_gpt_st_declare(&w, "grad.", mc);
    }
    if (!rc)
        rc = zs_gpt_st_declare(&w, "param.", mc);
    if (grads) {
        size_t n = (size_t)G * (size_t)mc->seq_len * sizeof(int32_t);
        float s[4] = {info->lr, info->loss, info->grad_norm, info->loss_scale};
        if (!rc)
            rc = zs_st_writer_data(&w, tok, n);
        if (!rc)
            rc = zs_st_writer_data(&w, tgt, n);
        if (!rc)
            rc = zs_st_writer_data(&w, s, sizeof s);
        if (!rc)
            rc = zs_gpt_st_data(&w, mc, grads);
    }
    if (!rc)
        rc = zs_gpt_st_data(&w, mc, params);
    if (rc) {
        zs_st_writer_abort(&w);
        return rc;
    }
    return zs_st_writer_commit(&w, NULL);
}

int zs_oracle_dump(zs_engine *e, const zs_run_config *cfg, const char *dir, int step,
                   const zs_step_info *info, int world_rank)
{
    size_t total;
    zs_model_config mc = zs_oracle_full_model(cfg, &total);
    int root = world_rank == 0, G = cfg->train_batch_size, T = mc.seq_len;
    float *params = root ? malloc(total * sizeof(float) + 1) : NULL;
    float *grads = root && step > 0 ? malloc(total * sizeof(float) + 1) : NULL;
    int32_t *tok = root && step > 0 ? malloc((size_t)G * T * sizeof(int32_t)) : NULL;
    int32_t *tgt = root && step > 0 ? malloc((size_t)G * T * sizeof(int32_t)) : NULL;
    int rc = 0;
    if (root && (!params || (step > 0 && (!grads || !tok || !tgt))))
        rc = zs_error_set("out of host memory for the dump of step %d", step);
    /* every rank takes part in both gathers, whatever rc is */
    int grc = step > 0 ? zs_engine_get_full_grads(e, info->loss_scale, grads) : 0;
    int prc = zs_engine_get_full_params(e, params);
    if (!rc)
        rc = grc ? grc : prc;
    if (!rc && root) {
        char path[4200];
        if (step > 0) /* the step's global batch: samples (step-1)*G .. */
            rc = zs_data_fill(zs_engine_data(e), (uint64_t)(step - 1) * (uint64_t)G, G, tok,
                              tgt, NULL);
        if (!rc && (size_t)snprintf(path, sizeof path, "%s/step_%06d.safetensors", dir, step) >=
                       sizeof path)
            rc = zs_error_set("--dump-dir %s: the path is too long", dir);
        if (!rc)
            rc = zs_oracle_dump_write(cfg, &mc, path, step, info, tok, tgt, G, grads, params);
    }
    free(params);
    free(grads);
    free(tok);
    free(tgt);
    return rc;
}

/* ---- the held-out loss -------------------------------------------------------------- */

struct zs_oracle_val {
    zs_data *data;
    zs_backend_t be;
    int samples;      /* the held-out set: samples 0 .. samples-1 */
};

int zs_oracle_val_create(const zs_run_config *cfg, const char *path, zs_backend_t be,
                         int global_batch, int world_rank, zs_oracle_val **out)
{
    *out = NULL;
    if (world_rank != 0)
        return 0;
    zs_oracle_val *v = calloc(1, sizeof *v);
    if (!v)
        ZS_FAIL("out of host memory for --val-data");
    size_t total;
    zs_model_config mc = zs_oracle_full_model(cfg, &total);
    if (zs_data_create_file(&mc, cfg->seed, path, &v->data)) {
        free(v);
        return -1;
    }
    v->be = be;
    v->samples = global_batch;
    *out = v;
    return 0;
}

int zs_oracle_val_byte_level(const zs_oracle_val *v)
{
    return v && zs_data_tokens_are_bytes(v->data);
}

void zs_oracle_val_destroy(zs_oracle_val *v)
{
    if (!v)
        return;
    zs_data_destroy(v->data);
    free(v);
}

/* Rank 0: the mean loss of the held-out samples under params (host), in
 * micro-batches of mb, on a tp = 1 model with its own accounting (not the
 * run's: the evaluation is a report, beside the device's categories). */
static int zs_oracle_val_forward(zs_oracle_val *v, const zs_model_config *mc, int mb,
                                 const float *params, size_t total, double *loss)
{
    zs_model *m = NULL;
    zs_acts *acts = NULL;
    zs_mem_t mem = zs_mem_create(v->be, 0, 0);
    void *dp = NULL, *dtok = NULL, *dtgt = NULL;
    size_t tb = (size_t)mb * (size_t)mc->seq_len * sizeof(int32_t);
    int32_t *htok = malloc(tb), *htgt = malloc(tb);
    float **P = NULL;
    int rc = !mem || !htok || !htgt ? zs_error_set("out of host memory for the held-out loss") : 0;
    if (!rc)
        rc = zs_model_create(mc, &m);
    if (!rc)
        rc = zs_mem_alloc(mem, ZS_MEM_PARAMS, total * sizeof(float), &dp);
    if (!rc)
        rc = zs_mem_alloc(mem, ZS_MEM_WORKSPACE, tb, &dtok);
    if (!rc)
        rc = zs_mem_alloc(mem, ZS_MEM_WORKSPACE, tb, &dtgt);
    if (!rc)
        rc = zs_model_acts_create(m, mem, mb, &acts);
    const zs_layout *lay = rc ? NULL : zs_model_layout(m);
    if (!rc && !(P = calloc((size_t)lay->n_entries, sizeof *P)))
        rc = zs_error_set("out of host memory for the held-out loss");
    double sum = 0.0;
    int batches = 0;
    if (!rc) {
        zs_backend_copy_h2d(v->be, dp, params, total * sizeof(float));
        for (int i = 0; i < lay->n_entries; i++)
            P[i] = (float *)dp + lay->entries[i].offset;
        zs_batch batch = {.b = mb, .tokens = dtok, .targets = dtgt, .x = NULL};
        for (int first = 0; first + mb <= v->samples; first += mb, batches++) {
            if ((rc = zs_data_fill(v->data, (uint64_t)first, mb, htok, htgt, NULL)))
                break;
            zs_backend_copy_h2d(v->be, dtok, htok, tb);
            zs_backend_copy_h2d(v->be, dtgt, htgt, tb);
            for (int u = 0; u < lay->n_layers; u++)
                zs_model_forward_unit(m, v->be, u, P, acts, &batch);
            sum += zs_model_loss(acts, v->be);
        }
    }
    *loss = batches ? sum / batches : NAN;
    free(P);
    zs_model_acts_destroy(acts);
    if (mem) {
        if (dp)
            zs_mem_free(mem, ZS_MEM_PARAMS, dp, total * sizeof(float));
        if (dtok)
            zs_mem_free(mem, ZS_MEM_WORKSPACE, dtok, tb);
        if (dtgt)
            zs_mem_free(mem, ZS_MEM_WORKSPACE, dtgt, tb);
        zs_mem_destroy(mem);
    }
    zs_model_destroy(m);
    free(htok);
    free(htgt);
    return rc;
}

/* Rank 0, an image set: its held-out and test parts, whole. */
#define ZS_ORACLE_IMAGE_BATCH 500
static int zs_oracle_val_images(zs_oracle_val *v, const zs_model_config *mc, const float *params,
                                zs_eval_score *heldout, zs_eval_score *test)
{
    ZS_TRY(zs_eval_split(mc, v->data, ZS_DATA_HELDOUT, params, NULL, ZS_ORACLE_IMAGE_BATCH,
                         heldout, NULL));
    return zs_eval_split(mc, v->data, ZS_DATA_TEST, params, NULL, ZS_ORACLE_IMAGE_BATCH, test,
                         NULL);
}

int zs_oracle_val_loss(zs_oracle_val *v, zs_engine *e, const zs_run_config *cfg, int world_rank,
                       double *loss, zs_eval_score *heldout, zs_eval_score *test)
{
    heldout->loss = heldout->accuracy = test->loss = test->accuracy = NAN;
    heldout->samples = test->samples = 0;
    size_t total;
    zs_model_config mc = zs_oracle_full_model(cfg, &total);
    int root = world_rank == 0;
    float *full = root ? malloc(total * sizeof(float) + 1) : NULL;
    int rc = root && !full ? zs_error_set("out of host memory for the held-out loss") : 0;
    int grc = zs_engine_get_full_params(e, full);
    if (!rc)
        rc = grc;
    *loss = NAN;
    if (!rc && root && v && mc.kind == ZS_MODEL_MLP) {
        rc = zs_oracle_val_images(v, &mc, full, heldout, test);
        *loss = heldout->loss;
    } else if (!rc && root && v) {
        rc = zs_oracle_val_forward(v, &mc, cfg->micro_batch, full, total, loss);
    }
    free(full);
    return rc;
}
