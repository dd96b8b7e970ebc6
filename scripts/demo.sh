#!/usr/bin/env bash
# The main job: installs dependencies, builds, and runs a short local two-process transfer on the
# default provider (tcp over loopback). Extra arguments go to fabric-demo (see --help).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" >/dev/null
"${FABRIC_LIB_BUILD_DIR:-$root/build}/tools/fabric-demo" "$@"
