// Training through the C# binding: the reference run of bindings/README.md
// bit for bit against the C program, an MLP in fp32 / fp16 / bf16 reaching a
// stated loss, AdamW steps against a double-precision reference written here,
// and a checkpoint file round trip that resumes bit for bit.
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using Ampx;

namespace AmpxTests
{
    public static class Common
    {
        public static string Hex(float value)
        {
            return BitConverter.ToUInt32(BitConverter.GetBytes(value), 0).ToString("x8");
        }

        /// <summary>A deterministic stream in [-1, 1).</summary>
        public sealed class Lcg
        {
            private ulong state;
            public Lcg(ulong seed) { state = seed; }
            public float Next()
            {
                state = unchecked(state * 6364136223846793005UL + 1442695040888963407UL);
                return (float)(state >> 40) / (1 << 24) * 2.0f - 1.0f;
            }
            public float[] Take(int count, float scale)
            {
                var v = new float[count];
                for (int i = 0; i < count; ++i) v[i] = Next() * scale;
                return v;
            }
        }

        public static Tensor Param(Context ctx, float[] values, string name, params long[] shape)
        {
            var t = Tensor.FromArray(ctx, values, shape);
            t.RequiresGrad = true;
            t.Name = name;
            return t;
        }

        public static string TempDir()
        {
            var root = Environment.GetEnvironmentVariable("AMPX_TEST_TMP") ?? Path.GetTempPath();
            var dir = Path.Combine(root, "ampx-csharp-" + Guid.NewGuid().ToString("N"));
            Directory.CreateDirectory(dir);
            return dir;
        }

        public static string Run(string program, string arguments = "")
        {
            var info = new ProcessStartInfo(program, arguments)
            {
                UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true,
            };
            using (var process = Process.Start(info))
            {
                var output = process.StandardOutput.ReadToEnd();
                var error = process.StandardError.ReadToEnd();
                process.WaitForExit();
                Assert.True(process.ExitCode == 0, program + " failed (" + process.ExitCode + "): " + error);
                return output;
            }
        }

        public static string Env(string name)
        {
            var value = Environment.GetEnvironmentVariable(name);
            Assert.True(!string.IsNullOrEmpty(value), name + " is not set (run_tests.sh sets it)");
            return value;
        }
    }

    public static class TrainingTests
    {
        /// <summary>The reference run of bindings/README.md, printed as tiny_train.c prints it.</summary>
        public static List<string> ReferenceRun()
        {
            var lines = new List<string>();
            using (var ctx = new Context())
            {
                var x = new float[32];
                var y = new float[16];
                var w1 = new float[64];
                var b1 = new float[16];
                var w2 = new float[32];
                var b2 = new float[2];
                for (int i = 0; i < 32; ++i) x[i] = ((i % 7) - 3) / 4.0f;
                for (int i = 0; i < 16; ++i) y[i] = ((i % 5) - 2) / 2.0f;
                for (int i = 0; i < 64; ++i) w1[i] = ((i * 37) % 17 - 8) / 32.0f;
                for (int i = 0; i < 16; ++i) b1[i] = ((i % 3) - 1) / 100.0f;
                for (int i = 0; i < 32; ++i) w2[i] = ((i * 29) % 13 - 6) / 32.0f;
                using (var tx = Tensor.FromArray(ctx, x, new long[] { 8, 4 }))
                using (var ty = Tensor.FromArray(ctx, y, new long[] { 8, 2 }))
                using (var pw1 = Common.Param(ctx, w1, "w1", 16, 4))
                using (var pb1 = Common.Param(ctx, b1, "b1", 16))
                using (var pw2 = Common.Param(ctx, w2, "w2", 2, 16))
                using (var pb2 = Common.Param(ctx, b2, "b2", 2))
                using (var opt = Optimizer.AdamW(ctx, new[] { pw1, pb1, pw2, pb2 },
                                                 new AdamOptions(true) { Lr = 0.01 }))
                using (var scaler = new Scaler(ctx, new ScalerOptions { InitScale = 1024, GrowthInterval = 3 }))
                using (var autocast = new Autocast(ctx, DType.Bf16))
                {
                    for (int step = 0; step < 12; ++step)
                    {
                        double scale;
                        float lossValue;
                        using (ctx.Scope())
                        {
                            Tensor loss;
                            using (autocast.Enter())
                            {
                                var h = Tensor.Linear(tx, pw1, pb1, Activation.Relu);
                                var output = Tensor.Linear(h, pw2, pb2);
                                loss = Tensor.MseLoss(output, ty);
                            }
                            lossValue = loss.ToFloatArray()[0];
                            loss.Backward(scaler);
                            if (step == 5)
                            {
                                using (var g = pw2.Grad)
                                {
                                    var grad = g.ToFloatArray();
                                    grad[3] = float.PositiveInfinity;
                                    g.CopyFrom(grad);
                                }
                            }
                            scaler.Unscale(opt);
                            opt.ClipGradNorm(1.0, 2.0);
                            scaler.Step(opt);
                            scaler.Update();
                            scale = scaler.Scale;
                            opt.ZeroGrad();
                        }
                        lines.Add("step " + step + " loss " + Common.Hex(lossValue) + " scale " +
                                  scale.ToString("R", CultureInfo.InvariantCulture));
                    }
                    lines.Add("w2" + string.Concat(pw2.ToFloatArray().Select(v => " " + Common.Hex(v))));
                }
            }
            return lines;
        }

        [Test]
        public static void ReferenceRunMatchesTheCProgramBitForBit()
        {
            var c = Common.Run(Common.Env("AMPX_TINY_TRAIN")).Split(new[] { '\n' }, StringSplitOptions.RemoveEmptyEntries);
            var cs = ReferenceRun();
            Assert.Equal(c.Length, cs.Count, "line count (C:\n" + string.Join("\n", c) + "\nC#:\n" +
                                              string.Join("\n", cs) + ")");
            for (int i = 0; i < c.Length; ++i) Assert.Equal(c[i], cs[i], "line " + (i + 1));
            Assert.Equal(13, c.Length, "12 steps and w2");
            Assert.True(c[5].EndsWith("scale 1024"), "step 5's inf backs the scale off to 1024: " + c[5]);
        }

        /// <summary>
        /// A 8 -> 32 -> 1 MLP on a fixed nonlinear target, AdamW (lr 1e-2), 150
        /// steps; under autocast with `dtype` (or none for F32) with a scaler.
        /// Returns the first and last losses and the scaler's counters.
        /// </summary>
        private static Tuple<float, float, ScalerCounters> TrainMlp(DType dtype)
        {
            using (var ctx = new Context())
            {
                var rng = new Common.Lcg(42);
                int n = 64, din = 8, dh = 32;
                var xs = rng.Take(n * din, 1);
                var ys = new float[n];
                for (int i = 0; i < n; ++i)
                {
                    var r = i * din;
                    ys[i] = (float)Math.Tanh(xs[r] * xs[r + 1] + xs[r + 2]) - 0.5f * xs[r + 3];
                }
                var x = Tensor.FromArray(ctx, xs, new long[] { n, din });
                var y = Tensor.FromArray(ctx, ys, new long[] { n, 1 });
                var w1 = Common.Param(ctx, rng.Take(dh * din, 0.35f), "w1", dh, din);
                var b1 = Common.Param(ctx, new float[dh], "b1", dh);
                var w2 = Common.Param(ctx, rng.Take(dh, 0.18f), "w2", 1, dh);
                var b2 = Common.Param(ctx, new float[1], "b2", 1);
                var opt = Optimizer.AdamW(ctx, new[] { w1, b1, w2, b2 }, new AdamOptions(true) { Lr = 1e-2 });
                var scaler = new Scaler(ctx, new ScalerOptions { GrowthInterval = 10 });
                scaler.Attach(opt);
                var autocast = dtype == DType.F32 ? null : new Autocast(ctx, dtype);
                var losses = new List<float>();
                for (int step = 0; step < 150; ++step)
                {
                    using (ctx.Scope())
                    {
                        Tensor loss;
                        using (autocast == null ? null : autocast.Enter())
                        {
                            var h = Tensor.Linear(x, w1, b1, Activation.Gelu);
                            loss = Tensor.MseLoss(Tensor.Linear(h, w2, b2), y);
                        }
                        Assert.Equal(DType.F32, loss.DType, "losses are F32 under autocast");
                        losses.Add((float)loss.Item());
                        loss.Backward(scaler);
                        scaler.Unscale(opt);
                        opt.ClipGradNorm(5.0);
                        scaler.Step(opt);
                        scaler.Update();
                        opt.ZeroGrad();
                    }
                }
                Assert.True(losses.All(l => !float.IsNaN(l) && !float.IsInfinity(l)), "finite losses");
                var counters = scaler.Counters;
                foreach (var d in new IDisposable[] { autocast, scaler, opt, w1, b1, w2, b2, x, y })
                    if (d != null) d.Dispose();
                return Tuple.Create(losses[0], losses[losses.Count - 1], counters);
            }
        }

        [Test]
        public static void MlpLearnsInF32()
        {
            var r = TrainMlp(DType.F32);
            Console.WriteLine("      f32: loss {0} -> {1}", r.Item1, r.Item2);
            Assert.True(r.Item2 < 0.02f && r.Item2 < 0.1f * r.Item1, "f32 loss " + r.Item1 + " -> " + r.Item2);
            Assert.Equal(150L, r.Item3.Updates, "updates");
        }

        [Test]
        public static void MlpLearnsInF16WithTheScaler()
        {
            var r = TrainMlp(DType.F16);
            Console.WriteLine("      f16: loss {0} -> {1}, backoffs {2}", r.Item1, r.Item2, r.Item3.Backoffs);
            Assert.True(r.Item2 < 0.02f && r.Item2 < 0.1f * r.Item1, "f16 loss " + r.Item1 + " -> " + r.Item2);
            // The scale grows every 10 clean steps until the f16 gradients overflow.
            Assert.True(r.Item3.Backoffs >= 1 && r.Item3.Skipped >= 1, "f16 overflows back the scale off");
        }

        [Test]
        public static void MlpLearnsInBf16()
        {
            var r = TrainMlp(DType.Bf16);
            Console.WriteLine("      bf16: loss {0} -> {1}", r.Item1, r.Item2);
            Assert.True(r.Item2 < 0.03f && r.Item2 < 0.1f * r.Item1, "bf16 loss " + r.Item1 + " -> " + r.Item2);
        }

        [Test]
        public static void AdamWStepsMatchADoublePrecisionReference()
        {
            // Linear regression y = x w^T + b, mean squared error, AdamW: the
            // gradient and the update written out here in double.
            var rng = new Common.Lcg(7);
            int n = 16, d = 5;
            var xs = rng.Take(n * d, 1);
            var ys = rng.Take(n, 1);
            var w0 = rng.Take(d, 0.5f);
            double lr = 0.05, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
            var w = w0.Select(v => (double)v).ToArray();
            double bias = 0;
            var m = new double[d + 1];
            var v2 = new double[d + 1];
            using (var ctx = new Context())
            using (var x = Tensor.FromArray(ctx, xs, new long[] { n, d }))
            using (var y = Tensor.FromArray(ctx, ys, new long[] { n, 1 }))
            using (var tw = Common.Param(ctx, w0, "w", 1, d))
            using (var tb = Common.Param(ctx, new float[1], "b", 1))
            using (var opt = Optimizer.AdamW(ctx, new[] { tw, tb }, new AdamOptions(true) { Lr = lr }))
            {
                for (int t = 1; t <= 5; ++t)
                {
                    using (ctx.Scope())
                    {
                        var loss = Tensor.MseLoss(Tensor.Linear(x, tw, tb), y);
                        loss.Backward();
                        opt.Step();
                        opt.ZeroGrad();
                    }
                    var grad = new double[d + 1];
                    for (int i = 0; i < n; ++i)
                    {
                        double p = bias;
                        for (int j = 0; j < d; ++j) p += w[j] * xs[i * d + j];
                        double r = 2 * (p - ys[i]) / n;
                        for (int j = 0; j < d; ++j) grad[j] += r * xs[i * d + j];
                        grad[d] += r;
                    }
                    for (int j = 0; j <= d; ++j)
                    {
                        double p = j < d ? w[j] : bias;
                        p *= 1 - lr * wd;
                        m[j] = b1 * m[j] + (1 - b1) * grad[j];
                        v2[j] = b2 * v2[j] + (1 - b2) * grad[j] * grad[j];
                        double denom = Math.Sqrt(v2[j]) / Math.Sqrt(1 - Math.Pow(b2, t)) + eps;
                        p -= lr / (1 - Math.Pow(b1, t)) * m[j] / denom;
                        if (j < d) w[j] = p; else bias = p;
                    }
                }
                var got = tw.ToFloatArray();
                for (int j = 0; j < d; ++j) Assert.Close(w[j], got[j], 1e-5, "w[" + j + "] after 5 AdamW steps");
                Assert.Close(bias, tb.ToFloatArray()[0], 1e-5, "b after 5 AdamW steps");
                Assert.Equal(5L, opt.StepCount, "step count");
                Assert.Equal(5L, opt.ParamSteps(tw), "parameter steps");
                Assert.True(opt.LastStepTaken, "last step taken");
            }
        }

        private sealed class Model : IDisposable
        {
            public Context Ctx = new Context();
            public Tensor X, Y, W, B;
            public Optimizer Opt;
            public Scaler Scaler;

            public Model()
            {
                var rng = new Common.Lcg(3);
                X = Tensor.FromArray(Ctx, rng.Take(24, 1), new long[] { 6, 4 });
                Y = Tensor.FromArray(Ctx, rng.Take(12, 1), new long[] { 6, 2 });
                W = Common.Param(Ctx, rng.Take(8, 0.5f), "w", 2, 4);
                B = Common.Param(Ctx, new float[2], "b", 2);
                Opt = Optimizer.Adam(Ctx, new[] { W, B }, new AdamOptions { Lr = 0.02 });
                Scaler = new Scaler(Ctx, new ScalerOptions { InitScale = 256, GrowthInterval = 2 });
            }

            public string Step()
            {
                using (Ctx.Scope())
                {
                    var loss = Tensor.MseLoss(Tensor.Linear(X, W, B), Y);
                    var value = (float)loss.Item();
                    loss.Backward(Scaler);
                    Scaler.Step(Opt);
                    Scaler.Update();
                    Opt.ZeroGrad();
                    return Common.Hex(value) + " " + Scaler.Scale + " " +
                           string.Join(",", W.ToFloatArray().Select(Common.Hex));
                }
            }

            public void Dispose()
            {
                Scaler.Dispose(); Opt.Dispose(); W.Dispose(); B.Dispose(); X.Dispose(); Y.Dispose(); Ctx.Dispose();
            }
        }

        [Test]
        public static void CheckpointFileResumesBitForBit()
        {
            var dir = Common.TempDir();
            var path = Path.Combine(dir, "model.ampx");
            List<string> expected;
            using (var a = new Model())
            {
                for (int i = 0; i < 3; ++i) a.Step();
                CheckpointFile.Save(path, new[] { a.W, a.B }, a.Opt, a.Scaler);
                expected = Enumerable.Range(0, 4).Select(_ => a.Step()).ToList();
            }
            using (var b = new Model())
            {
                var before = b.W.ToFloatArray();
                CheckpointFile.Load(path, new[] { b.W, b.B }, b.Opt, b.Scaler);
                Assert.True(!before.SequenceEqual(b.W.ToFloatArray()), "the load changed w");
                var resumed = Enumerable.Range(0, 4).Select(_ => b.Step()).ToList();
                for (int i = 0; i < 4; ++i) Assert.Equal(expected[i], resumed[i], "resumed step " + i);
                // A file with one byte changed is refused, and nothing changes.
                var bytes = File.ReadAllBytes(path);
                bytes[bytes.Length / 2] ^= 0x40;
                var bad = Path.Combine(dir, "bad.ampx");
                File.WriteAllBytes(bad, bytes);
                var w = b.W.ToFloatArray();
                var e = Assert.Throws<AmpxException>(() => CheckpointFile.Load(bad, new[] { b.W, b.B }, b.Opt, b.Scaler),
                                                     "a corrupt file");
                Assert.Equal(Status.ErrCorrupt, e.Status, "status");
                Assert.True(w.SequenceEqual(b.W.ToFloatArray()), "nothing changed");
            }
            Directory.Delete(dir, true);
        }

        [Test]
        public static void OptimizerStateAndScalerStateRoundTrip()
        {
            using (var a = new Model())
            using (var b = new Model())
            {
                for (int i = 0; i < 2; ++i) a.Step();
                var state = a.Opt.SaveState();
                var scalerState = a.Scaler.GetState();
                Assert.Equal(2L, scalerState.Counters.Updates, "updates in the saved scaler state");
                b.Opt.LoadState(state);
                b.Scaler.SetState(scalerState);
                // Parameters are the program's: copy them over as a checkpoint would.
                b.W.CopyFrom(a.W.ToFloatArray());
                b.B.CopyFrom(a.B.ToFloatArray());
                Assert.Equal(a.Step(), b.Step(), "the next step after restoring");
                var garbage = new byte[state.Length];
                var e = Assert.Throws<AmpxException>(() => b.Opt.LoadState(garbage), "garbage state");
                Assert.Equal(Status.ErrCorrupt, e.Status, "status of garbage state");
                Assert.Equal(a.Step(), b.Step(), "the failed load changed nothing");
            }
        }

        [Test]
        public static void LearningRateSchedulesFollowTheirFormula()
        {
            var cosine = new LrSchedule { WarmupSteps = 2, Decay = LrDecay.Cosine, TotalSteps = 10, MinLr = 0.01 };
            Assert.Close(0.1 * 0.5, cosine.Value(0.1, 1), 1e-12, "warm-up step 1 of 2");
            // j = 4 of T = 8: min + (base - min) (1 + cos(pi / 2)) / 2
            Assert.Close(0.01 + 0.09 * 0.5, cosine.Value(0.1, 6), 1e-12, "cosine half way");
            Assert.Throws<AmpxException>(() => new LrSchedule { StepSize = 0, Decay = LrDecay.Step }.Value(0.1, 0),
                                         "step size 0");
            using (var m = new Model())
            {
                m.Opt.SetLrSchedule(0, new LrSchedule { Decay = LrDecay.Step, StepSize = 1, Gamma = 0.5 });
                var back = m.Opt.GetLrSchedule(0);
                Assert.Equal(LrDecay.Step, back.Decay, "decay read back");
                Assert.Close(0.5, back.Gamma, 0, "gamma read back");
                m.Opt.SetLr(0, 0.03);
                Assert.Close(0.03, m.Opt.GetLr(0), 0, "base lr");
                Assert.Equal(1, m.Opt.GroupCount, "groups");
                using (var extra = Common.Param(m.Ctx, new float[3], "extra", 3))
                {
                    Assert.Equal(1, m.Opt.AddGroup(new[] { extra }, 0.5, 0), "index of the new group");
                    Assert.Close(0.5, m.Opt.GetLr(1), 0, "its lr");
                }
                m.Opt.SetLrSchedule(0, null);
                Assert.Equal(LrDecay.Constant, m.Opt.GetLrSchedule(0).Decay, "null: constant");
            }
        }
    }
}
