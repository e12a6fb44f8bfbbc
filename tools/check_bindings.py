#!/usr/bin/env python3
"""check_bindings.py -- checks that every language binding covers the C API.

Parses every AMPX_API declaration of include/ampx/ampx.h (name, return type,
parameter types), then for each binding folder that exists checks that each
function is either used in the binding's sources (as an identifier, comments
ignored) or listed in the binding's unbound.txt as `name: reason`. An
unbound.txt entry is an error when its reason is empty, when it names no
function of the header, or when the function is bound after all.

For Julia it also checks every `ccall((:name, lib), Ret, (T1, T2, ...), args...)`:
the symbol exists, the argument-type tuple is a real tuple, the number of
types equals the C parameter count and the number of arguments passed, and
each Julia type is plausible for its C type (see JULIA_TYPES).

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
        extra = f" ccalls {calls}"
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
