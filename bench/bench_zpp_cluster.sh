#!/bin/sh
# The planner against the emulated cluster: ZeRO stages 1-3 and stage 3
# with ZeRO++ (qwZ, hpZ, qgZ, all three) on 2 nodes x 2 ranks whose link
# is slow enough that inter-node traffic is the bottleneck.
#
#   sh bench/bench_zpp_cluster.sh [--rate 50mbit] [--queue 100ms] [--rounds 3] [--steps 5]
#                                 [--only s1,s3,...] [--keep DIR]
#
# Needs root and iproute2 (scripts/cluster.sh); exits 77 where namespaces
# cannot be made. It brings up its own cluster (prefix zsb, subnet
# 10.78.0, state /run/zerosim-bench-zpp: it does not touch a cluster a
# user has up) and takes it down at exit. Steps: calibrate on the cluster
# (zerosim bench --quick: alpha and beta inside and between nodes, the
# GEMM and kernel rates); then ROUNDS rounds, each running every
# configuration once (interleaved, so that the machine's load falls on all
# of them alike), STEPS steps each; the measured step is the median over
# the rounds of each run's median step (the first step left out, it warms
# up); the planned step is zerosim plan's step_time.total_s with the
# cluster's calibration. Prints one row per configuration with the ratio
# planned / measured, ZeRO++'s speed-up over plain stage 3 measured and
# planned, and the load average before and after (the machine is shared:
# the figures are this run's, not the link's alone).
set -u
ZS=${ZEROSIM:-./zerosim}
RATE=50mbit QUEUE=100ms ROUNDS=3 STEPS=5 KEEP= ONLY=
while [ $# -gt 0 ]; do
    case $1 in
        --rate) RATE=$2; shift 2 ;;
        --queue) QUEUE=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;
        --keep) KEEP=$2; shift 2 ;;
        *) echo "bench_zpp_cluster.sh: unknown option $1 (--rate R, --queue Q, --rounds N, --steps N, --only NAMES, --keep DIR)" >&2
           exit 2 ;;
    esac
done
DIMS="--layers 4 --hidden 128 --heads 4 --seq 64 --vocab 256 --micro-batch 4"
CONFIGS="s1:--stage_1 s2:--stage_2 s3:--stage_3 qwz:--stage_3_--quantized-weights \
hpz:--stage_3_--hpz-partition-size_2 qgz:--stage_3_--quantized-gradients \
zpp:--stage_3_--quantized-weights_--hpz-partition-size_2_--quantized-gradients"
# --only s1,s3: those configurations alone (the speed-ups need s3 and theirs)
if [ -n "$ONLY" ]; then
    keep=
    for c in $CONFIGS; do
        case ",$ONLY," in *",${c%%:*},"*) keep="$keep $c" ;; esac
    done
    [ -n "$keep" ] || { echo "bench_zpp_cluster.sh: --only names none of s1 s2 s3 qwz hpz qgz zpp" >&2; exit 2; }
    CONFIGS=$keep
fi
export ZS_CLUSTER_STATE=${ZS_CLUSTER_STATE:-/run/zerosim-bench-zpp}
export ZS_CLUSTER_PREFIX=${ZS_CLUSTER_PREFIX:-zsb}
export ZS_CLUSTER_NET=${ZS_CLUSTER_NET:-10.78.0}
CL="sh scripts/cluster.sh"
T=$(mktemp -d)
# --keep DIR: the calibration, every run's report and log and the plans are
# copied there at exit (for reading where the time goes)
trap '$CL down > /dev/null 2>&1; [ -n "$KEEP" ] && mkdir -p "$KEEP" && cp -r "$T"/. "$KEEP"; rm -rf "$T"' EXIT
$CL up --nodes 2 --rate "$RATE" --queue "$QUEUE" || exit $?
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
$CL run --ranks-per-node 2 "$ZS" bench --quick --out "$T/cal.json" > "$T/cal.log" 2>&1 ||
    { echo "calibration failed:"; tail -5 "$T/cal.log"; exit 1; }
grep "between nodes:\|inside a node:\|^the node link" "$T/cal.log" | sed 's/^/# /'

r=1
while [ "$r" -le "$ROUNDS" ]; do
    for c in $CONFIGS; do
        name=${c%%:*} opts=$(echo "${c#*:}" | tr _ ' ')
        $CL run --ranks-per-node 2 "$ZS" train $DIMS $opts --steps "$STEPS" --quiet \
            --report "$T/$name.$r.json" > "$T/$name.$r.log" 2>&1 ||
            { echo "$name round $r failed: $(tail -2 "$T/$name.$r.log")"; exit 1; }
    done
    r=$((r + 1))
done
for c in $CONFIGS; do
    name=${c%%:*} opts=$(echo "${c#*:}" | tr _ ' ')
    "$ZS" plan --arch gpt $DIMS $opts --dp 4 --ranks-per-node 2 --calibration "$T/cal.json" \
        --json > "$T/$name.plan.json" || exit 1
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$T" "$ROUNDS" $CONFIGS <<'PY'
import json, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
names = [c.split(":")[0] for c in sys.argv[3:]]
meas, plan = {}, {}
print("# config  measured_step_s  planned_step_s  planned/measured  (rounds: each run's median step)")
for n in names:
    runs = [statistics.median(json.load(open("%s/%s.%d.json" % (d, n, r)))["step_seconds"][1:])
            for r in range(1, rounds + 1)]
    meas[n] = statistics.median(runs)
    plan[n] = json.load(open("%s/%s.plan.json" % (d, n)))["step_time"]["total_s"]
    print("%-8s %15.3f %15.3f %17.3f   (%s)" % (n, meas[n], plan[n], plan[n] / meas[n],
                                            " ".join("%.3f" % x for x in runs)))
for n in [n for n in ("qwz", "hpz", "qgz", "zpp") if n in meas and "s3" in meas]:
    print("# speed-up of %s over stage 3: measured %.2f, planned %.2f"
          % (n, meas["s3"] / meas[n], plan["s3"] / plan[n]))
PY
