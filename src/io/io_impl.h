/* zerosim — private to the safetensors reader (src/io/io.c) and its header
 * parser (st_header.c), one concern split in two files. */
#ifndef ZEROSIM_IO_IMPL_H
#define ZEROSIM_IO_IMPL_H

#include "zerosim/io.h"

#include <stddef.h>

/* Parse and check the header text (len bytes) of f, whose path, file_bytes
 * and data_start are set: its tensors into f->t and f->n, its metadata into
 * f->meta and f->nmeta, the name index built. One line naming the file on
 * error (f then holds what was read so far, for zs_st_close). */
int zs_st_header_parse(zs_st_file *f, const char *text, size_t len);

#endif
