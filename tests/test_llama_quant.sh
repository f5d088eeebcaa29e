#!/bin/sh
# zerosim quantize, eval, compress and sample on a dense Llama's weights
# file (Hugging Face's names, zerosim's metadata):
# - quantize --format int8 (per tensor) quantizes exactly the seven linear
#   weights of each block, and each int8 value and scale is what
#   tests/llama_quant_check.py computes from the float32 weights (roundf
#   of x * 127 / max |x|), every other tensor kept bit for bit;
# - eval of the quantized file gives the loss of a weights file holding
#   the weights dequantized by that script (q * a / 127), while a wrong
#   dequantization (/ 127.5, the control) gives another;
# - the quantized file's bytes are the closed form: 2 blocks of q, o
#   (C x C), k, v (KV D x C), gate, up, down (F x C): W = 15360 int8 weights,
#   one fp32 scale per tensor (14), the other 4256 parameters fp32;
# - int8-zp and nf4 (double quant) files evaluate to the loss quantize
#   printed for them; a .zc file of compress evaluates to compress's
#   fine-tuned loss; sample continues a prompt from a Llama's file;
# - a Mixtral's file, and a file without zerosim's metadata, are refused
#   in one line.
. "$(dirname "$0")/testlib.sh"
PY=$(command -v python3 || true)
QC="$HERE/llama_quant_check.py"
L="--model llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --ffn-hidden 48 --seq 16 --vocab 64"

"$ZS" export $L --seed 7 --out "$T/w.safetensors" >"$T/log" 2>&1 || { bad "export failed"; cat "$T/log"; }
"$ZS" quantize --from "$T/w.safetensors" --format int8 --out "$T/q8.safetensors" >"$T/q8" 2>&1 ||
    { bad "quantize int8 failed"; cat "$T/q8"; }
grep -q "^# model: .*Llama layers 2 hidden 32 heads 4 kv-heads 2 ffn-hidden 48 seq 16 vocab 64, 19616 parameters" "$T/q8" &&
    grep -q "quantized 15360 of 19616 parameters" "$T/q8" && ok || { bad "quantize's model line"; cat "$T/q8"; }
# bytes: W int8 + 14 scales + the rest fp32
want=$((15360 + 14 * 4 + 4 * (19616 - 15360)))
got=$(awk '/^int8, per tensor/ {print $(NF-3)}' "$T/q8")
[ "$got" = "$want" ] && ok || bad "int8 bytes $got, the closed form $want"

# eval of the quantized file: the loss quantize printed, and a file of
# independently dequantized weights'
"$ZS" eval --from "$T/q8.safetensors" >"$T/e8" 2>&1 || { bad "eval of the int8 file failed"; cat "$T/e8"; }
lq=$(awk '/^int8, per tensor/ {print $(NF-1)}' "$T/q8")
le=$(awk '/^fp32/ {print $(NF-1)}' "$T/e8")
l0=$(awk '/^fp32/ {print $(NF-1)}' "$T/q8")
[ -n "$lq" ] && [ "$lq" = "$le" ] && ok || bad "eval of the int8 file gives $le, quantize said $lq"
[ -n "$l0" ] && [ "$l0" != "$lq" ] && ok || bad "the int8 loss equals the fp32 one ($l0): nothing quantized?"
if [ -n "$PY" ]; then
    "$PY" "$QC" int8 "$T/w.safetensors" "$T/q8.safetensors" && ok ||
        bad "the int8 values or scales are not roundf(127 x / max |x|)"
    "$PY" "$QC" dequant "$T/q8.safetensors" "$T/dq.safetensors" &&
        "$ZS" eval --from "$T/dq.safetensors" >"$T/edq" 2>&1 || { bad "eval of the dequantized weights failed"; cat "$T/edq"; }
    ld=$(awk '/^fp32/ {print $(NF-1)}' "$T/edq")
    [ -n "$ld" ] && [ "$ld" = "$le" ] && ok || bad "the int8 file's loss $le, its weights dequantized apart $ld"
    sed 's|/ 127.0)|/ 127.5)|' "$QC" >"$T/qc_wrong.py"
    "$PY" "$T/qc_wrong.py" dequant "$T/q8.safetensors" "$T/dq2.safetensors" &&
        "$ZS" eval --from "$T/dq2.safetensors" >"$T/edq2" 2>&1
    lw=$(awk '/^fp32/ {print $(NF-1)}' "$T/edq2")
    [ -n "$lw" ] && [ "$lw" != "$le" ] && ok || bad "control: a wrong dequantization gave the same loss ($lw)"
else
    echo "SKIP: no python3: the int8 values are not checked from outside"
fi

# the other formats: eval of the file gives the loss quantize printed
for f in "int8-zp --block 32:int8-zp, blocks of 32" "nf4 --double-quant:nf4, blocks of 64, double quant"; do
    opts=${f%%:*} row=${f#*:}
    # shellcheck disable=SC2086 # the format's options
    "$ZS" quantize --from "$T/w.safetensors" --format $opts --out "$T/qf.safetensors" >"$T/qf" 2>&1 &&
        "$ZS" eval --from "$T/qf.safetensors" >"$T/ef" 2>&1 || { bad "quantize/eval $opts failed"; cat "$T/qf" "$T/ef"; continue; }
    lq=$(awk -v r="$row" 'index($0, r) == 1 {print $(NF-1)}' "$T/qf")
    le=$(awk '/^fp32/ {print $(NF-1)}' "$T/ef")
    [ -n "$lq" ] && [ "$lq" = "$le" ] && ok || bad "$opts: eval gives $le, quantize said $lq"
done

# compress: the .zc file evaluates to compress's fine-tuned loss
"$ZS" compress --from "$T/w.safetensors" --out "$T/c.zc" >"$T/c" 2>&1 ||
    { bad "compress failed"; cat "$T/c"; }
lc=$(sed -n 's/.*fine-tuned \([0-9.]*\) .*/\1/p' "$T/c")
"$ZS" eval --from "$T/c.zc" --samples 1024 >"$T/ec" 2>&1 || { bad "eval of the .zc file failed"; cat "$T/ec"; }
le=$(awk '/^fp32/ {print $(NF-1)}' "$T/ec")
[ -n "$lc" ] && [ "$lc" = "$le" ] && ok || bad "eval of the .zc file gives $le, compress said $lc"

# sample: greedy is deterministic and continues the prompt
"$ZS" export ${L%--vocab 64} --vocab 256 --seed 5 --out "$T/s.safetensors" >/dev/null 2>&1
"$ZS" sample --from "$T/s.safetensors" --prompt hello --tokens 8 >"$T/s1" 2>"$T/s.err" &&
    "$ZS" sample --from "$T/s.safetensors" --prompt hello --tokens 8 >"$T/s2" 2>>"$T/s.err" &&
    cmp -s "$T/s1" "$T/s2" && [ "$(head -c 5 "$T/s1")" = hello ] &&
    [ "$(wc -c <"$T/s1")" -gt 5 ] && ok || { bad "sample from a Llama's file"; cat "$T/s.err"; }

# refusals: one line
"$ZS" export $L --moe-experts 4 --moe-top-k 2 --out "$T/mx.safetensors" >/dev/null 2>&1
refuse -o "$T/x.safetensors" -m "holds Mixtral's experts (block_sparse_moe): this command evaluates dense models only" \
    quantize --from "$T/mx.safetensors" --format int8 --out "$T/x.safetensors"
refuse -m "holds Mixtral's experts" eval --from "$T/mx.safetensors"
if [ -n "$PY" ]; then
    "$PY" "$HERE/hf_llama_files.py" write "$T/hf"
    refuse -m "does not say the Llama's context .*zerosim export --init-from" \
        eval --from "$T/hf/model.safetensors" --heads 4
fi
finish
