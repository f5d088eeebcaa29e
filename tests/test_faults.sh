#!/bin/sh
# Faults under MPI: a rank killed (SIGKILL) in the middle of a step, while
# the others wait in a collective, or while rank 0 writes the report; a
# rank that stops (SIGSTOP) and a short --collective-timeout; a rank out of
# host memory. Each time every process is gone within 30 s, the job exits
# non-zero, each other rank prints one line naming the lost rank and the
# step, and no report or CSV file (nor a temporary one) is left behind.
#
# Hidden test hook (src/comm/comm.c, src/report/report.c):
#   ZEROSIM_TEST_STALL_AT=R:step:S  world rank R stalls (stops) at its first
#                                   collective of step S, before arriving;
#   ZEROSIM_TEST_STALL_AT=R:coll:K  ... at its K-th collective of the run;
#   ZEROSIM_TEST_STALL_AT=report    the report writer stalls once a file's
#                                   bytes are written, before it has a name.
# The stalled process prints "zerosim: test hook: ... (pid P) stalls ..."
# on stderr; the test then kills or stops it, or another rank.
. "$(dirname "$0")/testlib.sh"

MODEL="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 32 --micro-batch 2 --warmup 0"
LIMIT=30
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}'; }

# wait_gone SECONDS PID...: 0 when every PID is gone within SECONDS
wait_gone() {
    w=$1; shift
    end=$(awk -v t="$(now)" -v w="$w" 'BEGIN {printf "%.3f", t + w}')
    while :; do
        alive=""
        for p in "$@"; do
            # a zombie is gone for our purpose
            st=$(sed -n 's/^[0-9]* (.*) \([A-Z]\).*/\1/p' "/proc/$p/stat" 2>/dev/null)
            [ -n "$st" ] && [ "$st" != Z ] && alive="$alive $p"
        done
        [ -z "$alive" ] && return 0
        awk -v t="$(now)" -v e="$end" 'BEGIN {exit !(t > e)}' && return 1
        sleep 0.2
    done
}

# fault NAME N HOOK SIGNAL WHOM PATTERN LINES ARGS...: run zerosim train ARGS
# on N ranks with the hook; once a process stalls, send SIGNAL to the
# stalled process (WHOM=stalled) or to another rank (WHOM=other); expect
# the job gone within LIMIT s, a non-zero exit, at least LINES lines
# matching PATTERN, and nothing in $T/out but what was there before.
fault() {
    name=$1 n=$2 hook=$3 sig=$4 whom=$5 pat=$6 lines=$7
    shift 7
    rm -rf "$T/out" "$T/log"
    mkdir -p "$T/out"
    ZEROSIM_TEST_STALL_AT=$hook sh "$HERE/mpirun.sh" "$n" "$ZS" train $MODEL "$@" \
        </dev/null >"$T/log" 2>&1 &
    mp=$!
    i=0
    while ! grep -q "test hook:.*stalls" "$T/log" && kill -0 "$mp" 2>/dev/null && [ $i -lt 300 ]; do
        sleep 0.1; i=$((i + 1))
    done
    stalled=$(sed -n 's/.*test hook:.*(pid \([0-9]*\)) stalls.*/\1/p' "$T/log" | head -1)
    kids=$(pgrep -P "$mp" | tr '\n' ' ')
    if [ -z "$stalled" ]; then
        bad "$name: no rank stalled"; cat "$T/log"
        kill -KILL $kids "$mp" 2>/dev/null; wait "$mp" 2>/dev/null
        return
    fi
    target=$stalled
    if [ "$whom" = other ]; then
        target=$(for k in $kids; do [ "$k" != "$stalled" ] && echo "$k"; done | head -1)
    fi
    t0=$(now)
    kill "-$sig" "$target"
    # shellcheck disable=SC2086 # kids is a list
    if wait_gone "$LIMIT" "$mp" $kids; then ok; else
        bad "$name: processes left $LIMIT s after SIG$sig:$alive"
        kill -KILL $kids "$mp" 2>/dev/null
    fi
    wait "$mp"
    rc=$?
    echo "$name: all $n processes gone $(since "$t0") s after SIG$sig to rank pid $target, exit $rc"
    [ "$rc" -ne 0 ] && ok || bad "$name: exit status 0"
    got=$(grep -c -- "$pat" "$T/log")
    [ "$got" -ge "$lines" ] && ok || { bad "$name: $got of $lines lines match \"$pat\""; cat "$T/log"; }
    # the --csv folder itself is made before training, on purpose
    left=$(find "$T/out" -type f | sed "s|$T/out/||" | tr '\n' ' ')
    [ -z "$left" ] && ok || bad "$name: files left behind: $left"
}

# a rank killed while the other waits in a collective (mid-step for it)
fault "kill at step 2" 2 1:step:2 KILL stalled \
    "^zerosim: rank 0: stopped at step 2 (.*): lost rank 1 (pid" 1 \
    --steps 4 --stage 3 --quiet --report "$T/out/r.json" --csv "$T/out/csv"
# four ranks: the others that report (mpirun may end one before it can
# print: two of three did once on a clean clone) name rank 2; a report may
# also name a rank that had already stopped after saying why (rank 0 once
# named rank 1, which had printed its own line and exited first), and no
# other
fault "kill 1 of 4" 4 2:coll:20 KILL stalled \
    "^zerosim: rank [013]: stopped at step [0-9]* (.*): lost rank 2 (pid" 1 \
    --steps 4 --stage 2 --quiet --report "$T/out/r.json"
grep "lost rank" "$T/log" | while read -r line; do
    case $line in *"lost rank 2 (pid"* | *", 2 (pid"*) ;; *) echo "rank 2 not named: $line" ;; esac
    for k in 0 1 3; do
        case $line in
            *"lost rank $k (pid"* | *", $k (pid"*)
                grep -q "^zerosim: rank $k: stopped" "$T/log" ||
                    echo "rank $k named but it said nothing: $line" ;;
        esac
    done
done >"$T/named"
[ -s "$T/named" ] && { bad "kill 1 of 4: a report names the wrong ranks:"; cat "$T/named"; } || ok
# the writer killed while writing the report: no report, no temporary file
fault "kill the writer" 2 report KILL stalled \
    "^zerosim: rank 1: stopped after the last step (gathering results): lost rank 0" 1 \
    --steps 2 --quiet --report "$T/out/r.json"
# another rank killed while rank 0 writes the CSV files
fault "kill while writing CSV" 2 report KILL other \
    "^zerosim: rank 0: stopped after the last step (gathering results): lost rank 1" 1 \
    --steps 2 --quiet --csv "$T/out/csv" --report "$T/out/r.json"
# a stopped rank: the other gives up after --collective-timeout
fault "SIGSTOP, timeout 3 s" 2 1:step:2 STOP stalled \
    "^zerosim: rank 0: stopped at step 2 (.*): rank 1 (process stopped) did not arrive at the .* within the collective timeout of 3 s" 1 \
    --steps 4 --quiet --collective-timeout 3 --report "$T/out/r.json"
# the same in a tensor-parallel allreduce (blocking, under the watchdog)
fault "SIGSTOP in an allreduce" 2 1:step:2 STOP stalled \
    "^zerosim: rank 0: stopped at step 2 (.*): rank 1 (process stopped) did not arrive at the allreduce within the collective timeout of 2 s" 1 \
    --steps 3 --tp 2 --quiet --collective-timeout 2

# a rank killed mid-computation, with no hook: at the third progress line
rm -f "$T/log"
sh "$HERE/mpirun.sh" 2 "$ZS" train $MODEL --steps 100000 --print-every 1 </dev/null >"$T/log" 2>&1 &
mp=$!
i=0
while ! grep -q "^step *3/" "$T/log" && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
kids=$(pgrep -P "$mp" | tr '\n' ' ')
victim=$(echo "$kids" | awk '{print $2}')
t0=$(now)
kill -KILL "$victim"
# shellcheck disable=SC2086
wait_gone "$LIMIT" "$mp" $kids && ok || { bad "mid-step: processes left"; kill -KILL $kids "$mp" 2>/dev/null; }
wait "$mp"; rc=$?
echo "mid-step: gone $(since "$t0") s after SIGKILL, exit $rc"
[ "$rc" -ne 0 ] && ok || bad "mid-step: exit status 0"
grep -q "^zerosim: rank [01]: stopped at step [0-9]* (.*): lost rank [01] (pid $victim)" "$T/log" && ok ||
    { bad "mid-step: no line naming the lost rank"; tail -5 "$T/log"; }

# out of host memory on rank 1 (ulimit -v): one clear line, on every rank
cat >"$T/oom.sh" <<'EOS'
#!/bin/sh
[ "$OMPI_COMM_WORLD_RANK" = 1 ] && ulimit -v 1500000
exec "$@"
EOS
t0=$(now)
sh "$HERE/mpirun.sh" 2 sh "$T/oom.sh" "$ZS" train --steps 2 --quiet --layers 4 --hidden 1024 \
    --heads 8 --seq 64 --vocab 50000 --report "$T/oom.json" </dev/null >"$T/log" 2>&1
rc=$?
echo "out of memory on rank 1: exit $rc after $(since "$t0") s"
[ "$rc" -ne 0 ] && ok || bad "out of memory: exit status 0"
[ ! -e "$T/oom.json" ] && ok || bad "out of memory: a report was written"
grep -q "out of host memory on rank 1" "$T/log" && ok || { bad "out of memory: no clear line"; cat "$T/log"; }
[ "$(grep -c '^zerosim: ' "$T/log")" -le 2 ] && ok || { bad "out of memory: more than a line a rank"; cat "$T/log"; }
finish
