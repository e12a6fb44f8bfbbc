#!/usr/bin/env bash
# deps.sh -- makes sure the build's dependencies are present (Debian).
# Installs what is missing when run as root; otherwise names what to install.
#   tools/deps.sh              what the library, tests, demo and examples need
#   tools/deps.sh --bindings   also every binding's toolchain (Python packages,
#                              Rust, Go, C#), clang for the fuzzers, Doxygen for
#                              the reference and libclang for the bindings
#                              generator's drift test: what CI needs
#   tools/deps.sh --cross      also the cross compilers, Wine and qemu
#                              (tools/ci-cross.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = "--cross" ]; then
  # The cross builds of tools/ci-cross.sh: MinGW-w64 (posix threads) and Wine
  # for Windows x86-64, the aarch64 cross compiler and qemu for Linux arm64.
  # Their sysroots have no OpenBLAS, oneDNN, MPI or CUDA: those builds use
  # ampx's own kernels and have no data-parallel transport.
  "$0"
  need=()
  command -v x86_64-w64-mingw32-g++-posix >/dev/null || need+=(g++-mingw-w64-x86-64-posix)
  [ -x /usr/lib/wine/wine64 ] || need+=(wine64)
  command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
  command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
  if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
      echo "the cross builds need these Debian packages: ${need[*]}" >&2
      exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
  exit 0
fi
if [ "${1:-}" = "--bindings" ]; then
  "$0"
  for script in "$root"/bindings/*/deps.sh; do bash "$script"; done
  # Neither is needed to build or use the library: clang builds the fuzzers,
  # Doxygen the reference (the docs target) and its check (the api_docs
  # test, skipped without it unless AMPX_REQUIRE_BINDINGS=1, as in CI).
  extra=()
  command -v clang++ >/dev/null || extra+=(clang)
  command -v doxygen >/dev/null || extra+=(doxygen)
  if [ ${#extra[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${extra[@]}" >/dev/null
  fi
  # libclang's Python bindings, for tools/gen_bindings.py and its drift
  # test (the generated files are checked in: building a binding needs none).
  python3 -c "import clang.cindex" 2>/dev/null || python3 -m pip install --quiet libclang
  exit 0
fi

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
command -v nm >/dev/null || need+=(binutils)
command -v pkg-config >/dev/null || need+=(pkg-config)
# CPack's Debian packages (the deb_packages test): dpkg-shlibdeps finds the
# library's dependencies, with file.
command -v dpkg-shlibdeps >/dev/null || need+=(dpkg-dev)
command -v file >/dev/null || need+=(file)
[ -f /usr/include/doctest/doctest.h ] || [ -f "$(dirname "$0")/../.deps/include/doctest/doctest.h" ] || need+=(doctest-dev)
[ -f /usr/include/dlpack/dlpack.h ] || [ -f "$(dirname "$0")/../.deps/include/dlpack/dlpack.h" ] || need+=(libdlpack-dev)
# nlohmann/json (header-only) parses safetensors headers.
[ -f /usr/include/nlohmann/json.hpp ] || [ -f "$(dirname "$0")/../.deps/include/nlohmann/json.hpp" ] || need+=(nlohmann-json3-dev)
# OpenBLAS for the CPU GEMM, loaded at run time (without it ampx multiplies
# with its own, slower kernel).
compgen -G '/usr/lib/*/libopenblas.so.0' >/dev/null || need+=(libopenblas0)
# MPI for data-parallel training on the CPU (the plugin libampx_mpi.so and
# the tests under mpirun); libampx itself runs without it.
# oneDNN for the CPU's bf16 matrix products on processors with AVX512-BF16,
# loaded at run time (the headers let the build compile that path; without
# the library ampx converts to fp32 and multiplies with OpenBLAS).
[ -f /usr/include/oneapi/dnnl/dnnl.h ] || need+=(libdnnl-dev)
command -v mpirun >/dev/null || need+=(openmpi-bin)
compgen -G '/usr/lib/*/openmpi/include/mpi.h' >/dev/null || need+=(libopenmpi-dev)

if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "ampx needs these Debian packages: ${need[*]}" >&2
  echo "install them with: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
echo "installing: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
