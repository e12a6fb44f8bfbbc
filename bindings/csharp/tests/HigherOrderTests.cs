// Autograd.Grad, Backward's retainGraph/createGraph, Scaler.UnscaleTensor
// (issue 41) and BceWithLogits' weight/posWeight (issue 43), against
// references computed here in double: closed forms (d/dx x^3 = 3x^2, d2/dx2
// = 6x, d3/dx3 = 6), central differences of a small MLP's gradient (written
// out below) for a Hessian-vector product, and torch's formula of the
// weighted binary cross-entropy.
//
// Tolerances: ampx computes in fp32, a few roundings of 2^-24 per element,
// so 1e-5 relative for the closed forms and losses; the Hessian-vector
// product sums a few dozen fp32 products per element, so 1e-4 of its largest
// element, while a missing term of a formula is off by O(1) of it. The
// central difference (eps 1e-4, in double) is exact to ~1e-8.
using System;
using System.Linq;
using Ampx;

namespace AmpxTests
{
    public static class HigherOrderTests
    {
        private static readonly float[] X0 = { -1.5f, -0.25f, 0.5f, 2.0f };

        private static Tensor Leaf(Context ctx, float[] data, params long[] shape)
        {
            var t = Tensor.FromArray(ctx, data, shape);
            t.RequiresGrad = true;
            return t;
        }

        private static void AllClose(double[] want, float[] got, double rtol, double atol, string what)
        {
            Assert.Equal(want.Length, got.Length, what + ": length");
            for (int i = 0; i < want.Length; ++i)
                Assert.Close(want[i], got[i], atol + rtol * Math.Abs(want[i]), what + "[" + i + "]");
        }

        private static double[] Map(float[] xs, Func<double, double> f)
        {
            return xs.Select(x => f(x)).ToArray();
        }

        private static AmpxException Fails(Status status, Action action, string what)
        {
            var e = Assert.Throws<AmpxException>(action, what);
            Assert.Equal(status, e.Status, what + ": " + e.Message);
            return e;
        }

        [Test]
        public static void GradOfXCubedToThirdOrder()
        {
            using (var ctx = new Context())
            using (ctx.Scope())
            {
                var x = Leaf(ctx, X0, 4);
                foreach (var cube in new[] { x * x * x, x.Pow(3) })
                {
                    var g = Autograd.Grad(cube.Sum(), x, createGraph: true);
                    Assert.True(g.RequiresGrad, "a gradient taken with createGraph requires grad");
                    AllClose(Map(X0, v => 3 * v * v), g.ToFloatArray(), 1e-5, 1e-6, "3x^2");
                    var h = Autograd.Grad(new[] { g.Sum() }, new[] { x }, createGraph: true)[0];
                    AllClose(Map(X0, v => 6 * v), h.ToFloatArray(), 1e-5, 1e-6, "6x");
                    var third = Autograd.Grad(h.Sum(), x);
                    AllClose(new double[] { 6, 6, 6, 6 }, third.ToFloatArray(), 1e-5, 0, "6");
                    Assert.True(x.Grad == null, "Grad accumulated into x.Grad");
                }
            }
        }

        [Test]
        public static void GradAllowUnusedGradOutputsAndOwnership()
        {
            using (var ctx = new Context())
            {
                var x = Leaf(ctx, X0, 4);
                var z = Leaf(ctx, X0, 4);
                var loss = (x * x).Sum();
                var e = Fails(Status.ErrInvalidArgument,
                              () => Autograd.Grad(new[] { loss }, new[] { x, z }, retainGraph: true), "unused input");
                Assert.True(e.Detail.Contains("inputs[1]") && e.Detail.Contains("allow_unused"), e.Detail);
                Tensor[] grads;
                using (var scope = ctx.Scope())
                {
                    grads = Autograd.Grad(new[] { loss }, new[] { x, z }, allowUnused: true);
                    Assert.Equal(2, grads.Length, "one entry per input");
                    Assert.True(grads[1] == null, "the unused input's gradient is null");
                    AllClose(Map(X0, v => 2 * v), grads[0].ToFloatArray(), 1e-6, 0, "2x");
                    scope.Keep(grads[0]);
                }
                AllClose(Map(X0, v => 2 * v), grads[0].ToFloatArray(), 1e-6, 0, "kept beyond the scope");
                grads[0].Dispose();

                // A vector-Jacobian product of a non-scalar output; h is an intermediate.
                var h = x.Tanh();
                var y = h * h;
                var v4 = new float[] { 1, -2, 0.5f, 3 };
                var both = Autograd.Grad(new[] { y }, new[] { h, x }, new[] { Tensor.FromArray(ctx, v4, new long[] { 4 }) });
                AllClose(X0.Select((v, i) => 2 * Math.Tanh(v) * v4[i]).ToArray(), both[0].ToFloatArray(), 1e-5, 1e-6, "dh");
                AllClose(X0.Select((v, i) => 2 * Math.Tanh(v) * (1 - Math.Tanh(v) * Math.Tanh(v)) * v4[i]).ToArray(),
                         both[1].ToFloatArray(), 1e-5, 1e-6, "dx");
            }
        }

        [Test]
        public static void GradBadInputThrowsAndChangesNothing()
        {
            using (var ctx = new Context())
            using (ctx.Scope())
            {
                var x = Leaf(ctx, X0, 4);
                var y = x.Tanh();
                var e = Fails(Status.ErrShape, () => Autograd.Grad(y, x), "a non-scalar output without gradOutputs");
                Assert.True(e.Detail.Contains("grad_outputs"), e.Detail);
                Fails(Status.ErrShape, () => Autograd.Grad(y, x, Tensor.Zeros(ctx, DType.F32, 3)), "gradOutputs of another shape");
                Fails(Status.ErrDtype, () => Autograd.Grad(y, x, Tensor.Zeros(ctx, DType.F16, 4)), "gradOutputs of another dtype");
                Assert.Throws<ArgumentException>(
                    () => Autograd.Grad(new[] { y }, new[] { x }, new Tensor[] { null, null }), "two gradOutputs for one output");
                Assert.Throws<ArgumentNullException>(() => Autograd.Grad(new[] { y }, new Tensor[] { null }), "a null input");
                Assert.Throws<ArgumentNullException>(() => Autograd.Grad(null, new[] { x }), "null outputs");
                var s = y.Sum();
                Fails(Status.ErrInvalidArgument, () => Autograd.Grad(new Tensor[0], new[] { x }), "no outputs");
                Fails(Status.ErrInvalidArgument, () => Autograd.Grad(new[] { s }, new Tensor[0]), "no inputs");
                Fails(Status.ErrInvalidArgument, () => Autograd.Grad(s, Tensor.FromArray(ctx, X0, new long[] { 4 })),
                      "an input that does not require grad");
                var g = Autograd.Grad(s, x);
                AllClose(Map(X0, v => 1 - Math.Tanh(v) * Math.Tanh(v)), g.ToFloatArray(), 1e-5, 0, "after the failures");
            }
        }

        [Test]
        public static void GradWithoutCreateGraphAndRetainGraph()
        {
            using (var ctx = new Context())
            using (ctx.Scope())
            {
                var x = Leaf(ctx, X0, 4);
                var cube = (x * x * x).Sum();
                var g = Autograd.Grad(cube, x, retainGraph: true);
                Assert.True(!g.RequiresGrad, "a gradient taken without createGraph does not require grad");
                Fails(Status.ErrInvalidArgument, () => Autograd.Grad(g.Sum(), x), "differentiating it again");
                var again = Autograd.Grad(cube, x);
                AllClose(Map(X0, v => 3 * v * v), again.ToFloatArray(), 1e-5, 0, "second pass");
                var e = Fails(Status.ErrOrder, () => Autograd.Grad(cube, x), "a third pass over a freed tape");
                Assert.True(e.Detail.Contains("retain_graph"), e.Detail);
            }
        }

        [Test]
        public static void BackwardWithRetainGraphAndCreateGraph()
        {
            using (var ctx = new Context())
            using (ctx.Scope())
            {
                var x = Leaf(ctx, X0, 4);
                var loss = (x * x * x).Sum();
                loss.Backward(retainGraph: true);
                loss.Backward();
                AllClose(Map(X0, v => 6 * v * v), x.Grad.ToFloatArray(), 1e-5, 0, "twice 3x^2");
                Fails(Status.ErrOrder, () => loss.Backward(retainGraph: false), "a backward over a freed tape");

                var y = Leaf(ctx, X0, 4);
                var cubeY = y * y * y;
                cubeY.Sum().Backward(createGraph: true);
                var gy = y.Grad;
                Assert.True(gy.RequiresGrad, "y.Grad after createGraph requires grad");
                AllClose(Map(X0, v => 6 * v), Autograd.Grad(gy.Sum(), y).ToFloatArray(), 1e-5, 1e-6, "6x");
            }
        }

        private const int N = 6, I = 3, H = 5, O = 2;

        // The gradient of tanh(x W1^T + b1) W2^T + b2 against y under a mean
        // squared error, with respect to [W1, b1, W2, b2], in double.
        private static double[][] MlpGradient(double[][] p, double[] x, double[] y)
        {
            double[] w1 = p[0], b1 = p[1], w2 = p[2], b2 = p[3];
            var g = new[] { new double[H * I], new double[H], new double[O * H], new double[O] };
            for (int n = 0; n < N; ++n)
            {
                var a = new double[H];
                for (int h = 0; h < H; ++h)
                {
                    double z = b1[h];
                    for (int i = 0; i < I; ++i) z += x[n * I + i] * w1[h * I + i];
                    a[h] = Math.Tanh(z);
                }
                var dOut = new double[O];
                for (int o = 0; o < O; ++o)
                {
                    double outv = b2[o];
                    for (int h = 0; h < H; ++h) outv += a[h] * w2[o * H + h];
                    dOut[o] = 2 * (outv - y[n * O + o]) / (N * O);
                    g[3][o] += dOut[o];
                }
                for (int h = 0; h < H; ++h)
                {
                    double dA = 0;
                    for (int o = 0; o < O; ++o)
                    {
                        dA += dOut[o] * w2[o * H + h];
                        g[2][o * H + h] += dOut[o] * a[h];
                    }
                    double dZ = dA * (1 - a[h] * a[h]);
                    g[1][h] += dZ;
                    for (int i = 0; i < I; ++i) g[0][h * I + i] += dZ * x[n * I + i];
                }
            }
            return g;
        }

        [Test]
        public static void HessianVectorProductOfASmallMlp()
        {
            Func<int, double, float[]> draw = (n, seed) =>
                Enumerable.Range(1, n).Select(k => (float)(Math.Sin(seed * k) * 0.8)).ToArray();
            var shapes = new[] { new long[] { H, I }, new long[] { H }, new long[] { O, H }, new long[] { O } };
            var init = shapes.Select((s, k) => draw((int)s.Aggregate(1L, (a, b) => a * b), 0.7 + 0.3 * k)).ToArray();
            var vecs = shapes.Select((s, k) => draw((int)s.Aggregate(1L, (a, b) => a * b), 1.9 + 0.4 * k)).ToArray();
            float[] xs = draw(N * I, 1.3), ys = draw(N * O, 3.7);
            using (var ctx = new Context())
            using (ctx.Scope())
            {
                var ps = init.Select((p, k) => Leaf(ctx, p, shapes[k])).ToArray();
                var x = Tensor.FromArray(ctx, xs, new long[] { N, I });
                var y = Tensor.FromArray(ctx, ys, new long[] { N, O });
                var hidden = Tensor.Linear(x, ps[0], ps[1]).Tanh();
                var loss = Tensor.MseLoss(Tensor.Linear(hidden, ps[2], ps[3]), y);
                var grads = Autograd.Grad(new[] { loss }, ps, createGraph: true);
                Tensor dot = null;
                for (int k = 0; k < 4; ++k)
                {
                    var term = (grads[k] * Tensor.FromArray(ctx, vecs[k], shapes[k])).Sum();
                    dot = dot == null ? term : dot + term;
                }
                var hv = Autograd.Grad(new[] { dot }, ps);

                Func<float[], double[]> f64 = v => v.Select(e => (double)e).ToArray();
                double[] x64 = f64(xs), y64 = f64(ys);
                Func<double, double[][]> shifted = sign =>
                    init.Select((p, k) => p.Select((e, i) => e + sign * 1e-4 * vecs[k][i]).ToArray()).ToArray();
                var plus = MlpGradient(shifted(1), x64, y64);
                var minus = MlpGradient(shifted(-1), x64, y64);
                var want = plus.Select((a, k) => a.Select((e, i) => (e - minus[k][i]) / 2e-4).ToArray()).ToArray();
                double scale = want.SelectMany(w => w).Max(e => Math.Abs(e));
                Assert.True(scale > 1e-2, "a Hessian-vector product worth testing: " + scale);
                var exact = MlpGradient(init.Select(f64).ToArray(), x64, y64);
                for (int k = 0; k < 4; ++k)
                {
                    AllClose(want[k], hv[k].ToFloatArray(), 0, 1e-4 * scale, "Hv of parameter " + k);
                    AllClose(exact[k], grads[k].ToFloatArray(), 0, 1e-5, "gradient of parameter " + k);
                }
            }
        }

        [Test]
        public static void UnscaleTensorAndThePenaltyRecipeSkippingAnOverflow()
        {
            using (var ctx = new Context())
            using (ctx.Scope())
            {
                var scaler = new Scaler(ctx, new ScalerOptions { InitScale = 1024 });
                var x0 = new float[] { -1, 0.25f, 0.75f };
                var x = Leaf(ctx, x0, 3);
                var scaled = scaler.ScaleLoss(x.Tanh().Sum());
                Assert.True(scaled.RequiresGrad, "the scaled loss is recorded");
                var g = Autograd.Grad(scaled, x, createGraph: true);
                var u = scaler.UnscaleTensor(g);
                Func<double, double> dtanh = v => 1 - Math.Tanh(v) * Math.Tanh(v);
                AllClose(Map(x0, v => 1024 * dtanh(v)), g.ToFloatArray(), 1e-6, 0, "scaled");
                AllClose(Map(x0, dtanh), u.ToFloatArray(), 1e-6, 0, "unscaled");
                AllClose(Map(x0, v => -2 * Math.Tanh(v) * dtanh(v)), Autograd.Grad(u.Sum(), x).ToFloatArray(), 1e-5, 0,
                         "d unscaled");
                Fails(Status.ErrDtype, () => scaler.UnscaleTensor(Tensor.FromArray(ctx, new long[] { 1, 2 }, 2)), "integers");
                Assert.Throws<ArgumentNullException>(() => scaler.UnscaleTensor(null), "null");

                // At a scale of 2^127 the scaled gradients (the largest > 2
                // unscaled: the loss is 16 times a sum) overflow fp32, the
                // penalty is inf, the step is skipped and the scale backs off
                // by 2^-24; at 2^103 the next step is taken.
                var w = Leaf(ctx, new[] { 0.5f, -0.3f, 0.8f, 0.1f, -0.6f, 0.4f }, 2, 3);
                var xs = Tensor.FromArray(ctx, new[] { 0.3f, -0.2f, 0.9f, -0.7f, 0.5f, 0.1f, 0.2f, 0.8f, -0.4f, -0.9f, 0.6f, 0.3f },
                                          new long[] { 4, 3 });
                var opt = Optimizer.Sgd(ctx, new[] { w }, new SgdOptions { Lr = 0.1 });
                var big = new Scaler(ctx, new ScalerOptions { InitScale = Math.Pow(2, 127), BackoffFactor = Math.Pow(2, -24) });
                var taken = new bool[2];
                for (int step = 0; step < 2; ++step)
                {
                    var before = w.ToFloatArray();
                    var loss = Tensor.Linear(xs, w).Tanh().Sum().Affine(16, 0);
                    var gw = Autograd.Grad(big.ScaleLoss(loss), w, createGraph: true);
                    var uw = big.UnscaleTensor(gw);
                    (loss + (uw * uw).Sum().Affine(0.5, 0)).Backward(big);
                    big.Step(opt);
                    big.Update();
                    opt.ZeroGrad();
                    taken[step] = !before.SequenceEqual(w.ToFloatArray());
                }
                Assert.Equal("False True", string.Join(" ", taken), "steps taken");
                Assert.Equal(1L, big.Counters.Skipped, "skipped steps");
                Assert.Equal(Math.Pow(2, 103), big.Scale, "scale after the backoff");
            }
        }

        [Test]
        public static void BceWithLogitsWeightsMatchTorchsFormula()
        {
            var xs = Enumerable.Range(1, 12).Select(k => (float)(4 * Math.Sin(1.7 * k))).ToArray();
            var ts = new float[] { 0, 1, 0.25f, 1, 1, 0, 0.5f, 0, 1, 0, 0.75f, 1 };
            var wRows = new float[] { 0.5f, 1.25f, 2, 0.75f }; // weight [4, 1]
            var pCols = new float[] { 0.5f, 3, 1.5f };        // pos_weight [3]
            var loss = new double[12];
            var dx = new double[12];
            var dt = new double[12];
            for (int i = 0; i < 12; ++i)
            {
                double x = xs[i], t = ts[i], w = wRows[i / 3], p = pCols[i % 3];
                double logSig = -Math.Log(1 + Math.Exp(-Math.Abs(x))) + Math.Min(x, 0);
                double logSigNeg = logSig - x;
                loss[i] = -w * (p * t * logSig + (1 - t) * logSigNeg);
                dx[i] = w * ((1 + (p - 1) * t) / (1 + Math.Exp(-x)) - p * t);
                dt[i] = w * (logSigNeg - p * logSig);
            }
            using (var ctx = new Context())
            using (ctx.Scope())
            {
                foreach (var reduction in new[] { Reduction.Mean, Reduction.Sum, Reduction.None })
                {
                    double divisor = reduction == Reduction.Mean ? 12 : 1;
                    var logits = Leaf(ctx, xs, 4, 3);
                    var targets = Leaf(ctx, ts, 4, 3);
                    var weight = Leaf(ctx, wRows, 4, 1);
                    var posWeight = Tensor.FromArray(ctx, pCols, new long[] { 3 }, DType.Bf16);
                    var outv = Tensor.BceWithLogits(logits, targets, reduction, weight: weight, posWeight: posWeight);
                    outv.Sum().Backward();
                    var what = reduction.ToString();
                    if (reduction == Reduction.None)
                        AllClose(loss, outv.ToFloatArray(), 1e-5, 1e-6, what + " losses");
                    else
                        AllClose(new[] { loss.Sum() / divisor }, outv.ToFloatArray(), 1e-5, 1e-6, what + " loss");
                    AllClose(dx.Select(e => e / divisor).ToArray(), logits.Grad.ToFloatArray(), 1e-5, 1e-6, what + " d/dlogits");
                    AllClose(dt.Select(e => e / divisor).ToArray(), targets.Grad.ToFloatArray(), 1e-5, 1e-6, what + " d/dtargets");
                    Assert.True(weight.Grad == null, "no gradient flows to a weight");
                }
                var l = Tensor.FromArray(ctx, xs, new long[] { 4, 3 });
                var tg = Tensor.FromArray(ctx, ts, new long[] { 4, 3 });
                Fails(Status.ErrShape, () => Tensor.BceWithLogits(l, tg, weight: Tensor.Zeros(ctx, DType.F32, 4)),
                      "a weight that does not broadcast");
                Fails(Status.ErrDtype, () => Tensor.BceWithLogits(l, tg, posWeight: Tensor.FromArray(ctx, new[] { 1, 2, 3 }, 3)),
                      "an integer pos_weight");
                using (var other = new Context())
                    Fails(Status.ErrDevice, () => Tensor.BceWithLogits(l, tg, weight: Tensor.Zeros(other, DType.F32, 3)),
                          "a weight of another context");
            }
        }

        // Cast and Clone are recorded (issue 47): for loss = sum(x*x) +
        // sum(y*y) with y = x cast, torch gives these x.grad (2x + 2 round(x))
        // and, for d sum(g*g)/dx, these second derivatives
        // (torch.autograd.grad with create_graph); each step is exact or one
        // rounding of the format, so 2e-6 relative, while a dropped cast
        // gives 2x.
        [Test]
        public static void GradientsThroughCastAndCloneMatchTorch()
        {
            var cases = new[]
            {
                Tuple.Create("bf16", (Func<Tensor, Tensor>)(t => t.Cast(DType.Bf16)),
                             new[] { 1.201562523841858, -6.806250095367432, 9.0 },
                             new[] { 9.618749618530273, -54.474998474121094, 72.0 }),
                Tuple.Create("f16", (Func<Tensor, Tensor>)(t => t.Cast(DType.F16)),
                             new[] { 1.200097680091858, -6.800390720367432, 9.0 },
                             new[] { 9.601171493530273, -54.404685974121094, 72.0 }),
                Tuple.Create("f32", (Func<Tensor, Tensor>)(t => t.Cast(DType.F32)),
                             new[] { 1.2000000476837158, -6.800000190734863, 9.0 },
                             new[] { 9.600000381469727, -54.400001525878906, 72.0 }),
                Tuple.Create("clone", (Func<Tensor, Tensor>)(t => t.Clone()),
                             new[] { 1.2000000476837158, -6.800000190734863, 9.0 },
                             new[] { 9.600000381469727, -54.400001525878906, 72.0 }),
            };
            var xs = new[] { 0.3f, -1.7f, 2.25f };
            foreach (var c in cases)
            {
                using (var ctx = new Context())
                using (ctx.Scope())
                {
                    var x = Leaf(ctx, xs, 3);
                    var y = c.Item2(x);
                    Assert.True(y.RequiresGrad, c.Item1 + ": the cast requires grad");
                    var loss = (x * x).Sum() + (y * y).Sum();
                    loss.Backward();
                    AllClose(c.Item3, x.Grad.ToFloatArray(), 2e-6, 0, c.Item1 + " x.Grad");

                    x = Leaf(ctx, xs, 3);
                    y = c.Item2(x);
                    var g = Autograd.Grad((x * x).Sum() + (y * y).Sum(), x, createGraph: true);
                    AllClose(c.Item3, g.ToFloatArray(), 2e-6, 0, c.Item1 + " g");
                    var h = Autograd.Grad((g * g).Sum(), x);
                    AllClose(c.Item4, h.ToFloatArray(), 2e-6, 0, c.Item1 + " d sum(g*g)/dx");

                    var plain = Tensor.FromArray(ctx, xs, new long[] { 3 });
                    Assert.True(!plain.Cast(DType.Bf16).RequiresGrad, c.Item1 + ": a plain cast is not recorded");
                }
            }
        }
    }
}
