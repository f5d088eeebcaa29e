#!/bin/sh
# Context parallelism with partitioned activation checkpoints (--cp C with
# activation_checkpointing.partition_activations and --tp P): each TP rank
# keeps 1/P of its CP chunk's checkpointed block inputs (B x T/C x E floats
# per checkpoint) and the TP group all-gathers a segment's input before its
# recompute, as without --cp. The parameters are byte-identical to the same
# --cp run with whole checkpoints; the checkpoint bytes are
# (nseg - 1) X / P + X in place of (nseg - 1) X (X = 4 B (T/C) E, one
# whole checkpoint of the chunk), counted here by hand; the all-gathers add
# (nseg - 2) calls per micro-batch of (P - 1) / P X each; measured =
# predicted, plan = run, phantom = real. Then sequence parallelism within
# each CP chunk (rule cp+sp lifted). Full tier only (4 ranks, 30 s here).
. "$(dirname "$0")/testlib.sh"

printf '{"activation_checkpointing": {"partition_activations": true}}\n' >"$T/pa.json"
GEOM="--layers 6 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 2"
M="$GEOM --steps 3 --warmup 0 --lr 1e-2 --quiet"

# case: N ranks, cp, tp, checkpointing, stage, model options (GPT by default)
cpa_case() {
    n=$1 cp=$2 tp=$3 ck=$4 stage=$5
    shift 5
    name="n$n-cp$cp-tp$tp-$(echo "$ck" | tr -d :)-s$stage$(echo "$*" | tr -d ' -')"
    zs_run "$name-off" "$n" $M "$@" --cp "$cp" --tp "$tp" --stage "$stage" \
        --checkpoint-activations "$ck" || return
    zs_run "$name-on" "$n" $M "$@" --cp "$cp" --tp "$tp" --stage "$stage" \
        --checkpoint-activations "$ck" --config "$T/pa.json" || return
    h0=$(key "$T/$name-off.json" param_hash) h1=$(key "$T/$name-on.json" param_hash)
    [ -n "$h0" ] && [ "$h0" = "$h1" ] && ok || bad "$name: param_hash $h1, whole checkpoints $h0"
    measured_is_predicted "$name partitioned" "$T/$name-on"
    # by hand: the segments of every:K over 6 blocks, X = 4 B (T/C) E bytes
    K=${ck#every:}
    nseg=$(((6 + K - 1) / K)) X=$((4 * 2 * (16 / cp) * 32))
    c0=$(rank0_bytes "$T/$name-off" checkpoints) c1=$(rank0_bytes "$T/$name-on" checkpoints)
    [ "$c0" = $(((nseg - 1) * X)) ] && [ "$c1" = $(((nseg - 1) * X / tp + X)) ] && ok ||
        bad "$name: checkpoint bytes $c1 partitioned, $c0 whole; by hand $(((nseg - 1) * X / tp + X)), $(((nseg - 1) * X))"
    set -- $(rank0_allgather "$T/$name-off") $(rank0_allgather "$T/$name-on")
    g=$((3 * 2 * (nseg - 2))) # steps x grad-accum x gathers per micro-batch
    [ "$3" = $(($1 + g)) ] && awk -v a="$2" -v b="$4" -v g="$g" -v X="$X" -v p="$tp" \
        'BEGIN { exit !(b - a == g * X * (p - 1) / p) }' && ok ||
        bad "$name: all-gathers $1 calls $2 bytes whole, $3 calls $4 bytes partitioned (+$g gathers of $X bytes)"
}

# the GPT on 4 ranks (--cp 2 --tp 2), every block a segment (4 gathers per
# micro-batch), its plan and its phantom run
cpa_case 4 2 2 every:1 1
"$ZS" plan --arch gpt $GEOM --dp 1 --cp 2 --tp 2 --stage 1 --checkpoint-activations every:1 \
    --config "$T/pa.json" --json >"$T/plan.json" &&
    plan_is_run "plan, cp x partitioned" "$T/plan.json" "$T/n4-cp2-tp2-every1-s1-on" ||
    bad "the plan of cp x partitioned checkpoints failed"
phantom_same n4-cp2-tp2-every1-s1-on 4 --cp 2 --tp 2 --stage 1 --checkpoint-activations every:1 \
    --config "$T/pa.json"

# the start-up line of keys of no effect does not name it with --cp 2 --tp 2
"$ZS" train --phantom --world-size 4 $GEOM --steps 1 --cp 2 --tp 2 --checkpoint-activations every:1 \
    --config "$T/pa.json" >"$T/cp2tp2.log" 2>&1 || bad "--cp 2 --tp 2 phantom with partition_activations failed"
grep -q "^zerosim" "$T/cp2tp2.log" && ! grep "no effect" "$T/cp2tp2.log" | grep -q partition_activations &&
    ok || bad "--cp 2 --tp 2: partition_activations listed as of no effect (or no start-up lines)"

# sequence parallelism within each CP chunk (--cp 2 --tp 2 --sequence-parallel):
# each rank holds T/(cp tp) positions of its chunk outside the tensor-
# parallel regions. Parameters within 1e-5 of the same run without
# --sequence-parallel (the sums of the row-parallel layers are reduce-
# scatters then: another order); losses as printed the same; the
# activations by Megatron's closed form with T/cp positions (the ring's
# statistics in place of T x T); measured = predicted; phantom = real;
# plan = run
SPG="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 2"
sp_case() {
    name=$1
    shift
    zs_run "$name-tp" 4 $SPG --steps 3 --warmup 0 --quiet "$@" --export "$T/$name-tp.safetensors" ||
        return 1
    zs_run "$name-sp" 4 $SPG --steps 3 --warmup 0 --quiet "$@" --sequence-parallel \
        --export "$T/$name-sp.safetensors" || return 1
    "$ZS" compare "$T/$name-tp.safetensors" "$T/$name-sp.safetensors" --atol 1e-5 --rtol 0 \
        >"$T/$name.cmp" && ok || bad "$name: --sequence-parallel's parameters differ by more than 1e-5"
    l0=$(sed -n '/"losses"/,/\]/p' "$T/$name-tp.json" | tr -d ' \n')
    l1=$(sed -n '/"losses"/,/\]/p' "$T/$name-sp.json" | tr -d ' \n')
    [ -n "$l0" ] && [ "$l0" = "$l1" ] && ok || bad "$name: losses $l1 with --sequence-parallel, $l0 without"
    measured_is_predicted "$name sp" "$T/$name-sp"
}
sp_case cpsp --cp 2 --tp 2 --stage 1
# by hand (docs/parallelism.md's closed form, B 2, T 16/2, C 32, P 2, L 2, V 64,
# NH 4): BTl C + L (2 BT C + 2 BTl C + 12 BT C/P + 4 BTl + 2 B NH/P T) + BT C
# + 2 BTl + BT (V/P + 1) floats, BT = 16, BTl = 8
a=$(rank0_bytes "$T/cpsp-sp" activations)
[ "$a" = $((4 * (256 + 2 * (1024 + 512 + 3072 + 32 + 64) + 512 + 16 + 528))) ] && ok ||
    bad "cp 2 x sp: activations $a bytes, by hand $((4 * (256 + 2 * (1024 + 512 + 3072 + 32 + 64) + 512 + 16 + 528)))"
M0=$M M="$SPG --steps 3 --warmup 0 --quiet" # phantom_same runs zerosim train $M ...
phantom_same cpsp-sp 4 --cp 2 --tp 2 --stage 1 --sequence-parallel
M=$M0
"$ZS" plan --arch gpt $SPG --dp 1 --cp 2 --tp 2 --sequence-parallel --stage 1 --json >"$T/plan-sp.json" &&
    plan_is_run "plan, cp x sp" "$T/plan-sp.json" "$T/cpsp-sp" || bad "the plan of cp x sp failed"
# partitioned checkpoints stay refused with sequence parallelism, --cp or not
refuse -m "partition_activations" train $SPG --cp 2 --tp 2 --sequence-parallel \
    --checkpoint-activations every:1 --config "$T/pa.json" --world-size 4 --phantom

zs_fast && finish
# every:2 (one gather per micro-batch) at stage 3, the Llama family
cpa_case 4 2 2 every:2 3
cpa_case 4 2 2 every:1 1 --model llama --kv-heads 2 --ffn-hidden 48
# cp x sp: the Llama family, DeepSpeed-Ulysses, checkpointing at stage 3
sp_case cpsp-llama --cp 2 --tp 2 --stage 1 --model llama --kv-heads 2 --ffn-hidden 48
sp_case cpsp-uly --cp 2 --tp 2 --stage 1 --cp-attention ulysses --heads 8
sp_case cpsp-ck --cp 2 --tp 2 --stage 3 --checkpoint-activations every:1
finish
