"""emit_rust.py -- the raw Rust crate bindings/rust/ampx-sys/src/lib.rs.

Everything the crate declares comes from the model, in the header's order
and under its section titles:

- functions in `extern "C"` blocks, `#[must_use]` where the header says
  AMPX_NODISCARD, `#[deprecated]` (with the header's message) where it says
  AMPX_DEPRECATED;
- structs `#[repr(C)]`, `#[derive(Clone, Copy, Debug)]`, with the header's
  fields in order (arrays as `[T; N]`, unnamed function-pointer fields as
  the callback types named <struct>_<field>_fn), and a `Default` that is the
  header's `*_INIT` value where it has one (else zeros with `struct_size`
  set);
- enums as `pub type ampx_x = c_int` plus one `pub const` per constant (the
  safe crate matches on them; a C enum value outside the listed ones stays
  representable);
- handles as pointers to opaque, unconstructible `*_s` structs; types the
  header only points to (DLPack's DLManagedTensor) as opaque structs;
- callbacks as `Option<unsafe extern "C" fn(...)>` (NULL is `None`);
- integer macros as constants and the function-like ones as `const fn`;
- every `*_INIT` macro as a `pub const` of its struct, `struct_size` written
  as `size_of::<T>()` where the macro's value is the struct's size;
- a hidden `layout` module: every struct's size, alignment and field
  offsets as Rust lays them out, keyed like the lines of the C layout probe
  (bindings/layout/ampx_layout_probe.c) that build.rs compiles and runs, so
  tests/layout.rs compares every struct of the header without a hand-made
  list.

Constant types: Rust needs one per constant, C leaves most of them `int`.
A constant the header uses as an array length is `usize` (Rust's array
lengths are); one written with an unsigned literal (`1u`) is `u32`; one
cast to `int64_t` (or too large for `int`) is `i64`; the rest keep C's
`int`, `i32`. (The model's Constant.unsigned is taken from a
`long long` probe and so is never set; the literal is read here instead.)

Items are documented with the header's whole doc comment; items of the
experimental tier say so and name their section.
"""

from __future__ import annotations

import re

from . import banner
from .model import CType, Header, ModelError

PATH = "bindings/rust/ampx-sys/src/lib.rs"

# Rust keywords (strict and reserved) that may not name a field or parameter;
# such a name gets a trailing underscore (ampx_segment's `fn` is `fn_`).
KEYWORDS = {
    "as", "break", "const", "continue", "crate", "else", "enum", "extern", "false", "fn",
    "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref",
    "return", "self", "Self", "static", "struct", "super", "trait", "true", "type",
    "unsafe", "use", "where", "while", "async", "await", "dyn", "abstract", "become", "box",
    "do", "final", "macro", "override", "priv", "typeof", "unsized", "virtual", "yield",
    "try",
}

PRIMITIVE = {
    "char": "c_char", "i8": "i8", "u8": "u8", "i16": "i16", "u16": "u16", "i32": "i32",
    "u32": "u32", "i64": "i64", "u64": "u64", "usize": "usize", "f32": "f32", "f64": "f64",
}


def ident(name: str) -> str:
    return name + "_" if name in KEYWORDS else name


def doc_lines(text: str, indent: str = "") -> list[str]:
    """`text` as /// lines (the model has already removed the comment
    markers and each line's indentation, so nothing becomes a code block
    that rustdoc would compile)."""
    if not text:
        return []
    # Doxygen's group markers (`/** @{ */`) are not prose.
    lines = [line.strip() for line in text.split("\n") if line.strip() not in ("@{", "@}")]
    while lines and not lines[0]:
        lines.pop(0)
    return [f"{indent}///{' ' + line if line else ''}" for line in lines]


class _Emitter:
    def __init__(self, header: Header):
        self.h = header
        self.text = header.path.read_text()
        # The header with its comments blanked out (same offsets and lines).
        self.code = re.sub(r"/\*.*?\*/|//[^\n]*",
                           lambda m: re.sub(r"[^\n]", " ", m.group(0)), self.text, flags=re.S)
        self.inline_owner: dict[str, tuple[str, str]] = {}
        self.opaque = sorted(self._opaque_names())
        # Constants the header spells array lengths with (`shape[AMPX_MAX_DIMS]`).
        self.array_lengths = set(re.findall(r"\w+\s*\[\s*(AMPX_\w+)\s*\]", self.code))

    # -- positions in the header ---------------------------------------------

    def _line(self, pattern: str, what: str) -> int:
        m = re.search(pattern, self.code, re.M)
        if not m:
            raise ModelError(f"emit_rust: cannot find {what} in ampx.h")
        return self.code.count("\n", 0, m.start()) + 1

    def define_line(self, name: str) -> int:
        return self._line(rf"^[ \t]*#[ \t]*define\s+{name}\b", f"#define {name}")

    def typedef_line(self, name: str) -> int:
        return self._line(rf"^\}}\s*{name}\s*;", f"the typedef {name}")

    def handle_line(self, name: str) -> int:
        return self._line(rf"typedef\s+struct\s+\w+\s*\*\s*{name}\s*;", f"the handle {name}")

    def callback_line(self, name: str) -> int:
        return self._line(rf"\(\s*\*\s*{name}\s*\)", f"the callback typedef {name}")

    def attributes(self, name: str) -> tuple[bool, "str | None"]:
        """(AMPX_NODISCARD, AMPX_DEPRECATED's message) of function `name`,
        read from its declaration with the comments blanked out. (The
        model's Function.nodiscard/.deprecated look at the first `name(` of
        the raw text, which may be a mention in an earlier comment: it
        misses ampx_set_error's AMPX_NODISCARD, for one.)"""
        m = re.search(rf"\b{name}\s*\(", self.code)
        if not m:
            raise ModelError(f"emit_rust: cannot find the declaration of {name} in ampx.h")
        start = max(self.code.rfind(";", 0, m.start()), self.code.rfind("}", 0, m.start()),
                    self.code.rfind("\n#", 0, m.start()))
        head = self.code[start + 1:m.start()]
        found = re.search(r'AMPX_DEPRECATED\(\s*"([^"]*)"\s*\)', head)
        return "AMPX_NODISCARD" in head, (found.group(1) if found else None)

    def follows_uncommented(self, name: str) -> bool:
        """True when function `name`'s declaration follows the previous
        declaration with no comment between them."""
        m = re.search(rf"\b{name}\s*\(", self.code)
        start = max(self.code.rfind(";", 0, m.start()), self.code.rfind("}", 0, m.start()),
                    self.code.rfind("\n#", 0, m.start()))
        return self.code[start] == ";" and "/*" not in self.text[start + 1:m.start()]

    # -- types ----------------------------------------------------------------

    def _opaque_names(self) -> set[str]:
        names = set(self.h.opaque)

        def walk(t: CType) -> None:
            if t.kind == "opaque":
                names.add(t.name)
            if t.pointee is not None:
                walk(t.pointee)

        for f in self.h.functions:
            walk(f.ret)
            for p in f.params:
                walk(p.type)
        for cb in self.h.callbacks:
            walk(cb.ret)
            for p in cb.params:
                walk(p.type)
        for s in self.h.structs:
            for fl in s.fields:
                walk(fl.type)
        return names

    def rtype(self, t: CType) -> str:
        if t.kind == "ptr":
            inner = "c_void" if t.pointee.kind == "void" else self.rtype(t.pointee)
            return ("*const " if t.const else "*mut ") + inner
        if t.kind == "array":
            return f"[{self.rtype(t.pointee)}; {self.array_length(t.length)}]"
        if t.kind in PRIMITIVE:
            return PRIMITIVE[t.kind]
        if t.kind in ("enum", "handle", "struct", "callback", "opaque"):
            return t.name
        raise ModelError(f"emit_rust: no Rust type for {t.spelling()}")

    def array_length(self, length: int) -> str:
        """The constant the header spells an array length with, if one has
        that value, else the number."""
        for c in self.h.constants:
            if c.name in self.array_lengths and c.value == length:
                return c.name
        return str(length)

    def signature(self, params, ret: CType) -> str:
        args = ", ".join(f"{ident(p.name)}: {self.rtype(p.type)}" for p in params)
        tail = "" if ret.kind == "void" else f" -> {self.rtype(ret)}"
        return f"({args}){tail}"

    def constant_type(self, name: str) -> str:
        if name in self.array_lengths:
            return "usize"
        body = re.search(rf"^[ \t]*#[ \t]*define\s+{name}\b(.*)$", self.text, re.M).group(1)
        if re.fullmatch(r"\s*\(?\s*\d+[uU]\s*\)?\s*", body):
            return "u32"
        value = next(c.value for c in self.h.constants if c.name == name)
        if re.search(r"\bint64_t\b", body) or not -2 ** 31 <= value < 2 ** 31:
            return "i64"
        return "i32"

    # -- documentation --------------------------------------------------------

    def tier(self, experimental: bool, line: int) -> list[str]:
        """The note on an experimental item (after its doc lines, if any)."""
        if not experimental:
            return []
        return ["///",
                f"/// *Experimental tier* (declared by ampx.h under `AMPX_EXPERIMENTAL`; "
                f"section {self.h.section_of(line)})."]

    def documented(self, doc: str, experimental: bool, line: int, fallback: str,
                   indent: str = "") -> list[str]:
        """Doc lines: the header's comment (or `fallback` without one), then
        the experimental tier's note."""
        lines = doc_lines(doc, indent) or [f"{indent}/// {fallback}"]
        return lines + [indent + x for x in self.tier(experimental, line)]

    # -- items ----------------------------------------------------------------

    def items(self) -> list[tuple[float, int, str, object]]:
        """(line, sequence, kind, model object) of every item, header order."""
        items = []
        seq = 0

        def add(line: float, kind: str, obj: object) -> None:
            nonlocal seq
            items.append((line, seq, kind, obj))
            seq += 1

        owner_lines = {}
        for f in self.h.functions:
            add(f.line, "function", f)
            owner_lines[f.name] = f.line
        for s in self.h.structs:
            line = self.typedef_line(s.name)
            add(line, "struct", s)
            owner_lines[s.name] = line
        for e in self.h.enums:
            add(self.typedef_line(e.name), "enum", e)
        for hd in self.h.handles:
            add(self.handle_line(hd.name), "handle", hd)
        for c in self.h.constants:
            add(self.define_line(c.name), "constant", c)
        for m in self.h.macro_functions:
            add(self.define_line(m.name), "macro_function", m)
        for i in self.h.inits:
            add(self.define_line(i.name), "init", i)
        for cb in self.h.callbacks:
            if not cb.inline:
                add(self.callback_line(cb.name), "callback", cb)
                continue
            # An unnamed signature goes right before its struct or function.
            owner = max((o for o in owner_lines if cb.name.startswith(o + "_")), key=len,
                        default=None)
            if owner is None:
                raise ModelError(f"emit_rust: no owner for the inline callback {cb.name}")
            self.inline_owner[cb.name] = (owner, cb.name[len(owner) + 1:-len("_fn")])
            add(owner_lines[owner] - 0.5, "callback", cb)
        items.sort(key=lambda item: (item[0], item[1]))
        return items

    def emit_function(self, f) -> list[str]:
        doc = f.doc
        lead = f
        order = sorted(self.h.functions, key=lambda g: g.line)
        while not doc and self.follows_uncommented(lead.name):
            # Declarations one after another under one comment (or a doxygen
            # group, `/** @{ */`) share it; the model gives it to the first.
            k = order.index(lead)
            if k == 0:
                break
            lead = order[k - 1]
            if lead.doc:
                doc = f"As [`{lead.name}`]:\n" + lead.doc
        out = self.documented(doc, f.experimental, f.line, f"`{f.name}` of ampx.h.", "    ")
        nodiscard, deprecated = self.attributes(f.name)
        if deprecated is not None:
            out.append(f'    #[deprecated(note = "{deprecated}")]')
        if nodiscard:
            out.append("    #[must_use]")
        out.append(f"    pub fn {f.name}{self.signature(f.params, f.ret)};")
        return out

    def emit_struct(self, s, line: int) -> list[str]:
        out = self.documented(s.doc, s.experimental, line, f"`{s.name}` of ampx.h.")
        out += ["#[repr(C)]", "#[derive(Clone, Copy, Debug)]", f"pub struct {s.name} {{"]
        for fl in s.fields:
            out += doc_lines(fl.doc, "    ")
            out.append(f"    pub {ident(fl.name)}: {self.rtype(fl.type)},")
        out.append("}")
        inits = [i for i in self.h.inits if i.struct == s.name]
        own = [i for i in inits if i.name == f"AMPX_{s.name[len('ampx_'):].upper()}_INIT"]
        init = (own or inits or [None])[0]
        out.append("")
        out.append(f"impl Default for {s.name} {{")
        if init is not None:
            out.append(f"    /// [`{init.name}`], the header's initializer.")
            out.append(f"    fn default() -> Self {{ {init.name} }}")
        else:
            out.append("    /// Every field zero (NULL, `None`)"
                       + (", `struct_size` this struct's size." if self.has_size(s) else "."))
            out.append("    fn default() -> Self {")
            out.append(f"        {self.value(s.name, None, indent='        ')}")
            out.append("    }")
        out.append("}")
        return out

    @staticmethod
    def has_size(s) -> bool:
        return bool(s.fields) and s.fields[0].name == "struct_size" and s.fields[0].type.kind == "usize"

    def value(self, struct_name: str, values, indent: str) -> str:
        """A struct expression: the macro's values, or zeros (values None)."""
        s = self.h.struct(struct_name)
        parts = []
        for k, fl in enumerate(s.fields):
            v = values[k] if values is not None else None
            if k == 0 and self.has_size(s) and (values is None or v == s.size):
                text = f"size_of::<{s.name}>()"
            else:
                text = self.field_value(fl.type, v, values is None, indent + "    ")
            parts.append(f"{indent}    {ident(fl.name)}: {text},")
        return f"{s.name} {{\n" + "\n".join(parts) + f"\n{indent}}}"

    def field_value(self, t: CType, v, zero: bool, indent: str) -> str:
        if t.kind == "struct":
            return self.value(t.name, None if zero else v, indent)
        if t.kind == "array":
            items = [self.field_value(t.pointee, None if zero else x, zero, indent)
                     for x in (v if not zero else [None] * t.length)]
            if len(set(items)) == 1:
                return f"[{items[0]}; {self.array_length(t.length)}]"
            return "[" + ", ".join(items) + "]"
        if t.kind == "callback":
            return "None"
        if t.kind == "handle" or t.kind == "ptr":
            return "null()" if t.kind == "ptr" and t.const else "null_mut()"
        if t.kind in ("f32", "f64"):
            x = 0.0 if zero else float(v)
            if x != x:
                return f"{t.kind}::NAN"
            if x in (float("inf"), float("-inf")):
                return ("-" if x < 0 else "") + f"{t.kind}::INFINITY"
            return repr(x)
        x = 0 if zero else int(v)
        if t.kind == "enum":
            enum = next(e for e in self.h.enums if e.name == t.name)
            named = [c.name for c in enum.constants if c.value == x]
            if named:
                return named[0]
        return str(x)

    def emit_init(self, i, line: int) -> list[str]:
        out = self.documented("", i.experimental, line,
                              f"`{i.name}`: the header's initializer of [`{i.struct}`].")
        out.append(f"pub const {i.name}: {i.struct} = {self.value(i.struct, i.values, '')};")
        return out

    def emit_enum(self, e, line: int) -> list[str]:
        out = self.documented(e.doc, e.experimental, line, f"`{e.name}` of ampx.h.")
        out.append(f"pub type {e.name} = c_int;")
        for c in e.constants:
            out += doc_lines(c.doc)
            out.append(f"pub const {c.name}: {e.name} = {c.value};")
        return out

    def emit_handle(self, hd, line: int) -> list[str]:
        out = [f"/// The opaque struct behind [`{hd.name}`]; never made or read in Rust.",
               "#[repr(C)]",
               f"pub struct {hd.struct_name} {{",
               "    _private: [u8; 0],",
               "    _marker: PhantomData<(*mut u8, PhantomPinned)>,",
               "}",
               ""]
        out += self.documented(hd.doc, hd.experimental, line, f"`{hd.name}` of ampx.h.")
        out.append(f"pub type {hd.name} = *mut {hd.struct_name};")
        return out

    def emit_callback(self, cb, line: float) -> list[str]:
        if cb.inline:
            owner, member = self.inline_owner[cb.name]
            what = "field" if any(s.name == owner for s in self.h.structs) else "parameter"
            out = [f"/// The function-pointer type of `{owner}`'s {what} `{member}`, unnamed in "
                   "ampx.h (`None` is NULL)."]
            # The model marks unnamed signatures stable; they share their owner's tier.
            experimental = any(o.experimental for o in self.h.structs + self.h.functions
                               if o.name == owner)
        else:
            out = doc_lines(cb.doc) + ["///", "/// `None` is NULL."]
            experimental = cb.experimental
        out += self.tier(experimental, int(line + 0.5))
        out.append(f"pub type {cb.name} = Option<unsafe extern \"C\" fn"
                   f"{self.signature(cb.params, cb.ret)}>;")
        return out

    def group_doc(self, line: int) -> str:
        """For an undocumented #define: a pointer to the documented one its
        run of #define lines starts with (AMPX_DOCTOR_BIN_ZERO's comment is
        AMPX_DOCTOR_BINS's), or ""."""
        lines = self.text.split("\n")
        k = line - 2
        while k >= 0 and re.match(r"\s*#\s*define\s+(\w+)", lines[k]):
            name = re.match(r"\s*#\s*define\s+(\w+)", lines[k]).group(1)
            if any(c.name == name and c.doc for c in self.h.constants):
                return f"See [`{name}`]."
            k -= 1
        return ""

    def emit_constant(self, c, line: int) -> list[str]:
        doc = c.doc or self.group_doc(line)
        out = self.documented(doc, c.experimental, line, f"`{c.name}` of ampx.h.")
        out.append(f"pub const {c.name}: {self.constant_type(c.name)} = {c.value};")
        return out

    def emit_macro_function(self, m, line: int) -> list[str]:
        params = ", ".join(f"{p}: i32" for p in m.params)
        body = " ".join(m.body)
        body = re.sub(r"\( ", "(", re.sub(r" \)", ")", body))
        doc = m.doc or self.group_doc(line)
        out = self.documented(doc + ("\n\n" if doc else "") + "Computed in `int` arithmetic, as C does.",
                              m.experimental, line, "")
        out += ["#[allow(non_snake_case, unused_parens)]",
                f"pub const fn {m.name}({params}) -> i32 {{",
                f"    {body}",
                "}"]
        return out

    # -- the file -------------------------------------------------------------

    def preamble(self) -> list[str]:
        h = self.h
        return [
            banner("//").rstrip("\n"),
            "//! Raw FFI declarations of ampx's C ABI, `include/ampx/ampx.h`, generated",
            "//! from the header by `tools/gen_bindings.py` (tools/bindgen/emit_rust.py):",
            f"//! {len(h.functions)} functions, {len(h.structs)} structs, {len(h.enums)} enums, "
            f"{len(h.handles)} handles, {len(h.callbacks)} callback types, "
            f"{len(h.constants)} constants and {len(h.inits)} `*_INIT` values.",
            "//!",
            "//! Structs are `#[repr(C)]` with the header's fields in order (their layouts",
            "//! are compared with the C compiler's by `tests/layout.rs`); enums are",
            "//! `c_int` types with one constant per value; handles are pointers to",
            "//! opaque structs; callbacks are `Option<unsafe extern \"C\" fn>` (`None` is",
            "//! NULL); `*_INIT` macros are constants and each struct's `Default` is its",
            "//! `*_INIT` value. The docs are the header's comments. Items of the",
            "//! experimental tier (declared by ampx.h only under `AMPX_EXPERIMENTAL`) say",
            "//! so; libampx exports both tiers.",
            "//!",
            "//! Everything here is `unsafe` to call: the `ampx` crate is the safe layer.",
            "//! The build script links `libampx` from `$AMPX_LIB_DIR` (see `build.rs`).",
            "//!",
            "//! To change this file, change ampx.h and run `python3 tools/gen_bindings.py`.",
            "#![allow(non_camel_case_types, non_upper_case_globals, clippy::all)]",
            "",
            "use std::marker::{PhantomData, PhantomPinned};",
            "use std::mem::size_of;",
            "use std::os::raw::{c_char, c_int, c_void};",
            "#[allow(unused_imports)]",
            "use std::ptr::{null, null_mut};",
        ]

    def emit(self) -> str:
        out = self.preamble()
        if self.opaque:
            out += ["", "// " + "-" * 75, "// Types ampx.h only points to", "// " + "-" * 75]
            for name in self.opaque:
                out += ["", f"/// `{name}`, opaque here: ampx only passes pointers to it.",
                        "#[repr(C)]",
                        f"pub struct {name} {{",
                        "    _private: [u8; 0],",
                        "    _marker: PhantomData<(*mut u8, PhantomPinned)>,",
                        "}"]
        section = None
        in_extern = False
        for line, _, kind, obj in self.items():
            title = self.h.section_of(int(line + 0.5))
            if title != section or (kind != "function" and in_extern):
                if in_extern:
                    out.append("}")
                    in_extern = False
            if title != section:
                section = title
                out += ["", "// " + "=" * 75, f"// {title}", "// " + "=" * 75]
            if kind == "function":
                if not in_extern:
                    out += ["", 'extern "C" {']
                    in_extern = True
                else:
                    out.append("")
                out += self.emit_function(obj)
                continue
            out.append("")
            out += getattr(self, f"emit_{kind}")(obj, line)
        if in_extern:
            out.append("}")
        out += self.layout_module()
        return "\n".join(out) + "\n"

    def layout_module(self) -> list[str]:
        out = ["",
               "// " + "=" * 75,
               "// Struct layouts, for tests/layout.rs",
               "// " + "=" * 75,
               "",
               "/// `offset_of!` for toolchains older than Rust 1.77: the byte offset of",
               "/// `$field` in `$ty` (used by the layout table and tests).",
               "#[doc(hidden)]",
               "#[macro_export]",
               "macro_rules! ampx_offset_of {",
               "    ($ty:ty, $field:ident) => {{",
               "        let value = ::std::mem::MaybeUninit::<$ty>::uninit();",
               "        let base = value.as_ptr();",
               "        // SAFETY: only the field's address is taken; nothing is read.",
               "        let field = unsafe { ::std::ptr::addr_of!((*base).$field) };",
               "        field as usize - base as usize",
               "    }};",
               "}",
               "",
               "/// Every struct's layout as Rust lays it out (tests/layout.rs compares it",
               "/// with the C compiler's, which build.rs measures).",
               "#[doc(hidden)]",
               "pub mod layout {",
               "    use super::*;",
               "    use std::mem::align_of;",
               "",
               "    /// (fact, bytes) for every struct of ampx.h as this compiler lays it",
               "    /// out, keyed as bindings/layout/ampx_layout_probe.c prints the C",
               "    /// compiler's (`sizeof S`, `alignof S`, `offsetof S.field` with the C",
               "    /// field name).",
               "    pub fn rust() -> Vec<(&'static str, usize)> {",
               "        vec!["]
        for s in self.h.structs:
            out.append(f'            ("sizeof {s.name}", size_of::<{s.name}>()),')
            out.append(f'            ("alignof {s.name}", align_of::<{s.name}>()),')
            for fl in s.fields:
                out.append(f'            ("offsetof {s.name}.{fl.name}", '
                           f"ampx_offset_of!({s.name}, {ident(fl.name)})),")
        out += ["        ]",
                "    }",
                "}"]
        return out


def emit(header: Header) -> dict[str, str]:
    return {PATH: _Emitter(header).emit()}
