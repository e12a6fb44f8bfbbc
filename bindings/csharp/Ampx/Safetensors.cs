using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;

namespace Ampx
{
    /// <summary>One tensor of a safetensors file (ampx_safetensors_entry).</summary>
    public sealed class SafetensorsEntry
    {
        public string Name;
        /// <summary>0 when ampx has no such type (see DTypeName).</summary>
        public DType DType;
        /// <summary>The format's dtype name ("F16").</summary>
        public string DTypeName;
        public long[] Shape;
        /// <summary>Of the tensor's first byte, from the file's start.</summary>
        public ulong Offset;
        public ulong NBytes;
    }

    /// <summary>
    /// An opened, validated safetensors file (ampx.h section 16), mapped into
    /// memory; and Save, which writes one. Dispose releases the file; the mapping
    /// stays while tensors loaded from it without a copy live.
    /// </summary>
    public sealed unsafe class SafetensorsFile : ContextObject
    {
        private SafetensorsFile(Context context, Creator open)
            : base(new SafetensorsHandle(Create(context, open)), context, "SafetensorsFile") { }

        /// <summary>NUL-terminated UTF-8 copies of `texts` in native memory, and the array of their addresses.</summary>
        internal sealed class NativeStrings : IDisposable
        {
            internal readonly IntPtr[] Pointers;

            internal NativeStrings(IList<string> texts, string name)
            {
                Pointers = new IntPtr[texts == null ? 0 : texts.Count];
                try
                {
                    for (int i = 0; i < Pointers.Length; ++i)
                    {
                        if (texts[i] == null) throw new ArgumentNullException(name, name + "[" + i + "] is null");
                        var bytes = Utf8.Bytes(texts[i]);
                        Pointers[i] = Marshal.AllocHGlobal(bytes.Length);
                        Marshal.Copy(bytes, 0, Pointers[i], bytes.Length);
                    }
                }
                catch
                {
                    Dispose();
                    throw;
                }
            }

            public void Dispose()
            {
                foreach (var p in Pointers)
                    if (p != IntPtr.Zero) Marshal.FreeHGlobal(p);
            }
        }

        /// <summary>
        /// Writes `tensors` to `path` as a safetensors file, named by `names` (null:
        /// each tensor's own Name), with `metadata` (may be null) as "__metadata__";
        /// the file is replaced atomically.
        /// </summary>
        public static void Save(string path, Tensor[] tensors, string[] names = null,
                                IDictionary<string, string> metadata = null)
        {
            if (path == null) throw new ArgumentNullException("path");
            var raw = Tensor.Raw(tensors ?? new Tensor[0], "tensors");
            if (names != null && names.Length != raw.Length)
                throw new ArgumentException(names.Length + " names for " + raw.Length + " tensors", "names");
            var keys = new List<string>();
            var values = new List<string>();
            if (metadata != null)
                foreach (var pair in metadata)
                {
                    keys.Add(pair.Key);
                    values.Add(pair.Value);
                }
            using (var n = new NativeStrings(names, "names"))
            using (var k = new NativeStrings(keys, "metadata keys"))
            using (var v = new NativeStrings(values, "metadata values"))
            {
                Native.ampx_status status;
                fixed (byte* p = Utf8.Bytes(path))
                fixed (IntPtr* t = raw)
                fixed (IntPtr* np = n.Pointers)
                fixed (IntPtr* kp = k.Pointers)
                fixed (IntPtr* vp = v.Pointers)
                    status = Native.ampx_safetensors_save(p, t, names == null ? null : (byte**)np,
                                                          (UIntPtr)raw.Length, (byte**)kp, (byte**)vp,
                                                          (UIntPtr)keys.Count);
                Err.Check(status, tensors);
            }
        }

        /// <summary>Opens and validates `path` in `context`.</summary>
        public static SafetensorsFile Open(Context context, string path)
        {
            ContextOf(context);
            if (path == null) throw new ArgumentNullException("path");
            return new SafetensorsFile(context, (raw, result) =>
            {
                fixed (byte* p = Utf8.Bytes(path))
                    return Native.ampx_safetensors_open(raw, p, result);
            });
        }

        /// <summary>The number of tensors in the file.</summary>
        public int Count
        {
            get
            {
                UIntPtr count;
                Err.Check(Native.ampx_safetensors_count(Ptr, &count), this);
                return (int)(ulong)count;
            }
        }

        /// <summary>Tensor `index`, in the order of their data in the file.</summary>
        public SafetensorsEntry Entry(int index)
        {
            if (index < 0) throw new ArgumentOutOfRangeException("index");
            var e = Native.AMPX_SAFETENSORS_ENTRY_INIT();
            Err.Check(Native.ampx_safetensors_entry_get(Ptr, (UIntPtr)index, &e), this);
            var shape = new long[e.ndim];
            for (int i = 0; i < shape.Length; ++i) shape[i] = e.shape[i];
            return new SafetensorsEntry
            {
                Name = Utf8.String(e.name), DType = (DType)e.dtype, DTypeName = Utf8.String(e.dtype_name),
                Shape = shape, Offset = e.offset, NBytes = e.nbytes,
            };
        }

        /// <summary>Every entry.</summary>
        public SafetensorsEntry[] Entries()
        {
            var result = new SafetensorsEntry[Count];
            for (int i = 0; i < result.Length; ++i) result[i] = Entry(i);
            return result;
        }

        /// <summary>The index of the tensor named `name` (AmpxException when the file has none).</summary>
        public int Find(string name)
        {
            if (name == null) throw new ArgumentNullException("name");
            var raw = Ptr;
            UIntPtr index;
            fixed (byte* n = Utf8.Bytes(name))
                Err.Check(Native.ampx_safetensors_find(raw, n, &index), this);
            return (int)(ulong)index;
        }

        /// <summary>The "__metadata__" entries, ordered by key.</summary>
        public IDictionary<string, string> Metadata
        {
            get
            {
                var raw = Ptr;
                UIntPtr count;
                Err.Check(Native.ampx_safetensors_metadata_count(raw, &count), this);
                var result = new SortedDictionary<string, string>(StringComparer.Ordinal);
                for (ulong i = 0; i < (ulong)count; ++i)
                {
                    byte* key;
                    byte* value;
                    Err.Check(Native.ampx_safetensors_metadata_get(raw, (UIntPtr)i, &key, &value), this);
                    result[Utf8.String(key)] = Utf8.String(value);
                }
                return result;
            }
        }

        /// <summary>
        /// Loads the file's tensors `names` (null: each tensor's own Name) into
        /// `tensors`; shapes must agree, and dtypes too unless `convert`. Every pair
        /// is checked before anything is written.
        /// </summary>
        public void LoadInto(Tensor[] tensors, string[] names = null, bool convert = false)
        {
            var raw = Ptr;
            var ts = Tensor.Raw(tensors ?? new Tensor[0], "tensors");
            if (names != null && names.Length != ts.Length)
                throw new ArgumentException(names.Length + " names for " + ts.Length + " tensors", "names");
            uint flags = convert ? (uint)Native.AMPX_SAFETENSORS_CONVERT : 0u;
            using (var n = new NativeStrings(names, "names"))
            {
                Native.ampx_status status;
                fixed (IntPtr* t = ts)
                fixed (IntPtr* np = n.Pointers)
                    status = Native.ampx_safetensors_load_into(raw, names == null ? null : (byte**)np, t,
                                                               (UIntPtr)ts.Length, flags);
                Err.Check(status, this, tensors);
            }
        }

        /// <summary>
        /// A new tensor holding the file's tensor `name` (named so): on a CPU context
        /// on the file's mapping without a copy when aligned, unless `copy`.
        /// </summary>
        public Tensor LoadTensor(string name, bool copy = false)
        {
            if (name == null) throw new ArgumentNullException("name");
            var raw = Ptr;
            uint flags = copy ? (uint)Native.AMPX_SAFETENSORS_COPY : 0u;
            IntPtr result;
            fixed (byte* n = Utf8.Bytes(name))
                Err.Check(Native.ampx_safetensors_load_tensor(raw, n, flags, &result), this);
            return new Tensor(Context, new TensorHandle(result, true));
        }
    }
}
