// The rest of the surface against references computed here in double: ops,
// views, DLPack, gradient checkpointing and grad-ready hooks, autocast
// classes, the precision doctor on planted gradients, safetensors files read
// back byte for byte, and the communicator's refusals without MPI.
using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Text;
using Ampx;

namespace AmpxTests
{
    public static class FeatureTests
    {
        [Test]
        public static void OpsAgreeWithDoublePrecisionReferences()
        {
            using (var ctx = new Context())
            using (ctx.Scope())
            {
                var a = new float[] { 1, -2, 3, 0.5f, -1.5f, 2 };
                var b = new float[] { 0.25f, 4, -1 };
                var ta = Tensor.FromArray(ctx, a, new long[] { 2, 3 });
                var tb = Tensor.FromArray(ctx, b, new long[] { 3 });
                // Broadcasting a [3] row over [2, 3].
                var sum = (ta + tb).ToFloatArray();
                var prod = (ta * tb).ToFloatArray();
                var quot = (ta / tb).ToFloatArray();
                var diff = (ta - tb).ToFloatArray();
                for (int i = 0; i < 6; ++i)
                {
                    Assert.Equal(a[i] + b[i % 3], sum[i], "add " + i);
                    Assert.Equal(a[i] * b[i % 3], prod[i], "mul " + i);
                    Assert.Equal(a[i] / b[i % 3], quot[i], "div " + i);
                    Assert.Equal(a[i] - b[i % 3], diff[i], "sub " + i);
                }
                // [2, 3] x [3] = [2]
                var mv = ta.Matmul(tb).ToFloatArray();
                for (int r = 0; r < 2; ++r)
                    Assert.Close(Enumerable.Range(0, 3).Sum(k => (double)a[r * 3 + k] * b[k]), mv[r], 1e-6, "matmul " + r);
                // Softmax over dim 0 (columns), log-softmax over the rows.
                var sm = ta.Softmax(0).ToFloatArray();
                var lsm = ta.LogSoftmax().ToFloatArray();
                for (int c = 0; c < 3; ++c)
                {
                    double e0 = Math.Exp(a[c]), e1 = Math.Exp(a[3 + c]);
                    Assert.Close(e0 / (e0 + e1), sm[c], 1e-6, "softmax dim 0, column " + c);
                }
                for (int r = 0; r < 2; ++r)
                {
                    double lse = Math.Log(Enumerable.Range(0, 3).Sum(k => Math.Exp(a[r * 3 + k])));
                    for (int k = 0; k < 3; ++k) Assert.Close(a[r * 3 + k] - lse, lsm[r * 3 + k], 1e-6, "log-softmax");
                }
                var colSum = ta.Sum(new[] { 0 }).ToFloatArray();
                var rowMax = ta.Amax(new[] { -1 }, true);
                Assert.Equal("2 1", string.Join(" ", rowMax.Shape), "amax keeps the dimension");
                Assert.Equal("3 2", string.Join(" ", rowMax.ToFloatArray()), "row maxima");
                Assert.Equal("1.5 -3.5 5", string.Join(" ", colSum), "column sums");
                Assert.Close(a.Average(), ta.Mean().Item(), 1e-7, "mean");
                Assert.Close(a.Sum(x => (double)x * x), ta.Pow(2).Sum().Item(), 1e-6, "sum of squares");
                Assert.Equal("3 2", string.Join(" ", ta.Transpose(0, 1).Shape), "transpose");
                Assert.Equal("1 0.5 -2 -1.5 3 2", string.Join(" ", ta.Permute(1, 0).ToFloatArray()), "permute");
                Assert.Equal("3 2", string.Join(" ", ta.Reshape(-1, 2).Shape), "reshape with -1");
                var parts = ta.Split(new long[] { 1, 2 }, 1);
                Assert.Equal("-2 3 -1.5 2", string.Join(" ", parts[1].ToFloatArray()), "split");
                var chunks = ta.Chunk(2, 0);
                Assert.Equal(2, chunks.Length, "chunks");
                Assert.Equal(string.Join(" ", a), string.Join(" ", Tensor.Concat(chunks, 0).ToFloatArray()),
                             "concat undoes chunk");
                var relu = ta.Relu().ToFloatArray();
                var tanh = ta.Tanh().ToFloatArray();
                var sig = ta.Sigmoid().ToFloatArray();
                var exp = ta.Exp().ToFloatArray();
                var aff = ta.Affine(2, 1).ToFloatArray();
                for (int i = 0; i < 6; ++i)
                {
                    Assert.Equal(Math.Max(a[i], 0f), relu[i], "relu");
                    Assert.Close(Math.Tanh(a[i]), tanh[i], 1e-6, "tanh");
                    Assert.Close(1 / (1 + Math.Exp(-a[i])), sig[i], 1e-6, "sigmoid");
                    Assert.Close(Math.Exp(a[i]), exp[i], 1e-5 * Math.Exp(a[i]), "exp");
                    Assert.Equal(2 * a[i] + 1, aff[i], "affine");
                }
                // Cross-entropy of [2, 3] logits against labels [2, 0].
                var labels = Tensor.FromArray(ctx, new long[] { 2, 0 }, 2);
                double ce = 0;
                for (int r = 0; r < 2; ++r)
                {
                    double lse = Math.Log(Enumerable.Range(0, 3).Sum(k => Math.Exp(a[r * 3 + k])));
                    ce += lse - a[r * 3 + (r == 0 ? 2 : 0)];
                }
                Assert.Close(ce / 2, Tensor.CrossEntropy(ta, labels).Item(), 1e-6, "cross-entropy");
                Assert.Close(ce, Tensor.CrossEntropy(ta, labels, null, new CrossEntropyOptions { Reduction = Reduction.Sum })
                                       .Item(), 1e-5, "cross-entropy, summed");
                var masked = ta.MaskedFill(Tensor.FromArray(ctx, new[] { 1, 0, 0 }, 3), -9).ToFloatArray();
                Assert.Equal("-9 -2 3 -9 -1.5 2", string.Join(" ", masked), "masked fill");
                // A 1x1x3x3 image convolved with a 2x2 kernel of ones: window sums.
                var img = Tensor.FromArray(ctx, Enumerable.Range(1, 9).Select(v => (float)v).ToArray(),
                                           new long[] { 1, 1, 3, 3 });
                var ones = Tensor.FromArray(ctx, new float[] { 1, 1, 1, 1 }, new long[] { 1, 1, 2, 2 });
                Assert.Equal("12 16 24 28", string.Join(" ", Tensor.Conv2d(img, ones).ToFloatArray()), "conv2d");
                Assert.Equal("5 6 8 9", string.Join(" ", img.MaxPool2d(2, 2, new Pool2dOptions { Stride = new long[] { 1, 1 } })
                                                            .ToFloatArray()), "max pool");
                Assert.Equal("5", string.Join(" ", img.GlobalAvgPool2d().ToFloatArray()), "global average");
            }
        }

        [Test]
        public static void ViewsDlpackAndDtypes()
        {
            using (var ctx = new Context())
            using (var t = Tensor.FromArray(ctx, new float[] { 0, 1, 2, 3, 4, 5 }, new long[] { 6 }))
            {
                using (var view = t.View(8, DType.F32, 2, 2))
                {
                    Assert.Equal("2 3 4 5", string.Join(" ", view.ToFloatArray()), "a view at byte 8");
                    view.Fill(7);
                }
                Assert.Equal("0 1 7 7 7 7", string.Join(" ", t.ToFloatArray()), "writes through the view");
                var managed = t.ToDlpack();
                using (var imported = Tensor.FromDlpack(ctx, managed))
                {
                    Assert.True(imported.DataPointer == t.DataPointer, "DLPack shares the memory");
                    imported.Fill(1.5);
                }
                Assert.True(t.ToFloatArray().All(v => v == 1.5f), "writes through the imported tensor");
                using (var half = Tensor.FromArray(ctx, new float[] { 1, 0.1f, 65504, 1e5f }, new long[] { 4 }, DType.F16))
                {
                    Assert.Equal(DType.F16, half.DType, "dtype");
                    Assert.Equal("15360 11878 31743 31744", string.Join(" ", half.ToBits()), "fp16 bits (round to nearest)");
                    Assert.Equal(8UL, half.NBytes, "bytes");
                    Assert.Equal(2, Library.DTypeSize(DType.F16), "f16 size");
                    Assert.Equal("bf16", Library.DTypeName(DType.Bf16), "dtype name");
                }
                using (var bits = Tensor.FromBits(ctx, DType.Bf16, new ushort[] { 0x3f80, 0xc000 }, 2))
                    Assert.Equal("1 -2", string.Join(" ", bits.ToFloatArray()), "bf16 from bits");
#if !AMPX_NO_SPAN
                Span<float> span = stackalloc float[6];
                t.CopyTo(span);
                Assert.Equal(1.5f, span[5], "CopyTo a span");
                t.CopyFrom((ReadOnlySpan<float>)new float[] { 6, 5, 4, 3, 2, 1 });
                Assert.Equal(6.0f, t.ToFloatArray()[0], "CopyFrom a span");
#endif
                t.Name = "weights";
                Assert.Equal("weights", t.Name, "name");
                Assert.Equal("Tensor(f32 [6])", t.ToString(), "ToString");
            }
            Assert.True(Library.Version == Library.HeaderVersion && Library.VersionString.Length > 0, "versions");
            Assert.True(Library.CudaDeviceCount >= 0 && (Library.HasCuda || Library.CudaDeviceCount == 0), "CUDA");
        }

        [Test]
        public static void CheckpointedSegmentsGiveTheSameGradients()
        {
            using (var ctx = new Context())
            {
                var rng = new Common.Lcg(4);
                var x = Tensor.FromArray(ctx, rng.Take(12, 1), new long[] { 4, 3 });
                var w = Common.Param(ctx, rng.Take(15, 1), "w", 5, 3);
                var b = Common.Param(ctx, rng.Take(5, 1), "b", 5);
                Func<Tensor[], Tensor> segment = xs => Tensor.Linear(xs[0], w, b, Activation.Gelu).Tanh();
                string direct, checkpointed;
                using (ctx.Scope()) segment(new[] { x }).Sum().Backward();
                using (var g = w.Grad) direct = string.Join(" ", g.ToFloatArray().Select(Common.Hex));
                using (var g = w.Grad) g.Fill(0);
                using (var gb = b.Grad) gb.Fill(0);
                int runs = 0;
                using (ctx.Scope())
                {
                    var y = ctx.Checkpoint(xs => { ++runs; return segment(xs); }, x);
                    y.Sum().Backward();
                }
                using (var g = w.Grad) checkpointed = string.Join(" ", g.ToFloatArray().Select(Common.Hex));
                Assert.Equal(2, runs, "the segment ran forward and again in backward");
                Assert.Equal(direct, checkpointed, "gradients with and without checkpointing, bit for bit");
                // A two-output segment, its outputs owned outside any scope.
                var outs = ctx.Checkpoint(xs => new[] { xs[0].Relu(), xs[0].Sigmoid() }, 2, x);
                Assert.Equal(2, outs.Length, "two outputs");
                Assert.Close(1 / (1 + Math.Exp(-x.ToFloatArray()[0])), outs[1].ToFloatArray()[0], 1e-6, "second output");
                foreach (var t in outs.Concat(new[] { x, w, b })) t.Dispose();
            }
        }

        [Test]
        public static void GradReadyHooksSeeEveryParameter()
        {
            using (var ctx = new Context())
            using (var x = Tensor.FromArray(ctx, new float[] { 1, 2, 3, 4 }, new long[] { 2, 2 }))
            using (var w1 = Common.Param(ctx, new float[] { 1, 0, 0, 1 }, "w1", 2, 2))
            using (var w2 = Common.Param(ctx, new float[] { 2, 3 }, "w2", 1, 2))
            {
                var seen = new List<string>();
                Tensor kept = null;
                ctx.SetGradReadyHook(p =>
                {
                    seen.Add(p.Name);
                    using (var g = p.Grad) seen.Add(g.ToFloatArray().Sum().ToString());
                    if (kept == null) kept = p.Share();
                });
                using (ctx.Scope()) Tensor.Linear(Tensor.Linear(x, w1), w2).Sum().Backward();
                // d/dw2 sum(x w1^T w2^T) = column sums of x w1^T = (4, 6): sum 10;
                // d/dw1 = w2^T (column sums of x) = [[2*4, 2*6], [3*4, 3*6]]: sum 50.
                Assert.Equal("w2 10 w1 50", string.Join(" ", seen), "hooked in backward order with final gradients");
                Assert.Equal("w2", kept.Name, "a shared parameter outlives the hook call");
                kept.Dispose();
                // An engine with its own backward signals gradients itself.
                seen.Clear();
                w1.GradReady();
                Assert.Equal("w1 50", string.Join(" ", seen), "GradReady runs the hook");
                ctx.SetGradReadyHook(null);
                w1.GradReady();
                Assert.Equal(2, seen.Count, "no hook after removing it");
            }
        }

        [Test]
        public static void AutocastClassesAndCache()
        {
            using (var ctx = new Context())
            using (var ac = new Autocast(ctx, DType.Bf16))
            using (var x = Tensor.FromArray(ctx, new float[] { 1, 2, 3, 4 }, new long[] { 2, 2 }))
            using (var w = Common.Param(ctx, new float[] { 1, 0, 0, 1 }, "w", 2, 2))
            {
                Assert.Equal(OpClass.LowerPrecision, ac.GetOpClass("matmul"), "matmul's class");
                Assert.Equal(OpClass.Fp32, ac.GetOpClass("softmax"), "softmax's class");
                using (ctx.Scope())
                {
                    using (ac.Enter())
                    {
                        Assert.Equal(DType.Bf16, Tensor.Linear(x, w).DType, "linear under bf16 autocast");
                        Tensor.Linear(x, w);
                    }
                    long hits, misses;
                    ac.CacheStats(out hits, out misses);
                    Assert.Equal(1L, misses, "w cast once");
                    Assert.Equal(1L, hits, "and served from the cache the second time");
                    ac.SetOpClass("linear", OpClass.Fp32);
                    using (ac.Enter()) Assert.Equal(DType.F32, Tensor.Linear(x, w).DType, "overridden to fp32");
                }
                using (ctx.NoGrad())
                using (ctx.Scope())
                {
                    Assert.True(!ctx.GradEnabled, "no grad inside NoGrad");
                    Assert.True(!Tensor.Linear(x, w).RequiresGrad, "nothing recorded");
                }
                Assert.True(ctx.GradEnabled, "restored");
                Assert.Equal(Status.ErrOrder, Assert.Throws<AmpxException>(() => ac.Exit(), "exit without enter").Status,
                             "exit status");
            }
        }

        [Test]
        public static void DoctorSeesPlantedGradients()
        {
            using (var ctx = new Context())
            {
                // Exact powers of two: 2^e lands in bin 2 + e + 64; zero in bin 0.
                var planted = Enumerable.Repeat(0f, 3).Concat(Enumerable.Repeat((float)Math.Pow(2, -30), 5))
                    .Concat(Enumerable.Repeat(1f, 11)).Concat(new[] { 1024f }).ToArray();
                var p = Common.Param(ctx, new float[planted.Length], "planted", planted.Length);
                p.Grad = Tensor.FromArray(ctx, planted, new long[] { planted.Length });
                var opt = Optimizer.Sgd(ctx, new[] { p }, new SgdOptions { Lr = 0 });
                using (var doctor = new Doctor(opt, new DoctorOptions { Interval = 1 }))
                {
                    Assert.Equal(Status.ErrOrder, Assert.Throws<AmpxException>(() => doctor.ParamStats(0), "before a step")
                                                        .Status, "no sample yet");
                    opt.Step();
                    var overview = doctor.Examine();
                    Assert.Equal(1L, overview.Steps, "steps");
                    Assert.Equal(1, overview.ParamCount, "parameters");
                    var s = doctor.ParamStats(0);
                    Assert.Equal("planted", s.Name, "name");
                    Assert.Equal((long)planted.Length, s.Elements, "elements");
                    var bins = string.Join(" ", s.Histogram.Select((c, i) => c == 0 ? null : i + ":" + c).Where(v => v != null));
                    Assert.Equal(Doctor.BinZero + ":3 " + Doctor.BinadeBin(-30) + ":5 " + Doctor.BinadeBin(0) + ":11 " +
                                 Doctor.BinadeBin(10) + ":1", bins, "histogram");
                    Assert.Equal(1024.0, s.Amax, "amax");
                    Assert.Close(Math.Sqrt(11 + 1024.0 * 1024 + 5 * Math.Pow(2, -60)), s.GradNorm, 1e-9, "norm");
                    // fp16 flushes 2^-30 to zero: 3 + 5 of 20 elements.
                    Assert.Close(8.0 / 20, s.Fp16ZeroUnscaled, 1e-12, "fp16 zero fraction");
                    Assert.Equal(-1.0, s.LostUpdateFraction, "fp32 parameters lose no update");
                    Assert.Equal(1, doctor.History().Length, "history");
                    Assert.True(doctor.Summary().Length > 0, "summary");
                    Assert.Equal("scale_too_low", Doctor.FindingCodeName(DoctorFindingCode.ScaleTooLow), "code name");
                    Assert.Equal("", Doctor.CauseName(DoctorCause.None), "cause name");
                    Assert.True(Doctor.FindingCodeName((DoctorFindingCode)99) == null, "unknown code");
                    foreach (var f in doctor.Findings()) Assert.True(f.Message.Length > 0, "finding message");
                    doctor.SetInterval(0);
                    var dir = Common.TempDir();
                    var report = Path.Combine(dir, "report.html");
                    doctor.WriteReport(report);
                    Assert.True(File.ReadAllText(report).Contains("planted"), "the report names the parameter");
                    Directory.Delete(dir, true);
                    Assert.Throws<ArgumentOutOfRangeException>(() => Doctor.BinadeBin(16), "binade 16");
                }
                opt.Dispose();
                p.Dispose();
            }
        }

        [Test]
        public static void SafetensorsFilesRoundTrip()
        {
            var dir = Common.TempDir();
            var path = Path.Combine(dir, "weights.safetensors");
            using (var ctx = new Context())
            using (var a = Tensor.FromArray(ctx, new float[] { 1, 2.5f, -3 }, new long[] { 3 }))
            using (var b = Tensor.FromArray(ctx, new long[] { 7, -8 }, 1, 2))
            {
                a.Name = "a";
                SafetensorsFile.Save(path, new[] { a, b }, new[] { "alpha", "beta" },
                                     new Dictionary<string, string> { { "format", "pt" }, { "epoch", "3" } });
                var bytes = File.ReadAllBytes(path);
                var headerLength = (int)BitConverter.ToUInt64(bytes, 0);
                var header = Encoding.UTF8.GetString(bytes, 8, headerLength);
                Assert.True(header.Contains("\"alpha\"") && header.Contains("\"F32\"") && header.Contains("\"I64\""),
                            "the JSON header: " + header);
                using (var file = SafetensorsFile.Open(ctx, path))
                {
                    Assert.Equal(2, file.Count, "tensors in the file");
                    // Larger elements first, as the reference writer lays them out.
                    var beta = file.Entry(0);
                    Assert.Equal("beta", beta.Name, "first entry");
                    Assert.Equal(DType.I64, beta.DType, "its dtype");
                    Assert.Equal("I64", beta.DTypeName, "its format name");
                    Assert.Equal("1 2", string.Join(" ", beta.Shape), "its shape");
                    Assert.Equal(7L, BitConverter.ToInt64(bytes, (int)beta.Offset), "its first value in the file");
                    var alpha = file.Entry(file.Find("alpha"));
                    Assert.Equal(12UL, alpha.NBytes, "alpha's bytes");
                    Assert.Equal(2.5f, BitConverter.ToSingle(bytes, (int)alpha.Offset + 4), "alpha[1] in the file");
                    Assert.Equal("epoch=3 format=pt",
                                 string.Join(" ", file.Metadata.Select(kv => kv.Key + "=" + kv.Value)), "metadata");
                    using (var loaded = file.LoadTensor("alpha"))
                    {
                        Assert.Equal("1 2.5 -3", string.Join(" ", loaded.ToFloatArray()), "loaded");
                        Assert.Equal("alpha", loaded.Name, "named");
                    }
                    using (var into = Tensor.Zeros(ctx, DType.F16, 3))
                    {
                        Assert.Equal(Status.ErrDtype,
                                     Assert.Throws<AmpxException>(() => file.LoadInto(new[] { into }, new[] { "alpha" }),
                                                                  "F32 into F16").Status, "without convert");
                        file.LoadInto(new[] { into }, new[] { "alpha" }, convert: true);
                        Assert.Equal("1 2.5 -3", string.Join(" ", into.ToFloatArray()), "converted");
                    }
                    var missing = Assert.Throws<AmpxException>(() => file.Find("gamma"), "a missing name");
                    Assert.True(missing.Detail.Contains("gamma"), "names it: " + missing.Detail);
                }
                File.WriteAllBytes(path, new byte[] { 1, 2, 3 });
                Assert.Equal(Status.ErrCorrupt,
                             Assert.Throws<AmpxException>(() => SafetensorsFile.Open(ctx, path), "3 bytes").Status,
                             "a truncated file");
            }
            Directory.Delete(dir, true);
        }

        [Test]
        public static void CommunicatorsRefuseWhatTheyCannotUse()
        {
            using (var ctx = new Context())
            {
                var e = Assert.Throws<AmpxException>(() => Comm.FromMpi(ctx, IntPtr.Zero), "a NULL MPI_Comm");
                Assert.Equal(Status.ErrInvalidArgument, e.Status, "status");
                var n = Assert.Throws<AmpxException>(() => Comm.FromNccl(ctx, new IntPtr(8)), "NCCL on a CPU context");
                Assert.Equal(Status.ErrNotSupported, n.Status, "NCCL status");
                Assert.Throws<AmpxException>(() => Comm.InitNccl(ctx, new byte[3], 2, 0), "a 3-byte id");
                Assert.Throws<ArgumentNullException>(() => new DataParallel(null, null), "nulls");
            }
        }
    }
}
