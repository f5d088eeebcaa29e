/* zerosim — a training run: engine, steps, results. */
#ifndef ZEROSIM_TRAIN_H
#define ZEROSIM_TRAIN_H

#include <stddef.h>
#include <stdio.h>
#include "zerosim/config.h"
#include "zerosim/mem.h"
#include "zerosim/zero.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *backend;      /* "cpu" */
    size_t device_memory;     /* simulated capacity per rank in bytes, 0 = none */
    FILE *log;                /* progress lines, NULL = silent */
    int print_every;          /* print every N steps (and the first and last) */
} zs_train_options;

typedef struct {
    int steps;
    zs_step_info *info;       /* [steps] */
    char param_hash[17];
    size_t num_params;
    double loss_floor;
    zs_mem_stats mem;
    double seconds;
    int world_size;
    int skipped_steps;
    float final_loss_scale;
} zs_train_result;

/* Train cfg (already finalized) and fill r. Returns 0 or non-zero with a
 * message. Release r with zs_train_result_free even after a failure. */
int zs_train(const zs_run_config *cfg, const zs_train_options *o, zs_train_result *r);
void zs_train_result_free(zs_train_result *r);

#ifdef __cplusplus
}
#endif
#endif
