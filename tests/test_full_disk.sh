#!/bin/sh
# A full disk under MPI: --report and --csv on a one-page tmpfs. The job
# exits non-zero on every rank with one clear line from rank 0 (the writer)
# naming the file and "No space left on device", and leaves no file, whole
# or partial, on the full disk. Needs root (mount); skipped (77) otherwise.
. "$(dirname "$0")/testlib.sh"

mkdir "$T/full"
if ! mount -t tmpfs -o size=4k zerosim-full "$T/full" 2>"$T/err"; then
    echo "SKIP: cannot mount a small tmpfs to fill: $(head -1 "$T/err") (needs root)"
    exit 77
fi
trap 'umount "$T/full" 2>/dev/null; rm -rf "$T"' EXIT
MODEL="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 32 --micro-batch 2 --steps 3"

for out in "--report $T/full/r.json" "--csv $T/full/csv"; do
    # shellcheck disable=SC2086 # out is two words
    sh "$HERE/mpirun.sh" 2 "$ZS" train $MODEL --silent $out </dev/null >"$T/log" 2>&1
    rc=$?
    [ "$rc" -ne 0 ] && ok || bad "$out: exit status 0 on a full disk"
    grep -q "^zerosim: cannot write .*$T/full/.*: No space left on device; free some space" "$T/log" &&
        ok || { bad "$out: no line naming the full disk"; cat "$T/log"; }
    [ "$(grep -c . "$T/log")" -eq 1 ] && ok || { bad "$out: more than one line"; cat "$T/log"; }
    left=$(find "$T/full" -type f | tr '\n' ' ')
    [ -z "$left" ] && ok || bad "$out: files left on the full disk: $left"
    echo "$out: exit $rc; $(cat "$T/log")"
done
finish
