#!/bin/sh
# ZeRO stages 0-3 give byte-identical parameters after every step, for
# N = 1..4 ranks, in fp32, bf16 and fp16, with clipping on, gradient
# accumulation, several gradient buckets and a parameter count that no N
# divides (so the last shard is padded).
. "$(dirname "$0")/testlib.sh"

# small buckets, so that each stage reduces several of them
cat >"$T/zero.json" <<'JSON'
{
  "gradient_clipping": 0.5,
  "zero_optimization": {
    "stage": 0,
    "reduce_bucket_size": 5000,
    "allgather_bucket_size": 7000,
    "stage3_max_live_parameters": 40000,
    "stage3_prefetch_bucket_size": 20000
  }
}
JSON

MODEL="--layers 2 --hidden 25 --heads 5 --seq 12 --vocab 31 --micro-batch 2 --grad-accum 2 --steps 4 --warmup 0 --lr 1e-2"
for n in ${ZS_TEST_RANKS:-1 2 3 4}; do
    for prec in ${ZS_TEST_PRECISIONS:-fp32 bf16 fp16}; do
        ref=""
        for stage in 0 1 2 3; do
            out="$T/r-$n-$prec-$stage.json"
            if ! sh "$HERE/mpirun.sh" "$n" "$ZS" train --config "$T/zero.json" $MODEL --precision "$prec" \
                 --stage "$stage" --quiet --report "$out" >"$T/log" 2>&1; then
                bad "N=$n $prec stage $stage failed"; cat "$T/log"; continue
            fi
            h=$(hashes "$out")
            [ -n "$h" ] || { bad "N=$n $prec stage $stage: no param_hashes"; continue; }
            if [ -z "$ref" ]; then ref=$h; ok; continue; fi
            [ "$h" = "$ref" ] && ok || bad "N=$n $prec stage $stage differs from stage 0: $h vs $ref"
        done
        # every step changed the parameters (the hashes are not all equal)
        first=$(echo "$ref" | cut -d, -f1 | tr -d '"[:')
        last=$(echo "$ref" | tr -d ']"' | awk -F, '{print $NF}')
        [ "$first" != "$last" ] && ok || bad "N=$n $prec: parameters did not change"
    done
done
# the padding was exercised: no N in 2..4 divides the parameter count
np=$(sed -n 's/^  "num_params": \([0-9]*\),$/\1/p' "$(ls "$T"/r-*-fp32-0.json | head -1)")
for n in 2 3 4; do
    [ $((np % n)) -ne 0 ] && ok || bad "num_params $np divisible by $n: padding untested"
done
finish
