//! FP8 training (section 18 of ampx.h, EXPERIMENTAL): scaling recipes after
//! Transformer Engine, quantization with a recipe's scales, and what the
//! precision doctor sees of a tensor in FP8.
//!
//! An [`Fp8Recipe`] keeps, per slot (a tensor it scales), a scale, its
//! inverse, the step's amax and an amax history, in device memory. Give it
//! to an autocast policy ([`crate::Autocast::set_fp8`]) and linear/matmul
//! run in FP8; call [`Fp8Recipe::update`] once per step after backward.
//! Engines with their own GEMMs use [`Fp8Recipe::add_tensor`],
//! [`Fp8Recipe::quantize`] and [`Fp8Recipe::scale_tensor`].
use std::ffi::{CStr, CString};
use std::fmt;
use std::ptr::{self, NonNull};

use ampx_sys as sys;

use crate::context::Context;
use crate::dtype::DType;
use crate::error::{check, Error, Result, Status};
use crate::tensor::Tensor;

/// The default of [`crate::Autocast::set_fp8`]'s `min_gemm_size`: 2^33
/// (`AMPX_FP8_DEFAULT_MIN_GEMM_SIZE`).
pub const FP8_DEFAULT_MIN_GEMM_SIZE: i64 = 1 << 33;

macro_rules! raw_enum {
    ($(#[$doc:meta])* $name:ident, $raw:ty, $what:literal, { $($(#[$vdoc:meta])* $variant:ident = $value:path),* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)*
        }

        impl $name {
            /// The C value.
            pub fn to_raw(self) -> $raw {
                match self {
                    $($name::$variant => $value,)*
                }
            }

            /// The value for a C value (`Status::Internal` when it is not one).
            pub fn from_raw(raw: $raw) -> Result<$name> {
                $(if raw == $value {
                    return Ok($name::$variant);
                })*
                Err(Error::new(Status::Internal, format!(concat!("unknown ", $what, " {}"), raw)))
            }
        }
    };
}

raw_enum!(
    /// What a conversion into FP8 does beyond the format's max (`ampx_fp8_overflow`).
    Fp8Overflow, sys::ampx_fp8_overflow, "overflow rule", {
    /// +-max (Transformer Engine's casts, torch's float8_e4m3fn cast).
    Saturate = sys::AMPX_FP8_SATURATE,
    /// NaN in E4M3, +-inf in E5M2 (torch's float8_e5m2 cast).
    NoSaturate = sys::AMPX_FP8_NO_SATURATE
});

raw_enum!(
    /// How a recipe scales (`ampx_fp8_scaling`).
    Fp8Scaling, sys::ampx_fp8_scaling, "scaling", {
    /// From the amax history of past steps (TE's DelayedScaling).
    Delayed = sys::AMPX_FP8_DELAYED,
    /// From the tensor's own amax (TE's Float8CurrentScaling).
    Current = sys::AMPX_FP8_CURRENT
});

raw_enum!(
    /// Which FP8 type each role gets (`ampx_fp8_format`).
    Fp8Format, sys::ampx_fp8_format, "format", {
    /// E4M3 forward, E5M2 for gradients.
    Hybrid = sys::AMPX_FP8_HYBRID,
    /// E4M3 everywhere.
    E4M3 = sys::AMPX_FP8_E4M3
});

raw_enum!(
    /// Which amax a delayed update scales by (`ampx_fp8_amax_algo`).
    AmaxAlgo, sys::ampx_fp8_amax_algo, "amax algorithm", {
    /// The maximum over the history.
    Max = sys::AMPX_FP8_AMAX_MAX,
    /// The step's own amax.
    MostRecent = sys::AMPX_FP8_AMAX_MOST_RECENT
});

raw_enum!(
    /// What a slot holds, which decides its format (`ampx_fp8_role`).
    Fp8Role, sys::ampx_fp8_role, "role", {
    /// An activation or a weight.
    Forward = sys::AMPX_FP8_FORWARD,
    /// A gradient.
    Backward = sys::AMPX_FP8_BACKWARD
});

/// Options of [`Fp8Recipe::new`] (`ampx_fp8_recipe_options`); `Default` is
/// the library's (Transformer Engine's defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fp8RecipeOptions {
    /// Default [`Fp8Scaling::Delayed`].
    pub scaling: Fp8Scaling,
    /// Default [`Fp8Format::Hybrid`].
    pub format: Fp8Format,
    /// Default 1024; at least 1.
    pub amax_history_len: i32,
    /// Default [`AmaxAlgo::Max`].
    pub amax_compute_algo: AmaxAlgo,
    /// Default 0; 0 ..= 127: scale = fp8_max / amax / 2^margin.
    pub margin: i32,
    /// Default false; current scaling only: scales rounded down to powers of two.
    pub power_of_two_scales: bool,
}

impl Default for Fp8RecipeOptions {
    fn default() -> Self {
        // SAFETY: thread-safe, no arguments.
        let o = unsafe { sys::ampx_fp8_recipe_options_default() };
        Fp8RecipeOptions {
            scaling: Fp8Scaling::from_raw(o.scaling).unwrap_or(Fp8Scaling::Delayed),
            format: Fp8Format::from_raw(o.format).unwrap_or(Fp8Format::Hybrid),
            amax_history_len: o.amax_history_len,
            amax_compute_algo: AmaxAlgo::from_raw(o.amax_compute_algo).unwrap_or(AmaxAlgo::Max),
            margin: o.margin,
            power_of_two_scales: o.power_of_two_scales != 0,
        }
    }
}

impl Fp8RecipeOptions {
    fn to_raw(self) -> sys::ampx_fp8_recipe_options {
        // SAFETY: thread-safe, no arguments.
        let mut o = unsafe { sys::ampx_fp8_recipe_options_default() };
        o.scaling = self.scaling.to_raw();
        o.format = self.format.to_raw();
        o.amax_history_len = self.amax_history_len;
        o.amax_compute_algo = self.amax_compute_algo.to_raw();
        o.margin = self.margin;
        o.power_of_two_scales = self.power_of_two_scales.into();
        o
    }
}

/// A recipe slot and its amax history (`ampx_fp8_slot_info`).
#[derive(Clone, Debug, PartialEq)]
pub struct Fp8SlotInfo {
    /// The slot's name ("" for none).
    pub name: String,
    /// Its role.
    pub role: Fp8Role,
    /// Its format, [`DType::F8E4M3`] or [`DType::F8E5M2`].
    pub dtype: DType,
    /// The scale quantization multiplies by.
    pub scale: f32,
    /// 1 / scale.
    pub scale_inv: f32,
    /// This step's amax, not yet in the history.
    pub amax: f32,
    /// The recipe's history length.
    pub history_len: i32,
    /// The amax history, oldest first (entries never filled are 0).
    pub history: Vec<f32>,
}

/// What FP8 at a slot's scale would do to a tensor (`ampx_fp8_tensor_report`):
/// of its non-zero finite elements, the fractions flushed to zero or
/// saturated, in each format.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fp8TensorReport {
    /// Non-zero finite elements.
    pub count: i64,
    /// Fraction of them that round to 0 in E4M3.
    pub flushed_e4m3: f64,
    /// Fraction beyond 448.
    pub saturated_e4m3: f64,
    /// Fraction that round to 0 in E5M2.
    pub flushed_e5m2: f64,
    /// Fraction beyond 57344.
    pub saturated_e5m2: f64,
    /// The slot's scale the fractions are for.
    pub scale: f32,
    /// The slot's own format.
    pub dtype: DType,
}

/// An autocast policy's FP8 counts (`ampx_fp8_stats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fp8Stats {
    /// linear/matmul calls run in FP8.
    pub fp8_products: i64,
    /// Those run in the policy's dtype instead.
    pub fallbacks: i64,
    /// Why the last fallback happened ("" for none).
    pub last_fallback: String,
}

fn dtype_of(raw: sys::ampx_dtype) -> Result<DType> {
    DType::from_raw(raw).ok_or_else(|| Error::new(Status::Internal, format!("unknown dtype {raw}")))
}

/// # Safety
/// `text` is NULL or a NUL-terminated string valid for the call.
unsafe fn owned_text(text: *const std::os::raw::c_char) -> String {
    if text.is_null() {
        String::new()
    } else {
        CStr::from_ptr(text).to_string_lossy().into_owned()
    }
}

/// An FP8 scaling recipe (`ampx_fp8_recipe`; Transformer Engine's
/// DelayedScaling or Float8CurrentScaling). `Drop` releases this value's
/// reference; autocast policies and data-parallel wrappers given the
/// recipe keep their own. No `Clone` (the C API has no retain).
///
/// Not `Send`/`Sync`: see the crate documentation on threads.
pub struct Fp8Recipe {
    raw: NonNull<sys::ampx_fp8_recipe_s>,
    history_len: i32,
}

impl Fp8Recipe {
    /// A recipe on `ctx` with no slots. A bad option (history length < 1,
    /// margin outside 0 ..= 127) is `Status::InvalidArgument` naming it.
    pub fn new(ctx: &Context, options: &Fp8RecipeOptions) -> Result<Fp8Recipe> {
        let o = options.to_raw();
        let mut out = ptr::null_mut();
        // SAFETY: live context, valid pointers.
        check(unsafe { sys::ampx_fp8_recipe_create(ctx.as_raw(), &o, &mut out) })?;
        Ok(Fp8Recipe {
            raw: NonNull::new(out).expect("ampx returned a NULL FP8 recipe"),
            history_len: o.amax_history_len,
        })
    }

    /// The handle, borrowed: valid while `self` lives.
    pub fn as_raw(&self) -> sys::ampx_fp8_recipe {
        self.raw.as_ptr()
    }

    /// The length of every slot's amax history.
    pub fn amax_history_len(&self) -> i32 {
        self.history_len
    }

    /// Adds a slot of `role` (scale 1, amax 0, empty history) named `name`
    /// (unique in the recipe), returning its index.
    pub fn add_tensor(&self, role: Fp8Role, name: Option<&str>) -> Result<i64> {
        let name = name
            .map(|n| CString::new(n).map_err(|_| Error::new(Status::InvalidArgument, "a slot name with a NUL byte")))
            .transpose()?;
        let mut slot = 0;
        // SAFETY: live handle; the name is read during the call.
        check(unsafe {
            sys::ampx_fp8_recipe_add_tensor(self.as_raw(), role.to_raw(), name.as_ref().map_or(ptr::null(), |n| n.as_ptr()), &mut slot)
        })?;
        Ok(slot)
    }

    /// The number of slots (autocast's included).
    pub fn slot_count(&self) -> Result<i64> {
        let mut count = 0;
        // SAFETY: live handle, valid pointer.
        check(unsafe { sys::ampx_fp8_recipe_slot_count(self.as_raw(), &mut count) })?;
        Ok(count)
    }

    /// Quantizes `src` (F32, F16 or BF16) with slot `slot`'s scale into
    /// `dst` and/or `dst_transposed` (src read as [rows, cols], written
    /// [cols, rows]), saturating, and folds src's amax into the slot's step
    /// amax (`ampx_fp8_quantize`). Outputs are of the slot's format.
    pub fn quantize(&self, slot: i64, src: &Tensor, dst: Option<&Tensor>, dst_transposed: Option<&Tensor>) -> Result<()> {
        let dst = dst.map_or(ptr::null_mut(), Tensor::as_raw);
        let dst_t = dst_transposed.map_or(ptr::null_mut(), Tensor::as_raw);
        // SAFETY: live handles (or NULL), borrowed for the call.
        check(unsafe { sys::ampx_fp8_quantize(self.as_raw(), slot, src.as_raw(), dst, dst_t) })
    }

    /// [`Fp8Recipe::quantize`] into a new tensor of the slot's format and
    /// src's shape (reading the format synchronizes).
    pub fn quantized(&self, slot: i64, src: &Tensor) -> Result<Tensor> {
        let dtype = self.slot_info(slot, false)?.dtype;
        let dst = Tensor::empty(&src.context()?, dtype, &src.shape()?)?;
        self.quantize(slot, src, Some(&dst), None)?;
        Ok(dst)
    }

    /// Ends the step for every slot: amaxes join the histories and (delayed
    /// scaling) scales are recomputed (`ampx_fp8_recipe_update`).
    pub fn update(&self) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::ampx_fp8_recipe_update(self.as_raw()) })
    }

    /// Slot `slot`'s scale (or inverse) as a one-element F32 view of the
    /// recipe's device memory: it follows every update.
    pub fn scale_tensor(&self, slot: i64, inverse: bool) -> Result<Tensor> {
        let mut out = ptr::null_mut();
        // SAFETY: live handle, valid pointer.
        check(unsafe { sys::ampx_fp8_recipe_scale_tensor(self.as_raw(), slot, inverse.into(), &mut out) })?;
        // SAFETY: the call returned one reference owned by the caller.
        Ok(unsafe { Tensor::from_raw(out) })
    }

    fn slot_info(&self, slot: i64, with_history: bool) -> Result<Fp8SlotInfo> {
        let mut info = sys::AMPX_FP8_SLOT_INFO_INIT;
        let mut history = vec![0f32; if with_history { self.history_len as usize } else { 0 }];
        let (pointer, capacity) = if with_history { (history.as_mut_ptr(), self.history_len) } else { (ptr::null_mut(), 0) };
        // SAFETY: live handle; `history` holds `capacity` floats.
        check(unsafe { sys::ampx_fp8_recipe_slot_get(self.as_raw(), slot, &mut info, pointer, capacity) })?;
        Ok(Fp8SlotInfo {
            // SAFETY: owned by the recipe, valid while it lives; copied now.
            name: unsafe { owned_text(info.name) },
            role: Fp8Role::from_raw(info.role)?,
            dtype: dtype_of(info.dtype)?,
            scale: info.scale,
            scale_inv: info.scale_inv,
            amax: info.amax,
            history_len: info.history_len,
            history,
        })
    }

    /// Slot `slot`'s state and amax history (`ampx_fp8_recipe_slot_get`).
    /// Synchronizes.
    pub fn slot(&self, slot: i64) -> Result<Fp8SlotInfo> {
        self.slot_info(slot, true)
    }

    /// What FP8 at slot `slot`'s current scale would do to `tensor` (the
    /// precision doctor's `ampx_doctor_fp8_inspect`). Synchronizes.
    pub fn inspect(&self, slot: i64, tensor: &Tensor) -> Result<Fp8TensorReport> {
        let mut r = sys::AMPX_FP8_TENSOR_REPORT_INIT;
        // SAFETY: live handles, valid pointer.
        check(unsafe { sys::ampx_doctor_fp8_inspect(self.as_raw(), slot, tensor.as_raw(), &mut r) })?;
        Ok(Fp8TensorReport {
            count: r.count,
            flushed_e4m3: r.flushed_e4m3,
            saturated_e4m3: r.saturated_e4m3,
            flushed_e5m2: r.flushed_e5m2,
            saturated_e5m2: r.saturated_e5m2,
            scale: r.scale,
            dtype: dtype_of(r.dtype)?,
        })
    }

    /// A table of the slots (`ampx_doctor_fp8_summary`). Synchronizes.
    pub fn summary(&self) -> Result<String> {
        let mut text = ptr::null();
        // SAFETY: live handle; the text is copied before the next call.
        check(unsafe { sys::ampx_doctor_fp8_summary(self.as_raw(), &mut text) })?;
        // SAFETY: valid until the recipe's next summary; copied now.
        Ok(unsafe { owned_text(text) })
    }
}

owns_reference!(Fp8Recipe, release: sys::ampx_fp8_recipe_release);

impl fmt::Debug for Fp8Recipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fp8Recipe").field("raw", &self.raw).field("amax_history_len", &self.history_len).finish()
    }
}

pub(crate) fn stats_of(autocast: sys::ampx_autocast) -> Result<Fp8Stats> {
    let mut s = sys::AMPX_FP8_STATS_INIT;
    // SAFETY: live handle, valid pointer.
    check(unsafe { sys::ampx_autocast_fp8_stats(autocast, &mut s) })?;
    Ok(Fp8Stats {
        fp8_products: s.fp8_products,
        fallbacks: s.fallbacks,
        // SAFETY: valid until the policy's next op; copied now.
        last_fallback: unsafe { owned_text(s.last_fallback) },
    })
}
