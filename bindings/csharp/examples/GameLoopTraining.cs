// GameLoopTraining.cs -- training inside a game loop, as an engine script would.
//
// The "game" runs a fixed 60 Hz timestep: every frame it launches a projectile
// (gravity and quadratic air drag, integrated by the game itself) and moves the
// ones in flight. One game second after launch, a projectile's launch state and
// where it ended up become a training sample, written by the game into its own
// arrays -- a ring of the latest 128 samples that ampx reads in place
// (Tensor.Wrap: no copy, no per-frame allocation). Each frame then trains a
// small network to predict the landing point from the launch state, in fp16
// under autocast with a dynamic loss scaler and AdamW, for as many steps as
// fit in the frame's training budget (at least one), inside a Scope, so a
// frame leaves no garbage for the collector.
//
// The loop runs frames back to back, as a headless server does (--realtime
// sleeps to 60 Hz), and prints one row per game second: the steps that fit,
// the time they took per frame against the budget, the loss and the scale.
//
// Run:  mono GameLoopTraining.exe [--quick] [--frames N] [--budget-ms B] [--realtime]
// Exits 1 unless the loss on launches the network never saw fell tenfold.
using System;
using System.Diagnostics;
using System.Globalization;
using System.Threading;
using Ampx;

public static class GameLoopTraining
{
    private const double Dt = 1.0 / 60.0;
    private const int Horizon = 60;   // frames between launch and the sample
    private const int Ring = 128;     // samples the network trains on
    private const int Hidden = 32;
    private const double Gravity = 9.81, Drag = 0.05, Unit = 10.0; // metres per network unit

    private struct Projectile
    {
        public double X, Y, Vx, Vy;
        public float[] Launch; // the network's input: the launch state in units
        public int Age;
    }

    private static ulong rng = 2024;

    private static double Uniform(double lo, double hi)
    {
        rng = unchecked(rng * 6364136223846793005UL + 1442695040888963407UL);
        return lo + (hi - lo) * (rng >> 11) / 9007199254740992.0;
    }

    private static Projectile Launch()
    {
        var p = new Projectile
        {
            X = Uniform(-1, 1), Y = Uniform(-1, 1), Vx = Uniform(-8, 8), Vy = Uniform(0, 12),
        };
        p.Launch = new[] { (float)(p.X / Unit), (float)(p.Y / Unit), (float)(p.Vx / Unit), (float)(p.Vy / Unit) };
        return p;
    }

    /// <summary>The game's physics: one semi-implicit Euler step with quadratic drag.</summary>
    private static void Move(ref Projectile p)
    {
        double speed = Math.Sqrt(p.Vx * p.Vx + p.Vy * p.Vy);
        p.Vx += -Drag * speed * p.Vx * Dt;
        p.Vy += (-Drag * speed * p.Vy - Gravity) * Dt;
        p.X += p.Vx * Dt;
        p.Y += p.Vy * Dt;
        ++p.Age;
    }

    public static int Main(string[] args)
    {
        int frames = 900;
        double budgetMs = 2.0;
        bool realtime = false;
        for (int i = 0; i < args.Length; ++i)
        {
            if (args[i] == "--quick") frames = 480;
            else if (args[i] == "--frames" && i + 1 < args.Length) frames = int.Parse(args[++i]);
            else if (args[i] == "--budget-ms" && i + 1 < args.Length)
                budgetMs = double.Parse(args[++i], CultureInfo.InvariantCulture);
            else if (args[i] == "--realtime") realtime = true;
            else
            {
                Console.Error.WriteLine("usage: GameLoopTraining [--quick] [--frames N] [--budget-ms B] [--realtime]");
                return 2;
            }
        }

        // The game's own memory: ampx reads it in place.
        var inputs = new float[Ring * 4];
        var targets = new float[Ring * 2];
        var inFlight = new Projectile[Horizon];
        int launched = 0, samples = 0;

        // Launches the network never trains on, to measure what it learned.
        var heldOut = new float[64 * 4];
        var heldOutTargets = new float[64 * 2];
        for (int i = 0; i < 64; ++i)
        {
            var p = Launch();
            for (int f = 0; f < Horizon; ++f) Move(ref p);
            Array.Copy(p.Launch, 0, heldOut, i * 4, 4);
            heldOutTargets[i * 2] = (float)(p.X / Unit);
            heldOutTargets[i * 2 + 1] = (float)(p.Y / Unit);
        }

        using (var ctx = new Context())
        using (var x = Tensor.Wrap(ctx, inputs, Ring, 4))
        using (var y = Tensor.Wrap(ctx, targets, Ring, 2))
        using (var testX = Tensor.FromArray(ctx, heldOut, new long[] { 64, 4 }))
        using (var testY = Tensor.FromArray(ctx, heldOutTargets, new long[] { 64, 2 }))
        {
            var init = new Func<int, double, float[]>((n, scale) =>
            {
                var v = new float[n];
                for (int i = 0; i < n; ++i) v[i] = (float)Uniform(-scale, scale);
                return v;
            });
            var w1 = Tensor.FromArray(ctx, init(Hidden * 4, 0.5), new long[] { Hidden, 4 });
            var b1 = Tensor.Zeros(ctx, DType.F32, Hidden);
            var w2 = Tensor.FromArray(ctx, init(2 * Hidden, 0.18), new long[] { 2, Hidden });
            var b2 = Tensor.Zeros(ctx, DType.F32, 2);
            var parameters = new[] { w1, b1, w2, b2 };
            foreach (var p in parameters) p.RequiresGrad = true;
            using (var opt = Optimizer.AdamW(ctx, parameters, new AdamOptions(true) { Lr = 3e-3, WeightDecay = 0 }))
            using (var scaler = new Scaler(ctx, new ScalerOptions { GrowthInterval = 200 }))
            using (var autocast = new Autocast(ctx, DType.F16))
            {
                Func<Tensor, Tensor, Tensor> loss = (input, target) =>
                {
                    using (autocast.Enter())
                    {
                        var h = Tensor.Linear(input, w1, b1, Activation.Gelu);
                        return Tensor.MseLoss(Tensor.Linear(h, w2, b2), target);
                    }
                };
                Func<double> testLoss = () =>
                {
                    using (ctx.NoGrad())
                    using (ctx.Scope())
                        return loss(testX, testY).Item();
                };

                double firstTestLoss = testLoss(), lastLoss = double.NaN;
                long totalSteps = 0, secondSteps = 0;
                double secondTrainMs = 0;
                int trainingFrames = 0;
                var frameClock = new Stopwatch();
                Console.WriteLine("ampx {0}: a {1:F1} ms training budget per 60 Hz frame; held-out loss {2:F5} before training",
                                  Library.VersionString, budgetMs, firstTestLoss);
                Console.WriteLine(" second  samples  steps/frame  train ms/frame  train loss  held-out loss    scale");
                var wall = Stopwatch.StartNew();
                for (int frame = 0; frame < frames; ++frame)
                {
                    frameClock.Restart();
                    // ---- the game's update: launch one, move the rest --------
                    var slot = frame % Horizon;
                    if (launched >= Horizon)
                    {
                        // The projectile in this slot is a game second old: a sample.
                        var done = inFlight[slot];
                        var row = samples % Ring;
                        Array.Copy(done.Launch, 0, inputs, row * 4, 4);
                        targets[row * 2] = (float)(done.X / Unit);
                        targets[row * 2 + 1] = (float)(done.Y / Unit);
                        ++samples;
                    }
                    inFlight[slot] = Launch();
                    ++launched;
                    for (int i = 0; i < Math.Min(launched, Horizon); ++i)
                        if (i != slot) Move(ref inFlight[i]);

                    // ---- training, within the frame's budget -----------------
                    if (samples >= Ring)
                    {
                        var trainClock = Stopwatch.StartNew();
                        int steps = 0;
                        do
                        {
                            using (ctx.Scope())
                            {
                                var l = loss(x, y);
                                l.Backward(scaler);
                                scaler.Unscale(opt);
                                opt.ClipGradNorm(1.0);
                                scaler.Step(opt);
                                scaler.Update();
                                opt.ZeroGrad();
                                if (++steps == 1) lastLoss = l.Item();
                            }
                        } while (trainClock.Elapsed.TotalMilliseconds + 0.2 < budgetMs);
                        totalSteps += steps;
                        secondSteps += steps;
                        secondTrainMs += trainClock.Elapsed.TotalMilliseconds;
                        ++trainingFrames;
                    }

                    if ((frame + 1) % 60 == 0)
                    {
                        Console.WriteLine("{0,7}  {1,7}  {2,11:F1}  {3,14:F2}  {4,10}  {5,13:F5}  {6,7}",
                                          (frame + 1) / 60, samples,
                                          trainingFrames == 0 ? 0.0 : (double)secondSteps / trainingFrames,
                                          trainingFrames == 0 ? 0.0 : secondTrainMs / trainingFrames,
                                          double.IsNaN(lastLoss) ? "-" : lastLoss.ToString("F5"), testLoss(),
                                          scaler.Scale);
                        secondSteps = 0;
                        secondTrainMs = 0;
                        trainingFrames = 0;
                    }
                    if (realtime)
                    {
                        var left = Dt * 1000 - frameClock.Elapsed.TotalMilliseconds;
                        if (left > 0) Thread.Sleep(TimeSpan.FromMilliseconds(left));
                    }
                }
                double finalTestLoss = testLoss();
                var counters = scaler.Counters;
                Console.WriteLine("{0} frames ({1:F1} game seconds) in {2:F2} s of wall time; {3} training steps, " +
                                  "{4} skipped for overflow", frames, frames * Dt, wall.Elapsed.TotalSeconds,
                                  totalSteps, counters.Skipped);
                Console.WriteLine("held-out loss {0:F5} -> {1:F5}", firstTestLoss, finalTestLoss);
                foreach (var p in parameters) p.Dispose();
                if (!(finalTestLoss < firstTestLoss / 10))
                {
                    Console.Error.WriteLine("FAILED: the held-out loss did not fall tenfold");
                    return 1;
                }
            }
        }
        return 0;
    }
}
