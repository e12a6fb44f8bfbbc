#!/usr/bin/env bash
# run_tests.sh LIB_DIR INCLUDE_DIR TINY_TRAIN -- runs the Go binding's tests
# (go test) against libampx.so in LIB_DIR; see bindings/README.md. Then it
# builds mpitest/ (data-parallel training over MPI; build tag ampx_mpi,
# mpicc's flags) and runs it under mpirun with 2 ranks.
# Exits 77 when `go` is missing, unless AMPX_REQUIRE_BINDINGS=1. Without
# mpirun, mpicc or LIB_DIR/libampx_mpi.so only the MPI run is skipped, with a
# message (a failure with AMPX_REQUIRE_BINDINGS=1).
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

# Checked before anything runs, so that a required MPI run fails at once.
mpi_missing=""
if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
  mpi_missing="mpirun or mpicc not found (tools/deps.sh installs Open MPI)"
elif ! mpicc --showme:compile >/dev/null 2>&1; then
  mpi_missing="mpicc has no --showme (the build flags come from Open MPI's mpicc)"
elif [ -z "${AMPX_MPI_PLUGIN:-}" ] && [ ! -e "$lib_dir/libampx_mpi.so" ]; then
  mpi_missing="$lib_dir/libampx_mpi.so does not exist (libampx was built without MPI)"
fi
if [ -n "$mpi_missing" ] && [ "${AMPX_REQUIRE_BINDINGS:-0}" = 1 ]; then
  echo "go binding: FAILED: $mpi_missing (AMPX_REQUIRE_BINDINGS=1)" >&2
  exit 1
fi

cd "$(dirname "$0")"
go vet ./...
go test -count=1 -v ./...

if [ -n "$mpi_missing" ]; then
  echo "go binding: the mpirun run of mpitest is SKIPPED: $mpi_missing"
  exit 0
fi
mpitest="$lib_dir/go/mpitest"
CGO_CFLAGS="$CGO_CFLAGS $(mpicc --showme:compile)" CGO_LDFLAGS="$CGO_LDFLAGS $(mpicc --showme:link)" \
  go vet -tags ampx_mpi ./mpitest
CGO_CFLAGS="$CGO_CFLAGS $(mpicc --showme:compile)" CGO_LDFLAGS="$CGO_LDFLAGS $(mpicc --showme:link)" \
  go build -tags ampx_mpi -o "$mpitest" ./mpitest
mpirun_flags=()
# Open MPI refuses root and more ranks than cores unless told; other MPIs
# know neither flag.
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
  mpirun_flags=(--allow-run-as-root --oversubscribe)
fi
echo "go binding: mpirun -np 2 mpitest"
# A rank stuck in a collective would hang the job: give up after 5 minutes.
timeout 300 mpirun "${mpirun_flags[@]}" -np 2 "$mpitest"
