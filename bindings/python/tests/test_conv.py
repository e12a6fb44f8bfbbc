"""Convolution and pooling against torch: conv2d over strides, paddings,
dilations, groups (depthwise included), odd sizes, with and without bias;
max_pool2d and avg_pool2d with padding, dilation, ceil_mode,
count_include_pad and divisor_override; global average pooling; batch norm
on [N, C, H, W]. Values and gradients (backward of sum(y * r) on both
sides), in fp32: agreement to 1e-4 absolute on values of order 1 (sums of
up to a few hundred products); bad input raises the documented errors.
"""
import functools
import unittest

import numpy as np
import torch
import torch.nn.functional as F

import ampx
from common import compare_with_torch

TOLERANCE = 1e-4


compare = functools.partial(compare_with_torch, tolerance=TOLERANCE)


class ConvTest(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(7)

    def data(self, *shape):
        return self.rng.uniform(-1, 1, shape).astype(np.float32)

    def test_conv2d(self):
        # (N, C, H, W, O, kh, kw, stride, padding, dilation, groups, bias)
        cases = [(2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, True),
                 (1, 4, 9, 8, 6, 3, 2, (2, 1), (1, 0), 1, 2, False),
                 (2, 6, 8, 7, 6, 3, 3, 1, 2, 2, 6, True),        # depthwise, dilated
                 (3, 2, 5, 5, 5, 1, 1, 1, 0, 1, 1, True),        # 1x1
                 (1, 3, 11, 10, 2, 5, 4, (3, 2), (2, 1), (1, 2), 1, True),
                 (2, 4, 4, 4, 8, 4, 4, 1, 0, 1, 4, False)]       # kernel = image
        for n, c, h, w, o, kh, kw, stride, padding, dilation, groups, bias in cases:
            with self.subTest(x=(n, c, h, w), o=o, k=(kh, kw), stride=stride,
                              padding=padding, dilation=dilation, groups=groups):
                compare(self,
                        lambda x, wt, b: ampx.conv2d(x, wt, b, stride, padding, dilation, groups),
                        lambda x, wt, b: F.conv2d(x, wt, b, stride, padding, dilation, groups),
                        self.data(n, c, h, w), self.data(o, c // groups, kh, kw),
                        self.data(o) if bias else None)

    def test_conv2d_unbatched(self):
        compare(self, lambda x, wt: ampx.conv2d(x, wt, padding=1),
                lambda x, wt: F.conv2d(x, wt, padding=1), self.data(3, 5, 6), self.data(2, 3, 3, 3))

    def test_max_pool2d(self):
        for kernel, stride, padding, dilation, ceil in [(2, None, 0, 1, False), (3, 2, 1, 1, False),
                                                        (3, 2, 1, 1, True), ((3, 2), (2, 1), (1, 1), 1, True),
                                                        (3, 1, 1, 2, False), (2, 3, 0, 1, True)]:
            with self.subTest(kernel=kernel, stride=stride, padding=padding, dilation=dilation,
                              ceil=ceil):
                compare(self, lambda x: ampx.max_pool2d(x, kernel, stride, padding, dilation, ceil),
                        lambda x: F.max_pool2d(x, kernel, stride, padding, dilation, ceil),
                        self.data(2, 3, 9, 8))

    def test_max_pool2d_ties_and_nan(self):
        x = np.zeros((1, 1, 4, 4), np.float32)
        x[0, 0, 1, 1] = np.nan
        a = ampx.tensor(x, requires_grad=True)
        t = torch.tensor(x, requires_grad=True)
        have, want = ampx.max_pool2d(a, 2), F.max_pool2d(t, 2)
        np.testing.assert_array_equal(have.numpy(), want.detach().numpy())
        want.sum().backward()
        ampx.backward(ampx.sum(have))
        np.testing.assert_array_equal(a.grad.numpy(), t.grad.numpy())

    def test_avg_pool2d(self):
        for kernel, stride, padding, ceil, include, divisor in [
                (2, None, 0, False, True, None), (3, 2, 1, False, True, None),
                (3, 2, 1, True, False, None), ((3, 2), (2, 1), (1, 1), True, True, None),
                (3, 2, 1, False, True, 5), (2, 3, 0, True, False, None)]:
            with self.subTest(kernel=kernel, stride=stride, padding=padding, ceil=ceil,
                              include=include, divisor=divisor):
                compare(self,
                        lambda x: ampx.avg_pool2d(x, kernel, stride, padding, ceil, include, divisor),
                        lambda x: F.avg_pool2d(x, kernel, stride, padding, ceil, include, divisor),
                        self.data(2, 3, 9, 8))

    def test_global_avg_pool2d_and_batch_norm_4d(self):
        compare(self, ampx.global_avg_pool2d, lambda x: F.adaptive_avg_pool2d(x, 1),
                self.data(2, 3, 5, 4))
        compare(self, lambda x, w, b: ampx.batch_norm(x, w, b, training=True),
                lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
                self.data(3, 4, 5, 6), self.data(4), self.data(4))

    def test_bad_input(self):
        x = ampx.tensor(self.data(1, 4, 5, 5))
        with self.assertRaisesRegex(ampx.ShapeError, r"\[1, 4, 5, 5\].*\[2, 3, 6, 6\]"):
            ampx.conv2d(x, ampx.tensor(self.data(2, 3, 6, 6)))
        with self.assertRaisesRegex(ampx.ShapeError, "groups 3"):
            ampx.conv2d(x, ampx.tensor(self.data(3, 1, 3, 3)), groups=3)
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.conv2d(x, ampx.tensor(self.data(2, 4, 3, 3)), stride=0)
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.conv2d(x, ampx.tensor(self.data(2, 4, 3, 3)), padding=-1)
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.max_pool2d(x, 2, padding=2)


if __name__ == "__main__":
    unittest.main()
