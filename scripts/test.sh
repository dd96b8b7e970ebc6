#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds, runs every test, ends with one summary line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${FABRIC_LIB_BUILD_DIR:-$root/build}
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
cd "$build_dir"
start=$(date +%s)
set +e
ctest --output-on-failure -j"$(nproc)" --timeout 600 2>&1 | tee ctest.log
rc=${PIPESTATUS[0]}
set -e
summary=$(grep -E "tests passed|tests failed" ctest.log | tail -n1)
echo "fabric-lib test summary: ${summary:-no tests ran} ($(( $(date +%s) - start )) s)"
exit "$rc"
