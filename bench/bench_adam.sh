#!/bin/sh
# The host optimizer (offload's CPU step) against PyTorch's CPU AdamW, one
# thread each, in one run: zerosim's AdamW rate as `zerosim bench` measures
# it (4M fp32 elements, the median of its repetitions) beside PyTorch's on
# the same number of elements (bench/torch_adam.py: its per-tensor loop and
# its foreach implementation), in ROUNDS (3) interleaved rounds, medians and
# the rounds' range. DeepSpeed reports its CPU-Adam 5-7x faster than
# PyTorch's; this says where zerosim's stands. Without PyTorch (python3 -c
# "import torch" fails) only zerosim's rate is printed, with the reason.
set -u
ZS=${ZEROSIM:-./zerosim}
HERE=$(dirname "$0")
PY=${TORCH_PYTHON:-/usr/bin/python3}
ROUNDS=${ROUNDS:-3}
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
torch=1
"$PY" -c "import torch" 2>/dev/null || torch=0
r=0
while [ "$r" -lt "$ROUNDS" ]; do
    z=$("$ZS" bench 2>/dev/null | sed -n 's/^AdamW: \([0-9.]*\) M elements\/s per rank$/\1/p')
    [ -n "$z" ] || { echo "bench_adam.sh: zerosim bench printed no AdamW rate" >&2; exit 1; }
    echo "zerosim_adamw $z" >>"$T/rates"
    if [ "$torch" = 1 ]; then
        "$PY" "$HERE/torch_adam.py" 4194304 9 |
            awk '{printf "%s %.1f\n", $1, $3 / 1e6}' >>"$T/rates"
    fi
    r=$((r + 1))
done
echo "# optimizer           M_elements_per_s (median of $ROUNDS rounds; range)   zerosim/this"
zmed=$(awk '$1 == "zerosim_adamw" {print $2}' "$T/rates" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')
for name in zerosim_adamw torch_adamw_loop torch_adamw_foreach; do
    awk -v n="$name" '$1 == n {print $2}' "$T/rates" | sort -n |
        awk -v n="$name" -v z="$zmed" 'NF {v[NR] = $1} END {
            if (NR == 0) exit
            m = v[int((NR + 1) / 2)]
            printf "%-21s %10.1f   (%.1f-%.1f)                          %.2f\n", n, m, v[1], v[NR], z / m}'
done
[ "$torch" = 1 ] || echo "# PyTorch columns skipped: $PY cannot import torch (install python3-torch)"
