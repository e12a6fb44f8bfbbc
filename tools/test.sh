#!/usr/bin/env bash
# test.sh -- builds ampx and runs every test (ctest). CUDA tests report
# "skipped" on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
tools/build.sh
cd build
ctest --output-on-failure --timeout 600 --parallel "$(nproc)"
echo "tools/test.sh: build and tests took $(( $(date +%s) - start )) s"
