/* zerosim — the JSON report: the run, its steps, each rank's memory and
 * traffic (a row per class of ranks with the same figures, or per rank),
 * then the outputs. */
#include "build-config.h"
#include "report_impl.h"
#include "zerosim/error.h"
#include "zerosim/optim.h"
#include "zerosim/predict.h"
#include "zerosim/program.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/resource.h>

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

/* The rows of one table, made by row (rank q's figures, without "rank"):
 * a row per class of ranks with the same figures, made from its first
 * rank ("ranks" as ranges and "rank_count" first), or a row for every
 * rank made from it alone ("rank" first, then "node" with with_node), so
 * that the two forms are made independently. NULL out of memory. */
typedef json_t *(*zs_json_rank_fn)(const zs_train_result *r, int q, int has_tiers);

static json_t *zs_report_json_classes(const zs_train_result *r, zs_rank_figures kind,
                                      int has_tiers, zs_json_rank_fn row, json_t *list)
{
    zs_rank_classes c;
    if (zs_rank_classes_build(&c, r, kind, has_tiers, 0)) {
        json_decref(list);
        return NULL;
    }
    int bad = 0;
    for (int k = 0; !bad && k < c.n_classes; k++) {
        char *ranks = zs_rank_classes_ranges(&c, k, 0);
        json_t *o = ranks ? json_pack("{s:s, s:i}", "ranks", ranks, "rank_count", c.count[k])
                          : NULL;
        json_t *figures = o ? row(r, c.first[k], has_tiers) : NULL;
        free(ranks);
        if (!figures || json_object_update(o, figures)) { /* out of memory */
            json_decref(o);
            bad = 1;
        } else {
            bad = json_array_append_new(list, o) != 0; /* takes o, even on failure */
        }
        json_decref(figures);
    }
    zs_rank_classes_free(&c);
    if (bad) {
        json_decref(list);
        return NULL;
    }
    return list;
}

static json_t *zs_report_json_ranks(const zs_train_result *r, zs_rank_figures kind,
                                    int has_tiers, int by_class, int with_node,
                                    zs_json_rank_fn row)
{
    json_t *list = json_array();
    if (!list || by_class)
        return list ? zs_report_json_classes(r, kind, has_tiers, row, list) : NULL;
    for (int q = 0; q < r->world_size; q++) {
        json_t *o = with_node ? json_pack("{s:i, s:i}", "rank", q, "node",
                                          r->node_of ? r->node_of[q] : 0)
                              : json_pack("{s:i}", "rank", q);
        json_t *figures = o ? row(r, q, has_tiers) : NULL;
        int bad = !figures || json_object_update(o, figures);
        if (bad)
            json_decref(o);
        else
            bad = json_array_append_new(list, o) != 0;
        json_decref(figures);
        if (bad) {
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

static json_t *zs_report_pipeline_rank(const zs_train_result *r, int q, int has_tiers)
{
    (void)has_tiers;
    double w, t;
    zs_report_pp_idle(r, q, &w, &t);
    const zs_prediction *pr = zs_report_pred_of(r, q);
    return json_pack("{s:i, s:i, s:i, s:o, s:o, s:o}", "stage", zs_report_stage_of(r, q),
                     "activation_slots", pr->act_slots, "in_flight_max", pr->in_flight,
                     "recv_wait_seconds", zs_json_real(w), "step_seconds", zs_json_real(t),
                     "idle_fraction", zs_json_real(t > 0 ? w / t : NAN));
}

static json_t *zs_report_pipeline(const zs_run_config *cfg, const zs_train_result *r,
                                  int by_class)
{
    json_t *ranks = zs_report_json_ranks(r, ZS_FIGURES_PIPELINE, 0, by_class, 0,
                                         zs_report_pipeline_rank);
    if (!ranks)
        return NULL;
    return json_pack("{s:i, s:s, s:i, s:i, s:o, s:o}", "stages", cfg->pp, "schedule",
                     zs_pp_schedule_name(cfg->pp_schedule), "micro_batches", cfg->grad_accum,
                     "virtual_stages", zs_report_pp_chunks(cfg), "ideal_bubble_fraction",
                     zs_json_real(zs_report_pp_ideal(cfg)), "ranks", ranks);
}

/* Rank q's memory: each category (the optimizer's three inside), the
 * total, the mix at its peak, the peaks by phase, the tiers (offload). */
static json_t *zs_report_memory_rank(const zs_train_result *r, int q, int has_tiers)
{
    json_t *cats = json_object();
    for (size_t k = 0; k < zs_report_n_mem_rows; k++) {
        if (!strncmp(zs_report_mem_rows[k].name, "optimizer_", 10))
            continue; /* inside "optimizer" below */
        int has;
        size_t pred = zs_report_row_pred(r, q, k, &has);
        json_t *o = json_pack("{s:I, s:o}", "peak_bytes", (json_int_t)zs_report_row_peak(r, q, k),
                              "predicted_bytes", has ? json_integer((json_int_t)pred) : json_null());
        if (!strcmp(zs_report_mem_rows[k].name, "optimizer")) {
            static const char *const sub[3] = {"master", "m", "v"};
            for (int i = 0; i < 3; i++) {
                int c = zs_report_mem_rows[k].cats[i];
                json_object_set_new(o, sub[i], json_pack("{s:I, s:I}", "peak_bytes",
                                    (json_int_t)r->peaks[q][c], "predicted_bytes",
                                    (json_int_t)zs_report_pred_of(r, q)->bytes[c]));
            }
        }
        json_object_set_new(cats, zs_report_mem_rows[k].name, o);
    }
    json_t *mix = json_object(), *phases = json_object();
    for (int c = 0; c < ZS_MEM_NCAT; c++)
        if (c != ZS_MEM_QUANTIZED || r->at_peak[q][c])
            json_object_set_new(mix, zs_mem_category_name((zs_mem_category)c),
                                json_integer((json_int_t)r->at_peak[q][c]));
    for (int p = 0; p < ZS_MEM_NPHASES; p++)
        json_object_set_new(phases, zs_mem_phase_name((zs_mem_phase)p),
                            json_integer((json_int_t)r->phase_peaks[q][p]));
    json_t *rank = json_pack("{s:o, s:I, s:o, s:o}", "categories", cats,
                             "total_peak_bytes", (json_int_t)r->total_peaks[q],
                             "at_total_peak", mix, "peak_by_phase", phases);
    if (rank && has_tiers) { /* offload: the host and nvme tiers */
        json_t *tiers = json_object();
        for (int t = ZS_TIER_HOST; t < ZS_MEM_NTIERS; t++) {
            json_t *tc = json_object();
            for (int c = 0; c < ZS_MEM_NCAT; c++)
                if (r->tier_peaks[q][t][c] || zs_report_pred_of(r, q)->tier_bytes[t][c])
                    json_object_set_new(tc, zs_mem_category_name((zs_mem_category)c),
                                        json_pack("{s:I, s:I}", "peak_bytes",
                                                  (json_int_t)r->tier_peaks[q][t][c],
                                                  "predicted_bytes",
                                                  (json_int_t)zs_report_pred_of(r, q)->tier_bytes[t][c]));
            json_object_set_new(tiers, zs_mem_tier_name((zs_mem_tier)t), tc);
        }
        json_object_set_new(rank, "tiers", tiers);
    }
    return rank;
}

/* The memory rows; per rank, rank 0's adds the process's peak RSS
 * (before "tiers"; per class it is the report's "peak_rss_bytes"). */
static json_t *zs_report_memory(const zs_train_result *r, int has_tiers, int by_class)
{
    json_t *list = zs_report_json_ranks(r, ZS_FIGURES_MEMORY, has_tiers, by_class, 0,
                                        zs_report_memory_rank);
    json_t *rank0 = list && !by_class ? json_array_get(list, 0) : NULL;
    if (rank0) {
        json_t *tiers = json_incref(json_object_get(rank0, "tiers"));
        json_object_del(rank0, "tiers");
        json_object_set_new(rank0, "peak_rss_bytes", json_integer((json_int_t)zs_report_peak_rss()));
        if (tiers)
            json_object_set_new(rank0, "tiers", tiers);
    }
    return list;
}

/* Rank q's traffic: each op over the run (and by phase), each group's. */
static json_t *zs_report_comm_rank(const zs_train_result *r, int q, int has_tiers)
{
    (void)has_tiers;
    int N = r->world_size;
    json_t *ops = json_object();
    for (int o = 0; o < ZS_OP_NOPS; o++) {
        double calls, secs, api, b = zs_report_op_bytes(r, q, o, &calls, &secs, &api);
        double pb = zs_report_op_pred(r, q, o);
        json_t *phases = json_object();
        for (int p = 0; p < ZS_PHASE_NPHASES; p++)
            if (r->comm[q][o][p].calls > 0)
                json_object_set_new(phases, zs_comm_phase_name((zs_comm_phase)p),
                                    json_pack("{s:f, s:f, s:f}", "bytes", r->comm[q][o][p].wire,
                                              "api_bytes", r->comm[q][o][p].bytes, "calls",
                                              r->comm[q][o][p].calls));
        double ib = zs_report_op_inter(r, q, o), ipb = zs_report_op_pred_inter(r, q, o);
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
    return json_pack("{s:o, s:o}", "ops", ops, "by_group", groups);
}

/* Per class: each node's ranks, as ranges (a row per rank names its node). */
static json_t *zs_report_rank_nodes(const zs_train_result *r)
{
    zs_rank_classes c;
    if (zs_rank_classes_build(&c, r, ZS_FIGURES_NODE, 0, 0))
        return NULL;
    json_t *list = json_array();
    for (int k = 0; list && k < c.n_classes; k++) {
        char *ranks = zs_rank_classes_ranges(&c, k, 0);
        int q = c.first[k];
        if (!ranks || json_array_append_new(list, json_pack("{s:i, s:s}", "node",
                                                            r->node_of ? r->node_of[q] : 0,
                                                            "ranks", ranks))) {
            json_decref(list);
            list = NULL;
        }
        free(ranks);
    }
    zs_rank_classes_free(&c);
    return list;
}

/* Checkpoint files per rank: bytes written (tensor data against the
 * prediction, saves x the shard's states) and read. */
static json_t *zs_report_ckpt_rank(const zs_train_result *r, int q, int has_tiers)
{
    (void)has_tiers;
    const zs_ckpt_io *c = &r->ckpt_ranks[q];
    return json_pack("{s:i, s:I, s:I, s:I, s:I, s:I}", "saves", c->saves, "bytes_written",
                     (json_int_t)c->written, "tensor_bytes_written",
                     (json_int_t)c->tensor_written, "tensor_bytes_written_predicted",
                     (json_int_t)(r->ckpt_pred[q] * (uint64_t)c->saves), "bytes_read",
                     (json_int_t)c->read, "tensor_bytes_read", (json_int_t)c->tensor_read);
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
static json_t *zs_report_comm_time_rank(const zs_train_result *r, int q, int has_tiers)
{
    (void)has_tiers;
    double tot, hid;
    zs_report_comm_time(r, q, &tot, &hid);
    return json_pack("{s:o, s:o, s:o}", "total_s_per_step", zs_json_real(tot / r->steps),
                     "hidden_s_per_step", zs_json_real(hid / r->steps), "exposed_s_per_step",
                     zs_json_real((tot - hid) / r->steps));
}

/* root[key] = rows, the rows of a table; *bad = 1 when they are missing
 * (out of memory). */
static void zs_report_json_set_rows(json_t *root, const char *key, json_t *rows, int *bad)
{
    if (!rows || json_object_set_new(root, key, rows))
        *bad = 1;
}

/* The run's outputs after its tables: where it resumed from, checkpoint
 * I/O, the resolved configuration, each step's hash, the data and the
 * held-out losses at the steps they were evaluated. */
static void zs_report_json_outputs(json_t *root, const zs_run_config *cfg,
                                   const zs_train_result *r, int by_class, int *bad)
{
    if (r->resumed_from[0]) {
        json_object_set_new(root, "resumed_from", json_string(r->resumed_from));
        json_object_set_new(root, "resumed_param_hash", json_string(r->resumed_hash));
    }
    if (r->ckpt_ranks) /* files: beside the device memory, not in it */
        zs_report_json_set_rows(root, "checkpoint_io",
                                zs_report_json_ranks(r, ZS_FIGURES_CKPT, 0, by_class, 0,
                                                     zs_report_ckpt_rank),
                                bad);
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
            if (!isnan(r->val_loss[s]) && r->test_loss) /* an image set: accuracy too */
                json_array_append_new(v, json_pack("{s:i, s:o, s:o, s:o, s:o}", "step",
                                                   r->first_step + s + 1, "loss",
                                                   zs_json_real(r->val_loss[s]), "accuracy",
                                                   zs_json_real(r->val_accuracy[s]), "test_loss",
                                                   zs_json_real(r->test_loss[s]), "test_accuracy",
                                                   zs_json_real(r->test_accuracy[s])));
            else if (!isnan(r->val_loss[s]) && r->val_byte_level) /* bytes of text */
                json_array_append_new(v, json_pack("{s:i, s:o, s:o}", "step",
                                                   r->first_step + s + 1, "loss",
                                                   zs_json_real(r->val_loss[s]), "bits_per_byte",
                                                   zs_json_real(r->val_loss[s] / M_LN2)));
            else if (!isnan(r->val_loss[s])) /* evaluated */
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

/* Memory and traffic: a row per class, with the process's peak RSS and
 * each node's ranks beside (by_class), or a row per rank. */
static void zs_report_json_tables(json_t *root, const zs_run_config *cfg,
                                  const zs_train_result *r, int by_class, int *bad)
{
    int has_tiers = zs_report_has_tiers(r);
    if (by_class) {
        json_object_set_new(root, "peak_rss_bytes", json_integer((json_int_t)zs_report_peak_rss()));
        zs_report_json_set_rows(root, "rank_nodes", zs_report_rank_nodes(r), bad);
    }
    zs_report_json_set_rows(root, "memory", zs_report_memory(r, has_tiers, by_class), bad);
    zs_report_json_set_rows(root, "comm",
                            zs_report_json_ranks(r, ZS_FIGURES_COMM, has_tiers, by_class, 1,
                                                 zs_report_comm_rank),
                            bad);
    if (r->pp_pred && r->steps > 0)
        zs_report_json_set_rows(root, "pipeline", zs_report_pipeline(cfg, r, by_class), bad);
}

/* The keys in the order a reader meets them: the run, its steps, memory
 * and traffic, then the outputs. */
int zs_report_write_json(const char *path, const zs_run_config *cfg, const zs_train_result *r,
                         zs_report_rows rows)
{
    int by_class = zs_report_by_class(r, rows), bad = 0;
    zs_report_steps st;
    zs_report_json_steps(r, &st);
    json_t *root = json_pack(
        "{s:s, s:i, s:s, s:I, s:i, s:i, s:s, s:i, s:o, s:s, s:s, s:o}",
        "zerosim_version", PACKAGE_VERSION,
        "report_version", ZS_REPORT_VERSION,
        "rank_rows", by_class ? "classes" : "per_rank",
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
    json_object_set_new(root, "optimizer", json_string(zs_optim_name(cfg->optimizer)));
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
    zs_report_json_tables(root, cfg, r, by_class, &bad);
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
        zs_report_json_set_rows(root, "comm_time",
                                zs_report_json_ranks(r, ZS_FIGURES_COMM_TIME, 0, by_class, 0,
                                                     zs_report_comm_time_rank),
                                &bad);
    zs_report_json_outputs(root, cfg, r, by_class, &bad);
    if (bad) {
        json_decref(root);
        ZS_FAIL("out of host memory writing the report %s", path);
    }
    return zs_report_json_save(path, root);
}

int zs_report_write_trace(const char *path, const zs_train_result *r)
{
    if (!r->trace_json)
        ZS_FAIL("no trace was recorded for %s", path);
    return zs_report_write_text(path, r->trace_json, strlen(r->trace_json));
}
