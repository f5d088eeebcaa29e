#!/bin/sh
# 1-bit Adam (optimizer "OneBitAdam", --optimizer onebitadam --freeze-step N;
# docs/onebit.md):
#   - each step equals an independent float64 reference on one rank
#     (tests/onebit_ref.py: exact steps, then the compressed momentum with
#     both errors, variance frozen); a reference with another freeze_step
#     fails;
#   - before the freeze it is Adam without bias correction, hash for hash
#     (a DeepSpeed config of each); after it, it differs from Adam (the
#     check can fail);
#   - after the freeze the momentum's compressed all-reduce moves exactly
#     the hand count's bytes (1 bit per element of the momentum padded to
#     8 x ranks, in an all-to-all and an allgather of (N-1)/N of it) and no
#     reduce-scatter; measured = predicted (the errors in the compression
#     category), on 2 and 3 ranks; phantom = real;
#   - deterministic (the same bytes twice), with fp16, loss scaling,
#     gradient clipping and accumulation from a DeepSpeed config;
#   - resumable: a run saved after the freeze and resumed gives the
#     uninterrupted run's hashes (the worker and server errors are in the
#     checkpoint); an Adam checkpoint does not resume into it;
#   - what is not implemented is refused in one line (0/1 Adam:
#     tests/test_zeroone.sh).
# 1-bit LAMB (optimizer "OneBitLamb", --optimizer onebitlamb): each step
# equals its float64 reference (tests/onebitlamb_ref.py), with and without
# weight decay, and a reference with another freeze_step fails; before the
# freeze it is LAMB without bias correction, hash for hash; its bytes
# after the freeze are 1-bit Adam's (measured = predicted, phantom = real);
# deterministic; resumed after the freeze it gives the uninterrupted run's
# hashes (its fresh variance and coefficients are in the checkpoint).
. "$(dirname "$0")/testlib.sh"
M="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 31 --micro-batch 2 --grad-accum 2 --steps 6 --warmup 0 --quiet"

# 0. the float64 reference on one rank (tests/onebit_ref.py), 4 exact steps
# and 4 compressed; the reference with another freeze_step fails
R="--layers 2 --hidden 16 --heads 2 --seq 8 --vocab 23 --micro-batch 2 --grad-accum 2 --steps 8 --warmup 0 --lr 1e-3 --quiet"
rm -rf "$T/dd"
if "$ZS" train $R --optimizer onebitadam --freeze-step 4 --weight-decay 0.01 --grad-clip 0 \
        --dump-dir "$T/dd" --dump-steps 0-8 >"$T/dd.log" 2>&1; then
    python3 "$HERE/onebit_ref.py" "$T/dd" 8 4 0.9 0.95 1e-8 0.01 >"$T/ref" && ok ||
        { bad "1-bit Adam differs from the float64 reference"; head -5 "$T/ref"; }
    python3 "$HERE/onebit_ref.py" "$T/dd" 8 5 0.9 0.95 1e-8 0.01 >"$T/ref5" &&
        bad "the reference with freeze_step 5 agrees too: the check cannot fail" || ok
else
    bad "zerosim train --optimizer onebitadam --dump-dir failed"; tail -3 "$T/dd.log"
fi
refuse -n 2 -m "freeze" train $M --optimizer onebitadam --freeze-step 2 --dump-dir "$T/d2" \
    --dump-steps 0-6

# 0b. 1-bit LAMB's float64 reference, with weight decay and without
for wd in 0.01 0; do
    rm -rf "$T/dl"
    if "$ZS" train $R --optimizer onebitlamb --freeze-step 4 --weight-decay $wd --grad-clip 0 \
            --dump-dir "$T/dl" --dump-steps 0-8 >"$T/dl.log" 2>&1; then
        python3 "$HERE/onebitlamb_ref.py" "$T/dl" 8 4 0.9 0.95 1e-8 $wd 10 0.01 0.9 4 0.5 0.1 \
            >"$T/lref" && ok || { bad "1-bit LAMB (wd $wd) differs from the float64 reference"; head -5 "$T/lref"; }
        python3 "$HERE/onebitlamb_ref.py" "$T/dl" 8 5 0.9 0.95 1e-8 $wd 10 0.01 0.9 4 0.5 0.1 \
            >"$T/lref5" && bad "the 1-bit LAMB reference with freeze_step 5 agrees too" || ok
    else
        bad "zerosim train --optimizer onebitlamb --dump-dir failed"; tail -3 "$T/dl.log"
    fi
    zs_fast && break
done

# 1. the exact steps are Adam's without bias correction
cat >"$T/adam.cfg" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
 "optimizer": {"type": "Adam", "params": {"lr": 3e-3, "betas": [0.9, 0.999], "eps": 1e-8,
               "weight_decay": 0.01, "bias_correction": false}}}
JSON
sed 's/"type": "Adam"/"type": "OneBitAdam"/; s/"bias_correction": false/"freeze_step": 100, "cuda_aware": false, "comm_backend_name": "mpi"/' \
    "$T/adam.cfg" >"$T/ob100.cfg"
sed 's/"freeze_step": 100/"freeze_step": 2/' "$T/ob100.cfg" >"$T/ob2.cfg"
zs_run adam 2 $M --config "$T/adam.cfg" && zs_run ob100 2 $M --config "$T/ob100.cfg" &&
    { [ "$(hashes "$T/ob100.json")" = "$(hashes "$T/adam.json")" ] && ok ||
          bad "1-bit Adam before its freeze differs from Adam without bias correction"; }
if zs_run ob2 2 $M --config "$T/ob2.cfg"; then
    python3 -c "
import json, sys
a = json.load(open('$T/adam.json'))['param_hashes']
b = json.load(open('$T/ob2.json'))['param_hashes']
sys.exit(len(a) != 6 or a[:2] != b[:2] or any(x == y for x, y in zip(a[2:], b[2:])))" && ok ||
        bad "1-bit Adam with freeze_step 2 is not Adam's for 2 steps and different after"
fi

# ... and 1-bit LAMB's are LAMB's without bias correction
sed 's/"type": "Adam"/"type": "Lamb"/' "$T/adam.cfg" >"$T/lamb.cfg"
sed 's/"type": "Adam"/"type": "OneBitLamb"/; s/"bias_correction": false/"freeze_step": 100, "coeff_beta": 0.9, "factor_max": 4.0, "cuda_aware": false/' \
    "$T/adam.cfg" >"$T/ol100.cfg"
zs_run lamb 2 $M --config "$T/lamb.cfg" && zs_run ol100 2 $M --config "$T/ol100.cfg" &&
    { [ "$(hashes "$T/ol100.json")" = "$(hashes "$T/lamb.json")" ] && ok ||
          bad "1-bit LAMB before its freeze differs from LAMB without bias correction"; }

# 2. the bytes after the freeze, by hand, and measured = predicted
for n in 2 3; do
    zs_run b$n "$n" $M --optimizer onebitadam --freeze-step 2 || continue
    measured_is_predicted "1-bit Adam on $n ranks" "$T/b$n"
    P=$(key "$T/b$n.json" num_params)
    awk -v P="$P" -v N="$n" -v L="$n ranks" '
        BEGIN { q = 8 * N; np = int((P + q - 1) / q) * q; sign = (N - 1) * np / (8 * N)
                pad = int((P + N - 1) / N) * N; dense = (N - 1) * pad * 4 / N; GA = 2 }
        $1 == 0 && $3 == "all" && $2 == "alltoall" { a = $5 }
        $1 == 0 && $3 == "all" && $2 == "allgather" { g = $5 }
        $1 == 0 && $3 == "all" && $2 == "reduce_scatter" { r = $5 }
        END { bad = a != 4 * sign || g != 2 * dense + 4 * sign || r != 2 * GA * dense
              printf "%s: per step %d bytes exact (%d reduce-scatters and an allgather), " \
                     "%d compressed; one exchange %.2fx fewer\n", L, (GA + 1) * dense, GA,
                     2 * sign, dense / sign
              if (bad) printf "FAIL-HAND %s: alltoall %s allgather %s reduce_scatter %s\n", L, a, g, r
              exit bad }' "$T/b$n/comm.csv" >"$T/hand$n" && ok ||
        { bad "1-bit Adam's bytes differ from the hand count"; cat "$T/hand$n"; }
    zs_fast && break
done
awk '$2 == "compression" && $3 > 0 { f = 1 } END { exit !f }' "$T/b2/memory.csv" && ok ||
    bad "1-bit Adam's error buffers are not in the memory report"
phantom_same b2 2 --optimizer onebitadam --freeze-step 2
# 1-bit LAMB's exchange is 1-bit Adam's: the same bytes of every op
if zs_run lb2 2 $M --optimizer onebitlamb --freeze-step 2; then
    measured_is_predicted "1-bit LAMB on 2 ranks" "$T/lb2"
    for op in alltoall allgather reduce_scatter; do
        a=$(awk -v o=$op '$1 == 0 && $3 == "all" && $2 == o { print $5 }' "$T/b2/comm.csv")
        b=$(awk -v o=$op '$1 == 0 && $3 == "all" && $2 == o { print $5 }' "$T/lb2/comm.csv")
        [ "$a" = "$b" ] && ok || bad "1-bit LAMB's $op bytes $b, 1-bit Adam's $a"
    done
    phantom_same lb2 2 --optimizer onebitlamb --freeze-step 2
    zs_run lb2b 2 $M --optimizer onebitlamb --freeze-step 2 &&
        { [ "$(hashes "$T/lb2.json")" = "$(hashes "$T/lb2b.json")" ] && ok ||
              bad "1-bit LAMB is not deterministic"; }
fi
# plan = run: the momentum, variance and both error buffers; the plan's
# step after the freeze moves the run's compressed bytes per step
"$ZS" plan --arch gpt --layers 2 --hidden 32 --heads 4 --seq 16 --vocab 31 --micro-batch 2 \
    --grad-accum 2 --dp 2 --optimizer onebitadam --json >"$T/plan.json" &&
    plan_is_run "plan 1-bit Adam" "$T/plan.json" "$T/b2" || bad "plan --optimizer onebitadam failed"

# 3. deterministic, with fp16, clipping and accumulation from a DeepSpeed config
cat >"$T/fp16.cfg" <<'JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
 "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 16},
 "optimizer": {"type": "OnebitAdam", "params": {"lr": 3e-3, "freeze_step": 2,
               "weight_decay": 0.0, "bias_correction": false, "cuda_aware": false,
               "comm_backend_name": "nccl"}}}
JSON
F="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 31 --steps 6 --warmup 0 --quiet"
M0=$M
M=$F
zs_run f1 2 --config "$T/fp16.cfg" && zs_run f2 2 --config "$T/fp16.cfg" &&
    { [ "$(hashes "$T/f1.json")" = "$(hashes "$T/f2.json")" ] && ok ||
          bad "1-bit Adam fp16 is not deterministic"; }
[ -s "$T/f1.json" ] && measured_is_predicted "1-bit Adam fp16" "$T/f1"
M=$M0

# an image set whose border pixels are always 0: their weights' variance is
# 0 at the freeze and their momentum stays 0 (1-bit signs cannot say 0)
if [ -d /usr/share/datasets/fashion-mnist ] && ! zs_fast; then
    zs_run mnist 2 --model mlp --input-dim 784 --widths 300,100 --classes 10 \
        --data fashion-mnist --micro-batch 64 --steps 40 --lr 1e-3 --warmup 100 --quiet \
        --optimizer onebitadam --freeze-step 20 &&
        { python3 -c "
import json, math, sys
r = json.load(open('$T/mnist.json'))
sys.exit(not all(x is not None and math.isfinite(x) for x in r['losses']) or r['losses'][-1] > 2.2)" && ok ||
              bad "1-bit Adam on Fashion-MNIST diverged"; }
fi

# 4. resumed after the freeze: the uninterrupted run's bytes
rm -rf "$T/ck"
if zs_run full 2 $M --optimizer onebitadam --freeze-step 2 --steps 6 --save-dir "$T/ck" \
        --save-every 4; then
    zs_run res 2 $M --optimizer onebitadam --freeze-step 2 --steps 6 \
        --resume "$T/ck/global_step4" &&
        python3 -c "
import json, sys
a = json.load(open('$T/full.json'))['param_hashes'][4:]
b = json.load(open('$T/res.json'))['param_hashes']
sys.exit(a != b or len(b) != 2)" && ok || bad "1-bit Adam resumed at step 4 differs from the uninterrupted run"
    refuse -n 2 -m "optimizer" train $M --optimizer adamw --stage 0 --steps 6 \
        --resume "$T/ck/global_step4"
fi

# ... and 1-bit LAMB, resumed after its freeze
rm -rf "$T/lck"
if zs_run lfull 2 $M --optimizer onebitlamb --freeze-step 2 --steps 6 --save-dir "$T/lck" \
        --save-every 4; then
    zs_run lres 2 $M --optimizer onebitlamb --freeze-step 2 --steps 6 \
        --resume "$T/lck/global_step4" &&
        python3 -c "
import json, sys
a = json.load(open('$T/lfull.json'))['param_hashes'][4:]
b = json.load(open('$T/lres.json'))['param_hashes']
sys.exit(a != b or len(b) != 2)" && ok || bad "1-bit LAMB resumed at step 4 differs from the uninterrupted run"
fi

# 5. refusals
refuse -n 2 -m "stage 0" train $M --optimizer onebitadam --stage 1
refuse -n 2 -m "OneBitAdam" train $M --optimizer onebitadam --tp 2
refuse -m "compression" train $M --optimizer onebitadam --compression sign
refuse -m "OneBitAdam" plan --config "$T/ob2.cfg" --convention paper --dp 8 --layers 2 \
    --hidden 32 --heads 4 --seq 16 --vocab 64
refuse -n 2 -m "OneBitLamb" train $M --optimizer onebitlamb --stage 2
refuse -n 2 -m "OneBitLamb" train $M --optimizer onebitlamb --tp 2
sed 's/"type": "OneBitAdam"/"type": "OneBitLamb"/; s/"freeze_step": 2/"freeze_step": 2, "factor_min": 5.0/' \
    "$T/ob2.cfg" >"$T/olbad.cfg"
refuse -m "factor_min" train $M --config "$T/olbad.cfg"
sed 's/"freeze_step": 2/"freeze_step": 2, "amsgrad": true/' "$T/ob2.cfg" >"$T/ams.cfg"
refuse -m "amsgrad" train $M --config "$T/ams.cfg"
finish
