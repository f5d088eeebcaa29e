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

# activation checkpointing (docs/moe.md): a 4-block MoE GPT (MoE blocks 1
# and 3) gives the same parameter hashes after every step with and without
# recompute, and the same losses, at N = 2 in stages 0-3; every:1 puts dense and MoE blocks in
# one slot, every:3 a MoE block alone in slot 1. Activations by hand
# (B 2, T 8, C 16, heads 2, V 17, E 4, capacity 4, floats): a dense slot
# 16 BTC + 4 BT + B NH T^2 = 4416, a MoE slot's expert buffers BT E +
# 10 E Cap C = 2624 instead of fch, fch_gelu (8 BTC = 2048), encoded and
# lnf 2 BTC = 512, the head BT (V + 3) = 320: every:1 (1 slot, both
# kinds) 4 (512 + 4416 + 2624 + 320) = 31488 bytes; every:3 (slots
# dense+MoE, MoE, dense) 4 (512 + 3 x 4416 - 2048 + 2 x 2624 + 320) =
# 69120; checkpoints: (segments - 1) x BTC floats = 3072 and 1024 bytes.
CK="--layers 4 --hidden 16 --heads 2 --seq 8 --vocab 17 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0 --lr 1e-2 --grad-clip 0.5 --moe-experts 4 --moe-every 2 --min-capacity 1 --aux-loss-coeff 0.05"
ckref=""
# (K: off or every:K; stage; activation bytes; checkpoint bytes); off by
# hand: 4 (512 + 4 x 4416 - 2 x 2048 + 2 x 2624 + 320) = 78592
for run in off:0:78592:0 1:3:31488:3072 3:1:69120:1024 1:2:31488:3072 3:0:69120:1024; do
    IFS=: read -r ck stage acts cks <<EOC
$run
EOC
    [ "$ck" = off ] || ck="every:$ck"
    d="$T/ck-$ck-$stage"
    if ! sh "$HERE/mpirun.sh" 2 "$ZS" train $CK --stage "$stage" --checkpoint-activations "$ck" \
         --quiet --report "$d.json" --csv "$d" >"$T/log" 2>&1 </dev/null; then
        bad "checkpointing $ck stage $stage failed"; cat "$T/log"; continue
    fi
    # the losses too (they include the aux term)
    h="$(hashes "$d.json") $(sed -n '/"losses"/,/\]/p' "$d.json" | tr -d ' \n')"
    if [ -z "$ckref" ]; then ckref=$h; else
        [ -n "$h" ] && [ "$h" = "$ckref" ] && ok ||
            bad "checkpointing $ck stage $stage: hashes $h differ from no checkpointing's $ckref"
    fi
    awk -v A="$acts" -v K="$cks" '$1 !~ /^#/ && $2 == "activations" { n++; if ($3 != A || $4 != A) bad++ }
        $1 !~ /^#/ && $2 == "checkpoints" { n++; if ($3 != K || $4 != K) bad++ }
        END { exit (bad > 0 || n != 4) }' "$d/memory.csv" && ok ||
        bad "checkpointing $ck stage $stage: activations/checkpoints not $acts/$cks: $(grep -E 'activations|checkpoints' "$d/memory.csv")"
done

# the routing statistics (summary line and report): the choices add up to
# top-k x tokens, kept = min(routed, capacity) per expert, dropped = the rest
for k in 1 2; do
    "$ZS" train --steps 2 --layers 2 --moe-experts 4 --moe-every 2 --moe-top-k $k \
        --report "$T/rs.json" >"$T/rs" 2>&1 </dev/null || { bad "routing run top-$k"; cat "$T/rs"; continue; }
    grep "^moe block 1: " "$T/rs" | tr ',' ' ' | awk -v k=$k '{
        tok = $4; cap = $7; d = 0; s = 0
        for (i = 9; i <= 12; i++) { s += $i; if ($i > cap) d += $i - cap }
        if (s == k * tok && $14 == d && d > 0 && $16 > 0.9) exit 0; exit 1 }' && ok ||
        { bad "top-$k routing line: $(grep '^moe block' "$T/rs")"; }
    grep -q '"moe_routing"' "$T/rs.json" && grep -q '"l_aux"' "$T/rs.json" && ok ||
        bad "top-$k: no moe_routing in the report"
done

# the planner: DeepSpeed-MoE's 1.3B + MoE-128 (24 layers, hidden 2048, 16
# heads, vocab 51200, seq 2048, 128 experts in every other block; "52B" in
# Rajbhandari et al. 2022). By hand: dense GPT V C + T C + 24 (12 C^2 + 13 C)
# + 2 C = 1,317,654,528; each of the 12 MoE blocks adds 127 MLPs of
# 8 C^2 + 5 C = 33,564,672 and a router of 128 C = 262,144:
# 1,317,654,528 + 12 x (127 x 33,564,672 + 262,144) = 52,473,360,384, of
# which 12 x 128 x 33,564,672 = 51,555,336,192 in the experts.
ARCH="--arch gpt --layers 24 --hidden 2048 --heads 16 --vocab 51200 --seq 2048 --dp 128"
"$ZS" plan $ARCH >"$T/dense" 2>&1 && grep -q "^model: 1317654528 parameters" "$T/dense" && ok ||
    { bad "plan of the dense 1.3B"; cat "$T/dense"; }
"$ZS" plan $ARCH --moe-experts 128 --moe-every 2 >"$T/moe" 2>&1 &&
grep -q "^model: 52473360384 parameters (52.5B).*128 experts in 12 of 24 blocks, top-1, 918024192 dense + 51555336192 expert parameters" "$T/moe" && ok ||
    { bad "plan of 1.3B + MoE-128"; cat "$T/moe"; }
if "$ZS" plan --params 1e9 --moe-experts 8 >"$T/o" 2>&1; then bad "plan --params --moe-experts accepted"
else grep -q "use them with --arch gpt" "$T/o" && ok || bad "plan --params --moe-experts: $(cat "$T/o")"; fi

# bad input: one line naming the option, non-zero exit
refuse -q -m "moe-top-k" train --steps 1 --quiet --moe-experts 4 --moe-top-k 3
refuse -q -m "moe-every" train --steps 1 --quiet --moe-experts 4 --layers 2 --moe-every 3
refuse -q -m "moe-experts" train --steps 1 --quiet --moe-experts 1
refuse -q -m "capacity-factor" train --steps 1 --quiet --moe-experts 4 --capacity-factor 0
refuse -q -m "needs a mixture of experts" train --steps 1 --quiet --ep 2
refuse -q -m "decoders" train --steps 1 --quiet --model mlp --moe-experts 4
refuse -q -m "must divide the data-parallel size" train --steps 1 --quiet --moe-experts 4 --ep 2
# with tensor parallelism: tests/test_moe_tp.sh
finish
