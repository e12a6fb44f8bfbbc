#!/usr/bin/env bash
# deps.sh -- installs the Go toolchain (Debian's golang-go) when `go` is
# missing. Needs root; otherwise says what to install.
set -euo pipefail

command -v go >/dev/null && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "the Go binding needs Go >= 1.19: sudo apt-get install -y golang-go" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends golang-go >/dev/null
