//! Safe Rust binding of **ampx**, an embeddable mixed-precision training
//! library: what `torch.amp` gives PyTorch -- autocast, dynamic loss scaling
//! (GradScaler), SGD/Adam/AdamW with fp32 master weights, clipping after
//! unscaling -- over ampx's C ABI (`include/ampx/ampx.h`, whose comments are
//! the reference for every call; the raw declarations are in `ampx-sys`).
//!
//! ```no_run
//! use ampx::{Activation, Autocast, AutocastOptions, Context, DType, Optimizer, Reduction,
//!            Scaler, ScalerOptions, Tensor};
//! # fn main() -> ampx::Result<()> {
//! let ctx = Context::new()?;
//! let x = Tensor::from_slice(&ctx, &[4, 2], &[0.5f32; 8])?;
//! let y = Tensor::from_slice(&ctx, &[4, 1], &[1.0f32; 4])?;
//! let w = Tensor::from_slice(&ctx, &[1, 2], &[0.1f32, -0.2])?;
//! w.set_requires_grad(true)?;
//! let opt = Optimizer::adamw(&ctx, &[&w], 1e-2)?;
//! let scaler = Scaler::new(&ctx, &ScalerOptions::default())?;
//! let autocast = Autocast::new(&ctx, &AutocastOptions::with_dtype(DType::BF16))?;
//! for _ in 0..10 {
//!     let loss = autocast.run(|| {
//!         x.linear(&w, None, Activation::None)?.mse_loss(&y, Reduction::Mean)
//!     })?;
//!     loss.backward(Some(&scaler))?;
//!     scaler.unscale(&opt)?;
//!     opt.clip_grad_norm(1.0, 2.0, false)?;
//!     scaler.step(&opt)?;
//!     scaler.update()?;
//!     opt.zero_grad()?;
//! }
//! # Ok(()) }
//! ```
//!
//! # Errors
//!
//! Every fallible call returns [`Result`]; an [`Error`] carries the C
//! status ([`Status`]) and the library's message (`ampx_last_error()`),
//! which names the function, the argument and the shapes involved.
//!
//! # Ownership
//!
//! [`Context`] and [`Tensor`] are reference counted by the library: `Clone`
//! retains, `Drop` releases. Each `Tensor` value owns its own reference --
//! op outputs included, whatever scopes are open -- so a stale handle cannot
//! be made without `unsafe`. Tensors, optimizers, scalers and autocast
//! policies keep their context alive, so values may be dropped in any
//! order. [`Optimizer`], [`Scaler`] and [`Autocast`] have no retain in the C
//! API and so no `Clone`; wrap them in `Rc` to share. Region-like state is
//! held by guards: [`AutocastGuard`], [`Scope`], [`GradModeGuard`].
//!
//! Misuse that C can only detect at run time (if at all) does not compile:
//!
//! ```compile_fail
//! # use ampx::{Context, DType, Tensor};
//! let ctx = Context::new().unwrap();
//! let t = Tensor::zeros(&ctx, DType::F32, &[2]).unwrap();
//! drop(t); // releases the reference
//! t.numel().unwrap(); // error[E0382]: use of moved value: no stale handle
//! ```
//!
//! ```compile_fail
//! # use ampx::{Autocast, Context};
//! let ctx = Context::new().unwrap();
//! let autocast = Autocast::new(&ctx, &Default::default()).unwrap();
//! let region = autocast.enter().unwrap();
//! drop(autocast); // error[E0505]: a policy cannot be released while entered
//! drop(region);
//! ```
//!
//! The same holds for the handles of the experimental sections: a
//! [`Doctor`], a [`SafetensorsFile`], a [`Communicator`] or a
//! [`DataParallel`] is released by `Drop`, once, and cannot be used after:
//!
//! ```compile_fail
//! # use ampx::{Context, Doctor, Optimizer, SgdOptions, Tensor};
//! let ctx = Context::new().unwrap();
//! let w = Tensor::from_slice(&ctx, &[2], &[1.0f32, 2.0]).unwrap();
//! let opt = Optimizer::sgd(&ctx, &[&w], &SgdOptions::default()).unwrap();
//! let doctor = Doctor::new(&ctx, &opt, &Default::default()).unwrap();
//! drop(doctor); // detaches and releases it
//! doctor.examine().unwrap(); // error[E0382]: use of moved value
//! ```
//!
//! An [`Fp8Recipe`] likewise: a released recipe cannot be used.
//!
//! ```compile_fail
//! # use ampx::{Context, Fp8Recipe};
//! let ctx = Context::new().unwrap();
//! let recipe = Fp8Recipe::new(&ctx, &Default::default()).unwrap();
//! drop(recipe); // releases this reference (autocast policies keep theirs)
//! recipe.update().unwrap(); // error[E0382]: use of moved value
//! ```
//!
//! # Higher-order gradients
//!
//! [`grad`] is torch.autograd.grad: gradients of outputs with respect to
//! inputs, returned (not accumulated), `None` for an unused input with
//! [`GradOptions::allow_unused`]; with [`GradOptions::create_graph`] they
//! are recorded and can be differentiated again (eikonal and
//! gradient-penalty losses, Hessian-vector products).
//! [`Tensor::backward_with`] adds torch's `retain_graph` and `create_graph`
//! to backward, and [`Scaler::unscale_tensor`] unscales the gradients of a
//! scaled loss on the device (the gradient-penalty recipe of ampx.h,
//! section 9).
//!
//! ```no_run
//! # fn main() -> ampx::Result<()> {
//! use ampx::{grad, Context, GradOptions, Tensor};
//! let ctx = Context::new()?;
//! let x = Tensor::from_slice(&ctx, &[3], &[0.5f32, 1.0, 2.0])?;
//! x.set_requires_grad(true)?;
//! let y = x.mul(&x)?.mul(&x)?.sum()?; // sum of x^3
//! let g = grad(&[&y], &[&x], None, &GradOptions::default().create_graph(true))?; // 3x^2
//! let g = g[0].as_ref().expect("x is used");
//! let h = grad(&[&g.sum()?], &[&x], None, &GradOptions::default())?; // 6x
//! # let _ = h; Ok(()) }
//! ```
//!
//! # Experimental sections
//!
//! - Data-parallel training ([`dist`]): a [`Communicator`] from the host's
//!   MPI communicator (`unsafe`: it takes the address of the `MPI_Comm`) or
//!   from NCCL, and a [`DataParallel`] wrapper of an optimizer that
//!   all-reduces the gradients during backward.
//! - The precision doctor ([`doctor`]): [`Doctor`] watches an optimizer and
//!   reports gradient histograms, fp16 underflow and overflow, the scale
//!   history and findings, and writes an HTML report.
//! - safetensors files: [`save_safetensors`], [`SafetensorsFile`].
//! - FP8 training ([`fp8`]): [`Fp8Recipe`] (delayed or current scaling
//!   after Transformer Engine), [`Autocast::set_fp8`] to run linear and
//!   matmul in FP8, [`Tensor::copy_fp8_from`], [`save_checkpoint_fp8`].
//!
//! # Threads: why nothing here is `Send` or `Sync`
//!
//! ampx's rule is: *a context and every object made from it may be used by
//! one thread at a time*; different contexts are independent. The unit of
//! exclusive use is therefore the whole family of a context, not a single
//! object: two tensors of one context share the context's tape, scopes,
//! allocator statistics and autocast stack, and using them from two
//! threads at once is a data race inside the library. If `Tensor` were
//! `Send`, safe code could move one tensor to another thread while keeping
//! its sibling here and race on that shared state; `Sync` would be worse.
//! Rust's type system cannot express "this value and everything made from
//! the same context move together", so every handle type is neither `Send`
//! nor `Sync` (they hold raw pointers, which the compiler treats so). Create
//! a context on the thread that uses it; several threads can each train
//! with their own context at the same time. (The library's release
//! functions may run on any thread, which matters for garbage-collected
//! languages; it does not make moving a single object sound.)
//!
//! ```compile_fail
//! fn needs_send<T: Send>(_: T) {}
//! needs_send(ampx::Context::new().unwrap()); // error: `NonNull<..>` cannot be sent
//! ```
#![warn(missing_docs)]

/// Implements `Default` (the library's defaults, from `$default`),
/// `from_raw` and `to_raw` for an options struct whose fields mirror those
/// of the C options struct `$raw`: numbers as they are, flags as `bool`
/// (`int32_t` 0 or 1 in C). `to_raw` starts from the library's defaults, so
/// `struct_size` and any field the struct leaves out keep theirs.
macro_rules! mirror_options {
    ($name:ident, $raw:ty, $default:path, numbers: [$($number:ident),*], flags: [$($flag:ident),*]) => {
        impl Default for $name {
            fn default() -> Self {
                // SAFETY: thread-safe, no arguments.
                $name::from_raw(unsafe { $default() })
            }
        }

        impl $name {
            fn from_raw(o: $raw) -> Self {
                $name { $($number: o.$number,)* $($flag: o.$flag != 0,)* }
            }

            fn to_raw(self) -> $raw {
                // SAFETY: thread-safe, no arguments.
                let mut o = unsafe { $default() };
                $(o.$number = self.$number;)*
                $(o.$flag = self.$flag.into();)*
                o
            }
        }
    };
}

/// For a type that owns one reference to a C object (its `as_raw()`):
/// `Drop` releases it with `$release`. With `retain` (for a type whose only
/// field is that `raw` handle), also `Clone`, adding a reference to the
/// same object with `$retain`, and equality by handle (the same object, not
/// equal contents).
macro_rules! owns_reference {
    ($name:ident, release: $release:path) => {
        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: the value owns one reference, released once here.
                unsafe { $release(self.as_raw()) }
            }
        }
    };
    ($name:ident, release: $release:path, retain: $retain:path) => {
        owns_reference!($name, release: $release);

        impl Clone for $name {
            fn clone(&self) -> Self {
                // SAFETY: the handle is live while `self` lives, so retain succeeds.
                let status = unsafe { $retain(self.as_raw()) };
                if let Err(e) = crate::error::check(status) {
                    panic!("ampx could not add a reference to a live {}: {e}", stringify!($name));
                }
                $name { raw: self.raw }
            }
        }

        impl PartialEq for $name {
            fn eq(&self, other: &Self) -> bool {
                self.raw == other.raw
            }
        }

        impl Eq for $name {}
    };
}

mod autocast;
mod autograd;
mod checkpoint;
mod checkpoint_file;
mod context;
pub mod dist;
pub mod doctor;
mod dtype;
mod error;
pub mod fp8;
mod hooks;
mod onnx;
mod ops;
mod optim;
mod safetensors;
mod scaler;
mod tensor;

pub use ampx_sys as sys;

pub use crate::autocast::{Autocast, AutocastGuard, AutocastOptions, OpClass};
pub use crate::autograd::{grad, BackwardOptions, GradOptions};
pub use crate::checkpoint_file::{load_checkpoint, load_checkpoint_fp8, save_checkpoint, save_checkpoint_fp8};
pub use crate::fp8::{
    AmaxAlgo, Fp8Format, Fp8Overflow, Fp8Recipe, Fp8RecipeOptions, Fp8Role, Fp8Scaling, Fp8SlotInfo, Fp8Stats, Fp8TensorReport,
    FP8_DEFAULT_MIN_GEMM_SIZE,
};
pub use crate::context::{Context, ContextOptions, GradModeGuard, MemoryStats, Scope};
pub use crate::dist::{Communicator, DataParallel, DataParallelOptions, DataParallelStats};
pub use crate::doctor::{Doctor, DoctorFinding, DoctorOptions, DoctorOverview, DoctorParamStats, DoctorSample};
pub use crate::dtype::{Bf16, DType, Device, Element, F16, F8E4M3, F8E5M2};
pub use crate::error::{Error, Result, Status};
pub use crate::onnx::{export_onnx, OnnxOptions};
pub use crate::ops::{concat, Activation, AttentionOptions, Conv2dOptions, Pool2dOptions, Reduction};
pub use crate::optim::{AdamOptions, LrDecay, LrSchedule, NonfiniteGrad, Optimizer, SgdOptions, StateKind};
pub use crate::safetensors::{save_named_safetensors, save_safetensors, SafetensorsEntry, SafetensorsFile};
pub use crate::scaler::{Scaler, ScalerCounters, ScalerOptions, ScalerState};
pub use crate::tensor::Tensor;

/// The run-time library's version as `major * 10000 + minor * 100 + patch`
/// (`ampx_version`); compare with [`sys::AMPX_VERSION_NUMBER`].
pub fn version() -> u32 {
    // SAFETY: thread-safe, no arguments.
    unsafe { sys::ampx_version() }
}

/// The run-time version as a string, e.g. "0.1.0" (`ampx_version_string`).
pub fn version_string() -> &'static str {
    // SAFETY: a static string, never NULL.
    unsafe { error::static_str(sys::ampx_version_string()) }
}

/// Whether the library was built with its CUDA backend (`ampx_has_cuda`).
pub fn has_cuda() -> bool {
    // SAFETY: thread-safe, no arguments.
    unsafe { sys::ampx_has_cuda() != 0 }
}

/// The number of usable CUDA devices (`ampx_cuda_device_count`).
pub fn cuda_device_count() -> i32 {
    // SAFETY: thread-safe, no arguments.
    unsafe { sys::ampx_cuda_device_count() }
}
