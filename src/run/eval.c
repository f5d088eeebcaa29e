/* zerosim — held-out loss of a model's parameters (see zerosim/eval.h). */
#include "zerosim/eval.h"
#include "zerosim/data.h"
#include "zerosim/error.h"
#include "zerosim/checkpoint.h"
#include "zerosim/zcfile.h"
#include "zerosim/mem.h"
#include "zerosim/quant.h"
#include "zerosim/quantfile.h"
#include "zerosim/weights.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include <math.h>
#include <stdlib.h>

/* Entry e of a quantized model in the ledger: its quantized tensor laid
 * out in one buffer of category quantized_weights, *t's arrays pointing
 * into it. */
static int zs_eval_hold_quant(zs_mem_t mem, const zs_quant_spec *q, const float *x, size_t rows,
                              size_t cols, zs_qtensor *t, void **buf)
{
    zs_qtensor tmp;
    ZS_TRY(zs_quant_tensor(q, x, rows, cols, &tmp));
    size_t bytes = zs_qtensor_bytes(&tmp);
    if (zs_mem_alloc(mem, ZS_MEM_QUANTIZED, bytes, buf)) {
        zs_qtensor_free(&tmp);
        return -1;
    }
    *t = tmp;
    char *p = *buf;
#define ZS_HOLD(field, n)                                                                   \
    do {                                                                                     \
        if (tmp.field) {                                                                     \
            memcpy(p, tmp.field, n);                                                         \
            t->field = (void *)p;                                                            \
            p += n;                                                                          \
        }                                                                                    \
    } while (0)
    ZS_HOLD(q, tmp.qbytes);
    ZS_HOLD(scale, tmp.ngroups * 4);
    ZS_HOLD(zero, tmp.ngroups);
    ZS_HOLD(scale_q, tmp.ngroups);
    ZS_HOLD(scale_scale, tmp.nsb * 4);
#undef ZS_HOLD
    zs_qtensor_free(&tmp);
    return 0;
}

/* The model's parameters in the ledger: fp32 entries (params) and, with q,
 * the linear weights quantized (quantized_weights) with one unit's
 * dequantized copy (workspace), as an inference would hold them. */
typedef struct {
    zs_mem_t mem;
    const zs_layout *lay;
    void **ebuf;                /* [n_entries] each entry's buffer */
    size_t *ebytes;
    zs_qtensor *qt;             /* [n_entries] (format NONE: fp32) */
    float *stage;               /* one unit's dequantized weights */
    size_t stage_elems;
} zs_eval_params;

static int zs_eval_params_load(zs_eval_params *ep, const zs_model *m, const float *params,
                               const zs_quant_spec *q)
{
    const zs_model_config *mc = zs_model_get_config(m);
    const zs_layout *lay = ep->lay;
    int n = lay->n_entries;
    ep->ebuf = calloc((size_t)n, sizeof *ep->ebuf);
    ep->ebytes = calloc((size_t)n, sizeof *ep->ebytes);
    ep->qt = calloc((size_t)n, sizeof *ep->qt);
    if (!ep->ebuf || !ep->ebytes || !ep->qt)
        ZS_FAIL("out of host memory for the held-out loss");
    for (int i = 0; i < n; i++) {
        const zs_param_entry *e = &lay->entries[i];
        size_t rows, cols;
        if (q && zs_quant_entry_matrix(mc, e, &rows, &cols)) {
            ZS_TRY(zs_eval_hold_quant(ep->mem, q, params + e->offset, rows, cols, &ep->qt[i],
                                      &ep->ebuf[i]));
            ep->ebytes[i] = zs_qtensor_bytes(&ep->qt[i]);
            continue;
        }
        ep->ebytes[i] = e->numel * 4;
        ZS_TRY(zs_mem_alloc(ep->mem, ZS_MEM_PARAMS, ep->ebytes[i], &ep->ebuf[i]));
        memcpy(ep->ebuf[i], params + e->offset, ep->ebytes[i]);
    }
    for (int u = 0; q && u < lay->n_layers; u++) { /* the largest unit's linear weights */
        int ids[ZS_MAX_USES_PUBLIC];
        int k = zs_model_unit_uses(m, u, ids, ZS_MAX_USES_PUBLIC);
        size_t elems = 0;
        for (int j = 0; j < k; j++)
            if (ep->qt[ids[j]].n)
                elems += ep->qt[ids[j]].n;
        if (elems > ep->stage_elems)
            ep->stage_elems = elems;
    }
    if (ep->stage_elems)
        ZS_TRY(zs_mem_alloc(ep->mem, ZS_MEM_WORKSPACE, ep->stage_elems * 4, (void **)&ep->stage));
    return 0;
}

/* P for unit u: fp32 entries in place, quantized ones dequantized into the stage. */
static void zs_eval_params_view(zs_eval_params *ep, const zs_model *m, int u, float **P)
{
    int ids[ZS_MAX_USES_PUBLIC];
    int k = zs_model_unit_uses(m, u, ids, ZS_MAX_USES_PUBLIC);
    size_t pos = 0;
    for (int j = 0; j < k; j++) {
        int i = ids[j];
        if (ep->qt[i].n) {
            zs_dequant_tensor(&ep->qt[i], ep->stage + pos);
            P[i] = ep->stage + pos;
            pos += ep->qt[i].n;
        } else {
            P[i] = ep->ebuf[i];
        }
    }
}

static void zs_eval_params_free(zs_eval_params *ep)
{
    for (int i = 0; ep->ebuf && i < ep->lay->n_entries; i++)
        zs_mem_free(ep->mem, ep->qt[i].n ? ZS_MEM_QUANTIZED : ZS_MEM_PARAMS, ep->ebuf[i],
                    ep->ebytes[i]);
    zs_mem_free(ep->mem, ZS_MEM_WORKSPACE, ep->stage, ep->stage_elems * 4);
    free(ep->ebuf);
    free(ep->ebytes);
    free(ep->qt); /* their arrays live in the ledger's buffers */
}

int zs_eval_loss(const zs_model_config *mc, uint64_t seed, const float *params,
                 const zs_quant_spec *q, int samples, int mb, double *loss, double *floor,
                 zs_mem_stats *stats)
{
    *loss = NAN;
    ZS_TRY(zs_model_check_runnable(mc));
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
    void *dx = NULL, *dtok = NULL, *dtgt = NULL;
    zs_eval_params ep = {.mem = mem};
    int gpt = mc->kind == ZS_MODEL_GPT;
    size_t per = gpt ? (size_t)mc->seq_len : 1;
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
    if (!rc) {
        ep.lay = zs_model_layout(m);
        rc = zs_eval_params_load(&ep, m, params, q);
    }
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
        zs_batch batch = {.b = mb, .tokens = dtok, .targets = dtgt, .x = dx};
        for (int first = 0; first + mb <= samples; first += mb, batches++) {
            if ((rc = zs_data_fill(data, ZS_EVAL_FIRST_SAMPLE + (uint64_t)first, mb, htok, htgt,
                                   hx)))
                break;
            if (gpt)
                zs_backend_copy_h2d(be, dtok, htok, tb);
            else
                zs_backend_copy_h2d(be, dx, hx, xb);
            zs_backend_copy_h2d(be, dtgt, htgt, tb);
            for (int u = 0; u < lay->n_layers; u++) {
                zs_eval_params_view(&ep, m, u, P);
                zs_model_forward_unit(m, be, u, P, acts, &batch);
            }
            sum += zs_model_loss(acts, be);
        }
        *loss = sum / batches;
        *floor = zs_data_loss_floor(data);
    }
    if (stats && mem)
        zs_mem_get_stats(mem, stats);
    free(P);
    zs_model_acts_destroy(acts);
    if (mem) {
        if (ep.lay)
            zs_eval_params_free(&ep);
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
