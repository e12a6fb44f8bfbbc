"""Every AMPX_API function of ampx.h is called by the package or listed in unbound.txt."""
import importlib.util
import os
import pathlib
import re
import unittest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "ampx"
UNBOUND = PACKAGE.parent / "unbound.txt"


def _header() -> pathlib.Path:
    """$AMPX_INCLUDE_DIR/ampx/ampx.h, else the copy an installed wheel carries
    (ampx/include/ampx/ampx.h), else the source tree's."""
    include = os.environ.get("AMPX_INCLUDE_DIR")
    if include:
        return pathlib.Path(include) / "ampx" / "ampx.h"
    spec = importlib.util.find_spec("ampx")  # found, not imported
    if spec is not None and spec.origin:
        installed = pathlib.Path(spec.origin).parent / "include" / "ampx" / "ampx.h"
        if installed.exists():
            return installed
    return PACKAGE.parents[2] / "include" / "ampx" / "ampx.h"


class CoverageTest(unittest.TestCase):
    def test_every_function_is_bound_or_listed(self):
        header = _header()
        if not header.exists():
            self.skipTest(f"{header} not found")
        declared = set(re.findall(r"AMPX_API\s+[^;(]*?\b(ampx_\w+)\s*\(", header.read_text()))
        self.assertGreater(len(declared), 100)
        unbound = {line.split(":", 1)[0].strip()
                   for line in UNBOUND.read_text().splitlines()
                   if line.strip() and not line.startswith("#")}
        # Called from the safe layer: named as (_)lib.<function> outside _lib.py.
        called = set()
        for module in PACKAGE.glob("*.py"):
            if module.name != "_lib.py":
                called |= set(re.findall(r"\b_?lib\.(ampx_\w+)", module.read_text()))
        self.assertEqual(sorted(declared - called - unbound), [], "neither bound nor listed")
        self.assertEqual(sorted(unbound & called), [], "listed as unbound but bound")
        self.assertEqual(sorted((unbound | called) - declared), [], "not in ampx.h")
        for line in UNBOUND.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                self.assertRegex(line, r"^ampx_\w+: \S", "unbound.txt lines are 'name: reason'")


if __name__ == "__main__":
    unittest.main()
