using System;

namespace Ampx
{
    // FP8 training (ampx.h section 18, EXPERIMENTAL): scaling recipes after
    // Transformer Engine, quantization with a recipe's scales, FP8 products
    // under autocast (Autocast.SetFp8) and what the precision doctor sees of a
    // tensor in FP8 (Fp8Recipe.Inspect).

    /// <summary>Options of an Fp8Recipe (ampx_fp8_recipe_options), starting from Transformer Engine's defaults.</summary>
    public sealed class Fp8RecipeOptions
    {
        public Fp8Scaling Scaling;
        public Fp8Format Format;
        /// <summary>Default 1024; at least 1.</summary>
        public int AmaxHistoryLen;
        public Fp8AmaxAlgo AmaxComputeAlgo;
        /// <summary>Default 0; 0 .. 127: scale = fp8_max / amax / 2^margin.</summary>
        public int Margin;
        /// <summary>Current scaling only: scales rounded down to powers of two.</summary>
        public bool PowerOfTwoScales;

        public Fp8RecipeOptions()
        {
            var d = Native.ampx_fp8_recipe_options_default();
            Scaling = (Fp8Scaling)d.scaling; Format = (Fp8Format)d.format; AmaxHistoryLen = d.amax_history_len;
            AmaxComputeAlgo = (Fp8AmaxAlgo)d.amax_compute_algo; Margin = d.margin;
            PowerOfTwoScales = d.power_of_two_scales != 0;
        }

        internal Native.ampx_fp8_recipe_options ToNative()
        {
            var o = Native.ampx_fp8_recipe_options_default();
            o.scaling = (Native.ampx_fp8_scaling)Scaling; o.format = (Native.ampx_fp8_format)Format;
            o.amax_history_len = AmaxHistoryLen; o.amax_compute_algo = (Native.ampx_fp8_amax_algo)AmaxComputeAlgo;
            o.margin = Margin; o.power_of_two_scales = PowerOfTwoScales ? 1 : 0;
            return o;
        }
    }

    /// <summary>A recipe slot (ampx_fp8_slot_info) and its amax history, oldest first (never filled: 0).</summary>
    public sealed class Fp8SlotInfo
    {
        public string Name;
        public Fp8Role Role;
        /// <summary>The slot's format, F8e4m3 or F8e5m2.</summary>
        public DType DType;
        public float Scale, ScaleInv, Amax;
        public int HistoryLen;
        public float[] History;
    }

    /// <summary>
    /// What FP8 at a slot's scale would do to a tensor (ampx_fp8_tensor_report):
    /// of its non-zero finite elements, the fractions flushed to zero or saturated.
    /// </summary>
    public struct Fp8TensorReport
    {
        public long Count;
        public double FlushedE4M3, SaturatedE4M3, FlushedE5M2, SaturatedE5M2;
        /// <summary>The slot's scale the fractions are for.</summary>
        public float Scale;
        /// <summary>The slot's own format.</summary>
        public DType DType;
    }

    /// <summary>An autocast policy's FP8 counts (ampx_fp8_stats).</summary>
    public struct Fp8Stats
    {
        public long Fp8Products, Fallbacks;
        /// <summary>Why the last fallback happened ("" for none).</summary>
        public string LastFallback;
    }

    /// <summary>An ampx_fp8_recipe reference (ampx_fp8_recipe_release).</summary>
    public sealed class Fp8RecipeHandle : AmpxHandle
    {
        internal Fp8RecipeHandle(IntPtr raw) : base(raw, true, p => Native.ampx_fp8_recipe_release(p)) { }
        internal override bool AnyThread { get { return true; } }
    }

    /// <summary>
    /// An FP8 scaling recipe (ampx_fp8_recipe; TE's DelayedScaling or
    /// Float8CurrentScaling): per slot (a tensor it scales) a scale, its inverse,
    /// the step's amax and an amax history, in device memory. Autocast policies
    /// and data-parallel wrappers given it keep their own reference, so Dispose
    /// may come first. A bad option throws AmpxException (ErrInvalidArgument)
    /// naming it.
    /// </summary>
    public sealed unsafe class Fp8Recipe : ContextObject
    {
        /// <summary>The length of every slot's amax history.</summary>
        public int AmaxHistoryLen { get; private set; }

        public Fp8Recipe(Context context, Fp8RecipeOptions options = null)
            : base(new Fp8RecipeHandle(Create(context, (raw, result) =>
              {
                  var o = (options ?? new Fp8RecipeOptions()).ToNative();
                  return Native.ampx_fp8_recipe_create(raw, &o, result);
              })), context, "Fp8Recipe")
        {
            AmaxHistoryLen = (options ?? new Fp8RecipeOptions()).AmaxHistoryLen;
        }

        /// <summary>`recipe`'s raw handle, IntPtr.Zero for null (ObjectDisposedException once disposed).</summary>
        internal static IntPtr RawOrNull(Fp8Recipe recipe)
        {
            return recipe == null ? IntPtr.Zero : recipe.Ptr;
        }

        /// <summary>Adds a slot of `role` (scale 1, amax 0, empty history) named `name` (unique; null for none); returns its index.</summary>
        public long AddTensor(Fp8Role role = Fp8Role.Forward, string name = null)
        {
            var raw = Ptr;
            long slot;
            fixed (byte* n = Utf8.Bytes(name))
                Err.Check(Native.ampx_fp8_recipe_add_tensor(raw, (Native.ampx_fp8_role)role, n, &slot), this);
            return slot;
        }

        /// <summary>The number of slots (autocast's included).</summary>
        public long SlotCount
        {
            get
            {
                long count;
                Err.Check(Native.ampx_fp8_recipe_slot_count(Ptr, &count), this);
                return count;
            }
        }

        /// <summary>
        /// Rounds `source` (F32, F16 or BF16) times slot's scale into `destination`
        /// and/or `transposed` (source read as [rows, cols], written [cols, rows]; one
        /// may be null), saturating, and folds source's amax into the slot's step amax.
        /// </summary>
        public void Quantize(long slot, Tensor source, Tensor destination, Tensor transposed = null)
        {
            if (source == null) throw new ArgumentNullException("source");
            Err.Check(Native.ampx_fp8_quantize(Ptr, slot, source.Ptr, Tensor.RawOrNull(destination),
                                                Tensor.RawOrNull(transposed)), this, source, destination, transposed);
        }

        /// <summary>Quantize into a new tensor of the slot's format and source's shape (reading the format synchronizes).</summary>
        public Tensor Quantize(long slot, Tensor source)
        {
            if (source == null) throw new ArgumentNullException("source");
            var destination = Tensor.Empty(Context, Slot(slot, false).DType, source.Shape);
            try
            {
                Quantize(slot, source, destination);
            }
            catch
            {
                destination.Dispose();
                throw;
            }
            return destination;
        }

        /// <summary>Ends the step for every slot: amaxes join the histories, (delayed scaling) scales are recomputed.</summary>
        public void Update()
        {
            Err.Check(Native.ampx_fp8_recipe_update(Ptr), this);
        }

        /// <summary>Slot's scale (or inverse) as a one-element F32 view of the recipe's memory: it follows every update.</summary>
        public Tensor ScaleTensor(long slot, bool inverse = false)
        {
            IntPtr result;
            Err.Check(Native.ampx_fp8_recipe_scale_tensor(Ptr, slot, inverse ? 1 : 0, &result), this);
            return new Tensor(Context, new TensorHandle(result, true));
        }

        /// <summary>Slot's state and (unless `withHistory` is false) its amax history. Synchronizes.</summary>
        public Fp8SlotInfo Slot(long slot, bool withHistory = true)
        {
            var raw = Ptr;
            var info = Native.AMPX_FP8_SLOT_INFO_INIT();
            var history = new float[withHistory ? AmaxHistoryLen : 0];
            fixed (float* h = history)
                Err.Check(Native.ampx_fp8_recipe_slot_get(raw, slot, &info, withHistory ? h : null,
                                                          withHistory ? AmaxHistoryLen : 0), this);
            return new Fp8SlotInfo
            {
                Name = Utf8.String(info.name) ?? "", Role = (Fp8Role)info.role, DType = (DType)info.dtype,
                Scale = info.scale, ScaleInv = info.scale_inv, Amax = info.amax, HistoryLen = info.history_len,
                History = history,
            };
        }

        /// <summary>What FP8 at slot's current scale would do to `tensor` (the doctor's ampx_doctor_fp8_inspect). Synchronizes.</summary>
        public Fp8TensorReport Inspect(long slot, Tensor tensor)
        {
            if (tensor == null) throw new ArgumentNullException("tensor");
            var r = Native.AMPX_FP8_TENSOR_REPORT_INIT();
            Err.Check(Native.ampx_doctor_fp8_inspect(Ptr, slot, tensor.Ptr, &r), this, tensor);
            return new Fp8TensorReport
            {
                Count = r.count, FlushedE4M3 = r.flushed_e4m3, SaturatedE4M3 = r.saturated_e4m3,
                FlushedE5M2 = r.flushed_e5m2, SaturatedE5M2 = r.saturated_e5m2, Scale = r.scale,
                DType = (DType)r.dtype,
            };
        }

        /// <summary>A table of the slots: name, format, scale, step amax, history max and length. Synchronizes.</summary>
        public string Summary()
        {
            byte* text;
            Err.Check(Native.ampx_doctor_fp8_summary(Ptr, &text), this);
            return Utf8.String(text);
        }
    }

    /// <summary>Checkpoint files with an FP8 recipe's state (ampx_checkpoint_file_save_fp8 / _load_fp8).</summary>
    public static unsafe class Fp8CheckpointFile
    {
        /// <summary>CheckpointFile.Save plus `recipe`'s options and per-slot scales, amaxes and histories.</summary>
        public static void Save(string path, Tensor[] tensors, Fp8Recipe recipe, Optimizer optimizer = null,
                                Scaler scaler = null)
        {
            Run(Native.ampx_checkpoint_file_save_fp8, path, tensors, recipe, optimizer, scaler);
        }

        /// <summary>CheckpointFile.Load plus the recipe's saved state, matched by slot name; `recipe` must have the saved options.</summary>
        public static void Load(string path, Tensor[] tensors, Fp8Recipe recipe, Optimizer optimizer = null,
                                Scaler scaler = null)
        {
            Run(Native.ampx_checkpoint_file_load_fp8, path, tensors, recipe, optimizer, scaler);
        }

        private delegate Native.ampx_status FileCall(byte* path, IntPtr* tensors, UIntPtr count, IntPtr optimizer,
                                                     IntPtr scaler, IntPtr recipe);

        private static void Run(FileCall call, string path, Tensor[] tensors, Fp8Recipe recipe, Optimizer optimizer,
                                Scaler scaler)
        {
            if (path == null) throw new ArgumentNullException("path");
            var raw = Tensor.Raw(tensors ?? new Tensor[0], "tensors");
            var opt = optimizer == null ? IntPtr.Zero : optimizer.Ptr;
            var sc = scaler == null ? IntPtr.Zero : scaler.Ptr;
            var r = Fp8Recipe.RawOrNull(recipe);
            Native.ampx_status status;
            fixed (byte* p = Utf8.Bytes(path))
            fixed (IntPtr* t = raw)
                status = call(p, t, (UIntPtr)raw.Length, opt, sc, r);
            Err.Check(status, tensors, optimizer, scaler, recipe);
        }
    }
}
