using System;

namespace Ampx
{
    // Option classes: each starts from the library's defaults (the matching
    // ampx_*_default() function), so a field the program leaves alone keeps
    // ampx's default, and turns into its C struct for the call.

    /// <summary>SGD options (ampx_sgd_options).</summary>
    public sealed class SgdOptions
    {
        public double Lr, Momentum, Dampening, WeightDecay;
        public bool Nesterov, Maximize;

        public SgdOptions()
        {
            var d = Native.ampx_sgd_options_default();
            Lr = d.lr; Momentum = d.momentum; Dampening = d.dampening; WeightDecay = d.weight_decay;
            Nesterov = d.nesterov != 0; Maximize = d.maximize != 0;
        }

        internal Native.ampx_sgd_options ToNative()
        {
            var o = Native.ampx_sgd_options_default();
            o.lr = Lr; o.momentum = Momentum; o.dampening = Dampening; o.weight_decay = WeightDecay;
            o.nesterov = Nesterov ? 1 : 0; o.maximize = Maximize ? 1 : 0;
            return o;
        }
    }

    /// <summary>Adam / AdamW options (ampx_adam_options); AdamW's defaults with decoupled: true.</summary>
    public sealed class AdamOptions
    {
        public double Lr, Beta1, Beta2, Eps, WeightDecay;
        public bool Amsgrad, Maximize;
        /// <summary>true: AdamW (decoupled weight decay); false: Adam (L2 in the gradient).</summary>
        public bool DecoupledWeightDecay;

        /// <summary>Adam's defaults.</summary>
        public AdamOptions() : this(false) { }

        /// <summary>AdamW's defaults when `decoupled`, else Adam's.</summary>
        public AdamOptions(bool decoupled)
        {
            var d = decoupled ? Native.ampx_adamw_options_default() : Native.ampx_adam_options_default();
            Lr = d.lr; Beta1 = d.beta1; Beta2 = d.beta2; Eps = d.eps; WeightDecay = d.weight_decay;
            Amsgrad = d.amsgrad != 0; Maximize = d.maximize != 0;
            DecoupledWeightDecay = d.decoupled_weight_decay != 0;
        }

        internal Native.ampx_adam_options ToNative()
        {
            var o = Native.ampx_adam_options_default();
            o.lr = Lr; o.beta1 = Beta1; o.beta2 = Beta2; o.eps = Eps; o.weight_decay = WeightDecay;
            o.amsgrad = Amsgrad ? 1 : 0; o.maximize = Maximize ? 1 : 0;
            o.decoupled_weight_decay = DecoupledWeightDecay ? 1 : 0;
            return o;
        }
    }

    /// <summary>Loss-scaler options (ampx_scaler_options), torch.amp.GradScaler's defaults.</summary>
    public sealed class ScalerOptions
    {
        public double InitScale, GrowthFactor, BackoffFactor, MinScale, MaxScale;
        public int GrowthInterval, Hysteresis;
        public bool Enabled, ConsecutiveHysteresis, ClampToMaxScale;

        public ScalerOptions()
        {
            var d = Native.ampx_scaler_options_default();
            InitScale = d.init_scale; GrowthFactor = d.growth_factor; BackoffFactor = d.backoff_factor;
            MinScale = d.min_scale; MaxScale = d.max_scale; GrowthInterval = d.growth_interval;
            Hysteresis = d.hysteresis; Enabled = d.enabled != 0;
            ConsecutiveHysteresis = d.consecutive_hysteresis != 0; ClampToMaxScale = d.clamp_to_max_scale != 0;
        }

        internal Native.ampx_scaler_options ToNative()
        {
            var o = Native.ampx_scaler_options_default();
            o.init_scale = InitScale; o.growth_factor = GrowthFactor; o.backoff_factor = BackoffFactor;
            o.min_scale = MinScale; o.max_scale = MaxScale; o.growth_interval = GrowthInterval;
            o.hysteresis = Hysteresis; o.enabled = Enabled ? 1 : 0;
            o.consecutive_hysteresis = ConsecutiveHysteresis ? 1 : 0; o.clamp_to_max_scale = ClampToMaxScale ? 1 : 0;
            return o;
        }
    }

    /// <summary>Autocast policy options (ampx_autocast_options).</summary>
    public sealed class AutocastOptions
    {
        /// <summary>F16 (default) or BF16.</summary>
        public DType DType;
        public bool Enabled;
        /// <summary>Cache casts of F32 leaves for the outermost region.</summary>
        public bool Cache;

        public AutocastOptions()
        {
            var d = Native.ampx_autocast_options_default();
            DType = (DType)d.dtype; Enabled = d.enabled != 0; Cache = d.cache != 0;
        }

        internal Native.ampx_autocast_options ToNative()
        {
            var o = Native.ampx_autocast_options_default();
            o.dtype = (Native.ampx_dtype)DType; o.enabled = Enabled ? 1 : 0; o.cache = Cache ? 1 : 0;
            return o;
        }
    }

    /// <summary>Options of Tensor.CrossEntropy with weights (ampx_cross_entropy_options).</summary>
    public sealed class CrossEntropyOptions
    {
        public Reduction Reduction;
        public long IgnoreIndex;
        public double LabelSmoothing;

        public CrossEntropyOptions()
        {
            var d = Native.ampx_cross_entropy_options_default();
            Reduction = (Reduction)d.reduction; IgnoreIndex = d.ignore_index; LabelSmoothing = d.label_smoothing;
        }

        internal Native.ampx_cross_entropy_options ToNative()
        {
            var o = Native.ampx_cross_entropy_options_default();
            o.reduction = (Native.ampx_reduction)Reduction; o.ignore_index = IgnoreIndex;
            o.label_smoothing = LabelSmoothing;
            return o;
        }
    }

    /// <summary>Options of Tensor.ScaledDotProductAttention (ampx_attention_options).</summary>
    public sealed class AttentionOptions
    {
        public bool Causal;
        /// <summary>Score scale; 0: 1 / sqrt(head_dim).</summary>
        public double Scale;
        public double DropoutP;

        public AttentionOptions()
        {
            var d = Native.ampx_attention_options_default();
            Causal = d.causal != 0; Scale = d.scale; DropoutP = d.dropout_p;
        }

        internal Native.ampx_attention_options ToNative()
        {
            var o = Native.ampx_attention_options_default();
            o.causal = Causal ? 1 : 0; o.scale = Scale; o.dropout_p = DropoutP;
            return o;
        }
    }

    /// <summary>
    /// What the options of a 2-D window (convolution, pooling) share: stride,
    /// padding and dilation, each a (rows, columns) pair.
    /// </summary>
    public abstract unsafe class Window2dOptions
    {
        /// <summary>Pooling: (0, 0) is the kernel size.</summary>
        public long[] Stride;
        public long[] Padding, Dilation;

        internal Window2dOptions(long* stride, long* padding, long* dilation)
        {
            Stride = new[] { stride[0], stride[1] };
            Padding = new[] { padding[0], padding[1] };
            Dilation = new[] { dilation[0], dilation[1] };
        }

        internal void CopyTo(long* stride, long* padding, long* dilation)
        {
            Set(Stride, "Stride", stride);
            Set(Padding, "Padding", padding);
            Set(Dilation, "Dilation", dilation);
        }

        private static void Set(long[] values, string name, long* target)
        {
            if (values == null || values.Length != 2)
                throw new ArgumentException(name + " must hold two values (rows, columns)", name);
            target[0] = values[0];
            target[1] = values[1];
        }
    }

    /// <summary>Options of Tensor.Conv2d (ampx_conv2d_options).</summary>
    public sealed unsafe class Conv2dOptions : Window2dOptions
    {
        public long Groups;

        public Conv2dOptions() : this(Native.ampx_conv2d_options_default()) { }

        private Conv2dOptions(Native.ampx_conv2d_options d) : base(d.stride, d.padding, d.dilation)
        {
            Groups = d.groups;
        }

        internal Native.ampx_conv2d_options ToNative()
        {
            var o = Native.ampx_conv2d_options_default();
            CopyTo(o.stride, o.padding, o.dilation);
            o.groups = Groups;
            return o;
        }
    }

    /// <summary>Options of MaxPool2d and AvgPool2d (ampx_pool2d_options).</summary>
    public sealed unsafe class Pool2dOptions : Window2dOptions
    {
        public bool CeilMode, CountIncludePad;
        public long DivisorOverride;

        public Pool2dOptions() : this(Native.ampx_pool2d_options_default()) { }

        private Pool2dOptions(Native.ampx_pool2d_options d) : base(d.stride, d.padding, d.dilation)
        {
            CeilMode = d.ceil_mode != 0; CountIncludePad = d.count_include_pad != 0;
            DivisorOverride = d.divisor_override;
        }

        internal Native.ampx_pool2d_options ToNative()
        {
            var o = Native.ampx_pool2d_options_default();
            CopyTo(o.stride, o.padding, o.dilation);
            o.ceil_mode = CeilMode ? 1 : 0; o.count_include_pad = CountIncludePad ? 1 : 0;
            o.divisor_override = DivisorOverride;
            return o;
        }
    }

    /// <summary>
    /// A param group's learning-rate schedule on the device (ampx_lr_schedule):
    /// a linear warm-up, then a constant rate or a linear, cosine or step decay.
    /// </summary>
    public sealed unsafe class LrSchedule
    {
        public long WarmupSteps;
        public double WarmupStartFactor;
        public LrDecay Decay;
        public long TotalSteps;
        public double EndFactor, MinLr;
        public long StepSize;
        public double Gamma;

        /// <summary>The default: the group's constant rate.</summary>
        public LrSchedule()
        {
            From(Native.ampx_lr_schedule_default());
        }

        internal LrSchedule(Native.ampx_lr_schedule s) { From(s); }

        private void From(Native.ampx_lr_schedule d)
        {
            WarmupSteps = d.warmup_steps; WarmupStartFactor = d.warmup_start_factor; Decay = (LrDecay)d.decay;
            TotalSteps = d.total_steps; EndFactor = d.end_factor; MinLr = d.min_lr; StepSize = d.step_size;
            Gamma = d.gamma;
        }

        internal Native.ampx_lr_schedule ToNative()
        {
            var o = Native.ampx_lr_schedule_default();
            o.warmup_steps = WarmupSteps; o.warmup_start_factor = WarmupStartFactor;
            o.decay = (Native.ampx_lr_decay)Decay; o.total_steps = TotalSteps; o.end_factor = EndFactor;
            o.min_lr = MinLr; o.step_size = StepSize; o.gamma = Gamma;
            return o;
        }

        /// <summary>
        /// The rate this schedule gives a group of rate `baseLr` after `step` taken
        /// steps, computed by the device's own code (ampx_lr_schedule_value).
        /// </summary>
        public double Value(double baseLr, long step)
        {
            var o = ToNative();
            double lr;
            Err.Check(Native.ampx_lr_schedule_value(&o, baseLr, step, &lr));
            return lr;
        }
    }

    /// <summary>Options of a DataParallel wrapper (ampx_data_parallel_options).</summary>
    public sealed class DataParallelOptions
    {
        public ulong BucketBytes, FirstBucketBytes;
        /// <summary>true: gradients averaged over ranks; false: summed.</summary>
        public bool Average;
        public bool ReduceInFp32;
        /// <summary>Reduce buckets while backward runs.</summary>
        public bool Overlap;
        /// <summary>0, or 1 for ZeRO stage 1 (sharded optimizer state).</summary>
        public int ZeroStage;

        public DataParallelOptions()
        {
            var d = Native.ampx_data_parallel_options_default();
            BucketBytes = (ulong)d.bucket_bytes; FirstBucketBytes = (ulong)d.first_bucket_bytes;
            Average = d.average != 0; ReduceInFp32 = d.reduce_in_fp32 != 0; Overlap = d.overlap != 0;
            ZeroStage = d.zero_stage;
        }

        internal Native.ampx_data_parallel_options ToNative()
        {
            var o = Native.ampx_data_parallel_options_default();
            o.bucket_bytes = (UIntPtr)BucketBytes; o.first_bucket_bytes = (UIntPtr)FirstBucketBytes;
            o.average = Average ? 1 : 0; o.reduce_in_fp32 = ReduceInFp32 ? 1 : 0; o.overlap = Overlap ? 1 : 0;
            o.zero_stage = ZeroStage;
            return o;
        }
    }

    /// <summary>Options of a Doctor (ampx_doctor_options).</summary>
    public sealed class DoctorOptions
    {
        /// <summary>Sample every Interval-th step; 0: off.</summary>
        public int Interval;
        /// <summary>Steps kept in the history ring.</summary>
        public int History;

        public DoctorOptions()
        {
            var d = Native.ampx_doctor_options_default();
            Interval = d.interval; History = d.history;
        }

        internal Native.ampx_doctor_options ToNative()
        {
            var o = Native.ampx_doctor_options_default();
            o.interval = Interval; o.history = History;
            return o;
        }
    }
}
