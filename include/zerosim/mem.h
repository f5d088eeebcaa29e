/* zerosim — the accounting allocator.
 *
 * Every buffer of a run is allocated here with a category. The allocator keeps
 * current and peak bytes per category and the peak of the total (with the
 * category mix at that moment), and enforces an optional simulated device
 * capacity: an allocation that would pass it fails like a GPU's out-of-memory.
 */
#ifndef ZEROSIM_MEM_H
#define ZEROSIM_MEM_H

#include <stddef.h>
#include "zerosim/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    ZS_MEM_PARAMS = 0,       /* parameters in working precision */
    ZS_MEM_GRADS,            /* gradients */
    ZS_MEM_OPT_MASTER,       /* optimizer: fp32 master weights (mixed precision) */
    ZS_MEM_OPT_M,            /* optimizer: first moment (Adam) or momentum (SGD) */
    ZS_MEM_OPT_V,            /* optimizer: second moment (Adam) */
    ZS_MEM_ACTIVATIONS,      /* activations saved for backward */
    ZS_MEM_CHECKPOINTS,      /* activation-checkpoint inputs */
    ZS_MEM_COMM_BUFFERS,     /* communication buffers */
    ZS_MEM_COMPRESSION,      /* compression residuals */
    ZS_MEM_WORKSPACE,        /* scratch: fp32 staging, data, temporaries */
    ZS_MEM_QUANTIZED,        /* quantized weights held for inference (values,
                                scales, zero points; zerosim/quant.h) */
    ZS_MEM_NCAT
} zs_mem_category;

/* "params", "grads", "optimizer_master", ... */
const char *zs_mem_category_name(zs_mem_category c);
/* The report group: the three optimizer sub-categories map to "optimizer". */
const char *zs_mem_category_group(zs_mem_category c);

typedef struct zs_mem *zs_mem_t;

/* Phases of a step, for the per-phase peaks and the timeline. */
typedef enum {
    ZS_MEM_PHASE_SETUP = 0, ZS_MEM_PHASE_FORWARD, ZS_MEM_PHASE_BACKWARD, ZS_MEM_PHASE_STEP,
    ZS_MEM_NPHASES
} zs_mem_phase;
const char *zs_mem_phase_name(zs_mem_phase p);

typedef struct {
    size_t current[ZS_MEM_NCAT];
    size_t peak[ZS_MEM_NCAT];
    size_t total_current;
    size_t total_peak;
    size_t at_total_peak[ZS_MEM_NCAT];  /* category mix when total_peak was reached */
    size_t allocs;                      /* number of successful allocations */
    size_t phase_peak[ZS_MEM_NPHASES];  /* peak of the total within each phase */
} zs_mem_stats;

/* One point of the timeline: bytes per category after an allocation or free. */
typedef struct {
    size_t current[ZS_MEM_NCAT];
    int phase;
} zs_mem_event;

/* capacity = 0: unlimited. rank is used in the out-of-memory message. */
zs_mem_t zs_mem_create(zs_backend_t be, size_t capacity, int rank);
void zs_mem_destroy(zs_mem_t m);
zs_backend_t zs_mem_backend(zs_mem_t m);

/* Allocate bytes in category c; *out receives the pointer (zero-filled).
 * Returns 0, or non-zero with an "out of memory" message (rank, category,
 * bytes asked, bytes in use per category) when the capacity would be passed. */
int zs_mem_alloc(zs_mem_t m, zs_mem_category c, size_t bytes, void **out);
/* Free a buffer allocated with zs_mem_alloc with the same category and size.
 * NULL is ignored. */
void zs_mem_free(zs_mem_t m, zs_mem_category c, void *ptr, size_t bytes);

/* Bytes of freed blocks the allocator keeps for reuse (blocks of 64 KiB and
 * more, outside the ledger, as a GPU framework's caching allocator keeps
 * them; none with ZEROSIM_ALLOC_CACHE=off, under AddressSanitizer, or on
 * the phantom backend). */
size_t zs_mem_cached_bytes(zs_mem_t m);
void zs_mem_get_stats(zs_mem_t m, zs_mem_stats *s);
/* Set the phase that the following allocations belong to. */
void zs_mem_set_phase(zs_mem_t m, zs_mem_phase p);
/* Start (on = 1) or stop recording the timeline; starting clears it. */
void zs_mem_trace(zs_mem_t m, int on);
const zs_mem_event *zs_mem_timeline(zs_mem_t m, size_t *n);
size_t zs_mem_capacity(zs_mem_t m);

/* Tiers (ZeRO-Offload, ZeRO-Infinity). Everything above is the device tier;
 * a run that offloads also holds bytes in host memory and in files ("nvme").
 * Each tier keeps its own statistics and capacity. The host tier's buffers
 * are host memory, allocated through the backend when it is host-
 * accessible (the CPU backend; the phantom backend stores nothing); the
 * nvme tier is accounting only (*out = NULL): its bytes live in files. */
typedef enum { ZS_TIER_DEVICE = 0, ZS_TIER_HOST, ZS_TIER_NVME, ZS_MEM_NTIERS } zs_mem_tier;
const char *zs_mem_tier_name(zs_mem_tier t);   /* "device", "host", "nvme" */
void zs_mem_set_capacity(zs_mem_t m, zs_mem_tier t, size_t capacity);
int zs_mem_alloc_tier(zs_mem_t m, zs_mem_tier t, zs_mem_category c, size_t bytes, void **out);
void zs_mem_free_tier(zs_mem_t m, zs_mem_tier t, zs_mem_category c, void *ptr, size_t bytes);
void zs_mem_get_tier_stats(zs_mem_t m, zs_mem_tier t, zs_mem_stats *s);

/* Parse "123", "4KiB", "1.5GiB", "2GB" (KB/MB/GB = 1e3.., KiB/MiB/GiB = 2^10..).
 * Returns 0 and sets *bytes, or non-zero with a message. */
int zs_parse_size(const char *s, size_t *bytes);

#ifdef __cplusplus
}
#endif
#endif
