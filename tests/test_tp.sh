#!/bin/sh
# Tensor parallelism: the Check suite tests/check_tp.c (finite differences
# of every tensor-parallel layer across the group; TP = N against TP = 1 on
# the same batches) at 2 and 4 ranks; then zerosim train with --tp: the
# accounting equals the prediction on every rank (the TP shard's model
# states divided over the data-parallel group, the buffers, the TP
# all-reduce traffic), stages 0-3 agree to the byte for a fixed mesh, and
# the errors of impossible meshes. The fast tier (make check) runs the
# suite at 2 ranks, the 4-rank meshes of tp 2 with and without sequence
# parallelism at stages 0 and 3, and deterministic mode at N = 2 and 4.
. "$(dirname "$0")/testlib.sh"

suite_sizes="2 4" meshes='"2 2" "4 2" "4 4" "4 2 sp" "8 4 sp"' det_sizes="2 4 8"
zs_fast && suite_sizes=2 meshes='"4 2" "4 2 sp"' det_sizes="2 4"
for n in $suite_sizes; do
    if sh "$HERE/mpirun.sh" "$n" ./tests/check_tp >"$T/tp$n" 2>&1; then ok
    else bad "check_tp at $n ranks"; fi
    grep -E "^(finite|TP)" "$T/tp$n"
    grep -E "Failure|Error" "$T/tp$n" | head -5
done

M="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0 --quiet"
# (every stage on the 4-rank meshes; stages 0 and 3 elsewhere, 3 alone at 8
# ranks, which run oversubscribed)
eval "set -- $meshes"
for mesh in "$@"; do
    set -- $mesh
    n=$1 tp=$2 sp=
    [ $# -eq 3 ] && sp=--sequence-parallel
    stages="0 1 2 3"
    [ "$n" -eq 2 ] || [ "$tp" -eq 4 ] && stages="0 3"
    [ "$n" -eq 8 ] && stages=3
    zs_fast && stages="0 3"
    for stage in $stages; do
        d="$T/m$n-$tp-$stage$sp"
        if ! sh "$HERE/mpirun.sh" "$n" "$ZS" train $M --tp "$tp" $sp --stage "$stage" --csv "$d" \
             --report "$d/r.json" >"$T/log" 2>&1; then
            bad "N=$n tp $tp stage $stage failed"; cat "$T/log"; continue
        fi
        awk -v L="N=$n tp $tp stage $stage" '$1 !~ /^#/ && $2 != "total" && $3 != $4 {
                printf "FAIL: %s rank %s %s: measured %s predicted %s\n", L, $1, $2, $3, $4; bad++ }
             $1 !~ /^#/ { n++ } END { exit bad > 0 || n == 0 }' "$d/memory.csv" && ok || bad "memory N=$n tp $tp stage $stage"
        awk -v L="N=$n tp $tp stage $stage" '$1 !~ /^#/ && $3 == "all" &&
                ($2 == "reduce_scatter" || $2 == "allgather" || $2 == "allreduce") {
                if ($5 != $6) { printf "FAIL: %s rank %s %s: measured %s predicted %s\n", L, $1, $2, $5, $6; bad++ }
                if ($2 == "allreduce" && $5 > 0) ar++ }
             END { exit bad > 0 || ar == 0 }' "$d/comm.csv" && ok || bad "traffic N=$n tp $tp stage $stage"
        key "$d/r.json" param_hash >"$d/hash"
        # zerosim plan --tp says the same bytes for rank 0
        "$ZS" plan --arch gpt --layers 2 --hidden 32 --heads 4 --seq 16 --vocab 64 --micro-batch 2 \
            --grad-accum 2 --dp $((n / tp)) --tp "$tp" $sp --stage "$stage" --json >"$T/plan.json" ||
            { bad "plan --tp $tp"; continue; }
        sed -n '/"bytes_per_category"/,/}/p' "$T/plan.json" >"$T/plan.cat"
        for cat in params grads optimizer_m optimizer_v activations comm_buffers workspace; do
            m=$(awk -v c="$cat" '$1 == 0 && $2 == c { print $3 }' "$d/memory.csv")
            p=$(sed -n "s/.*\"$cat\": \([0-9]*\).*/\1/p" "$T/plan.cat")
            [ -n "$m" ] && [ "$m" = "$p" ] && ok || bad "N=$n tp $tp stage $stage $cat: run $m, plan $p"
        done
    done
    # stages 0-3 give the same bytes for a fixed mesh
    [ "$n" -eq 8 ] && continue
    h0=$(cat "$T/m$n-$tp-0$sp/hash")
    for stage in $stages; do
        [ "$stage" -eq 0 ] && continue
        [ -n "$h0" ] && [ "$(cat "$T/m$n-$tp-$stage$sp/hash")" = "$h0" ] && ok ||
            bad "N=$n tp $tp $sp: stage $stage hash $(cat "$T/m$n-$tp-$stage$sp/hash") vs stage 0 $h0"
    done
done

# sequence parallelism: the activations per rank fall as the closed form
# says (B = 2, T = 16, C = 32, L = 2, NH = 4, V = 64; BTl = B·T/P)
# shellcheck disable=SC2043 # one degree for now; the loop takes more
for tp in 2; do
    n=4
    a=$(awk '$1 == 0 && $2 == "activations" { print $3 }' "$T/m$n-$tp-3/memory.csv")
    b=$(awk '$1 == 0 && $2 == "activations" { print $3 }' "$T/m$n-$tp-3--sequence-parallel/memory.csv")
    awk -v a="$a" -v b="$b" -v P="$tp" 'BEGIN { B = 2; T = 16; C = 32; L = 2; NH = 4; V = 64
        BT = B*T; BTl = BT/P
        tp = BT*C*2 + L*(4*BT*C + 12*BT*C/P) + L*(4*BT + B*NH/P*T*T) + BT*(V/P + 3)
        sp = BTl*C + L*(2*BT*C + 2*BTl*C + 12*BT*C/P + 4*BTl + B*NH/P*T*T) + BT*C + 2*BTl + BT*(V/P + 1)
        exit !(a == 4*tp && b == 4*sp && b < a) }' && ok ||
        bad "activations at tp $tp: $a bytes without SP, $b with (closed forms differ)"
done

# deterministic mode: byte-identical across data-parallel sizes for a fixed
# TP (the same global batch: micro-batches of 2, 8 per step)
D="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 64 --steps 4 --warmup 0 --quiet --deterministic --micro-batch 2"
for n in $det_sizes; do
    sh "$HERE/mpirun.sh" "$n" "$ZS" train $D --grad-accum $((8 / n)) --tp 2 --stage 2 \
        --report "$T/det$n.json" >/dev/null 2>&1 || bad "deterministic N=$n tp 2"
done
h2=$(key "$T/det2.json" param_hash)
for n in $det_sizes; do
    [ "$n" -eq 2 ] && continue
    [ -n "$h2" ] && [ "$(key "$T/det$n.json" param_hash)" = "$h2" ] && ok ||
        bad "deterministic tp 2: N=$n hash $(key "$T/det$n.json" param_hash), N=2 $h2"
done

# a phantom run with --tp reports what the real run does (the real run: the
# mesh sweep's N=4 tp 2 stage 3)
cp -r "$T/m4-2-3" "$T/real" &&
"$ZS" train --phantom --world-size 4 $M --tp 2 --stage 3 --csv "$T/ph" >/dev/null 2>&1 || bad "phantom --tp"
cmp -s "$T/real/memory.csv" "$T/ph/memory.csv" && ok || { bad "phantom --tp memory differs"; diff "$T/real/memory.csv" "$T/ph/memory.csv" | head; }
awk '$1 !~ /^#/ && $2 != "gather" && $3 != "report" { print $1, $2, $3, $4, $5, $6 }' "$T/real/comm.csv" >"$T/a"
awk '$1 !~ /^#/ && $2 != "gather" && $3 != "report" { print $1, $2, $3, $4, $5, $6 }' "$T/ph/comm.csv" >"$T/b"
cmp -s "$T/a" "$T/b" && ok || { bad "phantom --tp traffic differs"; diff "$T/a" "$T/b" | head; }

# errors: one line, non-zero exit
err() { # n pattern args
    n=$1 pat=$2; shift 2
    if sh "$HERE/mpirun.sh" "$n" "$ZS" train "$@" >/dev/null 2>"$T/err"; then bad "train $* succeeded"
    elif grep -q -- "$pat" "$T/err"; then ok
    else bad "train $*: $(cat "$T/err")"; fi
}
err 2 "do not divide" $M --tp 4 --heads 4
err 3 "do not divide" $M --tp 2
err 2 "heads" --layers 2 --hidden 30 --heads 3 --seq 8 --vocab 64 --tp 2
err 2 "vocab" --layers 2 --hidden 32 --heads 4 --seq 8 --vocab 63 --tp 2
err 2 "model.seq" --layers 2 --hidden 32 --heads 4 --seq 15 --vocab 64 --tp 2 --sequence-parallel
err 1 "needs --tp 2" $M --sequence-parallel
err 2 "implemented for the decoders" --model mlp --tp 2

finish
