#!/bin/sh
# The report at scale: GPT-3 175B (labs/06-planning's shape: bf16,
# micro-batch 1 of 2048 tokens, sqrt checkpointing) at ZeRO stage 3 as a
# phantom run on N = 1K, 4K, 16K, 64K and 100K simulated ranks, with and
# without --report. For each N: wall seconds and CPU seconds (user + sys)
# of the run with the report and without, the process's peak RSS with the
# report, the report's size, and each figure's growth over the previous N
# beside N's own (1.00x per 4x of N would be constant; 4.00x linear).
# On a shared machine the wall time is noise; the CPU seconds are what the
# run spent. Needs GNU time (/usr/bin/time) for RSS and CPU.
# Usage: ZEROSIM=./zerosim sh bench/report_scale.sh [N ...]
set -eu
ZS=${ZEROSIM:-./zerosim}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
GPT3="--layers 96 --hidden 12288 --heads 96 --seq 2048 --vocab 50257 --micro-batch 1 --precision bf16"
SIZES=${*:-1024 4096 16384 65536 100000}
TIME=/usr/bin/time
[ -x "$TIME" ] && "$TIME" -f "%e" true 2>/dev/null ||
    { echo "report_scale: GNU time (/usr/bin/time) is needed for RSS and CPU seconds" >&2; exit 1; }

# measure OUT ARGS...: the run's "wall cpu rss_kb" into OUT
measure() {
    out=$1
    shift
    if ! "$TIME" -f "%e %U %S %M" -o "$T/time" "$ZS" train --phantom --stage 3 $GPT3 \
            --checkpoint-activations sqrt --steps 2 --silent "$@" 2> "$T/err"; then
        echo "report_scale: zerosim train $* failed: $(tail -2 "$T/err")" >&2
        exit 1
    fi
    awk '{ printf "%s %.2f %s\n", $1, $2 + $3, $4 }' "$T/time" > "$out"
}

echo "# GPT-3 175B, stage 3, phantom, 2 steps; wall/cpu in s, rss in MB, report in bytes;"
echo "# x: growth over the previous N"
printf "%7s %8s %8s %8s %8s %8s %10s %7s %7s %7s %7s\n" N wall cpu cpu_norep rss_MB \
    rss_norep report_B "x_N" "x_cpu" "x_rss" "x_size"
prev=
for n in $SIZES; do
    measure "$T/rep" --world-size "$n" --report "$T/r.json"
    measure "$T/norep" --world-size "$n"
    size=$(wc -c < "$T/r.json" | tr -d ' ')
    read -r wall cpu rss < "$T/rep"
    read -r _ cpu0 rss0 < "$T/norep"
    line="$n $wall $cpu $cpu0 $rss $rss0 $size"
    echo "$line $prev" | awk '{
        xn = "-"; xc = "-"; xr = "-"; xs = "-"
        if (NF >= 14) {
            xn = sprintf("%.2fx", $1 / $8); xc = sprintf("%.2fx", $3 / $10)
            xr = sprintf("%.2fx", $5 / $12); xs = sprintf("%.2fx", $7 / $14)
        }
        printf "%7d %8.2f %8.2f %8.2f %8.1f %8.1f %10d %7s %7s %7s %7s\n",
            $1, $2, $3, $4, $5 / 1024, $6 / 1024, $7, xn, xc, xr, xs }'
    prev=$line
done
