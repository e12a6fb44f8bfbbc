#!/usr/bin/env bash
# run_tests.sh LIB_DIR INCLUDE_DIR TINY_TRAIN -- the Python binding's tests.
# run_tests.sh --installed TINY_TRAIN         -- the same, of the installed package.
#
# Runs tests/ (unittest; pytest also collects them) against LIB_DIR/libampx.so
# with the package imported from this folder (no install needed), then
# tests/data_parallel_mpi.py under mpirun with 2 and 4 ranks. Exits 0 when
# they pass, 77 when python3, numpy or torch is missing (a skip; with
# AMPX_REQUIRE_BINDINGS=1 that is a failure instead), else 1. Without
# mpirun, mpi4py or LIB_DIR/libampx_mpi.so only the MPI runs are skipped,
# with a message (again a failure with AMPX_REQUIRE_BINDINGS=1).
#
# With --installed, the package is the one python3 imports (pip install
# bindings/python: the wheel carries libampx, libampx_mpi.so and ampx.h), so
# AMPX_LIBRARY, AMPX_INCLUDE_DIR and PYTHONPATH are not set (the first two
# are unset), the tests run from a temporary working directory, and it is an
# error when that package is this folder's (tools/check-wheel.sh).
set -euo pipefail

binding=binding_python
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=bindings/run_tests_common.sh
source "$here/../run_tests_common.sh"
installed=0
if [ "${1:-}" = "--installed" ]; then
  installed=1
  shift
  if [ $# -ne 1 ]; then
    echo "usage: $0 --installed TINY_TRAIN" >&2
    exit 2
  fi
  # The tests change directory: a relative path would point elsewhere.
  tiny_train="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
elif [ $# -ne 3 ]; then
  echo "usage: $0 LIB_DIR INCLUDE_DIR TINY_TRAIN" >&2
  echo "       $0 --installed TINY_TRAIN" >&2
  exit 2
else
  binding_args "$@"
fi

command -v python3 >/dev/null || skip_binding "python3 not found"
for module in numpy torch; do
  python3 -c "import $module" 2>/dev/null || skip_binding "the Python module $module is missing"
done

if [ "$installed" = 1 ]; then
  # The package's own library and header, not ones named from outside.
  unset AMPX_LIBRARY AMPX_INCLUDE_DIR
  export PYTHONDONTWRITEBYTECODE=1
  # Run from outside the checkout, so that neither the working directory nor
  # anything else puts this folder's ampx/ ahead of the installed one.
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  # Where the package is, found without importing it (sys.path as the tests
  # will see it: the working directory and tests/, which has no ampx/).
  lib_dir="$(cd "$work" && python3 -c '
import importlib.util, os, sys
sys.path.insert(0, sys.argv[1])
spec = importlib.util.find_spec("ampx")
print(os.path.dirname(os.path.realpath(spec.origin)) if spec and spec.origin else "")' \
    "$here/tests")"
  if [ -z "$lib_dir" ]; then
    echo "binding_python: FAILED: no installed ampx package (pip install bindings/python)" >&2
    exit 1
  fi
  if [ "$lib_dir" = "$(cd "$here/ampx" && pwd -P)" ]; then
    echo "binding_python: FAILED: --installed, but ampx is imported from $lib_dir" \
         "(the source tree: is PYTHONPATH set?)" >&2
    exit 1
  fi
  echo "binding_python: testing the installed package $lib_dir"
else
  work="$here/tests"
fi

# Checked before anything runs, so that a required MPI run fails at once.
mpi_missing="$(mpi_missing_reason)"
if [ -z "$mpi_missing" ] && ! python3 -c "import mpi4py" 2>/dev/null; then
  mpi_missing="the Python module mpi4py is missing (bindings/python/deps.sh installs it)"
fi
mpi_check "$mpi_missing"

if [ "$installed" = 0 ]; then
  export AMPX_LIBRARY="$lib_dir/libampx.so"
  export AMPX_INCLUDE_DIR="$include_dir"
  export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
fi
export AMPX_TINY_TRAIN="$tiny_train"
export PYTHONDONTWRITEBYTECODE=1  # leave no __pycache__ in the source tree
cd "$work"
status=0
python3 -m unittest discover -s "$here/tests" -t "$here/tests" -v || status=1

if [ -n "$mpi_missing" ]; then
  echo "$binding: the mpirun runs of data_parallel_mpi.py are SKIPPED: $mpi_missing"
  exit "$status"
fi
for ranks in 2 4; do
  run_mpi "$ranks" python3 "$here/tests/data_parallel_mpi.py" || status=1
done
exit "$status"
