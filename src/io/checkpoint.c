/* zerosim — sharded training checkpoints, saving (see zerosim/checkpoint.h;
 * reading is ckpt_load.c). */
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

const char *const zs_ckpt_state_name[ZS_STATE_N] = {"master", "exp_avg", "exp_avg_sq",
                                                    "residual"};
const char *const zs_ckpt_xstate_name[ZS_STATE_RESIDUAL] = {"expert_master", "expert_exp_avg",
                                                            "expert_exp_avg_sq"};

/* ---- small helpers ------------------------------------------------------------ */

static int ck_rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p) != 0 && errno != ENOENT;
}

/* Remove a folder and what is in it (missing is fine). */
static int ck_rmtree(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return 0;
    if (nftw(path, ck_rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        ZS_FAIL("cannot remove %s: %s", path, strerror(errno));
    return 0;
}

/* Remove what killed saves left in dir: .global_stepK.tmp folders (never
 * the only copy of a save) and .global_stepK.old ones whose global_stepK
 * exists. A .global_stepK.old without its global_stepK is the only copy of
 * that save (a re-save was killed between ck_publish's two renames, and
 * latest may name it): it takes its name back. */
static int ck_clean_leftovers(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        ZS_FAIL("cannot read the folder %s: %s", dir, strerror(errno));
    struct dirent *de;
    int rc = 0, restored = 0;
    while (!rc && (de = readdir(d))) {
        size_t n = strlen(de->d_name);
        int is_tmp = n > 4 && !strcmp(de->d_name + n - 4, ".tmp");
        int is_old = n > 4 && !strcmp(de->d_name + n - 4, ".old");
        if (strncmp(de->d_name, ".global_step", 12) != 0 || !(is_tmp || is_old) ||
            n - 5 >= CK_PATH / 2)
            continue;
        char p[CK_PATH], final[CK_PATH];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        snprintf(final, sizeof final, "%s/%.*s", dir, (int)(n - 5), de->d_name + 1);
        if (is_old && lstat(final, &sb) != 0 && errno == ENOENT && lstat(p, &sb) == 0 &&
            S_ISDIR(sb.st_mode)) {
            if (rename(p, final) != 0)
                rc = zs_error_set("cannot move %s back to %s: %s", p, final, strerror(errno));
            restored = 1;
        } else {
            rc = ck_rmtree(p);
        }
    }
    closedir(d);
    if (!rc && restored)
        rc = zs_io_sync_dir(dir);
    return rc;
}

/* Agree over the world after a local result: 0 when every rank succeeded,
 * rc when this rank failed, 1 when only another rank did (its message is
 * the one to print). */
int zs_ckpt_agree(zs_comm_t w, int rc)
{
    int any = 0;
    if (zs_comm_agree(w, rc != 0, zs_comm_timeout(w), &any)) {
        char why[1024];
        snprintf(why, sizeof why, "%s", rc ? zs_error_msg() : "a rank stopped responding "
                 "while the checkpoint was written or read");
        zs_comm_stop(w, why);
    }
    if (!any)
        return 0;
    return rc ? rc : 1;
}


/* The model's shape as JSON (what must match to load). */
json_t *zs_ckpt_model_json(const zs_model_config *m)
{
    if (m->kind == ZS_MODEL_LLAMA) /* every field that changes the bytes */
        return json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:i, "
                         "s:i, s:i, s:i, s:i, s:i}",
                         "kind", "llama", "n_layer", m->n_layer, "n_embd", m->n_embd, "n_head",
                         m->n_head, "n_kv_head", m->n_kv_head, "ffn_hidden", m->ffn_hidden,
                         "seq_len", m->seq_len, "vocab", m->vocab, "norm_eps", m->norm_eps,
                         "rope_theta", m->rope_theta, "rope_scaling_factor",
                         m->rope_scaling_factor, "rope_low_freq_factor", m->rope_low_freq_factor,
                         "rope_high_freq_factor", m->rope_high_freq_factor,
                         "rope_original_max_pos", m->rope_original_max_pos, "qkv_bias",
                         m->qkv_bias, "tie_embeddings", m->tie_embeddings, "moe_experts",
                         m->moe_experts, "moe_every", m->moe_every, "moe_top_k", m->moe_top_k);
    if (m->kind == ZS_MODEL_GPT && m->moe_experts > 0) /* a MoE model: its experts too */
        return json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "kind", "gpt", "n_layer",
                         m->n_layer, "n_embd", m->n_embd, "n_head", m->n_head, "seq_len",
                         m->seq_len, "vocab", m->vocab, "moe_experts", m->moe_experts,
                         "moe_every", m->moe_every);
    if (m->kind == ZS_MODEL_GPT)
        return json_pack("{s:s, s:i, s:i, s:i, s:i, s:i}", "kind", "gpt", "n_layer", m->n_layer,
                         "n_embd", m->n_embd, "n_head", m->n_head, "seq_len", m->seq_len,
                         "vocab", m->vocab);
    json_t *w = json_array();
    for (int i = 0; i < m->n_hidden; i++)
        json_array_append_new(w, json_integer(m->widths[i]));
    return json_pack("{s:s, s:i, s:i, s:o, s:s}", "kind", "mlp", "input_dim", m->input_dim,
                     "n_classes", m->n_classes, "widths", w, "activation",
                     m->act == ZS_ACT_GELU ? "gelu" : "relu");
}

/* ---- saving ----------------------------------------------------------------------- */

uint64_t zs_ckpt_tensor_bytes(const zs_engine *e)
{
    const zs_partition *p = zs_engine_partition(e);
    uint64_t n = p->shard * (1 + (uint64_t)zs_engine_has_state(e, ZS_STATE_EXP_AVG) +
                             (uint64_t)zs_engine_has_state(e, ZS_STATE_EXP_AVG_SQ));
    size_t rlo, rn; /* the error-feedback residual: this rank's own */
    zs_engine_state_range(e, ZS_STATE_RESIDUAL, &rlo, &rn);
    if (zs_engine_has_state(e, ZS_STATE_RESIDUAL))
        n += rn;
    size_t xlo, xs;
    zs_engine_expert_shard(e, &xlo, &xs);
    for (int k = 0; k < ZS_STATE_RESIDUAL; k++)
        n += zs_engine_has_state(e, (zs_state_kind)k) ? xs : 0;
    return 4 * n;
}

/* Test hook (tests/test_checkpoint.sh): ZEROSIM_TEST_STALL_AT=save:K makes
 * the last rank stall once its shard of the save after K steps is written,
 * before the save completes, so that a test can kill the run mid-save. */
static void ck_test_stall(const zs_ckpt_place *pl, const char *path, int steps)
{
    const char *s = getenv("ZEROSIM_TEST_STALL_AT");
    if (!s || strncmp(s, "save:", 5) != 0 || atoi(s + 5) != steps ||
        zs_comm_rank(pl->world) != zs_comm_size(pl->world) - 1)
        return;
    fprintf(stderr, "zerosim: test hook: rank %d stalls after writing %s\n",
            zs_comm_rank(pl->world), path);
    fflush(stderr);
    for (;;)
        pause();
}

/* This rank's shard file: its partition's part of the master and moments,
 * and its residual. */
static int ck_write_shard(const char *path, zs_engine *e, const zs_ckpt_place *pl,
                          uint64_t *hash, uint64_t *bytes, uint64_t *tensor_bytes)
{
    const zs_partition *p = zs_engine_partition(e);
    zs_st_writer w;
    ZS_TRY(zs_st_writer_open(&w, path));
    float *buf = malloc(ZS_INIT_CHUNK * sizeof(float));
    int rc = buf ? 0 : zs_error_set("out of host memory writing %s", path);
    char v[64];
    snprintf(v, sizeof v, "%zu", p->shard_begin);
    if (!rc)
        rc = zs_st_writer_meta(&w, "begin", v);
    snprintf(v, sizeof v, "%d", pl->tp_rank);
    if (!rc)
        rc = zs_st_writer_meta(&w, "tp_rank", v);
    snprintf(v, sizeof v, "%d", pl->dp_rank);
    if (!rc)
        rc = zs_st_writer_meta(&w, "dp_rank", v);
    for (int k = 0; k < ZS_STATE_N && !rc; k++) {
        if (!zs_engine_has_state(e, (zs_state_kind)k))
            continue;
        size_t rlo, rn;
        zs_engine_state_range(e, ZS_STATE_RESIDUAL, &rlo, &rn);
        uint64_t n = k == ZS_STATE_RESIDUAL ? rn : p->shard;
        rc = zs_st_writer_add(&w, zs_ckpt_state_name[k], ZS_ST_F32, 1, &n);
    }
    size_t xlo, xs;
    zs_engine_expert_shard(e, &xlo, &xs);
    for (int k = 0; k < ZS_STATE_RESIDUAL && xs && !rc; k++) {
        uint64_t n = xs;
        if (zs_engine_has_state(e, (zs_state_kind)k))
            rc = zs_st_writer_add(&w, zs_ckpt_xstate_name[k], ZS_ST_F32, 1, &n);
    }
    for (int k = 0; k < ZS_STATE_N && !rc; k++) {
        if (!zs_engine_has_state(e, (zs_state_kind)k))
            continue;
        size_t lo = p->shard_begin, n = p->shard;
        if (k == ZS_STATE_RESIDUAL)
            zs_engine_state_range(e, ZS_STATE_RESIDUAL, &lo, &n);
        for (size_t off = 0; off < n && !rc; off += ZS_INIT_CHUNK) {
            size_t m = n - off < ZS_INIT_CHUNK ? n - off : ZS_INIT_CHUNK;
            rc = zs_engine_read_state(e, (zs_state_kind)k, lo + off, m, buf);
            if (!rc)
                rc = zs_st_writer_data(&w, buf, m * 4);
        }
    }
    for (int k = 0; k < ZS_STATE_RESIDUAL && xs && !rc; k++) {
        if (!zs_engine_has_state(e, (zs_state_kind)k))
            continue;
        for (size_t off = 0; off < xs && !rc; off += ZS_INIT_CHUNK) {
            size_t m = xs - off < ZS_INIT_CHUNK ? xs - off : ZS_INIT_CHUNK;
            rc = zs_engine_read_expert_state(e, (zs_state_kind)k, xlo + off, m, buf);
            if (!rc)
                rc = zs_st_writer_data(&w, buf, m * 4);
        }
    }
    free(buf);
    if (rc) {
        zs_st_writer_abort(&w);
        return rc;
    }
    *bytes = w.f.bytes;         /* the header and the tensors, as written */
    *tensor_bytes = w.written;  /* the tensors' bytes given to the writer */
    return zs_st_writer_commit(&w, hash);
}

/* Rank 0: the manifest of the folder, from every rank's file record. */
enum { CK_REC = 8 }; /* tp, dp, begin, end, bytes, xxh3, residual, tensor bytes */
static int ck_write_manifest(const char *path, int steps, const zs_run_config *cfg, zs_engine *e,
                             const zs_ckpt_place *pl, const uint64_t *recs, int world,
                             const char *param_hash)
{
    const zs_partition *p = zs_engine_partition(e);
    zs_engine_counters c;
    zs_engine_get_counters(e, &c);
    json_t *files = json_array();
    for (int q = 0; q < world; q++) {
        const uint64_t *r = recs + (size_t)q * CK_REC;
        char name[64], hx[17];
        snprintf(name, sizeof name, "shard_tp%d_dp%05d.safetensors", (int)r[0], (int)r[1]);
        snprintf(hx, sizeof hx, "%016" PRIx64, r[5]);
        json_array_append_new(files, json_pack("{s:s, s:i, s:i, s:I, s:I, s:I, s:s, s:b}",
                                               "name", name, "tp_rank", (int)r[0], "dp_rank",
                                               (int)r[1], "begin", (json_int_t)r[2], "end",
                                               (json_int_t)r[3], "bytes", (json_int_t)r[4],
                                               "xxh3", hx, "residual", (int)r[6]));
    }
    json_t *m = json_pack(
        "{s:s, s:i, s:s, s:i, s:o, s:s, s:s, s:i, s:{s:i, s:i, s:i}, s:b, s:I, s:I, s:I, s:I,"
        " s:s, s:b, s:{s:i, s:f, s:i, s:i, s:i}, s:{s:I, s:I}, s:{s:I, s:s}, s:s, s:o}",
        "format", "zerosim-checkpoint", "version", ZS_CKPT_FORMAT_VERSION, CK_SUM_KEY,
        CK_SUM_ZERO, "steps", steps,
        "model", zs_ckpt_model_json(&cfg->model), "precision", zs_dtype_name(cfg->precision), "optimizer", zs_optim_name(cfg->optimizer), "stage",
        cfg->stage, "mesh", "world", world, "dp", pl->dp_size, "tp", pl->tp_size,
        "deterministic", cfg->deterministic, "num_params", (json_int_t)p->num_params, "padded",
        (json_int_t)p->padded, "shard", (json_int_t)p->shard, "train_batch_size",
        (json_int_t)cfg->train_batch_size, "compression",
        cfg->compression.kind == ZS_COMP_NONE ? "none" : "on", "residuals",
        zs_engine_has_state(e, ZS_STATE_RESIDUAL),
        "optimizer_state", "step", c.t, "loss_scale", (double)c.loss_scale, "cur_hysteresis",
        c.cur_hysteresis, "good_steps", c.good_steps, "overflows", c.overflows,
        /* the data: sample i of the run is drawn from (seed, i) alone, so the
         * position is the next sample; zerosim keeps no other random state */
        "data", "next_sample", (json_int_t)((uint64_t)steps * (uint64_t)cfg->train_batch_size),
        "seed", (json_int_t)cfg->seed, "rng", "seed", (json_int_t)cfg->seed, "kind",
        "counter-based: every random number is a function of (seed, index)", "param_hash",
        param_hash, "files", files);
    if (!m)
        ZS_FAIL("out of host memory writing %s", path);
    /* DeepSpeed's layout for --ep: the expert store, each file its rank's
     * shard over the expert-data-parallel group (store elements
     * [edp rank x shard, + shard) of the experts of its ep position) */
    if (zs_engine_ep_split(e)) {
        size_t xlo, xs;
        zs_engine_expert_shard(e, &xlo, &xs);
        json_object_set_new(m, "experts",
                            json_pack("{s:s, s:i, s:I, s:I}", "layout", "deepspeed", "ep",
                                      cfg->model.moe_ep, "padded",
                                      (json_int_t)zs_engine_expert_padded(e), "shard",
                                      (json_int_t)xs));
    }
    /* the token file (--data), or synthetic data: a resumed run must read the same */
    json_object_set_new(json_object_get(m, "data"), "file",
                        cfg->data_file ? json_string(cfg->data_file) : json_null());
    char *text = json_dumps(m, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(m);
    size_t len = text ? strlen(text) : 0;
    char *full = text ? realloc(text, len + 2) : NULL;
    if (!full) {
        free(text);
        ZS_FAIL("out of host memory writing %s", path);
    }
    text = full;
    memcpy(text + len++, "\n", 2);
    /* the checksum of the text, written over its zeros */
    char *sum = strstr(text, CK_SUM_TEXT CK_SUM_ZERO "\"");
    if (!sum) {
        free(text);
        ZS_FAIL("internal: the manifest %s has no %s", path, CK_SUM_KEY);
    }
    char hx[17];
    snprintf(hx, sizeof hx, "%016" PRIx64, (uint64_t)XXH3_64bits(text, len));
    memcpy(sum + strlen(CK_SUM_TEXT), hx, 16);
    zs_afile a;
    int rc = zs_afile_open(&a, path);
    if (!rc && !(rc = zs_afile_write(&a, text, len)))
        rc = zs_afile_commit(&a, NULL);
    else if (!rc)
        zs_afile_abort(&a);
    free(text);
    return rc;
}

/* Test hook (tests/test_ckpt_publish.sh): ZEROSIM_FAULT_PUBLISH=N makes
 * the process _exit(99) on reaching point N of the publish sequence, as a
 * rank killed there would stop. */
static void ck_fault_point(int n, const char *where)
{
    const char *s = getenv("ZEROSIM_FAULT_PUBLISH");
    if (!s || atoi(s) != n)
        return;
    fprintf(stderr, "zerosim: test hook: exits at publish point %d, %s\n", n, where);
    fflush(stderr);
    _exit(99);
}

/* Rank 0: the folder takes its name and latest moves to it. At every point
 * the save dir holds a checkpoint that resumes: the one latest names, or,
 * between the two renames of a re-save of the same step, that step's
 * previous save as .global_stepK.old, which readers take when global_stepK
 * is missing (ck_locate) and the next save renames back
 * (ck_clean_leftovers). The previous save is removed only once latest is
 * written. */
static int ck_publish(const char *dir, const char *tmp, const char *name)
{
    char final[CK_PATH], old[CK_PATH], latest[CK_PATH];
    snprintf(final, sizeof final, "%s/%s", dir, name);
    snprintf(old, sizeof old, "%s/.%s.old", dir, name);
    snprintf(latest, sizeof latest, "%s/latest", dir);
    ck_fault_point(1, "before the new save is synced");
    ZS_TRY(zs_io_sync_dir(tmp));
    struct stat sb;
    int had = lstat(final, &sb) == 0; /* a save of the same step before (or a symlink) */
    if (had) {
        ck_fault_point(2, "before an older copy aside is removed");
        ZS_TRY(ck_rmtree(old));
        ck_fault_point(3, "before the previous save of the step is moved aside");
        if (rename(final, old) != 0)
            ZS_FAIL("cannot move %s aside: %s", final, strerror(errno));
        ck_fault_point(4, "with the previous save aside, before the new one takes its name");
    }
    if (rename(tmp, final) != 0)
        ZS_FAIL("cannot rename %s to %s: %s", tmp, final, strerror(errno));
    ck_fault_point(5, "before the folder is synced");
    ZS_TRY(zs_io_sync_dir(dir));
    ck_fault_point(6, "before latest moves");
    zs_afile a;
    ZS_TRY(zs_afile_open(&a, latest));
    int rc = zs_afile_write(&a, name, strlen(name));
    if (!rc)
        rc = zs_afile_write(&a, "\n", 1);
    if (!rc)
        rc = zs_afile_commit(&a, NULL);
    else
        zs_afile_abort(&a);
    ck_fault_point(7, "before the previous save is removed");
    if (!rc && had)
        rc = ck_rmtree(old);
    ck_fault_point(8, "once published");
    return rc;
}

int zs_ckpt_save(const char *dir, int steps, const zs_run_config *cfg, zs_engine *e,
                 const zs_ckpt_place *pl, zs_ckpt_io *io)
{
    zs_comm_t w = pl->world;
    int rank = zs_comm_rank(w), world = zs_comm_size(w), rc = 0;
    char name[32], tmp[CK_PATH], file[CK_PATH + 64];
    snprintf(name, sizeof name, "global_step%d", steps);
    if ((size_t)snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name) >= sizeof tmp)
        rc = zs_error_set("--save-dir: the path is too long: %s", dir);
    /* rank 0 makes a clean temporary folder */
    if (!rc && rank == 0) {
        if (mkdir(dir, 0777) != 0 && errno != EEXIST)
            rc = zs_error_set("--save-dir %s: cannot create it: %s; its parent folder must "
                              "exist and be writable", dir, strerror(errno));
        if (!rc) /* what killed saves left, this one's included */
            rc = ck_clean_leftovers(dir);
        if (!rc && mkdir(tmp, 0777) != 0)
            rc = zs_error_set("--save-dir %s: cannot create %s: %s", dir, tmp, strerror(errno));
    }
    ZS_TRY(zs_ckpt_agree(w, rc));
    /* every rank its shard */
    const zs_partition *p = zs_engine_partition(e);
    snprintf(file, sizeof file, "%s/shard_tp%d_dp%05d.safetensors", tmp, pl->tp_rank,
             pl->dp_rank);
    uint64_t rec[CK_REC] = {(uint64_t)pl->tp_rank, (uint64_t)pl->dp_rank, p->shard_begin,
                            p->shard_begin + p->shard, 0, 0,
                            (uint64_t)zs_engine_has_state(e, ZS_STATE_RESIDUAL), 0};
    rc = ck_write_shard(file, e, pl, &rec[5], &rec[4], &rec[7]);
    if (!rc) {
        io->written += rec[4];
        io->tensor_written += rec[7];
        ck_test_stall(pl, file, steps);
    }
    ZS_TRY(zs_ckpt_agree(w, rc));
    /* rank 0 collects the records and the parameters' hash */
    uint64_t *recs = rank == 0 ? calloc((size_t)world * CK_REC, sizeof *recs) : NULL;
    if (rank == 0 && !recs)
        rc = zs_error_set("out of host memory saving the checkpoint");
    rc = zs_ckpt_agree(w, rc);
    if (rc) {
        free(recs);
        return rc;
    }
    zs_comm_set_context(w, ZS_PHASE_REPORT, -1);
    char hash[17] = "";
    rc = zs_comm_gather_root(w, rec, CK_REC, recs, ZS_CT_U64);
    if (!rc)
        rc = zs_engine_param_hash(e, hash);
    if (!rc && rank == 0) {
        snprintf(file, sizeof file, "%s/%s", tmp, CK_MANIFEST);
        rc = ck_write_manifest(file, steps, cfg, e, pl, recs, world, hash);
        if (!rc)
            rc = ck_publish(dir, tmp, name);
        if (rc)
            ck_rmtree(tmp); /* latest still names the previous save */
    }
    free(recs);
    rc = zs_ckpt_agree(w, rc);
    if (!rc)
        io->saves++;
    return rc;
}
