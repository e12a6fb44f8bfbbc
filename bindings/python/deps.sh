#!/usr/bin/env bash
# deps.sh -- installs what the Python binding's tests need and is missing:
# numpy, torch (the default wheel from PyPI, ~1.5 min), pytest and mpi4py
# (ampx.dist's tests under mpirun). mpi4py is built from source (~4 min)
# with the system's mpicc: ampx's MPI plugin, libampx_mpi.so, reads the
# MPI_Comm handles of the MPI it was built against, which tools/deps.sh
# installs (Open MPI, libopenmpi-dev); PyPI's wheel would pick whichever
# libmpi it finds first at run time (MPICH's where both are installed).
set -euo pipefail

command -v python3 >/dev/null || { echo "install python3 (3.8 or newer) first" >&2; exit 1; }
need=()
for module in numpy torch pytest mpi4py; do
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
python3 -m pip install --quiet --no-binary mpi4py "${need[@]}"
