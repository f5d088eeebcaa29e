#!/bin/sh
# The emulated cluster (scripts/cluster.sh): 2 nodes as network namespaces
# with shaped links, Open MPI across them (TCP between nodes, shared memory
# inside). A tiny stage-3 training on 2 nodes x 2 ranks must end with the
# same parameter hash as the same training on one host; its report must see
# the 2 nodes MPI reports (no --ranks-per-node) and its inter-node bytes
# must equal the prediction. A failed run, and a failed `up`, must leave no
# namespace behind. Skips (77) where namespaces cannot be made.
. "$(dirname "$0")/testlib.sh"

CL="$HERE/../scripts/cluster.sh"
export ZS_CLUSTER_STATE="$T/state" ZS_CLUSTER_PREFIX="zt$$" ZS_CLUSTER_NET="10.79.$(($$ % 200 + 20))"
P=$ZS_CLUSTER_PREFIX
trap 'sh "$CL" down > /dev/null 2>&1; rm -rf "$T"' EXIT
left() { ip netns list 2>/dev/null | grep -c "^$P-"; }

sh "$CL" up --nodes 2 > "$T/up.log" 2>&1
rc=$?
if [ $rc -eq 77 ]; then
    echo "SKIP: $(cat "$T/up.log")"
    exit 77
fi
[ $rc -eq 0 ] || { cat "$T/up.log"; bad "cluster up failed"; finish; }

MODEL="--layers 2 --hidden 24 --heads 4 --seq 10 --vocab 38 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0"
if sh "$CL" run --ranks-per-node 2 "$ZS" train $MODEL --stage 3 --quiet --report "$T/c.json" \
        --csv "$T/c" > "$T/c.log" 2>&1 </dev/null; then
    ok
else
    bad "training across 2 emulated nodes failed: $(tail -3 "$T/c.log")"
fi
sh "$HERE/mpirun.sh" 4 "$ZS" train $MODEL --stage 3 --quiet --report "$T/h.json" > "$T/h.log" 2>&1 </dev/null ||
    bad "the single-host run failed: $(tail -2 "$T/h.log")"
hc=$(key "$T/c.json" param_hash) hh=$(key "$T/h.json" param_hash)
[ -n "$hc" ] && [ "$hc" = "$hh" ] && ok || bad "param_hash on 2 emulated nodes $hc, on one host $hh"
grep -q '"node": 1' "$T/c.json" && ok || bad "the report does not see a second node"
awk '$1 !~ /^#/ && $3 == "all" && $10 != -1 { n++; if ($9 != $10) bad++ }
     $3 == "all" && $9 > 0 { x++ }
     END { exit (bad > 0 || n == 0 || x == 0) }' "$T/c/comm.csv" && ok ||
    bad "inter-node bytes on the emulated cluster differ from the prediction (or are none)"

# a failed run, then down: nothing left
sh "$CL" run --ranks-per-node 2 "$ZS" train --stage 7 > "$T/f.log" 2>&1 </dev/null && bad "a bad run succeeded"
sh "$CL" down > "$T/down.log" 2>&1 && [ "$(left)" -eq 0 ] && [ ! -e "$T/state" ] && ok ||
    bad "down after a failed run left: $(ip netns list | grep "^$P-" | tr '\n' ' ') $(cat "$T/down.log")"
# a failed up (a rate tc cannot take) takes down what it made
sh "$CL" up --nodes 2 --rate 12parsecs > "$T/u2.log" 2>&1 && bad "up with a bad rate succeeded"
[ "$(left)" -eq 0 ] && [ ! -e "$T/state/made" ] && grep -q "rate must be" "$T/u2.log" && ok ||
    bad "a failed up left: $(ip netns list | grep "^$P-" | tr '\n' ' ') $(cat "$T/u2.log")"
# --queue: a time refused with one line before anything is made; a good one
# becomes each link's tbf latency
sh "$CL" up --nodes 2 --queue 5s > "$T/u3.log" 2>&1 && bad "up with --queue 5s succeeded"
[ "$(left)" -eq 0 ] && [ "$(wc -l < "$T/u3.log")" -eq 1 ] && grep -q "queue must be" "$T/u3.log" && ok ||
    bad "up --queue 5s: $(cat "$T/u3.log")"
if sh "$CL" up --nodes 2 --rate 50mbit --queue 20ms > "$T/u4.log" 2>&1; then
    sh "$CL" status > "$T/st.log" 2>&1
    [ "$(grep -c 'rate 50Mbit .*lat 20ms' "$T/st.log")" -eq 2 ] && ok || bad "--queue 20ms: $(cat "$T/st.log")"
    sh "$CL" down > /dev/null 2>&1
else
    bad "up --queue 20ms failed: $(cat "$T/u4.log")"
fi
finish
