/* zerosim — the report's files: the atomic text writer and the --csv
 * folder's #-headed columns (a row for every rank). */
#include "build-config.h"
#include "report_impl.h"
#include "zerosim/error.h"
#include "zerosim/file.h"
#include "zerosim/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Write text to dir/name atomically. */
static int zs_write_file(const char *dir, const char *name, const char *text, size_t len)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        ZS_FAIL("--csv directory path too long: %s", dir);
    return zs_report_write_text(path, text, len);
}

/* Test hook (tests/test_faults.sh): ZEROSIM_TEST_STALL_AT=report makes the
 * writer stall once a file's bytes are written and synced but before the
 * file gets its name, so that a test can kill the run there. */
static void zs_report_test_stall(const char *path)
{
    const char *s = getenv("ZEROSIM_TEST_STALL_AT");
    if (!s || strcmp(s, "report") != 0)
        return;
    fprintf(stderr, "zerosim: test hook: writer (pid %ld) stalls writing %s\n", (long)getpid(), path);
    fflush(stderr);
    for (;;)
        pause();
}

/* Write path atomically: the bytes go to a file without a name in path's
 * directory (O_TMPFILE), are synced, and the file gets a name only when
 * whole (a new, unpredictable temporary name, renamed over path). A run
 * killed or out of space before that leaves nothing behind. File systems
 * without O_TMPFILE get a named temporary file (path.tmp.<random>, created
 * exclusively) instead, removed on failure. Neither follows a symlink: the
 * temporary name is always new, and rename replaces a symlink at path
 * itself. */
int zs_report_write_text(const char *path, const char *text, size_t len)
{
    char stem[4200], tmp[4224], dir[4096];
    if ((size_t)snprintf(stem, sizeof stem, "%s.tmp", path) >= sizeof stem)
        ZS_FAIL("path too long: %s", path);
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
#ifdef O_TMPFILE
    int fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
#else
    int fd = -1; /* not Linux (macOS): the named temporary file below */
    errno = EOPNOTSUPP;
#endif
    if (fd >= 0) {
        if (zs_io_write_fd(fd, text, len) != 0) {
            int err = errno;
            close(fd);
            return zs_io_write_error(path, err);
        }
        zs_report_test_stall(path);
        char self[64];
        snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
        int linked = 0; /* linkat fails on a taken name: try another */
        for (int t = 0; t < 64 && !linked; t++) {
            if (zs_file_unique_name(stem, tmp, sizeof tmp) != 0) {
                close(fd);
                return -1;
            }
            linked = linkat(AT_FDCWD, self, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) == 0;
            if (!linked && errno != EEXIST)
                break;
        }
        close(fd);
        if (linked) {
            if (rename(tmp, path) != 0) {
                int err = errno;
                unlink(tmp);
                return zs_io_write_error(path, err);
            }
            return 0;
        }
        /* no /proc: the named temporary file below */
    } else if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
        return zs_io_write_error(path, errno);
    }
    fd = zs_file_create_unique(stem, tmp, sizeof tmp, O_WRONLY, 0666);
    if (fd < 0) /* every name taken: zs_file_create_unique's line; else name path */
        return errno == EEXIST ? -1 : zs_io_write_error(path, errno);
    int bad = zs_io_write_fd(fd, text, len) != 0;
    int err = errno;
    if (!bad)
        zs_report_test_stall(path);
    if (close(fd) != 0 && !bad) {
        bad = 1;
        err = errno;
    }
    if (bad || rename(tmp, path) != 0) {
        if (!bad)
            err = errno;
        unlink(tmp);
        return zs_io_write_error(path, err);
    }
    return 0;
}

/* Append to a growing text buffer (the CSV files, rank lists); t->oom
 * once out of memory. */
void zs_text_add(zs_text *t, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        size_t room = t->cap - t->len;
        va_start(ap, fmt);
        int n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = 1;
            return;
        }
        if (t->p && (size_t)n < room) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = (t->cap + (size_t)n + 1) * 2;
        char *q = realloc(t->p, cap);
        if (!q) {
            t->oom = 1;
            return;
        }
        t->p = q;
        t->cap = cap;
    }
}

static int zs_text_flush(zs_text *t, const char *dir, const char *name)
{
    int rc = t->oom ? zs_error_set("out of host memory writing %s", name)
                    : zs_write_file(dir, name, t->p ? t->p : "", t->len);
    free(t->p);
    memset(t, 0, sizeof *t);
    return rc;
}

int zs_report_prepare_dir(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0 && mkdir(dir, 0777) != 0)
        ZS_FAIL("cannot create the --csv directory %s: %s", dir, strerror(errno));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        ZS_FAIL("--csv %s is not a directory", dir);
    return 0;
}

/* The CSV files, in the order written: a failure removes those already
 * written, so that the folder holds the whole set of a run or none of it. */
static const char *const zs_csv_names[] = {"run.csv", "memory.csv", "comm.csv", "timeline.csv",
                                           "comm_groups.csv", "steps.csv"};

static int zs_csv_flush(zs_text *t, const char *dir, int k)
{
    if (!zs_text_flush(t, dir, zs_csv_names[k]))
        return 0;
    char path[4200];
    for (int i = 0; i < k; i++)
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, zs_csv_names[i]) < sizeof path)
            unlink(path);
    return -1;
}

static int zs_report_write_csv_files(const char *dir, const zs_run_config *cfg,
                                     const zs_train_result *r);

int zs_report_write_csv(const char *dir, const zs_run_config *cfg, const zs_train_result *r)
{
    return zs_report_write_csv_files(dir, cfg, r);
}

static int zs_report_write_csv_files(const char *dir, const zs_run_config *cfg,
                                     const zs_train_result *r)
{
    ZS_TRY(zs_report_prepare_dir(dir));
    int N = r->world_size;
    zs_text t = {0};
    zs_text_add(&t, "# world_size stage precision deterministic num_params padded_params steps "
                    "micro_batch grad_accum\n%d %d %s %d %zu %zu %d %d %d\n", N, cfg->stage,
                zs_dtype_name(cfg->precision), cfg->deterministic, r->num_params, r->padded_params,
                r->steps, cfg->micro_batch, cfg->grad_accum);
    ZS_TRY(zs_csv_flush(&t, dir, 0));

    int has_tiers = zs_report_has_tiers(r); /* O(N): once, not per rank */
    zs_text_add(&t, "# rank category peak_bytes predicted_bytes ratio\n");
    for (int q = 0; q < N; q++) {
        for (size_t k = 0; k < zs_report_n_mem_rows; k++) {
            int has;
            size_t pred = zs_report_row_pred(r, q, k, &has), meas = zs_report_row_peak(r, q, k);
            if (has)
                zs_text_add(&t, "%d %s %zu %zu %.6f\n", q, zs_report_mem_rows[k].name, meas, pred,
                            zs_report_ratio((double)meas, (double)pred));
            else
                zs_text_add(&t, "%d %s %zu -1 -1\n", q, zs_report_mem_rows[k].name, meas);
        }
        zs_text_add(&t, "%d total %zu -1 -1\n", q, r->total_peaks[q]);
        for (int tr = ZS_TIER_HOST; has_tiers && tr < ZS_MEM_NTIERS; tr++)
            for (int c = 0; c < ZS_MEM_NCAT; c++) { /* offload: host_params, nvme_optimizer_m, ... */
                size_t meas = r->tier_peaks[q][tr][c], pred = zs_report_pred_of(r, q)->tier_bytes[tr][c];
                if (meas || pred)
                    zs_text_add(&t, "%d %s_%s %zu %zu %.6f\n", q, zs_mem_tier_name((zs_mem_tier)tr),
                                zs_mem_category_name((zs_mem_category)c), meas, pred,
                                zs_report_ratio((double)meas, (double)pred));
            }
    }
    ZS_TRY(zs_csv_flush(&t, dir, 1));

    zs_text_add(&t, "# rank op phase calls bytes predicted_bytes api_bytes seconds inter_bytes "
                    "predicted_inter_bytes (inter: across nodes; -1: no prediction)\n");
    for (int q = 0; q < N; q++)
        for (int o = 0; o < ZS_OP_NOPS; o++) {
            for (int p = 0; p < ZS_PHASE_NPHASES; p++) {
                const zs_comm_sum *c = &r->comm[q][o][p];
                if (c->calls > 0)
                    zs_text_add(&t, "%d %s %s %.0f %.3f -1 %.0f %.6f %.3f -1\n", q,
                                zs_comm_op_name(o), zs_comm_phase_name(p), c->calls, c->wire,
                                c->bytes, c->seconds, c->inter);
            }
            double calls, secs, api, b = zs_report_op_bytes(r, q, o, &calls, &secs, &api);
            double pb = zs_report_op_pred(r, q, o), ipb = zs_report_op_pred_inter(r, q, o);
            zs_text_add(&t, "%d %s all %.0f %.3f %.3f %.0f %.6f %.3f %.3f\n", q, zs_comm_op_name(o),
                        calls, b, pb >= 0 ? pb : -1.0, api, secs, zs_report_op_inter(r, q, o),
                        ipb >= 0 ? ipb : -1.0);
        }
    ZS_TRY(zs_csv_flush(&t, dir, 2));

    zs_text_add(&t, "# step %d\n# event params grads optimizer activations checkpoints "
                    "comm_buffers compression workspace total\n", r->timeline_step);
    for (size_t i = 0; i < r->n_timeline; i++) {
        const size_t *c = r->timeline[i].current;
        size_t opt = c[ZS_MEM_OPT_MASTER] + c[ZS_MEM_OPT_M] + c[ZS_MEM_OPT_V], tot = 0;
        for (int k = 0; k < ZS_MEM_NCAT; k++)
            tot += c[k];
        zs_text_add(&t, "%zu %zu %zu %zu %zu %zu %zu %zu %zu %zu\n", i, c[ZS_MEM_PARAMS],
                    c[ZS_MEM_GRADS], opt, c[ZS_MEM_ACTIVATIONS], c[ZS_MEM_CHECKPOINTS],
                    c[ZS_MEM_COMM_BUFFERS], c[ZS_MEM_COMPRESSION], c[ZS_MEM_WORKSPACE], tot);
    }
    ZS_TRY(zs_csv_flush(&t, dir, 3));

    zs_text_add(&t, "# rank group op calls bytes api_bytes inter_bytes (training calls over the "
                    "run; inter: across nodes)\n");
    for (int q = 0; q < r->world_size; q++)
        for (int g = 0; g < ZS_GROUP_NGROUPS; g++)
            for (int o = 0; o < ZS_OP_NOPS; o++) {
                const zs_comm_sum *cg = &r->comm_group[q][g][o];
                if (cg->calls > 0)
                    zs_text_add(&t, "%d %s %s %.0f %.3f %.0f %.3f\n", q, zs_comm_group_name(g),
                                zs_comm_op_name(o), cg->calls, cg->wire, cg->bytes, cg->inter);
            }
    ZS_TRY(zs_csv_flush(&t, dir, 4));

    zs_text_add(&t, "# step loss lr grad_norm loss_scale seconds\n");
    for (int s = 0; s < r->steps; s++)
        zs_text_add(&t, "%d %.9g %.9g %.9g %.9g %.9g\n", s, (double)r->info[s].loss,
                    (double)r->info[s].lr, (double)r->info[s].grad_norm,
                    (double)r->info[s].loss_scale, r->info[s].seconds);
    return zs_csv_flush(&t, dir, 5);
}

