#!/bin/sh
# Replay every input the fuzzers ever broke zerosim with (fuzz/regress/) and
# the seed corpus (fuzz/corpus/) through the fuzz targets, built as plain
# programs (fuzz/replay_*: no clang, no libFuzzer). A crash fails the test;
# under --enable-sanitizers, so does any sanitizer report.
. "$(dirname "$0")/testlib.sh"

B=$(dirname "$ZS")/fuzz
S=$(cd "$HERE/../fuzz" && pwd)
for t in config train_args plan_args safetensors weights tokens manifest qfile zcfile calibration st_index; do
    set -- "$S/corpus/$t"
    [ -d "$S/regress/$t" ] && set -- "$S/regress/$t" "$@"
    # from an empty folder: the train target reads --config names it is given
    if (cd "$T" && "$B/replay_$t" "$@") >"$T/out" 2>"$T/err"; then
        ok
        echo "$t: $(tail -1 "$T/out")"
    else
        bad "$t: replay failed (exit $?)"; tail -20 "$T/err"
    fi
done
finish
