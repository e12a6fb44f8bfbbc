#!/usr/bin/env bash
# run_tests.sh LIB_DIR INCLUDE_DIR TINY_TRAIN -- runs the Go binding's tests
# (go test) against libampx.so in LIB_DIR; see bindings/README.md.
# Exits 77 when `go` is missing, unless AMPX_REQUIRE_BINDINGS=1.
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 LIB_DIR INCLUDE_DIR TINY_TRAIN" >&2
  exit 2
fi
lib_dir=$(cd "$1" && pwd)
include_dir=$(cd "$2" && pwd)
tiny_train=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")

if ! command -v go >/dev/null; then
  if [ "${AMPX_REQUIRE_BINDINGS:-0}" = 1 ]; then
    echo "go binding: the Go toolchain is missing (bindings/go/deps.sh installs it)" >&2
    exit 1
  fi
  echo "go binding: skipped, the Go toolchain is missing (bindings/go/deps.sh installs it)"
  exit 77
fi

# Build caches live next to the library, so the source tree stays clean;
# no module is ever downloaded.
export CGO_ENABLED=1
export CGO_CFLAGS="-I$include_dir"
export CGO_LDFLAGS="-L$lib_dir -Wl,-rpath,$lib_dir"
export GOCACHE="$lib_dir/go/cache"
export GOPATH="$lib_dir/go/path"
export GOFLAGS=-mod=mod
export GOPROXY=off
export GO111MODULE=on
export AMPX_TINY_TRAIN="$tiny_train"

cd "$(dirname "$0")"
go vet ./...
go test -count=1 -v ./...
