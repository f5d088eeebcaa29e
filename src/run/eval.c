/* zerosim — held-out loss of a model's parameters (see zerosim/eval.h). */
#include "zerosim/eval.h"
#include "zerosim/data.h"
#include "zerosim/error.h"
#include "zerosim/checkpoint.h"
#include "zerosim/deepcomp.h"
#include "zerosim/mem.h"
#include "zerosim/quantfile.h"
#include "zerosim/weights.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include <math.h>
#include <stdlib.h>

int zs_eval_loss(const zs_model_config *mc, uint64_t seed, const float *params, int samples,
                 int mb, double *loss, double *floor, size_t *bytes)
{
    *loss = NAN;
    if (mb < 1 || samples < mb || samples % mb)
        ZS_FAIL("held-out samples (%d) must be a positive multiple of the micro-batch (%d)",
                samples, mb);
    char err[256];
    zs_backend_t be = zs_backend_init("cpu", err, sizeof err);
    if (!be)
        ZS_FAIL("%s", err);
    zs_mem_t mem = zs_mem_create(be, 0, 0);
    zs_model *m = NULL;
    zs_data *data = NULL;
    zs_acts *acts = NULL;
    void *dp = NULL, *dx = NULL, *dtok = NULL, *dtgt = NULL;
    int gpt = mc->kind == ZS_MODEL_GPT;
    size_t per = gpt ? (size_t)mc->seq_len : 1, total = zs_model_count_params(mc);
    size_t tb = (size_t)mb * per * sizeof(int32_t);
    size_t xb = gpt ? 0 : (size_t)mb * (size_t)mc->input_dim * sizeof(float);
    int32_t *htok = malloc(tb + 1), *htgt = malloc(tb + 1);
    float *hx = malloc(xb + 1), **P = NULL;
    int rc = !mem || !htok || !htgt || !hx ? zs_error_set("out of host memory for the held-out loss")
                                           : 0;
    if (!rc)
        rc = zs_model_create(mc, &m);
    if (!rc)
        rc = zs_data_create(mc, seed, &data);
    if (!rc)
        rc = zs_mem_alloc(mem, ZS_MEM_PARAMS, total * sizeof(float), &dp);
    if (!rc)
        rc = zs_mem_alloc(mem, ZS_MEM_WORKSPACE, tb, &dtgt);
    if (!rc && gpt)
        rc = zs_mem_alloc(mem, ZS_MEM_WORKSPACE, tb, &dtok);
    if (!rc && !gpt)
        rc = zs_mem_alloc(mem, ZS_MEM_WORKSPACE, xb, &dx);
    if (!rc)
        rc = zs_model_acts_create(m, mem, mb, &acts);
    const zs_layout *lay = rc ? NULL : zs_model_layout(m);
    if (!rc && !(P = calloc((size_t)lay->n_entries, sizeof *P)))
        rc = zs_error_set("out of host memory for the held-out loss");
    double sum = 0.0;
    int batches = 0;
    if (!rc) {
        zs_backend_copy_h2d(be, dp, params, total * sizeof(float));
        for (int i = 0; i < lay->n_entries; i++)
            P[i] = (float *)dp + lay->entries[i].offset;
        zs_batch batch = {.b = mb, .tokens = dtok, .targets = dtgt, .x = dx};
        for (int first = 0; first + mb <= samples; first += mb, batches++) {
            zs_data_fill(data, ZS_EVAL_FIRST_SAMPLE + (uint64_t)first, mb, htok, htgt, hx);
            if (gpt)
                zs_backend_copy_h2d(be, dtok, htok, tb);
            else
                zs_backend_copy_h2d(be, dx, hx, xb);
            zs_backend_copy_h2d(be, dtgt, htgt, tb);
            for (int u = 0; u < lay->n_layers; u++)
                zs_model_forward_unit(m, be, u, P, acts, &batch);
            sum += zs_model_loss(acts, be);
        }
        *loss = sum / batches;
        *floor = zs_data_loss_floor(data);
    }
    if (bytes && mem) {
        zs_mem_stats st;
        zs_mem_get_stats(mem, &st);
        *bytes = st.total_peak;
    }
    free(P);
    zs_model_acts_destroy(acts);
    if (mem) {
        zs_mem_free(mem, ZS_MEM_PARAMS, dp, total * sizeof(float));
        zs_mem_free(mem, ZS_MEM_WORKSPACE, dtok, tb);
        zs_mem_free(mem, ZS_MEM_WORKSPACE, dtgt, tb);
        zs_mem_free(mem, ZS_MEM_WORKSPACE, dx, xb);
        zs_mem_destroy(mem);
    }
    zs_data_destroy(data);
    zs_model_destroy(m);
    zs_backend_release(be);
    free(htok);
    free(htgt);
    free(hx);
    return rc;
}

/* ---- a model from any file -------------------------------------------------------- */

void zs_model_src_free(zs_model_src *s)
{
    free(s->params);
    memset(s, 0, sizeof *s);
}

int zs_model_src_load(const char *path, const char *opt, int n_head, zs_model_src *s)
{
    memset(s, 0, sizeof *s);
    struct stat sb;
    if (stat(path, &sb) != 0)
        ZS_FAIL("%s %s: %s", opt, path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        s->kind = "checkpoint";
        s->has_seed = 1;
        return zs_ckpt_read_params(path, opt, &s->mc, &s->seed, &s->params, &s->n);
    }
    s->file_bytes = (uint64_t)sb.st_size;
    if (zs_qfile_is(path)) {
        zs_quant_spec q;
        zs_qfile_stats st;
        s->kind = "quantized";
        s->has_seed = 1;
        ZS_TRY(zs_qfile_read(path, &s->mc, &s->seed, &q, &s->params, &st));
        s->n = zs_model_count_params(&s->mc);
        return 0;
    }
    if (zs_dc_file_is(path)) {
        zs_dc_result r;
        s->kind = "compressed";
        s->has_seed = 1;
        ZS_TRY(zs_dc_read(path, &s->mc, &s->seed, &s->params, &r));
        zs_dc_result_free(&r);
        s->n = zs_model_count_params(&s->mc);
        return 0;
    }
    s->kind = "weights";
    ZS_TRY(zs_weights_probe(path, &s->mc));
    if (!s->mc.n_head)
        s->mc.n_head = n_head;
    if (!s->mc.n_head)
        ZS_FAIL("%s %s: the file does not say the number of heads: give --heads H", opt, path);
    ZS_TRY(zs_model_config_validate(&s->mc));
    s->n = zs_model_count_params(&s->mc);
    if (!(s->params = malloc(s->n * 4 + 1)))
        ZS_FAIL("out of host memory reading %s", path);
    if (zs_weights_read(path, &s->mc, s->params)) {
        zs_model_src_free(s);
        return -1;
    }
    return 0;
}
