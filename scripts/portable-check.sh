#!/bin/sh
# Same bytes across builds: build the working tree in separate build
# directories (gcc -O0, gcc -O3, clang -O2 when clang is installed), run the
# fixed runs of tests/ref_hashes.txt with --backend ref --deterministic in
# each (and, in one build, under each of the CPU kernels' instruction sets
# and each OpenBLAS variant that Debian's alternatives offer), print every
# param_hash and the recorded one, and exit non-zero unless all are equal.
#
#     sh scripts/portable-check.sh [WORKDIR]     (default: a fresh mktemp -d)
#     BUILDS="gcc-O0 clang-O2" sh scripts/portable-check.sh   (a subset)
#
# The tree is copied (git's tracked and untracked-not-ignored files) and
# autoreconf'd once; each build is a VPATH build of zerosim and
# tests/check_ref only (JOBS=2 parallel jobs). What it does not check:
# another CPU architecture (no arm64 toolchain or qemu-user here), another
# C library, another operating system. docs/portable.md says what is
# guaranteed.
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
W=${1:-$(mktemp -d)}
JOBS=${JOBS:-2}
mkdir -p "$W" || exit 2
echo "# portable-check in $W"
rm -rf "$W/src"
mkdir -p "$W/src"
(cd "$SRC" && git ls-files -co --exclude-standard -z | xargs -0 tar cf - 2>/dev/null) |
    (cd "$W/src" && tar xf -) || { echo "cannot copy the tree from $SRC"; exit 2; }
(cd "$W/src" && autoreconf -fi >"$W/autoreconf.log" 2>&1) ||
    { echo "autoreconf failed: see $W/autoreconf.log"; exit 2; }

builds="gcc-O0:gcc:-O0 gcc-O3:gcc:-O3"
if command -v clang >/dev/null 2>&1; then
    builds="$builds clang-O2:clang:-O2"
else
    echo "# clang: not installed, not checked"
fi
if [ -n "${BUILDS:-}" ]; then
    keep=
    for b in $builds; do
        case " $BUILDS " in *" ${b%%:*} "*) keep="$keep $b" ;; esac
    done
    builds=${keep# }
fi
fail=0
for b in $builds; do
    name=${b%%:*}
    rest=${b#*:}
    cc=${rest%%:*}
    cflags=${rest#*:}
    d="$W/build-$name"
    mkdir -p "$d"
    echo "# building $name (OMPI_CC=MPICH_CC=$cc CFLAGS=$cflags)"
    # the wrapper's compiler: OMPI_CC for Open MPI's mpicc, MPICH_CC for MPICH's
    if ! (cd "$d" && OMPI_CC=$cc MPICH_CC=$cc "$W/src/configure" CFLAGS="$cflags" >configure.log 2>&1 &&
          make -j"$JOBS" zerosim tests/check_ref >make.log 2>&1); then
        echo "build $name failed: see $d/configure.log and $d/make.log"
        fail=1
    fi
done

# run_hashes LABEL BUILD-DIR [ENV=VALUE...]: each fixed run's param_hash
run_hashes() {
    label=$1 dir=$2
    shift 2
    [ -x "$dir/zerosim" ] || return
    env "$@" sh "$SRC/tests/ref_hashes.sh" "$dir/zerosim" "$W/run" 2>&1 |
        sed "s/^/$label /" | tee -a "$W/hashes.txt"
}
: >"$W/hashes.txt"
for b in $builds; do
    name=${b%%:*}
    run_hashes "$name" "$W/build-$name"
done
first=${builds%% *}
first=${first%%:*}
for isa in sse2 avx2 avx512; do
    run_hashes "$first+$isa" "$W/build-$first" ZEROSIM_CPU_KERNELS=$isa
done
for lib in /usr/lib/x86_64-linux-gnu/openblas*/libblas.so.3 /usr/lib/x86_64-linux-gnu/blas/libblas.so.3; do
    [ -e "$lib" ] || continue
    v=$(basename "$(dirname "$lib")")
    run_hashes "$first+LD_PRELOAD=$v" "$W/build-$first" LD_PRELOAD="$lib"
done
# each build's kernels against the recorded per-kernel hashes
for b in $builds; do
    name=${b%%:*}
    t="$W/build-$name/tests/check_ref"
    [ -x "$t" ] || continue
    if srcdir="$SRC" "$t" >"$W/check_ref-$name.log" 2>&1; then
        echo "$name check_ref: every kernel as recorded"
    else
        echo "$name check_ref: FAILED (see $W/check_ref-$name.log)"
        grep -m1 "first kernel\|differs" "$W/check_ref-$name.log"
        fail=1
    fi
done

echo "# recorded (tests/ref_hashes.txt) against every build and variant:"
while read -r run want _; do
    case $run in '#'* | '') continue ;; esac
    got=$(awk -v r="$run" '$2 == r { print $3 }' "$W/hashes.txt" | sort -u)
    n=$(awk -v r="$run" '$2 == r' "$W/hashes.txt" | wc -l)
    if [ "$got" = "$want" ]; then
        echo "$run: $want in all $n runs"
    else
        # shellcheck disable=SC2086,SC2116 # echo joins got's lines with spaces
        echo "$run: DIFFERS: recorded $want, got: $(echo $got)"
        fail=1
    fi
done <"$SRC/tests/ref_hashes.txt"
exit $fail
