#!/bin/sh
# Check a lab's page against what its run.sh measured: every number the page
# quotes is tagged <!--name-->value, and numbers.txt ("name value" lines,
# written by the run) must hold the same value for that name. Tags whose name
# starts with ~ mark a measured number that varies from run to run or machine
# to machine (a time, a loss, a hash): they are counted, not compared.
# Usage: labs/check-page.sh [--partial | --update] PAGE NUMBERS
# --partial: tags that NUMBERS does not hold are allowed (a quick run
# measures only some of them); otherwise each one is an error.
# --update: rewrite PAGE with the values of NUMBERS, ~ tags included (after a
# full run, when a change to zerosim moved the numbers on purpose).
set -eu
partial=0; update=0
case ${1:-} in
    --partial) partial=1; shift ;;
    --update) update=1; shift ;;
esac
[ $# -eq 2 ] || { echo "usage: labs/check-page.sh [--partial | --update] PAGE NUMBERS" >&2; exit 2; }
page=$1; numbers=$2
[ -r "$page" ] || { echo "check-page: cannot read $page" >&2; exit 1; }
[ -r "$numbers" ] || { echo "check-page: cannot read $numbers" >&2; exit 1; }
# shellcheck disable=SC2016 # an awk program: awk expands its own $
prog='
    # the value quoted after a tag: a number (1,656,064  3.73  8.7e-08),
    # a hash, or a word (yes, grads, 2B), without a closing , or .
    function quoted(s,   v) {
        if (!match(s, /^[0-9A-Za-z_.,+-]+/)) return ""
        v = substr(s, 1, RLENGTH)
        while (v ~ /[.,]$/) v = substr(v, 1, length(v) - 1)
        return v
    }
    NR == FNR {
        name = $1; v = $0; sub(/^[^ ]+ /, "", v); val[name] = v; next
    }
    {
        line = $0; out = ""
        while (match(line, /<!--~?[a-z0-9_]+-->/)) {
            tag = substr(line, RSTART, RLENGTH)
            name = substr(line, RSTART + 4, RLENGTH - 7)
            out = out substr(line, 1, RSTART + RLENGTH - 1)
            line = substr(line, RSTART + RLENGTH)
            plain = name; sub(/^~/, "", plain)
            key = (name in val) ? name : ((plain in val) ? plain : "")
            if (update) {
                if (key != "") {
                    q = quoted(line)
                    if (q != val[key]) changed++
                    out = out val[key]; line = substr(line, length(q) + 1)
                } else missing++
                continue
            }
            if (name ~ /^~/) { varies++; continue }
            if (!(name in val)) {
                if (partial) { notnow++ } else { printf "page %s line %d: %s is not among the measured numbers\n", page, FNR, name; bad++ }
                continue
            }
            v = val[name]
            after = substr(line, length(v) + 1, 1)
            if (substr(line, 1, length(v)) != v || after ~ /[0-9]/) {
                printf "page %s line %d: %s reads %s, the run measured %s\n", page, FNR, name, quoted(line), v
                bad++
            } else good++
        }
        if (update) print out line
    }
    END {
        if (update) {
            printf "check-page: %d values changed in %s", changed, page > "/dev/stderr"
            if (missing) printf "; %d tags not measured by this run, left as they were", missing > "/dev/stderr"
            printf "\n" > "/dev/stderr"
            exit 0
        }
        printf "page: %d quoted numbers equal the measured ones", good
        if (notnow) printf ", %d not measured in this mode", notnow
        if (varies) printf ", %d vary by run or machine (not compared)", varies
        if (bad) printf "; %d DIFFER", bad
        printf "\n"
        exit bad > 0
    }'
if [ "$update" -eq 1 ]; then
    awk -v partial=0 -v update=1 -v page="$page" "$prog" "$numbers" "$page" >"$page.new"
    mv "$page.new" "$page"
else
    awk -v partial="$partial" -v update=0 -v page="$page" "$prog" "$numbers" "$page"
fi
