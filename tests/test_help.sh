#!/bin/sh
# Every command answers --help and -h with its own usage: exit 0, the usage
# on stdout and nothing on stderr, a first "usage:" line that names the
# command. The commands are read from `zerosim --help` (every "zerosim NAME"
# in its usage lines, before the first blank line), so a command added there
# is covered without editing this test; they must be the commands that the
# line for an unknown command lists (main.c's dispatch), so a command added
# to one list and not the other fails here.
. "$(dirname "$0")/testlib.sh"

# commands_of FILE: the NAMEs of the usage lines (up to the first blank
# line) that begin, after "usage:" and blanks, with "zerosim NAME",
# "mpirun -np N zerosim NAME" or "[mpirun -np N] zerosim NAME" (NAME not
# an option), and of "; zerosim NAME" within one; sorted, one a line
commands_of() {
    sed '/^$/q' "$1" | sed 's/^usage://; s/^.*; *\(zerosim \)/\1/' |
        sed -n 's/^ *\[\{0,1\}\(mpirun -np N\]\{0,1\} \)\{0,1\}zerosim \([a-z][a-z-]*\).*/\2/p' | sort -u
}

if "$ZS" --help >"$T/usage" 2>"$T/usage.err"; then ok; else bad "zerosim --help: exit status $?"; fi
[ ! -s "$T/usage.err" ] && ok || bad "zerosim --help wrote to stderr: $(head -1 "$T/usage.err")"
commands_of "$T/usage" >"$T/commands"
n=$(wc -l <"$T/commands")
[ "$n" -ge 11 ] && ok || bad "zerosim --help names only $n commands: $(tr '\n' ' ' <"$T/commands")"
"$ZS" -h >"$T/usage-h" 2>&1 && cmp -s "$T/usage" "$T/usage-h" && ok || bad "zerosim -h differs from --help"

# the unknown command's list: "(commands: a, b, c; see zerosim --help)"
"$ZS" no-such-command >/dev/null 2>"$T/unknown.err" && bad "an unknown command exited 0" || ok
sed -n 's/.*(commands: \([^;]*\);.*/\1/p' "$T/unknown.err" | tr ',' '\n' | tr -d ' ' | grep . |
    sort -u >"$T/dispatched"
if [ -s "$T/dispatched" ] && cmp -s "$T/commands" "$T/dispatched"; then ok; else
    bad "zerosim --help's commands and the unknown command's list differ:"
    diff "$T/commands" "$T/dispatched"
fi

# help_names CMD FLAG: zerosim CMD FLAG exits 0, writes nothing on stderr, and
# its first "usage:" line names "zerosim CMD" (a word of its own)
help_names() {
    if "$ZS" "$1" "$2" >"$T/help.out" 2>"$T/help.err" </dev/null; then ok; else
        bad "zerosim $1 $2: exit status $? ($(head -1 "$T/help.err"))"; return
    fi
    [ ! -s "$T/help.err" ] && ok || bad "zerosim $1 $2 wrote to stderr: $(head -1 "$T/help.err")"
    first=$(grep -m1 '^usage:' "$T/help.out")
    if printf '%s\n' "$first" | grep -q "zerosim $1\( \|\$\)"; then ok; else
        bad "zerosim $1 $2: its usage line does not name the command: \"${first:-(none)}\""
    fi
}
while read -r cmd; do
    help_names "$cmd" --help
    cp "$T/help.out" "$T/help-long.out"
    help_names "$cmd" -h
    cmp -s "$T/help.out" "$T/help-long.out" && ok || bad "zerosim $cmd -h differs from --help"
done <"$T/commands"
echo "--help and -h of: $(tr '\n' ' ' <"$T/commands")"

# the checks can fail: a usage whose line names another command, and a
# command that is not one
printf 'usage: zerosim decompress --from FILE\n' >"$T/help.out"
first=$(grep -m1 '^usage:' "$T/help.out")
printf '%s\n' "$first" | grep -q "zerosim compress\( \|\$\)" && bad "decompress's usage passed for compress" || ok
"$ZS" no-such-command --help >/dev/null 2>&1 && bad "no-such-command --help exited 0" || ok
finish
