#!/bin/sh
# Lab 13, making a model small: LeNet-300-100 (784-300-100-10) trained on
# Fashion-MNIST (Debian's dataset-fashion-mnist), then made smaller three
# ways, each measured on the 10,000 test images: post-training quantization
# (int8 per tensor and per channel, int8 with a zero-point, NF4 with and
# without double quantization: zerosim eval --formats), quantization-aware
# training (--qat int8, --qat nf4, then the same evaluation), and Deep
# Compression (zerosim compress: pruning with retraining, weight sharing,
# Huffman coding) at three sparsities. Writes formats.dat, compress.dat and
# small.png. Full: 1,500 training steps of 128 images, compression with 3
# rounds of 300 retraining steps; --quick: 200 steps, no QAT, one
# compression with 1 round of 50 steps (bytes and kept weights the same,
# accuracies not the page's). Without the data set: one line, exit 77.
. "$(dirname "$0")/../lib.sh"
lab_init "$0" "$@"
[ -z "$DATA" ] || lab_die "--data: this lab trains on Fashion-MNIST only; run it without --data"
FM=/usr/share/datasets/fashion-mnist
if [ ! -r "$FM/train-images-idx3-ubyte.gz" ] && [ ! -r "$FM/train-images-idx3-ubyte" ]; then
    echo "$LAB: Fashion-MNIST is not in $FM (Debian: apt-get install dataset-fashion-mnist): lab skipped" >&2
    exit 77
fi

LENET="--model mlp --input-dim 784 --widths 300,100 --classes 10 --data fashion-mnist --micro-batch 128 --lr 1e-3 --warmup 100"
STEPS=1500; [ "$QUICK" -eq 1 ] && STEPS=200
QATS="int8 nf4"; [ "$QUICK" -eq 1 ] && QATS=""

# 1. train: fp32, and with each fake quantization (same seed, same batches)
# shellcheck disable=SC2086 # LENET is words
lab_run 1 fp32 $LENET --steps $STEPS --save-dir "$OUT/fp32/ckpt"
for q in $QATS; do
    # shellcheck disable=SC2086
    lab_run 1 "qat_$q" $LENET --steps $STEPS --qat "$q" --save-dir "$OUT/qat_$q/ckpt"
done

# 2. evaluate each in the six formats (the 10,000 test images)
evalf() { # NAME: OUT/NAME/eval.txt
    echo "zerosim eval --from $OUT/$1/ckpt --data fashion-mnist --formats" >"$OUT/$1/eval.command"
    "$ZS" eval --from "$OUT/$1/ckpt" --data fashion-mnist --formats >"$OUT/$1/eval.txt" 2>&1 ||
        { cat "$OUT/$1/eval.txt" >&2; lab_die "zerosim eval failed on $1"; }
}
# row NAME FORMAT FIELD: a field of eval.txt's row (2 bytes, 3 bits/w, 4 loss, 6 accuracy)
row() {
    awk -v f="$2" -v k="$3" '!/^#/ { n = $0; sub(/  +[0-9].*$/, "", n)
        if (n == f) { split(substr($0, length(n) + 1), a, " "); v = a[k - 1]; sub(/%$/, "", v); print v; exit } }' \
        "$OUT/$1/eval.txt"
}
FORMATS="fp32|int8, per tensor|int8, per channel|int8-zp, per channel|nf4, blocks of 64|nf4, blocks of 64, double quant"
evalf fp32
for q in $QATS; do evalf "qat_$q"; done
psi=$(sed -n 's/^# model: .*, \([0-9]*\) parameters$/\1/p' "$OUT/fp32/eval.txt")
lab_num psi "$(lab_fmt "$psi")"
echo "# format bytes ratio_of_the_linear_weights accuracy_ptq (fp32-trained model, test images)" >"$OUT/formats.dat"
echo "$FORMATS" | tr '|' '\n' >"$OUT/.formats"
while read -r f; do
    t=$(echo "$f" | sed 's/, per tensor//; s/, per channel/_ch/; s/-zp/zp/; s/, blocks of 64//; s/, double quant/_dq/')
    b=$(row fp32 "$f" 2); a=$(row fp32 "$f" 6)
    [ -n "$b" ] && [ -n "$a" ] || lab_die "no row '$f' in fp32/eval.txt"
    lab_num "bytes_$t" "$(lab_fmt "$b")"
    lab_num "~acc_$t" "$a"
    for q in $QATS; do lab_num "~acc_qat_${q}_$t" "$(row "qat_$q" "$f" 6)"; done
    r=$(lab_calc %.2f "($(row fp32 fp32 2) - 1640) / ($b - 1640)")
    lab_num "ratio_$t" "$r"
    echo "\"$f\" $b $r $a" >>"$OUT/formats.dat"
done <"$OUT/.formats"
rm -f "$OUT/.formats"
lab_num bits_nf4_dq "$(row fp32 "nf4, blocks of 64, double quant" 3)"
lab_num "~loss_fp32" "$(row fp32 fp32 4)"

# the bytes against closed forms: W = 266,200 linear weights in 3 tensors
# (235,200, 30,000 and 1,000), 410 biases in fp32
W=266200; bias=$((4 * (psi - W)))
lab_check "the linear weights are $W of the $psi parameters" test $((psi - W)) -eq 410
lab_check "int8 per tensor: a byte a weight, one fp32 scale per tensor, the biases fp32" \
    lab_eq "$(row fp32 "int8, per tensor" 2)" $((W + 3 * 4 + bias))
blocks=$(((235200 + 63) / 64 + (30000 + 63) / 64 + (1000 + 63) / 64))
lab_num nf4_blocks "$(lab_fmt $blocks)"
lab_check "nf4: half a byte a weight, one fp32 scale per block of 64 ($blocks blocks)" \
    lab_eq "$(row fp32 "nf4, blocks of 64" 2)" $((W / 2 + 4 * blocks + bias))
sup=$(((3675 + 255) / 256 + (469 + 255) / 256 + (16 + 255) / 256))
lab_check "nf4 double quant: the block scales in a byte each, one fp32 per 256 blocks ($sup) and a mean per tensor" \
    lab_eq "$(row fp32 "nf4, blocks of 64, double quant" 2)" $((W / 2 + blocks + 4 * sup + 4 * 3 + bias))
lab_check "PTQ int8 (per tensor): the test accuracy within 0.3 points of fp32's" \
    awk -v a="$(row fp32 "int8, per tensor" 6)" -v b="$(row fp32 fp32 6)" 'BEGIN { d = a - b; exit !(d < 0.3 && d > -0.3) }'
dl_ptq=$(lab_calc %.4f "$(row fp32 "nf4, blocks of 64" 4) - $(row fp32 fp32 4)")
lab_num "~dloss_ptq_nf4" "$dl_ptq"
if [ "$QUICK" -eq 0 ]; then
    dl_qat=$(lab_calc %.4f "$(row qat_nf4 "nf4, blocks of 64" 4) - $(row qat_nf4 fp32 4)")
    lab_num "~dloss_qat_nf4" "$dl_qat"
    lab_check "NF4 costs the --qat nf4 model less test loss than the fp32-trained one ($dl_qat against $dl_ptq)" \
        lab_lt "$dl_qat" "$dl_ptq"
fi

# 3. Deep Compression of the fp32 model at three sparsities (the last the
# paper's for LeNet-300-100: 8%, 9% and 26% of each layer kept)
if [ "$QUICK" -eq 1 ]; then
    SPARS="0.92,0.91,0.74"; RETRAIN="--prune-rounds 1 --retrain-steps 50 --finetune-steps 50"
else
    SPARS="0.5,0.5,0.3 0.85,0.85,0.6 0.92,0.91,0.74"; RETRAIN="--prune-rounds 3 --retrain-steps 300 --finetune-steps 300"
fi
echo "# sparsity kept_percent ratio_pruned acc_pruned ratio_shared acc_shared ratio_huffman acc_huffman" >"$OUT/compress.dat"
for s in $SPARS; do
    name=dc_$(echo "$s" | tr -d '.' | tr ',' '_')
    d=$OUT/$name; rm -rf "$d"; mkdir -p "$d"
    set -- compress --from "$OUT/fp32/ckpt" --out "$d/model.zc" --data fashion-mnist --sparsity "$s" --bits 6 \
        --index-bits 5 --prune-schedule geometric --lr 3e-4 --micro-batch 128
    # shellcheck disable=SC2086 # RETRAIN is words
    set -- "$@" $RETRAIN
    echo "zerosim $*" >"$d/command"
    "$ZS" "$@" >"$d/log" 2>&1 || { cat "$d/log" >&2; lab_die "this compression failed: zerosim $*"; }
    st() { awk -v s="$1" -v k="$2" 'index($0, s) == 1 { n = split($0, a, " "); v = a[n - 4 + k]; sub(/[x%]$/, "", v); print v; exit }' "$d/log"; }
    kept=$(awk '/^fc[0-9]\.w / { w += $2; k += $3 } END { printf "%.2f\n", 100 * k / w }' "$d/log")
    lab_num "~ratio_$name" "$(st "+ Huffman" 2)"; lab_num "~acc_$name" "$(st "+ Huffman" 4)"
    echo "$s $kept $(st "pruned (" 2) $(st "pruned (" 4) $(st "+ shared" 2) $(st "+ shared" 4) $(st "+ Huffman" 2) $(st "+ Huffman" 4)" >>"$OUT/compress.dat"
done
# the paper's sparsity: the last run
d=$OUT/dc_092_091_074
read -r _ kept rp ap rs as rh ah <<EOF
$(tail -1 "$OUT/compress.dat")
EOF
for l in fc0 fc1 fc2; do
    lab_num "kept_$l" "$(lab_fmt "$(awk -v l="$l.w" '$1 == l { print $3 }' "$d/log")")"
done
lab_check "the paper's fractions: exactly 8%, 9% and 26% of fc0, fc1, fc2's weights kept (18816, 2700, 260)" \
    test "$(awk '/^fc[0-9]\.w / { printf "%s ", $3 }' "$d/log")" = "18816 2700 260 "
lab_num kept_pct "$kept"
lab_num "~ratio_pruned" "$rp"; lab_num "~ratio_shared" "$rs"; lab_num "~ratio_huffman" "$rh"
lab_num "~acc_pruned" "$ap"; lab_num "~acc_shared" "$as"; lab_num "~acc_huffman" "$ah"
whole=$(sed -n 's/^whole model: .* \([0-9.]*\)x (.*/\1/p' "$d/log")
lab_num "~ratio_whole" "$whole"
lab_check "each stage makes it smaller: pruned $rp x < shared $rs x < Huffman $rh x" \
    awk -v a="$rp" -v b="$rs" -v c="$rh" 'BEGIN { exit !(a + 0 < b + 0 && b + 0 < c + 0) }'
lab_check "Huffman coding is lossless: the accuracy after it equals the one before ($ah%)" \
    test "$(awk '/^\+ fine-tuned/ { print $NF }' "$d/log")" = "$(awk '/^\+ Huffman/ { print $NF }' "$d/log")"
lab_check "at the paper's fractions the linear weights shrink at least 35x ($rh x)" lab_lt 35 "$rh"
# the file is the model: zerosim eval reads it and gets compress's accuracy
"$ZS" eval --from "$d/model.zc" --data fashion-mnist >"$d/eval.txt" 2>&1 ||
    { cat "$d/eval.txt" >&2; lab_die "zerosim eval failed on $d/model.zc"; }
lab_check "zerosim eval of the compressed file gives compress's accuracy ($ah%)" \
    test "$(awk '!/^#/ && NF > 5 { v = $(NF - 1); sub(/%$/, "", v); print v; exit }' "$d/eval.txt")" = "$ah"
acc0=$(row fp32 fp32 6)
lab_num "~acc_drop" "$(lab_calc %.2f "$ah - $acc0")"
lab_plot small.gp small "acc0=$acc0"
lab_finish
