/* zerosim fuzz target: calibration files (plan --calibration, the JSON
 * that zerosim bench writes).
 *
 * The input is a file's bytes, loaded over the defaults
 * (zs_steptime_load_calibration). Errors are expected; crashes, hangs,
 * leaks and sanitizer reports are not.
 */
#include "infile.h"
#include "zerosim/steptime.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_infile("calibration.json", data, size);
    zs_steptime_calib c;
    zs_steptime_defaults(&c);
    if (path)
        (void)zs_steptime_load_calibration(path, &c);
    return 0;
}
