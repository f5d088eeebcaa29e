#!/bin/sh
# A tiny sweep (ZeRO stages 0-3 on N = 1 and 2 ranks) through
# examples/sweep.sh and plots/render.sh gives three PNG files, and in every
# run rank 0's measured model-state memory equals its prediction exactly; a
# traced stage-3 run gives the Gantt chart (plots/gantt_data, gantt.gp), and
# a traced --pp 2 run the pipeline's.
# Skipped (77) without gnuplot.
set -u
srcdir=${srcdir:-$(dirname "$0")/..}
GP=${GNUPLOT:-gnuplot}
if [ "$GP" = no ] || ! command -v "$GP" >/dev/null 2>&1; then
    echo "SKIP: gnuplot not found"; exit 77
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMPI_MCA_orte_tmpdir_base="$T" # as tests/testlib.sh says why
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

SWEEP_NS="1 2" SWEEP_MODEL="--layers 1 --hidden 32 --heads 2 --seq 16 --vocab 32 --micro-batch 2 --steps 2 --warmup 0 --quiet" \
    sh "$srcdir/examples/sweep.sh" "$T/data" || { echo "FAIL: examples/sweep.sh"; exit 1; }
# the Gantt chart of a traced stage-3 step on 2 ranks: one compute and one
# communication lane per rank, the spans of step 1 only
sh "$srcdir/tests/mpirun.sh" 2 "${ZEROSIM:-./zerosim}" train --layers 2 --hidden 32 --heads 2 \
    --seq 16 --vocab 32 --micro-batch 2 --steps 2 --stage 3 --quiet --trace "$T/trace.json" \
    </dev/null || bad "the traced run failed"
GANTT=${GANTT_DATA:-./plots/gantt_data}
"$GANTT" "$T/trace.json" 1 >"$T/data/gantt.dat" || bad "gantt_data failed"
lanes=$(awk '!/^#/ {print $1 ":" $2}' "$T/data/gantt.dat" | sort -u | tr '\n' ' ')
[ "$lanes" = "0:0 0:1 1:0 1:1 " ] || bad "gantt.dat lanes are $lanes, not a compute and a comm lane per rank"
kinds=$(awk '!/^#/ {print $5}' "$T/data/gantt.dat" | sort -u | tr '\n' ' ')
case "$kinds" in *"0 1 "*5*6*) ;; *) bad "gantt.dat lacks forward, backward, allgather or reduce-scatter: kinds $kinds";; esac
"$GANTT" "$T/trace.json" 7 >/dev/null 2>"$T/err" && bad "gantt_data accepted a step the trace lacks"
grep -q "has no spans of step 7" "$T/err" || bad "gantt_data, missing step: $(cat "$T/err")"
# a pipeline's step (--pp 2, 1F1B): both stages forward and backward, and
# their receives of activations and gradients are drawn as waits (kind 3)
sh "$srcdir/tests/mpirun.sh" 2 "${ZEROSIM:-./zerosim}" train --layers 2 --hidden 32 --heads 2 \
    --seq 16 --vocab 32 --micro-batch 2 --grad-accum 4 --steps 2 --pp 2 --quiet \
    --trace "$T/pp.json" </dev/null || bad "the traced --pp 2 run failed"
"$GANTT" "$T/pp.json" 1 >"$T/data/pipeline_gantt.dat" || bad "gantt_data of the --pp run failed"
got=$(awk '!/^#/ && $2 == 0 && $5 <= 1 { print $1 ":" $5 }' "$T/data/pipeline_gantt.dat" | sort -u | tr '\n' ' ')
[ "$got" = "0:0 0:1 1:0 1:1 " ] || bad "pipeline_gantt.dat: (rank:kind) forward and backward $got"
grep -v '^#' "$T/data/pipeline_gantt.dat" | awk '$2 == 0 && $5 == 3 { n++ } END { exit !n }' ||
    bad "pipeline_gantt.dat: no receive drawn as a wait"

sh "$srcdir/plots/render.sh" "$T/data" "$T/png" || { echo "FAIL: plots/render.sh"; exit 1; }

for p in memory_vs_n traffic timeline gantt pipeline_gantt; do
    f="$T/png/$p.png"
    if [ ! -s "$f" ]; then bad "$p.png missing or empty"; continue; fi
    sig=$(od -An -tx1 -N8 "$f" | tr -d ' \n')
    [ "$sig" = 89504e470d0a1a0a ] || bad "$p.png does not start with the PNG signature ($sig)"
done

# 4 stages x 2 N rows, each stage with N = 1 and 2
rows=$(grep -vc '^#' "$T/data/memory_vs_n.dat")
[ "$rows" -eq 8 ] || bad "memory_vs_n.dat has $rows rows, not 8"
got=$(awk '!/^#/ { printf "%s:%s ", $1, $2 }' "$T/data/memory_vs_n.dat")
[ "$got" = "0:1 0:2 1:1 1:2 2:1 2:2 3:1 3:2 " ] || bad "memory_vs_n.dat has (stage:N) rows $got"
# measured model_states (column 6) equals predicted_model_states (column 10)
off=$(awk '!/^#/ && $6 != $10' "$T/data/memory_vs_n.dat")
if [ -n "$off" ]; then
    bad "measured model-state bytes differ from the prediction in these rows:"
    grep '^#' "$T/data/memory_vs_n.dat"
    echo "$off"
fi
[ "$fails" -eq 0 ] && echo "plots: 5 PNGs, 8 runs, model states as predicted, two Gantt charts"
[ "$fails" -eq 0 ]
