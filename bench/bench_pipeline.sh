#!/bin/sh
# Pipeline against data parallelism on the same model and the same global
# batch: P = 2 stages (1F1B, GPipe and interleaved with 2 model chunks a
# rank) against DP = 2 (ZeRO stage 1), two ranks each. For each run: the mean step time after the first step, and
# for the pipeline each stage's measured idle fraction (seconds waiting in
# receives over the steps' time, the report's "pipeline" key) beside the
# ideal (P - 1)/(m + P - 1) (interleaved: (P - 1)/(v·m + P - 1)). M must
# be even (the interleaved schedule needs m a multiple of P). The model: 8 blocks, hidden 128, 4 heads,
# seq 64, vocab 256 (the two stages nearly balanced). DP = 2 runs m/2
# micro-batches of the same size per rank, so both see 8 micro-batches a
# step. Timings on a shared machine are noise: run it idle.
# Usage: ZEROSIM=./zerosim sh bench/bench_pipeline.sh [STEPS] [M]
set -eu
ZS=${ZEROSIM:-./zerosim}
HERE=$(dirname "$0")
STEPS=${1:-4}
M=${2:-8}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OPENBLAS_NUM_THREADS=1
MODEL="--layers 8 --hidden 128 --heads 4 --seq 64 --vocab 256 --micro-batch 4 --warmup 0 --stage 1"
run() { # NAME ARGS...
    name=$1; shift
    sh "$HERE/../tests/mpirun.sh" 2 "$ZS" train $MODEL --steps "$STEPS" "$@" \
        --report "$T/$name.json" --silent </dev/null
}
mean_step() { # report: mean of step_seconds after the first
    sed -n '/^  "step_seconds": \[/,/\]/p' "$1" | tr -d '[],' | awk 'NR > 2 && NF { s += $1; n++ }
        END { if (n) printf "%.3f", s / n; else printf "nan" }'
}
idle() { # report: each rank's idle fraction
    sed -n 's/.*"idle_fraction": \([0-9.e-]*\).*/\1/p' "$1" | awk '{ printf "%s%.3f", (NR > 1 ? " " : ""), $1 }'
}
run dp2 --grad-accum $((M / 2))
run pp2-1f1b --pp 2 --pp-schedule 1f1b --grad-accum "$M"
run pp2-gpipe --pp 2 --pp-schedule gpipe --grad-accum "$M"
run pp2-int2 --pp 2 --pp-schedule interleaved --virtual-stages 2 --grad-accum "$M"
echo "# $STEPS steps, 2 ranks, $M micro-batches of 4 per step; ideal bubble (P-1)/(m+P-1) = $(awk -v m="$M" 'BEGIN { printf "%.3f", 1 / (m + 1) }')"
echo "# run        mean_step_s  idle_stage0 idle_stage1"
echo "dp2          $(mean_step "$T/dp2.json")  -     -"
for r in pp2-1f1b pp2-gpipe pp2-int2; do
    echo "$r     $(mean_step "$T/$r.json")  $(idle "$T/$r.json")"
done
echo "# interleaved (2 chunks): ideal bubble (P-1)/(v*m+P-1) = $(awk -v m="$M" 'BEGIN { printf "%.3f", 1 / (2 * m + 1) }')"
