/* zerosim — a training run over the ranks of a communicator. */
#include "zerosim/train.h"
#include "zerosim/error.h"
#include "zerosim/program.h"
#include "zerosim/mesh.h"
#include "run/oracle.h"
#include "run/trace.h"
#include "run/train_impl.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define ZS_AGREE_TIMEOUT_S 10.0

double zs_train_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* After a local result rc, agree with the other ranks. Returns 0 when every
 * rank succeeded; otherwise non-zero on every rank, with error_rank set on
 * the lowest failing one. When the ranks cannot agree (a rank is stuck in a
 * collective), the failing rank prints its message and aborts the job. */
static int zs_train_agree(zs_comm_t comm, int rc, zs_train_result *r)
{
    int any = 0;
    /* a failed rank waits a little for the others, then stops the job
     * with its own message; a healthy one waits the collective timeout and
     * stops it naming the ranks that did not come (zs_comm_agree) */
    double limit = zs_comm_timeout(comm);
    if (rc && limit > ZS_AGREE_TIMEOUT_S)
        limit = ZS_AGREE_TIMEOUT_S;
    if (zs_comm_agree(comm, rc != 0, limit, &any)) {
        char why[1024];
        snprintf(why, sizeof why, "%s", rc ? zs_error_msg() : "another rank stopped responding");
        zs_comm_stop(comm, why);
    }
    if (!any)
        return 0;
    r->error_rank = any - 1 == zs_comm_rank(comm);
    if (!rc)
        zs_error_set("another rank failed");
    return -1;
}

/* The progress line of step s (0-based, counted from the start of
 * training), whose results are r->info[i]. */
static void zs_train_log_step(const zs_run_config *cfg, const zs_train_options *o,
                              const zs_train_result *r, int s, int i)
{
    int every = o->print_every > 0 ? o->print_every : 10;
    if (!o->log || o->quiet || !(i == 0 || (s + 1) % every == 0 || s + 1 == cfg->steps))
        return;
    const zs_step_info *in = &r->info[i];
    char extra[160] = "";
    if (cfg->precision == ZS_DTYPE_F16)
        snprintf(extra, sizeof extra, "  loss_scale %g%s", (double)in->loss_scale,
                 in->skipped ? " (overflow: step skipped)" : "");
    if (r->val_loss && !isnan(r->val_loss[i])) {
        size_t k = strlen(extra);
        snprintf(extra + k, sizeof extra - k, "  val_loss %.4f", r->val_loss[i]);
        k = strlen(extra);
        if (r->val_byte_level) /* nats per byte / ln 2 */
            snprintf(extra + k, sizeof extra - k, "  val_bpb %.4f", r->val_loss[i] / M_LN2);
    }
    if (r->test_loss && !isnan(r->test_loss[i])) {
        size_t k = strlen(extra);
        snprintf(extra + k, sizeof extra - k, "  val_acc %.2f%%  test_loss %.4f  test_acc %.2f%%",
                 100.0 * r->val_accuracy[i], r->test_loss[i], 100.0 * r->test_accuracy[i]);
    }
    fprintf(o->log, "step %5d/%d  loss %.4f  lr %.3e  grad_norm %.4f%s\n", s + 1, cfg->steps,
            (double)in->loss, (double)in->lr, (double)in->grad_norm, extra);
    fflush(o->log);
}

void zs_train_pack_stats(const zs_train_result *r, zs_comm_t comm, double *mine)
{
    enum { NM = ZS_NM, NC = ZS_NC };
    for (int c = 0; c < ZS_MEM_NCAT; c++) {
        mine[c] = (double)r->mem.peak[c];
        mine[ZS_MEM_NCAT + c] = (double)r->mem.at_total_peak[c];
    }
    for (int p = 0; p < ZS_MEM_NPHASES; p++)
        mine[2 * ZS_MEM_NCAT + p] = (double)r->mem.phase_peak[p];
    mine[2 * ZS_MEM_NCAT + ZS_MEM_NPHASES] = (double)r->mem.total_peak;
    for (int t = ZS_TIER_HOST; t < ZS_MEM_NTIERS; t++)
        for (int c = 0; c < ZS_MEM_NCAT; c++)
            mine[2 * ZS_MEM_NCAT + ZS_MEM_NPHASES + 1 + (t - 1) * ZS_MEM_NCAT + c] =
                (double)r->tier_mem[t].peak[c];
    mine[NM - 2] = r->nb_span_s;
    mine[NM - 1] = r->nb_wait_s;
    size_t n;
    const zs_comm_sum_row *sum = zs_comm_sums(comm, &n);
    double *cs = mine + NM;
    double *gs = cs + ZS_OP_NOPS * ZS_PHASE_NPHASES * 6; /* training calls per group and op */
    memset(cs, 0, NC * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        double *d = cs + ((size_t)sum[i].op * ZS_PHASE_NPHASES + (size_t)sum[i].phase) * 6;
        d[0] += sum[i].calls;
        d[1] += sum[i].bytes;
        d[2] += sum[i].seconds;
        d[3] += sum[i].wire_bytes;
        d[4] += sum[i].inter_bytes;
        d[5] += sum[i].inter_api_bytes;
        if (sum[i].phase == ZS_PHASE_REPORT)
            continue;
        double *g = gs + ((size_t)sum[i].group * ZS_OP_NOPS + (size_t)sum[i].op) * 5;
        g[0] += sum[i].calls;
        g[1] += sum[i].bytes;
        g[2] += sum[i].wire_bytes;
        g[3] += sum[i].inter_bytes;
        g[4] += sum[i].inter_api_bytes;
    }
    mine[NM + NC - 1] = zs_comm_node_of(comm, zs_comm_rank(comm));
}

/* Rank q's row of statistics into r's per-rank arrays. */
void zs_train_unpack_stats(zs_train_result *r, int q, const double *v)
{
    enum { NM = ZS_NM };
    for (int c = 0; c < ZS_MEM_NCAT; c++) {
        r->peaks[q][c] = (size_t)v[c];
        r->at_peak[q][c] = (size_t)v[ZS_MEM_NCAT + c];
    }
    for (int p = 0; p < ZS_MEM_NPHASES; p++)
        r->phase_peaks[q][p] = (size_t)v[2 * ZS_MEM_NCAT + p];
    r->total_peaks[q] = (size_t)v[2 * ZS_MEM_NCAT + ZS_MEM_NPHASES];
    for (int t = ZS_TIER_HOST; t < ZS_MEM_NTIERS; t++)
        for (int c = 0; c < ZS_MEM_NCAT; c++)
            r->tier_peaks[q][t][c] =
                (size_t)v[2 * ZS_MEM_NCAT + ZS_MEM_NPHASES + 1 + (t - 1) * ZS_MEM_NCAT + c];
    r->nb[q][0] = v[NM - 2];
    r->nb[q][1] = v[NM - 1];
    for (int o = 0; o < ZS_OP_NOPS; o++)
        for (int p = 0; p < ZS_PHASE_NPHASES; p++) {
            const double *d = v + NM + ((size_t)o * ZS_PHASE_NPHASES + (size_t)p) * 6;
            r->comm[q][o][p] = (zs_comm_sum){d[0], d[1], d[2], d[3], d[4], d[5]};
        }
    const double *gs = v + NM + ZS_OP_NOPS * ZS_PHASE_NPHASES * 6;
    for (int g = 0; g < ZS_GROUP_NGROUPS; g++)
        for (int o = 0; o < ZS_OP_NOPS; o++) {
            const double *d = gs + ((size_t)g * ZS_OP_NOPS + (size_t)o) * 5;
            r->comm_group[q][g][o] = (zs_comm_sum){d[0], d[1], 0.0, d[2], d[3], d[4]};
        }
    r->node_of[q] = (int)v[ZS_NM + ZS_NC - 1];
    if (r->node_of[q] + 1 > r->nodes)
        r->nodes = r->node_of[q] + 1;
}

/* From the nodes of the ranks: each rank's crossings per group and its
 * data-parallel group's ranks on its node (for the predictions of the
 * inter-node bytes; once per group, not per rank: phantom worlds are big). */
int zs_train_node_shape(zs_train_result *r, int tp, int pp)
{
    int W = r->world_size;
    free(r->node_cross);
    free(r->dp_node_ranks);
    r->node_cross = calloc((size_t)W, 1);
    r->dp_node_ranks = calloc((size_t)W, sizeof(int));
    int *m = malloc((size_t)W * sizeof(int));
    if (!r->node_cross || !r->dp_node_ranks || !m) {
        free(m);
        ZS_FAIL("out of host memory for the node map of %d ranks", W);
    }
    static const zs_comm_group axes[] = {ZS_GROUP_DP, ZS_GROUP_TP, ZS_GROUP_PP};
    for (int a = 0; a < 3 && !zs_mesh_check(W, tp, pp); a++) {
        zs_comm_group g = axes[a];
        for (int k = 0; k < zs_mesh_ngroups(W, tp, pp, g); k++) {
            int n = zs_mesh_group_ranks(W, tp, pp, g, k, m);
            for (int i = 0; i < n; i++) {
                if (r->node_of[m[(i + 1) % n]] != r->node_of[m[i]])
                    r->node_cross[m[i]] |= (unsigned char)(1u << g);
                if (g == ZS_GROUP_DP && r->node_of[m[i]] == r->node_of[m[0]])
                    r->dp_node_ranks[m[0]]++;
            }
            for (int i = 1; g == ZS_GROUP_DP && i < n; i++) /* regular nodes: the first's count */
                r->dp_node_ranks[m[i]] = r->dp_node_ranks[m[0]];
        }
    }
    free(m);
    return 0;
}

int zs_train_alloc_stats(zs_train_result *r, int N)
{
    r->peaks = calloc((size_t)N, sizeof *r->peaks);
    r->total_peaks = calloc((size_t)N, sizeof(size_t));
    r->at_peak = calloc((size_t)N, sizeof *r->at_peak);
    r->phase_peaks = calloc((size_t)N, sizeof *r->phase_peaks);
    r->comm = calloc((size_t)N, sizeof *r->comm);
    r->comm_group = calloc((size_t)N, sizeof *r->comm_group);
    r->tier_peaks = calloc((size_t)N, sizeof *r->tier_peaks);
    r->nb = calloc((size_t)N, sizeof *r->nb);
    r->node_of = calloc((size_t)N, sizeof(int));
    if (!r->node_of || !r->nb || !r->tier_peaks || !r->peaks || !r->total_peaks || !r->at_peak || !r->phase_peaks || !r->comm ||
        !r->comm_group)
        ZS_FAIL("out of host memory for the statistics of %d ranks", N);
    return 0;
}

/* Gather every rank's memory statistics and comm sums to rank 0. */
static int zs_train_gather_stats(zs_comm_t comm, zs_train_result *r)
{
    int N = zs_comm_size(comm);
    double mine[ZS_NM + ZS_NC];
    zs_train_pack_stats(r, comm, mine);
    double *all = calloc((size_t)N * (ZS_NM + ZS_NC), sizeof(double));
    if (!all || zs_train_alloc_stats(r, N)) {
        free(all);
        ZS_FAIL("out of host memory gathering statistics");
    }
    zs_comm_set_context(comm, ZS_PHASE_REPORT, -1);
    int rc = zs_comm_gather_root(comm, mine, ZS_NM + ZS_NC, all, ZS_CT_F64);
    for (int q = 0; q < N && !rc; q++)
        zs_train_unpack_stats(r, q, all + (size_t)q * (ZS_NM + ZS_NC));
    free(all);
    if (!rc && zs_comm_rank(comm) == 0)
        rc = zs_train_node_shape(r, r->tp_size > 0 ? r->tp_size : 1,
                                 r->pp_size > 0 ? r->pp_size : 1);
    return rc;
}

/* Rank 0's comms table: training calls grouped by op and message size. */
static int zs_train_comm_table(zs_comm_t comm, zs_train_result *r)
{
    size_t n;
    const zs_comm_sum_row *sum = zs_comm_sums(comm, &n);
    for (size_t i = 0; i < n; i++) {
        if (sum[i].phase == ZS_PHASE_REPORT)
            continue;
        size_t k;
        for (k = 0; k < r->n_comm_rows; k++)
            if (r->comm_rows[k].op == (int)sum[i].op && r->comm_rows[k].msg_bytes == sum[i].msg_bytes)
                break;
        if (k == r->n_comm_rows) {
            zs_comm_row *t = realloc(r->comm_rows, (k + 1) * sizeof *t);
            if (!t)
                ZS_FAIL("out of host memory building the comms table");
            r->comm_rows = t;
            r->comm_rows[k] = (zs_comm_row){.op = (int)sum[i].op, .msg_bytes = sum[i].msg_bytes};
            r->n_comm_rows++;
        }
        r->comm_rows[k].count += (size_t)sum[i].calls;
        r->comm_rows[k].seconds += sum[i].seconds;
    }
    return 0;
}

/* Rank 0 collects every rank's checkpoint bytes and their prediction. */
static int zs_train_gather_ckpt(zs_comm_t comm, const zs_engine *e, zs_train_result *r)
{
    int world = zs_comm_size(comm), root = zs_comm_rank(comm) == 0;
    uint64_t mine[6] = {(uint64_t)r->ckpt.saves, r->ckpt.written, r->ckpt.tensor_written,
                        r->ckpt.read, r->ckpt.tensor_read, zs_ckpt_tensor_bytes(e)};
    uint64_t *all = root ? calloc((size_t)world * 6, sizeof *all) : NULL;
    if (root) {
        r->ckpt_ranks = calloc((size_t)world, sizeof *r->ckpt_ranks);
        r->ckpt_pred = calloc((size_t)world, sizeof *r->ckpt_pred);
    }
    int bad = root && (!all || !r->ckpt_ranks || !r->ckpt_pred);
    zs_comm_set_context(comm, ZS_PHASE_REPORT, -1);
    int rc = zs_comm_gather_root(comm, mine, 6, bad ? NULL : all, ZS_CT_U64);
    if (!rc && bad)
        rc = zs_error_set("out of host memory gathering the checkpoint statistics");
    for (int q = 0; q < world && !rc && root; q++) {
        const uint64_t *a = all + (size_t)q * 6;
        r->ckpt_ranks[q] = (zs_ckpt_io){.saves = (int)a[0], .written = a[1],
                                        .tensor_written = a[2], .read = a[3],
                                        .tensor_read = a[4]};
        r->ckpt_pred[q] = a[5];
    }
    free(all);
    return rc;
}

/* One rank's run as zs_train_rank drives it: what its phases share. */
typedef struct {
    const zs_run_config *cfg;
    const zs_train_options *o;
    zs_train_options rank_log; /* o, with its log on rank 0 only */
    zs_comm_t comm;
    zs_comm_t dp;             /* this rank's data-parallel group */
    zs_comm_t cp;             /* its context-parallel group (--cp), or NULL */
    zs_comm_t pp;             /* its pipeline group (--pp), or NULL */
    int rank;
    zs_backend_t be;
    zs_mem_t mem;
    zs_engine *e;
    zs_ckpt *ck;              /* --resume's checkpoint, or NULL */
    zs_ckpt_place place;      /* this rank's place in the checkpoint's shards */
    zs_oracle_val *val;       /* --val-data's held-out batch, or NULL */
    int first;                /* steps done before this run */
    int n;                    /* steps this run takes */
    int next_dump;            /* o->dump_steps[next_dump]: the next dump */
    zs_train_result *r;
} zs_train_run;

/* The held-out data a run evaluates: --val-data's tokens, or the MLP's
 * image set (--data); NULL for none. */
static const char *zs_train_val_source(const zs_run_config *cfg, const zs_train_options *o)
{
    if (o->val_data)
        return o->val_data;
    return cfg->model.kind == ZS_MODEL_MLP ? cfg->data_file : NULL;
}

/* What a run with --pp or --ep cannot write yet. */
static int zs_train_refuse(const zs_run_config *cfg, const zs_train_options *o)
{
    if (cfg->pp > 1 && cfg->model.kind == ZS_MODEL_MLP && cfg->data_file)
        return zs_error_set("--pp %d does not evaluate an image set (--data %s) yet: run it "
                            "with --pp 1", cfg->pp, cfg->data_file);
    if (cfg->pp > 1 && (o->resume || o->save_dir || o->init_from || o->n_dump_steps ||
                        o->export_path || o->val_data))
        return zs_error_set("--pp %d does not support checkpoints (--save-dir, --resume), "
                            "--init-from, --dump-steps, --export or --val-data yet: run without "
                            "them or with --pp 1", cfg->pp);
    if (cfg->ep > 1 && (o->n_dump_steps || o->val_data))
        return zs_error_set("--ep %d does not support --dump-steps or --val-data yet: run "
                            "without them or with --ep 1", cfg->ep);
    return 0;
}

/* --val-data: rank 0's held-out losses (NaN until measured) and every
 * rank's batch of held-out tokens. */
static int zs_train_open_val(zs_train_run *run)
{
    zs_train_result *r = run->r;
    int rc = 0;
    r->val_loss = run->rank == 0 ? malloc((size_t)(run->n + 1) * sizeof(double)) : NULL;
    if (run->rank == 0 && !r->val_loss)
        rc = zs_error_set("out of host memory for the held-out losses");
    for (int i = 0; run->rank == 0 && r->val_loss && i <= run->n; i++)
        r->val_loss[i] = NAN;
    if (!rc)
        rc = zs_oracle_val_create(run->cfg, zs_train_val_source(run->cfg, run->o), run->be,
                                  run->cfg->train_batch_size, run->rank, &run->val);
    r->val_byte_level = zs_oracle_val_byte_level(run->val);
    if (rc || run->rank != 0 || run->cfg->model.kind != ZS_MODEL_MLP)
        return rc;
    double **arr[3] = {&r->val_accuracy, &r->test_loss, &r->test_accuracy};
    for (int a = 0; a < 3; a++) {
        if (!(*arr[a] = malloc((size_t)(run->n + 1) * sizeof(double))))
            return zs_error_set("out of host memory for the held-out accuracies");
        for (int i = 0; i <= run->n; i++)
            (*arr[a])[i] = NAN;
    }
    return 0;
}

/* The checkpoint to resume from, the results' arrays, the engine over the
 * mesh's groups and its starting parameters; every rank agrees. */
static int zs_train_open(zs_train_run *run, zs_comm_t tp, zs_comm_t pp,
                         zs_comm_t ep, zs_comm_t edp, const zs_step_shape *shape)
{
    const zs_run_config *cfg = run->cfg;
    const zs_train_options *o = run->o;
    zs_train_result *r = run->r;
    int rc = zs_train_refuse(cfg, o);
    if (!rc && o->resume)
        rc = zs_ckpt_open(o->resume, cfg, r->tp_size, &run->ck, &run->first);
    run->n = cfg->steps - run->first;
    r->first_step = run->first;
    if (!rc) {
        r->info = calloc((size_t)run->n, sizeof *r->info);
        r->hashes = o->hash_every_step ? calloc((size_t)run->n, sizeof *r->hashes) : NULL;
        if (!run->mem || !r->info || (o->hash_every_step && !r->hashes))
            rc = zs_error_set("out of host memory for %d steps of results", run->n);
    }
    if (!rc)
        rc = zs_engine_create_shared(cfg, run->be, run->mem, run->dp, shape, &run->e);
    if (!rc)
        rc = zs_engine_set_tp(run->e, tp);
    if (!rc)
        rc = zs_engine_set_pp(run->e, pp, run->comm);
    if (!rc)
        rc = zs_engine_set_ep(run->e, ep, edp);
    if (!rc)
        rc = zs_engine_set_cp(run->e, run->cp);
    if (!rc && o->init_from && !zs_backend_is_phantom(run->be))
        rc = zs_oracle_init_from(run->e, cfg, o->init_from);
    if (!rc && zs_train_val_source(cfg, o) && !zs_backend_is_phantom(run->be))
        rc = zs_train_open_val(run);
    return zs_train_agree(run->comm, rc, r);
}

/* --resume: the checkpoint's state into the engine; then the dump of the
 * state before step 1 when it is listed (and no step was taken). */
static int zs_train_resume(zs_train_run *run)
{
    const zs_train_options *o = run->o;
    zs_train_result *r = run->r;
    FILE *log = run->rank_log.log;
    int rc;
    if (run->ck) {
        snprintf(r->resumed_from, sizeof r->resumed_from, "%s", zs_ckpt_describe(run->ck));
        if (log)
            fprintf(log, "resuming from %s\n", r->resumed_from);
        rc = zs_ckpt_load(run->ck, run->e, &run->place, &r->ckpt, r->resumed_hash);
        if ((rc = zs_train_agree(run->comm, rc == 1 ? 0 : rc, r)))
            return rc;
        if (log)
            fprintf(log, "loaded: param_hash %s, as saved\n", r->resumed_hash);
    }
    /* dumps of steps this run takes; the state before step 1 now */
    while (run->next_dump < o->n_dump_steps &&
           o->dump_steps[run->next_dump] < (run->first ? run->first + 1 : 0))
        run->next_dump++;
    if (run->next_dump < o->n_dump_steps && o->dump_steps[run->next_dump] == 0) {
        rc = zs_oracle_dump(run->e, run->cfg, o->dump_dir, 0, NULL, run->rank);
        run->next_dump++;
        if ((rc = zs_train_agree(run->comm, rc, r)))
            return rc;
    }
    return 0;
}

/* The planner's predictions the report sets beside what was measured: the
 * run's, and on rank 0 every pipeline stage's; every rank agrees. */
static int zs_train_predict(zs_train_run *run)
{
    const zs_run_config *cfg = run->cfg;
    zs_train_result *r = run->r;
    int rc = 0;
    if (zs_predict(cfg, r->dp_size, &r->pred))
        return zs_train_agree(run->comm, -1, r);
    if (cfg->pp > 1 && run->rank == 0) { /* every stage's, for the report */
        r->pp_size = cfg->pp;
        r->pp_pred = calloc((size_t)cfg->pp, sizeof *r->pp_pred);
        for (int st = 0; r->pp_pred && st < cfg->pp && !rc; st++) {
            zs_run_config sc = *cfg;
            rc = zs_pp_stage_config(&sc, st);
            if (!rc)
                rc = zs_predict(&sc, r->dp_size, &r->pp_pred[st]);
        }
        if (!r->pp_pred)
            rc = zs_error_set("out of host memory for the pipeline's predictions");
    }
    return zs_train_agree(run->comm, rc, r);
}

/* Rank 0, offload_param: each rank sends its own parts of what it gathers
 * up; the parts differ between ranks (the tied embedding is gathered
 * twice) and, with a pipeline, between stages: each stage's from its own
 * step program (zs_predict_param_h2d_bytes), rank 0's program is stage 0's. */
static void zs_train_predict_param_h2d(zs_train_run *run)
{
    const zs_run_config *cfg = run->cfg;
    zs_train_result *r = run->r;
    int P = cfg->pp > 1 ? cfg->pp : 1, D = r->dp_size;
    r->h2d_pred = calloc((size_t)r->world_size, sizeof(double));
    double *stage_bytes = calloc((size_t)D, sizeof(double));
    for (int st = 0; P > 1 && r->h2d_pred && stage_bytes && st < P; st++) {
        zs_run_config sc = *cfg;
        if (zs_pp_stage_config(&sc, st) || zs_predict_param_h2d_bytes(&sc, D, stage_bytes)) {
            free(r->h2d_pred); /* out of memory: zs_train_predict built these stages */
            r->h2d_pred = NULL;
            break;
        }
        for (int q = 0; q < r->world_size; q++) {
            zs_mesh_coord c = zs_mesh_coord_of(r->world_size, r->tp_size, cfg->pp, q);
            if (c.pp == st)
                r->h2d_pred[q] = stage_bytes[c.dp];
        }
    }
    for (int q = 0; P == 1 && r->h2d_pred && q < r->world_size; q++)
        r->h2d_pred[q] = zs_step_gather_own_bytes(
            zs_engine_shape(run->e), zs_engine_program(run->e),
            zs_mesh_coord_of(r->world_size, r->tp_size, cfg->pp, q).dp);
    free(stage_bytes);
}

/* Pipeline stage st's step shape over D data-parallel ranks (st = 0 and
 * P = 1: the whole model's), as its ranks' engines build it: the stage's
 * configuration, and with expert parallelism the engine's layout and its
 * model's buffers (zs_engine_set_ep). */
int zs_train_stage_shape(const zs_run_config *cfg, int st, int D, zs_step_shape *shape)
{
    zs_run_config sc = *cfg;
    zs_model *m = NULL;
    int rc = cfg->pp > 1 ? zs_pp_stage_config(&sc, st) : 0;
    zs_model_config lm;
    zs_run_config pc = sc;
    zs_step_ep_configs(&pc, D, &sc, &lm);
    if (!rc)
        rc = zs_model_create(&lm, &m);
    if (!rc)
        rc = zs_step_shape_build(&sc, m, D, shape);
    zs_model_destroy(m);
    return rc;
}

/* a2a[q] for every rank q of pipeline stage st: the compressed exchange's
 * bytes of its data-parallel rank over the stage's own buckets and
 * partition (rank 0's, stage 0's, are another part of the layout). */
static void zs_train_predict_alltoall_stage(const zs_train_run *run, const zs_step_shape *sh,
                                            int st, double *a2a)
{
    const zs_run_config *cfg = run->cfg;
    const zs_train_result *r = run->r;
    int nb = sh->nbuckets;
    size_t *bucket_lo = calloc((size_t)nb + 1, sizeof(size_t));
    size_t *bucket_hi = calloc((size_t)nb + 1, sizeof(size_t));
    for (int i = 0; bucket_lo && bucket_hi && i < nb; i++) {
        bucket_lo[i] = sh->buckets[i].lo;
        bucket_hi[i] = sh->buckets[i].hi;
    }
    for (int q = 0; bucket_lo && bucket_hi && q < r->world_size; q++) {
        zs_mesh_coord c = zs_mesh_coord_of(r->world_size, r->tp_size, cfg->pp, q);
        if (c.pp == st || cfg->pp <= 1)
            a2a[q] = zs_predict_alltoall_bytes(cfg, sh->part.num_params, r->dp_size, c.dp,
                                               bucket_lo, bucket_hi, nb);
    }
    free(bucket_lo);
    free(bucket_hi);
}

/* Rank 0: each rank's predicted bytes of the traffic that differs between
 * ranks (compression's all-to-all, qgZ's two levels, ZeRO-Infinity's
 * parameter uploads), by its data-parallel rank (and its pipeline stage's
 * shape). */
static void zs_train_predict_per_rank(zs_train_run *run)
{
    const zs_run_config *cfg = run->cfg;
    zs_train_result *r = run->r;
    zs_engine *e = run->e;
    if (cfg->compression.kind != ZS_COMP_NONE) {
        r->a2a_pred = calloc((size_t)r->world_size, sizeof(double));
        /* rank 0's engine holds stage 0's shape; another stage's is built */
        for (int st = 0; r->a2a_pred && st < (cfg->pp > 1 ? cfg->pp : 1); st++) {
            zs_step_shape sh;
            if (st == 0) {
                zs_train_predict_alltoall_stage(run, zs_engine_shape(e), 0, r->a2a_pred);
            } else if (zs_train_stage_shape(cfg, st, r->dp_size, &sh) == 0) {
                zs_train_predict_alltoall_stage(run, &sh, st, r->a2a_pred);
                zs_step_shape_free(&sh);
            }
        }
    }
    if (cfg->quantized_gradients && cfg->stage == 3) {
        /* qgZ: each rank's parts of the two levels, from its data-parallel rank */
        int K = zs_comm_qgz_ranks_per_node(run->dp);
        r->qgz_pred = calloc(2 * (size_t)r->world_size, sizeof(double));
        for (int q = 0; r->qgz_pred && K > 0 && q < r->world_size; q++)
            r->qgz_pred[q] = zs_predict_qgz_bytes(
                zs_engine_shape(e), zs_engine_program(e), K,
                zs_mesh_coord_of(r->world_size, r->tp_size, cfg->pp, q).dp,
                &r->qgz_pred[r->world_size + q]);
    }
    if (cfg->offload_param != ZS_OFFLOAD_NONE)
        zs_train_predict_param_h2d(run);
}

/* The sizes the report states: parameters (the whole model's: a pipeline
 * stage holds its part), stage 3's units over the live bound, the padded
 * count, the loss floor. */
static void zs_train_record_sizes(zs_train_run *run)
{
    zs_engine *e = run->e;
    zs_train_result *r = run->r;
    r->num_params = run->cfg->pp > 1 ? zs_engine_layout(e)->num_params : zs_engine_num_params(e);
    int first_over;
    r->units_over_live_bound = zs_step_shape_units_over_bound(zs_engine_shape(e), &first_over);
    /* DeepSpeed's layout for --ep: the dense arrays and the expert store */
    r->padded_params = zs_engine_partition(e)->padded + zs_engine_expert_padded(e);
    r->loss_floor = zs_engine_loss_floor(e);
}

/* Step i of this run (s counted from the start of training): the step and
 * its hash, then the save, the memory timeline, the dump and the held-out
 * loss it asks for; every rank agrees after each. */
static int zs_train_one_step(zs_train_run *run, int i)
{
    const zs_run_config *cfg = run->cfg;
    const zs_train_options *o = run->o;
    zs_train_result *r = run->r;
    int s = run->first + i, rc;
    zs_mem_trace(run->mem, i == r->timeline_step);
    double ts = zs_train_now();
    rc = zs_engine_step(run->e, s, &r->info[i]);
    r->info[i].seconds = zs_train_now() - ts;
    if (!rc && o->hash_every_step)
        rc = zs_engine_param_hash(run->e, r->hashes[i]);
    if ((rc = zs_train_agree(run->comm, rc, r)))
        return rc;
    if (o->save_dir &&
        ((o->save_every > 0 && (s + 1) % o->save_every == 0) || s + 1 == cfg->steps)) {
        if (zs_engine_zeroone_between_syncs(run->e)) {
            rc = zs_error_set("0/1 Adam: step %d is a local step and the ranks' weights differ "
                              "until the next sync; checkpoint at a sync step (docs/onebit.md: "
                              "the schedule)", s + 1);
            return zs_train_agree(run->comm, rc, r);
        }
        rc = zs_ckpt_save(o->save_dir, s + 1, cfg, run->e, &run->place, &r->ckpt);
        if ((rc = zs_train_agree(run->comm, rc == 1 ? 0 : rc, r)))
            return rc;
        if (run->rank_log.log && !o->quiet)
            fprintf(run->rank_log.log, "saved %s/global_step%d\n", o->save_dir, s + 1);
    }
    if (i == r->timeline_step) {
        zs_mem_trace(run->mem, 0);
        size_t nt;
        const zs_mem_event *ev = zs_mem_timeline(run->mem, &nt);
        r->timeline = malloc((nt ? nt : 1) * sizeof *ev);
        if (r->timeline) {
            if (nt)
                memcpy(r->timeline, ev, nt * sizeof *ev);
            r->n_timeline = nt;
        }
    }
    if (run->next_dump < o->n_dump_steps && o->dump_steps[run->next_dump] == s + 1) {
        rc = zs_oracle_dump(run->e, cfg, o->dump_dir, s + 1, &r->info[i], run->rank);
        run->next_dump++;
        if ((rc = zs_train_agree(run->comm, rc, r)))
            return rc;
    }
    if (zs_train_val_source(cfg, o) && !zs_backend_is_phantom(run->be) &&
        ((s + 1) % (o->val_every > 0 ? o->val_every : 10) == 0 || s + 1 == cfg->steps)) {
        double vl;
        zs_eval_score held, test;
        rc = zs_oracle_val_loss(run->val, run->e, cfg, run->rank, &vl, &held, &test);
        if (r->val_loss)
            r->val_loss[i] = vl;
        if (r->test_loss) {
            r->val_accuracy[i] = held.accuracy;
            r->test_loss[i] = test.loss;
            r->test_accuracy[i] = test.accuracy;
            r->val_samples = held.samples;
            r->test_samples = test.samples;
        }
        if ((rc = zs_train_agree(run->comm, rc, r)))
            return rc;
    }
    r->steps = i + 1;
    r->skipped_steps += r->info[i].skipped;
    r->steps_applied += !r->info[i].skipped;
    r->compressed_steps += r->info[i].compressed;
    r->compressed_applied_steps += r->info[i].compressed && !r->info[i].skipped;
    r->local_applied_steps += r->info[i].local_only && !r->info[i].skipped;
    zs_train_log_step(cfg, &run->rank_log, r, s, i);
    return 0;
}

/* Each MoE block's routing in the last micro-batch into r->moe, in block
 * order: this rank's blocks, and with a pipeline every stage's, gathered
 * over the pipeline group to its first rank (rank 0's group gives the
 * report's). Collective over the pipeline group. */
static int zs_train_moe_routing(zs_train_run *run)
{
    zs_train_result *r = run->r;
    int L = run->cfg->model.n_layer, P = run->pp ? zs_comm_size(run->pp) : 1;
    _Static_assert(sizeof(zs_moe_stats) % sizeof(uint64_t) == 0, "whole words");
    size_t words = sizeof(zs_moe_stats) / sizeof(uint64_t) * (size_t)L;
    zs_moe_stats *mine = calloc((size_t)L, sizeof *mine); /* experts 0: not this rank's */
    zs_moe_stats *all = calloc((size_t)L * (size_t)P, sizeof *all);
    r->moe = calloc((size_t)L, sizeof *r->moe);
    r->moe_block = calloc((size_t)L, sizeof(int));
    int rc = !mine || !all || !r->moe || !r->moe_block || words > INT_MAX;
    for (int l = 0; !rc && l < L; l++)
        if (zs_engine_moe_stats(run->e, l, &mine[l]))
            mine[l].experts = 0;
    if (run->pp) { /* every rank of the group takes part, whatever rc is */
        zs_comm_set_context(run->pp, ZS_PHASE_REPORT, -1);
        int grc = zs_comm_gather_root(run->pp, mine, (int)words, all, ZS_CT_U64);
        rc = rc ? rc : grc;
    } else if (!rc) {
        memcpy(all, mine, (size_t)L * sizeof *mine);
    }
    for (int l = 0; !rc && l < L; l++)
        for (int s = 0; s < P; s++)
            if (all[(size_t)s * L + l].experts > 0) {
                r->moe[r->moe_n] = all[(size_t)s * L + l];
                r->moe_block[r->moe_n++] = l;
                break;
            }
    free(mine);
    free(all);
    return rc == 1 ? zs_error_set("out of host memory for the routing statistics") : rc;
}

/* After the steps: --export, the final hash, MoE routing, memory and the
 * tables gathered to rank 0 (comms, checkpoint I/O, the trace). */
static int zs_train_collect(zs_train_run *run, size_t rec0, double trace_t0)
{
    const zs_run_config *cfg = run->cfg;
    const zs_train_options *o = run->o;
    zs_train_result *r = run->r;
    zs_engine *e = run->e;
    int rc;
    if (o->export_path && !zs_backend_is_phantom(run->be)) {
        rc = zs_oracle_export(e, cfg, o->export_path, o->export_format,
                              o->export_shard_bytes, run->rank);
        if ((rc = zs_train_agree(run->comm, rc, r)))
            return rc;
    }
    rc = zs_engine_param_hash(e, r->param_hash);
    /* routing statistics (not in a phantom run: its gates hold nothing) */
    if (cfg->model.moe_experts > 0 && zs_engine_acts(e) && !r->moe &&
        !zs_backend_is_phantom(run->be)) {
        int prc = zs_train_moe_routing(run);
        if (!rc)
            rc = prc;
    }
    r->live_params_peak = zs_engine_live_params_peak(e);
    zs_engine_overlap(e, &r->nb_span_s, &r->nb_wait_s);
    zs_mem_get_stats(run->mem, &r->mem);
    for (int t = 0; t < ZS_MEM_NTIERS; t++)
        zs_mem_get_tier_stats(run->mem, (zs_mem_tier)t, &r->tier_mem[t]);
    if (!rc && run->rank == 0)
        rc = zs_train_comm_table(run->comm, r);
    if (!rc && (o->save_dir || o->resume))
        rc = zs_train_gather_ckpt(run->comm, e, r);
    if (o->trace) { /* every rank takes part, whatever rc is, then agrees */
        int trc = zs_trace_collect(run->comm, e, rec0, trace_t0, r);
        if (!rc)
            rc = trc;
        rc = zs_train_agree(run->comm, rc, r);
    }
    return rc;
}

/* One rank's run on backend be: engine, steps, hash, this rank's memory
 * statistics in r->mem and, on rank 0, the comms table. Collective over
 * comm (a phantom comm makes it one simulated rank). */
int zs_train_rank(const zs_run_config *cfg, const zs_train_options *o, zs_comm_t comm,
                  zs_comm_t dp, zs_comm_t tp, zs_comm_t pp, zs_comm_t ep, zs_comm_t edp,
                  zs_comm_t cp, zs_backend_t be, const zs_step_shape *shape,
                  zs_train_result *r)
{
    zs_train_run run = {.cfg = cfg, .o = o, .rank_log = *o, .comm = comm, .dp = dp, .cp = cp,
                        .pp = pp,
                        .rank = zs_comm_rank(comm), .be = be, .r = r};
    run.rank_log.log = run.rank == 0 ? o->log : NULL;
    run.mem = zs_mem_create(be, o->device_memory, run.rank);
    if (run.mem)
        zs_mem_set_capacity(run.mem, ZS_TIER_HOST, o->host_memory);
    r->world_size = zs_comm_size(comm);
    r->dp_size = zs_comm_size(dp);
    r->tp_size = cfg->tp > 1 ? cfg->tp : 1;
    r->pp_size = cfg->pp > 1 ? cfg->pp : 1;
    r->hierarchical = cfg->hierarchical;
    r->hpz = cfg->stage == 3 && cfg->hpz_partition_size > 1 ? cfg->hpz_partition_size : 0;
    run.place = (zs_ckpt_place){.world = comm, .tp_rank = cfg->tp > 1 ? cfg->model.tp_rank : 0,
                                .tp_size = r->tp_size, .dp_rank = zs_comm_rank(dp),
                                .dp_size = r->dp_size};
    int rc = zs_train_open(&run, tp, pp, ep, edp, shape);
    if (!rc)
        rc = zs_train_resume(&run);
    if (!rc)
        rc = zs_train_predict(&run);
    if (!rc) {
        if (run.rank == 0)
            zs_train_predict_per_rank(&run);
        zs_train_record_sizes(&run);
        size_t rec0 = 0;
        if (o->trace) {
            zs_comm_records(comm, &rec0);
            zs_engine_set_trace(run.e, 1);
        }
        double t0 = zs_train_now(), trace_t0 = zs_clock();
        r->timeline_step = run.n > 1 ? 1 : 0; /* of this run's steps */
        for (int i = 0; i < run.n && !o->no_steps && !rc; i++)
            rc = zs_train_one_step(&run, i);
        if (!rc) {
            r->seconds = zs_train_now() - t0;
            rc = zs_train_collect(&run, rec0, trace_t0);
        }
    }
    zs_oracle_val_destroy(run.val);
    zs_ckpt_close(run.ck);
    zs_engine_destroy(run.e);
    if (run.mem)
        zs_mem_destroy(run.mem);
    return rc;
}

/* Expert parallelism: this rank's expert-parallel group (DeepSpeed's
 * groups, zs_mesh_ep_group_ranks), a split of comm tagged ep, and its rank
 * in it in local->model.moe_ep_rank. */
static int zs_train_ep_group(zs_comm_t comm, const zs_run_config *cfg, int edp, int *index,
                             zs_comm_t *out)
{
    int W = zs_comm_size(comm), me = zs_comm_rank(comm), T = cfg->tp > 1 ? cfg->tp : 1;
    int n = zs_mesh_ep_ngroups(W, T, cfg->pp, cfg->ep, edp);
    int *members = malloc((size_t)zs_mesh_ep_group_size(W, T, cfg->pp, cfg->ep, edp) * sizeof(int));
    if (!members)
        ZS_FAIL("out of host memory for the expert-parallel groups");
    for (int g = 0; g < n; g++) {
        int k = zs_mesh_ep_group_ranks(W, T, cfg->pp, cfg->ep, edp, g, members);
        for (int i = 0; i < k; i++)
            if (members[i] == me) {
                *index = i;
                int rc = zs_comm_split(comm, g, i, k, i, edp ? ZS_GROUP_EDP : ZS_GROUP_EP, out);
                if (!rc)
                    rc = zs_comm_set_world_ranks(*out, members);
                free(members);
                return rc;
            }
    }
    free(members);
    ZS_FAIL("internal: rank %d is in no expert-parallel group of %d", me, cfg->ep);
}

/* ... and its expert-data-parallel group (tagged edp; the ranks of the
 * data-parallel group with the same index in their ep groups), which the
 * engine's DeepSpeed layout reduces the experts over. */
int zs_train_ep_comm(zs_comm_t comm, const zs_run_config *cfg, zs_run_config *local,
                     zs_comm_t *out, zs_comm_t *edp)
{
    int i;
    ZS_TRY(zs_train_ep_group(comm, cfg, 0, &local->model.moe_ep_rank, out));
    return zs_train_ep_group(comm, cfg, 1, &i, edp);
}

/* The data-parallel group's nodes as the communicator finds them (the node
 * map) against the rank equation's (zs_mesh_dp_node_blocks), which the
 * shape's counter and the predictions use: with --ranks-per-node the two
 * must agree. */
static int zs_train_check_nodes(zs_comm_t comm, zs_comm_t dp, const zs_run_config *cfg,
                                const zs_mesh *mesh)
{
    if (cfg->ranks_per_node <= 0)
        return 0;
    int T = cfg->tp > 1 ? cfg->tp : 1, P = cfg->pp > 1 ? cfg->pp : 1;
    zs_mesh_coord me = mesh ? zs_mesh_self(mesh) : (zs_mesh_coord){0, 0, 0};
    int want = zs_mesh_dp_node_blocks(zs_comm_size(comm), T, P, me.tp, me.pp,
                                      cfg->ranks_per_node);
    int got = zs_comm_node_blocks(dp);
    if (want != got)
        ZS_FAIL("internal: the data-parallel group's node map has blocks of %d ranks, the "
                "rank equation %d (--ranks-per-node %d)", got, want, cfg->ranks_per_node);
    return 0;
}

int zs_train(const zs_run_config *cfg, const zs_train_options *o, zs_comm_t comm,
             zs_train_result *r)
{
    memset(r, 0, sizeof *r);
    if (zs_model_check_runnable(&cfg->model)) /* a family with shapes only: phantom runs */
        return zs_train_agree(comm, -1, r);
    zs_comm_set_timeout(comm, cfg->collective_timeout);
    char err[256];
    /* each rank takes the device of its local rank (the CUDA backend: modulo
     * the GPUs it sees); comm stages that device's buffers for MPI */
    zs_backend_t be = zs_backend_init_device(o->backend ? o->backend : "cpu",
                                             zs_comm_local_rank(comm), err, sizeof err);
    if (!be) {
        zs_error_set("%s", err);
        return zs_train_agree(comm, -1, r);
    }
    /* the mesh: the engine runs over the data-parallel group, the model's
     * tensor-parallel collectives over the TP group */
    zs_mesh *mesh = NULL;
    zs_run_config local = *cfg;
    /* the portable backend with deterministic sums: the GPT's tensor-
     * parallel sums as exact sums of fixed slices (docs/portable.md); not
     * with context parallelism (their rows are the whole sequence's). An
     * --exact-slices these do not allow is refused by the compatibility
     * table (rules exact-slices and device+exact-slices) */
    if (cfg->deterministic && cfg->model.kind == ZS_MODEL_GPT && cfg->cp <= 1 &&
        zs_backend_has_exact_sums(be))
        local.model.tp_exact_slices = cfg->exact_slices ? cfg->exact_slices : ZS_TP_EXACT_SLICES;
    int rc = zs_comm_set_ranks_per_node(comm, cfg->ranks_per_node);
    if (!rc && cfg->tp * cfg->pp * cfg->cp > 1) {
        rc = zs_mesh_create_cp(comm, cfg->tp, cfg->pp, cfg->cp, &mesh);
        if (!rc)
            local.model.tp_rank = zs_mesh_self(mesh).tp;
        int data_rank;
        if (!rc) /* context rank: of the combined group's member */
            zs_mesh_cp_split(zs_mesh_self(mesh).dp, cfg->cp, &local.model.cp_rank, &data_rank);
        if (!rc && cfg->pp > 1) /* this rank's pipeline stage */
            rc = zs_pp_stage_config(&local, zs_mesh_self(mesh).pp);
    }
    zs_comm_t dp = mesh ? zs_mesh_comm(mesh, ZS_GROUP_DP) : comm;
    zs_comm_t tp = mesh ? zs_mesh_comm(mesh, ZS_GROUP_TP) : NULL;
    zs_comm_t pp = mesh && cfg->pp > 1 ? zs_mesh_comm(mesh, ZS_GROUP_PP) : NULL;
    zs_comm_t cpc = mesh && cfg->cp > 1 ? zs_mesh_comm(mesh, ZS_GROUP_CP) : NULL;
    zs_comm_t ep = NULL, edp = NULL;
    if (!rc && cfg->ep > 1)
        rc = zs_train_ep_comm(comm, cfg, &local, &ep, &edp);
    if (!rc)
        rc = zs_train_check_nodes(comm, dp, cfg, mesh);
    if (!rc)
        rc = zs_comm_set_hierarchical(dp, cfg->hierarchical);
    if (!rc)
        rc = zs_comm_set_backend(comm, be);
    if (!rc && dp != comm)
        rc = zs_comm_set_backend(dp, be);
    if (!rc && tp)
        rc = zs_comm_set_backend(tp, be);
    if (!rc && pp)
        rc = zs_comm_set_backend(pp, be);
    if (!rc && cpc)
        rc = zs_comm_set_backend(cpc, be);
    if (!rc && ep)
        rc = zs_comm_set_backend(ep, be);
    if (!rc && edp)
        rc = zs_comm_set_backend(edp, be);
    if (!rc) /* after the backend: qwZ needs host buffers */
        rc = zs_comm_set_quantized_weights(dp, cfg->quantized_weights);
    if (!rc && cfg->stage == 3)
        rc = zs_comm_set_hpz(dp, cfg->hpz_partition_size);
    if (!rc)
        rc = zs_comm_set_quantized_gradients(dp, cfg->quantized_gradients);
    if (!zs_train_agree(comm, rc, r)) {
        rc = zs_train_rank(&local, o, comm, dp, tp, pp, ep, edp, cpc, be, NULL, r);
        if (!rc) {
            rc = zs_train_gather_stats(comm, r);
            rc = zs_train_agree(comm, rc, r);
        }
    } else {
        rc = -1;
    }
    if (tp)
        zs_comm_set_backend(tp, NULL);
    if (pp)
        zs_comm_set_backend(pp, NULL);
    if (cpc)
        zs_comm_set_backend(cpc, NULL);
    if (ep) {
        zs_comm_set_backend(ep, NULL);
        zs_comm_free(ep);
    }
    if (edp) {
        zs_comm_set_backend(edp, NULL);
        zs_comm_free(edp);
    }
    if (dp != comm)
        zs_comm_set_backend(dp, NULL);
    zs_comm_set_backend(comm, NULL);
    zs_comm_set_hierarchical(dp, 0);
    zs_comm_set_hpz(dp, 0);
    zs_comm_set_quantized_gradients(dp, 0);
    zs_mesh_free(mesh);
    zs_backend_release(be);
    return rc;
}

void zs_train_result_free(zs_train_result *r)
{
    free(r->val_loss);
    r->val_loss = NULL;
    free(r->val_accuracy);
    free(r->test_loss);
    free(r->test_accuracy);
    r->val_accuracy = r->test_loss = r->test_accuracy = NULL;
    free(r->moe);
    free(r->moe_block);
    r->moe = NULL;
    r->moe_block = NULL;
    r->moe_n = 0;
    free(r->trace_json);
    r->trace_json = NULL;
    free(r->info);
    free(r->hashes);
    free(r->ckpt_ranks);
    free(r->ckpt_pred);
    free(r->tier_peaks);
    r->tier_peaks = NULL;
    free(r->nb);
    r->nb = NULL;
    free(r->node_of);
    r->node_of = NULL;
    free(r->node_cross);
    r->node_cross = NULL;
    free(r->dp_node_ranks);
    r->dp_node_ranks = NULL;
    r->ckpt_ranks = NULL;
    r->ckpt_pred = NULL;
    free(r->peaks);
    free(r->total_peaks);
    free(r->at_peak);
    free(r->phase_peaks);
    free(r->comm);
    free(r->comm_group);
    r->comm_group = NULL;
    free(r->comm_rows);
    free(r->timeline);
    free(r->a2a_pred);
    r->a2a_pred = NULL;
    free(r->qgz_pred);
    r->qgz_pred = NULL;
    free(r->h2d_pred);
    r->h2d_pred = NULL;
    free(r->pp_pred);
    r->pp_pred = NULL;
    r->at_peak = NULL;
    r->phase_peaks = NULL;
    r->comm = NULL;
    r->comm_rows = NULL;
    r->timeline = NULL;
    r->info = NULL;
    r->hashes = NULL;
    r->peaks = NULL;
    r->total_peaks = NULL;
}
