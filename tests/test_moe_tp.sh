#!/bin/sh
# Mixture of experts with tensor parallelism (docs/moe.md): each expert's
# MLP is split over the tensor-parallel group as the dense MLP is (fc by
# columns, proj by rows), the router replicated, the combined output summed
# over the group. Against tp 1 within the dense tensor parallelism's
# tolerance (the same routing; losses and gradient norms), stages 0-3 byte-
# identical for a fixed mesh, measured = predicted, plan = run, phantom =
# real, with sequence parallelism, top-2 and activation checkpointing;
# with expert parallelism (--ep 1's layout) byte-identical to --ep 1;
# checkpoints resumed exactly, and loaded at tp 1 as saved; what stays
# refused (the portable backend's exact sums) with one line; and the same
# for the Llama family's Mixtral experts (gate and up by rows, down by
# columns; src/model/llama_moe.c).
. "$(dirname "$0")/testlib.sh"

M="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0 --quiet --moe-experts 4 --moe-every 1 --min-capacity 1 --aux-loss-coeff 0.05"
# (the plan has no --min-capacity: the capacities here, 8, are above its default)
P="--arch gpt --layers 2 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 2 --moe-experts 4 --moe-every 1"

# values NAME KEY: the report's array KEY ("losses", "grad_norms"), one line
values() { sed -n "/\"$2\"/,/]/p" "$T/$1.json" | grep -o '[0-9][0-9.eE+-]*' | tr '\n' ' '; }
# routing NAME: every MoE block's routed and kept counts, dropped tokens
routing() { sed -n '/"routed"/,/"dropped"/p' "$T/$1.json" | tr -d ' \n'; }
# h_at NAME K: the report's K-th parameter hash
h_at() { hashes "$T/$1.json" | sed 's/.*\[//; s/\].*//' | tr -d '"' | cut -d, -f"$2"; }
# near NAME REF LABEL: NAME's losses and gradient norms within a relative
# 1e-5 of REF's (the dense test's tolerance, docs/parallelism.md; measured
# here 1.2e-7 for the losses and 9e-8 for the norms), and the same routing
near() {
    for k in losses grad_norms; do
        echo "$(values "$2" $k) | $(values "$1" $k)" | awk '{ n = (NF - 1) / 2
            for (i = 1; i <= n; i++) { d = $i - $(i + n + 1); if (d < 0) d = -d
                if (d > 1e-5 * ($i < 0 ? -$i : $i)) bad = 1 } }
            END { exit bad || n < 3 }' && ok ||
            bad "$3: $k $(values "$1" $k) against $(values "$2" $k)"
    done
    [ -n "$(routing "$2")" ] && [ "$(routing "$1")" = "$(routing "$2")" ] && ok ||
        bad "$3: the routing differs from $2's"
}

zs_run t1 0 $M --stage 0 || finish

# tp 2 on 2 ranks: every stage, the same bytes; each near tp 1
ref=
for stage in 0 3 1 2; do
    zs_run "s$stage" 2 $M --tp 2 --stage "$stage" || continue
    near "s$stage" t1 "tp 2 stage $stage"
    measured_is_predicted "tp 2 stage $stage" "$T/s$stage"
    h=$(hashes "$T/s$stage.json")
    if [ -z "$ref" ]; then ref=$h
    else [ "$h" = "$ref" ] && ok || bad "tp 2 stage $stage: hashes $h, stage 0's $ref"; fi
    if "$ZS" plan $P --dp 1 --tp 2 --stage "$stage" --json >"$T/plan$stage.json"; then
        plan_is_run "tp 2 stage $stage" "$T/plan$stage.json" "$T/s$stage"
    else bad "plan tp 2 stage $stage"; fi
    zs_fast && [ "$stage" = 3 ] && break
done

# the all-reduces by hand (B 2, T 16, C 32, L 2, V 64, BT = 32): per
# micro-batch the dense count, 10 of BT C floats (the embedding, four per
# block, the head's input gradient) and the loss's 3 BT in 2 calls, plus
# the combine weights' sum, top-1 x BT floats in each MoE block's
# backward; ring 2 (T - 1) / T = 1: 3 steps x 2 micro-batches x (10 x 1024
# + 96 + 2 x 32) x 4 bytes = 249600 in 3 x 2 x (12 + 2) = 84 calls
awk '$1 == 0 && $2 == "allreduce" && $3 == "all" { n++; if ($4 == 84 && $5 == 249600) good++ }
     END { exit !(n == 1 && good == 1) }' "$T/s0/comm.csv" && ok ||
    bad "tp 2: the all-reduces by hand: $(grep '^0 allreduce all' "$T/s0/comm.csv")"

# phantom = real (stage 3)
"$ZS" train --phantom --world-size 2 $M --tp 2 --stage 3 --csv "$T/s3-ph" >"$T/ph.log" 2>&1 ||
    bad "phantom tp 2: $(tail -2 "$T/ph.log")"
cmp -s "$T/s3/memory.csv" "$T/s3-ph/memory.csv" && ok || bad "phantom tp 2: memory differs"
for d in s3 s3-ph; do
    awk '$1 !~ /^#/ && $2 != "gather" && $3 != "report" { print $1, $2, $3, $4, $5, $6 }' \
        "$T/$d/comm.csv" >"$T/$d.ops"
done
cmp -s "$T/s3.ops" "$T/s3-ph.ops" && ok || bad "phantom tp 2: traffic differs"

# sequence parallelism and top-2 with a capacity that drops tokens: near
# the tp 1 run of the same options, measured = predicted, plan = run
K="--moe-top-k 2 --capacity-factor 0.5"
zs_run k1 0 $M $K --stage 3 && zs_run k2 2 $M $K --tp 2 --sequence-parallel --stage 3 && {
    near k2 k1 "tp 2 sp top-2"
    measured_is_predicted "tp 2 sp top-2" "$T/k2"
    if "$ZS" plan $P $K --dp 1 --tp 2 --sequence-parallel --stage 3 --json >"$T/plank.json"; then
        plan_is_run "tp 2 sp top-2" "$T/plank.json" "$T/k2"
    else bad "plan tp 2 sp top-2"; fi
}

if ! zs_fast; then
    # tp 2 x dp 2 with activation checkpointing, dense and MoE blocks
    # alternating: near tp 1 on 2 ranks, checkpointing placement only
    C="--layers 4 --moe-every 2 --checkpoint-activations every:1"
    zs_run d1 2 $M $C --stage 3 && zs_run d2 4 $M $C --tp 2 --stage 3 &&
        zs_run d0 4 $M $C --tp 2 --stage 0 && {
        near d2 d1 "tp 2 x dp 2 checkpointed"
        measured_is_predicted "tp 2 x dp 2 checkpointed" "$T/d2"
        [ "$(hashes "$T/d2.json")" = "$(hashes "$T/d0.json")" ] && ok ||
            bad "tp 2 x dp 2 checkpointed: stage 3 differs from stage 0"
        if "$ZS" plan $P $C --dp 2 --tp 2 --stage 3 --json >"$T/pland.json"; then
            plan_is_run "tp 2 x dp 2 checkpointed" "$T/pland.json" "$T/d2"
        else bad "plan tp 2 x dp 2"; fi
    }
fi

# expert parallelism over the data-parallel ranks of each TP rank (tp 2 x
# dp 2, --ep 2: --ep 1's layout, the experts' gradients sent home):
# byte-identical to --ep 1, measured = predicted (the all-to-alls too),
# plan = run, phantom = real
if ! zs_fast; then
    zs_run x1 4 $M --tp 2 --stage 3 && zs_run x2 4 $M --tp 2 --ep 2 --stage 3 && {
        [ -n "$(hashes "$T/x1.json")" ] && [ "$(hashes "$T/x2.json")" = "$(hashes "$T/x1.json")" ] &&
            ok || bad "tp 2 ep 2: hashes differ from ep 1's"
        measured_is_predicted "tp 2 ep 2" "$T/x2"
        awk '$1 == 0 && $2 == "alltoall" && $3 == "all" { exit !($4 > 0) }' "$T/x2/comm.csv" && ok ||
            bad "tp 2 ep 2: no all-to-all"
        if "$ZS" plan $P --dp 2 --tp 2 --ep 2 --stage 3 --json >"$T/planx.json"; then
            plan_is_run "tp 2 ep 2" "$T/planx.json" "$T/x2"
        else bad "plan tp 2 ep 2"; fi
        "$ZS" train --phantom --world-size 4 $M --tp 2 --ep 2 --stage 3 --csv "$T/x2-ph" \
            >"$T/xph.log" 2>&1 || bad "phantom tp 2 ep 2: $(tail -2 "$T/xph.log")"
        cmp -s "$T/x2/memory.csv" "$T/x2-ph/memory.csv" && ok || bad "phantom tp 2 ep 2: memory differs"
    }
fi

# checkpoints: saved at tp 2 after step 2 of 3, resumed at tp 2 in another
# stage the last step's bytes, loaded at tp 1 the parameters as saved (the
# experts' shards put where the tp 1 layout has them)
if ! zs_fast; then
    zs_run c3 2 $M --tp 2 --stage 1 --save-dir "$T/ck" --save-every 2 && {
        zs_run c2 2 $M --tp 2 --stage 3 --resume "$T/ck/global_step2" &&
            { [ -n "$(h_at c3 3)" ] && [ "$(h_at c2 1)" = "$(h_at c3 3)" ] && ok ||
                  bad "tp 2 resumed: $(h_at c2 1), the uninterrupted run's last step $(h_at c3 3)"; }
        zs_run c1 0 $M --stage 0 --resume "$T/ck/global_step2" &&
            { [ -n "$(h_at c3 2)" ] && [ "$(key "$T/c1.json" resumed_param_hash)" = "$(h_at c3 2)" ] &&
                  ok || bad "tp 1 loaded: $(key "$T/c1.json" resumed_param_hash), saved $(h_at c3 2)"; }
    }
fi

# what stays refused, with one line and nothing written
refuse -n 2 -m "not exact sums of slices" -o "$T/r2.json" \
    train $M --tp 2 --backend ref --deterministic --report "$T/r2.json"

# The Llama family's experts (Mixtral's SwiGLU MLPs, top-2 with a capacity
# that drops tokens): at tp 2 near tp 1 with the same routing, measured =
# predicted, plan = run, the all-reduces by hand; in the full form stages
# 0-3 byte-identical, sequence parallelism, phantom = real, --ep 2 = --ep
# 1, checkpointing over tp 2 x dp 2, and checkpoints
M="--model llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --ffn-hidden 48 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0 --lr 1e-2 --quiet --moe-experts 4 --moe-every 1 --moe-top-k 2 --capacity-factor 0.5 --min-capacity 1 --aux-loss-coeff 0.05"
P="--arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --ffn-hidden 48 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 2 --moe-experts 4 --moe-every 1 --moe-top-k 2 --capacity-factor 0.5"

train_hashes l1 0 --stage 0 && train_hashes l3 2 --tp 2 --stage 3 && {
    near l3 l1 "llama tp 2"
    measured_is_predicted "llama tp 2" "$T/l3"
    if "$ZS" plan $P --dp 1 --tp 2 --stage 3 --json >"$T/planl.json"; then
        plan_is_run "llama tp 2" "$T/planl.json" "$T/l3"
    else bad "plan llama tp 2"; fi
    # by hand (B 2, T 16, C 32, L 2, V 64, BT = 32; the dense count as the
    # GPT's above) plus the combine weights' sum, top-2 x BT floats in each
    # Mixtral block's backward: 3 x 2 x (10 x 1024 + 96 + 2 x 64) x 4 =
    # 251136 bytes in 3 x 2 x (12 + 2) = 84 calls
    awk '$1 == 0 && $2 == "allreduce" && $3 == "all" { n++; if ($4 == 84 && $5 == 251136) good++ }
         END { exit !(n == 1 && good == 1) }' "$T/l3/comm.csv" && ok ||
        bad "llama tp 2: the all-reduces by hand: $(grep '^0 allreduce all' "$T/l3/comm.csv")"
}

if ! zs_fast; then
    for stage in 0 1 2; do
        train_hashes "l$stage-s" 2 --tp 2 --stage "$stage" && same_hashes "l$stage-s" l3
    done
    phantom_same l3 2 --tp 2 --stage 3
    train_hashes lsp 2 --tp 2 --sequence-parallel --stage 3 && {
        near lsp l1 "llama tp 2 sp"
        measured_is_predicted "llama tp 2 sp" "$T/lsp"
        if "$ZS" plan $P --dp 1 --tp 2 --sequence-parallel --stage 3 --json >"$T/planlsp.json"
        then plan_is_run "llama tp 2 sp" "$T/planlsp.json" "$T/lsp"
        else bad "plan llama tp 2 sp"; fi
    }
    # tp 2 x dp 2: --ep 2 (--ep 1's layout, the experts' gradients sent
    # home) byte-identical to --ep 1, measured = predicted, plan = run,
    # phantom = real
    train_hashes lx1 4 --tp 2 --stage 3 && train_hashes lx2 4 --tp 2 --ep 2 --stage 3 && {
        same_hashes lx2 lx1
        measured_is_predicted "llama tp 2 ep 2" "$T/lx2"
        awk '$1 == 0 && $2 == "alltoall" && $3 == "all" { exit !($4 > 0) }' "$T/lx2/comm.csv" &&
            ok || bad "llama tp 2 ep 2: no all-to-all"
        if "$ZS" plan $P --dp 2 --tp 2 --ep 2 --stage 3 --json >"$T/planlx.json"; then
            plan_is_run "llama tp 2 ep 2" "$T/planlx.json" "$T/lx2"
        else bad "plan llama tp 2 ep 2"; fi
        phantom_same lx2 4 --tp 2 --ep 2 --stage 3
    }
    # activation checkpointing, dense and Mixtral blocks alternating, over
    # tp 2 x dp 2: near tp 1 on 2 ranks
    C="--layers 4 --moe-every 2 --checkpoint-activations every:1"
    zs_run ld1 2 $M $C --stage 3 && zs_run ld2 4 $M $C --tp 2 --stage 3 && {
        near ld2 ld1 "llama tp 2 x dp 2 checkpointed"
        measured_is_predicted "llama tp 2 x dp 2 checkpointed" "$T/ld2"
    }
    # a checkpoint saved at tp 2 resumes exactly in another stage and loads
    # at tp 1 with the parameters as saved
    zs_run lc3 2 $M --tp 2 --stage 1 --save-dir "$T/lck" --save-every 2 && {
        zs_run lc2 2 $M --tp 2 --stage 3 --resume "$T/lck/global_step2" &&
            { [ -n "$(h_at lc3 3)" ] && [ "$(h_at lc2 1)" = "$(h_at lc3 3)" ] && ok ||
                  bad "llama tp 2 resumed: $(h_at lc2 1), uninterrupted $(h_at lc3 3)"; }
        zs_run lc1 0 $M --stage 0 --resume "$T/lck/global_step2" &&
            { [ -n "$(h_at lc3 2)" ] &&
                  [ "$(key "$T/lc1.json" resumed_param_hash)" = "$(h_at lc3 2)" ] && ok ||
                  bad "llama tp 1 loaded: $(key "$T/lc1.json" resumed_param_hash), saved $(h_at lc3 2)"; }
    }
fi
finish
