#!/bin/sh
# Checkpoints with expert parallelism (docs/moe.md): in --ep 1's layout
# (4 ranks in bf16 without deterministic mode) the engine's arrays are
# --ep 1's, so a checkpoint saved with --ep 2 after 2 of 4 steps resumes
# with --ep 2, --ep 4 or --ep 1 to the parameter hashes and losses of the
# run that never stopped, byte for byte; in DeepSpeed's layout saving is
# refused with one line.
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
# DeepSpeed's layout (deterministic mode): one line
if run 4 --ep 2 --deterministic --steps 1 --save-dir "$T/ck2" >"$T/out" 2>"$T/err"; then
    bad "a save in DeepSpeed's layout was accepted"
elif [ "$(grep -c "in DeepSpeed's layout .* does not support checkpoints" "$T/err")" -ge 1 ] &&
    [ "$(grep -c "does not support checkpoints" "$T/err")" -le 4 ]; then ok
else bad "a save in DeepSpeed's layout: $(cat "$T/err")"; fi
finish
