#!/bin/sh
# The reduce-scatter's own temporaries, counted in comm_buffers while it
# runs and predicted (zerosim/comm.h, src/zero/program_count.c): the two-level
# (--hierarchical) reduce-scatter's node sums, and ZeRO++ qgZ's fp32 copy,
# node sums, result and encoded all-to-all buffers. On 4 ranks as 2 nodes
# of 2, every rank's measured comm_buffers peak equals the prediction
# byte for byte (and so do the model-state categories) for
# --hierarchical at stages 1, 2, 3 (fp32) and deterministic stage 3,
# qgZ (bf16 stage 3) and all three ZeRO++ techniques; each holds more
# than the flat run of its stage (the temporaries are counted). By hand:
# stage 1's single bucket is the whole padded model, so the node sums are
# padded/2 fp32 elements on every rank (2 columns of padded/4): the
# hierarchical run's comm_buffers are the flat run's plus 2 x padded bytes.
# Phantom runs, 64 ranks of 8 per node (--hierarchical at stages 2
# deterministic and 3, all three ZeRO++ techniques), and --hierarchical
# with --tp 2 (8 ranks) and --tp 2 --pp 2 (16 ranks), 4 per node: every
# rank measured = predicted.
. "$(dirname "$0")/testlib.sh"

MODEL="--layers 2 --hidden 24 --heads 4 --seq 10 --vocab 38 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0"
exact() { # dir label [ranks]: every rank's comm_buffers and model states = predicted
    awk -v L="$2" -v R="${3:-4}" '
        $1 ~ /^#/ { next }
        $2 ~ /^(params|grads|optimizer|comm_buffers|workspace)$/ {
            if ($3 != $4) { printf "FAIL: %s rank %s %s: measured %s predicted %s\n", L, $1, $2, $3, $4; bad++ }
            if ($2 == "comm_buffers") n++ }
        END { exit (bad > 0 || n != R) }' "$1/memory.csv"
}
cb() { awk -v q="$2" '$1 == q && $2 == "comm_buffers" { print $3 }' "$1/memory.csv"; }
more() { # a b label: every rank's comm_buffers in a above b's
    for q in 0 1 2 3; do
        x=$(cb "$T/$1" $q) y=$(cb "$T/$2" $q)
        [ -n "$x" ] && [ -n "$y" ] && [ "$x" -gt "$y" ] || { echo "FAIL: $3 rank $q: $x not above $y"; return 1; }
    done
}

for st in 1 2 3; do
    run_2x2 "s$st-flat" --stage $st
    run_2x2 "s$st-hier" --stage $st --hierarchical
    exact "$T/s$st-hier" "stage $st hierarchical" && ok || bad "stage $st hierarchical: accounting differs from the prediction"
    more "s$st-hier" "s$st-flat" "stage $st" && ok || bad "stage $st: the hierarchical temporaries are not counted"
done
run_2x2 det-flat --stage 3 --deterministic
run_2x2 det-hier --stage 3 --deterministic --hierarchical
exact "$T/det-hier" "deterministic hierarchical" && ok || bad "deterministic hierarchical: accounting differs from the prediction"
more det-hier det-flat deterministic && ok || bad "deterministic: the hierarchical temporaries are not counted"

# by hand, stage 1: + 2 x padded bytes
bad_q=
padded=$(key "$T/s1-flat.json" padded_params)
for q in 0 1 2 3; do
    [ -n "$padded" ] && [ "$(cb "$T/s1-hier" $q)" = "$(( $(cb "$T/s1-flat" $q) + 2 * padded ))" ] ||
        { echo "FAIL: rank $q: $(cb "$T/s1-hier" $q) is not $(cb "$T/s1-flat" $q) + 2 x $padded"; bad_q=1; }
done
[ -z "$bad_q" ] && ok || bad "stage 1: the node sums are not padded/2 fp32 elements"

run_2x2 bf16 --stage 3 --precision bf16
run_2x2 qgz --stage 3 --precision bf16 --quantized-gradients
run_2x2 zpp --stage 3 --precision bf16 --quantized-gradients --quantized-weights --hpz-partition-size 2
for l in qgz zpp; do
    exact "$T/$l" "$l" && ok || bad "$l: accounting differs from the prediction"
done
more qgz bf16 qgZ && ok || bad "qgZ: its temporaries are not counted"

for args in "ph3:--stage 3 --hierarchical" "ph2d:--stage 2 --deterministic --hierarchical" \
    "phz:--stage 3 --precision bf16 --quantized-gradients --quantized-weights --hpz-partition-size 8"; do
    l=${args%%:*}
    # shellcheck disable=SC2086
    "$ZS" train $MODEL ${args#*:} --ranks-per-node 8 --phantom --world-size 64 --quiet \
        --csv "$T/$l" > "$T/$l.log" 2>&1 && exact "$T/$l" "phantom $l" 64 && ok ||
        bad "phantom N=64 K=8 ${args#*:}: accounting differs from the prediction $(tail -1 "$T/$l.log")"
done
# with a mesh: the data-parallel group's nodes as zerosim mesh lays the
# ranks out (--tp 2 at 4 per node: data-parallel nodes of 2; --tp 2 --pp 2:
# each stage's group)
for args in "mtp:--stage 2 --tp 2 --world-size 8:8" "mtpp:--stage 1 --tp 2 --pp 2 --world-size 16:16"; do
    l=${args%%:*} a=${args#*:}
    # shellcheck disable=SC2086
    "$ZS" train $MODEL ${a%:*} --hierarchical --ranks-per-node 4 --phantom --quiet \
        --csv "$T/$l" > "$T/$l.log" 2>&1 && exact "$T/$l" "phantom $l" "${a##*:}" && ok ||
        bad "phantom ${a%:*} --hierarchical: accounting differs from the prediction $(tail -1 "$T/$l.log")"
done
finish
