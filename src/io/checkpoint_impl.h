/* zerosim — private to the sharded checkpoints: saving (checkpoint.c) and
 * reading (ckpt_load.c), one concern in two files (zerosim/checkpoint.h). */
#ifndef ZEROSIM_CHECKPOINT_IMPL_H
#define ZEROSIM_CHECKPOINT_IMPL_H

#include "zerosim/checkpoint.h"
#include "zerosim/comm.h"
#include "zerosim/io.h"
#include "zerosim/model.h"

#include <jansson.h>
#include <stdint.h>

#define CK_PATH 4096
#define CK_MANIFEST "manifest.json"
/* The manifest's own checksum: XXH3-64 of the file's bytes with the 16
 * hex digits of this key's value read as zeros (see ck_manifest_hash). */
#define CK_SUM_KEY "manifest_xxh3"
#define CK_SUM_TEXT "\"" CK_SUM_KEY "\": \""
#define CK_SUM_ZERO "0000000000000000"
#define CK_MANIFEST_MAX ((size_t)1 << 30) /* 1 GiB: a million ranks' entries fit */

/* One saved shard file. */
typedef struct {
    char name[64];
    int tp, dp;
    uint64_t begin, end;       /* the flat elements of master and moments it holds */
    uint64_t bytes, xxh3;
    int residual;              /* holds the rank's residual (padded elements) */
    int checked;               /* its checksum was verified by this rank */
    zs_st_file f;
} ck_file;

struct zs_ckpt {
    char dir[CK_PATH];         /* the global_stepK folder */
    char manifest[CK_PATH + 32];
    char describe[CK_PATH + 256];
    int steps, world, dp, tp, stage;
    uint64_t num_params, padded, seed;
    char param_hash[17];
    int unverified;            /* a save from before manifests carried a checksum */
    /* saved in DeepSpeed's layout for --ep xep (0: not): the expert store's
     * padded elements and each file's shard of them */
    int xep;
    uint64_t xpadded, xshard;
    zs_engine_counters counters;
    ck_file *files;
    int nfiles;
};

/* The optimizer states' names in the files (checkpoint.c). */
extern const char *const zs_ckpt_state_name[ZS_STATE_N];
/* DeepSpeed's layout for --ep: the expert store's states, each file its
 * rank's shard over the expert-data-parallel group. */
extern const char *const zs_ckpt_xstate_name[ZS_STATE_RESIDUAL];

/* Agree over the world after a local result: 0 when every rank succeeded,
 * rc when this rank failed, 1 when only another rank did (its message is
 * the one to print). */
int zs_ckpt_agree(zs_comm_t w, int rc);
/* The model's shape as JSON (what must match to load). */
json_t *zs_ckpt_model_json(const zs_model_config *m);

#endif
