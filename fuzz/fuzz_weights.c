/* zerosim fuzz target: GPT weight files, safetensors and llm.c's .bin.
 *
 * The input is a file's bytes, named in.bin when it starts with llm.c's
 * magic (20240326) and in.safetensors otherwise. Its model is probed
 * (zs_weights_probe, as --init-from and eval --from do) and, when the model
 * has at most 4 million parameters, the weights are read into it.
 * Errors are expected; crashes, hangs, leaks and sanitizer reports are not.
 */
#include "infile.h"
#include "zerosim/model.h"
#include "zerosim/weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int llmc = size >= 4 && data[0] == 0xc6 && data[1] == 0xd7 && data[2] == 0x34 &&
               data[3] == 0x01;
    const char *path = fuzz_infile(llmc ? "in.bin" : "in.safetensors", data, size);
    zs_model_config mc;
    if (!path || zs_weights_probe(path, &mc) != 0)
        return 0;
    if (!mc.n_head)
        mc.n_head = 1; /* a file without n_head loads with --heads */
    size_t n = zs_model_count_params(&mc);
    if (n > ((size_t)4 << 20))
        return 0;
    float *params = malloc(n * sizeof(float) + 1);
    if (params)
        (void)zs_weights_read(path, &mc, params);
    free(params);
    return 0;
}
