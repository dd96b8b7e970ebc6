#!/usr/bin/env bash
# The sanitizer builds of scripts/sanitize.sh on the GPU machine's 16 cores (more threads run at
# once there than on the 2-core development VM, so races show that do not show here), against the
# carried Debian packages (scripts/device-common.sh; the machine has no apt): TSan, then ASan +
# UBSan, each building unit_tests and integration_tests (CUDA off) and running the unit tests and
# the integration matrix (FABRIC_LIB_SANITIZE_MATRIX, a ctest -R pattern: default "_1dom";
# "dom" for 1 and 4 domains) without the netns cut tests (they need privileges the machine may not give).
# Run through the device tool with carry [".deb"]:   bash scripts/device-sanitize.sh
# Writes into $OUT: sanitize-summary.txt (one line per sanitizer), sanitize-{thread,address}.log.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/device-out}
prefix=${FABRIC_LIB_DEPS_PREFIX:-/tmp/fabric-lib-deps}
mkdir -p "$out"
# shellcheck source=device-common.sh
source "$root/scripts/device-common.sh"
fabric_lib_unpack_debs "$root" "$prefix" >"$out/sanitize-unpack.log" 2>&1 || { tail -n 5 "$out/sanitize-unpack.log"; exit 2; }
mapfile -t dep_args < <(fabric_lib_cmake_dep_args)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# tests/tsan.supp names libfabric's exit-time unlock by its function (_dl_call_fini); the image's
# ld.so has no symbols, so the same report is matched by module here.
supp=/tmp/fabric-lib-tsan.supp
{ cat "$root/tests/tsan.supp"; echo "mutex:ld-linux-x86-64.so.2"; } >"$supp"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$supp"
rc=0
jobs=$(( $(nproc) > 2 ? $(nproc) / 2 : 1 ))  # half the cores: sanitized tests run several times slower and are timed
: >"$out/sanitize-summary.txt"
for san in ${FABRIC_LIB_SANITIZERS:-thread address}; do
  t0=$(date +%s)
  dir=/tmp/fabric-lib-$san
  log=$out/sanitize-$san.log
  {
    cmake -S "$root" -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFABRIC_LIB_SANITIZE="$san" \
      -DFABRIC_LIB_CUDA=OFF -DFABRIC_LIB_PYTHON=OFF -DFABRIC_LIB_BUILD_TESTS=ON "${dep_args[@]}" &&
      cmake --build "$dir" -j"$(nproc)" --target unit_tests integration_tests
  } >"$log" 2>&1 || { echo "$san: build FAILED" | tee -a "$out/sanitize-summary.txt"; rc=1; continue; }
  (cd "$dir" && timeout "${FABRIC_LIB_SANITIZE_LIMIT:-200}" ctest -j"$jobs" --output-on-failure -L unit) >>"$log" 2>&1
  status=$?
  (cd "$dir" && timeout "${FABRIC_LIB_SANITIZE_LIMIT:-200}" ctest -j"$jobs" --output-on-failure -L integration \
    -R "${FABRIC_LIB_SANITIZE_MATRIX:-_1dom}" -E 'CutTest') >>"$log" 2>&1
  status=$((status | $?))
  reports=$(grep -c -E "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|WARNING: ThreadSanitizer" "$log" || true)
  passed=$(grep -E "tests passed|tests failed" "$log" | tr '\n' ';')
  echo "$san: $passed $reports sanitizer reports, $(($(date +%s) - t0)) s" | tee -a "$out/sanitize-summary.txt"
  [ "$status" -eq 0 ] && [ "$reports" -eq 0 ] || rc=1
done
exit $rc
