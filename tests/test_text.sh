#!/bin/sh
# Text: zerosim tokens (a text file as byte-level token files in llm.c's
# format, a held-out tail), the 32-bit token files (llm.c's Llama 3 format:
# magic 20240801, version 7, uint32 tokens), held-out bits per byte, and
# zerosim sample. The files are read back by Python's struct here, not by
# zerosim; a 32-bit file trains to the same bytes as the 16-bit file of the
# same tokens; sampling is deterministic for a seed; bad files and
# arguments are refused with one line, nothing written; --init-from reads
# quantized and compressed files (the weights zerosim decompress and
# zerosim eval decode).
# Quick form (ZS_TEST_LEVEL=fast): one process everywhere; full: the
# 32-bit file also on 2 ranks and stage 3 against the 16-bit one on 1.
. "$(dirname "$0")/testlib.sh"
PY=$(command -v python3 || true)
[ -n "$PY" ] || { echo "SKIP: python3 is needed to read the token files"; exit 77; }

# a text with every byte value (0 and 255 included) and some English
"$PY" - "$T/text.txt" <<'EOF'
import sys
body = bytes(range(256)) + b"It was the best of times, it was the worst of times.\n" * 40
open(sys.argv[1], "wb").write(body)
EOF
n=$(wc -c <"$T/text.txt")

# check_tokens FILE MAGIC VERSION WIDTH FIRST COUNT: FILE is llm.c's header
# (MAGIC, VERSION, COUNT, word 3 = 1: byte-level, the rest zero) and COUNT
# tokens of WIDTH bytes equal to the text's bytes FIRST .. FIRST+COUNT-1
check_tokens() {
    "$PY" - "$T/text.txt" "$@" <<'EOF' && ok || bad "$2: not the text's bytes $6.. in llm.c's format"
import struct, sys
text, path = open(sys.argv[1], "rb").read(), sys.argv[2]
magic, version, width, first, count = map(int, sys.argv[3:8])
data = open(path, "rb").read()
h = struct.unpack("<256i", data[:1024])
want = [magic, version, count, 1] + [0] * 252
if list(h) != want:
    sys.exit("header %r" % (h[:5],))
toks = struct.unpack("<%d%s" % (count, "H" if width == 2 else "I"), data[1024:])
if len(data) != 1024 + width * count or list(toks) != list(text[first:first + count]):
    sys.exit("tokens differ")
EOF
}

# ---- zerosim tokens: round trips -----------------------------------------------------
"$ZS" tokens "$T/text.txt" --out "$T/all16.bin" >"$T/tok.log" 2>&1 || bad "tokens (16-bit) failed"
check_tokens "$T/all16.bin" 20240520 1 2 0 "$n"
"$ZS" tokens "$T/text.txt" --out "$T/all32.bin" --bits 32 >"$T/tok.log" 2>&1 ||
    bad "tokens --bits 32 failed"
check_tokens "$T/all32.bin" 20240801 7 4 0 "$n"
# a held-out tail: the last floor(n f) bytes
"$ZS" tokens "$T/text.txt" --out "$T/tr.bin" --val-out "$T/va.bin" --val-fraction 0.25 \
    >"$T/tok.log" 2>&1 || bad "tokens --val-out failed"
nv=$((n / 4))
check_tokens "$T/tr.bin" 20240520 1 2 0 $((n - nv))
check_tokens "$T/va.bin" 20240520 1 2 $((n - nv)) "$nv"
grep -q "wrote $T/va.bin: $nv held-out tokens" "$T/tok.log" && ok || bad "tokens: no held-out line"

# ---- the 32-bit files train as the 16-bit ones ---------------------------------------
# Python's files (tests/make_files.py), not zerosim's: the reader, not the
# writer, under test; with --deterministic every step's parameters equal
"$PY" "$HERE/make_files.py" tokens 3000 "$T/p16.bin"
"$PY" "$HERE/make_files.py" tokens32 3000 "$T/p32.bin"
M="--layers 1 --hidden 16 --heads 2 --seq 16 --micro-batch 2 --steps 3 --deterministic"
zs_run p16 0 $M --grad-accum 2 --vocab 8 --data "$T/p16.bin" --val-data "$T/p16.bin"
zs_run p32 0 $M --grad-accum 2 --vocab 8 --data "$T/p32.bin" --val-data "$T/p32.bin"
[ -n "$(hashes "$T/p16.json")" ] && [ "$(hashes "$T/p16.json")" = "$(hashes "$T/p32.json")" ] &&
    ok || bad "the 32-bit token file trains to other parameters than the 16-bit one"
if ! zs_fast; then
    zs_run p32n2 2 $M --vocab 8 --data "$T/p32.bin" --stage 3 --val-data "$T/p16.bin"
    [ "$(hashes "$T/p16.json")" = "$(hashes "$T/p32n2.json")" ] && ok ||
        bad "the 32-bit file on 2 ranks, stage 3, differs from the 16-bit one on 1"
fi
# make_files.py's tokens are not byte-level (word 3 is 0): no bits per byte
grep -q bits_per_byte "$T/p16.json" && bad "bits per byte on a file not marked byte-level" || ok
grep -q val_bpb "$T/p16.log" && bad "val_bpb on a file not marked byte-level" || ok

# ---- bits per byte, and a checkpoint to sample from ---------------------------------
B="--layers 1 --hidden 32 --heads 2 --seq 32 --vocab 256 --micro-batch 2 --steps 6 --lr 3e-3"
zs_run bytes 0 $B --data "$T/tr.bin" --val-data "$T/va.bin" --val-every 3 --save-dir "$T/ck"
# bits per byte = the held-out loss in nats / ln 2, in the report and the log
"$PY" - "$T/bytes.json" <<'EOF' && ok || bad "bits_per_byte is not val_loss / ln 2"
import json, math, sys
v = json.load(open(sys.argv[1]))["val_loss"]
assert [e["step"] for e in v] == [3, 6], v
for e in v:
    assert abs(e["bits_per_byte"] - e["loss"] / math.log(2)) <= 1e-6 * e["bits_per_byte"], e
EOF
grep -q "^step     6/6 .* val_loss [0-9.]*  val_bpb [0-9.]*$" "$T/bytes.log" && ok ||
    bad "no val_bpb on step 6's progress line"
grep -q "^held-out loss [0-9.]* ([0-9.]* bits per byte) after step 6" "$T/bytes.log" && ok ||
    bad "no bits per byte in the summary"

# ---- zerosim sample: deterministic for a seed ----------------------------------------
sample() { "$ZS" sample --from "$T/ck" --prompt "It was" --tokens 40 "$@" 2>&1; }
sample --temperature 0 >"$T/g1" && sample --temperature 0 --seed 9 >"$T/g2" ||
    bad "greedy sampling failed"
cmp -s "$T/g1" "$T/g2" && ok || bad "greedy sampling depends on the seed"
sample --seed 5 >"$T/s1" && sample --seed 5 >"$T/s2" && sample --seed 6 >"$T/s3" ||
    bad "temperature sampling failed"
cmp -s "$T/s1" "$T/s2" && ok || bad "the same seed sampled different text"
cmp -s "$T/s1" "$T/s3" && bad "seeds 5 and 6 sampled the same 40 tokens" || ok
# the prompt, then 40 bytes, then a newline
[ "$(head -c 6 "$T/s1")" = "It was" ] && [ "$(wc -c <"$T/s1")" -eq 47 ] && ok ||
    bad "sample's output is not the prompt and 40 bytes: $(wc -c <"$T/s1") bytes"
# a weights file samples as its checkpoint does
"$ZS" export --from "$T/ck" --data "$T/tr.bin" --out "$T/w.safetensors" >/dev/null 2>&1 ||
    bad "export failed"
"$ZS" sample --from "$T/w.safetensors" --prompt "It was" --tokens 40 --seed 5 >"$T/s4" 2>&1
cmp -s "$T/s1" "$T/s4" && ok || bad "the exported weights sample other text than the checkpoint"

# ---- --init-from a quantized or compressed file ------------------------------------
"$ZS" compress --from "$T/ck" --out "$T/c.zc" >/dev/null 2>&1 || bad "compress failed"
"$ZS" quantize --from "$T/ck" --format nf4 --out "$T/q.zq" --samples 0 >/dev/null 2>&1 ||
    bad "quantize failed"
# the decoded weights: export's param_hash is the one decompress prints
want=$("$ZS" decompress --from "$T/c.zc" --samples 0 2>&1 | sed -n 's/^param_hash \([0-9a-f]*\).*/\1/p')
"$ZS" export --init-from "$T/c.zc" --out "$T/ec.safetensors" >"$T/ec.log" 2>&1 ||
    bad "export --init-from c.zc failed"
[ -n "$want" ] && grep -q "param_hash $want" "$T/ec.log" && ok ||
    bad "export --init-from c.zc: not decompress's param_hash $want"
# the dequantized weights: the same held-out loss as eval --from the .zq file's fp32 row
"$ZS" export --init-from "$T/q.zq" --out "$T/eq.safetensors" >/dev/null 2>&1 ||
    bad "export --init-from q.zq failed"
l1=$("$ZS" eval --from "$T/q.zq" --seed 1 --samples 16 2>&1 | awk '$1 == "fp32" { print $4 }')
l2=$("$ZS" eval --from "$T/eq.safetensors" --heads 2 --seed 1 --samples 16 2>&1 |
     awk '$1 == "fp32" { print $4 }')
[ -n "$l1" ] && [ "$l1" = "$l2" ] && ok ||
    bad "export --init-from q.zq: held-out loss $l2, the .zq file's $l1"
# training from them: accepted on 2 ranks, stage 3; an MLP's .zc too
if ! zs_fast; then
    zs_run ftq 2 --init-from "$T/q.zq" --stage 3 --micro-batch 2 --steps 2 \
        --data "$T/tr.bin" --val-data "$T/va.bin"
fi
"$ZS" train --model mlp --steps 20 --lr 1e-2 --save-dir "$T/mlpc" --silent >/dev/null 2>&1 ||
    bad "mlp run failed"
"$ZS" compress --from "$T/mlpc" --out "$T/m.zc" >/dev/null 2>&1 || bad "compress (MLP) failed"
zs_run mz 0 --init-from "$T/m.zc" --steps 1
zs_run m0 0 --model mlp --steps 1
l1=$(sed -n 's/^step     1\/1  loss \([0-9.]*\).*/\1/p' "$T/mz.log")
l0=$(sed -n 's/^step     1\/1  loss \([0-9.]*\).*/\1/p' "$T/m0.log")
awk -v a="$l1" -v b="$l0" 'BEGIN { exit !(a != "" && a + 0 < b + 0) }' && ok ||
    bad "--init-from m.zc: step 1's loss $l1 is not below the seed's initialisation's $l0"
refuse -m "holds quantized gpt, but the run's model is mlp" \
    train --init-from "$T/q.zq" --model mlp --steps 1
refuse -m "holds a GPT with layers 1, but the command line gives 2" \
    train --init-from "$T/q.zq" --layers 2 --steps 1

# ---- refused -----------------------------------------------------------------------
"$PY" - "$T" <<'EOF'
import struct, sys
t = sys.argv[1]
def write(name, toks, magic=20240801, version=7, count=None, word3=0, fmt="I"):
    h = [magic, version, len(toks) if count is None else count, word3] + [0] * 252
    open(t + "/" + name, "wb").write(struct.pack("<256i", *h) + struct.pack("<%d%s" % (len(toks), fmt), *toks))
write("v6.bin", [1] * 100, version=6)
write("big32.bin", [1] * 50 + [70000] + [1] * 49)        # offset 1024 + 4 * 50 = 1224
write("short32.bin", [1] * 100, count=101)
write("byte300.bin", [1] * 50 + [300] + [1] * 49, word3=1)
write("word3.bin", [1] * 100, word3=2)
write("v7mix.bin", [1] * 100, magic=20240520, version=7, fmt="H")
EOF
S="--layers 1 --hidden 16 --heads 2 --seq 16 --micro-batch 2 --steps 1"
refuse -m "v6.bin: version 6 at offset 4; zerosim reads magic 20240801 with version 7" \
    train $S --vocab 512 --data "$T/v6.bin"
refuse -m "big32.bin: token 70000 at offset 1224 is outside the vocabulary of 512" \
    train $S --vocab 512 --data "$T/big32.bin"
refuse -m "short32.bin: truncated at offset 1424" train $S --vocab 512 --data "$T/short32.bin"
refuse -m "byte300.bin: token 300 at offset 1224 is outside the byte-level" \
    train $S --vocab 512 --data "$T/byte300.bin"
refuse -m "word3.bin: 2 at offset 12" train $S --vocab 512 --data "$T/word3.bin"
refuse -m "v7mix.bin: version 7 at offset 4; zerosim reads magic 20240520 with version 1" \
    train $S --vocab 512 --data "$T/v7mix.bin"
: >"$T/empty.txt"
refuse -o "$T/o.bin" -m "empty.txt: the file is empty" tokens "$T/empty.txt" --out "$T/o.bin"
refuse -o "$T/o.bin" -m "No such file" tokens "$T/none.txt" --out "$T/o.bin"
refuse -m "give --out FILE" tokens "$T/text.txt"
refuse -o "$T/o.bin" -m "needs --val-out" tokens "$T/text.txt" --out "$T/o.bin" --val-fraction 0.1
refuse -o "$T/o.bin" -m "--bits is 16 or 32" tokens "$T/text.txt" --out "$T/o.bin" --bits 8
refuse -m "is the text itself" tokens "$T/text.txt" --out "$T/text.txt"
refuse -o "$T/o.bin" -m "both $T/o.bin" tokens "$T/text.txt" --out "$T/o.bin" --val-out "$T/o.bin"
printf 'ab' >"$T/two.txt"
refuse -o "$T/o.bin" -o "$T/v.bin" -m "holds out no byte" \
    tokens "$T/two.txt" --out "$T/o.bin" --val-out "$T/v.bin" --val-fraction 0.1
refuse -m "cannot write" tokens "$T/text.txt" --out "$T/d/o.bin"
"$ZS" train --model mlp --steps 1 --save-dir "$T/mlp" --silent >/dev/null 2>&1 || bad "mlp run failed"
refuse -m "is an MLP" sample --from "$T/mlp" --prompt "a" --tokens 3
refuse -m "at least one byte" sample --from "$T/ck" --prompt "" --tokens 3
refuse -m "give --tokens N" sample --from "$T/ck" --prompt "a"
refuse -m "--temperature must be" sample --from "$T/ck" --prompt "a" --tokens 3 --temperature -1
"$ZS" train --layers 1 --hidden 16 --heads 2 --seq 8 --vocab 64 --steps 1 --save-dir "$T/v64" \
    --silent >/dev/null 2>&1 || bad "vocab 64 run failed"
refuse -m "token 97 (position 0) is outside the model's vocabulary of 64" \
    sample --from "$T/v64" --prompt "a" --tokens 3
finish
