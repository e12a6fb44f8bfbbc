"""Tensors: creation, host copies, NumPy and DLPack interop, and op methods.

NumPy conventions:

* :func:`ampx.tensor` copies any array-like into a new tensor (the way
  ``torch.tensor`` does); :meth:`Tensor.from_numpy` shares a NumPy array's
  memory without a copy (the way ``torch.from_numpy`` does).
* :meth:`Tensor.numpy` returns a copy (it works for any device);
  ``np.from_dlpack(tensor)`` gives a zero-copy view of a CPU tensor.
* BF16 has no NumPy type: it travels as ``uint16`` arrays of bit patterns.
  ``Tensor.numpy()`` of a BF16 tensor returns ``uint16``; ``ampx.tensor``
  and ``Tensor.from_numpy`` read a ``uint16`` array as BF16 bits when given
  ``dtype="bf16"``, and also accept ``ml_dtypes.bfloat16`` arrays.
* FP8 (F8E4M3, F8E5M2) likewise travels as ``uint8`` bit patterns (or
  ``ml_dtypes.float8_e4m3fn`` / ``float8_e5m2`` arrays); floating data given
  with an FP8 dtype is rounded by ampx (torch's casts: E4M3 saturates, E5M2
  overflows to inf; :meth:`Tensor.copy_fp8_` chooses).
"""
from __future__ import annotations

import ctypes
import itertools

import numpy as np

from . import _dlpack
from ._args import bool_arg, enum_arg, float_arg, int_arg, shape_arg, str_arg
from ._lib import lib
from ._raw import ampx_deleter
from ._resource import Resource, keep_forever, read
from .context import Context, context_arg, default_context
from .errors import ArgumentTypeError, DeviceError, DTypeError, InvalidArgumentError, ShapeError
from .types import Device, DType

_NUMPY_OF = {DType.F32: np.dtype(np.float32), DType.F16: np.dtype(np.float16),
             DType.BF16: np.dtype(np.uint16), DType.I32: np.dtype(np.int32),
             DType.I64: np.dtype(np.int64), DType.F8E4M3: np.dtype(np.uint8),
             DType.F8E5M2: np.dtype(np.uint8)}
# ml_dtypes' names of the types NumPy lacks, read as bit patterns.
_BITS_OF_NAME = {"bfloat16": DType.BF16, "float8_e4m3fn": DType.F8E4M3,
                 "float8_e5m2": DType.F8E5M2}
_DTYPE_OF = {np.dtype(np.float32): DType.F32, np.dtype(np.float16): DType.F16,
             np.dtype(np.int32): DType.I32, np.dtype(np.int64): DType.I64}
_KDLCPU, _KDLCUDA = 1, 2


def _int64_array(dims):
    return (ctypes.c_int64 * len(dims))(*dims) if dims else None


def handle_of(value, what: str, optional: bool = False):
    """The C handle of a Tensor argument (None for an optional one left out)."""
    if value is None and optional:
        return None
    if not isinstance(value, Tensor):
        raise ArgumentTypeError(f"{what} must be an ampx.Tensor, not {type(value).__name__}")
    return value.handle


def handle_array(tensors, what: str):
    """The Tensors of a sequence as a list, and a C array of their handles."""
    if isinstance(tensors, Tensor):
        raise ArgumentTypeError(f"{what} must be a sequence of tensors, not one tensor")
    try:
        tensors = list(tensors)
    except TypeError:
        raise ArgumentTypeError(f"{what} must be a sequence of tensors, not "
                                f"{type(tensors).__name__}") from None
    handles = [handle_of(t, f"{what}[{i}]") for i, t in enumerate(tensors)]
    return tensors, (ctypes.c_void_p * max(len(handles), 1))(*handles)


# Arrays shared with ampx by Tensor.from_numpy, kept alive until ampx calls
# the deleter with their token.
_shared_arrays: dict = {}
_share_tokens = itertools.count(1)


@keep_forever
@ampx_deleter
def _drop_shared_array(user_data, _data):
    _shared_arrays.pop(user_data, None)


class Tensor(Resource):
    """A dense, row-major n-dimensional array on a context's device.

    Tensors come from :func:`ampx.tensor`, :func:`ampx.zeros`,
    :func:`ampx.empty`, :meth:`from_numpy`, :func:`ampx.from_dlpack` and the
    ops. Each Python ``Tensor`` owns one reference to the C tensor and keeps
    its :class:`Context` alive.
    """

    _kind = "tensor"
    # NumPy operands defer to Tensor's own operators instead of converting it.
    __array_ufunc__ = None

    def __init__(self, handle: int, context: Context):
        """Adopts one reference to ``handle`` (internal: use the factory functions)."""
        super().__init__(handle, lib.ampx_tensor_release)
        self._context = context

    @classmethod
    def _borrowed(cls, handle: int, context: Context) -> "Tensor":
        lib.ampx_tensor_retain(handle)
        return cls(handle, context)

    @classmethod
    def _from_op(cls, handle: int, context: Context) -> "Tensor":
        # While a scope is open the scope owns op outputs; take our own reference.
        if context._state.scope_depth > 0:
            return cls._borrowed(handle, context)
        return cls(handle, context)

    @classmethod
    def from_numpy(cls, array: np.ndarray, *, context: Context | None = None,
                   dtype=None) -> "Tensor":
        """A tensor sharing ``array``'s memory (no copy), on a CPU context.

        The array must be C-contiguous, aligned and writeable; it stays alive
        as long as the tensor. Writes through either are seen by both.
        ``dtype="bf16"`` reads a ``uint16`` array as bf16 bit patterns.
        """
        context = context_arg(context, default_context)
        if not isinstance(array, np.ndarray):
            raise ArgumentTypeError(f"from_numpy needs a numpy.ndarray, not {type(array).__name__}")
        if context.device[0] != Device.CPU:
            raise DeviceError("from_numpy shares host memory, which only a CPU context can use; "
                              "ampx.tensor(array, context=...) copies it to the device")
        if not (array.flags.c_contiguous and array.flags.aligned):
            raise InvalidArgumentError("from_numpy needs a C-contiguous, aligned array "
                                       "(numpy.ascontiguousarray makes one)")
        if not array.flags.writeable:
            raise InvalidArgumentError("from_numpy needs a writeable array (ampx may write "
                                       "into it); ampx.tensor(array) copies a read-only one")
        dt = _shared_dtype(array, dtype)
        token = next(_share_tokens)
        _shared_arrays[token] = array
        dims = array.shape
        out = ctypes.c_void_p()
        try:
            lib.ampx_tensor_wrap(context.handle, dt, len(dims), _int64_array(dims),
                                 array.ctypes.data, array.nbytes, _drop_shared_array, token,
                                 ctypes.byref(out))
        except BaseException:
            del _shared_arrays[token]
            raise
        return cls(out.value, context)

    # ---- queries --------------------------------------------------------------------

    @property
    def context(self) -> Context:
        """The context the tensor belongs to."""
        return self._context

    @property
    def device(self) -> tuple[Device, int]:
        """The device type and index of the tensor's context."""
        return self._context.device

    @property
    def dtype(self) -> DType:
        """The element type."""
        return DType(read(lib.ampx_tensor_dtype, ctypes.c_int32, self.handle))

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return read(lib.ampx_tensor_ndim, ctypes.c_int32, self.handle)

    @property
    def shape(self) -> tuple[int, ...]:
        """The extents, as a tuple (``()`` for a scalar)."""
        ndim = self.ndim
        dims = (ctypes.c_int64 * max(ndim, 1))()
        lib.ampx_tensor_shape(self.handle, dims, ndim)
        return tuple(dims[:ndim])

    def numel(self) -> int:
        """The number of elements."""
        return read(lib.ampx_tensor_numel, ctypes.c_int64, self.handle)

    @property
    def nbytes(self) -> int:
        """The size of the contents in bytes."""
        return read(lib.ampx_tensor_nbytes, ctypes.c_size_t, self.handle)

    @property
    def data_ptr(self) -> int:
        """Address of the first element on the device (valid while the tensor lives)."""
        return read(lib.ampx_tensor_data, ctypes.c_void_p, self.handle) or 0

    @property
    def name(self) -> str:
        """The tensor's name, used in diagnostics ("" if none); settable."""
        name = read(lib.ampx_tensor_name, ctypes.c_char_p, self.handle)
        return (name or b"").decode("utf-8", "replace")

    @name.setter
    def name(self, value: str | None) -> None:
        lib.ampx_tensor_set_name(self.handle, None if value is None else str_arg(value, "name"))

    @property
    def requires_grad(self) -> bool:
        """Whether gradients flow to or through the tensor; settable on leaves."""
        return bool(read(lib.ampx_tensor_requires_grad, ctypes.c_int32, self.handle))

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        lib.ampx_tensor_set_requires_grad(self.handle, bool_arg(value, "requires_grad"))

    @property
    def grad(self) -> "Tensor | None":
        """The attached gradient (a new Tensor object for the same C tensor), or None.

        Assigning a tensor attaches it as the gradient (``ampx_tensor_set_grad``);
        assigning None detaches it.
        """
        grad = read(lib.ampx_tensor_grad, ctypes.c_void_p, self.handle)
        return Tensor._borrowed(grad, self._context) if grad else None

    @grad.setter
    def grad(self, value: "Tensor | None") -> None:
        lib.ampx_tensor_set_grad(self.handle, handle_of(value, "grad", optional=True))

    def _describe(self) -> str:
        name = self.name
        return f"shape={self.shape}, dtype={self.dtype}" + (f", name={name!r}" if name else "")

    # ---- contents -------------------------------------------------------------------

    def numpy(self) -> np.ndarray:
        """A NumPy copy of the contents (BF16 as ``uint16``, FP8 as ``uint8``
        bit patterns). Synchronizes."""
        array = np.empty(self.shape, dtype=_NUMPY_OF[self.dtype])
        lib.ampx_tensor_to_host(self.handle, array.ctypes.data, array.nbytes)
        return array

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        if copy is False:
            raise ValueError("converting an ampx.Tensor to NumPy copies it; "
                             "numpy.from_dlpack(tensor) gives a view of a CPU tensor")
        array = self.numpy()
        return array if dtype is None else array.astype(dtype)

    def item(self) -> float | int:
        """The value of a one-element tensor as a Python number (BF16, FP8 decoded)."""
        if self.numel() != 1:
            raise ShapeError(f"item() needs a tensor with one element, not shape {self.shape}")
        if self.dtype in _BITS_TYPES:
            return self.to(DType.F32).item()
        return self.numpy().reshape(()).item()

    def tolist(self):
        """The contents as (nested) Python lists."""
        return self.numpy().tolist()

    def copy_(self, source) -> "Tensor":
        """Overwrites the contents from a Tensor or an array-like, converting the type.

        ``source`` must have as many elements as this tensor (its shape may
        differ: elements are copied in row-major order). Returns self.
        """
        if not isinstance(source, Tensor):
            array = _array_of(source)
            if self.dtype not in _BITS_TYPES or _holds_bits(array, self.dtype):
                array = _host_array(array, self.dtype)
                lib.ampx_tensor_copy_from_host(self.handle, array.ctypes.data, array.nbytes)
                return self
            source = tensor(array, DType.F32, context=self._context)
        lib.ampx_tensor_copy(self.handle, source.handle)
        return self

    def copy_fp8_(self, source: "Tensor", overflow="saturate") -> "Tensor":
        """Overwrites this FP8 tensor with ``source`` (F32, F16 or BF16, as
        many elements) rounded to nearest even, values beyond the format's
        max following ``overflow`` (:class:`ampx.Fp8Overflow`: ``"saturate"``
        gives +-max, ``"no_saturate"`` NaN in E4M3 and +-inf in E5M2)
        (``ampx_tensor_copy_fp8``). Returns self."""
        from .types import Fp8Overflow
        lib.ampx_tensor_copy_fp8(self.handle, handle_of(source, "source"),
                                 enum_arg(Fp8Overflow, overflow, "overflow"))
        return self

    def fill_(self, value: float) -> "Tensor":
        """Sets every element to ``value`` (converted to the dtype). Returns self."""
        lib.ampx_tensor_fill(self.handle, float_arg(value, "value"))
        return self

    def to(self, dtype) -> "Tensor":
        """A new tensor holding this one converted to ``dtype`` (``ampx_cast``).

        As torch's ``Tensor.to``: with grad mode on and this tensor requiring
        grad the cast is recorded, and its gradient comes back cast to this
        tensor's dtype. A tensor that requires no grad is converted by
        ``ampx_tensor_cast``, so the copy is never left to an open scope.
        """
        dtype = enum_arg(DType, dtype, "dtype")
        if self.requires_grad:
            return Tensor._from_op(read(lib.ampx_cast, ctypes.c_void_p, self.handle, dtype),
                                   self._context)
        return Tensor(read(lib.ampx_tensor_cast, ctypes.c_void_p, self.handle, dtype),
                      self._context)

    def clone(self) -> "Tensor":
        """A copy in new memory, with the same dtype, recorded as ``to``."""
        return self.to(self.dtype)

    def view(self, byte_offset: int, shape, dtype=None) -> "Tensor":
        """A tensor of ``shape`` and ``dtype`` (default: this tensor's) on this
        tensor's memory, starting ``byte_offset`` bytes past its first element
        (``ampx_tensor_view``; no copy).

        Writes through either are seen by both, and the memory lives until
        both are gone. The view must lie inside this tensor's bytes and
        ``byte_offset`` be a multiple of the element size. A view is a leaf:
        gradients do not flow between it and its base, and its
        ``requires_grad``, ``grad`` and ``name`` are its own.
        """
        dims = shape_arg(shape, "shape")
        dt = self.dtype if dtype is None else enum_arg(DType, dtype, "dtype")
        offset = int_arg(byte_offset, "byte_offset", bits=8 * ctypes.sizeof(ctypes.c_size_t),
                         unsigned=True)
        return Tensor(read(lib.ampx_tensor_view, ctypes.c_void_p, self.handle, offset, dt,
                           len(dims), _int64_array(dims)), self._context)

    def backward(self, scaler=None, retain_graph: bool | None = None,
                 create_graph: bool = False) -> None:
        """Backpropagates from this one-element loss (see :func:`ampx.backward`;
        ``retain_graph`` and ``create_graph`` as torch's ``Tensor.backward``)."""
        _autograd.backward(self, scaler, retain_graph, create_graph)

    # ---- DLPack ---------------------------------------------------------------------

    def __dlpack_device__(self) -> tuple[int, int]:
        """(kDLCPU, 0) or (kDLCUDA, device index)."""
        device, index = self._context.device
        return (_KDLCPU, 0) if device == Device.CPU else (_KDLCUDA, index)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Exports the tensor as a DLPack capsule sharing its memory.

        The capsule is always an unversioned ``"dltensor"`` one (allowed
        whatever ``max_version`` asks). ``copy=True`` exports a copy. On a
        CUDA context the context is synchronized first, so any consumer
        stream sees the data.
        """
        device = self.__dlpack_device__()
        if dl_device is not None and tuple(dl_device) != device:
            raise BufferError(f"ampx cannot export to DLPack device {tuple(dl_device)}; the "
                              f"tensor is on {device}")
        source = self.clone() if copy else self
        if device[0] == _KDLCUDA:
            self._context.synchronize()
        return _dlpack.capsule_from_managed(read(lib.ampx_tensor_to_dlpack, ctypes.c_void_p,
                                                 source.handle))

    # ---- ops ------------------------------------------------------------------------

    def relu(self) -> "Tensor":
        """:func:`ampx.relu` of this tensor."""
        return ops.relu(self)

    def gelu(self) -> "Tensor":
        """:func:`ampx.gelu` of this tensor."""
        return ops.gelu(self)

    def gelu_tanh(self) -> "Tensor":
        """:func:`ampx.gelu_tanh` of this tensor."""
        return ops.gelu_tanh(self)

    def silu(self) -> "Tensor":
        """:func:`ampx.silu` of this tensor."""
        return ops.silu(self)

    def sigmoid(self) -> "Tensor":
        """:func:`ampx.sigmoid` of this tensor."""
        return ops.sigmoid(self)

    def tanh(self) -> "Tensor":
        """:func:`ampx.tanh` of this tensor."""
        return ops.tanh(self)

    def exp(self) -> "Tensor":
        """:func:`ampx.exp` of this tensor."""
        return ops.exp(self)

    def log(self) -> "Tensor":
        """:func:`ampx.log` of this tensor."""
        return ops.log(self)

    def sqrt(self) -> "Tensor":
        """:func:`ampx.sqrt` of this tensor."""
        return ops.sqrt(self)

    def rsqrt(self) -> "Tensor":
        """:func:`ampx.rsqrt` of this tensor."""
        return ops.rsqrt(self)

    def sum(self) -> "Tensor":
        """:func:`ampx.sum` of this tensor."""
        return ops.sum(self)

    def mean(self) -> "Tensor":
        """:func:`ampx.mean` of this tensor."""
        return ops.mean(self)

    def softmax(self) -> "Tensor":
        """:func:`ampx.softmax` over the last dimension."""
        return ops.softmax(self)

    def log_softmax(self) -> "Tensor":
        """:func:`ampx.log_softmax` over the last dimension."""
        return ops.log_softmax(self)

    def affine(self, scale: float, shift: float = 0.0) -> "Tensor":
        """``self * scale + shift`` (:func:`ampx.affine`)."""
        return ops.affine(self, scale, shift)

    def matmul(self, other: "Tensor") -> "Tensor":
        """:func:`ampx.matmul` (also the ``@`` operator)."""
        return ops.matmul(self, other)

    def reshape(self, *shape) -> "Tensor":
        """:func:`ampx.reshape`; the shape as separate ints or one sequence."""
        return ops.reshape(self, shape[0] if len(shape) == 1 else shape)

    def transpose(self, dim0: int, dim1: int) -> "Tensor":
        """:func:`ampx.transpose`."""
        return ops.transpose(self, dim0, dim1)

    def __add__(self, other):
        return ops.add(self, other) if isinstance(other, Tensor) else self._affine(1.0, other)

    def __radd__(self, other):
        return self._affine(1.0, other)

    def __sub__(self, other):
        return ops.sub(self, other) if isinstance(other, Tensor) else self._affine(1.0, -other)

    def __rsub__(self, other):
        return self._affine(-1.0, other)

    def __mul__(self, other):
        return ops.mul(self, other) if isinstance(other, Tensor) else self._affine(other, 0.0)

    def __rmul__(self, other):
        return self._affine(other, 0.0)

    def __truediv__(self, other):
        # A number divides as a multiplication by its reciprocal (affine).
        return ops.div(self, other) if isinstance(other, Tensor) else self._affine(1.0 / other, 0.0)

    def __neg__(self):
        return self._affine(-1.0, 0.0)

    def __matmul__(self, other):
        return ops.matmul(self, other)

    def _affine(self, scale, shift):
        if not isinstance(scale, (int, float, np.number)) or \
                not isinstance(shift, (int, float, np.number)):
            return NotImplemented
        return ops.affine(self, scale, shift)


def _shared_dtype(array: np.ndarray, dtype) -> DType:
    """The ampx dtype of a NumPy array whose memory is used as it is."""
    wanted = None if dtype is None else enum_arg(DType, dtype, "dtype")
    if _bits_type(array) is not None:
        found = _bits_type(array)
    elif wanted in _BITS_TYPES and array.dtype == _NUMPY_OF[wanted]:
        found = wanted
    elif array.dtype in _DTYPE_OF:
        found = _DTYPE_OF[array.dtype]
    else:
        raise DTypeError(f"numpy dtype {array.dtype} has no ampx dtype (float32, float16, "
                         f"int32, int64, uint16 bits with dtype='bf16', uint8 bits with "
                         f"an FP8 dtype)")
    if wanted is not None and wanted != found:
        raise DTypeError(f"the array holds {array.dtype}, not {wanted} (ampx.tensor converts)")
    return found


def _inferred_dtype(array: np.ndarray) -> DType:
    if _bits_type(array) is not None:
        return _bits_type(array)
    if array.dtype in _DTYPE_OF:
        return _DTYPE_OF[array.dtype]
    if array.dtype.kind == "f":
        return DType.F32
    if array.dtype.kind in "biu":
        return DType.I64
    raise DTypeError(f"numpy dtype {array.dtype} has no ampx dtype")


def _array_of(data) -> np.ndarray:
    if isinstance(data, Tensor):
        raise ArgumentTypeError("expected host data, not an ampx.Tensor "
                                "(use tensor.clone() or tensor.to(dtype))")
    try:
        return np.asarray(data)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(f"cannot make an array of {type(data).__name__}: {exc}") from None


_BITS_TYPES = (DType.BF16, DType.F8E4M3, DType.F8E5M2)


def _bits_type(array: np.ndarray) -> DType | None:
    """The ampx type of an ml_dtypes array (bfloat16, float8_*), else None."""
    found = _BITS_OF_NAME.get(array.dtype.name)
    return found if found is not None and array.dtype.itemsize == found.itemsize else None


def _holds_bits(array: np.ndarray, dtype: DType) -> bool:
    """Whether ``array`` holds ``dtype``'s bit patterns (uint16 for BF16,
    uint8 for FP8, or the ml_dtypes type itself)."""
    return array.dtype == _NUMPY_OF[dtype] or _bits_type(array) == dtype


def _host_array(array: np.ndarray, dtype: DType) -> np.ndarray:
    """``array`` as a C-contiguous array of ``dtype``'s NumPy type (BF16: from bits)."""
    # np.asarray(order="C") keeps 0-d arrays 0-d (np.ascontiguousarray would not).
    if dtype in _BITS_TYPES:
        return np.asarray(array, order="C").view(_NUMPY_OF[dtype])
    if array.dtype.kind not in "biuf":
        raise DTypeError(f"numpy dtype {array.dtype} cannot be converted to {dtype}")
    return np.asarray(array, dtype=_NUMPY_OF[dtype], order="C")


def _finish(tensor: Tensor, requires_grad: bool, name: str | None) -> Tensor:
    if name is not None:
        tensor.name = name
    if requires_grad:
        tensor.requires_grad = True
    return tensor


def tensor(data, dtype=None, *, context: Context | None = None, requires_grad: bool = False,
           name: str | None = None) -> Tensor:
    """A new tensor holding a copy of ``data`` (an array-like or a number).

    Without ``dtype``: float32/float16/int32/int64 arrays keep their type,
    other floating data becomes F32 and integer data I64. With
    ``dtype="bf16"``, floats are rounded to bf16 by ampx (to nearest even);
    ``uint16`` or ``ml_dtypes.bfloat16`` data is taken as bf16 bits. With
    an FP8 dtype (``"f8e4m3"``, ``"f8e5m2"``) floats are cast by ampx (as
    ``Tensor.to``) and ``uint8`` data is taken as bit patterns.
    """
    context = context_arg(context, default_context)
    array = _array_of(data)
    dt = _inferred_dtype(array) if dtype is None else enum_arg(DType, dtype, "dtype")
    if dt in _BITS_TYPES and not _holds_bits(array, dt):
        return _finish(tensor(array, DType.F32, context=context).to(dt),
                       requires_grad, name)
    array = _host_array(array, dt)
    dims = shape_arg(array.shape)
    handle = read(lib.ampx_tensor_from_host, ctypes.c_void_p, context.handle, dt, len(dims),
                  _int64_array(dims), array.ctypes.data, array.nbytes)
    return _finish(Tensor(handle, context), requires_grad, name)


def empty(shape, dtype=DType.F32, *, context: Context | None = None,
          requires_grad: bool = False, name: str | None = None) -> Tensor:
    """A new tensor with uninitialised contents."""
    return _create(lib.ampx_tensor_empty, shape, dtype, context, requires_grad, name)


def zeros(shape, dtype=DType.F32, *, context: Context | None = None,
          requires_grad: bool = False, name: str | None = None) -> Tensor:
    """A new tensor filled with zeros."""
    return _create(lib.ampx_tensor_zeros, shape, dtype, context, requires_grad, name)


def _create(function, shape, dtype, context, requires_grad, name) -> Tensor:
    context = context_arg(context, default_context)
    dims = shape_arg(shape)
    handle = read(function, ctypes.c_void_p, context.handle, enum_arg(DType, dtype, "dtype"),
                  len(dims), _int64_array(dims))
    return _finish(Tensor(handle, context), requires_grad, name)


def from_dlpack(obj, *, context: Context | None = None) -> Tensor:
    """A tensor sharing the memory of a DLPack producer (no copy).

    ``obj`` is anything with ``__dlpack__`` (a NumPy array, a torch tensor,
    an ampx Tensor) or an unconsumed ``"dltensor"`` capsule. It must be on
    the context's device (the default context is the CPU), dense and
    row-major.
    """
    context = context_arg(context, default_context)
    capsule = obj.__dlpack__() if hasattr(obj, "__dlpack__") else obj
    managed = _dlpack.managed_from_capsule(capsule)
    handle = read(lib.ampx_tensor_from_dlpack, ctypes.c_void_p, context.handle, managed)
    _dlpack.mark_consumed(capsule)
    return Tensor(handle, context)


from . import autograd as _autograd  # noqa: E402  (these modules use Tensor)
from . import ops  # noqa: E402
