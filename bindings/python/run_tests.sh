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

installed=0
if [ "${1:-}" = "--installed" ]; then
  installed=1
  shift
  if [ $# -ne 1 ]; then
    echo "usage: $0 --installed TINY_TRAIN" >&2
    exit 2
  fi
elif [ $# -ne 3 ]; then
  echo "usage: $0 LIB_DIR INCLUDE_DIR TINY_TRAIN" >&2
  echo "       $0 --installed TINY_TRAIN" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"

missing() {
  if [ "${AMPX_REQUIRE_BINDINGS:-0}" = 1 ]; then
    echo "binding_python: FAILED: $1 (AMPX_REQUIRE_BINDINGS=1; run bindings/python/deps.sh)" >&2
    exit 1
  fi
  echo "binding_python: SKIPPED: $1 (bindings/python/deps.sh installs it)"
  exit 77
}

command -v python3 >/dev/null || missing "python3 not found"
for module in numpy torch; do
  python3 -c "import $module" 2>/dev/null || missing "the Python module $module is missing"
done

# The tests change directory: relative arguments would point elsewhere.
tiny_train="${!#}"
tiny_train="$(cd "$(dirname "$tiny_train")" && pwd)/$(basename "$tiny_train")"
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
  lib_dir="$(cd "$1" && pwd)"
  include_dir="$(cd "$2" && pwd)"
  work="$here/tests"
fi

# Checked before anything runs, so that a required MPI run fails at once.
mpi_missing=""
if ! command -v mpirun >/dev/null; then
  mpi_missing="mpirun not found (tools/deps.sh installs Open MPI)"
elif ! python3 -c "import mpi4py" 2>/dev/null; then
  mpi_missing="the Python module mpi4py is missing (bindings/python/deps.sh installs it)"
elif [ -z "${AMPX_MPI_PLUGIN:-}" ] && [ ! -e "$lib_dir/libampx_mpi.so" ]; then
  mpi_missing="$lib_dir/libampx_mpi.so does not exist (libampx was built without MPI)"
fi
if [ -n "$mpi_missing" ] && [ "${AMPX_REQUIRE_BINDINGS:-0}" = 1 ]; then
  echo "binding_python: FAILED: $mpi_missing (AMPX_REQUIRE_BINDINGS=1)" >&2
  exit 1
fi

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
  echo "binding_python: the mpirun runs of data_parallel_mpi.py are SKIPPED: $mpi_missing"
  exit "$status"
fi
mpirun_flags=()
# Open MPI refuses root and more ranks than cores unless told; other MPIs
# know neither flag.
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
  mpirun_flags=(--allow-run-as-root --oversubscribe)
fi
for ranks in 2 4; do
  echo "binding_python: mpirun -np $ranks python3 data_parallel_mpi.py"
  # A rank stuck in a collective would hang the job: give up after 5 minutes.
  timeout 300 mpirun "${mpirun_flags[@]}" -np "$ranks" python3 "$here/tests/data_parallel_mpi.py" \
    || status=1
done
exit "$status"
