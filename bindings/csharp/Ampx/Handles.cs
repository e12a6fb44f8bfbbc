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
    /// ampx_tensor_release there; so a handle other than a tensor's that is
    /// finalized (not disposed) is queued on its context (DeferredReleases)
    /// and released by the next call on that context, on that call's thread.
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

        protected override void Dispose(bool disposing)
        {
            if (!disposing) finalizing = true;
            base.Dispose(disposing);
        }

        protected override bool ReleaseHandle()
        {
            if (finalizing)
            {
                if (Deferred == null || !Deferred.Defer(releaser, handle))
                    releaser(handle);
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
    }

    /// <summary>An ampx_context reference (released with ampx_context_release).</summary>
    public sealed class ContextHandle : AmpxHandle
    {
        internal ContextHandle(IntPtr raw) : base(raw, true, p => Native.ampx_context_release(p)) { }
        internal AllocatorRegistration Allocator;

        protected override bool ReleaseHandle()
        {
            // A finalized context is unreachable, and so is every object made
            // from it (each holds its Context): nothing can use them any more,
            // so what is queued and what comes later is released at once.
            if (IsFinalizing && Deferred != null) Deferred.CloseAndDrain();
            base.ReleaseHandle();
            if (Allocator != null) Allocator.ContextReleased();
            return true;
        }
    }

    /// <summary>An ampx_tensor reference (ampx_tensor_release, allowed on any thread).</summary>
    public sealed class TensorHandle : AmpxHandle
    {
        internal TensorHandle(IntPtr raw, bool owns) : base(raw, owns, p => Native.ampx_tensor_release(p)) { }
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
    /// Releases of one context's handles that a finalizer could not make
    /// itself; the next call on the context runs them (Drain). Count is read
    /// without the lock, so the common case -- nothing queued -- costs one
    /// volatile read per call.
    /// </summary>
    internal sealed class DeferredReleases
    {
        private readonly object gate = new object();
        private List<KeyValuePair<Action<IntPtr>, IntPtr>> items =
            new List<KeyValuePair<Action<IntPtr>, IntPtr>>();
        private volatile int count;
        private bool closed;
        private long deferred, run;

        internal long DeferredCount { get { lock (gate) return deferred; } }
        internal long RunCount { get { lock (gate) return run; } }
        internal int Pending { get { return count; } }

        /// <summary>Queues a release; false when the context is gone (release at once).</summary>
        internal bool Defer(Action<IntPtr> release, IntPtr handle)
        {
            lock (gate)
            {
                if (closed) return false;
                items.Add(new KeyValuePair<Action<IntPtr>, IntPtr>(release, handle));
                ++deferred;
                count = items.Count;
                return true;
            }
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

        internal void CloseAndDrain()
        {
            List<KeyValuePair<Action<IntPtr>, IntPtr>> now;
            lock (gate)
            {
                closed = true;
                now = items;
                items = new List<KeyValuePair<Action<IntPtr>, IntPtr>>();
                count = 0;
                run += now.Count;
            }
            foreach (var item in now) item.Key(item.Value);
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
