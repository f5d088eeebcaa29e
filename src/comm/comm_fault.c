/* zerosim — faults: the board of this node's ranks in shared memory, the
 * collective timeout (zs_comm_finish), the watchdog of blocking calls, the
 * SIGTERM handler, the test hook that stalls a rank, and the agreement on
 * whether a rank failed. */
#include "comm_impl.h"
#include "zerosim/backend.h"
#include "zerosim/comm.h"
#include "zerosim/error.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
        zs_line_s(l, phase > 0 && phase < ZS_PHASE_NPHASES
                         ? zs_comm_phase_name((zs_comm_phase)phase) : "?");
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
void zs_comm_timed_out(zs_comm_t c, int counter, const char *what, long long my_seq)
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
void zs_comm_stall_parse(zs_comm_t w)
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
long long zs_comm_enter(zs_comm_t c)
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
int zs_comm_finish(zs_comm_t c, int n, MPI_Request *req, long long seq, const char *what)
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
void zs_guard_begin(zs_comm_t c, long long seq, const char *what)
{
    zs_wd_comm = c;
    zs_wd_seq = seq;
    zs_wd_what = what;
    atomic_store(&zs_wd_armed_ns, zs_now_ns());
}

void zs_guard_end(void) { atomic_store(&zs_wd_armed_ns, 0); }

/* 1 when the watchdog runs: blocking calls may then use zs_guard_begin. */
int zs_comm_watchdog_running(void) { return zs_wd_running; }

void zs_comm_set_timeout(zs_comm_t c, double seconds)
{
    if (seconds > 0)
        c->ledger->timeout_s = seconds;
}

double zs_comm_timeout(zs_comm_t c) { return c->ledger->timeout_s; }

/* The board: a shared window over this node's ranks, a slot each, and the
 * SIGTERM handler. Without a shared window, this rank's own slot only. */
void zs_board_open(zs_comm_t w)
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

/* This rank's step and phase on the board (zs_comm_set_context), for the
 * others' lines. */
void zs_comm_board_set_where(int step, int phase)
{
    if (zs_me) {
        zs_me->step = step;
        zs_me->phase = phase;
    }
}

void zs_board_close(zs_comm_t w)
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

void zs_comm_abort(zs_comm_t c, int code)
{
    if (zs_me) { /* a line, and the others learn why from the board */
        zs_comm_stop_job(zs_error_msg()[0] ? zs_error_msg() : "a rank stopped the job", -1);
    }
    MPI_Abort(c ? c->comm : MPI_COMM_WORLD, code);
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
