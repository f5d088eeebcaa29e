#!/bin/sh
# Mixture of experts (docs/moe.md): for a MoE GPT (4 experts in every other
# block, top-1 and top-2, a capacity that drops tokens), ZeRO stages 0-3 give
# byte-identical parameters after every step (top-1 on 4 ranks in fp32,
# top-2 on 2 ranks in bf16); the model's expert parallelism against ep = 1
# (tests/check_ep.c); bad MoE options are refused with one line.
. "$(dirname "$0")/testlib.sh"

MODEL="--layers 2 --hidden 16 --heads 2 --seq 8 --vocab 17 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0 --lr 1e-2 --grad-clip 0.5"
# (top-k, capacity factor, N, precision): each mpirun costs seconds, so the
# sweep is a diagonal; ZS_TEST_MOE="k:F:N:prec ..." widens it
for cfg in ${ZS_TEST_MOE:-1:1.0:4:fp32 2:0.5:2:bf16}; do
    IFS=: read -r k f n prec <<EOC
$cfg
EOC
    MOE="--moe-experts 4 --moe-every 2 --moe-top-k $k --capacity-factor $f --min-capacity 1 --aux-loss-coeff 0.05"
    ref=""
    for stage in 0 1 2 3; do
        out="$T/m-$k-$n-$prec-$stage.json"
        if ! sh "$HERE/mpirun.sh" "$n" "$ZS" train $MODEL $MOE --precision "$prec" \
             --stage "$stage" --quiet --report "$out" >"$T/log" 2>&1 </dev/null; then
            bad "top-$k N=$n $prec stage $stage failed"; cat "$T/log"; continue
        fi
        h=$(hashes "$out")
        [ -n "$h" ] || { bad "top-$k N=$n $prec stage $stage: no param_hashes"; continue; }
        if [ -z "$ref" ]; then ref=$h; ok; continue; fi
        [ "$h" = "$ref" ] && ok || bad "top-$k N=$n $prec stage $stage differs from stage 0: $h vs $ref"
    done
    first=$(echo "$ref" | cut -d, -f1 | tr -d '"[:')
    last=$(echo "$ref" | tr -d ']"' | awk -F, '{print $NF}')
    [ "$first" != "$last" ] && ok || bad "top-$k N=$n $prec: parameters did not change"
done

# expert parallelism in the model (tests/check_ep.c): experts dealt over
# 2 and 4 ranks with all-to-all dispatch and combine, byte-identical to the
# model with every expert on every rank
for n in 2 4; do
    sh "$HERE/mpirun.sh" "$n" ./tests/check_ep >"$T/ep$n" 2>&1 && ok ||
        { bad "check_ep at $n ranks"; cat "$T/ep$n"; }
done

# bad input: one line naming the option, non-zero exit
refuse() { # expected-text args...
    want=$1; shift
    if "$ZS" train --steps 1 --quiet "$@" >"$T/o" 2>&1 </dev/null; then
        bad "accepted: $*"; return
    fi
    grep -q -- "$want" "$T/o" && [ "$(wc -l <"$T/o")" -eq 1 ] && ok || { bad "$*: $(cat "$T/o")"; }
}
refuse "moe-top-k" --moe-experts 4 --moe-top-k 3
refuse "moe-every" --moe-experts 4 --layers 2 --moe-every 3
refuse "moe-experts" --moe-experts 1
refuse "capacity-factor" --moe-experts 4 --capacity-factor 0
refuse "checkpointing" --moe-experts 4 --checkpoint-activations every:1
refuse "needs a mixture of experts" --ep 2
refuse "GPT" --model mlp --moe-experts 4
refuse "not implemented yet" --moe-experts 4 --ep 2
finish
