/* zerosim — the planner's links: which collectives cross nodes (see
 * plan_impl.h). */
#include "plan_impl.h"
#include "zerosim/error.h"
#include "zerosim/mesh.h"
#include "zerosim/predict.h"

#include <stdlib.h>
#include <string.h>

/* --hierarchical (zs_comm_set_hierarchical): the data-parallel
 * reduce-scatters and allgathers over the N devices become two rings, inside
 * each node of K over the whole buffer S, then across the M nodes among one
 * local index over S/K: (K-1)/K S + (M-1)/N S per device and call, the
 * flat ring's (N-1)/N S, so the traffic stays; (M-1)/N S crosses. The
 * inner reduce-scatter is M rings (one per node block of K chunks), and
 * neither level overlaps compute (both complete when called). */
int zs_plan_hierarchical(zs_plan_result *r, int N, int K)
{
    /* with --tp, --pp, --ep or ZeRO++: refused by zerosim/compat.h's rules */
    if (N % K)
        ZS_FAIL("--hierarchical needs the %d devices in whole nodes of %d: use a multiple of %d",
                N, K, K);
    int M = N / K;
    if (K < 2 || M < 2) /* one level is the whole: the flat rings run */
        return 0;
    zs_steptime_coll flat[3 * ZS_COLL_NKINDS];
    int n = r->ncolls;
    memcpy(flat, r->colls, (size_t)n * sizeof flat[0]);
    r->ncolls = 0;
    r->hierarchical = 1;
    for (int i = 0; i < n; i++) {
        const zs_steptime_coll *k = &flat[i];
        if ((k->kind != ZS_COLL_REDUCE_SCATTER && k->kind != ZS_COLL_ALLGATHER) || k->ranks ||
            k->link) {
            r->colls[r->ncolls++] = *k;
            continue;
        }
        /* the reduce-scatter's inner level is one ring per node block, M
         * of them: M (K-1) latencies a call */
        r->colls[r->ncolls++] =
            (zs_steptime_coll){.kind = k->kind, .bytes = k->bytes, .calls = k->calls,
                               .rings = k->kind == ZS_COLL_REDUCE_SCATTER ? M : 1,
                               .ranks = K, .link = 1};
        r->colls[r->ncolls++] = (zs_steptime_coll){.kind = k->kind, .bytes = k->bytes / K,
                                                   .calls = k->calls, .ranks = M, .link = 2};
        r->inter_node_bytes += (M - 1.0) / N * k->bytes;
    }
    return 0;
}

/* TP and PP beside data parallelism: which of the most loaded stage's
 * devices send across nodes, with the ranks laid out as zerosim mesh lays
 * them (tensor-parallel fastest, then data, then pipeline) and K
 * consecutive ranks a node. A device's ring in a group crosses when its
 * next member (the one it sends to) is on another node, and then all of
 * that ring's volume crosses, as the ledger counts it; a pipeline device's
 * sends cross in the share of its neighbouring stages' peers (the one
 * before and the one after) on other nodes. The collectives (the first
 * ndp of r->colls data-parallel, the rest tensor-parallel) get the link
 * their rings use. */
int zs_plan_mesh_inter(zs_plan_result *r, const zs_run_config *c, const zs_prediction *pr,
                       int D, int K, int ndp)
{
    int T = c->tp > 1 ? c->tp : 1, P = c->pp > 1 ? c->pp : 1, W = T * D * P;
    int s = P > 1 ? r->pp_stage : 0, first = s * T * D, n = T * D;
    unsigned char *cross = calloc((size_t)W, 1);
    int *m = malloc((size_t)W * sizeof *m);
    if (!cross || !m) {
        free(cross);
        free(m);
        ZS_FAIL("out of host memory for the node map of %d devices", W);
    }
    static const zs_comm_group axes[] = {ZS_GROUP_DP, ZS_GROUP_TP};
    for (int a = 0; a < 2; a++)
        for (int k = 0; k < zs_mesh_ngroups(W, T, P, axes[a]); k++) {
            int g = zs_mesh_group_ranks(W, T, P, axes[a], k, m);
            for (int i = 0; i < g; i++)
                if (m[(i + 1) % g] / K != m[i] / K)
                    cross[m[i]] |= (unsigned char)(1u << a);
        }
    double dp = 0, tp = 0, pp = 0, peers = 0;
    for (int q = first; q < first + n; q++) {
        dp += cross[q] & 1;
        tp += cross[q] >> 1 & 1;
        if (s > 0)
            peers++, pp += (q - n) / K != q / K;
        if (s < P - 1)
            peers++, pp += (q + n) / K != q / K;
    }
    free(cross);
    free(m);
    r->mesh_inter = 1;
    r->inter_frac[0] = dp / n;
    r->inter_frac[1] = tp / n;
    r->inter_frac[2] = peers > 0 ? pp / peers : 0.0;
    r->inter_part[0] = r->inter_frac[0] * (zs_ring_bytes(pr->rs_bytes_per_step, D) +
                                           zs_ring_bytes(pr->ag_bytes_per_step, D));
    r->inter_part[1] = r->inter_frac[1] * (pr->tp_allreduce_bytes_per_step +
                                           pr->tp_rs_bytes_per_step + pr->tp_ag_bytes_per_step);
    r->inter_part[2] = r->inter_frac[2] * r->pp_send_bytes;
    r->inter_node_bytes = r->inter_part[0] + r->inter_part[1] + r->inter_part[2];
    /* the step time: each group's collectives on its own link, across
     * nodes where any of the stage's rings crosses (a ring runs at its
     * slowest link), else inside the node */
    for (int i = 0; i < r->ncolls; i++) {
        int tpc = ndp >= 0 && i >= ndp;
        if (r->colls[i].link == 0)
            r->colls[i].link = r->inter_frac[tpc ? 1 : 0] > 0 ? 2 : 1;
    }
    return 0;
}
