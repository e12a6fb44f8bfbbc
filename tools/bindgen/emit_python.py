"""emit_python.py -- the Python binding's ctypes layer, bindings/python/ampx/_raw.py.

Everything of ampx.h a ctypes program needs, in the header's order: the
integer macros and enum constants as module ints, each enum as an alias of
c_int32 (C enums are ints; every ampx enum pins its width with a
0x7fffffff member), each handle as an alias of c_void_p, the callback
typedefs (and the unnamed function pointers of fields and parameters) as
CFUNCTYPE types, every struct as a ctypes.Structure with its fields in the
header's order, the *_INIT macros as functions returning the struct filled
as the macro fills it, the function-like macros as functions, and
FUNCTIONS, the restype and argtypes of every function, which declare(lib)
sets on a loaded ctypes.CDLL.

The hand-written modules of the package (ampx/_lib.py loads the library and
calls declare(); the others wrap the functions) name no C type themselves.
"""

from __future__ import annotations

import re
import textwrap

from . import banner
from .model import CType, Header, ModelError, Struct

PATH = "bindings/python/ampx/_raw.py"

PRIMITIVE = {
    "char": "c_char", "i8": "c_int8", "u8": "c_uint8", "i16": "c_int16", "u16": "c_uint16",
    "i32": "c_int32", "u32": "c_uint32", "i64": "c_int64", "u64": "c_uint64",
    "usize": "c_size_t", "f32": "c_float", "f64": "c_double",
}


class _Writer:
    def __init__(self, header: Header):
        self.header = header
        self.imports: set[str] = set()
        self.defined: set[str] = set()  # struct and callback names written so far

    def ctypes_name(self, name: str) -> str:
        self.imports.add(name)
        return name

    def type(self, t: CType, where: str) -> str:
        """The ctypes expression for `t` (a field, parameter or result type)."""
        k = t.kind
        if k == "void":
            return "None"
        if k in PRIMITIVE:
            return self.ctypes_name(PRIMITIVE[k])
        if k in ("enum", "handle"):
            return t.name
        if k in ("struct", "callback"):
            if t.name not in self.defined:
                raise ModelError(f"{where}: {t.name} is used before the header defines it; "
                                 "emit_python.py writes types in the header's order")
            return t.name
        if k == "opaque":
            raise ModelError(f"{where}: the opaque type {t.name} is used by value")
        if k == "array":
            return f"{self.type(t.pointee, where)} * {t.length}"
        if k == "ptr":
            p = t.pointee
            if p.kind == "void" or p.kind == "opaque":
                return self.ctypes_name("c_void_p")
            if p.kind == "char":
                return self.ctypes_name("c_char_p")
            return f"{self.ctypes_name('POINTER')}({self.type(p, where)})"
        raise ModelError(f"{where}: no ctypes type for {t.spelling()}")

    # -- sections -------------------------------------------------------------

    def constants(self) -> list[str]:
        out = ["# ---- integer macros ------------------------------------------------------", ""]
        for c in self.header.constants:
            if c.doc:
                out += _comment(summary(c.doc))
            out.append(f"{c.name} = {c.value}")
        return out + [""]

    def enums(self) -> list[str]:
        out = ["# ---- enums (C ints) and their constants ----------------------------------", ""]
        for e in self.header.enums:
            if e.doc:
                out += _comment(summary(e.doc))
            out.append(f"{e.name} = {self.ctypes_name('c_int32')}")
            for c in e.constants:
                out.append(f"{c.name} = {c.value}")
            out.append("")
        return out

    def handles(self) -> list[str]:
        out = ["# ---- handles (pointers to opaque structs) --------------------------------", ""]
        for h in self.header.handles:
            out.append(f"{h.name} = {self.ctypes_name('c_void_p')}")
        return out + [""]

    def callbacks(self) -> list[str]:
        out = ["# ---- callback types -------------------------------------------------------", ""]
        for cb in sorted(self.header.callbacks, key=lambda c: c.name):
            if cb.doc:
                out += _comment(summary(cb.doc))
            elif cb.inline:
                out += _comment(f"The type of {self.owner(cb.name)}, a function pointer the "
                                "header spells inline.")
            args = [self.type(cb.ret, cb.name)] + [self.type(p.type, f"{cb.name}({p.name})")
                                                   for p in cb.params]
            out += _call(f"{cb.name} = {self.ctypes_name('CFUNCTYPE')}", args)
            self.defined.add(cb.name)
        return out + [""]

    def owner(self, callback: str) -> str:
        """The field or parameter an inline callback type belongs to."""
        for s in self.header.structs:
            for f in s.fields:
                if f.type.kind == "callback" and f.type.name == callback:
                    return f"{s.name}.{f.name}"
        for fn in self.header.functions:
            for p in fn.params:
                if p.type.kind == "callback" and p.type.name == callback:
                    return f"the parameter `{p.name}` of {fn.name}"
        return callback

    def structs(self) -> list[str]:
        out = ["# ---- structs (fields in the header's order) -------------------------------", ""]
        for s in self.header.structs:
            out += [f"class {s.name}({self.ctypes_name('Structure')}):"]
            doc = summary(s.doc) if s.doc else f"``{s.name}``."
            out += _docstring(doc, "    ")
            out.append("")
            out.append("    _fields_ = [")
            for f in s.fields:
                out.append(f'        ("{f.name}", {self.type(f.type, f"{s.name}.{f.name}")}),')
            out.append("    ]")
            out += ["", ""]
            self.defined.add(s.name)
        return out

    def inits(self) -> list[str]:
        out = ["# ---- the *_INIT macros ------------------------------------------------------", ""]
        for m in self.header.inits:
            s = self.header.struct(m.struct)
            out.append(f"def {m.name}() -> {s.name}:")
            out += _docstring(f"An ``{s.name}`` filled as ``{m.name}`` fills it.", "    ")
            name, args = self.init_expr(s, m.values, m.name)
            out += _call(f"    return {name}", args)
            out += ["", ""]
        return out

    def init_expr(self, s: Struct, values: list, where: str) -> tuple[str, list[str]]:
        """The constructor of `s` and its keyword arguments for the macro's
        values; zero and NULL fields are left to ctypes, which zero-fills a
        new struct."""
        args = []
        for f, v in zip(s.fields, values):
            expr = self.init_value(f.type, v, f"{where}.{f.name}")
            if expr is None:
                continue
            if f.name == "struct_size" and v == s.size:
                expr = f"{self.ctypes_name('sizeof')}({s.name})"
            args.append(f"{f.name}={expr}")
        return s.name, args

    def init_value(self, t: CType, v, where: str):
        if t.kind == "struct":
            inner = self.header.struct(t.name)
            if not any(_nonzero(x) for x in v):
                return None
            name, args = self.init_expr(inner, v, where)
            return f"{name}({', '.join(args)})"
        if t.kind == "array":
            if not any(_nonzero(x) for x in v):
                return None
            items = [self.init_value(t.pointee, x, where) or "0" for x in v]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if t.kind == "enum" and isinstance(v, int):
            enum = next(e for e in self.header.enums if e.name == t.name)
            named = [c.name for c in enum.constants if c.value == v]
            if named:
                return named[0]
        if v is None or v == 0:
            return None
        if isinstance(v, float):
            return repr(v)
        if isinstance(v, int):
            return str(v)
        raise ModelError(f"{where}: an initial value emit_python.py cannot write: {v!r}")

    def macro_functions(self) -> list[str]:
        out = ["# ---- function-like macros --------------------------------------------------", ""]
        for m in self.header.macro_functions:
            body = " ".join(m.body).replace("( ", "(").replace(" )", ")")
            out.append(f"def {m.name}({', '.join(m.params)}) -> int:")
            doc = summary(m.doc) if m.doc else f"``{m.name}({', '.join(m.params)})`` of ampx.h."
            out += _docstring(doc, "    ")
            out.append(f"    return {body}")
            out += ["", ""]
        return out

    def functions(self) -> list[str]:
        out = ["# ---- functions -------------------------------------------------------------", "",
               "#: Every function of ampx.h (both tiers), in the header's order:",
               "#: name -> (restype, argtypes).",
               "FUNCTIONS = {"]
        section = None
        for fn in self.header.functions:
            title = self.header.section_of(fn.line)
            if title != section:
                section = title
                out.append(f"    # {title}")
            ret = self.type(fn.ret, fn.name)
            args = [self.type(p.type, f"{fn.name}({p.name})") for p in fn.params]
            args_text = "(" + ", ".join(args) + ("," if len(args) == 1 else "") + ")"
            line = f'    "{fn.name}": ({ret}, {args_text}),'
            if len(line) > 96:
                out.append(f'    "{fn.name}": ({ret}, (')
                for a in args:
                    out.append(f"        {a},")
                out.append("    )),")
            else:
                out.append(line)
        out += ["}", ""]
        status = [fn.name for fn in self.header.functions
                  if fn.ret.kind == "enum" and fn.ret.name == "ampx_status"]
        out += ["#: The functions whose result is an ``ampx_status``.",
                "RETURNS_STATUS = frozenset({"]
        out += [f'    "{name}",' for name in status]
        out += ["})", "", ""]
        out += [
            "def declare(lib):",
            '    """Sets ``restype`` and ``argtypes`` of every function of ampx.h on',
            "    ``lib`` (a ``ctypes.CDLL`` of libampx) and returns it. Raises",
            "    AttributeError naming the first function the library does not export",
            '    (a libampx older than this header)."""',
            "    for name, (restype, argtypes) in FUNCTIONS.items():",
            "        try:",
            "            function = getattr(lib, name)",
            "        except AttributeError:",
            "            raise AttributeError(f\"{getattr(lib, '_name', lib)} does not export {name}, \"",
            "                                 \"which ampx.h declares (the library is older than \"",
            "                                 \"this binding)\") from None",
            "        function.restype = restype",
            "        function.argtypes = argtypes",
            "    return lib",
        ]
        return out


def _call(head: str, args: list[str]) -> list[str]:
    """`head(arg, ...)` on one line, or one argument a line when too long."""
    line = f"{head}({', '.join(args)})"
    if len(line) <= 88:
        return [line]
    indent = " " * (len(head) - len(head.lstrip()) + 4)
    return [f"{head}("] + [f"{indent}{a}," for a in args] + [indent[:-4] + ")"]


def _nonzero(v) -> bool:
    if isinstance(v, list):
        return any(_nonzero(x) for x in v)
    return v is not None and v != 0


def summary(doc: str) -> str:
    """The first sentence of a doc comment, on one line ("e.g." and "i.e."
    do not end it: a sentence ends before a capital letter or at the end)."""
    text = " ".join(doc.split("\n\n")[0].split())
    m = re.match(r"(.+?\.)(?=\s+[A-Z]|$)", text)
    return m.group(1) if m else text


def _comment(text: str, indent: str = "") -> list[str]:
    """`text` as `#:` comment lines of at most 88 columns."""
    return textwrap.wrap(text, 88, initial_indent=indent + "#: ",
                         subsequent_indent=indent + "#: ", break_on_hyphens=False)


def _docstring(text: str, indent: str) -> list[str]:
    """A docstring of `text`, wrapped to 88 columns."""
    text = text.replace("\\", "\\\\").replace('"""', "'''")
    lines = textwrap.wrap(text, 88 - len(indent) - 6, break_on_hyphens=False) or [""]
    lines[0] = '"""' + lines[0]
    lines[-1] += '"""'
    return [indent + line for line in lines]


def emit(header: Header) -> dict[str, str]:
    w = _Writer(header)
    body = []
    body += w.constants()
    body += w.enums()
    body += w.handles()
    body += w.callbacks()
    body += w.structs()
    body += w.inits()
    body += w.macro_functions()
    body += w.functions()
    head = [banner("#").rstrip("\n"),
            '"""ctypes declarations of every type and function of ampx.h (both tiers).',
            "",
            "The raw layer of the Python binding, generated from the header by",
            "tools/bindgen/emit_python.py: constants, enums (ints), handles (void",
            "pointers), callback types, structs field for field, the *_INIT macros as",
            "functions, and declare(), which sets restype and argtypes of every function",
            "on a loaded library (ampx/_lib.py calls it). The other modules of the",
            'package are written by hand over this one."""',
            "from __future__ import annotations",
            "",
            *textwrap.wrap(f"from ctypes import ({', '.join(sorted(w.imports))})", 88,
                           subsequent_indent=" " * len("from ctypes import (")),
            "",
            ""]
    text = "\n".join(head + body).rstrip("\n") + "\n"
    return {PATH: text}
