#!/bin/sh
# Training with expert parallelism (docs/moe.md, "Expert parallelism"):
# --ep P (each rank computes E/P of the 4 experts, tokens sent to them with
# all-to-alls) gives the same parameter hashes after every step as --ep 1
# on the same ranks, in both of the engine's layouts (zs_step_ep_split):
# DeepSpeed's (each rank's arrays hold its E/P experts, their gradients
# reduced and their states partitioned over the expert-data-parallel
# group: 2 ranks in fp32 stages 0-3, 4 ranks in deterministic mode with
# --ep 2 and --ep 4, bf16, stage 3) and --ep 1's (every expert on every
# rank, the gradients sent home: 4 ranks without deterministic mode); top-1
# and top-2, dropped tokens, clipping, accumulation, activation
# checkpointing, the step schedule (ZS_TEST_FULL=1 adds fp16 and
# compression); every category of memory and every collective's bytes
# equal the prediction on each rank, the all-to-alls and DeepSpeed's
# layout's model states and edp collectives a hand count; phantom = plan =
# real run in both layouts; what is not supported is refused with one line.
. "$(dirname "$0")/testlib.sh"

MODEL="--layers 4 --hidden 16 --heads 2 --seq 8 --vocab 17 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0 --lr 1e-2 --grad-clip 0.5"

# run N LABEL ARGS...: one N-rank run into $T/LABEL (report and CSV files)
run() {
    n=$1 label=$2
    shift 2
    mkdir -p "$T/$label"
    sh "$HERE/mpirun.sh" "$n" "$ZS" train $MODEL "$@" --quiet --report "$T/$label/r.json" \
        --csv "$T/$label" >"$T/$label/log" 2>&1 </dev/null ||
        { bad "$label failed"; cat "$T/$label/log"; return 1; }
}

# Each case: name, ranks N, --ep P, layout (ds: DeepSpeed's, home: --ep 1's
# with the gradients sent home), top-k, capacity factor, checkpointing,
# stages, other options. --ep 1 runs once per case at its first stage
# (stages 0-3 are byte-identical, tests/test_moe.sh); --ep P runs at each.
# The capacity is 4 in every case (16 tokens per micro-batch, 4 experts:
# ceil(16/4 F), 2F at top-2), so by hand: the (E, Cap, C) dispatch buffer is
# 4*4*16*4 = 1024 bytes and every expert's parameters 4 (8*16^2 + 5*16) =
# 8512 floats = 34048 bytes, of which each all-to-all sends (P-1)/P; per
# micro-batch and MoE block (2 of 4 blocks) 4 dispatch calls (+2 for block
# 1 when every:1 recomputes it) and, in --ep 1's layout, 1 call sending the
# gradients home.
CASES="a:2:2:ds:1:1.0:none:0_1_2_3:
b:2:2:ds:2:0.5:every:1:0_3:
c:4:2:home:1:1.0:none:1_2:--precision_bf16
h:4:2:ds:2:0.5:every:1:0_2_3:--deterministic
i:4:4:ds:1:1.0:none:1:--deterministic_--precision_bf16
d:4:4:ds:2:0.5:every:1:3:--deterministic
e:4:4:home:1:1.0:none:0:--grad-reduce_step"
[ "${ZS_TEST_FULL:-0}" = 1 ] && CASES="$CASES
f:4:2:home:2:0.5:none:0_1_2_3:--precision_fp16
j:4:2:ds:2:0.5:none:0_1_2:--precision_fp16_--deterministic
g:4:4:home:1:1.0:every:1:2:--compression_int8"
for case in $CASES; do
    IFS=: read -r name n P lay k f ck1 rest <<EOC
$case
EOC
    if [ "$ck1" = every ]; then ck="every:${rest%%:*}"; rest=${rest#*:}; else ck=none; fi
    stages=$(echo "${rest%%:*}" | tr _ ' ')
    extra=""
    case $rest in *:*) extra=$(echo "${rest#*:}" | tr _ ' ') ;; esac
    MOE="--moe-experts 4 --moe-every 2 --moe-top-k $k --capacity-factor $f --min-capacity 1 --aux-loss-coeff 0.05"
    CK=""
    [ "$ck" = none ] || CK="--checkpoint-activations $ck"
    ref="" l1=""
    for stage in $stages; do
        if [ -z "$ref" ]; then
            l1="$name-ep1"
            run "$n" "$l1" $MOE $CK --stage "$stage" --ep 1 $extra || break
            ref=$(hashes "$T/$l1/r.json")
        fi
        l2="$name-s$stage"
        run "$n" "$l2" $MOE $CK --stage "$stage" --ep "$P" $extra || continue
        h2=$(hashes "$T/$l2/r.json")
        [ -n "$ref" ] && [ "$ref" = "$h2" ] && ok ||
            bad "case $name (N=$n --ep $P $extra) stage $stage: hashes $h2 differ from --ep 1's $ref"
        measured_is_predicted "case $name stage $stage --ep $P" "$T/$l2"
        d=16 && [ "$ck" = none ] || d=20
        h=4 && [ "$lay" = home ] || h=0
        want="0 ep alltoall $((3 * (d + h))) $((3 * (P - 1) * (d * 1024 + h * 34048) / P)).000"
        got=$(awk '$1 == 0 && $2 == "ep" && $3 == "alltoall" { print $1, $2, $3, $4, $5 }' \
            "$T/$l2/comm_groups.csv")
        [ "$got" = "$want" ] && ok || bad "case $name stage $stage: all-to-alls '$got', by hand '$want'"
    done
    # the model states at the first stage: in --ep 1's layout --ep 1's (the
    # engine keeps every expert); in DeepSpeed's (stage 3: fewer bytes of
    # parameters than --ep 1's) each rank's parameters are
    # the dense ones and its experts: 26,448 - 2 blocks x 4 experts x 2,128
    # = 9,424 dense, padded to a multiple of N (x 1024 in deterministic
    # mode), and P of 4 experts (2 x 2,128 x 4/P), padded to a multiple of
    # N/P (x 1024), each in working precision
    first=${stages%% *}
    ps=4 && case $extra in *bf16*|*fp16*) ps=2 ;; esac
    q=$n && case $extra in *deterministic*) q=$((n * 1024)) ;; esac
    # shellcheck disable=SC2017 # integer division first, as the run counts
    qx=$((n / P)) && case $extra in *deterministic*) qx=$((n / P * 1024)) ;; esac
    x=$((2 * 2128 * 4 / P))
    hand=$(( ((9424 + q - 1) / q * q + (x + qx - 1) / qx * qx) * ps ))
    for c in params grads optimizer; do
        a=$(awk -v c=$c '$1 == 0 && $2 == c { print $3 }' "$T/$l1/memory.csv")
        b=$(awk -v c=$c '$1 == 0 && $2 == c { print $3 }' "$T/$name-s$first/memory.csv")
        if [ "$lay" = home ]; then
            [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "case $name: $c $b vs --ep 1's $a"
        elif [ "$c" = params ] && [ "$first" = 3 ]; then # shards and gathers
            [ -n "$b" ] && [ "$b" -lt "$a" ] && ok || bad "case $name: params $b, --ep 1's $a"
        elif [ "$c" = params ]; then
            [ "$b" = "$hand" ] && [ "$b" -lt "$a" ] && ok ||
                bad "case $name: params $b, by hand $hand (--ep 1's $a)"
        fi
    done
    # case a (stage 0, fp32, 2 ranks): the optimizer's m and v of all of
    # it (2 x 71,744 bytes), and the gradients: the dense full buffer and
    # shard (9,424 and 4,712 floats) and the experts' (8,512 floats)
    if [ "$name" = a ]; then
        b=$(awk '$1 == 0 && ($2 == "grads" || $2 == "optimizer") { printf "%s ", $3 }' "$T/a-s0/memory.csv")
        [ "$b" = "$(( (9424 + 4712 + 8512) * 4 )) $((2 * hand)) " ] && ok ||
            bad "case a: grads and optimizer '$b', by hand $(( (9424 + 4712 + 8512) * 4 )) $((2 * hand))"
    fi
    # DeepSpeed's layout in deterministic mode with edp groups of 2 (case
    # h): per step one reduce-scatter of the experts' fixed-point gradients
    # (8 bytes each, 4,256 padded to 10,240) and one allgather of their
    # gradients (stage 0) or updated parameters, half of each sent
    if [ "$name" = h ]; then
        got=$(awk '$1 == 0 && $2 == "edp" { printf "%s %s %s ", $3, $4, $5 }' "$T/$name-s$first/comm_groups.csv")
        want="reduce_scatter 3 $((3 * 10240 * 8 / 2)).000 allgather 3 $((3 * 10240 * 4 / 2)).000 "
        [ "$got" = "$want" ] && ok || bad "case h: edp collectives '$got', by hand '$want'"
        # stage 3: no parameters gathered back after the step; instead each
        # forward (4 per step, and 2 recomputed by every:1) and backward (4)
        # of a MoE block gathers its 2 experts (4,256 floats), half sent
        got=$(awk '$1 == 0 && $2 == "edp" { printf "%s %s %s ", $3, $4, $5 }' "$T/h-s3/comm_groups.csv")
        want="reduce_scatter 3 $((3 * 10240 * 8 / 2)).000 allgather 30 $((30 * 4256 * 4 / 2)).000 "
        [ "$got" = "$want" ] && ok || bad "case h stage 3: edp collectives '$got', by hand '$want'"
    fi
    [ -z "$(awk '$2 == "alltoall"' "$T/$l1/comm_groups.csv")" ] && ok ||
        bad "case $name: --ep 1 made all-to-alls"
    h0=$(echo "$ref" | cut -d, -f1 | tr -d '"[:')
    hn=$(echo "$ref" | tr -d ']"' | awk -F, '{print $NF}')
    [ -n "$ref" ] && [ "$h0" != "$hn" ] && ok || bad "case $name: parameters did not change"
done

# phantom = real: the same run as top-2, stage 3 with checkpointing above,
# on 2 simulated ranks: the same peak bytes per category and rank, and the
# same bytes and calls per op and group
MOE="--moe-experts 4 --moe-every 2 --moe-top-k 2 --capacity-factor 0.5 --min-capacity 1 --aux-loss-coeff 0.05"
mkdir -p "$T/ph"
if "$ZS" train $MODEL $MOE --checkpoint-activations every:1 --stage 3 --ep 2 --phantom \
    --world-size 2 --steps 3 --quiet --csv "$T/ph" >"$T/ph/log" 2>&1; then
    for f in memory comm_groups; do
        a=$(awk '$1 !~ /^#/ && $2 != "total" { print $1, $2, $3 }' "$T/b-s3/$f.csv")
        [ "$f" = comm_groups ] && a=$(awk '$1 !~ /^#/ && $3 != "scalars" { print $1, $2, $3, $4, $5 }' "$T/b-s3/$f.csv")
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
    plan_is_run "plan --ep 2" "$T/plan.json" "$T/b-s3"
    pa=$(sed -n '/"op": "alltoall"/,/}/p' "$T/plan.json" | tr -d ' ",' | awk -F: '$1 == "full_bytes" || $1 == "calls" { printf "%s ", $2 }')
    ra=$(awk '$1 == 0 && $2 == "ep" && $3 == "alltoall" { printf "%d %.1f ", $5 * 2 / 3, $4 / 3 }' "$T/b-s3/comm_groups.csv")
    [ -n "$pa" ] && [ "$pa" = "$ra" ] && ok || bad "plan's all-to-alls '$pa', the run's '$ra'"
else
    bad "plan --ep 2 failed"; cat "$T/plan.json"
fi
# DeepSpeed's layout (case h, stage 2: 4 ranks, --ep 2, deterministic):
# plan = phantom = real, per category, and per group and op
PH="--layers 4 --hidden 16 --heads 2 --seq 8 --vocab 17 --micro-batch 2 --grad-accum 2 --moe-experts 4 --moe-every 2 --moe-top-k 2 --capacity-factor 0.5 --checkpoint-activations every:1 --stage 2 --deterministic --ep 2"
mkdir -p "$T/phh"
if "$ZS" train $PH --min-capacity 1 --phantom --world-size 4 --steps 3 --quiet --csv "$T/phh" \
        >"$T/phh/log" 2>&1 &&
    "$ZS" plan --arch gpt $PH --dp 4 --json >"$T/planh.json" 2>&1; then
    a=$(awk '$1 !~ /^#/ && $2 != "total" { print $1, $2, $3 }' "$T/h-s2/memory.csv")
    b=$(awk '$1 !~ /^#/ && $2 != "total" { print $1, $2, $3 }' "$T/phh/memory.csv")
    [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "case h: phantom memory differs from the real run's"
    a=$(awk '$1 !~ /^#/ && $3 != "scalars" { print $1, $2, $3, $4, $5 }' "$T/h-s2/comm_groups.csv")
    b=$(awk '$1 !~ /^#/ && $3 != "scalars" { print $1, $2, $3, $4, $5 }' "$T/phh/comm_groups.csv")
    [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "case h: phantom traffic differs from the real run's"
    plan_is_run "case h" "$T/planh.json" "$T/h-s2"
else
    bad "case h: phantom or plan failed"; cat "$T/phh/log" "$T/planh.json"
fi
if "$ZS" plan --params 1e9 --ep 2 >"$T/o" 2>&1; then bad "plan --params --ep accepted"
else grep -q "use them with --arch gpt" "$T/o" && ok || bad "plan --params --ep: $(cat "$T/o")"; fi

# what is not byte-identical to --ep 1 is refused with one line
MOE="--moe-experts 4 --moe-every 2 --min-capacity 1"
R="train $MODEL $MOE --steps 1 --quiet" # a one-step MoE run, refused
refuse -n 2 -m "must divide the data-parallel size" $R --ep 4 --moe-experts 8
refuse -n 4 -m "must be divisible by the expert-parallel size" $R --ep 4 --moe-experts 6
# an all-to-all past one MPI call's 2 GiB (a phantom run: 2 x 64 experts of
# hidden 1024 send back 4,297,588,736 bytes of gradients) is one line, not
# a wrapped count
if "$ZS" train --phantom --world-size 4 --ep 2 --layers 2 --hidden 1024 --heads 16 --seq 256 \
        --vocab 1024 --moe-experts 128 --micro-batch 1 --precision bf16 >"$T/out" 2>"$T/err"; then
    bad "accepted an all-to-all of more than 2 GiB"
elif [ "$(grep -c "more than one MPI all-to-all carries" "$T/err")" -eq 1 ]; then ok
else bad "all-to-all over 2 GiB: $(cat "$T/err")"; fi

finish
