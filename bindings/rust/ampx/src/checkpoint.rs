//! Gradient checkpointing with a Rust closure (see [`Context::checkpoint`]).
//!
//! The closure travels to C as `user_data` of a trampoline. Two problems
//! are solved here:
//!
//! * Lifetime. The library may call the segment again during any later
//!   backward, and says nothing when it forgets the segment. So the boxed
//!   closure is tied to an "anchor": a zero-element tensor wrapped with a
//!   deleter that frees the box, passed as a hidden last input. The tape's
//!   record holds its inputs, so the box lives exactly as long as the record
//!   (or only for the call when nothing is recorded).
//! * Unwinding. A panic must not cross the C boundary: the trampoline
//!   catches it and returns an error status, and keeps the Rust error in a
//!   thread-local (a callback cannot set `ampx_last_error`), which the
//!   checkpoint or backward call then reports.
use std::cell::RefCell;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use ampx_sys as sys;

use crate::context::Context;
use crate::error::{check, check_with_segments, clear_segment_error, set_segment_error, Error, Result, Status};
use crate::ops::run_outputs;
use crate::tensor::Tensor;

struct Segment<F> {
    f: F,
    /// The outputs of the latest run: the library retains them only after
    /// the segment returns, so they must outlive the callback.
    keep: RefCell<Vec<Tensor>>,
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_string()
    }
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
        // SAFETY: user_data is the Segment<F> kept alive by the anchor.
        let segment = &*user_data.cast::<Segment<F>>();
        // The last input is the anchor, not the program's.
        let count = input_count.saturating_sub(1);
        let inputs = if count == 0 { &[][..] } else { std::slice::from_raw_parts(inputs, count) };
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
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(())) => sys::AMPX_OK,
        Ok(Err(e)) => {
            let code = e.status().code();
            set_segment_error(e);
            if code == sys::AMPX_OK { sys::AMPX_ERR_INTERNAL } else { code }
        }
        Err(payload) => {
            set_segment_error(Error::panicked(format!("the segment panicked: {}", panic_message(&*payload))));
            sys::AMPX_ERR_INTERNAL
        }
    }
}

unsafe extern "C" fn free_segment<F>(user_data: *mut c_void, _data: *mut c_void) {
    // SAFETY: the box made in `checkpoint`, freed exactly once (by the
    // anchor's deleter). Dropping the closure may release tensors; a panic
    // in a destructor is swallowed rather than unwound into C.
    let _ = catch_unwind(AssertUnwindSafe(|| drop(Box::from_raw(user_data.cast::<Segment<F>>()))));
}

pub(crate) fn checkpoint<F>(ctx: &Context, inputs: &[&Tensor], output_count: usize, f: F) -> Result<Vec<Tensor>>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>> + 'static,
{
    if output_count == 0 {
        // Let the library refuse it with its own message.
        let mut none = ptr::null_mut();
        // SAFETY: a NULL fn is refused before anything is read.
        check(unsafe { sys::ampx_checkpoint(ctx.as_raw(), None, ptr::null_mut(), ptr::null(), 0, &mut none, 0) })?;
        return Err(Error::new(Status::InvalidArgument, "checkpoint: output_count is 0"));
    }
    let segment = Box::into_raw(Box::new(Segment { f, keep: RefCell::new(Vec::new()) }));
    let user_data = segment.cast::<c_void>();
    let shape = [0i64];
    let mut anchor = ptr::null_mut();
    // SAFETY: zero bytes, so `data` is never read; the deleter frees the box.
    let status = unsafe {
        sys::ampx_tensor_wrap(
            ctx.as_raw(),
            sys::AMPX_F32,
            1,
            shape.as_ptr(),
            user_data,
            0,
            Some(free_segment::<F>),
            user_data,
            &mut anchor,
        )
    };
    if let Err(e) = check(status) {
        // SAFETY: not handed over: the deleter is not called on failure.
        drop(unsafe { Box::from_raw(segment) });
        return Err(e);
    }
    // SAFETY: a new reference owned by us; its release frees the box unless
    // the tape's record holds it.
    let anchor = unsafe { Tensor::from_raw(anchor) };
    let mut raw_inputs: Vec<sys::ampx_tensor> = inputs.iter().map(|t| t.as_raw()).collect();
    raw_inputs.push(anchor.as_raw());
    let mut outputs = vec![ptr::null_mut(); output_count];
    clear_segment_error();
    let result = run_outputs(ctx.as_raw(), &mut outputs, |out| {
        // SAFETY: live handles; `out` has room for output_count handles.
        let status = unsafe {
            sys::ampx_checkpoint(
                ctx.as_raw(),
                Some(trampoline::<F>),
                user_data,
                raw_inputs.as_ptr(),
                raw_inputs.len(),
                out,
                output_count,
            )
        };
        check_with_segments(status, "ampx_checkpoint")
    });
    // The forward run's outputs are owned now; the segment need not keep them.
    // SAFETY: the anchor (held by us) keeps the box alive here.
    unsafe { (*segment).keep.borrow_mut().clear() };
    drop(anchor);
    result
}
