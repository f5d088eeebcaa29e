#!/bin/sh
# Install what zerosim needs, and nothing when all of it is already there:
# Debian's packages with apt-get (Debian 12, what CI runs, and Ubuntu 24.04,
# whose names are the same; uses sudo when not run as root), Fedora's with
# dnf, or Homebrew's with brew (macOS). Where it cannot install (no root and
# no sudo, or none of these package managers), it prints the command it
# would run, or the packages to find, and exits 1.
# --dry-run: print the command that would install what is missing, and stop.
# MPI=mpich: MPICH instead of Open MPI (the default, MPI=openmpi).
set -eu

dry=0
case ${1:-} in
    --dry-run|-n) dry=1 ;;
    "") ;;
    *) echo "install-deps: unknown option '$1' (usage: [MPI=openmpi|mpich] install-deps.sh [--dry-run])" >&2; exit 2 ;;
esac

# Each package manager's names for the MPI implementation: the compiler
# wrapper and headers, and mpiexec
MPI=${MPI:-openmpi}
case $MPI in
    openmpi) APT_MPI="libopenmpi-dev openmpi-bin"; DNF_MPI="openmpi-devel"; BREW_MPI="open-mpi"
             DNF_MODULE="mpi/openmpi-x86_64"; DNF_BIN=/usr/lib64/openmpi/bin ;;
    mpich) APT_MPI="libmpich-dev mpich"; DNF_MPI="mpich-devel"; BREW_MPI="mpich"
           DNF_MODULE="mpi/mpich-x86_64"; DNF_BIN=/usr/lib64/mpich/bin ;;
    *) echo "install-deps: MPI='$MPI' is neither openmpi nor mpich: set MPI=openmpi (the default) or MPI=mpich" >&2; exit 2 ;;
esac

PACKAGES="build-essential autoconf automake libtool pkg-config autoconf-archive
$APT_MPI libopenblas-dev check gnuplot-nox
libjansson-dev libxxhash-dev zlib1g-dev procps python3"
# procps: pgrep, for tests/test_faults.sh; python3: the token files of
# tests/test_data_dump.sh (PyTorch, python3-torch, stays optional: the
# tests that need it skip without it). gcc's ASan and UBSan runtimes
# (scripts/test-sanitizers.sh) come with build-essential.
# Installed where the archive has it (Debian 12 does):
# dataset-fashion-mnist, Fashion-MNIST's IDX files in
# /usr/share/datasets/fashion-mnist, for `--data fashion-mnist` and
# tests/test_fashion_mnist.sh (which skips without them).
APT_OPTIONAL="dataset-fashion-mnist"

# Fedora's names for the same (the MPI's mpicc is in DNF_BIN: `module load
# DNF_MODULE` puts it on the PATH)
DNF_PACKAGES="gcc make autoconf automake libtool pkgconf-pkg-config autoconf-archive
$DNF_MPI openblas-devel check-devel gnuplot jansson-devel xxhash-devel
zlib-devel procps-ng python3"

# Homebrew's (macOS: clang is the compiler, from the Xcode command line tools)
BREW_PACKAGES="$BREW_MPI openblas check gnuplot autoconf automake libtool
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
    for p in $PACKAGES $APT_OPTIONAL; do
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

    $SUDO apt-get update -qq
    # an optional package that this archive does not have: left out, said once
    keep=""
    for p in $missing; do
        case " $APT_OPTIONAL " in
            *" $p "*)
                if ! apt-cache policy "$p" 2>/dev/null | grep 'Candidate:' | grep -qv '(none)'; then
                    echo "install-deps: $p is not in this system's archive: left out (the tests that need it skip)"
                    continue
                fi ;;
        esac
        keep="$keep $p"
    done
    missing=$keep
    echo "install-deps: installing$missing"
    # shellcheck disable=SC2086 # one word per package
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
    # shellcheck disable=SC2086 # one word per package
    $SUDO dnf install -y $missing
    echo "install-deps: the MPI's mpicc is in $DNF_BIN: run 'module load $DNF_MODULE' (or add it to PATH) before ./configure"
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
    # shellcheck disable=SC2086 # one word per package
    brew install $missing
else
    # shellcheck disable=SC2086 # the lists' words, one space apart
    echo "install-deps: found none of apt-get, dnf or brew; install these (Debian's names) with your package manager:" $PACKAGES $APT_OPTIONAL >&2
    exit 1
fi
