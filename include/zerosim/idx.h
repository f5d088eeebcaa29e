/* zerosim — IDX files (LeCun's MNIST format, also Fashion-MNIST's): a
 * 4-byte magic 0x00 0x00 0x08 nd (unsigned bytes, nd dimensions), nd
 * big-endian uint32 dimensions, then the bytes, the last dimension
 * fastest. Read whole into memory, plain or gzip-compressed (zlib; the
 * name need not say which). Offsets in messages are of the file's bytes,
 * of the decompressed bytes for a gzip file (the message says which).
 */
#ifndef ZEROSIM_IDX_H
#define ZEROSIM_IDX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZS_IDX_MAX_DIMS 3

typedef struct {
    int ndims;
    uint32_t dims[ZS_IDX_MAX_DIMS];
    size_t count;        /* dims[0]: items (images, labels) */
    size_t item_bytes;   /* the product of the other dimensions (1 for labels) */
    uint8_t *bytes;      /* [count * item_bytes] */
    int gzip;            /* the file was gzip-compressed */
} zs_idx;

/* Read path, which must hold unsigned bytes in ndims dimensions (1 for
 * labels, 3 for images), every byte the header counts and none after.
 * One line naming the file and the byte offset when it does not. */
int zs_idx_read(const char *path, int ndims, zs_idx *out);
void zs_idx_free(zs_idx *x);

/* "" for a plain file, " of the decompressed data" for a gzip one: what
 * an offset in a message about x counts. */
const char *zs_idx_offset_note(const zs_idx *x);

#ifdef __cplusplus
}
#endif
#endif
