#!/bin/sh
# Lab 1, where the memory goes: one GPT (1.66 M parameters, bf16) trained with
# ZeRO stages 0, 1, 2 and 3 on 4 ranks; rank 0's peak bytes per category
# against the closed forms, a simulated 24 MB device on which stage 0 runs out
# of memory and stage 3 trains, and the memory of one training step over time.
# Writes memory.dat, timeline_s3.dat, memory.png and
# timeline.png into the output folder.
. "$(dirname "$0")/../lib.sh"
lab_init "$0" "$@"

N=4
MODEL="--layers 8 --hidden 128 --heads 4 --seq 32 --vocab 512 --micro-batch 2 --precision bf16"
# two steps: the second is the steady state; the peaks are those of any longer run
STEPS=2
p=2   # bytes per bf16 parameter or gradient
K=12  # AdamW under mixed precision: fp32 master, m and v

# stage 3 always runs for real, on a simulated 24 MB device (24e6 bytes,
# between stage 1's peak and stage 0's), which it fits. With --quick, stages
# 0-2 are phantom runs (the same bytes, no MPI).
lab_bytes $N stage0 $MODEL --stage 0 --steps $STEPS
lab_bytes $N stage1 $MODEL --stage 1 --steps $STEPS
lab_bytes $N stage2 $MODEL --stage 2 --steps $STEPS
lab_run $N stage3 $MODEL --stage 3 --steps $STEPS --device-memory 24MB

psi=$(lab_key stage0 padded_params)
lab_num psi "$(lab_fmt "$psi")"
S=$((psi / N))
lab_num shard "$(lab_fmt $S)"
L=$(lab_key stage3 live_params_peak)
lab_num live "$(lab_fmt "$L")"
# a block's parameters, from the step program (unit 1 is the first block)
block=$("$ZS" train --print-program --world-size $N $MODEL --stage 3 | sed -n 's/.* forward  *unit 1 (\([0-9]*\) params).*/\1/p' | head -1)
lab_num block "$(lab_fmt "$block")"
lab_check "stage 3: L = two blocks (one computed, the next prefetched)" lab_eq "$L" $((2 * block))

echo "# stage params grads optimizer activations comm_buffers workspace total model_states closed_form paper" >"$OUT/memory.dat"
for s in 0 1 2 3; do
    pa=$(lab_mem stage$s params); gr=$(lab_mem stage$s grads); op=$(lab_mem stage$s optimizer)
    ac=$(lab_mem stage$s activations); cb=$(lab_mem stage$s comm_buffers); ws=$(lab_mem stage$s workspace)
    tot=$(lab_mem stage$s total)
    ms=$((pa + gr + op))
    # zerosim's closed forms (README, "The predictions") and the ZeRO paper's
    case $s in
        0) cf=$((p * psi + p * psi + p * S + K * psi)); paper=$(((2 + 2 + K) * psi)) ;;
        1) cf=$((p * psi + p * psi + p * S + K * S)); paper=$((4 * psi + K * psi / N)) ;;
        2) cf=$((p * psi + p * S + K * S)); paper=$((2 * psi + (2 + K) * psi / N)) ;;
        3) cf=$((p * S + p * L + p * S + K * S)); paper=$(((4 + K) * psi / N)) ;;
    esac
    echo "$s $pa $gr $op $ac $cb $ws $tot $ms $cf $paper" >>"$OUT/memory.dat"
    for c in pa:params gr:grads op:optimizer ac:activations cb:comm_buffers ws:workspace tot:total ms:states cf:closed paper:paper; do
        eval v=\$${c%%:*}
        # shellcheck disable=SC2154 # v is set by the eval above
        lab_num "s${s}_${c#*:}" "$(lab_fmt "$v")"
    done
    lab_check "stage $s: measured model states ($(lab_fmt $ms) bytes) = the closed form" lab_eq "$ms" "$cf"
done

a0=$(lab_mem stage0 activations); a3=$(lab_mem stage3 activations)
lab_check "activations are the same in every stage ($(lab_fmt "$a0") bytes)" lab_eq "$a0" "$a3"
ms0=$(awk '$1 == 0 { print $9 }' "$OUT/memory.dat"); ms3=$(awk '$1 == 3 { print $9 }' "$OUT/memory.dat")
lab_num s0_s3_states_ratio "$(lab_calc %.2f "$ms0 / $ms3")"
t0=$(lab_mem stage0 total); t3=$(lab_mem stage3 total)
lab_num s0_s3_total_ratio "$(lab_calc %.2f "$t0 / $t3")"

cap=24000000
t1=$(lab_mem stage1 total)
lab_check "stages 1-3 peak under 24 MB and stage 0 above" sh -c "[ $t1 -lt $cap ] && [ $t3 -lt $cap ] && [ $t0 -gt $cap ]"
lab_check "stage 3 trained on a 24 MB device" test -s "$OUT/stage3/steps.csv"
if lab_try $N oom0 $MODEL --stage 0 --steps 1 --device-memory 24MB; then
    lab_check "stage 0 runs out of memory on a 24 MB device" false
else
    line=$(grep -m1 'out of memory' "$OUT/oom0/log" || true)
    echo "$line" >"$OUT/oom0/line"
    lab_check "stage 0 runs out of memory on a 24 MB device" test -n "$line"
    # the category it names, as the page quotes it
    lab_num oom_category "$(echo "$line" | sed -n 's/.*out of memory[^:]*: \([a-z_]*\) asked for.*/\1/p')"
    lab_num oom_asked "$(lab_fmt "$(echo "$line" | sed -n 's/.* asked for \([0-9]*\) bytes.*/\1/p')")"
    lab_num oom_in_use "$(lab_fmt "$(echo "$line" | sed -n 's/.* with \([0-9]*\) of .*/\1/p')")"
fi

# the timeline of one step of stage 3 (stage 0 allocates nothing during a step)
# shellcheck disable=SC2043 # one stage for now; the loop takes more
for s in 3; do
    { echo "# run ZeRO stage $s, N=$N"; cat "$OUT/stage$s/timeline.csv"; } >"$OUT/timeline_s$s.dat"
done
lab_plot memory.gp memory
lab_plot timeline.gp timeline
lab_finish
