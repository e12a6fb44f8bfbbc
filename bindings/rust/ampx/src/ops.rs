//! The ops of section 11 of ampx.h, as methods of [`Tensor`] (and
//! [`concat`]). Each returns a new [`Tensor`] owned by the caller; ops record
//! themselves on the context's tape when grad mode is on and an input
//! requires a gradient, and follow the autocast region that is entered.
use std::ptr;

use ampx_sys as sys;

use crate::error::{check, Error, Result, Status};
use crate::tensor::{shape_arg, Tensor};

/// Loss reductions (`ampx_reduction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// The mean over the elements (or the counted labels).
    Mean,
    /// The sum.
    Sum,
    /// No reduction: one F32 loss per row or element (torch's `reduction='none'`).
    None,
}

impl Reduction {
    fn to_raw(self) -> sys::ampx_reduction {
        match self {
            Reduction::Mean => sys::AMPX_REDUCTION_MEAN,
            Reduction::Sum => sys::AMPX_REDUCTION_SUM,
            Reduction::None => sys::AMPX_REDUCTION_NONE,
        }
    }
}

/// Options of [`Tensor::scaled_dot_product_attention`]
/// (`ampx_attention_options`). The default: not causal, scale 1 / sqrt(D),
/// no dropout.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AttentionOptions {
    /// Query i attends to keys j <= i only (torch's `is_causal`).
    pub causal: bool,
    /// The score scale; `None` is 1 / sqrt(head_dim).
    pub scale: Option<f64>,
    /// The probability of dropping each attention weight, in [0, 1).
    pub dropout_p: f64,
}

/// Options of [`Tensor::conv2d`] (`ampx_conv2d_options`), pairs as
/// (rows, columns). The default: stride 1, no padding, no dilation, one group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dOptions {
    /// Rows and columns between windows, each at least 1.
    pub stride: [i64; 2],
    /// Zeros added on each side, each at least 0.
    pub padding: [i64; 2],
    /// Spacing of the kernel's taps, each at least 1.
    pub dilation: [i64; 2],
    /// Channel groups (in_channels for a depthwise convolution).
    pub groups: i64,
}

impl Default for Conv2dOptions {
    fn default() -> Self {
        Conv2dOptions { stride: [1, 1], padding: [0, 0], dilation: [1, 1], groups: 1 }
    }
}

/// Options of [`Tensor::max_pool2d`] and [`Tensor::avg_pool2d`]
/// (`ampx_pool2d_options`), torch's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2dOptions {
    /// Rows and columns between windows; `None` is the kernel size.
    pub stride: Option<[i64; 2]>,
    /// Added on each side, at most half the (dilated) kernel.
    pub padding: [i64; 2],
    /// Max pooling only; average takes [1, 1].
    pub dilation: [i64; 2],
    /// Output extents round up.
    pub ceil_mode: bool,
    /// Average only: padding counts in the divisor.
    pub count_include_pad: bool,
    /// Average only: divide by this instead of the window's size.
    pub divisor_override: Option<i64>,
}

impl Default for Pool2dOptions {
    fn default() -> Self {
        Pool2dOptions {
            stride: None,
            padding: [0, 0],
            dilation: [1, 1],
            ceil_mode: false,
            count_include_pad: true,
            divisor_override: None,
        }
    }
}

fn pool_options(options: &Pool2dOptions) -> sys::ampx_pool2d_options {
    // SAFETY: no arguments; returns a struct by value.
    let mut raw = unsafe { sys::ampx_pool2d_options_default() };
    raw.stride = options.stride.unwrap_or([0, 0]);
    raw.padding = options.padding;
    raw.dilation = options.dilation;
    raw.ceil_mode = options.ceil_mode.into();
    raw.count_include_pad = options.count_include_pad.into();
    raw.divisor_override = options.divisor_override.unwrap_or(0);
    raw
}

/// Activations fused into [`Tensor::linear`] (`ampx_activation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Activation {
    /// None.
    None,
    /// ReLU.
    Relu,
    /// GELU (erf form).
    Gelu,
}

impl Activation {
    fn to_raw(self) -> sys::ampx_activation {
        match self {
            Activation::None => sys::AMPX_ACTIVATION_NONE,
            Activation::Relu => sys::AMPX_ACTIVATION_RELU,
            Activation::Gelu => sys::AMPX_ACTIVATION_GELU,
        }
    }
}

/// Runs an op (or `ampx_checkpoint_segment`) on `ctx` and returns its outputs as
/// owned tensors.
///
/// While a scope is open an op's output is borrowed from the innermost
/// scope, otherwise it is the caller's. Rather than ask which applies
/// (`ampx_scope_depth`) and branch, the call runs inside a scope of its
/// own: every output is then
/// borrowed from that scope, retained here, and the pop drops the scope's
/// reference -- whatever scopes the program (or C code sharing the context)
/// has open, each `Tensor` owns exactly one reference.
///
/// One exception: once every `Context` value of the context is gone, the
/// library refuses `ampx_scope_push` (a stale handle) and no scope can be
/// open (closing the last handle drops them, and none can be pushed after),
/// so the outputs are the caller's.
pub(crate) fn run_outputs(
    ctx: sys::ampx_context,
    outputs: &mut [sys::ampx_tensor],
    call: impl FnOnce(*mut sys::ampx_tensor) -> Result<()>,
) -> Result<Vec<Tensor>> {
    run_optional_outputs(ctx, outputs, call)?
        .into_iter()
        .map(|t| t.ok_or_else(|| Error::new(Status::Internal, "ampx returned a NULL output")))
        .collect()
}

/// [`run_outputs`] for calls that may leave an output NULL (`ampx_grad`
/// with `allow_unused`): that output is `None`.
pub(crate) fn run_optional_outputs(
    ctx: sys::ampx_context,
    outputs: &mut [sys::ampx_tensor],
    call: impl FnOnce(*mut sys::ampx_tensor) -> Result<()>,
) -> Result<Vec<Option<Tensor>>> {
    // SAFETY: `ctx` is the live context of a live input.
    match check(unsafe { sys::ampx_scope_push(ctx) }) {
        Ok(()) => {}
        Err(e) if e.status() == Status::StaleHandle => {
            call(outputs.as_mut_ptr())?;
            // SAFETY: with no scope open each output is a new reference
            // owned by the caller (or NULL).
            return Ok(outputs.iter().map(|&raw| (!raw.is_null()).then(|| unsafe { Tensor::from_raw(raw) })).collect());
        }
        Err(e) => return Err(e),
    }
    let result = call(outputs.as_mut_ptr()).and_then(|()| {
        outputs
            .iter()
            // SAFETY: each output is NULL or a live handle borrowed from our scope.
            .map(|&raw| if raw.is_null() { Ok(None) } else { unsafe { Tensor::from_borrowed(raw) }.map(Some) })
            .collect::<Result<Vec<_>>>()
    });
    // SAFETY: pops the scope pushed above (releasing its references).
    let popped = check(unsafe { sys::ampx_scope_pop(ctx) });
    let tensors = result?;
    popped?;
    Ok(tensors)
}

/// One output of an op whose first input is `first`.
pub(crate) fn run_op(first: &Tensor, call: impl FnOnce(*mut sys::ampx_tensor) -> sys::ampx_status) -> Result<Tensor> {
    let ctx = first.raw_context()?;
    let mut out = [ptr::null_mut()];
    let mut tensors = run_outputs(ctx, &mut out, |out| check(call(out)))?;
    Ok(tensors.pop().expect("one output"))
}

fn opt(t: Option<&Tensor>) -> sys::ampx_tensor {
    t.map_or(ptr::null_mut(), Tensor::as_raw)
}

macro_rules! unary_ops {
    ($($(#[$doc:meta])* $name:ident => $c:ident;)*) => {
        impl Tensor {$(
            $(#[$doc])*
            pub fn $name(&self) -> Result<Tensor> {
                // SAFETY: live input, valid out pointer.
                run_op(self, |out| unsafe { sys::$c(self.as_raw(), out) })
            }
        )*}
    };
}

macro_rules! binary_ops {
    ($($(#[$doc:meta])* $name:ident => $c:ident;)*) => {
        impl Tensor {$(
            $(#[$doc])*
            pub fn $name(&self, other: &Tensor) -> Result<Tensor> {
                // SAFETY: live inputs, valid out pointer.
                run_op(self, |out| unsafe { sys::$c(self.as_raw(), other.as_raw(), out) })
            }
        )*}
    };
}

binary_ops! {
    /// `self + other` element-wise ("add": promote); `other` may be a row
    /// vector matching the last dimension.
    add => ampx_add;
    /// `self - other` ("sub": promote), broadcasting as [`Tensor::add`].
    sub => ampx_sub;
    /// `self * other` ("mul": promote), broadcasting as [`Tensor::add`].
    mul => ampx_mul;
    /// `self / other` ("div": promote; IEEE division), broadcasting as
    /// [`Tensor::add`].
    div => ampx_div;
    /// Matrix product with `torch.matmul`'s shapes ("matmul": lower
    /// precision): `[..., M, K] x [..., K, N]` with broadcasting batch
    /// dimensions, a 1-D operand as one row (a) or column (b) whose extent
    /// the output drops; accumulates in fp32.
    matmul => ampx_matmul;
}

unary_ops! {
    /// ReLU ("relu": keep).
    relu => ampx_relu;
    /// GELU, erf form ("gelu": keep).
    gelu => ampx_gelu;
    /// GELU, tanh approximation ("gelu_tanh": keep).
    gelu_tanh => ampx_gelu_tanh;
    /// SiLU ("silu": keep).
    silu => ampx_silu;
    /// Logistic sigmoid ("sigmoid": keep).
    sigmoid => ampx_sigmoid;
    /// Hyperbolic tangent ("tanh": keep).
    tanh => ampx_tanh;
    /// e^x ("exp": fp32).
    exp => ampx_exp;
    /// Natural logarithm ("log": fp32).
    log => ampx_log;
    /// Square root ("sqrt": keep).
    sqrt => ampx_sqrt;
    /// 1 / sqrt(x) ("rsqrt": fp32).
    rsqrt => ampx_rsqrt;
    /// Sum of all elements, one element ("sum": fp32).
    sum => ampx_sum;
    /// Mean of all elements, one element of x's dtype, accumulated in fp32
    /// ("mean": keep).
    mean => ampx_mean;
    /// Softmax over the last dimension ("softmax": fp32).
    softmax => ampx_softmax;
    /// Log-softmax over the last dimension ("log_softmax": fp32).
    log_softmax => ampx_log_softmax;
}

impl Tensor {
    /// `self * scale + shift` element-wise, in the tensor's type ("affine": keep).
    pub fn affine(&self, scale: f64, shift: f64) -> Result<Tensor> {
        // SAFETY: live input.
        run_op(self, |out| unsafe { sys::ampx_affine(self.as_raw(), scale, shift, out) })
    }

    /// Cross-entropy of logits `[N, C]` (self) against labels `[N]` (I32 or
    /// I64); labels equal to `ignore_index` are skipped ("cross_entropy": fp32).
    pub fn cross_entropy(&self, labels: &Tensor, reduction: Reduction, ignore_index: i64) -> Result<Tensor> {
        // SAFETY: live inputs.
        run_op(self, |out| unsafe {
            sys::ampx_cross_entropy(self.as_raw(), labels.as_raw(), reduction.to_raw(), ignore_index, out)
        })
    }

    /// Cross-entropy with class weights `[C]` (optional) and label smoothing
    /// in [0, 1], as torch's cross_entropy ("cross_entropy": fp32).
    pub fn cross_entropy_ex(
        &self,
        labels: &Tensor,
        weight: Option<&Tensor>,
        reduction: Reduction,
        ignore_index: i64,
        label_smoothing: f64,
    ) -> Result<Tensor> {
        // SAFETY: no arguments; returns a struct by value.
        let mut o = unsafe { sys::ampx_cross_entropy_options_default() };
        o.reduction = reduction.to_raw();
        o.ignore_index = ignore_index;
        o.label_smoothing = label_smoothing;
        // SAFETY: live inputs (or NULL); o outlives the call.
        run_op(self, |out| unsafe {
            sys::ampx_cross_entropy_ex(self.as_raw(), labels.as_raw(), opt(weight), &o, out)
        })
    }

    /// Mean-squared error against `target` of the same shape ("mse_loss": fp32).
    pub fn mse_loss(&self, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
        // SAFETY: live inputs.
        run_op(self, |out| unsafe { sys::ampx_mse_loss(self.as_raw(), target.as_raw(), reduction.to_raw(), out) })
    }

    /// Binary cross-entropy of logits (self) against targets of the same
    /// shape ("bce_with_logits": fp32).
    pub fn bce_with_logits(&self, targets: &Tensor, reduction: Reduction) -> Result<Tensor> {
        // SAFETY: live inputs.
        run_op(self, |out| unsafe {
            sys::ampx_bce_with_logits(self.as_raw(), targets.as_raw(), reduction.to_raw(), out)
        })
    }

    /// [`Tensor::bce_with_logits`] with torch's `weight` and `pos_weight`
    /// (`ampx_bce_with_logits_ex`; "bce_with_logits": fp32): element i's
    /// loss is `-w_i [p_i t_i log sigmoid(x_i) + (1 - t_i) log(1 - sigmoid(x_i))]`.
    /// `weight` (`None`: 1) rescales each element's loss, `pos_weight`
    /// (`None`: 1) the positive term -- a `[C]` tensor applies along the
    /// last dimension of `[..., C]` logits. Each broadcasts to the logits'
    /// shape (aligned at the right, extents equal or 1), may be of any
    /// floating type, and is a constant (no gradient flows to it). The mean
    /// divides by the number of elements, whatever the weights.
    pub fn bce_with_logits_ex(
        &self,
        targets: &Tensor,
        weight: Option<&Tensor>,
        pos_weight: Option<&Tensor>,
        reduction: Reduction,
    ) -> Result<Tensor> {
        // SAFETY: no arguments; returns a struct by value.
        let mut o = unsafe { sys::ampx_bce_with_logits_options_default() };
        o.reduction = reduction.to_raw();
        // SAFETY: live inputs (or NULL); o outlives the call.
        run_op(self, |out| unsafe {
            sys::ampx_bce_with_logits_ex(self.as_raw(), targets.as_raw(), opt(weight), opt(pos_weight), &o, out)
        })
    }

    /// `activation(self W^T + bias)` ("linear": lower precision): self
    /// `[..., in]`, weight `[out, in]`, bias `[out]`.
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>, activation: Activation) -> Result<Tensor> {
        // SAFETY: live inputs (bias may be NULL).
        run_op(self, |out| unsafe {
            sys::ampx_linear(self.as_raw(), weight.as_raw(), opt(bias), activation.to_raw(), out)
        })
    }

    /// Layer normalisation over the last dimension ("layer_norm": fp32);
    /// weight and bias `[D]` are optional.
    pub fn layer_norm(&self, weight: Option<&Tensor>, bias: Option<&Tensor>, eps: f64) -> Result<Tensor> {
        // SAFETY: live inputs (or NULL).
        run_op(self, |out| unsafe { sys::ampx_layer_norm(self.as_raw(), opt(weight), opt(bias), eps, out) })
    }

    /// Batch normalisation of `[N, C]` or `[N, C, L]` per channel
    /// ("batch_norm": keep). `running` holds (running_mean, running_var),
    /// updated in place while training; all parameters are F32 `[C]`.
    pub fn batch_norm(
        &self,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        running: Option<(&Tensor, &Tensor)>,
        training: bool,
        momentum: f64,
        eps: f64,
    ) -> Result<Tensor> {
        let (mean, var) = running.map_or((ptr::null_mut(), ptr::null_mut()), |(m, v)| (m.as_raw(), v.as_raw()));
        // SAFETY: live inputs (or NULL).
        run_op(self, |out| unsafe {
            sys::ampx_batch_norm(self.as_raw(), opt(weight), opt(bias), mean, var, training.into(), momentum, eps, out)
        })
    }

    /// Inverted dropout with probability `p` while `training` ("dropout": keep).
    pub fn dropout(&self, p: f64, training: bool) -> Result<Tensor> {
        // SAFETY: live input.
        run_op(self, |out| unsafe { sys::ampx_dropout(self.as_raw(), p, training.into(), out) })
    }

    /// Scaled dot-product attention of this `q` `[B, H, Tq, D]` over `k`
    /// `[B, Hkv, Tk, D]` and `v` `[B, Hkv, Tk, Dv]` ("scaled_dot_product_attention":
    /// lower precision), as torch's: B may be any leading extents or none,
    /// Hkv divides H (grouped-query heads), `mask` broadcasts to
    /// `[B, H, Tq, Tk]` and is added (floating) or, I32/I64, marks with
    /// non-zero the keys that take part (torch's boolean mask). A scale of
    /// `Some(0.0)` is refused (the C API reads 0 as the default).
    pub fn scaled_dot_product_attention(
        &self,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        options: &AttentionOptions,
    ) -> Result<Tensor> {
        if options.scale == Some(0.0) {
            return Err(Error::new(Status::InvalidArgument, "scale is 0; ampx reads 0 as 1 / sqrt(D)"));
        }
        // SAFETY: no arguments; returns a struct by value.
        let mut raw = unsafe { sys::ampx_attention_options_default() };
        raw.causal = options.causal.into();
        raw.scale = options.scale.unwrap_or(0.0);
        raw.dropout_p = options.dropout_p;
        // SAFETY: live inputs (or NULL); raw outlives the call.
        run_op(self, |out| unsafe {
            sys::ampx_scaled_dot_product_attention(self.as_raw(), k.as_raw(), v.as_raw(), opt(mask), &raw, out)
        })
    }

    /// 2-D convolution of this `x` `[N, C, H, W]` (or `[C, H, W]`) with
    /// `weight` `[O, C / groups, kh, kw]` and an optional `bias` `[O]`
    /// ("conv2d": lower precision), as torch.nn.functional.conv2d.
    pub fn conv2d(&self, weight: &Tensor, bias: Option<&Tensor>, options: &Conv2dOptions) -> Result<Tensor> {
        // SAFETY: no arguments; returns a struct by value.
        let mut raw = unsafe { sys::ampx_conv2d_options_default() };
        raw.stride = options.stride;
        raw.padding = options.padding;
        raw.dilation = options.dilation;
        raw.groups = options.groups;
        // SAFETY: live inputs (or NULL); raw outlives the call.
        run_op(self, |out| unsafe { sys::ampx_conv2d(self.as_raw(), weight.as_raw(), opt(bias), &raw, out) })
    }

    /// Max pooling over `kernel` (rows, columns) windows ("max_pool2d": keep),
    /// as torch.nn.functional.max_pool2d.
    pub fn max_pool2d(&self, kernel: [i64; 2], options: &Pool2dOptions) -> Result<Tensor> {
        let raw = pool_options(options);
        // SAFETY: live input; raw outlives the call.
        run_op(self, |out| unsafe { sys::ampx_max_pool2d(self.as_raw(), kernel[0], kernel[1], &raw, out) })
    }

    /// Average pooling over `kernel` windows ("avg_pool2d": keep), as
    /// torch.nn.functional.avg_pool2d.
    pub fn avg_pool2d(&self, kernel: [i64; 2], options: &Pool2dOptions) -> Result<Tensor> {
        let raw = pool_options(options);
        // SAFETY: live input; raw outlives the call.
        run_op(self, |out| unsafe { sys::ampx_avg_pool2d(self.as_raw(), kernel[0], kernel[1], &raw, out) })
    }

    /// Each channel's mean over H and W, `[N, C, 1, 1]` (torch's
    /// adaptive_avg_pool2d(x, 1)).
    pub fn global_avg_pool2d(&self) -> Result<Tensor> {
        // SAFETY: live input.
        run_op(self, |out| unsafe { sys::ampx_global_avg_pool2d(self.as_raw(), out) })
    }

    /// Rows of this table `[V, D]` at `indices` (I32 or I64) ("embedding": keep).
    pub fn embedding(&self, indices: &Tensor) -> Result<Tensor> {
        // SAFETY: live inputs.
        run_op(self, |out| unsafe { sys::ampx_embedding(self.as_raw(), indices.as_raw(), out) })
    }

    /// The elements with another shape, sharing memory ("reshape": keep);
    /// one extent may be -1.
    pub fn reshape(&self, shape: &[i64]) -> Result<Tensor> {
        let (ndim, dims) = shape_arg(shape)?;
        // SAFETY: live input; `dims` holds `ndim` extents.
        run_op(self, |out| unsafe { sys::ampx_reshape(self.as_raw(), ndim, dims, out) })
    }

    /// A contiguous copy with the dimensions reordered ("permute": keep):
    /// output dimension k is `dims[k]` of this tensor.
    pub fn permute(&self, dims: &[i32]) -> Result<Tensor> {
        let ndim = i32::try_from(dims.len()).map_err(|_| Error::new(Status::InvalidArgument, "too many dims"))?;
        // SAFETY: live input; dims outlives the call.
        run_op(self, |out| unsafe { sys::ampx_permute(self.as_raw(), ndim, dims.as_ptr(), out) })
    }

    /// Softmax over dimension `dim` ("softmax": fp32).
    pub fn softmax_dim(&self, dim: i32) -> Result<Tensor> {
        // SAFETY: live input.
        run_op(self, |out| unsafe { sys::ampx_softmax_dim(self.as_raw(), dim, out) })
    }

    /// Log-softmax over dimension `dim` ("log_softmax": fp32).
    pub fn log_softmax_dim(&self, dim: i32) -> Result<Tensor> {
        // SAFETY: live input.
        run_op(self, |out| unsafe { sys::ampx_log_softmax_dim(self.as_raw(), dim, out) })
    }

    /// The sum over `dims` (empty: all) in this tensor's dtype, as
    /// torch.sum(x, dims, keepdim) (accumulated in double).
    pub fn sum_dims(&self, dims: &[i32], keepdim: bool) -> Result<Tensor> {
        self.reduce_dims(dims, keepdim, sys::ampx_sum_dims)
    }

    /// The mean over `dims` (empty: all), as torch.mean(x, dims, keepdim).
    pub fn mean_dims(&self, dims: &[i32], keepdim: bool) -> Result<Tensor> {
        self.reduce_dims(dims, keepdim, sys::ampx_mean_dims)
    }

    /// The maximum over `dims` (empty: all), as torch.amax(x, dims, keepdim).
    pub fn amax(&self, dims: &[i32], keepdim: bool) -> Result<Tensor> {
        self.reduce_dims(dims, keepdim, sys::ampx_amax)
    }

    fn reduce_dims(
        &self,
        dims: &[i32],
        keepdim: bool,
        f: unsafe extern "C" fn(sys::ampx_tensor, *const i32, i32, i32, *mut sys::ampx_tensor) -> sys::ampx_status,
    ) -> Result<Tensor> {
        let ndims = i32::try_from(dims.len()).map_err(|_| Error::new(Status::InvalidArgument, "too many dims"))?;
        let ptr = if dims.is_empty() { ptr::null() } else { dims.as_ptr() };
        // SAFETY: live input; dims outlives the call.
        run_op(self, |out| unsafe { f(self.as_raw(), ptr, ndims, keepdim.into(), out) })
    }

    /// Pieces of `sizes` elements along `dim` (torch.split), each a new
    /// contiguous tensor ("split": keep); gradients flow back into the slices.
    pub fn split(&self, sizes: &[i64], dim: i32) -> Result<Vec<Tensor>> {
        let ctx = self.raw_context()?;
        let mut outs = vec![ptr::null_mut(); sizes.len()];
        run_outputs(ctx, &mut outs, |out| {
            // SAFETY: live input; `out` holds sizes.len() handles.
            check(unsafe { sys::ampx_split(self.as_raw(), sizes.as_ptr(), sizes.len(), dim, out) })
        })
    }

    /// At most `chunks` pieces of ceil(extent / chunks) elements along `dim`
    /// (torch.chunk).
    pub fn chunk(&self, chunks: i32, dim: i32) -> Result<Vec<Tensor>> {
        let shape = self.shape()?;
        let rank = shape.len() as i64;
        let d = if dim < 0 { i64::from(dim) + rank } else { i64::from(dim) };
        // How many pieces the library will make (an error of the call below
        // for a bad dim or chunks, reported by it).
        let pieces = match (usize::try_from(d).ok().and_then(|d| shape.get(d)), chunks) {
            (Some(&0), c) if c >= 1 => c as usize,
            (Some(&n), c) if c >= 1 => {
                let piece = (n + i64::from(c) - 1) / i64::from(c);
                ((n + piece - 1) / piece) as usize
            }
            _ => 1,
        };
        let ctx = self.raw_context()?;
        let mut outs = vec![ptr::null_mut(); pieces];
        run_outputs(ctx, &mut outs, |out| {
            let mut all = vec![ptr::null_mut(); chunks.max(1) as usize];
            let mut count = 0i32;
            // SAFETY: live input; `all` holds `chunks` handles.
            check(unsafe { sys::ampx_chunk(self.as_raw(), chunks, dim, all.as_mut_ptr(), &mut count) })?;
            if count as usize != pieces {
                return Err(Error::new(Status::Internal, "chunk made an unexpected number of pieces"));
            }
            // SAFETY: `out` holds `pieces` handles.
            unsafe { ptr::copy_nonoverlapping(all.as_ptr(), out, pieces) };
            Ok(())
        })
    }

    /// This tensor with `value` where `mask` (any dtype; non-zero is set) is
    /// set; the mask broadcasts to this tensor's shape ("masked_fill": keep).
    pub fn masked_fill(&self, mask: &Tensor, value: f64) -> Result<Tensor> {
        // SAFETY: live inputs.
        run_op(self, |out| unsafe { sys::ampx_masked_fill(self.as_raw(), mask.as_raw(), value, out) })
    }

    /// Element-wise power with a number exponent ("pow": fp32).
    pub fn pow(&self, exponent: f64) -> Result<Tensor> {
        // SAFETY: live input.
        run_op(self, |out| unsafe { sys::ampx_pow(self.as_raw(), exponent, out) })
    }

    /// Rotary position embeddings of this `[..., T, D]` tensor with tables
    /// `[T, D / 2]` (rotate-half pairs, or (2i, 2i + 1) when `interleaved`).
    pub fn rotary_embedding(&self, cos: &Tensor, sin: &Tensor, interleaved: bool) -> Result<Tensor> {
        // SAFETY: live inputs.
        run_op(self, |out| unsafe {
            sys::ampx_rotary_embedding(self.as_raw(), cos.as_raw(), sin.as_raw(), interleaved.into(), out)
        })
    }

    /// RMS normalisation over the last dimension ("rms_norm": fp32), as
    /// torch.nn.functional.rms_norm; `weight` `[D]` is optional.
    pub fn rms_norm(&self, weight: Option<&Tensor>, eps: f64) -> Result<Tensor> {
        // SAFETY: live inputs (or NULL).
        run_op(self, |out| unsafe { sys::ampx_rms_norm(self.as_raw(), opt(weight), eps, out) })
    }

    /// A contiguous copy with dimensions `dim0` and `dim1` exchanged
    /// ("transpose": keep); negative dims count from the end.
    pub fn transpose(&self, dim0: i32, dim1: i32) -> Result<Tensor> {
        // SAFETY: live input.
        run_op(self, |out| unsafe { sys::ampx_transpose(self.as_raw(), dim0, dim1, out) })
    }
}

/// Joins tensors along `dim` ("concat": promote); negative `dim` counts
/// from the end.
pub fn concat(tensors: &[&Tensor], dim: i32) -> Result<Tensor> {
    let first = match tensors.first() {
        Some(first) => first,
        None => return Err(Error::new(Status::InvalidArgument, "concat: no tensors to join")),
    };
    let raw: Vec<sys::ampx_tensor> = tensors.iter().map(|t| t.as_raw()).collect();
    // SAFETY: `raw` holds live handles.
    run_op(first, |out| unsafe { sys::ampx_concat(raw.as_ptr(), raw.len(), dim, out) })
}
