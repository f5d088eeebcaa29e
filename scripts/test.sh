#!/bin/sh
# Set everything up, then run the whole test suite (make check) and print
# one closing line "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
sh scripts/build.sh || exit 1
export OPENBLAS_NUM_THREADS=1
make -j2 check
rc=$?
summary=$(sed -n 's/^# \(PASS\|FAIL\|ERROR\|SKIP\): *\([0-9]*\)/\1 \2/p' test-suite.log 2>/dev/null)
p=$(echo "$summary" | awk '$1=="PASS"{print $2}')
f=$(echo "$summary" | awk '$1=="FAIL"||$1=="ERROR"{s+=$2} END{print s+0}')
s=$(echo "$summary" | awk '$1=="SKIP"{print $2}')
echo "${p:-0} passed, ${f:-0} failed, ${s:-0} skipped"
exit $rc
