/* zerosim — the engine: the step's loss, overflow check and global norm
 * (see engine_impl.h).
 *
 * The norm sums the reduced gradient's squares in a fixed order on every
 * rank: norm blocks in block order; with tensor parallelism the TP ranks'
 * sums in TP rank order; with a pipeline a chain along the world that
 * sums exactly as the whole model on the same data-parallel ranks; with
 * mixture of experts an exact (integer) sum of squares.
 */
#include "zero/engine_impl.h"
#include "zerosim/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The overflow check: fixed-point range, or inf/NaN in the reduced
 * gradients, agreed over every group. */
static int zs_engine_check(zs_engine *e)
{
    const zs_partition *p = &e->part;
    if (e->xsplit)
        ZS_TRY(zs_engine_reduce_experts(e));
    if (e->det && !e->reduce_once) { /* the step schedule converted each part as it came */
        double t0 = zs_clock();
        zs_backend_from_fixed(e->be, e->gshard, e->grad_dtype, e->gacc, p->shard, e->frac_bits);
        if (e->grad_shard_on_host) /* converted into the host's shard */
            zs_comm_record_transfer(e->comm, ZS_OP_D2H, p->shard * e->grad_elsize,
                                    zs_clock() - t0);
    }
    /* overflow: fixed-point range, or inf/NaN in the reduced gradients */
    int flags = (e->fix_overflows > 0) |
                (zs_backend_count_nonfinite(e->be, e->gshard, e->grad_dtype, p->shard) > 0) << 1;
    if (e->xsplit && zs_backend_count_nonfinite(e->be, zs_engine_xgrad_shard(e), e->param_dtype,
                                                e->shape->xshard) > 0)
        flags |= 2;
    ZS_TRY(zs_comm_allreduce_max_int(e->comm, &flags));
    if (e->tp_comm) /* the tensor-parallel shards differ: agree over the group too */
        ZS_TRY(zs_comm_allreduce_max_int(e->tp_comm, &flags));
    if (e->pp_comm) /* and the pipeline stages */
        ZS_TRY(zs_comm_allreduce_max_int(e->pp_comm, &flags));
    e->overflow = flags != 0;
    if (e->overflow && e->param_dtype != ZS_DTYPE_F16) {
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
/* The model whose layout the flat arrays have (e->lay): with expert
 * parallelism in --ep 1's layout the whole model's (fmodel), not the
 * computing model's, whose expert entries hold this rank's experts only. */
static const zs_model *zs_engine_layout_model(const zs_engine *e)
{
    return e->fmodel && !e->xsplit ? e->fmodel : e->model;
}

static double zs_engine_tp_sumsq(zs_engine *e, size_t lo, size_t n)
{
    const zs_partition *p = &e->part;
    if (e->tp_rank == 0)
        return zs_backend_sumsq(e->be, (const char *)e->gshard + lo * e->grad_elsize,
                                e->grad_dtype, n);
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
        if (zs_model_tp_replicated(zs_engine_layout_model(e), pe->offset))
            continue;
        size_t x = pe->offset > a ? pe->offset : a;
        size_t y = pe->offset + pe->numel < b ? pe->offset + pe->numel : b;
        if (x < y)
            s += zs_backend_sumsq(e->be,
                                  (const char *)e->gshard + (x - p->shard_begin) * e->grad_elsize,
                                  e->grad_dtype, y - x);
    }
    return s; /* the padding beyond the parameters is zero */
}

/* s plus the squares of n typed values, in order, in double: the CPU
 * backend's sumsq started from s instead of 0. */
static double zs_sumsq_from(double s, const void *x, zs_dtype t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float f = t == ZS_DTYPE_F32 ? ((const float *)x)[i]
                                    : zs_engine_half_to_f32(((const uint16_t *)x)[i], t);
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
        if (x >= y || zs_model_tp_replicated(zs_engine_layout_model(e), eo))
            continue;
        if (x == (eo > blk_lo ? eo : blk_lo))
            run[2] = 0.0; /* the entry's part of the block starts here */
        run[2] = zs_sumsq_from(run[2], (const char *)e->gshard + (pos + x - g) * e->grad_elsize,
                               e->grad_dtype, y - x);
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
    const zs_step_shape *s = e->shape;
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
                run[1] =
                    zs_sumsq_from(run[1], (const char *)e->gshard + (pos - lo) * e->grad_elsize,
                                  e->grad_dtype, n);
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

/* Add the squares of n gradients (grad_dtype) of device memory x (the
 * expert store's too: --ep keeps the working precision, compat.c). */
static void zs_xsq_add_buf(zs_engine *e, zs_xsq *a, const void *x, size_t n)
{
    enum { PIECE = 1 << 14 };
    float f[PIECE];
    uint16_t h[PIECE];
    for (size_t off = 0; off < n && !e->phantom; off += PIECE) {
        size_t k = n - off < PIECE ? n - off : PIECE;
        if (e->grad_dtype == ZS_DTYPE_F32) {
            zs_backend_copy_d2h(e->be, f, (const float *)x + off, k * 4);
        } else {
            zs_backend_copy_d2h(e->be, h, (const uint16_t *)x + off, k * 2);
            for (size_t j = 0; j < k; j++)
                f[j] = zs_engine_half_to_f32(h[j], e->grad_dtype);
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
        zs_xsq_add_buf(e, &a, zs_engine_xgrad_shard(e), e->shape->xshard);
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

/* Tensor parallelism: the norm blocks of this rank's shard of its TP shard
 * (replicated parameters once, on TP rank 0), summed over the data-parallel
 * ranks in block order as zs_engine_norm_blocks, then over the TP group in
 * its rank order. */
static int zs_engine_norm_tp(zs_engine *e, double *sumsq)
{
    const zs_partition *p = &e->part;
    size_t nblk = p->shard / e->norm_block;
    for (size_t i = 0; i < nblk; i++)
        e->norm_local[i] = zs_engine_tp_sumsq(e, i * e->norm_block, e->norm_block);
    ZS_TRY(zs_comm_allgather_small(e->comm, e->norm_local, e->norm_all, (int)nblk, ZS_CT_F64));
    double sum = 0.0;
    for (size_t i = 0; i < nblk * (size_t)p->world; i++)
        sum += e->norm_all[i];
    double part = sum, parts[64];
    if (e->tp_size > 64)
        ZS_FAIL("tensor-parallel groups of more than 64 ranks are not supported (--tp %d)",
                e->tp_size);
    ZS_TRY(zs_comm_allgather_small(e->tp_comm, &part, parts, 1, ZS_CT_F64));
    *sumsq = 0.0;
    for (int q = 0; q < e->tp_size; q++)
        *sumsq += parts[q];
    return 0;
}

/* Block sums in double, summed in block order everywhere. */
static int zs_engine_norm_blocks(zs_engine *e, double *sumsq)
{
    const zs_partition *p = &e->part;
    size_t nblk = p->shard / e->norm_block;
    for (size_t i = 0; i < nblk; i++)
        e->norm_local[i] = zs_backend_sumsq(
            e->be, (const char *)e->gshard + i * e->norm_block * e->grad_elsize, e->grad_dtype,
            e->norm_block);
    ZS_TRY(zs_comm_allgather_small(e->comm, e->norm_local, e->norm_all, (int)nblk, ZS_CT_F64));
    *sumsq = 0.0;
    for (size_t i = 0; i < nblk * (size_t)p->world; i++)
        *sumsq += e->norm_all[i];
    return 0;
}

/* The global norm and the loss scaler; 1 in *skip when the step is skipped
 * (fp16 overflow). */
static int zs_engine_norm(zs_engine *e, int *skip)
{
    float scale = e->scaler.scale;
    double sumsq = 0.0;
    if (!e->overflow && e->pp_comm)
        ZS_TRY(zs_engine_norm_pp(e, &sumsq));
    else if (!e->overflow && e->tp_comm)
        ZS_TRY(zs_engine_norm_tp(e, &sumsq));
    else if (!e->overflow && e->cfg.model.moe_experts > 0)
        ZS_TRY(zs_engine_norm_exact(e, &sumsq));
    else if (!e->overflow)
        ZS_TRY(zs_engine_norm_blocks(e, &sumsq));
    double norm = e->overflow ? INFINITY : sqrt(sumsq) * e->post_scale / scale;
    return zs_engine_norm_finish(e, norm, e->post_scale, skip);
}

int zs_engine_norm_finish(zs_engine *e, double norm, double mul, int *skip)
{
    float scale = e->scaler.scale;
    zs_step_info *info = e->info;
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
    e->opt_steps++;
    e->grad_mul = (float)(coef * mul / scale);
    return 0;
}

float zs_engine_half_to_f32(uint16_t h, zs_dtype t)
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

/* ---- executors ------------------------------------------------------------- */

/* The loss of the step: micro-batch losses summed in global order. */
int zs_engine_exec_loss_sum(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)o;
    (void)stop;
    int N = e->part.world, GA = e->cfg.grad_accum;
    if (e->zo_local) { /* 0/1 Adam's local step: this rank's own loss */
        double own = 0.0;
        for (int a = 0; a < GA; a++)
            own += e->loss_local[a];
        e->info->loss = (float)(own / GA);
        return 0;
    }
    if (e->pp_laux)
        ZS_TRY(zs_engine_pp_aux_loss(e));
    ZS_TRY(zs_comm_allgather_small(e->comm, e->loss_local, e->loss_all, GA, ZS_CT_F32));
    double loss = 0.0;
    for (int a = 0; a < GA; a++)
        for (int r = 0; r < N; r++)
            loss += e->loss_all[(size_t)r * GA + a];
    e->info->loss = (float)(loss / (GA * N));
    if (e->pp_comm) { /* the last stage computed it */
        float *all = malloc((size_t)e->pp_size * sizeof(float));
        if (!all)
            ZS_FAIL("out of host memory for the pipeline's loss");
        int rc = zs_comm_allgather_small(e->pp_comm, &e->info->loss, all, 1, ZS_CT_F32);
        e->info->loss = all[e->pp_size - 1];
        free(all);
        ZS_TRY(rc);
    }
    return 0;
}

int zs_engine_exec_check(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)o;
    (void)stop;
    return zs_engine_check(e);
}

int zs_engine_exec_norm(zs_engine *e, const zs_step_op *o, int *stop)
{
    (void)o;
    return zs_engine_norm(e, stop);
}
