#!/bin/sh
# offload_param without offload_optimizer (as DeepSpeed allows it: stage 3,
# device cpu or nvme): the parameter shard lives on the host (or in the
# rank's swap file) and each gather sends this rank's part up (read from the
# file first); the optimizer and its fp32 master stay on the device and the
# updated shard goes down after each applied step (and into the file).
#  - per-step parameter hashes equal stage 2's and stage 3's without offload
#    (bf16 first; fp32, fp16 with accumulation and deterministic mode in the
#    full run), for cpu and nvme;
#  - nvme: the file's reads are the gathers' parts (the h2d bytes), its
#    writes the shard once per applied step, each equal to its prediction;
#    a phantom run reports the same (full run); no swap file is left behind;
#  - every memory category, the host tier and the d2h and h2d bytes of every
#    rank equal their predictions; the plan's device categories, host
#    parameters and transfers per step equal rank 0's (not phantom_same: a
#    phantom run's gathers send rank 0's parts up on every rank, with
#    offload_optimizer too);
#  - d2h per step is the shard in working precision;
#  - a checkpoint resumes exactly (full run);
#  - the paper conventions of the planner refused in one line.
. "$(dirname "$0")/testlib.sh"

M="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 32 --steps 3"

# transfers LABEL DIR [nvme]: every rank's d2h and h2d (and nvme read and
# write) totals and host tier rows are their predictions, and there is at
# least one of each
transfers() {
    awk -v L="$1" -v nv="${3:-}" '
        $3 == "all" && ($2 == "d2h" || $2 == "h2d" || $2 ~ /^nvme_(read|write)$/) {
            n[$2]++; if ($5 != $6) { printf "FAIL: %s rank %s %s: measured %s predicted %s\n", L, $1, $2, $5, $6; bad++ } }
        END { exit (bad > 0 || n["d2h"] < 1 || n["h2d"] < 1 ||
                    (nv != "" && (n["nvme_read"] < 1 || n["nvme_write"] < 1))) }' "$2/comm.csv" &&
        awk '$2 ~ /^host_/ { n++; if ($3 != $4) bad++ } END { exit (bad > 0 || n < 1) }' \
            "$2/memory.csv" && ok || bad "$1: a transfer or host row differs from its prediction"
}

for case in "bf16" "fp32" "fp16 --grad-accum 2" "bf16 --deterministic --grad-accum 2"; do
    set -- $case
    p=$1
    shift
    train_hashes s2 3 --stage 2 --precision "$p" "$@" || continue
    train_hashes s3 3 --stage 3 --precision "$p" "$@" || continue
    train_hashes off 3 --stage 3 --precision "$p" "$@" --offload-param cpu || continue
    same_hashes s3 s2
    same_hashes off s2
    echo "$case: offload_param cpu alone $(cat "$T/off.h")"
    measured_is_predicted "offload_param $case" "$T/off"
    transfers "offload_param $case" "$T/off"
    # the shard goes down once per applied step, in working precision
    S=$(awk '$1 == 0 && $2 == "host_params" { print $3 }' "$T/off/memory.csv")
    d2h=$(awk '$1 == 0 && $2 == "d2h" && $3 == "all" { printf "%.0f", $5 }' "$T/off/comm.csv")
    [ -n "$S" ] && [ "$d2h" = "$((3 * S))" ] && ok ||
        bad "$case: d2h $d2h bytes in 3 steps, the host shard is $S bytes"
    # nvme: the shard in the file (read by the gathers, written after each
    # step), staged on the host; the same hashes, and the phantom run agrees
    mkdir -p "$T/nv"
    if train_hashes offnv 3 --stage 3 --precision "$p" "$@" --offload-param nvme \
        --nvme-path "$T/nv"; then
        same_hashes offnv s2
        echo "$case: offload_param nvme alone $(cat "$T/offnv.h")"
        measured_is_predicted "offload_param nvme $case" "$T/offnv"
        transfers "offload_param nvme $case" "$T/offnv" nvme
        nv=$(awk '$1 == 0 && $2 == "nvme_params" { print $3 }' "$T/offnv/memory.csv")
        hs=$(awk '$1 == 0 && $2 == "host_params" { print $3 }' "$T/offnv/memory.csv")
        [ -n "$nv" ] && [ "$nv" = "$S" ] && [ "$hs" = "$S" ] && ok ||
            bad "$case nvme: nvme_params $nv, host staging $hs, the cpu run's host shard $S"
        for q in 0 1 2; do
            rw=$(awk -v q=$q '$1 == q && $3 == "all" { v[$2] = sprintf("%.0f", $5) }
                 END { print v["nvme_read"], v["h2d"], v["nvme_write"], v["d2h"] }' \
                "$T/offnv/comm.csv")
            set -- $rw
            [ $# -eq 4 ] && [ "$1" = "$2" ] && [ "$3" = "$4" ] && [ "$3" = "$((3 * S))" ] && ok ||
                bad "$case nvme rank $q: nvme read $1 (h2d $2), write $3 (d2h $4, 3 shards $((3 * S)))"
        done
        set -- $case
        shift
        zs_fast || phantom_same offnv 3 --stage 3 --precision "$p" "$@" --offload-param nvme \
            --nvme-path "$T/nv"
        # shellcheck disable=SC2010 # any file at all in the folder
        ls -A "$T/nv" | grep -q . && bad "$case: a swap file was left in --nvme-path" || ok
    fi
    zs_fast && break
done

# the plan of the bf16 run: its categories and transfers are rank 0's
# (cpu and nvme)
for pdev in cpu nvme; do
    set -- --offload-param $pdev
    [ $pdev = nvme ] && set -- "$@" --nvme-path "$T/nv"
    zs_run "pl$pdev" 3 $M --stage 3 --precision bf16 "$@" || true
    "$ZS" plan --arch gpt --layers 2 --hidden 32 --heads 4 --seq 16 --vocab 32 --micro-batch 8 \
        --stage 3 --precision bf16 --dp 3 --offload-param $pdev --json >"$T/plan.json" ||
        bad "plan --offload-param $pdev alone failed"
    # plan_is_run compares the device's categories: the host and nvme rows apart
    mkdir -p "$T/pl-device"
    grep -v ' host_\| nvme_' "$T/pl$pdev/memory.csv" >"$T/pl-device/memory.csv"
    plan_is_run "plan offload_param $pdev" "$T/plan.json" "$T/pl-device"
    for tier in host $([ $pdev = nvme ] && echo nvme); do
        hp=$(sed -n "/\"$tier\": {/,/}/s/^ *\"params\": \([0-9]*\)$/\1/p" "$T/plan.json")
        hr=$(awk -v t="$tier" '$1 == 0 && $2 == t "_params" { print $3 }' "$T/pl$pdev/memory.csv")
        [ -n "$hp" ] && [ "$hp" = "$hr" ] && ok || bad "$pdev: $tier params: plan $hp, rank 0 ran $hr"
    done
    for k in d2h h2d $([ $pdev = nvme ] && echo nvme_read nvme_write); do
        p=$(sed -n "s/^ *\"${k}_bytes_per_step\": \([0-9]*\),*$/\1/p" "$T/plan.json")
        r=$(awk -v k="$k" '$1 == 0 && $2 == k && $3 == "all" { printf "%.0f", $5 / 3 }' \
            "$T/pl$pdev/comm.csv")
        [ -n "$p" ] && [ "$p" = "$r" ] && ok ||
            bad "offload_param $pdev $k per step: plan $p, rank 0 ran $r"
    done
    zs_fast && break
done

# a checkpoint saved with the shard on the host (or in the file) resumes
# exactly (full run)
if ! zs_fast; then
    for pdev in cpu nvme; do
        rm -rf "$T/ck"
        set -- --offload-param $pdev
        [ $pdev = nvme ] && set -- "$@" --nvme-path "$T/nv"
        zs_run ck1 2 $M --steps 4 --stage 3 --precision bf16 "$@" --save-dir "$T/ck" \
            --save-every 2 &&
            zs_run ck2 2 $M --steps 4 --stage 3 --precision bf16 "$@" \
                --resume "$T/ck/global_step2" &&
            { [ "$(key "$T/ck1.json" param_hash)" = "$(key "$T/ck2.json" param_hash)" ] && ok ||
                  bad "resumed with offload_param $pdev: $(key "$T/ck2.json" param_hash), uninterrupted $(key "$T/ck1.json" param_hash)"; }
    done
fi

refuse -m "modelled in the zerosim convention only" \
    plan --params 1e9 --dp 8 --stage 3 --offload-param cpu --convention paper

finish
