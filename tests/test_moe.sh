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
