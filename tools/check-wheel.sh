#!/usr/bin/env bash
# check-wheel.sh [--tiny-train PATH] [PIP_INSTALL_ARGS...] -- checks the Python
# wheel the way a user gets it: `pip install bindings/python` into a fresh
# virtual environment builds libampx (and libampx_mpi.so where MPI is found;
# the CUDA backend where nvcc is) into the package, and the binding's tests
# then pass against that installed package, with no AMPX_LIBRARY and no
# PYTHONPATH -- what CI runs, after tools/test.sh has built the reference
# program the tests compare with (TINY_TRAIN, default
# build/bindings/ampx_tiny_train; it is not part of the package).
#
# Also checks: the import comes from the venv's site-packages, not the
# checkout or the system; the installed files include the libraries and
# ampx.h; AMPX_LIBRARY still overrides (a bad one is an ImportError naming
# it; another copy is the one loaded); a package copy that fails to load is
# an ImportError, not a fall-back to another libampx; and no file is left in
# the checkout (git status --porcelain, and --ignored under bindings/python). PIP_INSTALL_ARGS go to pip, e.g.
# -C cmake.define.AMPX_CUDA=OFF. The venv uses --system-site-packages, so
# torch, numpy, mpi4py and safetensors installed system-wide are reused
# (bindings/python/deps.sh installs them) rather than downloaded again.
# Compile jobs: CMAKE_BUILD_PARALLEL_LEVEL, default nproc.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tiny_train="$root/build/bindings/ampx_tiny_train"
if [ "${1:-}" = "--tiny-train" ]; then
  tiny_train="$2"
  shift 2
fi
fail() { echo "check-wheel: FAILED: $*" >&2; exit 1; }
[ -x "$tiny_train" ] || fail "$tiny_train is not an executable (run tools/test.sh first," \
                             "or pass --tiny-train PATH)"
tiny_train="$(cd "$(dirname "$tiny_train")" && pwd)/$(basename "$tiny_train")"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/ampx-check-wheel.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
unset AMPX_LIBRARY AMPX_INCLUDE_DIR PYTHONPATH
export PYTHONDONTWRITEBYTECODE=1
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
# Files the install or the tests leave in the checkout: new files anywhere,
# and under bindings/python (where pip builds) ignored ones too (build/,
# *.egg-info, __pycache__). Only new files, so that edits in progress in a
# working copy do not count.
new_files() {
  {
    git -C "$root" status --porcelain --untracked-files=all | grep '^??' || true
    git -C "$root" status --porcelain --ignored --untracked-files=all -- bindings/python \
      | grep '^!!' || true
  } | sort
}
before="$(new_files)"

python3 -m venv --system-site-packages "$tmp/venv"
export VIRTUAL_ENV="$tmp/venv"
export PATH="$tmp/venv/bin:$PATH"
py="$tmp/venv/bin/python"
cd "$tmp"  # outside the checkout from here on: `python -c` puts the cwd on sys.path

if "$py" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("ampx") is None)'; then
  fail "ampx is importable before the install ($("$py" -c 'import importlib.util; print(importlib.util.find_spec("ampx").origin)')):" \
       "uninstall it from the system's site-packages first"
fi

start=$(date +%s)
"$py" -m pip install --quiet "$root/bindings/python" "$@"
echo "check-wheel: pip install bindings/python took $(( $(date +%s) - start )) s" \
     "(CMAKE_BUILD_PARALLEL_LEVEL=$CMAKE_BUILD_PARALLEL_LEVEL${*:+, $*})"

added="$(comm -13 <(echo "$before") <(new_files))"
[ -z "$added" ] || fail "pip install wrote into the checkout:" "$added"

# Imported from the venv, library included; the installed files.
package="$("$py" - "$tmp/venv" <<'EOF'
import os, sys, sysconfig
import ampx
from ampx._lib import cdll  # (ampx._lib, the attribute, is the functions' table)
venv = os.path.realpath(sys.argv[1])
site = {os.path.realpath(sysconfig.get_paths()[key]) for key in ("purelib", "platlib")}
package = os.path.dirname(os.path.realpath(ampx.__file__))
library = os.path.realpath(cdll._name)
if os.path.dirname(package) not in site or not package.startswith(venv + os.sep):
    sys.exit(f"check-wheel: FAILED: ampx was imported from {package}, not the venv's site-packages")
if os.path.dirname(library) != package:
    sys.exit(f"check-wheel: FAILED: ampx loaded {library}, not the package's own library")
print(package)
EOF
)"
echo "check-wheel: ampx $("$py" -c 'from ampx._lib import lib; print(lib.ampx_version_string().decode())')" \
     "imported from $package"
echo "check-wheel: the package's files other than Python modules:"
"$py" - <<'EOF'
import importlib.metadata
for f in importlib.metadata.files("ampx"):
    if f.suffix not in (".py", ".pyc") and not f.parts[0].endswith(".dist-info"):
        print(f"  {f} ({f.locate().stat().st_size} bytes)")
EOF
[ -f "$package/libampx.so.0" ] || fail "the wheel has no ampx/libampx.so.0"
[ -f "$package/include/ampx/ampx.h" ] || fail "the wheel has no ampx/include/ampx/ampx.h"
if command -v mpicc >/dev/null && [ ! -f "$package/libampx_mpi.so" ]; then
  fail "MPI is installed (mpicc) but the wheel has no ampx/libampx_mpi.so"
fi
if readelf -d "$package/libampx.so.0" 2>/dev/null | grep -q libcublasLt; then
  echo "check-wheel: the library has the CUDA backend"
else
  echo "check-wheel: the library has no CUDA backend"
fi

# AMPX_LIBRARY overrides: a bad one fails, naming it; another copy is used.
if out="$(AMPX_LIBRARY="$tmp/nonexistent/libampx.so" "$py" -c 'import ampx' 2>&1)"; then
  fail "import ampx succeeded with AMPX_LIBRARY pointing at a missing file"
fi
grep -q "ImportError: ampx: cannot load AMPX_LIBRARY='$tmp/nonexistent/libampx.so'" <<<"$out" \
  || fail "a missing AMPX_LIBRARY did not give the expected ImportError: $out"
mkdir "$tmp/other"
cp "$package/libampx.so.0" "$tmp/other/libampx.so"
loaded="$(AMPX_LIBRARY="$tmp/other/libampx.so" "$py" -c 'from ampx._lib import cdll; print(cdll._name)')"
[ "$loaded" = "$tmp/other/libampx.so" ] || fail "AMPX_LIBRARY=$tmp/other/libampx.so loaded $loaded"
# A package copy that does not load is an error, not a fall-back to another libampx.
mkdir "$tmp/broken"
cp -r "$package" "$tmp/broken/ampx"
echo "not a library" >"$tmp/broken/ampx/libampx.so.0"
if out="$(PYTHONPATH="$tmp/broken" "$py" -c 'import ampx' 2>&1)"; then
  fail "import ampx succeeded with a broken ampx/libampx.so.0"
fi
grep -q "ImportError: ampx: cannot load the package's own library" <<<"$out" \
  || fail "a broken package library did not give the expected ImportError: $out"
echo "check-wheel: AMPX_LIBRARY overrides; a broken package library is an ImportError"

start=$(date +%s)
status=0
bash "$root/bindings/python/run_tests.sh" --installed "$tiny_train" || status=$?
echo "check-wheel: the tests of the installed package took $(( $(date +%s) - start )) s" \
     "(exit $status)"
added="$(comm -13 <(echo "$before") <(new_files))"
[ -z "$added" ] || fail "the tests wrote into the checkout:" "$added"
exit "$status"
