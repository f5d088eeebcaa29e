#!/bin/sh
# Step time of zerosim against PyTorch (Debian's python3-torch, CPU) on the
# same GPT (bench/torch_gpt.py), and on the same Llama (bench/torch_llama.py,
# one rank), side by side in one run: for each shape, ROUNDS interleaved
# rounds of zerosim and PyTorch, each STEPS steps; the median over the
# rounds of each round's median steady step (the first step left out).
# One thread per rank, fp32, AdamW, clipping at 1.0 on both sides.
#
# Also the model's FLOP rate against this core's SGEMM rate, measured by
# `zerosim bench --quick` on one rank right before each zerosim round (this
# machine's speed drifts from minute to minute; the figure is the median
# over the rounds of each round's rate over its own SGEMM rate, and the
# SGEMM column the median of those measurements). Training FLOPs per step:
#   tokens * (6 * params + 12 * layers * seq * hidden)
# (PaLM's count: the attention's two matrix products counted over the full
# T x T, as in the published MFU figures, though both sides skip some of it.)
#
# usage: sh bench/bench_speed.sh   (ZEROSIM=./zerosim; ROUNDS=3; STEPS=6)
# PyTorch's column is left out, with a note, where `import torch` fails.
set -u
ZS=${ZEROSIM:-./zerosim}
HERE=$(dirname "$0")
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-6}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPIEXEC=${MPIEXEC:-mpiexec}

# PyTorch: $PYTHON, else the first of python3 and Debian's /usr/bin/python3
# that imports torch
have_torch=0
for py in ${PYTHON:-} python3 /usr/bin/python3; do
    if "$py" -c "import torch" 2>/dev/null; then
        PY=$py
        have_torch=1
        break
    fi
done
[ $have_torch = 1 ] ||
    echo "note: no python3 here imports torch (Debian: apt-get install python3-torch): PyTorch column left out"

# median of the numbers on stdin
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# zerosim_round N STAGE L C H T V B: one run, the median steady step time
zerosim_round() {
    n=$1 stage=$2
    shift 2
    $MPIEXEC -n "$n" "$ZS" train --layers "$1" --hidden "$2" --heads "$3" --seq "$4" --vocab "$5" \
        --micro-batch "$6" --steps "$STEPS" --warmup 0 --stage "$stage" --quiet \
        --report "$T/zs.json" </dev/null >/dev/null 2>&1 || { echo nan; return; }
    python3 -c "
import json, statistics
s = json.load(open('$T/zs.json'))['step_seconds'][1:]
print(statistics.median(s))"
}

# torch_round N MODE L C H T V B: MODE single | ddp | zero1
torch_round() {
    n=$1 mode=$2
    shift 2
    if [ "$n" -eq 1 ]; then
        "$PY" "$HERE/torch_gpt.py" "$@" "$STEPS" >"$T/pt.out" 2>"$T/pt.err" || { echo nan; return; }
    else
        port=$((29500 + $$ % 1000))
        for r in $(seq 1 $((n - 1))); do
            DDP=1 ZERO1=$([ "$mode" = zero1 ] && echo 1 || echo 0) RANK=$r WORLD_SIZE=$n \
                MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$PY" "$HERE/torch_gpt.py" "$@" "$STEPS" \
                >/dev/null 2>&1 &
        done
        DDP=1 ZERO1=$([ "$mode" = zero1 ] && echo 1 || echo 0) RANK=0 WORLD_SIZE=$n \
            MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$PY" "$HERE/torch_gpt.py" "$@" "$STEPS" \
            >"$T/pt.out" 2>"$T/pt.err"
        wait
    fi
    python3 -c "
import statistics
for line in open('$T/pt.out'):
    if line.startswith('step_seconds'):
        print(statistics.median(float(x) for x in line.split()[2:]))"
}

# the SGEMM rate of one rank, now
sgemm_rate() {
    "$ZS" bench --quick --out "$T/cal.json" >/dev/null 2>&1 || { echo nan; return; }
    python3 -c "import json; print(json.load(open('$T/cal.json'))['gemm_flops'])" 2>/dev/null || echo nan
}
echo "CPU kernels: $(OPENBLAS_NUM_THREADS=1 "$ZS" bench --quick 2>/dev/null | sed -n 's/.*CPU kernels in \([a-z0-9]*\).*/\1/p')"

printf '%-24s %-22s %10s %10s %7s %10s %8s %9s\n' "shape L,C,T,V,B" "ranks" "zerosim" "PyTorch" "ratio" "GFLOP/s" "SGEMM" "of SGEMM"
for row in "1 0 single 4 128 2 64 256 4" \
           "1 0 single 4 256 4 128 512 8" \
           "2 0 ddp 4 256 4 128 512 8" \
           "2 1 zero1 4 256 4 128 512 8" \
           "1 0 single 2 768 12 256 1024 4"; do
    set -- $row
    n=$1 stage=$2 mode=$3
    shift 3
    : >"$T/zs.list"
    : >"$T/pt.list"
    : >"$T/gemm.list"
    for r in $(seq 1 "$ROUNDS"); do
        sgemm_rate >>"$T/gemm.list"
        zerosim_round "$n" "$stage" "$@" >>"$T/zs.list"
        [ $have_torch = 1 ] && torch_round "$n" "$mode" "$@" >>"$T/pt.list"
    done
    zs=$(median <"$T/zs.list")
    pt=$([ $have_torch = 1 ] && median <"$T/pt.list" || echo nan)
    L=$1 C=$2 TT=$4 V=$5 B=$6
    case $mode in
        single) what="1" ;;
        ddp) what="2, stage 0 vs DDP" ;;
        zero1) what="2, stage 1 vs ZeRO-1" ;;
    esac
    python3 - "$zs" "$pt" "$L" "$C" "$TT" "$V" "$B" "$what" "$T/zs.list" "$T/gemm.list" <<'PY'
import statistics, sys
zs, pt = float(sys.argv[1]), float(sys.argv[2])
L, C, T, V, B = map(int, sys.argv[3:8])
steps = [float(x) for x in open(sys.argv[9])]
gemms = [float(x) for x in open(sys.argv[10])]
params = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
flops = B * T * (6 * params + 12 * L * T * C)
rate = flops / zs / 1e9
ratio = zs / pt if pt == pt and pt > 0 else float("nan")
# each round's rate over the SGEMM rate measured just before it
of = statistics.median(flops / s / g for s, g in zip(steps, gemms))
print("%-24s %-22s %9.3fs %9.3fs %7.2f %10.1f %8.1f %8.0f%%" % (
    "%d,%d,%d,%d,%d" % (L, C, T, V, B), sys.argv[8], zs, pt, ratio, rate,
    statistics.median(gemms) / 1e9, 100 * of))
PY
done

# The Llama family (bench/torch_llama.py: RMSNorm, rotate_half RoPE, GQA by
# repeating key/value heads, SwiGLU, an untied head), one rank; its
# parameters V C (embedding) + V C (head) + C + L (2 C + 2 C^2 + 2 KV D C + 3 F C)
printf '\n%-32s %-6s %10s %10s %7s %10s %8s %9s\n' "llama L,C,NH,KV,F,T,V,B" "ranks" "zerosim" "PyTorch" "ratio" "GFLOP/s" "SGEMM" "of SGEMM"
for row in "2 128 4 2 352 64 256 4" "4 256 4 2 688 128 512 8"; do
    # shellcheck disable=SC2086 # the row's fields
    set -- $row
    : >"$T/zs.list"
    : >"$T/pt.list"
    : >"$T/gemm.list"
    for r in $(seq 1 "$ROUNDS"); do
        sgemm_rate >>"$T/gemm.list"
        $MPIEXEC -n 1 "$ZS" train --model llama --layers "$1" --hidden "$2" --heads "$3" \
            --kv-heads "$4" --ffn-hidden "$5" --seq "$6" --vocab "$7" --micro-batch "$8" \
            --steps "$STEPS" --warmup 0 --stage 0 --quiet --report "$T/zs.json" </dev/null \
            >/dev/null 2>&1 && python3 -c "
import json, statistics
print(statistics.median(json.load(open('$T/zs.json'))['step_seconds'][1:]))" >>"$T/zs.list" ||
            echo nan >>"$T/zs.list"
        if [ $have_torch = 1 ] && "$PY" "$HERE/torch_llama.py" "$@" "$STEPS" >"$T/pt.out" 2>"$T/pt.err"; then
            python3 -c "
import statistics
for line in open('$T/pt.out'):
    if line.startswith('step_seconds'):
        print(statistics.median(float(x) for x in line.split()[2:]))" >>"$T/pt.list"
        fi
    done
    zs=$(median <"$T/zs.list")
    pt=$([ $have_torch = 1 ] && median <"$T/pt.list" || echo nan)
    python3 - "$zs" "$pt" "$@" "$T/zs.list" "$T/gemm.list" <<'PY'
import statistics, sys
zs, pt = float(sys.argv[1]), float(sys.argv[2])
L, C, NH, KV, F, T, V, B = map(int, sys.argv[3:11])
steps = [float(x) for x in open(sys.argv[11])]
gemms = [float(x) for x in open(sys.argv[12])]
D = C // NH
params = 2 * V * C + C + L * (2 * C + 2 * C * C + 2 * KV * D * C + 3 * F * C)
flops = B * T * (6 * params + 12 * L * T * C)
ratio = zs / pt if pt == pt and pt > 0 else float("nan")
of = statistics.median(flops / s / g for s, g in zip(steps, gemms))
print("%-32s %-6s %9.3fs %9.3fs %7.2f %10.1f %8.1f %8.0f%%" % (
    ",".join(sys.argv[3:11]), "1", zs, pt, ratio, flops / zs / 1e9,
    statistics.median(gemms) / 1e9, 100 * of))
PY
done
echo
echo "ratio = zerosim / PyTorch (below 1: zerosim is faster); SGEMM: one rank's SGEMM rate (GFLOP/s,"
echo "median of the rounds); 'of SGEMM': the model's FLOP rate over the SGEMM rate measured right"
echo "before it, median of the rounds (for two ranks, the rate of each rank)."
