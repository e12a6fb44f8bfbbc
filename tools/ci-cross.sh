#!/usr/bin/env bash
# ci-cross.sh -- the cross stages of CI: ampx for Windows x86-64 (MinGW-w64,
# tests under Wine) and for Linux arm64 (aarch64 cross compiler, tests under
# qemu-aarch64), each built in its own folder and tested with ctest through
# the toolchain's CMAKE_CROSSCOMPILING_EMULATOR (tests/cross/CMakeLists.txt
# lists what runs and what does not).
#   tools/ci-cross.sh            both stages
#   tools/ci-cross.sh windows    one of them
#   tools/ci-cross.sh arm64
# The folders (build-mingw, build-arm64) are reused between runs, and only
# the targets the tests run are built: no CUDA, no benchmarks, no bindings.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh --cross
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(windows arm64)
jobs=$(nproc)
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi

configure() {  # folder toolchain extra cmake options...
  local dir=$1 toolchain=$2
  shift 2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release --toolchain "$toolchain" \
    -DAMPX_CUDA=OFF "${launcher[@]}" "$@" >/dev/null
}

for stage in "${stages[@]}"; do
  start=$(date +%s)
  case "$stage" in
    windows)
      # -O0 for the tests' own code (as the sanitizer presets): doctest's
      # assertions compile 3-4x faster, and under Wine they run at native
      # speed; the library keeps Release optimization.
      configure build-mingw cmake/toolchains/mingw-w64-x86_64.cmake -DAMPX_TEST_CODE_OPTIONS=-O0
      cmake --build build-mingw --parallel "$jobs" --target ampx_cross_tests
      built=$(date +%s)
      # -LE training: the six model-training examples (ctest -L training runs
      # them) take minutes each with ampx's own GEMM under Wine; the stage
      # runs the other examples, the unit suite and the Windows checks.
      (cd build-mingw && ctest --output-on-failure --timeout 900 --parallel "$jobs" -LE training)
      ;;
    arm64)
      configure build-arm64 cmake/toolchains/aarch64-linux-gnu.cmake -DAMPX_BUILD_EXAMPLES=OFF
      cmake --build build-arm64 --parallel "$jobs" --target ampx_cross_tests
      built=$(date +%s)
      (cd build-arm64 && ctest --output-on-failure --timeout 1800 --parallel "$jobs")
      ;;
    *)
      echo "ci-cross.sh: unknown stage '$stage' (windows, arm64)" >&2
      exit 2
      ;;
  esac
  end=$(date +%s)
  echo "tools/ci-cross.sh: $stage build took $((built - start)) s, tests $((end - built)) s"
done
