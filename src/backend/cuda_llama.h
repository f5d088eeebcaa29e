/* zerosim — the CUDA backend's kernels of the Llama family (cuda_llama.cu),
 * for cuda.cu's table. Arguments as the members of struct zs_backend_i. */
#ifndef ZEROSIM_CUDA_LLAMA_H
#define ZEROSIM_CUDA_LLAMA_H

/* internal to the module: not exported from zerosim_cuda.so */
#pragma GCC visibility push(hidden)

void cuda_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *inp,
                          const float *weight, int bt, int c, float eps);
void cuda_rmsnorm_backward(void *ctx, float *dinp, float *dweight, const float *dout,
                           const float *inp, const float *weight, const float *rstd, int bt,
                           int c);
void cuda_swiglu_forward(void *ctx, float *out, const float *inp, int bt, int f);
void cuda_swiglu_backward(void *ctx, float *dinp, const float *inp, const float *dout, int bt,
                          int f);
void cuda_rope_forward(void *ctx, float *x, const float *table, int b, int t, int nheads, int hd,
                       int row_stride, int pos0);
void cuda_rope_backward(void *ctx, float *dx, const float *table, int b, int t, int nheads, int hd,
                        int row_stride, int pos0);
void cuda_attention_gqa_forward(void *ctx, float *out, float *preatt, float *att,
                                const float *qkv, int b, int t, int nh, int nkv, int hd);
void cuda_attention_gqa_backward(void *ctx, float *dqkv, float *dpreatt, float *datt,
                                 const float *dout, const float *qkv, const float *att, int b,
                                 int t, int nh, int nkv, int hd);

#pragma GCC visibility pop

#endif
