#!/bin/sh
# Deep Compression (zerosim compress, zerosim decompress): the file reads
# back to exactly the pruned, shared weights (the param_hash compress
# printed), eval of the file gives the loss decompress reports, the
# per-layer nonzeros are the asked fraction, GPT checkpoints compress too,
# and bad input is refused with one line, nothing written.
. "$(dirname "$0")/testlib.sh"

run() { sh "$HERE/mpirun.sh" "$@" </dev/null; }
run 1 "$ZS" train --model mlp --input-dim 32 --widths 64,32 --classes 10 --steps 60 \
    --save-dir "$T/mk" --silent >"$T/log" 2>&1 || { bad "MLP training failed"; cat "$T/log"; }
Q="--retrain-steps 10 --finetune-steps 10 --samples 64 --prune-rounds 2"
"$ZS" compress --from "$T/mk" --out "$T/m.zc" --sparsity 0.9 --bits 4 --index-bits 3 $Q >"$T/c" 2>&1 ||
    { bad "compress failed"; cat "$T/c"; }
"$ZS" decompress --from "$T/m.zc" --samples 64 >"$T/d" 2>&1 || { bad "decompress failed"; cat "$T/d"; }
hc=$(sed -n 's/^param_hash //p' "$T/c"); hd=$(sed -n 's/^param_hash //p' "$T/d")
[ -n "$hc" ] && [ "$hc" = "$hd" ] && ok || bad "decompressed param_hash $hd, compress wrote $hc"
# the fine-tuned loss compress printed is the file's (decompress, eval)
lc=$(sed -n 's/.*fine-tuned \([0-9.]*\).*/\1/p' "$T/c")
ld=$(sed -n 's/^held-out loss.*: \([0-9.]*\)$/\1/p' "$T/d")
"$ZS" eval --from "$T/m.zc" --samples 64 --micro-batch 32 >"$T/e" 2>&1 || bad "eval of the compressed file failed"
le=$(awk '/^fp32/ {print $(NF-1)}' "$T/e")
[ -n "$lc" ] && [ "$lc" = "$ld" ] && [ "$lc" = "$le" ] && ok || bad "losses: compress $lc, decompress $ld, eval $le"
# 90% of each layer pruned: 32x64 -> 205 kept, 64x32 -> 205, 32x10 -> 32
for lw in "fc0.w 2048 205" "fc1.w 2048 205" "fc2.w 320 32"; do
    set -- $lw
    awk -v n="$1" -v w="$2" -v k="$3" '$1 == n { f = ($2 == w && $3 == k) } END { exit !f }' "$T/d" &&
        ok || bad "$1: not $3 of $2 kept: $(grep "^$1 " "$T/d")"
done
# the ratio is the bytes': dense fp32 over the file's tensors
dense=$(sed -n 's/^whole model: \([0-9]*\) bytes fp32.*/\1/p' "$T/d")
[ "$dense" = $(( (32 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10) * 4 )) ] && ok || bad "dense bytes $dense"
# the same compression of the same checkpoint writes the same bytes
"$ZS" compress --from "$T/mk" --out "$T/m2.zc" --sparsity 0.9 --bits 4 --index-bits 3 $Q >/dev/null 2>&1
cmp -s "$T/m.zc" "$T/m2.zc" && ok || bad "two compressions of one checkpoint differ"

# a GPT checkpoint
run 1 "$ZS" train --layers 1 --hidden 32 --heads 4 --seq 8 --vocab 32 --steps 20 --save-dir "$T/gk" \
    --silent >"$T/log" 2>&1 || bad "GPT training failed"
"$ZS" compress --from "$T/gk" --out "$T/g.zc" --sparsity 0.5 --bits 6 $Q >"$T/gc" 2>&1 ||
    { bad "GPT compress failed"; cat "$T/gc"; }
"$ZS" decompress --from "$T/g.zc" --samples 0 >"$T/gd" 2>&1 || bad "GPT decompress failed"
[ "$(sed -n 's/^param_hash //p' "$T/gc")" = "$(sed -n 's/^param_hash //p' "$T/gd")" ] && ok ||
    bad "GPT: decompressed hash differs"

# bad input: one line, non-zero exit, nothing written
echo "not a model" >"$T/junk"
refuse -o "$T/out.zc" -m "--sparsity" compress --from "$T/mk" --out "$T/out.zc" --sparsity 1
refuse -o "$T/out.zc" -m "--sparsity" compress --from "$T/mk" --out "$T/out.zc" --sparsity -0.1
refuse -o "$T/out.zc" -m "--bits" compress --from "$T/mk" --out "$T/out.zc" --bits 0
refuse -o "$T/out.zc" -m "--bits" compress --from "$T/mk" --out "$T/out.zc" --bits 17
refuse -o "$T/out.zc" -m "$T/junk" compress --from "$T/junk" --out "$T/out.zc"
refuse -o "$T/out.zc" -m "--out" compress --from "$T/mk"
"$ZS" quantize --from "$T/mk" --format int8 --samples 0 --out "$T/q.safetensors" >/dev/null 2>&1 || bad "quantize failed"
refuse -o "$T/out.zc" -m "not a zerosim compressed file" decompress --from "$T/q.safetensors"
refuse -o "$T/out.zc" -m "$T/junk" decompress --from "$T/junk"
cp "$T/m.zc" "$T/cut.zc"
truncate -s -40 "$T/cut.zc"
refuse -o "$T/out.zc" -m "$T/cut.zc" decompress --from "$T/cut.zc"
# a flipped bit in a code stream: decoded differently or refused, never a crash
cp "$T/m.zc" "$T/flip.zc"
sz=$(wc -c <"$T/m.zc")
printf '\377' | dd of="$T/flip.zc" bs=1 seek=$((sz - 3)) conv=notrunc 2>/dev/null
"$ZS" decompress --from "$T/flip.zc" --samples 0 >"$T/o" 2>"$T/err"; rc=$?
[ $rc -le 1 ] && ok || bad "a flipped byte: exit $rc"
[ $rc = 0 ] && [ "$(sed -n 's/^param_hash //p' "$T/o")" = "$hc" ] && bad "a flipped byte decoded to the same weights" || ok

finish
