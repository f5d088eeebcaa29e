/* zerosim fuzz target: the DeepSpeed-style JSON configuration reader.
 *
 * The input is a configuration file's text. It is loaded over the defaults
 * (zs_config_load_string) and, when it loads, finalized for one and for
 * three ranks (zs_run_config_finalize), as `zerosim train --config` does.
 * Errors are expected; crashes, hangs, leaks and sanitizer reports are not.
 */
#include "zerosim/config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    zs_run_config c;
    zs_run_config_defaults(&c);
    if (zs_config_load_string(text, "fuzz.json", &c) == 0) {
        zs_run_config c3 = c;
        (void)zs_run_config_finalize(&c, 1);
        (void)zs_run_config_finalize(&c3, 3);
    }
    free(text);
    return 0;
}
