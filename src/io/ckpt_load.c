/* zerosim — sharded training checkpoints, reading (see zerosim/checkpoint.h;
 * saving is checkpoint.c): every reader goes through ck_read. */
#include "checkpoint_impl.h"
#include "zerosim/error.h"
#include "zerosim/file.h"
#include "zerosim/io.h"
#include "zerosim/model.h"
#include "zerosim/program.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>


/* ---- loading ------------------------------------------------------------------------ */

void zs_ckpt_close(zs_ckpt *ck)
{
    if (!ck)
        return;
    for (int i = 0; i < ck->nfiles; i++)
        if (ck->files[i].f.path)
            zs_st_close(&ck->files[i].f);
    free(ck->files);
    free(ck);
}

const char *zs_ckpt_describe(const zs_ckpt *ck) { return ck->describe; }

/* Read latest: a plain file (opened O_NOFOLLOW: never through a symlink)
 * holding "global_stepK" and a newline, as ck_publish writes it, the name
 * in name (cap bytes). One line naming latest on error, quoting at most 40
 * bytes of it, escaped: no newline and no other file's contents. */
static int ck_read_latest(const char *path, char *name, size_t cap)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno == ELOOP)
        ZS_FAIL("%s is a symlink, not the file zerosim writes; the checkpoint folder was "
                "changed: remove it, or give one global_step folder", path);
    if (fd < 0)
        ZS_FAIL("cannot read %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        ZS_FAIL("%s is not a plain file, not the file zerosim writes; the checkpoint folder "
                "was changed", path);
    }
    size_t n = 0;
    while (n < cap - 1) {
        ssize_t r = read(fd, name + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int err = errno;
            close(fd);
            ZS_FAIL("cannot read %s: %s", path, strerror(err));
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    name[n] = '\0';
    while (n > 0 && (name[n - 1] == '\n' || name[n - 1] == ' ' || name[n - 1] == '\r'))
        name[--n] = '\0';
    size_t digits = n > 11 && !strncmp(name, "global_step", 11) ? strspn(name + 11, "0123456789")
                                                                  : 0;
    if (digits == 0 || digits > 9 || 11 + digits != n) {
        char quoted[48];
        ZS_FAIL("%s does not name a checkpoint folder (\"%s\"); the file is damaged", path,
                zs_file_escape(name, n, quoted, sizeof quoted));
    }
    return 0;
}

/* The manifest's integer field, or an error naming it. */
static int ck_int(const zs_ckpt *ck, json_t *o, const char *key, json_int_t lo, json_int_t hi,
                  json_int_t *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        ZS_FAIL("%s: \"%s\" is missing or out of range; the manifest is damaged", ck->manifest, key);
    *out = json_integer_value(v);
    return 0;
}

static const char *ck_str(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Compare the saved model's shape with the run's: one line naming the first
 * field that differs. */
static int ck_check_model(const zs_ckpt *ck, json_t *saved, const zs_model_config *m)
{
    json_t *want = zs_ckpt_model_json(m);
    const char *key;
    json_t *v;
    int rc = 0;
    if (!json_is_object(saved))
        rc = zs_error_set("%s: \"model\" is missing; the manifest is damaged", ck->manifest);
    json_object_foreach(want, key, v) {
        if (rc)
            break;
        json_t *s = json_object_get(saved, key);
        /* saves before the manifest recorded the experts (no moe_* keys):
         * their flat arrays are --ep 1's, checked by the parameter count */
        if (!s && !strncmp(key, "moe_", 4))
            continue;
        if (!s || !json_equal(s, v)) {
            char *a = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL, *b = json_dumps(v, JSON_ENCODE_ANY);
            rc = zs_error_set("%s: the checkpoint's model has %s %s, this run's %s: resume with "
                              "the model it was saved with", ck->manifest, key,
                              a ? a : "nothing", b ? b : "?");
            free(a);
            free(b);
        }
    }
    json_decref(want);
    return rc;
}

/* The manifest's "files": one entry per rank of the save, named after its
 * ranks, each holding its data-parallel rank's shard of the padded
 * elements (as zs_partition_make deals them): every element once per
 * tensor-parallel rank. */
static int ck_parse_files(zs_ckpt *ck, json_t *m)
{
    json_int_t v;
    json_t *files = json_object_get(m, "files");
    if ((uint64_t)ck->dp * (uint64_t)ck->tp != (uint64_t)ck->world || ck->padded % ck->dp ||
        ck->num_params > ck->padded)
        ZS_FAIL("%s: \"mesh\", \"num_params\" and \"padded\" disagree (world %d, dp %d, tp "
                "%d, %" PRIu64 " of %" PRIu64 " elements); the manifest is damaged",
                ck->manifest, ck->world, ck->dp, ck->tp, ck->num_params, ck->padded);
    if (!json_is_array(files) || json_array_size(files) != (size_t)ck->world)
        ZS_FAIL("%s: \"files\" should list %d files; the manifest is damaged", ck->manifest,
                ck->world);
    ck->files = calloc((size_t)ck->world, sizeof *ck->files);
    if (!ck->files)
        ZS_FAIL("out of host memory reading %s", ck->manifest);
    uint64_t shard = ck->padded / (uint64_t)ck->dp;
    for (size_t i = 0; i < json_array_size(files); i++) {
        json_t *f = json_array_get(files, i);
        ck_file *cf = &ck->files[ck->nfiles++];
        cf->f.fd = -1;
        const char *nm = ck_str(f, "name"), *hx = ck_str(f, "xxh3");
        json_t *res = json_object_get(f, "residual");
        if (!nm || strlen(nm) >= sizeof cf->name || !hx || !json_is_boolean(res) ||
            strspn(nm, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") !=
                strlen(nm) || nm[0] == '.') /* a file of the folder, quoted as it is */
            ZS_FAIL("%s: file entry %zu lacks a name, a checksum or \"residual\"; the manifest "
                    "is damaged", ck->manifest, i);
        snprintf(cf->name, sizeof cf->name, "%s", nm);
        char *end;
        cf->xxh3 = strtoull(hx, &end, 16);
        if (*end || strlen(hx) != 16)
            ZS_FAIL("%s: the checksum of %s is not 16 hexadecimal digits", ck->manifest, nm);
        cf->residual = json_is_true(res);
        ZS_TRY(ck_int(ck, f, "tp_rank", 0, ck->tp - 1, &v));
        cf->tp = (int)v;
        ZS_TRY(ck_int(ck, f, "dp_rank", 0, ck->dp - 1, &v));
        cf->dp = (int)v;
        ZS_TRY(ck_int(ck, f, "begin", 0, (json_int_t)ck->padded, &v));
        cf->begin = (uint64_t)v;
        ZS_TRY(ck_int(ck, f, "end", (json_int_t)cf->begin, (json_int_t)ck->padded, &v));
        cf->end = (uint64_t)v;
        ZS_TRY(ck_int(ck, f, "bytes", 0, INT64_MAX, &v));
        cf->bytes = (uint64_t)v;
        char want[64];
        snprintf(want, sizeof want, "shard_tp%d_dp%05d.safetensors", cf->tp, cf->dp);
        if (strcmp(want, cf->name) != 0 || cf->begin != (uint64_t)cf->dp * shard ||
            cf->end != cf->begin + shard)
            ZS_FAIL("%s: file entry %zu (%s, tp %d, dp %d) holds elements [%" PRIu64 ", %" PRIu64
                    "), not its ranks' [%" PRIu64 ", %" PRIu64 ") of %s; the manifest is damaged",
                    ck->manifest, i, cf->name, cf->tp, cf->dp, cf->begin, cf->end,
                    (uint64_t)cf->dp * shard, (uint64_t)cf->dp * shard + shard, want);
        for (size_t j = 0; j < i; j++)
            if (ck->files[j].tp == cf->tp && ck->files[j].dp == cf->dp)
                ZS_FAIL("%s: %s is listed twice; the manifest is damaged", ck->manifest, nm);
    }
    return 0;
}

/* What the manifest says of the save, whatever the run that reads it: its
 * steps, mesh, sizes, optimizer state, data seed, parameters' hash and
 * files. One line naming the manifest and the field. */
static int ck_parse_saved(zs_ckpt *ck, json_t *m)
{
    json_int_t v;
    ZS_TRY(ck_int(ck, m, "steps", 0, INT_MAX, &v));
    ck->steps = (int)v;
    ZS_TRY(ck_int(ck, m, "stage", 0, 3, &v));
    ck->stage = (int)v;
    json_t *mesh = json_object_get(m, "mesh");
    ZS_TRY(ck_int(ck, mesh, "world", 1, INT_MAX, &v));
    ck->world = (int)v;
    ZS_TRY(ck_int(ck, mesh, "dp", 1, INT_MAX, &v));
    ck->dp = (int)v;
    ZS_TRY(ck_int(ck, mesh, "tp", 1, INT_MAX, &v));
    ck->tp = (int)v;
    ZS_TRY(ck_int(ck, m, "num_params", 1, INT64_MAX, &v));
    ck->num_params = (uint64_t)v;
    ZS_TRY(ck_int(ck, m, "padded", 1, INT64_MAX, &v));
    ck->padded = (uint64_t)v;
    ZS_TRY(ck_int(ck, json_object_get(m, "data"), "seed", 0, INT64_MAX, &v));
    ck->seed = (uint64_t)v;
    json_t *os = json_object_get(m, "optimizer_state");
    ZS_TRY(ck_int(ck, os, "step", 0, INT_MAX, &v));
    ck->counters.t = (int)v;
    ZS_TRY(ck_int(ck, os, "cur_hysteresis", INT_MIN, INT_MAX, &v));
    ck->counters.cur_hysteresis = (int)v;
    ZS_TRY(ck_int(ck, os, "good_steps", 0, INT_MAX, &v));
    ck->counters.good_steps = (int)v;
    ZS_TRY(ck_int(ck, os, "overflows", 0, INT_MAX, &v));
    ck->counters.overflows = (int)v;
    json_t *ls = json_object_get(os, "loss_scale");
    if (!json_is_number(ls) || !(json_number_value(ls) > 0))
        ZS_FAIL("%s: \"loss_scale\" is missing or not positive; the manifest is damaged",
                ck->manifest);
    ck->counters.loss_scale = (float)json_number_value(ls);
    const char *ph = ck_str(m, "param_hash");
    if (!ph || strlen(ph) != 16 || strspn(ph, "0123456789abcdef") != 16)
        ZS_FAIL("%s: \"param_hash\" is missing; the manifest is damaged", ck->manifest);
    snprintf(ck->param_hash, sizeof ck->param_hash, "%s", ph);
    json_t *xj = json_object_get(m, "experts");
    if (xj) {
        ZS_TRY(ck_int(ck, xj, "ep", 2, INT_MAX, &v));
        ck->xep = (int)v;
        ZS_TRY(ck_int(ck, xj, "padded", 1, INT64_MAX, &v));
        ck->xpadded = (uint64_t)v;
        ZS_TRY(ck_int(ck, xj, "shard", 1, INT64_MAX, &v));
        ck->xshard = (uint64_t)v;
    }
    return ck_parse_files(ck, m);
}

/* The saved run against this one: the model's shapes, precision,
 * optimizer, global batch, seed and data; one line naming the first that
 * differs and how to resume. */
static int ck_check_run(const zs_ckpt *ck, json_t *m, const zs_run_config *cfg)
{
    ZS_TRY(ck_check_model(ck, json_object_get(m, "model"), &cfg->model));
    const char *prec = ck_str(m, "precision"), *opt = ck_str(m, "optimizer");
    char quoted[48]; /* the manifest's text in an error line: escaped */
    if (!prec || strcmp(prec, zs_dtype_name(cfg->precision)) != 0) {
        zs_file_escape(prec ? prec : "?", prec ? strlen(prec) : 1, quoted, sizeof quoted);
        ZS_FAIL("%s: the checkpoint was trained in %s, this run asks for %s: resume with "
                "--precision %s", ck->manifest, quoted, zs_dtype_name(cfg->precision), quoted);
    }
    if (!opt || strcmp(opt, zs_optim_name(cfg->optimizer)) != 0)
        ZS_FAIL("%s: the checkpoint's optimizer is %s, this run's %s: resume with the same "
                "optimizer", ck->manifest,
                zs_file_escape(opt ? opt : "?", opt ? strlen(opt) : 1, quoted, sizeof quoted),
                zs_optim_name(cfg->optimizer));
    json_int_t v;
    ZS_TRY(ck_int(ck, m, "train_batch_size", 1, INT_MAX, &v));
    if (v != cfg->train_batch_size)
        ZS_FAIL("%s: the checkpoint was trained with a global batch of %lld samples, this run's "
                "is %d: resume with micro-batch x grad-accum x data-parallel ranks = %lld, so "
                "that every step sees the samples it would have", ck->manifest, (long long)v,
                cfg->train_batch_size, (long long)v);
    if (ck->seed != cfg->seed)
        ZS_FAIL("%s: the checkpoint's data were drawn with --seed %llu, this run's seed is "
                "%llu: resume with --seed %llu", ck->manifest, (unsigned long long)ck->seed,
                (unsigned long long)cfg->seed, (unsigned long long)ck->seed);
    json_t *df = json_object_get(json_object_get(m, "data"), "file");
    const char *saved = json_is_string(df) ? json_string_value(df) : NULL;
    if ((saved == NULL) != (cfg->data_file == NULL) ||
        (saved && strcmp(saved, cfg->data_file) != 0)) {
        /* the saved name is the manifest's text: quoted escaped */
        char quoted[320], given[320];
        ZS_FAIL("%s: the checkpoint was trained on %s%s, this run on %s%s: resume with the "
                "same --data", ck->manifest, saved ? "the tokens of " : "synthetic data",
                saved ? zs_file_escape(saved, strlen(saved), quoted, sizeof quoted) : "",
                cfg->data_file ? "the tokens of " : "synthetic data",
                cfg->data_file ? zs_file_escape(cfg->data_file, strlen(cfg->data_file), given,
                                                sizeof given) : "");
    }
    return 0;
}

/* Find the save's folder: path is a --save-dir with latest, or one
 * global_stepK folder; opt names the option in messages. */
static int ck_locate(zs_ckpt *ck, const char *path, const char *opt)
{
    struct stat sb;
    char latest[CK_PATH + 16], name[256];
    int rc = 0;
    snprintf(latest, sizeof latest, "%s/latest", path);
    snprintf(ck->manifest, sizeof ck->manifest, "%s/%s", path, CK_MANIFEST);
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        rc = zs_error_set("%s %s: %s", opt, path,
                          stat(path, &sb) != 0 ? strerror(errno) : "not a folder");
    } else if (stat(ck->manifest, &sb) == 0) { /* one save's folder */
        snprintf(ck->dir, sizeof ck->dir, "%s", path);
    } else if (lstat(latest, &sb) == 0) { /* a symlink too: refused there */
        rc = ck_read_latest(latest, name, sizeof name);
        if (!rc) {
            snprintf(ck->dir, sizeof ck->dir, "%s/%s", path, name);
            snprintf(ck->manifest, sizeof ck->manifest, "%s/%s", ck->dir, CK_MANIFEST);
        }
        /* a re-save of that step killed between ck_publish's two renames:
         * its previous save, moved aside, is the checkpoint */
        if (!rc && lstat(ck->dir, &sb) != 0 && errno == ENOENT) {
            char aside[CK_PATH];
            snprintf(aside, sizeof aside, "%s/.%s.old", path, name);
            if (lstat(aside, &sb) == 0 && S_ISDIR(sb.st_mode)) {
                snprintf(ck->dir, sizeof ck->dir, "%s", aside);
                snprintf(ck->manifest, sizeof ck->manifest, "%s/%s", ck->dir, CK_MANIFEST);
            }
        }
        /* the folder latest names is one zerosim made, not a symlink */
        if (!rc && lstat(ck->dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
            rc = zs_error_set("%s is not a folder (a symlink or a file), not a save zerosim "
                              "made; the checkpoint folder was changed", ck->dir);
    } else {
        rc = zs_error_set("%s %s is not a zerosim checkpoint (it has neither latest nor "
                          "manifest.json): give the --save-dir of a run, or one of its "
                          "global_step folders", opt, path);
    }
    return rc;
}

/* The manifest's bytes, whole (malloc'd in *text, *len of them). */
static int ck_slurp(const char *path, char **text, size_t *len)
{
    *text = NULL;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        ZS_FAIL("cannot read %s: %s", path, errno == ELOOP ? "it is a symlink" : strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size > CK_MANIFEST_MAX) {
        close(fd);
        ZS_FAIL("%s is not a plain file of at most %zu bytes, not a manifest zerosim writes",
                path, CK_MANIFEST_MAX);
    }
    size_t n = 0, cap = (size_t)sb.st_size;
    char *buf = malloc(cap + 1);
    if (!buf) {
        close(fd);
        ZS_FAIL("out of host memory reading %s", path);
    }
    while (n < cap) {
        ssize_t r = pread(fd, buf + n, cap - n, (off_t)n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int err = r < 0 ? errno : 0;
            close(fd);
            free(buf);
            ZS_FAIL("cannot read %s: %s", path, err ? strerror(err) : "it shrank while read");
        }
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return 0;
}

/* The manifest's own checksum: "manifest_xxh3" once in the text, its value
 * the XXH3-64 of the text with that value's digits read as zeros. A
 * version 1 manifest without the key (saved before zerosim wrote one) is
 * read, and marked unverified. */
static int ck_manifest_hash(zs_ckpt *ck, json_t *m, int version, char *text, size_t len)
{
    json_t *v = json_object_get(m, CK_SUM_KEY);
    if (!v && version < 2) {
        ck->unverified = 1;
        return 0;
    }
    if (!v)
        ZS_FAIL("%s: \"%s\" is missing (format version %d has one); the manifest was edited "
                "or is damaged", ck->manifest, CK_SUM_KEY, version);
    const char *said = json_string_value(v);
    size_t kl = strlen(CK_SUM_TEXT);
    char *at = NULL;
    for (size_t i = 0; i + kl + 17 <= len; i++)
        if (text[i] == '"' && !memcmp(text + i, CK_SUM_TEXT, kl)) {
            if (at)
                at = NULL, i = len; /* twice: not a manifest zerosim wrote */
            else
                at = text + i + kl;
        }
    if (!said || strlen(said) != 16 || strspn(said, "0123456789abcdef") != 16 || !at ||
        memcmp(at, said, 16) != 0 || at[16] != '"')
        ZS_FAIL("%s: \"%s\" is not the one 16-digit checksum zerosim writes; the manifest was "
                "edited or is damaged", ck->manifest, CK_SUM_KEY);
    memcpy(at, CK_SUM_ZERO, 16);
    char got[17];
    snprintf(got, sizeof got, "%016" PRIx64, (uint64_t)XXH3_64bits(text, len));
    if (strcmp(got, said) != 0)
        ZS_FAIL("%s: the manifest's checksum does not match its text (xxh3 %s, it says %s): it "
                "was edited or is damaged, and no field of it can be trusted", ck->manifest, got,
                said);
    return 0;
}

/* Every reader of a checkpoint (--resume, export, eval, quantize,
 * compress) reads it here: find the save (ck_locate), read the manifest,
 * check its format, its version and its own checksum, then what it says
 * of the save (sizes, mesh, every file's ranks and range). The manifest
 * stays in *mp for the checks of the reader's run. The files' checksums
 * are checked as they are opened (ck_file_ready), the parameters' hash
 * once they are loaded. */
static int ck_read(zs_ckpt *ck, const char *path, const char *opt, json_t **mp)
{
    *mp = NULL;
    ZS_TRY(ck_locate(ck, path, opt));
    char *text, why[256];
    size_t len = 0;
    ZS_TRY(ck_slurp(ck->manifest, &text, &len));
    json_error_t jerr;
    json_t *m = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    int rc = 0;
    json_int_t ver = 0;
    const char *fmt = ck_str(m, "format");
    if (!m)
        rc = zs_error_set("%s: not valid JSON (line %d: %s); the manifest is damaged",
                          ck->manifest, jerr.line,
                          zs_file_escape(jerr.text, strlen(jerr.text), why, sizeof why));
    else if (!fmt || strcmp(fmt, "zerosim-checkpoint") != 0)
        rc = zs_error_set("%s is not a zerosim checkpoint manifest (no \"format\": "
                          "\"zerosim-checkpoint\")", ck->manifest);
    else if (!(rc = ck_int(ck, m, "version", 1, INT_MAX, &ver)) && ver > ZS_CKPT_FORMAT_VERSION)
        rc = zs_error_set("%s: checkpoint format version %lld is newer than this zerosim reads "
                          "(%d): resume with the zerosim that wrote it, or a newer one",
                          ck->manifest, (long long)ver, ZS_CKPT_FORMAT_VERSION);
    if (!rc)
        rc = ck_manifest_hash(ck, m, (int)ver, text, len);
    free(text);
    if (!rc)
        rc = ck_parse_saved(ck, m);
    if (rc) {
        json_decref(m);
        return rc;
    }
    *mp = m;
    return 0;
}

int zs_ckpt_check(const char *path, const char *opt, char *manifest, size_t cap)
{
    if (cap)
        manifest[0] = '\0';
    zs_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck)
        ZS_FAIL("out of host memory opening the checkpoint %s", path);
    json_t *m;
    int rc = ck_read(ck, path, opt, &m);
    json_decref(m);
    if (!rc && cap)
        snprintf(manifest, cap, "%s", ck->manifest);
    zs_ckpt_close(ck);
    return rc;
}

/* A line for what was not checked: a manifest without its checksum. */
static const char *ck_unverified_note(const zs_ckpt *ck)
{
    return ck->unverified ? "; its manifest has no checksum (saved before zerosim wrote one): "
                            "its fields are unverified, re-save to add one" : "";
}

int zs_ckpt_open(const char *path, const zs_run_config *cfg, int tp_size, zs_ckpt **out,
                 int *steps)
{
    *out = NULL;
    (void)tp_size; /* any: zs_ckpt_load maps the layouts */
    zs_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck)
        ZS_FAIL("out of host memory opening the checkpoint %s", path);
    json_t *m = NULL;
    int rc = ck_read(ck, path, "--resume", &m);
    if (!rc)
        rc = ck_check_run(ck, m, cfg);
    json_decref(m);
    if (!rc && ck->steps >= cfg->steps)
        rc = zs_error_set("--resume: the checkpoint was saved after %d steps and --steps is %d "
                          "(--steps counts from the start of training): ask for more than %d",
                          ck->steps, cfg->steps, ck->steps);
    if (rc) {
        zs_ckpt_close(ck);
        return rc;
    }
    snprintf(ck->describe, sizeof ck->describe, "%s (%d steps on %d rank%s, stage %d)%s",
             ck->dir, ck->steps, ck->world, ck->world == 1 ? "" : "s", ck->stage,
             ck_unverified_note(ck));
    *steps = ck->steps;
    *out = ck;
    return 0;
}

/* Open a saved file the first time this rank needs it, checking its size
 * and checksum against the manifest. */
static int ck_file_ready(zs_ckpt *ck, ck_file *cf, zs_ckpt_io *io)
{
    if (cf->checked)
        return 0;
    char path[CK_PATH + 80];
    snprintf(path, sizeof path, "%s/%s", ck->dir, cf->name);
    uint64_t h, n;
    ZS_TRY(zs_io_hash_file(path, &h, &n));
    io->read += n;
    if (n != cf->bytes)
        ZS_FAIL("%s: %" PRIu64 " bytes, the manifest says %" PRIu64 ": the file is truncated "
                "or was replaced", path, n, cf->bytes);
    if (h != cf->xxh3)
        ZS_FAIL("%s: checksum mismatch (xxh3 %016" PRIx64 ", the manifest says %016" PRIx64
                "): the file is damaged", path, h, cf->xxh3);
    ZS_TRY(zs_st_open(&cf->f, path));
    cf->checked = 1;
    return 0;
}

/* Fill buf with elements [lo, lo + n) of state k of TP rank tp, from every
 * saved file that holds a part of them; the padding is zero. */
static int ck_fill(zs_ckpt *ck, int k, int tp, uint64_t lo, size_t n, float *buf, zs_ckpt_io *io)
{
    memset(buf, 0, n * sizeof(float));
    for (int i = 0; i < ck->nfiles; i++) {
        ck_file *cf = &ck->files[i];
        uint64_t a = lo > cf->begin ? lo : cf->begin;
        uint64_t b = lo + n < cf->end ? lo + n : cf->end;
        if (b > ck->num_params)
            b = ck->num_params;
        if (cf->tp != tp || a >= b)
            continue;
        ZS_TRY(ck_file_ready(ck, cf, io));
        const zs_st_tensor *t = zs_st_find(&cf->f, zs_ckpt_state_name[k]);
        if (!t || t->dtype != ZS_ST_F32 || zs_st_numel(t) != cf->end - cf->begin)
            ZS_FAIL("%s/%s: tensor \"%s\" is missing or has another size than the manifest "
                    "says", ck->dir, cf->name, zs_ckpt_state_name[k]);
        ZS_TRY(zs_st_read(&cf->f, t, (a - cf->begin) * 4, buf + (a - lo), (size_t)(b - a) * 4));
        io->tensor_read += (b - a) * 4;
        io->read += (b - a) * 4;
    }
    return 0;
}

/* Resharding across tensor-parallel sizes: where each element of the
 * tp = 1 model lives in the saved layouts, (saved TP rank << 48) | element,
 * replicated elements from saved TP rank 0. */
#define CK_INV_SHIFT 48
static int ck_build_inverse(const zs_ckpt *ck, const zs_model_config *now, uint64_t **out)
{
    size_t total = zs_model_count_params(now);
    uint64_t *inv = malloc(total * sizeof *inv + 1);
    if (!inv)
        ZS_FAIL("out of host memory mapping %zu parameters between tensor-parallel layouts",
                total);
    memset(inv, 0xff, total * sizeof *inv);
    zs_model_config mc = *now;
    mc.tp = ck->tp;
    mc.sequence_parallel = 0; /* the layout does not depend on it */
    for (int q = 0; q < ck->tp; q++) {
        zs_model *m;
        mc.tp_rank = q;
        if (zs_model_create(&mc, &m)) {
            free(inv);
            return -1;
        }
        size_t n = zs_model_layout(m)->num_params;
        for (size_t j = 0; j < n;) {
            size_t run, g = zs_model_tp_global_offset(m, j, &run);
            if (run == 0 || g == SIZE_MAX || g + run > total) {
                zs_model_destroy(m);
                free(inv);
                ZS_FAIL("internal: element %zu of saved TP rank %d maps outside the model", j, q);
            }
            for (size_t i = 0; i < run; i++)
                if (inv[g + i] == UINT64_MAX)
                    inv[g + i] = ((uint64_t)q << CK_INV_SHIFT) | (j + i);
            j += run;
        }
        zs_model_destroy(m);
    }
    *out = inv;
    return 0;
}

/* Elements [lo, lo + n) of state k of this rank's layout, from a checkpoint
 * of another tensor-parallel size, read in runs that are consecutive in
 * both layouts. */
static int ck_fill_mapped(zs_ckpt *ck, int k, const zs_model *m, const uint64_t *inv,
                          size_t lo, size_t n, float *buf, zs_ckpt_io *io)
{
    size_t np = zs_model_layout(m)->num_params;
    memset(buf, 0, n * sizeof(float));
    for (size_t j = lo; j < lo + n && j < np;) {
        size_t run, g = zs_model_tp_global_offset(m, j, &run);
        if (run > lo + n - j)
            run = lo + n - j;
        for (size_t i = 0; i < run;) {
            uint64_t a = inv[g + i];
            size_t len = 1;
            while (i + len < run && inv[g + i + len] == a + len)
                len++;
            ZS_TRY(ck_fill(ck, k, (int)(a >> CK_INV_SHIFT),
                           a & (((uint64_t)1 << CK_INV_SHIFT) - 1), len, buf + (j - lo) + i, io));
            i += len;
        }
        j += run;
    }
    return 0;
}

/* DeepSpeed's layout: elements [lo, lo + n) of expert state k of the
 * experts at ep position q, from the files of the ranks at that position
 * (dp rank g P + q holds the edp shard g); the padding is zero. */
static int ck_fill_experts(zs_ckpt *ck, int k, int q, uint64_t lo, size_t n, float *buf,
                           zs_ckpt_io *io)
{
    memset(buf, 0, n * sizeof(float));
    for (int i = 0; i < ck->nfiles; i++) {
        ck_file *cf = &ck->files[i];
        if (cf->dp % ck->xep != q)
            continue;
        uint64_t fb = (uint64_t)(cf->dp / ck->xep) * ck->xshard, fe = fb + ck->xshard;
        uint64_t a = lo > fb ? lo : fb, b = lo + n < fe ? lo + n : fe;
        if (a >= b)
            continue;
        ZS_TRY(ck_file_ready(ck, cf, io));
        const zs_st_tensor *t = zs_st_find(&cf->f, zs_ckpt_xstate_name[k]);
        if (!t || t->dtype != ZS_ST_F32 || zs_st_numel(t) != ck->xshard)
            ZS_FAIL("%s/%s: tensor \"%s\" is missing or has another size than the manifest "
                    "says", ck->dir, cf->name, zs_ckpt_xstate_name[k]);
        ZS_TRY(zs_st_read(&cf->f, t, (a - fb) * 4, buf + (a - lo), (size_t)(b - a) * 4));
        io->tensor_read += (b - a) * 4;
        io->read += (b - a) * 4;
    }
    return 0;
}

/* A checkpoint in DeepSpeed's layout for --ep resumes in that layout alone,
 * on the same data-parallel ranks and --ep (its experts' states are dealt
 * over the expert-data-parallel groups); one in --ep 1's layout, outside
 * it. */
static int ck_check_ep_layout(const zs_ckpt *ck, const zs_engine *e, const zs_ckpt_place *pl)
{
    int split = zs_engine_ep_split(e);
    int P = zs_model_get_config(zs_engine_model(e))->moe_ep;
    if (ck->xep && (!split || ck->xep != P || ck->dp != pl->dp_size ||
                    ck->xpadded != zs_engine_expert_padded(e)))
        ZS_FAIL("%s: saved in DeepSpeed's layout for --ep %d on %d data-parallel ranks (the "
                "experts' states dealt over its expert-data-parallel groups): resume with --ep "
                "%d on %d data-parallel ranks, in that layout (the same --deterministic or "
                "--ep-layout as the run that saved it)", ck->manifest, ck->xep, ck->dp, ck->xep,
                ck->dp);
    if (!ck->xep && split)
        ZS_FAIL("%s: saved in --ep 1's layout (every expert in the flat arrays), and this run "
                "takes DeepSpeed's layout for --ep %d: resume with --ep 1, or with the --ep, "
                "--deterministic and --ep-layout that saved it", ck->manifest, P);
    return 0;
}

static int ck_load_local(zs_ckpt *ck, zs_engine *e, const zs_ckpt_place *pl, zs_ckpt_io *io)
{
    const zs_partition *p = zs_engine_partition(e);
    const zs_model *model = zs_engine_model(e);
    ZS_TRY(ck_check_ep_layout(ck, e, pl));
    int same_tp = ck->tp == pl->tp_size;
    if (same_tp && p->num_params != ck->num_params)
        ZS_FAIL("%s: %" PRIu64 " parameters per tensor-parallel rank, this run has %zu; the "
                "manifest is damaged", ck->manifest, ck->num_params, p->num_params);
    uint64_t *inv = NULL;
    if (!same_tp)
        ZS_TRY(ck_build_inverse(ck, zs_model_get_config(model), &inv));
    float *buf = malloc(ZS_INIT_CHUNK * sizeof(float));
    if (!buf) {
        free(inv);
        ZS_FAIL("out of host memory loading the checkpoint");
    }
    int rc = 0;
    for (int k = 0; k < ZS_STATE_RESIDUAL && !rc; k++) {
        if (!zs_engine_has_state(e, (zs_state_kind)k))
            continue;
        size_t lo, n;
        zs_engine_load_range(e, (zs_state_kind)k, &lo, &n);
        for (size_t off = 0; off < n && !rc; off += ZS_INIT_CHUNK) {
            size_t m = n - off < ZS_INIT_CHUNK ? n - off : ZS_INIT_CHUNK;
            rc = same_tp ? ck_fill(ck, k, pl->tp_rank, lo + off, m, buf, io)
                         : ck_fill_mapped(ck, k, model, inv, lo + off, m, buf, io);
            if (!rc)
                rc = zs_engine_write_state(e, (zs_state_kind)k, lo + off, m, buf);
        }
    }
    free(inv);
    /* DeepSpeed's layout: the expert store of this rank's ep position */
    for (int k = 0; k < ZS_STATE_RESIDUAL && ck->xep && !rc; k++) {
        if (!zs_engine_has_state(e, (zs_state_kind)k))
            continue;
        size_t lo, n;
        zs_engine_expert_load_range(e, (zs_state_kind)k, &lo, &n);
        for (size_t off = 0; off < n && !rc; off += ZS_INIT_CHUNK) {
            size_t m = n - off < ZS_INIT_CHUNK ? n - off : ZS_INIT_CHUNK;
            rc = ck_fill_experts(ck, k, pl->dp_rank % ck->xep, lo + off, m, buf, io);
            if (!rc)
                rc = zs_engine_write_expert_state(e, (zs_state_kind)k, lo + off, m, buf);
        }
    }
    /* the residual is this rank's own: only on the same ranks */
    ck_file *mine = NULL;
    for (int i = 0; i < ck->nfiles; i++)
        if (ck->files[i].tp == pl->tp_rank && ck->files[i].dp == pl->dp_rank)
            mine = &ck->files[i];
    size_t rlo, rn; /* gradient compression's residual, or 1-bit Adam's errors */
    zs_engine_state_range(e, ZS_STATE_RESIDUAL, &rlo, &rn);
    if (!rc && zs_engine_has_state(e, ZS_STATE_RESIDUAL) && mine && mine->residual) {
        if (ck->dp != pl->dp_size || ck->padded != p->padded || !same_tp) {
            rc = zs_error_set("%s: the error-feedback residuals (gradient compression's or "
                              "1-bit Adam's) belong to %d data-parallel x %d tensor-parallel "
                              "ranks and cannot be dealt to %d x %d: resume on that mesh, or "
                              "with --compression none", ck->manifest, ck->dp, ck->tp,
                              pl->dp_size, pl->tp_size);
        } else {
            rc = ck_file_ready(ck, mine, io);
            const zs_st_tensor *t = rc ? NULL : zs_st_find(&mine->f, "residual");
            if (!rc && (!t || zs_st_numel(t) != rn))
                rc = zs_error_set("%s/%s: tensor \"residual\" is missing or has another size",
                                  ck->dir, mine->name);
            for (size_t off = 0; off < rn && !rc; off += ZS_INIT_CHUNK) {
                size_t m = rn - off < ZS_INIT_CHUNK ? rn - off : ZS_INIT_CHUNK;
                rc = zs_st_read(&mine->f, t, off * 4, buf, m * 4);
                io->tensor_read += m * 4;
                io->read += m * 4;
                if (!rc)
                    rc = zs_engine_write_state(e, ZS_STATE_RESIDUAL, off, m, buf);
            }
        }
    }
    free(buf);
    if (!rc)
        zs_engine_set_counters(e, &ck->counters);
    return rc;
}

int zs_ckpt_load(zs_ckpt *ck, zs_engine *e, const zs_ckpt_place *pl, zs_ckpt_io *io,
                 char hash[17])
{
    hash[0] = '\0';
    ZS_TRY(zs_ckpt_agree(pl->world, ck_load_local(ck, e, pl, io)));
    /* the parameters as loaded must hash as they did when saved */
    int rc = zs_engine_param_hash(e, hash);
    if (!rc && zs_comm_rank(pl->world) == 0 && strcmp(hash, ck->param_hash) != 0)
        rc = zs_error_set("%s: the parameters loaded hash to %s, the manifest says %s: the "
                          "checkpoint is damaged", ck->manifest, hash, ck->param_hash);
    return zs_ckpt_agree(pl->world, rc);
}

/* ---- the parameters alone (quantize, compress, eval) ------------------------------- */

/* The manifest's "model" as a configuration; one line naming the manifest. */
static int ck_model_from_json(const zs_ckpt *ck, json_t *j, zs_model_config *mc)
{
    memset(mc, 0, sizeof *mc);
    const char *kind = ck_str(j, "kind");
    json_int_t v;
    if (kind && !strcmp(kind, "llama"))
        ZS_FAIL("%s: the checkpoint holds a Llama-family model, and only the GPT's and the "
                "MLP's parameters are read from a checkpoint here: resume it with zerosim train "
                "--resume instead", ck->manifest);
    if (!kind || (strcmp(kind, "gpt") && strcmp(kind, "mlp")))
        ZS_FAIL("%s: \"model\" has no kind gpt or mlp; the manifest is damaged", ck->manifest);
    if (!strcmp(kind, "gpt")) {
        static const char *const k[5] = {"n_layer", "n_embd", "n_head", "seq_len", "vocab"};
        int *dst[5] = {&mc->n_layer, &mc->n_embd, &mc->n_head, &mc->seq_len, &mc->vocab};
        mc->kind = ZS_MODEL_GPT;
        for (int i = 0; i < 5; i++) {
            ZS_TRY(ck_int(ck, j, k[i], 1, INT_MAX, &v));
            *dst[i] = (int)v;
        }
        json_t *x = json_object_get(j, "moe_experts");
        if (x && !(json_is_integer(x) && json_integer_value(x) == 0))
            ZS_FAIL("%s: the checkpoint holds a mixture of experts, and only dense models' "
                    "parameters are read from a checkpoint here: resume it with zerosim train "
                    "--resume instead", ck->manifest);
    } else {
        mc->kind = ZS_MODEL_MLP;
        ZS_TRY(ck_int(ck, j, "input_dim", 1, INT_MAX, &v));
        mc->input_dim = (int)v;
        ZS_TRY(ck_int(ck, j, "n_classes", 1, INT_MAX, &v));
        mc->n_classes = (int)v;
        json_t *w = json_object_get(j, "widths");
        if (!json_is_array(w) || json_array_size(w) > ZS_MLP_MAX_HIDDEN)
            ZS_FAIL("%s: \"widths\" is missing or too long; the manifest is damaged",
                    ck->manifest);
        mc->n_hidden = (int)json_array_size(w);
        for (int i = 0; i < mc->n_hidden; i++) {
            json_t *x = json_array_get(w, (size_t)i);
            if (!json_is_integer(x) || json_integer_value(x) < 1 ||
                json_integer_value(x) > INT_MAX)
                ZS_FAIL("%s: \"widths\" holds a value that is not a width", ck->manifest);
            mc->widths[i] = (int)json_integer_value(x);
        }
        const char *act = ck_str(j, "activation");
        mc->act = act && !strcmp(act, "gelu") ? ZS_ACT_GELU : ZS_ACT_RELU;
    }
    if (zs_model_config_validate(mc))
        ZS_FAIL("%s: the model it describes is not valid (%s)", ck->manifest, zs_error_msg());
    return 0;
}

int zs_ckpt_read_params(const char *path, const char *opt, zs_model_config *mc, uint64_t *seed,
                        float **params, size_t *n)
{
    *params = NULL;
    *n = 0;
    zs_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck)
        ZS_FAIL("out of host memory opening the checkpoint %s", path);
    json_t *m = NULL;
    int rc = ck_read(ck, path, opt, &m);
    if (!rc)
        rc = ck_model_from_json(ck, json_object_get(m, "model"), mc);
    json_decref(m);
    if (!rc && ck->tp != 1)
        rc = zs_error_set("%s: saved with tensor parallelism (tp %d); %s reads tp = 1 saves: "
                          "write the weights first (zerosim export --from %s --out FILE)",
                          ck->manifest, ck->tp, opt, path);
    if (!rc && ck->num_params != zs_model_count_params(mc))
        rc = zs_error_set("%s: num_params %llu is not the %zu of the dense model its \"model\" "
                          "describes: a Mixture-of-Experts run (which %s does not read yet), "
                          "or a damaged manifest", ck->manifest,
                          (unsigned long long)ck->num_params, zs_model_count_params(mc), opt);
    size_t total = rc ? 0 : (size_t)ck->num_params;
    if (!rc && !(*params = malloc(total * sizeof(float) + 1)))
        rc = zs_error_set("out of host memory reading %s", ck->manifest);
    zs_ckpt_io io = {0};
    if (!rc)
        rc = ck_fill(ck, ZS_STATE_MASTER, 0, 0, total, *params, &io);
    /* the parameters as read must hash as they did when saved */
    char hash[17];
    if (!rc)
        zs_param_hash(*params, total, hash);
    if (!rc && strcmp(hash, ck->param_hash) != 0)
        rc = zs_error_set("%s: the parameters read hash to %s, the manifest says %s: the "
                          "checkpoint is damaged", ck->manifest, hash, ck->param_hash);
    if (!rc && ck->unverified)
        fprintf(stderr, "zerosim: note: %s%s\n", ck->manifest, ck_unverified_note(ck));
    if (rc) {
        free(*params);
        *params = NULL;
        total = 0;
    }
    *seed = ck->seed;
    *n = total;
    zs_ckpt_close(ck);
    return rc;
}
