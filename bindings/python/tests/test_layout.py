"""The generated ctypes structs (ampx/_raw.py) have the C compiler's layout.

Compiles the layout probe generated from ampx.h
(bindings/layout/ampx_layout_probe.c), runs it, and compares each line it
prints -- the size, the alignment and every field offset of every struct of
the header -- with ctypes.sizeof, ctypes.alignment and the field offsets of
_raw's Structure classes; and checks that _raw has exactly the probe's
structs, with exactly their fields in their order. Skipped only when no C
compiler exists.
"""
import ctypes
import importlib.util
import os
import pathlib
import shutil
import subprocess
import tempfile
import unittest

from ampx import _raw

HERE = pathlib.Path(__file__).resolve().parent
PROBE = HERE.parent.parent / "layout" / "ampx_layout_probe.c"


def _include_dir() -> pathlib.Path:
    """$AMPX_INCLUDE_DIR, else the header an installed wheel carries, else the
    source tree's (as tests/test_coverage.py finds ampx.h)."""
    include = os.environ.get("AMPX_INCLUDE_DIR")
    if include:
        return pathlib.Path(include)
    spec = importlib.util.find_spec("ampx")
    if spec is not None and spec.origin:
        installed = pathlib.Path(spec.origin).parent / "include"
        if (installed / "ampx" / "ampx.h").exists():
            return installed
    return HERE.parents[2] / "include"


def _compiler():
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def _structs():
    """_raw's Structure classes by their C name."""
    return {name: value for name, value in vars(_raw).items()
            if isinstance(value, type) and issubclass(value, ctypes.Structure)
            and value.__module__ == _raw.__name__}


def probe_lines(compiler: str, probe: pathlib.Path, include: pathlib.Path) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        exe = pathlib.Path(tmp) / "ampx_layout_probe"
        subprocess.run([compiler, "-std=c11", f"-I{include}", str(probe), "-o", str(exe)],
                       check=True, capture_output=True, text=True)
        return subprocess.run([str(exe)], check=True, capture_output=True,
                              text=True).stdout.splitlines()


def compare(lines: list[str], structs: dict) -> list[str]:
    """The disagreements between the probe's lines and `structs`."""
    problems = []
    fields_seen: dict[str, list[str]] = {}
    for line in lines:
        kind, what, value = line.split()
        expected = int(value)
        name, _, field = what.partition(".")
        struct = structs.get(name)
        if struct is None:
            problems.append(f"{line}: _raw has no struct {name}")
            continue
        if kind == "sizeof":
            got = ctypes.sizeof(struct)
        elif kind == "alignof":
            got = ctypes.alignment(struct)
        elif kind == "offsetof":
            fields_seen.setdefault(name, []).append(field)
            descriptor = getattr(struct, field, None)
            if not hasattr(descriptor, "offset"):
                problems.append(f"{line}: {name} has no field {field} in _raw")
                continue
            got = descriptor.offset
        else:
            problems.append(f"unexpected probe line {line!r}")
            continue
        if got != expected:
            problems.append(f"{line}: ctypes gives {got}")
    for name, struct in structs.items():
        declared = [f[0] for f in struct._fields_]
        if fields_seen.get(name, []) != declared:
            problems.append(f"{name}: _raw's fields {declared} are not the probe's "
                            f"{fields_seen.get(name, [])}")
    return problems


class LayoutTest(unittest.TestCase):
    def test_every_struct_matches_the_c_compiler(self):
        compiler = _compiler()
        if compiler is None:
            self.skipTest("no C compiler (cc, gcc, clang or $CC) to build the layout probe")
        self.assertTrue(PROBE.exists(), f"{PROBE} is missing (tools/gen_bindings.py writes it)")
        include = _include_dir()
        lines = probe_lines(compiler, PROBE, include)
        structs = _structs()
        # Every struct of the header, with a size, an alignment and its fields.
        self.assertEqual(sum(line.startswith("sizeof ") for line in lines), len(structs))
        self.assertGreater(len(structs), 20)
        self.assertEqual(compare(lines, structs), [])

    def test_a_wrong_layout_is_found(self):
        # The comparison itself: a field of the wrong width must be reported
        # (the size and the next field's offset), not pass.
        class ampx_doctor_options(ctypes.Structure):  # noqa: N801  (the C name)
            _fields_ = [("struct_size", ctypes.c_size_t), ("interval", ctypes.c_int64),
                        ("history", ctypes.c_int32)]

        lines = ["sizeof ampx_doctor_options 16", "alignof ampx_doctor_options 8",
                 "offsetof ampx_doctor_options.struct_size 0",
                 "offsetof ampx_doctor_options.interval 8",
                 "offsetof ampx_doctor_options.history 12"]
        problems = compare(lines, {"ampx_doctor_options": ampx_doctor_options})
        self.assertEqual(problems, ["sizeof ampx_doctor_options 16: ctypes gives 24",
                                    "offsetof ampx_doctor_options.history 12: ctypes gives 16"])
        self.assertEqual(compare(lines, {"ampx_doctor_options": _raw.ampx_doctor_options}), [])


if __name__ == "__main__":
    unittest.main()
