#!/usr/bin/env bash
# A/B of two trees on the GPU machine's cores: builds fabric-bench and engine-overhead-bench from
# an older tree (a `git archive` tarball carried in .deb/, which is git-ignored) and from this
# working tree, side by side (CUDA off, against the carried Debian packages: device-common.sh),
# then alternates them: engine-overhead-bench twice each (pinned to two CPUs), and fabric-bench's
# modes (default: submit,imm; single and paged print their engine/raw ratios) on tcp and shm, 1
# and 4 domains, spinning and adaptive, three rounds — so drift of the machine hits both trees alike.
# The order flips from round to round (old first in odd rounds, new first in even ones): on one
# H100 on 2026-12-07 the run in a fixed position read lower in every round, raw baselines too
# (docs/gpu.md, "The landed tree's steps, and a write's four shards ...").
#   git archive --format=tar.gz -o .deb/trees/old.tar.gz <commit>
#   device tool, carry [".deb"]:   bash scripts/device-ab.sh > $OUT/ab.txt
# Environment: FABRIC_LIB_AB_OLD (default .deb/trees/old.tar.gz), FABRIC_LIB_AB_MODES (submit,imm),
# FABRIC_LIB_AB_ROUNDS (3), FABRIC_LIB_AB_PROVIDERS ("tcp shm"), FABRIC_LIB_AB_DOMAINS ("1 4"),
# FABRIC_LIB_AB_POLICIES ("spin adaptive"), FABRIC_LIB_AB_ARGS (more fabric-bench arguments),
# FABRIC_LIB_AB_CUDA (OFF; ON builds both trees with CUDA, for FABRIC_LIB_AB_PROVIDERS=ipc: the
# same-host GPU backend, its raw baseline cudaMemcpyPeerAsync). One line per run:
# "<old|new> <provider> x<domains> <policy> r<round>:" then mode p50/p99 (us) pairs, or mode size
# engine-Gbps ratio for single and paged. FABRIC_LIB_AB_TARGETS: more targets to build in the
# new tree (device_tests, to run the new tree's tests after the A/B: builds are in
# /tmp/fabric-lib-ab-b-{old,new}, the unpacked packages in /tmp/fabric-lib-ab-deps), and
# FABRIC_LIB_AB_NEW_TESTS: a command run in the new tree's build directory after the builds,
# before the A/B (e.g. "tests/device/device_tests --gtest_filter=Ipc/*:CopyEngine*"; its output
# ends with one line "new-tree tests: rc N").
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
old_tar=${FABRIC_LIB_AB_OLD:-$root/.deb/trees/old.tar.gz}
modes=${FABRIC_LIB_AB_MODES:-submit,imm}
rounds=${FABRIC_LIB_AB_ROUNDS:-3}
cuda=${FABRIC_LIB_AB_CUDA:-OFF}
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=$PATH:/usr/local/cuda/bin
read -ra extra_args <<<"${FABRIC_LIB_AB_ARGS:-}"
# shellcheck source=device-common.sh
source "$root/scripts/device-common.sh"
fabric_lib_unpack_debs "$root" /tmp/fabric-lib-ab-deps >/dev/null || exit 2
mapfile -t dep_args < <(fabric_lib_cmake_dep_args)
[ -f "$old_tar" ] || { echo "no $old_tar (see the header)" >&2; exit 2; }
rm -rf /tmp/fabric-lib-ab-old && mkdir -p /tmp/fabric-lib-ab-old && tar xzf "$old_tar" -C /tmp/fabric-lib-ab-old
build() {  # source dir, build dir, more targets
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-g -DFABRIC_LIB_CUDA="$cuda" -DFABRIC_LIB_BUILD_TESTS=ON -DFABRIC_LIB_BUILD_TOOLS=ON "${dep_args[@]}" >"$2.log" 2>&1 &&
    cmake --build "$2" -j"$(nproc)" --target fabric-bench engine-overhead-bench ${3:-} >>"$2.log" 2>&1 ||
    { tail -n 30 "$2.log"; echo "build of $1 failed" >&2; return 1; }
}
t0=$(date +%s)
build /tmp/fabric-lib-ab-old /tmp/fabric-lib-ab-b-old & build "$root" /tmp/fabric-lib-ab-b-new "${FABRIC_LIB_AB_TARGETS:-}" & wait
[ -x /tmp/fabric-lib-ab-b-old/tools/fabric-bench ] && [ -x /tmp/fabric-lib-ab-b-new/tools/fabric-bench ] || exit 1
echo "builds: $(($(date +%s) - t0)) s"
if [ -n "${FABRIC_LIB_AB_NEW_TESTS:-}" ]; then
  (cd /tmp/fabric-lib-ab-b-new && eval "$FABRIC_LIB_AB_NEW_TESTS")
  echo "new-tree tests: rc $?"
fi
order() { [ $(($1 % 2)) -eq 1 ] && echo old new || echo new old; }  # round -> the trees in turn
for r in 1 2; do for v in $(order "$r"); do
  echo "== engine-overhead-bench $v r$r (CPUs 2,3)"
  taskset -c 2,3 /tmp/fabric-lib-ab-b-$v/tests/bench/engine-overhead-bench 2>&1 | grep -E "engine work per WR"
done; done
for provider in ${FABRIC_LIB_AB_PROVIDERS:-tcp shm}; do for domains in ${FABRIC_LIB_AB_DOMAINS:-1 4}; do
for policy in ${FABRIC_LIB_AB_POLICIES:-spin adaptive}; do
  args=("${extra_args[@]}")
  [ "$policy" = spin ] && args+=(--spin --target-spin)
  for r in $(seq "$rounds"); do for v in $(order "$r"); do
    echo -n "$v $provider x$domains $policy r$r: "
    timeout 60 /tmp/fabric-lib-ab-b-$v/tools/fabric-bench --local --provider $provider --domains $domains --mode "$modes" \
      --latency-iterations 1000 --quiet "${args[@]}" 2>&1 | grep -E "^(submit|imm|scatter|single|paged)" |
      awk '$6 ~ /x$/ {printf "%s %s%s %s %s  ", $1, $2, $3, $4, $6; next} {printf "%s %s/%s  ", $1, $(NF-1), $NF}'
    echo
  done; done
done; done; done
echo "total: $(($(date +%s) - t0)) s"
