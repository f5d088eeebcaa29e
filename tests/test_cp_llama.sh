#!/bin/sh
# Context parallelism (--cp C) for the Llama family (src/model/llama.c with
# src/model/ring_attention.c): the rotary embedding at each chunk's true
# positions (rank i holds chunks i and 2C - 1 - i, not contiguous) and
# grouped-query attention in the ring (the keys and values of a rank's
# key/value heads passed round, each query head attending to its group).
# Real runs equal to C = 1 within a stated tolerance, byte-identical across
# ZeRO stages for a fixed mesh, measured = predicted in every category and
# for the ring's point-to-point bytes (and those by hand), phantom = real,
# plan = run; with tensor parallelism (key/value heads split, and
# replicated where tp > KV), checkpointing and the pipeline. A Mixtral
# model with --cp stays refused. The quick form (make check): C = 2
# against C = 1, stage 3 against stage 0, the ring's bytes and phantom =
# real.
. "$(dirname "$0")/testlib.sh"
HF=$HERE/hf

refuse -m "mixture of experts" train --phantom --world-size 2 --model llama --layers 2 \
    --hidden 32 --heads 4 --kv-heads 2 --seq 16 --vocab 64 --micro-batch 2 --steps 1 --quiet \
    --cp 2 --moe-experts 4
refuse -m "not a multiple of 8" train --phantom --world-size 4 --model llama --layers 2 \
    --hidden 32 --heads 4 --seq 12 --vocab 64 --micro-batch 2 --steps 1 --quiet --cp 4

# GQA: 4 query heads of 8 over 2 key/value heads; F = 48
M="--model llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --ffn-hidden 48 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0 --quiet"
# |parameter difference| after 3 steps: measured 1.7e-7 (cp 2) and
# 1.8e-7 (cp 4) (the online softmax adds in another order); the losses
# equal to the printed digits
TOL=1e-6
zs_run c1 1 $M --stage 0 --export "$T/c1.safetensors" || finish
for c in 2 4; do
    zs_run "cp$c" "$c" $M --cp "$c" --stage 0 --export "$T/cp$c.safetensors" || continue
    if "$ZS" compare "$T/c1.safetensors" "$T/cp$c.safetensors" --atol $TOL --rtol 0 \
           >"$T/cmp$c"; then ok; else bad "llama cp $c: parameters differ from C = 1 by more than $TOL"; fi
    awk -v c="$c" '$1 !~ /^#/ && NF >= 5 { if ($3 + 0 > m) m = $3 + 0 }
        END { printf "llama cp %d: largest parameter difference from C = 1 after 3 steps %.3g\n", c, m }' \
        "$T/cmp$c"
    l1=$(sed -n '/"losses"/,/]/p' "$T/c1.json" | grep -o '[0-9][0-9.eE+-]*' | tr '\n' ' ')
    lc=$(sed -n '/"losses"/,/]/p' "$T/cp$c.json" | grep -o '[0-9][0-9.eE+-]*' | tr '\n' ' ')
    echo "$l1 $lc" | awk '{ n = NF / 2; for (i = 1; i <= n; i++) { d = $i - $(i + n)
        if (d < 0) d = -d; if (d > 1e-6) bad = 1 } } END { exit bad || NF != 6 }' && ok ||
        bad "llama cp $c: losses $lc against C = 1's $l1"
    measured_is_predicted "llama cp $c stage 0" "$T/cp$c"
    zs_fast && break
done

# the ring's bytes by hand: per step (3), micro-batch (2) and block (2),
# forward 1 message and backward 2 of B (T/C) 2 KV D floats (B = 2, T/C =
# 8, KV = 2 key/value heads of D = 8): the keys and values of the kv heads
# alone, not of the 4 query heads
sent=$(awk '$1 == 0 && $2 == "send" && $3 == "all" { print $5 }' "$T/cp2/comm.csv")
h=$((3 * 2 * 2 * 3 * (2 * 8 * 2 * 2 * 8 * 4)))
awk -v s="$sent" -v h="$h" 'BEGIN { exit s == "" || s != h }' && ok ||
    bad "llama cp 2: rank 0 sent $sent ring bytes, by hand $h"

stages="1 2 3"
zs_fast && stages=3
for s in $stages; do
    zs_run "cp2s$s" 2 $M --cp 2 --stage "$s" || continue
    [ "$(key "$T/cp2s$s.json" param_hash)" = "$(key "$T/cp2.json" param_hash)" ] && ok ||
        bad "llama cp 2: stage $s's parameters differ from stage 0's"
    measured_is_predicted "llama cp 2 stage $s" "$T/cp2s$s"
done
phantom_same cp2s3 2 --cp 2 --stage 3

# Llama 3.1 405B at 128K (docs/planner.md): TP 8 x CP 16 x PP 16 x DP 8;
# the ring's bytes by hand: 8,192 positions x 2 x 1 key/value head x 128
# x 4 bytes a message, 60 a block and micro-batch (15 forward, 15
# recomputed, 30 backward), 8 blocks on stage 0, 16 micro-batches
L405="--hf-config $HF/llama3.1-405b.json --seq 131072 --micro-batch 1 --grad-accum 16 --precision bf16 --stage 2 --tp 8 --cp 16 --pp 16 --checkpoint-activations every:1"
"$ZS" plan $L405 --dp 8 --device-memory 80GB --json >"$T/l405.json" 2>"$T/l405.err" ||
    { bad "405B at TP 8 x CP 16 x PP 16 x DP 8 did not plan"; cat "$T/l405.err"; }
[ "$(key "$T/l405.json" cp_ring_send_bytes_per_step)" = $((8192 * 2 * 128 * 4 * 60 * 8 * 16)) ] &&
    ok || bad "405B at 128K: ring bytes $(key "$T/l405.json" cp_ring_send_bytes_per_step), by hand $((8192 * 2 * 128 * 4 * 60 * 8 * 16))"
grep -q '"cp_ring_s": [0-9]' "$T/l405.json" && ok || bad "405B at 128K: no ring time in the step time"
zs_fast && finish
# its phantom run at 16,384 ranks: every category equal to the plan, and
# the ring's and the pipeline's bytes sent
"$ZS" train --phantom --world-size 16384 $L405 --steps 1 --quiet --csv "$T/ph405" \
    >"$T/ph405.log" 2>&1 || { bad "405B at 128K: the phantom run failed"; tail -3 "$T/ph405.log"; }
plan_is_run "405B at 128K" "$T/l405.json" "$T/ph405"
sent=$(awk '$1 == 0 && $2 == "send" && $3 == "all" { print $5 }' "$T/ph405/comm.csv")
awk -v s="$sent" -v r="$(key "$T/l405.json" cp_ring_send_bytes_per_step)" \
    -v p="$(sed -n 's/^ *"p2p_send_bytes_per_step": \([0-9]*\).*/\1/p' "$T/l405.json" | head -1)" 'BEGIN { exit s != r + p }' && ok ||
    bad "405B at 128K: the phantom run sent $sent bytes, the plan's ring and pipeline differ"

# activations by the closed form (llama.c's, with T/C positions per rank
# and the ring's statistics, 2 B NH T/C, in place of B NH T^2): B = 2,
# C = 32, L = 2, NH = 4, KV = 2, D = 8, F = 48, V = 64
for c in 1 2 4; do
    d="$T/cp$c"
    [ "$c" = 1 ] && d="$T/c1"
    a=$(awk '$1 == 0 && $2 == "activations" { print $3 }' "$d/memory.csv")
    awk -v a="$a" -v c="$c" 'BEGIN { B = 2; T = 16 / c; Cm = 32; L = 2; NH = 4; KV = 2; D = 8
        F = 48; V = 64; BT = B * T; att = c > 1 ? 2 * B * NH * T : B * NH * T * T
        blk = 6 * BT * Cm + 2 * BT + 2 * BT * KV * D + att + 3 * BT * F
        exit !(a == 4 * (2 * BT * Cm + L * blk + BT * (V + 2))) }' &&
        ok || bad "llama cp $c: activations $a bytes, not the closed form"
done

# with tensor parallelism: tp 2 (the 2 key/value heads split, one a rank)
# and tp 4 (more ranks than key/value heads: each replicated on 2), with
# cp 2; every stage the same bytes, equal to cp 1 at the same tp within the
# tolerance, measured = predicted
for tp in 2 4; do
    zs_run "t$tp" "$tp" $M --tp "$tp" --stage 0 --export "$T/t$tp.safetensors" || continue
    for s in 0 3; do
        zs_run "ct$tp-$s" $((2 * tp)) $M --tp "$tp" --cp 2 --stage "$s" \
            --export "$T/ct$tp-$s.safetensors" || continue
        measured_is_predicted "llama cp 2 tp $tp stage $s" "$T/ct$tp-$s"
    done
    [ "$(key "$T/ct$tp-3.json" param_hash)" = "$(key "$T/ct$tp-0.json" param_hash)" ] && ok ||
        bad "llama cp 2 tp $tp: stage 3's parameters differ from stage 0's"
    "$ZS" compare "$T/t$tp.safetensors" "$T/ct$tp-0.safetensors" --atol $TOL --rtol 0 \
        >"$T/cmpt$tp" && ok || bad "llama cp 2 tp $tp: parameters differ from tp $tp alone by more than $TOL"
done

# activation checkpointing: the recomputed forwards' ring messages counted,
# the parameters unchanged
zs_run ck 2 $M --cp 2 --stage 3 --checkpoint-activations every:1 || finish
measured_is_predicted "llama cp 2 checkpointed" "$T/ck"
[ "$(key "$T/ck.json" param_hash)" = "$(key "$T/cp2.json" param_hash)" ] && ok ||
    bad "llama cp 2: checkpointing changed the parameters"

# the pipeline: cp 2 x pp 2 against pp 2 alone (the losses), measured =
# predicted, phantom = real
zs_run p1 2 $M --pp 2 --stage 1 || finish
zs_run pc 4 $M --pp 2 --cp 2 --stage 1 || finish
l1=$(sed -n '/"losses"/,/]/p' "$T/p1.json" | grep -o '[0-9][0-9.eE+-]*' | tr '\n' ' ')
lc=$(sed -n '/"losses"/,/]/p' "$T/pc.json" | grep -o '[0-9][0-9.eE+-]*' | tr '\n' ' ')
echo "$l1 $lc" | awk '{ n = NF / 2; for (i = 1; i <= n; i++) { d = $i - $(i + n)
    if (d < 0) d = -d; if (d > 1e-6) bad = 1 } } END { exit bad || NF != 6 }' && ok ||
    bad "llama cp 2 pp 2: losses $lc against pp 2's $l1"
measured_is_predicted "llama cp 2 pp 2" "$T/pc"
phantom_same pc 4 --pp 2 --cp 2 --stage 1
phantom_same ck 2 --cp 2 --stage 3 --checkpoint-activations every:1
phantom_same ct4-3 8 --tp 4 --cp 2 --stage 3

# plan = run, and the ring's bytes and its time in the plan
"$ZS" plan --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --ffn-hidden 48 --seq 16 \
    --vocab 64 --micro-batch 2 --grad-accum 2 --dp 1 --tp 4 --cp 2 --stage 3 --json \
    >"$T/plan.json" || bad "plan --arch llama --cp failed"
plan_is_run "plan llama --tp 4 --cp 2" "$T/plan.json" "$T/ct4-3"
ring=$(sed -n 's/.*"cp_ring_send_bytes_per_step": \([0-9]*\).*/\1/p' "$T/plan.json")
sent=$(awk '$1 == 0 && $2 == "send" && $3 == "all" { print $5 }' "$T/ct4-3/comm.csv")
[ -n "$ring" ] && awk -v s="$sent" -v r="$ring" 'BEGIN { exit s != 3 * r }' && ok ||
    bad "plan llama --cp: ring bytes $ring per step, the run sent $sent in 3 steps"
# its time: each message (B (T/C) 2 KVl D floats = 2 x 8 x 2 x 1 x 8 x 4
# = 1,024 bytes at tp 4) alpha + bytes/beta of the default machine's link
# inside a node (5e-6 s, 150e9 B/s; the 8 ranks are one node)
rs=$(sed -n 's/^ *"cp_ring_s": \([0-9.e+-]*\),*$/\1/p' "$T/plan.json")
awk -v t="$rs" -v r="$ring" 'BEGIN { w = r / 1024 * 5e-6 + r / 150e9; d = t - w
    exit t == "" || d > 1e-12 || d < -1e-12 }' && ok ||
    bad "plan llama --cp: ring time $rs s, by hand $ring bytes in 1,024-byte messages"

finish
