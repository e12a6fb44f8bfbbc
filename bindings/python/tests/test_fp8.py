"""FP8 (ampx.Fp8Recipe, Tensor.copy_fp8_, Autocast.set_fp8): casts against
the formats' definitions and torch's float8 types bit for bit, a delayed
scaling recipe against Transformer Engine's formula, a training step under
FP8 autocast, the doctor's FP8 report, checkpoints and bad input."""
import math
import os
import tempfile
import unittest

import numpy as np
import torch

import ampx

# The formats, as the OCP FP8 specification defines them: exponent and
# mantissa bits, bias; E4M3FN has no infinities and NaN = S.1111.111.
FORMATS = {"f8e4m3": (4, 3, 7, 448.0), "f8e5m2": (5, 2, 15, 57344.0)}


def decode(fmt: str, code: int) -> float:
    ebits, mbits, bias, _ = FORMATS[fmt]
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> mbits) & ((1 << ebits) - 1), code & ((1 << mbits) - 1)
    if fmt == "f8e4m3" and e == 15 and m == 7:
        return math.nan
    if fmt == "f8e5m2" and e == 31:
        return sign * math.inf if m == 0 else math.nan
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - mbits)
    return sign * (1 + m / (1 << mbits)) * 2.0 ** (e - bias)


def encode(fmt: str, x: float, saturate: bool) -> int:
    """Round to nearest, ties to the even code; beyond max: +-max when
    saturating, else NaN (E4M3) or +-inf (E5M2). Double precision."""
    ebits, mbits, _, fmax = FORMATS[fmt]
    if math.isnan(x):
        return 0x7F  # a NaN code in both formats
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    max_code = 0x7E if fmt == "f8e4m3" else 0x7B
    # Candidates: every finite non-negative code, and the notional next one
    # above max (max + one ulp), where rounding overflows.
    ulp = fmax - decode(fmt, max_code - 1)
    values = [(decode(fmt, c), c) for c in range(max_code + 1)] + [(fmax + ulp, max_code + 1)]
    best = min(values, key=lambda vc: (abs(vc[0] - a), vc[1] & 1))
    if best[1] > max_code or math.isinf(a):
        if saturate:
            return sign | max_code
        return (sign | 0x7F) if fmt == "f8e4m3" else (sign | 0x7C)
    return sign | best[1]


# Boundaries of both formats: max, beyond it, the overflow tie, the smallest
# subnormal and half of it (a tie to 0), halfway cases, signed zero, inf.
BOUNDARY = [0.0, -0.0, 1.0, -1.0, 448.0, 464.0, 465.0, 480.0, 500.0, -500.0, 57344.0,
            61439.0, 61440.0, 65536.0, math.inf, -math.inf, 2.0 ** -9, 2.0 ** -10,
            3 * 2.0 ** -10, 2.0 ** -16, 2.0 ** -17, 3 * 2.0 ** -17, 1.0625, 1.1875, 1.125,
            0.1, -0.3, 240.0, 248.0, 3.0e-3, 1.0e-6, 12345.0]


def _values():
    rng = np.random.default_rng(42)
    randoms = np.concatenate([rng.standard_normal(2000) * 10.0 ** rng.integers(-6, 6, 2000),
                              rng.uniform(-70000, 70000, 500)])
    return np.concatenate([np.array(BOUNDARY), randoms]).astype(np.float32)


class Fp8CastTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context(num_threads=1)
        self.values = _values()
        self.src = ampx.tensor(self.values, context=self.ctx)

    def _bits(self, fmt, overflow=None):
        if overflow is None:
            return self.src.to(fmt).numpy()
        dst = ampx.empty(self.values.shape, fmt, context=self.ctx)
        return dst.copy_fp8_(self.src, overflow).numpy()

    def test_every_code_decodes_as_defined(self):
        for fmt in FORMATS:
            codes = np.arange(256, dtype=np.uint8)
            decoded = ampx.tensor(codes, fmt, context=self.ctx).to("f32").numpy()
            self.assertEqual(ampx.tensor(codes, fmt, context=self.ctx).dtype,
                             ampx.DType.F8E4M3 if fmt == "f8e4m3" else ampx.DType.F8E5M2)
            for code in range(256):
                expected = decode(fmt, code)
                if math.isnan(expected):
                    self.assertTrue(math.isnan(decoded[code]), (fmt, code))
                else:
                    self.assertEqual(decoded[code], expected, (fmt, hex(code)))

    def test_casts_against_the_definition(self):
        # Tensor.to follows torch: E4M3 saturates, E5M2 overflows to inf.
        for fmt, overflow, saturate in (("f8e4m3", None, True), ("f8e5m2", None, False),
                                        ("f8e4m3", "saturate", True),
                                        ("f8e4m3", "no_saturate", False),
                                        ("f8e5m2", "saturate", True),
                                        ("f8e5m2", ampx.Fp8Overflow.NO_SATURATE, False)):
            bits = self._bits(fmt, overflow)
            expected = [encode(fmt, float(v), saturate) for v in self.values]
            mismatches = [(float(v), hex(b), hex(e)) for v, b, e in
                          zip(self.values, bits, expected) if b != e]
            self.assertEqual(mismatches[:5], [], (fmt, overflow))

    def test_named_boundaries(self):
        e4m3 = ampx.tensor([448.0, 500.0, math.inf, 2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -10,
                            1.0625, 1.1875, -0.0], "f8e4m3", context=self.ctx)
        self.assertEqual(e4m3.numpy().tolist(),
                         [0x7E, 0x7E, 0x7E, 0x01, 0x00, 0x02, 0x38, 0x3A, 0x80])
        e5m2 = ampx.tensor([57344.0, 61439.0, 61440.0, math.inf, 2.0 ** -16, 2.0 ** -17],
                           "f8e5m2", context=self.ctx)
        self.assertEqual(e5m2.numpy().tolist(), [0x7B, 0x7B, 0x7C, 0x7C, 0x01, 0x00])
        self.assertEqual(ampx.tensor(np.array([0x7E], np.uint8), "f8e4m3",
                                     context=self.ctx).item(), 448.0)
        nosat = ampx.empty((2,), "f8e4m3", context=self.ctx)
        nosat.copy_fp8_(ampx.tensor([500.0, -500.0], context=self.ctx), "no_saturate")
        self.assertEqual(nosat.numpy().tolist(), [0x7F, 0xFF])

    def test_bit_equal_to_torch(self):
        # torch's casts: float8_e4m3fn saturates, float8_e5m2 overflows to inf.
        finite_nan_free = torch.from_numpy(self.values)
        for fmt, torch_type in (("f8e4m3", torch.float8_e4m3fn), ("f8e5m2", torch.float8_e5m2)):
            theirs = finite_nan_free.to(torch_type).view(torch.uint8).numpy()
            np.testing.assert_array_equal(self._bits(fmt), theirs, err_msg=fmt)
            codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
            decoded = codes.view(torch_type).to(torch.float32).numpy()
            ours = ampx.tensor(codes.numpy(), fmt, context=self.ctx).to("f32").numpy()
            np.testing.assert_array_equal(ours, decoded, err_msg=fmt)

    def test_dlpack_with_torch(self):
        for fmt, torch_type in (("f8e4m3", torch.float8_e4m3fn), ("f8e5m2", torch.float8_e5m2)):
            ours = ampx.tensor(self.values[:40], fmt, context=self.ctx)
            theirs = torch.from_dlpack(ours)
            self.assertEqual(theirs.dtype, torch_type)
            np.testing.assert_array_equal(theirs.view(torch.uint8).numpy(), ours.numpy())
            source = torch.tensor([1.0, -2.5, 448.0, 0.015625]).to(torch_type)
            back = ampx.from_dlpack(source, context=self.ctx)
            self.assertEqual(back.dtype, ampx.DType(ampx.F8E4M3 if fmt == "f8e4m3"
                                                    else ampx.F8E5M2))
            np.testing.assert_array_equal(back.numpy(), source.view(torch.uint8).numpy())


def te_scale(fp8_max, history, previous, margin):
    """Transformer Engine's default delayed scaling update (the fused CUDA
    kernel of common/recipe/delayed_scaling.cu): amax = the history's max
    as fmaxf takes it (NaN skipped), scale = (fp8_max * 2^-margin) / amax
    in fp32; the previous scale for a zero or non-finite amax; FLT_MAX for
    an infinite quotient. (A step amax of 0 is not rolled in: see the
    caller.)"""
    amax = max([a for a in history if not math.isnan(a)], default=0.0)
    if math.isinf(amax) or amax == 0.0:
        return previous
    scaled_max = np.float32(fp8_max) * np.float32(2.0 ** -margin)
    with np.errstate(over="ignore"):
        scale = np.float32(scaled_max / np.float32(amax))
    return np.float32(np.finfo(np.float32).max) if np.isinf(scale) else scale


class Fp8RecipeTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context(num_threads=1)

    def test_delayed_scaling_follows_te(self):
        length, margin = 4, 1
        recipe = ampx.Fp8Recipe(self.ctx, amax_history_len=length, margin=margin)
        fwd = recipe.add_tensor("forward", "x")
        bwd = recipe.add_tensor(ampx.Fp8Role.BACKWARD, "dy")
        self.assertEqual((len(recipe), recipe.slot_count), (2, 2))
        self.assertEqual(recipe.slot(fwd).dtype, ampx.F8E4M3)
        self.assertEqual(recipe.slot(bwd).dtype, ampx.F8E5M2)
        # A step's amax per slot (None: nothing quantized that step); an inf,
        # a 0 and a tiny amax (infinite quotient), with history wrap-around.
        amaxes = [0.0, 3.0, 100.0, None, 0.5, math.inf, 2.0, 1.0, 1.0, 1.0, 1.0, 1e-40, 0.25]
        history, scales = [0.0] * length, {fwd: np.float32(1), bwd: np.float32(1)}
        for amax in amaxes:
            for slot, fmax in ((fwd, 448.0), (bwd, 57344.0)):
                scale = recipe.scale_tensor(slot).item()
                self.assertEqual(scale, scales[slot])
                if amax is not None:
                    x = np.array([amax / 2, -amax, 0.0], np.float32)
                    q = recipe.quantize(slot, ampx.tensor(x, context=self.ctx))
                    fmt = "f8e4m3" if slot == fwd else "f8e5m2"
                    expected = [encode(fmt, float(np.float32(v * np.float32(scale))), True)
                                for v in x]
                    self.assertEqual(q.numpy().tolist(), expected, (amax, slot))
            recipe.update()
            step = 0.0 if amax is None else float(np.float32(amax))
            if step != 0.0:  # a zero step amax leaves history and scale as they were
                history = history[1:] + [step]
            for slot, fmax in ((fwd, 448.0), (bwd, 57344.0)):
                if step != 0.0:
                    scales[slot] = te_scale(fmax, history, scales[slot], margin)
                info = recipe.slot(slot)
                self.assertEqual(info.history, history)
                self.assertEqual(info.scale, scales[slot], (amax, slot, history))
                self.assertEqual(info.scale_inv, np.float32(1) / scales[slot])
                self.assertEqual(info.amax, 0.0)
                self.assertEqual(recipe.scale_tensor(slot, inverse=True).item(), info.scale_inv)
        self.assertEqual(recipe.slot(fwd).name, "x")
        recipe.close()

    def test_quantize_transposed(self):
        with ampx.Fp8Recipe(self.ctx, scaling="current") as recipe:
            slot = recipe.add_tensor()
            x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
            q, qt = recipe.quantize(slot, ampx.tensor(x, context=self.ctx), transposed=True)
            self.assertEqual(qt.shape, (3, 2))
            scale = np.float32(448.0) / np.float32(2.5)  # current scaling: its own amax
            expected = np.array([[encode("f8e4m3", float(np.float32(v * scale)), True)
                                  for v in row] for row in x])
            np.testing.assert_array_equal(q.numpy(), expected)
            np.testing.assert_array_equal(qt.numpy(), expected.T)

    def test_doctor_report_and_summary(self):
        with ampx.Fp8Recipe(self.ctx) as recipe:
            slot = recipe.add_tensor("forward", "act")
            # At scale 1: 1e-4 rounds to 0 in E4M3 (below 2^-10) but not in
            # E5M2; 1000 is beyond 448 but not 57344; 0 is not counted.
            t = ampx.tensor([1e-4, 1000.0, 1.0, 0.0], context=self.ctx)
            report = recipe.inspect(slot, t)
            self.assertEqual(report.count, 3)
            self.assertAlmostEqual(report.flushed_e4m3, 1 / 3)
            self.assertAlmostEqual(report.saturated_e4m3, 1 / 3)
            self.assertEqual((report.flushed_e5m2, report.saturated_e5m2), (0.0, 0.0))
            self.assertEqual((report.scale, report.dtype), (1.0, ampx.F8E4M3))
            self.assertIn("act", recipe.summary())

    def test_checkpoint_keeps_the_recipe(self):
        w = ampx.tensor([1.0, 2.0], context=self.ctx, requires_grad=True, name="w")
        recipe = ampx.Fp8Recipe(self.ctx, amax_history_len=3)
        slot = recipe.add_tensor("forward", "w:input")
        recipe.quantize(slot, ampx.tensor([7.0], context=self.ctx))
        recipe.update()
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "ckpt.ampx")
            ampx.save_checkpoint_file(path, [w], fp8_recipe=recipe)
            restored = ampx.Fp8Recipe(self.ctx, amax_history_len=3)
            ampx.load_checkpoint_file(path, [w], fp8_recipe=restored)
            self.assertEqual(restored.slot(0), recipe.slot(0))
            self.assertEqual(restored.slot(0).scale, np.float32(448.0) / np.float32(7.0))
            ampx.load_checkpoint_file(path, [w])  # the section is skipped
            other = ampx.Fp8Recipe(self.ctx, amax_history_len=4)
            with self.assertRaises(ampx.InvalidArgumentError):
                ampx.load_checkpoint_file(path, [w], fp8_recipe=other)
            self.assertEqual(len(other), 0)

    def test_bad_input(self):
        with self.assertRaises(ampx.InvalidArgumentError) as caught:
            ampx.Fp8Recipe(self.ctx, amax_history_len=0)
        self.assertIn("amax_history_len", str(caught.exception))
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.Fp8Recipe(self.ctx, margin=-1)
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.Fp8Recipe(self.ctx, scaling="sometimes")
        recipe = ampx.Fp8Recipe(self.ctx)
        slot = recipe.add_tensor(name="a")
        with self.assertRaises(ampx.InvalidArgumentError):
            recipe.add_tensor(name="a")  # a name in use
        with self.assertRaises(ampx.InvalidArgumentError):
            recipe.quantize(5, ampx.tensor([1.0], context=self.ctx),
                            ampx.empty((1,), "f8e4m3", context=self.ctx))
        with self.assertRaises(ampx.DTypeError):
            recipe.quantize(slot, ampx.tensor([1.0], context=self.ctx),
                            ampx.empty((1,), "f8e5m2", context=self.ctx))
        with self.assertRaises(ampx.DTypeError):
            ampx.empty((1,), "f32", context=self.ctx).copy_fp8_(
                ampx.tensor([1.0], context=self.ctx))
        with self.assertRaises(ampx.DTypeError):  # other ops refuse FP8
            ampx.add(ampx.zeros((1,), "f8e4m3", context=self.ctx),
                     ampx.zeros((1,), "f8e4m3", context=self.ctx))
        self.assertEqual(recipe.slot(slot).amax, 0.0)  # nothing changed
        policy = ampx.Autocast(self.ctx, "bf16")
        with self.assertRaises(ampx.InvalidArgumentError):
            policy.set_fp8(recipe, -1)
        self.assertEqual(policy.fp8_stats(), ampx.Fp8Stats(0, 0, ""))
        recipe.close()
        for call in (recipe.update, lambda: len(recipe), lambda: recipe.add_tensor(),
                     lambda: policy.set_fp8(recipe)):
            with self.assertRaises(ampx.StaleHandleError):
                call()
        with self.assertRaises(ampx.ArgumentTypeError):
            policy.set_fp8("recipe")


class Fp8TrainingTest(unittest.TestCase):
    def test_linear_regression_under_fp8_autocast(self):
        ctx = ampx.Context(num_threads=1, seed=1)
        rng = np.random.default_rng(7)
        x = rng.uniform(-1, 1, (32, 16)).astype(np.float32)
        true_w = rng.uniform(-1, 1, (16, 16)).astype(np.float32)
        w = ampx.tensor(rng.uniform(-0.1, 0.1, (16, 16)), "f32", context=ctx,
                        requires_grad=True, name="w")
        xt, yt = ampx.tensor(x, context=ctx), ampx.tensor(x @ true_w.T, context=ctx)
        opt = ampx.SGD([w], lr=0.5)
        recipe = ampx.Fp8Recipe(ctx, amax_history_len=16)
        policy = ampx.Autocast(ctx, "bf16")
        policy.set_fp8(recipe, min_gemm_size=0)
        self.assertIs(policy.fp8_recipe, recipe)
        losses = []
        for _ in range(12):
            opt.zero_grad()
            with ctx.scope():
                with policy:
                    loss = ampx.mse_loss(ampx.linear(xt, w), yt)
                loss.backward()
                losses.append(loss.item())
            opt.step()
            recipe.update()
        self.assertTrue(all(b < a for a, b in zip(losses, losses[1:])), losses)
        self.assertLess(losses[-1], 0.6 * losses[0], losses)
        stats = policy.fp8_stats()
        self.assertEqual((stats.fp8_products, stats.fallbacks), (12, 0))
        names = [slot.name for slot in recipe.slots()]
        self.assertEqual(names, ["w:input", "w:weight", "w:grad_output"])
        self.assertEqual(recipe.slot(2).dtype, ampx.F8E5M2)
        weight = recipe.slot(1)
        self.assertGreater(weight.scale, 1.0)  # |w| < 1: scaled up towards 448
        # Small products fall back, counted with a reason.
        policy.set_fp8(recipe, min_gemm_size=1 << 40)
        with ctx.scope(), policy:
            ampx.linear(xt, w)
        stats = policy.fp8_stats()
        self.assertEqual(stats.fallbacks, 1)
        self.assertNotEqual(stats.last_fallback, "")
        policy.set_fp8(None)
        self.assertIsNone(policy.fp8_recipe)
        self.assertEqual(ampx.FP8_DEFAULT_MIN_GEMM_SIZE, 1 << 33)


if __name__ == "__main__":
    unittest.main()
