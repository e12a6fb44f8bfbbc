//! Optimizers (SGD, Adam, AdamW with fp32 master weights and param groups),
//! gradient clipping and non-finite gradient diagnostics.
use std::ffi::CStr;
use std::ptr::{self, NonNull};

use ampx_sys as sys;

use crate::context::Context;
use crate::error::{check, Result};
use crate::tensor::Tensor;

/// SGD options (`ampx_sgd_options`); `Default` is the library's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdOptions {
    /// Learning rate (default 1e-3).
    pub lr: f64,
    /// Momentum (default 0).
    pub momentum: f64,
    /// Dampening (default 0).
    pub dampening: f64,
    /// L2 weight decay (default 0).
    pub weight_decay: f64,
    /// Nesterov momentum (needs momentum > 0 and dampening 0).
    pub nesterov: bool,
    /// Maximise instead of minimise.
    pub maximize: bool,
}

mirror_options!(SgdOptions, sys::ampx_sgd_options, sys::ampx_sgd_options_default,
                numbers: [lr, momentum, dampening, weight_decay], flags: [nesterov, maximize]);

/// What follows a schedule's warm-up (`ampx_lr_decay`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LrDecay {
    /// The group's rate.
    Constant,
    /// Linear to `end_factor` times the rate at `total_steps`.
    Linear,
    /// Cosine to `min_lr` at `total_steps` (periodic after it, as torch's
    /// CosineAnnealingLR).
    Cosine,
    /// Times `gamma` every `step_size` steps.
    Step,
}

/// A param group's learning-rate schedule, computed on the device from the
/// optimizer's count of taken steps (`ampx_lr_schedule`; the formulas are in
/// ampx.h section 17). `Default` is the group's constant rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LrSchedule {
    /// Steps of linear warm-up (default 0).
    pub warmup_steps: i64,
    /// The warm-up's first fraction of the rate (default 0), in [0, 1].
    pub warmup_start_factor: f64,
    /// The decay after the warm-up.
    pub decay: LrDecay,
    /// Linear, cosine: the step the decay ends at, warm-up included.
    pub total_steps: i64,
    /// Linear: the final fraction of the rate (default 0).
    pub end_factor: f64,
    /// Cosine: the final rate (default 0).
    pub min_lr: f64,
    /// Step: steps between decays (default 1).
    pub step_size: i64,
    /// Step: the factor (default 0.1).
    pub gamma: f64,
}

impl Default for LrSchedule {
    fn default() -> Self {
        // SAFETY: thread-safe, no arguments.
        LrSchedule::from_raw(unsafe { sys::ampx_lr_schedule_default() })
    }
}

impl LrSchedule {
    fn to_raw(self) -> sys::ampx_lr_schedule {
        // SAFETY: thread-safe, no arguments.
        let mut s = unsafe { sys::ampx_lr_schedule_default() };
        s.warmup_steps = self.warmup_steps;
        s.warmup_start_factor = self.warmup_start_factor;
        s.decay = match self.decay {
            LrDecay::Constant => sys::AMPX_LR_CONSTANT,
            LrDecay::Linear => sys::AMPX_LR_LINEAR,
            LrDecay::Cosine => sys::AMPX_LR_COSINE,
            LrDecay::Step => sys::AMPX_LR_STEP,
        };
        s.total_steps = self.total_steps;
        s.end_factor = self.end_factor;
        s.min_lr = self.min_lr;
        s.step_size = self.step_size;
        s.gamma = self.gamma;
        s
    }

    fn from_raw(s: sys::ampx_lr_schedule) -> Self {
        LrSchedule {
            warmup_steps: s.warmup_steps,
            warmup_start_factor: s.warmup_start_factor,
            decay: match s.decay {
                sys::AMPX_LR_LINEAR => LrDecay::Linear,
                sys::AMPX_LR_COSINE => LrDecay::Cosine,
                sys::AMPX_LR_STEP => LrDecay::Step,
                _ => LrDecay::Constant,
            },
            total_steps: s.total_steps,
            end_factor: s.end_factor,
            min_lr: s.min_lr,
            step_size: s.step_size,
            gamma: s.gamma,
        }
    }

    /// The rate this schedule gives a group of rate `base_lr` after `step`
    /// taken steps, in double (`ampx_lr_schedule_value`).
    pub fn value(&self, base_lr: f64, step: i64) -> Result<f64> {
        let raw = self.to_raw();
        let mut lr = 0.0;
        // SAFETY: valid pointers for the call.
        check(unsafe { sys::ampx_lr_schedule_value(&raw, base_lr, step, &mut lr) })?;
        Ok(lr)
    }
}

/// Adam / AdamW options (`ampx_adam_options`). `Default` is Adam's
/// defaults; [`AdamOptions::adamw`] AdamW's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamOptions {
    /// Learning rate (default 1e-3).
    pub lr: f64,
    /// First-moment decay (default 0.9).
    pub beta1: f64,
    /// Second-moment decay (default 0.999).
    pub beta2: f64,
    /// Denominator epsilon (default 1e-8).
    pub eps: f64,
    /// Weight decay (Adam 0, AdamW 1e-2).
    pub weight_decay: f64,
    /// AMSGrad.
    pub amsgrad: bool,
    /// Maximise instead of minimise.
    pub maximize: bool,
    /// false: Adam (L2 in the gradient); true: AdamW (decoupled decay).
    pub decoupled_weight_decay: bool,
}

// `Default` is Adam's defaults (`ampx_adam_options_default`).
mirror_options!(AdamOptions, sys::ampx_adam_options, sys::ampx_adam_options_default,
                numbers: [lr, beta1, beta2, eps, weight_decay],
                flags: [amsgrad, maximize, decoupled_weight_decay]);

impl AdamOptions {
    /// Adam's defaults (`ampx_adam_options_default`).
    pub fn adam() -> Self {
        AdamOptions::default()
    }

    /// AdamW's defaults (`ampx_adamw_options_default`): weight decay 1e-2,
    /// decoupled.
    pub fn adamw() -> Self {
        // SAFETY: thread-safe, no arguments.
        AdamOptions::from_raw(unsafe { sys::ampx_adamw_options_default() })
    }

    /// The same options with another learning rate.
    pub fn with_lr(mut self, lr: f64) -> Self {
        self.lr = lr;
        self
    }
}

/// Kinds of per-parameter optimizer state (`ampx_optimizer_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateKind {
    /// fp32 master weights (the parameter itself when it is F32).
    Master,
    /// SGD momentum buffer / Adam exp_avg.
    Momentum,
    /// Adam exp_avg_sq.
    ExpAvgSq,
    /// Adam max_exp_avg_sq (amsgrad).
    MaxExpAvgSq,
}

impl StateKind {
    fn to_raw(self) -> sys::ampx_optimizer_state {
        match self {
            StateKind::Master => sys::AMPX_STATE_MASTER,
            StateKind::Momentum => sys::AMPX_STATE_MOMENTUM,
            StateKind::ExpAvgSq => sys::AMPX_STATE_EXP_AVG_SQ,
            StateKind::MaxExpAvgSq => sys::AMPX_STATE_MAX_EXP_AVG_SQ,
        }
    }
}

/// A parameter whose gradient holds non-finite values
/// ([`Optimizer::find_nonfinite_grads`]).
#[derive(Clone, Debug)]
pub struct NonfiniteGrad {
    /// The parameter (a new reference).
    pub param: Tensor,
    /// Its name ("" if unnamed).
    pub name: String,
    /// NaN elements in its gradient.
    pub nan_count: i64,
    /// Infinite elements in its gradient.
    pub inf_count: i64,
}

/// An optimizer (`ampx_optimizer`) over a fixed list of parameters in
/// groups, stepping from the gradients attached to them. The optimizer
/// retains its parameters. `Drop` releases it; there is no `Clone` (the C
/// API has no retain for optimizers: share one with `Rc`).
///
/// Not `Send`/`Sync`: see the crate documentation on threads.
pub struct Optimizer {
    raw: NonNull<sys::ampx_optimizer_s>,
}

fn raw_params(params: &[&Tensor]) -> Vec<sys::ampx_tensor> {
    params.iter().map(|t| t.as_raw()).collect()
}

impl Optimizer {
    fn created(f: impl FnOnce(*mut sys::ampx_optimizer) -> sys::ampx_status) -> Result<Optimizer> {
        let mut out = ptr::null_mut();
        check(f(&mut out))?;
        Ok(Optimizer { raw: NonNull::new(out).expect("ampx returned a NULL optimizer") })
    }

    /// SGD over `params` (group 0).
    pub fn sgd(ctx: &Context, params: &[&Tensor], options: &SgdOptions) -> Result<Optimizer> {
        let raw = raw_params(params);
        let options = options.to_raw();
        // SAFETY: live handles; `raw` holds `len` handles.
        Optimizer::created(|out| unsafe {
            sys::ampx_optimizer_create_sgd(ctx.as_raw(), raw.as_ptr(), raw.len(), &options, out)
        })
    }

    /// Adam or AdamW (as `options.decoupled_weight_decay` says) over `params`.
    pub fn adam(ctx: &Context, params: &[&Tensor], options: &AdamOptions) -> Result<Optimizer> {
        let raw = raw_params(params);
        let options = options.to_raw();
        // SAFETY: as above.
        Optimizer::created(|out| unsafe {
            sys::ampx_optimizer_create_adam(ctx.as_raw(), raw.as_ptr(), raw.len(), &options, out)
        })
    }

    /// AdamW with its defaults and the learning rate `lr`.
    pub fn adamw(ctx: &Context, params: &[&Tensor], lr: f64) -> Result<Optimizer> {
        Optimizer::adam(ctx, params, &AdamOptions::adamw().with_lr(lr))
    }

    /// The handle, borrowed: valid while `self` lives.
    pub fn as_raw(&self) -> sys::ampx_optimizer {
        self.raw.as_ptr()
    }

    /// Adds a param group with its own learning rate and weight decay;
    /// returns its index.
    pub fn add_group(&self, params: &[&Tensor], lr: f64, weight_decay: f64) -> Result<usize> {
        let raw = raw_params(params);
        let mut index = 0;
        // SAFETY: live handles.
        check(unsafe {
            sys::ampx_optimizer_add_group(self.as_raw(), raw.as_ptr(), raw.len(), lr, weight_decay, &mut index)
        })?;
        Ok(index as usize)
    }

    /// The number of param groups.
    pub fn group_count(&self) -> Result<usize> {
        let mut count = 0;
        // SAFETY: live handle, valid out pointer.
        check(unsafe { sys::ampx_optimizer_group_count(self.as_raw(), &mut count) })?;
        Ok(count as usize)
    }

    /// Sets a group's learning rate for the following steps.
    pub fn set_lr(&self, group: usize, lr: f64) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::ampx_optimizer_set_lr(self.as_raw(), group_index(group), lr) })
    }

    /// A group's learning rate as last set.
    pub fn lr(&self, group: usize) -> Result<f64> {
        let mut lr = 0.0;
        // SAFETY: live handle, valid out pointer.
        check(unsafe { sys::ampx_optimizer_get_lr(self.as_raw(), group_index(group), &mut lr) })?;
        Ok(lr)
    }

    /// Gives `group` a schedule from its next step on (the group's rate is
    /// its base); `None`: the constant rate again.
    pub fn set_lr_schedule(&self, group: usize, schedule: Option<&LrSchedule>) -> Result<()> {
        let raw = schedule.map(|s| s.to_raw());
        let pointer = raw.as_ref().map_or(ptr::null(), |r| r as *const sys::ampx_lr_schedule);
        // SAFETY: live handle; the schedule outlives the call.
        check(unsafe { sys::ampx_optimizer_set_lr_schedule(self.as_raw(), group_index(group), pointer) })
    }

    /// A group's schedule (fields its decay does not use read as defaults).
    pub fn lr_schedule(&self, group: usize) -> Result<LrSchedule> {
        // SAFETY: thread-safe, no arguments.
        let mut raw = unsafe { sys::ampx_lr_schedule_default() };
        // SAFETY: live handle, valid out pointer with struct_size set.
        check(unsafe { sys::ampx_optimizer_get_lr_schedule(self.as_raw(), group_index(group), &mut raw) })?;
        Ok(LrSchedule::from_raw(raw))
    }

    /// Steps taken (skipped ones do not count): the position of every
    /// group's schedule. Synchronizes with the device.
    pub fn step_count(&self) -> Result<i64> {
        let mut steps = 0;
        // SAFETY: live handle, valid out pointer.
        check(unsafe { sys::ampx_optimizer_step_count(self.as_raw(), &mut steps) })?;
        Ok(steps)
    }

    /// One step over every parameter with a gradient, using the gradients
    /// as they are (with an enabled scaler use [`crate::Scaler::step`]).
    pub fn step(&self) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::ampx_optimizer_step(self.as_raw()) })
    }

    /// Sets every attached gradient to zero (they stay attached).
    pub fn zero_grad(&self) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::ampx_optimizer_zero_grad(self.as_raw()) })
    }

    /// One state tensor of `param` (F32, the parameter's shape), as a new
    /// reference; writing to it changes the optimizer's state.
    pub fn state_tensor(&self, param: &Tensor, kind: StateKind) -> Result<Tensor> {
        let mut out = ptr::null_mut();
        // SAFETY: live handles, valid out pointer.
        check(unsafe { sys::ampx_optimizer_state_tensor(self.as_raw(), param.as_raw(), kind.to_raw(), &mut out) })?;
        // SAFETY: a new reference owned by us.
        Ok(unsafe { Tensor::from_raw(out) })
    }

    /// The number of steps `param` has taken (skipped ones do not count).
    pub fn param_steps(&self, param: &Tensor) -> Result<i64> {
        let mut steps = 0;
        // SAFETY: live handles, valid out pointer.
        check(unsafe { sys::ampx_optimizer_param_steps(self.as_raw(), param.as_raw(), &mut steps) })?;
        Ok(steps)
    }

    /// Whether the most recent step was taken (false: skipped for inf/NaN).
    pub fn last_step_taken(&self) -> Result<bool> {
        let mut taken = 0;
        // SAFETY: live handle, valid out pointer.
        check(unsafe { sys::ampx_optimizer_last_step_taken(self.as_raw(), &mut taken) })?;
        Ok(taken != 0)
    }

    /// Serialises the optimizer's state (versioned, checksummed).
    pub fn save_state(&self) -> Result<Vec<u8>> {
        let mut size = 0;
        // SAFETY: live handle, valid out pointer.
        check(unsafe { sys::ampx_optimizer_state_size(self.as_raw(), &mut size) })?;
        let mut buffer = vec![0u8; size];
        // SAFETY: `buffer` holds exactly `size` bytes.
        check(unsafe { sys::ampx_optimizer_save_state(self.as_raw(), buffer.as_mut_ptr().cast(), buffer.len()) })?;
        Ok(buffer)
    }

    /// Restores state from [`Optimizer::save_state`]; validated before
    /// anything changes.
    pub fn load_state(&self, state: &[u8]) -> Result<()> {
        // SAFETY: `state` is valid during the call.
        check(unsafe { sys::ampx_optimizer_load_state(self.as_raw(), state.as_ptr().cast(), state.len()) })
    }

    /// Clips the gradients by their total norm (`norm_type` 2.0, or
    /// `f64::INFINITY` for the max norm); returns the total norm as a
    /// one-element F32 tensor. Refused with `Status::Order` while the
    /// gradients are still scaled: call [`crate::Scaler::unscale`] first.
    pub fn clip_grad_norm(&self, max_norm: f64, norm_type: f64, error_if_nonfinite: bool) -> Result<Tensor> {
        let mut total = ptr::null_mut();
        // SAFETY: live handle, valid out pointer.
        check(unsafe {
            sys::ampx_clip_grad_norm(self.as_raw(), max_norm, norm_type, error_if_nonfinite.into(), &mut total)
        })?;
        // SAFETY: a new tensor owned by us.
        Ok(unsafe { Tensor::from_raw(total) })
    }

    /// Clamps every gradient element to `[-clip_value, clip_value]`;
    /// refused like [`Optimizer::clip_grad_norm`] while scaled.
    pub fn clip_grad_value(&self, clip_value: f64) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::ampx_clip_grad_value(self.as_raw(), clip_value) })
    }

    /// The parameters whose gradients (as the next step would use them)
    /// hold NaN or inf, in parameter order. Synchronizes.
    pub fn find_nonfinite_grads(&self) -> Result<Vec<NonfiniteGrad>> {
        let mut found = 0;
        // SAFETY: capacity 0 with NULL entries is allowed.
        check(unsafe { sys::ampx_find_nonfinite_grads(self.as_raw(), ptr::null_mut(), 0, &mut found) })?;
        if found == 0 {
            return Ok(Vec::new());
        }
        let empty = sys::ampx_nonfinite_grad { param: ptr::null_mut(), name: ptr::null(), nan_count: 0, inf_count: 0 };
        let mut entries = vec![empty; found];
        // SAFETY: `entries` has room for `found` entries.
        check(unsafe {
            sys::ampx_find_nonfinite_grads(self.as_raw(), entries.as_mut_ptr(), entries.len(), &mut found)
        })?;
        entries
            .iter()
            .take(found)
            .map(|e| {
                Ok(NonfiniteGrad {
                    // SAFETY: borrowed, live parameter; retained here.
                    param: unsafe { Tensor::from_borrowed(e.param) }?,
                    // SAFETY: borrowed NUL-terminated name, copied at once.
                    name: unsafe { CStr::from_ptr(e.name) }.to_string_lossy().into_owned(),
                    nan_count: e.nan_count,
                    inf_count: e.inf_count,
                })
            })
            .collect()
    }
}

/// Group indices beyond i32 are passed as -1, which the library refuses.
fn group_index(group: usize) -> i32 {
    i32::try_from(group).unwrap_or(-1)
}

owns_reference!(Optimizer, release: sys::ampx_optimizer_release);

impl std::fmt::Debug for Optimizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Optimizer").field("raw", &self.raw).finish()
    }
}
