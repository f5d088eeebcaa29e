/* zerosim — the engine: offload (see engine_impl.h).
 *
 * offload_optimizer keeps the fp32 master, m and v on the host (cpu) or in
 * a file per rank (nvme: master, m, v one after the other, shard floats
 * each, and with offload_param nvme the parameter shard after them). This
 * file owns the swap file, the optimizer that streams its states through
 * the swap buffers, and the transfers around the host optimizer: the
 * reduced gradient shard down, the updated parameter shard up.
 */
#include "zero/engine_impl.h"
#include "zerosim/file.h"
#include "zerosim/error.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- the swap file ----------------------------------------------------------- */

/* Byte offset of element i of state k (0 master, 1 m, 2 v) in the file. */
static off_t zs_swap_at(const zs_engine *e, int k, size_t i)
{
    return (off_t)(((size_t)k * e->part.shard + i) * 4);
}

/* Write (or read) bytes at byte offset at of the swap file, whole. */
static int zs_swap_rw(zs_engine *e, int write, off_t at, size_t bytes, void *buf)
{
    char *p = buf;
    while (bytes > 0) {
        ssize_t r = write ? pwrite(e->swap_fd, p, bytes, at) : pread(e->swap_fd, p, bytes, at);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            ZS_FAIL("cannot %s %s: %s", write ? "write" : "read", e->swap_path,
                    r < 0 ? strerror(errno) : "the file is shorter than what it holds");
        p += r;
        bytes -= (size_t)r;
        at += r;
    }
    return 0;
}

int zs_engine_swap_io(zs_engine *e, int write, int k, size_t i, size_t n, float *buf)
{
    return zs_swap_rw(e, write, zs_swap_at(e, k, i), n * 4, buf);
}

/* offload_optimizer nvme: this rank's file of master, m and v, zero-filled,
 * under nvme_path; removed when the engine goes, also after an error. */
/* Byte offset of the parameter shard's element i in the file (offload_param
 * nvme): after the optimizer's states when they are there too. */
static off_t zs_swap_param_at(const zs_engine *e, size_t i)
{
    int states = e->offload == ZS_OFFLOAD_NVME ? 2 + zs_optim_has_variance(e->cfg.optimizer) : 0;
    return zs_swap_at(e, states, 0) + (off_t)(i * e->param_elsize);
}

/* Move n working-precision parameters of the shard to (write) or from the
 * file, at element i. */
int zs_engine_swap_params(zs_engine *e, int write, size_t i, size_t n, void *buf)
{
    return zs_swap_rw(e, write, zs_swap_param_at(e, i), n * e->param_elsize, buf);
}

int zs_engine_swap_open(zs_engine *e)
{
    int pn = e->shape->buf[ZS_BUF_PARAMS].tier == ZS_TIER_NVME;
    if ((e->offload != ZS_OFFLOAD_NVME && !pn) || e->phantom)
        return 0;
    /* created exclusively at an unpredictable name: never through a link or
     * into a file another user planted (zerosim/file.h) */
    char stem[sizeof e->swap_path - 17];
    snprintf(stem, sizeof stem, "%s/zerosim-rank%d.swap", e->cfg.nvme_path, e->part.rank);
    e->swap_fd = zs_file_create_unique(stem, e->swap_path, sizeof e->swap_path, O_RDWR, 0600);
    if (e->swap_fd < 0)
        ZS_FAIL("nvme_path %s: cannot create %s.*: %s; give a writable folder (--nvme-path)",
                e->cfg.nvme_path, stem, strerror(errno));
    off_t end = zs_swap_param_at(e, pn ? e->part.shard : 0);
    if (ftruncate(e->swap_fd, end) != 0)
        ZS_FAIL("nvme_path %s: cannot size %s to %zu bytes: %s", e->cfg.nvme_path, e->swap_path,
                (size_t)end, strerror(errno));
    return 0;
}

/* The master's elements [i, i + n) of this rank's range (not the
 * parameters: sep_master), in memory or in the swap file. */
int zs_engine_master_write(zs_engine *e, size_t i, size_t n, const float *host)
{
    if (e->phantom)
        return 0;
    if (e->offload == ZS_OFFLOAD_NVME)
        return zs_engine_swap_io(e, 1, 0, i, n, (float *)host);
    zs_backend_copy_h2d(e->be, e->master + i, host, n * 4);
    return 0;
}

int zs_engine_master_read(zs_engine *e, size_t i, size_t n, float *host)
{
    if (e->phantom)
        return 0;
    if (e->offload == ZS_OFFLOAD_NVME)
        return zs_engine_swap_io(e, 0, 0, i, n, host);
    zs_backend_copy_d2h(e->be, host, e->master + i, n * 4);
    return 0;
}

/* offload_optimizer nvme: the optimizer over the shard in pieces of
 * ZS_SWAP_CHUNK, each piece's master, m and v read from the swap file into
 * one half of the swap buffer while the other half is updated; a helper
 * thread writes the previous piece back and reads the next. */
typedef struct {
    zs_engine *e;
    int write_slot, read_slot;    /* -1: none */
    size_t write_at, write_n, read_at, read_n;
    int rc;
    char msg[512];
    double write_s, read_s;
} zs_swap_job;

static float *zs_swap_slot(zs_engine *e, int slot, int k)
{
    int states = 2 + zs_optim_has_variance(e->cfg.optimizer);
    size_t chunk = e->part.shard < ZS_SWAP_CHUNK ? e->part.shard : ZS_SWAP_CHUNK;
    return (float *)e->buf[ZS_BUF_SWAP] + ((size_t)slot * (size_t)states + (size_t)k) * chunk;
}

static int zs_swap_move(zs_engine *e, int write, int slot, size_t at, size_t n)
{
    int states = 2 + zs_optim_has_variance(e->cfg.optimizer);
    for (int k = 0; k < states; k++)
        ZS_TRY(zs_engine_swap_io(e, write, k, at, n, zs_swap_slot(e, slot, k)));
    return 0;
}

static void *zs_swap_run(void *arg)
{
    zs_swap_job *j = arg;
    double t0 = zs_clock();
    if (j->write_slot >= 0)
        j->rc = zs_swap_move(j->e, 1, j->write_slot, j->write_at, j->write_n);
    double t1 = zs_clock();
    if (!j->rc && j->read_slot >= 0)
        j->rc = zs_swap_move(j->e, 0, j->read_slot, j->read_at, j->read_n);
    j->write_s = t1 - t0;
    j->read_s = zs_clock() - t1;
    if (j->rc) /* the error buffer is per thread: hand the message over */
        snprintf(j->msg, sizeof j->msg, "%s", zs_error_msg());
    return NULL;
}

/* offload_optimizer nvme (the builder's OPTIMIZER_SWAPPED). */
int zs_engine_exec_optimizer_swapped(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)o;
    (void)stop;
    const zs_run_config *c = &e->cfg;
    size_t S = e->part.shard, chunk = S < ZS_SWAP_CHUNK ? S : ZS_SWAP_CHUNK;
    size_t nchunks = (S + chunk - 1) / chunk;
    int states = 2 + zs_optim_has_variance(c->optimizer);
    if (e->phantom) { /* the bytes, without the files */
        zs_comm_record_transfer(e->comm, ZS_OP_NVME_READ, S * 4 * (size_t)states, 0.0);
        zs_comm_record_transfer(e->comm, ZS_OP_NVME_WRITE, S * 4 * (size_t)states, 0.0);
        return 0;
    }
    double t0 = zs_clock();
    ZS_TRY(zs_swap_move(e, 0, 0, 0, chunk));
    zs_comm_record_transfer(e->comm, ZS_OP_NVME_READ, chunk * 4 * (size_t)states,
                            zs_clock() - t0);
    for (size_t i = 0; i < nchunks; i++) {
        size_t at = i * chunk, n = S - at < chunk ? S - at : chunk;
        int slot = (int)(i % 2);
        zs_swap_job job = {.e = e, .write_slot = -1, .read_slot = -1};
        if (i > 0) { /* the previous piece goes back */
            job.write_slot = 1 - slot;
            job.write_at = at - chunk;
            job.write_n = chunk;
        }
        if (i + 1 < nchunks) { /* into the same half, after its write */
            job.read_slot = 1 - slot;
            job.read_at = at + chunk;
            job.read_n = S - job.read_at < chunk ? S - job.read_at : chunk;
        }
        pthread_t th;
        int threaded = (job.write_slot >= 0 || job.read_slot >= 0) &&
                       pthread_create(&th, NULL, zs_swap_run, &job) == 0;
        if (!threaded && (job.write_slot >= 0 || job.read_slot >= 0))
            zs_swap_run(&job); /* no thread: in turn */
        zs_optim_step(e->be, c, e->opt_steps, e->info->lr, e->grad_mul, zs_swap_slot(e, slot, 0),
                      zs_swap_slot(e, slot, 1),
                      states > 2 ? zs_swap_slot(e, slot, 2) : NULL,
                      (const char *)e->hgrad + at * e->grad_elsize, e->grad_dtype,
                      (char *)e->hparam + at * e->param_elsize, e->param_dtype, 0, n);
        if (threaded)
            pthread_join(th, NULL);
        if (job.rc)
            ZS_FAIL("%s", job.msg);
        if (job.write_slot >= 0)
            zs_comm_record_transfer(e->comm, ZS_OP_NVME_WRITE,
                                    job.write_n * 4 * (size_t)states, job.write_s);
        if (job.read_slot >= 0)
            zs_comm_record_transfer(e->comm, ZS_OP_NVME_READ,
                                    job.read_n * 4 * (size_t)states, job.read_s);
    }
    size_t last = (nchunks - 1) * chunk;
    t0 = zs_clock();
    ZS_TRY(zs_swap_move(e, 1, (int)((nchunks - 1) % 2), last, S - last));
    zs_comm_record_transfer(e->comm, ZS_OP_NVME_WRITE, (S - last) * 4 * (size_t)states,
                            zs_clock() - t0);
    return 0;
}

/* ---- executors ------------------------------------------------------------- */

/* The reduced shard, as it is, to the host. */
int zs_engine_exec_offload_grads(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)o;
    (void)stop;
    const zs_partition *p = &e->part;
    double t0 = zs_clock();
    if (!e->phantom)
        zs_backend_copy_d2h(e->be, e->hgrad, e->gshard, p->shard * e->grad_elsize);
    zs_comm_record_transfer(e->comm, ZS_OP_D2H, p->shard * e->grad_elsize, zs_clock() - t0);
    return 0;
}

/* offload_param alone: the shard the device's optimizer updated (its
 * working-precision copy, or the fp32 master itself), down into the host's
 * parameter shard, which the next step's gathers read; with nvme into the
 * host staging buffer, then written to the file (the gathers read it from
 * there). */
int zs_engine_exec_download_params(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)o;
    (void)stop;
    size_t bytes = e->part.shard * e->param_elsize;
    void *dst = e->param_nvme ? e->hparam : e->params_shard;
    double t0 = zs_clock();
    if (!e->phantom)
        zs_backend_copy_d2h(e->be, dst, e->mixed ? e->param_out : (void *)e->master, bytes);
    double t1 = zs_clock();
    zs_comm_record_transfer(e->comm, ZS_OP_D2H, bytes, t1 - t0);
    if (!e->param_nvme)
        return 0;
    if (!e->phantom)
        ZS_TRY(zs_engine_swap_params(e, 1, 0, e->part.shard, e->hparam));
    zs_comm_record_transfer(e->comm, ZS_OP_NVME_WRITE, bytes, zs_clock() - t1);
    return 0;
}

/* The updated shard, in working precision: to the device, or with
 * offload_param nvme into the file (the gathers read it from there). */
int zs_engine_exec_upload_params(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)o;
    (void)stop;
    const zs_partition *p = &e->part;
    size_t bytes = p->shard * e->param_elsize;
    double t0 = zs_clock();
    if (e->param_nvme) {
        if (!e->phantom)
            ZS_TRY(zs_engine_swap_params(e, 1, 0, p->shard, e->hparam));
        zs_comm_record_transfer(e->comm, ZS_OP_NVME_WRITE, bytes, zs_clock() - t0);
        return 0;
    }
    if (!e->phantom)
        zs_backend_copy_h2d(e->be, e->params_shard, e->hparam, bytes);
    zs_comm_record_transfer(e->comm, ZS_OP_H2D, bytes, zs_clock() - t0);
    return 0;
}
