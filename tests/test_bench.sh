#!/bin/sh
# zerosim bench (calibration): under mpirun it writes a calibration file
# with every rate the planner reads, positive and finite; the planner takes
# it and models the kernels; bad input is one line and a non-zero exit,
# with no file left behind. (The accuracy of the step time is measured by
# bench/bench_steptime.sh, not here: timings on a shared machine are noise.)
. "$(dirname "$0")/testlib.sh"

cal="$T/cal.json"
if sh "$HERE/mpirun.sh" 2 "$ZS" bench --quick --out "$cal" > "$T/bench.log" 2>&1; then ok
else bad "zerosim bench failed"; cat "$T/bench.log"; fi
for k in gemm_flops optimizer_elems_per_s intra_latency_s intra_bandwidth inter_latency_s \
         inter_bandwidth attention gelu block_elementwise head grads memory_pass; do
    v=$(sed -n "s/^ *\"$k\": \([-0-9.e+]*\),\{0,1\}$/\1/p" "$cal" | head -1)
    if [ -n "$v" ] && awk -v v="$v" 'BEGIN { exit !(v + 0 >= 0 && v == v) }'; then ok
    else bad "calibration key $k: \"$v\""; fi
done
for k in gemm_flops intra_bandwidth optimizer_elems_per_s; do
    v=$(sed -n "s/^ *\"$k\": \([-0-9.e+]*\),\{0,1\}$/\1/p" "$cal" | head -1)
    if awk -v v="$v" 'BEGIN { exit !(v + 0 > 0) }'; then ok; else bad "$k is not positive: $v"; fi
done
if grep -q '"reduce_scatter"' "$cal" && grep -q '"allgather"' "$cal"; then ok; else bad "per-collective fits missing"; fi

# the planner reads it and models the kernels
if "$ZS" plan --arch gpt --layers 2 --hidden 64 --heads 4 --seq 16 --vocab 64 --dp 2 --stage 2 \
        --calibration "$cal" > "$T/plan.txt" 2>&1 && grep -q 'kernels as calibrated' "$T/plan.txt"; then ok
else bad "plan with the calibration"; cat "$T/plan.txt"; fi

# errors: one line, non-zero exit, no file
expect_fail() { # label pattern args...
    label=$1 pat=$2
    shift 2
    if "$ZS" bench "$@" > "$T/out.txt" 2> "$T/err.txt"; then bad "$label: succeeded"
    elif [ "$(wc -l < "$T/err.txt")" -eq 1 ] && grep -q "$pat" "$T/err.txt"; then ok
    else bad "$label: $(cat "$T/err.txt")"; fi
}
expect_fail "unknown option" "unknown option" --bogus
expect_fail "stray argument" "unexpected argument" now
expect_fail "unwritable output" "cannot write\|No such file" --quick --out "$T/missing/cal.json"
if [ ! -e "$T/missing/cal.json" ]; then ok; else bad "a file was left behind"; fi
echo '{"gemm_flops": "fast"}' > "$T/badcal.json"
if "$ZS" plan --params 1e9 --calibration "$T/badcal.json" > /dev/null 2> "$T/err.txt"; then
    bad "plan accepted a bad calibration"
elif grep -q 'gemm_flops' "$T/err.txt"; then ok; else bad "bad calibration: $(cat "$T/err.txt")"; fi
# a calibration from before a kernel class was measured: said, not ignored
sed 's/"memory_pass"/"unknown_kernel"/' "$cal" > "$T/oldcal.json"
if "$ZS" plan --params 1e9 --calibration "$T/oldcal.json" > /dev/null 2> "$T/err.txt"; then
    bad "plan accepted a calibration without memory_pass"
elif grep -q 'memory_pass.*run zerosim bench again' "$T/err.txt"; then ok
else bad "incomplete calibration: $(cat "$T/err.txt")"; fi
finish
