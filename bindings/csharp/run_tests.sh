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

binding=binding_csharp
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bindings/run_tests_common.sh
source "$here/../run_tests_common.sh"
binding_args "$@"
command -v mcs >/dev/null 2>&1 || skip_binding "mcs (mono-mcs) is not installed"
command -v mono >/dev/null 2>&1 || skip_binding "mono (mono-runtime) is not installed"
# Checked before anything runs, so that a required MPI run fails at once.
mpi_check "$(mpi_missing_reason)"

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

if [ -n "$mpi_missing" ]; then
  echo "$binding: the data-parallel test is SKIPPED: $mpi_missing"
else
  run_mpi 2 mono AmpxTests.exe --mpi || status=1
fi
exit $status
