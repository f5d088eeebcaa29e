/* zerosim — gradient compression codecs for fp32 vectors in host memory.
 *
 * Pure functions: no MPI, no allocation through the accounting allocator, no
 * global state. Error feedback belongs to the caller: zs_comp_compress also
 * writes the decompressed value of every element into `approx`, so the caller
 * keeps the residual e = x - approx and adds it to the next input.
 *
 * Codecs and their wire formats (all little-endian, byte-packed, no padding;
 * read and written with memcpy/byte stores, so buffers need no alignment):
 *
 *   none  4*n bytes: the n fp32 values.
 *   topk  k*(4+4) bytes: k uint32 indices in increasing order, then the k fp32
 *         values in the same order. k = zs_comp_topk_k(spec, n).
 *   int8  4*nb + n bytes (nb = ceil(n/256)): nb fp32 scales, then n int8
 *         values. Element i decodes to scale[i/256] * q[i].
 *   sign  4*nb + ceil(n/8) bytes: nb fp32 scales, then one bit per element,
 *         element i in bit (i%8) of byte i/8 (least significant bit first,
 *         unused high bits of the last byte are 0). Bit 1 decodes to
 *         +scale[i/256], bit 0 to -scale[i/256].
 *
 * Determinism: every choice depends only on the input values; two calls with
 * the same input give identical bytes and identical `approx`.
 *
 * Rounding (int8): q = roundf(x / scale), i.e. round half away from zero,
 * with x / scale an fp32 division, clamped to [-127, 127].
 *
 * Memory: no codec allocates. Top-k selects with a radix select over the bits
 * of |x| (three counting passes and one output pass, O(n) worst case) whose
 * only scratch is a 16 KiB histogram on the stack.
 *
 * Zeros: every decoded zero is +0.0f (approx is computed as 0.0f + value),
 * so decompressing into a zero-filled accumulator reproduces `approx` bit
 * for bit.
 *
 * Non-finite inputs are handled without undefined behaviour and
 * deterministically, but their decoded values are unspecified, except that
 * top-k ranks |NaN| above +inf.
 */
#ifndef ZEROSIM_COMPRESS_H
#define ZEROSIM_COMPRESS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    ZS_COMP_NONE = 0,   /* raw fp32 */
    ZS_COMP_TOPK,       /* the k largest |x|, as (index, value) pairs */
    ZS_COMP_INT8,       /* int8 values with one fp32 scale per block */
    ZS_COMP_SIGN        /* one sign bit per element, fp32 mean |x| per block */
} zs_comp_kind;

typedef struct {
    zs_comp_kind kind;
    double topk_fraction;   /* (0,1]; used by ZS_COMP_TOPK only */
} zs_comp_spec;

#define ZS_COMP_BLOCK 256   /* elements per scale block for int8 and sign */

/* Parse "none", "topk:F" (0 < F <= 1, a decimal or exponent number such as
 * 0.01 or 1e-3), "int8" or "sign" (lower case, no spaces). Returns 0 and
 * fills *out, or non-zero via zs_error_set with one line naming the bad text
 * and the accepted forms (*out is then left unchanged). */
int zs_comp_parse(const char *s, zs_comp_spec *out);

/* Write the canonical text of the spec into buf (at most len bytes, always
 * terminated when len > 0) and return buf: "none", "int8", "sign" or
 * "topk:F" with the shortest F that parses back to the same double. */
const char *zs_comp_name(const zs_comp_spec *s, char *buf, size_t len);

/* Elements kept by top-k for n inputs: k = ceil(fraction*n) clamped to [1,n]
 * when n > 0, 0 when n == 0. The product is taken in double and a product
 * within a relative 1e-12 of an integer counts as that integer, so that the
 * decimal text the user wrote decides (topk:0.07 of 100 keeps 7, not 8,
 * although the double nearest 0.07 is slightly above it). */
size_t zs_comp_topk_k(const zs_comp_spec *s, size_t n);

/* Exact size in bytes of the compressed form of n elements (see the formats
 * above): topk 8*k; int8 n + 4*ceil(n/256); sign ceil(n/8) + 4*ceil(n/256);
 * none 4*n. */
size_t zs_comp_bytes(const zs_comp_spec *s, size_t n);

/* Compress x(n) into out (zs_comp_bytes(s, n) bytes, any alignment) and write
 * approx(n), the decompressed value of every element.
 *   topk: the k largest |x|, ties broken by the lower index, listed in
 *         increasing index order; the other elements decode to 0. Requires
 *         n <= UINT32_MAX (indices travel as uint32).
 *   int8: per block, scale = max|x| / 127 (fp32); q = roundf(x / scale)
 *         clamped to [-127, 127]; a block whose scale is 0 (all zeros, or so
 *         small that max|x|/127 underflows) is all q = 0 with scale 0.
 *   sign: per block, scale = mean |x| (summed in double in index order,
 *         divided by the block's length, rounded once to fp32); bit 1 when
 *         x >= 0 (so -0.0 counts as non-negative), 0 otherwise. A block of
 *         zeros has scale 0.
 * x and approx may not overlap; out may not overlap either. */
void zs_comp_compress(const zs_comp_spec *s, const float *x, size_t n, void *out, float *approx);

/* acc(n) += the decompressed values of `in` (compressed from n elements by
 * the same spec), each addition one fp32 add, in increasing index order.
 * Top-k entries whose index is >= n are ignored (a corrupt buffer cannot
 * write out of bounds). */
void zs_comp_decompress_add(const zs_comp_spec *s, const void *in, size_t n, float *acc);

#ifdef __cplusplus
}
#endif
#endif
