/* zerosim — the engine: the pipeline's messages (see engine_impl.h).
 *
 * Activations go forward and their gradients back between neighbouring
 * pipeline ranks (a ring with the interleaved schedule's model chunks);
 * the last stage sends the head's gradient of the tied embedding to the
 * first, and the first its updated embedding to the last. Sends do not
 * wait: they complete before what they send from is written again.
 */
#include "zero/engine_impl.h"
#include "zerosim/error.h"

#include <stdlib.h>

/* ---- the pipeline's messages ---------------------------------------------- */

/* The activations of op o's micro-batch (on its model chunk). */
int zs_engine_slot_index(const zs_engine *e, const zs_step_op *o)
{
    int c = o->chunk;
    return e->slot0[c] + (o->micro > 0 ? o->micro : 0) % e->shape->cslots[c];
}

zs_acts *zs_engine_slot(zs_engine *e, const zs_step_op *o)
{
    return e->slots[zs_engine_slot_index(e, o)];
}

enum { ZS_TAG_ACT = 7101, ZS_TAG_GRAD, ZS_TAG_TIED_GRAD, ZS_TAG_TIED };

/* Send n elements to pipeline rank `to`; the buffer stays as it is until
 * zs_engine_wait_sends. */
static int zs_engine_send(zs_engine *e, int to, const void *buf, size_t n, zs_comm_type t,
                          int tag, int unit, int slot)
{
    if (e->nsends == e->capsends) {
        int cap = e->capsends ? 2 * e->capsends : 8;
        void **p = realloc(e->sends, (size_t)cap * sizeof *p);
        int *q = p ? realloc(e->send_slot, (size_t)cap * sizeof *q) : NULL;
        if (p)
            e->sends = p;
        if (!q)
            ZS_FAIL("out of host memory for the pipeline's sends");
        e->send_slot = q;
        e->capsends = cap;
    }
    ZS_TRY(zs_comm_isend(e->pp_comm, to, buf, n, t, tag, unit, &e->sends[e->nsends]));
    e->send_slot[e->nsends++] = slot;
    return 0;
}

/* The interleaved schedule: complete the pending sends from activation
 * slot `slot` only, before an op writes into it. Each of them was
 * received, or its receive is posted, before the slot's next use (the
 * activation's before this micro-batch's gradient came back; the
 * gradient's before the slot holds the next micro-batch), so no rank
 * waits on a neighbour that waits on it, as waiting for every send
 * before each compute would on the ring P - 1 -> 0. */
int zs_engine_wait_slot(zs_engine *e, int slot)
{
    int rc = 0, k = 0;
    for (int i = 0; i < e->nsends; i++) {
        if (e->send_slot[i] != slot) {
            e->sends[k] = e->sends[i];
            e->send_slot[k++] = e->send_slot[i];
        } else if (zs_comm_wait(e->pp_comm, &e->sends[i]) && !rc) {
            rc = -1;
        }
    }
    e->nsends = k;
    return rc;
}

/* Complete the pending sends: before a unit's compute or a receive
 * overwrites what they send, and at the end of the step. */
int zs_engine_wait_sends(zs_engine *e)
{
    int rc = 0;
    for (int i = 0; i < e->nsends; i++)
        if (zs_comm_wait(e->pp_comm, &e->sends[i]) && !rc)
            rc = -1;
    e->nsends = 0;
    return rc;
}

static int zs_engine_recv(zs_engine *e, int from, void *buf, size_t n, zs_comm_type t, int tag,
                          int unit)
{
    double t0 = zs_clock();
    int rc = zs_comm_recv(e->pp_comm, from, buf, n, t, tag, unit);
    e->recv_wait_s += zs_clock() - t0;
    return rc;
}

/* The previous and next pipeline ranks (a ring with model chunks). */
static int zs_engine_pp_prev(const zs_engine *e)
{
    return (e->pp_rank + e->pp_size - 1) % e->pp_size;
}

static int zs_engine_pp_next(const zs_engine *e)
{
    return (e->pp_rank + 1) % e->pp_size;
}

/* Into the stage's input: the previous unit's output. */
int zs_engine_exec_recv_act(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    size_t n;
    float *x = zs_model_unit_output(zs_engine_slot(e, o), o->unit - 1, &n);
    return zs_engine_recv(e, zs_engine_pp_prev(e), x, n, ZS_CT_F32, ZS_TAG_ACT, o->unit);
}

int zs_engine_exec_send_act(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    size_t n;
    float *x = zs_model_unit_output(zs_engine_slot(e, o), o->unit, &n);
    return zs_engine_send(e, zs_engine_pp_next(e), x, n, ZS_CT_F32, ZS_TAG_ACT, o->unit,
                          zs_engine_slot_index(e, o));
}

int zs_engine_exec_recv_grad(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    size_t n;
    if (e->shape->nchunks == 1) /* the last gradient sent came from there */
        ZS_TRY(zs_engine_wait_sends(e));
    float *x = zs_model_input_grad(zs_engine_slot(e, o), &n);
    return zs_engine_recv(e, zs_engine_pp_next(e), x, n, ZS_CT_F32, ZS_TAG_GRAD, o->unit);
}

int zs_engine_exec_send_grad(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    zs_acts *a = zs_engine_slot(e, o);
    size_t n;
    float *x = zs_model_input_grad(a, &n);
    if (e->shape->nchunks > 1) { /* sent from the slot's input, which this backward has done with */
        size_t ni;
        float *in = zs_model_unit_output(a, o->unit - 1, &ni);
        zs_backend_copy_d2d(e->be, in, x, n * 4);
        x = in;
    }
    return zs_engine_send(e, zs_engine_pp_prev(e), x, n, ZS_CT_F32, ZS_TAG_GRAD, o->unit,
                          zs_engine_slot_index(e, o));
}

/* The head's staged gradient of entry 0, copied: the first stage takes it
 * only at its embedding's backward. */
int zs_engine_exec_tied_send(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    if (e->shape->nchunks > 1) { /* buffer micro mod k, once rank 0 took what it held
                                  * (ZS_BUF_TIED_GRAD) */
        int k = o->micro % e->shape->tied_bufs;
        float *tg = e->tied_grad + (size_t)k * o->elems;
        ZS_TRY(zs_engine_wait_slot(e, -2 - k));
        zs_backend_copy_d2d(e->be, tg, e->unit_grads[0], o->elems * 4);
        return zs_engine_send(e, 0, tg, o->elems, ZS_CT_F32, ZS_TAG_TIED_GRAD, o->unit, -2 - k);
    }
    ZS_TRY(zs_comm_wait(e->pp_comm, &e->tied_req));
    zs_backend_copy_d2d(e->be, e->tied_grad, e->unit_grads[0], o->elems * 4);
    return zs_comm_isend(e->pp_comm, 0, e->tied_grad, o->elems, ZS_CT_F32, ZS_TAG_TIED_GRAD,
                         o->unit, &e->tied_req);
}

/* Added before the embedding's own, as one model adds them. */
int zs_engine_exec_tied_recv(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    ZS_TRY(zs_engine_recv(e, e->pp_size - 1, e->tied_grad, o->elems, ZS_CT_F32,
                          ZS_TAG_TIED_GRAD, o->unit));
    return zs_engine_commit_entry(e, 0, e->tied_grad);
}

/* The first stage's updated working copy (entry 0 at 0; stage 3: gathered
 * by the ops before this one). */
int zs_engine_exec_tied_sync(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)stop;
    int last = e->pp_size - 1;
    if (e->pp_rank == 0 && e->stage < 3)
        return zs_engine_send(e, last, e->params, o->elems, e->comm_dtype, ZS_TAG_TIED, o->unit,
                              -1);
    if (e->pp_rank == 0) { /* complete before the release of the gathered range frees it */
        ZS_TRY(zs_engine_send(e, last, zs_engine_entry_params(e, 0, 0), o->elems, e->comm_dtype,
                              ZS_TAG_TIED, o->unit, -1));
        return zs_engine_wait_sends(e);
    }
    return zs_comm_recv(e->pp_comm, 0, e->tied, o->elems, e->comm_dtype, ZS_TAG_TIED, o->unit);
}

/* ---- the experts' aux terms across the stages -------------------------- */

void zs_engine_pp_keep_aux(zs_engine *e, const zs_step_op *o)
{
    const zs_model_config *mc = &e->cfg.model;
    int l = o->unit - 1;
    zs_moe_stats st;
    if (o->micro < 0 || l < 0 || l >= mc->n_layer ||
        zs_model_moe_stats(zs_engine_slot(e, o), l, &st))
        return;
    e->pp_laux[(size_t)o->micro * (size_t)mc->n_layer + (size_t)l] = st.l_aux;
}

/* Each block's l_aux is this micro-batch's on the stage that holds the
 * block and 0 on every other, so the sum over the stages is that value
 * exactly (x + 0 = x): the last stage sums the terms in block order from 0,
 * as the model does after its last block without a pipeline. */
int zs_engine_pp_aux_loss(zs_engine *e)
{
    const zs_model_config *mc = &e->cfg.model;
    int GA = e->cfg.grad_accum, L = mc->n_layer, P = e->pp_size;
    size_t gl = (size_t)GA * (size_t)L;
    ZS_TRY(zs_comm_allgather_small(e->pp_comm, e->pp_laux, e->pp_laux_all, (int)gl,
                                   ZS_CT_F64));
    if (e->pp_rank != P - 1)
        return 0;
    for (int a = 0; a < GA; a++) {
        double *laux = e->pp_laux_all + (size_t)a * (size_t)L; /* stage 0's row: the sums */
        for (int l = 0; l < L; l++) {
            double v = 0.0;
            for (int s = 0; s < P; s++)
                v += laux[(size_t)s * gl + (size_t)l];
            laux[l] = v;
        }
        e->loss_local[a] = (float)(e->pp_token_loss[a] + zs_model_moe_aux_term(mc, laux));
    }
    return 0;
}
