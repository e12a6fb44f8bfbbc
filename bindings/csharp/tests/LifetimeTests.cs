// Handles are released exactly once: a counting allocator sees every block
// ampx allocated freed once, with its own size, whatever path released it
// (Dispose, twice, a scope, Keep, Share, the gradient getter); and the
// garbage collector's finalizer thread may release abandoned objects while
// another thread trains on their context: tensors directly, everything else
// through the queue of their C context (one, whichever Context object made
// them), drained by that thread's next call; after the context's last
// Context object is disposed the queue is closed, and what cannot be released
// on the finalizer thread is leaked.
using System;
using System.Collections.Generic;
using System.Linq;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;
using Ampx;

namespace AmpxTests
{
    /// <summary>An allocator that records every live block and every mistake.</summary>
    public sealed class CountingAllocator : Allocator
    {
        private readonly object gate = new object();
        private readonly Dictionary<IntPtr, ulong> live = new Dictionary<IntPtr, ulong>();
        public readonly List<string> Errors = new List<string>();
        private readonly HashSet<int> freeingThreads = new HashSet<int>();
        public long Allocations, Frees;

        public static IntPtr AlignedAlloc(ulong bytes, ulong alignment)
        {
            var raw = Marshal.AllocHGlobal((IntPtr)(long)(bytes + alignment + (ulong)IntPtr.Size));
            var aligned = ((ulong)raw.ToInt64() + (ulong)IntPtr.Size + alignment - 1) & ~(alignment - 1);
            var result = new IntPtr((long)aligned);
            Marshal.WriteIntPtr(result, -IntPtr.Size, raw);
            return result;
        }

        public static void AlignedFree(IntPtr pointer)
        {
            Marshal.FreeHGlobal(Marshal.ReadIntPtr(pointer, -IntPtr.Size));
        }

        public override IntPtr Allocate(ulong bytes, ulong alignment)
        {
            var p = AlignedAlloc(bytes, alignment);
            lock (gate)
            {
                if ((p.ToInt64() & (long)(alignment - 1)) != 0) Errors.Add("misaligned " + p);
                live.Add(p, bytes);
                ++Allocations;
            }
            return p;
        }

        public override void Free(IntPtr pointer, ulong bytes)
        {
            lock (gate)
            {
                ulong size;
                if (!live.TryGetValue(pointer, out size))
                {
                    Errors.Add("free of " + pointer + ", which is not live (freed twice?)");
                    return;
                }
                if (size != bytes) Errors.Add("free of " + pointer + " with " + bytes + " bytes, allocated " + size);
                live.Remove(pointer);
                ++Frees;
                freeingThreads.Add(Thread.CurrentThread.ManagedThreadId);
            }
            AlignedFree(pointer);
        }

        public int Live { get { lock (gate) return live.Count; } }

        /// <summary>The managed ids of the threads that freed memory.</summary>
        public int[] FreeingThreads { get { lock (gate) return freeingThreads.ToArray(); } }
    }

    public static class LifetimeTests
    {
        [Test]
        public static void EveryAllocationIsFreedExactlyOnce()
        {
            var allocator = new CountingAllocator();
            var ctx = new Context(new ContextOptions { Allocator = allocator });
            var x = Tensor.FromArray(ctx, new float[] { 1, 2, 3, 4, 5, 6 }, new long[] { 3, 2 });
            var w = Common.Param(ctx, new float[] { 0.5f, -1, 2, 0.25f }, "w", 2, 2);
            var opt = Optimizer.Adam(ctx, new[] { w });
            var scaler = new Scaler(ctx);
            var autocast = new Autocast(ctx, DType.Bf16);
            Tensor kept;
            for (int step = 0; step < 3; ++step)
            {
                using (var scope = ctx.Scope())
                {
                    Tensor loss;
                    using (autocast.Enter()) loss = Tensor.Linear(x, w).Pow(2).Sum();
                    loss.Backward(scaler);
                    scaler.Step(opt);
                    scaler.Update();
                    kept = scope.Keep(loss.Affine(2, 0));
                }
                kept.Dispose();
                kept.Dispose();
                using (var g = w.Grad)
                using (var g2 = g.Share()) { }
                opt.ZeroGrad();
            }
            var outside = x.Relu(); // no scope: owned
            var state = opt.StateTensor(w, OptimizerState.Momentum);
            Assert.True(allocator.Allocations > 10, "the allocator was used: " + allocator.Allocations);
            foreach (var d in new IDisposable[] { outside, state, autocast, scaler, opt, w, x })
            {
                d.Dispose();
                d.Dispose();
            }
            ctx.Dispose();
            Assert.Equal(0, allocator.Live, "blocks still live after everything was disposed");
            Assert.Equal(allocator.Allocations, allocator.Frees, "frees");
            Assert.Equal("", string.Join("; ", allocator.Errors), "allocator mistakes");
        }

        [Test]
        public static void MemoryReturnsToZeroAndStatsAreReported()
        {
            using (var ctx = new Context())
            {
                Assert.Equal(0UL, ctx.MemoryStats.CurrentBytes, "a new context holds nothing");
                var t = Tensor.Zeros(ctx, DType.F32, 256);
                Assert.True(ctx.MemoryStats.CurrentBytes >= 1024, "a 1 KiB tensor is counted");
                ctx.ResetPeakMemory();
                t.Dispose();
                var stats = ctx.MemoryStats;
                Assert.Equal(0UL, stats.CurrentBytes, "released");
                Assert.True(stats.PeakBytes >= 1024 && stats.AllocationCount >= 1, "peak and count");
                Assert.Equal(DeviceType.Cpu, ctx.DeviceType, "device");
                Assert.Equal(0, ctx.DeviceIndex, "device index");
                ctx.Synchronize();
                Assert.True(!ctx.SetTf32(true) && ctx.SetTf32(false), "TF32 setting round trip");
            }
        }

        private static readonly float[] Xs = new Common.Lcg(5).Take(32 * 4, 1);
        private static readonly float[] Ys = new Common.Lcg(6).Take(32, 1);

        /// <summary>
        /// Trains a small MLP leaving every op output to the collector, and every
        /// third step an abandoned Autocast, Scaler and Optimizer (whose releases a
        /// finalizer must queue); returns the losses' bits.
        /// </summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        private static List<string> TrainAbandoning(Context ctx, int steps, Action<int> everyStep = null)
        {
            var rng = new Common.Lcg(9);
            var x = Tensor.FromArray(ctx, Xs, new long[] { 32, 4 });
            var y = Tensor.FromArray(ctx, Ys, new long[] { 32, 1 });
            var w1 = Common.Param(ctx, rng.Take(64, 0.5f), "w1", 16, 4);
            var w2 = Common.Param(ctx, rng.Take(16, 0.5f), "w2", 1, 16);
            var opt = Optimizer.Sgd(ctx, new[] { w1, w2 }, new SgdOptions { Lr = 0.05, Momentum = 0.9 });
            var losses = new List<string>();
            for (int step = 0; step < steps; ++step)
            {
                var loss = Tensor.MseLoss(Tensor.Linear(Tensor.Linear(x, w1).Tanh(), w2), y);
                losses.Add(Common.Hex(loss.ToFloatArray()[0]));
                loss.Backward();
                opt.Step();
                opt.ZeroGrad();
                if (everyStep != null) everyStep(step);
                if (step % 3 == 0)
                {
                    new Autocast(ctx, DType.F16).SetOpClass("matmul", OpClass.Fp32);
                    new Scaler(ctx).Attach(Optimizer.Sgd(ctx, new[] { Tensor.Zeros(ctx, DType.F32, 3) }));
                }
            }
            return losses;
        }

        [Test]
        public static void CollectingWhileAnotherThreadTrains()
        {
            const int steps = 120;
            List<string> expected;
            using (var quiet = new Context(new ContextOptions { NumThreads = 1 }))
            {
                expected = TrainAbandoning(quiet, steps);
                CollectAll(); // queued for the Dispose to release, not leaked after it
            }

            var allocator = new CountingAllocator();
            var ctx = new Context(new ContextOptions { NumThreads = 1, Allocator = allocator });
            List<string> losses = null;
            Exception failure = null;
            int collections = 0;
            // Every tenth step the trainer waits for a collection to finish, so
            // collections and training interleave however fast either runs.
            Action<int> interleave = step =>
            {
                if (step % 10 != 0) return;
                int seen = Volatile.Read(ref collections);
                var deadline = DateTime.UtcNow.AddSeconds(2);
                while (Volatile.Read(ref collections) == seen && DateTime.UtcNow < deadline) Thread.Sleep(0);
            };
            var trainer = new Thread(() =>
            {
                try
                {
                    losses = TrainAbandoning(ctx, steps, interleave);
                }
                catch (Exception e)
                {
                    failure = e;
                }
            });
            trainer.Start();
            int trainerId = trainer.ManagedThreadId, mainId = Thread.CurrentThread.ManagedThreadId;
            while (trainer.IsAlive)
            {
                GC.Collect();
                GC.WaitForPendingFinalizers();
                Interlocked.Increment(ref collections);
            }
            trainer.Join();
            Assert.True(failure == null, "the training thread failed: " + failure);
            Assert.Equal(string.Join(" ", expected), string.Join(" ", losses), "losses with and without collections");
            Assert.True(collections >= steps / 10, "collections ran during training: " + collections);
            Assert.True(allocator.FreeingThreads.Any(id => id != trainerId && id != mainId),
                        "finalized tensors were released on the finalizer thread");

            GC.Collect();
            GC.WaitForPendingFinalizers();
            var queued = ctx.Deferred.DeferredCount;
            Assert.True(queued > 0, "finalized optimizer-side objects were queued, not released on the finalizer thread");
            ctx.Synchronize(); // the next call on the context runs what is still queued
            Assert.Equal(0, ctx.Deferred.Pending, "nothing left queued");
            Assert.Equal(ctx.Deferred.DeferredCount, ctx.Deferred.RunCount, "every queued release ran once");
            Console.WriteLine("      {0} collections; {1} releases queued by the finalizer and run by the next call",
                              collections, ctx.Deferred.RunCount);
            ctx.Dispose();
            Assert.Equal("", string.Join("; ", allocator.Errors), "allocator mistakes");
        }

        /// <summary>Runs `make` on a thread of its own, which ends, so that no stack slot Mono scans conservatively keeps what it abandoned reachable.</summary>
        private static void OnThread(Action make)
        {
            var thread = new Thread(() => make());
            thread.Start();
            thread.Join();
        }

        private static void CollectAll()
        {
            for (int i = 0; i < 2; ++i)
            {
                GC.Collect();
                GC.WaitForPendingFinalizers();
            }
        }

        /// <summary>An optimizer, a scaler and a tensor of `ctx`, reachable only through `keep`.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void MakeObjects(Context ctx, List<object> keep)
        {
            var w = Common.Param(ctx, new float[] { 1, 2 }, "w", 2);
            keep.Add(Optimizer.Sgd(ctx, new[] { w }));
            keep.Add(new Scaler(ctx));
            keep.Add(Tensor.Zeros(ctx, DType.F32, 64));
        }

        [Test]
        public static void DisposeDrainsAndClosesTheQueue()
        {
            CollectAll(); // what earlier tests abandoned
            var allocator = new CountingAllocator();
            var ctx = new Context(new ContextOptions { Allocator = allocator });
            var queue = ctx.Deferred;
            var before = new List<object>();
            OnThread(() => MakeObjects(ctx, before));
            before.Clear();
            CollectAll();
            Assert.Equal(2, queue.Pending, "an abandoned optimizer and scaler are queued, the tensors released");

            var after = new List<object>();
            OnThread(() => MakeObjects(ctx, after));
            long leaked = DeferredReleases.LeakedCount, frees = allocator.Frees;
            ctx.Dispose();
            Assert.Equal(0, queue.Pending, "Dispose ran what was queued");
            Assert.Equal(2L, queue.RunCount, "each queued release ran once");
            Assert.True(queue.IsClosed, "the last Context of the C context closed its queue");

            // Finalized after the Dispose: the tensor is released on the
            // finalizer thread (ampx.h allows it), the optimizer and the scaler,
            // whose release it does not allow there, are leaked -- not queued
            // on a queue nothing would drain.
            after.Clear();
            CollectAll();
            Assert.Equal(0, queue.Pending, "nothing queued after the close");
            Assert.Equal(2L, queue.DeferredCount, "nothing queued after the close");
            Assert.Equal(leaked + 2, DeferredReleases.LeakedCount, "the optimizer and the scaler are leaked");
            Assert.True(allocator.Frees > frees, "the finalized tensor's memory was freed");
            Assert.Equal("", string.Join("; ", allocator.Errors), "allocator mistakes");
        }

        [Test]
        public static void AnAbandonedContextIsReleasedWhole()
        {
            CollectAll();
            var allocator = new CountingAllocator();
            long leaked = DeferredReleases.LeakedCount;
            DeferredReleases queue = null;
            OnThread(() => queue = AbandonContext(allocator));
            CollectAll();
            Assert.True(queue.IsClosed, "the finalized Context closed its queue");
            // Nothing outside the binding saw the context, and every C# object of
            // it is unreachable: the finalizer thread releases all of it.
            Assert.Equal(leaked, DeferredReleases.LeakedCount, "nothing leaked");
            Assert.True(allocator.Allocations > 0, "the allocator was used");
            Assert.Equal(0, allocator.Live, "every block freed");
            Assert.Equal("", string.Join("; ", allocator.Errors), "allocator mistakes");
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static DeferredReleases AbandonContext(Allocator allocator)
        {
            var ctx = new Context(new ContextOptions { Allocator = allocator });
            MakeObjects(ctx, new List<object>());
            return ctx.Deferred;
        }

        /// <summary>
        /// A Context for `raw` with a Scaler, both abandoned, as engine glue code
        /// would leave them; returns the queue that Context used.
        /// </summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        private static object AbandonRawWrapper(IntPtr raw)
        {
            var wrapper = Context.FromRawHandle(raw);
            new Scaler(wrapper);
            return wrapper.Deferred;
        }

        [Test]
        public static void FromRawHandleContextsShareTheQueueOfTheirContext()
        {
            CollectAll();
            using (var ctx = new Context())
            {
                using (var t = Tensor.Zeros(ctx, DType.F32, 2))
                using (var adopted = Tensor.FromRawHandle(t.RawHandle))
                {
                    Assert.True(adopted.Context.Deferred == ctx.Deferred, "Tensor.FromRawHandle: the same queue");
                    adopted.Context.Dispose();
                }
                Assert.True(!ctx.Deferred.IsClosed, "another Context's Dispose leaves the queue open");
                var queued = ctx.Deferred.DeferredCount;
                object used = null;
                var raw = ctx.RawHandle;
                OnThread(() => used = AbandonRawWrapper(raw));
                Assert.True(used == ctx.Deferred, "Context.FromRawHandle: the same queue");
                CollectAll();
                // While this thread may still train on the context, the finalized
                // wrapper's scaler and its context reference are queued, not
                // released on the finalizer thread.
                Assert.Equal(queued + 2, ctx.Deferred.DeferredCount, "the scaler and the reference queued");
                Assert.Equal(2, ctx.Deferred.Pending, "not run by the finalizer");
                var run = ctx.Deferred.RunCount;
                ctx.Synchronize();
                Assert.Equal(0, ctx.Deferred.Pending, "run by the next call on the context");
                Assert.Equal(run + 2, ctx.Deferred.RunCount, "each once");
            }
        }

        [Test]
        public static void TheLastContextOfAContextCCodeHoldsLeaksWhatItCannotRelease()
        {
            CollectAll();
            IntPtr raw;
            using (var ctx = new Context())
            {
                raw = ctx.RawHandle;
                Assert.Equal(Native.ampx_status.AMPX_OK, Native.ampx_context_retain(raw), "the C code's reference");
            }
            long leaked = DeferredReleases.LeakedCount;
            OnThread(() => AbandonRawWrapper(raw));
            CollectAll();
            // The C code may be using the context on another thread: the
            // finalizer releases neither the scaler nor the wrapper's reference.
            Assert.Equal(leaked + 2, DeferredReleases.LeakedCount, "the scaler and the reference leaked");
            Assert.Equal(Native.ampx_status.AMPX_OK, Native.ampx_context_synchronize(raw), "the C code's context works");
            Native.ampx_context_release(raw);
        }

        [Test]
        public static void RawHandlesFromEngineCodeAreAdopted()
        {
            using (var ctx = new Context())
            using (var t = Tensor.FromArray(ctx, new float[] { 7, 8 }, new long[] { 2 }))
            {
                // As engine C code would hand over a tensor it made.
                using (var adopted = Tensor.FromRawHandle(t.RawHandle))
                {
                    Assert.True(adopted.RawHandle == t.RawHandle, "the same tensor");
                    Assert.True(adopted.Context != ctx && adopted.Context.RawHandle == ctx.RawHandle,
                                "a Context object of its own for the same context");
                    adopted.Fill(3);
                    adopted.Context.Dispose();
                }
                Assert.Equal(3.0f, t.ToFloatArray()[0], "writes through the adopted object");
            }
        }

        [Test]
        public static void WrappedArraysAreSharedAndUnpinnedOnRelease()
        {
            var data = new float[] { 1, 2, 3, 4 };
            using (var ctx = new Context())
            {
                var t = Tensor.Wrap(ctx, data, 2, 2);
                data[3] = 40;
                Assert.Equal(40.0f, t.ToFloatArray()[3], "the tensor reads the array");
                t.Fill(-1);
                Assert.True(data.All(v => v == -1), "the array sees the tensor's writes");
                var pinned = GCHandle.Alloc(data, GCHandleType.Pinned); // fine while the wrap pins it too
                pinned.Free();
                t.Dispose();
                var indices = Tensor.Wrap(ctx, new[] { 1, 0 }, 2);
                using (var table = Tensor.FromArray(ctx, new float[] { 1, 2, 3, 4 }, new long[] { 2, 2 }))
                using (var rows = Tensor.Embedding(table, indices))
                    Assert.Equal("3 4 1 2", string.Join(" ", rows.ToFloatArray()), "embedding of wrapped indices");
                indices.Dispose();
            }
        }
    }
}
