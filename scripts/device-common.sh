#!/usr/bin/env bash
# Shared by the scripts run on the GPU machine (Ubuntu 24.04, no libfabric, no network): unpacks
# the Debian 12 packages carried in .deb/ into a private prefix and points the build and the
# runtime at it. Source it, then call:
#
#   fabric_lib_unpack_debs ROOT PREFIX   # ROOT/.deb/*.deb -> PREFIX; exports FABRIC_LIB_DEPS_USR,
#                                        # FABRIC_LIB_DEPS_LIB, FABRIC_LIB_PKG_CONFIG, LD_LIBRARY_PATH,
#                                        # LIBRARY_PATH, PKG_CONFIG_PATH (and FI_PROVIDER_PATH when the
#                                        # packages carry provider plugins); CC, CXX and CUDAHOSTCXX
#                                        # = the system GCC (fabric_lib_use_system_compiler says why)
#   fabric_lib_cmake_dep_args            # prints CMake arguments that build against that prefix
#   fabric_lib_pybind11_dir PYTHON       # prints the pybind11 CMake dir to build the extension with
#
# Fill .deb/ on a Debian 12 machine (the list serves device-bench.sh and device-python.sh):
#   mkdir -p .deb && cd .deb && apt-get download libfabric1 libfabric-dev libibverbs1 librdmacm1 \
#     ibverbs-providers libpsm2-2 libpsm-infinipath1 libnl-3-200 libnl-route-3-200 libnuma1 \
#     libatomic1 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libcli11-dev libconcurrentqueue-dev \
#     pkgconf pkgconf-bin libpkgconf3 pybind11-dev
# (Same steps as device-bench.sh's own unpacking, factored out so both scripts can share them.)

# The GPU machine's image sets CXX=/opt/gcc/bin/g++, a GCC whose programs and shared libraries
# carry their own copy of libstdc++ (seen 2026-11-29: std::locale and codecvt code inside
# _fabric_lib.so). Two copies in one process break std::call_once/std::promise (unit_tests
# crashed in GroupWorker::thread_main) and std::locale (python crashed, "free(): invalid pointer",
# once torch's shared libstdc++ was loaded too). Build with the system compiler, which links the
# one shared libstdc++.so.6; FABRIC_LIB_KEEP_CXX=1 keeps the image's.
fabric_lib_use_system_compiler() {
  export FABRIC_LIB_IMAGE_CXX=${CXX:-}
  [ "${FABRIC_LIB_KEEP_CXX:-0}" = 1 ] && return
  if [ -x /usr/bin/g++ ] && [ -x /usr/bin/gcc ]; then
    export CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++
  fi
}

fabric_lib_unpack_debs() {
  local root=$1 prefix=$2 deb
  local debs=("$root"/.deb/*.deb)
  if [ ! -e "${debs[0]}" ]; then
    echo "no .deb/*.deb in $root (carry \".deb\"; see scripts/device-common.sh)" >&2
    return 2
  fi
  rm -rf "$prefix" && mkdir -p "$prefix"
  for deb in "${debs[@]}"; do
    case $(basename "$deb") in
      # Keep the system's own libatomic when it has one (it is newer than Debian 12's).
      libatomic1_*) ldconfig -p 2>/dev/null | grep -q 'libatomic.so.1 ' && continue ;;
    esac
    dpkg-deb -x "$deb" "$prefix"
  done
  local usr=$prefix/usr
  local lib=$usr/lib/x86_64-linux-gnu
  # The .pc files say prefix=/usr: point them at the unpacked tree.
  local pc
  for pc in "$lib"/pkgconfig/*.pc "$usr"/share/pkgconfig/*.pc; do
    [ -e "$pc" ] && sed -i "s|^prefix=/usr\$|prefix=$usr|" "$pc"
  done
  # libpsm-infinipath1 ships its library in /usr/lib/libpsm1 (linked by update-alternatives at
  # install time, which dpkg -x does not run): put that directory on the search path instead.
  export LD_LIBRARY_PATH=$lib:$usr/lib/libpsm1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LIBRARY_PATH=$lib:$usr/lib/libpsm1${LIBRARY_PATH:+:$LIBRARY_PATH}
  export PKG_CONFIG_PATH=$lib/pkgconfig:$usr/share/pkgconfig
  # libfabric looks for provider plugins in its compiled-in /usr path otherwise.
  if [ -d "$lib/libfabric" ]; then export FI_PROVIDER_PATH=$lib/libfabric; fi
  local pkg_config
  pkg_config=$(command -v pkg-config || true)
  if [ -z "$pkg_config" ] || ! "$pkg_config" --version >/dev/null 2>&1; then pkg_config=$usr/bin/pkgconf; fi
  export FABRIC_LIB_DEPS_USR=$usr FABRIC_LIB_DEPS_LIB=$lib FABRIC_LIB_PKG_CONFIG=$pkg_config
  fabric_lib_use_system_compiler
  echo "unpacked ${#debs[@]} packages into $prefix (pkg-config: $pkg_config; CXX=${CXX:-c++}, image's: ${FABRIC_LIB_IMAGE_CXX:-none})"
}

fabric_lib_cmake_dep_args() {
  local usr=$FABRIC_LIB_DEPS_USR lib=$FABRIC_LIB_DEPS_LIB
  printf '%s\n' "-DCMAKE_PREFIX_PATH=$usr" "-DPKG_CONFIG_EXECUTABLE=$FABRIC_LIB_PKG_CONFIG" \
    "-DCMAKE_CXX_FLAGS=-isystem $usr/include" \
    "-DCMAKE_EXE_LINKER_FLAGS=-L$lib -Wl,-rpath-link,$lib:$usr/lib/libpsm1" \
    "-DCMAKE_SHARED_LINKER_FLAGS=-L$lib -Wl,-rpath-link,$lib:$usr/lib/libpsm1" \
    "-DCMAKE_MODULE_LINKER_FLAGS=-L$lib -Wl,-rpath-link,$lib:$usr/lib/libpsm1" \
    "-DCMAKE_POLICY_VERSION_MINIMUM=3.5"
}

# The pybind11 to build the extension with: the python's own (pip's pybind11 3.1 on the GPU
# machine, what its users have); the carried Debian pybind11-dev (2.10.3, headers only) when that
# python has none, or when FABRIC_LIB_DEBIAN_PYBIND11=1.
fabric_lib_pybind11_dir() {
  local py=$1 dir own
  own=$("$py" -m pybind11 --cmakedir 2>/dev/null || true)
  if [ -n "$own" ] && [ "${FABRIC_LIB_DEBIAN_PYBIND11:-0}" != 1 ]; then
    echo "$own"
    return
  fi
  for dir in "$FABRIC_LIB_DEPS_USR/lib/cmake/pybind11" "$FABRIC_LIB_DEPS_USR/share/cmake/pybind11"; do
    if [ -e "$dir/pybind11Config.cmake" ]; then
      echo "$dir"
      return
    fi
  done
  echo "$own"
}
