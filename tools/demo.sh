#!/usr/bin/env bash
# demo.sh -- builds ampx and runs the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/build.sh
./build/examples/ampx_demo "$@"
