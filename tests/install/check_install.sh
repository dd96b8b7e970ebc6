#!/usr/bin/env bash
# Installs the built tree into a scratch prefix, then builds and runs a consumer through
# find_package(fabric_lib) and through pkg-config.
set -euo pipefail
build_dir=$1
src_dir=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
libdir=$(ls -d "$work"/prefix/lib*/ | head -n1)
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cmake -S "$src_dir" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/consumer"
PKG_CONFIG_PATH="$libdir/pkgconfig" g++ -std=c++20 "$src_dir/consumer.cc" -o "$work/consumer_pc" \
  $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs fabric_lib)
"$work/consumer_pc"
