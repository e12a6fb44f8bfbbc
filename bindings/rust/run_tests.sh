#!/usr/bin/env bash
# run_tests.sh LIB_DIR INCLUDE_DIR TINY_TRAIN -- the Rust binding's tests.
#
# Runs `cargo test` over the workspace (ampx-sys, ampx) against the libampx
# in LIB_DIR. The build goes to LIB_DIR/rust-target, so the source tree stays
# clean (Cargo.lock is committed and used with --locked). TINY_TRAIN, the
# reference C program, reaches the tests as AMPX_TINY_TRAIN.
#
# Exit status: 0 passed; 77 skipped because cargo is missing (a failure
# instead when AMPX_REQUIRE_BINDINGS=1); anything else failed.
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 LIB_DIR INCLUDE_DIR TINY_TRAIN" >&2
  exit 2
fi

if ! command -v cargo >/dev/null 2>&1; then
  if [ "${AMPX_REQUIRE_BINDINGS:-0}" = "1" ]; then
    echo "binding_rust: cargo is not installed and AMPX_REQUIRE_BINDINGS=1: failing" \
         "(install it with bindings/rust/deps.sh)" >&2
    exit 1
  fi
  echo "binding_rust: skipped: cargo is not installed (install it with bindings/rust/deps.sh)"
  exit 77
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lib_dir="$(cd "$1" && pwd)"
include_dir="$(cd "$2" && pwd)"
tiny_train="$(cd "$(dirname "$3")" && pwd)/$(basename "$3")"

for f in "$lib_dir/libampx.so" "$include_dir/ampx/ampx.h" "$tiny_train"; do
  if [ ! -e "$f" ]; then
    echo "binding_rust: $f does not exist" >&2
    exit 1
  fi
done

export AMPX_LIB_DIR="$lib_dir"
export AMPX_INCLUDE_DIR="$include_dir"
export AMPX_TINY_TRAIN="$tiny_train"
export CARGO_TARGET_DIR="$lib_dir/rust-target"
# Quieter panics from the tests that check caught panics; failures still
# print their messages.
export RUST_BACKTRACE="${RUST_BACKTRACE:-0}"

cd "$here"
echo "binding_rust: $(cargo --version), $(rustc --version)"
cargo test --offline --locked --workspace
