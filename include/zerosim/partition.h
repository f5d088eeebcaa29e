/* zerosim — the partition of the flat layout over the data-parallel ranks.
 *
 * The flat layout (Ψ elements) is padded to Ψp, a multiple of the world
 * size (of world * ZS_DET_BLOCK in deterministic mode), and rank r owns
 * the contiguous shard [r S, (r + 1) S), S = Ψp / world. The step program
 * (zerosim/program.h) and the engine (zerosim/zero.h) both read it.
 */
#ifndef ZEROSIM_PARTITION_H
#define ZEROSIM_PARTITION_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The partition plan: the flat layout padded to a multiple of the world size
 * (of world * ZS_DET_BLOCK in deterministic mode), one contiguous shard per
 * rank. */
#define ZS_DET_BLOCK 1024
typedef struct {
    int world, rank;
    size_t num_params;    /* Ψ */
    size_t padded;        /* Ψ rounded up */
    size_t shard;         /* padded / world */
    size_t shard_begin;   /* rank * shard */
} zs_partition;

void zs_partition_make(zs_partition *p, size_t num_params, int world, int rank, int deterministic);
/* The part of [lo, hi) that rank q owns: *begin and the count (0 if none). */
size_t zs_partition_overlap(const zs_partition *p, int q, size_t lo, size_t hi, size_t *begin);

#ifdef __cplusplus
}
#endif
#endif
