//! Autocast policies (`ampx_autocast`, after torch.autocast).
use std::ffi::CString;
use std::ptr::{self, NonNull};

use ampx_sys as sys;

use crate::context::Context;
use crate::dtype::DType;
use crate::error::{check, Error, Result, Status};
use crate::fp8::{Fp8Recipe, Fp8Stats};

/// Precision classes of ops under autocast (`ampx_op_class`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpClass {
    /// Cast floating inputs to the autocast dtype.
    LowerPrecision,
    /// Cast inputs to F32.
    Fp32,
    /// Compute in the widest input type.
    Promote,
    /// No cast.
    Keep,
}

impl OpClass {
    fn to_raw(self) -> sys::ampx_op_class {
        match self {
            OpClass::LowerPrecision => sys::AMPX_OP_LOWER_PRECISION,
            OpClass::Fp32 => sys::AMPX_OP_FP32,
            OpClass::Promote => sys::AMPX_OP_PROMOTE,
            OpClass::Keep => sys::AMPX_OP_KEEP,
        }
    }

    fn from_raw(raw: sys::ampx_op_class) -> Result<OpClass> {
        Ok(match raw {
            sys::AMPX_OP_LOWER_PRECISION => OpClass::LowerPrecision,
            sys::AMPX_OP_FP32 => OpClass::Fp32,
            sys::AMPX_OP_PROMOTE => OpClass::Promote,
            sys::AMPX_OP_KEEP => OpClass::Keep,
            other => return Err(Error::new(Status::Internal, format!("unknown op class {other}"))),
        })
    }
}

/// Autocast options (`ampx_autocast_options`); `Default` is the library's
/// (F16, enabled, cache on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutocastOptions {
    /// `DType::F16` or `DType::BF16`.
    pub dtype: DType,
    /// A disabled policy changes nothing.
    pub enabled: bool,
    /// Cache casts of F32 leaves for the outermost region.
    pub cache: bool,
}

impl Default for AutocastOptions {
    fn default() -> Self {
        // SAFETY: thread-safe, no arguments.
        let o = unsafe { sys::ampx_autocast_options_default() };
        AutocastOptions { dtype: DType::from_raw(o.dtype).unwrap_or(DType::F16), enabled: o.enabled != 0, cache: o.cache != 0 }
    }
}

impl AutocastOptions {
    /// The defaults with another dtype.
    pub fn with_dtype(dtype: DType) -> Self {
        AutocastOptions { dtype, ..Default::default() }
    }
}

/// An autocast policy. [`Autocast::enter`] returns a guard; ops follow the
/// policy until the guard is dropped. `Drop` releases the policy (the
/// guard's borrow guarantees it is not entered then). No `Clone`.
///
/// Not `Send`/`Sync`: see the crate documentation on threads.
pub struct Autocast {
    raw: NonNull<sys::ampx_autocast_s>,
}

fn op_name(name: &str) -> Result<CString> {
    CString::new(name).map_err(|_| Error::new(Status::InvalidArgument, "an op name with a NUL byte"))
}

impl Autocast {
    /// A policy for `ctx`.
    pub fn new(ctx: &Context, options: &AutocastOptions) -> Result<Autocast> {
        // SAFETY: thread-safe, no arguments.
        let mut o = unsafe { sys::ampx_autocast_options_default() };
        o.dtype = options.dtype.to_raw();
        o.enabled = options.enabled.into();
        o.cache = options.cache.into();
        let mut out = ptr::null_mut();
        // SAFETY: live context, valid pointers.
        check(unsafe { sys::ampx_autocast_create(ctx.as_raw(), &o, &mut out) })?;
        Ok(Autocast { raw: NonNull::new(out).expect("ampx returned a NULL autocast policy") })
    }

    /// The handle, borrowed: valid while `self` lives.
    pub fn as_raw(&self) -> sys::ampx_autocast {
        self.raw.as_ptr()
    }

    /// Enters the policy on its context until the guard is dropped. Regions
    /// nest like a stack: drop guards in reverse order (the natural order of
    /// locals), or use [`Autocast::run`].
    pub fn enter(&self) -> Result<AutocastGuard<'_>> {
        // SAFETY: live handle.
        check(unsafe { sys::ampx_autocast_enter(self.as_raw()) })?;
        Ok(AutocastGuard { autocast: self, active: true })
    }

    /// Runs `f` inside a region of this policy.
    pub fn run<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let mut guard = self.enter()?;
        let value = f();
        let exited = guard.exit();
        let value = value?;
        exited?;
        Ok(value)
    }

    /// Overrides the class of the op named `op` (e.g. "softmax").
    pub fn set_op_class(&self, op: &str, class: OpClass) -> Result<()> {
        let name = op_name(op)?;
        // SAFETY: live handle; the name is read during the call.
        check(unsafe { sys::ampx_autocast_set_op_class(self.as_raw(), name.as_ptr(), class.to_raw()) })
    }

    /// The class `op` gets under this policy.
    pub fn op_class(&self, op: &str) -> Result<OpClass> {
        let name = op_name(op)?;
        let mut class = 0;
        // SAFETY: live handle, valid pointers.
        check(unsafe { sys::ampx_autocast_op_class(self.as_raw(), name.as_ptr(), &mut class) })?;
        OpClass::from_raw(class)
    }

    /// (hits, misses) of the cast cache since the policy was created.
    pub fn cache_stats(&self) -> Result<(i64, i64)> {
        let (mut hits, mut misses) = (0, 0);
        // SAFETY: live handle, valid pointers.
        check(unsafe { sys::ampx_autocast_cache_stats(self.as_raw(), &mut hits, &mut misses) })?;
        Ok((hits, misses))
    }

    /// Makes this an FP8 policy with `recipe` (the policy keeps its own
    /// reference), or a plain one again with `None` (`ampx_autocast_set_fp8`).
    /// Products with m * n * k below `min_gemm_size`
    /// ([`crate::FP8_DEFAULT_MIN_GEMM_SIZE`] is a start) stay in the
    /// policy's dtype. `Status::NotSupported` on a device without FP8
    /// products; the policy is unchanged on error.
    pub fn set_fp8(&self, recipe: Option<&Fp8Recipe>, min_gemm_size: i64) -> Result<()> {
        let recipe = recipe.map_or(ptr::null_mut(), Fp8Recipe::as_raw);
        // SAFETY: live handles (or NULL).
        check(unsafe { sys::ampx_autocast_set_fp8(self.as_raw(), recipe, min_gemm_size) })
    }

    /// Products run in FP8, fallbacks and the last fallback's reason
    /// (`ampx_autocast_fp8_stats`).
    pub fn fp8_stats(&self) -> Result<Fp8Stats> {
        crate::fp8::stats_of(self.as_raw())
    }
}

owns_reference!(Autocast, release: sys::ampx_autocast_release);

impl std::fmt::Debug for Autocast {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Autocast").field("raw", &self.raw).finish()
    }
}

/// An entered autocast region; dropping it exits (`ampx_autocast_exit`).
#[must_use = "the region is exited as soon as the guard is dropped"]
pub struct AutocastGuard<'a> {
    autocast: &'a Autocast,
    active: bool,
}

impl AutocastGuard<'_> {
    /// Exits now, reporting an error; dropping exits too but ignores errors.
    /// Fails with `Status::Order` when this policy's region is not the
    /// innermost one: the region then stays entered and the guard active,
    /// so exit the inner regions first and call this again.
    pub fn exit(&mut self) -> Result<()> {
        if !self.active {
            return Ok(());
        }
        // SAFETY: live handle.
        check(unsafe { sys::ampx_autocast_exit(self.autocast.as_raw()) })?;
        self.active = false;
        Ok(())
    }

    /// Whether the region is still entered through this guard.
    pub fn is_active(&self) -> bool {
        self.active
    }
}

impl Drop for AutocastGuard<'_> {
    fn drop(&mut self) {
        let _ = self.exit();
    }
}
