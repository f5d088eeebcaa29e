/* zerosim — what the decoders (the GPT, src/model/gpt.c, and the Llama
 * family, src/model/llama.c) share and what depends on no family: a
 * pipeline stage's blocks, activation checkpointing's slots and
 * checkpoints. Units: 0 the embeddings, 1..L the blocks, L+1 the head. */
#include "model_impl.h"
#include "zerosim/comm.h"

void zs_decoder_stage(const zs_model_config *c, int *b0, int *b1, int *head)
{
    int L = c->n_layer;
    if (!c->pp_on) {
        *b0 = 0;
        *b1 = L - 1;
        *head = 1;
        return;
    }
    *b0 = (c->pp_first > 1 ? c->pp_first : 1) - 1;
    *b1 = (c->pp_last < L ? c->pp_last : L) - 1;
    *head = c->pp_last == L + 1;
}

int zs_decoder_stage_moe_blocks(const zs_model_config *c)
{
    int b0, b1, head, n = 0;
    zs_decoder_stage(c, &b0, &b1, &head);
    for (int l = b0; l <= b1; l++)
        n += zs_model_block_is_moe(c, l);
    return n;
}

int zs_decoder_block_kinds(const zs_model_config *c, int first, int last, int stride)
{
    int k = 0;
    for (int l = first; l <= last; l += stride)
        k |= zs_model_block_is_moe(c, l) ? 2 : 1;
    return k;
}

int zs_decoder_slots(const zs_model_config *c)
{
    return c->ckpt_blocks > 0 && c->ckpt_blocks < c->n_layer ? c->ckpt_blocks : c->n_layer;
}

int zs_decoder_pp_ckpt(const zs_model_config *c)
{
    return c->pp_on && zs_decoder_slots(c) < c->n_layer;
}

size_t zs_decoder_pp_ckpt_count(const zs_model_config *c)
{
    int b0, b1, head, K = zs_decoder_slots(c);
    size_t n = 0;
    zs_decoder_stage(c, &b0, &b1, &head);
    for (int l = b0; l < b1; l++)
        n += (l + 1) % K == 0;
    return n;
}

size_t zs_decoder_seq_rank(const zs_model_config *c)
{
    return (size_t)c->seq_len / (size_t)zs_model_cp_size(c);
}

size_t zs_decoder_seq_local(const zs_model_config *c)
{
    return zs_decoder_seq_rank(c) / (size_t)(c->tp > 1 && c->sequence_parallel ? c->tp : 1);
}

/* The checkpoints a micro-batch keeps: without a pipeline, the input of
 * every segment but the first; a pipeline stage, the output of each of its
 * blocks that ends a segment, but its last block's. */
static size_t zs_decoder_ckpt_count(const zs_model_config *c)
{
    if (c->pp_on)
        return zs_decoder_pp_ckpt(c) ? zs_decoder_pp_ckpt_count(c) : 0;
    int K = zs_decoder_slots(c);
    return (size_t)((c->n_layer + K - 1) / K - 1);
}

size_t zs_decoder_checkpoint_bytes(const zs_model_config *c, int b)
{
    size_t BTlC = (size_t)b * zs_decoder_seq_local(c) * (size_t)c->n_embd;
    size_t n = zs_decoder_ckpt_count(c);
    if (zs_decoder_ckpt_partitioned(c)) /* the slices, then one whole checkpoint */
        return 4 * (n * (BTlC / (size_t)c->tp) + BTlC);
    return 4 * n * BTlC;
}

/* ---- partitioned checkpoints (DeepSpeed's partition_activations) ---------
 * DeepSpeed's activation checkpointing with partition_activations keeps, of
 * each checkpoint, the contiguous 1/mp_size of its flat elements at
 * mp_rank * numel / mp_size, and all-gathers the pieces over the model-
 * parallel group before the recompute. Here: checkpoint i of a micro-batch
 * (the output of a segment's last block, BTl x C floats, the same on every
 * rank of the tensor-parallel group) is slice i of ckpt, floats
 * [r n, (r + 1) n) with n = BTl C / tp on rank r. ckpt_full, after the
 * slices, holds the whole input of the segment in flight: in the first
 * forward the next segment's (copied from the last block's output, which
 * stays in its slot), in the backward the one being recomputed and run
 * backward (gathered; a segment that is not recomputed reads the one its
 * forward left). The last blocks' outputs stay in their slots, so that a
 * recompute does not overwrite the input it started from. A pipeline
 * stage's first block reads the stage's input, never a checkpoint. With
 * context parallelism a checkpoint holds the rank's chunk (Tl = T / cp
 * positions), which the tensor-parallel group shares. Not
 * with sequence parallelism (its residual stream is already split over
 * the group: compat.c). */

int zs_decoder_ckpt_partitioned(const zs_model_config *c)
{
    return c->ckpt_partition && c->tp > 1 && zs_decoder_slots(c) < c->n_layer &&
           zs_decoder_ckpt_count(c) > 0;
}

void zs_decoder_bind_checkpoints(zs_acts *a)
{
    const zs_model_config *c = &a->m->cfg;
    int K = zs_decoder_slots(c), b0, b1, head;
    size_t BTlC = (size_t)a->b * zs_decoder_seq_local(c) * (size_t)c->n_embd, i = 0;
    zs_decoder_stage(c, &b0, &b1, &head);
    a->ckpt_full = NULL;
    if (zs_decoder_ckpt_partitioned(c)) {
        a->ckpt_full = a->ckpt + zs_decoder_ckpt_count(c) * (BTlC / (size_t)c->tp);
        return;
    }
    /* the last block of each segment but the final one (the stage's) writes
     * its output into the next segment's checkpoint */
    for (int l = b0; l < b1; l++)
        if ((l + 1) % K == 0)
            a->res3[l] = a->ckpt + i++ * BTlC;
}

/* Block l's input is a checkpoint: it starts a segment, after the stage's
 * first block. */
static int zs_decoder_ckpt_starts(const zs_model_config *c, int l)
{
    int b0, b1, head;
    zs_decoder_stage(c, &b0, &b1, &head);
    return l > b0 && l % zs_decoder_slots(c) == 0;
}

const float *zs_decoder_block_input(const zs_acts *a, int l)
{
    if (l == 0)
        return a->encoded;
    if (a->ckpt_full && zs_decoder_ckpt_starts(&a->m->cfg, l))
        return a->ckpt_full;
    return a->res3[l - 1];
}

/* The index of the checkpoint that block l >= 1 starting a segment reads:
 * the segment ends before it that lie in the stage. */
static size_t zs_decoder_ckpt_index(const zs_model_config *c, int l)
{
    int K = zs_decoder_slots(c), b0, b1, head;
    zs_decoder_stage(c, &b0, &b1, &head);
    return (size_t)(l / K - 1 - b0 / K);
}

void zs_decoder_ckpt_gather(zs_model *m, zs_backend_t be, zs_acts *a, int l, int unit)
{
    const zs_model_config *c = &m->cfg;
    int P = c->tp, counts[64], displs[64];
    if (!a->ckpt_full || !a->recompute || !zs_decoder_ckpt_starts(c, l))
        return;
    size_t n = (size_t)a->b * zs_decoder_seq_local(c) * (size_t)c->n_embd / (size_t)P;
    for (int q = 0; q < P; q++) {
        counts[q] = (int)n;
        displs[q] = (int)((size_t)q * n);
    }
    zs_backend_copy_d2d(be, a->ckpt_full + (size_t)c->tp_rank * n,
                        a->ckpt + zs_decoder_ckpt_index(c, l) * n, n * 4);
    if (m->tp && zs_comm_allgatherv_inplace(m->tp, a->ckpt_full, counts, displs, ZS_CT_F32, unit))
        m->tp_failed = 1;
}

void zs_decoder_ckpt_keep(zs_backend_t be, zs_acts *a, int l)
{
    const zs_model_config *c = &a->m->cfg;
    int b0, b1, head;
    zs_decoder_stage(c, &b0, &b1, &head);
    if (!a->ckpt_full || a->recompute || (l + 1) % zs_decoder_slots(c) || l >= b1)
        return;
    size_t BTlC = (size_t)a->b * zs_decoder_seq_local(c) * (size_t)c->n_embd;
    size_t n = BTlC / (size_t)c->tp;
    zs_backend_copy_d2d(be, a->ckpt_full, a->res3[l], BTlC * 4);
    zs_backend_copy_d2d(be, a->ckpt + zs_decoder_ckpt_index(c, l + 1) * n,
                        a->res3[l] + (size_t)c->tp_rank * n, n * 4);
}

int zs_decoder_ckpt_gathers(const zs_model_config *c, int u, int ufirst)
{
    if (!c->ckpt_partition || c->tp < 2 || zs_decoder_slots(c) >= c->n_layer)
        return 0;
    int l = u - 1, b0 = (ufirst > 1 ? ufirst : 1) - 1;
    return u >= 1 && u <= c->n_layer && l > b0 && l % zs_decoder_slots(c) == 0;
}

int zs_decoder_sp(const zs_model_config *c) { return c->tp > 1 && c->sequence_parallel; }

/* ---- tensor and sequence parallelism's collectives (the GPT's and the
 * Llama family's) ---------------------------------------------------------- */

/* Sequence parallelism: all-gather each rank's (B, T/P, C) positions into
 * full (B, T, C), through perm (the ranks' chunks one after the other); T
 * the rank's positions, with --cp its context chunk's (zs_decoder_seq_rank). */
void zs_decoder_sp_gather(zs_model *m, zs_backend_t be, float *full, const float *local,
                          float *perm, int B, int unit)
{
    const zs_model_config *c = &m->cfg;
    int P = c->tp, T = (int)zs_decoder_seq_rank(c), Ts = T / P, C = c->n_embd, counts[64], displs[64];
    size_t chunk = (size_t)B * Ts * C;
    for (int q = 0; q < P; q++) {
        counts[q] = (int)chunk;
        displs[q] = (int)(q * chunk);
    }
    zs_backend_copy_d2d(be, perm + (size_t)c->tp_rank * chunk, local, chunk * 4);
    if (m->tp && zs_comm_allgatherv_inplace(m->tp, perm, counts, displs, ZS_CT_F32, unit))
        m->tp_failed = 1;
    for (int q = 0; q < P; q++)
        for (int b = 0; b < B; b++)
            zs_backend_copy_d2d(be, full + ((size_t)b * T + (size_t)q * Ts) * C,
                                perm + q * chunk + (size_t)b * Ts * C, (size_t)Ts * C * 4);
}

/* Sequence parallelism: reduce-scatter full (B, T, C) partial sums so that
 * each rank gets the sum of its (B, T/P, C) positions. */
void zs_decoder_sp_scatter(zs_model *m, zs_backend_t be, float *local, const float *full,
                           float *perm, int B, int unit)
{
    const zs_model_config *c = &m->cfg;
    int P = c->tp, T = (int)zs_decoder_seq_rank(c), Ts = T / P, C = c->n_embd, counts[64];
    size_t chunk = (size_t)B * Ts * C;
    for (int q = 0; q < P; q++) {
        counts[q] = (int)chunk;
        for (int b = 0; b < B; b++)
            zs_backend_copy_d2d(be, perm + q * chunk + (size_t)b * Ts * C,
                                full + ((size_t)b * T + (size_t)q * Ts) * C, (size_t)Ts * C * 4);
    }
    if (m->tp && zs_comm_reduce_scatter(m->tp, perm, local, counts, ZS_CT_F32, unit))
        m->tp_failed = 1;
}

/* Megatron's g (forward) and f (backward): the sum over the tensor-
 * parallel group, in place, of n floats. */
void zs_decoder_tp_sum(zs_model *m, float *x, size_t n, int unit)
{
    if (m->tp && m->cfg.tp > 1 && zs_comm_allreduce_sum(m->tp, x, n, ZS_CT_F32, unit))
        m->tp_failed = 1;
}

/* ---- exact sums of slices (the portable backend, deterministic) ---------- */

int zs_decoder_exact(const zs_model_config *c) { return c->tp_exact_slices > 0; }

int zs_decoder_exact_slices(const zs_model_config *c, int K, int P)
{
    for (int S = c->tp_exact_slices; S >= 1; S--)
        if (c->tp_exact_slices % S == 0 && K % S == 0 && S % P == 0)
            return S;
    return P;
}

/* tmp(rows, n) = the product over kc values of the reduction from off:
 * op(A)[:, off:off+kc] times op(B)[off:off+kc, :] */
static void decoder_slice_gemm(zs_backend_t be, float *tmp, int trans_b, int rows, int n, int kc,
                               const float *A, int lda, const float *B, int ldb, size_t off)
{
    zs_backend_sgemm(be, 0, trans_b, rows, n, kc, 1.0f, A + off, lda,
                     trans_b ? B + off : B + off * (size_t)ldb, ldb, 0.0f, tmp, n);
}

void zs_decoder_exact_gemm(zs_model *m, zs_backend_t be, zs_acts *a, float *out, int trans_b,
                           int rows, int n, int K, int nseg, const float *A, int lda,
                           const float *B, int ldb, int unit)
{
    const zs_model_config *c = &m->cfg;
    int T = c->tp > 1 ? c->tp : 1, S = zs_decoder_exact_slices(c, K / nseg, T), per = S / T;
    int kc = K / nseg / S, segl = K / nseg / T; /* a slice's and a local segment's values */
    float *tmp = a->s_xtmp, *mx = a->s_xmax;
    zs_backend_memset0(be, mx, (size_t)rows * 4);
    for (int g = 0; g < nseg; g++)
        for (int q = 0; q < per; q++) {
            decoder_slice_gemm(be, tmp, trans_b, rows, n, kc, A, lda, B, ldb,
                               (size_t)g * segl + (size_t)q * kc);
            zs_backend_rows_absmax(be, mx, tmp, rows, n);
        }
    if (T > 1 && m->tp && zs_comm_allreduce_max_f32(m->tp, mx, (size_t)rows, unit))
        m->tp_failed = 1;
    zs_backend_memset0(be, out, (size_t)rows * n * 4);
    for (int g = 0; g < nseg; g++)
        for (int q = 0; q < per; q++) {
            if (nseg * per > 1) /* the one slice is still in tmp */
                decoder_slice_gemm(be, tmp, trans_b, rows, n, kc, A, lda, B, ldb,
                                   (size_t)g * segl + (size_t)q * kc);
            zs_backend_grid_add(be, out, tmp, mx, rows, n, nseg * S);
        }
}

/* The vocab-parallel loss's sums of exponentials (a->s_sums[0, BT)) as an
 * exact sum of the vocabulary's slices, this rank's V of them: the slices'
 * sums, their largest over the group, then each rounded to its row's grid
 * and added. */
static void decoder_exact_xent_sums(zs_model *m, zs_backend_t be, zs_acts *a, int BT, int V,
                                    int unit)
{
    const zs_model_config *c = &m->cfg;
    int T = c->tp > 1 ? c->tp : 1, S = zs_decoder_exact_slices(c, V * T, T), per = S / T;
    int vc = V / per;
    zs_backend_memset0(be, a->s_xmax, (size_t)BT * 4);
    for (int q = 0; q < per; q++) {
        zs_backend_xent_slice_sums(be, a->s_xtmp, a->s_logits, a->s_rowmax, BT, V, q * vc, vc);
        zs_backend_rows_absmax(be, a->s_xmax, a->s_xtmp, BT, 1);
    }
    if (T > 1 && m->tp && zs_comm_allreduce_max_f32(m->tp, a->s_xmax, (size_t)BT, unit))
        m->tp_failed = 1;
    zs_backend_memset0(be, a->s_sums, (size_t)BT * 4);
    for (int q = 0; q < per; q++) {
        if (per > 1)
            zs_backend_xent_slice_sums(be, a->s_xtmp, a->s_logits, a->s_rowmax, BT, V, q * vc,
                                       vc);
        zs_backend_grid_add(be, a->s_sums, a->s_xtmp, a->s_xmax, BT, 1, S);
    }
}

/* The head's loss over this rank's logits (a->s_logits, BT rows of V, the
 * vocabulary's slice r of a tensor-parallel group): the softmax
 * cross-entropy, or with tp > 1 (and with exact sums of slices, at any tp)
 * the vocab-parallel one, whose logits never leave their rank: the group
 * agrees on each row's maximum, then on the sum of exponentials (with
 * exact sums of slices, as one) and the target's logit. */
void zs_decoder_head_loss(zs_model *m, zs_backend_t be, zs_acts *a, const int32_t *targets,
                          int BT, int V, int r, int unit)
{
    if (m->cfg.tp <= 1 && !zs_decoder_exact(&m->cfg)) {
        zs_backend_softmax_xent_forward(be, a->losses, a->probs, a->s_logits, targets, BT, V);
        return;
    }
    zs_backend_xent_vocab_max(be, a->s_rowmax, a->s_logits, BT, V);
    if (m->cfg.tp > 1 && m->tp && zs_comm_allreduce_max_f32(m->tp, a->s_rowmax, (size_t)BT, unit))
        m->tp_failed = 1;
    /* the target's logit (sums[BT + i]) is on one rank, zeros elsewhere:
     * its sum is exact either way */
    zs_backend_xent_vocab_sums(be, a->s_sums, a->s_logits, a->s_rowmax, targets, r * V, BT, V);
    if (zs_decoder_exact(&m->cfg))
        decoder_exact_xent_sums(m, be, a, BT, V, unit);
    zs_decoder_tp_sum(m, a->s_sums, 2 * (size_t)BT, unit);
    zs_backend_xent_vocab_finish(be, a->losses, a->probs, a->s_logits, a->s_rowmax, a->s_sums,
                                 BT, V);
}

/* The output of a row-parallel linear, summed over the group: in place
 * (all-reduce), or with sequence parallelism reduce-scattered into this
 * rank's positions, in a->s_loc. Returns where the sum is. */
const float *zs_decoder_row_sum(zs_model *m, zs_backend_t be, zs_acts *a, float *x, int B,
                                int unit)
{
    const zs_model_config *c = &m->cfg;
    if (!zs_decoder_sp(c)) {
        zs_decoder_tp_sum(m, x, (size_t)B * zs_decoder_seq_rank(c) * c->n_embd, unit);
        return x;
    }
    zs_decoder_sp_scatter(m, be, a->s_loc, x, a->s_perm, B, unit);
    return a->s_loc;
}

/* The gradient of a row-parallel linear's output, whole on every rank:
 * dres itself, or with sequence parallelism all-gathered from the ranks'
 * positions (the conjugate of the forward's reduce-scatter). */
const float *zs_decoder_dout_full(zs_model *m, zs_backend_t be, zs_acts *a, const float *dres,
                                  int B, int unit)
{
    if (!zs_decoder_sp(&m->cfg))
        return dres;
    zs_decoder_sp_gather(m, be, a->s_dfull, dres, a->s_perm, B, unit);
    return a->s_dfull;
}
