#!/bin/sh
# The comm layer's Check suite under MPI with 1, 2, 3 and 4 ranks (the
# fast tier, make check: 3 ranks, the odd size whose shards and rings are
# uneven; every other test runs 2 and 4).
set -u
HERE=$(dirname "$0")
sizes="1 2 3 4"
[ "${ZS_TEST_LEVEL:-full}" = fast ] && sizes=3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMPI_MCA_orte_tmpdir_base="$T" # as tests/testlib.sh says why
fails=0
for n in $sizes; do
    echo "== $n ranks"
    sh "$HERE/mpirun.sh" "$n" ./tests/check_comm || fails=$((fails + 1))
done
[ "$fails" -eq 0 ]
