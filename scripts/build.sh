#!/bin/sh
# Install the dependencies (when missing), then configure and build zerosim
# in the source tree (when not built yet). Extra arguments go to configure.
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh
if [ ! -x configure ]; then
    autoreconf -fi
fi
if [ ! -f Makefile ]; then
    ./configure "$@"
fi
# the cores: nproc (GNU coreutils), or sysctl on macOS
make -j"$(nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)"
