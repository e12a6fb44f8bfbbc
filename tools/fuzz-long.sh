#!/usr/bin/env bash
# fuzz-long.sh [seconds] -- runs every libFuzzer target in fuzz/ for
# `seconds` each (default 600), one after the other, each on every core
# (libFuzzer's fork mode, -fork=$(nproc)), and prints per target the
# executions, the coverage reached and the findings (crashes, timeouts,
# out-of-memory reports, with their inputs). Unlike the smoke run of
# tools/reliability.sh it goes on after a finding, so one run reports them
# all; it exits 1 when there was any.
#
# Each target starts from its seed corpus (fuzz/corpus/<target>, which
# holds the inputs of earlier findings as regression seeds) and its
# dictionary (fuzz/<target>.dict); what it adds goes to
# build-fuzz/corpus-long-<target>, findings to build-fuzz/findings-long/,
# so the checkout is not modified. Worth merging into the seeds afterwards:
#   build-fuzz/<target> -merge=1 fuzz/corpus/<target> build-fuzz/corpus-long-<target>
# Needs clang and libFuzzer (tools/reliability.sh builds the same way).
# Run it on a quiet machine: the executions per second depend on the load.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
case $seconds in
  '' | *[!0-9]*) echo "usage: tools/fuzz-long.sh [seconds]" >&2; exit 2 ;;
esac
jobs=$(nproc)

cmake -S fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang >/dev/null
cmake --build build-fuzz --parallel "$jobs"
findings_dir=build-fuzz/findings-long
mkdir -p "$findings_dir"

total=0
summary=()
for target in build-fuzz/fuzz_*; do
  [ -x "$target" ] && [ -f "$target" ] || continue
  name=$(basename "$target")
  scratch=build-fuzz/corpus-long-$name
  mkdir -p "$scratch" "$findings_dir/$name"
  seeds=()
  [ -d "fuzz/corpus/$name" ] && seeds=("fuzz/corpus/$name")
  dict=()
  [ -f "fuzz/$name.dict" ] && dict=(-dict="fuzz/$name.dict")
  log=build-fuzz/$name-long.log
  echo "tools/fuzz-long.sh: fuzzing $name for $seconds s on $jobs processes (log: $log)"
  # AMPX_BLAS=none: the GEMM is the library's own (instrumented) kernel.
  # -timeout: an input that runs 10 s is a hang, reported as a finding.
  AMPX_BLAS=none "$target" -fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
    -artifact_prefix="$findings_dir/$name/" "${dict[@]}" "$scratch" "${seeds[@]}" >"$log" 2>&1 ||
    true
  # The fork mode's progress lines: "#<runs>: cov: C ft: F corp: N exec/s E
  # oom/timeout/crash: O/T/X time: Ss job: J ...".
  last=$(grep -E '^#[0-9]+: cov:' "$log" | tail -n 1 || true)
  runs=$(sed -E 's/^#([0-9]+):.*/\1/' <<<"$last")
  cov=$(sed -E 's/.* cov: ([0-9]+) .*/\1/' <<<"$last")
  ft=$(sed -E 's/.* ft: ([0-9]+) .*/\1/' <<<"$last")
  counts=$(sed -E 's|.*oom/timeout/crash: ([0-9]+/[0-9]+/[0-9]+).*|\1|' <<<"$last")
  found=$(find "$findings_dir/$name" -type f | wc -l)
  total=$((total + found))
  summary+=("$(printf '%-24s executions %-12s cov %-6s ft %-7s oom/timeout/crash %-9s inputs kept %s' \
    "$name" "${runs:-?}" "${cov:-?}" "${ft:-?}" "${counts:-?}" "$found")")
  if [ "$found" -gt 0 ]; then
    find "$findings_dir/$name" -type f | sed 's/^/    /'
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|fuzz_api finding|.*: .* \(.*\)$)' "$log" |
      sort | uniq -c | sort -rn | head -n 10 | sed 's/^/    /' || true
  fi
done

echo "tools/fuzz-long.sh: $seconds s per target, $jobs processes each"
printf '%s\n' "${summary[@]}"
if [ "$total" -gt 0 ]; then
  echo "tools/fuzz-long.sh: $total finding(s); their inputs are in $findings_dir/" >&2
  exit 1
fi
echo "tools/fuzz-long.sh: no findings"
