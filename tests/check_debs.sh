#!/usr/bin/env bash
# Builds ampx's Debian packages (cmake/packaging.cmake) with cpack into
# BUILD_DIR/packages, checks what they contain and what they depend on,
# installs them, and builds the consumer project (tests/install_consumer)
# against the installed packages twice: with find_package(ampx) and with
# pkg-config, then runs both programs and checks that libampx.so.0 comes from
# the packages' files.
#
# Where it installs: run as root on a machine with no ampx installed (the CI
# machine), it installs into the system with dpkg -i -- the truest test,
# since dpkg then checks the dependencies itself and the consumer is built
# with no hints at all -- and removes the packages again on exit, whatever
# happened. Otherwise (not root, an ampx package or file already there) it
# unpacks the packages into a scratch root and points the consumer there, and
# checks the dependencies against the installed packages itself, so a
# developer's machine is never changed. AMPX_DEB_TEST_INSTALL=system or
# scratch chooses. Exit 77 (skipped) when dpkg, cpack or a compiler is
# missing.
#
# Usage: check_debs.sh BUILD_DIR [CPACK]
set -euo pipefail

build_dir=$(cd "$1" && pwd)
cpack_cmd=${2:-cpack}
source_dir=$(cd "$(dirname "$0")" && pwd)
start=$SECONDS

# (CPack runs dpkg-shlibdeps, from dpkg-dev, and file for the dependencies.)
for tool in "$cpack_cmd" dpkg dpkg-deb dpkg-query dpkg-shlibdeps file pkg-config cc readelf ldd; do
  if ! command -v "$tool" >/dev/null; then
    case $tool in
      dpkg-shlibdeps) hint=" (apt-get install dpkg-dev)" ;;
      file) hint=" (apt-get install file)" ;;
      pkg-config) hint=" (apt-get install pkg-config)" ;;
      *) hint="" ;;
    esac
    echo "SKIPPED: $tool is not installed$hint; the packages are built with CPack on Debian"
    exit 77
  fi
done

fail() { echo "FAILED: $*" >&2; exit 1; }

libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
[ -n "$libdir" ] || fail "no CMAKE_INSTALL_LIBDIR in $build_dir/CMakeCache.txt"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

scratch=$(mktemp -d)
installed_by_us=()
cleanup() {
  if [ ${#installed_by_us[@]} -gt 0 ]; then
    echo "removing ${installed_by_us[*]}"
    dpkg --purge "${installed_by_us[@]}" >/dev/null || echo "WARNING: dpkg --purge ${installed_by_us[*]} failed" >&2
  fi
  rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- build the packages -----------------------------------------------------
pkgdir=$build_dir/packages
rm -f "$pkgdir"/*.deb
if ! "$cpack_cmd" -G DEB --config "$build_dir/CPackConfig.cmake" -B "$pkgdir" >"$scratch/cpack.log" 2>&1; then
  cat "$scratch/cpack.log"
  fail "cpack -G DEB"
fi
echo "cpack: $((SECONDS - start)) s"

deb_of() {
  local f
  f=$(ls "$pkgdir/$1"_*.deb 2>/dev/null || true)
  [ -n "$f" ] || return 1
  echo "$f"
}
runtime_deb=$(deb_of libampx0) || fail "no libampx0 package in $pkgdir"
dev_deb=$(deb_of libampx-dev) || fail "no libampx-dev package in $pkgdir"
mpi_deb=$(deb_of libampx-mpi0 || true)
debs=("$runtime_deb" "$dev_deb")
packages=(libampx0 libampx-dev)
if [ -n "$mpi_deb" ]; then
  debs+=("$mpi_deb")
  packages+=(libampx-mpi0)
fi
for deb in "${debs[@]}"; do echo "  $(basename "$deb")"; done
version=$(dpkg-deb -f "$runtime_deb" Version)
arch=$(dpkg --print-architecture)

# ---- contents -------------------------------------------------------------
# Every file is one of the library's, under /usr: nothing from the tests,
# examples or bindings.
contents() { dpkg-deb -c "$1" | awk '{print $6}' | sed 's|^\./|/|' | grep -v '/$'; }
expect_only() {
  local deb=$1 pattern=$2 bad
  bad=$(contents "$deb" | grep -E -v "^($pattern)$" || true)
  [ -z "$bad" ] || fail "$(basename "$deb") holds unexpected files:"$'\n'"$bad"
}
lib=/usr/$libdir
expect_only "$runtime_deb" "$lib/libampx\.so\.0|$lib/libampx\.so\.0\.[0-9.]+"
expect_only "$dev_deb" "/usr/include/ampx/[^/]+\.hp?p?|$lib/libampx\.so|$lib/cmake/ampx/ampx[A-Za-z-]*\.cmake|$lib/pkgconfig/ampx\.pc"
[ -z "$mpi_deb" ] || expect_only "$mpi_deb" "$lib/libampx_mpi\.so"
contents "$runtime_deb" | grep -qx "$lib/libampx.so.0" || fail "libampx0 lacks $lib/libampx.so.0"
for f in /usr/include/ampx/ampx.h "$lib/libampx.so" "$lib/cmake/ampx/ampxConfig.cmake" "$lib/pkgconfig/ampx.pc"; do
  contents "$dev_deb" | grep -qx "$f" || fail "libampx-dev lacks $f"
done
case $libdir in
  lib/*-linux-gnu*) ;;
  *) echo "NOTE: the library is in /usr/$libdir, not Debian's multiarch directory: configure with -DCMAKE_INSTALL_PREFIX=/usr for that" ;;
esac

# ---- control fields -------------------------------------------------------
field() { dpkg-deb -f "$1" "$2"; }
has_dep() { tr ',' '\n' <<<"$1" | sed 's/^ *//' | grep -E -q "^$2"; }
runtime_depends=$(field "$runtime_deb" Depends)
echo "libampx0 Depends: $runtime_depends"
for dep in libc6 'libstdc\+\+6'; do
  has_dep "$runtime_depends" "$dep( |$)" || fail "libampx0 does not depend on ${dep//\\/}"
done
for dep in libopenblas libopenmpi libampx-mpi; do
  ! has_dep "$runtime_depends" "$dep" || fail "libampx0 depends on $dep (optional at run time)"
done
runtime_so=$(dpkg-deb -c "$runtime_deb" | awk '{print $6}' | grep -E 'libampx\.so\.0\.[0-9.]+$')
dpkg-deb -x "$runtime_deb" "$scratch/runtime"
if readelf -d "$scratch/runtime/$runtime_so" | grep -q 'NEEDED.*libcublasLt'; then
  cublas=$(readelf -d "$scratch/runtime/$runtime_so" | sed -n 's/.*NEEDED.*\[\(libcublasLt[^]]*\)\].*/\1/p')
  cublas_path=$(ldd "$scratch/runtime/$runtime_so" | awk -v l="$cublas" '$1 == l && $3 ~ /^\// {print $3}')
  owner=""
  [ -z "$cublas_path" ] || owner=$(dpkg-query -S "$(readlink -f "$cublas_path")" 2>/dev/null | cut -d: -f1 || true)
  if has_dep "$runtime_depends" 'libcublas'; then
    echo "CUDA build: libampx0 declares cuBLASLt"
  elif [ -n "$owner" ]; then
    fail "libampx0 needs $cublas (from package $owner) but does not depend on it"
  else
    echo "NOTE: CUDA build: $cublas belongs to no package here, so libampx0 does not declare it (AMPX_DEB_CUBLAS_DEPENDS)"
  fi
fi
dev_depends=$(field "$dev_deb" Depends)
echo "libampx-dev Depends: $dev_depends"
[ "$dev_depends" = "libampx0 (= $version)" ] || fail "libampx-dev should depend on exactly libampx0 (= $version)"
if [ -n "$mpi_deb" ]; then
  mpi_depends=$(field "$mpi_deb" Depends)
  echo "libampx-mpi0 Depends: $mpi_depends"
  has_dep "$mpi_depends" "libampx0 \(= $version\)" || fail "libampx-mpi0 does not depend on libampx0 (= $version)"
  has_dep "$mpi_depends" "libopenmpi|libmpich" || fail "libampx-mpi0 does not depend on an MPI library"
fi
for deb in "${debs[@]}"; do
  [ "$(field "$deb" Architecture)" = "$arch" ] || fail "$(basename "$deb") is not for $arch"
  [ "$(field "$deb" Version)" = "$version" ] || fail "$(basename "$deb") has another version"
done

# Every dependency is satisfied by an installed package or by one of ours
# (dpkg checks this itself when it installs into the system).
dependency_satisfied() {
  local alternative name op want have
  while IFS= read -r alternative; do
    read -r name op want <<<"$(sed -E 's/^ *([^ (]+) *(\(([<>=]+) *([^)]+)\))? *$/\1 \3 \4/' <<<"$alternative")"
    name=${name%%:*}
    if [[ " ${packages[*]} " == *" $name "* ]]; then
      have=$version
    else
      dpkg-query -W -f='${Status}\n' "$name" 2>/dev/null | grep -q ' installed$' || continue
      have=$(dpkg-query -W -f='${Version}' "$name")
    fi
    if [ -z "$op" ] || dpkg --compare-versions "$have" "$op" "$want" 2>/dev/null; then
      return 0
    fi
  done < <(tr '|' '\n' <<<"$1")
  return 1
}
check_dependencies() {
  local deb dep
  for deb in "${debs[@]}"; do
    while IFS= read -r dep; do
      [ -n "$dep" ] || continue
      dependency_satisfied "$dep" || fail "$(basename "$deb"): dependency '$dep' is not installed"
    done < <(field "$deb" Depends | tr ',' '\n' | sed 's/^ *//')
  done
}

# ---- install ----------------------------------------------------------------
in_the_way() {
  local p f status
  for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
    if [ -n "$status" ] && [ "${status:0:2}" != "un" ]; then echo "package $p is installed"; return 0; fi
  done
  for deb in "${debs[@]}"; do
    while IFS= read -r f; do
      if [ -e "$f" ] || [ -L "$f" ]; then echo "$f exists"; return 0; fi
    done < <(contents "$deb")
  done
  if pkg-config --exists ampx; then echo "pkg-config finds an ampx already"; return 0; fi
  if compgen -G "/usr/local/lib*/cmake/ampx*" >/dev/null || compgen -G "/usr/local/lib/*/cmake/ampx*" >/dev/null ||
     compgen -G "/usr/local/share/cmake/ampx*" >/dev/null; then
    echo "an ampx CMake package is in /usr/local"; return 0
  fi
  return 1
}
mode=${AMPX_DEB_TEST_INSTALL:-auto}
if [ "$mode" = auto ]; then
  mode=scratch
  if [ "$(id -u)" -ne 0 ]; then
    echo "not root: installing into a scratch root"
  elif reason=$(in_the_way); then
    echo "$reason: installing into a scratch root instead of the system"
  else
    mode=system
  fi
fi

if [ "$mode" = system ]; then
  [ "$(id -u)" -eq 0 ] || fail "AMPX_DEB_TEST_INSTALL=system needs root"
  if reason=$(in_the_way); then fail "$reason: not installing into the system"; fi
  echo "installing into the system with dpkg -i"
  installed_by_us=("${packages[@]}")
  # dpkg refuses while another dpkg or apt holds its lock: wait for it.
  for attempt in $(seq 1 20); do
    if dpkg -i "${debs[@]}" >"$scratch/dpkg.log" 2>&1; then break; fi
    if grep -q 'lock' "$scratch/dpkg.log" && [ "$attempt" -lt 20 ]; then sleep 3; continue; fi
    cat "$scratch/dpkg.log"
    fail "dpkg -i (without --force-depends)"
  done
  root=""
  cmake_hints=()
  pkg_config_env=()
  run_env=(env -u LD_LIBRARY_PATH)
elif [ "$mode" = scratch ]; then
  root=$scratch/root
  for deb in "${debs[@]}"; do dpkg-deb -x "$deb" "$root"; done
  check_dependencies
  echo "unpacked into a scratch root; dependencies are installed"
  cmake_hints=(-DCMAKE_PREFIX_PATH="$root/usr")
  pkg_config_env=(env PKG_CONFIG_LIBDIR="$root$lib/pkgconfig" PKG_CONFIG_PATH=)
  run_env=(env LD_LIBRARY_PATH="$root$lib")
else
  fail "AMPX_DEB_TEST_INSTALL is '$mode', not system or scratch"
fi

# ---- the consumer, both ways ------------------------------------------------
check_resolved() {
  local binary=$1 resolved
  readelf -d "$binary" | grep -q 'NEEDED.*\[libampx\.so\.0\]' || fail "$binary does not need libampx.so.0"
  resolved=$("${run_env[@]}" ldd "$binary" | awk '$1 == "libampx.so.0" {print $3}')
  if [ -z "$resolved" ] || [ "$(readlink -f "$resolved")" != "$(readlink -f "$root$lib/libampx.so.0")" ]; then
    fail "$binary loads libampx.so.0 from '$resolved', not from $root$lib"
  fi
  "${run_env[@]}" "$binary"
}
cmake -S "$source_dir/install_consumer" -B "$scratch/consumer" "${generator[@]}" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF "${cmake_hints[@]}" >"$scratch/consumer.log" 2>&1 ||
  { cat "$scratch/consumer.log"; fail "configuring the consumer with find_package(ampx)"; }
ampx_dir=$(sed -n 's/^ampx_DIR:[A-Z]*=//p' "$scratch/consumer/CMakeCache.txt")
[ "$(readlink -f "$ampx_dir")" = "$(readlink -f "$root$lib/cmake/ampx")" ] ||
  fail "find_package(ampx) found $ampx_dir, not $root$lib/cmake/ampx"
cmake --build "$scratch/consumer" >"$scratch/consumer.log" 2>&1 ||
  { cat "$scratch/consumer.log"; fail "building the consumer"; }
check_resolved "$scratch/consumer/consumer"

pc_libdir=$("${pkg_config_env[@]}" pkg-config --variable=libdir ampx)
[ "$(readlink -f "$pc_libdir")" = "$(readlink -f "$root$lib")" ] ||
  fail "pkg-config's ampx libdir is $pc_libdir, not $root$lib"
flags=$("${pkg_config_env[@]}" pkg-config --cflags --libs ampx)
# shellcheck disable=SC2086
cc -std=c99 "$source_dir/install_consumer/consumer.c" $flags -o "$scratch/pc_consumer"
check_resolved "$scratch/pc_consumer"

if [ -n "$mpi_deb" ]; then
  [ -f "$root$lib/libampx_mpi.so" ] || fail "the MPI plugin is not next to libampx.so.0"
fi
echo "packages ($mode install): contents, dependencies, find_package and pkg-config all good ($((SECONDS - start)) s)"
