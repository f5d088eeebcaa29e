/* zerosim — faults: the board of this node's ranks in shared memory, the
 * collective timeout (zs_comm_finish), the watchdog of blocking calls and
 * of start-up and shutdown, the SIGTERM handler, the test hook that stalls
 * a rank, and the agreement on whether a rank failed. */
#include "comm_impl.h"
#include "zerosim/backend.h"
#include "zerosim/comm.h"
#include "zerosim/error.h"

#include <dirent.h>
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
/* At shutdown (the board about to go): this node's other ranks, their pids */
static int *zs_last_rank, *zs_last_pid, zs_last_n;
static volatile sig_atomic_t zs_said; /* this rank has printed its line */
static _Thread_local int zs_in_watchdog; /* this thread is the watchdog (no MPI) */
/* Where this rank is outside the step loop: start-up (MPI_Init and
 * zs_comm_init's collectives) or shutdown (zs_comm_finalize); 0 between. */
enum { ZS_EDGE_NONE = 0, ZS_EDGE_STARTUP, ZS_EDGE_SHUTDOWN };
static volatile sig_atomic_t zs_edge;
/* The ranks agreed that one failed (zs_comm_agree): its line names why, and
 * mpirun may end this rank on the way out without another line. */
static volatile sig_atomic_t zs_fail_agreed;

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
    if (zs_edge == ZS_EDGE_STARTUP) {
        zs_line_s(l, "during start-up");
    } else if (zs_edge == ZS_EDGE_SHUTDOWN) {
        zs_line_s(l, "at shutdown");
    } else if (phase == ZS_PHASE_REPORT) {
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
 * unknown; and its parent's pid in *ppid when ppid is not NULL (0 when
 * unknown). Async-signal-safe. */
static char zs_proc_stat(int pid, int *ppid)
{
    if (ppid)
        *ppid = 0;
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
    const char *p = NULL; /* the state follows the last ") ", then the ppid */
    for (ssize_t i = 0; i + 2 < n; i++)
        if (buf[i] == ')' && buf[i + 1] == ' ')
            p = buf + i + 2;
    if (!p)
        return '?';
    if (ppid && p[1] == ' ')
        for (const char *q = p + 2; *q >= '0' && *q <= '9'; q++)
            *ppid = *ppid * 10 + (*q - '0');
    if (*p == 'Z' || *p == 'X')
        return 'D';
    if (*p == 'T' || *p == 't')
        return 'T';
    return 'R';
}

static char zs_proc_state(int pid) { return zs_proc_stat(pid, NULL); }

/* ", rank R (process stopped)" or "rank R" for the n-th rank named. */
static void zs_line_rank(zs_line *l, int n, int world_rank, char st)
{
    zs_line_s(l, n ? ", rank " : "rank ");
    zs_line_i(l, world_rank);
    zs_line_s(l, st == 'T' ? " (process stopped)" : st == 'D' ? " (process gone)" : "");
}

/* At shutdown: the ranks of this node (as the board last had them) whose
 * process is stopped. Async-signal-safe. */
static int zs_line_stopped_last(zs_line *l, int *blamed)
{
    int named = 0;
    for (int i = 0; i < zs_last_n; i++)
        if (zs_proc_state(zs_last_pid[i]) == 'T') {
            if (*blamed < 0)
                *blamed = zs_last_rank[i];
            zs_line_rank(l, named++, zs_last_rank[i], 'T');
        }
    return named;
}

static zs_board_slot *zs_board_find(int world_rank)
{
    for (int i = 0; i < zs_board_n; i++)
        if (zs_board[i].world_rank == world_rank)
            return &zs_board[i];
    return NULL;
}

/* Another rank of this node that stopped the job: its reason and its rank
 * (the rank it named in *blamed, when not NULL); one that named a rank
 * first, any when `any`. 0 when none (l untouched). Async-signal-safe. */
static int zs_line_stopped_by_other(zs_line *l, int any, int *blamed)
{
    for (int pass = 0; pass < (any ? 2 : 1); pass++)
        for (int i = 0; i < zs_board_n; i++) {
            const zs_board_slot *q = &zs_board[i];
            if (q == zs_me || q->state != ZS_STOPPED_JOB || (pass == 0 && q->blamed < 0))
                continue;
            if (blamed)
                *blamed = q->blamed;
            zs_line_s(l, q->why);
            zs_line_s(l, " (rank ");
            zs_line_i(l, q->world_rank);
            zs_line_s(l, " stopped the job)");
            return 1;
        }
    return 0;
}

/* Why the job stops, as this rank's signal handler sees it: a rank that
 * stopped the job and said why, else the ranks whose process is gone
 * without a word. 0 when this rank has nothing true to add: the ranks
 * agreed that one failed (its line is the one line), or in shutdown no
 * rank of this node is stopped (a rank failed and said so, or mpirun's
 * message names the lost one). Async-signal-safe. */
static int zs_line_cause(zs_line *l)
{
    if (zs_fail_agreed && zs_edge != ZS_EDGE_SHUTDOWN)
        return 0;
    if (zs_edge == ZS_EDGE_SHUTDOWN) { /* the board may be gone */
        int blamed = -1;
        if (!zs_line_stopped_last(l, &blamed))
            return 0;
        zs_line_s(l, " did not finish shutdown in time, and mpirun stopped the job");
        return 1;
    }
    for (int i = 0; i < zs_board_n; i++) /* a rank that named this one first */
        if (&zs_board[i] != zs_me && zs_board[i].state == ZS_STOPPED_JOB && zs_me &&
            zs_board[i].blamed == zs_me->world_rank) {
            zs_line_s(l, "this rank did not arrive or finish in time, and rank ");
            zs_line_i(l, zs_board[i].world_rank);
            zs_line_s(l, " stopped the job");
            return 1;
        }
    if (zs_line_stopped_by_other(l, 1, NULL))
        return 1;
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
    return 1;
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
        if (zs_line_cause(&l)) {
            zs_line_s(&l, "\n");
            ssize_t w = write(STDERR_FILENO, buf, l.len);
            (void)w;
        }
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

static void zs_line_timeout(zs_line *l, double limit_s)
{
    char t[32];
    snprintf(t, sizeof t, "%g", limit_s);
    zs_line_s(l, " within the collective timeout of ");
    zs_line_s(l, t);
    zs_line_s(l, " s (hung or stopped? --collective-timeout S waits longer)");
}

/* A rank that holds the others: its process stopped, or gone without a word
 * (not one that stopped the job, or that mpirun stopped, itself). */
static int zs_slot_stuck(const zs_board_slot *q, char st)
{
    return st == 'T' || (st == 'D' && q->state == ZS_RUNNING);
}

/* The ranks of c on the board that are behind this rank's count my_seq
 * (when `entered` is 0: they did not enter the collective), or that entered
 * it and whose process is stopped or gone (`entered` 1: they cannot finish
 * it). Returns how many were named; *blamed is the first. */
static int zs_line_members(zs_line *l, zs_comm_t c, int counter, long long my_seq, int entered,
                           int *blamed)
{
    int named = 0;
    for (int i = 0; i < c->size; i++) {
        int w = c->world_of ? c->world_of[i] : c->ledger == c ? i : -1;
        const zs_board_slot *q = i == c->rank ? NULL : zs_board_find(w);
        if (!q || (q->seq[counter] >= my_seq) != entered || q->state == ZS_STOPPED_JOB ||
            q->state == ZS_SIGNALLED) /* one that gave up, or mpirun ended: not stuck */
            continue;
        char st = zs_proc_state(q->pid);
        if (entered && !zs_slot_stuck(q, st))
            continue;
        if (*blamed < 0)
            *blamed = w;
        zs_line_rank(l, named++, w, st);
    }
    return named;
}

/* The ranks on this node's board whose process is stopped or gone. */
static int zs_line_board_stuck(zs_line *l, int *blamed)
{
    int named = 0;
    for (int i = 0; i < zs_board_n; i++) {
        char st = &zs_board[i] == zs_me ? 'R' : zs_proc_state(zs_board[i].pid);
        if (!zs_slot_stuck(&zs_board[i], st))
            continue;
        if (*blamed < 0)
            *blamed = zs_board[i].world_rank;
        zs_line_rank(l, named++, zs_board[i].world_rank, st);
    }
    return named;
}

/* Past limit_s in a collective on c: name the ranks of c that did not enter
 * it and those that entered it but stopped (from the board), else any rank
 * of this node whose process stopped, and stop the job. */
static void zs_comm_timed_out_after(zs_comm_t c, int counter, const char *what, long long my_seq,
                                    double limit_s) __attribute__((noreturn));
static void zs_comm_timed_out_after(zs_comm_t c, int counter, const char *what, long long my_seq,
                                    double limit_s)
{
    char why[512];
    zs_line l = {why, sizeof why, 0};
    int blamed = -1, unknown = 0;
    for (int i = 0; i < c->size; i++)
        if (i != c->rank && !zs_board_find(c->world_of ? c->world_of[i]
                                           : c->ledger == c ? i : -1))
            unknown++;
    int absent = zs_line_members(&l, c, counter, my_seq, 0, &blamed);
    if (absent) {
        zs_line_s(&l, " did not arrive at the ");
        zs_line_s(&l, what);
    }
    size_t mark = l.len;
    if (absent)
        zs_line_s(&l, ", and ");
    int stuck = zs_line_members(&l, c, counter, my_seq, 1, &blamed);
    if (stuck) {
        zs_line_s(&l, absent ? " did not finish it" : " did not finish the ");
        if (!absent)
            zs_line_s(&l, what);
    } else {
        l.len = mark;
        l.p[mark] = '\0';
    }
    if (!absent && !stuck) {
        zs_line_s(&l, unknown ? "a rank on another node did not arrive at the "
                              : "the other ranks did not finish the ");
        zs_line_s(&l, what);
    }
    zs_line_timeout(&l, limit_s);
    if (!absent && !stuck) { /* held up by a rank of another group? */
        mark = l.len;
        zs_line_s(&l, "; stopped on this node: ");
        if (!zs_line_board_stuck(&l, &blamed)) {
            l.len = mark;
            l.p[mark] = '\0';
        }
    }
    if (blamed < 0) { /* another rank gave up first and named one: say that */
        zs_line named = {why, sizeof why, 0};
        zs_line_stopped_by_other(&named, 0, &blamed);
    }
    zs_comm_stop_job(why, blamed);
}

void zs_comm_timed_out(zs_comm_t c, int counter, const char *what, long long my_seq)
{
    zs_comm_timed_out_after(c, counter, what, my_seq, c->ledger->timeout_s);
}

/* Test hook (tests/test_faults.sh, tests/test_stuck_ranks.sh):
 * ZEROSIM_TEST_STALL_AT=R:step:S makes world rank R stall at its first
 * collective of step S (counted from 1, as the progress lines count);
 * R:coll:K at its K-th collective of the run; R:startup before MPI_Init;
 * R:init after MPI_Init, before zs_comm_init's first collective;
 * R:shutdown as zs_comm_finalize begins. The stalled rank says so on
 * stderr, with its pid, stops itself (SIGSTOP) and, once continued, sleeps
 * until a signal ends it. */
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

static void zs_guard_off(void);

static void zs_comm_stall_forever(int rank, const char *where)
{
    zs_guard_off(); /* a stalled rank models one that does not run: it blames no one */
    fprintf(stderr, "zerosim: test hook: rank %d (pid %ld) stalls %s\n", rank, (long)getpid(),
            where);
    fflush(stderr);
    raise(SIGSTOP); /* stopped from here on, as a SIGSTOP from outside would */
    for (;;)        /* continued (SIGCONT before mpirun's SIGTERM): wait for it */
        pause();
}

static void zs_comm_stall(zs_comm_t w)
{
    char where[64];
    snprintf(where, sizeof where, "at step %d, collective %lld", w->step + 1, w->ncoll);
    zs_comm_stall_forever(w->rank, where);
}

/* The hook's R:point forms (startup, init, shutdown) for world rank `rank`;
 * `label` says where on the hook's line. */
static void zs_comm_stall_at_point(const char *point, const char *label, int rank)
{
    const char *s = getenv("ZEROSIM_TEST_STALL_AT");
    int r = -1, used = 0;
    char kind[16] = "";
    if (s && sscanf(s, "%d:%15[a-z]%n", &r, kind, &used) == 2 && s[used] == '\0' &&
        r == rank && rank >= 0 && !strcmp(kind, point))
        zs_comm_stall_forever(rank, label);
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

/* A wait's deadline, limit_s from now, not counting the time this process
 * was stopped: a gap of over a second between two readings (made every few
 * microseconds while polling) is time stopped (SIGSTOP), not the others'
 * delay, and moves the deadline; a rank continued by mpirun's SIGCONT then
 * blames no one before its SIGTERM comes. */
void zs_deadline_start(zs_deadline *d, double limit_s)
{
    d->start = d->last = zs_mpi_wtime();
    d->limit_s = limit_s;
}

int zs_deadline_passed(zs_deadline *d)
{
    double t = zs_mpi_wtime();
    if (t - d->last > 1.0)
        d->start += t - d->last;
    d->last = t;
    return t - d->start > d->limit_s;
}

/* Wait for n requests, polling, at most the collective timeout; past it,
 * stop the job (zs_comm_timed_out). seq is zs_comm_enter's count. The clock
 * is read every 64 polls: MPI_Testall drives progress as MPI_Waitall would. */
int zs_comm_finish(zs_comm_t c, int n, MPI_Request *req, long long seq, const char *what)
{
    int done = 0;
    zs_deadline d;
    zs_deadline_start(&d, c->ledger->timeout_s);
    for (unsigned long i = 1;; i++) {
        int rc = zs_mpi_testall(n, req, &done);
        if (rc != MPI_SUCCESS)
            return zs_mpi_fail(rc, what);
        if (done)
            return 0;
        if ((i & 63) == 0 && zs_deadline_passed(&d))
            zs_comm_timed_out(c, c->counter, what, seq);
    }
}

/* The allreduce stays a blocking MPI_Allreduce: Open MPI's tuned blocking
 * algorithms ran about twice as fast as MPI_Iallreduce at 256 KiB on two
 * ranks here (bench_comm --allreduce-bytes). A watchdog thread, which never
 * calls MPI, gives it the same deadline: the main thread arms it around the
 * call, and past the timeout the watchdog prints the line and exits the
 * process, and mpirun stops the others. */
static _Atomic long long zs_wd_armed_ns; /* start of the guarded call; 0: none */
static _Atomic int zs_wd_edge;           /* ZS_EDGE_*: what is guarded (none: a call) */
static double zs_wd_edge_limit_s;        /* start-up's or shutdown's deadline */
static zs_comm_t zs_wd_comm;
static long long zs_wd_seq;
static const char *zs_wd_what;
static int zs_wd_running;
static double zs_startup_timeout_s = 600.0; /* zs_comm_set_startup_timeout */
/* Start-up and shutdown wait at least this long, whatever the collective
 * timeout: MPI_Init alone took over 2 s on a loaded 2-core machine, with
 * no rank missing. max(T, 10) <= T + 10 keeps every rank's exit within the
 * timeout plus 10 s. */
#define ZS_EDGE_MIN_S 10.0

static long long zs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The launchers' variables that hold a process's world rank: Open MPI's,
 * PMIx's, and PMI's (MPICH's mpiexec, hydra). */
static const char *const zs_rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
#define ZS_RANK_VARS (sizeof zs_rank_vars / sizeof *zs_rank_vars)

/* A rank from a variable's value: a whole non-negative int, else -1. */
static int zs_rank_parse(const char *v)
{
    char *end;
    long r = v && *v ? strtol(v, &end, 10) : -1;
    return r >= 0 && r < INT_MAX && !*end ? (int)r : -1;
}

/* This process's world rank before MPI knows it: the launcher's variable
 * (zs_rank_vars), else -1. */
static int zs_env_rank(void)
{
    for (size_t i = 0; i < ZS_RANK_VARS; i++) {
        int r = zs_rank_parse(getenv(zs_rank_vars[i]));
        if (r >= 0)
            return r;
    }
    return -1;
}

/* The world rank of process pid, from the launcher's variable in its
 * environment (/proc/PID/environ, read whole up to 1 MiB; the first of
 * zs_rank_vars that it holds), else -1. */
static int zs_proc_rank(int pid)
{
    char path[40];
    snprintf(path, sizeof path, "/proc/%d/environ", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap + 1);
    ssize_t got = 1;
    while (buf && n < cap && (got = read(fd, buf + n, cap - n)) > 0)
        n += (size_t)got;
    close(fd);
    int rank = -1;
    if (buf) {
        buf[n] = '\0';
        for (size_t k = 0; k < ZS_RANK_VARS && rank < 0; k++) {
            size_t kn = strlen(zs_rank_vars[k]);
            for (size_t i = 0; i < n; i += strlen(buf + i) + 1)
                if (!strncmp(buf + i, zs_rank_vars[k], kn) && buf[i + kn] == '=') {
                    rank = zs_rank_parse(buf + i + kn + 1);
                    break;
                }
        }
    }
    free(buf);
    return rank;
}

/* Before the board (start-up): the ranks launched beside this one (the same
 * parent process, a world rank in their environment) whose process is
 * stopped. Returns how many were named; *blamed is the first. */
static int zs_line_stuck_siblings(zs_line *l, int *blamed)
{
    int me = (int)getpid(), parent = (int)getppid(), named = 0;
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        int ppid = 0;
        if (*end || pid <= 0 || pid > INT_MAX || pid == me)
            continue;
        char st = zs_proc_stat((int)pid, &ppid);
        if (ppid != parent || st != 'T') /* one gone ended the job already */
            continue;
        int r = zs_proc_rank((int)pid);
        if (r < 0)
            continue;
        if (*blamed < 0)
            *blamed = r;
        zs_line_rank(l, named++, r, st);
    }
    closedir(d);
    return named;
}

/* Past the deadline of start-up or shutdown (the watchdog, no MPI): name the
 * ranks of this node whose process is stopped, and end this process;
 * mpirun stops the others. */
static void zs_comm_edge_timed_out(int edge, double limit_s) __attribute__((noreturn));
static void zs_comm_edge_timed_out(int edge, double limit_s)
{
    const char *what = edge == ZS_EDGE_STARTUP
                           ? "start-up (MPI_Init and the first collectives)"
                           : "shutdown (MPI_Win_free and MPI_Finalize)";
    char why[512];
    zs_line l = {why, sizeof why, 0};
    int blamed = -1;
    if (edge == ZS_EDGE_STARTUP ? zs_line_stuck_siblings(&l, &blamed)
                                : zs_line_stopped_last(&l, &blamed)) {
        zs_line_s(&l, " did not finish ");
    } else {
        zs_line_s(&l, "the other ranks (stopped? on another node?) did not finish ");
    }
    zs_line_s(&l, what);
    char t[32];
    snprintf(t, sizeof t, "%g", limit_s);
    zs_line_s(&l, " within ");
    zs_line_s(&l, t);
    zs_line_s(&l, " s (the collective timeout, at least 10 s at start-up and shutdown; hung or "
                  "stopped? --collective-timeout S waits longer)");
    zs_comm_stop_job(why, blamed);
}

static void *zs_watchdog(void *arg)
{
    (void)arg;
    zs_in_watchdog = 1;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals are the main thread's */
    const struct timespec nap = {0, 50000000};
    long long woke = zs_now_ns();
    for (;;) {
        nanosleep(&nap, NULL);
        long long t = atomic_load(&zs_wd_armed_ns), gap = zs_now_ns() - woke;
        woke += gap;
        /* a nap of over a second: this process was stopped (SIGSTOP), and
         * the time it did not run is not the others' delay: the deadline
         * moves by it (mpirun's SIGCONT comes with its SIGTERM) */
        if (t && gap > 1000000000LL &&
            atomic_compare_exchange_strong(&zs_wd_armed_ns, &t, t + gap))
            t += gap;
        if (!t)
            continue;
        int edge = atomic_load(&zs_wd_edge);
        double waited = 1e-9 * (double)(zs_now_ns() - t);
        zs_comm_t c = zs_wd_comm;
        if (edge != ZS_EDGE_NONE && waited > zs_wd_edge_limit_s)
            zs_comm_edge_timed_out(edge, zs_wd_edge_limit_s);
        if (edge == ZS_EDGE_NONE && c && waited > c->ledger->timeout_s)
            zs_comm_timed_out(c, c->counter, zs_wd_what, zs_wd_seq);
    }
    return NULL;
}

static void zs_watchdog_start(void)
{
    if (zs_wd_running)
        return;
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
    atomic_store(&zs_wd_edge, ZS_EDGE_NONE);
    atomic_store(&zs_wd_armed_ns, zs_now_ns());
}

void zs_guard_end(void) { atomic_store(&zs_wd_armed_ns, 0); }

static void zs_guard_off(void) { atomic_store(&zs_wd_armed_ns, 0); }

/* Arm the watchdog for start-up or shutdown, limit_s from now. */
static void zs_guard_edge(int edge, double limit_s)
{
    zs_edge = edge;
    zs_wd_edge_limit_s = limit_s;
    atomic_store(&zs_wd_edge, edge);
    atomic_store(&zs_wd_armed_ns, zs_now_ns());
}

void zs_comm_set_startup_timeout(double seconds)
{
    if (seconds > 0 && isfinite(seconds))
        zs_startup_timeout_s = seconds;
}

double zs_comm_startup_timeout(void) { return zs_startup_timeout_s; }

/* Before MPI_Init: the test hook's R:startup, then the watchdog armed for
 * start-up, the start-up timeout but at least ZS_EDGE_MIN_S (ended by
 * zs_comm_edge_end). */
void zs_comm_startup_begin(void)
{
    int rank = zs_env_rank();
    zs_board_solo.world_rank = rank >= 0 ? rank : 0;
    zs_comm_stall_at_point("startup", "before MPI_Init", rank);
    zs_watchdog_start();
    if (zs_wd_running)
        zs_guard_edge(ZS_EDGE_STARTUP, fmax(zs_startup_timeout_s, ZS_EDGE_MIN_S));
}

/* After MPI_Init, before zs_comm_init's first collective: the hook's R:init. */
void zs_comm_startup_mpi(int rank)
{
    zs_board_solo.world_rank = rank;
    zs_comm_stall_at_point("init", "after MPI_Init", rank);
}

/* Start-up or shutdown is over: the watchdog disarmed. */
void zs_comm_edge_end(void)
{
    atomic_store(&zs_wd_armed_ns, 0);
    zs_edge = ZS_EDGE_NONE;
}

/* As zs_comm_finalize begins: the hook's R:shutdown, then the watchdog armed
 * for shutdown with the collective timeout, at least ZS_EDGE_MIN_S (until
 * zs_comm_edge_end). */
void zs_comm_shutdown_begin(zs_comm_t w)
{
    int n = 0, *rank = malloc((size_t)zs_board_n * sizeof *rank),
        *pid = malloc((size_t)zs_board_n * sizeof *pid);
    for (int i = 0; rank && pid && i < zs_board_n; i++)
        if (&zs_board[i] != zs_me) {
            rank[n] = zs_board[i].world_rank;
            pid[n++] = zs_board[i].pid;
        }
    zs_last_rank = rank;
    zs_last_pid = pid;
    zs_last_n = rank && pid ? n : 0; /* the process ends soon after: never freed */
    zs_edge = ZS_EDGE_SHUTDOWN;
    zs_comm_stall_at_point("shutdown", "at shutdown", w->rank);
    if (zs_wd_running)
        zs_guard_edge(ZS_EDGE_SHUTDOWN, fmax(w->timeout_s, ZS_EDGE_MIN_S));
}

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
    zs_watchdog_start(); /* started before MPI_Init (zs_comm_startup_begin) */
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

/* Shutdown (zs_comm_shutdown_begin): the board goes; the SIGTERM handler
 * stays and no longer reads it. */
void zs_board_close(zs_comm_t w)
{
    if (!zs_me)
        return;
    zs_me->state = ZS_FINISHED;
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
    zs_deadline d;
    zs_deadline_start(&d, timeout_s);
    int done = 0;
    while (!done) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done && zs_deadline_passed(&d)) {
            if (failed) /* the caller says why this rank failed */
                return -1;
            zs_comm_timed_out_after(c, ZS_BOARD_AGREE, "agreement on whether a rank failed", seq,
                                    timeout_s);
        }
    }
    *any = out ? c->size - out + 1 : 0; /* 1 + lowest failing rank, 0 when none */
    if (out)
        zs_fail_agreed = 1;
    return 0;
}
