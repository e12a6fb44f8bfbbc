"""emit_layout.py -- the C layout probe every binding's layout test runs.

bindings/layout/ampx_layout_probe.c prints, for every struct of ampx.h, as
the C compiler lays it out, one line per fact:

    sizeof <struct> <bytes>
    alignof <struct> <bytes>
    offsetof <struct>.<field> <bytes>

A binding's layout test compiles it (cc -std=c11 -I include), runs it and
compares each line with its own declarations, so a struct added to the
header is checked in every language without a hand-made list.
bindings/layout/ampx_layout.txt is the same table as clang computed it when
the files were generated; the drift test keeps it current, and a binding
whose toolchain cannot run here (Julia) is checked against it statically.
"""

from __future__ import annotations

from . import banner
from .model import Header

PROBE = "bindings/layout/ampx_layout_probe.c"
TABLE = "bindings/layout/ampx_layout.txt"


def layout_lines(header: Header) -> list[tuple[str, int]]:
    """The probe's facts, in its order, as clang computed them."""
    rows = []
    for s in header.structs:
        rows.append((f"sizeof {s.name}", s.size))
        rows.append((f"alignof {s.name}", s.align))
        for f in s.fields:
            rows.append((f"offsetof {s.name}.{f.name}", f.offset))
    return rows


def emit(header: Header) -> dict[str, str]:
    c = [banner("//").rstrip("\n"),
         "// Prints the size, alignment and field offsets of every struct of ampx.h",
         "// as this C compiler lays them out (see tools/bindgen/emit_layout.py).",
         "#define AMPX_EXPERIMENTAL",
         "#include <stddef.h>",
         "#include <stdio.h>",
         "",
         '#include "ampx/ampx.h"',
         "",
         "int main(void) {"]
    for s in header.structs:
        c.append(f'  printf("sizeof {s.name} %zu\\n", sizeof({s.name}));')
        c.append(f'  printf("alignof {s.name} %zu\\n", (size_t)_Alignof({s.name}));')
        for f in s.fields:
            c.append(f'  printf("offsetof {s.name}.{f.name} %zu\\n", offsetof({s.name}, {f.name}));')
    c += ["  return 0;", "}", ""]
    table = [banner("#").rstrip("\n"),
             "# Struct layouts of ampx.h on x86-64 Linux as clang computed them; the",
             "# probe (ampx_layout_probe.c) prints the same lines for the C compiler in use."]
    table += [f"{key} {value}" for key, value in layout_lines(header)]
    return {PROBE: "\n".join(c), TABLE: "\n".join(table) + "\n"}
