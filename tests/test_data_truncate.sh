#!/bin/sh
# A token file (--data) truncated while a run reads it is an error, never a
# crash: the run stops with one line naming the file and an exit status
# that is not a signal's (it was SIGBUS in zs_data_fill when the file was
# memory-mapped), on one rank and on two. The file is written with printf
# and dd alone (no python).
. "$(dirname "$0")/testlib.sh"

# tokens FILE N: llm.c's token format, magic 20240520 (0x0134d888),
# version 1, N tokens, all token 0
# shellcheck disable=SC2059,SC2129 # the format is the octal escape of the byte to write
tokens() {
    c=$(printf '%08x' "$2")
    printf '\210\330\064\001\001\000\000\000' >"$1"
    printf "\\$(printf %03o $((0x${c#??????})))\\$(printf %03o $((0x$(echo "$c" | cut -c5-6))))" >>"$1"
    printf "\\$(printf %03o $((0x$(echo "$c" | cut -c3-4))))\\$(printf %03o $((0x${c%??????})))" >>"$1"
    dd if=/dev/zero bs=4 count=253 2>/dev/null >>"$1"
    dd if=/dev/zero bs=2 count="$2" 2>/dev/null >>"$1"
}

MODEL="--layers 1 --hidden 16 --heads 2 --seq 32 --vocab 16 --micro-batch 2"
tokens "$T/ok.bin" 100000
"$ZS" train $MODEL --data "$T/ok.bin" --steps 2 --silent </dev/null >"$T/log" 2>&1 && ok ||
    { bad "a run on the token file failed: $(cat "$T/log")"; finish; }

# truncate_run N: a run on N ranks with many steps; the file truncated to 10 tokens
# once it has run for a while
truncate_run() {
    n=$1
    tokens "$T/d.bin" 100000
    sh "$HERE/mpirun.sh" "$n" "$ZS" train $MODEL --data "$T/d.bin" --steps 100000000 \
        --print-every 1 </dev/null >"$T/out" 2>"$T/err" &
    pid=$!
    i=0
    while [ "$i" -lt 100 ] && ! grep -q "step" "$T/out"; do sleep 0.2; i=$((i + 1)); done
    sleep 0.5
    truncate -s 1044 "$T/d.bin"
    i=0
    while [ "$i" -lt 150 ] && kill -0 "$pid" 2>/dev/null; do sleep 0.2; i=$((i + 1)); done
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        bad "$n ranks: still running 30 s after the file was truncated"
        return
    fi
    wait "$pid"
    rc=$?
    grep -q step "$T/out" && ok || bad "$n ranks: the run never reached a step: $(cat "$T/err")"
    [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && ok || bad "$n ranks: exit status $rc"
    # one line, or with several ranks one line of each rank that saw the
    # truncation itself before the job stopped (ranks read the file at the
    # same step: which of them reports first is a race), each naming the file
    lines=$(grep -c . "$T/err")
    named=$(grep -c "$T/d.bin: .*truncated" "$T/err")
    ranks=$(sed -n 's/^zerosim: rank \([0-9]*\): .*/\1/p' "$T/err" | sort -u | grep -c .)
    if [ "$lines" -ge 1 ] && [ "$named" -eq "$lines" ] &&
        { [ "$lines" -eq 1 ] || [ "$ranks" -eq "$lines" ]; } && [ "$lines" -le "$n" ]; then
        ok
    else
        bad "$n ranks: not one line naming the file: $(head -5 "$T/err")"
    fi
}
truncate_run 1
truncate_run 2
finish
