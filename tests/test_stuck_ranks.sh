#!/bin/sh
# Stuck ranks: a rank stopped (SIGSTOP) at start-up (before MPI_Init, and
# after it, before zs_comm_init's first collective), mid-run (held by the
# test hook before a collective, or stopped by this shell wherever it is)
# and at shutdown, on 2 and 4 ranks, with --collective-timeout 5. Each
# time every process is gone within the timeout plus 10 s of the SIGSTOP,
# the job exits non-zero, a line of another rank names the stopped rank as
# "(process stopped)", no line names another rank as stopped or gone, and
# the stopped rank's own line (when mpirun's SIGTERM lets it say
# one) blames no one else. Every run is under an outer `timeout`: a hang
# fails the test, it never blocks it. docs/running.md: "Stuck ranks".
#
# Test hook (src/comm/comm_fault.c): ZEROSIM_TEST_STALL_AT=R:startup
# (before MPI_Init), R:init (after it), R:step:S (the first collective of
# step S), R:shutdown (zs_comm_finalize begins): world rank R prints
# "zerosim: test hook: rank R (pid P) stalls ..." and stops itself
# (SIGSTOP); this test stops it too (a no-op then), as it stops a rank
# wherever it is in the hook-less case.
. "$(dirname "$0")/testlib.sh"

MODEL="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 32 --micro-batch 2 --warmup 0"
TO=5
LIMIT=$((TO + 10))
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}'; }
# the world rank in process PID's environment (set by mpiexec)
rank_of() { tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p'; }
# alive PID...: the PIDs still running (a zombie is gone)
alive() {
    for p in "$@"; do
        st=$(sed -n 's/^[0-9]* (.*) \([A-Z]\).*/\1/p' "/proc/$p/stat" 2>/dev/null)
        [ -n "$st" ] && [ "$st" != Z ] && printf ' %s' "$p"
    done
}

# stuck NAME N V HOOK ARGS...: zerosim train ARGS on N ranks with the test
# hook HOOK ("-": none; rank V is stopped once the third progress line is
# out); once rank V is where the case wants it, SIGSTOP it.
stuck() {
    name=$1 n=$2 v=$3 hook=$4
    shift 4
    rm -f "$T/log"
    wait_for='test hook:.*stalls'
    [ "$hook" = - ] && hook="" wait_for='^step *3/'
    ZEROSIM_TEST_STALL_AT=$hook timeout -k 5 $((LIMIT + 60)) sh "$HERE/mpirun.sh" "$n" "$ZS" \
        train $MODEL --collective-timeout $TO "$@" </dev/null >"$T/log" 2>&1 &
    mp=$!
    i=0
    while ! grep -q "$wait_for" "$T/log" && kill -0 "$mp" 2>/dev/null && [ $i -lt 300 ]; do
        sleep 0.1; i=$((i + 1))
    done
    ranks=$(pgrep -P "$(pgrep -P "$mp" | head -1)" | tr '\n' ' ') # timeout > mpiexec > ranks
    pid=""
    for p in $ranks; do [ "$(rank_of "$p")" = "$v" ] && pid=$p; done
    if [ -z "$pid" ] || ! grep -q "$wait_for" "$T/log"; then
        bad "$name: rank $v never got there (pid '$pid')"; cat "$T/log"
        # shellcheck disable=SC2086 # a list
        kill -KILL $ranks 2>/dev/null; wait "$mp"
        return
    fi
    t0=$(now)
    kill -STOP "$pid"
    wait "$mp"
    rc=$?
    took=$(since "$t0")
    # shellcheck disable=SC2086 # a list
    left=$(alive $ranks)
    echo "$name: $n ranks, rank $v (pid $pid) stopped: exit $rc after $took s, left:${left:- none}"
    [ -z "$left" ] && ok || { bad "$name: processes left:$left"; kill -KILL $left 2>/dev/null; }
    awk -v t="$took" -v l="$LIMIT" 'BEGIN {exit !(t <= l)}' && ok ||
        bad "$name: $took s after the SIGSTOP, more than $LIMIT s"
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] && ok ||
        bad "$name: exit status $rc (124, 137: the outer timeout)"
    # a line of another rank names rank v, stopped
    grep "^zerosim: rank [0-9]*: stopped " "$T/log" | grep -v "^zerosim: rank $v:" |
        grep -q "rank $v (process stopped) did not" && ok ||
        { bad "$name: no line names rank $v as stopped"; cat "$T/log"; }
    # no other rank is named as stopped or gone (a running rank may be named
    # as not arrived: it is, held up elsewhere by the stopped one)
    others=$(grep "^zerosim: rank [0-9]*: stopped " "$T/log" |
        grep -o "rank [0-9][0-9]* (process [a-z]*)" | sort -u |
        grep -v "^rank $v (process stopped)\$" | tr '\n' ' ')
    [ -z "$others" ] && ok || { bad "$name: lines name $others"; cat "$T/log"; }
    # the stopped rank blames no one
    grep "^zerosim: rank $v: stopped " "$T/log" |
        grep -v -e ": this rank did not arrive or finish in time, and rank [0-9]* stopped the job\$" \
            -e ": mpirun stopped the job (a rank did not finish shutdown in time" |
        grep -q . && { bad "$name: rank $v says"; grep "^zerosim: rank $v:" "$T/log"; } || ok
}

for n in 2 4; do
    v=$((n - 1))
    stuck "start-up, before MPI_Init" $n $v "$v:startup" --steps 2 --quiet
    stuck "start-up, after MPI_Init" $n $v "$v:init" --steps 2 --quiet
    stuck "mid-run, before a collective" $n $v "$v:step:2" --steps 4 --quiet
    stuck "mid-run, wherever it is" $n $v - --steps 100000 --print-every 1
    stuck "shutdown" $n $v "$v:shutdown" --steps 2 --quiet
    zs_fast && break
done

# the final agreement waits --collective-timeout (it waited 60 s whatever
# the option said): rank 0 stopped while it writes the report (the report
# hook), rank 1 waiting for it in the agreement names it within the limit
stuck "the final agreement" 2 0 report --steps 2 --quiet --report "$T/r.json"
grep -q "rank 0 (process stopped) did not arrive at the agreement on whether a rank failed within the collective timeout of $TO s" "$T/log" &&
    ok || bad "the final agreement: not named with the timeout of $TO s"
finish
