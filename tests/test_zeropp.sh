#!/bin/sh
# ZeRO++ qwZ (zero_optimization.zero_quantized_weights, --quantized-weights)
# on 4 ranks as 2 nodes of 2: the forward parameter gathers of stage 3 send
# int8 blocks of 256 with an fp32 scale each. The allgather bytes the
# ledger records equal the prediction byte for byte (counted from the step
# program: the forward phase's gathers at zs_comm_q8_bytes of each part),
# and so do the inter-node bytes (flat; hierarchical in a phantom run of 64); in bf16 the forward
# gathers send 0.5 + 2/256 of the dense bytes (by hand: n + 4 n / 256 bytes
# for 2 n); a phantom run reports the same bytes; the loss stays within 1%
# of dense stage 3 over 20 steps (the 300-step convergence figure is in
# docs/cluster.md); deterministic mode and stages 0-2 refuse it with one
# line.
. "$(dirname "$0")/testlib.sh"

MODEL="--layers 2 --hidden 24 --heads 4 --seq 10 --vocab 38 --micro-batch 2 --grad-accum 2 --warmup 0"
run() { # label N args...: zs_run of the model, quiet
    zs_label=$1 zs_ranks=$2
    shift 2
    zs_run "$zs_label" "$zs_ranks" $MODEL "$@" --quiet
}
exact() { # dir label: traffic and inter-node bytes = predicted
    awk -v L="$2" '
        $1 ~ /^#/ || $3 != "all" { next }
        ($2 == "reduce_scatter" || $2 == "allgather") { n++
            if ($5 != $6) { printf "FAIL: %s rank %s %s: %s predicted %s\n", L, $1, $2, $5, $6; bad++ }
            if ($9 != $10) { printf "FAIL: %s rank %s %s: inter %s predicted %s\n", L, $1, $2, $9, $10; bad++ } }
        END { exit (bad > 0 || n == 0) }' "$1/comm.csv"
}
run q-flat 4 --stage 3 --steps 3 --ranks-per-node 2 --quantized-weights --precision bf16
run d-bf16 4 --stage 3 --steps 3 --ranks-per-node 2 --precision bf16
exact "$T/q-flat" q-flat && ok || bad "q-flat: bytes differ from the prediction"
# the encoded parts are counted (comm_buffers) from a forward gather's start
# to its wait: every category's peak = the prediction, and on rank 0 the
# first gather (unit 0, the token and position embeddings: 38 x 24 + 10 x
# 24 = 1152 elements, all in rank 0's shard of 15648 / 4) adds
# 1152 + 4 x ceil(1152 / 256) = 1172 bytes to comm_buffers, where dense
# stage 3 adds nothing
awk '$1 !~ /^#/ && $4 != -1 && $3 != $4 { b++ } END { exit b > 0 }' "$T/q-flat/memory.csv" && ok ||
    bad "qwZ: a memory category differs from the prediction"
first() { awk '$1 !~ /^#/ { v[n++] = $7 } END { print v[1] - v[0] }' "$1/timeline.csv"; }
[ "$(first "$T/q-flat")" = 1172 ] && [ "$(first "$T/d-bf16")" = 0 ] && ok ||
    bad "qwZ's first encoded gather: comm_buffers +$(first "$T/q-flat") (dense +$(first "$T/d-bf16")), not 1172 and 0"
"$ZS" train $MODEL --stage 3 --steps 2 --ranks-per-node 8 --quantized-weights --hierarchical \
    --phantom --world-size 64 --quiet --csv "$T/ph64" > "$T/ph64.log" 2>&1 &&
    exact "$T/ph64" "phantom N=64 K=8 qwZ hierarchical" && ok || bad "phantom N=64 qwZ hierarchical: $(tail -1 "$T/ph64.log")"
# the forward gathers' API bytes, quantized against dense
python3 - "$T/d-bf16.json" "$T/q-flat.json" <<'PY' && ok || bad "qwZ forward gathers are not 0.5 + 2/256 of dense"
import json, sys
f = [json.load(open(p))["comm"][0]["ops"]["allgather"]["by_phase"]["forward"]["api_bytes"] for p in sys.argv[1:]]
r = f[1] / f[0]
print("qwZ: forward allgather %d bytes against %d dense (bf16): %.4f" % (f[1], f[0], r))
sys.exit(0 if 0.5 + 2 / 256 - 1e-3 < r < 0.5 + 2 / 256 + 2e-3 else 1)
PY
"$ZS" train $MODEL --stage 3 --steps 3 --ranks-per-node 2 --quantized-weights --precision bf16 \
    --phantom --world-size 4 --quiet --csv "$T/ph" > "$T/ph.log" 2>&1 || bad "phantom qwZ failed: $(tail -1 "$T/ph.log")"
strip() { awk '$1 !~ /^#/ && $3 != "report" && $3 != "all" { print $1, $2, $3, $4, $5, $7, $9 }' "$1"; }
strip "$T/q-flat/comm.csv" > "$T/r.txt"
strip "$T/ph/comm.csv" > "$T/p.txt"
[ -s "$T/r.txt" ] && cmp -s "$T/r.txt" "$T/p.txt" && ok || bad "phantom qwZ bytes differ from the real run's"

# the loss: 20 steps, fp32, 2 ranks
run c-dense 2 --stage 3 --steps 20
run c-qwz 2 --stage 3 --steps 20 --quantized-weights
python3 - "$T/c-dense.json" "$T/c-qwz.json" <<'PY' && ok || bad "qwZ's loss is not within 1% of dense"
import json, sys
a, b = (json.load(open(p))["losses"] for p in sys.argv[1:])
ma, mb = sum(a[-5:]) / 5, sum(b[-5:]) / 5
print("qwZ: mean loss of the last 5 of 20 steps %.5f, dense %.5f (%.3f%%)" % (mb, ma, 100 * (mb - ma) / ma))
sys.exit(0 if abs(mb - ma) <= 0.01 * ma else 1)
PY

refuse -m "lossy" train $MODEL --steps 1 --stage 3 --quantized-weights --deterministic
refuse -m "use --stage 3" train $MODEL --steps 1 --stage 2 --quantized-weights
finish
