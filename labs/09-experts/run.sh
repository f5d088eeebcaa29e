#!/bin/sh
# Lab 9, experts: a 4-block GPT (hidden 64, 4 heads, sequence 32, vocabulary
# 64, micro-batch 8) whose blocks 1 and 3 are mixtures of E = 4 expert MLPs
# (top-1, capacity factor 1): the parameters against the dense model, the
# router's load (tokens routed to and kept by each expert, of a one-rank
# run), the all-to-all bytes of expert parallelism on 4 ranks, and the model
# states per rank with experts parallel, with ZeRO, and with both. Writes
# experts.dat and experts.png. Full: real runs, 3 steps; --quick: phantom
# runs for the bytes (the same bytes), and the one-rank run for the load.
. "$(dirname "$0")/../lib.sh"
lab_init "$0" "$@"

B=8; S=32; C=64; E=4; L=4
MOE="--layers $L --moe-experts $E --moe-every 2 --warmup 0"
STEPS=3; [ "$QUICK" -eq 1 ] && STEPS=1

# 1. parameters: dense against MoE (one rank, phantom: no data needed)
lab_phantom dense --world-size 1 --layers $L --warmup 0 --steps 1
lab_phantom moe --world-size 1 $MOE --steps 1
pd=$(($(lab_mem dense params) / 4)); pm=$(($(lab_mem moe params) / 4))
lab_num dense_params "$(lab_fmt $pd)"; lab_num moe_params "$(lab_fmt $pm)"
expert=$((8 * C * C + 5 * C))
lab_num expert_params "$(lab_fmt $expert)"
lab_check "MoE adds (E - 1) experts of 8C^2 + 5C and a router of E x C in each of its 2 blocks" \
    lab_eq "$pm" $((pd + 2 * ((E - 1) * expert + E * C)))
lab_num active_params "$(lab_fmt $((pd + 2 * E * C)))"
lab_num moe_over_dense "$(lab_calc %.2f "$pm / $pd")"

# 2. the router's load: a real one-rank run (the gates need real numbers)
lab_run 1 route $MOE --steps 3
sed -n '/"moe_routing"/,/^  \]/p' "$OUT/route/report.json" | tr -d ' ,' | awk '
    /^"block":/ { sub(/"block":/, ""); b = $0 } /^"tokens":/ { sub(/"tokens":/, ""); t = $0 }
    /^"capacity":/ { sub(/"capacity":/, ""); c = $0 }
    /^"routed":\[/ { m = "r"; n = 0; next } /^"kept":\[/ { m = "k"; n = 0; next } /^\]/ { m = ""; next }
    m != "" && /^[0-9]+$/ { v[m, n++] = $0; next }
    /^"dropped":/ { sub(/"dropped":/, ""); printf "%s %s %s %s", b, t, c, $0
        for (i = 0; i < n; i++) printf " %s %s", v["r", i], v["k", i]; printf "\n" }' >"$OUT/load.txt"
[ "$(wc -l <"$OUT/load.txt")" -eq 2 ] || lab_die "no moe_routing for the two MoE blocks in route/report.json"
echo "# expert routed kept (block 1 of the one-rank run's last micro-batch)" >"$OUT/experts.dat"
read -r blk tok cap drop r0 k0 r1 k1 r2 k2 r3 k3 <"$OUT/load.txt"
[ "$blk" = 1 ] || lab_die "the first MoE block of route/report.json is $blk, not block 1"
lab_num tokens "$tok"; lab_num capacity "$cap"
lab_check "capacity = ceil(tokens / E x 1.0) = $((B * S / E))" lab_eq "$cap" $((B * S / E))
lab_check "every token is routed to one expert (top-1): the routed sum to $tok" lab_eq $((r0 + r1 + r2 + r3)) "$tok"
lab_check "kept = min(routed, capacity) for each expert, and dropped = routed - kept" \
    test "$(awk -v c="$cap" -v d="$drop" -v l="$r0 $k0 $r1 $k1 $r2 $k2 $r3 $k3" 'BEGIN { split(l, a, " "); s = 0
        for (i = 1; i <= 8; i += 2) { if (a[i + 1] != (a[i] < c ? a[i] : c)) bad = 1; s += a[i] - a[i + 1] }
        print (!bad && s == d) ? "y" : "n" }')" = y
e=0
for rk in "$r0 $k0" "$r1 $k1" "$r2 $k2" "$r3 $k3"; do
    set -- $rk; echo "$e $1 $2" >>"$OUT/experts.dat"
    lab_num "~routed_$e" "$1"; lab_num "~kept_$e" "$2"; e=$((e + 1))
done
lab_num "~dropped" "$drop"

# 3. expert parallelism on 4 ranks: the all-to-alls
for p in 2 4; do
    lab_bytes 4 "ep$p" $MOE --stage 0 --ep $p --ep-layout deepspeed --steps $STEPS
    steps=$(awk '!/^#/ { print $7; exit }' "$OUT/ep$p/run.csv")
    calls=$(awk -v s="$steps" '!/^#/ && $1 == 0 && $2 == "ep" && $3 == "alltoall" { print $4 / s }' "$OUT/ep$p/comm_groups.csv")
    bytes=$(awk -v s="$steps" '!/^#/ && $1 == 0 && $2 == "ep" && $3 == "alltoall" { printf "%.0f\n", $5 / s }' "$OUT/ep$p/comm_groups.csv")
    lab_num "a2a_calls_ep$p" "$calls"; lab_num "a2a_bytes_ep$p" "$(lab_fmt "$bytes")"
    lab_check "--ep $p: 4 all-to-alls per MoE block (2 forward, 2 backward), each (P-1)/P of E x capacity x C x 4 bytes" \
        test "$calls $bytes" = "8 $(lab_calc "8 * ($p - 1) / $p * $E * $cap * $C * 4")"
done
lab_num a2a_buffer "$(lab_fmt $((E * cap * C * 4)))"

# 4. model states per rank on 4 ranks: experts everywhere (stage 0), experts
# parallel (--ep 4), ZeRO-1 with them, ZeRO-3 without them
echo "# config params grads optimizer (bytes, rank 0)" >"$OUT/states.dat"
for cfg in "s0 0 1" "ep4 0 4" "ep4_s1 1 4" "s3 3 1"; do
    set -- $cfg; name=$1; st=$2; p=$3
    if [ "$name" != ep4 ]; then
        opt=""; [ "$p" -gt 1 ] && opt="--ep $p --ep-layout deepspeed"
        lab_bytes 4 "$name" $MOE --stage "$st" $opt --steps $STEPS
    fi
    pp=$(lab_mem "$name" params); gg=$(lab_mem "$name" grads); oo=$(lab_mem "$name" optimizer)
    echo "$name $pp $gg $oo" >>"$OUT/states.dat"
    lab_num "${name}_states" "$(lab_fmt $((pp + gg + oo)))"
    lab_check "$name: every category equals its prediction on every rank" \
        awk '!/^#/ && $4 != -1 && $3 != $4 { bad = 1 } END { exit bad }' "$OUT/$name/memory.csv"
done
s0=$(awk '$1 == "s0" { print $2 + $3 + $4 }' "$OUT/states.dat")
for n in ep4 ep4_s1 s3; do
    lab_num "${n}_saving" "$(lab_calc %.2f "$s0 / $(awk -v n=$n '$1 == n { print $2 + $3 + $4 }' "$OUT/states.dat")")"
done
lab_check "ZeRO-3 alone holds less per rank than expert parallelism alone" \
    lab_lt "$(awk '$1 == "s3" { print $2 + $3 + $4 }' "$OUT/states.dat")" "$(awk '$1 == "ep4" { print $2 + $3 + $4 }' "$OUT/states.dat")"
lab_plot experts.gp experts "cap = $cap"
lab_finish
