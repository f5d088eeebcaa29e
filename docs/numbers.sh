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
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
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
