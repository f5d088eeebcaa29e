#!/bin/sh
# Install what zerosim needs from Debian 12's packages, and nothing when all
# of it is already there. Uses sudo when not run as root.
set -eu

PACKAGES="build-essential autoconf automake libtool pkg-config autoconf-archive
libopenmpi-dev openmpi-bin libopenblas-dev check gnuplot-nox
libjansson-dev libxxhash-dev procps"
# procps: pgrep, for tests/test_faults.sh. gcc's ASan and UBSan runtimes
# (scripts/test-sanitizers.sh) come with build-essential.

missing=""
for p in $PACKAGES; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

if [ -z "$missing" ]; then
    echo "install-deps: all packages present"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "install-deps: missing packages:$missing; run this script as root or install sudo" >&2
    exit 1
fi

echo "install-deps: installing$missing"
$SUDO apt-get update -qq
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
