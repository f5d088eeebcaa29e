#!/bin/sh
# The documentation stays true: every sample output that README.md and
# docs/*.md quote (blocks marked <!-- sample -->) is printed again by the
# program and compared line by line (scripts/check-samples.sh), so a change
# that moves a number fails here until the page moves with it; the numbers
# tagged in the prose are measured again (docs/numbers.sh) and compared
# (labs/check-page.sh); every link between the pages leads somewhere
# (scripts/check-links.sh). Then: each check can fail (a changed byte count,
# a row dropped without "...", a broken link).
. "$(dirname "$0")/testlib.sh"
srcdir=${srcdir:-$(dirname "$0")/..}
CHECK=$srcdir/scripts/check-samples.sh
ZEROSIM=$ZS; export ZEROSIM

pages=$(ls "$srcdir"/README.md "$srcdir"/docs/*.md)
if sh "$CHECK" $pages >"$T/samples.log" 2>&1; then ok; else
    bad "a page quotes output the program no longer prints:"; cat "$T/samples.log"
fi
tail -1 "$T/samples.log"
n=$(sed -n 's/^check-samples: \([0-9]*\) sample blocks.*/\1/p' "$T/samples.log")
[ "${n:-0}" -ge 8 ] && ok || bad "only ${n:-0} sample blocks checked"

# the numbers quoted in the pages' prose (tagged <!--name-->value) against
# what docs/numbers.sh measures now, by the labs' page check
if sh "$srcdir/docs/numbers.sh" "$T/numbers.txt" >"$T/numbers.log" 2>&1; then ok; else
    bad "docs/numbers.sh failed:"; cat "$T/numbers.log"
fi
tagged=0
for page in $pages; do
    grep -q '<!--~\{0,1\}[a-z0-9_]*-->' "$page" || continue
    tagged=$((tagged + 1))
    if sh "$srcdir/labs/check-page.sh" "$page" "$T/numbers.txt" >"$T/page.log" 2>&1; then ok; else
        bad "$page quotes numbers the program no longer gives:"; cat "$T/page.log"
    fi
    echo "$(basename "$page"): $(cat "$T/page.log")"
done
[ "$tagged" -ge 1 ] && ok || bad "no page has tagged numbers"
# a changed number fails
sed 's/<!--gpt3_default_peak_gb-->[0-9]*/<!--gpt3_default_peak_gb-->343/' "$srcdir/docs/phantom.md" >"$T/phantom.md"
sh "$srcdir/labs/check-page.sh" "$T/phantom.md" "$T/numbers.txt" >"$T/out" 2>&1 && bad "a changed GPT-3 figure passed" ||
    { grep -q 'gpt3_default_peak_gb reads 343' "$T/out" && ok || { bad "the changed figure was not named"; cat "$T/out"; }; }

# the links between the pages: files that exist, headings that exist
if sh "$srcdir/scripts/check-links.sh" $pages "$srcdir"/labs/README.md "$srcdir"/labs/*/README.md >"$T/links.log" 2>&1; then ok; else
    bad "broken links:"; cat "$T/links.log"
fi
tail -1 "$T/links.log"
printf 'see [x](no-such.md), [y](#nowhere) and [z](%s#the-step-as-a-program)\n# Here\n' \
    "$(cd "$srcdir/docs" && pwd)/training.md" >"$T/links.md"
sh "$srcdir/scripts/check-links.sh" "$T/links.md" >"$T/out" 2>&1
[ "$(grep -c 'no such file\|no heading' "$T/out")" -eq 2 ] && ok || { bad "check-links missed a broken link"; cat "$T/out"; }

# the check can fail: a page whose sample has one byte count changed, one
# whose sample leaves out a line without "...", one with an unclosed block
cat >"$T/good.md" <<'P'
<!-- sample -->
```
$ zerosim mesh --world 4 --tp 2
mesh: 4 ranks = tp 2 x dp 2 x pp 1 (rank = tp_rank + 2 x (dp_rank + 2 x pp_rank))
tp groups (2 of 2): [0,1] [2,3]
dp groups (2 of 2): [0,2] [1,3]
pp groups (4 of 1): [0] [1] [2] [3]
```
P
sh "$CHECK" "$T/good.md" >"$T/out" 2>&1 && ok || { bad "a true sample failed:"; cat "$T/out"; }
sed 's/\[1,3\]$/[1,4]/' "$T/good.md" >"$T/changed.md"
sh "$CHECK" "$T/changed.md" >"$T/out" 2>&1 && bad "a changed number passed" ||
    { grep -q 'changed.md line 6: the page says "dp groups (2 of 2): \[0,2\] \[1,4\]"' "$T/out" && ok ||
        { bad "the changed number was not named:"; cat "$T/out"; }; }
grep -v '^tp groups' "$T/good.md" >"$T/dropped.md"
sh "$CHECK" "$T/dropped.md" >"$T/out" 2>&1 && bad "a dropped row passed" || ok
sed 's/^tp groups.*/.../' "$T/good.md" >"$T/ellipsis.md"
sh "$CHECK" "$T/ellipsis.md" >"$T/out" 2>&1 && ok || { bad "a row left out with ... failed:"; cat "$T/out"; }
# --update rewrites a block that quotes a whole output (the key list)
sed 's/^seed: used$/seed: unknown/' "$srcdir/docs/configuration.md" >"$T/cfg.md"
sh "$CHECK" "$T/cfg.md" >/dev/null 2>&1 && bad "a changed key list passed" || ok
sh "$CHECK" --update "$T/cfg.md" >/dev/null 2>&1 && cmp -s "$T/cfg.md" "$srcdir/docs/configuration.md" && ok ||
    bad "--update did not restore the key list"
sed '$d' "$T/good.md" >"$T/open.md"
sh "$CHECK" "$T/open.md" >"$T/out" 2>&1 && bad "an unclosed block passed" || ok
finish
