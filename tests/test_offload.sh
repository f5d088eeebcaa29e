#!/bin/sh
# offload_optimizer (ZeRO-Offload) to the host and to files ("nvme"):
#  - the parameters are byte-identical to the same run without offload, in
#    stages 1-3 and fp32, bf16 and fp16, with more than one swap piece;
#  - every host and nvme byte and every transfer equals its prediction, and
#    a phantom run reports the same (with offload_param too, on every rank);
#  - ZeRO-Offload's 4M bytes per step for an fp16 model of M parameters
#    (2M down, 2M up, summed over the ranks);
#  - the swap files are gone after the run, also after a failed one; bad
#    settings get one line before training.
. "$(dirname "$0")/testlib.sh"

MODEL="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 32 --steps 4"
run() { n=$1; shift; sh "$HERE/mpirun.sh" "$n" "$ZS" train --quiet "$@" </dev/null; }
mkdir -p "$T/nvme"

# byte-identical: none, cpu, nvme (in fast mode, the first case)
for case in "1 fp32" "2 bf16" "3 fp16" "2 fp32 --deterministic" "3 bf16 --grad-accum 2"; do
    set -- $case
    st=$1 p=$2; shift 2
    ref="" line=""
    for off in none cpu nvme; do
        run 2 $MODEL --stage "$st" --precision "$p" "$@" --offload-optimizer "$off" \
            --nvme-path "$T/nvme" --report "$T/r.json" || { bad "stage $st $p $off failed"; continue; }
        h=$(key "$T/r.json" param_hash)
        line="$line $off=$h"
        [ -z "$ref" ] && ref=$h
        [ -n "$h" ] && [ "$h" = "$ref" ] && ok || bad "stage $st $p $*: offload $off gives $h, none $ref"
    done
    echo "stage $st $p $*:$line"
    zs_fast && break
done
# a larger model: the shard (about 420,000 elements per rank) streams
# through the swap buffers in two pieces of 262,144
BIG="--layers 4 --hidden 128 --heads 4 --seq 16 --vocab 64 --steps 2 --micro-batch 2"
run 2 $BIG --stage 2 --precision bf16 --report "$T/a.json" || bad "large model failed"
run 2 $BIG --stage 2 --precision bf16 --offload-optimizer nvme --nvme-path "$T/nvme" \
    --report "$T/b.json" || bad "large model with nvme failed"
[ "$(key "$T/a.json" param_hash)" = "$(key "$T/b.json" param_hash)" ] && ok ||
    bad "two swap pieces: $(key "$T/b.json" param_hash), without offload $(key "$T/a.json" param_hash)"
grep -q '"nvme_read"' "$T/b.json" && ok || bad "no nvme_read in the report"

# every tier row and every transfer: measured = predicted (ratio 1.000)
check_table() { # NAME FILE: the memory rows of the tiers and the transfer rows
    rows=$(grep -E '^ *[0-9]+  (host|nvme) [a-z_]+ |^ *[0-9]+  (d2h|h2d|nvme_read|nvme_write) ' "$2")
    [ -n "$rows" ] && ok || { bad "$1: no tier or transfer rows"; return; }
    echo "$rows" | awk '$NF != "1.000" {bad = 1; print "  off: " $0} END {exit bad}' && ok ||
        bad "$1: a tier or transfer differs from its prediction"
}
for off in cpu nvme; do
    sh "$HERE/mpirun.sh" 3 "$ZS" train $MODEL --stage 3 --precision fp16 --offload-optimizer "$off" \
        --nvme-path "$T/nvme" --csv "$T/csv" </dev/null >"$T/real.txt" || bad "3 ranks $off failed"
    check_table "$off, 3 ranks" "$T/real.txt"
    # the CSV has the same tier rows, measured = predicted
    rows=$(awk '$2 ~ /^(host|nvme)_/ {n++; if ($3 != $4) bad = 1} END {print n + 0, bad + 0}' \
        "$T/csv/memory.csv")
    [ "$rows" != "0 0" ] && [ "${rows#* }" = 0 ] && ok || bad "$off: memory.csv tier rows: $rows"
    "$ZS" train --phantom --world-size 3 $MODEL --stage 3 --precision fp16 \
        --offload-optimizer "$off" --nvme-path "$T/nvme" >"$T/ph.txt" || bad "phantom $off failed"
    check_table "$off, phantom" "$T/ph.txt"
    # the phantom run's tier and transfer rows are the real run's
    a=$(grep -E '^ *[0-9]+  (host |nvme |d2h|h2d)' "$T/real.txt" | awk '{print $2, $3, $4}')
    b=$(grep -E '^ *[0-9]+  (host |nvme |d2h|h2d)' "$T/ph.txt" | awk '{print $2, $3, $4}')
    [ "$a" = "$b" ] && ok || bad "phantom $off differs from the real run: $b vs $a"
done

# the plan of the same GPT equals the phantom run (and so the real one):
# every host and nvme category and the transfers per step
"$ZS" plan --arch gpt --layers 2 --hidden 32 --heads 4 --seq 16 --vocab 32 --micro-batch 8 \
    --stage 3 --precision fp16 --dp 3 --offload-optimizer nvme --json >"$T/plan.json" ||
    bad "plan --offload-optimizer failed"
# "tier category bytes" lines from the plan's JSON and from the phantom's table
planned=$(awk '/"bytes_per_device": \{/ {on = 1; next} on && /"(host|nvme)": \{/ {t = $1; gsub(/[":{ ]/, "", t); next}
    on && /^ *},?$/ {if (t == "") on = 0; t = ""; next}
    on && t != "" {k = $1; v = $2; gsub(/[":,]/, "", k); gsub(/,/, "", v); print t, k, v}' "$T/plan.json")
ran=$(awk '$2 == "host" || $2 == "nvme" {print $2, $3, $4}' "$T/ph.txt" | sed -n '1,20p')
echo "planned:" $planned
[ -n "$planned" ] && [ "$planned" = "$ran" ] && ok || bad "plan and phantom differ: plan [$planned], phantom [$ran]"
for k in d2h h2d nvme_read nvme_write; do
    p=$(sed -n "s/^ *\"${k}_bytes_per_step\": \([0-9]*\),*$/\1/p" "$T/plan.json")
    r=$(awk -v k="$k" '$2 == k {printf "%.0f", $3; exit}' "$T/ph.txt")
    [ -n "$p" ] && [ "$p" = "$r" ] && ok || bad "$k per step: plan $p, phantom $r"
done

# offload_param (stage 3): the parameter shard on the host, each gather's
# own part sent up; the parts differ per rank (the tied embedding is gathered
# twice), and each rank's measured bytes equal its own prediction
for off in "cpu cpu" "nvme cpu" "cpu nvme" "nvme nvme"; do
    set -- $off
    sh "$HERE/mpirun.sh" 3 "$ZS" train $MODEL --stage 3 --precision bf16 --offload-optimizer "$1" \
        --nvme-path "$T/nvme" --offload-param "$2" --checkpoint-activations every:1 </dev/null \
        >"$T/real.txt" || bad "offload_param $2 with optimizer $1 failed"
    check_table "offload_param, optimizer $off" "$T/real.txt"
    grep -q '^ *0  host params' "$T/real.txt" && ok || bad "offload_param: no host params row"
    n=$(awk '$2 == "h2d" {print $3}' "$T/real.txt" | sort -u | wc -l)
    [ "$n" -ge 2 ] && ok || bad "offload_param: the ranks' h2d bytes should differ, got $n distinct"
done
run 3 $MODEL --stage 3 --precision bf16 --checkpoint-activations every:1 --report "$T/a.json" ||
    bad "stage 3 without offload failed"
for pdev in cpu nvme; do
    run 3 $MODEL --stage 3 --precision bf16 --checkpoint-activations every:1 --offload-optimizer cpu \
        --offload-param "$pdev" --nvme-path "$T/nvme" --report "$T/b.json" ||
        bad "offload_param $pdev failed"
    [ "$(key "$T/a.json" param_hash)" = "$(key "$T/b.json" param_hash)" ] && ok ||
        bad "offload_param $pdev changes the parameters"
    zs_fast && break
done
# the plan of the last table's run (both in files) equals its rank 0
"$ZS" plan --arch gpt --layers 2 --hidden 32 --heads 4 --seq 16 --vocab 32 --micro-batch 8 \
    --stage 3 --precision bf16 --dp 3 --offload-optimizer nvme --offload-param nvme \
    --checkpoint-activations every:1 --json >"$T/plan.json" || bad "plan --offload-param failed"
for k in h2d nvme_read nvme_write; do
    p=$(sed -n "s/^ *\"${k}_bytes_per_step\": \([0-9]*\),*$/\1/p" "$T/plan.json")
    r=$(awk -v k="$k" '$1 == 0 && $2 == k {printf "%.0f", $3; exit}' "$T/real.txt")
    [ -n "$p" ] && [ "$p" = "$r" ] && ok || bad "offload_param $k: plan $p, rank 0 ran $r"
done

# a phantom run of offload_param reports each rank's own transfers (its own
# part of each gather goes up), as the real run does: rank 1's h2d and
# nvme_read bytes are not rank 0's
M=$MODEL
for pdev in cpu nvme; do
    set -- --stage 3 --precision bf16 --offload-optimizer cpu --offload-param "$pdev" \
        --nvme-path "$T/nvme" --checkpoint-activations every:1
    zs_run "pparam-$pdev" 2 $M "$@" && phantom_same "pparam-$pdev" 2 "$@"
done

# the other reduction paths: gradients accumulated over micro-batches on the
# host, in fixed point, and DeepSpeed's step schedule (the shard copied down
# once, before the optimizer)
for extra in "--stage 2 --grad-accum 3" "--stage 3 --grad-accum 2 --deterministic" \
    "--stage 1 --grad-reduce step --grad-accum 2" "--stage 2 --compression int8"; do
    sh "$HERE/mpirun.sh" 2 "$ZS" train $MODEL $extra --offload-optimizer cpu --report "$T/b.json" \
        </dev/null >"$T/real.txt" || bad "$extra failed"
    check_table "$extra" "$T/real.txt"
    run 2 $MODEL $extra --report "$T/a.json" || bad "$extra without offload failed"
    [ "$(key "$T/a.json" param_hash)" = "$(key "$T/b.json" param_hash)" ] && ok ||
        bad "$extra: offload changes the parameters"
    zs_fast && break
done

# ZeRO-Offload's 4M bytes per step: fp16, M parameters, summed over 2 ranks
run 2 $MODEL --stage 2 --precision fp16 --offload-optimizer cpu --report "$T/r.json" ||
    bad "4M run failed"
M=$(key "$T/r.json" num_params)
# each rank's "d2h" and "h2d" in "comm" (the objects with a prediction):
# their measured "bytes"
moved=$(awk '/"(d2h|h2d)": \{/ {inop = 1; next}
    inop == 1 && /^ *"bytes": / {gsub(/[",]/, "", $2); b = $2; inop = 2; next}
    inop == 2 && /"predicted_bytes"/ {s += b}
    {inop = 0}
    END {printf "%.0f", s}' "$T/r.json")
steps=$(key "$T/r.json" steps)
echo "fp16, M = $M parameters, $steps steps: $moved bytes moved between device and host"
[ -n "$M" ] && [ "$moved" = "$((4 * M * steps))" ] && ok ||
    bad "moved $moved bytes, expected 4M x steps = $((4 * M * steps))"

# a checkpoint saved from the nvme tier resumes exactly with the host tier
run 2 $MODEL --stage 2 --precision bf16 --offload-optimizer nvme --nvme-path "$T/nvme" \
    --save-dir "$T/ck" --save-every 2 --report "$T/a.json" || bad "save with nvme failed"
run 2 $MODEL --stage 3 --precision bf16 --offload-optimizer cpu --resume "$T/ck/global_step2" \
    --report "$T/b.json" || bad "resume with cpu failed"
[ "$(key "$T/a.json" param_hash)" = "$(key "$T/b.json" param_hash)" ] && ok ||
    bad "nvme checkpoint resumed on the host: $(key "$T/b.json" param_hash), uninterrupted $(key "$T/a.json" param_hash)"

# the files go with the run, also when it fails after creating them
[ -z "$(ls -A "$T/nvme")" ] && ok || bad "files left in nvme_path: $(ls -A "$T/nvme")"
run 2 $MODEL --stage 2 --offload-optimizer nvme --nvme-path "$T/nvme" --device-memory 1MiB \
    2>"$T/err" && bad "a run out of device memory succeeded"
grep -q "out of memory on rank" "$T/err" && ok || bad "no out-of-memory line: $(cat "$T/err")"
[ -z "$(ls -A "$T/nvme")" ] && ok || bad "files left after a failed run: $(ls -A "$T/nvme")"

# bad settings: one line, before training
refused() { # PATTERN ARGS...
    pat=$1; shift
    run 1 $MODEL "$@" 2>"$T/err" >"$T/out" && { bad "accepted: $*"; return; }
    grep -q -- "$pat" "$T/err" && [ "$(wc -l <"$T/err")" -eq 1 ] && ok ||
        bad "$*: expected one line with \"$pat\", got: $(cat "$T/err")"
    grep -q '^step' "$T/out" && bad "$*: trained before failing" || ok
}
refused "needs ZeRO stage 1, 2 or 3" --stage 0 --offload-optimizer cpu
refused "needs nvme_path" --stage 1 --offload-optimizer nvme
refused "nvme_path $T/none is not a folder" --stage 1 --offload-optimizer nvme --nvme-path "$T/none"
refused "offload_param \"device\": \"nvme\" needs nvme_path" --stage 3 --offload-optimizer cpu \
    --offload-param nvme
refused "offload_param \"device\": \"nvme\" needs nvme_path" --stage 3 --offload-param nvme
refused "out of memory in the simulated host tier on rank 0: optimizer_master asked for" \
    --stage 1 --offload-optimizer cpu --host-memory 64KiB
refused "--offload-optimizer must be none, cpu or nvme" --stage 1 --offload-optimizer disk

finish
