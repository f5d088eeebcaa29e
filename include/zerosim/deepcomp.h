/* zerosim — Deep Compression (Han, Mao and Dally, arXiv 1510.00149):
 * magnitude pruning with retraining, weight sharing by k-means, Huffman
 * coding, on the linear weights of zerosim's models (docs/quantization.md).
 *
 * The compressed file is a safetensors file written atomically: metadata
 * format "zerosim-compressed", version, model (the shapes as JSON), seed,
 * bits (b: 2^b shared weights per layer) and index_bits (r: the relative
 * index of a nonzero is its gap from the previous one, 1 .. 2^r; a longer
 * gap takes filler entries of gap 2^r that hold no weight, as in the
 * paper). Per compressed entry NAME: NAME.codebook F32 [2^b] (the shared
 * weights), NAME.counts U64 [2] (entries including fillers, nonzeros),
 * NAME.idx_lengths U8 [2^b + 1] and NAME.gap_lengths U8 [2^r] (the
 * canonical Huffman code lengths of the cluster indices, the last symbol
 * being the filler, and of the gaps, symbol g = gap g + 1; 0 = unused),
 * NAME.idx_code and NAME.gap_code U8 (the two bit streams, most
 * significant bit first). Every other entry: F32 as is.
 */
#ifndef ZEROSIM_DEEPCOMP_H
#define ZEROSIM_DEEPCOMP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "zerosim/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- canonical Huffman codes ------------------------------------------------ */

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

/* ---- compression ----------------------------------------------------------- */

typedef struct {
    double sparsity;        /* fraction of each linear weight pruned, [0, 1) */
    int prune_rounds;       /* iterative pruning: the sparsity reached in rounds */
    int retrain_steps;      /* steps of retraining after each round */
    int bits;               /* b: 2^b shared weights per layer, 1..16 */
    int index_bits;         /* r: bits of a relative index, 1..16 */
    int kmeans_iters;       /* Lloyd iterations */
    int finetune_steps;     /* steps of centroid fine-tuning */
    int micro_batch;        /* samples a step */
    float lr;               /* Adam's learning rate for retraining and fine-tuning */
    int eval_samples;       /* held-out samples for the losses */
    uint64_t seed;          /* the synthetic task's */
    FILE *log;              /* progress and the per-layer table, NULL: quiet */
} zs_dc_options;

void zs_dc_options_default(zs_dc_options *o);
/* One line naming the option when o is out of range. */
int zs_dc_options_check(const zs_dc_options *o);

typedef struct {
    char name[48];
    size_t numel, nonzeros, entries;   /* entries: nonzeros + fillers */
    uint64_t idx_bits, gap_bits, codebook_bits, table_bits;
} zs_dc_layer;

typedef struct {
    double loss[4];                     /* held-out: before, pruned, shared, fine-tuned */
    int nlayers;
    zs_dc_layer *layers;
    uint64_t dense_bytes;               /* the whole model in fp32 */
    uint64_t compressed_bytes;          /* tensors of the compressed file (its data) */
    uint64_t file_bytes;                /* the whole file, header included */
    uint64_t other_bytes;               /* the fp32 entries in it */
    char param_hash[17];                /* XXH3-64 of the final parameters */
} zs_dc_result;

/* Compress the model mc's params (changed in place to the pruned, shared,
 * fine-tuned weights) and write path atomically. */
int zs_dc_compress(const zs_model_config *mc, float *params, const zs_dc_options *o,
                   const char *path, zs_dc_result *r);
void zs_dc_result_free(zs_dc_result *r);

/* 1 when path is a safetensors file whose metadata says zerosim-compressed. */
int zs_dc_file_is(const char *path);
/* Decode a compressed file: the model, the seed, the parameters (malloc'd)
 * and per-layer sizes in r (loss unset). */
int zs_dc_read(const char *path, zs_model_config *mc, uint64_t *seed, float **params,
               zs_dc_result *r);

/* XXH3-64 of n floats as 16 hex digits (the reports' param_hash). */
void zs_dc_hash(const float *p, size_t n, char out[17]);

#ifdef __cplusplus
}
#endif
#endif
