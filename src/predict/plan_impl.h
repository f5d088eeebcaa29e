/* zerosim — the planner's private declarations (src/predict/plan*.c). */
#ifndef ZEROSIM_PLAN_IMPL_H
#define ZEROSIM_PLAN_IMPL_H

#include "zerosim/plan.h"

/* Model states of the paper's and Megatron's conventions (plan_closed.c):
 * r's bytes, padded and shard. 0, or -1 with a message. */
int zs_plan_states_closed(const zs_plan_input *in, const zs_run_config *c, zs_plan_result *r);

#endif
