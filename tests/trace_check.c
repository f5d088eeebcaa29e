/* zerosim — check a --trace file against the run's JSON report.
 *
 * usage: trace_check TRACE REPORT
 *
 * The trace must parse as Chrome's trace event format; every complete ("X")
 * event has a name, a pid, a tid, ts >= 0 and dur >= 0; the events of each
 * (pid, tid) nest (none starts inside another and ends after it); every rank
 * of the report is a process, with op spans (forward, backward, optimizer)
 * on thread 0; and per rank the collectives' seconds sum to the report's
 * (the comm ledger's) seconds of that rank. Prints one line per failure and
 * a summary; exit 0 when all hold.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int pid, tid;
    double ts, end;
} span;

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid - y->pid;
    if (x->tid != y->tid)
        return x->tid - y->tid;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    return x->end > y->end ? -1 : x->end < y->end; /* the outer one first */
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: trace_check TRACE REPORT\n");
        return 2;
    }
    json_error_t err;
    json_t *tr = json_load_file(argv[1], 0, &err), *rep = json_load_file(argv[2], 0, &err);
    if (!tr || !rep) {
        printf("FAIL: cannot parse %s: %s (line %d)\n", tr ? argv[2] : argv[1], err.text, err.line);
        return 1;
    }
    int fails = 0;
    json_t *ev = json_object_get(tr, "traceEvents"), *comm = json_object_get(rep, "comm");
    int N = (int)json_integer_value(json_object_get(rep, "world_size"));
    if (!json_is_array(ev) || !json_is_array(comm) || N < 1) {
        printf("FAIL: no traceEvents array, or no comm / world_size in the report\n");
        return 1;
    }
    size_t n = json_array_size(ev), ns = 0;
    span *sp = calloc(n ? n : 1, sizeof *sp);
    double *comm_s = calloc((size_t)N, sizeof *comm_s);
    int *named = calloc((size_t)N, sizeof *named), *fwd = calloc((size_t)N, sizeof *fwd);
    int *bwd = calloc((size_t)N, sizeof *bwd), *opt = calloc((size_t)N, sizeof *opt);
    if (!sp || !comm_s || !named || !fwd || !bwd || !opt)
        return 2;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *name = json_string_value(json_object_get(e, "name"));
        json_t *jpid = json_object_get(e, "pid");
        int pid = (int)json_integer_value(jpid);
        if (!ph || !name || !json_is_integer(jpid) || pid < 0 || pid >= N) {
            printf("FAIL: event %zu lacks ph, name or a pid of a rank\n", i);
            fails++;
            continue;
        }
        if (!strcmp(ph, "M")) {
            if (!strcmp(name, "process_name"))
                named[pid] = 1;
            continue;
        }
        if (strcmp(ph, "X")) {
            printf("FAIL: event %zu has phase %s, not X or M\n", i, ph);
            fails++;
            continue;
        }
        json_t *jtid = json_object_get(e, "tid");
        double ts = json_number_value(json_object_get(e, "ts"));
        double dur = json_number_value(json_object_get(e, "dur"));
        if (!json_is_integer(jtid) || !(ts >= 0) || !(dur >= 0)) {
            printf("FAIL: event %zu (%s): no tid, or ts %g / dur %g not >= 0\n", i, name, ts, dur);
            fails++;
            continue;
        }
        int tid = (int)json_integer_value(jtid);
        sp[ns++] = (span){pid, tid, ts, ts + dur};
        const char *cat = json_string_value(json_object_get(e, "cat"));
        if (cat && !strcmp(cat, "comm"))
            comm_s[pid] += json_number_value(json_object_get(json_object_get(e, "args"), "seconds"));
        else if (tid == 0) {
            fwd[pid] += !strncmp(name, "forward", 7);
            bwd[pid] += !strncmp(name, "backward", 8);
            opt[pid] += !strncmp(name, "optimizer_", 10); /* _full, _shard, _host, _swapped */
        }
    }
    /* nesting: within a (pid, tid), each span either ends before the next
     * starts or contains it (0.002 us of slack for the printed rounding) */
    qsort(sp, ns, sizeof *sp, cmp_span);
    for (size_t k = 0; k + 1 < ns; k++) {
        const span *a = &sp[k], *b = &sp[k + 1];
        if (a->pid == b->pid && a->tid == b->tid && b->ts < a->end - 0.002 &&
            b->end > a->end + 0.002) {
            printf("FAIL: rank %d thread %d: [%.3f, %.3f] and [%.3f, %.3f] overlap without nesting\n",
                   a->pid, a->tid, a->ts, a->end, b->ts, b->end);
            fails++;
        }
    }
    for (int q = 0; q < N; q++) {
        json_t *ops = json_object_get(json_array_get(comm, (size_t)q), "ops"), *op;
        const char *key;
        double want = 0.0;
        json_object_foreach(ops, key, op)
            want += json_number_value(json_object_get(op, "seconds"));
        if (!named[q] || !fwd[q] || !bwd[q] || !opt[q]) {
            printf("FAIL: rank %d: process name %d, forward %d, backward %d, optimizer %d spans\n", q,
                   named[q], fwd[q], bwd[q], opt[q]);
            fails++;
        }
        if (fabs(comm_s[q] - want) > 1e-9 + 1e-9 * want) {
            printf("FAIL: rank %d: the trace's collectives sum to %.9g s, the ledger to %.9g s\n", q,
                   comm_s[q], want);
            fails++;
        }
        printf("rank %d: %d forward, %d backward spans; collectives %.6f s in the trace and the "
               "ledger\n", q, fwd[q], bwd[q], comm_s[q]);
    }
    printf("%s: %zu events, %d ranks, %d failures\n", argv[1], n, N, fails);
    json_decref(tr);
    json_decref(rep);
    free(sp);
    free(comm_s);
    free(named);
    free(fwd);
    free(bwd);
    free(opt);
    return fails ? 1 : 0;
}
