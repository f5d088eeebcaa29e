#!/bin/sh
# Build zerosim and run its fast test suite (make check) with MPICH instead
# of Open MPI, in a Debian 12 (bookworm) chroot made for it:
#   1. the chroot, once: debootstrap (or mmdebstrap) --variant=minbase, then
#      scripts/install-deps.sh with MPI=mpich inside it (libmpich-dev and
#      mpich in place of Open MPI's packages);
#   2. every run: this tree's files (git's tracked and untracked, not the
#      ignored build outputs) copied to /root/zerosim in it, configure (the
#      first time, or after --clean), make, make check.
# Usage: scripts/mpich-check.sh [--clean] [TEST...]
#   TEST...  run only these tests (make check TESTS="..."), e.g.
#            tests/check_config tests/test_comm.sh
#   --clean  remove the copy's build first (configure again)
# The chroot is kept, and reused, in ZS_MPICH_CHROOT (default
# $HOME/.cache/zerosim/debian12-mpich; about 1 GB). Needs root, chroot, and
# for the first run debootstrap or mmdebstrap and the network
# (ZS_DEBIAN_MIRROR, default http://deb.debian.org/debian). Linux only.
# Exit status: make check's; 2 on bad usage; 3 when the chroot cannot be
# made (not root, no debootstrap); 4 when it fails to build.
set -eu

TOP=$(cd "$(dirname "$0")/.." && pwd)
R=${ZS_MPICH_CHROOT:-${HOME:-/root}/.cache/zerosim/debian12-mpich}
MIRROR=${ZS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
clean=0
tests=""
for a in "$@"; do
    case $a in
        --clean) clean=1 ;;
        -*) echo "mpich-check: unknown option '$a' (usage: mpich-check.sh [--clean] [TEST...])" >&2; exit 2 ;;
        *) tests="$tests $a" ;;
    esac
done

say() { echo "mpich-check: $*"; }
if [ "$(id -u)" -ne 0 ]; then
    echo "mpich-check: needs root (debootstrap, chroot and mounting /proc in it): run it with sudo" >&2
    exit 3
fi
command -v chroot >/dev/null 2>&1 || { echo "mpich-check: no chroot command (coreutils)" >&2; exit 3; }

# in_root CMD: run the shell command CMD in the chroot, as root, with a
# clean environment
in_root() {
    chroot "$R" /usr/bin/env -i HOME=/root LANG=C.UTF-8 \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        /bin/sh -c "$1"
}

# ---- 1. the chroot ------------------------------------------------------------
if [ ! -x "$R/usr/bin/apt-get" ]; then
    mkdir -p "$R"
    if command -v mmdebstrap >/dev/null 2>&1; then
        say "making Debian 12 in $R (mmdebstrap, a few minutes)"
        mmdebstrap --variant=minbase bookworm "$R" "$MIRROR" || {
            echo "mpich-check: mmdebstrap failed (network? $MIRROR)" >&2; exit 3; }
    elif command -v debootstrap >/dev/null 2>&1; then
        say "making Debian 12 in $R (debootstrap, a few minutes)"
        debootstrap --variant=minbase bookworm "$R" "$MIRROR" >"$R.debootstrap.log" 2>&1 || {
            echo "mpich-check: debootstrap failed (network? $MIRROR): see $R.debootstrap.log" >&2
            exit 3; }
    else
        echo "mpich-check: neither debootstrap nor mmdebstrap: install one (Debian: apt-get install debootstrap)" >&2
        exit 3
    fi
fi

# /proc (the fault tests read other ranks' /proc/PID), /sys (hwloc's and
# UCX's view of the cores and network, else they complain on every start)
# and a /dev/shm of its own (MPICH's shared memory), mounted for this run;
# /dev itself is debootstrap's nodes, not the host's
mounted=""
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    for m in $mounted; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mount -t proc proc "$R/proc" && mounted="$R/proc"
mount -t sysfs sys "$R/sys" && mounted="$R/sys $mounted"
mkdir -p "$R/dev/shm"
mount -t tmpfs -o mode=1777,size=1g shm "$R/dev/shm" && mounted="$R/dev/shm $mounted"
for d in null zero random urandom; do
    [ -c "$R/dev/$d" ] || { echo "mpich-check: $R/dev/$d is missing (debootstrap made no device nodes)" >&2; exit 3; }
done

# again when install-deps.sh changed since (its copy there is the one that ran)
if [ ! -f "$R/root/.zs-deps-mpich" ] || ! cmp -s "$TOP/scripts/install-deps.sh" "$R/root/install-deps.sh"; then
    say "installing the build dependencies with MPI=mpich"
    rm -f "$R/root/.zs-deps-mpich"
    cp "$TOP/scripts/install-deps.sh" "$R/root/install-deps.sh"
    in_root 'MPI=mpich sh /root/install-deps.sh' || {
        echo "mpich-check: install-deps.sh (MPI=mpich) failed in the chroot" >&2; exit 3; }
    touch "$R/root/.zs-deps-mpich"
fi

# ---- 2. the tree, built and tested -----------------------------------------------
W=/root/zerosim
if [ "$clean" -eq 1 ]; then
    rm -rf "${R:?}$W"
fi
mkdir -p "$R$W"
say "copying $TOP to $W in the chroot"
(cd "$TOP" && git ls-files -z --cached --others --exclude-standard |
    tr '\0' '\n' | while IFS= read -r f; do [ -e "$f" ] && printf '%s\n' "$f"; done |
    tar -cf - -T -) | (cd "$R$W" && tar -xf -)

say "building ($(in_root 'mpichversion 2>/dev/null | head -1'))"
in_root "cd $W && { [ -f Makefile ] || { autoreconf -fi && ./configure; }; } >build.log 2>&1 &&
    make -j\"\$(nproc)\" >>build.log 2>&1" || {
    tail -n 30 "$R$W/build.log" >&2
    echo "mpich-check: the build failed in the chroot: see $R$W/build.log" >&2
    exit 4; }
grep -E '^ +mpiexec:' "$R$W/build.log" | sed 's/^ */mpich-check: /' || true

say "make check${tests:+ TESTS=\"${tests# }\"}"
rc=0
if [ -n "$tests" ]; then
    in_root "cd $W && make check TESTS='${tests# }'" || rc=$?
else
    in_root "cd $W && make check" || rc=$?
fi
if [ "$rc" -ne 0 ]; then
    say "make check failed under MPICH: the logs are in $R$W/tests/ (test-suite.log: $R$W/test-suite.log)"
fi
exit "$rc"
