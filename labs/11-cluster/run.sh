#!/bin/sh
# Lab 11, across nodes: the default GPT (2 blocks, hidden 64, 106,240
# parameters), bf16, ZeRO stage 3 on 4 ranks declared 2 nodes of 2
# (--ranks-per-node 2: the form the test suite uses, on this one machine;
# no root or network namespaces needed). The bytes that cross a node's link
# per step, flat, two-level (--hierarchical) and with ZeRO++'s qwZ, hpZ
# and qgZ, each alone and all three, against the plan; the plan's step time
# on a slow link; then ZeRO++'s 18B-parameter example on 8 nodes of 8 from
# the plan, where the volume falls to the paper's fraction. Writes
# links.dat and links.png. Full: real runs of 3 steps (hashes compared,
# step times shown); --quick: phantom runs (the same bytes).
. "$(dirname "$0")/../lib.sh"
lab_init "$0" "$@"

N=4; K=2
DIMS="--layers 2 --hidden 64 --heads 4 --seq 32 --vocab 64 --micro-batch 8"
RUN="$DIMS --precision bf16 --stage 3 --ranks-per-node $K --warmup 0"
STEPS=3; [ "$QUICK" -eq 1 ] && STEPS=1
LINK=6.25e6   # the emulated cluster's slow link: 50 Mbit/s (bench/bench_zpp_cluster.sh)
CONFIGS="s3: hier:--hierarchical qwz:--quantized-weights hpz:--hpz-partition-size_2 qgz:--quantized-gradients zpp:--quantized-weights_--hpz-partition-size_2_--quantized-gradients"

# node NAME: bytes per step that cross node 0's link (its ranks' inter bytes;
# the scalars, a loss and a norm, left out as the plan leaves them out)
node() { awk -v k=$K -v s="$(awk '!/^#/ { print $7; exit }' "$OUT/$1/run.csv")" \
    '!/^#/ && $1 < k && $2 != "scalars" && $3 == "all" { b += $9 } END { printf "%.0f\n", b / s }' "$OUT/$1/comm.csv"; }
# inter NAME RANK OP PHASE: a rank's inter-node bytes of an op in a phase (all runs' steps)
inter() { awk -v r="$2" -v op="$3" -v ph="$4" '!/^#/ && $1 == r && $2 == op && $3 == ph { printf "%.0f\n", $9; f = 1; exit } END { if (!f) print 0 }' "$OUT/$1/comm.csv"; }
predicted() { awk '!/^#/ && $3 == "all" && (($6 != -1 && $5 != $6) || ($10 != -1 && $9 != $10)) { bad = 1 } END { exit bad }' "$OUT/$1/comm.csv"; }
# plannode FILE [K]: the plan's bytes across each node's link per step (the
# hierarchical plan gives them per device: K devices a node)
plannode() { sed -n 's/.*sends all of its \([0-9]*\) bytes across.*/\1/p; s/.*: \([0-9]*\) bytes per step cross each node.s link.*/\1/p
    s/.*every device sends (M-1)\/N of each .* across, \([0-9]*\) bytes per step.*/\1 * '"${2:-1}"'/p' "$1" | awk '{ printf "%.0f\n", $1 * ($3 == "" ? 1 : $3) }'; }
plansteps() { sed -n 's/^step time: .* = \([0-9.e+-]*\) s.*/\1/p' "$1"; }
plan() { out=$1; shift
    "$ZS" plan "$@" >"$out" 2>&1 || { cat "$out" >&2; lab_die "this plan failed: zerosim plan $*"; }
}

# 1. the runs, and the plan of each
for c in $CONFIGS; do
    name=${c%%:*}; opts=$(echo "${c#*:}" | tr _ ' ')
    # shellcheck disable=SC2086 # opts and RUN are words
    lab_bytes $N "$name" $RUN $opts --steps $STEPS
    # shellcheck disable=SC2086
    plan "$OUT/plan_$name.txt" --arch gpt $DIMS --precision bf16 --stage 3 --dp $N --ranks-per-node $K $opts
    # shellcheck disable=SC2086
    plan "$OUT/plan_${name}_slow.txt" --arch gpt $DIMS --precision bf16 --stage 3 --dp $N --ranks-per-node $K $opts --bw-inter $LINK
done
P=$(lab_key s3 num_params); M=$((2 * P))
lab_num params "$(lab_fmt "$P")"; lab_num model_bytes "$(lab_fmt $M)"
lab_check "the nodes: the report sees 2 nodes of 2 ranks" grep -q '"node": 1' "$OUT/s3/report.json"
for c in $CONFIGS; do
    name=${c%%:*}
    lab_check "$name: every rank's bytes and inter-node bytes equal their prediction" predicted "$name"
done
s3=$(node s3)
echo "# config node0_bytes of_M of_stage3 paper_of_stage3 planned_step_s (slow link)" >"$OUT/links.dat"
for c in $CONFIGS; do
    name=${c%%:*}; b=$(node "$name")
    lab_num "node_$name" "$(lab_fmt "$b")"
    lab_num "ofm_$name" "$(lab_calc %.3f "$b / $M")"
    lab_num "frac_$name" "$(lab_calc %.3f "$b / $s3")"
    lab_check "$name: the plan's bytes across each node's link equal the run's node 0 ($b)" lab_eq "$(plannode "$OUT/plan_$name.txt" $K)" "$b"
    t=$(plansteps "$OUT/plan_${name}_slow.txt")
    lab_num "plan_ms_$name" "$(lab_calc %.1f "$t * 1000")"
    case $name in s3) paper=1 ;; qwz) paper=0.8333 ;; hpz) paper=0.6667 ;; qgz) paper=0.75 ;; zpp) paper=0.25 ;; *) paper=NaN ;; esac
    echo "$name $b $(lab_calc %.4f "$b / $M") $(lab_calc %.4f "$b / $s3") $paper $t" >>"$OUT/links.dat"
done
# the flat ring: the last rank of a node sends everything across, the first nothing
r0=$(($(inter s3 0 allgather all) + $(inter s3 0 reduce_scatter all)))
r1=$(($(inter s3 1 allgather all) + $(inter s3 1 reduce_scatter all)))
tot1=$(awk '!/^#/ && $1 == 1 && ($2 == "allgather" || $2 == "reduce_scatter") && $3 == "all" { b += $5 } END { printf "%.0f\n", b }' "$OUT/s3/comm.csv")
lab_num s3_rank1 "$(lab_fmt "$(lab_calc "$r1 / $STEPS")")"
lab_check "flat ring: rank 0 (first of node 0) sends nothing across, rank 1 (its last) all of its ring bytes" test "$r0 $r1" = "0 $tot1"
lab_check "hierarchical: every rank sends (M-1)/N of each buffer across, the same on each, and node 0 less than flat" \
    test "$(($(inter hier 0 allgather all) + $(inter hier 0 reduce_scatter all)))" = "$(($(inter hier 1 allgather all) + $(inter hier 1 reduce_scatter all)))" -a "$(node hier)" -lt "$s3"
lab_check "hpZ: the backward's gathers stay inside the node (0 bytes across), the forward's cross as without it" \
    test "$(inter hpz 1 allgather backward) $(inter hpz 1 allgather forward)" = "0 $(inter s3 1 allgather forward)"
fw=$(inter s3 1 allgather forward); fq=$(inter qwz 1 allgather forward)
lab_num qwz_fw "$(lab_calc %.4f "$fq / $fw")"
lab_check "qwZ: the forward's gathers cross as int8 with a scale per 256: between 0.5 and 0.52 of bf16's bytes" \
    awk -v r="$(lab_calc "$fq / $fw")" 'BEGIN { exit !(r > 0.5 && r < 0.52) }'
lab_check "qgZ: no reduce-scatter; its all-to-alls cross fewer bytes than stage 3's reduce-scatter" \
    test "$(inter qgz 1 reduce_scatter all)" = 0 -a "$(inter qgz 1 alltoall all)" -lt "$(inter s3 1 reduce_scatter all)"
lab_check "all three cross less than a quarter of stage 3's bytes" lab_lt "$(node zpp)" "$(lab_calc "$s3 / 4")"
ps3=$(plansteps "$OUT/plan_s3_slow.txt"); pzpp=$(plansteps "$OUT/plan_zpp_slow.txt")
lab_num plan_speedup "$(lab_calc %.2f "$ps3 / $pzpp")"
lab_check "on a 50 Mbit/s link the plan's step with all three is the shortest" \
    test "$(sort -k6 -g "$OUT/links.dat" | awk '!/^#/ { print $1; exit }')" = zpp
if [ "$QUICK" -eq 0 ]; then
    lab_check "hpZ: the parameters after every step are byte-identical to stage 3 (exact: only where they come from changes)" \
        lab_eq "$(lab_first_diff s3 hpz)" 0
    for c in $CONFIGS; do
        name=${c%%:*}; lab_num "~step_$name" "$(lab_calc %.1f "$(lab_median_step "$name") * 1000")"
    done
fi

# 2. ZeRO++'s example: an 18B fp16 GPT on 8 nodes of 8 (the plan, which a
# phantom run of 64 ranks matches to the byte: tests/test_hpz_qgz.sh)
G18="--arch gpt --layers 40 --hidden 6144 --heads 48 --seq 256 --vocab 50257 --micro-batch 1 --stage 3 --precision fp16 --dp 64 --ranks-per-node 8"
for c in s3: qwz:--quantized-weights hpz:--hpz-partition-size_8 qgz:--quantized-gradients \
    zpp:--quantized-weights_--hpz-partition-size_8_--quantized-gradients; do
    name=${c%%:*}; opts=$(echo "${c#*:}" | tr _ ' ')
    # shellcheck disable=SC2086
    plan "$OUT/plan18_$name.txt" $G18 $opts
done
P18=$(sed -n 's/^model: \([0-9]*\) parameters.*/\1/p' "$OUT/plan18_s3.txt")
lab_num p18 "$(lab_fmt "$P18")"
b18=$(plannode "$OUT/plan18_s3.txt")
for n in s3 qwz hpz qgz zpp; do
    b=$(plannode "$OUT/plan18_$n.txt")
    lab_num "gb18_$n" "$(lab_calc %.2f "$b / 1e9")"
    lab_num "ofm18_$n" "$(lab_calc %.3f "$b / (2 * $P18)")"
done
lab_num frac18 "$(lab_calc %.4f "$(plannode "$OUT/plan18_zpp.txt") / $b18")"
lab_check "18B on 8 nodes of 8: all three cross 0.75M or less (the paper's 0.75M of 3M), plain stage 3 about 3M" \
    awk -v a="$(lab_calc "$(plannode "$OUT/plan18_zpp.txt") / (2 * $P18)")" -v b="$(lab_calc "$b18 / (2 * $P18)")" \
    'BEGIN { exit !(a > 0.7 && a <= 0.75 && b > 2.9 && b < 3.1) }'

lab_plot links.gp links
lab_finish
