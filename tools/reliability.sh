#!/usr/bin/env bash
# reliability.sh -- the reliability checks CI runs (issue 8):
#   1. the CPU test suite under ThreadSanitizer (the tsan preset, which runs
#      it with AMPX_BLAS=none and AMPX_DNNL_LIBRARY=none: OpenBLAS's and
#      oneDNN's threads are not instrumented; and without the long
#      single-threaded numerical cases, AMPX_UNIT_CPU_ARGS);
#   2. a smoke run of every libFuzzer target in fuzz/ (ASan + UBSan +
#      LeakSanitizer), AMPX_FUZZ_SECONDS each (default 25), starting from the
#      seed corpus in fuzz/corpus/<target> where there is one, with the
#      dictionary fuzz/<target>.dict where there is one; new inputs go
#      to build-fuzz/, so the checkout is not modified. A crash leaves its input in
#      build-fuzz/artifacts/ and fails the script.
# The fault-injection test (tests/unit/test_fault_injection.cpp) is a unit
# test: it runs in every suite, this one included.
#
# A longer fuzzing session (an hour, both cores), whose finds are worth
# merging into the seed corpus afterwards:
#   cmake -S fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang
#   cmake --build build-fuzz
#   mkdir -p build-fuzz/corpus-fuzz_api
#   AMPX_BLAS=none build-fuzz/fuzz_api -jobs=2 -workers=2 -max_total_time=3600 -max_len=4096 \
#     -timeout=10 -rss_limit_mb=2048 -dict=fuzz/fuzz_api.dict \
#     build-fuzz/corpus-fuzz_api fuzz/corpus/fuzz_api
# (each job writes fuzz-<n>.log; its last "#N ... cov: C ft: F" line gives
# the executions and coverage to report, as the issue 15 note does.)
#   build-fuzz/fuzz_api -merge=1 fuzz/corpus/fuzz_api build-fuzz/corpus-fuzz_api
# Clang and libFuzzer are needed (clang 14 is what CI has).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${AMPX_FUZZ_SECONDS:-25}
jobs=$(nproc)
start=$(date +%s)

cmake --preset tsan >/dev/null
cmake --build --preset tsan --parallel "$jobs"
ctest --preset tsan --timeout 1800 --parallel "$jobs"
tsan_done=$(date +%s)
echo "tools/reliability.sh: tsan build and tests took $(( tsan_done - start )) s"

cmake -S fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang >/dev/null
cmake --build build-fuzz --parallel "$jobs"
fuzz_built=$(date +%s)
echo "tools/reliability.sh: fuzz build took $(( fuzz_built - tsan_done )) s"
mkdir -p build-fuzz/artifacts
for target in build-fuzz/fuzz_*; do
  [ -x "$target" ] || continue
  name=$(basename "$target")
  scratch=build-fuzz/corpus-$name
  mkdir -p "$scratch"
  seeds=()
  [ -d "fuzz/corpus/$name" ] && seeds=("fuzz/corpus/$name")
  dict=()
  [ -f "fuzz/$name.dict" ] && dict=(-dict="fuzz/$name.dict")
  echo "tools/reliability.sh: fuzzing $name for $seconds s"
  # -timeout: an input that runs 10 s is a hang, reported like a crash.
  log=build-fuzz/$name.log
  # AMPX_BLAS=none: the GEMM is the library's own (instrumented) kernel.
  if ! AMPX_BLAS=none "$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
      -print_final_stats=1 -artifact_prefix=build-fuzz/artifacts/ "${dict[@]}" "$scratch" "${seeds[@]}" >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "tools/reliability.sh: $name failed; the input is in build-fuzz/artifacts/" >&2
    exit 1
  fi
  grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$log" | sed "s/^/  $name /"
done
end=$(date +%s)
echo "tools/reliability.sh: fuzz smoke took $(( end - fuzz_built )) s; total $(( end - start )) s"
