/* zerosim fuzz target: the safetensors reader (weights, dumps, and the
 * files of checkpoints, quantized and compressed models are safetensors).
 *
 * The input is a file's bytes. It is opened (zs_st_open: the header parsed
 * and checked), every tensor looked up by its name and, when under 1 MiB,
 * read, and every metadata key looked up, as compare and the readers do.
 * Errors are expected; crashes, hangs, leaks and sanitizer reports are not.
 */
#include "infile.h"
#include "zerosim/error.h"
#include "zerosim/io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_infile("in.safetensors", data, size);
    zs_st_file f;
    if (!path || zs_st_open(&f, path) != 0)
        return 0;
    for (int i = 0; i < f.n; i++) {
        const zs_st_tensor *t = zs_st_find(&f, f.t[i].name);
        if (t != &f.t[i])
            abort(); /* a name found as another tensor */
        uint64_t bytes = t->end - t->begin;
        if (bytes != zs_st_numel(t) * zs_st_dtype_size(t->dtype))
            abort(); /* checked at open */
        if (bytes < ((uint64_t)1 << 20)) {
            void *buf = malloc((size_t)bytes + 1);
            if (buf && zs_st_read(&f, t, 0, buf, (size_t)bytes) != 0)
                abort(); /* the whole file was checked: every tensor reads */
            free(buf);
        }
    }
    for (int i = 0; i + 1 < f.nmeta; i += 2)
        if (!zs_st_meta(&f, f.meta[i]))
            abort();
    zs_st_close(&f);
    return 0;
}
