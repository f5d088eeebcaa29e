#!/bin/sh
# DeepSpeed-Ulysses (--cp U --cp-attention ulysses, DeepSpeed's
# "sequence_parallel_size"; docs/parallelism.md): the context axis of the
# mesh with the attention done by all-to-alls of the heads around the
# unsplit kernel. Refusals from the compatibility table; real runs of the
# GPT equal to U = 1 within a stated tolerance, byte-identical across ZeRO
# stages for a fixed mesh (with tp too), deterministic, measured =
# predicted (the all-to-alls' bytes, and those by hand), activations by the
# closed form, phantom = real and plan = run; the paper's claim (the bytes
# per rank constant when the sequence and the group grow together) from
# phantom runs. The quick form (make check) runs the refusals, U = 2
# against U = 1, stage 0 against stage 3, and the bytes by hand.
. "$(dirname "$0")/testlib.sh"

# ---- refusals: one line from the compatibility table ---------------------
S="--layers 2 --hidden 32 --heads 4 --vocab 64 --micro-batch 2 --steps 1 --quiet"
U="--cp-attention ulysses"
refuse -m "4 heads do not divide by 1 x 8 = 8" train --phantom --world-size 8 $S --seq 16 --cp 8 $U
refuse -m "4 heads do not divide by 2 x 4 = 8" train --phantom --world-size 8 $S --seq 16 --cp 4 \
    --tp 2 $U
refuse -m "implemented for the GPT" train --phantom --world-size 2 $S --seq 16 --cp 2 $U \
    --model llama
refuse -m "chunks 2i and 2i + 1" train --phantom --world-size 2 $S --seq 14 --cp 2 $U
refuse -m "must be ring or ulysses" train --phantom --world-size 2 $S --seq 16 --cp 2 \
    --cp-attention a2a
"$ZS" config-keys --combinations | grep -q "refuse ulysses+heads" && ok ||
    bad "ulysses+heads not in the table"
# DeepSpeed's key: sequence_parallel_size U is --cp U with Ulysses
printf '{"train_micro_batch_size_per_gpu": 2, "sequence_parallel_size": 8}\n' >"$T/ds.json"
refuse -m "4 heads do not divide by 1 x 8" train --phantom --world-size 8 $S --seq 16 \
    --config "$T/ds.json"
printf '{"train_micro_batch_size_per_gpu": 2, "sequence_parallel_size": 0}\n' >"$T/ds0.json"
refuse -m "sequence_parallel_size" train --phantom --world-size 2 $S --seq 16 --config "$T/ds0.json"

# ---- real runs: U = 1 against U = 2 (and 4) ------------------------------
M="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0 --quiet"
# |parameter difference| after 3 steps. The attention is the same kernel on
# the same heads over the same T positions; what differs is the order of
# the gradient sums over positions (each rank adds B T/U rows, ZeRO's
# reduction over dp x cp adds the ranks' parts). Measured 1.44e-6 (U 2)
# and 1.56e-6 (U 4), on the QKV biases, whose key part has a zero gradient
# in exact arithmetic (rounding residue in both runs); every other tensor
# within 5.3e-7. The tolerance is context parallelism's.
TOL=1e-5
zs_run u1 1 $M --stage 0 --export "$T/u1.safetensors" || finish
for u in 2 4; do
    zs_run "u$u" "$u" $M --cp "$u" $U --stage 0 --export "$T/u$u.safetensors" || continue
    if "$ZS" compare "$T/u1.safetensors" "$T/u$u.safetensors" --atol $TOL --rtol 0 \
           >"$T/cmp$u"; then ok; else bad "ulysses $u: parameters differ from U = 1 by more than $TOL"; fi
    awk -v u="$u" '$1 !~ /^#/ && NF >= 5 { if ($3 + 0 > m) m = $3 + 0 }
        END { printf "ulysses %d: largest parameter difference from U = 1 after 3 steps %.3g\n", u, m }' \
        "$T/cmp$u"
    l1=$(sed -n '/"losses"/,/]/p' "$T/u1.json" | grep -o '[0-9][0-9.eE+-]*' | tr '\n' ' ')
    lu=$(sed -n '/"losses"/,/]/p' "$T/u$u.json" | grep -o '[0-9][0-9.eE+-]*' | tr '\n' ' ')
    echo "$l1 $lu" | awk '{ n = NF / 2; for (i = 1; i <= n; i++) { d = $i - $(i + n)
        if (d < 0) d = -d; if (d > 1e-6) bad = 1 } } END { exit bad || NF != 6 }' && ok ||
        bad "ulysses $u: losses $lu against U = 1's $l1"
    measured_is_predicted "ulysses $u stage 0" "$T/u$u"
    zs_fast && break
done

# the all-to-alls' bytes by hand: per step (3 steps), micro-batch (2) and
# block (2), forward and backward 2 calls each, of 4 (U - 1)/U B (T/U) C
# floats in all (B = 2, T = 16, C = 32, U = 2): 4096 bytes per block pass
sent=$(awk '$1 == 0 && $2 == "alltoall" && $3 == "all" { print $5 }' "$T/u2/comm.csv")
calls=$(awk '$1 == 0 && $2 == "alltoall" && $3 == "all" { print $4 }' "$T/u2/comm.csv")
h=$((3 * 2 * 2 * 2 * (4 * 2 * (16 / 2) * 32 * 4 / 2)))
awk -v s="$sent" -v h="$h" 'BEGIN { exit s != h }' && [ "$calls" = $((3 * 2 * 2 * 4)) ] && ok ||
    bad "ulysses 2: rank 0 sent $sent bytes in $calls all-to-alls, by hand $h in 48"
# no ring: Ulysses sends no point-to-point messages
awk '$2 == "send" && $3 == "all" && $4 != 0 { exit 1 }' "$T/u2/comm.csv" && ok ||
    bad "ulysses 2: point-to-point sends recorded"

# stages 0-3 give the same bytes on a fixed mesh; a second run the same
stages="1 2 3"
zs_fast && stages=3
for s in $stages; do
    zs_run "u2s$s" 2 $M --cp 2 $U --stage "$s" || continue
    [ "$(key "$T/u2s$s.json" param_hash)" = "$(key "$T/u2.json" param_hash)" ] && ok ||
        bad "ulysses 2: stage $s's parameters differ from stage 0's"
    measured_is_predicted "ulysses 2 stage $s" "$T/u2s$s"
done
zs_fast && finish
zs_run u2again 2 $M --cp 2 $U --stage 3 || finish
[ "$(key "$T/u2again.json" param_hash)" = "$(key "$T/u2s3.json" param_hash)" ] && ok ||
    bad "ulysses 2: two runs of stage 3 differ"

# activations by the closed form: T/U positions per rank, and per block the
# probabilities of this rank's NH/U heads over all T positions
# (B NH/U T^2; B = 2, T = 16, C = 32, L = 2, NH = 4, V = 64)
for u in 1 2 4; do
    a=$(awk '$1 == 0 && $2 == "activations" { print $3 }' "$T/u$u/memory.csv")
    awk -v a="$a" -v u="$u" 'BEGIN { B = 2; T = 16 / u; Cm = 32; L = 2; NH = 4; V = 64; BT = B * T
        att = B * NH / u * 16 * 16
        exit !(a == 4 * (BT * Cm * 2 + L * (16 * BT * Cm) + L * (4 * BT + att) + BT * (V + 3))) }' &&
        ok || bad "ulysses $u: activations $a bytes, not the closed form"
done

# with tensor parallelism: tp 2 x U 2 on 4 ranks (4 heads: one per rank),
# every stage the same bytes, equal to tp 2 alone within the tolerance
zs_run t1 2 $M --tp 2 --stage 0 --export "$T/t1.safetensors" || finish
for s in 0 1 2 3; do
    zs_run "ut$s" 4 $M --tp 2 --cp 2 $U --stage "$s" --export "$T/ut$s.safetensors" || continue
    measured_is_predicted "ulysses 2 tp 2 stage $s" "$T/ut$s"
    [ "$(key "$T/ut$s.json" param_hash)" = "$(key "$T/ut0.json" param_hash)" ] && ok ||
        bad "ulysses 2 tp 2: stage $s's parameters differ from stage 0's"
done
"$ZS" compare "$T/t1.safetensors" "$T/ut0.safetensors" --atol $TOL --rtol 0 >"$T/cmpt" && ok ||
    bad "ulysses 2 tp 2: parameters differ from tp 2 alone by more than $TOL"

# activation checkpointing: the recomputed forwards' all-to-alls counted
zs_run ck 2 $M --cp 2 $U --stage 3 --checkpoint-activations every:1 || finish
measured_is_predicted "ulysses 2 checkpointed" "$T/ck"
[ "$(key "$T/ck.json" param_hash)" = "$(key "$T/u2s3.json" param_hash)" ] && ok ||
    bad "ulysses 2: checkpointing changed the parameters"

# with the pipeline: U 2 x pp 2 against pp 2 alone (the losses)
zs_run p1 2 $M --pp 2 --stage 1 || finish
zs_run pu 4 $M --pp 2 --cp 2 $U --stage 1 || finish
l1=$(sed -n '/"losses"/,/]/p' "$T/p1.json" | grep -o '[0-9][0-9.eE+-]*' | tr '\n' ' ')
lu=$(sed -n '/"losses"/,/]/p' "$T/pu.json" | grep -o '[0-9][0-9.eE+-]*' | tr '\n' ' ')
echo "$l1 $lu" | awk '{ n = NF / 2; for (i = 1; i <= n; i++) { d = $i - $(i + n)
    if (d < 0) d = -d; if (d > 1e-6) bad = 1 } } END { exit bad || NF != 6 }' && ok ||
    bad "ulysses 2 pp 2: losses $lu against pp 2's $l1"
measured_is_predicted "ulysses 2 pp 2" "$T/pu"
phantom_same pu 4 --pp 2 --cp 2 $U --stage 1

# DeepSpeed's sequence_parallel_size 2 is --cp 2 --cp-attention ulysses
printf '{"train_micro_batch_size_per_gpu": 2, "sequence_parallel_size": 2}\n' >"$T/ds2.json"
zs_run ds 2 $M --stage 3 --config "$T/ds2.json" || finish
[ "$(key "$T/ds.json" param_hash)" = "$(key "$T/u2s3.json" param_hash)" ] && ok ||
    bad "sequence_parallel_size 2: not the run of --cp 2 --cp-attention ulysses"

# phantom = real, plan = run
phantom_same ck 2 --cp 2 $U --stage 3 --checkpoint-activations every:1
phantom_same ut3 4 --tp 2 --cp 2 $U --stage 3
"$ZS" plan --arch gpt --layers 2 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 \
    --grad-accum 2 --dp 1 --tp 2 --cp 2 $U --stage 3 --json >"$T/plan.json" ||
    bad "plan --cp-attention ulysses failed"
plan_is_run "plan --tp 2 --cp 2 ulysses" "$T/plan.json" "$T/ut3"
a2a=$(sed -n 's/.*"cp_a2a_send_bytes_per_step": \([0-9]*\).*/\1/p' "$T/plan.json")
sent=$(awk '$1 == 0 && $2 == "alltoall" && $3 == "all" { print $5 }' "$T/ut3/comm.csv")
[ -n "$a2a" ] && awk -v s="$sent" -v r="$a2a" 'BEGIN { exit s != 3 * r }' && ok ||
    bad "plan ulysses: all-to-all bytes $a2a per step, the run sent $sent in 3 steps"

# the paper's claim, from phantom runs: with the sequence and the group
# grown together (T = 64 U), the all-to-all bytes a rank sends per step,
# (U - 1)/U of its whole message, tend to a constant (the whole message,
# 4 B (T/U) C floats per call pair, is constant), while the ring's bytes
# grow as T (C - 1)/C; the table in docs/parallelism.md is this output
P="--layers 2 --hidden 64 --heads 16 --vocab 64 --micro-batch 1 --steps 1 --quiet --stage 3"
prev=
for u in 2 4 8 16; do
    "$ZS" train --phantom --world-size "$u" $P --seq $((64 * u)) --cp "$u" $U --csv "$T/ph$u" \
        >/dev/null 2>&1 || { bad "phantom ulysses $u failed"; continue; }
    "$ZS" train --phantom --world-size "$u" $P --seq $((64 * u)) --cp "$u" --csv "$T/pr$u" \
        >/dev/null 2>&1 || { bad "phantom ring $u failed"; continue; }
    a=$(awk '$1 == 0 && $2 == "alltoall" && $3 == "all" { print $5 }' "$T/ph$u/comm.csv")
    r=$(awk '$1 == 0 && $2 == "send" && $3 == "all" { print $5 }' "$T/pr$u/comm.csv")
    # whole message per rank: a U/(U - 1), the same for every U
    w=$(awk -v a="$a" -v u="$u" 'BEGIN { printf "%.0f", a * u / (u - 1) }')
    echo "claim: seq $((64 * u)) U $u: ulysses all-to-all $a bytes sent per rank per step" \
        "(whole message $w), ring $r"
    [ -z "$prev" ] || [ "$w" = "$prev" ] && ok || bad "ulysses $u: whole message $w, not $prev"
    prev=$w
done

finish
