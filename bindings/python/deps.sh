#!/usr/bin/env bash
# deps.sh -- installs what the Python binding's tests need and is missing
# (and python3's venv, for tools/check-wheel.sh):
# numpy, torch (the default wheel from PyPI, ~1.5 min), pytest, mpi4py
# (ampx.dist's tests under mpirun) and safetensors (the format's reference
# library, which tests/test_safetensors.py exchanges files with). mpi4py's
# PyPI wheel (seconds; a source build takes ~4 min) loads the first libmpi it finds at run time, while
# ampx's MPI plugin, libampx_mpi.so, reads the MPI_Comm handles of the MPI it
# was built against (tools/deps.sh installs Open MPI only, so they agree).
# On a machine with MPICH too, build mpi4py from source against the same MPI:
# pip install --no-binary mpi4py mpi4py.
set -euo pipefail

command -v python3 >/dev/null || { echo "install python3 (3.8 or newer) first" >&2; exit 1; }
# tools/check-wheel.sh installs the package into a fresh venv: Debian's
# python3 has venv (with ensurepip) in a package of its own.
if ! python3 -c "import ensurepip, venv" 2>/dev/null; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "installing: python3-venv"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
  else
    echo "python3 lacks venv/ensurepip (tools/check-wheel.sh needs them): apt-get install python3-venv" >&2
  fi
fi
need=()
# onnx and onnxruntime check and run the ONNX export tests (ctest onnx_export);
# gymnasium is the reference of the RL layer's environments (rl_envs_gymnasium).
for module in numpy torch pytest mpi4py safetensors onnx onnxruntime gymnasium; do
  python3 -c "import $module" 2>/dev/null || need+=("$module")
done
if [[ " ${need[*]} " == *" mpi4py "* ]] && ! command -v mpicc >/dev/null; then
  echo "not installing mpi4py: mpicc is missing (tools/deps.sh installs libopenmpi-dev);" \
       "the mpirun tests will be skipped" >&2
  need=("${need[@]/mpi4py}")
  read -r -a need <<<"${need[*]}"
fi
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
echo "installing: ${need[*]}"
python3 -m pip install --quiet "${need[@]}"
