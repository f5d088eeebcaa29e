/* zerosim — what the CUDA backend's sources share (internal to cuda.cu and
 * cuda_llama.cu): launch shapes and the check after a CUDA call. */
#ifndef ZEROSIM_CUDA_UTIL_H
#define ZEROSIM_CUDA_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#define ZS_CU_THREADS 256
#define ZS_CU_MAX_BLOCKS 4096 /* grid-stride loops: a fixed cap on the grid */

/* A CUDA call that cannot fail in a correct program: on failure print where
 * and why, then abort (the kernels return void, like the CPU's). */
#define ZS_CU(call)                                                                 \
    do {                                                                            \
        cudaError_t zs_e_ = (call);                                                 \
        if (zs_e_ != cudaSuccess) {                                                 \
            fprintf(stderr, "zerosim: %s:%d: CUDA error in %s: %s\n", __FILE__,     \
                    __LINE__, #call, cudaGetErrorString(zs_e_));                    \
            abort();                                                                \
        }                                                                           \
    } while (0)
#define ZS_CU_LAUNCHED() ZS_CU(cudaGetLastError())

/* Blocks of ZS_CU_THREADS for n elements, at most ZS_CU_MAX_BLOCKS. */
static inline unsigned zs_blocks(size_t n)
{
    size_t b = (n + ZS_CU_THREADS - 1) / ZS_CU_THREADS;
    if (b < 1)
        b = 1;
    return (unsigned)(b > ZS_CU_MAX_BLOCKS ? ZS_CU_MAX_BLOCKS : b);
}

#define ZS_GRID_STRIDE(i, n)                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);           \
         i += (size_t)blockDim.x * gridDim.x)

/* Launch shapes: ZS_1D for grid-stride loops over n elements, ZS_ROWS for
 * one thread per row (128 a block). */
#define ZS_1D(n) zs_blocks(n), ZS_CU_THREADS
#define ZS_ROWS(n) (unsigned)(((n) + 127) / 128), 128

#endif
