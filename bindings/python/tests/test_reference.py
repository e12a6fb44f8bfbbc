"""(1) The reference run of bindings/README.md, bit for bit against tiny_train."""
import os
import subprocess
import unittest

from reference_run import reference_run


class ReferenceRunTest(unittest.TestCase):
    def test_matches_tiny_train_line_for_line(self):
        executable = os.environ.get("AMPX_TINY_TRAIN")
        if not executable:
            self.skipTest("AMPX_TINY_TRAIN (the tiny_train executable) is not set")
        expected = subprocess.run([executable], check=True, capture_output=True,
                                  text=True).stdout.splitlines()
        actual = reference_run()
        self.assertEqual(len(actual), 13)
        self.assertEqual(len(actual), len(expected))
        for number, (mine, theirs) in enumerate(zip(actual, expected), start=1):
            self.assertEqual(mine, theirs, f"line {number} differs")

    def test_recipe_shape(self):
        # Independent of the C program: the scale trajectory the README states.
        lines = reference_run()
        self.assertTrue(lines[0].startswith("step 0 loss 3f0f65f0 scale 1024"))
        self.assertTrue(lines[5].endswith("scale 1024"))  # the injected inf: backoff
        self.assertEqual(lines[5].split()[3], lines[6].split()[3])  # skipped step: same loss
        self.assertTrue(lines[11].endswith("scale 4096"))


if __name__ == "__main__":
    unittest.main()
