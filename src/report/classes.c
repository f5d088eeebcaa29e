/* zerosim — classes of ranks: the ranks whose figures in one table are
 * the same, found in O(N) with a hash table over each rank's figures
 * (compared bit for bit, so a class's ranks print the same bytes), and
 * their rank lists as ranges. */
#include "build-config.h"
#include "report_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A rank's figures of one kind as 64-bit words (integers as they are,
 * doubles by their bits): equal words, equal rows in every writer. */
#define ZS_KEY_WORDS 1024

typedef struct {
    uint64_t w[ZS_KEY_WORDS];
    size_t n;
} zs_rank_key;

static void zs_key_u64(zs_rank_key *k, uint64_t v)
{
    if (k->n < ZS_KEY_WORDS)
        k->w[k->n] = v;
    k->n++; /* past the end: zs_rank_key_fill's check fails loudly */
}

static void zs_key_f64(zs_rank_key *k, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    zs_key_u64(k, u);
}

/* The memory rows (measured, predicted, whether predicted), the mix at the
 * total's peak, the peaks by phase, and the host and nvme tiers. */
static void zs_key_memory(zs_rank_key *k, const zs_train_result *r, int q, int has_tiers)
{
    for (size_t row = 0; row < zs_report_n_mem_rows; row++) {
        int has;
        zs_key_u64(k, zs_report_row_pred(r, q, row, &has));
        zs_key_u64(k, (uint64_t)has);
        zs_key_u64(k, zs_report_row_peak(r, q, row));
    }
    const zs_prediction *pr = zs_report_pred_of(r, q);
    for (int c = 0; c < ZS_MEM_NCAT; c++)
        zs_key_u64(k, r->at_peak[q][c]);
    for (int p = 0; p < ZS_MEM_NPHASES; p++)
        zs_key_u64(k, r->phase_peaks[q][p]);
    zs_key_u64(k, r->total_peaks[q]);
    for (int t = ZS_TIER_HOST; has_tiers && t < ZS_MEM_NTIERS; t++)
        for (int c = 0; c < ZS_MEM_NCAT; c++) {
            zs_key_u64(k, r->tier_peaks[q][t][c]);
            zs_key_u64(k, pr->tier_bytes[t][c]);
        }
}

/* The memory table's: the pipeline stage (its prediction), each
 * category's peak, the total's by phase, the tiers. */
static void zs_key_memory_table(zs_rank_key *k, const zs_train_result *r, int q, int has_tiers)
{
    zs_key_u64(k, (uint64_t)(r->pp_pred ? zs_report_stage_of(r, q) : 0));
    for (int c = 0; c < ZS_MEM_NCAT; c++)
        zs_key_u64(k, r->peaks[q][c]);
    for (int p = 0; p < ZS_MEM_NPHASES; p++)
        zs_key_u64(k, r->phase_peaks[q][p]);
    zs_key_u64(k, r->total_peaks[q]);
    for (int t = ZS_TIER_HOST; has_tiers && t < ZS_MEM_NTIERS; t++)
        for (int c = 0; c < ZS_MEM_NCAT; c++)
            zs_key_u64(k, r->tier_peaks[q][t][c]);
}

/* Every op's traffic as the JSON lists it: over the run (measured,
 * predicted, across nodes), by phase, and by group. */
static void zs_key_comm(zs_rank_key *k, const zs_train_result *r, int q)
{
    for (int o = 0; o < ZS_OP_NOPS; o++) {
        double calls, secs, api, b = zs_report_op_bytes(r, q, o, &calls, &secs, &api);
        zs_key_f64(k, b);
        zs_key_f64(k, calls);
        zs_key_f64(k, secs);
        zs_key_f64(k, api);
        zs_key_f64(k, zs_report_op_pred(r, q, o));
        zs_key_f64(k, zs_report_op_inter(r, q, o));
        zs_key_f64(k, zs_report_op_pred_inter(r, q, o));
        for (int p = 0; p < ZS_PHASE_NPHASES; p++) {
            zs_key_f64(k, r->comm[q][o][p].calls);
            zs_key_f64(k, r->comm[q][o][p].wire);
            zs_key_f64(k, r->comm[q][o][p].bytes);
        }
    }
    for (int g = 0; r->comm_group && g < ZS_GROUP_NGROUPS; g++)
        for (int o = 0; o < ZS_OP_NOPS; o++) {
            const zs_comm_sum *cg = &r->comm_group[q][g][o];
            zs_key_f64(k, cg->calls);
            zs_key_f64(k, cg->wire);
            zs_key_f64(k, cg->inter);
            zs_key_f64(k, cg->bytes);
        }
}

/* The traffic table's columns: bytes, calls, prediction, across nodes. */
static void zs_key_traffic(zs_rank_key *k, const zs_train_result *r, int q)
{
    for (int o = 0; o < ZS_OP_NOPS; o++) {
        double calls, secs, api;
        zs_key_f64(k, zs_report_op_bytes(r, q, o, &calls, &secs, &api));
        zs_key_f64(k, calls);
        zs_key_f64(k, zs_report_op_pred(r, q, o));
        zs_key_f64(k, zs_report_op_inter(r, q, o));
        zs_key_f64(k, zs_report_op_pred_inter(r, q, o));
    }
}

static void zs_key_small(zs_rank_key *k, const zs_train_result *r, int q, zs_rank_figures kind)
{
    if (kind == ZS_FIGURES_COMM_TIME) {
        double tot, hid;
        zs_report_comm_time(r, q, &tot, &hid);
        zs_key_f64(k, tot);
        zs_key_f64(k, hid);
    } else if (kind == ZS_FIGURES_PIPELINE) {
        double w, t;
        zs_report_pp_idle(r, q, &w, &t);
        const zs_prediction *pr = zs_report_pred_of(r, q);
        zs_key_u64(k, (uint64_t)zs_report_stage_of(r, q));
        zs_key_u64(k, (uint64_t)pr->act_slots);
        zs_key_u64(k, (uint64_t)pr->in_flight);
        zs_key_f64(k, w);
        zs_key_f64(k, t);
    } else if (kind == ZS_FIGURES_CKPT && r->ckpt_ranks) {
        const zs_ckpt_io *c = &r->ckpt_ranks[q];
        zs_key_u64(k, (uint64_t)c->saves);
        zs_key_u64(k, c->written);
        zs_key_u64(k, c->tensor_written);
        zs_key_u64(k, r->ckpt_pred[q]);
        zs_key_u64(k, c->read);
        zs_key_u64(k, c->tensor_read);
    } else if (kind == ZS_FIGURES_NODE) {
        zs_key_u64(k, (uint64_t)(r->node_of ? r->node_of[q] : 0));
    }
}

static void zs_rank_key_fill(zs_rank_key *k, const zs_train_result *r, int q,
                             zs_rank_figures kind, int has_tiers)
{
    k->n = 0;
    if (kind == ZS_FIGURES_MEMORY)
        zs_key_memory(k, r, q, has_tiers);
    else if (kind == ZS_FIGURES_MEMORY_TABLE)
        zs_key_memory_table(k, r, q, has_tiers);
    else if (kind == ZS_FIGURES_COMM)
        zs_key_comm(k, r, q);
    else if (kind == ZS_FIGURES_TRAFFIC)
        zs_key_traffic(k, r, q);
    else
        zs_key_small(k, r, q, kind);
    if (k->n > ZS_KEY_WORDS) { /* a new figure outgrew the key: a bug, not input */
        fprintf(stderr, "zerosim: report: a rank's figures need %zu words, more than %d\n",
                k->n, ZS_KEY_WORDS);
        abort();
    }
}

static int zs_rank_key_same(const zs_rank_key *a, const zs_rank_key *b)
{
    return a->n == b->n && !memcmp(a->w, b->w, a->n * sizeof a->w[0]);
}

/* A hash of the key's words (each mixed as splitmix64 does, then folded
 * in with a multiply): collisions only cost a comparison. */
static uint64_t zs_rank_key_hash(const zs_rank_key *k)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < k->n; i++) {
        uint64_t x = k->w[i] + 0x9e3779b97f4a7c15ull;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        h = (h ^ x ^ (x >> 31)) * 1099511628211ull;
    }
    return h;
}

void zs_rank_classes_free(zs_rank_classes *c)
{
    free(c->class_of);
    free(c->next);
    free(c->first);
    free(c->last);
    free(c->count);
    memset(c, 0, sizeof *c);
}

/* Rank q joins class k (k == n_classes: a new one). */
static void zs_rank_classes_join(zs_rank_classes *c, int q, int k)
{
    if (k == c->n_classes) {
        c->first[k] = q;
        c->count[k] = 0;
        c->n_classes++;
    } else {
        c->next[c->last[k]] = q;
    }
    c->last[k] = q;
    c->count[k]++;
    c->class_of[q] = k;
    c->next[q] = -1;
}

/* The open-addressing table: slots of class numbers (-1 empty), each
 * class's hash beside; a candidate's figures are made again to compare. */
static int zs_rank_classes_hash(zs_rank_classes *c, const zs_train_result *r,
                                zs_rank_figures kind, int has_tiers, zs_rank_key *a,
                                zs_rank_key *b)
{
    int N = r->world_size;
    size_t cap = 16;
    while (cap < 2 * (size_t)N)
        cap *= 2;
    int *slot = malloc(cap * sizeof *slot);
    uint64_t *hash = malloc((size_t)N * sizeof *hash);
    if (!slot || !hash) {
        free(slot);
        free(hash);
        return -1;
    }
    memset(slot, 0xff, cap * sizeof *slot);
    for (int q = 0; q < N; q++) {
        zs_rank_key_fill(a, r, q, kind, has_tiers);
        uint64_t h = zs_rank_key_hash(a);
        size_t i = (size_t)h & (cap - 1);
        int k = -1;
        for (; slot[i] >= 0; i = (i + 1) & (cap - 1)) {
            if (hash[slot[i]] != h)
                continue;
            zs_rank_key_fill(b, r, c->first[slot[i]], kind, has_tiers);
            if (zs_rank_key_same(a, b)) {
                k = slot[i];
                break;
            }
        }
        if (k < 0) {
            k = slot[i] = c->n_classes;
            hash[k] = h;
        }
        zs_rank_classes_join(c, q, k);
    }
    free(slot);
    free(hash);
    return 0;
}

int zs_rank_classes_build(zs_rank_classes *c, const zs_train_result *r, zs_rank_figures kind,
                          int has_tiers, int consecutive)
{
    int N = r->world_size;
    memset(c, 0, sizeof *c);
    c->world_size = N;
    size_t n = N > 0 ? (size_t)N : 1;
    c->class_of = malloc(n * sizeof *c->class_of);
    c->next = malloc(n * sizeof *c->next);
    c->first = malloc(n * sizeof *c->first);
    c->last = malloc(n * sizeof *c->last);
    c->count = malloc(n * sizeof *c->count);
    zs_rank_key *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    int rc = -1;
    if (c->class_of && c->next && c->first && c->last && c->count && a && b) {
        rc = 0;
        if (!consecutive) {
            rc = zs_rank_classes_hash(c, r, kind, has_tiers, a, b);
        } else {
            for (int q = 0; q < N; q++) { /* a: rank q's figures, b: q-1's */
                zs_rank_key_fill(a, r, q, kind, has_tiers);
                zs_rank_classes_join(c, q, q > 0 && zs_rank_key_same(a, b) ? c->n_classes - 1
                                                                           : c->n_classes);
                zs_rank_key *t = a;
                a = b;
                b = t;
            }
        }
    }
    free(a);
    free(b);
    if (rc)
        zs_rank_classes_free(c);
    return rc;
}

char *zs_rank_classes_ranges(const zs_rank_classes *c, int k, int skip)
{
    zs_text t = {0};
    int q = c->first[k];
    for (int i = 0; i < skip && q >= 0; i++)
        q = c->next[q];
    while (q >= 0) { /* a run q..end of consecutive ranks */
        int end = q;
        while (c->next[end] == end + 1)
            end = c->next[end];
        if (end == q)
            zs_text_add(&t, "%s%d", t.len ? "," : "", q);
        else
            zs_text_add(&t, "%s%d-%d", t.len ? "," : "", q, end);
        q = c->next[end];
    }
    if (!t.oom && !t.p)
        zs_text_add(&t, "%s", "");
    if (t.oom) {
        free(t.p);
        return NULL;
    }
    return t.p;
}

int zs_report_by_class(const zs_train_result *r, zs_report_rows rows)
{
    return rows != ZS_REPORT_ROWS_PER_RANK && r->world_size > 8;
}
