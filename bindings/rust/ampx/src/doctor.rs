//! The precision doctor (section 15 of ampx.h, EXPERIMENTAL): gradient
//! statistics, loss-scale history and findings of one optimizer.
//!
//! A [`Doctor`] watches an optimizer (and the scaler attached to it, if
//! any). Every `interval`-th step (steps 1, 1 + interval, ...) it takes, on
//! the device and in the unscale's own pass over the gradients, an exponent
//! histogram of each parameter's true (unscaled) gradient, its largest
//! magnitude, and which elements are zero, subnormal or infinite in fp16 at
//! the current scale and without loss scaling; for 16-bit parameters, the
//! updates they did not take. Every step with a scaler is recorded in a
//! history ring. Nothing is read back until a read method is called
//! ([`Doctor::examine`], [`Doctor::params`], [`Doctor::history`],
//! [`Doctor::findings`], [`Doctor::summary`], [`Doctor::write_report`]),
//! which synchronizes and diagnoses the history into findings.
//!
//! Histogram bins ([`DOCTOR_BINS`] of them): [`BIN_ZERO`] counts exact
//! zeros, [`BIN_TINY`] values below 2^-64, [`binade_bin`]`(e)` the values
//! with 2^e <= |u| < 2^(e+1) for e in [-64, 15], [`BIN_HUGE`] 2^16 <= |u| <
//! inf, [`BIN_NONFINITE`] inf and NaN.
use std::cell::Cell;
use std::fmt;
use std::path::Path;
use std::ptr::{self, NonNull};

use ampx_sys as sys;

use crate::checkpoint_file::path_arg;
use crate::context::Context;
use crate::dtype::DType;
use crate::error::{check, owned_string, static_str, Result};
use crate::optim::Optimizer;

/// The number of histogram bins (`AMPX_DOCTOR_BINS`).
pub const DOCTOR_BINS: usize = sys::AMPX_DOCTOR_BINS;
/// The bin of exact zeros (`AMPX_DOCTOR_BIN_ZERO`).
pub const BIN_ZERO: usize = sys::AMPX_DOCTOR_BIN_ZERO as usize;
/// The bin of 0 < |u| < 2^-64 (`AMPX_DOCTOR_BIN_TINY`).
pub const BIN_TINY: usize = sys::AMPX_DOCTOR_BIN_TINY as usize;
/// The bin of 2^16 <= |u| < inf, always infinite in fp16 (`AMPX_DOCTOR_BIN_HUGE`).
pub const BIN_HUGE: usize = sys::AMPX_DOCTOR_BIN_HUGE as usize;
/// The bin of inf and NaN (`AMPX_DOCTOR_BIN_NONFINITE`).
pub const BIN_NONFINITE: usize = sys::AMPX_DOCTOR_BIN_NONFINITE as usize;
/// The binades with a bin of their own: 2^MIN_BINADE ..= 2^MAX_BINADE.
pub const MIN_BINADE: i32 = -64;
/// See [`MIN_BINADE`].
pub const MAX_BINADE: i32 = 15;

/// The histogram bin of 2^e <= |u| < 2^(e+1) (`AMPX_DOCTOR_BIN_BINADE(e)`),
/// or `None` for an exponent outside [[`MIN_BINADE`], [`MAX_BINADE`]] (see
/// [`BIN_TINY`] and [`BIN_HUGE`]). fp16's subnormals are the binades
/// -24..-15, its normals -14..15.
pub fn binade_bin(exponent: i32) -> Option<usize> {
    if (MIN_BINADE..=MAX_BINADE).contains(&exponent) {
        Some(sys::AMPX_DOCTOR_BIN_BINADE(exponent) as usize)
    } else {
        None
    }
}

/// What a finding is (`ampx_doctor_finding_code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FindingCode {
    /// The scale keeps backing off at scales that had worked.
    ScaleOscillation,
    /// The scale sits at its minimum and overflows, or the last steps were
    /// all skipped.
    ScaleAtMinimum,
    /// Gradients are lost to fp16 underflow while the scale could be higher.
    ScaleTooLow,
    /// Gradients that were alive became (nearly) all zero or subnormal.
    GradientsVanished,
    /// A code this binding does not know (from a newer library).
    Unknown(i32),
}

impl FindingCode {
    /// The code for a C value.
    pub fn from_raw(code: i32) -> FindingCode {
        match code {
            sys::AMPX_DOCTOR_SCALE_OSCILLATION => FindingCode::ScaleOscillation,
            sys::AMPX_DOCTOR_SCALE_AT_MINIMUM => FindingCode::ScaleAtMinimum,
            sys::AMPX_DOCTOR_SCALE_TOO_LOW => FindingCode::ScaleTooLow,
            sys::AMPX_DOCTOR_GRADIENTS_VANISHED => FindingCode::GradientsVanished,
            other => FindingCode::Unknown(other),
        }
    }

    /// The C value.
    pub fn code(self) -> i32 {
        match self {
            FindingCode::ScaleOscillation => sys::AMPX_DOCTOR_SCALE_OSCILLATION,
            FindingCode::ScaleAtMinimum => sys::AMPX_DOCTOR_SCALE_AT_MINIMUM,
            FindingCode::ScaleTooLow => sys::AMPX_DOCTOR_SCALE_TOO_LOW,
            FindingCode::GradientsVanished => sys::AMPX_DOCTOR_GRADIENTS_VANISHED,
            FindingCode::Unknown(code) => code,
        }
    }

    /// The library's name, e.g. "scale_too_low" (`ampx_doctor_finding_code_name`);
    /// `None` for a code it does not know.
    pub fn name(self) -> Option<&'static str> {
        finding_code_name(self.code())
    }
}

/// The likely cause of a finding (`ampx_doctor_cause`; `AMPX_DOCTOR_CAUSE_NONE`
/// is `None` where a cause is returned).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// The learning rate (rising gradient norms, weights that blew up, or
    /// gradients that died).
    LearningRate,
    /// One op (named by the finding's parameter) overflows or dominates.
    UnstableOp,
    /// Isolated single-step overflows of every gradient.
    OutlierBatches,
    /// fp16 gradients without a scaler.
    NoLossScaling,
    /// A cause this binding does not know (from a newer library).
    Unknown(i32),
}

impl Cause {
    /// The cause for a C value (`None` for `AMPX_DOCTOR_CAUSE_NONE`).
    pub fn from_raw(cause: i32) -> Option<Cause> {
        Some(match cause {
            sys::AMPX_DOCTOR_CAUSE_NONE => return None,
            sys::AMPX_DOCTOR_CAUSE_LEARNING_RATE => Cause::LearningRate,
            sys::AMPX_DOCTOR_CAUSE_UNSTABLE_OP => Cause::UnstableOp,
            sys::AMPX_DOCTOR_CAUSE_OUTLIER_BATCHES => Cause::OutlierBatches,
            sys::AMPX_DOCTOR_CAUSE_NO_LOSS_SCALING => Cause::NoLossScaling,
            other => Cause::Unknown(other),
        })
    }

    /// The C value.
    pub fn code(self) -> i32 {
        match self {
            Cause::LearningRate => sys::AMPX_DOCTOR_CAUSE_LEARNING_RATE,
            Cause::UnstableOp => sys::AMPX_DOCTOR_CAUSE_UNSTABLE_OP,
            Cause::OutlierBatches => sys::AMPX_DOCTOR_CAUSE_OUTLIER_BATCHES,
            Cause::NoLossScaling => sys::AMPX_DOCTOR_CAUSE_NO_LOSS_SCALING,
            Cause::Unknown(code) => code,
        }
    }

    /// The library's name, e.g. "no_loss_scaling" (`ampx_doctor_cause_name`);
    /// `None` for a cause it does not know.
    pub fn name(self) -> Option<&'static str> {
        cause_name(self.code())
    }
}

/// The library's name of an `ampx_doctor_finding_code` value
/// (`ampx_doctor_finding_code_name`), `None` if it does not know it.
pub fn finding_code_name(code: i32) -> Option<&'static str> {
    // SAFETY: thread-safe; a static string or NULL.
    let name = unsafe { sys::ampx_doctor_finding_code_name(code) };
    // SAFETY: non-NULL names are static.
    (!name.is_null()).then(|| unsafe { static_str(name) })
}

/// The library's name of an `ampx_doctor_cause` value (`ampx_doctor_cause_name`;
/// "" for none), `None` if it does not know it.
pub fn cause_name(cause: i32) -> Option<&'static str> {
    // SAFETY: thread-safe; a static string or NULL.
    let name = unsafe { sys::ampx_doctor_cause_name(cause) };
    // SAFETY: non-NULL names are static.
    (!name.is_null()).then(|| unsafe { static_str(name) })
}

/// Options of [`Doctor::new`] (`ampx_doctor_options`); `Default` is the
/// library's (`ampx_doctor_options_default`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DoctorOptions {
    /// Sample every interval-th step; 0: off (default 100). Negative values
    /// are refused by the library.
    pub interval: i32,
    /// Steps kept in the history ring, the latest (default 4096, at most
    /// 16777216; 56 bytes each, device memory).
    pub history: i32,
}

mirror_options!(DoctorOptions, sys::ampx_doctor_options, sys::ampx_doctor_options_default,
                numbers: [interval, history], flags: []);

impl DoctorOptions {
    /// The defaults with another interval.
    pub fn with_interval(interval: i32) -> Self {
        DoctorOptions { interval, ..Default::default() }
    }
}

/// What [`Doctor::examine`] reports (`ampx_doctor_overview`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DoctorOverview {
    /// Optimizer steps seen.
    pub steps: i64,
    /// The latest sampled step (0: none yet).
    pub sample_step: i64,
    /// The loss scale of that step (1 without a scaler).
    pub sample_scale: f64,
    /// Parameters with statistics ([`Doctor::params`]).
    pub param_count: usize,
    /// Entries in the history (at most the history option).
    pub history_count: usize,
    /// Findings ([`Doctor::findings`]).
    pub finding_count: usize,
    /// Steps not observed for lack of memory.
    pub missed_steps: i64,
}

/// One parameter's statistics of the latest sampled step
/// (`ampx_doctor_param_stats`, [`Doctor::params`]).
///
/// For a gradient element x as stored (scaled by the loss scale S) and its
/// true value u = x / S: the `fp16_*` fractions are of all the parameter's
/// elements, "unscaled" ones of u and "scaled" ones of x, where zero means
/// the value rounds to 0 in fp16 (|v| <= 2^-25, exact zeros included),
/// subnormal 0 < |fp16(v)| < 2^-14, overflow infinite.
#[derive(Clone, Debug, PartialEq)]
pub struct DoctorParamStats {
    /// The parameter's index in the optimizer.
    pub index: usize,
    /// Its name ("" if unnamed).
    pub name: String,
    /// The parameter's dtype (`None`: a value this binding does not know).
    pub param_dtype: Option<DType>,
    /// The gradient's dtype as stored (F32 also when it had no gradient).
    pub grad_dtype: Option<DType>,
    /// Elements sampled (0: no gradient on that step).
    pub elements: i64,
    /// Counts of |u| per bin (see [`binade_bin`]).
    pub histogram: [i64; DOCTOR_BINS],
    /// The largest finite |u|.
    pub amax: f64,
    /// The largest finite |x|, as stored.
    pub amax_scaled: f64,
    /// The L2 norm of the finite true values u.
    pub grad_norm: f64,
    /// Share of the elements whose u rounds to zero in fp16.
    pub fp16_zero_unscaled: f64,
    /// Share whose u is an fp16 subnormal.
    pub fp16_subnormal_unscaled: f64,
    /// Share whose stored x rounds to zero in fp16.
    pub fp16_zero_scaled: f64,
    /// Share whose x is an fp16 subnormal.
    pub fp16_subnormal_scaled: f64,
    /// Share whose x is infinite in fp16.
    pub fp16_overflow_scaled: f64,
    /// How many more times the scale could double: the largest k with
    /// `amax_scaled * 2^k <= 65504` (negative while overflowing).
    pub headroom: i32,
    /// Every element is zero (`headroom` is 0 then).
    pub headroom_unbounded: bool,
    /// 16-bit parameters: the fraction of elements whose fp32 master changed
    /// in the sampled step while the parameter kept its value; `None` for
    /// fp32 parameters.
    pub lost_update_fraction: Option<f64>,
    /// The same as it would be without a master; `None` for fp32 parameters.
    pub lost_without_master_fraction: Option<f64>,
}

/// One step of the history (`ampx_doctor_sample`, [`Doctor::history`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DoctorSample {
    /// The optimizer step, counted from 1.
    pub step: i64,
    /// The scale the step's gradients carried.
    pub scale: f64,
    /// A gradient was not finite (with an enabled scaler: the step was skipped).
    pub found_inf: bool,
    /// Statistics were taken on this step.
    pub sampled: bool,
    /// Sampled steps: L2 norm of the finite true gradients.
    pub grad_norm: f64,
    /// The parameter backward reached first among those with a non-finite
    /// gradient (the highest index); `None`: none.
    pub first_overflow_param: Option<usize>,
    /// Parameters with a non-finite gradient.
    pub overflow_params: usize,
    /// Sampled: fraction zero or subnormal in fp16 at the scale.
    pub fp16_lost_scaled: f64,
    /// Sampled: the same without loss scaling.
    pub fp16_lost_unscaled: f64,
}

/// One finding (`ampx_doctor_finding`, [`Doctor::findings`]).
#[derive(Clone, Debug, PartialEq)]
pub struct DoctorFinding {
    /// What it is.
    pub code: FindingCode,
    /// Its likely cause, `None` when the evidence names none.
    pub cause: Option<Cause>,
    /// The parameter named (an unstable op), or `None`.
    pub param: Option<usize>,
    /// Its name (`None` without a parameter, "" if unnamed).
    pub param_name: Option<String>,
    /// The first step that shows it.
    pub first_step: i64,
    /// The last step that shows it.
    pub last_step: i64,
    /// One or two English sentences with the evidence.
    pub message: String,
}

/// A precision doctor watching one optimizer (`ampx_doctor`).
///
/// An optimizer has at most one doctor at a time; the doctor keeps the
/// optimizer alive in the library (it may outlive the [`Optimizer`]
/// value). `Drop` detaches it from the optimizer and releases it. Use it on
/// the optimizer's thread.
pub struct Doctor {
    raw: NonNull<sys::ampx_doctor_s>,
    interval: Cell<i32>,
    history: i32,
}

/// Index arguments beyond i32 are passed as -1, which the library refuses.
fn index_arg(index: usize) -> i32 {
    i32::try_from(index).unwrap_or(-1)
}

impl Doctor {
    /// Attaches a doctor, in context `ctx` (the optimizer's), to `optimizer`
    /// (`ampx_doctor_create`). Errors: `InvalidArgument` for options out of
    /// range or an optimizer that has a doctor already, `Device` for an
    /// optimizer of another context.
    pub fn new(ctx: &Context, optimizer: &Optimizer, options: &DoctorOptions) -> Result<Doctor> {
        let raw = options.to_raw();
        let mut out = ptr::null_mut();
        // SAFETY: live handles; the options outlive the call.
        check(unsafe { sys::ampx_doctor_create(ctx.as_raw(), optimizer.as_raw(), &raw, &mut out) })?;
        Ok(Doctor {
            raw: NonNull::new(out).expect("ampx returned a NULL doctor"),
            interval: Cell::new(options.interval),
            history: options.history,
        })
    }

    /// The handle, borrowed: valid while `self` lives.
    pub fn as_raw(&self) -> sys::ampx_doctor {
        self.raw.as_ptr()
    }

    /// The sampling interval (0: off).
    pub fn interval(&self) -> i32 {
        self.interval.get()
    }

    /// The number of steps the history ring keeps.
    pub fn history_capacity(&self) -> usize {
        self.history as usize
    }

    /// Changes the sampling interval from the next step (0: off;
    /// `ampx_doctor_set_interval`). A negative one is refused
    /// (`InvalidArgument`) and changes nothing.
    pub fn set_interval(&self, interval: i32) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::ampx_doctor_set_interval(self.as_raw(), interval) })?;
        self.interval.set(interval);
        Ok(())
    }

    /// Reads the doctor's device state (synchronizes, when steps were taken
    /// since the last read), diagnoses it and returns the overview
    /// (`ampx_doctor_examine`).
    pub fn examine(&self) -> Result<DoctorOverview> {
        let mut o = sys::ampx_doctor_overview::default();
        // SAFETY: live handle; struct_size set.
        check(unsafe { sys::ampx_doctor_examine(self.as_raw(), &mut o) })?;
        Ok(DoctorOverview {
            steps: o.steps,
            sample_step: o.sample_step,
            sample_scale: o.sample_scale,
            param_count: o.param_count.max(0) as usize,
            history_count: o.history_count.max(0) as usize,
            finding_count: o.finding_count.max(0) as usize,
            missed_steps: o.missed_steps,
        })
    }

    /// Parameter `index`'s statistics of the latest sampled step
    /// (`ampx_doctor_get_param_stats`). Errors: `Order` before any step
    /// was sampled, `InvalidArgument` for an index outside
    /// `0..examine()?.param_count`.
    pub fn param_stats(&self, index: usize) -> Result<DoctorParamStats> {
        let mut s = sys::ampx_doctor_param_stats::default();
        // SAFETY: live handle; struct_size set.
        check(unsafe { sys::ampx_doctor_get_param_stats(self.as_raw(), index_arg(index), &mut s) })?;
        let fraction = |v: f64| if v < 0.0 { None } else { Some(v) };
        Ok(DoctorParamStats {
            index: s.index.max(0) as usize,
            // SAFETY: owned by the doctor until the next read; copied now.
            name: unsafe { owned_string(s.name) },
            param_dtype: DType::from_raw(s.param_dtype),
            grad_dtype: DType::from_raw(s.grad_dtype),
            elements: s.elements,
            histogram: s.histogram,
            amax: s.amax,
            amax_scaled: s.amax_scaled,
            grad_norm: s.grad_norm,
            fp16_zero_unscaled: s.fp16_zero_unscaled,
            fp16_subnormal_unscaled: s.fp16_subnormal_unscaled,
            fp16_zero_scaled: s.fp16_zero_scaled,
            fp16_subnormal_scaled: s.fp16_subnormal_scaled,
            fp16_overflow_scaled: s.fp16_overflow_scaled,
            headroom: s.headroom,
            headroom_unbounded: s.headroom_unbounded != 0,
            lost_update_fraction: fraction(s.lost_update_fraction),
            lost_without_master_fraction: fraction(s.lost_without_master_fraction),
        })
    }

    /// Every parameter's statistics of the latest sampled step, in the
    /// optimizer's order (empty before any step was sampled).
    pub fn params(&self) -> Result<Vec<DoctorParamStats>> {
        let overview = self.examine()?;
        if overview.sample_step == 0 {
            return Ok(Vec::new());
        }
        (0..overview.param_count).map(|i| self.param_stats(i)).collect()
    }

    /// The recorded steps, oldest first (`ampx_doctor_get_history`): every
    /// step with an enabled scaler, else only the sampled ones; at most
    /// [`Doctor::history_capacity`] of the latest.
    pub fn history(&self) -> Result<Vec<DoctorSample>> {
        let mut count = 0;
        // SAFETY: NULL samples with capacity 0 asks for the count.
        check(unsafe { sys::ampx_doctor_get_history(self.as_raw(), ptr::null_mut(), 0, &mut count) })?;
        if count <= 0 {
            return Ok(Vec::new());
        }
        let mut samples = vec![sys::ampx_doctor_sample::default(); count as usize];
        // SAFETY: `samples` has room for `count` entries.
        check(unsafe { sys::ampx_doctor_get_history(self.as_raw(), samples.as_mut_ptr(), count, &mut count) })?;
        samples.truncate(count.max(0) as usize);
        Ok(samples
            .iter()
            .map(|e| DoctorSample {
                step: e.step,
                scale: e.scale,
                found_inf: e.found_inf != 0,
                sampled: e.sampled != 0,
                grad_norm: e.grad_norm,
                first_overflow_param: usize::try_from(e.first_overflow_param).ok(),
                overflow_params: e.overflow_params.max(0) as usize,
                fp16_lost_scaled: e.fp16_lost_scaled,
                fp16_lost_unscaled: e.fp16_lost_unscaled,
            })
            .collect())
    }

    /// The diagnosed findings, most important first (`ampx_doctor_get_finding`).
    pub fn findings(&self) -> Result<Vec<DoctorFinding>> {
        let overview = self.examine()?;
        (0..overview.finding_count)
            .map(|index| {
                let mut f = sys::ampx_doctor_finding::default();
                // SAFETY: live handle; struct_size set.
                check(unsafe { sys::ampx_doctor_get_finding(self.as_raw(), index_arg(index), &mut f) })?;
                let param = usize::try_from(f.param).ok();
                Ok(DoctorFinding {
                    code: FindingCode::from_raw(f.code),
                    cause: Cause::from_raw(f.cause),
                    param,
                    // SAFETY: owned by the doctor until the next read; copied now.
                    param_name: param.map(|_| unsafe { owned_string(f.param_name) }),
                    first_step: f.first_step,
                    last_step: f.last_step,
                    // SAFETY: as above.
                    message: unsafe { owned_string(f.message) },
                })
            })
            .collect()
    }

    /// A one-line summary for logs: steps, the latest sample's fp16 losses
    /// and headroom, overflows, the findings' codes (`ampx_doctor_summary`).
    pub fn summary(&self) -> Result<String> {
        let mut text = ptr::null();
        // SAFETY: live handle, valid out pointer.
        check(unsafe { sys::ampx_doctor_summary(self.as_raw(), &mut text) })?;
        // SAFETY: owned by the doctor until the next read; copied now.
        Ok(unsafe { owned_string(text) })
    }

    /// Writes the report -- one self-contained HTML file (inline CSS and
    /// SVG, no script): findings, scale history, and per parameter its
    /// histogram over fp16's range and figures -- to `path`, replacing it
    /// (`ampx_doctor_write_report`). `Status::Io` when it cannot be written
    /// (a partial file is removed).
    pub fn write_report(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path_arg(path.as_ref(), "a report path")?;
        // SAFETY: live handle, NUL-terminated path borrowed for the call.
        check(unsafe { sys::ampx_doctor_write_report(self.as_raw(), path.as_ptr()) })
    }
}

owns_reference!(Doctor, release: sys::ampx_doctor_release);

impl fmt::Debug for Doctor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Doctor")
            .field("raw", &self.raw)
            .field("interval", &self.interval.get())
            .field("history", &self.history)
            .finish()
    }
}
