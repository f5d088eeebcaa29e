#!/bin/sh
# activation_checkpointing.partition_activations with --tp (DeepSpeed's
# partitioned checkpoints): each tensor-parallel rank keeps 1/tp of every
# checkpoint and the group all-gathers a segment's input before its
# recompute. The parameters are byte-identical to the same run with whole
# checkpoints; the checkpoint bytes are (nseg - 1) X / tp + X in place of
# (nseg - 1) X (X = 4 B T C, one whole checkpoint), counted here by hand;
# the all-gathers add (nseg - 2) calls per micro-batch of (tp - 1) / tp X
# each; measured = predicted, plan = run, phantom = real. With a pipeline
# (full tier) each micro-batch in flight keeps its stage's slices and one
# whole checkpoint. Refused with sequence parallelism, one line; with --tp 1
# the key is listed among those of no effect, with --tp 2 it is not.
. "$(dirname "$0")/testlib.sh"

printf '{"activation_checkpointing": {"partition_activations": true}}\n' >"$T/pa.json"
GEOM="--layers 6 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 2"
M="$GEOM --steps 3 --warmup 0 --lr 1e-2 --quiet"

# case: N ranks, tp, checkpointing, stage, model options (GPT by default)
pa_case() {
    n=$1 tp=$2 ck=$3 stage=$4
    shift 4
    name="n$n-tp$tp-$(echo "$ck" | tr -d :)-s$stage$(echo "$*" | tr -d ' -')"
    zs_run "$name-off" "$n" $M "$@" --tp "$tp" --stage "$stage" --checkpoint-activations "$ck" ||
        return
    zs_run "$name-on" "$n" $M "$@" --tp "$tp" --stage "$stage" --checkpoint-activations "$ck" \
        --config "$T/pa.json" || return
    h0=$(key "$T/$name-off.json" param_hash) h1=$(key "$T/$name-on.json" param_hash)
    [ -n "$h0" ] && [ "$h0" = "$h1" ] && ok || bad "$name: param_hash $h1, whole checkpoints $h0"
    measured_is_predicted "$name partitioned" "$T/$name-on"
    # by hand: the segments of every:K over 6 blocks, X = 4 B T C bytes
    K=${ck#every:}
    nseg=$(((6 + K - 1) / K)) X=$((4 * 2 * 16 * 32))
    c0=$(rank0_bytes "$T/$name-off" checkpoints) c1=$(rank0_bytes "$T/$name-on" checkpoints)
    [ "$c0" = $(((nseg - 1) * X)) ] && [ "$c1" = $(((nseg - 1) * X / tp + X)) ] && ok ||
        bad "$name: checkpoint bytes $c1 partitioned, $c0 whole; by hand $(((nseg - 1) * X / tp + X)), $(((nseg - 1) * X))"
    set -- $(rank0_allgather "$T/$name-off") $(rank0_allgather "$T/$name-on")
    g=$((3 * 2 * (nseg - 2))) # steps x grad-accum x gathers per micro-batch
    [ "$3" = $(($1 + g)) ] && awk -v a="$2" -v b="$4" -v g="$g" -v X="$X" -v p="$tp" \
        'BEGIN { exit !(b - a == g * X * (p - 1) / p) }' && ok ||
        bad "$name: all-gathers $1 calls $2 bytes whole, $3 calls $4 bytes partitioned (+$g gathers of $X bytes)"
}

# fast: the GPT on 2 ranks (--tp 2), every block a segment (4 gathers
# per micro-batch), its plan and its phantom run
pa_case 2 2 every:1 1
"$ZS" plan --arch gpt $GEOM --dp 1 --tp 2 --stage 1 --checkpoint-activations every:1 \
    --config "$T/pa.json" --json >"$T/plan.json" &&
    plan_is_run "plan, partitioned" "$T/plan.json" "$T/n2-tp2-every1-s1-on" ||
    bad "the plan of partitioned checkpoints failed"
phantom_same n2-tp2-every1-s1-on 2 --tp 2 --stage 1 --checkpoint-activations every:1 \
    --config "$T/pa.json"

# refused with sequence parallelism, one line
refuse -m "partition_activations" train $M --tp 2 --sequence-parallel \
    --checkpoint-activations every:1 --config "$T/pa.json" --world-size 2 --phantom

# the start-up line of keys of no effect names it with --tp 1 only
"$ZS" train --phantom --world-size 2 $GEOM --steps 1 --checkpoint-activations every:1 \
    --config "$T/pa.json" >"$T/tp1.log" 2>&1 || bad "--tp 1 with partition_activations failed"
grep "no effect" "$T/tp1.log" | grep -q partition_activations && ok ||
    bad "--tp 1: partition_activations not listed as of no effect"
"$ZS" train --phantom --world-size 2 $GEOM --steps 1 --tp 2 --checkpoint-activations every:1 \
    --config "$T/pa.json" >"$T/tp2.log" 2>&1 || bad "--tp 2 phantom with partition_activations failed"
grep -q "^zerosim" "$T/tp2.log" && ! grep "no effect" "$T/tp2.log" | grep -q partition_activations &&
    ok || bad "--tp 2: partition_activations listed as of no effect (or no start-up lines)"

zs_fast && finish
# full: every:2 (one gather per micro-batch), stage 3, 4 ranks (tp 2 x dp 2
# and tp 4), the Llama family
pa_case 2 2 every:2 3
pa_case 4 2 every:1 2
pa_case 4 4 every:1 0
pa_case 2 2 every:1 1 --model llama --kv-heads 2 --ffn-hidden 48

# a pipeline (tp 2 x pp 2, 8 blocks, 1F1B, every:1): stage 0 (rank 0)
# keeps 3 checkpoints per micro-batch, 2 micro-batches in flight: by hand
# 2 (3 X / 2 + X) bytes partitioned, 2 (3 X) whole; the schedules
for sched in 1f1b gpipe interleaved; do
    v=""
    [ "$sched" = interleaved ] && v="--virtual-stages 2"
    for pa in off on; do
        cfg=""
        [ "$pa" = on ] && cfg="--config $T/pa.json"
        zs_run "pp-$sched-$pa" 4 $M --layers 8 --tp 2 --pp 2 --pp-schedule "$sched" $v \
            --stage 1 --checkpoint-activations every:1 $cfg || continue
    done
    h0=$(key "$T/pp-$sched-off.json" param_hash) h1=$(key "$T/pp-$sched-on.json" param_hash)
    [ -n "$h0" ] && [ "$h0" = "$h1" ] && ok || bad "pp $sched: param_hash $h1, whole checkpoints $h0"
    measured_is_predicted "pp $sched partitioned" "$T/pp-$sched-on"
done
X=$((4 * 2 * 16 * 32))
c0=$(rank0_bytes "$T/pp-1f1b-off" checkpoints) c1=$(rank0_bytes "$T/pp-1f1b-on" checkpoints)
[ "$c0" = $((6 * X)) ] && [ "$c1" = $((5 * X)) ] && ok ||
    bad "pp 1f1b: checkpoint bytes $c1 partitioned, $c0 whole; by hand $((5 * X)), $((6 * X))"
M="$M --layers 8"
phantom_same pp-1f1b-on 4 --tp 2 --pp 2 --stage 1 --checkpoint-activations every:1 \
    --config "$T/pa.json"
finish
