#!/usr/bin/env bash
# Installs the built ampx into a scratch prefix, then builds and runs a
# consumer project against it twice: with find_package(ampx) and with
# pkg-config.
set -euo pipefail
build_dir=$1
if ! command -v pkg-config >/dev/null; then
  echo "SKIPPED: pkg-config is not installed (tools/deps.sh installs it)"
  exit 77
fi
source_dir=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build_dir" --prefix "$scratch/prefix" >/dev/null
cmake -S "$source_dir/install_consumer" -B "$scratch/consumer" -G Ninja \
  -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
cmake --build "$scratch/consumer" >/dev/null
LD_LIBRARY_PATH="$scratch/prefix/lib" "$scratch/consumer/consumer"
libdir=$(ls -d "$scratch"/prefix/lib*/pkgconfig | head -n1)
flags=$(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs ampx)
# shellcheck disable=SC2086
cc -std=c99 "$source_dir/install_consumer/consumer.c" $flags -o "$scratch/pc_consumer"
LD_LIBRARY_PATH="$(dirname "$libdir")" "$scratch/pc_consumer"
soname=$(objdump -p "$(dirname "$libdir")/libampx.so" | awk '/SONAME/ {print $2}')
[ "$soname" = "libampx.so.0" ] || { echo "SONAME is '$soname', expected libampx.so.0"; exit 1; }
echo "find_package, pkg-config and SONAME ($soname) all good"
