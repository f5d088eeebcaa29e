/* zerosim — the CPU backend's kernels of the Llama family (cpu_llama.c),
 * for cpu.c's table. Arguments as the members of struct zs_backend_i. */
#ifndef ZEROSIM_CPU_LLAMA_H
#define ZEROSIM_CPU_LLAMA_H

void cpu_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *inp, const float *weight,
                         int bt, int c, float eps);
void cpu_rmsnorm_backward(void *ctx, float *dinp, float *dweight, const float *dout,
                          const float *inp, const float *weight, const float *rstd, int bt, int c);
void cpu_swiglu_forward(void *ctx, float *out, const float *inp, int bt, int f);
void cpu_swiglu_backward(void *ctx, float *dinp, const float *inp, const float *dout, int bt,
                         int f);
void cpu_rope_forward(void *ctx, float *x, const float *table, int b, int t, int nheads, int hd,
                      int row_stride, int pos0);
void cpu_rope_backward(void *ctx, float *dx, const float *table, int b, int t, int nheads, int hd,
                       int row_stride, int pos0);

#endif
