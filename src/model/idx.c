/* zerosim — IDX files, plain or gzip-compressed (see zerosim/idx.h). */
#include "zerosim/idx.h"
#include "zerosim/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define ZS_IDX_TYPE_UBYTE 0x08
#define ZS_IDX_MAX_BYTES ((uint64_t)1 << 32) /* 4 GiB: far above any image set */

const char *zs_idx_offset_note(const zs_idx *x)
{
    return x->gzip ? " of the decompressed data" : "";
}

/* Up to n bytes at the stream's position into buf: the count read (short
 * at the end of the data), or -1 with the message naming the file and the
 * offset where the gzip stream is corrupt. */
static long long zs_idx_read_bytes(gzFile f, const char *path, int gzip, uint64_t at, void *buf,
                                   size_t n)
{
    size_t got = 0;
    while (got < n) {
        size_t want = n - got > (1u << 30) ? (1u << 30) : n - got;
        int r = gzread(f, (char *)buf + got, (unsigned)want);
        if (r < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            ZS_FAIL("%s: cannot read at offset %llu%s: %s", path,
                    (unsigned long long)(at + got), gzip ? " of the decompressed data" : "",
                    zerr == Z_ERRNO ? strerror(errno) : msg);
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (long long)got;
}

/* The header: magic, then ndims big-endian dimensions; fills x's shape. */
static int zs_idx_read_header(gzFile f, const char *path, int ndims, zs_idx *x)
{
    const char *note = zs_idx_offset_note(x);
    uint8_t h[4 + 4 * ZS_IDX_MAX_DIMS];
    size_t hbytes = 4 + 4 * (size_t)ndims;
    long long got = zs_idx_read_bytes(f, path, x->gzip, 0, h, hbytes);
    if (got < 0)
        return -1;
    if (got >= 4 && (h[0] || h[1] || h[2] != ZS_IDX_TYPE_UBYTE || h[3] != ndims))
        ZS_FAIL("%s: bad magic 0x%02x%02x%02x%02x at offset 0%s: not an IDX file of unsigned "
                "bytes in %d dimension%s (0x000008%02x)", path, h[0], h[1], h[2], h[3], note,
                ndims, ndims > 1 ? "s" : "", ndims);
    if ((size_t)got < hbytes)
        ZS_FAIL("%s: truncated at offset %lld%s: an IDX file of %d dimension%s starts with a "
                "header of %zu bytes", path, got, note, ndims, ndims > 1 ? "s" : "", hbytes);
    uint64_t total = 1;
    x->ndims = ndims;
    for (int d = 0; d < ndims; d++) {
        const uint8_t *p = h + 4 + 4 * d;
        x->dims[d] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        if (x->dims[d] == 0)
            ZS_FAIL("%s: dimension %d is 0 at offset %d%s: the file holds no data", path, d,
                    4 + 4 * d, note);
        total *= x->dims[d];
        if (total > ZS_IDX_MAX_BYTES)
            ZS_FAIL("%s: the dimensions at offset 4%s make more than %llu bytes: not an image "
                    "set zerosim reads", path, note, (unsigned long long)ZS_IDX_MAX_BYTES);
    }
    x->count = x->dims[0];
    x->item_bytes = (size_t)(total / x->dims[0]);
    return 0;
}

int zs_idx_read(const char *path, int ndims, zs_idx *out)
{
    memset(out, 0, sizeof *out);
    if (ndims < 1 || ndims > ZS_IDX_MAX_DIMS)
        ZS_FAIL("%s: IDX files of %d dimensions are not read here", path, ndims);
    FILE *probe = fopen(path, "rb");
    if (!probe)
        ZS_FAIL("%s: %s", path, strerror(errno));
    unsigned char m[2] = {0, 0};
    out->gzip = fread(m, 1, 2, probe) == 2 && m[0] == 0x1f && m[1] == 0x8b;
    fclose(probe);
    gzFile f = gzopen(path, "rb");
    if (!f)
        ZS_FAIL("%s: %s", path, errno ? strerror(errno) : "cannot open");
    gzbuffer(f, 1 << 17);
    int rc = zs_idx_read_header(f, path, ndims, out);
    size_t hbytes = 4 + 4 * (size_t)ndims, n = out->count * out->item_bytes;
    const char *note = zs_idx_offset_note(out);
    if (!rc && !(out->bytes = malloc(n)))
        rc = zs_error_set("out of host memory reading %s (%zu bytes)", path, n);
    if (!rc) {
        long long got = zs_idx_read_bytes(f, path, out->gzip, hbytes, out->bytes, n);
        uint8_t extra;
        if (got < 0)
            rc = -1;
        else if ((size_t)got < n)
            rc = zs_error_set("%s: truncated at offset %llu%s: the header's dimensions (offset "
                              "4) count %zu bytes of data, which end at offset %llu", path,
                              (unsigned long long)(hbytes + (size_t)got), note, n,
                              (unsigned long long)(hbytes + n));
        else if ((got = zs_idx_read_bytes(f, path, out->gzip, hbytes + n, &extra, 1)) != 0)
            rc = got < 0 ? -1
                         : zs_error_set("%s: bytes after the data the header counts, from offset "
                                        "%llu%s", path, (unsigned long long)(hbytes + n), note);
    }
    gzclose(f);
    if (rc)
        zs_idx_free(out);
    return rc;
}

void zs_idx_free(zs_idx *x)
{
    free(x->bytes);
    x->bytes = NULL;
}
