#!/bin/sh
# Lab 4, trading compute for memory: a 16-block GPT (0.8 M parameters, fp32)
# on one rank, with activation checkpointing off, every 1, 2, 4 and 8 blocks,
# and sqrt; the bytes of activations and checkpoints, the blocks recomputed
# per step, and the median step time. Writes checkpointing.dat and
# checkpointing.png into the output folder. Full: 40 steps each; --quick:
# 3 steps and the settings off, every:2 and sqrt (the same bytes).
. "$(dirname "$0")/../lib.sh"
lab_init "$0" "$@"

GPT="--layers 16 --warmup 2"
STEPS=40; SETTINGS="off every:1 every:2 every:4 every:8 sqrt"
[ "$QUICK" -eq 1 ] && { STEPS=3; SETTINGS="off every:2 sqrt"; }

echo "# setting activations checkpoints sum recomputed_blocks median_step_seconds" >"$OUT/checkpointing.dat"
for c in $SETTINGS; do
    name=$(echo "$c" | tr : _)
    lab_run 1 "$name" $GPT --steps $STEPS --checkpoint-activations "$c"
    ac=$(lab_mem "$name" activations); ck=$(lab_mem "$name" checkpoints)
    # the blocks whose forward the step program runs a second time
    rc=$("$ZS" train --print-program $GPT --checkpoint-activations "$c" | grep -c ' recompute$' || true)
    t=$(lab_median_step "$name")
    echo "$c $ac $ck $((ac + ck)) $rc $t" >>"$OUT/checkpointing.dat"
    lab_num "${name}_act" "$(lab_fmt "$ac")"; lab_num "${name}_ckpt" "$(lab_fmt "$ck")"
    lab_num "${name}_sum" "$(lab_fmt $((ac + ck)))"; lab_num "${name}_recomputed" "$rc"
    lab_num "~${name}_seconds" "$t"
    [ "$c" = off ] || lab_check "$c: the parameters equal those without checkpointing at every step" \
        lab_eq "$(lab_first_diff off "$name")" 0
done
off=$(awk '$1 == "off" { print $4 }' "$OUT/checkpointing.dat")
sq=$(awk '$1 == "sqrt" { print $4 }' "$OUT/checkpointing.dat")
lab_num sqrt_saving "$(lab_calc %.2f "$off / $sq")"
# one block's activations (sqrt keeps 4 blocks' worth, every:2 two) and one
# checkpoint (sqrt keeps 3: the inputs of segments 2-4), B x T x C x 4 bytes
blk=$(( ($(lab_mem sqrt activations) - $(lab_mem every_2 activations)) / 2 ))
ck1=$(( $(lab_mem sqrt checkpoints) / 3 ))
lab_num block_act "$(lab_fmt $blk)"; lab_num ckpt_each "$(lab_fmt $ck1)"
lab_check "a checkpoint is B x T x C x 4 = 8 x 32 x 64 x 4 bytes" lab_eq "$ck1" $((8 * 32 * 64 * 4))
lab_num block_over_ckpt "$(lab_calc %.1f "$blk / $ck1")"
lab_check "sqrt keeps at least 3x less activation memory than off" lab_lt "$(lab_calc "3 * $sq")" "$off"
lab_check "sqrt on 16 blocks recomputes 12 blocks, as every:4 does (4 segments of 4)" \
    lab_eq "$(awk '$1 == "sqrt" { print $5 }' "$OUT/checkpointing.dat")" 12
e2=$(awk '$1 == "every:2" { print $5 }' "$OUT/checkpointing.dat")
lab_check "every:K recomputes 16 - K blocks (every:2: 14)" lab_eq "$e2" 14
awk -v off="$(awk '$1 == "off" { print $6 }' "$OUT/checkpointing.dat")" '!/^#/ { printf "%s %.3f\n", $1, $6 / off }' \
    "$OUT/checkpointing.dat" >"$OUT/time_ratio.txt"
while read -r c r; do lab_num "~$(echo "$c" | tr : _)_time_ratio" "$r"; done <"$OUT/time_ratio.txt"
lab_plot checkpointing.gp checkpointing
lab_finish
