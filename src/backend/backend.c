/* zerosim — public backend wrappers: check arguments cheaply, dispatch
 * through the table (backend_impl.h). Also the storage-type helpers and the
 * host-side fp32 <-> bf16/fp16 conversions, written with bit manipulation so
 * that every backend can reproduce them exactly. */
#include "build-config.h"
#include "backend/backend_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CUDA
#include <dlfcn.h>
#endif

#include "zerosim/error.h"

/* Always-on sanity check for programming errors (like an assert that NDEBUG
 * does not remove): print where and what, then abort. Only cheap conditions. */
#define ZS_BE_CHECK(cond)                                                        \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "zerosim: %s:%d: %s: check failed: %s\n", __FILE__,  \
                    __LINE__, __func__, #cond);                                  \
            abort();                                                             \
        }                                                                        \
    } while (0)

#define ZS_BE_VALID(be) ZS_BE_CHECK((be) != NULL && (be)->iface != NULL)
#define ZS_DTYPE_VALID(t) ZS_BE_CHECK((t) == ZS_DTYPE_F32 || (t) == ZS_DTYPE_BF16 || (t) == ZS_DTYPE_F16)

/* ---------------------------------------------------------------------------
 * registry
 * ------------------------------------------------------------------------- */

#ifdef HAVE_CUDA
/* The CUDA backend lives in a module of its own, zerosim_cuda.so, loaded on
 * first use: linked into libzerosim, the CUDA libraries' start-up (cuBLASLt's
 * initialisers, about half a second of CPU) delayed every process, also on
 * the CPU backend. The module is looked for beside the libzerosim that is
 * running (the build tree's .libs/, where libtool puts both), then in its
 * zerosim/ folder (an installed one: $(pkglibdir) = $(libdir)/zerosim);
 * ZEROSIM_CUDA_MODULE names another file. */
static int zs_backend_cuda_load(struct zs_backend *be, int device, char *err, size_t errlen)
{
    static void *handle;
    static int (*init)(struct zs_backend *, int, char *, size_t);
    if (init == NULL) {
        char paths[2][4096];
        int n = 0;
        const char *env = getenv("ZEROSIM_CUDA_MODULE");
        if (env != NULL && *env != '\0') {
            snprintf(paths[n++], sizeof paths[0], "%s", env);
        } else {
            Dl_info info;
            const char *lib = dladdr((void *)zs_backend_list, &info) && info.dli_fname
                                  ? info.dli_fname
                                  : "";
            const char *slash = strrchr(lib, '/');
            int dir = slash ? (int)(slash - lib) : 0;
            snprintf(paths[n++], sizeof paths[0], "%.*s%szerosim_cuda.so", dir, lib,
                     slash ? "/" : "");
            snprintf(paths[n++], sizeof paths[1], "%.*s%szerosim/zerosim_cuda.so", dir, lib,
                     slash ? "/" : "");
        }
        const char *why = "";
        for (int i = 0; i < n && handle == NULL; i++) {
            handle = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
            if (handle == NULL && i == 0)
                why = dlerror();
        }
        if (handle == NULL) {
            snprintf(err, errlen,
                     "--backend cuda: cannot load the CUDA backend's module (%s): %s; "
                     "reinstall zerosim, or set ZEROSIM_CUDA_MODULE to its zerosim_cuda.so",
                     paths[0], why);
            return -1;
        }
        *(void **)&init = dlsym(handle, "zs_backend_cuda_init");
        if (init == NULL) {
            snprintf(err, errlen, "--backend cuda: %s is not zerosim's CUDA module (%s)",
                     paths[0], dlerror());
            dlclose(handle);
            handle = NULL;
            return -1;
        }
    }
    return init(be, device, err, errlen);
}
#endif

/* The backends compiled into this build. A new backend adds a row here and its
 * name to ZS_BACKEND_LIST (guarded by its configure conditional). */
static const struct {
    const char *name;
    int (*init)(struct zs_backend *be, int device, char *err, size_t errlen);
} zs_backend_registry[] = {
    { "cpu", zs_backend_cpu_init },
    { "ref", zs_backend_ref_init }, /* portable: same bytes on every machine */
    { "cpu-staged", zs_backend_cpu_staged_init }, /* tests; not in the list */
#ifdef HAVE_CUDA
    { "cuda", zs_backend_cuda_load },
#endif
};
#ifdef HAVE_CUDA
#define ZS_BACKEND_LIST "cpu,ref,cuda"
#else
#define ZS_BACKEND_LIST "cpu,ref"
#endif

const char *zs_backend_list(void) { return ZS_BACKEND_LIST; }

/* Whether a backend filled every REQUIRED member of its table. */
static int zs_backend_iface_complete(const struct zs_backend_i *i)
{
    return i->name != NULL && i->alloc != NULL && i->dealloc != NULL && i->copy_h2d != NULL
        && i->copy_d2h != NULL && i->sgemm != NULL && i->add_bias != NULL
        && i->bias_backward != NULL && i->gelu_forward != NULL && i->gelu_backward != NULL
        && i->relu_forward != NULL && i->relu_backward != NULL
        && i->layernorm_forward != NULL && i->layernorm_backward != NULL
        && i->residual_forward != NULL && i->axpy != NULL && i->scale != NULL
        && i->embedding_forward != NULL && i->embedding_backward != NULL
        && i->attention_forward != NULL && i->attention_backward != NULL
        && i->rmsnorm_forward != NULL && i->rmsnorm_backward != NULL
        && i->swiglu_forward != NULL && i->swiglu_backward != NULL
        && i->rope_forward != NULL && i->rope_backward != NULL
        && i->attention_gqa_forward != NULL && i->attention_gqa_backward != NULL
        && i->softmax_xent_forward != NULL && i->softmax_xent_backward != NULL
        && i->convert_to_f32 != NULL && i->convert_from_f32 != NULL
        && i->accumulate_f32 != NULL && i->adamw_step != NULL && i->sgd_step != NULL
        && i->add_typed != NULL && i->to_fixed != NULL && i->add_i64 != NULL
        && i->from_fixed != NULL;
}

/* Copy the error just recorded with zs_error_set into the caller's err. */
static void zs_backend_copy_err(char *err, size_t errlen)
{
    if (err != NULL && errlen > 0)
        snprintf(err, errlen, "%s", zs_error_msg());
}

/* Create a backend by name; NULL and a reason in err when it cannot. */
zs_backend_t zs_backend_init(const char *name, char *err, size_t errlen)
{
    return zs_backend_init_device(name, 0, err, errlen);
}

zs_backend_t zs_backend_init_device(const char *name, int device, char *err, size_t errlen)
{
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (name == NULL) {
        zs_error_set("no backend name given (available: %s)", ZS_BACKEND_LIST);
        zs_backend_copy_err(err, errlen);
        return NULL;
    }
    size_t nreg = sizeof zs_backend_registry / sizeof zs_backend_registry[0];
    for (size_t i = 0; i < nreg; i++) {
        if (strcmp(name, zs_backend_registry[i].name) != 0)
            continue;
        struct zs_backend *be = calloc(1, sizeof *be);
        if (be == NULL) {
            zs_error_set("out of host memory creating backend '%s'", name);
            zs_backend_copy_err(err, errlen);
            return NULL;
        }
        if (zs_backend_registry[i].init(be, device, err, errlen) != 0) {
            zs_error_set("%s", err);
            free(be);
            return NULL;
        }
        ZS_BE_CHECK(be->iface != NULL && zs_backend_iface_complete(be->iface));
        return be;
    }
#ifndef HAVE_CUDA
    if (strcmp(name, "cuda") == 0) {
        zs_error_set("--backend cuda: this zerosim was built without CUDA (backends: %s); "
                     "rebuild with ./configure --with-cuda on a machine with the CUDA toolkit",
                     ZS_BACKEND_LIST);
        zs_backend_copy_err(err, errlen);
        return NULL;
    }
#endif
    zs_error_set("unknown backend '%s' (available: %s)", name, ZS_BACKEND_LIST);
    zs_backend_copy_err(err, errlen);
    return NULL;
}

zs_backend_t zs_backend_init_phantom(char *err, size_t errlen)
{
    struct zs_backend *be = calloc(1, sizeof *be);
    if (be == NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "out of host memory creating the phantom backend");
        return NULL;
    }
    if (zs_backend_phantom_init(be, err, errlen) != 0) {
        free(be);
        return NULL;
    }
    ZS_BE_CHECK(zs_backend_iface_complete(be->iface));
    return be;
}

/* Release the backend's context and the handle. NULL is a no-op. */
void zs_backend_release(zs_backend_t be)
{
    if (be == NULL)
        return;
    if (be->iface != NULL && be->iface->release != NULL)
        be->iface->release(be->ctx);
    free(be);
}

int zs_backend_host_accessible(zs_backend_t be)
{
    ZS_BE_VALID(be);
    return be->iface->host_accessible;
}

size_t zs_backend_coll_id_bytes(zs_backend_t be)
{
    ZS_BE_VALID(be);
    const struct zs_backend_i *i = be->iface;
    if (i->coll_get_id == NULL || i->coll_init == NULL || i->coll_allgatherv == NULL
        || i->coll_reduce_scatterv == NULL)
        return 0;
    return i->coll_id_bytes;
}

int zs_backend_coll_get_id(zs_backend_t be, void *id)
{
    ZS_BE_CHECK(zs_backend_coll_id_bytes(be) > 0 && id != NULL);
    if (be->iface->coll_get_id(be->ctx, id) != 0)
        return zs_error_set("%s backend: cannot create a device-collective id", be->iface->name);
    return 0;
}

int zs_backend_coll_init(zs_backend_t be, const void *id, int nranks, int rank)
{
    ZS_BE_CHECK(zs_backend_coll_id_bytes(be) > 0 && id != NULL && nranks > 0);
    char err[256] = "";
    if (be->iface->coll_init(be->ctx, id, nranks, rank, err, sizeof err) != 0)
        return zs_error_set("%s backend: %s", be->iface->name, err);
    return 0;
}

int zs_backend_coll_allgatherv(zs_backend_t be, void *buf, const int *counts, const int *displs,
                               zs_coll_type t, int nranks)
{
    ZS_BE_CHECK(zs_backend_coll_id_bytes(be) > 0 && counts != NULL && displs != NULL);
    if (be->iface->coll_allgatherv(be->ctx, buf, counts, displs, t, nranks) != 0)
        return zs_error_set("%s backend: device allgather failed", be->iface->name);
    return 0;
}

int zs_backend_coll_reduce_scatterv(zs_backend_t be, const void *send, void *recv,
                                    const int *counts, zs_coll_type t, int nranks, int rank)
{
    ZS_BE_CHECK(zs_backend_coll_id_bytes(be) > 0 && counts != NULL);
    if (be->iface->coll_reduce_scatterv(be->ctx, send, recv, counts, t, nranks, rank) != 0)
        return zs_error_set("%s backend: device reduce-scatter failed", be->iface->name);
    return 0;
}

const char *zs_backend_name(zs_backend_t be)
{
    ZS_BE_VALID(be);
    return be->iface->name;
}

/* ---------------------------------------------------------------------------
 * storage types
 * ------------------------------------------------------------------------- */

size_t zs_dtype_size(zs_dtype t)
{
    switch (t) {
    case ZS_DTYPE_F32: return 4;
    case ZS_DTYPE_BF16: return 2;
    case ZS_DTYPE_F16: return 2;
    }
    return 0;
}

const char *zs_dtype_name(zs_dtype t)
{
    switch (t) {
    case ZS_DTYPE_F32: return "fp32";
    case ZS_DTYPE_BF16: return "bf16";
    case ZS_DTYPE_F16: return "fp16";
    }
    return "unknown";
}

static uint32_t zs_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float zs_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* fp32 -> bf16, round to nearest even. NaN stays NaN (quiet, sign kept);
 * values that round past the largest bf16 become inf. */
uint16_t zs_f32_to_bf16(float f)
{
    uint32_t u = zs_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* bf16 -> fp32, exact. */
float zs_bf16_to_f32(uint16_t h) { return zs_bits_f32((uint32_t)h << 16); }

/* Round the `shift` low bits off `x` to nearest even (shift in 1..31). */
static uint32_t zs_round_shift(uint32_t x, int shift)
{
    uint32_t q = x >> shift;
    uint32_t rem = x & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return q;
}

/* fp32 -> fp16, round to nearest even. Overflow gives inf, tiny values give
 * fp16 subnormals or signed zero, NaN stays NaN (quiet, sign kept). */
uint16_t zs_f32_to_f16(float f)
{
    uint32_t u = zs_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t exp = (u >> 23) & 0xffu;
    uint32_t mant = u & 0x7fffffu;
    if (exp == 0xffu) /* inf or NaN */
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x0200u | (mant >> 13) : 0u));
    int e = (int)exp - 127;
    if (e > 15) /* beyond the largest fp16 binade */
        return (uint16_t)(sign | 0x7c00u);
    if (e >= -14) {
        /* normal: a carry out of the mantissa bumps the exponent, and out of
         * exponent 30 gives 0x7c00 = inf, both as wanted */
        uint32_t h = ((uint32_t)(e + 15) << 10) | (mant >> 13);
        uint32_t rem = mant & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
            h++;
        return (uint16_t)(sign | h);
    }
    if (e < -25) /* below half the smallest subnormal (2^-25): rounds to zero */
        return sign;
    /* subnormal: value = m24 * 2^(e-23) = k * 2^-24 with k = m24 >> (-e-1);
     * rounding up to k = 0x400 lands on the smallest normal, as wanted */
    uint32_t m24 = mant | 0x800000u;
    return (uint16_t)(sign | zs_round_shift(m24, -e - 1));
}

/* fp16 -> fp32, exact (subnormals normalized). */
float zs_f16_to_f32(uint16_t h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t exp = ((uint32_t)h >> 10) & 0x1fu;
    uint32_t mant = (uint32_t)h & 0x3ffu;
    if (exp == 0x1fu)
        return zs_bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0)
            return zs_bits_f32(sign);
        int e = -14;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            e--;
        }
        mant &= 0x3ffu;
        return zs_bits_f32(sign | ((uint32_t)(e + 127) << 23) | (mant << 13));
    }
    return zs_bits_f32(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

/* ---------------------------------------------------------------------------
 * memory
 * ------------------------------------------------------------------------- */

void *zs_backend_alloc(zs_backend_t be, size_t bytes)
{
    ZS_BE_VALID(be);
    return be->iface->alloc(be->ctx, bytes);
}

void zs_backend_free(zs_backend_t be, void *ptr)
{
    ZS_BE_VALID(be);
    if (ptr == NULL)
        return;
    be->iface->dealloc(be->ctx, ptr);
}

void zs_backend_memset0(zs_backend_t be, void *dst, size_t bytes)
{
    ZS_BE_VALID(be);
    if (bytes == 0)
        return;
    ZS_BE_CHECK(dst != NULL);
    if (be->iface->memset0 != NULL) {
        be->iface->memset0(be->ctx, dst, bytes);
        return;
    }
    void *zeros = calloc(1, bytes);
    ZS_BE_CHECK(zeros != NULL);
    be->iface->copy_h2d(be->ctx, dst, zeros, bytes);
    free(zeros);
}

void zs_backend_copy_h2d(zs_backend_t be, void *dst, const void *src, size_t bytes)
{
    ZS_BE_VALID(be);
    if (bytes == 0)
        return;
    ZS_BE_CHECK(dst != NULL && src != NULL);
    be->iface->copy_h2d(be->ctx, dst, src, bytes);
}

void zs_backend_copy_d2h(zs_backend_t be, void *dst, const void *src, size_t bytes)
{
    ZS_BE_VALID(be);
    if (bytes == 0)
        return;
    ZS_BE_CHECK(dst != NULL && src != NULL);
    be->iface->copy_d2h(be->ctx, dst, src, bytes);
}

void zs_backend_copy_d2d(zs_backend_t be, void *dst, const void *src, size_t bytes)
{
    ZS_BE_VALID(be);
    if (bytes == 0)
        return;
    ZS_BE_CHECK(dst != NULL && src != NULL);
    if (be->iface->copy_d2d != NULL) {
        be->iface->copy_d2d(be->ctx, dst, src, bytes);
        return;
    }
    void *stage = malloc(bytes);
    ZS_BE_CHECK(stage != NULL);
    be->iface->copy_d2h(be->ctx, stage, src, bytes);
    be->iface->copy_h2d(be->ctx, dst, stage, bytes);
    free(stage);
}

/* ---------------------------------------------------------------------------
 * dense algebra
 * ------------------------------------------------------------------------- */

static int zs_max1(int x) { return x > 1 ? x : 1; }

void zs_backend_sgemm(zs_backend_t be, int trans_a, int trans_b, int m, int n, int k,
                      float alpha, const float *a, int lda, const float *b, int ldb,
                      float beta, float *c, int ldc)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK(m >= 0 && n >= 0 && k >= 0);
    if (m == 0 || n == 0)
        return;
    /* row-major: op(A) is (m,k), stored as (m,k) or (k,m) */
    ZS_BE_CHECK(lda >= zs_max1(trans_a ? m : k));
    ZS_BE_CHECK(ldb >= zs_max1(trans_b ? k : n));
    ZS_BE_CHECK(ldc >= zs_max1(n));
    ZS_BE_CHECK(c != NULL && (k == 0 || (a != NULL && b != NULL)));
    be->iface->sgemm(be->ctx, trans_a != 0, trans_b != 0, m, n, k, alpha, a, lda, b, ldb,
                     beta, c, ldc);
}

/* ---------------------------------------------------------------------------
 * elementwise and layer kernels
 * ------------------------------------------------------------------------- */

void zs_backend_add_bias(zs_backend_t be, float *out, const float *bias, int bt, int oc)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK(bt >= 0 && oc >= 0);
    if (bt == 0 || oc == 0)
        return;
    ZS_BE_CHECK(out != NULL && bias != NULL);
    be->iface->add_bias(be->ctx, out, bias, bt, oc);
}

void zs_backend_bias_backward(zs_backend_t be, float *dbias, const float *dout, int bt, int oc)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK(bt >= 0 && oc >= 0);
    if (bt == 0 || oc == 0)
        return;
    ZS_BE_CHECK(dbias != NULL && dout != NULL);
    be->iface->bias_backward(be->ctx, dbias, dout, bt, oc);
}

void zs_backend_gelu_forward(zs_backend_t be, float *out, const float *inp, size_t n)
{
    ZS_BE_VALID(be);
    if (n == 0)
        return;
    ZS_BE_CHECK(out != NULL && inp != NULL);
    be->iface->gelu_forward(be->ctx, out, inp, n);
}

void zs_backend_gelu_backward(zs_backend_t be, float *dinp, const float *inp, const float *dout, size_t n)
{
    ZS_BE_VALID(be);
    if (n == 0)
        return;
    ZS_BE_CHECK(dinp != NULL && inp != NULL && dout != NULL);
    be->iface->gelu_backward(be->ctx, dinp, inp, dout, n);
}

void zs_backend_relu_forward(zs_backend_t be, float *out, const float *inp, size_t n)
{
    ZS_BE_VALID(be);
    if (n == 0)
        return;
    ZS_BE_CHECK(out != NULL && inp != NULL);
    be->iface->relu_forward(be->ctx, out, inp, n);
}

void zs_backend_relu_backward(zs_backend_t be, float *dinp, const float *inp, const float *dout, size_t n)
{
    ZS_BE_VALID(be);
    if (n == 0)
        return;
    ZS_BE_CHECK(dinp != NULL && inp != NULL && dout != NULL);
    be->iface->relu_backward(be->ctx, dinp, inp, dout, n);
}

void zs_backend_layernorm_forward(zs_backend_t be, float *out, float *mean, float *rstd,
                                  const float *inp, const float *weight, const float *bias,
                                  int bt, int c)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK(bt >= 0 && c > 0);
    if (bt == 0)
        return;
    ZS_BE_CHECK(out != NULL && mean != NULL && rstd != NULL && inp != NULL && weight != NULL
                && bias != NULL);
    be->iface->layernorm_forward(be->ctx, out, mean, rstd, inp, weight, bias, bt, c);
}

void zs_backend_layernorm_backward(zs_backend_t be, float *dinp, float *dweight, float *dbias,
                                   const float *dout, const float *inp, const float *weight,
                                   const float *mean, const float *rstd, int bt, int c)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK(bt >= 0 && c > 0);
    if (bt == 0)
        return;
    ZS_BE_CHECK(dinp != NULL && dweight != NULL && dbias != NULL && dout != NULL && inp != NULL
                && weight != NULL && mean != NULL && rstd != NULL);
    be->iface->layernorm_backward(be->ctx, dinp, dweight, dbias, dout, inp, weight, mean, rstd,
                                  bt, c);
}

void zs_backend_residual_forward(zs_backend_t be, float *out, const float *a, const float *b, size_t n)
{
    ZS_BE_VALID(be);
    if (n == 0)
        return;
    ZS_BE_CHECK(out != NULL && a != NULL && b != NULL);
    be->iface->residual_forward(be->ctx, out, a, b, n);
}

void zs_backend_axpy(zs_backend_t be, float *y, float alpha, const float *x, size_t n)
{
    ZS_BE_VALID(be);
    if (n == 0)
        return;
    ZS_BE_CHECK(y != NULL && x != NULL);
    be->iface->axpy(be->ctx, y, alpha, x, n);
}

void zs_backend_scale(zs_backend_t be, float *x, float alpha, size_t n)
{
    ZS_BE_VALID(be);
    if (n == 0)
        return;
    ZS_BE_CHECK(x != NULL);
    be->iface->scale(be->ctx, x, alpha, n);
}

void zs_backend_embedding_forward(zs_backend_t be, float *out, const int32_t *tokens,
                                  const float *wte, const float *wpe, int b, int t, int c)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK(b >= 0 && t >= 0 && c >= 0);
    if (b == 0 || t == 0 || c == 0)
        return;
    ZS_BE_CHECK(out != NULL && tokens != NULL && wte != NULL && wpe != NULL);
    be->iface->embedding_forward(be->ctx, out, tokens, wte, wpe, b, t, c);
}

void zs_backend_embedding_backward(zs_backend_t be, float *dwte, float *dwpe, const float *dout,
                                   const int32_t *tokens, int b, int t, int c)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK(b >= 0 && t >= 0 && c >= 0);
    if (b == 0 || t == 0 || c == 0)
        return;
    ZS_BE_CHECK(dwte != NULL && dwpe != NULL && dout != NULL && tokens != NULL);
    be->iface->embedding_backward(be->ctx, dwte, dwpe, dout, tokens, b, t, c);
}

void zs_backend_attention_forward(zs_backend_t be, float *out, float *preatt, float *att,
                                  const float *qkv, int b, int t, int c, int nh)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK(b >= 0 && t >= 0 && c > 0 && nh > 0 && c % nh == 0);
    if (b == 0 || t == 0)
        return;
    ZS_BE_CHECK(out != NULL && preatt != NULL && att != NULL && qkv != NULL);
    be->iface->attention_forward(be->ctx, out, preatt, att, qkv, b, t, c, nh);
}

void zs_backend_attention_backward(zs_backend_t be, float *dqkv, float *dpreatt, float *datt,
                                   const float *dout, const float *qkv, const float *att,
                                   int b, int t, int c, int nh)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK(b >= 0 && t >= 0 && c > 0 && nh > 0 && c % nh == 0);
    if (b == 0 || t == 0)
        return;
    ZS_BE_CHECK(dqkv != NULL && dpreatt != NULL && datt != NULL && dout != NULL && qkv != NULL
                && att != NULL);
    be->iface->attention_backward(be->ctx, dqkv, dpreatt, datt, dout, qkv, att, b, t, c, nh);
}

#define ZS_BE_CHECK_RING(blk)                                                                  \
    ZS_BE_CHECK((blk) != NULL && (blk)->b >= 0 && (blk)->tq >= 0 && (blk)->tk >= 0 &&         \
                (blk)->nh > 0 && (blk)->c > 0 && (blk)->c % (blk)->nh == 0 &&                  \
                (blk)->chunk > 0 && (blk)->tq <= 2 * (blk)->chunk &&                           \
                (blk)->tk <= 2 * (blk)->chunk && (blk)->nkv >= 0 && (blk)->q_stride >= 0 &&    \
                ((blk)->nkv == 0 || (blk)->nh % (blk)->nkv == 0) &&                             \
                ((blk)->q_stride == 0 || (blk)->q_stride >= (blk)->c))
/* The key/value columns of a ring block: k and v, each nkv heads wide. */
#define ZS_RING_KV_COLS(blk)                                                                   \
    (2 * ((blk)->nkv ? (blk)->nkv * ((blk)->c / (blk)->nh) : (blk)->c))

void zs_backend_ring_attention_forward(zs_backend_t be, float *out, float *stats,
                                       const float *qkv, const float *kv, int kv_stride,
                                       const zs_ring_block *blk)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK_RING(blk);
    ZS_BE_CHECK(be->iface->ring_attention_forward != NULL);
    if (blk->b == 0 || blk->tq == 0)
        return;
    ZS_BE_CHECK(out != NULL && stats != NULL && qkv != NULL && kv != NULL &&
                kv_stride >= ZS_RING_KV_COLS(blk));
    be->iface->ring_attention_forward(be->ctx, out, stats, qkv, kv, kv_stride, blk);
}

void zs_backend_ring_attention_backward(zs_backend_t be, float *dqkv, float *dkv, int dkv_stride,
                                        const float *dout, const float *out, const float *stats,
                                        const float *qkv, const float *kv, int kv_stride,
                                        const zs_ring_block *blk)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK_RING(blk);
    ZS_BE_CHECK(be->iface->ring_attention_backward != NULL);
    if (blk->b == 0 || blk->tq == 0)
        return;
    ZS_BE_CHECK(dqkv != NULL && dkv != NULL && dout != NULL && out != NULL && stats != NULL &&
                qkv != NULL && kv != NULL && kv_stride >= ZS_RING_KV_COLS(blk) &&
                dkv_stride >= ZS_RING_KV_COLS(blk));
    be->iface->ring_attention_backward(be->ctx, dqkv, dkv, dkv_stride, dout, out, stats, qkv, kv,
                                       kv_stride, blk);
}

void zs_backend_rmsnorm_forward(zs_backend_t be, float *out, float *rstd, const float *inp,
                                const float *weight, int bt, int c, float eps)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK(bt >= 0 && c > 0 && eps >= 0.0f);
    if (bt == 0)
        return;
    ZS_BE_CHECK(out != NULL && rstd != NULL && inp != NULL && weight != NULL);
    be->iface->rmsnorm_forward(be->ctx, out, rstd, inp, weight, bt, c, eps);
}

void zs_backend_rmsnorm_backward(zs_backend_t be, float *dinp, float *dweight, const float *dout,
                                 const float *inp, const float *weight, const float *rstd,
                                 int bt, int c)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK(bt >= 0 && c > 0);
    if (bt == 0)
        return;
    ZS_BE_CHECK(dinp != NULL && dweight != NULL && dout != NULL && inp != NULL && weight != NULL
                && rstd != NULL);
    be->iface->rmsnorm_backward(be->ctx, dinp, dweight, dout, inp, weight, rstd, bt, c);
}

void zs_backend_swiglu_forward(zs_backend_t be, float *out, const float *inp, int bt, int f)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK(bt >= 0 && f >= 0);
    if (bt == 0 || f == 0)
        return;
    ZS_BE_CHECK(out != NULL && inp != NULL);
    be->iface->swiglu_forward(be->ctx, out, inp, bt, f);
}

void zs_backend_swiglu_backward(zs_backend_t be, float *dinp, const float *inp, const float *dout,
                                int bt, int f)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK(bt >= 0 && f >= 0);
    if (bt == 0 || f == 0)
        return;
    ZS_BE_CHECK(dinp != NULL && inp != NULL && dout != NULL);
    be->iface->swiglu_backward(be->ctx, dinp, inp, dout, bt, f);
}

/* The checks shared by the two rotary kernels: HD even, the heads within a
 * row, the positions within the table. */
#define ZS_BE_CHECK_ROPE()                                                                     \
    ZS_BE_CHECK(b >= 0 && t >= 0 && nheads >= 0 && hd > 0 && hd % 2 == 0 && pos0 >= 0          \
                && (int64_t)nheads * hd <= row_stride && (int64_t)pos0 + t <= table_rows)

void zs_backend_rope_forward(zs_backend_t be, float *x, const float *table, int table_rows,
                             int b, int t, int nheads, int hd, int row_stride, int pos0)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK_ROPE();
    if (b == 0 || t == 0 || nheads == 0)
        return;
    ZS_BE_CHECK(x != NULL && table != NULL);
    be->iface->rope_forward(be->ctx, x, table, b, t, nheads, hd, row_stride, pos0);
}

void zs_backend_rope_backward(zs_backend_t be, float *dx, const float *table, int table_rows,
                              int b, int t, int nheads, int hd, int row_stride, int pos0)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK_ROPE();
    if (b == 0 || t == 0 || nheads == 0)
        return;
    ZS_BE_CHECK(dx != NULL && table != NULL);
    be->iface->rope_backward(be->ctx, dx, table, b, t, nheads, hd, row_stride, pos0);
}

void zs_backend_attention_gqa_forward(zs_backend_t be, float *out, float *preatt, float *att,
                                      const float *qkv, int b, int t, int nh, int nkv, int hd)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK(b >= 0 && t >= 0 && nh > 0 && nkv > 0 && nh % nkv == 0 && hd > 0);
    if (b == 0 || t == 0)
        return;
    ZS_BE_CHECK(out != NULL && preatt != NULL && att != NULL && qkv != NULL);
    be->iface->attention_gqa_forward(be->ctx, out, preatt, att, qkv, b, t, nh, nkv, hd);
}

void zs_backend_attention_gqa_backward(zs_backend_t be, float *dqkv, float *dpreatt, float *datt,
                                       const float *dout, const float *qkv, const float *att,
                                       int b, int t, int nh, int nkv, int hd)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK(b >= 0 && t >= 0 && nh > 0 && nkv > 0 && nh % nkv == 0 && hd > 0);
    if (b == 0 || t == 0)
        return;
    ZS_BE_CHECK(dqkv != NULL && dpreatt != NULL && datt != NULL && dout != NULL && qkv != NULL
                && att != NULL);
    be->iface->attention_gqa_backward(be->ctx, dqkv, dpreatt, datt, dout, qkv, att, b, t, nh,
                                      nkv, hd);
}

void zs_backend_softmax_xent_forward(zs_backend_t be, float *losses, float *probs,
                                     const float *logits, const int32_t *targets, int bt, int v)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK(bt >= 0 && v > 0);
    if (bt == 0)
        return;
    ZS_BE_CHECK(losses != NULL && probs != NULL && logits != NULL && targets != NULL);
    be->iface->softmax_xent_forward(be->ctx, losses, probs, logits, targets, bt, v);
}

void zs_backend_softmax_xent_backward(zs_backend_t be, float *dlogits, const float *probs,
                                      const int32_t *targets, float dloss, int bt, int v)
{
    ZS_BE_VALID(be);
    ZS_BE_CHECK(bt >= 0 && v > 0);
    if (bt == 0)
        return;
    ZS_BE_CHECK(dlogits != NULL && probs != NULL && targets != NULL);
    be->iface->softmax_xent_backward(be->ctx, dlogits, probs, targets, dloss, bt, v);
}

int zs_backend_has_tp(zs_backend_t be)
{
    const struct zs_backend_i *i = be->iface;
    return i->vocab_embedding_forward && i->vocab_embedding_backward && i->xent_vocab_max &&
           i->xent_vocab_sums && i->xent_vocab_finish && i->xent_vocab_backward;
}

#define ZS_BE_TP(be, fn) ZS_BE_CHECK((be)->iface->fn != NULL)

int zs_backend_has_exact_sums(zs_backend_t be)
{
    const struct zs_backend_i *i = be->iface;
    return i->rows_absmax && i->grid_add && i->xent_slice_sums;
}

void zs_backend_rows_absmax(zs_backend_t be, float *rowmax, const float *x, int rows, int n)
{
    ZS_BE_VALID(be);
    ZS_BE_TP(be, rows_absmax);
    if (rows > 0 && n > 0)
        be->iface->rows_absmax(be->ctx, rowmax, x, rows, n);
}

void zs_backend_grid_add(zs_backend_t be, float *out, const float *x, const float *rowmax,
                         int rows, int n, int slices)
{
    ZS_BE_VALID(be);
    ZS_BE_TP(be, grid_add);
    ZS_BE_CHECK(slices >= 1);
    if (rows > 0 && n > 0)
        be->iface->grid_add(be->ctx, out, x, rowmax, rows, n, slices);
}

void zs_backend_xent_slice_sums(zs_backend_t be, float *sums, const float *logits,
                                const float *rowmax, int bt, int ld, int j0, int vn)
{
    ZS_BE_VALID(be);
    ZS_BE_TP(be, xent_slice_sums);
    ZS_BE_CHECK(j0 >= 0 && vn >= 0 && j0 + vn <= ld);
    if (bt > 0)
        be->iface->xent_slice_sums(be->ctx, sums, logits, rowmax, bt, ld, j0, vn);
}

void zs_backend_vocab_embedding_forward(zs_backend_t be, float *out, const int32_t *tokens,
                                        const float *wte, int v0, int vn, const float *wpe,
                                        int b, int t, int c)
{
    ZS_BE_VALID(be);
    ZS_BE_TP(be, vocab_embedding_forward);
    if (b == 0 || t == 0 || c == 0)
        return;
    be->iface->vocab_embedding_forward(be->ctx, out, tokens, wte, v0, vn, wpe, b, t, c);
}

void zs_backend_vocab_embedding_backward(zs_backend_t be, float *dwte, float *dwpe,
                                         const float *dout, const int32_t *tokens, int v0,
                                         int vn, int b, int t, int c)
{
    ZS_BE_VALID(be);
    ZS_BE_TP(be, vocab_embedding_backward);
    if (b == 0 || t == 0 || c == 0)
        return;
    be->iface->vocab_embedding_backward(be->ctx, dwte, dwpe, dout, tokens, v0, vn, b, t, c);
}

void zs_backend_xent_vocab_max(zs_backend_t be, float *rowmax, const float *logits, int bt, int v)
{
    ZS_BE_VALID(be);
    ZS_BE_TP(be, xent_vocab_max);
    if (bt > 0)
        be->iface->xent_vocab_max(be->ctx, rowmax, logits, bt, v);
}

void zs_backend_xent_vocab_sums(zs_backend_t be, float *sums, const float *logits,
                                const float *rowmax, const int32_t *targets, int v0, int bt, int v)
{
    ZS_BE_VALID(be);
    ZS_BE_TP(be, xent_vocab_sums);
    if (bt > 0)
        be->iface->xent_vocab_sums(be->ctx, sums, logits, rowmax, targets, v0, bt, v);
}

void zs_backend_xent_vocab_finish(zs_backend_t be, float *losses, float *probs,
                                  const float *logits, const float *rowmax, const float *sums,
                                  int bt, int v)
{
    ZS_BE_VALID(be);
    ZS_BE_TP(be, xent_vocab_finish);
    if (bt > 0)
        be->iface->xent_vocab_finish(be->ctx, losses, probs, logits, rowmax, sums, bt, v);
}

void zs_backend_xent_vocab_backward(zs_backend_t be, float *dlogits, const float *probs,
                                    const int32_t *targets, int v0, float dloss, int bt, int v)
{
    ZS_BE_VALID(be);
    ZS_BE_TP(be, xent_vocab_backward);
    if (bt > 0)
        be->iface->xent_vocab_backward(be->ctx, dlogits, probs, targets, v0, dloss, bt, v);
}

/* ---------------------------------------------------------------------------
 * reductions
 * ------------------------------------------------------------------------- */

/* Element i of a typed host buffer as fp32. */
static float zs_host_load(const void *x, zs_dtype t, size_t i)
{
    switch (t) {
    case ZS_DTYPE_BF16: return zs_bf16_to_f32(((const uint16_t *)x)[i]);
    case ZS_DTYPE_F16: return zs_f16_to_f32(((const uint16_t *)x)[i]);
    case ZS_DTYPE_F32: break;
    }
    return ((const float *)x)[i];
}

/* Copy a typed device buffer of n elements to a new host buffer. */
static void *zs_backend_stage_d2h(zs_backend_t be, const void *x, zs_dtype t, size_t n)
{
    size_t bytes = n * zs_dtype_size(t);
    void *h = malloc(bytes);
    ZS_BE_CHECK(h != NULL);
    be->iface->copy_d2h(be->ctx, h, x, bytes);
    return h;
}

double zs_backend_sumsq(zs_backend_t be, const void *x, zs_dtype t, size_t n)
{
    ZS_BE_VALID(be);
    ZS_DTYPE_VALID(t);
    if (n == 0)
        return 0.0;
    ZS_BE_CHECK(x != NULL);
    if (be->iface->sumsq != NULL)
        return be->iface->sumsq(be->ctx, x, t, n);
    void *h = zs_backend_stage_d2h(be, x, t, n);
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        double xi = (double)zs_host_load(h, t, i);
        s += xi * xi;
    }
    free(h);
    return s;
}

size_t zs_backend_count_nonfinite(zs_backend_t be, const void *x, zs_dtype t, size_t n)
{
    ZS_BE_VALID(be);
    ZS_DTYPE_VALID(t);
    if (n == 0)
        return 0;
    ZS_BE_CHECK(x != NULL);
    if (be->iface->count_nonfinite != NULL)
        return be->iface->count_nonfinite(be->ctx, x, t, n);
    void *h = zs_backend_stage_d2h(be, x, t, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        /* fp32 inf/NaN have all exponent bits set; converted values keep that */
        uint32_t u = zs_f32_bits(zs_host_load(h, t, i));
        bad += (u & 0x7f800000u) == 0x7f800000u;
    }
    free(h);
    return bad;
}

/* ---------------------------------------------------------------------------
 * storage types on the device
 * ------------------------------------------------------------------------- */

void zs_backend_convert_to_f32(zs_backend_t be, float *dst, const void *src, zs_dtype st, size_t n)
{
    ZS_BE_VALID(be);
    ZS_DTYPE_VALID(st);
    if (n == 0)
        return;
    ZS_BE_CHECK(dst != NULL && src != NULL);
    be->iface->convert_to_f32(be->ctx, dst, src, st, n);
}

void zs_backend_convert_from_f32(zs_backend_t be, void *dst, zs_dtype dt, const float *src, size_t n)
{
    ZS_BE_VALID(be);
    ZS_DTYPE_VALID(dt);
    if (n == 0)
        return;
    ZS_BE_CHECK(dst != NULL && src != NULL);
    be->iface->convert_from_f32(be->ctx, dst, dt, src, n);
}

void zs_backend_accumulate_f32(zs_backend_t be, void *dst, zs_dtype dt, const float *src, size_t n)
{
    ZS_BE_VALID(be);
    ZS_DTYPE_VALID(dt);
    if (n == 0)
        return;
    ZS_BE_CHECK(dst != NULL && src != NULL);
    be->iface->accumulate_f32(be->ctx, dst, dt, src, n);
}

/* ---------------------------------------------------------------------------
 * optimizer
 * ------------------------------------------------------------------------- */

void zs_backend_adamw_step(zs_backend_t be, float *master, float *m, float *v,
                           const void *grad, zs_dtype gt, void *param, zs_dtype pt,
                           size_t n, const zs_optim_hparams *h)
{
    ZS_BE_VALID(be);
    ZS_DTYPE_VALID(gt);
    ZS_DTYPE_VALID(pt);
    ZS_BE_CHECK(h != NULL);
    if (n == 0)
        return;
    ZS_BE_CHECK(master != NULL && m != NULL && v != NULL && grad != NULL);
    ZS_BE_CHECK(h->bias_corr1 > 0.0f && h->bias_corr2 > 0.0f);
    be->iface->adamw_step(be->ctx, master, m, v, grad, gt, param, pt, n, h);
}

void zs_backend_sgd_step(zs_backend_t be, float *master, float *buf,
                         const void *grad, zs_dtype gt, void *param, zs_dtype pt,
                         size_t n, const zs_optim_hparams *h)
{
    ZS_BE_VALID(be);
    ZS_DTYPE_VALID(gt);
    ZS_DTYPE_VALID(pt);
    ZS_BE_CHECK(h != NULL);
    if (n == 0)
        return;
    ZS_BE_CHECK(master != NULL && buf != NULL && grad != NULL);
    be->iface->sgd_step(be->ctx, master, buf, grad, gt, param, pt, n, h);
}

void zs_backend_add_typed(zs_backend_t be, void *dst, const void *src, zs_dtype t, size_t n)
{
    ZS_BE_VALID(be);
    ZS_DTYPE_VALID(t);
    if (n == 0)
        return;
    ZS_BE_CHECK(dst != NULL && src != NULL);
    be->iface->add_typed(be->ctx, dst, src, t, n);
}

size_t zs_backend_to_fixed(zs_backend_t be, int64_t *dst, const void *src, zs_dtype t, size_t n,
                           int frac_bits, int64_t limit)
{
    ZS_BE_VALID(be);
    ZS_DTYPE_VALID(t);
    if (n == 0)
        return 0;
    ZS_BE_CHECK(dst != NULL && src != NULL && frac_bits >= 0 && frac_bits < 63 && limit > 0);
    return be->iface->to_fixed(be->ctx, dst, src, t, n, frac_bits, limit);
}

void zs_backend_add_i64(zs_backend_t be, int64_t *dst, const int64_t *src, size_t n)
{
    ZS_BE_VALID(be);
    if (n == 0)
        return;
    ZS_BE_CHECK(dst != NULL && src != NULL);
    be->iface->add_i64(be->ctx, dst, src, n);
}

void zs_backend_from_fixed(zs_backend_t be, void *dst, zs_dtype t, const int64_t *src, size_t n,
                           int frac_bits)
{
    ZS_BE_VALID(be);
    ZS_DTYPE_VALID(t);
    if (n == 0)
        return;
    ZS_BE_CHECK(dst != NULL && src != NULL && frac_bits >= 0 && frac_bits < 63);
    be->iface->from_fixed(be->ctx, dst, t, src, n, frac_bits);
}
