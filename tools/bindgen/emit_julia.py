"""emit_julia.py -- the Julia binding's raw layer, bindings/julia/src/LibAmpx.jl.

Module LibAmpx, in the shape Clang.jl gives a C header: one Julia function
per C function (`function ampx_x(a, b) ccall((:ampx_x, libampx), Ret,
(A, B), a, b) end`), each with the header's doc comment as its docstring;
every struct as an immutable `struct` with the C field types (NTuple for
arrays, Ptr{Cvoid} for function pointers), so Julia lays it out as C does;
each handle as a pointer to an opaque `mutable struct ..._s end`; each enum
as a `const` alias of Cint with its constants (no CEnum package: only the
standard library); callback typedefs as aliases of Ptr{Cvoid}; the integer
macros as constants; the *_INIT macros and the function-like macros as
functions. The hand-written module Ampx (src/Ampx.jl) includes this file
and calls these functions; it writes no ccall of its own.

Julia cannot run on the machines that build ampx: tools/check_bindings.py
checks the generated ccalls against the header, the struct layouts against
bindings/layout/ampx_layout.txt (by C's rules), and every call of a
LibAmpx function in the hand-written files (name and argument count).
"""

from __future__ import annotations

import textwrap

from . import banner
from .model import CType, Header, ModelError, Struct

PATH = "bindings/julia/src/LibAmpx.jl"

PRIMITIVE = {
    "void": "Cvoid", "char": "Cchar", "i8": "Int8", "u8": "UInt8", "i16": "Int16",
    "u16": "UInt16", "i32": "Int32", "u32": "UInt32", "i64": "Int64", "u64": "UInt64",
    "usize": "Csize_t", "f32": "Cfloat", "f64": "Cdouble",
}

KEYWORDS = set("""baremodule begin break catch const continue do else elseif end export false
finally for function global if import let local macro module quote return struct true try
using while abstract mutable primitive type where in isa outer""".split())


def name(identifier: str) -> str:
    """A C identifier as a Julia one (a keyword is quoted with var"")."""
    return f'var"{identifier}"' if identifier in KEYWORDS else identifier


def docstring(text: str, signature: str = "") -> list[str]:
    """A Julia docstring block (`$` and backslashes escaped)."""
    body = text.replace("\\", "\\\\").replace("$", "\\$").replace('"""', '\\"\\"\\"')
    lines = ['"""']
    if signature:
        lines += [f"    {signature}", ""]
    lines += body.splitlines() if body else []
    lines.append('"""')
    return lines


class _Writer:
    def __init__(self, header: Header):
        self.header = header
        self.inline = {cb.name for cb in header.callbacks if cb.inline}

    def jl_type(self, t: CType, where: str, param: bool = False) -> str:
        """The Julia type of a C type. `param`: a function parameter, where a
        `const char *` is a Cstring (ccall checks it holds no NUL); elsewhere
        (results, fields, pointees) it is Ptr{Cchar}."""
        k = t.kind
        if k in PRIMITIVE:
            return PRIMITIVE[k]
        if k in ("enum", "handle", "struct"):
            return t.name
        if k == "callback":
            # Unnamed function pointers (a field `void (*release)(void *)`) are
            # Ptr{Cvoid} as Clang.jl writes them; named typedefs keep their alias.
            return "Ptr{Cvoid}" if t.name in self.inline else t.name
        if k == "opaque":
            raise ModelError(f"{where}: the opaque type {t.name} is used by value")
        if k == "array":
            return f"NTuple{{{t.length}, {self.jl_type(t.pointee, where)}}}"
        if k == "ptr":
            p = t.pointee
            if p.kind == "char" and param and t.const:
                return "Cstring"
            if p.kind in ("void", "opaque"):
                return "Ptr{Cvoid}"
            return f"Ptr{{{self.jl_type(p, where)}}}"
        raise ModelError(f"{where}: no Julia type for {t.spelling()}")

    def constants(self) -> list[str]:
        out = ["# " + "-" * 75, "# Integer macros", "# " + "-" * 75, ""]
        for c in self.header.constants:
            if c.doc:
                out += docstring(c.doc)
            value = f"Cuint({c.value})" if c.unsigned else str(c.value)
            out.append(f"const {c.name} = {value}")
            out.append("")
        return out

    def enums(self) -> list[str]:
        out = ["# " + "-" * 75, "# Enums: C ints, and their constants", "# " + "-" * 75, ""]
        for e in self.header.enums:
            out += docstring(e.doc or f"`{e.name}` of ampx.h.")
            out.append(f"const {e.name} = Cint")
            for c in e.constants:
                if c.doc:
                    out += docstring(c.doc)
                out.append(f"const {c.name} = {e.name}({c.value})")
            out.append("")
        return out

    def handles(self) -> list[str]:
        out = ["# " + "-" * 75, "# Handles: pointers to opaque structs", "# " + "-" * 75, ""]
        for h in self.header.handles:
            out.append(f"mutable struct {h.struct_name} end")
            out += docstring(h.doc or f"`{h.name}` of ampx.h.")
            out.append(f"const {h.name} = Ptr{{{h.struct_name}}}")
            out.append("")
        return out

    def callbacks(self) -> list[str]:
        out = ["# " + "-" * 75,
               "# Callback types: C function pointers (`@cfunction` makes them)",
               "# " + "-" * 75, ""]
        for cb in self.header.callbacks:
            if cb.inline:
                continue
            args = ", ".join(f"{p.name}::{self.jl_type(p.type, cb.name)}" for p in cb.params)
            sig = f"{cb.name}: ({args}) -> {self.jl_type(cb.ret, cb.name)}"
            out += docstring(cb.doc, sig)
            out.append(f"const {cb.name} = Ptr{{Cvoid}}")
            out.append("")
        return out

    def structs(self) -> list[str]:
        out = ["# " + "-" * 75, "# Structs (C's layout: fields in the header's order)",
               "# " + "-" * 75, ""]
        defined: set[str] = set()
        for s in self.header.structs:
            out += docstring(s.doc or f"`{s.name}` of ampx.h.")
            out.append(f"struct {s.name}")
            for f in s.fields:
                where = f"{s.name}.{f.name}"
                if f.type.kind == "struct" and f.type.name not in defined:
                    raise ModelError(f"{where}: {f.type.name} is embedded before the header "
                                     "defines it")
                line = f"    {name(f.name)}::{self.jl_type(f.type, where)}"
                brief = " ".join(f.doc.split())
                if brief and len(line) + 4 + len(brief) <= 92:
                    line = f"{line}  # {brief}"
                elif brief:
                    out += textwrap.wrap(brief, 92, initial_indent="    # ",
                                         subsequent_indent="    # ", break_on_hyphens=False)
                out.append(line)
            out.append("end")
            out.append("")
            defined.add(s.name)
        return out

    def inits(self) -> list[str]:
        out = ["# " + "-" * 75, "# The *_INIT macros", "# " + "-" * 75, ""]
        for m in self.header.inits:
            s = self.header.struct(m.struct)
            out += docstring(f"An `{s.name}` filled as the C macro `{m.name}` fills it.",
                             f"{m.name}()")
            args = self.init_args(s, m.values, m.name)
            line = f"{m.name}() = {s.name}({', '.join(args)})"
            if len(line) > 92:
                out.append(f"{m.name}() = {s.name}(")
                out += [f"    {a}," for a in args[:-1]] + [f"    {args[-1]})"]
            else:
                out.append(line)
            out.append("")
        return out

    def init_expr(self, s: Struct, values: list, where: str) -> str:
        return f"{s.name}({', '.join(self.init_args(s, values, where))})"

    def init_args(self, s: Struct, values: list, where: str) -> list[str]:
        args = []
        for f, v in zip(s.fields, values):
            if f.name == "struct_size" and v == s.size:
                args.append(f"sizeof({s.name})")
            else:
                args.append(self.init_value(f.type, v, f"{where}.{f.name}"))
        return args

    def init_value(self, t: CType, v, where: str) -> str:
        if t.kind == "struct":
            return self.init_expr(self.header.struct(t.name), v, where)
        if t.kind == "array":
            items = [self.init_value(t.pointee, x, where) for x in v]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if t.kind in ("ptr", "callback", "handle"):
            if v is not None:
                raise ModelError(f"{where}: a pointer initialised to something but NULL")
            return "C_NULL"
        if t.kind == "enum" and isinstance(v, int):
            enum = next(e for e in self.header.enums if e.name == t.name)
            named = [c.name for c in enum.constants if c.value == v]
            return named[0] if named else f"{t.name}({v})"
        if isinstance(v, float):
            text = repr(v)
            return text if ("." in text or "e" in text or "inf" in text) else text + ".0"
        if isinstance(v, int):
            return str(v)
        raise ModelError(f"{where}: an initial value emit_julia.py cannot write: {v!r}")

    def macro_functions(self) -> list[str]:
        out = ["# " + "-" * 75, "# Function-like macros", "# " + "-" * 75, ""]
        for m in self.header.macro_functions:
            body = " ".join(m.body).replace("( ", "(").replace(" )", ")")
            sig = f"{m.name}({', '.join(m.params)})"
            out += docstring(m.doc or f"The C macro `{sig}` of ampx.h.", sig)
            out.append(f"{sig} = {body}")
            out.append("")
        return out

    def functions(self) -> list[str]:
        out = []
        section = None
        for fn in self.header.functions:
            title = self.header.section_of(fn.line)
            if title != section:
                section = title
                out += ["# " + "-" * 75, f"# {title}", "# " + "-" * 75, ""]
            params = [name(p.name) for p in fn.params]
            ret = self.jl_type(fn.ret, fn.name)
            sig = f"{fn.name}({', '.join(params)}) -> {ret}"
            doc = fn.doc
            notes = []
            if fn.deprecated is not None:
                notes.append(f"Deprecated: {fn.deprecated}.")
            if fn.experimental:
                notes.append("EXPERIMENTAL (declared under AMPX_EXPERIMENTAL in C).")
            if notes:
                doc = (doc + "\n\n" if doc else "") + " ".join(notes)
            out += docstring(doc, sig)
            types = [self.jl_type(p.type, f"{fn.name}({p.name})", param=True) for p in fn.params]
            tuple_text = "(" + ", ".join(types) + ("," if len(types) == 1 else "") + ")"
            out.append(f"function {fn.name}({', '.join(params)})")
            call = f"    ccall((:{fn.name}, libampx), {ret}, {tuple_text}"
            call += "".join(f", {p}" for p in params) + ")"
            out += _wrap_call(call) if len(call) > 92 else [call]
            out.append("end")
            out.append("")
        return out


def _wrap_call(line: str) -> list[str]:
    """Breaks a long call after the commas of its outermost argument list,
    indenting continuation lines under its opening parenthesis."""
    open_at = line.index("(")
    indent = " " * (open_at + 1)
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(line):
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        elif ch == "," and depth == 1:
            parts.append(line[start:i + 1])
            start = i + 1
    parts.append(line[start:])
    out, current = [], ""
    for part in parts:
        if current and len(current) + len(part) > 92:
            out.append(current.rstrip())
            current = indent + part.lstrip()
        else:
            current += part
    out.append(current)
    return out


def emit(header: Header) -> dict[str, str]:
    w = _Writer(header)
    lines = [banner("#").rstrip("\n"),
             '"""',
             "    LibAmpx",
             "",
             "The raw layer of the Julia binding, generated from `include/ampx/ampx.h` by",
             "`tools/bindgen/emit_julia.py` in the shape Clang.jl gives a C header: one",
             "function per C function (a `ccall`; status results are returned as they",
             "are), structs with C's field types and layout, handles as pointers to",
             "opaque structs, enums as `Cint` with their constants, callbacks as",
             "`Ptr{Cvoid}`, and the `*_INIT` macros as functions. Both tiers of the header",
             "are here (the EXPERIMENTAL one is marked so). The module `Ampx` is the",
             "Julia API over it: ownership, errors as exceptions, Julia's habits.",
             '"""',
             "module LibAmpx",
             "",
             '"""',
             "Path or name of the shared library: the file named by the environment",
             "variable `AMPX_LIB` when the module is loaded, else `libampx` on the",
             "loader's path.",
             '"""',
             'const libampx = get(ENV, "AMPX_LIB", "libampx")',
             ""]
    lines += w.constants()
    lines += w.enums()
    lines += w.handles()
    lines += w.callbacks()
    lines += w.structs()
    lines += w.inits()
    lines += w.macro_functions()
    lines += w.functions()
    lines += ["end # module", ""]
    return {PATH: "\n".join(lines)}
