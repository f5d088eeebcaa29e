/* zerosim — expert parallelism's layout for the step (see zerosim/program.h):
 * whether DeepSpeed's layout is taken (its condition is the configuration
 * layer's, zs_compat_ep_split_why in src/config/compat.c), the
 * configurations a shape and the flat arrays are built from, and the expert
 * store's collectives. */
#include "zerosim/program.h"
#include "zerosim/compat.h"

int zs_step_ep_split(const zs_run_config *cfg, int world, const char **why)
{
    const char *w = zs_compat_ep_split_why(cfg, world);
    if (why)
        *why = w;
    return w == NULL;
}

void zs_step_ep_configs(const zs_run_config *cfg, int world, zs_run_config *shape_cfg,
                        zs_model_config *layout)
{
    *shape_cfg = *cfg;
    *layout = cfg->model;
    if (cfg->model.moe_ep <= 1)
        return;
    if (zs_step_ep_split(cfg, world, NULL)) {
        /* each source's gradients apart where the reduction must give
         * --ep 1's bytes; else the model's one sum over the sources */
        shape_cfg->model.moe_ep_home = zs_step_ep_exact(cfg, world) ? ZS_MOE_EP_BY_SOURCE : 0;
        shape_cfg->model.moe_ep_split = 1;
        *layout = shape_cfg->model;
        return;
    }
    shape_cfg->model.moe_ep_home = ZS_MOE_EP_HOME;
    layout->moe_ep = 1;
    layout->moe_ep_rank = 0;
}

void zs_step_expert_gathers(const zs_step_shape *s, const zs_step_program *p, double *bytes,
                            int *calls)
{
    *bytes = 0.0;
    *calls = 0;
    if (!s->xsplit || s->stage != 3 || s->xworld <= 1)
        return;
    double ring = (s->xworld - 1.0) / s->xworld;
    for (size_t i = 0; i < p->n; i++) {
        const zs_step_op *o = &p->ops[i];
        if ((o->kind != ZS_SOP_FORWARD && o->kind != ZS_SOP_BACKWARD) || o->unit < 0 ||
            o->unit >= s->U || s->xun[o->unit] == 0)
            continue;
        *bytes += ring * (double)s->xun[o->unit] * (double)s->ps;
        (*calls)++;
    }
}

void zs_step_expert_traffic(const zs_step_shape *s, double *rs_bytes, int *rs_calls,
                            double *ag_bytes, int *ag_calls)
{
    *rs_bytes = *ag_bytes = 0.0;
    *rs_calls = *ag_calls = 0;
    if (!s->xsplit || s->xworld <= 1)
        return; /* one rank per edp group: nothing to exchange */
    double M = s->xworld, ring = (M - 1.0) / M;
    *rs_calls = 1; /* fixed point, or floats (--ep-layout deepspeed) */
    *rs_bytes = ring * (double)s->xpadded * (s->det ? 8.0 : (double)s->ps);
    if (s->stage == 3)
        return; /* no parameters to bring back: the gathers (zs_step_expert_gathers) */
    *ag_calls = 1;
    *ag_bytes = ring * (double)s->xpadded * (double)s->ps;
}
