#!/bin/sh
# Every shell command the pages show in a fenced block is run, in a quick
# form, or is marked as run elsewhere or not run, with the reason
# (docs/testing.md, "Commands in the pages"; tests/test_doc_commands.sh).
#
# A command is, in a fenced block (``` ... ```):
#   - ```sh, ```bash or ```shell: every line but blank and comment lines;
#   - ```console, and a block with no language that has "$ " lines: the
#     "$ " lines (the prompt removed);
#   - a block with no language and no "$ " line: the lines that begin with
#     zerosim, ./zerosim, mpirun, mpiexec, sh or make;
#   (a line ending in \ continues on the next). Other languages (```text,
#   ```json) and indented blocks (synopses with placeholders) hold none.
# A command in a block after <!-- sample --> (or <!-- sample: ARGS -->) is
# run and its output compared by scripts/check-samples.sh (tests/test_docs.sh).
# Every other command is run here unless marked, in a comment at the end of
# its (last) line or on a comment line of its own just before it:
#   # not run: REASON      (needs a GPU, installs packages, takes an hour)
#   # run by: FILE         a test of the suite (Makefile.am lists it) runs it
#   # exits N              shown failing: the command must exit N (not 0)
# A command is run in the quick form: "--steps N" becomes "--steps 2" (not
# with --resume), so do "--retrain-steps N" and "--finetune-steps N"; a
# "zerosim train" with no --steps, --phantom, --print-program,
# --print-config or --help gets "--steps 2". Each page's commands run in the
# page's order in one scratch folder holding zerosim (the program under
# test, ZEROSIM; also first on the PATH) and links to the source tree's
# tests, scripts, labs, examples and docs; "mpirun -np N" and "mpiexec -n N"
# run tests/mpirun.sh N. A block's commands run in one shell (a variable set
# by one is seen by the next), each command's exit status checked.
#
# Usage: scripts/check-doc-commands.sh [--list] PAGE...
#   --list   print each command and what becomes of it, run nothing
# Exit status 0 when every command ran as marked, 1 otherwise (each named
# PAGE:LINE), 2 for bad usage.
set -u
list=0
[ "${1:-}" = --list ] && { list=1; shift; }
[ $# -ge 1 ] || { echo "usage: scripts/check-doc-commands.sh [--list] PAGE..." >&2; exit 2; }
TOP=$(cd "$(dirname "$0")/.." && pwd)
ZS=${ZEROSIM:-./zerosim}
case $ZS in /*) ;; *) ZS=$(pwd)/$ZS ;; esac
[ "$list" -eq 1 ] || [ -x "$ZS" ] ||
    { echo "check-doc-commands: no zerosim program at $ZS (build it, or set ZEROSIM)" >&2; exit 2; }
export OPENBLAS_NUM_THREADS=1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
BLOCK_TIMEOUT=${ZS_DOC_TIMEOUT:-300}
US=$(printf '\037')

# the "mpirun -np N" of the pages, as tests/mpirun.sh N
mkdir -p "$W/bin"
for m in mpirun mpiexec; do
    cat >"$W/bin/$m" <<EOF
#!/bin/sh
case \$1 in -np|-n) n=\$2; shift 2 ;; *) echo "$m: give -np N" >&2; exit 2 ;; esac
exec sh "$TOP/tests/mpirun.sh" "\$n" "\$@"
EOF
done
ln -s "$ZS" "$W/bin/zerosim"

# extract PAGE: one record per command, fields separated by \037 (US):
# line, block number, kind (sample, run, notrun, runby, exits), the mark's
# argument, the command as shown (continuations joined)
extract() {
    awk '
        function flush_cmd(   c, m, kind, arg) {
            c = cmd; cmd = ""; incont = 0
            kind = "run"; arg = ""; m = ""
            if (match(c, /[ \t]#.*$/)) { m = substr(c, RSTART); c = substr(c, 1, RSTART - 1) }
            if (m == "" && pending != "") m = pending
            pending = ""
            sub(/[ \t]+$/, "", c)
            if (c == "") return
            if (sample) kind = "sample"
            else if (m ~ /not run:/) {
                kind = "notrun"; arg = m; sub(/.*not run:[ \t]*/, "", arg)
                if (arg !~ /\(/) sub(/\)[ \t]*$/, "", arg)
            }
            else if (m ~ /run by:/) { kind = "runby"; arg = m; sub(/.*run by:[ \t]*/, "", arg); sub(/[ \t(;,)].*/, "", arg) }
            else if (m ~ /# exits [0-9]+/) { kind = "exits"; arg = m; sub(/.*# exits /, "", arg); sub(/[^0-9].*/, "", arg) }
            printf "%d\037%d\037%s\037%s\037%s\n", cline, nblock, kind, arg, c
        }
        /^```/ && !inb {
            inb = 1; nblock++; info = $0; sub(/^```[ \t]*/, "", info); sub(/[ \t].*/, "", info)
            sample = (last ~ /^<!-- sample(: .*)? -->$/)
            sampleof = (last ~ /^<!-- sample-of: /)
            nl = 0; dollar = 0; start = FNR
            next
        }
        /^```/ && inb { inb = 0; block_done(); last = $0; next }
        inb { body[++nl] = $0; if ($0 ~ /^\$ /) dollar = 1; next }
        NF { last = $0 }
        function block_done(   i, l, iscmd, shell) {
            if (sampleof) return
            shell = (info == "sh" || info == "bash" || info == "shell")
            if (!shell && info != "" && info != "console") return
            pending = ""; cmd = ""; incont = 0
            for (i = 1; i <= nl; i++) {
                l = body[i]
                if (incont) { sub(/^[ \t]+/, "", l); cmd = cmd " " l }
                else {
                    if (shell) iscmd = (l !~ /^[ \t]*(#|$)/)
                    else if (info == "console" || dollar) iscmd = (l ~ /^\$ /)
                    else iscmd = (l ~ /^(\.\/)?zerosim( |$)|^(mpirun|mpiexec|sh|make)( |$)/)
                    if (shell && l ~ /^[ \t]*#/) { if (l ~ /not run:|run by:|# exits /) pending = l; else pending = ""; continue }
                    if (!iscmd) { pending = ""; continue }
                    sub(/^\$ /, "", l); cmd = l; cline = start + i
                }
                if (cmd ~ /\\$/) { sub(/[ \t]*\\$/, "", cmd); incont = 1; continue }
                flush_cmd()
            }
            if (incont) flush_cmd()
        }
    ' "$1"
}

# quick CMD: the command's quick form (above)
quick() {
    printf '%s\n' "$1" | awk '{
        c = $0
        if (c !~ /--resume/) gsub(/--steps [0-9]+/, "--steps 2", c)
        gsub(/--retrain-steps [0-9]+/, "--retrain-steps 2", c)
        gsub(/--finetune-steps [0-9]+/, "--finetune-steps 2", c)
        if (c ~ /zerosim train( |$)/ && c !~ /--steps |--phantom|--print-program|--print-config|--help/) {
            if (match(c, / [|>;] .*$/)) c = substr(c, 1, RSTART - 1) " --steps 2" substr(c, RSTART)
            else c = c " --steps 2"
        }
        print c
    }'
}

# in_suite FILE: FILE (relative to the source tree) is a test make check-full runs
in_suite() {
    [ -f "$TOP/$1" ] && grep -q "^[[:space:]]*$1 *\\\\*\$" "$TOP/Makefile.am"
}

bad=0; n_run=0; n_sample=0; n_runby=0; n_notrun=0
for page in "$@"; do
    [ -f "$page" ] || { echo "check-doc-commands: no page $page" >&2; bad=$((bad + 1)); continue; }
    extract "$page" >"$W/cmds" || { bad=$((bad + 1)); continue; }
    slug=$(printf '%s' "$page" | tr -c 'A-Za-z0-9' _)
    dir=$W/run/$slug
    mkdir -p "$dir"
    for d in tests scripts labs examples docs; do ln -s "$TOP/$d" "$dir/$d"; done
    ln -s "$ZS" "$dir/zerosim"
    : >"$W/script"; : >"$W/expect"; blk=0
    run_block() { # the block's commands gathered so far, in one shell
        [ -s "$W/script" ] || return 0
        : >"$W/status"
        (cd "$dir" && PATH=$W/bin:$PATH timeout "$BLOCK_TIMEOUT" sh "$W/script") </dev/null \
            >"$W/block.log" 2>&1
        while IFS="$US" read -r b_line b_want b_cmd; do
            got=$(awk -v l="$b_line" '$1 == l { print $2 }' "$W/status")
            if [ -z "$got" ]; then
                echo "$page:$b_line: did not finish (a block's limit is $BLOCK_TIMEOUT s): $b_cmd"; bad=$((bad + 1))
            elif [ "$got" != "$b_want" ]; then
                echo "$page:$b_line: exited $got (expected $b_want): $b_cmd"
                sed -n "/^@@ $b_line @@\$/,/^@@ /p" "$W/block.log" | grep -v '^@@ ' | tail -n 4 | sed 's/^/  | /'
                bad=$((bad + 1))
            fi
        done <"$W/expect"
        : >"$W/script"; : >"$W/expect"
    }
    while IFS="$US" read -r line block kind arg cmd; do
        [ "$block" = "$blk" ] || { [ "$list" -eq 1 ] || run_block; blk=$block; }
        case $kind in
            sample) n_sample=$((n_sample + 1)); what="run by tests/test_docs.sh (a sample)" ;;
            notrun) n_notrun=$((n_notrun + 1)); what="not run: $arg"
                [ -n "$arg" ] || { echo "$page:$line: \"not run:\" without a reason: $cmd"; bad=$((bad + 1)); } ;;
            runby) n_runby=$((n_runby + 1)); what="run by $arg"
                in_suite "$arg" || { echo "$page:$line: \"run by: $arg\": not a test that Makefile.am lists: $cmd"; bad=$((bad + 1)); } ;;
            run|exits)
                n_run=$((n_run + 1)); want=0; [ "$kind" = exits ] && want=$arg
                q=$(quick "$cmd"); what="run here: $q"
                [ "$kind" = exits ] && what="$what (exits $want)"
                printf 'echo "@@ %s @@"\n{ %s\n} </dev/null 2>&1; echo "%s $?" >>"%s"\n' \
                    "$line" "$q" "$line" "$W/status" >>"$W/script"
                printf '%s\037%s\037%s\n' "$line" "$want" "$cmd" >>"$W/expect" ;;
        esac
        [ "$list" -eq 1 ] && echo "$page:$line: $what"
    done <"$W/cmds"
    [ "$list" -eq 1 ] || run_block
    rm -rf "$dir"
done
echo "check-doc-commands: $((n_run + n_sample + n_runby + n_notrun)) commands: $n_run run here, $n_sample samples (tests/test_docs.sh), $n_runby run by other tests, $n_notrun marked not run; $bad failed"
[ "$bad" -eq 0 ]
