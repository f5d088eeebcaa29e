#!/bin/sh
# The portable backend across parallel layouts: with --backend ref
# --deterministic, the same model and global batch (micro-batch 2, 8
# sequences a step, --train-batch-size) give the same param_hash on every
# layout of a class: data-parallel sizes 1, 2 and 4, ZeRO stages 0-3,
# pipeline stages 1, 2 and 4 under each schedule, the GPT's tensor-parallel
# sizes 1, 2 and 4 with and without sequence parallelism (and 3, 6 and 8
# with --exact-slices 12 and 8), expert
# parallelism 1, 2 and 4, activation checkpointing, optimizer and parameter
# offload (host and nvme). Each class's hash is the one recorded in
# tests/ref_hashes.txt (the layout-* entries), not one this test computes:
# a layout that differs, or a machine that gets other bytes, fails. The
# Llama family's tensor parallelism is a class of its own (docs/portable.md
# says why). Full tier: the whole matrix (a few minutes); fast: three
# layouts.
. "$(dirname "$0")/testlib.sh"

# recorded ENTRY: the hash of ref_hashes.txt's entry ENTRY
recorded() { awk -v r="$1" '$1 == r { print $2 }' "$HERE/ref_hashes.txt"; }
# entry_opts ENTRY: its options
entry_opts() { awk -v r="$1" '$1 == r { for (i = 4; i <= NF; i++) printf "%s ", $i }' "$HERE/ref_hashes.txt"; }

# layout ENTRY RANKS EXTRA...: the entry's run with EXTRA on RANKS ranks
# prints the entry's recorded param_hash
layout() {
    entry=$1 n=$2
    shift 2
    want=$(recorded "$entry")
    if [ -z "$want" ]; then
        bad "$entry: no such entry in tests/ref_hashes.txt"
        return
    fi
    label="$entry $n ranks $*"
    # shellcheck disable=SC2046 # the entry's options are words
    if [ "$n" = 1 ]; then
        set -- "$ZS" train $(entry_opts "$entry") "$@"
    else
        set -- sh "$HERE/mpirun.sh" "$n" "$ZS" train $(entry_opts "$entry") "$@"
    fi
    "$@" --backend ref --deterministic >"$T/run.log" 2>&1 </dev/null ||
        { bad "$label: the run failed: $(tail -n 1 "$T/run.log")"; return; }
    got=$(sed -n 's/^param_hash \([0-9a-f]*\),.*/\1/p' "$T/run.log" | tail -n 1)
    if [ "$got" = "$want" ]; then
        ok
    else
        bad "$label: param_hash ${got:-missing}, the class's recorded $want (tests/ref_hashes.txt)"
    fi
}

if zs_fast; then
    layout layout-gpt 2 --stage 3
    layout layout-gpt 2 --tp 2 --sequence-parallel
    layout layout-moe 2 --ep 2
    layout layout-gpt-s12 3 --tp 3
    finish
fi

# the dense GPT: data parallelism, every stage, checkpointing, offload, pipelines
layout layout-gpt 1
layout layout-gpt 2
layout layout-gpt 4
for s in 0 1 2 3; do
    layout layout-gpt 2 --stage "$s"
done
layout layout-gpt 1 --checkpoint-activations every:1
layout layout-gpt 2 --stage 3 --checkpoint-activations every:2
layout layout-gpt 2 --stage 2 --offload-optimizer cpu
layout layout-gpt 2 --stage 3 --offload-param cpu --offload-optimizer cpu
layout layout-gpt 2 --stage 3 --offload-optimizer nvme --nvme-path "$T"
for sched in gpipe 1f1b; do
    layout layout-gpt 2 --pp 2 --pp-schedule "$sched"
done
layout layout-gpt 2 --pp 2 --pp-schedule interleaved --virtual-stages 2
layout layout-gpt 4 --pp 4
layout layout-gpt 4 --pp 2 --stage 1
# tensor and sequence parallelism: the same class (exact sums of slices)
layout layout-gpt 2 --tp 2
layout layout-gpt 4 --tp 4
layout layout-gpt 4 --tp 2 --stage 3
layout layout-gpt 4 --tp 2 --pp 2
layout layout-gpt 2 --tp 2 --checkpoint-activations every:1
layout layout-gpt 2 --tp 2 --sequence-parallel
layout layout-gpt 4 --tp 4 --sequence-parallel
layout layout-gpt 4 --tp 2 --sequence-parallel --stage 2
layout layout-gpt-odd 1
layout layout-gpt-odd 2 --tp 2
layout layout-gpt-odd 4 --tp 2 --sequence-parallel
# more slices: TP sizes that 4 does not divide (--exact-slices)
layout layout-gpt-s12 2 --tp 2
layout layout-gpt-s12 3 --tp 3
layout layout-gpt-s12 4 --tp 4 --sequence-parallel
layout layout-gpt-s12 6 --tp 6
layout layout-gpt-s12 6 --tp 3 --stage 3
layout layout-gpt-s8 2 --tp 2 --sequence-parallel
layout layout-gpt-s8 8 --tp 8
layout layout-gpt-s8 8 --tp 4 --pp 2
# a mixture of experts: data and expert parallelism
layout layout-moe 1
layout layout-moe 2
layout layout-moe 4
layout layout-moe 2 --ep 2
layout layout-moe 4 --ep 4
layout layout-moe 4 --ep 2 --stage 3
layout layout-moe 2 --ep 2 --checkpoint-activations every:1
# the Llama family
layout layout-llama 1
layout layout-llama 2 --stage 3
layout layout-llama 4 --pp 2 --stage 1
layout layout-llama-tp2 2
layout layout-llama-tp2 4 --stage 3
finish
