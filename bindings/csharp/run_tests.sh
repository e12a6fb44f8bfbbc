#!/usr/bin/env bash
# run_tests.sh LIB_DIR INCLUDE_DIR TINY_TRAIN -- the C# binding's tests.
#
# Builds, with Debian's Mono compiler (mcs -langversion:7.2, the language
# Unity and Godot's C# accept too), into LIB_DIR/csharp (never into the
# source tree):
#   Ampx.dll                 the binding (Ampx/*.cs; -unsafe inside it only)
#   AmpxTests.exe            tests/*.cs, built without -unsafe: a program needs
#                            no unsafe code to use the binding
#   GameLoopTraining.exe     examples/GameLoopTraining.cs
#   ampx_layout_probe        bindings/layout/ampx_layout_probe.c, built with cc
# then runs the tests with mono (libampx found through LD_LIBRARY_PATH), the
# example (its table goes to the log), and the data-parallel test under
# `mpirun -np 2`.
#
# Exit status: 0 passed; 77 skipped because mcs or mono is missing (a
# failure instead when AMPX_REQUIRE_BINDINGS=1; bindings/csharp/deps.sh
# installs them); anything else failed. Without mpirun or
# LIB_DIR/libampx_mpi.so only the MPI run is skipped, with a message (a
# failure with AMPX_REQUIRE_BINDINGS=1).
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 LIB_DIR INCLUDE_DIR TINY_TRAIN" >&2
  exit 2
fi

missing() {
  if [ "${AMPX_REQUIRE_BINDINGS:-0}" = "1" ]; then
    echo "binding_csharp: FAILED: $1 and AMPX_REQUIRE_BINDINGS=1 (run bindings/csharp/deps.sh)" >&2
    exit 1
  fi
  echo "binding_csharp: SKIPPED: $1 (bindings/csharp/deps.sh installs it)"
  exit 77
}

command -v mcs >/dev/null 2>&1 || missing "mcs (mono-mcs) is not installed"
command -v mono >/dev/null 2>&1 || missing "mono (mono-runtime) is not installed"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lib_dir="$(cd "$1" && pwd)"
include_dir="$(cd "$2" && pwd)"
tiny_train="$(cd "$(dirname "$3")" && pwd)/$(basename "$3")"
for f in "$lib_dir/libampx.so" "$include_dir/ampx/ampx.h" "$tiny_train"; do
  if [ ! -e "$f" ]; then
    echo "binding_csharp: $f does not exist" >&2
    exit 1
  fi
done

out="$lib_dir/csharp"
rm -rf "$out"
mkdir -p "$out/tmp"
cc="${CC:-cc}"
echo "binding_csharp: $(mcs --version), $(mono --version | head -n 1)"

mcs_flags=(-langversion:7.2 -warnaserror+ -nologo -debug)
mcs "${mcs_flags[@]}" -unsafe -target:library -out:"$out/Ampx.dll" "$here"/Ampx/*.cs
mcs "${mcs_flags[@]}" -target:exe -r:"$out/Ampx.dll" -out:"$out/AmpxTests.exe" "$here"/tests/*.cs
mcs "${mcs_flags[@]}" -target:exe -r:"$out/Ampx.dll" -out:"$out/GameLoopTraining.exe" \
  "$here"/examples/GameLoopTraining.cs
"$cc" -std=c11 -I"$include_dir" "$here/../layout/ampx_layout_probe.c" -o "$out/ampx_layout_probe"

export LD_LIBRARY_PATH="$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export AMPX_TINY_TRAIN="$tiny_train"
export AMPX_LAYOUT_PROBE="$out/ampx_layout_probe"
export AMPX_TEST_TMP="$out/tmp"
cd "$out"

status=0
mono --debug AmpxTests.exe || status=1

echo "binding_csharp: examples/GameLoopTraining.cs"
mono GameLoopTraining.exe --quick || status=1

if ! command -v mpirun >/dev/null 2>&1; then
  mpi_missing="mpirun is not installed"
elif [ ! -e "$lib_dir/libampx_mpi.so" ]; then
  mpi_missing="$lib_dir/libampx_mpi.so was not built"
else
  mpi_missing=""
fi
if [ -n "$mpi_missing" ]; then
  if [ "${AMPX_REQUIRE_BINDINGS:-0}" = "1" ]; then
    echo "binding_csharp: FAILED: the data-parallel test needs MPI: $mpi_missing" >&2
    status=1
  else
    echo "binding_csharp: the data-parallel test is skipped: $mpi_missing"
  fi
else
  echo "binding_csharp: data-parallel training under mpirun -np 2"
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 mono AmpxTests.exe --mpi || status=1
fi
exit $status
