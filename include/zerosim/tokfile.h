/* zerosim — a text file as token files in llm.c's format (`zerosim
 * tokens`), the files zerosim/data.h reads with --data and --val-data.
 *
 * Byte-level tokenisation: byte b of the text is token b (a vocabulary of
 * 256; no tokenizer to download, every text fits). The last val_fraction
 * of the bytes (rounded down) go to the held-out file, the rest to the
 * training file, each a whole file's header and tokens. The header's word
 * ZS_TOKENS_WORD_BYTE_LEVEL is 1 in both: each token is one byte of text,
 * so a loss in nats per token is a loss per byte (bits per byte = nats /
 * ln 2). Both files are written atomically (zs_afile_*): a failure leaves
 * the old file, or none, never half of one.
 */
#ifndef ZEROSIM_TOKFILE_H
#define ZEROSIM_TOKFILE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *text;         /* the text file to read */
    const char *out;          /* the training tokens */
    const char *val_out;      /* the held-out tokens, or NULL: none */
    double val_fraction;      /* in [0, 1): the share of bytes held out */
    int token_bits;           /* 16 (llm.c's GPT-2 files) or 32 (its Llama 3 files) */
} zs_tokfile_request;

typedef struct {
    uint64_t text_bytes;
    uint64_t train_tokens, val_tokens;
    uint64_t train_file_bytes, val_file_bytes;
} zs_tokfile_stats;

/* One line naming the file and what to do when the text cannot be read,
 * is empty, changes while it is read, holds more than 2^31 - 1 tokens for
 * a file (llm.c's header counts in an int32), leaves a file no token, or
 * when an output is the text itself or both outputs are one file. */
int zs_tokfile_write_bytes(const zs_tokfile_request *rq, zs_tokfile_stats *st);

#ifdef __cplusplus
}
#endif
#endif
