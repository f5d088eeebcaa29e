#!/bin/sh
# zerosim bench with nodes (--ranks-per-node K): alpha and beta fitted
# inside a node and between nodes separately, and the calibration carries
# both (intra_* from the node's ranks, inter_* from one rank per node,
# inter_link_bandwidth the node's K ranks together), with each level's
# samples; the planner reads it. 4 ranks as 2 nodes of 2 on
# one host (the figures are shared memory's both times: on the emulated
# cluster, scripts/cluster.sh run ... zerosim bench, they differ; see
# docs/cluster.md). A K that does not divide the ranks: one line, exit 2.
. "$(dirname "$0")/testlib.sh"

cal="$T/cal.json"
if sh "$HERE/mpirun.sh" 4 "$ZS" bench --quick --ranks-per-node 2 --out "$cal" > "$T/bench.log" 2>&1 </dev/null; then ok
else bad "zerosim bench --ranks-per-node 2 failed: $(tail -2 "$T/bench.log")"; fi
num() { sed -n "s/^ *\"$1\": \([-0-9.e+]*\),\{0,1\}$/\1/p" "$cal" | head -1; }
[ "$(num nodes)" = 2 ] && [ "$(num ranks_per_node)" = 2 ] && ok || bad "nodes/ranks_per_node missing"
for k in intra_bandwidth inter_bandwidth; do
    awk -v v="$(num $k)" 'BEGIN { exit !(v + 0 > 0) }' && ok || bad "$k is not positive: $(num $k)"
done
# the node's link: its 2 ranks crossed at once, each at inter_bandwidth
awk -v l="$(num inter_link_bandwidth)" -v b="$(num inter_bandwidth)" \
    'BEGIN { d = l - 2 * b; if (d < 0) d = -d; exit !(b > 0 && d <= 1e-6 * l) }' && ok ||
    bad "inter_link_bandwidth $(num inter_link_bandwidth) is not 2 x inter_bandwidth $(num inter_bandwidth)"
for k in intra_reduce_scatter intra_allgather inter_reduce_scatter inter_allgather; do
    grep -q "\"$k\": {" "$cal" && ok || bad "$k fit missing"
done
grep -q "inside a node" "$T/bench.log" && grep -q "between nodes" "$T/bench.log" && ok ||
    bad "the tables of the two levels are missing"
"$ZS" plan --params 1e8 --stage 3 --nodes 2 --ranks-per-node 2 --calibration "$cal" > "$T/plan.txt" 2>&1 &&
    grep -q "inter-node link" "$T/plan.txt" && ok || bad "plan with the calibration: $(tail -2 "$T/plan.txt")"
if sh "$HERE/mpirun.sh" 2 "$ZS" bench --quick --ranks-per-node 3 > "$T/o.txt" 2> "$T/e.txt" </dev/null; then
    bad "--ranks-per-node 3 on 2 ranks was accepted"
else
    grep -q "ranks-per-node must divide" "$T/e.txt" && ok || bad "--ranks-per-node 3: $(cat "$T/e.txt")"
fi
finish
