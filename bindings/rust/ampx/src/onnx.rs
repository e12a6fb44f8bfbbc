//! ONNX export (section 19 of ampx.h, EXPERIMENTAL): a forward pass recorded
//! on the tape written as an ONNX model for ONNX Runtime and the engines'
//! inference runtimes. Record the forward with grad mode on and each input
//! requiring grad, then export before backward.
use std::ffi::CString;
use std::os::raw::c_char;
use std::path::Path;
use std::ptr;

use ampx_sys as sys;

use crate::checkpoint_file::path_arg;
use crate::error::{c_string, check, Result};
use crate::tensor::Tensor;

/// The options of [`export_onnx`] (`ampx_onnx_options`); `Default` is the
/// header's: opset 17, IR 8, static shapes, F32 weights.
#[derive(Clone, Debug, Default)]
pub struct OnnxOptions {
    /// ai.onnx opset, 9 to 23; 0: 17.
    pub opset: i32,
    /// IR version; 0: 8 (or the opset's, if newer).
    pub ir_version: i32,
    /// The name of dim 0 of every input and output (a symbolic batch).
    pub batch_dim: Option<String>,
    /// FLOAT16 initializers, each followed by a Cast to FLOAT.
    pub f16_weights: bool,
    /// `sys::AMPX_ONNX_EXTERNAL_*`; 0: beyond 2 GiB only.
    pub external_data: i32,
}

fn named(list: &[(&str, &Tensor)], what: &str) -> Result<(Vec<sys::ampx_tensor>, Vec<CString>)> {
    let handles = list.iter().map(|(_, t)| t.as_raw()).collect();
    let names = list.iter().map(|(n, _)| c_string(n, what)).collect::<Result<Vec<_>>>()?;
    Ok((handles, names))
}

fn pointers(strings: &[CString]) -> Vec<*const c_char> {
    strings.iter().map(|s| s.as_ptr()).collect()
}

/// Writes the recorded computation of `outputs` from `inputs`, each a
/// (graph name, tensor) pair, to `path` as an ONNX model
/// (`ampx_onnx_export`); `constants` are extra outputs holding those
/// tensors' values. An output that is an input passes it through. The file
/// is replaced atomically; on an error no file is left.
pub fn export_onnx(path: impl AsRef<Path>, inputs: &[(&str, &Tensor)], outputs: &[(&str, &Tensor)],
                   constants: &[(&str, &Tensor)], options: &OnnxOptions) -> Result<()> {
    let path = path_arg(path.as_ref(), "an ONNX model path")?;
    let (ins, in_names) = named(inputs, "an input name")?;
    let (outs, out_names) = named(outputs, "an output name")?;
    let (consts, const_names) = named(constants, "a constant output name")?;
    let (in_ptrs, out_ptrs, const_ptrs) = (pointers(&in_names), pointers(&out_names), pointers(&const_names));
    let batch = options.batch_dim.as_deref().map(|b| c_string(b, "batch_dim")).transpose()?;
    // SAFETY: no arguments; returns the defaults by value.
    let mut o = unsafe { sys::ampx_onnx_options_default() };
    o.opset = options.opset;
    o.ir_version = options.ir_version;
    o.batch_dim = batch.as_ref().map_or(ptr::null(), |b| b.as_ptr());
    o.weight_type = if options.f16_weights { sys::AMPX_ONNX_WEIGHTS_F16 } else { sys::AMPX_ONNX_WEIGHTS_F32 };
    o.external_data = options.external_data;
    o.constant_outputs = consts.as_ptr();
    o.constant_output_names = const_ptrs.as_ptr();
    o.constant_output_count = consts.len();
    // SAFETY: live tensors; every string NUL-terminated; the arrays and
    // strings are borrowed for the call only and outlive it.
    check(unsafe {
        sys::ampx_onnx_export(path.as_ptr(), ins.as_ptr(), in_ptrs.as_ptr(), ins.len(), outs.as_ptr(),
                              out_ptrs.as_ptr(), outs.len(), &o)
    })
}
