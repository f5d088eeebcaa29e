#!/bin/sh
# Measure the numbers that docs/planner.md's worked example and published
# layouts quote (tagged <!--name-->value), by the zerosim plan commands the
# page shows, and write them as "name value" lines (docs/numbers.sh adds
# them to its own; tests/test_plan_llama.sh checks the page against them and
# the closed forms against hand arithmetic).
# Usage: docs/plan-numbers.sh OUTFILE (ZEROSIM names the program, default ./zerosim)
set -eu
[ $# -eq 1 ] || { echo "usage: docs/plan-numbers.sh OUTFILE" >&2; exit 2; }
OUTFILE=$1
TOP=$(cd "$(dirname "$0")/.." && pwd)
ZS=${ZEROSIM:-./zerosim}
case $ZS in /*) ;; *) ZS=$(pwd)/$ZS ;; esac
HF=$TOP/tests/hf
T=$(mktemp -d)
trap 'rc=$?; rm -rf "$T"; [ "$rc" -eq 0 ] || echo "docs/plan-numbers.sh: a plan failed (status $rc)" >&2' EXIT
: >"$OUTFILE"
num() { printf '%s %s\n' "$1" "$2" >>"$OUTFILE"; }
gb() { awk -v b="$1" 'BEGIN { printf "%.1f\n", b / 1e9 }'; }
commas() { echo "$1" | awk '{ s = $1; o = ""; while (length(s) > 3) { o = "," substr(s, length(s) - 2) o; s = substr(s, 1, length(s) - 3) } print s o }'; }
# key FILE NAME: the first "NAME": integer of a plan's JSON
key() { sed -n "s/^ *\"$2\": \([0-9]*\),*\$/\1/p" "$1" | head -1; }
# catkey FILE NAME: a category's bytes (bytes_per_category) in a plan's JSON
catkey() { sed -n '/"bytes_per_category"/,/}/p' "$1" | sed -n "s/^ *\"$2\": \([0-9]*\),*\$/\1/p"; }
gb2() { awk -v b="$1" 'BEGIN { printf "%.2f\n", b / 1e9 }'; }

# The worked example: bf16 with AdamW's fp32 master, 4,096 tokens a sample,
# micro-batch 1, every block checkpointed, 80 GB devices, 8 to a node
EX="--seq 4096 --micro-batch 1 --checkpoint-activations every:1 --precision bf16 --device-memory 80GB"
for m in llama3-8b:l8 llama3-70b:l70 mixtral-8x7b:mx llama3.1-405b:l405; do
    f=${m%%:*}; t=${m##*:}
    for n in 8 64; do
        for s in 0 1 2 3; do
            # shellcheck disable=SC2086 # EX is a list of options
            "$ZS" plan --hf-config "$HF/$f.json" $EX --stage $s --dp $n --json >"$T/p.json" 2>/dev/null
            num "ex_${t}_n${n}_s${s}" "$(gb "$(key "$T/p.json" total)")"
        done
        # shellcheck disable=SC2086
        "$ZS" plan --hf-config "$HF/$f.json" $EX --stage 3 --dp $n --offload-optimizer cpu --json \
            >"$T/p.json" 2>/dev/null
        num "ex_${t}_n${n}_oo" "$(gb "$(key "$T/p.json" total)")"
        # shellcheck disable=SC2086
        "$ZS" plan --hf-config "$HF/$f.json" $EX --stage 3 --dp $n --offload-optimizer cpu \
            --offload-param cpu --json >"$T/p.json" 2>/dev/null
        num "ex_${t}_n${n}_oop" "$(gb "$(key "$T/p.json" total)")"
    done
done

# GQA against the same model with as many key/value heads as query heads
# (Llama 3 70B), and an untied head against a tied one (Llama 3 8B)
for v in llama3-70b:gqa llama3-70b-mha:mha llama3-8b:untied llama3-8b-tied:tied; do
    f=${v%%:*}; t=${v##*:}
    # shellcheck disable=SC2086
    "$ZS" plan --hf-config "$HF/$f.json" $EX --stage 3 --dp 64 --json >"$T/p.json" 2>/dev/null
    num "ex_${t}_params" "$(commas "$(key "$T/p.json" params)")"
    num "ex_${t}_states" "$(gb2 $(( $(catkey "$T/p.json" params) + $(catkey "$T/p.json" grads) +
                                   3 * $(catkey "$T/p.json" optimizer_m) )))"
    num "ex_${t}_live" "$(commas "$(key "$T/p.json" live_params)")"
    num "ex_${t}_activations" "$(gb2 $(( $(catkey "$T/p.json" activations) + $(catkey "$T/p.json" checkpoints) )))"
    num "ex_${t}_buffers" "$(gb2 $(( $(catkey "$T/p.json" comm_buffers) + $(catkey "$T/p.json" workspace) )))"
    num "ex_${t}_total" "$(gb "$(key "$T/p.json" total)")"
done

# Published layouts. coll FILE RANKS: the bytes per device per step of the
# collectives of groups of RANKS devices in a plan's JSON (ring volume:
# (r-1)/r of the full bytes, twice that for an all-reduce)
coll() {
    awk -v want="$2" '/"op":/ { op = $2 } /"full_bytes":/ { fb = $2 + 0 }
        /"ranks":/ { r = $2 + 0; if (r == want) s += fb * (r - 1) / r * (op ~ /allreduce/ ? 2 : 1) }
        END { printf "%.0f\n", s }' "$1"
}
# layout NAME JSON: what the page quotes of one layout's plan
layout() {
    t=$1 j=$2
    num "${t}_params_per_device" "$(commas "$(key "$j" params_per_device)")"
    for c in params grads optimizer_master comm_buffers workspace; do
        num "${t}_${c}" "$(gb2 "$(catkey "$j" "$c")")"
    done
    num "${t}_activations" "$(gb2 $(( $(catkey "$j" activations) + $(catkey "$j" checkpoints) )))"
    num "${t}_total" "$(gb2 "$(key "$j" total)")"
    # the ZeRO group: data x context with --cp (key cp only then)
    zg=$(( $(key "$j" dp) * $(key "$j" cp | grep . || echo 1) ))
    num "${t}_dp_bytes" "$(gb2 "$(coll "$j" "$zg")")"
    num "${t}_tp_bytes" "$(gb2 "$(coll "$j" "$(key "$j" tp)")")"
    num "${t}_pp_bytes" "$(gb2 "$(key "$j" p2p_send_bytes_per_step)")"
}
# Llama 3.1 405B as Meta trained it (arXiv 2407.21783, Table 4): 16,384
# GPUs, TP 8 x PP 16 x DP 128, sequence 8,192, 16 sequences per
# data-parallel rank a step (2,048 in all: 16M tokens)
"$ZS" plan --hf-config "$HF/llama3.1-405b.json" --seq 8192 --micro-batch 1 --grad-accum 16 \
    --precision bf16 --stage 2 --tp 8 --pp 16 --dp 128 --sequence-parallel \
    --checkpoint-activations every:1 --device-memory 80GB --json >"$T/l405.json" 2>/dev/null
layout pub405 "$T/l405.json"
# GPT-3 175B on 1,024 GPUs (Narayanan et al., arXiv 2104.04473): TP 8 x PP 8
# x DP 16, batch 1,536 (96 per data-parallel rank), fp16, recomputation,
# gradients all-reduced once per step
"$ZS" plan --arch gpt --layers 96 --hidden 12288 --heads 96 --vocab 51200 --seq 2048 \
    --micro-batch 1 --grad-accum 96 --precision fp16 --stage 0 --grad-reduce step --tp 8 --pp 8 \
    --dp 16 --checkpoint-activations every:1 --device-memory 80GB --json >"$T/g3.json"
layout pubg3 "$T/g3.json"
# Llama 3.1 405B's long-context stage (arXiv 2407.21783, Table 4): TP 8 x
# CP 16 x PP 16 at sequence 131,072 on 16,384 GPUs (DP 8: the table prints
# 4, which with 16,384 GPUs and 16M tokens a step does not multiply out),
# 16 sequences per data-parallel rank; zerosim refuses --sequence-parallel
# with --cp, so without it
"$ZS" plan --hf-config "$HF/llama3.1-405b.json" --seq 131072 --micro-batch 1 --grad-accum 16 \
    --precision bf16 --stage 2 --tp 8 --cp 16 --pp 16 --dp 8 \
    --checkpoint-activations every:1 --device-memory 80GB --json >"$T/l405cp.json" 2>/dev/null
layout pub405cp "$T/l405cp.json"
num pub405cp_ring_bytes "$(gb2 "$(key "$T/l405cp.json" cp_ring_send_bytes_per_step)")"
num pub405cp_ring_s "$(sed -n 's/^ *"cp_ring_s": \([0-9.]*\),*$/\1/p' "$T/l405cp.json" |
    awk '{ printf "%.2f\n", $1 }')"
num pub405cp_step_s "$(sed -n '/"step_time"/,/}/p' "$T/l405cp.json" |
    sed -n 's/^ *"total_s": \([0-9.]*\),*$/\1/p' | awk '{ printf "%.1f\n", $1 }')"
num pub405cp_comm_s "$(sed -n '/"step_time"/,/}/p' "$T/l405cp.json" |
    sed -n 's/^ *"comm_s": \([0-9.]*\),*$/\1/p' | awk '{ printf "%.2f\n", $1 }')"
