#!/bin/sh
# The CUDA backend against the CPU backend (needs a GPU; skips with 77 and a
# line saying why without one, or in a build without CUDA): every kernel
# (tests/oracle_kernels.c states the tolerances), then a few training steps
# of the GPT at stages 0-3 in fp32 and bf16 on 1 and 2 ranks
# (tests/oracle_train.c): losses and parameters within tolerance of the
# CPU's, stages byte-identical with each other, the same comm ledger.
. "$(dirname "$0")/testlib.sh"
MPIRUN="sh $HERE/mpirun.sh"
ORACLE_KERNELS=${ORACLE_KERNELS:-tests/oracle_kernels}
ORACLE_TRAIN=${ORACLE_TRAIN:-tests/oracle_train}
export ZS_TEST_BACKEND=cuda

"$ORACLE_KERNELS" >"$T/k.txt" 2>&1
rc=$?
if [ "$rc" -eq 77 ]; then
    cat "$T/k.txt"
    exit 77
fi
cat "$T/k.txt"
[ "$rc" -eq 0 ] && ok || bad "kernels against the CPU"
for n in 1 2; do
    $MPIRUN "$n" "$ORACLE_TRAIN" >"$T/t.txt" 2>&1
    rc=$?
    cat "$T/t.txt"
    [ "$rc" -eq 0 ] && ok || bad "training against the CPU at N=$n (exit $rc)"
done
finish
