#!/usr/bin/env bash
# run_tests.sh LIB_DIR INCLUDE_DIR TINY_TRAIN -- the Rust binding's tests.
#
# Runs `cargo test` over the workspace (ampx-sys, ampx) against the libampx
# in LIB_DIR, then the data-parallel test (ampx/tests/data_parallel_mpi.rs,
# built with the `mpi` feature) under `mpirun -np 2`. The build goes to
# LIB_DIR/rust-target, so the source tree stays clean (Cargo.lock is
# committed and used with --locked). TINY_TRAIN, the reference C program,
# reaches the tests as AMPX_TINY_TRAIN.
#
# Exit status: 0 passed; 77 skipped because cargo is missing (a failure
# instead when AMPX_REQUIRE_BINDINGS=1); anything else failed. Without
# mpirun, Open MPI's mpicc or LIB_DIR/libampx_mpi.so only the mpirun run is
# skipped, with a message (a failure with AMPX_REQUIRE_BINDINGS=1).
set -euo pipefail

binding=binding_rust
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bindings/run_tests_common.sh
source "$here/../run_tests_common.sh"
binding_args "$@"
command -v cargo >/dev/null 2>&1 || skip_binding "cargo is not installed"

export AMPX_LIB_DIR="$lib_dir"
export AMPX_INCLUDE_DIR="$include_dir"
export AMPX_TINY_TRAIN="$tiny_train"
export CARGO_TARGET_DIR="$lib_dir/rust-target"
# Quieter panics from the tests that check caught panics; failures still
# print their messages.
export RUST_BACKTRACE="${RUST_BACKTRACE:-0}"

# Checked before anything runs, so that a required MPI run fails at once.
mpi_missing="$(mpi_missing_reason)"
if [ -z "$mpi_missing" ] && ! mpicc --showme:link >/dev/null 2>&1; then
  mpi_missing="Open MPI's mpicc (--showme:link) not found: the test links libmpi with its flags"
fi
mpi_check "$mpi_missing"

cd "$here"
echo "binding_rust: $(cargo --version), $(rustc --version)"
cargo test --offline --locked --workspace

if [ -n "$mpi_missing" ]; then
  echo "binding_rust: the mpirun run of tests/data_parallel_mpi.rs is SKIPPED: $mpi_missing"
  exit 0
fi
# Built once, then started on every rank (not `mpirun cargo`, which would
# run cargo on each rank).
exe="$(cargo test --offline --locked -p ampx --features mpi --test data_parallel_mpi --no-run \
         --message-format=json \
       | grep '"name":"data_parallel_mpi"' \
       | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)"
if [ -z "$exe" ] || [ ! -x "$exe" ]; then
  echo "binding_rust: cannot find the data_parallel_mpi test executable" >&2
  exit 1
fi
run_mpi 2 "$exe"
