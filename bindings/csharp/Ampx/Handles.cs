using System;
using System.Collections.Generic;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;
using System.Threading;

namespace Ampx
{
    /// <summary>
    /// Unity's IL2CPP compiles a static method passed to C as a function pointer
    /// only when the method carries an attribute of this name. Unity's own
    /// (AOT.MonoPInvokeCallbackAttribute) lives in UnityEngine, which this
    /// library does not reference, so it declares its own: IL2CPP matches the
    /// name, not the assembly.
    /// </summary>
    [AttributeUsage(AttributeTargets.Method)]
    internal sealed class MonoPInvokeCallbackAttribute : Attribute
    {
        public MonoPInvokeCallbackAttribute(Type delegateType) { DelegateType = delegateType; }
        public Type DelegateType { get; private set; }
    }

    /// <summary>
    /// The base of every ampx handle: one C reference, released once by
    /// ReleaseHandle. Finalizers run on the runtime's finalizer thread, while
    /// another thread may be using the handle's context, and ampx.h allows only
    /// ampx_tensor_release and ampx_fp8_recipe_release there (AnyThread); so
    /// another handle that is finalized (not disposed) is queued on its C
    /// context (DeferredReleases) and released by the next call on that
    /// context, on that call's thread -- or, once every Context object of the
    /// C context is disposed and the queue closed, leaked (DeferredReleases.Leak).
    /// </summary>
    public abstract class AmpxHandle : SafeHandle
    {
        internal DeferredReleases Deferred;
        private volatile bool finalizing;

        /// <summary>The C release function of this handle type.</summary>
        private readonly Action<IntPtr> releaser;

        protected AmpxHandle(IntPtr raw, bool ownsHandle, Action<IntPtr> releaser) : base(IntPtr.Zero, ownsHandle)
        {
            this.releaser = releaser;
            SetHandle(raw);
        }

        public override bool IsInvalid { get { return handle == IntPtr.Zero; } }

        /// <summary>Whether ampx.h allows the release on any thread at any moment.</summary>
        internal virtual bool AnyThread { get { return false; } }

        protected override void Dispose(bool disposing)
        {
            if (!disposing) finalizing = true;
            base.Dispose(disposing);
        }

        protected override bool ReleaseHandle()
        {
            if (finalizing)
            {
                if (AnyThread || Deferred == null) releaser(handle);
                else Deferred.DeferOrLeak(releaser, handle, GetType().Name);
                // A callback (a free hook) that threw on the finalizer thread has
                // no caller to rethrow to.
                Callbacks.DropKept();
            }
            else
            {
                releaser(handle);
            }
            return true;
        }

        /// <summary>The raw handle, or ObjectDisposedException once released.</summary>
        internal IntPtr Get(string what)
        {
            if (IsClosed || IsInvalid)
                throw new ObjectDisposedException(what, what + " was disposed (or was borrowed " +
                                                  "from a scope or callback that has ended)");
            return handle;
        }

        internal bool IsFinalizing { get { return finalizing; } }

        internal void Release(IntPtr raw) { releaser(raw); }
    }

    /// <summary>
    /// An ampx_context reference (released with ampx_context_release). Every
    /// Context object holds one, and joins its C context's DeferredReleases.
    /// </summary>
    public sealed class ContextHandle : AmpxHandle
    {
        internal ContextHandle(IntPtr raw) : base(raw, true, p => Native.ampx_context_release(p))
        {
            Deferred = DeferredReleases.Join(raw);
        }

        protected override bool ReleaseHandle()
        {
            Deferred.Leave(this, handle, IsFinalizing);
            // As AmpxHandle's: on the finalizer thread, no caller to rethrow to.
            if (IsFinalizing) Callbacks.DropKept();
            return true;
        }
    }

    /// <summary>An ampx_tensor reference (ampx_tensor_release, allowed on any thread).</summary>
    public sealed class TensorHandle : AmpxHandle
    {
        internal TensorHandle(IntPtr raw, bool owns) : base(raw, owns, p => Native.ampx_tensor_release(p)) { }
        internal override bool AnyThread { get { return true; } }
    }

    /// <summary>An ampx_optimizer reference (ampx_optimizer_release).</summary>
    public sealed class OptimizerHandle : AmpxHandle
    {
        internal OptimizerHandle(IntPtr raw) : base(raw, true, p => Native.ampx_optimizer_release(p)) { }
    }

    /// <summary>An ampx_scaler reference (ampx_scaler_release).</summary>
    public sealed class ScalerHandle : AmpxHandle
    {
        internal ScalerHandle(IntPtr raw) : base(raw, true, p => Native.ampx_scaler_release(p)) { }
    }

    /// <summary>An ampx_autocast policy (ampx_autocast_release).</summary>
    public sealed class AutocastHandle : AmpxHandle
    {
        internal AutocastHandle(IntPtr raw) : base(raw, true, p => Native.ampx_autocast_release(p)) { }
    }

    /// <summary>An ampx_comm reference (ampx_comm_release).</summary>
    public sealed class CommHandle : AmpxHandle
    {
        internal CommHandle(IntPtr raw) : base(raw, true, p => Native.ampx_comm_release(p)) { }
    }

    /// <summary>An ampx_data_parallel wrapper (ampx_data_parallel_release).</summary>
    public sealed class DataParallelHandle : AmpxHandle
    {
        internal DataParallelHandle(IntPtr raw) : base(raw, true, p => Native.ampx_data_parallel_release(p)) { }
    }

    /// <summary>An ampx_doctor (ampx_doctor_release).</summary>
    public sealed class DoctorHandle : AmpxHandle
    {
        internal DoctorHandle(IntPtr raw) : base(raw, true, p => Native.ampx_doctor_release(p)) { }
    }

    /// <summary>An opened safetensors file (ampx_safetensors_release).</summary>
    public sealed class SafetensorsHandle : AmpxHandle
    {
        internal SafetensorsHandle(IntPtr raw) : base(raw, true, p => Native.ampx_safetensors_release(p)) { }
    }

    /// <summary>
    /// What the C# objects of one C context share: the releases a finalizer
    /// could not make itself, which the next call on the context runs (Drain),
    /// and the context's Allocator registration. There is one per C context,
    /// found from the raw handle (Join), so the Context objects of
    /// Context.FromRawHandle and Tensor.FromRawHandle share the queue of the
    /// context they wrap, and a release queued through one is run by a call
    /// through another. It closes when the last of those Context objects is
    /// released (Leave); a finalizer that comes later can no longer queue, and
    /// leaks what it cannot release on its own thread. Count is read without
    /// the lock, so the common case -- nothing queued -- costs one volatile
    /// read per call.
    /// </summary>
    internal sealed class DeferredReleases
    {
        private static readonly object registryGate = new object();
        private static readonly Dictionary<IntPtr, DeferredReleases> registry =
            new Dictionary<IntPtr, DeferredReleases>();
        private static int warned;
        private static long leaked;

        private readonly object gate = new object();
        private readonly IntPtr context;
        private List<KeyValuePair<Action<IntPtr>, IntPtr>> items =
            new List<KeyValuePair<Action<IntPtr>, IntPtr>>();
        private volatile int count;
        private int wrappers;
        private bool closed;
        // Closed by the finalizer with nothing left that may use the context:
        // what is finalized later is released at once.
        private bool orphaned;
        private long deferred, run;
        private volatile bool sharedWithC;

        private DeferredReleases(IntPtr context) { this.context = context; }

        /// <summary>The context's Allocator, set by the Context that created it.</summary>
        internal AllocatorRegistration Allocator;

        internal long DeferredCount { get { lock (gate) return deferred; } }
        internal long RunCount { get { lock (gate) return run; } }
        internal int Pending { get { return count; } }
        internal bool IsClosed { get { lock (gate) return closed; } }

        /// <summary>Releases leaked by finalizers after their queue closed, in this process.</summary>
        internal static long LeakedCount { get { return Interlocked.Read(ref leaked); } }

        /// <summary>
        /// The raw context may be used by code outside the binding (it came from
        /// FromRawHandle, or a raw handle of it or of one of its objects was
        /// handed out), so its last Context object, finalized, cannot conclude
        /// that nothing uses it any more.
        /// </summary>
        internal void MarkSharedWithC() { sharedWithC = true; }

        /// <summary>The queue of C context `raw`, for a new Context object holding a reference to it.</summary>
        internal static DeferredReleases Join(IntPtr raw)
        {
            lock (registryGate)
            {
                DeferredReleases d;
                if (!registry.TryGetValue(raw, out d))
                {
                    d = new DeferredReleases(raw);
                    registry.Add(raw, d);
                }
                lock (d.gate) ++d.wrappers;
                return d;
            }
        }

        /// <summary>
        /// A Context object's reference `raw` is released, disposed or
        /// finalized. While other Context objects of the C context remain, a
        /// finalized one's reference is queued like any other release. The last
        /// one closes the queue (a new Context object for the same C context
        /// gets a new one) and runs what is queued, then its own release -- on
        /// the finalizer thread only when nothing outside the binding may use
        /// the context (every C# object of it is unreachable by then, and is
        /// released at once when finalized after it); otherwise both are leaked.
        /// </summary>
        internal void Leave(ContextHandle handle, IntPtr raw, bool finalizing)
        {
            List<KeyValuePair<Action<IntPtr>, IntPtr>> now;
            lock (registryGate)
            lock (gate)
            {
                if (--wrappers > 0)
                {
                    if (finalizing)
                    {
                        Add(handle.Release, raw);
                        return;
                    }
                    now = null;
                }
                else
                {
                    closed = true;
                    registry.Remove(context);
                    now = items;
                    items = new List<KeyValuePair<Action<IntPtr>, IntPtr>>();
                    count = 0;
                }
            }
            if (now == null)
            {
                handle.Release(raw);
                return;
            }
            if (finalizing && sharedWithC)
            {
                Leak(now.Count + 1, "the last Context of a context shared with C code (FromRawHandle, RawHandle)");
                return;
            }
            lock (gate)
            {
                run += now.Count;
                orphaned = finalizing;
            }
            foreach (var item in now) item.Key(item.Value);
            handle.Release(raw);
            if (Allocator != null) Allocator.ContextReleased();
        }

        /// <summary>
        /// Queues a finalized handle's release; once the queue is closed, makes it
        /// at once if nothing may use the context any more, else leaks it.
        /// </summary>
        internal void DeferOrLeak(Action<IntPtr> release, IntPtr handle, string what)
        {
            lock (gate)
            {
                if (!closed)
                {
                    Add(release, handle);
                    return;
                }
                if (!orphaned)
                {
                    Leak(1, what + " of a disposed Context");
                    return;
                }
            }
            release(handle);
        }

        private void Add(Action<IntPtr> release, IntPtr handle)
        {
            items.Add(new KeyValuePair<Action<IntPtr>, IntPtr>(release, handle));
            ++deferred;
            count = items.Count;
        }

        /// <summary>
        /// Releases that ampx.h does not allow on the finalizer thread while
        /// another thread may use the context, with no later call on the context
        /// to make them: left undone (the C context and its memory stay
        /// allocated), with one warning per process on standard error.
        /// </summary>
        private static void Leak(int n, string what)
        {
            Interlocked.Add(ref leaked, n);
            if (Interlocked.Exchange(ref warned, 1) == 0)
                Console.Error.WriteLine(
                    "ampx (C#): " + what + " was finalized, not disposed; the finalizer thread may not " +
                    "release it while another thread may use the context, and no later call on the " +
                    "context will, so it is leaked with its context's memory. Dispose such objects " +
                    "(and FromRawHandle contexts). This warning is given once.");
        }

        /// <summary>Runs the queued releases; called at the start of every call on the context.</summary>
        internal void Drain()
        {
            // Not from inside a callback: release functions must not run in
            // the middle of the ampx call that invoked it.
            if (count == 0 || Callbacks.Depth > 0) return;
            List<KeyValuePair<Action<IntPtr>, IntPtr>> now;
            lock (gate)
            {
                now = items;
                items = new List<KeyValuePair<Action<IntPtr>, IntPtr>>();
                count = 0;
                run += now.Count;
            }
            foreach (var item in now) item.Key(item.Value);
            Callbacks.RethrowKept();
        }
    }

    /// <summary>
    /// The state shared by the C# functions ampx calls back: how deep the
    /// calling thread is inside callbacks, and the first exception a callback
    /// threw, kept to be rethrown when the C call that ran it returns.
    /// </summary>
    internal static unsafe class Callbacks
    {
        [ThreadStatic] private static Exception kept;
        [ThreadStatic] private static int depth;

        internal static int Depth { get { return depth; } }
        internal static void Enter() { ++depth; }
        internal static void Exit() { --depth; }

        /// <summary>
        /// Keeps `error` (the first one of the call wins) and returns the status
        /// the callback gives ampx, with a message ampx passes on.
        /// </summary>
        internal static Native.ampx_status Fail(Exception error, string where)
        {
            if (kept == null) kept = error;
            var ampxError = error as AmpxException;
            var status = ampxError != null ? (Native.ampx_status)ampxError.Status
                                           : Native.ampx_status.AMPX_ERR_INVALID_ARGUMENT;
            var message = Utf8.Bytes(where + " threw " + error.GetType().FullName + ": " + error.Message);
            fixed (byte* text = message) return Native.ampx_set_error(status, text);
        }

        /// <summary>Keeps an exception of a callback that returns nothing (a deleter, a free hook).</summary>
        internal static void Keep(Exception error)
        {
            if (kept == null) kept = error;
        }

        internal static void RethrowKept()
        {
            var error = kept;
            if (error == null) return;
            kept = null;
            ExceptionDispatchInfo.Capture(error).Throw();
        }

        internal static void DropKept() { kept = null; }

        internal static object Target(void* userData)
        {
            return GCHandle.FromIntPtr((IntPtr)userData).Target;
        }

        internal static void Free(void* userData)
        {
            GCHandle.FromIntPtr((IntPtr)userData).Free();
        }
    }
}
