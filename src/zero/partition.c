/* zerosim — the partition of the flat layout (see zerosim/partition.h). */
#include "zerosim/partition.h"

void zs_partition_make(zs_partition *p, size_t num_params, int world, int rank, int deterministic)
{
    size_t q = (size_t)world * (deterministic ? ZS_DET_BLOCK : 1);
    p->world = world;
    p->rank = rank;
    p->num_params = num_params;
    p->padded = (num_params + q - 1) / q * q;
    if (p->padded == 0)
        p->padded = q;
    p->shard = p->padded / (size_t)world;
    p->shard_begin = (size_t)rank * p->shard;
}

size_t zs_partition_overlap(const zs_partition *p, int q, size_t lo, size_t hi, size_t *begin)
{
    size_t a = (size_t)q * p->shard, b = a + p->shard;
    size_t s = lo > a ? lo : a, e = hi < b ? hi : b;
    *begin = s;
    return e > s ? e - s : 0;
}
