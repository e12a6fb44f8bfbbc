#!/usr/bin/env bash
# demo.sh -- builds ampx and runs the demo (arguments go to the demo; try
# --help). Its images and chart land in build/demo-out unless --out says
# else; tools/refresh-docs-images.sh updates the README's copies.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/build.sh"
exec "$root/build/examples/demo/ampx_demo" "$@"
