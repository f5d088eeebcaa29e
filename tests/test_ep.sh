#!/bin/sh
# Training with expert parallelism (docs/moe.md, "Expert parallelism"):
# on 2 ranks, --ep 2 (each rank computes 2 of the 4 experts, tokens sent to
# them with all-to-alls) gives the same parameter hashes after every step as
# --ep 1, in ZeRO stages 0-3, top-1 and top-2, with dropped tokens, gradient
# clipping, gradient accumulation and activation checkpointing; every
# category of memory and every collective's bytes equal the prediction on
# each rank, the all-to-alls a hand count, in the ledger's group ep; what
# is not exact is refused with one line.
. "$(dirname "$0")/testlib.sh"

MODEL="--layers 4 --hidden 16 --heads 2 --seq 8 --vocab 17 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0 --lr 1e-2 --grad-clip 0.5"

# check_csv LABEL DIR: measured = predicted for every memory category
# (activations included) and for reduce-scatter, allgather and all-to-all
check_csv() {
    awk -v L="$1" '
        $1 ~ /^#/ || $2 == "total" { next }
        { if ($3 != $4) { printf "FAIL: %s rank %s %s: measured %s predicted %s\n", L, $1, $2, $3, $4; bad++ }
          n++ }
        END { exit (bad > 0 || n < 11) }' "$2/memory.csv" || return 1
    awk -v L="$1" '
        $1 ~ /^#/ { next }
        $3 == "all" && ($2 == "reduce_scatter" || $2 == "allgather" || $2 == "alltoall") {
            if ($5 != $6) { printf "FAIL: %s rank %s %s: measured %s predicted %s\n", L, $1, $2, $5, $6; bad++ }
            n++ }
        END { exit (bad > 0 || n != 6) }' "$2/comm.csv"
}

# run LABEL ARGS...: one 2-rank run into $T/LABEL (report and CSV files)
run() {
    label=$1
    shift
    mkdir -p "$T/$label"
    sh "$HERE/mpirun.sh" 2 "$ZS" train $MODEL "$@" --quiet --report "$T/$label/r.json" \
        --csv "$T/$label" >"$T/$label/log" 2>&1 </dev/null ||
        { bad "$label failed"; cat "$T/$label/log"; return 1; }
}

# (top-k, capacity factor, checkpointing): top-1 without (stages 0-3) and
# top-2 with activation checkpointing every block (stages 0 and 3; MoE
# block 1 is recomputed: its forward's two all-to-alls run again in the
# backward); ZS_TEST_FULL=1 runs every stage of both
for cfg in 1:1.0:none 2:0.5:every:1; do
    k=${cfg%%:*}
    rest=${cfg#*:}
    f=${rest%%:*}
    ck=${rest#*:}
    MOE="--moe-experts 4 --moe-every 2 --moe-top-k $k --capacity-factor $f --min-capacity 1 --aux-loss-coeff 0.05"
    CK=""
    [ "$ck" = none ] || CK="--checkpoint-activations $ck"
    stages="0 1 2 3"
    [ "$k" = 1 ] || [ "${ZS_TEST_FULL:-0}" = 1 ] || stages="0 3"
    for stage in $stages; do
        l1="k$k-s$stage-ep1" l2="k$k-s$stage-ep2"
        run "$l1" $MOE $CK --stage "$stage" --ep 1 || continue
        run "$l2" $MOE $CK --stage "$stage" --ep 2 || continue
        h1=$(hashes "$T/$l1/r.json") h2=$(hashes "$T/$l2/r.json")
        [ -n "$h1" ] && [ "$h1" = "$h2" ] && ok ||
            bad "top-$k stage $stage: --ep 2 hashes $h2 differ from --ep 1's $h1"
        check_csv "$l2" "$T/$l2" && ok || bad "top-$k stage $stage --ep 2: accounting"
        # the model states are --ep 1's (the engine keeps every expert)
        for c in params grads optimizer; do
            a=$(awk -v c=$c '$1 == 0 && $2 == c { print $3 }' "$T/$l1/memory.csv")
            b=$(awk -v c=$c '$1 == 0 && $2 == c { print $3 }' "$T/$l2/memory.csv")
            [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "top-$k stage $stage: $c $b vs --ep 1's $a"
        done
        # the all-to-alls, by hand: 16 tokens per micro-batch, 4 experts,
        # capacity ceil(16/4 * F) (4 at top-1 F = 1, 4 at top-2 2F = 1), so
        # the (E, Cap, C) buffer is 4*4*16*4 = 1024 bytes, of which each call
        # sends 1/2 to the other rank; per micro-batch 2 MoE blocks x 4
        # calls (+ 2 for the recomputed block 1): 16 (20) calls per step of
        # 2 micro-batches, 3 steps
        calls=48 && [ "$ck" = none ] || calls=60
        want="0 ep alltoall $calls $((calls * 512)).000"
        got=$(awk '$1 == 0 && $2 == "ep" && $3 == "alltoall" { print $1, $2, $3, $4, $5 }' \
            "$T/$l2/comm_groups.csv")
        [ "$got" = "$want" ] && ok || bad "top-$k stage $stage: all-to-alls '$got', by hand '$want'"
        [ -z "$(awk '$2 == "alltoall"' "$T/$l1/comm_groups.csv")" ] && ok ||
            bad "top-$k stage $stage: --ep 1 made all-to-alls"
    done
    first=$(echo "$h1" | cut -d, -f1 | tr -d '"[:')
    last=$(echo "$h1" | tr -d ']"' | awk -F, '{print $NF}')
    [ "$first" != "$last" ] && ok || bad "top-$k: parameters did not change"
done

# phantom = real: the same run as top-2, stage 3 with checkpointing above,
# on 2 simulated ranks: the same peak bytes per category and rank, and the
# same bytes and calls per op and group
MOE="--moe-experts 4 --moe-every 2 --moe-top-k 2 --capacity-factor 0.5 --min-capacity 1 --aux-loss-coeff 0.05"
mkdir -p "$T/ph"
if "$ZS" train $MODEL $MOE --checkpoint-activations every:1 --stage 3 --ep 2 --phantom \
    --world-size 2 --steps 3 --quiet --csv "$T/ph" >"$T/ph/log" 2>&1; then
    for f in memory comm_groups; do
        a=$(awk '$1 !~ /^#/ && $2 != "total" { print $1, $2, $3 }' "$T/k2-s3-ep2/$f.csv")
        [ "$f" = comm_groups ] && a=$(awk '$1 !~ /^#/ && $3 != "scalars" { print $1, $2, $3, $4, $5 }' "$T/k2-s3-ep2/$f.csv")
        b=$(awk '$1 !~ /^#/ && $2 != "total" { print $1, $2, $3 }' "$T/ph/$f.csv")
        [ "$f" = comm_groups ] && b=$(awk '$1 !~ /^#/ && $3 != "scalars" { print $1, $2, $3, $4, $5 }' "$T/ph/$f.csv")
        [ -n "$a" ] && [ "$a" = "$b" ] && ok || { bad "phantom $f differs from the real run's"; echo "$a" >"$T/a"; echo "$b" >"$T/b"; diff "$T/a" "$T/b"; }
    done
    check_csv phantom "$T/ph" && ok || bad "phantom --ep 2: accounting"
else
    bad "phantom --ep 2 failed"; cat "$T/ph/log"
fi

# plan = real: zerosim plan --ep 2 of the same run gives rank 0's peak
# bytes per category and the all-to-alls per step (its full bytes, of
# which each rank sends half; the run took 3 steps)
if "$ZS" plan --arch gpt --layers 4 --hidden 16 --heads 2 --seq 8 --vocab 17 --micro-batch 2 \
    --grad-accum 2 --moe-experts 4 --moe-every 2 --moe-top-k 2 --capacity-factor 0.5 \
    --checkpoint-activations every:1 --stage 3 --dp 2 --ep 2 --json >"$T/plan.json" 2>&1; then
    a=$(sed -n '/"bytes_per_category"/,/}/p' "$T/plan.json" | tr -d ' ",{}' | grep : |
        sed 's/^bytes_per_category://' | grep . | tr ':' ' ')
    b=$(awk '$1 == 0 && $2 != "total" && $2 != "optimizer" { print $2, $3 }' "$T/k2-s3-ep2/memory.csv")
    [ -n "$a" ] && [ "$a" = "$b" ] && ok || { bad "plan's bytes per category differ from the run's"; echo "$a" >"$T/a"; echo "$b" >"$T/b"; diff "$T/a" "$T/b"; }
    pa=$(sed -n '/"op": "alltoall"/,/}/p' "$T/plan.json" | tr -d ' ",' | awk -F: '$1 == "full_bytes" || $1 == "calls" { printf "%s ", $2 }')
    ra=$(awk '$1 == 0 && $2 == "ep" && $3 == "alltoall" { printf "%d %.1f ", $5 * 2 / 3, $4 / 3 }' "$T/k2-s3-ep2/comm_groups.csv")
    [ -n "$pa" ] && [ "$pa" = "$ra" ] && ok || bad "plan's all-to-alls '$pa', the run's '$ra'"
else
    bad "plan --ep 2 failed"; cat "$T/plan.json"
fi
if "$ZS" plan --params 1e9 --ep 2 >"$T/o" 2>&1; then bad "plan --params --ep accepted"
else grep -q "use them with --arch gpt" "$T/o" && ok || bad "plan --params --ep: $(cat "$T/o")"; fi

# what is not byte-identical to --ep 1 is refused with one line
MOE="--moe-experts 4 --moe-every 2 --min-capacity 1"
refuse() { # n pattern args...
    n=$1 pat=$2
    shift 2
    if sh "$HERE/mpirun.sh" "$n" "$ZS" train $MODEL $MOE --steps 1 --quiet "$@" \
        >"$T/out" 2>"$T/err" </dev/null; then
        bad "accepted: $n ranks $*"
    elif grep -q "$pat" "$T/err" && [ "$(grep -c "$pat" "$T/err")" -le "$n" ]; then
        ok
    else
        bad "$n ranks $*: no line with '$pat'"; cat "$T/err"
    fi
}
refuse 4 "runs on 2 data-parallel ranks only" --ep 2
refuse 4 "runs on 2 data-parallel ranks only" --ep 4
refuse 2 "runs in fp32 only" --ep 2 --precision bf16
refuse 2 "does not support --deterministic" --ep 2 --deterministic
refuse 2 "does not support --grad-reduce step" --ep 2 --grad-reduce step
refuse 2 "does not support --compression" --ep 2 --stage 1 --compression int8
refuse 2 "does not support checkpoints" --ep 2 --save-dir "$T/ck"
refuse 2 "must divide the data-parallel size" --ep 4 --moe-experts 8

finish
