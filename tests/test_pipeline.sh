#!/bin/sh
# Pipeline parallelism (--pp): a run with P stages gives byte-identical
# parameters after every step to the same run with P = 1 on the same
# data-parallel ranks (param_hashes of the whole model, fp32 and bf16,
# GPipe and 1F1B, ZeRO stages 0-2, P = 2, 3 and 4, uniform and balanced
# stages, one and two data-parallel ranks); every byte against its
# prediction per stage; the 1F1B warm-up of each stage, counted from the step program's
# ops, is Megatron-LM's min(P - rank - 1, m); and the combinations the
# pipeline does not support are refused with one line.
. "$(dirname "$0")/testlib.sh"

M="--layers 4 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 4 --steps 3 --warmup 0 --quiet"

# run NAME N ARGS...: train on N ranks, report in $T/NAME.json
run() { train_hashes "$@"; }

same() { same_hashes "$@"; }

# the references, without a pipeline: one and two data-parallel ranks
run ref1 1
run ref1bf 1 --precision bf16
run ref2 2
# gradient clipping is active in these runs (grad_norm above 1.0 at the
# first step), so the global norm must be summed in the same order too
awk '/"grad_norms"/ { getline; exit !($1 + 0 > 1.0) }' "$T/ref1.json" && ok ||
    bad "the reference run does not clip: the test would not check the norm"

run p2-gpipe 2 --pp 2 --pp-schedule gpipe && same p2-gpipe ref1
run p2-1f1b-s1 2 --pp 2 --pp-schedule 1f1b --stage 1 && same p2-1f1b-s1 ref1
run p2-bf-gpipe-s2 2 --pp 2 --pp-schedule gpipe --stage 2 --precision bf16 && same p2-bf-gpipe-s2 ref1bf
run p2-bf-1f1b 2 --pp 2 --precision bf16 && same p2-bf-1f1b ref1bf
run p4-bf-gpipe-s2 4 --pp 4 --pp-schedule gpipe --stage 2 --precision bf16 && same p4-bf-gpipe-s2 ref1bf
run p2d2-1f1b-s2 4 --pp 2 --stage 2 && same p2d2-1f1b-s2 ref2
# balanced by parameters (DeepSpeed's partition_method "parameters"): at
# P = 3 the embeddings (2560) and one block (12704 each) on the first
# stage, two blocks on the second, a block and the head (2112 with the
# tied embedding it reads) on the last: the largest stage 25408 against
# uniform's 27968 (units 0..2, 3..3, 4..5)
stages() { "$ZS" train $M --pp 3 --print-program --world-size 3 "$@" |
           sed -n 's/^# pipeline stage .*: units \([0-9.]*\),.*/\1/p' | tr '\n' ' '; }
got=$(stages --pp-partition parameters)
[ "$got" = "0..1 2..3 4..5 " ] && ok || bad "--pp-partition parameters at P = 3: units $got"
got=$(stages)
[ "$got" = "0..2 3..3 4..5 " ] && ok || bad "--pp-partition uniform at P = 3: units $got"
run p3-params 3 --pp 3 --pp-partition parameters --stage 1 && same p3-params ref1

# accounting, per stage: every category measured = predicted on every
# rank, and the traffic (reduce-scatter and allgather over each stage's
# data-parallel group, the point-to-point sends and receives); the
# activations and messages of P = 4 also by hand below
acct() { # NAME: its --csv folder
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
run acct4 4 --pp 4 --stage 1 --csv "$T/acct4" && acct acct4 && same acct4 ref1
run acct2 4 --pp 2 --stage 2 --pp-schedule gpipe --precision bf16 --csv "$T/acct2" && acct acct2
# by hand, rank 1 of P = 4 (one block, B = 2, T = 16, C = 32, NH = 4,
# BT = 32): its input B·T·C plus the block's 16·BT·C + 4·BT + B·NH·T²
# floats = 19584 floats = 78336 bytes a micro-batch, kept for
# min(P - 1, m) = 3 micro-batches under 1F1B; it sends and receives m = 4
# activations and 4 gradients of B·T·C fp32 a step, 32768 bytes each way
m1=$(awk '$1 == 1 && $2 == "activations" { print $3 }' "$T/acct4/memory.csv")
[ "$m1" = $((3 * 78336)) ] && ok || bad "P = 4 rank 1 activations $m1, expected $((3 * 78336))"
for op in send recv; do
    b=$(awk -v o="$op" '$1 == 1 && $2 == o && $3 == "all" { print $5 }' "$T/acct4/comm.csv")
    [ "$(printf '%.0f' "$b")" = $((3 * 32768)) ] && ok ||
        bad "P = 4 rank 1 $op: $b bytes in 3 steps, expected $((3 * 32768))"
done
# zerosim plan --pp: the most loaded stage (here the last: the head's
# logits) holds what that stage's ranks measured, category by category;
# its point-to-point bytes per step are what they sent
"$ZS" plan --arch gpt --layers 4 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 \
    --grad-accum 4 --dp 2 --pp 2 --stage 2 --pp-schedule gpipe --precision bf16 --json \
    >"$T/plan.json" || bad "zerosim plan --pp 2"
ms=$(sed -n 's/.*"most_loaded_stage": \([0-9]*\).*/\1/p' "$T/plan.json")
[ "$ms" = 1 ] && ok || bad "plan --pp 2: the most loaded stage is $ms, expected 1"
sed -n '/"bytes_per_category"/,/}/p' "$T/plan.json" >"$T/plan.cat"
for cat in params grads optimizer_m optimizer_v optimizer_master activations comm_buffers workspace; do
    m=$(awk -v c="$cat" '$1 == 2 && $2 == c { print $3 }' "$T/acct2/memory.csv")
    p=$(sed -n "s/.*\"$cat\": \([0-9]*\).*/\1/p" "$T/plan.cat")
    [ -n "$m" ] && [ "$m" = "$p" ] && ok || bad "plan --pp 2 stage 1 $cat: run $m, plan $p"
done
b=$(awk '$1 == 2 && $2 == "send" && $3 == "all" { print $5 }' "$T/acct2/comm.csv")
p=$(sed -n 's/.*"p2p_send_bytes_per_step": \([0-9]*\).*/\1/p' "$T/plan.json")
[ -n "$p" ] && [ "$(printf '%.0f' "$b")" = $((3 * p)) ] && ok ||
    bad "plan --pp 2: $p bytes sent per step, the run's last stage $b in 3 steps"

# the micro-batches in flight (counted from each stage's program) are the
# slots allocated: 1F1B min(P - rank, m), GPipe all m
inflight() { sed -n 's/.*"in_flight_max": \([0-9]*\).*/\1/p' "$T/$1.json" | tr '\n' ' '; }
got=$(inflight acct4)
[ "$got" = "4 3 2 1 " ] && ok || bad "1F1B P = 4: in flight $got, expected 4 3 2 1"
got=$(inflight acct2)
[ "$got" = "4 4 4 4 " ] && ok || bad "GPipe P = 2, 2 data-parallel: in flight $got, expected 4 4 4 4"
grep -q '"ideal_bubble_fraction": 0.2' "$T/acct2.json" && ok ||
    bad "the report's ideal bubble for P = 2, m = 4 is not 1/5"

# the warm-up of each stage, from the program's ops: F = the micro-
# batches forwarded before the stage's first backward; 1F1B's steady state
# starts with one forward, so its warm-up is F - 1 (when F < m), GPipe's F
forwards() { # P m schedule: F of each stage
    "$ZS" train --layers 4 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 \
        --grad-accum "$2" --pp "$1" --pp-schedule "$3" --print-program --world-size "$1" |
        awk '/^# step program/ { if (st++) printf "%d ", n; n = 0; seen = 0; split("", mb) }
             $1 ~ /^[0-9]+$/ && $5 == "backward" { seen = 1 }
             $1 ~ /^[0-9]+$/ && $5 == "forward" && !seen && !($4 in mb) { mb[$4] = 1; n++ }
             END { printf "%d\n", n }'
}
# P = 4, m = 6: warm-ups min(P - r - 1, m) = 3 2 1 0
got=$(forwards 4 6 1f1b)
[ "$got" = "4 3 2 1" ] && ok || bad "1F1B at P = 4, m = 6: $got forwards first, expected 4 3 2 1 (warm-up 3 2 1 0)"
got=$(forwards 2 4 1f1b)
[ "$got" = "2 1" ] && ok || bad "1F1B at P = 2, m = 4: $got forwards first, expected 2 1 (warm-up 1 0)"
# m = 2 < P - 1: the first stages forward all m first (min(P - r - 1, m) = m)
got=$(forwards 4 2 1f1b)
[ "$got" = "2 2 2 1" ] && ok || bad "1F1B at P = 4, m = 2: $got forwards first, expected 2 2 2 1"
got=$(forwards 4 4 gpipe)
[ "$got" = "4 4 4 4" ] && ok || bad "GPipe at P = 4, m = 4: $got forwards first, expected 4 4 4 4"

# refusals: one line each, non-zero exit (checked by the configuration
# alone, --print-program --world-size N, but the last, which needs a run)
W="--print-program --world-size 2"
refuse -m "more pipeline stages than the model's 4 blocks" train $M --pp 5 --print-program --world-size 5
refuse -m "pp-schedule must be gpipe, 1f1b or interleaved" train $M --pp 2 --pp-schedule zigzag $W
# the interleaved schedule: validated as Megatron-LM asks (v of at least 2
# dividing the blocks per rank, m a multiple of P; runs in test_pipeline_int.sh)
I="--pp-schedule interleaved"
refuse -m "does not divide the blocks per pipeline rank" train $M --pp 2 $I --virtual-stages 4 $W
refuse -m "to be a multiple of --pp 4" train $M --pp 4 $I --virtual-stages 2 --grad-accum 6 --layers 8 \
    --print-program --world-size 4
refuse -m "needs --virtual-stages of at least 2" train $M --pp 2 $I $W
refuse -m "is for the interleaved schedule" train $M --pp 2 --virtual-stages 2 $W
refuse -m "use --model gpt or llama, or --pp 1" train $M --pp 2 --model mlp $W
refuse -n 2 -o "$T/ck" -m "does not support checkpoints" train $M --pp 2 --save-dir "$T/ck"

finish
