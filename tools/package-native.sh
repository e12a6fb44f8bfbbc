#!/usr/bin/env bash
# package-native.sh -- lays out the native libraries for engines, from the
# builds that exist (build, build-mingw, build-arm64; tools/ci-cross.sh
# makes the cross ones):
#   OUT/runtimes/linux-x64/native/libampx.so
#   OUT/runtimes/linux-arm64/native/libampx.so
#   OUT/runtimes/win-x64/native/ampx.dll
# (NuGet's runtime-identifier layout, which Unity's and Godot's C# projects
# understand; copy runtimes/ beside bindings/csharp/Ampx), and
#   OUT/ampx-VERSION-windows-x64.zip   bin/ampx.dll, lib/ (import library,
#       ampx.def, lib/cmake/ampx for find_package with the MinGW toolchain),
#       include/
#   OUT/libampx0_VERSION_arm64.deb ... the arm64 Debian packages (CPack)
#   tools/package-native.sh [OUT]      (default: build/package-native)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/package-native}
version=$(sed -n 's/^project(ampx VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
rm -rf "$out"
mkdir -p "$out"
made=()

native() {  # rid file
  mkdir -p "$out/runtimes/$1/native"
  cp "$2" "$out/runtimes/$1/native/$(basename "$3")"
  made+=("runtimes/$1/native/$(basename "$3")")
}
[ -f build/libampx.so ] && native linux-x64 "$(readlink -f build/libampx.so)" libampx.so
[ -f build-arm64/libampx.so ] && native linux-arm64 "$(readlink -f build-arm64/libampx.so)" libampx.so
if [ -f build-mingw/bin/ampx.dll ]; then
  native win-x64 build-mingw/bin/ampx.dll ampx.dll
  stage="$out/ampx-$version-windows-x64"
  cmake --install build-mingw --prefix "$stage" >/dev/null
  (cd "$out" && zip -qr "ampx-$version-windows-x64.zip" "ampx-$version-windows-x64")
  rm -rf "$stage"
  made+=("ampx-$version-windows-x64.zip")
fi
if [ -f build-arm64/libampx.so ]; then
  (cd build-arm64 && cpack -G DEB >/dev/null)
  for deb in build-arm64/packages/*_arm64.deb; do
    cp "$deb" "$out/"
    made+=("$(basename "$deb")")
  done
fi
if [ ${#made[@]} -eq 0 ]; then
  echo "package-native.sh: no build found (build, build-mingw, build-arm64)" >&2
  exit 1
fi
printf '%s\n' "${made[@]/#/$out/}"
