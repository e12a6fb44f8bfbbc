#!/usr/bin/env bash
# deps.sh -- installs what the Python binding's tests need and is missing:
# numpy, torch (the default wheel from PyPI, ~1.5 min) and pytest.
set -euo pipefail

command -v python3 >/dev/null || { echo "install python3 (3.8 or newer) first" >&2; exit 1; }
need=()
for module in numpy torch pytest; do
  python3 -c "import $module" 2>/dev/null || need+=("$module")
done
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
echo "installing: ${need[*]}"
python3 -m pip install --quiet "${need[@]}"
