/* zerosim — GPT and Llama-family weights in other tools' formats.
 *
 * Two formats, both full fp32 parameters of the tp = 1 model:
 *
 * - safetensors with the tensor names and shapes of Hugging Face's GPT-2
 *   checkpoints (gpt2's model.safetensors): wte.weight [V,C], wpe.weight
 *   [T,C], h.{i}.ln_1.weight [C], h.{i}.ln_1.bias, h.{i}.attn.c_attn.weight
 *   [C,3C], h.{i}.attn.c_attn.bias [3C], h.{i}.attn.c_proj.weight [C,C],
 *   h.{i}.attn.c_proj.bias, h.{i}.ln_2.weight/bias, h.{i}.mlp.c_fc.weight
 *   [C,4C], h.{i}.mlp.c_fc.bias [4C], h.{i}.mlp.c_proj.weight [4C,C],
 *   h.{i}.mlp.c_proj.bias, ln_f.weight/bias. Hugging Face's Conv1D stores a
 *   weight as (in, out), the transpose of zerosim's (out, in) rows. The
 *   metadata names the shapes (n_layer, n_head, n_embd, n_ctx, vocab_size),
 *   since the tensors do not say the number of heads.
 * - safetensors with the names and shapes of Hugging Face's
 *   LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM (the Llama
 *   family's layout entries, src/model/llama.c: model.embed_tokens.weight
 *   [V,C], model.layers.{i}.input_layernorm.weight [C],
 *   .self_attn.{q,k,v,o}_proj.weight [out,in] (+ q/k/v biases for Qwen2),
 *   .post_attention_layernorm.weight, .mlp.{gate,up,down}_proj.weight,
 *   model.norm.weight, lm_head.weight when untied), no transposition and no
 *   RoPE permutation (weights_llama.c says why); metadata n_head,
 *   n_kv_head, n_ctx, rope_theta and rms_norm_eps among others.
 * Either safetensors kind may be one file or a Hugging Face sharded
 * checkpoint (model.safetensors.index.json and its shards; zerosim/io.h).
 * - llm.c's gpt2_*.bin: 256 int32 (20240326, version 3, maxT, V, L, NH, C,
 *   padded V), then the 16 tensors of train_gpt2.c in its order, each
 *   holding all L blocks: wte (Vp,C), wpe (maxT,C), ln1w (L,C), ln1b,
 *   qkvw (L,3C,C), qkvb (L,3C), attprojw (L,C,C), attprojb, ln2w, ln2b,
 *   fcw (L,4C,C), fcb (L,4C), fcprojw (L,C,4C), fcprojb, lnfw, lnfb. zerosim
 *   writes Vp = V rounded up to 128 (as llm.c's writer does), pad rows 0,
 *   and ignores the pad rows it reads.
 *
 * Readers check everything they read and fail with one line naming the file
 * and what is wrong; writers write atomically (zerosim/io.h).
 */
#ifndef ZEROSIM_WEIGHTS_H
#define ZEROSIM_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>
#include "zerosim/io.h"
#include "zerosim/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ZS_WEIGHTS_SAFETENSORS = 0, ZS_WEIGHTS_LLMC = 1 } zs_weights_format;

/* "safetensors" or "bin" (also "llmc"). */
int zs_weights_format_parse(const char *s, zs_weights_format *out);
/* From the path's extension (.safetensors, .bin); fails naming the path. */
int zs_weights_format_of(const char *path, zs_weights_format *out);
const char *zs_weights_format_name(zs_weights_format f);

/* One GPT tensor in Hugging Face's names and shapes, and where its values
 * are in zerosim's flat tp = 1 layout: numel floats from offset, stored as
 * (rows, cols) row-major; transpose = 1 when the file's tensor is its
 * transpose (a Conv1D weight [cols, rows]). */
typedef struct {
    char name[64];
    int ndim;
    uint64_t shape[2];
    size_t offset, numel, rows, cols;
    int transpose;
} zs_gpt_tensor;

/* The 4 + 12 L tensors of the GPT mc, in layout order (malloc'd in *out);
 * for a dense Llama-family mc its layout's entries, whose names and (out,
 * in) shapes are Hugging Face's already (the dumps and weight files use
 * them as they are). */
int zs_gpt_tensors(const zs_model_config *mc, zs_gpt_tensor **out, int *n);
/* The tensor's values from the flat parameters, in the file's layout. */
void zs_gpt_tensor_get(const zs_gpt_tensor *t, const float *params, float *out);
/* The inverse: the file's values into the flat parameters. */
void zs_gpt_tensor_put(const zs_gpt_tensor *t, const float *in, float *params);

/* Declare mc's tensors (names prefixed by prefix, "" for none) in w, then
 * give their data: together, a whole safetensors file of a GPT. */
int zs_gpt_st_declare(zs_st_writer *w, const char *prefix, const zs_model_config *mc);
int zs_gpt_st_data(zs_st_writer *w, const zs_model_config *mc, const float *params);

/* The shapes a weights file (or sharded checkpoint: its index or folder)
 * describes: kind GPT, n_layer, n_embd, seq_len, vocab and n_head (0 when
 * a safetensors file does not say it); or kind LLAMA, n_layer, n_embd,
 * vocab, ffn_hidden, qkv_bias, tie_embeddings, and n_head, n_kv_head,
 * seq_len, rope_theta and norm_eps from the metadata (0 when absent). One
 * line naming the file when it does not describe a model zerosim can build. */
int zs_weights_probe(const char *path, zs_model_config *mc);
/* A Llama mc whose n_head is known and n_kv_head 0: n_kv_head from the
 * file's k_proj rows (nothing for other models). */
int zs_weights_probe_heads(const char *path, zs_model_config *mc);
/* Read the file's parameters for the model mc (the shapes zs_weights_probe
 * gave, n_head set) into params (zs_model_count_params floats, the tp = 1
 * layout order). */
int zs_weights_read(const char *path, const zs_model_config *mc, float *params);
/* Write the GPT mc's fp32 parameters (tp = 1 layout order) as path, in
 * format f, atomically. */
int zs_weights_write(const char *path, zs_weights_format f, const zs_model_config *mc,
                     const float *params);
/* The same in shards of at most shard_bytes of tensor data (0: one file),
 * as zs_st_write_sharded names them, safetensors only. */
int zs_weights_write_sharded(const char *path, zs_weights_format f, const zs_model_config *mc,
                             const float *params, uint64_t shard_bytes);

#ifdef __cplusplus
}
#endif
#endif
