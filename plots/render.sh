#!/bin/sh
# Render the three plots (memory_vs_n.png, traffic.png, timeline.png) from
# the .dat files that examples/sweep.sh writes, and plan_memory.png when
# DATADIR has plan_memory.dat (zerosim plan --csv), and gantt.png when it has
# gantt.dat (plots/gantt_data of a --trace file).
# Usage: plots/render.sh [DATADIR [OUTDIR]] (defaults: plots/data, plots).
# Exits 77 (skipped) when gnuplot is missing; $GNUPLOT names another one.
set -eu
HERE=$(dirname "$0")
DATA=${1:-plots/data}
OUT=${2:-plots}
GP=${GNUPLOT:-gnuplot}
if [ "$GP" = no ] || ! command -v "$GP" >/dev/null 2>&1; then
    echo "render.sh: gnuplot not found (install gnuplot-nox): no plots" >&2
    exit 77
fi
case $DATA$OUT in *\'*) echo "render.sh: directory names may not contain a quote" >&2; exit 1;; esac
for p in memory_vs_n traffic timeline; do
    [ -s "$DATA/$p.dat" ] || { echo "render.sh: no $DATA/$p.dat (run examples/sweep.sh first)" >&2; exit 1; }
done
mkdir -p "$OUT"
for p in memory_vs_n traffic timeline; do
    "$GP" -e "datadir='$DATA'; outdir='$OUT'" "$HERE/$p.gp"
    echo "render.sh: wrote $OUT/$p.png"
done
if [ -s "$DATA/gantt.dat" ]; then
    "$GP" -e "datadir='$DATA'; outdir='$OUT'" "$HERE/gantt.gp"
    echo "render.sh: wrote $OUT/gantt.png"
fi
if [ -s "$DATA/pipeline_gantt.dat" ]; then
    "$GP" -e "datadir='$DATA'; outdir='$OUT'; name='pipeline_gantt'" "$HERE/gantt.gp"
    echo "render.sh: wrote $OUT/pipeline_gantt.png"
fi
if [ -s "$DATA/pipeline_int_gantt.dat" ]; then
    "$GP" -e "datadir='$DATA'; outdir='$OUT'; name='pipeline_int_gantt'" "$HERE/gantt.gp"
    echo "render.sh: wrote $OUT/pipeline_int_gantt.png"
fi
if [ -s "$DATA/plan_memory.dat" ]; then
    "$GP" -e "datadir='$DATA'; outdir='$OUT'" "$HERE/plan_memory.gp"
    echo "render.sh: wrote $OUT/plan_memory.png"
fi
