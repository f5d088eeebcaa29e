/* zerosim fuzz target: Deep Compression files (zerosim compress --out,
 * .zc, read by eval --from).
 *
 * The input is a file's bytes. It is read whole (zs_dc_read: the metadata,
 * every layer's codebook, Huffman code lengths and code streams decoded
 * and checked) when its model has at most 4 million parameters.
 * Errors are expected; crashes, hangs, leaks and sanitizer reports are not.
 */
#define FUZZ_MODEL_FILES
#include "infile.h"
#include "zerosim/zcfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_infile("in.zc", data, size);
    if (!path || !fuzz_model_small(path))
        return 0;
    zs_model_config mc;
    uint64_t seed;
    float *params = NULL;
    zs_dc_result r;
    (void)zs_dc_file_is(path);
    if (zs_dc_read(path, &mc, &seed, &params, &r) == 0) {
        free(params);
        zs_dc_result_free(&r);
    }
    return 0;
}
