#!/bin/sh
# Install what zerosim needs, and nothing when all of it is already there:
# Debian's packages with apt-get (Debian 12, what CI runs; uses sudo when not
# run as root), Fedora's with dnf, or Homebrew's with brew (macOS). Where it
# cannot install (no root and no sudo, or none of these package managers),
# it prints the command it would run, or the packages to find, and exits 1.
# --dry-run: print the command that would install what is missing, and stop.
set -eu

dry=0
case ${1:-} in
    --dry-run|-n) dry=1 ;;
    "") ;;
    *) echo "install-deps: unknown option '$1' (usage: install-deps.sh [--dry-run])" >&2; exit 2 ;;
esac

PACKAGES="build-essential autoconf automake libtool pkg-config autoconf-archive
libopenmpi-dev openmpi-bin libopenblas-dev check gnuplot-nox
libjansson-dev libxxhash-dev zlib1g-dev dataset-fashion-mnist procps python3"
# dataset-fashion-mnist: Fashion-MNIST's IDX files in
# /usr/share/datasets/fashion-mnist, for `--data fashion-mnist` and
# tests/test_fashion_mnist.sh (which skips without them).
# procps: pgrep, for tests/test_faults.sh; python3: the token files of
# tests/test_data_dump.sh (PyTorch, python3-torch, stays optional: the
# tests that need it skip without it). gcc's ASan and UBSan runtimes
# (scripts/test-sanitizers.sh) come with build-essential.

# Fedora's names for the same (Open MPI's mpicc is in /usr/lib64/openmpi/bin:
# `module load mpi/openmpi-x86_64` puts it on the PATH)
DNF_PACKAGES="gcc make autoconf automake libtool pkgconf-pkg-config autoconf-archive
openmpi-devel openblas-devel check-devel gnuplot jansson-devel xxhash-devel
zlib-devel procps-ng python3"

# Homebrew's (macOS: clang is the compiler, from the Xcode command line tools)
BREW_PACKAGES="open-mpi openblas check gnuplot autoconf automake libtool
pkg-config autoconf-archive jansson xxhash zlib"

# sudo_or_say COMMAND...: the prefix to run a root command with: nothing as
# root, sudo when there is one; otherwise say what to run and stop
sudo_or_say() {
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=""
    elif command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "install-deps: missing packages:$missing; run this script as root or install sudo" >&2
        echo "install-deps: as root it would run: $*" >&2
        exit 1
    fi
}

if command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
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
    if [ "$dry" -eq 1 ]; then
        echo "apt-get update -qq && apt-get install -y -qq --no-install-recommends$missing"
        exit 0
    fi

    sudo_or_say "apt-get update -qq && apt-get install -y -qq --no-install-recommends$missing"

    echo "install-deps: installing$missing"
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
elif command -v dnf >/dev/null 2>&1 && command -v rpm >/dev/null 2>&1; then
    missing=""
    for p in $DNF_PACKAGES; do
        rpm -q "$p" >/dev/null 2>&1 || missing="$missing $p"
    done
    if [ -z "$missing" ]; then
        echo "install-deps: all packages present"
        exit 0
    fi
    if [ "$dry" -eq 1 ]; then
        echo "dnf install -y$missing"
        exit 0
    fi
    sudo_or_say "dnf install -y$missing"
    echo "install-deps: installing$missing"
    # shellcheck disable=SC2086
    $SUDO dnf install -y $missing
    echo "install-deps: Open MPI's mpicc is in /usr/lib64/openmpi/bin: run 'module load mpi/openmpi-x86_64' (or add it to PATH) before ./configure"
elif command -v brew >/dev/null 2>&1; then
    missing=""
    for p in $BREW_PACKAGES; do
        brew list --versions "$p" >/dev/null 2>&1 || missing="$missing $p"
    done
    if [ -z "$missing" ]; then
        echo "install-deps: all packages present"
        exit 0
    fi
    if [ "$dry" -eq 1 ]; then
        echo "brew install$missing"
        exit 0
    fi
    # Homebrew refuses to run as root, and needs no sudo
    echo "install-deps: installing$missing"
    # shellcheck disable=SC2086
    brew install $missing
else
    echo "install-deps: found none of apt-get, dnf or brew; install these (Debian's names) with your package manager:" $PACKAGES >&2
    exit 1
fi
