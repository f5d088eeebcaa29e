/* zerosim — the Chrome trace of a run (src/run/trace.c), for train.c. */
#ifndef ZEROSIM_RUN_TRACE_H
#define ZEROSIM_RUN_TRACE_H

#include "zerosim/comm.h"
#include "zerosim/zero.h"
#include "zerosim/train.h"

#include <stddef.h>

/* Collective over comm: this rank's op spans and its collectives from
 * ledger record rec0 on (times from t0), gathered into r->trace_json on
 * rank 0; r->trace_truncated when the ledger dropped records. */
int zs_trace_collect(zs_comm_t comm, zs_engine *e, size_t rec0, double t0, zs_train_result *r);

#endif
