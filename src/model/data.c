/* zerosim — synthetic data with a known loss floor (see zerosim/data.h). */
#include "zerosim/data.h"
#include "model_impl.h"
#include "zerosim/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ZS_MARKOV_SUCCESSORS 4     /* successors per state before teleport */
#define ZS_MARKOV_TELEPORT 0.02    /* probability mass spread uniformly */
#define ZS_TEACHER_HIDDEN 64

struct zs_data {
    zs_model_config mc;
    uint64_t seed;
    /* GPT: the chain */
    int v;
    double *cdf;      /* (V,V) cumulative transition probabilities per row */
    double *pi_cdf;   /* (V) cumulative stationary distribution */
    double floor;
    /* MLP: the teacher, input -> tanh hidden -> classes */
    double *w1, *w2;
};

/* Build the transition matrix P (V,V), its stationary distribution and
 * entropy rate. */
static int zs_data_build_chain(zs_data *d)
{
    int V = d->v;
    size_t VV = (size_t)V * (size_t)V;
    double *P = calloc(VV, sizeof(double));
    double *pi = calloc((size_t)V, sizeof(double)), *nx = calloc((size_t)V, sizeof(double));
    d->cdf = calloc(VV, sizeof(double));
    d->pi_cdf = calloc((size_t)V, sizeof(double));
    if (!P || !pi || !nx || !d->cdf || !d->pi_cdf) {
        free(P); free(pi); free(nx);
        ZS_FAIL("out of host memory building the Markov chain for vocab %d", V);
    }
    uint64_t st = zs_rng_mix(d->seed, 0x6d61726b6f76ULL);
    int k = V < ZS_MARKOV_SUCCESSORS ? V : ZS_MARKOV_SUCCESSORS;
    for (int i = 0; i < V; i++) {
        double *row = P + (size_t)i * V, w[ZS_MARKOV_SUCCESSORS], sum = 0.0;
        for (int j = 0; j < k; j++) {
            w[j] = -log(1.0 - zs_rng_uniform(&st)); /* exponential: Dirichlet(1) weights */
            sum += w[j];
        }
        for (int j = 0; j < V; j++)
            row[j] = ZS_MARKOV_TELEPORT / V;
        for (int j = 0; j < k; j++) { /* successors may repeat; weights then add */
            int s = (int)(zs_rng_next(&st) % (uint64_t)V);
            row[s] += (1.0 - ZS_MARKOV_TELEPORT) * w[j] / sum;
        }
    }
    /* stationary distribution by power iteration (the chain is primitive) */
    for (int i = 0; i < V; i++)
        pi[i] = 1.0 / V;
    for (int it = 0; it < 10000; it++) {
        memset(nx, 0, (size_t)V * sizeof(double));
        for (int i = 0; i < V; i++)
            for (int j = 0; j < V; j++)
                nx[j] += pi[i] * P[(size_t)i * V + j];
        double diff = 0.0;
        for (int j = 0; j < V; j++) {
            diff += fabs(nx[j] - pi[j]);
            pi[j] = nx[j];
        }
        if (diff < 1e-15)
            break;
    }
    double H = 0.0, acc = 0.0;
    for (int i = 0; i < V; i++) {
        double h = 0.0, c = 0.0;
        for (int j = 0; j < V; j++) {
            double p = P[(size_t)i * V + j];
            if (p > 0)
                h -= p * log(p);
            c += p;
            d->cdf[(size_t)i * V + j] = c;
        }
        H += pi[i] * h;
        acc += pi[i];
        d->pi_cdf[i] = acc;
    }
    d->floor = H;
    free(P); free(pi); free(nx);
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

void zs_data_destroy(zs_data *d)
{
    if (!d)
        return;
    free(d->cdf);
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
        if (mc->kind == ZS_MODEL_GPT) {
            int T = mc->seq_len, V = d->v;
            int cur = zs_sample_cdf(d->pi_cdf, V, zs_rng_uniform(&st));
            for (int t = 0; t < T; t++) {
                int nxt = zs_sample_cdf(d->cdf + (size_t)cur * V, V, zs_rng_uniform(&st));
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
