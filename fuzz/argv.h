/* zerosim fuzz targets: an input as an argument vector. The input's bytes
 * are the arguments, each ended by a NUL (a last one without its NUL counts
 * too); argv[0] is `name`. Returns the number of arguments, or -1 when the
 * input names a device or kernel file (/dev, /proc, /sys), which a target
 * that opens --config files must not read. The caller frees *argv and
 * *buf. */
#ifndef ZS_FUZZ_ARGV_H
#define ZS_FUZZ_ARGV_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ZS_FUZZ_MAX_ARGS 64

static int zs_fuzz_argv(const uint8_t *data, size_t size, const char *name, char ***argv,
                        char **buf)
{
    *argv = NULL;
    *buf = malloc(size + 1);
    if (!*buf)
        return -1;
    memcpy(*buf, data, size);
    (*buf)[size] = '\0';
    if (memmem(*buf, size, "/dev", 4) || memmem(*buf, size, "/proc", 5) ||
        memmem(*buf, size, "/sys", 4))
        return -1;
    char **v = calloc(ZS_FUZZ_MAX_ARGS + 2, sizeof *v);
    if (!v)
        return -1;
    int n = 0;
    v[n++] = (char *)name;
    for (size_t i = 0; i < size && n <= ZS_FUZZ_MAX_ARGS; i += strlen(*buf + i) + 1)
        v[n++] = *buf + i;
    v[n] = NULL;
    *argv = v;
    return n;
}

#endif
