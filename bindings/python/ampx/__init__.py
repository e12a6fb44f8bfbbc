"""ampx for Python: mixed-precision training over the ampx C library (ctypes).

A pure-Python binding of ``include/ampx/ampx.h``: autocast, dynamic loss
scaling, SGD/Adam/AdamW with fp32 master weights, clipping after unscaling,
and the ops to build small networks. Tensors exchange memory with NumPy and
PyTorch through DLPack. Data-parallel training (``Communicator``,
``DataParallel``; EXPERIMENTAL) reduces gradients over MPI or NCCL ranks.
The precision doctor (``Doctor``; EXPERIMENTAL) watches an optimizer's
gradients and loss scale for fp16 underflow and overflow, and writes an
HTML report. ``Fp8Recipe`` (EXPERIMENTAL) scales tensors into FP8 (E4M3,
E5M2) as Transformer Engine does; ``Autocast.set_fp8`` runs linear and
matmul in FP8 with it. ``save_safetensors``, ``load_safetensors`` and
``SafetensorsFile`` (EXPERIMENTAL) read and write the safetensors files of
PyTorch and Hugging Face. ``ampx.onnx.export`` (EXPERIMENTAL) writes a
recorded forward pass as an ONNX model.

The library is loaded from ``$AMPX_LIBRARY`` (the full path of
``libampx.so``), else from the package itself (where ``pip install
bindings/python`` builds it in), else found by
``ctypes.util.find_library("ampx")`` or the usual file names.

Example::

    import ampx
    ctx = ampx.Context()
    w = ampx.tensor([[0.5, -0.25]], context=ctx, requires_grad=True, name="w")
    x = ampx.tensor([[1.0, 2.0]], context=ctx)
    opt = ampx.AdamW([w], lr=0.01)
    scaler = ampx.Scaler(ctx, init_scale=1024)
    with ctx.scope(), ampx.Autocast(ctx, "bf16"):
        loss = ampx.linear(x, w).sum()
    loss.backward(scaler)
    scaler.step(opt)
    scaler.update()
"""
from ._lib import lib as _lib
from .amp import Autocast, Scaler, ScalerCounters
from .autograd import backward, checkpoint, grad, grad_ready, no_grad, set_grad_ready_hook
from .checkpoint_file import load_checkpoint_file, save_checkpoint_file
from .context import Context, MemoryStats, default_context
from .dist import Communicator, DataParallel, DataParallelStats, nccl_unique_id
from .doctor import Doctor, DoctorFinding, DoctorOverview, DoctorParamStats, DoctorSample
from .fp8 import (FP8_DEFAULT_MIN_GEMM_SIZE, Fp8Recipe, Fp8SlotInfo, Fp8Stats,
                  Fp8TensorReport)
from .errors import (ArgumentTypeError, CorruptError, DeviceError, DTypeError, Error, FileError,
                     InternalError, InvalidArgumentError, NoDeviceError, NotSupportedError,
                     OrderError, OutOfMemoryError, ShapeError, StaleHandleError, Status)
from . import onnx
from .ops import (add, affine, amax, avg_pool2d, batch_norm, bce_with_logits, chunk, concat,
                  conv2d, cross_entropy, global_avg_pool2d, max_pool2d,
                  dropout, masked_fill, pow, rotary_embedding, split,
                  div, embedding, exp, gelu, gelu_tanh, layer_norm, linear, log, log_softmax, matmul,
                  mean, mse_loss, mul, permute, relu, reshape, rms_norm, rsqrt,
                  scaled_dot_product_attention,
                  sigmoid, silu, softmax, sqrt, sub, sum, tanh, transpose)
from .optim import (SGD, Adam, AdamW, LRSchedule, NonfiniteGrad, Optimizer, clip_grad_norm_,
                    clip_grad_value_, find_nonfinite_grads)
from .safetensors_file import (SafetensorsEntry, SafetensorsFile, load_safetensors,
                               load_safetensors_into, save_safetensors)
from .tensor import Tensor, empty, from_dlpack, tensor, zeros
from .types import (BF16, F16, F32, F8E4M3, F8E5M2, I32, I64, Activation, AmaxAlgo, Device,
                    DType, Fp8Format, Fp8Overflow, Fp8Role, Fp8Scaling, LRDecay, OpClass,
                    Reduction, StateKind, bfloat16, float8_e4m3fn, float8_e5m2, float16, float32,
                    int32, int64)

__version__ = "0.1.0"


def library_version() -> str:
    """The version of the loaded libampx, e.g. "0.1.0" (``ampx_version_string``)."""
    return _lib.ampx_version_string().decode()


def library_version_number() -> int:
    """The loaded library's version as major * 10000 + minor * 100 + patch."""
    return _lib.ampx_version()


def has_cuda() -> bool:
    """Whether the library was built with the CUDA backend."""
    return bool(_lib.ampx_has_cuda())


def cuda_device_count() -> int:
    """The number of CUDA devices ampx can use (0 without CUDA)."""
    return _lib.ampx_cuda_device_count()


def status_string(status: int) -> str:
    """The name of a status code, e.g. "AMPX_ERR_SHAPE"."""
    return _lib.ampx_status_string(status).decode()


def last_error() -> str:
    """The message of the most recent failed ampx call on this thread ("" if none)."""
    return _lib.ampx_last_error().decode("utf-8", "replace")


def last_status() -> Status:
    """The status of the most recent failed ampx call on this thread (OK if none)."""
    return Status(_lib.ampx_last_status())
