#!/bin/sh
# Set everything up, run the whole test suite (make check-full: every test,
# each whole; make check alone is the fast tier), then a subset of
# it under AddressSanitizer and UBSan (scripts/test-sanitizers.sh, its own
# build in build-asan/), and print one closing line "N passed, N failed,
# N skipped; sanitizers: N passed, N failed". The sanitizer subset runs
# here rather than inside make check because it needs a second build of the
# whole library with other compiler flags. ZS_SKIP_SANITIZERS=1 leaves it out.
set -u
cd "$(dirname "$0")/.." || exit 1
sh scripts/build.sh || exit 1
export OPENBLAS_NUM_THREADS=1
t0=$(date +%s)
make -j2 check-full
rc=$?
echo "make check-full took $(($(date +%s) - t0)) s (load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null))"
# the slowest shell tests (testlib's finish prints each one's seconds), for
# keeping make check-full within its budget of about 10 minutes on 2 cores
echo "slowest tests (seconds):"
for f in tests/test_*.log; do
    s=$(sed -n 's/^[0-9]* passed, [0-9]* failed (\([0-9]*\) s)$/\1/p' "$f" | tail -1)
    [ -n "$s" ] && echo "$s ${f%.log}"
done | sort -rn | head -8 | sed 's/^/  /'
# what each failing test said, here at the end where a short excerpt of
# this output still shows it
for f in tests/*.log; do
    if grep -q '^:test-result: \(FAIL\|ERROR\)' "${f%.log}.trs" 2>/dev/null; then
        echo "${f%.log} failed; its FAIL lines and last lines:"
        { grep '^FAIL' "$f" | head -10; tail -5 "$f"; } | sed 's/^/  | /'
    fi
done
summary=$(sed -n 's/^# \(PASS\|FAIL\|ERROR\|SKIP\): *\([0-9]*\)/\1 \2/p' test-suite.log 2>/dev/null)
p=$(echo "$summary" | awk '$1=="PASS"{print $2}')
f=$(echo "$summary" | awk '$1=="FAIL"||$1=="ERROR"{s+=$2} END{print s+0}')
s=$(echo "$summary" | awk '$1=="SKIP"{print $2}')
san="sanitizers: not run (ZS_SKIP_SANITIZERS)"
if [ -z "${ZS_SKIP_SANITIZERS:-}" ]; then
    sh scripts/test-sanitizers.sh >sanitizers.log 2>&1
    src=$? # the script's own status (through a pipe it would be tee's)
    cat sanitizers.log
    san=$(sed -n 's/^\(sanitizers: [0-9]* passed, [0-9]* failed\).*/\1/p' sanitizers.log | tail -1)
    [ -n "$san" ] || san="sanitizers: did not run to the end (sanitizers.log)"
    [ "$src" -eq 0 ] || [ "$rc" -ne 0 ] || rc=1
fi
echo "${p:-0} passed, ${f:-0} failed, ${s:-0} skipped; $san"
exit $rc
