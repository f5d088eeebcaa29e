#!/bin/sh
# Sweep ZeRO stages 0-3 over rank counts N with a small GPT, run each with
# `zerosim train --csv`, and gather rank 0's numbers into gnuplot data files:
#   memory_vs_n.dat  peak model-state bytes per rank, measured and predicted
#   traffic.dat      bytes sent per step per rank, measured and predicted
#   timeline.dat     memory over one step: timeline.csv of stage 3, largest N
# Usage: examples/sweep.sh [OUTDIR] (from the build directory; OUTDIR
# defaults to plots/data). Environment: ZEROSIM (default ./zerosim),
# SWEEP_NS (default "1 2 3 4"), SWEEP_MODEL (zerosim train options).
set -eu
ZS=${ZEROSIM:-./zerosim}
SRC=$(dirname "$0")/..
NS=${SWEEP_NS:-1 2 3 4}
MODEL=${SWEEP_MODEL:---layers 2 --hidden 64 --heads 4 --seq 32 --vocab 64 --micro-batch 4 --steps 3 --warmup 0 --quiet}
OUT=${1:-plots/data}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
trap 'exit 1' HUP INT TERM
mkdir -p "$OUT"

die() { echo "sweep.sh: $*" >&2; exit 1; }

# mem_row ST N DIR: one memory_vs_n.dat row from DIR/memory.csv
mem_row() {
    awk -v st="$1" -v n="$2" '
        /^#/ || $1 != 0 { next }
        { peak[$2] = $3; pred[$2] = $4 }
        END {
            split("params grads optimizer", c, " ")
            m = 0; p = 0; none = 0
            for (i = 1; i <= 3; i++) {
                if (!(c[i] in peak)) { print "no rank-0 row for " c[i] > "/dev/stderr"; exit 1 }
                m += peak[c[i]]
                p += pred[c[i]]
                if (pred[c[i]] < 0) none = 1
            }
            if (none) p = -1   # a part without prediction: no predicted sum
            printf "%d %d %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f\n", st, n,
                peak["params"], peak["grads"], peak["optimizer"], m,
                pred["params"], pred["grads"], pred["optimizer"], p
        }' "$3/memory.csv"
}

# traffic_row ST N DIR: one traffic.dat row from DIR/comm.csv (its phase
# "all" rows) and DIR/run.csv (the step count). An op that sends bytes but
# has no prediction is left out of predicted_total and noted in $T/nopred.
traffic_row() {
    steps=$(awk '!/^#/ { print $7; exit }' "$3/run.csv")
    [ "${steps:-0}" -ge 1 ] 2>/dev/null || { echo "no step count in run.csv" >&2; return 1; }
    awk -v st="$1" -v n="$2" -v steps="$steps" -v nopred="$T/nopred" '
        /^#/ || $1 != 0 || $3 != "all" { next }
        {
            b[$2] = $5; tot += $5
            if ($6 >= 0) ptot += $6
            else if ($5 > 0) print $2, $5 / steps >>nopred
        }
        END {
            if (!("reduce_scatter" in b) || !("allgather" in b)) { print "no rank-0 phase-all rows" > "/dev/stderr"; exit 1 }
            printf "%d %d %.15g %.15g %.15g %.15g\n", st, n, b["reduce_scatter"] / steps,
                b["allgather"] / steps, tot / steps, ptot / steps
        }' "$3/comm.csv"
}

max=0
for n in $NS; do [ "$n" -gt "$max" ] && max=$n; done
: >"$T/mem"
: >"$T/traffic"
for st in 0 1 2 3; do
    for n in $NS; do
        run="stage $st, N=$n"
        d="$T/s$st-n$n"
        # MODEL holds several options: split it into words on purpose
        # shellcheck disable=SC2086
        if ! sh "$SRC/tests/mpirun.sh" "$n" "$ZS" train $MODEL --stage "$st" --csv "$d" >"$T/log" 2>&1; then
            cat "$T/log" >&2
            die "run failed: $run: $ZS train $MODEL --stage $st --csv DIR"
        fi
        for f in run memory comm timeline; do
            [ -s "$d/$f.csv" ] || die "run $run wrote no $f.csv"
        done
        mem_row "$st" "$n" "$d" >>"$T/mem" || die "bad memory.csv from run $run"
        traffic_row "$st" "$n" "$d" >>"$T/traffic" || die "bad comm.csv from run $run"
        if [ "$st" -eq 3 ] && [ "$n" -eq "$max" ]; then
            { echo "# run ZeRO stage 3, N=$n"; cat "$d/timeline.csv"; } >"$OUT/timeline.dat"
        fi
        rm -rf "$d"
    done
done
{
    echo "# stage N params grads optimizer model_states predicted_params predicted_grads predicted_optimizer predicted_model_states"
    sort -n -k1,1 -k2,2 "$T/mem"
} >"$OUT/memory_vs_n.dat"
{
    echo "# stage N reduce_scatter_bytes allgather_bytes total_bytes predicted_total"
    sort -n -k1,1 -k2,2 "$T/traffic"
} >"$OUT/traffic.dat"
if [ -s "$T/nopred" ]; then
    awk '{ if ($2 > m[$1]) m[$1] = $2 } END { for (op in m) printf "sweep.sh: note: %s has no traffic prediction (up to %.15g bytes per step); predicted_total leaves it out\n", op, m[op] }' "$T/nopred" >&2
fi
echo "sweep.sh: wrote $OUT/memory_vs_n.dat, traffic.dat and timeline.dat (stage 3, N=$max)"
