using System;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Text;

namespace Ampx
{
    /// <summary>
    /// A failed ampx call: the status the C function returned and the message
    /// ampx_last_error() gave for it (which function, which argument, the shapes
    /// and dtypes involved).
    /// </summary>
    public class AmpxException : Exception
    {
        /// <summary>The ampx status of the failed call (never Status.Ok).</summary>
        public Status Status { get; }

        /// <summary>ampx_last_error()'s message, as the library wrote it.</summary>
        public string Detail { get; }

        public AmpxException(Status status, string detail)
            : base(Library.StatusString(status) + ": " + detail)
        {
            Status = status;
            Detail = detail;
        }
    }

    /// <summary>Checks statuses; keeps the objects a call names alive until it returns.</summary>
    internal static class Err
    {
        // NoInlining: the `keep` arguments must stay reachable until the C call
        // that produced `status` has returned (a finalizer must not release a
        // handle the call is still using), which only holds when the JIT
        // cannot see through this method.
        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void Check(Native.ampx_status status, object keep1 = null,
                                   object keep2 = null, object keep3 = null, object keep4 = null)
        {
            Callbacks.RethrowKept();
            if (status != Native.ampx_status.AMPX_OK)
                throw Failure(status);
        }

        internal static unsafe AmpxException Failure(Native.ampx_status status)
        {
            return new AmpxException((Status)status, Utf8.String(Native.ampx_last_error()));
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void KeepAlive(object keep1, object keep2 = null, object keep3 = null) { }
    }

    /// <summary>UTF-8 strings to and from C.</summary>
    internal static unsafe class Utf8
    {
        /// <summary>`text` as NUL-terminated UTF-8 (null for null).</summary>
        internal static byte[] Bytes(string text)
        {
            if (text == null) return null;
            var bytes = new byte[Encoding.UTF8.GetByteCount(text) + 1];
            Encoding.UTF8.GetBytes(text, 0, text.Length, bytes, 0);
            return bytes;
        }

        internal static string String(byte* text)
        {
            if (text == null) return null;
            int length = 0;
            while (text[length] != 0) ++length;
            return Encoding.UTF8.GetString(text, length);
        }

        internal static string String(IntPtr text) { return String((byte*)text); }
    }

    /// <summary>
    /// What ampx says about itself and its types (section 1-3 of ampx.h).
    /// Everything here is thread-safe.
    /// </summary>
    public static unsafe class Library
    {
        /// <summary>The header version this binding was generated from (major * 10000 + minor * 100 + patch).</summary>
        public const int HeaderVersion = Native.AMPX_VERSION_NUMBER;

        /// <summary>The version of the loaded library, as HeaderVersion computes it.</summary>
        public static int Version { get { return (int)Native.ampx_version(); } }

        /// <summary>The loaded library's version string, e.g. "0.1.0".</summary>
        public static string VersionString { get { return Utf8.String(Native.ampx_version_string()); } }

        /// <summary>Whether the library was built with its CUDA backend.</summary>
        public static bool HasCuda { get { return Native.ampx_has_cuda() != 0; } }

        /// <summary>Number of CUDA devices ampx can use (0 without CUDA).</summary>
        public static int CudaDeviceCount { get { return Native.ampx_cuda_device_count(); } }

        /// <summary>The status's C name ("AMPX_ERR_SHAPE").</summary>
        public static string StatusString(Status status)
        {
            return Utf8.String(Native.ampx_status_string((Native.ampx_status)status));
        }

        /// <summary>The message of the calling thread's most recent failed ampx call ("" if none).</summary>
        public static string LastError { get { return Utf8.String(Native.ampx_last_error()); } }

        /// <summary>The status of the calling thread's most recent failed ampx call (Ok if none).</summary>
        public static Status LastStatus { get { return (Status)Native.ampx_last_status(); } }

        /// <summary>Bytes per element of `dtype` (0 for a value that is not a dtype).</summary>
        public static int DTypeSize(DType dtype)
        {
            return (int)(ulong)Native.ampx_dtype_size((Native.ampx_dtype)dtype);
        }

        /// <summary>ampx's name of `dtype` ("f32", "bf16"; "invalid" otherwise).</summary>
        public static string DTypeName(DType dtype)
        {
            return Utf8.String(Native.ampx_dtype_name((Native.ampx_dtype)dtype));
        }
    }
}
