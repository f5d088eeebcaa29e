#!/bin/sh
# The MLP on an image set (--data, docs/data.md): Fashion-MNIST from
# Debian's dataset-fashion-mnist (the test skips, 77, without it).
#  - ZeRO stages 0-3 give byte-identical parameters after every step on 2
#    ranks; deterministic mode gives the same on N = 1, 2 and 4 ranks
#  - the held-out and test accuracy are on the progress lines, in the
#    summary and in the report, for each precision
#  - a short run learns: test accuracy above 70% (chance is 10%)
#  - zerosim eval --data reports the test accuracy of each weight format
#  - bad IDX files (wrong magic, truncated, a label >= classes, images and
#    labels of different counts, images of the wrong size, bytes after the
#    data, a truncated gzip file) are one line naming the file and the
#    offset, with a non-zero exit
. "$(dirname "$0")/testlib.sh"

FM=/usr/share/datasets/fashion-mnist
[ -r "$FM/train-images-idx3-ubyte.gz" ] && [ -r "$FM/t10k-labels-idx1-ubyte.gz" ] || {
    echo "SKIP: $FM missing (the Debian package dataset-fashion-mnist)"
    exit 77
}

M="--model mlp --input-dim 784 --widths 32 --classes 10 --data fashion-mnist --micro-batch 8 --steps 3 --warmup 0 --lr 1e-2 --quiet"

# ---- stages 0-3 agree bit for bit on 2 ranks ------------------------------------
for stage in 0 1 2 3; do
    train_hashes "z$stage" 2 --stage "$stage" --grad-accum 2 || continue
    [ "$stage" = 0 ] || same_hashes "z$stage" z0
done
# the report carries the held-out and test figures of the last step
grep -q '"test_accuracy"' "$T/z3.json" && grep -q '"accuracy"' "$T/z3.json" && ok ||
    bad "the report has no accuracy: $(grep -A3 '"val_loss"' "$T/z3.json")"

# ---- deterministic mode: the same on N = 1, 2, 4 --------------------------------
for n in 1 2 4; do
    train_hashes "det$n" "$n" --stage $((n - 1)) --grad-accum $((4 / n)) --deterministic ||
        continue
    [ "$n" = 1 ] || same_hashes "det$n" det1
    zs_fast && [ "$n" = 2 ] && break
done

# ---- accuracy on the progress lines and in the summary, every precision --------
for prec in fp32 bf16 fp16; do
    if "$ZS" train $(echo "$M" | sed 's/--quiet//') --precision "$prec" --print-every 1 \
        --val-every 2 >"$T/p-$prec.log" 2>&1; then
        grep -q '^step     2/3 .*val_acc [0-9.]*%  test_loss [0-9.]*  test_acc [0-9.]*%' \
            "$T/p-$prec.log" && ok || bad "$prec: no accuracy on step 2's line"
        grep '^step     1/3' "$T/p-$prec.log" | grep -q val_acc &&
            bad "$prec: step 1 evaluated (--val-every 2)" || ok
        grep -q '^after step 3 (the fp32 parameters): held-out loss [0-9.]*, accuracy [0-9.]*% (5000 images); test loss [0-9.]*, accuracy [0-9.]*% (10000 images)' \
            "$T/p-$prec.log" && ok || bad "$prec: no accuracy in the summary: $(tail -3 "$T/p-$prec.log")"
    else
        bad "$prec: the run failed: $(tail -2 "$T/p-$prec.log")"
    fi
    zs_fast && break
done

# ---- it learns: 300 steps of 64 images, test accuracy > 70% (chance 10%) -------
if zs_run learn 0 --model mlp --input-dim 784 --widths 64 --classes 10 --data fashion-mnist \
    --micro-batch 64 --steps 300 --warmup 0 --lr 2e-3 --quiet --save-dir "$T/ck"; then
    acc=$(sed -n 's/.*test loss [0-9.]*, accuracy \([0-9.]*\)%.*/\1/p' "$T/learn.log")
    awk -v a="${acc:-0}" 'BEGIN { exit !(a > 70) }' && ok ||
        bad "test accuracy ${acc:-none}% after 300 steps (want > 70%)"
    # chance does not pass: the untrained model is near 10%
    "$ZS" eval --from "$T/ck" --data fashion-mnist --formats >"$T/eval.txt" 2>&1 ||
        bad "zerosim eval --data failed: $(tail -2 "$T/eval.txt")"
    fp32=$(awk '$1 == "fp32" { sub("%", "", $6); print $6 }' "$T/eval.txt")
    [ -n "$fp32" ] && awk -v a="$fp32" -v b="${acc:-0}" 'BEGIN { exit !(a == b) }' && ok ||
        bad "eval's fp32 test accuracy ${fp32:-none}% is not train's ${acc:-none}%"
    [ "$(grep -c '^[^#].*%' "$T/eval.txt")" -eq 6 ] && ok || bad "eval --formats: not six rows with accuracy"
    # Deep Compression on the image set: per-layer fractions, the stages'
    # ratio and accuracy, the fp32 accuracy as train's; the file decodes
    # to the same weights
    if "$ZS" compress --from "$T/ck" --out "$T/dc.zc" --data fashion-mnist --sparsity 0.9,0.5 \
        --prune-rounds 2 --prune-schedule geometric --retrain-steps 20 --finetune-steps 20 \
        --micro-batch 64 >"$T/dc.txt" 2>&1; then
        # geometric: round 1 of 2 keeps sqrt(0.1) = 0.3162 and sqrt(0.5) = 0.7071
        grep -q '^pruned to 0.6838,0.2929 of the linear weights, retrained 20 steps: test loss [0-9.]*, accuracy [0-9.]*%$' \
            "$T/dc.txt" && ok || bad "compress: round 1 of a geometric schedule: $(grep '^pruned' "$T/dc.txt")"
        grep -q '^fc0.w  *50176  *5018 ' "$T/dc.txt" && grep -q '^fc1.w  *640  *320 ' "$T/dc.txt" &&
            ok || bad "compress --sparsity 0.9,0.5: not 10% and 50% kept: $(grep '^fc' "$T/dc.txt")"
        grep -q "^trained (fp32) .* ${acc}%$" "$T/dc.txt" && grep -q '^+ Huffman coding .*%$' "$T/dc.txt" &&
            ok || bad "compress --data: no stage table with train's ${acc}%: $(cat "$T/dc.txt")"
        h=$(sed -n 's/^param_hash //p' "$T/dc.txt")
        "$ZS" decompress --from "$T/dc.zc" --samples 0 | grep -q "^param_hash ${h:-none}$" && ok ||
            bad "decompress does not give compress's weights ($h)"
    else
        bad "compress --data failed: $(tail -2 "$T/dc.txt")"
    fi
    refuse -o "$T/dc3.zc" -m "lists 3 fractions, but the model has 2 linear weights" compress --from "$T/ck" \
        --out "$T/dc3.zc" --data fashion-mnist --sparsity 0.9,0.5,0.1
fi
if zs_run chance 0 --model mlp --input-dim 784 --widths 64 --classes 10 --data fashion-mnist \
    --micro-batch 64 --steps 1 --warmup 0 --lr 1e-9 --quiet; then
    acc=$(sed -n 's/.*test loss [0-9.]*, accuracy \([0-9.]*\)%.*/\1/p' "$T/chance.log")
    awk -v a="${acc:-100}" 'BEGIN { exit !(a < 30) }' && ok ||
        bad "an untrained model scores ${acc:-none}%: the accuracy check cannot tell"
fi

# ---- bad files: one line naming the file and the offset ------------------------
# be32 N: N as 4 big-endian bytes
# shellcheck disable=SC2059 # the format is the octal escape of the byte to write
be32() {
    printf "\\$(printf %03o $(($1 >> 24 & 255)))\\$(printf %03o $(($1 >> 16 & 255)))"
    printf "\\$(printf %03o $(($1 >> 8 & 255)))\\$(printf %03o $(($1 & 255)))"
}
# images FILE COUNT ROWS COLS [TYPE-DIMS]: an IDX image file of zeros
# shellcheck disable=SC2059 # the format is the octal escape of the byte to write
images() { { printf '\000\000\010'; printf "\\${5:-003}"; be32 "$2"; be32 "$3"; be32 "$4"
             head -c $(($2 * $3 * $4)) /dev/zero; } >"$1"; }
# labels FILE COUNT [BAD]: labels 0, the sixth BAD when given
# shellcheck disable=SC2059 # the format is the octal escape of the byte to write
labels() { { printf '\000\000\010\001'; be32 "$2"
             if [ -n "${3:-}" ]; then head -c 5 /dev/zero; printf "\\$(printf %03o "$3")"
                                     head -c $(($2 - 6)) /dev/zero
             else head -c "$2" /dev/zero; fi; } >"$1"; }
good() { # DIR: a valid set of 2x2 images, 24 to train, 6 to test
    rm -rf "$1"; mkdir -p "$1"
    images "$1/train-images-idx3-ubyte" 24 2 2; labels "$1/train-labels-idx1-ubyte" 24
    images "$1/t10k-images-idx3-ubyte" 6 2 2; labels "$1/t10k-labels-idx1-ubyte" 6
}
S="train --model mlp --input-dim 4 --widths 8 --classes 10 --micro-batch 4 --steps 2 --quiet"
good "$T/ok"
"$ZS" $S --data "$T/ok" >"$T/ok.log" 2>&1 && ok || bad "a valid small set fails: $(tail -1 "$T/ok.log")"
# bad CASE FILE TEXT: the set with FILE made bad by the commands on stdin is
# refused with one line naming FILE, "offset" and TEXT
bad_case() {
    good "$T/b"
    sh -c "$1"
    refuse -m "$T/b/$2" $S --data "$T/b"
    grep -q -- "$3" "$T/refuse.err" && grep -q "offset [0-9]" "$T/refuse.err" && ok ||
        bad "$2 ($1): no offset or \"$3\" in: $(cat "$T/refuse.err")"
}
bad_case "printf '\\000\\000\\010\\002' | dd of=$T/b/train-images-idx3-ubyte conv=notrunc 2>/dev/null" \
    train-images-idx3-ubyte "bad magic"
bad_case "truncate -s -3 $T/b/t10k-images-idx3-ubyte" t10k-images-idx3-ubyte "truncated"
bad_case "printf '\\014' | dd of=$T/b/train-labels-idx1-ubyte bs=1 seek=13 conv=notrunc 2>/dev/null" \
    train-labels-idx1-ubyte "label 12 at offset 13 is not below"
bad_case "head -c 13 $T/b/t10k-labels-idx1-ubyte >$T/x && cat $T/x >$T/b/t10k-labels-idx1-ubyte && printf '\\000\\000\\000\\005' | dd of=$T/b/t10k-labels-idx1-ubyte bs=1 seek=4 conv=notrunc 2>/dev/null" \
    t10k-labels-idx1-ubyte "5 labels"
bad_case "printf '\\000\\000\\000\\003\\000\\000\\000\\003' | dd of=$T/b/train-images-idx3-ubyte bs=1 seek=8 conv=notrunc 2>/dev/null && head -c 120 /dev/zero >>$T/b/train-images-idx3-ubyte" \
    train-images-idx3-ubyte "input-dim 9"
bad_case "printf x >>$T/b/train-labels-idx1-ubyte" train-labels-idx1-ubyte "after"
bad_case "gzip $T/b/train-images-idx3-ubyte && head -c 30 $T/b/train-images-idx3-ubyte.gz >$T/x && mv $T/x $T/b/train-images-idx3-ubyte.gz" \
    train-images-idx3-ubyte.gz "decompressed"
# and on 2 ranks: still one line
good "$T/b"
printf '\000\000\010\002' | dd of="$T/b/train-images-idx3-ubyte" conv=notrunc 2>/dev/null
refuse -n 2 -m "$T/b/train-images-idx3-ubyte: bad magic" $S --data "$T/b"
# a file, not a folder
refuse -m "MLP reads an image set" $S --data "$T/b/train-images-idx3-ubyte"
finish
