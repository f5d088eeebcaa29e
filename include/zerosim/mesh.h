/* zerosim — the process mesh: N ranks as tensor × data × pipeline groups.
 *
 * Rank order is Megatron-LM's default: tensor-parallel fastest, then data,
 * then pipeline:
 *
 *   rank = tp_rank + T · (dp_rank + D · pp_rank),   D = N / (T · P)
 *
 * so that with 16 ranks, T = 2 and P = 4 the tensor groups are [0,1] …
 * [14,15], the data groups [0,2], [1,3], [4,6], [5,7], …, and the pipeline
 * groups [0,4,8,12], [1,5,9,13], [2,6,10,14], [3,7,11,15]. Groups are
 * numbered in the order of their lowest rank's position in that list:
 * tensor group i holds ranks i·T …; data group i has pp = i / T and
 * tp = i mod T; pipeline group i has dp = i / T and tp = i mod T.
 *
 * The pure functions below need no MPI (for printing, planning and phantom
 * runs); zs_mesh_create makes one MPI communicator per group this rank is
 * in, each tagged with its axis in the comm ledger.
 */
#ifndef ZEROSIM_MESH_H
#define ZEROSIM_MESH_H

#include "zerosim/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int tp, dp, pp;
} zs_mesh_coord;

/* 0 when T × P divides N (all at least 1), else a one-line message. */
int zs_mesh_check(int world, int tp, int pp);
/* The size of each group along axis g (ZS_GROUP_DP, TP or PP), and how many
 * such groups there are. */
int zs_mesh_group_size(int world, int tp, int pp, zs_comm_group g);
int zs_mesh_ngroups(int world, int tp, int pp, zs_comm_group g);
int zs_mesh_rank_of(int world, int tp, int pp, zs_mesh_coord c);
zs_mesh_coord zs_mesh_coord_of(int world, int tp, int pp, int rank);
/* The members of group `index` along axis g, in rank order; returns their
 * number (ranks must hold zs_mesh_group_size of them). */
int zs_mesh_group_ranks(int world, int tp, int pp, zs_comm_group g, int index, int *ranks);
/* The group along axis g that `rank` is in. */
int zs_mesh_group_index(int world, int tp, int pp, zs_comm_group g, int rank);

/* Nodes of the data-parallel group, from the rank equation above: with
 * nodes of ranks_per_node consecutive world ranks (zerosim train
 * --ranks-per-node; 0: the whole world on one node), the data-parallel
 * group of tensor rank tp_rank and pipeline stage pp_rank. Returns K when
 * its D members fall into nodes in blocks of K consecutive members, a node
 * each (K divides D; D when one node holds them all), 0 when a node holds
 * an irregular share. The shape, the counter and the predictor take K from
 * here; a run's communicator finds it from the node map
 * (zs_comm_node_blocks), and the run checks that the two agree. */
int zs_mesh_dp_node_blocks(int world, int tp, int pp, int tp_rank, int pp_rank,
                           int ranks_per_node);

/* Expert parallelism (DeepSpeed's deepspeed/utils/groups.py): each data-
 * parallel group (ranks d_0 .. d_{D-1} in data-parallel order) is cut into
 * expert-parallel groups of Ep consecutive members, d_{i Ep} ..
 * d_{i Ep + Ep - 1}, among which the experts are dealt, and into Ep
 * expert-data-parallel groups d_j, d_{j + Ep}, d_{j + 2 Ep}, ... that hold
 * the same experts (and reduce their gradients). With 16 ranks, tp = pp =
 * 1 and Ep = 2: expert-parallel [0,1], [2,3], ... and expert-data-parallel
 * [0,2,...,14], [1,3,...,15]. 0 when Ep divides D, else a message. */
int zs_mesh_check_ep(int world, int tp, int pp, int ep);
/* The number of expert-parallel (edp = 0) or expert-data-parallel (edp = 1)
 * groups, their size, and the members of group `index` (groups numbered
 * data-parallel group by data-parallel group); returns their number. */
int zs_mesh_ep_ngroups(int world, int tp, int pp, int ep, int edp);
int zs_mesh_ep_group_size(int world, int tp, int pp, int ep, int edp);
int zs_mesh_ep_group_ranks(int world, int tp, int pp, int ep, int edp, int index, int *ranks);

/* Context parallelism (Megatron-LM's cp; its order is tp-cp-dp-pp): C
 * ranks split each sample's sequence. The axis sits between tensor and
 * data, so the "dp" axis of the functions above, with D' = N / (T·P), is
 * then the combined data-and-context group (Megatron's data-parallel group
 * with context parallelism), member c + C·d for context rank c and data
 * rank d:
 *
 *   rank = tp_rank + T · (cp_rank + C · (dp_rank + D · pp_rank)),
 *
 * D = N / (T·C·P). ZeRO partitions and reduces over that combined group.
 * Each combined group is cut into context-parallel groups of C consecutive
 * members (cp = 0: the ring of a sample's chunks) and into C pure data-
 * parallel groups of every C-th member (cp = 1): with 8 ranks, tp = pp = 1
 * and C = 2, context groups [0,1], [2,3], [4,5], [6,7] and data groups
 * [0,2,4,6], [1,3,5,7]. 0 when T·C·P divides N, else a one-line message. */
int zs_mesh_check_cp(int world, int tp, int pp, int cp);
/* The number of context-parallel (dp_axis 0) or pure data-parallel
 * (dp_axis 1) groups, their size, and the members of group `index` (in
 * combined-group order); returns their number. */
int zs_mesh_cp_ngroups(int world, int tp, int pp, int cp, int dp_axis);
int zs_mesh_cp_group_size(int world, int tp, int pp, int cp, int dp_axis);
int zs_mesh_cp_group_ranks(int world, int tp, int pp, int cp, int dp_axis, int index,
                           int *ranks);
/* Member `member` of a combined data-and-context group: its context rank
 * (member mod cp) and its pure data-parallel rank (member / cp). */
void zs_mesh_cp_split(int member, int cp, int *cp_rank, int *dp_rank);

typedef struct zs_mesh zs_mesh;
/* Collective over world (or a phantom world: phantom groups). With
 * tp = pp = 1 the data-parallel communicator is the world itself. */
int zs_mesh_create(zs_comm_t world, int tp, int pp, zs_mesh **out);
/* The same with context parallelism of cp ranks: the dp communicator is
 * the combined data-and-context group, and the ZS_GROUP_CP communicator
 * the context-parallel group (its rank = this rank's cp_rank, from
 * zs_mesh_self(m).dp mod cp). zs_mesh_create is cp = 1. */
int zs_mesh_create_cp(zs_comm_t world, int tp, int pp, int cp, zs_mesh **out);
zs_comm_t zs_mesh_comm(const zs_mesh *m, zs_comm_group g);
zs_mesh_coord zs_mesh_self(const zs_mesh *m);
void zs_mesh_free(zs_mesh *m);

#ifdef __cplusplus
}
#endif
#endif
