#!/bin/sh
# The CPU side of the CUDA backend, run in every build (no GPU needed):
# backend selection and its errors, the backend list, and the paths a GPU
# run takes above src/backend, through the unlisted "cpu-staged" backend (the
# CPU backend declaring its memory off-limits to host code, as CUDA's is):
# comm staging device buffers through host copies must give the CPU's bytes
# and the same ledger, compression is refused, and the oracle programs
# themselves run (against the CPU, every kernel must match exactly).
. "$(dirname "$0")/testlib.sh"
built=${ZS_BUILT_WITH_CUDA:-no}
MPIRUN="sh $HERE/mpirun.sh"
ORACLE_KERNELS=${ORACLE_KERNELS:-tests/oracle_kernels}
ORACLE_TRAIN=${ORACLE_TRAIN:-tests/oracle_train}

# one_line_error "what" "pattern" args...: non-zero exit (not a crash), one line on stderr
one_line_error() {
    what=$1; pattern=$2; shift 2
    "$ZS" "$@" >"$T/out" 2>"$T/err"
    rc=$?
    if [ "$rc" -eq 0 ] || [ "$rc" -gt 2 ]; then bad "$what: exit $rc"; cat "$T/err"; return; fi
    if [ "$(wc -l <"$T/err")" -ne 1 ]; then bad "$what: not one line on stderr"; cat "$T/err"; return; fi
    grep -q -- "$pattern" "$T/err" && ok || { bad "$what: message lacks '$pattern'"; cat "$T/err"; }
}

if [ "$built" = yes ]; then
    "$ZS" --version | grep -q "backends: cpu,ref,cuda" && ok || bad "--version does not list cuda"
    # no GPU: a clear error; with one, a run
    if "$ZS" train --backend cuda --steps 2 --quiet --report "$T/cuda.json" >"$T/out" 2>"$T/err"; then
        grep -q '"param_hash"' "$T/cuda.json" && ok || bad "--backend cuda ran but wrote no report"
    else
        [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q -- "--backend cuda" "$T/err" && ok ||
            { bad "--backend cuda without a GPU: unclear error"; cat "$T/err"; }
        echo "(no GPU here: $(cat "$T/err"))"
    fi
    # the CUDA libraries are in the module only, loaded on first use: a CPU
    # process does not pay their start-up (half a second of cuBLASLt's
    # initialisers), and a missing module is one line
    if command -v ldd >/dev/null 2>&1 && [ -f .libs/libzerosim.so ]; then
        ldd .libs/libzerosim.so | grep -q -E "libcuda|libcublas|libnccl" &&
            bad "libzerosim links the CUDA libraries: $(ldd .libs/libzerosim.so | grep -E 'cuda|cublas|nccl')" || ok
        ldd .libs/zerosim_cuda.so | grep -q libcublas && ok || bad "zerosim_cuda.so does not link cuBLAS"
    fi
    export ZEROSIM_CUDA_MODULE="$T/none.so"
    one_line_error "--backend cuda, module missing" \
        "cannot load the CUDA backend's module ($T/none.so)" train --backend cuda --steps 1
    unset ZEROSIM_CUDA_MODULE
else
    "$ZS" --version | grep -q "backends: cpu,ref)" && ok || bad "--version should list cpu and ref only"
    one_line_error "--backend cuda without CUDA" "--with-cuda" train --backend cuda --steps 1
fi
one_line_error "--backend bogus" "unknown backend 'bogus'" train --backend bogus --steps 1
"$ZS" --version | grep -q "cpu-staged" && bad "--version lists the test backend" || ok

printf '{"zero_optimization": {"reduce_bucket_size": 20000}}\n' >"$T/cfg.json"
# staging: the same bytes and the same ledger as the CPU (N = 1, and 3 for the ring's scratch)
for n in 1 3; do
    for st in 0 1 2 3; do
        for be in cpu cpu-staged; do
            $MPIRUN "$n" "$ZS" train --backend $be --stage $st --precision bf16 --steps 3 \
                --config "$T/cfg.json" --quiet --report "$T/$be.json" >/dev/null 2>"$T/err" ||
                { bad "N=$n stage $st $be failed"; cat "$T/err"; }
        done
        [ -n "$(key "$T/cpu.json" param_hash)" ] &&
            [ "$(key "$T/cpu.json" param_hash)" = "$(key "$T/cpu-staged.json" param_hash)" ] && ok ||
            bad "N=$n stage $st: staged param_hash differs"
        sed -n '/"comm"/,$p' "$T/cpu.json" | grep -v 'seconds\|_s_per_step' | grep -v '"bw' >"$T/c1"
        sed -n '/"comm"/,$p' "$T/cpu-staged.json" | grep -v 'seconds\|_s_per_step' | grep -v '"bw' >"$T/c2"
        [ -s "$T/c1" ] && cmp -s "$T/c1" "$T/c2" && ok || bad "N=$n stage $st: staged ledger differs"
    done
done
one_line_error "compression on a device backend" "not supported with --backend cpu-staged" \
    train --backend cpu-staged --stage 2 --compression int8 --steps 1

# the oracle programs, against the CPU itself: everything must match
ZS_TEST_BACKEND=cpu-staged "$ORACLE_KERNELS" >"$T/ok.txt" 2>&1 && ! grep -q FAIL "$T/ok.txt" &&
    [ "$(grep -c '^ok' "$T/ok.txt")" -ge 60 ] && ok || { bad "oracle_kernels on cpu-staged"; cat "$T/ok.txt"; }
ZS_TEST_BACKEND=cpu-staged $MPIRUN 2 "$ORACLE_TRAIN" >"$T/ot.txt" 2>&1 && ! grep -q FAIL "$T/ot.txt" &&
    [ "$(grep -c '^ok' "$T/ot.txt")" -ge 28 ] && ok || { bad "oracle_train on cpu-staged"; cat "$T/ot.txt"; }
finish
