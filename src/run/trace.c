/* zerosim — the Chrome trace of a run (--trace): each rank's op spans and
 * collectives as JSON events, gathered into one document on rank 0. */
#include "run/trace.h"
#include "zerosim/error.h"
#include "zerosim/program.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the trace ---------------------------------------------------------------- */

/* A growing string; on allocation failure it stops growing and fails. */
typedef struct {
    char *s;
    size_t n, cap;
    int failed;
} zs_text;

static void zs_text_add(zs_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void zs_text_add(zs_text *t, const char *fmt, ...)
{
    for (int tries = 0; tries < 2 && !t->failed; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->s ? t->s + t->n : NULL, t->s ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            t->failed = 1;
            return;
        }
        if (t->s && t->n + (size_t)k < t->cap) {
            t->n += (size_t)k;
            return;
        }
        size_t cap = t->cap ? t->cap : 4096;
        while (cap <= t->n + (size_t)k)
            cap *= 2;
        char *p = realloc(t->s, cap);
        if (!p) {
            t->failed = 1;
            return;
        }
        t->s = p;
        t->cap = cap;
    }
}

/* This rank's events as a piece of a JSON array (each event followed by
 * ",\n"): its op spans on thread 0 ("compute"), its collectives of the
 * training phases from ledger record rec0 on threads 1.. ("communication";
 * a collective that overlaps another one still in flight, a prefetched
 * gather, takes the next thread). Times in microseconds from t0. */
static void zs_trace_rank(zs_text *t, int rank, zs_engine *e, zs_comm_t comm, size_t rec0,
                          double t0, int *truncated)
{
    size_t n;
    const zs_trace_span *sp = zs_engine_trace(e, &n);
    zs_text_add(t, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": "
                   "{\"name\": \"rank %d\"}},\n", rank, rank);
    zs_text_add(t, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, "
                   "\"args\": {\"name\": \"compute\"}},\n", rank);
    for (size_t i = 0; i < n; i++) {
        const char *name = zs_step_op_name((zs_step_op_kind)sp[i].kind);
        if (sp[i].kind == ZS_SOP_FORWARD && (sp[i].flags & ZS_SOPF_RECOMPUTE))
            name = "recompute";
        char label[64];
        if (sp[i].unit >= 0)
            snprintf(label, sizeof label, "%s u%d", name, sp[i].unit);
        else
            snprintf(label, sizeof label, "%s", name);
        zs_text_add(t, "{\"name\": \"%s\", \"cat\": \"compute\", \"ph\": \"X\", \"pid\": %d, "
                       "\"tid\": 0, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"step\": %d, "
                       "\"unit\": %d}},\n",
                    label, rank, (sp[i].start - t0) * 1e6, sp[i].seconds * 1e6, sp[i].step,
                    sp[i].unit);
    }
    size_t nr;
    const zs_comm_record *rec = zs_comm_records(comm, &nr);
    *truncated = nr >= ZS_COMM_KEEP;
    enum { LANES = 8 };
    double lane_end[LANES] = {0};
    int lanes = 0;
    for (size_t i = rec0; i < nr; i++) {
        const zs_comm_record *c = &rec[i];
        if (c->phase == ZS_PHASE_SETUP || c->phase == ZS_PHASE_REPORT)
            continue;
        double start = (c->start - t0) * 1e6, dur = c->seconds * 1e6;
        int lane = 0;
        while (lane < lanes && lane < LANES - 1 && lane_end[lane] > start)
            lane++;
        if (lane == lanes) {
            lanes++;
            zs_text_add(t, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                           "\"args\": {\"name\": \"communication%s\"}},\n",
                        rank, 1 + lane, lane ? " (overlapping)" : "");
        }
        if (start + dur > lane_end[lane])
            lane_end[lane] = start + dur;
        zs_text_add(t, "{\"name\": \"%s\", \"cat\": \"comm\", \"ph\": \"X\", \"pid\": %d, "
                       "\"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"step\": %d, "
                       "\"group\": \"%s\", \"layer\": %d, \"bytes\": %.0f, \"wire_bytes\": %.0f, "
                       "\"seconds\": %.9g}},\n",
                    zs_comm_op_name(c->op), rank, 1 + lane, start, dur, c->step,
                    zs_comm_group_name(c->group), c->layer, (double)c->elems * (double)c->elem_size,
                    c->wire_bytes, c->seconds);
    }
}

/* Gather every rank's piece to rank 0 and make the document there. */
static int zs_trace_gather(zs_comm_t comm, zs_text *mine, int truncated, zs_train_result *r)
{
    int N = zs_comm_size(comm), rank = zs_comm_rank(comm);
    int64_t len = mine->failed ? -1 : (int64_t)mine->n;
    int64_t *lens = rank == 0 ? calloc((size_t)N, sizeof *lens) : NULL;
    if (rank == 0 && !lens)
        ZS_FAIL("out of host memory gathering the trace");
    zs_comm_set_context(comm, ZS_PHASE_REPORT, -1);
    int failed = len < 0; /* any rank's piece missing: no rank sends */
    int rc = zs_comm_allreduce_max_int(comm, &failed);
    if (!rc && failed)
        rc = zs_error_set("out of host memory building the trace");
    if (!rc)
        rc = zs_comm_gather_root(comm, &len, 1, lens, ZS_CT_I64);
    zs_text doc = {0};
    if (rank == 0)
        zs_text_add(&doc, "{\"displayTimeUnit\": \"ms\",\n\"otherData\": {\"zerosim\": \"one "
                          "process per rank, times in microseconds from the rank's first step\", "
                          "\"ledger_truncated\": %s},\n\"traceEvents\": [\n",
                    truncated ? "true" : "false");
    for (int q = 0; q < N && !rc; q++) {
        int64_t lq = rank == 0 ? lens[q] : len; /* only rank q's and 0's count */
        /* whole 8-byte words, the piece padded with spaces */
        size_t words = ((size_t)lq + 7) / 8;
        uint64_t *buf = calloc(words ? words : 1, 8);
        if (!buf) {
            rc = zs_error_set("out of host memory gathering the trace");
            break;
        }
        if (rank == q || (rank == 0 && q == 0)) {
            memset(buf, ' ', words * 8);
            memcpy(buf, mine->s, (size_t)lq);
        }
        if (q > 0)
            rc = zs_comm_send_to_root(comm, q, buf, (int)words, ZS_CT_U64);
        if (!rc && rank == 0)
            zs_text_add(&doc, "%.*s", (int)lq, (const char *)buf);
        free(buf);
    }
    free(lens);
    if (rank == 0 && !rc) {
        /* the last event's ",\n" becomes the array's end */
        if (doc.n >= 2 && doc.s[doc.n - 2] == ',') {
            doc.n -= 2;
            doc.s[doc.n] = '\0';
        }
        zs_text_add(&doc, "\n]}\n");
        if (doc.failed)
            rc = zs_error_set("out of host memory building the trace");
    }
    if (rank == 0 && !rc)
        r->trace_json = doc.s;
    else
        free(doc.s);
    return rc;
}

int zs_trace_collect(zs_comm_t comm, zs_engine *e, size_t rec0, double t0, zs_train_result *r)
{
    zs_text mine = {0};
    int truncated = 0;
    zs_trace_rank(&mine, zs_comm_rank(comm), e, comm, rec0, t0, &truncated);
    int rc = zs_trace_gather(comm, &mine, truncated, r);
    r->trace_truncated = truncated;
    free(mine.s);
    return rc;
}
