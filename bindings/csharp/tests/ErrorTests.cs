// Errors as C# exceptions: a failed call throws AmpxException with the status
// and ampx_last_error()'s words and changes nothing; bad input through the
// binding's own surface (released handles, wrong lengths, null callbacks)
// gives a clear C# exception; an exception thrown inside a callback is kept
// and rethrown, the same object, when the C call that ran it returns.
using System;
using System.Linq;
using Ampx;

namespace AmpxTests
{
    public static class ErrorTests
    {
        [Test]
        public static void FailedCallsThrowWithStatusAndMessage()
        {
            using (var ctx = new Context())
            {
                var e = Assert.Throws<AmpxException>(() => Tensor.FromArray(ctx, new float[5], new long[] { 2, 3 }),
                                                     "5 values for a [2, 3] tensor");
                Assert.Equal(Status.ErrShape, e.Status, "status");
                Assert.True(e.Detail.Contains("ampx_tensor_from_host"), "the message names the function: " + e.Detail);
                Assert.Equal(Status.ErrShape, Library.LastStatus, "ampx_last_status");
                Assert.Equal(e.Detail, Library.LastError, "ampx_last_error");
                Assert.True(e.Message.StartsWith("AMPX_ERR_SHAPE: "), "message: " + e.Message);
                Assert.Equal("AMPX_ERR_ORDER", Library.StatusString(Status.ErrOrder), "status string");

                using (var x = Tensor.Zeros(ctx, DType.F32, 4, 3))
                using (var w = Tensor.Zeros(ctx, DType.F32, 2, 5))
                {
                    var shape = Assert.Throws<AmpxException>(() => Tensor.Linear(x, w), "[4, 3] x [2, 5]^T");
                    Assert.Equal(Status.ErrShape, shape.Status, "linear's status");
                    Assert.True(shape.Detail.Contains("[4, 3]") && shape.Detail.Contains("[2, 5]"),
                                "both shapes in the message: " + shape.Detail);
                    var dtype = Assert.Throws<AmpxException>(() => Tensor.Empty(ctx, (DType)99, 2), "dtype 99");
                    Assert.Equal(Status.ErrDtype, dtype.Status, "bad dtype");
                }
            }
        }

        [Test]
        public static void OrderMistakesAreRefusedAndChangeNothing()
        {
            using (var ctx = new Context())
            using (var w = Common.Param(ctx, new float[] { 1, 2 }, "w", 2))
            using (var opt = Optimizer.Sgd(ctx, new[] { w }, new SgdOptions { Lr = 0.5 }))
            using (var scaler = new Scaler(ctx))
            {
                scaler.Attach(opt);
                var update = Assert.Throws<AmpxException>(() => scaler.Update(), "update before any step");
                Assert.Equal(Status.ErrOrder, update.Status, "status");
                using (ctx.Scope())
                {
                    w.Mul(w).Sum().Backward(scaler);
                }
                var clip = Assert.Throws<AmpxException>(() => opt.ClipGradNorm(1.0), "clipping scaled gradients");
                Assert.Equal(Status.ErrOrder, clip.Status, "clip status");
                Assert.True(clip.Detail.ToLowerInvariant().Contains("unscale"), "says to unscale first: " + clip.Detail);
                scaler.Unscale(opt);
                Assert.Equal(Status.ErrOrder, Assert.Throws<AmpxException>(() => scaler.Unscale(opt), "twice").Status,
                             "unscale twice");
                Assert.True(!scaler.FoundInf(opt), "finite gradients");
                scaler.Step(opt);
                scaler.Update();
                // w - 0.5 * 2w = 0
                Assert.True(w.ToFloatArray().All(v => v == 0), "one SGD step on w^2 with lr 0.5");
            }
        }

        [Test]
        public static void DisposedObjectsThrowObjectDisposedException()
        {
            var ctx = new Context();
            var t = Tensor.FromArray(ctx, new float[] { 1, 2, 3 }, new long[] { 3 });
            var u = t.Share();
            t.Dispose();
            t.Dispose(); // twice is a no-op
            Assert.True(t.IsDisposed, "IsDisposed");
            Assert.Throws<ObjectDisposedException>(() => t.Relu(), "an op on a disposed tensor");
            Assert.Throws<ObjectDisposedException>(() => { var unused = t.Shape; }, "a property");
            Assert.Throws<ObjectDisposedException>(() => u.Add(t), "a disposed argument");
            Assert.Equal(2.0f, u.ToFloatArray()[1], "the shared reference still works");

            var opt = Optimizer.Sgd(ctx, new[] { u });
            var scaler = new Scaler(ctx);
            opt.Dispose();
            Assert.Throws<ObjectDisposedException>(() => scaler.Step(opt), "a disposed optimizer");
            scaler.Dispose();
            Assert.Throws<ObjectDisposedException>(() => { var unused = scaler.Scale; }, "a disposed scaler");

            Tensor borrowed;
            using (var scope = ctx.Scope())
            {
                borrowed = u.Relu();
                var kept = scope.Keep(u.Sigmoid());
                borrowed.ToFloatArray();
                scope.Dispose();
                Assert.Throws<ObjectDisposedException>(() => borrowed.ToFloatArray(), "borrowed from an ended scope");
                Assert.Close(1 / (1 + Math.Exp(-3.0)), kept.ToFloatArray()[2], 1e-6, "a kept tensor lives on");
                kept.Dispose();
            }

            ctx.Dispose();
            Assert.Throws<ObjectDisposedException>(() => Tensor.Zeros(ctx, DType.F32, 2), "a disposed context");
            // Its tensors keep the C context alive and stay usable.
            using (var r = u.Relu()) Assert.Equal(3.0f, r.ToFloatArray()[2], "ops after the context's dispose");
            u.Dispose();
        }

        [Test]
        public static void WrongLengthsAndNullsAreRefused()
        {
            using (var ctx = new Context())
            using (var t = Tensor.Zeros(ctx, DType.F32, 2, 3))
            {
                Assert.Equal(Status.ErrShape, Assert.Throws<AmpxException>(() => t.CopyTo(new float[5]), "short").Status,
                             "CopyTo of 5 floats");
                Assert.Equal(Status.ErrShape, Assert.Throws<AmpxException>(() => t.CopyFrom(new float[7]), "long").Status,
                             "CopyFrom of 7 floats");
                Assert.Equal(Status.ErrShape, Assert.Throws<AmpxException>(() => t.CopyFrom(new double[6]), "doubles").Status,
                             "6 doubles are 48 bytes, not 24");
                Assert.True(t.ToFloatArray().All(v => v == 0), "nothing was written");
                Assert.Throws<ArgumentNullException>(() => t.CopyTo((float[])null), "null array");
                Assert.Throws<ArgumentNullException>(() => Tensor.Linear(t, null), "null weight");
                Assert.Throws<ArgumentNullException>(() => ctx.Checkpoint((Func<Tensor[], Tensor>)null, t), "null segment");
                Assert.Throws<ArgumentNullException>(() => Optimizer.Sgd(ctx, new Tensor[] { t, null }), "null parameter");
                Assert.Throws<ArgumentNullException>(() => Tensor.Wrap(ctx, (float[])null, 2), "null array to wrap");
                var bad = Assert.Throws<AmpxException>(() => t.Reshape(4, 4), "reshape to 16 elements");
                Assert.Equal(Status.ErrShape, bad.Status, "reshape status");
                var split = Assert.Throws<AmpxException>(() => t.Split(new long[] { 1, 1 }, 1), "sizes 1 + 1 of 3");
                Assert.Equal(Status.ErrShape, split.Status, "split status");
                Assert.Equal(Status.ErrInvalidArgument,
                             Assert.Throws<AmpxException>(() => t.Chunk(0, 0), "0 chunks").Status, "chunk status");
                Assert.Throws<ArgumentException>(() => Tensor.Conv2d(t, t, null, new Conv2dOptions { Stride = new long[] { 1 } }),
                                                 "a stride of one value");
            }
        }

        private sealed class Boom : Exception
        {
            public Boom(string message) : base(message) { }
        }

        [Test]
        public static void ExceptionsInCallbacksAreRethrownByTheCall()
        {
            using (var ctx = new Context())
            using (var w = Common.Param(ctx, new float[] { 1, -2, 3, 4 }, "w", 2, 2))
            using (var x = Tensor.FromArray(ctx, new float[] { 1, 2, 3, 4, 5, 6 }, new long[] { 3, 2 }))
            {
                // A segment that throws in the forward run: Checkpoint rethrows it.
                var thrown = new Boom("segment forward");
                var caught = Assert.Throws<Boom>(() => ctx.Checkpoint(xs => { throw thrown; }, x), "segment forward");
                Assert.True(ReferenceEquals(thrown, caught), "the same exception object");
                Assert.True(Library.LastError.Contains("segment forward"), "ampx was told why: " + Library.LastError);

                // One that throws only when backward recomputes it: Backward rethrows.
                int runs = 0;
                var second = new Boom("segment recompute");
                using (ctx.Scope())
                {
                    var y = ctx.Checkpoint(xs =>
                    {
                        if (++runs == 2) throw second;
                        return Tensor.Linear(xs[0], w);
                    }, x);
                    var c = Assert.Throws<Boom>(() => y.Sum().Backward(), "segment recompute");
                    Assert.True(ReferenceEquals(second, c), "the recompute's exception");
                }
                Assert.Equal(2, runs, "forward and recompute");

                // A grad-ready hook that throws stops backward, which rethrows it.
                var hookError = new Boom("hook");
                ctx.SetGradReadyHook(p => { throw hookError; });
                using (ctx.Scope())
                {
                    var h = Assert.Throws<Boom>(() => Tensor.Linear(x, w).Sum().Backward(), "hook");
                    Assert.True(ReferenceEquals(hookError, h), "the hook's exception");
                }
                ctx.SetGradReadyHook(null);
                // The segment returning the wrong number of outputs.
                Assert.Throws<InvalidOperationException>(() => ctx.Checkpoint(xs => new Tensor[0], 1, x), "no outputs");
                // Everything still works afterwards.
                using (var w2 = w.Grad) { }
                using (ctx.Scope()) Tensor.Linear(x, w).Sum().Backward();
            }
        }

        private sealed class ThrowingAllocator : Allocator
        {
            public bool Fail;
            public override IntPtr Allocate(ulong bytes, ulong alignment)
            {
                if (Fail) throw new Boom("allocator");
                return CountingAllocator.AlignedAlloc(bytes, alignment);
            }
            public override void Free(IntPtr pointer, ulong bytes) { CountingAllocator.AlignedFree(pointer); }
        }

        [Test]
        public static void ExceptionsInAllocatorsAndDeletersAreRethrown()
        {
            var allocator = new ThrowingAllocator();
            using (var ctx = new Context(new ContextOptions { Allocator = allocator }))
            using (var t = Tensor.FromArray(ctx, new float[] { 1, 2 }, new long[] { 2 }))
            {
                allocator.Fail = true;
                var e = Assert.Throws<Boom>(() => t.Relu(), "an allocation that throws");
                Assert.Equal("allocator", e.Message, "the allocator's exception");
                allocator.Fail = false;
                using (var r = t.Relu()) Assert.Equal(2.0f, r.ToFloatArray()[1], "allocations work again");
            }
            using (var ctx = new Context())
            {
                var buffer = System.Runtime.InteropServices.Marshal.AllocHGlobal(8);
                var wrapped = Tensor.Wrap(ctx, DType.F32, new long[] { 2 }, buffer, 8, p =>
                {
                    System.Runtime.InteropServices.Marshal.FreeHGlobal(p);
                    throw new Boom("deleter");
                });
                Assert.Equal("deleter", Assert.Throws<Boom>(() => wrapped.Dispose(), "a deleter that throws").Message,
                             "the deleter's exception");
            }
        }
    }
}
