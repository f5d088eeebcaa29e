#!/bin/sh
# The planner's step time against real runs on this machine, side by side in
# one run: for N = 2 and 4 and stages 0-3, `zerosim bench` calibrates (the
# GEMM rate, the other kernels and the optimizer with all N ranks busy,
# alpha and beta of the engine's reduce-scatter and allgather), a real run
# of a small GPT is timed right after (the mean of its steps after the
# first) and `zerosim plan --calibration` predicts the same run.
#
# This machine's own speed drifts: a bare GEMM loop's time swings by up to
# 40% from one 50 ms stretch to the next, in CPU time as much as in wall
# time. So each case is calibrated right before each of its timed runs, and
# the cases are measured in ROUNDS interleaved rounds (every case once per
# round), so that a slow minute falls on all of them alike. Prints, per
# case, the sum of the predictions over the rounds / the sum of the
# measured times, and the range of the single rounds' ratios; the target is
# within 15%.
#
#     sh bench/bench_steptime.sh [ZEROSIM]        (ROUNDS=3 by default)
set -u
ZS=${1:-${ZEROSIM:-./zerosim}}
HERE=$(dirname "$0")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OPENBLAS_NUM_THREADS=1
MPIRUN="sh $HERE/../tests/mpirun.sh"
SHAPE="--layers 4 --hidden 512 --heads 8 --seq 32 --vocab 1024 --micro-batch 16"
STEPS=5
ROUNDS=${ROUNDS:-3}
case $ROUNDS in '' | *[!0-9]* | 0) echo "ROUNDS must be a positive whole number, got '$ROUNDS'"; exit 2 ;; esac

: > "$T/rounds.txt"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for n in 2 4; do
        for stage in 0 1 2 3; do
            if ! $MPIRUN "$n" "$ZS" bench --out "$T/cal.json" > "$T/bench.log" 2>&1; then
                echo "zerosim bench failed on $n ranks:"; cat "$T/bench.log"; exit 1
            fi
            d="$T/run-$n-$stage"
            if ! $MPIRUN "$n" "$ZS" train $SHAPE --stage "$stage" --steps $STEPS --warmup 0 \
                    --quiet --csv "$d" > "$T/train.log" 2>&1; then
                echo "training failed (N=$n, stage $stage):"; cat "$T/train.log"; exit 1
            fi
            meas=$(awk '$1 !~ /^#/ && $1 >= 1 { s += $6; k++ } END { if (k) printf "%.6f", s / k }' "$d/steps.csv")
            pred=$("$ZS" plan --arch gpt $SHAPE --dp "$n" --stage "$stage" \
                       --calibration "$T/cal.json" --csv - | awk '$1 !~ /^#/ { print $9 }')
            echo "$n $stage $meas $pred" >> "$T/rounds.txt"
        done
    done
    r=$((r + 1))
done

printf '#%3s %6s %14s %14s %10s %16s %8s\n' N stage measured_s predicted_s pred/meas "rounds' range" target
awk -v R="$ROUNDS" '
    { k = $1 " " $2; m[k] += $3; p[k] += $4; q = $4 / $3
      if (!(k in lo) || q < lo[k]) lo[k] = q
      if (!(k in hi) || q > hi[k]) hi[k] = q
      if (!(k in seen)) { seen[k] = 1; order[++n] = k } }
    END {
        for (i = 1; i <= n; i++) {
            k = order[i]; split(k, f, " "); ratio = p[k] / m[k]
            ok = ratio >= 0.85 && ratio <= 1.15
            if (!ok) fails++
            printf "%4d %6d %14.4f %14.4f %10.3f %7.3f-%-8.3f %8s\n", f[1], f[2], m[k] / R, p[k] / R,
                   ratio, lo[k], hi[k], ok ? "ok" : "MISSED"
        }
        printf "# %d of %d outside 15%% (means over %d interleaved rounds)\n", fails, n, R
    }' "$T/rounds.txt"
