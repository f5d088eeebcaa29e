/* zerosim — a training run over the ranks of a communicator. */
#include "zerosim/train.h"
#include "zerosim/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ZS_AGREE_TIMEOUT_S 10.0

static double zs_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* After a local result rc, agree with the other ranks. Returns 0 when every
 * rank succeeded; otherwise non-zero on every rank, with error_rank set on
 * the lowest failing one. When the ranks cannot agree (a rank is stuck in a
 * collective), the failing rank prints its message and aborts the job. */
static int zs_train_agree(zs_comm_t comm, int rc, zs_train_result *r)
{
    int any = 0;
    if (zs_comm_agree(comm, rc != 0, ZS_AGREE_TIMEOUT_S, &any)) {
        fprintf(stderr, "zerosim: rank %d: %s\n", zs_comm_rank(comm),
                rc ? zs_error_msg() : "another rank stopped responding");
        fflush(stderr);
        zs_comm_abort(comm, 1);
    }
    if (!any)
        return 0;
    r->error_rank = any - 1 == zs_comm_rank(comm);
    if (!rc)
        zs_error_set("another rank failed");
    return -1;
}

static void zs_train_log_step(const zs_run_config *cfg, const zs_train_options *o,
                              const zs_train_result *r, int s)
{
    int every = o->print_every > 0 ? o->print_every : 10;
    if (!o->log || !(s == 0 || (s + 1) % every == 0 || s + 1 == cfg->steps))
        return;
    char extra[64] = "";
    if (cfg->precision == ZS_DTYPE_F16)
        snprintf(extra, sizeof extra, "  loss_scale %g%s", (double)r->info[s].loss_scale,
                 r->info[s].skipped ? " (overflow: step skipped)" : "");
    fprintf(o->log, "step %5d/%d  loss %.4f  lr %.3e  grad_norm %.4f%s\n", s + 1, cfg->steps,
            (double)r->info[s].loss, (double)r->info[s].lr, (double)r->info[s].grad_norm, extra);
    fflush(o->log);
}

/* Gather every rank's memory peaks to rank 0. */
static int zs_train_gather_memory(zs_comm_t comm, zs_train_result *r)
{
    int N = zs_comm_size(comm);
    uint64_t mine[ZS_MEM_NCAT + 1];
    for (int c = 0; c < ZS_MEM_NCAT; c++)
        mine[c] = r->mem.peak[c];
    mine[ZS_MEM_NCAT] = r->mem.total_peak;
    uint64_t *all = calloc((size_t)N * (ZS_MEM_NCAT + 1), sizeof(uint64_t));
    r->peaks = calloc((size_t)N, sizeof *r->peaks);
    r->total_peaks = calloc((size_t)N, sizeof(size_t));
    if (!all || !r->peaks || !r->total_peaks) {
        free(all);
        ZS_FAIL("out of host memory gathering memory statistics");
    }
    zs_comm_set_context(comm, ZS_PHASE_REPORT, -1);
    int rc = zs_comm_gather_root(comm, mine, ZS_MEM_NCAT + 1, all, ZS_CT_U64);
    for (int q = 0; q < N && !rc; q++) {
        for (int c = 0; c < ZS_MEM_NCAT; c++)
            r->peaks[q][c] = (size_t)all[(size_t)q * (ZS_MEM_NCAT + 1) + c];
        r->total_peaks[q] = (size_t)all[(size_t)q * (ZS_MEM_NCAT + 1) + ZS_MEM_NCAT];
    }
    free(all);
    return rc;
}

int zs_train(const zs_run_config *cfg, const zs_train_options *o, zs_comm_t comm,
             zs_train_result *r)
{
    memset(r, 0, sizeof *r);
    int rank = zs_comm_rank(comm);
    FILE *log = rank == 0 ? o->log : NULL;
    zs_train_options lo = *o;
    lo.log = log;
    char err[256];
    zs_backend_t be = zs_backend_init(o->backend ? o->backend : "cpu", err, sizeof err);
    if (!be) {
        zs_error_set("%s", err);
        return zs_train_agree(comm, -1, r);
    }
    zs_mem_t mem = zs_mem_create(be, o->device_memory, rank);
    zs_engine *e = NULL;
    int rc = 0;
    r->world_size = zs_comm_size(comm);
    r->info = calloc((size_t)cfg->steps, sizeof *r->info);
    r->hashes = o->hash_every_step ? calloc((size_t)cfg->steps, sizeof *r->hashes) : NULL;
    if (!mem || !r->info || (o->hash_every_step && !r->hashes))
        rc = zs_error_set("out of host memory for %d steps of results", cfg->steps);
    if (!rc)
        rc = zs_engine_create(cfg, be, mem, comm, &e);
    if ((rc = zs_train_agree(comm, rc, r)))
        goto done;
    r->num_params = zs_engine_num_params(e);
    r->padded_params = zs_engine_partition(e)->padded;
    r->loss_floor = zs_engine_loss_floor(e);
    double t0 = zs_now();
    for (int s = 0; s < cfg->steps; s++) {
        double ts = zs_now();
        rc = zs_engine_step(e, s, &r->info[s]);
        r->info[s].seconds = zs_now() - ts;
        if (!rc && o->hash_every_step)
            rc = zs_engine_param_hash(e, r->hashes[s]);
        if ((rc = zs_train_agree(comm, rc, r)))
            goto done;
        r->steps = s + 1;
        r->skipped_steps += r->info[s].skipped;
        zs_train_log_step(cfg, &lo, r, s);
    }
    r->seconds = zs_now() - t0;
    rc = zs_engine_param_hash(e, r->param_hash);
    r->live_params_peak = zs_engine_live_params_peak(e);
    zs_mem_get_stats(mem, &r->mem);
    if (!rc)
        rc = zs_train_gather_memory(comm, r);
    rc = zs_train_agree(comm, rc, r);
done:
    zs_engine_destroy(e);
    if (mem)
        zs_mem_destroy(mem);
    zs_backend_release(be);
    return rc;
}

void zs_train_result_free(zs_train_result *r)
{
    free(r->info);
    free(r->hashes);
    free(r->peaks);
    free(r->total_peaks);
    r->info = NULL;
    r->hashes = NULL;
    r->peaks = NULL;
    r->total_peaks = NULL;
}
