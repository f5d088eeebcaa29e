/* zerosim — deterministic random numbers: a splitmix64 stream and the
 * helpers the models' initialisation and the synthetic data draw from
 * (see model_impl.h). */
#include "model_impl.h"

#include <math.h>

uint64_t zs_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double zs_rng_uniform(uint64_t *state)
{
    return (double)(zs_rng_next(state) >> 11) * 0x1.0p-53;
}

double zs_rng_normal(uint64_t *state)
{
    double u1 = zs_rng_uniform(state), u2 = zs_rng_uniform(state);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t zs_rng_mix(uint64_t a, uint64_t b)
{
    uint64_t s = a ^ (b * 0xd6e8feb86659fd93ULL);
    zs_rng_next(&s);
    return zs_rng_next(&s) ^ b;
}
