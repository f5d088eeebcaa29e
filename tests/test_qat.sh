#!/bin/sh
# Quantization-aware training (--qat int8|nf4): ZeRO stages 0-3 give
# byte-identical parameters after every step (fp32 and bf16, with
# activation checkpointing too); QAT changes the arithmetic (other hashes
# than without it, and int8 other than nf4); the fp32 staging it needs is
# accounted and predicted byte for byte; bad combinations are refused.
. "$(dirname "$0")/testlib.sh"

run() { sh "$HERE/mpirun.sh" "$@" </dev/null; }
MODEL="--layers 2 --hidden 32 --heads 4 --seq 12 --vocab 31 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0 --lr 1e-2"

same_across_stages() { # label n "stages" args...: every stage's param_hashes equal the first's
    label=$1 n=$2 stages=$3; shift 3
    ref=""
    for stage in $stages; do
        out="$T/$label-$stage.json"
        if ! run "$n" "$ZS" train $MODEL "$@" --stage $stage --quiet --report "$out" >"$T/log" 2>&1; then
            bad "$label stage $stage failed"; cat "$T/log"; continue
        fi
        h=$(hashes "$out")
        [ -n "$h" ] || { bad "$label stage $stage: no param_hashes"; continue; }
        if [ -z "$ref" ]; then ref=$h; ok; continue; fi
        [ "$h" = "$ref" ] && ok || bad "$label stage $stage differs from stage 0: $h vs $ref"
    done
    eval "ref_$label=\$ref"
}

same_across_stages nf4 2 "0 1 2 3" --qat nf4
same_across_stages int8bf16 3 "0 3" --qat int8 --precision bf16
run 2 "$ZS" train $MODEL --stage 0 --quiet --report "$T/none.json" --csv "$T/acc-none" >"$T/log" 2>&1 ||
    bad "the run without QAT failed"
ref_none=$(hashes "$T/none.json")

# with activation checkpointing (recompute sees the same fake weights)
run 2 "$ZS" train $MODEL --qat nf4 --stage 3 --checkpoint-activations every:1 --quiet \
    --report "$T/ck.json" >"$T/log" 2>&1 || { bad "checkpointing run failed"; cat "$T/log"; }
[ "$(hashes "$T/ck.json")" = "$ref_nf4" ] && ok || bad "nf4 with activation checkpointing differs"

# QAT changes the arithmetic; int8 and nf4 differ
[ -n "$ref_nf4" ] && [ "$ref_nf4" != "$ref_none" ] && ok || bad "--qat nf4 gave the hashes of no QAT"
run 2 "$ZS" train $MODEL --qat int8 --stage 0 --quiet --report "$T/i8.json" >"$T/log" 2>&1 ||
    bad "int8 fp32 failed"
h=$(hashes "$T/i8.json")
[ -n "$h" ] && [ "$h" != "$ref_nf4" ] && [ "$h" != "$ref_none" ] && ok || bad "--qat int8 equals another run"
# the JSON key does what the option does
echo '{"zerosim": {"qat": "nf4"}}' >"$T/qat.json"
run 2 "$ZS" train $MODEL --config "$T/qat.json" --stage 0 --quiet --report "$T/j.json" >"$T/log" 2>&1 ||
    bad "zerosim.qat failed"
[ "$(hashes "$T/j.json")" = "$ref_nf4" ] && ok || bad "zerosim.qat nf4 differs from --qat nf4"

# accounting: the fp32 staging of one unit that QAT needs in fp32 runs is
# in workspace, measured = predicted on every rank, every stage
for stage in 0 2; do
    d="$T/acc-$stage"
    run 2 "$ZS" train $MODEL --qat nf4 --stage $stage --quiet --csv "$d" >"$T/log" 2>&1 ||
        { bad "accounting run failed"; cat "$T/log"; continue; }
    awk '$1 !~ /^#/ && $2 ~ /^(params|grads|optimizer|comm_buffers|workspace)$/ {
             if ($3 != $4) { printf "FAIL: rank %s %s: measured %s predicted %s\n", $1, $2, $3, $4; bad++ }
             n++ }
         END { exit (bad > 0 || n == 0) }' "$d/memory.csv" && ok || bad "stage $stage: QAT's bytes not as predicted"
done
ws_q=$(awk '$1 == 0 && $2 == "workspace" {print $3}' "$T/acc-0/memory.csv")
ws_n=$(awk '$1 == 0 && $2 == "workspace" {print $3}' "$T/acc-none/memory.csv")
[ -n "$ws_q" ] && [ -n "$ws_n" ] && [ "$ws_q" -gt "$ws_n" ] && ok || bad "QAT's staging not accounted: $ws_q vs $ws_n"

# refused: the zero-point format, tensor parallelism, a bad JSON value
refuse -n 2 -m "--qat takes none, int8 or nf4" train $MODEL --qat int8-zp --quiet
refuse -n 2 -m "works with --tp 1" train $MODEL --qat nf4 --tp 2 --quiet
echo '{"zerosim": {"qat": "int4"}}' >"$T/bad.json"
refuse -n 2 -m 'qat' train $MODEL --config "$T/bad.json" --quiet

finish
