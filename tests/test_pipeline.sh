#!/bin/sh
# Pipeline parallelism (--pp): a run with P stages gives byte-identical
# parameters after every step to the same run with P = 1 on the same
# data-parallel ranks (param_hashes of the whole model, fp32 and bf16,
# GPipe and 1F1B, ZeRO stages 0-2, P = 2 and 4, one and two data-parallel
# ranks); the 1F1B warm-up of each stage, counted from the step program's
# ops, is Megatron-LM's min(P - rank - 1, m); and the combinations the
# pipeline does not support are refused with one line.
. "$(dirname "$0")/testlib.sh"

M="--layers 4 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 4 --steps 3 --warmup 0 --quiet"

# run NAME N ARGS...: train on N ranks, report in $T/NAME.json
run() {
    name=$1 n=$2
    shift 2
    if ! sh "$HERE/mpirun.sh" "$n" "$ZS" train $M "$@" --report "$T/$name.json" \
         </dev/null >"$T/$name.log" 2>&1; then
        bad "$name: zerosim train $* on $n ranks failed"
        cat "$T/$name.log"
        return 1
    fi
    hashes "$T/$name.json" >"$T/$name.h"
}

# same NAME REF: NAME's per-step hashes equal REF's
same() {
    if [ -s "$T/$2.h" ] && grep -q '[0-9a-f]\{16\}' "$T/$2.h" && cmp -s "$T/$1.h" "$T/$2.h"; then
        ok
    else
        bad "$1: per-step hashes $(cat "$T/$1.h") differ from $2's $(cat "$T/$2.h")"
    fi
}

# the references, without a pipeline: one and two data-parallel ranks
run ref1 1
run ref1bf 1 --precision bf16
run ref2 2
# gradient clipping is active in these runs (grad_norm above 1.0 at the
# first step), so the global norm must be summed in the same order too
awk '/"grad_norms"/ { getline; exit !($1 + 0 > 1.0) }' "$T/ref1.json" && ok ||
    bad "the reference run does not clip: the test would not check the norm"

run p2-gpipe 2 --pp 2 --pp-schedule gpipe && same p2-gpipe ref1
run p2-1f1b-s1 2 --pp 2 --pp-schedule 1f1b --stage 1 && same p2-1f1b-s1 ref1
run p2-bf-gpipe-s2 2 --pp 2 --pp-schedule gpipe --stage 2 --precision bf16 && same p2-bf-gpipe-s2 ref1bf
run p2-bf-1f1b 2 --pp 2 --precision bf16 && same p2-bf-1f1b ref1bf
run p4-1f1b-s1 4 --pp 4 --stage 1 && same p4-1f1b-s1 ref1
run p4-bf-gpipe-s2 4 --pp 4 --pp-schedule gpipe --stage 2 --precision bf16 && same p4-bf-gpipe-s2 ref1bf
run p2d2-1f1b-s2 4 --pp 2 --stage 2 && same p2d2-1f1b-s2 ref2

# the warm-up of each stage, from the program's ops: F = the micro-
# batches forwarded before the stage's first backward; 1F1B's steady state
# starts with one forward, so its warm-up is F - 1 (when F < m), GPipe's F
forwards() { # P m schedule: F of each stage
    "$ZS" train --layers 4 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 \
        --grad-accum "$2" --pp "$1" --pp-schedule "$3" --print-program --world-size "$1" |
        awk '/^# step program/ { if (st++) printf "%d ", n; n = 0; seen = 0; split("", mb) }
             $1 ~ /^[0-9]+$/ && $5 == "backward" { seen = 1 }
             $1 ~ /^[0-9]+$/ && $5 == "forward" && !seen && !($4 in mb) { mb[$4] = 1; n++ }
             END { printf "%d\n", n }'
}
# P = 4, m = 6: warm-ups min(P - r - 1, m) = 3 2 1 0
got=$(forwards 4 6 1f1b)
[ "$got" = "4 3 2 1" ] && ok || bad "1F1B at P = 4, m = 6: $got forwards first, expected 4 3 2 1 (warm-up 3 2 1 0)"
got=$(forwards 2 4 1f1b)
[ "$got" = "2 1" ] && ok || bad "1F1B at P = 2, m = 4: $got forwards first, expected 2 1 (warm-up 1 0)"
# m = 2 < P - 1: the first stages forward all m first (min(P - r - 1, m) = m)
got=$(forwards 4 2 1f1b)
[ "$got" = "2 2 2 1" ] && ok || bad "1F1B at P = 4, m = 2: $got forwards first, expected 2 2 2 1"
got=$(forwards 4 4 gpipe)
[ "$got" = "4 4 4 4" ] && ok || bad "GPipe at P = 4, m = 4: $got forwards first, expected 4 4 4 4"

# refusals: one line each, non-zero exit (checked by the configuration
# alone, --print-program --world-size N, but the last, which needs a run)
refuse() { # WHAT N ARGS...
    what=$1 n=$2
    shift 2
    if [ "$n" -eq 0 ]; then
        set -- "$ZS" train $M "$@"
    else
        set -- sh "$HERE/mpirun.sh" "$n" "$ZS" train $M "$@"
    fi
    if "$@" </dev/null >"$T/refuse.log" 2>&1; then
        bad "$what: accepted"
    elif grep -q "$what" "$T/refuse.log"; then
        ok
    else
        bad "$what: not in the error"; cat "$T/refuse.log"
    fi
}
W="--print-program --world-size 2"
refuse "more pipeline stages than the model's 4 blocks" 0 --pp 5 --print-program --world-size 5
refuse "ZeRO stage 3 with --pp 2 is not supported" 0 --pp 2 --stage 3 $W
refuse "pp-schedule must be gpipe or 1f1b" 0 --pp 2 --pp-schedule zigzag $W
refuse "use --model gpt or --pp 1" 0 --pp 2 --model mlp $W
refuse "(3D) is not supported yet" 0 --pp 2 --tp 2 --print-program --world-size 4
refuse "does not support checkpoints" 2 --pp 2 --save-dir "$T/ck"
[ ! -e "$T/ck" ] && ok || bad "a refused --pp run left $T/ck behind"

finish
