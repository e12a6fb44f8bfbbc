#!/usr/bin/env python3
"""check_readme_table.py -- README.md's "What works today" names only what exists.

Every `ampx_*` name in a row of that table must be declared by a public
header (include/ampx/*.h): a function (AMPX_API, or AMPX_RL_API in ampx_rl.h), or a type (typedef,
struct or enum). A row that names a function the headers do not declare
-- renamed, removed, or never written -- fails, with its line.

Usage: check_readme_table.py [--root CHECKOUT] [--readme FILE]
Exit status: 0 every name declared; 1 otherwise (or no table found).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TITLE = "## What works today"


def declared(headers: list[Path]) -> tuple[set[str], set[str]]:
    """(functions, types) the headers declare, read with comments blanked."""
    functions: set[str] = set()
    types: set[str] = set()
    for header in headers:
        text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", header.read_text(), flags=re.S)
        functions.update(re.findall(r"\bAMPX_(?:RL_)?API\b[^;(]*?\b(ampx_\w+)\s*\(", text))
        types.update(re.findall(r"}\s*(ampx_\w+)\s*;", text))                       # } name;
        types.update(re.findall(r"\btypedef\b[^;{(]*?\b(ampx_\w+)\s*;", text))       # handles
        types.update(re.findall(r"\btypedef\b[^;{]*?\(\s*\*\s*(ampx_\w+)\s*\)", text))  # callbacks
        types.update(re.findall(r"\b(?:struct|enum)\s+(ampx_\w+)", text))
    return functions, types


def table_rows(readme: Path) -> list[tuple[int, str]]:
    """(line number, text) of each body row of the table under TITLE."""
    rows, inside = [], False
    for number, line in enumerate(readme.read_text().splitlines(), start=1):
        if line.startswith("## "):
            inside = line.strip() == TITLE
            continue
        if inside and line.startswith("|") and not re.match(r"\|\s*-", line) \
                and not line.startswith("| part |"):
            rows.append((number, line))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=HERE.parent)
    parser.add_argument("--readme", type=Path, help="default: ROOT/README.md")
    options = parser.parse_args()
    readme = options.readme or options.root / "README.md"
    headers = sorted((options.root / "include" / "ampx").glob("*.h"))
    functions, types = declared(headers)
    rows = table_rows(readme)
    if not rows or not functions:
        print(f"check_readme_table: no '{TITLE}' table in {readme} or no AMPX_API "
              f"function in {options.root / 'include/ampx'}", file=sys.stderr)
        return 1
    names = 0
    failures = []
    for number, row in rows:
        part = row.split("|")[1].strip().split(":")[0][:40]
        for name in sorted(set(re.findall(r"\bampx_[a-z0-9_]+\b", row))):
            names += 1
            if name not in functions and name not in types:
                failures.append(f"{readme.name}:{number}: the row '{part}' names {name}, which "
                                f"no header of include/ampx declares")
    for failure in failures:
        print(failure, file=sys.stderr)
    if failures:
        return 1
    print(f"check_readme_table: {len(rows)} rows name {names} ampx_* functions and types, "
          f"each declared ({len(functions)} functions, {len(types)} types in "
          f"{', '.join(h.name for h in headers)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
