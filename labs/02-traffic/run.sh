#!/bin/sh
# Lab 2, what the network carries: the GPT of lab 1 (bf16) with ZeRO stages
# 0-3 on N = 1, 2, 3 and 4 ranks; rank 0's bytes per step per collective
# against the ring's (N-1)/N closed forms; an MLP, where stage 3 sends
# exactly 1.5 times the bytes of stage 0. Writes traffic.dat, mlp.dat and
# traffic.png into the output folder. With --quick the sweep is N = 4 and,
# for stages 0 and 3, N = 2, and every run but the GPT's stage 3 on 4 ranks
# is a phantom run (the same bytes, no MPI).
. "$(dirname "$0")/../lib.sh"
lab_init "$0" "$@"

GPT="--layers 8 --hidden 128 --heads 4 --seq 32 --vocab 512 --micro-batch 2 --precision bf16"
E=$((512 * 128))    # the tied token embedding (vocab x hidden)
MLP="--model mlp --widths 256,256,256 --micro-batch 8 --precision bf16"
p=2
STEPS=2
NS="1 2 3 4"; [ "$QUICK" -eq 1 ] && NS="2 4"

echo "# stage N padded_params reduce_scatter allgather total closed_form" >"$OUT/traffic.dat"
for s in 0 1 2 3; do
    for n in $NS; do
        # --quick: N = 2 for stages 0 and 3 only
        [ "$QUICK" -eq 1 ] && [ "$n" -eq 2 ] && { [ "$s" -eq 1 ] || [ "$s" -eq 2 ]; } && continue
        if [ "$n" -eq 4 ] && [ "$s" -eq 3 ]; then
            lab_run "$n" gpt_s${s}_n$n $GPT --stage $s --steps $STEPS
        else
            lab_bytes "$n" gpt_s${s}_n$n $GPT --stage $s --steps $STEPS
        fi
        d=gpt_s${s}_n$n
        psi=$(lab_key $d padded_params)   # the partition pads to a multiple of N
        nump=$(lab_key $d num_params)
        rs=$(lab_traffic $d reduce_scatter); ag=$(lab_traffic $d allgather)
        # the ring: (N-1)/N of every buffer. Gradients are reduce-scattered
        # and parameters gathered once (stages 0-2: the padded array); stage 3
        # gathers each unit's parameters (unpadded) in forward and again in
        # backward, and the tied embedding once more for the output head
        if [ "$s" -eq 3 ]; then g=$((2 * p * (nump + E))); else g=$((p * psi)); fi
        cf=$(lab_calc %.0f "($p * $psi + $g) * ($n - 1) / $n")
        echo "$s $n $psi $rs $ag $((rs + ag)) $cf" >>"$OUT/traffic.dat"
        lab_check "GPT stage $s, N=$n: reduce-scatter + allgather = $(lab_fmt $((rs + ag))) bytes per step = the closed form" lab_eq $((rs + ag)) "$cf"
        lab_num "s${s}_n${n}_rs" "$(lab_fmt "$rs")"
        lab_num "s${s}_n${n}_ag" "$(lab_fmt "$ag")"
        lab_num "s${s}_n${n}_total" "$(lab_fmt $((rs + ag)))"
    done
done
lab_num psi "$(lab_fmt "$(lab_key gpt_s0_n4 padded_params)")"
lab_num limit "$(lab_fmt $((2 * p * $(lab_key gpt_s0_n4 padded_params))))"
lab_num embedding "$(lab_fmt $E)"
t0=$(awk '$1 == 0 && $2 == 4 { print $6 }' "$OUT/traffic.dat")
for s in 1 2 3; do
    t=$(awk -v s=$s '$1 == s && $2 == 4 { print $6 }' "$OUT/traffic.dat")
    lab_num "ratio_s$s" "$(lab_calc %.4f "$t / $t0")"
    [ "$s" -eq 3 ] && lab_num ratio_s3_extra "$(lab_calc %.4f "$t / $t0 - 1.5")"
done
t3=$(awk '$1 == 3 && $2 == 4 { print $6 }' "$OUT/traffic.dat")
lab_check "GPT, N=4: stage 3 sends more than 1.5x stage 0, by the tied embedding's two extra gathers" \
    lab_eq "$t3" "$(lab_calc %.0f "1.5 * $t0 + 2 * $p * $E * 3 / 4")"
lab_num extra_embedding "$(lab_fmt "$(lab_calc %.0f "2 * $p * $E * 3 / 4")")"

# the MLP has no tied weights: exactly 1.5
echo "# stage N reduce_scatter allgather total" >"$OUT/mlp.dat"
for s in 0 3; do
    lab_bytes 4 mlp_s$s $MLP --stage $s --steps $STEPS
    rs=$(lab_traffic mlp_s$s reduce_scatter); ag=$(lab_traffic mlp_s$s allgather)
    echo "$s 4 $rs $ag $((rs + ag))" >>"$OUT/mlp.dat"
    lab_num "mlp_s${s}_rs" "$(lab_fmt "$rs")"; lab_num "mlp_s${s}_ag" "$(lab_fmt "$ag")"
    lab_num "mlp_s${s}_total" "$(lab_fmt $((rs + ag)))"
done
m0=$(awk '$1 == 0 { print $5 }' "$OUT/mlp.dat"); m3=$(awk '$1 == 3 { print $5 }' "$OUT/mlp.dat")
lab_num mlp_psi "$(lab_fmt "$(lab_key mlp_s0 padded_params)")"
lab_num mlp_ratio "$(lab_calc %.4f "$m3 / $m0")"
lab_check "MLP, N=4: stage 3 traffic / stage 0 traffic = 1.5 exactly" lab_eq "$m3" "$(lab_calc %.0f "1.5 * $m0")"
sc=$(lab_traffic gpt_s0_n4 scalars)
lab_num scalars "$sc"

lab_plot traffic.gp traffic
lab_finish
