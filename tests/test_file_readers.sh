#!/bin/sh
# Hostile and damaged input files (issue 42): the safetensors readers are
# linear in their input (eval's probe and compare looked every name up in
# every tensor: 100 s for 200,000 blocks, 141 s for compare of 150,000
# tensors with itself), a weight file longer than its header says is
# refused (safetensors was accepted), the header length's three bounds each
# have their own line (all said "in a file of 0"), and a checkpoint's data
# file name is quoted escaped by --resume. The large files are written by
# make_files.py (python3 with struct and json alone).
. "$(dirname "$0")/testlib.sh"
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null 2>&1 || { echo "no $PY: skipped"; exit 77; }

# timed_refuse SECONDS TEXT ARGS...: zerosim ARGS ends within SECONDS
# (timeout), refused with one line containing TEXT
timed_refuse() {
    lim=$1 want=$2
    shift 2
    timeout "$lim" "$ZS" "$@" </dev/null >"$T/out" 2>"$T/err"
    rc=$?
    if [ "$rc" -eq 124 ]; then
        bad "zerosim $*: still running after $lim s"
    elif [ "$rc" -ne 0 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q -- "$want" "$T/err"; then
        ok
    else
        bad "zerosim $*: exit $rc, not one line with \"$want\": $(head -3 "$T/err")"
    fi
}

# 1. linear readers (generous limits: this machine is shared; the files
# take about a second each when it is not)
"$PY" "$HERE/make_files.py" gpt 200000 "$T/blocks.safetensors"
timed_refuse 60 "tensor h.0.ln_1.weight has shape \[0\]" eval --from "$T/blocks.safetensors"
"$PY" "$HERE/make_files.py" flat 150000 "$T/flat.safetensors"
timeout 60 "$ZS" compare "$T/flat.safetensors" "$T/flat.safetensors" >"$T/out" 2>"$T/err"
rc=$?
[ "$rc" -eq 0 ] && grep -q "^# 150000 tensors within tolerance, 0 not" "$T/out" && ok ||
    bad "compare of 150,000 tensors with itself: exit $rc: $(tail -1 "$T/out") $(head -2 "$T/err")"
rm -f "$T/blocks.safetensors" "$T/flat.safetensors"
if ! zs_fast; then # a million blocks: read and refused in seconds
    "$PY" "$HERE/make_files.py" gpt 1000000 "$T/million.safetensors"
    timed_refuse 120 "has shape \[0\]" eval --from "$T/million.safetensors"
    rm -f "$T/million.safetensors"
fi

# 2. a weight file longer than its header says is refused, in both formats
MODEL="--layers 1 --hidden 16 --heads 2 --seq 8 --vocab 16"
"$ZS" export $MODEL --out "$T/w.safetensors" >/dev/null 2>&1 &&
    "$ZS" export $MODEL --out "$T/w.bin" >/dev/null 2>&1 || bad "export failed"
for f in w.safetensors w.bin; do
    cp "$T/$f" "$T/long.$f"
    printf 'junk' >>"$T/long.$f"
    X="$T/out.$f"
    msg="longer than its header says"
    [ "$f" = w.bin ] && msg="longer than its model"
    refuse -o "$X" -m "long.$f: .*$msg" export --init-from "$T/long.$f" --out "$X"
    refuse -m "long.$f: .*$msg" train --init-from "$T/long.$f" --steps 1
    refuse -m "$msg" eval --from "$T/long.$f" --heads 2
done
refuse -m "4 bytes after the last tensor" compare "$T/long.w.safetensors" "$T/w.safetensors"

# 3. the header length's bounds: each its own line, the file's real size
printf '\377\377\377\377\000\000\000\000{}      ' >"$T/huge.safetensors"
refuse -m "huge.safetensors: a safetensors header of 4294967295 bytes, more than the 100 MiB" \
    compare "$T/huge.safetensors" "$T/w.safetensors"
printf '\100\000\000\000\000\000\000\000{}      ' >"$T/over.safetensors"
refuse -m "header of 64 bytes in a file of 16;" compare "$T/over.safetensors" "$T/w.safetensors"

# 4. --resume quotes the saved data file's name escaped: a name with a
# newline forges no line
D="$T/tok
zerosim: forged.bin"
"$PY" "$HERE/make_files.py" tokens 4000 "$D"
"$PY" "$HERE/make_files.py" tokens 4000 "$T/other.bin"
"$ZS" train $MODEL --micro-batch 2 --data "$D" --steps 2 --save-dir "$T/ck" --silent \
    </dev/null >"$T/log" 2>&1 || bad "a run on $D failed: $(head -3 "$T/log")"
refuse -m 'trained on the tokens of .*tok\\nzerosim: forged.bin, this run' \
    train $MODEL --micro-batch 2 --resume "$T/ck" --data "$T/other.bin" --steps 3
finish
