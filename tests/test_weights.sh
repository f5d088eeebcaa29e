#!/bin/sh
# GPT weights in and out (zerosim export, train --init-from/--export):
# export -> init-from -> export is byte-identical in both formats, under
# every ZeRO stage and precision, on 1-3 ranks and with --tp 2; a trained
# run's --export equals its checkpoint exported with --from; files that do
# not describe a GPT zerosim can build are refused with one line naming the
# file and what is wrong, and leave no output behind.
. "$(dirname "$0")/testlib.sh"
PY=$(command -v python3 || true)

M="--layers 2 --hidden 24 --heads 4 --seq 8 --vocab 30"
run() { sh "$HERE/mpirun.sh" "$@" </dev/null; }

# the seed's initial weights, both formats; safetensors -> bin -> safetensors
"$ZS" export $M --seed 7 --out "$T/a.safetensors" >"$T/log" 2>&1 || { bad "export failed"; cat "$T/log"; }
"$ZS" export --init-from "$T/a.safetensors" --out "$T/a.bin" >"$T/log" 2>&1 || bad "export to .bin failed"
"$ZS" export --init-from "$T/a.bin" --out "$T/b.safetensors" >"$T/log" 2>&1 || bad "export from .bin failed"
cmp -s "$T/a.safetensors" "$T/b.safetensors" && ok || bad "safetensors -> bin -> safetensors differs"
"$ZS" export --init-from "$T/b.safetensors" --format bin --out "$T/b.weights" >"$T/log" 2>&1 || bad "--format bin failed"
cmp -s "$T/a.bin" "$T/b.weights" && ok || bad "bin -> safetensors -> bin differs"
# another seed gives other bytes (the comparison can fail)
"$ZS" export $M --seed 8 --out "$T/c.safetensors" >/dev/null 2>&1
cmp -s "$T/a.safetensors" "$T/c.safetensors" && bad "seeds 7 and 8 exported the same bytes" || ok

# llm.c's header: magic, version 3, maxT, V, L, NH, C, padded V (32 = 30 up to 128)
hdr=$(od -An -t d4 -N 32 "$T/a.bin" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
[ "$hdr" = "20240326 3 8 30 2 4 24 128" ] && ok || bad "llm.c header: $hdr"
# Hugging Face's names and (in, out) shapes in the header
hjson=$(dd if="$T/a.safetensors" bs=1 skip=8 count=4000 2>/dev/null)
for want in '"wte.weight":{"dtype":"F32","shape":[30,24]' '"h.1.attn.c_attn.weight":{"dtype":"F32","shape":[24,72]' \
            '"h.0.mlp.c_proj.weight":{"dtype":"F32","shape":[96,24]' '"ln_f.bias":{"dtype":"F32","shape":[24]' '"n_head":"4"'; do
    echo "$hjson" | tr -d ' ' | grep -qF "$want" && ok || bad "safetensors header lacks $want"
done

# the round trip through every stage and every precision (each stage and
# each precision at least once; one with ZeRO-Offload), on 1 and 3 ranks, and
# the mesh
for nsp in "1 0 fp32" "1 2 bf16" "3 1 fp16 --offload-optimizer cpu" "3 3 bf16" "3 2 fp32"; do
    set -- $nsp; n=$1; st=$2; p=$3; shift 3
    run "$n" "$ZS" export --init-from "$T/a.bin" --stage "$st" --precision "$p" "$@" \
        --out "$T/r.safetensors" >"$T/log" 2>&1 || { bad "N=$n stage $st $p failed"; cat "$T/log"; continue; }
    cmp -s "$T/a.safetensors" "$T/r.safetensors" && ok || bad "N=$n stage $st $p: the round trip differs"
done
run 4 "$ZS" export --init-from "$T/a.safetensors" --tp 2 --stage 3 --precision fp16 --out "$T/tp.bin" \
    >"$T/log" 2>&1 || { bad "--tp 2 export failed"; cat "$T/log"; }
cmp -s "$T/a.bin" "$T/tp.bin" && ok || bad "--tp 2: the round trip differs"

# training from seed 7's file is training from seed 7, and from seed 8's file
# is not; --export after the last step equals the checkpoint exported with --from
run 2 "$ZS" train --init-from "$T/a.safetensors" --seed 7 --steps 3 --micro-batch 2 --stage 2 \
    --save-dir "$T/ck" --export "$T/trained.bin" --report "$T/r1.json" --quiet >"$T/log" 2>&1 \
    || { bad "train --init-from failed"; cat "$T/log"; }
run 2 "$ZS" train $M --seed 7 --steps 3 --micro-batch 2 --stage 2 --report "$T/r2.json" --quiet >/dev/null 2>&1
[ "$(hashes "$T/r1.json")" = "$(hashes "$T/r2.json")" ] && ok || bad "--init-from (seed 7's file) differs from --seed 7"
run 2 "$ZS" train --init-from "$T/c.safetensors" --seed 7 --steps 3 --micro-batch 2 --report "$T/r3.json" --quiet >/dev/null 2>&1
[ "$(hashes "$T/r3.json")" != "$(hashes "$T/r2.json")" ] && ok || bad "--init-from seed 8's file trained as seed 7"
"$ZS" export --init-from "$T/trained.bin" --out "$T/t1.safetensors" >/dev/null 2>&1
"$ZS" export --from "$T/ck" --out "$T/t2.safetensors" >"$T/log" 2>&1 || { bad "export --from failed"; cat "$T/log"; }
cmp -s "$T/t1.safetensors" "$T/t2.safetensors" && ok || bad "train --export differs from export --from its checkpoint"
cmp -s "$T/t1.safetensors" "$T/a.safetensors" && bad "training did not change the weights" || ok

# refusals: one line naming the file (or option) and what is wrong, exit 1, no output left
head -c 5000 "$T/a.bin" >"$T/trunc.bin"
X=$T/x.safetensors # what a refused export must not leave
refuse -o "$X" -m "trunc.bin: truncated" export --init-from "$T/trunc.bin" --out "$X"
head -c 100 "$T/a.bin" >"$T/short.bin"
refuse -o "$X" -m "short.bin: truncated" export --init-from "$T/short.bin" --out "$X"
{ printf 'XXXX'; tail -c +5 "$T/a.bin"; } >"$T/magic.bin"
refuse -o "$X" -m "magic.bin: bad magic" export --init-from "$T/magic.bin" --out "$X"
{ head -c 4 "$T/a.bin"; printf '\005\000\000\000'; tail -c +9 "$T/a.bin"; } >"$T/v5.bin"
refuse -o "$X" -m "v5.bin: version 5" export --init-from "$T/v5.bin" --out "$X"
refuse -o "$X" -m "holds a GPT with layers 2, but the command line gives 3" export --init-from "$T/a.bin" --layers 3 --out "$X"
echo '{"model": {"hidden": 48}}' >"$T/cfg.json"
if "$ZS" train --config "$T/cfg.json" --print-config >/dev/null 2>&1; then
    refuse -o "$X" -m "the --config file gives 48" export --config "$T/cfg.json" --init-from "$T/a.bin" --out "$X"
fi
refuse -o "$X" -m "MLP" export --model mlp --out "$X"
refuse -o "$X" -m "cannot tell the format" export $M --out "$T/x.weights"
refuse -o "$X" -m "no such file\|No such file" export --init-from "$T/none.bin" --out "$X"
if [ -n "$PY" ]; then
    # safetensors edited: a tensor renamed, a dtype, a shape, an extra tensor, no n_head
    "$PY" - "$T" <<'EOF'
import json, struct, sys
t = sys.argv[1]
raw = open(t + "/a.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head, data = json.loads(raw[8:8 + n]), raw[8 + n:]
def write(name, h, d=data):
    b = json.dumps(h).encode()
    b += b" " * ((8 - len(b) % 8) % 8)
    open(t + "/" + name, "wb").write(struct.pack("<Q", len(b)) + b + d)
h = json.loads(json.dumps(head)); h["h.1.ln_2.biasX"] = h.pop("h.1.ln_2.bias"); write("renamed.safetensors", h)
h = json.loads(json.dumps(head)); e = h["ln_f.bias"]; e["dtype"] = "I32"; write("dtype.safetensors", h)
h = json.loads(json.dumps(head)); e = h["wpe.weight"]; e["shape"] = [4, 48]; write("shape.safetensors", h)
h = json.loads(json.dumps(head)); e = h["h.0.attn.c_proj.weight"]; e["shape"] = [48, 12]; write("block.safetensors", h)
h = json.loads(json.dumps(head)); end = max(v["data_offsets"][1] for k, v in h.items() if k != "__metadata__")
h["h.0.mlp.gate.weight"] = {"dtype": "F32", "shape": [2], "data_offsets": [end, end + 8]}
write("extra.safetensors", h, data + bytes(8))
h = json.loads(json.dumps(head)); del h["__metadata__"]["n_head"]; write("nohead.safetensors", h)
h = json.loads(json.dumps(head)); h["h.0.attn.bias"] = {"dtype": "F32", "shape": [2], "data_offsets": [end, end + 8]}
write("mask.safetensors", h, data + bytes(8))
EOF
    refuse -o "$X" -m "renamed.safetensors: missing tensor h.1.ln_2.bias" export --init-from "$T/renamed.safetensors" --out "$X"
    refuse -o "$X" -m "dtype.safetensors: tensor ln_f.bias is I32" export --init-from "$T/dtype.safetensors" --out "$X"
    refuse -o "$X" -m "shape.safetensors" export --init-from "$T/shape.safetensors" --out "$X"
    refuse -o "$X" -m "block.safetensors: tensor h.0.attn.c_proj.weight has shape \[48, 12\]" export --init-from "$T/block.safetensors" --out "$X"
    refuse -o "$X" -m "extra.safetensors: tensor h.0.mlp.gate.weight is not part of" export --init-from "$T/extra.safetensors" --out "$X"
    refuse -o "$X" -m "does not say the number of heads" export --init-from "$T/nohead.safetensors" --out "$X"
    # with --heads it loads; a causal-mask buffer (as older GPT-2 files hold) is skipped
    "$ZS" export --init-from "$T/nohead.safetensors" --heads 4 --out "$T/y.safetensors" >/dev/null 2>&1 &&
        cmp -s "$T/a.safetensors" "$T/y.safetensors" && ok || bad "--heads 4 with a file without n_head"
    "$ZS" export --init-from "$T/mask.safetensors" --out "$T/y.safetensors" >/dev/null 2>&1 &&
        cmp -s "$T/a.safetensors" "$T/y.safetensors" && ok || bad "a file with h.0.attn.bias"
fi
finish
