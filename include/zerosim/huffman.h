/* zerosim — canonical Huffman codes and bit streams (src/quant/huffman.c),
 * over symbol frequencies: Deep Compression's coding (zerosim/deepcomp.h)
 * and its file (zerosim/zcfile.h) use them.
 */
#ifndef ZEROSIM_HUFFMAN_H
#define ZEROSIM_HUFFMAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZS_HUFF_MAX_LEN 24

/* Code lengths (0 for a symbol of frequency 0; at most ZS_HUFF_MAX_LEN)
 * of an optimal prefix code for freq[0..n) (a one-symbol alphabet gets
 * length 1). 0, or non-zero out of host memory. */
int zs_huff_lengths(const uint64_t *freq, int n, uint8_t *len);
/* Bits of the message under those lengths: sum freq[i] len[i]. */
uint64_t zs_huff_bits(const uint64_t *freq, const uint8_t *len, int n);

/* Bit streams, most significant bit first. */
typedef struct {
    uint8_t *buf;
    size_t cap, nbits;
} zs_bitw;
typedef struct {
    const uint8_t *buf;
    size_t nbits, pos;
} zs_bitr;

/* A canonical code from lengths (checked: lengths <= ZS_HUFF_MAX_LEN and a
 * prefix code, Kraft sum <= 1). */
typedef struct {
    int n;
    uint8_t *len;
    uint32_t *code;                     /* [n] for encoding */
    /* decoding: per length L, the first code and the index of its first
     * symbol in `sorted` */
    uint32_t first[ZS_HUFF_MAX_LEN + 2];
    int count[ZS_HUFF_MAX_LEN + 2], start[ZS_HUFF_MAX_LEN + 2];
    int *sorted;
} zs_huff;

int zs_huff_build(zs_huff *h, const uint8_t *len, int n);
void zs_huff_free(zs_huff *h);
int zs_huff_put(zs_bitw *w, const zs_huff *h, int sym);
/* The next symbol, or -1 when the stream ends or holds no code. */
int zs_huff_get(zs_bitr *r, const zs_huff *h);
void zs_bitw_free(zs_bitw *w);

#ifdef __cplusplus
}
#endif
#endif
