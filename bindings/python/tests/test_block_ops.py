"""The ops of a Transformer block against torch: broadcasting add/sub/mul/div,
sum/mean/amax over dimensions with keepdim, rms_norm, permute, softmax /
log_softmax over any dimension, masked_fill, pow, the losses' other shapes
and reduction="none", rotary embeddings (against
Hugging Face LLaMA's rotate_half formula written in torch), split and
chunk, values and gradients (backward of
sum(y * r) on both sides). Both compute in fp32 (ampx's reductions in
double): agreement to 1e-5 absolute on values of order 1.
"""
import functools
import unittest

import numpy as np
import torch
import torch.nn.functional as F

import ampx
from common import compare_with_torch

TOLERANCE = 1e-5


compare = functools.partial(compare_with_torch, tolerance=TOLERANCE)


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

    def test_masked_fill_pow_rotary(self):
        x = self.data(2, 3, 4, 4)
        causal = np.triu(np.ones((4, 4), np.float32), 1)
        compare(self, lambda a: ampx.masked_fill(a, ampx.tensor(causal), -1e4),
                lambda a: a.masked_fill(torch.tensor(causal).bool(), -1e4), x)
        for p in (2.0, 0.5, -1.5, 3.0):
            compare(self, lambda a: ampx.pow(a, p), lambda a: torch.pow(a, p),
                    self.data(5, 7, low=0.2, high=2.0))
        T, D = 6, 8
        inv = 10000.0 ** (-np.arange(0, D, 2, dtype=np.float64) / D)
        angles = np.outer(np.arange(T), inv)
        cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)

        def rotate_half(t):
            half = t.shape[-1] // 2
            return torch.cat((-t[..., half:], t[..., :half]), dim=-1)

        def torch_rotary(t):
            c = torch.tensor(np.concatenate([cos, cos], -1))
            s = torch.tensor(np.concatenate([sin, sin], -1))
            return t * c + rotate_half(t) * s

        compare(self, lambda a: ampx.rotary_embedding(a, ampx.tensor(cos), ampx.tensor(sin)),
                torch_rotary, self.data(2, 3, T, D))

    def test_split_chunk(self):
        x = self.data(2, 7, 3)
        for sizes in (3, [2, 0, 5], [7]):
            have = ampx.split(ampx.tensor(x), sizes, 1)
            want = torch.split(torch.tensor(x), sizes, 1)
            self.assertEqual(len(have), len(want))
            for h, w in zip(have, want):
                np.testing.assert_array_equal(h.numpy(), w.numpy())
        for chunks in (1, 3, 4, 7, 9):
            have = ampx.chunk(ampx.tensor(x), chunks, 1)
            want = torch.chunk(torch.tensor(x), chunks, 1)
            self.assertEqual([tuple(h.shape) for h in have], [tuple(w.shape) for w in want])
        compare(self, lambda a: ampx.mul(ampx.split(a, [3, 4], 1)[1], ampx.split(a, [3, 4], 1)[1]),
                lambda a: torch.split(a, [3, 4], 1)[1] ** 2, x)

    def compare_cross_entropy(self, logits, labels, weight, eps, reduction):
        compare(self,
                lambda a: ampx.cross_entropy(
                    a, ampx.tensor(labels), reduction,
                    weight=None if weight is None else ampx.tensor(weight), label_smoothing=eps),
                lambda a: F.cross_entropy(
                    a, torch.tensor(labels), weight=None if weight is None else torch.tensor(weight),
                    reduction=reduction, label_smoothing=eps),
                logits)

    def test_cross_entropy_weights_smoothing(self):
        logits = self.data(9, 6, low=-3, high=3)
        labels = np.array([0, 5, 4, -100, 2, 1, 3, 3, 0], np.int64)
        weight = self.data(6, low=0.2, high=2.0)
        for w in (None, weight):
            for eps in (0.0, 0.1, 1.0):
                for red in ("mean", "sum"):
                    with self.subTest(weighted=w is not None, eps=eps, reduction=red):
                        self.compare_cross_entropy(logits, labels, w, eps, red)

    def test_losses_per_position_and_unreduced(self):
        # torch's K-dimensional cross-entropy (a loss per pixel), the
        # unbatched [C] form, and reduction="none" of the three losses.
        for shape in ((2, 5, 3, 4), (5,), (4, 5)):
            logits = self.data(*shape, low=-3, high=3)
            label_shape = shape[:1] + shape[2:] if len(shape) > 1 else ()
            labels = self.rng.integers(0, 5, label_shape).astype(np.int64)
            if labels.size > 2:
                labels.flat[1] = -100
            weight = self.data(5, low=0.2, high=2.0)
            for red in ("mean", "sum", "none"):
                for w, eps in ((None, 0.0), (weight, 0.2)):
                    with self.subTest(shape=shape, reduction=red, weighted=w is not None):
                        self.compare_cross_entropy(logits, labels, w, eps, red)
        x, t = self.data(3, 4, 2, low=-3, high=3), self.data(3, 4, 2)
        compare(self, lambda a, b: ampx.mse_loss(a, b, "none"),
                lambda a, b: F.mse_loss(a, b, reduction="none"), x, t)
        compare(self, lambda a, b: ampx.bce_with_logits(a, b, "none"),
                lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction="none"), x, t)

    def test_errors(self):
        with self.assertRaises(ampx.ShapeError):
            ampx.add(ampx.tensor(self.data(2, 3)), ampx.tensor(self.data(4, 1, 2)))
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.permute(ampx.tensor(self.data(2, 3)), (0, 0))


if __name__ == "__main__":
    unittest.main()
