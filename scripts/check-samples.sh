#!/bin/sh
# Check the sample outputs that the README and docs/*.md quote against what
# the program prints now: every fenced block after a marker comment is run
# again and compared line by line.
#
#   <!-- sample -->          the block's "$ COMMAND" lines are run (a line
#                            ending in \ continues); each command's output
#                            must be the lines that follow it
#   <!-- sample: ARGS -->    the same, with ARGS added at the end of each
#                            zerosim command (a cheaper run, e.g. --steps 2,
#                            that prints the same lines; the page says so)
#   <!-- sample-of: CMD -->  the block is CMD's output (a block that shows
#                            no command, or whose command is shown elsewhere)
#   <!-- vary: ERE -->       (before the marker, any number; awk's ERE, without
#                            {n} intervals) text that varies
#                            from run to run or machine to machine (times, rates):
#                            what matches ERE is masked on both sides
#
# In a block, a line "..." stands for any number of lines the page leaves
# out; every other line must be printed, in that order, with the same words
# (runs of blanks count as one). Commands run in a scratch folder; "zerosim"
# and "./zerosim" run the program under test (ZEROSIM, default ./zerosim),
# "mpirun -np N" runs tests/mpirun.sh N. Output and errors are compared
# together.
#
# Usage: scripts/check-samples.sh [--show | --update] PAGE...
#   --show    print what each block's commands print now (to update a page)
#   --update  rewrite every <!-- sample-of --> block that leaves nothing out
#             (no "..." and no vary) with what its command prints now, as
#             docs/configuration.md's key list (after adding a key); other
#             blocks are checked as usual
# Exit status 0 when every block matches, 1 otherwise (each mismatch named
# with its page and line), 2 for bad usage.
set -u
show=0
update=0
[ "${1:-}" = --show ] && { show=1; shift; }
[ "${1:-}" = --update ] && { update=1; shift; }
[ $# -ge 1 ] || { echo "usage: scripts/check-samples.sh [--show | --update] PAGE..." >&2; exit 2; }
TOP=$(cd "$(dirname "$0")/.." && pwd)
ZS=${ZEROSIM:-./zerosim}
case $ZS in /*) ;; *) ZS=$(pwd)/$ZS ;; esac
[ -x "$ZS" ] || { echo "check-samples: no zerosim program at $ZS (build it, or set ZEROSIM)" >&2; exit 2; }
export ZS TOP
export OPENBLAS_NUM_THREADS=1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
blocks=0; bad=0

# split PAGE into W/b<k>/: marker, vary (masks), and per command j: cmd<j>,
# want<j> (the expected lines) and lines<j> (their page line numbers)
split_page() {
    awk -v dir="$W" -v page="$1" '
        function start_cmd() { nc++; cmdf = bdir "/cmd" nc; wantf = bdir "/want" nc; linef = bdir "/lines" nc
            printf "" > wantf; printf "" > linef }
        /^<!-- vary: .* -->$/ && !inblock { v = $0; sub(/^<!-- vary: /, "", v); sub(/ -->$/, "", v); vary[++nv] = v; next }
        /^<!-- sample(-of)?(: .*)? -->$/ && !inblock {
            k++; bdir = dir "/b" sprintf("%04d", k); system("mkdir -p \"" bdir "\"")
            m = $0; sub(/^<!-- /, "", m); sub(/ -->$/, "", m)
            kind = m; sub(/:.*/, "", kind); arg = ""
            if (index(m, ": ")) { arg = m; sub(/^[^:]*: /, "", arg) }
            print kind > (bdir "/kind"); print arg > (bdir "/arg"); print FNR > (bdir "/at")
            printf "" > (bdir "/vary"); for (i = 1; i <= nv; i++) print vary[i] > (bdir "/vary")
            nv = 0; want = 1; nc = 0; cont = 0
            if (kind == "sample-of") { start_cmd(); print arg > cmdf }
            next
        }
        want && /^```/ && !inblock { inblock = 1; print FNR + 1 > (bdir "/from"); next }
        inblock && /^```/ { inblock = 0; want = 0; print FNR - 1 > (bdir "/to"); next }
        inblock {
            if (cont) { l = $0; sub(/^ +/, "", l); c = c " " l; cont = (c ~ /\\$/); if (cont) sub(/\\$/, "", c); if (!cont) print c > cmdf; next }
            if ($0 ~ /^\$ /) {
                start_cmd(); c = substr($0, 3); cont = (c ~ /\\$/); if (cont) sub(/\\$/, "", c)
                if (!cont) print c > cmdf
                next
            }
            if (nc == 0) { printf "%s line %d: a sample block whose first line is not a \"$ \" command\n", page, FNR > "/dev/stderr"; exit 3 }
            print $0 > wantf; print FNR > linef
            next
        }
        want && NF && !/^<!--/ { printf "%s line %d: a sample marker not followed by a fenced block\n", page, FNR > "/dev/stderr"; exit 3 }
        END { if (inblock) { printf "%s: a sample block is not closed\n", page > "/dev/stderr"; exit 3 } }
    ' "$1"
}

# runnable CMD ARGS: the command as the shell here runs it
runnable() {
    printf '%s\n' "$1" | awk -v extra="$2" '{
        c = $0; tail = ""
        if (match(c, / #.*$/)) c = substr(c, 1, RSTART - 1)          # a comment
        if (match(c, / [|>] .*$/)) { tail = substr(c, RSTART); c = substr(c, 1, RSTART - 1) }
        gsub(/^mpirun -np /, "sh \"$TOP/tests/mpirun.sh\" ", c)
        sub(/^sh "\$TOP\/tests\/mpirun.sh" [0-9]+ (\.\/)?zerosim /, "&@@", c)
        sub(/(\.\/)?zerosim @@/, "\"$ZS\" ", c)
        sub(/^(\.\/)?zerosim /, "\"$ZS\" ", c)
        if (extra != "") c = c " " extra
        if (tail ~ /^ \|/) print c " </dev/null 2>&1" tail   # a pipe: its first command
        else print c tail " </dev/null 2>&1"
    }'
}

# normalize VARYFILE: mask, squeeze blanks, trim (stdin to stdout)
normalize() {
    awk -v vf="$1" 'BEGIN { while ((getline v < vf) > 0) if (v != "") m[++n] = v }
        { for (i = 1; i <= n; i++) gsub(m[i], "<varies>", $0)
          gsub(/[ \t]+/, " "); sub(/^ /, ""); sub(/ $/, ""); print }'
}

for page in "$@"; do
    rm -rf "$W"/b[0-9]*
    split_page "$page" || { bad=$((bad + 1)); continue; }
    # in the page's order; --update from the last block up, so that a block
    # rewritten to another length leaves the line numbers above it valid
    order=-n; [ "$update" -eq 1 ] && order=-rn
    for k in $(for d in "$W"/b[0-9]*; do [ -d "$d" ] && echo "${d##*/b}"; done | sort "$order"); do
        b=$W/b$k
        [ -d "$b" ] || continue
        blocks=$((blocks + 1))
        arg=$(cat "$b/arg"); kind=$(cat "$b/kind"); at=$(cat "$b/at")
        extra=""; [ "$kind" = sample ] && extra=$arg
        mkdir "$b/cwd"
        j=1
        while [ -f "$b/cmd$j" ]; do
            cmd=$(cat "$b/cmd$j")
            run=$(runnable "$cmd" "$extra")
            # a command that writes no file and was run before (on this page
            # or another) is not run again: its output is kept by its text
            key=$(printf '%s' "$run" | cksum | tr ' ' _)
            if [ -f "$W/cache/$key" ]; then
                cp "$W/cache/$key" "$b/got$j"
            else
                (cd "$b/cwd" && timeout 120 sh -c "$run") >"$b/got$j"
                if [ "$kind" = sample-of ] || [ "$j" -eq 1 ]; then
                    [ -z "$(ls -A "$b/cwd")" ] && mkdir -p "$W/cache" && cp "$b/got$j" "$W/cache/$key"
                fi
            fi
            if [ "$show" -eq 1 ]; then
                echo "== $page line $at: \$ $cmd"; cat "$b/got$j"
                j=$((j + 1)); continue
            fi
            if [ "$update" -eq 1 ] && [ "$kind" = sample-of ] && [ ! -s "$b/vary" ] &&
                ! grep -qx ' *\.\.\. *' "$b/want$j"; then
                # the block's lines from/to are replaced by the output
                from=$(cat "$b/from") to=$(cat "$b/to")
                awk -v from="$from" -v to="$to" -v gf="$b/got$j" '
                    FNR == from { while ((getline g < gf) > 0) print g }
                    FNR >= from && FNR <= to { next }
                    { print }' "$page" >"$W/page.new" && cat "$W/page.new" >"$page"
                echo "check-samples: $page: the block at line $at rewritten with what \"$cmd\" prints now"
                j=$((j + 1)); continue
            fi
            normalize "$b/vary" <"$b/got$j" >"$b/gotn$j"
            normalize "$b/vary" <"$b/want$j" >"$b/wantn$j"
            if ! awk -v page="$page" -v cmd="$cmd" -v lf="$b/lines$j" -v gf="$b/gotn$j" '
                BEGIN { while ((getline l < lf) > 0) ln[++nl] = l
                        while ((getline g < gf) > 0) got[++ng] = g }
                { want[NR] = $0 }
                END {
                    i = 1; j = 1; nw = NR
                    while (i <= nw) {
                        if (want[i] == "...") {
                            if (i == nw) exit 0
                            while (j <= ng && got[j] != want[i + 1]) j++
                            if (j > ng) { printf "%s line %d: \"%s\" is not printed by: %s\n", page, ln[i + 1], want[i + 1], cmd; exit 1 }
                            i++; continue
                        }
                        if (j > ng) { printf "%s line %d: \"%s\" is not printed (the output ends before it) by: %s\n", page, ln[i], want[i], cmd; exit 1 }
                        if (got[j] != want[i]) { printf "%s line %d: the page says \"%s\", the program prints \"%s\" (%s)\n", page, ln[i], want[i], got[j], cmd; exit 1 }
                        i++; j++
                    }
                    if (j <= ng) { printf "%s line %d: the program prints more after this line (\"%s\"; mark left-out lines with ...): %s\n", page, ln[nw], got[j], cmd; exit 1 }
                }' "$b/wantn$j"; then
                bad=$((bad + 1))
            fi
            j=$((j + 1))
        done
    done
done
[ "$show" -eq 1 ] && exit 0
echo "check-samples: $blocks sample blocks, $bad not as the program prints them"
[ "$bad" -eq 0 ] || echo "check-samples: to update a page, scripts/check-samples.sh --show PAGE prints what its commands print now (--update rewrites the blocks that quote a whole output)"
[ "$bad" -eq 0 ]
