#!/bin/sh
# --ep-layout deepspeed with --offload-optimizer cpu (docs/moe.md): the
# experts' fp32 master, m and v of this rank's expert shard on the host, as
# ZeRO-Offload keeps the dense shard's; their reduced gradient shard sent
# down and the updated shard up, in working precision, once per step.
# Checked at 4 ranks (fp32, --ep 2, stages 1-3) and 8 ranks (bf16, --ep 2,
# stages 1 and 3): the parameter hashes and the losses of every step equal
# the same run's without offload byte for byte (so stages 1-3 agree, and
# test_ep_layout.sh's tolerance against --ep 1 holds); every memory
# category and transfer equals the prediction on every rank; the host's
# expert states equal a hand count; phantom = plan = real; a checkpoint
# resumes; offload_param and the nvme tier stay refused with one line.
. "$(dirname "$0")/testlib.sh"

MODEL="--layers 4 --hidden 16 --heads 2 --seq 8 --vocab 17 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0 --lr 1e-2 --grad-clip 0.5"
PMOE="--moe-experts 4 --moe-every 2 --moe-top-k 2 --capacity-factor 0.5"
M="$MODEL $PMOE --min-capacity 1 --aux-loss-coeff 0.05"
DS="--ep 2 --ep-layout deepspeed"

losses() { sed -n '/"losses"/,/\]/p' "$1" | tr -d ' \n'; }

# Cases: name, ranks N, stages, extra options. The experts' parameters per
# rank, by hand: 2 MoE blocks x 4/P experts x 2,128 = 8,512 at P = 2,
# padded to a multiple of the edp size N/P; a rank's shard 1/(N/P) of it.
for case in f:4:1_2_3: b:8:1_3:--precision_bf16; do
    IFS=: read -r name n stages extra <<EOC
$case
EOC
    stages=$(echo "$stages" | tr _ ' ')
    extra=$(echo "$extra" | tr _ ' ')
    xs=$(( (8512 + n / 2 - 1) / (n / 2) )) ps=4
    case $extra in *bf16*) ps=2 ;; esac
    ref=""
    for s in $stages; do
        l="$name-o$s"
        zs_run "$name-s$s" "$n" $M --stage "$s" $DS $extra --quiet || continue
        zs_run "$l" "$n" $M --stage "$s" $DS --offload-optimizer cpu $extra --quiet || continue
        h=$(hashes "$T/$l.json") h0=$(hashes "$T/$name-s$s.json")
        echo "$h" | grep -q '[0-9a-f]\{16\}' && [ "$h" = "$h0" ] && ok ||
            bad "$l: hashes $h differ from the run without offload's $h0"
        if [ -z "$ref" ]; then ref=$h
        else [ "$h" = "$ref" ] && ok || bad "$l: hashes $h differ from stage ${stages%% *}'s $ref"; fi
        [ "$(losses "$T/$l.json")" = "$(losses "$T/$name-s$s.json")" ] && ok ||
            bad "$l: losses $(losses "$T/$l.json"), without offload $(losses "$T/$name-s$s.json")"
        measured_is_predicted "$l" "$T/$l"
        # by hand: the host's fp32 master, m and v are the dense shard's
        # (9,424 / N) and the expert shard's elements, 4 bytes each; per
        # step the expert shard goes down (the step phase's d2h: the dense
        # shard streams down in the backward) and both shards come up, in
        # working precision
        hand=$(( (9424 / n + xs) * 4 ))
        got=$(awk '$1 == 0 && $2 ~ /^host_optimizer_(master|m|v)$/ { printf "%s ", $3 }' \
            "$T/$l/memory.csv")
        [ "$got" = "$hand $hand $hand " ] && ok || bad "$l: host master, m, v $got, by hand $hand"
        want="d2h step 3 $((3 * xs * ps)).000 h2d step 6 $((3 * (9424 / n + xs) * ps)).000 "
        got=$(awk '$1 == 0 && $3 == "step" && ($2 == "d2h" || $2 == "h2d") {
            printf "%s %s %s %s ", $2, $3, $4, $5 }' "$T/$l/comm.csv")
        [ "$got" = "$want" ] && ok || bad "$l: transfers '$got', by hand '$want'"
    done
done

# phantom = plan = real (case b, stage 3, 8 ranks in bf16)
phantom_same b-o3 8 --stage 3 $DS --offload-optimizer cpu --precision bf16
if "$ZS" plan --arch gpt --layers 4 --hidden 16 --heads 2 --seq 8 --vocab 17 --micro-batch 2 \
        --grad-accum 2 $PMOE --stage 3 --precision bf16 --dp 8 $DS --offload-optimizer cpu \
        --json >"$T/plan.json" 2>&1; then
    # the device's categories (plan_is_run reads rank 0's rows but the
    # host's), then the host's and the transfers per step (3 steps)
    mkdir -p "$T/b-o3-device"
    grep -v ' host_' "$T/b-o3/memory.csv" >"$T/b-o3-device/memory.csv"
    plan_is_run "plan --ep-layout deepspeed --offload-optimizer cpu" "$T/plan.json" "$T/b-o3-device"
    plan=$(sed -n '/"host": {/,/}/p' "$T/plan.json" | tr -d ' ",{}' | grep : | grep -v '^host:' |
        tr ':' ' ' | tr '\n' ' ')
    run=$(awk '$1 == 0 && $2 ~ /^host_/ { sub(/^host_/, "", $2); printf "%s %s ", $2, $3 }' \
        "$T/b-o3/memory.csv")
    [ -n "$run" ] && [ "$plan" = "$run" ] && ok || bad "plan's host bytes '$plan', the run's '$run'"
    for d in d2h h2d; do
        p=$(sed -n "s/^ *\"${d}_bytes_per_step\": \([0-9]*\),*$/\1/p" "$T/plan.json")
        r=$(awk -v d="$d" '$1 == 0 && $2 == d && $3 == "all" { printf "%d", $5 / 3 }' \
            "$T/b-o3/comm.csv")
        [ -n "$p" ] && [ "$p" = "$r" ] && ok || bad "plan's $d bytes per step $p, the run's $r"
    done
else
    bad "plan --ep-layout deepspeed --offload-optimizer cpu failed"; cat "$T/plan.json"
fi

# a checkpoint (fp32, stage 1: the host's master apart from the device's
# working copy) saved after 2 of 4 steps resumes to the uninterrupted
# run's last two hashes
C="--stage 1 $DS --offload-optimizer cpu --quiet"
if zs_run ck-full 4 $M $C --steps 4 --save-dir "$T/ck" --save-every 2 &&
    zs_run ck-res 4 $M $C --steps 4 --resume "$T/ck/global_step2"; then
    want=$(hashes "$T/ck-full.json" | tr ',' '\n' | grep -o '[0-9a-f]\{16\}' | tail -2)
    got=$(hashes "$T/ck-res.json" | tr ',' '\n' | grep -o '[0-9a-f]\{16\}')
    [ -n "$want" ] && [ "$got" = "$want" ] && ok ||
        bad "resumed: hashes '$got', the uninterrupted run's last two '$want'"
fi

# what stays refused, with one line: the parameters offloaded, the nvme tier
R="train $M --steps 1 --quiet $DS --stage 3"
refuse -n 4 -m "not implemented with offload_param or offload_optimizer nvme" $R \
    --offload-optimizer cpu --offload-param cpu
refuse -n 4 -m "not implemented with offload_param or offload_optimizer nvme" $R \
    --offload-optimizer nvme --nvme-path "$T"
finish
