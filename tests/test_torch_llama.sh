#!/bin/sh
# PyTorch as the independent reference for the Llama family: zerosim trains
# three AdamW steps on a token file on 2 ranks, dumping the initial state
# (step 0) and each step under Hugging Face's Llama names; a plain-PyTorch
# Llama (tests/torch_llama_oracle.py: RMSNorm, rotate_half RoPE with its
# table in float64, GQA by repeating key/value heads, SwiGLU) starts from
# the step-0 parameters, reads each step's tokens, and runs in float64 and
# in float32. Checked, per step, for the loss, the gradient norm, the
# gradients and the parameters after AdamW: zerosim's largest distance to
# float64 PyTorch (each tensor's relative to its largest value) is at most
# 2x float32 PyTorch's own (or 2 float32 ulps); measured, zerosim against
# float32 PyTorch, over the three runs and steps:
#   grad.   3.9e-7 .. 1.8e-6 against 4.3e-7 .. 2.2e-6 (at most 1.2x)
#   param.  2.1e-6 .. 4.0e-6 against 2.7e-6 .. 5.4e-6
#   loss    equal after rounding to float32 but one step (1.2e-7 both)
# and `zerosim compare` with the GPT's tolerances (tests/test_torch_oracle.sh).
# Four runs: GQA (4 query heads on 2 key/value heads, untied) at ZeRO
# stage 3, the same with --tp 2 and sequence parallelism, MQA with Qwen2's biases, the head tied, eps 1e-6 and theta
# 500,000 at stage 1, and a Mixtral-style model (4 SwiGLU experts in every
# block, top 2 renormalised, dropless, the load-balancing loss weighed
# 0.05) at stage 3, its experts dumped under Hugging Face's per-expert
# names. Controls: PyTorch with RoPE's interleaved pairs, and the Mixtral
# without its load-balancing loss, must fail. Skipped (77) without torch.
. "$(dirname "$0")/testlib.sh"
PY=${TORCH_PYTHON:-/usr/bin/python3}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "SKIP: $PY cannot import torch (Debian: apt-get install python3-torch)"
    exit 77
fi
ORACLE="$HERE/torch_llama_oracle.py"
"$PY" "$ORACLE" tokens "$T" --vocab 64 || { bad "torch_llama_oracle.py tokens failed"; finish; }
echo '{"optimizer": {"type": "AdamW", "params": {"eps": 1e-6, "betas": [0.9, 0.95]}}}' >"$T/opt.json"
HP="--steps 3 --lr 1e-3 --wd 0.1 --clip 0.1 --adam-eps 1e-6"

# oracle NAME "ZEROSIM OPTIONS" "ORACLE OPTIONS": the run, both PyTorch runs, the checks
oracle() {
    d="$T/$1"
    mkdir -p "$d/z" "$d/t64" "$d/t32"
    sh "$HERE/mpirun.sh" 2 "$ZS" train --config "$T/opt.json" --model llama --layers 2 \
        --hidden 32 --ffn-hidden 48 --seq 16 --vocab 64 --data "$T/tokens.bin" --steps 3 \
        --lr 1e-3 --warmup 0 --min-lr-ratio 1 --weight-decay 0.1 --grad-clip 0.1 \
        --micro-batch 2 --grad-accum 2 --dump-dir "$d/z" --dump-steps 0-3 --quiet $2 \
        </dev/null >"$d/log" 2>&1 || { bad "$1: zerosim failed"; tail -3 "$d/log"; return; }
    for dt in float64 float32; do
        "$PY" "$ORACLE" steps "$d/z" "$d/t${dt#float}" $3 $HP --dtype $dt ||
            { bad "$1: torch_llama_oracle.py $dt failed"; return; }
    done
    echo "  $1:"
    "$PY" "$ORACLE" judge "$d/z" "$d/t64" "$d/t32" --steps 3 --factor 2 && ok ||
        bad "$1: zerosim further from float64 PyTorch than 2x float32 PyTorch"
    for s in 1 2 3; do
        f="step_00000$s.safetensors"
        for c in "loss 1e-6 0" "grad_norm 1e-6 0" "grad. 1e-5 1e-7" "param. 1e-5 1e-6"; do
            set -- $c
            "$ZS" compare "$d/z/$f" "$d/t64/$f" --prefix "$1" --rtol "$2" --atol "$3" \
                >"$T/cmp" 2>&1 && ok || { bad "step $s: $1 not within rtol $2 atol $3";
                                          grep -v ' ok$' "$T/cmp" | head -5; }
        done
    done
}
oracle gqa "--heads 4 --kv-heads 2 --stage 3" "--heads 4 --kv-heads 2"
oracle gqatp "--heads 4 --kv-heads 2 --stage 1 --tp 2 --sequence-parallel" "--heads 4 --kv-heads 2"
oracle mqa "--heads 4 --kv-heads 1 --qkv-bias --tie-embeddings --norm-eps 1e-6 --rope-theta 500000 --stage 1" \
    "--heads 4 --kv-heads 1 --norm-eps 1e-6 --theta 500000"
# the names the dumps carry: the biases, and no lm_head when tied
grep -q 'param.model.layers.0.self_attn.k_proj.bias' "$T/mqa/z/step_000001.safetensors" &&
    ! grep -q 'lm_head' "$T/mqa/z/step_000001.safetensors" && ok ||
    bad "the tied MQA dump's names: no k_proj.bias or an lm_head"

# Mixtral: the objective per micro-batch of 2 sequences (l_aux is per
# micro-batch), the capacity every token (factor 2 = E/k)
MX="--moe-experts 4 --moe-top-k 2 --capacity-factor 2 --aux-loss-coeff 0.05"
oracle moe "--heads 4 --kv-heads 2 --stage 3 $MX" "--heads 4 --kv-heads 2 --micro-batch 2 --top-k 2 --aux 0.05"
grep -q 'param.model.layers.1.block_sparse_moe.experts.3.w2.weight' "$T/moe/z/step_000001.safetensors" &&
    ok || bad "the Mixtral dump's names: no block_sparse_moe.experts.3.w2.weight"
d="$T/moe"
mkdir -p "$d/c64" "$d/c32"
for dt in float64 float32; do
    "$PY" "$ORACLE" steps "$d/z" "$d/c${dt#float}" --heads 4 --kv-heads 2 --micro-batch 2 \
        --top-k 2 --aux 0 $HP --steps 1 --dtype $dt || bad "torch_llama_oracle.py --aux 0 $dt failed"
done
"$PY" "$ORACLE" judge "$d/z" "$d/c64" "$d/c32" --steps 1 >"$T/ctl" 2>&1 &&
    bad "the Mixtral without its load-balancing loss passed the comparison" || ok

# the control: the interleaved rotary pairs are caught
d="$T/gqa"
mkdir -p "$d/p64" "$d/p32"
for dt in float64 float32; do
    "$PY" "$ORACLE" steps "$d/z" "$d/p${dt#float}" --heads 4 --kv-heads 2 $HP --steps 1 \
        --dtype $dt --perturb || bad "torch_llama_oracle.py --perturb $dt failed"
done
"$PY" "$ORACLE" judge "$d/z" "$d/p64" "$d/p32" --steps 1 >"$T/ctl" 2>&1 &&
    bad "the interleaved RoPE passed the comparison" || ok
finish
