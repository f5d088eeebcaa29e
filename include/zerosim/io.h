/* zerosim — files other tools read: atomic writes and safetensors.
 *
 * Every writer here writes atomically: the bytes go to a temporary name in
 * the target's directory, are synced, and the file takes its name only when
 * whole (rename), so a run killed or out of space leaves the old file, or
 * none, never half of one. Every reader checks what it reads and fails with
 * one line that names the file and what is wrong.
 *
 * safetensors (Hugging Face's format): a little-endian u64 N, N bytes of a
 * JSON header {"name": {"dtype": "F32", "shape": [..], "data_offsets":
 * [begin, end]}, ..., "__metadata__": {"key": "value"}} (padded with spaces
 * to a multiple of 8), then the tensors' bytes, offsets relative to the end
 * of the header. zerosim writes the tensors in the order given, contiguous.
 */
#ifndef ZEROSIM_IO_H
#define ZEROSIM_IO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- atomic files ---------------------------------------------------------- */

typedef struct {
    int fd;
    char *path, *tmp;     /* the target and the temporary name */
    void *hash;           /* XXH3 state of every byte written */
    uint64_t bytes;
    char *buf;            /* write buffer */
    size_t nbuf;
} zs_afile;

/* Start writing path (its directory must exist): the bytes go to a new
 * file PATH.tmp.<random> created exclusively (zs_file_create_unique: never
 * through a symlink or into a file already there); commit renames it over
 * path, which replaces a symlink at path itself, not what it points to. */
int zs_afile_open(zs_afile *a, const char *path);
int zs_afile_write(zs_afile *a, const void *p, size_t n);
/* Flush, sync, rename into place and sync the directory; *hash (may be NULL)
 * gets the XXH3-64 of the file's bytes. On failure the temporary file is
 * removed. Either way a is closed. */
int zs_afile_commit(zs_afile *a, uint64_t *hash);
/* Give up: remove the temporary file. Safe on a closed or zeroed a. */
void zs_afile_abort(zs_afile *a);

/* Write all n bytes to fd and fsync it; -1 with errno on failure. */
int zs_io_write_fd(int fd, const void *buf, size_t n);
/* "cannot write PATH: reason; what to do" (disk full, or otherwise) as the
 * error; returns -1. */
int zs_io_write_error(const char *path, int err);
/* Sync a directory (after renames in it). */
int zs_io_sync_dir(const char *dir);
/* XXH3-64 of a whole file and its size; one line naming the file on error. */
int zs_io_hash_file(const char *path, uint64_t *hash, uint64_t *bytes);

/* ---- names to indices ------------------------------------------------------- */

/* A hash table from names to their indices 0..n-1, so that a reader looks a
 * tensor up in constant time (a file of a million tensors is read in
 * seconds, not hours). The names stay with the caller: name_of(ctx, i)
 * gives the i-th, for building and for every lookup. */
typedef const char *(*zs_name_of_fn)(const void *ctx, int i);
typedef struct {
    uint32_t *slot;       /* index + 1 of the name hashed there, 0 when free */
    size_t mask;          /* slots - 1 (a power of two, at least 2n) */
} zs_name_index;

/* Index names 0..n-1 (distinct or not: a lookup then finds the first;
 * *dup, when dup is not NULL, gets the index of the first name equal to
 * an earlier one, or -1); one line on error (out of host memory). */
int zs_name_index_build(zs_name_index *ix, int n, zs_name_of_fn name_of, const void *ctx,
                        int *dup);
/* The index of name, or -1. */
int zs_name_index_find(const zs_name_index *ix, const char *name, zs_name_of_fn name_of,
                       const void *ctx);
void zs_name_index_free(zs_name_index *ix);

/* ---- safetensors ------------------------------------------------------------ */

typedef enum {
    ZS_ST_F32, ZS_ST_F16, ZS_ST_BF16, ZS_ST_F64, ZS_ST_I64, ZS_ST_I32, ZS_ST_I16,
    ZS_ST_I8, ZS_ST_U8, ZS_ST_U16, ZS_ST_U32, ZS_ST_U64, ZS_ST_BOOL, ZS_ST_NDTYPES
} zs_st_dtype;

#define ZS_ST_MAX_DIMS 8
typedef struct {
    char name[128];
    zs_st_dtype dtype;
    int ndim;                       /* 0 = a scalar */
    uint64_t shape[ZS_ST_MAX_DIMS];
    uint64_t begin, end;            /* byte offsets in the data section */
} zs_st_tensor;

size_t zs_st_dtype_size(zs_st_dtype t);
const char *zs_st_dtype_name(zs_st_dtype t); /* "F32", ... */
uint64_t zs_st_numel(const zs_st_tensor *t);

/* Writing: declare every tensor (name, dtype, shape; offsets are computed)
 * and the metadata pairs, then give the tensors' bytes in that order, in as
 * many pieces as convenient, then commit. */
typedef struct {
    zs_afile f;
    zs_st_tensor *t;
    int n, cap;
    char **meta;                    /* key, value, key, value, ... */
    int nmeta;
    int started;
    uint64_t total, written;
} zs_st_writer;

int zs_st_writer_open(zs_st_writer *w, const char *path);
int zs_st_writer_add(zs_st_writer *w, const char *name, zs_st_dtype dtype, int ndim,
                     const uint64_t *shape);
int zs_st_writer_meta(zs_st_writer *w, const char *key, const char *value);
/* The next bytes of the data section (the tensors in order). */
int zs_st_writer_data(zs_st_writer *w, const void *p, size_t n);
/* Checks that every declared byte came, then zs_afile_commit. */
int zs_st_writer_commit(zs_st_writer *w, uint64_t *hash);
void zs_st_writer_abort(zs_st_writer *w);

/* Reading: the header is read and checked whole at open, in one pass
 * linear in its size (src/io/st_header.c): valid JSON of at most 100 MiB,
 * distinct names without control characters, known dtypes, at most
 * ZS_ST_MAX_DIMS dimensions, sizes matching dtype and shape computed without
 * overflow, offsets inside the file, and the data exactly the tensors: no
 * overlaps, no holes and no bytes after the last. */
typedef struct {
    int fd;
    char *path;
    zs_st_tensor *t;
    int n;
    char **meta;                    /* key, value, ... */
    int nmeta;
    uint64_t data_start, file_bytes;
    zs_name_index by_name;          /* t[] by name */
} zs_st_file;

int zs_st_open(zs_st_file *f, const char *path);
void zs_st_close(zs_st_file *f);
/* The tensor named name, or NULL. */
const zs_st_tensor *zs_st_find(const zs_st_file *f, const char *name);
/* The metadata value of key, or NULL. */
const char *zs_st_meta(const zs_st_file *f, const char *key);
/* Read n bytes at byte offset off of tensor t into dst. */
int zs_st_read(const zs_st_file *f, const zs_st_tensor *t, uint64_t off, void *dst, size_t n);

/* ---- safetensors: a model in one file or in shards --------------------------- */

/* A model's tensors, in one safetensors file or in the shards of a Hugging
 * Face sharded checkpoint: model.safetensors.index.json, {"metadata":
 * {"total_size": bytes}, "weight_map": {"tensor": "file", ...}}, beside
 * the files it names (model-00001-of-00003.safetensors, ...). Opening
 * checks the whole set: the index's JSON (at most 64 MiB, no key twice),
 * each file a plain name in the index's folder that zs_st_open accepts,
 * every tensor in exactly one file, the one the weight_map names, and every
 * tensor of every file in the weight_map. Tensors are then found by name
 * in constant time, whichever file holds them. */
typedef struct {
    int file, index;                /* files[file].t[index] */
} zs_st_set_entry;
typedef struct {
    char *path;                     /* as given: a file, an index or a folder */
    char *index_path;               /* the index read; NULL for one file */
    zs_st_file *files;
    int n_files;
    zs_st_set_entry *entry;         /* every tensor, file by file */
    int n;
    zs_name_index by_name;          /* entry[] by name */
} zs_st_set;

/* path: a .safetensors file, an .index.json, or a folder holding
 * model.safetensors.index.json or else model.safetensors. */
int zs_st_set_open(zs_st_set *s, const char *path);
void zs_st_set_close(zs_st_set *s);
/* The index of the tensor named name in the set, or -1. */
int zs_st_set_find(const zs_st_set *s, const char *name);
const zs_st_tensor *zs_st_set_tensor(const zs_st_set *s, int i);
/* The path of the file that holds tensor i. */
const char *zs_st_set_file_path(const zs_st_set *s, int i);
/* The metadata value of key in the (first) file, or NULL. */
const char *zs_st_set_meta(const zs_st_set *s, const char *key);
/* Read n bytes at byte offset off of tensor i into dst. */
int zs_st_set_read(const zs_st_set *s, int i, uint64_t off, void *dst, size_t n);

/* Give the data of declared tensor i (zs_st_writer_data, its bytes whole). */
typedef int (*zs_st_data_fn)(void *ctx, int i, zs_st_writer *w);
/* Write n tensors (t[i]'s name, dtype and shape; offsets ignored) with the
 * metadata pairs meta[0..2*nmeta) as path (a name ending .safetensors):
 * one file when shard_bytes is 0 or they fit in one shard; else shards of
 * at most shard_bytes of tensor data each (a larger tensor alone in its
 * own), in order, named as Hugging Face names them (NAME.safetensors ->
 * NAME-00001-of-0000n.safetensors beside it), each with the metadata, then
 * the index PATH.index.json. Each file is written atomically and the index
 * last; on failure the shards already written are removed. One file
 * removes an older PATH.index.json, which readers would take before it.
 * *n_shards (may be NULL) gets the number of files, 1 for one file. */
int zs_st_write_sharded(const char *path, uint64_t shard_bytes, const zs_st_tensor *t, int n,
                        const char *const *meta, int nmeta, zs_st_data_fn data, void *ctx,
                        int *n_shards);

#ifdef __cplusplus
}
#endif
#endif
