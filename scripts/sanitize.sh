#!/usr/bin/env bash
# Sanitizer runs (too slow for every CI run; run before each submission, see tests/README.md, "Sanitizers"):
#   ASan + UBSan build of the library and the whole C++ suite, and
#   TSan build of the unit and integration tests.
# Usage: scripts/sanitize.sh [address|thread|all]   (default all). Ends with one summary line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
which=${1:-all}
"$root/scripts/install-deps.sh"
summary=()
run() {  # <sanitizer> <build dir> <ctest args...>
  local san=$1 dir=$2
  shift 2
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFABRIC_LIB_SANITIZE="$san" \
    -DFABRIC_LIB_PYTHON=OFF -DFABRIC_LIB_CUDA=OFF >/dev/null
  # Every target: the apps' tests and the tools' test helpers (metrics_source) run in the ASan pass.
  cmake --build "$dir" -j"$(nproc)" >/dev/null
  local log="$dir/sanitize-ctest.log"
  set +e
  (cd "$dir" && ctest --output-on-failure -j"$(nproc)" --timeout 900 "$@") >"$log" 2>&1
  local rc=$?
  set -e
  # A sanitizer report fails its test (halt_on_error / non-zero exit); also scan for stray ones.
  local reports
  reports=$(grep -c -E "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|WARNING: ThreadSanitizer" "$log" || true)
  summary+=("$san: $(grep -E 'tests passed|tests failed' "$log" | tail -n1), $reports sanitizer reports")
  [ "$rc" -eq 0 ] && [ "$reports" -eq 0 ]
}
status=0
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$root/tests/tsan.supp"
if [ "$which" = all ] || [ "$which" = address ]; then
  run address "$root/build-asan" -E "install|python|fuzz" || status=1
fi
if [ "$which" = all ] || [ "$which" = thread ]; then
  run thread "$root/build-tsan" -L "unit|integration" || status=1
fi
echo "fabric-lib sanitizer summary: ${summary[*]}"
exit $status
