/* One step of a --trace file as rows for plots/gantt.gp: per rank, a lane
 * for compute and a lane for communication (overlapping collectives, which
 * the trace puts on extra threads, share it), each span a box from its
 * start to its end in milliseconds since the step began on the earliest
 * rank.
 *
 * usage: gantt_data TRACE STEP > gantt.dat
 * Columns: rank lane start_ms end_ms kind (kind: 0 forward, 1 backward,
 * 2 recompute, 3 wait (a gather's, or a pipeline receive), 4 other compute, 5 allgather, 6 reduce-scatter,
 * 7 other collectives).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int kind_of(const char *cat, const char *name, int recompute)
{
    if (cat && !strcmp(cat, "comm"))
        return !strcmp(name, "allgather") ? 5 : !strcmp(name, "reduce_scatter") ? 6 : 7;
    if (!strncmp(name, "recv_", 5)) /* a pipeline stage waiting for its neighbour */
        return 3;
    if (!strncmp(name, "recompute", 9) || (recompute && !strncmp(name, "forward", 7)))
        return 2;
    if (!strncmp(name, "forward", 7))
        return 0;
    if (!strncmp(name, "backward", 8))
        return 1;
    if (!strncmp(name, "wait", 4))
        return 3;
    return 4;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: gantt_data TRACE STEP\n");
        return 2;
    }
    json_error_t err;
    json_t *tr = json_load_file(argv[1], 0, &err);
    json_t *ev = tr ? json_object_get(tr, "traceEvents") : NULL;
    if (!json_is_array(ev)) {
        fprintf(stderr, "gantt_data: %s: not a zerosim trace (%s)\n", argv[1],
                tr ? "no traceEvents" : err.text);
        return 1;
    }
    long step = strtol(argv[2], NULL, 10);
    double t0 = -1;
    size_t i;
    json_t *e;
    for (int pass = 0; pass < 2; pass++) {
        size_t rows = 0;
        json_array_foreach(ev, i, e) {
            const char *ph = json_string_value(json_object_get(e, "ph"));
            json_t *args = json_object_get(e, "args");
            if (!ph || strcmp(ph, "X") || json_integer_value(json_object_get(args, "step")) != step)
                continue;
            double ts = json_number_value(json_object_get(e, "ts")) / 1e3;
            double dur = json_number_value(json_object_get(e, "dur")) / 1e3;
            if (pass == 0) {
                if (t0 < 0 || ts < t0)
                    t0 = ts;
                continue;
            }
            const char *cat = json_string_value(json_object_get(e, "cat"));
            const char *name = json_string_value(json_object_get(e, "name"));
            int recompute = 0; /* the trace names recomputed forwards "recompute" */
            int pid = (int)json_integer_value(json_object_get(e, "pid"));
            int tid = (int)json_integer_value(json_object_get(e, "tid"));
            printf("%d %d %.4f %.4f %d\n", pid, tid > 0 ? 1 : 0, ts - t0, ts - t0 + dur,
                   kind_of(cat, name ? name : "", recompute));
            rows++;
        }
        if (pass == 0 && t0 < 0) {
            fprintf(stderr, "gantt_data: %s has no spans of step %ld\n", argv[1], step);
            return 1;
        }
        if (pass == 0)
            printf("# rank lane start_ms end_ms kind (step %ld of %s)\n", step, argv[1]);
    }
    json_decref(tr);
    return 0;
}
