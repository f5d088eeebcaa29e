/* zerosim — which features combine: every rule about combinations in one
 * table (src/config/compat.c).
 *
 * A rule relates two or more features (ZeRO stage, tensor, pipeline and
 * expert parallelism, offload, ZeRO++, compression, checkpointing, overlap,
 * deterministic mode, precision, the gradient schedule, the backend) and
 * either refuses the combination with one line saying what to do, or
 * adjusts the configuration and says so. Each rule has a scope: the callers
 * (finalisation for training and phantom runs, the planner, the engine for
 * a backend's capabilities) ask for the rules of their scope, and nothing
 * else refuses a combination. `zerosim config-keys --combinations` prints
 * the rules and the matrix of every pair of the main features.
 */
#ifndef ZEROSIM_COMPAT_H
#define ZEROSIM_COMPAT_H

#include <stddef.h>
#include <stdio.h>
#include "zerosim/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Who asks. Training and phantom runs share finalisation; a rule that
 * holds for a run holds for the plan of it (ZS_SCOPE_RUN). */
enum {
    ZS_SCOPE_TRAIN = 1u << 0,   /* zerosim train, real or --phantom */
    ZS_SCOPE_PLAN = 1u << 2,    /* zerosim plan */
    ZS_SCOPE_DEVICE = 1u << 3,  /* a backend's capabilities (CUDA's memory
                                   the host cannot read, the portable
                                   backend's exact sums): the engine asks */
    ZS_SCOPE_RUN = ZS_SCOPE_TRAIN | ZS_SCOPE_PLAN
};

typedef enum { ZS_COMPAT_REFUSE = 0, ZS_COMPAT_ADJUST = 1 } zs_compat_action;

/* What a rule may read besides the configuration. */
typedef struct {
    int world;               /* ranks of the run (the plan's devices) */
    unsigned scope;          /* the asker: one ZS_SCOPE_* bit */
    const char *backend;     /* ZS_SCOPE_DEVICE: the backend's name */
    int backend_host;        /* ZS_SCOPE_DEVICE: the host reads its memory */
    int backend_has_tp;      /* ZS_SCOPE_DEVICE: it has tensor-parallel kernels */
    int plan_closed_form;    /* ZS_SCOPE_PLAN: the paper's or Megatron's closed
                                forms count the states (--convention), not the
                                step program */
    int devices_per_node;    /* ZS_SCOPE_PLAN: the devices of one node
                                (--devices-per-node); 0 where no rule needs it */
    int backend_exact_sums;  /* ZS_SCOPE_DEVICE: it sums in fixed slices
                                (the portable backend, --exact-slices) */
} zs_compat_ctx;

/* Apply every rule of x->scope to c in order: the first refusal fails with
 * its line (zs_error_msg); adjustments change c and are appended to
 * c->adjusted ("; "-separated) for the start-up line and the report. */
int zs_compat_apply(zs_run_config *c, const zs_compat_ctx *x);

/* Only the rules of the DEVICE scope, without changing cfg: the engine
 * asks before it allocates (phantom runs do not ask). */
int zs_compat_check_device(const zs_run_config *cfg, int world, const char *backend,
                           int backend_host, int backend_has_tp, int backend_exact_sums);


/* Expert parallelism in DeepSpeed's layout (zs_step_ep_split,
 * zerosim/program.h): NULL where a run of cfg (finalized: cfg->model.moe_ep
 * and cfg->model.tp set) over world data-parallel ranks takes it, else the
 * first reason it does not ("offload", "gradient compression", ...). With
 * --ep-layout deepspeed the order of the sums does not decide; the rule
 * "ep-layout+deepspeed" refuses the run where a reason remains. */
const char *zs_compat_ep_split_why(const zs_run_config *cfg, int world);
/* 1 when DeepSpeed's layout gives --ep 1's bytes over world data-parallel
 * ranks: deterministic mode, or 2 ranks in fp32 without the step
 * schedule's accumulation. */
int zs_step_ep_exact(const zs_run_config *cfg, int world);

/* zerosim config-keys --combinations: the rules, the features and the
 * matrix of every pair. */
void zs_compat_print(FILE *f);

#ifdef __cplusplus
}
#endif
#endif
