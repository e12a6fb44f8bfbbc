//! Training checkpoint files (section 12 of ampx.h, EXPERIMENTAL): tensors,
//! an optimizer's state and a scaler's state in one crash-safe file, to
//! resume training bit for bit.
use std::ffi::CString;
use std::path::Path;
use std::ptr;

use ampx_sys as sys;

use crate::error::{check, Error, Result, Status};
use crate::fp8::Fp8Recipe;
use crate::optim::Optimizer;
use crate::scaler::Scaler;
use crate::tensor::Tensor;

/// A path as the C API takes it (`what` names it in errors: "a checkpoint
/// path").
pub(crate) fn path_arg(path: &Path, what: &str) -> Result<CString> {
    #[cfg(unix)]
    let bytes = {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes().to_vec()
    };
    #[cfg(not(unix))]
    let bytes = path
        .to_str()
        .ok_or_else(|| Error::new(Status::InvalidArgument, format!("{what} that is not UTF-8")))?
        .as_bytes()
        .to_vec();
    CString::new(bytes).map_err(|_| Error::new(Status::InvalidArgument, format!("{what} with a NUL byte")))
}

type Call = unsafe extern "C" fn(
    *const std::os::raw::c_char,
    *const sys::ampx_tensor,
    usize,
    sys::ampx_optimizer,
    sys::ampx_scaler,
) -> sys::ampx_status;

fn call(f: Call, path: &Path, tensors: &[&Tensor], optimizer: Option<&Optimizer>, scaler: Option<&Scaler>) -> Result<()> {
    let path = path_arg(path, "a checkpoint path")?;
    let raw: Vec<sys::ampx_tensor> = tensors.iter().map(|t| t.as_raw()).collect();
    let optimizer = optimizer.map_or(ptr::null_mut(), Optimizer::as_raw);
    let scaler = scaler.map_or(ptr::null_mut(), Scaler::as_raw);
    // SAFETY: a NUL-terminated path and live (or NULL) handles, all
    // borrowed for the call only.
    check(unsafe { f(path.as_ptr(), raw.as_ptr(), raw.len(), optimizer, scaler) })
}

/// Writes `tensors` (with their names, dtypes and shapes), the optimizer's
/// state and the scaler's state to `path`, replacing it atomically
/// (`ampx_checkpoint_file_save`). Only between iterations (else
/// `Status::Order`). Synchronizes.
pub fn save_checkpoint(
    path: impl AsRef<Path>,
    tensors: &[&Tensor],
    optimizer: Option<&Optimizer>,
    scaler: Option<&Scaler>,
) -> Result<()> {
    call(sys::ampx_checkpoint_file_save, path.as_ref(), tensors, optimizer, scaler)
}

/// Restores a file written by [`save_checkpoint`] into the same list of
/// tensors and an optimizer/scaler like the saved ones
/// (`ampx_checkpoint_file_load`); `None` skips that part of the file. The
/// whole file is validated before anything changes.
pub fn load_checkpoint(
    path: impl AsRef<Path>,
    tensors: &[&Tensor],
    optimizer: Option<&Optimizer>,
    scaler: Option<&Scaler>,
) -> Result<()> {
    call(sys::ampx_checkpoint_file_load, path.as_ref(), tensors, optimizer, scaler)
}

type Fp8Call = unsafe extern "C" fn(
    *const std::os::raw::c_char,
    *const sys::ampx_tensor,
    usize,
    sys::ampx_optimizer,
    sys::ampx_scaler,
    sys::ampx_fp8_recipe,
) -> sys::ampx_status;

fn call_fp8(
    f: Fp8Call,
    path: &Path,
    tensors: &[&Tensor],
    optimizer: Option<&Optimizer>,
    scaler: Option<&Scaler>,
    recipe: Option<&Fp8Recipe>,
) -> Result<()> {
    let path = path_arg(path, "a checkpoint path")?;
    let raw: Vec<sys::ampx_tensor> = tensors.iter().map(|t| t.as_raw()).collect();
    let optimizer = optimizer.map_or(ptr::null_mut(), Optimizer::as_raw);
    let scaler = scaler.map_or(ptr::null_mut(), Scaler::as_raw);
    let recipe = recipe.map_or(ptr::null_mut(), Fp8Recipe::as_raw);
    // SAFETY: as in `call`, plus a live (or NULL) recipe.
    check(unsafe { f(path.as_ptr(), raw.as_ptr(), raw.len(), optimizer, scaler, recipe) })
}

/// [`save_checkpoint`] plus an FP8 recipe's options and per-slot state
/// (scales, amaxes, histories) in a section of its own
/// (`ampx_checkpoint_file_save_fp8`).
pub fn save_checkpoint_fp8(
    path: impl AsRef<Path>,
    tensors: &[&Tensor],
    optimizer: Option<&Optimizer>,
    scaler: Option<&Scaler>,
    recipe: Option<&Fp8Recipe>,
) -> Result<()> {
    call_fp8(sys::ampx_checkpoint_file_save_fp8, path.as_ref(), tensors, optimizer, scaler, recipe)
}

/// [`load_checkpoint`] plus the recipe's saved state, matched by slot name
/// (`ampx_checkpoint_file_load_fp8`): `recipe` must have the saved options
/// (else `Status::InvalidArgument`, nothing changed).
pub fn load_checkpoint_fp8(
    path: impl AsRef<Path>,
    tensors: &[&Tensor],
    optimizer: Option<&Optimizer>,
    scaler: Option<&Scaler>,
    recipe: Option<&Fp8Recipe>,
) -> Result<()> {
    call_fp8(sys::ampx_checkpoint_file_load_fp8, path.as_ref(), tensors, optimizer, scaler, recipe)
}
