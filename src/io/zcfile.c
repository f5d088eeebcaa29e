/* zerosim — the Deep Compression file: writer and reader (see
 * zerosim/zcfile.h). */
#include "zerosim/zcfile.h"
#include "zerosim/error.h"
#include "zerosim/huffman.h"
#include "zerosim/io.h"
#include "zerosim/quant.h"
#include "zerosim/quantfile.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define DC_FORMAT "zerosim-compressed"
#define DC_VERSION 1

void zs_dc_hash(const float *p, size_t n, char out[17])
{
    snprintf(out, 17, "%016llx", (unsigned long long)XXH3_64bits(p, n * sizeof(float)));
}

void zs_dc_result_free(zs_dc_result *r)
{
    free(r->layers);
    r->layers = NULL;
    r->nlayers = 0;
}

/* ---- writing ------------------------------------------------------------------- */

static int zs_dc_add(zs_st_writer *w, const char *name, const char *suf, zs_st_dtype dt,
                     uint64_t n)
{
    char nm[128];
    snprintf(nm, sizeof nm, "%s%s", name, suf);
    return zs_st_writer_add(w, nm, dt, 1, &n);
}

int zs_dc_write(const char *path, const zs_dc_file *d, zs_dc_result *r)
{
    char buf[64], *model = zs_model_config_json(d->mc);
    if (!model)
        ZS_FAIL("out of host memory writing %s", path);
    zs_st_writer w;
    int rc = zs_st_writer_open(&w, path), open = !rc;
    if (!rc)
        rc = zs_st_writer_meta(&w, "format", DC_FORMAT);
    snprintf(buf, sizeof buf, "%d", DC_VERSION);
    if (!rc)
        rc = zs_st_writer_meta(&w, "version", buf);
    if (!rc)
        rc = zs_st_writer_meta(&w, "model", model);
    free(model);
    snprintf(buf, sizeof buf, "%" PRIu64, d->seed);
    if (!rc)
        rc = zs_st_writer_meta(&w, "seed", buf);
    snprintf(buf, sizeof buf, "%d", d->bits);
    if (!rc)
        rc = zs_st_writer_meta(&w, "bits", buf);
    snprintf(buf, sizeof buf, "%d", d->index_bits);
    if (!rc)
        rc = zs_st_writer_meta(&w, "index_bits", buf);
    int K = 1 << d->bits, R = 1 << d->index_bits, l = 0;
    for (int i = 0; i < d->layout->n_entries && !rc; i++) {
        const zs_param_entry *e = &d->layout->entries[i];
        if (l < d->ncoded && d->coded_entries[l] == i) {
            const zs_dc_coded *c = &d->coded[l++];
            if (!(rc = zs_dc_add(&w, e->name, ".codebook", ZS_ST_F32, (uint64_t)K)) &&
                !(rc = zs_dc_add(&w, e->name, ".counts", ZS_ST_U64, 2)) &&
                !(rc = zs_dc_add(&w, e->name, ".idx_lengths", ZS_ST_U8, (uint64_t)K + 1)) &&
                !(rc = zs_dc_add(&w, e->name, ".gap_lengths", ZS_ST_U8, (uint64_t)R)) &&
                !(rc = zs_dc_add(&w, e->name, ".idx_code", ZS_ST_U8, (c->idx_nbits + 7) / 8)))
                rc = zs_dc_add(&w, e->name, ".gap_code", ZS_ST_U8, (c->gap_nbits + 7) / 8);
        } else {
            rc = zs_dc_add(&w, e->name, "", ZS_ST_F32, e->numel);
        }
    }
    l = 0;
    for (int i = 0; i < d->layout->n_entries && !rc; i++) {
        const zs_param_entry *e = &d->layout->entries[i];
        if (l < d->ncoded && d->coded_entries[l] == i) {
            const zs_dc_coded *c = &d->coded[l++];
            uint64_t counts[2] = {c->entries, c->nonzeros};
            if (!(rc = zs_st_writer_data(&w, c->codebook, (size_t)K * 4)) &&
                !(rc = zs_st_writer_data(&w, counts, sizeof counts)) &&
                !(rc = zs_st_writer_data(&w, c->idx_lengths, (size_t)K + 1)) &&
                !(rc = zs_st_writer_data(&w, c->gap_lengths, (size_t)R)) &&
                !(rc = zs_st_writer_data(&w, c->idx_code, (size_t)((c->idx_nbits + 7) / 8))))
                rc = zs_st_writer_data(&w, c->gap_code, (size_t)((c->gap_nbits + 7) / 8));
        } else {
            rc = zs_st_writer_data(&w, d->params + e->offset, e->numel * 4);
            r->other_bytes += e->numel * 4;
        }
    }
    if (!rc) {
        r->compressed_bytes = w.total;
        open = 0;
        rc = zs_st_writer_commit(&w, NULL);
        r->file_bytes = w.f.bytes;
    }
    if (open)
        zs_st_writer_abort(&w);
    return rc;
}

/* ---- reading -------------------------------------------------------------------- */

int zs_dc_file_is(const char *path)
{
    zs_st_file f;
    if (zs_st_open(&f, path)) {
        zs_error_clear();
        return 0;
    }
    const char *fmt = zs_st_meta(&f, "format");
    int is = fmt && !strcmp(fmt, DC_FORMAT);
    zs_st_close(&f);
    return is;
}

/* Tensor NAME+suf of dtype dt: its element count into *n (checked against
 * want when want != 0) and its bytes into a malloc'd *out. */
static int zs_dc_get(const zs_st_file *f, const char *name, const char *suf, zs_st_dtype dt,
                     uint64_t want, void **out, uint64_t *n)
{
    char nm[128];
    snprintf(nm, sizeof nm, "%s%s", name, suf);
    const zs_st_tensor *t = zs_st_find(f, nm);
    *out = NULL;
    if (!t)
        ZS_FAIL("%s: tensor %s is missing; the file is damaged or not of this model", f->path, nm);
    uint64_t k = zs_st_numel(t);
    if (t->dtype != dt || (want && k != want))
        ZS_FAIL("%s: tensor %s is %s of %" PRIu64 " elements, expected %s%s; the file is "
                "damaged", f->path, nm, zs_st_dtype_name(t->dtype), k, zs_st_dtype_name(dt),
                want ? " of another size" : "");
    if (!(*out = malloc((size_t)k * zs_st_dtype_size(dt) + 1)))
        ZS_FAIL("out of host memory reading %s", f->path);
    if (n)
        *n = k;
    return zs_st_read(f, t, 0, *out, (size_t)k * zs_st_dtype_size(dt));
}

/* Decode entry e's weights into w. */
static int zs_dc_decode(const zs_st_file *f, const zs_param_entry *e, int K, int R, float *w,
                        zs_dc_layer *y)
{
    void *cb = NULL, *cnt = NULL, *li = NULL, *lg = NULL, *ci = NULL, *cg = NULL;
    uint64_t ni, ng;
    zs_huff hi = {0}, hg = {0};
    int rc = zs_dc_get(f, e->name, ".codebook", ZS_ST_F32, (uint64_t)K, &cb, NULL);
    if (!rc)
        rc = zs_dc_get(f, e->name, ".counts", ZS_ST_U64, 2, &cnt, NULL);
    if (!rc)
        rc = zs_dc_get(f, e->name, ".idx_lengths", ZS_ST_U8, (uint64_t)K + 1, &li, NULL);
    if (!rc)
        rc = zs_dc_get(f, e->name, ".gap_lengths", ZS_ST_U8, (uint64_t)R, &lg, NULL);
    if (!rc)
        rc = zs_dc_get(f, e->name, ".idx_code", ZS_ST_U8, 0, &ci, &ni);
    if (!rc)
        rc = zs_dc_get(f, e->name, ".gap_code", ZS_ST_U8, 0, &cg, &ng);
    if (!rc && (zs_huff_build(&hi, li, K + 1) || zs_huff_build(&hg, lg, R)))
        rc = zs_error_set("%s: %s's Huffman code lengths are not a code (%s); the file is damaged",
                          f->path, e->name, zs_error_msg());
    memset(w, 0, e->numel * 4);
    uint64_t entries = rc ? 0 : ((uint64_t *)cnt)[0], nz = 0;
    zs_bitr ri = {ci, (size_t)ni * 8, 0}, rg = {cg, (size_t)ng * 8, 0};
    long long pos = -1;
    for (uint64_t k = 0; k < entries && !rc; k++) {
        int s = zs_huff_get(&ri, &hi), g = zs_huff_get(&rg, &hg);
        if (s < 0 || g < 0) {
            rc = zs_error_set("%s: %s's code streams end before its %" PRIu64 " entries; the file "
                              "is damaged", f->path, e->name, entries);
            break;
        }
        pos += g + 1;
        if (pos >= (long long)e->numel) {
            rc = zs_error_set("%s: %s's relative indices run past its %zu weights; the file is "
                              "damaged", f->path, e->name, e->numel);
            break;
        }
        if (s < K) {
            w[pos] = ((float *)cb)[s];
            nz++;
        }
    }
    if (!rc && nz != ((uint64_t *)cnt)[1])
        rc = zs_error_set("%s: %s decodes to %" PRIu64 " nonzeros, its counts say %" PRIu64
                          "; the file is damaged", f->path, e->name, nz, ((uint64_t *)cnt)[1]);
    if (!rc) {
        snprintf(y->name, sizeof y->name, "%s", e->name);
        y->numel = e->numel;
        y->nonzeros = nz;
        y->entries = entries;
        y->idx_bits = ri.pos;
        y->gap_bits = rg.pos;
        y->codebook_bits = 32 * (uint64_t)K;
        y->table_bits = 8 * ((uint64_t)K + 1 + (uint64_t)R + 16);
    }
    zs_huff_free(&hi);
    zs_huff_free(&hg);
    free(cb), free(cnt), free(li), free(lg), free(ci), free(cg);
    return rc;
}

static int zs_dc_meta_int(const zs_st_file *f, const char *key, long lo, long hi, long *out)
{
    const char *s = zs_st_meta(f, key);
    char *end = NULL;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || end == s || *end || v < lo || v > hi)
        ZS_FAIL("%s: the metadata's %s is missing or out of range; the file is damaged", f->path,
                key);
    *out = v;
    return 0;
}

int zs_dc_read(const char *path, zs_model_config *mc, uint64_t *seed, float **params,
               zs_dc_result *r)
{
    zs_st_file f;
    *params = NULL;
    memset(r, 0, sizeof *r);
    ZS_TRY(zs_st_open(&f, path));
    const char *fmt = zs_st_meta(&f, "format"), *sd = zs_st_meta(&f, "seed");
    long ver = 0, bits = 0, ib = 0;
    char *end = NULL;
    int rc = 0;
    if (!fmt || strcmp(fmt, DC_FORMAT))
        rc = zs_error_set("%s is not a zerosim compressed file (its metadata has no format "
                          "\"%s\")", path, DC_FORMAT);
    if (!rc && !(rc = zs_dc_meta_int(&f, "version", 1, INT_MAX, &ver)) && ver != DC_VERSION)
        rc = zs_error_set("%s: compressed file version %ld; this zerosim reads version %d", path,
                          ver, DC_VERSION);
    if (!rc && (!sd || !(*seed = strtoull(sd, &end, 10), end != sd && !*end)))
        rc = zs_error_set("%s: the metadata's seed is missing or malformed; the file is damaged",
                          path);
    if (!rc)
        rc = zs_dc_meta_int(&f, "bits", 1, 16, &bits);
    if (!rc)
        rc = zs_dc_meta_int(&f, "index_bits", 1, 16, &ib);
    if (!rc)
        rc = zs_model_config_from_json(zs_st_meta(&f, "model"), path, mc);
    zs_model *m = NULL;
    if (!rc)
        rc = zs_model_create(mc, &m);
    const zs_layout *lay = rc ? NULL : zs_model_layout(m);
    if (!rc && !(*params = malloc(lay->num_params * 4 + 1)))
        rc = zs_error_set("out of host memory reading %s", path);
    if (!rc && !(r->layers = calloc((size_t)lay->n_entries, sizeof *r->layers)))
        rc = zs_error_set("out of host memory reading %s", path);
    int expect = 0;
    for (int i = 0; !rc && i < lay->n_entries; i++) {
        const zs_param_entry *e = &lay->entries[i];
        size_t rows, cols;
        if (zs_quant_entry_matrix(mc, e, &rows, &cols)) {
            rc = zs_dc_decode(&f, e, 1 << bits, 1 << ib, *params + e->offset,
                              &r->layers[r->nlayers++]);
            expect += 6;
            continue;
        }
        void *v = NULL;
        rc = zs_dc_get(&f, e->name, "", ZS_ST_F32, e->numel, &v, NULL);
        if (!rc)
            memcpy(*params + e->offset, v, e->numel * 4);
        free(v);
        r->other_bytes += 4 * (uint64_t)e->numel;
        expect++;
    }
    if (!rc && f.n != expect)
        rc = zs_error_set("%s holds %d tensors, the model needs %d; the file is damaged or of "
                          "another model", path, f.n, expect);
    if (!rc) {
        r->dense_bytes = 4 * (uint64_t)lay->num_params;
        r->file_bytes = f.file_bytes;
        r->compressed_bytes = f.file_bytes - f.data_start;
        zs_dc_hash(*params, lay->num_params, r->param_hash);
    } else {
        free(*params);
        *params = NULL;
        zs_dc_result_free(r);
    }
    zs_model_destroy(m);
    zs_st_close(&f);
    return rc;
}
