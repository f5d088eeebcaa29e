/* zerosim — the process mesh (see zerosim/mesh.h). */
#include "zerosim/mesh.h"
#include "zerosim/error.h"

#include <stdlib.h>

int zs_mesh_check(int world, int tp, int pp)
{
    if (world < 1 || tp < 1 || pp < 1)
        ZS_FAIL("the mesh needs at least one rank, --tp and --pp of at least 1 (got N = %d, "
                "tp %d, pp %d)", world, tp, pp);
    if (world % (tp * pp))
        ZS_FAIL("%d ranks do not divide into tensor-parallel groups of %d times pipeline stages "
                "of %d (%d): use a number of ranks that tp x pp divides", world, tp, pp, tp * pp);
    return 0;
}

int zs_mesh_group_size(int world, int tp, int pp, zs_comm_group g)
{
    switch (g) {
    case ZS_GROUP_TP: return tp;
    case ZS_GROUP_PP: return pp;
    default: return world / (tp * pp);
    }
}

int zs_mesh_ngroups(int world, int tp, int pp, zs_comm_group g)
{
    return world / zs_mesh_group_size(world, tp, pp, g);
}

int zs_mesh_rank_of(int world, int tp, int pp, zs_mesh_coord c)
{
    int D = world / (tp * pp);
    return c.tp + tp * (c.dp + D * c.pp);
}

zs_mesh_coord zs_mesh_coord_of(int world, int tp, int pp, int rank)
{
    int D = world / (tp * pp);
    return (zs_mesh_coord){.tp = rank % tp, .dp = rank / tp % D, .pp = rank / (tp * D)};
}

int zs_mesh_group_index(int world, int tp, int pp, zs_comm_group g, int rank)
{
    zs_mesh_coord c = zs_mesh_coord_of(world, tp, pp, rank);
    int D = world / (tp * pp);
    switch (g) {
    case ZS_GROUP_TP: return c.dp + D * c.pp;
    case ZS_GROUP_PP: return c.dp * tp + c.tp;
    default: return c.pp * tp + c.tp;
    }
}

int zs_mesh_group_ranks(int world, int tp, int pp, zs_comm_group g, int index, int *ranks)
{
    int D = world / (tp * pp), n = zs_mesh_group_size(world, tp, pp, g);
    for (int k = 0; k < n; k++) {
        zs_mesh_coord c;
        switch (g) {
        case ZS_GROUP_TP: c = (zs_mesh_coord){.tp = k, .dp = index % D, .pp = index / D}; break;
        case ZS_GROUP_PP: c = (zs_mesh_coord){.tp = index % tp, .dp = index / tp, .pp = k}; break;
        default: c = (zs_mesh_coord){.tp = index % tp, .dp = k, .pp = index / tp}; break;
        }
        ranks[k] = zs_mesh_rank_of(world, tp, pp, c);
    }
    return n;
}

int zs_mesh_dp_node_blocks(int world, int tp, int pp, int tp_rank, int pp_rank,
                           int ranks_per_node)
{
    int D = world / (tp * pp);
    if (ranks_per_node <= 0)
        return D;
#define ZS_DP_NODE(d) (zs_mesh_rank_of(world, tp, pp, (zs_mesh_coord){.tp = tp_rank, .dp = (d), .pp = pp_rank}) / \
                       ranks_per_node)
    int K = 0;
    for (int d = 0; d < D; d++)
        K += ZS_DP_NODE(d) == ZS_DP_NODE(0);
    if (D % K)
        return 0;
    for (int d = 0; d < D; d++)
        if (ZS_DP_NODE(d) != ZS_DP_NODE(d - d % K) || (d >= K && ZS_DP_NODE(d) == ZS_DP_NODE(d - K)))
            return 0;
#undef ZS_DP_NODE
    return K;
}

int zs_mesh_check_ep(int world, int tp, int pp, int ep)
{
    ZS_TRY(zs_mesh_check(world, tp, pp));
    int D = world / (tp * pp);
    if (ep < 1 || D % ep)
        ZS_FAIL("the expert-parallel size (--ep %d) must divide the data-parallel size %d "
                "(N %d / (tp %d x pp %d))", ep, D, world, tp, pp);
    return 0;
}

int zs_mesh_ep_group_size(int world, int tp, int pp, int ep, int edp)
{
    return edp ? world / (tp * pp) / ep : ep;
}

int zs_mesh_ep_ngroups(int world, int tp, int pp, int ep, int edp)
{
    return world / zs_mesh_ep_group_size(world, tp, pp, ep, edp);
}

int zs_mesh_ep_group_ranks(int world, int tp, int pp, int ep, int edp, int index, int *ranks)
{
    int D = world / (tp * pp), per = edp ? ep : D / ep; /* groups per data-parallel group */
    int g = index / per, i = index % per, n = zs_mesh_ep_group_size(world, tp, pp, ep, edp);
    int *dp = malloc((size_t)D * sizeof(int));
    if (!dp)
        return 0;
    zs_mesh_group_ranks(world, tp, pp, ZS_GROUP_DP, g, dp);
    for (int k = 0; k < n; k++)
        ranks[k] = edp ? dp[i + k * ep] : dp[i * ep + k];
    free(dp);
    return n;
}

int zs_mesh_check_cp(int world, int tp, int pp, int cp)
{
    if (cp < 1)
        ZS_FAIL("the context-parallel size (--cp %d) must be at least 1", cp);
    if (world < 1 || tp < 1 || pp < 1 || world % (tp * cp * pp))
        ZS_FAIL("%d ranks do not divide into tensor-parallel groups of %d times context-parallel "
                "groups of %d times pipeline stages of %d (%d): use a number of ranks that "
                "tp x cp x pp divides", world, tp, cp, pp, tp * cp * pp);
    return 0;
}

/* The context axis cuts the combined data-and-context group as the expert
 * axis cuts the data-parallel group: consecutive members (cp groups) and
 * every C-th member (pure data groups). */
int zs_mesh_cp_ngroups(int world, int tp, int pp, int cp, int dp_axis)
{
    return zs_mesh_ep_ngroups(world, tp, pp, cp, dp_axis);
}

int zs_mesh_cp_group_size(int world, int tp, int pp, int cp, int dp_axis)
{
    return zs_mesh_ep_group_size(world, tp, pp, cp, dp_axis);
}

int zs_mesh_cp_group_ranks(int world, int tp, int pp, int cp, int dp_axis, int index,
                           int *ranks)
{
    return zs_mesh_ep_group_ranks(world, tp, pp, cp, dp_axis, index, ranks);
}

void zs_mesh_cp_split(int member, int cp, int *cp_rank, int *dp_rank)
{
    int C = cp > 1 ? cp : 1;
    *cp_rank = member % C;
    *dp_rank = member / C;
}

struct zs_mesh {
    zs_comm_t world;
    int tp, pp, cp;
    zs_mesh_coord self;
    zs_comm_t comm[ZS_GROUP_NGROUPS]; /* dp, tp, pp, cp; NULL elsewhere */
    int owns_dp;                      /* the dp comm is a split, not the world */
};

/* The context-parallel group of this rank: a split of the world tagged cp,
 * its members' world ranks set for the node map. */
static int zs_mesh_split_cp(zs_mesh *m, int N, int rank)
{
    int per = N / (m->tp * m->pp) / m->cp; /* cp groups per combined group */
    int key, data;
    zs_mesh_cp_split(m->self.dp, m->cp, &key, &data);
    int index = zs_mesh_group_index(N, m->tp, m->pp, ZS_GROUP_DP, rank) * per + data;
    ZS_TRY(zs_comm_split(m->world, index, key, m->cp, key, ZS_GROUP_CP, &m->comm[ZS_GROUP_CP]));
    int *members = malloc((size_t)m->cp * sizeof(int));
    if (!members)
        ZS_FAIL("out of host memory for the mesh's context-parallel group");
    zs_mesh_cp_group_ranks(N, m->tp, m->pp, m->cp, 0, index, members);
    int rc = zs_comm_set_world_ranks(m->comm[ZS_GROUP_CP], members);
    free(members);
    return rc;
}

int zs_mesh_create(zs_comm_t world, int tp, int pp, zs_mesh **out)
{
    return zs_mesh_create_cp(world, tp, pp, 1, out);
}

int zs_mesh_create_cp(zs_comm_t world, int tp, int pp, int cp, zs_mesh **out)
{
    *out = NULL;
    int N = zs_comm_size(world), rank = zs_comm_rank(world);
    ZS_TRY(zs_mesh_check(N, tp, pp));
    ZS_TRY(zs_mesh_check_cp(N, tp, pp, cp));
    zs_mesh *m = calloc(1, sizeof *m);
    if (!m)
        ZS_FAIL("out of host memory creating the mesh");
    m->world = world;
    m->tp = tp;
    m->pp = pp;
    m->cp = cp;
    m->self = zs_mesh_coord_of(N, tp, pp, rank);
    static const zs_comm_group axes[] = {ZS_GROUP_TP, ZS_GROUP_DP, ZS_GROUP_PP};
    for (size_t i = 0; i < sizeof axes / sizeof axes[0]; i++) {
        zs_comm_group g = axes[i];
        if (g == ZS_GROUP_DP && tp == 1 && pp == 1) {
            m->comm[g] = world; /* the world is the data-parallel group */
            continue;
        }
        int key = g == ZS_GROUP_TP ? m->self.tp : g == ZS_GROUP_PP ? m->self.pp : m->self.dp;
        int rc = zs_comm_split(world, zs_mesh_group_index(N, tp, pp, g, rank), key,
                               zs_mesh_group_size(N, tp, pp, g), key, g, &m->comm[g]);
        int *members = rc ? NULL : malloc((size_t)zs_mesh_group_size(N, tp, pp, g) * sizeof(int));
        if (!rc && !members)
            rc = zs_error_set("out of host memory for the mesh's groups");
        if (!rc) { /* its nodes, from the world's */
            zs_mesh_group_ranks(N, tp, pp, g, zs_mesh_group_index(N, tp, pp, g, rank), members);
            rc = zs_comm_set_world_ranks(m->comm[g], members);
        }
        free(members);
        if (rc) {
            zs_mesh_free(m);
            return rc;
        }
        if (g == ZS_GROUP_DP)
            m->owns_dp = 1;
    }
    if (cp > 1 && zs_mesh_split_cp(m, N, rank)) {
        zs_mesh_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

zs_comm_t zs_mesh_comm(const zs_mesh *m, zs_comm_group g)
{
    return g < ZS_GROUP_NGROUPS ? m->comm[g] : NULL;
}

zs_mesh_coord zs_mesh_self(const zs_mesh *m) { return m->self; }

void zs_mesh_free(zs_mesh *m)
{
    if (!m)
        return;
    zs_comm_free(m->comm[ZS_GROUP_TP]);
    zs_comm_free(m->comm[ZS_GROUP_PP]);
    zs_comm_free(m->comm[ZS_GROUP_CP]);
    if (m->owns_dp)
        zs_comm_free(m->comm[ZS_GROUP_DP]);
    free(m);
}
