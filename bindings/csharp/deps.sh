#!/usr/bin/env bash
# deps.sh -- installs what the C# binding's tests need and is missing:
# Debian's Mono C# compiler (mono-mcs: mcs, C# up to 7.2) and runtime
# (mono-runtime). The tests use a harness of their own (tests/Harness.cs),
# so no NuGet package is needed. Needs root; otherwise says what to install.
set -euo pipefail

if command -v mcs >/dev/null && command -v mono >/dev/null; then exit 0; fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "the C# binding needs Mono: sudo apt-get install -y mono-mcs mono-runtime" >&2
  exit 1
fi
echo "installing: mono-mcs mono-runtime"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends mono-mcs mono-runtime >/dev/null
