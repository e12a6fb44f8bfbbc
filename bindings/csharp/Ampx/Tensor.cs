using System;
using System.Runtime.InteropServices;

namespace Ampx
{
    /// <summary>
    /// A dense, row-major tensor on its context's device (ampx_tensor). Each
    /// Tensor object holds one reference, dropped by Dispose or, failing that, by
    /// the garbage collector (from its finalizer thread, which ampx.h allows for
    /// tensors). A tensor an op returns inside a Scope is borrowed from it instead
    /// (see Context.Scope).
    /// </summary>
    public sealed unsafe partial class Tensor : IDisposable
    {
        private TensorHandle handle;

        /// <summary>The context the tensor belongs to.</summary>
        public Context Context { get; private set; }

        internal Tensor(Context context, TensorHandle handle)
        {
            Context = context;
            this.handle = handle;
        }

        internal IntPtr Ptr
        {
            get
            {
                Context.Deferred.Drain();
                return handle.Get("Tensor");
            }
        }

        /// <summary>The raw ampx_tensor for Native calls (valid while this object is alive).</summary>
        public IntPtr RawHandle
        {
            get
            {
                Context.Deferred.MarkSharedWithC();
                return Ptr;
            }
        }

        /// <summary>The SafeHandle holding this object's reference.</summary>
        public TensorHandle SafeHandle { get { return handle; } }

        /// <summary>True once disposed, or once the scope or callback it was borrowed from has ended.</summary>
        public bool IsDisposed { get { return handle.IsClosed; } }

        /// <summary>Drops this object's reference (a borrowed tensor is just ended).</summary>
        public void Dispose()
        {
            handle.Dispose();
            Callbacks.RethrowKept();
        }

        internal void EndBorrow()
        {
            if (!handle.IsClosed) handle.SetHandleAsInvalid();
        }

        /// <summary>A borrowed wrapper becomes an owning one (ampx_tensor_retain).</summary>
        internal void TakeReference()
        {
            var raw = Ptr;
            Err.Check(Native.ampx_tensor_retain(raw), this);
            var old = handle;
            handle = new TensorHandle(raw, true);
            old.SetHandleAsInvalid();
        }

        /// <summary>Another Tensor object for the same tensor, with a reference of its own (ampx_tensor_retain).</summary>
        public Tensor Share()
        {
            var raw = Ptr;
            Err.Check(Native.ampx_tensor_retain(raw), this);
            return new Tensor(Context, new TensorHandle(raw, true));
        }

        /// <summary>
        /// A Tensor for a tensor handle made elsewhere (by engine C code): adds a
        /// reference, which Dispose drops again, and a Context for its context
        /// (ampx_tensor_context, ampx_context_retain).
        /// </summary>
        public static Tensor FromRawHandle(IntPtr rawTensor)
        {
            if (rawTensor == IntPtr.Zero) throw new ArgumentNullException("rawTensor");
            IntPtr rawContext;
            Err.Check(Native.ampx_tensor_context(rawTensor, &rawContext));
            var context = Context.FromRawHandle(rawContext);
            Err.Check(Native.ampx_tensor_retain(rawTensor));
            return new Tensor(context, new TensorHandle(rawTensor, true));
        }

        internal static IntPtr[] Raw(Tensor[] tensors, string name)
        {
            if (tensors == null) throw new ArgumentNullException(name);
            var raw = new IntPtr[tensors.Length];
            for (int i = 0; i < tensors.Length; ++i)
            {
                if (tensors[i] == null) throw new ArgumentNullException(name, name + "[" + i + "] is null");
                raw[i] = tensors[i].Ptr;
            }
            return raw;
        }

        internal static IntPtr RawOrNull(Tensor tensor)
        {
            return tensor == null ? IntPtr.Zero : tensor.Ptr;
        }

        // ---- creation -----------------------------------------------------

        /// <summary>A tensor with uninitialised contents.</summary>
        public static Tensor Empty(Context context, DType dtype, params long[] shape)
        {
            var raw = ContextObject.ContextOf(context).Ptr;
            shape = shape ?? new long[0];
            IntPtr result;
            fixed (long* s = shape)
                Err.Check(Native.ampx_tensor_empty(raw, (Native.ampx_dtype)dtype, shape.Length, s, &result),
                          context);
            return new Tensor(context, new TensorHandle(result, true));
        }

        /// <summary>A tensor of zeros.</summary>
        public static Tensor Zeros(Context context, DType dtype, params long[] shape)
        {
            var raw = ContextObject.ContextOf(context).Ptr;
            shape = shape ?? new long[0];
            IntPtr result;
            fixed (long* s = shape)
                Err.Check(Native.ampx_tensor_zeros(raw, (Native.ampx_dtype)dtype, shape.Length, s, &result),
                          context);
            return new Tensor(context, new TensorHandle(result, true));
        }

        /// <summary>
        /// A tensor holding a copy of host memory: `bytes` bytes at `data`, which
        /// must equal the element count times the element size (else AmpxException
        /// with Status.ErrShape).
        /// </summary>
        public static Tensor FromHost(Context context, DType dtype, long[] shape, IntPtr data, ulong bytes)
        {
            var raw = ContextObject.ContextOf(context).Ptr;
            shape = shape ?? new long[0];
            IntPtr result;
            fixed (long* s = shape)
                Err.Check(Native.ampx_tensor_from_host(raw, (Native.ampx_dtype)dtype, shape.Length, s,
                                                       (void*)data, (UIntPtr)bytes, &result), context);
            return new Tensor(context, new TensorHandle(result, true));
        }

        private static Tensor FromArray(Context context, DType dtype, long[] shape, Array data)
        {
            if (data == null) throw new ArgumentNullException("data");
            var pin = GCHandle.Alloc(data, GCHandleType.Pinned);
            try
            {
                return FromHost(context, dtype, shape, pin.AddrOfPinnedObject(), (ulong)Buffer.ByteLength(data));
            }
            finally
            {
                pin.Free();
            }
        }

        /// <summary>
        /// An F32 tensor of `shape` holding `data` (row-major); with another
        /// floating `dtype` the values are rounded to it (to nearest even). The
        /// array's length must be the element count.
        /// </summary>
        public static Tensor FromArray(Context context, float[] data, long[] shape, DType dtype = DType.F32)
        {
            var f32 = FromArray(context, DType.F32, shape, data);
            if (dtype == DType.F32) return f32;
            using (f32) return f32.Cast(dtype);
        }

        /// <summary>An I32 tensor holding `data`.</summary>
        public static Tensor FromArray(Context context, int[] data, params long[] shape)
        {
            return FromArray(context, DType.I32, shape, data);
        }

        /// <summary>An I64 tensor holding `data`.</summary>
        public static Tensor FromArray(Context context, long[] data, params long[] shape)
        {
            return FromArray(context, DType.I64, shape, data);
        }

        /// <summary>An F16 or BF16 tensor from its elements' bit patterns.</summary>
        public static Tensor FromBits(Context context, DType dtype, ushort[] bits, params long[] shape)
        {
            return FromArray(context, dtype, shape, bits);
        }

        /// <summary>An F8e4m3 or F8e5m2 tensor from its elements' bit patterns.</summary>
        public static Tensor FromBits(Context context, DType dtype, byte[] bits, params long[] shape)
        {
            return FromArray(context, dtype, shape, bits);
        }

        private static readonly Native.ampx_deleter unpin = Unpin;
        private static readonly IntPtr UnpinFn = Marshal.GetFunctionPointerForDelegate(unpin);

        [MonoPInvokeCallback(typeof(Native.ampx_deleter))]
        private static void Unpin(void* userData, void* data)
        {
            // Any thread: the tensor's last release runs it (a finalizer, too).
            try
            {
                var pinned = GCHandle.FromIntPtr((IntPtr)userData);
                ((GCHandle)pinned.Target).Free();
                pinned.Free();
            }
            catch (Exception e)
            {
                Callbacks.Keep(e);
            }
        }

        /// <summary>
        /// A CPU tensor on `data` itself, without a copy (ampx_tensor_wrap): the array
        /// is pinned until the tensor's last reference is gone, and writes through
        /// either are seen by both. F32 of `shape`; the length must be the element count.
        /// </summary>
        public static Tensor Wrap(Context context, float[] data, params long[] shape)
        {
            return WrapArray(context, DType.F32, shape, data);
        }

        /// <summary>As Wrap(float[]), for an I32 tensor.</summary>
        public static Tensor Wrap(Context context, int[] data, params long[] shape)
        {
            return WrapArray(context, DType.I32, shape, data);
        }

        private static Tensor WrapArray(Context context, DType dtype, long[] shape, Array data)
        {
            if (data == null) throw new ArgumentNullException("data");
            var raw = ContextObject.ContextOf(context).Ptr;
            shape = shape ?? new long[0];
            var pin = GCHandle.Alloc(data, GCHandleType.Pinned);
            var box = GCHandle.Alloc(pin);
            IntPtr result;
            Native.ampx_status status;
            fixed (long* s = shape)
                status = Native.ampx_tensor_wrap(raw, (Native.ampx_dtype)dtype, shape.Length, s,
                                                 (void*)pin.AddrOfPinnedObject(),
                                                 (UIntPtr)(ulong)Buffer.ByteLength(data), UnpinFn,
                                                 (void*)GCHandle.ToIntPtr(box), &result);
            if (status != Native.ampx_status.AMPX_OK)
            {
                // ampx does not call the deleter when wrap fails.
                box.Free();
                pin.Free();
            }
            Err.Check(status, context, data);
            return new Tensor(context, new TensorHandle(result, true));
        }

        private static readonly Native.ampx_deleter runDeleter = RunDeleter;
        private static readonly IntPtr RunDeleterFn = Marshal.GetFunctionPointerForDelegate(runDeleter);

        [MonoPInvokeCallback(typeof(Native.ampx_deleter))]
        private static void RunDeleter(void* userData, void* data)
        {
            var handle = GCHandle.FromIntPtr((IntPtr)userData);
            try
            {
                ((Action<IntPtr>)handle.Target)((IntPtr)data);
            }
            catch (Exception e)
            {
                Callbacks.Keep(e);
            }
            finally
            {
                handle.Free();
            }
        }

        /// <summary>
        /// Wraps memory the program owns (host memory for a CPU context, device
        /// memory for a CUDA one: an engine's buffer) as a tensor without a copy.
        /// `deleter` (may be null) is called with `data` once ampx no longer uses it
        /// -- on whichever thread releases the last reference, the finalizer thread
        /// included -- and not at all when this call fails.
        /// </summary>
        public static Tensor Wrap(Context context, DType dtype, long[] shape, IntPtr data, ulong bytes,
                                  Action<IntPtr> deleter = null)
        {
            var raw = ContextObject.ContextOf(context).Ptr;
            shape = shape ?? new long[0];
            var box = deleter == null ? default(GCHandle) : GCHandle.Alloc(deleter);
            IntPtr result;
            Native.ampx_status status;
            fixed (long* s = shape)
                status = Native.ampx_tensor_wrap(raw, (Native.ampx_dtype)dtype, shape.Length, s, (void*)data,
                                                 (UIntPtr)bytes, deleter == null ? IntPtr.Zero : RunDeleterFn,
                                                 deleter == null ? null : (void*)GCHandle.ToIntPtr(box),
                                                 &result);
            if (status != Native.ampx_status.AMPX_OK && deleter != null) box.Free();
            Err.Check(status, context);
            return new Tensor(context, new TensorHandle(result, true));
        }

        /// <summary>
        /// Imports a DLPack tensor (a DLManagedTensor*) without a copy. On success
        /// ampx owns it and calls its deleter when done; on failure it stays the caller's.
        /// </summary>
        public static Tensor FromDlpack(Context context, IntPtr managedTensor)
        {
            var raw = ContextObject.ContextOf(context).Ptr;
            IntPtr result;
            Err.Check(Native.ampx_tensor_from_dlpack(raw, (void*)managedTensor, &result), context);
            return new Tensor(context, new TensorHandle(result, true));
        }

        /// <summary>
        /// Exports the tensor as a DLManagedTensor* sharing its memory; it holds a
        /// reference to the tensor, which its consumer drops by calling its deleter once.
        /// </summary>
        public IntPtr ToDlpack()
        {
            void* result;
            Err.Check(Native.ampx_tensor_to_dlpack(Ptr, &result), this);
            return (IntPtr)result;
        }

        /// <summary>
        /// A view: a tensor of `dtype` and `shape` on this tensor's memory, starting
        /// `byteOffset` bytes in (ampx_tensor_view). No copy; writes through either
        /// are seen by both.
        /// </summary>
        public Tensor View(ulong byteOffset, DType dtype, params long[] shape)
        {
            var raw = Ptr;
            shape = shape ?? new long[0];
            IntPtr result;
            fixed (long* s = shape)
                Err.Check(Native.ampx_tensor_view(raw, (UIntPtr)byteOffset, (Native.ampx_dtype)dtype, shape.Length,
                                                  s, &result), this);
            return new Tensor(Context, new TensorHandle(result, true));
        }

        // ---- contents -----------------------------------------------------

        /// <summary>Copies the contents to host memory of exactly NBytes bytes.</summary>
        public void CopyTo(IntPtr destination, ulong bytes)
        {
            Err.Check(Native.ampx_tensor_to_host(Ptr, (void*)destination, (UIntPtr)bytes), this);
        }

        /// <summary>Overwrites the contents from host memory of exactly NBytes bytes.</summary>
        public void CopyFrom(IntPtr source, ulong bytes)
        {
            Err.Check(Native.ampx_tensor_copy_from_host(Ptr, (void*)source, (UIntPtr)bytes), this);
        }

        /// <summary>
        /// Copies the contents into `destination`, an array of a primitive type
        /// whose byte length must equal NBytes (else Status.ErrShape).
        /// </summary>
        public void CopyTo<T>(T[] destination) where T : struct
        {
            if (destination == null) throw new ArgumentNullException("destination");
            var raw = Ptr;
            var pin = GCHandle.Alloc(destination, GCHandleType.Pinned);
            try
            {
                Err.Check(Native.ampx_tensor_to_host(raw, (void*)pin.AddrOfPinnedObject(),
                                                     (UIntPtr)(ulong)Buffer.ByteLength(destination)), this);
            }
            finally
            {
                pin.Free();
            }
        }

        /// <summary>Overwrites the contents from `source`, whose byte length must equal NBytes.</summary>
        public void CopyFrom<T>(T[] source) where T : struct
        {
            if (source == null) throw new ArgumentNullException("source");
            var raw = Ptr;
            var pin = GCHandle.Alloc(source, GCHandleType.Pinned);
            try
            {
                Err.Check(Native.ampx_tensor_copy_from_host(raw, (void*)pin.AddrOfPinnedObject(),
                                                            (UIntPtr)(ulong)Buffer.ByteLength(source)), this);
            }
            finally
            {
                pin.Free();
            }
        }

#if !AMPX_NO_SPAN
        /// <summary>Copies the contents into `destination` (byte length NBytes).</summary>
        public void CopyTo<T>(Span<T> destination) where T : struct
        {
            var raw = Ptr;
            var bytes = MemoryMarshal.AsBytes(destination);
            fixed (byte* p = &MemoryMarshal.GetReference(bytes))
                Err.Check(Native.ampx_tensor_to_host(raw, p, (UIntPtr)bytes.Length), this);
        }

        /// <summary>Overwrites the contents from `source` (byte length NBytes).</summary>
        public void CopyFrom<T>(ReadOnlySpan<T> source) where T : struct
        {
            var raw = Ptr;
            var bytes = MemoryMarshal.AsBytes(source);
            fixed (byte* p = &MemoryMarshal.GetReference(bytes))
                Err.Check(Native.ampx_tensor_copy_from_host(raw, p, (UIntPtr)bytes.Length), this);
        }
#endif

        /// <summary>The elements as floats: F32 as stored, F16/BF16/FP8 widened exactly (through ampx_tensor_cast).</summary>
        public float[] ToFloatArray()
        {
            var result = new float[checked((int)Numel)];
            if (DType == DType.F32)
            {
                CopyTo(result);
            }
            else
            {
                using (var f32 = Cast(DType.F32)) f32.CopyTo(result);
            }
            return result;
        }

        /// <summary>The elements of an I32 tensor.</summary>
        public int[] ToInt32Array()
        {
            var result = new int[checked((int)Numel)];
            CopyTo(result);
            return result;
        }

        /// <summary>The elements of an I64 tensor.</summary>
        public long[] ToInt64Array()
        {
            var result = new long[checked((int)Numel)];
            CopyTo(result);
            return result;
        }

        /// <summary>The bit patterns of an F16 or BF16 tensor's elements.</summary>
        public ushort[] ToBits()
        {
            var result = new ushort[checked((int)Numel)];
            CopyTo(result);
            return result;
        }

        /// <summary>The bit patterns of an F8e4m3 or F8e5m2 tensor's elements.</summary>
        public byte[] ToFp8Bits()
        {
            var result = new byte[checked((int)Numel)];
            CopyTo(result);
            return result;
        }

        /// <summary>The single element of a one-element tensor, as a double.</summary>
        public double Item()
        {
            var values = ToFloatArray();
            if (values.Length != 1)
                throw new InvalidOperationException("Item() of a tensor of " + values.Length + " elements");
            return values[0];
        }

        /// <summary>this = source, converting the dtype (ampx_tensor_copy); element counts must agree.</summary>
        public void CopyFrom(Tensor source)
        {
            if (source == null) throw new ArgumentNullException("source");
            Err.Check(Native.ampx_tensor_copy(Ptr, source.Ptr), this, source);
        }

        /// <summary>
        /// this (F8e4m3 or F8e5m2) = source (F32, F16 or BF16, as many elements)
        /// rounded to nearest even, values beyond the format's max following
        /// `overflow` (ampx_tensor_copy_fp8; CopyFrom uses torch's rules: E4M3
        /// saturates, E5M2 overflows to inf).
        /// </summary>
        public void CopyFp8From(Tensor source, Fp8Overflow overflow = Fp8Overflow.Saturate)
        {
            if (source == null) throw new ArgumentNullException("source");
            Err.Check(Native.ampx_tensor_copy_fp8(Ptr, source.Ptr, (Native.ampx_fp8_overflow)overflow), this, source);
        }

        /// <summary>
        /// A new tensor of `dtype` holding this one converted (torch's Tensor.to).
        /// When this tensor requires grad it is the recorded ampx_cast, an op
        /// output like any other: with grad mode on the gradient comes back here,
        /// cast to this tensor's dtype. Otherwise the plain ampx_tensor_cast.
        /// </summary>
        public Tensor Cast(DType dtype)
        {
            IntPtr result;
            if (RequiresGrad) return Output(Native.ampx_cast(Ptr, (Native.ampx_dtype)dtype, &result), result);
            Err.Check(Native.ampx_tensor_cast(Ptr, (Native.ampx_dtype)dtype, &result), this);
            return new Tensor(Context, new TensorHandle(result, true));
        }

        /// <summary>A copy in new memory with this tensor's dtype, recorded as Cast (torch's Tensor.clone).</summary>
        public Tensor Clone()
        {
            return Cast(DType);
        }

        /// <summary>Sets every element to `value`.</summary>
        public void Fill(double value)
        {
            Err.Check(Native.ampx_tensor_fill(Ptr, value), this);
        }

        // ---- properties ---------------------------------------------------

        /// <summary>The name used in diagnostics ("" if none); null or "" clears it.</summary>
        public string Name
        {
            get
            {
                byte* name;
                Err.Check(Native.ampx_tensor_name(Ptr, &name), this);
                return Utf8.String(name);
            }
            set
            {
                var raw = Ptr;
                fixed (byte* name = Utf8.Bytes(value))
                    Err.Check(Native.ampx_tensor_set_name(raw, name), this);
            }
        }

        public DType DType
        {
            get
            {
                Native.ampx_dtype dtype;
                Err.Check(Native.ampx_tensor_dtype(Ptr, &dtype), this);
                return (DType)dtype;
            }
        }

        public int Ndim
        {
            get
            {
                int ndim;
                Err.Check(Native.ampx_tensor_ndim(Ptr, &ndim), this);
                return ndim;
            }
        }

        /// <summary>The extents, outermost first.</summary>
        public long[] Shape
        {
            get
            {
                var dims = new long[Ndim];
                fixed (long* d = dims)
                    Err.Check(Native.ampx_tensor_shape(Ptr, d, dims.Length), this);
                return dims;
            }
        }

        public long Numel
        {
            get
            {
                long numel;
                Err.Check(Native.ampx_tensor_numel(Ptr, &numel), this);
                return numel;
            }
        }

        public ulong NBytes
        {
            get
            {
                UIntPtr bytes;
                Err.Check(Native.ampx_tensor_nbytes(Ptr, &bytes), this);
                return (ulong)bytes;
            }
        }

        /// <summary>Address of the first element on the device (valid while the tensor lives).</summary>
        public IntPtr DataPointer
        {
            get
            {
                void* data;
                Err.Check(Native.ampx_tensor_data(Ptr, &data), this);
                return (IntPtr)data;
            }
        }

        /// <summary>Whether gradients flow to or through this tensor; set on leaves.</summary>
        public bool RequiresGrad
        {
            get
            {
                int value;
                Err.Check(Native.ampx_tensor_requires_grad(Ptr, &value), this);
                return value != 0;
            }
            set { Err.Check(Native.ampx_tensor_set_requires_grad(Ptr, value ? 1 : 0), this); }
        }

        /// <summary>
        /// The attached gradient (a new Tensor object with its own reference), or
        /// null; setting attaches one (null detaches).
        /// </summary>
        public Tensor Grad
        {
            get
            {
                IntPtr grad;
                Err.Check(Native.ampx_tensor_grad(Ptr, &grad), this);
                if (grad == IntPtr.Zero) return null;
                Err.Check(Native.ampx_tensor_retain(grad), this);
                return new Tensor(Context, new TensorHandle(grad, true));
            }
            set { Err.Check(Native.ampx_tensor_set_grad(Ptr, RawOrNull(value)), this, value); }
        }

        // ---- autograd -----------------------------------------------------

        /// <summary>
        /// Backpropagates from this one-element loss (ampx_backward); with a scaler
        /// the seed is its scale, so the gradients come out scaled. `retainGraph`
        /// and `createGraph` are torch's (ampx_backward_ex): retainGraph (null: the
        /// value of createGraph) keeps the tape for another backward over the same
        /// graph -- without it a second one through the freed records throws with
        /// Status.ErrOrder -- and createGraph computes the gradients with recorded
        /// ops, so each reached leaf's Grad becomes a new tensor that can be
        /// differentiated (Autograd.Grad). Grad-ready hooks and data-parallel
        /// reductions run only in a backward that does not retain the graph.
        /// </summary>
        public void Backward(Scaler scaler = null, bool? retainGraph = null, bool createGraph = false)
        {
            var raw = Ptr;
            var s = scaler == null ? IntPtr.Zero : scaler.Ptr;
            if (!retainGraph.HasValue && !createGraph)
            {
                Err.Check(Native.ampx_backward(raw, s), this, scaler);
                return;
            }
            var o = Native.ampx_backward_options_default();
            o.retain_graph = Autograd.RetainFlag(retainGraph);
            o.create_graph = createGraph ? 1 : 0;
            Err.Check(Native.ampx_backward_ex(raw, s, &o), this, scaler);
        }

        /// <summary>Tells the grad-ready hook this parameter's gradient is final (engines with their own backward).</summary>
        public void GradReady()
        {
            Err.Check(Native.ampx_grad_ready(Ptr), this);
        }

        public override string ToString()
        {
            if (IsDisposed) return "Tensor(<disposed>)";
            return "Tensor(" + Library.DTypeName(DType) + " [" + string.Join(", ", Shape) + "])";
        }
    }
}
