/* zerosim — what a run reads and writes for other tools (src/run/oracle.c):
 * weights in (--init-from) and out (--export), the held-out loss
 * (--val-data) and the per-step dumps (--dump-dir). Internal to the run
 * layer. */
#ifndef ZEROSIM_RUN_ORACLE_H
#define ZEROSIM_RUN_ORACLE_H

#include "zerosim/comm.h"
#include "zerosim/config.h"
#include "zerosim/eval.h"
#include "zerosim/train.h"
#include "zerosim/zero.h"

/* Every rank: read the weights file and set the engine's parameters. */
int zs_oracle_init_from(zs_engine *e, const zs_run_config *cfg, const char *path);
/* Collective: gather the parameters; world rank 0 writes them (in shards
 * of at most shard_bytes, 0: one file). */
int zs_oracle_export(zs_engine *e, const zs_run_config *cfg, const char *path, int format,
                     uint64_t shard_bytes, int world_rank);
/* Collective: the dump of step `step` (1-based; 0 = the state before step
 * 1, parameters only) into dir, written by world rank 0. */
int zs_oracle_dump(zs_engine *e, const zs_run_config *cfg, const char *dir, int step,
                   const zs_step_info *info, int world_rank);

/* The held-out loss: world rank 0 keeps the data (the GPT: --val-data's
 * token file; the MLP: --data's image set) and a tp = 1 copy of the model;
 * every rank calls zs_oracle_val_loss (it gathers the parameters). The
 * GPT's *loss is the loss of samples 0 .. global batch - 1; the MLP's, its
 * held-out images' (*heldout), with their accuracy and the test images'
 * (*test), every image of both (NaN and 0 samples elsewhere). */
typedef struct zs_oracle_val zs_oracle_val;
int zs_oracle_val_create(const zs_run_config *cfg, const char *path, zs_backend_t be,
                         int global_batch, int world_rank, zs_oracle_val **out);
int zs_oracle_val_loss(zs_oracle_val *v, zs_engine *e, const zs_run_config *cfg, int world_rank,
                       double *loss, zs_eval_score *heldout, zs_eval_score *test);
void zs_oracle_val_destroy(zs_oracle_val *v);
/* Whether the held-out tokens are bytes of text (a byte-level file of
 * zerosim tokens): the loss per token is then a loss per byte. */
int zs_oracle_val_byte_level(const zs_oracle_val *v);

#endif
