#!/bin/sh
# Real runs of the Llama family (src/model/llama.c: RMSNorm, RoPE, grouped-
# query attention, SwiGLU, an untied head) at --tp 1: every ZeRO stage
# gives byte-identical parameters after every step on 2 ranks; activation
# checkpointing is exact (the hashes of the run without); deterministic
# mode is identical across N = 1, 2 and 4; bf16 and fp16 run; every
# category measured = predicted (the rotary table is workspace); the
# phantom run reports what the real one did; the model learns; tied,
# MHA, MQA and Qwen2's biases in every stage; what is not built (--tp,
# experts) is refused with one line; pipeline stages give the one-rank
# run's bytes.
. "$(dirname "$0")/testlib.sh"

M="--model llama --layers 3 --hidden 32 --heads 4 --kv-heads 2 --ffn-hidden 48 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0 --lr 1e-2 --quiet"

# stages 0 and 3 byte-identical; checkpointing exact; accounting; phantom
for st in 0 3; do
    train_hashes "s$st" 2 --stage "$st" && measured_is_predicted "llama stage $st" "$T/s$st"
done
same_hashes s3 s0
train_hashes ck1 2 --stage 1 --checkpoint-activations every:1 && same_hashes ck1 s0 &&
    measured_is_predicted "llama stage 1 every:1" "$T/ck1"
phantom_same ck1 2 --stage 1 --checkpoint-activations every:1

refuse -n 2 -m "llama: real runs with tensor parallelism not built yet" train $M --tp 2
refuse -m "llama: real runs with experts not built yet" train $M --moe-experts 4

# make check's fast form stops here (docs/testing.md)
zs_fast && finish

for st in 1 2; do
    train_hashes "s$st" 2 --stage "$st" && same_hashes "s$st" s0 &&
        measured_is_predicted "llama stage $st" "$T/s$st"
done
train_hashes ck2 2 --stage 3 --checkpoint-activations every:2 && same_hashes ck2 s0 &&
    measured_is_predicted "llama stage 3 every:2" "$T/ck2"
phantom_same s3 2 --stage 3

# deterministic mode: one global batch of 4 micro-batches, N = 1, 2, 4
train_hashes d1 1 --deterministic --grad-accum 4
train_hashes d2 2 --deterministic --grad-accum 2 --stage 2 && same_hashes d2 d1
train_hashes d4 4 --deterministic --grad-accum 1 --stage 3 && same_hashes d4 d1

# bf16 and fp16: stages agree, accounting holds, the losses are finite
for p in bf16 fp16; do
    train_hashes "${p}0" 2 --precision "$p" --stage 0 &&
        train_hashes "${p}3" 2 --precision "$p" --stage 3 && same_hashes "${p}3" "${p}0" &&
        measured_is_predicted "llama $p stage 3" "$T/${p}3"
    grep -A4 '"losses"' "$T/${p}3.json" | grep -qi 'nan\|inf' &&
        bad "$p: a loss is not finite" || ok
done

# the variants: tied head with MHA, MQA with Qwen2's biases, Llama 3's
# theta with eps 1e-6; stage 3 against stage 0
V1="--kv-heads 4 --tie-embeddings"
V2="--kv-heads 1 --qkv-bias"
V3="--rope-theta 500000 --norm-eps 1e-6"
i=0
for v in "$V1" "$V2" "$V3"; do
    i=$((i + 1))
    train_hashes "v${i}a" 2 $v --stage 0 && train_hashes "v${i}b" 2 $v --stage 3 &&
        same_hashes "v${i}b" "v${i}a" && measured_is_predicted "llama variant $i" "$T/v${i}b"
done

# pipeline stages (the untied head on the last stage; tied, the GPT's
# embedding exchange): 2 stages on 2 ranks give the one-rank run's bytes,
# with checkpointing too
P="--layers 4 --grad-accum 4"
train_hashes p1 1 $P && train_hashes pp 2 $P --pp 2 --stage 1 && same_hashes pp p1 &&
    measured_is_predicted "llama --pp 2" "$T/pp"
train_hashes ppck 2 $P --pp 2 --stage 2 --checkpoint-activations every:1 && same_hashes ppck p1 &&
    measured_is_predicted "llama --pp 2 every:1" "$T/ppck"
train_hashes pt1 1 $P --tie-embeddings && train_hashes ppt 2 $P --tie-embeddings --pp 2 &&
    same_hashes ppt pt1

# it learns: 40 steps on one rank lower the synthetic data's loss by 1/4
if zs_run learn 0 $M --steps 40; then
    sed -n '/^  "losses": \[/,/\]/p' "$T/learn.json" | sed '1d;$d' | tr -d ' ,' >"$T/learn.l"
    awk 'NR == 1 { f = $1 } { l = $1 } END { exit !(NR == 40 && l < 0.75 * f) }' "$T/learn.l" &&
        ok || bad "llama: the loss went from $(head -1 "$T/learn.l") to $(tail -1 "$T/learn.l")"
fi
finish
