/* zerosim — a shape's flags, and the shape of a bare parameter count (see
 * zerosim/program.h). */
#include "zerosim/program.h"

#include <string.h>

void zs_step_shape_init(zs_step_shape *s, const zs_run_config *cfg)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->stage = cfg->stage;
    s->det = cfg->deterministic;
    s->pt = cfg->precision;
    s->ps = zs_dtype_size(s->pt);
    s->mixed = cfg->precision != ZS_DTYPE_F32;
    s->comp = cfg->compression.kind != ZS_COMP_NONE;
    s->reduce_step = zs_step_reduce_once(cfg);
    s->overlap = zs_step_overlap(cfg);
}

void zs_step_shape_build_flat(const zs_run_config *cfg, size_t num_params, int world,
                              zs_step_shape *s)
{
    zs_step_shape_init(s, cfg);
    s->pp = 1;
    s->slots = 1;
    zs_partition_make(&s->part, num_params, world, 0, s->det);
    zs_step_shape_place_buffers(s);
}
