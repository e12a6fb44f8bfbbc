using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Threading;

namespace Ampx
{
    /// <summary>Options of a new Context (ampx_context_options); defaults from ampx_context_options_default().</summary>
    public sealed class ContextOptions
    {
        public DeviceType Device;
        /// <summary>CUDA device ordinal.</summary>
        public int DeviceIndex;
        /// <summary>CPU worker threads; 0: one per hardware thread; 1: none.</summary>
        public int NumThreads;
        /// <summary>Seed of the context's random streams (dropout).</summary>
        public ulong Seed;
        /// <summary>Where tensor memory comes from; null: ampx's own allocator.</summary>
        public Allocator Allocator;
        /// <summary>A cudaStream_t to adopt (must outlive the context); zero: the context makes its own.</summary>
        public IntPtr CudaStream;

        public ContextOptions()
        {
            var d = Native.ampx_context_options_default();
            Device = (DeviceType)d.device_type;
            DeviceIndex = d.device_index;
            NumThreads = d.num_threads;
            Seed = d.seed;
            CudaStream = d.cuda_stream;
        }
    }

    /// <summary>Memory held by a context's tensors (ampx_memory_stats).</summary>
    public struct MemoryStats
    {
        public ulong CurrentBytes, PeakBytes, AllocationCount, ReservedBytes;
    }

    /// <summary>
    /// A device (the CPU, or one CUDA device with its stream), its allocator and
    /// its autograd state. Tensors, optimizers and the other objects made from a
    /// context keep it alive; Dispose drops this object's own reference.
    /// A context and everything made from it may be used by one thread at a
    /// time; different contexts are independent.
    /// </summary>
    public sealed unsafe class Context : IDisposable
    {
        internal readonly ContextHandle Handle;
        // Shared by every Context object of the same C context (see DeferredReleases).
        internal readonly DeferredReleases Deferred;
        // The C# scopes open on this context, innermost last (see Scope).
        internal readonly List<Scope> Scopes = new List<Scope>();
        /// <summary>A CPU context with the default options.</summary>
        public Context() : this((ContextOptions)null) { }

        public Context(ContextOptions options)
        {
            options = options ?? new ContextOptions();
            var o = Native.ampx_context_options_default();
            o.device_type = (Native.ampx_device_type)options.Device;
            o.device_index = options.DeviceIndex;
            o.num_threads = options.NumThreads;
            o.seed = options.Seed;
            o.cuda_stream = options.CudaStream;
            AllocatorRegistration allocator = null;
            if (options.Allocator != null)
            {
                allocator = AllocatorRegistration.Register(options.Allocator);
                o.allocator.alloc = AllocatorRegistration.AllocFn;
                o.allocator.free = AllocatorRegistration.FreeFn;
                o.allocator.user_data = allocator.Id;
            }
            IntPtr raw;
            var status = Native.ampx_context_create(&o, &raw);
            if (status != Native.ampx_status.AMPX_OK)
            {
                if (allocator != null) allocator.ContextReleased();
                Err.Check(status);
            }
            Handle = new ContextHandle(raw);
            Deferred = Handle.Deferred;
            Deferred.Allocator = allocator;
        }

        private Context(ContextHandle handle)
        {
            Handle = handle;
            Deferred = handle.Deferred;
            Deferred.MarkSharedWithC();
        }

        /// <summary>
        /// A Context for a context handle made elsewhere (by engine C code): adds a
        /// reference (ampx_context_retain), which Dispose drops again. It shares
        /// the deferred releases of every other Context of the same C context;
        /// dispose it: finalized, it is the C code's context that it would release
        /// on the finalizer thread, which is leaked instead (see DeferredReleases).
        /// </summary>
        public static Context FromRawHandle(IntPtr rawContext)
        {
            if (rawContext == IntPtr.Zero) throw new ArgumentNullException("rawContext");
            Err.Check(Native.ampx_context_retain(rawContext));
            return new Context(new ContextHandle(rawContext));
        }

        internal IntPtr Ptr
        {
            get
            {
                Deferred.Drain();
                return Handle.Get("Context");
            }
        }

        /// <summary>The raw ampx_context for Native calls (valid while this object is alive).</summary>
        public IntPtr RawHandle
        {
            get
            {
                Deferred.MarkSharedWithC();
                return Ptr;
            }
        }

        public bool IsDisposed { get { return Handle.IsClosed; } }

        /// <summary>
        /// Drops this object's reference. Scopes still open are closed first (their
        /// borrowed tensors end). Tensors and other objects of the context stay usable.
        /// The releases finalizers queued run now; once no other Context object of
        /// the C context (FromRawHandle) remains, the queue closes: an object other
        /// than a tensor or an FP8 recipe that is finalized later, not disposed, is
        /// leaked with a one-time warning (see DeferredReleases).
        /// </summary>
        public void Dispose()
        {
            if (Handle.IsClosed) return;
            while (Scopes.Count > 0) Scopes[Scopes.Count - 1].Dispose();
            Deferred.Drain();
            Handle.Dispose();
            Callbacks.RethrowKept();
        }

        /// <summary>The device type (ampx_context_device).</summary>
        public DeviceType DeviceType
        {
            get
            {
                Native.ampx_device_type type;
                int index;
                Err.Check(Native.ampx_context_device(Ptr, &type, &index), this);
                return (DeviceType)type;
            }
        }

        /// <summary>The CUDA device ordinal (0 for the CPU).</summary>
        public int DeviceIndex
        {
            get
            {
                Native.ampx_device_type type;
                int index;
                Err.Check(Native.ampx_context_device(Ptr, &type, &index), this);
                return index;
            }
        }

        /// <summary>Waits for all work enqueued on the device (a no-op on the CPU).</summary>
        public void Synchronize()
        {
            Err.Check(Native.ampx_context_synchronize(Ptr), this);
        }

        /// <summary>Bytes held by the context's tensors (ampx_memory_stats_get).</summary>
        public MemoryStats MemoryStats
        {
            get
            {
                var s = Native.AMPX_MEMORY_STATS_INIT();
                Err.Check(Native.ampx_memory_stats_get(Ptr, &s), this);
                return new MemoryStats
                {
                    CurrentBytes = s.current_bytes, PeakBytes = s.peak_bytes,
                    AllocationCount = s.allocation_count, ReservedBytes = s.reserved_bytes,
                };
            }
        }

        /// <summary>Sets the peak to the current byte count.</summary>
        public void ResetPeakMemory()
        {
            Err.Check(Native.ampx_memory_reset_peak(Ptr), this);
        }

        /// <summary>Lets f32 matrix products and convolutions run in TF32 on CUDA; returns the former setting.</summary>
        public bool SetTf32(bool allowed)
        {
            int previous;
            Err.Check(Native.ampx_context_set_tf32(Ptr, allowed ? 1 : 0, &previous), this);
            return previous != 0;
        }

        /// <summary>Turns recording for backward on or off; returns the former setting.</summary>
        public bool SetGradEnabled(bool enabled)
        {
            int previous;
            Err.Check(Native.ampx_set_grad_enabled(Ptr, enabled ? 1 : 0, &previous), this);
            return previous != 0;
        }

        /// <summary>Whether ops are recorded for backward now.</summary>
        public bool GradEnabled
        {
            get
            {
                bool previous = SetGradEnabled(true);
                SetGradEnabled(previous);
                return previous;
            }
            set { SetGradEnabled(value); }
        }

        /// <summary>A `using` block in which nothing is recorded for backward.</summary>
        public IDisposable NoGrad()
        {
            return new GradModeRestore(this, SetGradEnabled(false));
        }

        private sealed class GradModeRestore : IDisposable
        {
            private Context context;
            private readonly bool previous;
            internal GradModeRestore(Context context, bool previous)
            {
                this.context = context;
                this.previous = previous;
            }
            public void Dispose()
            {
                if (context == null) return;
                context.SetGradEnabled(previous);
                context = null;
            }
        }

        /// <summary>
        /// Opens a scope (ampx_scope_push): tensors that ops return inside it are
        /// borrowed from it, as in C, and end with it (using one afterwards throws
        /// ObjectDisposedException) unless Scope.Keep is called on them. A training
        /// step in a scope makes no garbage for the collector.
        /// </summary>
        public Scope Scope()
        {
            var raw = Ptr;
            Err.Check(Native.ampx_scope_push(raw), this);
            return new Scope(this, CDepth(), true);
        }

        /// <summary>Number of scopes open on the context, those ampx opens for callbacks included.</summary>
        public int ScopeDepth { get { return CDepth(); } }

        internal int CDepth()
        {
            int depth;
            Err.Check(Native.ampx_scope_depth(Ptr, &depth), this);
            return depth;
        }

        /// <summary>
        /// The C# wrapper of a new op output: borrowed from the innermost C# scope
        /// when that scope owns it in C, else with a reference of its own.
        /// </summary>
        internal Tensor Adopt(IntPtr raw)
        {
            int depth = 0;
            if (!Handle.IsClosed)
            {
                depth = CDepth();
            }
            else
            {
                // This object's reference is gone, another (FromRawHandle) may
                // still hold scopes open; with no program reference left no
                // scope is open and ampx refuses the query.
                IntPtr context;
                int d;
                if (Native.ampx_tensor_context(raw, &context) == Native.ampx_status.AMPX_OK &&
                    Native.ampx_scope_depth(context, &d) == Native.ampx_status.AMPX_OK)
                    depth = d;
            }
            if (depth > 0 && Scopes.Count > 0 && Scopes[Scopes.Count - 1].Depth == depth)
            {
                var tensor = new Tensor(this, new TensorHandle(raw, false));
                Scopes[Scopes.Count - 1].Borrowed.Add(tensor);
                return tensor;
            }
            if (depth > 0)
                Err.Check(Native.ampx_tensor_retain(raw));
            return new Tensor(this, new TensorHandle(raw, true));
        }

        // ---- grad-ready hook --------------------------------------------

        private sealed class HookState
        {
            internal Context Context;
            internal Action<Tensor> Hook;
        }

        /// <summary>
        /// Installs `hook`, called during Backward (and Tensor.GradReady) for every
        /// parameter whose gradient is final, with that parameter (borrowed for the
        /// call: Share() it to keep it). An exception it throws stops the backward
        /// pass and is rethrown by the call that ran it. null removes the hook.
        /// </summary>
        public void SetGradReadyHook(Action<Tensor> hook)
        {
            var raw = Ptr;
            if (hook == null)
            {
                Err.Check(Native.ampx_set_grad_ready_hook(raw, IntPtr.Zero, null, IntPtr.Zero), this);
                return;
            }
            var state = GCHandle.Alloc(new HookState { Context = this, Hook = hook });
            // ampx takes user_data over in every case, also when this fails.
            Err.Check(Native.ampx_set_grad_ready_hook(raw, GradReadyFn, (void*)GCHandle.ToIntPtr(state),
                                                      ReleaseFn), this);
        }

        private static readonly Native.ampx_grad_ready_fn gradReady = GradReady;
        private static readonly Native.ampx_set_grad_ready_hook_release_fn releaseHook = ReleaseUserData;
        private static readonly IntPtr GradReadyFn = Marshal.GetFunctionPointerForDelegate(gradReady);
        internal static readonly IntPtr ReleaseFn = Marshal.GetFunctionPointerForDelegate(releaseHook);

        [MonoPInvokeCallback(typeof(Native.ampx_grad_ready_fn))]
        private static Native.ampx_status GradReady(void* userData, IntPtr param)
        {
            Callbacks.Enter();
            Tensor tensor = null;
            try
            {
                var state = (HookState)Callbacks.Target(userData);
                tensor = new Tensor(state.Context, new TensorHandle(param, false));
                state.Hook(tensor);
                return Native.ampx_status.AMPX_OK;
            }
            catch (Exception e)
            {
                return Callbacks.Fail(e, "the grad-ready hook");
            }
            finally
            {
                if (tensor != null) tensor.EndBorrow();
                Callbacks.Exit();
            }
        }

        [MonoPInvokeCallback(typeof(Native.ampx_set_grad_ready_hook_release_fn))]
        private static void ReleaseUserData(void* userData)
        {
            Callbacks.Free(userData);
        }

        // ---- gradient checkpointing ---------------------------------------

        private sealed class SegmentState
        {
            internal Context Context;
            internal Func<Tensor[], Tensor[]> Function;
        }

        /// <summary>
        /// Gradient checkpointing (ampx_checkpoint_segment): runs `segment` on
        /// `inputs` without keeping its intermediate activations, and runs it again
        /// when backward reaches it. `segment` must compute its outputs with ampx ops,
        /// deterministically, and return exactly `outputCount` tensors; the tensors it
        /// is given, and those its ops return, are valid during the call only. An
        /// exception it throws is rethrown by the call that ran it (this one, or
        /// Backward).
        /// </summary>
        public Tensor[] Checkpoint(Func<Tensor[], Tensor[]> segment, int outputCount, params Tensor[] inputs)
        {
            if (segment == null) throw new ArgumentNullException("segment");
            if (outputCount < 1) throw new ArgumentOutOfRangeException("outputCount", "at least one output");
            inputs = inputs ?? new Tensor[0];
            var raw = Ptr;
            var ins = Tensor.Raw(inputs, "inputs");
            var outs = new IntPtr[outputCount];
            var state = GCHandle.Alloc(new SegmentState { Context = this, Function = segment });
            var s = Native.AMPX_SEGMENT_INIT();
            s.fn = SegmentFn;
            s.user_data = GCHandle.ToIntPtr(state);
            s.release = ReleaseFn;
            Native.ampx_status status;
            fixed (IntPtr* pin = ins)
            fixed (IntPtr* pout = outs)
                status = Native.ampx_checkpoint_segment(raw, &s, pin, (UIntPtr)ins.Length, pout,
                                                        (UIntPtr)outs.Length);
            Err.Check(status, this, inputs);
            var result = new Tensor[outputCount];
            for (int i = 0; i < outputCount; ++i) result[i] = Adopt(outs[i]);
            return result;
        }

        /// <summary>Checkpoint of a segment with one output.</summary>
        public Tensor Checkpoint(Func<Tensor[], Tensor> segment, params Tensor[] inputs)
        {
            if (segment == null) throw new ArgumentNullException("segment");
            return Checkpoint(x => new[] { segment(x) }, 1, inputs)[0];
        }

        private static readonly Native.ampx_segment_fn segmentFn = RunSegment;
        private static readonly IntPtr SegmentFn = Marshal.GetFunctionPointerForDelegate(segmentFn);

        [MonoPInvokeCallback(typeof(Native.ampx_segment_fn))]
        private static Native.ampx_status RunSegment(void* userData, IntPtr* inputs, UIntPtr inputCount,
                                                     IntPtr* outputs, UIntPtr outputCount)
        {
            Callbacks.Enter();
            Scope scope = null;
            Tensor[] args = null;
            try
            {
                var state = (SegmentState)Callbacks.Target(userData);
                var context = state.Context;
                // ampx runs the segment in a scope of its own: its op outputs are
                // borrowed from it until the segment returns.
                scope = new Scope(context, context.CDepth(), false);
                args = new Tensor[(int)inputCount];
                for (int i = 0; i < args.Length; ++i)
                    args[i] = new Tensor(context, new TensorHandle(inputs[i], false));
                var results = state.Function(args);
                if (results == null || results.Length != (int)outputCount)
                    throw new InvalidOperationException(
                        "the checkpointed segment returned " + (results == null ? "null" : results.Length +
                        " tensors") + " where " + outputCount + " were expected");
                for (int i = 0; i < results.Length; ++i)
                {
                    if (results[i] == null)
                        throw new InvalidOperationException("the checkpointed segment returned null as output " + i);
                    outputs[i] = results[i].Ptr;
                }
                return Native.ampx_status.AMPX_OK;
            }
            catch (Exception e)
            {
                return Callbacks.Fail(e, "the checkpointed segment");
            }
            finally
            {
                if (args != null) foreach (var t in args) t.EndBorrow();
                if (scope != null) scope.End();
                Callbacks.Exit();
            }
        }
    }

    /// <summary>
    /// An open ampx scope (Context.Scope()). Tensors ops return while it is the
    /// innermost scope are borrowed from it: valid until it is disposed, then
    /// ended (ObjectDisposedException on use) unless kept.
    /// </summary>
    public sealed class Scope : IDisposable
    {
        private readonly Context context;
        internal readonly int Depth;
        internal readonly List<Tensor> Borrowed = new List<Tensor>();
        private readonly bool pushed;
        private bool ended;

        internal Scope(Context context, int depth, bool pushed)
        {
            this.context = context;
            Depth = depth;
            this.pushed = pushed;
            context.Scopes.Add(this);
        }

        /// <summary>
        /// Keeps `tensor` beyond the scope: it gets a reference of its own
        /// (ampx_tensor_retain) and is then disposed like any tensor. Returns it.
        /// </summary>
        public Tensor Keep(Tensor tensor)
        {
            if (tensor == null) throw new ArgumentNullException("tensor");
            if (Borrowed.Remove(tensor)) tensor.TakeReference();
            return tensor;
        }

        /// <summary>Closes the scope (ampx_scope_pop) and every scope opened inside it.</summary>
        public void Dispose()
        {
            if (ended) return;
            var scopes = context.Scopes;
            while (scopes.Count > 0 && scopes[scopes.Count - 1] != this)
                scopes[scopes.Count - 1].Dispose();
            End();
            if (pushed && !context.Handle.IsClosed)
                Err.Check(Native.ampx_scope_pop(context.Ptr), context);
        }

        internal void End()
        {
            if (ended) return;
            ended = true;
            foreach (var t in Borrowed) t.EndBorrow();
            Borrowed.Clear();
            context.Scopes.Remove(this);
        }
    }

    /// <summary>
    /// Memory for a context's tensors from the program (ampx_allocator): host
    /// memory for a CPU context, device memory for a CUDA one. Both methods may be
    /// called from any thread -- Free also from the garbage collector's finalizer
    /// thread when a tensor is finalized -- and concurrently: implementations must
    /// be thread-safe. An exception from Allocate makes the ampx call fail with
    /// that exception (rethrown to the caller); one from Free is rethrown by the
    /// call that released the memory, or dropped on the finalizer thread.
    /// </summary>
    public abstract class Allocator
    {
        /// <summary>`bytes` bytes aligned to `alignment` (a power of two, at most 256), or IntPtr.Zero when out of memory.</summary>
        public abstract IntPtr Allocate(ulong bytes, ulong alignment);

        /// <summary>Frees memory Allocate returned, with the size it was asked for.</summary>
        public abstract void Free(IntPtr pointer, ulong bytes);
    }

    /// <summary>
    /// An Allocator as ampx's user_data: a number in a registry, not a GCHandle,
    /// because ampx may still call free after the C# Context is gone (its tensors
    /// keep the C context). The entry goes once the program's context reference is
    /// released and every allocation has been freed.
    /// </summary>
    internal sealed unsafe class AllocatorRegistration
    {
        private static readonly object registryGate = new object();
        private static readonly Dictionary<long, AllocatorRegistration> registry =
            new Dictionary<long, AllocatorRegistration>();
        private static long nextId;

        private readonly Allocator allocator;
        internal readonly IntPtr Id;
        private long live;
        private int released;

        private AllocatorRegistration(Allocator allocator, IntPtr id)
        {
            this.allocator = allocator;
            Id = id;
        }

        internal static AllocatorRegistration Register(Allocator allocator)
        {
            lock (registryGate)
            {
                var id = ++nextId;
                var r = new AllocatorRegistration(allocator, (IntPtr)id);
                registry.Add(id, r);
                return r;
            }
        }

        private static AllocatorRegistration Find(void* userData)
        {
            lock (registryGate)
            {
                AllocatorRegistration r;
                return registry.TryGetValue((long)userData, out r) ? r : null;
            }
        }

        /// <summary>The program's reference to the context is gone (or never was made).</summary>
        internal void ContextReleased()
        {
            Interlocked.Exchange(ref released, 1);
            RetireIfDone();
        }

        private void RetireIfDone()
        {
            if (Volatile.Read(ref released) == 1 && Interlocked.Read(ref live) == 0)
                lock (registryGate) registry.Remove((long)Id);
        }

        private static readonly Native.ampx_allocator_alloc_fn allocFn = Alloc;
        private static readonly Native.ampx_allocator_free_fn freeFn = FreeMemory;
        internal static readonly IntPtr AllocFn = Marshal.GetFunctionPointerForDelegate(allocFn);
        internal static readonly IntPtr FreeFn = Marshal.GetFunctionPointerForDelegate(freeFn);

        [MonoPInvokeCallback(typeof(Native.ampx_allocator_alloc_fn))]
        private static void* Alloc(void* userData, UIntPtr bytes, UIntPtr alignment)
        {
            var r = Find(userData);
            if (r == null) return null;
            try
            {
                var p = r.allocator.Allocate((ulong)bytes, (ulong)alignment);
                if (p != IntPtr.Zero) Interlocked.Increment(ref r.live);
                return (void*)p;
            }
            catch (Exception e)
            {
                Callbacks.Keep(e);
                return null;
            }
        }

        [MonoPInvokeCallback(typeof(Native.ampx_allocator_free_fn))]
        private static void FreeMemory(void* userData, void* pointer, UIntPtr bytes)
        {
            var r = Find(userData);
            if (r == null) return;
            try
            {
                r.allocator.Free((IntPtr)pointer, (ulong)bytes);
            }
            catch (Exception e)
            {
                Callbacks.Keep(e);
            }
            finally
            {
                Interlocked.Decrement(ref r.live);
                r.RetireIfDone();
            }
        }
    }
}
