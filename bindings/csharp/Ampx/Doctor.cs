using System;

namespace Ampx
{
    /// <summary>What Doctor.Examine reports: counts and the latest sample.</summary>
    public struct DoctorOverview
    {
        public long Steps, SampleStep, MissedSteps;
        public double SampleScale;
        public int ParamCount, HistoryCount, FindingCount;
    }

    /// <summary>One parameter's statistics of the latest sample (ampx_doctor_param_stats).</summary>
    public sealed class DoctorParamStats
    {
        public int Index;
        public string Name;
        public DType ParamDType, GradDType;
        public long Elements;
        /// <summary>Counts of |u| per bin: 0 zero, 1 tiny, Doctor.BinadeBin(e) for 2^e, then huge, non-finite.</summary>
        public long[] Histogram;
        public double Amax, AmaxScaled, GradNorm;
        public double Fp16ZeroUnscaled, Fp16SubnormalUnscaled, Fp16ZeroScaled, Fp16SubnormalScaled,
                      Fp16OverflowScaled;
        public int Headroom;
        public bool HeadroomUnbounded;
        /// <summary>16-bit parameters: fraction of updates lost to rounding; -1 for fp32.</summary>
        public double LostUpdateFraction, LostWithoutMasterFraction;
    }

    /// <summary>One step of the doctor's history (ampx_doctor_sample).</summary>
    public struct DoctorSample
    {
        public long Step;
        public double Scale, GradNorm, Fp16LostScaled, Fp16LostUnscaled;
        public bool FoundInf, Sampled;
        public int FirstOverflowParam, OverflowParams;
    }

    /// <summary>One finding with its likely cause (ampx_doctor_finding).</summary>
    public sealed class DoctorFinding
    {
        public DoctorFindingCode Code;
        public DoctorCause Cause;
        public int Param;
        public string ParamName, Message;
        public long FirstStep, LastStep;
    }

    /// <summary>
    /// The precision doctor (ampx_doctor): watches an optimizer (and its scaler),
    /// takes gradient statistics on the device every Interval-th step, and
    /// diagnoses the history into findings when read. Dispose detaches it from
    /// its optimizer.
    /// </summary>
    public sealed unsafe class Doctor : ContextObject
    {
        /// <summary>Histogram bins (AMPX_DOCTOR_BINS).</summary>
        public const int Bins = Native.AMPX_DOCTOR_BINS;
        public const int BinZero = Native.AMPX_DOCTOR_BIN_ZERO;
        public const int BinTiny = Native.AMPX_DOCTOR_BIN_TINY;
        public const int BinHuge = Native.AMPX_DOCTOR_BIN_HUGE;
        public const int BinNonfinite = Native.AMPX_DOCTOR_BIN_NONFINITE;

        /// <summary>The bin of 2^e &lt;= |u| &lt; 2^(e+1), e in [-64, 15].</summary>
        public static int BinadeBin(int e)
        {
            if (e < -64 || e > 15) throw new ArgumentOutOfRangeException("e", "binades run from -64 to 15");
            return Native.AMPX_DOCTOR_BIN_BINADE(e);
        }

        public Doctor(Optimizer optimizer, DoctorOptions options = null)
            : base(new DoctorHandle(Create(Optimizer.NotNull(optimizer).Context, (raw, result) =>
              {
                  var o = (options ?? new DoctorOptions()).ToNative();
                  return Native.ampx_doctor_create(raw, optimizer.Ptr, &o, result);
              })), optimizer.Context, "Doctor") { }

        /// <summary>Changes the sampling interval from the next step (0: off).</summary>
        public void SetInterval(int interval)
        {
            Err.Check(Native.ampx_doctor_set_interval(Ptr, interval), this);
        }

        /// <summary>Reads the device state (synchronizes), diagnoses it, and reports.</summary>
        public DoctorOverview Examine()
        {
            var o = Native.AMPX_DOCTOR_OVERVIEW_INIT();
            Err.Check(Native.ampx_doctor_examine(Ptr, &o), this);
            return new DoctorOverview
            {
                Steps = o.steps, SampleStep = o.sample_step, MissedSteps = o.missed_steps,
                SampleScale = o.sample_scale, ParamCount = o.param_count, HistoryCount = o.history_count,
                FindingCount = o.finding_count,
            };
        }

        /// <summary>Parameter `index`'s statistics of the latest sample.</summary>
        public DoctorParamStats ParamStats(int index)
        {
            var s = default(Native.ampx_doctor_param_stats);
            s.struct_size = (UIntPtr)sizeof(Native.ampx_doctor_param_stats);
            Err.Check(Native.ampx_doctor_get_param_stats(Ptr, index, &s), this);
            var histogram = new long[Bins];
            for (int i = 0; i < Bins; ++i) histogram[i] = s.histogram[i];
            return new DoctorParamStats
            {
                Index = s.index, Name = Utf8.String(s.name), ParamDType = (DType)s.param_dtype,
                GradDType = (DType)s.grad_dtype, Elements = s.elements, Histogram = histogram,
                Amax = s.amax, AmaxScaled = s.amax_scaled, GradNorm = s.grad_norm,
                Fp16ZeroUnscaled = s.fp16_zero_unscaled, Fp16SubnormalUnscaled = s.fp16_subnormal_unscaled,
                Fp16ZeroScaled = s.fp16_zero_scaled, Fp16SubnormalScaled = s.fp16_subnormal_scaled,
                Fp16OverflowScaled = s.fp16_overflow_scaled, Headroom = s.headroom,
                HeadroomUnbounded = s.headroom_unbounded != 0, LostUpdateFraction = s.lost_update_fraction,
                LostWithoutMasterFraction = s.lost_without_master_fraction,
            };
        }

        /// <summary>The history, oldest first.</summary>
        public DoctorSample[] History()
        {
            var raw = Ptr;
            int count;
            Err.Check(Native.ampx_doctor_get_history(raw, null, 0, &count), this);
            var samples = new Native.ampx_doctor_sample[count];
            int again;
            fixed (Native.ampx_doctor_sample* s = samples)
                Err.Check(Native.ampx_doctor_get_history(raw, s, samples.Length, &again), this);
            var result = new DoctorSample[Math.Min(count, again)];
            for (int i = 0; i < result.Length; ++i)
            {
                var s = samples[i];
                result[i] = new DoctorSample
                {
                    Step = s.step, Scale = s.scale, GradNorm = s.grad_norm, Fp16LostScaled = s.fp16_lost_scaled,
                    Fp16LostUnscaled = s.fp16_lost_unscaled, FoundInf = s.found_inf != 0, Sampled = s.sampled != 0,
                    FirstOverflowParam = s.first_overflow_param, OverflowParams = s.overflow_params,
                };
            }
            return result;
        }

        /// <summary>Finding `index` (most important first).</summary>
        public DoctorFinding Finding(int index)
        {
            var f = default(Native.ampx_doctor_finding);
            f.struct_size = (UIntPtr)sizeof(Native.ampx_doctor_finding);
            Err.Check(Native.ampx_doctor_get_finding(Ptr, index, &f), this);
            return new DoctorFinding
            {
                Code = (DoctorFindingCode)f.code, Cause = (DoctorCause)f.cause, Param = f.param,
                ParamName = Utf8.String(f.param_name), Message = Utf8.String(f.message),
                FirstStep = f.first_step, LastStep = f.last_step,
            };
        }

        /// <summary>Every finding of a fresh Examine.</summary>
        public DoctorFinding[] Findings()
        {
            var overview = Examine();
            var result = new DoctorFinding[overview.FindingCount];
            for (int i = 0; i < result.Length; ++i) result[i] = Finding(i);
            return result;
        }

        /// <summary>A finding code's name ("scale_too_low"), or null for an unknown value.</summary>
        public static string FindingCodeName(DoctorFindingCode code)
        {
            return Utf8.String(Native.ampx_doctor_finding_code_name((int)code));
        }

        /// <summary>A cause's name ("learning_rate"; "" for None), or null for an unknown value.</summary>
        public static string CauseName(DoctorCause cause)
        {
            return Utf8.String(Native.ampx_doctor_cause_name((int)cause));
        }

        /// <summary>A one-line summary for logs.</summary>
        public string Summary()
        {
            byte* text;
            Err.Check(Native.ampx_doctor_summary(Ptr, &text), this);
            return Utf8.String(text);
        }

        /// <summary>Writes the HTML report to `path`.</summary>
        public void WriteReport(string path)
        {
            if (path == null) throw new ArgumentNullException("path");
            var raw = Ptr;
            fixed (byte* p = Utf8.Bytes(path))
                Err.Check(Native.ampx_doctor_write_report(raw, p), this);
        }
    }
}
