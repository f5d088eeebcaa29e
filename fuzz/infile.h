/* zerosim fuzz targets: the input written to a file, for readers that take
 * a path. One folder per process (mkdtemp under TMPDIR or /tmp), made on
 * first use and removed at exit; the file NAME in it is rewritten for each
 * input. Returns the file's path, or NULL when it cannot be written. */
#ifndef ZEROSIM_FUZZ_INFILE_H
#define ZEROSIM_FUZZ_INFILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_dir[256];

static void fuzz_dir_remove(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir);
    if (fuzz_dir[0] && system(cmd) != 0)
        fprintf(stderr, "fuzz: cannot remove %s\n", fuzz_dir);
}

/* The process's folder, made on first use; NULL when it cannot be. */
static const char *fuzz_folder(void)
{
    if (!fuzz_dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(fuzz_dir, sizeof fuzz_dir, "%s/zs-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(fuzz_dir)) {
            fuzz_dir[0] = '\0';
            return NULL;
        }
        atexit(fuzz_dir_remove);
    }
    return fuzz_dir;
}

static const char *fuzz_infile(const char *name, const uint8_t *data, size_t size)
{
    static char path[512];
    if (!fuzz_folder())
        return NULL;
    snprintf(path, sizeof path, "%s/%s", fuzz_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return NULL;
    int bad = size && fwrite(data, 1, size, f) != size;
    bad |= fclose(f) != 0;
    return bad ? NULL : path;
}

#ifdef FUZZ_MODEL_FILES
#include "zerosim/error.h"
#include "zerosim/io.h"
#include "zerosim/model.h"
#include "zerosim/quantfile.h"

/* 1 when the safetensors file at path names in its "model" metadata a
 * model of at most 4 million parameters: the readers then allocate its
 * parameters (a valid file of a larger model is valid, and slow). */
static int fuzz_model_small(const char *path)
{
    zs_st_file f;
    if (zs_st_open(&f, path) != 0) {
        zs_error_clear();
        return 1; /* the reader refuses it itself */
    }
    zs_model_config mc;
    const char *text = zs_st_meta(&f, "model");
    int small = !text || zs_model_config_from_json(text, path, &mc) != 0 ||
                zs_model_count_params(&mc) <= ((size_t)4 << 20);
    zs_st_close(&f);
    zs_error_clear();
    return small;
}
#endif

#endif
