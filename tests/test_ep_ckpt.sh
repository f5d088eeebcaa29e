#!/bin/sh
# Checkpoints with expert parallelism (docs/moe.md): in --ep 1's layout
# (4 ranks in bf16 without deterministic mode) the engine's arrays are
# --ep 1's, so a checkpoint saved with --ep 2 after 2 of 4 steps resumes
# with --ep 2, --ep 4 or --ep 1 to the parameter hashes and losses of the
# run that never stopped, byte for byte; in DeepSpeed's layout (below) a
# checkpoint resumes in that layout on the same ranks and --ep.
. "$(dirname "$0")/testlib.sh"

MODEL="--layers 4 --hidden 16 --heads 2 --seq 8 --vocab 17 --micro-batch 2 --grad-accum 2 --warmup 0 --lr 1e-2 --moe-experts 4 --moe-every 2 --moe-top-k 2 --capacity-factor 0.5 --min-capacity 1 --precision bf16 --stage 1"
run() { n=$1; shift; sh "$HERE/mpirun.sh" "$n" "$ZS" train $MODEL --quiet "$@" </dev/null; }
arr() { sed -n "/^  \"$2\": \[/,/\]/p" "$1" | sed '1d;$d' | tr -d ' ,"' | tail -n "+$(($3 + 1))" | tr '\n' ' '; }

if run 4 --ep 2 --steps 4 --save-dir "$T/ck" --save-every 2 --report "$T/full.json" \
    >"$T/log" 2>&1; then
    grep -q "expert parallelism --ep 2: --ep 1's layout" "$T/log" && ok ||
        bad "the saving run did not take --ep 1's layout: $(cat "$T/log")"
    want="$(arr "$T/full.json" param_hashes 2)|$(arr "$T/full.json" losses 2)"
    for ep in 2 4 1; do
        if run 4 --ep "$ep" --steps 4 --resume "$T/ck/global_step2" --report "$T/r$ep.json" \
            >"$T/log" 2>&1; then
            got="$(arr "$T/r$ep.json" param_hashes 0)|$(arr "$T/r$ep.json" losses 0)"
            [ -n "$(arr "$T/full.json" param_hashes 2)" ] && [ "$got" = "$want" ] && ok ||
                bad "resumed with --ep $ep: '$got', the uninterrupted run's '$want'"
        else
            bad "resume with --ep $ep failed"; cat "$T/log"
        fi
    done
else
    bad "the runs to save failed"; cat "$T/log"
fi
# DeepSpeed's layout: each rank's file holds its shard of the expert
# store's states; a save after 2 of 4 steps resumes at any stage, on the
# same ranks and --ep, to the hashes and losses of the run that never
# stopped (deterministic mode in fp32 saved at stage 2; --ep-layout
# deepspeed in bf16 saved at stage 1: the master apart from the working
# copy). A resume in the other layout, or with another --ep, is refused
# with one line.
for c in "det:--deterministic_--stage_2:0_3" "ds:--ep-layout_deepspeed:3"; do
    name=${c%%:*} rest=${c#*:}
    opts=$(echo "${rest%%:*}" | tr _ ' ') stages=$(echo "${rest#*:}" | tr _ ' ')
    if run 4 --ep 2 $opts --steps 4 --save-dir "$T/$name" --save-every 2 \
        --report "$T/$name.json" >"$T/log" 2>&1; then
        grep -q "expert parallelism --ep 2: DeepSpeed's layout" "$T/log" && ok ||
            bad "$name: the saving run did not take DeepSpeed's layout: $(cat "$T/log")"
        want="$(arr "$T/$name.json" param_hashes 2)|$(arr "$T/$name.json" losses 2)"
        for st in $stages; do
            if run 4 --ep 2 $opts --stage "$st" --steps 4 --resume "$T/$name/global_step2" \
                --report "$T/$name.r$st.json" >"$T/log" 2>&1; then
                got="$(arr "$T/$name.r$st.json" param_hashes 0)|$(arr "$T/$name.r$st.json" losses 0)"
                [ -n "$(arr "$T/$name.json" param_hashes 2)" ] && [ "$got" = "$want" ] && ok ||
                    bad "$name: resumed at stage $st: '$got', the uninterrupted run's '$want'"
            else
                bad "$name: resume at stage $st failed"; cat "$T/log"
            fi
        done
    else
        bad "$name: the run to save failed"; cat "$T/log"
    fi
done
# refused: DeepSpeed's layout's checkpoint resumed in --ep 1's layout or with
# another --ep, and --ep 1's checkpoint resumed in DeepSpeed's layout
refuse -n 4 -m "saved in DeepSpeed's layout for --ep 2 on 4" train $MODEL --quiet --steps 4 \
    --ep 2 --resume "$T/det/global_step2"
refuse -n 4 -m "resume with --ep 2 on 4 data-parallel ranks" train $MODEL --quiet --steps 4 \
    --ep 4 --deterministic --resume "$T/det/global_step2"
refuse -n 4 -m "saved in --ep 1's layout" train $MODEL --quiet --steps 4 \
    --ep 2 --deterministic --resume "$T/ck/global_step2"
# a save from before the manifest recorded the experts (no moe_* keys in
# its model; format version 1, without the manifest's checksum) still
# resumes; a checkpoint of another mixture is refused by name; and eval
# reads dense models' parameters only (one line)
cp -r "$T/ck/global_step2" "$T/old"
sed -i '/"moe_e/d; /"manifest_xxh3"/d; s/"version": [0-9]*,/"version": 1,/; s/\("vocab": [0-9]*\),$/\1/' \
    "$T/old/manifest.json"
if run 4 --ep 2 --steps 4 --resume "$T/old" --report "$T/old.json" >"$T/log" 2>&1; then
    got="$(arr "$T/old.json" param_hashes 0)"
    [ -n "$got" ] && [ "$got" = "$(arr "$T/full.json" param_hashes 2)" ] && ok ||
        bad "a save without the moe keys resumed to '$got'"
else
    bad "a save without the moe keys was refused: $(tail -2 "$T/log")"
fi
refuse -n 4 -m "the checkpoint's model has moe_experts 4, this run's 8" train $MODEL --quiet --steps 4 \
    --ep 2 --moe-experts 8 --resume "$T/ck/global_step2"
if "$ZS" eval --from "$T/ck/global_step2" >"$T/out" 2>"$T/err"; then bad "eval read a MoE checkpoint"
else [ "$(wc -l < "$T/err")" = 1 ] && grep -q "holds a mixture of experts" "$T/err" && ok ||
    bad "eval of a MoE checkpoint: $(cat "$T/err")"; fi
finish
