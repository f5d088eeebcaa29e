/* zerosim — communication over MPI (the only file that includes mpi.h). */
#include "zerosim/comm.h"
#include "zerosim/backend.h"
#include "zerosim/error.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Counters of collectives entered, one per kind of communicator: the world,
 * each group of the mesh, and the agreement (zs_comm_agree). */
#define ZS_BOARD_WORLD 0
#define ZS_BOARD_AGREE (ZS_GROUP_NGROUPS + 1)
#define ZS_BOARD_COUNTERS (ZS_GROUP_NGROUPS + 2)

struct zs_comm {
    struct zs_comm *ledger;  /* where records, sums and the phase context
                                live: itself, or the root of a split */
    zs_comm_group group;
    MPI_Comm comm;
    MPI_Comm agree_comm;     /* a duplicate, so that agreeing after a failure
                                never matches a collective of the training */
    int rank, size, local_rank;
    zs_comm_phase phase;
    int step;
    zs_comm_record *rec;
    size_t nrec, caprec;
    zs_comm_sum_row *sum;
    size_t nsum, capsum;
    MPI_Op op_sum_bf16, op_sum_f16;
    void *scratch;           /* ring reduce-scatter: two receive buffers */
    size_t scratch_bytes;
    int force_mpi_rs;        /* ZEROSIM_REDUCE_SCATTER=mpi */
    int rs_pending;          /* a non-blocking reduce-scatter is in flight */
    int phantom;             /* a simulated rank: record every call, move
                                nothing (zs_comm_phantom) */
    /* Buffers of a backend whose memory the host cannot touch (CUDA): MPI
     * never sees a device pointer. Either the backend's device collectives
     * (NCCL, when ZEROSIM_NCCL=1) or a copy to host buffers, the host
     * algorithm, and a copy back. Host staging buffers grow as needed and
     * are host memory, outside the accounting of device memory. */
    zs_backend_t be;
    /* Faults (see "Faults" below): this communicator's counter on the
     * board, the world rank of each of its ranks (NULL: it is the world),
     * and the collectives entered on it. The world's own fields: the
     * deadline of a collective, collectives entered on any communicator,
     * the test hook's stall point, and the board's window. */
    int counter;
    int *world_of;
    /* Nodes: the node of each of this communicator's ranks (NULL: all on
     * one node), from the world's map (node_world, [world size]: MPI's
     * shared-memory nodes, or --ranks-per-node) through world_of. */
    int *node_of;
    int *node_world;         /* the world's only */
    /* Two-level collectives (zs_comm_set_hierarchical): M nodes of K
     * consecutive ranks; the node's ranks (hier_node, K) and the ranks of
     * this local index on every node (hier_cross, M); NULL for a phantom,
     * or where one level is trivial (K or M is 1: the flat ring moves the
     * same bytes). The reduce-scatter's temporary (and its ring scratch
     * where the registered one is too small) are counted in comm_buffers
     * of `mem` for the call (hier_use, hier_scr: set by
     * zs_comm_hier_counted); without `mem`, or staged (the host algorithm
     * over host copies), a host temporary outside the accounting like the
     * staging buffers (hier_tmp). */
    int hier, hier_k, hier_m;
    struct zs_comm *hier_node, *hier_cross;
    void *hier_tmp;
    size_t hier_tmp_cap;
    void *hier_use, *hier_scr;
    int hier_in;             /* inside zs_comm_hier_counted */
    int qwz;                 /* ZeRO++ qwZ: forward allgathers in int8 blocks */
    zs_mem_t mem;            /* qwZ's encoded parts are counted here (NULL: not) */
    /* ZeRO++ hpZ: the secondary group, K consecutive ranks inside a node
     * (zs_comm_set_hpz); NULL: off */
    struct zs_comm *hpz;
    /* ZeRO++ qgZ: the reduce-scatter as a two-level all-to-all of 4-bit
     * blocks: the node's K ranks (qg_node), then the M ranks of this local
     * index (qg_cross), both made even where one has a single rank */
    int qgz, qg_k, qg_m;
    struct zs_comm *qg_node, *qg_cross;
    long long seq, agree_seq;
    double timeout_s;
    long long ncoll;
    int stall_rank, stall_step;
    long long stall_coll;
    MPI_Comm node;
    MPI_Win board_win;
    int staged;              /* be is set and not host-accessible */
    int use_coll;            /* staged, and the backend's collectives in use */
    void *h_send, *h_recv, *h_scratch;
    size_t h_send_cap, h_recv_cap, h_scratch_cap;
};

typedef struct {   /* a pending non-blocking call */
    MPI_Request req;
    zs_comm_record r;
    long long seq;           /* zs_comm_enter's count */
    double t0;
    void *dev;               /* staged: the device buffer to fill on wait */
    void *host;              /* its host copy, and its bytes */
    size_t host_bytes;
    /* qwZ: the parts in int8 blocks (qbuf), to dequantize on wait into dst
     * (n ranks' counts and displacements, elements of type qt) */
    void *qbuf, *qdst;
    zs_mem_t qmem;           /* qbuf counted in it (comm_buffers, qbytes), or NULL */
    size_t qbytes;
    int *qcounts, *qdispls, *ecounts, *edispls;
    zs_comm_type qt;
    struct zs_ring *ring;    /* a reduce-scatter's ring, or NULL */
    const char *what;        /* the collective, for the timeout's line */
    double t1;               /* when it was seen complete; 0: not yet */
    int to_dev;              /* staged: copy host to dev on wait */
    int p2p;                 /* a point-to-point send (zs_comm_isend) */
    int norec;               /* recorded by the calls it made (qgZ) */
} zs_comm_pending;

static const char *const zs_op_names[ZS_OP_NOPS] = {
    [ZS_OP_REDUCE_SCATTER] = "reduce_scatter",
    [ZS_OP_ALLGATHER] = "allgather",
    [ZS_OP_ALLREDUCE] = "allreduce",
    [ZS_OP_SCALARS] = "scalars",
    [ZS_OP_GATHER] = "gather",
    [ZS_OP_ALLTOALL] = "alltoall",
    [ZS_OP_D2H] = "d2h",
    [ZS_OP_H2D] = "h2d",
    [ZS_OP_NVME_READ] = "nvme_read",
    [ZS_OP_NVME_WRITE] = "nvme_write",
    [ZS_OP_SEND] = "send",
    [ZS_OP_RECV] = "recv",
};
static const char *const zs_phase_names[ZS_PHASE_NPHASES] = {
    [ZS_PHASE_SETUP] = "setup",
    [ZS_PHASE_FORWARD] = "forward",
    [ZS_PHASE_BACKWARD] = "backward",
    [ZS_PHASE_STEP] = "step",
    [ZS_PHASE_REPORT] = "report",
};

static const char *const zs_group_names[ZS_GROUP_NGROUPS] = {
    [ZS_GROUP_DP] = "dp",
    [ZS_GROUP_TP] = "tp",
    [ZS_GROUP_PP] = "pp",
    [ZS_GROUP_EP] = "ep",
    [ZS_GROUP_EDP] = "edp",
};

const char *zs_comm_group_name(zs_comm_group g)
{
    return g < ZS_GROUP_NGROUPS ? zs_group_names[g] : "?";
}

const char *zs_comm_op_name(zs_comm_op op) { return op < ZS_OP_NOPS ? zs_op_names[op] : "?"; }
const char *zs_comm_phase_name(zs_comm_phase p)
{
    return p < ZS_PHASE_NPHASES ? zs_phase_names[p] : "?";
}

size_t zs_comm_type_size(zs_comm_type t)
{
    static const size_t sz[ZS_CT_NTYPES] = {4, 2, 2, 8, 8, 8, sizeof(int)};
    return t < ZS_CT_NTYPES ? sz[t] : 0;
}

static MPI_Datatype zs_mpi_type(zs_comm_type t)
{
    switch (t) {
    case ZS_CT_F32: return MPI_FLOAT;
    case ZS_CT_BF16:
    case ZS_CT_F16: return MPI_UINT16_T;
    case ZS_CT_I64: return MPI_INT64_T;
    case ZS_CT_F64: return MPI_DOUBLE;
    case ZS_CT_U64: return MPI_UINT64_T;
    default: return MPI_INT;
    }
}

/* Sums of 16-bit floats: each pairwise sum in fp32, rounded once. */
static void zs_sum_bf16(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = zs_f32_to_bf16(zs_bf16_to_f32(a[i]) + zs_bf16_to_f32(b[i]));
}

static void zs_sum_f16(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = zs_f32_to_f16(zs_f16_to_f32(a[i]) + zs_f16_to_f32(b[i]));
}

static MPI_Op zs_sum_op(zs_comm_t c, zs_comm_type t)
{
    if (t == ZS_CT_BF16)
        return c->op_sum_bf16;
    if (t == ZS_CT_F16)
        return c->op_sum_f16;
    return MPI_SUM;
}

static int zs_mpi_fail(int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    ZS_FAIL("MPI error in %s: %s", what, msg);
}

/* ------------------------------------------------------------------------ */
/* Faults: a rank that is lost (killed) or stops (hangs, SIGSTOP).
 *
 * Every wait on other ranks polls with a deadline (zs_comm_finish): past
 * the collective timeout the rank prints one line naming the step and the
 * ranks that did not arrive, and aborts the job. When a rank is killed,
 * mpirun stops the others with SIGTERM; their handler prints one line
 * naming the lost rank and the step. Both find the ranks on this node on a
 * board in shared memory (an MPI shared window): one slot per rank with
 * its pid, step, phase, a count of collectives entered per communicator,
 * and its state. Ranks on other nodes are not on the board; the line then
 * says so and mpirun's own message names them. */

enum { ZS_RUNNING = 0, ZS_SIGNALLED, ZS_STOPPED_JOB, ZS_FINISHED };

typedef struct {
    int world_rank, pid;
    volatile sig_atomic_t state;
    volatile int step, phase;
    volatile long long seq[ZS_BOARD_COUNTERS];
    char why[256];               /* ZS_STOPPED_JOB: what stopped the job */
    volatile int blamed;         /* and the first rank it names, or -1 */
} zs_board_slot;

static zs_board_slot *zs_board;  /* the slots of this node's ranks */
static int zs_board_n;
static zs_board_slot zs_board_solo; /* no shared window: this rank alone */
static zs_board_slot *zs_me;     /* this rank's slot; NULL before zs_comm_init */
static volatile sig_atomic_t zs_said; /* this rank has printed its line */
static _Thread_local int zs_in_watchdog; /* this thread is the watchdog (no MPI) */

/* A line built with nothing but stores, so that a signal handler can build
 * it too (no stdio there). */
typedef struct {
    char *p;
    size_t n, len;
} zs_line;

static void zs_line_s(zs_line *l, const char *s)
{
    while (*s && l->len + 1 < l->n)
        l->p[l->len++] = *s++;
    l->p[l->len] = '\0';
}

static void zs_line_i(zs_line *l, long long v)
{
    char t[24], *q = t + sizeof t;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    *--q = '\0';
    do
        *--q = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    if (v < 0)
        *--q = '-';
    zs_line_s(l, q);
}

/* "at step S (phase)", as the progress lines count steps (from 1). */
static void zs_line_where(zs_line *l, int step, int phase)
{
    if (phase == ZS_PHASE_REPORT) {
        zs_line_s(l, "after the last step (gathering results)");
    } else if (step < 0 || phase == ZS_PHASE_SETUP) {
        zs_line_s(l, "during setup");
    } else {
        zs_line_s(l, "at step ");
        zs_line_i(l, step + 1);
        zs_line_s(l, " (");
        zs_line_s(l, phase > 0 && phase < ZS_PHASE_NPHASES ? zs_phase_names[phase] : "?");
        zs_line_s(l, ")");
    }
}

/* A process's state: 'D' gone (or a zombie), 'T' stopped, 'R' alive, '?'
 * unknown. Async-signal-safe. */
static char zs_proc_state(int pid)
{
    if (pid <= 0)
        return '?';
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 'D';
    char path[40], buf[512];
    zs_line l = {path, sizeof path, 0};
    zs_line_s(&l, "/proc/");
    zs_line_i(&l, pid);
    zs_line_s(&l, "/stat");
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return '?';
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return '?';
    buf[n] = '\0';
    const char *p = NULL; /* the state follows the last ") " */
    for (ssize_t i = 0; i + 2 < n; i++)
        if (buf[i] == ')' && buf[i + 1] == ' ')
            p = buf + i + 2;
    if (!p)
        return '?';
    if (*p == 'Z' || *p == 'X')
        return 'D';
    if (*p == 'T' || *p == 't')
        return 'T';
    return 'R';
}

static zs_board_slot *zs_board_find(int world_rank)
{
    for (int i = 0; i < zs_board_n; i++)
        if (zs_board[i].world_rank == world_rank)
            return &zs_board[i];
    return NULL;
}

/* Why the job stops, as this rank's signal handler sees it: a rank that
 * stopped the job and said why, else the ranks whose process is gone
 * without a word. Async-signal-safe. */
static void zs_line_cause(zs_line *l)
{
    for (int i = 0; i < zs_board_n; i++)
        if (&zs_board[i] != zs_me && zs_board[i].state == ZS_STOPPED_JOB) {
            if (zs_me && zs_board[i].blamed == zs_me->world_rank) {
                zs_line_s(l, "this rank did not arrive in time, and rank ");
                zs_line_i(l, zs_board[i].world_rank);
                zs_line_s(l, " stopped the job");
                return;
            }
            zs_line_s(l, zs_board[i].why);
            zs_line_s(l, " (rank ");
            zs_line_i(l, zs_board[i].world_rank);
            zs_line_s(l, " stopped the job)");
            return;
        }
    int lost = 0;
    for (int i = 0; i < zs_board_n; i++)
        if (&zs_board[i] != zs_me && zs_board[i].state == ZS_RUNNING &&
            zs_proc_state(zs_board[i].pid) == 'D') {
            zs_line_s(l, lost++ ? ", " : "lost rank ");
            zs_line_i(l, zs_board[i].world_rank);
            zs_line_s(l, " (pid ");
            zs_line_i(l, zs_board[i].pid);
            zs_line_s(l, ")");
        }
    if (lost)
        zs_line_s(l, ": its process ended without a word (killed?), and mpirun stopped the job");
    else
        zs_line_s(l, "mpirun stopped the job (interrupted, or a rank on another node was lost or "
                     "failed: mpirun's message names it)");
}

/* SIGTERM, from mpirun when another rank was lost or aborted the job. */
static void zs_comm_on_term(int sig)
{
    int saved = errno;
    zs_board_slot *me = zs_me ? zs_me : &zs_board_solo;
    if (!zs_said) {
        zs_said = 1;
        if (me->state == ZS_RUNNING)
            me->state = ZS_SIGNALLED;
        char buf[700];
        zs_line l = {buf, sizeof buf, 0};
        zs_line_s(&l, "zerosim: rank ");
        zs_line_i(&l, me->world_rank);
        zs_line_s(&l, ": stopped ");
        zs_line_where(&l, me->step, me->phase);
        zs_line_s(&l, ": ");
        zs_line_cause(&l);
        zs_line_s(&l, "\n");
        ssize_t w = write(STDERR_FILENO, buf, l.len);
        (void)w;
    }
    errno = saved;
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Print this rank's one line (unless printed), leave `why` on the board for
 * the others' lines, and abort the job. */
static void zs_comm_stop_job(const char *why, int blamed) __attribute__((noreturn));
static void zs_comm_stop_job(const char *why, int blamed)
{
    zs_board_slot *me = zs_me ? zs_me : &zs_board_solo;
    snprintf(me->why, sizeof me->why, "%s", why);
    me->blamed = blamed;
    __sync_synchronize();
    me->state = ZS_STOPPED_JOB;
    if (!zs_said) {
        zs_said = 1;
        char where[96];
        zs_line l = {where, sizeof where, 0};
        zs_line_where(&l, me->step, me->phase);
        fprintf(stderr, "zerosim: rank %d: stopped %s: %s\n", me->world_rank, where, why);
        fflush(stderr);
    }
    if (zs_in_watchdog) /* no MPI from this thread: mpirun stops the job on the exit */
        _exit(1);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

void zs_comm_stop(zs_comm_t c, const char *why)
{
    (void)c;
    zs_comm_stop_job(why, -1);
}

/* Past the deadline in a collective on c: name the ranks of c that did not
 * enter it (from the board), and stop the job. */
static void zs_comm_timed_out(zs_comm_t c, int counter, const char *what, long long my_seq)
    __attribute__((noreturn));
static void zs_comm_timed_out(zs_comm_t c, int counter, const char *what, long long my_seq)
{
    char why[256];
    zs_line l = {why, sizeof why, 0};
    int absent = 0, unknown = 0, blamed = -1;
    for (int i = 0; i < c->size; i++) {
        int w = c->world_of ? c->world_of[i] : c->ledger == c ? i : -1;
        if (i == c->rank)
            continue;
        const zs_board_slot *q = zs_board_find(w);
        if (!q) {
            unknown++;
            continue;
        }
        if (q->seq[counter] >= my_seq)
            continue;
        char st = zs_proc_state(q->pid);
        if (blamed < 0)
            blamed = w;
        zs_line_s(&l, absent++ ? ", rank " : "rank ");
        zs_line_i(&l, w);
        zs_line_s(&l, st == 'T' ? " (process stopped)" : st == 'D' ? " (process gone)" : "");
    }
    if (absent)
        zs_line_s(&l, absent > 1 ? " did not arrive" : " did not arrive");
    else if (unknown)
        zs_line_s(&l, "a rank on another node did not arrive");
    else
        zs_line_s(&l, "the other ranks did not finish");
    zs_line_s(&l, " at the ");
    zs_line_s(&l, what);
    zs_line_s(&l, " within the collective timeout of ");
    char t[32];
    snprintf(t, sizeof t, "%g", c->ledger->timeout_s);
    zs_line_s(&l, t);
    zs_line_s(&l, " s (hung or stopped? --collective-timeout S waits longer)");
    zs_comm_stop_job(why, blamed);
}

/* Test hook (tests/test_faults.sh): ZEROSIM_TEST_STALL_AT=R:step:S makes
 * world rank R stall at its first collective of step S (counted from 1, as
 * the progress lines count); R:coll:K at its K-th collective of the run.
 * The stalled rank says so on stderr, with its pid, and sleeps until a
 * signal ends it. */
static void zs_comm_stall_parse(zs_comm_t w)
{
    const char *s = getenv("ZEROSIM_TEST_STALL_AT");
    w->stall_rank = -1;
    if (!s)
        return;
    int r = -1, n = 0, used = 0;
    char kind[8] = "";
    if (sscanf(s, "%d:%7[a-z]:%d%n", &r, kind, &n, &used) == 3 && s[used] == '\0' && n > 0) {
        if (!strcmp(kind, "step"))
            w->stall_step = n;
        else if (!strcmp(kind, "coll"))
            w->stall_coll = n;
        else
            return;
        w->stall_rank = r;
    }
}

static void zs_comm_stall(zs_comm_t w)
{
    fprintf(stderr, "zerosim: test hook: rank %d (pid %ld) stalls at step %d, collective %lld\n",
            w->rank, (long)getpid(), w->step + 1, w->ncoll);
    fflush(stderr);
    for (;;)
        pause();
}

/* Every exchange with other ranks starts here: count it (on the board, for
 * the others' diagnosis), and the test hook. Returns c's count. */
static long long zs_comm_enter(zs_comm_t c)
{
    zs_comm_t w = c->ledger;
    w->ncoll++;
    if (w->stall_rank == w->rank && w->stall_rank >= 0 &&
        ((w->stall_step > 0 && w->step + 1 == w->stall_step && w->phase != ZS_PHASE_SETUP &&
          w->phase != ZS_PHASE_REPORT) ||
         (w->stall_coll > 0 && w->ncoll == w->stall_coll)))
        zs_comm_stall(w); /* before it arrives */
    long long seq = ++c->seq;
    if (zs_me)
        zs_me->seq[c->counter] = seq;
    return seq;
}

/* Wait for n requests, polling, at most the collective timeout; past it,
 * stop the job (zs_comm_timed_out). seq is zs_comm_enter's count. The clock
 * is read every 64 polls: MPI_Testall drives progress as MPI_Waitall would. */
static int zs_comm_finish(zs_comm_t c, int n, MPI_Request *req, long long seq, const char *what)
{
    int done = 0;
    double t0 = 0.0, limit = c->ledger->timeout_s;
    for (unsigned long i = 0;; i++) {
        int rc = MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS)
            return zs_mpi_fail(rc, what);
        if (done)
            return 0;
        if ((i & 63) == 0) {
            double t = MPI_Wtime();
            if (i == 0)
                t0 = t;
            else if (t - t0 > limit)
                zs_comm_timed_out(c, c->counter, what, seq);
        }
    }
}

/* The allreduce stays a blocking MPI_Allreduce: Open MPI's tuned blocking
 * algorithms ran about twice as fast as MPI_Iallreduce at 256 KiB on two
 * ranks here (bench_comm --allreduce-bytes). A watchdog thread, which never
 * calls MPI, gives it the same deadline: the main thread arms it around the
 * call, and past the timeout the watchdog prints the line and exits the
 * process, and mpirun stops the others. */
static _Atomic long long zs_wd_armed_ns; /* start of the guarded call; 0: none */
static zs_comm_t zs_wd_comm;
static long long zs_wd_seq;
static const char *zs_wd_what;
static int zs_wd_running;

static long long zs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *zs_watchdog(void *arg)
{
    (void)arg;
    zs_in_watchdog = 1;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals are the main thread's */
    const struct timespec nap = {0, 50000000};
    for (;;) {
        nanosleep(&nap, NULL);
        long long t = atomic_load(&zs_wd_armed_ns);
        zs_comm_t c = zs_wd_comm;
        if (t && c && (double)(zs_now_ns() - t) > 1e9 * c->ledger->timeout_s)
            zs_comm_timed_out(c, c->counter, zs_wd_what, zs_wd_seq);
    }
    return NULL;
}

static void zs_watchdog_start(void)
{
    pthread_t th;
    pthread_attr_t a;
    if (pthread_attr_init(&a) != 0)
        return;
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 256 * 1024);
    zs_wd_running = pthread_create(&th, &a, zs_watchdog, NULL) == 0;
    pthread_attr_destroy(&a);
}

/* Arm the watchdog around a blocking call of c (seq: zs_comm_enter's). */
static void zs_guard_begin(zs_comm_t c, long long seq, const char *what)
{
    zs_wd_comm = c;
    zs_wd_seq = seq;
    zs_wd_what = what;
    atomic_store(&zs_wd_armed_ns, zs_now_ns());
}

static void zs_guard_end(void) { atomic_store(&zs_wd_armed_ns, 0); }

void zs_comm_set_timeout(zs_comm_t c, double seconds)
{
    if (seconds > 0)
        c->ledger->timeout_s = seconds;
}

double zs_comm_timeout(zs_comm_t c) { return c->ledger->timeout_s; }

/* The board: a shared window over this node's ranks, a slot each, and the
 * SIGTERM handler. Without a shared window, this rank's own slot only. */
static void zs_board_open(zs_comm_t w)
{
    zs_me = &zs_board_solo;
    zs_board = &zs_board_solo;
    zs_board_n = 1;
    w->board_win = MPI_WIN_NULL;
    int nl = 0, me = 0;
    if (w->node != MPI_COMM_NULL) {
        MPI_Comm_size(w->node, &nl);
        MPI_Comm_rank(w->node, &me);
        zs_board_slot *base = NULL;
        if (MPI_Win_allocate_shared((MPI_Aint)sizeof(zs_board_slot), (int)sizeof(zs_board_slot),
                                    MPI_INFO_NULL, w->node, &base, &w->board_win) ==
            MPI_SUCCESS) {
            MPI_Aint sz;
            int du;
            zs_board_slot *first = NULL;
            MPI_Win_shared_query(w->board_win, 0, &sz, &du, &first);
            if (first && base == first + me) {
                zs_board = first;
                zs_board_n = nl;
                zs_me = base;
            } else {
                MPI_Win_free(&w->board_win);
            }
        }
    }
    memset(zs_me, 0, sizeof *zs_me);
    zs_me->world_rank = w->rank;
    zs_me->pid = (int)getpid();
    zs_me->step = -1;
    zs_me->blamed = -1;
    if (w->board_win != MPI_WIN_NULL) {
        MPI_Win_sync(w->board_win);
        MPI_Barrier(w->node); /* every slot is filled in */
        MPI_Win_sync(w->board_win);
    }
    if (!zs_wd_running)
        zs_watchdog_start();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = zs_comm_on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
}

static void zs_board_close(zs_comm_t w)
{
    if (!zs_me)
        return;
    zs_me->state = ZS_FINISHED;
    signal(SIGTERM, SIG_DFL);
    zs_board_solo = *zs_me;
    zs_me = &zs_board_solo;
    zs_board = &zs_board_solo;
    zs_board_n = 1;
    if (w->board_win != MPI_WIN_NULL)
        MPI_Win_free(&w->board_win);
}

/* The world's node map from MPI: the nodes MPI_Comm_split_type(SHARED)
 * reports, numbered in the order of their lowest world rank. Set-up
 * traffic (one int per rank), outside the ledger. */
static int zs_comm_nodes_from_mpi(zs_comm_t c)
{
    int lead = c->rank; /* the lowest world rank on this node */
    if (c->node != MPI_COMM_NULL)
        MPI_Allreduce(&c->rank, &lead, 1, MPI_INT, MPI_MIN, c->node);
    int *all = malloc((size_t)c->size * sizeof(int));
    free(c->node_world); /* a map made before (zs_comm_set_ranks_per_node) */
    free(c->node_of);
    c->node_world = malloc((size_t)c->size * sizeof(int));
    c->node_of = malloc((size_t)c->size * sizeof(int));
    if (!all || !c->node_world || !c->node_of) {
        free(all);
        ZS_FAIL("out of host memory for the node map of %d ranks", c->size);
    }
    if (MPI_Allgather(&lead, 1, MPI_INT, all, 1, MPI_INT, c->comm) != MPI_SUCCESS) {
        free(all);
        ZS_FAIL("MPI_Allgather of the node map failed");
    }
    int nodes = 0;
    for (int q = 0; q < c->size; q++) {
        if (all[q] == q) /* a node's lowest rank numbers it */
            all[q] = -1 - nodes++;
        c->node_world[q] = -1 - all[all[q] >= 0 ? all[q] : q];
    }
    memcpy(c->node_of, c->node_world, (size_t)c->size * sizeof(int));
    free(all);
    return 0;
}

static void zs_comm_hier_free(zs_comm_t c);

int zs_comm_init(int *argc, char ***argv, zs_comm_t *world)
{
    *world = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init(argc, argv) != MPI_SUCCESS)
        ZS_FAIL("MPI_Init failed: check the Open MPI installation (package openmpi-bin)");
    zs_comm_t c = calloc(1, sizeof *c);
    if (!c)
        ZS_FAIL("out of host memory creating the communicator");
    c->ledger = c;
    c->comm = MPI_COMM_WORLD;
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_dup(c->comm, &c->agree_comm);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    c->node = MPI_COMM_NULL;
    if (MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &c->node) ==
        MPI_SUCCESS)
        MPI_Comm_rank(c->node, &c->local_rank);
    else
        c->node = MPI_COMM_NULL;
    ZS_TRY(zs_comm_nodes_from_mpi(c));
    c->timeout_s = 600.0;
    c->counter = ZS_BOARD_WORLD;
    zs_comm_stall_parse(c);
    zs_board_open(c);
    const char *rs = getenv("ZEROSIM_REDUCE_SCATTER");
    c->force_mpi_rs = rs && strcmp(rs, "mpi") == 0;
    MPI_Op_create(zs_sum_bf16, 1, &c->op_sum_bf16);
    MPI_Op_create(zs_sum_f16, 1, &c->op_sum_f16);
    c->step = -1;
    *world = c;
    return 0;
}

void zs_comm_finalize(zs_comm_t c)
{
    if (c) {
        zs_comm_hier_free(c);
        free(c->h_send);
        free(c->h_recv);
        free(c->h_scratch);
    }
    if (c && c->comm == MPI_COMM_NULL) { /* a self communicator: MPI was never used */
        free(c->rec);
        free(c->sum);
        free(c->node_of);
        free(c->node_world);
        free(c->world_of);
        free(c);
        return;
    }
    if (c) {
        zs_board_close(c);
        if (c->node != MPI_COMM_NULL)
            MPI_Comm_free(&c->node);
        MPI_Comm_free(&c->agree_comm);
        MPI_Op_free(&c->op_sum_bf16);
        MPI_Op_free(&c->op_sum_f16);
        free(c->rec);
        free(c->sum);
        free(c->node_of);
        free(c->node_world);
        free(c);
    }
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin)
        MPI_Finalize();
}

void zs_comm_abort(zs_comm_t c, int code)
{
    if (zs_me) { /* a line, and the others learn why from the board */
        zs_comm_stop_job(zs_error_msg()[0] ? zs_error_msg() : "a rank stopped the job", -1);
    }
    MPI_Abort(c ? c->comm : MPI_COMM_WORLD, code);
}

zs_comm_t zs_comm_self(void)
{
    zs_comm_t c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->ledger = c;
    c->comm = MPI_COMM_NULL;
    c->size = 1;
    c->step = -1;
    return c;
}

zs_comm_t zs_comm_phantom(int size, int rank)
{
    if (size < 1 || rank < 0 || rank >= size)
        return NULL;
    zs_comm_t c = zs_comm_self();
    if (!c)
        return NULL;
    c->size = size;
    c->rank = rank;
    c->phantom = 1;
    const char *rs = getenv("ZEROSIM_REDUCE_SCATTER"); /* as a real rank would */
    c->force_mpi_rs = rs && strcmp(rs, "mpi") == 0;
    return c;
}

int zs_comm_is_phantom(zs_comm_t c) { return c->phantom; }

int zs_comm_rank(zs_comm_t c) { return c->rank; }
int zs_comm_size(zs_comm_t c) { return c->size; }
int zs_comm_local_rank(zs_comm_t c) { return c->local_rank; }

/* A split's nodes: the world's map through world_of (none known: NULL,
 * one node). */
static void zs_comm_nodes_derive(zs_comm_t s)
{
    const int *w = s->ledger->node_world;
    free(s->node_of);
    s->node_of = NULL;
    if (!w || !s->world_of)
        return;
    s->node_of = malloc((size_t)s->size * sizeof(int));
    for (int i = 0; s->node_of && i < s->size; i++)
        s->node_of[i] = w[s->world_of[i]];
}

int zs_comm_set_world_ranks(zs_comm_t sub, const int *world_ranks)
{
    if (sub->ledger == sub)
        return 0;
    if (!sub->world_of) {
        sub->world_of = malloc((size_t)sub->size * sizeof(int));
        if (!sub->world_of)
            ZS_FAIL("out of host memory for a %s group's ranks", zs_comm_group_name(sub->group));
        memcpy(sub->world_of, world_ranks, (size_t)sub->size * sizeof(int));
    }
    zs_comm_nodes_derive(sub);
    return 0;
}

int zs_comm_set_ranks_per_node(zs_comm_t world, int k)
{
    zs_comm_t c = world->ledger;
    if (k < 0 || k > c->size || (k > 0 && c->size % k != 0))
        ZS_FAIL("--ranks-per-node %d must divide the %d ranks (K consecutive ranks make a node)",
                k, c->size);
    if (k == 0) { /* back to MPI's nodes; a phantom or self world is one node */
        if (c->comm != MPI_COMM_NULL)
            return zs_comm_nodes_from_mpi(c);
        free(c->node_world);
        free(c->node_of);
        c->node_world = c->node_of = NULL;
        return 0;
    }
    int *nw = malloc((size_t)c->size * sizeof(int)), *no = malloc((size_t)c->size * sizeof(int));
    if (!nw || !no) {
        free(nw);
        free(no);
        ZS_FAIL("out of host memory for the node map of %d ranks", c->size);
    }
    for (int q = 0; q < c->size; q++)
        nw[q] = no[q] = q / k;
    free(c->node_world);
    free(c->node_of);
    c->node_world = nw;
    c->node_of = no;
    return 0;
}

int zs_comm_node_of(zs_comm_t c, int rank)
{
    return c->node_of && rank >= 0 && rank < c->size ? c->node_of[rank] : 0;
}

int zs_comm_ring_crosses(zs_comm_t c)
{
    return c->node_of && c->size > 1 &&
           c->node_of[c->rank] != c->node_of[(c->rank + 1) % c->size];
}

int zs_comm_split(zs_comm_t c, int color, int key, int size, int rank, zs_comm_group group,
                  zs_comm_t *out)
{
    *out = NULL;
    if (size < 1 || rank < 0 || rank >= size)
        ZS_FAIL("communicator split: rank %d of %d is not a rank of a group", rank, size);
    zs_comm_t s = calloc(1, sizeof *s);
    if (!s)
        ZS_FAIL("out of host memory creating a %s communicator", zs_comm_group_name(group));
    s->ledger = c->ledger;
    s->group = group;
    s->force_mpi_rs = c->force_mpi_rs;
    s->phantom = c->phantom;
    s->counter = 1 + (int)group;
    s->local_rank = c->local_rank;
    s->comm = MPI_COMM_NULL;
    s->agree_comm = MPI_COMM_NULL;
    s->size = size;
    s->rank = rank;
    if (c->comm != MPI_COMM_NULL) {
        int rc = MPI_Comm_split(c->comm, color, key, &s->comm);
        if (rc != MPI_SUCCESS) {
            free(s);
            return zs_mpi_fail(rc, "MPI_Comm_split");
        }
        int r = -1, n = 0;
        MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
        MPI_Comm_rank(s->comm, &r);
        MPI_Comm_size(s->comm, &n);
        MPI_Comm_dup(s->comm, &s->agree_comm);
        MPI_Op_create(zs_sum_bf16, 1, &s->op_sum_bf16);
        MPI_Op_create(zs_sum_f16, 1, &s->op_sum_f16);
        s->world_of = malloc((size_t)n * sizeof(int));
        int *mine = malloc((size_t)n * sizeof(int));
        MPI_Group g, wg;
        if (s->world_of && mine && MPI_Comm_group(s->comm, &g) == MPI_SUCCESS) {
            MPI_Comm_group(MPI_COMM_WORLD, &wg);
            for (int i = 0; i < n; i++)
                mine[i] = i;
            MPI_Group_translate_ranks(g, n, mine, wg, s->world_of);
            MPI_Group_free(&g);
            MPI_Group_free(&wg);
        } else {
            free(s->world_of); /* the diagnosis of a timeout is then vaguer */
            s->world_of = NULL;
        }
        free(mine);
        zs_comm_nodes_derive(s);
        if (r != rank || n != size) {
            zs_comm_free(s);
            ZS_FAIL("the %s group has rank %d of %d where the mesh expects %d of %d",
                    zs_comm_group_name(group), r, n, rank, size);
        }
    } else if (size > 1 && !c->phantom) {
        free(s);
        ZS_FAIL("a %s group of %d ranks needs MPI (this communicator is a single rank)",
                zs_comm_group_name(group), size);
    }
    *out = s;
    return 0;
}

static void zs_comm_hier_free(zs_comm_t c)
{
    zs_comm_free(c->hier_node);
    zs_comm_free(c->hier_cross);
    c->hier_node = c->hier_cross = NULL;
    free(c->hier_tmp);
    c->hier_tmp = NULL;
    c->hier_tmp_cap = 0;
    c->hier = 0;
}

static void zs_comm_zpp_free(zs_comm_t c);

void zs_comm_free(zs_comm_t s)
{
    if (!s || s->ledger == s)
        return;
    zs_comm_hier_free(s);
    zs_comm_zpp_free(s);
    if (s->comm != MPI_COMM_NULL) {
        MPI_Comm_free(&s->agree_comm);
        MPI_Comm_free(&s->comm);
        MPI_Op_free(&s->op_sum_bf16);
        MPI_Op_free(&s->op_sum_f16);
    }
    free(s->h_send);
    free(s->h_recv);
    free(s->h_scratch);
    free(s->world_of);
    free(s->node_of);
    free(s);
}

/* K when the group's ranks are nodes of K consecutive ranks each (K
 * dividing the group), else 0: the shape two-level collectives need. */
static int zs_comm_node_blocks(zs_comm_t c)
{
    int N = c->size, K = 0;
    for (int q = 0; q < N; q++)
        K += zs_comm_node_of(c, q) == zs_comm_node_of(c, 0);
    int regular = N % K == 0;
    for (int q = 0; q < N && regular; q++) /* blocks of K, a node each */
        regular = zs_comm_node_of(c, q) == zs_comm_node_of(c, q - q % K) &&
                  (q < K || zs_comm_node_of(c, q) != zs_comm_node_of(c, q - K));
    return regular ? K : 0;
}

int zs_comm_set_hierarchical(zs_comm_t c, int on)
{
    zs_comm_hier_free(c);
    if (!on)
        return 0;
    int N = c->size, K = zs_comm_node_blocks(c);
    if (!K)
        ZS_FAIL("hierarchical collectives need the %s group's %d ranks in nodes of equal size, "
                "each of consecutive ranks (--ranks-per-node K, K dividing the group)",
                zs_comm_group_name(c->group), N);
    c->hier = 1;
    c->hier_k = K;
    c->hier_m = N / K;
    if (c->phantom || c->comm == MPI_COMM_NULL || K == 1 || K == N)
        return 0; /* nothing moves, or one level is trivial: the flat ring */
    int i = c->rank % K, j = c->rank / K;
    int rc = zs_comm_split(c, j, i, K, i, c->group, &c->hier_node);
    if (!rc)
        rc = zs_comm_split(c, i, j, c->hier_m, j, c->group, &c->hier_cross);
    if (rc) {
        zs_comm_hier_free(c);
        return rc;
    }
    c->hier = 1;
    return 0;
}

int zs_comm_hierarchical(zs_comm_t c) { return c->hier; }

zs_comm_group zs_comm_get_group(zs_comm_t c) { return c->group; }
void zs_comm_set_group(zs_comm_t c, zs_comm_group g) { c->group = g; }

void zs_comm_set_context(zs_comm_t c, zs_comm_phase phase, int step)
{
    c->ledger->phase = phase;
    c->ledger->step = step;
    if (zs_me && !c->phantom && c->ledger->comm != MPI_COMM_NULL) {
        zs_me->step = step;
        zs_me->phase = (int)phase;
    }
}

const zs_comm_record *zs_comm_records(zs_comm_t c, size_t *n)
{
    *n = c->ledger->nrec;
    return c->ledger->rec;
}

void zs_comm_clear_records(zs_comm_t c) { c->ledger->nrec = 0; }

const zs_comm_sum_row *zs_comm_sums(zs_comm_t c, size_t *n)
{
    *n = c->ledger->nsum;
    return c->ledger->sum;
}

/* Add r to its (group, op, phase, message size) row. */
static void zs_comm_sum_add(zs_comm_t c, const zs_comm_record *r)
{
    size_t bytes = r->elems * r->elem_size, i;
    for (i = 0; i < c->nsum; i++)
        if (c->sum[i].op == r->op && c->sum[i].phase == r->phase &&
            c->sum[i].msg_bytes == bytes && c->sum[i].group == r->group)
            break;
    if (i == c->nsum) {
        if (c->nsum == c->capsum) {
            size_t cap = c->capsum ? 2 * c->capsum : 64;
            zs_comm_sum_row *p = realloc(c->sum, cap * sizeof *p);
            if (!p) { /* cannot happen quietly: the sums would be wrong */
                fprintf(stderr, "zerosim: out of host memory in the comm ledger\n");
                abort();
            }
            c->sum = p;
            c->capsum = cap;
        }
        c->sum[i] = (zs_comm_sum_row){.group = r->group, .op = r->op, .phase = r->phase,
                                      .msg_bytes = bytes};
        c->nsum++;
    }
    c->sum[i].calls += 1;
    c->sum[i].bytes += (double)bytes;
    c->sum[i].wire_bytes += r->wire_bytes;
    c->sum[i].inter_bytes += r->inter_bytes;
    c->sum[i].inter_api_bytes += r->inter_api_bytes;
    c->sum[i].seconds += r->seconds;
}

double zs_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Called as the call completes: its start is now minus its duration. */
static void zs_comm_record_add(zs_comm_t c, const zs_comm_record *r)
{
    c = c->ledger;
    zs_comm_sum_add(c, r);
    if (c->nrec >= ZS_COMM_KEEP)
        return;
    if (c->nrec == c->caprec) {
        size_t cap = c->caprec ? 2 * c->caprec : 1024;
        zs_comm_record *p = realloc(c->rec, cap * sizeof *p);
        if (!p)
            return; /* the ledger stays short rather than the run failing */
        c->rec = p;
        c->caprec = cap;
    }
    c->rec[c->nrec] = *r;
    c->rec[c->nrec].start = zs_clock() - r->seconds;
    c->nrec++;
}

static zs_comm_record zs_comm_rec(zs_comm_t c, zs_comm_op op, int layer, size_t elems,
                                  zs_comm_type t)
{
    zs_comm_record r = {.op = op, .phase = c->ledger->phase, .group = c->group, .layer = layer,
                        .step = c->ledger->step,
                        .elems = elems, .elem_size = zs_comm_type_size(t)};
    double full = (double)elems * (double)r.elem_size, N = c->size;
    r.wire_bytes = op == ZS_OP_GATHER || op == ZS_OP_SEND || op == ZS_OP_RECV
                       ? full : full * (N - 1) / N;
    if (op == ZS_OP_ALLREDUCE)
        r.wire_bytes *= 2;
    if (c->hier && c->hier_m > 1 && c->hier_k > 1 &&
        (op == ZS_OP_REDUCE_SCATTER || op == ZS_OP_ALLGATHER)) {
        /* two levels: (K-1)/K of the buffer inside the node, then (M-1)/M
         * of its K-th part across: (M-1)/N of it */
        r.inter_bytes = full * (double)(c->hier_m - 1) / N;
        r.inter_api_bytes = r.inter_bytes;
    } else if (zs_comm_ring_crosses(c)) { /* the ring model: this rank's sends cross */
        r.inter_bytes = r.wire_bytes;
        r.inter_api_bytes = full;
    }
    return r;
}

void zs_comm_record_transfer(zs_comm_t c, zs_comm_op op, size_t bytes, double seconds)
{
    zs_comm_record r = {.op = op, .phase = c->ledger->phase, .group = c->group, .layer = -1,
                        .step = c->ledger->step, .elems = bytes, .elem_size = 1,
                        .wire_bytes = (double)bytes, .seconds = seconds};
    zs_comm_record_add(c, &r);
}

void zs_comm_set_scratch(zs_comm_t c, void *buf, size_t bytes)
{
    c->scratch = buf;
    c->scratch_bytes = buf ? bytes : 0;
}

int zs_comm_uses_ring(zs_comm_t c)
{
    return !c->force_mpi_rs && (c->size == 2 || c->scratch != NULL);
}

/* Grow a host staging buffer to at least `bytes`. */
static int zs_comm_grow(void **buf, size_t *cap, size_t bytes)
{
    if (bytes <= *cap)
        return 0;
    void *p = realloc(*buf, bytes);
    if (!p)
        ZS_FAIL("out of host memory staging %zu bytes of device memory for MPI", bytes);
    *buf = p;
    *cap = bytes;
    return 0;
}

int zs_comm_set_backend(zs_comm_t c, zs_backend_t be)
{
    c->be = be;
    c->staged = be != NULL && !zs_backend_host_accessible(be);
    c->use_coll = 0;
    const char *env = getenv("ZEROSIM_NCCL");
    if (!c->staged || !env || strcmp(env, "1") != 0 || c->size == 1)
        return 0;
    size_t idb = zs_backend_coll_id_bytes(be);
    if (idb == 0)
        ZS_FAIL("ZEROSIM_NCCL=1: the %s backend of this build has no device collectives "
                "(configure did not find NCCL); unset ZEROSIM_NCCL to stage through MPI",
                zs_backend_name(be));
    char *id = calloc(1, idb);
    if (!id)
        ZS_FAIL("out of host memory for the device-collective id");
    int rc = c->rank == 0 ? zs_backend_coll_get_id(be, id) : 0;
    /* set-up, not training traffic: not in the ledger, so that the ledger is
     * the same with and without NCCL */
    MPI_Request breq;
    long long seq = zs_comm_enter(c);
    int mrc = MPI_Ibcast(id, (int)idb, MPI_BYTE, 0, c->comm, &breq);
    if (mrc == MPI_SUCCESS)
        mrc = zs_comm_finish(c, 1, &breq, seq, "broadcast of the NCCL id") ? MPI_ERR_OTHER
                                                                           : MPI_SUCCESS;
    if (!rc && mrc != MPI_SUCCESS)
        rc = zs_mpi_fail(mrc, "MPI_Bcast of the NCCL id");
    if (!rc)
        rc = zs_backend_coll_init(be, id, c->size, c->rank);
    free(id);
    if (!rc)
        c->use_coll = 1;
    return rc;
}

/* The device collectives' type for t, or -1 when they have none. */
static int zs_comm_coll_type(zs_comm_type t)
{
    switch (t) {
    case ZS_CT_F32: return ZS_COLL_F32;
    case ZS_CT_BF16: return ZS_COLL_BF16;
    case ZS_CT_F16: return ZS_COLL_F16;
    case ZS_CT_I64: return ZS_COLL_I64;
    default: return -1;
    }
}

/* acc(N) += own(N), fp32. GCC's -O2 does not vectorize this loop (its cheap
 * cost model) and the scalar loop made the ring reduce-scatter 2x slower
 * than the transfer itself; ask for the vectorizer here. Results do not
 * change: each element is one IEEE addition either way. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#endif
static void zs_comm_add_f32(float *restrict a, const float *restrict b, int n)
{
    for (int i = 0; i < n; i++)
        a[i] = a[i] + b[i];
}

/* acc(N) = acc + own, in the element type (16-bit floats through fp32). */
static void zs_comm_add(void *acc, const void *own, int n, zs_comm_type t)
{
    switch (t) {
    case ZS_CT_F32:
        zs_comm_add_f32(acc, own, n);
        break;
    case ZS_CT_BF16: {
        int len = n;
        zs_sum_bf16((void *)own, acc, &len, NULL);
        break;
    }
    case ZS_CT_F16: {
        int len = n;
        zs_sum_f16((void *)own, acc, &len, NULL);
        break;
    }
    case ZS_CT_I64: {
        int64_t *a = acc;
        const int64_t *b = own;
        for (int i = 0; i < n; i++)
            a[i] += b[i];
        break;
    }
    case ZS_CT_F64: {
        double *a = acc;
        const double *b = own;
        for (int i = 0; i < n; i++)
            a[i] = a[i] + b[i];
        break;
    }
    default: {
        uint64_t *a = acc;
        const uint64_t *b = own;
        for (int i = 0; i < n; i++)
            a[i] += b[i];
    }
    }
}

/* Elements per ring message: a received piece is summed while it is still in
 * cache (bench/bench_zero.sh: 128Ki fp32 elements did as well as whole
 * chunks at 2 ranks and better than 8Ki). */
#define ZS_RING_SEGMENT ((size_t)131072)
/* Segments of a step in flight at once in each direction. One at a time,
 * the link waited a round trip per segment (Open MPI's rendezvous for each
 * message, then the sum) and a 50 Mbit/s TCP link between emulated nodes
 * carried 3.3-3.9 MB/s of a ring step's 1.67 MB where four in flight carry
 * 5.9 (docs/cluster.md); through shared memory the window changes nothing
 * measurable. */
#define ZS_RING_WINDOW 4

/* Ring reduce-scatter: at step s, rank r passes the partial sum of chunk
 * (r-s-1) mod N to rank r+1 and adds its own part of chunk (r-s-2) mod N to
 * what it receives from rank r-1; after N-1 steps it holds chunk r. The
 * partial sum of chunk j starts at rank j+1 and travels the ring in order.
 * Each step goes in segments, so that a received piece is summed while it
 * is still in cache, up to ZS_RING_WINDOW of them posted at once; the
 * neighbours' segment counts match in each direction, and MPI matches a
 * pair's messages of one tag in the order they were posted. A step starts
 * when the previous one has ended, all its sends included: its receive
 * buffer is the one the step before last sent from.
 *
 * The ring is a state machine: zs_ring_start posts the first segments'
 * messages, zs_ring_advance moves it on as far as the arrived messages
 * allow. The blocking call drives it in a loop; the engine drives a
 * bucket's reduction between the kernels of the backward (overlap_comm).
 * The sums are the same either way: each element's additions follow the
 * ring's order, whenever they happen. */
typedef struct zs_ring {
    int N, r;
    zs_comm_type t;
    size_t es;
    const char *send;
    char *recv, *buf[2];
    size_t *displ, *count; /* N offsets and N counts */
    int s;                 /* ring step, 0 .. N-2 */
    size_t gp, gs, ng;     /* the step's next segment to post, to sum; its segments */
    size_t ns, nr;         /* elements the step sends and receives */
    const char *out, *own;
    char *in;
    MPI_Request rq[2 * ZS_RING_WINDOW]; /* segment g's pair at 2 * (g % window) */
    int done;
} zs_ring;

static size_t zs_ring_seg(size_t n, size_t g)
{
    size_t so = g * ZS_RING_SEGMENT;
    return so >= n ? 0 : (n - so < ZS_RING_SEGMENT ? n - so : ZS_RING_SEGMENT);
}

/* Post segment R->gp of the step into the window's free slot. */
static int zs_ring_post(zs_comm_t c, zs_ring *R)
{
    int N = R->N, r = R->r;
    size_t g = R->gp++, so = g * ZS_RING_SEGMENT, sn = zs_ring_seg(R->ns, g),
           rn = zs_ring_seg(R->nr, g);
    MPI_Request *q = &R->rq[2 * (g % ZS_RING_WINDOW)];
    q[0] = q[1] = MPI_REQUEST_NULL;
    int rc = MPI_SUCCESS;
    if (rn)
        rc = MPI_Irecv(R->in + so * R->es, (int)rn, zs_mpi_type(R->t), (r + N - 1) % N, 7001,
                       c->comm, &q[0]);
    if (rc == MPI_SUCCESS && sn)
        rc = MPI_Isend(R->out + so * R->es, (int)sn, zs_mpi_type(R->t), (r + 1) % N, 7001,
                       c->comm, &q[1]);
    return rc == MPI_SUCCESS ? 0 : zs_mpi_fail(rc, "ring reduce-scatter");
}

/* Start step R->s: its buffers, and its first segments posted (one, maybe
 * empty, where the step has nothing to move). */
static int zs_ring_step(zs_comm_t c, zs_ring *R)
{
    int N = R->N, r = R->r, s = R->s;
    int sc = ((r - s - 1) % N + N) % N, rcv = ((r - s - 2) % N + N) % N;
    R->in = s == N - 2 ? R->recv : R->buf[s % 2];
    R->own = R->send + R->displ[rcv] * R->es;
    R->ns = R->count[sc];
    R->nr = R->count[rcv];
    size_t n = R->ns > R->nr ? R->ns : R->nr;
    R->ng = n ? (n + ZS_RING_SEGMENT - 1) / ZS_RING_SEGMENT : 1;
    R->gp = R->gs = 0;
    for (int i = 0; i < 2 * ZS_RING_WINDOW; i++)
        R->rq[i] = MPI_REQUEST_NULL;
    while (R->gp < R->ng && R->gp < ZS_RING_WINDOW)
        ZS_TRY(zs_ring_post(c, R));
    return 0;
}

static void zs_ring_free(zs_ring *R)
{
    if (R)
        free(R->displ);
    free(R);
}

/* A ring over send/recv with the scratch (2 * max(counts) elements; N = 2
 * needs none), its first segment posted. */
static int zs_ring_start(zs_comm_t c, const void *send, void *recv, const int *counts,
                         zs_comm_type t, void *scratch, zs_ring **out)
{
    int N = c->size;
    zs_ring *R = calloc(1, sizeof *R);
    size_t *d = malloc(2 * (size_t)N * sizeof *d);
    if (!R || !d) {
        free(R);
        free(d);
        ZS_FAIL("out of host memory in reduce-scatter");
    }
    size_t maxc = 0, off = 0;
    for (int q = 0; q < N; q++) {
        d[q] = off;
        d[N + q] = (size_t)counts[q];
        off += (size_t)counts[q];
        if ((size_t)counts[q] > maxc)
            maxc = (size_t)counts[q];
    }
    *R = (zs_ring){.N = N, .r = c->rank, .t = t, .es = zs_comm_type_size(t), .send = send,
                   .recv = recv, .displ = d, .count = d + N};
    R->buf[0] = scratch;
    R->buf[1] = scratch ? (char *)scratch + maxc * R->es : NULL;
    R->out = R->send + d[(c->rank + N - 1) % N] * R->es; /* step 0 sends own data */
    if (zs_ring_step(c, R)) {
        zs_ring_free(R);
        return -1;
    }
    *out = R;
    return 0;
}

/* Move the ring on while its messages have arrived; R->done at the end. */
static int zs_ring_advance(zs_comm_t c, zs_ring *R)
{
    while (!R->done) {
        MPI_Request *q = &R->rq[2 * (R->gs % ZS_RING_WINDOW)];
        int flag = 0, rc = MPI_Testall(2, q, &flag, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS)
            return zs_mpi_fail(rc, "ring reduce-scatter");
        if (!flag)
            return 0;
        size_t so = R->gs * ZS_RING_SEGMENT, rn = zs_ring_seg(R->nr, R->gs);
        if (rn)
            zs_comm_add(R->in + so * R->es, R->own + so * R->es, (int)rn, R->t);
        R->gs++;
        if (R->gp < R->ng)
            ZS_TRY(zs_ring_post(c, R));
        if (R->gs == R->ng) {
            R->out = R->in; /* the next step passes on what this one summed */
            if (++R->s == R->N - 1) {
                R->done = 1;
                return 0;
            }
            ZS_TRY(zs_ring_step(c, R));
        }
    }
    return 0;
}

/* Drive R to its end, at most the collective timeout (the clock read every
 * 64 polls, as zs_comm_finish). */
static int zs_ring_finish(zs_comm_t c, zs_ring *R, long long seq)
{
    double t0 = 0.0, limit = c->ledger->timeout_s;
    for (unsigned long i = 0;; i++) {
        ZS_TRY(zs_ring_advance(c, R));
        if (R->done)
            return 0;
        if ((i & 63) == 0) {
            double t = MPI_Wtime();
            if (i == 0)
                t0 = t;
            else if (t - t0 > limit)
                zs_comm_timed_out(c, c->counter, "reduce-scatter", seq);
        }
    }
}

/* The largest of c's counts. */
static size_t zs_comm_max_count(zs_comm_t c, const int *counts)
{
    size_t maxc = 0;
    for (int r = 0; r < c->size; r++)
        if ((size_t)counts[r] > maxc)
            maxc = (size_t)counts[r];
    return maxc;
}

/* 1 when scratch holds a ring's two buffers of maxc elements of es bytes. */
static int zs_comm_scratch_holds(const void *scratch, size_t scratch_bytes, size_t maxc, size_t es)
{
    return scratch && 2 * maxc * es <= scratch_bytes;
}

/* 1 when the host algorithm on c is the ring (with the scratch given). */
static int zs_comm_ring_fits(zs_comm_t c, const int *counts, zs_comm_type t, const void *scratch,
                             size_t scratch_bytes)
{
    /* two ranks receive straight into recv; more need the scratch */
    return !c->force_mpi_rs &&
           (c->size == 2 || zs_comm_scratch_holds(scratch, scratch_bytes,
                                                  zs_comm_max_count(c, counts),
                                                  zs_comm_type_size(t)));
}

static int zs_comm_reduce_scatter_host(zs_comm_t c, const void *send, void *recv,
                                       const int *counts, zs_comm_type t, void *scratch,
                                       size_t scratch_bytes);

/* Two-level reduce-scatter on host buffers (M nodes of K ranks, chunk q of
 * the buffer for rank q): inside the node, one ring per node block m of
 * chunks [mK, mK+K) leaves local rank i the node's sum of chunk mK+i, in
 * a temporary; then a ring across the M ranks of local index i sums those
 * into chunk jK+i for node j. Per element: the node's sum in ring order,
 * then the nodes' in ring order (the flat ring's order differs: equal
 * bytes where sums are exact, as in deterministic mode's integers). */
static int zs_comm_hier_reduce_scatter(zs_comm_t c, const void *send, void *recv,
                                       const int *counts, zs_comm_type t, void *scratch,
                                       size_t scratch_bytes)
{
    int K = c->hier_k, M = c->hier_m, i = c->rank % K;
    size_t es = zs_comm_type_size(t), mine = 0, maxc = zs_comm_max_count(c, counts), off = 0;
    int *cnt = malloc((size_t)M * sizeof(int));
    if (!cnt)
        ZS_FAIL("out of host memory in a hierarchical reduce-scatter");
    for (int m = 0; m < M; m++) {
        cnt[m] = counts[m * K + i];
        mine += (size_t)cnt[m];
    }
    char *tmp, *scr;
    if (c->hier_in && !c->staged) { /* counted (zs_comm_hier_counted) */
        tmp = c->hier_use;
        scr = zs_comm_scratch_holds(scratch, scratch_bytes, maxc, es) ? scratch : c->hier_scr;
    } else { /* the temporary, and the rings' scratch, outside the accounting */
        if (zs_comm_grow(&c->hier_tmp, &c->hier_tmp_cap, (mine + 2 * maxc) * es + 1)) {
            free(cnt);
            return -1;
        }
        tmp = c->hier_tmp;
        scr = tmp + mine * es;
    }
    int rc = 0;
    size_t pos = 0;
    for (int m = 0; m < M && !rc; m++) { /* inside the node, block by block */
        rc = zs_comm_reduce_scatter_host(c->hier_node, (const char *)send + off * es,
                                         tmp + pos * es, counts + (size_t)m * K, t, scr,
                                         2 * maxc * es);
        for (int q = 0; q < K; q++)
            off += (size_t)counts[m * K + q];
        pos += (size_t)cnt[m];
    }
    if (!rc) /* across the nodes */
        rc = zs_comm_reduce_scatter_host(c->hier_cross, tmp, recv, cnt, t, scr, 2 * maxc * es);
    free(cnt);
    return rc;
}

/* ---- block quantization (ZeRO++ qwZ), kept here in comm ---------------
 * A part of n elements becomes ceil(n/256) fp32 scales (max |x| / 127 of
 * each block of 256) followed by n int8 values round(x / scale). */
#define ZS_QBLOCK 256

size_t zs_comm_q8_bytes(size_t n) { return n + 4 * ((n + ZS_QBLOCK - 1) / ZS_QBLOCK); }

static float zs_q_load(const void *x, size_t i, zs_comm_type t)
{
    if (t == ZS_CT_BF16)
        return zs_bf16_to_f32(((const uint16_t *)x)[i]);
    if (t == ZS_CT_F16)
        return zs_f16_to_f32(((const uint16_t *)x)[i]);
    return ((const float *)x)[i];
}

static void zs_q_store(void *x, size_t i, zs_comm_type t, float v)
{
    if (t == ZS_CT_BF16)
        ((uint16_t *)x)[i] = zs_f32_to_bf16(v);
    else if (t == ZS_CT_F16)
        ((uint16_t *)x)[i] = zs_f32_to_f16(v);
    else
        ((float *)x)[i] = v;
}

static void zs_q8_encode(const void *x, size_t n, zs_comm_type t, unsigned char *out)
{
    size_t nb = (n + ZS_QBLOCK - 1) / ZS_QBLOCK;
    float *scale = (float *)(void *)out;
    signed char *q = (signed char *)out + 4 * nb;
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * ZS_QBLOCK, hi = lo + ZS_QBLOCK < n ? lo + ZS_QBLOCK : n;
        float m = 0.0f;
        for (size_t i = lo; i < hi; i++) {
            float a = fabsf(zs_q_load(x, i, t));
            m = a > m ? a : m;
        }
        float sc = m / 127.0f;
        memcpy(&scale[b], &sc, sizeof sc);
        for (size_t i = lo; i < hi; i++) {
            float v = sc > 0.0f ? zs_q_load(x, i, t) / sc : 0.0f;
            long r = lrintf(v);
            q[i] = (signed char)(r > 127 ? 127 : r < -127 ? -127 : r);
        }
    }
}

static void zs_q8_decode(const unsigned char *in, size_t n, zs_comm_type t, void *x)
{
    size_t nb = (n + ZS_QBLOCK - 1) / ZS_QBLOCK;
    const signed char *q = (const signed char *)in + 4 * nb;
    for (size_t b = 0; b < nb; b++) {
        float sc;
        memcpy(&sc, in + 4 * b, sizeof sc);
        size_t lo = b * ZS_QBLOCK, hi = lo + ZS_QBLOCK < n ? lo + ZS_QBLOCK : n;
        for (size_t i = lo; i < hi; i++)
            zs_q_store(x, i, t, (float)q[i] * sc);
    }
}

int zs_comm_set_quantized_weights(zs_comm_t c, int on)
{
    if (on && c->staged)
        ZS_FAIL("zero_quantized_weights (qwZ) runs on host buffers only: use --backend cpu");
    c->qwz = on != 0;
    return 0;
}

/* Two-level in-place allgather on a host buffer: across the nodes, the M
 * ranks of local index i exchange their chunks (jK+i for node j); then
 * inside the node, one allgather per node block m of chunks [mK, mK+K).
 * Pure copies: the same bytes as the flat one. Blocking. */
static int zs_comm_hier_allgather_dt(zs_comm_t c, void *buf, const int *counts,
                                     const int *displs, MPI_Datatype dt)
{
    int K = c->hier_k, M = c->hier_m, i = c->rank % K;
    int *cnt = malloc((size_t)M * 2 * sizeof(int));
    MPI_Request *req = malloc((size_t)(M > 1 ? M : 1) * sizeof(MPI_Request));
    if (!cnt || !req) {
        free(cnt);
        free(req);
        ZS_FAIL("out of host memory in a hierarchical allgather");
    }
    for (int m = 0; m < M; m++) {
        cnt[m] = counts[m * K + i];
        cnt[M + m] = displs[m * K + i];
    }
    int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cnt, cnt + M, dt,
                             c->hier_cross->comm, &req[0]);
    if (rc == MPI_SUCCESS && zs_comm_finish(c->hier_cross, 1, req, c->seq, "allgather")) {
        free(cnt);
        free(req);
        return -1;
    }
    for (int m = 0; m < M && rc == MPI_SUCCESS; m++)
        rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts + (size_t)m * K,
                             displs + (size_t)m * K, dt, c->hier_node->comm, &req[m]);
    if (rc == MPI_SUCCESS && zs_comm_finish(c->hier_node, M, req, c->seq, "allgather")) {
        free(cnt);
        free(req);
        return -1;
    }
    free(cnt);
    free(req);
    return rc == MPI_SUCCESS ? 0 : zs_mpi_fail(rc, "hierarchical MPI_Iallgatherv");
}

static int zs_comm_hier_allgather(zs_comm_t c, void *buf, const int *counts, const int *displs,
                                  zs_comm_type t)
{
    return zs_comm_hier_allgather_dt(c, buf, counts, displs, zs_mpi_type(t));
}

/* The host algorithm of zs_comm_reduce_scatter on host buffers, with the
 * ring's scratch `scratch` (NULL: none registered). Not recorded. */
static int zs_comm_reduce_scatter_host(zs_comm_t c, const void *send, void *recv,
                                       const int *counts, zs_comm_type t, void *scratch,
                                       size_t scratch_bytes)
{
    if (c->hier_node)
        return zs_comm_hier_reduce_scatter(c, send, recv, counts, t, scratch, scratch_bytes);
    if (zs_comm_ring_fits(c, counts, t, scratch, scratch_bytes)) {
        zs_ring *R;
        ZS_TRY(zs_ring_start(c, send, recv, counts, t, scratch, &R));
        int rc = zs_ring_finish(c, R, c->seq);
        zs_ring_free(R);
        return rc;
    }
    MPI_Request req;
    int rc = MPI_Ireduce_scatter(send, recv, counts, zs_mpi_type(t), zs_sum_op(c, t), c->comm,
                                 &req);
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, "MPI_Ireduce_scatter");
    return zs_comm_finish(c, 1, &req, c->seq, "reduce-scatter");
}

/* Staged (device buffers): the backend's collectives, or host copies of
 * send and recv through the same host algorithm, so the sums and the choice
 * of algorithm are those of a host run. */
static int zs_comm_reduce_scatter_staged(zs_comm_t c, const void *send, void *recv,
                                         const int *counts, zs_comm_type t, size_t total)
{
    if (c->use_coll && zs_comm_coll_type(t) >= 0)
        return zs_backend_coll_reduce_scatterv(c->be, send, recv, counts,
                                               (zs_coll_type)zs_comm_coll_type(t), c->size,
                                               c->rank);
    size_t es = zs_comm_type_size(t), mine = (size_t)counts[c->rank] * es;
    ZS_TRY(zs_comm_grow(&c->h_send, &c->h_send_cap, total * es + 1));
    ZS_TRY(zs_comm_grow(&c->h_recv, &c->h_recv_cap, mine + 1));
    if (c->scratch)
        ZS_TRY(zs_comm_grow(&c->h_scratch, &c->h_scratch_cap, c->scratch_bytes + 1));
    zs_backend_copy_d2h(c->be, c->h_send, send, total * es);
    ZS_TRY(zs_comm_reduce_scatter_host(c, c->h_send, c->h_recv, counts, t,
                                       c->scratch ? c->h_scratch : NULL, c->scratch_bytes));
    zs_backend_copy_h2d(c->be, recv, c->h_recv, mine);
    return 0;
}

/* zs_comm_reduce_scatter's exchange, not recorded: a copy on one rank,
 * staged through the host for device buffers, else the host algorithm. */
static int zs_comm_reduce_scatter_run(zs_comm_t c, const void *send, void *recv,
                                      const int *counts, zs_comm_type t, size_t total);

/* The two-level reduce-scatter's temporaries, counted in comm_buffers of
 * c's allocator (zs_comm_set_mem) from its start to its end, a phantom's
 * too (without storage): the node sums of this rank's column (the parts
 * mK + i of its local index i on every node m), sized for the largest
 * column of any local index so that every rank holds the same; and, where
 * the registered ring scratch is smaller than 2 * max(counts) elements,
 * a scratch of that size. Without an allocator: zs_comm_reduce_scatter_run. */
static int zs_comm_hier_counted(zs_comm_t c, const void *send, void *recv, const int *counts,
                                zs_comm_type t, size_t total)
{
    int K = c->hier_k, M = c->hier_m;
    size_t es = zs_comm_type_size(t), col = 0, maxc = zs_comm_max_count(c, counts);
    for (int i = 0; i < K; i++) {
        size_t n = 0;
        for (int m = 0; m < M; m++)
            n += (size_t)counts[m * K + i];
        if (n > col)
            col = n;
    }
    /* zs_comm_hier_reduce_scatter takes the registered scratch when it holds the ring */
    size_t tb = col * es, sb = 0;
    if (!zs_comm_scratch_holds(c->scratch, c->scratch_bytes, maxc, es))
        sb = 2 * maxc * es;
    void *tmp = NULL, *scr = NULL;
    ZS_TRY(zs_mem_alloc(c->mem, ZS_MEM_COMM_BUFFERS, tb, &tmp));
    int rc = zs_mem_alloc(c->mem, ZS_MEM_COMM_BUFFERS, sb, &scr);
    if (!rc) {
        c->hier_use = tmp;
        c->hier_scr = scr;
        c->hier_in = 1;
        rc = zs_comm_reduce_scatter_run(c, send, recv, counts, t, total);
        c->hier_in = 0;
        c->hier_use = c->hier_scr = NULL;
    }
    zs_mem_free(c->mem, ZS_MEM_COMM_BUFFERS, scr, sb);
    zs_mem_free(c->mem, ZS_MEM_COMM_BUFFERS, tmp, tb);
    return rc;
}

static int zs_comm_reduce_scatter_run(zs_comm_t c, const void *send, void *recv,
                                      const int *counts, zs_comm_type t, size_t total)
{
    if (c->mem && c->hier && c->hier_k > 1 && c->hier_m > 1 && !c->hier_in)
        return zs_comm_hier_counted(c, send, recv, counts, t, total);
    if (c->phantom)
        return 0;
    if (c->size == 1) {
        if (c->staged)
            zs_backend_copy_d2d(c->be, recv, send, total * zs_comm_type_size(t));
        else
            memmove(recv, send, total * zs_comm_type_size(t));
        return 0;
    }
    zs_comm_enter(c);
    if (c->staged)
        return zs_comm_reduce_scatter_staged(c, send, recv, counts, t, total);
    return zs_comm_reduce_scatter_host(c, send, recv, counts, t, c->scratch, c->scratch_bytes);
}

static size_t zs_comm_total(zs_comm_t c, const int *counts)
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
    double t0 = MPI_Wtime();
    ZS_TRY(zs_comm_reduce_scatter_run(c, send, recv, counts, t, total));
    if (!c->phantom && c->size > 1)
        rec.seconds = MPI_Wtime() - t0;
    zs_comm_record_add(c, &rec);
    return 0;
}

static int zs_comm_qgz(zs_comm_t c, const void *send, void *recv, const int *counts,
                       zs_comm_type t, int layer);

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
    p->t0 = MPI_Wtime();
    int rc = 0;
    if (c->qgz && (t == ZS_CT_F32 || t == ZS_CT_BF16 || t == ZS_CT_F16)) {
        /* qgZ: two all-to-alls, each recorded; complete on return */
        rc = zs_comm_qgz(c, send, recv, counts, t, layer);
        if (rc) {
            free(p);
            return rc;
        }
        p->norec = 1;
        p->t1 = MPI_Wtime();
        c->rs_pending = 1;
        *request = p;
        return 0;
    }
    if (c->phantom || c->size == 1 || c->staged || c->hier_node ||
        !zs_comm_ring_fits(c, counts, t, c->scratch, c->scratch_bytes)) {
        /* no ring to drive (or two levels): complete on return (MPI_Reduce_scatter's own
         * progress is Open MPI's, which moves only inside MPI calls) */
        rc = zs_comm_reduce_scatter_run(c, send, recv, counts, t, total);
        p->t1 = MPI_Wtime();
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
            p->t1 = MPI_Wtime();
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

/* qwZ's encoded parts: back to the allocator they came from. */
static void zs_comm_qbuf_free(zs_comm_pending *p)
{
    if (p->qmem)
        zs_mem_free(p->qmem, ZS_MEM_COMM_BUFFERS, p->qbuf, p->qbytes);
    else
        free(p->qbuf);
    p->qbuf = NULL;
    p->qmem = NULL;
}

void zs_comm_set_mem(zs_comm_t c, zs_mem_t mem) { c->mem = mem; }

/* qwZ: each rank's part in int8 blocks (zs_comm_q8_bytes of its count),
 * gathered as bytes; every part, this rank's too, is decoded into buf on
 * wait, so that every rank computes with the same parameters. Recorded as
 * an allgather of the encoded bytes. The encoded buffer is counted in
 * comm_buffers of c's allocator (zs_comm_set_mem) from here to the wait;
 * without one it is host memory outside the accounting. */
static int zs_comm_iallgather_q8(zs_comm_t c, void *buf, const int *counts, const int *displs,
                                 zs_comm_type t, int layer, zs_comm_pending *p, void **request)
{
    int N = c->size;
    size_t qtotal = 0;
    for (int r = 0; r < N; r++)
        qtotal += zs_comm_q8_bytes((size_t)counts[r]);
    p->r = zs_comm_rec(c, ZS_OP_ALLGATHER, layer, qtotal, ZS_CT_NTYPES);
    p->r.elem_size = 1;
    { /* the record's bytes, as zs_comm_rec computes them, over bytes */
        zs_comm_record q = zs_comm_rec(c, ZS_OP_ALLGATHER, layer, qtotal, ZS_CT_F32);
        p->r.wire_bytes = q.wire_bytes / 4;
        p->r.inter_bytes = q.inter_bytes / 4;
        p->r.inter_api_bytes = q.inter_api_bytes / 4;
    }
    if (qtotal > (size_t)INT_MAX && N > 1 && !c->phantom) {
        free(p);
        ZS_FAIL("a quantized allgather of %zu bytes is more than one MPI call can carry", qtotal);
    }
    /* the encoded parts: counted in comm_buffers until the wait (a phantom
     * run counts them too, without storage) */
    if (c->mem) {
        if (zs_mem_alloc(c->mem, ZS_MEM_COMM_BUFFERS, qtotal, &p->qbuf)) {
            free(p);
            return -1;
        }
        p->qmem = c->mem;
        p->qbytes = qtotal;
    }
    if (N == 1 || c->phantom) {
        p->req = MPI_REQUEST_NULL;
        *request = p;
        return 0;
    }
    p->t0 = MPI_Wtime();
    p->seq = zs_comm_enter(c);
    if (!p->qmem)
        p->qbuf = malloc(qtotal + 1);
    p->qcounts = malloc((size_t)N * 4 * sizeof(int));
    if (!p->qbuf || !p->qcounts) {
        zs_comm_qbuf_free(p);
        free(p->qcounts);
        free(p);
        ZS_FAIL("out of host memory for a quantized allgather of %zu bytes", qtotal);
    }
    p->qdispls = p->qcounts + N;
    p->ecounts = p->qcounts + 2 * N;
    p->edispls = p->qcounts + 3 * N;
    size_t off = 0;
    for (int r = 0; r < N; r++) {
        p->qcounts[r] = (int)zs_comm_q8_bytes((size_t)counts[r]);
        p->qdispls[r] = (int)off;
        p->ecounts[r] = counts[r];
        p->edispls[r] = displs[r];
        off += (size_t)p->qcounts[r];
    }
    p->qdst = buf;
    p->qt = t;
    size_t es = zs_comm_type_size(t);
    zs_q8_encode((const char *)buf + (size_t)displs[c->rank] * es, (size_t)counts[c->rank], t,
                 (unsigned char *)p->qbuf + p->qdispls[c->rank]);
    int rc;
    if (c->hier_node) {
        rc = zs_comm_hier_allgather_dt(c, p->qbuf, p->qcounts, p->qdispls, MPI_BYTE);
        p->req = MPI_REQUEST_NULL;
    } else {
        rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p->qbuf, p->qcounts, p->qdispls,
                             MPI_BYTE, c->comm, &p->req);
        rc = rc == MPI_SUCCESS ? 0 : zs_mpi_fail(rc, "MPI_Iallgatherv of quantized parameters");
    }
    if (rc) {
        zs_comm_qbuf_free(p);
        free(p->qcounts);
        free(p);
        return rc;
    }
    *request = p;
    return 0;
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
    p->t0 = MPI_Wtime();
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
            p->t1 = MPI_Wtime();
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
        p->r.seconds = MPI_Wtime() - p->t0;
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
    double t0 = MPI_Wtime();
    size_t bytes = n * zs_comm_type_size(t);
    void *mbuf = buf;
    if (c->staged) {
        ZS_TRY(zs_comm_grow(&c->h_send, &c->h_send_cap, bytes + 1));
        zs_backend_copy_d2h(c->be, c->h_send, buf, bytes);
        mbuf = c->h_send;
    }
    long long seq = zs_comm_enter(c);
    int rc;
    if (zs_wd_running) { /* blocking, with the watchdog's deadline */
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
    rec.seconds = MPI_Wtime() - t0;
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
    double t0 = MPI_Wtime();
    MPI_Request req;
    long long seq = zs_comm_enter(c);
    int rc = MPI_Iallgather(send, count, zs_mpi_type(t), recv, count, zs_mpi_type(t), c->comm,
                            &req);
    if (rc == MPI_SUCCESS && zs_comm_finish(c, 1, &req, seq, "allgather of scalars"))
        return -1;
    rec.seconds = MPI_Wtime() - t0;
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
    double t0 = MPI_Wtime();
    long long seq = zs_comm_enter(c);
    int rc;
    if (zs_wd_running) {
        zs_guard_begin(c, seq, "allreduce of a flag");
        rc = MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_INT, MPI_MAX, c->comm);
        zs_guard_end();
    } else {
        MPI_Request req;
        rc = MPI_Iallreduce(MPI_IN_PLACE, v, 1, MPI_INT, MPI_MAX, c->comm, &req);
        if (rc == MPI_SUCCESS && zs_comm_finish(c, 1, &req, seq, "allreduce of a flag"))
            return -1;
    }
    rec.seconds = MPI_Wtime() - t0;
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
    double t0 = MPI_Wtime();
    MPI_Request req;
    long long seq = zs_comm_enter(c);
    int rc = MPI_Igather(send, count, zs_mpi_type(t), recv, count, zs_mpi_type(t), 0, c->comm,
                         &req);
    if (rc == MPI_SUCCESS && zs_comm_finish(c, 1, &req, seq, "gather to rank 0"))
        return -1;
    rec.seconds = MPI_Wtime() - t0;
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
    double t0 = MPI_Wtime();
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
    rec.seconds = MPI_Wtime() - t0;
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, "MPI_Alltoallv");
    zs_comm_record_add(c, &rec);
    return 0;
}

int zs_comm_send_to_root(zs_comm_t c, int from, void *buf, int count, zs_comm_type t)
{
    if (from == 0 || (c->rank != 0 && c->rank != from))
        return 0;
    zs_comm_record rec = zs_comm_rec(c, ZS_OP_GATHER, -1, (size_t)count, t);
    if (c->phantom) {
        zs_comm_record_add(c, &rec);
        return 0;
    }
    double t0 = MPI_Wtime();
    MPI_Request req;
    long long seq = zs_comm_enter(c);
    int rc = c->rank == from
                 ? MPI_Isend(buf, count, zs_mpi_type(t), 0, 7002, c->comm, &req)
                 : MPI_Irecv(buf, count, zs_mpi_type(t), from, 7002, c->comm, &req);
    if (rc == MPI_SUCCESS && zs_comm_finish(c, 1, &req, seq, "send to rank 0"))
        return -1;
    rec.seconds = MPI_Wtime() - t0;
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
    p->t0 = MPI_Wtime();
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
    double t0 = MPI_Wtime();
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
    rec.seconds = MPI_Wtime() - t0;
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
    double t0 = MPI_Wtime();
    long long seq = zs_comm_enter(c);
    MPI_Request req;
    int rc = send ? MPI_Isend(v, n, MPI_DOUBLE, peer, 7003, c->comm, &req)
                  : MPI_Irecv(v, n, MPI_DOUBLE, peer, 7003, c->comm, &req);
    if (rc != MPI_SUCCESS)
        return zs_mpi_fail(rc, send ? "MPI_Isend" : "MPI_Irecv");
    if (zs_comm_finish(c, 1, &req, seq, send ? "send of partial sums" : "receive of partial sums"))
        return -1;
    rec.seconds = MPI_Wtime() - t0;
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

int zs_comm_agree(zs_comm_t c, int failed, double timeout_s, int *any)
{
    *any = failed;
    if (c->size == 1 || c->phantom)
        return 0;
    MPI_Request req;
    int in = failed ? c->size - c->rank : 0, out = 0; /* the lowest failing rank wins */
    long long seq = ++c->agree_seq;
    if (zs_me)
        zs_me->seq[ZS_BOARD_AGREE] = seq;
    if (MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_MAX, c->agree_comm, &req) != MPI_SUCCESS)
        return -1;
    double t0 = MPI_Wtime();
    int done = 0;
    while (!done) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done && MPI_Wtime() - t0 > timeout_s) {
            if (failed) /* the caller says why this rank failed */
                return -1;
            zs_comm_timed_out(c, ZS_BOARD_AGREE, "agreement on whether a rank failed", seq);
        }
    }
    *any = out ? c->size - out + 1 : 0; /* 1 + lowest failing rank, 0 when none */
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

/* ---- ZeRO++ hpZ and qgZ -------------------------------------------------- */

static void zs_comm_zpp_free(zs_comm_t c)
{
    zs_comm_free(c->hpz);
    zs_comm_free(c->qg_node);
    zs_comm_free(c->qg_cross);
    c->hpz = c->qg_node = c->qg_cross = NULL;
    c->qgz = 0;
}

/* sub's world ranks: c's ranks first, first + stride, ... (a phantom split
 * cannot ask MPI), so that its nodes are known. */
static int zs_comm_sub_nodes(zs_comm_t c, zs_comm_t sub, int first, int stride)
{
    if (sub->world_of)
        return 0;
    int *w = malloc((size_t)sub->size * sizeof(int));
    if (!w)
        ZS_FAIL("out of host memory for a %s group's ranks", zs_comm_group_name(c->group));
    for (int t = 0; t < sub->size; t++) {
        int q = first + t * stride;
        w[t] = c->world_of ? c->world_of[q] : q;
    }
    int rc = zs_comm_set_world_ranks(sub, w);
    free(w);
    return rc;
}

int zs_comm_set_hpz(zs_comm_t c, int K)
{
    zs_comm_free(c->hpz);
    c->hpz = NULL;
    if (K <= 1)
        return 0;
    int N = c->size;
    if (N % K)
        ZS_FAIL("zero_hpz_partition_size %d must divide the %d ranks of the %s group: use a "
                "divisor of %d", K, N, zs_comm_group_name(c->group), N);
    for (int q = 0; q < N; q++)
        if (zs_comm_node_of(c, q) != zs_comm_node_of(c, q - q % K))
            ZS_FAIL("zero_hpz_partition_size %d: ranks %d-%d of the %s group are not on one node, "
                    "and hpZ's secondary groups must stay inside a node: use a divisor of the "
                    "ranks per node", K, q - q % K, q - q % K + K - 1,
                    zs_comm_group_name(c->group));
    int me = c->rank;
    ZS_TRY(zs_comm_split(c, me / K, me % K, K, me % K, c->group, &c->hpz));
    int rc = zs_comm_sub_nodes(c, c->hpz, me - me % K, 1);
    if (rc) {
        zs_comm_free(c->hpz);
        c->hpz = NULL;
    }
    return rc;
}

zs_comm_t zs_comm_hpz(zs_comm_t c) { return c->hpz; }

int zs_comm_qgz_ranks_per_node(zs_comm_t c) { return c->qgz ? c->qg_k : 0; }

int zs_comm_set_quantized_gradients(zs_comm_t c, int on)
{
    zs_comm_free(c->qg_node);
    zs_comm_free(c->qg_cross);
    c->qg_node = c->qg_cross = NULL;
    c->qgz = 0;
    if (!on)
        return 0;
    if (c->staged)
        ZS_FAIL("zero_quantized_gradients (qgZ) runs on host buffers only: use --backend cpu");
    int N = c->size, K = zs_comm_node_blocks(c);
    if (!K)
        ZS_FAIL("zero_quantized_gradients (qgZ) needs the %s group's %d ranks in nodes of equal "
                "size, each of consecutive ranks (--ranks-per-node K, K dividing the group)",
                zs_comm_group_name(c->group), N);
    int i = c->rank % K, j = c->rank / K, M = N / K;
    int rc = zs_comm_split(c, j, i, K, i, c->group, &c->qg_node);
    if (!rc)
        rc = zs_comm_sub_nodes(c, c->qg_node, j * K, 1);
    if (!rc)
        rc = zs_comm_split(c, N + i, j, M, j, c->group, &c->qg_cross);
    if (!rc)
        rc = zs_comm_sub_nodes(c, c->qg_cross, i, K);
    if (rc) {
        zs_comm_free(c->qg_node);
        zs_comm_free(c->qg_cross);
        c->qg_node = c->qg_cross = NULL;
        return rc;
    }
    c->qgz = 1;
    c->qg_k = K;
    c->qg_m = M;
    return 0;
}

/* 4-bit blocks: a part of n elements becomes ceil(n/256) fp32 scales
 * (max |x| / 7 of each block; NaN for a block holding an inf or NaN, so
 * that the loss scaler still sees the overflow) followed by ceil(n/2)
 * bytes, two signed nibbles round(x / scale) in [-7, 7] each, the first in
 * the low half. */
size_t zs_comm_q4_bytes(size_t n) { return (n + 1) / 2 + 4 * ((n + ZS_QBLOCK - 1) / ZS_QBLOCK); }

static void zs_q4_encode(const float *x, size_t n, unsigned char *out)
{
    size_t nb = (n + ZS_QBLOCK - 1) / ZS_QBLOCK;
    unsigned char *q = out + 4 * nb;
    memset(q, 0, (n + 1) / 2);
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * ZS_QBLOCK, hi = lo + ZS_QBLOCK < n ? lo + ZS_QBLOCK : n;
        float m = 0.0f;
        int bad = 0; /* an inf or NaN (an fp16 overflow) stays one after decoding */
        for (size_t i = lo; i < hi; i++) {
            m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
            bad |= !isfinite(x[i]);
        }
        float sc = bad ? NAN : m / 7.0f;
        memcpy(out + 4 * b, &sc, sizeof sc);
        for (size_t i = lo; i < hi; i++) {
            long r = sc > 0.0f ? lrintf(x[i] / sc) : 0;
            r = r > 7 ? 7 : r < -7 ? -7 : r;
            q[i / 2] |= (unsigned char)(((unsigned)r & 0xFu) << (4 * (i & 1)));
        }
    }
}

/* acc[i] += the decoded value i */
static void zs_q4_decode_add(const unsigned char *in, size_t n, float *acc)
{
    size_t nb = (n + ZS_QBLOCK - 1) / ZS_QBLOCK;
    const unsigned char *q = in + 4 * nb;
    for (size_t b = 0; b < nb; b++) {
        float sc;
        memcpy(&sc, in + 4 * b, sizeof sc);
        size_t lo = b * ZS_QBLOCK, hi = lo + ZS_QBLOCK < n ? lo + ZS_QBLOCK : n;
        for (size_t i = lo; i < hi; i++) {
            int v = (q[i / 2] >> (4 * (i & 1))) & 0xF;
            acc[i] += (float)(v >= 8 ? v - 16 : v) * sc;
        }
    }
}

void zs_comm_quant_passes(const float *x, size_t n, unsigned char *enc, float *out)
{
    zs_q8_encode(x, n, ZS_CT_F32, enc);
    zs_q8_decode(enc, n, ZS_CT_F32, out);
    zs_q4_encode(x, n, enc);
    zs_q4_decode_add(enc, n, out);
}

/* A collective's temporary of `bytes`: counted in comm_buffers of c's
 * allocator (zs_comm_set_mem) where it has one (a phantom's without
 * storage), else host memory (none for a phantom). */
static int zs_comm_tmp_alloc(zs_comm_t c, size_t bytes, void **out, const char *what)
{
    if (c->mem)
        return zs_mem_alloc(c->mem, ZS_MEM_COMM_BUFFERS, bytes, out);
    *out = NULL;
    if (c->phantom)
        return 0;
    *out = malloc(bytes + 1);
    if (!*out)
        ZS_FAIL("out of host memory for %s (%zu bytes)", what, bytes);
    return 0;
}

static void zs_comm_tmp_free(zs_comm_t c, void *p, size_t bytes)
{
    if (c->mem)
        zs_mem_free(c->mem, ZS_MEM_COMM_BUFFERS, p, bytes);
    else
        free(p);
}

/* One level of qgZ on sub (S ranks): to each member d, the parts
 * seg[d][0..P) (ne[d][p] elements each, fp32, in `src` at off[d][p]) in
 * 4-bit blocks; from each member, this member's parts, decoded and added in
 * member order into acc (P parts of my_ne[p] elements at my_off[p]).
 * Recorded as an all-to-all of the encoded bytes on sub (phantom: only
 * recorded; the buffers are not touched). The encoded send and receive
 * buffers are temporaries of c (zs_comm_tmp_alloc) of sbytes and rbytes,
 * at least what this rank sends and receives. */
static int zs_qgz_level(zs_comm_t c, zs_comm_t sub, int P, const float *src, const size_t *ne,
                        const size_t *off, const size_t *my_ne, const size_t *my_off, float *acc,
                        int layer, size_t sbytes, size_t rbytes)
{
    int S = sub->size, rc = 0;
    int *sc = calloc(4 * (size_t)S, sizeof(int));
    if (!sc)
        ZS_FAIL("out of host memory for qgZ's all-to-all");
    int *sd = sc + S, *rcn = sc + 2 * S, *rd = sc + 3 * S;
    size_t st = 0, rt = 0, mine = 0;
    for (int p = 0; p < P; p++)
        mine += zs_comm_q4_bytes(my_ne[p]);
    for (int d = 0; d < S; d++) {
        size_t b = 0;
        for (int p = 0; p < P; p++)
            b += zs_comm_q4_bytes(ne[(size_t)d * P + p]);
        sc[d] = (int)b;
        sd[d] = (int)st;
        rcn[d] = (int)mine;
        rd[d] = (int)rt;
        st += b;
        rt += mine;
    }
    if (st > (size_t)INT_MAX || rt > (size_t)INT_MAX) {
        free(sc);
        ZS_FAIL("a qgZ all-to-all of %zu bytes is more than one MPI call can carry",
                st > rt ? st : rt);
    }
    if (st > sbytes || rt > rbytes) {
        free(sc);
        ZS_FAIL("internal: qgZ's all-to-all needs %zu and %zu bytes, has %zu and %zu", st, rt,
                sbytes, rbytes);
    }
    void *sv = NULL, *rv = NULL;
    rc = zs_comm_tmp_alloc(c, sbytes, &sv, "qgZ's all-to-all");
    if (!rc)
        rc = zs_comm_tmp_alloc(c, rbytes, &rv, "qgZ's all-to-all");
    if (!rc && sub->phantom)
        rc = zs_comm_alltoallv_bytes(sub, NULL, sc, sd, NULL, rcn, rd, layer);
    else if (!rc) {
        unsigned char *sb = sv, *rb = rv;
        for (int d = 0; d < S; d++) {
            unsigned char *o = sb + sd[d];
            for (int p = 0; p < P; p++) {
                size_t n = ne[(size_t)d * P + p];
                zs_q4_encode(src + off[(size_t)d * P + p], n, o);
                o += zs_comm_q4_bytes(n);
            }
        }
        rc = zs_comm_alltoallv_bytes(sub, sb, sc, sd, rb, rcn, rd, layer);
        for (int d = 0; !rc && d < S; d++) { /* in member order */
            const unsigned char *in = rb + rd[d];
            for (int p = 0; p < P; p++) {
                zs_q4_decode_add(in, my_ne[p], acc + my_off[p]);
                in += zs_comm_q4_bytes(my_ne[p]);
            }
        }
    }
    zs_comm_tmp_free(c, rv, rbytes);
    zs_comm_tmp_free(c, sv, sbytes);
    free(sc);
    return rc;
}

/* qgZ's reduce-scatter of a buffer of N parts (counts[r] elements for rank
 * r, one after the other) over M nodes of K consecutive ranks; rank r =
 * jK + i. Inside the node: to local rank i' the parts of ranks mK + i'
 * (every m) in 4-bit blocks; this rank sums, in local order, what it gets:
 * the node's sum of the parts of its local index on every node. Across:
 * to node m the node sum of part mK + i in 4-bit blocks; this rank sums,
 * in node order, the M node sums of its own part, into recv (type t).
 * Its temporaries (zs_comm_tmp_alloc: comm_buffers where c has an
 * allocator), sized alike on every rank (col: the largest column
 * sum_m counts[mK + i'] of any local index i', col4 its largest sum of
 * encoded sizes, maxc the largest part): the fp32 copy of the buffer
 * (total elements) and the node sums (col) through the first level, with
 * its send buffer (every part encoded) and receive buffer (K * col4
 * bytes); then the node sums, the result (maxc) and the second level's
 * send (col4) and receive (M times the largest encoded part) buffers. */
static int zs_comm_qgz(zs_comm_t c, const void *send, void *recv, const int *counts,
                       zs_comm_type t, int layer)
{
    int N = c->size, K = c->qg_k, M = c->qg_m, i = c->rank % K;
    size_t total = zs_comm_total(c, counts), mineall = 0;
    size_t *displ = malloc((size_t)N * sizeof(size_t));
    size_t *ne = malloc(((size_t)K * M + 2 * (size_t)M + (size_t)K * M) * sizeof(size_t));
    if (!displ || !ne) {
        free(displ);
        free(ne);
        ZS_FAIL("out of host memory for qgZ");
    }
    size_t *off = ne + (size_t)K * M, *my_ne = off + (size_t)K * M, *my_off = my_ne + M;
    size_t at = 0, col = 0, col4 = 0, maxc = 0, maxq4 = 0, all4 = 0;
    for (int r = 0; r < N; r++) {
        displ[r] = at;
        at += (size_t)counts[r];
        size_t q4 = zs_comm_q4_bytes((size_t)counts[r]);
        all4 += q4;
        if ((size_t)counts[r] > maxc)
            maxc = (size_t)counts[r];
        if (q4 > maxq4)
            maxq4 = q4;
    }
    for (int d = 0; d < K; d++) { /* inside: to local d, parts mK + d */
        size_t n = 0, n4 = 0;
        for (int m = 0; m < M; m++) {
            ne[(size_t)d * M + m] = (size_t)counts[m * K + d];
            off[(size_t)d * M + m] = displ[m * K + d];
            n += (size_t)counts[m * K + d];
            n4 += zs_comm_q4_bytes((size_t)counts[m * K + d]);
        }
        if (n > col)
            col = n;
        if (n4 > col4)
            col4 = n4;
    }
    for (int m = 0; m < M; m++) {
        my_ne[m] = (size_t)counts[m * K + i];
        my_off[m] = mineall;
        mineall += my_ne[m];
    }
    void *xv = NULL, *av = NULL, *fv = NULL;
    size_t xb = total * sizeof(float), ab = col * sizeof(float), fb = maxc * sizeof(float);
    int rc = zs_comm_tmp_alloc(c, xb, &xv, "qgZ's reduction");
    if (!rc)
        rc = zs_comm_tmp_alloc(c, ab, &av, "qgZ's reduction");
    float *x = xv, *acc = av;
    if (!rc && !c->phantom) {
        if (ab)
            memset(acc, 0, ab);
        for (size_t e = 0; e < total; e++)
            x[e] = zs_q_load(send, e, t);
    }
    if (!rc)
        rc = zs_qgz_level(c, c->qg_node, M, x, ne, off, my_ne, my_off, acc, layer, all4,
                          (size_t)K * col4);
    zs_comm_tmp_free(c, xv, xb);
    if (!rc)
        rc = zs_comm_tmp_alloc(c, fb, &fv, "qgZ's reduction");
    float *fin = fv;
    if (!rc) { /* across: to node m, the node sum of part mK + i */
        size_t one = (size_t)counts[c->rank], zero = 0;
        if (!c->phantom && fb)
            memset(fin, 0, fb);
        rc = zs_qgz_level(c, c->qg_cross, 1, acc, my_ne, my_off, &one, &zero, fin, layer, col4,
                          (size_t)M * maxq4);
    }
    for (size_t e = 0; !rc && !c->phantom && e < (size_t)counts[c->rank]; e++)
        zs_q_store(recv, e, t, fin[e]);
    zs_comm_tmp_free(c, fv, fb);
    zs_comm_tmp_free(c, av, ab);
    free(displ);
    free(ne);
    return rc;
}
