/* zerosim — the planner's published conventions: the paper's and
 * Megatron's model states and activations, and DeepSpeed's estimators (see
 * zerosim/plan.h). */
#include "zerosim/plan.h"
#include "plan_impl.h"
#include "zerosim/error.h"
#include "zerosim/model.h"

#include <math.h>

double zs_plan_megatron_activations(const zs_run_config *c, int sequence_parallel)
{
    double s = c->model.seq_len, b = c->micro_batch, h = c->model.n_embd, a = c->model.n_head;
    double t = c->tp > 1 ? c->tp : 1, L = c->model.n_layer;
    double per;
    if (t > 1 && sequence_parallel)
        per = s * b * h / t * (34.0 + 5.0 * a * s / h);
    else if (t > 1)
        per = s * b * h * (10.0 + 24.0 / t + 5.0 * a * s / (h * t));
    else
        per = s * b * h * (34.0 + 5.0 * a * s / h);
    return L * per;
}

/* Model states of the paper's and Megatron's conventions. */
int zs_plan_states_closed(const zs_plan_input *in, const zs_run_config *c,
                          zs_plan_result *r)
{
    /* a tensor-parallel device holds about 1/t of the parameters */
    double P = (double)r->num_params / (c->tp > 1 ? c->tp : 1), N = in->dp;
    double p = (double)zs_dtype_size(c->precision), g = (double)zs_dtype_size(in->grad_precision);
    int mixed = c->precision != ZS_DTYPE_F32, st = c->stage;
    double master = mixed ? 4.0 : 0.0, m = 4.0, v = c->optimizer == ZS_OPT_ADAMW ? 4.0 : 0.0;
    double gcopy = 0.0; /* Megatron: fp32 main gradients in the optimizer when g < 4 */
    if (in->convention == ZS_PLAN_MEGATRON) {
        if (st > 1)
            ZS_FAIL("the megatron convention has stage 0 (plain optimizer) and stage 1 (the "
                    "distributed optimizer) only: use --stage 0 or 1, or --convention paper");
        gcopy = g < 4 ? 4.0 : 0.0;
    }
    double os = st >= 1 ? 1.0 / N : 1.0;          /* optimizer shard */
    double gs = st >= 2 ? 1.0 / N : 1.0;          /* gradient shard */
    double ps = st >= 3 ? 1.0 / N : 1.0;          /* parameter shard */
    r->bytes[ZS_MEM_PARAMS] = p * P * ps;
    r->bytes[ZS_MEM_GRADS] = g * P * gs;
    r->bytes[ZS_MEM_OPT_MASTER] = (master + gcopy) * P * os;
    r->bytes[ZS_MEM_OPT_M] = m * P * os;
    r->bytes[ZS_MEM_OPT_V] = v * P * os;
    r->padded = r->num_params;
    r->shard = (size_t)(P / N);
    return 0;
}

int zs_plan_deepspeed_rows(int stage, double total, double largest, int gpn, int nodes,
                           double bf, zs_ds_estimate_row rows[6])
{
    if (stage != 2 && stage != 3)
        return zs_error_set("DeepSpeed's estimators exist for ZeRO stages 2 and 3, not %d: "
                            "use --stage 2 or --stage 3", stage);
    if (gpn < 1 || nodes < 1 || !(total > 0) || !(bf > 0) || largest < 0)
        return zs_error_set("the DeepSpeed estimate needs parameters > 0, at least one node "
                            "and one GPU per node, and a positive buffer factor");
    double G = (double)nodes * gpn;
    int n = 0;
    if (stage == 2) {
        /* DeepSpeed's current stage_1_and_2.py (read at v0.19.6):
         * offload: GPU 2Ψ (16-bit params), CPU Ψ·max(4·gpus, 16)·factor;
         * none:    GPU 2Ψ + int(18Ψ/gpus) (16-bit grads 2, fp32 grads 4,
         *          fp32 params 4, moments 8 per parameter, partitioned),
         *          CPU Ψ·4·gpus_per_node·factor. (Before, 4Ψ + int(16Ψ/gpus):
         *          the figure its documentation page still shows.) */
        for (int off = 1; off >= 0; off--) {
            zs_ds_estimate_row *w = &rows[n++];
            *w = (zs_ds_estimate_row){.offload_optimizer = off};
            if (off) {
                w->gpu_bytes = 2 * total;
                w->cpu_bytes = total * fmax(4 * G, 16) * bf;
            } else {
                w->gpu_bytes = 2 * total + trunc(18 * total / G);
                w->cpu_bytes = total * 4 * gpn * bf;
            }
            w->cpu_bytes = trunc(w->cpu_bytes);
            w->gpu_bytes = trunc(w->gpu_bytes);
        }
        return n;
    }
    /* stage 3: the largest layer gathered (4 bytes a parameter: fp16 value
     * and gradient) plus, per option, the share of 18 (everything), 2 (fp16
     * parameters) or 0 bytes a parameter left on the GPU; the CPU holds 18
     * or 16 bytes a parameter per node, or the fp32 model at start-up */
    double llm = 4 * largest, gf = 1.0 / nodes;
    for (int oo = 1; oo >= 0; oo--)
        for (int op = 1; op >= 0; op--) {
            if (!oo && op)
                continue;
            for (int zi = 1; zi >= 0; zi--) {
                zs_ds_estimate_row *w = &rows[n++];
                *w = (zs_ds_estimate_row){.offload_optimizer = oo, .offload_param = op,
                                          .zero_init = zi};
                if (oo && op) {
                    w->gpu_bytes = llm;
                    w->cpu_bytes = zi ? total * 18 * gf * bf : total * fmax(4.0 * gpn, 18 * gf) * bf;
                } else if (oo) {
                    w->gpu_bytes = llm + trunc(2 * total / G);
                    w->cpu_bytes = zi ? total * 16 * gf * bf : total * fmax(4.0 * gpn, 16 * gf) * bf;
                } else {
                    w->gpu_bytes = llm + trunc(18 * total / G);
                    w->cpu_bytes = zi ? largest * 4 * gpn * bf : total * 4 * gpn * bf;
                }
                w->cpu_bytes = trunc(w->cpu_bytes);
                w->gpu_bytes = trunc(w->gpu_bytes);
            }
        }
    return n;
}

size_t zs_plan_gpt_largest_layer(const zs_model_config *c)
{
    size_t C = (size_t)c->n_embd, V = (size_t)c->vocab, T = (size_t)c->seq_len;
    size_t cand[] = {V * C, T * C, 3 * C * C + 3 * C, C * C + C, 4 * C * C + 4 * C,
                     4 * C * C + C, 2 * C};
    size_t m = 0;
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++)
        if (cand[i] > m)
            m = cand[i];
    return m;
}

size_t zs_plan_llama_largest_layer(const zs_model_config *c)
{
    size_t C = (size_t)c->n_embd, V = (size_t)c->vocab;
    size_t F = c->ffn_hidden > 0 ? (size_t)c->ffn_hidden : 4 * C; /* finalize's defaults */
    size_t D = C / (size_t)c->n_head, bias = c->qkv_bias ? 1 : 0;
    size_t KV = (size_t)(c->n_kv_head > 0 ? c->n_kv_head : c->n_head) * D;
    /* DeepSpeed counts each module's own tensors (recurse=False): the
     * embedding and the lm_head (V x C each, tied or not), q_proj and
     * o_proj (C x C, q's bias with qkv_bias), k_proj and v_proj (KV x C),
     * gate, up and down (F x C, an expert's as a dense block's), the
     * router (E x C) and an RMSNorm (C) */
    size_t cand[] = {V * C, C * C + bias * C, KV * C + bias * KV, F * C,
                     (size_t)(c->moe_experts > 0 ? c->moe_experts : 0) * C, C};
    size_t m = 0;
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++)
        if (cand[i] > m)
            m = cand[i];
    return m;
}

size_t zs_plan_largest_layer(const zs_model_config *c)
{
    return c->kind == ZS_MODEL_LLAMA ? zs_plan_llama_largest_layer(c)
                                     : zs_plan_gpt_largest_layer(c);
}
