#!/bin/sh
# Write the seed corpora of the file readers' fuzz targets into
# fuzz/corpus/<target>/ from zerosim's own outputs (a GPT of one block,
# C = 8, so each seed is a few KB): valid files and damaged copies
# (truncated, a byte flipped in the header). Run from a built tree:
#     sh fuzz/make_corpus.sh [ZEROSIM]      (default ./zerosim)
# The seeds are committed; rerun this when a format changes.
set -eu
ZS=${1:-./zerosim}
SRC=$(cd "$(dirname "$0")/.." && pwd)
C="$SRC/fuzz/corpus"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
M="--layers 1 --hidden 8 --heads 2 --seq 4 --vocab 8 --micro-batch 2"
for t in safetensors weights tokens manifest qfile zcfile calibration; do
    rm -rf "${C:?}/$t"
    mkdir -p "$C/$t"
done
# damaged NAME FILE TARGET: the valid file and three damaged copies
damaged() {
    cp "$2" "$C/$3/$1"
    n=$(wc -c <"$2")
    head -c $((n / 2)) "$2" >"$C/$3/$1.half"
    head -c $((n - 1)) "$2" >"$C/$3/$1.short"
    { cat "$2"; printf 'tail'; } >"$C/$3/$1.long"
}
"$ZS" export $M --seed 1 --out "$W/w.safetensors" >/dev/null
"$ZS" export $M --seed 1 --out "$W/w.bin" >/dev/null
damaged gpt.safetensors "$W/w.safetensors" weights
damaged gpt.bin "$W/w.bin" weights
"$ZS" train $M --steps 2 --silent --save-dir "$W/ck" --dump-dir "$W/d" --dump-steps 1 \
    </dev/null >/dev/null
damaged dump.safetensors "$W/d/step_000001.safetensors" safetensors
damaged ckpt.safetensors "$(ls "$W"/ck/global_step2/*.safetensors | head -1)" safetensors
cp "$W/w.safetensors" "$C/safetensors/gpt.safetensors"
damaged manifest.json "$W/ck/global_step2/manifest.json" manifest
"$ZS" quantize --from "$W/ck" --format nf4 --double-quant --out "$W/q.zq" >/dev/null
"$ZS" quantize --from "$W/ck" --format int8-zp --out "$W/q8.zq" >/dev/null
damaged nf4.zq "$W/q.zq" qfile
damaged int8zp.zq "$W/q8.zq" qfile
"$ZS" compress --from "$W/ck" --out "$W/c.zc" >/dev/null
damaged model.zc "$W/c.zc" zcfile
python3 "$SRC/tests/make_files.py" tokens 64 "$W/tokens.bin"
damaged tokens.bin "$W/tokens.bin" tokens
python3 "$SRC/tests/make_files.py" tokens32 64 "$W/tokens32.bin"
damaged tokens32.bin "$W/tokens32.bin" tokens
printf 'It was the best of times, it was the worst of times.\n' >"$W/text.txt"
"$ZS" tokens "$W/text.txt" --out "$W/bytes.bin" --bits 32 >/dev/null
damaged bytes32.bin "$W/bytes.bin" tokens
cat >"$W/cal.json" <<'JSON'
{"gemm_flops": 1.5e12, "intra_latency_s": 2e-6, "intra_bandwidth": 1e10,
 "inter_latency_s": 5e-6, "inter_bandwidth": 1e9, "optimizer_elems_per_s": 1e9,
 "reduce_scatter": {"latency_s": 1e-6, "bandwidth": 2e10},
 "allgather": {"latency_s": 1e-6, "bandwidth": 2e10}}
JSON
damaged cal.json "$W/cal.json" calibration
for t in safetensors weights tokens manifest qfile zcfile calibration; do
    echo "fuzz/corpus/$t: $(ls "$C/$t" | wc -l) seeds, $(du -sk "$C/$t" | cut -f1) KB"
done
