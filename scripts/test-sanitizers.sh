#!/bin/sh
# A subset of the tests under AddressSanitizer (leaks included) and UBSan:
# the config reader's Check suite, the CLI tests, the fuzz regression inputs,
# and the accounting and ZeRO-stage tests at N = 2 ranks only. gcc builds it
# beside the normal build, in build-asan/: a copy of the sources (make
# distdir, into build-asan/src: the source tree itself is configured, which
# rules out a VPATH build from it) configured with --enable-sanitizers in
# build-asan/obj, only the programs these tests run. Open MPI's own leaks
# are suppressed (scripts/lsan.supp). Every sanitizer report goes to a file
# in build-asan/reports/; any report fails the run, even of a test that
# expected zerosim to fail. Prints "sanitizers: N passed, N failed (S s)".
# scripts/test.sh runs it after make check, from a built source tree.
set -u
cd "$(dirname "$0")/.." || exit 1
SRC=$(pwd)
B=$SRC/build-asan
t0=$(date +%s)
[ -f Makefile ] || { echo "sanitizers: run scripts/build.sh first (no Makefile)"; exit 1; }
mkdir -p "$B/obj"
# the copy keeps the sources' times, so build-asan/obj rebuilds only what changed
make -s distdir distdir="$B/src" >"$B/distdir.log" 2>&1 ||
    { tail -20 "$B/distdir.log"; echo "sanitizers: make distdir failed (build-asan/distdir.log)"; exit 1; }
if [ ! -f "$B/obj/Makefile" ]; then
    (cd "$B/obj" && ../src/configure -q --enable-sanitizers --without-cuda CFLAGS="-O1 -g") \
        >"$B/configure.log" 2>&1 ||
        { tail -20 "$B/configure.log"; echo "sanitizers: configure failed (build-asan/configure.log)"; exit 1; }
fi
# ZS_SANITIZER_TESTS: other tests to run instead of the subset below (shell
# tests and Check programs, e.g. "tests/check_quant tests/test_overlap.sh"),
# for a change that the subset does not reach
TESTS=${ZS_SANITIZER_TESTS:-"tests/check_config tests/test_cli.sh tests/test_train_cli.sh
    tests/test_fuzz_regress.sh tests/test_accounting.sh tests/test_zero_stages.sh
    tests/test_pipeline_moe.sh"}
# zerosim and every fuzz target's replay program that Makefile.am builds
# (test_fuzz_regress.sh replays each)
PROGS="zerosim $(sed -n 's|^[[:space:]]*\(fuzz/replay_[a-z_]*\).*|\1|p' "$SRC/Makefile.am" | sort -u |
    tr '\n' ' ')"
for t in $TESTS; do
    case $t in *.sh) ;; *) PROGS="$PROGS $t" ;; esac
done
# shellcheck disable=SC2086 # PROGS is a list
(cd "$B/obj" && make -j2 $PROGS) >"$B/build.log" 2>&1 ||
    { tail -30 "$B/build.log"; echo "sanitizers: build failed (build-asan/build.log)"; exit 1; }
t1=$(date +%s)

R=$B/reports
rm -rf "$R"
mkdir -p "$R"
# full stacks (slow unwinding), so that leaks from Open MPI's plugins, unloaded
# by exit, still show libmpi.so in their stack and match the suppressions
export ASAN_OPTIONS="log_path=$R/asan:detect_leaks=1:fast_unwind_on_malloc=0"
export LSAN_OPTIONS="suppressions=$SRC/scripts/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="log_path=$R/ubsan:print_stacktrace=1:halt_on_error=1"
export ZEROSIM="$B/obj/zerosim" MPIEXEC="${MPIEXEC:-mpiexec}" OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# the sweeps of test_accounting.sh and test_zero_stages.sh at N = 2 only, and
# not every precision (mixed precision and the fixed-point sums; fp16's loss
# scaling), to stay within a few minutes
export ZS_TEST_RANKS=2 ZS_TEST_QUICK=1 ZS_TEST_VARIANTS="bf16 det" ZS_TEST_PRECISIONS="fp32 fp16"

pass=0 fail=0
for t in $TESTS; do
    name=$(basename "$t")
    s=$(date +%s)
    case $t in
        *.sh) sh "$SRC/$t" >"$B/$name.log" 2>&1 ;;
        *) "$B/obj/$t" >"$B/$name.log" 2>&1 ;;
    esac
    rc=$?
    reports=$(find "$R" -type f 2>/dev/null | wc -l)
    if [ "$rc" -eq 0 ] && [ "$reports" -eq 0 ]; then
        pass=$((pass + 1)); echo "PASS: $t ($(($(date +%s) - s)) s)"
    else
        fail=$((fail + 1)); echo "FAIL: $t (exit $rc, $reports sanitizer reports; build-asan/$name.log)"
        tail -5 "$B/$name.log"
        for f in "$R"/*; do [ -f "$f" ] && { echo "--- $f"; head -40 "$f"; }; done
        mkdir -p "$B/failed-reports" && mv "$R"/* "$B/failed-reports/" 2>/dev/null
    fi
done
echo "sanitizers: $pass passed, $fail failed ($(($(date +%s) - t0)) s, of which build $((t1 - t0)) s)"
[ "$fail" -eq 0 ]
