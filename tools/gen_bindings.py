#!/usr/bin/env python3
"""gen_bindings.py -- writes every binding's raw layer from include/ampx/ampx.h.

The header is read by libclang (tools/bindgen/model.py) into one model;
each emitter (tools/bindgen/emit_*.py) turns the model into its language's
raw declarations: functions, struct layouts, enums, constants and the
*_INIT macros. The files are checked in, so building a binding needs no
libclang; each begins with GENERATED_MARK, which tools/check_bindings.py
uses to tell raw from idiomatic code.

Usage:
  gen_bindings.py            rewrite the generated files that changed
  gen_bindings.py --check    change nothing; exit 1 naming every generated
                             file that differs from what the header gives
                             (a header edited without regenerating)

Exit status: 0 done / up to date; 1 out of date or the header cannot be
bound; 77 libclang's Python bindings are missing (pip install libclang) --
a failure instead when AMPX_REQUIRE_BINDINGS=1.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import pkgutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# The drift test runs in CI's checkout, which must stay clean.
sys.dont_write_bytecode = True


def emitters():
    """The emitter modules, in name order: each has emit(header) returning
    {path relative to the repository: file text}."""
    import bindgen
    names = sorted(m.name for m in pkgutil.iter_modules(bindgen.__path__)
                   if m.name.startswith("emit_"))
    return [importlib.import_module(f"bindgen.{name}") for name in names]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="compare instead of writing; exit 1 on any difference")
    parser.add_argument("--root", type=Path, default=HERE.parent,
                        help="the ampx checkout (default: this script's parent folder)")
    options = parser.parse_args()

    try:
        import clang.cindex  # noqa: F401
    except ImportError:
        message = ("gen_bindings: libclang's Python bindings are missing "
                   "(pip install libclang, or apt-get install python3-clang)")
        if os.environ.get("AMPX_REQUIRE_BINDINGS") == "1":
            print(message + " and AMPX_REQUIRE_BINDINGS=1: failing", file=sys.stderr)
            return 1
        print(message + ": skipped")
        return 77

    from bindgen.model import ModelError, read_header
    try:
        header = read_header(options.root / "include" / "ampx" / "ampx.h")
        outputs: dict[str, str] = {}
        for module in emitters():
            for path, text in module.emit(header).items():
                if path in outputs:
                    raise ModelError(f"{path} is written by two emitters")
                outputs[path] = text
    except ModelError as error:
        print(f"gen_bindings: {error}", file=sys.stderr)
        return 1

    stale = []
    for path, text in sorted(outputs.items()):
        target = options.root / path
        current = target.read_text() if target.exists() else None
        if current == text:
            continue
        stale.append(path)
        if options.check:
            diff = difflib.unified_diff(
                (current or "").splitlines(keepends=True), text.splitlines(keepends=True),
                fromfile=f"{path} (checked in)", tofile=f"{path} (from ampx.h)", n=1)
            lines = list(diff)
            sys.stdout.writelines(lines[:40])
            if len(lines) > 40:
                print(f"... {len(lines) - 40} more diff lines")
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            print(f"gen_bindings: wrote {path}")
    if options.check:
        if stale:
            print(f"gen_bindings: {len(stale)} generated file(s) differ from ampx.h: "
                  f"{', '.join(stale)}; run tools/gen_bindings.py and commit the result",
                  file=sys.stderr)
            return 1
        print(f"gen_bindings: {len(outputs)} generated files match ampx.h "
              f"({len(header.functions)} functions, {len(header.structs)} structs)")
    elif not stale:
        print(f"gen_bindings: {len(outputs)} generated files already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
