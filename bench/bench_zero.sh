#!/bin/sh
# zerosim benchmark, measured side by side in one run at N = 2 ranks:
#  1. step time of ZeRO stages 1, 2 and 3 relative to stage 0 (same model,
#     same batch; median step time after 3 warm-up steps, 3 runs each,
#     interleaved so that machine noise hits every stage alike);
#  2. bus bandwidth of the engine's reduce-scatter and allgather relative to
#     MPI_Allreduce on the same bytes.
# Usage: bench/bench_zero.sh [ranks] (from the build directory).
set -eu
N=${1:-2}
ZS=${ZEROSIM:-./zerosim}
HERE=$(dirname "$0")
RUN="sh $HERE/../tests/mpirun.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

MODEL="--layers 4 --hidden 128 --heads 4 --seq 64 --vocab 256 --micro-batch 4 --grad-accum 1 --steps 13"
# median step time of one run, steps 4.. (the first three warm up)
median_step() {
    sed -n '/"step_seconds"/,/\]/p' "$1" | grep -E '^ *[0-9.e+-]+,?$' | tr -d ' ,' | tail -n +4 |
        sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'
}
echo "# step time at N=$N ranks: $MODEL"
for rep in 1 2 3; do
    for st in 0 1 2 3; do
        $RUN "$N" "$ZS" train $MODEL --stage "$st" --silent --report "$T/s$st-$rep.json"
        median_step "$T/s$st-$rep.json" >>"$T/t$st"
    done
done
best() { sort -g "$1" | head -1; }
t0=$(best "$T/t0")
printf "# %6s %14s %10s %8s\n" stage "step_seconds" "vs_stage0" target
for st in 0 1 2 3; do
    t=$(best "$T/t$st")
    case $st in 0) tgt="-";; 3) tgt="<=1.50";; *) tgt="<=1.15";; esac
    awk -v s="$st" -v t="$t" -v t0="$t0" -v g="$tgt" 'BEGIN {printf "  %6d %14.6f %10.3f %8s\n", s, t, t/t0, g}'
done
echo
$RUN "$N" "${BENCH_COMM:-./bench/bench_comm}"

# 3. activation checkpointing: step time with sqrt checkpointing relative to
#    without, one rank, a 16-layer GPT (expected: about one extra forward
#    pass, 1.2-1.4x). Five rounds, each an "off" run and a "sqrt" run back to
#    back; the ratio is the median of the five rounds' ratios (each round's
#    pair ran within seconds of each other, so a slow minute of this shared
#    machine falls on both), with the rounds' range beside it.
CK="--layers 16 --hidden 64 --heads 4 --seq 32 --vocab 64 --micro-batch 8 --steps 13"
: >"$T/ck-off"; : >"$T/ck-sqrt"
for rep in 1 2 3 4 5; do
    for ck in off sqrt; do
        OPENBLAS_NUM_THREADS=1 "$ZS" train $CK --checkpoint-activations "$ck" --silent --report "$T/ck.json"
        median_step "$T/ck.json" >>"$T/ck-$ck"
    done
done
echo
printf "# %-22s %14s %10s %14s\n" checkpointing step_seconds vs_off "rounds' range"
paste "$T/ck-off" "$T/ck-sqrt" | awk '{ print $2 / $1 }' | sort -g >"$T/ck-ratio"
mid() { sort -g "$1" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
awk -v a="$(mid "$T/ck-off")" -v b="$(mid "$T/ck-sqrt")" -v r="$(mid "$T/ck-ratio")" \
    -v lo="$(head -1 "$T/ck-ratio")" -v hi="$(tail -1 "$T/ck-ratio")" 'BEGIN {
    printf "  %-22s %14.6f %10.3f\n", "off", a, 1
    printf "  %-22s %14.6f %10.3f %8.3f-%.3f\n", "sqrt (4 segments)", b, r, lo, hi }'

# 4. tensor parallelism beside data parallelism on the same model and the
#    same global batch at N ranks: TP = N (one data-parallel rank) against
#    DP = N (stage 0), step time (best of 3 medians, interleaved); and the
#    bus bandwidth of the TP all-reduces as the run measured them (the
#    largest message, its calls over the run) against MPI_Allreduce alone on
#    the same bytes.
TPM="--layers 4 --hidden 128 --heads 4 --seq 64 --vocab 256 --grad-accum 1 --steps 13"
: >"$T/tp"; : >"$T/dp"
for rep in 1 2 3; do
    $RUN "$N" "$ZS" train $TPM --micro-batch 4 --tp "$N" --report "$T/tp.json" >"$T/tp.out"
    median_step "$T/tp.json" >>"$T/tp"
    $RUN "$N" "$ZS" train $TPM --micro-batch $((4 / N > 0 ? 4 / N : 1)) --silent --report "$T/dp.json"
    median_step "$T/dp.json" >>"$T/dp"
done
echo
echo "# tensor parallelism at N=$N: $TPM, global batch 4"
printf "# %-14s %14s %10s\n" mesh step_seconds vs_dp
a=$(best "$T/dp"); b=$(best "$T/tp")
awk -v a="$a" -v b="$b" -v n="$N" 'BEGIN {printf "  %-14s %14.6f %10.3f\n  %-14s %14.6f %10.3f\n", "dp " n, a, 1, "tp " n, b, b/a}'
row=$(sed -n '/^comms on rank 0/,$p' "$T/tp.out" | awk '$1 == "allreduce" && $2 > m { m = $2; r = $0 } END { print r }')
bytes=$(echo "$row" | awk '{print $2}')
busbw=$(echo "$row" | awk '{print $6 * 1e9}')
ref=$($RUN "$N" "${BENCH_COMM:-./bench/bench_comm}" --allreduce-bytes "$bytes")
printf "# %12s %14s %14s %8s %8s\n" bytes tp_busbw mpi_busbw ratio target
awk -v s="$bytes" -v a="$busbw" -v b="$ref" 'BEGIN {printf "  %12d %14.3e %14.3e %8.2f %8s\n", s, a, b, a/b, ">=0.80"}'
