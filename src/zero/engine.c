/* zerosim — the ZeRO engine (see zerosim/zero.h).
 *
 * Partition: the flat layout is padded to Ψp (a multiple of N) and rank r
 * owns [r*S, (r+1)*S), S = Ψp/N.
 *
 * Gradient buckets: [0, Ψp) is cut into ranges of at most reduce_bucket_size
 * elements, walking the units from the last one (backward order); a bucket
 * is ready once the lowest unit overlapping it has run its backward.
 *
 * One step, every stage:
 *   zero the gradient shard accumulator
 *   for each micro-batch:
 *     forward:  for unit u: [stage 3: allgather u's parameters] -> compute
 *               -> [stage 3: release]
 *     backward: for unit u reversed: [stage 3: allgather] -> compute fp32
 *               gradients in a staging workspace -> add them into the
 *               full-size gradient buffer (stages 0, 1) or the bucket buffers
 *               (stages 2, 3) -> [stage 3: release]; stages 2, 3 reduce-
 *               scatter each bucket as soon as it is ready and free it;
 *               stages 0, 1 reduce-scatter the same buckets after backward
 *     each bucket's reduced part is added into the shard accumulator
 *   step: overflow flag and global norm (per-block sums, summed in a fixed
 *         order on every rank) -> clip coefficient -> optimizer on the shard
 *         (stages 1-3) or on everything after allgathering the gradient
 *         shards (stage 0) -> stages 1, 2: allgather the updated parameters
 *
 * Because every stage reduces the same buckets per micro-batch with the same
 * calls, and accumulates the reduced parts in the same order, stages 0-3
 * give byte-identical parameters for a fixed N (the invariant "bit-exact
 * stages"). In deterministic mode each micro-batch's gradient is turned into
 * int64 fixed point before the reduction, so every sum is exact and the
 * result does not depend on N or on how MPI orders the sum.
 *
 * With grad_reduce step (DeepSpeed's schedule), stages 0 and 1 instead add
 * every micro-batch's gradient into the full gradient buffer and reduce-
 * scatter its buckets once, after the last micro-batch's backward, into the
 * buffer's own part (the gradient shard is then a view of it: no shard
 * accumulator). Float sums are then grouped differently from the micro-
 * batch schedule (and from stages 2 and 3) when grad_accum > 1; in
 * deterministic mode each micro-batch is converted to fixed point and added
 * into an int64 copy of the full gradient, and integer sums do not depend on
 * the grouping: the bytes equal the micro-batch schedule's.
 */
#include "zerosim/zero.h"
#include "zerosim/comm.h"
#include "zerosim/compress.h"
#include "zerosim/data.h"
#include "zerosim/error.h"
#include "zerosim/optim.h"
#include "zerosim/program.h"
#include "zerosim/quant.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

struct zs_engine {
    zs_run_config cfg;
    zs_backend_t be;
    int phantom;                /* a phantom backend: buffers hold nothing */
    zs_mem_t mem;
    zs_comm_t comm;             /* the data-parallel group */
    zs_comm_t tp;               /* the tensor-parallel group, NULL without */
    int tp_size, tp_rank;
    zs_partition part;          /* this rank's */
    zs_step_shape own_shape;    /* when not shared */
    const zs_step_shape *sh;    /* what a step allocates and does */
    zs_step_program prog;
    int stage, det;
    zs_model *model;            /* the model that computes (with expert
                                   parallelism: this rank's experts only) */
    /* expert parallelism (cfg.model.moe_ep > 1): the flat arrays keep the
     * --ep 1 layout (every expert), laid out by fmodel; the model computes
     * this rank's experts, a slice of each stacked expert entry
     * (zs_engine_slice), and sends each expert's gradients from each
     * source's tokens back to the source (moe_ep_home), so the gradient
     * views cover every expert and hold --ep 1's bytes */
    zs_model *fmodel;
    const zs_layout *clay;      /* the computing model's layout */
    int ep_size, ep_rank;
    /* DeepSpeed's layout (sh->xsplit, zs_step_ep_split): the flat arrays
     * hold the dense entries only (the computing model's layout puts its
     * experts after num_params); the expert store holds this rank's
     * experts, element i of it the layout's num_params + i, partitioned
     * over the expert-data-parallel group edp (this rank xrank of it);
     * fmodel only gives the --ep 1 order of the hash */
    int xsplit, xrank;
    zs_comm_t edp;
    size_t xbase;
    void *xgather;              /* stage 3: unit xg_unit's experts, from xg_lo */
    int xg_unit;
    size_t xg_lo;
    void *xparams, *xgacc, *xgrad, *xrecv, *xtmp;
    float *xmaster, *xm, *xv;
    zs_data *data;
    const zs_layout *lay;
    int U;                      /* units */
    zs_dtype pt;                /* storage type of params and grads */
    size_t ps;                  /* its size */
    int mixed;
    zs_comm_type ct;            /* comm type of gradients and params */

    void *buf[ZS_BUF_N];        /* the shape's buffers; NULL when 0 bytes */
    /* model states; "full" arrays have Ψp elements, shards S */
    void *params;               /* stages 0-2 full, stage 3 shard */
    float *master, *m, *v;      /* stage 0 full, else shard; master aliases
                                   the params when !mixed */
    void *gfull;                /* stages 0, 1: full gradient buffer */
    void *gshard;               /* reduced gradient shard (pt); with the step
                                   schedule, this rank's part of gfull */
    int64_t *gacc;              /* deterministic: fixed-point shard accumulator */
    int64_t *gfix;              /* deterministic, step schedule, grad_accum > 1:
                                   the full gradient accumulated in fixed point */
    int once;                   /* the step schedule: one reduction per step */
    void *recv;                 /* this rank's part of one bucket (pt or int64) */
    int64_t *fixbuf;            /* deterministic: one bucket in fixed point */
    int frac_bits;
    int64_t fix_limit;
    size_t fix_overflows;
    void **bucket_buf;          /* stages 2, 3: [nbuckets] full-size while alive */
    int *counts, *displs;       /* [N] one call's parts */

    /* stage 3, per gather range (shape->granges) */
    void **gbuf, **greq;
    int **gcounts, **gdispls;   /* kept while a non-blocking gather runs */
    size_t live, live_peak;
    double *gstart;             /* [U] when each unit's gather started */
    double nb_span_s, nb_wait_s;/* the non-blocking gathers and reduce-scatters:
                                   start to done, and the part spent waiting
                                   for them or driving them */
    void *rs_req;               /* overlap_comm: the reduce-scatter in flight */
    int rs_k;                   /* its bucket, or -1 */
    double rs_t0;               /* when it started */
    int rs_async;               /* it goes on behind the next ops */
    int glast;                  /* stage 3: the latest gather range started */
    /* ZeRO++ hpZ: the secondary group (K ranks of a node), this rank's
     * part of the secondary partition: padded / K parameters from sec_lo */
    zs_comm_t hpz;
    zs_comm_t *gcomm;           /* [ranges] the group each gather runs in */
    int hpz_k;
    size_t sec_n, sec_lo;
    void *sec;
    int tracing;                /* record op spans (zs_engine_set_trace) */
    zs_trace_span *spans;
    size_t nspans, capspans;

    float *stage_p, *stage_g;   /* fp32 staging for one unit */
    zs_quant_spec qat;          /* --qat: the fake quantization of the linear
                                   weights (format NONE: off) */
    float **P, **G;

    zs_acts *acts;              /* slot 0 (the only one without a pipeline) */
    zs_acts **slots;            /* [nslots] pipeline: one per micro-batch in flight,
                                   chunk by chunk (slot0[c]: chunk c's first) */
    int nslots;
    int *slot0;
    zs_model **cmodel;          /* [nchunks] the interleaved schedule's model
                                   chunks (cmodel[0] is model) */
    zs_batch batch;

    /* pipeline (cfg.pp > 1): this stage's groups (its flat arrays' ranges
     * of the whole layout are the shape's chunks), the tied embedding's
     * copy (last stage) and the head's gradient of it (first stage), and
     * the sends not yet complete */
    zs_comm_t pp, world;
    int pp_size, pp_rank;
    void *tied;
    float *tied_grad;
    void **sends;
    int *send_slot;             /* [nsends] interleaved: the slot each sends from */
    int nsends, capsends;
    void *tied_req;             /* last stage: the tied gradient's send */
    double recv_wait_s;         /* seconds spent in the step's receives */
    int32_t *h_tokens, *h_targets;
    float *h_x;

    /* gradient compression: replaces the reduce-scatter of each bucket */
    int comp_on, comp_now;
    float *residual;            /* error feedback, Ψp fp32 (category compression) */
    float *cx, *capprox, *cacc; /* fp32 workspaces: a bucket, its approximation,
                                   this rank's part */
    char *csend, *crecv;        /* compressed bytes out and in */
    int *scount, *sdispl, *rcount, *rdispl;

    size_t norm_block;          /* elements per norm block */
    double *norm_local, *norm_all;
    float *loss_local, *loss_all;

    zs_loss_scaler scaler;
    int t;

    /* offload_optimizer: master, m and v on the host tier (cpu) or in a
     * file per rank (nvme: master, m, v one after the other, shard floats
     * each), read and written through the swap buffers */
    zs_offload off;
    int sep_master;             /* the master is not the parameters themselves */
    void *hgrad, *hparam;       /* host: gradient shard in, parameter shard out */
    int param_host;             /* offload_param: the parameter shard on the host */
    int param_nvme;             /* offload_param nvme: the shard in the swap file,
                                   after the optimizer's states */
    int down;                   /* the reduced shard lives on the host: each
                                   reduced part is sent down as it comes */
    int swap_fd;
    char swap_path[1200];
    /* the step being executed */
    int step, overflow;
    float dloss;                /* d objective / d micro-batch loss */
    double post;                /* the factor applied after the sum over ranks
                                   (DeepSpeed's postscale: f/N), with the
                                   unscaling; 1 otherwise */
    float mul;                  /* the optimizer's gradient multiplier */
    zs_step_info *info;
};

/* ---- partition --------------------------------------------------------- */

void zs_partition_make(zs_partition *p, size_t num_params, int world, int rank, int deterministic)
{
    size_t q = (size_t)world * (deterministic ? ZS_DET_BLOCK : 1);
    p->world = world;
    p->rank = rank;
    p->num_params = num_params;
    p->padded = (num_params + q - 1) / q * q;
    if (p->padded == 0)
        p->padded = q;
    p->shard = p->padded / (size_t)world;
    p->shard_begin = (size_t)rank * p->shard;
}

size_t zs_partition_overlap(const zs_partition *p, int q, size_t lo, size_t hi, size_t *begin)
{
    size_t a = (size_t)q * p->shard, b = a + p->shard;
    size_t s = lo > a ? lo : a, e = hi < b ? hi : b;
    *begin = s;
    return e > s ? e - s : 0;
}

/* ---- set-up ------------------------------------------------------------- */

/* The buffers of the shape's table, each in its category. */
static int zs_engine_alloc_buffers(zs_engine *e)
{
    for (int i = 0; i < ZS_BUF_N; i++) {
        const zs_buf_spec *b = &e->sh->buf[i];
        if (i == ZS_BUF_INIT || i == ZS_BUF_ACTS || i == ZS_BUF_CKPT || i == ZS_BUF_SCRATCH ||
            b->bytes == 0)
            continue; /* transient, or the model's own (zs_model_acts_create) */
        ZS_TRY(zs_mem_alloc_tier(e->mem, b->tier, b->cat, b->bytes, &e->buf[i]));
    }
    const zs_partition *p = &e->part;
    int st = e->stage;
    e->params = e->buf[ZS_BUF_PARAMS];
    /* fp32: the optimizer updates the parameters themselves, unless they
     * are offloaded (then the host keeps an fp32 master, as DeepSpeed's) */
    e->master = e->sep_master ? e->buf[ZS_BUF_MASTER]
                              : (float *)e->params + (st == 1 || st == 2 ? p->shard_begin : 0);
    e->param_host = e->sh->buf[ZS_BUF_PARAMS].tier == ZS_TIER_HOST;
    e->param_nvme = e->sh->buf[ZS_BUF_PARAMS].tier == ZS_TIER_NVME;
    /* the optimizer writes the updated shard into hparam: with
     * offload_param, the host's shard itself (nothing goes up after it) */
    e->hparam = e->param_host ? e->buf[ZS_BUF_PARAMS] : e->buf[ZS_BUF_HPARAM];
    e->m = e->buf[ZS_BUF_M];
    e->v = e->buf[ZS_BUF_V];
    e->gfull = e->buf[ZS_BUF_GFULL];
    e->once = e->sh->reduce_step;
    /* the step schedule reduces into gfull's own part, which the norm, the
     * optimizer and stage 0's allgather then read in place */
    e->gshard = e->once ? (char *)e->gfull + p->shard_begin * e->ps : e->buf[ZS_BUF_GSHARD];
    e->gacc = e->buf[ZS_BUF_GACC];
    e->gfix = e->buf[ZS_BUF_GFIX];
    e->fixbuf = e->buf[ZS_BUF_FIXBUF];
    e->recv = e->buf[ZS_BUF_RECV];
    e->residual = e->buf[ZS_BUF_RESIDUAL];
    e->cx = e->buf[ZS_BUF_CX];
    e->capprox = e->buf[ZS_BUF_CAPPROX];
    e->cacc = e->buf[ZS_BUF_CACC];
    e->csend = e->buf[ZS_BUF_CSEND];
    e->crecv = e->buf[ZS_BUF_CRECV];
    e->stage_p = e->buf[ZS_BUF_STAGE_P];
    e->stage_g = e->buf[ZS_BUF_STAGE_G];
    e->batch.tokens = e->buf[ZS_BUF_TOKENS];
    e->batch.targets = e->buf[ZS_BUF_TARGETS];
    e->batch.x = e->buf[ZS_BUF_X];
    e->tied = e->buf[ZS_BUF_TIED];
    e->tied_grad = e->buf[ZS_BUF_TIED_GRAD];
    e->sec = e->buf[ZS_BUF_HPZ];
    e->xparams = e->buf[ZS_BUF_XPARAMS];
    e->xmaster = e->sh->buf[ZS_BUF_XMASTER].bytes ? e->buf[ZS_BUF_XMASTER]
                 : e->sh->stage == 0 || e->sh->stage == 3
                     ? e->xparams /* all of them, or stage 3's shard */
                     : (float *)e->xparams + (size_t)e->xrank * e->sh->xshard;
    e->xgather = e->buf[ZS_BUF_XGATHER];
    e->xm = e->buf[ZS_BUF_XM];
    e->xv = e->buf[ZS_BUF_XV];
    e->xgacc = e->buf[ZS_BUF_XGACC];
    e->xgrad = e->buf[ZS_BUF_XGRAD];
    e->xrecv = e->buf[ZS_BUF_XRECV];
    e->xtmp = e->buf[ZS_BUF_XTMP];
    e->xbase = e->lay->num_params;
    if (e->buf[ZS_BUF_RING])
        zs_comm_set_scratch(e->comm, e->buf[ZS_BUF_RING], e->sh->buf[ZS_BUF_RING].bytes);
    /* offload: the host's gradient shard is the reduced shard itself, or
     * (the step schedule) a copy of gfull's part */
    e->down = e->off != ZS_OFFLOAD_NONE && e->sh->buf[ZS_BUF_GSHARD].tier == ZS_TIER_HOST;
    e->hgrad = e->down ? e->gshard : e->buf[ZS_BUF_HGRAD];
    return 0;
}

/* ---- offload to nvme: the swap file ------------------------------------------- */

/* Byte offset of element i of state k (0 master, 1 m, 2 v) in the file. */
static off_t zs_swap_at(const zs_engine *e, int k, size_t i)
{
    return (off_t)(((size_t)k * e->part.shard + i) * 4);
}

/* Write (or read) bytes at byte offset at of the swap file, whole. */
static int zs_swap_rw(zs_engine *e, int write, off_t at, size_t bytes, void *buf)
{
    char *p = buf;
    while (bytes > 0) {
        ssize_t r = write ? pwrite(e->swap_fd, p, bytes, at) : pread(e->swap_fd, p, bytes, at);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            ZS_FAIL("cannot %s %s: %s", write ? "write" : "read", e->swap_path,
                    r < 0 ? strerror(errno) : "the file is shorter than what it holds");
        p += r;
        bytes -= (size_t)r;
        at += r;
    }
    return 0;
}

static int zs_swap_io(zs_engine *e, int write, int k, size_t i, size_t n, float *buf)
{
    return zs_swap_rw(e, write, zs_swap_at(e, k, i), n * 4, buf);
}

/* offload_optimizer nvme: this rank's file of master, m and v, zero-filled,
 * under nvme_path; removed when the engine goes, also after an error. */
/* Byte offset of the parameter shard's element i in the file (offload_param
 * nvme): after the optimizer's states when they are there too. */
static off_t zs_swap_param_at(const zs_engine *e, size_t i)
{
    int states = e->off == ZS_OFFLOAD_NVME ? 2 + (e->cfg.optimizer == ZS_OPT_ADAMW) : 0;
    return zs_swap_at(e, states, 0) + (off_t)(i * e->ps);
}

/* Move n working-precision parameters of the shard to (write) or from the
 * file, at element i. */
static int zs_swap_params(zs_engine *e, int write, size_t i, size_t n, void *buf)
{
    return zs_swap_rw(e, write, zs_swap_param_at(e, i), n * e->ps, buf);
}

static int zs_engine_swap_open(zs_engine *e)
{
    int pn = e->sh->buf[ZS_BUF_PARAMS].tier == ZS_TIER_NVME;
    if ((e->off != ZS_OFFLOAD_NVME && !pn) || e->phantom)
        return 0;
    snprintf(e->swap_path, sizeof e->swap_path, "%s/zerosim-%ld-rank%d.swap", e->cfg.nvme_path,
             (long)getpid(), e->part.rank);
    e->swap_fd = open(e->swap_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (e->swap_fd < 0)
        ZS_FAIL("nvme_path %s: cannot create %s: %s; give a writable folder (--nvme-path)",
                e->cfg.nvme_path, e->swap_path, strerror(errno));
    off_t end = zs_swap_param_at(e, pn ? e->part.shard : 0);
    if (ftruncate(e->swap_fd, end) != 0)
        ZS_FAIL("nvme_path %s: cannot size %s to %zu bytes: %s", e->cfg.nvme_path, e->swap_path,
                (size_t)end, strerror(errno));
    return 0;
}

/* The master's elements [i, i + n) of this rank's range (not the
 * parameters: sep_master), in memory or in the swap file. */
static int zs_engine_master_write(zs_engine *e, size_t i, size_t n, const float *host)
{
    if (e->phantom)
        return 0;
    if (e->off == ZS_OFFLOAD_NVME)
        return zs_swap_io(e, 1, 0, i, n, (float *)host);
    zs_backend_copy_h2d(e->be, e->master + i, host, n * 4);
    return 0;
}

static int zs_engine_master_read(zs_engine *e, size_t i, size_t n, float *host)
{
    if (e->phantom)
        return 0;
    if (e->off == ZS_OFFLOAD_NVME)
        return zs_swap_io(e, 0, 0, i, n, host);
    zs_backend_copy_d2h(e->be, host, e->master + i, n * 4);
    return 0;
}

/* DeepSpeed's layout: store elements [off, off + n) of the master (n at
 * most ZS_INIT_CHUNK) from host: the working copy where this rank holds
 * it (all of its experts, stage 3 its shard over edp), rounded through
 * tmp (the init staging buffer) in mixed precision, and the master's part
 * (which aliases the working copy in fp32). */
static void zs_engine_put_xmaster(zs_engine *e, size_t off, size_t n, const float *buf, void *tmp)
{
    const zs_step_shape *s = e->sh;
    size_t xlo = e->stage == 0 ? 0 : (size_t)e->xrank * s->xshard;
    size_t xn = e->stage == 0 ? s->xpadded : s->xshard;
    /* the stored part: all of it, or stage 3's shard [xlo, xlo + xn) */
    size_t a = off > xlo ? off : xlo, b = off + n < xlo + xn ? off + n : xlo + xn;
    size_t plo = e->stage == 3 ? a : off, pn = e->stage == 3 ? (b > a ? b - a : 0) : n;
    size_t pat = e->stage == 3 ? plo - xlo : off; /* where in xparams */
    if (pn == 0)
        return; /* stage 3: none of this piece is in the shard */
    if (!e->mixed) {
        zs_backend_copy_h2d(e->be, (float *)e->xparams + pat, buf + (plo - off), pn * 4);
        return;
    }
    zs_backend_copy_h2d(e->be, tmp, buf + (plo - off), pn * 4);
    zs_backend_convert_from_f32(e->be, (char *)e->xparams + pat * e->ps, e->pt, tmp, pn);
    if (a < b)
        zs_backend_copy_h2d(e->be, e->xmaster + (a - xlo), buf + (a - off), (b - a) * 4);
}

/* Initial parameters: the same fp32 values on every rank; each writes what
 * its stage holds, through a small host buffer (no host copy of the model). */
static int zs_engine_init_params(zs_engine *e)
{
    const zs_partition *p = &e->part;
    const zs_buf_spec *ib = &e->sh->buf[ZS_BUF_INIT];
    size_t chunk = ZS_INIT_CHUNK;
    float *buf = malloc(chunk * sizeof(float));
    void *tmp = NULL;
    if (!buf)
        ZS_FAIL("out of host memory initialising the parameters");
    if (ib->bytes && zs_mem_alloc(e->mem, ib->cat, ib->bytes, &tmp)) {
        free(buf);
        return -1;
    }
    size_t params_elems = e->stage == 3 ? p->shard : p->padded;
    size_t opt_elems = e->stage == 0 ? p->padded : p->shard;
    /* master / optimizer view: [mlo, mlo+opt_elems); working copy: [plo, plo+params_elems) */
    size_t mlo = e->stage == 0 ? 0 : p->shard_begin, plo = e->stage == 3 ? p->shard_begin : 0;
    /* a phantom run has nothing to fill: only the staging buffer above is
     * allocated, so that the workspace peak is what a real run's is */
    for (size_t off = 0; off < params_elems && !e->phantom; off += chunk) {
        size_t n = params_elems - off < chunk ? params_elems - off : chunk;
        size_t g = plo + off; /* index of this piece in the (stage's) flat array */
        /* a pipeline stage's part of the layout starts at base; its padding is 0 */
        size_t valid = p->num_params > g ? (p->num_params - g < n ? p->num_params - g : n) : 0;
        for (size_t d = 0, run; d < valid; d += run) { /* chunk by chunk */
            size_t at = zs_step_local_global(e->sh, g + d, &run);
            run = run < valid - d ? run : valid - d;
            zs_model_init_slice(e->fmodel && !e->xsplit ? e->fmodel : e->model, at, at + run, buf + d,
                                e->cfg.seed);
        }
        memset(buf + valid, 0, (n - valid) * sizeof(float));
        int rc0 = 0;
        if (e->param_nvme && !e->mixed) {
            rc0 = zs_swap_params(e, 1, off, n, buf);
        } else if (e->param_nvme) { /* rounded on the host, then written */
            zs_backend_copy_h2d(e->be, tmp, buf, n * 4);
            zs_backend_convert_from_f32(e->be, e->hparam, e->pt, tmp, n);
            rc0 = zs_swap_params(e, 1, off, n, e->hparam);
        } else if (!e->mixed) {
            zs_backend_copy_h2d(e->be, (float *)e->params + off, buf, n * 4);
        } else {
            zs_backend_copy_h2d(e->be, tmp, buf, n * 4);
            zs_backend_convert_from_f32(e->be, (char *)e->params + off * e->ps, e->pt, tmp, n);
        }
        if (rc0) {
            free(buf);
            if (tmp)
                zs_mem_free(e->mem, ib->cat, tmp, ib->bytes);
            return -1;
        }
        if (!e->sep_master)
            continue;
        /* the part of this piece that the master holds */
        size_t a = g > mlo ? g : mlo, b = g + n < mlo + opt_elems ? g + n : mlo + opt_elems;
        if (a < b && zs_engine_master_write(e, a - mlo, b - a, buf + (a - g))) {
            free(buf);
            if (tmp)
                zs_mem_free(e->mem, ib->cat, tmp, ib->bytes);
            return -1;
        }
    }
    /* DeepSpeed's layout: the expert store, drawn where the whole model
     * draws it (the computing model lays it out after num_params), and the
     * master's part of it */
    const zs_step_shape *s = e->sh;
    for (size_t off = 0; e->xsplit && off < s->xpadded && !e->phantom; off += chunk) {
        size_t n = s->xpadded - off < chunk ? s->xpadded - off : chunk;
        size_t valid = s->xnum > off ? (s->xnum - off < n ? s->xnum - off : n) : 0;
        zs_model_init_slice(e->model, e->xbase + off, e->xbase + off + valid, buf, e->cfg.seed);
        memset(buf + valid, 0, (n - valid) * sizeof(float));
        zs_engine_put_xmaster(e, off, n, buf, tmp);
    }
    /* the last pipeline stage's copy of the tied embedding: the same values
     * the first stage draws for it */
    for (size_t off = 0; e->tied && off < e->sh->tied_elems && !e->phantom; off += chunk) {
        size_t n = e->sh->tied_elems - off < chunk ? e->sh->tied_elems - off : chunk;
        zs_model_init_slice(e->model, off, off + n, buf, e->cfg.seed);
        if (!e->mixed) {
            zs_backend_copy_h2d(e->be, (float *)e->tied + off, buf, n * 4);
        } else {
            zs_backend_copy_h2d(e->be, tmp, buf, n * 4);
            zs_backend_convert_from_f32(e->be, (char *)e->tied + off * e->ps, e->pt, tmp, n);
        }
    }
    if (tmp)
        zs_mem_free(e->mem, ib->cat, tmp, ib->bytes);
    free(buf);
    return 0;
}

int zs_engine_create(const zs_run_config *cfg, zs_backend_t be, zs_mem_t mem, zs_comm_t comm,
                     zs_engine **out)
{
    return zs_engine_create_shared(cfg, be, mem, comm, NULL, out);
}

int zs_engine_create_shared(const zs_run_config *cfg, zs_backend_t be, zs_mem_t mem,
                            zs_comm_t comm, const zs_step_shape *shape, zs_engine **out)
{
    *out = NULL;
    zs_engine *e = calloc(1, sizeof *e);
    if (!e)
        ZS_FAIL("out of host memory creating the engine");
    e->cfg = *cfg;
    e->be = be;
    e->phantom = zs_backend_is_phantom(be);
    e->mem = mem;
    e->comm = comm;
    e->stage = cfg->stage;
    e->det = cfg->deterministic;
    e->pt = cfg->precision;
    e->ps = zs_dtype_size(e->pt);
    e->mixed = cfg->precision != ZS_DTYPE_F32;
    e->comp_on = cfg->compression.kind != ZS_COMP_NONE;
    e->off = cfg->stage >= 1 ? cfg->offload_optimizer : ZS_OFFLOAD_NONE;
    e->sep_master = e->mixed || e->off != ZS_OFFLOAD_NONE;
    e->swap_fd = -1;
    if (e->off != ZS_OFFLOAD_NONE && !zs_backend_host_accessible(be) && !e->phantom) {
        zs_error_set("offload_optimizer is not supported with --backend %s yet (the host "
                     "optimizer runs on host memory): use --backend cpu",
                     zs_backend_name(be));
        goto fail;
    }
    e->ct = e->pt == ZS_DTYPE_F32 ? ZS_CT_F32 : e->pt == ZS_DTYPE_BF16 ? ZS_CT_BF16 : ZS_CT_F16;
    if (e->stage < 0 || e->stage > 3) {
        zs_error_set("ZeRO stage must be 0, 1, 2 or 3, got %d", e->stage);
        goto fail;
    }
    if (e->comp_on && !zs_backend_host_accessible(be) && !e->phantom) {
        /* the codecs (src/comm/compress.c) read and write host memory (a
         * phantom run skips them: the compressed sizes do not depend on the
         * values) */
        zs_error_set("--compression is not supported with --backend %s (its codecs run on "
                     "host memory): use --backend cpu, or --compression none",
                     zs_backend_name(be));
        goto fail;
    }
    if (cfg->qat) { /* the fake quantization runs on host memory */
        if (!zs_backend_host_accessible(be) && !e->phantom) {
            zs_error_set("--qat is not supported with --backend %s yet (its fake quantization "
                         "runs on host memory): use --backend cpu", zs_backend_name(be));
            goto fail;
        }
        e->qat.format = (zs_quant_format)cfg->qat;
        if (zs_quant_spec_finalize(&e->qat))
            goto fail;
    }
    e->tp_size = cfg->model.tp > 1 ? cfg->model.tp : 1;
    e->tp_rank = e->tp_size > 1 ? cfg->model.tp_rank : 0;
    if (e->tp_size > 1 && !zs_backend_has_tp(be)) {
        zs_error_set("tensor parallelism (--tp %d) has no kernels on the %s backend yet: use "
                     "--backend cpu, or --tp 1", e->tp_size, zs_backend_name(be));
        goto fail;
    }
    /* a phantom run feeds no data (building the GPT's Markov chain would be
     * most of its time) */
    /* expert parallelism: the engine's own configuration and layout are
     * --ep 1's; the computing model is this rank's */
    e->ep_size = cfg->model.moe_ep > 1 ? cfg->model.moe_ep : 1;
    e->ep_rank = e->ep_size > 1 ? cfg->model.moe_ep_rank : 0;
    e->xsplit = e->ep_size > 1 && zs_step_ep_split(cfg, zs_comm_size(comm), NULL);
    e->xrank = zs_comm_rank(comm) / e->ep_size;
    e->cfg.model.moe_ep = 1;
    e->cfg.model.moe_ep_rank = 0;
    /* the shape: ep's buffers, the layout (zs_step_ep_configs) */
    zs_run_config scfg;
    zs_model_config lay_cfg;
    zs_step_ep_configs(cfg, zs_comm_size(comm), &scfg, &lay_cfg);
    zs_model_config cm = scfg.model; /* the computing model */
    if (zs_model_create(&cm, &e->model) ||
        (e->ep_size > 1 && zs_model_create(&e->cfg.model, &e->fmodel)) ||
        (!e->phantom && (cfg->data_file
                             ? zs_data_create_tokens(&cfg->model, cfg->seed, cfg->data_file, &e->data)
                             : zs_data_create(&cfg->model, cfg->seed, &e->data))))
        goto fail;
    /* lays out the flat arrays */
    zs_model *lm = e->fmodel && !e->xsplit ? e->fmodel : e->model;
    e->lay = zs_model_layout(lm);
    e->clay = zs_model_layout(e->model);
    e->U = e->lay->n_layers;
    int N = zs_comm_size(comm);
    if (shape) {
        e->sh = shape;
    } else {
        if (zs_step_shape_build(&scfg, lm, N, &e->own_shape))
            goto fail;
        e->sh = &e->own_shape;
    }
    /* a pipeline stage's arrays hold its part of the layout only */
    zs_partition_make(&e->part, e->sh->part.num_params, N, zs_comm_rank(comm), e->det);
    e->pp_size = e->sh->pp;
    e->pp_rank = e->sh->pp_rank;
    if (e->pp_size > 1 && !zs_backend_host_accessible(be) && !e->phantom) {
        zs_error_set("pipeline parallelism (--pp %d) is not supported with --backend %s yet: "
                     "use --backend cpu", e->pp_size, zs_backend_name(be));
        goto fail;
    }
    if (e->stage == 3 && cfg->hpz_partition_size > 1) {
        e->hpz = zs_comm_hpz(comm);
        if (!e->hpz || zs_comm_size(e->hpz) != cfg->hpz_partition_size) {
            zs_error_set("internal: zero_hpz_partition_size %d without its secondary group "
                         "(zs_comm_set_hpz on the data-parallel group)", cfg->hpz_partition_size);
            goto fail;
        }
        e->hpz_k = cfg->hpz_partition_size;
        e->sec_n = e->sh->part.padded / (size_t)e->hpz_k;
        e->sec_lo = (size_t)zs_comm_rank(e->hpz) * e->sec_n;
    }
    if (zs_step_shape_check_run(e->sh) ||
        zs_step_program_build(e->sh, lm, e->part.rank, &e->prog))
        goto fail;

    /* fixed point: fp16 values are exact with 24 fractional bits; fp32 and
     * bf16 keep 40. The limit keeps the sum of all micro-batches of a step
     * below 2^62. */
    e->frac_bits = e->pt == ZS_DTYPE_F16 ? 24 : 40;
    e->fix_limit = (int64_t)((((uint64_t)1) << 62) / ((uint64_t)cfg->grad_accum * (uint64_t)N));

    if (zs_engine_alloc_buffers(e) || zs_engine_swap_open(e))
        goto fail;
    /* the collectives' temporaries in the ledger: qwZ's parts, the two-level
     * reduce-scatter's node sums, qgZ's buffers (zerosim/comm.h) */
    zs_comm_set_mem(comm, mem);
    int nb = e->sh->nbuckets, ng = e->stage == 3 ? e->sh->gfirst[e->U - 1] + e->sh->gn[e->U - 1] : 0;
    e->bucket_buf = calloc((size_t)nb + 1, sizeof(void *));
    e->counts = calloc((size_t)N, sizeof(int));
    e->displs = calloc((size_t)N, sizeof(int));
    e->gstart = calloc((size_t)e->U + 1, sizeof(double));
    e->rs_k = e->glast = -1;
    e->gbuf = calloc((size_t)ng + 1, sizeof(void *));
    e->greq = calloc((size_t)ng + 1, sizeof(void *));
    e->gcounts = calloc((size_t)ng + 1, sizeof(int *));
    e->gdispls = calloc((size_t)ng + 1, sizeof(int *));
    e->gcomm = calloc((size_t)ng + 1, sizeof(zs_comm_t));
    e->P = calloc((size_t)e->lay->n_entries, sizeof(float *));
    e->G = calloc((size_t)e->lay->n_entries, sizeof(float *));
    if (!e->gstart || !e->bucket_buf || !e->counts || !e->displs || !e->gbuf || !e->greq ||
        !e->gcounts || !e->gdispls || !e->gcomm || !e->P || !e->G) {
        zs_error_set("out of host memory creating the engine");
        goto fail;
    }
    if (e->comp_on) {
        e->scount = calloc((size_t)N, sizeof(int));
        e->sdispl = calloc((size_t)N, sizeof(int));
        e->rcount = calloc((size_t)N, sizeof(int));
        e->rdispl = calloc((size_t)N, sizeof(int));
        if (!e->scount || !e->sdispl || !e->rcount || !e->rdispl) {
            zs_error_set("out of host memory for the compressed exchange");
            goto fail;
        }
    }

    /* activations and the micro-batch */
    int mb = cfg->micro_batch, nc = e->sh->nchunks;
    e->nslots = e->sh->slots;
    e->slots = calloc((size_t)e->nslots, sizeof *e->slots);
    e->slot0 = calloc((size_t)nc, sizeof *e->slot0);
    e->cmodel = calloc((size_t)nc, sizeof *e->cmodel);
    if (!e->slots || !e->slot0 || !e->cmodel) {
        zs_error_set("out of host memory creating the engine");
        goto fail;
    }
    e->cmodel[0] = e->model;
    for (int c = 1; c < nc; c++) {
        zs_model_config cc;
        if (zs_pp_chunk_model(&scfg, c, &cc) || zs_model_create(&cc, &e->cmodel[c]))
            goto fail;
    }
    for (int c = 1; c < nc; c++)
        e->slot0[c] = e->slot0[c - 1] + e->sh->cslots[c - 1];
    /* the last chunk's first slot owns the scratch and the working slots
     * (the largest: it has the head), the others share them */
    int own = e->slot0[nc - 1];
    if (zs_model_acts_create(e->cmodel[nc - 1], mem, mb, &e->acts))
        goto fail;
    e->slots[own] = e->acts;
    for (int c = 0; c < nc; c++)
        for (int i = e->slot0[c]; i < e->slot0[c] + e->sh->cslots[c]; i++)
            if (i != own &&
                zs_model_acts_create_slot(e->cmodel[c], mem, mb, e->acts, &e->slots[i]))
                goto fail;
    e->batch.b = mb;
    size_t ntok = e->sh->tok_bytes / sizeof(int32_t);
    e->h_tokens = calloc(ntok, sizeof(int32_t));
    e->h_targets = calloc(ntok, sizeof(int32_t));
    e->h_x = calloc(e->sh->x_bytes / sizeof(float) + 1, sizeof(float));

    /* norm blocks: one per rank, or ZS_DET_BLOCK elements in deterministic mode */
    e->norm_block = e->det ? ZS_DET_BLOCK : e->part.shard;
    size_t nblk = e->part.shard / e->norm_block;
    e->norm_local = calloc(nblk, sizeof(double));
    e->norm_all = calloc(nblk * (size_t)N, sizeof(double));
    e->loss_local = calloc((size_t)cfg->grad_accum, sizeof(float));
    e->loss_all = calloc((size_t)cfg->grad_accum * (size_t)N, sizeof(float));
    if (!e->h_tokens || !e->h_targets || !e->h_x || !e->norm_local || !e->norm_all ||
        !e->loss_local || !e->loss_all) {
        zs_error_set("out of host memory creating the engine");
        goto fail;
    }
    if (zs_engine_init_params(e))
        goto fail;
    zs_loss_scaler_init(&e->scaler, cfg);
    *out = e;
    return 0;
fail:
    zs_engine_destroy(e);
    return -1;
}

static void zs_gather_release(zs_engine *e, int u);

void zs_engine_destroy(zs_engine *e)
{
    if (!e)
        return;
    zs_mem_t mem = e->mem;
    if (e->sh && e->stage == 3 && e->gbuf)
        for (int u = 0; u < e->U; u++)
            zs_gather_release(e, u);
    if (e->sh && e->bucket_buf)
        for (int k = 0; k < e->sh->nbuckets; k++)
            zs_mem_free(mem, ZS_MEM_COMM_BUFFERS, e->bucket_buf[k],
                        (e->sh->buckets[k].hi - e->sh->buckets[k].lo) * e->ps);
    if (e->comm && e->buf[ZS_BUF_RING])
        zs_comm_set_scratch(e->comm, NULL, 0);
    if (e->comm)
        zs_comm_set_mem(e->comm, NULL);
    for (int i = 0; e->sh && i < ZS_BUF_N; i++)
        if (e->buf[i])
            zs_mem_free_tier(mem, e->sh->buf[i].tier, e->sh->buf[i].cat, e->buf[i],
                             e->sh->buf[i].bytes);
    if (e->swap_fd >= 0) { /* the nvme tier's file goes with the run */
        close(e->swap_fd);
        unlink(e->swap_path);
    }
    free(e->spans);
    free(e->bucket_buf);
    free(e->counts);
    free(e->displs);
    free(e->gstart);
    free(e->gbuf);
    free(e->greq);
    free(e->gcounts);
    free(e->gdispls);
    free(e->gcomm);
    free(e->scount);
    free(e->sdispl);
    free(e->rcount);
    free(e->rdispl);
    for (int i = 0; e->slots && i < e->nslots; i++)
        if (e->slots[i] != e->acts)
            zs_model_acts_destroy(e->slots[i]);
    free(e->slots);
    free(e->slot0);
    zs_model_acts_destroy(e->acts);
    for (int i = 0; i < e->nsends; i++) /* after an error: let them finish */
        zs_comm_wait(e->pp, &e->sends[i]);
    free(e->sends);
    free(e->send_slot);
    if (e->tied_req)
        zs_comm_wait(e->pp, &e->tied_req);
    free(e->P);
    free(e->G);
    free(e->h_tokens);
    free(e->h_targets);
    free(e->h_x);
    free(e->norm_local);
    free(e->norm_all);
    free(e->loss_local);
    free(e->loss_all);
    zs_step_program_free(&e->prog);
    zs_step_shape_free(&e->own_shape);
    zs_data_destroy(e->data);
    for (int c = 1; e->cmodel && e->sh && c < e->sh->nchunks; c++)
        zs_model_destroy(e->cmodel[c]);
    free(e->cmodel);
    zs_model_destroy(e->model);
    zs_model_destroy(e->fmodel);
    free(e);
}

/* ---- stage 3: gathering parameters ------------------------------------- */

/* hpZ: the part of [lo, hi) that each rank of the secondary group holds
 * (rank d: [d Q, (d+1) Q), Q = padded / K), relative to lo. */
static void zs_hpz_counts(const zs_engine *e, size_t lo, size_t hi, int *counts, int *displs)
{
    for (int d = 0; d < e->hpz_k; d++) {
        size_t a = (size_t)d * e->sec_n, b = a + e->sec_n;
        size_t s = lo > a ? lo : a, t = hi < b ? hi : b;
        counts[d] = t > s ? (int)(t - s) : 0;
        displs[d] = t > s ? (int)(s - lo) : 0;
    }
}

/* Gather range i over a group of nranks: its counts and displacements
 * (filled by the caller) and its buffer, counted as params. */
static int zs_gather_range_alloc(zs_engine *e, int i, int nranks)
{
    const zs_step_range *r = &e->sh->granges[i];
    e->gcounts[i] = malloc((size_t)nranks * sizeof(int));
    e->gdispls[i] = malloc((size_t)nranks * sizeof(int));
    if (!e->gcounts[i] || !e->gdispls[i])
        ZS_FAIL("out of host memory for a parameter gather");
    return zs_mem_alloc(e->mem, ZS_MEM_PARAMS, (r->hi - r->lo) * e->ps, &e->gbuf[i]);
}

/* Unit u's gathered parameters are live from their start. */
static void zs_gather_count_live(zs_engine *e, int u)
{
    e->live += e->sh->gelems[u];
    if (e->live > e->live_peak)
        e->live_peak = e->live;
}

/* hpZ: unit u's backward gather, inside the secondary group, from the
 * secondary partition (the same bytes the forward gather brought). */
static int zs_gather_start_hpz(zs_engine *e, int u)
{
    const zs_step_shape *s = e->sh;
    int K = e->hpz_k, me = zs_comm_rank(e->hpz);
    e->gstart[u] = zs_clock();
    for (int i = s->gfirst[u]; i < s->gfirst[u] + s->gn[u]; i++) {
        const zs_step_range *r = &s->granges[i];
        ZS_TRY(zs_gather_range_alloc(e, i, K));
        zs_hpz_counts(e, r->lo, r->hi, e->gcounts[i], e->gdispls[i]);
        int cnt = e->gcounts[i][me], dsp = e->gdispls[i][me];
        if (cnt && !e->phantom)
            zs_backend_copy_d2d(e->be, (char *)e->gbuf[i] + (size_t)dsp * e->ps,
                                (const char *)e->sec + (r->lo + (size_t)dsp - e->sec_lo) * e->ps,
                                (size_t)cnt * e->ps);
        e->gcomm[i] = e->hpz;
        ZS_TRY(zs_comm_iallgatherv_inplace(e->hpz, e->gbuf[i], e->gcounts[i], e->gdispls[i],
                                           e->ct, u, &e->greq[i]));
        e->glast = i;
    }
    zs_gather_count_live(e, u);
    return 0;
}

/* hpZ: after a forward gather of unit u, this rank's part of the secondary
 * partition from what it brought. */
static void zs_hpz_keep(zs_engine *e, int u)
{
    const zs_step_shape *s = e->sh;
    for (int i = s->gfirst[u]; i < s->gfirst[u] + s->gn[u] && !e->phantom; i++) {
        const zs_step_range *r = &s->granges[i];
        size_t a = r->lo > e->sec_lo ? r->lo : e->sec_lo;
        size_t b = r->hi < e->sec_lo + e->sec_n ? r->hi : e->sec_lo + e->sec_n;
        if (b > a)
            zs_backend_copy_d2d(e->be, (char *)e->sec + (a - e->sec_lo) * e->ps,
                                (const char *)e->gbuf[i] + (a - r->lo) * e->ps, (b - a) * e->ps);
    }
}

/* Start gathering unit u's ranges (non-blocking). */
static int zs_gather_start(zs_engine *e, int u, zs_comm_phase phase)
{
    const zs_step_shape *s = e->sh;
    const zs_partition *p = &e->part;
    int N = p->world;
    if (e->hpz && phase != ZS_PHASE_FORWARD)
        return zs_gather_start_hpz(e, u);
    e->gstart[u] = zs_clock();
    for (int i = s->gfirst[u]; i < s->gfirst[u] + s->gn[u]; i++) {
        const zs_step_range *r = &s->granges[i];
        ZS_TRY(zs_gather_range_alloc(e, i, N));
        zs_step_counts(s, r->lo, r->hi, e->gcounts[i], e->gdispls[i]);
        int me = p->rank, cnt = e->gcounts[i][me], dsp = e->gdispls[i][me];
        /* this rank's part of the range, in its shard (only when it has one) */
        size_t at = cnt ? r->lo + (size_t)dsp - p->shard_begin : 0;
        const char *mine = cnt && e->params ? (char *)e->params + at * e->ps : NULL;
        if (cnt && e->param_nvme) { /* from the file to the host, then up */
            double t0 = zs_clock();
            if (!e->phantom)
                ZS_TRY(zs_swap_params(e, 0, at, (size_t)cnt,
                                      (char *)e->gbuf[i] + (size_t)dsp * e->ps));
            double t1 = zs_clock();
            zs_comm_record_transfer(e->comm, ZS_OP_NVME_READ, (size_t)cnt * e->ps, t1 - t0);
            zs_comm_record_transfer(e->comm, ZS_OP_H2D, (size_t)cnt * e->ps, 0.0);
        } else if (cnt && e->param_host) { /* offload_param: this rank's part goes up */
            double t0 = zs_clock();
            if (!e->phantom)
                zs_backend_copy_h2d(e->be, (char *)e->gbuf[i] + (size_t)dsp * e->ps, mine,
                                    (size_t)cnt * e->ps);
            zs_comm_record_transfer(e->comm, ZS_OP_H2D, (size_t)cnt * e->ps, zs_clock() - t0);
        } else if (cnt) { /* put this rank's part in place */
            zs_backend_copy_d2d(e->be, (char *)e->gbuf[i] + (size_t)dsp * e->ps, mine,
                                (size_t)cnt * e->ps);
        }
        e->gcomm[i] = e->comm;
        ZS_TRY(zs_comm_iallgatherv_inplace(e->comm, e->gbuf[i], e->gcounts[i], e->gdispls[i],
                                           e->ct, u, &e->greq[i]));
        e->glast = i;
    }
    zs_gather_count_live(e, u);
    return 0;
}

static int zs_gather_wait(zs_engine *e, int u, zs_comm_phase phase)
{
    const zs_step_shape *s = e->sh;
    double t0 = zs_clock();
    for (int i = s->gfirst[u]; i < s->gfirst[u] + s->gn[u]; i++) {
        ZS_TRY(zs_comm_wait(e->gcomm[i] ? e->gcomm[i] : e->comm, &e->greq[i]));
        free(e->gcounts[i]);
        free(e->gdispls[i]);
        e->gcounts[i] = e->gdispls[i] = NULL;
    }
    if (e->hpz && phase == ZS_PHASE_FORWARD)
        zs_hpz_keep(e, u);
    /* the gather ran from its start to now; only the wait was exposed */
    double t1 = zs_clock();
    e->nb_span_s += t1 - e->gstart[u];
    e->nb_wait_s += t1 - t0;
    return 0;
}

void zs_engine_overlap(const zs_engine *e, double *span_s, double *wait_s)
{
    *span_s = e->nb_span_s;
    *wait_s = e->nb_wait_s;
}

static void zs_gather_release(zs_engine *e, int u)
{
    const zs_step_shape *s = e->sh;
    if (!e->gbuf[s->gfirst[u]])
        return;
    for (int i = s->gfirst[u]; i < s->gfirst[u] + s->gn[u]; i++) {
        zs_comm_wait(e->gcomm[i] ? e->gcomm[i] : e->comm, &e->greq[i]);
        free(e->gcounts[i]);
        free(e->gdispls[i]);
        e->gcounts[i] = e->gdispls[i] = NULL;
        zs_mem_free(e->mem, ZS_MEM_PARAMS, e->gbuf[i],
                    (s->granges[i].hi - s->granges[i].lo) * e->ps);
        e->gbuf[i] = NULL;
    }
    e->live -= s->gelems[u];
}

/* Typed pointer to entry id's parameters: the full array (stages 0-2) or
 * the gathered range that holds it (stage 3). */
static const void *zs_entry_params(const zs_engine *e, int u, int id)
{
    const zs_param_entry *pe = &e->lay->entries[id];
    const zs_step_shape *s = e->sh;
    size_t lo; /* the ranges are the rank's offsets */
    if (e->xsplit && pe->offset >= e->xbase && e->stage == 3) /* gathered */
        return (const char *)e->xgather + (pe->offset - e->xbase - e->xg_lo) * e->ps;
    if (e->xsplit && pe->offset >= e->xbase) /* an expert entry: the store */
        return (const char *)e->xparams + (pe->offset - e->xbase) * e->ps;
    if (!zs_step_entry_local(s, e->lay, id, &lo)) /* the last stage's tied copy */
        return e->tied;
    if (e->stage < 3)
        return (const char *)e->params + lo * e->ps;
    for (int i = s->gfirst[u]; i < s->gfirst[u] + s->gn[u]; i++)
        if (lo >= s->granges[i].lo && lo + pe->numel <= s->granges[i].hi)
            return (const char *)e->gbuf[i] + (lo - s->granges[i].lo) * e->ps;
    return NULL; /* unreachable: every used entry is in a gathered range */
}

/* ---- views --------------------------------------------------------------- */

/* The part of entry id that the computing model uses: all of it, or with
 * expert parallelism this rank's experts of a stacked expert entry (the
 * ep_rank-th of ep_size equal slices); its first element in *first. */
static size_t zs_engine_slice(const zs_engine *e, int id, size_t *first)
{
    size_t n = e->clay->entries[id].numel;
    *first = n < e->lay->entries[id].numel ? (size_t)e->ep_rank * n : 0;
    return n;
}

/* DeepSpeed's layout at stage 3: unit u's experts, [lo, lo + n) of the
 * store, gathered over edp (every member's part of the range) into
 * xgather before its forward or backward; blocking. */
static int zs_engine_gather_experts(zs_engine *e, int u)
{
    const zs_step_shape *s = e->sh;
    if (!e->xsplit || e->stage != 3 || s->xun[u] == 0)
        return 0;
    size_t lo = s->xulo[u], n = s->xun[u], XS = s->xshard;
    int M = s->xworld, me = e->xrank, rc = 0;
    int *cnt = calloc((size_t)M, sizeof(int)), *dsp = calloc((size_t)M, sizeof(int));
    if (!cnt || !dsp || me >= M) {
        free(cnt);
        free(dsp);
        ZS_FAIL("out of host memory gathering a unit's experts");
    }
    for (int q = 0; q < M; q++) {
        size_t a = (size_t)q * XS > lo ? (size_t)q * XS : lo;
        size_t b = (size_t)(q + 1) * XS < lo + n ? (size_t)(q + 1) * XS : lo + n;
        cnt[q] = b > a ? (int)(b - a) : 0;
        dsp[q] = b > a ? (int)(a - lo) : 0;
    }
    if (cnt[me]) { /* this rank's part in place */
        size_t at = lo + (size_t)dsp[me] - (size_t)me * XS; /* in its shard */
        zs_backend_copy_d2d(e->be, (char *)e->xgather + (size_t)dsp[me] * e->ps,
                            (const char *)e->xparams + at * e->ps, (size_t)cnt[me] * e->ps);
    }
    if (M > 1)
        rc = zs_comm_allgatherv_inplace(e->edp, e->xgather, cnt, dsp, e->ct, u);
    free(cnt);
    free(dsp);
    e->xg_unit = u;
    e->xg_lo = lo;
    return rc;
}

/* P[id] for every entry unit u uses; with grads, G[id] = zeroed staging. */
static void zs_engine_view_unit(zs_engine *e, int u, int want_grads)
{
    int ids[ZS_MAX_USES_PUBLIC];
    int n = zs_model_unit_uses(e->model, u, ids, ZS_MAX_USES_PUBLIC);
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        const zs_param_entry *pe = &e->lay->entries[ids[i]];
        size_t so, numel = zs_engine_slice(e, ids[i], &so);
        const void *src = (const char *)zs_entry_params(e, u, ids[i]) + so * e->ps;
        size_t rows, cols;
        int fake = e->qat.format != ZS_QUANT_NONE &&
                   zs_quant_entry_matrix(&e->cfg.model, pe, &rows, &cols);
        if (e->mixed || fake) {
            zs_backend_convert_to_f32(e->be, e->stage_p + pos, src, e->pt, numel);
            e->P[ids[i]] = e->stage_p + pos;
            /* QAT: forward and backward see the weights quantized and
             * dequantized; their gradient goes to the fp32 master weights
             * unchanged (the straight-through estimator: absmax never
             * clamps, so every element is inside the range) */
            if (fake && !e->phantom)
                zs_quant_fake(&e->qat, e->stage_p + pos, e->stage_p + pos, NULL, rows, cols);
        } else {
            e->P[ids[i]] = (float *)src;
        }
        if (want_grads) { /* every expert's (moe_ep_home) */
            e->G[ids[i]] = e->stage_g + pos;
            zs_backend_memset0(e->be, e->stage_g + pos, pe->numel * 4);
        }
        pos += pe->numel;
    }
}

/* ---- gradients ----------------------------------------------------------- */

/* Add unit u's staged fp32 gradients into the stored gradient: the full
 * buffer (stages 0, 1) or the bucket buffers covering each entry (2, 3),
 * which the program gave their buffers before this unit's backward. */
/* Add fp32 gradients src of entry id into the stored gradient. */
static int zs_engine_commit_entry(zs_engine *e, int id, const float *src)
{
    const zs_param_entry *pe = &e->lay->entries[id];
    size_t lo = 0;
    if (!zs_step_entry_local(e->sh, e->lay, id, &lo))
        ZS_FAIL("internal: a gradient of an entry this rank does not hold (%d)", id);
    size_t hi = lo + pe->numel;
    if (e->stage <= 1) {
        zs_backend_accumulate_f32(e->be, (char *)e->gfull + lo * e->ps, e->pt, src, pe->numel);
        return 0;
    }
    for (int k = 0; k < e->sh->nbuckets; k++) {
        const zs_step_range *b = &e->sh->buckets[k];
        size_t s = lo > b->lo ? lo : b->lo, t = hi < b->hi ? hi : b->hi;
        if (t <= s)
            continue;
        if (!e->bucket_buf[k])
            ZS_FAIL("internal: bucket %d written before the program gave it a buffer", k);
        zs_backend_accumulate_f32(e->be, (char *)e->bucket_buf[k] + (s - b->lo) * e->ps, e->pt,
                                  src + (s - lo), t - s);
    }
    return 0;
}

/* DeepSpeed's layout, deterministic mode: unit u's expert gradients, the
 * store's [xlo, xlo + n), from each source apart, as --ep 1 commits them on
 * the source (stored in working precision from zero, then turned into
 * fixed point), added into the step's fixed-point accumulator: integer sums
 * in any order give --ep 1's reduction's bytes. */
static int zs_engine_commit_experts(zs_engine *e, size_t xlo, size_t n, const zs_acts *a)
{
    size_t chunk, piece = e->sh->xpiece;
    const float *src = zs_model_moe_source_grads(e->model, a, &chunk);
    if (chunk != n || (!src && !e->phantom))
        ZS_FAIL("internal: a MoE block's gradients by source are %zu floats, its experts %zu",
                chunk, n);
    int64_t *fix = e->xtmp;
    void *wp = (char *)e->xtmp + piece * 8;
    for (int q = 0; q < e->ep_size; q++)
        for (size_t off = 0; off < n; off += piece) {
            size_t k = n - off < piece ? n - off : piece;
            zs_backend_memset0(e->be, wp, k * e->ps);
            zs_backend_accumulate_f32(e->be, wp, e->pt, src ? src + (size_t)q * chunk + off : NULL,
                                      k);
            e->fix_overflows +=
                zs_backend_to_fixed(e->be, fix, wp, e->pt, k, e->frac_bits, e->fix_limit);
            zs_backend_add_i64(e->be, (int64_t *)e->xgacc + xlo + off, fix, k);
        }
    return 0;
}

static int zs_engine_commit_grads(zs_engine *e, int u, const zs_acts *a)
{
    int ids[ZS_MAX_USES_PUBLIC];
    int n = zs_model_unit_uses(e->model, u, ids, ZS_MAX_USES_PUBLIC);
    size_t xlo = SIZE_MAX, xn = 0;
    for (int i = 0; i < n; i++) {
        const zs_param_entry *pe = &e->lay->entries[ids[i]];
        if (e->xsplit && pe->offset >= e->xbase) { /* an expert entry: the store */
            size_t at = pe->offset - e->xbase;
            xlo = at < xlo ? at : xlo;
            xn += pe->numel;
            /* without deterministic mode: the model's sum over the
             * sources, added into the step's gradient (reduced over edp
             * after the last backward where edp has more than one rank) */
            if (!e->det)
                zs_backend_accumulate_f32(e->be, (char *)e->xgacc + at * e->ps, e->pt,
                                          e->G[ids[i]], pe->numel);
            continue;
        }
        /* the last stage's tied copy: its gradient goes to the first stage */
        size_t lo;
        if (!zs_step_entry_local(e->sh, e->lay, ids[i], &lo))
            continue;
        ZS_TRY(zs_engine_commit_entry(e, ids[i], e->G[ids[i]]));
    }
    if (xn && e->det)
        ZS_TRY(zs_engine_commit_experts(e, xlo, xn, a));
    return 0;
}

/* DeepSpeed's layout: 1 when the experts' reduced gradient has a buffer of
 * its own (the shape's ZS_BUF_XGRAD: deterministic mode, or an edp group
 * of more than one rank), 0 when the step's accumulator is it. */
static int zs_engine_xgrad_apart(const zs_engine *e)
{
    return e->sh->buf[ZS_BUF_XGRAD].bytes > 0;
}

/* DeepSpeed's layout: this rank's shard of the experts' reduced gradient. */
static void *zs_engine_xgrad_shard(const zs_engine *e)
{
    if (!zs_engine_xgrad_apart(e))
        return e->xgacc;
    return (char *)e->xgrad + (e->stage == 0 ? (size_t)e->xrank * e->sh->xshard : 0) * e->ps;
}

/* Counts and displacements of the expert store's parts over edp. */
static int zs_engine_xcounts(const zs_engine *e, int **cnt, int **dsp)
{
    int M = e->sh->xworld;
    *cnt = malloc((size_t)M * sizeof(int));
    *dsp = malloc((size_t)M * sizeof(int));
    if (!*cnt || !*dsp || e->sh->xpadded > (size_t)INT_MAX) {
        free(*cnt);
        free(*dsp);
        ZS_FAIL("the expert store (%zu elements) is too large for one MPI call",
                e->sh->xpadded);
    }
    for (int q = 0; q < M; q++) {
        (*cnt)[q] = (int)e->sh->xshard;
        (*dsp)[q] = (int)((size_t)q * e->sh->xshard);
    }
    return 0;
}

/* DeepSpeed's layout, after the last backward: the experts' gradients of
 * the step reduce-scattered over edp into this rank's shard, in
 * deterministic mode as fixed point turned back into working precision,
 * else (--ep-layout deepspeed beyond what is exact) as floats; stage 0
 * then gathers the shards (every rank updates all of its experts). */
static int zs_engine_reduce_experts(zs_engine *e)
{
    const zs_step_shape *s = e->sh;
    if (!zs_engine_xgrad_apart(e))
        return 0; /* the accumulator is the gradient */
    int *cnt, *dsp, rc = 0;
    ZS_TRY(zs_engine_xcounts(e, &cnt, &dsp));
    if (!e->det) {
        rc = zs_comm_reduce_scatter(e->edp, e->xgacc, zs_engine_xgrad_shard(e), cnt, e->ct, 0);
    } else {
        const int64_t *sum = (const int64_t *)e->xgacc; /* edp of one: all of it */
        if (s->xworld > 1) {
            rc = zs_comm_reduce_scatter(e->edp, e->xgacc, e->xrecv, cnt, ZS_CT_I64, 0);
            sum = e->xrecv;
        }
        if (!rc)
            zs_backend_from_fixed(e->be, zs_engine_xgrad_shard(e), e->pt, sum, s->xshard,
                                  e->frac_bits);
    }
    if (!rc && e->stage == 0 && s->xworld > 1)
        rc = zs_comm_allgatherv_inplace(e->edp, e->xgrad, cnt, dsp, e->ct, 0);
    free(cnt);
    free(dsp);
    return rc;
}

/* DeepSpeed's layout: the optimizer over the experts (stage 0: all of this
 * rank's; else its shard, then the updated shards gathered over edp). */
static int zs_engine_step_experts(zs_engine *e)
{
    const zs_step_shape *s = e->sh;
    const zs_run_config *c = &e->cfg;
    if (e->stage == 0) {
        zs_optim_step(e->be, c, e->t, e->info->lr, e->mul, e->xmaster, e->xm, e->xv,
                      zs_engine_xgrad_apart(e) ? e->xgrad : e->xgacc, e->pt,
                      e->mixed ? e->xparams : NULL, e->pt, 0,
                      s->xpadded);
        return 0;
    }
    /* stages 1, 2: this rank's part of all of its experts; 3: its shard */
    void *pshard = (char *)e->xparams +
                   (e->stage == 3 ? 0 : (size_t)e->xrank * s->xshard) * e->ps;
    zs_optim_step(e->be, c, e->t, e->info->lr, e->mul, e->xmaster, e->xm, e->xv,
                  zs_engine_xgrad_shard(e), e->pt, e->mixed ? pshard : NULL, e->pt, 0, s->xshard);
    if (s->xworld <= 1 || e->stage == 3)
        return 0;
    int *cnt, *dsp;
    ZS_TRY(zs_engine_xcounts(e, &cnt, &dsp));
    int rc = zs_comm_allgatherv_inplace(e->edp, e->xparams, cnt, dsp, e->ct, 0);
    free(cnt);
    free(dsp);
    return rc;
}

/* The compressed exchange of bucket k (in place of its reduce-scatter):
 * x = the bucket's gradient (+ the error-feedback residual); the part that
 * rank q owns is compressed and sent to q (all-to-all); what was not sent
 * stays in the residual; every rank decompresses the parts it receives and
 * sums them in rank order, then adds the sum into its shard. */
static int zs_engine_exchange_compressed(zs_engine *e, int k, const void *src, size_t rbegin,
                                         size_t rcount)
{
    const zs_step_range *b = &e->sh->buckets[k];
    const zs_comp_spec *cs = &e->cfg.compression;
    int N = e->part.world;
    size_t n = b->hi - b->lo;
    zs_backend_convert_to_f32(e->be, e->cx, src, e->pt, n);
    /* the residual is kept unscaled, so a change of the fp16 loss scale
     * does not change what it means */
    float scale = e->scaler.scale;
    if (e->residual)
        zs_backend_axpy(e->be, e->cx, scale, e->residual + b->lo, n);
    size_t part = 0, soff = 0;
    for (int q = 0; q < N; q++) {
        size_t cnt = (size_t)e->counts[q], nb = zs_comp_bytes(cs, cnt);
        /* host codecs: the CPU backend's buffers are host memory; the sizes
         * do not depend on the values, so a phantom run skips the codec */
        if (!e->phantom)
            zs_comp_compress(cs, e->cx + part, cnt, e->csend + soff, e->capprox + part);
        e->scount[q] = (int)nb;
        e->sdispl[q] = (int)soff;
        soff += nb;
        part += cnt;
    }
    if (e->residual) { /* residual = x - what the receivers will see */
        zs_backend_copy_d2d(e->be, e->residual + b->lo, e->cx, n * 4);
        zs_backend_axpy(e->be, e->residual + b->lo, -1.0f, e->capprox, n);
        zs_backend_scale(e->be, e->residual + b->lo, 1.0f / scale, n);
    }
    size_t rb = zs_comp_bytes(cs, rcount);
    for (int q = 0; q < N; q++) {
        e->rcount[q] = (int)rb;
        e->rdispl[q] = (int)((size_t)q * rb);
    }
    ZS_TRY(zs_comm_alltoallv_bytes(e->comm, e->csend, e->scount, e->sdispl, e->crecv, e->rcount,
                                   e->rdispl, k));
    zs_backend_memset0(e->be, e->cacc, rcount * 4);
    for (int q = 0; q < N && !e->phantom; q++)
        zs_comp_decompress_add(cs, e->crecv + (size_t)q * rb, rcount, e->cacc);
    size_t off = rbegin - e->part.shard_begin;
    if (e->once) /* the shard is gfull's part: it held this rank's own gradient */
        zs_backend_memset0(e->be, (char *)e->gshard + off * e->ps, rcount * e->ps);
    zs_backend_accumulate_f32(e->be, (char *)e->gshard + off * e->ps, e->pt, e->cacc, rcount);
    if (e->down) /* this part went down to the host's shard */
        zs_comm_record_transfer(e->comm, ZS_OP_D2H, rcount * e->ps, 0.0);
    return 0;
}

/* Reduce-scatter bucket k and add this rank's part into the shard
 * accumulator: zs_engine_reduce_start starts it (the compressed exchange
 * runs whole there), zs_engine_reduce_finish waits and adds. Without
 * overlap_comm one follows the other; with it the backward goes on between
 * them, and the engine drives the ring between ops (zs_engine_step).
 * With the step schedule the shard is gfull's own part, which held this
 * rank's local gradient: it is zeroed and the reduced part added (zero
 * plus the sum, as the micro-batch schedule's first addition, so that one
 * micro-batch gives the same bytes under both schedules); in fixed point
 * the reduced part is converted back straight into it. */
static int zs_engine_reduce_start(zs_engine *e, int k, int async)
{
    const zs_step_range *b = &e->sh->buckets[k];
    size_t n = b->hi - b->lo;
    const void *src = e->stage <= 1 ? (const char *)e->gfull + b->lo * e->ps : e->bucket_buf[k];
    zs_step_counts(e->sh, b->lo, b->hi, e->counts, NULL);
    e->rs_k = k;
    e->rs_async = async;
    if (e->comp_now) {
        size_t rbegin, rcount = zs_partition_overlap(&e->part, e->part.rank, b->lo, b->hi,
                                                     &rbegin);
        return zs_engine_exchange_compressed(e, k, src, rbegin, rcount);
    }
    const void *send = src;
    zs_comm_type ct = e->ct;
    if (e->det) {
        if (!e->gfix)
            e->fix_overflows += zs_backend_to_fixed(e->be, e->fixbuf, src, e->pt, n,
                                                    e->frac_bits, e->fix_limit);
        send = e->gfix ? (const void *)(e->gfix + b->lo) : (const void *)e->fixbuf;
        ct = ZS_CT_I64;
    }
    e->rs_t0 = zs_clock();
    ZS_TRY(zs_comm_ireduce_scatter(e->comm, send, e->recv, e->counts, ct, k, &e->rs_req));
    if (async) /* starting it is not hidden */
        e->nb_wait_s += zs_clock() - e->rs_t0;
    return 0;
}

static int zs_engine_reduce_finish(zs_engine *e)
{
    int k = e->rs_k;
    if (k < 0)
        return 0;
    const zs_step_range *b = &e->sh->buckets[k];
    size_t rbegin, rcount = zs_partition_overlap(&e->part, e->part.rank, b->lo, b->hi, &rbegin);
    size_t off = rbegin - e->part.shard_begin;
    e->rs_k = -1;
    if (!e->comp_now) {
        double t0 = zs_clock();
        ZS_TRY(zs_comm_wait(e->comm, &e->rs_req));
        double t1 = zs_clock();
        if (e->rs_async) { /* a blocking one hides nothing: not counted */
            e->nb_wait_s += t1 - t0;
            e->nb_span_s += t1 - e->rs_t0;
        }
        if (e->det) {
            if (e->once)
                zs_backend_from_fixed(e->be, (char *)e->gshard + off * e->ps, e->pt, e->recv,
                                      rcount, e->frac_bits);
            else
                zs_backend_add_i64(e->be, e->gacc + off, e->recv, rcount);
        } else {
            if (e->once)
                zs_backend_memset0(e->be, (char *)e->gshard + off * e->ps, rcount * e->ps);
            double t2 = zs_clock();
            zs_backend_add_typed(e->be, (char *)e->gshard + off * e->ps, e->recv, e->pt, rcount);
            if (e->down) /* the reduced part, added into the host's shard */
                zs_comm_record_transfer(e->comm, ZS_OP_D2H, rcount * e->ps, zs_clock() - t2);
        }
    }
    if (e->stage >= 2) {
        zs_mem_free(e->mem, ZS_MEM_COMM_BUFFERS, e->bucket_buf[k], (b->hi - b->lo) * e->ps);
        e->bucket_buf[k] = NULL;
    }
    return 0;
}

/* Between ops: move the non-blocking collectives on. The reduce-scatter in
 * flight (overlap_comm) is driven by this thread, which does its sums; a
 * test of the latest prefetched gather lets MPI's progress engine move every
 * pending gather (Open MPI progresses non-blocking collectives only inside
 * MPI calls). The time it takes here is not hidden. */
static int zs_engine_progress(zs_engine *e)
{
    if (e->phantom || (!e->rs_req && (e->glast < 0 || !e->greq[e->glast])))
        return 0;
    double t0 = zs_clock();
    int rc = e->rs_req ? zs_comm_test(e->comm, &e->rs_req)
                       : zs_comm_test(e->gcomm[e->glast] ? e->gcomm[e->glast] : e->comm,
                                      &e->greq[e->glast]);
    e->nb_wait_s += zs_clock() - t0;
    return rc;
}

/* Allgather piece i of a full array whose shard this rank holds at its
 * place (pieces of allgather_bucket_size elements). */
static int zs_engine_allgather_piece(zs_engine *e, void *full, int i)
{
    size_t lo = (size_t)i * e->sh->ag_piece;
    size_t hi = lo + e->sh->ag_piece < e->part.padded ? lo + e->sh->ag_piece : e->part.padded;
    zs_step_counts(e->sh, lo, hi, e->counts, e->displs);
    return zs_comm_allgatherv_inplace(e->comm, (char *)full + lo * e->ps, e->counts, e->displs,
                                      e->ct, i);
}

/* ---- the step -------------------------------------------------------------- */

static void zs_engine_load_batch(zs_engine *e, uint64_t first)
{
    int mb = e->cfg.micro_batch;
    if (e->data)
        zs_data_fill(e->data, first, mb, e->h_tokens, e->h_targets, e->h_x);
    if (e->batch.tokens)
        zs_backend_copy_h2d(e->be, e->batch.tokens, e->h_tokens, e->sh->tok_bytes);
    zs_backend_copy_h2d(e->be, e->batch.targets, e->h_targets, e->sh->tok_bytes);
    if (e->batch.x)
        zs_backend_copy_h2d(e->be, e->batch.x, e->h_x, e->sh->x_bytes);
}

/* The step's loss, overflow check and norm; 1 in *skip when the step is
 * skipped (fp16 overflow). */
static int zs_engine_check(zs_engine *e)
{
    const zs_partition *p = &e->part;
    if (e->xsplit)
        ZS_TRY(zs_engine_reduce_experts(e));
    if (e->det && !e->once) { /* the step schedule converted each part as it came */
        double t0 = zs_clock();
        zs_backend_from_fixed(e->be, e->gshard, e->pt, e->gacc, p->shard, e->frac_bits);
        if (e->down) /* converted into the host's shard */
            zs_comm_record_transfer(e->comm, ZS_OP_D2H, p->shard * e->ps, zs_clock() - t0);
    }
    /* overflow: fixed-point range, or inf/NaN in the reduced gradients */
    int flags = (e->fix_overflows > 0) | (zs_backend_count_nonfinite(e->be, e->gshard, e->pt,
                                                                      p->shard) > 0) << 1;
    if (e->xsplit && zs_backend_count_nonfinite(e->be, zs_engine_xgrad_shard(e), e->pt,
                                                e->sh->xshard) > 0)
        flags |= 2;
    ZS_TRY(zs_comm_allreduce_max_int(e->comm, &flags));
    if (e->tp) /* the tensor-parallel shards differ: agree over the group too */
        ZS_TRY(zs_comm_allreduce_max_int(e->tp, &flags));
    if (e->pp) /* and the pipeline stages */
        ZS_TRY(zs_comm_allreduce_max_int(e->pp, &flags));
    e->overflow = flags != 0;
    if (e->overflow && e->pt != ZS_DTYPE_F16) {
        if (flags & 1)
            ZS_FAIL("deterministic reduction overflow at step %d: a gradient element reached "
                    "2^%d / (grad_accum x ranks); lower --lr, enable gradient_clipping, or turn "
                    "off --deterministic", e->step, 62 - e->frac_bits);
        ZS_FAIL("gradients are not finite at step %d: lower --lr or enable gradient_clipping",
                e->step);
    }
    return 0;
}

/* Tensor parallelism: the sum of squares of this rank's gradient shard in
 * [lo, lo + n) (shard offsets), without the replicated parameters except on
 * TP rank 0, so that they count once over the group. */
static double zs_engine_tp_sumsq(zs_engine *e, size_t lo, size_t n)
{
    const zs_partition *p = &e->part;
    if (e->tp_rank == 0)
        return zs_backend_sumsq(e->be, (const char *)e->gshard + lo * e->ps, e->pt, n);
    size_t a = p->shard_begin + lo, b = a + n; /* flat range */
    double s = 0.0;
    int lo_i = 0, hi_i = e->lay->n_entries - 1;
    while (lo_i < hi_i) { /* the last entry starting at or before a */
        int mid = lo_i + (hi_i - lo_i + 1) / 2;
        if (e->lay->entries[mid].offset <= a)
            lo_i = mid;
        else
            hi_i = mid - 1;
    }
    for (int i = lo_i; i < e->lay->n_entries && e->lay->entries[i].offset < b; i++) {
        const zs_param_entry *pe = &e->lay->entries[i];
        if (zs_model_tp_replicated(e->model, pe->offset))
            continue;
        size_t x = pe->offset > a ? pe->offset : a;
        size_t y = pe->offset + pe->numel < b ? pe->offset + pe->numel : b;
        if (x < y)
            s += zs_backend_sumsq(e->be, (const char *)e->gshard + (x - p->shard_begin) * e->ps,
                                  e->pt, y - x);
    }
    return s; /* the padding beyond the parameters is zero */
}

static float zs_half_to_f32(uint16_t h, zs_dtype t);

/* s plus the squares of n typed values, in order, in double: the CPU
 * backend's sumsq started from s instead of 0. */
static double zs_sumsq_from(double s, const void *x, zs_dtype t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float f = t == ZS_DTYPE_F32 ? ((const float *)x)[i]
                                    : zs_half_to_f32(((const uint16_t *)x)[i], t);
        double xi = (double)f;
        s += xi * xi;
    }
    return s;
}

/* Tensor parallelism on TP rank > 0, inside one norm block: the squares of
 * the gradient's [g, g + n) (whole-layout offsets, this rank's shard from
 * shard offset pos) entry by entry, replicated entries left out, each
 * entry's part of the block summed from 0 and added to the block's sum, as
 * zs_engine_tp_sumsq groups them. run[2] carries an entry's open part
 * across ranks; blk_end ends the block. */
static void zs_engine_tp_chain(zs_engine *e, size_t g, size_t n, size_t pos, size_t blk_lo,
                               size_t blk_end, double run[3])
{
    const zs_layout *lay = e->lay;
    int i = 0, hi_i = lay->n_entries - 1;
    while (i < hi_i) { /* the last entry starting at or before g */
        int mid = i + (hi_i - i + 1) / 2;
        if (lay->entries[mid].offset <= g)
            i = mid;
        else
            hi_i = mid - 1;
    }
    for (; i < lay->n_entries && lay->entries[i].offset < g + n; i++) {
        const zs_param_entry *pe = &lay->entries[i];
        size_t eo = pe->offset, ee = eo + pe->numel;
        size_t x = eo > g ? eo : g, y = ee < g + n ? ee : g + n;
        if (x >= y || zs_model_tp_replicated(e->model, eo))
            continue;
        if (x == (eo > blk_lo ? eo : blk_lo))
            run[2] = 0.0; /* the entry's part of the block starts here */
        run[2] = zs_sumsq_from(run[2], (const char *)e->gshard + (pos + x - g) * e->ps, e->pt,
                               y - x);
        if (y == (ee < blk_end ? ee : blk_end)) { /* and ends here */
            run[1] += run[2];
            run[2] = 0.0;
        }
    }
}

/* Pipeline: the global sum of squares exactly as the whole model on the
 * same data-parallel ranks sums it: blocks of that model's partition
 * (each its shard, or ZS_DET_BLOCK elements), each summed in order from
 * 0, the block sums added in order. The ranks of one TP rank hold
 * consecutive ranges of its layout in world rank order (stage by stage,
 * each stage's shards in data-parallel order; with tensor parallelism
 * every T-th world rank), so a chain along them carries the running total
 * and the open block's partial sum from each rank to the next (and, on TP
 * ranks > 0, whose replicated entries do not count, the open entry's).
 * The TP ranks' totals are then added in TP rank order, as a run with one
 * stage adds them. */
static int zs_engine_norm_pp(zs_engine *e, double *sumsq)
{
    const zs_partition *p = &e->part;
    zs_partition ref;
    zs_partition_make(&ref, e->lay->num_params, p->world, 0, e->det);
    size_t blk = e->det ? ZS_DET_BLOCK : ref.shard;
    int wr = zs_comm_rank(e->world), W = zs_comm_size(e->world), T = e->tp_size;
    int nrun = T > 1 ? 3 : 2, entries = T > 1 && e->tp_rank > 0;
    /* total of the closed blocks, the open block's sum, the open entry's */
    double run[3] = {0.0, 0.0, 0.0};
    const zs_step_shape *s = e->sh;
    size_t lo = p->shard_begin, hi = lo + p->shard;
    if (hi > p->num_params)
        hi = p->num_params; /* the stage's padding is not the model's */
    /* with v model chunks a rank the chain goes round the world v times:
     * every rank's part of chunk 0, then of chunk 1, ... */
    for (int c = 0; c < s->nchunks; c++) {
        if (wr >= T || c > 0)
            ZS_TRY(zs_comm_recv_small(e->world, (wr - T + W) % W, run, nrun));
        size_t clo = s->clo[c] > lo ? s->clo[c] : lo;
        size_t chi = s->clo[c] + s->cn[c] < hi ? s->clo[c] + s->cn[c] : hi;
        for (size_t pos = clo; pos < chi && !e->phantom;) {
            size_t g = s->cglo[c] + (pos - s->clo[c]), k = g / blk, end = (k + 1) * blk;
            size_t n = end - g < chi - pos ? end - g : chi - pos;
            if (g == k * blk)
                run[1] = 0.0; /* a block starts here */
            if (entries)
                zs_engine_tp_chain(e, g, n, pos - lo, k * blk, end, run);
            else
                run[1] = zs_sumsq_from(run[1], (const char *)e->gshard + (pos - lo) * e->ps,
                                       e->pt, n);
            if (g + n == end) { /* it ends here */
                run[0] += run[1];
                run[1] = 0.0;
            }
            pos += n;
        }
        if (wr + T < W || c + 1 < s->nchunks)
            ZS_TRY(zs_comm_send_small(e->world, (wr + T) % W, run, nrun));
    }
    double mine = run[0] + run[1], *all = malloc((size_t)W * sizeof(double));
    if (!all)
        ZS_FAIL("out of host memory for the global norm");
    int rc = zs_comm_allgather_small(e->world, &mine, all, 1, ZS_CT_F64);
    *sumsq = 0.0;
    for (int q = 0; q < T; q++) /* the end of each TP rank's chain */
        *sumsq += all[W - T + q];
    free(all);
    return rc;
}

/* ---- an exact sum of squares --------------------------------------------- */

/* Mixture-of-experts runs sum the gradient's squares exactly: a float
 * squared is exact in double (48 significant bits) and is added as an
 * integer into base-2^32 digits from 2^-352 (the smallest float squared is
 * 2^-298, the largest below 2^256), so the global norm does not depend on
 * which rank holds which gradient or in which order they are added
 * (DeepSpeed's layout holds the experts elsewhere than --ep 1). */
#define ZS_XSQ_DIGITS 24
#define ZS_XSQ_LOW 352
typedef struct {
    int64_t d[ZS_XSQ_DIGITS];
    size_t n; /* additions since the last carry */
} zs_xsq;

static void zs_xsq_carry(zs_xsq *a)
{
    for (int i = 0; i < ZS_XSQ_DIGITS - 1; i++) {
        a->d[i + 1] += a->d[i] >> 32;
        a->d[i] &= 0xffffffffLL;
    }
    a->n = 0;
}

static void zs_xsq_add(zs_xsq *a, float f)
{
    if (f == 0.0f)
        return;
    int ex;
    double m = frexp((double)f, &ex); /* |f| = |m| 2^ex, |m| in [0.5, 1) */
    uint64_t M = (uint64_t)(fabs(m) * 16777216.0), sq = M * M; /* f^2 = sq 2^(2 ex - 48) */
    int k = 2 * ex - 48 + ZS_XSQ_LOW, i = k / 32, sh = k % 32;
    uint64_t lo = (sq & 0xffffffffULL) << sh, hi = (sq >> 32) << sh;
    a->d[i] += (int64_t)(lo & 0xffffffffULL);
    a->d[i + 1] += (int64_t)(lo >> 32) + (int64_t)(hi & 0xffffffffULL);
    a->d[i + 2] += (int64_t)(hi >> 32);
    if (++a->n == ((size_t)1 << 28))
        zs_xsq_carry(a);
}

/* Add the squares of n typed values of device memory x. */
static void zs_xsq_add_buf(zs_engine *e, zs_xsq *a, const void *x, size_t n)
{
    enum { PIECE = 1 << 14 };
    float f[PIECE];
    uint16_t h[PIECE];
    for (size_t off = 0; off < n && !e->phantom; off += PIECE) {
        size_t k = n - off < PIECE ? n - off : PIECE;
        if (e->pt == ZS_DTYPE_F32) {
            zs_backend_copy_d2h(e->be, f, (const float *)x + off, k * 4);
        } else {
            zs_backend_copy_d2h(e->be, h, (const uint16_t *)x + off, k * 2);
            for (size_t j = 0; j < k; j++)
                f[j] = zs_half_to_f32(h[j], e->pt);
        }
        for (size_t j = 0; j < k; j++)
            zs_xsq_add(a, f[j]);
    }
}

/* The exact sum of squares of every rank's gradient shard (and expert
 * shard), the same on every rank. */
static int zs_engine_norm_exact(zs_engine *e, double *sumsq)
{
    zs_xsq a;
    memset(&a, 0, sizeof a);
    zs_xsq_add_buf(e, &a, e->gshard, e->part.shard);
    if (e->xsplit)
        zs_xsq_add_buf(e, &a, zs_engine_xgrad_shard(e), e->sh->xshard);
    zs_xsq_carry(&a);
    int N = e->part.world;
    int64_t *all = malloc((size_t)N * ZS_XSQ_DIGITS * sizeof(int64_t));
    if (!all)
        ZS_FAIL("out of host memory for the global norm");
    int rc = zs_comm_allgather_small(e->comm, a.d, all, ZS_XSQ_DIGITS, ZS_CT_I64);
    memset(&a, 0, sizeof a);
    for (int q = 0; q < N && !rc; q++) /* below 2^32 each: N of them fit */
        for (int i = 0; i < ZS_XSQ_DIGITS; i++)
            a.d[i] += all[(size_t)q * ZS_XSQ_DIGITS + i];
    free(all);
    zs_xsq_carry(&a);
    *sumsq = 0.0; /* the digits are canonical: the same double on every rank */
    for (int i = ZS_XSQ_DIGITS - 1; i >= 0; i--)
        *sumsq += ldexp((double)a.d[i], 32 * i - ZS_XSQ_LOW);
    return rc;
}

static int zs_engine_norm(zs_engine *e, int *skip)
{
    const zs_partition *p = &e->part;
    int N = p->world;
    float scale = e->scaler.scale;
    zs_step_info *info = e->info;
    /* global norm: block sums in double, summed in block order everywhere */
    double sumsq = 0.0;
    if (!e->overflow && e->pp) {
        ZS_TRY(zs_engine_norm_pp(e, &sumsq));
    } else if (!e->overflow && e->tp) {
        /* tensor parallelism: the norm blocks of this rank's shard of its TP
         * shard (replicated parameters once, on TP rank 0), summed over the
         * data-parallel ranks in block order as below, then over the TP
         * group in its rank order */
        size_t nblk = p->shard / e->norm_block;
        for (size_t i = 0; i < nblk; i++)
            e->norm_local[i] = zs_engine_tp_sumsq(e, i * e->norm_block, e->norm_block);
        ZS_TRY(zs_comm_allgather_small(e->comm, e->norm_local, e->norm_all, (int)nblk, ZS_CT_F64));
        for (size_t i = 0; i < nblk * (size_t)N; i++)
            sumsq += e->norm_all[i];
        double part = sumsq, parts[64];
        if (e->tp_size > 64)
            ZS_FAIL("tensor-parallel groups of more than 64 ranks are not supported (--tp %d)",
                    e->tp_size);
        ZS_TRY(zs_comm_allgather_small(e->tp, &part, parts, 1, ZS_CT_F64));
        sumsq = 0.0;
        for (int q = 0; q < e->tp_size; q++)
            sumsq += parts[q];
    } else if (!e->overflow && e->cfg.model.moe_experts > 0) {
        ZS_TRY(zs_engine_norm_exact(e, &sumsq));
    } else if (!e->overflow) {
        size_t nblk = p->shard / e->norm_block;
        for (size_t i = 0; i < nblk; i++)
            e->norm_local[i] = zs_backend_sumsq(
                e->be, (const char *)e->gshard + i * e->norm_block * e->ps, e->pt, e->norm_block);
        ZS_TRY(zs_comm_allgather_small(e->comm, e->norm_local, e->norm_all, (int)nblk, ZS_CT_F64));
        for (size_t i = 0; i < nblk * (size_t)N; i++)
            sumsq += e->norm_all[i];
    }
    double norm = e->overflow ? INFINITY : sqrt(sumsq) * e->post / scale;
    info->grad_norm = (float)norm;
    *skip = 0;
    if (zs_loss_scaler_update(&e->scaler, e->overflow)) {
        info->skipped = 1;
        *skip = 1;
        /* what this step left in the error-feedback residual holds the
         * overflow: start it again from zero */
        if (e->residual && e->comp_now)
            zs_backend_memset0(e->be, e->residual, e->part.padded * 4);
        return 0;
    }
    double coef = 1.0;
    if (e->cfg.grad_clip > 0.0f) {
        double cc = e->cfg.grad_clip / (norm + 1e-6);
        if (cc < 1.0)
            coef = cc;
    }
    e->t++;
    e->mul = (float)(coef * e->post / scale);
    return 0;
}

/* offload_optimizer nvme: the optimizer over the shard in pieces of
 * ZS_SWAP_CHUNK, each piece's master, m and v read from the swap file into
 * one half of the swap buffer while the other half is updated; a helper
 * thread writes the previous piece back and reads the next. */
typedef struct {
    zs_engine *e;
    int write_slot, read_slot;    /* -1: none */
    size_t write_at, write_n, read_at, read_n;
    int rc;
    char msg[512];
    double write_s, read_s;
} zs_swap_job;

static float *zs_swap_slot(zs_engine *e, int slot, int k)
{
    int states = 2 + (e->cfg.optimizer == ZS_OPT_ADAMW);
    size_t chunk = e->part.shard < ZS_SWAP_CHUNK ? e->part.shard : ZS_SWAP_CHUNK;
    return (float *)e->buf[ZS_BUF_SWAP] + ((size_t)slot * (size_t)states + (size_t)k) * chunk;
}

static int zs_swap_move(zs_engine *e, int write, int slot, size_t at, size_t n)
{
    int states = 2 + (e->cfg.optimizer == ZS_OPT_ADAMW);
    for (int k = 0; k < states; k++)
        ZS_TRY(zs_swap_io(e, write, k, at, n, zs_swap_slot(e, slot, k)));
    return 0;
}

static void *zs_swap_run(void *arg)
{
    zs_swap_job *j = arg;
    double t0 = zs_clock();
    if (j->write_slot >= 0)
        j->rc = zs_swap_move(j->e, 1, j->write_slot, j->write_at, j->write_n);
    double t1 = zs_clock();
    if (!j->rc && j->read_slot >= 0)
        j->rc = zs_swap_move(j->e, 0, j->read_slot, j->read_at, j->read_n);
    j->write_s = t1 - t0;
    j->read_s = zs_clock() - t1;
    if (j->rc) /* the error buffer is per thread: hand the message over */
        snprintf(j->msg, sizeof j->msg, "%s", zs_error_msg());
    return NULL;
}

static int zs_engine_optimizer_swapped(zs_engine *e)
{
    const zs_run_config *c = &e->cfg;
    size_t S = e->part.shard, chunk = S < ZS_SWAP_CHUNK ? S : ZS_SWAP_CHUNK;
    size_t nchunks = (S + chunk - 1) / chunk;
    int states = 2 + (c->optimizer == ZS_OPT_ADAMW);
    if (e->phantom) { /* the bytes, without the files */
        zs_comm_record_transfer(e->comm, ZS_OP_NVME_READ, S * 4 * (size_t)states, 0.0);
        zs_comm_record_transfer(e->comm, ZS_OP_NVME_WRITE, S * 4 * (size_t)states, 0.0);
        return 0;
    }
    double t0 = zs_clock();
    ZS_TRY(zs_swap_move(e, 0, 0, 0, chunk));
    zs_comm_record_transfer(e->comm, ZS_OP_NVME_READ, chunk * 4 * (size_t)states,
                            zs_clock() - t0);
    for (size_t i = 0; i < nchunks; i++) {
        size_t at = i * chunk, n = S - at < chunk ? S - at : chunk;
        int slot = (int)(i % 2);
        zs_swap_job job = {.e = e, .write_slot = -1, .read_slot = -1};
        if (i > 0) { /* the previous piece goes back */
            job.write_slot = 1 - slot;
            job.write_at = at - chunk;
            job.write_n = chunk;
        }
        if (i + 1 < nchunks) { /* into the same half, after its write */
            job.read_slot = 1 - slot;
            job.read_at = at + chunk;
            job.read_n = S - job.read_at < chunk ? S - job.read_at : chunk;
        }
        pthread_t th;
        int threaded = (job.write_slot >= 0 || job.read_slot >= 0) &&
                       pthread_create(&th, NULL, zs_swap_run, &job) == 0;
        if (!threaded && (job.write_slot >= 0 || job.read_slot >= 0))
            zs_swap_run(&job); /* no thread: in turn */
        zs_optim_step(e->be, c, e->t, e->info->lr, e->mul, zs_swap_slot(e, slot, 0),
                      zs_swap_slot(e, slot, 1),
                      states > 2 ? zs_swap_slot(e, slot, 2) : NULL,
                      (const char *)e->hgrad + at * e->ps, e->pt,
                      (char *)e->hparam + at * e->ps, e->pt, 0, n);
        if (threaded)
            pthread_join(th, NULL);
        if (job.rc)
            ZS_FAIL("%s", job.msg);
        if (job.write_slot >= 0)
            zs_comm_record_transfer(e->comm, ZS_OP_NVME_WRITE,
                                    job.write_n * 4 * (size_t)states, job.write_s);
        if (job.read_slot >= 0)
            zs_comm_record_transfer(e->comm, ZS_OP_NVME_READ,
                                    job.read_n * 4 * (size_t)states, job.read_s);
    }
    size_t last = (nchunks - 1) * chunk;
    t0 = zs_clock();
    ZS_TRY(zs_swap_move(e, 1, (int)((nchunks - 1) % 2), last, S - last));
    zs_comm_record_transfer(e->comm, ZS_OP_NVME_WRITE, (S - last) * 4 * (size_t)states,
                            zs_clock() - t0);
    return 0;
}

/* ---- the pipeline's messages ---------------------------------------------- */

/* The activations of op o's micro-batch (on its model chunk). */
static int zs_engine_slot_index(const zs_engine *e, const zs_step_op *o)
{
    int c = o->chunk;
    return e->slot0[c] + (o->micro > 0 ? o->micro : 0) % e->sh->cslots[c];
}

static zs_acts *zs_engine_slot(zs_engine *e, const zs_step_op *o)
{
    return e->slots[zs_engine_slot_index(e, o)];
}

enum { ZS_TAG_ACT = 7101, ZS_TAG_GRAD, ZS_TAG_TIED_GRAD, ZS_TAG_TIED };

/* Send n elements to pipeline rank `to`; the buffer stays as it is until
 * zs_engine_wait_sends. */
static int zs_engine_send(zs_engine *e, int to, const void *buf, size_t n, zs_comm_type t,
                          int tag, int unit, int slot)
{
    if (e->nsends == e->capsends) {
        int cap = e->capsends ? 2 * e->capsends : 8;
        void **p = realloc(e->sends, (size_t)cap * sizeof *p);
        int *q = p ? realloc(e->send_slot, (size_t)cap * sizeof *q) : NULL;
        if (p)
            e->sends = p;
        if (!q)
            ZS_FAIL("out of host memory for the pipeline's sends");
        e->send_slot = q;
        e->capsends = cap;
    }
    ZS_TRY(zs_comm_isend(e->pp, to, buf, n, t, tag, unit, &e->sends[e->nsends]));
    e->send_slot[e->nsends++] = slot;
    return 0;
}

/* The interleaved schedule: complete the pending sends from activation
 * slot `slot` only, before an op writes into it. Each of them was
 * received, or its receive is posted, before the slot's next use (the
 * activation's before this micro-batch's gradient came back; the
 * gradient's before the slot holds the next micro-batch), so no rank
 * waits on a neighbour that waits on it, as waiting for every send
 * before each compute would on the ring P - 1 -> 0. */
static int zs_engine_wait_slot(zs_engine *e, int slot)
{
    int rc = 0, k = 0;
    for (int i = 0; i < e->nsends; i++) {
        if (e->send_slot[i] != slot) {
            e->sends[k] = e->sends[i];
            e->send_slot[k++] = e->send_slot[i];
        } else if (zs_comm_wait(e->pp, &e->sends[i]) && !rc) {
            rc = -1;
        }
    }
    e->nsends = k;
    return rc;
}

/* Complete the pending sends: before a unit's compute or a receive
 * overwrites what they send, and at the end of the step. */
static int zs_engine_wait_sends(zs_engine *e)
{
    int rc = 0;
    for (int i = 0; i < e->nsends; i++)
        if (zs_comm_wait(e->pp, &e->sends[i]) && !rc)
            rc = -1;
    e->nsends = 0;
    return rc;
}

static int zs_engine_recv(zs_engine *e, int from, void *buf, size_t n, zs_comm_type t, int tag,
                          int unit)
{
    double t0 = zs_clock();
    int rc = zs_comm_recv(e->pp, from, buf, n, t, tag, unit);
    e->recv_wait_s += zs_clock() - t0;
    return rc;
}

static int zs_engine_exec_pp(zs_engine *e, const zs_step_op *o)
{
    zs_acts *a = zs_engine_slot(e, o);
    int r = e->pp_rank, last = e->pp_size - 1, P = e->pp_size;
    int prev = (r + P - 1) % P, next = (r + 1) % P; /* a ring with model chunks */
    int il = e->sh->nchunks > 1;
    size_t n;
    float *x;
    switch (o->kind) {
    case ZS_SOP_RECV_ACT: /* into the stage's input: the previous unit's output */
        x = zs_model_unit_output(a, o->unit - 1, &n);
        return zs_engine_recv(e, prev, x, n, ZS_CT_F32, ZS_TAG_ACT, o->unit);
    case ZS_SOP_SEND_ACT:
        x = zs_model_unit_output(a, o->unit, &n);
        return zs_engine_send(e, next, x, n, ZS_CT_F32, ZS_TAG_ACT, o->unit,
                              zs_engine_slot_index(e, o));
    case ZS_SOP_RECV_GRAD:
        if (!il) /* the last gradient sent came from there */
            ZS_TRY(zs_engine_wait_sends(e));
        x = zs_model_input_grad(a, &n);
        return zs_engine_recv(e, next, x, n, ZS_CT_F32, ZS_TAG_GRAD, o->unit);
    case ZS_SOP_SEND_GRAD:
        x = zs_model_input_grad(a, &n);
        if (il) { /* sent from the slot's input, which this backward has done with */
            size_t ni;
            float *in = zs_model_unit_output(a, o->unit - 1, &ni);
            zs_backend_copy_d2d(e->be, in, x, n * 4);
            x = in;
        }
        return zs_engine_send(e, prev, x, n, ZS_CT_F32, ZS_TAG_GRAD, o->unit,
                              zs_engine_slot_index(e, o));
    case ZS_SOP_TIED_SEND: /* the head's staged gradient of entry 0, copied: the first
                            * stage takes it only at its embedding's backward */
        if (il) { /* buffer micro mod k, once rank 0 took what it held (ZS_BUF_TIED_GRAD) */
            int k = o->micro % e->sh->tied_bufs;
            float *tg = e->tied_grad + (size_t)k * o->elems;
            ZS_TRY(zs_engine_wait_slot(e, -2 - k));
            zs_backend_copy_d2d(e->be, tg, e->G[0], o->elems * 4);
            return zs_engine_send(e, 0, tg, o->elems, ZS_CT_F32, ZS_TAG_TIED_GRAD, o->unit,
                                  -2 - k);
        }
        ZS_TRY(zs_comm_wait(e->pp, &e->tied_req));
        zs_backend_copy_d2d(e->be, e->tied_grad, e->G[0], o->elems * 4);
        return zs_comm_isend(e->pp, 0, e->tied_grad, o->elems, ZS_CT_F32, ZS_TAG_TIED_GRAD,
                             o->unit, &e->tied_req);
    case ZS_SOP_TIED_RECV: /* added before the embedding's own, as one model adds them */
        ZS_TRY(zs_engine_recv(e, last, e->tied_grad, o->elems, ZS_CT_F32, ZS_TAG_TIED_GRAD,
                              o->unit));
        return zs_engine_commit_entry(e, 0, e->tied_grad);
    case ZS_SOP_TIED_SYNC: /* the first stage's updated working copy (entry 0 at 0;
                            * stage 3: gathered by the ops before this one) */
        if (r == 0 && e->stage < 3)
            return zs_engine_send(e, last, e->params, o->elems, e->ct, ZS_TAG_TIED, o->unit, -1);
        if (r == 0) { /* complete before the release of the gathered range frees it */
            ZS_TRY(zs_engine_send(e, last, zs_entry_params(e, 0, 0), o->elems, e->ct,
                                  ZS_TAG_TIED, o->unit, -1));
            return zs_engine_wait_sends(e);
        }
        return zs_comm_recv(e->pp, 0, e->tied, o->elems, e->ct, ZS_TAG_TIED, o->unit);
    default:
        ZS_FAIL("internal: step op %d is not a pipeline message", (int)o->kind);
    }
}

/* Execute one op of the step program. *stop = 1 ends the step (skipped). */
static int zs_engine_exec(zs_engine *e, const zs_step_op *o, int *stop)
{
    const zs_run_config *c = &e->cfg;
    const zs_partition *p = &e->part;
    int N = p->world, GA = c->grad_accum, u = o->unit;
    switch (o->kind) {
    case ZS_SOP_BEGIN:
        if (e->gacc)
            zs_backend_memset0(e->be, e->gacc, p->shard * 8);
        if (e->gfix)
            zs_backend_memset0(e->be, e->gfix, p->padded * 8);
        if (!e->once) /* the step schedule's shard is part of gfull */
            zs_backend_memset0(e->be, e->gshard, p->shard * e->ps);
        if (e->xgacc)
            zs_backend_memset0(e->be, e->xgacc, e->sh->buf[ZS_BUF_XGACC].bytes);
        e->fix_overflows = 0;
        break;
    case ZS_SOP_LOAD: {
        uint64_t global = (uint64_t)c->micro_batch * (uint64_t)GA * (uint64_t)N;
        /* micro-batch j = a*N + rank of the step holds samples j*MB .. j*MB+MB-1 */
        uint64_t j = (uint64_t)o->micro * (uint64_t)N + (uint64_t)p->rank;
        zs_engine_load_batch(e, (uint64_t)e->step * global + j * (uint64_t)c->micro_batch);
        break;
    }
    case ZS_SOP_GATHER: ZS_TRY(zs_gather_start(e, u, o->phase)); break;
    case ZS_SOP_WAIT: ZS_TRY(zs_gather_wait(e, u, o->phase)); break;
    case ZS_SOP_RELEASE: zs_gather_release(e, u); break;
    case ZS_SOP_FORWARD:
        ZS_TRY(zs_engine_gather_experts(e, u));
        zs_engine_view_unit(e, u, 0);
        zs_model_forward_unit(e->cmodel[e->sh->uchunk[u]], e->be, u, e->P, zs_engine_slot(e, o),
                              &e->batch);
        if (zs_model_tp_failed(e->cmodel[e->sh->uchunk[u]]))
            return -1;
        break;
    case ZS_SOP_LOSS:
        e->loss_local[o->micro] = zs_model_loss(zs_engine_slot(e, o), e->be);
        break;
    case ZS_SOP_ZERO_GRADS: /* chunk `index`'s part (all of it with one chunk) */
        zs_backend_memset0(e->be, (char *)e->gfull + e->sh->clo[o->index] * e->ps,
                           o->elems * e->ps);
        break;
    case ZS_SOP_BUCKET_ALLOC: {
        const zs_step_range *b = &e->sh->buckets[o->index];
        if (!e->bucket_buf[o->index])
            ZS_TRY(zs_mem_alloc(e->mem, ZS_MEM_COMM_BUFFERS, (b->hi - b->lo) * e->ps,
                                &e->bucket_buf[o->index]));
        break;
    }
    case ZS_SOP_BACKWARD:
        ZS_TRY(zs_engine_gather_experts(e, u));
        zs_engine_view_unit(e, u, 1);
        zs_model_backward_unit(e->cmodel[e->sh->uchunk[u]], e->be, u, e->P, e->G,
                               zs_engine_slot(e, o), &e->batch, e->dloss);
        if (zs_model_tp_failed(e->cmodel[e->sh->uchunk[u]]))
            return -1;
        ZS_TRY(zs_engine_commit_grads(e, u, zs_engine_slot(e, o)));
        break;
    case ZS_SOP_ACCUM_FIXED: { /* this micro-batch's bucket, added in fixed point */
        const zs_step_range *b = &e->sh->buckets[o->index];
        size_t n = b->hi - b->lo;
        e->fix_overflows += zs_backend_to_fixed(e->be, e->fixbuf, (char *)e->gfull + b->lo * e->ps,
                                                e->pt, n, e->frac_bits, e->fix_limit);
        zs_backend_add_i64(e->be, e->gfix + b->lo, e->fixbuf, n);
        break;
    }
    case ZS_SOP_REDUCE:
        ZS_TRY(zs_engine_reduce_start(e, o->index, (o->flags & ZS_SOPF_ASYNC) != 0));
        if (!(o->flags & ZS_SOPF_ASYNC))
            ZS_TRY(zs_engine_reduce_finish(e));
        break;
    case ZS_SOP_REDUCE_WAIT: ZS_TRY(zs_engine_reduce_finish(e)); break;
    case ZS_SOP_LOSS_SUM: {
        /* the loss of the step: micro-batch losses summed in global order */
        ZS_TRY(zs_comm_allgather_small(e->comm, e->loss_local, e->loss_all, GA, ZS_CT_F32));
        double loss = 0.0;
        for (int a = 0; a < GA; a++)
            for (int r = 0; r < N; r++)
                loss += e->loss_all[(size_t)r * GA + a];
        e->info->loss = (float)(loss / (GA * N));
        if (e->pp) { /* the last stage computed it */
            float *all = malloc((size_t)e->pp_size * sizeof(float));
            if (!all)
                ZS_FAIL("out of host memory for the pipeline's loss");
            int rc = zs_comm_allgather_small(e->pp, &e->info->loss, all, 1, ZS_CT_F32);
            e->info->loss = all[e->pp_size - 1];
            free(all);
            ZS_TRY(rc);
        }
        break;
    }
    case ZS_SOP_CHECK: ZS_TRY(zs_engine_check(e)); break;
    case ZS_SOP_NORM: ZS_TRY(zs_engine_norm(e, stop)); break;
    case ZS_SOP_PUT_SHARD: /* every rank gets every reduced gradient */
        zs_backend_copy_d2d(e->be, (char *)e->gfull + p->shard_begin * e->ps, e->gshard,
                            p->shard * e->ps);
        break;
    case ZS_SOP_ALLGATHER:
        ZS_TRY(zs_engine_allgather_piece(e, e->stage == 0 ? e->gfull : e->params, o->index));
        break;
    case ZS_SOP_OFFLOAD_GRADS: { /* the reduced shard, as it is, to the host */
        double t0 = zs_clock();
        if (!e->phantom)
            zs_backend_copy_d2h(e->be, e->hgrad, e->gshard, p->shard * e->ps);
        zs_comm_record_transfer(e->comm, ZS_OP_D2H, p->shard * e->ps, zs_clock() - t0);
        break;
    }
    case ZS_SOP_UPLOAD_PARAMS: { /* the updated shard, in working precision */
        double t0 = zs_clock();
        if (e->param_nvme) { /* into the file: the gathers read it from there */
            if (!e->phantom)
                ZS_TRY(zs_swap_params(e, 1, 0, p->shard, e->hparam));
            zs_comm_record_transfer(e->comm, ZS_OP_NVME_WRITE, p->shard * e->ps,
                                    zs_clock() - t0);
            break;
        }
        void *pshard = (char *)e->params + (e->stage == 3 ? 0 : p->shard_begin * e->ps);
        if (!e->phantom)
            zs_backend_copy_h2d(e->be, pshard, e->hparam, p->shard * e->ps);
        zs_comm_record_transfer(e->comm, ZS_OP_H2D, p->shard * e->ps, zs_clock() - t0);
        break;
    }
    case ZS_SOP_OPTIMIZER:
        if (e->off == ZS_OFFLOAD_CPU) { /* on the host: ZeRO-Offload's CPU step */
            zs_optim_step(e->be, c, e->t, e->info->lr, e->mul, e->master, e->m, e->v, e->hgrad,
                          e->pt, e->hparam, e->pt, 0, p->shard);
        } else if (e->off == ZS_OFFLOAD_NVME) {
            ZS_TRY(zs_engine_optimizer_swapped(e));
        } else if (e->stage == 0) {
            zs_optim_step(e->be, c, e->t, e->info->lr, e->mul, e->master, e->m, e->v,
                          e->gfull, e->pt, e->mixed ? e->params : NULL, e->pt, 0, p->padded);
        } else {
            void *pshard = (char *)e->params + (e->stage == 3 ? 0 : p->shard_begin * e->ps);
            zs_optim_step(e->be, c, e->t, e->info->lr, e->mul, e->master, e->m, e->v,
                          e->gshard, e->pt, e->mixed ? pshard : NULL, e->pt, 0, p->shard);
        }
        if (e->xsplit)
            ZS_TRY(zs_engine_step_experts(e));
        break;
    case ZS_SOP_RECV_ACT:
    case ZS_SOP_SEND_ACT:
    case ZS_SOP_RECV_GRAD:
    case ZS_SOP_SEND_GRAD:
    case ZS_SOP_TIED_SEND:
    case ZS_SOP_TIED_RECV:
    case ZS_SOP_TIED_SYNC:
        ZS_TRY(zs_engine_exec_pp(e, o));
        break;
    default:
        ZS_FAIL("internal: step op %d has no executor", (int)o->kind);
    }
    return 0;
}

int zs_engine_step(zs_engine *e, int step, zs_step_info *info)
{
    const zs_run_config *c = &e->cfg;
    int N = e->part.world, GA = c->grad_accum;
    float scale = e->scaler.scale;
    memset(info, 0, sizeof *info);
    e->step = step;
    e->info = info;
    e->overflow = 0;
    e->recv_wait_s = 0.0;
    /* the average over ranks: divided before the sum (zerosim's way, and
     * DeepSpeed's prescale_gradients: folded into the loss gradient), or by
     * gradient_predivide_factor f before and N/f after (DeepSpeed's
     * postscale, with the unscaling in zs_engine_norm) */
    e->post = 1.0;
    if (c->grad_scaling == ZS_GRAD_POSTSCALE) {
        e->dloss = (float)(scale / ((double)GA * c->grad_predivide));
        e->post = c->grad_predivide / N;
    } else {
        e->dloss = scale / (float)(GA * N);
    }
    e->comp_now = e->comp_on && step >= c->compression_warmup;
    info->compressed = e->comp_now;
    info->loss_scale = scale;
    info->lr = zs_lr_at(c, step);
    /* the comm context and the memory phase follow the ops' phases */
    zs_comm_phase cur = ZS_PHASE_NPHASES;
    static const zs_mem_phase mem_phase[ZS_PHASE_NPHASES] = {
        [ZS_PHASE_SETUP] = ZS_MEM_PHASE_SETUP, [ZS_PHASE_FORWARD] = ZS_MEM_PHASE_FORWARD,
        [ZS_PHASE_BACKWARD] = ZS_MEM_PHASE_BACKWARD, [ZS_PHASE_STEP] = ZS_MEM_PHASE_STEP,
        [ZS_PHASE_REPORT] = ZS_MEM_PHASE_STEP};
    for (size_t i = 0; i < e->prog.n; i++) {
        const zs_step_op *o = &e->prog.ops[i];
        if (o->phase != cur) {
            cur = o->phase;
            zs_comm_set_context(e->comm, cur, step);
            zs_mem_set_phase(e->mem, mem_phase[cur]);
        }
        int stop = 0;
        /* the collectives' own time is the ledger's; the trace keeps the
         * ops that compute or wait */
        int traced = e->tracing && o->kind != ZS_SOP_GATHER && o->kind != ZS_SOP_REDUCE &&
                     o->kind != ZS_SOP_ALLGATHER && o->kind != ZS_SOP_LOSS_SUM &&
                     o->kind != ZS_SOP_RELEASE && o->kind != ZS_SOP_BUCKET_ALLOC;
        double t0 = traced ? zs_clock() : 0.0;
        /* interleaved: only the sends from the slot this op writes */
        if (e->nsends && e->sh->nchunks > 1 &&
            (o->kind == ZS_SOP_FORWARD || o->kind == ZS_SOP_BACKWARD ||
             o->kind == ZS_SOP_RECV_ACT || o->kind == ZS_SOP_SEND_GRAD))
            ZS_TRY(zs_engine_wait_slot(e, zs_engine_slot_index(e, o)));
        else if (e->nsends && (o->kind == ZS_SOP_FORWARD || o->kind == ZS_SOP_BACKWARD))
            ZS_TRY(zs_engine_wait_sends(e)); /* they may send from what this writes */
        ZS_TRY(zs_engine_exec(e, o, &stop));
        ZS_TRY(zs_engine_progress(e));
        if (traced) {
            if (e->nspans == e->capspans) {
                size_t cap = e->capspans ? 2 * e->capspans : 256;
                zs_trace_span *p = realloc(e->spans, cap * sizeof *p);
                if (!p)
                    ZS_FAIL("out of host memory for the trace (%zu op spans)", e->nspans);
                e->spans = p;
                e->capspans = cap;
            }
            e->spans[e->nspans++] = (zs_trace_span){.kind = o->kind, .unit = o->unit,
                                                    .index = o->index, .flags = o->flags,
                                                    .step = step, .start = t0,
                                                    .seconds = zs_clock() - t0};
        }
        if (stop)
            break;
    }
    ZS_TRY(zs_engine_wait_sends(e));
    if (e->tied_req)
        ZS_TRY(zs_comm_wait(e->pp, &e->tied_req));
    info->recv_wait_s = e->recv_wait_s;
    return 0;
}

/* ---- results ---------------------------------------------------------------- */

const zs_model *zs_engine_model(const zs_engine *e) { return e->model; }
size_t zs_engine_num_params(const zs_engine *e)
{
    return e->part.num_params + (e->xsplit ? e->sh->xnum * (size_t)e->ep_size : 0);
}
double zs_engine_loss_floor(const zs_engine *e)
{
    return e->data ? zs_data_loss_floor(e->data) : NAN;
}
const zs_partition *zs_engine_partition(const zs_engine *e) { return &e->part; }
const zs_step_shape *zs_engine_shape(const zs_engine *e) { return e->sh; }

int zs_engine_set_tp(zs_engine *e, zs_comm_t tp)
{
    if (e->tp_size > 1 && !tp)
        ZS_FAIL("tensor parallelism (--tp %d) needs its communicator", e->tp_size);
    for (int c = 0; c < e->sh->nchunks; c++)
        ZS_TRY(zs_model_set_tp_comm(e->cmodel[c], e->tp_size > 1 ? tp : NULL));
    e->tp = e->tp_size > 1 ? tp : NULL;
    return 0;
}
const zs_step_program *zs_engine_program(const zs_engine *e) { return &e->prog; }

int zs_engine_ep_split(const zs_engine *e) { return e->xsplit; }
size_t zs_engine_expert_padded(const zs_engine *e) { return e->xsplit ? e->sh->xpadded : 0; }

int zs_engine_set_ep(zs_engine *e, zs_comm_t ep, zs_comm_t edp)
{
    if (e->ep_size > 1 && !ep)
        ZS_FAIL("expert parallelism (--ep %d) needs its communicator", e->ep_size);
    if (e->xsplit && (!edp || zs_comm_size(edp) != e->sh->xworld || zs_comm_rank(edp) != e->xrank))
        ZS_FAIL("internal: expert parallelism's expert-data-parallel group is not of %d ranks "
                "with this rank at %d", e->sh->xworld, e->xrank);
    e->edp = edp;
    return zs_model_set_ep_comm(e->model, e->ep_size > 1 ? ep : NULL);
}

int zs_engine_set_pp(zs_engine *e, zs_comm_t pp, zs_comm_t world)
{
    if (e->pp_size > 1 && (!pp || !world || zs_comm_size(pp) != e->pp_size))
        ZS_FAIL("pipeline parallelism (--pp %d) needs its communicators", e->pp_size);
    e->pp = e->pp_size > 1 ? pp : NULL;
    e->world = e->pp_size > 1 ? world : NULL;
    return 0;
}
size_t zs_engine_live_params_peak(const zs_engine *e) { return e->live_peak; }


int zs_engine_set_trace(zs_engine *e, int on)
{
    e->tracing = on;
    if (on)
        e->nspans = 0;
    return 0;
}

const zs_trace_span *zs_engine_trace(const zs_engine *e, size_t *n)
{
    *n = e->nspans;
    return e->spans;
}

int zs_engine_buckets(const zs_engine *e, size_t *lo, size_t *hi, int max)
{
    for (int i = 0; i < e->sh->nbuckets && i < max; i++) {
        lo[i] = e->sh->buckets[i].lo;
        hi[i] = e->sh->buckets[i].hi;
    }
    return e->sh->nbuckets;
}

int zs_engine_get_params(zs_engine *e, float *host)
{
    const zs_partition *p = &e->part;
    zs_comm_set_context(e->comm, ZS_PHASE_REPORT, -1);
    int rc = 0;
    if (e->stage == 0) { /* every rank holds all of it */
        if (p->rank == 0)
            zs_backend_copy_d2h(e->be, host, e->master, p->num_params * 4);
        return 0;
    }
    float *shard = malloc(p->shard * sizeof(float));
    float *all = p->rank == 0 ? malloc(p->padded * sizeof(float)) : NULL;
    if (!shard || (p->rank == 0 && !all)) {
        rc = zs_error_set("out of host memory gathering %zu parameters", p->padded);
    } else {
        rc = zs_engine_master_read(e, 0, p->shard, shard);
        if (!rc)
            rc = zs_comm_gather_root(e->comm, shard, (int)p->shard, all, ZS_CT_F32);
        if (!rc && p->rank == 0)
            memcpy(host, all, p->num_params * sizeof(float));
    }
    free(shard);
    free(all);
    return rc;
}

void zs_param_hash(const float *params, size_t n, char hex[17])
{
    XXH64_hash_t h = XXH3_64bits(params, n * sizeof(float));
    snprintf(hex, 17, "%016llx", (unsigned long long)h);
}

/* Collective. The hash streams the parameters through a small host buffer,
 * shard after shard in rank order, so hashing never holds a second copy of
 * the model (which would show in the peak RSS and not in the accounting). */
#define ZS_HASH_CHUNK ((size_t)1 << 18)

/* Tensor parallelism: T shards of n elements each, one after the other in
 * all (TP rank order), into full in the tp = 1 layout order; replicated
 * elements from TP rank 0. */
static int zs_engine_tp_unshard(const zs_engine *e, const float *all, size_t n, float *full)
{
    size_t total = zs_model_count_params(&e->cfg.model);
    zs_model_config mc = e->cfg.model;
    int rc = 0;
    for (int q = 0; q < e->tp_size && !rc; q++) {
        zs_model *mq;
        mc.tp_rank = q;
        if ((rc = zs_model_create(&mc, &mq)))
            break;
        for (size_t j = 0; j < n;) {
            size_t run, g = zs_model_tp_global_offset(mq, j, &run);
            if (run == 0 || g == SIZE_MAX || g + run > total) {
                rc = zs_error_set("internal: shard element %zu of TP rank %d maps outside the "
                                  "model", j, q);
                break;
            }
            if (q == 0 || !zs_model_tp_replicated(mq, j))
                memcpy(full + g, all + (size_t)q * n + j, run * sizeof(float));
            j += run;
        }
        zs_model_destroy(mq);
    }
    return rc;
}

/* DeepSpeed's layout: the whole model in --ep 1 order (fmodel's layout),
 * on data-parallel rank 0 into full: the dense entries as gathered without
 * experts, and each expert entry the classes' slices one after the other;
 * data-parallel rank r holds part r / P of class r % P's store (P = ep). */
static int zs_engine_get_ep1_params(zs_engine *e, float *full)
{
    const zs_partition *p = &e->part;
    const zs_step_shape *s = e->sh;
    const zs_layout *flay = zs_model_layout(e->fmodel);
    int N = p->world, P = e->ep_size, lead = p->rank == 0;
    size_t XS = s->xshard;
    float *dense = lead ? malloc(p->padded * sizeof(float) + 1) : NULL;
    float *mine = malloc(XS * sizeof(float) + 1);
    float *all = lead ? malloc((size_t)N * XS * sizeof(float) + 1) : NULL;
    int rc = 0;
    if (!mine || (lead && (!dense || !all)))
        rc = zs_error_set("out of host memory gathering the parameters");
    if (!rc)
        rc = zs_engine_get_params(e, dense);
    if (!rc) { /* the master's part: stage 0 holds the whole store */
        const float *m = e->xmaster + (e->stage == 0 ? (size_t)e->xrank * XS : 0);
        zs_backend_copy_d2h(e->be, mine, m, XS * 4);
        if ((size_t)N * XS > (size_t)INT_MAX)
            rc = zs_error_set("the expert stores (%zu elements) are too large to gather",
                              (size_t)N * XS);
        else
            rc = zs_comm_gather_root(e->comm, mine, (int)XS, all, ZS_CT_F32);
    }
    for (int i = 0; lead && !rc && i < flay->n_entries; i++) {
        const zs_param_entry *ce = &e->lay->entries[i], *fe = &flay->entries[i];
        if (ce->offset < e->xbase) {
            memcpy(full + fe->offset, dense + ce->offset, ce->numel * sizeof(float));
            continue;
        }
        for (int k = 0; k < P; k++)
            for (size_t t = 0; t < ce->numel; t++) {
                size_t j = ce->offset - e->xbase + t; /* in class k's store */
                full[fe->offset + (size_t)k * ce->numel + t] =
                    all[((j / XS) * (size_t)P + (size_t)k) * XS + j % XS];
            }
    }
    free(dense);
    free(mine);
    free(all);
    return rc;
}

/* Tensor parallelism: the parameters in the order of the tp = 1 model.
 * Data-parallel rank 0 of each TP rank gathers its TP shard, TP rank 0 of
 * those gathers them all and puts each element where the tp = 1 layout has
 * it (replicated parameters from TP rank 0). */
int zs_engine_get_full_params(zs_engine *e, float *full)
{
    if (e->xsplit)
        return zs_engine_get_ep1_params(e, full);
    if (!e->tp)
        return zs_engine_get_params(e, full);
    const zs_partition *p = &e->part;
    size_t n = p->num_params;
    int T = e->tp_size, lead = p->rank == 0;
    float *mine = lead ? malloc(n * sizeof(float) + 1) : NULL;
    float *all = lead && e->tp_rank == 0 ? malloc((size_t)T * n * sizeof(float) + 1) : NULL;
    int rc = 0;
    if ((lead && !mine) || (lead && e->tp_rank == 0 && !all))
        rc = zs_error_set("out of host memory gathering the parameters");
    if (!rc)
        rc = zs_engine_get_params(e, mine);
    if (!rc && lead) {
        zs_comm_set_context(e->tp, ZS_PHASE_REPORT, -1);
        if (n > (size_t)INT_MAX)
            rc = zs_error_set("a tensor-parallel shard of %zu parameters is too large to gather", n);
        else
            rc = zs_comm_gather_root(e->tp, mine, (int)n, all, ZS_CT_F32);
    }
    if (!rc && all)
        rc = zs_engine_tp_unshard(e, all, n, full);
    free(mine);
    free(all);
    return rc;
}

/* The hash of a tensor-parallel run, over the tp = 1 order, so that runs of
 * any tensor-parallel size hash comparably; unlike the plain hash, world
 * rank 0 holds the whole model once in host memory. */
static int zs_engine_param_hash_tp(zs_engine *e, char hex[17])
{
    int root = e->part.rank == 0 && e->tp_rank == 0;
    size_t total = zs_model_count_params(&e->cfg.model);
    float *full = root ? malloc(total * sizeof(float) + 1) : NULL;
    if (root && !full)
        return zs_error_set("out of host memory hashing %zu parameters", total);
    int rc = zs_engine_get_full_params(e, full);
    if (!rc && root)
        zs_param_hash(full, total, hex);
    free(full);
    return rc;
}

/* 3D: the hash of the tp = 1 order, as zs_engine_param_hash_tp's. World
 * rank 0 collects every rank's part [lo, hi) of its stage (at the stage's
 * base in its TP rank's layout: every T-th world rank holds the next range
 * of that layout), then puts the TP shards into the tp = 1 order; like the
 * TP hash it holds the whole model once in host memory. */
static int zs_engine_hash_3d(zs_engine *e, size_t lo0, size_t hi0, char hex[17])
{
    int wr = zs_comm_rank(e->world), W = zs_comm_size(e->world), T = e->tp_size;
    size_t n = e->lay->num_params, total = zs_model_count_params(&e->cfg.model);
    float *buf = malloc(ZS_HASH_CHUNK * sizeof(float));
    float *all = wr == 0 ? calloc((size_t)T * n + 1, sizeof(float)) : NULL;
    float *full = wr == 0 ? malloc(total * sizeof(float) + 1) : NULL;
    int rc = 0;
    if (!buf || (wr == 0 && (!all || !full)))
        rc = zs_error_set("out of host memory hashing %zu parameters", total);
    const zs_step_shape *s = e->sh;
    for (int i = 0; i < W * s->nchunks && !rc; i++) {
        int q = i % W, c = i / W; /* each rank's part of chunk c */
        size_t lo = s->clo[c] > lo0 ? s->clo[c] : lo0;
        size_t hi = s->clo[c] + s->cn[c] < hi0 ? s->clo[c] + s->cn[c] : hi0;
        uint64_t part[2] = {s->cglo[c] + (lo - s->clo[c]), hi > lo ? hi - lo : 0}; /* where, how many */
        if (q > 0)
            rc = zs_comm_send_to_root(e->world, q, part, 2, ZS_CT_U64);
        if (!rc && part[0] + part[1] > n)
            rc = zs_error_set("internal: rank %d's parameters [%llu, +%llu) are outside its "
                              "tensor-parallel shard of %zu", q, (unsigned long long)part[0],
                              (unsigned long long)part[1], n);
        for (uint64_t off = 0; off < part[1] && !rc; off += ZS_HASH_CHUNK) {
            size_t k = part[1] - off < ZS_HASH_CHUNK ? (size_t)(part[1] - off) : ZS_HASH_CHUNK;
            if (wr == q)
                rc = zs_engine_master_read(e, lo - lo0 + (size_t)off, k, buf);
            if (!rc)
                rc = zs_comm_send_to_root(e->world, q, buf, (int)k, ZS_CT_F32);
            if (!rc && all)
                memcpy(all + (size_t)(q % T) * n + part[0] + off, buf, k * sizeof(float));
        }
    }
    if (!rc && all)
        rc = zs_engine_tp_unshard(e, all, n, full);
    if (!rc && full)
        zs_param_hash(full, total, hex);
    free(buf);
    free(all);
    free(full);
    return rc;
}

/* The check that the last pipeline stage's copy of the tied embedding is
 * the first stage's, byte for byte, for each TP rank q (its own rows of
 * the vocabulary): world rank 0 compares them. */
static int zs_engine_check_tied(zs_engine *e)
{
    const zs_partition *p = &e->part;
    int wr = zs_comm_rank(e->world), D = p->world, T = e->tp_size;
    size_t tb = e->sh->tied_elems * e->ps;
    char *copy = malloc(tb + 1), *own = malloc(tb + 1);
    int rc = 0;
    if (!copy || !own)
        rc = zs_error_set("out of host memory comparing the tied embedding's copies");
    for (int q = 0; q < T && !rc; q++) {
        int holder = q + T * D * (e->pp_size - 1); /* data-parallel rank 0 of the last stage */
        if (wr == holder)
            zs_backend_copy_d2h(e->be, copy, e->tied, tb);
        rc = zs_comm_send_to_root(e->world, holder, copy, (int)e->sh->tied_elems, e->ct);
        /* the first stage's: data-parallel rank 0 holds it (stage 3: each
         * data-parallel rank its part) */
        for (int d = 0; d < (e->stage == 3 ? D : 1) && !rc; d++) {
            size_t beg = 0, k = e->stage == 3
                                    ? zs_partition_overlap(p, d, 0, e->sh->tied_elems, &beg)
                                    : e->sh->tied_elems;
            int src = q + T * d;
            if (!k || (wr != 0 && wr != src))
                continue;
            if (src == 0)
                zs_backend_copy_d2h(e->be, own, e->params, k * e->ps);
            else if (wr == src) /* stage 3: its shard starts at beg */
                rc = zs_comm_send_to_root(e->world, src, e->params, (int)k, e->ct);
            else
                rc = zs_comm_send_to_root(e->world, src, own + beg * e->ps, (int)k, e->ct);
        }
        if (!rc && wr == 0 && memcmp(own, copy, tb) != 0)
            rc = zs_error_set("internal: the last pipeline stage's copy of the tied token "
                              "embedding differs from the first stage's (tensor-parallel rank "
                              "%d)", q);
    }
    free(copy);
    free(own);
    return rc;
}

/* Pipeline: the hash over the stages' parameters one after the other (the
 * whole model's order), streamed to world rank 0 rank by rank in world
 * order (with tensor parallelism, zs_engine_hash_3d); and the check that
 * the last stage's copy of the tied embedding is the first stage's. */
static int zs_engine_param_hash_pp(zs_engine *e, char hex[17])
{
    const zs_partition *p = &e->part;
    int wr = zs_comm_rank(e->world), W = zs_comm_size(e->world);
    zs_comm_set_context(e->world, ZS_PHASE_REPORT, -1);
    /* this rank's part: its shard (stage 0: data-parallel rank 0 all of it) */
    size_t lo = e->stage == 0 ? 0 : p->shard_begin;
    size_t hi = e->stage == 0 ? (p->rank == 0 ? p->num_params : 0) : lo + p->shard;
    if (hi > p->num_params)
        hi = p->num_params;
    if (e->tp) {
        ZS_TRY(zs_engine_hash_3d(e, lo, hi, hex));
        return zs_engine_check_tied(e);
    }
    float *buf = malloc(ZS_HASH_CHUNK * sizeof(float));
    XXH3_state_t *st = wr == 0 ? XXH3_createState() : NULL;
    int rc = 0;
    if (!buf || (wr == 0 && !st))
        rc = zs_error_set("out of host memory hashing the parameters");
    if (st)
        XXH3_64bits_reset(st);
    const zs_step_shape *s = e->sh;
    for (int i = 0; i < W * s->nchunks && !rc; i++) {
        int q = i % W, c = i / W; /* each rank's part of chunk c, in the model's order */
        size_t a = s->clo[c] > lo ? s->clo[c] : lo;
        size_t b = s->clo[c] + s->cn[c] < hi ? s->clo[c] + s->cn[c] : hi;
        uint64_t cnt = b > a ? b - a : 0;
        if (q > 0)
            rc = zs_comm_send_to_root(e->world, q, &cnt, 1, ZS_CT_U64);
        for (uint64_t off = 0; off < cnt && !rc; off += ZS_HASH_CHUNK) {
            size_t n = cnt - off < ZS_HASH_CHUNK ? (size_t)(cnt - off) : ZS_HASH_CHUNK;
            if (wr == q)
                rc = zs_engine_master_read(e, a - lo + (size_t)off, n, buf);
            if (!rc)
                rc = zs_comm_send_to_root(e->world, q, buf, (int)n, ZS_CT_F32);
            if (!rc && st)
                XXH3_64bits_update(st, buf, n * sizeof(float));
        }
    }
    if (!rc && st)
        snprintf(hex, 17, "%016llx", (unsigned long long)XXH3_64bits_digest(st));
    if (st)
        XXH3_freeState(st);
    free(buf);
    return rc ? rc : zs_engine_check_tied(e);
}

int zs_engine_param_hash(zs_engine *e, char hex[17])
{
    if (e->pp && !e->phantom) {
        zs_comm_set_context(e->comm, ZS_PHASE_REPORT, -1);
        hex[0] = '\0';
        return zs_engine_param_hash_pp(e, hex);
    }
    if (e->tp && !e->phantom) {
        zs_comm_set_context(e->comm, ZS_PHASE_REPORT, -1);
        hex[0] = '\0';
        return zs_engine_param_hash_tp(e, hex);
    }
    if (e->xsplit && !e->phantom) { /* over the --ep 1 order, on rank 0 */
        zs_comm_set_context(e->comm, ZS_PHASE_REPORT, -1);
        hex[0] = '\0';
        size_t total = zs_model_layout(e->fmodel)->num_params;
        float *full = e->part.rank == 0 ? malloc(total * sizeof(float) + 1) : NULL;
        if (e->part.rank == 0 && !full)
            ZS_FAIL("out of host memory hashing %zu parameters", total);
        int rc = zs_engine_get_ep1_params(e, full);
        if (!rc && full)
            zs_param_hash(full, total, hex);
        free(full);
        return rc;
    }
    const zs_partition *p = &e->part;
    zs_comm_set_context(e->comm, ZS_PHASE_REPORT, -1);
    hex[0] = '\0';
    if (e->phantom) /* no parameters to hash; the hash stays empty */
        return 0;
    float *buf = malloc(ZS_HASH_CHUNK * sizeof(float));
    XXH3_state_t *st = p->rank == 0 ? XXH3_createState() : NULL;
    int rc = 0;
    if (!buf || (p->rank == 0 && !st))
        rc = zs_error_set("out of host memory hashing the parameters");
    if (st)
        XXH3_64bits_reset(st);
    /* stage 0: rank 0 holds everything; otherwise rank q holds [qS, qS+S) */
    int owners = e->stage == 0 ? 1 : p->world;
    size_t span = e->stage == 0 ? p->padded : p->shard;
    for (int q = 0; q < owners && !rc; q++) {
        size_t base = (size_t)q * span;
        for (size_t off = 0; off < span && base + off < p->num_params && !rc; off += ZS_HASH_CHUNK) {
            size_t n = span - off < ZS_HASH_CHUNK ? span - off : ZS_HASH_CHUNK;
            if (base + off + n > p->num_params) /* leave the padding out */
                n = p->num_params - base - off;
            if (p->rank == q)
                rc = zs_engine_master_read(e, off, n, buf);
            if (!rc)
                rc = zs_comm_send_to_root(e->comm, q, buf, (int)n, ZS_CT_F32);
            if (!rc && st)
                XXH3_64bits_update(st, buf, n * sizeof(float));
        }
    }
    if (!rc && st)
        snprintf(hex, 17, "%016llx", (unsigned long long)XXH3_64bits_digest(st));
    if (st)
        XXH3_freeState(st);
    free(buf);
    return rc;
}

/* ---- the state between steps ------------------------------------------------ */

static size_t zs_clip(size_t lo, size_t n, size_t base, size_t len, size_t *a, size_t *b);

/* DeepSpeed's layout: the store elements this rank keeps optimizer states
 * of (master, moments): all of its experts in stage 0, else its shard over
 * edp. */
void zs_engine_expert_state_range(const zs_engine *e, size_t *lo, size_t *n)
{
    *lo = e->xsplit && e->stage != 0 ? (size_t)e->xrank * e->sh->xshard : 0;
    *n = !e->xsplit ? 0 : e->stage == 0 ? e->sh->xpadded : e->sh->xshard;
}

void zs_engine_expert_shard(const zs_engine *e, size_t *lo, size_t *n)
{
    *lo = e->xsplit ? (size_t)e->xrank * e->sh->xshard : 0;
    *n = e->xsplit ? e->sh->xshard : 0;
}

void zs_engine_expert_load_range(const zs_engine *e, zs_state_kind k, size_t *lo, size_t *n)
{
    zs_engine_expert_state_range(e, lo, n);
    if (e->xsplit && k == ZS_STATE_MASTER && (e->stage == 1 || e->stage == 2)) {
        *lo = 0; /* the working copy holds all of them */
        *n = e->sh->xpadded;
    }
}

static float *zs_engine_xstate_ptr(zs_engine *e, zs_state_kind k)
{
    return k == ZS_STATE_MASTER ? e->xmaster : k == ZS_STATE_EXP_AVG ? e->xm
         : k == ZS_STATE_EXP_AVG_SQ ? e->xv : NULL;
}

int zs_engine_read_expert_state(zs_engine *e, zs_state_kind k, size_t lo, size_t n, float *host)
{
    size_t base, len;
    zs_engine_expert_state_range(e, &base, &len);
    if (k == ZS_STATE_RESIDUAL || !zs_engine_has_state(e, k) || lo < base || n > len ||
        lo - base > len - n)
        ZS_FAIL("internal: expert state %d elements [%zu, %zu) are not this rank's", (int)k, lo,
                lo + n);
    if (!e->phantom)
        zs_backend_copy_d2h(e->be, host, zs_engine_xstate_ptr(e, k) + (lo - base), n * 4);
    return 0;
}

int zs_engine_write_expert_state(zs_engine *e, zs_state_kind k, size_t lo, size_t n,
                                 const float *host)
{
    if (k == ZS_STATE_RESIDUAL || !zs_engine_has_state(e, k) || !e->xsplit ||
        lo > e->sh->xpadded || n > e->sh->xpadded - lo)
        ZS_FAIL("internal: expert state %d elements [%zu, %zu) are outside the store", (int)k,
                lo, lo + n);
    if (e->phantom)
        return 0;
    if (k != ZS_STATE_MASTER) {
        size_t base, len, a, b;
        zs_engine_expert_state_range(e, &base, &len);
        if (zs_clip(lo, n, base, len, &a, &b))
            zs_backend_copy_h2d(e->be, zs_engine_xstate_ptr(e, k) + (a - base), host + (a - lo),
                                (b - a) * 4);
        return 0;
    }
    /* the master and the working copy, rounded through the init staging
     * buffer a piece at a time */
    const zs_buf_spec *ib = &e->sh->buf[ZS_BUF_INIT];
    void *tmp = NULL;
    if (ib->bytes && zs_mem_alloc(e->mem, ib->cat, ib->bytes, &tmp))
        ZS_FAIL("cannot stage the expert parameters being loaded: %s", zs_error_msg());
    for (size_t off = 0; off < n; off += ZS_INIT_CHUNK) {
        size_t m = n - off < ZS_INIT_CHUNK ? n - off : ZS_INIT_CHUNK;
        zs_engine_put_xmaster(e, lo + off, m, host + off, tmp);
    }
    if (tmp)
        zs_mem_free(e->mem, ib->cat, tmp, ib->bytes);
    return 0;
}

int zs_engine_has_state(const zs_engine *e, zs_state_kind k)
{
    switch (k) {
    case ZS_STATE_MASTER: return 1;
    case ZS_STATE_EXP_AVG: return e->sh->buf[ZS_BUF_M].bytes > 0;
    case ZS_STATE_EXP_AVG_SQ: return e->sh->buf[ZS_BUF_V].bytes > 0;
    case ZS_STATE_RESIDUAL: return e->sh->buf[ZS_BUF_RESIDUAL].bytes > 0;
    default: return 0;
    }
}

void zs_engine_state_range(const zs_engine *e, zs_state_kind k, size_t *lo, size_t *n)
{
    const zs_partition *p = &e->part;
    if (k == ZS_STATE_RESIDUAL || e->stage == 0) {
        *lo = 0;
        *n = p->padded;
    } else {
        *lo = p->shard_begin;
        *n = p->shard;
    }
}

void zs_engine_load_range(const zs_engine *e, zs_state_kind k, size_t *lo, size_t *n)
{
    zs_engine_state_range(e, k, lo, n);
    if (k == ZS_STATE_MASTER && (e->stage == 1 || e->stage == 2)) {
        *lo = 0;
        *n = e->part.padded;
    }
}

/* Where state k's element lo lives (NULL when the run has none). */
static float *zs_engine_state_ptr(zs_engine *e, zs_state_kind k, size_t lo)
{
    size_t base, n;
    zs_engine_state_range(e, k, &base, &n);
    float *a = k == ZS_STATE_MASTER ? e->master : k == ZS_STATE_EXP_AVG ? e->m
             : k == ZS_STATE_EXP_AVG_SQ ? e->v : e->residual;
    return a ? a + (lo - base) : NULL;
}

int zs_engine_read_state(zs_engine *e, zs_state_kind k, size_t lo, size_t n, float *host)
{
    size_t base, len;
    zs_engine_state_range(e, k, &base, &len);
    if (!zs_engine_has_state(e, k) || lo < base || n > len || lo - base > len - n)
        ZS_FAIL("internal: state %d elements [%zu, %zu) are not this rank's", (int)k, lo, lo + n);
    if (e->phantom)
        return 0;
    if (e->off == ZS_OFFLOAD_NVME && k != ZS_STATE_RESIDUAL) /* in the swap file */
        return zs_swap_io(e, 0, (int)k, lo - base, n, host);
    zs_backend_copy_d2h(e->be, host, zs_engine_state_ptr(e, k, lo), n * 4);
    return 0;
}

/* The part of [lo, lo + n) inside [base, base + len): its start, or n when none. */
static size_t zs_clip(size_t lo, size_t n, size_t base, size_t len, size_t *a, size_t *b)
{
    *a = lo > base ? lo : base;
    *b = lo + n < base + len ? lo + n : base + len;
    return *a < *b;
}

int zs_engine_write_state(zs_engine *e, zs_state_kind k, size_t lo, size_t n, const float *host)
{
    const zs_partition *p = &e->part;
    if (!zs_engine_has_state(e, k) || lo > p->padded || n > p->padded - lo)
        ZS_FAIL("internal: state %d elements [%zu, %zu) are outside the layout", (int)k, lo,
                lo + n);
    if (e->phantom)
        return 0;
    size_t base, len, a, b;
    zs_engine_state_range(e, k, &base, &len);
    if (k != ZS_STATE_MASTER || e->sep_master) {
        if (zs_clip(lo, n, base, len, &a, &b)) {
            if (e->off == ZS_OFFLOAD_NVME && k != ZS_STATE_RESIDUAL)
                ZS_TRY(zs_swap_io(e, 1, (int)k, a - base, b - a, (float *)host + (a - lo)));
            else
                zs_backend_copy_h2d(e->be, zs_engine_state_ptr(e, k, a), host + (a - lo),
                                    (b - a) * 4);
        }
    }
    if (k != ZS_STATE_MASTER)
        return 0;
    /* the working copy: everything in stages 0-2, the shard in stage 3 */
    size_t plo = e->stage == 3 ? p->shard_begin : 0, plen = e->stage == 3 ? p->shard : p->padded;
    if (!zs_clip(lo, n, plo, plen, &a, &b))
        return 0;
    if (e->param_nvme) { /* rounded on the host, then into the file */
        zs_backend_convert_from_f32(e->be, e->hparam, e->pt, host + (a - lo), b - a);
        return zs_swap_params(e, 1, a - plo, b - a, e->hparam);
    }
    char *dst = (char *)e->params + (a - plo) * e->ps;
    if (!e->mixed) {
        zs_backend_copy_h2d(e->be, dst, host + (a - lo), (b - a) * 4);
        return 0;
    }
    /* rounded through the init staging buffer, a piece at a time */
    const zs_buf_spec *ib = &e->sh->buf[ZS_BUF_INIT];
    size_t chunk = ib->bytes / 4;
    void *tmp = NULL;
    if (chunk == 0 || zs_mem_alloc(e->mem, ib->cat, ib->bytes, &tmp))
        ZS_FAIL("cannot stage the parameters being loaded: %s", zs_error_msg());
    for (size_t i = a; i < b; i += chunk) {
        size_t m = b - i < chunk ? b - i : chunk;
        zs_backend_copy_h2d(e->be, tmp, host + (i - lo), m * 4);
        zs_backend_convert_from_f32(e->be, dst + (i - a) * e->ps, e->pt, tmp, m);
    }
    zs_mem_free(e->mem, ib->cat, tmp, ib->bytes);
    return 0;
}

void zs_engine_get_counters(const zs_engine *e, zs_engine_counters *c)
{
    c->t = e->t;
    c->loss_scale = e->scaler.scale;
    c->cur_hysteresis = e->scaler.cur_hysteresis;
    c->good_steps = e->scaler.good_steps;
    c->overflows = e->scaler.overflows;
}

void zs_engine_set_counters(zs_engine *e, const zs_engine_counters *c)
{
    e->t = c->t;
    e->scaler.scale = c->loss_scale;
    e->scaler.cur_hysteresis = c->cur_hysteresis;
    e->scaler.good_steps = c->good_steps;
    e->scaler.overflows = c->overflows;
}

int zs_engine_set_full_params(zs_engine *e, const float *full)
{
    const zs_partition *p = &e->part;
    size_t lo, n;
    zs_engine_load_range(e, ZS_STATE_MASTER, &lo, &n);
    size_t total = zs_model_count_params(&e->cfg.model);
    float *buf = malloc(ZS_INIT_CHUNK * sizeof(float));
    if (!buf)
        ZS_FAIL("out of host memory setting the parameters");
    int rc = 0;
    for (size_t off = lo; off < lo + n && !rc; off += ZS_INIT_CHUNK) {
        size_t m = lo + n - off < ZS_INIT_CHUNK ? lo + n - off : ZS_INIT_CHUNK;
        for (size_t j = 0; j < m;) {
            size_t g = off + j;
            if (g >= p->num_params) { /* the padding */
                buf[j++] = 0.0f;
                continue;
            }
            size_t run, at = zs_model_tp_global_offset(e->model, g, &run);
            if (run > m - j)
                run = m - j;
            if (run == 0 || at == SIZE_MAX || at + run > total) {
                rc = zs_error_set("internal: parameter %zu maps outside the model", g);
                break;
            }
            memcpy(buf + j, full + at, run * sizeof(float));
            j += run;
        }
        if (!rc)
            rc = zs_engine_write_state(e, ZS_STATE_MASTER, off, m, buf);
    }
    free(buf);
    return rc;
}

/* ---- dumps: the step's gradient ------------------------------------------------ */

const zs_data *zs_engine_data(const zs_engine *e) { return e->data; }

/* One bf16 or fp16 value (host bits) as a float. */
static float zs_half_to_f32(uint16_t h, zs_dtype t)
{
    if (t == ZS_DTYPE_BF16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    int ex = (h >> 10) & 0x1f, man = h & 0x3ff;
    float v = ex == 0 ? ldexpf((float)man, -24)
            : ex == 31 ? (man ? NAN : INFINITY)
                       : ldexpf((float)(man | 0x400), ex - 25);
    return (h & 0x8000) ? -v : v;
}

int zs_engine_get_full_grads(zs_engine *e, float loss_scale, float *full)
{
    const zs_partition *p = &e->part;
    const zs_run_config *c = &e->cfg;
    /* the reduced shard holds grad x loss scale / post (zs_engine_norm) */
    double post = c->grad_scaling == ZS_GRAD_POSTSCALE ? c->grad_predivide / p->world : 1.0;
    double mul = post / (double)loss_scale;
    int lead = p->rank == 0, root = lead && e->tp_rank == 0;
    size_t n = p->num_params;
    float *shard = malloc(p->shard * sizeof(float) + 1);
    void *raw = malloc(p->shard * e->ps + 1);
    float *mine = lead ? malloc(p->padded * sizeof(float)) : NULL;
    float *all = root && e->tp ? malloc((size_t)e->tp_size * n * sizeof(float) + 1) : NULL;
    int rc = 0;
    if (!shard || !raw || (lead && !mine) || (root && e->tp && !all))
        rc = zs_error_set("out of host memory gathering %zu gradients", p->padded);
    if (!rc) {
        zs_comm_set_context(e->comm, ZS_PHASE_REPORT, -1);
        zs_backend_copy_d2h(e->be, raw, e->gshard, p->shard * e->ps);
        for (size_t i = 0; i < p->shard; i++) {
            float g = e->pt == ZS_DTYPE_F32 ? ((const float *)raw)[i]
                                            : zs_half_to_f32(((const uint16_t *)raw)[i], e->pt);
            shard[i] = (float)((double)g * mul);
        }
        rc = zs_comm_gather_root(e->comm, shard, (int)p->shard, mine, ZS_CT_F32);
    }
    if (!rc && lead && !e->tp)
        memcpy(full, mine, n * sizeof(float));
    if (!rc && lead && e->tp) { /* as zs_engine_get_full_params: into the tp = 1 order */
        zs_comm_set_context(e->tp, ZS_PHASE_REPORT, -1);
        rc = zs_comm_gather_root(e->tp, mine, (int)n, all, ZS_CT_F32);
        if (!rc && root)
            rc = zs_engine_tp_unshard(e, all, n, full);
    }
    free(shard);
    free(raw);
    free(mine);
    free(all);
    return rc;
}

const zs_acts *zs_engine_acts(const zs_engine *e) { return e->acts; }
