#!/bin/sh
# Pipeline parallelism with mixture of experts (docs/pipeline.md, "Mixture
# of experts"): a MoE GPT (4 experts in blocks 1 and 3, a capacity that
# drops tokens, the aux loss on) cut into --pp 2 stages gives byte-identical
# parameters after every step, and the same losses (each stage's aux terms
# added on the last stage in block order) and routing statistics, as the
# same run with --pp 1 on the same data-parallel ranks: 1F1B and GPipe,
# ZeRO stages 0-3, activation checkpointing, top-2 in bf16 over two
# data-parallel ranks, expert parallelism inside each stage's
# data-parallel ranks (--ep 2, --ep 1's layout), a stage without a MoE
# block, the Llama family's experts and the interleaved schedule; every
# category of memory and every collective (the all-to-alls too) measured =
# predicted on every stage's ranks, the phantom run reports what the real
# run did, and the plan's most loaded stage holds what its ranks measured.
# The fast tier (make check) runs 1F1B at stage 1 against --pp 1 with its
# accounting, phantom and routing checks.
. "$(dirname "$0")/testlib.sh"

# shellcheck disable=SC2034 # the model of train_hashes and phantom_same (testlib.sh)
M="--layers 4 --hidden 16 --heads 2 --seq 8 --vocab 17 --micro-batch 2 --grad-accum 4 --steps 3 --warmup 0 --lr 1e-2 --grad-clip 0.5 --moe-experts 4 --moe-every 2 --min-capacity 1 --aux-loss-coeff 0.05 --quiet"

# losses FILE: the "losses" array of a report, on one line
losses() { sed -n '/"losses"/,/\]/p' "$1" | tr -d ' \n'; }
# routing FILE: the "moe_routing" array of a report
routing() { sed -n '/"moe_routing"/,/^  \]/p' "$1"; }
# same NAME REF: the same per-step hashes and losses as REF
same() {
    same_hashes "$1" "$2"
    [ -n "$(losses "$T/$2.json")" ] && [ "$(losses "$T/$1.json")" = "$(losses "$T/$2.json")" ] &&
        ok || bad "$1: losses $(losses "$T/$1.json") differ from $2's $(losses "$T/$2.json")"
}

train_hashes ref1 1
# the aux term is part of the loss: without it the loss is lower
train_hashes ref1-noaux 1 --aux-loss-coeff 0
[ "$(losses "$T/ref1.json")" != "$(losses "$T/ref1-noaux.json")" ] && ok ||
    bad "the aux term does not change the loss: the test would not check its sum"

train_hashes p2 2 --pp 2 --stage 1 && same p2 ref1
measured_is_predicted p2 "$T/p2"
awk '$1 !~ /^#/ && $3 == "all" && ($2 == "send" || $2 == "recv") && $5 > 0 { n++ }
     END { exit n != 4 }' "$T/p2/comm.csv" && ok || bad "p2: no pipeline messages on both ranks"
phantom_same p2 2 --pp 2 --stage 1
# the routing of block 3 is the last stage's: gathered for the report
routing "$T/p2.json" >"$T/p2.route"
routing "$T/ref1.json" >"$T/ref1.route"
grep -q '"block": 3' "$T/p2.route" && cmp -s "$T/p2.route" "$T/ref1.route" && ok ||
    { bad "p2: moe_routing differs from --pp 1's"; diff "$T/ref1.route" "$T/p2.route" | head -6; }

if ! zs_fast; then
    for st in 0 2 3; do
        train_hashes "p2g-s$st" 2 --pp 2 --pp-schedule gpipe --stage "$st" && same "p2g-s$st" ref1
    done
    train_hashes p2-s3 2 --pp 2 --stage 3 && same p2-s3 ref1
    train_hashes p2-ck 2 --pp 2 --stage 2 --checkpoint-activations every:1 && same p2-ck ref1
    measured_is_predicted p2-ck "$T/p2-ck"

    # a stage without a MoE block: --moe-every 4 puts the experts in block 3
    # alone, on the last stage
    train_hashes ref1-e4 1 --moe-every 4
    train_hashes p2-e4 2 --pp 2 --moe-every 4 && same p2-e4 ref1-e4
    measured_is_predicted p2-e4 "$T/p2-e4"

    # two data-parallel ranks, top-2 in bf16; and expert parallelism inside
    # each stage's data-parallel ranks (--ep 1's layout: DeepSpeed's is not
    # implemented with the pipeline), its all-to-alls measured = predicted
    K2="--moe-top-k 2 --capacity-factor 0.5 --precision bf16"
    train_hashes ref2 2 $K2
    train_hashes p2d2 4 --pp 2 --stage 2 $K2 && same p2d2 ref2
    train_hashes ref2-ep 2 --stage 1
    train_hashes p2d2-ep 4 --pp 2 --ep 2 --stage 1 && same p2d2-ep ref2-ep
    measured_is_predicted p2d2-ep "$T/p2d2-ep"
    n=$(key "$T/p2d2-ep.json" num_params)
    [ -n "$n" ] && [ "$n" = "$(key "$T/ref2-ep.json" num_params)" ] && ok ||
        bad "p2d2-ep: the report counts $n parameters, --pp 1 $(key "$T/ref2-ep.json" num_params)"
    awk '$1 !~ /^#/ && $2 == "alltoall" && $3 == "all" && $5 > 0 { n++ } END { exit n != 4 }' \
        "$T/p2d2-ep/comm.csv" && ok || bad "p2d2-ep: not every rank made all-to-alls"
    phantom_same p2d2-ep 4 --pp 2 --ep 2 --stage 1
    # the plan's most loaded stage (here the first: 1F1B keeps two
    # micro-batches in flight there) holds what its first rank measured
    "$ZS" plan --arch gpt --layers 4 --hidden 16 --heads 2 --seq 8 --vocab 17 --micro-batch 2 \
        --grad-accum 4 --moe-experts 4 --moe-every 2 --dp 2 --pp 2 --ep 2 \
        --stage 1 --json >"$T/plan.json" || bad "zerosim plan --pp 2 --ep 2 --moe-experts 4"
    ms=$(sed -n 's/.*"most_loaded_stage": \([0-9]*\).*/\1/p' "$T/plan.json")
    plan_categories "$T/plan.json" >"$T/plan.cat"
    awk -v r=$((2 * ms)) '$1 == r && $2 != "total" && $2 != "optimizer" { print $2, $3 }' \
        "$T/p2d2-ep/memory.csv" >"$T/run.cat"
    [ -n "$ms" ] && [ -s "$T/plan.cat" ] && cmp -s "$T/plan.cat" "$T/run.cat" && ok ||
        { bad "plan --pp 2 --ep 2: stage $ms's bytes differ from the run's"; diff "$T/plan.cat" "$T/run.cat"; }

    # the Llama family's experts (Mixtral's SwiGLU MLPs), with checkpointing
    LL="--model llama --kv-heads 1 --ffn-hidden 24"
    train_hashes lref 1 $LL
    train_hashes lp2 2 $LL --pp 2 --checkpoint-activations every:1 && same lp2 lref
    measured_is_predicted lp2 "$T/lp2"

    # the interleaved schedule: 8 blocks, 2 model chunks a rank
    train_hashes ref1-8 1 --layers 8
    train_hashes int 2 --layers 8 --pp 2 --pp-schedule interleaved --virtual-stages 2 &&
        same int ref1-8
    measured_is_predicted int "$T/int"
fi

finish
