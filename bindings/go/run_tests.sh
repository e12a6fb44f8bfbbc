#!/usr/bin/env bash
# run_tests.sh LIB_DIR INCLUDE_DIR TINY_TRAIN -- runs the Go binding's tests
# (go test) against libampx.so in LIB_DIR; see bindings/README.md. Then it
# builds mpitest/ (data-parallel training over MPI; build tag ampx_mpi,
# mpicc's flags) and runs it under mpirun with 2 ranks.
# Exits 77 when `go` is missing, unless AMPX_REQUIRE_BINDINGS=1. Without
# mpirun, mpicc or LIB_DIR/libampx_mpi.so only the MPI run is skipped, with a
# message (a failure with AMPX_REQUIRE_BINDINGS=1).
set -euo pipefail

binding=binding_go
# shellcheck source=bindings/run_tests_common.sh
source "$(dirname "$0")/../run_tests_common.sh"
binding_args "$@"
command -v go >/dev/null || skip_binding "the Go toolchain is missing"

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

# Checked before anything runs, so that a required MPI run fails at once.
mpi_missing="$(mpi_missing_reason)"
if [ -z "$mpi_missing" ] && ! mpicc --showme:compile >/dev/null 2>&1; then
  mpi_missing="Open MPI's mpicc (--showme) not found: the build flags come from it"
fi
mpi_check "$mpi_missing"

cd "$(dirname "$0")"
go vet ./...
go test -count=1 -v ./...

if [ -n "$mpi_missing" ]; then
  echo "$binding: the mpirun run of mpitest is SKIPPED: $mpi_missing"
  exit 0
fi
mpitest="$lib_dir/go/mpitest"
CGO_CFLAGS="$CGO_CFLAGS $(mpicc --showme:compile)" CGO_LDFLAGS="$CGO_LDFLAGS $(mpicc --showme:link)" \
  go vet -tags ampx_mpi ./mpitest
CGO_CFLAGS="$CGO_CFLAGS $(mpicc --showme:compile)" CGO_LDFLAGS="$CGO_LDFLAGS $(mpicc --showme:link)" \
  go build -tags ampx_mpi -o "$mpitest" ./mpitest
run_mpi 2 "$mpitest"
