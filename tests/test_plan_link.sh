#!/bin/sh
# The planner's step time with a node link shared by the node's ranks
# (inter_link_bandwidth in a hand-written calibration, or --bw-link),
# against the closed form computed here by hand:
#  * a flat ring across nodes (the reduce-scatter): only the last rank of a
#    node crosses, with the whole link: per call (N-1) alpha, and (N-1)/N S / L;
#  * the allgather (MPI_Iallgatherv, linear in Open MPI): every rank's part
#    to every rank at once, so the link carries the node's K parts to the
#    N-K ranks of other nodes: per call alpha, and K(N-K)/N S / L; in stage
#    3, whose parts are a unit's overlap with each rank's shard, the bytes
#    of the busiest direction of any node's link instead;
#  * the step's three small collectives (loss, overflow flag, norm): alpha
#    each; stage 3 (overlap_comm): compute hides what the links and the
#    phases allow (2c);
#  * a group between nodes (qgZ's second level, one group per local index,
#    all K at once): (n-1)/n S / (L/K);
#  * without the link's bandwidth, every rank has beta of its own (as before);
#  * one node: the link's bandwidth changes nothing;
#  * a group inside a node does not use a bench's per-collective fits when
#    they were made over more than one node;
#  * an older zerosim bench file between nodes (no inter_link_bandwidth) is
#    refused with one line.
. "$(dirname "$0")/testlib.sh"

js() { python3 -c "import json,sys; d=json.load(open('$1')); print($2)"; }
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-9 * (b < 0 ? -b : b) + 1e-15) }'; }

# 1. stage 2, 1e6 fp32 parameters, 4 ranks as 2 nodes of 2: one
#    reduce-scatter and one allgather of 4e6 bytes. With alpha 1e-3 and L
#    1e6 B/s: the ring 3 x 1e-3 + 3e6 / 1e6 = 3.003 s, the allgather 1e-3 +
#    2 x 2 / 4 x 4e6 / 1e6 = 4.001 s: 7.004 s; per-rank beta 0.25e6 without
#    the link, both rings: 0.006 + 24 = 24.006 s.
cat > "$T/link.json" <<'EOF'
{"gemm_flops": 1e12, "intra_latency_s": 0, "intra_bandwidth": 1e9,
 "inter_latency_s": 1e-3, "inter_bandwidth": 0.25e6, "inter_link_bandwidth": 1e6}
EOF
cat > "$T/nolink.json" <<'EOF'
{"gemm_flops": 1e12, "intra_latency_s": 0, "intra_bandwidth": 1e9,
 "inter_latency_s": 1e-3, "inter_bandwidth": 0.25e6}
EOF
P="--params 1e6 --stage 2 --dp 4 --ranks-per-node 2 --json"
"$ZS" plan $P --calibration "$T/link.json" > "$T/a.json" 2> "$T/e" || bad "plan: $(cat "$T/e")"
"$ZS" plan $P --calibration "$T/nolink.json" > "$T/b.json" 2> "$T/e" || bad "plan: $(cat "$T/e")"
c=$(js "$T/a.json" "d['step_time']['comm_s']")
close "$c" 7.004 && ok || bad "ring and linear allgather with the node's link: comm $c s, by hand 7.004 s"
c=$(js "$T/b.json" "d['step_time']['comm_s']")
close "$c" 24.006 && ok || bad "flat ring, beta per rank: comm $c s, by hand 24.006 s"
# the small collectives: 3 x alpha between nodes, added (stage 2: no overlap)
c=$(js "$T/a.json" "d['step_time']['scalars_s']")
close "$c" 0.003 && ok || bad "small collectives: $c s, by hand 0.003 s"
c=$(js "$T/a.json" "d['step_time']['total_s'] - d['step_time']['compute_s'] - d['step_time']['optimizer_s']")
close "$c" 7.007 && ok || bad "stage 2 total less compute and optimizer: $c s, by hand 7.004 + 0.003 s"
# --bw-link overrides the file: 0.003 + 1.5 + 0.001 + 2 = 3.504 s
"$ZS" plan $P --calibration "$T/nolink.json" --bw-link 2e6 > "$T/c.json" || bad "--bw-link"
c=$(js "$T/c.json" "d['step_time']['comm_s']")
close "$c" 3.504 && ok || bad "--bw-link 2e6: comm $c s, by hand 3.504 s"

# 2. stage 3 with qgZ and hpZ (K = 2), a small GPT: every collective's time
#    by hand from its bytes, group and link (inside a node 0 s latency and
#    1e9 B/s; the world's ring across nodes L; qgZ's group between nodes
#    L / 2, its two local indices crossing at once). The file also has a
#    bench's world-wide allgather fit made over 2 nodes (absurdly slow
#    here): the groups inside a node must not use it, but the intra-node
#    alpha and beta.
sed 's/}$/, "nodes": 2, "allgather": {"latency_s": 5, "bandwidth": 1}}/' "$T/link.json" > "$T/link2.json"
G="--arch gpt --layers 2 --hidden 64 --heads 4 --seq 32 --vocab 128 --micro-batch 2 --stage 3 \
--quantized-gradients --hpz-partition-size 2 --quantized-weights --dp 4 --ranks-per-node 2 --json"
"$ZS" plan $G --calibration "$T/link2.json" > "$T/z.json" 2> "$T/e" || bad "plan ZeRO++: $(cat "$T/e")"
want=$(python3 - "$T/z.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
t, kinds = 0.0, set()
for c in d["collectives"]:
    n, S, calls = c["ranks"], c["full_bytes"], c["calls"]
    a, b = {"node": (0.0, 1e9), "world": (1e-3, 1e6), "nodes": (1e-3, 1e6 / 2)}[c["link"]]
    if c["op"] == "allgather" and c["link"] == "world":  # linear: the busiest link direction
        # (its bytes checked by hand in 2a below; here qwZ's encoded parts)
        t += calls * a + c.get("link_bytes", 2 * (n - 2) / n * S) / 1e6
    else:
        t += calls * (n - 1) * a + (n - 1) / n * S / b
    kinds.add((c["op"], c["link"]))
# the plan has all four: qgZ's two levels, the forward gathers, hpZ's
assert kinds == {("alltoall", "node"), ("alltoall", "nodes"), ("allgather", "world"),
                 ("allgather", "node")}, kinds
print(repr(t))
EOF
) || bad "the ZeRO++ plan's collectives: $want"
c=$(js "$T/z.json" "d['step_time']['comm_s']")
close "$c" "$want" && ok || bad "ZeRO++ with the node's link: comm $c s, by hand $want s"
# stage 3 runs with overlap_comm (its default): the larger of compute and
# communication, then the small collectives and the optimizer
c=$(js "$T/z.json" "max(d['step_time']['compute_s'], d['step_time']['comm_s']) + 0.003 + d['step_time']['optimizer_s'] - d['step_time']['total_s']")
close "$c" 0 && ok || bad "stage 3's total is not max(compute, comm) + 3 alpha + optimizer (off by $c s)"
[ "$(js "$T/z.json" "d['step_time']['overlapped']")" = True ] && ok || bad "stage 3 not overlapped"
"$ZS" plan $G --calibration "$T/link2.json" --overlap-comm off > "$T/zo.json" 2> "$T/e" || bad "--overlap-comm off: $(cat "$T/e")"
c=$(js "$T/zo.json" "d['step_time']['compute_s'] + d['step_time']['comm_s'] + 0.003 + d['step_time']['optimizer_s'] - d['step_time']['total_s']")
close "$c" 0 && ok || bad "stage 3 with overlap_comm off is not the sum (off by $c s)"

# 2a. stage 3's gathers have unequal parts: a unit's part of each rank's
#     flat shard. A 2-layer GPT (hidden 64, vocab 128, seq 32): wte 8192,
#     wpe 2048, two blocks of 12 C^2 + 13 C = 49984, the final LayerNorm
#     128 parameters, 110336 in all, shards of 27584 on 4 ranks, nodes {0,
#     1} and {2, 3}. Each pass gathers the embeddings [0, 10240), the
#     blocks, the LayerNorm and (the tied head) wte again: 5 calls forward,
#     then 5 backward in reverse. A call loads each node's link out (its
#     ranks' parts times the 2 ranks elsewhere) and in (the other node's
#     parts times 2); two calls are in flight (call i starts when call i-2
#     has ended), each direction carries the loads in order, a call ends
#     when its loads have gone: the gathers' bytes are the last end.
S3="--arch gpt --layers 2 --hidden 64 --heads 4 --seq 32 --vocab 128 --micro-batch 2 --stage 3 \
--dp 4 --ranks-per-node 2 --json"
"$ZS" plan $S3 --calibration "$T/link.json" > "$T/s3.json" 2> "$T/e" || bad "plan stage 3: $(cat "$T/e")"
want=$(python3 - <<'EOF'
C, V, T, L = 64, 128, 32, 2
blk = 12 * C * C + 13 * C
P = V * C + T * C + L * blk + 2 * C
shard = P // 4
def part(q, lo, hi):
    return 4 * max(0, min(hi, (q + 1) * shard) - max(lo, q * shard))
emb, head = (0, V * C + T * C), [(P - 2 * C, P), (0, V * C)]
blocks = [(emb[1] + i * blk, emb[1] + (i + 1) * blk) for i in range(L)]
calls = [emb] + blocks + head + head + blocks[::-1] + [emb]
busy, ends = [0.0] * 4, []
for i, (lo, hi) in enumerate(calls):
    parts = [part(q, lo, hi) for q in range(4)]
    loads = [2 * (parts[0] + parts[1]), 2 * (parts[2] + parts[3])]  # node 0 out, node 1 out
    loads += [loads[1], loads[0]]                                   # node 0 in, node 1 in
    start = ends[i - 2] if i >= 2 else 0.0
    for r in range(4):
        busy[r] = max(busy[r], start) + loads[r]
    ends.append(max(busy))
print(int(max(ends)))
EOF
)
lb=$(js "$T/s3.json" "[c for c in d['collectives'] if c['op'] == 'allgather'][0].get('link_bytes', 0)")
[ "$lb" = "$want" ] && ok || bad "stage 3's gathers on the busiest link direction: plan $lb bytes, by hand $want"
# and the time: the reduce-scatter's ring, then 10 calls of alpha and those bytes over L
c=$(js "$T/s3.json" "d['step_time']['comm_s']")
byhand=$(python3 -c "print(repr(3 * 1e-3 + 3 / 4 * 441344 / 1e6 + 10 * 1e-3 + $want / 1e6))")
close "$c" "$byhand" && ok || bad "stage 3 with unequal parts: comm $c s, by hand $byhand s"

# 2b. stage 3 with overlap_comm when the cores make the copies inside a node
#     (intra_copies_use_cores, what zerosim bench writes; a bench file
#     without the key counts as true): one node of 4, all its collectives
#     over shared memory, so nothing hides: compute + comm + 3 alpha +
#     optimizer; false (a GPU's copy engines): the larger of the two;
#     2 nodes of 2, the flat world's collectives cross the network link and
#     still hide. Compute is kept above communication (--seq) so that the
#     sum and the larger differ.
S3="--params 1e6 --stage 3 --dp 4 --seq 4096 --json"
for v in true false absent; do
    case $v in
        absent) printf '{"world_size": 4, "gemm_flops": 1e12, "intra_latency_s": 1e-3, "intra_bandwidth": 1e9, "inter_latency_s": 1e-3, "inter_bandwidth": 1e9, "work_s": {"attention": 0, "gelu": 0, "block_elementwise": 0, "head": 0, "grads": 0, "memory_pass": 0, "quantize": 0}}\n' ;;
        *) printf '{"gemm_flops": 1e12, "intra_latency_s": 1e-3, "intra_bandwidth": 1e9, "inter_latency_s": 1e-3, "inter_bandwidth": 1e9, "intra_copies_use_cores": %s}\n' "$v" ;;
    esac > "$T/cores-$v.json"
    "$ZS" plan $S3 --calibration "$T/cores-$v.json" > "$T/c.json" 2> "$T/e" || bad "plan ($v): $(cat "$T/e")"
    if [ "$v" = false ]; then f="max(t['compute_s'], t['comm_s'])"; else f="t['compute_s'] + t['comm_s']"; fi
    c=$(js "$T/c.json" "(lambda t: $f + 0.003 + t['optimizer_s'] - t['total_s'])(d['step_time'])")
    close "$c" 0 && ok || bad "stage 3, one node, intra_copies_use_cores $v: total off by $c s"
    e=$(js "$T/c.json" "(lambda t: t['comm_exposed_s'] - (0 if '$v' == 'false' else t['comm_s']))(d['step_time'])")
    close "$e" 0 && ok || bad "stage 3, one node, intra_copies_use_cores $v: exposed off by $e s"
    "$ZS" plan $S3 --ranks-per-node 2 --calibration "$T/cores-$v.json" > "$T/c2.json" 2> "$T/e" ||
        bad "plan ($v, 2 nodes): $(cat "$T/e")"
    c=$(js "$T/c2.json" "(lambda t: max(t['compute_s'], t['comm_s']) + 0.003 + t['optimizer_s'] - t['total_s'])(d['step_time'])")
    close "$c" 0 && ok || bad "stage 3 across 2 nodes, intra_copies_use_cores $v: not the larger (off by $c s)"
done
c=$(js "$T/c.json" "d['step_time']['compute_s'] - d['step_time']['comm_s']")
awk -v c="$c" 'BEGIN { exit !(c > 0) }' && ok || bad "the case does not tell the sum from the larger (compute - comm $c)"
sed 's/: false/: 1/' "$T/cores-false.json" > "$T/cores-bad.json"
if "$ZS" plan $S3 --calibration "$T/cores-bad.json" > "$T/o" 2> "$T/e"; then
    bad "intra_copies_use_cores 1 was accepted"
else
    [ "$(wc -l < "$T/e")" = 1 ] && grep -q '"intra_copies_use_cores" must be true or false' "$T/e" &&
        ok || bad "intra_copies_use_cores 1: $(cat "$T/e")"
fi

# 2c. what stage 3's compute hides, phase by phase (overlap_comm): with
#     hpZ the backward's gathers stay inside the node (copies the cores
#     make: never hidden), so only the forward's compute (1/3) hides the
#     forward's gathers across the link; the reduce-scatters run behind the
#     rest of the backward, except each micro-batch's last (waited for when
#     its backward has ended): of 6 calls (--grad-accum 2, 3 buckets), 2.
#     Each collective's time by hand from the plan's list; at 4e7 FLOP/s
#     compute (2.3 s) is between one and three times the forward's gathers
#     (1.1 s), so both limits bind; at 1e7 it exceeds everything, and only
#     the last reduces and hpZ's copies stay exposed.
printf '{"zero_optimization": {"stage": 3, "reduce_bucket_size": 60000}}\n' > "$T/rb.json"
for g in 4e7 1e7; do
    sed "s/\"gemm_flops\": 1e12/\"gemm_flops\": $g/; s/}$/, \"intra_copies_use_cores\": true}/" "$T/link.json" > "$T/ph.json"
    "$ZS" plan --config "$T/rb.json" --arch gpt --layers 2 --hidden 64 --heads 4 --seq 32 --vocab 128 \
        --micro-batch 2 --grad-accum 2 --stage 3 --hpz-partition-size 2 --dp 4 --ranks-per-node 2 \
        --calibration "$T/ph.json" --json > "$T/ph_out.json" 2> "$T/e" || bad "plan hpZ ($g): $(cat "$T/e")"
    c=$(python3 - "$T/ph_out.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
st, fwd, rs, rs_calls = d["step_time"], 0.0, 0.0, 0
for c in d["collectives"]:
    if c["op"] == "allgather" and c["link"] == "world":
        fwd = c["calls"] * 1e-3 + c["link_bytes"] / 1e6
    if c["op"] == "reduce_scatter":
        rs, rs_calls = c["calls"] * 3 * 1e-3 + 3 / 4 * c["full_bytes"] / 1e6, c["calls"]
assert fwd > 0 and rs > 0 and rs_calls == 6, (fwd, rs, rs_calls)
comp = st["compute_s"]
h1 = min(comp / 3, fwd)
hidden = h1 + min(comp - h1, rs * (1 - 2 / rs_calls))
want = comp + st["comm_s"] - hidden + 0.003 + st["optimizer_s"]
print(repr((st["total_s"] - want) / want), repr((st["comm_hidden_s"] - hidden) / hidden))
EOF
) || bad "hpZ's phases ($g): $c"
    set -- $c
    close "$1" 0 && close "$2" 0 && ok || bad "stage 3 with hpZ, gemm $g: total off by a relative $1, hidden by $2"
done

# 3. one node: the link's bandwidth moves nothing
for o in "--dp 4 --ranks-per-node 4" "--dp 4"; do
    a=$("$ZS" plan --params 1e6 --stage 2 $o --calibration "$T/link.json" --json |
        python3 -c "import json,sys; print(json.load(sys.stdin)['step_time']['total_s'])")
    b=$("$ZS" plan --params 1e6 --stage 2 $o --calibration "$T/nolink.json" --json |
        python3 -c "import json,sys; print(json.load(sys.stdin)['step_time']['total_s'])")
    [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "one node ($o): $a with the link, $b without"
done

# 4. an older bench between nodes: refused with one line
cat > "$T/old.json" <<'EOF'
{"zerosim_calibration": "0.1", "world_size": 4, "gemm_flops": 1e10, "nodes": 2,
 "ranks_per_node": 2, "inter_latency_s": 1e-3, "inter_bandwidth": 1e6,
 "work_s": {"attention": 0, "gelu": 0, "block_elementwise": 0, "head": 0, "grads": 0,
 "memory_pass": 0, "quantize": 0}}
EOF
if "$ZS" plan $P --calibration "$T/old.json" > "$T/o" 2> "$T/e"; then
    bad "an older bench file between nodes was accepted"
else
    [ "$(wc -l < "$T/e")" = 1 ] && grep -q "inter_link_bandwidth.*run zerosim bench again" "$T/e" &&
        ok || bad "older bench file: $(cat "$T/e")"
fi
# a link bandwidth that is not a positive number
sed 's/"inter_link_bandwidth": 1e6/"inter_link_bandwidth": 0/' "$T/link.json" > "$T/zero.json"
if "$ZS" plan $P --calibration "$T/zero.json" > "$T/o" 2> "$T/e"; then
    bad "inter_link_bandwidth 0 was accepted"
else
    grep -q '"inter_link_bandwidth" must be a positive number' "$T/e" && ok || bad "0: $(cat "$T/e")"
fi
# 5. ZeRO++'s codecs, counted in elements encoded or decoded at the
#    calibration's "quantize" rate (2e-9 s here). qgZ, one bucket of the
#    whole model (P = 110,336 elements, parts of P/4), reduced per
#    micro-batch (2): rank 0 encodes every part (P) and decodes its column,
#    the parts 0 and 2, from both ranks of its node (2 x P/2); then encodes
#    that column's node sums (P/2) and decodes the 2 node sums of its own
#    part (2 x P/4): 3P per reduce, 2 x 3 x 110,336 = 662,016 elements.
#    qwZ (zerosim train --print-program shows the units): each forward
#    gathers units 0-3, 10,240 + 49,984 + 49,984 + 8,320 = 118,528
#    elements (unit 0 the token and position embeddings, unit 3 the final
#    LayerNorm and the tied embedding again), every part decoded; rank 0
#    (elements 0-27,583) encodes its parts: all of unit 0 (10,240), unit 1's
#    elements 10,240-27,583 (17,344) and the embedding in unit 3 (8,192),
#    35,776. Two micro-batches: 2 x (118,528 + 35,776) = 308,608 elements.
#    Plain stage 3 gathers twice as much a step (forward and backward gather
#    the same units): 4 x 118,528, of which F = 2 x 118,528 is the forward's.
cat > "$T/k.json" <<'EOF'
{"gemm_flops": 1e12, "intra_latency_s": 0, "intra_bandwidth": 1e9,
 "inter_latency_s": 1e-3, "inter_bandwidth": 0.25e6, "inter_link_bandwidth": 1e6,
 "work_s": {"attention": 1e-9, "gelu": 1e-9, "block_elementwise": 1e-9, "head": 1e-9,
 "grads": 1e-9, "memory_pass": 1e-9, "quantize": 2e-9}}
EOF
Q="--arch gpt --layers 2 --hidden 64 --heads 4 --seq 32 --vocab 128 --micro-batch 2 --grad-accum 2 \
--stage 3 --dp 4 --ranks-per-node 2 --calibration $T/k.json --json"
for o in plain qgz qwz; do
    case $o in plain) f= ;; qgz) f=--quantized-gradients ;; qwz) f=--quantized-weights ;; esac
    "$ZS" plan $Q $f > "$T/q_$o.json" 2> "$T/e" || bad "plan $o: $(cat "$T/e")"
done
[ "$(js "$T/q_qgz.json" "d['padded_params']")" = 110336 ] && ok || bad "the model is not 110,336 elements"
c=$(js "$T/q_qgz.json" "d['step_time']['kernels_s']['quantize']")
close "$c" "$(awk 'BEGIN { printf "%.15g", 662016 * 2e-9 }')" && ok ||
    bad "qgZ's codecs: $c s, by hand 662,016 elements x 2e-9 s"
c=$(js "$T/q_plain.json" "d['step_time']['kernels_s']['quantize']")
[ "$c" = 0.0 ] && ok || bad "plain stage 3 has codec time: $c s"
F=$(js "$T/q_plain.json" "sum(c['full_bytes'] for c in d['collectives'] if c['op'] == 'allgather') / 4 / 2")
[ "$F" = 237056.0 ] && ok || bad "plain stage 3's forward gathers: $F elements, by hand 2 x 118,528"
c=$(js "$T/q_qwz.json" "d['step_time']['kernels_s']['quantize']")
close "$c" "$(awk 'BEGIN { printf "%.15g", 308608 * 2e-9 }')" && ok ||
    bad "qwZ's codecs: $c s, by hand 308,608 elements x 2e-9 s"
# a calibration from before the codecs (no "quantize"): still plans
# without ZeRO++'s codecs, and a plan that needs them is refused with one line
sed 's/, "quantize": 2e-9//' "$T/k.json" > "$T/k_old.json"
"$ZS" plan $Q --calibration "$T/k_old.json" > "$T/o" 2> "$T/e" && ok ||
    bad "stage 3 with a calibration without quantize: $(cat "$T/e")"
if "$ZS" plan $Q --calibration "$T/k_old.json" --quantized-gradients > "$T/o" 2> "$T/e"; then
    bad "qgZ planned without a codec rate"
else
    [ "$(wc -l < "$T/e")" = 1 ] && grep -q 'quantize' "$T/e" && ok || bad "qgZ without quantize: $(cat "$T/e")"
fi
finish
