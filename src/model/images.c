/* zerosim — an image set for the MLP: a folder's IDX files, checked
 * against the model, split into training, held-out and test samples (see
 * images.h and zerosim/data.h). */
#include "images.h"
#include "model_impl.h"
#include "zerosim/error.h"
#include "zerosim/idx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The held-out part: the training file's last twelfth (Fashion-MNIST's
 * and MNIST's 60,000 training images: 55,000 to train, 5,000 held out). */
#define ZS_IMAGES_HELDOUT_DIVISOR 12

struct zs_images {
    zs_idx images[2], labels[2];  /* [0] the training file, [1] the test file */
    uint64_t n_train;             /* training samples: the training file's first images */
    uint64_t n_heldout;           /* held-out samples: the rest of the training file */
    size_t pixels;
    uint64_t seed;
};

/* dir/name, or dir/name.gz when only that is there. */
static int zs_images_path(const char *dir, const char *name, char *out, size_t n)
{
    if ((size_t)snprintf(out, n, "%s/%s", dir, name) >= n)
        ZS_FAIL("--data %s: the path is too long", dir);
    if (access(out, F_OK) == 0)
        return 0;
    if ((size_t)snprintf(out, n, "%s/%s.gz", dir, name) >= n)
        ZS_FAIL("--data %s: the path is too long", dir);
    if (access(out, F_OK) == 0)
        return 0;
    if (!strcmp(dir, ZS_FASHION_MNIST_DIR))
        ZS_FAIL("%s/%s(.gz): not found: install the Debian package dataset-fashion-mnist, or "
                "give --data DIR, a folder with the four IDX files", dir, name);
    ZS_FAIL("%s/%s(.gz): not found: --data DIR needs %s, %s, %s and %s there (plain or .gz)",
            dir, name, ZS_IDX_TRAIN_IMAGES, ZS_IDX_TRAIN_LABELS, ZS_IDX_TEST_IMAGES,
            ZS_IDX_TEST_LABELS);
}

/* Part p's images and labels, read and checked against the model (and,
 * for the test part, against the training images' shape). */
static int zs_images_read_part(zs_images *im, const zs_model_config *mc, const char *dir, int p)
{
    char ipath[4200], lpath[4200];
    ZS_TRY(zs_images_path(dir, p ? ZS_IDX_TEST_IMAGES : ZS_IDX_TRAIN_IMAGES, ipath,
                          sizeof ipath));
    ZS_TRY(zs_images_path(dir, p ? ZS_IDX_TEST_LABELS : ZS_IDX_TRAIN_LABELS, lpath,
                          sizeof lpath));
    zs_idx *img = &im->images[p], *lab = &im->labels[p];
    ZS_TRY(zs_idx_read(ipath, 3, img));
    if (img->item_bytes != (size_t)mc->input_dim)
        ZS_FAIL("%s: images of %u x %u = %zu pixels (dimensions at offset 8%s), but the MLP's "
                "input is %d values: give --input-dim %zu", ipath, img->dims[1], img->dims[2],
                img->item_bytes, zs_idx_offset_note(img), mc->input_dim, img->item_bytes);
    ZS_TRY(zs_idx_read(lpath, 1, lab));
    if (lab->count != img->count)
        ZS_FAIL("%s: %zu labels (offset 4%s), but %s holds %zu images", lpath, lab->count,
                zs_idx_offset_note(lab), ipath, img->count);
    for (size_t i = 0; i < lab->count; i++)
        if (lab->bytes[i] >= mc->n_classes)
            ZS_FAIL("%s: label %u at offset %zu%s is not below the MLP's %d classes (--classes)",
                    lpath, (unsigned)lab->bytes[i], 8 + i, zs_idx_offset_note(lab),
                    mc->n_classes);
    return 0;
}

int zs_images_open(const zs_model_config *mc, uint64_t seed, const char *dir, zs_images **out)
{
    *out = NULL;
    if (mc->kind != ZS_MODEL_MLP)
        ZS_FAIL("--data %s: image sets feed the MLP; the GPT reads token files", dir);
    struct stat st;
    if (!strcmp(dir, ZS_FASHION_MNIST_DIR) && stat(dir, &st) != 0)
        ZS_FAIL("--data fashion-mnist: %s: %s: install the Debian package "
                "dataset-fashion-mnist, or give --data DIR, a folder with the four IDX files",
                dir, strerror(errno));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        ZS_FAIL("--data %s: %s: the MLP reads an image set, a folder of IDX files, or "
                "fashion-mnist (token files are the GPT's)", dir,
                stat(dir, &st) != 0 ? strerror(errno) : "not a folder");
    zs_images *im = calloc(1, sizeof *im);
    if (!im)
        ZS_FAIL("out of host memory for the image set %s", dir);
    int rc = zs_images_read_part(im, mc, dir, 0);
    if (!rc)
        rc = zs_images_read_part(im, mc, dir, 1);
    uint64_t n = im->images[0].count;
    im->n_heldout = n / ZS_IMAGES_HELDOUT_DIVISOR;
    im->n_train = n - im->n_heldout;
    if (!rc && im->n_heldout == 0)
        rc = zs_error_set("--data %s: the training file holds %llu images, fewer than the %d it "
                          "needs to hold out its last twelfth", dir, (unsigned long long)n,
                          ZS_IMAGES_HELDOUT_DIVISOR);
    if (rc) {
        zs_images_destroy(im);
        return rc;
    }
    im->pixels = (size_t)mc->input_dim;
    im->seed = seed;
    *out = im;
    return 0;
}

void zs_images_destroy(zs_images *im)
{
    if (!im)
        return;
    for (int p = 0; p < 2; p++) {
        zs_idx_free(&im->images[p]);
        zs_idx_free(&im->labels[p]);
    }
    free(im);
}

uint64_t zs_images_split_size(const zs_images *im, zs_data_split split)
{
    switch (split) {
    case ZS_DATA_TRAIN:
        return im->n_train;
    case ZS_DATA_HELDOUT:
        return im->n_heldout;
    case ZS_DATA_TEST:
        return im->images[1].count;
    }
    return 0;
}

/* Position i of a permutation of [0, n) drawn from key: a four-round
 * Feistel network over the smallest power of four >= n, walked until it
 * lands below n (a permutation of [0, 4^k) restricted that way is one of
 * [0, n)). No table: any sample from (seed, i) alone. */
static uint64_t zs_images_permute(uint64_t key, uint64_t n, uint64_t i)
{
    int bits = 2;
    while (bits < 62 && ((uint64_t)1 << bits) < n)
        bits += 2;
    int half = bits / 2;
    uint64_t mask = ((uint64_t)1 << half) - 1, x = i;
    do {
        uint64_t l = x >> half, r = x & mask;
        for (uint64_t round = 0; round < 4; round++) {
            uint64_t t = l ^ (zs_rng_mix(key, round << 32 | r) & mask);
            l = r;
            r = t;
        }
        x = l << half | r;
    } while (x >= n);
    return x;
}

void zs_images_fill(const zs_images *im, zs_data_split split, uint64_t first, int b, float *x,
                    int32_t *targets)
{
    int part = split == ZS_DATA_TEST;
    uint64_t size = zs_images_split_size(im, split);
    uint64_t base = split == ZS_DATA_HELDOUT ? im->n_train : 0;
    const zs_idx *img = &im->images[part], *lab = &im->labels[part];
    for (int s = 0; s < b; s++) {
        uint64_t i = first + (uint64_t)s, at;
        float *xs = x + (size_t)s * im->pixels;
        if (split == ZS_DATA_TRAIN) {
            uint64_t key = zs_rng_mix(im->seed ^ 0x1da7a5e7ULL, i / size);
            at = zs_images_permute(key, size, i % size);
        } else if (i < size) {
            at = base + i;
        } else { /* past the part's end: a zero image, label 0, not counted */
            memset(xs, 0, im->pixels * sizeof(float));
            targets[s] = 0;
            continue;
        }
        const uint8_t *px = img->bytes + (size_t)at * im->pixels;
        for (size_t j = 0; j < im->pixels; j++)
            xs[j] = (float)px[j] * (1.0f / 255.0f);
        targets[s] = lab->bytes[at];
    }
}
