#!/bin/sh
# Activation checkpointing: parameters byte-identical with and without it in
# every stage and precision; activation, checkpoint and model-state bytes as
# predicted (stage 3 gathers included);
# on a 16-layer GPT, sqrt checkpointing lowers the peak of activations plus
# checkpoints at least 3x; the DeepSpeed-style config section works.
. "$(dirname "$0")/testlib.sh"
# peak bytes and prediction of a category on rank 0
mem() { awk -v c="$2" '$1 == 0 && $2 == c {print $3, $4}' "$1/memory.csv"; }

MODEL="--layers 5 --hidden 25 --heads 5 --seq 12 --vocab 31 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0 --lr 1e-2"
# by default: at N = 2 fp32 in every stage, bf16 in stages 0 and 2, fp16
# in 1 and 3; bf16 at N = 3; checkpointing off, sqrt and every:2 (every:1
# too, every precision in every stage at both N, with ZS_TEST_FULL=1: the
# whole sweep took 200 s of make check's time)
for n in 2 3; do
    precs="fp32 bf16 fp16"
    [ "$n" = 3 ] && [ -z "${ZS_TEST_FULL:-}" ] && precs=bf16
    cks="off sqrt every:2${ZS_TEST_FULL:+ every:1}"
    for prec in $precs; do
        for stage in 0 1 2 3; do
            if [ -z "${ZS_TEST_FULL:-}" ] && [ "$n" = 2 ]; then
                case $prec-$stage in bf16-[13] | fp16-[02]) continue ;; esac
            fi
            ref=""
            for ck in $cks; do
                d="$T/$n-$prec-$stage-$ck"
                if ! sh "$HERE/mpirun.sh" "$n" "$ZS" train $MODEL --precision "$prec" --stage "$stage" \
                     --checkpoint-activations "$ck" --quiet --report "$d.json" --csv "$d" >"$T/log" 2>&1; then
                    bad "N=$n $prec stage $stage $ck failed"; cat "$T/log"; continue
                fi
                h=$(hashes "$d.json")
                [ -z "$ref" ] && ref=$h
                [ "$h" = "$ref" ] && ok || bad "N=$n $prec stage $stage $ck: $h vs off $ref"
                for c in activations checkpoints params grads optimizer; do
                    set -- $(mem "$d" $c)
                    [ "$#" -eq 2 ] && [ "$1" = "$2" ] && ok || bad "N=$n $prec stage $stage $ck $c: $*"
                done
                awk '$3 == "all" && ($2 == "reduce_scatter" || $2 == "allgather") && $5 != $6 {bad=1}
                     END {exit bad}' "$d/comm.csv" && ok || bad "N=$n stage $stage $ck: traffic differs from the prediction"
            done
        done
    done
done

# 16 layers: activations + checkpoints, off against sqrt
for ck in off sqrt; do
    "$ZS" train --layers 16 --steps 2 --quiet --checkpoint-activations $ck --csv "$T/l16-$ck" ||
        bad "16 layers $ck failed"
done
a=$(awk '$1 == 0 && ($2 == "activations" || $2 == "checkpoints") {s += $3} END {print s}' "$T/l16-off/memory.csv")
b=$(awk '$1 == 0 && ($2 == "activations" || $2 == "checkpoints") {s += $3} END {print s}' "$T/l16-sqrt/memory.csv")
echo "16 layers: activations+checkpoints $a bytes without, $b with sqrt checkpointing"
awk -v a="$a" -v b="$b" 'BEGIN {exit !(b > 0 && a / b >= 3)}' && ok || bad "reduction $a / $b below 3x"

# the config section: number_checkpoints 3 of 6 blocks = every:2
printf '{"activation_checkpointing": {"number_checkpoints": 3, "partition_activations": false}}\n' >"$T/ck.json"
"$ZS" train --layers 6 --steps 2 --quiet --config "$T/ck.json" --csv "$T/cfg" || bad "config run failed"
"$ZS" train --layers 6 --steps 2 --quiet --checkpoint-activations every:2 --csv "$T/cli" || bad "cli run failed"
[ "$(mem "$T/cfg" checkpoints)" = "$(mem "$T/cli" checkpoints)" ] && ok || bad "number_checkpoints 3 differs from every:2"
printf '{"activation_checkpointing": {"cpu_checkpointing": true}}\n' >"$T/cpu.json"
"$ZS" train --steps 1 --quiet --config "$T/cpu.json" 2>"$T/err" && bad "cpu_checkpointing true accepted" ||
    { grep -q "cpu_checkpointing" "$T/err" && ok || bad "no message naming cpu_checkpointing"; }
"$ZS" train --steps 1 --quiet --checkpoint-activations every:x 2>"$T/err" && bad "every:x accepted" ||
    { grep -q "every:K" "$T/err" && ok || bad "no message for every:x"; }
"$ZS" train --model mlp --steps 1 --quiet --checkpoint-activations sqrt 2>"$T/err" && bad "MLP checkpointing accepted" ||
    { grep -q "GPT only" "$T/err" && ok || bad "no message for MLP checkpointing"; }

finish
