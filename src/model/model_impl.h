/* zerosim — model internals shared by the files of src/model. */
#ifndef ZEROSIM_MODEL_IMPL_H
#define ZEROSIM_MODEL_IMPL_H

#include "zerosim/layers.h"
#include "zerosim/model.h"

/* Per-model operations; one table each for the GPT and the MLP. */
typedef struct {
    /* fill the layout entries (names, numel, layer); offsets are set after */
    int (*build_layout)(const zs_model_config *c, zs_layout *lay);
    void (*init_range)(const zs_model *m, int entry, size_t first, size_t n, float *out,
                       uint64_t seed);
    size_t (*activation_bytes)(const zs_model_config *c, int b);
    size_t (*scratch_bytes)(const zs_model_config *c, int b);
    size_t (*checkpoint_bytes)(const zs_model_config *c, int b);
    /* optional: activations shared by a pipeline stage's slots (NULL: none) */
    size_t (*shared_activation_bytes)(const zs_model_config *c, int b);
    void (*bind_acts)(zs_acts *a);   /* carve views out of the two blocks */
    void (*forward_unit)(zs_model *m, zs_backend_t be, int l, float *const *P,
                         zs_acts *a, const zs_batch *batch);
    void (*backward_unit)(zs_model *m, zs_backend_t be, int l, float *const *P,
                          float *const *G, zs_acts *a, const zs_batch *batch, float dloss);
    /* tensor parallelism: element j of entry i as an element of that entry
     * in the tp = 1 model, and whether entry i is replicated */
    size_t (*tp_global)(const zs_model_config *c, int i, size_t j);
    int (*tp_replicated)(const zs_model_config *c, int i);
} zs_model_ops;

extern const zs_model_ops zs_gpt_ops;
extern const zs_model_ops zs_mlp_ops;
extern const zs_model_ops zs_llama_ops;

/* The decoders' shared, family-independent facts (src/model/decoder.c): a
 * pipeline stage's blocks [*b0, *b1] (0-based) and whether it has the head
 * (the whole model without a pipeline); the blocks whose activations exist
 * at once (K with checkpointing in segments of K, else L); whether a
 * pipeline stage checkpoints; its blocks that end a segment (its last
 * block left out); the positions of the residual stream (T, or T/tp with
 * sequence parallelism); the checkpoints' bytes (BTl x C floats for every
 * segment's input but the first, or per stage as counted above); the MoE
 * blocks among the stage's (the model's without a pipeline); the kinds of
 * blocks first, first + stride, ... up to last that one set of
 * activations takes turns holding (bit 1: a dense block, bit 2: a MoE
 * block). */
void zs_decoder_stage(const zs_model_config *c, int *b0, int *b1, int *head);
int zs_decoder_stage_moe_blocks(const zs_model_config *c);
int zs_decoder_block_kinds(const zs_model_config *c, int first, int last, int stride);
int zs_decoder_slots(const zs_model_config *c);
int zs_decoder_pp_ckpt(const zs_model_config *c);
size_t zs_decoder_pp_ckpt_count(const zs_model_config *c);
size_t zs_decoder_seq_local(const zs_model_config *c);
size_t zs_decoder_checkpoint_bytes(const zs_model_config *c, int b);
/* Partitioned checkpoints (DeepSpeed's partition_activations over the
 * tensor-parallel group): whether they apply; the checkpoints' views of
 * a decoder's slots (whole checkpoints redirect the segments' last
 * outputs, partitioned ones add ckpt_full); the input of block l; before
 * a recomputed segment's first block, the all-gather of its input; after
 * a segment's last block in the first forward, this rank's slice of its
 * output kept and the whole output as the next segment's input; whether
 * the forward of unit u, recomputed in a chunk whose first unit is ufirst,
 * gathers (zs_model_ckpt_gathers). */
int zs_decoder_ckpt_partitioned(const zs_model_config *c);
void zs_decoder_bind_checkpoints(zs_acts *a);
const float *zs_decoder_block_input(const zs_acts *a, int l);
void zs_decoder_ckpt_gather(zs_model *m, zs_backend_t be, zs_acts *a, int l, int unit);
void zs_decoder_ckpt_keep(zs_backend_t be, zs_acts *a, int l);
int zs_decoder_ckpt_gathers(const zs_model_config *c, int u, int ufirst);

/* Tensor and sequence parallelism's collectives over the model's
 * tensor-parallel group (src/model/decoder.c), for the GPT and the Llama
 * family: whether sequence parallelism is on; the all-gather of each
 * rank's (B, T/P, C) positions into full (B, T, C) through perm, and the
 * reduce-scatter back; Megatron's g and f, the sum of n floats in place;
 * a row-parallel linear's output summed (in place, or with sequence
 * parallelism reduce-scattered into a->s_loc; returns where the sum is);
 * the gradient of that output whole on every rank (dres, or gathered into
 * a->s_dfull). A failed collective sets m->tp_failed. */
int zs_decoder_sp(const zs_model_config *c);
void zs_decoder_sp_gather(zs_model *m, zs_backend_t be, float *full, const float *local,
                          float *perm, int B, int unit);
void zs_decoder_sp_scatter(zs_model *m, zs_backend_t be, float *local, const float *full,
                           float *perm, int B, int unit);
void zs_decoder_tp_sum(zs_model *m, float *x, size_t n, int unit);
void zs_decoder_head_loss(zs_model *m, zs_backend_t be, zs_acts *a, const int32_t *targets,
                          int BT, int V, int r, int unit);
const float *zs_decoder_row_sum(zs_model *m, zs_backend_t be, zs_acts *a, float *x, int B,
                                int unit);
const float *zs_decoder_dout_full(zs_model *m, zs_backend_t be, zs_acts *a, const float *dres,
                                  int B, int unit);

/* A MoE block's steps that both families take (src/model/moe.c): the
 * expert-parallel all-to-all that sends chunk q of send (E/Ep experts' Cap
 * rows, (E,Cap,C) in expert order) to rank q and receives each rank's
 * chunk for this rank's experts in source order (a copy without expert
 * parallelism); the router of block l (router (E, C) over a->ln2[l]:
 * logits, the softmax on the host, the routing into a->moe; the gates
 * kept in a->m_gates[l] forward, read back from there backward); block l's
 * routing statistics into a->moe_stats[l]; the objective's aux term
 * (a->moe_aux, from every MoE block's latest forward); with moe_ep_home,
 * the experts' gradients by source (a->s_gsrc, chunks of the nparts
 * stacked entries' parts) added into dst[k] in source order
 * (ZS_MOE_EP_BY_SOURCE) or sent to their owners and added there. */
void zs_moe_alltoall(zs_model *m, zs_backend_t be, float *recv, const float *send, size_t ecc,
                     int unit);
void zs_moe_route_block(zs_model *m, zs_backend_t be, zs_acts *a, int l, const float *router,
                        int BT, int forward);
void zs_moe_keep_stats(zs_acts *a, int l);
void zs_moe_sum_aux(zs_acts *a);
void zs_moe_grads_home(zs_model *m, zs_backend_t be, zs_acts *a, int l, float *const *dst,
                       const size_t *part, int nparts);

/* Context parallelism (src/model/ring_attention.c): the floats of one ring
 * message (this rank's keys and values, B·(T/C)·2C/tp); ring attention's
 * forward over the context group (out and stats, the forward's saved
 * [max, sum] per row and head, zerosim/backend.h) and its backward (dqkv
 * accumulates). ring: scratch of 2 (forward) or 4 (backward) messages. A
 * failed message sets m->tp_failed. */
size_t zs_ring_kv_floats(const zs_model_config *c, int b);
void zs_ring_attention_forward(zs_model *m, zs_backend_t be, float *ring, float *out,
                               float *stats, const float *qkv, int B, int unit);
void zs_ring_attention_backward(zs_model *m, zs_backend_t be, float *ring, float *dqkv,
                                const float *dout, const float *out, const float *stats,
                                const float *qkv, int B, int unit);
/* Ulysses (src/model/ulysses.c): the scratch its all-to-alls need (floats,
 * for a micro-batch of B); the forward takes qkv by positions (this rank's
 * T/U rows) and leaves it by heads in qkv_heads (every position, this
 * rank's heads: kept for the backward) and the output by positions in
 * out; the backward takes the output's gradient by positions and leaves
 * q, k, v's gradient by positions in dqkv (overwritten). preatt, att,
 * dpreatt, datt: the unsplit kernel's (B·H/U·T² each). A failed exchange
 * sets m->tp_failed. */
size_t zs_ulysses_scratch_floats(const zs_model_config *c, size_t B);
void zs_ulysses_attention_forward(zs_model *m, zs_backend_t be, float *scratch, float *preatt,
                                  float *out, float *att, float *qkv_heads, const float *qkv,
                                  int B, int unit);
void zs_ulysses_attention_backward(zs_model *m, zs_backend_t be, float *scratch, float *dpreatt,
                                   float *datt, float *dqkv, const float *dout, const float *att,
                                   const float *qkv_heads, int B, int unit);
/* The positions of the residual stream this rank computes: T / cp. */
size_t zs_decoder_seq_rank(const zs_model_config *c);
/* Exact sums of slices (c->tp_exact_slices > 0, docs/portable.md): whether
 * they are on; out(rows, n) = this rank's part of a product whose
 * reduction, of K values in the whole model, the tensor-parallel group
 * splits: op(A) (rows, Kl) times op(B) (Kl, n), A row-major with lda, B
 * (n, Kl) with trans_b, else (Kl, n), both with ldb. The reduction is nseg
 * equal segments (a fused QKV's q, k and v; else 1), each cut into the
 * same slices on every layout; each slice's product is rounded to its
 * row's grid (the group's largest slice value of the row, one max over the
 * group) and added, so that out summed over the group (zs_decoder_row_sum
 * or zs_decoder_tp_sum) is exact. */
int zs_decoder_exact(const zs_model_config *c);
/* The slices of a reduction of K values (of each segment) when P ranks
 * split it: the largest divisor of tp_exact_slices that divides K and
 * that P divides (the same on every layout whose P divides the largest
 * divisor that divides K), else P, one per rank (exact and deterministic,
 * but this layout's own). */
int zs_decoder_exact_slices(const zs_model_config *c, int K, int P);
void zs_decoder_exact_gemm(zs_model *m, zs_backend_t be, zs_acts *a, float *out, int trans_b,
                           int rows, int n, int K, int nseg, const float *A, int lda,
                           const float *B, int ldb, int unit);

/* The Llama family's counts and expert entries (src/model/llama.c). */
size_t zs_llama_count_params(const zs_model_config *c);
size_t zs_llama_count_expert_params(const zs_model_config *c);
int zs_llama_entry_is_expert(const zs_model_config *c, int i);
/* zs_model_moe_home_bytes of a Mixtral model: E experts' gate, up, down. */
double zs_llama_moe_home_bytes(const zs_model_config *c);
/* A Mixtral block's experts (src/model/llama_moe.c): w and g the router's,
 * and the stacked gate's, up's and down's parameters and gradients (the
 * experts this rank holds). Forward: out (BT, C) = the experts' outputs
 * over a->ln2[l], combined; backward: dln2 (BT, C) = the gradient of
 * a->ln2[l] from dout, the gradient of out; gradients added into g. The
 * experts' gradients by source (zs_model_moe_source_grads). */
void zs_llama_moe_forward(zs_model *m, zs_backend_t be, int l, const float *const *w,
                          zs_acts *a, float *out, int B, int u);
void zs_llama_moe_backward(zs_model *m, zs_backend_t be, int l, const float *const *w,
                           float *const *g, zs_acts *a, float *dln2, const float *dout, int B,
                           int u, float dloss);
const float *zs_llama_moe_source_grads(const zs_model *m, const zs_acts *a, size_t *chunk);

#define ZS_MAX_USES ZS_MAX_USES_PUBLIC

struct zs_model {
    zs_model_config cfg;
    zs_layout layout;
    const zs_model_ops *ops;
    int (*uses)[ZS_MAX_USES];  /* [n_layers][ZS_MAX_USES] entry ids */
    int *uses_count;           /* [n_layers] */
    struct zs_comm *tp;        /* tensor-parallel group (cfg.tp > 1) */
    struct zs_comm *ep;        /* expert-parallel group (cfg.moe_ep > 1) */
    struct zs_comm *cp;        /* context-parallel group (cfg.cp > 1) */
    size_t *full_offset;       /* [n_entries] each entry's offset at tp = 1 */
    int tp_failed;             /* a tensor-parallel collective failed */
};

/* Activations: two blocks from the accounting allocator, carved into views. */
struct zs_acts {
    const zs_model *m;
    zs_mem_t mem;
    int b;
    float *saved;            /* category activations */
    size_t saved_bytes;
    float *scratch;          /* category workspace */
    float *ckpt;             /* category checkpoints */
    size_t ckpt_bytes;
    float *ckpt_full;        /* partitioned checkpoints: the whole input of the
                                segment in flight, after the slices in ckpt */
    int recompute;           /* the forwards recompute a segment */
    size_t scratch_bytes;
    int shared_scratch;      /* pipeline slot: scratch is another's */
    float *work;             /* pipeline with checkpointing: the blocks' working
                                slots, in slot 0's saved block (after its own) */
    float *losses;           /* (B,T) or (B): per-position losses */
    size_t n_losses;
    /* GPT views; per-block arrays have n_layer entries */
    float *encoded;
    float **ln1, **ln1_mean, **ln1_rstd, **qkv, **atty, **att, **res2;
    float **ln2, **ln2_mean, **ln2_rstd, **fch, **fch_gelu, **res3;
    float *lnf, *lnf_mean, *lnf_rstd, *probs;
    /* GPT scratch */
    float *s_tmp, *s_dres, *s_datty, *s_dqkv, *s_dfch, *s_dfch_gelu, *s_preatt, *s_datt, *s_logits;
    float *s_ulysses; /* Ulysses' all-to-all buffers (zs_ulysses_scratch_floats) */
    float *s_rowmax, *s_sums;  /* tensor parallelism: the vocab-parallel loss */
    float *s_xtmp, *s_xmax;    /* exact sums of slices (tp_exact_slices): a slice's
                                  result (BT,C), its rows' largest magnitude (BT) */
    float *s_rope;           /* the Llama family: the rotary table (T, D), in scratch */
    float *s_kvgrad;         /* the Llama family with replicated key/value heads: the
                                k and v weights' (and biases') gradients of every
                                head, summed over the group */
    float *s_perm, *s_dfull, *s_loc; /* sequence parallelism: chunks in rank order,
                                        a gathered gradient, this rank's positions */
    /* mixture of experts, per MoE block (NULL in dense blocks): the gates
     * (BT,E), the experts' input (E,Cap,C), their inner activations before
     * and after GELU (E,Cap,4C) and their output (E,Cap,C) */
    float **m_gates, **m_xin, **m_fch, **m_gelu, **m_out;
    float *s_gl;             /* scratch: logits, then their gradient (BT,E) */
    float *s_me1, *s_me2;    /* scratch: (E,Cap,C) each */
    float *s_gsrc, *s_grecv; /* scratch, expert parallelism with moe_ep_home:
                                the experts' gradients by source, sent and
                                received (E experts' parameters each) */
    zs_moe_routing *moe;     /* host routing of the current MoE block */
    zs_moe_stats *moe_stats; /* [n_layer]: of each block's last forward */
    double *moe_laux;        /* [n_layer]: each block's l_aux, last forward */
    double moe_aux;          /* aux coefficient x sum of l_aux, last forward */
    /* MLP views: per hidden layer pre- and post-activation */
    float **h, **a;
    float *s_d0, *s_d1, *s_dh;
    void *view_arrays;       /* malloc'd storage of the pointer arrays */
};

/* Deterministic random numbers (src/model/rng.c): splitmix64 stream and
 * helpers. */
uint64_t zs_rng_next(uint64_t *state);
double zs_rng_uniform(uint64_t *state);         /* [0,1) */
double zs_rng_normal(uint64_t *state);          /* N(0,1), Box-Muller */
uint64_t zs_rng_mix(uint64_t a, uint64_t b);    /* hash two words into a seed */

/* A layout being built (src/model/layout.c): add an entry (the entries
 * array grows); free what it holds. */
int zs_layout_add(zs_layout *lay, const char *name, size_t numel, int layer);
void zs_layout_free(zs_layout *lay);

/* The GPT's entries (src/model/gpt.c), in layout order. */
enum {
    B_LN1W, B_LN1B, B_QKVW, B_QKVB, B_PROJW, B_PROJB,
    B_LN2W, B_LN2B, B_FCW, B_FCB, B_FCPW, B_FCPB, B_NENT
};
/* A mixture-of-experts block: the first 8 entries as above, then the
 * router's weight (E, C) and the experts' MLPs stacked along their first
 * dimension (expert e's rows are the e-th slice of each). Entry kinds of
 * such a block are numbered from B_NENT on. */
enum { M_GATEW = B_NENT, M_FCW, M_FCB, M_FCPW, M_FCPB, M_KIND_END };
#define M_NENT (B_LN2B + 1 + (M_KIND_END - M_GATEW)) /* entries of a MoE block */

/* The expert layout (src/model/moe.c): entry index of block l's first entry
 * (block l of L: the final LayerNorm), and the block of entry i (-1 outside
 * blocks) with its kind (B_* or M_*) in *kind. */
int zs_moe_block_first_entry(const zs_model_config *c, int l);
int zs_moe_entry_block(const zs_model_config *c, int i, int *kind);

#endif
