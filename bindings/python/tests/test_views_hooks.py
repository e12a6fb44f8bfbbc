"""Tensor.view (ampx_tensor_view) and grad-ready hooks (ampx_set_grad_ready_hook,
ampx_grad_ready) through the Python package. Needs NumPy only."""
import gc
import unittest

import numpy as np

import ampx
from ampx import autograd as _autograd


class ViewTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context()

    def test_views_share_memory_and_outlive_their_base(self):
        base = ampx.tensor(np.arange(12, dtype=np.float32), context=self.ctx)
        view = base.view(4 * 5, (2, 3))
        self.assertEqual((view.shape, view.dtype), ((2, 3), ampx.F32))
        self.assertEqual(view.data_ptr, base.data_ptr + 20)
        np.testing.assert_array_equal(view.numpy(), [[5, 6, 7], [8, 9, 10]])
        view.fill_(-1.0)
        self.assertEqual(base.numpy()[4:12].tolist(), [4, -1, -1, -1, -1, -1, -1, 11])
        bits = view.view(4, (1,), "i32")  # a view of a view may reinterpret
        self.assertEqual(bits.numpy()[0], np.float32(-1).view(np.int32))
        del base
        gc.collect()
        np.testing.assert_array_equal(view.numpy(), -np.ones((2, 3), np.float32))

    def test_dlpack_of_a_view_reaches_its_first_element(self):
        base = ampx.tensor(np.arange(10, dtype=np.float16), context=self.ctx)
        view = base.view(2 * 3, (2, 3))
        array = np.from_dlpack(view)  # NumPy adds DLPack's byte_offset
        np.testing.assert_array_equal(array, np.arange(3, 9, dtype=np.float16).reshape(2, 3))
        del view, base
        gc.collect()
        np.testing.assert_array_equal(array.ravel(), np.arange(3, 9, dtype=np.float16))

    def test_views_as_parameters_and_gradients_step_as_separate_tensors(self):
        sizes = [3, 5, 1, 7]
        values = [np.linspace(-1, 1, n, dtype=np.float32) + i for i, n in enumerate(sizes)]
        grads = [np.linspace(2, -2, n, dtype=np.float32) * (i + 1) for i, n in enumerate(sizes)]
        total = sum(sizes) + len(sizes) + 1
        flat_p = ampx.tensor(np.full(total, 9.0, np.float32), context=self.ctx)
        flat_g = ampx.tensor(np.full(total, 8.0, np.float32), context=self.ctx)
        views, separate, at = [], [], 1
        for n, v, g in zip(sizes, values, grads):
            p = flat_p.view(4 * at, (n,))
            p.copy_(v)
            p.requires_grad = True
            p.grad = flat_g.view(4 * at, (n,)).copy_(g)
            views.append(p)
            q = ampx.tensor(v, context=self.ctx, requires_grad=True)
            q.grad = ampx.tensor(g, context=self.ctx)
            separate.append(q)
            at += n + 1
        for params in (views, separate):
            opt = ampx.AdamW(params, lr=0.1)
            for _ in range(3):
                opt.step()
        for p, q in zip(views, separate):
            self.assertEqual(p.numpy().tobytes(), q.numpy().tobytes())
        gaps = np.ones(total, bool)
        at = 1
        for n in sizes:
            gaps[at:at + n] = False
            at += n + 1
        self.assertTrue((flat_p.numpy()[gaps] == 9.0).all())
        self.assertTrue((flat_g.numpy()[gaps] == 8.0).all())

    def test_bad_views(self):
        base = ampx.zeros((10,), "f16", context=self.ctx)  # 20 bytes
        with self.assertRaises(ampx.ShapeError):
            base.view(2, (10,))
        with self.assertRaises(ampx.InvalidArgumentError):
            base.view(1, (2,))
        with self.assertRaises(ampx.InvalidArgumentError):
            base.view(0, (1,), 99)  # not a DType: refused before the call
        with self.assertRaises(ampx.ShapeError):
            base.view(2 ** 64 - 2, (1,))


class GradHookTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context()
        rng = np.random.default_rng(0)
        self.layers = [(ampx.tensor(rng.standard_normal((4, 4), np.float32), context=self.ctx,
                                    requires_grad=True),
                        ampx.tensor(rng.standard_normal(4, np.float32), context=self.ctx,
                                    requires_grad=True)) for _ in range(3)]
        self.x = ampx.tensor(rng.standard_normal((2, 4), np.float32), context=self.ctx)

    def loss(self):
        h = self.x
        for w, b in self.layers:
            h = ampx.linear(h, w, b, "relu")
        return (h * h).mean()

    def test_each_parameter_once_in_backward_order_with_its_final_gradient(self):
        seen = []
        ampx.set_grad_ready_hook(lambda p: seen.append((p, p.grad.numpy().copy())),
                                 context=self.ctx)
        with self.ctx.scope():
            self.loss().backward()
        expected = [t for w, b in reversed(self.layers) for t in (w, b)]
        self.assertEqual([p.handle for p, _ in seen], [t.handle for t in expected])
        for p, copy in seen:
            self.assertEqual(copy.tobytes(), p.grad.numpy().tobytes())
        # Engines with their own backward report by hand.
        seen.clear()
        ampx.grad_ready(self.layers[0][0])
        self.assertEqual([p.handle for p, _ in seen], [self.layers[0][0].handle])

    def test_an_exception_in_the_hook_is_raised_by_backward(self):
        class Boom(Exception):
            pass

        def hook(_param):
            raise Boom("from the hook")

        ampx.set_grad_ready_hook(hook, context=self.ctx)
        with self.ctx.scope():
            with self.assertRaises(Boom):
                self.loss().backward()
        first = self.layers[-1][0]  # the one reported (and failed) first
        self.assertIsNotNone(first.grad)
        with self.assertRaises(Boom):
            ampx.grad_ready(first)
        ampx.set_grad_ready_hook(None, context=self.ctx)
        with self.ctx.scope():
            self.loss().backward()  # the next step works

    def test_the_hook_is_released_once(self):
        before = len(_autograd._live_hooks)
        ampx.set_grad_ready_hook(lambda p: None, context=self.ctx)
        ampx.set_grad_ready_hook(lambda p: None, context=self.ctx)
        self.assertEqual(len(_autograd._live_hooks), before + 1)  # the first was released
        ampx.set_grad_ready_hook(None, context=self.ctx)
        self.assertEqual(len(_autograd._live_hooks), before)
        ampx.set_grad_ready_hook(lambda p: None, context=self.ctx)
        self.ctx.close()
        self.assertEqual(len(_autograd._live_hooks), before)
        with self.assertRaises(ampx.StaleHandleError):
            ampx.set_grad_ready_hook(lambda p: None, context=self.ctx)
        self.assertEqual(len(_autograd._live_hooks), before)
        with self.assertRaises(ampx.ArgumentTypeError):
            ampx.set_grad_ready_hook(42, context=self.ctx)


if __name__ == "__main__":
    unittest.main()
