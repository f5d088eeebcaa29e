#!/bin/sh
# Pipeline parallelism with the optimizer offloaded (ZeRO-Offload's host
# tier, ZeRO-Infinity's files): each pipeline stage's master, m and v of
# its data-parallel shard on the host or in the swap file. 2 stages x 2
# data-parallel ranks, stages 1-3, cpu and nvme: byte-identical parameters
# after every step to the same pipeline without offload; every rank's
# categories, tiers and transfers (d2h, h2d, nvme reads and writes), its
# collectives and its messages measured = predicted, each stage its own;
# the phantom run reports the same; the plan of the most loaded stage is
# its rank 0's. The parameters' offload with --pp:
# tests/test_pipeline_offload_param.sh.
. "$(dirname "$0")/testlib.sh"

# shellcheck disable=SC2034 # M is read by testlib.sh's train_hashes and phantom_same
M="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 8 --grad-accum 4 --steps 3 --warmup 0 --quiet --pp 2"


stages="1 2 3"
zs_fast && stages=1
for st in $stages; do
    train_hashes "p$st" 4 --stage "$st" || continue
    offs="cpu nvme"
    zs_fast && offs=nvme
    for off in $offs; do
        name="p$st-$off"
        mkdir -p "$T/nv-$name"
        train_hashes "$name" 4 --stage "$st" --offload-optimizer "$off" --nvme-path "$T/nv-$name" ||
            continue
        if grep -q '[0-9a-f]\{16\}' "$T/$name.h" && cmp -s "$T/$name.h" "$T/p$st.h"; then ok; else
            bad "$name: per-step hashes differ from the run without offload"
        fi
        memory_predicted "$name" "$T/$name"
        ops_predicted "$name" "$T/$name"
        awk '$1 ~ /^[0-9]/ && $2 ~ /^(host|nvme)_/' "$T/$name/memory.csv" | grep -q . && ok ||
            bad "$name: no bytes off the device"
        phantom_same "$name" 4 --stage "$st" --offload-optimizer "$off" --nvme-path "$T/nv-$name"
        # shellcheck disable=SC2010 # any file at all in the folder
        ls "$T/nv-$name" | grep -q . && bad "$name: a swap file was left in --nvme-path" || ok
    done
done

# the plan: the most loaded stage (the first, with the embeddings) is rank
# 0's, on the device and on the host
if [ -d "$T/p1-nvme" ] || [ -d "$T/p1-cpu" ]; then
    off=cpu; [ -d "$T/p1-cpu" ] || off=nvme
    "$ZS" plan --arch gpt --layers 2 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 8 \
        --grad-accum 4 --dp 2 --pp 2 --stage 1 --offload-optimizer $off --json \
        >"$T/plan.json" || bad "plan --pp 2 --offload-optimizer $off failed"
    plan_categories "$T/plan.json" >"$T/plan.dev"
    awk '$1 == 0 && $2 !~ /^(total|optimizer|host_.*|nvme_.*)$/ { print $2, $3 }' \
        "$T/p1-$off/memory.csv" >"$T/run.dev"
    [ -s "$T/plan.dev" ] && cmp -s "$T/plan.dev" "$T/run.dev" && ok ||
        { bad "plan pp 2 offload $off: the device bytes differ from rank 0's"; diff "$T/plan.dev" "$T/run.dev"; }
    tier=host; [ "$off" = nvme ] && tier=nvme
    sed -n "/\"$tier\": {/,/}/p" "$T/plan.json" | tr -d ' ",{}' | grep : | grep -v "^$tier:" |
        tr ':' ' ' | sed "s/^/${tier}_/" >"$T/plan.tier"
    awk -v t="$tier" '$1 == 0 && $2 ~ ("^" t "_") { print $2, $3 }' "$T/p1-$off/memory.csv" >"$T/run.tier"
    [ -s "$T/plan.tier" ] && cmp -s "$T/plan.tier" "$T/run.tier" && ok ||
        { bad "plan pp 2 offload $off: the $tier bytes differ from rank 0's"; diff "$T/plan.tier" "$T/run.tier"; }
fi

finish
