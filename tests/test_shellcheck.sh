#!/bin/sh
# The shell scripts are POSIX sh that shellcheck finds nothing in, and the
# ones a student runs (scripts/ and labs/) use no GNU-only flag that macOS's
# BSD tools lack (docs/install.md):
#  - `shellcheck -s sh` passes on every script under scripts/, tests/*.sh,
#    labs/*/run.sh, labs/*.sh and .ci/run (tests/.shellcheckrc and
#    labs/.shellcheckrc turn off the checks of the tests' own idioms, with
#    their reasons; a deliberate exception elsewhere is disabled on its line)
#  - no `sed -i` without a suffix, `readlink -f`, `date -d`, `stat -c` or
#    `tac` in scripts/*.sh and labs/
#  - the check itself fails on a script with a POSIX error and on one with
#    `sed -i` (so that a shellcheck that checks nothing is not a pass)
# Skips (77) without shellcheck.
. "$(dirname "$0")/testlib.sh"

command -v shellcheck >/dev/null 2>&1 || { echo "SKIP: no shellcheck (Debian: apt-get install shellcheck)"; exit 77; }
TOP=$HERE/..

# gnu_only FILE...: the lines that use a GNU-only flag, as FILE:LINE: text
gnu_only() {
    grep -nE '(^|[;&|({ ])(sed -i( |$)|readlink -f|date -d|date --date|stat -c|tac( |$))' "$@" /dev/null |
        grep -v '^[^:]*:[0-9]*: *#'
}

# ---- every script (one shellcheck for all: it starts slowly) ------------------------
set --
for f in "$TOP"/scripts/*.sh "$TOP"/tests/*.sh "$TOP"/labs/*/run.sh "$TOP"/labs/*.sh "$TOP"/.ci/run; do
    [ -f "$f" ] && set -- "$@" "$f"
done
[ "$#" -ge 40 ] && ok || bad "only $# scripts found under $TOP"
if shellcheck -s sh -f gcc "$@" >"$T/sc.out" 2>&1; then
    ok
else
    bad "shellcheck -s sh finds $(wc -l <"$T/sc.out") things in $(cut -d: -f1 "$T/sc.out" | sort -u | wc -l) scripts:"
    sed "s|^$TOP/||" "$T/sc.out" | head -n 40
fi

if gnu_only "$TOP"/scripts/*.sh "$TOP"/labs/*.sh "$TOP"/labs/*/run.sh >"$T/gnu.out"; then
    bad "GNU-only flags in the scripts students run (macOS lacks them):"
    cat "$T/gnu.out"
else
    ok
fi

# ---- the checks find what they are for ---------------------------------------------
mkdir -p "$T/bad"
# shellcheck disable=SC2016 # the $x is the bad script's own
printf '#!/bin/sh\nlocal x=1\n[ "$x" == 1 ] && echo same\n' >"$T/bad/posix.sh"
if shellcheck -s sh "$T/bad/posix.sh" >/dev/null 2>&1; then
    bad "shellcheck passed a script with local and == outside a function"
else
    ok
fi
# shellcheck disable=SC2016 # the $1 is the bad script's own
printf '#!/bin/sh\nsed -i "s/a/b/" "$1"\n' >"$T/bad/sed.sh"
gnu_only "$T/bad/sed.sh" >/dev/null && ok || bad "gnu_only missed sed -i without a suffix"
# shellcheck disable=SC2016 # the $1 is the bad script's own
printf '#!/bin/sh\nsed -i.bak "s/a/b/" "$1"\n' >"$T/bad/sed-ok.sh"
gnu_only "$T/bad/sed-ok.sh" >/dev/null && bad "gnu_only named sed -i.bak, which BSD sed takes" || ok
finish
