#!/bin/sh
# Lab 7, slicing the model: a 4-block GPT (hidden 64, 4 heads, sequence 32,
# vocabulary 64, micro-batch 8, fp32) with tensor parallelism t = 1, 2 and
# 4, with and without sequence parallelism: the parameters each rank holds,
# the tensor-parallel collectives per step counted from the run's ledger
# (comm.csv, comm_groups.csv; a 2-block run beside the 4-block one gives the
# count per block), and the activations per rank against the closed form
# and Korthikanti et al.'s. Writes slicing.dat and slicing.png. Full: real
# runs on 1, 2 and 4 ranks, 3 steps each; --quick: phantom runs of the same
# ranks, one step (the same bytes and counts).
. "$(dirname "$0")/../lib.sh"
lab_init "$0" "$@"

B=8; S=32; C=64; NH=4; V=64
GPT="--hidden $C --heads $NH --seq $S --vocab $V --micro-batch $B --warmup 0"
STEPS=3; [ "$QUICK" -eq 1 ] && STEPS=1

# name ranks layers extra-options
for run in "t1 1 4" "t2 2 4" "t4 4 4" "t2_sp 2 4 --sequence-parallel" "t4_sp 4 4 --sequence-parallel" \
           "t2_l2 2 2" "t2_sp_l2 2 2 --sequence-parallel"; do
    set -- $run; name=$1; n=$2; l=$3; shift 3
    lab_bytes "$n" "$name" $GPT --layers "$l" --tp "$n" --steps $STEPS "$@"
    lab_check "$name: every category equals its prediction on every rank (memory.csv)" \
        awk '!/^#/ && $4 != -1 && $3 != $4 { bad = 1 } END { exit bad }' "$OUT/$name/memory.csv"
done

# tp_calls NAME OP: rank 0's calls of OP per step in the tensor-parallel group
tp_calls() {
    steps=$(awk '!/^#/ { print $7; exit }' "$OUT/$1/run.csv")
    awk -v op="$2" -v s="$steps" '!/^#/ && $1 == 0 && $2 == "tp" && $3 == op { print $4 / s; f = 1; exit }
        END { if (!f) print 0 }' "$OUT/$1/comm_groups.csv"
}
# tp_bytes NAME OP: rank 0's bytes of OP per step in the tensor-parallel group
tp_bytes() {
    steps=$(awk '!/^#/ { print $7; exit }' "$OUT/$1/run.csv")
    awk -v op="$2" -v s="$steps" '!/^#/ && $1 == 0 && $2 == "tp" && $3 == op { printf "%.0f\n", $5 / s; f = 1; exit }
        END { if (!f) print 0 }' "$OUT/$1/comm_groups.csv"
}
# phase_calls NAME OP PHASE: rank 0's calls of OP per step in a phase (comm.csv;
# these runs have no data-parallel all-reduce, so every all-reduce is TP's)
phase_calls() {
    steps=$(awk '!/^#/ { print $7; exit }' "$OUT/$1/run.csv")
    awk -v op="$2" -v ph="$3" -v s="$steps" '!/^#/ && $1 == 0 && $2 == op && $3 == ph { print $4 / s; f = 1; exit }
        END { if (!f) print 0 }' "$OUT/$1/comm.csv"
}

# 1. what TP shards: the parameters on each rank
L=4
for t in 1 2 4; do
    p=$(($(lab_mem "t$t" params) / 4))
    lab_num "params_t$t" "$(lab_fmt "$p")"
    # split by t: the vocabulary's embedding rows and each block's QKV, output
    # projection, MLP weights and column-parallel biases; whole on every rank:
    # the position embedding, the LayerNorms and the row-parallel biases
    lab_check "t = $t: the parameters on a rank are (VC + L(12C^2 + 7C))/t + TC + 6LC + 2C" \
        lab_eq "$p" $(( (V * C + L * (12 * C * C + 7 * C)) / t + S * C + 6 * L * C + 2 * C ))
done
lab_num split_params "$(lab_fmt $((V * C + L * (12 * C * C + 7 * C))))"
lab_num whole_params "$(lab_fmt $((S * C + 6 * L * C + 2 * C)))"

# 2. the all-reduces: per step, by phase, and per block (4 blocks - 2 blocks) / 2
ar4=$(tp_calls t2 allreduce); ar2=$(tp_calls t2_l2 allreduce)
fw4=$(phase_calls t2 allreduce forward); fw2=$(phase_calls t2_l2 allreduce forward)
bw4=$(phase_calls t2 allreduce backward); bw2=$(phase_calls t2_l2 allreduce backward)
per_block=$(lab_calc "($ar4 - $ar2) / 2")
lab_num ar_l4 "$ar4"; lab_num ar_l2 "$ar2"; lab_num ar_per_block "$per_block"
lab_num ar_fw_l4 "$fw4"; lab_num ar_bw_l4 "$bw4"
lab_num ar_fw_block "$(lab_calc "($fw4 - $fw2) / 2")"; lab_num ar_bw_block "$(lab_calc "($bw4 - $bw2) / 2")"
lab_num ar_outside "$(lab_calc "$ar4 - 4 * $per_block")"
lab_check "four TP all-reduces per block and micro-batch, two forward and two backward" \
    test "$per_block $(lab_calc "($fw4 - $fw2) / 2")" = "4 2"
# sequence parallelism: all-gathers and reduce-scatters per block
ag4=$(tp_calls t2_sp allgather); ag2=$(tp_calls t2_sp_l2 allgather)
rs4=$(tp_calls t2_sp reduce_scatter); rs2=$(tp_calls t2_sp_l2 reduce_scatter)
lab_num sp_ag_block "$(lab_calc "($ag4 - $ag2) / 2")"; lab_num sp_rs_block "$(lab_calc "($rs4 - $rs2) / 2")"
lab_num sp_ag_l4 "$ag4"; lab_num sp_rs_l4 "$rs4"; lab_num sp_ar_l4 "$(tp_calls t2_sp allreduce)"
lab_check "with SP each all-reduce of a block becomes one all-gather and one reduce-scatter (4 of each)" \
    test "$(lab_calc "($ag4 - $ag2) / 2") $(lab_calc "($rs4 - $rs2) / 2")" = "4 4"
# the bytes: TP's all-reduces against SP's gathers and scatters
for t in 2 4; do
    ar=$(tp_bytes "t$t" allreduce)
    sp=$(( $(tp_bytes "t${t}_sp" allgather) + $(tp_bytes "t${t}_sp" reduce_scatter) ))
    lab_num "ar_bytes_t$t" "$(lab_fmt "$ar")"; lab_num "sp_bytes_t$t" "$(lab_fmt "$sp")"
    # the loss's 3 all-reduces of B x T floats are not part of the blocks' pairs
    loss=$(lab_calc "2 * ($t - 1) / $t * 3 * $B * $S * 4")
    lab_num "loss_bytes_t$t" "$(lab_fmt "$loss")"
    lab_check "t = $t: SP's all-gathers + reduce-scatters carry the bytes of TP's all-reduces, the loss's left out" \
        lab_eq "$sp" "$(lab_calc "$ar - $loss")"
    lab_check "t = $t: TP's all-reduces carry 2(t-1)/t x (BTC(2 + 4L) + 3BT) x 4 bytes" \
        lab_eq "$ar" "$(lab_calc "2 * ($t - 1) / $t * ($B * $S * $C * (2 + 4 * $L) + 3 * $B * $S) * 4")"
done

# 3. activations per rank: measured, zerosim's closed form, Korthikanti et al.
echo "# t params activations_tp activations_sp korthikanti_tp_ratio korthikanti_sp_ratio (bytes; ratios: t = 1's per layer over t's)" >"$OUT/slicing.dat"
BT=$((B * S))
for t in 1 2 4; do
    a=$(lab_mem "t$t" activations)
    cf=$(lab_calc "4 * (2*$BT*$C + $L*(4*$BT*$C + 12*$BT*$C/$t + 4*$BT + $B*$NH/$t*$S*$S) + $BT*($V/$t + 3))")
    lab_num "act_t$t" "$(lab_fmt "$a")"
    lab_check "t = $t: the activations equal zerosim's closed form" lab_eq "$a" "$cf"
    blk=$(lab_calc "4 * (4*$BT*$C + 12*$BT*$C/$t + 4*$BT + $B*$NH/$t*$S*$S)")
    lab_num "block_t$t" "$(lab_fmt "$blk")"
    # Korthikanti et al., per layer: sbh(34 + 5as/h) at t = 1, sbh(10 + 24/t + 5as/(ht)) with TP
    k=$(lab_calc "$S*$B*$C*(10 + 24/$t + 5*$NH*$S/($C*$t))")
    [ "$t" -eq 1 ] && k=$(lab_calc "$S*$B*$C*(34 + 5*$NH*$S/$C)")
    lab_num "kor_t$t" "$(lab_fmt "$k")"
    if [ "$t" -eq 1 ]; then
        asp=$a; ksp=$k; sblk=$blk
    else
        asp=$(lab_mem "t${t}_sp" activations)
        BTl=$((BT / t))
        cf=$(lab_calc "4 * ($BTl*$C + $L*(2*$BT*$C + 2*$BTl*$C + 12*$BT*$C/$t + 4*$BTl + $B*$NH/$t*$S*$S) + $BT*$C + 2*$BTl + $BT*($V/$t + 1))")
        lab_num "act_sp_t$t" "$(lab_fmt "$asp")"
        lab_check "t = $t with SP: the activations equal zerosim's closed form" lab_eq "$asp" "$cf"
        sblk=$(lab_calc "4 * (2*$BT*$C + 2*$BTl*$C + 12*$BT*$C/$t + 4*$BTl + $B*$NH/$t*$S*$S)")
        lab_num "block_sp_t$t" "$(lab_fmt "$sblk")"
        ksp=$(lab_calc "$S*$B*$C/$t*(34 + 5*$NH*$S/$C)")
        lab_num "kor_sp_t$t" "$(lab_fmt "$ksp")"
        lab_num "block_ratio_t$t" "$(lab_calc %.2f "$(lab_calc "4 * (4*$BT*$C + 12*$BT*$C + 4*$BT + $B*$NH*$S*$S)") / $blk")"
        lab_num "block_sp_ratio_t$t" "$(lab_calc %.2f "$(lab_calc "4 * (4*$BT*$C + 12*$BT*$C + 4*$BT + $B*$NH*$S*$S)") / $sblk")"
        lab_num "kor_ratio_t$t" "$(lab_calc %.2f "$(lab_calc "$S*$B*$C*(34 + 5*$NH*$S/$C)") / $k")"
        lab_num "kor_sp_ratio_t$t" "$(lab_calc %.2f "$(lab_calc "$S*$B*$C*(34 + 5*$NH*$S/$C)") / $ksp")"
    fi
    # the planner's Megatron convention gives Korthikanti et al.'s bytes for the L layers
    for sp in "" --sequence-parallel; do
        [ "$t" -eq 1 ] && [ -n "$sp" ] && continue
        "$ZS" plan --arch gpt --convention megatron --layers $L --hidden $C --heads $NH --seq $S --vocab $V \
            --micro-batch $B --tp "$t" --dp 1 $sp >"$OUT/plan_t$t$sp.txt" || lab_die "zerosim plan --convention megatron --tp $t $sp failed"
        pa=$(awk '$1 == "activations" { print $2; exit }' "$OUT/plan_t$t$sp.txt")
        kk=$k; [ -n "$sp" ] && kk=$ksp
        lab_num "plan_act_t$t${sp:+_sp}" "$(lab_fmt "$pa")"
        lab_check "t = $t${sp:+ with SP}: zerosim plan --convention megatron gives L x Korthikanti's layer" lab_eq "$pa" "$(lab_calc "$L * $kk")"
    done
    echo "$t $(lab_mem "t$t" params) $a $asp $k $ksp" >>"$OUT/slicing.dat"
done
lab_check "SP lowers the activations per rank at t = 2 and t = 4" \
    test "$(lab_lt "$(lab_mem t2_sp activations)" "$(lab_mem t2 activations)" && lab_lt "$(lab_mem t4_sp activations)" "$(lab_mem t4 activations)" && echo y)" = y
lab_plot slicing.gp slicing
lab_finish
