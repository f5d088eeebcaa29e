/* zerosim — synthetic data with a known loss floor (see zerosim/data.h). */
#include "zerosim/data.h"
#include "model_impl.h"
#include "zerosim/error.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ZS_MARKOV_SUCCESSORS 4     /* successors per state before teleport */
#define ZS_MARKOV_TELEPORT 0.02    /* probability mass spread uniformly */
#define ZS_TEACHER_HIDDEN 64

struct zs_data {
    zs_model_config mc;
    uint64_t seed;
    /* GPT: the chain, stored sparsely. Row i moves to succ[i][j] with weight
     * (1-teleport)*w[i][j] (successors may repeat; weights then add), and to
     * every token with probability teleport/V. O(V * successors) storage, so
     * any vocabulary fits. */
    int v;
    int k;            /* successors per row */
    int32_t *succ;    /* (V,k) */
    double *wcdf;     /* (V,k) cumulative successor weights, last = 1 */
    double *pi_cdf;   /* (V) cumulative stationary distribution */
    double floor;
    /* MLP: the teacher, input -> tanh hidden -> classes */
    double *w1, *w2;
    /* a token file (zs_data_create_tokens): its mapping and its tokens */
    void *map;
    size_t map_bytes;
    const uint16_t *tok;
    uint64_t ntok;
};

/* Build the chain, its stationary distribution (power iteration on the
 * sparse form) and its entropy rate. */
static int zs_data_build_chain(zs_data *d)
{
    int V = d->v, k = V < ZS_MARKOV_SUCCESSORS ? V : ZS_MARKOV_SUCCESSORS;
    d->k = k;
    d->succ = calloc((size_t)V * k, sizeof(int32_t));
    d->wcdf = calloc((size_t)V * k, sizeof(double));
    d->pi_cdf = calloc((size_t)V, sizeof(double));
    double *pi = calloc((size_t)V, sizeof(double)), *nx = calloc((size_t)V, sizeof(double));
    if (!d->succ || !d->wcdf || !d->pi_cdf || !pi || !nx) {
        free(pi);
        free(nx);
        ZS_FAIL("out of host memory building the Markov chain for vocab %d", V);
    }
    uint64_t st = zs_rng_mix(d->seed, 0x6d61726b6f76ULL);
    const double tele = ZS_MARKOV_TELEPORT;
    for (int i = 0; i < V; i++) {
        double w[ZS_MARKOV_SUCCESSORS], sum = 0.0, c = 0.0;
        for (int j = 0; j < k; j++) {
            w[j] = -log(1.0 - zs_rng_uniform(&st)); /* exponential: Dirichlet(1) weights */
            sum += w[j];
        }
        for (int j = 0; j < k; j++) {
            d->succ[(size_t)i * k + j] = (int32_t)(zs_rng_next(&st) % (uint64_t)V);
            c += w[j] / sum;
            d->wcdf[(size_t)i * k + j] = j == k - 1 ? 1.0 : c;
        }
    }
    /* pi' = teleport/V + (1-teleport) * sum_i pi_i * successor weights */
    for (int i = 0; i < V; i++)
        pi[i] = 1.0 / V;
    for (int it = 0; it < 100000; it++) {
        for (int j = 0; j < V; j++)
            nx[j] = tele / V;
        for (int i = 0; i < V; i++)
            for (int j = 0; j < k; j++) {
                const double *cw = d->wcdf + (size_t)i * k;
                double wj = cw[j] - (j ? cw[j - 1] : 0.0);
                nx[d->succ[(size_t)i * k + j]] += (1.0 - tele) * pi[i] * wj;
            }
        double diff = 0.0;
        for (int j = 0; j < V; j++) {
            diff += fabs(nx[j] - pi[j]);
            pi[j] = nx[j];
        }
        if (diff < 1e-15)
            break;
    }
    /* H(row i) = -sum_j p_ij log p_ij: successors (duplicates merged) carry
     * teleport/V + their weight, the other tokens teleport/V each. */
    double H = 0.0, acc = 0.0;
    for (int i = 0; i < V; i++) {
        double p[ZS_MARKOV_SUCCESSORS];
        int32_t id[ZS_MARKOV_SUCCESSORS];
        int n = 0;
        for (int j = 0; j < k; j++) {
            const double *cw = d->wcdf + (size_t)i * k;
            double wj = (1.0 - tele) * (cw[j] - (j ? cw[j - 1] : 0.0));
            int32_t t = d->succ[(size_t)i * k + j], m;
            for (m = 0; m < n && id[m] != t; m++)
                ;
            if (m == n) {
                id[n] = t;
                p[n++] = tele / V;
            }
            p[m] += wj;
        }
        double h = 0.0, base = tele / V;
        for (int m = 0; m < n; m++)
            h -= p[m] * log(p[m]);
        h -= (double)(V - n) * base * log(base);
        H += pi[i] * h;
        acc += pi[i];
        d->pi_cdf[i] = acc;
    }
    d->floor = H;
    free(pi);
    free(nx);
    return 0;
}

static int zs_sample_cdf(const double *cdf, int n, double u)
{
    int lo = 0, hi = n - 1; /* first index with cdf > u */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (cdf[mid] > u)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* The token after cur: teleport to a uniform token, else a successor. */
static int zs_data_next(const zs_data *d, int cur, uint64_t *st)
{
    double u = zs_rng_uniform(st);
    if (u < ZS_MARKOV_TELEPORT)
        return (int)(zs_rng_next(st) % (uint64_t)d->v);
    double w = (u - ZS_MARKOV_TELEPORT) / (1.0 - ZS_MARKOV_TELEPORT);
    int j = zs_sample_cdf(d->wcdf + (size_t)cur * d->k, d->k, w);
    return d->succ[(size_t)cur * d->k + j];
}

int zs_data_create(const zs_model_config *mc, uint64_t seed, zs_data **out)
{
    *out = NULL;
    zs_data *d = calloc(1, sizeof *d);
    if (!d)
        ZS_FAIL("out of host memory creating the data generator");
    d->mc = *mc;
    d->seed = seed;
    if (mc->kind == ZS_MODEL_GPT) {
        d->v = mc->vocab;
        if (zs_data_build_chain(d)) {
            zs_data_destroy(d);
            return -1;
        }
    } else {
        size_t D = (size_t)mc->input_dim, H = ZS_TEACHER_HIDDEN, K = (size_t)mc->n_classes;
        d->w1 = malloc(D * H * sizeof(double));
        d->w2 = malloc(H * K * sizeof(double));
        if (!d->w1 || !d->w2) {
            zs_data_destroy(d);
            ZS_FAIL("out of host memory creating the teacher network");
        }
        uint64_t st = zs_rng_mix(seed, 0x7465616368ULL);
        for (size_t i = 0; i < D * H; i++)
            d->w1[i] = zs_rng_normal(&st) / sqrt((double)D);
        for (size_t i = 0; i < H * K; i++)
            d->w2[i] = zs_rng_normal(&st) / sqrt((double)H);
        d->floor = 0.0;
    }
    *out = d;
    return 0;
}

#define ZS_TOKENS_MAGIC 20240520
#define ZS_TOKENS_HEADER 1024 /* 256 int32 */

/* Map the file and check it whole: header, size, every token < vocab. */
static int zs_data_map_tokens(zs_data *d, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        ZS_FAIL("%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st)) {
        close(fd);
        ZS_FAIL("%s: %s", path, strerror(errno));
    }
    size_t bytes = (size_t)st.st_size;
    if (bytes < ZS_TOKENS_HEADER) {
        close(fd);
        ZS_FAIL("%s: truncated at offset %zu: llm.c's token files start with a header of %d "
                "bytes", path, bytes, ZS_TOKENS_HEADER);
    }
    void *map = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        ZS_FAIL("%s: cannot map %zu bytes: %s", path, bytes, strerror(errno));
    d->map = map;
    d->map_bytes = bytes;
    int32_t hdr[3];
    memcpy(hdr, map, sizeof hdr);
    if (hdr[0] != ZS_TOKENS_MAGIC)
        ZS_FAIL("%s: bad magic %d at offset 0: not a token file in llm.c's format (magic %d)",
                path, (int)hdr[0], ZS_TOKENS_MAGIC);
    if (hdr[1] != 1)
        ZS_FAIL("%s: version %d at offset 4; zerosim reads version 1 (uint16 tokens)", path,
                (int)hdr[1]);
    if (hdr[2] < 0)
        ZS_FAIL("%s: negative token count %d at offset 8", path, (int)hdr[2]);
    uint64_t n = (uint64_t)(uint32_t)hdr[2], want = ZS_TOKENS_HEADER + 2 * n;
    if (bytes < want)
        ZS_FAIL("%s: truncated at offset %zu: the header (offset 8) says %llu tokens, which "
                "end at offset %llu", path, bytes, (unsigned long long)n,
                (unsigned long long)want);
    if (bytes > want)
        ZS_FAIL("%s: %zu bytes after the %llu tokens the header (offset 8) counts, from "
                "offset %llu", path, bytes - (size_t)want, (unsigned long long)n,
                (unsigned long long)want);
    if (n < (uint64_t)d->mc.seq_len + 1)
        ZS_FAIL("%s: %llu tokens, fewer than one sample of --seq %d + 1", path,
                (unsigned long long)n, d->mc.seq_len);
    d->tok = (const uint16_t *)((const char *)map + ZS_TOKENS_HEADER);
    d->ntok = n;
    for (uint64_t i = 0; i < n; i++)
        if (d->tok[i] >= d->mc.vocab)
            ZS_FAIL("%s: token %u at offset %llu is outside the vocabulary of %d", path,
                    (unsigned)d->tok[i], (unsigned long long)(ZS_TOKENS_HEADER + 2 * i),
                    d->mc.vocab);
    return 0;
}

int zs_data_create_tokens(const zs_model_config *mc, uint64_t seed, const char *path,
                          zs_data **out)
{
    *out = NULL;
    if (mc->kind != ZS_MODEL_GPT)
        ZS_FAIL("%s: token files feed the GPT; the MLP trains on its synthetic data", path);
    zs_data *d = calloc(1, sizeof *d);
    if (!d)
        ZS_FAIL("out of host memory creating the data reader");
    d->mc = *mc;
    d->seed = seed;
    d->v = mc->vocab;
    d->floor = NAN;
    if (zs_data_map_tokens(d, path)) {
        zs_data_destroy(d);
        return -1;
    }
    *out = d;
    return 0;
}

void zs_data_destroy(zs_data *d)
{
    if (!d)
        return;
    if (d->map)
        munmap(d->map, d->map_bytes);
    free(d->succ);
    free(d->wcdf);
    free(d->pi_cdf);
    free(d->w1);
    free(d->w2);
    free(d);
}

double zs_data_loss_floor(const zs_data *d) { return d->floor; }

void zs_data_fill(const zs_data *d, uint64_t first, int b, int32_t *tokens, int32_t *targets,
                  float *x)
{
    const zs_model_config *mc = &d->mc;
    for (int s = 0; s < b; s++) {
        uint64_t st = zs_rng_mix(d->seed ^ 0x5eedda7aULL, first + (uint64_t)s);
        if (d->tok) { /* a window of T + 1 tokens at a start drawn from (seed, i) */
            int T = mc->seq_len;
            uint64_t start = zs_rng_next(&st) % (d->ntok - (uint64_t)T);
            for (int t = 0; t < T; t++) {
                tokens[(size_t)s * T + t] = d->tok[start + (uint64_t)t];
                targets[(size_t)s * T + t] = d->tok[start + (uint64_t)t + 1];
            }
        } else if (mc->kind == ZS_MODEL_GPT) {
            int T = mc->seq_len, V = d->v;
            int cur = zs_sample_cdf(d->pi_cdf, V, zs_rng_uniform(&st));
            for (int t = 0; t < T; t++) {
                int nxt = zs_data_next(d, cur, &st);
                tokens[(size_t)s * T + t] = cur;
                targets[(size_t)s * T + t] = nxt;
                cur = nxt;
            }
        } else {
            int D = mc->input_dim, K = mc->n_classes;
            float *xs = x + (size_t)s * D;
            for (int i = 0; i < D; i++)
                xs[i] = (float)zs_rng_normal(&st);
            double hid[ZS_TEACHER_HIDDEN];
            for (int h = 0; h < ZS_TEACHER_HIDDEN; h++) {
                double z = 0.0;
                for (int i = 0; i < D; i++)
                    z += (double)xs[i] * d->w1[(size_t)i * ZS_TEACHER_HIDDEN + h];
                hid[h] = tanh(z);
            }
            int best = 0;
            double bestv = -INFINITY;
            for (int k = 0; k < K; k++) {
                double o = 0.0;
                for (int h = 0; h < ZS_TEACHER_HIDDEN; h++)
                    o += hid[h] * d->w2[(size_t)h * K + k];
                if (o > bestv) {
                    bestv = o;
                    best = k;
                }
            }
            targets[s] = best;
        }
    }
}
