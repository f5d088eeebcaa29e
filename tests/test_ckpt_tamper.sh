#!/bin/sh
# A checkpoint manifest edited by one number is refused by every reader of
# checkpoints, with one line naming the file and a non-zero exit:
#  - every numeric field of the manifest (steps, optimizer_state.step, the
#    files' ranges and sizes, the mesh, ...) plus one, every boolean
#    flipped, the last hex digit of every checksum changed, "version": 999;
#  - the readers: train --resume, export --from, eval --from, quantize
#    --from and compress --from (the manifest's checksum, the version, the
#    file ranges and the parameters' hash go through one function);
#  - the untouched checkpoint is read by all five (the test can pass).
# The edits use sed and awk alone (no jq, no python).
. "$(dirname "$0")/testlib.sh"

MODEL="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 32"
C="$T/ck"
M="$C/global_step2/manifest.json"
sh "$HERE/mpirun.sh" 2 "$ZS" train $MODEL --steps 2 --save-dir "$C" --silent </dev/null ||
    { bad "the saving run failed"; finish; }
cp "$M" "$T/keep.json"

# reader NAME: run the reader NAME on $C, its stderr in $T/err, its exit status
reader() {
    case $1 in
    resume) "$ZS" train $MODEL --micro-batch 16 --steps 3 --resume "$C" --silent ;;
    export) "$ZS" export --from "$C" --out "$T/w.safetensors" ;;
    eval) "$ZS" eval --from "$C" --samples 8 ;;
    quantize) "$ZS" quantize --from "$C" --format int8 --samples 8 --out "$T/q.safetensors" ;;
    compress) "$ZS" compress --from "$C" --samples 32 --out "$T/c.zc" ;;
    esac </dev/null >"$T/out" 2>"$T/err"
}
READERS="resume export eval quantize compress"

for r in $READERS; do
    reader "$r" && ok || bad "$r: the untouched checkpoint was refused: $(cat "$T/err")"
done

# refused LABEL: every reader refuses the manifest as it is now
refused() {
    for r in $READERS; do
        if reader "$r"; then
            bad "$r accepted a manifest with $1"
        elif [ "$(grep -c . "$T/err")" -ne 1 ]; then
            bad "$r: $1: not one line: $(cat "$T/err")"
        elif ! grep -q "manifest.json" "$T/err"; then
            bad "$r: $1: the line does not name the manifest: $(cat "$T/err")"
        else
            ok
        fi
    done
}

# every line of the manifest with a number, a boolean or a checksum
edits=0
# shellcheck disable=SC2013 # grep -n lines of one JSON key each, without spaces
for line in $(grep -n '": \(-\{0,1\}[0-9]\|true\|false\|"[0-9a-f]\{16\}"\)' "$T/keep.json" |
              cut -d: -f1); do
    awk -v L="$line" 'NR == L {
            if (match($0, /-?[0-9][0-9.]*,?$/) && $0 !~ /"[0-9a-f]{16}"/) {
                v = substr($0, RSTART, RLENGTH); c = (v ~ /,$/) ? "," : ""
                sub(/,$/, "", v)
                $0 = substr($0, 1, RSTART - 1) (v + 1) c
            } else if ($0 ~ /true/) sub(/true/, "false")
            else if ($0 ~ /false/) sub(/false/, "true")
            else if (match($0, /[0-9a-f]",?$/)) {
                d = substr($0, RSTART, 1)
                $0 = substr($0, 1, RSTART - 1) (d == "0" ? "1" : "0") substr($0, RSTART + 1)
            }
        } { print }' "$T/keep.json" >"$M"
    if cmp -s "$M" "$T/keep.json"; then
        bad "the edit of line $line changed nothing: $(sed -n "${line}p" "$T/keep.json")"
        continue
    fi
    edits=$((edits + 1))
    refused "line $line edited: $(sed -n "${line}p" "$M" | tr -d ' ')"
done
echo "manifest edits tried: $edits, each on $(echo $READERS | wc -w) readers"
[ "$edits" -ge 25 ] && ok || bad "only $edits fields edited"

sed 's/"version": [0-9]*,/"version": 999,/' "$T/keep.json" >"$M"
refused '"version": 999'
# the checksum removed: refused (only a version 1 manifest has none)
grep -v '"manifest_xxh3"' "$T/keep.json" >"$M"
refused 'no checksum'
cp "$T/keep.json" "$M"
finish
