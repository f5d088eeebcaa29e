/* zerosim — the JSON report. */
#include "build-config.h"
#include "zerosim/report.h"
#include "zerosim/mesh.h"
#include "zerosim/io.h"
#include "zerosim/error.h"
#include "zerosim/file.h"
#include "zerosim/optim.h"
#include "zerosim/predict.h"
#include "zerosim/program.h"
#include "zerosim/mesh.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

size_t zs_report_peak_rss(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
#ifdef __APPLE__
    return (size_t)ru.ru_maxrss; /* macOS reports bytes */
#else
    return (size_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
#endif
}

/* A float as a JSON number, or null when it is not finite. */
static json_t *zs_json_real(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* The report's memory rows: one per category, the three optimizer ones
 * also summed into "optimizer". */
typedef struct {
    const char *name;
    int cats[3];
    int ncats;
} zs_mem_row;

static const zs_mem_row zs_mem_rows[] = {
    {"params", {ZS_MEM_PARAMS}, 1},
    {"grads", {ZS_MEM_GRADS}, 1},
    {"optimizer_master", {ZS_MEM_OPT_MASTER}, 1},
    {"optimizer_m", {ZS_MEM_OPT_M}, 1},
    {"optimizer_v", {ZS_MEM_OPT_V}, 1},
    {"optimizer", {ZS_MEM_OPT_MASTER, ZS_MEM_OPT_M, ZS_MEM_OPT_V}, 3},
    {"activations", {ZS_MEM_ACTIVATIONS}, 1},
    {"checkpoints", {ZS_MEM_CHECKPOINTS}, 1},
    {"comm_buffers", {ZS_MEM_COMM_BUFFERS}, 1},
    {"compression", {ZS_MEM_COMPRESSION}, 1},
    {"workspace", {ZS_MEM_WORKSPACE}, 1},
};
#define ZS_NROWS (sizeof zs_mem_rows / sizeof zs_mem_rows[0])

/* Measured peak and prediction of row k on rank q; *has = 0 when none. */
static size_t zs_row_peak(const zs_train_result *r, int q, size_t k)
{
    size_t v = 0;
    for (int i = 0; i < zs_mem_rows[k].ncats; i++)
        v += r->peaks[q][zs_mem_rows[k].cats[i]];
    return v;
}

/* The prediction for rank q: its pipeline stage's with --pp. */
static const zs_prediction *zs_pred_of(const zs_train_result *r, int q)
{
    if (!r->pp_pred)
        return &r->pred;
    int T = r->tp_size > 0 ? r->tp_size : 1;
    return &r->pp_pred[zs_mesh_coord_of(r->world_size, T, r->pp_size, q).pp];
}

static size_t zs_row_pred(const zs_train_result *r, int q, size_t k, int *has)
{
    const zs_prediction *pr = zs_pred_of(r, q);
    size_t v = 0;
    *has = 1;
    for (int i = 0; i < zs_mem_rows[k].ncats; i++) {
        int c = zs_mem_rows[k].cats[i];
        *has &= pr->has[c];
        v += pr->bytes[c];
    }
    return v;
}

static double zs_ratio(double measured, double predicted)
{
    if (predicted == 0.0)
        return measured == 0.0 ? 1.0 : INFINITY;
    return measured / predicted;
}

/* Training traffic of op o on rank q over the run: this rank's bytes
 * (zs_comm_record.wire_bytes); *api gets the full buffers' bytes. */
static double zs_op_bytes(const zs_train_result *r, int q, int o, double *calls, double *secs,
                          double *api)
{
    double b = 0.0;
    *calls = *secs = *api = 0.0;
    for (int p = 0; p < ZS_PHASE_NPHASES; p++) {
        if (p == ZS_PHASE_REPORT)
            continue;
        b += r->comm[q][o][p].wire;
        *api += r->comm[q][o][p].bytes;
        *calls += r->comm[q][o][p].calls;
        *secs += r->comm[q][o][p].seconds;
    }
    /* sum the full buffers first and convert once, so the ring volume of
     * many calls compares exactly with the prediction's; with a mesh,
     * reduce-scatter and allgather run over the data-parallel group, and
     * the other ops over several groups keep their recorded bytes */
    int dp = r->dp_size > 0 ? r->dp_size : r->world_size, mesh = dp != r->world_size;
    if (!mesh && o == ZS_OP_ALLGATHER && r->hpz > 1) { /* hpZ: backward gathers in K */
        double h = r->comm[q][o][ZS_PHASE_BACKWARD].bytes;
        b = zs_ring_bytes((size_t)(*api - h), dp) + zs_ring_bytes((size_t)h, r->hpz);
    } else if (!mesh && (o == ZS_OP_REDUCE_SCATTER || o == ZS_OP_ALLGATHER || o == ZS_OP_SCALARS)) {
        /* the expert store's calls run over the edp group: as recorded */
        const zs_comm_sum *x = r->comm_group ? &r->comm_group[q][ZS_GROUP_EDP][o] : NULL;
        b = zs_ring_bytes((size_t)(*api - (x ? x->bytes : 0.0)), dp) + (x ? x->wire : 0.0);
    } else if (o == ZS_OP_ALLREDUCE && !mesh)
        b = 2 * zs_ring_bytes((size_t)*api, r->world_size);
    return b;
}

/* Predicted traffic of op o on rank q over the run, in the same convention;
 * -1 when there is no prediction. */
static double zs_op_pred(const zs_train_result *r, int q, int o)
{
    const zs_prediction *pr = zs_pred_of(r, q);
    if (o == ZS_OP_SEND && r->pp_pred)
        return pr->p2p_send_bytes_per_step * r->steps +
               pr->tied_send_bytes_per_applied_step * r->steps_applied;
    if (o == ZS_OP_RECV && r->pp_pred)
        return pr->p2p_recv_bytes_per_step * r->steps +
               pr->tied_recv_bytes_per_applied_step * r->steps_applied;
    int N = r->dp_size > 0 ? r->dp_size : r->world_size, dense = r->steps - r->compressed_steps;
    if (o == ZS_OP_ALLREDUCE && pr->tp_allreduce_bytes_per_step > 0)
        return pr->tp_allreduce_bytes_per_step * r->steps;
    if (o == ZS_OP_REDUCE_SCATTER)
        return zs_ring_bytes(pr->rs_bytes_per_step, N) * dense +
               (pr->tp_rs_bytes_per_step + pr->edp_rs_bytes_per_step) * r->steps;
    if (o == ZS_OP_ALLGATHER && r->hpz > 1) { /* hpZ: the backward gathers in K */
        size_t h = pr->ag_hpz_bytes_per_step;
        return (zs_ring_bytes(pr->ag_bytes_per_step - h, N) + zs_ring_bytes(h, r->hpz)) *
                   r->steps +
               pr->tp_ag_bytes_per_step * r->steps;
    }
    if (o == ZS_OP_ALLGATHER)
        return zs_ring_bytes(pr->ag_bytes_per_step, N) * r->steps_applied +
               zs_ring_bytes(pr->ag_bytes_per_skipped_step, N) * r->skipped_steps +
               (pr->tp_ag_bytes_per_step + pr->edp_ag_bytes_per_step) * r->steps +
               pr->edp_ag_bytes_per_applied_step * r->steps_applied;
    if (o == ZS_OP_ALLTOALL && r->qgz_pred)
        return r->qgz_pred[q] * r->steps;
    if (o == ZS_OP_ALLTOALL && r->a2a_pred)
        return r->a2a_pred[q] * r->compressed_steps + pr->ep_a2a_bytes_per_step * r->steps;
    if (o == ZS_OP_ALLTOALL && pr->ep_a2a_calls_per_step > 0) /* the experts' dispatch */
        return pr->ep_a2a_bytes_per_step * r->steps;
    if (o == ZS_OP_D2H)
        return pr->d2h_bytes_per_step * r->steps +
               pr->d2h_bytes_per_applied_step * r->steps_applied;
    if (o == ZS_OP_H2D) /* the updated shard, and with offload_param every gather's part */
        return pr->h2d_bytes_per_step * r->steps_applied +
               (r->h2d_pred ? r->h2d_pred[q] * r->steps : 0.0);
    if (o == ZS_OP_NVME_READ) /* the optimizer's states, and the gathers' parts from files */
        return pr->nvme_read_bytes_per_step * r->steps_applied +
               (r->h2d_pred && pr->tier_bytes[ZS_TIER_NVME][ZS_MEM_PARAMS]
                    ? r->h2d_pred[q] * r->steps : 0.0);
    if (o == ZS_OP_NVME_WRITE)
        return pr->nvme_write_bytes_per_step * r->steps_applied;
    return -1.0;
}

/* Pipeline: rank q's seconds waiting in receives of activations and
 * gradients over the run's steps (the ledger's recv records, forward and
 * backward), and the steps' seconds (rank 0's, the ranks run in step). */
static void zs_pp_idle(const zs_train_result *r, int q, double *wait_s, double *step_s)
{
    *wait_s = r->comm[q][ZS_OP_RECV][ZS_PHASE_FORWARD].seconds +
              r->comm[q][ZS_OP_RECV][ZS_PHASE_BACKWARD].seconds;
    *step_s = 0.0;
    for (int i = 0; i < r->steps; i++)
        *step_s += r->info[i].seconds;
}

/* The model chunks a rank holds: v with the interleaved schedule, else 1. */
static int zs_pp_chunks(const zs_run_config *cfg)
{
    return cfg->pp_schedule == ZS_PP_INTERLEAVED ? cfg->virtual_stages : 1;
}

/* The ideal bubble fraction: (P-1)/(m+P-1), interleaved (P-1)/(v·m+P-1). */
static double zs_pp_ideal(const zs_run_config *cfg)
{
    return zs_pp_ideal_bubble(cfg->pp, zs_pp_chunks(cfg), cfg->grad_accum);
}

static json_t *zs_report_pipeline(const zs_run_config *cfg, const zs_train_result *r)
{
    json_t *ranks = json_array();
    for (int q = 0; q < r->world_size; q++) {
        double w, t;
        zs_pp_idle(r, q, &w, &t);
        const zs_prediction *pr = zs_pred_of(r, q);
        int T = r->tp_size > 0 ? r->tp_size : 1;
        json_array_append_new(
            ranks, json_pack("{s:i, s:i, s:i, s:i, s:o, s:o, s:o}", "rank", q, "stage",
                             zs_mesh_coord_of(r->world_size, T, r->pp_size, q).pp,
                             "activation_slots", pr->act_slots, "in_flight_max", pr->in_flight,
                             "recv_wait_seconds", zs_json_real(w), "step_seconds",
                             zs_json_real(t), "idle_fraction", zs_json_real(t > 0 ? w / t : NAN)));
    }
    return json_pack("{s:i, s:s, s:i, s:i, s:o, s:o}", "stages", cfg->pp, "schedule",
                     zs_pp_schedule_name(cfg->pp_schedule), "micro_batches", cfg->grad_accum,
                     "virtual_stages", zs_pp_chunks(cfg), "ideal_bubble_fraction",
                     zs_json_real(zs_pp_ideal(cfg)), "ranks", ranks);
}

static void zs_report_print_pipeline(FILE *f, const zs_run_config *cfg, const zs_train_result *r)
{
    if (zs_pp_chunks(cfg) > 1)
        fprintf(f, "\npipeline: %d stages, interleaved, %d model chunks a rank, %d micro-batches; "
                   "ideal bubble (P-1)/(v*m+P-1) = %.3f\n",
                cfg->pp, zs_pp_chunks(cfg), cfg->grad_accum, zs_pp_ideal(cfg));
    else
        fprintf(f, "\npipeline: %d stages, %s, %d micro-batches; ideal bubble (P-1)/(m+P-1) = "
                   "%.3f\n",
                cfg->pp, zs_pp_schedule_name(cfg->pp_schedule), cfg->grad_accum,
                zs_pp_ideal(cfg));
    fprintf(f, "%5s %6s %8s %10s %14s %12s %9s\n", "rank", "stage", "slots", "in_flight",
            "recv_wait_s", "steps_s", "idle");
    int T = r->tp_size > 0 ? r->tp_size : 1;
    for (int q = 0; q < r->world_size; q++) {
        double w, t;
        zs_pp_idle(r, q, &w, &t);
        const zs_prediction *pr = zs_pred_of(r, q);
        fprintf(f, "%5d %6d %8d %10d %14.6f %12.6f %9.3f\n", q,
                zs_mesh_coord_of(r->world_size, T, r->pp_size, q).pp, pr->act_slots,
                pr->in_flight, w, t, t > 0 ? w / t : 0.0);
    }
}

/* Inter-node traffic of op o on rank q over the run, as its ledger recorded
 * it (the ring model: all of a call's bytes when the next rank of its ring
 * is on another node; all-to-all: the bytes sent to other nodes). Summed
 * from full buffers where zs_op_bytes is. */
static double zs_op_inter(const zs_train_result *r, int q, int o)
{
    double b = 0.0, api = 0.0;
    for (int p = 0; p < ZS_PHASE_NPHASES; p++) {
        if (p == ZS_PHASE_REPORT)
            continue;
        b += r->comm[q][o][p].inter;
        api += r->comm[q][o][p].inter_api;
    }
    int dp = r->dp_size > 0 ? r->dp_size : r->world_size, mesh = dp != r->world_size;
    int hier = r->hierarchical && (o == ZS_OP_REDUCE_SCATTER || o == ZS_OP_ALLGATHER);
    if (!mesh && !hier &&
        (o == ZS_OP_REDUCE_SCATTER || o == ZS_OP_ALLGATHER || o == ZS_OP_SCALARS)) {
        const zs_comm_sum *x = r->comm_group ? &r->comm_group[q][ZS_GROUP_EDP][o] : NULL;
        b = zs_ring_bytes((size_t)(api - (x ? x->inter_api : 0.0)), dp) + (x ? x->inter : 0.0);
    }
    else if (o == ZS_OP_ALLREDUCE && !mesh)
        b = 2 * zs_ring_bytes((size_t)api, r->world_size);
    return b;
}

/* The data-parallel group of rank q as M nodes of K ranks (the two-level
 * collectives' shape); 0 when unknown. */
static int zs_dp_nodes(const zs_train_result *r, int q, int *K, int *M)
{
    int N = r->dp_size > 0 ? r->dp_size : r->world_size;
    *K = *M = 1;
    if (!r->dp_node_ranks || r->dp_node_ranks[q] < 1)
        return 0;
    *K = r->dp_node_ranks[q];
    *M = N / *K;
    return 1;
}

/* 1 when rank q's ring neighbour in its group along g (the next member, in
 * the mesh's order, that q sends to) is on another node; from the nodes of
 * the world ranks and the mesh's pure functions (zs_train_result's
 * node_cross), not from the ledger. */
static int zs_crosses(const zs_train_result *r, int q, zs_comm_group g)
{
    return r->node_cross && (r->node_cross[q] >> g & 1);
}

/* Predicted inter-node traffic of op o on rank q over the run: each part of
 * zs_op_pred when q's ring in that part's group crosses a node boundary;
 * -1 when there is no prediction (all-to-all, scalars). */
static double zs_op_pred_inter(const zs_train_result *r, int q, int o)
{
    const zs_prediction *pr = zs_pred_of(r, q); /* its pipeline stage's TP traffic */
    int N = r->dp_size > 0 ? r->dp_size : r->world_size, dense = r->steps - r->compressed_steps;
    double dpx = zs_crosses(r, q, ZS_GROUP_DP), tpx = zs_crosses(r, q, ZS_GROUP_TP);
    int K, M;
    if (r->hierarchical && zs_dp_nodes(r, q, &K, &M) && K > 1 && M > 1 &&
        (o == ZS_OP_REDUCE_SCATTER || o == ZS_OP_ALLGATHER)) {
        /* two levels: (M-1)/N of each buffer across nodes, every rank */
        double B = o == ZS_OP_REDUCE_SCATTER
                       ? (double)r->pred.rs_bytes_per_step * dense
                       : (double)r->pred.ag_bytes_per_step * r->steps_applied +
                             (double)r->pred.ag_bytes_per_skipped_step * r->skipped_steps;
        if (o == ZS_OP_ALLGATHER && r->hpz > 1) /* the backward gathers stay in the node */
            B -= (double)r->pred.ag_hpz_bytes_per_step * r->steps;
        return B * (M - 1) / N +
               tpx * (o == ZS_OP_REDUCE_SCATTER ? pr->tp_rs_bytes_per_step
                                                : pr->tp_ag_bytes_per_step) * r->steps;
    }
    if (o == ZS_OP_ALLREDUCE && pr->tp_allreduce_bytes_per_step > 0)
        return tpx * pr->tp_allreduce_bytes_per_step * r->steps;
    if (o == ZS_OP_REDUCE_SCATTER)
        return dpx * zs_ring_bytes(r->pred.rs_bytes_per_step, N) * dense +
               tpx * pr->tp_rs_bytes_per_step * r->steps;
    if (o == ZS_OP_ALLGATHER && r->hpz > 1)
        return dpx * zs_ring_bytes(r->pred.ag_bytes_per_step - r->pred.ag_hpz_bytes_per_step, N) *
                   r->steps +
               tpx * pr->tp_ag_bytes_per_step * r->steps;
    if (o == ZS_OP_ALLTOALL && r->qgz_pred)
        return r->qgz_pred[r->world_size + q] * r->steps;
    if (o == ZS_OP_ALLGATHER)
        return dpx * (zs_ring_bytes(r->pred.ag_bytes_per_step, N) * r->steps_applied +
                      zs_ring_bytes(r->pred.ag_bytes_per_skipped_step, N) * r->skipped_steps) +
               tpx * pr->tp_ag_bytes_per_step * r->steps;
    if (o == ZS_OP_D2H || o == ZS_OP_H2D || o == ZS_OP_NVME_READ || o == ZS_OP_NVME_WRITE)
        return 0.0; /* inside the node */
    return -1.0;
}

/* Whether any rank holds bytes off the device (offload). */
static int zs_report_has_tiers(const zs_train_result *r)
{
    for (int q = 0; r->tier_peaks && q < r->world_size; q++)
        for (int t = ZS_TIER_HOST; t < ZS_MEM_NTIERS; t++)
            for (int c = 0; c < ZS_MEM_NCAT; c++)
                if (r->tier_peaks[q][t][c] || zs_pred_of(r, q)->tier_bytes[t][c])
                    return 1;
    return 0;
}

static json_t *zs_report_memory(const zs_train_result *r)
{
    json_t *list = json_array();
    for (int q = 0; q < r->world_size; q++) {
        json_t *cats = json_object();
        for (size_t k = 0; k < ZS_NROWS; k++) {
            if (!strncmp(zs_mem_rows[k].name, "optimizer_", 10))
                continue; /* inside "optimizer" below */
            int has;
            size_t pred = zs_row_pred(r, q, k, &has);
            json_t *o = json_pack("{s:I, s:o}", "peak_bytes", (json_int_t)zs_row_peak(r, q, k),
                                  "predicted_bytes", has ? json_integer((json_int_t)pred) : json_null());
            if (!strcmp(zs_mem_rows[k].name, "optimizer")) {
                static const char *const sub[3] = {"master", "m", "v"};
                for (int i = 0; i < 3; i++) {
                    int c = zs_mem_rows[k].cats[i];
                    json_object_set_new(o, sub[i], json_pack("{s:I, s:I}", "peak_bytes",
                                        (json_int_t)r->peaks[q][c], "predicted_bytes",
                                        (json_int_t)zs_pred_of(r, q)->bytes[c]));
                }
            }
            json_object_set_new(cats, zs_mem_rows[k].name, o);
        }
        json_t *mix = json_object(), *phases = json_object();
        for (int c = 0; c < ZS_MEM_NCAT; c++)
            if (c != ZS_MEM_QUANTIZED || r->at_peak[q][c])
                json_object_set_new(mix, zs_mem_category_name((zs_mem_category)c),
                                    json_integer((json_int_t)r->at_peak[q][c]));
        for (int p = 0; p < ZS_MEM_NPHASES; p++)
            json_object_set_new(phases, zs_mem_phase_name((zs_mem_phase)p),
                                json_integer((json_int_t)r->phase_peaks[q][p]));
        json_t *rank = json_pack("{s:i, s:o, s:I, s:o, s:o}", "rank", q, "categories", cats,
                                 "total_peak_bytes", (json_int_t)r->total_peaks[q],
                                 "at_total_peak", mix, "peak_by_phase", phases);
        if (q == 0)
            json_object_set_new(rank, "peak_rss_bytes", json_integer((json_int_t)zs_report_peak_rss()));
        if (zs_report_has_tiers(r)) { /* offload: the host and nvme tiers */
            json_t *tiers = json_object();
            for (int t = ZS_TIER_HOST; t < ZS_MEM_NTIERS; t++) {
                json_t *tc = json_object();
                for (int c = 0; c < ZS_MEM_NCAT; c++)
                    if (r->tier_peaks[q][t][c] || zs_pred_of(r, q)->tier_bytes[t][c])
                        json_object_set_new(tc, zs_mem_category_name((zs_mem_category)c),
                                            json_pack("{s:I, s:I}", "peak_bytes",
                                                      (json_int_t)r->tier_peaks[q][t][c],
                                                      "predicted_bytes",
                                                      (json_int_t)zs_pred_of(r, q)->tier_bytes[t][c]));
                json_object_set_new(tiers, zs_mem_tier_name((zs_mem_tier)t), tc);
            }
            json_object_set_new(rank, "tiers", tiers);
        }
        json_array_append_new(list, rank);
    }
    return list;
}

static json_t *zs_report_comm(const zs_train_result *r)
{
    json_t *list = json_array();
    int N = r->world_size;
    for (int q = 0; q < N; q++) {
        json_t *ops = json_object();
        for (int o = 0; o < ZS_OP_NOPS; o++) {
            double calls, secs, api, b = zs_op_bytes(r, q, o, &calls, &secs, &api);
            double pb = zs_op_pred(r, q, o);
            json_t *phases = json_object();
            for (int p = 0; p < ZS_PHASE_NPHASES; p++)
                if (r->comm[q][o][p].calls > 0)
                    json_object_set_new(phases, zs_comm_phase_name((zs_comm_phase)p),
                                        json_pack("{s:f, s:f, s:f}", "bytes", r->comm[q][o][p].wire,
                                                  "api_bytes", r->comm[q][o][p].bytes, "calls",
                                                  r->comm[q][o][p].calls));
            double ib = zs_op_inter(r, q, o), ipb = zs_op_pred_inter(r, q, o);
            json_t *op = json_pack("{s:f, s:o, s:f, s:f, s:o, s:f, s:f, s:f, s:f, s:o}",
                          "bytes", b,
                          "predicted_bytes", pb >= 0 ? json_real(pb) : json_null(),
                          "inter_node_bytes", ib, "intra_node_bytes", b - ib,
                          "predicted_inter_node_bytes", ipb >= 0 ? json_real(ipb) : json_null(),
                          "api_bytes", api, "calls", calls, "seconds", secs,
                          "bytes_per_step", r->steps ? b / r->steps : 0.0,
                          "by_phase", phases);
            if (o == ZS_OP_ALLTOALL && r->compressed_steps > 0)
                json_object_set_new(op, "dense_equivalent_bytes",
                                    json_real(zs_ring_bytes(r->pred.rs_bytes_per_step,
                                                            r->dp_size > 0 ? r->dp_size : N) *
                                              r->compressed_steps));
            json_object_set_new(ops, zs_comm_op_name((zs_comm_op)o), op);
        }
        json_t *groups = json_object();
        for (int g = 0; g < ZS_GROUP_NGROUPS; g++) {
            json_t *gops = json_object();
            for (int o = 0; o < ZS_OP_NOPS; o++) {
                const zs_comm_sum *cg = &r->comm_group[q][g][o];
                if (cg->calls > 0)
                    json_object_set_new(gops, zs_comm_op_name((zs_comm_op)o),
                                        json_pack("{s:f, s:f, s:f, s:f}", "bytes", cg->wire,
                                                  "inter_node_bytes", cg->inter,
                                                  "api_bytes", cg->bytes, "calls", cg->calls));
            }
            if (json_object_size(gops))
                json_object_set_new(groups, zs_comm_group_name((zs_comm_group)g), gops);
            else
                json_decref(gops);
        }
        json_array_append_new(list, json_pack("{s:i, s:i, s:o, s:o}", "rank", q, "node",
                                              r->node_of ? r->node_of[q] : 0, "ops", ops,
                                              "by_group", groups));
    }
    return list;
}

/* nccl-tests' bus bandwidth factor of an op on N ranks. */
static double zs_busbw_factor(int op, int N)
{
    if (N < 2)
        return 0.0;
    double f = (double)(N - 1) / N;
    return op == ZS_OP_ALLREDUCE ? 2 * f : f;
}

/* Whether ranks q and p hold the same bytes (the memory table) or send the
 * same bytes per op (the traffic table): runs of such ranks print once. */
static int zs_same_memory(const zs_train_result *r, int q, int p)
{
    return zs_pred_of(r, q) == zs_pred_of(r, p) &&
           !memcmp(r->peaks[q], r->peaks[p], sizeof r->peaks[q]) &&
           r->total_peaks[q] == r->total_peaks[p] &&
           !memcmp(r->phase_peaks[q], r->phase_peaks[p], sizeof r->phase_peaks[q]);
}

static int zs_same_traffic(const zs_train_result *r, int q, int p)
{
    for (int o = 0; o < ZS_OP_NOPS; o++) {
        double c1, s1, a1, c2, s2, a2;
        if (zs_op_bytes(r, q, o, &c1, &s1, &a1) != zs_op_bytes(r, p, o, &c2, &s2, &a2) ||
            c1 != c2 || zs_op_pred(r, q, o) != zs_op_pred(r, p, o) ||
            zs_op_inter(r, q, o) != zs_op_inter(r, p, o) ||
            zs_op_pred_inter(r, q, o) != zs_op_pred_inter(r, p, o))
            return 0;
    }
    return 1;
}

/* Close a run of ranks [first, last] that repeat rank first-1. */
static void zs_print_same(FILE *f, int first, int last)
{
    if (first > last)
        return;
    if (first == last)
        fprintf(f, "%5d  (the same as rank %d)\n", first, first - 1);
    else
        fprintf(f, "%5s  (ranks %d-%d: the same as rank %d)\n", "", first, last, first - 1);
}

/* Rank q's collective seconds in training (not the report's gathers, not
 * offload's copies), and of them the part that ran behind compute: stage
 * 3's non-blocking gathers and the reduce-scatters (overlap_comm), from
 * start to done, less the time spent starting, driving and waiting for
 * them. */
static void zs_comm_time(const zs_train_result *r, int q, double *total, double *hidden)
{
    *total = 0;
    for (int o = 0; o < ZS_OP_NOPS; o++) {
        if (o == ZS_OP_GATHER || o == ZS_OP_D2H || o == ZS_OP_H2D || o == ZS_OP_NVME_READ ||
            o == ZS_OP_NVME_WRITE)
            continue;
        for (int p = 0; p < ZS_PHASE_NPHASES; p++)
            if (p != ZS_PHASE_REPORT)
                *total += r->comm[q][o][p].seconds;
    }
    double h = r->nb ? r->nb[q][0] - r->nb[q][1] : 0.0;
    *hidden = h > 0 ? (h < *total ? h : *total) : 0.0;
}

/* Checkpoint files per rank: bytes written (tensor data against the
 * prediction, saves x the shard's states) and read. */
static json_t *zs_report_ckpt(const zs_train_result *r)
{
    json_t *a = json_array();
    for (int q = 0; q < r->world_size; q++) {
        const zs_ckpt_io *c = &r->ckpt_ranks[q];
        json_array_append_new(a, json_pack("{s:i, s:i, s:I, s:I, s:I, s:I, s:I}", "rank", q,
                                           "saves", c->saves, "bytes_written",
                                           (json_int_t)c->written, "tensor_bytes_written",
                                           (json_int_t)c->tensor_written,
                                           "tensor_bytes_written_predicted",
                                           (json_int_t)(r->ckpt_pred[q] * (uint64_t)c->saves),
                                           "bytes_read", (json_int_t)c->read,
                                           "tensor_bytes_read", (json_int_t)c->tensor_read));
    }
    return a;
}

static void zs_report_print_ckpt(FILE *f, const zs_train_result *r)
{
    if (!r->ckpt_ranks)
        return;
    fprintf(f, "\ncheckpoint files per rank (bytes on disk, not device memory; tensor bytes "
               "predicted = saves x shard x states)\n");
    fprintf(f, "rank  saves        written   tensor bytes      predicted           read\n");
    for (int q = 0; q < r->world_size; q++) {
        const zs_ckpt_io *c = &r->ckpt_ranks[q];
        fprintf(f, "%4d  %5d  %13llu  %13llu  %13llu  %13llu\n", q, c->saves,
                (unsigned long long)c->written, (unsigned long long)c->tensor_written,
                (unsigned long long)(r->ckpt_pred[q] * (uint64_t)c->saves),
                (unsigned long long)c->read);
    }
}

/* Rank q's rows of the memory table: each category measured and
 * predicted, the total peak by phase, and the host and nvme tiers. */
static void zs_report_print_memory_rank(FILE *f, const zs_train_result *r, int q)
{
    for (size_t k = 0; k < ZS_NROWS; k++) {
        int has;
        size_t pred = zs_row_pred(r, q, k, &has), meas = zs_row_peak(r, q, k);
        if (!has && meas == 0)
            continue;
        if (has)
            fprintf(f, "%5d  %-17s %15zu %15zu %9.3f\n", q, zs_mem_rows[k].name, meas, pred,
                    zs_ratio((double)meas, (double)pred));
        else
            fprintf(f, "%5d  %-17s %15zu %15s %9s\n", q, zs_mem_rows[k].name, meas, "-", "-");
    }
    fprintf(f, "%5d  %-17s %15zu   (setup %zu, forward %zu, backward %zu, step %zu)\n", q,
            "total peak", r->total_peaks[q], r->phase_peaks[q][ZS_MEM_PHASE_SETUP],
            r->phase_peaks[q][ZS_MEM_PHASE_FORWARD], r->phase_peaks[q][ZS_MEM_PHASE_BACKWARD],
            r->phase_peaks[q][ZS_MEM_PHASE_STEP]);
    for (int t = ZS_TIER_HOST; zs_report_has_tiers(r) && t < ZS_MEM_NTIERS; t++)
        for (int c = 0; c < ZS_MEM_NCAT; c++) {
            size_t meas = r->tier_peaks[q][t][c], pred = zs_pred_of(r, q)->tier_bytes[t][c];
            if (!meas && !pred)
                continue;
            char name[40];
            snprintf(name, sizeof name, "%s %s", zs_mem_tier_name((zs_mem_tier)t),
                     zs_mem_category_name((zs_mem_category)c));
            fprintf(f, "%5d  %-17s %15zu %15zu %9.3f\n", q, name, meas, pred,
                    zs_ratio((double)meas, (double)pred));
        }
}

/* The memory table (ranks like the one before folded into one line), the
 * process's RSS, stage 3's live parameters and hpZ's secondary partition. */
static void zs_report_print_memory(FILE *f, const zs_run_config *cfg, const zs_train_result *r)
{
    int N = r->world_size, same = 0;
    fprintf(f, "\nmemory per rank (peak bytes; predicted by counting the step program, "
               "zerosim/program.h)\n");
    fprintf(f, "%5s  %-17s %15s %15s %9s\n", "rank", "category", "measured", "predicted", "ratio");
    for (int q = 0; q < N; q++) {
        if (q > 0 && zs_same_memory(r, q, q - 1)) {
            same++;
            continue;
        }
        zs_print_same(f, q - same, q - 1);
        same = 0;
        zs_report_print_memory_rank(f, r, q);
    }
    zs_print_same(f, N - same, N - 1);
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

/* Each rank's collective time per step, and the part compute hid. */
static void zs_report_print_comm_time(FILE *f, const zs_run_config *cfg, const zs_train_result *r)
{
    fprintf(f, "\ncommunication time per step (collectives; hidden: stage 3's prefetched "
               "gathers%s while compute ran)\n",
            zs_step_overlap(cfg) ? " and the reduce-scatters started by overlap_comm" : "");
    fprintf(f, "%5s  %12s %12s %12s\n", "rank", "total_s", "hidden_s", "exposed_s");
    for (int q = 0; q < r->world_size; q++) {
        double tot, hid;
        zs_comm_time(r, q, &tot, &hid);
        fprintf(f, "%5d  %12.6f %12.6f %12.6f\n", q, tot / r->steps, hid / r->steps,
                (tot - hid) / r->steps);
    }
}

/* Rank q's rows of the traffic table: each op's bytes per step measured
 * and predicted (nodes: and across nodes). */
static void zs_report_print_traffic_rank(FILE *f, const zs_train_result *r, int q, int nodes)
{
    for (int o = 0; o < ZS_OP_NOPS; o++) {
        double calls, secs, api, b = zs_op_bytes(r, q, o, &calls, &secs, &api);
        double pb = zs_op_pred(r, q, o);
        if (calls == 0)
            continue;
        double mb = b / r->steps, ib = zs_op_inter(r, q, o) / r->steps;
        double ipb = zs_op_pred_inter(r, q, o);
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
                snprintf(ratio, sizeof ratio, "%.3f", zs_ratio(mb, pb / r->steps));
            else
                snprintf(ratio, sizeof ratio, "(N=1)");
        }
        fprintf(f, "%5d  %-15s %15.1f %15s %9s%s\n", q, zs_comm_op_name(o), mb, pred, ratio, ip);
    }
}

/* The traffic table (ranks like the one before folded into one line);
 * the inter-node columns only where there are nodes. */
static void zs_report_print_traffic(FILE *f, const zs_train_result *r)
{
    int N = r->world_size, same = 0;
    int nodes = r->nodes > 1;
    if (nodes) {
        fprintf(f, "\ntraffic per rank per step (bytes, ring volume: (N-1)/N of each buffer; "
                   "inter: across nodes, %d nodes)\n", r->nodes);
        fprintf(f, "%5s  %-15s %15s %15s %9s %15s %15s\n", "rank", "op", "measured", "predicted",
                "ratio", "inter", "inter pred");
    } else {
        fprintf(f, "\ntraffic per rank per step (bytes, ring volume: (N-1)/N of each buffer)\n");
        fprintf(f, "%5s  %-15s %15s %15s %9s\n", "rank", "op", "measured", "predicted", "ratio");
    }
    for (int q = 0; q < N; q++) {
        if (q > 0 && zs_same_traffic(r, q, q - 1)) {
            same++;
            continue;
        }
        zs_print_same(f, q - same, q - 1);
        same = 0;
        zs_report_print_traffic_rank(f, r, q, nodes);
    }
    zs_print_same(f, N - same, N - 1);
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

void zs_report_print(FILE *f, const zs_run_config *cfg, const zs_train_result *r)
{
    zs_report_print_memory(f, cfg, r);
    zs_report_print_ckpt(f, r);
    if (!r->phantom && r->steps > 0)
        zs_report_print_comm_time(f, cfg, r);
    if (r->pp_pred && !r->phantom && r->steps > 0)
        zs_report_print_pipeline(f, cfg, r);
    zs_report_print_traffic(f, r);
    zs_report_print_comms(f, r);
}

/* Write text to dir/name atomically. */
static int zs_write_file(const char *dir, const char *name, const char *text, size_t len)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        ZS_FAIL("--csv directory path too long: %s", dir);
    return zs_report_write_text(path, text, len);
}

/* Test hook (tests/test_faults.sh): ZEROSIM_TEST_STALL_AT=report makes the
 * writer stall once a file's bytes are written and synced but before the
 * file gets its name, so that a test can kill the run there. */
static void zs_report_test_stall(const char *path)
{
    const char *s = getenv("ZEROSIM_TEST_STALL_AT");
    if (!s || strcmp(s, "report") != 0)
        return;
    fprintf(stderr, "zerosim: test hook: writer (pid %ld) stalls writing %s\n", (long)getpid(), path);
    fflush(stderr);
    for (;;)
        pause();
}

/* Write path atomically: the bytes go to a file without a name in path's
 * directory (O_TMPFILE), are synced, and the file gets a name only when
 * whole (a new, unpredictable temporary name, renamed over path). A run
 * killed or out of space before that leaves nothing behind. File systems
 * without O_TMPFILE get a named temporary file (path.tmp.<random>, created
 * exclusively) instead, removed on failure. Neither follows a symlink: the
 * temporary name is always new, and rename replaces a symlink at path
 * itself. */
int zs_report_write_text(const char *path, const char *text, size_t len)
{
    char stem[4200], tmp[4224], dir[4096];
    if ((size_t)snprintf(stem, sizeof stem, "%s.tmp", path) >= sizeof stem)
        ZS_FAIL("path too long: %s", path);
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
#ifdef O_TMPFILE
    int fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
#else
    int fd = -1; /* not Linux (macOS): the named temporary file below */
    errno = EOPNOTSUPP;
#endif
    if (fd >= 0) {
        if (zs_io_write_fd(fd, text, len) != 0) {
            int err = errno;
            close(fd);
            return zs_io_write_error(path, err);
        }
        zs_report_test_stall(path);
        char self[64];
        snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
        int linked = 0; /* linkat fails on a taken name: try another */
        for (int t = 0; t < 64 && !linked; t++) {
            if (zs_file_unique_name(stem, tmp, sizeof tmp) != 0) {
                close(fd);
                return -1;
            }
            linked = linkat(AT_FDCWD, self, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) == 0;
            if (!linked && errno != EEXIST)
                break;
        }
        close(fd);
        if (linked) {
            if (rename(tmp, path) != 0) {
                int err = errno;
                unlink(tmp);
                return zs_io_write_error(path, err);
            }
            return 0;
        }
        /* no /proc: the named temporary file below */
    } else if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
        return zs_io_write_error(path, errno);
    }
    fd = zs_file_create_unique(stem, tmp, sizeof tmp, O_WRONLY, 0666);
    if (fd < 0) /* every name taken: zs_file_create_unique's line; else name path */
        return errno == EEXIST ? -1 : zs_io_write_error(path, errno);
    int bad = zs_io_write_fd(fd, text, len) != 0;
    int err = errno;
    if (!bad)
        zs_report_test_stall(path);
    if (close(fd) != 0 && !bad) {
        bad = 1;
        err = errno;
    }
    if (bad || rename(tmp, path) != 0) {
        if (!bad)
            err = errno;
        unlink(tmp);
        return zs_io_write_error(path, err);
    }
    return 0;
}

/* A growing text buffer for the CSV files. */
typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} zs_text;

static void zs_text_add(zs_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void zs_text_add(zs_text *t, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        size_t room = t->cap - t->len;
        va_start(ap, fmt);
        int n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = 1;
            return;
        }
        if (t->p && (size_t)n < room) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = (t->cap + (size_t)n + 1) * 2;
        char *q = realloc(t->p, cap);
        if (!q) {
            t->oom = 1;
            return;
        }
        t->p = q;
        t->cap = cap;
    }
}

static int zs_text_flush(zs_text *t, const char *dir, const char *name)
{
    int rc = t->oom ? zs_error_set("out of host memory writing %s", name)
                    : zs_write_file(dir, name, t->p ? t->p : "", t->len);
    free(t->p);
    memset(t, 0, sizeof *t);
    return rc;
}

int zs_report_prepare_dir(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0 && mkdir(dir, 0777) != 0)
        ZS_FAIL("cannot create the --csv directory %s: %s", dir, strerror(errno));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        ZS_FAIL("--csv %s is not a directory", dir);
    return 0;
}

/* The CSV files, in the order written: a failure removes those already
 * written, so that the folder holds the whole set of a run or none of it. */
static const char *const zs_csv_names[] = {"run.csv", "memory.csv", "comm.csv", "timeline.csv",
                                           "comm_groups.csv", "steps.csv"};

static int zs_csv_flush(zs_text *t, const char *dir, int k)
{
    if (!zs_text_flush(t, dir, zs_csv_names[k]))
        return 0;
    char path[4200];
    for (int i = 0; i < k; i++)
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, zs_csv_names[i]) < sizeof path)
            unlink(path);
    return -1;
}

static int zs_report_write_csv_files(const char *dir, const zs_run_config *cfg,
                                     const zs_train_result *r);

int zs_report_write_csv(const char *dir, const zs_run_config *cfg, const zs_train_result *r)
{
    return zs_report_write_csv_files(dir, cfg, r);
}

static int zs_report_write_csv_files(const char *dir, const zs_run_config *cfg,
                                     const zs_train_result *r)
{
    ZS_TRY(zs_report_prepare_dir(dir));
    int N = r->world_size;
    zs_text t = {0};
    zs_text_add(&t, "# world_size stage precision deterministic num_params padded_params steps "
                    "micro_batch grad_accum\n%d %d %s %d %zu %zu %d %d %d\n", N, cfg->stage,
                zs_dtype_name(cfg->precision), cfg->deterministic, r->num_params, r->padded_params,
                r->steps, cfg->micro_batch, cfg->grad_accum);
    ZS_TRY(zs_csv_flush(&t, dir, 0));

    zs_text_add(&t, "# rank category peak_bytes predicted_bytes ratio\n");
    for (int q = 0; q < N; q++) {
        for (size_t k = 0; k < ZS_NROWS; k++) {
            int has;
            size_t pred = zs_row_pred(r, q, k, &has), meas = zs_row_peak(r, q, k);
            if (has)
                zs_text_add(&t, "%d %s %zu %zu %.6f\n", q, zs_mem_rows[k].name, meas, pred,
                            zs_ratio((double)meas, (double)pred));
            else
                zs_text_add(&t, "%d %s %zu -1 -1\n", q, zs_mem_rows[k].name, meas);
        }
        zs_text_add(&t, "%d total %zu -1 -1\n", q, r->total_peaks[q]);
        for (int tr = ZS_TIER_HOST; zs_report_has_tiers(r) && tr < ZS_MEM_NTIERS; tr++)
            for (int c = 0; c < ZS_MEM_NCAT; c++) { /* offload: host_params, nvme_optimizer_m, ... */
                size_t meas = r->tier_peaks[q][tr][c], pred = zs_pred_of(r, q)->tier_bytes[tr][c];
                if (meas || pred)
                    zs_text_add(&t, "%d %s_%s %zu %zu %.6f\n", q, zs_mem_tier_name((zs_mem_tier)tr),
                                zs_mem_category_name((zs_mem_category)c), meas, pred,
                                zs_ratio((double)meas, (double)pred));
            }
    }
    ZS_TRY(zs_csv_flush(&t, dir, 1));

    zs_text_add(&t, "# rank op phase calls bytes predicted_bytes api_bytes seconds inter_bytes "
                    "predicted_inter_bytes (inter: across nodes; -1: no prediction)\n");
    for (int q = 0; q < N; q++)
        for (int o = 0; o < ZS_OP_NOPS; o++) {
            for (int p = 0; p < ZS_PHASE_NPHASES; p++) {
                const zs_comm_sum *c = &r->comm[q][o][p];
                if (c->calls > 0)
                    zs_text_add(&t, "%d %s %s %.0f %.3f -1 %.0f %.6f %.3f -1\n", q,
                                zs_comm_op_name(o), zs_comm_phase_name(p), c->calls, c->wire,
                                c->bytes, c->seconds, c->inter);
            }
            double calls, secs, api, b = zs_op_bytes(r, q, o, &calls, &secs, &api);
            double pb = zs_op_pred(r, q, o), ipb = zs_op_pred_inter(r, q, o);
            zs_text_add(&t, "%d %s all %.0f %.3f %.3f %.0f %.6f %.3f %.3f\n", q, zs_comm_op_name(o),
                        calls, b, pb >= 0 ? pb : -1.0, api, secs, zs_op_inter(r, q, o),
                        ipb >= 0 ? ipb : -1.0);
        }
    ZS_TRY(zs_csv_flush(&t, dir, 2));

    zs_text_add(&t, "# step %d\n# event params grads optimizer activations checkpoints "
                    "comm_buffers compression workspace total\n", r->timeline_step);
    for (size_t i = 0; i < r->n_timeline; i++) {
        const size_t *c = r->timeline[i].current;
        size_t opt = c[ZS_MEM_OPT_MASTER] + c[ZS_MEM_OPT_M] + c[ZS_MEM_OPT_V], tot = 0;
        for (int k = 0; k < ZS_MEM_NCAT; k++)
            tot += c[k];
        zs_text_add(&t, "%zu %zu %zu %zu %zu %zu %zu %zu %zu %zu\n", i, c[ZS_MEM_PARAMS],
                    c[ZS_MEM_GRADS], opt, c[ZS_MEM_ACTIVATIONS], c[ZS_MEM_CHECKPOINTS],
                    c[ZS_MEM_COMM_BUFFERS], c[ZS_MEM_COMPRESSION], c[ZS_MEM_WORKSPACE], tot);
    }
    ZS_TRY(zs_csv_flush(&t, dir, 3));

    zs_text_add(&t, "# rank group op calls bytes api_bytes inter_bytes (training calls over the "
                    "run; inter: across nodes)\n");
    for (int q = 0; q < r->world_size; q++)
        for (int g = 0; g < ZS_GROUP_NGROUPS; g++)
            for (int o = 0; o < ZS_OP_NOPS; o++) {
                const zs_comm_sum *cg = &r->comm_group[q][g][o];
                if (cg->calls > 0)
                    zs_text_add(&t, "%d %s %s %.0f %.3f %.0f %.3f\n", q, zs_comm_group_name(g),
                                zs_comm_op_name(o), cg->calls, cg->wire, cg->bytes, cg->inter);
            }
    ZS_TRY(zs_csv_flush(&t, dir, 4));

    zs_text_add(&t, "# step loss lr grad_norm loss_scale seconds\n");
    for (int s = 0; s < r->steps; s++)
        zs_text_add(&t, "%d %.9g %.9g %.9g %.9g %.9g\n", s, (double)r->info[s].loss,
                    (double)r->info[s].lr, (double)r->info[s].grad_norm,
                    (double)r->info[s].loss_scale, r->info[s].seconds);
    return zs_csv_flush(&t, dir, 5);
}

/* The report's "model": the GPT's or the Llama's shapes, or the MLP's
 * widths. */
static json_t *zs_report_json_model(const zs_model_config *mc)
{
    if (mc->kind == ZS_MODEL_LLAMA)
        return json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:b, s:i}", "type",
                         "llama", "layers", mc->n_layer, "hidden", mc->n_embd, "heads",
                         mc->n_head, "kv_heads", mc->n_kv_head, "ffn_hidden", mc->ffn_hidden,
                         "seq", mc->seq_len, "vocab", mc->vocab, "tie_embeddings",
                         mc->tie_embeddings, "qkv_bias", mc->qkv_bias, "moe_experts",
                         mc->moe_experts);
    if (mc->kind == ZS_MODEL_GPT)
        return json_pack("{s:s, s:i, s:i, s:i, s:i, s:i}", "type", "gpt", "layers", mc->n_layer,
                         "hidden", mc->n_embd, "heads", mc->n_head, "seq", mc->seq_len,
                         "vocab", mc->vocab);
    json_t *w = json_array();
    for (int i = 0; i < mc->n_hidden; i++)
        json_array_append_new(w, json_integer(mc->widths[i]));
    return json_pack("{s:s, s:i, s:i, s:o, s:s}", "type", "mlp", "input_dim", mc->input_dim,
                     "classes", mc->n_classes, "widths", w, "activation",
                     mc->act == ZS_ACT_RELU ? "relu" : "gelu");
}

/* The per-step arrays: losses, learning rates, gradient norms, loss
 * scales, skipped steps and seconds. */
typedef struct {
    json_t *losses, *lrs, *norms, *scales, *skipped, *secs;
} zs_report_steps;

static void zs_report_json_steps(const zs_train_result *r, zs_report_steps *st)
{
    st->losses = json_array();
    st->lrs = json_array();
    st->norms = json_array();
    st->scales = json_array();
    st->skipped = json_array();
    st->secs = json_array();
    for (int s = 0; s < r->steps; s++) {
        json_array_append_new(st->losses, zs_json_real(r->info[s].loss));
        json_array_append_new(st->lrs, zs_json_real(r->info[s].lr));
        json_array_append_new(st->norms, zs_json_real(r->info[s].grad_norm));
        json_array_append_new(st->scales, zs_json_real(r->info[s].loss_scale));
        json_array_append_new(st->skipped, json_boolean(r->info[s].skipped));
        json_array_append_new(st->secs, zs_json_real(r->info[s].seconds));
    }
}

/* "moe_routing": each MoE block's routing, rank 0's last micro-batch. */
static json_t *zs_report_json_moe(const zs_train_result *r)
{
    json_t *mo = json_array();
    for (int i = 0; i < r->moe_n; i++) {
        const zs_moe_stats *st = &r->moe[i];
        json_t *routed = json_array(), *kept = json_array();
        for (int j = 0; j < st->experts && j < 256; j++) {
            json_array_append_new(routed, json_integer(st->routed[j]));
            json_array_append_new(kept, json_integer(st->kept[j]));
        }
        json_array_append_new(
            mo, json_pack("{s:i, s:i, s:i, s:i, s:o, s:o, s:i, s:o}", "block", r->moe_block[i],
                          "experts", st->experts, "tokens", st->tokens, "capacity",
                          st->capacity, "routed", routed, "kept", kept, "dropped",
                          st->dropped, "l_aux", zs_json_real(st->l_aux)));
    }
    return mo;
}

/* Stage 3's keys: the live parameters, the units over their bound, and
 * ZeRO++ (the techniques on, hpZ's secondary partition, part of params). */
static void zs_report_json_stage3(json_t *root, const zs_run_config *cfg,
                                  const zs_train_result *r)
{
    json_object_set_new(root, "live_params_peak", json_integer((json_int_t)r->live_params_peak));
    json_object_set_new(root, "units_over_live_bound", json_integer(r->units_over_live_bound));
    json_object_set_new(
        root, "zeropp",
        json_pack("{s:b, s:i, s:I, s:b}", "quantized_weights", cfg->quantized_weights,
                  "hpz_partition_size", r->hpz > 1 ? r->hpz : 1, "hpz_secondary_bytes",
                  (json_int_t)(r->hpz > 1 ? r->padded_params / (size_t)r->hpz *
                                                zs_dtype_size(cfg->precision)
                                          : 0),
                  "quantized_gradients", cfg->quantized_gradients));
}

/* "comm_time": each rank's collective seconds per step, hidden and exposed. */
static json_t *zs_report_json_comm_time(const zs_train_result *r)
{
    json_t *ct = json_array();
    for (int q = 0; q < r->world_size; q++) {
        double tot, hid;
        zs_comm_time(r, q, &tot, &hid);
        json_array_append_new(ct, json_pack("{s:i, s:o, s:o, s:o}", "rank", q,
                                            "total_s_per_step", zs_json_real(tot / r->steps),
                                            "hidden_s_per_step", zs_json_real(hid / r->steps),
                                            "exposed_s_per_step",
                                            zs_json_real((tot - hid) / r->steps)));
    }
    return ct;
}

/* The run's outputs after its tables: where it resumed from, checkpoint
 * I/O, the resolved configuration, each step's hash, the data and the
 * held-out losses at the steps they were evaluated. */
static void zs_report_json_outputs(json_t *root, const zs_run_config *cfg,
                                   const zs_train_result *r)
{
    if (r->resumed_from[0]) {
        json_object_set_new(root, "resumed_from", json_string(r->resumed_from));
        json_object_set_new(root, "resumed_param_hash", json_string(r->resumed_hash));
    }
    if (r->ckpt_ranks) /* files: beside the device memory, not in it */
        json_object_set_new(root, "checkpoint_io", zs_report_ckpt(r));
    char *ctext = zs_run_config_json(cfg);
    json_t *cj = ctext ? json_loads(ctext, 0, NULL) : NULL;
    free(ctext);
    if (cj) /* the configuration as resolved: "auto" values, no-effect keys */
        json_object_set_new(root, "config", cj);
    if (r->hashes) {
        json_t *h = json_array();
        for (int s = 0; s < r->steps; s++)
            json_array_append_new(h, json_string(r->hashes[s]));
        json_object_set_new(root, "param_hashes", h);
    }
    /* the data: its file (the loss floor is then unknown: null), and the
     * held-out losses at the steps they were evaluated */
    json_object_set_new(root, "data", json_string(cfg->data_file ? cfg->data_file : "synthetic"));
    if (r->val_loss) {
        json_t *v = json_array();
        for (int s = 0; s < r->steps; s++)
            if (!isnan(r->val_loss[s])) /* evaluated */
                json_array_append_new(v, json_pack("{s:i, s:o}", "step", r->first_step + s + 1, "loss",
                                                   zs_json_real(r->val_loss[s])));
        json_object_set_new(root, "val_loss", v);
    }
}

/* root as indented JSON into path (taking root). */
static int zs_report_json_save(const char *path, json_t *root)
{
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
    json_decref(root);
    if (!text)
        ZS_FAIL("out of host memory writing the report %s", path);
    int rc = zs_report_write_text(path, text, strlen(text));
    free(text);
    if (rc) { /* "cannot write PATH: ..." as "cannot write report PATH: ..." */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", zs_error_msg());
        const char *rest = strncmp(msg, "cannot write ", 13) ? msg : msg + 13;
        ZS_FAIL("cannot write report %s", rest);
    }
    return 0;
}

/* The keys in the order a reader meets them: the run, its steps, memory
 * and traffic, then the outputs. */
int zs_report_write_json(const char *path, const zs_run_config *cfg, const zs_train_result *r)
{
    zs_report_steps st;
    zs_report_json_steps(r, &st);
    json_t *root = json_pack(
        "{s:s, s:I, s:i, s:i, s:s, s:i, s:o, s:s, s:s, s:o}",
        "zerosim_version", PACKAGE_VERSION,
        "num_params", (json_int_t)r->num_params,
        "world_size", r->world_size,
        "stage", cfg->stage,
        "precision", zs_dtype_name(cfg->precision),
        "steps", r->steps,
        "losses", st.losses,
        "param_hash", r->param_hash,
        "param_hash_algorithm", "XXH3_64bits of the fp32 parameters (master weights under mixed "
                                "precision) in layout order, unpadded, little-endian",
        "model", zs_report_json_model(&cfg->model));
    json_object_set_new(root, "micro_batch", json_integer(cfg->micro_batch));
    json_object_set_new(root, "grad_accum", json_integer(cfg->grad_accum));
    json_object_set_new(root, "train_batch_size", json_integer(cfg->train_batch_size));
    json_object_set_new(root, "seed", json_integer((json_int_t)cfg->seed));
    json_object_set_new(root, "optimizer", json_string(cfg->optimizer == ZS_OPT_ADAMW ? "adamw" : "sgd"));
    json_object_set_new(root, "optimizer_state_bytes_per_param",
                        json_integer(zs_optim_state_bytes(cfg->optimizer, cfg->precision)));
    json_object_set_new(root, "lrs", st.lrs);
    json_object_set_new(root, "grad_norms", st.norms);
    json_object_set_new(root, "loss_scales", st.scales);
    json_object_set_new(root, "skipped_steps", st.skipped);
    json_object_set_new(root, "step_seconds", st.secs);
    json_object_set_new(root, "loss_floor", zs_json_real(r->loss_floor));
    if (r->moe_n > 0)
        json_object_set_new(root, "moe_routing", zs_report_json_moe(r));
    json_object_set_new(root, "seconds", zs_json_real(r->seconds));
    json_object_set_new(root, "memory", zs_report_memory(r));
    json_object_set_new(root, "comm", zs_report_comm(r));
    if (r->pp_pred && r->steps > 0)
        json_object_set_new(root, "pipeline", zs_report_pipeline(cfg, r));
    json_object_set_new(root, "deterministic", json_boolean(cfg->deterministic));
    json_object_set_new(root, "phantom", json_boolean(r->phantom));
    if (r->phantom) /* nothing was computed: no hash, no losses (null above) */
        json_object_set_new(root, "param_hash", json_null());
    json_object_set_new(root, "padded_params", json_integer((json_int_t)r->padded_params));
    if (cfg->stage == 3)
        zs_report_json_stage3(root, cfg, r);
    json_object_set_new(root, "grad_reduce", json_string(zs_grad_reduce_name(cfg->grad_reduce)));
    json_object_set_new(root, "overlap_comm", json_boolean(zs_step_overlap(cfg)));
    json_object_set_new(root, "first_step", json_integer(r->first_step));
    if (!r->phantom && r->steps > 0)
        json_object_set_new(root, "comm_time", zs_report_json_comm_time(r));
    zs_report_json_outputs(root, cfg, r);
    return zs_report_json_save(path, root);
}

int zs_report_write_trace(const char *path, const zs_train_result *r)
{
    if (!r->trace_json)
        ZS_FAIL("no trace was recorded for %s", path);
    return zs_report_write_text(path, r->trace_json, strlen(r->trace_json));
}
