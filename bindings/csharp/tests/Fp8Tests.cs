// FP8 (ampx.h section 18): casts against the formats' definitions written
// here, a delayed-scaling recipe against Transformer Engine's formula over a
// scripted amax sequence, a linear model trained under FP8 autocast, the
// doctor's report, checkpoint files and bad input.
using System;
using System.IO;
using System.Linq;
using Ampx;

namespace AmpxTests
{
    public static class Fp8Tests
    {
        /// <summary>An OCP FP8 format as its definition gives it.</summary>
        private sealed class Format
        {
            public int EBits, MBits, Bias;
            public double Max;
            public bool E4M3;

            public double Decode(int code)
            {
                double sign = (code & 0x80) != 0 ? -1 : 1;
                int e = (code >> MBits) & ((1 << EBits) - 1), m = code & ((1 << MBits) - 1);
                if (E4M3 && e == 15 && m == 7) return double.NaN;
                if (!E4M3 && e == 31) return m == 0 ? sign * double.PositiveInfinity : double.NaN;
                if (e == 0) return sign * m * Math.Pow(2, 1 - Bias - MBits);
                return sign * (1 + (double)m / (1 << MBits)) * Math.Pow(2, e - Bias);
            }

            /// <summary>Nearest, ties to the even code; beyond max: +-max when saturating, else NaN (E4M3) / +-inf (E5M2).</summary>
            public byte Encode(double x, bool saturate)
            {
                if (double.IsNaN(x)) return 0x7f;
                int sign = (x < 0 || (x == 0 && 1 / x < 0)) ? 0x80 : 0;
                double a = Math.Abs(x);
                int maxCode = E4M3 ? 0x7e : 0x7b;
                double ulp = Max - Decode(maxCode - 1);
                double bestD = double.PositiveInfinity;
                int best = 0;
                for (int code = 0; code <= maxCode + 1; ++code)
                {
                    double v = code > maxCode ? Max + ulp : Decode(code);
                    double d = Math.Abs(v - a);
                    if (d < bestD || (d == bestD && (code & 1) == 0))
                    {
                        bestD = d;
                        best = code;
                    }
                }
                if (best > maxCode || double.IsInfinity(a))
                    return (byte)(sign | (saturate ? maxCode : E4M3 ? 0x7f : 0x7c));
                return (byte)(sign | best);
            }
        }

        private static readonly Format E4M3 = new Format { EBits = 4, MBits = 3, Bias = 7, Max = 448, E4M3 = true };
        private static readonly Format E5M2 = new Format { EBits = 5, MBits = 2, Bias = 15, Max = 57344 };

        private static float[] Values()
        {
            var v = new System.Collections.Generic.List<float>
            {
                0f, -0f, 1f, 448f, 464f, 465f, 480f, 500f, -500f, 57344f, 61439f, 61440f, 65536f,
                float.PositiveInfinity, float.NegativeInfinity, 1f / 512, 1f / 1024, 3f / 1024, 1f / 65536,
                1f / 131072, 3f / 131072, 1.0625f, 1.1875f, 0.1f, -0.3f, 1e-6f,
            };
            uint state = 12345;
            for (int i = 0; i < 500; ++i)
            {
                state = unchecked(state * 1103515245u + 12345u);
                double mantissa = (ushort)(state >> 8) / 65536.0 + 0.5;
                int exponent = (int)((state >> 24) % 36) - 20;
                v.Add((float)(((state & 1) == 0 ? 1 : -1) * mantissa * Math.Pow(2, exponent)));
            }
            return v.ToArray();
        }

        [Test]
        public static void Fp8CastsFollowTheFormatDefinitions()
        {
            var v = Values();
            using (var ctx = new Context())
            using (var src = Tensor.FromArray(ctx, v, new long[] { v.Length }))
            {
                foreach (var c in new[]
                {
                    Tuple.Create(DType.F8e4m3, E4M3, (Fp8Overflow)0, true),
                    Tuple.Create(DType.F8e5m2, E5M2, (Fp8Overflow)0, false),
                    Tuple.Create(DType.F8e4m3, E4M3, Fp8Overflow.NoSaturate, false),
                    Tuple.Create(DType.F8e5m2, E5M2, Fp8Overflow.Saturate, true),
                })
                {
                    // Cast follows torch (E4M3 saturates, E5M2 overflows to inf); CopyFp8From chooses.
                    Tensor dst;
                    if (c.Item3 == 0)
                    {
                        dst = src.Cast(c.Item1);
                    }
                    else
                    {
                        dst = Tensor.Empty(ctx, c.Item1, v.Length);
                        dst.CopyFp8From(src, c.Item3);
                    }
                    using (dst)
                    {
                        var bits = dst.ToFp8Bits();
                        for (int i = 0; i < v.Length; ++i)
                            Assert.Equal(c.Item2.Encode(v[i], c.Item4), bits[i],
                                         c.Item1 + " " + c.Item3 + " of " + v[i].ToString("R"));
                    }
                }
                using (var named = Tensor.FromArray(ctx, new[] { 448f, 500f, 1f / 512, 1f / 1024, 1.0625f, 1.1875f },
                                                    new long[] { 6 }, DType.F8e4m3))
                    Assert.Equal("7e 7e 01 00 38 3a", string.Join(" ", named.ToFp8Bits().Select(b => b.ToString("x2"))),
                                 "E4M3 max, saturation, subnormal, ties");
                using (var named = Tensor.FromArray(ctx, new[] { 57344f, 61440f, float.PositiveInfinity },
                                                    new long[] { 3 }, DType.F8e5m2))
                    Assert.Equal("7b 7c 7c", string.Join(" ", named.ToFp8Bits().Select(b => b.ToString("x2"))),
                                 "E5M2 max, overflow tie, inf");
                var codes = Enumerable.Range(0, 256).Select(i => (byte)i).ToArray();
                foreach (var f in new[] { Tuple.Create(DType.F8e4m3, E4M3), Tuple.Create(DType.F8e5m2, E5M2) })
                    using (var t = Tensor.FromBits(ctx, f.Item1, codes, 256))
                    {
                        var back = t.ToFloatArray();
                        for (int code = 0; code < 256; ++code)
                        {
                            double want = f.Item2.Decode(code);
                            Assert.True(double.IsNaN(want) ? float.IsNaN(back[code]) : back[code] == want,
                                        f.Item1 + " code " + code.ToString("x2") + " decodes to " + back[code]);
                        }
                    }
            }
        }

        /// <summary>TE's delayed update: fp8_max / amax / 2^margin in float; the previous scale for a 0 or non-finite amax; float.MaxValue for an infinite quotient.</summary>
        // Transformer Engine's default delayed update (the fused CUDA kernel of
        // common/recipe/delayed_scaling.cu): amax the history's max as fmaxf
        // takes it (NaN skipped), (fp8_max * 2^-margin) / amax in float; the
        // previous scale for a 0 or infinite amax; float.MaxValue for an
        // infinite quotient. (A step amax of 0 is not rolled in: see the caller.)
        private static float TeScale(float fp8Max, float[] history, float previous, int margin)
        {
            float amax = history.Where(a => !float.IsNaN(a)).DefaultIfEmpty(0f).Max();
            if (amax == 0 || float.IsInfinity(amax)) return previous;
            float scaledMax = fp8Max * (float)Math.Pow(2, -margin);
            float scale = scaledMax / amax;
            return float.IsInfinity(scale) ? float.MaxValue : scale;
        }

        [Test]
        public static void Fp8DelayedScalingFollowsTransformerEngine()
        {
            using (var ctx = new Context())
            using (var recipe = new Fp8Recipe(ctx, new Fp8RecipeOptions { AmaxHistoryLen = 4, Margin = 1 }))
            {
                long fwd = recipe.AddTensor(Fp8Role.Forward, "x"), bwd = recipe.AddTensor(Fp8Role.Backward, "dy");
                Assert.Equal(2L, recipe.SlotCount, "slots");
                var amaxes = new float?[] { 0, 3, 100, null, 0.5f, float.PositiveInfinity, 2, 1, 1, 1, 1, 1e-40f, 0.25f };
                var history = new float[4];
                var scales = new[] { 1f, 1f };
                var slots = new[] { Tuple.Create(fwd, E4M3, 448f), Tuple.Create(bwd, E5M2, 57344f) };
                foreach (var amax in amaxes)
                {
                    for (int k = 0; k < 2; ++k)
                    {
                        using (var st = recipe.ScaleTensor(slots[k].Item1))
                            Assert.Equal(scales[k], (float)st.Item(), "scale tensor");
                        if (amax == null) continue;
                        var x = new[] { amax.Value / 2, -amax.Value, 0f };
                        using (var src = Tensor.FromArray(ctx, x, new long[] { 3 }))
                        using (var q = recipe.Quantize(slots[k].Item1, src))
                        {
                            var bits = q.ToFp8Bits();
                            for (int i = 0; i < 3; ++i)
                                Assert.Equal(slots[k].Item2.Encode(x[i] * scales[k], true), bits[i], "quantized " + x[i]);
                        }
                    }
                    recipe.Update();
                    // A zero step amax (nothing non-zero quantized) leaves the
                    // history and the scale as they were.
                    float step = amax ?? 0f;
                    if (step != 0) history = history.Skip(1).Concat(new[] { step }).ToArray();
                    for (int k = 0; k < 2; ++k)
                    {
                        if (step != 0) scales[k] = TeScale(slots[k].Item3, history, scales[k], 1);
                        var info = recipe.Slot(slots[k].Item1);
                        Assert.True(info.History.SequenceEqual(history), "history after " + amax);
                        Assert.Equal(scales[k], info.Scale, "scale after amax " + amax);
                        Assert.Equal(1 / scales[k], info.ScaleInv, "inverse scale");
                        using (var inv = recipe.ScaleTensor(slots[k].Item1, inverse: true))
                            Assert.Equal(info.ScaleInv, (float)inv.Item(), "inverse scale tensor");
                    }
                }
                var dy = recipe.Slot(bwd);
                Assert.Equal("dy", dy.Name, "name");
                Assert.Equal(DType.F8e5m2, dy.DType, "a gradient's format under HYBRID");
            }
        }

        [Test]
        public static void Fp8DoctorTransposedAndCurrentScaling()
        {
            using (var ctx = new Context())
            using (var recipe = new Fp8Recipe(ctx, new Fp8RecipeOptions { Scaling = Fp8Scaling.Current }))
            {
                long slot = recipe.AddTensor(name: "act");
                var x = new[] { -2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f };
                using (var src = Tensor.FromArray(ctx, x, new long[] { 2, 3 }))
                using (var qt = Tensor.Empty(ctx, DType.F8e4m3, 3, 2))
                {
                    recipe.Quantize(slot, src, null, qt);
                    float scale = 448f / 2.5f; // current scaling: from the tensor's own amax
                    var bits = qt.ToFp8Bits();
                    for (int i = 0; i < 6; ++i)
                        Assert.Equal(E4M3.Encode(x[(i % 2) * 3 + i / 2] * scale, true), bits[i], "transposed " + i);
                }
            }
            using (var ctx = new Context())
            using (var recipe = new Fp8Recipe(ctx))
            using (var t = Tensor.FromArray(ctx, new[] { 1e-4f, 1000f, 1f, 0f }, new long[] { 4 }))
            {
                long slot = recipe.AddTensor(Fp8Role.Forward, "act");
                // At scale 1: 1e-4 flushes in E4M3 only, 1000 saturates E4M3 only.
                var r = recipe.Inspect(slot, t);
                Assert.Equal(3L, r.Count, "counted elements");
                Assert.Close(1.0 / 3, r.FlushedE4M3, 1e-12, "flushed E4M3");
                Assert.Close(1.0 / 3, r.SaturatedE4M3, 1e-12, "saturated E4M3");
                Assert.Equal(0.0, r.FlushedE5M2 + r.SaturatedE5M2, "E5M2 keeps both");
                Assert.Equal(DType.F8e4m3, r.DType, "the slot's format");
                Assert.True(recipe.Summary().Contains("act"), "summary names the slot");
            }
        }

        [Test]
        public static void Fp8AutocastTrainsALinearModel()
        {
            var rng = new Common.Lcg(7);
            var xs = rng.Take(32 * 16, 1f);
            var tw = rng.Take(16 * 16, 1f);
            var ys = new float[32 * 16];
            for (int i = 0; i < ys.Length; ++i)
                for (int k = 0; k < 16; ++k) ys[i] += xs[(i / 16) * 16 + k] * tw[(i % 16) * 16 + k];
            var opts = new Fp8RecipeOptions { AmaxHistoryLen = 16 };
            using (var ctx = new Context())
            using (var x = Tensor.FromArray(ctx, xs, new long[] { 32, 16 }))
            using (var y = Tensor.FromArray(ctx, ys, new long[] { 32, 16 }))
            using (var w = Common.Param(ctx, rng.Take(256, 0.1f), "w", 16, 16))
            using (var opt = Optimizer.Sgd(ctx, new[] { w }, new SgdOptions { Lr = 0.5 }))
            using (var recipe = new Fp8Recipe(ctx, opts))
            using (var policy = new Autocast(ctx, DType.Bf16))
            {
                policy.SetFp8(recipe, 0);
                var losses = new double[12];
                for (int step = 0; step < 12; ++step)
                {
                    opt.ZeroGrad();
                    using (ctx.Scope())
                    {
                        Tensor loss;
                        using (policy.Enter()) loss = Tensor.MseLoss(Tensor.Linear(x, w), y);
                        loss.Backward();
                        losses[step] = loss.Item();
                    }
                    opt.Step();
                    recipe.Update();
                }
                for (int i = 1; i < 12; ++i)
                    Assert.True(losses[i] < losses[i - 1], "the loss falls: " + string.Join(", ", losses));
                Assert.True(losses[11] < 0.6 * losses[0], "the loss falls enough: " + string.Join(", ", losses));
                var stats = policy.Fp8Stats;
                Assert.Equal(12L, stats.Fp8Products, "products in FP8");
                Assert.Equal(0L, stats.Fallbacks, "fallbacks");
                var names = Enumerable.Range(0, (int)recipe.SlotCount).Select(i => recipe.Slot(i).Name);
                Assert.Equal("w:input w:weight w:grad_output", string.Join(" ", names), "autocast's slots");
                policy.SetFp8(recipe, 1L << 40);
                using (ctx.Scope())
                using (policy.Enter())
                    Tensor.Linear(x, w);
                Assert.Equal(1L, policy.Fp8Stats.Fallbacks, "a small product falls back");
                Assert.True(policy.Fp8Stats.LastFallback.Length > 0, "with a reason");
                policy.SetFp8(null);

                var path = Path.Combine(Common.TempDir(), "fp8.ckpt");
                Fp8CheckpointFile.Save(path, new[] { w }, recipe);
                using (var restored = new Fp8Recipe(ctx, opts))
                {
                    Fp8CheckpointFile.Load(path, new[] { w }, restored);
                    var a = restored.Slot(1);
                    var b = recipe.Slot(1);
                    Assert.True(a.Name == b.Name && a.Scale == b.Scale && a.History.SequenceEqual(b.History),
                                "the recipe's state restored");
                }
                using (var other = new Fp8Recipe(ctx))
                {
                    var e = Assert.Throws<AmpxException>(() => Fp8CheckpointFile.Load(path, new[] { w }, other),
                                                         "other options");
                    Assert.Equal(Status.ErrInvalidArgument, e.Status, "status");
                    Assert.Equal(0L, other.SlotCount, "nothing changed");
                }
            }
        }

        [Test]
        public static void Fp8BadInputThrows()
        {
            using (var ctx = new Context())
            {
                var e = Assert.Throws<AmpxException>(() => new Fp8Recipe(ctx, new Fp8RecipeOptions { AmaxHistoryLen = 0 }),
                                                     "history length 0");
                Assert.Equal(Status.ErrInvalidArgument, e.Status, "status");
                Assert.True(e.Detail.Contains("amax_history_len"), "the option is named: " + e.Detail);
                Assert.Equal(Status.ErrInvalidArgument,
                             Assert.Throws<AmpxException>(() => new Fp8Recipe(ctx, new Fp8RecipeOptions { Margin = -1 }),
                                                          "margin -1").Status, "margin");
                var recipe = new Fp8Recipe(ctx);
                long slot = recipe.AddTensor(Fp8Role.Forward, "a");
                Assert.Equal(Status.ErrInvalidArgument,
                             Assert.Throws<AmpxException>(() => recipe.AddTensor(Fp8Role.Forward, "a"), "name in use").Status,
                             "duplicate name");
                using (var src = Tensor.FromArray(ctx, new[] { 1f }, new long[] { 1 }))
                using (var e5 = Tensor.Empty(ctx, DType.F8e5m2, 1))
                using (var f32 = Tensor.Empty(ctx, DType.F32, 1))
                {
                    Assert.Equal(Status.ErrDtype,
                                 Assert.Throws<AmpxException>(() => recipe.Quantize(slot, src, e5), "wrong format").Status,
                                 "quantize into E5M2 for an E4M3 slot");
                    Assert.Equal(Status.ErrInvalidArgument,
                                 Assert.Throws<AmpxException>(() => recipe.Quantize(5, src, e5), "slot 5").Status,
                                 "slot out of range");
                    Assert.Equal(Status.ErrDtype,
                                 Assert.Throws<AmpxException>(() => f32.CopyFp8From(src), "F32 destination").Status,
                                 "copy_fp8 into F32");
                    Assert.Equal(Status.ErrDtype,
                                 Assert.Throws<AmpxException>(() => e5.Add(e5), "add of FP8").Status, "other ops refuse FP8");
                }
                Assert.Equal(0f, recipe.Slot(slot).Amax, "nothing changed");
                using (var policy = new Autocast(ctx, DType.Bf16))
                {
                    Assert.Equal(Status.ErrInvalidArgument,
                                 Assert.Throws<AmpxException>(() => policy.SetFp8(recipe, -1), "negative size").Status,
                                 "min_gemm_size");
                    recipe.Dispose();
                    Assert.Throws<ObjectDisposedException>(() => recipe.Update(), "a disposed recipe");
                    Assert.Throws<ObjectDisposedException>(() => policy.SetFp8(recipe), "a disposed recipe given");
                    Assert.Throws<ObjectDisposedException>(() => { var n = recipe.SlotCount; }, "slot count");
                }
            }
        }
    }
}
