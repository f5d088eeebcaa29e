#!/bin/sh
# Step time of the portable backend (--backend ref, src/backend/ref.c)
# against the CPU backend (OpenBLAS) on the same GPT, side by side in one
# run: for each shape, ROUNDS interleaved rounds of cpu and ref (so that a
# slow minute of this machine falls on both alike), each STEPS steps with
# --deterministic on one rank; the median over the rounds of each round's
# median steady step (the first step left out). The issue's target: ref
# within 3x of cpu at the medium shape (the second row, bench_speed.sh's).
#
# usage: sh bench/bench_ref.sh   (ZEROSIM=./zerosim; ROUNDS=3; STEPS=6)
set -u
ZS=${ZEROSIM:-./zerosim}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-6}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
case $ROUNDS in '' | *[!0-9]* | 0) echo "ROUNDS must be a positive whole number, got '$ROUNDS'"; exit 2 ;; esac

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# one_round BACKEND L C H T V B: the median steady step time of one run
one_round() {
    be=$1
    shift
    "$ZS" train --backend "$be" --deterministic --layers "$1" --hidden "$2" --heads "$3" \
        --seq "$4" --vocab "$5" --micro-batch "$6" --steps "$STEPS" --warmup 0 --quiet \
        --report "$T/r.json" </dev/null >"$T/log" 2>&1 || { echo nan; return; }
    python3 -c "
import json, statistics
print(statistics.median(json.load(open('$T/r.json'))['step_seconds'][1:]))"
}

echo "# step time, --backend cpu (OpenBLAS) against --backend ref, one rank, fp32, --deterministic"
echo "# CPU kernels: $("$ZS" bench --quick 2>/dev/null | sed -n 's/.*CPU kernels in \([a-z0-9]*\).*/\1/p')"
printf '%-8s %-26s %10s %10s %8s\n' "shape" "L,C,H,T,V,B" "cpu s" "ref s" "ref/cpu"
for row in "small 4 128 2 64 256 4" "medium 4 256 4 128 512 8" "wide 2 768 12 256 1024 4"; do
    set -- $row
    name=$1
    shift
    : >"$T/cpu.list"
    : >"$T/ref.list"
    r=1
    while [ "$r" -le "$ROUNDS" ]; do
        one_round cpu "$@" >>"$T/cpu.list"
        one_round ref "$@" >>"$T/ref.list"
        r=$((r + 1))
    done
    c=$(median <"$T/cpu.list")
    f=$(median <"$T/ref.list")
    printf '%-8s %-26s %10.4f %10.4f %8.2f\n' "$name" "$1,$2,$3,$4,$5,$6" "$c" "$f" \
        "$(awk -v a="$f" -v b="$c" 'BEGIN { print a / b }')"
done
