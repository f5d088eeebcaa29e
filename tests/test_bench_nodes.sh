#!/bin/sh
# zerosim bench with nodes (--ranks-per-node K): alpha and beta fitted
# inside a node and between nodes separately, and the calibration carries
# both (intra_* from the node's ranks; inter_* from the node link's fit,
# the world's collectives back to back, recomputed here from its samples;
# inter_link_bandwidth the link, inter_bandwidth 1/K of it), with each
# level's samples; the planner reads it. 4 ranks as 2 nodes of 2 on
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
# the node's link, shared by its 2 ranks: each has inter_bandwidth
awk -v l="$(num inter_link_bandwidth)" -v b="$(num inter_bandwidth)" \
    'BEGIN { d = l - 2 * b; if (d < 0) d = -d; exit !(b > 0 && d <= 1e-6 * l) }' && ok ||
    bad "inter_link_bandwidth $(num inter_link_bandwidth) is not 2 x inter_bandwidth $(num inter_bandwidth)"
# the link's fit, recomputed from its samples: per call, the ring
# reduce-scatter (N-1) alpha + (N-1)/N S / L, the linear allgather
# alpha + K(N-K)/N S / L (N = 4, K = 2), least squares in relative error;
# and the calibration's inter_* are that fit's
awk -v lat="$(num inter_latency_s)" -v link="$(num inter_link_bandwidth)" '
    /"link": \{/ { on = 1 }
    on && /"latency_s":/ { v = $2; sub(/,$/, "", v); fa = v + 0 }
    on && /"bandwidth":/ { v = $2; sub(/,$/, "", v); fl = v + 0 }
    on && /"collective":/ { c = ($2 ~ /reduce_scatter/) }
    on && /"bytes":/ && !/link_bytes/ { v = $2; sub(/,$/, "", v); S = v + 0 }
    on && /"link_bytes":/ { v = $2; sub(/,$/, "", v); x = v + 0 }
    on && /"seconds":/ && !/model/ {
        v = $2; sub(/,$/, "", v); t = v + 0; n++
        want = c ? S * 3 / 4 : S * 2 * 2 / 4
        if (x != want) { printf "sample %d: link bytes %s, want %s\n", n, x, want; bad = 1 }
        u = (c ? 3 : 1) / t; w = x / t
        suu += u * u; suv += u * w; sww += w * w; su += u; sw += w
        if (c) nrs++; else nag++
    }
    on && /^  \}/ { on = 0 }
    function rel(a, b) { d = a - b; if (d < 0) d = -d; return d <= 1e-6 * (b < 0 ? -b : b) + 1e-15 }
    END {
        det = suu * sww - suv * suv
        a = (su * sww - sw * suv) / det; b = (suu * sw - suv * su) / det
        if (!(a >= 0) || !(b > 0)) { a = 0; b = sw / sww }
        if (nrs < 4 || nag < 4) { print "too few link samples: " nrs " and " nag; exit 1 }
        if (!rel(fa, a) || !rel(fl, 1 / b)) { printf "link fit %g s, %g B/s; by hand %g s, %g B/s\n", fa, fl, a, 1 / b; exit 1 }
        if (!rel(lat, a) || !rel(link, 1 / b)) { printf "inter_latency_s %g, inter_link_bandwidth %g: not the link fit\n", lat, link; exit 1 }
        exit bad
    }' "$cal" > "$T/link.txt" && ok || bad "the link's fit: $(cat "$T/link.txt")"
grep -q "^the node link, as a step loads it" "$T/bench.log" && ok || bad "the link's table is missing"
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
