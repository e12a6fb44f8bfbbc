#!/usr/bin/env bash
# deps.sh -- installs the Rust toolchain (Debian's cargo and rustc) when
# `cargo` is not on PATH. Needs root to install; otherwise says what to run.
set -euo pipefail

if command -v cargo >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "the Rust binding needs cargo and rustc" >&2
  echo "install them with: sudo apt-get install -y cargo rustc" >&2
  exit 1
fi
echo "installing: cargo rustc"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends cargo rustc >/dev/null
