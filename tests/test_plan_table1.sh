#!/bin/sh
# The planner's parameter counts of the GPT shapes of Narayanan et al.,
# "Efficient Large-Scale Language Model Training on GPU Clusters Using
# Megatron-LM" (SC21, arXiv 2104.04473), Table 1: heads, hidden size and
# layers of each model as published, vocabulary 51200 and sequence 2048
# (the paper's §5.1), against the published "Number of parameters
# (billion)". The paper counts P = 12lh^2 (1 + 13/(12h) + (V + s)/(12lh));
# zerosim's GPT also has the final LayerNorm (2h more), so the count is
# checked twice: rounded to the published 0.1 B, and exactly against the
# paper's formula plus 2h. Then each configuration under the table's
# tensor- and pipeline-parallel sizes and GPU count (data-parallel size =
# GPUs / (TP x PP)): the parameters each GPU holds, every pipeline stage's,
# against a hand count of a TP shard of the stage's units (uniform stages:
# the first L mod P stages one block more), and its bytes in bf16.
. "$(dirname "$0")/testlib.sh"

# billions heads hidden layers (Table 1, its first ten rows)
while read -r pub heads h l; do
    got=$("$ZS" plan --arch gpt --layers "$l" --hidden "$h" --heads "$heads" --vocab 51200 \
          --seq 2048 --micro-batch 1 --dp 1 --precision bf16 --json |
          sed -n 's/^  "params": \([0-9]*\),$/\1/p')
    if [ -z "$got" ]; then
        bad "plan of $l layers, hidden $h, $heads heads: no parameter count"
        continue
    fi
    b=$(awk -v p="$got" 'BEGIN { printf "%.1f", p / 1e9 }')
    [ "$b" = "$pub" ] && ok || bad "$l layers, hidden $h: $got parameters = ${b}B, published ${pub}B"
    want=$(awk -v l="$l" -v h="$h" 'BEGIN { printf "%.0f", 12*l*h*h + 13*l*h + (51200 + 2048)*h + 2*h }')
    [ "$got" = "$want" ] && ok || bad "$l layers, hidden $h: $got parameters, formula + 2h gives $want"
done <<'T'
1.7 24 2304 24
3.6 32 3072 30
7.5 32 4096 36
18.4 48 6144 40
39.1 64 8192 48
76.1 80 10240 60
145.6 96 12288 80
310.1 128 16384 96
529.6 128 20480 105
1008.0 160 25600 128
T

# billions heads hidden layers TP PP GPUs (the same rows' parallel
# configuration). One block's TP shard: its QKV, projection and MLP
# weights and the QKV and first MLP biases divided by t (12h^2/t + 7h/t),
# the two LayerNorms and the two row-parallel biases whole (6h); the first
# stage adds the vocabulary-parallel token embedding (V/t rows of h) and
# the position embedding (s x h, whole), the last the final LayerNorm (2h)
while read -r pub heads h l t p gpus; do
    d=$((gpus / (t * p)))
    "$ZS" plan --arch gpt --layers "$l" --hidden "$h" --heads "$heads" --vocab 51200 --seq 2048 \
        --micro-batch 1 --tp "$t" --pp "$p" --dp "$d" --precision bf16 --json >"$T/plan.json" ||
        { bad "plan of ${pub}B at TP $t x PP $p x DP $d failed"; continue; }
    got=$(sed -n 's/^  "params_per_device": \([0-9]*\),$/\1/p' "$T/plan.json")
    # every stage's count, by hand (the plan lists them when p > 1)
    want=$(awk -v l="$l" -v h="$h" -v t="$t" -v p="$p" 'BEGIN {
        blk = 12*h*h/t + 7*h/t + 6*h; q = int(l / p); r = l - q*p; max = 0
        for (s = 0; s < p; s++) {
            n = (q + (s < r ? 1 : 0)) * blk
            if (s == 0) n += 51200/t*h + 2048*h
            if (s == p - 1) n += 2*h
            printf "%.0f ", n; if (n > max) max = n }
        printf "| %.0f\n", max }')
    max=${want##*| }
    [ -n "$got" ] && [ "$got" = "$max" ] && ok ||
        bad "${pub}B at TP $t x PP $p: $got parameters per GPU, by hand $max"
    if [ "$p" -gt 1 ]; then
        stages=$(sed -n '/"stage_params"/,/\]/p' "$T/plan.json" | sed -n 's/^ *\([0-9][0-9]*\),*$/\1/p' |
                 tr '\n' ' ')
        [ "$stages" = "${want%%| *}" ] && ok ||
            bad "${pub}B at TP $t x PP $p: stages hold $stages, by hand ${want%%| *}"
    fi
    printf '%7sB  TP %d x PP %2d x DP %2d: %13s parameters per GPU, %6.2f GB in bf16\n' "$pub" "$t" \
        "$p" "$d" "$got" "$(awk -v n="$got" 'BEGIN { print 2 * n / 1e9 }')"
done <<'T'
1.7 24 2304 24 1 1 32
3.6 32 3072 30 2 1 64
7.5 32 4096 36 4 1 128
18.4 48 6144 40 8 1 256
39.1 64 8192 48 8 2 512
76.1 80 10240 60 8 4 1024
145.6 96 12288 80 8 8 1536
310.1 128 16384 96 8 16 1920
529.6 128 20480 105 8 35 2520
1008.0 160 25600 128 8 64 3072
T

finish
