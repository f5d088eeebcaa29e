#!/bin/sh
# Bad input gets one clear line on stderr and a non-zero exit, never a crash,
# and leaves no half-written report behind.
. "$(dirname "$0")/testlib.sh"

# expect_error "what" "pattern in the message" zerosim-args...
expect_error() {
    what=$1; pattern=$2; shift 2
    "$ZS" "$@" >"$T/out" 2>"$T/err"
    rc=$?
    lines=$(wc -l <"$T/err")
    if [ "$rc" -eq 0 ]; then bad "$what: exit 0"; return; fi
    if [ "$rc" -gt 2 ]; then bad "$what: exit $rc (crash?)"; cat "$T/err"; return; fi
    if [ "$lines" -ne 1 ]; then bad "$what: $lines lines on stderr"; cat "$T/err"; return; fi
    if ! grep -q -- "$pattern" "$T/err"; then bad "$what: message lacks '$pattern'"; cat "$T/err"; return; fi
    ok
}

"$ZS" --help | grep -q "usage: zerosim train" && ok || bad "--help"
"$ZS" --version | grep -q "backends: .*cpu" && ok || bad "--version"
"$ZS" train --help | grep -q -- "--precision" && ok || bad "train --help"

expect_error "unknown command" "unknown command" frobnicate
expect_error "unknown option" "unknown option --bogus" train --bogus
expect_error "missing value" "needs a value" train --steps
expect_error "bad precision" "--precision must be fp32, bf16 or fp16" train --precision fp8
expect_error "bad steps" "--steps must be an integer" train --steps abc
expect_error "zero steps" "--steps must be an integer" train --steps 0
expect_error "bad model" "--model must be" train --model rnn
expect_error "bad stage" "--stage must be an integer between 0 and 3" train --stage 4
expect_error "heads do not divide" "model.heads" train --hidden 30 --heads 4
expect_error "bad widths" "--widths" train --model mlp --widths 8,x
expect_error "bad lr" "--lr must be a number" train --lr -1
expect_error "bad size" "furlong" train --device-memory 3furlong
expect_error "stray argument" "unexpected argument" train stray
expect_error "unknown backend" "unknown backend .bogus." train --backend bogus --steps 1

printf '{\n  "train_batch_size": 8,\n  "zero_optimization": {"stage": 1,,}\n}\n' >"$T/bad.json"
expect_error "malformed JSON" "bad.json:3:" train --config "$T/bad.json"
printf '{"train_batch_size": 8, "zero_optimisation": {"stage": 1}}\n' >"$T/unk.json"
expect_error "unknown key" "zero_optimisation" train --config "$T/unk.json"
printf '{"train_micro_batch_size_per_gpu": "eight"}\n' >"$T/type.json"
expect_error "wrong type" "train_micro_batch_size_per_gpu" train --config "$T/type.json"
printf '{"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}\n' >"$T/batch.json"
expect_error "contradicting batch" "train_batch_size" train --config "$T/batch.json"
printf '{"zero_optimization": {"stage": 7}}\n' >"$T/stage.json"
expect_error "stage 7 in file" "stage" train --config "$T/stage.json"
expect_error "missing file" "nope.json" train --config "$T/nope.json"
printf '[1, 2]\n' >"$T/array.json"
expect_error "not an object" "array.json" train --config "$T/array.json"
: >"$T/empty.json"
expect_error "empty file" "empty.json" train --config "$T/empty.json"

# out of memory: a clear line, and no report written
expect_error "device memory" "out of memory on rank 0" train --steps 2 --device-memory 64KiB --report "$T/oom.json"
[ ! -e "$T/oom.json" ] && ok || bad "a report was left after out of memory"
ls "$T"/oom.json.tmp* >/dev/null 2>&1 && bad "temporary report left behind" || ok

# a report into a directory that does not exist
expect_error "report dir" "cannot write report" train --steps 1 --quiet --report "$T/no/such/dir/r.json"

finish
