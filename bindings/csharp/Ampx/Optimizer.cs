using System;
using System.Collections.Generic;

namespace Ampx
{
    /// <summary>One parameter whose gradient holds NaN or inf (Optimizer.FindNonfiniteGrads).</summary>
    public struct NonfiniteGrad
    {
        /// <summary>Its index among the optimizer's parameters.</summary>
        public int Index;
        public string Name;
        public long NanCount, InfCount;
    }

    /// <summary>
    /// An optimizer (SGD, Adam, AdamW) over a fixed list of parameters in param
    /// groups (ampx_optimizer): fp32 master weights for F16/BF16 parameters,
    /// updates in torch.optim's order, state on the device. Dispose releases
    /// this reference (the optimizer lives on while a scaler step is pending on it).
    /// </summary>
    public sealed unsafe class Optimizer : ContextObject
    {
        private readonly List<Tensor> parameters = new List<Tensor>();

        private delegate Native.ampx_status Maker(IntPtr context, IntPtr* parameters, UIntPtr count,
                                                  IntPtr* result);

        /// <summary>An optimizer over `parameters` that `make` creates.</summary>
        private Optimizer(Context context, Tensor[] parameters, Maker make)
            : base(new OptimizerHandle(Create(context, (raw, result) =>
              {
                  var ps = Tensor.Raw(parameters, "parameters");
                  fixed (IntPtr* p = ps)
                      return make(raw, p, (UIntPtr)ps.Length, result);
              })), context, "Optimizer")
        {
            this.parameters.AddRange(parameters);
        }

        /// <summary>The parameters, in the order the optimizer numbers them.</summary>
        public IReadOnlyList<Tensor> Parameters { get { return parameters; } }

        internal static Optimizer NotNull(Optimizer optimizer)
        {
            if (optimizer == null) throw new ArgumentNullException("optimizer");
            return optimizer;
        }

        /// <summary>SGD over `parameters` (param group 0).</summary>
        public static Optimizer Sgd(Context context, Tensor[] parameters, SgdOptions options = null)
        {
            return new Optimizer(context, parameters, (raw, p, count, result) =>
            {
                var o = (options ?? new SgdOptions()).ToNative();
                return Native.ampx_optimizer_create_sgd(raw, p, count, &o, result);
            });
        }

        /// <summary>Adam (or AdamW when options.DecoupledWeightDecay) over `parameters`.</summary>
        public static Optimizer Adam(Context context, Tensor[] parameters, AdamOptions options = null)
        {
            return new Optimizer(context, parameters, (raw, p, count, result) =>
            {
                var o = (options ?? new AdamOptions()).ToNative();
                return Native.ampx_optimizer_create_adam(raw, p, count, &o, result);
            });
        }

        /// <summary>AdamW (AdamW's defaults when options is null).</summary>
        public static Optimizer AdamW(Context context, Tensor[] parameters, AdamOptions options = null)
        {
            return Adam(context, parameters, options ?? new AdamOptions(true));
        }

        /// <summary>Adds a param group with its own lr and weight decay; returns its index.</summary>
        public int AddGroup(Tensor[] groupParameters, double lr, double weightDecay)
        {
            var raw = Ptr;
            var ps = Tensor.Raw(groupParameters, "groupParameters");
            int index;
            fixed (IntPtr* p = ps)
                Err.Check(Native.ampx_optimizer_add_group(raw, p, (UIntPtr)ps.Length, lr, weightDecay, &index), this,
                          groupParameters);
            parameters.AddRange(groupParameters);
            return index;
        }

        public int GroupCount
        {
            get
            {
                int count;
                Err.Check(Native.ampx_optimizer_group_count(Ptr, &count), this);
                return count;
            }
        }

        /// <summary>Sets a group's learning rate (the schedule's base rate when it has one).</summary>
        public void SetLr(int group, double lr)
        {
            Err.Check(Native.ampx_optimizer_set_lr(Ptr, group, lr), this);
        }

        /// <summary>A group's learning rate as last set.</summary>
        public double GetLr(int group)
        {
            double lr;
            Err.Check(Native.ampx_optimizer_get_lr(Ptr, group, &lr), this);
            return lr;
        }

        /// <summary>Group 0's learning rate.</summary>
        public double Lr
        {
            get { return GetLr(0); }
            set { SetLr(0, value); }
        }

        /// <summary>One step with the gradients as they are (use Scaler.Step with a scaler).</summary>
        public void Step()
        {
            Err.Check(Native.ampx_optimizer_step(Ptr), this);
        }

        /// <summary>Zeroes every attached gradient in place.</summary>
        public void ZeroGrad()
        {
            Err.Check(Native.ampx_optimizer_zero_grad(Ptr), this);
        }

        /// <summary>A state tensor of `parameter` (master, moments), F32, writable.</summary>
        public Tensor StateTensor(Tensor parameter, OptimizerState kind)
        {
            if (parameter == null) throw new ArgumentNullException("parameter");
            IntPtr result;
            Err.Check(Native.ampx_optimizer_state_tensor(Ptr, parameter.Ptr, (Native.ampx_optimizer_state)kind,
                                                         &result), this, parameter);
            return new Tensor(Context, new TensorHandle(result, true));
        }

        /// <summary>Steps `parameter` has taken (skipped ones do not count). Synchronizes.</summary>
        public long ParamSteps(Tensor parameter)
        {
            if (parameter == null) throw new ArgumentNullException("parameter");
            long steps;
            Err.Check(Native.ampx_optimizer_param_steps(Ptr, parameter.Ptr, &steps), this, parameter);
            return steps;
        }

        /// <summary>Steps the optimizer has taken: the position of its schedules. Synchronizes.</summary>
        public long StepCount
        {
            get
            {
                long steps;
                Err.Check(Native.ampx_optimizer_step_count(Ptr, &steps), this);
                return steps;
            }
        }

        /// <summary>Whether the most recent step was taken (false: skipped for inf/NaN gradients).</summary>
        public bool LastStepTaken
        {
            get
            {
                int taken;
                Err.Check(Native.ampx_optimizer_last_step_taken(Ptr, &taken), this);
                return taken != 0;
            }
        }

        /// <summary>The serialised state (versioned, checksummed). Synchronizes.</summary>
        public byte[] SaveState()
        {
            var raw = Ptr;
            UIntPtr size;
            Err.Check(Native.ampx_optimizer_state_size(raw, &size), this);
            var buffer = new byte[(ulong)size];
            fixed (byte* b = buffer)
                Err.Check(Native.ampx_optimizer_save_state(raw, b, size), this);
            return buffer;
        }

        /// <summary>Restores SaveState's bytes; nothing changes when they do not fit.</summary>
        public void LoadState(byte[] state)
        {
            if (state == null) throw new ArgumentNullException("state");
            var raw = Ptr;
            fixed (byte* b = state)
                Err.Check(Native.ampx_optimizer_load_state(raw, b, (UIntPtr)state.Length), this);
        }

        /// <summary>Gives `group` a learning-rate schedule from its next step on (null: constant).</summary>
        public void SetLrSchedule(int group, LrSchedule schedule)
        {
            var raw = Ptr;
            if (schedule == null)
            {
                Err.Check(Native.ampx_optimizer_set_lr_schedule(raw, group, null), this);
                return;
            }
            var s = schedule.ToNative();
            Err.Check(Native.ampx_optimizer_set_lr_schedule(raw, group, &s), this);
        }

        /// <summary>`group`'s schedule.</summary>
        public LrSchedule GetLrSchedule(int group)
        {
            var s = Native.ampx_lr_schedule_default();
            Err.Check(Native.ampx_optimizer_get_lr_schedule(Ptr, group, &s), this);
            return new LrSchedule(s);
        }

        // ---- clipping and diagnostics (section 8) ------------------------

        /// <summary>
        /// Clips the gradients by their total norm (norm 2, or double.PositiveInfinity);
        /// refused (Status.ErrOrder) while they are still scaled.
        /// </summary>
        public void ClipGradNorm(double maxNorm, double normType = 2.0, bool errorIfNonfinite = false)
        {
            Err.Check(Native.ampx_clip_grad_norm(Ptr, maxNorm, normType, errorIfNonfinite ? 1 : 0, null), this);
        }

        /// <summary>As ClipGradNorm, returning the total norm (a one-element F32 tensor on the device).</summary>
        public Tensor ClipGradNormWithTotal(double maxNorm, double normType = 2.0, bool errorIfNonfinite = false)
        {
            IntPtr total;
            Err.Check(Native.ampx_clip_grad_norm(Ptr, maxNorm, normType, errorIfNonfinite ? 1 : 0, &total), this);
            return new Tensor(Context, new TensorHandle(total, true));
        }

        /// <summary>Clamps every gradient element to [-clipValue, clipValue].</summary>
        public void ClipGradValue(double clipValue)
        {
            Err.Check(Native.ampx_clip_grad_value(Ptr, clipValue), this);
        }

        /// <summary>The parameters whose gradients (as the next step uses them) hold NaN or inf. Synchronizes.</summary>
        public NonfiniteGrad[] FindNonfiniteGrads()
        {
            var raw = Ptr;
            UIntPtr found;
            Err.Check(Native.ampx_find_nonfinite_grads(raw, null, UIntPtr.Zero, &found), this);
            var entries = new Native.ampx_nonfinite_grad[(int)(ulong)found];
            UIntPtr again;
            fixed (Native.ampx_nonfinite_grad* e = entries)
                Err.Check(Native.ampx_find_nonfinite_grads(raw, e, (UIntPtr)entries.Length, &again), this);
            var result = new NonfiniteGrad[entries.Length];
            for (int i = 0; i < entries.Length; ++i)
            {
                result[i] = new NonfiniteGrad
                {
                    Index = parameters.FindIndex(p => !p.IsDisposed && p.Ptr == entries[i].param),
                    Name = Utf8.String(entries[i].name),
                    NanCount = entries[i].nan_count,
                    InfCount = entries[i].inf_count,
                };
            }
            return result;
        }
    }
}
