#!/bin/sh
# Under MPI: stage 3 never holds more gathered parameters than
# stage3_max_live_parameters, except a unit larger than the bound, which is
# gathered alone; bad configurations give one line from rank 0
# and a non-zero exit of the whole job, with no hang.
. "$(dirname "$0")/testlib.sh"

# units of this model: embeddings 1075, blocks 7825 each, head 825 elements
MODEL="--layers 3 --hidden 25 --heads 5 --seq 12 --vocab 31 --micro-batch 2 --steps 2 --warmup 0"
for bound in 8000 10000 100000; do
    printf '{"zero_optimization": {"stage": 3, "stage3_max_live_parameters": %d, "stage3_prefetch_bucket_size": 100000}}\n' \
        "$bound" >"$T/s3.json"
    if sh "$HERE/mpirun.sh" 3 "$ZS" train --config "$T/s3.json" $MODEL --quiet --report "$T/r.json" >"$T/log" 2>&1; then
        live=$(key "$T/r.json" live_params_peak)
        [ -n "$live" ] && [ "$live" -le "$bound" ] && [ "$live" -ge 7825 ] && ok ||
            bad "bound $bound: live_params_peak $live"
        echo "stage3_max_live_parameters $bound: most live $live"
    else
        bad "stage 3 with bound $bound failed"; cat "$T/log"
    fi
done
# with room for two blocks, the next block is prefetched beside the current one
[ "$live" -gt 7825 ] && ok || bad "no prefetch with a large bound (live $live)"

# expect_error N "pattern" args...: exit non-zero, within 60 s, one line on stderr
expect_error() {
    n=$1; pattern=$2; shift 2
    timeout 60 sh "$HERE/mpirun.sh" "$n" "$ZS" train "$@" >"$T/out" 2>"$T/err"
    rc=$?
    # mpiexec may add its own notice after a rank exits non-zero; count ours
    lines=$(grep -c '^zerosim:' "$T/err")
    if [ "$rc" -eq 0 ]; then bad "$pattern: exit 0"; return; fi
    if [ "$rc" -eq 124 ]; then bad "$pattern: hang (killed after 60 s)"; return; fi
    if [ "$lines" -ne 1 ]; then bad "$pattern: $lines zerosim lines"; cat "$T/err"; return; fi
    grep -q -- "$pattern" "$T/err" && ok || { bad "message lacks '$pattern'"; cat "$T/err"; }
}
expect_error 2 "--stage must be an integer between 0 and 3" --stage 5
printf '{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 4}\n' >"$T/b.json"
expect_error 2 "train_batch_size" --config "$T/b.json"
# a bound smaller than a block: as in DeepSpeed, each block is gathered
# alone (nothing prefetched beside it), so the most alive is one block, 7825;
# the three blocks are reported; the parameters equal stage 0's to the byte
printf '{"zero_optimization": {"stage": 3, "stage3_max_live_parameters": 5000}}\n' >"$T/small.json"
if sh "$HERE/mpirun.sh" 2 "$ZS" train --config "$T/small.json" $MODEL --print-every 100 --report "$T/small.out.json" \
    >"$T/log" 2>&1 </dev/null &&
    sh "$HERE/mpirun.sh" 2 "$ZS" train --stage 0 $MODEL --quiet --report "$T/s0.json" >/dev/null 2>&1 </dev/null; then
    [ "$(key "$T/small.out.json" live_params_peak)" = 7825 ] && ok ||
        bad "bound 5000: live_params_peak $(key "$T/small.out.json" live_params_peak), not 7825"
    [ "$(key "$T/small.out.json" units_over_live_bound)" = 3 ] && ok || bad "units over the bound not 3"
    [ "$(grep -c "stage 3: unit 'block 0' holds 7825 parameters, more than stage3_max_live_parameters (5000): it is gathered alone" "$T/log")" = 1 ] && ok ||
        bad "no notice of the units over the bound: $(cat "$T/log")"
    [ "$(key "$T/small.out.json" param_hash)" = "$(key "$T/s0.json" param_hash)" ] && ok ||
        bad "stage 3 with a small bound differs from stage 0"
else
    bad "stage 3 with a bound below one block failed"; cat "$T/log"
fi
expect_error 3 "out of memory on rank 0" --device-memory 200KiB $MODEL
expect_error 2 "unknown backend" --backend nonesuch $MODEL

finish
