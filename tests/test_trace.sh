#!/bin/sh
# --trace: a Chrome trace of every rank's steps. tests/trace_check checks
# that it parses, that the events nest per thread, that every rank has its
# op spans, and that per rank the collectives' time sums to the ledger's.
. "$(dirname "$0")/testlib.sh"
CHECK=${TRACE_CHECK:-$(dirname "$ZS")/tests/trace_check}
M="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 32 --micro-batch 2 --steps 2"

run_case() { # run_case NAME N options...: train with --trace, then check
    name=$1 n=$2
    shift 2
    if sh "$HERE/mpirun.sh" "$n" "$ZS" train $M "$@" --quiet --trace "$T/$name.trace.json" \
        --report "$T/$name.json" </dev/null >"$T/$name.log" 2>&1 &&
        "$CHECK" "$T/$name.trace.json" "$T/$name.json" >"$T/$name.check"; then
        ok
    else
        bad "$name: $(cat "$T/$name.log" "$T/$name.check" 2>/dev/null | tail -n 4)"
    fi
    tail -n 1 "$T/$name.check" 2>/dev/null
}
# stage 3 with prefetch and recomputation (gathers in flight overlap), and
# stage 1 with gradient accumulation at N = 3
run_case s3 2 --stage 3 --checkpoint-activations every:1
grep -q '"name": "recompute u' "$T/s3.trace.json" && ok || bad "stage 3: no recompute spans"
grep -q '"group": "dp"' "$T/s3.trace.json" && ok || bad "stage 3: no collective with its group"
run_case s1 3 --stage 1 --grad-accum 2

# the report's communication time per step: hidden + exposed = total on
# every rank; stage 3's prefetched gathers hide some, stage 1 hides none
comm_time() { # FILE: "total hidden exposed" per rank, one line each
    awk '/"comm_time": \[/ {on = 1; next} on && /^  \]/ {on = 0}
        on && /"total_s_per_step"/ {gsub(/[",]/, "", $2); t = $2}
        on && /"hidden_s_per_step"/ {gsub(/[",]/, "", $2); h = $2}
        on && /"exposed_s_per_step"/ {gsub(/[",]/, "", $2); print t, h, $2}' "$1"
}
for c in s3 s1; do
    rows=$(comm_time "$T/$c.json")
    [ -n "$rows" ] && ok || bad "$c: no comm_time in the report"
    echo "$rows" | awk -v c="$c" '{d = $1 - $2 - $3; if (d < 0) d = -d
        if (d > 1e-6 * ($1 + 1e-9) + 1e-9 || $2 < 0 || $2 > $1) {print "off: " c " " $0; bad = 1}
        if (c == "s1" && $2 != 0) {print "stage 1 hides " $2; bad = 1}
        if (c == "s3" && $2 > 0) hid = 1}
        END {exit bad || (c == "s3" && !hid)}' && ok || bad "$c: comm_time rows: $rows"
done

# refusals: one line, a non-zero exit, no file
"$ZS" train --phantom --world-size 4 --trace "$T/p.json" >/dev/null 2>"$T/err" && bad "phantom --trace ran" ||
    { grep -q "drop --trace" "$T/err" && [ ! -e "$T/p.json" ] && ok || bad "phantom --trace: $(cat "$T/err")"; }
sh "$HERE/mpirun.sh" 1 "$ZS" train $M --quiet --trace "$T/no/such/dir/t.json" </dev/null >/dev/null 2>"$T/err" &&
    bad "a trace into a missing directory succeeded" ||
    { grep -q "cannot write $T/no/such/dir/t.json: No such file or directory" "$T/err" && ok || bad "missing directory: $(cat "$T/err")"; }
finish
