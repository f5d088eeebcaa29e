/* zerosim fuzz target: quantized model files (zerosim quantize --out,
 * read by eval --from).
 *
 * The input is a file's bytes. It is read whole (zs_qfile_read: the
 * metadata's model and quantization, every tensor's dtype and size, the
 * scales) when its model has at most 4 million parameters.
 * Errors are expected; crashes, hangs, leaks and sanitizer reports are not.
 */
#define FUZZ_MODEL_FILES
#include "infile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_infile("in.zq", data, size);
    if (!path || !fuzz_model_small(path))
        return 0;
    zs_model_config mc;
    uint64_t seed;
    zs_quant_spec spec;
    float *params = NULL;
    zs_qfile_stats st;
    (void)zs_qfile_is(path);
    if (zs_qfile_read(path, &mc, &seed, &spec, &params, &st) == 0)
        free(params);
    return 0;
}
