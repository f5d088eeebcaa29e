/* zerosim — the Deep Compression file (.zc; src/io/zcfile.c): what
 * `zerosim compress` writes (zerosim/deepcomp.h) and `zerosim decompress`
 * and `zerosim eval` read.
 *
 * The compressed file is a safetensors file written atomically: metadata
 * format "zerosim-compressed", version, model (the shapes as JSON), seed,
 * bits (b: 2^b shared weights per layer) and index_bits (r: the relative
 * index of a nonzero is its gap from the previous one, 1 .. 2^r; a longer
 * gap takes filler entries of gap 2^r that hold no weight, as in the
 * paper). Per compressed entry NAME (a linear weight,
 * zs_quant_entry_matrix): NAME.codebook F32 [2^b] (the shared weights),
 * NAME.counts U64 [2] (entries including fillers, nonzeros),
 * NAME.idx_lengths U8 [2^b + 1] and NAME.gap_lengths U8 [2^r] (the
 * canonical Huffman code lengths of the cluster indices, the last symbol
 * being the filler, and of the gaps, symbol g = gap g + 1; 0 = unused),
 * NAME.idx_code and NAME.gap_code U8 (the two bit streams, most
 * significant bit first; zerosim/huffman.h). Every other entry: F32 as is.
 * The reader checks every name, dtype and size against the model the
 * metadata describes and fails with one line naming the file.
 */
#ifndef ZEROSIM_ZCFILE_H
#define ZEROSIM_ZCFILE_H

#include <stddef.h>
#include <stdint.h>
#include "zerosim/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One compressed entry's sizes. */
typedef struct {
    char name[64];
    size_t numel, nonzeros, entries;   /* entries: nonzeros + fillers */
    uint64_t idx_bits, gap_bits, codebook_bits, table_bits;
} zs_dc_layer;

/* What a compression (zs_dc_compress) or a read (zs_dc_read) found. */
typedef struct {
    double loss[4];                     /* held-out: before, pruned, shared, fine-tuned
                                           (the compressor's; a read leaves them 0) */
    int nlayers;
    zs_dc_layer *layers;
    uint64_t dense_bytes;               /* the whole model in fp32 */
    uint64_t compressed_bytes;          /* tensors of the compressed file (its data) */
    uint64_t file_bytes;                /* the whole file, header included */
    uint64_t other_bytes;               /* the fp32 entries in it */
    char param_hash[17];                /* XXH3-64 of the final parameters */
    double accuracy[4];                 /* with an image set (zs_dc_options.data): the
                                           test accuracy at loss's stages, else NaN */
} zs_dc_result;

void zs_dc_result_free(zs_dc_result *r);

/* One coded entry: its shared weights and its two Huffman-coded streams. */
typedef struct {
    const float *codebook;              /* [2^bits] */
    const uint8_t *idx_lengths;         /* [2^bits + 1] */
    const uint8_t *gap_lengths;         /* [2^index_bits] */
    const uint8_t *idx_code, *gap_code; /* the bit streams */
    uint64_t idx_nbits, gap_nbits;
    uint64_t entries, nonzeros;         /* entries: nonzeros + fillers */
} zs_dc_coded;

/* What a compressed file holds. */
typedef struct {
    const zs_model_config *mc;
    const zs_layout *layout;            /* mc's */
    uint64_t seed;                      /* the synthetic data's */
    int bits, index_bits;
    const float *params;                /* the fp32 entries' values (layout order) */
    const int *coded_entries;           /* [ncoded] entry ids, ascending */
    const zs_dc_coded *coded;           /* [ncoded] */
    int ncoded;
} zs_dc_file;

/* Write f to path atomically; r's compressed_bytes, file_bytes and
 * other_bytes (added to) from what it wrote. */
int zs_dc_write(const char *path, const zs_dc_file *f, zs_dc_result *r);

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
