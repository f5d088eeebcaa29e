#!/bin/sh
# LAMB (optimizer "Lamb", --optimizer lamb; docs/onebit.md):
#   - each step equals an independent float64 reference of DeepSpeed's
#     FusedLamb (tests/lamb_ref.py) on the dumped parameters and gradients,
#     with the trust ratio clamped at both bounds, from the command line
#     and from a DeepSpeed config; the reference with other bounds fails
#     (the check can fail);
#   - ZeRO stages 0-3 give byte-identical parameters after every step
#     (the trust ratio's sums are taken per shard and added in rank order
#     at every stage), with a parameter count that the ranks do not divide,
#     in fp32 and bf16, and with the optimizer offloaded to the host;
#   - measured = predicted (m and v counted), phantom = real;
#   - a run resumed from a checkpoint (saved in stage 3, resumed in stages
#     3 and 0) gives the uninterrupted run's hashes; an AdamW checkpoint
#     does not resume into LAMB;
#   - the combinations not implemented are refused in one line.
. "$(dirname "$0")/testlib.sh"
M="--layers 2 --hidden 25 --heads 5 --seq 12 --vocab 31 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0 --quiet"
REF="$HERE/lamb_ref.py"

# 1. the reference: command line (default bounds 10 and 0.01, weight decay)
rm -rf "$T/d1"
if "$ZS" train $M --optimizer lamb --grad-clip 0 --weight-decay 0.01 --dump-dir "$T/d1" \
        --dump-steps 0-3 >"$T/d1.log" 2>&1; then
    python3 "$REF" "$T/d1" 3 0.9 0.95 1e-8 0.01 10 0.01 1 >"$T/ref1" && ok ||
        { bad "LAMB differs from the float64 reference"; cat "$T/ref1"; }
    grep -q "clamped [1-9]" "$T/ref1" && ok || bad "no trust ratio reached a bound: $(cat "$T/ref1")"
else
    bad "zerosim train --optimizer lamb failed"; tail -3 "$T/d1.log"
fi

# 2. a DeepSpeed config (bing_bert's bounds, no bias correction), 2 ranks, stage 2
cat >"$T/lamb.json" <<'JSON'
{
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 2,
  "gradient_clipping": 0,
  "zero_optimization": {"stage": 2},
  "optimizer": {
    "type": "Lamb",
    "params": {"lr": 11e-3, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01,
               "bias_correction": false, "max_coeff": 0.3, "min_coeff": 0.05,
               "max_grad_norm": 0, "eps_inside_sqrt": false}
  }
}
JSON
rm -rf "$T/d2"
if sh "$HERE/mpirun.sh" 2 "$ZS" train $M --config "$T/lamb.json" --dump-dir "$T/d2" \
        --dump-steps 0-3 >"$T/d2.log" 2>&1; then
    python3 "$REF" "$T/d2" 3 0.9 0.999 1e-6 0.01 0.3 0.05 0 >"$T/ref2" && ok ||
        { bad "LAMB from a DeepSpeed config differs from the reference"; cat "$T/ref2"; }
    python3 "$REF" "$T/d2" 3 0.9 0.999 1e-6 0.01 10 0.01 0 >"$T/ref2b" &&
        bad "the reference with other bounds agrees too: the check cannot fail" || ok
else
    bad "zerosim train --config lamb.json failed"; tail -3 "$T/d2.log"
fi

# 3. byte-identical across the stages
for case in "3 fp32" "2 bf16"; do
    set -- $case
    ref=
    for stage in 0 1 2 3; do
        zs_run "s$1$2$stage" "$1" $M --optimizer lamb --precision "$2" --stage "$stage" || continue
        h=$(hashes "$T/s$1$2$stage.json")
        [ -n "$ref" ] || ref=$h
        [ "$h" = "$ref" ] && ok || bad "LAMB $2 on $1 ranks: stage $stage differs from stage 0"
    done
    zs_fast && break
done
zs_run off 3 $M --optimizer lamb --stage 2 --offload-optimizer cpu &&
    { [ "$(hashes "$T/off.json")" = "$(hashes "$T/s3fp322.json")" ] && ok ||
          bad "LAMB with the optimizer on the host differs from stage 2 on the device"; }

# 4. measured = predicted, phantom = real
zs_run acc 3 $M --optimizer lamb --stage 3 --precision bf16 &&
    measured_is_predicted "LAMB stage 3 bf16" "$T/acc"
awk '$2 == "optimizer_v" && $3 > 0 { f = 1 } END { exit !f }' "$T/acc/memory.csv" && ok ||
    bad "LAMB's v is not in the memory report"
phantom_same acc 3 --optimizer lamb --stage 3 --precision bf16
# plan = run (the zerosim convention counts m and v from the step program)
"$ZS" plan --arch gpt --layers 2 --hidden 25 --heads 5 --seq 12 --vocab 31 --micro-batch 2 \
    --grad-accum 2 --dp 3 --optimizer lamb --stage 3 --precision bf16 --json >"$T/plan.json" &&
    plan_is_run "plan LAMB stage 3 bf16" "$T/plan.json" "$T/acc" || bad "plan --optimizer lamb failed"

# 5. checkpoints: m and v saved, the optimizer named
rm -rf "$T/ck"
if zs_run full 2 $M --optimizer lamb --stage 3 --steps 4 --save-dir "$T/ck" --save-every 2; then
    for st in 3 0; do
        zs_run res$st 2 $M --optimizer lamb --stage "$st" --steps 4 \
            --resume "$T/ck/global_step2" || continue
        python3 -c "
import json, sys
a = json.load(open('$T/full.json'))['param_hashes'][2:]
b = json.load(open('$T/res$st.json'))['param_hashes']
sys.exit(a != b or len(b) != 2)" && ok || bad "LAMB resumed at step 2 in stage $st differs from the uninterrupted run"
    done
    refuse -n 2 -m "optimizer" train $M --optimizer adamw --stage 3 --steps 4 \
        --resume "$T/ck/global_step2"
fi

# 6. refusals
refuse -n 2 -m "LAMB" train $M --optimizer lamb --tp 2
refuse -m "LAMB" train $M --optimizer lamb --stage 2 --offload-optimizer nvme --nvme-path "$T"
refuse -m "LAMB" plan --config "$T/lamb.json" --convention paper --dp 8 --layers 2 --hidden 32 \
    --heads 4 --seq 16 --vocab 64
sed 's/"eps_inside_sqrt": false/"eps_inside_sqrt": true/' "$T/lamb.json" >"$T/bad1.json"
refuse -m "eps_inside_sqrt" train $M --config "$T/bad1.json"
sed 's/"max_grad_norm": 0/"max_grad_norm": 1.0/' "$T/lamb.json" >"$T/bad2.json"
refuse -m "gradient_clipping" train $M --config "$T/bad2.json"
sed 's/"min_coeff": 0.05/"min_coeff": 0.5/' "$T/lamb.json" >"$T/bad3.json"
refuse -m "min_coeff" train $M --config "$T/bad3.json"
finish
