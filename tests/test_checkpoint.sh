#!/bin/sh
# Sharded training checkpoints (--save-dir, --resume):
#  - a run resumed at step 3 gives the param_hashes and losses of the run
#    that never stopped, byte for byte, in every ZeRO stage and precision,
#    with activation checkpointing and with compression (its residuals);
#  - a checkpoint loads into another stage and, in deterministic mode, onto
#    another number of ranks with the same global batch and micro-batch,
#    byte-identical to an uninterrupted run there; onto another
#    tensor-parallel size with the parameters hashing as saved;
#  - the bytes each rank writes equal the prediction;
#  - bad checkpoints (a missing, truncated or altered file, another model,
#    a newer format, a folder that is no checkpoint) are one line naming the
#    file, a non-zero exit, and leave every file as it was;
#  - a run killed in the middle of a save leaves the previous checkpoint as
#    `latest`, and resuming from it is exact.
. "$(dirname "$0")/testlib.sh"

MODEL="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 32 --warmup 2"
run() { n=$1; shift; sh "$HERE/mpirun.sh" "$n" "$ZS" train $MODEL --silent "$@" </dev/null; }

# arr FILE NAME FROM: the array NAME of a report from index FROM on, one line
arr() {
    sed -n "/^  \"$2\": \[/,/\]/p" "$1" | sed '1d;$d' | tr -d ' ,"' | tail -n "+$(($3 + 1))" |
        tr '\n' ' '
}
losses() { arr "$1" losses "$2"; }
tail_hashes() { arr "$1" param_hashes "$2"; }

# exact NAME N ARGS: 6 steps saved after 3 and 6, against a run resumed at 3
# in every stage (the save's stage is the first of STAGES)
exact() {
    name=$1 n=$2 stages=$3; shift 3
    rm -rf "$T/ck"
    first=${stages%% *}
    if ! run "$n" --stage "$first" --steps 6 --save-dir "$T/ck" --save-every 3 \
        --report "$T/full.json" "$@"; then
        bad "$name: the saving run failed"; return
    fi
    [ "$(cat "$T/ck/latest")" = global_step6 ] && [ -f "$T/ck/global_step3/manifest.json" ] &&
        ok || bad "$name: latest is not global_step6, or global_step3 is missing"
    for st in $stages; do
        if ! run "$n" --stage "$st" --steps 6 --resume "$T/ck/global_step3" \
            --report "$T/res.json" "$@"; then
            bad "$name: resume in stage $st failed"; continue
        fi
        [ "$(tail_hashes "$T/full.json" 3)" = "$(tail_hashes "$T/res.json" 0)" ] && ok ||
            bad "$name: stage $st resumed: hashes $(tail_hashes "$T/res.json" 0), uninterrupted $(tail_hashes "$T/full.json" 3)"
        [ "$(losses "$T/full.json" 3)" = "$(losses "$T/res.json" 0)" ] && ok ||
            bad "$name: stage $st resumed: losses differ"
        [ "$(key "$T/res.json" first_step)" = 3 ] && ok || bad "$name: first_step is not 3"
    done
}

exact "fp32" 2 "3 0 2"
exact "bf16" 2 "1 3" --precision bf16
# fp16 with dynamic loss scaling: the scaler's state travels too
exact "fp16" 2 "2 0" --precision fp16
exact "activation checkpointing" 2 "3" --checkpoint-activations every:1 --grad-accum 2
exact "compression" 2 "2" --compression int8
exact "one rank, sgd" 1 "0" --optimizer sgd

# the bytes written equal the prediction on every rank
# (the last exact run: one rank, two saves)
w=$(sed -n 's/^ *"tensor_bytes_written": \([0-9]*\),*$/\1/p' "$T/full.json")
p=$(sed -n 's/^ *"tensor_bytes_written_predicted": \([0-9]*\),*$/\1/p' "$T/full.json")
echo "checkpoint tensor bytes written: $w, predicted $p"
[ -n "$w" ] && [ "$w" -gt 0 ] && [ "$w" = "$p" ] && ok ||
    bad "tensor bytes written $w, predicted $p"
grep -q '"saves": 2' "$T/full.json" && ok || bad "the report does not count 2 saves"

# deterministic mode across N: saved on 2 ranks (micro-batch 4, grad-accum
# 2), resumed on 1 and 4 ranks with the same global batch of 16
rm -rf "$T/ck"
run 2 --deterministic --precision bf16 --stage 2 --micro-batch 4 --grad-accum 2 --steps 6 \
    --save-dir "$T/ck" --save-every 3 --report "$T/d2.json" || bad "deterministic save failed"
for layout in "1 3 4" "4 1 1"; do
    set -- $layout
    run "$1" --deterministic --precision bf16 --stage "$2" --micro-batch 4 --grad-accum "$3" \
        --steps 6 --report "$T/dn.json" || bad "deterministic run on $1 failed"
    # latest is global_step6 = --steps: resuming from it is refused
    run "$1" --deterministic --precision bf16 --stage "$2" --micro-batch 4 --grad-accum "$3" \
        --steps 6 --resume "$T/ck" 2>"$T/err" && bad "resume at the last step accepted"
    grep -q "saved after 6 steps and --steps is 6" "$T/err" && ok ||
        bad "resume past the end: no clear line: $(cat "$T/err")"
    run "$1" --deterministic --precision bf16 --stage "$2" --micro-batch 4 --grad-accum "$3" \
        --steps 6 --resume "$T/ck/global_step3" --report "$T/dr.json" ||
        bad "deterministic resume on $1 ranks failed"
    a=$(key "$T/dn.json" param_hash) b=$(key "$T/dr.json" param_hash) c=$(key "$T/d2.json" param_hash)
    [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ] && ok ||
        bad "deterministic on $1 ranks: resumed $b, uninterrupted $a, saved run $c"
done

# tensor parallelism: saved with --tp 2 on 4 ranks; loaded with --tp 1 and
# --tp 4, the parameters hash (in the tp = 1 order) as the saving run's did
# after step 3, and resumed on the same mesh the run is exact
rm -rf "$T/ck"
run 4 --tp 2 --stage 1 --steps 6 --save-dir "$T/ck" --save-every 3 --report "$T/tp.json" ||
    bad "tp 2 save failed"
want=$(arr "$T/tp.json" param_hashes 2 | cut -d' ' -f1)
for mesh in "4 --tp 2 --stage 3" "2 --tp 1 --stage 2" "4 --tp 4 --micro-batch 16 --stage 0"; do
    set -- $mesh
    n=$1; shift
    run "$n" "$@" --steps 6 --resume "$T/ck/global_step3" --report "$T/tr.json" ||
        { bad "tp: resume on $mesh failed"; continue; }
    got=$(key "$T/tr.json" resumed_param_hash)
    [ -n "$want" ] && [ "$got" = "$want" ] && ok ||
        bad "tp: loaded on $mesh: param_hash $got, the saving run had $want after step 3"
done
[ "$(tail_hashes "$T/tp.json" 3)" = "$(run 4 --tp 2 --stage 3 --steps 6 --resume "$T/ck/global_step3" \
    --report "$T/tr.json" && tail_hashes "$T/tr.json" 0)" ] && ok || bad "tp 2: resume not exact"

# --- bad checkpoints: one line naming the file, nothing changed ------------------
rm -rf "$T/ck"
run 2 --stage 1 --steps 4 --save-dir "$T/ck" --save-every 2 || bad "save for the error cases failed"
snapshot() { (cd "$T/ck" && find . -type f | sort | xargs md5sum); }
refused() { # NAME PATTERN ARGS...: refused with one line matching PATTERN
    name=$1 pat=$2; shift 2
    before=$(snapshot)
    if run 2 --stage 1 --steps 4 "$@" 2>"$T/err" >"$T/out"; then
        bad "$name: accepted"
    else
        [ "$(grep -c . "$T/err")" -ge 1 ] && grep -q -- "$pat" "$T/err" && ok ||
            bad "$name: expected \"$pat\", got: $(cat "$T/err")"
        [ "$(sort -u "$T/err" | grep -c .)" -eq 1 ] && ok ||
            bad "$name: more than one distinct line: $(cat "$T/err")"
    fi
    [ "$(snapshot)" = "$before" ] && ok || bad "$name: the checkpoint's files changed"
}
S2="$T/ck/global_step2"
cp "$S2/shard_tp0_dp00001.safetensors" "$T/keep"
rm "$S2/shard_tp0_dp00001.safetensors"
refused "missing file" "cannot read $S2/shard_tp0_dp00001.safetensors" --resume "$S2"
head -c 1000 "$T/keep" >"$S2/shard_tp0_dp00001.safetensors"
refused "truncated file" "shard_tp0_dp00001.safetensors: 1000 bytes, the manifest says" --resume "$S2"
# one byte altered, same size
cp "$T/keep" "$S2/shard_tp0_dp00001.safetensors"
size=$(wc -c <"$T/keep")
old=$(od -An -tu1 -j $((size - 5)) -N1 "$T/keep" | tr -d ' ')
[ "$old" = 65 ] && new=B || new=A
printf '%s' "$new" | dd of="$S2/shard_tp0_dp00001.safetensors" bs=1 seek=$((size - 5)) \
    conv=notrunc 2>/dev/null
cmp -s "$T/keep" "$S2/shard_tp0_dp00001.safetensors" && bad "the byte was not altered"
refused "altered byte" "shard_tp0_dp00001.safetensors: checksum mismatch" --resume "$S2"
cp "$T/keep" "$S2/shard_tp0_dp00001.safetensors"
refused "another model" "the checkpoint's model has n_layer 2, this run's 3" --resume "$T/ck" --layers 3
refused "another precision" "trained in fp32, this run asks for bf16" --resume "$T/ck" --precision bf16
refused "another global batch" "global batch of 16 samples, this run's is 32" --resume "$T/ck" --micro-batch 16
# a token file where the checkpoint had synthetic data (any file: refused
# before it is read)
printf 'x' >"$T/tokens.bin"
refused "other data" "trained on synthetic data, this run on the tokens of $T/tokens.bin" \
    --resume "$T/ck" --data "$T/tokens.bin"
sed 's/"version": [0-9]*,/"version": 7,/' "$S2/manifest.json" >"$T/m" && cp "$S2/manifest.json" "$T/mkeep" &&
    cp "$T/m" "$S2/manifest.json"
refused "newer format" "format version 7 is newer than this zerosim reads (2)" --resume "$S2"
cp "$T/mkeep" "$S2/manifest.json"
echo '{"format": "zerosim-checkpoint", "version": 1' >"$S2/manifest.json"
refused "malformed manifest" "$S2/manifest.json: not valid JSON" --resume "$S2"
cp "$T/mkeep" "$S2/manifest.json"
mkdir -p "$T/ck/empty"
refused "not a checkpoint" "$T/ck/empty is not a zerosim checkpoint" --resume "$T/ck/empty"
refused "no such folder" "--resume $T/nothing: No such file" --resume "$T/nothing"
# and the intact checkpoint still loads and trains on
run 2 --stage 1 --steps 4 --resume "$S2" && ok || bad "the restored checkpoint does not load"
# a --save-dir that cannot be made: refused before training
run 2 --steps 2 --save-dir "$T/no/such/dir" 2>"$T/err" && bad "save into a missing parent accepted" ||
    { grep -q "parent folder $T/no/such does not exist" "$T/err" && ok || bad "save-dir: $(cat "$T/err")"; }

# --- killed in the middle of a save ----------------------------------------------------
rm -rf "$T/ck"
: >"$T/log"
run 2 --stage 3 --steps 6 --report "$T/full.json" || bad "uninterrupted run failed"
ZEROSIM_TEST_STALL_AT=save:4 sh "$HERE/mpirun.sh" 2 "$ZS" train $MODEL --quiet --stage 3 \
    --steps 6 --save-dir "$T/ck" --save-every 2 </dev/null >"$T/log" 2>&1 &
mp=$!
i=0
while ! grep -q "test hook:.*stalls" "$T/log" && kill -0 "$mp" 2>/dev/null && [ $i -lt 300 ]; do
    sleep 0.1; i=$((i + 1))
done
grep -q "test hook:.*stalls after writing .*global_step4.tmp" "$T/log" && ok ||
    bad "no rank stalled in the save: $(cat "$T/log")"
kids=$(pgrep -P "$mp" | tr '\n' ' ')
# shellcheck disable=SC2086 # kids is a list
kill -KILL $kids 2>/dev/null
wait "$mp"
[ "$(cat "$T/ck/latest")" = global_step2 ] && ok || bad "latest moved: $(cat "$T/ck/latest")"
[ ! -e "$T/ck/global_step4" ] && ok || bad "a partial global_step4 was published"
run 2 --stage 3 --steps 6 --resume "$T/ck" --save-dir "$T/ck" --report "$T/res.json" ||
    bad "resume after the killed save failed"
[ "$(key "$T/full.json" param_hash)" = "$(key "$T/res.json" param_hash)" ] && ok ||
    bad "resumed after the killed save: $(key "$T/res.json" param_hash), uninterrupted $(key "$T/full.json" param_hash)"
# the next save cleaned up the leftover temporary folder of the killed one
[ "$(cat "$T/ck/latest")" = global_step6 ] && [ ! -e "$T/ck/.global_step4.tmp" ] && ok ||
    bad "after the resumed run: latest $(cat "$T/ck/latest"), leftovers: $(ls -A "$T/ck")"

finish
