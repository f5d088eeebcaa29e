#!/bin/sh
# --ep-layout deepspeed (docs/moe.md): DeepSpeed's layout where the order
# of the sums does not allow byte identity with --ep 1 (more than 2 ranks,
# bf16, without --deterministic): each rank holds the dense parameters and
# its E/P experts, the experts' gradients summed over the
# expert-data-parallel group as floats and their states partitioned over
# it. Checked at 4 ranks (fp32, --ep 2, stages 0-3), 8 ranks (bf16,
# --ep 2, stages 1 and 3) and 6 ranks (fp16, --ep 2, stages 0 and 1: the
# expert store padded to a multiple of 3): stages 0-3 give the same parameter hashes after
# every step (a fixed mesh), the losses stay within 1e-5 of --ep 1's (bf16,
# fp16: 1e-3), every
# memory category and collective equals the prediction on every rank, the
# parameters and the edp collectives equal a hand count, phantom = plan =
# real; a layout the engine does not have is refused with one line.
. "$(dirname "$0")/testlib.sh"

MODEL="--layers 4 --hidden 16 --heads 2 --seq 8 --vocab 17 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0 --lr 1e-2 --grad-clip 0.5"
PMOE="--moe-experts 4 --moe-every 2 --moe-top-k 2 --capacity-factor 0.5"
# (the capacity is 4 with or without --min-capacity 1: zerosim plan's default 4)
MOE="$PMOE --min-capacity 1 --aux-loss-coeff 0.05"

# run N LABEL ARGS...: one N-rank run into $T/LABEL (report and CSV files)
run() {
    n=$1 label=$2
    shift 2
    mkdir -p "$T/$label"
    sh "$HERE/mpirun.sh" "$n" "$ZS" train $MODEL $MOE "$@" --quiet --report "$T/$label/r.json" \
        --csv "$T/$label" >"$T/$label/log" 2>&1 </dev/null ||
        { bad "$label failed"; cat "$T/$label/log"; return 1; }
}

losses() { sed -n '/"losses"/,/\]/p' "$1" | tr -d ' \n' | sed 's/^"losses":\[//; s/\].*//'; }

# close A B TOL: every loss of A within TOL (relative) of B's
close() {
    awk -v a="$(losses "$1")" -v b="$(losses "$2")" -v t="$3" 'BEGIN {
        n = split(a, x, ","); m = split(b, y, ",")
        if (n != m || n == 0) exit 1
        for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > t * y[i]) exit 1 }
    }'
}

# Cases: name, ranks N, stages, extra options. The experts' parameters per
# rank, by hand: 2 MoE blocks x 4/P experts x 2,128 = 8,512 at P = 2,
# padded to a multiple of N/P (xp); the dense ones 9,424, padded to N.
cases='f:4:0_1_2_3: b:8:1_3:--precision_bf16 h:6:0_1:--precision_fp16'
# the fast tier (make check): fp32 at stages 1 and 3, and bf16 (which the
# phantom and plan checks below read)
zs_fast && cases='f:4:1_3: b:8:1_3:--precision_bf16'
for case in $cases; do
    IFS=: read -r name n stages extra <<EOC
$case
EOC
    stages=$(echo "$stages" | tr _ ' ')
    extra=$(echo "$extra" | tr _ ' ')
    # the losses' tolerance: fp32's sums in another order, or bf16's (whose
    # rounding is 2^-8 relative)
    ps=4 tol=1e-5 && case $extra in *bf16*|*fp16*) ps=2 tol=1e-3 ;; esac
    run "$n" "$name-ep1" --stage 1 --ep 1 $extra || continue
    ref=""
    for s in $stages; do
        l="$name-s$s"
        run "$n" "$l" --stage "$s" --ep 2 --ep-layout deepspeed $extra || continue
        grep -q "DeepSpeed's layout.*not byte-identical" "$T/$l/log" && ok ||
            bad "$l: the run did not say its layout: $(grep 'expert parallelism' "$T/$l/log")"
        h=$(hashes "$T/$l/r.json")
        if [ -z "$ref" ]; then ref=$h
        else [ "$h" = "$ref" ] && ok || bad "$l: hashes $h differ from stage ${stages%% *}'s $ref"; fi
        close "$T/$l/r.json" "$T/$name-ep1/r.json" "$tol" && ok ||
            bad "$l: losses $(losses "$T/$l/r.json") not within $tol of --ep 1's $(losses "$T/$name-ep1/r.json")"
        measured_is_predicted "$l" "$T/$l"
        m=$((n / 2)) xp=$(( (8512 + n / 2 - 1) / (n / 2) * (n / 2) ))
        # the model states by hand: stages 0-2 hold all dense parameters
        # and this rank's experts
        if [ "$s" != 3 ]; then
            hand=$(( ((9424 + n - 1) / n * n + xp) * ps ))
            got=$(awk '$1 == 0 && $2 == "params" { print $3 }' "$T/$l/memory.csv")
            [ "$got" = "$hand" ] && ok || bad "$l: params $got, by hand $hand"
        fi
        # over edp (N/P ranks), per step: one reduce-scatter of the experts'
        # gradients in working precision, and one allgather of their
        # gradients (stage 0) or updated parameters (1, 2), or at stage 3
        # a gather of a MoE block's 4,256 expert parameters per forward
        # and backward (8 per step); (M-1)/M of each sent
        if [ "$s" = 3 ]; then ag="24 $((24 * 4256 * ps * (m - 1) / m))"
        else ag="3 $((3 * xp * ps * (m - 1) / m))"; fi
        want="reduce_scatter 3 $((3 * xp * ps * (m - 1) / m)).000 allgather ${ag}.000 "
        got=$(awk '$1 == 0 && $2 == "edp" { printf "%s %s %s ", $3, $4, $5 }' "$T/$l/comm_groups.csv")
        [ "$got" = "$want" ] && ok || bad "$l: edp collectives '$got', by hand '$want'"
    done
    # DeepSpeed's layout holds fewer bytes than --ep 1's at stage 1
    a=$(awk '$1 == 0 && $2 == "total" { print $3 }' "$T/$name-ep1/memory.csv")
    b=$(awk '$1 == 0 && $2 == "total" { print $3 }' "$T/$name-s1/memory.csv")
    [ -n "$b" ] && [ "$b" -lt "$a" ] && ok || bad "$name: stage 1 peak $b, --ep 1's $a"
done

# phantom = plan = real (case b, stage 3, 8 ranks in bf16): the phantom run
# gives every category of every rank, the timeline and every op
# (phantom_same); the plan rank 0's bytes per category
# shellcheck disable=SC2034 # M is read by testlib.sh's phantom_same
M="$MODEL $MOE"
phantom_same b-s3 8 --stage 3 --ep 2 --ep-layout deepspeed --precision bf16
if "$ZS" plan --arch gpt --layers 4 --hidden 16 --heads 2 --seq 8 --vocab 17 --micro-batch 2 \
        --grad-accum 2 $PMOE --stage 3 --precision bf16 --dp 8 --ep 2 --ep-layout deepspeed \
        --json >"$T/plan.json" 2>&1; then
    plan_is_run "plan --ep-layout deepspeed" "$T/plan.json" "$T/b-s3"
else
    bad "plan --ep-layout deepspeed failed"; cat "$T/plan.json"
fi

# refused with one line: a layout the engine does not have, a bad value,
# and the option without expert parallelism
R="train $MODEL $MOE --steps 1 --quiet" # a one-step MoE run, refused
refuse -n 2 -m "not implemented with gradient compression" $R --ep 2 --ep-layout deepspeed --stage 1 --compression int8
refuse -n 2 -m 'must be "auto" or "deepspeed"' $R --ep 2 --ep-layout megatron
refuse -n 2 -m "needs --ep 2 or more" $R --ep-layout deepspeed
# the config file's moe.ep_layout: taken (the run says its layout), and a
# bad value named in one line
printf '{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1}, "moe": {"num_experts": 4, "ep_size": 2, "ep_layout": "%s"}}\n' deepspeed >"$T/c.json"
"$ZS" train --config "$T/c.json" --phantom --world-size 4 --layers 2 --hidden 16 --heads 2 --seq 8 \
    --vocab 17 --steps 1 >"$T/out" 2>&1 &&
    grep -q "expert parallelism --ep 2: DeepSpeed's layout.*not byte-identical" "$T/out" && ok ||
    bad "moe.ep_layout deepspeed in a config: $(tail -3 "$T/out")"
printf '{"train_micro_batch_size_per_gpu": 2, "moe": {"num_experts": 4, "ep_size": 2, "ep_layout": "%s"}}\n' megatron >"$T/c.json"
if "$ZS" train --config "$T/c.json" --phantom --world-size 4 --layers 2 --hidden 16 --heads 2 \
    --seq 8 --vocab 17 --steps 1 >"$T/out" 2>"$T/err"; then bad "moe.ep_layout megatron accepted"
else
    [ "$(wc -l < "$T/err")" = 1 ] && grep -q 'moe.ep_layout" must be "auto" or "deepspeed", got "megatron"' "$T/err" &&
        ok || bad "moe.ep_layout megatron: $(cat "$T/err")"
fi
if "$ZS" plan --arch gpt --layers 4 --hidden 16 --heads 2 --seq 8 --vocab 17 --micro-batch 2 $PMOE \
        --stage 3 --dp 4 --ep 2 --ep-layout deepspeed --hpz-partition-size 2 >"$T/o" 2>&1; then
    bad "plan accepted --ep-layout deepspeed with hpZ"
else
    grep -q "not implemented with ZeRO++" "$T/o" && ok || bad "plan with hpZ: $(cat "$T/o")"
fi

finish
