/* zerosim — a training run on one rank. */
#include "zerosim/train.h"
#include "zerosim/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double zs_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int zs_train(const zs_run_config *cfg, const zs_train_options *o, zs_train_result *r)
{
    memset(r, 0, sizeof *r);
    char err[256];
    zs_backend_t be = zs_backend_init(o->backend ? o->backend : "cpu", err, sizeof err);
    if (!be)
        ZS_FAIL("%s", err);
    zs_mem_t mem = zs_mem_create(be, o->device_memory, 0);
    zs_engine *e = NULL;
    int rc = -1;
    if (!mem) {
        zs_error_set("out of host memory creating the allocator");
        goto done;
    }
    r->info = calloc((size_t)cfg->steps, sizeof *r->info);
    if (!r->info) {
        zs_error_set("out of host memory for %d steps of results", cfg->steps);
        goto done;
    }
    if (zs_engine_create(cfg, be, mem, 1, 0, &e))
        goto done;
    r->num_params = zs_engine_num_params(e);
    r->loss_floor = zs_engine_loss_floor(e);
    r->world_size = 1;
    double t0 = zs_now();
    for (int s = 0; s < cfg->steps; s++) {
        if (zs_engine_step(e, s, &r->info[s]))
            goto done;
        r->steps = s + 1;
        r->skipped_steps += r->info[s].skipped;
        int every = o->print_every > 0 ? o->print_every : 10;
        if (o->log && (s == 0 || (s + 1) % every == 0 || s + 1 == cfg->steps)) {
            char extra[64] = "";
            if (cfg->precision == ZS_DTYPE_F16)
                snprintf(extra, sizeof extra, "  loss_scale %g%s", (double)r->info[s].loss_scale,
                         r->info[s].skipped ? " (overflow: step skipped)" : "");
            fprintf(o->log, "step %5d/%d  loss %.4f  lr %.3e  grad_norm %.4f%s\n", s + 1,
                    cfg->steps, (double)r->info[s].loss, (double)r->info[s].lr,
                    (double)r->info[s].grad_norm, extra);
        }
    }
    r->seconds = zs_now() - t0;
    zs_engine_param_hash(e, r->param_hash);
    zs_mem_get_stats(mem, &r->mem);
    rc = 0;
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
    r->info = NULL;
}
