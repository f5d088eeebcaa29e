#!/bin/sh
# Two-level (hierarchical) reduce-scatter and allgather (--hierarchical) on
# 4 ranks as 2 nodes of 2 (--ranks-per-node 2):
# - deterministic mode (integer sums, exact in any order): the parameters'
#   hash equals the flat collectives';
# - fp32: stages 2 and 3 give one hash with --hierarchical (the sum order
#   is the same in every stage), and every step's loss and gradient norm is
#   within a relative 1e-5 of the flat run's (the order of the sums
#   differs: the bytes differ);
# - the ledger: each rank sends (M-1)/N of every buffer across nodes (by hand:
#   1/3 of its ring volume at N = 4, M = 2) and the rest inside, equal to the
#   prediction byte for byte; a phantom run at N = 64, 8 per node, too.
. "$(dirname "$0")/testlib.sh"

MODEL="--layers 2 --hidden 24 --heads 4 --seq 10 --vocab 38 --micro-batch 2 --grad-accum 2 --steps 3 --warmup 0"
exact() {
    awk -v L="$2" '
        $1 ~ /^#/ || $3 != "all" || $10 == -1 { next }
        { n++; if ($9 != $10) { printf "FAIL: %s rank %s %s: inter %s predicted %s\n", L, $1, $2, $9, $10; bad++ } }
        END { exit (bad > 0 || n == 0) }' "$1/comm.csv"
}
# series FILE NAME: a per-step array of a report on one line
series() { python3 -c "import json,sys; print(' '.join(repr(x) for x in json.load(open(sys.argv[1]))[sys.argv[2]]))" "$1" "$2"; }

run_2x2 det-flat --stage 3 --deterministic
run_2x2 det-hier --stage 3 --deterministic --hierarchical
a=$(key "$T/det-flat.json" param_hash) b=$(key "$T/det-hier.json" param_hash)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "deterministic: hierarchical hash $b, flat $a"

run_2x2 s3-flat --stage 3
for st in 2 3; do
    run_2x2 "s$st-hier" --stage $st --hierarchical
done
h3=$(key "$T/s3-hier.json" param_hash)
[ -n "$h3" ] && [ "$(key "$T/s2-hier.json" param_hash)" = "$h3" ] && ok ||
    bad "hierarchical stages 2 and 3 differ: $(key "$T/s2-hier.json" param_hash) $h3"
if command -v python3 > /dev/null; then
    for k in losses grad_norms; do
        python3 - "$T/s3-flat.json" "$T/s3-hier.json" "$k" <<'PY' && ok || bad "fp32 $k: hierarchical beyond 1e-5 of flat"
import json, sys
a = json.load(open(sys.argv[1]))[sys.argv[3]]; b = json.load(open(sys.argv[2]))[sys.argv[3]]
worst = max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(a, b))
print("fp32 %s: largest relative difference %.2e over %d steps" % (sys.argv[3], worst, len(a)))
sys.exit(0 if len(a) == len(b) and len(a) > 0 and worst <= 1e-5 else 1)
PY
    done
fi
for l in s3-hier s2-hier det-hier; do
    exact "$T/$l" "$l" && ok || bad "$l: inter-node bytes differ from the prediction"
done
# by hand: 1/3 of rank 0's reduce-scatter ring volume crosses (N = 4, M = 2)
awk '$1 == 0 && $2 == "reduce_scatter" && $3 == "all" { exit !($5 > 0 && $9 * 3 == $5) }' \
    "$T/s3-hier/comm.csv" && ok || bad "rank 0's inter-node reduce-scatter bytes are not 1/3 of its traffic"
"$ZS" train $MODEL --stage 3 --ranks-per-node 8 --hierarchical --phantom --world-size 64 --quiet \
    --csv "$T/ph" > "$T/ph.log" 2>&1 && exact "$T/ph" "phantom N=64 K=8" && ok ||
    bad "phantom N=64 K=8 hierarchical: $(tail -1 "$T/ph.log")"
finish
