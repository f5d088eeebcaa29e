/* zerosim — what weights.c and weights_llama.c share (internal). */
#ifndef ZEROSIM_WEIGHTS_IMPL_H
#define ZEROSIM_WEIGHTS_IMPL_H

#include "zerosim/io.h"
#include "zerosim/model.h"
#include "zerosim/weights.h"

/* The most metadata pairs a family writes. */
#define ZS_WEIGHTS_META_MAX 16

/* v as an int in 1..2^20, else one line naming path and what. */
int zs_weights_pos_int(const char *path, const char *what, uint64_t v, int *out);
/* The file's tensor s is F32 in t's shape, else one line naming path, the
 * tensor and model (the model's description). */
int zs_weights_check_shape(const char *path, const zs_st_tensor *s, const zs_gpt_tensor *t,
                           const char *model);

/* The Llama family (weights_llama.c). Its metadata pairs into meta (values
 * printed into v); returns the number of pairs. */
int zs_llama_st_meta(const zs_model_config *mc, char v[][32], const char **meta);
/* The shapes the set's tensors and metadata give (n_head and n_kv_head 0
 * when the metadata does not say them), every tensor checked. */
int zs_llama_st_probe(const zs_st_set *s, const char *path, zs_model_config *mc);
/* mc->n_kv_head from k_proj's rows, given mc->n_head. */
int zs_llama_st_kv_heads(const zs_st_set *s, const char *path, zs_model_config *mc);
/* Every tensor of mc present, F32, in its shape; no other but what
 * Hugging Face's files carry beside (rotary_emb.inv_freq). */
int zs_llama_st_check(const zs_st_set *s, const char *path, const zs_model_config *mc);

#endif
