/* zerosim — sharded training checkpoints.
 *
 * Layout (DeepSpeed's names): DIR/latest holds the name of the newest
 * folder, DIR/global_stepK/ holds one save after K steps:
 *   manifest.json                        what was saved and the XXH3 of every file
 *   shard_tp<t>_dp<d>.safetensors        one per rank: its partition shard of
 *                                        the master weights and the optimizer's
 *                                        moments ("master", "exp_avg",
 *                                        "exp_avg_sq"), and with compression
 *                                        its own error-feedback residual
 * Every stage writes the same shards (stage 0 too: each rank its partition's
 * part), so a checkpoint loads into any stage and, by reading the ranges it
 * needs from every file, onto any number of data-parallel ranks and any
 * tensor-parallel size (through the tp = 1 order of the parameters).
 *
 * The manifest carries its own checksum ("manifest_xxh3"); every reader
 * checks it, the version, the files' ranks, ranges and checksums and the
 * parameters' hash through one function (ck_read in checkpoint.c).
 *
 * A save is atomic: the files go into DIR/.global_stepK.tmp, the manifest
 * last, then the folder takes its name and `latest` moves, each step synced;
 * a run killed during a save leaves the previous checkpoint as it was.
 */
#ifndef ZEROSIM_CHECKPOINT_H
#define ZEROSIM_CHECKPOINT_H

#include <stdint.h>
#include "zerosim/comm.h"
#include "zerosim/config.h"
#include "zerosim/zero.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2: the manifest carries its own checksum ("manifest_xxh3"); a version 1
 * manifest (none) is read, and said to be unverified */
#define ZS_CKPT_FORMAT_VERSION 2

/* The bytes one rank wrote and read (files on disk: not device memory). */
typedef struct {
    int saves;
    uint64_t written;            /* every byte of the files it wrote */
    uint64_t tensor_written;     /* of which tensor data */
    uint64_t read;               /* every byte read (checksums included) */
    uint64_t tensor_read;        /* tensor data read to load */
} zs_ckpt_io;

/* Where the run sits in the mesh. */
typedef struct {
    zs_comm_t world;             /* every rank */
    int tp_rank, tp_size;
    int dp_rank, dp_size;
} zs_ckpt_place;

/* Collective over place->world. Save e after `steps` steps into
 * dir/global_step<steps> and point dir/latest at it (dir is created if
 * missing; its parent must exist). Adds what this rank wrote to *io. */
int zs_ckpt_save(const char *dir, int steps, const zs_run_config *cfg, zs_engine *e,
                 const zs_ckpt_place *place, zs_ckpt_io *io);

/* The bytes of tensor data one rank writes per save (the prediction). */
uint64_t zs_ckpt_tensor_bytes(const zs_engine *e);

/* Not collective (every rank calls it). Find the checkpoint in path (a
 * folder with `latest`, or one global_stepK folder), read its manifest and
 * check it against cfg on this mesh: one line naming the file and what
 * differs. *steps gets the steps it was saved after. */
typedef struct zs_ckpt zs_ckpt;
int zs_ckpt_open(const char *path, const zs_run_config *cfg, int tp_size, zs_ckpt **out,
                 int *steps);
/* "global_step8 of DIR (8 steps on 4 ranks, stage 3)": for the start-up line. */
const char *zs_ckpt_describe(const zs_ckpt *ck);
/* Collective over place->world. Load the state into e (checking every file
 * it reads against the manifest's checksum) and then the parameters'
 * hash (into hash, on rank 0) against the saved one. Any tensor-parallel
 * size: the layouts are mapped through the tp = 1 order. Adds what this
 * rank read to *io. */
int zs_ckpt_load(zs_ckpt *ck, zs_engine *e, const zs_ckpt_place *place, zs_ckpt_io *io,
                 char hash[17]);
void zs_ckpt_close(zs_ckpt *ck);

/* Not collective. The checks every reader makes before it reads a file of
 * the save, alone: the manifest's format, version and own checksum, and
 * what it says of the save (mesh, sizes, every file's ranks and range).
 * One line naming the file and what failed; opt names the option. The
 * manifest's path goes to manifest (cap bytes). */
int zs_ckpt_check(const char *path, const char *opt, char *manifest, size_t cap);

/* Without MPI or an engine: the fp32 master weights of a tp = 1 save (a
 * --save-dir or a global_stepK folder) as one flat array in the layout's
 * order (*n = the model's parameters, malloc'd in *params), the model's
 * shapes from its manifest and its data seed. The manifest is checked as
 * zs_ckpt_check does, every file against the manifest's checksum and the
 * parameters against its param_hash; opt names the option in messages. */
int zs_ckpt_read_params(const char *path, const char *opt, zs_model_config *mc, uint64_t *seed,
                        float **params, size_t *n);

#ifdef __cplusplus
}
#endif
#endif
