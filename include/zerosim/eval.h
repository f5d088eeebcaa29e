/* zerosim — a model's loss on held-out synthetic data, without a run.
 *
 * Held-out samples are drawn from the run's synthetic task (the same seed:
 * the GPT's Markov chain, the MLP's teacher) at sample indices from
 * ZS_EVAL_FIRST_SAMPLE on, which no training run reaches (a run of S steps
 * of global batch G uses samples 0 .. S G - 1), so the loss is on data the
 * model never saw. One process, the cpu backend, one BLAS thread.
 */
#ifndef ZEROSIM_EVAL_H
#define ZEROSIM_EVAL_H

#include <stddef.h>
#include <stdint.h>
#include "zerosim/data.h"
#include "zerosim/mem.h"
#include "zerosim/model.h"
#include "zerosim/quant.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZS_EVAL_FIRST_SAMPLE ((uint64_t)1 << 40)

/* The mean loss of `samples` held-out samples (a multiple of mb, the
 * micro-batch) under params (zs_model_count_params floats, the layout's
 * order) in *loss, and the task's loss floor in *floor. With q (not
 * NULL), the linear weights are held quantized as q says (category
 * quantized_weights) and dequantized one unit at a time into a workspace
 * staging buffer before its forward, as an inference holds them; the other
 * entries are fp32 (params). Its buffers are accounted in their own
 * ledger; *stats (may be NULL) gets its figures per category. */
int zs_eval_loss(const zs_model_config *mc, uint64_t seed, const float *params,
                 const zs_quant_spec *q, int samples, int mb, double *loss, double *floor,
                 zs_mem_stats *stats);

/* The MLP on a part of an image set (zerosim/data.h: its held-out or test
 * images, all of them, in order): the mean loss per sample, the share of
 * samples whose most probable class is the label, and how many samples.
 * params and q as zs_eval_loss's; mb samples per forward (a last partial
 * micro-batch is padded and not counted). */
typedef struct {
    double loss;
    double accuracy;      /* in [0, 1] */
    uint64_t samples;
} zs_eval_score;
int zs_eval_split(const zs_model_config *mc, const zs_data *data, zs_data_split split,
                  const float *params, const zs_quant_spec *q, int mb, zs_eval_score *out,
                  zs_mem_stats *stats);

/* Sampling (zerosim sample): n_new tokens after the prompt's n_prompt
 * (at least one), each from the model's next-token distribution p at the
 * last position of the context (the last seq_len tokens, the rest of the
 * window zeros, which the causal model does not see). temperature 0: the
 * most probable token (the first of equal ones); T > 0: token k with
 * probability p_k^(1/T) / sum_j p_j^(1/T), that is softmax(logits / T),
 * by a uniform draw from (seed, k) alone: the same seed, the same tokens.
 * A decoder only (GPT or Llama family), one line otherwise; a prompt
 * token outside the vocabulary is refused. One process, the cpu backend. */
typedef struct {
    const int32_t *prompt;
    int n_prompt;
    int n_new;
    double temperature;
    uint64_t seed;
} zs_eval_sample_req;
int zs_eval_sample(const zs_model_config *mc, const float *params, const zs_eval_sample_req *rq,
                   int32_t *out);

/* A model's fp32 parameters from a file of any kind zerosim writes: a
 * checkpoint folder (tp = 1), GPT weights (.safetensors, llm.c .bin), a
 * quantized file (dequantized), a compressed file (decoded). */
typedef struct {
    zs_model_config mc;
    uint64_t seed;        /* of the synthetic data, when the file says it */
    int has_seed;
    const char *kind;     /* "checkpoint", "weights", "quantized", "compressed" */
    float *params;        /* [n] */
    size_t n;
    uint64_t file_bytes;  /* the file's size (0 for a checkpoint folder) */
} zs_model_src;

/* opt names the option in messages (e.g. "--from"); n_head: the heads of a
 * GPT weights file that does not say them (0: fail when it does not). */
int zs_model_src_load(const char *path, const char *opt, int n_head, zs_model_src *s);
void zs_model_src_free(zs_model_src *s);

#ifdef __cplusplus
}
#endif
#endif
