#!/bin/sh
# Lab 6, planning a real run, with zerosim plan (closed forms and the step
# program counted from shapes, no MPI) and one phantom run: a 1.56 B GPT
# (GPT-2 XL's shape) on one 32 GB device and on 8; the largest model that
# fits a 32 GB device per stage on 64 devices (the ZeRO paper's Table 2);
# GPT-3 175B on 1024 devices of 32 and 80 GB, checked against a phantom run
# of the engine on 1024 simulated ranks. Writes plan_*.txt, fit.dat and
# plan.png into the output folder. --quick runs the same (it takes seconds).
. "$(dirname "$0")/../lib.sh"
lab_init "$0" "$@"

XL="--arch gpt --layers 48 --hidden 1600 --heads 25 --vocab 50257 --seq 1024 --micro-batch 1 --precision fp16"
GPT3="--layers 96 --hidden 12288 --heads 96 --seq 2048 --vocab 50257 --micro-batch 1 --precision bf16"

plan() { name=$1; shift
    echo "zerosim plan $*" >"$OUT/plan_$name.cmd"
    "$ZS" plan "$@" >"$OUT/plan_$name.txt" 2>&1 || { cat "$OUT/plan_$name.txt" >&2; lab_die "this plan failed: zerosim plan $*"; }
}
# pval NAME CATEGORY: the bytes of a category in a single plan's report
pval() { awk -v c="$2" '$1 == c && $2 ~ /^[0-9]+$/ { print $2; exit }' "$OUT/plan_$1.txt"; }
# fits NAME: yes or no
fits() { if grep -q '^fits: yes' "$OUT/plan_$1.txt"; then echo yes; else echo no; fi; }
gb() { lab_calc %.2f "$1 / 1e9"; }

# 1. GPT-2 XL's shape on one 32 GB device, without and with checkpointing
plan xl_1 $XL --stage 0 --dp 1 --device-memory 32GB
plan xl_1_ckpt $XL --stage 0 --dp 1 --device-memory 32GB --checkpoint-activations sqrt
psi=$(sed -n 's/^model: \([0-9]*\) parameters.*/\1/p' "$OUT/plan_xl_1.txt")
lab_num xl_psi "$(lab_fmt "$psi")"
lab_num xl_16psi "$(gb $((16 * psi)))"
for n in xl_1 xl_1_ckpt; do
    for c in params grads optimizer_master activations checkpoints comm_buffers workspace total; do
        lab_num "${n}_$c" "$(gb "$(pval $n $c)")"
    done
    lab_num "${n}_fits" "$(fits $n)"
done
ms=$(($(pval xl_1 params) + $(pval xl_1 grads) + 3 * $(pval xl_1 optimizer_master)))
lab_num xl_1_states "$(gb $ms)"
lab_check "1.56 B, stage 0, one device: model states = 2+2+2+12 bytes per parameter (grads p(Psi + S) at N = 1)" lab_eq "$ms" $((18 * psi))
lab_check "1.56 B on one 32 GB device: does not fit as it is, fits with sqrt checkpointing" \
    test "$(fits xl_1)-$(fits xl_1_ckpt)" = no-yes

# 2. the same model on 8 devices, every stage
plan xl_8 $XL --stage 0,1,2,3 --dp 8 --device-memory 32GB
awk '$2 == 8 && $1 ~ /^[0-3]$/ { print $1, $7, $NF }' "$OUT/plan_xl_8.txt" >"$OUT/xl_8.dat"
while read -r s tot fit; do lab_num "xl_8_s${s}_total" "$tot"; lab_num "xl_8_s${s}_fits" "$fit"; done <"$OUT/xl_8.dat"
lab_check "1.56 B on 8 x 32 GB: stage 0 does not fit, stages 1-3 do" \
    test "$(awk '{ printf "%s", $3 }' "$OUT/xl_8.dat")" = noyesyesyes

# 3. the largest model per stage, 64 devices of 32 GB (ZeRO paper, Table 2)
plan max_paper --params 7.5e9 --precision fp16 --convention paper --stage 0,1,2,3 --dp 64 --device-memory 32GB --max-model
plan max_zerosim --params 7.5e9 --precision fp16 --stage 0,1,2,3 --dp 64 --device-memory 32GB --max-model
for c in paper zerosim; do
    awk '$2 == 64 && $1 ~ /^[0-3]$/ { print $1, $NF }' "$OUT/plan_max_$c.txt" >"$OUT/max_$c.dat"
    while read -r s m; do lab_num "max_${c}_s$s" "$m"; done <"$OUT/max_$c.dat"
done
lab_check "the paper's Table 2 at N = 64: 2B, 7.6B, 14.4B, 128B" \
    test "$(awk '{ printf "%s ", $2 }' "$OUT/max_paper.dat")" = "2B 7.64B 14.4B 128B "
# the largest GPT of GPT-2 XL's width per stage on 8 devices
plan xl_max $XL --stage 0,1,2,3 --dp 8 --device-memory 32GB --max-model
awk '$2 == 8 && $1 ~ /^[0-3]$/ { print $1, $NF }' "$OUT/plan_xl_max.txt" >"$OUT/xl_max.dat"
while read -r s m; do lab_num "xl_max_s$s" "$m"; done <"$OUT/xl_max.dat"

# 4. GPT-3 175B on 1024 devices, stage 0-3, sqrt checkpointing, 32 GB
plan gpt3 --arch gpt $GPT3 --stage 0,1,2,3 --dp 1024 --device-memory 32GB --checkpoint-activations sqrt
awk '$2 == 1024 && $1 ~ /^[0-3]$/ { print $1, $3, $4, $5, $6, $7, $NF }' "$OUT/plan_gpt3.txt" >"$OUT/fit.dat"
# shellcheck disable=SC2034 # every column named, for the reader
while read -r s pa gr op ac tot fit; do
    lab_num "gpt3_t${s}_total" "$tot"; lab_num "gpt3_t${s}_fits" "$fit"
done <"$OUT/fit.dat"
plan gpt3_s3 --arch gpt $GPT3 --stage 3 --dp 1024 --device-memory 80GB --checkpoint-activations sqrt
for c in params grads optimizer_master activations checkpoints comm_buffers workspace total; do
    lab_num "gpt3_s3_$c" "$(gb "$(pval gpt3_s3 $c)")"
done
lab_num gpt3_psi "$(lab_fmt "$(sed -n 's/^model: \([0-9]*\) parameters.*/\1/p' "$OUT/plan_gpt3_s3.txt")")"
lab_num gpt3_s3_80_fits "$(fits gpt3_s3)"
lab_num gpt3_s3_live "$(lab_fmt "$(sed -n 's/.*stage 3 holds \([0-9]*\) live.*/\1/p' "$OUT/plan_gpt3_s3.txt")")"
lab_check "GPT-3 on 1024 x 32 GB: no stage fits; on 1024 x 80 GB stage 3 fits" \
    test "$(awk '{ printf "%s", $7 }' "$OUT/fit.dat")-$(fits gpt3_s3)" = nononono-yes

# the phantom run: the engine itself on 1024 simulated ranks, no storage
lab_phantom gpt3_phantom --world-size 1024 --stage 3 $GPT3 --checkpoint-activations sqrt --steps 2
same=0
for c in params grads optimizer activations checkpoints comm_buffers workspace; do
    a=$(lab_mem gpt3_phantom $c); b=$(pval gpt3_s3 $c)
    [ "$c" = optimizer ] && b=$((3 * $(pval gpt3_s3 optimizer_master)))
    lab_eq "$a" "$b" && same=$((same + 1))
done
lab_check "GPT-3: the phantom run's peak of each of 7 categories = the plan's, byte for byte" lab_eq $same 7
pt=$(lab_mem gpt3_phantom total)
lab_num gpt3_phantom_total "$(lab_fmt "$pt")"
lab_num gpt3_plan_total "$(lab_fmt "$(pval gpt3_s3 total)")"
lab_num gpt3_total_diff "$(lab_fmt $(($(pval gpt3_s3 total) - pt)))"

# 5. tensor parallelism (Megatron-LM): 8-way TP with sequence parallelism,
# 128-way data parallelism (the vocabulary padded to 50304, divisible by 8)
plan gpt3_tp --arch gpt $(echo "$GPT3" | sed 's/50257/50304/') --stage 3 --dp 128 --tp 8 --sequence-parallel \
    --device-memory 32GB --checkpoint-activations sqrt
lab_num gpt3_tp_total "$(gb "$(pval gpt3_tp total)")"
lab_num gpt3_tp_activations "$(gb "$(pval gpt3_tp activations)")"
lab_num gpt3_tp_fits "$(fits gpt3_tp)"
# traffic per device per step (GB) and the planner's step time (s)
for n in gpt3_s3 gpt3_tp; do
    lab_num "${n}_traffic" "$(sed -n 's/.*; total [0-9]* bytes (\([0-9.]*\) GB).*/\1/p' "$OUT/plan_$n.txt")"
    lab_num "${n}_step" "$(sed -n 's/^step time: .* = \([0-9.]*\) s\( (.*)\)\{0,1\}$/\1/p' "$OUT/plan_$n.txt")"
    lab_num "${n}_compute" "$(sed -n 's/^step time: compute \([0-9.]*\) s .*/\1/p' "$OUT/plan_$n.txt")"
done

lab_plot plan.gp plan
lab_finish
