"""The precision doctor (ampx.Doctor): planted gradients land in exactly the
expected histogram bins and fp16 fractions, the history follows the scaler,
findings, the report, and bad input."""
import ctypes
import importlib
import math
import os
import pathlib
import tempfile
import unittest

import numpy as np

import ampx
from ampx import doctor as doctor_module

_lib = importlib.import_module("ampx._lib")
_raw = importlib.import_module("ampx._raw")


def _grad(ctx, values, dtype="f32"):
    return ampx.tensor(np.asarray(values, np.float64), dtype, context=ctx)


def _param(ctx, n, dtype="f32", name=None, value=0.0):
    return ampx.tensor(np.full(n, value), dtype, context=ctx, requires_grad=True, name=name)


def _bins(histogram):
    """The non-empty bins of a histogram, as {bin: count}."""
    return {i: c for i, c in enumerate(histogram) if c}


class LayoutTest(unittest.TestCase):
    """The ctypes structs agree with ampx.h field for field (64-bit targets)."""

    def test_sizes_and_offsets(self):
        if ctypes.sizeof(ctypes.c_void_p) != 8:
            self.skipTest("the expected layouts are those of 64-bit targets")
        expected = {
            _raw.ampx_doctor_options: (16, {"interval": 8, "history": 12}),
            _raw.ampx_doctor_overview: (56, {"steps": 8, "sample_step": 16, "sample_scale": 24,
                                             "param_count": 32, "history_count": 36,
                                             "finding_count": 40, "missed_steps": 48}),
            _raw.ampx_doctor_param_stats: (800, {
                "index": 8, "name": 16, "param_dtype": 24, "grad_dtype": 28, "elements": 32,
                "histogram": 40, "amax": 712, "amax_scaled": 720, "grad_norm": 728,
                "fp16_zero_unscaled": 736, "fp16_subnormal_unscaled": 744,
                "fp16_zero_scaled": 752, "fp16_subnormal_scaled": 760,
                "fp16_overflow_scaled": 768, "headroom": 776, "headroom_unbounded": 780,
                "lost_update_fraction": 784, "lost_without_master_fraction": 792}),
            _raw.ampx_doctor_sample: (56, {"step": 0, "scale": 8, "found_inf": 16,
                                           "sampled": 20, "grad_norm": 24,
                                           "first_overflow_param": 32, "overflow_params": 36,
                                           "fp16_lost_scaled": 40, "fp16_lost_unscaled": 48}),
            _raw.ampx_doctor_finding: (56, {"code": 8, "cause": 12, "param": 16,
                                            "param_name": 24, "first_step": 32,
                                            "last_step": 40, "message": 48}),
        }
        for struct, (size, offsets) in expected.items():
            with self.subTest(struct=struct.__name__):
                self.assertEqual(ctypes.sizeof(struct), size)
                for field, offset in offsets.items():
                    self.assertEqual(getattr(struct, field).offset, offset, field)
        self.assertEqual(len(_raw.ampx_doctor_param_stats().histogram), 84)
        defaults = _lib.lib.ampx_doctor_options_default()
        self.assertEqual((defaults.struct_size, defaults.interval, defaults.history),
                         (ctypes.sizeof(_raw.ampx_doctor_options), 100, 4096))

    def test_bin_constants_and_names(self):
        self.assertEqual(doctor_module.BINS, 84)
        self.assertEqual(doctor_module.binade_bin(-64), 2)
        self.assertEqual(doctor_module.binade_bin(0), 66)
        self.assertEqual(doctor_module.binade_bin(15), doctor_module.BIN_HUGE - 1)
        with self.assertRaises(ampx.InvalidArgumentError):
            doctor_module.binade_bin(16)
        self.assertEqual(doctor_module.finding_code_name(3), "scale_too_low")
        self.assertEqual(doctor_module.finding_code_name(1), "scale_oscillation")
        self.assertIsNone(doctor_module.finding_code_name(99))
        self.assertEqual(doctor_module.cause_name(4), "no_loss_scaling")
        self.assertEqual(doctor_module.cause_name(0), "")


class StatisticsTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context()

    def test_planted_f32_gradient_without_scaler(self):
        # Exact powers of two: bin of 2^e is 2 + e + 64, zero is bin 0.
        planted = [0.0] * 3 + [2.0 ** -30] * 5 + [2.0 ** -20] * 7 + [1.0] * 11 \
            + [-2.0 ** -14] * 2 + [1024.0]
        extremes = [2.0 ** -70, 65504.0, 2.0 ** 20, math.inf, math.nan]
        p = _param(self.ctx, len(planted), name="planted")
        q = _param(self.ctx, len(extremes))
        p.grad = _grad(self.ctx, planted)
        q.grad = _grad(self.ctx, extremes)
        opt = ampx.SGD([p, q], lr=0.0)
        doctor = ampx.Doctor(opt, interval=1)
        self.assertEqual(doctor.params(), [])  # nothing sampled yet
        with self.assertRaises(ampx.OrderError):
            doctor.param_stats(0)
        opt.step()

        overview = doctor.examine()
        self.assertIsInstance(overview, ampx.DoctorOverview)
        self.assertEqual((overview.steps, overview.sample_step, overview.sample_scale,
                          overview.param_count, overview.history_count, overview.missed_steps),
                         (1, 1, 1.0, 2, 1, 0))
        stats = doctor.params()
        self.assertEqual(len(stats), 2)
        s = stats[0]
        self.assertIsInstance(s, ampx.DoctorParamStats)
        self.assertEqual((s.index, s.name, s.param_dtype, s.grad_dtype, s.elements),
                         (0, "planted", ampx.F32, ampx.F32, len(planted)))
        self.assertIsInstance(s.histogram, tuple)
        self.assertEqual(len(s.histogram), 84)
        self.assertTrue(all(isinstance(c, int) for c in s.histogram))
        self.assertEqual(_bins(s.histogram), {0: 3, 2 - 30 + 64: 5, 2 - 20 + 64: 7,
                                              2 + 0 + 64: 11, 2 - 14 + 64: 2, 2 + 10 + 64: 1})
        n = len(planted)
        # fp16 zero: |u| <= 2^-25 (exact zeros and 2^-30); subnormal: 2^-20.
        self.assertEqual(s.fp16_zero_unscaled, 8 / n)
        self.assertEqual(s.fp16_subnormal_unscaled, 7 / n)
        self.assertEqual(s.fp16_zero_scaled, 8 / n)  # scale 1: scaled == unscaled
        self.assertEqual(s.fp16_subnormal_scaled, 7 / n)
        self.assertEqual(s.fp16_overflow_scaled, 0.0)
        self.assertEqual((s.amax, s.amax_scaled), (1024.0, 1024.0))
        self.assertEqual((s.headroom, s.headroom_unbounded), (5, False))  # 1024 * 2^5 <= 65504
        self.assertAlmostEqual(s.grad_norm, math.sqrt(sum(v * v for v in planted)), places=9)
        self.assertIsNone(s.lost_update_fraction)  # fp32 parameters lose no updates
        self.assertIsNone(s.lost_without_master_fraction)

        e = stats[1]
        self.assertEqual(e.name, "")
        self.assertEqual(_bins(e.histogram), {doctor_module.BIN_TINY: 1,
                                              doctor_module.binade_bin(15): 1,
                                              doctor_module.BIN_HUGE: 1,
                                              doctor_module.BIN_NONFINITE: 2})
        self.assertEqual(e.fp16_overflow_scaled, 3 / 5)  # 2^20, inf, NaN
        self.assertEqual(e.fp16_zero_unscaled, 1 / 5)
        self.assertEqual(e.amax, 2.0 ** 20)
        self.assertEqual(e.headroom, -5)
        self.assertEqual(doctor.param_stats(1), e)

        # Without a scaler only sampled steps are recorded; the non-finite
        # gradients of parameter 1 mark the step as overflowed.
        history = doctor.history()
        self.assertEqual(len(history), 1)
        self.assertIsInstance(history[0], ampx.DoctorSample)
        self.assertEqual((history[0].step, history[0].scale, history[0].sampled,
                          history[0].found_inf, history[0].first_overflow_param,
                          history[0].overflow_params), (1, 1.0, True, True, 1, 1))

    def test_planted_f16_gradient_with_a_scaler(self):
        # Stored (scaled by 1024) values x; the true ones are u = x / 1024.
        stored = [0.0] * 4 + [2.0 ** -14] * 3 + [1.0] * 5 + [2.0 ** -24] * 2
        p = _param(self.ctx, len(stored), "f16", name="w16")
        p.grad = _grad(self.ctx, stored, "f16")
        opt = ampx.SGD([p], lr=0.0)
        scaler = ampx.Scaler(self.ctx, init_scale=1024.0)
        with ampx.Doctor(opt, interval=1) as doctor:
            scaler.step(opt)
            scaler.update()
            self.assertEqual(doctor.examine().sample_scale, 1024.0)
            (s,) = doctor.params()
        self.assertTrue(doctor.closed)
        n = len(stored)
        self.assertEqual((s.param_dtype, s.grad_dtype, s.elements), (ampx.F16, ampx.F16, n))
        # u: 0, 2^-24, 2^-10, 2^-34.
        self.assertEqual(_bins(s.histogram), {0: 4, doctor_module.binade_bin(-24): 3,
                                              doctor_module.binade_bin(-10): 5,
                                              doctor_module.binade_bin(-34): 2})
        self.assertEqual(s.fp16_zero_unscaled, 6 / n)       # 0 and 2^-34
        self.assertEqual(s.fp16_subnormal_unscaled, 3 / n)  # 2^-24
        self.assertEqual(s.fp16_zero_scaled, 4 / n)         # the scale saves 2^-34 ...
        self.assertEqual(s.fp16_subnormal_scaled, 2 / n)    # ... as a subnormal 2^-24
        self.assertEqual(s.fp16_overflow_scaled, 0.0)
        self.assertEqual((s.amax, s.amax_scaled, s.headroom), (2.0 ** -10, 1.0, 15))
        self.assertEqual(s.lost_update_fraction, 0.0)  # lr 0: no master changed
        self.assertEqual(s.lost_without_master_fraction, 0.0)

    def test_lost_updates_of_an_f16_parameter(self):
        # fp16 ulp at 1.0 is 2^-10: an update of 2^-14 is below half an ulp
        # (lost), one of 2^-8 is four ulps (taken).
        p = _param(self.ctx, 8, "f16", value=1.0)
        p.grad = _grad(self.ctx, [1.0] * 4 + [64.0] * 4, "f16")
        opt = ampx.SGD([p], lr=2.0 ** -14)
        doctor = ampx.Doctor(opt, interval=1)
        opt.step()
        (s,) = doctor.params()
        self.assertEqual(s.lost_update_fraction, 0.5)
        self.assertEqual(s.lost_without_master_fraction, 0.5)
        np.testing.assert_array_equal(p.numpy(), [1.0] * 4 + [1.0 - 2.0 ** -8] * 4)

    def test_tiny_fp16_model_with_a_scaler(self):
        rng = np.random.default_rng(0)
        w = ampx.tensor(rng.standard_normal((4, 8)) * 0.1, "f16", context=self.ctx,
                        requires_grad=True, name="fc.weight")
        b = ampx.tensor(np.zeros(4), "f16", context=self.ctx, requires_grad=True,
                        name="fc.bias")
        x = ampx.tensor(rng.standard_normal((16, 8)), "f16", context=self.ctx)
        target = ampx.tensor(rng.standard_normal((16, 4)), "f16", context=self.ctx)
        opt = ampx.AdamW([w, b], lr=1e-3)
        scaler = ampx.Scaler(self.ctx, init_scale=2.0 ** 12)
        doctor = ampx.Doctor(opt, interval=1, history=16)
        steps = 3
        for _ in range(steps):
            loss = ampx.mse_loss(ampx.linear(x, w, b), target)
            loss.backward(scaler)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
        overview = doctor.examine()
        self.assertEqual((overview.steps, overview.sample_step, overview.history_count),
                         (steps, steps, steps))
        stats = doctor.params()
        self.assertEqual([s.name for s in stats], ["fc.weight", "fc.bias"])
        for s, numel in zip(stats, (32, 4)):
            self.assertEqual((s.param_dtype, s.grad_dtype, s.elements),
                             (ampx.F16, ampx.F16, numel))
            self.assertEqual(sum(s.histogram), numel)
            self.assertIsInstance(s.lost_update_fraction, float)
            self.assertGreater(s.grad_norm, 0.0)
        history = doctor.history()
        self.assertEqual(len(history), steps)
        self.assertEqual([h.step for h in history], [1, 2, 3])
        self.assertTrue(all(h.scale == 2.0 ** 12 and h.sampled and not h.found_inf
                            for h in history))
        summary = doctor.summary()
        self.assertIsInstance(summary, str)
        self.assertTrue(summary)


class HistoryTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context()

    def _run(self, doctor_kwargs, steps, inf_at=()):
        a = _param(self.ctx, 64, "f16")
        b = _param(self.ctx, 64, "f16")
        opt = ampx.SGD([a, b], lr=0.0)
        doctor = ampx.Doctor(opt, **doctor_kwargs)
        scaler = ampx.Scaler(self.ctx, init_scale=1024.0)
        for step in range(1, steps + 1):
            gb = np.ones(64)
            if step in inf_at:
                gb[7] = np.inf
            a.grad = _grad(self.ctx, np.full(64, 0.25), "f16")
            b.grad = _grad(self.ctx, gb, "f16")
            scaler.step(opt)
            scaler.update()
        return doctor

    def test_every_scaled_step_is_recorded_with_its_overflow(self):
        doctor = self._run({"interval": 2}, 5, inf_at={3})
        history = doctor.history()
        self.assertEqual(len(history), 5)
        self.assertEqual([h.step for h in history], [1, 2, 3, 4, 5])
        self.assertEqual([h.scale for h in history], [1024, 1024, 1024, 512, 512])
        self.assertEqual([h.found_inf for h in history], [False, False, True, False, False])
        self.assertEqual([h.sampled for h in history], [True, False, True, False, True])
        self.assertEqual([h.first_overflow_param for h in history], [None, None, 1, None, None])
        self.assertEqual([h.overflow_params for h in history], [0, 0, 1, 0, 0])
        self.assertAlmostEqual(history[4].grad_norm, math.sqrt(64 * (0.0625 + 1.0)) / 512)
        self.assertEqual(doctor.examine().sample_step, 5)
        self.assertIn("5 steps", doctor.summary())

    def test_the_ring_keeps_the_latest_steps(self):
        doctor = self._run({"interval": 1, "history": 3}, 5)
        self.assertEqual(doctor.history_capacity, 3)
        self.assertEqual([h.step for h in doctor.history()], [3, 4, 5])
        self.assertEqual(doctor.examine().history_count, 3)

    def test_interval_zero_samples_nothing_until_changed(self):
        p = _param(self.ctx, 8)
        p.grad = _grad(self.ctx, np.ones(8))
        opt = ampx.SGD([p], lr=0.1)
        doctor = ampx.Doctor(opt, interval=0)
        self.assertEqual(doctor.interval, 0)
        opt.step()
        overview = doctor.examine()
        self.assertEqual((overview.steps, overview.sample_step, overview.history_count),
                         (1, 0, 0))
        self.assertEqual(doctor.params(), [])
        self.assertEqual(doctor.history(), [])
        doctor.interval = 1
        self.assertEqual(doctor.interval, 1)
        opt.step()
        (s,) = doctor.params()
        self.assertEqual(_bins(s.histogram), {doctor_module.binade_bin(0): 8})
        self.assertEqual(doctor.examine().sample_step, 2)
        doctor.set_interval(3)
        self.assertEqual(doctor.interval, 3)
        self.assertIn("interval=3", repr(doctor))


class FindingsAndReportTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context()

    def _unscaled_fp16_doctor(self):
        # fp16 gradients, all subnormal (2^-20), and no loss scaling.
        p = _param(self.ctx, 64, "f16", name="encoder.<script>")
        p.grad = _grad(self.ctx, np.full(64, 2.0 ** -20), "f16")
        opt = ampx.SGD([p], lr=0.1)
        doctor = ampx.Doctor(opt, interval=1)
        opt.step()
        return doctor

    def test_fp16_without_loss_scaling_is_a_finding(self):
        doctor = self._unscaled_fp16_doctor()
        self.assertEqual(doctor.examine().finding_count, 1)
        (finding,) = doctor.findings()
        self.assertIsInstance(finding, ampx.DoctorFinding)
        self.assertEqual((finding.code, finding.cause), ("scale_too_low", "no_loss_scaling"))
        self.assertEqual((finding.param, finding.param_name), (None, None))
        self.assertEqual((finding.first_step, finding.last_step), (1, 1))
        self.assertIsInstance(finding.message, str)
        self.assertIn("loss scal", finding.message)
        self.assertIn("scale_too_low", doctor.summary())

    def test_no_findings_on_a_healthy_step(self):
        p = _param(self.ctx, 8, "f16")
        p.grad = _grad(self.ctx, np.full(8, 0.5), "f16")
        opt = ampx.SGD([p], lr=0.0)
        doctor = ampx.Doctor(opt, interval=1)
        opt.step()
        self.assertEqual(doctor.findings(), [])

    def test_report_is_one_html_page_without_script(self):
        doctor = self._unscaled_fp16_doctor()
        with tempfile.TemporaryDirectory() as folder:
            for path in (os.path.join(folder, "report.html"),
                         pathlib.Path(folder) / "report-path.html"):
                doctor.write_report(path)
                html = pathlib.Path(path).read_text(encoding="utf-8")
                self.assertTrue(html.startswith("<!DOCTYPE html>"))
                self.assertNotIn("<script", html.lower())  # the name is escaped
                self.assertIn("scale_too_low", html)
            doctor.write_report(os.path.join(folder, "report.html"))  # replaced
            missing = os.path.join(folder, "no-such-folder", "report.html")
            with self.assertRaises(ampx.FileError) as caught:
                doctor.write_report(missing)
            self.assertIsInstance(caught.exception, OSError)
            self.assertEqual(caught.exception.status, ampx.Status.IO)
            self.assertIn(missing, caught.exception.message)
            self.assertFalse(os.path.exists(missing))
        with self.assertRaises(ampx.ArgumentTypeError):
            doctor.write_report(42)
        with self.assertRaises(ampx.InvalidArgumentError):
            doctor.write_report("bad\0path")


class BadInputTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context()
        self.p = _param(self.ctx, 4, "f16")
        self.p.grad = _grad(self.ctx, np.ones(4), "f16")
        self.opt = ampx.SGD([self.p], lr=0.5)

    def test_options_out_of_range(self):
        with self.assertRaises(ampx.InvalidArgumentError) as caught:
            ampx.Doctor(self.opt, interval=-1)
        self.assertEqual(caught.exception.status, ampx.Status.INVALID_ARGUMENT)
        self.assertIn("interval", caught.exception.message)
        with self.assertRaises(ampx.InvalidArgumentError) as caught:
            ampx.Doctor(self.opt, history=0)
        self.assertIn("history", caught.exception.message)
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.Doctor(self.opt, history=2 ** 24 + 1)
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.Doctor(self.opt, interval=2 ** 31)  # does not fit int32
        with self.assertRaises(ampx.ArgumentTypeError):
            ampx.Doctor(self.opt, interval=1.5)
        with self.assertRaises(ampx.ArgumentTypeError):
            ampx.Doctor("not an optimizer")

    def test_negative_interval_is_refused_and_changes_nothing(self):
        doctor = ampx.Doctor(self.opt, interval=1)
        with self.assertRaises(ampx.InvalidArgumentError) as caught:
            doctor.interval = -5
        self.assertEqual(caught.exception.status, ampx.Status.INVALID_ARGUMENT)
        self.assertEqual(doctor.interval, 1)
        self.opt.step()
        self.assertEqual(doctor.examine().sample_step, 1)
        with self.assertRaises(ampx.InvalidArgumentError):
            doctor.param_stats(1)
        with self.assertRaises(ampx.InvalidArgumentError):
            doctor.param_stats(-1)

    def test_one_doctor_per_optimizer_and_closing(self):
        doctor = ampx.Doctor(self.opt)
        self.assertIs(doctor.optimizer, self.opt)
        self.assertIs(doctor.context, self.ctx)
        with self.assertRaises(ampx.InvalidArgumentError) as caught:
            ampx.Doctor(self.opt)
        self.assertIn("doctor", caught.exception.message)
        doctor.close()
        doctor.close()  # a second close does nothing
        self.assertTrue(doctor.closed)
        self.assertEqual(repr(doctor), "Doctor(<closed>)")
        for call in (doctor.examine, doctor.summary, doctor.history, doctor.findings,
                     lambda: doctor.interval):
            with self.assertRaises(ampx.StaleHandleError):
                call()
        # Closed, the optimizer takes a doctor again, and training goes on.
        with ampx.Doctor(self.opt, interval=1) as again:
            self.opt.step()
            self.assertEqual(again.examine().steps, 1)
        np.testing.assert_array_equal(self.p.numpy(), [-0.5] * 4)

    def test_the_doctor_outlives_the_python_optimizer(self):
        doctor = ampx.Doctor(self.opt, interval=1)
        self.opt.step()
        self.opt.close()  # the doctor retains the C optimizer
        self.assertEqual(doctor.examine().steps, 1)
        self.assertEqual(len(doctor.params()), 1)


if __name__ == "__main__":
    unittest.main()
