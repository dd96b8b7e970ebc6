#!/usr/bin/env bash
# The main job: installs dependencies, builds, and runs a short fabric-bench sweep on the default
# provider (tcp over loopback, two local processes): single and paged WRITE bandwidth and op rate
# through the engine and through a raw libfabric fi_writedata loop in the same run, their ratio,
# imm round-trip latency, and whether the target verified the bytes. Extra arguments go to
# fabric-bench (they override the sweep below; see `fabric-bench --help`), e.g.
#   ./scripts/demo.sh --provider shm --domains 1,4
# The earlier two-process transfer is still there: build/tools/fabric-demo.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" >/dev/null
exec "${FABRIC_LIB_BUILD_DIR:-$root/build}/tools/fabric-bench" --local --mode single,paged,imm \
  --sizes 4KiB,64KiB,256KiB,1MiB,16MiB,64MiB --page-sizes 4KiB,16KiB,32KiB,64KiB --duration 0.2 --repeats 3 \
  --latency-iterations 300 "$@"
