/* zerosim — point-to-point messages: a send to rank 0, the pipeline's sends and
 * receives, and the small messages of partial sums. */
#include "comm_impl.h"
#include "zerosim/backend.h"
#include "zerosim/comm.h"
#include "zerosim/error.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int zs_comm_send_to_root(zs_comm_t c, int from, void *buf, int count, zs_comm_type t)
{
    if (from == 0 || (c->rank != 0 && c->rank != from))
        return 0;
    zs_comm_record rec = zs_comm_rec(c, ZS_OP_GATHER, -1, (size_t)count, t);
    if (c->phantom) {
        zs_comm_record_add(c, &rec);
        return 0;
    }
    double t0 = zs_mpi_wtime();
    MPI_Request req;
    long long seq = zs_comm_enter(c);
    int rc = c->rank == from
                 ? MPI_Isend(buf, count, zs_mpi_type(t), 0, 7002, c->comm, &req)
                 : MPI_Irecv(buf, count, zs_mpi_type(t), from, 7002, c->comm, &req);
    if (rc == MPI_SUCCESS && zs_comm_finish(c, 1, &req, seq, "send to rank 0"))
        return -1;
    rec.seconds = zs_mpi_wtime() - t0;
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, "MPI_Send/MPI_Recv");
    zs_comm_record_add(c, &rec);
    return 0;
}

int zs_comm_isend(zs_comm_t c, int peer, const void *buf, size_t count, zs_comm_type t, int tag,
                  int layer, void **request)
{
    *request = NULL;
    if (count > (size_t)INT_MAX)
        ZS_FAIL("a point-to-point message of %zu elements is more than one MPI call can carry",
                count);
    zs_comm_pending *p = calloc(1, sizeof *p);
    if (!p)
        ZS_FAIL("out of host memory for a pending send");
    p->r = zs_comm_rec(c, ZS_OP_SEND, layer, count, t);
    p->what = "point-to-point send";
    p->p2p = 1;
    p->req = MPI_REQUEST_NULL;
    *request = p;
    if (c->phantom || c->size == 1)
        return 0;
    p->t0 = zs_mpi_wtime();
    p->seq = zs_comm_enter(c);
    const void *mbuf = buf;
    if (c->staged) { /* the device buffer, copied to the host first */
        p->host_bytes = count * zs_comm_type_size(t);
        p->host = malloc(p->host_bytes + 1);
        if (!p->host)
            ZS_FAIL("out of host memory staging a send of %zu bytes", p->host_bytes);
        zs_backend_copy_d2h(c->be, p->host, buf, p->host_bytes);
        mbuf = p->host;
    }
    int rc = MPI_Isend(mbuf, (int)count, zs_mpi_type(t), peer, tag, c->comm, &p->req);
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, "MPI_Isend");
    return 0;
}

int zs_comm_recv(zs_comm_t c, int peer, void *buf, size_t count, zs_comm_type t, int tag,
                 int layer)
{
    if (count > (size_t)INT_MAX)
        ZS_FAIL("a point-to-point message of %zu elements is more than one MPI call can carry",
                count);
    zs_comm_record rec = zs_comm_rec(c, ZS_OP_RECV, layer, count, t);
    if (c->phantom || c->size == 1) {
        zs_comm_record_add(c, &rec);
        return 0;
    }
    double t0 = zs_mpi_wtime();
    long long seq = zs_comm_enter(c);
    size_t bytes = count * zs_comm_type_size(t);
    void *mbuf = buf;
    if (c->staged) {
        if (zs_comm_grow(&c->h_recv, &c->h_recv_cap, bytes))
            return -1;
        mbuf = c->h_recv;
    }
    MPI_Request req;
    int rc = MPI_Irecv(mbuf, (int)count, zs_mpi_type(t), peer, tag, c->comm, &req);
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, "MPI_Irecv");
    if (zs_comm_finish(c, 1, &req, seq, "point-to-point receive"))
        return -1;
    if (c->staged)
        zs_backend_copy_h2d(c->be, buf, mbuf, bytes);
    rec.seconds = zs_mpi_wtime() - t0;
    zs_comm_record_add(c, &rec);
    return 0;
}

static int zs_comm_small(zs_comm_t c, int peer, double *v, int n, int send)
{
    zs_comm_record rec = zs_comm_rec(c, ZS_OP_SCALARS, -1, (size_t)n, ZS_CT_F64);
    rec.wire_bytes = send ? (double)n * 8.0 : 0.0;
    if (c->phantom || c->size == 1) {
        zs_comm_record_add(c, &rec);
        return 0;
    }
    double t0 = zs_mpi_wtime();
    long long seq = zs_comm_enter(c);
    MPI_Request req;
    int rc = send ? MPI_Isend(v, n, MPI_DOUBLE, peer, 7003, c->comm, &req)
                  : MPI_Irecv(v, n, MPI_DOUBLE, peer, 7003, c->comm, &req);
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, send ? "MPI_Isend" : "MPI_Irecv");
    if (zs_comm_finish(c, 1, &req, seq, send ? "send of partial sums" : "receive of partial sums"))
        return -1;
    rec.seconds = zs_mpi_wtime() - t0;
    zs_comm_record_add(c, &rec);
    return 0;
}

int zs_comm_send_small(zs_comm_t c, int peer, const double *v, int n)
{
    return zs_comm_small(c, peer, (double *)v, n, 1);
}

int zs_comm_recv_small(zs_comm_t c, int peer, double *v, int n)
{
    return zs_comm_small(c, peer, v, n, 0);
}
