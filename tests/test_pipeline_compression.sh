#!/bin/sh
# Pipeline parallelism with gradient compression: each pipeline stage
# exchanges its own buckets, compressed, over its own data-parallel group,
# in place of their reduce-scatter (docs/compression.md).
# - Exact where the codec's result depends on the values alone: with one
#   data-parallel rank per stage and buckets inside units (as without a
#   pipeline), every codec (top-k, int8, sign, with and without error
#   feedback) gives the per-step parameter hashes of the run without a
#   pipeline; with two data-parallel ranks, topk:1 (every element kept)
#   does. Otherwise a stage's shards cut its buckets at other places than
#   the whole model's shards do, and top-k's choices and int8's and sign's
#   scale blocks follow those cuts: the same stage's runs are then checked
#   against each other (ZeRO stages 1-3 byte-identical, a second run
#   identical) and the loss falls.
# - Accounted: every rank's all-to-all bytes (each stage's own part of the
#   layout), categories and messages measured = predicted; the phantom
#   run reports what the real run did, also with three data-parallel ranks
#   whose parts differ (one run per rank against classes of ranks); the
#   plan's bytes are rank 0's.
. "$(dirname "$0")/testlib.sh"

M="--layers 4 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 4 --steps 4 --warmup 0 --quiet --compression-warmup 1"
# buckets of at most 1000 elements: every unit but the head (64) is
# larger, so no bucket spans two units, with or without a pipeline
printf '{"zero_optimization": {"reduce_bucket_size": 1000}}\n' >"$T/small.json"

# one data-parallel rank per stage: the run without a pipeline, every codec
codecs="topk:0.1 int8 sign topk:0.1,noef"
zs_fast && codecs=topk:0.1
for c in $codecs; do
    comp=${c%,noef} ef=""
    [ "$c" = "$comp" ] || ef=--no-error-feedback
    cn=$(echo "$c" | tr ':,' '--')
    train_hashes "ref-$cn" 0 --stage 1 --config "$T/small.json" --compression "$comp" $ef ||
        continue
    train_hashes "p2-$cn" 2 --pp 2 --stage 1 --config "$T/small.json" --compression "$comp" $ef &&
        same_hashes "p2-$cn" "ref-$cn"
    zs_fast && continue
    train_hashes "p4-$cn" 4 --pp 4 --stage 2 --pp-schedule gpipe --config "$T/small.json" \
        --compression "$comp" $ef && same_hashes "p4-$cn" "ref-$cn"
    measured_is_predicted "p4-$cn" "$T/p4-$cn"
done

# two data-parallel ranks per stage: topk:1 is the run without a pipeline
if ! zs_fast; then
    train_hashes ref-all 2 --stage 2 --compression topk:1 &&
        train_hashes p2d2-all 4 --pp 2 --stage 2 --compression topk:1 &&
        same_hashes p2d2-all ref-all
fi

# two data-parallel ranks per stage, each codec: ZeRO stages 1-3 give the
# same bytes, every rank's traffic is its stage's prediction (the second
# stage's all-to-all is not the first's), the phantom run is the real one
codecs="topk:0.1 int8 sign"
stages="1 2 3"
zs_fast && codecs=topk:0.1 stages=1
for comp in $codecs; do
    for st in $stages; do
        name="d2-$comp-$st"
        train_hashes "$name" 4 --pp 2 --stage "$st" --compression "$comp" || continue
        measured_is_predicted "$name" "$T/$name"
        [ "$st" = 1 ] || same_hashes "$name" "d2-$comp-1"
        phantom_same "$name" 4 --pp 2 --stage "$st" --compression "$comp"
    done
done
# the stages' all-to-alls differ (their parts of the layout do), each its own
awk '$3 == "all" && $2 == "alltoall" { b[$1] = $5 } END { exit !(b[0] > 0 && b[2] > 0 && b[0] != b[2]) }' \
    "$T/d2-topk:0.1-1/comm.csv" && ok || bad "d2-topk:0.1-1: the two stages' all-to-alls are the same"
train_hashes again 4 --pp 2 --stage 1 --compression topk:0.1 && same_hashes again d2-topk:0.1-1

# three data-parallel ranks whose parts of the stage's buckets differ: the
# classes of ranks that the phantom run simulates once are the ones run
# one by one, and each rank's traffic is its prediction
for comp in topk:0.1 sign; do
    for every in 0 1; do
        ZEROSIM_PHANTOM_EVERY_RANK=$every "$ZS" train --phantom --world-size 6 $M --pp 2 --stage 2 \
            --config "$T/small.json" --compression "$comp" --csv "$T/ph6-$comp-$every" \
            >"$T/ph6.log" 2>&1 || { bad "phantom 6 ranks $comp failed"; cat "$T/ph6.log"; }
    done
    for f in memory.csv comm.csv timeline.csv; do
        cmp -s "$T/ph6-$comp-0/$f" "$T/ph6-$comp-1/$f" && ok ||
            bad "phantom 6 ranks $comp: $f differs from the run of every rank"
    done
    awk '$3 == "all" && $2 == "alltoall" && $5 != $6 { bad = 1 } $3 == "all" && $2 == "alltoall" && !($5 in b) { b[$5]; k++ }
         END { exit bad || k < 2 }' "$T/ph6-$comp-1/comm.csv" && ok ||
        bad "phantom 6 ranks $comp: all-to-all measured differs from predicted, or every rank sends the same"
    zs_fast && break
done

# the plan: the most loaded stage's bytes are rank 0's
if "$ZS" plan --arch gpt --layers 4 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 \
    --grad-accum 4 --dp 2 --pp 2 --stage 1 --compression topk:0.1 --json >"$T/plan.json"; then
    plan_is_run "plan pp 2 topk" "$T/plan.json" "$T/d2-topk:0.1-1"
else
    bad "zerosim plan --pp 2 --compression topk:0.1 failed"
fi

# the loss falls: 30 steps, top-k 10% with error feedback, 1F1B and the
# interleaved schedule (two model chunks per rank, each its own buckets)
if ! zs_fast; then
    for sched in 1f1b interleaved; do
        v=""
        [ "$sched" = interleaved ] && v="--virtual-stages 2"
        zs_run "loss-$sched" 4 $M --steps 30 --lr 1e-2 --pp 2 --pp-schedule "$sched" $v --stage 2 \
            --compression topk:0.1 || continue
        measured_is_predicted "loss-$sched" "$T/loss-$sched"
        awk '!/^#/ {l[++n] = $2} END {exit !(n == 30 && l[30] < 0.85 * l[1])}' \
            "$T/loss-$sched/steps.csv" && ok || bad "loss-$sched: the loss did not fall"
    done
fi
finish
