//! Gradient checkpointing with a Rust closure (see [`Context::checkpoint`]).
//!
//! The closure travels to C as `user_data` of a trampoline, through
//! `ampx_checkpoint_segment`. Two problems are solved here:
//!
//! * Lifetime. The library may call the segment again during any later
//!   backward; it calls the segment's `release` hook exactly once when it
//!   never will again (before the call returns when nothing is recorded or
//!   the call fails, otherwise when the recompute record goes), and the
//!   hook frees the boxed closure.
//! * Unwinding. A panic must not cross the C boundary: the trampoline
//!   catches it and returns an error status with its message
//!   (`ampx_set_error`, as for an `Err` of the closure), and keeps the Rust
//!   error in a thread-local, which the checkpoint or backward call then
//!   returns.
use std::cell::RefCell;
use std::rc::Rc;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use ampx_sys as sys;

use crate::context::Context;
use crate::error::{check_with_segments, Callback, Error, Result, Status};
use crate::ops::run_outputs;
use crate::tensor::Tensor;

struct Segment<F> {
    f: F,
    /// The outputs of the latest run: the library retains them only after
    /// the segment returns, so they must outlive the callback. Shared with
    /// the `checkpoint` call, which may outlive the box (it is released
    /// before that call returns when nothing is recorded).
    keep: Rc<RefCell<Vec<Tensor>>>,
}

unsafe extern "C" fn trampoline<F>(
    user_data: *mut c_void,
    inputs: *const sys::ampx_tensor,
    input_count: usize,
    outputs: *mut sys::ampx_tensor,
    output_count: usize,
) -> sys::ampx_status
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>>,
{
    let run = || -> Result<()> {
        // SAFETY: user_data is the Segment<F>, alive until its release hook.
        let segment = &*user_data.cast::<Segment<F>>();
        let inputs = if input_count == 0 { &[][..] } else { std::slice::from_raw_parts(inputs, input_count) };
        // Our own references to the inputs (released again: net zero).
        let inputs = inputs.iter().map(|&raw| Tensor::from_borrowed(raw)).collect::<Result<Vec<_>>>()?;
        let produced = (segment.f)(&inputs)?;
        if produced.len() != output_count {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("the segment returned {} tensors; {output_count} were asked for", produced.len()),
            ));
        }
        for (i, t) in produced.iter().enumerate() {
            *outputs.add(i) = t.as_raw();
        }
        let mut keep = segment
            .keep
            .try_borrow_mut()
            .map_err(|_| Error::new(Status::Order, "the segment was re-entered while it ran"))?;
        *keep = produced;
        Ok(())
    };
    Callback::Segment.run(run)
}

unsafe extern "C" fn free_segment<F>(user_data: *mut c_void) {
    // SAFETY: the box made in `checkpoint`, freed exactly once (the
    // library's release hook). Dropping the closure may release tensors; a
    // panic in a destructor is swallowed rather than unwound into C.
    let _ = catch_unwind(AssertUnwindSafe(|| drop(Box::from_raw(user_data.cast::<Segment<F>>()))));
}

pub(crate) fn checkpoint<F>(ctx: &Context, inputs: &[&Tensor], output_count: usize, f: F) -> Result<Vec<Tensor>>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>> + 'static,
{
    let keep = Rc::new(RefCell::new(Vec::new()));
    let user_data = Box::into_raw(Box::new(Segment { f, keep: Rc::clone(&keep) })).cast::<c_void>();
    let segment = sys::ampx_segment {
        struct_size: std::mem::size_of::<sys::ampx_segment>(),
        fn_: Some(trampoline::<F>),
        user_data,
        release: Some(free_segment::<F>),
    };
    let raw_inputs: Vec<sys::ampx_tensor> = inputs.iter().map(|t| t.as_raw()).collect();
    let mut outputs = vec![ptr::null_mut(); output_count];
    Callback::Segment.clear();
    // Once the library has the segment, its release hook frees the box.
    let handed = std::cell::Cell::new(false);
    let result = run_outputs(ctx.as_raw(), &mut outputs, |out| {
        handed.set(true);
        // SAFETY: live handles; `out` has room for output_count handles (the
        // library refuses output_count 0 itself, and releases the segment).
        let status = unsafe {
            sys::ampx_checkpoint_segment(
                ctx.as_raw(),
                &segment,
                if raw_inputs.is_empty() { ptr::null() } else { raw_inputs.as_ptr() },
                raw_inputs.len(),
                out,
                output_count,
            )
        };
        check_with_segments(status, "ampx_checkpoint_segment")
    });
    if !handed.get() {
        // SAFETY: the library never saw user_data, so nothing else frees it.
        unsafe { free_segment::<F>(user_data) };
    }
    // The forward run's outputs are owned now; the segment need not keep them.
    keep.borrow_mut().clear();
    result
}
