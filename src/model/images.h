/* zerosim — an image set for the MLP (src/model/images.c): the training
 * and test IDX files of a folder, checked against the model, split into
 * training, held-out and test samples. Internal to src/model (data.c
 * owns one through zs_data_create_images, zerosim/data.h).
 */
#ifndef ZEROSIM_MODEL_IMAGES_H
#define ZEROSIM_MODEL_IMAGES_H

#include <stdint.h>
#include "zerosim/data.h"
#include "zerosim/model.h"

typedef struct zs_images zs_images;

/* Read and check dir's four files (see zs_data_create_images). */
int zs_images_open(const zs_model_config *mc, uint64_t seed, const char *dir, zs_images **out);
void zs_images_destroy(zs_images *im);
uint64_t zs_images_split_size(const zs_images *im, zs_data_split split);
/* Samples first .. first + b - 1 of split into x (b, pixels) scaled to
 * [0, 1] and targets (b). Training sample i is image perm_e(i mod n) of
 * the training part, e = i / n (the epoch), perm_e a permutation drawn
 * from (seed, e) alone; held-out and test sample i is image i of its
 * part, and one past the part's end is zeros with label 0. */
void zs_images_fill(const zs_images *im, zs_data_split split, uint64_t first, int b, float *x,
                    int32_t *targets);

#endif
