/* zerosim — the planner's private declarations (src/predict/plan*.c). */
#ifndef ZEROSIM_PLAN_IMPL_H
#define ZEROSIM_PLAN_IMPL_H

#include "zerosim/plan.h"
#include "zerosim/predict.h"

/* Model states of the paper's and Megatron's conventions (plan_closed.c):
 * r's bytes, padded and shard. 0, or -1 with a message. */
int zs_plan_states_closed(const zs_plan_input *in, const zs_run_config *c, zs_plan_result *r);

/* --hierarchical: the data-parallel reduce-scatters and allgathers of
 * r->colls over N devices become two rings, inside nodes of K and across
 * (plan_links.c). 0, or -1 with a message. */
int zs_plan_hierarchical(zs_plan_result *r, int N, int K);
/* --tp or --pp: which of the most loaded stage's rings and peers cross
 * nodes of K devices (D data-parallel), the bytes that cross, and each
 * collective's link (the first ndp of r->colls data-parallel). */
int zs_plan_mesh_inter(zs_plan_result *r, const zs_run_config *c, const zs_prediction *pr,
                       int D, int K, int ndp);

#endif
