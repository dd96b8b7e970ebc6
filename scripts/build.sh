#!/usr/bin/env bash
# Configures and builds fabric-lib into build/ (or $FABRIC_LIB_BUILD_DIR). Extra arguments go to
# CMake's configure step. The build type is CMakeLists.txt's default (Release; RelWithDebInfo for
# a sanitizer build) or the one the folder was configured with before; -DCMAKE_BUILD_TYPE=... sets it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${FABRIC_LIB_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build_dir" "$@" >/dev/null
cmake --build "$build_dir" -j"$(nproc)"
