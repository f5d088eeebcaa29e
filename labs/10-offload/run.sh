#!/bin/sh
# Lab 10, beyond the device: ZeRO-Offload's host tier and ZeRO-Infinity's
# nvme tier on the default GPT (2 blocks, hidden 64, 106,240 parameters),
# bf16, 2 ranks: stage 2 as it is, with the optimizer on the host
# (--offload-optimizer cpu), in files (--offload-optimizer nvme), and stage
# 3 with the parameters in files too (--offload-param nvme). The bytes of
# each tier and each transfer against the closed forms, the parameters
# byte-identical with and without offload, the plan of the same runs, and
# the 13B-on-one-32-GB example of the ZeRO-Offload paper (zerosim plan).
# Writes tiers.dat and tiers.png. Full: real runs of 6 steps (their step
# times shown); --quick: 1 step (the same bytes per step).
. "$(dirname "$0")/../lib.sh"
lab_init "$0" "$@"

N=2
DIMS="--layers 2 --hidden 64 --heads 4 --seq 32 --vocab 64 --micro-batch 8"
RUN="$DIMS --precision bf16 --warmup 0"
STEPS=6; [ "$QUICK" -eq 1 ] && STEPS=1
NV=$OUT/nvme-files
rm -rf "$NV"; mkdir -p "$NV"

# per NAME RANK OP: a rank's bytes per step of an op (comm.csv), and its
# prediction (perpred)
per() { awk -v r="$2" -v op="$3" -v s="$STEPS" '!/^#/ && $1 == r && $2 == op && $3 == "all" { printf "%.0f\n", $5 / s; f = 1; exit } END { if (!f) print 0 }' "$OUT/$1/comm.csv"; }
perpred() { awk -v r="$2" -v op="$3" -v s="$STEPS" '!/^#/ && $1 == r && $2 == op && $3 == "all" { printf "%.0f\n", $6 / s; f = 1; exit } END { if (!f) print -1 }' "$OUT/$1/comm.csv"; }
# mem0 NAME CATEGORY: rank 0's peak bytes of a category, 0 when absent
mem0() { awk -v c="$2" '!/^#/ && $1 == 0 && $2 == c { print $3; f = 1; exit } END { if (!f) print 0 }' "$OUT/$1/memory.csv"; }
# tier NAME PREFIX: rank 0's bytes in a tier (host_, nvme_) summed
tier() { awk -v p="$2" '!/^#/ && $1 == 0 && index($2, p) == 1 { s += $3 } END { printf "%.0f\n", s }' "$OUT/$1/memory.csv"; }
allpred() { awk '!/^#/ && $4 != -1 && $3 != $4 { bad = 1 } END { exit bad }' "$OUT/$1/memory.csv" &&
    awk '!/^#/ && $3 == "all" && $6 != -1 && $5 != $6 { bad = 1 } END { exit bad }' "$OUT/$1/comm.csv"; }

# 1. the four runs (real: the parameters' hashes are compared)
lab_run $N base $RUN --stage 2 --steps $STEPS
lab_run $N cpu $RUN --stage 2 --offload-optimizer cpu --steps $STEPS
lab_run $N nvme $RUN --stage 2 --offload-optimizer nvme --nvme-path "$NV" --steps $STEPS
lab_run $N inf $RUN --stage 3 --offload-optimizer nvme --offload-param nvme --nvme-path "$NV" --steps $STEPS
lab_run $N s3 $RUN --stage 3 --steps $STEPS
P=$(lab_key base num_params)
S=$((P / N))
lab_num params "$(lab_fmt "$P")"; lab_num shard "$(lab_fmt $S)"
lab_check "the model divides evenly: no padding ($P parameters, $S per rank)" lab_eq "$(lab_key base padded_params)" "$P"
for n in cpu nvme; do
    lab_check "$n: the parameters after every step are byte-identical to stage 2 without offload" lab_eq "$(lab_first_diff base $n)" 0
done
lab_check "inf: the parameters after every step are byte-identical to stage 3 without offload" lab_eq "$(lab_first_diff s3 inf)" 0
for n in base cpu nvme inf s3; do
    lab_check "$n: every tier's bytes and every transfer equal their prediction on every rank" allpred $n
done
[ -z "$(find "$NV" -type f)" ] && nvleft=none || nvleft=some
lab_check "the nvme files are removed when the runs end" test "$nvleft" = none

# 2. the tiers, rank 0, against the closed forms (S elements, bf16: 2 bytes)
dev_opt=$(($(mem0 base optimizer_master) + $(mem0 base optimizer_m) + $(mem0 base optimizer_v)))
lab_num base_opt "$(lab_fmt $dev_opt)"
lab_check "without offload the device holds master, m and v of its shard: 3 x 4 x S = 12S" lab_eq "$dev_opt" $((12 * S))
lab_num base_params "$(lab_fmt "$(mem0 base params)")"
lab_num cpu_dev_opt "$(lab_fmt $(($(mem0 cpu optimizer_master) + $(mem0 cpu optimizer_m) + $(mem0 cpu optimizer_v))))"
for c in optimizer_master optimizer_m optimizer_v params grads; do
    lab_num "cpu_host_$c" "$(lab_fmt "$(mem0 cpu "host_$c")")"
done
lab_check "cpu: the host holds master, m and v (4S each, fp32) and the shard's gradients and parameters (2S each, bf16)" \
    test "$(mem0 cpu host_optimizer_master) $(mem0 cpu host_optimizer_m) $(mem0 cpu host_optimizer_v) $(mem0 cpu host_grads) $(mem0 cpu host_params)" = \
    "$((4 * S)) $((4 * S)) $((4 * S)) $((2 * S)) $((2 * S))"
lab_check "cpu: the device holds no optimizer state" lab_eq "$(mem0 cpu optimizer)" 0
lab_num cpu_host "$(lab_fmt "$(tier cpu host_)")"
lab_num cpu_d2h "$(lab_fmt "$(per cpu 0 d2h)")"; lab_num cpu_h2d "$(lab_fmt "$(per cpu 0 h2d)")"
lab_check "cpu: per step each rank sends its reduced gradients down (2S) and its updated parameters up (2S)" \
    test "$(per cpu 0 d2h) $(per cpu 0 h2d) $(per cpu 1 d2h) $(per cpu 1 h2d)" = "$((2 * S)) $((2 * S)) $((2 * S)) $((2 * S))"
lab_num cpu_d2h_sum "$(lab_fmt $(($(per cpu 0 d2h) + $(per cpu 1 d2h))))"
lab_num params_2m "$(lab_fmt $((2 * P)))"
lab_check "ZeRO-Offload's minimum: 2M bytes down and 2M up per step over all ranks (M = $P parameters, 2 bytes each)" \
    test "$(($(per cpu 0 d2h) + $(per cpu 1 d2h))) $(($(per cpu 0 h2d) + $(per cpu 1 h2d)))" = "$((2 * P)) $((2 * P))"
lab_num nvme_nvme "$(lab_fmt "$(tier nvme nvme_)")"
lab_num nvme_host "$(lab_fmt "$(tier nvme host_)")"
lab_num nvme_workspace "$(lab_fmt "$(mem0 nvme host_workspace)")"
piece=$S; [ "$piece" -gt 262144 ] && piece=262144
lab_num piece "$(lab_fmt $piece)"
lab_check "nvme: the files hold master, m and v (12S); the host two buffers of min(S, 262,144) elements of each, fp32: 2 x 3 x 4 x $piece" \
    test "$(tier nvme nvme_) $(mem0 nvme host_workspace)" = "$((12 * S)) $((24 * piece))"
lab_num nvme_read "$(lab_fmt "$(per nvme 0 nvme_read)")"; lab_num nvme_write "$(lab_fmt "$(per nvme 0 nvme_write)")"
lab_check "nvme: per step the optimizer reads and writes all of its states once (12S each way), and the transfers stay 2S" \
    test "$(per nvme 0 nvme_read) $(per nvme 0 nvme_write) $(per nvme 0 d2h) $(per nvme 0 h2d)" = "$((12 * S)) $((12 * S)) $((2 * S)) $((2 * S))"
lab_num inf_nvme_params "$(lab_fmt "$(mem0 inf nvme_params)")"
lab_num s3_params "$(lab_fmt "$(mem0 s3 params)")"; lab_num inf_params "$(lab_fmt "$(mem0 inf params)")"
lab_check "inf: the parameter shard (2S) is in the file, and the device holds fewer parameter bytes than stage 3 without offload" \
    test "$(mem0 inf nvme_params)" = $((2 * S)) -a "$(mem0 inf params)" -lt "$(mem0 s3 params)"
for r in 0 1; do
    lab_num "inf_h2d_$r" "$(lab_fmt "$(per inf $r h2d)")"
    lab_num "inf_read_$r" "$(lab_fmt "$(per inf $r nvme_read)")"
done
lab_num inf_d2h "$(lab_fmt "$(per inf 0 d2h)")"
lab_num inf_write "$(lab_fmt "$(per inf 0 nvme_write)")"
lab_check "inf: each gather reads this rank's part from its file and sends it up: more h2d than 2S, each rank its own (predicted)" \
    test "$(per inf 0 h2d)" -gt $((2 * S)) -a "$(per inf 0 h2d)" != "$(per inf 1 h2d)" -a \
    "$(per inf 0 h2d) $(per inf 1 h2d)" = "$(perpred inf 0 h2d) $(perpred inf 1 h2d)"
echo "# config device host nvme (rank 0's peak bytes per tier; device: every category)" >"$OUT/tiers.dat"
for n in base cpu nvme inf; do
    echo "$n $(mem0 $n total) $(tier $n host_) $(tier $n nvme_)" >>"$OUT/tiers.dat"
done
if [ "$QUICK" -eq 0 ]; then
    for n in base cpu nvme inf s3; do lab_num "~step_$n" "$(lab_calc %.3f "$(lab_median_step $n) * 1000")"; done
fi

# 3. the plan of the same runs: the closed forms of the planner, no MPI
plan() { name=$1; shift
    echo "zerosim plan $*" >"$OUT/plan_$name.cmd"
    "$ZS" plan "$@" >"$OUT/plan_$name.txt" 2>&1 || { cat "$OUT/plan_$name.txt" >&2; lab_die "this plan failed: zerosim plan $*"; }
}
jkey() { sed -n "s/^ *\"$2\": \([0-9.e+-]*\),\{0,1\}$/\1/p" "$OUT/plan_$1.txt" | head -1; }
plan small_cpu --arch gpt $DIMS --dp $N --precision bf16 --stage 2 --offload-optimizer cpu --json
plan small_inf --arch gpt $DIMS --dp $N --precision bf16 --stage 3 --offload-optimizer nvme --offload-param nvme --json
lab_check "the plan's transfers per step equal rank 0's run (cpu: d2h, h2d)" \
    test "$(jkey small_cpu d2h_bytes_per_step) $(jkey small_cpu h2d_bytes_per_step)" = "$(per cpu 0 d2h) $(per cpu 0 h2d)"
lab_check "the plan's transfers per step equal rank 0's run (inf: d2h, h2d, nvme read, write)" \
    test "$(jkey small_inf d2h_bytes_per_step) $(jkey small_inf h2d_bytes_per_step) $(jkey small_inf nvme_read_bytes_per_step) $(jkey small_inf nvme_write_bytes_per_step)" = \
    "$(per inf 0 d2h) $(per inf 0 h2d) $(per inf 0 nvme_read) $(per inf 0 nvme_write)"

# 4. 13B parameters on one 32 GB device (ZeRO-Offload's first claim)
B13="--params 13e9 --stage 2 --precision fp16 --device-memory 32GB --host-memory 512GB"
plan b13 $B13
plan b13_cpu $B13 --offload-optimizer cpu
plan b13_nvme $B13 --offload-optimizer nvme
gb() { lab_calc %.3f "$1 / 1e9"; }
tot() { awk '$1 == "total" && $2 ~ /^[0-9]+$/ { print $2; exit }' "$OUT/plan_$1.txt"; }
fits() { if grep -q '^fits: yes' "$OUT/plan_$1.txt"; then echo yes; else echo no; fi; }
pernode() { sed -n 's/^host memory per node: \([0-9.]*\) GB.*/\1/p' "$OUT/plan_$1.txt"; }
offs() { sed -n 's/^  offload: \([0-9.e+-]*\) s in the step.*/\1/p' "$OUT/plan_$1.txt"; }
lab_num b13_total "$(gb "$(tot b13)")"; lab_num b13_fits "$(fits b13)"
lab_num b13_cpu_device "$(gb "$(tot b13_cpu)")"; lab_num b13_cpu_fits "$(fits b13_cpu)"
lab_num b13_cpu_host "$(pernode b13_cpu)"; lab_num b13_nvme_host "$(pernode b13_nvme)"
lab_num b13_nvme_files "$(gb "$(awk '/^nvme memory/ { f = 1 } f && $1 == "total" { print $2; exit }' "$OUT/plan_b13_nvme.txt")")"
lab_num b13_cpu_s "$(offs b13_cpu)"; lab_num b13_nvme_s "$(offs b13_nvme)"
lab_check "13B in fp16 on one 32 GB device, stage 2: 16 bytes a parameter (208 GB) do not fit; with the optimizer on the host 2 bytes a parameter (26 GB) do" \
    test "$(tot b13) $(fits b13) $(tot b13_cpu) $(fits b13_cpu)" = "208000000000 no 26000000000 yes"
lab_check "the host tier holds 16 bytes a parameter: master, m, v (12) and the 16-bit gradients and parameters (4): 208 GB" test "$(pernode b13_cpu)" = 208.000
lab_check "the offload's time: 2 x 26 GB over 25 GB/s = 2.08 s; with nvme plus 2 x 156 GB at 3 GB/s" \
    test "$(offs b13_cpu) $(offs b13_nvme)" = "2.08 106.1"

lab_plot tiers.gp tiers
lab_finish
