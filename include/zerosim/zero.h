/* zerosim — the training engine.
 *
 * The engine owns the flat parameter, gradient and optimizer arrays, drives
 * the model unit by unit over the micro-batches of a step, and takes the
 * optimizer step. It hands each unit fp32 views of the parameters and
 * gradients it uses: direct views when they are stored in fp32, converted
 * copies in a staging workspace (as large as the largest unit) when they are
 * stored in bf16 or fp16. The engine is where the ZeRO stage policy lives.
 */
#ifndef ZEROSIM_ZERO_H
#define ZEROSIM_ZERO_H

#include <stddef.h>
#include <stdint.h>
#include "zerosim/backend.h"
#include "zerosim/config.h"
#include "zerosim/mem.h"
#include "zerosim/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zs_engine zs_engine;

typedef struct {
    float loss;        /* mean loss over the global batch of the step */
    float lr;          /* learning rate used */
    float grad_norm;   /* global gradient norm before clipping (unscaled) */
    float loss_scale;  /* loss scale in effect during the step */
    int skipped;       /* 1 when fp16 overflow made the step be skipped */
} zs_step_info;

/* world_size and rank describe the data-parallel group (1 and 0 on one rank). */
int zs_engine_create(const zs_run_config *cfg, zs_backend_t be, zs_mem_t mem,
                     int world_size, int rank, zs_engine **out);
void zs_engine_destroy(zs_engine *e);

/* Run step `step` (0-based): grad_accum micro-batches, then the optimizer. */
int zs_engine_step(zs_engine *e, int step, zs_step_info *info);

const zs_model *zs_engine_model(const zs_engine *e);
size_t zs_engine_num_params(const zs_engine *e);
double zs_engine_loss_floor(const zs_engine *e);

/* Copy the fp32 parameters (the master weights under mixed precision), in
 * layout order, unpadded, into host (num_params floats). */
void zs_engine_get_params(const zs_engine *e, float *host);
/* Hex 64-bit XXH3 hash of those num_params * 4 bytes (little-endian floats). */
void zs_engine_param_hash(const zs_engine *e, char hex[17]);
/* The hash of any fp32 parameter vector, computed the same way. */
void zs_param_hash(const float *params, size_t n, char hex[17]);

#ifdef __cplusplus
}
#endif
#endif
