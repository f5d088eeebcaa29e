#!/bin/sh
# 3D parallelism (--tp T with --pp P, data-parallel over the rest): a run
# with P pipeline stages gives byte-identical parameters after every step
# to the same --tp T run with --pp 1 on the same data-parallel ranks (the
# per-step param_hashes of the whole model in the tp = 1 order: the same
# TP arithmetic, the same micro-batches in the same order), at N = 4 and 8,
# TP 2 and 4, P = 2 and 4, GPipe and 1F1B, ZeRO stages 1-3, fp32 and bf16,
# with and without sequence parallelism, gradient clipping active; every
# rank's memory per category and its traffic per op (data-parallel,
# tensor-parallel, point-to-point) equal the prediction of its stage; and
# the point-to-point bytes by hand: each TP rank sends its whole copy of
# the B·T·C activation to the same TP rank of the next stage (not cut by
# TP), and with sequence parallelism its B·T/t·C positions (cut by TP).
. "$(dirname "$0")/testlib.sh"

M="--layers 4 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 4 --steps 3 --warmup 0 --quiet"

# run NAME N ARGS...: train on N ranks, report in $T/NAME.json, tables in $T/NAME/
run() { train_hashes "$@"; }

same() { same_hashes "$@"; }

# acct NAME: every category of every rank measured = predicted, and every
# traffic op with a prediction (reduce-scatter, allgather, the TP
# all-reduces, send, recv); at least one TP all-reduce and one send seen
acct() {
    awk -v L="$1" '$1 !~ /^#/ && $2 != "total" && $3 != $4 {
            printf "FAIL: %s rank %s %s: measured %s predicted %s\n", L, $1, $2, $3, $4; bad++ }
         $1 !~ /^#/ { n++ } END { exit bad > 0 || n == 0 }' "$T/$1/memory.csv" && ok ||
        bad "$1: memory"
    awk -v L="$1" '$1 !~ /^#/ && $3 == "all" && ($2 == "reduce_scatter" || $2 == "allgather" ||
                                                 $2 == "allreduce" || $2 == "send" || $2 == "recv") {
            if ($5 != $6) { printf "FAIL: %s rank %s %s: measured %s predicted %s\n", L, $1, $2, $5, $6; bad++ }
            if ($2 == "send" && $5 > 0) p2p++
            if ($2 == "allreduce" && $5 > 0) ar++ }
         END { exit bad > 0 || p2p == 0 || ar == 0 }' "$T/$1/comm.csv" && ok || bad "$1: traffic"
}

# the references: --tp T without a pipeline
run t2 2 --tp 2
run t2d2 4 --tp 2 --stage 1
run t4 4 --tp 4 --stage 2
run t2bf 2 --tp 2 --precision bf16
run t2sp 2 --tp 2 --sequence-parallel
# gradient clipping is active (grad_norm above 1.0 at the first step), so
# the global norm must be summed in the same order too
awk '/"grad_norms"/ { getline; exit !($1 + 0 > 1.0) }' "$T/t2.json" && ok ||
    bad "the reference run does not clip: the test would not check the norm"

run t2p2 4 --tp 2 --pp 2 --stage 1 && same t2p2 t2 && acct t2p2
run t2p2-gpipe-s3 4 --tp 2 --pp 2 --pp-schedule gpipe --stage 3 && same t2p2-gpipe-s3 t2 &&
    acct t2p2-gpipe-s3
run t2d2p2-s3 8 --tp 2 --pp 2 --stage 3 && same t2d2p2-s3 t2d2 && acct t2d2p2-s3
run t4p2-s2 8 --tp 4 --pp 2 --stage 2 && same t4p2-s2 t4 && acct t4p2-s2
run t2p4-bf 8 --tp 2 --pp 4 --precision bf16 --stage 2 --pp-schedule gpipe &&
    same t2p4-bf t2bf && acct t2p4-bf
run t2p2-sp 4 --tp 2 --pp 2 --sequence-parallel --stage 1 && same t2p2-sp t2sp && acct t2p2-sp

# point-to-point bytes by hand (B = 2, T = 16, C = 32, m = 4, 3 steps):
# rank 1 (TP rank 1 of stage 0 at TP 2 x PP 2) sends m activations of
# B·T·C = 1024 fp32 a step, 3 · 4 · 4096 = 49152 bytes; with sequence
# parallelism B·T/2·C = 512, 24576 bytes. Rank 3 (TP rank 1 of the last
# stage) receives them
p2p() { # NAME RANK OP PHASE: bytes
    awk -v q="$2" -v o="$3" -v ph="$4" '$1 == q && $2 == o && $3 == ph { printf "%.0f", $5 }' \
        "$T/$1/comm.csv"
}
for c in "t2p2 1 send forward 49152" "t2p2 3 recv forward 49152" \
         "t2p2-sp 1 send forward 24576" "t2p2-sp 3 recv forward 24576"; do
    set -- $c
    b=$(p2p "$1" "$2" "$3" "$4")
    [ "$b" = "$5" ] && ok || bad "$1 rank $2 $3 $4: $b bytes, expected $5"
done
# the TP all-reduces split by stage (no sequence parallelism, T = 4, ring
# 2(T-1)/T = 1.5, BT·C = 1024, BT = 32): the first stage all-reduces the
# embedding's output and four per block (2 blocks), 9·1024 floats a
# micro-batch; the last 4 per block, the head's backward and the loss's
# 3·BT: 9·1024 + 96. Over 3 steps of 4 micro-batches, times 4 bytes, 1.5
for c in "0 663552" "4 670464"; do
    set -- $c
    b=$(awk -v q="$1" '$1 == q && $2 == "allreduce" && $3 == "all" { printf "%.0f", $5 }' \
        "$T/t4p2-s2/comm.csv")
    [ "$b" = "$2" ] && ok || bad "t4p2-s2 rank $1: TP all-reduce $b bytes, expected $2"
done

# phantom runs with --pp report what the real runs above do: every
# category of every rank (and its timeline), every op of every phase but
# the report's (a real run hashes there); stage 0 above covered by hand
run p2d2 4 --pp 2 --stage 1 --ranks-per-node 2
phantom_same p2d2 4 --pp 2 --stage 1 --ranks-per-node 2
phantom_same t2d2p2-s3 8 --tp 2 --pp 2 --stage 3
phantom_same t2p4-bf 8 --tp 2 --pp 4 --precision bf16 --stage 2 --pp-schedule gpipe
phantom_same t2p2-sp 4 --tp 2 --pp 2 --sequence-parallel --stage 1
# ranks whose programs record the same bytes run once (one class per
# stage, and the norm chain's two ends on their own): the same report as
# running every simulated rank
for args in "--pp 4 --stage 2" "--tp 2 --pp 2 --stage 1 --ranks-per-node 4"; do
    "$ZS" train --phantom --world-size 16 $M $args --csv "$T/cls" >/dev/null 2>&1 &&
    ZEROSIM_PHANTOM_EVERY_RANK=1 "$ZS" train --phantom --world-size 16 $M $args \
        --csv "$T/every" >/dev/null 2>&1 || { bad "phantom $args failed"; continue; }
    for f in memory.csv comm.csv; do
        cmp -s "$T/cls/$f" "$T/every/$f" && ok ||
            { bad "phantom $args: $f differs when every rank runs"; diff "$T/cls/$f" "$T/every/$f" | head -4; }
    done
done

# GPT-3 175B as Narayanan et al. train it (96 layers, hidden 12288, 96
# heads, seq 2048, vocab 51200) at TP 8 x PP 16 x DP 8 = 1024 ranks, ZeRO
# stage 1, bf16, m = 16: a phantom run in seconds, within the host memory
# test_phantom.sh allows (256 MiB), every category of every rank equal to
# its stage's prediction; and zerosim plan with the same shape: the most
# loaded stage's categories equal its phantom ranks', every stage's total
# the sum of its ranks' categories, the point-to-point bytes per step
G3="--layers 96 --hidden 12288 --heads 96 --seq 2048 --vocab 51200 --micro-batch 1 --grad-accum 16 --precision bf16 --stage 1"
start=$(date +%s)
if "$ZS" train --phantom --world-size 1024 --tp 8 --pp 16 $G3 --csv "$T/g3" >"$T/g3.log" 2>&1; then
    secs=$(($(date +%s) - start))
    rss=$(sed -n 's/.*peak host memory of this process: \([0-9]*\) bytes.*/\1/p' "$T/g3.log")
    echo "GPT-3 3D phantom (1024 ranks): $secs s, peak RSS $rss bytes"
    [ "$secs" -le 60 ] && ok || bad "GPT-3 3D phantom took $secs s"
    [ -n "$rss" ] && [ "$rss" -lt 268435456 ] && ok || bad "GPT-3 3D phantom used $rss bytes of host memory"
    awk '$1 !~ /^#/ && $2 != "total" { n++; if ($3 != $4) bad++ } $2 == "params" { r++ }
         END { exit bad > 0 || r != 1024 }' "$T/g3/memory.csv" && ok ||
        bad "GPT-3 3D phantom: a category differs from its prediction (or not 1024 ranks)"
else
    bad "GPT-3 3D phantom failed"; cat "$T/g3.log"
fi
if "$ZS" plan --arch gpt --tp 8 --pp 16 --dp 8 $G3 --json >"$T/g3plan.json"; then
    ms=$(sed -n 's/.*"most_loaded_stage": \([0-9]*\).*/\1/p' "$T/g3plan.json")
    sed -n '/"bytes_per_category"/,/}/p' "$T/g3plan.json" >"$T/g3plan.cat"
    for cat in params grads optimizer_master optimizer_m optimizer_v activations checkpoints \
               comm_buffers workspace; do
        m=$(awk -v c="$cat" -v q=$((ms * 64)) '$1 == q && $2 == c { print $3 }' "$T/g3/memory.csv")
        p=$(sed -n "s/.*\"$cat\": \([0-9]*\).*/\1/p" "$T/g3plan.cat")
        [ -n "$m" ] && [ "$m" = "$p" ] && ok || bad "GPT-3 3D stage $ms $cat: phantom $m, plan $p"
    done
    # every stage's total: the sum of the categories of its first rank
    sed -n '/"stage_totals"/,/\]/p' "$T/g3plan.json" | sed -n 's/^ *\([0-9][0-9]*\),*$/\1/p' >"$T/g3plan.tot"
    awk '$1 !~ /^#/ && $1 % 64 == 0 && $2 !~ /^(total|optimizer)$/ { t[$1 / 64] += $3 }
         END { for (s = 0; s < 16; s++) printf "%.0f\n", t[s] }' "$T/g3/memory.csv" >"$T/g3.tot"
    [ "$(wc -l <"$T/g3plan.tot")" -eq 16 ] && cmp -s "$T/g3.tot" "$T/g3plan.tot" && ok ||
        { bad "GPT-3 3D: stage totals differ (phantom, plan)"; paste "$T/g3.tot" "$T/g3plan.tot" | head; }
    for op in send recv; do
        m=$(awk -v o="$op" -v q=$((ms * 64)) '$1 == q && $2 == o && $3 == "all" { printf "%.0f", $5 / 2 }' \
            "$T/g3/comm.csv")
        p=$(sed -n "s/.*\"p2p_${op}_bytes_per_step\": \([0-9]*\).*/\1/p" "$T/g3plan.json")
        [ -n "$m" ] && [ "$m" = "$p" ] && ok || bad "GPT-3 3D stage $ms $op per step: phantom $m, plan $p"
    done
else
    bad "zerosim plan of GPT-3 at TP 8 x PP 16 x DP 8 failed"
fi

finish
