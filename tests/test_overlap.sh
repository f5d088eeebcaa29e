#!/bin/sh
# overlap_comm (--overlap-comm): a bucket's reduce-scatter started when the
# bucket is ready and driven between the kernels of the backward gives the
# same parameters byte for byte as the reduction finished where it starts,
# in every stage, in fp32, bf16 and deterministic mode on 2 ranks and fp32
# on 3 (all three on 3 too with ZS_TEST_FULL=1)
# (small buckets, so that there are many); the program waits for each
# bucket before the next starts and at the end of each micro-batch's
# backward; memory and traffic equal the predictions with it on (a pending
# bucket's buffer lives until its wait, and the predictions count that);
# the default is on in stage 3 only; the report says which, and how much
# communication time was hidden; bad values are refused.
. "$(dirname "$0")/testlib.sh"

cat >"$T/b.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2,
 "zero_optimization": {"reduce_bucket_size": 3000, "allgather_bucket_size": 5000,
                       "stage3_prefetch_bucket_size": 4000}}
JSON
MODEL="--config $T/b.json --layers 2 --hidden 32 --heads 4 --seq 16 --vocab 64 --grad-accum 2 --steps 3 --warmup 0 --lr 1e-2"

run() { # n out args... -> 0 when the run and its report are there
    n=$1; out=$2; shift 2
    sh "$HERE/mpirun.sh" "$n" "$ZS" train $MODEL --quiet --report "$out" "$@" >"$T/log" 2>&1 </dev/null ||
        { cat "$T/log"; return 1; }
}

# counts of a program's ops: reduce, reduce_wait, started reduces
ops() { # stage overlap -> "R W S"
    "$ZS" train $MODEL --stage "$1" --overlap-comm "$2" --print-program --world-size 3 >"$T/prog" 2>&1 ||
        { cat "$T/prog"; echo "failed"; return; }
    echo "$(grep -c ' reduce  ' "$T/prog") $(grep -c ' reduce_wait ' "$T/prog") $(grep -c 'started (overlap_comm)' "$T/prog")"
}
for st in 0 1 2 3; do
    set -- $(ops "$st" on)
    [ "$1" -gt 2 ] && [ "$1" = "$2" ] && [ "$1" = "$3" ] && ok ||
        bad "stage $st overlap on: $1 reduces, $2 waits, $3 started (want as many of each, > 2)"
    set -- $(ops "$st" off)
    [ "$1" -gt 2 ] && [ "$2" = 0 ] && [ "$3" = 0 ] && ok ||
        bad "stage $st overlap off: $1 reduces, $2 waits, $3 started (want no waits)"
done
# a wait before every start but the first of each micro-batch's backward
"$ZS" train $MODEL --stage 2 --overlap-comm on --print-program --world-size 3 2>&1 |
    awk '$5 == "reduce" || $5 == "reduce_wait" || $5 == "backward" { print $5 }' | uniq -c |
    awk '$2 == "reduce" && $1 > 1 { bad = 1 } END { exit bad }' && ok ||
    bad "two reduce-scatters started without a wait between them"

# every variant at N = 2; fp32 at N = 3 (all three with ZS_TEST_FULL=1)
for n in 2 3; do
    vs="fp32 bf16 det"
    [ "$n" = 3 ] && [ -z "${ZS_TEST_FULL:-}" ] && vs=fp32
    for v in $vs; do
        case $v in det) args="--precision fp32 --deterministic";; *) args="--precision $v";; esac
        run "$n" "$T/ref.json" $args --stage 0 --overlap-comm off || { bad "N=$n $v reference failed"; continue; }
        ref=$(hashes "$T/ref.json")
        for st in 0 1 2 3; do
            [ "$n" = 3 ] && [ "$st" = 1 ] && continue # stage 1 is stage 0's reduction
            csv=""
            [ "$n" = 3 ] && [ "$v" = fp32 ] && csv="--csv $T/csv-$st"
            run "$n" "$T/on.json" $args --stage "$st" --overlap-comm on $csv ||
                { bad "N=$n $v stage $st overlap on failed"; continue; }
            [ "$(hashes "$T/on.json")" = "$ref" ] && ok ||
                bad "N=$n $v stage $st: overlap on differs from overlap off"
            [ "$(key "$T/on.json" overlap_comm)" = true ] && ok || bad "report lacks overlap_comm true"
            [ -z "$csv" ] && continue
            # memory and traffic: measured = predicted on every rank
            awk '$1 !~ /^#/ && $2 ~ /^(params|grads|optimizer|comm_buffers|workspace)$/ {
                     n++; if ($3 != $4) { print "FAIL: rank " $1 " " $2 " " $3 " vs " $4; b++ } }
                 END { exit (b > 0 || n == 0) }' "$T/csv-$st/memory.csv" && ok ||
                bad "N=3 stage $st overlap on: memory differs from the prediction"
            awk '$1 !~ /^#/ && $3 == "all" && ($2 == "reduce_scatter" || $2 == "allgather") {
                     n++; if ($5 != $6) { print "FAIL: rank " $1 " " $2 " " $5 " vs " $6; b++ } }
                 END { exit (b > 0 || n == 0) }' "$T/csv-$st/comm.csv" && ok ||
                bad "N=3 stage $st overlap on: traffic differs from the prediction"
        done
    done
done

# the pending bucket's buffer is accounted: stage 2's comm_buffers peak is
# larger with overlap than without, by at most one bucket (3000 fp32)
run 3 "$T/off.json" --stage 2 --overlap-comm off --csv "$T/csv-off" || bad "stage 2 off failed"
cb() { awk '$1 == 0 && $2 == "comm_buffers" { print $3 }' "$1/memory.csv"; }
a=$(cb "$T/csv-off"); b=$(cb "$T/csv-2")
[ -n "$a" ] && [ -n "$b" ] && [ "$b" -gt "$a" ] && [ "$((b - a))" -le 12000 ] && ok ||
    bad "stage 2 comm_buffers: off $a, on $b (want on > off by at most 12000)"

# defaults: on in stage 3, off below; the report's table says what is hidden
run 2 "$T/d3.json" --stage 3 && [ "$(key "$T/d3.json" overlap_comm)" = true ] && ok ||
    bad "stage 3 default is not overlap_comm on"
run 2 "$T/d2.json" --stage 2 && [ "$(key "$T/d2.json" overlap_comm)" = false ] && ok ||
    bad "stage 2 default is not overlap_comm off"
grep -q '"hidden_s_per_step"' "$T/d3.json" && ok || bad "report lacks comm_time"
echo '{"zero_optimization": {"stage": 2, "overlap_comm": true}}' >"$T/o.json"
"$ZS" train --config "$T/o.json" --print-program 2>&1 | grep -q 'started (overlap_comm)' && ok ||
    bad "overlap_comm true in the config did not turn it on"

# bad values: one line, non-zero
"$ZS" train --overlap-comm maybe --steps 1 >"$T/e" 2>&1 && bad "--overlap-comm maybe accepted" ||
    { grep -q -- '--overlap-comm must be "on" or "off"' "$T/e" && [ "$(wc -l <"$T/e")" = 1 ] && ok ||
      { bad "--overlap-comm maybe: unexpected message"; cat "$T/e"; }; }
echo '{"zero_optimization": {"overlap_comm": "yes"}}' >"$T/bad.json"
"$ZS" train --config "$T/bad.json" --steps 1 >"$T/e" 2>&1 && bad "overlap_comm \"yes\" accepted" ||
    { grep -q 'overlap_comm' "$T/e" && [ "$(wc -l <"$T/e")" = 1 ] && ok ||
      { bad "overlap_comm \"yes\": unexpected message"; cat "$T/e"; }; }
finish
