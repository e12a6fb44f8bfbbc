"""emit_csharp.py -- the C# binding's raw layer, bindings/csharp/Ampx/Native.g.cs.

`Ampx.Native` declares, from the model of ampx.h:
  - every function as `[DllImport("ampx", CallingConvention = Cdecl)] static
    extern`, handles as IntPtr, size_t as UIntPtr, pointers as C# pointers;
  - every struct as a blittable `[StructLayout(LayoutKind.Sequential)]`
    struct with the header's fields in order (arrays of numbers as `fixed`
    buffers, pointers and callbacks as IntPtr), so the same source lays out
    right on 32- and 64-bit targets;
  - every enum as `enum <name> : int` with the header's constants, the
    integer macros as constants, function-like macros as static methods and
    each `*_INIT` macro as a static method returning the struct it sets up;
  - every callback type as an `[UnmanagedFunctionPointer(Cdecl)]` delegate
    (for Marshal.GetFunctionPointerForDelegate and Unity's
    MonoPInvokeCallback), unnamed ones named <owner>_<name>_fn as the model
    names them;
  - the header's doc comments as XML doc comments.
Everything is nested in the one static class, so `using static Ampx.Native;`
brings the whole C API in under its C names.

bindings/csharp/Ampx/Enums.g.cs declares the same enums once more under C#
names for the hand-written layer above (ampx_dtype -> DType, AMPX_BF16 ->
DType.Bf16): the constants' common prefix is dropped and the rest written in
PascalCase; the MIN_ENUM/MAX_ENUM sentinels are left out.

Only what Debian's mcs compiles with -langversion:7.2 is written (no nint,
no function pointers, no `unmanaged` constraint).
"""

from __future__ import annotations

import re

from . import banner
from .model import CType, Header, InitMacro, Struct

NATIVE = "bindings/csharp/Ampx/Native.g.cs"
ENUMS = "bindings/csharp/Ampx/Enums.g.cs"

PRIMITIVE = {
    "void": "void", "char": "byte",
    "i8": "sbyte", "u8": "byte", "i16": "short", "u16": "ushort",
    "i32": "int", "u32": "uint", "i64": "long", "u64": "ulong",
    "usize": "UIntPtr", "f32": "float", "f64": "double",
}

# Element types a `fixed` buffer may have.
FIXED_ELEMENTS = {"bool", "byte", "short", "int", "long", "char", "sbyte", "ushort",
                  "uint", "ulong", "float", "double"}

KEYWORDS = {
    "abstract", "as", "base", "bool", "break", "byte", "case", "catch", "char", "checked",
    "class", "const", "continue", "decimal", "default", "delegate", "do", "double", "else",
    "enum", "event", "explicit", "extern", "false", "finally", "fixed", "float", "for",
    "foreach", "goto", "if", "implicit", "in", "int", "interface", "internal", "is", "lock",
    "long", "namespace", "new", "null", "object", "operator", "out", "override", "params",
    "private", "protected", "public", "readonly", "ref", "return", "sbyte", "sealed",
    "short", "sizeof", "stackalloc", "static", "string", "struct", "switch", "this",
    "throw", "true", "try", "typeof", "uint", "ulong", "unchecked", "unsafe", "ushort",
    "using", "virtual", "void", "volatile", "while",
}

# C# names of the enums where PascalCase of the C name reads badly.
ENUM_NAMES = {"ampx_dtype": "DType"}


def ident(name: str) -> str:
    return "@" + name if name in KEYWORDS else name


def pascal(words: str) -> str:
    return "".join(w[:1].upper() + w[1:].lower() for w in words.split("_") if w)


def param_type(t: CType) -> str:
    """A C type as a function parameter or return type."""
    if t.kind in PRIMITIVE:
        return PRIMITIVE[t.kind]
    if t.kind in ("handle", "callback"):
        return "IntPtr"
    if t.kind in ("enum", "struct"):
        return t.name
    if t.kind == "opaque":
        return "void"
    if t.kind == "ptr":
        return param_type(t.pointee) + "*"
    raise ValueError(f"C# has no parameter type for {t.spelling()}")


def field_decl(name: str, t: CType) -> list[str]:
    """The declarations of one struct field (an array of non-numbers becomes
    one field per element)."""
    if t.kind == "array":
        element = param_type(t.pointee) if t.pointee.kind not in ("handle", "callback", "ptr") \
            else "IntPtr"
        if element in FIXED_ELEMENTS:
            return [f"public fixed {element} {ident(name)}[{t.length}];"]
        return [f"public {element} {name}_{i};" for i in range(t.length)]
    if t.kind in ("ptr", "handle", "callback"):
        return [f"public IntPtr {ident(name)};"]
    return [f"public {param_type(t)} {ident(name)};"]


def xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def doc_lines(doc: str, indent: str, extra: str = "") -> list[str]:
    lines = [l.strip() for l in doc.splitlines()] if doc else []
    if not lines and not extra:
        return []
    out = [f"{indent}/// <summary>"]
    out += [f"{indent}/// {xml(l)}".rstrip() for l in lines]
    out.append(f"{indent}/// </summary>")
    if extra:
        out.append(f"{indent}/// <remarks>{xml(extra)}</remarks>")
    return out


def section_note(header: Header, line: int, experimental: bool) -> str:
    section = header.section_of(line)
    note = f"ampx.h section {section}" if section else ""
    if experimental and "EXPERIMENTAL" not in note:
        note += " (EXPERIMENTAL)"
    return note


def literal(value, t: CType, header: Header) -> str:
    """A C# expression for one INIT value of type t."""
    if value is None:
        return "IntPtr.Zero"
    if t.kind == "enum":
        names = [k.name for e in header.enums if e.name == t.name
                 for k in e.constants if k.value == int(value)]
        return f"{t.name}.{names[0]}" if names else f"({t.name}){int(value)}"
    if t.kind in ("f32", "f64"):
        text = repr(float(value))
        if text in ("inf", "-inf", "nan"):
            return {"inf": "double.PositiveInfinity", "-inf": "double.NegativeInfinity",
                    "nan": "double.NaN"}[text]
        return text + ("f" if t.kind == "f32" else "")
    if t.kind == "usize":
        return f"(UIntPtr){int(value)}UL"
    cs = PRIMITIVE[t.kind]
    suffix = {"long": "L", "ulong": "UL", "uint": "U"}.get(cs, "")
    return f"({cs}){int(value)}{suffix}" if cs in ("sbyte", "byte", "short", "ushort") \
        else f"{int(value)}{suffix}"


def init_assignments(target: str, struct: Struct, values: list, header: Header) -> list[str]:
    out = []
    for f, v in zip(struct.fields, values):
        where = f"{target}.{ident(f.name)}"
        if f.type.kind == "struct":
            out += init_assignments(where, header.struct(f.type.name), v, header)
        elif f.type.kind == "array":
            element = f.type.pointee
            fixed = field_decl(f.name, f.type)[0].startswith("public fixed")
            for i, item in enumerate(v):
                if item in (0, 0.0, None):
                    continue  # default(T) is zero already
                slot = f"{where}[{i}]" if fixed else f"{target}.{f.name}_{i}"
                out.append(f"{slot} = {literal(item, element, header)};")
        elif f.name == "struct_size" and f.type.kind == "usize" and v == struct.size:
            # sizeof, not clang's number: right on 32-bit targets too.
            out.append(f"{where} = (UIntPtr)sizeof({struct.name});")
        elif v in (0, 0.0, None):
            continue
        else:
            out.append(f"{where} = {literal(v, f.type, header)};")
    return out


def emit_init(init: InitMacro, header: Header) -> list[str]:
    struct = header.struct(init.struct)
    body = init_assignments("value", struct, init.values, header)
    lines = doc_lines(f"The value of the {init.name} macro: {init.struct} set up with its "
                      "defaults.", "        ")
    lines.append(f"        public static {init.struct} {init.name}()")
    lines.append("        {")
    lines.append(f"            var value = default({init.struct});")
    lines += [f"            {b}" for b in body]
    lines.append("            return value;")
    lines.append("        }")
    return lines


def emit_native(header: Header) -> str:
    out = [banner("//").rstrip("\n"),
           "// <auto-generated/> The raw C API of ampx for C#: see tools/bindgen/emit_csharp.py.",
           "// The hand-written layer above it (Ampx/*.cs) is what programs normally use.",
           "using System;",
           "using System.Runtime.InteropServices;",
           "",
           "namespace Ampx",
           "{",
           "    /// <summary>",
           "    /// The C API of ampx.h as it is: one static extern method per function (handles",
           "    /// as IntPtr), its structs, enums, constants, callback types and *_INIT macros,",
           "    /// under their C names. For engine code that wants the raw calls; Context,",
           "    /// Tensor and the other classes of this namespace wrap them safely.",
           "    /// </summary>",
           "    public static unsafe partial class Native",
           "    {",
           "        /// <summary>The library name DllImport resolves: libampx.so, ampx.dll, libampx.dylib.</summary>",
           "        public const string Library = \"ampx\";",
           ""]

    out.append("        // ---- constants ----")
    for c in header.constants:
        out += doc_lines(c.doc, "        ")
        cs = "uint" if c.unsigned else ("int" if -2**31 <= c.value < 2**31 else "long")
        suffix = "U" if c.unsigned else ("L" if cs == "long" else "")
        out.append(f"        public const {cs} {c.name} = {c.value}{suffix};")
    for m in header.macro_functions:
        out += doc_lines(m.doc, "        ")
        params = ", ".join(f"int {ident(p)}" for p in m.params)
        body = " ".join(ident(t) if t in m.params else t for t in m.body)
        body = re.sub(r"\( ", "(", re.sub(r" \)", ")", body))
        out.append(f"        public static int {m.name}({params}) {{ return {body}; }}")
    out.append("")

    out.append("        // ---- enums ----")
    for e in header.enums:
        out += doc_lines(e.doc, "        ")
        out.append(f"        public enum {e.name} : int")
        out.append("        {")
        for k in e.constants:
            out += doc_lines(k.doc, "            ")
            out.append(f"            {k.name} = {k.value},")
        out.append("        }")
        out.append("")

    out.append("        // ---- callback types ----")
    for cb in header.callbacks:
        doc = cb.doc or (f"The function-pointer type of a C field or parameter, "
                         f"named as the generator names it.")
        out += doc_lines(doc, "        ")
        params = ", ".join(f"{param_type(p.type)} {ident(p.name)}" for p in cb.params)
        out.append("        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]")
        out.append(f"        public delegate {param_type(cb.ret)} {cb.name}({params});")
        out.append("")

    out.append("        // ---- structs ----")
    for s in header.structs:
        out += doc_lines(s.doc, "        ", f"{s.size} bytes on x86-64 Linux, aligned to {s.align}.")
        out.append("        [StructLayout(LayoutKind.Sequential)]")
        out.append(f"        public unsafe struct {s.name}")
        out.append("        {")
        for f in s.fields:
            note = f"C type {f.type.spelling()}"
            if f.doc:
                out += doc_lines(f.doc, "            ", note)
            else:
                out.append(f"            /// <summary>{xml(note)}</summary>")
            out += [f"            {d}" for d in field_decl(f.name, f.type)]
        out.append("        }")
        out.append("")

    out.append("        // ---- *_INIT macros ----")
    for init in header.inits:
        out += emit_init(init, header)
        out.append("")

    out.append("        // ---- functions ----")
    previous, shared = None, ""
    for fn in header.functions:
        note = section_note(header, fn.line, fn.experimental)
        # A function declared right under another without a comment of its
        # own belongs to that one's doxygen group (@{ ... @}): same comment.
        if fn.doc:
            shared = fn.doc
        elif previous is None or fn.line - previous.line > 4:
            shared = ""
        previous = fn
        out += doc_lines(fn.doc or shared, "        ", note)
        if fn.deprecated is not None:
            out.append(f"        [Obsolete({_string(fn.deprecated)})]")
        out.append("        [DllImport(Library, CallingConvention = CallingConvention.Cdecl, "
                   "ExactSpelling = true)]")
        params = ", ".join(f"{param_type(p.type)} {ident(p.name)}" for p in fn.params)
        out.append(f"        public static extern {param_type(fn.ret)} {fn.name}({params});")
        out.append("")

    while out[-1] == "":
        out.pop()
    out += ["    }", "}", ""]
    return "\n".join(out)


def _string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def enum_members(e) -> list[tuple[str, int, str]]:
    """(C# name, value, doc) of an enum's constants without the sentinels."""
    consts = [k for k in e.constants if not k.name.endswith(("_MIN_ENUM", "_MAX_ENUM"))]
    parts = [k.name.split("_") for k in consts]
    common = 0
    if len(parts) > 1:
        while all(len(p) > common + 1 and p[common] == parts[0][common] for p in parts):
            common += 1
    else:
        common = 1  # AMPX_
    members = []
    for k, p in zip(consts, parts):
        name = pascal("_".join(p[common:]))
        if name[:1].isdigit():
            name = "_" + name
        members.append((name, k.value, k.doc))
    return members


def emit_enums(header: Header) -> str:
    out = [banner("//").rstrip("\n"),
           "// <auto-generated/> ampx.h's enums under C# names (see tools/bindgen/emit_csharp.py);",
           "// each value equals the C constant's, so a cast to or from the Native enum is exact.",
           "",
           "namespace Ampx",
           "{"]
    for e in header.enums:
        name = ENUM_NAMES.get(e.name, pascal(e.name[len("ampx_"):]))
        extra = f"The C enum {e.name} (Native.{e.name})."
        out += doc_lines(e.doc, "    ", extra)
        out.append(f"    public enum {name} : int")
        out.append("    {")
        for member, value, doc in enum_members(e):
            out += doc_lines(doc, "        ")
            out.append(f"        {member} = {value},")
        out.append("    }")
        out.append("")
    out.pop()
    out += ["}", ""]
    return "\n".join(out)


def emit(header: Header) -> dict[str, str]:
    return {NATIVE: emit_native(header), ENUMS: emit_enums(header)}
