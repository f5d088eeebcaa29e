/* zerosim — what a training run (train.c) and a phantom run (phantom.c)
 * share inside src/run: the statistics' packing, the node shape, a
 * pipeline stage's step shape, one rank's run and the expert-parallel
 * communicators. Not installed; include/zerosim/train.h is the interface. */
#ifndef ZEROSIM_RUN_TRAIN_IMPL_H
#define ZEROSIM_RUN_TRAIN_IMPL_H

#include "zerosim/train.h"
#include "zerosim/program.h"

/* One rank's statistics as a row of doubles (exact: byte counts stay far
 * below 2^53): memory per category, phase peaks, the total's peak, then the
 * comm sums per op and phase. */
enum {
    /* + host, nvme peaks, then the non-blocking gathers' span and wait */
    ZS_NM = 2 * ZS_MEM_NCAT + ZS_MEM_NPHASES + 1 + 2 * ZS_MEM_NCAT + 2,
    ZS_NC = ZS_OP_NOPS * ZS_PHASE_NPHASES * 6 + ZS_GROUP_NGROUPS * ZS_OP_NOPS * 5 + 1
};

/* Seconds on the monotonic clock. */
double zs_train_now(void);

void zs_train_pack_stats(const zs_train_result *r, zs_comm_t comm, double *mine);

/* Rank q's row of statistics into r's per-rank arrays. */
void zs_train_unpack_stats(zs_train_result *r, int q, const double *v);

/* From the nodes of the ranks: each rank's crossings per group and its
 * data-parallel group's ranks on its node (for the predictions of the
 * inter-node bytes; once per group, not per rank: phantom worlds are big). */
int zs_train_node_shape(zs_train_result *r, int tp, int pp);

/* r's per-rank arrays for N ranks. */
int zs_train_alloc_stats(zs_train_result *r, int N);

/* Pipeline stage st's step shape over D data-parallel ranks (st = 0 and
 * P = 1: the whole model's), as its ranks' engines build it: the stage's
 * configuration, and with expert parallelism the engine's layout and its
 * model's buffers (zs_engine_set_ep). */
int zs_train_stage_shape(const zs_run_config *cfg, int st, int D, zs_step_shape *shape);

/* One rank's run on backend be: engine, steps, hash, this rank's memory
 * statistics in r->mem and, on rank 0, the comms table. Collective over
 * comm (a phantom comm makes it one simulated rank). */
int zs_train_rank(const zs_run_config *cfg, const zs_train_options *o, zs_comm_t comm,
                  zs_comm_t dp, zs_comm_t tp, zs_comm_t pp, zs_comm_t ep,
                  zs_comm_t edp, zs_comm_t cp, zs_backend_t be, const zs_step_shape *shape,
                  zs_train_result *r);

/* The expert-parallel group of this rank in comm (cfg->ep ranks), and its
 * expert-data-parallel group (tagged edp; the ranks of the
 * data-parallel group with the same index in their ep groups), which the
 * engine's DeepSpeed layout reduces the experts over. */
int zs_train_ep_comm(zs_comm_t comm, const zs_run_config *cfg, zs_run_config *local,
                     zs_comm_t *out, zs_comm_t *edp);

#endif
