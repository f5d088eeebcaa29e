/* zerosim — 0/1 Adam's schedule (Lu et al., arXiv 2202.06009, as
 * DeepSpeed's ZeroOneAdam in deepspeed/runtime/fp16/onebit/zoadam.py
 * decides it).
 *
 * The steps are numbered as DeepSpeed's state['step']: its first call of
 * step() only sets up the buffers and changes no weight, so zerosim's first
 * applied step is t = 2. Before the freeze (t - 1 <= max(var_freeze_step, 1))
 * step t updates the variance, with the gradient all-reduced exactly, when
 * t is a multiple of var_interval; otherwise the gradient is exchanged 1-bit
 * compressed and only the momentum moves. Each variance update counts; after
 * var_update_scaler of them var_interval doubles (1, 2, 4, ...). After the
 * step with t > var_freeze_step the variance is frozen: every step is a
 * local step (no communication), and the steps with t a multiple of
 * local_interval end with a 1-bit sync of the update accumulated since the
 * last one. Every step after the freeze counts; after local_step_scaler of
 * them local_interval doubles, up to local_step_clipper.
 *
 * The schedule depends only on t and the four parameters, so a resumed run
 * rebuilds it from the number of applied steps (zs_zeroone_sched_at).
 */
#include "zerosim/optim.h"

#include <string.h>

void zs_zeroone_sched_init(zs_zeroone_sched *s)
{
    memset(s, 0, sizeof *s);
    s->t = 1; /* DeepSpeed's set-up call */
    s->var_interval = 1;
    s->local_interval = 1;
}

zs_zeroone_kind zs_zeroone_sched_next(const zs_run_config *c, zs_zeroone_sched *s, int *freezes)
{
    long t = ++s->t;
    long vfs = c->onebit_freeze_step;
    int frozen = t - 1 > 1 && t - 1 > vfs;
    zs_zeroone_kind k;
    *freezes = 0;
    if (!frozen) {
        k = t % s->var_interval == 0 ? ZS_ZO_EXACT : ZS_ZO_GRAD_ONEBIT;
        if (k == ZS_ZO_EXACT && ++s->var_counter == c->zo_var_update_scaler) {
            s->var_counter = 0;
            s->var_interval *= 2;
        }
        *freezes = t > vfs;
        return k;
    }
    k = t % s->local_interval == 0 ? ZS_ZO_SYNC : ZS_ZO_LOCAL;
    if (++s->local_counter == c->zo_local_step_scaler) {
        s->local_counter = 0;
        s->local_interval = s->local_interval * 2 < c->zo_local_step_clipper
                                ? s->local_interval * 2
                                : c->zo_local_step_clipper;
    }
    return k;
}

void zs_zeroone_sched_at(const zs_run_config *c, long applied, zs_zeroone_sched *s)
{
    int freezes;
    zs_zeroone_sched_init(s);
    for (long i = 0; i < applied; i++)
        (void)zs_zeroone_sched_next(c, s, &freezes);
}

const char *zs_zeroone_kind_name(zs_zeroone_kind k)
{
    static const char *const names[] = {"exact", "onebit_grad", "local", "sync"};
    return (unsigned)k < 4 ? names[k] : "?";
}
