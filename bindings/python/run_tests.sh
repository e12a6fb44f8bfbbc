#!/usr/bin/env bash
# run_tests.sh LIB_DIR INCLUDE_DIR TINY_TRAIN -- the Python binding's tests.
#
# Runs tests/ (unittest; pytest also collects them) against LIB_DIR/libampx.so
# with the package imported from this folder (no install needed), then
# tests/data_parallel_mpi.py under mpirun with 2 and 4 ranks. Exits 0 when
# they pass, 77 when python3, numpy or torch is missing (a skip; with
# AMPX_REQUIRE_BINDINGS=1 that is a failure instead), else 1. Without
# mpirun, mpi4py or LIB_DIR/libampx_mpi.so only the MPI runs are skipped,
# with a message (again a failure with AMPX_REQUIRE_BINDINGS=1).
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 LIB_DIR INCLUDE_DIR TINY_TRAIN" >&2
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

# The tests change into tests/: relative arguments would point elsewhere.
lib_dir="$(cd "$1" && pwd)"
include_dir="$(cd "$2" && pwd)"
tiny_train="$(cd "$(dirname "$3")" && pwd)/$(basename "$3")"

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

export AMPX_LIBRARY="$lib_dir/libampx.so"
export AMPX_INCLUDE_DIR="$include_dir"
export AMPX_TINY_TRAIN="$tiny_train"
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1  # leave no __pycache__ in the source tree
cd "$here/tests"
status=0
python3 -m unittest discover -s . -t . -v || status=1

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
  timeout 300 mpirun "${mpirun_flags[@]}" -np "$ranks" python3 data_parallel_mpi.py || status=1
done
exit "$status"
