#!/bin/sh
# Every shell command that README.md, docs/*.md and labs/*/README.md show in
# a fenced block runs as shown (in its quick form: fewer steps), or is a
# sample that tests/test_docs.sh runs, or is marked "run by: TEST" (a test of
# the suite) or "not run: REASON" (scripts/check-doc-commands.sh; the rule
# in docs/testing.md). Then: each check can fail, on a small page: a
# command that fails (compress without --out, as docs/quantization.md once
# showed it), a mark without a reason, a "run by:" that names no test, a
# command shown failing that succeeds.
. "$(dirname "$0")/testlib.sh"
srcdir=${srcdir:-$(dirname "$0")/..}
CHECK=$srcdir/scripts/check-doc-commands.sh
ZEROSIM=$ZS; export ZEROSIM

pages=$(ls "$srcdir"/README.md "$srcdir"/docs/*.md "$srcdir"/labs/README.md "$srcdir"/labs/*/README.md)
# shellcheck disable=SC2086 # pages is a list of paths without blanks
if sh "$CHECK" $pages >"$T/all.log" 2>&1; then ok; else
    bad "a page shows a command that does not run as shown:"; grep -v '^check-doc-commands:' "$T/all.log"
fi
tail -1 "$T/all.log"
n=$(sed -n 's/^check-doc-commands: \([0-9]*\) commands: \([0-9]*\) run here.*/\1 \2/p' "$T/all.log")
# shellcheck disable=SC2086 # n is two numbers
set -- $n
[ "${1:-0}" -ge 90 ] && [ "${2:-0}" -ge 20 ] && ok || bad "only ${1:-0} commands found, ${2:-0} run here"

# a labs page's samples are not checked by tests/test_docs.sh (README and
# docs/ only): a sample block there would be counted as run and is not
sh "$CHECK" --list "$srcdir"/labs/README.md "$srcdir"/labs/*/README.md >"$T/labs.list" 2>&1
grep -q 'a sample)$' "$T/labs.list" && bad "a labs page has a sample block that no test checks" || ok

# the checks can fail
cat >"$T/fake.md" <<'P'
A page.

```sh
zerosim train --model mlp --input-dim 16 --widths 8 --classes 4 --steps 30 --save-dir ck
zerosim compress --from ck --micro-batch 8 --samples 64
zerosim no-such-command     # exits 2
zerosim mesh --world 4 --tp 2   # exits 2
```

```console
$ zerosim mesh --world 4 --tp 3
```

<!-- sample -->
```
$ zerosim no-such-command
```

```sh
sh scripts/nothing.sh   # not run:
sh scripts/nothing.sh   # run by: tests/no_such_test.sh
# not run: the next line's reason
sh scripts/nothing.sh
```
P
sh "$CHECK" "$T/fake.md" >"$T/fake.log" 2>&1 && bad "a page with failing commands passed" || ok
for want in 'fake.md:5: exited 2 (expected 0): zerosim compress --from ck' \
            'fake.md:7: exited 0 (expected 2): zerosim mesh' \
            'fake.md:11: exited [0-9]* (expected 0): zerosim mesh --world 4 --tp 3' \
            'fake.md:20: "not run:" without a reason' \
            'fake.md:21: "run by: tests/no_such_test.sh": not a test'; do
    grep -q "^$T/$want" "$T/fake.log" && ok || { bad "not named: $want"; cat "$T/fake.log"; }
done
# the train ran (2 steps, the quick form) and the command shown failing
# failed as shown; the sample and the marked line were not run here
grep -q 'fake.md:4:\|fake.md:6:\|fake.md:16:\|fake.md:23:' "$T/fake.log" && { bad "a good line was named:"; cat "$T/fake.log"; } || ok
grep -q '^check-doc-commands: 9 commands: 5 run here, 1 samples (tests/test_docs.sh), 1 run by other tests, 2 marked not run; 5 failed$' "$T/fake.log" && ok ||
    { bad "the small page's count is not as written:"; tail -1 "$T/fake.log"; }
finish
