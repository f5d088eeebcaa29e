#!/bin/sh
# The interleaved pipeline schedule (--pp-schedule interleaved
# --virtual-stages v; Narayanan et al., Megatron-LM's
# forward_backward_pipelining_with_interleaving): each rank holds v model
# chunks, chunk c of rank r being virtual stage c·P + r. A run gives
# byte-identical parameters after every step to the same run with --pp 1
# on the same data-parallel ranks (param_hashes of the whole model), fp32
# and bf16, ZeRO stages 0-3, P = 2 and 4, v = 2 and 4, one and two
# data-parallel ranks, with activation checkpointing, fp16 with skipped
# steps, and 3D with --tp 2;
# every rank's memory by category and its reductions, gathers and
# point-to-point bytes equal the prediction, and the activations and the
# messages of P = 2 by hand.
. "$(dirname "$0")/testlib.sh"

M4="--layers 4 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 4 --steps 3 --warmup 0 --quiet"
M8="--layers 8 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 4 --steps 3 --warmup 0 --quiet"
I="--pp-schedule interleaved"
M=$M4

# every category measured = predicted on every rank, and the traffic
# (every op with a prediction: reduce-scatters and allgathers over each
# stage's data-parallel group, the TP all-reduces, the point-to-point
# sends and receives)
acct() { # NAME: its --csv folder
    awk -v L="$1" '$1 !~ /^#/ && $2 != "total" && $3 != $4 {
            printf "FAIL: %s rank %s %s: measured %s predicted %s\n", L, $1, $2, $3, $4; bad++ }
         $1 !~ /^#/ { n++ } END { exit bad > 0 || n == 0 }' "$T/$1/memory.csv" && ok ||
        bad "$1: memory"
    awk -v L="$1" '$1 !~ /^#/ && $3 == "all" && $6 + 0 >= 0 {
            if ($5 != $6) { printf "FAIL: %s rank %s %s: measured %s predicted %s\n", L, $1, $2, $5, $6; bad++ }
            if ($2 == "send" || $2 == "recv") p2p++ }
         END { exit bad > 0 || p2p == 0 }' "$T/$1/comm.csv" && ok || bad "$1: traffic"
}
# run NAME N REF ARGS...: train, then the hashes against REF's and the accounting
run() {
    name=$1 n=$2 ref=$3
    shift 3
    train_hashes "$name" "$n" "$@" && same_hashes "$name" "$ref" && acct "$name"
}

# the references, without a pipeline
train_hashes ref 1
train_hashes refbf 1 --precision bf16
train_hashes ref2 2
train_hashes reftp 2 --stage 1 --tp 2
M=$M8
train_hashes ref8 1
train_hashes ref8bf 1 --precision bf16
M=$M4
# gradient clipping is active (grad_norm above 1.0 at the first step), so
# the global norm's chain round the ranks, v times, is checked too
awk '/"grad_norms"/ { getline; exit !($1 + 0 > 1.0) }' "$T/ref.json" && ok ||
    bad "the reference run does not clip: the test would not check the norm"

# P = 2, v = 2 (4 blocks: rank 0 holds the embeddings with block 0 and
# block 2, rank 1 block 1 and block 3 with the head)
run s0 2 ref --pp 2 $I --virtual-stages 2 --stage 0
run s1bf 2 refbf --pp 2 $I --virtual-stages 2 --stage 1 --precision bf16
run s2 2 ref --pp 2 $I --virtual-stages 2 --stage 2
run s3bf 2 refbf --pp 2 $I --virtual-stages 2 --stage 3 --precision bf16
# two data-parallel ranks a stage
run d2s1 4 ref2 --pp 2 $I --virtual-stages 2 --stage 1
run d2s3 4 ref2 --pp 2 $I --virtual-stages 2 --stage 3
# fp16 with two of five steps skipped for overflow (initial scale 2^18):
# stage 3's first rank gathers and sends the tied embedding only in
# applied steps
echo '{"fp16": {"enabled": true, "initial_scale_power": 18}}' >"$T/fp16.json"
F="--precision fp16 --config $T/fp16.json --steps 5 --stage 3"
train_hashes f16ref 1 $F
grep -A3 '"skipped_steps"' "$T/f16ref.json" | grep -q true && ok ||
    bad "fp16 at initial scale 2^18: no step was skipped, the case is not tested"
run f16 2 f16ref --pp 2 $I --virtual-stages 2 $F
# 3D: TP 2 x PP 2, against the same --tp 2 run without a pipeline
run tp 4 reftp --pp 2 $I --virtual-stages 2 --stage 1 --tp 2
M=$M8
# P = 4 and v = 4; activation checkpointing (every block's output a
# checkpoint: each chunk of two blocks keeps one)
run p4s2bf 4 ref8bf --pp 4 $I --virtual-stages 2 --stage 2 --precision bf16
run v4s1 2 ref8 --pp 2 $I --virtual-stages 4 --stage 1
run ck1 2 ref8 --pp 2 $I --virtual-stages 2 --stage 1 --checkpoint-activations every:1
run ck3bf 2 ref8bf --pp 2 $I --virtual-stages 2 --stage 3 --precision bf16 \
    --checkpoint-activations every:1
M=$M4

# by hand, P = 2, v = 2, m = 4 (B = 2, T = 16, C = 32, NH = 4, V = 64,
# BT = 32): a one-block chunk keeps its input B·T·C plus the block's
# 16·BT·C + 4·BT + B·NH·T² floats = 19584 floats = 78336 bytes a
# micro-batch in flight; the head adds BT·C + 2·BT + BT·(V + 1) = 3168
# floats. Rank 0 forwards all 4 micro-batches of its chunk 0 and 2 of its
# chunk 1 before their first backwards (its warm-up is 4 forwards), rank 1
# 3 of chunk 0 and 1 of chunk 1 (with the head): 6 × 78336 and
# 3 × 78336 + 91008 bytes.
for r in "0 470016" "1 326016"; do
    set -- $r
    a=$(awk -v q="$1" '$1 == q && $2 == "activations" { print $3 }' "$T/s0/memory.csv")
    [ "$a" = "$2" ] && ok || bad "P = 2, v = 2, rank $1: activations $a, expected $2"
done
# the messages of a step (4096 bytes an activation or its gradient, 8192
# the tied embedding's gradient or its values): rank 0 sends the 8 outputs
# of its two chunks, the 4 input gradients of its chunk 1 and the updated
# embedding (57344 bytes); rank 1 the 4 outputs of its chunk 0, the 8
# input gradients of its two chunks and the head's 4 gradients of the tied
# embedding (81920 bytes) -- v = 2 times the activations' messages of
# 1F1B, which sends 16384 and 16384 + 32768
for r in "0 57344" "1 81920"; do
    set -- $r
    b=$(awk -v q="$1" '$1 == q && $2 == "send" && $3 == "all" { print $5 }' "$T/s0/comm.csv")
    [ "$(printf '%.0f' "$b")" = $((3 * $2)) ] && ok ||
        bad "P = 2, v = 2, rank $1: sent $b bytes in 3 steps, expected $((3 * $2))"
done
# the bubble: the ideal (P - 1)/(v·m + P - 1) = 1/9 beside each rank's
# measured idle fraction (time in receives over the steps' time)
awk '/"ideal_bubble_fraction"/ { gsub(/,/, ""); i = $2 }
     /"idle_fraction"/ { n++; if ($2 + 0 < 0 || $2 + 0 >= 1) bad++ }
     END { exit !(i > 1 / 9 - 1e-6 && i < 1 / 9 + 1e-6 && n == 2 && !bad) }' "$T/s0.json" && ok ||
    bad "the report's bubble: $(grep -h 'bubble_fraction\|idle_fraction' "$T/s0.json" | tr -d '\n')"
# the chunks and their activation slots, as the program prints them
got=$("$ZS" train $M --pp 2 $I --virtual-stages 2 --print-program --world-size 2 |
      sed -n 's/^# pipeline rank \([0-9]\).*warm-up \([0-9]*\),.*/\1:\2/p' | tr '\n' ' ')
[ "$got" = "0:4 1:2 " ] && ok || bad "interleaved warm-ups at P = 2, v = 2, m = 4: $got"

# zerosim plan --pp-schedule interleaved: the most loaded stage (here
# rank 0: its 6 slots of activations) holds what that rank measured,
# category by category, and sends what it sent a step
"$ZS" plan --arch gpt --layers 4 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 \
    --grad-accum 4 --dp 1 --pp 2 $I --virtual-stages 2 --stage 1 --precision bf16 --json \
    >"$T/plan.json" || bad "zerosim plan --pp 2 --pp-schedule interleaved"
ms=$(sed -n 's/.*"most_loaded_stage": \([0-9]*\).*/\1/p' "$T/plan.json")
[ "$ms" = 0 ] && ok || bad "plan, interleaved: the most loaded stage is $ms, expected 0"
sed -n '/"bytes_per_category"/,/}/p' "$T/plan.json" >"$T/plan.cat"
for cat in params grads optimizer_m optimizer_v optimizer_master activations comm_buffers workspace; do
    m=$(awk -v c="$cat" '$1 == 0 && $2 == c { print $3 }' "$T/s1bf/memory.csv")
    p=$(sed -n "s/.*\"$cat\": \([0-9]*\).*/\1/p" "$T/plan.cat")
    [ -n "$m" ] && [ "$m" = "$p" ] && ok || bad "plan, interleaved, stage 0 $cat: run $m, plan $p"
done
b=$(awk '$1 == 0 && $2 == "send" && $3 == "all" { print $5 }' "$T/s1bf/comm.csv")
p=$(sed -n 's/.*"p2p_send_bytes_per_step": \([0-9]*\).*/\1/p' "$T/plan.json")
[ -n "$p" ] && [ "$(printf '%.0f' "$b")" = $((3 * p)) ] && ok ||
    bad "plan, interleaved: $p bytes sent per step, the run's rank 0 $b in 3 steps"
grep -q '"ideal_bubble": 0.111' "$T/plan.json" && ok ||
    bad "plan, interleaved: the ideal bubble is not 1/9: $(grep ideal_bubble "$T/plan.json")"

# phantom runs report what the real runs do: every category of every rank
# (and its timeline), every op of every phase but the report's
phantom_same s1bf 2 --pp 2 $I --virtual-stages 2 --stage 1 --precision bf16
phantom_same d2s3 4 --pp 2 $I --virtual-stages 2 --stage 3
phantom_same tp 4 --pp 2 $I --virtual-stages 2 --stage 1 --tp 2

# GPT-3 175B (96 layers, hidden 12288, 96 heads, seq 2048, vocab 51200) at
# TP 8 x PP 16 x DP 8 = 1024 ranks, stage 1, bf16, m = 16, v = 2 (three
# blocks a chunk): the phantom run's ranks equal their predictions, and the
# plan's most loaded stage (the last: the head, and its 16 buffers of the
# tied embedding's gradient) equals its phantom ranks, category by
# category, with its point-to-point bytes per step
G3="--layers 96 --hidden 12288 --heads 96 --seq 2048 --vocab 51200 --micro-batch 1 --grad-accum 16 --precision bf16 --stage 1 $I --virtual-stages 2"
if "$ZS" train --phantom --world-size 1024 --tp 8 --pp 16 $G3 --csv "$T/g3" >"$T/g3.log" 2>&1 &&
   "$ZS" plan --arch gpt --tp 8 --pp 16 --dp 8 $G3 --json >"$T/g3plan.json"; then
    awk '$1 !~ /^#/ && $2 != "total" { if ($3 != $4) bad++ } $2 == "params" { r++ }
         END { exit bad > 0 || r != 1024 }' "$T/g3/memory.csv" && ok ||
        bad "GPT-3 interleaved phantom: a category differs from its prediction (or not 1024 ranks)"
    ms=$(sed -n 's/.*"most_loaded_stage": \([0-9]*\).*/\1/p' "$T/g3plan.json")
    [ "$ms" = 15 ] && ok || bad "GPT-3 interleaved plan: the most loaded stage is $ms, expected 15"
    sed -n '/"bytes_per_category"/,/}/p' "$T/g3plan.json" >"$T/g3plan.cat"
    for cat in params grads optimizer_master optimizer_m optimizer_v activations checkpoints \
               comm_buffers workspace; do
        m=$(awk -v c="$cat" -v q=$((ms * 64)) '$1 == q && $2 == c { print $3 }' "$T/g3/memory.csv")
        p=$(sed -n "s/.*\"$cat\": \([0-9]*\).*/\1/p" "$T/g3plan.cat")
        [ -n "$m" ] && [ "$m" = "$p" ] && ok || bad "GPT-3 interleaved stage $ms $cat: phantom $m, plan $p"
    done
    # the tied gradient's buffers by hand: 16 of 6400 x 12288 fp32 rows
    # (the TP rank's V/8 rows), beside the bucket and the ring's buffers
    tb=$((16 * 6400 * 12288 * 4))
    cb=$(sed -n 's/.*"comm_buffers": \([0-9]*\).*/\1/p' "$T/g3plan.cat")
    [ -n "$cb" ] && [ "$cb" -ge "$tb" ] && [ "$cb" -lt $((tb + tb / 4)) ] && ok ||
        bad "GPT-3 interleaved stage 15 comm_buffers $cb, not the 16 tied buffers $tb and a little"
    for op in send recv; do
        m=$(awk -v o="$op" -v q=$((ms * 64)) '$1 == q && $2 == o && $3 == "all" { printf "%.0f", $5 / 2 }' \
            "$T/g3/comm.csv")
        p=$(sed -n "s/.*\"p2p_${op}_bytes_per_step\": \([0-9]*\).*/\1/p" "$T/g3plan.json")
        [ -n "$m" ] && [ "$m" = "$p" ] && ok || bad "GPT-3 interleaved stage $ms $op per step: phantom $m, plan $p"
    done
else
    bad "GPT-3 interleaved: the phantom run or the plan failed"; cat "$T/g3.log"
fi

finish
