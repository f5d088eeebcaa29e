#!/bin/sh
# Post-training quantization (zerosim quantize, zerosim eval): a trained
# run's checkpoint and its exported weights quantize to the same bytes;
# eval of the quantized file gives the loss quantize reported for it; the
# bytes are the closed-form count; bad input is refused with one line
# naming what is wrong, and no file is left behind.
. "$(dirname "$0")/testlib.sh"

run() { sh "$HERE/mpirun.sh" "$@" </dev/null; }
M="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 32"
run 2 "$ZS" train $M --stage 2 --steps 30 --save-dir "$T/ck" --export "$T/w.safetensors" \
    --quiet >"$T/log" 2>&1 || { bad "training failed"; cat "$T/log"; }

# checkpoint and exported weights: the same parameters, the same file
for f in int8 int8-zp nf4; do
    "$ZS" quantize --from "$T/ck" --format $f --out "$T/c-$f.safetensors" >"$T/qc-$f" 2>&1 ||
        { bad "quantize $f from the checkpoint failed"; cat "$T/qc-$f"; }
    "$ZS" quantize --from "$T/w.safetensors" --format $f --out "$T/w-$f.safetensors" >"$T/qw-$f" 2>&1 ||
        bad "quantize $f from the weights failed"
    cmp -s "$T/c-$f.safetensors" "$T/w-$f.safetensors" && ok || bad "$f: checkpoint and weights quantize differently"
done
cmp -s "$T/c-int8.safetensors" "$T/c-int8-zp.safetensors" && bad "int8 and int8-zp wrote the same bytes" || ok

# eval of the quantized file: the loss quantize printed for it
"$ZS" quantize --from "$T/ck" --format nf4 --double-quant --out "$T/dq.safetensors" >"$T/q" 2>&1 ||
    { bad "nf4 double quant failed"; cat "$T/q"; }
"$ZS" eval --from "$T/dq.safetensors" >"$T/e" 2>&1 || { bad "eval of the quantized file failed"; cat "$T/e"; }
lq=$(awk '/^nf4, blocks of 64, double quant/ {print $(NF-1)}' "$T/q")
le=$(awk '/^fp32/ {print $(NF-1)}' "$T/e")
l0=$(awk '/^fp32/ {print $(NF-1)}' "$T/q")
[ -n "$lq" ] && [ "$lq" = "$le" ] && ok || bad "eval of the file gives $le, quantize said $lq"
[ -n "$l0" ] && [ "$l0" != "$lq" ] && ok || bad "the quantized loss equals the fp32 one ($l0): nothing was quantized?"

# the bytes: 4 linear weights per block... here 2 blocks of C=32: qkv 3C*C,
# proj C*C, fc 4C*C, proj 4C*C = 12 C^2 = 12288 weights; nf4 blocks of 64
# with double quant: 12288/2 + 192 (int8 scales) + 4*4 (one scale per 256
# blocks, per tensor) + 4*4 (one mean per tensor); the rest in fp32
C=32; W=$((2 * 12 * C * C)); P=$(awk '/^# model:/ {print $(NF-1)}' "$T/q")
want=$((W / 2 + W / 64 + 8 * 4 + 8 * 4 + 4 * (P - W)))
got=$(awk '/^nf4, blocks of 64, double quant/ {print $(NF-3)}' "$T/q")
[ "$got" = "$want" ] && ok || bad "nf4 double quant bytes $got, want $want"
# the evaluation's ledger holds those bytes: quantized_weights + params
held=$(sed -n 's/^# ledger (nf4, blocks of 64, double quant): .*quantized_weights \([0-9]*\) + params \([0-9]*\) .*/\1 \2/p' "$T/q")
[ -n "$held" ] && [ $(echo $held | awk '{print $1 + $2}') = "$want" ] && ok || bad "ledger holds $held, want $want in all"
[ "$(echo $held | awk '{print $2}')" = $((4 * (P - W))) ] && ok || bad "ledger params $held"
grep -q "^# quantized $W of $P parameters" "$T/q" && ok || bad "quantized parameter count: $(grep '^# quantized' "$T/q")"

# zerosim plan --weight-format: QLoRA's 65B in NF4 with double quant,
# 65e9 x (4 + 8/64 + 32/16384) / 8 bytes = 33.53 GB; and for this GPT the
# fp32 part equals the ledger's, the quantized part the formula's (the
# measured adds each tensor's double-quant constants: within 1%)
"$ZS" plan --params 65e9 --weight-format nf4 --double-quant >"$T/p" 2>&1 || bad "plan --weight-format failed"
grep -q '^  total  *33531494141  *33.531' "$T/p" && ok || bad "plan: 65B in nf4: $(grep '^  total' "$T/p" | tail -1)"
"$ZS" plan --arch gpt --layers 2 --hidden $C --heads 4 --seq 16 --vocab 32 --weight-format nf4 --double-quant >"$T/p" 2>&1 ||
    bad "plan --arch gpt --weight-format failed"
! grep -q '^  quantized_weights  *0 ' "$T/p" && ok || bad "the training plan shows an empty quantized_weights row"
pq=$(awk '$1 == "quantized_weights" {print $2}' "$T/p"); pp=$(awk '$1 == "params" && NF > 3 {print $2}' "$T/p" | tail -1)
[ "$pp" = $((4 * (P - W))) ] && ok || bad "plan's fp32 part $pp, want $((4 * (P - W)))"
mq=$(echo $held | awk '{print $1}')
awk -v a="$pq" -v b="$mq" 'BEGIN { exit !(a > 0 && b >= a && (b - a) / b < 0.01) }' && ok || bad "plan's quantized $pq vs measured $mq"

# eval --formats: every format, fp32 first
"$ZS" eval --from "$T/ck" --formats --samples 32 >"$T/f" 2>&1 || bad "eval --formats failed"
[ "$(grep -c '^[a-z]' "$T/f")" = 6 ] && ok || { bad "eval --formats rows"; cat "$T/f"; }

# an MLP checkpoint quantizes too
run 1 "$ZS" train --model mlp --layers 2 --hidden 32 --steps 20 --save-dir "$T/mk" --quiet >"$T/log" 2>&1 ||
    bad "MLP training failed"
"$ZS" quantize --from "$T/mk" --format int8 --per-channel --out "$T/m.safetensors" >"$T/mq" 2>&1 &&
    grep -q "MLP" "$T/mq" && ok || { bad "MLP quantize"; cat "$T/mq"; }

# bad input: one line naming the problem, exit non-zero, no file written
echo "not a model" >"$T/junk.safetensors"
Q=$T/out.safetensors # what a refused quantize must not leave
refuse -o "$Q" -m "$T/none" quantize --from "$T/none" --format int8 --out "$Q"
refuse -o "$Q" -m "$T/junk.safetensors" quantize --from "$T/junk.safetensors" --format int8 --out "$Q"
refuse -o "$Q" -m 'int4' quantize --from "$T/ck" --format int4 --out "$Q"
refuse -o "$Q" -m 'block' quantize --from "$T/ck" --format int8 --block 0 --out "$Q"
refuse -o "$Q" -m 'double-quant' quantize --from "$T/ck" --format int8 --double-quant --out "$Q"
refuse -o "$Q" -m 'give one' quantize --from "$T/ck" --format int8 --block 8 --per-channel --out "$Q"
refuse -o "$Q" -m '--out' quantize --from "$T/ck" --format int8
refuse -o "$Q" -m "$T/nodir" quantize --from "$T/ck" --format int8 --out "$T/nodir/x.safetensors"
cp "$T/dq.safetensors" "$T/cut.safetensors"
truncate -s -100 "$T/cut.safetensors"
refuse -o "$Q" -m "$T/cut.safetensors" eval --from "$T/cut.safetensors"
# a damaged manifest checksum: the shard is checked against it
cp -r "$T/ck" "$T/ck2"
# shellcheck disable=SC2012 # the shard names the run wrote, which have no spaces
sh=$(ls "$T"/ck2/global_step30/shard_*dp00000*.safetensors | head -1)
printf 'X' | dd of="$sh" bs=1 seek=200 conv=notrunc 2>/dev/null
refuse -o "$Q" -m "checksum" quantize --from "$T/ck2" --format int8 --out "$Q"
# the old file stays when a write fails: quantize over an existing file
cp "$T/c-int8.safetensors" "$T/keep.safetensors"
"$ZS" quantize --from "$T/junk.safetensors" --format int8 --out "$T/keep.safetensors" >/dev/null 2>&1
cmp -s "$T/c-int8.safetensors" "$T/keep.safetensors" && ok || bad "a failed quantize changed the existing output"

finish
