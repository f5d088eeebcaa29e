#!/bin/sh
# Phantom runs (zerosim train --phantom --world-size N): the real engine for
# simulated ranks, without storage, arithmetic or traffic. For small models
# a phantom run and a real run under mpirun with the same settings must
# report identical bytes: every memory category of every rank, the memory
# timeline of rank 0, and every op of every training phase (calls, bytes,
# API bytes). The report phase is left out: a real run hashes its
# parameters there, and a phantom run has none to hash. Then: a GPT-3-sized
# model at N = 1024, stage 3, in seconds and well under 512 MB; and the
# error paths.
. "$(dirname "$0")/testlib.sh"

MODEL="--layers 3 --hidden 24 --heads 4 --seq 10 --vocab 37 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0"
same() { # label real-dir phantom-dir
    if ! cmp -s "$2/memory.csv" "$3/memory.csv"; then
        bad "$1: memory differs"; diff "$2/memory.csv" "$3/memory.csv" | head -5; return
    fi
    if ! cmp -s "$2/timeline.csv" "$3/timeline.csv"; then
        bad "$1: rank 0's memory timeline differs"; return
    fi
    # training phases only; columns rank op phase calls bytes api_bytes
    strip() { awk '$1 !~ /^#/ && $3 != "report" && $3 != "all" { print $1, $2, $3, $4, $5, $7 }' "$1"; }
    strip "$2/comm.csv" > "$T/real.txt"
    strip "$3/comm.csv" > "$T/phantom.txt"
    if [ ! -s "$T/real.txt" ] || ! cmp -s "$T/real.txt" "$T/phantom.txt"; then
        bad "$1: traffic differs"; diff "$T/real.txt" "$T/phantom.txt" | head -5; return
    fi
    if [ "$(key "$2/report.json" live_params_peak)" != "$(key "$3/report.json" live_params_peak)" ]; then
        bad "$1: live_params_peak differs"; return
    fi
    ok
}

run_pair() { # label N args...
    label=$1 n=$2
    shift 2
    d="$T/$label"
    mkdir -p "$d"
    if ! sh "$HERE/mpirun.sh" "$n" "$ZS" train $MODEL "$@" --quiet --csv "$d/real" \
            --report "$d/real/report.json" > "$d/real.log" 2>&1; then
        bad "$label: real run failed"; cat "$d/real.log"; return
    fi
    if ! "$ZS" train --phantom --world-size "$n" $MODEL "$@" --quiet --csv "$d/phantom" \
            --report "$d/phantom/report.json" > "$d/phantom.log" 2>&1; then
        bad "$label: phantom run failed"; cat "$d/phantom.log"; return
    fi
    same "$label" "$d/real" "$d/phantom"
}

for stage in 0 1 2 3; do
    run_pair "n2-stage$stage" 2 --stage "$stage"
done
run_pair n3-stage3-bf16-ckpt 3 --stage 3 --precision bf16 --checkpoint-activations every:1
run_pair n3-stage1-fp16 3 --stage 1 --precision fp16
run_pair n3-stage2-det 3 --stage 2 --deterministic
run_pair n3-stage2-topk 3 --stage 2 --compression topk:0.1
run_pair n4-stage3-int8-sqrt 4 --stage 3 --compression int8 --checkpoint-activations sqrt
run_pair n3-mlp-stage3 3 --stage 3 --model mlp --widths 17,9
run_pair n2-stage3-sgd 2 --stage 3 --optimizer sgd --precision bf16
run_pair n3-stage1-step 3 --stage 1 --precision bf16 --grad-reduce step
run_pair n2-stage0-step-det 2 --stage 0 --deterministic --grad-reduce step

# the phantom report says what it is
p="$T/n2-stage3/phantom/report.json"
if grep -q '"phantom": true' "$p" && grep -q '"param_hash": null' "$p"; then ok; else bad "phantom report not marked"; fi
if grep -q '"phantom": false' "$T/n2-stage3/real/report.json"; then ok; else bad "real report not marked"; fi

# GPT-3 (96 layers, hidden 12288, 96 heads, sequence 2048) at N = 1024, stage 3
cat > "$T/gpt3.json" <<'JSON'
{"zero_optimization": {"stage": 3, "stage3_max_live_parameters": 4000000000,
                       "stage3_prefetch_bucket_size": 2000000000}}
JSON
start=$(date +%s)
if "$ZS" train --phantom --world-size 1024 --config "$T/gpt3.json" --layers 96 --hidden 12288 \
        --heads 96 --seq 2048 --vocab 50257 --micro-batch 1 --precision bf16 \
        --report "$T/gpt3/report.json" --csv "$T/gpt3" > "$T/gpt3.log" 2>&1; then
    secs=$(( $(date +%s) - start ))
    rss=$(sed -n 's/.*peak host memory of this process: \([0-9]*\) bytes.*/\1/p' "$T/gpt3.log")
    params=$(key "$T/gpt3/report.json" num_params)
    ranks=$(awk '$1 !~ /^#/ && $2 == "params" { n++ } END { print n }' "$T/gpt3/memory.csv")
    echo "GPT-3 phantom: $params parameters, $ranks simulated ranks, $secs s, peak RSS $rss bytes"
    if [ "$params" = 174604259328 ] && [ "$ranks" = 1024 ]; then ok; else bad "GPT-3: $params parameters on $ranks ranks"; fi
    if [ -n "$rss" ] && [ "$rss" -lt 268435456 ]; then ok; else bad "GPT-3 phantom used $rss bytes of host memory"; fi
    if [ "$secs" -le 60 ]; then ok; else bad "GPT-3 phantom took $secs s"; fi
    # model states are exactly predicted on every rank
    if awk '$1 !~ /^#/ && $2 ~ /^(params|grads|optimizer)$/ && $3 != $4 { bad++ } END { exit bad > 0 }' "$T/gpt3/memory.csv"; then ok
    else bad "GPT-3 phantom: model states differ from the prediction"; fi
else
    bad "GPT-3 phantom run failed"; cat "$T/gpt3.log"
fi

# GPT-3 with DeepSpeed's default stage3_max_live_parameters (1e9), smaller
# than one block (12 h^2 + 13 h = 1,812,099,072 parameters): DeepSpeed
# gathers each block anyway, alone, and so does zerosim; all 96 blocks are
# reported as larger than the bound
if "$ZS" train --phantom --world-size 1024 --stage 3 --layers 96 --hidden 12288 --heads 96 \
        --seq 2048 --vocab 50257 --micro-batch 1 --precision bf16 \
        --report "$T/gpt3-default.json" > "$T/gpt3-default.log" 2>&1; then
    [ "$(key "$T/gpt3-default.json" live_params_peak)" = 1812099072 ] &&
        [ "$(key "$T/gpt3-default.json" units_over_live_bound)" = 96 ] && ok ||
        bad "GPT-3 at the default bound: $(grep -E 'live_params_peak|units_over' "$T/gpt3-default.json")"
else
    bad "GPT-3 phantom at DeepSpeed's default stage3_max_live_parameters failed"; cat "$T/gpt3-default.log"
fi

# the same model at 16,384 ranks: ranks whose programs are the same run
# once, so the time does not grow with N; every category is predicted
start=$(date +%s)
if "$ZS" train --phantom --world-size 16384 --config "$T/gpt3.json" --layers 96 --hidden 12288 \
        --heads 96 --seq 2048 --vocab 50257 --micro-batch 1 --precision bf16 \
        --csv "$T/gpt3-16k" > "$T/gpt3-16k.log" 2>&1; then
    secs=$(( $(date +%s) - start ))
    ranks=$(awk '$1 !~ /^#/ && $2 == "params" { n++ } END { print n }' "$T/gpt3-16k/memory.csv")
    echo "GPT-3 phantom at 16384 simulated ranks: $secs s"
    [ "$ranks" = 16384 ] && ok || bad "GPT-3 at 16384: $ranks ranks in the report"
    [ "$secs" -le 30 ] && ok || bad "GPT-3 phantom at 16384 ranks took $secs s"
    if awk '$1 !~ /^#/ && $2 != "total" && $3 != $4 { bad++ } END { exit bad > 0 }' "$T/gpt3-16k/memory.csv"; then ok
    else bad "GPT-3 at 16384: a category differs from the prediction"; fi
else
    bad "GPT-3 phantom at 16384 ranks failed"; cat "$T/gpt3-16k.log"
fi

# running each class of ranks once reports what running every rank reports
# (compression makes the ranks' all-to-all bytes differ: 5 ranks, uneven)
for args in "--stage 2 --compression topk:0.05" "--stage 3 --compression int8" "--stage 1"; do
    "$ZS" train --phantom --world-size 5 $MODEL $args --quiet --csv "$T/cls" >/dev/null 2>&1 &&
    ZEROSIM_PHANTOM_EVERY_RANK=1 "$ZS" train --phantom --world-size 5 $MODEL $args --quiet \
        --csv "$T/every" >/dev/null 2>&1 || { bad "phantom $args failed"; continue; }
    for f in memory.csv comm.csv; do
        if cmp -s "$T/cls/$f" "$T/every/$f"; then ok
        else bad "phantom $args: $f differs when every rank runs"; diff "$T/cls/$f" "$T/every/$f" | head -4; fi
    done
done

# error paths: one line, non-zero exit
expect_error() { # label pattern args...
    label=$1 pat=$2
    shift 2
    if "$ZS" train "$@" > "$T/err.out" 2> "$T/err.txt"; then
        bad "$label: succeeded"
    elif [ "$(wc -l < "$T/err.txt")" -eq 1 ] && grep -q "$pat" "$T/err.txt"; then ok
    else bad "$label: $(cat "$T/err.txt")"; fi
}
expect_error "phantom without world size" "needs --world-size" --phantom
expect_error "world size without phantom" "for phantom runs" --world-size 4
expect_error "world size 0" "world-size" --phantom --world-size 0
expect_error "world size junk" "world-size" --phantom --world-size four
expect_error "phantom with a backend" "drop --backend" --phantom --world-size 2 --backend cpu
expect_error "does not fit" "out of memory" --phantom --world-size 8 --layers 8 --hidden 256 --heads 4 --device-memory 1MB
expect_error "bad batch split" "train" --phantom --world-size 3 --train-batch-size 16 --micro-batch 4
finish
