/* zerosim — synthetic data with a known loss floor (see zerosim/data.h). */
#include "zerosim/data.h"
#include "images.h"
#include "model_impl.h"
#include "zerosim/error.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
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
    /* a token file (zs_data_create_tokens), read with pread window by
     * window (never mapped: a file truncated under a run is an error line,
     * not a SIGBUS) */
    char *tok_path;
    int tok_fd;       /* -1: synthetic data */
    uint64_t ntok;
    int tok_width;    /* bytes per token: 2 (magic 20240520) or 4 (20240801) */
    int tok_bytes;    /* a byte-level file: every token below 256 */
    /* an image set (zs_data_create_images), or NULL */
    zs_images *images;
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
    d->tok_fd = -1;
    d->mc = *mc;
    d->seed = seed;
    if (zs_model_is_decoder(mc)) { /* token models */
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

/* Tokens [first, first + n) of the file into out, checked: every one read
 * (a file that shrank since the start is an error) and below the
 * vocabulary (one that changed). One line naming the file. */
#define ZS_TOKENS_CHUNK 4096
static int zs_data_read_tokens(const zs_data *d, uint64_t first, size_t n, uint32_t *out)
{
    unsigned char raw[4 * (ZS_TOKENS_CHUNK + 1)];
    const uint64_t w = (uint64_t)d->tok_width;
    size_t got = 0;
    while (got < n) {
        uint64_t off = ZS_TOKENS_HEADER_BYTES + w * (first + got);
        ssize_t r = pread(d->tok_fd, raw + w * got, w * (n - got), (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            ZS_FAIL("%s: cannot read at offset %llu: %s", d->tok_path, (unsigned long long)off,
                    strerror(errno));
        if ((uint64_t)r < w)
            ZS_FAIL("%s: the file ends before offset %llu, where its %llu tokens went on when "
                    "the run started: it was truncated or replaced while the run read it",
                    d->tok_path, (unsigned long long)(off + w), (unsigned long long)d->ntok);
        got += (size_t)((uint64_t)r / w); /* part of a token is read again whole */
    }
    uint32_t bound = d->tok_bytes && d->mc.vocab > 256 ? 256 : (uint32_t)d->mc.vocab;
    for (size_t i = 0; i < n; i++) {
        if (w == 2) {
            uint16_t t;
            memcpy(&t, raw + 2 * i, 2);
            out[i] = t;
        } else {
            memcpy(&out[i], raw + 4 * i, 4);
        }
        if (out[i] >= bound)
            ZS_FAIL("%s: token %lu at offset %llu is outside %s of %u", d->tok_path,
                    (unsigned long)out[i], (unsigned long long)(ZS_TOKENS_HEADER_BYTES +
                                                                w * (first + i)),
                    bound < (uint32_t)d->mc.vocab ? "the byte-level file's (header word 3) "
                                                    "vocabulary"
                                                  : "the vocabulary", (unsigned)bound);
    }
    return 0;
}

/* The header's magic and version: the token's width in *width. */
static int zs_data_tokens_kind(const char *path, const int32_t *hdr, int *width)
{
    if (hdr[0] != ZS_TOKENS_MAGIC && hdr[0] != ZS_TOKENS32_MAGIC)
        ZS_FAIL("%s: bad magic %d at offset 0: not a token file in llm.c's format (magic %d, "
                "uint16 tokens, or %d, uint32)", path, (int)hdr[0], ZS_TOKENS_MAGIC,
                ZS_TOKENS32_MAGIC);
    int wide = hdr[0] == ZS_TOKENS32_MAGIC;
    int version = wide ? ZS_TOKENS32_VERSION : ZS_TOKENS_VERSION;
    if (hdr[1] != version)
        ZS_FAIL("%s: version %d at offset 4; zerosim reads magic %d with version %d (%s "
                "tokens)", path, (int)hdr[1], (int)hdr[0], version, wide ? "uint32" : "uint16");
    if (hdr[ZS_TOKENS_WORD_BYTE_LEVEL] != 0 && hdr[ZS_TOKENS_WORD_BYTE_LEVEL] != 1)
        ZS_FAIL("%s: %d at offset %d, where zerosim tokens writes 1 (each token a byte of "
                "text) and llm.c 0", path, (int)hdr[ZS_TOKENS_WORD_BYTE_LEVEL],
                4 * ZS_TOKENS_WORD_BYTE_LEVEL);
    *width = wide ? 4 : 2;
    return 0;
}

/* Open the file and check it whole: header, size, every token < vocab. */
static int zs_data_open_tokens(zs_data *d, const char *path)
{
    if (!(d->tok_path = strdup(path)))
        ZS_FAIL("out of host memory opening %s", path);
    d->tok_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (d->tok_fd < 0)
        ZS_FAIL("%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(d->tok_fd, &st))
        ZS_FAIL("%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        ZS_FAIL("%s: not a plain file", path);
    uint64_t bytes = (uint64_t)st.st_size;
    int32_t hdr[ZS_TOKENS_WORD_BYTE_LEVEL + 1];
    if (bytes < ZS_TOKENS_HEADER_BYTES ||
        pread(d->tok_fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr)
        ZS_FAIL("%s: truncated at offset %llu: llm.c's token files start with a header of %d "
                "bytes", path, (unsigned long long)bytes, ZS_TOKENS_HEADER_BYTES);
    ZS_TRY(zs_data_tokens_kind(path, hdr, &d->tok_width));
    d->tok_bytes = hdr[ZS_TOKENS_WORD_BYTE_LEVEL] == 1;
    if (hdr[2] < 0)
        ZS_FAIL("%s: negative token count %d at offset 8", path, (int)hdr[2]);
    uint64_t n = (uint64_t)(uint32_t)hdr[2], want = ZS_TOKENS_HEADER_BYTES +
                                                   (uint64_t)d->tok_width * n;
    if (bytes < want)
        ZS_FAIL("%s: truncated at offset %llu: the header (offset 8) says %llu tokens, which "
                "end at offset %llu", path, (unsigned long long)bytes, (unsigned long long)n,
                (unsigned long long)want);
    if (bytes > want)
        ZS_FAIL("%s: %llu bytes after the %llu tokens the header (offset 8) counts, from "
                "offset %llu", path, (unsigned long long)(bytes - want), (unsigned long long)n,
                (unsigned long long)want);
    if (n < (uint64_t)d->mc.seq_len + 1)
        ZS_FAIL("%s: %llu tokens, fewer than one sample of --seq %d + 1", path,
                (unsigned long long)n, d->mc.seq_len);
    d->ntok = n;
    uint32_t buf[ZS_TOKENS_CHUNK];
    for (uint64_t i = 0; i < n; i += ZS_TOKENS_CHUNK)
        ZS_TRY(zs_data_read_tokens(d, i, n - i < ZS_TOKENS_CHUNK ? (size_t)(n - i)
                                                                 : ZS_TOKENS_CHUNK, buf));
    return 0;
}

int zs_data_create_tokens(const zs_model_config *mc, uint64_t seed, const char *path,
                          zs_data **out)
{
    *out = NULL;
    if (!zs_model_is_decoder(mc))
        ZS_FAIL("%s: token files feed the GPT; the MLP reads an image set (IDX files)", path);
    zs_data *d = calloc(1, sizeof *d);
    if (!d)
        ZS_FAIL("out of host memory creating the data reader");
    d->tok_fd = -1;
    d->mc = *mc;
    d->seed = seed;
    d->v = mc->vocab;
    d->floor = NAN;
    if (zs_data_open_tokens(d, path)) {
        zs_data_destroy(d);
        return -1;
    }
    *out = d;
    return 0;
}

int zs_data_create_images(const zs_model_config *mc, uint64_t seed, const char *dir,
                          zs_data **out)
{
    *out = NULL;
    zs_data *d = calloc(1, sizeof *d);
    if (!d)
        ZS_FAIL("out of host memory creating the data reader");
    d->tok_fd = -1;
    d->mc = *mc;
    d->seed = seed;
    d->floor = NAN;
    if (zs_images_open(mc, seed, strcmp(dir, "fashion-mnist") ? dir : ZS_FASHION_MNIST_DIR,
                       &d->images)) {
        zs_data_destroy(d);
        return -1;
    }
    *out = d;
    return 0;
}

int zs_data_create_file(const zs_model_config *mc, uint64_t seed, const char *path,
                        zs_data **out)
{
    return mc->kind == ZS_MODEL_MLP ? zs_data_create_images(mc, seed, path, out)
                                    : zs_data_create_tokens(mc, seed, path, out);
}

uint64_t zs_data_split_size(const zs_data *d, zs_data_split split)
{
    return d->images ? zs_images_split_size(d->images, split) : 0;
}

void zs_data_fill_split(const zs_data *d, zs_data_split split, uint64_t first, int b,
                        int32_t *targets, float *x)
{
    if (d->images)
        zs_images_fill(d->images, split, first, b, x, targets);
}

void zs_data_destroy(zs_data *d)
{
    if (!d)
        return;
    zs_images_destroy(d->images);
    if (d->tok_fd >= 0)
        close(d->tok_fd);
    free(d->tok_path);
    free(d->succ);
    free(d->wcdf);
    free(d->pi_cdf);
    free(d->w1);
    free(d->w2);
    free(d);
}

double zs_data_loss_floor(const zs_data *d) { return d->floor; }

int zs_data_tokens_are_bytes(const zs_data *d) { return d->tok_fd >= 0 && d->tok_bytes; }

/* Sample s's window of T + 1 tokens, at a start drawn from (seed, i), read
 * from the file in chunks: tokens[t] = window[t], targets[t] = window[t+1]. */
static int zs_data_fill_window(const zs_data *d, uint64_t *st, int32_t *tokens, int32_t *targets)
{
    int T = d->mc.seq_len;
    uint64_t start = zs_rng_next(st) % (d->ntok - (uint64_t)T);
    uint32_t buf[ZS_TOKENS_CHUNK + 1];
    for (int t0 = 0; t0 < T; t0 += ZS_TOKENS_CHUNK) {
        int n = T - t0 < ZS_TOKENS_CHUNK ? T - t0 : ZS_TOKENS_CHUNK;
        ZS_TRY(zs_data_read_tokens(d, start + (uint64_t)t0, (size_t)n + 1, buf));
        for (int t = 0; t < n; t++) {
            tokens[t0 + t] = (int32_t)buf[t];
            targets[t0 + t] = (int32_t)buf[t + 1];
        }
    }
    return 0;
}

int zs_data_fill(const zs_data *d, uint64_t first, int b, int32_t *tokens, int32_t *targets,
                 float *x)
{
    const zs_model_config *mc = &d->mc;
    if (d->images) { /* an epoch's permutation of the training images */
        zs_images_fill(d->images, ZS_DATA_TRAIN, first, b, x, targets);
        return 0;
    }
    for (int s = 0; s < b; s++) {
        uint64_t st = zs_rng_mix(d->seed ^ 0x5eedda7aULL, first + (uint64_t)s);
        if (d->tok_fd >= 0) { /* a window of T + 1 tokens at a start drawn from (seed, i) */
            int T = mc->seq_len;
            ZS_TRY(zs_data_fill_window(d, &st, tokens + (size_t)s * T, targets + (size_t)s * T));
        } else if (zs_model_is_decoder(mc)) {
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
    return 0;
}
