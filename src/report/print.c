/* zerosim — the report's tables for people: memory, checkpoint files,
 * communication time, the pipeline and traffic per rank, a rank's rows
 * standing for the ranks with the same figures. */
#include "build-config.h"
#include "report_impl.h"
#include "zerosim/mesh.h"
#include "zerosim/predict.h"
#include "zerosim/program.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a table's row printer needs besides the rank. */
typedef struct {
    int has_tiers; /* offload: the host and nvme tiers' rows */
    int nodes;     /* more than one node: the inter-node columns */
} zs_print_ctx;

typedef void (*zs_print_rank_fn)(FILE *f, const zs_train_result *r, int q,
                                 const zs_print_ctx *x);

/* After a class's first rank's rows: the ranks it stands for. */
static void zs_print_same(FILE *f, const zs_rank_classes *c, int k)
{
    int rep = c->first[k];
    if (c->count[k] == 2) {
        fprintf(f, "%5d  (the same as rank %d)\n", c->next[rep], rep);
    } else if (c->count[k] > 2) {
        char *list = zs_rank_classes_ranges(c, k, 1);
        fprintf(f, "%5s  (ranks %s: the same as rank %d)\n", "", list ? list : "(out of memory)",
                rep);
        free(list);
    }
}

/* Print a table's rows: every rank (fold 0), or a class's first rank
 * standing for the others, the classes of the ranks alike (by_class) or
 * of consecutive ranks alike (fold 1, without by_class). */
static void zs_print_ranks(FILE *f, const zs_train_result *r, zs_rank_figures kind, int fold,
                           int by_class, zs_print_rank_fn row, const zs_print_ctx *x)
{
    zs_rank_classes c;
    if ((!fold && !by_class) ||
        zs_rank_classes_build(&c, r, kind, x->has_tiers, !by_class) != 0) {
        for (int q = 0; q < r->world_size; q++) /* or, out of memory, every rank */
            row(f, r, q, x);
        return;
    }
    for (int k = 0; k < c.n_classes; k++) {
        row(f, r, c.first[k], x);
        zs_print_same(f, &c, k);
    }
    zs_rank_classes_free(&c);
}

static void zs_report_print_pipeline_rank(FILE *f, const zs_train_result *r, int q,
                                          const zs_print_ctx *x)
{
    (void)x;
    double w, t;
    zs_report_pp_idle(r, q, &w, &t);
    const zs_prediction *pr = zs_report_pred_of(r, q);
    fprintf(f, "%5d %6d %8d %10d %14.6f %12.6f %9.3f\n", q, zs_report_stage_of(r, q),
            pr->act_slots, pr->in_flight, w, t, t > 0 ? w / t : 0.0);
}

static void zs_report_print_pipeline(FILE *f, const zs_run_config *cfg, const zs_train_result *r,
                                     int by_class, const zs_print_ctx *x)
{
    if (zs_report_pp_chunks(cfg) > 1)
        fprintf(f, "\npipeline: %d stages, interleaved, %d model chunks a rank, %d micro-batches; "
                   "ideal bubble (P-1)/(v*m+P-1) = %.3f\n",
                cfg->pp, zs_report_pp_chunks(cfg), cfg->grad_accum, zs_report_pp_ideal(cfg));
    else
        fprintf(f, "\npipeline: %d stages, %s, %d micro-batches; ideal bubble (P-1)/(m+P-1) = "
                   "%.3f\n",
                cfg->pp, zs_pp_schedule_name(cfg->pp_schedule), cfg->grad_accum,
                zs_report_pp_ideal(cfg));
    fprintf(f, "%5s %6s %8s %10s %14s %12s %9s\n", "rank", "stage", "slots", "in_flight",
            "recv_wait_s", "steps_s", "idle");
    zs_print_ranks(f, r, ZS_FIGURES_PIPELINE, 0, by_class, zs_report_print_pipeline_rank, x);
}

/* nccl-tests' bus bandwidth factor of an op on N ranks. */
static double zs_busbw_factor(int op, int N)
{
    if (N < 2)
        return 0.0;
    double f = (double)(N - 1) / N;
    return op == ZS_OP_ALLREDUCE ? 2 * f : f;
}

static void zs_report_print_ckpt_rank(FILE *f, const zs_train_result *r, int q,
                                      const zs_print_ctx *x)
{
    (void)x;
    const zs_ckpt_io *c = &r->ckpt_ranks[q];
    fprintf(f, "%4d  %5d  %13llu  %13llu  %13llu  %13llu\n", q, c->saves,
            (unsigned long long)c->written, (unsigned long long)c->tensor_written,
            (unsigned long long)(r->ckpt_pred[q] * (uint64_t)c->saves),
            (unsigned long long)c->read);
}

static void zs_report_print_ckpt(FILE *f, const zs_train_result *r, int by_class,
                                 const zs_print_ctx *x)
{
    if (!r->ckpt_ranks)
        return;
    fprintf(f, "\ncheckpoint files per rank (bytes on disk, not device memory; tensor bytes "
               "predicted = saves x shard x states)\n");
    fprintf(f, "rank  saves        written   tensor bytes      predicted           read\n");
    zs_print_ranks(f, r, ZS_FIGURES_CKPT, 0, by_class, zs_report_print_ckpt_rank, x);
}

/* Rank q's rows of the memory table: each category measured and
 * predicted, the total peak by phase, and the host and nvme tiers. */
static void zs_report_print_memory_rank(FILE *f, const zs_train_result *r, int q,
                                        const zs_print_ctx *x)
{
    for (size_t k = 0; k < zs_report_n_mem_rows; k++) {
        int has;
        size_t pred = zs_report_row_pred(r, q, k, &has), meas = zs_report_row_peak(r, q, k);
        if (!has && meas == 0)
            continue;
        if (has)
            fprintf(f, "%5d  %-17s %15zu %15zu %9.3f\n", q, zs_report_mem_rows[k].name, meas, pred,
                    zs_report_ratio((double)meas, (double)pred));
        else
            fprintf(f, "%5d  %-17s %15zu %15s %9s\n", q, zs_report_mem_rows[k].name, meas, "-", "-");
    }
    fprintf(f, "%5d  %-17s %15zu   (setup %zu, forward %zu, backward %zu, step %zu)\n", q,
            "total peak", r->total_peaks[q], r->phase_peaks[q][ZS_MEM_PHASE_SETUP],
            r->phase_peaks[q][ZS_MEM_PHASE_FORWARD], r->phase_peaks[q][ZS_MEM_PHASE_BACKWARD],
            r->phase_peaks[q][ZS_MEM_PHASE_STEP]);
    for (int t = ZS_TIER_HOST; x->has_tiers && t < ZS_MEM_NTIERS; t++)
        for (int c = 0; c < ZS_MEM_NCAT; c++) {
            size_t meas = r->tier_peaks[q][t][c], pred = zs_report_pred_of(r, q)->tier_bytes[t][c];
            if (!meas && !pred)
                continue;
            char name[40];
            snprintf(name, sizeof name, "%s %s", zs_mem_tier_name((zs_mem_tier)t),
                     zs_mem_category_name((zs_mem_category)c));
            fprintf(f, "%5d  %-17s %15zu %15zu %9.3f\n", q, name, meas, pred,
                    zs_report_ratio((double)meas, (double)pred));
        }
}

/* The memory table (ranks alike folded into one line), the process's
 * RSS, stage 3's live parameters and hpZ's secondary partition. */
static void zs_report_print_memory(FILE *f, const zs_run_config *cfg, const zs_train_result *r,
                                   int by_class, const zs_print_ctx *x)
{
    fprintf(f, "\nmemory per rank (peak bytes; predicted by counting the step program, "
               "zerosim/program.h)\n");
    fprintf(f, "%5s  %-17s %15s %15s %9s\n", "rank", "category", "measured", "predicted", "ratio");
    zs_print_ranks(f, r, ZS_FIGURES_MEMORY_TABLE, 1, by_class, zs_report_print_memory_rank, x);
    fprintf(f, "%s peak RSS %zu bytes\n", r->phantom ? "this process's (all simulated ranks)" : "rank 0",
            zs_report_peak_rss());
    if (cfg->stage == 3)
        fprintf(f, "stage 3: at most %zu gathered parameters alive (predicted %zu, bound %zu)%s\n",
                r->live_params_peak, r->pred.live_params, cfg->stage3_max_live_parameters,
                r->units_over_live_bound ? "; units larger than the bound are gathered alone" : "");
    if (r->hpz > 1)
        fprintf(f, "hpZ: params include the secondary partition, %zu bytes per rank (%zu of the "
                   "%zu padded parameters, 1/%d, in %s)\n",
                r->padded_params / (size_t)r->hpz * zs_dtype_size(cfg->precision),
                r->padded_params / (size_t)r->hpz, r->padded_params, r->hpz,
                zs_dtype_name(cfg->precision));
}

static void zs_report_print_comm_time_rank(FILE *f, const zs_train_result *r, int q,
                                           const zs_print_ctx *x)
{
    (void)x;
    double tot, hid;
    zs_report_comm_time(r, q, &tot, &hid);
    fprintf(f, "%5d  %12.6f %12.6f %12.6f\n", q, tot / r->steps, hid / r->steps,
            (tot - hid) / r->steps);
}

/* Each rank's collective time per step, and the part compute hid. */
static void zs_report_print_comm_time(FILE *f, const zs_run_config *cfg, const zs_train_result *r,
                                      int by_class, const zs_print_ctx *x)
{
    fprintf(f, "\ncommunication time per step (collectives; hidden: stage 3's prefetched "
               "gathers%s while compute ran)\n",
            zs_step_overlap(cfg) ? " and the reduce-scatters started by overlap_comm" : "");
    fprintf(f, "%5s  %12s %12s %12s\n", "rank", "total_s", "hidden_s", "exposed_s");
    zs_print_ranks(f, r, ZS_FIGURES_COMM_TIME, 0, by_class, zs_report_print_comm_time_rank, x);
}

/* Rank q's rows of the traffic table: each op's bytes per step measured
 * and predicted (nodes: and across nodes). */
static void zs_report_print_traffic_rank(FILE *f, const zs_train_result *r, int q,
                                         const zs_print_ctx *x)
{
    int nodes = x->nodes;
    for (int o = 0; o < ZS_OP_NOPS; o++) {
        double calls, secs, api, b = zs_report_op_bytes(r, q, o, &calls, &secs, &api);
        double pb = zs_report_op_pred(r, q, o);
        if (calls == 0)
            continue;
        double mb = b / r->steps, ib = zs_report_op_inter(r, q, o) / r->steps;
        double ipb = zs_report_op_pred_inter(r, q, o);
        char ip[400] = "", ratio[16] = "-", pred[24] = "-";
        if (nodes) {
            char t[24] = "-";
            if (ipb >= 0)
                snprintf(t, sizeof t, "%.1f", ipb / r->steps);
            snprintf(ip, sizeof ip, " %15.1f %15s", ib, t);
        }
        if (pb >= 0) {
            snprintf(pred, sizeof pred, "%.1f", pb / r->steps);
            if (r->world_size > 1)
                snprintf(ratio, sizeof ratio, "%.3f", zs_report_ratio(mb, pb / r->steps));
            else
                snprintf(ratio, sizeof ratio, "(N=1)");
        }
        fprintf(f, "%5d  %-15s %15.1f %15s %9s%s\n", q, zs_comm_op_name(o), mb, pred, ratio, ip);
    }
}

/* The traffic table (ranks alike folded into one line); the inter-node
 * columns only where there are nodes. */
static void zs_report_print_traffic(FILE *f, const zs_train_result *r, int by_class,
                                    const zs_print_ctx *x)
{
    if (x->nodes) {
        fprintf(f, "\ntraffic per rank per step (bytes, ring volume: (N-1)/N of each buffer; "
                   "inter: across nodes, %d nodes)\n", r->nodes);
        fprintf(f, "%5s  %-15s %15s %15s %9s %15s %15s\n", "rank", "op", "measured", "predicted",
                "ratio", "inter", "inter pred");
    } else {
        fprintf(f, "\ntraffic per rank per step (bytes, ring volume: (N-1)/N of each buffer)\n");
        fprintf(f, "%5s  %-15s %15s %15s %9s\n", "rank", "op", "measured", "predicted", "ratio");
    }
    zs_print_ranks(f, r, ZS_FIGURES_TRAFFIC, 1, by_class, zs_report_print_traffic_rank, x);
}

/* Rank 0's traffic by group (a mesh: data- and tensor-parallel), then its
 * collectives by message size with nccl-tests' bandwidths. */
static void zs_report_print_comms(FILE *f, const zs_train_result *r)
{
    int N = r->world_size;
    if (r->dp_size > 0 && r->dp_size != N) {
        fprintf(f, "\ntraffic per step by group on rank 0 (dp %d, tp %d ranks)\n", r->dp_size,
                r->tp_size);
        fprintf(f, "%-6s %-15s %10s %15s\n", "group", "op", "calls", "bytes");
        for (int g = 0; g < ZS_GROUP_NGROUPS; g++)
            for (int o = 0; o < ZS_OP_NOPS; o++) {
                const zs_comm_sum *cg = &r->comm_group[0][g][o];
                if (cg->calls > 0)
                    fprintf(f, "%-6s %-15s %10.1f %15.1f\n", zs_comm_group_name(g),
                            zs_comm_op_name(o), cg->calls / r->steps, cg->wire / r->steps);
            }
    }
    fprintf(f, "\ncomms on rank 0 (training calls; algbw = bytes/time, busbw as nccl-tests)\n");
    fprintf(f, "%-15s %14s %8s %12s %12s %12s\n", "op", "message bytes", "count", "total ms",
            "algbw GB/s", "busbw GB/s");
    for (size_t i = 0; i < r->n_comm_rows; i++) {
        const zs_comm_row *c = &r->comm_rows[i];
        double alg = c->seconds > 0 ? (double)c->msg_bytes * c->count / c->seconds / 1e9 : 0.0;
        fprintf(f, "%-15s %14zu %8zu %12.3f %12.3f %12.3f\n", zs_comm_op_name(c->op), c->msg_bytes,
                c->count, c->seconds * 1e3, alg, alg * zs_busbw_factor(c->op, N));
    }
}

void zs_report_print(FILE *f, const zs_run_config *cfg, const zs_train_result *r,
                     zs_report_rows rows)
{
    zs_print_ctx x = {.has_tiers = zs_report_has_tiers(r), .nodes = r->nodes > 1};
    int by_class = zs_report_by_class(r, rows);
    zs_report_print_memory(f, cfg, r, by_class, &x);
    zs_report_print_ckpt(f, r, by_class, &x);
    if (!r->phantom && r->steps > 0)
        zs_report_print_comm_time(f, cfg, r, by_class, &x);
    if (r->pp_pred && !r->phantom && r->steps > 0)
        zs_report_print_pipeline(f, cfg, r, by_class, &x);
    zs_report_print_traffic(f, r, by_class, &x);
    zs_report_print_comms(f, r);
}
