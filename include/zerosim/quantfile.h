/* zerosim — quantized model files, and a model's weights from any file.
 *
 * A quantized file is a safetensors file (zerosim/io.h), written atomically:
 * metadata format "zerosim-quantized", version, quant (int8, int8-zp, nf4),
 * block, per_channel, double_quant, seed (the synthetic data's) and model
 * (the shapes as JSON); then, per entry of the model's flat layout in
 * order, either the entry as F32 (biases, LayerNorms, embeddings) or, for
 * the weights of linear layers (zs_quant_entry_matrix), NAME.q (I8
 * [rows, cols], or U8 [ceil(n/2)] of NF4 nibbles) and NAME.scale (F32
 * [groups]: absmax, or int8-zp's nd), NAME.zero (U8 [groups], int8-zp)
 * or, with double quantization, NAME.scale_q (I8 [groups]),
 * NAME.scale_scale (F32 [ceil(groups/256)]) and NAME.scale_mean (F32 [1]).
 * The reader checks every name, dtype and size against the model the
 * metadata describes and fails with one line naming the file.
 */
#ifndef ZEROSIM_QUANTFILE_H
#define ZEROSIM_QUANTFILE_H

#include <stddef.h>
#include <stdint.h>
#include "zerosim/model.h"
#include "zerosim/quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a write or read found: parameters and bytes by kind. */
typedef struct {
    size_t quantized_params, other_params;
    uint64_t quantized_bytes;   /* values, scales, zero points */
    uint64_t other_bytes;       /* the fp32 entries */
    uint64_t file_bytes;        /* the whole file, header included */
} zs_qfile_stats;

/* Quantize the linear weights of params (the model mc, zs_model_count_params
 * floats, layout order) as s says (finalized) and write path atomically.
 * dequant (may be NULL) gets the parameters the file stands for. */
int zs_qfile_write(const char *path, const zs_model_config *mc, uint64_t seed,
                   const zs_quant_spec *s, const float *params, float *dequant,
                   zs_qfile_stats *st);
/* The same in memory: dequant gets the parameters a file would stand for,
 * st its sizes (file_bytes 0). */
int zs_quant_model(const zs_model_config *mc, const zs_quant_spec *s, const float *params,
                   float *dequant, zs_qfile_stats *st);
/* 1 when path is a safetensors file whose metadata says zerosim-quantized. */
int zs_qfile_is(const char *path);
/* Read a quantized file: the model, the seed, the spec and the dequantized
 * parameters (malloc'd in *params). */
int zs_qfile_read(const char *path, zs_model_config *mc, uint64_t *seed, zs_quant_spec *s,
                  float **params, zs_qfile_stats *st);

/* The model's shapes as the JSON text of the files' "model" metadata, and
 * back (one line naming `what` when it is not a model). */
char *zs_model_config_json(const zs_model_config *mc);
int zs_model_config_from_json(const char *text, const char *what, zs_model_config *mc);

#ifdef __cplusplus
}
#endif
#endif
