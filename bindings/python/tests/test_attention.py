"""ampx.scaled_dot_product_attention against torch.nn.functional.scaled_dot_product_attention.

Both sides get the same fp32 inputs; torch's CPU math is the reference for
the output and, through backward of sum(out * r), for the gradients of q,
k and v. Causal, additive masks of several broadcast shapes (with -inf
entries), boolean masks (as int64), grouped-query heads (torch's
enable_gqa=True), an explicit scale, Tq != Tk, and layouts with no, one or
two leading extents are covered. Both compute in fp32 with different summation
orders, so values agree to ~1e-6; the bound is 1e-5 absolute on O(1)
values. Dropout cannot be compared with torch's (different generators):
ampx's must equal ampx.dropout's mask, which the C tests check.
"""
import unittest

import numpy as np
import torch
import torch.nn.functional as F

import ampx

TOLERANCE = 1e-5


def run_ampx(q, k, v, r, mask=None, **kwargs):
    tq, tk, tv = (ampx.tensor(x, requires_grad=True) for x in (q, k, v))
    tm = ampx.tensor(mask) if mask is not None else None
    out = ampx.scaled_dot_product_attention(tq, tk, tv, tm, **kwargs)
    loss = ampx.sum(ampx.mul(out, ampx.tensor(r)))
    ampx.backward(loss)
    return [out.numpy()] + [t.grad.numpy() for t in (tq, tk, tv)]


def run_torch(q, k, v, r, mask=None, **kwargs):
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    tm = torch.tensor(mask) if mask is not None else None
    gqa = q.ndim > 2 and q.shape[-3] != k.shape[-3]
    out = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, enable_gqa=gqa, **kwargs)
    (out * torch.tensor(r)).sum().backward()
    return [out.detach().numpy()] + [t.grad.numpy() for t in (tq, tk, tv)]


class AttentionTest(unittest.TestCase):
    def check(self, b, h, hkv, tq, tk, d, dv, mask_shape=None, seed=0, **kwargs):
        rng = np.random.default_rng(seed)
        q = rng.uniform(-1, 1, (b, h, tq, d)).astype(np.float32)
        k = rng.uniform(-1, 1, (b, hkv, tk, d)).astype(np.float32)
        v = rng.uniform(-1, 1, (b, hkv, tk, dv)).astype(np.float32)
        r = rng.uniform(-1, 1, (b, h, tq, dv)).astype(np.float32)
        mask = None
        if mask_shape is not None:
            mask = rng.uniform(-2, 2, mask_shape).astype(np.float32)
            mask[rng.uniform(0, 1, mask_shape) < 0.2] = -np.inf
            mask[..., 0] = 0.0  # every row keeps a key: torch gives NaN otherwise
        have = run_ampx(q, k, v, r, mask, **kwargs)
        want = run_torch(q, k, v, r, mask, **kwargs)
        for name, a, w in zip(("out", "dq", "dk", "dv"), have, want):
            self.assertEqual(a.shape, w.shape, name)
            np.testing.assert_allclose(a, w, rtol=0, atol=TOLERANCE, err_msg=name)

    def test_plain_and_causal(self):
        self.check(2, 3, 3, 17, 17, 32, 32)
        self.check(1, 2, 2, 33, 33, 64, 64, is_causal=True, seed=1)

    def test_grouped_query_heads(self):
        self.check(2, 4, 2, 19, 19, 16, 16, is_causal=True, seed=2)
        self.check(1, 6, 1, 9, 23, 32, 24, seed=3)

    def test_masks_and_scale(self):
        self.check(2, 2, 2, 13, 21, 16, 16, mask_shape=(13, 21), seed=4)
        self.check(2, 2, 2, 7, 11, 16, 16, mask_shape=(2, 1, 1, 11), seed=5)
        self.check(1, 3, 3, 10, 10, 8, 8, mask_shape=(1, 3, 10, 10), scale=0.7, seed=6)

    def test_other_layouts_and_boolean_masks(self):
        rng = np.random.default_rng(11)

        def data(*shape):
            return rng.uniform(-1, 1, shape).astype(np.float32)

        def boolean(*shape):
            mask = rng.uniform(0, 1, shape) < 0.7
            mask[..., 0] = True
            return mask

        cases = [  # q, k, v, mask
            (data(3, 9, 16), data(3, 11, 16), data(3, 11, 8), None),
            (data(9, 16), data(5, 16), data(5, 16), boolean(9, 5)),
            (data(2, 3, 2, 7, 8), data(2, 3, 2, 6, 8), data(2, 3, 2, 6, 8), boolean(3, 1, 7, 6)),
            (data(2, 3, 7, 8), data(2, 3, 6, 8), data(2, 3, 6, 8), boolean(2, 1, 1, 6)),
        ]
        for q, k, v, mask in cases:
            with self.subTest(q=q.shape, mask=None if mask is None else mask.shape):
                r = rng.uniform(-1, 1, q.shape[:-1] + v.shape[-1:]).astype(np.float32)
                # ampx has no bool dtype: the mask crosses as int64.
                have = run_ampx(q, k, v, r, None if mask is None else mask.astype(np.int64))
                want = run_torch(q, k, v, r, mask)
                for name, a, w in zip(("out", "dq", "dk", "dv"), have, want):
                    self.assertEqual(a.shape, w.shape, name)
                    np.testing.assert_allclose(a, w, rtol=0, atol=TOLERANCE, err_msg=name)

    def test_lower_precision_dtype_and_bad_input(self):
        rng = np.random.default_rng(9)
        x = rng.uniform(-1, 1, (1, 2, 8, 16)).astype(np.float32)
        half = ampx.tensor(x).to(ampx.float16)
        out = ampx.scaled_dot_product_attention(half, half, half, is_causal=True)
        self.assertEqual(out.dtype, ampx.float16)
        want = F.scaled_dot_product_attention(*(torch.tensor(x).half(),) * 3, is_causal=True)
        np.testing.assert_allclose(out.numpy().astype(np.float32), want.float().numpy(),
                                   atol=2e-3)
        with self.assertRaises(ampx.ShapeError):
            ampx.scaled_dot_product_attention(half, ampx.tensor(x[:, :, :, :8]).to(ampx.float16),
                                              half)
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.scaled_dot_product_attention(half, half, half, dropout_p=1.0)
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.scaled_dot_product_attention(half, half, half, scale=0.0)


if __name__ == "__main__":
    unittest.main()
