/* zerosim — the portable backend's natural logarithm (included by ref.c and
 * by tests/check_ref.c, which measures its error against long double).
 *
 * libm's logf differs between C libraries (and their versions); this one is
 * written with IEEE operations only, so every machine gets the same bytes:
 *
 *   x = 2^e m with m in [sqrt(1/2), sqrt(2)) (taken from the bits; a
 *   subnormal x is first scaled by 2^32), then in double
 *   log m = 2 atanh(s) = 2 (s + s^3/3 + ... + s^15/15), s = (m - 1)/(m + 1),
 *   |s| <= 0.1716 (the next term is below 5e-13 relative),
 *   log x = e ln 2 + log m, rounded once to float.
 *
 * Special values: log(+0) = log(-0) = -inf, log(inf) = inf, log(x < 0) and
 * log(NaN) = NaN. Measured against logl (tests/check_ref: every 251st
 * float from the smallest subnormal to the largest finite, and 2^21
 * arguments around 1): at most 0.500 ulp; the test allows 1. Used where the
 * loss needs a logarithm (softmax_xent_forward, xent_vocab_finish); once
 * per row, so its cost does not matter.
 */
#ifndef ZEROSIM_REF_MATH_H
#define ZEROSIM_REF_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float zs_ref_logf(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (x != x || (u >> 31) != 0) /* NaN or negative (also -0) */
        return (u & 0x7fffffffu) == 0 ? -INFINITY : NAN;
    if (u == 0)
        return -INFINITY;
    if (u == 0x7f800000u)
        return INFINITY;
    int e = 0;
    if ((u >> 23) == 0) { /* subnormal: scale by 2^32 (exact) */
        x *= 4294967296.0f;
        memcpy(&u, &x, sizeof u);
        e = -32;
    }
    e += (int)(u >> 23) - 127;
    uint32_t mbits = (u & 0x7fffffu) | 0x3f800000u; /* m in [1, 2) */
    float mf;
    memcpy(&mf, &mbits, sizeof mf);
    double m = mf;
    if (m > 1.4142135623730951) { /* into [sqrt(1/2), sqrt(2)) */
        m *= 0.5;
        e += 1;
    }
    double s = (m - 1.0) / (m + 1.0), s2 = s * s;
    double p = 1.0 / 15;
    p = p * s2 + 1.0 / 13;
    p = p * s2 + 1.0 / 11;
    p = p * s2 + 1.0 / 9;
    p = p * s2 + 1.0 / 7;
    p = p * s2 + 1.0 / 5;
    p = p * s2 + 1.0 / 3;
    double logm = 2.0 * s + 2.0 * s * s2 * p;
    /* ln 2 = hi + lo with hi's 32 low bits zero, so e * hi is exact */
    const double ln2_hi = 0.693147180369123816490, ln2_lo = 1.90821492927058770002e-10;
    double r = (double)e * ln2_hi + ((double)e * ln2_lo + logm);
    return (float)r;
}

#endif
