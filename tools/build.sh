#!/usr/bin/env bash
# build.sh -- configures (once) and builds ampx in ./build. The CUDA backend is
# built when nvcc is found (for sm_80 and sm_90); pass extra CMake options as
# arguments, e.g. tools/build.sh -DAMPX_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
if [ ! -f build/CMakeCache.txt ] || [ $# -gt 0 ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build build --parallel "$(nproc)"
