# Shared by the shell tests, which source it first:
#     . "$(dirname "$0")/testlib.sh"
# It sets ZS (the zerosim program), HERE (the tests' folder), T (a temporary
# folder removed at exit), one BLAS thread per process, the pass and fail
# counters with ok and bad, helpers that read JSON reports, and finish.
set -u
# shellcheck disable=SC2034 # ZS and HERE are for the tests that source this
ZS=${ZEROSIM:-./zerosim}
HERE=$(dirname "$0")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OPENBLAS_NUM_THREADS=1
fails=0
passes=0
ok() { passes=$((passes + 1)); }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# hashes FILE: the "param_hashes" array of a report, on one line
hashes() { sed -n '/"param_hashes"/,/\]/p' "$1" | tr -d ' \n'; }
# train_hashes NAME N ARGS...: zerosim train $M ARGS on N ranks, its report
# in $T/NAME.json, its --csv folder $T/NAME, its per-step hashes in
# $T/NAME.h (the pipeline tests)
train_hashes() {
    name=$1 n=$2
    shift 2
    if ! sh "$HERE/mpirun.sh" "$n" "$ZS" train $M "$@" --report "$T/$name.json" --csv "$T/$name" \
         </dev/null >"$T/$name.log" 2>&1; then
        bad "$name: zerosim train $* on $n ranks failed"
        cat "$T/$name.log"
        return 1
    fi
    hashes "$T/$name.json" >"$T/$name.h"
}
# same_hashes NAME REF: NAME's per-step hashes equal REF's
same_hashes() {
    if [ -s "$T/$2.h" ] && grep -q '[0-9a-f]\{16\}' "$T/$2.h" && cmp -s "$T/$1.h" "$T/$2.h"; then
        ok
    else
        bad "$1: per-step hashes $(cat "$T/$1.h") differ from $2's $(cat "$T/$2.h")"
    fi
}

# key FILE NAME: the value of a top-level scalar key of a report
key() { sed -n "s/^  \"$2\": \"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}$/\1/p" "$1"; }

# finish: the closing line, with the test's seconds (scripts/test.sh lists
# the slowest), then exit 0 only when nothing failed
ZS_TEST_T0=$(date +%s)
finish() {
    echo "$passes passed, $fails failed ($(($(date +%s) - ZS_TEST_T0)) s)"
    [ "$fails" -eq 0 ]
    exit
}
