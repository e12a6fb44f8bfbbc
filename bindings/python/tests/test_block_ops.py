"""The ops of a Transformer block against torch: broadcasting add/sub/mul/div,
sum/mean/amax over dimensions with keepdim, rms_norm, permute and softmax /
log_softmax over any dimension, values and gradients (backward of
sum(y * r) on both sides). Both compute in fp32 (ampx's reductions in
double): agreement to 1e-5 absolute on values of order 1.
"""
import unittest

import numpy as np
import torch
import torch.nn.functional as F

import ampx

TOLERANCE = 1e-5


def compare(test, ampx_fn, torch_fn, *arrays):
    rng = np.random.default_rng(len(arrays))
    a_in = [ampx.tensor(x, requires_grad=True) for x in arrays]
    t_in = [torch.tensor(x, requires_grad=True) for x in arrays]
    want = torch_fn(*t_in)
    r = rng.uniform(-1, 1, tuple(want.shape)).astype(np.float32)
    (want * torch.tensor(r)).sum().backward()
    have = ampx_fn(*a_in)
    test.assertEqual(tuple(have.shape), tuple(want.shape))
    ampx.backward(ampx.sum(ampx.mul(have, ampx.tensor(r))))
    np.testing.assert_allclose(have.numpy(), want.detach().numpy(), atol=TOLERANCE, rtol=0)
    for a, t in zip(a_in, t_in):
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), atol=TOLERANCE, rtol=0)


class BlockOpsTest(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(3)

    def data(self, *shape, low=-1.0, high=1.0):
        return self.rng.uniform(low, high, shape).astype(np.float32)

    def test_broadcasting(self):
        pairs = [((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((1,), (2, 3)), ((), (2, 3)),
                 ((5, 1, 1, 3), (1, 4, 2, 1)), ((2, 3), (2, 3))]
        for sa, sb in pairs:
            for name in ("add", "sub", "mul", "div"):
                with self.subTest(op=name, a=sa, b=sb):
                    compare(self, getattr(ampx, name), getattr(torch, name),
                            self.data(*sa), self.data(*sb, low=0.5, high=2.0))

    def test_reductions(self):
        x = self.data(3, 4, 5)
        for dim in (0, -1, (0, 2), (1,)):
            for keepdim in (False, True):
                with self.subTest(dim=dim, keepdim=keepdim):
                    compare(self, lambda t: ampx.sum(t, dim, keepdim),
                            lambda t: torch.sum(t, dim, keepdim), x)
                    compare(self, lambda t: ampx.mean(t, dim, keepdim),
                            lambda t: torch.mean(t, dim, keepdim), x)
                    compare(self, lambda t: ampx.amax(t, dim, keepdim),
                            lambda t: torch.amax(t, dim, keepdim), np.floor(3 * x))

    def test_rms_norm_permute_softmax(self):
        x, w = self.data(2, 3, 16), self.data(16, low=0.5, high=1.5)
        compare(self, lambda a, b: ampx.rms_norm(a, b, 1e-6),
                lambda a, b: F.rms_norm(a, (16,), b, 1e-6), x, w)
        compare(self, lambda a: ampx.rms_norm(a), lambda a: F.rms_norm(a, (16,)), x)
        compare(self, lambda a: ampx.permute(a, (2, 0, 1)),
                lambda a: a.permute(2, 0, 1).contiguous(), x)
        for dim in (0, 1, -1):
            compare(self, lambda a: ampx.softmax(a, dim), lambda a: torch.softmax(a, dim), x)
            compare(self, lambda a: ampx.log_softmax(a, dim),
                    lambda a: torch.log_softmax(a, dim), x)

    def test_errors(self):
        with self.assertRaises(ampx.ShapeError):
            ampx.add(ampx.tensor(self.data(2, 3)), ampx.tensor(self.data(4, 1, 2)))
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.permute(ampx.tensor(self.data(2, 3)), (0, 0))


if __name__ == "__main__":
    unittest.main()
