# Shared by the labs' run.sh scripts, which source it first:
#     . "$(dirname "$0")/../lib.sh"; lab_init "$0" "$@"
# It reads the options every lab takes, finds zerosim and gnuplot, runs
# zerosim (through tests/mpirun.sh for more than one rank), keeps the numbers
# a lab's page quotes (OUT/numbers.txt, "name value" lines), checks the
# claims its answers rely on, renders the pictures, and at the end checks the
# page's tagged numbers against what was measured (lab_finish).
#
# Options of every run.sh:
#   --quick      fewer steps and fewer runs (what make check runs); the byte
#                counts the page quotes come out the same
#   --show       also draw each picture on the screen: a window when there is
#                a display (qt, wxt, x11 or aqua), else in the terminal as text
#                (gnuplot's dumb terminal); LABS_SHOW=1 does the same and
#                LABS_TERM names a gnuplot terminal to use instead
#   --out DIR    where results go (default ./labs-out/<lab>)
#   --data text  the labs that train a GPT (1, 3, 4, 5) learn a real English
#                text instead of the synthetic task: Debian's fortunes
#                (songs-poems) where it is installed, else the GPL-3 text
#                every Debian system has (/usr/share/common-licenses),
#                byte by byte (zerosim tokens: vocabulary 256); --data FILE
#                takes a byte-level token file of your own. The claims are
#                checked as always; the page's numbers are the synthetic
#                task's, so they are shown beside the run's, not checked
#   --help       this text
# Environment: ZEROSIM (the program; default ./zerosim, else the one built
# beside labs/), MPIEXEC (default mpiexec), GNUPLOT (default gnuplot; "no"
# skips the pictures).
set -eu

# lab_init SCRIPT ARGS...: parse the options, set LAB (the lab's folder name),
# LAB_DIR (its folder), LABS (labs/), TOP (the source tree), OUT, QUICK, SHOW
lab_init() {
    LAB_DIR=$(cd "$(dirname "$1")" && pwd)
    LAB=$(basename "$LAB_DIR")
    LABS=$(dirname "$LAB_DIR")
    TOP=$(dirname "$LABS")
    shift
    QUICK=0
    SHOW=${LABS_SHOW:-0}
    case $SHOW in 1|yes|true) SHOW=1 ;; *) SHOW=0 ;; esac
    OUT=""
    DATA=""
    while [ $# -gt 0 ]; do
        case $1 in
            --quick) QUICK=1 ;;
            --show) SHOW=1 ;;
            --out)
                [ $# -ge 2 ] && [ -n "$2" ] || lab_die "--out needs a folder"
                OUT=$2; shift ;;
            --out=*) OUT=${1#--out=}; [ -n "$OUT" ] || lab_die "--out needs a folder" ;;
            --data)
                [ $# -ge 2 ] && [ -n "$2" ] || lab_die "--data needs 'text' or a token file"
                DATA=$2; shift ;;
            --data=*) DATA=${1#--data=}; [ -n "$DATA" ] || lab_die "--data needs 'text' or a token file" ;;
            --help|-h)
                echo "usage: sh labs/$LAB/run.sh [--quick] [--show] [--out DIR] [--data text|FILE]"
                sed -n '2,/^$/s/^# \{0,1\}//p' "$LAB_DIR/run.sh"
                sed -n '/^# Options of every run.sh:/,/^# Environment/p' "$LABS/lib.sh" | sed 's/^# \{0,1\}//; $d'
                exit 0 ;;
            *) echo "$LAB/run.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
        esac
        shift
    done
    [ -n "$OUT" ] || OUT=labs-out/$LAB
    mkdir -p "$OUT" 2>/dev/null || lab_die "cannot create the folder $OUT"
    OUT=$(cd "$OUT" && pwd)
    case $OUT in *\'*|*\"*) lab_die "the output folder's name may not contain a quote: $OUT" ;; esac
    : >"$OUT/numbers.txt" 2>/dev/null || lab_die "cannot write in $OUT"
    : >"$OUT/checks.txt"
    if [ -n "${ZEROSIM:-}" ]; then ZS=$ZEROSIM
    elif [ -x ./zerosim ]; then ZS=./zerosim
    else ZS=$TOP/zerosim
    fi
    [ -x "$ZS" ] || lab_die "no zerosim program at $ZS: build it first (./configure && make) or set ZEROSIM"
    case $ZS in /*) ;; *) ZS=$(pwd)/$ZS ;; esac
    GP=${GNUPLOT:-gnuplot}
    if [ "$GP" = no ] || ! command -v "$GP" >/dev/null 2>&1; then
        GP=""
        echo "$LAB: gnuplot not found (install gnuplot, or gnuplot-nox): numbers only, no pictures" >&2
    fi
    LAB_CHECKS=0
    LAB_FAILS=0
    export OPENBLAS_NUM_THREADS=1
    mode=full; [ "$QUICK" -eq 1 ] && mode=quick
    echo "$LAB ($mode): results in $OUT"
    lab_data_init
}

# lab_data_init: with --data, LAB_DATA_ARGS (the options every lab_run
# appends: the token files and --vocab 256) and LAB_SHAPE_ARGS (what a
# phantom run appends: --vocab 256, so its bytes are the real runs'); without,
# both empty
lab_data_init() {
    LAB_DATA_ARGS=""
    LAB_SHAPE_ARGS=""
    [ -n "$DATA" ] || return 0
    case $OUT in *\ *) lab_die "--data: the output folder's name may not contain a space: $OUT" ;; esac
    if [ "$DATA" = text ]; then
        txt=""
        for f in /usr/share/games/fortunes/songs-poems /usr/share/common-licenses/GPL-3; do
            [ -r "$f" ] && { txt=$f; break; }
        done
        [ -n "$txt" ] || lab_die "--data text: neither Debian's fortunes (songs-poems) nor /usr/share/common-licenses/GPL-3 is here; give a token file: --data FILE"
        "$ZS" tokens "$txt" --out "$OUT/text-train.bin" --val-out "$OUT/text-val.bin" >"$OUT/tokens.log" 2>&1 ||
            { cat "$OUT/tokens.log" >&2; lab_die "zerosim tokens failed on $txt"; }
        echo "$LAB: --data text: $txt, byte by byte ($OUT/text-train.bin, text-val.bin)"
        LAB_DATA_ARGS="--data $OUT/text-train.bin --val-data $OUT/text-val.bin --vocab 256"
        LAB_SHAPE_ARGS="--vocab 256"
    else
        [ -r "$DATA" ] || lab_die "--data $DATA: no such file (give 'text' or a byte-level token file from zerosim tokens)"
        case $DATA in /*) ;; *) DATA=$(pwd)/$DATA ;; esac
        case $DATA in *\ *|*\'*|*\"*) lab_die "--data: the file's name may not contain a space or a quote: $DATA" ;; esac
        echo "$LAB: --data $DATA (trained with --vocab 256)"
        LAB_DATA_ARGS="--data $DATA --vocab 256"
        LAB_SHAPE_ARGS="--vocab 256"
    fi
}

lab_die() { echo "${LAB:-labs}: $*" >&2; exit 1; }

# lab_run N NAME ARGS...: zerosim train ARGS on N ranks (N = 1: no mpirun),
# quiet, with --csv OUT/NAME and --report OUT/NAME/report.json; its output
# goes to OUT/NAME/log; a failure prints the log and stops the lab
lab_run() {
    n=$1; name=$2; shift 2
    d=$OUT/$name
    rm -rf "$d"; mkdir -p "$d"
    if [ "$n" -eq 1 ]; then echo "zerosim train $*"; else echo "mpirun -np $n zerosim train $*"; fi >"$d/command"
    # shellcheck disable=SC2086 # LAB_DATA_ARGS is words (lab_data_init)
    if [ "$n" -eq 1 ]; then
        set -- "$ZS" train "$@" $LAB_DATA_ARGS --quiet --csv "$d" --report "$d/report.json"
    else
        set -- sh "$TOP/tests/mpirun.sh" "$n" "$ZS" train "$@" $LAB_DATA_ARGS --quiet --csv "$d" --report "$d/report.json"
    fi
    if ! "$@" </dev/null >"$d/log" 2>&1; then
        [ "${LAB_EXPECT_FAIL:-0}" -eq 1 ] && return 1
        cat "$d/log" >&2
        lab_die "this run failed: $(cat "$d/command")"
    fi
    [ "${LAB_EXPECT_FAIL:-0}" -eq 0 ] || return 0
}

# lab_try N NAME ARGS...: as lab_run, for a run that may fail: its status is
# returned and its output is in OUT/NAME/log
lab_try() {
    LAB_EXPECT_FAIL=1
    st=0
    lab_run "$@" || st=$?
    LAB_EXPECT_FAIL=0
    return $st
}

# lab_phantom NAME ARGS...: a phantom run (no MPI, no storage) into OUT/NAME
lab_phantom() {
    name=$1; shift
    d=$OUT/$name
    rm -rf "$d"; mkdir -p "$d"
    # shellcheck disable=SC2086 # LAB_SHAPE_ARGS is words (lab_data_init)
    if ! "$ZS" train --phantom "$@" $LAB_SHAPE_ARGS --quiet --csv "$d" --report "$d/report.json" </dev/null >"$d/log" 2>&1; then
        cat "$d/log" >&2
        lab_die "this phantom run failed: zerosim train --phantom $*"
    fi
}

# lab_bytes N NAME ARGS...: a run whose bytes (memory, traffic) are all the
# lab reads: a real run on N ranks, or with --quick a phantom run of N
# simulated ranks, which reports the same bytes (tests/test_phantom.sh)
lab_bytes() {
    if [ "$QUICK" -eq 1 ]; then
        n=$1; name=$2; shift 2
        lab_phantom "$name" --world-size "$n" "$@"
    else
        lab_run "$@"
    fi
}

# lab_mem NAME CATEGORY: rank 0's peak bytes of a category (memory.csv)
lab_mem() {
    awk -v c="$2" '!/^#/ && $1 == 0 && $2 == c { print $3; f = 1; exit } END { if (!f) exit 1 }' \
        "$OUT/$1/memory.csv" || lab_die "no category $2 in $1/memory.csv"
}

# lab_traffic NAME OP: rank 0's bytes per step of an op (comm.csv, phase all)
lab_traffic() {
    steps=$(awk '!/^#/ { print $7; exit }' "$OUT/$1/run.csv")
    awk -v op="$2" -v s="$steps" '!/^#/ && $1 == 0 && $2 == op && $3 == "all" { printf "%.0f\n", $5 / s; f = 1; exit }
        END { if (!f) print 0 }' "$OUT/$1/comm.csv"
}

# lab_key NAME KEY: a top-level scalar of the run's JSON report
lab_key() {
    sed -n "s/^  \"$2\": \"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}$/\1/p" "$OUT/$1/report.json"
}

# lab_median_step NAME: the median step time in seconds, step 0 left out
lab_median_step() {
    awk '!/^#/ && $1 > 0 { print $6 }' "$OUT/$1/steps.csv" | sort -g |
        awk '{ a[NR] = $1 } END { if (NR == 0) print 0; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# lab_fmt N: an integer with thousands separators (1621120 -> 1,621,120)
lab_fmt() {
    echo "$1" | awk '{ s = sprintf("%.0f", $1); neg = ""; if (s ~ /^-/) { neg = "-"; s = substr(s, 2) }
        o = ""; while (length(s) > 3) { o = "," substr(s, length(s) - 2) o; s = substr(s, 1, length(s) - 3) }
        print neg s o }'
}

# lab_num NAME VALUE: a number the page may quote as <!--NAME-->VALUE
lab_num() {
    if awk -v n="$1" -v v="$2" '$1 == n { w = $0; sub(/^[^ ]+ /, "", w); if (w != v) f = 1 } END { exit !f }' "$OUT/numbers.txt"; then
        lab_die "the number $1 is set twice, to different values (a bug in $LAB/run.sh)"
    fi
    printf '%s %s\n' "$1" "$2" >>"$OUT/numbers.txt"
}

# lab_calc EXPR: awk arithmetic, printed with %.15g (or lab_calc FMT EXPR)
lab_calc() {
    if [ $# -eq 2 ]; then awk "BEGIN { printf \"$1\\n\", $2 }"
    else awk "BEGIN { printf \"%.15g\\n\", $1 }"
    fi
}

# lab_check TEXT CONDITION...: a claim the page relies on; CONDITION is a
# command (test, awk) whose status says whether it holds
lab_check() {
    text=$1; shift
    LAB_CHECKS=$((LAB_CHECKS + 1))
    if "$@"; then
        echo "  check: $text: holds" | tee -a "$OUT/checks.txt"
    else
        LAB_FAILS=$((LAB_FAILS + 1))
        echo "  check: $text: DOES NOT HOLD" | tee -a "$OUT/checks.txt"
    fi
}

# lab_loss_check TEXT CONDITION...: a claim about how training goes (the
# losses), which the page makes for the synthetic task: checked as lab_check
# does, except with --data, where it is shown (seen: yes/no), not checked
lab_loss_check() {
    if [ -z "$DATA" ]; then lab_check "$@"; return; fi
    text=$1; shift
    if "$@"; then seen=yes; else seen=no; fi
    echo "  seen on --data $DATA: $text: $seen (the page's claim is the synthetic task's)" | tee -a "$OUT/checks.txt"
}

# lab_eq A B: awk's numeric equality (for lab_check)
lab_eq() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a == b) }'; }
# lab_lt A B: A < B numerically
lab_lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

# lab_plot GPFILE NAME [GNUPLOT-ASSIGNMENTS]: render LAB_DIR/GPFILE into
# OUT/NAME.png (the script sees datadir, and whatever the assignments set),
# and with --show draw it on the screen too
lab_plot() {
    gpf=$LAB_DIR/$1; png=$OUT/$2.png; vars="datadir='$OUT'; ${3:-}"
    [ -n "$GP" ] || return 0
    "$GP" -e "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 960,600 font 'Sans,11' noenhanced } else { set terminal png size 960,600 noenhanced }; set output '$png'; $vars" "$gpf" \
        || lab_die "gnuplot failed on $1"
    [ -s "$png" ] || lab_die "gnuplot wrote no $png"
    echo "  picture: $png"
    [ "$SHOW" -eq 1 ] || return 0
    term=$(lab_screen_term)
    if [ "$term" = dumb ]; then
        cols=$(tput cols 2>/dev/null || echo 100); [ "$cols" -ge 60 ] 2>/dev/null || cols=100
        "$GP" -e "set terminal dumb size $cols,32 ansi; $vars" "$gpf" || echo "$LAB: could not draw $2 in the terminal" >&2
    else
        "$GP" -e "set terminal $term persist noenhanced; $vars" "$gpf" || echo "$LAB: could not draw $2 on $term" >&2
    fi
}

# lab_screen_term: LABS_TERM, else a window terminal when a display is there,
# else dumb (text in this terminal)
lab_screen_term() {
    if [ -n "${LABS_TERM:-}" ]; then echo "$LABS_TERM"; return; fi
    if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] || [ "$(uname -s)" = Darwin ]; then
        terms=$("$GP" -e 'print GPVAL_TERMINALS' 2>&1)
        for t in qt wxt aqua x11; do
            case " $terms " in *" $t "*) echo "$t"; return ;; esac
        done
    fi
    echo dumb
}

# lab_finish: check the page's tagged numbers against OUT/numbers.txt, print
# the summary, exit non-zero when a check failed
lab_finish() {
    page=$LAB_DIR/README.md
    if [ -n "$DATA" ]; then
        # the page quotes the synthetic task's numbers: shown, not checked
        sh "$LABS/check-page.sh" --partial "$page" "$OUT/numbers.txt" >"$OUT/page-check.txt" 2>&1 || true
        echo "  page: not checked with --data (its numbers are the synthetic task's; what differs:)"
        sed 's/^/    /' "$OUT/page-check.txt"
        echo "$LAB: $((LAB_CHECKS - LAB_FAILS)) of $LAB_CHECKS checks hold on --data $DATA (checks.txt and the pictures in $OUT)"
        [ "$LAB_FAILS" -eq 0 ]
        exit
    fi
    if ! sh "$LABS/check-page.sh" $([ "$QUICK" -eq 1 ] && echo --partial) "$page" "$OUT/numbers.txt" >"$OUT/page-check.txt" 2>&1; then
        LAB_FAILS=$((LAB_FAILS + 1))
    fi
    LAB_CHECKS=$((LAB_CHECKS + 1))
    sed 's/^/  /' "$OUT/page-check.txt"
    echo "$LAB: $((LAB_CHECKS - LAB_FAILS)) of $LAB_CHECKS checks hold (checks.txt, page-check.txt and the pictures in $OUT)"
    [ "$LAB_FAILS" -eq 0 ]
    exit
}

# lab_hashes NAME: the run's param_hashes (one per step), one a line
lab_hashes() {
    sed -n '/"param_hashes"/,/\]/p' "$OUT/$1/report.json" | sed -n 's/.*"\([0-9a-f]\{16\}\)".*/\1/p'
}

# lab_losses NAME: the run's losses (one per step), one a line
lab_losses() {
    sed -n '/"losses"/,/\]/p' "$OUT/$1/report.json" | sed -n 's/^ *\([-0-9.eE+]*\),\{0,1\}$/\1/p'
}

# lab_first_diff A B: the first step (from 1) whose parameters differ between
# runs A and B, or 0 when every step is byte-identical
lab_first_diff() {
    lab_hashes "$1" >"$OUT/.ha"; lab_hashes "$2" >"$OUT/.hb"
    paste -d ' ' "$OUT/.ha" "$OUT/.hb" | awk '$1 != $2 { print NR; f = 1; exit } END { if (!f) print 0 }'
    rm -f "$OUT/.ha" "$OUT/.hb"
}
