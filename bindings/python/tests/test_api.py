"""The rest of the surface: ops against NumPy/torch, optimizers, scaler, autocast."""
import math
import os
import tempfile
import unittest

import numpy as np
import torch
import torch.nn.functional as F

import ampx


def _t(ctx, values, **kwargs):
    return ampx.tensor(np.asarray(values, np.float32), context=ctx, **kwargs)


class LibraryTest(unittest.TestCase):
    def test_versions_and_devices(self):
        self.assertEqual(ampx.library_version(), "0.1.0")
        self.assertEqual(ampx.library_version_number(), 100)
        self.assertIsInstance(ampx.has_cuda(), bool)
        self.assertGreaterEqual(ampx.cuda_device_count(), 0)
        self.assertEqual(ampx.BF16.itemsize, 2)
        self.assertEqual(str(ampx.BF16), "bf16")

    def test_context(self):
        with ampx.Context(num_threads=1, seed=3) as ctx:
            self.assertEqual(ctx.device, (ampx.Device.CPU, 0))
            ctx.synchronize()
            before = ctx.memory_stats()
            t = ampx.zeros((256,), context=ctx)
            stats = ctx.memory_stats()
            self.assertGreaterEqual(stats.current_bytes, before.current_bytes + 1024)
            del t
            ctx.reset_peak_memory()
            self.assertEqual(ctx.memory_stats().peak_bytes, ctx.memory_stats().current_bytes)
            self.assertTrue(ctx.grad_enabled)
            with ampx.no_grad(ctx):
                self.assertFalse(ctx.grad_enabled)
            self.assertTrue(ctx.set_grad_enabled(True))
            # TF32: off by default; the CPU computes IEEE fp32 either way.
            self.assertFalse(ctx.allow_tf32)
            a = ampx.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), context=ctx)
            exact = ampx.matmul(a, ampx.transpose(a, 0, 1)).numpy()
            ctx.allow_tf32 = True
            self.assertTrue(ctx.allow_tf32)
            np.testing.assert_array_equal(ampx.matmul(a, ampx.transpose(a, 0, 1)).numpy(), exact)
            self.assertTrue(ctx.set_tf32(False))
        self.assertTrue(ctx.closed)


class TensorTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context()

    def test_queries_and_setters(self):
        t = ampx.empty((2, 3), "f16", context=self.ctx, name="t")
        self.assertEqual((t.shape, t.ndim, t.numel(), t.nbytes, t.dtype), ((2, 3), 2, 6, 12,
                                                                           ampx.F16))
        self.assertEqual(t.name, "t")
        t.name = None
        self.assertEqual(t.name, "")
        self.assertIn("shape=(2, 3)", repr(t))
        self.assertFalse(t.requires_grad)
        t.fill_(1.5)
        self.assertEqual(t.tolist(), [[1.5] * 3] * 2)
        other = ampx.zeros((3, 2), context=self.ctx).copy_(t)  # converts, row-major
        np.testing.assert_array_equal(other.numpy(), np.full((3, 2), 1.5))
        self.assertEqual(t.clone().data_ptr != t.data_ptr, True)
        self.assertIsNone(t.grad)
        t.grad = ampx.zeros((6,), context=self.ctx)
        self.assertEqual(t.grad.shape, (6,))
        t.grad = None
        self.assertIsNone(t.grad)


class OpsTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context()
        rng = np.random.default_rng(0)
        self.a = rng.standard_normal((4, 6)).astype(np.float32)
        self.b = rng.standard_normal((4, 6)).astype(np.float32)
        self.w = rng.standard_normal((3, 6)).astype(np.float32)

    def close(self, tensor, expected, tol=1e-5):
        np.testing.assert_allclose(tensor.numpy(), np.asarray(expected), rtol=tol, atol=tol)

    def test_elementwise_and_reductions(self):
        a, b = _t(self.ctx, self.a), _t(self.ctx, self.b)
        ta, tb = torch.tensor(self.a), torch.tensor(self.b)
        self.close(a + b, ta + tb)
        self.close(a - b, ta - tb)
        self.close(a * b, ta * tb)
        self.close(a / (b * b + 1.0), ta / (tb * tb + 1.0))
        self.close(ampx.div(a, b * b + 1.0), torch.div(ta, tb * tb + 1.0))
        self.close(a + _t(self.ctx, self.b[0]), ta + tb[0])  # row broadcast
        self.close(ampx.affine(a, 2.0, 0.5), ta * 2 + 0.5)
        for name, reference in (("relu", torch.relu), ("sigmoid", torch.sigmoid),
                                ("tanh", torch.tanh), ("silu", F.silu), ("gelu", F.gelu),
                                ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
                                ("softmax", lambda x: torch.softmax(x, -1)),
                                ("log_softmax", lambda x: torch.log_softmax(x, -1))):
            self.close(getattr(ampx, name)(a), reference(ta), 1e-4)
            self.close(getattr(a, name)(), reference(ta), 1e-4)
        self.close(a.sum(), ta.sum().reshape(()), 1e-4)
        self.close(ampx.mean(a), ta.mean().reshape(()), 1e-5)
        positive = np.abs(np.asarray(self.a, np.float32)) + 0.25
        p, tp = _t(self.ctx, positive), torch.tensor(positive)
        for name in ("exp", "log", "sqrt", "rsqrt"):
            self.close(getattr(ampx, name)(p), getattr(torch, name)(tp), 1e-5)
            self.close(getattr(p, name)(), getattr(torch, name)(tp), 1e-5)

    def test_matrix_and_shape_ops(self):
        a, w = _t(self.ctx, self.a), _t(self.ctx, self.w)
        ta, tw = torch.tensor(self.a), torch.tensor(self.w)
        bias = _t(self.ctx, [0.1, 0.2, 0.3])
        self.close(ampx.linear(a, w, bias, "gelu"), F.gelu(F.linear(ta, tw, torch.tensor(
            [0.1, 0.2, 0.3]))), 1e-4)
        self.close(a @ w.transpose(0, 1), ta @ tw.T, 1e-4)
        self.close(ampx.matmul(a.reshape(2, 2, 6), ampx.reshape(a, (2, 6, 2))),
                   torch.bmm(ta.reshape(2, 2, 6), ta.reshape(2, 6, 2)), 1e-4)
        # torch.matmul's shapes: a batch times a matrix, broadcast batches, vectors
        self.close(a.reshape(2, 1, 2, 6) @ ampx.reshape(a, (2, 6, 2)),
                   ta.reshape(2, 1, 2, 6) @ ta.reshape(2, 6, 2), 1e-4)
        self.close(a.reshape(2, 2, 6) @ a.reshape(6, 4), ta.reshape(2, 2, 6) @ ta.reshape(6, 4),
                   1e-4)
        v0, v1 = _t(self.ctx, self.a[0]), _t(self.ctx, self.a[1])
        self.close(a @ v0, ta @ ta[0], 1e-4)
        self.close(v0 @ v1, ta[0] @ ta[1], 1e-4)
        self.assertEqual((v0 @ v1).shape, ())
        self.assertEqual(a.reshape(-1).shape, (24,))
        self.assertEqual(a.reshape(-1).data_ptr, a.data_ptr)
        self.close(ampx.concat([a, a], dim=-1), torch.cat([ta, ta], -1))

    def test_losses_and_norms(self):
        a = _t(self.ctx, self.a)
        ta = torch.tensor(self.a)
        labels = np.array([0, 5, 2, 1], np.int64)
        self.close(ampx.cross_entropy(a, ampx.tensor(labels, context=self.ctx)),
                   F.cross_entropy(ta, torch.tensor(labels)).reshape(()), 1e-5)
        self.close(ampx.cross_entropy(a, ampx.tensor(labels.astype(np.int32), context=self.ctx),
                                      "sum", ignore_index=5),
                   F.cross_entropy(ta, torch.tensor(labels), reduction="sum",
                                   ignore_index=5).reshape(()), 1e-5)
        target = (self.b > 0).astype(np.float32)
        self.close(ampx.bce_with_logits(a, _t(self.ctx, target)),
                   F.binary_cross_entropy_with_logits(ta, torch.tensor(target)).reshape(()))
        self.close(ampx.mse_loss(a, _t(self.ctx, self.b), "sum"),
                   F.mse_loss(ta, torch.tensor(self.b), reduction="sum").reshape(()), 1e-4)
        gamma, beta = _t(self.ctx, np.linspace(0.5, 1.5, 6)), _t(self.ctx, np.zeros(6))
        self.close(ampx.layer_norm(a, gamma, beta, eps=1e-5),
                   F.layer_norm(ta, (6,), torch.tensor(gamma.numpy()), torch.zeros(6)), 1e-4)
        mean, var = ampx.zeros((6,), context=self.ctx), _t(self.ctx, np.ones(6))
        self.close(ampx.batch_norm(a, running_mean=mean, running_var=var, training=True),
                   F.batch_norm(ta, torch.zeros(6), torch.ones(6), training=True), 1e-4)
        self.close(mean, ta.mean(0) * 0.1, 1e-5)  # running statistics updated in place
        table = _t(self.ctx, self.w)
        self.close(ampx.embedding(table, ampx.tensor([[2, 0]], context=self.ctx)),
                   self.w[[[2, 0]]])

    def test_dropout_is_deterministic_per_seed(self):
        def masks(seed):
            ctx = ampx.Context(seed=seed)
            x = ampx.tensor(np.ones(64, np.float32), context=ctx)
            return ampx.dropout(x, 0.5).numpy()
        self.assertTrue(np.array_equal(masks(1), masks(1)))
        self.assertFalse(np.array_equal(masks(1), masks(2)))
        self.assertEqual(set(np.unique(masks(1))), {0.0, 2.0})
        x = ampx.tensor(np.ones(4, np.float32), context=self.ctx)
        self.close(ampx.dropout(x, 0.5, training=False), np.ones(4))


class AutogradTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context()

    def test_gradients_match_torch_and_checkpoint_matches_plain(self):
        rng = np.random.default_rng(1)
        x_np = rng.standard_normal((5, 4)).astype(np.float32)
        w_np = rng.standard_normal((3, 4)).astype(np.float32)

        def grads(use_checkpoint):
            w = _t(self.ctx, w_np, requires_grad=True)
            x = _t(self.ctx, x_np, requires_grad=True)
            segment = lambda inp: ampx.linear(inp, w).tanh()  # noqa: E731
            y = ampx.checkpoint(segment, x) if use_checkpoint else segment(x)
            y.mean().backward()
            return w.grad.numpy(), x.grad.numpy()

        tw = torch.tensor(w_np, requires_grad=True)
        tx = torch.tensor(x_np, requires_grad=True)
        torch.tanh(F.linear(tx, tw)).mean().backward()
        plain, checkpointed = grads(False), grads(True)
        np.testing.assert_allclose(plain[0], tw.grad.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(plain[1], tx.grad.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(plain[0], checkpointed[0])
        np.testing.assert_array_equal(plain[1], checkpointed[1])

    def test_checkpoint_with_several_outputs_and_no_grad(self):
        x = _t(self.ctx, [1.0, -2.0], requires_grad=True)
        pos, neg = ampx.checkpoint(lambda v: (v.relu(), (-v).relu()), x, num_outputs=2)
        (pos + neg).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), [1.0, -1.0])
        with self.ctx.no_grad():
            out = ampx.checkpoint(lambda v: v * 2.0, x)
            self.assertFalse(out.requires_grad)
        self.assertEqual(self.ctx._state.segments, {})


class OptimizerTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context()

    def test_sgd_momentum_matches_torch_with_groups_and_lr(self):
        values = [np.array([1.0, -2.0], np.float32), np.array([0.5], np.float32)]
        grads = [np.array([0.1, 0.3], np.float32), np.array([-1.0], np.float32)]
        params = [_t(self.ctx, v, requires_grad=True) for v in values]
        for p, g in zip(params, grads):
            p.grad = _t(self.ctx, g)
        opt = ampx.SGD([{"params": [params[0]]}, {"params": [params[1]], "lr": 0.5}],
                       lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True)
        tparams = [torch.tensor(v, requires_grad=True) for v in values]
        for p, g in zip(tparams, grads):
            p.grad = torch.tensor(g)
        topt = torch.optim.SGD([{"params": [tparams[0]]}, {"params": [tparams[1]], "lr": 0.5}],
                               lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True)
        self.assertEqual(opt.num_groups, 2)
        self.assertEqual((opt.get_lr(0), opt.get_lr(1)), (0.1, 0.5))
        for step in range(3):
            if step == 2:
                opt.set_lr(0.05)
                for group in topt.param_groups:
                    group["lr"] = 0.05
            opt.step()
            topt.step()
        for p, tp in zip(params, tparams):
            np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-6)
        self.assertEqual(opt.get_lr(1), 0.05)
        np.testing.assert_allclose(opt.state_tensor(params[0], "momentum").numpy(),
                                   topt.state[tparams[0]]["momentum_buffer"].numpy(), rtol=1e-6)
        self.assertEqual(opt.add_param_group([_t(self.ctx, [0.0], requires_grad=True)]), 2)
        opt.zero_grad()
        self.assertEqual(params[0].grad.tolist(), [0.0, 0.0])

    def test_bf16_parameters_get_fp32_masters_and_state_round_trips(self):
        p = ampx.tensor([1.0, 2.0], "bf16", context=self.ctx, requires_grad=True)
        p.grad = ampx.tensor([0.5, 0.5], "bf16", context=self.ctx)
        opt = ampx.Adam([p], lr=1e-3, betas=(0.8, 0.99), amsgrad=True)
        opt.step()
        master = opt.state_tensor(p, ampx.StateKind.MASTER)
        self.assertEqual(master.dtype, ampx.F32)
        self.assertEqual(opt.param_steps(p), 1)
        self.assertTrue(opt.last_step_taken())
        saved = opt.state_dict()
        opt.step()
        opt.load_state_dict(saved)
        self.assertEqual(opt.param_steps(p), 1)
        self.assertEqual(opt.state_tensor(p, "max_exp_avg_sq").shape, (2,))
        with self.assertRaises(ampx.NotSupportedError):
            ampx.SGD([p]).state_tensor(p, "momentum")

    def test_clipping(self):
        p = _t(self.ctx, [0.0, 0.0], requires_grad=True)
        p.grad = _t(self.ctx, [3.0, 4.0])
        opt = ampx.SGD([p])
        self.assertAlmostEqual(ampx.clip_grad_norm_(opt, 1.0).item(), 5.0, places=5)
        np.testing.assert_allclose(p.grad.numpy(), [0.6, 0.8], rtol=1e-5)
        ampx.clip_grad_value_(opt, 0.7)
        np.testing.assert_allclose(p.grad.numpy(), [0.6, 0.7], rtol=1e-6)
        self.assertAlmostEqual(ampx.clip_grad_norm_(opt, 10, norm_type=math.inf).item(), 0.7,
                               places=6)
        p.grad = _t(self.ctx, [math.nan, 1.0])
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.clip_grad_norm_(opt, 1.0, error_if_nonfinite=True)


class ScalerAndAutocastTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context()

    def test_scaler_state_and_manual_update(self):
        scaler = ampx.Scaler(self.ctx, init_scale=4.0, hysteresis=2, min_scale=1.0,
                             max_scale=64.0)
        p = _t(self.ctx, [1.0], requires_grad=True)
        opt = ampx.SGD([p])
        scaler.attach(opt)
        loss = ampx.mul(p, p).sum()
        self.assertEqual(scaler.scale(loss).item(), 4.0)
        self.assertEqual(scaler.scale_tensor().item(), 4.0)
        loss.backward(scaler)
        self.assertEqual(p.grad.item(), 8.0)
        scaler.unscale_(opt)
        self.assertFalse(scaler.found_inf(opt))
        scaler.step(opt)
        scaler.update(16.0)
        self.assertEqual(scaler.get_scale(), 16.0)
        state = scaler.state_dict()
        self.assertEqual((state["scale"], state["hysteresis"], state["counters"]["updates"]),
                         (16.0, 2, 1))
        other = ampx.Scaler(self.ctx)
        other.load_state_dict(state)
        self.assertEqual(other.get_scale(), 16.0)
        self.assertEqual(other.counters(), scaler.counters())
        with self.assertRaises(ampx.InvalidArgumentError):
            other.load_state_dict({"scale": -1.0})
        with self.assertRaises(ampx.InvalidArgumentError):
            other.load_state_dict({"bogus": 1})
        disabled = ampx.Scaler(self.ctx, enabled=False)
        self.assertEqual(disabled.get_scale(), 1.0)

    def test_autocast_policy(self):
        autocast = ampx.Autocast(self.ctx, "bf16")
        self.assertEqual(autocast.op_class("matmul"), ampx.OpClass.LOWER_PRECISION)
        self.assertEqual(autocast.op_class("softmax"), ampx.OpClass.FP32)
        w = _t(self.ctx, np.ones((2, 2)), requires_grad=True)
        with autocast:
            self.assertEqual(ampx.matmul(w, w).dtype, ampx.BF16)
            self.assertEqual(ampx.matmul(w, w).dtype, ampx.BF16)
            with autocast:  # regions nest
                self.assertEqual(ampx.softmax(w).dtype, ampx.F32)
        hits, misses = autocast.cache_stats()
        self.assertGreaterEqual(hits, 1)
        self.assertGreaterEqual(misses, 1)
        autocast.set_op_class("matmul", "keep")
        with autocast:
            self.assertEqual(ampx.matmul(w, w).dtype, ampx.F32)
        with ampx.Autocast(self.ctx, enabled=False):
            self.assertEqual(ampx.matmul(w, w).dtype, ampx.F32)


class CheckpointFileTest(unittest.TestCase):
    def test_save_and_load(self):
        ctx = ampx.Context()
        p = _t(ctx, [1.0, 2.0], requires_grad=True, name="p")
        opt = ampx.AdamW([p])
        scaler = ampx.Scaler(ctx, init_scale=32.0)
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "train.ckpt")
            try:
                ampx.save_checkpoint_file(path, [p], opt, scaler)
            except ampx.NotSupportedError as exc:
                self.skipTest(str(exc))  # a library older than section 12
            p.fill_(0.0)
            ampx.load_checkpoint_file(path, [p], opt, scaler)
            self.assertEqual(p.tolist(), [1.0, 2.0])
            with self.assertRaises(ampx.FileError):
                ampx.load_checkpoint_file(os.path.join(folder, "missing"), [p])
            with open(path, "r+b") as f:
                f.seek(20)
                f.write(b"\xff")
            with self.assertRaises(ampx.CorruptError):
                ampx.load_checkpoint_file(path, [p])


if __name__ == "__main__":
    unittest.main()
