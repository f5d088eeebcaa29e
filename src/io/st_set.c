/* zerosim — a model's tensors in one safetensors file or in the shards of a
 * Hugging Face sharded checkpoint, read and written (see zerosim/io.h,
 * "a model in one file or in shards"). */
#include "zerosim/io.h"
#include "zerosim/error.h"
#include "zerosim/file.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ZS_ST_INDEX_MAX_BYTES ((uint64_t)64 << 20)
#define ZS_ST_MAX_SHARDS 99999

static int zs_st_ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

/* "DIR/name" of a file beside path (DIR "." when path has no slash). */
static char *zs_st_beside(const char *path, const char *name)
{
    const char *slash = strrchr(path, '/');
    size_t dir = slash ? (size_t)(slash - path) + 1 : 0, len = dir + strlen(name) + 1;
    char *out = malloc(len);
    if (out)
        snprintf(out, len, "%.*s%s", (int)dir, path, name);
    return out;
}

/* ---- reading --------------------------------------------------------------------- */

static const char *zs_st_set_name_of(const void *ctx, int i)
{
    return zs_st_set_tensor(ctx, i)->name;
}

const zs_st_tensor *zs_st_set_tensor(const zs_st_set *s, int i)
{
    const zs_st_set_entry *e = &s->entry[i];
    return &s->files[e->file].t[e->index];
}

const char *zs_st_set_file_path(const zs_st_set *s, int i)
{
    return s->files[s->entry[i].file].path;
}

int zs_st_set_find(const zs_st_set *s, const char *name)
{
    return zs_name_index_find(&s->by_name, name, zs_st_set_name_of, s);
}

const char *zs_st_set_meta(const zs_st_set *s, const char *key)
{
    return s->n_files > 0 ? zs_st_meta(&s->files[0], key) : NULL;
}

int zs_st_set_read(const zs_st_set *s, int i, uint64_t off, void *dst, size_t n)
{
    return zs_st_read(&s->files[s->entry[i].file], zs_st_set_tensor(s, i), off, dst, n);
}

void zs_st_set_close(zs_st_set *s)
{
    for (int f = 0; f < s->n_files; f++)
        zs_st_close(&s->files[f]);
    free(s->files);
    free(s->entry);
    free(s->path);
    free(s->index_path);
    zs_name_index_free(&s->by_name);
    memset(s, 0, sizeof *s);
}

/* Every tensor of the open files as entries, indexed by name; a name in two
 * files is refused, naming both. */
static int zs_st_set_index_tensors(zs_st_set *s, const char *what)
{
    int total = 0;
    for (int f = 0; f < s->n_files; f++) {
        if (s->files[f].n > INT32_MAX - total)
            ZS_FAIL("%s: more than %d tensors", what, INT32_MAX);
        total += s->files[f].n;
    }
    s->entry = malloc(((size_t)total + 1) * sizeof *s->entry);
    if (!s->entry)
        ZS_FAIL("out of host memory reading %s", what);
    for (int f = 0; f < s->n_files; f++)
        for (int j = 0; j < s->files[f].n; j++)
            s->entry[s->n++] = (zs_st_set_entry){f, j};
    int dup;
    ZS_TRY(zs_name_index_build(&s->by_name, s->n, zs_st_set_name_of, s, &dup));
    if (dup >= 0) {
        const char *name = zs_st_set_tensor(s, dup)->name;
        char esc[160];
        ZS_FAIL("%s: tensor %s is in two shards, %s and %s: a tensor belongs in one", what,
                zs_file_escape(name, strlen(name), esc, sizeof esc),
                zs_st_set_file_path(s, zs_st_set_find(s, name)), zs_st_set_file_path(s, dup));
    }
    return 0;
}

/* A weight_map's file name: a plain name in the index's folder. */
static int zs_st_index_file_name(const char *index, const char *tensor, const char *file)
{
    char esc[160], tesc[160];
    size_t n = strlen(file);
    int bad = n == 0 || strchr(file, '/') || !strcmp(file, ".") || !strcmp(file, "..");
    for (size_t k = 0; k < n && !bad; k++)
        bad = (unsigned char)file[k] < 32;
    if (bad)
        ZS_FAIL("%s: the weight_map puts tensor %s in \"%s\": a shard is a plain file name "
                "in the index's folder", index, zs_file_escape(tensor, strlen(tensor), tesc,
                                                                sizeof tesc),
                zs_file_escape(file, n, esc, sizeof esc));
    return 0;
}

typedef struct {
    const char *file, *tensor;
} zs_st_map_pair;

static int zs_st_pair_cmp(const void *a, const void *b)
{
    return strcmp(((const zs_st_map_pair *)a)->file, ((const zs_st_map_pair *)b)->file);
}

/* The index's JSON and its weight_map, checked for shape. */
static int zs_st_index_load(const char *index, json_t **root, json_t **map)
{
    struct stat sb;
    if (stat(index, &sb) != 0)
        ZS_FAIL("cannot read %s: %s", index, strerror(errno));
    if ((uint64_t)sb.st_size > ZS_ST_INDEX_MAX_BYTES)
        ZS_FAIL("%s: %" PRIu64 " bytes, more than the %" PRIu64 " MiB zerosim reads of an "
                "index", index, (uint64_t)sb.st_size, ZS_ST_INDEX_MAX_BYTES >> 20);
    json_error_t err;
    *root = json_load_file(index, JSON_REJECT_DUPLICATES, &err);
    if (!*root) {
        char esc[200];
        ZS_FAIL("%s: line %d: %s", index, err.line,
                zs_file_escape(err.text, strlen(err.text), esc, sizeof esc));
    }
    *map = json_object_get(*root, "weight_map");
    if (!json_is_object(*root) || !json_is_object(*map) || json_object_size(*map) == 0) {
        json_decref(*root);
        ZS_FAIL("%s: no \"weight_map\" object of tensor names and files: not a Hugging Face "
                "model.safetensors.index.json", index);
    }
    if (json_object_size(*map) > (size_t)INT32_MAX / 2) {
        json_decref(*root);
        ZS_FAIL("%s: a weight_map of more than %d tensors", index, INT32_MAX / 2);
    }
    return 0;
}

/* Open each distinct file the weight_map names, in the order of their names. */
static int zs_st_index_open_files(zs_st_set *s, json_t *map)
{
    size_t n = json_object_size(map), k = 0;
    zs_st_map_pair *pair = malloc(n * sizeof *pair);
    if (!pair)
        ZS_FAIL("out of host memory reading %s", s->index_path);
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach(map, key, v) {
        if (!json_is_string(v)) {
            char esc[160];
            rc = zs_error_set("%s: the weight_map's value for tensor %s is not a file name",
                              s->index_path, zs_file_escape(key, strlen(key), esc, sizeof esc));
            break;
        }
        if ((rc = zs_st_index_file_name(s->index_path, key, json_string_value(v))))
            break;
        pair[k++] = (zs_st_map_pair){json_string_value(v), key};
    }
    if (!rc)
        qsort(pair, n, sizeof *pair, zs_st_pair_cmp);
    size_t distinct = 0;
    for (size_t i = 0; i < n && !rc; i++)
        distinct += i == 0 || strcmp(pair[i].file, pair[i - 1].file);
    if (!rc && distinct > ZS_ST_MAX_SHARDS)
        rc = zs_error_set("%s: the weight_map names %zu files, more than %d", s->index_path,
                          distinct, ZS_ST_MAX_SHARDS);
    s->files = rc ? NULL : calloc(distinct, sizeof *s->files);
    if (!rc && !s->files)
        rc = zs_error_set("out of host memory reading %s", s->index_path);
    for (size_t i = 0; i < n && !rc; i++) {
        if (i > 0 && !strcmp(pair[i].file, pair[i - 1].file))
            continue;
        char *path = zs_st_beside(s->index_path, pair[i].file);
        if (!path) {
            rc = zs_error_set("out of host memory reading %s", s->index_path);
            break;
        }
        rc = zs_st_open(&s->files[s->n_files], path);
        free(path);
        if (rc) {
            char inner[ZS_ERROR_MAX / 2], tesc[160];
            snprintf(inner, sizeof inner, "%s", zs_error_msg());
            rc = zs_error_set("%s: the weight_map puts tensor %s in a shard that cannot be "
                              "read: %s", s->index_path,
                              zs_file_escape(pair[i].tensor, strlen(pair[i].tensor), tesc,
                                             sizeof tesc), inner);
            break;
        }
        s->n_files++;
    }
    free(pair);
    return rc;
}

/* Each tensor where the weight_map says, and each in the weight_map. */
static int zs_st_index_check(const zs_st_set *s, json_t *map)
{
    const char *key;
    json_t *v;
    char esc[160];
    json_object_foreach(map, key, v) {
        int i = zs_st_set_find(s, key);
        const char *file = json_string_value(v), *held = i < 0 ? NULL : zs_st_set_file_path(s, i);
        const char *base = held ? strrchr(held, '/') : NULL;
        base = base ? base + 1 : held;
        if (!held || strcmp(base, file))
            ZS_FAIL("%s: the weight_map puts tensor %s in %s, %s%s", s->index_path,
                    zs_file_escape(key, strlen(key), esc, sizeof esc), file,
                    held ? "but it is in " : "which does not hold it", held ? held : "");
    }
    for (int i = 0; i < s->n; i++) {
        const char *name = zs_st_set_tensor(s, i)->name;
        if (!json_object_get(map, name))
            ZS_FAIL("%s holds tensor %s, which the weight_map of %s does not list",
                    zs_st_set_file_path(s, i), zs_file_escape(name, strlen(name), esc, sizeof esc),
                    s->index_path);
    }
    return 0;
}

static int zs_st_set_open_index(zs_st_set *s)
{
    json_t *root = NULL, *map = NULL;
    ZS_TRY(zs_st_index_load(s->index_path, &root, &map));
    int rc = zs_st_index_open_files(s, map);
    if (!rc)
        rc = zs_st_set_index_tensors(s, s->index_path);
    if (!rc)
        rc = zs_st_index_check(s, map);
    json_decref(root);
    return rc;
}

int zs_st_set_open(zs_st_set *s, const char *path)
{
    memset(s, 0, sizeof *s);
    s->path = strdup(path);
    if (!s->path)
        ZS_FAIL("out of host memory reading %s", path);
    struct stat sb;
    int rc = 0;
    char *file = NULL;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) { /* a model's folder */
        size_t len = strlen(path) + 40;
        char *index = malloc(len);
        file = malloc(len);
        if (!index || !file) {
            free(index);
            free(file);
            zs_st_set_close(s);
            ZS_FAIL("out of host memory reading %s", path);
        }
        snprintf(index, len, "%s/model.safetensors.index.json", path);
        snprintf(file, len, "%s/model.safetensors", path);
        if (access(index, F_OK) == 0) {
            s->index_path = index;
        } else {
            free(index);
            if (access(file, F_OK) != 0) {
                free(file);
                zs_st_set_close(s);
                ZS_FAIL("%s: a folder with neither model.safetensors.index.json nor "
                        "model.safetensors in it", path);
            }
        }
    } else if (zs_st_ends_with(path, ".index.json")) {
        s->index_path = strdup(path);
        if (!s->index_path)
            rc = zs_error_set("out of host memory reading %s", path);
    }
    if (!rc && s->index_path) {
        rc = zs_st_set_open_index(s);
    } else if (!rc) {
        s->files = calloc(1, sizeof *s->files);
        rc = !s->files ? zs_error_set("out of host memory reading %s", path)
                       : zs_st_open(&s->files[0], file ? file : path);
        if (!rc) {
            s->n_files = 1;
            rc = zs_st_set_index_tensors(s, s->files[0].path);
        }
    }
    free(file);
    if (rc)
        zs_st_set_close(s);
    return rc;
}

/* ---- writing ------------------------------------------------------------------------ */

static uint64_t zs_st_decl_bytes(const zs_st_tensor *t)
{
    return zs_st_numel(t) * zs_st_dtype_size(t->dtype);
}

/* Shard k's first tensor in first[k] (first[n_shards] = n): greedy, in order. */
static int zs_st_shard_cut(const zs_st_tensor *t, int n, uint64_t shard_bytes, int *first)
{
    int k = 0;
    uint64_t in_shard = 0;
    first[0] = 0;
    for (int i = 0; i < n; i++) {
        uint64_t b = zs_st_decl_bytes(&t[i]);
        if (shard_bytes && i > first[k] && in_shard + b > shard_bytes) {
            first[++k] = i;
            in_shard = 0;
        }
        in_shard += b;
    }
    first[k + 1] = n;
    return k + 1;
}

static int zs_st_write_one(const char *path, const zs_st_tensor *t, int lo, int hi,
                           const char *const *meta, int nmeta, zs_st_data_fn data, void *ctx)
{
    zs_st_writer w;
    ZS_TRY(zs_st_writer_open(&w, path));
    int rc = 0;
    for (int m = 0; m < nmeta && !rc; m++)
        rc = zs_st_writer_meta(&w, meta[2 * m], meta[2 * m + 1]);
    for (int i = lo; i < hi && !rc; i++)
        rc = zs_st_writer_add(&w, t[i].name, t[i].dtype, t[i].ndim, t[i].shape);
    for (int i = lo; i < hi && !rc; i++)
        rc = data(ctx, i, &w);
    if (rc) {
        zs_st_writer_abort(&w);
        return rc;
    }
    return zs_st_writer_commit(&w, NULL);
}

static int zs_st_write_index(const char *path, const zs_st_tensor *t, int n, const int *first,
                             int n_shards, char **shard_names)
{
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += zs_st_decl_bytes(&t[i]);
    json_t *root = json_object(), *meta = json_object(), *map = json_object();
    int bad = !root || !meta || !map;
    bad = bad || json_object_set(root, "metadata", meta) || json_object_set(root, "weight_map", map);
    bad = bad || json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
    for (int k = 0; k < n_shards && !bad; k++)
        for (int i = first[k]; i < first[k + 1] && !bad; i++)
            bad = json_object_set_new(map, t[i].name, json_string(shard_names[k]));
    char *text = bad ? NULL : json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(meta);
    json_decref(map);
    json_decref(root);
    if (!text)
        ZS_FAIL("out of host memory writing %s", path);
    zs_afile a;
    int rc = zs_afile_open(&a, path);
    if (!rc)
        rc = zs_afile_write(&a, text, strlen(text));
    if (!rc)
        rc = zs_afile_write(&a, "\n", 1);
    free(text);
    if (rc) {
        zs_afile_abort(&a);
        return rc;
    }
    return zs_afile_commit(&a, NULL);
}

int zs_st_write_sharded(const char *path, uint64_t shard_bytes, const zs_st_tensor *t, int n,
                        const char *const *meta, int nmeta, zs_st_data_fn data, void *ctx,
                        int *n_shards)
{
    if (!zs_st_ends_with(path, ".safetensors"))
        ZS_FAIL("%s: a sharded checkpoint's name ends with .safetensors (model.safetensors "
                "gives model-00001-of-0000n.safetensors and model.safetensors.index.json)", path);
    int *first = malloc(((size_t)n + 2) * sizeof *first);
    if (!first)
        ZS_FAIL("out of host memory writing %s", path);
    int shards = zs_st_shard_cut(t, n, shard_bytes, first);
    if (n_shards)
        *n_shards = shards;
    if (shards == 1) { /* one file; an index of the same name would shadow it */
        free(first);
        int rc = zs_st_write_one(path, t, 0, n, meta, nmeta, data, ctx);
        char *index = rc ? NULL : malloc(strlen(path) + 16);
        if (index) {
            snprintf(index, strlen(path) + 16, "%s.index.json", path);
            if (unlink(index) != 0 && errno != ENOENT)
                rc = zs_error_set("cannot remove the older index %s beside %s: %s", index, path,
                                  strerror(errno));
        }
        free(index);
        return rc;
    }
    if (shards > ZS_ST_MAX_SHARDS) {
        free(first);
        ZS_FAIL("%s: a shard size of %" PRIu64 " bytes makes %d shards, more than %d: give a "
                "larger --shard-size", path, shard_bytes, shards, ZS_ST_MAX_SHARDS);
    }
    char **names = calloc((size_t)shards, sizeof *names);
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int stem = (int)(strlen(base) - strlen(".safetensors")), rc = names ? 0 : -1, done = 0;
    if (!names)
        zs_error_set("out of host memory writing %s", path);
    for (int k = 0; k < shards && !rc; k++) {
        char name[4200];
        snprintf(name, sizeof name, "%.*s-%05d-of-%05d.safetensors", stem, base, k + 1, shards);
        names[k] = strdup(name);
        char *full = names[k] ? zs_st_beside(path, name) : NULL;
        rc = full ? zs_st_write_one(full, t, first[k], first[k + 1], meta, nmeta, data, ctx)
                  : zs_error_set("out of host memory writing %s", path);
        free(full);
        done += !rc;
    }
    if (!rc) {
        char *index = malloc(strlen(path) + 16);
        if (index)
            snprintf(index, strlen(path) + 16, "%s.index.json", path);
        rc = index ? zs_st_write_index(index, t, n, first, shards, names)
                   : zs_error_set("out of host memory writing %s", path);
        free(index);
    }
    for (int k = 0; k < shards && names; k++) { /* on failure, no shard stays */
        if (rc && k < done) {
            char *full = zs_st_beside(path, names[k]);
            if (full)
                unlink(full);
            free(full);
        }
        free(names[k]);
    }
    free(names);
    free(first);
    return rc;
}
