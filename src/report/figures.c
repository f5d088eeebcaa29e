/* zerosim — each rank's figures for the report: memory rows measured and
 * predicted, traffic per op measured and predicted (and across nodes),
 * collective seconds, pipeline waits. Pure functions of the run's result;
 * every writer (text, JSON, CSV) and the classes of ranks read them here. */
#include "build-config.h"
#include "report_impl.h"
#include "zerosim/mesh.h"
#include "zerosim/predict.h"
#include "zerosim/program.h"

#include <math.h>

const zs_mem_row zs_report_mem_rows[] = {
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
const size_t zs_report_n_mem_rows = sizeof zs_report_mem_rows / sizeof zs_report_mem_rows[0];

size_t zs_report_row_peak(const zs_train_result *r, int q, size_t k)
{
    size_t v = 0;
    for (int i = 0; i < zs_report_mem_rows[k].ncats; i++)
        v += r->peaks[q][zs_report_mem_rows[k].cats[i]];
    return v;
}

int zs_report_stage_of(const zs_train_result *r, int q)
{
    int T = r->tp_size > 0 ? r->tp_size : 1;
    return zs_mesh_coord_of(r->world_size, T, r->pp_size, q).pp;
}

const zs_prediction *zs_report_pred_of(const zs_train_result *r, int q)
{
    return r->pp_pred ? &r->pp_pred[zs_report_stage_of(r, q)] : &r->pred;
}

size_t zs_report_row_pred(const zs_train_result *r, int q, size_t k, int *has)
{
    const zs_prediction *pr = zs_report_pred_of(r, q);
    size_t v = 0;
    *has = 1;
    for (int i = 0; i < zs_report_mem_rows[k].ncats; i++) {
        int c = zs_report_mem_rows[k].cats[i];
        *has &= pr->has[c];
        v += pr->bytes[c];
    }
    return v;
}

double zs_report_ratio(double measured, double predicted)
{
    if (predicted == 0.0)
        return measured == 0.0 ? 1.0 : INFINITY;
    return measured / predicted;
}

/* Training traffic of op o on rank q over the run: this rank's bytes
 * (zs_comm_record.wire_bytes); *api gets the full buffers' bytes. */
double zs_report_op_bytes(const zs_train_result *r, int q, int o, double *calls, double *secs,
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
double zs_report_op_pred(const zs_train_result *r, int q, int o)
{
    const zs_prediction *pr = zs_report_pred_of(r, q);
    /* the pipeline's messages, and context parallelism's ring */
    if (o == ZS_OP_SEND && r->pp_pred)
        return pr->p2p_send_bytes_per_step * r->steps +
               pr->tied_send_bytes_per_applied_step * r->steps_applied +
               pr->cp_ring_bytes_per_step * r->steps;
    if (o == ZS_OP_RECV && r->pp_pred)
        return pr->p2p_recv_bytes_per_step * r->steps +
               pr->tied_recv_bytes_per_applied_step * r->steps_applied +
               pr->cp_ring_bytes_per_step * r->steps;
    if ((o == ZS_OP_SEND || o == ZS_OP_RECV) && pr->cp_ring_sends_per_step > 0)
        return pr->cp_ring_bytes_per_step * r->steps;
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
    /* 1-bit Adam's steps after the freeze: the signs' exchange in place of
     * the allgather of the gradient */
    int onebit = pr->onebit_ag_bytes_per_step > 0
                     ? r->compressed_applied_steps - r->local_applied_steps : 0;
    /* the steps that all-gathered the parameters: 1-bit Adam's before the
     * freeze, 0/1 Adam's exact steps (its local steps gather nothing) */
    int exact = r->steps_applied - (pr->onebit_ag_bytes_per_step > 0 ? r->compressed_applied_steps : 0);
    if (o == ZS_OP_ALLGATHER)
        return zs_ring_bytes(pr->ag_bytes_per_step, N) * exact +
               pr->onebit_ag_bytes_per_step * onebit +
               zs_ring_bytes(pr->ag_bytes_per_skipped_step, N) * r->skipped_steps +
               (pr->tp_ag_bytes_per_step + pr->edp_ag_bytes_per_step) * r->steps +
               pr->edp_ag_bytes_per_applied_step * r->steps_applied;
    if (o == ZS_OP_ALLTOALL && r->qgz_pred)
        return r->qgz_pred[q] * r->steps;
    if (o == ZS_OP_ALLTOALL && r->a2a_pred)
        return r->a2a_pred[q] * r->compressed_steps + pr->ep_a2a_bytes_per_step * r->steps;
    if (o == ZS_OP_ALLTOALL && onebit)
        return pr->onebit_a2a_bytes_per_step * onebit;
    if (o == ZS_OP_ALLTOALL && pr->cp_a2a_calls_per_step > 0) /* Ulysses' heads */
        return pr->cp_a2a_bytes_per_step * r->steps;
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
void zs_report_pp_idle(const zs_train_result *r, int q, double *wait_s, double *step_s)
{
    *wait_s = r->comm[q][ZS_OP_RECV][ZS_PHASE_FORWARD].seconds +
              r->comm[q][ZS_OP_RECV][ZS_PHASE_BACKWARD].seconds;
    *step_s = 0.0;
    for (int i = 0; i < r->steps; i++)
        *step_s += r->info[i].seconds;
}

/* Inter-node traffic of op o on rank q over the run, as its ledger recorded
 * it (the ring model: all of a call's bytes when the next rank of its ring
 * is on another node; all-to-all: the bytes sent to other nodes). Summed
 * from full buffers where zs_report_op_bytes is. */
double zs_report_op_inter(const zs_train_result *r, int q, int o)
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
 * zs_report_op_pred when q's ring in that part's group crosses a node boundary;
 * -1 when there is no prediction (all-to-all, scalars). */
double zs_report_op_pred_inter(const zs_train_result *r, int q, int o)
{
    const zs_prediction *pr = zs_report_pred_of(r, q); /* its pipeline stage's TP traffic */
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
    /* 1-bit Adam after the freeze: the all-to-all sends the rank's chunk of
     * signs to every rank on another node (N - K of them); its allgather's
     * records sit beside the ring allgathers', whose inter-node bytes the
     * ledger keeps in the ring model: not predicted */
    int onebit = pr->onebit_ag_bytes_per_step > 0 && N > 1
                     ? r->compressed_applied_steps - r->local_applied_steps : 0;
    if (o == ZS_OP_ALLTOALL && onebit) {
        int known = zs_dp_nodes(r, q, &K, &M);
        double chunk = pr->onebit_ag_bytes_per_step / (N - 1);
        return (known ? (double)(N - K) : dpx * (N - 1)) * chunk * onebit;
    }
    if (o == ZS_OP_ALLGATHER && onebit)
        return -1.0;
    if (o == ZS_OP_ALLGATHER)
        return dpx * (zs_ring_bytes(r->pred.ag_bytes_per_step, N) * r->steps_applied +
                      zs_ring_bytes(r->pred.ag_bytes_per_skipped_step, N) * r->skipped_steps) +
               tpx * pr->tp_ag_bytes_per_step * r->steps;
    if (o == ZS_OP_D2H || o == ZS_OP_H2D || o == ZS_OP_NVME_READ || o == ZS_OP_NVME_WRITE)
        return 0.0; /* inside the node */
    return -1.0;
}

/* Whether any rank holds bytes off the device (offload). */
int zs_report_has_tiers(const zs_train_result *r)
{
    for (int q = 0; r->tier_peaks && q < r->world_size; q++)
        for (int t = ZS_TIER_HOST; t < ZS_MEM_NTIERS; t++)
            for (int c = 0; c < ZS_MEM_NCAT; c++)
                if (r->tier_peaks[q][t][c] || zs_report_pred_of(r, q)->tier_bytes[t][c])
                    return 1;
    return 0;
}

/* Rank q's collective seconds in training (not the report's gathers, not
 * offload's copies), and of them the part that ran behind compute: stage
 * 3's non-blocking gathers and the reduce-scatters (overlap_comm), from
 * start to done, less the time spent starting, driving and waiting for
 * them. */
void zs_report_comm_time(const zs_train_result *r, int q, double *total, double *hidden)
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

/* The model chunks a rank holds: v with the interleaved schedule, else 1. */
int zs_report_pp_chunks(const zs_run_config *cfg)
{
    return cfg->pp_schedule == ZS_PP_INTERLEAVED ? cfg->virtual_stages : 1;
}

/* The ideal bubble fraction: (P-1)/(m+P-1), interleaved (P-1)/(v·m+P-1). */
double zs_report_pp_ideal(const zs_run_config *cfg)
{
    return zs_pp_ideal_bubble(cfg->pp, zs_report_pp_chunks(cfg), cfg->grad_accum);
}
