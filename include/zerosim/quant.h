/* zerosim — weight quantization: int8 absmax, int8 zero-point, NF4.
 *
 * A tensor of rows x cols floats (row-major, zerosim's (out, in) weights) is
 * cut into groups that share one scale: the whole tensor, one output channel
 * (a row), or blocks of B consecutive elements (the last one may be short).
 *
 * int8 (absmax, symmetric; LLM.int8()'s vector-wise quantization): a = max
 * |x| of the group, q = round(127 x / a) in [-127, 127], x' = q a / 127.
 *
 * int8-zp (zero-point, asymmetric): lo = min(min x, 0), hi = max(max x, 0),
 * nd = 255 / (hi - lo), zp = round(-lo nd) in [0, 255], q = round(nd x + zp)
 * - 128 in [-128, 127], x' = (q + 128 - zp) / nd. The range holds 0, so 0
 * (a pruned weight) stays exactly 0.
 *
 * nf4 (QLoRA, arXiv 2305.14314): a = max |x| of the block (64 by default),
 * q = the index of the level nearest x / a among bitsandbytes' 16 NF4 levels
 * (ties to the lower level), two indices a byte (the first in the low
 * nibble), x' = level[q] a. Double quantization (NF4 only): the blocks'
 * absmax values minus their mean, in blocks of 256, as int8 absmax (one
 * fp32 scale per 256 blocks, one fp32 mean per tensor): 4 + 8/64 + 32/(64
 * 256) = 4.127 bits per parameter. bitsandbytes quantizes the second level
 * with an 8-bit dynamic float map; zerosim with int8 absmax, the same bits.
 *
 * round() is C's roundf (halves away from zero). Everything is computed in
 * float in one fixed order, so quantizing the same values gives the same
 * bytes on every rank, in every stage and in every run.
 */
#ifndef ZEROSIM_QUANT_H
#define ZEROSIM_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include "zerosim/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    ZS_QUANT_NONE = 0,
    ZS_QUANT_INT8,        /* "int8": absmax */
    ZS_QUANT_INT8_ZP,     /* "int8-zp": zero-point */
    ZS_QUANT_NF4,         /* "nf4" */
    ZS_QUANT_NFORMATS
} zs_quant_format;

#define ZS_QUANT_NF4_BLOCK 64       /* QLoRA's block */
#define ZS_QUANT_DQ_BLOCK 256       /* double quantization: blocks per scale */

/* bitsandbytes' NF4 levels, ascending (level 7 is 0). */
extern const float zs_nf4_levels[16];

typedef struct {
    zs_quant_format format;
    size_t block;         /* elements per group; 0: per tensor (or per channel) */
    int per_channel;      /* one group per row */
    int double_quant;     /* NF4: the block scales in 8 bits */
} zs_quant_spec;

/* "int8", "int8-zp", "nf4" (and "none" for ZS_QUANT_NONE). */
int zs_quant_format_parse(const char *s, zs_quant_format *out);
const char *zs_quant_format_name(zs_quant_format f);
/* Defaults (NF4 without --block or --per-channel: blocks of 64) and checks:
 * one line naming what is wrong. */
int zs_quant_spec_finalize(zs_quant_spec *s);
/* "nf4, blocks of 64, double quant": for reports. */
void zs_quant_spec_describe(const zs_quant_spec *s, char *buf, size_t n);

/* Elements per group of a rows x cols tensor, and the number of groups. */
size_t zs_quant_group_size(const zs_quant_spec *s, size_t rows, size_t cols);
size_t zs_quant_ngroups(const zs_quant_spec *s, size_t rows, size_t cols);

/* One quantized tensor. The arrays are malloc'd by zs_quant_tensor. */
typedef struct {
    zs_quant_spec spec;
    size_t rows, cols, n;       /* n = rows * cols */
    size_t group, ngroups;
    uint8_t *q;                 /* qbytes: int8 values, or NF4 nibbles */
    size_t qbytes;
    float *scale;               /* [ngroups] absmax (int8, nf4) or nd (int8-zp);
                                   NULL with double quantization */
    uint8_t *zero;              /* [ngroups] zp (int8-zp), else NULL */
    int8_t *scale_q;            /* double quant: [ngroups] (absmax - mean) in int8 */
    float *scale_scale;         /* double quant: [nsb] absmax of each 256 block */
    size_t nsb;
    float scale_mean;           /* double quant: the mean of the absmax values */
} zs_qtensor;

/* Quantize x (rows x cols) as s says (finalized). 0, or non-zero when out
 * of host memory. */
int zs_quant_tensor(const zs_quant_spec *s, const float *x, size_t rows, size_t cols,
                    zs_qtensor *out);
/* The values the quantized tensor stands for (n floats). */
void zs_dequant_tensor(const zs_qtensor *t, float *out);
void zs_qtensor_free(zs_qtensor *t);
/* Bytes it takes: values, scales, zero points, double quantization's. */
size_t zs_qtensor_bytes(const zs_qtensor *t);

/* Quantize and dequantize at once (out may be x): what zs_dequant_tensor
 * of zs_quant_tensor gives, without allocating. Not for double quant. Sets
 * mask[i] = 1 when x[i] is inside the group's clamp range (the straight-
 * through estimator passes its gradient), 0 when it was clamped; mask may
 * be NULL. Returns the number of clamped elements. */
size_t zs_quant_fake(const zs_quant_spec *s, const float *x, float *out, uint8_t *mask,
                     size_t rows, size_t cols);

/* The one-group kernels (the reference values of the tests). */
void zs_quant_absmax_i8(const float *x, size_t n, int8_t *q, float *absmax);
void zs_quant_zeropoint_i8(const float *x, size_t n, int8_t *q, float *nd, uint8_t *zp);
uint8_t zs_quant_nf4_index(float v);  /* v = x / absmax in [-1, 1] */

/* Bits per parameter of format s for a tensor of n elements in groups of
 * `group` (scales, zero points, double quantization included), and for
 * large n (the formula: e.g. NF4, 64, double quant: 4 + 8/64 + 32/16384). */
double zs_quant_bits_per_param(const zs_quant_spec *s, size_t n, size_t group);
double zs_quant_bits_per_param_limit(const zs_quant_spec *s);

/* 1 when the entry is the weight of a linear layer (MLP fcK.w; GPT
 * attn.qkv.w, attn.proj.w, mlp.fc.w, mlp.proj.w), with its (out, in)
 * shape in *rows, *cols; 0 otherwise (kept in fp32). For the tp = 1
 * layout. */
int zs_quant_entry_matrix(const zs_model_config *mc, const zs_param_entry *e, size_t *rows,
                          size_t *cols);

#ifdef __cplusplus
}
#endif
#endif
