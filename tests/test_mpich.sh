#!/bin/sh
# The fast suite under MPICH (full tier: 15-30 minutes the first time):
# scripts/mpich-check.sh builds this tree in a Debian 12 chroot with
# libmpich-dev in place of Open MPI and runs make check there; the test
# passes when that make check does. It skips (77) where the chroot cannot be
# made: not root, not Linux, no chroot command, or, before the chroot exists
# (ZS_MPICH_CHROOT, the script's default otherwise), no debootstrap or
# mmdebstrap or no route to the Debian mirror.
. "$(dirname "$0")/testlib.sh"

skip() { echo "SKIP: $*"; exit 77; }
[ "$(uname -s)" = Linux ] || skip "not Linux (a Debian chroot)"
[ "$(id -u)" -eq 0 ] || skip "not root (debootstrap and chroot need root)"
command -v chroot >/dev/null 2>&1 || skip "no chroot command"
R=${ZS_MPICH_CHROOT:-${HOME:-/root}/.cache/zerosim/debian12-mpich}
if [ ! -x "$R/usr/bin/apt-get" ]; then
    command -v debootstrap >/dev/null 2>&1 || command -v mmdebstrap >/dev/null 2>&1 ||
        skip "neither debootstrap nor mmdebstrap to make the chroot in $R"
    host=$(echo "${ZS_DEBIAN_MIRROR:-http://deb.debian.org/debian}" | sed 's|^[a-z]*://||; s|/.*||')
    getent hosts "$host" >/dev/null 2>&1 || skip "$host cannot be resolved (no network for the chroot)"
fi

# the chroot's run: its own output in the log, the result here
if sh "$HERE/../scripts/mpich-check.sh" >"$T/mpich.log" 2>&1; then
    ok
else
    bad "make check under MPICH failed:"
    tail -n 40 "$T/mpich.log"
fi
grep -E '^(# (PASS|FAIL|SKIP|ERROR|TOTAL)|mpich-check: )' "$T/mpich.log" || true
finish
