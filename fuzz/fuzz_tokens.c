/* zerosim fuzz target: llm.c's token files (--data, --val-data).
 *
 * The input is a file's bytes. It is opened for a GPT of sequence 8 and a
 * vocabulary of 50257 (GPT-2's), or of 128256 (Llama 3's) when the input
 * starts with the 32-bit files' magic 20240801, so that both widths reach
 * past the vocabulary check (zs_data_create_tokens: the header and every
 * token checked); when it opens, the first samples are filled from it,
 * read and checked again window by window, as a run does.
 * Errors are expected; crashes, hangs, leaks and sanitizer reports are not.
 */
#include "infile.h"
#include "zerosim/data.h"
#include "zerosim/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_infile("in.bin", data, size);
    zs_model_config mc;
    memset(&mc, 0, sizeof mc);
    mc.kind = ZS_MODEL_GPT;
    int32_t magic = 0;
    if (size >= 4)
        memcpy(&magic, data, 4);
    mc.vocab = magic == ZS_TOKENS32_MAGIC ? 128256 : 50257;
    mc.seq_len = 8;
    mc.n_layer = 1;
    mc.n_head = 1;
    mc.n_embd = 8;
    zs_data *d = NULL;
    if (!path || zs_data_create_tokens(&mc, 1, path, &d) != 0)
        return 0;
    int32_t tokens[4 * 8], targets[4 * 8];
    (void)zs_data_fill(d, 0, 4, tokens, targets, NULL);
    zs_data_destroy(d);
    return 0;
}
