#!/bin/sh
# Lab 5, sending less: the default GPT (0.1 M parameters, fp32), ZeRO stage 2
# on 4 ranks, 200 steps, with gradients sent dense, as top-k 1%, as int8 and
# as signs, each with and without error feedback; the bytes each sends per
# step against closed forms, and the loss curves side by side; and top-k
# after 30 dense steps. Writes losses.dat, bytes.dat and losses.png into the
# output folder. --quick: top-k with and without error feedback for 100
# steps, the rest as 2-step phantom runs (bytes only).
. "$(dirname "$0")/../lib.sh"
lab_init "$0" "$@"

N=4
A="--stage 2 --warmup 10"
STEPS=200; [ "$QUICK" -eq 1 ] && STEPS=100

lab_run $N topk $A --steps $STEPS --compression topk:0.01
lab_run $N topk_noef $A --steps $STEPS --compression topk:0.01 --no-error-feedback
for m in none int8 sign; do
    name=$m; [ $m = none ] && name=dense
    if [ "$QUICK" -eq 1 ]; then
        lab_phantom $name --world-size $N $A --steps 2 --compression $m
    else
        lab_run $N $name $A --steps $STEPS --compression $m
        [ $m = none ] || lab_run $N ${m}_noef $A --steps $STEPS --compression $m --no-error-feedback
    fi
done

# bytes per step: one bucket (the program says so), each rank sends each of
# the N-1 others that rank's part of S = Psi/N gradients
buckets=$("$ZS" train --print-program --world-size $N $A --compression topk:0.01 | sed -n '1s/.* \([0-9]*\) buckets.*/\1/p')
lab_check "one gradient bucket (the closed forms below assume it)" lab_eq "$buckets" 1
psi=$(lab_key dense padded_params); S=$((psi / N))
lab_num psi "$(lab_fmt "$psi")"; lab_num shard "$(lab_fmt $S)"
dense=$(lab_traffic dense reduce_scatter)
lab_num dense_bytes "$(lab_fmt "$dense")"
lab_check "dense: reduce-scatter of 4 bytes x (N-1)/N per parameter" lab_eq "$dense" $((4 * psi * (N - 1) / N))
blocks=$(((S + 255) / 256))
k=$(lab_calc %.0f "int(0.01 * $S) + (0.01 * $S > int(0.01 * $S))")
echo "# method bytes_per_step closed_form vs_dense" >"$OUT/bytes.dat"
for m in topk int8 sign; do
    b=$(lab_traffic $m alltoall)
    case $m in
        topk) cf=$(((N - 1) * k * 8)) ;;                      # k = ceil(1% of S) (index, value) pairs
        int8) cf=$(((N - 1) * (S + 4 * blocks))) ;;           # a byte each, an fp32 scale per 256
        sign) cf=$(((N - 1) * ((S + 7) / 8 + 4 * blocks))) ;; # a bit each, an fp32 scale per 256
    esac
    echo "$m $b $cf $(lab_calc %.4f "$b / $dense")" >>"$OUT/bytes.dat"
    lab_num "${m}_bytes" "$(lab_fmt "$b")"
    lab_num "${m}_vs_dense" "$(lab_calc %.1f "$dense / $b")"
    lab_check "$m: $(lab_fmt "$b") bytes per step = the closed form" lab_eq "$b" "$cf"
done
lab_num topk_k "$k"; lab_num blocks "$blocks"
# what compression does not touch: stage 2's allgather of the parameters
ag=$(lab_traffic topk allgather)
lab_num ag_bytes "$(lab_fmt "$ag")"
lab_check "top-k: the parameters' allgather stays dense (= dense run's)" lab_eq "$ag" "$(lab_traffic dense allgather)"
lab_num topk_total_vs_dense "$(lab_calc %.2f "($dense + $ag) / ($(lab_traffic topk alltoall) + $ag)")"

# the losses: mean of the last 20 steps
mean_last() { lab_losses "$1" | tail -20 | awk '{ s += $1 } END { printf "%.4f\n", s / NR }'; }
runs="topk topk_noef"; [ "$QUICK" -eq 1 ] || runs="dense topk topk_noef int8 int8_noef sign sign_noef"
for r in $runs; do lab_num "~loss_$r" "$(mean_last $r)"; done
lab_loss_check "top-k 1%: error feedback ends lower than without (mean of the last 20 losses)" \
    lab_lt "$(mean_last topk)" "$(mean_last topk_noef)"
if [ "$QUICK" -eq 0 ]; then
    lab_loss_check "int8 with error feedback ends within 1% of dense" \
        awk -v a="$(mean_last int8)" -v b="$(mean_last dense)" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 0.01 * b) }'
    # top-k after 30 dense steps (as 1-bit Adam and Deep Gradient Compression start)
    lab_run $N topk_warm $A --steps $STEPS --compression topk:0.01 --compression-warmup 30
    lab_num "~loss_topk_warm" "$(mean_last topk_warm)"
    rw=$(lab_traffic topk_warm reduce_scatter); aw=$(lab_traffic topk_warm alltoall)
    lab_num warm_rs "$(lab_fmt "$rw")"; lab_num warm_a2a "$(lab_fmt "$aw")"
    lab_check "warm-up: 30 of 200 steps send the dense reduce-scatter, 170 the all-to-all (bytes per step on average)" \
        sh -c "[ $rw -eq $(lab_calc %.0f "$dense * 30 / 200") ] && [ $aw -eq $(lab_calc %.0f "$(lab_traffic topk alltoall) * 170 / 200") ]"
    lab_loss_check "top-k with 30 dense steps ends lower than top-k from the start" lab_lt "$(mean_last topk_warm)" "$(mean_last topk)"
    floor=$(lab_key dense loss_floor)
    # real data (--data) has no known floor: none drawn
    if [ "$floor" = null ]; then floor=0; else lab_num loss_floor "$(lab_calc %.4f "$floor")"; fi
    # the curves, one column per run
    for r in $runs; do lab_losses $r >"$OUT/.l_$r"; done
    { echo "# step $runs"
      # shellcheck disable=SC2046
      paste -d ' ' $(for r in $runs; do echo "$OUT/.l_$r"; done) | awk '{ print NR, $0 }'; } >"$OUT/losses.dat"
    for r in $runs; do rm -f "$OUT/.l_$r"; done
    echo "$floor" >"$OUT/floor.txt"
    lab_plot losses.gp losses "floor=$floor"
fi
lab_finish
