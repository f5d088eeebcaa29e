#!/bin/sh
# The portable backend's reference hashes, unmasked: each fixed run of
# tests/ref_hashes.txt (--backend ref --deterministic) must print the
# param_hash recorded there, on any machine and build (docs/portable.md).
# On a mismatch, tests/check_ref --print-kernel-hashes against
# tests/ref_kernel_hashes.txt names the first kernel whose bytes differ.
# Fast tier: the gpt and mlp runs (a few seconds); full: every run.
. "$(dirname "$0")/testlib.sh"
CHECK_REF=${CHECK_REF:-$(dirname "$ZS")/tests/check_ref}
if zs_fast; then
    runs="gpt mlp"
else
    runs=
fi
# shellcheck disable=SC2086 # the names are words
sh "$HERE/ref_hashes.sh" "$ZS" "$T/runs" $runs >"$T/got.txt"
mismatch=0
while read -r name got; do
    want=$(awk -v r="$name" '$1 == r { print $2 }' "$HERE/ref_hashes.txt")
    if [ "$got" = "$want" ]; then
        ok
    else
        bad "$name: param_hash $got, recorded $want (tests/ref_hashes.txt)"
        grep -i "param_hash\|error\|zerosim:" "$T/runs/$name.log" | tail -n 3 | sed 's/^/  | /'
        mismatch=1
    fi
done <"$T/got.txt"
[ -s "$T/got.txt" ] || bad "tests/ref_hashes.sh ran nothing"
if [ "$mismatch" = 1 ]; then
    if [ -x "$CHECK_REF" ] && "$CHECK_REF" --print-kernel-hashes >"$T/kernels.txt" 2>&1; then
        first=$(grep -v '^#' "$HERE/ref_kernel_hashes.txt" | diff - "$T/kernels.txt" |
            sed -n 's/^> \([a-z_0-9]*\) .*/\1/p' | head -n 1)
        echo "first kernel whose bytes differ from tests/ref_kernel_hashes.txt: ${first:-none (the kernels agree: look above the backend, e.g. zerosim compare on --dump-dir dumps)}"
    else
        echo "($CHECK_REF not built: make tests/check_ref, then rerun, to name the kernel)"
    fi
fi
finish
