"""model.py -- ampx.h read by libclang into one language-neutral model.

Every emitter (rust.py, python.py, julia.py, csharp.py) works from the
`Header` this module returns, never from the header's text, so the bindings
agree with what a C compiler sees: the header is parsed twice by clang
(without and with AMPX_EXPERIMENTAL, for the two tiers), struct layouts
(size, alignment, field offsets) are clang's, and the values of enum
constants, integer macros and the `*_INIT` macros are evaluated by clang's
constant evaluator (clang_Cursor_Evaluate), not by pattern matching.

Types are reduced to what a foreign-function interface must agree on
(`CType`): fixed-width integers, floats, pointers (with constness),
fixed-size arrays, and the header's own named types (enums, handles,
structs, callback typedefs). A construct the model does not know makes the
generator fail with the declaration's name and line, so a header change
that needs a new rule cannot slip through as a wrong binding; so does one
no binding can represent exactly: an enum or struct without a typedef, an
enum that is not a signed 32-bit int, a function or callback without a
prototype or with a variable argument list, `long` / `unsigned long`
(whose width differs between Linux and Windows), a bit-field, a union
(tools/test_gen_bindings.py shows each).
"""

from __future__ import annotations

import ctypes
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

import clang.cindex as ci

# ---------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------

# Primitive C types, by the spelling clang gives their canonical type, and
# the kind every emitter maps. `long` and `unsigned long` are not among them:
# 64 bits on Linux and macOS (LP64), 32 on Windows (LLP64), so no one
# binding type fits; the fixed-width typedefs below (which the header uses)
# are kept before they reduce to them.
PRIMITIVES = {
    "void": "void",
    "char": "char",
    "int": "i32",
    "unsigned int": "u32",
    "long long": "i64",
    "unsigned long long": "u64",
    "float": "f32",
    "double": "f64",
}
PLATFORM_WIDTH = {"long", "unsigned long"}

# Typedef names kept as they are (not reduced to their canonical type),
# because a binding distinguishes them: size_t is pointer-sized everywhere.
FIXED_TYPEDEFS = {
    "int8_t": "i8", "uint8_t": "u8", "int16_t": "i16", "uint16_t": "u16",
    "int32_t": "i32", "uint32_t": "u32", "int64_t": "i64", "uint64_t": "u64",
    "size_t": "usize",
}


@dataclass(frozen=True)
class CType:
    """A C type as a binding sees it.

    kind is one of: void, char, i8..u64, usize, f32, f64 (primitives);
    enum, handle, struct, callback, opaque (named: `name` is the typedef or
    struct name); ptr (`pointee`, `const` the pointee's constness); array
    (`pointee` the element, `length`).
    """

    kind: str
    name: str = ""
    pointee: Optional["CType"] = None
    const: bool = False
    length: int = 0

    @property
    def is_pointer(self) -> bool:
        return self.kind == "ptr"

    def spelling(self) -> str:
        """The C spelling, for comments and messages."""
        if self.kind == "ptr":
            inner = self.pointee.spelling()
            return ("const " if self.const else "") + inner + " *"
        if self.kind == "array":
            return f"{self.pointee.spelling()}[{self.length}]"
        if self.name:
            return self.name
        return {v: k for k, v in FIXED_TYPEDEFS.items()}.get(self.kind, self.kind)


@dataclass
class Param:
    name: str
    type: CType


@dataclass
class Function:
    name: str
    ret: CType
    params: list[Param]
    doc: str
    experimental: bool
    deprecated: Optional[str]  # the deprecation message, or None
    nodiscard: bool
    line: int


@dataclass
class Callback:
    """A function-pointer typedef (ampx_deleter, ampx_segment_fn, ...)."""

    name: str
    ret: CType
    params: list[Param]
    doc: str
    experimental: bool
    # True for a signature the header spells inline, unnamed (a field or
    # parameter `void (*release)(void *)`); it is named <owner>_<name>_fn.
    inline: bool = False


@dataclass
class EnumConstant:
    name: str
    value: int
    doc: str


@dataclass
class Enum:
    name: str
    constants: list[EnumConstant]
    doc: str
    experimental: bool


@dataclass
class Field:
    name: str
    type: CType  # an unnamed function-pointer field has kind "callback",
                 # named <struct>_<field>_fn (see Callback.inline)
    offset: int  # bytes
    doc: str


@dataclass
class Struct:
    name: str
    fields: list[Field]
    size: int
    align: int
    doc: str
    experimental: bool


@dataclass
class Handle:
    name: str         # ampx_tensor
    struct_name: str  # ampx_tensor_s
    doc: str
    experimental: bool


@dataclass
class Constant:
    """An object-like integer macro (AMPX_MAX_DIMS, AMPX_VERSION_MAJOR)."""

    name: str
    value: int
    unsigned: bool
    doc: str
    experimental: bool


@dataclass
class MacroFunction:
    """A function-like integer macro (AMPX_DOCTOR_BIN_BINADE(e)): its
    parameters and its body as tokens, for emitters to write as a function.
    Only integer arithmetic on the parameters and literals is accepted."""

    name: str
    params: list[str]
    body: list[str]
    doc: str
    experimental: bool


InitValue = Union[int, float, None, list]


@dataclass
class InitMacro:
    """An `AMPX_*_INIT` macro: the struct it initialises and one value per
    field in order (int, float, None for NULL, a list for an array field,
    a nested InitMacro-like list for an embedded struct)."""

    name: str
    struct: str
    values: list[InitValue]
    experimental: bool


@dataclass
class Header:
    path: Path
    functions: list[Function] = field(default_factory=list)
    callbacks: list[Callback] = field(default_factory=list)
    enums: list[Enum] = field(default_factory=list)
    structs: list[Struct] = field(default_factory=list)
    handles: list[Handle] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)  # structs only pointed to
    constants: list[Constant] = field(default_factory=list)
    macro_functions: list[MacroFunction] = field(default_factory=list)
    inits: list[InitMacro] = field(default_factory=list)
    sections: list[tuple[int, str, bool]] = field(default_factory=list)  # line, title, experimental

    def struct(self, name: str) -> Struct:
        return next(s for s in self.structs if s.name == name)

    def section_of(self, line: int) -> str:
        """The title of the header section a line lies in."""
        title = ""
        for start, name, _ in self.sections:
            if start <= line:
                title = name
        return title


class ModelError(Exception):
    pass


# ---------------------------------------------------------------------------
# Reading the header
# ---------------------------------------------------------------------------

_lib_ready = False


def _eval_setup() -> None:
    """Declares the libclang evaluator functions the Python bindings lack."""
    global _lib_ready
    if _lib_ready:
        return
    lib = ci.conf.lib
    lib.clang_Cursor_Evaluate.argtypes = [ci.Cursor]
    lib.clang_Cursor_Evaluate.restype = ctypes.c_void_p
    lib.clang_EvalResult_getKind.argtypes = [ctypes.c_void_p]
    lib.clang_EvalResult_getKind.restype = ctypes.c_int
    lib.clang_EvalResult_isUnsignedInt.argtypes = [ctypes.c_void_p]
    lib.clang_EvalResult_isUnsignedInt.restype = ctypes.c_uint
    lib.clang_EvalResult_getAsLongLong.argtypes = [ctypes.c_void_p]
    lib.clang_EvalResult_getAsLongLong.restype = ctypes.c_longlong
    lib.clang_EvalResult_getAsUnsigned.argtypes = [ctypes.c_void_p]
    lib.clang_EvalResult_getAsUnsigned.restype = ctypes.c_ulonglong
    lib.clang_EvalResult_getAsDouble.argtypes = [ctypes.c_void_p]
    lib.clang_EvalResult_getAsDouble.restype = ctypes.c_double
    lib.clang_EvalResult_dispose.argtypes = [ctypes.c_void_p]
    lib.clang_EvalResult_dispose.restype = None
    _lib_ready = True


def _evaluate(cursor: ci.Cursor):
    """clang's value of a constant expression: (int, unsigned) or float, or
    None when clang cannot evaluate it (a NULL pointer, for one)."""
    _eval_setup()
    lib = ci.conf.lib
    result = lib.clang_Cursor_Evaluate(cursor)
    if not result:
        return None
    try:
        kind = lib.clang_EvalResult_getKind(result)
        if kind == 1:  # CXEval_Int
            if lib.clang_EvalResult_isUnsignedInt(result):
                return (int(lib.clang_EvalResult_getAsUnsigned(result)), True)
            return (int(lib.clang_EvalResult_getAsLongLong(result)), False)
        if kind == 2:  # CXEval_Float
            return float(lib.clang_EvalResult_getAsDouble(result))
        return None
    finally:
        lib.clang_EvalResult_dispose(result)


def _doc(cursor: ci.Cursor) -> str:
    """The declaration's doc comment as plain text (the comment markers and
    the leading stars removed, lines joined with newlines)."""
    raw = cursor.raw_comment
    if not raw:
        return ""
    lines = []
    for line in raw.splitlines():
        line = line.strip()
        line = re.sub(r"^/\*\*<?|^/\*|\*/$", "", line).strip()
        line = re.sub(r"^\*(?!/)\s*", "", line)
        lines.append(line.rstrip())
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def _parse(path: Path, experimental: bool, extra: str = "") -> ci.TranslationUnit:
    """Parses ampx.h (with `extra` C text after it) as C99 on x86-64 Linux."""
    with tempfile.TemporaryDirectory() as tmp:
        main = Path(tmp) / "ampx_bindgen.c"
        main.write_text(f'#include "{path.resolve()}"\n{extra}\n')
        args = ["-x", "c", "-std=c99", "--target=x86_64-pc-linux-gnu",
                "-fparse-all-comments"]
        args += [f"-isystem{d}" for d in _compiler_include_dirs()]
        if experimental:
            args.append("-DAMPX_EXPERIMENTAL")
        index = ci.Index.create()
        tu = index.parse(str(main), args=args,
                         options=ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD)
        errors = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
        if errors:
            raise ModelError("clang cannot parse the header: " +
                             "; ".join(f"{d.location.line}: {d.spelling}" for d in errors))
        return tu


def _compiler_include_dirs() -> list[str]:
    """The C compiler's own header folder (stddef.h), which the libclang
    wheel from PyPI does not carry."""
    import subprocess
    for cc in (os.environ.get("CC", ""), "cc", "gcc", "clang"):
        if not cc:
            continue
        try:
            out = subprocess.run([cc, "-print-file-name=include"], capture_output=True,
                                 text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            continue
        if out and Path(out, "stddef.h").exists():
            return [out]
    return []


# Type definitions a binding sees only through a typedef naming them.
UNBOUND_DECLS = {
    ci.CursorKind.ENUM_DECL: "an enum",
    ci.CursorKind.STRUCT_DECL: "a struct",
    ci.CursorKind.UNION_DECL: "a union",
}


def _place(cursor: ci.Cursor) -> tuple:
    """Where a declaration is (one key for a definition and its uses)."""
    loc = cursor.location
    return (loc.file.name if loc.file else "", loc.line, loc.column)


def _in_header(cursor: ci.Cursor, path: Path) -> bool:
    f = cursor.location.file
    return f is not None and Path(f.name).resolve() == path.resolve()


class _Reader:
    def __init__(self, path: Path):
        self.path = path
        # The source with comments blanked (same offsets), so that a name
        # mentioned in a comment is not taken for its declaration.
        self.text = re.sub(r"/\*.*?\*/|//[^\n]*",
                           lambda m: re.sub(r"[^\n]", " ", m.group(0)),
                           path.read_text(), flags=re.S)
        self.header = Header(path=path)
        self.name = path.name  # in messages
        self.stable_names: set[str] = set()
        self.callback_names: set[str] = set()
        self.handle_names: dict[str, str] = {}   # typedef -> struct
        self.enum_names: set[str] = set()
        self.struct_names: set[str] = set()
        self.current_experimental = False  # the tier of the declaration read

    # -- types --------------------------------------------------------------

    def ctype(self, t: ci.Type, where: str, anon: str = "",
              decl: Optional[ci.Cursor] = None) -> CType:
        """`anon`: the name given to an unnamed function-pointer type here
        (a parameter or field spelled `void (*release)(void *)`)."""
        k = t.kind
        if k == ci.TypeKind.ELABORATED:
            return self.ctype(t.get_named_type(), where, anon, decl)
        if k == ci.TypeKind.TYPEDEF:
            name = t.get_declaration().spelling
            if name in FIXED_TYPEDEFS:
                return CType(FIXED_TYPEDEFS[name])
            if name in self.handle_names:
                return CType("handle", name)
            if name in self.enum_names:
                return CType("enum", name)
            if name in self.struct_names:
                return CType("struct", name)
            if name in self.callback_names:
                return CType("callback", name)
            if name.startswith("DL"):
                return CType("opaque", name)
            raise ModelError(f"{where}: typedef {name} is not a type the generator knows")
        if k == ci.TypeKind.POINTER:
            pointee = t.get_pointee()
            if pointee.kind in (ci.TypeKind.FUNCTIONPROTO, ci.TypeKind.FUNCTIONNOPROTO):
                if not anon:
                    raise ModelError(f"{where}: an unnamed function pointer here")
                cb = self.proto(t, anon, "", self.current_experimental, decl,
                                where=f"{where} ({anon})")
                cb.inline = True
                self.header.callbacks.append(cb)
                return CType("callback", anon)
            inner = self.ctype(pointee, where)
            return CType("ptr", pointee=inner, const=pointee.is_const_qualified())
        if k == ci.TypeKind.CONSTANTARRAY:
            return CType("array", pointee=self.ctype(t.element_type, where),
                         length=t.element_count)
        if k == ci.TypeKind.RECORD:
            if t.get_declaration().kind == ci.CursorKind.UNION_DECL:
                raise ModelError(f"{where}: a union ('{t.spelling}'): the bindings read every "
                                 "record as a struct, so a union cannot be bound")
            name = t.get_declaration().spelling
            if name in self.struct_names:
                return CType("struct", name)
            return CType("opaque", name)
        if k == ci.TypeKind.ENUM:
            return CType("enum", t.get_declaration().spelling)
        spelling = t.get_canonical().spelling.replace("const ", "")
        if spelling in PLATFORM_WIDTH:
            raise ModelError(f"{where}: '{t.spelling}' is 64 bits on Linux and 32 on Windows "
                             "(LLP64); use int64_t/uint64_t, int32_t/uint32_t or size_t")
        if spelling in PRIMITIVES:
            return CType(PRIMITIVES[spelling])
        raise ModelError(f"{where}: C type '{t.spelling}' is not one the generator knows")

    def params(self, cursor: ci.Cursor, where: str) -> list[Param]:
        out = []
        for i, arg in enumerate(cursor.get_arguments()):
            name = arg.spelling or f"arg{i}"
            out.append(Param(name, self.ctype(arg.type, f"{where}({i})",
                                              anon=f"{cursor.spelling}_{name}_fn", decl=arg)))
        return out

    def proto(self, t: ci.Type, name: str, doc: str, experimental: bool,
              decl: Optional[ci.Cursor] = None, where: str = "") -> Callback:
        """A function prototype type (of a typedef, a parameter or a field).
        `decl`, the declaring cursor, gives the parameters' names; `where`
        the declaration, for messages."""
        where = where or name
        # The function type as spelled (size_t and int64_t kept), not the
        # canonical one, which reduces them to unsigned long and long.
        fn = t
        while fn.kind in (ci.TypeKind.POINTER, ci.TypeKind.ELABORATED, ci.TypeKind.TYPEDEF):
            fn = (fn.get_pointee() if fn.kind == ci.TypeKind.POINTER else
                  fn.get_named_type() if fn.kind == ci.TypeKind.ELABORATED else
                  fn.get_declaration().underlying_typedef_type)
        if fn.kind == ci.TypeKind.FUNCTIONNOPROTO:
            raise ModelError(f"{where}: a function pointer without a prototype ('{fn.spelling}'): "
                             "its parameters are unknown; write them, or (void) for none")
        if fn.kind != ci.TypeKind.FUNCTIONPROTO:
            raise ModelError(f"{where}: not a function pointer")
        if fn.is_function_variadic():
            raise ModelError(f"{where}: a variadic function pointer ('{fn.spelling}'): no "
                             "binding can be called back with a variable argument list")
        parm_decls = ([p for p in decl.get_children() if p.kind == ci.CursorKind.PARM_DECL]
                      if decl is not None else [])
        arg_types = list(fn.argument_types())
        if len(parm_decls) == len(arg_types):
            params = [Param(p.spelling or f"arg{i}", self.ctype(p.type, f"{where}({i})"))
                      for i, p in enumerate(parm_decls)]
        else:
            params = [Param(f"arg{i}", self.ctype(a, f"{where}({i})"))
                      for i, a in enumerate(arg_types)]
        return Callback(name, self.ctype(fn.get_result(), where), params, doc, experimental)

    # -- declarations -------------------------------------------------------

    def read(self) -> Header:
        stable = _parse(self.path, experimental=False)
        for c in stable.cursor.get_children():
            if _in_header(c, self.path) and c.spelling:
                self.stable_names.add(c.spelling)
        for m in stable.cursor.get_children():
            if m.kind == ci.CursorKind.MACRO_DEFINITION and _in_header(m, self.path):
                self.stable_names.add(m.spelling)

        tu = _parse(self.path, experimental=True)
        cursors = [c for c in tu.cursor.get_children() if _in_header(c, self.path)]

        # First the names of the header's own types, so that any order of
        # use resolves.
        for c in cursors:
            if c.kind != ci.CursorKind.TYPEDEF_DECL:
                continue
            under = c.underlying_typedef_type
            canon = under.get_canonical()
            if canon.kind == ci.TypeKind.POINTER:
                pointee = canon.get_pointee()
                if pointee.kind == ci.TypeKind.RECORD:
                    self.handle_names[c.spelling] = pointee.get_declaration().spelling
                elif pointee.kind in (ci.TypeKind.FUNCTIONPROTO, ci.TypeKind.FUNCTIONNOPROTO):
                    self.callback_names.add(c.spelling)
            elif canon.kind == ci.TypeKind.ENUM:
                self.enum_names.add(c.spelling)
            elif canon.kind == ci.TypeKind.RECORD:
                if canon.get_declaration().kind == ci.CursorKind.UNION_DECL:
                    raise ModelError(f"{self.name}:{c.location.line} {c.spelling}: a union: the "
                                     "bindings read every record as a struct, so a union "
                                     "cannot be bound")
                self.struct_names.add(c.spelling)
        named = {_place(c.underlying_typedef_type.get_canonical().get_declaration())
                 for c in cursors if c.kind == ci.CursorKind.TYPEDEF_DECL}

        h = self.header
        for c in cursors:
            exp = c.spelling not in self.stable_names
            self.current_experimental = exp
            where = f"{self.name}:{c.location.line} {c.spelling}"
            if c.kind == ci.CursorKind.FUNCTION_DECL:
                self.function(c, exp, where)
            elif c.kind == ci.CursorKind.TYPEDEF_DECL:
                self.typedef(c, exp, where)
            elif c.kind in UNBOUND_DECLS and c.is_definition() and _place(c) not in named:
                # Only a typedef names a type for the bindings: without one,
                # the declaration (and an enum's constants) would vanish.
                what = UNBOUND_DECLS[c.kind]
                if c.kind == ci.CursorKind.ENUM_DECL:
                    names = [k.spelling for k in c.get_children()
                             if k.kind == ci.CursorKind.ENUM_CONSTANT_DECL]
                    what = ("an anonymous enum" if c.is_anonymous() else what) + \
                        f" ({', '.join(names)})"
                raise ModelError(f"{where}: {what} without a typedef, which the bindings would "
                                 "drop; name it with a typedef")
            elif c.kind == ci.CursorKind.VAR_DECL:
                raise ModelError(f"{where}: a variable: the bindings bind functions, types and "
                                 "macros only")
        self.macros(tu, cursors)
        self.section_titles()
        return h

    def function(self, c: ci.Cursor, exp: bool, where: str) -> None:
        if c.type.kind == ci.TypeKind.FUNCTIONNOPROTO:
            raise ModelError(f"{where}: a function without a prototype: its parameters are "
                             "unknown; write them, or (void) for none")
        if c.type.is_function_variadic():
            raise ModelError(f"{where}: variadic functions cannot be bound (cgo)")
        text = _declaration_text(self.text, c.spelling)
        found = re.search(r'AMPX_DEPRECATED\(\s*"([^"]*)"\s*\)', text)
        deprecated = found.group(1) if found else None
        nodiscard = "AMPX_NODISCARD" in text
        self.header.functions.append(Function(
            name=c.spelling,
            ret=self.ctype(c.result_type, where),
            params=self.params(c, where),
            doc=_doc(c),
            experimental=exp,
            deprecated=deprecated,
            nodiscard=nodiscard,
            line=c.location.line))

    def typedef(self, c: ci.Cursor, exp: bool, where: str) -> None:
        h = self.header
        name = c.spelling
        doc = _doc(c)
        if name in self.handle_names:
            h.handles.append(Handle(name, self.handle_names[name], doc, exp))
            return
        if name in self.callback_names:
            h.callbacks.append(self.proto(c.underlying_typedef_type, name, doc, exp, c, where))
            return
        decl = c.underlying_typedef_type.get_canonical().get_declaration()
        if name in self.enum_names:
            # Every binding declares an enum as a signed 32-bit integer; the
            # header pins each to it with a MIN_ENUM/MAX_ENUM pair.
            if decl.enum_type.kind != ci.TypeKind.INT:
                raise ModelError(f"{where}: the enum's underlying type is "
                                 f"'{decl.enum_type.spelling}', where every binding reads a signed "
                                 "32-bit int; pin it with constants -0x7fffffff - 1 and 0x7fffffff")
            consts = [EnumConstant(k.spelling, k.enum_value, _doc(k))
                      for k in decl.get_children()
                      if k.kind == ci.CursorKind.ENUM_CONSTANT_DECL]
            h.enums.append(Enum(name, consts, doc, exp))
            return
        if name in self.struct_names:
            t = c.underlying_typedef_type.get_canonical()
            fields = []
            for f in decl.get_children():
                if f.kind == ci.CursorKind.UNION_DECL:
                    raise ModelError(f"{where}: a union inside the struct ('{f.spelling}'): the "
                                     "bindings read every record as a struct, so a union cannot "
                                     "be bound")
                if f.kind == ci.CursorKind.STRUCT_DECL:
                    raise ModelError(f"{where}: a struct defined inside the struct "
                                     f"('{f.spelling}'), which only a typedef of its own names "
                                     "for the bindings")
                if f.kind != ci.CursorKind.FIELD_DECL:
                    continue
                fwhere = f"{where}.{f.spelling}"
                if f.is_bitfield():
                    raise ModelError(f"{fwhere}: a bit-field ({f.get_bitfield_width()} bits): "
                                     "the bindings have no field narrower than a byte")
                ctype = self.ctype(f.type, fwhere, anon=f"{name}_{f.spelling}_fn", decl=f)
                off = t.get_offset(f.spelling)
                if off < 0:
                    raise ModelError(f"{fwhere}: clang gives no offset")
                fields.append(Field(f.spelling, ctype, off // 8, _doc(f)))
            h.structs.append(Struct(name, fields, t.get_size(), t.get_align(), doc, exp))
            return
        raise ModelError(f"{where}: a typedef the generator does not know how to bind")

    # -- macros -------------------------------------------------------------

    def macros(self, tu: ci.TranslationUnit, cursors: list[ci.Cursor]) -> None:
        """Integer constants, function-like integer macros and *_INIT
        macros, each evaluated by clang in a second parse."""
        skip = {"AMPX_H", "AMPX_H_EXPERIMENTAL", "AMPX_API", "AMPX_DEPRECATED",
                "AMPX_NODISCARD", "AMPX_BUILDING_LIBRARY"}
        defs = [c for c in cursors if c.kind == ci.CursorKind.MACRO_DEFINITION
                and c.spelling not in skip]
        # Doc comments of macros: the /** ... */ block right above them.
        lines = self.path.read_text().splitlines()
        objects, functions, inits = [], [], []
        for m in defs:
            tokens = [t.spelling for t in m.get_tokens()]
            doc = _comment_above(lines, m.location.line)
            exp = m.spelling not in self.stable_names
            if m.spelling.endswith("_INIT"):
                inits.append((m.spelling, exp))
            elif re.match(rf"\s*#\s*define\s+{m.spelling}\(", lines[m.location.line - 1]):
                close = tokens.index(")")
                params = [t for t in tokens[2:close] if t != ","]
                body = tokens[close + 1:]
                for t in body:
                    if not (t in params or re.fullmatch(r"\d+|[-+*()]", t)):
                        raise ModelError(f"{self.name}:{m.location.line} {m.spelling}: token "
                                         f"'{t}' in a function-like macro is not "
                                         "integer arithmetic on its parameters")
                functions.append(MacroFunction(m.spelling, params, body, doc, exp))
            else:
                objects.append((m.spelling, doc, exp, m.location.line))

        # Which struct each INIT macro initialises: the struct named like it
        # (AMPX_ADAMW_OPTIONS_INIT -> ampx_adam_options by its first field).
        extra = []
        for name, _ in inits:
            extra.append(f"static const __typeof__(({name})) *ampx_bindgen_probe_{name};")
        init_structs = {}
        for name, _ in inits:
            base = name[len("AMPX_"):-len("_INIT")].lower()
            candidates = [s.name for s in self.header.structs if s.name == "ampx_" + base]
            if not candidates:
                # The struct whose sizeof the macro's first value takes.
                text = _macro_text(lines, name)
                found = re.search(r"sizeof\((ampx_\w+)\)", text)
                if not found:
                    raise ModelError(f"{name}: cannot tell which struct it initialises")
                candidates = [found.group(1)]
            init_structs[name] = candidates[0]

        probe = []
        for name, _, _, _ in objects:
            probe.append(f"static const __typeof__(({name})) ampx_bindgen_const_{name} = ({name});")
        for name, _ in inits:
            probe.append(f"static const {init_structs[name]} ampx_bindgen_init_{name} = {name};")
        second = _parse(self.path, experimental=True, extra="\n".join(probe))
        values = {}
        for c in second.cursor.get_children():
            if c.kind != ci.CursorKind.VAR_DECL:
                continue
            if c.spelling.startswith("ampx_bindgen_const_"):
                expr = [k for k in c.get_children()][-1]
                values[c.spelling[len("ampx_bindgen_const_"):]] = _evaluate(expr)
            elif c.spelling.startswith("ampx_bindgen_init_"):
                name = c.spelling[len("ampx_bindgen_init_"):]
                init = next(k for k in c.get_children() if k.kind == ci.CursorKind.INIT_LIST_EXPR)
                values[name] = self.init_values(init, init_structs[name], name)

        for name, doc, exp, line in objects:
            v = values.get(name)
            if not isinstance(v, tuple):
                raise ModelError(f"{self.name}:{line} {name}: not an integer constant")
            self.header.constants.append(Constant(name, v[0], v[1], doc, exp))
        self.header.macro_functions.extend(functions)
        for name, exp in inits:
            self.header.inits.append(InitMacro(name, init_structs[name], values[name], exp))

    def init_values(self, init: ci.Cursor, struct_name: str, macro: str) -> list:
        s = self.header.struct(struct_name)
        items = list(init.get_children())
        if len(items) > len(s.fields):
            raise ModelError(f"{macro}: more values than {struct_name} has fields")
        out = []
        for f, item in zip(s.fields, items):
            out.append(self.init_value(item, f.type, f"{macro}.{f.name}"))
        for f in s.fields[len(items):]:
            out.append(_zero(f.type, self.header))
        return out

    def init_value(self, item: ci.Cursor, t: CType, where: str):
        if t.kind == "struct":
            inner = _strip_implicit(item)
            if inner.kind != ci.CursorKind.INIT_LIST_EXPR:
                raise ModelError(f"{where}: an embedded struct without braces")
            return self.init_values(inner, t.name, where)
        if t.kind == "array":
            inner = _strip_implicit(item)
            vals = [self.init_value(k, t.pointee, where) for k in inner.get_children()]
            vals += [_zero(t.pointee, self.header)] * (t.length - len(vals))
            return vals
        if t.kind in ("ptr", "callback", "handle"):
            v = _evaluate(item)
            if v not in (None, (0, False), (0, True)):
                raise ModelError(f"{where}: a pointer initialised to something but NULL")
            return None
        v = _evaluate(item)
        if v is None:
            raise ModelError(f"{where}: clang cannot evaluate the value")
        if isinstance(v, tuple):
            return float(v[0]) if t.kind in ("f32", "f64") else v[0]
        return v

    def section_titles(self) -> None:
        text = self.path.read_text().splitlines()
        exp_start = next(i for i, l in enumerate(text) if "defined(AMPX_EXPERIMENTAL)" in l)
        for i, line in enumerate(text):
            m = re.match(r"/\* (\d+)\. (.*?)\s*\*/$", line)
            if m and i > 0 and text[i - 1].startswith("/* ====="):
                self.header.sections.append((i + 1, f"{m.group(1)}. {m.group(2)}", i > exp_start))


def _declaration_text(text: str, name: str) -> str:
    """The source text (comments blanked) of function `name`'s declaration:
    from the end of the declaration or directive before it to its
    semicolon."""
    m = re.search(rf"\b{name}\s*\(", text)
    if not m:
        return ""
    start = max(text.rfind(";", 0, m.start()), text.rfind("}", 0, m.start()),
                text.rfind("\n#", 0, m.start()))
    end = text.find(";", m.end())
    return text[start:end + 1]


def _strip_implicit(c: ci.Cursor) -> ci.Cursor:
    while c.kind == ci.CursorKind.UNEXPOSED_EXPR:
        kids = list(c.get_children())
        if len(kids) != 1:
            break
        c = kids[0]
    return c


def _zero(t: CType, header: Header):
    if t.kind == "struct":
        return [_zero(f.type, header) for f in header.struct(t.name).fields]
    if t.kind == "array":
        return [_zero(t.pointee, header)] * t.length
    if t.kind in ("ptr", "callback", "handle"):
        return None
    return 0.0 if t.kind in ("f32", "f64") else 0


def _macro_text(lines: list[str], name: str) -> str:
    for i, line in enumerate(lines):
        if re.match(rf"#define {name}\b", line):
            text = line
            while text.endswith("\\"):
                i += 1
                text = text[:-1] + lines[i]
            return text
    return ""


def _comment_above(lines: list[str], line: int) -> str:
    """The /** */ comment ending on the line above `line` (1-based), if any."""
    i = line - 2
    if i < 0 or not lines[i].rstrip().endswith("*/"):
        return ""
    end = i
    while i >= 0 and "/**" not in lines[i]:
        i -= 1
    if i < 0:
        return ""
    raw = "\n".join(lines[i:end + 1])
    out = []
    for l in raw.splitlines():
        l = l.strip()
        l = re.sub(r"^/\*\*|\*/$", "", l).strip()
        l = re.sub(r"^\*\s?", "", l)
        out.append(l)
    return "\n".join(x for x in out if x is not None).strip()


def read_header(path: Path) -> Header:
    """Reads ampx.h into the model (raises ModelError on what it cannot bind)."""
    return _Reader(Path(path)).read()


def first_line(doc: str) -> str:
    """The first sentence of a doc comment, on one line (for brief docs)."""
    text = " ".join(doc.split())
    m = re.match(r"(.+?[.!?])(\s|$)", text)
    return m.group(1) if m else text
