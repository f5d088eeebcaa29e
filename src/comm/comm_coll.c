/* zerosim — the collectives: reduce-scatter (blocking and not), the in-place
 * allgather, test and wait, allreduces, allgathers and gathers of scalars,
 * the all-to-all of bytes, the barrier. Each is recorded in the ledger. */
#include "comm_impl.h"
#include "zerosim/backend.h"
#include "zerosim/comm.h"
#include "zerosim/error.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t zs_comm_total(zs_comm_t c, const int *counts)
{
    size_t total = 0;
    for (int r = 0; r < c->size; r++)
        total += (size_t)counts[r];
    return total;
}

int zs_comm_reduce_scatter(zs_comm_t c, const void *send, void *recv, const int *counts,
                           zs_comm_type t, int layer)
{
    if (c->rs_pending)
        ZS_FAIL("internal: a reduce-scatter started while another is in flight on the same "
                "communicator");
    size_t total = zs_comm_total(c, counts);
    zs_comm_record rec = zs_comm_rec(c, ZS_OP_REDUCE_SCATTER, layer, total, t);
    double t0 = zs_mpi_wtime();
    ZS_TRY(zs_comm_reduce_scatter_run(c, send, recv, counts, t, total));
    if (!c->phantom && c->size > 1)
        rec.seconds = zs_mpi_wtime() - t0;
    zs_comm_record_add(c, &rec);
    return 0;
}

int zs_comm_ireduce_scatter(zs_comm_t c, const void *send, void *recv, const int *counts,
                            zs_comm_type t, int layer, void **request)
{
    *request = NULL;
    if (c->rs_pending)
        ZS_FAIL("internal: a reduce-scatter started while another is in flight on the same "
                "communicator");
    zs_comm_pending *p = calloc(1, sizeof *p);
    if (!p)
        ZS_FAIL("out of host memory for a pending reduce-scatter");
    size_t total = zs_comm_total(c, counts);
    p->r = zs_comm_rec(c, ZS_OP_REDUCE_SCATTER, layer, total, t);
    p->req = MPI_REQUEST_NULL;
    p->what = "reduce-scatter";
    p->t0 = zs_mpi_wtime();
    int rc = 0;
    if (c->qgz && (t == ZS_CT_F32 || t == ZS_CT_BF16 || t == ZS_CT_F16)) {
        /* qgZ: two all-to-alls, each recorded; complete on return */
        rc = zs_comm_qgz(c, send, recv, counts, t, layer);
        if (rc) {
            free(p);
            return rc;
        }
        p->norec = 1;
        p->t1 = zs_mpi_wtime();
        c->rs_pending = 1;
        *request = p;
        return 0;
    }
    if (c->phantom || c->size == 1 || c->staged || c->hier_node ||
        !zs_comm_ring_fits(c, counts, t, c->scratch, c->scratch_bytes)) {
        /* no ring to drive (or two levels): complete on return (MPI_Reduce_scatter's own
         * progress is Open MPI's, which moves only inside MPI calls) */
        rc = zs_comm_reduce_scatter_run(c, send, recv, counts, t, total);
        p->t1 = zs_mpi_wtime();
    } else {
        p->seq = zs_comm_enter(c);
        rc = zs_ring_start(c, send, recv, counts, t, c->scratch, &p->ring);
        void *vp = p;
        if (!rc)
            rc = zs_comm_test(c, &vp);
    }
    if (rc) {
        zs_ring_free(p->ring);
        free(p);
        return rc;
    }
    c->rs_pending = 1;
    *request = p;
    return 0;
}

int zs_comm_test(zs_comm_t c, void **request)
{
    zs_comm_pending *p = *request;
    if (!p || p->t1 > 0.0)
        return 0;
    if (p->ring) {
        ZS_TRY(zs_ring_advance(c, p->ring));
        if (p->ring->done)
            p->t1 = zs_mpi_wtime();
        return 0;
    }
    int flag = 0, rc = MPI_Test(&p->req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, p->what ? p->what : "allgather");
    return 0;
}

int zs_comm_allgatherv_inplace(zs_comm_t c, void *buf, const int *counts, const int *displs,
                               zs_comm_type t, int layer)
{
    void *req = NULL;
    ZS_TRY(zs_comm_iallgatherv_inplace(c, buf, counts, displs, t, layer, &req));
    return zs_comm_wait(c, &req);
}

int zs_comm_iallgatherv_inplace(zs_comm_t c, void *buf, const int *counts, const int *displs,
                                zs_comm_type t, int layer, void **request)
{
    *request = NULL;
    zs_comm_pending *p = calloc(1, sizeof *p);
    if (!p)
        ZS_FAIL("out of host memory for a pending allgather");
    size_t total = 0;
    for (int r = 0; r < c->size; r++)
        total += (size_t)counts[r];
    if (c->qwz && c->ledger->phase == ZS_PHASE_FORWARD &&
        (t == ZS_CT_F32 || t == ZS_CT_BF16 || t == ZS_CT_F16))
        return zs_comm_iallgather_q8(c, buf, counts, displs, t, layer, p, request);
    p->r = zs_comm_rec(c, ZS_OP_ALLGATHER, layer, total, t);
    if (c->size == 1 || c->phantom) { /* nothing to exchange: completes at once */
        p->req = MPI_REQUEST_NULL;
        *request = p;
        return 0;
    }
    p->t0 = zs_mpi_wtime();
    p->seq = zs_comm_enter(c);
    void *mbuf = buf;
    if (c->staged) {
        if (c->use_coll && zs_comm_coll_type(t) >= 0) { /* complete on return */
            int rc = zs_backend_coll_allgatherv(c->be, buf, counts, displs,
                                                (zs_coll_type)zs_comm_coll_type(t), c->size);
            if (rc) {
                free(p);
                return rc;
            }
            p->req = MPI_REQUEST_NULL;
            *request = p;
            return 0;
        }
        /* a host copy of the whole span per request (prefetches overlap),
         * this rank's part copied in; the rest comes back on wait */
        size_t es = zs_comm_type_size(t), span = 0;
        for (int r = 0; r < c->size; r++)
            if (counts[r] && (size_t)displs[r] + (size_t)counts[r] > span)
                span = (size_t)displs[r] + (size_t)counts[r];
        p->dev = buf;
        p->host_bytes = span * es;
        p->host = malloc(p->host_bytes + 1);
        if (!p->host) {
            free(p);
            ZS_FAIL("out of host memory staging an allgather of %zu bytes", span * es);
        }
        size_t mine = (size_t)displs[c->rank] * es;
        zs_backend_copy_d2h(c->be, (char *)p->host + mine, (const char *)buf + mine,
                            (size_t)counts[c->rank] * es);
        mbuf = p->host;
        p->to_dev = 1;
    }
    if (c->hier_node) { /* two levels, complete on return (no overlap) */
        int hrc = zs_comm_hier_allgather(c, mbuf, counts, displs, t);
        if (hrc) {
            free(p->host);
            free(p);
            return hrc;
        }
        p->req = MPI_REQUEST_NULL;
        *request = p;
        return 0;
    }
    int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, mbuf, counts, displs,
                             zs_mpi_type(t), c->comm, &p->req);
    if (rc != MPI_SUCCESS) {
        free(p->host);
        free(p);
        return zs_mpi_fail(rc, "MPI_Iallgatherv");
    }
    *request = p;
    return 0;
}

int zs_comm_wait(zs_comm_t c, void **request)
{
    zs_comm_pending *p = *request;
    if (!p)
        return 0;
    *request = NULL;
    int rc = 0;
    if (p->ring) {
        c->rs_pending = 0;
        if (p->t1 == 0.0) {
            rc = zs_ring_finish(c, p->ring, p->seq);
            p->t1 = zs_mpi_wtime();
        }
        p->r.seconds = p->t1 - p->t0;
    } else if (p->what && !p->p2p) { /* a reduce-scatter that completed when it started */
        c->rs_pending = 0;
        if (c->size > 1 && !c->phantom)
            p->r.seconds = p->t1 - p->t0;
    } else if (c->size > 1 && !c->phantom) {
        rc = zs_comm_finish(c, 1, &p->req, p->seq, p->p2p ? "point-to-point send" : "allgather");
        if (!rc && p->host && p->to_dev)
            zs_backend_copy_h2d(c->be, p->dev, p->host, p->host_bytes);
        size_t es = zs_comm_type_size(p->qt);
        for (int r = 0; !rc && p->qbuf && p->qcounts && r < c->size; r++) /* qwZ: every part */
            zs_q8_decode((const unsigned char *)p->qbuf + p->qdispls[r], (size_t)p->ecounts[r],
                         p->qt, (char *)p->qdst + (size_t)p->edispls[r] * es);
        p->r.seconds = zs_mpi_wtime() - p->t0;
    }
    if (!rc && !p->norec)
        zs_comm_record_add(c, &p->r);
    zs_ring_free(p->ring);
    free(p->host);
    zs_comm_qbuf_free(p);
    free(p->qcounts);
    free(p);
    return rc;
}

/* In-place MPI_Allreduce with op (staged through host memory for a device
 * backend), recorded as an allreduce. */
static int zs_comm_allreduce_op(zs_comm_t c, void *buf, size_t n, zs_comm_type t, MPI_Op op,
                                int layer)
{
    zs_comm_record rec = zs_comm_rec(c, ZS_OP_ALLREDUCE, layer, n, t);
    if (n > (size_t)INT_MAX)
        ZS_FAIL("allreduce of %zu elements is more than one MPI call can carry", n);
    if (c->size == 1 || c->phantom) {
        zs_comm_record_add(c, &rec);
        return 0;
    }
    double t0 = zs_mpi_wtime();
    size_t bytes = n * zs_comm_type_size(t);
    void *mbuf = buf;
    if (c->staged) {
        ZS_TRY(zs_comm_grow(&c->h_send, &c->h_send_cap, bytes + 1));
        zs_backend_copy_d2h(c->be, c->h_send, buf, bytes);
        mbuf = c->h_send;
    }
    long long seq = zs_comm_enter(c);
    int rc;
    if (zs_comm_watchdog_running()) { /* blocking, with the watchdog's deadline */
        zs_guard_begin(c, seq, "allreduce");
        rc = MPI_Allreduce(MPI_IN_PLACE, mbuf, (int)n, zs_mpi_type(t), op, c->comm);
        zs_guard_end();
    } else {
        MPI_Request req;
        rc = MPI_Iallreduce(MPI_IN_PLACE, mbuf, (int)n, zs_mpi_type(t), op, c->comm, &req);
        if (rc == MPI_SUCCESS && zs_comm_finish(c, 1, &req, seq, "allreduce"))
            return -1;
    }
    if (rc == MPI_SUCCESS && c->staged)
        zs_backend_copy_h2d(c->be, buf, c->h_send, bytes);
    rec.seconds = zs_mpi_wtime() - t0;
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, "MPI_Allreduce");
    zs_comm_record_add(c, &rec);
    return 0;
}

int zs_comm_allreduce_sum(zs_comm_t c, void *buf, size_t n, zs_comm_type t, int layer)
{
    return zs_comm_allreduce_op(c, buf, n, t, zs_sum_op(c, t), layer);
}

int zs_comm_allreduce_max_f32(zs_comm_t c, float *buf, size_t n, int layer)
{
    return zs_comm_allreduce_op(c, buf, n, ZS_CT_F32, MPI_MAX, layer);
}

int zs_comm_allgather_small(zs_comm_t c, const void *send, void *recv, int count, zs_comm_type t)
{
    zs_comm_record rec = zs_comm_rec(c, ZS_OP_SCALARS, -1, (size_t)count * (size_t)c->size, t);
    if (c->phantom) { /* host scalars: the simulated others contribute zeros */
        size_t n = (size_t)count * zs_comm_type_size(t);
        memset(recv, 0, n * (size_t)c->size);
        memcpy((char *)recv + (size_t)c->rank * n, send, n);
        zs_comm_record_add(c, &rec);
        return 0;
    }
    if (c->size == 1) {
        memmove(recv, send, (size_t)count * zs_comm_type_size(t));
        zs_comm_record_add(c, &rec);
        return 0;
    }
    double t0 = zs_mpi_wtime();
    MPI_Request req;
    long long seq = zs_comm_enter(c);
    int rc = MPI_Iallgather(send, count, zs_mpi_type(t), recv, count, zs_mpi_type(t), c->comm,
                            &req);
    if (rc == MPI_SUCCESS && zs_comm_finish(c, 1, &req, seq, "allgather of scalars"))
        return -1;
    rec.seconds = zs_mpi_wtime() - t0;
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, "MPI_Allgather");
    zs_comm_record_add(c, &rec);
    return 0;
}

int zs_comm_allreduce_max_int(zs_comm_t c, int *v)
{
    zs_comm_record rec = zs_comm_rec(c, ZS_OP_SCALARS, -1, (size_t)c->size, ZS_CT_INT);
    if (c->size == 1 || c->phantom) {
        zs_comm_record_add(c, &rec);
        return 0;
    }
    double t0 = zs_mpi_wtime();
    long long seq = zs_comm_enter(c);
    int rc;
    if (zs_comm_watchdog_running()) {
        zs_guard_begin(c, seq, "allreduce of a flag");
        rc = MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_INT, MPI_MAX, c->comm);
        zs_guard_end();
    } else {
        MPI_Request req;
        rc = MPI_Iallreduce(MPI_IN_PLACE, v, 1, MPI_INT, MPI_MAX, c->comm, &req);
        if (rc == MPI_SUCCESS && zs_comm_finish(c, 1, &req, seq, "allreduce of a flag"))
            return -1;
    }
    rec.seconds = zs_mpi_wtime() - t0;
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, "MPI_Allreduce");
    zs_comm_record_add(c, &rec);
    return 0;
}

int zs_comm_gather_root(zs_comm_t c, const void *send, int count, void *recv, zs_comm_type t)
{
    zs_comm_record rec = zs_comm_rec(c, ZS_OP_GATHER, -1, (size_t)count * (size_t)c->size, t);
    if (c->phantom) {
        zs_comm_record_add(c, &rec);
        return 0;
    }
    if (c->size == 1) {
        memmove(recv, send, (size_t)count * zs_comm_type_size(t));
        zs_comm_record_add(c, &rec);
        return 0;
    }
    double t0 = zs_mpi_wtime();
    MPI_Request req;
    long long seq = zs_comm_enter(c);
    int rc = MPI_Igather(send, count, zs_mpi_type(t), recv, count, zs_mpi_type(t), 0, c->comm,
                         &req);
    if (rc == MPI_SUCCESS && zs_comm_finish(c, 1, &req, seq, "gather to rank 0"))
        return -1;
    rec.seconds = zs_mpi_wtime() - t0;
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, "MPI_Gather");
    zs_comm_record_add(c, &rec);
    return 0;
}

int zs_comm_alltoallv_bytes(zs_comm_t c, const void *send, const int *scount, const int *sdispl,
                            void *recv, const int *rcount, const int *rdispl, int layer)
{
    size_t total = 0, others = 0;
    for (int q = 0; q < c->size; q++) {
        total += (size_t)scount[q];
        if (q != c->rank)
            others += (size_t)scount[q];
    }
    zs_comm_record rec = zs_comm_rec(c, ZS_OP_ALLTOALL, layer, total, ZS_CT_NTYPES);
    rec.elem_size = 1;
    rec.wire_bytes = (double)others;
    rec.inter_bytes = 0.0; /* what it sends to ranks on other nodes, exactly */
    for (int q = 0; q < c->size; q++)
        if (c->node_of && c->node_of[q] != c->node_of[c->rank])
            rec.inter_bytes += (double)scount[q];
    rec.inter_api_bytes = rec.inter_bytes;
    if (c->phantom) {
        zs_comm_record_add(c, &rec);
        return 0;
    }
    if (c->size == 1) {
        if (c->staged)
            zs_backend_copy_d2d(c->be, (char *)recv + rdispl[0], (const char *)send + sdispl[0],
                                (size_t)scount[0]);
        else
            memmove((char *)recv + rdispl[0], (const char *)send + sdispl[0], (size_t)scount[0]);
        zs_comm_record_add(c, &rec);
        return 0;
    }
    double t0 = zs_mpi_wtime();
    const void *msend = send;
    void *mrecv = recv;
    size_t sspan = 0, rspan = 0;
    if (c->staged) { /* whole spans through host buffers */
        for (int q = 0; q < c->size; q++) {
            if ((size_t)sdispl[q] + (size_t)scount[q] > sspan)
                sspan = (size_t)sdispl[q] + (size_t)scount[q];
            if ((size_t)rdispl[q] + (size_t)rcount[q] > rspan)
                rspan = (size_t)rdispl[q] + (size_t)rcount[q];
        }
        ZS_TRY(zs_comm_grow(&c->h_send, &c->h_send_cap, sspan + 1));
        ZS_TRY(zs_comm_grow(&c->h_recv, &c->h_recv_cap, rspan + 1));
        zs_backend_copy_d2h(c->be, c->h_send, send, sspan);
        msend = c->h_send;
        mrecv = c->h_recv;
    }
    MPI_Request req;
    long long seq = zs_comm_enter(c);
    int rc = MPI_Ialltoallv(msend, scount, sdispl, MPI_BYTE, mrecv, rcount, rdispl, MPI_BYTE,
                            c->comm, &req);
    if (rc == MPI_SUCCESS && zs_comm_finish(c, 1, &req, seq, "all-to-all"))
        return -1;
    if (rc == MPI_SUCCESS && c->staged)
        zs_backend_copy_h2d(c->be, recv, c->h_recv, rspan);
    rec.seconds = zs_mpi_wtime() - t0;
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, "MPI_Alltoallv");
    zs_comm_record_add(c, &rec);
    return 0;
}

int zs_comm_barrier(zs_comm_t c)
{
    if (c->size == 1 || c->phantom)
        return 0;
    MPI_Request req;
    long long seq = zs_comm_enter(c);
    int rc = MPI_Ibarrier(c->comm, &req);
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, "MPI_Ibarrier");
    return zs_comm_finish(c, 1, &req, seq, "barrier");
}
