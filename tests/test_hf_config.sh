#!/bin/sh
# Hugging Face config.json files (--hf-config, src/config/hfconfig.c) and
# the Llama family's shapes (src/model/llama.c): zerosim plan prints the
# parameter count Hugging Face publishes for each model of tests/hf/, equal
# to a count by hand from the shapes below (written here, not read from
# zerosim); bad files are one line and a non-zero exit; phantom runs equal
# the plan (Llama 3 70B in ZeRO-3 on 1,024 ranks, Mixtral 8x7B, Llama 3.1
# 405B over 16 pipeline stages); a real Llama run is refused while the
# family has no forward.
. "$(dirname "$0")/testlib.sh"
HF=$HERE/hf

# llama_count V C L NH KV F [bias] [experts]: embedding and untied head
# (2 V C), final norm (C); per block two norms (2C), q and o (2 C C), k and
# v (2 KV D C, D = C / NH), the MLP (3 F C), or E experts of it and a
# router (E C); Qwen2's biases C + 2 KV D
llama_count() {
    V=$1 C=$2 L=$3 NH=$4 KV=$5 F=$6 BIAS=${7:-0} E=${8:-0}
    D=$((C / NH))
    if [ "$E" -gt 0 ]; then MLP=$((E * 3 * F * C + E * C)); else MLP=$((3 * F * C)); fi
    BLOCK=$((2 * C + 2 * C * C + 2 * KV * D * C + BIAS * (C + 2 * KV * D) + MLP))
    echo $((2 * V * C + C + L * BLOCK))
}

# count FILE PUBLISHED HAND [ARGS...]: zerosim plan's count of FILE equals
# the published count and the count by hand
count() {
    f=$1 pub=$2 hand=$3
    shift 3
    got=$("$ZS" plan --hf-config "$HF/$f" "$@" 2>"$T/count.err" | sed -n 's/^model: \([0-9]*\) parameters.*/\1/p')
    if [ "$got" = "$pub" ] && [ "$hand" = "$pub" ]; then ok
    else bad "$f: zerosim plan counts '$got', published $pub, by hand $hand"; cat "$T/count.err"; fi
}

count llama2-7b.json 6738415616 "$(llama_count 32000 4096 32 32 32 11008)"
count llama2-13b.json 13015864320 "$(llama_count 32000 5120 40 40 40 13824)"
count llama2-70b.json 68976648192 "$(llama_count 32000 8192 80 64 8 28672)"
count llama3-8b.json 8030261248 "$(llama_count 128256 4096 32 32 8 14336)"
count llama3-70b.json 70553706496 "$(llama_count 128256 8192 80 64 8 28672)"
count llama3.1-405b.json 405853388800 "$(llama_count 128256 16384 126 128 8 53248)"
count mistral-7b-v0.1.json 7241732096 "$(llama_count 32000 4096 32 32 8 14336)"
count mixtral-8x7b.json 46702792704 "$(llama_count 32000 4096 32 32 8 14336 0 8)"
count qwen2-7b.json 7615616512 "$(llama_count 152064 3584 28 28 4 18944 1)"
# GPT-2: tied head, learned positions (1024 x 768), biases, LayerNorms
C=768
count gpt2.json 124439808 $((50257 * C + 1024 * C + 2 * C + 12 * (12 * C * C + 13 * C)))

# the ignored keys are listed, one line, on start-up
"$ZS" plan --hf-config "$HF/llama3-8b.json" >/dev/null 2>"$T/ign.err"
grep -q "ignored (no effect on memory, traffic or arithmetic): bos_token_id, eos_token_id, initializer_range, torch_dtype, transformers_version, use_cache$" "$T/ign.err" &&
    [ "$(wc -l <"$T/ign.err")" -eq 1 ] && ok || bad "plan: the ignored keys: $(cat "$T/ign.err")"

# bad files: one line naming what is wrong, a non-zero exit
printf '{"architectures": ["LlamaForCausalLM"], "hidden_size": 64,\n' >"$T/malformed.json"
refuse -m "not a JSON file (line 2" plan --hf-config "$T/malformed.json"
sed 's/LlamaForCausalLM/FalconForCausalLM/' "$HF/llama2-7b.json" >"$T/arch.json"
refuse -m 'architecture "FalconForCausalLM" is not modelled' plan --hf-config "$T/arch.json"
sed 's/"intermediate_size": 11008, //' "$HF/llama2-7b.json" >"$T/missing.json"
refuse -m '"intermediate_size" is missing' plan --hf-config "$T/missing.json"
sed 's/"num_key_value_heads": 8/"num_key_value_heads": 7/' "$HF/llama3-8b.json" >"$T/kv.json"
refuse -m '"num_key_value_heads" (7) must divide "num_attention_heads" (32)' plan --hf-config "$T/kv.json"
refuse -m '"num_key_value_heads" (7)' train --phantom --world-size 2 --hf-config "$T/kv.json"
sed 's/"rope_type": "llama3"/"rope_type": "yarn"/' "$HF/llama3.1-405b.json" >"$T/yarn.json"
refuse -m '"rope_scaling" of type "yarn" is not modelled' plan --hf-config "$T/yarn.json"
sed 's/"hidden_act": "silu"/"hidden_act": "gelu"/' "$HF/llama2-7b.json" >"$T/act.json"
refuse -m '"hidden_act" "gelu" is not modelled' plan --hf-config "$T/act.json"
# Mistral's window: the context is the window; more is refused
refuse -m "model.sliding_window (4096, sliding_window) is shorter than model.seq (8192)" \
    plan --hf-config "$HF/mistral-7b-v0.1.json" --seq 8192
refuse -m "model.sliding_window (4096, sliding_window)" \
    train --phantom --world-size 2 --hf-config "$HF/mistral-7b-v0.1.json" --seq 8192
refuse -m "kv_heads (2) and the tensor-parallel size (--tp 3)" \
    plan --arch llama --layers 2 --hidden 48 --heads 6 --kv-heads 2 --vocab 48 --seq 8 --tp 3 --dp 1

# the family's experts run (tests/test_mixtral.sh), with tensor
# parallelism too (tests/test_moe_tp.sh): the plan takes them
"$ZS" plan --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --ffn-hidden 48 --seq 8 \
    --vocab 40 --moe-experts 4 --tp 2 --dp 1 >"$T/moetp.txt" 2>&1 && ok ||
    bad "plan of a Mixtral model at --tp 2: $(tail -1 "$T/moetp.txt")"

# phantom = plan: Llama 3 70B, ZeRO-3 on 1,024 ranks, bf16, checkpointing
A="--hf-config $HF/llama3-70b.json --seq 4096 --stage 3 --precision bf16 --micro-batch 1 --checkpoint-activations every:1"
t0=$(date +%s)
if "$ZS" train --phantom --world-size 1024 $A --csv "$T/l70" >"$T/l70.log" 2>&1; then
    measured_is_predicted "llama3-70b phantom" "$T/l70"
    "$ZS" plan $A --dp 1024 --json >"$T/l70.json" 2>/dev/null &&
        plan_is_run "llama3-70b plan" "$T/l70.json" "$T/l70" || bad "llama3-70b: the plan failed"
else
    bad "llama3-70b phantom failed: $(tail -2 "$T/l70.log")"
fi
[ $(($(date +%s) - t0)) -le 30 ] && ok || bad "llama3-70b at 1,024 ranks took more than 30 s"

# make check's fast form stops here (docs/testing.md)
zs_fast && finish

# Mixtral 8x7B: every block's MLP 8 SwiGLU experts, top 2, dropless
A="--hf-config $HF/mixtral-8x7b.json --seq 1024 --stage 2 --precision bf16 --micro-batch 1 --checkpoint-activations every:1"
if "$ZS" train --phantom --world-size 64 $A --csv "$T/mx" >"$T/mx.log" 2>&1; then
    measured_is_predicted "mixtral phantom" "$T/mx"
    "$ZS" plan $A --dp 64 --json >"$T/mx.json" 2>/dev/null &&
        plan_is_run "mixtral plan" "$T/mx.json" "$T/mx" || bad "mixtral: the plan failed"
else
    bad "mixtral phantom failed: $(tail -2 "$T/mx.log")"
fi

# Llama 3.1 405B over 16 pipeline stages (the untied head on the last):
# every rank's memory as predicted; the plan of TP 8 x PP 16 runs
A="--hf-config $HF/llama3.1-405b.json --seq 4096 --pp 16 --stage 1 --precision bf16 --micro-batch 1 --grad-accum 16 --checkpoint-activations every:1"
if "$ZS" train --phantom --world-size 128 $A --csv "$T/l405" >"$T/l405.log" 2>&1; then
    awk '$1 !~ /^#/ && $2 != "total" { n++; if ($3 != $4) { print "FAIL: 405b rank " $1 " " $2 ": " $3 " " $4; b++ } }
         END { exit (b > 0 || n < 11 * 128) }' "$T/l405/memory.csv" && ok ||
        bad "llama3.1-405b --pp 16: measured memory differs from predicted"
    grep -q "tied" "$T/l405/comm.csv" && bad "405b: tied-embedding messages with an untied head" || ok
else
    bad "llama3.1-405b --pp 16 phantom failed: $(tail -2 "$T/l405.log")"
fi
"$ZS" plan --hf-config "$HF/llama3.1-405b.json" --seq 4096 --tp 8 --pp 16 --dp 8 --stage 1 \
    --precision bf16 --micro-batch 1 --grad-accum 16 --checkpoint-activations every:1 \
    --device-memory 80GB >"$T/p405" 2>&1 &&
    grep -q "cluster: 8 data-parallel x 8 tensor-parallel x 16 pipeline = 1024 devices" "$T/p405" &&
    ok || bad "plan of 405B with --tp 8 --pp 16: $(tail -2 "$T/p405")"

finish
