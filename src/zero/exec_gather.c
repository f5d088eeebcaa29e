/* zerosim — the engine: stage 3's gathers (see engine_impl.h).
 *
 * Each unit gathers its ranges (shape->granges) with non-blocking
 * allgathers: GATHER starts them (this rank's part from its shard, from
 * the host with offload_param, from the swap file with nvme), WAIT
 * completes them, RELEASE frees them. With ZeRO++ hpZ the forward's
 * gather keeps this rank's part of the secondary partition, from which
 * the backward's gathers run inside the node's secondary group.
 */
#include "zero/engine_impl.h"
#include "zerosim/error.h"

#include <stdlib.h>

/* hpZ: the part of [lo, hi) that each rank of the secondary group holds
 * (rank d: [d Q, (d+1) Q), Q = padded / K), relative to lo. */
static void zs_hpz_counts(const zs_engine *e, size_t lo, size_t hi, int *counts, int *displs)
{
    for (int d = 0; d < e->hpz_k; d++) {
        size_t a = (size_t)d * e->hpz_shard_n, b = a + e->hpz_shard_n;
        size_t s = lo > a ? lo : a, t = hi < b ? hi : b;
        counts[d] = t > s ? (int)(t - s) : 0;
        displs[d] = t > s ? (int)(s - lo) : 0;
    }
}

/* Gather range i over a group of nranks: its counts and displacements
 * (filled by the caller) and its buffer, counted as params. */
static int zs_gather_range_alloc(zs_engine *e, int i, int nranks)
{
    const zs_step_range *r = &e->shape->granges[i];
    e->gather_counts[i] = malloc((size_t)nranks * sizeof(int));
    e->gather_displs[i] = malloc((size_t)nranks * sizeof(int));
    if (!e->gather_counts[i] || !e->gather_displs[i])
        ZS_FAIL("out of host memory for a parameter gather");
    return zs_mem_alloc(e->mem, ZS_MEM_PARAMS, (r->hi - r->lo) * e->param_elsize,
                        &e->gather_buf[i]);
}

/* Unit u's gathered parameters are live from their start. */
static void zs_gather_count_live(zs_engine *e, int u)
{
    e->live_params += e->shape->gelems[u];
    if (e->live_params > e->live_params_peak)
        e->live_params_peak = e->live_params;
}

/* hpZ: unit u's backward gather, inside the secondary group, from the
 * secondary partition (the same bytes the forward gather brought). */
static int zs_gather_start_hpz(zs_engine *e, int u)
{
    const zs_step_shape *s = e->shape;
    int K = e->hpz_k, me = zs_comm_rank(e->hpz);
    e->gather_start_s[u] = zs_clock();
    for (int i = s->gfirst[u]; i < s->gfirst[u] + s->gn[u]; i++) {
        const zs_step_range *r = &s->granges[i];
        ZS_TRY(zs_gather_range_alloc(e, i, K));
        zs_hpz_counts(e, r->lo, r->hi, e->gather_counts[i], e->gather_displs[i]);
        int cnt = e->gather_counts[i][me], dsp = e->gather_displs[i][me];
        if (cnt && !e->phantom)
            zs_backend_copy_d2d(e->be, (char *)e->gather_buf[i] + (size_t)dsp * e->param_elsize,
                                (const char *)e->hpz_shard +
                                    (r->lo + (size_t)dsp - e->hpz_shard_lo) * e->param_elsize,
                                (size_t)cnt * e->param_elsize);
        e->gather_comm[i] = e->hpz;
        ZS_TRY(zs_comm_iallgatherv_inplace(e->hpz, e->gather_buf[i], e->gather_counts[i],
                                           e->gather_displs[i], e->comm_dtype, u,
                                           &e->gather_req[i]));
        e->gather_last = i;
    }
    zs_gather_count_live(e, u);
    return 0;
}

/* hpZ: after a forward gather of unit u, this rank's part of the secondary
 * partition from what it brought. */
static void zs_hpz_keep(zs_engine *e, int u)
{
    const zs_step_shape *s = e->shape;
    for (int i = s->gfirst[u]; i < s->gfirst[u] + s->gn[u] && !e->phantom; i++) {
        const zs_step_range *r = &s->granges[i];
        size_t a = r->lo > e->hpz_shard_lo ? r->lo : e->hpz_shard_lo;
        size_t b =
            r->hi < e->hpz_shard_lo + e->hpz_shard_n ? r->hi : e->hpz_shard_lo + e->hpz_shard_n;
        if (b > a)
            zs_backend_copy_d2d(e->be,
                                (char *)e->hpz_shard + (a - e->hpz_shard_lo) * e->param_elsize,
                                (const char *)e->gather_buf[i] + (a - r->lo) * e->param_elsize,
                                (b - a) * e->param_elsize);
    }
}

/* Start gathering unit u's ranges (non-blocking). */
static int zs_gather_start(zs_engine *e, int u, zs_comm_phase phase)
{
    const zs_step_shape *s = e->shape;
    const zs_partition *p = &e->part;
    int N = p->world;
    if (e->hpz && phase != ZS_PHASE_FORWARD)
        return zs_gather_start_hpz(e, u);
    e->gather_start_s[u] = zs_clock();
    for (int i = s->gfirst[u]; i < s->gfirst[u] + s->gn[u]; i++) {
        const zs_step_range *r = &s->granges[i];
        ZS_TRY(zs_gather_range_alloc(e, i, N));
        zs_step_counts(s, r->lo, r->hi, e->gather_counts[i], e->gather_displs[i]);
        int me = p->rank, cnt = e->gather_counts[i][me], dsp = e->gather_displs[i][me];
        /* this rank's part of the range, in its shard (only when it has one) */
        size_t at = cnt ? r->lo + (size_t)dsp - p->shard_begin : 0;
        const char *mine = cnt && e->params ? (char *)e->params + at * e->param_elsize : NULL;
        if (cnt && e->param_nvme) { /* from the file to the host, then up */
            double t0 = zs_clock();
            if (!e->phantom)
                ZS_TRY(zs_engine_swap_params(e, 0, at, (size_t)cnt,
                                      (char *)e->gather_buf[i] + (size_t)dsp * e->param_elsize));
            double t1 = zs_clock();
            zs_comm_record_transfer(e->comm, ZS_OP_NVME_READ, (size_t)cnt * e->param_elsize,
                                    t1 - t0);
            zs_comm_record_transfer(e->comm, ZS_OP_H2D, (size_t)cnt * e->param_elsize, 0.0);
        } else if (cnt && e->param_host) { /* offload_param: this rank's part goes up */
            double t0 = zs_clock();
            if (!e->phantom)
                zs_backend_copy_h2d(e->be, (char *)e->gather_buf[i] + (size_t)dsp * e->param_elsize,
                                    mine, (size_t)cnt * e->param_elsize);
            zs_comm_record_transfer(e->comm, ZS_OP_H2D, (size_t)cnt * e->param_elsize,
                                    zs_clock() - t0);
        } else if (cnt) { /* put this rank's part in place */
            zs_backend_copy_d2d(e->be, (char *)e->gather_buf[i] + (size_t)dsp * e->param_elsize,
                                mine, (size_t)cnt * e->param_elsize);
        }
        e->gather_comm[i] = e->comm;
        ZS_TRY(zs_comm_iallgatherv_inplace(e->comm, e->gather_buf[i], e->gather_counts[i],
                                           e->gather_displs[i], e->comm_dtype, u,
                                           &e->gather_req[i]));
        e->gather_last = i;
    }
    zs_gather_count_live(e, u);
    return 0;
}

static int zs_gather_wait(zs_engine *e, int u, zs_comm_phase phase)
{
    const zs_step_shape *s = e->shape;
    double t0 = zs_clock();
    for (int i = s->gfirst[u]; i < s->gfirst[u] + s->gn[u]; i++) {
        ZS_TRY(zs_comm_wait(e->gather_comm[i] ? e->gather_comm[i] : e->comm, &e->gather_req[i]));
        free(e->gather_counts[i]);
        free(e->gather_displs[i]);
        e->gather_counts[i] = e->gather_displs[i] = NULL;
    }
    if (e->hpz && phase == ZS_PHASE_FORWARD)
        zs_hpz_keep(e, u);
    /* the gather ran from its start to now; only the wait was exposed */
    double t1 = zs_clock();
    e->nb_span_s += t1 - e->gather_start_s[u];
    e->nb_wait_s += t1 - t0;
    return 0;
}

void zs_engine_overlap(const zs_engine *e, double *span_s, double *wait_s)
{
    *span_s = e->nb_span_s;
    *wait_s = e->nb_wait_s;
}

void zs_engine_gather_release(zs_engine *e, int u)
{
    const zs_step_shape *s = e->shape;
    if (!e->gather_buf[s->gfirst[u]])
        return;
    for (int i = s->gfirst[u]; i < s->gfirst[u] + s->gn[u]; i++) {
        zs_comm_wait(e->gather_comm[i] ? e->gather_comm[i] : e->comm, &e->gather_req[i]);
        free(e->gather_counts[i]);
        free(e->gather_displs[i]);
        e->gather_counts[i] = e->gather_displs[i] = NULL;
        zs_mem_free(e->mem, ZS_MEM_PARAMS, e->gather_buf[i],
                    (s->granges[i].hi - s->granges[i].lo) * e->param_elsize);
        e->gather_buf[i] = NULL;
    }
    e->live_params -= s->gelems[u];
}

/* Typed pointer to entry id's parameters: the full array (stages 0-2) or
 * the gathered range that holds it (stage 3). */
const void *zs_engine_entry_params(const zs_engine *e, int u, int id)
{
    const zs_param_entry *pe = &e->lay->entries[id];
    const zs_step_shape *s = e->shape;
    size_t lo; /* the ranges are the rank's offsets */
    if (e->xsplit && pe->offset >= e->xbase && e->stage == 3) /* gathered */
        return (const char *)e->xgather + (pe->offset - e->xbase - e->xgather_lo) * e->param_elsize;
    if (e->xsplit && pe->offset >= e->xbase) /* an expert entry: the store */
        return (const char *)e->xparams + (pe->offset - e->xbase) * e->param_elsize;
    if (!zs_step_entry_local(s, e->lay, id, &lo)) /* the last stage's tied copy */
        return e->tied;
    if (e->stage < 3)
        return (const char *)e->params + lo * e->param_elsize;
    for (int i = s->gfirst[u]; i < s->gfirst[u] + s->gn[u]; i++)
        if (lo >= s->granges[i].lo && lo + pe->numel <= s->granges[i].hi)
            return (const char *)e->gather_buf[i] + (lo - s->granges[i].lo) * e->param_elsize;
    return NULL; /* unreachable: every used entry is in a gathered range */
}

size_t zs_engine_live_params_peak(const zs_engine *e) { return e->live_params_peak; }

/* ---- executors ------------------------------------------------------------- */

int zs_engine_exec_gather(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    return zs_gather_start(e, o->unit, o->phase);
}

int zs_engine_exec_wait(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    return zs_gather_wait(e, o->unit, o->phase);
}

int zs_engine_exec_release(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    zs_engine_gather_release(e, o->unit);
    return 0;
}
