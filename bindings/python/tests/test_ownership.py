"""(5) Ownership: releases in odd orders and use after close must never crash."""
import gc
import unittest

import numpy as np
import torch

import ampx
from common import run_python


class OwnershipTest(unittest.TestCase):
    def test_tensor_outlives_its_closed_context(self):
        ctx = ampx.Context()
        t = ampx.tensor([1.0, 2.0], context=ctx)
        ctx.close()
        with self.assertRaises(ampx.StaleHandleError):
            ctx.synchronize()
        with self.assertRaises(ampx.StaleHandleError):
            ampx.zeros((2,), context=ctx)
        # The tensor keeps the C context alive: ops and copies still work.
        np.testing.assert_array_equal((t + t).relu().numpy(), [2.0, 4.0])
        del ctx
        gc.collect()
        self.assertEqual(t.sum().item(), 3.0)

    def test_context_dropped_first(self):
        t = ampx.tensor([1.0], context=ampx.Context())  # the only reference is the tensor's
        gc.collect()
        self.assertEqual(t.context.device, (ampx.Device.CPU, 0))
        self.assertEqual(t.item(), 1.0)

    def test_closed_tensor_raises(self):
        t = ampx.zeros((2,))
        t.close()
        t.close()  # idempotent
        self.assertTrue(t.closed)
        self.assertEqual(repr(t), "Tensor(<closed>)")
        for use in (lambda: t.numpy(), lambda: t.shape, lambda: ampx.relu(t),
                    lambda: ampx.add(ampx.zeros((2,)), t), lambda: t.__dlpack__()):
            with self.assertRaises(ampx.StaleHandleError):
                use()

    def test_release_everything_in_odd_orders(self):
        for order in ((0, 1, 2, 3, 4, 5), (5, 4, 3, 2, 1, 0), (2, 0, 4, 1, 5, 3)):
            ctx = ampx.Context()
            w = ampx.tensor(np.ones((2, 2), np.float32), context=ctx, requires_grad=True)
            opt = ampx.Adam([w])
            scaler = ampx.Scaler(ctx)
            autocast = ampx.Autocast(ctx, "bf16")
            with autocast:
                loss = ampx.linear(w, w).sum()
            loss.backward(scaler)
            scaler.step(opt)  # a step pending an update keeps the optimizer alive
            objects = [ctx, w, opt, scaler, autocast, loss]
            for index in order:
                objects[index].close()
            del objects, ctx, w, opt, scaler, autocast, loss
            gc.collect()

    def test_optimizer_keeps_parameters_and_grad_survives(self):
        ctx = ampx.Context()
        w = ampx.tensor([1.0, 2.0], context=ctx, requires_grad=True, name="w")
        opt = ampx.SGD([w], lr=0.5)
        grad_memory = np.ones(2, np.float32)
        w.grad = ampx.Tensor.from_numpy(grad_memory, context=ctx)  # w retains it
        gc.collect()
        w.close()  # the optimizer still holds the parameter
        opt.step()
        grad_memory[1] = np.inf
        (entry,) = ampx.find_nonfinite_grads(opt)
        self.assertEqual((entry.name, entry.nan_count, entry.inf_count), ("w", 0, 1))
        self.assertFalse(entry.param.closed)  # a new Tensor object for the parameter
        np.testing.assert_array_equal(entry.param.numpy(), [0.5, 1.5])

    def test_autocast_cannot_close_inside_its_block(self):
        ctx = ampx.Context()
        autocast = ampx.Autocast(ctx)
        with autocast:
            with self.assertRaises(ampx.OrderError):
                autocast.close()
        autocast.close()
        with self.assertRaises(ampx.StaleHandleError):
            with autocast:
                pass

    def test_scope_outputs_stay_valid_in_python(self):
        ctx = ampx.Context()
        x = ampx.tensor([[1.0, -1.0]], context=ctx)
        with ctx.scope():
            kept = x.relu()
            with ctx.scope():
                inner = kept * 3.0
        np.testing.assert_array_equal(kept.numpy(), [[1.0, 0.0]])
        np.testing.assert_array_equal(inner.numpy(), [[3.0, 0.0]])

    def test_close_context_inside_a_scope(self):
        ctx = ampx.Context()
        x = ampx.tensor([1.0], context=ctx)
        with ctx.scope():
            y = x * 2.0
            ctx.close()  # pops the open scope itself
        self.assertEqual(y.item(), 2.0)

    def test_exports_outlive_every_python_object(self):
        ctx = ampx.Context()
        array = np.arange(3, dtype=np.float32)
        shared = ampx.Tensor.from_numpy(array, context=ctx)
        view = torch.from_dlpack(shared)
        del array, shared, ctx
        gc.collect()
        self.assertEqual(view.tolist(), [0.0, 1.0, 2.0])

    def test_checkpoint_callable_lives_until_backward(self):
        ctx = ampx.Context()
        w = ampx.tensor(np.full((2, 2), 0.5, np.float32), context=ctx, requires_grad=True)
        x = ampx.tensor(np.ones((1, 2), np.float32), context=ctx)
        loss = ampx.checkpoint(lambda inp: ampx.linear(inp, w).tanh(), x).sum()
        gc.collect()  # the lambda has no other reference
        loss.backward()
        self.assertIsNotNone(w.grad)
        self.assertEqual(ctx._state.segments, {})

    def test_interpreter_exit_with_live_objects(self):
        # Everything still alive at exit is released by the finalizers, in any order.
        script = (
            "import numpy as np, torch, ampx\n"
            "ctx = ampx.Context()\n"
            "w = ampx.tensor(np.ones((2, 2), np.float32), context=ctx, requires_grad=True)\n"
            "opt = ampx.AdamW([w]); scaler = ampx.Scaler(ctx); ac = ampx.Autocast(ctx)\n"
            "view = torch.from_dlpack(ampx.Tensor.from_numpy(np.ones(4, np.float32)))\n"
            "loss = ampx.checkpoint(lambda a: ampx.linear(a, w), w).sum()\n"
            "cycle = [ctx]; cycle.append(cycle)\n"
            "print('done')\n")
        result = run_python(self, script)
        self.assertEqual(result.stdout.strip(), "done")
        self.assertEqual(result.stderr, "")


if __name__ == "__main__":
    unittest.main()
