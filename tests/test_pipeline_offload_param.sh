#!/bin/sh
# Pipeline parallelism with the parameters offloaded (ZeRO stage 3's
# offload_param, ZeRO-Infinity): each pipeline stage's parameter shard of
# its part of the layout on the host or in the rank's swap file, each
# gather's own part sent up, the updated shard sent down when the
# optimizer stays on the device. 2 stages x 2 data-parallel ranks:
#  - byte-identical parameters after every step to the same pipeline
#    without offload;
#  - every rank's categories, tiers and transfers (d2h, h2d, nvme reads and
#    writes), its collectives and its messages measured = predicted, each
#    stage's from its own step program (a stage's gathers are not stage
#    0's: the last stage's h2d differs from the first's);
#  - the phantom run reports the same (classes by stage and by each
#    stage's parts of its gathers), and on 6 data-parallel ranks a stage
#    the classes' figures are every rank's simulated on its own;
#  - the plan of the most loaded stage is its rank 0's, on the device, on
#    the host, in the files and in its transfers per step;
#  - full run: in bf16, with --tp 2 as well (8 ranks), and at stages 1-2, where
#    offload_param is dropped with --pp as without it.
# DeepSpeed's pipeline engine runs ZeRO stages 0-1 only; the anchor is
# zerosim's own stage 3 with --pp (tests/test_pipeline_z3.sh) and
# offload_param without --pp (tests/test_offload.sh, test_offload_param.sh).
. "$(dirname "$0")/testlib.sh"

M="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 8 --grad-accum 4 --steps 3 --warmup 0 --quiet --pp 2"

# h2d_of DIR RANK: the bytes rank RANK sent up in the run
h2d_of() { awk -v q="$2" '$1 == q && $2 == "h2d" && $3 == "all" { print $5 }' "$1/comm.csv"; }

train_hashes p3 4 --stage 3 || finish

# optimizer:parameters offload; the fast form runs the first with and without
# optimizer offload
cases="cpu:cpu nvme:nvme none:cpu nvme:cpu"
zs_fast && cases="cpu:cpu none:cpu"
for c in $cases; do
    oo=${c%:*} op=${c#*:}
    name="o$oo-p$op"
    set -- --stage 3 --offload-optimizer "$oo" --offload-param "$op"
    if [ "$oo" = nvme ] || [ "$op" = nvme ]; then
        mkdir -p "$T/nv-$name"
        set -- "$@" --nvme-path "$T/nv-$name"
    fi
    train_hashes "$name" 4 "$@" || continue
    same_hashes "$name" p3
    memory_predicted "$name" "$T/$name"
    ops_predicted "$name" "$T/$name"
    tier=host; [ "$op" = nvme ] && tier=nvme
    awk -v t="$tier" '$1 ~ /^[0-9]/ && $2 == (t "_params") { n++ } END { exit n != 4 }' \
        "$T/$name/memory.csv" && ok || bad "$name: not every rank holds ${tier}_params"
    # each stage its own gathers: the two stages' layouts differ, and so
    # do the bytes their first ranks send up
    h0=$(h2d_of "$T/$name" 0) h2=$(h2d_of "$T/$name" 2)
    [ -n "$h0" ] && [ -n "$h2" ] && [ "$h0" != "$h2" ] && ok ||
        bad "$name: stage 0 sent $h0 bytes up, stage 1 $h2: one stage's gathers for both?"
    phantom_same "$name" 4 "$@"
    if [ -d "$T/nv-$name" ]; then
        # shellcheck disable=SC2010 # any file at all in the folder
        ls -A "$T/nv-$name" | grep -q . && bad "$name: a swap file was left in --nvme-path" || ok
    fi
done

# below stage 3 offload_param is dropped with --pp as without it (DeepSpeed
# reads it in stage 3 only): the same hashes, the key listed (full run)
if ! zs_fast; then
    for st in 1 2; do
        train_hashes "s$st" 4 --stage "$st" || continue
        train_hashes "s$st-p" 4 --stage "$st" --offload-optimizer cpu --offload-param cpu ||
            continue
        train_hashes "s$st-o" 4 --stage "$st" --offload-optimizer cpu || continue
        same_hashes "s$st-p" "s$st"
        grep -q "offload_param.*dropped at stage $st" "$T/s$st-p.log" && ok ||
            bad "s$st-p: no line saying offload_param was dropped"
        cmp -s "$T/s$st-p/memory.csv" "$T/s$st-o/memory.csv" && ok ||
            bad "s$st-p: the memory differs from --offload-optimizer cpu alone"
    done
fi

# bf16 (full run): the working copy goes down after the device's optimizer
# (none:cpu), the tied embedding's check reads 2-byte parameters from the file
if ! zs_fast && train_hashes b3 4 --stage 3 --precision bf16; then
    for c in none:cpu nvme:nvme; do
        oo=${c%:*} op=${c#*:}
        name="b-o$oo-p$op"
        mkdir -p "$T/nv-$name"
        train_hashes "$name" 4 --stage 3 --precision bf16 --offload-optimizer "$oo" \
            --offload-param "$op" --nvme-path "$T/nv-$name" || continue
        same_hashes "$name" b3
        memory_predicted "$name" "$T/$name"
        ops_predicted "$name" "$T/$name"
    done
fi

# with tensor parallelism too (2 x 2 x 2, full run): each TP rank's shard
if ! zs_fast; then
    if train_hashes t3 8 --tp 2 --stage 3 &&
        train_hashes t3-off 8 --tp 2 --stage 3 --offload-optimizer cpu --offload-param cpu; then
        same_hashes t3-off t3
        memory_predicted t3-off "$T/t3-off"
        ops_predicted t3-off "$T/t3-off"
        phantom_same t3-off 8 --tp 2 --stage 3 --offload-optimizer cpu --offload-param cpu
    fi
fi

# phantom runs of 6 data-parallel ranks a stage, where a class holds more
# than one rank: measured = predicted on every simulated rank, and the
# classes' figures are those of every rank simulated on its own
for c in $cases; do
    oo=${c%:*} op=${c#*:}
    [ "$oo" = nvme ] || [ "$op" = nvme ] && continue
    name="o$oo-p$op-w12"
    for every in 0 1; do
        ZEROSIM_PHANTOM_EVERY_RANK=$every "$ZS" train --phantom --world-size 12 $M --stage 3 \
            --offload-optimizer "$oo" --offload-param "$op" --csv "$T/$name-$every" \
            >"$T/$name-$every.log" 2>&1 || bad "phantom $name failed: $(tail -1 "$T/$name-$every.log")"
    done
    memory_predicted "$name" "$T/$name-0"
    ops_predicted "$name" "$T/$name-0"
    cmp -s "$T/$name-0/memory.csv" "$T/$name-1/memory.csv" && ok ||
        { bad "phantom $name: memory.csv differs from every rank's own run"
          diff "$T/$name-0/memory.csv" "$T/$name-1/memory.csv" | head -4; }
    for every in 0 1; do # the ops, calls and bytes (not the seconds)
        awk '$1 !~ /^#/ { print $1, $2, $3, $4, $5, $6 }' "$T/$name-$every/comm.csv" \
            >"$T/$name-$every.ops"
    done
    cmp -s "$T/$name-0.ops" "$T/$name-1.ops" && ok ||
        { bad "phantom $name: traffic differs from every rank's own run"
          diff "$T/$name-0.ops" "$T/$name-1.ops" | head -4; }
done

# the plan: the most loaded stage (the first, with the embeddings) is rank
# 0's, on the device, on the host and in the files, and in the transfers
# per step
for c in $cases; do
    oo=${c%:*} op=${c#*:}
    name="o$oo-p$op"
    [ -d "$T/$name" ] || continue
    "$ZS" plan --arch gpt --layers 2 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 8 \
        --grad-accum 4 --dp 2 --pp 2 --stage 3 --offload-optimizer "$oo" --offload-param "$op" \
        --json >"$T/$name.plan.json" || { bad "plan $name failed"; continue; }
    plan_categories "$T/$name.plan.json" >"$T/$name.plan.dev"
    awk '$1 == 0 && $2 !~ /^(total|optimizer|host_.*|nvme_.*)$/ { print $2, $3 }' \
        "$T/$name/memory.csv" >"$T/$name.run.dev"
    [ -s "$T/$name.plan.dev" ] && cmp -s "$T/$name.plan.dev" "$T/$name.run.dev" && ok ||
        { bad "plan $name: the device bytes differ from rank 0's"; diff "$T/$name.plan.dev" "$T/$name.run.dev"; }
    for tier in host nvme; do
        sed -n "/\"$tier\": {/,/}/p" "$T/$name.plan.json" | tr -d ' ",{}' | grep : |
            grep -v "^$tier:" | tr ':' ' ' | sed "s/^/${tier}_/" >"$T/$name.plan.$tier"
        awk -v t="$tier" '$1 == 0 && $2 ~ ("^" t "_") { print $2, $3 }' "$T/$name/memory.csv" \
            >"$T/$name.run.$tier"
        cmp -s "$T/$name.plan.$tier" "$T/$name.run.$tier" && ok ||
            { bad "plan $name: the $tier bytes differ from rank 0's"; diff "$T/$name.plan.$tier" "$T/$name.run.$tier"; }
    done
    [ -s "$T/$name.run.host" ] || [ -s "$T/$name.run.nvme" ] || bad "$name: nothing off the device"
    for k in d2h h2d nvme_read nvme_write; do
        p=$(sed -n "s/^ *\"${k}_bytes_per_step\": \([0-9]*\),*$/\1/p" "$T/$name.plan.json")
        r=$(awk -v k="$k" '$1 == 0 && $2 == k && $3 == "all" { printf "%.0f", $5 / 3 }' \
            "$T/$name/comm.csv")
        [ -n "$p" ] && [ "$p" = "$r" ] && ok || bad "plan $name: $k per step $p, rank 0 ran $r"
    done
done

finish
