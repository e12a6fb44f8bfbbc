using System;

namespace Ampx
{
    /// <summary>A scaler's counters since creation (ampx_scaler_counters).</summary>
    public struct ScalerCounters
    {
        public long Updates, Skipped, Backoffs, Growths;
    }

    /// <summary>A scaler's persistent state (ampx_scaler_state: torch's state_dict and ampx's extras).</summary>
    public sealed class ScalerState
    {
        public double Scale, GrowthFactor, BackoffFactor, MinScale, MaxScale;
        public int GrowthInterval, GrowthTracker, Hysteresis, HysteresisLeft;
        public ScalerCounters Counters;
        public bool ConsecutiveHysteresis, ClampToMaxScale;
    }

    /// <summary>
    /// A dynamic loss scaler after torch.amp.GradScaler (ampx_scaler): per
    /// iteration Backward(scaler), optionally Unscale (before clipping), Step,
    /// Update. Calls out of order throw AmpxException with Status.ErrOrder.
    /// </summary>
    public sealed unsafe class Scaler : ContextObject
    {
        public Scaler(Context context, ScalerOptions options = null)
            : base(new ScalerHandle(Create(context, (raw, result) =>
              {
                  var o = (options ?? new ScalerOptions()).ToNative();
                  return Native.ampx_scaler_create(raw, &o, result);
              })), context, "Scaler") { }

        private static IntPtr Raw(Optimizer optimizer)
        {
            if (optimizer == null) throw new ArgumentNullException("optimizer");
            return optimizer.Ptr;
        }

        /// <summary>Attaches `optimizer` before its first use, so misuse in the first iteration is caught too.</summary>
        public void Attach(Optimizer optimizer)
        {
            Err.Check(Native.ampx_scaler_attach(Ptr, Raw(optimizer)), this, optimizer);
        }

        /// <summary>loss * scale, a new F32 tensor; recorded when loss requires grad, so Autograd.Grad can differentiate it.</summary>
        public Tensor ScaleLoss(Tensor loss)
        {
            if (loss == null) throw new ArgumentNullException("loss");
            IntPtr result;
            Err.Check(Native.ampx_scaler_scale_loss(Ptr, loss.Ptr, &result), this, loss);
            return new Tensor(Context, new TensorHandle(result, true));
        }

        /// <summary>
        /// x * (1 / scale) with the current scale, taken on the device (no host
        /// read; ampx_scaler_unscale_tensor): a new tensor of x's shape and dtype,
        /// owned as an op output. Recorded -- its gradient is the incoming one
        /// times the same 1/scale -- so gradients of ScaleLoss's output taken by
        /// Autograd.Grad with createGraph can be unscaled and differentiated (the
        /// gradient-penalty recipe of ampx.h section 9). A disabled scaler gives a
        /// copy of x.
        /// </summary>
        public Tensor UnscaleTensor(Tensor x)
        {
            if (x == null) throw new ArgumentNullException("x");
            IntPtr result;
            Err.Check(Native.ampx_scaler_unscale_tensor(Ptr, x.Ptr, &result), this, x);
            return Context.Adopt(result);
        }

        /// <summary>The one-element F32 device tensor holding the scale (read-only), to seed a backward pass of your own.</summary>
        public Tensor ScaleTensor()
        {
            IntPtr result;
            Err.Check(Native.ampx_scaler_scale_tensor(Ptr, &result), this);
            return new Tensor(Context, new TensorHandle(result, true));
        }

        /// <summary>The current scale (synchronizes; 1 when disabled).</summary>
        public double Scale
        {
            get
            {
                double scale;
                Err.Check(Native.ampx_scaler_get_scale(Ptr, &scale), this);
                return scale;
            }
        }

        /// <summary>Divides `optimizer`'s gradients by the scale and records inf/NaN.</summary>
        public void Unscale(Optimizer optimizer)
        {
            Err.Check(Native.ampx_scaler_unscale(Ptr, Raw(optimizer)), this, optimizer);
        }

        /// <summary>Unscales if needed, then steps unless an inf/NaN was found (decided on the device).</summary>
        public void Step(Optimizer optimizer)
        {
            Err.Check(Native.ampx_scaler_step(Ptr, Raw(optimizer)), this, optimizer);
        }

        /// <summary>Ends the iteration: backs off or grows the scale.</summary>
        public void Update()
        {
            Err.Check(Native.ampx_scaler_update(Ptr), this);
        }

        /// <summary>Ends the iteration, setting the scale to `newScale`.</summary>
        public void Update(double newScale)
        {
            Err.Check(Native.ampx_scaler_update_to(Ptr, newScale), this);
        }

        /// <summary>Whether the last unscale of `optimizer`'s gradients found inf/NaN. Synchronizes.</summary>
        public bool FoundInf(Optimizer optimizer)
        {
            int found;
            Err.Check(Native.ampx_scaler_found_inf(Ptr, Raw(optimizer), &found), this, optimizer);
            return found != 0;
        }

        /// <summary>Counters since creation. Synchronizes.</summary>
        public ScalerCounters Counters
        {
            get
            {
                var c = Native.AMPX_SCALER_COUNTERS_INIT();
                Err.Check(Native.ampx_scaler_get_counters(Ptr, &c), this);
                return new ScalerCounters
                {
                    Updates = c.updates, Skipped = c.skipped, Backoffs = c.backoffs, Growths = c.growths,
                };
            }
        }

        /// <summary>The whole state (synchronizes), e.g. to save with a checkpoint.</summary>
        public ScalerState GetState()
        {
            var s = default(Native.ampx_scaler_state);
            s.struct_size = (UIntPtr)sizeof(Native.ampx_scaler_state);
            s.counters.struct_size = (UIntPtr)sizeof(Native.ampx_scaler_counters);
            Err.Check(Native.ampx_scaler_get_state(Ptr, &s), this);
            return new ScalerState
            {
                Scale = s.scale, GrowthFactor = s.growth_factor, BackoffFactor = s.backoff_factor,
                MinScale = s.min_scale, MaxScale = s.max_scale, GrowthInterval = s.growth_interval,
                GrowthTracker = s.growth_tracker, Hysteresis = s.hysteresis, HysteresisLeft = s.hysteresis_left,
                Counters = new ScalerCounters
                {
                    Updates = s.counters.updates, Skipped = s.counters.skipped,
                    Backoffs = s.counters.backoffs, Growths = s.counters.growths,
                },
                ConsecutiveHysteresis = s.consecutive_hysteresis != 0, ClampToMaxScale = s.clamp_to_max_scale != 0,
            };
        }

        /// <summary>Restores GetState's state between iterations (validated; nothing changes on error).</summary>
        public void SetState(ScalerState state)
        {
            if (state == null) throw new ArgumentNullException("state");
            var s = default(Native.ampx_scaler_state);
            s.struct_size = (UIntPtr)sizeof(Native.ampx_scaler_state);
            s.scale = state.Scale; s.growth_factor = state.GrowthFactor; s.backoff_factor = state.BackoffFactor;
            s.min_scale = state.MinScale; s.max_scale = state.MaxScale; s.growth_interval = state.GrowthInterval;
            s.growth_tracker = state.GrowthTracker; s.hysteresis = state.Hysteresis;
            s.hysteresis_left = state.HysteresisLeft;
            s.counters.struct_size = (UIntPtr)sizeof(Native.ampx_scaler_counters);
            s.counters.updates = state.Counters.Updates; s.counters.skipped = state.Counters.Skipped;
            s.counters.backoffs = state.Counters.Backoffs; s.counters.growths = state.Counters.Growths;
            s.consecutive_hysteresis = state.ConsecutiveHysteresis ? 1 : 0;
            s.clamp_to_max_scale = state.ClampToMaxScale ? 1 : 0;
            Err.Check(Native.ampx_scaler_set_state(Ptr, &s), this);
        }
    }

    /// <summary>
    /// An autocast policy (ampx_autocast): while entered, ops pick their compute
    /// precision as torch.autocast does. `using (autocast.Enter()) { ... }`.
    /// Dispose releases the policy, which must not be entered then.
    /// </summary>
    public sealed unsafe class Autocast : ContextObject
    {
        public Autocast(Context context, AutocastOptions options = null)
            : base(new AutocastHandle(Create(context, (raw, result) =>
              {
                  var o = (options ?? new AutocastOptions()).ToNative();
                  return Native.ampx_autocast_create(raw, &o, result);
              })), context, "Autocast") { }

        /// <summary>A policy computing "lower precision" ops in `dtype` (F16 or BF16).</summary>
        public Autocast(Context context, DType dtype) : this(context, new AutocastOptions { DType = dtype }) { }

        /// <summary>Overrides the class of the op named `opName` ("softmax", "matmul", ...).</summary>
        public void SetOpClass(string opName, OpClass opClass)
        {
            if (opName == null) throw new ArgumentNullException("opName");
            var raw = Ptr;
            fixed (byte* name = Utf8.Bytes(opName))
                Err.Check(Native.ampx_autocast_set_op_class(raw, name, (Native.ampx_op_class)opClass), this);
        }

        /// <summary>The class `opName` gets under this policy.</summary>
        public OpClass GetOpClass(string opName)
        {
            if (opName == null) throw new ArgumentNullException("opName");
            var raw = Ptr;
            Native.ampx_op_class result;
            fixed (byte* name = Utf8.Bytes(opName))
                Err.Check(Native.ampx_autocast_op_class(raw, name, &result), this);
            return (OpClass)result;
        }

        /// <summary>Enters the policy; disposing the result leaves it (regions nest like a stack).</summary>
        public IDisposable Enter()
        {
            Err.Check(Native.ampx_autocast_enter(Ptr), this);
            return new Region(this);
        }

        /// <summary>Leaves the innermost region, which must be this policy's.</summary>
        public void Exit()
        {
            Err.Check(Native.ampx_autocast_exit(Ptr), this);
        }

        private sealed class Region : IDisposable
        {
            private Autocast policy;
            internal Region(Autocast policy) { this.policy = policy; }
            public void Dispose()
            {
                if (policy == null) return;
                var p = policy;
                policy = null;
                p.Exit();
            }
        }

        /// <summary>Casts served from the cache and casts made into it since creation.</summary>
        public void CacheStats(out long hits, out long misses)
        {
            long h, m;
            Err.Check(Native.ampx_autocast_cache_stats(Ptr, &h, &m), this);
            hits = h;
            misses = m;
        }

        /// <summary>The default of SetFp8's minGemmSize (AMPX_FP8_DEFAULT_MIN_GEMM_SIZE, 2^33).</summary>
        public const long Fp8DefaultMinGemmSize = Native.AMPX_FP8_DEFAULT_MIN_GEMM_SIZE;

        /// <summary>
        /// Makes this an FP8 policy with `recipe` (the policy keeps its own
        /// reference), or a plain one again with null: linear and matmul with
        /// m * n * k at least `minGemmSize` run in FP8. ErrNotSupported on a device
        /// without FP8 products; the policy is unchanged on error.
        /// </summary>
        public void SetFp8(Fp8Recipe recipe, long minGemmSize = Fp8DefaultMinGemmSize)
        {
            Err.Check(Native.ampx_autocast_set_fp8(Ptr, Fp8Recipe.RawOrNull(recipe), minGemmSize), this, recipe);
        }

        /// <summary>Products run in FP8, fallbacks to the policy's dtype and the last fallback's reason.</summary>
        public Fp8Stats Fp8Stats
        {
            get
            {
                var s = Native.AMPX_FP8_STATS_INIT();
                Err.Check(Native.ampx_autocast_fp8_stats(Ptr, &s), this);
                return new Fp8Stats { Fp8Products = s.fp8_products, Fallbacks = s.fallbacks,
                                      LastFallback = Utf8.String(s.last_fallback) ?? "" };
            }
        }
    }

    /// <summary>
    /// Training checkpoint files (ampx.h section 12): tensors with their names,
    /// an optimizer's and a scaler's state, written atomically; loads validate the
    /// whole file before anything changes.
    /// </summary>
    public static unsafe class CheckpointFile
    {
        /// <summary>Writes `tensors` (named), `optimizer` and `scaler` (each may be null) to `path`.</summary>
        public static void Save(string path, Tensor[] tensors, Optimizer optimizer = null, Scaler scaler = null)
        {
            Run(Native.ampx_checkpoint_file_save, path, tensors, optimizer, scaler);
        }

        /// <summary>Restores a file Save wrote into the same tensors (same names, order, shapes), optimizer and scaler.</summary>
        public static void Load(string path, Tensor[] tensors, Optimizer optimizer = null, Scaler scaler = null)
        {
            Run(Native.ampx_checkpoint_file_load, path, tensors, optimizer, scaler);
        }

        private delegate Native.ampx_status FileCall(byte* path, IntPtr* tensors, UIntPtr count, IntPtr optimizer,
                                                     IntPtr scaler);

        private static void Run(FileCall call, string path, Tensor[] tensors, Optimizer optimizer, Scaler scaler)
        {
            if (path == null) throw new ArgumentNullException("path");
            var raw = Tensor.Raw(tensors ?? new Tensor[0], "tensors");
            var opt = optimizer == null ? IntPtr.Zero : optimizer.Ptr;
            var sc = scaler == null ? IntPtr.Zero : scaler.Ptr;
            Native.ampx_status status;
            fixed (byte* p = Utf8.Bytes(path))
            fixed (IntPtr* t = raw)
                status = call(p, t, (UIntPtr)raw.Length, opt, sc);
            Err.Check(status, tensors, optimizer, scaler);
        }
    }
}
