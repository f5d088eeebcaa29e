#!/bin/sh
# The planner's parameter counts of the GPT shapes of Narayanan et al.,
# "Efficient Large-Scale Language Model Training on GPU Clusters Using
# Megatron-LM" (SC21, arXiv 2104.04473), Table 1: heads, hidden size and
# layers of each model as published, vocabulary 51200 and sequence 2048
# (the paper's §5.1), against the published "Number of parameters
# (billion)". The paper counts P = 12lh^2 (1 + 13/(12h) + (V + s)/(12lh));
# zerosim's GPT also has the final LayerNorm (2h more), so the count is
# checked twice: rounded to the published 0.1 B, and exactly against the
# paper's formula plus 2h.
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

finish
