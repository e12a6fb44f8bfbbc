//! Tensors: creation, host copies, queries, gradients and DLPack.
use std::ffi::{c_void, CStr, CString};
use std::fmt;
use std::ptr::{self, NonNull};

use ampx_sys as sys;

use crate::context::Context;
use crate::dtype::{DType, Element};
use crate::error::{check, check_with_hooks, Callback, Error, Result, Status};
use crate::scaler::Scaler;

/// A tensor (`ampx_tensor`): a dense, contiguous, row-major array of at
/// most 8 dimensions on its context's device.
///
/// Each `Tensor` value owns one reference: `Clone` adds one
/// (`ampx_tensor_retain`, the same tensor, not a copy of its data) and
/// `Drop` releases it. Op outputs are owned the same way, whatever scopes
/// are open, so a `Tensor` never dangles. A tensor keeps its context alive.
/// `==` compares handles (the same tensor), not contents.
///
/// Not `Send`/`Sync`: see the crate documentation on threads.
pub struct Tensor {
    raw: NonNull<sys::ampx_tensor_s>,
}

/// `(ndim, pointer)` for a shape argument.
pub(crate) fn shape_arg(shape: &[i64]) -> Result<(i32, *const i64)> {
    let ndim = i32::try_from(shape.len())
        .map_err(|_| Error::new(Status::Shape, format!("a shape of {} dimensions", shape.len())))?;
    Ok((ndim, if shape.is_empty() { ptr::null() } else { shape.as_ptr() }))
}

fn raw_or_null(t: Option<&Tensor>) -> sys::ampx_tensor {
    t.map_or(ptr::null_mut(), Tensor::as_raw)
}

impl Tensor {
    /// Takes ownership of one reference.
    ///
    /// # Safety
    /// `raw` must be a live tensor handle whose reference the caller owns
    /// and hands over (not one borrowed from a scope).
    pub unsafe fn from_raw(raw: sys::ampx_tensor) -> Tensor {
        Tensor { raw: NonNull::new(raw).expect("ampx returned a NULL tensor") }
    }

    /// Adds a reference to a borrowed handle and owns it.
    ///
    /// # Safety
    /// `raw` must be a live tensor handle.
    pub unsafe fn from_borrowed(raw: sys::ampx_tensor) -> Result<Tensor> {
        check(sys::ampx_tensor_retain(raw))?;
        Ok(Tensor::from_raw(raw))
    }

    /// The handle, borrowed: valid while `self` lives.
    pub fn as_raw(&self) -> sys::ampx_tensor {
        self.raw.as_ptr()
    }

    /// Gives up ownership: the caller must release the returned reference.
    pub fn into_raw(self) -> sys::ampx_tensor {
        let raw = self.raw.as_ptr();
        std::mem::forget(self);
        raw
    }

    fn created(f: impl FnOnce(*mut sys::ampx_tensor) -> sys::ampx_status) -> Result<Tensor> {
        let mut out = ptr::null_mut();
        check(f(&mut out))?;
        // SAFETY: create functions return one reference owned by the caller.
        Ok(unsafe { Tensor::from_raw(out) })
    }

    /// A tensor with uninitialised contents (`ampx_tensor_empty`).
    pub fn empty(ctx: &Context, dtype: DType, shape: &[i64]) -> Result<Tensor> {
        let (ndim, dims) = shape_arg(shape)?;
        // SAFETY: live context; `dims` holds `ndim` extents.
        Tensor::created(|out| unsafe { sys::ampx_tensor_empty(ctx.as_raw(), dtype.to_raw(), ndim, dims, out) })
    }

    /// A tensor of zeros (`ampx_tensor_zeros`).
    pub fn zeros(ctx: &Context, dtype: DType, shape: &[i64]) -> Result<Tensor> {
        let (ndim, dims) = shape_arg(shape)?;
        // SAFETY: as above.
        Tensor::created(|out| unsafe { sys::ampx_tensor_zeros(ctx.as_raw(), dtype.to_raw(), ndim, dims, out) })
    }

    /// A tensor of `T`'s dtype holding a copy of `data` (`ampx_tensor_from_host`).
    pub fn from_slice<T: Element>(ctx: &Context, shape: &[i64], data: &[T]) -> Result<Tensor> {
        let (ndim, dims) = shape_arg(shape)?;
        // SAFETY: `data` is valid for its byte size during the call.
        Tensor::created(|out| unsafe {
            sys::ampx_tensor_from_host(
                ctx.as_raw(),
                T::DTYPE.to_raw(),
                ndim,
                dims,
                data.as_ptr().cast(),
                std::mem::size_of_val(data),
                out,
            )
        })
    }

    /// A tensor of `dtype` holding a copy of raw bytes (for instance f16
    /// bits); `bytes.len()` must be numel times the element size.
    pub fn from_bytes(ctx: &Context, dtype: DType, shape: &[i64], bytes: &[u8]) -> Result<Tensor> {
        let (ndim, dims) = shape_arg(shape)?;
        // SAFETY: `bytes` is valid during the call.
        Tensor::created(|out| unsafe {
            sys::ampx_tensor_from_host(
                ctx.as_raw(),
                dtype.to_raw(),
                ndim,
                dims,
                bytes.as_ptr().cast(),
                bytes.len(),
                out,
            )
        })
    }

    /// A tensor that takes over `data` without copying (`ampx_tensor_wrap`
    /// with a deleter that frees the vector when the library is done with
    /// it). Only for CPU contexts; wrapped memory does not count in
    /// [`Context::memory_stats`].
    pub fn from_vec<T: Element>(ctx: &Context, shape: &[i64], data: Vec<T>) -> Result<Tensor> {
        unsafe extern "C" fn free_vec<T>(user_data: *mut c_void, _data: *mut c_void) {
            // SAFETY: user_data is the Box<Vec<T>> leaked below, freed once.
            let _ = std::panic::catch_unwind(|| drop(Box::from_raw(user_data.cast::<Vec<T>>())));
        }
        if !matches!(ctx.device()?, crate::Device::Cpu) {
            return Err(Error::new(Status::Device, "Tensor::from_vec: the context is not a CPU context"));
        }
        let (ndim, dims) = shape_arg(shape)?;
        let bytes = std::mem::size_of_val(data.as_slice());
        let mut boxed = Box::new(data);
        let data_ptr = boxed.as_mut_ptr().cast::<c_void>();
        let user_data = Box::into_raw(boxed).cast::<c_void>();
        let mut out = ptr::null_mut();
        // SAFETY: the memory lives in the leaked box until the deleter runs;
        // it is aligned to T, whose size is the element size.
        let status = unsafe {
            sys::ampx_tensor_wrap(
                ctx.as_raw(),
                T::DTYPE.to_raw(),
                ndim,
                dims,
                data_ptr,
                bytes,
                Some(free_vec::<T>),
                user_data,
                &mut out,
            )
        };
        if let Err(e) = check(status) {
            // The deleter is not called on failure: the vector is ours again.
            // SAFETY: the box leaked above, not handed over.
            drop(unsafe { Box::from_raw(user_data.cast::<Vec<T>>()) });
            return Err(e);
        }
        // SAFETY: a new reference owned by us.
        Ok(unsafe { Tensor::from_raw(out) })
    }

    /// Wraps memory the caller owns without copying (`ampx_tensor_wrap`).
    ///
    /// # Safety
    /// As `ampx_tensor_wrap` requires: `data` holds `bytes` bytes on the
    /// context's device, aligned to the element size, and stays valid until
    /// `deleter` is called (or, without a deleter, until the tensor and every
    /// tensor sharing its memory are released, which the program cannot
    /// easily observe); `deleter` may be called from any thread.
    pub unsafe fn wrap_raw(
        ctx: &Context,
        dtype: DType,
        shape: &[i64],
        data: *mut c_void,
        bytes: usize,
        deleter: sys::ampx_deleter,
        deleter_user_data: *mut c_void,
    ) -> Result<Tensor> {
        let (ndim, dims) = shape_arg(shape)?;
        Tensor::created(|out| {
            sys::ampx_tensor_wrap(ctx.as_raw(), dtype.to_raw(), ndim, dims, data, bytes, deleter, deleter_user_data, out)
        })
    }

    /// Imports a DLPack tensor without copying (`ampx_tensor_from_dlpack`).
    /// On success the library owns `src` and calls its deleter when the
    /// tensor is destroyed; on failure `src` is still the caller's.
    ///
    /// # Safety
    /// `src` must point to a valid `DLManagedTensor` that the caller owns,
    /// whose memory stays valid until its deleter is called.
    pub unsafe fn from_dlpack(ctx: &Context, src: NonNull<sys::DLManagedTensor>) -> Result<Tensor> {
        Tensor::created(|out| sys::ampx_tensor_from_dlpack(ctx.as_raw(), src.as_ptr(), out))
    }

    /// Exports the tensor as a `DLManagedTensor` sharing its memory
    /// (`ampx_tensor_to_dlpack`). It holds a reference to the tensor: the
    /// consumer must call its `deleter` exactly once (or hand it to
    /// [`Tensor::from_dlpack`], which does); otherwise the tensor leaks.
    pub fn to_dlpack(&self) -> Result<NonNull<sys::DLManagedTensor>> {
        let mut out = ptr::null_mut();
        // SAFETY: live tensor, valid out pointer.
        check(unsafe { sys::ampx_tensor_to_dlpack(self.as_raw(), &mut out) })?;
        Ok(NonNull::new(out).expect("ampx returned a NULL DLManagedTensor"))
    }

    // ---- queries ---------------------------------------------------------

    /// The element type.
    pub fn dtype(&self) -> Result<DType> {
        let mut raw = 0;
        // SAFETY: live tensor, valid out pointer.
        check(unsafe { sys::ampx_tensor_dtype(self.as_raw(), &mut raw) })?;
        DType::from_raw(raw).ok_or_else(|| Error::new(Status::Dtype, format!("unknown dtype {raw}")))
    }

    /// The number of dimensions.
    pub fn ndim(&self) -> Result<usize> {
        let mut ndim = 0;
        // SAFETY: live tensor, valid out pointer.
        check(unsafe { sys::ampx_tensor_ndim(self.as_raw(), &mut ndim) })?;
        Ok(ndim as usize)
    }

    /// The extents.
    pub fn shape(&self) -> Result<Vec<i64>> {
        let mut dims = [0i64; sys::AMPX_MAX_DIMS];
        // SAFETY: `dims` has room for AMPX_MAX_DIMS extents.
        check(unsafe { sys::ampx_tensor_shape(self.as_raw(), dims.as_mut_ptr(), dims.len() as i32) })?;
        Ok(dims[..self.ndim()?].to_vec())
    }

    /// The number of elements (1 for a scalar).
    pub fn numel(&self) -> Result<i64> {
        let mut numel = 0;
        // SAFETY: live tensor, valid out pointer.
        check(unsafe { sys::ampx_tensor_numel(self.as_raw(), &mut numel) })?;
        Ok(numel)
    }

    /// The size of the contents in bytes.
    pub fn nbytes(&self) -> Result<usize> {
        let mut nbytes = 0;
        // SAFETY: live tensor, valid out pointer.
        check(unsafe { sys::ampx_tensor_nbytes(self.as_raw(), &mut nbytes) })?;
        Ok(nbytes)
    }

    /// The address of the first element on the tensor's device, valid while
    /// the tensor lives. Reading or writing through it is `unsafe` and must
    /// respect the device (a device pointer on CUDA).
    pub fn data_ptr(&self) -> Result<*mut c_void> {
        let mut data = ptr::null_mut();
        // SAFETY: live tensor, valid out pointer.
        check(unsafe { sys::ampx_tensor_data(self.as_raw(), &mut data) })?;
        Ok(data)
    }

    /// The tensor's context, as a new reference. Fails with
    /// [`Status::StaleHandle`] once every `Context` value of it was dropped
    /// (the library then no longer hands it out).
    pub fn context(&self) -> Result<Context> {
        // SAFETY: the borrowed handle is live while the tensor lives.
        unsafe { Context::from_borrowed(self.raw_context()?) }
    }

    pub(crate) fn raw_context(&self) -> Result<sys::ampx_context> {
        let mut ctx = ptr::null_mut();
        // SAFETY: live tensor, valid out pointer.
        check(unsafe { sys::ampx_tensor_context(self.as_raw(), &mut ctx) })?;
        Ok(ctx)
    }

    /// Sets the name used in diagnostics ("" clears it).
    pub fn set_name(&self, name: &str) -> Result<()> {
        let name = CString::new(name)
            .map_err(|_| Error::new(Status::InvalidArgument, "Tensor::set_name: the name contains a NUL byte"))?;
        // SAFETY: live tensor; the name is copied.
        check(unsafe { sys::ampx_tensor_set_name(self.as_raw(), name.as_ptr()) })
    }

    /// The name ("" if none).
    pub fn name(&self) -> Result<String> {
        let mut name = ptr::null();
        // SAFETY: live tensor; the string is valid until the name changes,
        // and is copied at once.
        check(unsafe { sys::ampx_tensor_name(self.as_raw(), &mut name) })?;
        Ok(unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned())
    }

    // ---- contents ------------------------------------------------------------

    /// Copies the contents to a vector of `T`, whose dtype must be the
    /// tensor's (else [`Status::Dtype`]). Synchronizes.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        let dtype = self.dtype()?;
        if dtype != T::DTYPE {
            return Err(Error::new(
                Status::Dtype,
                format!("Tensor::to_vec: the tensor is {dtype}, the element type is {}", T::DTYPE),
            ));
        }
        let mut v = vec![T::default(); self.numel()? as usize];
        // SAFETY: `v` holds numel elements of the tensor's element size.
        check(unsafe {
            sys::ampx_tensor_to_host(self.as_raw(), v.as_mut_ptr().cast(), std::mem::size_of_val(v.as_slice()))
        })?;
        Ok(v)
    }

    /// The value of a one-element tensor of `T`'s dtype.
    pub fn item<T: Element>(&self) -> Result<T> {
        let mut value = T::default();
        if self.dtype()? != T::DTYPE {
            return Err(Error::new(Status::Dtype, format!("Tensor::item: the tensor is not {}", T::DTYPE)));
        }
        // SAFETY: one element; the library checks the byte count.
        check(unsafe {
            sys::ampx_tensor_to_host(self.as_raw(), (&mut value as *mut T).cast(), std::mem::size_of::<T>())
        })?;
        Ok(value)
    }

    /// Copies the contents to host bytes. Synchronizes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut v = vec![0u8; self.nbytes()?];
        // SAFETY: `v` holds nbytes bytes.
        check(unsafe { sys::ampx_tensor_to_host(self.as_raw(), v.as_mut_ptr().cast(), v.len()) })?;
        Ok(v)
    }

    /// Overwrites the contents with `data` (same dtype and element count).
    pub fn copy_from_slice<T: Element>(&self, data: &[T]) -> Result<()> {
        let dtype = self.dtype()?;
        if dtype != T::DTYPE {
            return Err(Error::new(
                Status::Dtype,
                format!("Tensor::copy_from_slice: the tensor is {dtype}, the element type is {}", T::DTYPE),
            ));
        }
        // SAFETY: `data` is valid for its byte size during the call.
        check(unsafe {
            sys::ampx_tensor_copy_from_host(self.as_raw(), data.as_ptr().cast(), std::mem::size_of_val(data))
        })
    }

    /// Overwrites the contents with raw bytes (`nbytes` of them).
    pub fn copy_from_bytes(&self, bytes: &[u8]) -> Result<()> {
        // SAFETY: `bytes` is valid during the call.
        check(unsafe { sys::ampx_tensor_copy_from_host(self.as_raw(), bytes.as_ptr().cast(), bytes.len()) })
    }

    /// `self = src`, converting the element type (`ampx_tensor_copy`).
    pub fn copy_from(&self, src: &Tensor) -> Result<()> {
        // SAFETY: live tensors.
        check(unsafe { sys::ampx_tensor_copy(self.as_raw(), src.as_raw()) })
    }

    /// `self = src` rounded into this FP8 tensor's type with the overflow
    /// rule `overflow` (`ampx_tensor_copy_fp8`; [`Tensor::copy_from`] uses
    /// torch's: E4M3 saturates, E5M2 overflows to inf). src is F32, F16 or
    /// BF16 with as many elements.
    pub fn copy_fp8_from(&self, src: &Tensor, overflow: crate::fp8::Fp8Overflow) -> Result<()> {
        // SAFETY: live tensors.
        check(unsafe { sys::ampx_tensor_copy_fp8(self.as_raw(), src.as_raw(), overflow.to_raw()) })
    }

    /// A new tensor of `dtype` holding the converted contents (torch's
    /// `Tensor.to`). When `self` requires grad this is the recorded
    /// `ampx_cast`, an op output like any other: with grad mode on the
    /// gradient comes back to `self`, cast to its dtype. Otherwise the plain
    /// `ampx_tensor_cast`.
    pub fn cast(&self, dtype: DType) -> Result<Tensor> {
        if self.requires_grad()? {
            // SAFETY: live input.
            return crate::ops::run_op(self, |out| unsafe { sys::ampx_cast(self.as_raw(), dtype.to_raw(), out) });
        }
        // SAFETY: live tensor.
        Tensor::created(|out| unsafe { sys::ampx_tensor_cast(self.as_raw(), dtype.to_raw(), out) })
    }

    /// A copy in new memory with the same dtype, recorded as [`Tensor::cast`]
    /// (torch's `Tensor.clone`; `Clone::clone` only adds a reference).
    pub fn deep_clone(&self) -> Result<Tensor> {
        self.cast(self.dtype()?)
    }

    /// Sets every element to `value` (converted to the tensor's type).
    pub fn fill(&self, value: f64) -> Result<()> {
        // SAFETY: live tensor.
        check(unsafe { sys::ampx_tensor_fill(self.as_raw(), value) })
    }

    // ---- gradients ---------------------------------------------------------------

    /// Attaches `grad` as the gradient (retained by the tensor), or detaches
    /// it with `None`.
    pub fn set_grad(&self, grad: Option<&Tensor>) -> Result<()> {
        // SAFETY: live tensors (or NULL).
        check(unsafe { sys::ampx_tensor_set_grad(self.as_raw(), raw_or_null(grad)) })
    }

    /// The attached gradient, as a new reference (the same tensor: writes
    /// to it change the gradient), or `None`.
    pub fn grad(&self) -> Result<Option<Tensor>> {
        let mut grad = ptr::null_mut();
        // SAFETY: live tensor, valid out pointer.
        check(unsafe { sys::ampx_tensor_grad(self.as_raw(), &mut grad) })?;
        if grad.is_null() {
            return Ok(None);
        }
        // SAFETY: borrowed while attached; we retain it at once.
        unsafe { Tensor::from_borrowed(grad) }.map(Some)
    }

    /// Marks a leaf (a tensor the program made) as needing a gradient.
    pub fn set_requires_grad(&self, requires_grad: bool) -> Result<()> {
        // SAFETY: live tensor.
        check(unsafe { sys::ampx_tensor_set_requires_grad(self.as_raw(), requires_grad.into()) })
    }

    /// Whether gradients flow to or through the tensor.
    pub fn requires_grad(&self) -> Result<bool> {
        let mut flag = 0;
        // SAFETY: live tensor, valid out pointer.
        check(unsafe { sys::ampx_tensor_requires_grad(self.as_raw(), &mut flag) })?;
        Ok(flag != 0)
    }

    /// Backpropagates from this one-element loss (`ampx_backward`). With a
    /// scaler the seed is its scale, so the gradients come out scaled, ready
    /// for [`Scaler::unscale`]/[`Scaler::step`].
    pub fn backward(&self, scaler: Option<&Scaler>) -> Result<()> {
        Callback::Segment.clear();
        Callback::Hook.clear();
        let scaler = scaler.map_or(ptr::null_mut(), Scaler::as_raw);
        // SAFETY: live tensor and scaler (or NULL).
        check_with_hooks(unsafe { sys::ampx_backward(self.as_raw(), scaler) }, "ampx_backward")
    }

    /// A tensor of `dtype` and `shape` on this tensor's memory, starting
    /// `byte_offset` bytes past its first element (`ampx_tensor_view`; no
    /// copy). Writes through either are seen by both; the memory lives
    /// until both are dropped. A view is a leaf: gradients do not flow
    /// between it and its base.
    pub fn view(&self, byte_offset: usize, dtype: DType, shape: &[i64]) -> Result<Tensor> {
        let (ndim, dims) = shape_arg(shape)?;
        // SAFETY: live tensor; `dims` holds `ndim` extents.
        Tensor::created(|out| unsafe {
            sys::ampx_tensor_view(self.as_raw(), byte_offset, dtype.to_raw(), ndim, dims, out)
        })
    }

    /// Tells the context's grad-ready hook that this tensor's gradient is
    /// final for this step (`ampx_grad_ready`), for engines with their own
    /// backward pass. The hook's error, if it fails, is returned.
    pub fn grad_ready(&self) -> Result<()> {
        Callback::Hook.clear();
        // SAFETY: live tensor.
        check_with_hooks(unsafe { sys::ampx_grad_ready(self.as_raw()) }, "ampx_grad_ready")
    }
}

owns_reference!(Tensor, release: sys::ampx_tensor_release, retain: sys::ampx_tensor_retain);

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tensor")
            .field("raw", &self.raw)
            .field("dtype", &self.dtype().ok())
            .field("shape", &self.shape().ok())
            .finish()
    }
}
