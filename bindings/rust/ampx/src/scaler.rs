//! Dynamic loss scaling (`ampx_scaler`, after torch.amp.GradScaler).
use std::ptr::{self, NonNull};

use ampx_sys as sys;

use crate::context::Context;
use crate::error::{check, Result};
use crate::ops::run_op;
use crate::optim::Optimizer;
use crate::tensor::Tensor;

/// Scaler options (`ampx_scaler_options`); `Default` is the library's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScalerOptions {
    /// The first scale (default 65536).
    pub init_scale: f64,
    /// Growth factor (default 2).
    pub growth_factor: f64,
    /// Backoff factor (default 0.5).
    pub backoff_factor: f64,
    /// Clean updates between growths (default 2000).
    pub growth_interval: i32,
    /// A disabled scaler is a pass-through (default enabled).
    pub enabled: bool,
    /// Back off from the Nth overflow since the allowance was last
    /// restored, at a completed growth interval (default 1).
    pub hysteresis: i32,
    /// Lower bound of backoff (0: none).
    pub min_scale: f64,
    /// Upper bound of growth (0: none); a growth above it is not taken.
    pub max_scale: f64,
    /// Every clean update restores the allowance (default false).
    pub consecutive_hysteresis: bool,
    /// A growth above `max_scale` sets the scale to it (default false).
    pub clamp_to_max_scale: bool,
}

mirror_options!(ScalerOptions, sys::ampx_scaler_options, sys::ampx_scaler_options_default,
                numbers: [init_scale, growth_factor, backoff_factor, growth_interval, hysteresis, min_scale,
                          max_scale],
                flags: [enabled, consecutive_hysteresis, clamp_to_max_scale]);

/// Scaler counters (`ampx_scaler_counters`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScalerCounters {
    /// Update calls.
    pub updates: i64,
    /// Updates whose iteration had inf/NaN gradients.
    pub skipped: i64,
    /// Times the scale was lowered.
    pub backoffs: i64,
    /// Times the scale was raised.
    pub growths: i64,
}

impl ScalerCounters {
    fn from_raw(c: &sys::ampx_scaler_counters) -> Self {
        ScalerCounters { updates: c.updates, skipped: c.skipped, backoffs: c.backoffs, growths: c.growths }
    }

    fn to_raw(self) -> sys::ampx_scaler_counters {
        sys::ampx_scaler_counters {
            struct_size: std::mem::size_of::<sys::ampx_scaler_counters>(),
            updates: self.updates,
            skipped: self.skipped,
            backoffs: self.backoffs,
            growths: self.growths,
        }
    }
}

/// The scaler's persistent state (`ampx_scaler_state`: torch's
/// `GradScaler.state_dict()` plus ampx's extras).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ScalerState {
    /// The scale.
    pub scale: f64,
    /// Growth factor.
    pub growth_factor: f64,
    /// Backoff factor.
    pub backoff_factor: f64,
    /// Growth interval.
    pub growth_interval: i32,
    /// Clean updates since the last growth or backoff.
    pub growth_tracker: i32,
    /// Hysteresis.
    pub hysteresis: i32,
    /// Overflows still allowed before a backoff.
    pub hysteresis_left: i32,
    /// Minimum scale (0: none).
    pub min_scale: f64,
    /// Maximum scale (0: none).
    pub max_scale: f64,
    /// The counters.
    pub counters: ScalerCounters,
    /// See [`ScalerOptions::consecutive_hysteresis`].
    pub consecutive_hysteresis: bool,
    /// See [`ScalerOptions::clamp_to_max_scale`].
    pub clamp_to_max_scale: bool,
}

/// A dynamic loss scaler. The loop: `loss.backward(Some(&scaler))` (or
/// [`Scaler::scale_loss`]), optionally [`Scaler::unscale`] then clipping,
/// [`Scaler::step`], [`Scaler::update`]. Calls out of order fail with
/// `Status::Order` and a message saying what to call instead.
///
/// `Drop` releases it (optimizers attached to it keep it alive); no `Clone`.
/// Not `Send`/`Sync`: see the crate documentation on threads.
pub struct Scaler {
    raw: NonNull<sys::ampx_scaler_s>,
}

impl Scaler {
    /// A scaler on `ctx`.
    pub fn new(ctx: &Context, options: &ScalerOptions) -> Result<Scaler> {
        let o = options.to_raw();
        let mut out = ptr::null_mut();
        // SAFETY: live context, valid pointers.
        check(unsafe { sys::ampx_scaler_create(ctx.as_raw(), &o, &mut out) })?;
        Ok(Scaler { raw: NonNull::new(out).expect("ampx returned a NULL scaler") })
    }

    /// The handle, borrowed: valid while `self` lives.
    pub fn as_raw(&self) -> sys::ampx_scaler {
        self.raw.as_ptr()
    }

    /// Attaches `optimizer` before its first use, so misuse in the first
    /// iteration is detected too.
    pub fn attach(&self, optimizer: &Optimizer) -> Result<()> {
        // SAFETY: live handles.
        check(unsafe { sys::ampx_scaler_attach(self.as_raw(), optimizer.as_raw()) })
    }

    /// A new F32 tensor holding `loss * scale`; recorded when `loss`
    /// requires grad, so [`crate::grad`] can differentiate it.
    pub fn scale_loss(&self, loss: &Tensor) -> Result<Tensor> {
        let mut out = ptr::null_mut();
        // SAFETY: live handles, valid out pointer.
        check(unsafe { sys::ampx_scaler_scale_loss(self.as_raw(), loss.as_raw(), &mut out) })?;
        // SAFETY: a new tensor owned by us.
        Ok(unsafe { Tensor::from_raw(out) })
    }

    /// The one-element F32 device tensor holding the current scale (treat it
    /// as read-only).
    pub fn scale_tensor(&self) -> Result<Tensor> {
        let mut out = ptr::null_mut();
        // SAFETY: live handle, valid out pointer.
        check(unsafe { sys::ampx_scaler_scale_tensor(self.as_raw(), &mut out) })?;
        // SAFETY: a new reference owned by us.
        Ok(unsafe { Tensor::from_raw(out) })
    }

    /// The current scale (1 when disabled). Synchronizes.
    pub fn scale(&self) -> Result<f64> {
        let mut scale = 0.0;
        // SAFETY: live handle, valid out pointer.
        check(unsafe { sys::ampx_scaler_get_scale(self.as_raw(), &mut scale) })?;
        Ok(scale)
    }

    /// `x * (1 / scale)` with the current scale, taken on the device (no
    /// host read; `ampx_scaler_unscale_tensor`): a new tensor of x's shape
    /// and dtype. Recorded -- its gradient is the incoming one times the
    /// same 1/scale -- so gradients of [`Scaler::scale_loss`]'s output taken
    /// with [`crate::grad`] and `create_graph` can be unscaled and
    /// differentiated (the gradient-penalty recipe of ampx.h section 9). A
    /// disabled scaler gives a copy of x.
    pub fn unscale_tensor(&self, x: &Tensor) -> Result<Tensor> {
        // SAFETY: live handles, valid out pointer.
        run_op(x, |out| unsafe { sys::ampx_scaler_unscale_tensor(self.as_raw(), x.as_raw(), out) })
    }

    /// Divides `optimizer`'s gradients by the scale (needed before clipping).
    pub fn unscale(&self, optimizer: &Optimizer) -> Result<()> {
        // SAFETY: live handles.
        check(unsafe { sys::ampx_scaler_unscale(self.as_raw(), optimizer.as_raw()) })
    }

    /// Unscales if needed, then steps unless an inf/NaN was found.
    pub fn step(&self, optimizer: &Optimizer) -> Result<()> {
        // SAFETY: live handles.
        check(unsafe { sys::ampx_scaler_step(self.as_raw(), optimizer.as_raw()) })
    }

    /// Ends the iteration: grows or backs off the scale.
    pub fn update(&self) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::ampx_scaler_update(self.as_raw()) })
    }

    /// Ends the iteration setting the scale to `new_scale`.
    pub fn update_to(&self, new_scale: f64) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::ampx_scaler_update_to(self.as_raw(), new_scale) })
    }

    /// Whether the last unscale of `optimizer` found an inf/NaN. Synchronizes.
    pub fn found_inf(&self, optimizer: &Optimizer) -> Result<bool> {
        let mut found = 0;
        // SAFETY: live handles, valid out pointer.
        check(unsafe { sys::ampx_scaler_found_inf(self.as_raw(), optimizer.as_raw(), &mut found) })?;
        Ok(found != 0)
    }

    /// The counters. Synchronizes.
    pub fn counters(&self) -> Result<ScalerCounters> {
        let mut c = ScalerCounters::default().to_raw();
        // SAFETY: live handle; struct_size set.
        check(unsafe { sys::ampx_scaler_get_counters(self.as_raw(), &mut c) })?;
        Ok(ScalerCounters::from_raw(&c))
    }

    /// The whole persistent state. Synchronizes.
    pub fn state(&self) -> Result<ScalerState> {
        let mut s = sys::ampx_scaler_state {
            struct_size: std::mem::size_of::<sys::ampx_scaler_state>(),
            counters: ScalerCounters::default().to_raw(),
            ..Default::default()
        };
        // SAFETY: live handle; struct_size set.
        check(unsafe { sys::ampx_scaler_get_state(self.as_raw(), &mut s) })?;
        Ok(ScalerState {
            scale: s.scale,
            growth_factor: s.growth_factor,
            backoff_factor: s.backoff_factor,
            growth_interval: s.growth_interval,
            growth_tracker: s.growth_tracker,
            hysteresis: s.hysteresis,
            hysteresis_left: s.hysteresis_left,
            min_scale: s.min_scale,
            max_scale: s.max_scale,
            counters: ScalerCounters::from_raw(&s.counters),
            consecutive_hysteresis: s.consecutive_hysteresis != 0,
            clamp_to_max_scale: s.clamp_to_max_scale != 0,
        })
    }

    /// Restores a state (only between iterations, else `Status::Order`).
    pub fn set_state(&self, state: &ScalerState) -> Result<()> {
        let s = sys::ampx_scaler_state {
            struct_size: std::mem::size_of::<sys::ampx_scaler_state>(),
            scale: state.scale,
            growth_factor: state.growth_factor,
            backoff_factor: state.backoff_factor,
            growth_interval: state.growth_interval,
            growth_tracker: state.growth_tracker,
            hysteresis: state.hysteresis,
            hysteresis_left: state.hysteresis_left,
            min_scale: state.min_scale,
            max_scale: state.max_scale,
            counters: state.counters.to_raw(),
            consecutive_hysteresis: state.consecutive_hysteresis.into(),
            clamp_to_max_scale: state.clamp_to_max_scale.into(),
        };
        // SAFETY: live handle, valid struct.
        check(unsafe { sys::ampx_scaler_set_state(self.as_raw(), &s) })
    }
}

owns_reference!(Scaler, release: sys::ampx_scaler_release);

impl std::fmt::Debug for Scaler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scaler").field("raw", &self.raw).finish()
    }
}
