"""Tensor.to and Tensor.clone are recorded (issue 47), compared with torch
directly: the same leaves, the same loss, torch.autograd.grad's values.

For x (f32, requires grad) and y = x.to(dtype) or x.clone(),
loss = (x * x).sum() + (y * y).sum(); g = d loss / dx with create_graph and
h = d (g * g).sum() / dx. Every step is exact or one rounding of the format,
in the same order in both libraries, so ampx must agree with torch to fp32's
rounding of the sums (rtol 2e-6). With the cast dropped, g would be 2x where
torch has 4x.
"""
import unittest

import numpy as np
import torch

import ampx

_TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def _torch_reference(values, dtype):
    x = torch.tensor(values, dtype=torch.float32, requires_grad=True)
    y = x.clone() if dtype is None else x.to(_TORCH_DTYPES[dtype])
    loss = (x * x).sum() + (y * y).sum()
    (g,) = torch.autograd.grad(loss, x, create_graph=True)
    (h,) = torch.autograd.grad((g * g).sum(), x)
    x2 = torch.tensor(values, dtype=torch.float32, requires_grad=True)
    y2 = x2.clone() if dtype is None else x2.to(_TORCH_DTYPES[dtype])
    ((x2 * x2).sum() + (y2 * y2).sum()).backward()
    return x2.grad.numpy(), g.detach().numpy(), h.numpy()


class CastTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context()
        rng = np.random.default_rng(47)
        self.values = np.concatenate(
            [np.array([0.3, -1.7, 2.25], dtype=np.float32),
             rng.uniform(-3, 3, 13).astype(np.float32)])

    def leaf(self):
        return ampx.tensor(self.values, context=self.ctx, requires_grad=True)

    def cast(self, x, dtype):
        return x.clone() if dtype is None else x.to(dtype)

    def test_gradients_through_to_and_clone_match_torch(self):
        for dtype in ("bf16", "f16", "f32", None):
            with self.subTest(dtype=dtype or "clone"):
                want_grad, want_g, want_h = _torch_reference(self.values, dtype)
                x = self.leaf()
                y = self.cast(x, dtype)
                self.assertTrue(y.requires_grad)
                ((x * x).sum() + (y * y).sum()).backward()
                self.assertEqual(x.grad.dtype, ampx.DType.F32)
                np.testing.assert_allclose(x.grad.numpy(), want_grad, rtol=2e-6)

                x = self.leaf()
                y = self.cast(x, dtype)
                (g,) = ampx.grad((x * x).sum() + (y * y).sum(), x, create_graph=True)
                self.assertTrue(g.requires_grad)
                np.testing.assert_allclose(g.numpy(), want_g, rtol=2e-6)
                (h,) = ampx.grad((g * g).sum(), x)
                np.testing.assert_allclose(h.numpy(), want_h, rtol=2e-6)

    def test_the_dropped_term_is_back(self):
        # The numbers: torch's x.grad is 4x for .to("f32") of an f32 x.
        x = ampx.tensor([0.3, -1.7, 2.25], context=self.ctx, requires_grad=True)
        y = x.to("f32")
        ((x * x).sum() + (y * y).sum()).backward()
        np.testing.assert_allclose(x.grad.numpy(), [1.2, -6.8, 9.0], rtol=1e-6)

    def test_an_f16_leaf_gets_an_f16_gradient(self):
        x = ampx.tensor(self.values, context=self.ctx, dtype="f16", requires_grad=True)
        t = torch.tensor(self.values, dtype=torch.float16, requires_grad=True)
        y = x.to("f32")
        (y * y * y).sum().backward()
        u = t.float()
        (u * u * u).sum().backward()
        self.assertEqual(x.grad.dtype, ampx.DType.F16)
        np.testing.assert_allclose(x.grad.numpy().astype(np.float32),
                                   t.grad.float().numpy(), rtol=1e-3)

    def test_what_is_not_recorded(self):
        x = self.leaf()
        with self.ctx.no_grad():
            self.assertFalse(x.to("bf16").requires_grad)
        plain = ampx.tensor(self.values, context=self.ctx)
        self.assertFalse(plain.to("bf16").requires_grad)
        self.assertFalse(plain.clone().requires_grad)

    def test_clone_is_new_memory(self):
        x = self.leaf()
        c = x.clone()
        c.fill_(7.0)
        np.testing.assert_array_equal(x.numpy(), self.values)

    def test_to_inside_a_scope_outlives_it(self):
        x = self.leaf()
        with self.ctx.scope():
            y = x.to("bf16")
        np.testing.assert_array_equal(y.to("f32").numpy(),
                                      torch.tensor(self.values).bfloat16().float().numpy())


if __name__ == "__main__":
    unittest.main()
