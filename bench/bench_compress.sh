#!/bin/sh
# Deep Compression of LeNet-300-100 (784-300-100-10) on the teacher task
# (docs/quantization.md): train it, then compress at several sparsities with
# the same retraining, and once at sparsity 0 (the same retraining steps
# without pruning: the loss the extra training alone gives). Prints one row
# per run. Usage: ZEROSIM=./zerosim sh bench/bench_compress.sh [SPARSITIES]
set -eu
ZS=${ZEROSIM:-./zerosim}
HERE=$(dirname "$0")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OPENBLAS_NUM_THREADS=1
STEPS=${STEPS:-1500}
C=${COMPRESS_ARGS:---prune-rounds 4 --retrain-steps 1000 --finetune-steps 500 --micro-batch 64 --samples 2048}
sh "$HERE/../tests/mpirun.sh" 1 "$ZS" train --model mlp --input-dim 784 --widths 300,100 --classes 10 \
    --steps "$STEPS" --micro-batch 64 --save-dir "$T/ck" --silent </dev/null
echo "# LeNet-300-100 trained $STEPS steps; compress $C"
echo "# sparsity bits before pruned shared finetuned change% ratio_tensors ratio_file"
for sb in ${1:-0:16 0.5:5 0.7:5 0.8:5 0.85:5 0.9:5 0.92:5}; do
    s=${sb%:*} b=${sb#*:}
    "$ZS" compress --from "$T/ck" --out "$T/c.zc" --sparsity "$s" --bits "$b" $C >"$T/out"
    l=$(sed -n 's/^held-out loss.*before \([0-9.]*\), pruned \([0-9.]*\), shared \([0-9.]*\), fine-tuned \([0-9.]*\) (\([-+0-9.]*\)%.*/\1 \2 \3 \4 \5/p' "$T/out")
    r=$(sed -n 's/^whole model:.*: \([0-9.]*\)x (\([0-9.]*\)x with the header)$/\1 \2/p' "$T/out")
    echo "$s $b $l $r"
done
