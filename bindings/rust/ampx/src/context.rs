//! Contexts: a device, its allocator and memory statistics, the autograd
//! tape, grad mode and scopes.
use std::fmt;
use std::ptr::{self, NonNull};

use ampx_sys as sys;

use crate::dtype::Device;
use crate::error::{check, Result};
use crate::tensor::Tensor;

/// Options of [`Context::with_options`] (the safe subset of
/// `ampx_context_options`; allocator hooks and adopted CUDA streams carry
/// raw pointers whose lifetimes the caller must guarantee: use
/// [`Context::with_raw_options`] for them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextOptions {
    /// The device (default: the CPU).
    pub device: Device,
    /// CPU worker threads: 0 (default) one per hardware thread, 1 none.
    pub num_threads: i32,
    /// Seed of the context's random streams (dropout), default 0.
    pub seed: u64,
}

impl Default for ContextOptions {
    /// The library's defaults (`ampx_context_options_default`).
    fn default() -> Self {
        // SAFETY: thread-safe, no arguments.
        let raw = unsafe { sys::ampx_context_options_default() };
        ContextOptions {
            device: match raw.device_type {
                sys::AMPX_DEVICE_CUDA => Device::Cuda(raw.device_index),
                _ => Device::Cpu,
            },
            num_threads: raw.num_threads,
            seed: raw.seed,
        }
    }
}

/// Memory statistics of a context's tensor storage (`ampx_memory_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes held by live tensors.
    pub current_bytes: u64,
    /// Maximum of `current_bytes` since creation or the last
    /// [`Context::reset_peak_memory`].
    pub peak_bytes: u64,
    /// Allocations made since creation.
    pub allocation_count: u64,
    /// Bytes the allocator holds from the system, cache included.
    pub reserved_bytes: u64,
}

/// An ampx context (`ampx_context`): one device (the CPU or a CUDA device
/// with its stream), an allocator, memory statistics and the autograd state.
///
/// `Clone` adds a reference (`ampx_context_retain`) and `Drop` releases one;
/// `==` is the same context (handle identity).
/// Every tensor, optimizer, scaler and autocast policy keeps its context
/// alive inside the library, so they may outlive every `Context` value; the
/// context's tape, scopes and autocast regions are dropped when the last
/// `Context` value goes.
///
/// Not `Send`/`Sync`: see the crate documentation on threads.
pub struct Context {
    raw: NonNull<sys::ampx_context_s>,
}

impl Context {
    /// A CPU context with the default options.
    pub fn new() -> Result<Context> {
        let mut out = ptr::null_mut();
        // SAFETY: NULL options mean the defaults; `out` is a valid pointer.
        check(unsafe { sys::ampx_context_create(ptr::null(), &mut out) })?;
        // SAFETY: on success `out` holds a new reference owned by us.
        Ok(unsafe { Context::from_raw(out) })
    }

    /// A context with the given options.
    pub fn with_options(options: &ContextOptions) -> Result<Context> {
        // SAFETY: thread-safe, no arguments.
        let mut raw = unsafe { sys::ampx_context_options_default() };
        match options.device {
            Device::Cpu => raw.device_type = sys::AMPX_DEVICE_CPU,
            Device::Cuda(index) => {
                raw.device_type = sys::AMPX_DEVICE_CUDA;
                raw.device_index = index;
            }
        }
        raw.num_threads = options.num_threads;
        raw.seed = options.seed;
        // SAFETY: the defaults carry no allocator hooks and no stream.
        unsafe { Context::with_raw_options(&raw) }
    }

    /// A context from the C options struct, for allocator hooks and adopted
    /// CUDA streams.
    ///
    /// # Safety
    /// The hooks must behave as `ampx_allocator` requires (callable from any
    /// thread that releases a tensor), and `allocator.user_data` and
    /// `cuda_stream` must outlive the context, which lives until every
    /// object made from it is released.
    pub unsafe fn with_raw_options(options: &sys::ampx_context_options) -> Result<Context> {
        let mut out = ptr::null_mut();
        check(sys::ampx_context_create(options, &mut out))?;
        Ok(Context::from_raw(out))
    }

    /// Takes ownership of one reference to a context handle.
    ///
    /// # Safety
    /// `raw` must be a live context handle whose reference the caller owns
    /// and hands over.
    pub unsafe fn from_raw(raw: sys::ampx_context) -> Context {
        Context { raw: NonNull::new(raw).expect("ampx returned a NULL context") }
    }

    /// Adds a reference to a borrowed handle and owns it.
    ///
    /// # Safety
    /// `raw` must be a live context handle.
    pub(crate) unsafe fn from_borrowed(raw: sys::ampx_context) -> Result<Context> {
        check(sys::ampx_context_retain(raw))?;
        Ok(Context::from_raw(raw))
    }

    /// The handle, borrowed: valid while `self` lives.
    pub fn as_raw(&self) -> sys::ampx_context {
        self.raw.as_ptr()
    }

    /// Gives up ownership: the caller must release the returned reference.
    pub fn into_raw(self) -> sys::ampx_context {
        let raw = self.raw.as_ptr();
        std::mem::forget(self);
        raw
    }

    /// The context's device.
    pub fn device(&self) -> Result<Device> {
        let (mut kind, mut index) = (0, 0);
        // SAFETY: live handle, valid out pointers.
        check(unsafe { sys::ampx_context_device(self.as_raw(), &mut kind, &mut index) })?;
        Ok(if kind == sys::AMPX_DEVICE_CUDA { Device::Cuda(index) } else { Device::Cpu })
    }

    /// Blocks until the device has done everything ampx enqueued (a no-op
    /// on the CPU).
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::ampx_context_synchronize(self.as_raw()) })
    }

    /// The memory statistics of the context's tensor storage.
    pub fn memory_stats(&self) -> Result<MemoryStats> {
        let mut raw = sys::ampx_memory_stats {
            struct_size: std::mem::size_of::<sys::ampx_memory_stats>(),
            ..Default::default()
        };
        // SAFETY: live handle; struct_size set.
        check(unsafe { sys::ampx_memory_stats_get(self.as_raw(), &mut raw) })?;
        Ok(MemoryStats {
            current_bytes: raw.current_bytes,
            peak_bytes: raw.peak_bytes,
            allocation_count: raw.allocation_count,
            reserved_bytes: raw.reserved_bytes,
        })
    }

    /// Sets the peak to the current number of bytes.
    pub fn reset_peak_memory(&self) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::ampx_memory_reset_peak(self.as_raw()) })
    }

    /// Lets f32 matrix products and convolutions run in TF32 on CUDA
    /// (`ampx_context_set_tf32`; the CPU has none); returns the former
    /// setting.
    pub fn set_tf32(&self, allowed: bool) -> Result<bool> {
        let mut previous = 0;
        // SAFETY: live handle, valid out pointer.
        check(unsafe { sys::ampx_context_set_tf32(self.as_raw(), allowed.into(), &mut previous) })?;
        Ok(previous != 0)
    }

    /// Turns recording of ops on the tape on or off; returns the former
    /// setting. Prefer the guard [`Context::grad_mode`].
    pub fn set_grad_enabled(&self, enabled: bool) -> Result<bool> {
        let mut previous = 0;
        // SAFETY: live handle, valid out pointer.
        check(unsafe { sys::ampx_set_grad_enabled(self.as_raw(), enabled.into(), &mut previous) })?;
        Ok(previous != 0)
    }

    /// Sets grad mode until the returned guard is dropped, which restores
    /// the former setting.
    pub fn grad_mode(&self, enabled: bool) -> Result<GradModeGuard<'_>> {
        let previous = self.set_grad_enabled(enabled)?;
        Ok(GradModeGuard { ctx: self, previous })
    }

    /// Turns recording off until the returned guard is dropped (inference,
    /// or work that should not be differentiated).
    pub fn no_grad(&self) -> Result<GradModeGuard<'_>> {
        self.grad_mode(false)
    }

    /// Opens a scope (`ampx_scope_push`), closed when the guard is dropped.
    ///
    /// In C a scope owns the op outputs made while it is open. In Rust every
    /// [`Tensor`] owns its own reference, so scopes are never needed to free
    /// memory; they exist for parity with the C API (and for programs that
    /// share a context with C code that relies on them). Scopes nest; drop
    /// guards in reverse order of creation (the usual order of locals).
    pub fn scope(&self) -> Result<Scope<'_>> {
        // SAFETY: live handle.
        check(unsafe { sys::ampx_scope_push(self.as_raw()) })?;
        Ok(Scope { ctx: self })
    }

    /// The number of scopes open on the context (`ampx_scope_depth`): those
    /// of [`Context::scope`] guards alive, and any that C code sharing the
    /// context has pushed.
    pub fn scope_depth(&self) -> Result<usize> {
        let mut depth = 0;
        // SAFETY: live handle, valid out pointer.
        check(unsafe { sys::ampx_scope_depth(self.as_raw(), &mut depth) })?;
        Ok(depth as usize)
    }

    /// Gradient checkpointing (`ampx_checkpoint_segment`, torch.utils.checkpoint):
    /// runs `segment` on `inputs` without keeping its intermediate
    /// activations, and runs it again when backward reaches it. Returns the
    /// segment's `output_count` outputs.
    ///
    /// The segment must be deterministic and return exactly `output_count`
    /// tensors of this context; parameters it captures (clones of
    /// [`Tensor`]s) receive their gradients as usual. It is kept alive by
    /// the library for as long as the tape may run it again, and dropped
    /// when the tape lets go of it. An `Err` it returns, or a panic (caught
    /// at the C boundary, never unwound through it), makes this call -- or
    /// the later [`Tensor::backward`] -- fail with that error
    /// ([`crate::Error::is_panic`] tells a panic). Avoid capturing a [`Context`] in
    /// it: the tape holding the segment would then keep the context open.
    pub fn checkpoint<F>(&self, inputs: &[&Tensor], output_count: usize, segment: F) -> Result<Vec<Tensor>>
    where
        F: Fn(&[Tensor]) -> Result<Vec<Tensor>> + 'static,
    {
        crate::checkpoint::checkpoint(self, inputs, output_count, segment)
    }
}

owns_reference!(Context, release: sys::ampx_context_release, retain: sys::ampx_context_retain);

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context").field("raw", &self.raw).field("device", &self.device().ok()).finish()
    }
}

/// Restores the former grad mode when dropped (see [`Context::grad_mode`]).
#[must_use = "grad mode is restored as soon as the guard is dropped"]
pub struct GradModeGuard<'a> {
    ctx: &'a Context,
    previous: bool,
}

impl GradModeGuard<'_> {
    /// The setting in force before the guard.
    pub fn previous(&self) -> bool {
        self.previous
    }
}

impl Drop for GradModeGuard<'_> {
    fn drop(&mut self) {
        let _ = self.ctx.set_grad_enabled(self.previous);
    }
}

/// An open scope; dropping it pops the scope (see [`Context::scope`]).
#[must_use = "the scope is closed as soon as the guard is dropped"]
pub struct Scope<'a> {
    ctx: &'a Context,
}

impl Scope<'_> {
    /// Closes the scope now, reporting an error (dropping ignores it).
    pub fn close(self) -> Result<()> {
        let ctx = self.ctx;
        std::mem::forget(self);
        // SAFETY: live handle.
        check(unsafe { sys::ampx_scope_pop(ctx.as_raw()) })
    }
}

impl Drop for Scope<'_> {
    fn drop(&mut self) {
        // SAFETY: live handle. An error (ORDER: the scope was popped by
        // someone else) has nothing to undo.
        let _ = unsafe { sys::ampx_scope_pop(self.ctx.as_raw()) };
    }
}
