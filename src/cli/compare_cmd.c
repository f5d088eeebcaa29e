/* zerosim — `zerosim compare A B [--rtol X] [--atol Y]`: two dumps or two
 * weight files, tensor by tensor.
 *
 * A file is safetensors (any numeric dtype, compared as doubles; one file,
 * or a sharded checkpoint given by its .index.json or folder) or llm.c's
 * gpt2 .bin (its tensors under Hugging Face's GPT-2 names, as zerosim
 * exports them, so a .bin compares with a .safetensors). A tensor is within
 * tolerance when every element has |a - b| <= atol + rtol * |b|
 * (numpy.allclose's rule, b the second file), NaN only against NaN. Exit 0
 * when every tensor is in both files, of the same shape and within
 * tolerance; 1 when any is not (each named); 2 for a usage or file error.
 */
#include "compare_cmd.h"
#include "zerosim/error.h"
#include "zerosim/io.h"
#include "zerosim/model.h"
#include "zerosim/weights.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const zs_compare_usage =
    "usage: zerosim compare A B [--rtol X] [--atol Y]\n"
    "\n"
    "Compare two files tensor by tensor: dumps (train --dump-dir), weight files\n"
    "(safetensors, or llm.c's .bin under GPT-2's names) or any safetensors files;\n"
    "a sharded checkpoint by its model.safetensors.index.json or its folder.\n"
    "Prints per tensor the largest absolute and relative error and whether every\n"
    "element has |a - b| <= atol + rtol * |b| (numpy.allclose's rule). Exit 1 when\n"
    "a tensor is not within tolerance, is missing from one file or has another\n"
    "shape.\n"
    "  --rtol X                 relative tolerance (1e-5)\n"
    "  --atol Y                 absolute tolerance (1e-8)\n"
    "  --prefix P               only the tensors whose names start with P (in both\n"
    "                           files; e.g. grad. or param. of a dump)\n";

/* One file's tensors, read one at a time as doubles. */
typedef struct {
    const char *path;
    int llmc;                 /* an llm.c .bin: its tensors from params */
    zs_st_set st;             /* safetensors: one file or a sharded checkpoint */
    zs_gpt_tensor *gt;        /* llm.c: the tensors and the parameters */
    int ngt;
    float *params;
    zs_name_index by_name;    /* llm.c: the tensors' names, for constant-time lookups */
} zs_cmp_src;

static const char *zs_cmp_name_of(const void *s, int i);

static int zs_cmp_open(zs_cmp_src *s, const char *path)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        ZS_FAIL("%s: %s", path, strerror(errno));
    int32_t magic = 0;
    ssize_t got = read(fd, &magic, sizeof magic);
    close(fd);
    s->llmc = got == (ssize_t)sizeof magic && magic == 20240326;
    if (!s->llmc) {
        return zs_st_set_open(&s->st, path);
    }
    zs_model_config mc;
    ZS_TRY(zs_weights_probe(path, &mc));
    ZS_TRY(zs_gpt_tensors(&mc, &s->gt, &s->ngt));
    ZS_TRY(zs_name_index_build(&s->by_name, s->ngt, zs_cmp_name_of, s, NULL));
    s->params = malloc(zs_model_count_params(&mc) * sizeof(float) + 1);
    if (!s->params)
        ZS_FAIL("out of host memory reading %s", path);
    return zs_weights_read(path, &mc, s->params);
}

static void zs_cmp_close(zs_cmp_src *s)
{
    if (!s->llmc && s->st.path)
        zs_st_set_close(&s->st);
    free(s->gt);
    free(s->params);
    zs_name_index_free(&s->by_name);
}

static int zs_cmp_count(const zs_cmp_src *s) { return s->llmc ? s->ngt : s->st.n; }
static const char *zs_cmp_name(const zs_cmp_src *s, int i)
{
    return s->llmc ? s->gt[i].name : zs_st_set_tensor(&s->st, i)->name;
}


static const char *zs_cmp_name_of(const void *s, int i) { return zs_cmp_name(s, i); }

static int zs_cmp_find(const zs_cmp_src *s, const char *name)
{
    if (!s->llmc)
        return zs_st_set_find(&s->st, name);
    return zs_name_index_find(&s->by_name, name, zs_cmp_name_of, s);
}

/* Shape of tensor i as text, and its element count. */
static uint64_t zs_cmp_shape(const zs_cmp_src *s, int i, char *buf, size_t n)
{
    int nd = s->llmc ? s->gt[i].ndim : zs_st_set_tensor(&s->st, i)->ndim;
    const uint64_t *sh = s->llmc ? s->gt[i].shape : zs_st_set_tensor(&s->st, i)->shape;
    uint64_t numel = 1;
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < nd; d++) {
        numel *= sh[d];
        if (k < n)
            k += (size_t)snprintf(buf + k, n - k, "%s%llu", d ? "," : "", (unsigned long long)sh[d]);
    }
    if (k < n)
        snprintf(buf + k, n - k, "]");
    return numel;
}

static double zs_cmp_half(uint16_t h, int bf16)
{
    if (bf16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    int ex = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v = ex == 0 ? ldexp(man, -24) : ex == 31 ? (man ? NAN : INFINITY)
                                                    : ldexp(man | 0x400, ex - 25);
    return (h & 0x8000) ? -v : v;
}

/* Tensor i's values as doubles (malloc'd). */
static int zs_cmp_read(const zs_cmp_src *s, int i, uint64_t numel, double **out)
{
    *out = malloc((size_t)numel * sizeof(double) + 1);
    if (!*out)
        ZS_FAIL("out of host memory reading %s", s->path);
    double *v = *out;
    if (s->llmc) {
        float *f = malloc((size_t)numel * sizeof(float) + 1);
        if (!f)
            ZS_FAIL("out of host memory reading %s", s->path);
        zs_gpt_tensor_get(&s->gt[i], s->params, f);
        for (uint64_t k = 0; k < numel; k++)
            v[k] = f[k];
        free(f);
        return 0;
    }
    const zs_st_tensor *t = zs_st_set_tensor(&s->st, i);
    size_t es = zs_st_dtype_size(t->dtype), bytes = (size_t)numel * es;
    unsigned char *raw = malloc(bytes + 1);
    if (!raw)
        ZS_FAIL("out of host memory reading %s", s->path);
    int rc = zs_st_set_read(&s->st, i, 0, raw, bytes);
    for (uint64_t k = 0; k < numel && !rc; k++) {
        const unsigned char *p = raw + k * es;
        switch (t->dtype) {
        case ZS_ST_F32: { float x; memcpy(&x, p, 4); v[k] = x; break; }
        case ZS_ST_F64: memcpy(&v[k], p, 8); break;
        case ZS_ST_F16: case ZS_ST_BF16: {
            uint16_t h;
            memcpy(&h, p, 2);
            v[k] = zs_cmp_half(h, t->dtype == ZS_ST_BF16);
            break;
        }
        case ZS_ST_I64: { int64_t x; memcpy(&x, p, 8); v[k] = (double)x; break; }
        case ZS_ST_I32: { int32_t x; memcpy(&x, p, 4); v[k] = x; break; }
        case ZS_ST_I16: { int16_t x; memcpy(&x, p, 2); v[k] = x; break; }
        case ZS_ST_I8: v[k] = (int8_t)p[0]; break;
        case ZS_ST_U8: case ZS_ST_BOOL: v[k] = p[0]; break;
        case ZS_ST_U16: { uint16_t x; memcpy(&x, p, 2); v[k] = x; break; }
        case ZS_ST_U32: { uint32_t x; memcpy(&x, p, 4); v[k] = x; break; }
        case ZS_ST_U64: { uint64_t x; memcpy(&x, p, 8); v[k] = (double)x; break; }
        default: rc = zs_error_set("%s: tensor %s has a dtype zerosim cannot compare", s->path,
                                   t->name);
        }
    }
    free(raw);
    return rc;
}

/* The largest errors of b against a and whether all are within tolerance. */
static int zs_cmp_values(const double *a, const double *b, uint64_t n, double rtol, double atol,
                         double *max_abs, double *max_rel)
{
    int ok = 1;
    *max_abs = *max_rel = 0.0;
    for (uint64_t k = 0; k < n; k++) {
        if (isnan(a[k]) || isnan(b[k])) {
            if (!(isnan(a[k]) && isnan(b[k]))) {
                ok = 0;
                *max_abs = *max_rel = NAN;
            }
            continue;
        }
        if (a[k] == b[k]) /* infinities of one sign too */
            continue;
        double d = fabs(a[k] - b[k]), rel = b[k] != 0.0 ? d / fabs(b[k]) : INFINITY;
        if (!(d <= atol + rtol * fabs(b[k])))
            ok = 0;
        if (d > *max_abs || isnan(d))
            *max_abs = d;
        if (rel > *max_rel)
            *max_rel = rel;
    }
    return ok;
}

static const char *zs_cmp_prefix = "";

static int zs_cmp_wanted(const char *name)
{
    return !strncmp(name, zs_cmp_prefix, strlen(zs_cmp_prefix));
}

static int zs_compare_files(const char *pa, const char *pb, double rtol, double atol, int *bad)
{
    zs_cmp_src a, b;
    *bad = 0;
    if (zs_cmp_open(&a, pa)) {
        zs_cmp_close(&a);
        return -1;
    }
    if (zs_cmp_open(&b, pb)) {
        zs_cmp_close(&a);
        zs_cmp_close(&b);
        return -1;
    }
    if (zs_cmp_prefix[0])
        printf("# the tensors named %s...\n", zs_cmp_prefix);
    printf("# A = %s\n# B = %s\n# rtol %g, atol %g: within when |A - B| <= atol + rtol * |B| "
           "for every element\n", pa, pb, rtol, atol);
    printf("# %-38s %-16s %12s %12s %s\n", "tensor", "shape", "max_abs_err", "max_rel_err",
           "result");
    int rc = 0, n_ok = 0;
    for (int i = 0; i < zs_cmp_count(&a) && !rc; i++) {
        const char *name = zs_cmp_name(&a, i);
        if (!zs_cmp_wanted(name))
            continue;
        int j = zs_cmp_find(&b, name);
        char sa[96], sb[96];
        uint64_t na = zs_cmp_shape(&a, i, sa, sizeof sa);
        if (j < 0) {
            printf("%-40s %-16s %12s %12s MISSING in B\n", name, sa, "-", "-");
            (*bad)++;
            continue;
        }
        zs_cmp_shape(&b, j, sb, sizeof sb);
        if (strcmp(sa, sb)) {
            printf("%-40s %-16s %12s %12s SHAPE differs: B has %s\n", name, sa, "-", "-", sb);
            (*bad)++;
            continue;
        }
        double *va = NULL, *vb = NULL, mabs, mrel;
        rc = zs_cmp_read(&a, i, na, &va);
        if (!rc)
            rc = zs_cmp_read(&b, j, na, &vb);
        if (!rc) {
            int ok = zs_cmp_values(va, vb, na, rtol, atol, &mabs, &mrel);
            printf("%-40s %-16s %12.4e %12.4e %s\n", name, sa, mabs, mrel, ok ? "ok" : "NOT within");
            n_ok += ok;
            *bad += !ok;
        }
        free(va);
        free(vb);
    }
    for (int j = 0; j < zs_cmp_count(&b) && !rc; j++)
        if (zs_cmp_wanted(zs_cmp_name(&b, j)) && zs_cmp_find(&a, zs_cmp_name(&b, j)) < 0) {
            char sb[96];
            zs_cmp_shape(&b, j, sb, sizeof sb);
            printf("%-40s %-16s %12s %12s MISSING in A\n", zs_cmp_name(&b, j), sb, "-", "-");
            (*bad)++;
        }
    if (!rc && n_ok + *bad == 0)
        rc = zs_error_set("no tensor of %s is named %s...", pa, zs_cmp_prefix);
    if (!rc)
        printf("# %d tensors within tolerance, %d not (or missing, or of another shape)\n",
               n_ok, *bad);
    zs_cmp_close(&a);
    zs_cmp_close(&b);
    return rc;
}

int zs_cmd_compare(int argc, char **argv)
{
    static const struct option opts[] = {
        {"rtol", required_argument, NULL, 'r'},
        {"atol", required_argument, NULL, 'a'},
        {"prefix", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    double tol[2] = {1e-5, 1e-8};
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (ch == 'h') {
            fputs(zs_compare_usage, stdout);
            return 0;
        }
        if (ch == 'p') {
            zs_cmp_prefix = optarg;
            continue;
        }
        if (ch == 'r' || ch == 'a') {
            char *end;
            errno = 0;
            double v = strtod(optarg, &end);
            if (end == optarg || *end || errno || !isfinite(v) || v < 0) {
                fprintf(stderr, "zerosim compare: --%s must be a number >= 0, got \"%s\"\n",
                        ch == 'r' ? "rtol" : "atol", optarg);
                return 2;
            }
            tol[ch == 'a'] = v;
            continue;
        }
        fprintf(stderr, "zerosim compare: %s %s (see zerosim compare --help)\n",
                optopt ? "option needs a value or is unknown:" : "unknown option",
                argv[optind - 1]);
        return 2;
    }
    if (argc - optind != 2) {
        fprintf(stderr, "zerosim compare: give two files, A and B (see zerosim compare --help)\n");
        return 2;
    }
    int bad;
    if (zs_compare_files(argv[optind], argv[optind + 1], tol[0], tol[1], &bad)) {
        fprintf(stderr, "zerosim compare: %s\n", zs_error_msg());
        return 2;
    }
    if (bad)
        fprintf(stderr, "zerosim compare: %d tensor%s of %s and %s not within rtol %g, atol %g "
                "(or missing, or of another shape)\n", bad, bad == 1 ? "" : "s", argv[optind],
                argv[optind + 1], tol[0], tol[1]);
    return bad ? 1 : 0;
}
