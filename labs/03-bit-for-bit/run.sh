#!/bin/sh
# Lab 3, bit for bit: the default GPT (fp32) with a global batch of 24
# samples. Stages 0-3 give the same parameters to the byte; different numbers
# of ranks do not, unless --deterministic sums the gradients as fixed-point
# integers; and --grad-reduce step, which adds the micro-batches' gradients
# in another order, breaks the agreement between stages that deterministic
# mode restores. Writes hashes.txt and bits.png into the output folder.
# Full: 4 ranks and N = 1-4, 20 steps; --quick: stages 0 and 3, N = 1 and 4,
# 3 steps.
. "$(dirname "$0")/../lib.sh"
lab_init "$0" "$@"

GPT="--micro-batch 2 --train-batch-size 24 --warmup 2"
N=4; NS="1 2 3 4"; STEPS=20; STAGES="0 1 2 3"
[ "$QUICK" -eq 1 ] && { NS="1 4"; STEPS=3; STAGES="0 3"; }
A="$GPT --steps $STEPS"

# 1. the stages, on N ranks
for s in $STAGES; do lab_run $N stage$s $A --stage $s; done
# shellcheck disable=SC2034 # not read: the stages are compared by lab_first_diff
h0=$(lab_key stage0 param_hash)
for s in $STAGES; do
    lab_num "hash_s$s" "$(lab_key stage$s param_hash)"
    [ "$s" -eq 0 ] || lab_check "stage $s: every step's parameters equal stage 0's to the byte (N=$N)" \
        lab_eq "$(lab_first_diff stage0 stage$s)" 0
done

# 2. the number of ranks, without and with deterministic mode
for n in $NS; do
    [ "$n" -eq $N ] || lab_run "$n" float_n$n $A --stage 0
    lab_run "$n" det_n$n $A --stage 0 --deterministic
done
for n in $NS; do
    f=float_n$n; [ "$n" -eq $N ] && f=stage0
    lab_num "hash_float_n$n" "$(lab_key $f param_hash)"
    lab_num "hash_det_n$n" "$(lab_key det_n$n param_hash)"
    if [ "$n" -ne 1 ]; then
        d=$(lab_first_diff float_n1 $f)
        lab_num "first_diff_n$n" "$d"
        lab_check "floating point: N=$n's parameters differ from N=1's (first at step $d)" test "$d" -ne 0
        lab_check "deterministic: N=$n's parameters equal N=1's at every step" lab_eq "$(lab_first_diff det_n1 det_n$n)" 0
    fi
done
# how far apart the losses of N=1 and N=$N ended (floating point)
lab_losses float_n1 | tail -1 >"$OUT/.l1"; lab_losses stage0 | tail -1 >"$OUT/.lN"
lab_num loss_float_n1 "$(cat "$OUT/.l1")"; lab_num "loss_float_n$N" "$(cat "$OUT/.lN")"
lab_num loss_reldiff "$(lab_calc %.1e "($(cat "$OUT/.lN") - $(cat "$OUT/.l1")) / $(cat "$OUT/.l1")")"
rm -f "$OUT/.l1" "$OUT/.lN"

# what determinism costs: 8-byte integers on the wire instead of fp32
rsf=$(lab_traffic stage0 reduce_scatter); rsd=$(lab_traffic det_n$N reduce_scatter)
lab_num rs_float "$(lab_fmt "$rsf")"; lab_num rs_det "$(lab_fmt "$rsd")"
pf=$(lab_key stage0 padded_params); pd=$(lab_key det_n$N padded_params)
ga=$((24 / (2 * N)))   # micro-batches per rank per step, each reduced
lab_num grad_accum "$ga"
lab_check "fp32 reduce-scatter: $ga micro-batches x 4 bytes x (N-1)/N per padded parameter ($(lab_fmt "$pf"))" \
    lab_eq "$rsf" "$(lab_calc %.0f "$ga * 4 * $pf * ($N - 1) / $N")"
lab_check "deterministic: $ga x 8 bytes x (N-1)/N per parameter padded to N x 1024 ($(lab_fmt "$pd"))" \
    lab_eq "$rsd" "$(lab_calc %.0f "$ga * 8 * $pd * ($N - 1) / $N")"
lab_num rs_det_ratio "$(lab_calc %.3f "$rsd / $rsf")"
gf=$(lab_mem stage0 grads); gd=$(lab_mem det_n$N grads)
lab_num grads_float "$(lab_fmt "$gf")"; lab_num grads_det "$(lab_fmt "$gd")"
lab_num psi "$(lab_fmt "$(lab_key stage0 num_params)")"
lab_num psi_det "$(lab_fmt "$(lab_key det_n$N padded_params)")"

# 3. what breaks it: stage 0 summing each rank's micro-batches first
# (--grad-reduce step) against stage 3, which reduces every micro-batch
lab_run $N step_float $A --stage 0 --grad-reduce step
lab_run $N step_det $A --stage 0 --grad-reduce step --deterministic
d=$(lab_first_diff stage3 step_float)
lab_num first_diff_step "$d"
lab_check "floating point: stage 0 with --grad-reduce step differs from stage 3 (first at step $d)" test "$d" -ne 0
lab_check "deterministic: stage 0 with --grad-reduce step equals the micro-batch schedule at every step" \
    lab_eq "$(lab_first_diff det_n$N step_det)" 0
lab_num hash_step_float "$(lab_key step_float param_hash)"
lab_num hash_step_det "$(lab_key step_det param_hash)"

# a picture: which runs share their final parameters
{
    echo "# run hash"
    for s in $STAGES; do echo "stage$s(N=$N) $(lab_key stage$s param_hash)"; done
    echo "stage0,step(N=$N) $(lab_key step_float param_hash)"
    for n in $NS; do f=float_n$n; [ "$n" -eq $N ] && f=stage0; echo "float(N=$n) $(lab_key $f param_hash)"; done
    for n in $NS; do echo "det(N=$n) $(lab_key det_n$n param_hash)"; done
    echo "det,step(N=$N) $(lab_key step_det param_hash)"
} >"$OUT/hashes.txt"
awk 'NR > 1 { if (!($2 in id)) id[$2] = ++k; print NR - 2, id[$2], $1, $2 }' "$OUT/hashes.txt" >"$OUT/hashes.dat"
lab_plot bits.gp bits
lab_finish
