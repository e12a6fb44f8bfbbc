#!/usr/bin/env bash
# run_tests.sh LIB_DIR INCLUDE_DIR TINY_TRAIN -- the Python binding's tests.
#
# Runs tests/ (unittest; pytest also collects them) against LIB_DIR/libampx.so
# with the package imported from this folder (no install needed). Exits 0
# when they pass, 77 when python3, numpy or torch is missing (a skip; with
# AMPX_REQUIRE_BINDINGS=1 that is a failure instead), else 1.
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 LIB_DIR INCLUDE_DIR TINY_TRAIN" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"

missing() {
  if [ "${AMPX_REQUIRE_BINDINGS:-0}" = 1 ]; then
    echo "binding_python: FAILED: $1 (AMPX_REQUIRE_BINDINGS=1; run bindings/python/deps.sh)" >&2
    exit 1
  fi
  echo "binding_python: SKIPPED: $1 (bindings/python/deps.sh installs it)"
  exit 77
}

command -v python3 >/dev/null || missing "python3 not found"
for module in numpy torch; do
  python3 -c "import $module" 2>/dev/null || missing "the Python module $module is missing"
done

export AMPX_LIBRARY="$1/libampx.so"
export AMPX_INCLUDE_DIR="$2"
export AMPX_TINY_TRAIN="$3"
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1  # leave no __pycache__ in the source tree
cd "$here/tests"
exec python3 -m unittest discover -s . -t . -v
