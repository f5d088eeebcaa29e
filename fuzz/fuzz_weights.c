/* zerosim fuzz target: GPT weight files, safetensors and llm.c's .bin.
 *
 * The input is a file's bytes, named in.bin when it starts with llm.c's
 * magic (20240326) and in.safetensors otherwise. Its model is probed
 * (zs_weights_probe, as --init-from and eval --from do; a Llama's heads as
 * --heads 2 would give them) and, when the model
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
        mc.n_head = mc.kind == ZS_MODEL_LLAMA ? 2 : 1; /* without n_head: --heads */
    if (zs_weights_probe_heads(path, &mc) != 0) /* a Llama's key/value heads */
        return 0;
    if (mc.kind == ZS_MODEL_LLAMA) { /* what the options give when the file does not */
        mc.seq_len = mc.seq_len ? mc.seq_len : 2;
        mc.norm_eps = mc.norm_eps > 0.0 ? mc.norm_eps : 1e-5;
        mc.rope_theta = mc.rope_theta > 0.0 ? mc.rope_theta : 10000.0;
        if (zs_model_config_validate(&mc) != 0)
            return 0;
    }
    size_t n = zs_model_count_params(&mc);
    if (n > ((size_t)4 << 20))
        return 0;
    float *params = malloc(n * sizeof(float) + 1);
    if (params)
        (void)zs_weights_read(path, &mc, params);
    free(params);
    return 0;
}
