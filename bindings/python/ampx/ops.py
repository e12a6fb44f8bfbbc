"""The ops of ampx.h section 11, as functions (most are also Tensor methods).

Every op returns a new Tensor. Ops are recorded for :func:`ampx.backward`
when grad mode is on and an input requires a gradient; under an entered
:class:`ampx.Autocast` each op computes in the precision of its class.
Failures raise :class:`ampx.Error` subclasses with the library's message
(e.g. :class:`ampx.ShapeError` naming both shapes).
"""
from __future__ import annotations

import ctypes

from ._args import bool_arg, enum_arg, float_arg, int_arg, shape_arg
from ._lib import lib
from ._resource import read
from .errors import ArgumentTypeError, InvalidArgumentError
from .tensor import Tensor, _int64_array, handle_array, handle_of
from .types import Activation, Reduction

# torch.finfo(torch.float32).eps: rms_norm's default eps whatever the dtype.
_FLOAT32_EPSILON = 2.0 ** -23


def _tensor(value, what: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise ArgumentTypeError(f"{what} must be an ampx.Tensor, not {type(value).__name__}")
    return value


def _run(function, first: Tensor, *args) -> Tensor:
    """Calls an op whose output is written last; ``first`` gives the context."""
    return Tensor._from_op(read(function, ctypes.c_void_p, *args), first.context)


def _unary(function, x) -> Tensor:
    x = _tensor(x, "x")
    return _run(function, x, x.handle)


def _binary(function, a, b) -> Tensor:
    a = _tensor(a, "a")
    return _run(function, a, a.handle, handle_of(b, "b"))


def add(a: Tensor, b: Tensor) -> Tensor:
    """``a + b`` element-wise; ``b`` may be a row vector broadcast over ``a``'s rows."""
    return _binary(lib.ampx_add, a, b)


def sub(a: Tensor, b: Tensor) -> Tensor:
    """``a - b`` element-wise (broadcasting as :func:`add`)."""
    return _binary(lib.ampx_sub, a, b)


def mul(a: Tensor, b: Tensor) -> Tensor:
    """``a * b`` element-wise (broadcasting as :func:`add`)."""
    return _binary(lib.ampx_mul, a, b)


def div(a: Tensor, b: Tensor) -> Tensor:
    """``a / b`` element-wise (broadcasting as :func:`add`; IEEE division)."""
    return _binary(lib.ampx_div, a, b)


def affine(x: Tensor, scale: float, shift: float = 0.0) -> Tensor:
    """``x * scale + shift`` element-wise, in x's type."""
    x = _tensor(x, "x")
    return _run(lib.ampx_affine, x, x.handle, float_arg(scale, "scale"),
                float_arg(shift, "shift"))


def relu(x: Tensor) -> Tensor:
    """max(x, 0)."""
    return _unary(lib.ampx_relu, x)


def gelu(x: Tensor) -> Tensor:
    """GELU, the erf form."""
    return _unary(lib.ampx_gelu, x)


def gelu_tanh(x: Tensor) -> Tensor:
    """GELU, the tanh approximation."""
    return _unary(lib.ampx_gelu_tanh, x)


def silu(x: Tensor) -> Tensor:
    """x * sigmoid(x)."""
    return _unary(lib.ampx_silu, x)


def sigmoid(x: Tensor) -> Tensor:
    """1 / (1 + exp(-x))."""
    return _unary(lib.ampx_sigmoid, x)


def tanh(x: Tensor) -> Tensor:
    """The hyperbolic tangent."""
    return _unary(lib.ampx_tanh, x)


def exp(x: Tensor) -> Tensor:
    """e^x (autocast: fp32, as torch's)."""
    return _unary(lib.ampx_exp, x)


def log(x: Tensor) -> Tensor:
    """The natural logarithm (autocast: fp32)."""
    return _unary(lib.ampx_log, x)


def sqrt(x: Tensor) -> Tensor:
    """The square root (autocast: keep)."""
    return _unary(lib.ampx_sqrt, x)


def rsqrt(x: Tensor) -> Tensor:
    """1 / sqrt(x) (autocast: fp32)."""
    return _unary(lib.ampx_rsqrt, x)


def _dims_arg(dim, what: str = "dim"):
    """dim (an int or a sequence of ints) as a C int32 array and its length."""
    dims = (dim,) if isinstance(dim, int) and not isinstance(dim, bool) else tuple(dim)
    values = [int_arg(d, what) for d in dims]
    return (ctypes.c_int32 * max(1, len(values)))(*values), len(values)


def _reduce_dims(function, x, dim, keepdim) -> Tensor:
    x = _tensor(x, "x")
    dims, count = _dims_arg(dim)
    return _run(function, x, x.handle, dims, count, bool_arg(keepdim, "keepdim"))


def sum(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001  (as torch.sum)
    """The sum of all elements, a one-element F32 tensor (computed in fp32); with
    ``dim`` (an int or a sequence), over those dimensions as torch.sum(x, dim,
    keepdim), in x's dtype, accumulated in double."""
    if dim is None:
        return _unary(lib.ampx_sum, x)
    return _reduce_dims(lib.ampx_sum_dims, x, dim, keepdim)


def mean(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """The mean of all elements, a one-element tensor of x's dtype (accumulated in fp32);
    with ``dim``, over those dimensions as torch.mean(x, dim, keepdim)."""
    if dim is None:
        return _unary(lib.ampx_mean, x)
    return _reduce_dims(lib.ampx_mean_dims, x, dim, keepdim)


def amax(x: Tensor, dim=(), keepdim: bool = False) -> Tensor:
    """torch.amax: the maximum over ``dim`` (an int or a sequence; () is every
    dimension); the gradient is shared evenly among the maxima."""
    return _reduce_dims(lib.ampx_amax, x, dim, keepdim)


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Softmax over dimension ``dim`` (the last by default)."""
    x = _tensor(x, "x")
    if dim == -1:
        return _unary(lib.ampx_softmax, x)
    return _run(lib.ampx_softmax_dim, x, x.handle, int_arg(dim, "dim"))


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Log-softmax over dimension ``dim`` (the last by default)."""
    x = _tensor(x, "x")
    if dim == -1:
        return _unary(lib.ampx_log_softmax, x)
    return _run(lib.ampx_log_softmax_dim, x, x.handle, int_arg(dim, "dim"))


def cross_entropy(logits: Tensor, labels: Tensor, reduction="mean",
                  ignore_index: int = -100, weight: Tensor | None = None,
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of logits [N, C] against class labels [N] (I32 or I64), as
    torch.nn.functional.cross_entropy: also logits [N, C, d1, ...] against
    labels [N, d1, ...] and logits [C] against a 0-D label; optional class
    weights [C] and label smoothing in [0, 1]; ``reduction`` "mean", "sum" or
    "none" (one F32 loss per label).

    Labels equal to ``ignore_index`` contribute nothing and are not counted
    in the mean (with weights, the mean divides by their summed weights).
    """
    logits = _tensor(logits, "logits")
    if weight is None and label_smoothing == 0.0:
        return _run(lib.ampx_cross_entropy, logits, logits.handle, handle_of(labels, "labels"),
                    enum_arg(Reduction, reduction, "reduction"),
                    int_arg(ignore_index, "ignore_index", bits=64))
    options = lib.ampx_cross_entropy_options_default()
    options.reduction = enum_arg(Reduction, reduction, "reduction")
    options.ignore_index = int_arg(ignore_index, "ignore_index", bits=64)
    options.label_smoothing = float_arg(label_smoothing, "label_smoothing")
    return _run(lib.ampx_cross_entropy_ex, logits, logits.handle, handle_of(labels, "labels"),
                handle_of(weight, "weight", optional=True), ctypes.byref(options))


def mse_loss(input: Tensor, target: Tensor, reduction="mean") -> Tensor:  # noqa: A002
    """Mean-squared error between two tensors of one shape; ``reduction``
    "mean", "sum" or "none" (each element's squared difference, F32)."""
    input = _tensor(input, "input")
    return _run(lib.ampx_mse_loss, input, input.handle, handle_of(target, "target"),
                enum_arg(Reduction, reduction, "reduction"))


def bce_with_logits(logits: Tensor, targets: Tensor, reduction="mean", *,
                    weight: Tensor | None = None, pos_weight: Tensor | None = None) -> Tensor:
    """Binary cross-entropy of logits against targets of the same shape, as
    torch.nn.functional.binary_cross_entropy_with_logits; ``reduction``
    "mean", "sum" or "none" (each element's loss, F32).

    ``weight`` rescales each element's loss and ``pos_weight`` the positive
    term (torch's per-class weight: a [C] tensor applies along the last
    dimension of [..., C] logits). Each must broadcast to the logits' shape
    (aligned at the right, extents equal or 1), may be of any floating type,
    and is a constant: no gradient flows to it. The mean divides by the
    number of elements, whatever the weights.
    """
    logits = _tensor(logits, "logits")
    red = enum_arg(Reduction, reduction, "reduction")
    if weight is None and pos_weight is None:
        return _run(lib.ampx_bce_with_logits, logits, logits.handle,
                    handle_of(targets, "targets"), red)
    options = lib.ampx_bce_with_logits_options_default()
    options.reduction = red
    return _run(lib.ampx_bce_with_logits_ex, logits, logits.handle,
                handle_of(targets, "targets"), handle_of(weight, "weight", optional=True),
                handle_of(pos_weight, "pos_weight", optional=True), ctypes.byref(options))


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """``torch.matmul``'s shapes: [..., M, K] @ [..., K, N] with batch dimensions
    that broadcast; a 1-D a is one row, a 1-D b one column, and the output
    drops that extent ([K] @ [K] is 0-D). Accumulates in fp32."""
    return _binary(lib.ampx_matmul, a, b)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, activation="none") -> Tensor:
    """``activation(x @ weight.T + bias)``: x [..., in], weight [out, in], bias [out]."""
    x = _tensor(x, "x")
    return _run(lib.ampx_linear, x, x.handle, handle_of(weight, "weight"),
                handle_of(bias, "bias", optional=True),
                enum_arg(Activation, activation, "activation"))


def layer_norm(x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Layer normalisation over the last dimension (statistics in fp32)."""
    x = _tensor(x, "x")
    return _run(lib.ampx_layer_norm, x, x.handle, handle_of(weight, "weight", optional=True),
                handle_of(bias, "bias", optional=True), float_arg(eps, "eps"))


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float | None = None) -> Tensor:
    """torch.nn.functional.rms_norm over the last dimension (statistics in fp32).

    ``eps=None`` is torch's default for every input dtype: float32's machine
    epsilon, 2^-23 -- also for F16 and BF16 inputs, which torch (like ampx)
    normalises in fp32, not their own, much larger epsilon."""
    x = _tensor(x, "x")
    if eps is None:
        eps = _FLOAT32_EPSILON
    return _run(lib.ampx_rms_norm, x, x.handle, handle_of(weight, "weight", optional=True),
                float_arg(eps, "eps"))


def batch_norm(x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None,
               running_mean: Tensor | None = None, running_var: Tensor | None = None,
               training: bool = True, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalisation of x [N, C] or [N, C, ...] ([N, C, H, W]) per channel.

    Parameters and running statistics are F32 [C]. While training, the
    running statistics (when given) are updated in place as torch does.
    """
    x = _tensor(x, "x")
    return _run(lib.ampx_batch_norm, x, x.handle, handle_of(weight, "weight", optional=True),
                handle_of(bias, "bias", optional=True),
                handle_of(running_mean, "running_mean", optional=True),
                handle_of(running_var, "running_var", optional=True),
                bool_arg(training, "training"), float_arg(momentum, "momentum"),
                float_arg(eps, "eps"))


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Inverted dropout with the context's deterministic random stream."""
    x = _tensor(x, "x")
    return _run(lib.ampx_dropout, x, x.handle, float_arg(p, "p"), bool_arg(training, "training"))


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None) -> Tensor:
    """torch.nn.functional.scaled_dot_product_attention for [..., H, T, D] tensors
    (any leading extents, or none: [H, T, D], [T, D]).

    ``k`` and ``v`` may have fewer heads than ``q`` (grouped-query attention,
    torch's ``enable_gqa=True``); ``attn_mask`` broadcasts to the scores
    [..., H, Tq, Tk]: floating, it is added; integer (a boolean array becomes
    int64), non-zero marks the keys that take part, as torch's boolean mask;
    ``scale`` None is 1 / sqrt(D). Dropout
    applies whenever ``dropout_p`` > 0, as torch's; a row with every key
    masked gives zeros. No Tq x Tk matrix is stored."""
    q = _tensor(q, "q")
    options = lib.ampx_attention_options_default()
    options.causal = bool_arg(is_causal, "is_causal")
    options.dropout_p = float_arg(dropout_p, "dropout_p")
    if scale is not None:
        options.scale = float_arg(scale, "scale")
        if options.scale == 0.0:
            raise InvalidArgumentError("scale is 0; ampx reads 0 as the default 1 / sqrt(D), "
                                       "so a zero scale cannot be asked for")
    return _run(lib.ampx_scaled_dot_product_attention, q, q.handle, handle_of(k, "k"),
                handle_of(v, "v"), handle_of(attn_mask, "attn_mask", optional=True),
                ctypes.byref(options))


def _pair(value, what: str, minimum: int) -> tuple[int, int]:
    """An int or a pair of ints, as torch's _pair."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise InvalidArgumentError(f"{what} has {len(value)} entries; give one int or two")
        return (int_arg(value[0], what, 64, minimum), int_arg(value[1], what, 64, minimum))
    number = int_arg(value, what, 64, minimum)
    return (number, number)


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """torch.nn.functional.conv2d: x [N, C, H, W] (or [C, H, W]), weight
    [O, C / groups, kh, kw], bias [O] or None; stride, padding and dilation
    are an int or a pair."""
    x = _tensor(x, "x")
    options = lib.ampx_conv2d_options_default()
    options.stride[:] = _pair(stride, "stride", 1)
    options.padding[:] = _pair(padding, "padding", 0)
    options.dilation[:] = _pair(dilation, "dilation", 1)
    options.groups = int_arg(groups, "groups", 64, 1)
    return _run(lib.ampx_conv2d, x, x.handle, handle_of(weight, "weight"),
                handle_of(bias, "bias", optional=True), ctypes.byref(options))


def _pool_options(stride, padding, dilation, ceil_mode, count_include_pad=True,
                  divisor_override=None):
    options = lib.ampx_pool2d_options_default()
    if stride is not None:
        options.stride[:] = _pair(stride, "stride", 1)
    options.padding[:] = _pair(padding, "padding", 0)
    options.dilation[:] = _pair(dilation, "dilation", 1)
    options.ceil_mode = bool_arg(ceil_mode, "ceil_mode")
    options.count_include_pad = bool_arg(count_include_pad, "count_include_pad")
    if divisor_override is not None:
        options.divisor_override = int_arg(divisor_override, "divisor_override", 64, 1)
    return options


def max_pool2d(x: Tensor, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False) -> Tensor:
    """torch.nn.functional.max_pool2d (without return_indices); stride None
    is the kernel size."""
    x = _tensor(x, "x")
    kernel = _pair(kernel_size, "kernel_size", 1)
    options = _pool_options(stride, padding, dilation, ceil_mode)
    return _run(lib.ampx_max_pool2d, x, x.handle, kernel[0], kernel[1], ctypes.byref(options))


def avg_pool2d(x: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """torch.nn.functional.avg_pool2d; stride None is the kernel size."""
    x = _tensor(x, "x")
    kernel = _pair(kernel_size, "kernel_size", 1)
    options = _pool_options(stride, padding, 1, ceil_mode, count_include_pad, divisor_override)
    return _run(lib.ampx_avg_pool2d, x, x.handle, kernel[0], kernel[1], ctypes.byref(options))


def global_avg_pool2d(x: Tensor) -> Tensor:
    """torch's adaptive_avg_pool2d(x, 1): each channel's mean, [N, C, 1, 1]."""
    x = _tensor(x, "x")
    return _run(lib.ampx_global_avg_pool2d, x, x.handle)


def embedding(weight: Tensor, indices: Tensor) -> Tensor:
    """Rows of ``weight`` [V, D] picked by ``indices`` (I32 or I64, any shape)."""
    weight = _tensor(weight, "weight")
    return _run(lib.ampx_embedding, weight, weight.handle, handle_of(indices, "indices"))


def reshape(x: Tensor, shape) -> Tensor:
    """The same elements (and memory) with another shape; one extent may be -1."""
    x = _tensor(x, "x")
    dims = shape_arg(shape)
    return _run(lib.ampx_reshape, x, x.handle, len(dims), _int64_array(dims))


def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    """A contiguous copy with dimensions ``dim0`` and ``dim1`` exchanged."""
    x = _tensor(x, "x")
    return _run(lib.ampx_transpose, x, x.handle, int_arg(dim0, "dim0"), int_arg(dim1, "dim1"))


def permute(x: Tensor, dims) -> Tensor:
    """A contiguous copy with the dimensions reordered: output dimension k is
    ``dims[k]`` of x (torch.permute(x, dims).contiguous())."""
    x = _tensor(x, "x")
    array, count = _dims_arg(dims, "dims")
    return _run(lib.ampx_permute, x, x.handle, count, array)


def masked_fill(x: Tensor, mask: Tensor, value: float) -> Tensor:
    """x with ``value`` where ``mask`` (any dtype; non-zero is set) is set; the
    mask broadcasts to x's shape (torch.Tensor.masked_fill)."""
    x = _tensor(x, "x")
    return _run(lib.ampx_masked_fill, x, x.handle, handle_of(mask, "mask"),
                float_arg(value, "value"))


def pow(x: Tensor, exponent: float) -> Tensor:  # noqa: A001  (as torch.pow)
    """x ** exponent for a number exponent (fp32 class under autocast)."""
    x = _tensor(x, "x")
    return _run(lib.ampx_pow, x, x.handle, float_arg(exponent, "exponent"))


def rotary_embedding(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool = False) -> Tensor:
    """Rotary position embeddings of x [..., T, D] with tables [T, D / 2]: pairs
    (i, i + D/2) rotated (Hugging Face LLaMA's rotate-half), or (2i, 2i+1)
    when ``interleaved``."""
    x = _tensor(x, "x")
    return _run(lib.ampx_rotary_embedding, x, x.handle, handle_of(cos, "cos"),
                handle_of(sin, "sin"), bool_arg(interleaved, "interleaved"))


def _pieces(x: Tensor, handles, count: int):
    return tuple(Tensor._from_op(handles[k], x.context) for k in range(count))


def split(x: Tensor, split_size_or_sections, dim: int = 0):
    """torch.split: pieces of ``split_size_or_sections`` elements along ``dim``
    (an int: that size, the last piece smaller; a list: those sizes), as new
    contiguous tensors."""
    x = _tensor(x, "x")
    if isinstance(split_size_or_sections, int) and not isinstance(split_size_or_sections, bool):
        size = int_arg(split_size_or_sections, "split_size")
        if size < 1:
            raise InvalidArgumentError(f"split_size is {size}; it must be at least 1")
        extent = x.shape[int_arg(dim, "dim")]
        sizes = [min(size, extent - start) for start in range(0, extent, size)] or [0]
    else:
        sizes = [int_arg(s, "sizes") for s in split_size_or_sections]
    handles = (ctypes.c_void_p * max(1, len(sizes)))()
    array = _int64_array(sizes)
    lib.ampx_split(x.handle, array, len(sizes), int_arg(dim, "dim"), handles)
    return _pieces(x, handles, len(sizes))


def chunk(x: Tensor, chunks: int, dim: int = 0):
    """torch.chunk: at most ``chunks`` pieces of ceil(extent / chunks) along ``dim``."""
    x = _tensor(x, "x")
    chunks = int_arg(chunks, "chunks")
    handles = (ctypes.c_void_p * max(1, chunks))()
    count = read(lib.ampx_chunk, ctypes.c_int32, x.handle, chunks, int_arg(dim, "dim"), handles)
    return _pieces(x, handles, count)


def concat(tensors, dim: int = 0) -> Tensor:
    """Joins tensors along ``dim``."""
    tensors, handles = handle_array(tensors, "tensors")
    return _run(lib.ampx_concat, tensors[0], handles, len(tensors), int_arg(dim, "dim"))
