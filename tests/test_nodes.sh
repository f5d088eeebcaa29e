#!/bin/sh
# Nodes (--ranks-per-node K: K consecutive ranks make a node). The ledger
# splits every collective's bytes into intra- and inter-node bytes (the ring
# model: a rank's sends cross when the next rank of its ring is on another
# node). The measured inter-node bytes come from each communicator's own
# members (MPI's groups) as the ledger records calls; the prediction comes
# from the world's node map and the mesh's pure functions. They must be
# equal byte for byte (to the 3 decimals comm.csv prints) for every rank and
# op that has a prediction, at several (N, K), stages and a tensor-parallel
# mesh; and they must not be trivially so: at N = 4, K = 2 ranks 1 and 3
# (the last of each node) send across nodes and ranks 0 and 2 do not; K = 1
# sends everything across, one host's MPI nodes nothing. A phantom run reports the same
# inter-node bytes as the real one. Bad K: one line, non-zero exit.
. "$(dirname "$0")/testlib.sh"

MODEL="--layers 2 --hidden 24 --heads 4 --seq 10 --vocab 38 --micro-batch 2 --grad-accum 2 --steps 2 --warmup 0"

# exact DIR LABEL: every "all" row with a prediction: inter = predicted inter
exact() {
    awk -v L="$2" '
        $1 ~ /^#/ || $3 != "all" || $10 == -1 { next }
        { n++; if ($9 != $10) { printf "FAIL: %s rank %s %s: inter %s predicted %s\n", L, $1, $2, $9, $10; bad++ } }
        END { exit (bad > 0 || n == 0) }' "$1/comm.csv"
}
# inter DIR RANK OP: the measured inter-node bytes of an op on a rank
inter() { awk -v q="$2" -v o="$3" '$1 == q && $2 == o && $3 == "all" { print $9 }' "$1/comm.csv"; }
wire() { awk -v q="$2" -v o="$3" '$1 == q && $2 == o && $3 == "all" { print $5 }' "$1/comm.csv"; }

run() { # label N args...
    label=$1 n=$2
    shift 2
    if sh "$HERE/mpirun.sh" "$n" "$ZS" train $MODEL "$@" --quiet --csv "$T/$label" \
            --report "$T/$label.json" > "$T/$label.log" 2>&1 </dev/null; then
        exact "$T/$label" "$label" && ok || bad "$label: inter-node bytes differ from the prediction"
    else
        bad "$label: the run failed: $(tail -2 "$T/$label.log")"
    fi
}

run n4k2s3 4 --stage 3 --ranks-per-node 2
run n4k1s2 4 --stage 2 --ranks-per-node 1
run n3k1s0 3 --stage 0 --ranks-per-node 1
run n4k2tp 4 --stage 3 --tp 2 --ranks-per-node 2
run n4mpi 4 --stage 3

# not trivially equal: who crosses
d=$T/n4k2s3
for op in reduce_scatter allgather; do
    w=$(wire "$d" 0 "$op")
    [ "$(inter "$d" 0 "$op")" = 0.000 ] && [ "$(inter "$d" 2 "$op")" = 0.000 ] &&
        [ "$(inter "$d" 1 "$op")" = "$w" ] && [ "$(inter "$d" 3 "$op")" = "$w" ] && [ "$w" != 0.000 ] &&
        ok || bad "N=4 K=2 $op: ranks 1 and 3 should send all ($w) across, 0 and 2 nothing"
    [ "$(inter "$T/n4k1s2" 2 "$op")" = "$(wire "$T/n4k1s2" 2 "$op")" ] && ok ||
        bad "K=1 $op: every byte should cross"
    # one host: MPI's nodes are one node
    [ "$(inter "$T/n4mpi" 3 "$op")" = 0.000 ] && ok || bad "MPI's nodes on one host: nothing should cross"
done
# tensor parallel at K = 2: the tp groups [0,1], [2,3] stay inside nodes; the
# dp groups [0,2], [1,3] cross on every rank
[ "$(inter "$T/n4k2tp" 0 allgather)" = "$(wire "$T/n4k2tp" 0 allgather)" ] &&
    [ "$(inter "$T/n4k2tp" 0 allreduce)" = 0.000 ] && ok ||
    bad "tp 2, K=2: dp traffic should cross, tp traffic not"
grep -q '"node": 1' "$T/n4k2s3.json" && ok || bad "the JSON report names no node 1"

# phantom = real for the inter-node bytes
if "$ZS" train $MODEL --stage 3 --ranks-per-node 2 --phantom --world-size 4 --quiet \
        --csv "$T/ph" > "$T/ph.log" 2>&1; then
    strip() { awk '$1 !~ /^#/ && $3 == "all" && ($2 == "reduce_scatter" || $2 == "allgather") { print $1, $2, $9, $10 }' "$1"; }
    strip "$T/n4k2s3/comm.csv" > "$T/r.txt"
    strip "$T/ph/comm.csv" > "$T/p.txt"
    [ -s "$T/r.txt" ] && cmp -s "$T/r.txt" "$T/p.txt" && ok || bad "phantom inter-node bytes differ from the real run's"
else
    bad "phantom run failed: $(tail -1 "$T/ph.log")"
fi
# a phantom run at a size no real run here takes: N = 64, K = 8, tp 2
"$ZS" train $MODEL --stage 3 --tp 2 --ranks-per-node 8 --phantom --world-size 64 --quiet \
    --csv "$T/ph64" > "$T/ph64.log" 2>&1 && exact "$T/ph64" "phantom N=64 K=8 tp=2" && ok ||
    bad "phantom N=64 K=8 tp 2: $(tail -1 "$T/ph64.log")"

# bad K
if "$ZS" train $MODEL --ranks-per-node 3 --phantom --world-size 4 > "$T/e.log" 2>&1; then
    bad "--ranks-per-node 3 on 4 ranks was accepted"
else
    [ "$(wc -l < "$T/e.log")" -eq 1 ] && grep -q "ranks-per-node 3 must divide" "$T/e.log" && ok ||
        bad "--ranks-per-node 3: $(cat "$T/e.log")"
fi
finish
