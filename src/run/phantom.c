/* zerosim — phantom runs (zerosim train --phantom): every rank of a world
 * simulated in one process on the phantom backend, which stores and
 * computes nothing; ranks whose bytes are the same are grouped into
 * classes and one rank of each class is run. */
#include "zerosim/train.h"
#include "zerosim/error.h"
#include "zerosim/program.h"
#include "zerosim/mesh.h"
#include "run/train_impl.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rank q's part of the k-th range whose part sizes its bytes depend on:
 * the compressed exchange's buckets (comp), then, with the parameters off
 * the device (offload_param), stage 3's gather ranges, each rank's own
 * part of which goes up from the host (or the file) before the gather. */
static size_t zs_phantom_part(const zs_step_shape *s, int comp, int q, int k)
{
    size_t beg;
    const zs_step_range *r = comp && k < s->nbuckets ? &s->buckets[k]
                                                     : &s->granges[k - (comp ? s->nbuckets : 0)];
    return zs_partition_overlap(&s->part, q, r->lo, r->hi, &beg);
}

/* Phantom ranks that run identical programs: every rank runs the same ops
 * on buffers of the same sizes (zerosim/program.h), and what its ledger
 * and accounting record depends on its rank only through the compressed
 * exchange, whose bytes depend on the part of each bucket the rank owns,
 * and with offload_param through the host-to-device (and nvme) bytes of
 * its part of each gather. class[q] = the lowest rank whose parts are all
 * the same as q's. */
static int zs_phantom_classes(const zs_step_shape *s, int world, int tp, int pp, int *cls)
{
    if (s->cfg.quantized_gradients) { /* qgZ: each rank's parts differ; a class each */
        for (int q = 0; q < world; q++)
            cls[q] = q;
        return 0;
    }
    int param_off = s->stage == 3 && s->buf[ZS_BUF_PARAMS].tier != ZS_TIER_DEVICE;
    if (!s->comp && !param_off) {
        memset(cls, 0, (size_t)world * sizeof(int));
        return 0;
    }
    if (tp * pp > 1) { /* a rank is its data-parallel rank's class */
        int D = world / (tp * pp);
        ZS_TRY(zs_phantom_classes(s, D, 1, 1, cls));
        int *first = malloc((size_t)D * sizeof(int));
        if (!first)
            ZS_FAIL("out of host memory grouping %d simulated ranks", world);
        for (int d = 0; d < D; d++)
            first[d] = -1;
        int *dcls = malloc((size_t)D * sizeof(int));
        if (!dcls) {
            free(first);
            ZS_FAIL("out of host memory grouping %d simulated ranks", world);
        }
        memcpy(dcls, cls, (size_t)D * sizeof(int));
        for (int q = 0; q < world; q++) {
            int c = dcls[zs_mesh_coord_of(world, tp, pp, q).dp];
            if (first[c] < 0)
                first[c] = q;
            cls[q] = first[c];
        }
        free(first);
        free(dcls);
        return 0;
    }
    int comp = s->comp != 0;
    int nb = (comp ? s->nbuckets : 0) + (param_off ? s->gfirst[s->U - 1] + s->gn[s->U - 1] : 0);
    uint64_t *h = malloc((size_t)world * sizeof *h);
    int *rep = malloc((size_t)world * sizeof *rep), nrep = 0;
    if (!h || !rep) {
        free(h);
        free(rep);
        ZS_FAIL("out of host memory grouping %d simulated ranks", world);
    }
    for (int q = 0; q < world; q++) {
        uint64_t x = 1469598103934665603ull; /* FNV-1a over the parts */
        for (int k = 0; k < nb; k++)
            x = (x ^ (uint64_t)zs_phantom_part(s, comp, q, k)) * 1099511628211ull;
        h[q] = x;
        int c = -1;
        for (int i = 0; i < nrep && c < 0; i++) {
            int p = rep[i];
            if (h[p] != x)
                continue;
            int same = 1;
            for (int k = 0; k < nb && same; k++)
                same = zs_phantom_part(s, comp, p, k) == zs_phantom_part(s, comp, q, k);
            if (same)
                c = p;
        }
        if (c < 0)
            rep[nrep++] = c = q;
        cls[q] = c;
    }
    free(h);
    free(rep);
    return 0;
}

/* With nodes, a rank's inter-node bytes depend on whether its ring
 * neighbour in each group is on another node (and with a pipeline,
 * whether the next rank of the global norm's chain, tp ranks on, is, and
 * its neighbour in the world, whose scalars it all-gathers):
 * split each class by those bits (one per group), so the class's first
 * rank stands for all. */
static int zs_phantom_node_classes(int world, int tp, int pp, int k, int *cls)
{
    if (k <= 0 || k >= world)
        return 0;
    static const zs_comm_group axes[] = {ZS_GROUP_DP, ZS_GROUP_TP, ZS_GROUP_PP};
    int *first = malloc((size_t)world * 32 * sizeof(int));
    int *members = malloc((size_t)world * sizeof(int));
    if (!first || !members) {
        free(first);
        free(members);
        ZS_FAIL("out of host memory grouping %d simulated ranks", world);
    }
    for (int i = 0; i < world * 32; i++)
        first[i] = -1;
    for (int q = 0; q < world; q++) {
        int bits = 0;
        for (int a = 0; a < 3; a++) {
            zs_comm_group g = axes[a];
            int n = zs_mesh_group_ranks(world, tp, pp, g, zs_mesh_group_index(world, tp, pp, g, q),
                                        members);
            for (int i = 0; i < n; i++)
                if (members[i] == q && members[(i + 1) % n] / k != q / k)
                    bits |= 1 << a;
        }
        if (pp > 1 && q + tp < world && (q + tp) / k != q / k)
            bits |= 8;
        if (pp > 1 && (q + 1) % world / k != q / k)
            bits |= 16;
        int *f = &first[cls[q] * 32 + bits];
        if (*f < 0)
            *f = q;
        cls[q] = *f;
    }
    free(first);
    free(members);
    return 0;
}

/* One step shape per pipeline stage (P), every simulated rank's of that
 * stage, over D data-parallel ranks; *nshapes: how many were built. */
static int zs_phantom_shapes(const zs_run_config *cfg, int P, int D, zs_step_shape *shapes,
                             int *nshapes)
{
    int rc = 0;
    for (int st = 0; st < P && !rc; st++)
        if ((rc = zs_train_stage_shape(cfg, st, D, &shapes[st])) == 0)
            (*nshapes)++;
    return rc;
}

/* With a pipeline: a stage's ranks run its own program, so no class spans
 * two stages. Within stage st, data-parallel ranks d and d' share a class
 * when their parts of the stage's own buckets (and gathers) are the same
 * (zs_phantom_classes over shapes[st]: compression's all-to-all,
 * offload_param's uploads) and neither is a link of the global norm's
 * chain (zs_engine_norm_pp) that the others are not: the first stage's
 * data-parallel rank 0 has no receive, the last stage's last no send. */
static int zs_phantom_pp_classes(const zs_step_shape *shapes, int world, int T, int P, int *cls)
{
    int D = world / (T * P);
    int *dcls = malloc((size_t)D * sizeof(int)), *rep = malloc(2 * (size_t)D * sizeof(int));
    int rc = dcls && rep ? 0 : zs_error_set("out of host memory grouping %d simulated ranks",
                                            world);
    for (int st = 0; st < P && !rc; st++) {
        if ((rc = zs_phantom_classes(&shapes[st], D, 1, 1, dcls)) != 0)
            break;
        for (int i = 0; i < 2 * D; i++) /* rep[2 c + end]: the first such rank */
            rep[i] = -1;
        for (int d = 0; d < D; d++) {
            int end = (st == 0 && d == 0) || (st == P - 1 && d == D - 1);
            int *r = &rep[2 * dcls[d] + end];
            if (*r < 0)
                *r = d;
            for (int t = 0; t < T; t++)
                cls[zs_mesh_rank_of(world, T, P, (zs_mesh_coord){.tp = t, .dp = d, .pp = st})] =
                    zs_mesh_rank_of(world, T, P, (zs_mesh_coord){.tp = 0, .dp = *r, .pp = st});
        }
    }
    free(dcls);
    free(rep);
    return rc;
}

/* cls[q]: the first rank of simulated rank q's class, whose run stands for
 * every rank of the class (ZEROSIM_PHANTOM_EVERY_RANK=1: each its own). */
static int zs_phantom_assign_classes(const zs_run_config *cfg, const zs_step_shape *shapes,
                                     int world, int T, int P, int *cls)
{
    int rc = 0;
    const char *every = getenv("ZEROSIM_PHANTOM_EVERY_RANK");
    if (every && strcmp(every, "1") == 0)
        for (int q = 0; q < world; q++)
            cls[q] = q;
    else if (P > 1)
        rc = zs_phantom_pp_classes(shapes, world, T, P, cls);
    else
        rc = zs_phantom_classes(&shapes[0], world, T, P, cls);
    if (!rc)
        rc = zs_phantom_node_classes(world, T, P, cfg->ranks_per_node, cls);
    return rc;
}

/* Simulated rank q's run on its own phantom backend and communicator, its
 * mesh and the features its collectives take; its statistics into row. */
static int zs_phantom_run_rank(const zs_run_config *cfg, const zs_train_options *po, int world,
                               int q, const zs_step_shape *shapes, zs_train_result *rq,
                               double *row)
{
    int T = cfg->tp > 1 ? cfg->tp : 1, P = cfg->pp > 1 ? cfg->pp : 1, rc = 0;
    char err[256];
    zs_backend_t be = zs_backend_init_phantom(err, sizeof err);
    zs_comm_t comm = be ? zs_comm_phantom(world, q) : NULL;
    zs_mesh *mesh = NULL;
    zs_run_config local = *cfg;
    if (!be)
        rc = zs_error_set("%s", err);
    else if (!comm)
        rc = zs_error_set("out of host memory creating simulated rank %d", q);
    else if ((rc = zs_comm_set_ranks_per_node(comm, cfg->ranks_per_node)) != 0)
        ;
    else if (T * P * cfg->cp > 1 && (rc = zs_mesh_create_cp(comm, T, P, cfg->cp, &mesh)) == 0) {
        local.model.tp_rank = zs_mesh_self(mesh).tp;
        int data_rank;
        zs_mesh_cp_split(zs_mesh_self(mesh).dp, cfg->cp, &local.model.cp_rank, &data_rank);
    }
    int stage = mesh && P > 1 ? zs_mesh_self(mesh).pp : 0;
    zs_comm_t dp = mesh ? zs_mesh_comm(mesh, ZS_GROUP_DP) : comm;
    if (!rc && P > 1)
        rc = zs_pp_stage_config(&local, stage);
    if (!rc)
        rc = zs_comm_set_hierarchical(dp, cfg->hierarchical);
    if (!rc)
        rc = zs_comm_set_quantized_weights(dp, cfg->quantized_weights);
    if (!rc && cfg->stage == 3)
        rc = zs_comm_set_hpz(dp, cfg->hpz_partition_size);
    if (!rc)
        rc = zs_comm_set_quantized_gradients(dp, cfg->quantized_gradients);
    zs_comm_t ep = NULL, edp = NULL;
    if (!rc && cfg->ep > 1)
        rc = zs_train_ep_comm(comm, cfg, &local, &ep, &edp);
    if (!rc)
        rc = zs_train_rank(&local, po, comm, dp, mesh ? zs_mesh_comm(mesh, ZS_GROUP_TP) : NULL,
                           mesh && P > 1 ? zs_mesh_comm(mesh, ZS_GROUP_PP) : NULL, ep, edp,
                           mesh && cfg->cp > 1 ? zs_mesh_comm(mesh, ZS_GROUP_CP) : NULL, be,
                           &shapes[stage], rq);
    if (ep)
        zs_comm_free(ep);
    if (edp)
        zs_comm_free(edp);
    if (comm) {
        zs_comm_set_hpz(dp, 0);
        zs_comm_set_quantized_gradients(dp, 0);
    }
    zs_mesh_free(mesh);
    if (!rc)
        zs_train_pack_stats(rq, comm, row);
    if (comm)
        zs_comm_finalize(comm);
    zs_backend_release(be);
    return rc;
}

int zs_train_phantom(const zs_run_config *cfg, const zs_train_options *o, int world,
                     zs_train_result *r)
{
    memset(r, 0, sizeof *r);
    if (zs_model_check_phantom(&cfg->model))
        return -1;
    double t0 = zs_train_now();
    r->phantom = 1;
    if (zs_train_alloc_stats(r, world))
        return -1;
    zs_train_options po = *o;
    po.log = NULL;            /* a phantom loss means nothing */
    po.hash_every_step = 0;   /* nor does a hash of no parameters */
    /* one shape for every simulated rank, and one run per class of ranks
     * (ZEROSIM_PHANTOM_EVERY_RANK=1 runs every rank, for checking) */
    int T = cfg->tp > 1 ? cfg->tp : 1, P = cfg->pp > 1 ? cfg->pp : 1, D = world / (T * P);
    int nshapes = 0; /* one shape per pipeline stage */
    zs_step_shape *shapes = calloc((size_t)P, sizeof *shapes);
    int *cls = malloc((size_t)world * sizeof(int));
    int rc = cls && shapes ? 0 : zs_error_set("out of host memory for %d simulated ranks", world);
    if (!rc)
        rc = zs_phantom_shapes(cfg, P, D, shapes, &nshapes);
    if (!rc)
        rc = zs_phantom_assign_classes(cfg, shapes, world, T, P, cls);
    double row[ZS_NM + ZS_NC];
    for (int q = 0; q < world && !rc; q++) {
        if (cls[q] != q) /* filled with its class's first rank */
            continue;
        zs_train_result one, *rq = q == 0 ? r : &one;
        if (q > 0)
            memset(&one, 0, sizeof one);
        rc = zs_phantom_run_rank(cfg, &po, world, q, shapes, rq, row);
        if (!rc)
            for (int p = q; p < world; p++)
                if (cls[p] == q)
                    zs_train_unpack_stats(r, p, row);
        if (q > 0) {
            r->error_rank = one.error_rank;
            zs_train_result_free(&one);
        }
    }
    for (int st = 0; st < nshapes; st++)
        zs_step_shape_free(&shapes[st]);
    free(shapes);
    free(cls);
    /* a class's first rank stands for its traffic, not for its node */
    for (int q = 0; q < world && r->node_of; q++)
        r->node_of[q] = cfg->ranks_per_node > 0 ? q / cfg->ranks_per_node : 0;
    r->nodes = cfg->ranks_per_node > 0 ? world / cfg->ranks_per_node : 1;
    if (!rc)
        rc = zs_train_node_shape(r, T, P);
    for (int st = 0; st < r->steps; st++) /* computed from nothing: not numbers */
        r->info[st].loss = r->info[st].grad_norm = NAN;
    r->seconds = zs_train_now() - t0; /* all simulated ranks */
    r->error_rank = rc != 0;
    return rc;
}

