#!/usr/bin/env bash
# deps.sh -- installs what the Julia binding's checks need and is missing.
# Julia itself has no Debian package and is not installed: the binding is
# checked statically (tools/check_bindings.py) and its sources are parsed
# with tree-sitter's Julia grammar (parse_check.py; PyPI: tree-sitter,
# tree-sitter-julia, a few seconds).
set -euo pipefail

command -v python3 >/dev/null || { echo "install python3 first" >&2; exit 1; }
if python3 -c "import tree_sitter, tree_sitter_julia" 2>/dev/null; then exit 0; fi
echo "installing: tree-sitter tree-sitter-julia"
python3 -m pip install --quiet "tree-sitter>=0.22" "tree-sitter-julia>=0.23"
