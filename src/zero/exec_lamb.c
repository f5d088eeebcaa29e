/* zerosim — the engine: LAMB's step (see engine_impl.h and zerosim/optim.h).
 *
 * LAMB scales each parameter tensor's update by its trust ratio
 * ||w|| / ||u||, so a rank whose shard holds part of a tensor needs the
 * other ranks' parts of its two sums of squares. The sums are taken the
 * same way at every stage, so that the steps are byte-identical across
 * stages: each tensor's part in each rank's shard of the partition
 * (zerosim/partition.h) summed in order from 0 (zs_optim_lamb_sumsq), and
 * the ranks' parts added in rank order. Stage 0 holds everything and
 * computes every rank's parts itself; stages 1-3 compute their own and
 * all-gather the table, 2 doubles per tensor per rank, recorded in the
 * ledger as "scalars" (as the global norm's partial sums are).
 */
#include "zero/engine_impl.h"
#include "zerosim/error.h"

#include <stdlib.h>

/* The part [*lo, *hi) of entry k that rank q owns and this rank's arrays
 * (flat elements [base, base + n)) hold; 0 when empty. */
static int lamb_part(const zs_engine *e, int k, int q, size_t base, size_t n, size_t *lo,
                     size_t *hi)
{
    const zs_param_entry *pe = &e->lay->entries[k];
    size_t beg;
    size_t cnt = zs_partition_overlap(&e->part, q, pe->offset, pe->offset + pe->numel, &beg);
    size_t a = beg > base ? beg : base, b = beg + cnt < base + n ? beg + cnt : base + n;
    if (cnt == 0 || a >= b)
        return 0;
    *lo = a;
    *hi = b;
    return 1;
}

int zs_engine_lamb_step(zs_engine *e, size_t base, size_t n, float *master, float *m, float *v,
                        const void *grad, void *param)
{
    const zs_run_config *c = &e->cfg;
    int N = e->part.world, E = e->lay->n_entries;
    int whole = e->stage == 0; /* this rank holds every rank's shard */
    double *sums = calloc((size_t)N * 2 * (size_t)E, sizeof(double));
    double *own = calloc(2 * (size_t)E, sizeof(double));
    float *ratio = malloc((size_t)(E > 0 ? E : 1) * sizeof(float));
    if (!sums || !own || !ratio) {
        free(sums);
        free(own);
        free(ratio);
        ZS_FAIL("out of host memory for LAMB's sums of %d tensors over %d ranks", E, N);
    }
    if (!e->phantom)
        zs_optim_lamb_moments(c, e->grad_mul, m, v, grad, e->grad_dtype, n);
    for (int q = 0; q < N && !e->phantom; q++) {
        if (!whole && q != e->part.rank)
            continue;
        double *row = whole ? sums + (size_t)q * 2 * (size_t)E : own;
        for (int k = 0; k < E; k++) {
            size_t lo, hi;
            if (lamb_part(e, k, q, base, n, &lo, &hi))
                zs_optim_lamb_sumsq(c, master + (lo - base), m + (lo - base), v + (lo - base),
                                    hi - lo, &row[2 * k], &row[2 * k + 1]);
        }
    }
    int rc = 0;
    if (!whole && N > 1)
        rc = zs_comm_allgather_small(e->comm, own, sums, 2 * E, ZS_CT_F64);
    else if (!whole)
        for (int k = 0; k < 2 * E; k++)
            sums[k] = own[k];
    for (int k = 0; k < E && !rc; k++) {
        double w_sq = 0.0, u_sq = 0.0;
        for (int q = 0; q < N; q++) { /* rank order */
            w_sq += sums[((size_t)q * (size_t)E + (size_t)k) * 2];
            u_sq += sums[((size_t)q * (size_t)E + (size_t)k) * 2 + 1];
        }
        ratio[k] = zs_optim_lamb_ratio(c, w_sq, u_sq);
    }
    if (!rc && !e->phantom && c->optimizer == ZS_OPT_ONEBITLAMB)
        zs_engine_onebit_lamb_warmup(e, ratio, v);
    for (int k = 0; k < E && !rc && !e->phantom; k++) {
        const zs_param_entry *pe = &e->lay->entries[k];
        size_t lo = pe->offset > base ? pe->offset : base;
        size_t hi = pe->offset + pe->numel < base + n ? pe->offset + pe->numel : base + n;
        if (lo >= hi)
            continue;
        size_t i = lo - base;
        zs_optim_lamb_apply(c, e->opt_steps, e->info->lr, ratio[k], master + i, m + i, v + i,
                            param ? (char *)param + i * e->param_elsize : NULL, e->param_dtype,
                            hi - lo);
    }
    free(sums);
    free(own);
    free(ratio);
    return rc;
}
