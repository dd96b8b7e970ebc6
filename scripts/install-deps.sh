#!/usr/bin/env bash
# Installs every Debian package fabric-lib's build, tests and tools need. Idempotent: does
# nothing when all are present; otherwise one `apt-get update` and one non-interactive install.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libfabric-dev libfabric-bin          # the transport (tcp, shm, udp;ofi_rxd, efa, verbs providers)
  libspdlog-dev                        # logging
  libcli11-dev                         # command-line parsing for the tools
  libconcurrentqueue-dev               # lock-free MPSC queues (submit path, callback thread)
  libgtest-dev libgmock-dev            # tests
  prometheus-cpp-dev                   # the optional Prometheus endpoint (metrics_endpoint; docs/operations.md)
  iproute2 nftables                    # fault-injection tests: network namespaces, veth, packet loss
  clang libclang-rt-14-dev             # libFuzzer targets (tests/fuzz)
  # The Python package: build it (headers, pybind11), `pip install .` into a venv with
  # Debian's build tools (--no-build-isolation; PEP 668 forbids the system site), and its tests.
  python3-dev pybind11-dev python3-setuptools python3-wheel python3-pip python3-venv
  python3-numpy python3-pytest python3-prometheus-client  # the last: the metrics test's text parser
  python3-torch                        # the apps' end-to-end tests: real models in torch (CPU)
  python3-matplotlib                   # fabric-bench --plot (tests/tools: tools.fabric_bench.plot)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: need root to install: ${missing[*]}" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
