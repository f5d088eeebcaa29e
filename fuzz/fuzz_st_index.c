/* zerosim fuzz target: a sharded checkpoint's index
 * (model.safetensors.index.json, src/io/st_set.c).
 *
 * On first use the folder gets the shards of a tiny Llama (1 block, hidden
 * 4, vocabulary 4) as zerosim exports them with shards of at most 64 bytes
 * (model-00001-of-0000n.safetensors, ...). The input is an index's bytes,
 * written beside them as in.index.json: it is opened (zs_st_set_open: the
 * JSON, the files it names, every tensor in the file it names and every
 * tensor of the files in it), every tensor looked up by name and read, and
 * the model probed and read through it, as --init-from and compare do.
 * Errors are expected; crashes, hangs, leaks and sanitizer reports are not.
 */
#include "infile.h"
#include "zerosim/error.h"
#include "zerosim/io.h"
#include "zerosim/model.h"
#include "zerosim/weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The tiny Llama's shards in the fuzz folder; 0, or -1 when they cannot be
 * written. */
static int fuzz_index_shards(void)
{
    static int made;
    if (made)
        return made > 0 ? 0 : -1;
    made = -1;
    if (!fuzz_folder())
        return -1;
    zs_model_config mc;
    memset(&mc, 0, sizeof mc);
    mc.kind = ZS_MODEL_LLAMA;
    mc.n_layer = 1;
    mc.n_embd = 4;
    mc.n_head = 2;
    mc.n_kv_head = 1;
    mc.ffn_hidden = 4;
    mc.vocab = 4;
    mc.seq_len = 2;
    mc.norm_eps = 1e-5;
    mc.rope_theta = 10000.0;
    float params[256] = {0};
    if (zs_model_count_params(&mc) > sizeof params / sizeof params[0])
        return -1;
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", fuzz_dir);
    if (zs_weights_write_sharded(path, ZS_WEIGHTS_SAFETENSORS, &mc, params, 64) != 0)
        return -1;
    made = 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fuzz_index_shards() != 0)
        abort(); /* the fixture itself must be writable */
    const char *path = fuzz_infile("in.index.json", data, size);
    zs_st_set s;
    if (!path || zs_st_set_open(&s, path) != 0)
        return 0;
    for (int i = 0; i < s.n; i++) {
        const zs_st_tensor *t = zs_st_set_tensor(&s, i);
        if (zs_st_set_find(&s, t->name) != i)
            abort(); /* a name found as another tensor */
        uint64_t bytes = t->end - t->begin;
        void *buf = malloc((size_t)bytes + 1);
        if (buf && zs_st_set_read(&s, i, 0, buf, (size_t)bytes) != 0)
            abort(); /* every file was checked: every tensor reads */
        free(buf);
    }
    zs_st_set_close(&s);
    zs_model_config mc;
    if (zs_weights_probe(path, &mc) != 0)
        return 0;
    if (!mc.n_head)
        mc.n_head = 2;
    if (zs_weights_probe_heads(path, &mc) != 0)
        return 0;
    if (!mc.seq_len)
        mc.seq_len = 2;
    if (mc.norm_eps == 0.0)
        mc.norm_eps = 1e-5;
    if (mc.rope_theta == 0.0)
        mc.rope_theta = 10000.0;
    if (zs_model_config_validate(&mc) != 0)
        return 0;
    size_t n = zs_model_count_params(&mc);
    float *params = n <= ((size_t)1 << 20) ? malloc(n * sizeof(float) + 1) : NULL;
    if (params)
        (void)zs_weights_read(path, &mc, params);
    free(params);
    return 0;
}
