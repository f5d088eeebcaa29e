#!/bin/sh
# Measure the numbers that docs/*.md quote in their prose, tagged in the
# Markdown source as <!--name-->value, and write them as "name value" lines
# for labs/check-page.sh (the labs' page check, reused): a page whose number
# is not what the program gives now fails tests/test_docs.sh. Tags starting
# with ~ (times, the process's memory) are measured here but not compared.
# Usage: docs/numbers.sh OUTFILE (ZEROSIM names the program, default ./zerosim)
set -eu
[ $# -eq 1 ] || { echo "usage: docs/numbers.sh OUTFILE" >&2; exit 2; }
OUTFILE=$1
TOP=$(cd "$(dirname "$0")/.." && pwd)
ZS=${ZEROSIM:-./zerosim}
case $ZS in /*) ;; *) ZS=$(pwd)/$ZS ;; esac
T=$(mktemp -d)
trap 'rc=$?; rm -rf "$T"; [ "$rc" -eq 0 ] || echo "docs/numbers.sh: a run failed (status $rc); nothing measured after it" >&2' EXIT
: >"$OUTFILE"
num() { printf '%s %s\n' "$1" "$2" >>"$OUTFILE"; }
# cat NAME CATEGORY: rank 0's peak bytes of a category in T/NAME/memory.csv
cat_bytes() { awk -v c="$2" '!/^#/ && $1 == 0 && $2 == c { print $3; exit }' "$T/$1/memory.csv"; }
gb() { awk -v b="$1" -v f="$2" 'BEGIN { printf f "\n", b / 1e9 }'; }
commas() { echo "$1" | awk '{ s = $1; o = ""; while (length(s) > 3) { o = "," substr(s, length(s) - 2) o; s = substr(s, 1, length(s) - 3) } print s o }'; }

# docs/phantom.md: GPT-3 at N = 1024, stage 3, bf16, micro-batch 1, with
# DeepSpeed's default stage3_max_live_parameters and with a raised bound
GPT3="--phantom --world-size 1024 --stage 3 --layers 96 --hidden 12288 --heads 96 --seq 2048 --vocab 50257 --micro-batch 1 --precision bf16"
printf '{"zero_optimization": {"stage": 3, "stage3_max_live_parameters": 4000000000}}\n' >"$T/bound.json"
for run in default raised boundonly; do
    extra=""
    [ "$run" = raised ] && extra="--config $TOP/examples/configs/gpt3_prefetch.json"
    [ "$run" = boundonly ] && extra="--config $T/bound.json"
    start=$(date +%s.%N)
    # shellcheck disable=SC2086 # GPT3 and extra are lists of options
    "$ZS" train $GPT3 $extra --silent --csv "$T/$run" --report "$T/$run.json" </dev/null
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    states=$(( $(cat_bytes "$run" params) + $(cat_bytes "$run" grads) + $(cat_bytes "$run" optimizer) ))
    num "gpt3_${run}_peak_gb" "$(gb "$(cat_bytes "$run" total)" %.0f)"
    num "gpt3_${run}_states_gb" "$(gb "$states" %.1f)"
    num "gpt3_${run}_activations_gb" "$(gb "$(cat_bytes "$run" activations)" %.0f)"
    live=$(sed -n 's/^  "live_params_peak": \([0-9]*\),*$/\1/p' "$T/$run.json")
    num "gpt3_${run}_live_params" "$(commas "$live")"
    num "gpt3_${run}_live_gb" "$(gb $((live * 2)) %.1f)"
    num "gpt3_${run}_seconds" "$secs"
    rss=$(sed -n 's/^ *"peak_rss_bytes": \([0-9]*\),*$/\1/p' "$T/$run.json" | head -1)
    num "gpt3_${run}_rss_mb" "$(awk -v b="$rss" 'BEGIN { printf "%.0f", b / 1e6 }')"
done
num gpt3_params "$(commas "$(sed -n 's/^  "num_params": \([0-9]*\),*$/\1/p' "$T/default.json")")"
num gpt3_units_over_bound "$(sed -n 's/^  "units_over_live_bound": \([0-9]*\),*$/\1/p' "$T/default.json")"

# phantom RUN N ARGS...: a phantom run of N simulated ranks into T/RUN (a
# phantom run reports the bytes a real run does: tests/test_phantom.sh)
phantom() {
    run=$1 n=$2; shift 2
    "$ZS" train --phantom --world-size "$n" "$@" --silent --csv "$T/$run" --report "$T/$run.json" </dev/null
}
# per_step RUN OP: rank 0's bytes of OP per step (comm.csv, phase all)
per_step() {
    steps=$(awk '!/^#/ { print $7; exit }' "$T/$1/run.csv")
    awk -v op="$2" -v s="$steps" '!/^#/ && $1 == 0 && $2 == op && $3 == "all" { printf "%.0f\n", $5 / s; exit }' "$T/$1/comm.csv"
}
calls_per_step() {
    steps=$(awk '!/^#/ { print $7; exit }' "$T/$1/run.csv")
    awk -v op="$2" -v s="$steps" '!/^#/ && $1 == 0 && $2 == op && $3 == "all" { printf "%.0f\n", $4 / s; exit }' "$T/$1/comm.csv"
}
runcol() { awk -v c="$2" '/^#/ { for (i = 2; i <= NF; i++) if ($i == c) k = i - 1; next } { print $k; exit }' "$T/$1/run.csv"; }

# docs/training.md, two reduce schedules: tests/test_accounting.sh's GPT
# at N = 3 with grad-accum 4, fp32
ACC="--layers 2 --hidden 25 --heads 5 --seq 12 --vocab 31 --micro-batch 2 --grad-accum 4 --steps 2 --warmup 0"
phantom rs_s1 3 $ACC --stage 1
phantom rs_s1step 3 $ACC --stage 1 --grad-reduce step
phantom rs_s2 3 $ACC --stage 2
num rs_padded "$(commas "$(runcol rs_s1 padded_params)")"
for r in s1 s1step s2; do
    num "rs_${r}_bytes" "$(commas "$(per_step "rs_$r" reduce_scatter)")"
    num "rs_${r}_calls" "$(calls_per_step "rs_$r" reduce_scatter)"
    num "rs_${r}_grads" "$(commas "$(cat_bytes "rs_$r" grads)")"
done

# docs/training.md, activation checkpointing: the default GPT with 16 layers
phantom ck_off 1 --layers 16 --steps 1
phantom ck_sqrt 1 --layers 16 --steps 1 --checkpoint-activations sqrt
num ck_ratio "$(awk -v a="$(cat_bytes ck_off activations)" -v b="$(cat_bytes ck_sqrt activations)" \
    -v c="$(cat_bytes ck_sqrt checkpoints)" 'BEGIN { printf "%.2f", (a + 0) / (b + c) }')"

# docs/training.md, gradient compression: top-k 1% at N = 4, stage 2, 20
# steps of which 5 dense
phantom topk 4 --stage 2 --steps 20 --compression topk:0.01 --compression-warmup 5
num topk_compressed_step "$(commas $(( $(per_step topk alltoall) * 20 / 15 )))"
num topk_dense_step "$(commas $(( $(per_step topk reduce_scatter) * 20 / 5 )))"

# docs/reading-the-tables.md: the accounting example, stage 3, bf16,
# grad-accum 2, N = 3
phantom acc 3 --stage 3 --precision bf16 --grad-accum 2 --steps 4
num acc_params "$(commas "$(runcol acc num_params)")"
num acc_padded "$(commas "$(runcol acc padded_params)")"
num acc_shard "$(commas $(( $(runcol acc padded_params) / 3 )))"
num acc_params_shard_bytes "$(commas $(( $(runcol acc padded_params) / 3 * 2 )))"
num acc_total_peak "$(commas "$(cat_bytes acc total)")"
num acc_live_params "$(commas "$(sed -n 's/^  "live_params_peak": \([0-9]*\),*$/\1/p' "$T/acc.json")")"

# docs/checkpoints.md: the default GPT, stage 3 on 2 ranks, one save (a real
# run: phantom runs do not save): rank 0's shard, the tensor bytes it wrote
# (master, m and v in fp32) and the rest of its file (the header)
mkdir "$T/save"
(cd "$T/save" && sh "$TOP/tests/mpirun.sh" 2 "$ZS" train --stage 3 --steps 1 --save-dir ck \
    --silent --csv csv --report r.json </dev/null)
io() { sed -n '/"checkpoint_io"/,/}/p' "$T/save/r.json" | sed -n "s/^ *\"$1\": \([0-9]*\),*$/\1/p" | head -1; }
num save_shard "$(commas $(( $(awk '!/^#/ { print $6; exit }' "$T/save/csv/run.csv") / 2 )))"
num save_tensor_bytes "$(commas "$(io tensor_bytes_written)")"
[ "$(io tensor_bytes_written)" = "$(io tensor_bytes_written_predicted)" ] ||
    { echo "numbers.sh: the save's tensor bytes differ from the prediction" >&2; exit 1; }
num save_header_bytes $(( $(io bytes_written) - $(io tensor_bytes_written) ))

# docs/cluster.md: comm_buffers with the hierarchical reduce-scatter's and
# qgZ's temporaries (tests/test_comm_temps.sh), the test model on 4 phantom
# ranks, 2 per node: stage 1 flat and --hierarchical (fp32), stage 3 bf16
# plain and qgZ
TM="--layers 2 --hidden 24 --heads 4 --seq 10 --vocab 38 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0 --phantom --world-size 4 --ranks-per-node 2 --quiet"
"$ZS" train $TM --stage 1 --csv "$T/tf" --report "$T/tf.json" >/dev/null
"$ZS" train $TM --stage 1 --hierarchical --csv "$T/th" >/dev/null
"$ZS" train $TM --stage 3 --precision bf16 --csv "$T/tp" >/dev/null
"$ZS" train $TM --stage 3 --precision bf16 --quantized-gradients --csv "$T/tq" >/dev/null
num hier_padded "$(commas "$(sed -n 's/^  "padded_params": \([0-9]*\),*$/\1/p' "$T/tf.json")")"
num hier_tmp_bytes "$(commas $(( $(cat_bytes th comm_buffers) - $(cat_bytes tf comm_buffers) )))"
num qgz_comm_buffers "$(commas "$(cat_bytes tq comm_buffers)")"
num plain_comm_buffers "$(commas "$(cat_bytes tp comm_buffers)")"

# docs/planner.md: the worked example and the published layouts, by the
# plan commands the page shows (docs/plan-numbers.sh; tests/test_plan_llama.sh)
ZEROSIM=$ZS sh "$TOP/docs/plan-numbers.sh" "$T/plan.txt"
cat "$T/plan.txt" >>"$OUTFILE"
