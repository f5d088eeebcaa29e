/* zerosim — the pipeline (see zerosim/program.h): the cut of the blocks into
 * stages and model chunks, the interleaved schedule's messages simulated
 * (how many tied-gradient buffers its last rank keeps in flight), and the
 * order of forwards and backwards of each schedule. */
#include "zerosim/program.h"
#include "zerosim/error.h"

#include <stdlib.h>
#include <string.h>

/* "parameters": the blocks of each stage, [*lo, *hi] (1-based units), as
 * the greedy cut under the least bottleneck X for which it is feasible: a
 * stage closes before block u when u would take it over X, or when the
 * blocks left are as many as the stages left. w[u]: unit u's weight. */
static int zs_pp_cut(const size_t *w, int L, int P, size_t X, int *first_block)
{
    int U = L + 2, parts = 0;
    size_t cur = 0;
    for (int u = 0; u < U; u++) {
        int block = u >= 1 && u <= L, can_cut = u >= 2 && u <= L; /* never the head alone */
        int left_blocks = L - u + 1, left_parts = P - parts - 1;
        if (w[u] > X)
            return -1;
        if (can_cut && parts + 1 < P && (cur + w[u] > X || left_blocks == left_parts)) {
            if (first_block)
                first_block[++parts] = u;
            else
                parts++;
            cur = 0;
        } else if (cur + w[u] > X) {
            return -1; /* a part over X that cannot be cut */
        }
        cur += w[u];
        (void)block;
    }
    return parts + 1 == P ? 0 : -1;
}

int zs_pp_stage_config(zs_run_config *cfg, int stage)
{
    zs_model_config *mc = &cfg->model;
    int L = mc->n_layer, P = cfg->pp;
    if (!zs_model_is_decoder(mc))
        ZS_FAIL("pipeline parallelism cuts a decoder's blocks into stages: use --model gpt or "
                "llama");
    if (P < 1 || P > L)
        ZS_FAIL("--pp %d is more pipeline stages than the model's %d blocks: every stage needs "
                "at least one block", P, L);
    if (stage < 0 || stage >= P)
        ZS_FAIL("internal: pipeline stage %d of %d", stage, P);
    if (cfg->pp_schedule == ZS_PP_INTERLEAVED && cfg->virtual_stages > 1 && P > 1) {
        zs_model_config first; /* the rank's first chunk: virtual stage `stage` */
        mc->pp_stage = stage;
        ZS_TRY(zs_pp_chunk_model(cfg, 0, &first));
        *mc = first;
        return 0;
    }
    int b0, b1; /* 0-based blocks of the stage */
    if (cfg->pp_partition == ZS_PP_PARAMETERS && P > 1) {
        zs_model_config whole = *mc;
        whole.pp_on = 0;
        zs_model *m;
        ZS_TRY(zs_model_create(&whole, &m));
        size_t *w = malloc((size_t)(L + 2) * sizeof *w), lo = 0, hi = 0;
        int *first = malloc((size_t)(P + 1) * sizeof *first);
        if (!w || !first) {
            free(w);
            free(first);
            zs_model_destroy(m);
            ZS_FAIL("out of host memory partitioning the pipeline");
        }
        for (int u = 0; u < L + 2; u++) {
            w[u] = zs_model_unit_elems(m, u);
            hi += w[u];
            if (w[u] > lo)
                lo = w[u];
        }
        zs_model_destroy(m);
        while (lo < hi) { /* the least X the cut reaches P stages under */
            size_t mid = lo + (hi - lo) / 2;
            if (zs_pp_cut(w, L, P, mid, NULL) == 0)
                hi = mid;
            else
                lo = mid + 1;
        }
        first[0] = 1;
        int rc = zs_pp_cut(w, L, P, lo, first);
        first[P] = L + 1;
        b0 = first[stage] - 1;
        b1 = first[stage + 1] - 2;
        free(w);
        free(first);
        if (rc)
            ZS_FAIL("internal: no balanced pipeline partition of %d blocks into %d stages", L, P);
    } else {
        int q = L / P, r = L % P; /* the first r stages hold q + 1 blocks */
        b0 = stage * q + (stage < r ? stage : r);
        b1 = b0 + q + (stage < r) - 1;
    }
    mc->pp_on = P > 1;
    mc->pp_stage = stage;
    mc->pp_first = stage == 0 ? 0 : b0 + 1;
    mc->pp_last = stage == P - 1 ? L + 1 : b1 + 1;
    return 0;
}

int zs_pp_chunk_model(const zs_run_config *cfg, int chunk, zs_model_config *out)
{
    zs_run_config v = *cfg; /* a uniform pipeline of P·v stages */
    int P = cfg->pp, rank = cfg->model.pp_stage;
    v.pp = P * cfg->virtual_stages;
    v.pp_schedule = ZS_PP_1F1B;
    v.pp_partition = ZS_PP_UNIFORM;
    v.virtual_stages = 1;
    if (chunk < 0 || chunk >= cfg->virtual_stages)
        ZS_FAIL("internal: model chunk %d of %d", chunk, cfg->virtual_stages);
    ZS_TRY(zs_pp_stage_config(&v, chunk * P + rank));
    *out = v.model;
    out->pp_stage = rank;
    return 0;
}

/* ---- the interleaved schedule's messages, simulated ---------------------- */

enum { ZS_SIM_RECV, ZS_SIM_SEND, ZS_SIM_WAIT_SLOT, ZS_SIM_WAIT_TIED };
enum { ZS_SIM_ACT, ZS_SIM_GRAD, ZS_SIM_TIED };

typedef struct {
    int kind, ch, arg; /* arg: the slot (WAIT_SLOT, SEND), micro-batch (WAIT_TIED) */
} zs_sim_ev;

typedef struct {
    int P, v, m, k;
    zs_sim_ev **ev;    /* [P] each rank's events */
    int *nev, *pc;     /* [P] */
    int *posted, *got; /* [channel] sends posted, receives done */
    int **pch, **pidx, **pslot, *npend; /* [P][..] each rank's pending sends */
} zs_sim;

static int zs_sim_ch(const zs_sim *x, int from, int to, int tag)
{
    return (from * x->P + to) * 3 + tag;
}

/* Rank r's events of its schedule, in the engine's order of ops. */
static int zs_sim_events(zs_sim *x, int r, const zs_pp_item *it, int n, const int *slot0,
                         const int *cslots)
{
    int P = x->P, PV = x->P * x->v, prev = (r + P - 1) % P, next = (r + 1) % P, e = 0;
    zs_sim_ev *ev = x->ev[r];
#define ZS_EV(k, c, a) (ev[e++] = (zs_sim_ev){.kind = (k), .ch = (c), .arg = (a)})
    for (int i = 0; i < n; i++) {
        int c = it[i].chunk, a = it[i].micro, vs = c * P + r;
        int slot = slot0[c] + a % cslots[c];
        if (!it[i].backward) { /* recv_act, forward, send_act */
            ZS_EV(ZS_SIM_WAIT_SLOT, -1, slot);
            if (vs > 0)
                ZS_EV(ZS_SIM_RECV, zs_sim_ch(x, prev, r, ZS_SIM_ACT), 0);
            if (vs < PV - 1)
                ZS_EV(ZS_SIM_SEND, zs_sim_ch(x, r, next, ZS_SIM_ACT), slot);
            continue;
        }
        if (vs < PV - 1) /* recv_grad, backward, [tied], send_grad */
            ZS_EV(ZS_SIM_RECV, zs_sim_ch(x, next, r, ZS_SIM_GRAD), 0);
        ZS_EV(ZS_SIM_WAIT_SLOT, -1, slot);
        if (vs == PV - 1) {
            ZS_EV(ZS_SIM_WAIT_TIED, zs_sim_ch(x, r, 0, ZS_SIM_TIED), a);
            ZS_EV(ZS_SIM_SEND, zs_sim_ch(x, r, 0, ZS_SIM_TIED), -1);
        }
        if (vs == 0)
            ZS_EV(ZS_SIM_RECV, zs_sim_ch(x, P - 1, 0, ZS_SIM_TIED), 0);
        if (vs > 0)
            ZS_EV(ZS_SIM_SEND, zs_sim_ch(x, r, prev, ZS_SIM_GRAD), slot);
    }
#undef ZS_EV
    return e;
}

/* One event of rank r, if it can run now: 1, else 0. */
static int zs_sim_step(zs_sim *x, int r)
{
    const zs_sim_ev *ev = &x->ev[r][x->pc[r]];
    int n = x->npend[r], k = 0;
    switch (ev->kind) {
    case ZS_SIM_RECV:
        if (x->posted[ev->ch] <= x->got[ev->ch])
            return 0;
        x->got[ev->ch]++;
        break;
    case ZS_SIM_SEND:
        x->pch[r][n] = ev->ch;
        x->pidx[r][n] = x->posted[ev->ch]++;
        x->pslot[r][n] = ev->arg;
        x->npend[r]++;
        break;
    case ZS_SIM_WAIT_TIED: /* the k-th last send on the channel was received */
        if (ev->arg >= x->k && x->got[ev->ch] <= ev->arg - x->k)
            return 0;
        break;
    case ZS_SIM_WAIT_SLOT:
        for (int i = 0; i < n; i++)
            if (x->pslot[r][i] == ev->arg && x->got[x->pch[r][i]] <= x->pidx[r][i])
                return 0;
        for (int i = 0; i < n; i++) /* the ones received: done */
            if (x->got[x->pch[r][i]] <= x->pidx[r][i]) {
                x->pch[r][k] = x->pch[r][i];
                x->pidx[r][k] = x->pidx[r][i];
                x->pslot[r][k++] = x->pslot[r][i];
            }
        x->npend[r] = k;
        break;
    }
    x->pc[r]++;
    return 1;
}

/* 1 when every rank finishes with k tied buffers, 0 when they deadlock,
 * -1 out of memory. */
static int zs_sim_run(int P, int v, int m, int k)
{
    int n = 2 * m * v, ok = -1;
    zs_sim x = {.P = P, .v = v, .m = m, .k = k};
    zs_pp_item *it = malloc((size_t)n * sizeof *it);
    int *live = calloc((size_t)v, sizeof(int)), *cslots = calloc((size_t)v, sizeof(int));
    int *slot0 = calloc((size_t)v, sizeof(int));
    x.ev = calloc((size_t)P, sizeof *x.ev);
    x.pch = calloc((size_t)P, sizeof *x.pch);
    x.pidx = calloc((size_t)P, sizeof *x.pidx);
    x.pslot = calloc((size_t)P, sizeof *x.pslot);
    x.nev = calloc((size_t)P, sizeof(int));
    x.pc = calloc((size_t)P, sizeof(int));
    x.npend = calloc((size_t)P, sizeof(int));
    x.posted = calloc((size_t)P * P * 3, sizeof(int));
    x.got = calloc((size_t)P * P * 3, sizeof(int));
    if (!it || !live || !cslots || !slot0 || !x.ev || !x.pch || !x.pidx || !x.pslot || !x.nev ||
        !x.pc || !x.npend || !x.posted || !x.got)
        goto out;
    for (int r = 0; r < P; r++) {
        x.ev[r] = malloc((size_t)(5 * n) * sizeof(zs_sim_ev));
        x.pch[r] = malloc((size_t)(2 * n) * sizeof(int));
        x.pidx[r] = malloc((size_t)(2 * n) * sizeof(int));
        x.pslot[r] = malloc((size_t)(2 * n) * sizeof(int));
        if (!x.ev[r] || !x.pch[r] || !x.pidx[r] || !x.pslot[r])
            goto out;
        zs_pp_schedule_items(ZS_PP_INTERLEAVED, P, v, r, m, it);
        memset(live, 0, (size_t)v * sizeof(int)); /* the slots, as zs_shape_chunks counts them */
        memset(cslots, 0, (size_t)v * sizeof(int));
        for (int i = 0; i < n; i++) {
            int c = it[i].chunk;
            live[c] += it[i].backward ? -1 : 1;
            cslots[c] = live[c] > cslots[c] ? live[c] : cslots[c];
        }
        for (int c = 1; c < v; c++)
            slot0[c] = slot0[c - 1] + cslots[c - 1];
        x.nev[r] = zs_sim_events(&x, r, it, n, slot0, cslots);
    }
    for (int moved = 1; moved;) {
        moved = 0;
        for (int r = 0; r < P; r++)
            while (x.pc[r] < x.nev[r] && zs_sim_step(&x, r))
                moved = 1;
    }
    ok = 1;
    for (int r = 0; r < P; r++)
        if (x.pc[r] < x.nev[r])
            ok = 0;
out:
    for (int r = 0; x.ev && r < P; r++) {
        free(x.ev[r]);
        free(x.pch ? x.pch[r] : NULL);
        free(x.pidx ? x.pidx[r] : NULL);
        free(x.pslot ? x.pslot[r] : NULL);
    }
    free(x.ev);
    free(x.pch);
    free(x.pidx);
    free(x.pslot);
    free(x.nev);
    free(x.pc);
    free(x.npend);
    free(x.posted);
    free(x.got);
    free(it);
    free(live);
    free(cslots);
    free(slot0);
    return ok;
}

int zs_pp_interleaved_tied_bufs(int P, int v, int m)
{
    if (zs_sim_run(P, v, m, m) != 1)
        return -1;
    int lo = 1, hi = m; /* more buffers never make a rank wait longer */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, ok = zs_sim_run(P, v, m, mid);
        if (ok < 0)
            return -1;
        if (ok)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

double zs_pp_ideal_bubble(int P, int v, int m)
{
    return (double)(P - 1) / ((double)v * m + P - 1);
}

int zs_pp_warmup(zs_pp_schedule sched, int P, int rank, int m)
{
    if (sched == ZS_PP_GPIPE)
        return m;
    int w = P - rank - 1;
    return w < m ? w : m;
}

int zs_pp_interleaved_warmup(int P, int v, int rank, int m)
{
    int total = m * v, w = 2 * (P - rank - 1) + (v - 1) * P;
    if (m == P) /* Megatron-LM: all warm-up when the micro-batches are P */
        return total;
    return w < total ? w : total;
}

/* The interleaved schedule's k-th forward (or backward) item. */
static zs_pp_item zs_pp_interleaved_item(int P, int v, int k, int backward)
{
    int group = k / (P * v), in_group = k % (P * v), chunk = in_group / P;
    return (zs_pp_item){.backward = backward, .chunk = backward ? v - 1 - chunk : chunk,
                        .micro = group * P + in_group % P};
}

int zs_pp_schedule_items(zs_pp_schedule sched, int P, int v, int rank, int m, zs_pp_item *out)
{
    int il = sched == ZS_PP_INTERLEAVED, total = il ? m * v : m, n = 0;
    int w = il ? zs_pp_interleaved_warmup(P, v, rank, m)
               : P > 1 ? zs_pp_warmup(sched, P, rank, m) : 0;
#define ZS_ITEM(k, bw)                                                                        \
    (out[n++] = il ? zs_pp_interleaved_item(P, v, (k), (bw))                                  \
                   : (zs_pp_item){.backward = (bw), .chunk = 0, .micro = (k)})
    for (int k = 0; k < w; k++)
        ZS_ITEM(k, 0);
    for (int i = 0; i < total - w; i++) {
        ZS_ITEM(w + i, 0);
        ZS_ITEM(i, 1);
    }
    for (int i = total - w; i < total; i++)
        ZS_ITEM(i, 1);
#undef ZS_ITEM
    return n;
}
