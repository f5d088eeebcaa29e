#!/bin/sh
# Real runs of the Llama family (src/model/llama.c: RMSNorm, RoPE, grouped-
# query attention, SwiGLU, an untied head) at --tp 1: every ZeRO stage
# gives byte-identical parameters after every step on 2 ranks; activation
# checkpointing is exact (the hashes of the run without); deterministic
# mode is identical across N = 1, 2 and 4; bf16 and fp16 run; every
# category measured = predicted (the rotary table is workspace); the
# phantom run reports what the real one did; the model learns; tied,
# MHA, MQA and Qwen2's biases in every stage; pipeline stages give the
# one-rank run's bytes; tensor parallelism (Megatron's split, the key/value
# heads split over the group) and sequence parallelism give the one-rank
# run's losses within 1e-6, stages byte-identical at a fixed mesh, the TP
# collectives' bytes as predicted, with the key/value heads split or
# replicated. Mixtral-style experts: tests/test_mixtral.sh.
. "$(dirname "$0")/testlib.sh"

M="--model llama --layers 3 --hidden 32 --heads 4 --kv-heads 2 --ffn-hidden 48 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0 --lr 1e-2 --quiet"

# stages 0 and 3 byte-identical; checkpointing exact; accounting; phantom
for st in 0 3; do
    train_hashes "s$st" 2 --stage "$st" && measured_is_predicted "llama stage $st" "$T/s$st"
done
same_hashes s3 s0
train_hashes ck1 2 --stage 1 --checkpoint-activations every:1 && same_hashes ck1 s0 &&
    measured_is_predicted "llama stage 1 every:1" "$T/ck1"

# a checkpoint records the family's shape: a save at step 2 resumed to
# step 3 ends at the uninterrupted run's parameters; another shape (key/
# value heads) or family is refused with one line
zs_run save 2 $M --stage 2 --save-every 2 --save-dir "$T/ck" &&
    zs_run resumed 2 $M --stage 2 --resume "$T/ck/global_step2" &&
    { [ "$(key "$T/resumed.json" param_hash)" = "$(key "$T/s0.json" param_hash)" ] && ok ||
          bad "llama: resumed to $(key "$T/resumed.json" param_hash), uninterrupted $(key "$T/s0.json" param_hash)"; }
refuse -n 2 -m "the checkpoint's model has n_kv_head 2, this run's 4" train $M --kv-heads 4 --resume "$T/ck/global_step2"
refuse -n 2 -m "kind \"llama\", this run's \"gpt\"" train --layers 3 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 2 --steps 3 --quiet --resume "$T/ck/global_step2"

# tensor parallelism (the key/value heads split), with sequence
# parallelism: the losses of the one-rank run within 1e-6, every category
# and the TP collectives (all-reduce, all-gather, reduce-scatter) measured
# = predicted, the plan's bytes, phantom = real
tp_traffic() {
    awk -v L="$1" '$1 !~ /^#/ && $3 == "all" &&
            ($2 == "reduce_scatter" || $2 == "allgather" || $2 == "allreduce") {
            if ($5 != $6) { printf "FAIL: %s rank %s %s: measured %s predicted %s\n", L, $1, $2, $5, $6; bad++ }
            if ($2 == "allreduce" && $5 > 0) ar++ }
         END { exit bad > 0 || ar == 0 }' "$T/$1/comm.csv" && ok || bad "$1: TP traffic"
}
losses() { sed -n '/^  "losses": \[/,/\]/p' "$T/$1.json" | sed '1d;$d' | tr -d ' ,'; }
close_losses() { # NAME REF: every step's loss within 1e-6 relative
    losses "$1" >"$T/$1.l"
    losses "$2" >"$T/$2.l"
    paste "$T/$1.l" "$T/$2.l" | awk 'function abs(x) { return x < 0 ? -x : x }
        { n++; if (abs($1 - $2) > 1e-6 * abs($2)) b++ } END { exit b > 0 || n != 3 }' && ok ||
        bad "$1: losses $(tr '\n' ' ' <"$T/$1.l") vs $2's $(tr '\n' ' ' <"$T/$2.l")"
}
train_hashes r1 1 --grad-accum 4
for sp in --sequence-parallel ""; do
    name=tp${sp:+sp}
    train_hashes "$name" 2 --tp 2 $sp --grad-accum 4 --stage 1 && close_losses "$name" r1 &&
        measured_is_predicted "llama --tp 2 $sp" "$T/$name" && tp_traffic "$name"
    zs_fast && break # with sequence parallelism only in make check's fast mode
done
"$ZS" plan --arch llama --layers 3 --hidden 32 --heads 4 --kv-heads 2 --ffn-hidden 48 --seq 16 \
    --vocab 64 --micro-batch 2 --grad-accum 4 --tp 2 --sequence-parallel --dp 1 --stage 1 --json \
    >"$T/tpsp.plan.json" 2>/dev/null && plan_is_run "llama --tp 2 plan" "$T/tpsp.plan.json" "$T/tpsp" ||
    bad "llama --tp 2: the plan failed"

# make check's fast form stops here (docs/testing.md)
zs_fast && finish

phantom_same ck1 2 --stage 1 --checkpoint-activations every:1
phantom_same tpsp 2 --tp 2 --sequence-parallel --grad-accum 4 --stage 1

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

# tensor parallelism on 4 ranks (2 x 2): stages byte-identical; MHA with
# Qwen2's biases and the head tied (vocab-parallel); with a pipeline
for st in 0 3; do
    train_hashes "t4s$st" 4 --tp 2 --stage "$st" && measured_is_predicted "tp 2 x dp 2 stage $st" "$T/t4s$st" &&
        tp_traffic "t4s$st"
done
same_hashes t4s3 t4s0
train_hashes rb1 1 --kv-heads 4 --qkv-bias --tie-embeddings --grad-accum 4
train_hashes tpb 2 --kv-heads 4 --qkv-bias --tie-embeddings --grad-accum 4 --tp 2 \
    --sequence-parallel --stage 3 && close_losses tpb rb1 && measured_is_predicted "tp mha bias tied" "$T/tpb"
# replicated key/value heads: MQA over 2 ranks, and 2 heads over 4 ranks
# with biases and sequence parallelism (the heads' gradients summed over
# the group, as predicted)
train_hashes rq1 1 --kv-heads 1 --grad-accum 4
train_hashes tpq 2 --kv-heads 1 --tp 2 --grad-accum 4 --stage 2 && close_losses tpq rq1 &&
    measured_is_predicted "llama MQA --tp 2" "$T/tpq" && tp_traffic tpq
train_hashes rq2 1 --qkv-bias --grad-accum 4
train_hashes tpq4 4 --qkv-bias --tp 4 --sequence-parallel --grad-accum 4 --stage 3 &&
    close_losses tpq4 rq2 && measured_is_predicted "llama KV 2 --tp 4" "$T/tpq4" && tp_traffic tpq4
train_hashes tpp 4 $P --tp 2 --pp 2 --stage 1 && train_hashes tp2p 2 $P --tp 2 --stage 1 &&
    same_hashes tpp tp2p && measured_is_predicted "llama --tp 2 --pp 2" "$T/tpp"

# it learns: 40 steps on one rank lower the synthetic data's loss by 1/4
if zs_run learn 0 $M --steps 40; then
    sed -n '/^  "losses": \[/,/\]/p' "$T/learn.json" | sed '1d;$d' | tr -d ' ,' >"$T/learn.l"
    awk 'NR == 1 { f = $1 } { l = $1 } END { exit !(NR == 40 && l < 0.75 * f) }' "$T/learn.l" &&
        ok || bad "llama: the loss went from $(head -1 "$T/learn.l") to $(tail -1 "$T/learn.l")"
fi
finish
