//! Errors: every non-OK status of the C API becomes an [`Error`] carrying the
//! status and the library's message (`ampx_last_error()`).
use std::cell::RefCell;
use std::ffi::{CStr, CString};
use std::fmt;

use ampx_sys as sys;

/// The status codes of the C API (`ampx_status`), except `AMPX_OK`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// A NULL pointer, a value out of range (`AMPX_ERR_INVALID_ARGUMENT`).
    InvalidArgument,
    /// Shapes, element or byte counts disagree (`AMPX_ERR_SHAPE`).
    Shape,
    /// A data type not allowed here (`AMPX_ERR_DTYPE`).
    Dtype,
    /// Objects of different contexts mixed, or a device failure (`AMPX_ERR_DEVICE`).
    Device,
    /// An allocation failed; nothing was changed (`AMPX_ERR_OUT_OF_MEMORY`).
    OutOfMemory,
    /// The device does not exist or its backend is not built (`AMPX_ERR_NO_DEVICE`).
    NoDevice,
    /// Valid, but not implemented for this case (`AMPX_ERR_NOT_SUPPORTED`).
    NotSupported,
    /// Calls made in an order that is not allowed (`AMPX_ERR_ORDER`).
    Order,
    /// A released handle, or one of another type (`AMPX_ERR_STALE_HANDLE`).
    /// The safe layer never produces such handles.
    StaleHandle,
    /// A file could not be read or written (`AMPX_ERR_IO`).
    Io,
    /// Data that fails validation (`AMPX_ERR_CORRUPT`).
    Corrupt,
    /// A bug in ampx (`AMPX_ERR_INTERNAL`); also used for a panic caught in a
    /// Rust callback (see [`Error::is_panic`]).
    Internal,
    /// A code this binding does not know (from a newer library).
    Unknown(i32),
}

impl Status {
    /// The status for a C code (`None` for `AMPX_OK`).
    pub fn from_code(code: i32) -> Option<Status> {
        Some(match code {
            sys::AMPX_OK => return None,
            sys::AMPX_ERR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::AMPX_ERR_SHAPE => Status::Shape,
            sys::AMPX_ERR_DTYPE => Status::Dtype,
            sys::AMPX_ERR_DEVICE => Status::Device,
            sys::AMPX_ERR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::AMPX_ERR_NO_DEVICE => Status::NoDevice,
            sys::AMPX_ERR_NOT_SUPPORTED => Status::NotSupported,
            sys::AMPX_ERR_ORDER => Status::Order,
            sys::AMPX_ERR_STALE_HANDLE => Status::StaleHandle,
            sys::AMPX_ERR_IO => Status::Io,
            sys::AMPX_ERR_CORRUPT => Status::Corrupt,
            sys::AMPX_ERR_INTERNAL => Status::Internal,
            other => Status::Unknown(other),
        })
    }

    /// The C code of this status.
    pub fn code(self) -> i32 {
        match self {
            Status::InvalidArgument => sys::AMPX_ERR_INVALID_ARGUMENT,
            Status::Shape => sys::AMPX_ERR_SHAPE,
            Status::Dtype => sys::AMPX_ERR_DTYPE,
            Status::Device => sys::AMPX_ERR_DEVICE,
            Status::OutOfMemory => sys::AMPX_ERR_OUT_OF_MEMORY,
            Status::NoDevice => sys::AMPX_ERR_NO_DEVICE,
            Status::NotSupported => sys::AMPX_ERR_NOT_SUPPORTED,
            Status::Order => sys::AMPX_ERR_ORDER,
            Status::StaleHandle => sys::AMPX_ERR_STALE_HANDLE,
            Status::Io => sys::AMPX_ERR_IO,
            Status::Corrupt => sys::AMPX_ERR_CORRUPT,
            Status::Internal => sys::AMPX_ERR_INTERNAL,
            Status::Unknown(code) => code,
        }
    }

    /// The library's name of the status, e.g. `"AMPX_ERR_SHAPE"`
    /// (`ampx_status_string`).
    pub fn name(self) -> &'static str {
        // SAFETY: ampx_status_string accepts any value and returns a static,
        // NUL-terminated string that is never NULL.
        unsafe { static_str(sys::ampx_status_string(self.code())) }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An error of an ampx call: its status and the library's message, which
/// names the failing function, the argument and the shapes/dtypes involved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
    panic: bool,
}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error with the given status and message (for code that implements
    /// callbacks, such as checkpointed segments, and for errors the binding
    /// detects itself).
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into(), panic: false }
    }

    pub(crate) fn panicked(message: String) -> Error {
        Error { status: Status::Internal, message, panic: true }
    }

    /// The error of the most recent failed ampx call on this thread
    /// (`ampx_last_status` and `ampx_last_error`), or `None` if none failed.
    /// Useful after the release functions, which return no status.
    pub fn last() -> Option<Error> {
        // SAFETY: both functions take no argument and are thread-safe.
        let code = unsafe { sys::ampx_last_status() };
        Status::from_code(code).map(|status| Error::new(status, last_message()))
    }

    /// The status.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The message (for library errors: `ampx_last_error()` of the call).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// True when the error stands for a panic caught at the C boundary (a
    /// panicking checkpoint segment), which is never allowed to unwind
    /// through the library.
    pub fn is_panic(&self) -> bool {
        self.panic
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

impl std::error::Error for Error {}

/// Copies the calling thread's `ampx_last_error()`.
fn last_message() -> String {
    // SAFETY: never NULL; valid until the next failing call on this thread,
    // and we copy it at once.
    unsafe { CStr::from_ptr(sys::ampx_last_error()) }.to_string_lossy().into_owned()
}

/// Reads a static C string owned by the library.
///
/// # Safety
/// `ptr` must be a non-NULL, NUL-terminated string that lives forever.
pub(crate) unsafe fn static_str(ptr: *const std::os::raw::c_char) -> &'static str {
    CStr::from_ptr(ptr).to_str().unwrap_or("<non-UTF-8>")
}

/// The status a Rust callback (a checkpointed segment, a grad-ready hook)
/// returns to the library for `error`, after making the error's message
/// the thread's last error (`ampx_set_error`): the ampx call that ran the
/// callback then fails with the callback's own words, for C code reading
/// `ampx_last_error()` as for [`Error::last`]. Never `AMPX_OK`.
pub(crate) fn callback_status(error: &Error) -> sys::ampx_status {
    let code = match error.status.code() {
        sys::AMPX_OK => sys::AMPX_ERR_INTERNAL,
        code => code,
    };
    // A C string cannot hold NUL: such bytes become U+FFFD.
    let message = CString::new(error.message.replace('\0', "\u{fffd}")).unwrap_or_default();
    // SAFETY: a NUL-terminated message, borrowed for the call only.
    unsafe { sys::ampx_set_error(code, message.as_ptr()) }
}

/// The text of a caught panic's payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_string()
    }
}

/// `text` as a C string; `what` names it in the error for a NUL byte.
pub(crate) fn c_string(text: &str, what: &str) -> Result<CString> {
    CString::new(text).map_err(|_| Error::new(Status::InvalidArgument, format!("{what} contains a NUL byte")))
}

/// Copies a C string the library owns ("" for NULL).
///
/// # Safety
/// `ptr` must be NULL or a NUL-terminated string valid during the call.
pub(crate) unsafe fn owned_string(ptr: *const std::os::raw::c_char) -> String {
    if ptr.is_null() {
        String::new()
    } else {
        CStr::from_ptr(ptr).to_string_lossy().into_owned()
    }
}

/// Turns a status into `Ok(())` or the library's error.
pub(crate) fn check(status: sys::ampx_status) -> Result<()> {
    match Status::from_code(status) {
        None => Ok(()),
        Some(status) => Err(Error::new(status, last_message())),
    }
}

thread_local! {
    static SEGMENT_ERROR: RefCell<Option<Error>> = const { RefCell::new(None) };
    static HOOK_ERROR: RefCell<Option<Error>> = const { RefCell::new(None) };
}

/// A kind of Rust callback that ampx runs inside its own calls. The error of
/// the last one of a kind that failed on this thread waits in that kind's
/// slot: the library hears its status and message (`callback_status`); the
/// binding keeps the `Error` itself too, to return it whole -- a panic stays
/// a panic (`Error::is_panic`) -- when the C call comes back.
#[derive(Clone, Copy)]
pub(crate) enum Callback {
    /// A checkpointed segment (`Context::checkpoint`).
    Segment,
    /// The grad-ready hook (`Context::set_grad_ready_hook`).
    Hook,
}

impl Callback {
    fn slot(self) -> &'static std::thread::LocalKey<RefCell<Option<Error>>> {
        match self {
            Callback::Segment => &SEGMENT_ERROR,
            Callback::Hook => &HOOK_ERROR,
        }
    }

    /// Empties the slot, before a call that may run this callback.
    pub(crate) fn clear(self) {
        self.take();
    }

    fn take(self) -> Option<Error> {
        self.slot().with(|slot| slot.borrow_mut().take())
    }

    /// Runs a callback's body for ampx: `AMPX_OK`, or, when it fails or
    /// panics (caught: a panic must not unwind into C), the status for ampx
    /// with its error kept in the slot.
    pub(crate) fn run(self, body: impl FnOnce() -> Result<()>) -> sys::ampx_status {
        let error = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
            Ok(Ok(())) => return sys::AMPX_OK,
            Ok(Err(e)) => e,
            Err(payload) => {
                let what = match self {
                    Callback::Segment => "the segment",
                    Callback::Hook => "the hook",
                };
                Error::panicked(format!("{what} panicked: {}", panic_message(&*payload)))
            }
        };
        let code = callback_status(&error);
        self.slot().with(|slot| *slot.borrow_mut() = Some(error));
        code
    }

    /// The error of `function`, a call that ran the callback, which failed with `e`.
    fn failed(self, function: &str, e: Error) -> Error {
        let what = match self {
            Callback::Segment => "the checkpointed segment",
            Callback::Hook => "the grad-ready hook",
        };
        Error { status: e.status, message: format!("{function}: {what} failed: {}", e.message), panic: e.panic }
    }
}

/// As [`check`], for calls that may run Rust segments (checkpoint, backward):
/// when a segment failed during the call, its error is reported.
pub(crate) fn check_with_segments(status: sys::ampx_status, function: &str) -> Result<()> {
    let library = check(status);
    match (library, Callback::Segment.take()) {
        (Ok(()), _) => Ok(()),
        (Err(_), Some(e)) => Err(Callback::Segment.failed(function, e)),
        (Err(e), None) => Err(e),
    }
}

/// As [`check`], for calls that may run a Rust grad-ready hook (backward,
/// grad_ready): when the hook failed during the call, its error is reported;
/// otherwise as [`check_with_segments`].
pub(crate) fn check_with_hooks(status: sys::ampx_status, function: &str) -> Result<()> {
    match Callback::Hook.take() {
        Some(e) if status != sys::AMPX_OK => {
            Callback::Segment.clear();
            Err(Callback::Hook.failed(function, e))
        }
        _ => check_with_segments(status, function),
    }
}
