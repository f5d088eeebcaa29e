#!/bin/sh
# Build zerosim's fuzz targets with clang's libFuzzer, AddressSanitizer and
# UBSan, then run each for FUZZ_SECONDS seconds (default 60) on its seed
# corpus (fuzz/corpus/<target>/). New inputs go to build-fuzz/corpus/<target>/;
# a crash, hang, leak or sanitizer report stops that target, leaves the input
# in build-fuzz/ and makes this script fail. `make fuzz` runs it.
#
# Usage: scripts/fuzz.sh [target ...]   (targets: config train_args plan_args,
# and the file readers: safetensors weights tokens manifest qfile zcfile
# calibration st_index)
# Environment: FUZZ_SECONDS, CLANG (default clang, then clang-14), BUILDDIR
# (a configured build tree, for build-config.h; default the source tree).
set -eu
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILDDIR=${BUILDDIR:-$SRC}
OUT=${FUZZ_OUT:-$BUILDDIR/build-fuzz}
SECONDS_EACH=${FUZZ_SECONDS:-60}
TARGETS=${*:-config train_args plan_args safetensors weights tokens manifest qfile zcfile calibration st_index}

CC_FUZZ=${CLANG:-}
if [ -z "$CC_FUZZ" ]; then
    for c in clang clang-14; do
        if command -v "$c" >/dev/null 2>&1; then CC_FUZZ=$c; break; fi
    done
fi
if [ -z "$CC_FUZZ" ]; then
    echo "fuzz: needs clang with libFuzzer (Debian: apt-get install clang); set CLANG=..." >&2
    exit 1
fi
if [ ! -f "$BUILDDIR/build-config.h" ]; then
    echo "fuzz: $BUILDDIR is not configured (no build-config.h): run ./configure first" >&2
    exit 1
fi
# MPI's flags: Open MPI's mpicc says them with --showme:compile and :link,
# MPICH's with -compile_info and -link_info (the compiler's name first)
if MPI_CFLAGS=$(mpicc --showme:compile 2>/dev/null); then
    MPI_LIBS=$(mpicc --showme:link)
elif MPI_CFLAGS=$(mpicc -compile_info 2>/dev/null); then
    MPI_CFLAGS=$(echo "$MPI_CFLAGS" | sed 's/^[^ ]* //; s/^-c //; s/ -c / /g')
    MPI_LIBS=$(mpicc -link_info | sed 's/^[^ ]* //')
else
    echo "fuzz: mpicc not found, or neither Open MPI's nor MPICH's: install libopenmpi-dev or libmpich-dev" >&2
    exit 1
fi
PKG_FLAGS=$(pkg-config --cflags jansson libxxhash 2>/dev/null || true)
PKG_LIBS=$(pkg-config --libs jansson libxxhash zlib 2>/dev/null || echo "-ljansson -lxxhash -lz")

SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
CFLAGS_FUZZ="-std=c11 -D_GNU_SOURCE -I$OUT/include -I$SRC/include -I$SRC/src $MPI_CFLAGS $PKG_FLAGS"
mkdir -p "$OUT/obj" "$OUT/include"
# the configured build-config.h without the CUDA backend: clang builds the
# host code only
{ echo "#include \"$BUILDDIR/build-config.h\""
  echo "#undef HAVE_CUDA"
  echo "#undef HAVE_NCCL"; } >"$OUT/include/build-config.h.new"
if cmp -s "$OUT/include/build-config.h.new" "$OUT/include/build-config.h"; then
    rm "$OUT/include/build-config.h.new"
else
    mv "$OUT/include/build-config.h.new" "$OUT/include/build-config.h"
    rm -f "$OUT"/obj/*.o
fi

# the library, once, instrumented for coverage (no libFuzzer main): every C
# source of libzerosim_la_SOURCES in Makefile.am, and the CLI files the
# argument targets call
LIBSRC="$(sed -n '/^libzerosim_la_SOURCES/,/^$/p' "$SRC/Makefile.am" | grep -o 'src/[^ ]*\.c' |
    sed 's|^src/||; s|\.c$||') cli/plan_cmd cli/plan_print cli/train_cmd cli/usage"
OBJS=""
for s in $LIBSRC; do
    o="$OUT/obj/$(echo "$s" | tr / _).o"
    if [ ! -f "$o" ] || [ -n "$(find "$SRC/src/$s.c" -newer "$o")" ]; then
        # shellcheck disable=SC2086
        "$CC_FUZZ" $CFLAGS_FUZZ $SAN -fsanitize=fuzzer-no-link -c "$SRC/src/$s.c" -o "$o" ||
            { echo "fuzz: cannot compile src/$s.c with $CC_FUZZ" >&2; exit 1; }
    fi
    OBJS="$OBJS $o"
done

rc=0
for t in $TARGETS; do
    [ -f "$SRC/fuzz/fuzz_$t.c" ] || { echo "fuzz: no target $t (fuzz/fuzz_$t.c)" >&2; exit 1; }
    # shellcheck disable=SC2086
    "$CC_FUZZ" $CFLAGS_FUZZ $SAN -fsanitize=fuzzer "$SRC/fuzz/fuzz_$t.c" $OBJS \
        $MPI_LIBS $PKG_LIBS -lopenblas -lm -o "$OUT/fuzz_$t" ||
        { echo "fuzz: cannot build fuzz_$t" >&2; exit 1; }
    mkdir -p "$OUT/corpus/$t" "$OUT/artifacts/$t" "$OUT/run"
    # the file readers' seeds are whole files of a few KB (fuzz/make_corpus.sh)
    case $t in config|train_args|plan_args) max_len=4096 ;; *) max_len=16384 ;; esac
    echo "fuzz: $t for $SECONDS_EACH s (corpus $OUT/corpus/$t, seeds fuzz/corpus/$t)"
    # the train target may read --config files: run where any relative
    # name it makes up is empty. -timeout=25: the planner builds the whole
    # step program, linear in buckets x micro-batches; valid giants (a
    # 4e11-parameter GPT with 9836 micro-batches: 8 million ops, 2 s
    # without sanitizers) took 15 s under ASan and tripped a 10 s limit
    if ! (cd "$OUT/run" && ASAN_OPTIONS=detect_leaks=1 "$OUT/fuzz_$t" \
            -max_total_time="$SECONDS_EACH" -timeout=25 -rss_limit_mb=4096 -max_len=$max_len \
            -close_fd_mask=1 -print_final_stats=1 \
            -artifact_prefix="$OUT/artifacts/$t/" \
            "$OUT/corpus/$t" "$SRC/fuzz/corpus/$t" >"$OUT/fuzz_$t.log" 2>&1); then
        echo "fuzz: $t FAILED: see $OUT/fuzz_$t.log and the input in $OUT/artifacts/$t/;" \
             "fix it and add the input to fuzz/regress/$t/" >&2
        rc=1
    fi
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$OUT/fuzz_$t.log" | sed "s/^/fuzz: $t: /"
done
exit $rc
