//! Higher-order gradients: [`grad`] (torch.autograd.grad) and backward's
//! `retain_graph` / `create_graph` ([`Tensor::backward_with`]).
use std::ptr;

use ampx_sys as sys;

use crate::error::{check, check_with_hooks, Callback, Error, Result, Status};
use crate::ops::run_optional_outputs;
use crate::scaler::Scaler;
use crate::tensor::Tensor;

/// torch's `retain_graph=None` (the value of `create_graph`) is -1 in C.
fn retain_raw(retain_graph: Option<bool>) -> i32 {
    retain_graph.map_or(-1, i32::from)
}

fn retain_from_raw(raw: i32) -> Option<bool> {
    (raw >= 0).then(|| raw != 0)
}

/// Options of [`grad`] (`ampx_grad_options`), torch.autograd.grad's
/// keywords. `Default` is the library's: no `create_graph`, `retain_graph`
/// following it, no `allow_unused`. Set fields directly or chain the
/// methods of the same names:
/// `GradOptions::default().create_graph(true).allow_unused(true)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GradOptions {
    /// Record the computation of the gradients, so they can be
    /// differentiated again (to any order).
    pub create_graph: bool,
    /// Keep the records this call runs for another backward; `None`: the
    /// value of `create_graph` (torch's default). Without it, a later
    /// backward that needs them fails with [`Status::Order`].
    pub retain_graph: Option<bool>,
    /// An input no output reaches gets `None` instead of an error.
    pub allow_unused: bool,
}

impl Default for GradOptions {
    fn default() -> Self {
        // SAFETY: thread-safe, no arguments.
        let o = unsafe { sys::ampx_grad_options_default() };
        GradOptions {
            create_graph: o.create_graph != 0,
            retain_graph: retain_from_raw(o.retain_graph),
            allow_unused: o.allow_unused != 0,
        }
    }
}

impl GradOptions {
    /// Sets `create_graph`.
    pub fn create_graph(mut self, create_graph: bool) -> Self {
        self.create_graph = create_graph;
        self
    }

    /// Sets `retain_graph` (`None`: follow `create_graph`).
    pub fn retain_graph(mut self, retain_graph: impl Into<Option<bool>>) -> Self {
        self.retain_graph = retain_graph.into();
        self
    }

    /// Sets `allow_unused`.
    pub fn allow_unused(mut self, allow_unused: bool) -> Self {
        self.allow_unused = allow_unused;
        self
    }

    fn to_raw(self) -> sys::ampx_grad_options {
        // SAFETY: thread-safe, no arguments.
        let mut o = unsafe { sys::ampx_grad_options_default() };
        o.create_graph = self.create_graph.into();
        o.retain_graph = retain_raw(self.retain_graph);
        o.allow_unused = self.allow_unused.into();
        o
    }
}

/// Options of [`Tensor::backward_with`] (`ampx_backward_options`). The
/// `Default` (the library's) makes it [`Tensor::backward`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackwardOptions {
    /// Keep the tape for another backward over the same graph; `None`: the
    /// value of `create_graph`. Grad-ready hooks and data-parallel
    /// reductions run only in a backward that does not retain the graph.
    pub retain_graph: Option<bool>,
    /// Compute the gradients with recorded ops: each reached leaf's gradient
    /// becomes a new tensor (the old one plus this one) that can be
    /// differentiated.
    pub create_graph: bool,
}

impl Default for BackwardOptions {
    fn default() -> Self {
        // SAFETY: thread-safe, no arguments.
        let o = unsafe { sys::ampx_backward_options_default() };
        BackwardOptions { retain_graph: retain_from_raw(o.retain_graph), create_graph: o.create_graph != 0 }
    }
}

impl BackwardOptions {
    /// Sets `retain_graph` (`None`: follow `create_graph`).
    pub fn retain_graph(mut self, retain_graph: impl Into<Option<bool>>) -> Self {
        self.retain_graph = retain_graph.into();
        self
    }

    /// Sets `create_graph`.
    pub fn create_graph(mut self, create_graph: bool) -> Self {
        self.create_graph = create_graph;
        self
    }

    fn to_raw(self) -> sys::ampx_backward_options {
        // SAFETY: thread-safe, no arguments.
        let mut o = unsafe { sys::ampx_backward_options_default() };
        o.retain_graph = retain_raw(self.retain_graph);
        o.create_graph = self.create_graph.into();
        o
    }
}

/// The gradients of `outputs` with respect to `inputs`, as
/// torch.autograd.grad (`ampx_grad`): element i is
/// `sum_k d<outputs[k], grad_outputs[k]>/d inputs[i]`, a new tensor of
/// `inputs[i]`'s shape and dtype owned by the caller, or `None` for an input
/// no output reaches when `options.allow_unused` (else that input is an
/// error naming it).
///
/// Inputs are leaves that require grad or tensors recorded ops made (then
/// the gradient flowing into that tensor). `grad_outputs` is `None`, or one
/// entry per output: a tensor of that output's shape and dtype, or `None`
/// for ones, which only one-element outputs may take (a non-scalar output
/// without one is [`Status::Shape`]). Nothing accumulates into
/// [`Tensor::grad`]; no grad-ready hook or data-parallel reduction runs. On
/// any error nothing has changed.
pub fn grad(
    outputs: &[&Tensor],
    inputs: &[&Tensor],
    grad_outputs: Option<&[Option<&Tensor>]>,
    options: &GradOptions,
) -> Result<Vec<Option<Tensor>>> {
    let raw = |ts: &[&Tensor]| ts.iter().map(|t| t.as_raw()).collect::<Vec<_>>();
    let outs = raw(outputs);
    let ins = raw(inputs);
    let seeds = match grad_outputs {
        None => None,
        Some(seeds) if seeds.len() != outputs.len() => {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "ampx::grad: grad_outputs has {} entries for {} outputs; give one (or None) per output",
                    seeds.len(),
                    outputs.len()
                ),
            ))
        }
        Some(seeds) => Some(seeds.iter().map(|t| t.map_or(ptr::null_mut(), Tensor::as_raw)).collect::<Vec<_>>()),
    };
    let o = options.to_raw();
    let array = |v: &Vec<sys::ampx_tensor>| if v.is_empty() { ptr::null() } else { v.as_ptr() };
    let call = |grads: *mut sys::ampx_tensor| {
        // SAFETY: the arrays hold live handles (or NULL seeds) and their
        // lengths; `grads` has room for one handle per input; `o` outlives
        // the call.
        check(unsafe {
            sys::ampx_grad(
                array(&outs),
                outs.len(),
                seeds.as_ref().map_or(ptr::null(), array),
                array(&ins),
                ins.len(),
                &o,
                grads,
            )
        })
    };
    let mut grads = vec![ptr::null_mut(); ins.len()];
    match outputs.first() {
        Some(first) => run_optional_outputs(first.raw_context()?, &mut grads, call),
        // No output: the library refuses the call (its message says why).
        None => call(grads.as_mut_ptr()).map(|()| Vec::new()),
    }
}

impl Tensor {
    /// [`Tensor::backward`] with torch's `retain_graph` and `create_graph`
    /// (`ampx_backward_ex`). With `retain_graph` the tape survives for
    /// another backward (gradients accumulate, hooks wait for the final
    /// pass); without it, a second backward through the freed records
    /// fails with [`Status::Order`] (naming retain_graph). With
    /// `create_graph` each reached leaf's [`Tensor::grad`] is replaced by a
    /// new recorded tensor that can be differentiated (a gradient attached
    /// with [`Tensor::set_grad`] is not written to then).
    pub fn backward_with(&self, scaler: Option<&Scaler>, options: &BackwardOptions) -> Result<()> {
        Callback::Segment.clear();
        Callback::Hook.clear();
        let scaler = scaler.map_or(ptr::null_mut(), Scaler::as_raw);
        let o = options.to_raw();
        // SAFETY: live tensor and scaler (or NULL); `o` outlives the call.
        check_with_hooks(unsafe { sys::ampx_backward_ex(self.as_raw(), scaler, &o) }, "ampx_backward_ex")
    }
}
