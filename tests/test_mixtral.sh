#!/bin/sh
# Real runs of Mixtral-style models (src/model/llama_moe.c: every Llama
# block's MLP is 4 SwiGLU experts behind a top-2 router, a capacity that
# drops choices): ZeRO stages byte-identical on 2 ranks, every category and
# the all-to-alls measured = predicted, expert parallelism (--ep 2, --ep 4,
# in --ep 1's layout and DeepSpeed's) byte-identical to --ep 1 on the same
# ranks, deterministic mode across N = 1, 2, 4, plan = phantom = real,
# activation checkpointing exact, a checkpoint's resume exact, bf16, the
# tiny Mixtral of tests/hf/mixtral-tiny.json (dropless, as Hugging Face's)
# through --hf-config, weight files under Mixtral's names (round trips in
# every stage and --ep layout, sharded too; a checkpoint written as
# transformers writes one, by tests/hf_llama_files.py, loads with its
# config.json and, with torch, gives PyTorch's loss), pipeline stages
# byte-identical to --pp 1 (with tensor parallelism:
# tests/test_moe_tp.sh). The gradients against
# finite differences are tests/check_model.c's (test_mixtral_gradients).
. "$(dirname "$0")/testlib.sh"

M="--model llama --layers 2 --hidden 16 --heads 4 --kv-heads 2 --ffn-hidden 24 --seq 8 --vocab 17 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0 --lr 1e-2 --moe-experts 4 --moe-top-k 2 --capacity-factor 0.5 --min-capacity 1 --aux-loss-coeff 0.05 --quiet"
P="--arch llama --layers 2 --hidden 16 --heads 4 --kv-heads 2 --ffn-hidden 24 --seq 8 --vocab 17 --micro-batch 2 --grad-accum 2 --moe-experts 4 --moe-top-k 2 --capacity-factor 0.5"

# all_to_alls NAME: rank 0's expert-parallel all-to-alls in run NAME: calls
# and bytes sent
all_to_alls() { awk '$1 == 0 && $2 == "ep" && $3 == "alltoall" { print $4, $5 }' "$T/$1/comm_groups.csv"; }

# stage 3, and stage 1 with --ep 2, byte-identical, accounting; --ep 2's
# all-to-alls as predicted and by hand: 4 per MoE block and
# micro-batch (2 blocks x 2 micro-batches x 3 steps: 48), each of the
# (E, Cap, C) buffer, capacity ceil(16 tokens / 4 experts x 0.5 x 2) = 4:
# 4 x 4 x 16 floats = 1024 bytes, of which a rank sends half; none at --ep 1
train_hashes s3 2 --stage 3 && measured_is_predicted "mixtral stage 3" "$T/s3"
train_hashes e2 2 --stage 1 --ep 2 && same_hashes e2 s3 &&
    measured_is_predicted "mixtral --ep 2" "$T/e2"
[ "$(all_to_alls e2)" = "48 24576.000" ] && ok ||
    bad "mixtral --ep 2: all-to-alls (calls, bytes) $(all_to_alls e2), not 48 24576.000"
[ -z "$(all_to_alls s3)" ] && ok || bad "mixtral --ep 1: made all-to-alls"
# pipeline stages with experts: byte-identical to --pp 1 on one rank
# (tests/test_pipeline_moe.sh checks the rest)
train_hashes p1 1 && train_hashes pp2 2 --pp 2 && same_hashes pp2 p1

# weight files under Mixtral's names (MixtralForCausalLM): export writes the
# router and each expert's w1/w2/w3, --shard-size shards them, and
# export -> --init-from -> export is byte-identical from a file or a folder
# of shards, in every stage, on 1-4 ranks, with --ep in both layouts;
# training from the file is training from the seed with --ep 2
W="--model llama --layers 2 --hidden 16 --heads 4 --kv-heads 2 --ffn-hidden 24 --seq 8 --vocab 17 --moe-experts 4 --moe-top-k 2"
"$ZS" export $W --seed 3 --out "$T/mx.safetensors" >"$T/mx.log" 2>&1 &&
    grep -q "4 experts (top 2) in every block" "$T/mx.log" && ok || { bad "mixtral export"; cat "$T/mx.log"; }
hjson=$(dd if="$T/mx.safetensors" bs=1 skip=8 count=6000 2>/dev/null | tr -d ' ')
for want in '"model.layers.1.block_sparse_moe.gate.weight":{"dtype":"F32","shape":[4,16]' \
            '"model.layers.0.block_sparse_moe.experts.3.w1.weight":{"dtype":"F32","shape":[24,16]' \
            '"model.layers.1.block_sparse_moe.experts.0.w2.weight":{"dtype":"F32","shape":[16,24]' \
            '"model.layers.0.block_sparse_moe.experts.2.w3.weight":{"dtype":"F32","shape":[24,16]' \
            '"moe_top_k":"2"'; do
    echo "$hjson" | grep -qF "$want" && ok || bad "mixtral header lacks $want"
done
echo "$hjson" | grep -q 'mlp\.' && bad "mixtral file holds dense mlp tensors" || ok
mkdir -p "$T/mxs"
"$ZS" export --init-from "$T/mx.safetensors" --shard-size 4KB --out "$T/mxs/model.safetensors" \
    >"$T/mx.log" 2>&1 && [ -f "$T/mxs/model.safetensors.index.json" ] &&
    "$ZS" export --init-from "$T/mxs" --out "$T/mx2.safetensors" >>"$T/mx.log" 2>&1 &&
    cmp -s "$T/mx.safetensors" "$T/mx2.safetensors" && ok ||
    { bad "mixtral shards: the round trip differs"; cat "$T/mx.log"; }
for nsp in "2 1 --ep 2" "4 3 --ep 2 --ep-layout deepspeed" "1 0" "2 2" "2 3" "4 2 --ep 4" \
    "4 0 --ep 2 --ep-layout deepspeed" "4 1 --ep 4 --ep-layout deepspeed"; do
    set -- $nsp; n=$1; st=$2; shift 2
    sh "$HERE/mpirun.sh" "$n" "$ZS" export --init-from "$T/mxs" --stage "$st" "$@" \
        --out "$T/mxr.safetensors" </dev/null >"$T/mx.log" 2>&1 &&
        cmp -s "$T/mx.safetensors" "$T/mxr.safetensors" && ok ||
        { bad "mixtral N=$n stage $st $*: the round trip differs"; tail -2 "$T/mx.log"; }
    zs_fast && [ "$n$st" = 43 ] && break
done
zs_run mxi 2 $M --steps 1 --seed 3 --stage 2 --ep 2 --init-from "$T/mxs" &&
    zs_run mxd 2 $M --steps 1 --seed 3 --stage 2 --ep 2 &&
    [ -n "$(hashes "$T/mxi.json")" ] && [ "$(hashes "$T/mxi.json")" = "$(hashes "$T/mxd.json")" ] && ok ||
    bad "mixtral --ep 2: --init-from seed 3's file differs from --seed 3"
# the GPT's experts have no GPT-2 names: refused before training, --ep too
refuse -n 2 -o "$T/g.safetensors" -m "weight files hold dense GPT-2 models only" \
    train --layers 2 --hidden 16 --heads 4 --seq 8 --vocab 17 --moe-experts 4 --ep 2 --steps 1 \
    --export "$T/g.safetensors"
# experts the file does not hold, or other ones, are refused in one line
"$ZS" export ${W%% --moe-experts*} --out "$T/dense.safetensors" >/dev/null 2>&1
refuse -o "$T/x.safetensors" -m "holds a Llama with moe-experts 0, but the command line gives 4" \
    export --init-from "$T/dense.safetensors" --moe-experts 4 --out "$T/x.safetensors"
refuse -o "$T/x.safetensors" -m "holds a Llama with moe-experts 4, but the command line gives 8" \
    export --init-from "$T/mx.safetensors" --moe-experts 8 --out "$T/x.safetensors"

# make check's fast form stops here (docs/testing.md)
zs_fast && finish

# plan = phantom = real, without and with expert parallelism
"$ZS" plan $P --stage 3 --dp 2 --json >"$T/s3.plan.json" 2>"$T/s3.plan.err" &&
    plan_is_run "mixtral plan stage 3" "$T/s3.plan.json" "$T/s3" ||
    bad "mixtral plan stage 3 failed: $(cat "$T/s3.plan.err")"
"$ZS" plan $P --stage 1 --dp 2 --ep 2 --json >"$T/e2.plan.json" 2>"$T/e2.plan.err" &&
    plan_is_run "mixtral plan --ep 2" "$T/e2.plan.json" "$T/e2" ||
    bad "mixtral plan --ep 2 failed: $(cat "$T/e2.plan.err")"
phantom_same s3 2 --stage 3
phantom_same e2 2 --stage 1 --ep 2

# the other stages, and activation checkpointing: the same bytes
for st in 0 1 2; do
    train_hashes "s$st" 2 --stage "$st" && same_hashes "s$st" s3
done
train_hashes ck 2 --stage 3 --checkpoint-activations every:1 && same_hashes ck s3 &&
    measured_is_predicted "mixtral every:1" "$T/ck"

# 4 ranks: --ep 2 and --ep 4 in --ep 1's layout (the experts' gradients
# sent home) give the bytes of --ep 1 on the same ranks, as --ep 4 in
# DeepSpeed's (deterministic mode: each source's gradients apart) does in
# deterministic mode; DeepSpeed's layout on request (the sources summed in
# one pass: close to --ep 1, not its bytes) is byte-identical across stages
train_hashes f1 4 --stage 2 --grad-accum 1
train_hashes fd1 4 --stage 0 --grad-accum 1 --deterministic
for c in "f2:--ep 2:2:f1" "f4:--ep 4:2:f1" "fdd:--ep 4 --deterministic:3:fd1" \
    "fd:--ep 2 --ep-layout deepspeed:3:" "fd0:--ep 2 --ep-layout deepspeed:1:fd"; do
    IFS=: read -r name opts st ref <<EOC
$c
EOC
    train_hashes "$name" 4 --stage "$st" --grad-accum 1 $opts &&
        measured_is_predicted "mixtral $opts stage $st" "$T/$name" &&
        { [ -z "$ref" ] || same_hashes "$name" "$ref"; }
done
phantom_same fd 4 --stage 3 --grad-accum 1 --ep 2 --ep-layout deepspeed

# deterministic mode: one global batch of 4 micro-batches gives the same
# bytes on N = 1, 2 (--ep 2) and 4 (--ep 4)
train_hashes d1 1 --deterministic --grad-accum 4
train_hashes d2 2 --deterministic --grad-accum 2 --stage 2 --ep 2 && same_hashes d2 d1
train_hashes d4 4 --deterministic --grad-accum 1 --stage 3 --ep 4 && same_hashes d4 d1

# a checkpoint saved at step 2 and resumed to step 3 ends at the
# uninterrupted run's parameters, at stage 2 and at stage 3 with --ep 2
# (DeepSpeed's layout: the expert store's shards)
for c in "2:" "3:--ep 2"; do
    st=${c%%:*} opts=${c#*:}
    zs_run "save$st" 2 $M --stage "$st" $opts --save-every 2 --save-dir "$T/ck$st" &&
        zs_run "resumed$st" 2 $M --stage "$st" $opts --resume "$T/ck$st/global_step2" &&
        { [ "$(key "$T/resumed$st.json" param_hash)" = "$(key "$T/s2.json" param_hash)" ] && ok ||
              bad "mixtral stage $st $opts: resumed to $(key "$T/resumed$st.json" param_hash), uninterrupted $(key "$T/s2.json" param_hash)"; }
done

# bf16: stages agree, accounting holds
train_hashes b0 2 --precision bf16 --stage 0 && train_hashes b3 2 --precision bf16 --stage 3 \
    --ep 2 && same_hashes b3 b0 && measured_is_predicted "mixtral bf16 --ep 2" "$T/b3"

# Hugging Face's Mixtral (num_local_experts, num_experts_per_tok): dropless
# (the capacity is every token), stages byte-identical
H="--hf-config $HERE/hf/mixtral-tiny.json --seq 8 --micro-batch 2 --steps 3 --quiet"
zs_run h0 2 $H --stage 0 && zs_run h3 2 $H --stage 3 --ep 2 &&
    { [ "$(hashes "$T/h3.json")" = "$(hashes "$T/h0.json")" ] && ok ||
          bad "mixtral-tiny: stage 3 --ep 2 differs from stage 0"; } &&
    measured_is_predicted "mixtral-tiny --ep 2" "$T/h3"
sed -n '/"moe_routing"/,/^  \]/p' "$T/h0.json" | grep -q '"dropped": [1-9]' &&
    bad "mixtral-tiny: dropped tokens" || ok

# a Mixtral checkpoint as transformers writes it (tests/hf_llama_files.py:
# sharded, a sorted weight_map, rotary_emb.inv_freq buffers, no head counts
# nor top-k in it) loads with its config.json: the step-0 parameters are
# its tensors bit for bit, and with torch the step's loss (2 micro-batches
# of 2 rows on 2 ranks, dropless, top 2 renormalised, the load-balancing
# term weighed 0.02) is PyTorch's, while one batch of 4 rows (another
# load-balancing term) is not; without its config.json the top-k it does
# not say is refused in one line
PY=$(command -v python3 || true)
TPY=${TORCH_PYTHON:-/usr/bin/python3}
[ -n "$PY" ] || { echo "SKIP: no python3: Mixtral checkpoints written as transformers writes them"; finish; }
HFW="$HERE/hf_llama_files.py"
"$PY" "$HFW" tokens "$T/tok.bin"
"$PY" "$HFW" write "$T/hfm" --experts 4 --top-k 2 --shard-bytes 20000 --inv-freq ||
    bad "hf_llama_files.py write --experts failed"
mkdir -p "$T/hz"
sh "$HERE/mpirun.sh" 2 "$ZS" train --init-from "$T/hfm" --hf-config "$T/hfm/config.json" \
    --data "$T/tok.bin" --steps 1 --micro-batch 2 --stage 2 --dump-dir "$T/hz" --dump-steps 0-1 \
    --quiet </dev/null >"$T/hz.log" 2>&1 || { bad "train from the Mixtral checkpoint failed"; cat "$T/hz.log"; }
"$PY" "$HFW" same "$T/hfm" "$T/hz/step_000000.safetensors" >"$T/hz.log" && ok ||
    { bad "mixtral: the step-0 parameters are not the checkpoint's"; cat "$T/hz.log"; }
if "$TPY" -c "import torch" >/dev/null 2>&1; then
    "$TPY" "$HFW" loss "$T/hfm" "$T/hz/step_000001.safetensors" --micro-batch 2 && ok ||
        bad "mixtral: the loss is not PyTorch's"
    "$TPY" "$HFW" loss "$T/hfm" "$T/hz/step_000001.safetensors" --micro-batch 4 >/dev/null &&
        bad "control: one batch of 4 rows gave the same loss" || ok
else
    echo "SKIP: $TPY cannot import torch: the Mixtral loss against PyTorch is not checked"
fi
refuse -o "$T/x.safetensors" -m "does not say the router's top-k .*give --moe-top-k" \
    export --init-from "$T/hfm" --heads 4 --out "$T/x.safetensors"
"$PY" "$HFW" write "$T/hfm1" --experts 4 --top-k 1 # one file, no inv_freq buffers
"$ZS" export --init-from "$T/hfm1" --heads 4 --moe-top-k 1 --out "$T/hm.safetensors" >"$T/hm.log" 2>&1 &&
    grep -q "4 experts (top 1)" "$T/hm.log" &&
    "$ZS" compare "$T/hm.safetensors" "$T/hfm1" --rtol 0 --atol 0 >/dev/null 2>&1 && ok ||
    bad "mixtral: --heads 4 --moe-top-k 1 export of a transformers-style checkpoint differs"
finish
