#!/usr/bin/env python3
"""check_bindings.py -- checks that every language binding covers the C API.

Parses every AMPX_API declaration of include/ampx/ampx.h (name, return type,
parameter types), then for each binding folder that exists checks that each
function is either used in the binding's sources (as an identifier, comments
ignored) or listed in the binding's unbound.txt as `name: reason`. An
unbound.txt entry is an error when its reason is empty, when it names no
function of the header, or when the function is bound after all.

For Julia, which cannot run on the build machines, it also checks:
- every `ccall((:name, lib), Ret, (T1, T2, ...), args...)` (the generated
  src/LibAmpx.jl has one per C function): the symbol exists, the
  argument-type tuple is a real tuple, the number of types equals the C
  parameter count and the number of arguments passed, and each Julia type
  is plausible for its C type (see JULIA_TYPES);
- the hand-written files: no ccall of an ampx symbol (they call LibAmpx),
  and every `LibAmpx.name(...)` call (or bare `ampx_name(...)` after
  `using .LibAmpx`) names something LibAmpx defines, with the header's
  number of arguments (a struct constructor: its field count);
- the struct layouts: each struct of bindings/layout/ampx_layout.txt (clang's
  sizes, alignments and offsets) exists in the Julia sources, and its field
  types give by C's layout rules exactly those fields, offsets, size and
  alignment.

Files generated from the header by tools/gen_bindings.py (their first line
says so) are not counted: they declare every function, so the count is what
each binding's hand-written, idiomatic layer reaches. Julia's ccalls are
checked in every file, generated or not.

Prints one table per language and exits 1 on any problem. A binding folder
that does not exist yet is reported and skipped.

Usage: check_bindings.py [--root DIR] [--verbose]
"""

from __future__ import annotations

import argparse
import re
import textwrap
import sys
from dataclasses import dataclass
from pathlib import Path

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"

# ---------------------------------------------------------------------------
# The header
# ---------------------------------------------------------------------------

# C scalar types and the category a binding has to match.
C_SCALARS = {
    "void": "void",
    "int": "i32",
    "int32_t": "i32",
    "uint32_t": "u32",
    "int64_t": "i64",
    "uint64_t": "u64",
    "size_t": "usize",
    "double": "f64",
    "float": "f32",
}


@dataclass
class CType:
    """A C type reduced to what a foreign-function binding must agree with."""

    text: str      # normalised spelling, e.g. "const ampx_tensor *"
    category: str  # void, i32, u32, i64, u64, usize, f64, f32, enum, handle,
                   # ptr, cstring, struct

    def __str__(self) -> str:
        return self.text


@dataclass
class CFunction:
    name: str
    ret: CType
    params: list[CType]
    line: int


def strip_c_comments(text: str) -> str:
    """Replaces C comments by spaces, keeping line numbers."""
    def blank(match: re.Match) -> str:
        return re.sub(r"[^\n]", " ", match.group(0))
    return re.sub(r"/\*.*?\*/|//[^\n]*", blank, text, flags=re.S)


def header_typedefs(text: str) -> dict[str, str]:
    """Maps each typedef name of the header to its category."""
    kinds: dict[str, str] = {}
    for name in re.findall(r"typedef\s+struct\s+\w+\s*\*\s*(" + IDENT + r")\s*;", text):
        kinds[name] = "handle"
    for name in re.findall(r"typedef\s+enum\s+\w*\s*\{[^}]*\}\s*(" + IDENT + r")\s*;", text):
        kinds[name] = "enum"
    for name in re.findall(r"typedef\s+struct\s+\w*\s*\{.*?\}\s*(" + IDENT + r")\s*;", text, re.S):
        kinds[name] = "struct"
    for name in re.findall(r"typedef\s+[^;{}]*?\(\s*\*\s*(" + IDENT + r")\s*\)\s*\(", text):
        kinds[name] = "ptr"  # function pointer
    return kinds


def classify(decl: str, typedefs: dict[str, str], has_name: bool) -> tuple[CType, str]:
    """Splits a declaration (`const int64_t *shape`) into its type and name."""
    tokens = re.findall(IDENT + r"|\*", decl)
    name = ""
    if has_name and len(tokens) > 1 and tokens[-1] != "*":
        name = tokens.pop()
    stars = tokens.count("*")
    words = [t for t in tokens if t not in ("*", "const", "struct", "enum", "unsigned", "signed")]
    base = words[-1] if words else "int"
    text = " ".join(t for t in tokens if t != "*") + (" " + "*" * stars if stars else "")
    if stars:
        category = "cstring" if base == "char" and stars == 1 else "ptr"
    elif base in C_SCALARS:
        category = C_SCALARS[base]
    elif base in typedefs:
        category = typedefs[base]
    else:
        raise ValueError(f"unknown C type {text!r} in {decl!r}")
    return CType(text, category), name


def parse_header(path: Path) -> list[CFunction]:
    raw = path.read_text()
    text = strip_c_comments(raw)
    # Drop preprocessor lines (with their continuations); keep line numbers.
    text = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", lambda m: "\n" * m.group(0).count("\n"),
                  text, flags=re.M)
    typedefs = header_typedefs(text)
    functions = []
    for match in re.finditer(r"\bAMPX_API\b([^;]*);", text):
        # Attribute macros (AMPX_NODISCARD, AMPX_DEPRECATED("...")) say
        # nothing a binding must match.
        decl = re.sub(r"\bAMPX_DEPRECATED\s*\([^)]*\)|\bAMPX_NODISCARD\b", " ", match.group(1))
        decl = " ".join(decl.split())
        line = text.count("\n", 0, match.start()) + 1
        head = re.match(r"(.*?)\b(" + IDENT + r")\s*\((.*)\)\s*$", decl)
        if not head:
            raise ValueError(f"{path}:{line}: cannot parse declaration {decl!r}")
        ret, _ = classify(head.group(1), typedefs, has_name=False)
        params_text = head.group(3).strip()
        params = []
        if params_text not in ("", "void"):
            for part in split_top_level(params_text):
                params.append(classify(part, typedefs, has_name=True)[0])
        functions.append(CFunction(head.group(2), ret, params, line))
    return functions


def split_top_level(text: str) -> list[str]:
    """Splits at commas that are not inside (), [], {} or a string."""
    parts, depth, current, quote = [], 0, [], ""
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            current.append(ch)
            if ch == "\\" and i + 1 < len(text):
                current.append(text[i + 1])
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
            current.append(ch)
        elif ch in "([{":
            depth += 1
            current.append(ch)
        elif ch in ")]}":
            depth -= 1
            current.append(ch)
        elif ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
        i += 1
    tail = "".join(current).strip()
    if tail or parts:
        parts.append(tail)
    return parts


# ---------------------------------------------------------------------------
# Bindings
# ---------------------------------------------------------------------------

def strip_hash_comments(text: str) -> str:
    """Removes `# ...` comments (Python, Julia), leaving strings alone."""
    out, quote, i = [], "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            if text.startswith(quote, i):
                out.append(quote)
                i += len(quote)
                quote = ""
                continue
            if ch == "\\" and i + 1 < len(text):
                out.append(text[i:i + 2])
                i += 2
                continue
            out.append(ch)
        elif text.startswith('"""', i) or text.startswith("'''", i):
            quote = text[i:i + 3]
            out.append(quote)
            i += 3
            continue
        elif ch in "\"'":
            # In Julia, ' also starts a character literal; both forms are short.
            quote = ch
            out.append(ch)
        elif ch == "#":
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def strip_julia_comments(text: str) -> str:
    text = re.sub(r"#=.*?=#", " ", text, flags=re.S)
    return strip_hash_comments(text)


def strip_slash_comments(text: str) -> str:
    """Removes // and /* */ comments (Rust); /// doc comments included."""
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)


def strip_go_comments(text: str) -> str:
    """Removes Go comments except the cgo preamble (the comment right before
    `import "C"`), whose C code calls the library."""
    preamble = re.search(r'((?:/\*.*?\*/|(?://[^\n]*\n)+))\s*import\s+"C"', text, re.S)
    kept = preamble.group(1) if preamble else ""
    stripped = strip_slash_comments(text)
    return stripped + "\n" + kept


@dataclass
class Binding:
    language: str
    folder: str
    patterns: list[str]
    strip: object
    exclude: tuple[str, ...] = ()


BINDINGS = [
    Binding("python", "bindings/python", ["ampx/*.py"], strip_hash_comments),
    Binding("rust", "bindings/rust", ["ampx/src/**/*.rs"], strip_slash_comments),
    Binding("go", "bindings/go", ["*.go"], strip_go_comments, exclude=("_test.go",)),
    Binding("julia", "bindings/julia", ["src/*.jl"], strip_julia_comments),
    Binding("csharp", "bindings/csharp", ["Ampx/**/*.cs"], strip_slash_comments),
]

# What the first line of a file written by tools/gen_bindings.py contains
# (tools/bindgen/__init__.py: GENERATED_MARK).
GENERATED_MARK = "Generated by tools/gen_bindings.py from include/ampx/ampx.h"


def is_generated(path: Path) -> bool:
    with path.open(errors="replace") as f:
        return GENERATED_MARK in f.readline()


def read_unbound(path: Path, shown: str, known: set[str], problems: list[str]) -> dict[str, str]:
    entries: dict[str, str] = {}
    if not path.exists():
        return entries
    for number, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        where = f"{shown}:{number}"
        match = re.fullmatch(r"(" + IDENT + r")\s*:\s*(.*)", stripped)
        if not match:
            problems.append(f"{where}: not of the form `name: reason`: {stripped!r}")
            continue
        name, reason = match.group(1), match.group(2).strip()
        if not reason:
            problems.append(f"{where}: {name} has no reason")
        if name not in known:
            problems.append(f"{where}: {name} is not an AMPX_API function of ampx.h")
        if name in entries:
            problems.append(f"{where}: {name} is listed twice")
        entries[name] = reason
    return entries


# ---------------------------------------------------------------------------
# Julia ccall checks
# ---------------------------------------------------------------------------

# Which C categories a Julia type may stand for. Handles, pointers and
# strings are pointer-sized; enums are C ints (32 bits on every platform
# ampx supports).
JULIA_TYPES = {
    "Cvoid": {"void"},
    "Nothing": {"void"},
    "Cint": {"i32", "enum"},
    "Int32": {"i32", "enum"},
    "Cuint": {"u32", "enum"},
    "UInt32": {"u32", "enum"},
    "Clonglong": {"i64"},
    "Int64": {"i64"},
    "Culonglong": {"u64"},
    "UInt64": {"u64"},
    "Csize_t": {"usize"},
    "UInt": {"usize"},
    "Cdouble": {"f64"},
    "Float64": {"f64"},
    "Cfloat": {"f32"},
    "Float32": {"f32"},
    "Cstring": {"cstring"},
}
POINTER_CATEGORIES = {"ptr", "handle", "cstring"}


@dataclass
class JuliaTypes:
    """Type names the Julia sources define: aliases, structs, enums."""

    aliases: dict[str, str]
    structs: set[str]
    enums: set[str]  # @enum Name::Int32 / ::Cint

    @classmethod
    def scan(cls, text: str) -> "JuliaTypes":
        aliases = dict(re.findall(r"^\s*const\s+(" + IDENT + r")\s*=\s*([^\n#]+?)\s*$", text, re.M))
        structs = set(re.findall(r"^\s*(?:mutable\s+)?struct\s+(" + IDENT + r")", text, re.M))
        enums = set(re.findall(r"@enum\s+(" + IDENT + r")\s*::\s*(?:Int32|Cint)\b", text))
        return cls(aliases, structs, enums)

    def resolve(self, julia: str) -> str:
        seen = set()
        while julia in self.aliases and julia not in seen:
            seen.add(julia)
            julia = self.aliases[julia].strip()
        return julia

    def plausible(self, julia: str, c: CType) -> bool:
        julia = self.resolve(julia.strip())
        if re.fullmatch(r"(?:Ptr|Ref)\{.*\}", julia):
            return c.category in POINTER_CATEGORIES
        if julia in JULIA_TYPES:
            return c.category in JULIA_TYPES[julia]
        if julia in self.enums:
            return c.category == "enum"
        if julia in self.structs:
            return c.category == "struct"
        return False


def julia_ccalls(text: str):
    """Yields (line, symbol, ret, types-tuple text, argument count) per ccall."""
    for match in re.finditer(r"(?<![\w@.])ccall\s*\(", text):
        start = match.end()
        depth, i = 1, start
        while i < len(text) and depth:
            if text[i] in "([{":
                depth += 1
            elif text[i] in ")]}":
                depth -= 1
            i += 1
        args = split_top_level(text[start:i - 1])
        line = text.count("\n", 0, match.start()) + 1
        yield line, args


def check_julia_ccalls(root: Path, files: list[Path], texts: dict[Path, str],
                       functions: dict[str, CFunction], problems: list[str]) -> int:
    types = JuliaTypes.scan("\n".join(texts.values()))
    count = 0
    for path in files:
        for line, args in julia_ccalls(texts[path]):
            count += 1
            where = f"{path.relative_to(root)}:{line}"
            if len(args) < 3:
                problems.append(f"{where}: ccall needs (symbol, lib), return type and argument types")
                continue
            target = re.fullmatch(r"\(\s*:(" + IDENT + r")\s*,\s*[^,]+\)", args[0])
            if not target:
                problems.append(f"{where}: ccall target {args[0]!r} is not `(:name, lib)`")
                continue
            name = target.group(1)
            fn = functions.get(name)
            if fn is None:
                problems.append(f"{where}: ccall of {name}, which ampx.h does not declare")
                continue
            if not types.plausible(args[1], fn.ret):
                problems.append(f"{where}: {name} returns {fn.ret} but the ccall says {args[1]}")
            tuple_text = args[2].strip()
            if not (tuple_text.startswith("(") and tuple_text.endswith(")")):
                problems.append(f"{where}: {name}: argument types {tuple_text!r} are not a tuple")
                continue
            inner = tuple_text[1:-1].strip()
            jtypes = [t for t in split_top_level(inner) if t] if inner else []
            if len(jtypes) == 1 and not inner.rstrip().endswith(","):
                problems.append(f"{where}: {name}: `({inner})` is not a tuple; write `({inner},)`")
            passed = len(args) - 3
            if len(jtypes) != len(fn.params):
                problems.append(f"{where}: {name} takes {len(fn.params)} arguments "
                                f"(ampx.h:{fn.line}), the ccall declares {len(jtypes)}")
            if passed != len(jtypes):
                problems.append(f"{where}: {name}: {len(jtypes)} argument types but {passed} "
                                f"arguments passed")
            for index, (jtype, ctype) in enumerate(zip(jtypes, fn.params), 1):
                if not types.plausible(jtype, ctype):
                    problems.append(f"{where}: {name} argument {index} is {ctype} in C "
                                    f"but {jtype} in the ccall")
    return count


def blank_julia_strings(text: str) -> str:
    """`text` with the contents of its string literals ("...", \"\"\"...\"\"\")
    replaced by spaces (newlines kept), so that names in docstrings and
    messages are not taken for code."""
    def blank(match: re.Match) -> str:
        quote = '"""' if match.group(0).startswith('"""') else '"'
        inner = match.group(0)[len(quote):-len(quote)]
        return quote + re.sub(r"[^\n]", " ", inner) + quote
    return re.sub(r'"""(?:[^\\]|\\.)*?"""|"(?:[^"\\\n]|\\.)*"', blank, text, flags=re.S)


def check_julia_handwritten_ccalls(root: Path, written: list[Path], texts: dict[Path, str],
                                   problems: list[str]) -> None:
    """The raw layer is generated: a hand-written file calls LibAmpx's
    functions, never ccalls an ampx symbol itself."""
    for path in written:
        for line, args in julia_ccalls(blank_julia_strings(texts[path])):
            target = re.fullmatch(r"\(\s*:(ampx_\w+)\s*,[^)]*\)", args[0].strip()) if args else None
            if target:
                problems.append(f"{path.relative_to(root)}:{line}: a hand-written ccall of "
                                f"{target.group(1)}; call LibAmpx.{target.group(1)} (generated "
                                f"into src/LibAmpx.jl) instead")


# -- LibAmpx: the generated module's names and the hand-written calls of them --

@dataclass
class JuliaModule:
    """What the generated LibAmpx.jl defines: function arities (C functions,
    *_INIT and macro functions), struct field lists, and other names."""

    arity: dict[str, int]
    structs: dict[str, list[tuple[str, str]]]  # name -> [(field, Julia type)]
    names: set[str]

    @classmethod
    def scan(cls, text: str) -> "JuliaModule":
        arity: dict[str, int] = {}
        for match in re.finditer(r"^function\s+(" + IDENT + r")\(([^)]*)\)", text, re.M):
            params = match.group(2).strip()
            arity[match.group(1)] = len(split_top_level(params)) if params else 0
        for match in re.finditer(r"^(" + IDENT + r")\(([^)]*)\)\s*=", text, re.M):
            params = match.group(2).strip()
            arity[match.group(1)] = len(split_top_level(params)) if params else 0
        structs = julia_structs(text)
        names = set(arity) | set(structs)
        names |= set(re.findall(r"^\s*const\s+(" + IDENT + r")\s*=", text, re.M))
        names |= set(re.findall(r"^\s*mutable\s+struct\s+(" + IDENT + r")", text, re.M))
        return cls(arity, structs, names)


def julia_structs(text: str) -> dict[str, list[tuple[str, str]]]:
    """The immutable structs of a Julia text (comments stripped) and their
    fields as (name, type), in order."""
    structs: dict[str, list[tuple[str, str]]] = {}
    for match in re.finditer(r"^[ \t]*struct[ \t]+(" + IDENT + r")[ \t]*\n(.*?)^[ \t]*end\b",
                             text, re.M | re.S):
        fields = []
        for line in match.group(2).splitlines():
            line = line.strip()
            if not line:
                continue
            field = re.fullmatch(r'(' + IDENT + r'|var"[^"]+")\s*::\s*(.+)', line)
            if not field:
                fields.append((line, ""))  # not a plain field: reported by the layout check
                continue
            fields.append((field.group(1).strip('var"') if field.group(1).startswith('var"')
                           else field.group(1), field.group(2).strip()))
        structs[match.group(1)] = fields
    return structs


def julia_calls(text: str, pattern: str):
    """Yields (line, name, argument texts or None when not called) for each
    match of `pattern` (whose group 1 is the name) in a Julia text."""
    for match in re.finditer(pattern, text):
        line = text.count("\n", 0, match.start()) + 1
        if match.end() < len(text) and text[match.end()] == "(":
            depth, i = 1, match.end() + 1
            while i < len(text) and depth:
                if text[i] in "([{":
                    depth += 1
                elif text[i] in ")]}":
                    depth -= 1
                i += 1
            inner = text[match.end() + 1:i - 1].strip()
            yield line, match.group(1), (split_top_level(inner) if inner else [])
        else:
            yield line, match.group(1), None


def check_julia_libampx_calls(root: Path, written: list[Path], texts: dict[Path, str],
                              generated: JuliaModule | None, functions: dict[str, CFunction],
                              problems: list[str]) -> int:
    """Every `LibAmpx.name(...)` (and, in a file that has `using .LibAmpx`,
    every bare `ampx_name(...)`) in the hand-written files names something
    LibAmpx defines, with the right number of arguments: a C function's
    parameter count, a struct's field count (its constructor), an *_INIT or
    macro function's. A C function named without being called is reported
    too (its arguments could not be checked)."""
    count = 0
    for path in written:
        text = blank_julia_strings(texts[path])
        patterns = [r"(?<![\w.])LibAmpx\.(" + IDENT + r")"]
        if re.search(r"^\s*using\s+\.+LibAmpx\b", text, re.M):
            patterns.append(r"(?<![\w.])((?:ampx|AMPX)_\w+)")
        for pattern in patterns:
            for line, name, args in julia_calls(text, pattern):
                where = f"{path.relative_to(root)}:{line}"
                if generated is None:
                    problems.append(f"{where}: LibAmpx.{name} used, but src/LibAmpx.jl does "
                                    f"not exist (run tools/gen_bindings.py)")
                    continue
                if name not in generated.names:
                    what = ("a function ampx.h does not declare" if name.startswith("ampx_")
                            else "a name LibAmpx does not define")
                    problems.append(f"{where}: LibAmpx.{name}: {what}")
                    continue
                if args is None:
                    if name in functions:
                        problems.append(f"{where}: LibAmpx.{name} is named but not called, "
                                        f"so its arguments cannot be checked")
                    continue
                count += 1
                if any(a.rstrip().endswith("...") for a in args):
                    problems.append(f"{where}: LibAmpx.{name}: a splatted argument cannot be "
                                    f"checked; pass each argument")
                    continue
                if name in functions:
                    want, what = len(functions[name].params), f"ampx.h:{functions[name].line}"
                elif name in generated.structs:
                    want, what = len(generated.structs[name]), "its fields"
                elif name in generated.arity:
                    want, what = generated.arity[name], "its definition"
                else:
                    continue  # a type used as a conversion, e.g. LibAmpx.ampx_dtype(x)
                if len(args) != want:
                    problems.append(f"{where}: LibAmpx.{name} takes {want} arguments "
                                    f"({what}), the call passes {len(args)}")
    return count


# -- struct layouts by C's rules ------------------------------------------------

# Sizes (= alignments) of the Julia scalar types on x86-64 Linux (LP64), the
# platform bindings/layout/ampx_layout.txt describes.
JULIA_SCALAR_SIZES = {
    **{t: 1 for t in ("Int8", "UInt8", "Cchar", "Cuchar", "Bool")},
    **{t: 2 for t in ("Int16", "UInt16", "Cshort", "Cushort", "Float16")},
    **{t: 4 for t in ("Int32", "UInt32", "Cint", "Cuint", "Float32", "Cfloat")},
    **{t: 8 for t in ("Int64", "UInt64", "Clonglong", "Culonglong", "Float64", "Cdouble",
                      "Csize_t", "Cssize_t", "Clong", "Culong", "Int", "UInt", "Cstring")},
}


def julia_layout(type_text: str, structs: dict[str, list[tuple[str, str]]],
                 aliases: dict[str, str], cache: dict, seen: tuple = ()) -> tuple[int, int]:
    """(size, alignment) of a Julia field type, by C's rules; ValueError
    when the type is not one a C struct can hold."""
    t = type_text.strip()
    hops = set()
    while t in aliases and t not in hops:
        hops.add(t)
        t = aliases[t].strip()
    if t in JULIA_SCALAR_SIZES:
        return JULIA_SCALAR_SIZES[t], JULIA_SCALAR_SIZES[t]
    if re.fullmatch(r"Ptr\{.*\}", t):
        return 8, 8
    tuple_type = re.fullmatch(r"NTuple\{\s*(\d+)\s*,\s*(.+)\}", t)
    if tuple_type:
        size, align = julia_layout(tuple_type.group(2), structs, aliases, cache, seen)
        return int(tuple_type.group(1)) * size, align
    if t in structs:
        if t in seen:
            raise ValueError(f"{t} contains itself")
        return struct_layout(t, structs, aliases, cache, seen + (t,))[:2]
    raise ValueError(f"{type_text!r} is not a type whose C layout the checker knows")


def struct_layout(name: str, structs: dict[str, list[tuple[str, str]]], aliases: dict[str, str],
                  cache: dict, seen: tuple = ()) -> tuple[int, int, list[tuple[str, int]]]:
    """(size, alignment, [(field, offset)]) of a Julia struct laid out as C
    lays out the same fields (which is what Julia does for isbits structs)."""
    if name in cache:
        return cache[name]
    offset, align, offsets = 0, 1, []
    for field, type_text in structs[name]:
        if not type_text:
            raise ValueError(f"{name}: {field!r} is not a `name::Type` field")
        size, field_align = julia_layout(type_text, structs, aliases, cache, seen or (name,))
        offset = -(-offset // field_align) * field_align
        offsets.append((field, offset))
        offset += size
        align = max(align, field_align)
    result = (-(-offset // align) * align, align, offsets)
    cache[name] = result
    return result


def read_layout_table(path: Path) -> dict[str, dict]:
    """bindings/layout/ampx_layout.txt as {struct: {"size", "align", "fields": [(f, off)]}}."""
    table: dict[str, dict] = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        kind, what, value = line.split()
        struct, _, field = what.partition(".")
        entry = table.setdefault(struct, {"size": None, "align": None, "fields": []})
        if kind == "sizeof":
            entry["size"] = int(value)
        elif kind == "alignof":
            entry["align"] = int(value)
        elif kind == "offsetof":
            entry["fields"].append((field, int(value)))
    return table


def check_julia_layouts(root: Path, texts: dict[Path, str], problems: list[str]) -> int:
    """The Julia structs named like the header's have, by C's layout rules,
    exactly the sizes, alignments, fields and offsets of the layout table
    clang computed (bindings/layout/ampx_layout.txt)."""
    table_path = root / "bindings" / "layout" / "ampx_layout.txt"
    if not table_path.exists():
        problems.append(f"{table_path.relative_to(root)} is missing (tools/gen_bindings.py "
                        f"writes it)")
        return 0
    table = read_layout_table(table_path)
    joined = "\n".join(texts.values())
    structs = julia_structs(joined)
    aliases = JuliaTypes.scan(joined).aliases
    cache: dict = {}
    checked = 0
    for name, want in table.items():
        where = f"julia struct {name}"
        if name not in structs:
            problems.append(f"{where}: missing (ampx_layout.txt lists it)")
            continue
        try:
            size, align, offsets = struct_layout(name, structs, aliases, cache)
        except ValueError as error:
            problems.append(f"{where}: {error}")
            continue
        checked += 1
        if [f for f, _ in offsets] != [f for f, _ in want["fields"]]:
            problems.append(f"{where}: fields {[f for f, _ in offsets]}, but ampx.h has "
                            f"{[f for f, _ in want['fields']]}")
            continue
        for (field, got), (_, expected) in zip(offsets, want["fields"]):
            if got != expected:
                problems.append(f"{where}.{field}: offset {got} by its Julia types, "
                                f"{expected} in C")
        if size != want["size"]:
            problems.append(f"{where}: size {size} by its Julia types, {want['size']} in C")
        if align != want["align"]:
            problems.append(f"{where}: alignment {align} by its Julia types, "
                            f"{want['align']} in C")
    return checked


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

def check_binding(root: Path, binding: Binding, functions: dict[str, CFunction],
                  verbose: bool) -> tuple[list[str], str]:
    folder = root / binding.folder
    if not folder.is_dir():
        return [], f"{binding.language:7} not present ({binding.folder} does not exist yet)"
    problems: list[str] = []
    files = sorted({p for pattern in binding.patterns for p in folder.glob(pattern)
                    if p.is_file() and not p.name.endswith(binding.exclude)})
    if not files:
        problems.append(f"{binding.folder}: no source files match {', '.join(binding.patterns)}")
    texts = {p: binding.strip(p.read_text(errors="replace")) for p in files}
    written = [p for p in files if not is_generated(p)]
    used = set(re.findall(r"\b(ampx_\w+)\b", "\n".join(texts[p] for p in written)))
    unbound = read_unbound(folder / "unbound.txt", f"{binding.folder}/unbound.txt",
                           set(functions), problems)

    bound = [name for name in functions if name in used]
    missing = [name for name in functions if name not in used and name not in unbound]
    for name in unbound:
        if name in used:
            problems.append(f"{binding.folder}/unbound.txt: {name} is listed as unbound "
                            f"but the sources use it")
    if missing:
        problems.append(f"{binding.folder}: neither bound nor listed in unbound.txt:\n"
                        + textwrap.fill(", ".join(missing), width=96, initial_indent="    ",
                                        subsequent_indent="    "))
    extra = ""
    if binding.language == "julia":
        calls = check_julia_ccalls(root, files, texts, functions, problems)
        check_julia_handwritten_ccalls(root, written, texts, problems)
        generated_files = [p for p in files if p.name == "LibAmpx.jl" and is_generated(p)]
        module = JuliaModule.scan(texts[generated_files[0]]) if generated_files else None
        libcalls = check_julia_libampx_calls(root, written, texts, module, functions, problems)
        structs = check_julia_layouts(root, texts, problems)
        extra = f" ccalls {calls} LibAmpx calls {libcalls} layouts {structs}"
    if verbose:
        for name in sorted(unbound):
            print(f"  {binding.language}: unbound {name}: {unbound[name]}")
    only_unbound = [n for n in unbound if n in functions and n not in used]
    row = (f"{binding.language:7} bound {len(bound):3}  unbound {len(only_unbound):3}  "
           f"missing {len(missing):3}  files {len(written):2} (+{len(files) - len(written)} "
           f"generated){extra}  "
           f"{'OK' if not problems else 'FAIL (' + str(len(problems)) + ')'}")
    return problems, row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the ampx checkout (default: this script's parent folder)")
    parser.add_argument("--verbose", action="store_true", help="also list each unbound function")
    options = parser.parse_args()

    header = options.root / "include" / "ampx" / "ampx.h"
    try:
        parsed = parse_header(header)
    except (OSError, ValueError) as error:
        print(f"check_bindings: {error}", file=sys.stderr)
        return 1
    functions = {fn.name: fn for fn in parsed}
    print(f"ampx.h: {len(functions)} AMPX_API functions")
    failed = False
    for binding in BINDINGS:
        problems, row = check_binding(options.root, binding, functions, options.verbose)
        print(row)
        for problem in problems:
            print(f"  {problem}")
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
