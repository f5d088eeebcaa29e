/* zerosim — reports: JSON for programs, a summary for people. */
#ifndef ZEROSIM_REPORT_H
#define ZEROSIM_REPORT_H

#include <stdio.h>
#include "zerosim/config.h"
#include "zerosim/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Write the JSON report to path atomically (a temporary file renamed into
 * place, so a failed run leaves nothing half-written). */
int zs_report_write_json(const char *path, const zs_run_config *cfg, const zs_train_result *r);
/* Write r->trace_json (Chrome's trace event format: chrome://tracing,
 * Perfetto) to path, atomically (a temporary name, then rename). */
int zs_report_write_trace(const char *path, const zs_train_result *r);

/* The tables for people: memory per rank (measured, predicted, ratio),
 * traffic per rank per step, and rank 0's comms table. */
void zs_report_print(FILE *f, const zs_run_config *cfg, const zs_train_result *r);

/* Create the --csv directory when missing; fail when it cannot be used. */
int zs_report_prepare_dir(const char *dir);
/* Write len bytes of text to path atomically (a temporary file renamed into
 * place): either the whole file appears or none. */
int zs_report_write_text(const char *path, const char *text, size_t len);

/* Write run.csv, memory.csv, comm.csv, timeline.csv and steps.csv
 * (#-headed columns for gnuplot) into dir, creating it when missing. */
int zs_report_write_csv(const char *dir, const zs_run_config *cfg, const zs_train_result *r);

/* Peak resident set size of this process in bytes (0 when unknown). */
size_t zs_report_peak_rss(void);

#ifdef __cplusplus
}
#endif
#endif
