/* zerosim — models over one flat parameter layout.
 *
 * A model's parameters are one flat array described by a layout: a table of
 * (name, offset, numel, layer) entries in order, each layer's entries
 * contiguous. "Layer" here is a unit of execution that the engine runs in
 * order (GPT: 0 = embeddings, 1..L = blocks, L+1 = final LayerNorm and the
 * tied output head; MLP: one unit per linear layer). The ZeRO engine shards
 * this array; padding to a multiple of the rank count is the engine's.
 *
 * The engine drives the model unit by unit and hands each unit fp32 views of
 * the parameters (P[e]) and gradient accumulators (G[e]) of the entries the
 * unit uses (zs_model_unit_uses), so the same model code runs whether
 * parameters are stored in fp32, bf16 or fp16, replicated or sharded.
 */
#ifndef ZEROSIM_MODEL_H
#define ZEROSIM_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "zerosim/backend.h"
#include "zerosim/mem.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZS_MLP_MAX_HIDDEN 64
#define ZS_MAX_USES_PUBLIC 16   /* most entries one unit uses */

/* ZS_MODEL_LLAMA: the Llama family's decoder (src/model/llama.c): Llama 2/3,
 * Mistral, Qwen2 (qkv_bias) and Mixtral (moe_experts). */
typedef enum { ZS_MODEL_MLP = 0, ZS_MODEL_GPT = 1, ZS_MODEL_LLAMA = 2 } zs_model_kind;

/* zs_model_config.tp_exact_slices of a deterministic run on the portable
 * backend: tensor-parallel sizes 1, 2 and 4 give the same bytes. */
#define ZS_TP_EXACT_SLICES 4
/* the most slices --exact-slices takes */
#define ZS_EXACT_SLICES_MAX 64
typedef enum { ZS_ACT_RELU = 0, ZS_ACT_GELU = 1 } zs_activation;

typedef struct {
    zs_model_kind kind;
    /* GPT-2-style decoder */
    int n_layer;      /* transformer blocks */
    int n_embd;       /* hidden size C */
    int n_head;       /* attention heads NH (divides C) */
    int seq_len;      /* T, also the number of learned positions */
    int vocab;        /* V */
    int ckpt_blocks;  /* activation checkpointing: blocks per segment, 0 = off */
    /* DeepSpeed's partition_activations with tp > 1 (src/model/decoder.c,
     * zs_decoder_ckpt_partitioned): each tensor-parallel rank keeps 1/tp of
     * every checkpoint and the group all-gathers a segment's before its
     * recompute. 0: whole checkpoints. */
    int ckpt_partition;
    /* tensor parallelism (Megatron-LM, arXiv 1909.08053): with tp > 1 the
     * model of rank tp_rank holds its shard only: attention QKV column-
     * parallel by heads, its output projection row-parallel, the MLP's
     * first linear column-parallel and second row-parallel, the token
     * embedding (and the tied head) vocab-parallel; LayerNorms, position
     * embedding and the row-parallel biases replicated. 0 or 1: none. */
    int tp, tp_rank;
    int sequence_parallel; /* Korthikanti et al.: not implemented yet */
    /* context parallelism (Megatron-LM): with cp > 1 this rank computes
     * seq_len / cp positions of each sample, chunks cp_rank and
     * 2 cp - 1 - cp_rank of 2 cp equal chunks (load balanced), and the
     * attention is ring attention over the context-parallel group
     * (src/model/ring_attention.c). 0 or 1: none. With cp_attention
     * ZS_CP_ULYSSES (DeepSpeed-Ulysses, src/model/ulysses.c) the rank holds
     * the contiguous chunks 2 cp_rank and 2 cp_rank + 1 instead, and the
     * attention is two all-to-alls around the unsplit kernel on the
     * rank's n_head / (tp cp) heads. */
    int cp, cp_rank;
    int cp_attention; /* ZS_CP_RING (0) or ZS_CP_ULYSSES */
    /* The portable backend with deterministic sums (docs/portable.md):
     * tensor parallelism's sums over a split reduction (the row-parallel
     * linears, the column-parallel linears' input gradients, the
     * vocab-parallel loss's sums) are sums of this many fixed slices of
     * the reduction, each slice's result rounded to a grid of its row on
     * which float addition is exact (zs_decoder_exact_gemm), so that tp
     * sizes dividing it give the same bytes. 0: plain sums. The GPT's
     * (zs_train sets ZS_TP_EXACT_SLICES there); the Llama family's sums
     * are plain. */
    int tp_exact_slices;
    /* pipeline parallelism: with pp_on the model's activations (and the
     * loss's scratch) cover units pp_first .. pp_last only, one pipeline
     * stage's; the layout stays the whole model's. The stage's input
     * (the previous stage's output) is `encoded`; pp_stage is its index.
     * 0: the whole model. */
    int pp_on, pp_stage, pp_first, pp_last;
    /* mixture of experts (DeepSpeed-MoE, arXiv 2201.05596; gating as
     * DeepSpeed's TopKGate): with moe_experts E > 0 the MLP of every
     * moe_every-th block (blocks l with (l + 1) % moe_every == 0, 0-based)
     * is E expert MLPs behind a softmax router that sends each token to its
     * moe_top_k (1 or 2) best experts, at most capacity tokens per expert
     * (zs_moe_capacity); the load-balancing loss times moe_aux_coeff is
     * added to the objective. With moe_ep > 1 (expert parallelism) this
     * rank's model holds experts [moe_ep_rank * E / moe_ep, ...) only. */
    int moe_experts, moe_every, moe_top_k, moe_min_capacity;
    double moe_capacity_factor;
    double moe_aux_coeff;
    int moe_ep, moe_ep_rank;
    /* With moe_ep > 1: 0 sums each expert's weight gradients over the
     * sources in rank order on the expert's rank (the gradients of its own
     * E/Ep experts); 1 sends each source's part back to the source with one
     * more all-to-all per MoE block backward, so that every rank holds the
     * gradients of every expert from its own tokens, byte for byte those
     * of moe_ep = 1 (the caller's gradient views of the stacked expert
     * entries then hold all E experts; the parameter views E/Ep). */
    int moe_ep_home; /* 0, ZS_MOE_EP_HOME or ZS_MOE_EP_BY_SOURCE (below) */
    /* With moe_ep > 1: 1 lays the stacked expert entries out after every
     * other entry, outside num_params (zs_layout.num_expert), so that the
     * flat array [0, num_params) is the dense model that ZeRO partitions
     * over the data-parallel group, and the experts the part it partitions
     * over the expert-data-parallel group (DeepSpeed's layout). */
    int moe_ep_split;
    /* The Llama family (kind ZS_MODEL_LLAMA; the GPT ignores these): the
     * SwiGLU MLP's intermediate size (gate and up (F, C), down (C, F)); the
     * key/value heads of grouped-query attention (1..n_head, dividing it:
     * 1 = MQA, n_head = MHA); RMSNorm's epsilon; RoPE's base; Llama 3.1's
     * rope scaling (rope_scaling_factor 0 = none; else its low and high
     * frequency factors and the original context length); Qwen2's biases
     * of q, k and v (qkv_bias 1); the output head tied to the embedding
     * (tie_embeddings 1; Llama's default is an untied lm_head). With
     * moe_experts the MLP of every moe_every-th block is E SwiGLU experts;
     * moe_renormalize 1 renormalises the chosen top-k router weights to sum
     * to 1 (Mixtral), 0 keeps the softmax's (DeepSpeed's TopKGate). */
    int ffn_hidden;
    int n_kv_head;
    double norm_eps;
    double rope_theta;
    double rope_scaling_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;
    int qkv_bias;
    int tie_embeddings;
    int moe_renormalize;
    /* attention through a window of this many positions (Mistral); 0: none.
     * Modelled only where it changes nothing: at most model.seq is refused. */
    int sliding_window;
    /* MLP */
    int input_dim;
    int n_classes;
    int n_hidden;                       /* hidden layers */
    int widths[ZS_MLP_MAX_HIDDEN];      /* their widths */
    zs_activation act;
} zs_model_config;

/* Mixture of experts: whether block l (0-based) is a mixture-of-experts
 * block (the capacity is zs_moe_capacity, zerosim/layers.h; this and
 * zs_model_entry_is_expert, the expert layout, are src/model/moe.c's). */
int zs_model_block_is_moe(const zs_model_config *c, int l);
/* Parameters of the expert MLPs alone (all E experts of every MoE block). */
size_t zs_model_count_expert_params(const zs_model_config *c);

/* 1 for the decoders (GPT, Llama): token models whose units are 0 the
 * embeddings, 1..n_layer the blocks, n_layer + 1 the final norm and the
 * head. 0 for the MLP. */
int zs_model_is_decoder(const zs_model_config *c);
/* 1 when the head uses the token embedding (the GPT; Llama with
 * tie_embeddings), so a pipeline keeps a copy on its last stage. */
int zs_model_head_tied(const zs_model_config *c);
/* The family's name ("mlp", "gpt", "llama"). */
const char *zs_model_kind_name(zs_model_kind k);
/* 0 when the family can run for real (it has a forward and a backward),
 * else non-zero with one line (phantom runs and the planner need only the
 * shapes). */
int zs_model_check_runnable(const zs_model_config *c);
/* 0 when a phantom run of the family measures every collective the
 * planner counts; a family without a forward makes no tensor- or
 * expert-parallel collectives, so tp > 1 and moe_ep > 1 are refused with
 * one line. */
int zs_model_check_phantom(const zs_model_config *c);

/* A Llama's work per token for the planner's step time: *gemm_weights the
 * blocks' matrix elements a token goes through (q, k, v, o, and gate, up,
 * down, or top-k experts' and the router's), summed over the blocks;
 * *act_width the width of one block's SwiGLU (F, or k F), averaged over
 * the blocks. */
void zs_model_llama_token_work(const zs_model_config *c, double *gemm_weights, double *act_width);
/* A dense Llama's entry i of the tp = 1 layout as Hugging Face stores it
 * (its Linear weights are (out, in), zerosim's rows): the columns of a
 * matrix (rows = numel / cols), 0 for a vector (the norms, the biases). */
size_t zs_model_llama_entry_cols(const zs_model_config *c, int i);
/* Tensor parallelism with replicated key/value heads (tp > kv_heads): the
 * floats of every head's k and v gradients (weights, and Qwen2's biases)
 * that each block's backward sums over the tensor-parallel group (each
 * head's copies hold a share); 0 when the heads are split. */
size_t zs_llama_kv_grad_floats(const zs_model_config *c);

/* Check shapes; 0 or non-zero with a one-line message naming the field. */
int zs_model_config_validate(const zs_model_config *c);
/* 1 when entry i of the model's layout is a stacked expert entry of a MoE
 * block (fc.w, fc.b, proj.w, proj.b of the experts; not the router). */
int zs_model_entry_is_expert(const zs_model_config *c, int i);

typedef struct {
    char name[64];   /* Hugging Face's longest Llama names need 52 */
    size_t offset;   /* elements from the start of the flat array */
    size_t numel;
    int layer;
} zs_param_entry;

typedef struct {
    zs_param_entry *entries;
    int n_entries;
    size_t num_params;       /* Ψ, unpadded */
    size_t num_expert;       /* moe_ep_split: the experts' elements, laid out
                                at [num_params, num_params + num_expert) and
                                not counted in num_params or layer_numel */
    int n_layers;
    size_t *layer_offset;    /* [n_layers] first element of each layer */
    size_t *layer_numel;     /* [n_layers] */
} zs_layout;

typedef struct zs_model zs_model;

int zs_model_create(const zs_model_config *c, zs_model **out);
void zs_model_destroy(zs_model *m);
const zs_layout *zs_model_layout(const zs_model *m);
const zs_model_config *zs_model_get_config(const zs_model *m);
/* Count parameters without building anything (for any size of model): the
 * whole model, whatever tp says. */
size_t zs_model_count_params(const zs_model_config *c);

/* Tensor parallelism. The communicator of the tensor-parallel group (its
 * size cfg.tp, this rank cfg.tp_rank); the model's forward and backward
 * all-reduce over it (two of BT x C floats forward and two backward per
 * block, Megatron's f and g; the vocab-parallel embedding one forward; the
 * vocab-parallel cross-entropy a max and a sum of BT and 2 BT floats). The
 * caller sets its ledger context and backend. Returns 0, or non-zero when
 * its size or rank differ from the configuration's. */
struct zs_comm;
int zs_model_set_tp_comm(zs_model *m, struct zs_comm *tp);
/* Expert parallelism: the communicator of the expert-parallel group (its
 * size cfg.moe_ep, this rank cfg.moe_ep_rank); every MoE block's forward
 * and backward exchange the expert buffers over it with two all-to-alls
 * each. Returns non-zero when its size or rank differ. */
int zs_model_set_ep_comm(zs_model *m, struct zs_comm *ep);
/* Context parallelism (src/model/ring_attention.c): the communicator of the
 * context-parallel group (its size cfg.cp, this rank cfg.cp_rank), over
 * which every block's ring attention passes keys, values and their
 * gradients. Returns non-zero when its size or rank differ. */
int zs_model_set_cp_comm(zs_model *m, struct zs_comm *cp);
/* The context-parallel size (1 without), and the chunk (of 2 cp) that a
 * context rank holds as its k-th (k = 0: chunk rank, k = 1: 2 cp - 1 -
 * rank): Megatron-LM's load balancing. */
enum { ZS_CP_RING = 0, ZS_CP_ULYSSES = 1 };
int zs_model_cp_size(const zs_model_config *c);
/* 1 when the context group's attention is Ulysses' all-to-all (cp > 1). */
int zs_model_cp_ulysses(const zs_model_config *c);
int zs_model_cp_chunk(const zs_model_config *c, int rank, int k);
/* In place, for each of b samples of seq_len tokens (host memory, row
 * after row): this rank's two chunks, first b x seq_len / cp entries. A
 * no-op without context parallelism or tokens; non-zero out of memory. */
int zs_model_cp_local_tokens(const zs_model_config *c, int32_t *tokens, int b);
/* The bytes one rank sends around the ring in one block's forward
 * (backward 0) or backward (1) for a micro-batch of b: *sends messages of
 * this rank's keys and values (and backward, as many of their gradients);
 * it receives as many. 0 without context parallelism. */
double zs_model_cp_ring_bytes(const zs_model_config *c, int b, int backward, int *sends);
/* Ulysses (src/model/ulysses.c): the bytes one rank sends to the other
 * ranks of the context group in one block's forward or backward for a
 * micro-batch of b, in *calls all-to-alls (two: the queries, keys and
 * values to heads, and the attention's output or its gradient back; the
 * backward's two carry the gradients). 0 without Ulysses. */
double zs_model_cp_a2a_bytes(const zs_model_config *c, int b, int *calls);
/* Element `local` of this shard's flat layout as an element of the tp = 1
 * layout of the same model (what zs_model_init_slice draws there, and
 * where a gathered parameter vector puts it); *run gets how many elements
 * from there are consecutive in both. SIZE_MAX beyond the shard. With
 * tp <= 1 the identity. */
size_t zs_model_tp_global_offset(const zs_model *m, size_t local, size_t *run);
/* Non-zero once a tensor-parallel collective of a forward or backward
 * failed (the message is in zs_error_msg); cleared by the call. */
int zs_model_tp_failed(zs_model *m);
/* 1 when the element belongs to a parameter every rank of the TP group
 * holds a copy of (LayerNorm, position embedding, row-parallel biases). */
int zs_model_tp_replicated(const zs_model *m, size_t local);

/* Entries used by unit l (its own, plus e.g. the tied embedding in the GPT
 * head). Returns the count; ids receives up to max entry indices. */
int zs_model_unit_uses(const zs_model *m, int l, int *ids, int max);
/* Elements of the entries unit l uses (what stage 3 gathers for it, what
 * its fp32 staging holds). */
size_t zs_model_unit_elems(const zs_model *m, int l);

/* Initialise the flat fp32 parameter array (num_params elements, host memory)
 * deterministically from seed: GPT-2's scheme (N(0,0.02), residual
 * projections scaled by 1/sqrt(2L), LayerNorm weights 1, biases 0); MLP:
 * Kaiming-uniform-style U(-1/sqrt(fan_in), 1/sqrt(fan_in)). */
void zs_model_init_params(const zs_model *m, float *params, uint64_t seed);
/* The same values for flat elements [lo, hi) only (0 beyond num_params),
 * so a shard can be initialised in small pieces. */
void zs_model_init_slice(const zs_model *m, size_t lo, size_t hi, float *out, uint64_t seed);

/* One micro-batch of B samples, device pointers.
 * GPT: tokens(B,T), targets(B,T). MLP: x(B,input_dim), targets(B). */
typedef struct {
    int b;
    int32_t *tokens;
    int32_t *targets;
    float *x;
} zs_batch;

/* Activations and backward scratch for micro-batches of B samples. */
typedef struct zs_acts zs_acts;
int zs_model_acts_create(const zs_model *m, zs_mem_t mem, int b, zs_acts **out);
void zs_model_acts_destroy(zs_acts *a);
/* Bytes of the activations saved for backward (category activations) and of
 * the backward scratch (category workspace) for B samples, from the shapes. */
size_t zs_model_activation_bytes(const zs_model_config *c, int b);
size_t zs_model_scratch_bytes(const zs_model_config *c, int b);
/* Bytes of the activation checkpoints (category checkpoints): with
 * checkpointing, the input of every segment but the first; partitioned
 * (ckpt_partition), this rank's 1/tp of each and one whole checkpoint, the
 * input of the segment being recomputed or run backward. */
size_t zs_model_checkpoint_bytes(const zs_model_config *c, int b);
/* Partitioned checkpoints (ckpt_partition): 1 when the recomputed forward
 * of unit u, in a pipeline chunk whose first unit is ufirst (0 without a
 * pipeline), starts from a checkpoint that the tensor-parallel group
 * all-gathers first (zs_model_boundary_elems floats; the step program's
 * count, zs_step_count.ckpt_gathers). */
int zs_model_ckpt_gathers(const zs_model_config *c, int u, int ufirst);
/* Whether the forwards that follow recompute a segment (the engine says so
 * before a recomputing forward, and clears it before the others): with
 * partitioned checkpoints a recompute gathers the segment's input, and
 * the first forward keeps this rank's slice of it. */
void zs_model_acts_set_recompute(zs_acts *a, int recompute);
/* A pipeline stage with activation checkpointing: the blocks' working
 * activations, shared by the micro-batches in flight (category activations,
 * allocated once); each micro-batch in flight holds
 * zs_model_activation_bytes and zs_model_checkpoint_bytes of its own.
 * 0 otherwise. */
size_t zs_model_shared_activation_bytes(const zs_model_config *c, int b);
/* Activation checkpointing: the number of segments and the units of segment
 * s ([*first, *last], GPT blocks are units 1..L). Without checkpointing there
 * is one segment. */
int zs_model_segments(const zs_model_config *c);
void zs_model_segment_units(const zs_model_config *c, int s, int *first, int *last);

/* Pipeline: activations for another micro-batch in flight that share
 * `share`'s backward scratch and working slots (only the saved activations
 * and, with checkpointing, the checkpoints are allocated). */
int zs_model_acts_create_slot(const zs_model *m, zs_mem_t mem, int b, const zs_acts *share,
                              zs_acts **out);
/* Pipeline: the stage's input and output activation (B,T,C) of unit l's
 * forward (its output: where the next unit reads it), and the gradient
 * with respect to it that a unit's backward leaves (its input) or takes
 * (its output); elements in *n. */
float *zs_model_unit_output(zs_acts *a, int l, size_t *n);
float *zs_model_input_grad(zs_acts *a, size_t *n);
/* Elements of one stage-boundary activation (B,T,C, or B,T/tp,C with
 * sequence parallelism) for micro-batches of b. */
size_t zs_model_boundary_elems(const zs_model_config *c, int b);

/* Forward of unit l; P[e] are fp32 views of the entries the unit uses. After
 * the last unit, zs_model_loss() returns the mean loss of the micro-batch. */
void zs_model_forward_unit(zs_model *m, zs_backend_t be, int l, float *const *P,
                           zs_acts *a, const zs_batch *batch);
float zs_model_loss(const zs_acts *a, zs_backend_t be);
/* Its mean over the positions without the aux term (a double; NAN when out
 * of host memory): a pipeline's last stage adds the other stages' aux
 * terms to it (zs_model_moe_aux_term). */
double zs_model_token_loss(const zs_acts *a, zs_backend_t be);
/* The MLP after its last unit: of the micro-batch's first n samples (their
 * targets on the host), the sum of the losses in *loss_sum and in *correct
 * how many have the target as their most probable class (the first of
 * equal ones). -1 when out of host memory. */
int zs_model_score(const zs_acts *a, zs_backend_t be, const int32_t *targets, int n,
                   double *loss_sum, int *correct);
/* A decoder at tp = 1 after its last unit: the next-token distribution
 * (softmax of the logits) at row r of the micro-batch (sample b, position
 * t: r = b T + t) into out[vocab]; -1 with one line otherwise. */
int zs_model_next_probs(const zs_acts *a, zs_backend_t be, size_t r, float *out);
/* Mixture of experts: the part of zs_model_loss that is the load-balancing
 * loss (moe_aux_coeff x the sum of the MoE blocks' l_aux), 0 without. */
double zs_model_aux_loss(const zs_acts *a);
/* That term from each block's l_aux (l_aux[n_layer], the dense blocks'
 * unread): moe_aux_coeff x l_aux summed in block order from 0, the sum a
 * run without a pipeline makes after its last block. */
double zs_model_moe_aux_term(const zs_model_config *c, const double *l_aux);
/* The routing of MoE block l in its last forward (-1 when block l is not
 * a MoE block): tokens routed to each expert and kept, choices dropped,
 * l_aux, and a hash of every token's choices and slots (tests compare it). */
typedef struct {
    int experts, capacity, tokens, dropped;
    int routed[256], kept[256];   /* the first 256 experts */
    double l_aux;
    uint64_t route_hash;
} zs_moe_stats;
int zs_model_moe_stats(const zs_acts *a, int l, zs_moe_stats *out);
/* Expert parallelism (moe_ep = Ep > 1): the all-to-alls one micro-batch of
 * b sequences makes on each rank of the expert-parallel group, forward and
 * backward: four per MoE block (dispatch and combine, forward and
 * backward; a forward recomputed by activation checkpointing would add
 * two, not counted here: training with ep is not wired yet), each sending
 * (Ep - 1)/Ep of the (E, Cap, C) fp32 buffer to the other ranks. Returns
 * the bytes this rank sends (the ledger's wire bytes) and sets *calls;
 * 0 and 0 without expert parallelism. */
double zs_model_moe_alltoall_bytes(const zs_model_config *c, int b, int *calls);
/* With moe_ep_home: the all-to-all of each MoE block's backward that sends
 * the experts' gradients back to their sources, the bytes one call sends
 * ((Ep - 1)/Ep of E experts' parameters in fp32); 0 without. */
double zs_model_moe_home_bytes(const zs_model_config *c);
/* moe_ep_home values: ZS_MOE_EP_HOME sends the gradients home (above);
 * ZS_MOE_EP_BY_SOURCE keeps them on the expert's rank: each source's
 * gradients of this rank's E/Ep experts are computed from zero into a
 * block of their own (one GEMM per source and expert, as moe_ep = 1
 * computes them on the source, byte for byte) and then added into G in
 * source order; no all-to-all more. A reduction that must give moe_ep =
 * 1's bytes (per-source fixed point, or the sources summed in moe_ep = 1's
 * order) reads the blocks with zs_model_moe_source_grads. */
enum { ZS_MOE_EP_HOME = 1, ZS_MOE_EP_BY_SOURCE = 2 };
/* With ZS_MOE_EP_BY_SOURCE, after a MoE block's backward and until the
 * next one's: Ep blocks of *chunk floats, source q's from q * *chunk, each
 * laid out as this rank's slices of the block's stacked expert entries
 * (fc.w, fc.b, proj.w, proj.b, E/Ep experts each). NULL otherwise. */
const float *zs_model_moe_source_grads(const zs_model *m, const zs_acts *a, size_t *chunk);
/* Backward of unit l (call from the last unit down to 0). dloss is the
 * gradient of the objective with respect to the micro-batch's mean loss
 * (for example loss_scale / (grad_accum * world_size)). Gradients accumulate
 * into G[e] for the entries the unit uses. */
void zs_model_backward_unit(zs_model *m, zs_backend_t be, int l, float *const *P,
                            float *const *G, zs_acts *a, const zs_batch *batch, float dloss);

#ifdef __cplusplus
}
#endif
#endif
