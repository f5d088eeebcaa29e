/* zerosim — the accounting allocator. */
#include "zerosim/mem.h"
#include "zerosim/error.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Blocks of at least this many bytes are kept for reuse when freed: a
 * fresh block of that size comes from mmap, and its first touch costs a
 * page fault per page (about 150 ms for a 53 MB gradient bucket on this
 * project's 2-core machine, more than the bucket's reduce-scatter). From
 * 64 KiB: qgZ's temporaries (an fp32 copy of the bucket, the encoded
 * parts: 0.1-3.3 MB in a small model, allocated at every reduce) took a
 * 4-rank stage-3 step from 0.059 s to 0.096 s when they were not cached
 * (2026-12-05; the 4 MiB threshold before it had been chosen for a
 * slowdown at 1 MiB, 0.042 s against 0.024 s, that did not recur). */
#define ZS_MEM_CACHE_MIN ((size_t)64 << 10)
#define ZS_MEM_CACHE_N 32

typedef struct {
    void *p;
    size_t bytes;
} zs_mem_block;

struct zs_mem {
    zs_backend_t be;
    size_t capacity;   /* 0 = unlimited */
    int rank;
    zs_mem_stats s;
    zs_mem_phase phase;
    int tracing;
    zs_mem_event *ev;
    size_t nev, capev;
    zs_mem_stats tier[ZS_MEM_NTIERS];  /* host and nvme (the device's is s) */
    size_t tier_cap[ZS_MEM_NTIERS];
    /* The block cache (see zs_mem_alloc): the live blocks of at least
     * ZS_MEM_CACHE_MIN bytes, and the freed ones kept for reuse, oldest
     * first. */
    int cache_on;
    zs_mem_block *live;
    size_t nlive, caplive;
    zs_mem_block cache[ZS_MEM_CACHE_N];
    size_t ncache, cached_bytes;
};

const char *zs_mem_phase_name(zs_mem_phase p)
{
    static const char *const n[ZS_MEM_NPHASES] = {"setup", "forward", "backward", "step"};
    return p < ZS_MEM_NPHASES ? n[p] : "?";
}

void zs_mem_set_phase(zs_mem_t m, zs_mem_phase p)
{
    m->phase = p;
    if (m->s.total_current > m->s.phase_peak[p])
        m->s.phase_peak[p] = m->s.total_current;
}

void zs_mem_trace(zs_mem_t m, int on)
{
    m->tracing = on;
    if (on)
        m->nev = 0;
}

const zs_mem_event *zs_mem_timeline(zs_mem_t m, size_t *n)
{
    *n = m->nev;
    return m->ev;
}

/* Record the current bytes per category when tracing. */
static void zs_mem_record(zs_mem_t m)
{
    if (!m->tracing)
        return;
    if (m->nev == m->capev) {
        size_t cap = m->capev ? 2 * m->capev : 256;
        zs_mem_event *e = realloc(m->ev, cap * sizeof *e);
        if (!e)
            return; /* the timeline stays short rather than the run failing */
        m->ev = e;
        m->capev = cap;
    }
    memcpy(m->ev[m->nev].current, m->s.current, sizeof m->s.current);
    m->ev[m->nev].phase = (int)m->phase;
    m->nev++;
}

static const char *const zs_mem_names[ZS_MEM_NCAT] = {
    [ZS_MEM_PARAMS] = "params",
    [ZS_MEM_GRADS] = "grads",
    [ZS_MEM_OPT_MASTER] = "optimizer_master",
    [ZS_MEM_OPT_M] = "optimizer_m",
    [ZS_MEM_OPT_V] = "optimizer_v",
    [ZS_MEM_ACTIVATIONS] = "activations",
    [ZS_MEM_CHECKPOINTS] = "checkpoints",
    [ZS_MEM_COMM_BUFFERS] = "comm_buffers",
    [ZS_MEM_COMPRESSION] = "compression",
    [ZS_MEM_WORKSPACE] = "workspace",
    [ZS_MEM_QUANTIZED] = "quantized_weights",
};

const char *zs_mem_category_name(zs_mem_category c)
{
    return (c >= 0 && c < ZS_MEM_NCAT) ? zs_mem_names[c] : "unknown";
}

const char *zs_mem_category_group(zs_mem_category c)
{
    if (c == ZS_MEM_OPT_MASTER || c == ZS_MEM_OPT_M || c == ZS_MEM_OPT_V)
        return "optimizer";
    return zs_mem_category_name(c);
}

zs_mem_t zs_mem_create(zs_backend_t be, size_t capacity, int rank)
{
    zs_mem_t m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->be = be;
    m->capacity = capacity;
    m->rank = rank;
    /* no cache on the phantom backend (its blocks are not memory), under
     * AddressSanitizer (a reused block would hide a use after free), or
     * with ZEROSIM_ALLOC_CACHE=off */
    const char *env = getenv("ZEROSIM_ALLOC_CACHE");
    m->cache_on = !zs_backend_is_phantom(be) && !(env && !strcmp(env, "off"));
#if defined(__SANITIZE_ADDRESS__)
    m->cache_on = 0;
#endif
    return m;
}

void zs_mem_destroy(zs_mem_t m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->ncache; i++)
        zs_backend_free(m->be, m->cache[i].p);
    free(m->live);
    free(m->ev);
    free(m);
}

/* A block from the cache of exactly this size, zero-filled as a fresh one
 * is; NULL when there is none. The newest fits best (it is warm). */
static void *zs_mem_cache_take(zs_mem_t m, size_t bytes)
{
    for (size_t i = m->ncache; i-- > 0;) {
        if (m->cache[i].bytes != bytes)
            continue;
        void *p = m->cache[i].p;
        memmove(&m->cache[i], &m->cache[i + 1], (m->ncache - i - 1) * sizeof m->cache[0]);
        m->ncache--;
        m->cached_bytes -= bytes;
        zs_backend_memset0(m->be, p, bytes);
        return p;
    }
    return NULL;
}

/* Remember a live block of the cache's sizes; a block the table cannot
 * hold is simply not cached when freed. */
static void zs_mem_live_add(zs_mem_t m, void *p, size_t bytes)
{
    if (m->nlive == m->caplive) {
        size_t cap = m->caplive ? 2 * m->caplive : 64;
        zs_mem_block *t = realloc(m->live, cap * sizeof *t);
        if (!t)
            return;
        m->live = t;
        m->caplive = cap;
    }
    m->live[m->nlive++] = (zs_mem_block){p, bytes};
}

/* Free p, or keep it for reuse when it is a live block of the cache's
 * sizes whose size the caller gives right. The cache holds at most
 * ZS_MEM_CACHE_N blocks and no more bytes than the run's peak so far (at
 * least 64 MiB), freeing the oldest first. */
static void zs_mem_release(zs_mem_t m, void *p, size_t bytes)
{
    size_t i = 0;
    while (i < m->nlive && m->live[i].p != p)
        i++;
    if (i == m->nlive || m->live[i].bytes != bytes) {
        if (i < m->nlive)
            m->live[i] = m->live[--m->nlive];
        zs_backend_free(m->be, p);
        return;
    }
    m->live[i] = m->live[--m->nlive];
    size_t limit = m->s.total_peak > ((size_t)64 << 20) ? m->s.total_peak : (size_t)64 << 20;
    while (m->ncache > 0 && (m->ncache == ZS_MEM_CACHE_N || m->cached_bytes + bytes > limit)) {
        zs_backend_free(m->be, m->cache[0].p);
        m->cached_bytes -= m->cache[0].bytes;
        memmove(&m->cache[0], &m->cache[1], (m->ncache - 1) * sizeof m->cache[0]);
        m->ncache--;
    }
    if (bytes > limit) {
        zs_backend_free(m->be, p);
        return;
    }
    m->cache[m->ncache++] = (zs_mem_block){p, bytes};
    m->cached_bytes += bytes;
}

zs_backend_t zs_mem_backend(zs_mem_t m) { return m->be; }

size_t zs_mem_capacity(zs_mem_t m) { return m->capacity; }

void zs_mem_get_stats(zs_mem_t m, zs_mem_stats *s) { *s = m->s; }

size_t zs_mem_cached_bytes(zs_mem_t m) { return m->cached_bytes; }

/* Append "params=123 grads=456 ..." for the categories in use to buf. */
static void zs_mem_describe_use(const zs_mem_t m, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int c = 0; c < ZS_MEM_NCAT && used < len; c++) {
        int n = snprintf(buf + used, len - used, "%s%s=%zu", c ? " " : "",
                         zs_mem_names[c], m->s.current[c]);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

int zs_mem_alloc(zs_mem_t m, zs_mem_category c, size_t bytes, void **out)
{
    *out = NULL;
    if (c < 0 || c >= ZS_MEM_NCAT)
        ZS_FAIL("internal error: allocation with unknown memory category %d", (int)c);
    if (bytes == 0)
        return 0;
    if (m->capacity && (bytes > m->capacity || m->s.total_current > m->capacity - bytes)) {
        char use[512];
        zs_mem_describe_use(m, use, sizeof use);
        ZS_FAIL("out of memory on rank %d: %s asked for %zu bytes with %zu of %zu bytes in use "
                "(%s); raise --device-memory or use a higher ZeRO stage",
                m->rank, zs_mem_names[c], bytes, m->s.total_current, m->capacity, use);
    }
    /* Large blocks go through the cache, as a GPU framework's caching
     * allocator does: the ledger counts what the run holds, the cache keeps
     * what it freed, and the capacity above applies to the ledger. */
    int cached = m->cache_on && bytes >= ZS_MEM_CACHE_MIN;
    void *p = cached ? zs_mem_cache_take(m, bytes) : NULL;
    if (!p)
        p = zs_backend_alloc(m->be, bytes);
    if (!p && cached && m->ncache > 0) { /* give the cache back, and try again */
        for (size_t i = 0; i < m->ncache; i++)
            zs_backend_free(m->be, m->cache[i].p);
        m->ncache = 0;
        m->cached_bytes = 0;
        p = zs_backend_alloc(m->be, bytes);
    }
    if (!p)
        ZS_FAIL("out of host memory on rank %d: %s asked for %zu bytes (the machine itself "
                "could not provide them)", m->rank, zs_mem_names[c], bytes);
    if (cached)
        zs_mem_live_add(m, p, bytes);
    m->s.current[c] += bytes;
    if (m->s.current[c] > m->s.peak[c])
        m->s.peak[c] = m->s.current[c];
    m->s.total_current += bytes;
    if (m->s.total_current > m->s.total_peak) {
        m->s.total_peak = m->s.total_current;
        memcpy(m->s.at_total_peak, m->s.current, sizeof m->s.current);
    }
    if (m->s.total_current > m->s.phase_peak[m->phase])
        m->s.phase_peak[m->phase] = m->s.total_current;
    m->s.allocs++;
    *out = p;
    zs_mem_record(m);
    return 0;
}

void zs_mem_free(zs_mem_t m, zs_mem_category c, void *ptr, size_t bytes)
{
    if (!ptr)
        return;
    if (m->cache_on && bytes >= ZS_MEM_CACHE_MIN)
        zs_mem_release(m, ptr, bytes);
    else
        zs_backend_free(m->be, ptr);
    if (c >= 0 && c < ZS_MEM_NCAT) {
        m->s.current[c] -= bytes;
        m->s.total_current -= bytes;
    }
    zs_mem_record(m);
}

const char *zs_mem_tier_name(zs_mem_tier t)
{
    static const char *const n[ZS_MEM_NTIERS] = {"device", "host", "nvme"};
    return (unsigned)t < ZS_MEM_NTIERS ? n[t] : "?";
}

void zs_mem_set_capacity(zs_mem_t m, zs_mem_tier t, size_t capacity)
{
    if (t == ZS_TIER_DEVICE)
        m->capacity = capacity;
    else if ((unsigned)t < ZS_MEM_NTIERS)
        m->tier_cap[t] = capacity;
}

int zs_mem_alloc_tier(zs_mem_t m, zs_mem_tier t, zs_mem_category c, size_t bytes, void **out)
{
    if (t == ZS_TIER_DEVICE)
        return zs_mem_alloc(m, c, bytes, out);
    *out = NULL;
    if ((unsigned)t >= ZS_MEM_NTIERS || c < 0 || c >= ZS_MEM_NCAT)
        ZS_FAIL("internal error: allocation in tier %d, category %d", (int)t, (int)c);
    if (bytes == 0)
        return 0;
    zs_mem_stats *s = &m->tier[t];
    size_t cap = m->tier_cap[t];
    if (cap && (bytes > cap || s->total_current > cap - bytes))
        ZS_FAIL("out of memory in the simulated %s tier on rank %d: %s asked for %zu bytes "
                "with %zu of %zu bytes in use; raise --%s-memory%s",
                t == ZS_TIER_HOST ? "host" : "nvme", m->rank,
                zs_mem_names[c], bytes, s->total_current, cap, t == ZS_TIER_HOST ? "host" : "nvme",
                t == ZS_TIER_HOST ? ", or offload to nvme" : "");
    if (t == ZS_TIER_HOST) {
        if (!zs_backend_host_accessible(m->be) && !zs_backend_is_phantom(m->be))
            ZS_FAIL("internal error: a host-tier buffer on the %s backend", zs_backend_name(m->be));
        void *p = zs_backend_alloc(m->be, bytes);
        if (!p)
            ZS_FAIL("out of host memory on rank %d: %s asked for %zu bytes (the machine itself "
                    "could not provide them)", m->rank, zs_mem_names[c], bytes);
        *out = p;
    }
    s->current[c] += bytes;
    if (s->current[c] > s->peak[c])
        s->peak[c] = s->current[c];
    s->total_current += bytes;
    if (s->total_current > s->total_peak) {
        s->total_peak = s->total_current;
        memcpy(s->at_total_peak, s->current, sizeof s->current);
    }
    s->allocs++;
    return 0;
}

void zs_mem_free_tier(zs_mem_t m, zs_mem_tier t, zs_mem_category c, void *ptr, size_t bytes)
{
    if (t == ZS_TIER_DEVICE) {
        zs_mem_free(m, c, ptr, bytes);
        return;
    }
    if ((unsigned)t >= ZS_MEM_NTIERS || c < 0 || c >= ZS_MEM_NCAT || bytes == 0)
        return;
    if (t == ZS_TIER_HOST) {
        if (!ptr)
            return;
        zs_backend_free(m->be, ptr);
    }
    m->tier[t].current[c] -= bytes;
    m->tier[t].total_current -= bytes;
}

void zs_mem_get_tier_stats(zs_mem_t m, zs_mem_tier t, zs_mem_stats *s)
{
    if (t == ZS_TIER_DEVICE)
        *s = m->s;
    else if ((unsigned)t < ZS_MEM_NTIERS)
        *s = m->tier[t];
    else
        memset(s, 0, sizeof *s);
}

int zs_parse_size(const char *s, size_t *bytes)
{
    static const struct { const char *suffix; double mul; } units[] = {
        {"", 1.0},       {"B", 1.0},
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
        {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},           {"TB", 1e12},
        {"K", 1024.0},   {"M", 1048576.0},   {"G", 1073741824.0},
    };
    if (!s || !*s)
        ZS_FAIL("empty size: give bytes, or a number with KiB/MiB/GiB or KB/MB/GB");
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v < 0)
        ZS_FAIL("bad size \"%s\": give bytes, or a number with KiB/MiB/GiB or KB/MB/GB", s);
    while (isspace((unsigned char)*end))
        end++;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].suffix) == 0) {
            double b = v * units[i].mul;
            if (b >= 18446744073709551615.0)
                ZS_FAIL("size \"%s\" is too large", s);
            if (b != floor(b))
                ZS_FAIL("size \"%s\" is not a whole number of bytes", s);
            *bytes = (size_t)b;
            return 0;
        }
    }
    ZS_FAIL("bad size unit in \"%s\": use bytes, KiB, MiB, GiB, TiB, KB, MB, GB or TB", s);
}
