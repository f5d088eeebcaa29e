/* zerosim — the rotary position embedding's table (host arithmetic, shared
 * by every backend: the kernels read the table, none computes an angle).
 *
 * Frequencies, angles, cos and sin are computed in double and each entry is
 * rounded once to float. Hugging Face computes inv_freq and the angles in
 * float32, whose angle error grows with the position (an ulp of a float
 * angle near position 8192 is about 5e-4 rad); in double the error of an
 * angle below 2^20 rad is under 1e-10 rad, so each float entry is the
 * correctly rounded cos or sin unless the exact value lies within about
 * 1e-10 of a float rounding boundary, and the table does not depend on the
 * backend or on a float libm (docs/numerics.md, "Llama kernels").
 */
#include "backend/backend_impl.h"

#include <math.h>

#include "zerosim/error.h"

/* Frequency i of a head of hd (i < hd/2), Llama 3.1's scaling applied when
 * asked: wavelengths below original_max_position / high_freq_factor keep
 * their frequency, those above original_max_position / low_freq_factor are
 * divided by factor, and between the two the frequency moves linearly in
 * original_max_position / wavelength from the divided to the kept one. */
static double zs_rope_inv_freq(int i, int hd, const zs_rope_params *p)
{
    double f = pow(p->theta, -(double)(2 * i) / (double)hd);
    if (!p->llama3_scaling)
        return f;
    double wavelen = 2.0 * M_PI / f;
    double short_wavelen = p->original_max_position / p->high_freq_factor;
    double long_wavelen = p->original_max_position / p->low_freq_factor;
    if (wavelen < short_wavelen)
        return f;
    if (wavelen > long_wavelen)
        return f / p->factor;
    double smooth = (p->original_max_position / wavelen - p->low_freq_factor)
                    / (p->high_freq_factor - p->low_freq_factor);
    return (1.0 - smooth) * f / p->factor + smooth * f;
}

int zs_rope_table_fill(float *table, int first_pos, int npos, int hd, const zs_rope_params *p)
{
    if (p == NULL || hd <= 0 || hd % 2 != 0)
        ZS_FAIL("rotary table: head size %d must be positive and even", hd);
    if (first_pos < 0 || npos < 0)
        ZS_FAIL("rotary table: positions %d + %d must not be negative", first_pos, npos);
    if (!(p->theta > 0.0) || !isfinite(p->theta))
        ZS_FAIL("rotary table: rope_theta %g must be positive", p->theta);
    if (p->llama3_scaling
        && !(p->factor >= 1.0 && p->low_freq_factor > 0.0
             && p->high_freq_factor > p->low_freq_factor && p->original_max_position > 0.0))
        ZS_FAIL("rotary table: llama3 rope_scaling needs factor >= 1, 0 < low_freq_factor < "
                "high_freq_factor and original_max_position_embeddings > 0 (got %g, %g, %g, %g)",
                p->factor, p->low_freq_factor, p->high_freq_factor, p->original_max_position);
    if (npos == 0)
        return 0;
    if (table == NULL)
        ZS_FAIL("rotary table: no buffer for %d rows", npos);
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        double f = zs_rope_inv_freq(i, hd, p);
        for (int r = 0; r < npos; r++) {
            double angle = (double)(first_pos + (int64_t)r) * f;
            float *row = table + (size_t)r * hd;
            row[i] = (float)cos(angle);
            row[half + i] = (float)sin(angle);
        }
    }
    return 0;
}
