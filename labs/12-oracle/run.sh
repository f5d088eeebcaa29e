#!/bin/sh
# Lab 12, checking an implementation against zerosim (the oracle): zerosim
# exports a small GPT's initial weights (2 blocks, hidden 32, 4 heads,
# sequence 16, vocabulary 256) and turns a text into tokens (the GPL-3, byte
# by byte); it trains 3 steps on 2 ranks at ZeRO stage 3, dumping each step;
# the lab's PyTorch GPT (gpt.py) trains from the same weights on the dumps'
# batches, and zerosim compare checks the loss, every gradient and every
# parameter; then the same with a bug planted in gpt.py (LayerNorm eps 1e-3,
# attention without 1/sqrt(head size)): which tensor the comparison names
# first. Writes graddiff.dat and graddiff.png. --quick: one step. Needs
# PyTorch (Debian: python3-torch; TORCH_PYTHON names a python3 that has it):
# without it, one line and exit 77 (skipped).
. "$(dirname "$0")/../lib.sh"
for a in "$@"; do
    case $a in --data|--data=*) LAB=12-oracle lab_die "--data: this lab trains on its own text (the GPL-3, byte by byte); run it without --data" ;; esac
done
lab_init "$0" "$@"

# a python3 that can import torch: TORCH_PYTHON, else /usr/bin/python3
# (Debian's, where python3-torch installs), else the python3 on the PATH
PY=""
for p in ${TORCH_PYTHON:-/usr/bin/python3 python3}; do
    if "$p" -c "import torch" >/dev/null 2>&1; then PY=$p; break; fi
done
if [ -z "$PY" ]; then
    echo "$LAB: PyTorch is not installed (Debian: apt-get install python3-torch; or set TORCH_PYTHON): lab skipped" >&2
    exit 77
fi

TEXT=/usr/share/common-licenses/GPL-3
[ -r "$TEXT" ] || lab_die "no $TEXT to make tokens from (Debian's base-files has it)"
STEPS=3; [ "$QUICK" -eq 1 ] && STEPS=1
SHAPE="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 256 --seed 1"
# AdamW with eps 1e-6 (see the page: the key bias's gradient is rounding noise)
echo '{"optimizer": {"type": "AdamW", "params": {"eps": 1e-6, "betas": [0.9, 0.95]}}}' >"$OUT/adamw.json"
HYPER="--lr 1e-3 --warmup 0 --min-lr-ratio 1 --weight-decay 0.1 --grad-clip 0.1"

# 1. the inputs: initial weights and tokens
# shellcheck disable=SC2086 # SHAPE is words
"$ZS" export $SHAPE --out "$OUT/init.safetensors" >"$OUT/export.log" 2>&1 ||
    { cat "$OUT/export.log" >&2; lab_die "zerosim export failed"; }
"$ZS" tokens "$TEXT" --out "$OUT/tokens.bin" >"$OUT/tokens.log" 2>&1 ||
    { cat "$OUT/tokens.log" >&2; lab_die "zerosim tokens failed on $TEXT"; }
psi=$(sed -n 's/.* \([0-9]*\) parameters, param_hash.*/\1/p' "$OUT/export.log")
ntok=$(sed -n 's/^wrote .*: \([0-9]*\) tokens.*/\1/p' "$OUT/tokens.log")
lab_num psi "$(lab_fmt "$psi")"; lab_num tokens "$(lab_fmt "$ntok")"

# 2. zerosim: 2 ranks, ZeRO stage 3, a global batch of 8 (2 x 2 x 2), dumps
# shellcheck disable=SC2086 # HYPER is words
lab_run 2 zerosim --config "$OUT/adamw.json" --init-from "$OUT/init.safetensors" --data "$OUT/tokens.bin" \
    $HYPER --micro-batch 2 --grad-accum 2 --stage 3 --steps $STEPS --dump-dir "$OUT/zerosim/dumps" --dump-steps "0-$STEPS"

# 3. PyTorch, the model as written and with each bug, on the dumps' batches
echo "$PY $LAB_DIR/gpt.py $OUT/init.safetensors $OUT/zerosim/dumps $OUT/torch --steps $STEPS --variants none,ln-eps,no-scale" >"$OUT/torch.command"
"$PY" "$LAB_DIR/gpt.py" "$OUT/init.safetensors" "$OUT/zerosim/dumps" "$OUT/torch" --steps $STEPS \
    --lr 1e-3 --wd 0.1 --clip 0.1 --eps 1e-6 --variants none,ln-eps,no-scale >"$OUT/torch.log" 2>&1 ||
    { cat "$OUT/torch.log" >&2; lab_die "gpt.py failed"; }

# cmp VARIANT STEP PREFIX RTOL ATOL: zerosim compare into OUT/cmp_VARIANT_STEP_PREFIX.txt; its status
cmp() {
    f=$(printf 'step_%06d.safetensors' "$2")
    "$ZS" compare "$OUT/zerosim/dumps/$f" "$OUT/torch/$1/$f" ${3:+--prefix "$3"} --rtol "$4" --atol "$5" \
        >"$OUT/cmp_$1_$2_${3:-all}.txt" 2>&1
}
# maxabs FILE: the largest max_abs_err of a comparison
maxabs() { awk '!/^#/ && $3 ~ /^[0-9]/ && $3 + 0 > m { m = $3 + 0 } END { printf "%.1e\n", m }' "$1"; }
# bigger A B: the larger of two numbers, as %.1e
bigger() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1e\n", (a + 0 > b + 0) ? a : b }'; }

# 4. the model as written: every step, every tensor within tolerance
s=1; ok=1
while [ $s -le $STEPS ]; do
    cmp none $s "" 1e-5 1e-7 || true
    cmp none $s grad. 1e-5 1e-7 || ok=0
    cmp none $s param. 1e-5 1e-6 || ok=0
    for x in tokens targets lr; do cmp none $s $x 0 0 || ok=0; done
    cmp none $s loss 1e-5 0 || ok=0
    cmp none $s grad_norm 1e-5 0 || ok=0
    s=$((s + 1))
done
ntens=$(awk '!/^#/ && NF >= 4' "$OUT/cmp_none_1_all.txt" | wc -l | tr -d ' ')
ngrad=$(grep -c '^grad\.' "$OUT/cmp_none_1_all.txt")
lab_num tensors "$ntens"; lab_num grads "$ngrad"
lab_check "PyTorch and zerosim: the batches equal exactly, loss and every gradient within rtol 1e-5 (atol 1e-7), every parameter within rtol 1e-5 (atol 1e-6), in each of $STEPS steps" test $ok -eq 1
gmax=0; pmax=0; lmax=0
s=1
while [ $s -le $STEPS ]; do
    gmax=$(bigger "$(maxabs "$OUT/cmp_none_${s}_grad..txt")" "$gmax")
    pmax=$(bigger "$(maxabs "$OUT/cmp_none_${s}_param..txt")" "$pmax")
    lmax=$(bigger "$(awk '$1 == "loss" { print $4 }' "$OUT/cmp_none_${s}_all.txt")" "$lmax")
    s=$((s + 1))
done
lab_num "~max_grad_diff" "$gmax"; lab_num "~max_param_diff" "$pmax"; lab_num "~max_loss_rel" "$lmax"
loss1=$(sed -n 's/^none step 1: loss \([0-9.]*\),.*/\1/p' "$OUT/torch.log")
lab_num "~loss_1" "$loss1"

# 5. the bugs, step 1: the first tensor the comparison names, and how many
for v in ln-eps no-scale; do
    cmp $v 1 "" 1e-5 1e-7 || true
    t=$(echo "$v" | tr - _)
    first=$(awk '/NOT within/ { print $1; exit }' "$OUT/cmp_${v}_1_all.txt")
    lab_num "first_$t" "${first:-none}"
    rel=$(awk '$1 == "loss" { print $4 }' "$OUT/cmp_${v}_1_all.txt")
    lab_num "~loss_rel_$t" "$(lab_calc %.1e "$rel")"
    gbad=$(grep '^grad\.' "$OUT/cmp_${v}_1_all.txt" | grep -c 'NOT within' || true)
    lab_num "grads_off_$t" "$gbad"
    pok=$(grep '^param\.' "$OUT/cmp_${v}_1_all.txt" | grep -c ' ok$' || true)
    lab_num "~params_ok_$t" "$pok"
    lab_check "$v: all $ngrad gradients of step 1 differ from zerosim's" test "$gbad" -eq "$ngrad"
done
lab_check "LayerNorm eps 1e-3: the loss itself differs (the first tensor named is the loss)" \
    test "$(awk '/NOT within/ { print $1; exit }' "$OUT/cmp_ln-eps_1_all.txt")" = loss
lab_check "no attention scale: the loss of step 1 agrees (within 1e-5), the gradient norm does not" \
    test "$(awk '/NOT within/ { print $1; exit }' "$OUT/cmp_no-scale_1_all.txt")" = grad_norm

# 6. the picture: each gradient's largest difference, step 1, per variant
{ echo "# index tensor none ln-eps no-scale (max |zerosim - torch|, step 1)"
  for v in none ln-eps no-scale; do
      awk '/^grad\./ { print $1, $3 }' "$OUT/cmp_${v}_1_all.txt" >"$OUT/.g_$v"
  done
  paste -d ' ' "$OUT/.g_none" "$OUT/.g_ln-eps" "$OUT/.g_no-scale" |
      awk '{ n = $1; sub(/^grad\./, "", n); sub(/\.weight$/, ".w", n); sub(/\.bias$/, ".b", n)
             print NR - 1, n, $2, $4, $6 }'; } >"$OUT/graddiff.dat"
rm -f "$OUT/.g_none" "$OUT/.g_ln-eps" "$OUT/.g_no-scale"
lab_plot graddiff.gp graddiff
lab_finish
