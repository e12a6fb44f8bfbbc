"""rms_norm's default eps (eps=None) is torch's for every input dtype:
float32's machine epsilon, 2^-23, also for F16 and BF16 inputs, which torch
normalises in fp32 (torch.nn.functional.rms_norm with eps=None).

Rows of small values (mean of squares ~2e-7, of the order of 2^-23) make the
eps matter: the output is checked against a float64 reference computed here
from the rounded inputs, and against torch where torch is installed.
"""
import unittest

import numpy as np

import ampx

TORCH_EPS = 2.0 ** -23  # torch.finfo(torch.float32).eps
# The output's rounding, plus fp32 arithmetic: 2 units in the last place of
# the output dtype, relative.
TOLERANCE = {"f32": 2.0 ** -21, "f16": 2.0 ** -10, "bf16": 2.0 ** -7}

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the reference below needs no torch
    torch = None


class RmsNormDefaultEpsTest(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(43)
        # |x| in [2e-4, 6e-4]: normal in f16 and bf16; mean(x^2) ~ 1.7e-7.
        magnitude = rng.uniform(2e-4, 6e-4, (3, 16))
        self.x = magnitude * rng.choice([-1.0, 1.0], magnitude.shape)
        self.w = rng.uniform(0.5, 1.5, 16)

    @staticmethod
    def reference(x, w, eps):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    def test_default_eps_is_float32_epsilon_for_every_dtype(self):
        for dtype in ("f32", "f16", "bf16"):
            with self.subTest(dtype=dtype):
                x = ampx.tensor(self.x, dtype)
                w = ampx.tensor(self.w, dtype)
                # The reference starts from the inputs as ampx holds them.
                x64 = x.to("f32").numpy().astype(np.float64)
                w64 = w.to("f32").numpy().astype(np.float64)
                want = self.reference(x64, w64, TORCH_EPS)
                got = ampx.rms_norm(x, w)
                self.assertEqual(str(got.dtype), dtype)
                have = got.to("f32").numpy().astype(np.float64)
                np.testing.assert_allclose(have, want, rtol=TOLERANCE[dtype], atol=0)
                # The eps matters on these rows: the dtype's own epsilon (the
                # former default) would give a different result.
                dtype_eps = {"f32": 2.0 ** -23, "f16": 2.0 ** -10, "bf16": 2.0 ** -7}[dtype]
                if dtype_eps != TORCH_EPS:
                    other = self.reference(x64, w64, dtype_eps)
                    self.assertGreater(np.max(np.abs(other - want) / np.abs(want)), 0.5)
                # An explicit eps is passed through unchanged.
                explicit = ampx.rms_norm(x, w, 1e-6).to("f32").numpy().astype(np.float64)
                np.testing.assert_allclose(explicit, self.reference(x64, w64, 1e-6),
                                           rtol=TOLERANCE[dtype], atol=0)

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_default_eps_agrees_with_torch(self):
        dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
        for dtype, torch_dtype in dtypes.items():
            with self.subTest(dtype=dtype):
                x = ampx.tensor(self.x, dtype)
                tx = torch.tensor(self.x, dtype=torch_dtype)
                want = F.rms_norm(tx, (16,)).float().numpy().astype(np.float64)
                have = ampx.rms_norm(x).to("f32").numpy().astype(np.float64)
                np.testing.assert_allclose(have, want, rtol=2 * TOLERANCE[dtype], atol=0)


if __name__ == "__main__":
    unittest.main()
