#!/bin/sh
# Planning the Llama family from Hugging Face config files (docs/planner.md,
# "Worked example" and "Published layouts"):
#   - --deepspeed-estimate from a config file against DeepSpeed's own
#     formulas (estimate_zero2/3_model_states_mem_needs in
#     deepspeed/runtime/zero/stage_1_and_2.py and stage3.py, written out
#     here by hand), the largest layer being the largest module's own
#     tensors (the embedding or lm_head, V x C, or an MLP projection);
#   - the worked example's model states against their closed forms (2Ψ,
#     2Ψ + 2Ψ/N, 12Ψ/N ... with Ψ padded to N), GQA and the untied head by
#     hand, and the page's quoted numbers against docs/plan-numbers.sh;
#   - Llama 3.1 405B at TP 8 x PP 16 x DP 128 plans, its parameters per
#     device by hand; 100,000 devices plan; more than 2^24 are one line.
. "$(dirname "$0")/testlib.sh"
HF=$HERE/hf
srcdir=${srcdir:-$HERE/..}

# --- DeepSpeed's estimators, by hand ------------------------------------
# ds_table STAGE TOTAL LARGEST GPN NODES: the text DeepSpeed prints
# (estimate_zero3_model_states_mem_needs_all_cold / zero2's), factor 1.5,
# sizes int(bytes) / 2^30 printed "GB"
ds_table() {
    awk -v st="$1" -v P="$2" -v L="$3" -v gpn="$4" -v nodes="$5" 'function t(x) { return int(x) }
    function row(cpu, gpu, opts) { printf " %7.2fGB | %6.2fGB | %s\n", t(cpu) / 2^30, t(gpu) / 2^30, opts }
    function mx(a, b) { return a > b ? a : b }
    BEGIN {
        G = nodes * gpn; gf = 1 / nodes; bf = 1.5
        print "Estimated memory needed for params, optim states and gradients for a:"
        printf "HW: Setup with %d %s, %d %s per node.\n", nodes, (nodes > 1 ? "nodes" : "node"), gpn, (gpn > 1 ? "GPUs" : "GPU")
        if (st == 2) printf "SW: Model with %dM total params.\n", int(P / 1e6)
        else printf "SW: Model with %dM total params, %dM largest layer params.\n", int(P / 1e6), int(L / 1e6)
        print "  per CPU  |  per GPU |   Options"
        if (st == 2) {
            row(P * mx(4 * G, 16) * bf, 2 * P, "offload_optimizer=cpu ")
            row(P * 4 * gpn * bf, 2 * P + int(18 * P / G), "offload_optimizer=none")
            exit
        }
        llm = 4 * L
        o = "offload_param=cpu , offload_optimizer=cpu , zero_init="
        row(P * 18 * gf * bf, llm, o 1); row(P * mx(4 * gpn, 18 * gf) * bf, llm, o 0)
        o = "offload_param=none, offload_optimizer=cpu , zero_init="
        row(P * 16 * gf * bf, llm + int(2 * P / G), o 1); row(P * mx(4 * gpn, 16 * gf) * bf, llm + int(2 * P / G), o 0)
        o = "offload_param=none, offload_optimizer=none, zero_init="
        row(L * 4 * gpn * bf, llm + int(18 * P / G), o 1); row(P * 4 * gpn * bf, llm + int(18 * P / G), o 0)
    }'
}
# ds_check LABEL STAGE TOTAL LARGEST ARGS...: zerosim plan --deepspeed-estimate
# ARGS (2 nodes of 8) prints DeepSpeed's table for TOTAL and LARGEST
ds_check() {
    label=$1 st=$2 P=$3 L=$4
    shift 4
    ds_table "$st" "$P" "$L" 8 2 >"$T/ds.want"
    if "$ZS" plan --deepspeed-estimate --stage "$st" --gpus-per-node 8 --nodes 2 "$@" \
        >"$T/ds.got" 2>/dev/null && cmp -s "$T/ds.want" "$T/ds.got"; then ok
    else bad "$label stage $st: the DeepSpeed estimate differs from the formulas by hand"
        diff "$T/ds.want" "$T/ds.got" | head -8; fi
}
# Llama 3 8B: the embedding and lm_head, 128256 x 4096, are the largest
ds_check "llama3-8b" 3 8030261248 $((128256 * 4096)) --hf-config "$HF/llama3-8b.json"
ds_check "llama3-8b" 2 8030261248 0 --hf-config "$HF/llama3-8b.json"
# Mixtral 8x7B: 32000 x 4096 (131M), not a learned position table (the
# GPT's T x C, 32768 x 4096 = 134M, which Llama has not)
ds_check "mixtral-8x7b" 3 46702792704 $((32000 * 4096)) --hf-config "$HF/mixtral-8x7b.json"
ds_check "llama3.1-405b" 3 405853388800 $((128256 * 16384)) --hf-config "$HF/llama3.1-405b.json"
# a small vocabulary: an MLP projection, F x C = 28672 x 4096, is the largest
P=$((2 * 8000 * 4096 + 4096 + 2 * (2 * 4096 + 2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 28672 * 4096)))
ds_check "llama small vocab" 3 $P $((28672 * 4096)) --arch llama --layers 2 --hidden 4096 \
    --heads 32 --kv-heads 8 --ffn-hidden 28672 --vocab 8000 --seq 128
# the GPT's stays its own (learned positions T x C count)
ds_check "gpt2" 3 124439808 $((50257 * 768)) --hf-config "$HF/gpt2.json"

# --- a config file is the same model as its options ----------------------
# (the planner's batch, micro-batch 1 x 1, not the run's unresolved 0s)
"$ZS" plan --hf-config "$HF/llama3-8b.json" --seq 1024 --precision bf16 --stage 1 --dp 8 --json \
    >"$T/hf.json" 2>/dev/null
"$ZS" plan --arch llama --layers 32 --hidden 4096 --heads 32 --kv-heads 8 --ffn-hidden 14336 \
    --vocab 128256 --seq 1024 --precision bf16 --stage 1 --dp 8 --json >"$T/arch.json"
plan_categories "$T/hf.json" >"$T/hf.cat"
plan_categories "$T/arch.json" >"$T/arch.cat"
[ -s "$T/hf.cat" ] && cmp -s "$T/hf.cat" "$T/arch.cat" && ok ||
    { bad "llama3-8b: --hf-config and the same --arch llama plan different bytes"; diff "$T/hf.cat" "$T/arch.cat"; }
# --arch llama's defaults (intermediate 4C, as many key/value heads as heads)
"$ZS" plan --arch llama --layers 2 --hidden 64 --heads 4 --vocab 100 --seq 16 | head -1 |
    grep -q "4 heads, 4 key/value heads, intermediate 256," && ok ||
    bad "--arch llama does not print its default key/value heads and intermediate size"

# --- the worked example: model states by closed form ---------------------
EX="--seq 4096 --micro-batch 1 --checkpoint-activations every:1 --precision bf16 --device-memory 80GB"
# cat_of FILE NAME: a category's bytes in a plan's JSON
cat_of() { plan_categories "$1" | awk -v c="$2" '$1 == c { print $2 }'; }
# states FILE PSI N STAGE LIVE: params, grads and master/m/v bytes by hand
# (bf16 parameters and gradients, fp32 master, m, v; Ψ padded to N; stages
# 0 and 1 keep a reduced-gradient shard besides the full gradients; stage 3
# holds LIVE gathered parameters)
states() {
    s_f=$1 s_psi=$2 s_n=$3 s_st=$4 s_live=$5
    s_sh=$(( (s_psi + s_n - 1) / s_n ))
    case $s_st in
        0) want="$((2 * s_psi)) $((2 * s_psi + 2 * s_sh)) $((4 * s_psi))" ;;
        1) want="$((2 * s_psi)) $((2 * s_psi + 2 * s_sh)) $((4 * s_sh))" ;;
        2) want="$((2 * s_psi)) $((2 * s_sh)) $((4 * s_sh))" ;;
        3) want="$((2 * s_sh + 2 * s_live)) $((2 * s_sh)) $((4 * s_sh))" ;;
    esac
    got="$(cat_of "$s_f" params) $(cat_of "$s_f" grads) $(cat_of "$s_f" optimizer_master)"
    [ "$got" = "$want" ] && [ "$(cat_of "$s_f" optimizer_m)" = "$(cat_of "$s_f" optimizer_master)" ] &&
        [ "$(cat_of "$s_f" optimizer_v)" = "$(cat_of "$s_f" optimizer_master)" ] && ok ||
        bad "$s_f: stage $s_st N = $s_n: params, grads, master are $got; by hand $want"
}
# model PSI V C L NH KV F E: the live gather of stage 3 is the largest unit:
# the final norm and lm_head (V C + C), or a block (its norms, attention and
# MLP, or E experts and a router): 405B's and Mixtral's blocks are larger
for m in "llama3-8b 8030261248 128256 4096 32 32 8 14336 0" \
         "llama3-70b 70553706496 128256 8192 80 64 8 28672 0" \
         "mixtral-8x7b 46702792704 32000 4096 32 32 8 14336 8" \
         "llama3.1-405b 405853388800 128256 16384 126 128 8 53248 0"; do
    set -- $m
    f=$1 psi=$2 V=$3 C=$4 NH=$6 KV=$7 F=$8 E=$9
    D=$((C / NH))
    live=$((V * C + C))
    if [ "$E" -gt 0 ]; then mlp=$((E * 3 * F * C + E * C)); else mlp=$((3 * F * C)); fi
    blk=$((2 * C + 2 * C * C + 2 * KV * D * C + mlp))
    [ "$blk" -gt "$live" ] && live=$blk
    for n in 8 64; do
        for st in 0 1 2 3; do
            # shellcheck disable=SC2086 # EX is a list of options
            "$ZS" plan --hf-config "$HF/$f.json" $EX --stage $st --dp $n --json >"$T/$f.$n.$st.json" \
                2>/dev/null || { bad "$f: plan of stage $st on $n failed"; continue; }
            states "$T/$f.$n.$st.json" "$psi" "$n" "$st" "$live"
        done
        # optimizer offload: master, m, v (and the gradient shard) leave the
        # device; with the parameters' offload only the live gather stays
        # shellcheck disable=SC2086
        "$ZS" plan --hf-config "$HF/$f.json" $EX --stage 3 --dp $n --offload-optimizer cpu \
            --offload-param cpu --json >"$T/off.json" 2>/dev/null
        got="$(cat_of "$T/off.json" params) $(cat_of "$T/off.json" grads) $(cat_of "$T/off.json" optimizer_m)"
        [ "$got" = "$((2 * live)) 0 0" ] && ok ||
            bad "$f N = $n, offload: device params, grads, m are $got; by hand $((2 * live)) 0 0"
    done
done

# GQA: 8 key/value heads of 64 against 64 (MHA) in Llama 3 70B, 2 (NH - KV)
# D C per block; the untied head of Llama 3 8B against a tied one, V C
psi_of() { "$ZS" plan --hf-config "$HF/$1.json" 2>/dev/null | sed -n 's/^model: \([0-9]*\) parameters.*/\1/p'; }
[ $(( $(psi_of llama3-70b-mha) - $(psi_of llama3-70b) )) -eq $((80 * 2 * (64 - 8) * 128 * 8192)) ] && ok ||
    bad "llama3-70b MHA - GQA: $(psi_of llama3-70b-mha) - $(psi_of llama3-70b), by hand $((80 * 2 * 56 * 128 * 8192))"
[ $(( $(psi_of llama3-8b) - $(psi_of llama3-8b-tied) )) -eq $((128256 * 4096)) ] && ok ||
    bad "llama3-8b untied - tied: $(psi_of llama3-8b) - $(psi_of llama3-8b-tied), by hand $((128256 * 4096))"

# the page's numbers are the commands' (docs/plan-numbers.sh runs them)
if ZEROSIM=$ZS sh "$srcdir/docs/plan-numbers.sh" "$T/numbers.txt" >"$T/numbers.log" 2>&1; then ok
else bad "docs/plan-numbers.sh failed:"; cat "$T/numbers.log"; fi
if sh "$srcdir/labs/check-page.sh" "$srcdir/docs/planner.md" "$T/numbers.txt" >"$T/page.log" 2>&1; then ok
else bad "docs/planner.md quotes numbers the planner no longer gives:"; cat "$T/page.log"; fi
# ... and the comparison's model states at N = 64 in stage 3 are 16Ψ/N and
# the live gather (2 bytes a parameter), by hand: GQA and MHA hold the same
# live unit (the norm and lm_head, V C + C), tied and untied too
for v in llama3-70b:gqa llama3-70b-mha:mha llama3-8b:untied llama3-8b-tied:tied; do
    f=${v%%:*} t=${v##*:}
    case $f in llama3-70b*) live=$((128256 * 8192 + 8192)) ;; *) live=$((128256 * 4096 + 4096)) ;; esac
    want=$(awk -v p="$(psi_of "$f")" -v l="$live" 'BEGIN { printf "%.2f", (16 * p / 64 + 2 * l) / 1e9 }')
    grep -q "^ex_${t}_states $want$" "$T/numbers.txt" && ok ||
        bad "$f: 16Ψ/64 + 2 live is $want GB, numbers say $(grep "ex_${t}_states" "$T/numbers.txt")"
done

# --- Llama 3.1 405B as trained: TP 8 x PP 16 x DP 128 --------------------
# a block's TP shard: two norms whole (2C), q and o (2 C C / 8), k and v one
# key/value head each (8 heads / 8: 2 D C), the MLP (3 F C / 8); 126 blocks
# over 16 stages (the first 14 hold 8, the last two 7); the first stage adds
# the vocabulary-parallel embedding (V/8 rows), the last the norm and lm_head
"$ZS" plan --hf-config "$HF/llama3.1-405b.json" --seq 8192 --micro-batch 1 --grad-accum 16 \
    --precision bf16 --stage 2 --tp 8 --pp 16 --dp 128 --sequence-parallel \
    --checkpoint-activations every:1 --device-memory 80GB --json >"$T/l405.json" 2>"$T/l405.err" ||
    { bad "405B at TP 8 x PP 16 x DP 128 did not plan"; cat "$T/l405.err"; }
C=16384
blk=$((2 * C + 2 * C * C / 8 + 2 * 128 * C + 3 * 53248 * C / 8))
# shellcheck disable=SC2017 # integer division first, as the plan counts
want="$((8 * blk + 128256 / 8 * C)) $(i=1; while [ $i -le 13 ]; do printf '%s ' $((8 * blk)); i=$((i + 1)); done)$((7 * blk)) $((7 * blk + C + 128256 / 8 * C))"
got=$(sed -n '/"stage_params"/,/\]/p' "$T/l405.json" | sed -n 's/^ *\([0-9][0-9]*\),*$/\1/p' | tr '\n' ' ')
[ "${got% }" = "$want" ] && ok || bad "405B stages hold $got; by hand $want"
grep -q '"fits": true' "$T/l405.json" && ok || bad "405B at TP 8 x PP 16 x DP 128 does not fit 80 GB"

# --- 100,000 devices -----------------------------------------------------
"$ZS" plan --hf-config "$HF/llama3.1-405b.json" --seq 8192 --precision bf16 --stage 3 \
    --nodes 12500 --devices-per-node 8 --json >"$T/100k.json" 2>/dev/null ||
    bad "405B on 12,500 nodes of 8 did not plan"
[ "$(key "$T/100k.json" dp)" = 100000 ] && [ "$(key "$T/100k.json" padded_params)" = 405853400000 ] &&
    [ "$(cat_of "$T/100k.json" optimizer_m)" = $((4 * 4058534)) ] && ok ||
    bad "100,000 devices: dp $(key "$T/100k.json" dp), padded $(key "$T/100k.json" padded_params)"
refuse -q -m "the planner takes at most 16777216" plan --params 1e12 --stage 3 --nodes 1048576 \
    --devices-per-node 4096
refuse -q -m "the planner takes at most 16777216" plan --arch gpt --layers 2 --hidden 64 --heads 4 \
    --vocab 100 --seq 16 --tp 8 --pp 2 --dp 16777216

finish
