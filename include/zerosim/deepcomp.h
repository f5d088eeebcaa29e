/* zerosim — Deep Compression (Han, Mao and Dally, arXiv 1510.00149):
 * magnitude pruning with retraining, weight sharing by k-means, Huffman
 * coding, on the linear weights of zerosim's models (docs/quantization.md).
 * The compressed file and its reader are io's (zerosim/zcfile.h).
 */
#ifndef ZEROSIM_DEEPCOMP_H
#define ZEROSIM_DEEPCOMP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "zerosim/model.h"
#include "zerosim/zcfile.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- compression ----------------------------------------------------------- */

#define ZS_DC_MAX_LAYERS 64

typedef struct {
    double sparsity;        /* fraction of each linear weight pruned, [0, 1) */
    double layer_sparsity[ZS_DC_MAX_LAYERS]; /* per linear weight, in layout order,
                                               when n_layer_sparsity > 0 (then sparsity
                                               is unused) */
    int n_layer_sparsity;   /* must equal the model's linear weights when > 0 */
    int prune_rounds;       /* iterative pruning: the sparsity reached in rounds */
    int prune_geometric;    /* 1: round k of K keeps kept^(k/K) of each layer (each round
                               prunes the same share of what is left); 0: prunes
                               S k / K (equal steps of sparsity) */
    int retrain_steps;      /* steps of retraining after each round */
    int bits;               /* b: 2^b shared weights per layer, 1..16 */
    int index_bits;         /* r: bits of a relative index, 1..16 */
    int kmeans_iters;       /* Lloyd iterations */
    int finetune_steps;     /* steps of centroid fine-tuning */
    int micro_batch;        /* samples a step */
    float lr;               /* Adam's learning rate for retraining and fine-tuning */
    int eval_samples;       /* held-out samples for the losses */
    uint64_t seed;          /* the synthetic task's */
    const char *data;       /* the MLP: an image set (zerosim/data.h) to retrain on
                               (its training images) and evaluate on (its test
                               images: loss and accuracy), NULL: the synthetic task */
    FILE *log;              /* progress and the per-layer table, NULL: quiet */
} zs_dc_options;

void zs_dc_options_default(zs_dc_options *o);
/* One line naming the option when o is out of range. */
int zs_dc_options_check(const zs_dc_options *o);

/* Compress the model mc's params (changed in place to the pruned, shared,
 * fine-tuned weights) and write path atomically. */
int zs_dc_compress(const zs_model_config *mc, float *params, const zs_dc_options *o,
                   const char *path, zs_dc_result *r);

#ifdef __cplusplus
}
#endif
#endif
