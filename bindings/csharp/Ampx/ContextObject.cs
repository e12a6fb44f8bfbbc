using System;

namespace Ampx
{
    /// <summary>
    /// The base of the objects made on a context other than tensors (Optimizer,
    /// Scaler, Autocast, Comm, DataParallel, Doctor, SafetensorsFile): the
    /// SafeHandle holding the object's one C reference, and the context whose
    /// deferred releases (see AmpxHandle) every call on the object runs first.
    /// </summary>
    public abstract class ContextObject : IDisposable
    {
        internal readonly AmpxHandle Handle;
        private readonly string what;

        /// <summary>The context the object was made on.</summary>
        public Context Context { get; private set; }

        internal ContextObject(AmpxHandle handle, Context context, string what)
        {
            Context = context;
            Handle = handle;
            handle.Deferred = context.Deferred;
            this.what = what;
        }

        /// <summary>The raw handle for a call: runs the context's deferred releases, then ObjectDisposedException once disposed.</summary>
        internal IntPtr Ptr
        {
            get
            {
                Context.Deferred.Drain();
                return Handle.Get(what);
            }
        }

        /// <summary>The raw C handle (ampx_optimizer, ampx_scaler, ...) for Native calls.</summary>
        public IntPtr RawHandle
        {
            get
            {
                Context.Deferred.MarkSharedWithC();
                return Ptr;
            }
        }

        public bool IsDisposed { get { return Handle.IsClosed; } }

        /// <summary>Releases the object's reference (see each class for what that ends).</summary>
        public void Dispose()
        {
            Handle.Dispose();
            Callbacks.RethrowKept();
        }

        /// <summary>A create function of ampx, given the raw context and where to write the new handle.</summary>
        internal unsafe delegate Native.ampx_status Creator(IntPtr context, IntPtr* result);

        /// <summary>The handle `create` makes on `context`, or the exception of its status.</summary>
        internal static unsafe IntPtr Create(Context context, Creator create)
        {
            var raw = ContextOf(context).Ptr;
            IntPtr result;
            // `create` keeps what its closure captured (parameters, the optimizer) alive through the call.
            Err.Check(create(raw, &result), context, create);
            return result;
        }

        /// <summary>`context`, or ArgumentNullException.</summary>
        internal static Context ContextOf(Context context)
        {
            if (context == null) throw new ArgumentNullException("context");
            return context;
        }
    }
}
