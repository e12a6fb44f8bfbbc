#!/usr/bin/env bash
# gpu-check.sh -- build ampx with its CUDA backend, run the whole test suite
# (the unit_cuda test runs every case on GPU 0) and any GPU benchmarks, then
# print a summary table. For a GPU machine with nvcc, cmake and ninja; needs no
# network. Everything is held to a 450 s budget so a run fits in 8 minutes.
#
#   tools/gpu-check.sh    (from anywhere; builds in <repo>/build-gpu, or in
#                          $AMPX_GPU_BUILD_DIR when set)
#
# Exit status: 0 when every step passed, 1 otherwise, 2 when a prerequisite is
# missing.
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${AMPX_GPU_BUILD_DIR:-$ROOT/build-gpu}"
BUDGET_S=450
START=$(date +%s)

names=()
results=()
times=()

record() {  # name result seconds
  names+=("$1")
  results+=("$2")
  times+=("$3")
}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# Seconds left of the budget, but at most $1.
allowance() {
  local left=$((BUDGET_S - ($(date +%s) - START)))
  ((left < 1)) && left=1
  ((left < $1)) && echo "$left" || echo "$1"
}

summary() {
  echo
  echo "== summary ($(($(date +%s) - START)) s) =="
  printf '%-40s %-11s %8s\n' "step" "result" "time (s)"
  printf '%-40s %-11s %8s\n' "----" "------" "--------"
  local i
  for i in "${!names[@]}"; do
    printf '%-40s %-11s %8s\n' "${names[$i]}" "${results[$i]}" "${times[$i]}"
  done
}

finish() {
  summary
  local r
  for r in "${results[@]}"; do
    [[ "$r" == PASS || "$r" == SKIP ]] || exit 1
  done
  exit 0
}

# Runs "$@" under `timeout`; records PASS, FAIL or TIMEOUT under `name`.
step() {  # name limit_s command...
  local name=$1 limit=$2
  shift 2
  local t0 status
  t0=$(now)
  timeout --kill-after=10 "$(allowance "$limit")" "$@"
  status=$?
  if ((status == 0)); then
    record "$name" PASS "$(since "$t0")"
  elif ((status == 124 || status == 137)); then
    record "$name" TIMEOUT "$(since "$t0")"
  else
    record "$name" FAIL "$(since "$t0")"
  fi
  return "$status"
}

# ---- the machine ------------------------------------------------------------
echo "== GPU =="
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader ||
    echo "nvidia-smi failed"
else
  echo "nvidia-smi not found"
fi

NVCC=$(command -v nvcc || true)
[[ -z "$NVCC" && -x /usr/local/cuda/bin/nvcc ]] && NVCC=/usr/local/cuda/bin/nvcc
for tool in cmake ninja; do
  command -v "$tool" >/dev/null 2>&1 || { echo "error: $tool not found" >&2; exit 2; }
done
[[ -n "$NVCC" ]] || { echo "error: nvcc not found (PATH or /usr/local/cuda/bin)" >&2; exit 2; }
echo "nvcc: $NVCC ($("$NVCC" --version | grep -o 'release [0-9.]*'))"
echo "cmake: $(cmake --version | head -n 1)"

# Header-only test dependencies: the system's, else the copy in .deps/include,
# which CMake also searches.
for header in doctest/doctest.h dlpack/dlpack.h; do
  found=""
  for dir in /usr/include /usr/local/include "$ROOT/.deps/include"; do
    if [[ -f "$dir/$header" ]]; then found=$dir; break; fi
  done
  if [[ -z "$found" ]]; then
    echo "error: $header is in none of /usr/include, /usr/local/include, $ROOT/.deps/include" >&2
    exit 2
  fi
  echo "$header: $found"
done

# ---- build ------------------------------------------------------------------
echo
echo "== configure and build ($BUILD) =="
step configure 120 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DAMPX_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DAMPX_CUDA_EMULATOR=OFF || finish  # the real GPU is here: no emulated run
step build 300 cmake --build "$BUILD" -j "$(nproc)" || finish

# ---- tests ------------------------------------------------------------------
echo
# NCCL for the data-parallel tests: the GPU machine has PyTorch's wheel,
# whose nvidia-nccl package carries libnccl.so.2 (ampx loads it at run time).
if [ -z "${AMPX_NCCL_LIBRARY:-}" ]; then
  nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
  [ -n "$nccl" ] && [ -f "$nccl" ] && export AMPX_NCCL_LIBRARY="$nccl"
fi
echo "NCCL: ${AMPX_NCCL_LIBRARY:-libnccl.so.2 from the loader's path}"
# cuDNN for conv2d likewise (without it the CUDA backend has no convolution
# and those cases skip).
if [ -z "${AMPX_CUDNN_LIBRARY:-}" ]; then
  cudnn=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib", "libcudnn.so.9"))' 2>/dev/null)
  [ -n "$cudnn" ] && [ -f "$cudnn" ] && export AMPX_CUDNN_LIBRARY="$cudnn"
fi
echo "cuDNN: ${AMPX_CUDNN_LIBRARY:-libcudnn.so.9 from the loader's path}"

echo "== ctest =="
log="$BUILD/gpu-check-ctest.log"
t0=$(now)
timeout --kill-after=10 "$(allowance 240)" \
  ctest --test-dir "$BUILD" --output-on-failure --timeout 200 -j 4 2>&1 | tee "$log"
ctest_status=${PIPESTATUS[0]}
parsed=0
# Result lines look like "2/4 Test #2: unit_cuda ....***Skipped   0.01 sec".
line_re='^ *[0-9]+/[0-9]+ +Test +#[0-9]+: +([^ ]+) +\.*[ *]*(.*[^ ]) +([0-9.]+) +sec *$'
while IFS= read -r line; do
  [[ "$line" =~ $line_re ]] || continue
  name=${BASH_REMATCH[1]} outcome=${BASH_REMATCH[2]} seconds=${BASH_REMATCH[3]}
  case "$outcome" in
    Passed) result=PASS ;;
    Skipped)
      # Skipping is right on a machine without a GPU, never on this one.
      if [[ "$name" == *cuda* ]]; then result="FAIL(skip)"; else result=SKIP; fi ;;
    Timeout) result=TIMEOUT ;;
    *) result=FAIL ;;
  esac
  record "test $name" "$result" "$seconds"
  parsed=$((parsed + 1))
done <"$log"
if ((ctest_status == 124 || ctest_status == 137)); then
  record "ctest (whole run)" TIMEOUT "$(since "$t0")"
elif ((parsed == 0)); then
  record "ctest (no results)" FAIL "$(since "$t0")"
fi

# ---- benchmarks ---------------------------------------------------------------
shopt -s nullglob
benches=("$BUILD"/bench/bench_*)
shopt -u nullglob
for bench in "${benches[@]}"; do
  [[ -f "$bench" && -x "$bench" ]] || continue
  # CPU-only benchmarks take arguments and belong to bench_vs_torch_cpu.py.
  [[ "$(basename "$bench")" == *_cpu ]] && continue
  echo
  echo "== $(basename "$bench") =="
  # bench_fp8_gpu (FP8 against bf16: two linear shapes and an 8 x 4096 MLP
  # step) multiplies 1.1 TFLOP products: it gets twice the time.
  limit=60
  [[ "$(basename "$bench")" == bench_fp8_gpu ]] && limit=120
  step "bench $(basename "$bench")" "$limit" "$bench"
done
((${#benches[@]} == 0)) && echo && echo "(no benchmarks in $BUILD/bench)"

# Side-by-side comparisons with PyTorch, where the machine has it.
if python3 -c 'import torch' >/dev/null 2>&1; then
  for script in "$ROOT"/bench/*_gpu.py; do
    [[ -f "$script" ]] || continue
    echo
    echo "== $(basename "$script") =="
    step "bench $(basename "$script")" 120 python3 "$script" "$BUILD/libampx.so"
  done
else
  echo
  echo "(PyTorch is not installed: no side-by-side comparison)"
fi

finish
