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
# Open MPI's session directory under this test's own folder: Open MPI 4.1
# creates /tmp/ompi.HOST.UID with a check-then-mkdir that fails ("File
# exists", orte_init failed) when two processes that start at once, from
# tests that make -j2 runs side by side, both find it missing
export OMPI_MCA_orte_tmpdir_base="$T"
fails=0
passes=0
ok() { passes=$((passes + 1)); }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# zs_fast: true in make check's fast mode (ZS_TEST_LEVEL=fast; make
# check-full and a test run by hand have full), where a sweep stops after
# its first case (`zs_fast && break` at the end of its loop's body) and a
# slow section may be left to the full run (docs/testing.md)
zs_fast() { [ "${ZS_TEST_LEVEL:-full}" = fast ]; }

# check_csv LABEL DIR: measured = predicted for every memory category
# (activations included) and for reduce-scatter, allgather and all-to-all,
# and for the point-to-point sends and receives where a prediction exists
# (a run without experts predicts no all-to-all, -1, and makes none)
check_csv() {
    awk -v L="$1" '
        $1 ~ /^#/ || $2 == "total" { next }
        { if ($3 != $4) { printf "FAIL: %s rank %s %s: measured %s predicted %s\n", L, $1, $2, $3, $4; bad++ }
          n++ }
        END { exit (bad > 0 || n < 11) }' "$2/memory.csv" || return 1
    awk -v L="$1" '
        $1 ~ /^#/ { next }
        $3 == "all" && ($2 == "reduce_scatter" || $2 == "allgather" || $2 == "alltoall") {
            if ($5 != $6 && !($2 == "alltoall" && $6 == -1 && $5 == 0)) {
                printf "FAIL: %s rank %s %s: measured %s predicted %s\n", L, $1, $2, $5, $6; bad++ }
            n++ }
        $3 == "all" && ($2 == "send" || $2 == "recv") && $6 != -1 && $5 != $6 {
            printf "FAIL: %s rank %s %s: measured %s predicted %s\n", L, $1, $2, $5, $6; bad++ }
        END { exit (bad > 0 || n < 6) }' "$2/comm.csv"
}

# measured_is_predicted LABEL DIR: check_csv as one pass or one failure
measured_is_predicted() { check_csv "$1" "$2" && ok || bad "$1: measured differs from predicted ($2)"; }

# plan_is_run LABEL PLAN RUN: the plan's bytes per category (zerosim plan
# --json in file PLAN) are rank 0's peak bytes per category in the run's
# --csv folder RUN (its memory.csv, less the total and optimizer rows)
plan_is_run() {
    plan_categories "$2" >"$T/plan_is_run.plan"
    awk '$1 == 0 && $2 != "total" && $2 != "optimizer" { print $2, $3 }' "$3/memory.csv" \
        >"$T/plan_is_run.run"
    if [ -s "$T/plan_is_run.plan" ] && cmp -s "$T/plan_is_run.plan" "$T/plan_is_run.run"; then
        ok
    else
        bad "$1: the plan's bytes per category differ from the run's"
        diff "$T/plan_is_run.plan" "$T/plan_is_run.run"
    fi
}

# plan_categories FILE: a zerosim plan --json's bytes_per_category, one
# "category bytes" line each (as rank 0's rows of a run's memory.csv)
plan_categories() {
    sed -n '/"bytes_per_category"/,/}/p' "$1" | tr -d ' ",{}' | grep : |
        sed 's/^bytes_per_category://' | grep . | tr ':' ' '
}

# zs_run NAME N ARGS...: zerosim train ARGS on N ranks (N = 0: one process,
# without mpirun), its report $T/NAME.json, its --csv folder $T/NAME, its
# output $T/NAME.log; a failed run is one failure, with the log's last
# lines, and returns 1
zs_run() {
    zs_name=$1 zs_n=$2
    shift 2
    if [ "$zs_n" = 0 ]; then
        set -- "$ZS" train "$@"
    else
        set -- sh "$HERE/mpirun.sh" "$zs_n" "$ZS" train "$@"
    fi
    "$@" --report "$T/$zs_name.json" --csv "$T/$zs_name" >"$T/$zs_name.log" 2>&1 </dev/null &&
        return 0
    bad "$zs_name: the run failed:"
    tail -n 5 "$T/$zs_name.log" | sed 's/^/  | /'
    return 1
}

# refuse [-n N] [-m TEXT] [-q] [-o PATH]... ARGS...: zerosim ARGS (on N
# ranks with -n, else one process) is refused: a non-zero exit, exactly one
# line on stderr (containing TEXT with -m), with -q nothing on stdout, and
# nothing written: with -o (a file or folder under $T, removed first, the
# option repeated for each), no PATH and no temporary file (*.tmp*) in $T
# or beside a PATH. One pass or one failure; the command's output is in
# $T/refuse.out and $T/refuse.err
refuse() {
    zs_n=0 zs_want='' zs_outs='' zs_quiet=''
    while :; do
        case $1 in
            -n) zs_n=$2; shift 2 ;;
            -m) zs_want=$2; shift 2 ;;
            -q) zs_quiet=1; shift ;;
            -o) case $2 in "$T"/*) ;; *) bad "refuse -o $2: not under \$T"; return ;; esac
                rm -rf "$2"; zs_outs="$zs_outs $2"; shift 2 ;;
            *) break ;;
        esac
    done
    zs_what="zerosim $*"
    [ "$zs_n" = 0 ] || zs_what="zerosim $* on $zs_n ranks"
    if [ "$zs_n" = 0 ]; then
        set -- "$ZS" "$@"
    else
        set -- sh "$HERE/mpirun.sh" "$zs_n" "$ZS" "$@"
    fi
    if "$@" >"$T/refuse.out" 2>"$T/refuse.err" </dev/null; then
        bad "$zs_what: accepted"; return
    fi
    zs_why=
    [ "$(wc -l <"$T/refuse.err")" -eq 1 ] || zs_why="not one line on stderr"
    [ -z "$zs_want" ] || grep -q -- "$zs_want" "$T/refuse.err" || zs_why="no \"$zs_want\" on stderr"
    [ -z "$zs_quiet" ] || [ ! -s "$T/refuse.out" ] || zs_why="output on stdout"
    for zs_p in $zs_outs; do
        [ -e "$zs_p" ] && zs_why="left $zs_p"
        # shellcheck disable=SC2010 # any temporary file beside the output
        ls -A "$(dirname "$zs_p")" | grep -q '\.tmp' && zs_why="left a temporary file beside $zs_p"
    done
    # shellcheck disable=SC2010 # any temporary file at all in $T
    [ -z "$zs_outs" ] || ! ls -A "$T" | grep -q '\.tmp' || zs_why="left a temporary file in \$T"
    if [ -z "$zs_why" ]; then
        ok
    else
        bad "$zs_what: $zs_why"
        sed 's/^/  | /' "$T/refuse.err" "$T/refuse.out" | head -10
    fi
}

# hashes FILE: the "param_hashes" array of a report, on one line
hashes() { sed -n '/"param_hashes"/,/\]/p' "$1" | tr -d ' \n'; }
# train_hashes NAME N ARGS...: zerosim train $M ARGS on N ranks, its report
# in $T/NAME.json, its --csv folder $T/NAME, its per-step hashes in
# $T/NAME.h (the pipeline tests)
train_hashes() {
    name=$1 n=$2
    shift 2
    zs_run "$name" "$n" $M "$@" || return 1
    hashes "$T/$name.json" >"$T/$name.h"
}
# phantom_same REAL N ARGS...: the phantom run of zerosim train $M ARGS on N
# ranks reports what the real run $T/REAL (its --csv folder) did: every
# category of every rank and its timeline, every op of every phase but the
# report's (a real run hashes there) (the pipeline tests)
phantom_same() {
    real=$1 n=$2
    shift 2
    if ! "$ZS" train --phantom --world-size "$n" $M "$@" --csv "$T/$real-ph" \
         >"$T/$real-ph.log" 2>&1; then
        bad "phantom $real failed"; cat "$T/$real-ph.log"; return
    fi
    for f in memory.csv timeline.csv; do
        cmp -s "$T/$real/$f" "$T/$real-ph/$f" && ok ||
            { bad "phantom $real: $f differs"; diff "$T/$real/$f" "$T/$real-ph/$f" | head -4; }
    done
    for d in "$real" "$real-ph"; do
        awk '$1 !~ /^#/ && $2 != "gather" && $3 != "report" { print $1, $2, $3, $4, $5, $6 }' \
            "$T/$d/comm.csv" >"$T/$d.ops"
    done
    cmp -s "$T/$real.ops" "$T/$real-ph.ops" && ok ||
        { bad "phantom $real: traffic differs"; diff "$T/$real.ops" "$T/$real-ph.ops" | head -4; }
}
# run_2x2 LABEL ARGS...: zerosim train $MODEL ARGS on 4 ranks as 2 nodes of 2,
# quiet, its --csv folder $T/LABEL and report $T/LABEL.json (the node tests)
run_2x2() {
    label=$1
    shift
    sh "$HERE/mpirun.sh" 4 "$ZS" train $MODEL --ranks-per-node 2 "$@" --quiet --csv "$T/$label" \
        --report "$T/$label.json" > "$T/$label.log" 2>&1 </dev/null ||
        bad "$label: the run failed: $(tail -2 "$T/$label.log")"
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
# memory_predicted LABEL DIR, ops_predicted LABEL DIR: every category and
# tier of every rank (40 rows at least), and every op with a prediction (8
# at least), measured = predicted in a --csv folder
memory_predicted() { # LABEL DIR
    awk -v L="$1" '$1 !~ /^#/ && $2 != "total" {
            n++; if ($3 != $4) { printf "FAIL: %s rank %s %s: measured %s predicted %s\n", L, $1, $2, $3, $4; bad++ } }
        END { exit (bad > 0 || n < 40) }' "$2/memory.csv" && ok || bad "$1: memory"
}
ops_predicted() { # LABEL DIR
    awk -v L="$1" '$1 !~ /^#/ && $3 == "all" && $6 != -1 {
            n++; if ($5 != $6) { printf "FAIL: %s rank %s %s: measured %s predicted %s\n", L, $1, $2, $5, $6; bad++ } }
        END { exit (bad > 0 || n < 8) }' "$2/comm.csv" && ok || bad "$1: transfers"
}
# rank0_bytes DIR CATEGORY: rank 0's measured bytes of CATEGORY in a
# --csv folder's memory.csv; rank0_allgather DIR: rank 0's all-gathers over
# every group, calls and bytes, from its comm.csv
rank0_bytes() { awk -v c="$2" '$1 == 0 && $2 == c { print $3 }' "$1/memory.csv"; }
rank0_allgather() { awk '$1 == 0 && $2 == "allgather" && $3 == "all" { print $4, $5 }' "$1/comm.csv"; }

# finish: the closing line, with the test's seconds (scripts/test.sh lists
# the slowest), then exit 0 only when nothing failed
ZS_TEST_T0=$(date +%s)
finish() {
    echo "$passes passed, $fails failed ($(($(date +%s) - ZS_TEST_T0)) s)"
    [ "$fails" -eq 0 ]
    exit
}
