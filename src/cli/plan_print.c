/* zerosim — the `plan` command's output (src/cli/plan_cmd.c computes the
 * plans): the text of one plan, the table of a sweep, the JSON object of a
 * plan or a sweep, and the bytes of the weights held for inference
 * (--weight-format). */
#include "plan_cmd_impl.h"
#include "zerosim/error.h"
#include "zerosim/quant.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static double gb(double bytes) { return bytes / 1e9; }

static void zs_plan_human_size(char *buf, size_t n, double count)
{
    if (count >= 1e12)
        snprintf(buf, n, "%.3gT", count / 1e12);
    else if (count >= 1e9)
        snprintf(buf, n, "%.3gB", count / 1e9);
    else if (count >= 1e6)
        snprintf(buf, n, "%.3gM", count / 1e6);
    else
        snprintf(buf, n, "%.0f", count);
}

/* The ring factor (N-1)/N of a group of N ranks (0 for one). */
static double zs_plan_ring(int n) { return n > 1 ? (n - 1.0) / n : 0.0; }

/* The model, the setup and the cluster: the plan's first lines. */
static void zs_plan_print_setup(FILE *f, const zs_plan_input *in, const zs_plan_result *r)
{
    const zs_run_config *c = &in->cfg;
    char h[32];
    zs_plan_human_size(h, sizeof h, (double)r->num_params);
    fprintf(f, "model: %zu parameters (%s)", r->num_params, h);
    if (in->has_arch && c->model.kind == ZS_MODEL_LLAMA)
        fprintf(f, ", Llama: %d layers, hidden %d, %d heads, %d key/value heads, intermediate "
                "%d, vocab %d, seq %d%s%s", c->model.n_layer, c->model.n_embd, c->model.n_head,
                c->model.n_kv_head, c->model.ffn_hidden, c->model.vocab, c->model.seq_len,
                c->model.tie_embeddings ? ", tied head" : "",
                c->model.qkv_bias ? ", q/k/v biases" : "");
    else if (in->has_arch)
        fprintf(f, ", GPT: %d layers, hidden %d, %d heads, vocab %d, seq %d", c->model.n_layer,
                c->model.n_embd, c->model.n_head, c->model.vocab, c->model.seq_len);
    if (in->has_arch && c->model.moe_experts > 0) {
        size_t ex = zs_model_count_expert_params(&c->model);
        fprintf(f, "; mixture of experts: %d experts in %d of %d blocks, top-%d, %zu dense + %zu "
                "expert parameters", c->model.moe_experts, c->model.n_layer / c->model.moe_every,
                c->model.n_layer, c->model.moe_top_k, r->num_params - ex, ex);
    }
    if (in->convention == ZS_PLAN_ZEROSIM)
        fprintf(f, "; padded to %zu, shard %zu", r->padded, r->shard);
    fprintf(f, "\nsetup: ZeRO stage %d, %s parameters, %s gradients, %s, micro-batch %d x "
            "grad-accum %d%s, convention %s\n", c->stage, zs_dtype_name(c->precision),
            zs_dtype_name(in->grad_precision), c->optimizer == ZS_OPT_ADAMW ? "AdamW" : "SGD",
            c->micro_batch, c->grad_accum,
            c->stage <= 1 && c->grad_reduce == ZS_GRAD_REDUCE_STEP ? ", gradients reduced once per step" : "",
            zs_plan_convention_name(in->convention));
    if (c->cp > 1)
        fprintf(f, "cluster: %d data-parallel x %d context-parallel x %d tensor-parallel x %d "
                   "pipeline = %d devices, %d per node", in->dp, c->cp, c->tp, c->pp,
                in->dp * c->cp * c->tp * c->pp, in->devices_per_node);
    else if (c->pp > 1)
        fprintf(f, "cluster: %d data-parallel x %d tensor-parallel x %d pipeline = %d devices, "
                   "%d per node", in->dp, c->tp, c->pp, in->dp * c->tp * c->pp,
                in->devices_per_node);
    else if (c->tp > 1)
        fprintf(f, "cluster: %d data-parallel x %d tensor-parallel = %d devices, %d per node",
                in->dp, c->tp, in->dp * c->tp, in->devices_per_node);
    else
        fprintf(f, "cluster: %d device%s, %d per node", in->dp, in->dp == 1 ? "" : "s",
                in->devices_per_node);
    if (in->device_memory)
        fprintf(f, ", %.2f GB (%.2f GiB) each", gb((double)in->device_memory),
                (double)in->device_memory / 1073741824.0);
    if ((c->tp > 1 || c->pp > 1) && r->device_params)
        fprintf(f, "\nparameters per device: at most %zu (%.2f GB in %s), the TP shard of %s",
                r->device_params, gb((double)r->device_params * zs_dtype_size(c->precision)),
                zs_dtype_name(c->precision), c->pp > 1 ? "a stage's units" : "the model");
}

/* The table of bytes per device by category, and the pipeline's stages. */
static void zs_plan_print_memory(FILE *f, const zs_plan_input *in, const zs_plan_result *r)
{
    const zs_run_config *c = &in->cfg;
    fprintf(f, "\n\nmemory per device     %20s %12s\n", "bytes", "GB");
    for (int k = 0; k < ZS_MEM_NCAT; k++) {
        const char *name = zs_mem_category_name((zs_mem_category)k);
        if (k == ZS_MEM_QUANTIZED && !(r->has[k] && r->bytes[k] > 0))
            continue; /* training holds none; inference with quantized weights only */
        if (r->has[k])
            fprintf(f, "  %-19s %20.0f %12.3f\n", name, r->bytes[k], gb(r->bytes[k]));
        else if (k == ZS_MEM_ACTIVATIONS || k == ZS_MEM_CHECKPOINTS)
            fprintf(f, "  %-19s %33s\n", name, "not modelled (give --arch gpt)");
        else
            fprintf(f, "  %-19s %33s\n", name, "not modelled");
    }
    fprintf(f, "  %-19s %20.0f %12.3f\n", "total", r->total, gb(r->total));
    if (in->convention == ZS_PLAN_ZEROSIM && c->stage == 3)
        fprintf(f, "  (stage 3 holds %zu live gathered parameters%s)\n", r->live_params,
                in->has_arch ? "" : in->largest_layer ? ": --largest-layer"
                                                      : ": give --largest-layer to count them");
    if (r->cp > 1 && c->cp_attention == ZS_CP_ULYSSES)
        fprintf(f, "context parallelism: each sequence over %d devices (Ulysses: all-to-alls of "
                   "the heads); all-to-all per step: %.0f bytes sent to the others\n", r->cp,
                r->cp_a2a_bytes);
    else if (r->cp > 1)
        fprintf(f, "context parallelism: each sequence over %d devices (ring attention); point "
                   "to point per step: %.0f bytes sent, as many received\n", r->cp,
                r->cp_ring_bytes);
    if (r->pp > 1) {
        int il = c->pp_schedule == ZS_PP_INTERLEAVED;
        if (il)
            fprintf(f, "pipeline: %d stages (interleaved, %d model chunks a rank); the table is "
                       "stage %d's, the most loaded; totals by stage (GB):",
                    r->pp, c->virtual_stages, r->pp_stage);
        else
            fprintf(f, "pipeline: %d stages (%s, %s); the table is stage %d's, the most loaded; "
                       "totals by stage (GB):", r->pp, zs_pp_schedule_name(c->pp_schedule),
                    zs_pp_partition_name(c->pp_partition), r->pp_stage);
        for (int s = 0; s < r->pp && s < ZS_PLAN_PP_SHOWN; s++)
            fprintf(f, " %.3f", gb(r->pp_stage_total[s]));
        fprintf(f, "%s\n  parameters per device by stage:", r->pp > ZS_PLAN_PP_SHOWN ? " ..." : "");
        for (int s = 0; s < r->pp && s < ZS_PLAN_PP_SHOWN; s++)
            fprintf(f, " %zu", r->pp_stage_params[s]);
        fprintf(f, "%s\n  point to point per step: %.0f bytes sent, %.0f received; ideal bubble "
                   "(P-1)/(%sm+P-1) = %.3f (in the step time's compute)\n",
                r->pp > ZS_PLAN_PP_SHOWN ? " ..." : "", r->pp_send_bytes, r->pp_recv_bytes,
                il ? "v*" : "", r->pp_bubble);
    }
}

/* Whether it fits the device, the largest model that does (--max-model). */
static void zs_plan_print_fit(FILE *f, const zs_plan_input *in, const zs_plan_result *r,
                              int want_max, size_t max_params, int max_layers)
{
    char h[32];
    if (r->fits == 1)
        fprintf(f, "fits: yes, %.3f GB of %.3f GB (%.3f GB free)\n", gb(r->total),
                gb((double)in->device_memory), gb((double)in->device_memory - r->total));
    else if (r->fits == 0)
        fprintf(f, "does not fit: needs %.3f GB, device has %.3f GB (short by %.3f GB)\n",
                gb(r->total), gb((double)in->device_memory),
                gb(r->total - (double)in->device_memory));
    else
        fprintf(f, "fits: unknown (give --device-memory SIZE)\n");
    if (want_max) {
        zs_plan_human_size(h, sizeof h, (double)max_params);
        if (in->has_arch)
            fprintf(f, "largest model that fits: %d layers, %zu parameters (%s)\n", max_layers,
                    max_params, h);
        else
            fprintf(f, "largest model that fits: %zu parameters (%s)\n", max_params, h);
    }
}

/* The host and nvme tiers of an offload, the node's host memory, the
 * transfers; nothing without an offload. */
static void zs_plan_print_offload(FILE *f, const zs_plan_input *in, const zs_plan_result *r)
{
    if (r->host_total > 0 || r->nvme_total > 0) {
        for (int t = ZS_TIER_HOST; t < ZS_MEM_NTIERS; t++) {
            double tot = t == ZS_TIER_HOST ? r->host_total : r->nvme_total;
            if (tot <= 0)
                continue;
            fprintf(f, "\n%s memory per device (offload) %9s %12s\n",
                    t == ZS_TIER_HOST ? "host" : "nvme", "bytes", "GB");
            for (int k = 0; k < ZS_MEM_NCAT; k++)
                if (r->tier_bytes[t][k] > 0)
                    fprintf(f, "  %-19s %20.0f %12.3f\n", zs_mem_category_name((zs_mem_category)k),
                            r->tier_bytes[t][k], gb(r->tier_bytes[t][k]));
            fprintf(f, "  %-19s %20.0f %12.3f\n", "total", tot, gb(tot));
        }
        fprintf(f, "host memory per node: %.3f GB (%d devices)", gb(r->host_per_node),
                in->dp < in->devices_per_node ? in->dp : in->devices_per_node);
        if (r->host_fits == 1)
            fprintf(f, "; fits the node's %.3f GB\n", gb((double)in->host_memory));
        else if (r->host_fits == 0)
            fprintf(f, "; does not fit the node's %.3f GB (short by %.3f GB)\n",
                    gb((double)in->host_memory), gb(r->host_per_node - (double)in->host_memory));
        else
            fprintf(f, "; fits: unknown (give --host-memory SIZE per node)\n");
        fprintf(f, "offload traffic per device per step: device to host %.0f bytes, host to "
                "device %.0f bytes", r->d2h_bytes, r->h2d_bytes);
        if (r->nvme_read_bytes > 0)
            fprintf(f, ", nvme read %.0f bytes, written %.0f bytes", r->nvme_read_bytes,
                    r->nvme_write_bytes);
        fprintf(f, "\n");
    }
}

/* The collectives per step and the bytes that cross between nodes. */
static void zs_plan_print_traffic(FILE *f, const zs_plan_input *in, const zs_plan_result *r)
{
    const zs_run_config *c = &in->cfg;
    fprintf(f, "\ntraffic per device per step (ring volume):");
    for (int i = 0; i < r->ncolls; i++)
        fprintf(f, " %s%s %.3f GB (%.0f call%s)%s", zs_coll_kind_name(r->colls[i].kind),
                r->colls[i].link == 1   ? " inside nodes"
                : r->colls[i].link == 2 ? " across nodes"
                                        : "",
                gb((r->colls[i].kind == ZS_COLL_ALLREDUCE ? 2.0 : 1.0) * r->colls[i].bytes *
                   zs_plan_ring(r->colls[i].ranks > 0 ? r->colls[i].ranks : in->dp)),
                r->colls[i].calls, r->colls[i].calls == 1 ? "" : "s",
                i + 1 < r->ncolls ? "," : "");
    fprintf(f, "%s; total %.0f bytes (%.3f GB)\n", r->ncolls ? "" : " none", r->traffic_bytes,
            gb(r->traffic_bytes));
    if (r->zeropp) /* the ledger's count, node by node */
        fprintf(f, "  inter-node (ZeRO++%s%s%s): %.0f bytes per step cross each node's link "
                "(node 0: its %d devices' sends to other nodes)\n",
                in->cfg.quantized_weights ? " qwZ" : "",
                in->cfg.hpz_partition_size > 1 ? " hpZ" : "",
                in->cfg.quantized_gradients ? " qgZ" : "", r->inter_node_bytes,
                in->dp < in->devices_per_node ? in->dp : in->devices_per_node);
    else if (r->mesh_inter)
        fprintf(f, "  inter-node (tp %d x dp %d x pp %d as zerosim mesh lays them, %d per node; "
                "the most loaded stage's devices): the DP ring crosses on %.0f%% of them, the TP "
                "ring on %.0f%%, the pipeline peers on %.0f%%: %.0f bytes per device per step "
                "across (DP %.0f, TP %.0f, PP %.0f), %.0f intra-node\n",
                c->tp > 1 ? c->tp : 1, in->dp, c->pp > 1 ? c->pp : 1, in->devices_per_node,
                100 * r->inter_frac[0], 100 * r->inter_frac[1], 100 * r->inter_frac[2],
                r->inter_node_bytes, r->inter_part[0], r->inter_part[1], r->inter_part[2],
                r->traffic_bytes - r->inter_node_bytes);
    else if (r->hierarchical) /* the ledger's count for the two levels */
        fprintf(f, "  inter-node (hierarchical, %d per node, %d nodes): every device sends "
                "(M-1)/N of each reduce-scatter and allgather across, %.0f bytes per step, and "
                "%.0f intra-node\n", in->devices_per_node, in->dp / in->devices_per_node,
                r->inter_node_bytes, r->traffic_bytes - r->inter_node_bytes);
    else if (in->dp > in->devices_per_node && r->traffic_bytes > 0) /* the ring model of the ledger */
        fprintf(f, "  inter-node (flat ring, %d per node): the last device of each node sends all "
                "of its %.0f bytes across, the others none: %.0f bytes per device on average, "
                "%.0f intra-node\n", in->devices_per_node, r->traffic_bytes,
                r->traffic_bytes / in->devices_per_node,
                r->traffic_bytes - r->traffic_bytes / in->devices_per_node);
    else if (r->traffic_bytes > 0)
        fprintf(f, "  inter-node: none (the %d devices fit in one node)\n", in->dp);
}

/* The step time's sum and the overlap, small collectives and offload in it. */
static void zs_plan_print_steptime(FILE *f, const zs_plan_input *in, const zs_plan_result *r)
{
    const zs_steptime_result *t = &r->time;
    fprintf(f, "step time: compute %.4g s + communication %.4g s", t->compute_s, t->comm_s);
    if (t->scalars_s > 0)
        fprintf(f, " + small collectives %.4g s", t->scalars_s);
    if (t->optimizer_s > 0)
        fprintf(f, " + optimizer %.4g s", t->optimizer_s);
    fprintf(f, " = %.4g s", t->total_s);
    if (t->overlapped && in->overlap)
        fprintf(f, " (overlapped: the larger of the first two)");
    else if (t->overlapped)
        fprintf(f, " (stage 3 with overlap_comm: %.4g s of the communication behind compute)",
                t->comm_hidden_s);
    fputc('\n', f);
    if (t->overlapped && !in->overlap)
        fprintf(f, "  overlap: compute hides the gathers and the reduce-scatters (with a model's "
                "step program: with hpZ the forward's gathers behind the forward's compute "
                "alone; never a micro-batch's last bucket nor an all-to-all)%s\n",
                in->cal.intra_copies_use_cores ? " nor the copies inside a node, which the "
                                                 "ranks' cores make" : "");
    if (t->scalars_s > 0)
        fprintf(f, "  small collectives: the loss, the overflow flag and the gradient norm, 3 per "
                "step at alpha %.3g s each\n", t->alpha_s);
    if (r->d2h_bytes > 0)
        fprintf(f, "  offload: %.4g s in the step (copies at %.4g B/s%s%s), not overlapped\n",
                t->offload_s, in->cal.host_bandwidth,
                r->nvme_read_bytes > 0 ? ", files at the nvme rate" : "",
                in->cfg.offload_optimizer == ZS_OFFLOAD_NONE ? "" /* offload_param alone */
                : in->cal.host_optimizer_elems_per_s > 0
                    ? ", the host optimizer at --host-optimizer-rate"
                    : "; the host optimizer's time is left out: give --host-optimizer-rate");
}

/* What the step time's compute and communication stand on: the kernels,
 * the FLOPs, the links' alpha and beta. */
static void zs_plan_print_steptime_basis(FILE *f, const zs_plan_input *in,
                                         const zs_plan_result *r)
{
    const zs_run_config *c = &in->cfg;
    const zs_steptime_result *t = &r->time;
    if (t->kernels_modelled) {
        static const char *const what[ZS_WORK_NKINDS] = {
            "attention", "GELU", "rest of the blocks", "head", "gradients", "other passes",
            "block quantization"};
        double gemm_s = t->compute_s;
        for (int k = 0; k < ZS_WORK_NKINDS; k++)
            gemm_s -= t->work_s[k];
        fprintf(f, "  compute (kernels as calibrated): GEMMs %.4g s", gemm_s);
        for (int k = 0; k < ZS_WORK_NKINDS; k++)
            if (k != ZS_WORK_QUANT || t->work_s[k] > 0) /* ZeRO++ alone has codecs */
                fprintf(f, ", %s %.4g s", what[k], t->work_s[k]);
        fputc('\n', f);
    }
    if (r->flops_per_step > 0)
        fprintf(f, "  compute: %.4g FLOP per device per step (%.0f tokens x %s%s) at %.4g FLOP/s\n",
                r->flops_per_step, r->tokens_per_step,
                in->has_arch ? (r->recompute ? "(8 Psi + 16 L C T), with recompute"
                                                         : "(6 Psi + 12 L C T)")
                             : "6 Psi",
                r->pp > 1   ? " x the stage's share of Psi / (1 - bubble)"
                : c->tp > 1  ? " x the TP shard's share of Psi"
                             : "",
                in->cal.gemm_flops);
    else
        fprintf(f, "  compute: not modelled (give --seq with --params, or --arch gpt)\n");
    fprintf(f, "  communication: %s link, alpha %.3g s, beta %.4g bytes/s; ring collective "
            "(N-1) alpha + (N-1)/N S/beta per call\n", t->inter_node ? "inter-node" : "intra-node",
            t->alpha_s, t->beta);
    if (t->inter_node && in->cal.inter_link_bandwidth > 0)
        fprintf(f, "  node link: %.4g bytes/s shared by the node's ranks that cross it at once "
                "(s): beta = link / s (flat ring s = 1, a group between nodes s = %d)\n",
                in->cal.inter_link_bandwidth,
                in->devices_per_node < in->dp ? in->devices_per_node : in->dp);
}

void zs_plan_print_text(FILE *f, const zs_plan_input *in, const zs_plan_result *r, int want_max,
                        size_t max_params, int max_layers)
{
    zs_plan_print_setup(f, in, r);
    zs_plan_print_memory(f, in, r);
    zs_plan_print_fit(f, in, r, want_max, max_params, max_layers);
    zs_plan_print_offload(f, in, r);
    zs_plan_print_traffic(f, in, r);
    zs_plan_print_steptime(f, in, r);
    zs_plan_print_steptime_basis(f, in, r);
}

static json_t *zs_json_bytes(double v)
{
    if (v == floor(v) && fabs(v) < 9007199254740992.0)
        return json_integer((json_int_t)v);
    return json_real(v);
}

/* "pipeline": the schedule, the stages' totals and parameters, the
 * point-to-point bytes and the bubble (a plan with --pp). */
static json_t *zs_plan_json_pipeline(const zs_plan_input *in, const zs_plan_result *r)
{
    const zs_run_config *c = &in->cfg;
    json_t *st = json_array(), *sp = json_array();
    for (int s = 0; s < r->pp && s < ZS_PLAN_PP_SHOWN; s++) {
        json_array_append_new(st, zs_json_bytes(r->pp_stage_total[s]));
        json_array_append_new(sp, json_integer((json_int_t)r->pp_stage_params[s]));
    }
    return json_pack(
        "{s:s, s:s, s:i, s:o, s:o, s:o, s:o, s:f}", "schedule",
        zs_pp_schedule_name(c->pp_schedule), "partition", zs_pp_partition_name(c->pp_partition),
        "most_loaded_stage", r->pp_stage, "stage_totals", st, "stage_params", sp,
        "p2p_send_bytes_per_step", zs_json_bytes(r->pp_send_bytes),
        "p2p_recv_bytes_per_step", zs_json_bytes(r->pp_recv_bytes), "ideal_bubble",
        r->pp_bubble);
}

/* "bytes_per_device" and "bytes_per_category" into o. */
static void zs_plan_json_memory(json_t *o, const zs_plan_result *r)
{
    json_t *b = json_object();
    json_object_set_new(b, "params", zs_json_bytes(r->params));
    json_object_set_new(b, "grads", zs_json_bytes(r->grads));
    json_object_set_new(b, "optimizer", zs_json_bytes(r->optimizer));
    json_object_set_new(b, "activations", zs_json_bytes(r->activations));
    json_object_set_new(b, "total", zs_json_bytes(r->total));
    json_object_set_new(o, "bytes_per_device", b);
    json_t *cat = json_object();
    for (int k = 0; k < ZS_MEM_NCAT; k++)
        if (k != ZS_MEM_QUANTIZED || (r->has[k] && r->bytes[k] > 0))
            json_object_set_new(cat, zs_mem_category_name((zs_mem_category)k),
                                r->has[k] ? zs_json_bytes(r->bytes[k]) : json_null());
    json_object_set_new(o, "bytes_per_category", cat);
}

/* "collectives": each collective of a step, its bytes, calls, group and link. */
static json_t *zs_plan_json_collectives(const zs_plan_input *in, const zs_plan_result *r)
{
    json_t *cs = json_array();
    for (int i = 0; i < r->ncolls; i++) {
        json_t *e = json_object();
        json_object_set_new(e, "op", json_string(zs_coll_kind_name(r->colls[i].kind)));
        json_object_set_new(e, "full_bytes", zs_json_bytes(r->colls[i].bytes));
        json_object_set_new(e, "calls", json_real(r->colls[i].calls));
        /* its group and link: "world" (between nodes when the ranks span
         * nodes), "node" (inside one), "nodes" (one rank per node) */
        static const char *const links[] = {"world", "node", "nodes"};
        int lk = r->colls[i].link;
        json_object_set_new(e, "ranks", json_integer(r->colls[i].ranks > 0 ? r->colls[i].ranks
                                                                            : in->dp));
        json_object_set_new(e, "link", json_string(lk >= 0 && lk <= 2 ? links[lk] : "?"));
        /* a linear allgather's busiest node-link direction, over its calls
         * (zs_steptime_coll.link_bytes); absent: equal parts */
        if (r->colls[i].link_bytes > 0)
            json_object_set_new(e, "link_bytes", zs_json_bytes(r->colls[i].link_bytes));
        json_array_append_new(cs, e);
    }
    return cs;
}

/* "offload_optimizer": the host and nvme tiers' bytes, the node's host
 * memory and the transfers of an offload. */
static json_t *zs_plan_json_offload(const zs_plan_input *in, const zs_plan_result *r)
{
    const zs_run_config *c = &in->cfg;
    json_t *off = json_object(), *tiers = json_object();
    for (int t = ZS_TIER_HOST; t < ZS_MEM_NTIERS; t++) {
        json_t *tc = json_object();
        for (int k = 0; k < ZS_MEM_NCAT; k++)
            if (r->tier_bytes[t][k] > 0)
                json_object_set_new(tc, zs_mem_category_name((zs_mem_category)k),
                                    zs_json_bytes(r->tier_bytes[t][k]));
        json_object_set_new(tiers, zs_mem_tier_name((zs_mem_tier)t), tc);
    }
    json_object_set_new(off, "device", json_string(zs_offload_name(c->offload_optimizer)));
    json_object_set_new(off, "bytes_per_device", tiers);
    json_object_set_new(off, "host_bytes_per_node", zs_json_bytes(r->host_per_node));
    json_object_set_new(off, "host_fits",
                        r->host_fits < 0 ? json_null() : json_boolean(r->host_fits));
    json_object_set_new(off, "d2h_bytes_per_step", zs_json_bytes(r->d2h_bytes));
    json_object_set_new(off, "h2d_bytes_per_step", zs_json_bytes(r->h2d_bytes));
    json_object_set_new(off, "nvme_read_bytes_per_step", zs_json_bytes(r->nvme_read_bytes));
    json_object_set_new(off, "nvme_write_bytes_per_step", zs_json_bytes(r->nvme_write_bytes));
    json_object_set_new(off, "offload_s", json_real(r->time.offload_s));
    return off;
}

/* "step_time": its parts and what they stand on. */
static json_t *zs_plan_json_step_time(const zs_plan_input *in, const zs_plan_result *r)
{
    json_t *t = json_object();
    json_object_set_new(t, "compute_s", json_real(r->time.compute_s));
    json_object_set_new(t, "comm_s", json_real(r->time.comm_s));
    json_object_set_new(t, "scalars_s", json_real(r->time.scalars_s));
    json_object_set_new(t, "overlapped", json_boolean(r->time.overlapped));
    json_object_set_new(t, "comm_exposed_s", json_real(r->time.comm_exposed_s));
    json_object_set_new(t, "comm_hidden_s", json_real(r->time.comm_hidden_s));
    json_object_set_new(t, "optimizer_s", json_real(r->time.optimizer_s));
    json_object_set_new(t, "total_s", json_real(r->time.total_s));
    json_object_set_new(t, "flops_per_step", json_real(r->flops_per_step));
    if (r->time.kernels_modelled) { /* seconds per step of each kernel class */
        json_t *w = json_object();
        for (int k = 0; k < ZS_WORK_NKINDS; k++)
            json_object_set_new(w, zs_work_kind_name((zs_work_kind)k),
                                json_real(r->time.work_s[k]));
        json_object_set_new(t, "kernels_s", w);
    }
    json_object_set_new(t, "gemm_flops", json_real(in->cal.gemm_flops));
    json_object_set_new(t, "alpha_s", json_real(r->time.alpha_s));
    json_object_set_new(t, "beta_bytes_per_s", json_real(r->time.beta));
    json_object_set_new(t, "inter_node", json_boolean(r->time.inter_node));
    if (in->cal.inter_link_bandwidth > 0)
        json_object_set_new(t, "inter_link_bandwidth", json_real(in->cal.inter_link_bandwidth));
    return t;
}

static json_t *zs_plan_json(const zs_plan_input *in, const zs_plan_result *r, int want_max,
                            size_t max_params, int max_layers)
{
    const zs_run_config *c = &in->cfg;
    json_t *o = json_object();
    json_object_set_new(o, "params", json_integer((json_int_t)r->num_params));
    json_object_set_new(o, "padded_params", json_integer((json_int_t)r->padded));
    json_object_set_new(o, "dp", json_integer(in->dp));
    json_object_set_new(o, "tp", json_integer(in->cfg.tp > 1 ? in->cfg.tp : 1));
    json_object_set_new(o, "pp", json_integer(r->pp > 1 ? r->pp : 1));
    if (r->device_params)
        json_object_set_new(o, "params_per_device", json_integer((json_int_t)r->device_params));
    if (r->pp > 1)
        json_object_set_new(o, "pipeline", zs_plan_json_pipeline(in, r));
    if (r->cp > 1) { /* context parallelism (written only when on) */
        json_object_set_new(o, "cp", json_integer(r->cp));
        if (c->cp_attention == ZS_CP_ULYSSES)
            json_object_set_new(o, "cp_a2a_send_bytes_per_step", zs_json_bytes(r->cp_a2a_bytes));
        else
            json_object_set_new(o, "cp_ring_send_bytes_per_step",
                                zs_json_bytes(r->cp_ring_bytes));
    }
    json_object_set_new(o, "stage", json_integer(c->stage));
    json_object_set_new(o, "convention", json_string(zs_plan_convention_name(in->convention)));
    json_object_set_new(o, "grad_reduce", json_string(zs_grad_reduce_name(c->grad_reduce)));
    json_object_set_new(o, "precision", json_string(zs_dtype_name(c->precision)));
    json_object_set_new(o, "grad_precision", json_string(zs_dtype_name(in->grad_precision)));
    zs_plan_json_memory(o, r);
    json_object_set_new(o, "activations_modelled", json_boolean(r->activations_modelled));
    if (in->convention == ZS_PLAN_ZEROSIM && c->stage == 3)
        json_object_set_new(o, "live_params", json_integer((json_int_t)r->live_params));
    json_object_set_new(o, "traffic_bytes_per_step", zs_json_bytes(round(r->traffic_bytes)));
    if (r->zeropp)
        json_object_set_new(o, "inter_node_bytes_per_node_per_step",
                            zs_json_bytes(round(r->inter_node_bytes)));
    if (r->hierarchical || r->mesh_inter)
        json_object_set_new(o, "inter_node_bytes_per_device_per_step",
                            zs_json_bytes(round(r->inter_node_bytes)));
    if (r->mesh_inter) {
        static const char *const axis[] = {"dp", "tp", "pp"};
        json_t *parts = json_object(), *fr = json_object();
        for (int a = 0; a < 3; a++) {
            json_object_set_new(parts, axis[a], json_real(r->inter_part[a]));
            json_object_set_new(fr, axis[a], json_real(r->inter_frac[a]));
        }
        json_object_set_new(o, "inter_node_bytes_by_group", parts);
        json_object_set_new(o, "inter_node_share_by_group", fr);
    }
    json_object_set_new(o, "hierarchical", json_boolean(r->hierarchical));
    json_object_set_new(o, "collectives", zs_plan_json_collectives(in, r));
    json_object_set_new(o, "device_memory", in->device_memory
                                                ? json_integer((json_int_t)in->device_memory)
                                                : json_null());
    json_object_set_new(o, "fits", r->fits < 0 ? json_null() : json_boolean(r->fits));
    if (r->host_total > 0 || r->nvme_total > 0)
        json_object_set_new(o, "offload_optimizer", zs_plan_json_offload(in, r));
    if (want_max) {
        json_object_set_new(o, "max_params", json_integer((json_int_t)max_params));
        if (in->has_arch)
            json_object_set_new(o, "max_layers", json_integer(max_layers));
    }
    json_object_set_new(o, "step_time", zs_plan_json_step_time(in, r));
    return o;
}

/* --weight-format: the bytes of the weights an inference holds, from the
 * formula of zs_quant_bits_per_param_limit (the scales of large tensors). */
int zs_plan_print_weights(FILE *f, const zs_plan_input *in, const char *format, int double_quant,
                          size_t psi)
{
    zs_quant_spec q = {0};
    ZS_TRY(zs_quant_format_parse(format, &q.format));
    if (q.format == ZS_QUANT_NONE)
        ZS_FAIL("--weight-format takes int8, int8-zp or nf4");
    q.double_quant = double_quant;
    ZS_TRY(zs_quant_spec_finalize(&q));
    const zs_model_config *m = &in->cfg.model;
    if (in->has_arch && m->moe_experts > 0)
        ZS_FAIL("--weight-format counts dense GPTs only, not --moe-experts %d yet",
                m->moe_experts);
    double lin = in->has_arch ? 12.0 * m->n_layer * (double)m->n_embd * m->n_embd : (double)psi;
    double bits = zs_quant_bits_per_param_limit(&q), other = (double)psi - lin;
    double qb = lin * bits / 8.0, ob = 4.0 * other;
    char d[96];
    zs_quant_spec_describe(&q, d, sizeof d);
    fprintf(f, "\nweights held for inference (%s)  %20s %12s\n", d, "bytes", "GB");
    fprintf(f, "  %-19s %20.0f %12.3f   (%.0f %s x %.4f bits)\n", "quantized_weights", qb,
            gb(qb), lin, in->has_arch ? "linear weights" : "parameters", bits);
    if (other > 0)
        fprintf(f, "  %-19s %20.0f %12.3f   (%.0f embeddings, biases, LayerNorms in fp32)\n",
                "params", ob, gb(ob), other);
    fprintf(f, "  %-19s %20.0f %12.3f   (fp32: %.3f GB, %.1fx)\n", "total", qb + ob, gb(qb + ob),
            gb(4.0 * (double)psi), 4.0 * (double)psi / (qb + ob));
    return 0;
}

int zs_plan_print_json(FILE *f, int nplans, const zs_plan_input *ins, const zs_plan_result *rs,
                       int want_max, const size_t *max_params, const int *max_layers)
{
    json_t *o;
    if (nplans == 1) {
        o = zs_plan_json(&ins[0], &rs[0], want_max, max_params[0], max_layers[0]);
    } else {
        o = json_object();
        json_t *a = json_array();
        for (int i = 0; i < nplans; i++)
            json_array_append_new(a, zs_plan_json(&ins[i], &rs[i], want_max, max_params[i],
                                                  max_layers[i]));
        json_object_set_new(o, "plans", a);
    }
    char *txt = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(o);
    if (!txt)
        ZS_FAIL("out of host memory writing JSON");
    fputs(txt, f);
    fputc('\n', f);
    free(txt);
    return 0;
}

void zs_plan_print_sweep(FILE *f, const zs_plan_input *base, int nplans, const zs_plan_input *ins,
                         const zs_plan_result *rs, int want_max, const size_t *max_params)
{
    char h[32];
    zs_plan_human_size(h, sizeof h, (double)rs[0].num_params);
    fprintf(f, "%zu parameters (%s), %s parameters, %s gradients, convention %s; GB = 1e9 bytes "
            "per device\n", rs[0].num_params, h, zs_dtype_name(base->cfg.precision),
            zs_dtype_name(base->grad_precision), zs_plan_convention_name(base->convention));
    fprintf(f, "%5s %6s %11s %11s %11s %11s %11s %12s %11s %5s%s\n", "stage", "N", "params",
            "grads", "optimizer", "activations", "total", "traffic/step", "step_s", "fits",
            want_max ? "   max_params" : "");
    for (int i = 0; i < nplans; i++) {
        char act[32] = "-";
        if (rs[i].activations_modelled)
            snprintf(act, sizeof act, "%.3f", gb(rs[i].activations));
        fprintf(f, "%5d %6d %11.3f %11.3f %11.3f %11s %11.3f %12.3f %11.4g %5s",
                ins[i].cfg.stage, ins[i].dp, gb(rs[i].params), gb(rs[i].grads),
                gb(rs[i].optimizer), act, gb(rs[i].total), gb(rs[i].traffic_bytes),
                rs[i].time.total_s, rs[i].fits < 0 ? "?" : rs[i].fits ? "yes" : "no");
        if (want_max) {
            zs_plan_human_size(h, sizeof h, (double)max_params[i]);
            fprintf(f, " %12s", h);
        }
        fprintf(f, "\n");
    }
    fprintf(f, "activations: %s; step time: %.4g FLOP/s, alpha/beta %.3g s / %.4g B/s inside a "
            "node, %.3g s / %.4g B/s between nodes, %d devices per node\n",
            rs[0].activations_modelled ? "included" : "not modelled (give --arch gpt)",
            base->cal.gemm_flops, base->cal.intra_latency_s, base->cal.intra_bandwidth,
            base->cal.inter_latency_s, base->cal.inter_bandwidth, base->devices_per_node);
}
