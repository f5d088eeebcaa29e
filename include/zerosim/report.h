/* zerosim — reports: JSON for programs, a summary for people. */
#ifndef ZEROSIM_REPORT_H
#define ZEROSIM_REPORT_H

#include <stdio.h>
#include "zerosim/config.h"
#include "zerosim/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the report lists the figures of many ranks. Ranks whose figures
 * are the same form a class, listed once with its ranks as ranges
 * ("0-1022,1024-2046"); the writers cost O(N) either way. */
typedef enum {
    ZS_REPORT_ROWS_AUTO = 0, /* per rank up to 8 ranks, per class from 9 */
    ZS_REPORT_ROWS_PER_RANK  /* a row for every rank (--report-per-rank) */
} zs_report_rows;

/* The JSON report's layout ("report_version"): 2 added the classes of
 * ranks (docs/report.md). */
#define ZS_REPORT_VERSION 2

/* Write the JSON report to path atomically (a temporary file renamed into
 * place, so a failed run leaves nothing half-written). */
int zs_report_write_json(const char *path, const zs_run_config *cfg, const zs_train_result *r,
                         zs_report_rows rows);
/* Write r->trace_json (Chrome's trace event format: chrome://tracing,
 * Perfetto) to path, atomically (a temporary name, then rename). */
int zs_report_write_trace(const char *path, const zs_train_result *r);

/* The tables for people: memory per rank (measured, predicted, ratio),
 * traffic per rank per step, and rank 0's comms table; a rank's rows
 * stand for the ranks with the same figures (per class, or with
 * ZS_REPORT_ROWS_PER_RANK or up to 8 ranks for the next ranks alike). */
void zs_report_print(FILE *f, const zs_run_config *cfg, const zs_train_result *r,
                     zs_report_rows rows);

/* Create the --csv directory when missing; fail when it cannot be used. */
int zs_report_prepare_dir(const char *dir);
/* Write len bytes of text to path atomically (a temporary file renamed into
 * place): either the whole file appears or none. */
int zs_report_write_text(const char *path, const char *text, size_t len);

/* Write run.csv, memory.csv, comm.csv, timeline.csv and steps.csv
 * (#-headed columns for gnuplot) into dir, creating it when missing; a row
 * for every rank whatever the JSON's form. */
int zs_report_write_csv(const char *dir, const zs_run_config *cfg, const zs_train_result *r);

/* Peak resident set size of this process in bytes (0 when unknown). */
size_t zs_report_peak_rss(void);

#ifdef __cplusplus
}
#endif
#endif
