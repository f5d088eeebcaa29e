#!/bin/sh
# The host optimizer (offload's CPU step) against PyTorch's CPU AdamW, one
# thread each, in one run: zerosim's AdamW rate as `zerosim bench` measures
# it (4M fp32 elements, the median of its repetitions) beside PyTorch's on
# the same number of elements (bench/torch_adam.py), and the ratio. DeepSpeed
# reports its CPU-Adam 5-7x faster than PyTorch's; this says where zerosim's
# stands. Without PyTorch (python3 -c "import torch" fails) only zerosim's
# rate is printed, with the reason.
set -u
ZS=${ZEROSIM:-./zerosim}
HERE=$(dirname "$0")
PY=${TORCH_PYTHON:-/usr/bin/python3}
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
zs=$("$ZS" bench 2>/dev/null | sed -n 's/^AdamW: \([0-9.]*\) M elements\/s per rank$/\1/p')
[ -n "$zs" ] || { echo "bench_adam.sh: zerosim bench printed no AdamW rate" >&2; exit 1; }
echo "# optimizer        M_elements_per_s   zerosim/this"
echo "zerosim_adamw      $zs                1.00"
if ! "$PY" -c "import torch" 2>/dev/null; then
    echo "# PyTorch column skipped: $PY cannot import torch (install python3-torch)"
    exit 0
fi
"$PY" "$HERE/torch_adam.py" 4194304 9 | while read -r name _ rate; do
    awk -v n="$name" -v r="$rate" -v z="$zs" 'BEGIN {printf "%-18s %-18.1f %.2f\n", n, r / 1e6, z / (r / 1e6)}'
done
