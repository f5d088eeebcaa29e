/* zerosim — what the report's writers share (src/report only): each rank's
 * figures (figures.c), the classes of ranks with the same figures
 * (classes.c) and a growing text buffer (csv.c). */
#ifndef ZEROSIM_REPORT_IMPL_H
#define ZEROSIM_REPORT_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include "zerosim/report.h"

/* ---- each rank's figures (figures.c) ------------------------------------ */

/* The report's memory rows: one per category, the three optimizer ones
 * also summed into "optimizer". */
typedef struct {
    const char *name;
    int cats[3];
    int ncats;
} zs_mem_row;

extern const zs_mem_row zs_report_mem_rows[];
extern const size_t zs_report_n_mem_rows;

/* The prediction for rank q: its pipeline stage's with --pp. */
const zs_prediction *zs_report_pred_of(const zs_train_result *r, int q);
/* Rank q's pipeline stage (0 without --pp). */
int zs_report_stage_of(const zs_train_result *r, int q);
/* Measured peak of memory row k on rank q, and its prediction (*has = 0
 * when one of its categories has none). */
size_t zs_report_row_peak(const zs_train_result *r, int q, size_t k);
size_t zs_report_row_pred(const zs_train_result *r, int q, size_t k, int *has);
double zs_report_ratio(double measured, double predicted);
/* Whether any rank holds bytes off the device (offload): O(N), so the
 * writers ask once. */
int zs_report_has_tiers(const zs_train_result *r);

/* Training traffic of op o on rank q over the run in the ring-volume
 * convention; *calls, *secs and *api (the full buffers) beside it. */
double zs_report_op_bytes(const zs_train_result *r, int q, int o, double *calls, double *secs,
                          double *api);
/* Its prediction; -1 when there is none. */
double zs_report_op_pred(const zs_train_result *r, int q, int o);
/* The part of it across nodes, measured and predicted (-1: none). */
double zs_report_op_inter(const zs_train_result *r, int q, int o);
double zs_report_op_pred_inter(const zs_train_result *r, int q, int o);
/* Rank q's collective seconds in training and the part compute hid. */
void zs_report_comm_time(const zs_train_result *r, int q, double *total, double *hidden);
/* Pipeline: rank q's seconds waiting in receives, and the steps' seconds. */
void zs_report_pp_idle(const zs_train_result *r, int q, double *wait_s, double *step_s);

/* The model chunks a rank holds: v with the interleaved schedule, else 1. */
int zs_report_pp_chunks(const zs_run_config *cfg);
/* The ideal bubble fraction: (P-1)/(m+P-1), interleaved (P-1)/(v·m+P-1). */
double zs_report_pp_ideal(const zs_run_config *cfg);

/* ---- classes of ranks (classes.c) ---------------------------------------- */

/* What a class's ranks have in common: the figures of one table. */
typedef enum {
    ZS_FIGURES_MEMORY = 0, /* the memory rows, tiers, phases, the mix at the peak */
    ZS_FIGURES_MEMORY_TABLE, /* the memory table's: the stage, each category's peak,
                                the phases', the tiers' */
    ZS_FIGURES_COMM,       /* every op's and group's traffic, calls, seconds, predictions */
    ZS_FIGURES_TRAFFIC,    /* the traffic table's columns (bytes, calls, predictions) */
    ZS_FIGURES_COMM_TIME,  /* collective seconds per step, hidden */
    ZS_FIGURES_PIPELINE,   /* stage, slots, in flight, waits */
    ZS_FIGURES_CKPT,       /* checkpoint files written and read */
    ZS_FIGURES_NODE,       /* the node */
    ZS_FIGURES_NKINDS
} zs_rank_figures;

/* Ranks in classes: class_of[q] is rank q's class, classes numbered in the
 * order of their first ranks; next[q] the next rank of q's class (-1 after
 * its last), so a class's ranks are first[k], next[first[k]], ... */
typedef struct {
    int world_size;
    int n_classes;
    int *class_of; /* [world_size] */
    int *next;     /* [world_size] */
    int *first;    /* [n_classes] */
    int *last;     /* [n_classes] */
    int *count;    /* [n_classes] */
} zs_rank_classes;

/* Group the ranks of r by the figures of one kind: all ranks with the same
 * figures (consecutive = 0), or only runs of consecutive ranks (1: the
 * tables' per-rank form, each run one class). O(N); 0, or -1 out of memory. */
int zs_rank_classes_build(zs_rank_classes *c, const zs_train_result *r, zs_rank_figures kind,
                          int has_tiers, int consecutive);
void zs_rank_classes_free(zs_rank_classes *c);
/* Class k's ranks as ranges, "0-1022,1024-2046", from its skip-th rank on
 * (skip 1: all but the first); a malloc'ed string, NULL out of memory. */
char *zs_rank_classes_ranges(const zs_rank_classes *c, int k, int skip);

/* Whether the report lists rows per class (else per rank): per class from
 * 9 ranks on, unless asked for per-rank rows. */
int zs_report_by_class(const zs_train_result *r, zs_report_rows rows);

/* ---- a growing text buffer (csv.c) --------------------------------------- */

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} zs_text;

void zs_text_add(zs_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
