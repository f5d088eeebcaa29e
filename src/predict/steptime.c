/* zerosim — step-time estimate (see zerosim/steptime.h). */
#include "zerosim/steptime.h"
#include "zerosim/error.h"
#include "zerosim/file.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

const char *zs_coll_kind_name(zs_coll_kind k)
{
    static const char *const names[ZS_COLL_NKINDS] = {"reduce_scatter", "allgather", "allreduce",
                                                      "alltoall"};
    return (int)k >= 0 && k < ZS_COLL_NKINDS ? names[k] : "?";
}

const char *zs_work_kind_name(zs_work_kind k)
{
    static const char *const names[ZS_WORK_NKINDS] = {"attention", "gelu", "block_elementwise",
                                                      "head", "grads", "memory_pass",
                                                      "quantize"};
    return (int)k >= 0 && k < ZS_WORK_NKINDS ? names[k] : "?";
}

void zs_steptime_defaults(zs_steptime_calib *c)
{
    *c = (zs_steptime_calib){.gemm_flops = 312e12,
                             .intra_latency_s = 5e-6,
                             .intra_bandwidth = 150e9,
                             .inter_latency_s = 10e-6,
                             .inter_bandwidth = 25e9,
                             .host_bandwidth = 25e9,
                             .nvme_bandwidth = 3e9};
}

static int zs_steptime_check(const char *what, double v, int zero_ok)
{
    if (!isfinite(v) || v < 0 || (!zero_ok && v == 0))
        ZS_FAIL("step time: %s must be a %s number, got %g", what,
                zero_ok ? "non-negative" : "positive", v);
    return 0;
}

int zs_steptime_estimate(const zs_steptime_input *in, zs_steptime_result *out)
{
    const zs_steptime_calib *c = &in->cal;
    *out = (zs_steptime_result){0};
    if (in->world < 1 || in->devices_per_node < 1)
        ZS_FAIL("step time: ranks (%d) and devices per node (%d) must be at least 1", in->world,
                in->devices_per_node);
    ZS_TRY(zs_steptime_check("the FLOP rate", c->gemm_flops, 0));
    ZS_TRY(zs_steptime_check("the intra-node latency", c->intra_latency_s, 1));
    ZS_TRY(zs_steptime_check("the intra-node bandwidth", c->intra_bandwidth, 0));
    ZS_TRY(zs_steptime_check("the inter-node latency", c->inter_latency_s, 1));
    ZS_TRY(zs_steptime_check("the inter-node bandwidth", c->inter_bandwidth, 0));
    ZS_TRY(zs_steptime_check("the node link's bandwidth", c->inter_link_bandwidth, 1));
    ZS_TRY(zs_steptime_check("the FLOPs per step", in->flops_per_step, 1));

    double N = in->world;
    out->inter_node = in->world > in->devices_per_node;
    out->alpha_s = out->inter_node ? c->inter_latency_s : c->intra_latency_s;
    out->beta = out->inter_node ? c->inter_bandwidth : c->intra_bandwidth;
    ZS_TRY(zs_steptime_check("the optimizer's rate", c->optimizer_elems_per_s, 1));
    ZS_TRY(zs_steptime_check("the optimizer's elements", in->optimizer_elems, 1));
    double hide_fwd = 0.0, hide_any = 0.0; /* overlap 2: hideable seconds */
    for (int i = 0; i < in->ncolls; i++) {
        const zs_steptime_coll *k = &in->colls[i];
        if ((int)k->kind < 0 || k->kind >= ZS_COLL_NKINDS)
            ZS_FAIL("step time: unknown collective kind %d", (int)k->kind);
        ZS_TRY(zs_steptime_check("a collective's bytes", k->bytes, 1));
        ZS_TRY(zs_steptime_check("a collective's calls", k->calls, 1));
        double rounds = k->kind == ZS_COLL_ALLREDUCE ? 2.0 : 1.0; /* RS + AG */
        double a = out->alpha_s, b = out->beta, n = k->ranks > 0 ? k->ranks : N;
        int inter = k->link == 2 || (k->link == 0 && out->inter_node);
        if (k->link) /* a group inside a node, or across nodes: its own link */
            a = inter ? c->inter_latency_s : c->intra_latency_s,
            b = inter ? c->inter_bandwidth : c->intra_bandwidth;
        /* measured on its own, over the world: a group inside a node only
         * when that world was one node */
        if (!inter && c->coll_bandwidth[k->kind] > 0 &&
            !(k->link == 1 && c->coll_fits_span_nodes)) {
            a = c->coll_latency_s[k->kind];
            b = c->coll_bandwidth[k->kind];
        }
        if (inter && c->inter_link_bandwidth > 0) { /* the node's link, shared by its senders */
            int K = in->devices_per_node < in->world ? in->devices_per_node : in->world;
            int s = k->senders > 0 ? k->senders : k->link == 2 ? K : 1;
            b = c->inter_link_bandwidth / s;
        }
        double lat = k->calls * (k->rings > 1 ? k->rings : 1) * (n - 1) * a;
        double t = n > 1 ? rounds * (lat + (n - 1) / n * k->bytes / b) : 0.0;
        int K = in->devices_per_node;
        if (k->linear && inter && c->inter_link_bandwidth > 0 && k->kind == ZS_COLL_ALLGATHER &&
            K < n && (int)n % K == 0) /* the node's parts to the other nodes' ranks, at once */
            t = k->calls * a + (k->link_bytes > 0 ? k->link_bytes : K * (n - K) / n * k->bytes) /
                                   c->inter_link_bandwidth;
        out->coll_s[k->kind] += t;
        out->comm_s += t;
        if (inter)
            out->comm_inter_s += t;
        /* overlap 2: a collective across the network link runs beside
         * compute (one inside a node too where copy engines make it) */
        if (in->overlap == 2 && (inter || !c->intra_copies_use_cores)) {
            double h = t * (1.0 - (k->exposed_frac > 0 ? k->exposed_frac : 0.0));
            if (k->fwd_only)
                hide_fwd += h;
            else
                hide_any += h;
        }
    }
    ZS_TRY(zs_steptime_check("the ring's bytes", in->ring_bytes, 1));
    ZS_TRY(zs_steptime_check("the ring's messages", in->ring_sends, 1));
    if (in->ring_sends > 0) { /* context parallelism's ring: never behind compute but with overlap 1 */
        int inter = in->ring_link == 2;
        double a = inter ? c->inter_latency_s : c->intra_latency_s;
        double b = inter ? c->inter_bandwidth : c->intra_bandwidth;
        out->ring_s = in->ring_sends * a + in->ring_bytes / b;
        out->comm_s += out->ring_s;
        if (inter)
            out->comm_inter_s += out->ring_s;
    }
    out->kernels_modelled = in->gemm_flops_per_step > 0;
    for (int k = 0; k < ZS_WORK_NKINDS; k++) {
        ZS_TRY(zs_steptime_check("a kernel's seconds per unit", c->work_s[k], 1));
        ZS_TRY(zs_steptime_check("a kernel's work", in->work[k], 1));
        if (k == ZS_WORK_QUANT && c->work_s[k] <= 0 && in->work[k] > 0 &&
            in->gemm_flops_per_step > 0 && c->work_s[ZS_WORK_PASS] > 0)
            ZS_FAIL("the calibration has no rate for ZeRO++'s block quantization (work_s "
                    "\"quantize\"): run zerosim bench again to measure it");
        if (c->work_s[k] <= 0 && k != ZS_WORK_QUANT)
            out->kernels_modelled = 0;
    }
    if (out->kernels_modelled) {
        out->compute_s = in->gemm_flops_per_step / c->gemm_flops;
        for (int k = 0; k < ZS_WORK_NKINDS; k++) {
            out->work_s[k] = in->work[k] * c->work_s[k];
            out->compute_s += out->work_s[k];
        }
    } else {
        out->compute_s = in->flops_per_step / c->gemm_flops;
    }
    if (c->optimizer_elems_per_s > 0)
        out->optimizer_s = in->optimizer_elems / c->optimizer_elems_per_s;
    if (c->host_bandwidth > 0)
        out->offload_s += in->host_bytes / c->host_bandwidth;
    if (c->nvme_bandwidth > 0)
        out->offload_s += in->nvme_bytes / c->nvme_bandwidth;
    if (c->host_optimizer_elems_per_s > 0)
        out->offload_s += in->host_optimizer_elems / c->host_optimizer_elems_per_s;
    ZS_TRY(zs_steptime_check("the small collectives per step", in->scalar_calls, 1));
    if (in->world > 1)
        out->scalars_s = in->scalar_calls * out->alpha_s;
    out->overlapped = in->overlap != 0;
    /* the compute that runs beside the communication: all of it with
     * --overlap; in stage 3, the forward's beside the forward's gathers
     * alone, and what is left beside the rest */
    double hidden = 0.0;
    if (in->overlap == 1) {
        hidden = fmin(out->compute_s, out->comm_s);
    } else if (in->overlap == 2) {
        double fc = in->fwd_compute_frac > 0 ? in->fwd_compute_frac : 1.0 / 3.0;
        double h1 = fmin(fc * out->compute_s, hide_fwd);
        hidden = h1 + fmin(out->compute_s - h1, hide_any);
    }
    out->comm_hidden_s = hidden;
    out->comm_exposed_s = out->comm_s - hidden;
    out->total_s = out->compute_s + out->comm_exposed_s + out->scalars_s + out->optimizer_s +
                   out->offload_s;
    return 0;
}

int zs_steptime_load_calibration(const char *path, zs_steptime_calib *c)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    char quoted[200]; /* jansson's text may quote the file's: escaped */
    if (!root)
        ZS_FAIL("calibration %s: %s (line %d, column %d)", path,
                zs_file_escape(jerr.text, strlen(jerr.text), quoted, sizeof quoted), jerr.line,
                jerr.column);
    if (!json_is_object(root)) {
        json_decref(root);
        ZS_FAIL("calibration %s: expected a JSON object", path);
    }
    static const struct { const char *key; size_t off; int zero_ok; } keys[] = {
        {"gemm_flops", offsetof(zs_steptime_calib, gemm_flops), 0},
        {"intra_latency_s", offsetof(zs_steptime_calib, intra_latency_s), 1},
        {"intra_bandwidth", offsetof(zs_steptime_calib, intra_bandwidth), 0},
        {"inter_latency_s", offsetof(zs_steptime_calib, inter_latency_s), 1},
        {"inter_bandwidth", offsetof(zs_steptime_calib, inter_bandwidth), 0},
        {"inter_link_bandwidth", offsetof(zs_steptime_calib, inter_link_bandwidth), 0},
        {"optimizer_elems_per_s", offsetof(zs_steptime_calib, optimizer_elems_per_s), 0},
        {"host_bandwidth", offsetof(zs_steptime_calib, host_bandwidth), 0},
        {"nvme_bandwidth", offsetof(zs_steptime_calib, nvme_bandwidth), 0},
        {"host_optimizer_elems_per_s", offsetof(zs_steptime_calib, host_optimizer_elems_per_s), 0},
    };
    zs_steptime_calib tmp = *c;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        json_t *v = json_object_get(root, keys[i].key);
        if (!v)
            continue;
        double x = json_is_number(v) ? json_number_value(v) : NAN;
        if (!isfinite(x) || x < 0 || (!keys[i].zero_ok && x == 0)) {
            json_decref(root);
            ZS_FAIL("calibration %s: \"%s\" must be a %s number", path, keys[i].key,
                    keys[i].zero_ok ? "non-negative" : "positive");
        }
        *(double *)((char *)&tmp + keys[i].off) = x;
    }
    static const zs_coll_kind per_op[] = {ZS_COLL_REDUCE_SCATTER, ZS_COLL_ALLGATHER};
    for (size_t i = 0; i < sizeof per_op / sizeof per_op[0]; i++) {
        json_t *o = json_object_get(root, zs_coll_kind_name(per_op[i]));
        if (!o)
            continue;
        json_t *lat = json_object_get(o, "latency_s"), *bw = json_object_get(o, "bandwidth");
        double a = json_is_number(lat) ? json_number_value(lat) : NAN;
        double b = json_is_number(bw) ? json_number_value(bw) : NAN;
        if (!json_is_object(o) || !isfinite(a) || a < 0 || !isfinite(b) || b <= 0) {
            json_decref(root);
            ZS_FAIL("calibration %s: \"%s\" must hold a non-negative \"latency_s\" and a "
                    "positive \"bandwidth\"", path, zs_coll_kind_name(per_op[i]));
        }
        tmp.coll_latency_s[per_op[i]] = a;
        tmp.coll_bandwidth[per_op[i]] = b;
    }
    json_t *nodes = json_object_get(root, "nodes");
    if (json_is_integer(nodes) && json_integer_value(nodes) > 1 &&
        json_object_get(root, "world_size") && !json_object_get(root, "inter_link_bandwidth")) {
        /* an older bench between nodes: its per-rank β alone cannot say
         * how fast a rank that has the link to itself goes */
        json_decref(root);
        ZS_FAIL("calibration %s: written by an older zerosim bench (no \"inter_link_bandwidth\", "
                "the bandwidth of a node's link): run zerosim bench again", path);
    }
    tmp.coll_fits_span_nodes = json_is_integer(nodes) && json_integer_value(nodes) > 1;
    json_t *cores = json_object_get(root, "intra_copies_use_cores");
    if (cores && !json_is_boolean(cores)) {
        json_decref(root);
        ZS_FAIL("calibration %s: \"intra_copies_use_cores\" must be true or false", path);
    }
    /* absent: true in a file of zerosim bench's (its ranks are CPU
     * processes copying through shared memory), as given otherwise */
    if (cores)
        tmp.intra_copies_use_cores = json_is_true(cores);
    else if (json_object_get(root, "world_size"))
        tmp.intra_copies_use_cores = 1;
    json_t *w = json_object_get(root, "work_s");
    if (!w && json_object_get(root, "world_size")) {
        /* written by a zerosim bench from before the kernel classes: its
         * step time would fall back to the GEMM rate without a word */
        json_decref(root);
        ZS_FAIL("calibration %s: written by an older zerosim bench (no \"work_s\", the time of "
                "each kind of kernel): run zerosim bench again", path);
    }
    for (int k = 0; w && k < ZS_WORK_NKINDS; k++) {
        json_t *v = json_is_object(w) ? json_object_get(w, zs_work_kind_name((zs_work_kind)k)) : NULL;
        if (json_is_object(w) && !v && k == ZS_WORK_QUANT)
            continue; /* older than the codecs: refused only by a plan that needs them */
        if (json_is_object(w) && !v) { /* from an older zerosim bench */
            json_decref(root);
            ZS_FAIL("calibration %s: \"work_s\" has no \"%s\"; run zerosim bench again to "
                    "measure it", path, zs_work_kind_name((zs_work_kind)k));
        }
        double x = json_is_number(v) ? json_number_value(v) : NAN;
        if (!isfinite(x) || x < 0) {
            json_decref(root);
            ZS_FAIL("calibration %s: \"work_s\" must hold a non-negative number \"%s\"", path,
                    zs_work_kind_name((zs_work_kind)k));
        }
        tmp.work_s[k] = x;
    }
    json_decref(root);
    *c = tmp;
    return 0;
}
