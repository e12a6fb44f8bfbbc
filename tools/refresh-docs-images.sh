#!/usr/bin/env bash
# refresh-docs-images.sh -- builds ampx, runs the demo at its default size
# (arguments go to the demo, e.g. --device cpu) and copies the pictures the
# README shows, comparison.png and training.svg, into docs/images/. Its
# table is the one to put beside them in the README.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# --out last: the demo takes the last one given.
"$root/tools/demo.sh" "$@" --out "$out"
cp "$out/comparison.png" "$out/training.svg" "$root/docs/images/"
echo "tools/refresh-docs-images.sh: docs/images/comparison.png and training.svg refreshed"
