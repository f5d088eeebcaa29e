/* zerosim — a text file as byte-level token files (see zerosim/tokfile.h). */
#include "zerosim/tokfile.h"
#include "zerosim/data.h"
#include "zerosim/error.h"
#include "zerosim/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ZS_TOKFILE_CHUNK 65536

/* Whether path names the file st describes (the same device and inode). */
static int zs_tokfile_same(const char *path, const struct stat *st)
{
    struct stat o;
    return path && stat(path, &o) == 0 && o.st_dev == st->st_dev && o.st_ino == st->st_ino;
}

/* The header of a file of n tokens of `bits` bits, byte-level. */
static void zs_tokfile_header(int32_t *hdr, uint64_t n, int bits)
{
    memset(hdr, 0, ZS_TOKENS_HEADER_BYTES);
    hdr[0] = bits == 32 ? ZS_TOKENS32_MAGIC : ZS_TOKENS_MAGIC;
    hdr[1] = bits == 32 ? ZS_TOKENS32_VERSION : ZS_TOKENS_VERSION;
    hdr[2] = (int32_t)n;
    hdr[ZS_TOKENS_WORD_BYTE_LEVEL] = 1;
}

/* n bytes of text as tokens of `bits` bits into a. */
static int zs_tokfile_put(zs_afile *a, const unsigned char *text, size_t n, int bits)
{
    static union { /* 256 KiB: not on the stack */
        uint16_t t16[ZS_TOKFILE_CHUNK];
        uint32_t t32[ZS_TOKFILE_CHUNK];
    } buf;
    for (size_t i = 0; i < n; i++) {
        if (bits == 32)
            buf.t32[i] = text[i];
        else
            buf.t16[i] = text[i];
    }
    return zs_afile_write(a, bits == 32 ? (void *)buf.t32 : (void *)buf.t16,
                          n * (size_t)(bits / 8));
}

/* Read the text whole through fd (its size in st), each chunk's bytes to
 * the training file until n_train, then to the held-out one. */
static int zs_tokfile_copy(const zs_tokfile_request *rq, int fd, uint64_t size,
                           uint64_t n_train, zs_afile *train, zs_afile *val)
{
    static unsigned char text[ZS_TOKFILE_CHUNK];
    uint64_t done = 0;
    for (;;) {
        ssize_t r = read(fd, text, sizeof text);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            ZS_FAIL("%s: cannot read at offset %llu: %s", rq->text, (unsigned long long)done,
                    strerror(errno));
        if (r == 0)
            break;
        if (done + (uint64_t)r > size)
            ZS_FAIL("%s: the file grew while it was read (it had %llu bytes at the start): "
                    "tokenise a file that nothing writes to", rq->text, (unsigned long long)size);
        size_t k = (size_t)r, to_train = 0;
        if (done < n_train)
            to_train = n_train - done < (uint64_t)k ? (size_t)(n_train - done) : k;
        if (to_train)
            ZS_TRY(zs_tokfile_put(train, text, to_train, rq->token_bits));
        if (k > to_train)
            ZS_TRY(zs_tokfile_put(val, text + to_train, k - to_train, rq->token_bits));
        done += (uint64_t)k;
    }
    if (done != size)
        ZS_FAIL("%s: the file shrank while it was read (%llu of its %llu bytes read): tokenise "
                "a file that nothing writes to", rq->text, (unsigned long long)done,
                (unsigned long long)size);
    return 0;
}

/* The text's size and the split, checked before anything is written. */
static int zs_tokfile_plan(const zs_tokfile_request *rq, const struct stat *st,
                           zs_tokfile_stats *s)
{
    if (!S_ISREG(st->st_mode))
        ZS_FAIL("%s: not a plain file (zerosim tokens reads a text file)", rq->text);
    if (rq->token_bits != 16 && rq->token_bits != 32)
        ZS_FAIL("token files hold 16- or 32-bit tokens, not %d", rq->token_bits);
    if (!(rq->val_fraction >= 0.0 && rq->val_fraction < 1.0))
        ZS_FAIL("the held-out fraction must be in [0, 1), got %g", rq->val_fraction);
    if (zs_tokfile_same(rq->out, st) || zs_tokfile_same(rq->val_out, st))
        ZS_FAIL("%s is the text itself: write the tokens to another file", rq->out &&
                zs_tokfile_same(rq->out, st) ? rq->out : rq->val_out);
    if (rq->val_out && !strcmp(rq->out, rq->val_out))
        ZS_FAIL("--out and --val-out are both %s: give the held-out tokens a file of their "
                "own", rq->out);
    s->text_bytes = (uint64_t)st->st_size;
    if (s->text_bytes == 0)
        ZS_FAIL("%s: the file is empty: there is nothing to tokenise", rq->text);
    s->val_tokens = rq->val_out ? (uint64_t)((double)s->text_bytes * rq->val_fraction) : 0;
    s->train_tokens = s->text_bytes - s->val_tokens;
    if (rq->val_out && s->val_tokens == 0)
        ZS_FAIL("%s: --val-fraction %g of its %llu bytes holds out no byte: give a larger "
                "fraction or a longer text", rq->text, rq->val_fraction,
                (unsigned long long)s->text_bytes);
    if (s->train_tokens == 0)
        ZS_FAIL("%s: --val-fraction %g leaves no byte of its %llu to train on", rq->text,
                rq->val_fraction, (unsigned long long)s->text_bytes);
    uint64_t most = s->train_tokens > s->val_tokens ? s->train_tokens : s->val_tokens;
    if (most > ZS_TOKENS_MAX)
        ZS_FAIL("%s: %llu bytes make a file of %llu tokens, more than the %llu an llm.c "
                "header counts (an int32): split the text", rq->text,
                (unsigned long long)s->text_bytes, (unsigned long long)most,
                (unsigned long long)ZS_TOKENS_MAX);
    uint64_t w = (uint64_t)rq->token_bits / 8;
    s->train_file_bytes = ZS_TOKENS_HEADER_BYTES + w * s->train_tokens;
    s->val_file_bytes = rq->val_out ? ZS_TOKENS_HEADER_BYTES + w * s->val_tokens : 0;
    return 0;
}

int zs_tokfile_write_bytes(const zs_tokfile_request *rq, zs_tokfile_stats *st)
{
    memset(st, 0, sizeof *st);
    int fd = open(rq->text, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        ZS_FAIL("%s: %s", rq->text, strerror(errno));
    struct stat sb;
    int rc = fstat(fd, &sb) ? zs_error_set("%s: %s", rq->text, strerror(errno)) : 0;
    if (!rc)
        rc = zs_tokfile_plan(rq, &sb, st);
    zs_afile train = {.fd = -1}, val = {.fd = -1};
    int32_t hdr[ZS_TOKENS_HEADER_BYTES / 4];
    if (!rc)
        rc = zs_afile_open(&train, rq->out);
    if (!rc && rq->val_out)
        rc = zs_afile_open(&val, rq->val_out);
    if (!rc) {
        zs_tokfile_header(hdr, st->train_tokens, rq->token_bits);
        rc = zs_afile_write(&train, hdr, sizeof hdr);
    }
    if (!rc && rq->val_out) {
        zs_tokfile_header(hdr, st->val_tokens, rq->token_bits);
        rc = zs_afile_write(&val, hdr, sizeof hdr);
    }
    if (!rc)
        rc = zs_tokfile_copy(rq, fd, st->text_bytes, st->train_tokens, &train, &val);
    close(fd);
    if (!rc)
        rc = zs_afile_commit(&train, NULL);
    if (!rc && rq->val_out)
        rc = zs_afile_commit(&val, NULL);
    zs_afile_abort(&train);
    zs_afile_abort(&val);
    return rc;
}
