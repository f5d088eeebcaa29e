#!/bin/sh
# Activation checkpointing with --pp: each micro-batch in flight keeps its
# stage input, its last block's output (and the head's activations on the
# last stage) and, as checkpoints, the outputs of the stage's blocks that
# end a segment; the blocks' activations are one set of working slots
# shared by the micro-batches, and every segment of the stage is
# recomputed before its backward (but the last part when the stage's
# previous op was the same micro-batch's forward). Checked: per-step
# param hashes equal the run without a pipeline and without checkpointing
# (fp32 and bf16, GPipe and 1F1B, ZeRO stages 0-3, P = 2 and 4, one and
# two data-parallel ranks, and with --tp 2, sequence parallelism too);
# every category measured = predicted; the activation and checkpoint bytes
# against hand counts and against the same run without checkpointing (the
# saving); the recomputed units from the step program; phantom = real;
# zerosim plan against the run.
. "$(dirname "$0")/testlib.sh"

M="--layers 6 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 4 --steps 3 --warmup 0 --quiet"

# run NAME N ARGS...: train on N ranks, report in $T/NAME.json, csv in $T/NAME
run() { train_hashes "$@"; }

same() { same_hashes "$@"; }

# every category and the traffic (collectives and point-to-point) measured = predicted
acct() {
    awk -v L="$1" '$1 !~ /^#/ && $2 != "total" && $3 != $4 {
            printf "FAIL: %s rank %s %s: measured %s predicted %s\n", L, $1, $2, $3, $4; bad++ }
         $1 !~ /^#/ { n++ } END { exit bad > 0 || n == 0 }' "$T/$1/memory.csv" && ok ||
        bad "$1: memory"
    awk -v L="$1" '$1 !~ /^#/ && $3 == "all" && ($2 == "reduce_scatter" || $2 == "allgather" ||
                                                 $2 == "send" || $2 == "recv") {
            if ($5 != $6) { printf "FAIL: %s rank %s %s: measured %s predicted %s\n", L, $1, $2, $5, $6; bad++ }
            if ($2 == "send" || $2 == "recv") p2p++ }
         END { exit bad > 0 || p2p == 0 }' "$T/$1/comm.csv" && ok || bad "$1: traffic"
}

# mem NAME RANK CATEGORY: measured peak bytes
mem() { awk -v r="$2" -v c="$3" '$1 == r && $2 == c { print $3 }' "$T/$1/memory.csv"; }

run ref1 1
run ref1bf 1 --precision bf16
run ref2 2

run a 2 --pp 2 --stage 1 --checkpoint-activations every:2 && same a ref1 && acct a
run b 2 --pp 2 --stage 2 --pp-schedule gpipe --precision bf16 --checkpoint-activations every:1 &&
    same b ref1bf && acct b
run c 4 --pp 4 --stage 3 --checkpoint-activations every:4 && same c ref1 && acct c
run d 4 --pp 2 --stage 0 --checkpoint-activations every:2 && same d ref2 && acct d
run nock 2 --pp 2 --stage 1 && same nock ref1
# 3D (--tp with --pp): against the same --tp run without a pipeline or
# checkpointing, with and without sequence parallelism
run t2 2 --tp 2
run t2sp 2 --tp 2 --sequence-parallel
run t2c 4 --tp 2 --pp 2 --stage 1 --checkpoint-activations every:2 && same t2c t2 && acct t2c
run t2spc 4 --tp 2 --pp 2 --stage 2 --sequence-parallel --checkpoint-activations every:1 &&
    same t2spc t2sp && acct t2spc

# by hand, run a: B = 2, T = 16, C = 32, NH = 4, V = 64, BT = 32; a block
# keeps 16·BT·C + 4·BT + B·NH·T² = 18560 floats (74240 bytes), B·T·C is
# 4096 bytes. Stage 0 holds blocks 0-2, stage 1 blocks 3-5 and the head;
# segments of 2 blocks: 0-1, 2-3, 4-5. 1F1B keeps 2 micro-batches in
# flight on stage 0, 1 on stage 1.
# stage 0: 2 x (input + last output) + min(2, 3) working blocks
#        = 2·8192 + 2·74240 = 164864; checkpoints 2 x (block 1's output) = 8192
# stage 1: input + last output + head (BT·C + 2·BT + BT·(V + 1) floats =
#        12672 bytes) + 2 working blocks = 20864 + 148480 = 169344;
#        checkpoints: block 3's output, 4096
# without checkpointing: stage 0 2 x (4096 + 3·74240) = 453632, stage 1
#        4096 + 3·74240 + 12672 = 239488
for x in "a 0 activations 164864" "a 0 checkpoints 8192" "a 1 activations 169344" \
         "a 1 checkpoints 4096" "nock 0 activations 453632" "nock 1 activations 239488" \
         "nock 0 checkpoints 0"; do
    set -- $x
    got=$(mem "$1" "$2" "$3")
    [ "$got" = "$4" ] && ok || bad "run $1 rank $2 $3: $got bytes, expected $4 by hand"
done
# the saving, on every rank: activations + checkpoints with < without
for r in 0 1; do
    w=$(($(mem a $r activations) + $(mem a $r checkpoints)))
    wo=$(($(mem nock $r activations) + $(mem nock $r checkpoints)))
    [ "$w" -lt "$wo" ] && ok || bad "rank $r: $w bytes of activations and checkpoints with checkpointing, $wo without"
done

# the recomputed units: every block of each stage once per micro-batch
# (stage 0 of run a: 3 blocks x 4 micro-batches), but on the last stage
# under 1F1B, where each backward follows its own forward: there the
# stage's last segment part (blocks 4-5) is still in the working slots,
# and only block 3 is recomputed (1 x 4)
rec=$("$ZS" train $M --pp 2 --checkpoint-activations every:2 --print-program --world-size 2 |
      awk '/^# step program/ { if (st++) printf "%d ", n; n = 0 }
           $1 ~ /^[0-9]+$/ && $5 == "forward" && /recompute/ { n++ }
           END { printf "%d\n", n }')
[ "$rec" = "12 4" ] && ok || bad "recomputed units per stage: $rec, expected 12 4"

# phantom runs report what the real runs do: every category of every rank
# and its timeline, every op but the report's (a real run hashes there)
phantom_same a 2 --pp 2 --stage 1 --checkpoint-activations every:2
phantom_same c 4 --pp 4 --stage 3 --checkpoint-activations every:4
phantom_same t2spc 4 --tp 2 --pp 2 --stage 2 --sequence-parallel --checkpoint-activations every:1

# GPT-3 175B (96 blocks, hidden 12288, 96 heads, seq 2048, vocab 51200) at
# TP 8 x PP 16 x DP 8 = 1024 ranks, stage 1, bf16, micro-batch 1, m = 16,
# phantom: stage 0 (rank 0; 6 blocks, 16 micro-batches in flight under
# 1F1B). By hand, B·T·C = 25165824 floats; a block with TP 8 keeps
# 4·BTC + 12·BTC/8 + 4·BT + B·(96/8)·T² = 188751872 floats. With
# every:1: 16 x 2·BTC·4 + one working block (755007488 bytes) =
# 3976232960 bytes of activations, 16 x 5 block outputs x BTC·4 =
# 8053063680 of checkpoints; without: 16 x (BTC + 6 blocks) x 4 =
# 74091331584
G="--layers 96 --hidden 12288 --heads 96 --seq 2048 --vocab 51200 --micro-batch 1 --grad-accum 16 --precision bf16 --stage 1 --tp 8 --pp 16 --steps 1 --warmup 0"
for ck in off every:1; do
    "$ZS" train --phantom --world-size 1024 $G --checkpoint-activations $ck \
        --csv "$T/g3-$ck" >"$T/g3.log" 2>&1 || { bad "GPT-3 phantom, $ck"; cat "$T/g3.log"; }
done
for x in "off activations 74091331584" "off checkpoints 0" "every:1 activations 3976232960" \
         "every:1 checkpoints 8053063680"; do
    set -- $x
    got=$(awk -v c="$2" '$1 == 0 && $2 == c { print $3 }' "$T/g3-$1/memory.csv")
    [ "$got" = "$3" ] && ok || bad "GPT-3 at 8 x 16 x 8, $1: rank 0 $2 $got bytes, expected $3"
done

# zerosim plan: the most loaded stage's activations and checkpoints are
# what that stage's ranks measured (run b, GPipe, bf16, stage 2)
"$ZS" plan --arch gpt --layers 6 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 \
    --grad-accum 4 --dp 1 --pp 2 --stage 2 --pp-schedule gpipe --precision bf16 \
    --checkpoint-activations every:1 --json >"$T/plan.json" || bad "zerosim plan --pp 2 with checkpointing"
ms=$(sed -n 's/.*"most_loaded_stage": \([0-9]*\).*/\1/p' "$T/plan.json")
sed -n '/"bytes_per_category"/,/}/p' "$T/plan.json" >"$T/plan.cat"
for cat in activations checkpoints params grads comm_buffers workspace; do
    m=$(mem b "$ms" "$cat")
    p=$(sed -n "s/.*\"$cat\": \([0-9]*\).*/\1/p" "$T/plan.cat")
    [ -n "$m" ] && [ "$m" = "$p" ] && ok || bad "plan stage $ms $cat: run $m, plan $p"
done

finish
