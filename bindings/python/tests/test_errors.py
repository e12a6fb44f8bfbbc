"""(2) Failures arrive as ampx.Error subclasses carrying the library's message."""
import unittest

import numpy as np

import ampx


class ErrorTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context()

    def test_shape_mismatch_in_add(self):
        a = ampx.zeros((2, 3), context=self.ctx)
        b = ampx.zeros((4, 5), context=self.ctx)
        with self.assertRaises(ampx.ShapeError) as caught:
            ampx.add(a, b)
        error = caught.exception
        self.assertIsInstance(error, ampx.Error)
        self.assertIsInstance(error, ValueError)
        self.assertEqual(error.status, ampx.Status.SHAPE)
        self.assertEqual(error.message, ampx.last_error())
        self.assertEqual(ampx.last_status(), ampx.Status.SHAPE)
        self.assertIn("ampx_add", error.message)
        self.assertIn("[2, 3]", error.message.replace("[2,3]", "[2, 3]"))
        self.assertIn("AMPX_ERR_SHAPE", str(error))
        self.assertEqual(ampx.status_string(error.status), "AMPX_ERR_SHAPE")

    def test_operator_reports_the_same_error(self):
        with self.assertRaises(ampx.ShapeError):
            ampx.zeros((3,), context=self.ctx) + ampx.zeros((2, 2), context=self.ctx)

    def _model(self):
        w = ampx.tensor(np.ones((2, 3), np.float32), context=self.ctx, requires_grad=True)
        x = ampx.tensor(np.ones((4, 3), np.float32), context=self.ctx)
        return w, x

    def test_optimizer_step_order_violations(self):
        w, x = self._model()
        opt = ampx.SGD([w], lr=0.1)
        scaler = ampx.Scaler(self.ctx, init_scale=8.0)
        scaler.attach(opt)  # so that misuse is caught in the first iteration too
        ampx.backward(ampx.linear(x, w).sum(), scaler)
        # Stepping the optimizer directly with gradients still scaled.
        with self.assertRaises(ampx.OrderError) as caught:
            opt.step()
        self.assertIn("ampx_optimizer_step", caught.exception.message)
        # Clipping before unscaling: the classic bug, refused.
        with self.assertRaises(ampx.OrderError):
            ampx.clip_grad_norm_(opt, 1.0)
        scaler.unscale_(opt)
        with self.assertRaises(ampx.OrderError) as caught:
            scaler.unscale_(opt)
        self.assertEqual(caught.exception.status, ampx.Status.ORDER)
        scaler.step(opt)
        with self.assertRaises(ampx.OrderError):
            scaler.step(opt)
        scaler.update()
        with self.assertRaises(ampx.OrderError):
            scaler.update()  # nothing stepped since the last update

    def test_found_inf_before_unscale_is_an_order_error(self):
        w, _ = self._model()
        opt = ampx.SGD([w])
        scaler = ampx.Scaler(self.ctx)
        with self.assertRaises(ampx.OrderError):
            scaler.found_inf(opt)
        with self.assertRaises(ampx.OrderError):
            opt.last_step_taken()

    def test_invalid_options_name_the_option(self):
        with self.assertRaises(ampx.InvalidArgumentError) as caught:
            ampx.Scaler(self.ctx, growth_factor=0.5)
        self.assertIn("growth", caught.exception.message)
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.SGD([], lr=-1.0, context=self.ctx)
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.Adam([], betas=(1.5, 0.9), context=self.ctx)

    def test_dtype_and_device_errors(self):
        with self.assertRaises(ampx.DTypeError):
            ampx.Autocast(self.ctx, dtype="f32")
        with self.assertRaises(ampx.DTypeError):
            ampx.zeros((2,), "i32", context=self.ctx).requires_grad = True
        other = ampx.Context()
        with self.assertRaises(ampx.DeviceError):
            ampx.add(ampx.zeros((2,), context=self.ctx), ampx.zeros((2,), context=other))
        if not ampx.has_cuda():
            with self.assertRaises(ampx.NoDeviceError):
                ampx.Context("cuda")

    def test_bad_python_arguments_are_refused_before_c(self):
        t = ampx.zeros((2,), context=self.ctx)
        for call in (lambda: ampx.add(t, "x"), lambda: ampx.relu(None),
                     lambda: ampx.linear(t, 3), lambda: ampx.concat(t),
                     lambda: ampx.SGD(t), lambda: t.fill_("1"),
                     lambda: ampx.Scaler(self.ctx).step(object())):
            with self.assertRaises(ampx.ArgumentTypeError):
                call()
        with self.assertRaises(TypeError):  # ArgumentTypeError is a TypeError too
            ampx.mse_loss(t, [1.0, 2.0])
        # Integers that would be truncated by ctypes.
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.zeros((2 ** 64,), context=self.ctx)
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.transpose(t, 2 ** 31, 0)
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.linear(t, t, activation="sigmoid")
        with self.assertRaises(ampx.ShapeError):
            ampx.zeros([1] * 9, context=self.ctx)
        with self.assertRaises(ampx.ShapeError):
            ampx.zeros((-1,), context=self.ctx)
        with self.assertRaises(ampx.InvalidArgumentError):
            t.name = "a\0b"

    def test_wrong_sizes_from_host(self):
        t = ampx.zeros((2, 2), context=self.ctx)
        with self.assertRaises(ampx.ShapeError):
            t.copy_(np.zeros(3, np.float32))
        with self.assertRaises(ampx.ShapeError):
            ampx.tensor([1.0, 2.0], context=self.ctx).item()

    def test_corrupt_optimizer_state(self):
        w, _ = self._model()
        opt = ampx.Adam([w])
        state = bytearray(opt.state_dict())
        state[-1] ^= 0xFF
        with self.assertRaises(ampx.CorruptError):
            opt.load_state_dict(bytes(state))
        with self.assertRaises(ampx.Error):
            opt.load_state_dict(b"")

    def test_backward_errors(self):
        w, x = self._model()
        with self.assertRaises(ampx.ShapeError):
            ampx.backward(ampx.linear(x, w))  # not one element
        leaf = ampx.zeros((1,), context=self.ctx, requires_grad=True)
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.backward(leaf)  # not made by a recorded op

    def test_checkpoint_segment_exception_propagates(self):
        w, x = self._model()

        def failing(inp):
            raise KeyError("from the segment")

        with self.assertRaises(KeyError) as caught:
            ampx.checkpoint(failing, x)
        self.assertIsInstance(caught.exception.__cause__, ampx.Error)

        def wrong_count(inp):
            return ampx.linear(inp, w), ampx.linear(inp, w)

        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.checkpoint(wrong_count, x)

        calls = []

        def fails_the_second_time(inp):
            calls.append(1)
            if len(calls) > 1:
                raise RuntimeError("recompute failed")
            return ampx.linear(inp, w)

        loss = ampx.checkpoint(fails_the_second_time, x).sum()
        with self.assertRaises(RuntimeError) as caught:
            loss.backward()
        self.assertIn("recompute failed", str(caught.exception))

    def test_missing_library_is_an_import_error(self):
        import os
        import subprocess
        import sys
        env = dict(os.environ, AMPX_LIBRARY="/nonexistent/libampx.so")
        result = subprocess.run([sys.executable, "-c", "import ampx"], env=env,
                                capture_output=True, text=True)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("ImportError: ampx: cannot load AMPX_LIBRARY", result.stderr)

    def test_errors_in_other_threads_are_separate(self):
        import threading
        with self.assertRaises(ampx.ShapeError):
            ampx.add(ampx.zeros((2,), context=self.ctx), ampx.zeros((3,), context=self.ctx))
        seen = []
        thread = threading.Thread(target=lambda: seen.append(ampx.last_error()))
        thread.start()
        thread.join()
        self.assertEqual(seen, [""])


if __name__ == "__main__":
    unittest.main()
