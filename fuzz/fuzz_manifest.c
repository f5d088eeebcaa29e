/* zerosim fuzz target: checkpoint manifests (--resume, export --from,
 * eval --from, quantize and compress --from).
 *
 * The input is a manifest's text, written as DIR/global_step1/manifest.json
 * and checked as every reader checks it first (zs_ckpt_check: format,
 * version, its own checksum, the mesh, sizes and every file's ranks and
 * range). So that mutations reach the checks past the checksum, a
 * "manifest_xxh3": "<16 characters>" found once in the text gets the
 * text's right checksum first (computed as zerosim does: the digits read
 * as zeros). Errors are expected; crashes, hangs, leaks and sanitizer
 * reports are not.
 */
#include "infile.h"
#include "zerosim/checkpoint.h"

#include <inttypes.h>
#include <sys/stat.h>
#include <xxhash.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char key[] = "\"manifest_xxh3\": \"";
    size_t kl = sizeof key - 1;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    char *at = NULL;
    int seen = 0;
    for (size_t i = 0; i + kl + 17 <= size; i++)
        if (!memcmp(text + i, key, kl)) {
            at = text + i + kl;
            seen++;
        }
    if (seen == 1 && at[16] == '"') {
        memcpy(at, "0000000000000000", 16);
        char sum[17];
        snprintf(sum, sizeof sum, "%016" PRIx64, (uint64_t)XXH3_64bits(text, size));
        memcpy(at, sum, 16);
    }
    char folder[400], manifest[4096];
    if (fuzz_folder()) {
        snprintf(folder, sizeof folder, "%s/global_step1", fuzz_folder());
        mkdir(folder, 0700);
        if (fuzz_infile("global_step1/manifest.json", (const uint8_t *)text, size))
            (void)zs_ckpt_check(folder, "--resume", manifest, sizeof manifest);
    }
    free(text);
    return 0;
}
