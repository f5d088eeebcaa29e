/* zerosim — synthetic data with a known loss floor, no download needed.
 *
 * GPT: token sequences from a seeded random Markov chain over the vocabulary.
 * Each state moves to a few random successors (Dirichlet weights) plus a small
 * uniform teleport probability, which makes the chain irreducible and
 * aperiodic. Sequences start from the stationary distribution. The model sees
 * x_0..x_{T-1} and predicts x_1..x_T, so the best possible mean cross-entropy
 * is the chain's entropy rate H = sum_i pi_i * H(P_i) (in nats): the floor.
 *
 * MLP: inputs x ~ N(0, I); the label is the argmax of a fixed random teacher
 * network's output, so a perfect student reaches loss 0 (floor 0).
 *
 * Or real data: the GPT reads a token file (zs_data_create_tokens), the MLP
 * an image set in IDX files (zs_data_create_images: Fashion-MNIST, MNIST).
 *
 * Sample i of a run is generated from (seed, i) alone, so the global batch of
 * a step does not depend on how micro-batches are dealt to ranks.
 */
#ifndef ZEROSIM_DATA_H
#define ZEROSIM_DATA_H

#include <stdint.h>
#include "zerosim/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zs_data zs_data;

int zs_data_create(const zs_model_config *mc, uint64_t seed, zs_data **out);
/* llm.c's token files: a header of 256 int32 (magic, version, the token
 * count, the rest zero), then the tokens, little-endian: uint16 under
 * magic 20240520 version 1 (llm.c's GPT-2 files), uint32 under magic
 * 20240801 version 7 (its Llama 3 files, for vocabularies over 65,536).
 * zerosim tokens (zerosim/tokfile.h) also sets header word 3 to 1: each
 * token is one byte of text, so a loss per token is a loss per byte. */
#define ZS_TOKENS_MAGIC 20240520
#define ZS_TOKENS_VERSION 1
#define ZS_TOKENS32_MAGIC 20240801
#define ZS_TOKENS32_VERSION 7
#define ZS_TOKENS_HEADER_BYTES 1024
#define ZS_TOKENS_WORD_BYTE_LEVEL 3
#define ZS_TOKENS_MAX ((uint64_t)INT32_MAX) /* the count is an int32 */

/* GPT samples from a token file (above), of either width,
 * checked whole at the start (every token below mc->vocab, and below 256
 * in a byte-level file) and read with
 * pread window by window, each window checked again. Sample
 * i is the window of seq_len + 1 tokens from a start drawn from (seed, i)
 * alone, uniform over the ntokens - seq_len starts. One line naming the file
 * and the offset when it is malformed. The loss floor is unknown (NaN). */
int zs_data_create_tokens(const zs_model_config *mc, uint64_t seed, const char *path,
                          zs_data **out);

/* The MLP: an image set, a folder `dir` holding the four IDX files below
 * (each plain or .gz), or "fashion-mnist" for Debian's package
 * dataset-fashion-mnist (ZS_FASHION_MNIST_DIR). Images must have
 * mc->input_dim pixels, labels be below mc->n_classes, each labels file
 * count its images file's items; one line naming the file and the byte
 * offset otherwise. Pixels are scaled to [0, 1] (x = byte / 255, no
 * normalisation). The training file's last twelfth is held out (samples
 * of ZS_DATA_HELDOUT, never trained on); the test file is ZS_DATA_TEST.
 * Training sample i is the training part's image at position i mod n of
 * a permutation drawn from (seed, i / n): every image once an epoch, from
 * (seed, i) alone. The loss floor is unknown (NaN). */
#define ZS_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#define ZS_IDX_TRAIN_IMAGES "train-images-idx3-ubyte"
#define ZS_IDX_TRAIN_LABELS "train-labels-idx1-ubyte"
#define ZS_IDX_TEST_IMAGES "t10k-images-idx3-ubyte"
#define ZS_IDX_TEST_LABELS "t10k-labels-idx1-ubyte"
int zs_data_create_images(const zs_model_config *mc, uint64_t seed, const char *dir,
                          zs_data **out);
/* --data FILE: a token file for the GPT, an image set for the MLP. */
int zs_data_create_file(const zs_model_config *mc, uint64_t seed, const char *path,
                        zs_data **out);
void zs_data_destroy(zs_data *d);

/* The parts of an image set: training, held-out, test. */
typedef enum { ZS_DATA_TRAIN, ZS_DATA_HELDOUT, ZS_DATA_TEST } zs_data_split;
/* Samples in a part (0 for data without parts: synthetic, token files). */
uint64_t zs_data_split_size(const zs_data *d, zs_data_split split);
/* MLP image sets: samples first .. first + b - 1 of a part, x(b,
 * input_dim) and targets(b); held-out and test samples are the part's
 * images in order, those past its end zeros with label 0 (a last partial
 * micro-batch: count only the part's). */
void zs_data_fill_split(const zs_data *d, zs_data_split split, uint64_t first, int b,
                        int32_t *targets, float *x);

/* Fill host arrays for samples first..first+b-1.
 * GPT: tokens(B,T), targets(B,T); MLP: x(B,input_dim), targets(B).
 * Synthetic data cannot fail; a token file that shrank or changed since
 * the start is one line naming it (-1). */
int zs_data_fill(const zs_data *d, uint64_t first, int b, int32_t *tokens,
                 int32_t *targets, float *x);

/* Whether the data is a byte-level token file (header word 3 is 1): each
 * token one byte of text, so its loss in nats / ln 2 is bits per byte. */
int zs_data_tokens_are_bytes(const zs_data *d);

/* The loss floor in nats (the Markov chain's entropy rate; 0 for the MLP;
 * NaN for a token file or an image set: unknown). */
double zs_data_loss_floor(const zs_data *d);

#ifdef __cplusplus
}
#endif
#endif
