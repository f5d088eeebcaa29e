#!/bin/sh
# zerosim plan --hierarchical: the data-parallel reduce-scatters and
# allgathers as two rings, inside each node of K devices over the whole
# buffer S, then across the M nodes over S/K (zs_comm_set_hierarchical):
#  * the bytes that cross nodes per device and step, (M-1)/N of each buffer,
#    and those inside, equal a run's ledger on rank 0 over its steps (4 real
#    ranks as 2 nodes of 2, stages 2 and 3) and a phantom run's (16 ranks,
#    4 per node), byte for byte, and (M-1)/N of the flat plan's buffers;
#  * the step's communication time, by hand from a hand-written
#    calibration: per call (K-1) alpha_in + (K-1)/K S / beta_in inside,
#    (M-1) alpha_x + (M-1)/M (S/K) / beta_x across;
#  * what it does not plan (--tp, ZeRO++) and nodes that are not whole are
#    refused with one line.
. "$(dirname "$0")/testlib.sh"

js() { python3 -c "import json,sys; d=json.load(open('$1')); print($2)"; }
M="--layers 2 --hidden 24 --heads 4 --seq 10 --vocab 38 --micro-batch 2 --grad-accum 2"
# ledger FOLDER STEPS: rank 0's reduce-scatter and allgather bytes per step,
# "inter intra"
ledger() {
    awk -v s="$2" '$1 == 0 && $3 == "all" && ($2 == "reduce_scatter" || $2 == "allgather") {
        x += $9; t += $5 } END { printf "%.0f %.0f\n", x / s, (t - x) / s }' "$1/comm.csv"
}
# planned FILE: the plan's "inter intra" per device and step
planned() {
    js "$1" "'%d %d' % (d['inter_node_bytes_per_device_per_step'], d['traffic_bytes_per_step'] - d['inter_node_bytes_per_device_per_step'])"
}

for st in 2 3; do
    if sh "$HERE/mpirun.sh" 4 "$ZS" train $M --steps 3 --warmup 0 --stage $st --ranks-per-node 2 \
            --hierarchical --quiet --csv "$T/r$st" </dev/null > "$T/r$st.log" 2>&1; then
        "$ZS" plan --arch gpt $M --stage $st --dp 4 --ranks-per-node 2 --hierarchical --json \
            > "$T/p$st.json" 2> "$T/e" || bad "plan stage $st: $(cat "$T/e")"
        a=$(ledger "$T/r$st" 3) b=$(planned "$T/p$st.json")
        case $a in "0 "*) bad "stage $st: no bytes crossed nodes in the run ($a)" ;; esac
        [ "$a" = "$b" ] && ok || bad "stage $st, 2 nodes of 2: run (inter intra) $a, plan $b"
        # (M-1)/N of the flat plan's buffers
        "$ZS" plan --arch gpt $M --stage $st --dp 4 --ranks-per-node 2 --json > "$T/f$st.json"
        c=$(python3 - "$T/f$st.json" "$T/p$st.json" <<'PY'
import json, sys
f, h = (json.load(open(x)) for x in sys.argv[1:])
S = sum(c["full_bytes"] for c in f["collectives"] if c["op"] in ("reduce_scatter", "allgather"))
print(int(S * (2 - 1) / 4 == h["inter_node_bytes_per_device_per_step"] and
          f["traffic_bytes_per_step"] == h["traffic_bytes_per_step"]))
PY
)
        [ "$c" = 1 ] && ok || bad "stage $st: the hierarchical plan is not (M-1)/N of the flat buffers"
    else
        bad "stage $st: the run failed: $(tail -2 "$T/r$st.log")"
    fi
done

# a phantom run of 16 ranks, 4 per node
if "$ZS" train --phantom --world-size 16 $M --steps 2 --warmup 0 --stage 2 --ranks-per-node 4 \
        --hierarchical --quiet --csv "$T/ph" > "$T/ph.log" 2>&1; then
    "$ZS" plan --arch gpt $M --stage 2 --dp 16 --ranks-per-node 4 --hierarchical --json > "$T/pp.json"
    a=$(ledger "$T/ph" 2) b=$(planned "$T/pp.json")
    [ "$a" = "$b" ] && ok || bad "phantom, 4 nodes of 4: run (inter intra) $a, plan $b"
else
    bad "the phantom run failed: $(tail -2 "$T/ph.log")"
fi

# the time, by hand: stage 2, 1e6 fp32 parameters, 2 nodes of 2, one
# reduce-scatter and one allgather of S = 4e6 bytes a step: inside, S/2 /
# 1e9 = 0.002 s each, plus alpha_in 1e-4 once for the allgather and M = 2
# times for the reduce-scatter (one ring per node block); across, 1e-3 +
# (S/2)/2 / 1e6 = 1.001 s each: 2.0063 s
cat > "$T/cal.json" <<'CAL'
{"gemm_flops": 1e12, "intra_latency_s": 1e-4, "intra_bandwidth": 1e9,
 "inter_latency_s": 1e-3, "inter_bandwidth": 1e6}
CAL
"$ZS" plan --params 1e6 --stage 2 --dp 4 --ranks-per-node 2 --hierarchical \
    --calibration "$T/cal.json" --json > "$T/t.json" 2> "$T/e" || bad "plan: $(cat "$T/e")"
c=$(js "$T/t.json" "d['step_time']['comm_s']")
awk -v c="$c" 'BEGIN { d = c - 2.0063; exit !(d < 1e-9 && d > -1e-9) }' && ok ||
    bad "hierarchical comm time $c s, by hand 2.0063 s"
# stage 3: the two levels complete when called, so overlap_comm hides nothing
"$ZS" plan --params 1e6 --seq 4096 --stage 3 --dp 4 --ranks-per-node 2 --hierarchical \
    --calibration "$T/cal.json" --json > "$T/t3.json" 2> "$T/e" || bad "plan: $(cat "$T/e")"
c=$(js "$T/t3.json" "(lambda t: t['compute_s'] + t['comm_s'] + t['scalars_s'] + t['optimizer_s'] - t['total_s'] if not t['overlapped'] else 'overlapped')(d['step_time'])")
awk -v c="$c" 'BEGIN { exit !(c + 0 == c && c < 1e-9 && c > -1e-9) }' && ok ||
    bad "stage 3 hierarchical: not the sum of compute and communication ($c)"

# refused, one line each
err() { # WHAT ARGS...: a one-line error naming WHAT
    what=$1
    shift
    if "$ZS" plan "$@" > "$T/o" 2> "$T/e"; then
        bad "accepted: $*"
    else
        [ "$(wc -l < "$T/e")" = 1 ] && grep -q -- "$what" "$T/e" && ok || bad "$*: $(cat "$T/e")"
    fi
}
err "--hierarchical is planned without --tp" --arch gpt $M --stage 3 --dp 4 --ranks-per-node 2 --tp 2 --hierarchical
err "--hierarchical is planned without" --arch gpt $M --stage 3 --dp 4 --ranks-per-node 2 --hpz-partition-size 2 --hierarchical
err "whole nodes of 4" --params 1e6 --stage 2 --dp 6 --ranks-per-node 4 --hierarchical
finish
