#!/bin/sh
# ZeRO++ hpZ (zero_hpz_partition_size, --hpz-partition-size) and qgZ
# (zero_quantized_gradients, --quantized-gradients) on 4 ranks as 2 nodes
# of 2, bf16, stage 3.
# hpZ: the parameters are byte-identical to plain stage 3 (param_hash);
# the allgather bytes and inter-node bytes equal the prediction for every
# rank, and the backward gathers send nothing across nodes while the
# forward ones do (ranks 1 and 3, the flat ring's node ends); params
# measured = predicted, and hpZ's params are plain stage 3's plus padded/2
# bf16 parameters (by hand: 2 bytes x padded / 2).
# qgZ: no reduce-scatter; the all-to-all bytes and their inter-node part
# equal the prediction for every rank; by hand, the inter-node bytes of a
# step summed over the ranks are 4 bits of each gradient element the
# reduce-scatter of plain stage 3 reduced, plus the block scales (at
# M = 2 nodes each part's node sum crosses once); a phantom run reports
# the real run's bytes; phantom, 64 ranks of 8 per node with all three
# techniques: every rank's bytes = prediction; zerosim plan's bytes across
# each node's link and per device = a phantom run's. Refusals with one line.
. "$(dirname "$0")/testlib.sh"

MODEL="--layers 2 --hidden 24 --heads 4 --seq 10 --vocab 38 --micro-batch 2 --grad-accum 2 --warmup 0"
COMMON="--stage 3 --steps 3 --ranks-per-node 2 --precision bf16"
run() { # label args...: zs_run of the model on 4 ranks, quiet
    zs_label=$1
    shift
    zs_run "$zs_label" 4 $MODEL $COMMON "$@" --quiet
}
exact() { # dir label: every rank's collective bytes and inter-node bytes = predicted
    awk -v L="$2" '
        $1 ~ /^#/ || $3 != "all" { next }
        ($2 == "reduce_scatter" || $2 == "allgather" || ($2 == "alltoall" && $4 > 0)) { n++
            if ($5 != $6) { printf "FAIL: %s rank %s %s: %s predicted %s\n", L, $1, $2, $5, $6; bad++ }
            if ($9 != $10) { printf "FAIL: %s rank %s %s: inter %s predicted %s\n", L, $1, $2, $9, $10; bad++ } }
        END { exit (bad > 0 || n == 0) }' "$1/comm.csv"
}
run plain
run hpz --hpz-partition-size 2
run qgz --quantized-gradients
run zpp --quantized-weights --hpz-partition-size 2 --quantized-gradients

# hpZ
h0=$(key "$T/plain.json" param_hash) h1=$(key "$T/hpz.json" param_hash)
[ -n "$h0" ] && [ "$h0" = "$h1" ] && ok || bad "hpZ's param_hash $h1 differs from plain stage 3's $h0"
exact "$T/hpz" hpz && ok || bad "hpZ: bytes differ from the prediction"
awk '$1 !~ /^#/ && $2 == "allgather" && $3 == "backward" && $9 != 0 { b++ }
     $1 !~ /^#/ && $2 == "allgather" && $3 == "forward" && ($1 == 1 || $1 == 3) && $9 > 0 { f++ }
     END { exit !(b == 0 && f == 2) }' "$T/hpz/comm.csv" && ok ||
    bad "hpZ: backward gathers cross nodes, or forward gathers do not"
padded=$(key "$T/hpz.json" padded_params)
awk -v P="$padded" 'FNR == 1 { f++ } $1 !~ /^#/ && $2 == "params" { m[f, $1] = $3; if ($3 != $4) bad++ }
     END { for (q = 0; q < 4; q++) if (m[2, q] - m[1, q] != P) bad++; exit (bad > 0 || P == "") }' \
    "$T/plain/memory.csv" "$T/hpz/memory.csv" && ok ||
    bad "hpZ: params differ from the prediction, or not by the secondary partition's $padded bytes"
grep -q "hpZ: params include the secondary partition, $padded bytes per rank" "$T/hpz.log" && ok ||
    bad "hpZ: the report does not name the secondary partition"

# qgZ
exact "$T/qgz" qgz && ok || bad "qgZ: bytes differ from the prediction"
awk '$1 !~ /^#/ && $2 == "reduce_scatter" && $3 == "all" && $4 != 0 { b++ } END { exit b > 0 }' \
    "$T/qgz/comm.csv" && ok || bad "qgZ: a reduce-scatter ran"
python3 - "$T/plain/comm.csv" "$T/qgz/comm.csv" <<'PY' && ok || bad "qgZ: inter-node bytes are not 4 bits per reduced element"
import sys
def rows(p):
    return [l.split() for l in open(p) if not l.startswith("#") and l.split()[2] == "all"]
elems = sum(float(r[6]) for r in rows(sys.argv[1]) if r[1] == "reduce_scatter" and r[0] == "0") / 2 / 3
inter = sum(float(r[8]) for r in rows(sys.argv[2]) if r[1] == "alltoall") / 3
print("qgZ: %.0f bytes across nodes per step for %.0f reduced bf16 elements: %.4f bytes each" % (inter, elems, inter / elems))
sys.exit(0 if 0.5 <= inter / elems <= 0.5 + 0.05 else 1)
PY
# all three on the real 2 x 2: every rank's bytes = prediction, and node 0's
# link carries less than a third of plain stage 3's (flat rings at N = 4:
# 3/4 of each buffer; here 0.5 of the forward gathers, 0 of the backward
# ones, 4 bits of half the gradients)
exact "$T/zpp" "qwZ+hpZ+qgZ" && ok || bad "qwZ+hpZ+qgZ: bytes differ from the prediction"
python3 - "$T/plain/comm.csv" "$T/zpp/comm.csv" <<'PY' && ok || bad "qwZ+hpZ+qgZ: node 0's link is not below a third of plain's"
import sys
def node0(p):
    return sum(float(l.split()[8]) for l in open(p) if not l.startswith("#") and l.split()[2] == "all"
               and l.split()[1] in ("allgather", "reduce_scatter", "alltoall") and int(l.split()[0]) < 2)
a, b = node0(sys.argv[1]), node0(sys.argv[2])
print("2 x 2, 3 steps: node 0's link %.0f bytes plain, %.0f with qwZ+hpZ+qgZ (%.4f)" % (a, b, b / a))
sys.exit(0 if 0 < b < a / 3 else 1)
PY
# an fp16 overflow survives the 4-bit blocks (a block holding an inf or NaN
# gets a NaN scale): at a loss scale of 2^30 the first steps are skipped,
# as they are without qgZ
echo '{"fp16": {"enabled": true, "initial_scale_power": 30}}' > "$T/ls.json"
sh "$HERE/mpirun.sh" 4 "$ZS" train --config "$T/ls.json" $MODEL --stage 3 --steps 2 \
    --ranks-per-node 2 --quantized-gradients --quiet --report "$T/ov.json" > "$T/ov.log" 2>&1 \
    </dev/null || bad "qgZ fp16: the run failed: $(tail -2 "$T/ov.log")"
python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if d["skipped_steps"] == [True, True] and d["loss_scales"][0] > 1e9 else 1)' "$T/ov.json" &&
    ok || bad "qgZ: an fp16 overflow at loss scale 2^30 was not seen"
"$ZS" train $MODEL $COMMON --quantized-gradients --phantom --world-size 4 --quiet --csv "$T/ph" \
    > "$T/ph.log" 2>&1 || bad "phantom qgZ failed: $(tail -1 "$T/ph.log")"
strip() { awk '$1 !~ /^#/ && $3 != "report" && $3 != "all" { print $1, $2, $3, $4, $5, $7, $9 }' "$1"; }
strip "$T/qgz/comm.csv" > "$T/r.txt"
strip "$T/ph/comm.csv" > "$T/p.txt"
[ -s "$T/r.txt" ] && cmp -s "$T/r.txt" "$T/p.txt" && ok || bad "phantom qgZ bytes differ from the real run's"
"$ZS" train $MODEL --stage 3 --steps 2 --ranks-per-node 8 --quantized-weights --hpz-partition-size 8 \
    --quantized-gradients --phantom --world-size 64 --quiet --csv "$T/ph64" > "$T/ph64.log" 2>&1 &&
    exact "$T/ph64" "phantom N=64 K=8 qwZ+hpZ+qgZ" && ok || bad "phantom N=64 ZeRO++: $(tail -1 "$T/ph64.log")"

# The published volume (ZeRO++, arXiv 2306.10209): an 18B-parameter fp16
# GPT (M = its 2-byte parameters), 64 ranks as 8 nodes of 8, one step. By
# hand, plain stage 3's bytes leaving each node (the flat ring: the node's
# last rank sends (N-1)/N of each buffer across) are 63/64 x 2 bytes x
# (3 padded + 2 E): a forward and a backward gather of every parameter,
# the tied embedding (E = vocab x hidden) gathered twice in each pass, one
# reduce-scatter; with qwZ, hpZ and qgZ they are about a quarter of that.
BIG="--layers 40 --hidden 6144 --heads 48 --seq 256 --vocab 50257 --micro-batch 1 --stage 3 \
     --steps 1 --precision fp16 --phantom --world-size 64 --ranks-per-node 8 --quiet"
"$ZS" train $BIG --csv "$T/b0" > "$T/b0.log" 2>&1 && exact "$T/b0" "18B plain" && ok ||
    bad "18B phantom plain stage 3: $(tail -1 "$T/b0.log")"
"$ZS" train $BIG --quantized-weights --hpz-partition-size 8 --quantized-gradients --csv "$T/b1" \
    > "$T/b1.log" 2>&1 && exact "$T/b1" "18B ZeRO++" && ok ||
    bad "18B phantom ZeRO++: $(tail -1 "$T/b1.log")"
python3 - "$T/b0" "$T/b1" <<'PY' && ok || bad "18B: the inter-node volume is not the hand count"
import sys
def per_node(d):
    t = 0.0
    for l in open(d + "/comm.csv"):
        r = l.split()
        if not l.startswith("#") and r[2] == "all" and r[1] in ("allgather", "reduce_scatter", "alltoall"):
            t += float(r[8])
    return t / 8
P = int([l for l in open(sys.argv[1] + "/run.csv") if not l.startswith("#")][0].split()[5])
E = 50257 * 6144
a, b = per_node(sys.argv[1]), per_node(sys.argv[2])
hand = 63 / 64 * 2 * (3 * P + 2 * E)
print("18B (%d parameters, M = %.2f GB): %.2f GB across each node's link per step, ZeRO++ %.2f GB (%.4f M, %.4f of plain)"
      % (P, 2 * P / 1e9, a / 1e9, b / 1e9, b / (2 * P), b / a))
sys.exit(0 if abs(a - hand) < 1 and 0.24 < b / a < 0.25 else 1)
PY

# zerosim plan with the ZeRO++ options: per step, the bytes crossing node
# 0's link (summed over its ranks) and rank 0's traffic equal a phantom
# run's, for each technique and all three (2 nodes of 2), and for the 18B
# model with all three (8 nodes of 8)
node0() { # csv ranks-per-node steps: node 0's inter-node bytes and rank 0's bytes per step
    awk -v K="$2" -v S="$3" '$1 !~ /^#/ && $3 == "all" && ($2 == "allgather" || $2 == "reduce_scatter" || $2 == "alltoall") {
        if ($1 < K) i += $9; if ($1 == 0) t += $5 }
        END { printf "%.0f %.0f\n", i / S, t / S }' "$1/comm.csv"
}
planned() { # args...: the plan's two figures
    "$ZS" plan "$@" --json | python3 -c 'import json, sys
d = json.load(sys.stdin)
print(d["inter_node_bytes_per_node_per_step"], d["traffic_bytes_per_step"])'
}
PM="--layers 2 --hidden 24 --heads 4 --seq 10 --vocab 38 --micro-batch 2 --grad-accum 2"
for zpp in "--quantized-weights" "--hpz-partition-size 2" "--quantized-gradients" \
    "--quantized-weights --hpz-partition-size 2 --quantized-gradients"; do
    "$ZS" train $PM --stage 3 --steps 2 --precision bf16 --phantom --world-size 4 \
        --ranks-per-node 2 $zpp --quiet --csv "$T/pp" > "$T/pp.log" 2>&1 || bad "phantom $zpp failed"
    a=$(node0 "$T/pp" 2 2) b=$(planned --arch gpt $PM --stage 3 --precision bf16 --dp 4 \
        --ranks-per-node 2 $zpp 2>&1)
    [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "plan $zpp: $b, phantom $a"
done
# with --tp 2: the node holds two data-parallel groups' blocks (K = 2 of
# each on nodes of 4; K = 1 on nodes of 2) and the tensor-parallel rings
# stay inside it
node0tp() { # csv ranks-per-node steps: as node0, the TP all-reduces in rank 0's bytes
    awk -v K="$2" -v S="$3" '$1 !~ /^#/ && $3 == "all" && ($2 == "allgather" || $2 == "reduce_scatter" || $2 == "alltoall" || $2 == "allreduce") {
        if ($1 < K) i += $9; if ($1 == 0) t += $5 }
        END { printf "%.0f %.0f\n", i / S, t / S }' "$1/comm.csv"
}
for nz in "4 --quantized-weights --hpz-partition-size 2 --quantized-gradients" \
    "2 --quantized-weights --quantized-gradients"; do
    set -- $nz
    rpn=$1
    shift
    "$ZS" train $PM --stage 3 --steps 2 --precision bf16 --phantom --world-size 8 --tp 2 \
        --ranks-per-node "$rpn" "$@" --quiet --csv "$T/pt" > "$T/pt.log" 2>&1 || bad "phantom tp 2 $nz failed"
    a=$(node0tp "$T/pt" "$rpn" 2) b=$(planned --arch gpt $PM --stage 3 --precision bf16 --dp 4 \
        --tp 2 --ranks-per-node "$rpn" "$@" 2>&1)
    [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "plan --tp 2, nodes of $nz: $b, phantom $a"
done
err_plan=$("$ZS" plan --arch gpt $(echo "$PM" | sed 's/--vocab 38/--vocab 40/') --stage 3 --dp 2 \
    --tp 4 --ranks-per-node 2 --quantized-weights 2>&1 >/dev/null)
case $err_plan in *"inside a node"*) ok ;; *) bad "plan: a TP group across nodes with ZeRO++: $err_plan" ;; esac
# zerosim train runs it (the prediction's node size took the data-parallel
# world for the mesh's and divided by zero): measured = predicted
zs_run tpx 0 $(echo "$PM" | sed 's/--vocab 38/--vocab 40/') --stage 3 --steps 1 --phantom \
    --world-size 8 --tp 4 --ranks-per-node 2 --quantized-weights --quantized-gradients &&
    measured_is_predicted "phantom --tp 4 across nodes of 2 with qwZ and qgZ" "$T/tpx"
a=$(node0 "$T/b1" 8 1)
b=$(planned --arch gpt --layers 40 --hidden 6144 --heads 48 --seq 256 --vocab 50257 --micro-batch 1 \
    --stage 3 --precision fp16 --dp 64 --ranks-per-node 8 --quantized-weights \
    --hpz-partition-size 8 --quantized-gradients 2>&1)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "plan 18B ZeRO++: $b, phantom $a"
echo "18B ZeRO++, node 0's link and rank 0 per step: plan $b, phantom $a"

refuse -m "lossy" train $MODEL --steps 1 --stage 3 --quantized-gradients --deterministic
refuse -m "use --stage 3" train $MODEL --steps 1 --stage 2 --quantized-gradients
refuse -m "use --stage 3" train $MODEL --steps 1 --stage 2 --hpz-partition-size 2
refuse -m "must divide" train $MODEL --steps 1 --stage 3 --hpz-partition-size 3 --phantom --world-size 4
refuse -m "inside a node" train $MODEL --steps 1 --stage 3 --hpz-partition-size 4 --phantom \
    --world-size 4 --ranks-per-node 2
refuse -m "zero_hpz_partition_size\|hpz-partition-size" train $MODEL --steps 1 --stage 3 --hpz-partition-size 0
finish
