#!/usr/bin/env bash
# run_tests.sh LIB_DIR INCLUDE_DIR TINY_TRAIN -- checks the Julia binding.
# No Julia toolchain is needed for the main check, tools/check_bindings.py:
# every ccall of the generated src/LibAmpx.jl against the header (symbol,
# argument count and types), every LibAmpx call of the hand-written
# src/Ampx.jl (a function of the header, the right argument count; no
# ccall of its own), and the generated structs' layouts against
# bindings/layout/ampx_layout.txt by C's rules. When `julia` exists,
# test/runtests.jl runs too (the reference run against TINY_TRAIN and the
# tests of every surface), and, with mpirun, test/data_parallel_mpi.jl on 2
# ranks. Julia cannot be installed on the build machines (no Debian
# package), so the static check -- and parse_check.py, which parses every
# source with tree-sitter's Julia grammar -- is the test there, also in CI:
# the Julia tests are written as they would run but have not run.
set -euo pipefail

binding=binding_julia
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bindings/run_tests_common.sh
source "$here/../run_tests_common.sh"
binding_args "$@"
root=$(cd "$here/../.." && pwd)

# The static check covers every binding; only Julia's result matters here.
report=$(python3 "$root/tools/check_bindings.py" --root "$root" || true)
julia_row=$(grep '^julia ' <<<"$report")
echo "$julia_row"
sed -n '/^julia /,/^[a-z]/{/^  /p}' <<<"$report"
case "$julia_row" in
  *" OK") ;;
  *) exit 1 ;;
esac

# The sources parse (tree-sitter's Julia grammar; bindings/julia/deps.sh).
parse_status=0
python3 "$here/parse_check.py" "$here"/src/*.jl "$here"/test/*.jl || parse_status=$?
if [ "$parse_status" = 77 ]; then
  if bindings_required; then
    echo "$binding: FAILED: the Julia grammar is missing (AMPX_REQUIRE_BINDINGS=1;" \
         "run bindings/julia/deps.sh)" >&2
    exit 1
  fi
  echo "$binding: the syntax check is SKIPPED (bindings/julia/deps.sh installs its grammar)"
elif [ "$parse_status" != 0 ]; then
  exit 1
fi

if ! command -v julia >/dev/null; then
  echo "$binding: static check passed; julia is missing, so test/runtests.jl and" \
       "test/data_parallel_mpi.jl did not run"
  exit 0
fi
mpi_check "$(mpi_missing_reason)"
export AMPX_LIB="$lib_dir/libampx.so"
AMPX_TINY_TRAIN="$tiny_train" julia --startup-file=no --project="$here" "$here/test/runtests.jl"

if [ -n "$mpi_missing" ]; then
  echo "$binding: test/data_parallel_mpi.jl is SKIPPED: $mpi_missing"
  exit 0
fi
run_mpi 2 julia --startup-file=no --project="$here" "$here/test/data_parallel_mpi.jl"
