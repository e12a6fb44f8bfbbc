#!/usr/bin/env bash
# deps.sh -- makes sure the build's dependencies are present (Debian).
# Installs what is missing when run as root; otherwise names what to install.
set -euo pipefail

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
command -v nm >/dev/null || need+=(binutils)
command -v pkg-config >/dev/null || need+=(pkg-config)
[ -f /usr/include/doctest/doctest.h ] || [ -f "$(dirname "$0")/../.deps/include/doctest/doctest.h" ] || need+=(doctest-dev)
[ -f /usr/include/dlpack/dlpack.h ] || [ -f "$(dirname "$0")/../.deps/include/dlpack/dlpack.h" ] || need+=(libdlpack-dev)
# OpenBLAS for the CPU GEMM (optional for the build, wanted for its speed);
# its headers live under /usr/include/<multiarch triplet>/ on every architecture.
compgen -G '/usr/include/*/openblas-*/cblas.h' >/dev/null || need+=(libopenblas-dev)

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
