#!/bin/sh
# Deep Compression of LeNet-300-100 (784-300-100-10) on Fashion-MNIST
# (docs/quantization.md): train it (docs/data.md's run) or take CKPT, then
# compress it at several per-layer sparsities with the same retraining and
# print one row per run: the fractions kept, and for each stage (pruning
# with its relative indices; + weight sharing; + Huffman coding) the ratio
# of the linear weights against fp32 and the test accuracy. The rows are
# the data of plots/compress_fashion.gp.
# Usage: ZEROSIM=./zerosim sh bench/bench_compress_fashion.sh [CKPT] > rows.dat
# (COMPRESS_ARGS: the retraining; SPARSITIES: space-separated lists)
set -eu
ZS=${ZEROSIM:-./zerosim}
HERE=$(dirname "$0")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OPENBLAS_NUM_THREADS=1
C=${COMPRESS_ARGS:---prune-rounds 6 --retrain-steps 2000 --finetune-steps 2000 --lr 3e-4 --micro-batch 128 --bits 6 --prune-schedule geometric}
S=${SPARSITIES:-0.5,0.5,0.3 0.7,0.7,0.5 0.85,0.85,0.6 0.92,0.91,0.74 0.95,0.94,0.8}
ck=${1:-}
if [ -z "$ck" ]; then
    ck=$T/ck
    sh "$HERE/../tests/mpirun.sh" 1 "$ZS" train --model mlp --input-dim 784 --widths 300,100 \
        --classes 10 --data fashion-mnist --micro-batch 128 --steps 4300 --lr 1e-3 --warmup 100 \
        --save-dir "$ck" --silent </dev/null
fi
echo "# LeNet-300-100 on Fashion-MNIST ($ck); compress $C"
echo "# sparsity kept% before_acc pruned_ratio pruned_acc shared_ratio shared_acc huffman_ratio final_acc model_ratio"
for s in $S; do
    "$ZS" compress --from "$ck" --out "$T/c.zc" --data fashion-mnist --sparsity "$s" $C >"$T/out"
    row() { sed -n "s/^$1  *[0-9]*  *\\([0-9.]*\\)x  *[0-9.]*  *\\([0-9.]*\\)%\$/\\1 \\2/p" "$T/out"; }
    kept=$(awk '/^fc[0-9]*\.w / { w += $2; n += $3 } END { printf "%.2f", 100 * n / w }' "$T/out")
    before=$(row 'trained (fp32)' | cut -d' ' -f2)
    model=$(sed -n 's/^whole model:.*: \([0-9.]*\)x (.*/\1/p' "$T/out")
    echo "$s $kept $before $(row 'pruned (+ relative indices)') $(row '+ fine-tuned centroids') $(row '+ Huffman coding') $model"
done
