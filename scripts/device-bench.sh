#!/usr/bin/env bash
# fabric-bench on the GPU machine (Ubuntu 24.04, 16-32 cores, no libfabric, no network): unpacks
# the Debian packages carried in .deb/ into a private prefix, builds fabric-bench and fabric-info
# (tests off), then records fabric-info and the sweeps: tcp over loopback with 1, 2, 4 and 8
# domains (the domain-scaling table) and shm with 1 and 4 domains, every mode, engine vs raw
# libfabric in the same run.
#
# The lead runs it through the device tool with carry [".deb"]:   bash scripts/device-bench.sh
# Fill .deb/ here first (Debian 12 packages; they run on Ubuntu 24.04's newer glibc):
#   mkdir -p .deb && cd .deb && apt-get download libfabric1 libfabric-dev libibverbs1 librdmacm1 \
#     ibverbs-providers libpsm2-2 libpsm-infinipath1 libnl-3-200 libnl-route-3-200 libnuma1 \
#     libatomic1 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libcli11-dev libconcurrentqueue-dev \
#     pkgconf pkgconf-bin libpkgconf3
# (libfabric.pc has no Requires.private, so the verbs/rdmacm/numa -dev packages are not needed.)
#
# Writes into $OUT (8 files at most): device-info.txt (machine + fabric-info), build.log,
# tcp.txt / tcp.csv (tables and CSV, 1/2/4/8 domains), tcp.png (plot, when matplotlib is there),
# shm.txt / shm.csv, bench.log (progress of both sweeps). About 4-6 minutes in all.
#
# Environment: OUT (default ./device-out), FABRIC_BENCH_DURATION (seconds per timed run, 0.3),
# FABRIC_BENCH_EXTRA (more fabric-bench options, e.g. "--repeats 3").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/device-out}
prefix=${FABRIC_LIB_DEPS_PREFIX:-/tmp/fabric-lib-deps}
build=${FABRIC_LIB_BUILD_DIR:-/tmp/fabric-lib-device-build}
duration=${FABRIC_BENCH_DURATION:-0.3}
extra=${FABRIC_BENCH_EXTRA:-}
mkdir -p "$out"
start=$(date +%s)
stamp() { echo "[device-bench +$(($(date +%s) - start))s] $*" | tee -a "$out/bench.log" >&2; }

# --- 1. Unpack the carried packages into the prefix ------------------------------------------------
debs=("$root"/.deb/*.deb)
if [ ! -e "${debs[0]}" ]; then
  echo "device-bench: no .deb/*.deb in $root (carry \".deb\", see the header of this script)" >&2
  exit 2
fi
rm -rf "$prefix" && mkdir -p "$prefix"
for deb in "${debs[@]}"; do
  case $(basename "$deb") in
    # Keep the system's own libatomic when it has one (it is newer than Debian 12's).
    libatomic1_*) ldconfig -p 2>/dev/null | grep -q 'libatomic.so.1 ' && continue ;;
  esac
  dpkg-deb -x "$deb" "$prefix"
done
usr=$prefix/usr
lib=$usr/lib/x86_64-linux-gnu
# The .pc files say prefix=/usr: point them at the unpacked tree (pkg-config would otherwise drop
# -I/usr/include as a system path, or find nothing there).
for pc in "$lib"/pkgconfig/*.pc "$usr"/share/pkgconfig/*.pc; do
  [ -e "$pc" ] && sed -i "s|^prefix=/usr\$|prefix=$usr|" "$pc"
done
# libpsm-infinipath1 ships its library in /usr/lib/libpsm1, linked in by update-alternatives at
# install time; dpkg -x runs no scripts, so put that directory on the search path instead.
export LD_LIBRARY_PATH=$lib:$usr/lib/libpsm1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LIBRARY_PATH=$lib:$usr/lib/libpsm1${LIBRARY_PATH:+:$LIBRARY_PATH}
export PKG_CONFIG_PATH=$lib/pkgconfig:$usr/share/pkgconfig
# The system's pkg-config when it works, else the unpacked pkgconf.
pkg_config=$(command -v pkg-config || true)
if [ -z "$pkg_config" ] || ! "$pkg_config" --version >/dev/null 2>&1; then pkg_config=$usr/bin/pkgconf; fi
stamp "unpacked ${#debs[@]} packages into $prefix (pkg-config: $pkg_config)"

# --- 2. Build the tools ----------------------------------------------------------------------------
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
{
  echo "cmake: $(cmake --version | head -n1); compiler: $(c++ --version | head -n1)"
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFABRIC_LIB_BUILD_TESTS=OFF -DFABRIC_LIB_PYTHON=OFF \
    -DCMAKE_PREFIX_PATH="$usr" -DPKG_CONFIG_EXECUTABLE="$pkg_config" \
    -DCMAKE_CXX_FLAGS="-isystem $usr/include" \
    -DCMAKE_EXE_LINKER_FLAGS="-L$lib -Wl,-rpath-link,$lib:$usr/lib/libpsm1" \
    -DCMAKE_SHARED_LINKER_FLAGS="-L$lib -Wl,-rpath-link,$lib:$usr/lib/libpsm1"
  cmake --build "$build" -j"$(nproc)" --target fabric-bench fabric-info
} >"$out/build.log" 2>&1 || {
  tail -n 40 "$out/build.log" >&2
  stamp "build FAILED (see build.log)"
  exit 1
}
bench=$build/tools/fabric-bench
stamp "built $bench"

# --- 3. Machine and fabric-info ----------------------------------------------------------------------
{
  echo "== machine"
  uname -a
  echo "cores: $(nproc)"
  lscpu 2>/dev/null | grep -E 'Model name|Socket|NUMA node|Thread' || true
  nvidia-smi -L 2>/dev/null || true
  echo
  echo "== fabric-info"
  "$build/tools/fabric-info" 2>&1 || echo "fabric-info failed: $?"
} >"$out/device-info.txt" 2>&1
stamp "fabric-info done"

# --- 4. Sweeps ---------------------------------------------------------------------------------------
# The engine busy-polls (--spin) as it would in production; this machine has cores to spare.
rc=0
run_sweep() {  # name, then fabric-bench options
  local name=$1
  shift
  stamp "sweep $name: fabric-bench $*"
  if ! timeout 300 "$bench" --local --spin --duration "$duration" "$@" $extra \
      --csv "$out/$name.csv" >"$out/$name.txt" 2>>"$out/bench.log"; then
    stamp "sweep $name FAILED (exit $?)"
    rc=1
  fi
}
run_sweep tcp --provider tcp --domains 1,2,4,8 --plot "$out/tcp.png"
run_sweep shm --provider shm --domains 1,4
stamp "done (exit $rc)"
exit "$rc"
