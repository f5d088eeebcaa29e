#!/bin/sh
# Lab 8, the pipeline's bubble: an 8-block GPT (hidden 64, 4 heads, sequence
# 32, vocabulary 64, micro-batch 8) cut into P = 4 stages, m = 8
# micro-batches a step, under GPipe, 1F1B and the interleaved schedule (v =
# 2 chunks a rank). Counted: each stage's warm-up forwards and activation
# slots (--print-program), its activation bytes (memory.csv of a phantom
# run) and the ideal bubble (the report's "pipeline"); measured, full mode
# only: each stage's idle fraction (time in receives over the steps' time)
# in real runs on 4 ranks, 5 steps each. Then the groups of a 3D mesh
# (zerosim mesh). Writes slots.dat and slots.png.
. "$(dirname "$0")/../lib.sh"
lab_init "$0" "$@"

P=4; M=8; V=2
GPT="--layers 8 --grad-accum $M --pp $P --warmup 0"

echo "# stage activations_gpipe activations_1f1b activations_interleaved (bytes, rank = stage)" >"$OUT/slots.dat"
for s in gpipe 1f1b interleaved; do
    opt="--pp-schedule $s"; [ "$s" = interleaved ] && opt="$opt --virtual-stages $V"
    # counted: the step program of every stage
    "$ZS" train --print-program $GPT --world-size $P $opt | grep '^# pipeline' >"$OUT/program_$s.txt" ||
        lab_die "zerosim train --print-program $GPT $opt failed"
    r=0
    while [ $r -lt $P ]; do
        line=$(sed -n "$((r + 1))p" "$OUT/program_$s.txt")
        w=$(echo "$line" | sed -n 's/.*warm-up \([0-9]*\),.*/\1/p')
        k=$(echo "$line" | sed -n 's/.*warm-up [0-9]*, \([0-9]*\) activation slot.*/\1/p')
        lab_num "${s}_warmup_$r" "$w"; lab_num "${s}_slots_$r" "$k"
        case $s in
            gpipe) want_w=$M; want_k=$M ;;
            1f1b) want_w=$((P - r - 1)); [ $want_w -gt $M ] && want_w=$M
                  want_k=$((P - r)); [ $want_k -gt $M ] && want_k=$M ;;
            interleaved) want_w=$((2 * (P - r - 1) + (V - 1) * P)); [ $want_w -gt $((M * V)) ] && want_w=$((M * V))
                  want_k=$k ;;
        esac
        lab_check "$s, stage $r: warm-up $w forwards (as the schedule's formula says: $want_w), $k activation slots" \
            test "$w $k" = "$want_w $want_k"
        r=$((r + 1))
    done
    # counted: the bytes (a phantom run of the 4 stages); measured: the idle time
    lab_phantom "phantom_$s" --world-size $P $GPT $opt --steps 1
    ideal=$(sed -n 's/.*"ideal_bubble_fraction": \([0-9.]*\).*/\1/p' "$OUT/phantom_$s/report.json")
    lab_num "${s}_ideal" "$(lab_calc %.3f "$ideal")"
    vv=1; [ "$s" = interleaved ] && vv=$V
    lab_check "$s: the report's ideal bubble is (P-1)/(v m + P-1) = 3/$((vv * M + P - 1))" \
        lab_eq "$(lab_calc %.6f "$ideal")" "$(lab_calc %.6f "($P - 1) / ($vv * $M + $P - 1)")"
    if [ "$QUICK" -eq 0 ]; then
        lab_run $P "$s" $GPT $opt --steps 5
        sed -n 's/.*"idle_fraction": \([0-9.]*\).*/\1/p' "$OUT/$s/report.json" >"$OUT/idle_$s.txt"
        r=0
        while read -r f; do lab_num "~${s}_idle_$r" "$(lab_calc %.2f "$f")"; r=$((r + 1)); done <"$OUT/idle_$s.txt"
    fi
done
r=0
while [ $r -lt $P ]; do
    a=""
    for s in gpipe 1f1b interleaved; do
        b=$(awk -v r=$r '!/^#/ && $1 == r && $2 == "activations" { print $3 }' "$OUT/phantom_$s/memory.csv")
        lab_num "${s}_act_$r" "$(lab_fmt "$b")"; a="$a $b"
    done
    echo "$r$a" >>"$OUT/slots.dat"
    r=$((r + 1))
done
# exercise 1: the fewest micro-batches that bring 1F1B's ideal bubble under 10%
for m in 27 28; do
    lab_phantom "phantom_m$m" --world-size $P --layers 8 --grad-accum $m --pp $P --warmup 0 --steps 1
    lab_num "m${m}_ideal" "$(lab_calc %.4f "$(sed -n 's/.*"ideal_bubble_fraction": \([0-9.]*\).*/\1/p' "$OUT/phantom_m$m/report.json")")"
done
lab_check "1F1B's ideal bubble is under 0.1 at m = 28, not at m = 27" \
    test "$(awk -v a="$(sed -n 's/^m27_ideal //p' "$OUT/numbers.txt")" -v b="$(sed -n 's/^m28_ideal //p' "$OUT/numbers.txt")" 'BEGIN { print (a >= 0.1 && b < 0.1) ? "y" : "n" }')" = y
g0=$(awk '$1 == 0 { print $2 }' "$OUT/slots.dat"); f0=$(awk '$1 == 0 { print $3 }' "$OUT/slots.dat")
lab_num gpipe_over_1f1b_0 "$(lab_calc %.2f "$g0 / $f0")"
lab_check "stage 0 keeps m/P = 2 times the activations under GPipe as under 1F1B" lab_eq "$(lab_calc "$g0 / $f0")" "$((M / P))"

# 3D: 16 ranks as tp 2 x dp 2 x pp 4
"$ZS" mesh --world 16 --tp 2 --pp 4 >"$OUT/mesh.txt" || lab_die "zerosim mesh --world 16 --tp 2 --pp 4 failed"
for g in tp dp pp; do
    lab_num "mesh_${g}_groups" "$(sed -n "s/^$g groups (\([0-9]*\) of.*/\1/p" "$OUT/mesh.txt")"
    lab_num "mesh_${g}_size" "$(sed -n "s/^$g groups ([0-9]* of \([0-9]*\)).*/\1/p" "$OUT/mesh.txt")"
done
lab_num mesh_pp_of_0 "$(sed -n 's/^pp groups ([^)]*): \(\[[0-9,]*\]\).*/\1/p' "$OUT/mesh.txt" | tr -d '[]' | tr , _)"
lab_num mesh_dp_of_0 "$(sed -n 's/^dp groups ([^)]*): \(\[[0-9,]*\]\).*/\1/p' "$OUT/mesh.txt" | tr -d '[]' | tr , _)"
lab_check "every rank of every group is tp + 2(dp + 2 pp) (Megatron's order)" \
    awk '/^(tp|dp|pp) groups/ { g = $1; n = 0
            while (match($0, /\[[0-9,]*\]/)) { s = substr($0, RSTART + 1, RLENGTH - 2); $0 = substr($0, RSTART + RLENGTH)
                k = split(s, a, ","); for (i = 1; i <= k; i++) { r = a[i]; tp = r % 2; dp = int(r / 2) % 2; pp = int(r / 4)
                    key = (g == "tp") ? dp "," pp : (g == "dp") ? tp "," pp : tp "," dp
                    if (i > 1 && key != first) bad = 1; if (i == 1) first = key; seen[g, r]++ } } }
        END { for (r = 0; r < 16; r++) if (seen["tp", r] != 1 || seen["dp", r] != 1 || seen["pp", r] != 1) bad = 1; exit bad }' "$OUT/mesh.txt"
lab_plot slots.gp slots
lab_finish
