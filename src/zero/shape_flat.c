/* zerosim — the shape of a bare parameter count, for the planner's --params
 * (see zerosim/program.h). */
#include "zerosim/program.h"
#include "zerosim/comm.h"
#include "zerosim/optim.h"

#include <string.h>

void zs_step_shape_build_flat(const zs_run_config *cfg, size_t num_params, int world,
                              zs_step_shape *s)
{
    zs_step_shape_init(s, cfg);
    s->pp = 1;
    s->slots = 1;
    zs_partition_make(&s->part, num_params, world, 0, s->det);
    if (zs_optim_is_onebit(cfg->optimizer)) /* as zs_step_shape_build */
        s->onebit_elems = zs_comm_onebit_padded(s->part.padded, world);
    if (cfg->optimizer == ZS_OPT_ONEBITLAMB) /* a bare count has no layout: one tensor */
        s->onebit_lamb_extra = zs_onebit_lamb_extra(s->part.padded, 1);
    zs_step_shape_place_buffers(s);
}
