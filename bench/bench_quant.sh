#!/bin/sh
# QAT then quantize against PTQ of a normally trained model, on the
# synthetic GPT task (docs/quantization.md): for each format, train the same
# model (same seed, data and steps) without and with --qat FORMAT, quantize
# both with zerosim quantize --format FORMAT, and print the held-out loss of
# each. Usage: ZEROSIM=./zerosim sh bench/bench_quant.sh [STEPS] [train options]
set -eu
ZS=${ZEROSIM:-./zerosim}
HERE=$(dirname "$0")
STEPS=${1:-300}
[ $# -gt 0 ] && shift
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OPENBLAS_NUM_THREADS=1
SAMPLES=${SAMPLES:-1024}
train() { # dir args...
    d=$1; shift
    sh "$HERE/../tests/mpirun.sh" 1 "$ZS" train --steps "$STEPS" "$@" --save-dir "$d" --silent </dev/null
}
loss_of() { # file: the loss of the first table row (the file's own)
    "$ZS" eval --from "$1" --samples "$SAMPLES" | awk '/^fp32/ {print $(NF-1)}'
}
train "$T/base" "$@"
echo "# $STEPS steps, train options: $* ; held-out loss on $SAMPLES samples"
echo "# format  fp32_trained  ptq  qat_master  qat_quantized  (qat - ptq)"
base=$(loss_of "$T/base")
for f in int8 nf4; do
    train "$T/qat-$f" --qat "$f" "$@"
    "$ZS" quantize --from "$T/base" --format $f --samples 0 --out "$T/ptq-$f.safetensors" >/dev/null
    "$ZS" quantize --from "$T/qat-$f" --format $f --samples 0 --out "$T/qat-$f.safetensors" >/dev/null
    p=$(loss_of "$T/ptq-$f.safetensors")
    qm=$(loss_of "$T/qat-$f")
    q=$(loss_of "$T/qat-$f.safetensors")
    echo "$f $base $p $qm $q $(echo "$q $p" | awk '{printf "%+.6f", $1 - $2}')"
done
