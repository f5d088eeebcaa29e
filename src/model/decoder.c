/* zerosim — what the decoders (the GPT, src/model/gpt.c, and the Llama
 * family, src/model/llama.c) share and what depends on no family: a
 * pipeline stage's blocks, activation checkpointing's slots and
 * checkpoints. Units: 0 the embeddings, 1..L the blocks, L+1 the head. */
#include "model_impl.h"

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

size_t zs_decoder_seq_local(const zs_model_config *c)
{
    return (size_t)c->seq_len / (size_t)(c->tp > 1 && c->sequence_parallel ? c->tp : 1);
}

size_t zs_decoder_checkpoint_bytes(const zs_model_config *c, int b)
{
    size_t BTlC = (size_t)b * zs_decoder_seq_local(c) * (size_t)c->n_embd;
    if (c->pp_on)
        return zs_decoder_pp_ckpt(c) ? 4 * zs_decoder_pp_ckpt_count(c) * BTlC : 0;
    int K = zs_decoder_slots(c), nseg = (c->n_layer + K - 1) / K;
    return 4 * (size_t)(nseg - 1) * BTlC;
}
