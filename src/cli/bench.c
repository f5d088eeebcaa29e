/* zerosim bench — measure what the planner's step-time model needs on this
 * machine: the GEMM rate and the optimizer's rate of one rank while every
 * rank computes at once, and the latency (alpha) and bandwidth (beta) of
 * the two collectives the engine uses, through the engine's own comm code.
 *
 * Run it the way training will run: `mpirun -np N zerosim bench --out
 * calib.json`. With more ranks than cores the ranks share cores, and the
 * rates measured here say so; that is the point of measuring them with all
 * ranks busy.
 *
 * Every time is the slowest rank's (a step waits for the slowest), the
 * median of several repetitions, each started after a barrier. A compute
 * repetition repeats its kernel for at least 50 ms, so that ranks sharing
 * a core share it as they do in a long run.
 *
 * Collective model, per call on an S-byte buffer and N ranks:
 *     t(S) = (N-1) alpha + (N-1)/N S / beta
 * fitted by least squares over sizes from 64 KiB to 64 MiB. The fit is on
 * absolute time: the large messages, which take most of a step's
 * communication, decide beta, and the small ones only the intercept. On a
 * CPU the bandwidth drops once buffers leave the cache, so no single beta
 * fits every size; the table printed shows by how much. */
#include "build-config.h"
#include "cli/bench.h"

#include "zerosim/backend.h"
#include "zerosim/comm.h"
#include "zerosim/error.h"
#include "zerosim/file.h"
#include "zerosim/mem.h"
#include "zerosim/predict.h"
#include "zerosim/report.h"
#include "zerosim/steptime.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <fcntl.h>
#include <time.h>

#define ZS_BENCH_REPS 5
#define ZS_BENCH_STREAM 4 /* calls back to back in a sample of the node link */

static const char *const zs_bench_usage =
    "usage: mpirun -np N zerosim bench [--out FILE] [--quick]\n"
    "       zerosim bench [--out FILE] [--quick]      (one rank)\n"
    "\n"
    "Measure this machine for the planner (zerosim plan --calibration FILE):\n"
    "the GEMM rate and the AdamW rate of one rank while all N ranks compute,\n"
    "and alpha (latency) and beta (bandwidth) of the reduce-scatter and the\n"
    "allgather among the N ranks. Prints a table and writes FILE as JSON.\n"
    "\n"
    "  --out FILE   write the calibration (JSON) to FILE\n"
    "  --quick      fewer and smaller samples (a rougher fit, for tests)\n"
    "  --ranks-per-node K  K consecutive ranks make a node (default: the nodes MPI\n"
    "               reports). With more than one node, alpha and beta are also\n"
    "               fitted inside a node (each node's ranks, all nodes at once) and\n"
    "               between nodes (the ranks of one local index, one per node, all\n"
    "               local indices at once), and the node link is fitted as a step\n"
    "               loads it: the world's collectives back to back, in the\n"
    "               planner's model of them. The calibration's intra_* figures are\n"
    "               the first fit, inter_* the link's (inter_link_bandwidth: the\n"
    "               link's bytes/s, inter_bandwidth 1/K of it)\n"
    "               (scripts/cluster.sh run ... zerosim bench on the emulated cluster)\n";

static double zs_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int zs_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The slowest rank's time of each repetition, then the median. */
static int zs_bench_median_max(zs_comm_t comm, double *t, int reps, double *out)
{
    int N = zs_comm_size(comm);
    double *all = malloc((size_t)N * sizeof(double));
    if (!all)
        ZS_FAIL("out of host memory in the benchmark");
    for (int i = 0; i < reps; i++) {
        if (zs_comm_allgather_small(comm, &t[i], all, 1, ZS_CT_F64)) {
            free(all);
            return -1;
        }
        double m = 0;
        for (int q = 0; q < N; q++)
            m = all[q] > m ? all[q] : m;
        t[i] = m;
    }
    free(all);
    qsort(t, (size_t)reps, sizeof *t, zs_cmp_double);
    *out = t[reps / 2];
    return 0;
}

/* A block's four linear layers (qkv, attention projection, MLP up and
 * down): input and output channels in units of C. */
static const int zs_bench_gemm_shape[4][2] = {{1, 3}, {1, 1}, {1, 4}, {4, 1}};

/* The reference batch of the non-GEMM kernels (smaller with --quick). */
static int zs_bench_batch(int quick) { return quick ? 4 : 16; }

/* What one timed call runs: kernel `k` of a zs_bench_ctx. */
enum {
    ZS_BK_GEMM = 0, ZS_BK_ADAMW, ZS_BK_ATTENTION, ZS_BK_GELU, ZS_BK_BLOCK, ZS_BK_HEAD,
    ZS_BK_GRADS, ZS_BK_PASS, ZS_BK_QUANT
};

typedef struct {
    zs_backend_t be;
    int k;
    /* the GEMMs: M tokens, C channels */
    int M, C;
    float *gx, *gw, *gy, *gdx, *gdw;
    /* AdamW and the passes over parameter-sized arrays: n elements */
    size_t n;
    float *p, *m, *v, *g;
    /* the other kernels at B, T, C, NH, V */
    int B, T, KC, NH, V;
    float *x, *y, *att, *pre, *datt, *dpre, *qkv, *dqkv, *w, *bias, *mean, *rstd, *logits,
        *probs, *losses;
    int32_t *targets;
    double spread; /* of the last zs_bench_time: slowest repetition / fastest */
} zs_bench_ctx;

static void zs_bench_call(zs_bench_ctx *c)
{
    zs_backend_t be = c->be;
    const int B = c->B, T = c->T, C = c->KC, NH = c->NH, V = c->V, BT = B * T;
    const size_t btc = (size_t)BT * C;
    switch (c->k) {
    case ZS_BK_GEMM: { /* a block's four linear layers: y = x w^T; dx += dy w; dw += dy^T x */
        const int M = c->M;
        for (int l = 0; l < 4; l++) {
            int ic = zs_bench_gemm_shape[l][0] * c->C, oc = zs_bench_gemm_shape[l][1] * c->C;
            zs_backend_sgemm(be, 0, 1, M, oc, ic, 1.0f, c->gx, ic, c->gw, ic, 0.0f, c->gy, oc);
            zs_backend_sgemm(be, 0, 0, M, ic, oc, 1.0f, c->gy, oc, c->gw, ic, 1.0f, c->gdx, ic);
            zs_backend_sgemm(be, 1, 0, oc, ic, M, 1.0f, c->gy, oc, c->gx, ic, 1.0f, c->gdw, ic);
        }
        break;
    }
    case ZS_BK_ADAMW: { /* the norm's sum of squares, the overflow check, AdamW */
        zs_optim_hparams h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                              .grad_mul = 1.0f, .bias_corr1 = 0.1f, .bias_corr2 = 0.001f};
        volatile double sq = zs_backend_sumsq(be, c->g, ZS_DTYPE_F32, c->n);
        volatile size_t bad = zs_backend_count_nonfinite(be, c->g, ZS_DTYPE_F32, c->n);
        (void)sq;
        (void)bad;
        zs_backend_adamw_step(be, c->p, c->m, c->v, c->g, ZS_DTYPE_F32, NULL, ZS_DTYPE_F32, c->n,
                              &h);
        break;
    }
    case ZS_BK_ATTENTION:
        zs_backend_attention_forward(be, c->y, c->pre, c->att, c->qkv, B, T, C, NH);
        zs_backend_attention_backward(be, c->dqkv, c->dpre, c->datt, c->y, c->qkv, c->att, B, T,
                                      C, NH);
        break;
    case ZS_BK_GELU:
        zs_backend_gelu_forward(be, c->y, c->x, 4 * btc);
        zs_backend_gelu_backward(be, c->x, c->y, c->y, 4 * btc);
        break;
    case ZS_BK_BLOCK: /* as gpt.c runs a block, less GEMMs, GELU, attention */
        zs_backend_layernorm_forward(be, c->y, c->mean, c->rstd, c->x, c->w, c->bias, BT, C);
        zs_backend_add_bias(be, c->qkv, c->bias, BT, 3 * C);
        zs_backend_add_bias(be, c->y, c->bias, BT, C);
        zs_backend_residual_forward(be, c->y, c->x, c->y, btc);
        zs_backend_layernorm_forward(be, c->y, c->mean, c->rstd, c->x, c->w, c->bias, BT, C);
        zs_backend_add_bias(be, c->y, c->bias, BT, 4 * C);
        zs_backend_add_bias(be, c->y, c->bias, BT, C);
        zs_backend_residual_forward(be, c->y, c->x, c->y, btc);
        zs_backend_memset0(be, c->dqkv, btc * 16);
        zs_backend_bias_backward(be, c->bias, c->x, BT, C);
        zs_backend_memset0(be, c->dqkv, btc * 16);
        zs_backend_memset0(be, c->y, btc * 4);
        zs_backend_bias_backward(be, c->bias, c->x, BT, 4 * C);
        zs_backend_layernorm_backward(be, c->y, c->w, c->bias, c->x, c->y, c->w, c->mean,
                                      c->rstd, BT, C);
        zs_backend_memset0(be, c->y, btc * 4);
        zs_backend_bias_backward(be, c->bias, c->x, BT, C);
        zs_backend_memset0(be, c->dqkv, btc * 12);
        zs_backend_memset0(be, c->y, btc * 4);
        zs_backend_bias_backward(be, c->bias, c->x, BT, 3 * C);
        zs_backend_layernorm_backward(be, c->y, c->w, c->bias, c->x, c->y, c->w, c->mean,
                                      c->rstd, BT, C);
        break;
    case ZS_BK_HEAD:
        zs_backend_softmax_xent_forward(be, c->losses, c->probs, c->logits, c->targets, BT, V);
        zs_backend_softmax_xent_backward(be, c->logits, c->probs, c->targets, 1.0f / BT, BT, V);
        break;
    case ZS_BK_GRADS: /* zero a unit's staged gradient, add it into the stored one */
        zs_backend_memset0(be, c->g, c->n * 4);
        zs_backend_accumulate_f32(be, c->m, ZS_DTYPE_F32, c->g, c->n);
        break;
    case ZS_BK_QUANT: /* ZeRO++'s codecs: int8 and 4-bit, each encoded and decoded */
        zs_comm_quant_passes(c->g, c->n, (unsigned char *)c->v, c->m);
        break;
    default: /* ZS_BK_PASS: one each of zero, add and copy */
        zs_backend_memset0(be, c->v, c->n * 4);
        zs_backend_add_typed(be, c->v, c->m, ZS_DTYPE_F32, c->n);
        zs_backend_copy_d2d(be, c->p, c->v, c->n * 4);
        break;
    }
}

/* Seconds per call of kernel k: calls repeated until a repetition lasts
 * min_s (the same count on every rank, so that all ranks are busy
 * together, and long enough that ranks sharing a core share it evenly),
 * ZS_BENCH_REPS repetitions after a barrier each, the slowest rank's
 * time, the median. */
static int zs_bench_time(zs_comm_t comm, zs_bench_ctx *c, int k, double min_s, double *per_call)
{
    c->k = k;
    ZS_TRY(zs_comm_barrier(comm));
    double t0 = zs_now();
    zs_bench_call(c); /* warms up, and sizes the repetition */
    double want = ceil(min_s / fmax(zs_now() - t0, 1e-9));
    int inner = want < 1 ? 1 : want > 1e6 ? 1000000 : (int)want;
    ZS_TRY(zs_comm_allreduce_max_int(comm, &inner));
    double t[ZS_BENCH_REPS];
    for (int r = 0; r < ZS_BENCH_REPS; r++) {
        ZS_TRY(zs_comm_barrier(comm));
        t0 = zs_now();
        for (int i = 0; i < inner; i++)
            zs_bench_call(c);
        t[r] = (zs_now() - t0) / inner;
    }
    ZS_TRY(zs_bench_median_max(comm, t, ZS_BENCH_REPS, per_call));
    c->spread = t[ZS_BENCH_REPS - 1] / t[0]; /* sorted: slowest / fastest */
    return 0;
}

/* Defined inputs: values spread over [-2, 2), as pre-activations are. */
static void zs_bench_fill(zs_backend_t be, float *dst, size_t n)
{
    float buf[4096];
    for (size_t i = 0; i < n;) {
        size_t m = n - i < 4096 ? n - i : 4096;
        for (size_t j = 0; j < m; j++)
            buf[j] = (float)(((i + j) * 2654435761u) % 4000) * 1e-3f - 2.0f;
        zs_backend_copy_h2d(be, dst + i, buf, m * 4);
        i += m;
    }
}

/* Every compute rate the step-time model takes, on one rank while all
 * ranks run the same (see zerosim/steptime.h for the units):
 *  - the GEMMs of a transformer block (its four linear layers: qkv,
 *    attention projection, MLP up and down) at 512 tokens and 512
 *    channels, forward and both backward products, as
 *    zs_linear_forward/backward issue them: FLOP/s;
 *  - the optimizer step's work per element of the shard (the gradient's
 *    sum of squares, its overflow check and AdamW): elements/s;
 *  - the GPT's other kernels, in the sequence a block runs them, at a
 *    reference shape (B 16, T 32, C 512, 8 heads, V 1024): seconds per
 *    unit of each kind of work;
 *  - the passes over parameter-sized arrays, on 4 Mi elements (16 MB, more
 *    than a core's cache, as a model's gradients are): seconds per
 *    element. */
static int zs_bench_compute(zs_comm_t comm, zs_backend_t be, zs_mem_t mem, int quick,
                            double *gemm, double *gemm_spread, double *adamw,
                            double work_s[ZS_WORK_NKINDS])
{
    zs_bench_ctx c = {.be = be, .M = 512, .C = 512, .n = quick ? (size_t)1 << 18 : (size_t)1 << 22,
                      .B = zs_bench_batch(quick), .T = 32, .KC = 512, .NH = 8, .V = 1024};
    const int BT = c.B * c.T;
    const size_t btc = (size_t)BT * c.KC, natt = (size_t)c.B * c.NH * c.T * c.T;
    const size_t gact = (size_t)c.M * 4 * c.C, gwts = (size_t)4 * c.C * c.C;
    /* one arena: the GEMMs' x, y, dx (M x 4C), w, dw (4C x C); p, m, v, g
     * (n each); x, y (BT x 4C each), att, preatt, datt, dpre (B NH T T),
     * qkv, dqkv (BT x 3C), w, bias (4C), mean, rstd (BT), logits, probs
     * (BT x V), losses (BT) */
    size_t nfl = 3 * gact + 2 * gwts + 4 * c.n + 2 * 4 * btc + 4 * natt + 2 * 3 * btc +
                 2 * 4 * (size_t)c.KC + 2 * (size_t)BT + 2 * (size_t)BT * c.V + BT;
    float *arena;
    ZS_TRY(zs_mem_alloc(mem, ZS_MEM_WORKSPACE, nfl * 4, (void **)&arena));
    if (zs_mem_alloc(mem, ZS_MEM_WORKSPACE, (size_t)BT * 4, (void **)&c.targets)) {
        zs_mem_free(mem, ZS_MEM_WORKSPACE, arena, nfl * 4);
        return -1;
    }
    float *q = arena;
    c.gx = q; q += gact;
    c.gy = q; q += gact;
    c.gdx = q; q += gact;
    c.gw = q; q += gwts;
    c.gdw = q; q += gwts;
    c.p = q; q += c.n;
    c.m = q; q += c.n;
    c.v = q; q += c.n;
    c.g = q; q += c.n;
    c.x = q; q += 4 * btc;
    c.y = q; q += 4 * btc;
    c.att = q; q += natt;
    c.pre = q; q += natt;
    c.datt = q; q += natt;
    c.dpre = q; q += natt;
    c.qkv = q; q += 3 * btc;
    c.dqkv = q; q += 3 * btc;
    c.w = q; q += 4 * (size_t)c.KC;
    c.bias = q; q += 4 * (size_t)c.KC;
    c.mean = q; q += BT;
    c.rstd = q; q += BT;
    c.logits = q; q += (size_t)BT * c.V;
    c.probs = q; q += (size_t)BT * c.V;
    c.losses = q;
    zs_bench_fill(be, arena, nfl);
    int32_t tg[256];
    for (int i = 0; i < BT; i += 256) {
        int m = BT - i < 256 ? BT - i : 256;
        for (int j = 0; j < m; j++)
            tg[j] = (int32_t)(((i + j) * 7) % c.V);
        zs_backend_copy_h2d(be, c.targets + i, tg, (size_t)m * 4);
    }
    /* AdamW's second moment must not be negative */
    zs_backend_memset0(be, c.v, c.n * 4);
    double min_s = quick ? 0.002 : 0.05, secs = 0;
    int rc = zs_bench_time(comm, &c, ZS_BK_GEMM, min_s, &secs);
    if (!rc) {
        double flops = 0; /* forward and both backward products */
        for (int l = 0; l < 4; l++)
            flops += 3 * 2.0 * c.M * zs_bench_gemm_shape[l][0] * zs_bench_gemm_shape[l][1] *
                     (double)c.C * c.C;
        *gemm = flops / secs;
        *gemm_spread = c.spread;
    }
    if (!rc)
        rc = zs_bench_time(comm, &c, ZS_BK_ADAMW, min_s, &secs);
    if (!rc)
        *adamw = (double)c.n / secs;
    static const struct { int k; zs_work_kind w; } kinds[] = {
        {ZS_BK_ATTENTION, ZS_WORK_ATTENTION}, {ZS_BK_GELU, ZS_WORK_GELU},
        {ZS_BK_BLOCK, ZS_WORK_BLOCK},         {ZS_BK_HEAD, ZS_WORK_HEAD},
        {ZS_BK_GRADS, ZS_WORK_GRADS},         {ZS_BK_PASS, ZS_WORK_PASS},
        {ZS_BK_QUANT, ZS_WORK_QUANT}};
    double units[ZS_WORK_NKINDS] = {
        [ZS_WORK_ATTENTION] = (double)BT * c.T * c.KC,
        [ZS_WORK_GELU] = 4.0 * (double)btc,
        [ZS_WORK_BLOCK] = (double)btc,
        [ZS_WORK_HEAD] = (double)BT * c.V,
        [ZS_WORK_GRADS] = (double)c.n,
        [ZS_WORK_PASS] = 3.0 * (double)c.n,
        [ZS_WORK_QUANT] = 4.0 * (double)c.n,
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && !rc; i++) {
        rc = zs_bench_time(comm, &c, kinds[i].k, min_s, &secs);
        work_s[kinds[i].w] = secs / units[kinds[i].w];
    }
    zs_mem_free(mem, ZS_MEM_WORKSPACE, c.targets, (size_t)BT * 4);
    zs_mem_free(mem, ZS_MEM_WORKSPACE, arena, nfl * 4);
    return rc;
}

typedef struct {
    double bytes[16], secs[16];
    int n;
    double alpha, beta; /* fitted */
} zs_bench_fit;

/* Least squares: minimise sum (a + b x - t)^2 with x = (N-1)/N S; then
 * alpha = a / (N-1), beta = 1 / b. */
static void zs_bench_fit_ab(zs_bench_fit *f, int N)
{
    double s11 = 0, s12 = 0, s22 = 0, r1 = 0, r2 = 0;
    for (int i = 0; i < f->n; i++) {
        double x = f->bytes[i] * (N - 1) / N, t = f->secs[i];
        s11 += 1;
        s12 += x;
        s22 += x * x;
        r1 += t;
        r2 += x * t;
    }
    double det = s11 * s22 - s12 * s12;
    double a = (r1 * s22 - r2 * s12) / det, b = (s11 * r2 - s12 * r1) / det;
    if (a < 0 || !(b > 0)) {
        /* latency too small to see, or times that fall with size (a loaded
         * machine's noise): fit the bandwidth alone, through the origin */
        a = 0;
        b = r2 / s22;
    }
    f->alpha = N > 1 ? a / (N - 1) : 0;
    f->beta = b > 0 ? 1.0 / b : INFINITY;
}

/* The node link in the planner's model of the world's flat collectives on
 * M nodes of K consecutive ranks (src/predict/steptime.c): the ring
 * reduce-scatter takes (N-1) alpha + (N-1)/N S / L (each node's last rank
 * sends its whole ring volume through the node's link: one flow each way),
 * the allgather, Open MPI's linear one, alpha + K(N-K)/N S / L (the node's
 * K parts to each of the N-K ranks on other nodes). */
typedef struct {
    double alpha, bw; /* fitted: seconds per message round, link bytes/s */
} zs_bench_link_r;

static double zs_bench_link_bytes(int op, double S, int N, int K)
{
    return op == 0 ? S * (N - 1) / N : S * K * (N - K) / N;
}

static double zs_bench_link_rounds(int op, int N) { return op == 0 ? N - 1 : 1; }

/* One fit of alpha and L over both collectives' samples, by least squares
 * in relative error (each sample divided by its own time), so that the
 * small buffers set alpha and the large ones L; L alone (through the
 * origin) where alpha comes out negative. */
static void zs_bench_fit_link(const zs_bench_fit *rs, const zs_bench_fit *ag, int N, int K,
                              zs_bench_link_r *l)
{
    double suu = 0, suv = 0, svv = 0, su = 0, sv = 0;
    for (int op = 0; op < 2; op++) {
        const zs_bench_fit *f = op == 0 ? rs : ag;
        for (int i = 0; i < f->n; i++) {
            double u = zs_bench_link_rounds(op, N) / f->secs[i],
                   v = zs_bench_link_bytes(op, f->bytes[i], N, K) / f->secs[i];
            suu += u * u;
            suv += u * v;
            svv += v * v;
            su += u;
            sv += v;
        }
    }
    double det = suu * svv - suv * suv;
    double a = (su * svv - sv * suv) / det, b = (suu * sv - suv * su) / det;
    if (!(a >= 0) || !(b > 0)) {
        a = 0;
        b = sv / svv;
    }
    l->alpha = a;
    l->bw = b > 0 ? 1.0 / b : INFINITY;
}

/* The engine's reduce-scatter (its ring) and in-place allgather of fp32
 * buffers of each size. Each sample is the median of ZS_BENCH_REPS calls,
 * each after a barrier; or, with stream, ZS_BENCH_STREAM calls back to
 * back after one barrier (as a step issues them: the link never idles
 * between them), their time divided among them. Either way the slowest
 * rank's time. */
static int zs_bench_collectives(zs_comm_t comm, zs_mem_t mem, int quick, int stream,
                                zs_bench_fit *rs, zs_bench_fit *ag)
{
    int N = zs_comm_size(comm);
    size_t lo = (size_t)1 << 14, hi = quick ? (size_t)1 << 20 : (size_t)1 << 24; /* elements */
    size_t maxn = hi + (size_t)N; /* room to pad to N */
    float *buf, *recv, *ring;
    size_t ring_bytes = 2 * (maxn / (size_t)N + 1) * 4;
    ZS_TRY(zs_mem_alloc(mem, ZS_MEM_COMM_BUFFERS, maxn * 4, (void **)&buf));
    ZS_TRY(zs_mem_alloc(mem, ZS_MEM_COMM_BUFFERS, (maxn / (size_t)N + 1) * 4, (void **)&recv));
    ZS_TRY(zs_mem_alloc(mem, ZS_MEM_COMM_BUFFERS, ring_bytes, (void **)&ring));
    zs_comm_set_scratch(comm, ring, ring_bytes);
    int *counts = calloc((size_t)N, sizeof(int)), *displs = calloc((size_t)N, sizeof(int));
    if (!counts || !displs) {
        free(counts);
        free(displs);
        ZS_FAIL("out of host memory in the benchmark");
    }
    rs->n = ag->n = 0;
    int rc = 0;
    for (size_t n = lo; n <= hi && !rc; n *= n < ((size_t)1 << 18) ? 4 : 2) {
        size_t chunk = (n + (size_t)N - 1) / (size_t)N;
        for (int q = 0; q < N; q++) {
            counts[q] = (int)chunk;
            displs[q] = (int)(chunk * (size_t)q);
        }
        double full = (double)(chunk * (size_t)N) * 4;
        for (int op = 0; op < 2 && !rc; op++) {
            double t[ZS_BENCH_REPS], t0 = 0;
            int reps = stream ? 1 : ZS_BENCH_REPS, calls = stream ? ZS_BENCH_STREAM : 1;
            for (int r = -1; r < reps && !rc; r++) { /* r = -1 warms up */
                rc = zs_comm_barrier(comm);
                t0 = zs_now();
                for (int i = 0; i < (r < 0 ? 1 : calls) && !rc; i++)
                    rc = op == 0 ? zs_comm_reduce_scatter(comm, buf, recv, counts, ZS_CT_F32, 0)
                                 : zs_comm_allgatherv_inplace(comm, buf, counts, displs,
                                                              ZS_CT_F32, 0);
                if (r >= 0)
                    t[r] = (zs_now() - t0) / calls;
            }
            zs_bench_fit *f = op == 0 ? rs : ag;
            double med = 0;
            if (!rc)
                rc = zs_bench_median_max(comm, t, reps, &med);
            f->bytes[f->n] = full;
            f->secs[f->n++] = med;
        }
    }
    free(counts);
    free(displs);
    zs_comm_set_scratch(comm, NULL, 0);
    zs_mem_free(mem, ZS_MEM_COMM_BUFFERS, buf, maxn * 4);
    zs_mem_free(mem, ZS_MEM_COMM_BUFFERS, recv, (maxn / (size_t)N + 1) * 4);
    zs_mem_free(mem, ZS_MEM_COMM_BUFFERS, ring, ring_bytes);
    if (rc)
        return rc;
    if (N > 1) {
        zs_bench_fit_ab(rs, N);
        zs_bench_fit_ab(ag, N);
    }
    return 0;
}

/* A number, or null where a fit on a noisy machine gave none (jansson has
 * no infinity or NaN: json_pack would fail and drop the whole fit). */
static json_t *zs_bench_num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *zs_bench_fit_json(const zs_bench_fit *f, int N)
{
    json_t *samples = json_array();
    for (int i = 0; i < f->n; i++) {
        double model = (N - 1) * f->alpha + f->bytes[i] * (N - 1) / N / f->beta;
        json_array_append_new(samples, json_pack("{s:o, s:o, s:o}", "bytes",
                                                 zs_bench_num(f->bytes[i]), "seconds",
                                                 zs_bench_num(f->secs[i]), "model_seconds",
                                                 zs_bench_num(model)));
    }
    return json_pack("{s:o, s:o, s:o}", "latency_s", zs_bench_num(f->alpha), "bandwidth",
                     zs_bench_num(f->beta), "samples", samples);
}

static void zs_bench_print_fit(const char *name, const zs_bench_fit *f, int N)
{
    printf("%s: alpha %.3g s, beta %.3f GB/s\n", name, f->alpha, f->beta / 1e9);
    printf("  %14s %12s %12s %8s\n", "buffer bytes", "measured ms", "model ms", "ratio");
    for (int i = 0; i < f->n; i++) {
        double model = (N - 1) * f->alpha + f->bytes[i] * (N - 1) / N / f->beta;
        printf("  %14.0f %12.4f %12.4f %8.3f\n", f->bytes[i], f->secs[i] * 1e3, model * 1e3,
               model / f->secs[i]);
    }
}

static json_t *zs_bench_link_json(const zs_bench_fit *rs, const zs_bench_fit *ag, int N, int K,
                                  const zs_bench_link_r *l)
{
    json_t *samples = json_array();
    for (int op = 0; op < 2; op++) {
        const zs_bench_fit *f = op == 0 ? rs : ag;
        for (int i = 0; i < f->n; i++) {
            double x = zs_bench_link_bytes(op, f->bytes[i], N, K);
            double model = zs_bench_link_rounds(op, N) * l->alpha + x / l->bw;
            json_array_append_new(
                samples, json_pack("{s:s, s:o, s:o, s:o, s:o}", "collective",
                                   op == 0 ? "reduce_scatter" : "allgather", "bytes",
                                   zs_bench_num(f->bytes[i]), "link_bytes", zs_bench_num(x),
                                   "seconds", zs_bench_num(f->secs[i]), "model_seconds",
                                   zs_bench_num(model)));
        }
    }
    return json_pack("{s:o, s:o, s:i, s:o}", "latency_s", zs_bench_num(l->alpha), "bandwidth",
                     zs_bench_num(l->bw), "calls_back_to_back", ZS_BENCH_STREAM, "samples",
                     samples);
}

static void zs_bench_print_link(const zs_bench_fit *rs, const zs_bench_fit *ag, int N, int K,
                                const zs_bench_link_r *l)
{
    printf("the node link, as a step loads it (the world's collectives, %d back to back): "
           "alpha %.3g s per message round, link %.4g MB/s\n", ZS_BENCH_STREAM, l->alpha,
           l->bw / 1e6);
    printf("  %-14s %14s %12s %12s %12s %8s\n", "collective", "buffer bytes", "link bytes",
           "measured ms", "model ms", "ratio");
    for (int op = 0; op < 2; op++) {
        const zs_bench_fit *f = op == 0 ? rs : ag;
        for (int i = 0; i < f->n; i++) {
            double x = zs_bench_link_bytes(op, f->bytes[i], N, K);
            double model = zs_bench_link_rounds(op, N) * l->alpha + x / l->bw;
            printf("  %-14s %14.0f %12.0f %12.4f %12.4f %8.3f\n",
                   op == 0 ? "reduce-scatter" : "allgather", f->bytes[i], x, f->secs[i] * 1e3,
                   model * 1e3, model / f->secs[i]);
        }
    }
}

/* Offload's links on this machine: a streaming host copy (what the CPU
 * backend's device-host copies are) and file I/O (the nvme tier), each
 * rank at once; and the AdamW rate set against the copy's bytes. Files are
 * written and synced, then read after asking the kernel to drop them from
 * its cache (posix_fadvise DONTNEED), in $TMPDIR or /tmp. */
typedef struct {
    double copy_bw;               /* bytes read + written per second */
    double write_bw, read_bw;     /* file bytes per second */
} zs_bench_offload_r;

static int zs_bench_offload(zs_comm_t comm, int quick, zs_bench_offload_r *o)
{
    size_t n = quick ? (size_t)16 << 20 : (size_t)64 << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        free(a);
        free(b);
        ZS_FAIL("out of host memory measuring copies");
    }
    memset(a, 1, n);
    memset(b, 2, n);
    double t[5];
    for (int r = 0; r < 5; r++) {
        double t0 = zs_now();
        memcpy(r % 2 ? a : b, r % 2 ? b : a, n);
        t[r] = zs_now() - t0;
    }
    double med;
    int rc = zs_bench_median_max(comm, t, 5, &med);
    o->copy_bw = rc ? 0 : 2.0 * (double)n / med;
    const char *dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char stem[4200], path[4224];
    snprintf(stem, sizeof stem, "%s/zerosim-bench.swap", dir);
    /* a new file of an unpredictable name: never one planted there */
    int fd = rc ? -1 : zs_file_create_unique(stem, path, sizeof path, O_RDWR, 0600);
    if (!rc && fd < 0 && errno != EEXIST) /* EEXIST: every name taken, said */
        rc = zs_error_set("cannot create %s.* to measure file I/O: %s (set TMPDIR)", stem,
                          strerror(errno));
    else if (!rc && fd < 0)
        rc = -1;
    double tw[3] = {0}, tr[3] = {0};
    for (int r = 0; r < 3 && !rc; r++) {
        double t0 = zs_now();
        if (pwrite(fd, a, n, 0) != (ssize_t)n || fsync(fd) != 0)
            rc = zs_error_set("cannot write %s: %s", path, strerror(errno));
        tw[r] = zs_now() - t0;
        posix_fadvise(fd, 0, (off_t)n, POSIX_FADV_DONTNEED);
        t0 = zs_now();
        if (!rc && pread(fd, b, n, 0) != (ssize_t)n)
            rc = zs_error_set("cannot read %s: %s", path, strerror(errno));
        tr[r] = zs_now() - t0;
    }
    if (fd >= 0) {
        close(fd);
        unlink(path);
    }
    double mw = 0, mr = 0;
    if (!rc)
        rc = zs_bench_median_max(comm, tw, 3, &mw);
    if (!rc)
        rc = zs_bench_median_max(comm, tr, 3, &mr);
    o->write_bw = rc ? 0 : (double)n / mw;
    o->read_bw = rc ? 0 : (double)n / mr;
    free(a);
    free(b);
    return rc;
}

/* The world as M nodes of K consecutive ranks; 0 when it is not (or one node). */
static int zs_bench_nodes(zs_comm_t comm, int *K, int *M)
{
    int N = zs_comm_size(comm), k = 0;
    for (int q = 0; q < N; q++)
        k += zs_comm_node_of(comm, q) == zs_comm_node_of(comm, 0);
    *K = k;
    *M = N / k;
    if (N % k || *M < 2)
        return 0;
    for (int q = 0; q < N; q++)
        if (zs_comm_node_of(comm, q) != zs_comm_node_of(comm, q - q % k) ||
            (q >= k && zs_comm_node_of(comm, q) == zs_comm_node_of(comm, q - k)))
            return 0;
    return 1;
}

/* Inside the nodes (K ranks each) and between them (M ranks, one per node):
 * every group at once, as training loads the links. A fit of a group of
 * one rank is left empty (n = 0). */
static int zs_bench_levels(zs_comm_t comm, zs_mem_t mem, int quick, int K, int M,
                           zs_bench_fit *in_rs, zs_bench_fit *in_ag, zs_bench_fit *x_rs,
                           zs_bench_fit *x_ag)
{
    int r = zs_comm_rank(comm), rc = 0;
    zs_comm_t node = NULL, cross = NULL;
    rc = zs_comm_split(comm, r / K, r % K, K, r % K, ZS_GROUP_DP, &node);
    if (!rc)
        rc = zs_comm_split(comm, r % K, r / K, M, r / K, ZS_GROUP_DP, &cross);
    if (!rc && K > 1)
        rc = zs_bench_collectives(node, mem, quick, 0, in_rs, in_ag);
    if (!rc)
        rc = zs_comm_barrier(comm);
    if (!rc)
        rc = zs_bench_collectives(cross, mem, quick, 0, x_rs, x_ag);
    zs_comm_free(node);
    zs_comm_free(cross);
    return rc;
}

/* Everything zs_bench_run measures, on each rank. */
typedef struct {
    int N, K, M;              /* ranks, ranks per node, nodes */
    int levels;               /* more than one node: each level measured */
    double gemm, gemm_spread, adamw, work_s[ZS_WORK_NKINDS];
    zs_bench_fit rs, ag;             /* the whole world's collectives */
    zs_bench_fit in_rs, in_ag;       /* inside a node */
    zs_bench_fit x_rs, x_ag;         /* one rank per node */
    zs_bench_fit l_rs, l_ag;         /* every node's ranks at once over the link */
    zs_bench_link_r link;            /* the link's fit from l_rs and l_ag */
    zs_bench_offload_r off;
} zs_bench_results;

/* Every measurement, on every rank at once. */
static int zs_bench_measure(zs_comm_t comm, int quick, int rpn, zs_bench_results *m)
{
    int rank = zs_comm_rank(comm);
    char err[256];
    zs_backend_t be = zs_backend_init("cpu", err, sizeof err);
    if (!be)
        ZS_FAIL("%s", err);
    zs_mem_t mem = zs_mem_create(be, 0, rank);
    if (!mem) {
        zs_backend_release(be);
        ZS_FAIL("out of host memory");
    }
    memset(m, 0, sizeof *m);
    m->N = zs_comm_size(comm);
    m->gemm_spread = 1;
    m->K = m->N;
    m->M = 1;
    int rc = rpn > 0 ? zs_comm_set_ranks_per_node(comm, rpn) : 0;
    m->levels = !rc && zs_bench_nodes(comm, &m->K, &m->M);
    if (!rc)
        rc = zs_bench_compute(comm, be, mem, quick, &m->gemm, &m->gemm_spread, &m->adamw,
                              m->work_s);
    if (!rc)
        rc = zs_bench_collectives(comm, mem, quick, 0, &m->rs, &m->ag);
    if (!rc && m->levels)
        rc = zs_bench_levels(comm, mem, quick, m->K, m->M, &m->in_rs, &m->in_ag, &m->x_rs,
                             &m->x_ag);
    if (!rc && m->levels) {
        rc = zs_bench_collectives(comm, mem, quick, 1, &m->l_rs, &m->l_ag);
        zs_bench_fit_link(&m->l_rs, &m->l_ag, m->N, m->K, &m->link);
    }
    if (!rc)
        rc = zs_bench_offload(comm, quick, &m->off);
    zs_mem_destroy(mem);
    zs_backend_release(be);
    return rc;
}

/* Rank 0's lines: the kernels, offload's links, then the collectives'
 * fits (each level's, with more than one node). */
static void zs_bench_print(const zs_bench_results *m, int quick)
{
    int N = m->N;
    const double *work_s = m->work_s;
    printf("zerosim bench: %d rank%s, every rank busy at once; CPU kernels in %s\n", N,
           N == 1 ? "" : "s", zs_backend_cpu_kernels());
    printf("GEMM (a block's linear layers at 512 tokens, C 512, forward and backward): %.2f "
           "GFLOP/s per rank; its slowest repetition took %.2fx the fastest's time\n",
           m->gemm / 1e9, m->gemm_spread);
    printf("AdamW: %.1f M elements/s per rank\n", m->adamw / 1e6);
    /* AdamW on fp32 reads p, m, v, g and writes p, m, v: 28 bytes */
    printf("offload: host copies %.2f GB/s per rank (bytes read + written); AdamW moves 28 "
           "bytes per element, %.2f GB/s, %.0f%% of the copy's rate; files: write %.2f GB/s "
           "(synced), read %.2f GB/s (after dropping them from the page cache)\n",
           m->off.copy_bw / 1e9, m->adamw * 28.0 / 1e9, 100.0 * m->adamw * 28.0 / m->off.copy_bw,
           m->off.write_bw / 1e9, m->off.read_bw / 1e9);
    printf("other GPT kernels (B %d, T 32, C 512, V 1024), ns per unit: attention %.4g (per "
           "B T^2 C), GELU %.4g (per element), rest of a block %.4g (per B T C), head %.4g "
           "(per B T V), gradients %.4g (per parameter), other passes %.4g (per element), "
           "ZeRO++'s block quantization %.4g (per element encoded or decoded)\n",
           zs_bench_batch(quick), work_s[0] * 1e9, work_s[1] * 1e9, work_s[2] * 1e9,
           work_s[3] * 1e9, work_s[4] * 1e9, work_s[5] * 1e9, work_s[ZS_WORK_QUANT] * 1e9);
    if (N <= 1) {
        printf("collectives: one rank sends nothing (run under mpirun -np N to measure them)\n");
        return;
    }
    zs_bench_print_fit("reduce-scatter", &m->rs, N);
    zs_bench_print_fit("allgather", &m->ag, N);
    if (!m->levels)
        return;
    printf("%d nodes of %d ranks: inside a node (every node at once)\n", m->M, m->K);
    if (m->K > 1) {
        zs_bench_print_fit("reduce-scatter inside a node", &m->in_rs, m->K);
        zs_bench_print_fit("allgather inside a node", &m->in_ag, m->K);
    } else {
        printf("  one rank per node: nothing moves inside a node\n");
    }
    printf("between nodes (one rank per node, every local index at once)\n");
    zs_bench_print_fit("reduce-scatter between nodes", &m->x_rs, m->M);
    zs_bench_print_fit("allgather between nodes", &m->x_ag, m->M);
    zs_bench_print_link(&m->l_rs, &m->l_ag, N, m->K, &m->link);
}

/* The calibration's collective keys with more than one node: each level
 * fitted on its own (a, b: the whole world's latency and bandwidth, what
 * the intra-node figures repeat with one rank per node). */
static void zs_bench_json_levels(json_t *root, const zs_bench_results *m, double a, double b)
{
    int K = m->K, M = m->M, N = m->N;
    double ia = K > 1 ? 0.5 * (m->in_rs.alpha + m->in_ag.alpha) : a;
    double ib = K > 1 ? 2.0 / (1.0 / m->in_rs.beta + 1.0 / m->in_ag.beta) : b;
    json_object_set_new(root, "intra_latency_s", zs_bench_num(ia));
    json_object_set_new(root, "intra_bandwidth", zs_bench_num(ib));
    /* between nodes: the link as a step loads it (the groups of one
     * rank per node, each after its own barrier, drift apart and leave
     * the link to one group at times: their fits are kept as samples,
     * not used); a rank of K sharing the link has 1/K of it */
    json_object_set_new(root, "inter_latency_s", zs_bench_num(m->link.alpha));
    json_object_set_new(root, "inter_bandwidth", zs_bench_num(m->link.bw / K));
    json_object_set_new(root, "inter_link_bandwidth", zs_bench_num(m->link.bw));
    json_object_set_new(root, "link", zs_bench_link_json(&m->l_rs, &m->l_ag, N, K, &m->link));
    json_object_set_new(root, "nodes", json_integer(M));
    json_object_set_new(root, "ranks_per_node", json_integer(K));
    json_object_set_new(root, "note",
                        json_string(K > 1 ? "intra_*: the collectives among each node's "
                                            "ranks; inter_*: the node link's fit (link)"
                                          : "one rank per node: intra_* repeat the whole "
                                            "world's fit; inter_*: among one rank per node"));
    if (K > 1) {
        json_object_set_new(root, "intra_reduce_scatter", zs_bench_fit_json(&m->in_rs, K));
        json_object_set_new(root, "intra_allgather", zs_bench_fit_json(&m->in_ag, K));
    }
    json_object_set_new(root, "inter_reduce_scatter", zs_bench_fit_json(&m->x_rs, M));
    json_object_set_new(root, "inter_allgather", zs_bench_fit_json(&m->x_ag, M));
    json_object_set_new(root, "reduce_scatter", zs_bench_fit_json(&m->rs, N));
    json_object_set_new(root, "allgather", zs_bench_fit_json(&m->ag, N));
}

/* The calibration file's document (zerosim plan --calibration reads it). */
static json_t *zs_bench_json(const zs_bench_results *m)
{
    int N = m->N;
    /* one node: the inter-node figures are the intra-node ones, said so */
    double a = N > 1 ? 0.5 * (m->rs.alpha + m->ag.alpha) : 0;
    double b = N > 1 ? 2.0 / (1.0 / m->rs.beta + 1.0 / m->ag.beta) : 0;
    json_t *root = json_pack("{s:s, s:i, s:f, s:f}", "zerosim_calibration", PACKAGE_VERSION,
                             "world_size", N, "gemm_flops", m->gemm, "optimizer_elems_per_s",
                             m->adamw);
    /* offload: a copy moves each byte once each way (a device-host copy of
     * S bytes takes S / host_bandwidth); the files are read and written
     * equally each step: the harmonic mean of the two rates */
    json_object_set_new(root, "host_bandwidth", zs_bench_num(m->off.copy_bw / 2.0));
    json_object_set_new(root, "nvme_bandwidth",
                        zs_bench_num(2.0 / (1.0 / m->off.write_bw + 1.0 / m->off.read_bw)));
    json_object_set_new(root, "host_optimizer_elems_per_s", zs_bench_num(m->adamw));
    /* how much this machine's speed moved while it was measured */
    json_object_set_new(root, "gemm_spread", json_real(m->gemm_spread));
    json_t *wj = json_object();
    for (int k = 0; k < ZS_WORK_NKINDS; k++)
        json_object_set_new(wj, zs_work_kind_name((zs_work_kind)k), json_real(m->work_s[k]));
    json_object_set_new(root, "work_s", wj);
    /* the ranks are processes on CPUs: their collectives inside a node are
     * copies through shared memory made by the same cores that compute */
    json_object_set_new(root, "intra_copies_use_cores", json_true());
    if (N > 1 && m->levels) {
        zs_bench_json_levels(root, m, a, b);
    } else if (N > 1) {
        json_object_set_new(root, "intra_latency_s", zs_bench_num(a));
        json_object_set_new(root, "intra_bandwidth", zs_bench_num(b));
        json_object_set_new(root, "inter_latency_s", zs_bench_num(a));
        json_object_set_new(root, "inter_bandwidth", zs_bench_num(b));
        json_object_set_new(root, "note", json_string("measured on one machine: the inter-node "
                                                      "figures repeat the intra-node ones"));
        json_object_set_new(root, "reduce_scatter", zs_bench_fit_json(&m->rs, N));
        json_object_set_new(root, "allgather", zs_bench_fit_json(&m->ag, N));
    }
    return root;
}

static int zs_bench_run(zs_comm_t comm, const char *out, int quick, int rpn)
{
    zs_bench_results m;
    int rc = zs_bench_measure(comm, quick, rpn, &m);
    if (rc || zs_comm_rank(comm) != 0)
        return rc;
    zs_bench_print(&m, quick);
    if (!out)
        return 0;
    json_t *root = zs_bench_json(&m);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
    json_decref(root);
    if (!text)
        ZS_FAIL("out of host memory writing %s", out);
    rc = zs_report_write_text(out, text, strlen(text));
    free(text);
    if (!rc)
        printf("calibration written to %s\n", out);
    return rc;
}

int zs_cmd_bench(int argc, char **argv)
{
    static const struct option opts[] = {
        {"out", required_argument, NULL, 'o'},
        {"quick", no_argument, NULL, 'q'},
        {"ranks-per-node", required_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    zs_comm_t comm;
    if (zs_comm_init(NULL, NULL, &comm)) {
        fprintf(stderr, "zerosim: %s\n", zs_error_msg());
        return 1;
    }
    int rank = zs_comm_rank(comm);
    const char *out = NULL;
    int quick = 0, ch, rc = 0, rpn = 0;
    optind = 1;
    opterr = 0;
    while (rc == 0 && (ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (ch == 'o')
            out = optarg;
        else if (ch == 'q')
            quick = 1;
        else if (ch == 'k') {
            char *end;
            long k = strtol(optarg, &end, 10);
            if (end == optarg || *end || k < 1 || k > zs_comm_size(comm) ||
                zs_comm_size(comm) % k) {
                if (rank == 0)
                    fprintf(stderr, "zerosim: bench: --ranks-per-node must divide the %d ranks, "
                            "got \"%s\"\n", zs_comm_size(comm), optarg);
                rc = 2;
            }
            rpn = (int)k;
        }
        else if (ch == 'h') {
            if (rank == 0)
                fputs(zs_bench_usage, stdout);
            rc = -1;
        } else {
            if (rank == 0)
                fprintf(stderr, "zerosim: bench: unknown option or missing value: %s (see "
                        "zerosim bench --help)\n", argv[optind - 1]);
            rc = 2;
        }
    }
    if (rc == 0 && optind < argc) {
        if (rank == 0)
            fprintf(stderr, "zerosim: bench: unexpected argument \"%s\"\n", argv[optind]);
        rc = 2;
    }
    if (rc == 0) {
        rc = zs_bench_run(comm, out, quick, rpn);
        int any = 0;
        if (zs_comm_agree(comm, rc != 0, 60.0, &any))
            zs_comm_abort(comm, 1);
        if (rc)
            fprintf(stderr, "zerosim: bench: %s\n", zs_error_msg());
        rc = any ? 1 : 0;
    }
    zs_comm_finalize(comm);
    return rc < 0 ? 0 : rc;
}
