/* zerosim — atomic files and safetensors (see zerosim/io.h). */
#include "zerosim/io.h"
#include "zerosim/error.h"
#include "zerosim/file.h"
#include "io_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define ZS_IO_BUF ((size_t)1 << 20)

/* ---- atomic files ------------------------------------------------------------ */

int zs_io_write_error(const char *path, int err) { return zs_file_write_error(path, err); }

static int zs_io_write_nosync(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int zs_io_write_fd(int fd, const void *buf, size_t n)
{
    return zs_io_write_nosync(fd, buf, n) ? -1 : fsync(fd);
}

int zs_afile_open(zs_afile *a, const char *path)
{
    memset(a, 0, sizeof *a);
    a->fd = -1;
    size_t len = strlen(path);
    a->path = malloc(len + 1);
    a->tmp = malloc(len + 32);
    a->buf = malloc(ZS_IO_BUF);
    a->hash = XXH3_createState();
    if (!a->path || !a->tmp || !a->buf || !a->hash) {
        zs_afile_abort(a);
        ZS_FAIL("out of host memory opening %s", path);
    }
    memcpy(a->path, path, len + 1);
    XXH3_64bits_reset(a->hash);
    /* the temporary name, PATH.tmp.<random>, beside path: created new (never
     * through a symlink), then renamed over path */
    char *stem = malloc(len + 8);
    if (stem) {
        snprintf(stem, len + 8, "%s.tmp", path);
        a->fd = zs_file_create_unique(stem, a->tmp, len + 32, O_WRONLY, 0644);
        free(stem);
    } else {
        errno = ENOMEM;
    }
    if (a->fd < 0) {
        int err = errno;
        free(a->tmp); /* nothing of ours to remove */
        a->tmp = NULL;
        zs_afile_abort(a);
        /* every name taken: zs_file_create_unique's line; else name the target */
        return err == EEXIST ? -1 : zs_io_write_error(path, err);
    }
    return 0;
}

static int zs_afile_flush(zs_afile *a)
{
    if (a->nbuf && zs_io_write_nosync(a->fd, a->buf, a->nbuf))
        return zs_io_write_error(a->path, errno);
    a->nbuf = 0;
    return 0;
}

int zs_afile_write(zs_afile *a, const void *p, size_t n)
{
    const char *s = p;
    XXH3_64bits_update(a->hash, p, n);
    a->bytes += n;
    while (n > 0) {
        size_t k = ZS_IO_BUF - a->nbuf < n ? ZS_IO_BUF - a->nbuf : n;
        memcpy(a->buf + a->nbuf, s, k);
        a->nbuf += k;
        s += k;
        n -= k;
        if (a->nbuf == ZS_IO_BUF)
            ZS_TRY(zs_afile_flush(a));
    }
    return 0;
}

static void zs_io_dirname(const char *path, char *dir, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, cap, ".");
    else if (slash == path)
        snprintf(dir, cap, "/");
    else
        snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

int zs_io_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        ZS_FAIL("cannot open the directory %s: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    if (rc && err != EINVAL) /* some file systems cannot sync a directory */
        ZS_FAIL("cannot sync the directory %s: %s", dir, strerror(err));
    return 0;
}

int zs_afile_commit(zs_afile *a, uint64_t *hash)
{
    int rc = zs_afile_flush(a);
    if (!rc && fsync(a->fd) != 0)
        rc = zs_io_write_error(a->path, errno);
    if (!rc) {
        int c = close(a->fd);
        a->fd = -1;
        if (c != 0)
            rc = zs_io_write_error(a->path, errno);
    }
    if (!rc && rename(a->tmp, a->path) != 0)
        rc = zs_io_write_error(a->path, errno);
    if (!rc) {
        char dir[4096];
        zs_io_dirname(a->path, dir, sizeof dir);
        rc = zs_io_sync_dir(dir);
        if (hash)
            *hash = XXH3_64bits_digest(a->hash);
        free(a->tmp); /* renamed: nothing to remove */
        a->tmp = NULL;
    }
    zs_afile_abort(a);
    return rc;
}

void zs_afile_abort(zs_afile *a)
{
    if (a->fd >= 0)
        close(a->fd);
    a->fd = -1;
    if (a->tmp)
        unlink(a->tmp);
    free(a->tmp);
    free(a->path);
    free(a->buf);
    if (a->hash)
        XXH3_freeState(a->hash);
    a->tmp = a->path = a->buf = NULL;
    a->hash = NULL;
}

int zs_io_hash_file(const char *path, uint64_t *hash, uint64_t *bytes)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        ZS_FAIL("cannot read %s: %s", path, strerror(errno));
    char *buf = malloc(ZS_IO_BUF);
    XXH3_state_t *st = XXH3_createState();
    int rc = 0;
    uint64_t total = 0;
    if (!buf || !st) {
        rc = zs_error_set("out of host memory reading %s", path);
    } else {
        XXH3_64bits_reset(st);
        for (;;) {
            ssize_t r = read(fd, buf, ZS_IO_BUF);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                rc = zs_error_set("cannot read %s: %s", path, strerror(errno));
                break;
            }
            if (r == 0)
                break;
            XXH3_64bits_update(st, buf, (size_t)r);
            total += (uint64_t)r;
        }
        if (!rc) {
            *hash = XXH3_64bits_digest(st);
            if (bytes)
                *bytes = total;
        }
    }
    if (st)
        XXH3_freeState(st);
    free(buf);
    close(fd);
    return rc;
}

/* ---- names to indices ------------------------------------------------------------ */

static size_t zs_name_hash(const char *name) { return (size_t)XXH3_64bits(name, strlen(name)); }

int zs_name_index_build(zs_name_index *ix, int n, zs_name_of_fn name_of, const void *ctx,
                        int *dup)
{
    if (dup)
        *dup = -1;
    size_t slots = 16;
    while (slots < 2 * (size_t)(n > 0 ? n : 0))
        slots *= 2;
    ix->slot = calloc(slots, sizeof *ix->slot);
    ix->mask = slots - 1;
    if (!ix->slot)
        ZS_FAIL("out of host memory indexing %d names", n);
    for (int i = 0; i < n; i++) {
        const char *name = name_of(ctx, i);
        size_t k = zs_name_hash(name) & ix->mask;
        for (; ix->slot[k]; k = (k + 1) & ix->mask)
            if (!strcmp(name_of(ctx, (int)ix->slot[k] - 1), name))
                break;
        if (!ix->slot[k]) /* the first of equal names stays */
            ix->slot[k] = (uint32_t)i + 1;
        else if (dup && *dup < 0)
            *dup = i;
    }
    return 0;
}

int zs_name_index_find(const zs_name_index *ix, const char *name, zs_name_of_fn name_of,
                       const void *ctx)
{
    if (!ix->slot)
        return -1;
    for (size_t k = zs_name_hash(name) & ix->mask; ix->slot[k]; k = (k + 1) & ix->mask)
        if (!strcmp(name_of(ctx, (int)ix->slot[k] - 1), name))
            return (int)ix->slot[k] - 1;
    return -1;
}

void zs_name_index_free(zs_name_index *ix)
{
    free(ix->slot);
    ix->slot = NULL;
    ix->mask = 0;
}

/* ---- safetensors: dtypes ---------------------------------------------------------- */

static const struct {
    const char *name;
    size_t size;
} zs_st_types[ZS_ST_NDTYPES] = {
    [ZS_ST_F32] = {"F32", 4}, [ZS_ST_F16] = {"F16", 2}, [ZS_ST_BF16] = {"BF16", 2},
    [ZS_ST_F64] = {"F64", 8}, [ZS_ST_I64] = {"I64", 8}, [ZS_ST_I32] = {"I32", 4},
    [ZS_ST_I16] = {"I16", 2}, [ZS_ST_I8] = {"I8", 1},   [ZS_ST_U8] = {"U8", 1},
    [ZS_ST_U16] = {"U16", 2}, [ZS_ST_U32] = {"U32", 4}, [ZS_ST_U64] = {"U64", 8},
    [ZS_ST_BOOL] = {"BOOL", 1}};

size_t zs_st_dtype_size(zs_st_dtype t)
{
    return (unsigned)t < ZS_ST_NDTYPES ? zs_st_types[t].size : 0;
}

const char *zs_st_dtype_name(zs_st_dtype t)
{
    return (unsigned)t < ZS_ST_NDTYPES ? zs_st_types[t].name : "?";
}

uint64_t zs_st_numel(const zs_st_tensor *t)
{
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

/* ---- safetensors: writing ------------------------------------------------------------ */

int zs_st_writer_open(zs_st_writer *w, const char *path)
{
    memset(w, 0, sizeof *w);
    return zs_afile_open(&w->f, path);
}

int zs_st_writer_add(zs_st_writer *w, const char *name, zs_st_dtype dtype, int ndim,
                     const uint64_t *shape)
{
    if (w->started)
        ZS_FAIL("internal: %s: tensor %s declared after its data began", w->f.path, name);
    if (ndim < 0 || ndim > ZS_ST_MAX_DIMS || (unsigned)dtype >= ZS_ST_NDTYPES ||
        strlen(name) >= sizeof w->t[0].name || !strcmp(name, "__metadata__"))
        ZS_FAIL("internal: %s: tensor %s cannot be written", w->f.path, name);
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        zs_st_tensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t)
            ZS_FAIL("out of host memory writing %s", w->f.path);
        w->t = t;
        w->cap = cap;
    }
    zs_st_tensor *t = &w->t[w->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    t->begin = w->total;
    t->end = t->begin + zs_st_numel(t) * zs_st_dtype_size(dtype);
    w->total = t->end;
    return 0;
}

int zs_st_writer_meta(zs_st_writer *w, const char *key, const char *value)
{
    char **m = realloc(w->meta, (size_t)(w->nmeta + 2) * sizeof *m);
    if (!m)
        ZS_FAIL("out of host memory writing %s", w->f.path);
    w->meta = m;
    m[w->nmeta] = strdup(key);
    m[w->nmeta + 1] = strdup(value);
    w->nmeta += 2;
    if (!m[w->nmeta - 2] || !m[w->nmeta - 1])
        ZS_FAIL("out of host memory writing %s", w->f.path);
    return 0;
}

/* The header: JSON with the keys in declaration order, padded with spaces. */
static int zs_st_writer_header(zs_st_writer *w)
{
    json_t *h = json_object();
    int bad = !h;
    if (w->nmeta && !bad) {
        json_t *m = json_object();
        bad = !m || json_object_set_new(h, "__metadata__", m);
        for (int i = 0; i + 1 < w->nmeta && !bad; i += 2)
            bad = json_object_set_new(m, w->meta[i], json_string(w->meta[i + 1]));
    }
    for (int i = 0; i < w->n && !bad; i++) {
        const zs_st_tensor *t = &w->t[i];
        json_t *shape = json_array();
        bad = !shape;
        for (int d = 0; d < t->ndim && !bad; d++)
            bad = json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
        json_t *e = bad ? NULL : json_pack("{s:s, s:o, s:[I,I]}", "dtype",
                                           zs_st_dtype_name(t->dtype), "shape", shape,
                                           "data_offsets", (json_int_t)t->begin,
                                           (json_int_t)t->end);
        bad = !e || json_object_set_new(h, t->name, e);
    }
    char *text = bad ? NULL : json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(h);
    if (!text)
        ZS_FAIL("out of host memory writing %s", w->f.path);
    size_t len = strlen(text), padded = (len + 7) / 8 * 8;
    unsigned char n8[8];
    for (int i = 0; i < 8; i++)
        n8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int rc = zs_afile_write(&w->f, n8, 8);
    if (!rc)
        rc = zs_afile_write(&w->f, text, len);
    for (size_t i = len; i < padded && !rc; i++)
        rc = zs_afile_write(&w->f, " ", 1);
    free(text);
    w->started = 1;
    return rc;
}

int zs_st_writer_data(zs_st_writer *w, const void *p, size_t n)
{
    if (!w->started)
        ZS_TRY(zs_st_writer_header(w));
    if (w->written + n > w->total)
        ZS_FAIL("internal: %s: %" PRIu64 " bytes of tensor data given, %" PRIu64 " declared",
                w->f.path, w->written + n, w->total);
    w->written += n;
    return zs_afile_write(&w->f, p, n);
}

static void zs_st_writer_free(zs_st_writer *w)
{
    for (int i = 0; i < w->nmeta; i++)
        free(w->meta[i]);
    free(w->meta);
    free(w->t);
    w->meta = NULL;
    w->t = NULL;
    w->n = w->nmeta = 0;
}

int zs_st_writer_commit(zs_st_writer *w, uint64_t *hash)
{
    int rc = w->started ? 0 : zs_st_writer_header(w);
    if (!rc && w->written != w->total)
        rc = zs_error_set("internal: %s: %" PRIu64 " bytes of tensor data given, %" PRIu64
                          " declared", w->f.path, w->written, w->total);
    if (!rc)
        rc = zs_afile_commit(&w->f, hash);
    else
        zs_afile_abort(&w->f);
    zs_st_writer_free(w);
    return rc;
}

void zs_st_writer_abort(zs_st_writer *w)
{
    zs_afile_abort(&w->f);
    zs_st_writer_free(w);
}

/* ---- safetensors: reading ------------------------------------------------------------ */

#define ZS_ST_MAX_HEADER ((uint64_t)100 << 20)

static int zs_st_pread(int fd, void *dst, size_t n, uint64_t off)
{
    char *p = dst;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

static const char *zs_st_name_of(const void *f, int i)
{
    return ((const zs_st_file *)f)->t[i].name;
}

int zs_st_open(zs_st_file *f, const char *path)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = strdup(path);
    if (!f->path)
        ZS_FAIL("out of host memory reading %s", path);
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (f->fd < 0 || fstat(f->fd, &sb) != 0) {
        int err = errno;
        zs_st_close(f);
        ZS_FAIL("cannot read %s: %s", path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        zs_st_close(f);
        ZS_FAIL("%s is not a regular file", path);
    }
    f->file_bytes = (uint64_t)sb.st_size;
    unsigned char n8[8];
    if (f->file_bytes < 8 || zs_st_pread(f->fd, n8, 8, 0)) {
        zs_st_close(f);
        ZS_FAIL("%s: %" PRIu64 " bytes, too short for a safetensors file", path, (uint64_t)sb.st_size);
    }
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)n8[i] << (8 * i);
    /* each bound its own line, saying what was checked (f->file_bytes is
     * read before zs_st_close clears it) */
    uint64_t file_bytes = f->file_bytes;
    if (hlen < 2 || hlen > ZS_ST_MAX_HEADER || hlen > file_bytes - 8)
        zs_st_close(f);
    if (hlen < 2)
        ZS_FAIL("%s: a safetensors header of %" PRIu64 " bytes, too short for a JSON object; "
                "the file is not safetensors", path, hlen);
    if (hlen > ZS_ST_MAX_HEADER)
        ZS_FAIL("%s: a safetensors header of %" PRIu64 " bytes, more than the %" PRIu64
                " MiB zerosim reads; the file is not safetensors or is damaged", path, hlen,
                ZS_ST_MAX_HEADER >> 20);
    if (hlen > file_bytes - 8)
        ZS_FAIL("%s: a safetensors header of %" PRIu64 " bytes in a file of %" PRIu64
                "; the file is not safetensors or is truncated", path, hlen, file_bytes);
    f->data_start = 8 + hlen;
    char *text = malloc(hlen);
    int rc = !text ? zs_error_set("out of host memory reading %s", path)
         : zs_st_pread(f->fd, text, hlen, 8) ? zs_error_set("cannot read %s: %s", path,
                                                            strerror(errno))
                                             : zs_st_header_parse(f, text, hlen);
    free(text);
    if (rc)
        zs_st_close(f);
    return rc;
}

void zs_st_close(zs_st_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    for (int i = 0; i < f->nmeta; i++)
        free(f->meta[i]);
    free(f->meta);
    free(f->t);
    free(f->path);
    zs_name_index_free(&f->by_name);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

const zs_st_tensor *zs_st_find(const zs_st_file *f, const char *name)
{
    int i = zs_name_index_find(&f->by_name, name, zs_st_name_of, f);
    return i < 0 ? NULL : &f->t[i];
}

const char *zs_st_meta(const zs_st_file *f, const char *key)
{
    for (int i = 0; i + 1 < f->nmeta; i += 2)
        if (!strcmp(f->meta[i], key))
            return f->meta[i + 1];
    return NULL;
}

int zs_st_read(const zs_st_file *f, const zs_st_tensor *t, uint64_t off, void *dst, size_t n)
{
    if (off > t->end - t->begin || n > t->end - t->begin - off)
        ZS_FAIL("internal: %s: reading bytes %" PRIu64 "+%zu of tensor \"%s\" (%" PRIu64
                " bytes)", f->path, off, n, t->name, t->end - t->begin);
    if (zs_st_pread(f->fd, dst, n, f->data_start + t->begin + off))
        ZS_FAIL("cannot read tensor \"%s\" of %s: %s", t->name, f->path,
                errno ? strerror(errno) : "the file is shorter than its header says");
    return 0;
}
