#!/usr/bin/env python3
"""test_gen_bindings.py -- the bindings generator refuses what it cannot bind.

Each case is a scratch header holding one construct that no binding can
represent exactly (an enum without a typedef, a callback without a prototype
or with a variable argument list, an enum that is not a signed 32-bit int,
`long` in the ABI, a bit-field, a union, a variable); reading it must fail with an error
naming the declaration. A control header of the constructs ampx.h does use
must read, with clang's values and layout. Scratch files go to a temporary
folder.

Exit status: 0 passed; 1 failed; 77 libclang's Python bindings are missing
(a failure when AMPX_REQUIRE_BINDINGS=1).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True

PROLOGUE = "#include <stddef.h>\n#include <stdint.h>\n"
# As in ampx.h, where the generator takes the experimental tier to start.
EPILOGUE = "\n#if defined(AMPX_EXPERIMENTAL)\n#endif\n"

# (case, header text, strings the error must contain: the declaration first)
REFUSED = [
    ("anonymous enum", "enum { AMPX_LOOSE_A = 1, AMPX_LOOSE_B = 2 };",
     ["AMPX_LOOSE_A, AMPX_LOOSE_B", "anonymous enum"]),
    ("enum with a tag only", "enum ampx_tagged { AMPX_T = -1, AMPX_T_MAX = 0x7fffffff };",
     ["ampx_tagged", "without a typedef"]),
    ("struct with a tag only", "struct ampx_plain { int32_t a; };",
     ["ampx_plain", "without a typedef"]),
    ("unprototyped callback", "typedef void (*ampx_old_fn)();",
     ["ampx_old_fn", "without a prototype"]),
    ("variadic callback", "typedef void (*ampx_log_fn)(const char *format, ...);",
     ["ampx_log_fn", "variadic"]),
    ("variadic callback parameter",
     "int32_t ampx_set_log(void (*log)(int32_t level, ...));",
     ["ampx_set_log_log_fn", "variadic"]),
    ("unprototyped function", "int32_t ampx_legacy();",
     ["ampx_legacy", "without a prototype"]),
    ("unsigned enum", "typedef enum ampx_flags { AMPX_FLAG_HIGH = 0x80000000u } ampx_flags;",
     ["ampx_flags", "'unsigned int'"]),
    ("unpinned enum", "typedef enum ampx_small { AMPX_SMALL_A = 1 } ampx_small;",
     ["ampx_small", "'unsigned int'"]),
    ("64-bit enum", "typedef enum ampx_big { AMPX_BIG = -0x100000000LL } ampx_big;",
     ["ampx_big", "'long'"]),
    ("long parameter", "int32_t ampx_count(long n);",
     ["ampx_count(0)", "LLP64"]),
    ("unsigned long result", "unsigned long ampx_size(void);",
     ["ampx_size", "LLP64"]),
    ("long field", "typedef struct ampx_opts { size_t struct_size; long n; } ampx_opts;",
     ["ampx_opts.n", "LLP64"]),
    ("long behind a pointer", "void ampx_fill(const unsigned long *values);",
     ["ampx_fill(0)", "LLP64"]),
    ("long in a callback", "typedef int32_t (*ampx_cb_fn)(void *user, unsigned long n);",
     ["ampx_cb_fn(1)", "LLP64"]),
    ("long result of a callback", "typedef long (*ampx_len_fn)(void *user);",
     ["ampx_len_fn", "LLP64"]),
    ("bit-field",
     "typedef struct ampx_packed { uint32_t a : 3; uint32_t b : 29; } ampx_packed;",
     ["ampx_packed.a", "bit-field (3 bits)"]),
    ("union typedef", "typedef union ampx_value { float f; int32_t i; } ampx_value;",
     ["ampx_value", "union"]),
    ("anonymous union member",
     "typedef struct ampx_variant { int32_t kind; union { float f; int32_t i; }; } ampx_variant;",
     ["ampx_variant", "union inside the struct"]),
    ("union field",
     "typedef struct ampx_holder { union { float f; int32_t i; } u; } ampx_holder;",
     ["ampx_holder", "union inside the struct"]),
    ("variable", "extern int32_t ampx_global;",
     ["ampx_global", "a variable"]),
    ("struct defined in a struct",
     "typedef struct ampx_outer { struct ampx_inner { int32_t a; } in; } ampx_outer;",
     ["ampx_outer", "struct defined inside the struct"]),
]

CONTROL = """
typedef enum {
  AMPX_MODE_A = 1,
  AMPX_MODE_MIN_ENUM = -0x7fffffff - 1,
  AMPX_MODE_MAX_ENUM = 0x7fffffff
} ampx_mode;
typedef int64_t (*ampx_count_fn)(void *user, size_t n, uint64_t m);
typedef struct ampx_opts {
  size_t struct_size;
  int64_t n;
  ampx_count_fn count;
  int32_t flags[3];
} ampx_opts;
struct ampx_thing_s;
typedef struct ampx_thing_s *ampx_thing;
int64_t ampx_total(ampx_thing thing, ampx_mode mode, long long k, const ampx_opts *opts);
"""


def main() -> int:
    try:
        import clang.cindex  # noqa: F401
    except ImportError:
        if os.environ.get("AMPX_REQUIRE_BINDINGS") == "1":
            print("test_gen_bindings: libclang's Python bindings are missing and "
                  "AMPX_REQUIRE_BINDINGS=1: failing", file=sys.stderr)
            return 1
        print("test_gen_bindings: libclang's Python bindings are missing: skipped")
        return 77
    from bindgen.model import ModelError, read_header

    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        header = Path(tmp) / "scratch.h"
        for case, text, expected in REFUSED:
            header.write_text(PROLOGUE + text + EPILOGUE)
            try:
                read_header(header)
                failures.append(f"{case}: read without an error")
                continue
            except ModelError as error:
                message = str(error)
            except Exception as error:  # a crash is no refusal either
                failures.append(f"{case}: {type(error).__name__} where a ModelError was due")
                continue
            missing = [e for e in expected if e not in message]
            if missing or "scratch.h:3 " not in message:
                failures.append(f"{case}: the error does not name {missing or 'line 3'}: {message}")
            else:
                print(f"ok    {case}: {message}")

        header.write_text(PROLOGUE + CONTROL + EPILOGUE)
        try:
            h = read_header(header)
        except ModelError as error:
            failures.append(f"control header: {error}")
        else:
            got = {
                "enum": [(k.name, k.value) for k in h.enums[0].constants],
                "callback": ([p.type.kind for p in h.callbacks[0].params], h.callbacks[0].ret.kind),
                "struct": ([(f.name, f.type.kind, f.offset) for f in h.struct("ampx_opts").fields],
                           h.struct("ampx_opts").size, h.struct("ampx_opts").align),
                "function": ([p.type.kind for p in h.functions[0].params], h.functions[0].ret.kind),
            }
            want = {
                "enum": [("AMPX_MODE_A", 1), ("AMPX_MODE_MIN_ENUM", -2**31),
                         ("AMPX_MODE_MAX_ENUM", 2**31 - 1)],
                "callback": (["ptr", "usize", "u64"], "i64"),
                "struct": ([("struct_size", "usize", 0), ("n", "i64", 8),
                            ("count", "callback", 16), ("flags", "array", 24)], 40, 8),
                "function": (["handle", "enum", "i64", "ptr"], "i64"),
            }
            wrong = [f"control header, {key}: {got[key]} where {want[key]}"
                     for key in want if got[key] != want[key]]
            failures += wrong
            if not wrong:
                print("ok    control header: read with clang's values and layout")

        # The generator itself: exit status 1 and the message, nothing written.
        root = Path(tmp) / "root"
        (root / "include" / "ampx").mkdir(parents=True)
        (root / "include" / "ampx" / "ampx.h").write_text(PROLOGUE + REFUSED[0][1] + EPILOGUE)
        run = subprocess.run([sys.executable, str(HERE / "gen_bindings.py"), "--root", str(root)],
                             capture_output=True, text=True)
        written = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        if (run.returncode != 1 or "AMPX_LOOSE_A" not in run.stderr
                or written != ["include/ampx/ampx.h"]):
            failures.append(f"gen_bindings.py on a refused header: exit {run.returncode}, "
                            f"stderr {run.stderr.strip()!r}, files {written}")
        else:
            print("ok    gen_bindings.py exits 1 naming the declaration, writing nothing")

    for failure in failures:
        print(f"FAIL  {failure}")
    print(f"test_gen_bindings: {len(REFUSED) + 2 - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
