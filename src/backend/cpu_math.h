/* zerosim — exp and tanh of the CPU backend (included by cpu.c, and by
 * tests/check_kernels.c, which measures their error).
 */
#ifndef ZEROSIM_CPU_MATH_H
#define ZEROSIM_CPU_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* exp and tanh that the compiler vectorises
 *
 * libm's expf and tanhf are calls the compiler cannot vectorise; these are
 * branch-free (selects, not jumps), so a loop over them becomes SIMD code
 * with the baseline instruction set, and they give the same bytes on every
 * x86-64 machine (no FMA: the build sets -ffp-contract=off).
 *
 * zs_cpu_expf: e^x = 2^n e^r with n = round(x / ln 2) (the 1.5 * 2^23 trick,
 * which rounds to nearest without a call) and r = x - n ln 2 (ln 2 in two
 * parts, Cody and Waite); e^r by a degree-7 polynomial on [-ln2/2, ln2/2];
 * 2^n built in the exponent bits. Below -87.33 (where e^x leaves the normal
 * floats) it returns 0, above 88.72 infinity. tests/check_kernels measures
 * the largest error against double precision (README: "Kernels").
 */

static inline __attribute__((always_inline)) float zs_cpu_expf(float x)
{
    const float hi = 88.7228317f, lo = -87.3365479f;
    float xc = x > hi ? hi : (x < lo ? lo : x);
    const float shifter = 12582912.0f; /* 1.5 * 2^23 */
    float t = xc * 1.44269504f + shifter;
    float n = t - shifter;
    float r = xc - n * 0.693359375f; /* ln 2, high part: 355/512, n * it exact */
    r = r - n * -2.12194440e-4f;     /* ln 2, low part */
    /* e^r, Taylor coefficients 1/k! */
    float p = 1.98412698e-4f;
    p = p * r + 1.38888889e-3f;
    p = p * r + 8.33333333e-3f;
    p = p * r + 4.16666667e-2f;
    p = p * r + 1.66666667e-1f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* 2^n as 2^(n-1) * 2 when n > 0, so that n = 128 (x near 88.7, where
     * p < 1 brings the result back below the largest float) does not
     * overflow the exponent bits; both products are exact scalings */
    int32_t ni = (int32_t)n;
    int32_t bits = (ni > 0 ? ni - 1 + 127 : ni + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    float y = p * two_n * (ni > 0 ? 2.0f : 1.0f);
    y = x < lo ? 0.0f : y;
    y = x > hi ? INFINITY : y;
    return y;
}

/* tanh(u): for |u| < 0.55 an odd polynomial (Taylor, to u^15), beyond it
 * 1 - 2 / (e^(2|u|) + 1); the sign restored last. Branch-free. */
static inline __attribute__((always_inline)) float zs_cpu_tanhf(float u)
{
    float a = u < 0.0f ? -u : u;
    float a2 = a * a;
    /* tanh a = a - a^3/3 + 2a^5/15 - 17a^7/315 + 62a^9/2835 - 1382a^11/155925
     *          + 21844a^13/6081075 - 929569a^15/638512875 - ... */
    float p = -1.45583438e-3f;
    p = p * a2 + 3.59212803e-3f;
    p = p * a2 + -8.86323552e-3f;
    p = p * a2 + 2.18694885e-2f;
    p = p * a2 + -5.39682540e-2f;
    p = p * a2 + 1.33333333e-1f;
    p = p * a2 + -3.33333333e-1f;
    float small = a + a * a2 * p;
    float e = zs_cpu_expf(2.0f * (a > 44.0f ? 44.0f : a)); /* e^88 < FLT_MAX */
    float large = 1.0f - 2.0f / (e + 1.0f);
    float y = a < 0.55f ? small : large;
    return u < 0.0f ? -y : y;
}

#endif
