//! Grad-ready hooks with a Rust closure (see [`Context::set_grad_ready_hook`]).
//!
//! The boxed closure travels to C as `user_data`; ampx calls `release`
//! exactly once -- when the hook is replaced or removed, when the program's
//! last context reference goes, or at once when the call fails -- so the box
//! is freed there and nowhere else. A panic must not cross the C boundary:
//! the trampoline catches it. An error or a caught panic is handed to the
//! library as a status and message (`ampx_set_error`) and kept whole in a
//! thread-local, which backward or grad_ready then returns.
use std::cell::RefCell;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use ampx_sys as sys;

use crate::context::Context;
use crate::error::{check, Callback, Error, Result, Status};
use crate::tensor::Tensor;

unsafe extern "C" fn trampoline<F>(user_data: *mut c_void, param: sys::ampx_tensor) -> sys::ampx_status
where
    F: FnMut(&Tensor) -> Result<()>,
{
    let run = || -> Result<()> {
        // SAFETY: user_data is the box made in set_grad_ready_hook, alive
        // until ampx calls `release`, which it never does during a call.
        let hook = &*user_data.cast::<RefCell<F>>();
        let mut f = hook
            .try_borrow_mut()
            .map_err(|_| Error::new(Status::Order, "the grad-ready hook was re-entered while it ran"))?;
        // Our own reference to the borrowed parameter (released again).
        let param = Tensor::from_borrowed(param)?;
        (*f)(&param)
    };
    Callback::Hook.run(run)
}

unsafe extern "C" fn release<F>(user_data: *mut c_void) {
    // SAFETY: the box made in set_grad_ready_hook; ampx calls this exactly
    // once. A panic in the closure's destructor is swallowed, not unwound
    // into C.
    let _ = catch_unwind(AssertUnwindSafe(|| drop(Box::from_raw(user_data.cast::<RefCell<F>>()))));
}

impl Context {
    /// Calls `hook(param)` during every backward pass on this context as
    /// soon as `param`'s gradient is final for that pass
    /// (`ampx_set_grad_ready_hook`), once per leaf that received a gradient,
    /// in the order the pass finishes them. Replaces the previous hook. The
    /// hook may read and copy tensors and run ops (they are not recorded);
    /// it must not call backward or grad_ready. An error it returns (or a
    /// panic) stops the backward pass, which then returns that error.
    pub fn set_grad_ready_hook<F>(&self, hook: F) -> Result<()>
    where
        F: FnMut(&Tensor) -> Result<()> + 'static,
    {
        let user_data = Box::into_raw(Box::new(RefCell::new(hook))).cast::<c_void>();
        // SAFETY: live context; ampx owns the box from here and frees it
        // through `release` exactly once, also when this call fails.
        check(unsafe {
            sys::ampx_set_grad_ready_hook(self.as_raw(), Some(trampoline::<F>), user_data, Some(release::<F>))
        })
    }

    /// Removes the grad-ready hook (its closure is dropped).
    pub fn clear_grad_ready_hook(&self) -> Result<()> {
        // SAFETY: live context; a NULL fn removes the hook.
        check(unsafe { sys::ampx_set_grad_ready_hook(self.as_raw(), None, ptr::null_mut(), None) })
    }
}
