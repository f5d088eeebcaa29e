#!/bin/sh
# Run the fixed runs of tests/ref_hashes.txt with --backend ref
# --deterministic and print "NAME param_hash" for each (or "NAME failed").
#     sh tests/ref_hashes.sh ZEROSIM WORKDIR [NAME...]   (default: every run)
# Used by tests/test_ref_hashes.sh and scripts/portable-check.sh.
set -u
ZS=$1 W=$2
shift 2
want=" $* "
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$W" || exit 2
grep -v '^#' "$HERE/ref_hashes.txt" | while read -r name _ ranks opts; do
    [ -n "$name" ] || continue
    if [ "$want" != "  " ]; then
        case $want in *" $name "*) ;; *) continue ;; esac
    fi
    if [ "$ranks" = 1 ]; then
        set -- "$ZS"
    else
        set -- sh "$HERE/mpirun.sh" "$ranks" "$ZS"
    fi
    # shellcheck disable=SC2086 # the options are words
    if "$@" train --backend ref --deterministic $opts >"$W/$name.log" 2>&1 </dev/null; then
        h=$(sed -n 's/^param_hash \([0-9a-f]*\),.*/\1/p' "$W/$name.log" | tail -n 1)
        echo "$name ${h:-missing}"
    else
        echo "$name failed"
    fi
done
