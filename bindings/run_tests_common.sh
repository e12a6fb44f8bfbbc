# bindings/run_tests_common.sh -- sourced by every
# bindings/<language>/run_tests.sh (see bindings/README.md) after it sets
# `binding`, the name its messages start with (binding_go, ...): the check
# of its arguments, the rule for a missing tool (skipped, exit 77; a
# failure instead with AMPX_REQUIRE_BINDINGS=1, as in CI) and the MPI runs.
# shellcheck shell=bash
# shellcheck disable=SC2154  # binding: set by the script that sources this file

# binding_args "$@": exits 2 with the usage unless there are three
# arguments, LIB_DIR INCLUDE_DIR TINY_TRAIN; sets lib_dir, include_dir and
# tiny_train to them, absolute (the tests change directory); exits 1 when
# libampx.so, ampx/ampx.h or TINY_TRAIN does not exist.
binding_args() {
  if [ $# -ne 3 ]; then
    echo "usage: $0 LIB_DIR INCLUDE_DIR TINY_TRAIN" >&2
    exit 2
  fi
  lib_dir="$(cd "$1" && pwd)"
  include_dir="$(cd "$2" && pwd)"
  tiny_train="$(cd "$(dirname "$3")" && pwd)/$(basename "$3")"
  local f
  for f in "$lib_dir/libampx.so" "$include_dir/ampx/ampx.h" "$tiny_train"; do
    if [ ! -e "$f" ]; then
      echo "$binding: $f does not exist" >&2
      exit 1
    fi
  done
}

# bindings_required: whether a missing tool is a failure (AMPX_REQUIRE_BINDINGS=1).
bindings_required() {
  [ "${AMPX_REQUIRE_BINDINGS:-0}" = 1 ]
}

# skip_binding WHY: the binding's tests cannot run (WHY: a tool is
# missing): exit 77, or 1 when bindings_required.
skip_binding() {
  local deps="bindings/${binding#binding_}/deps.sh installs it"
  if bindings_required; then
    echo "$binding: FAILED: $1 (AMPX_REQUIRE_BINDINGS=1; $deps)" >&2
    exit 1
  fi
  echo "$binding: SKIPPED: $1 ($deps)"
  exit 77
}

# mpi_missing_reason: why the MPI runs cannot happen, or nothing when
# mpirun and libampx_mpi.so (next to libampx, or AMPX_MPI_PLUGIN) exist.
# Needs lib_dir.
mpi_missing_reason() {
  if ! command -v mpirun >/dev/null; then
    echo "mpirun not found (tools/deps.sh installs Open MPI)"
  elif [ -z "${AMPX_MPI_PLUGIN:-}" ] && [ ! -e "$lib_dir/libampx_mpi.so" ]; then
    echo "$lib_dir/libampx_mpi.so does not exist (libampx was built without MPI)"
  fi
}

# mpi_check WHY: keeps WHY (why the MPI runs cannot happen; empty when they
# can) in mpi_missing; a non-empty one fails at once, before any test
# runs, when bindings_required.
mpi_check() {
  mpi_missing="$1"
  if [ -n "$mpi_missing" ] && bindings_required; then
    echo "$binding: FAILED: $mpi_missing (AMPX_REQUIRE_BINDINGS=1)" >&2
    exit 1
  fi
}

# run_mpi RANKS COMMAND...: runs COMMAND on RANKS ranks under mpirun.
run_mpi() {
  local ranks="$1"
  shift
  local flags=()
  # Open MPI refuses root and more ranks than cores unless told; other
  # MPIs know neither flag.
  if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
    flags=(--allow-run-as-root --oversubscribe)
  fi
  local shown=("$(basename "$1")" "${@:2}")
  echo "$binding: mpirun -np $ranks ${shown[*]}"
  # A rank stuck in a collective would hang the job: give up after 5 minutes.
  timeout 300 mpirun "${flags[@]}" -np "$ranks" "$@"
}
